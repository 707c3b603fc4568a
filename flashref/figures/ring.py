"""Ring attention figures: the schedule as a storyboard, the load per layout, communication against Ulysses."""

from __future__ import annotations

import numpy as np

from .. import ring
from ..iomodel import ring as iom
from ..plots import COLORS, figure
from . import Figure

LAYOUT_COLORS = {"contiguous": COLORS["standard"], "zigzag": COLORS["flashref"], "striped": COLORS["flash2"]}


def _qkv(N, d=2, seed=0):
    rng = np.random.default_rng(seed)
    return tuple(rng.standard_normal((N, d)) for _ in range(3))


def storyboard_data(P=4, N=16, layouts=("contiguous", "zigzag")) -> list[dict]:
    """One row per scored (query, key) pair: which rank scores it, at which step (from the simulator's schedule)."""
    rows = []
    Q, K, V = _qkv(N)
    for layout in layouts:
        fwd = ring.forward(Q, K, V, world_size=P, layout=layout, causal=True)
        pos = fwd.positions
        for r in range(P):
            for t in range(P):
                s = int(fwd.source[r, t])
                for i in pos[r]:
                    for j in pos[s]:
                        if j <= i:
                            rows.append({"layout": layout, "step": t, "rank": r, "kv_of": s, "query": int(i),
                                         "key": int(j)})
    return rows


def plot_storyboard(rows):
    layouts = list(dict.fromkeys(r["layout"] for r in rows))
    P = max(r["rank"] for r in rows) + 1
    N = max(r["query"] for r in rows) + 1
    fig, ax = figure(f"Ring attention schedule, causal, P={P} ranks, N={N} tokens: the scores each rank computes "
                     f"at each step (colour = rank; grey = done before)", ncols=P, nrows=len(layouts),
                     width=2.6 * P, height=3.3 * len(layouts))
    ax = np.atleast_2d(ax)
    cmap = [COLORS[c] for c in ("flashref", "standard", "flash2", "decoding", "blocksparse", "triton", "cudnn",
                                "efficient")]
    for a_row, layout in enumerate(layouts):
        sel = [r for r in rows if r["layout"] == layout]
        for t in range(P):
            a = ax[a_row, t]
            img = np.ones((N, N, 3))
            for r in sel:
                if r["step"] < t:
                    img[r["query"], r["key"]] = (0.85, 0.85, 0.85)
            work = np.zeros(P, dtype=int)
            for r in sel:
                if r["step"] == t:
                    c = cmap[r["rank"] % len(cmap)].lstrip("#")
                    img[r["query"], r["key"]] = tuple(int(c[k:k + 2], 16) / 255 for k in (0, 2, 4))
                    work[r["rank"]] += 1
            a.imshow(img, interpolation="nearest")
            a.set_xticks([])
            a.set_yticks([])
            a.grid(False)
            held = ", ".join(f"{rk}←{(rk - t) % P}" for rk in range(P))
            a.set_title(f"{layout}, step {t}\nrank←K/V of: {held}\nwork per rank {work.tolist()}", fontsize=7.5)
            if t == 0:
                a.set_ylabel("query position i")
            if a_row == len(layouts) - 1:
                a.set_xlabel("key position j")
    return fig


def load_data(P=8, N=256) -> list[dict]:
    """Scored pairs per rank per step, causal, from ``ring.forward(...).work``, for each layout."""
    Q, K, V = _qkv(N)
    rows = []
    for layout in ring.LAYOUTS:
        work = ring.forward(Q, K, V, world_size=P, layout=layout, causal=True).work  # (P ranks, P steps)
        for r in range(P):
            for t in range(P):
                rows.append({"layout": layout, "rank": r, "step": t, "pairs": int(work[r, t])})
    return rows


def plot_load(rows):
    P = max(r["rank"] for r in rows) + 1
    total = sum(r["pairs"] for r in rows if r["layout"] == "contiguous")
    N = round(((8 * total + 1) ** 0.5 - 1) / 2)  # causal: N(N+1)/2 pairs in all
    fig, ax = figure(f"Causal ring attention: load per rank and per step, P={P} ranks, N={N} tokens "
                     f"({N // P} a rank); scored query-key pairs, {total:,} in all", ncols=2, width=10, height=3.8)
    ax = ax.ravel()
    width = 0.27
    for k, layout in enumerate(ring.LAYOUTS):
        sel = [r for r in rows if r["layout"] == layout]
        per_rank = [sum(r["pairs"] for r in sel if r["rank"] == rk) for rk in range(P)]
        per_step_max = [max(r["pairs"] for r in sel if r["step"] == t) for t in range(P)]
        x = np.arange(P) + (k - 1) * width
        ax[0].bar(x, per_rank, width, label=layout, color=LAYOUT_COLORS[layout])
        ax[1].bar(x, per_step_max, width, label=f"{layout}: {sum(per_step_max):,} in all",
                  color=LAYOUT_COLORS[layout])
    ax[0].set(xlabel="rank", ylabel="pairs scored over the whole ring", title="per rank")
    ax[1].set(xlabel="step", ylabel="pairs, busiest rank", title="per step: the busiest rank sets the step's time")
    ax[1].set_ylim(0, 1.3 * max(b.get_height() for b in ax[1].patches))  # room for the legend above the bars
    for a in ax:
        a.legend()
    return fig


def comm_data(N_per_rank=64, d=8, heads=1) -> list[dict]:
    """Forward bytes per rank: simulated ring (== closed form), and Ulysses' all-to-alls, for P = 2..16."""
    rows = []
    for P in (2, 3, 4, 6, 8, 12, 16):
        N = N_per_rank * P
        Q, K, V = _qkv(N, d)
        sim = ring.forward(Q, K, V, world_size=P, layout="zigzag").comm.per_rank.max()
        rows.append({"P": P, "N": N, "ring_simulated": int(sim),
                     "ring_formula": iom.ring_bytes_per_rank(N, d, P, heads=heads),
                     "ulysses_formula": iom.ulysses_bytes_per_rank(N, d, P, heads=heads)})
    return rows


def plot_comm(rows):
    r0 = rows[0]
    n = r0["N"] // r0["P"]
    fig, ax = figure(f"Forward bytes each rank sends, N/P={n} tokens per rank, d=8, 1 head, 2 B/element",
                     width=6.2, height=3.8)
    P = [r["P"] for r in rows]
    ax.plot(P, [r["ring_simulated"] for r in rows], "o", color=COLORS["flashref"], label="ring, simulated")
    ax.plot(P, [r["ring_formula"] for r in rows], "-", color=COLORS["flashref"], label="ring: 2(P−1)/P·N·H·d·b")
    ax.plot(P, [r["ulysses_formula"] for r in rows], "--", color=COLORS["decoding"],
            label="Ulysses: 4(P−1)/P²·N·H·d·b")
    ax.set(xlabel="ranks P (N grows with P)", ylabel="bytes sent per rank", yscale="log")
    ax.legend()
    return fig


FIGURES = [
    Figure("ring_storyboard", storyboard_data, plot_storyboard),
    Figure("ring_load", load_data, plot_load),
    Figure("ring_comm_vs_ulysses", comm_data, plot_comm),
]
