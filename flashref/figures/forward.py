"""Figures: FlashAttention forward (Algorithm 1) HBM traffic against block size, N and M; real footprint.

``flash1_io_vs_block_size``: the setting of the paper's Figure 2 (middle): N = 1024, d = 64,
16 heads x batch 64, fp16, forward only, Br = min(Bc, d). One head is simulated and its count is
checked equal to ``iomodel.predict``; all 1024 (batch, head) pairs move 1024 times as much.

``flash1_io_vs_n``: standard attention and FlashAttention at M = 50,000 elements (100 KB of fp16,
"M around 100KB", §3.2), d = 64, against N on log-log axes, with least-squares slopes.

``flash1_io_vs_sram``: FlashAttention at N = 1024, d = 64 against M over the range of Theorem 2,
d ≤ M ≤ Nd, beside the 1/M law and Proposition 3's floor (4Nd: read Q, K, V and write O once).

``flash1_footprint_vs_sram``: what the paper's blocks Bc = ⌈M/4d⌉, Br = min(⌈M/4d⌉, d) really
hold on chip (measured by running one tile of Algorithm 1), against M itself.

Simulated where it is quick; elsewhere ``iomodel.predict`` (which the tests check equal to the
simulation over hypothesis-drawn shapes), and each row says which.
"""

from __future__ import annotations

import numpy as np

from .. import blocks, flash1, iomodel, standard
from ..iomodel import bounds
from ..plots import COLORS, figure
from . import Figure

DTYPE_BYTES = 2
GB = 1e9


def _qkv(Nq, Nk, d, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((Nq, d)).astype(np.float32), rng.standard_normal((Nk, d)).astype(np.float32),
            rng.standard_normal((Nk, d)).astype(np.float32))


def _check(io, pred, what):
    if (io.reads, io.writes) != (pred.reads, pred.writes):
        raise RuntimeError(f"{what}: simulated IO {io.reads, io.writes} != iomodel {pred.reads, pred.writes}")


def _slope(xs, ys):
    return float(np.polyfit(np.log(xs), np.log(ys), 1)[0])


# ----------------------------------------------------------------------------- 1. vs block size
FIG2_N, FIG2_D, FIG2_HEADS, FIG2_BATCH = 1024, 64, 16, 64
FIG2_BC = (16, 32, 64, 128, 256, 512)


def io_vs_block_size_data() -> list[dict]:
    N, d, H = FIG2_N, FIG2_D, FIG2_HEADS * FIG2_BATCH
    Q, K, V = _qkv(N, N, d)
    std = standard.forward(Q, K, V, dtype_bytes=DTYPE_BYTES).io
    _check(std, iomodel.predict("standard", "forward", Nq=N, Nk=N, d=d), "standard")
    rows = []
    for Bc in FIG2_BC:
        Br = min(Bc, d)
        fwd = flash1.forward(Q, K, V, block_sizes=(Br, Bc), dtype_bytes=DTYPE_BYTES)
        _check(fwd.io, iomodel.predict("flash1", "forward", Nq=N, Nk=N, d=d, block_sizes=(Br, Bc)), f"Bc={Bc}")
        rows.append({"N": N, "d": d, "heads": H, "dtype_bytes": DTYPE_BYTES, "Br": Br, "Bc": Bc, "Tc": -(-N // Bc),
                     "flash1_elements_per_head": fwd.io.total, "flash1_gb": fwd.io.total * H * DTYPE_BYTES / GB,
                     "standard_elements_per_head": std.total, "standard_gb": std.total * H * DTYPE_BYTES / GB,
                     "footprint_elements": fwd.io.peak_sram,
                     "footprint_kb": fwd.io.peak_sram * DTYPE_BYTES / 1024, "source": "simulated one head x heads"})
    return rows


def io_vs_block_size_plot(rows):
    r0 = rows[0]
    fig, ax = figure(f"FlashAttention forward HBM traffic vs block size (paper's Fig. 2 middle setting):\n"
                     f"N={r0['N']}, d={r0['d']}, {FIG2_HEADS} heads x batch {FIG2_BATCH}, fp16, Br=min(Bc, d), "
                     "no mask, no dropout;\none head simulated (= iomodel) x 1024; counted by the model, "
                     "not measured on a GPU", width=7.5, height=4.6)
    Bc = [r["Bc"] for r in rows]
    ax.plot(Bc, [r["flash1_gb"] for r in rows], "o-", color=COLORS["flash1"], label="FlashAttention (Alg. 1)")
    ax.axhline(r0["standard_gb"], color=COLORS["standard"], ls="--",
               label=f"standard attention (Alg. 0): {r0['standard_gb']:.2f} GB")
    m_kb = blocks.DEFAULT_SRAM_BYTES / 1024
    for r in rows:
        over = r["footprint_kb"] > m_kb
        ax.annotate(f"{r['flash1_gb']:.2f} GB\nSRAM {r['footprint_kb']:.0f} KB" + (" > M" if over else ""),
                    (r["Bc"], r["flash1_gb"]), textcoords="offset points", xytext=(4, 6), fontsize=7,
                    color=COLORS["standard"] if over else "k", zorder=5,
                    bbox=dict(boxstyle="square,pad=0.15", fc="white", ec="none"))
    ax.set_xscale("log", base=2)
    ax.set_xlim(Bc[0] / 1.3, Bc[-1] * 1.9)  # room for the last label
    ax.set_xticks(Bc, [str(b) for b in Bc])
    ax.set_xlabel("block size Bc (annotated: GB moved, on-chip footprint per head in KB; red: more than "
                  f"M = {blocks.DEFAULT_SRAM_BYTES // 1000} KB)")
    ax.set_ylabel("HBM reads + writes (GB)")
    ax.set_ylim(0, max(r["flash1_gb"] for r in rows) * 1.15)
    ax.legend(loc="upper right")
    return fig


# ----------------------------------------------------------------------------- 2. vs N
N_SWEEP = tuple(2 ** k for k in range(7, 17))  # 128 ... 65536
N_D = 64
N_M = 50_000  # 100 KB of fp16
SIM_FLASH_MAX_N, SIM_STD_MAX_N = 2048, 1024
FIT_FROM_N = 1024


def io_vs_n_data() -> list[dict]:
    rows = []
    for N in N_SWEEP:
        for alg in ("standard", "flash1"):
            opts = {"sram_size": N_M} if alg == "flash1" else {}
            pred = iomodel.predict(alg, "forward", Nq=N, Nk=N, d=N_D, dtype_bytes=DTYPE_BYTES, **opts)
            source = "iomodel"
            if N <= (SIM_FLASH_MAX_N if alg == "flash1" else SIM_STD_MAX_N):
                io = (flash1 if alg == "flash1" else standard).forward(*_qkv(N, N, N_D), dtype_bytes=DTYPE_BYTES,
                                                                      **opts).io
                _check(io, pred, f"{alg} N={N}")
                source = "simulated"
            rows.append({"algorithm": alg, "N": N, "d": N_D, "sram_size": N_M if alg == "flash1" else "",
                         "heads": 1, "dtype_bytes": DTYPE_BYTES, "elements": pred.total,
                         "bytes": pred.total * DTYPE_BYTES, "source": source})
    for alg in ("standard", "flash1"):
        R = [r for r in rows if r["algorithm"] == alg and r["N"] >= FIT_FROM_N]
        s = _slope([r["N"] for r in R], [r["elements"] for r in R])
        for r in rows:
            if r["algorithm"] == alg:
                r["fitted_slope_N>=1024"] = round(s, 4)
    return rows


def io_vs_n_plot(rows):
    fig, axes = figure(f"HBM traffic of one forward vs sequence length: one head, d={N_D}, fp16; FlashAttention at "
                       f"M={N_M:,} elements (100 KB);\nsimulated for N ≤ {SIM_FLASH_MAX_N} (flash) / "
                       f"{SIM_STD_MAX_N} (standard), iomodel beyond; slopes fitted on N ≥ {FIT_FROM_N}",
                       ncols=2, width=11, height=4.2)
    ax, ax2 = axes.flat
    by = {}
    for alg, label in (("standard", "standard (Alg. 0)"), ("flash1", "FlashAttention (Alg. 1)")):
        R = [r for r in rows if r["algorithm"] == alg]
        Ns = np.array([r["N"] for r in R])
        mb = np.array([r["bytes"] for r in R]) / 1e6
        by[alg] = mb
        ax.loglog(Ns, mb, "o-", color=COLORS[alg], label=f"{label}: slope {R[0]['fitted_slope_N>=1024']:.3f}")
        sim = [r["source"] == "simulated" for r in R]
        ax.scatter(Ns[sim], mb[sim], s=60, facecolor="none", edgecolor="k", zorder=3)
    ax.scatter([], [], s=60, facecolor="none", edgecolor="k", label="simulated point")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("sequence length N")
    ax.set_ylabel("HBM reads + writes (MB)")
    ax.legend(loc="upper left")
    Ns = sorted({r["N"] for r in rows})
    ax2.semilogx(Ns, by["standard"] / by["flash1"], "o-", color="k")
    ax2.set_xscale("log", base=2)
    ax2.set_xlabel("sequence length N")
    ax2.set_ylabel("standard / FlashAttention traffic")
    Br, Bc = blocks.paper_block_sizes(N_M, N_D)
    ax2.axhline(4 * Bc / (3 * N_D + 4), color="k", lw=0.6, ls=":")
    ax2.set_title(f"Both grow as N²: the ratio tends to 4N² / ((3d+4)·N²/Bc) = {4 * Bc / (3 * N_D + 4):.2f}\n"
                  f"(paper's Bc = ⌈M/4d⌉ = {Bc}; ≈ M/(3d²) = {N_M / (3 * N_D ** 2):.2f})", fontsize=8)
    return fig


# ----------------------------------------------------------------------------- 3. vs M
M_N, M_D = 1024, 64
M_SWEEP = tuple(2 ** k for k in range(9, 17))  # 512 ... 65536 = N·d
SIM_MIN_M = 4096


def io_vs_sram_data() -> list[dict]:
    N, d = M_N, M_D
    Q, K, V = _qkv(N, N, d)
    std = iomodel.predict("standard", "forward", Nq=N, Nk=N, d=d).total
    rows = []
    for M in M_SWEEP:
        pred = iomodel.predict("flash1", "forward", Nq=N, Nk=N, d=d, sram_size=M)
        source = "iomodel"
        Br, Bc = iomodel.flash1.block_sizes(Nq=N, Nk=N, d=d, sram_size=M)
        if M >= SIM_MIN_M:
            fwd = flash1.forward(Q, K, V, sram_size=M)
            _check(fwd.io, pred, f"M={M}")
            source = "simulated"
        rows.append({"N": N, "d": d, "heads": 1, "M": M, "Br": Br, "Bc": Bc, "flash1_elements": pred.total,
                     "theta_N2d2_over_M": bounds.flash1_theta(N, d, M),
                     "leading_12_N2d2_over_M": bounds.flash1_forward_leading(N, d, M),
                     "ratio_to_theta": pred.total / bounds.flash1_theta(N, d, M),
                     "prop3_floor_4Nd": bounds.prop3_lower_bound(N, d, M), "standard_elements": std,
                     "source": source})
    return rows


def io_vs_sram_plot(rows):
    r0 = rows[0]
    N, d = r0["N"], r0["d"]
    fig, ax = figure(f"FlashAttention forward HBM traffic vs SRAM size M (Theorem 2 range d ≤ M ≤ Nd):\n"
                     f"one head, N={N}, d={d}, blocks resolved to fit M; simulated for M ≥ {SIM_MIN_M}, "
                     "iomodel below\n(elements; ×2 for fp16 bytes)", width=8, height=4.8)
    M = np.array([r["M"] for r in rows], dtype=float)
    ax.loglog(M, [r["flash1_elements"] for r in rows], "o-", color=COLORS["flash1"], label="FlashAttention, counted")
    ax.loglog(M, [r["leading_12_N2d2_over_M"] for r in rows], "--", color=COLORS["flash1"], alpha=0.6,
              label="1/M law: 12·N²d²/M (paper's blocks, leading term)")
    ax.loglog(M, [r["prop3_floor_4Nd"] for r in rows], ":", color=COLORS["bound"], lw=2,
              label="Prop. 3 floor: 4Nd (read Q, K, V + write O), any M")
    ax.axhline(r0["standard_elements"], color=COLORS["standard"], ls="--", label="standard attention (no M dependence)")
    ax.axvline(N * d, color="k", lw=0.6, ls=":")
    ax.annotate("M = Nd: N²d²/M = Nd, the floor's order", (N * d, r0["prop3_floor_4Nd"]),
                textcoords="offset points", xytext=(-175, 6), fontsize=7)
    for r in rows:
        ax.annotate(f"{r['ratio_to_theta']:.1f}", (r["M"], r["flash1_elements"]), textcoords="offset points",
                    xytext=(3, 4), fontsize=7, color=COLORS["flash1"])
    ax.set_xscale("log", base=2)
    ax.set_xlabel("on-chip SRAM size M (elements per head); labels: counted IO · M / (N²d²)")
    ax.set_ylabel("HBM reads + writes (elements)")
    ax.legend(loc="upper right", fontsize=7)
    return fig


# ----------------------------------------------------------------------------- 4. footprint vs M
FP_D = (64, 128)
FP_M = tuple(sorted(set([2 ** k for k in range(10, 19)] + [50_000])))


def footprint_vs_sram_data() -> list[dict]:
    rows = []
    for d in FP_D:
        for M in FP_M:
            Br, Bc = blocks.paper_block_sizes(M, d)
            # one tile of exactly the paper's blocks, no SRAM limit: the memory measures what is held
            peak = flash1.forward(*_qkv(Br, Bc, d), block_sizes=(Br, Bc)).io.peak_sram
            if peak != flash1.footprint(Br, Bc, d):
                raise RuntimeError("flash1.footprint disagrees with the measured peak")
            Br_fit, Bc_fit = iomodel.flash1.block_sizes(Nq=1 << 20, Nk=1 << 20, d=d, sram_size=M)
            rows.append({"d": d, "M": M, "paper_Br": Br, "paper_Bc": Bc, "paper_footprint": peak,
                         "footprint_over_M": peak / M, "fits": peak <= M, "fitted_Br": Br_fit, "fitted_Bc": Bc_fit,
                         "fitted_footprint": flash1.footprint(Br_fit, Bc_fit, d),
                         "source": "measured (one tile simulated)"})
    return rows


def footprint_vs_sram_plot(rows):
    fig, axes = figure("On-chip footprint per head of Algorithm 1 with the paper's blocks Bc=⌈M/4d⌉, "
                       "Br=min(⌈M/4d⌉, d), measured by the simulator:\nK_j, V_j, Q_i, O_i, S_ij (P̃_ij in place) "
                       "and six row vectors; elements (×2 for fp16 bytes)", ncols=2, width=11, height=4.3)
    ax, ax2 = axes.flat
    Ms = np.array(sorted({r["M"] for r in rows}), dtype=float)
    ax.loglog(Ms, Ms, "k-", lw=1, label="M itself")
    for d, c in zip(FP_D, ("#1f77b4", "#ff7f0e")):
        R = [r for r in rows if r["d"] == d]
        M = [r["M"] for r in R]
        ax.loglog(M, [r["paper_footprint"] for r in R], "o-", color=c, label=f"paper's blocks, d={d}")
        ax.loglog(M, [r["fitted_footprint"] for r in R], "x--", color=c, alpha=0.7,
                  label=f"largest blocks that fit (flashref default), d={d}")
        ax2.semilogx(M, [r["footprint_over_M"] for r in R], "o-", color=c,
                     label=f"d={d}: fits for M ≥ 8d²+24d = {8 * d * d + 24 * d:,}")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ax.set_xlabel("SRAM size M (elements)")
    ax.set_ylabel("on-chip footprint (elements)")
    ax.legend(loc="upper left", fontsize=7)
    ax2.axhline(1, color="k", lw=1)
    ax2.axhline(0.75, color="k", lw=0.6, ls=":")
    ax2.annotate("large M: → 3/4 (2Bc·d + Br·Bc = M/2 + M/4)", (Ms[0], 0.75), textcoords="offset points",
                 xytext=(0, 4), fontsize=7)
    ax2.set_xscale("log", base=2)
    ax2.set_xlabel("SRAM size M (elements)")
    ax2.set_ylabel("footprint of the paper's blocks / M")
    ax2.legend(loc="lower left", bbox_to_anchor=(0.0, 0.1), fontsize=7)
    return fig


FIGURES = [
    Figure("flash1_io_vs_block_size", io_vs_block_size_data, io_vs_block_size_plot),
    Figure("flash1_io_vs_n", io_vs_n_data, io_vs_n_plot),
    Figure("flash1_io_vs_sram", io_vs_sram_data, io_vs_sram_plot),
    Figure("flash1_footprint_vs_sram", footprint_vs_sram_data, footprint_vs_sram_plot),
]
