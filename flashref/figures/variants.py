"""Figures: attention as it is used today (``flashref.variants``), from the closed forms.

``variants_alibi_vs_bias``: HBM traffic of FlashAttention-2's forward against N with no bias,
with ALiBi (−slope·|i − j| computed on chip: the slopes are the only extra reads) and with a
materialised float bias (torch's float ``attn_mask``: read tile by tile, Θ(N²)), beside standard
attention with the same bias. The bias makes FlashAttention's traffic quadratic again.

``variants_io``: three IO sweeps — a sliding window makes the forward's traffic linear in N;
packed GQA divides K/V loads by the group size g when the g-times taller tile fits on chip, or
when Nq is small (decoding), and not at all when the same on-chip rows are split g ways; a paged cache
moves the contiguous cache's bytes plus one block-table entry per page, so small pages cost
more table reads.

Every number is ``iomodel.predict`` (``predict_paged``), which the tests check equal to the simulator.
"""

from __future__ import annotations

from .. import iomodel
from ..plots import COLORS, figure
from . import Figure

D = 64
BLOCKS = (128, 128)  # FlashAttention-2's forward tile for d = 64
NS = (1024, 2048, 4096, 8192, 16384, 32768)
WINDOWS = (512, 2048)
GROUPS = (1, 2, 4, 8, 16)
GQA_N = 8192
PAGE_SIZES = (16, 32, 64, 128, 256)
PAGED_N, PAGED_B = 32768, 8


def alibi_data():
    rows = []
    for N in NS:
        kw = dict(Nq=N, Nk=N, d=D, block_sizes=BLOCKS, causal=True)
        for label, alg, extra in (("flash2", "flash2", {}), ("flash2 + ALiBi", "flash2", {"alibi_slopes": True}),
                                  ("flash2 + bias", "flash2", {"bias": True}),
                                  ("standard + bias", "standard", {"bias": True})):
            p = iomodel.predict(alg, "forward", **kw, **extra)
            rows.append({"N": N, "series": label, "reads": p.reads, "writes": p.writes, "elements": p.total})
    return rows


def alibi_plot(rows):
    fig, ax = figure(f"Forward HBM traffic per head (closed forms = simulator), causal, d={D}, "
                     f"flash2 blocks {BLOCKS[0]}x{BLOCKS[1]}\nALiBi reads one slope per row block; "
                     f"a materialised bias reads N²/2 (causal) elements", width=7.5, height=4.4)
    styles = {"flash2": ("o-", COLORS["flash2"]), "flash2 + ALiBi": ("x--", "black"),
              "flash2 + bias": ("s-", COLORS["decoding"]), "standard + bias": ("^-", COLORS["standard"])}
    for label, (st, c) in styles.items():
        pts = [(r["N"], r["elements"]) for r in rows if r["series"] == label]
        ax.loglog(*zip(*pts), st, color=c, label=label, ms=4)
    ax.set_xlabel("N (= Nq = Nk)")
    ax.set_ylabel("HBM elements read + written")
    ax.legend()
    return fig


def io_data():
    rows = []
    for N in NS:
        for w in (None,) + WINDOWS:
            kw = {} if w is None else {"window": (w - 1, 0)}
            p = iomodel.predict("flash2", "forward", Nq=N, Nk=N, d=D, block_sizes=BLOCKS, causal=True, **kw)
            rows.append({"sweep": "window", "x": N, "series": "causal" if w is None else f"window {w}",
                         "elements": p.total})
    for g in GROUPS:
        cases = (("unpacked, Br=128", False, BLOCKS[0]), ("packed, g·Br=128 rows", True, BLOCKS[0] // g),
                 ("packed, Br=128 (g·128 rows)", True, BLOCKS[0]), ("decode Nq=1, unpacked", False, 1),
                 ("decode Nq=1, packed", True, 1))
        for label, packing, Br in cases:
            Nq = 1 if label.startswith("decode") else GQA_N
            p = iomodel.predict("flash2", "forward", Nq=Nq, Nk=GQA_N, d=D, heads=g, kv_heads=1, enable_gqa=True,
                                gqa_packing=packing, block_sizes=(Br, BLOCKS[1]))
            rows.append({"sweep": "gqa", "x": g, "series": label, "elements": p.by_line["Alg.1 l.7"][0]})
    lens = [PAGED_N] * PAGED_B
    for ps in PAGE_SIZES:
        p = iomodel.predict_paged(Nq=1, d=D, heads=1, page_size=ps, cache_seqlens=lens)
        for series, line in (("block table", "[paged] block_table"), ("K, V", "[paged] load K_j, V_j")):
            rows.append({"sweep": "paged", "x": ps, "series": series, "elements": p.by_line[line][0]})
    return rows


def io_plot(rows):
    fig, axes = figure(f"Variants' HBM traffic (closed forms = simulator), d={D}\n"
                       f"left: flash2 forward per head, causal, blocks {BLOCKS[0]}x{BLOCKS[1]};  middle: K/V loads of "
                       f"one K/V head's group, Nk={GQA_N};  right: decoding, "
                       f"{PAGED_B} sequences of {PAGED_N}", ncols=3, width=12.5, height=4.0)
    ax = axes[0, 0]
    for s in ["causal"] + [f"window {w}" for w in WINDOWS]:
        pts = [(r["x"], r["elements"]) for r in rows if r["sweep"] == "window" and r["series"] == s]
        ax.loglog(*zip(*pts), "o-", label=s, ms=3)
    ax.set_xlabel("N")
    ax.set_ylabel("HBM elements")
    ax.set_title("sliding window: linear in N")
    ax.legend()
    ax = axes[0, 1]
    for s, st in (("unpacked, Br=128", "o-"), ("packed, g·Br=128 rows", "s--"), ("packed, Br=128 (g·128 rows)", "^-"),
                  ("decode Nq=1, unpacked", "o:"), ("decode Nq=1, packed", "s:")):
        pts = [(r["x"], r["elements"]) for r in rows if r["sweep"] == "gqa" and r["series"] == s]
        ax.loglog(*zip(*pts), st, label=s, ms=4, base=2)
    ax.set_xlabel("query heads per K/V head g")
    ax.set_ylabel("K, V elements loaded")
    ax.set_title("GQA: packing shares each K/V tile\n(if the taller tile fits, or Nq is small)")
    ax.set_ylim(2**19, 2**34)  # room above the prefill lines for the legend
    ax.legend(fontsize=7, loc="upper left")  # over the small g, where the lines are at 2^26-2^28: covers none
    ax = axes[0, 2]
    for s, st in (("K, V", "o-"), ("block table", "s--")):
        pts = [(r["x"], r["elements"]) for r in rows if r["sweep"] == "paged" and r["series"] == s]
        ax.loglog(*zip(*pts), st, label=s, ms=4, base=2)
    ax.set_xlabel("page size (slots)")
    ax.set_ylabel("HBM elements read")
    ax.set_title("paged KV: same bytes + one entry per page")
    ax.legend()
    return fig


FIGURES = [Figure("variants_alibi_vs_bias", alibi_data, alibi_plot), Figure("variants_io", io_data, io_plot)]
