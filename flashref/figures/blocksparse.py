"""Figures: block-sparse FlashAttention's IO against density and against N (Proposition 4); split-KV decoding.

``blocksparse_io_vs_density``: forward and backward HBM traffic of Algorithm 5 (and its backward)
at N = 1024, d = 64 against the fraction s of nonzero blocks, for random block masks and the
named patterns (butterfly, local, causal). The points are affine in the number of nonzero blocks;
Proposition 4's Θ(Nd + N²d²s/M) is drawn with the two constants Θ hides
(:func:`flashref.iomodel.blocksparse.prop4_constants`; the CSV's ``prop4_with_constants``, beside ``prop4``,
the bare Nd + N²d²s/M). The smallest
densities are also *simulated* (``blocksparse.forward``) and must equal the closed form.

``blocksparse_io_vs_n``: forward IO against N on log-log axes for s = 1 (dense), s = N^(-1/2)
(Θ(N√N)) and the butterfly (s ≈ log₂N/N, Θ(N log N)), with the fitted slopes of the last
points in the legend.

``decoding_io_parallelism``: one query per head (batch 1, 32 heads, d = 128) against a cache of
length Nk: HBM traffic of split-KV decoding with 1 split and with the default number of splits
(relative to streaming the cache once, 2·Nk·d per head), and the SM utilisation on an H100
(132 SMs) that the splits buy.

Every count comes from ``iomodel`` closed forms that the tests check equal to the simulator.
"""

from __future__ import annotations

import numpy as np

from .. import blocksparse, decoding, iomodel
from ..iomodel import blocksparse as io_blocksparse
from ..iomodel import decoding as io_decoding
from ..plots import COLORS, figure
from . import Figure

D = 64
N_DENSITY = 1024
SRAM = 8192  # elements per head (16 KB of fp16): small enough that Tc is large at N = 1024
DENSITIES = (0.0, 0.02, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
N_SWEEP = tuple(2**k for k in range(9, 16))
DEC_HEADS, DEC_D, DEC_SMS = 32, 128, 132
DEC_NK = tuple(2**k for k in range(7, 18))
DEC_FIXED_NK = 8192
DEC_SPLITS = tuple(range(1, 33))


def _predict(direction, N, M, d=D, sram=SRAM):
    return iomodel.predict("blocksparse", direction, Nq=N, Nk=N, d=d, block_mask=M, sram_size=sram).total


def density_data() -> list[dict]:
    g = blocksparse.grid(N_DENSITY, N_DENSITY, D, sram_size=SRAM)
    patterns = [(f"random s={s}", "random", blocksparse.random_blocks(g.Tr, g.Tc, s, seed=0)) for s in DENSITIES]
    patterns += [("butterfly", "butterfly", blocksparse.butterfly_blocks(g.Tr, g.Tc)),
                 ("local w=128", "local", blocksparse.local_blocks(N_DENSITY, N_DENSITY, g.Br, g.Bc, 128)),
                 ("causal", "causal", blocksparse.causal_blocks(N_DENSITY, N_DENSITY, g.Br, g.Bc))]
    c1, c2 = io_blocksparse.prop4_constants(D, SRAM, g.Bc)  # the two constants Θ hides, drawn dashed
    rows = []
    for name, kind, M in patterns:
        fwd, bwd = _predict("forward", N_DENSITY, M), _predict("backward", N_DENSITY, M)
        s = float(M.mean())
        rows.append({"pattern": name, "kind": kind, "N": N_DENSITY, "d": D, "M": SRAM, "Br": g.Br, "Bc": g.Bc,
                     "nonzero_blocks": int(M.sum()), "density": s, "forward_io": fwd,
                     "backward_io": bwd, "prop4": io_blocksparse.prop4(N_DENSITY, D, SRAM, s),
                     "prop4_with_constants": c1 * N_DENSITY * D + c2 * N_DENSITY**2 * D**2 * s / SRAM})
    # Simulate the sparsest random mask at full size (cheap: few blocks) as a check of the closed form.
    rng = np.random.default_rng(0)
    Q, K, V = (rng.standard_normal((N_DENSITY, D)) for _ in range(3))
    sparse = patterns[1][2]
    sim = blocksparse.forward(Q, K, V, sparse, sram_size=SRAM).io.total
    assert sim == rows[1]["forward_io"], "closed form and simulation disagree"
    return rows


def density_plot(rows):
    fig, ax = figure(f"Block-sparse FlashAttention HBM traffic vs density\n(N={N_DENSITY}, d={D}, M={SRAM} "
                     f"elements, Br={rows[0]['Br']}, Bc={rows[0]['Bc']}, one head)")
    rnd = [r for r in rows if r["kind"] == "random"]
    s = np.array([r["density"] for r in rnd])
    for key, style, label in (("forward_io", "-o", "forward (Alg. 5)"), ("backward_io", "-s", "backward")):
        y = np.array([r[key] for r in rnd], dtype=float)
        slope = np.polyfit([r["nonzero_blocks"] for r in rnd], y, 1)[0]  # named in the legend, not on the plot
        ax.plot(s, y / 1e6, style, color=COLORS["blocksparse"], ms=3.5,
                label=f"{label}, random masks: {slope:,.0f} elements per nonzero block",
                alpha=1.0 if key == "forward_io" else 0.6)
    c1, c2 = io_blocksparse.prop4_constants(D, SRAM, rows[0]["Bc"])
    p4 = np.array([float(r["prop4_with_constants"]) for r in rnd])
    ax.plot(s, p4 / 1e6, "--", color=COLORS["bound"], label=f"Prop. 4 form {c1:.2f}·Nd + {c2:.1f}·N²d²s/M")
    for r, marker in zip([r for r in rows if r["kind"] != "random"], ("*", "D", "^")):
        ax.plot(r["density"], r["forward_io"] / 1e6, marker, color="k", ms=7, ls="none",
                label=f"forward, {r['pattern']} (s={r['density']:.2f})")
    ax.set_xlabel("fraction of nonzero blocks s")
    ax.set_ylabel("HBM traffic (million elements)")
    top = max(r["backward_io"] for r in rows) / 1e6
    ax.set_ylim(-0.03 * top, 1.8 * top)  # room above the curves for the legend
    ax.legend(loc="upper left", fontsize=7)
    return fig


def n_data() -> list[dict]:
    rows = []
    for N in N_SWEEP:
        g = blocksparse.grid(N, N, D, sram_size=SRAM)
        for kind, M in (("dense", np.ones((g.Tr, g.Tc), dtype=bool)),
                        ("s = N^-1/2", blocksparse.random_blocks(g.Tr, g.Tc, N**-0.5, seed=0)),
                        ("butterfly", blocksparse.butterfly_blocks(g.Tr, g.Tc))):
            rows.append({"pattern": kind, "N": N, "d": D, "M": SRAM, "Br": g.Br, "Bc": g.Bc,
                         "nonzero_blocks": int(M.sum()), "density": float(M.mean()),
                         "forward_io": _predict("forward", N, M)})
    return rows


def slopes(rows, pattern, last=3) -> float:
    """Log-log slope of forward IO against N over the last ``last`` points of ``pattern``."""
    pts = [(r["N"], r["forward_io"]) for r in rows if r["pattern"] == pattern][-last:]
    N, y = np.array(pts, dtype=float).T
    return float(np.polyfit(np.log(N), np.log(y), 1)[0])


def n_plot(rows):
    fig, ax = figure(f"Block-sparse forward HBM traffic vs N (d={D}, M={SRAM} elements, one head)\n"
                     "slopes fitted over the last 3 points; dotted: N², N^1.5, N·log₂N")
    for pattern, color in (("dense", COLORS["flash1"]), ("s = N^-1/2", COLORS["blocksparse"]),
                           ("butterfly", COLORS["flash2"])):
        pts = [r for r in rows if r["pattern"] == pattern]
        ax.loglog([r["N"] for r in pts], [r["forward_io"] for r in pts], "-o", ms=3.5, color=color,
                  label=f"{pattern}: slope {slopes(rows, pattern):.2f}")
    N = np.array(N_SWEEP, dtype=float)
    for pattern, shape in (("dense", N**2), ("s = N^-1/2", N**1.5), ("butterfly", N * np.log2(N))):
        last = [r["forward_io"] for r in rows if r["pattern"] == pattern][-1]
        ax.loglog(N, last * shape / shape[-1], ":", color=COLORS["bound"], lw=0.9)
    ax.set_xlabel("sequence length N")
    ax.set_ylabel("HBM traffic (elements)")
    ax.legend(loc="upper left")
    return fig


def decoding_data() -> list[dict]:
    """Rows for three panels: against Nk (three configurations), and against num_splits at DEC_FIXED_NK."""
    rows = []

    def row(panel, label, Nk, S):
        Br, Bc, splits = io_decoding.resolve(Nq=1, Nk=Nk, d=DEC_D, heads=DEC_HEADS, num_splits=S, sms=DEC_SMS)
        io = iomodel.predict("decoding", "forward", Nq=1, Nk=Nk, d=DEC_D, heads=DEC_HEADS, num_splits=S,
                             sms=DEC_SMS).total
        items = io_decoding.work_items(Nq=1, Nk=Nk, d=DEC_D, heads=DEC_HEADS, num_splits=S, sms=DEC_SMS)
        par = decoding.parallelism(items, DEC_SMS)
        rows.append({"panel": panel, "config": label, "Nk": Nk, "d": DEC_D, "heads": DEC_HEADS, "Bc": Bc,
                     "num_splits": splits, "io": io, "io_over_cache": io / (DEC_HEADS * 2 * Nk * DEC_D),
                     "work_items": items, "waves": par["waves"], "sm_utilisation": par["utilisation"]})

    for Nk in DEC_NK:
        for label, S in (("1 split", 1), ("default splits", None), ("16 splits", 16)):
            row("vs Nk", label, Nk, S)
    for S in DEC_SPLITS:
        row("vs splits", f"Nk={DEC_FIXED_NK}", DEC_FIXED_NK, S)
    return rows


def decoding_plot(rows):
    fig, axes = figure(f"Split-KV decoding: 1 query per head, {DEC_HEADS} heads, batch 1, d={DEC_D}, "
                       f"H100 ({DEC_SMS} SMs, one work item per SM), default SRAM (Bc={rows[0]['Bc']})",
                       ncols=3, width=13, height=3.8)
    a, b, c = axes[0]
    styles = {"1 split": ("-o", COLORS["flash2"]), "default splits": ("-s", COLORS["decoding"]),
              "16 splits": ("--^", COLORS["blocksparse"])}
    for label, (st, color) in styles.items():
        pts = [r for r in rows if r["panel"] == "vs Nk" and r["config"] == label]
        Nk = [r["Nk"] for r in pts]
        a.semilogx(Nk, [r["io_over_cache"] for r in pts], st, ms=3.5, color=color, label=label, base=2)
        b.semilogx(Nk, [100 * r["sm_utilisation"] for r in pts], st, ms=3.5, color=color, base=2,
                   label=label if label != "default splits" else "default splits (number annotated)")
        if label == "default splits":
            for r in pts:
                b.annotate(str(r["num_splits"]), (r["Nk"], 100 * r["sm_utilisation"]), fontsize=7,
                           textcoords="offset points", xytext=(0, -11), ha="center")
    a.set_xlabel("cache length Nk")
    a.set_ylabel("HBM traffic / (2·Nk·d per head)")
    a.set_title("traffic relative to streaming the cache once")
    a.legend()
    b.set_xlabel("cache length Nk")
    b.set_ylabel("SM utilisation, %")
    b.set_ylim(0, 105)
    b.set_title("work items = heads × splits")
    b.legend(loc="center right")
    pts = [r for r in rows if r["panel"] == "vs splits"]
    S = [r["num_splits"] for r in pts]
    c.plot(S, [100 * r["sm_utilisation"] for r in pts], "-o", ms=3, color=COLORS["decoding"],
           label="SM utilisation (wave quantisation)")
    c.set_xlabel("num_splits")
    c.set_ylabel("SM utilisation, %")
    c.set_ylim(0, 105)
    c2 = c.twinx()
    c2.plot(S, [100 * (r["io_over_cache"] - 1) for r in pts], "--", color=COLORS["bound"],
            label="extra HBM traffic, % of the cache")
    c2.set_ylabel("extra HBM traffic, %")
    c.set_title(f"Nk = {DEC_FIXED_NK}: more splits, more partials")
    h1, l1 = c.get_legend_handles_labels()
    h2, l2 = c2.get_legend_handles_labels()
    c.legend(h1 + h2, l1 + l2, loc="lower right")  # below both curves there: covers no point
    return fig


FIGURES = [Figure("blocksparse_io_vs_density", density_data, density_plot),
           Figure("blocksparse_io_vs_n", n_data, n_plot),
           Figure("decoding_io_parallelism", decoding_data, decoding_plot)]
