"""Figures: FlashAttention-2 against standard attention and FlashAttention.

``flash2_io_vs_n``: HBM traffic of the forward and the backward of standard / flash1 / flash2
against N, without and with a causal mask, from the closed forms ``iomodel.predict`` (which the
tests check equal to the simulator, count for count).

``flash2_flops``: matmul and non-matmul FLOPs of the three algorithms' forward and backward, from
running the simulator at N = 1024, and the same weighted by how much dearer a non-matmul FLOP is
on an A100 (312 TFLOP/s fp16 matmul vs 19.5 TFLOP/s fp32, ``hardware``: 16x).

``flash2_parallelism``: wave efficiency (busy SM time / total) of FlashAttention (batch·heads
thread blocks) and FlashAttention-2 (forward ·Tr, backward ·Tc) on an A100 (108 SMs) and an H100
(132 SMs), against batch·heads and against N (:mod:`flashref.parallelism`).

``flash2_warp_smem``: shared-memory traffic per tile of split-K (FlashAttention) and split-Q
(FlashAttention-2) inside one thread block, counted on the simulator.
"""

from __future__ import annotations

import numpy as np

from .. import flash1, flash2, hardware, iomodel, parallelism, standard
from ..plots import COLORS, figure
from . import Figure

D = 64
SRAM_BYTES = 100_000  # the paper's "M around 100KB" (fp16: 50,000 elements), blocks from blocks.resolve
DTYPE_BYTES = 2
IO_NS = (256, 512, 1024, 2048, 4096, 8192, 16384)
FLOP_N = 1024
FLOP_BLOCKS = (128, 128)  # FlashAttention-2's tile for d = 64 (flash_fwd_launch_template.h)
ALGS = ("standard", "flash1", "flash2")
FA2_FWD_BLOCKS = (128, 128)


def _io(alg, direction, N, causal, block_sizes=None):
    """Elements moved per head, or None where the closed form is not available."""
    try:
        p = iomodel.predict(alg, direction, Nq=N, Nk=N, d=D, causal=causal, block_sizes=block_sizes,
                            sram_size=SRAM_BYTES // DTYPE_BYTES, dtype_bytes=DTYPE_BYTES)
    except (ValueError, ImportError, AttributeError):
        return None
    return p.total


def io_data():
    rows = []
    for N in IO_NS:
        for causal in (False, True):
            for alg in ALGS:
                for direction in ("forward", "backward"):
                    rows.append({"N": N, "causal": causal, "algorithm": alg, "direction": direction,
                                 "elements": _io(alg, direction, N, causal)})
            # FlashAttention-2's own forward tile (Br = Bc = 128 for d = 64) also fits M = 50,000
            # elements (footprint 49,536): K, V are then read N/128 times instead of N/64.
            rows.append({"N": N, "causal": causal, "algorithm": "flash2 Br=Bc=128", "direction": "forward",
                         "elements": _io("flash2", "forward", N, causal, FA2_FWD_BLOCKS)})
    return rows


def io_plot(rows):
    fig, axes = figure(f"HBM traffic per head vs N (closed forms, equal to the simulator), d={D},\n"
                       f"M={SRAM_BYTES // 1000} KB = {SRAM_BYTES // DTYPE_BYTES} fp16 elements, blocks: blocks.resolve",
                       ncols=2, nrows=2, width=9.0, height=6.5)
    for r, direction in enumerate(("forward", "backward")):
        for c, causal in enumerate((False, True)):
            ax = axes[r, c]
            for alg in ALGS + ("flash2 Br=Bc=128",):
                pts = [(x["N"], x["elements"]) for x in rows if x["algorithm"] == alg and x["direction"] == direction
                       and x["causal"] == causal and x["elements"] not in (None, "")]
                if pts:
                    style = "s--" if alg.startswith("flash2 ") else "o-"
                    # flash1 lies on flash2 (causal forward) or on flash2 Br=Bc=128 (forward, large N): drawn
                    # wide and pale under them, so that it stays visible where they overlap
                    wide = dict(lw=4, alpha=0.45) if alg == "flash1" else {}
                    ax.loglog(*zip(*pts), style, color=COLORS[alg.split()[0]], label=alg, ms=3, **wide)
            ax.set_title(f"{direction}, {'causal' if causal else 'no mask'}")
            ax.set_xlabel("sequence length N (Nq = Nk)")
            ax.set_ylabel("HBM elements read + written")
            ax.legend()
    return fig


def _run(alg, causal, Q, K, V, dO):
    opts = dict(causal=causal)
    if alg == "standard":
        f = standard.forward(Q, K, V, **opts)
        b = standard.backward(Q, K, V, dO, f.P, **opts)
    elif alg == "flash1":
        f = flash1.forward(Q, K, V, block_sizes=FLOP_BLOCKS, **opts)
        b = flash1.backward(Q, K, V, f.O, dO, f.l, f.m, block_sizes=FLOP_BLOCKS, **opts)
    else:
        f = flash2.forward(Q, K, V, block_sizes=FLOP_BLOCKS, **opts)
        b = flash2.backward(Q, K, V, f.O, dO, f.L, block_sizes=FLOP_BLOCKS, **opts)
    return f.flops, b.flops


def flops_data():
    rng = np.random.default_rng(0)
    Q, K, V, dO = (rng.standard_normal((FLOP_N, D)) for _ in range(4))
    a100 = hardware.get("A100")
    w = a100.matmul_flops / a100.nonmatmul_flops  # 16: a non-matmul FLOP costs 16 matmul FLOPs
    rows = []
    for causal in (False, True):
        for alg in ALGS:
            for direction, fl in zip(("forward", "backward"), _run(alg, causal, Q, K, V, dO)):
                rows.append({"algorithm": alg, "direction": direction, "causal": causal,
                             "matmul": fl.matmul, "nonmatmul": fl.nonmatmul, "nonmatmul_weight": w,
                             "a100_matmul_equivalent": fl.matmul + w * fl.nonmatmul})
    return rows


def flops_plot(rows):
    w = rows[0]["nonmatmul_weight"]
    fig, axes = figure(f"FLOPs per head, simulated: N={FLOP_N}, d={D}, blocks Br=Bc={FLOP_BLOCKS[0]} (flash1, flash2)\n"
                       f"non-matmul FLOPs weighted x{w:g} (A100: 312 TFLOP/s fp16 matmul vs 19.5 TFLOP/s fp32)",
                       ncols=2, width=9.5, height=4.0)
    for ax, causal in zip(axes.flat, (False, True)):
        labels, x = [], 0
        for direction in ("forward", "backward"):
            for alg in ALGS:
                r = next(r for r in rows if r["algorithm"] == alg and r["direction"] == direction
                         and r["causal"] == causal)
                mm, nm = r["matmul"] / 1e6, w * r["nonmatmul"] / 1e6
                ax.bar(x, mm, color=COLORS[alg], alpha=0.9, label="matmul" if x == 0 else None)
                ax.bar(x, nm, bottom=mm, color=COLORS[alg], alpha=0.35, hatch="//",
                       label=f"non-matmul x{w:g}" if x == 0 else None)
                labels.append(f"{alg}\n{'fwd' if direction == 'forward' else 'bwd'}")
                x += 1
            x += 0.5
        ax.set_xticks([i + (0.5 if i >= 3 else 0) for i in range(6)], labels, fontsize=7)
        ax.set_ylabel("MFLOP (matmul-equivalent on an A100)")
        ax.set_title("causal" if causal else "no mask")
        ax.legend()
    return fig


PAR_N = 2048
PAR_BH = (1, 2, 4, 8, 16, 32, 64, 128, 256)
PAR_SERIES = (("flash1", "forward"), ("flash2", "forward"), ("flash2", "backward"))
PAR_GPUS = ("A100", "H100")
PAR_FIXED_BH = 16


def parallelism_data():
    rows = []
    for gpu in PAR_GPUS:
        for alg, direction in PAR_SERIES:
            for bh in PAR_BH:
                o = parallelism.occupancy(alg, direction, batch=1, heads=bh, Nq=PAR_N, gpu=gpu)
                rows.append({"sweep": "batch*heads", "gpu": gpu, "sms": o["slots"], "algorithm": alg,
                             "direction": direction, "batch_heads": bh, "N": PAR_N, **o})
            for N in IO_NS:
                o = parallelism.occupancy(alg, direction, batch=1, heads=PAR_FIXED_BH, Nq=N, gpu=gpu)
                rows.append({"sweep": "N", "gpu": gpu, "sms": o["slots"], "algorithm": alg,
                             "direction": direction, "batch_heads": PAR_FIXED_BH, "N": N, **o})
    return rows


def parallelism_plot(rows):
    B = parallelism.DEFAULT_BLOCK
    fig, axes = figure(f"Wave efficiency = items / (waves x SMs), one thread block per SM, Br=Bc={B}, Nq=Nk=N\n"
                       f"work items: flash1 batch*heads, flash2 forward batch*heads*Tr, backward batch*heads*Tc",
                       ncols=2, nrows=2,
                       width=9.0, height=6.5)
    # flash2's backward has Tc work items where the forward has Tr: equal here (Nq = Nk, Br = Bc), so its
    # curve lies on the forward's; it is drawn as large hollow markers in a darker green to stay visible.
    styles = {("flash1", "forward"): dict(fmt="o-", color=COLORS["flash1"], ms=3),
              ("flash2", "forward"): dict(fmt="s-", color=COLORS["flash2"], ms=3),
              ("flash2", "backward"): dict(fmt="o", color="#0b4f0b", ms=7, mfc="none", mew=1.2)}
    for c, gpu in enumerate(PAR_GPUS):
        for r, (sweep, xkey) in enumerate((("batch*heads", "batch_heads"), ("N", "N"))):
            ax = axes[r, c]
            for alg, direction in PAR_SERIES:
                pts = [(x[xkey], x["efficiency"]) for x in rows if x["sweep"] == sweep and x["gpu"] == gpu
                       and x["algorithm"] == alg and x["direction"] == direction]
                st = dict(styles[(alg, direction)])
                label = {"flash1": "flash1 forward (= its backward)", "flash2": "flash2 forward"}[alg] \
                    if direction == "forward" else "flash2 backward (Tc = Tr here: on the forward)"
                ax.semilogx(*zip(*pts), st.pop("fmt"), label=label, **st)
            sms = next(x["sms"] for x in rows if x["gpu"] == gpu)
            fixed = f"N={PAR_N}" if sweep == "batch*heads" else f"batch*heads={PAR_FIXED_BH}"
            ax.set_title(f"{gpu} ({sms} SMs), {fixed}")
            ax.set_xlabel(sweep)
            ax.set_ylabel("wave efficiency")
            ax.set_ylim(0, 1.5)  # the legend sits above the curves (efficiency <= 1), covering none of them
            ax.set_yticks([0, 0.2, 0.4, 0.6, 0.8, 1.0])
            ax.legend(loc="upper left", fontsize=7)
    return fig


SMEM_CASES = ((64, 64, 64), (128, 128, 64), (128, 64, 128))  # (Br, Bc, d)
SMEM_WARPS, SMEM_INNER = 4, 8


def smem_data():
    rows = []
    for Br, Bc, d in SMEM_CASES:
        for scheme in parallelism.SCHEMES:
            t = parallelism.smem_traffic(scheme, Br=Br, Bc=Bc, d=d, warps=SMEM_WARPS, inner=SMEM_INNER)
            rows.append({"Br": Br, "Bc": Bc, "d": d, "scheme": scheme, **t.per_tile(),
                         "exchange_buffer": t.exchange_buffer})
    return rows


def smem_plot(rows):
    fig, ax = figure(f"Shared-memory traffic per tile inside one thread block, simulated: {SMEM_WARPS} warps, "
                     f"{SMEM_INNER} inner iterations", width=7.5, height=3.8)
    colors = {"split-K": COLORS["flash1"], "split-Q": COLORS["flash2"]}
    for k, r in enumerate(rows):
        x = k + (k // 2) * 0.6
        op, ex = r["operand_reads"] / 1e3, (r["exchange_writes"] + r["exchange_reads"]) / 1e3
        ax.bar(x, op, color=colors[r["scheme"]], label=f"{r['scheme']}: Q/K/V operand reads" if k < 2 else None)
        ax.bar(x, ex, bottom=op, color=colors[r["scheme"]], alpha=0.35, hatch="//",
               label="split-K: partial (m, l, O) written + read back" if k == 0 else None)
        ax.text(x, op + ex, f"{r['scheme']}\n{r['syncs']:g} sync", ha="center", va="bottom", fontsize=6.5)
    ax.set_xticks([k + (k // 2) * 0.6 for k in range(0, len(rows), 2)],
                  [f"Br={r['Br']}, Bc={r['Bc']}, d={r['d']}" for r in rows[::2]])
    ax.set_ylabel("thousand elements per tile")
    ax.legend(loc="upper left")
    return fig


FIGURES = [
    Figure("flash2_io_vs_n", io_data, io_plot),
    Figure("flash2_flops", flops_data, flops_plot),
    Figure("flash2_parallelism", parallelism_data, parallelism_plot),
    Figure("flash2_warp_smem", smem_data, smem_plot),
]
