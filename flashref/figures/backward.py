"""Figures for the backward pass: a tiny training run on flashref's attention, and Figure 2 (left).

``backward_training``: a one-layer, single-head causal attention model learns a running-maximum
task on synthetic sequences, once with :func:`flashref.functional.scaled_dot_product_attention`
(Algorithm 2 forward, Algorithm 4 backward, 5 x 5 tiles) and once with
``torch.nn.functional.scaled_dot_product_attention``, same seed, same data, float64. The two loss
curves overlap: the reference algorithms compute the same gradients as PyTorch's kernels.

``backward_figure2_table``: the FlashAttention paper's Figure 2 (left), GPT-2 medium attention
(N = 1024, d = 64, 16 heads, batch 64, fp16), forward + backward, standard attention against
FlashAttention. flashref's GFLOPs and HBM GB come from the simulator's counts for one head
multiplied by 16 x 64 = 1024 heads; its runtime is the A100 roofline of those counts. The paper's
figures (both official versions) are citations, typed in as constants with their source; the H100
DRAM measurements are loaded from the recorded runs in ``figures/gpu/``.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from .. import flash1, standard
from ..plots import COLORS, figure
from . import Figure

try:  # GPU specs with their sources (A100 datasheet; FlashAttention-2 §3.1)
    from ..hardware import A100_40GB as _A100
    from ..hardware import time_estimate as _time_estimate

    A100_HBM_BANDWIDTH = _A100.hbm_bandwidth
    A100_MATMUL_FLOPS = _A100.matmul_flops
    A100_NONMATMUL_FLOPS = _A100.nonmatmul_flops
    A100_SMEM_PER_SM = _A100.smem_per_sm
except ImportError:  # pragma: no cover - the same numbers, if flashref.hardware is absent
    A100_HBM_BANDWIDTH = 1.555e12  # A100 40GB datasheet: 1,555 GB/s HBM2 (80GB: 2,039 GB/s)
    A100_MATMUL_FLOPS = 312e12  # A100 datasheet, FlashAttention-2 §3.1: fp16 tensor-core matmul
    A100_NONMATMUL_FLOPS = 19.5e12  # A100 datasheet, FlashAttention-2 §3.1: fp32 non-matmul
    A100_SMEM_PER_SM = 164 * 1024  # A100 whitepaper: up to 164 KB of the 192 KB L1 as shared memory
    _time_estimate = None


def roofline_seconds(matmul, nonmatmul, bytes_moved) -> float:
    """``max(matmul / 312 TFLOP/s, non-matmul / 19.5 TFLOP/s, bytes / 1.555 TB/s)`` on an A100 40GB."""
    if _time_estimate is not None:
        return _time_estimate(matmul, nonmatmul, bytes_moved, _A100)
    return max(matmul / A100_MATMUL_FLOPS, nonmatmul / A100_NONMATMUL_FLOPS, bytes_moved / A100_HBM_BANDWIDTH)


# ------------------------------------------------------------------------------------ training

TRAIN = dict(steps=300, batch=16, N=12, d=16, lr=5e-3, seed=0, block_sizes=(5, 5))


def _model(d: int, seed: int):
    import torch

    torch.manual_seed(seed)
    lin = lambda i, o: torch.nn.Linear(i, o, dtype=torch.float64)  # noqa: E731
    return torch.nn.ModuleDict({"embed": lin(2, d), "qkv": lin(d, 3 * d), "out_proj": lin(d, d), "head": lin(d, 1)})


def _forward(model, x, attention):
    h = model["embed"](x)  # (B, N, d)
    q, k, v = model["qkv"](h).chunk(3, dim=-1)  # (B, N, d) each
    h = h + model["out_proj"](attention(q, k, v))  # one causal single-head attention layer, residual
    return model["head"](h).squeeze(-1)  # (B, N)


def _batch(g, batch: int, N: int):
    """Synthetic task: position i must output max(x_0..x_i). Features: the value and i/N."""
    import torch

    vals = torch.randn(batch, N, generator=g, dtype=torch.float64)
    pos = torch.arange(N, dtype=torch.float64).expand(batch, N) / N
    return torch.stack([vals, pos], dim=-1), vals.cummax(dim=1).values


def train_tiny(attention: str, steps: int = TRAIN["steps"], batch: int = TRAIN["batch"], N: int = TRAIN["N"],
               d: int = TRAIN["d"], lr: float = TRAIN["lr"], seed: int = TRAIN["seed"],
               block_sizes=TRAIN["block_sizes"]) -> list[float]:
    """Train the tiny model with ``attention`` = "torch" (PyTorch SDPA) or a flashref algorithm name.

    Same initial weights, same batches, same optimiser for every ``attention``; returns the loss per step.
    """
    import torch
    import torch.nn.functional as F  # noqa: N812

    from ..functional import scaled_dot_product_attention

    if attention == "torch":
        def attn(q, k, v):
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    else:
        def attn(q, k, v):
            return scaled_dot_product_attention(q, k, v, is_causal=True, algorithm=attention,
                                                block_sizes=block_sizes)
    model = _model(d, seed)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    g = torch.Generator().manual_seed(seed + 1)
    losses = []
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny tensors: threads only add synchronisation (and contention on 2 cores)
    try:
        for _ in range(steps):
            x, y = _batch(g, batch, N)
            loss = F.mse_loss(_forward(model, x, attn), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
    finally:
        torch.set_num_threads(threads)
    return losses


#: Significant digits kept in backward_training.csv. The two runs differ by float64 rounding (a few
#: 1e-15 relative), and so do the same runs on two CPUs (different BLAS summation orders): rounded to
#: 10 digits, the file is the same on every machine and ``python -m flashref figures`` leaves a clean
#: clone clean. notebook 04 prints the unrounded gap.
TRAIN_DIGITS = 10


def _rounded(x: float) -> float:
    return float(f"{x:.{TRAIN_DIGITS - 1}e}")


def training_data() -> list[dict]:
    ours, ref = train_tiny("flash1"), train_tiny("torch")
    return [{"step": s, "loss_flashref": _rounded(a), "loss_torch": _rounded(b)}
            for s, (a, b) in enumerate(zip(ours, ref))]


def training_plot(rows):
    steps = [r["step"] for r in rows]
    a = np.array([float(r["loss_flashref"]) for r in rows])
    b = np.array([float(r["loss_torch"]) for r in rows])
    c = TRAIN
    fig, ax = figure(f"1-layer single-head causal attention, running-max task:\n{c['steps']} steps, batch "
                     f"{c['batch']}, N={c['N']}, d={c['d']}, Adam lr={c['lr']}, float64, seed {c['seed']}",
                     width=7.5, height=3.8)
    ax.plot(steps, b, color=COLORS["standard"], lw=3, alpha=0.5, label="torch SDPA")
    ax.plot(steps, a, color=COLORS["flash1"], lw=1, ls="--",
            label=f"flashref flash1 (Alg. 2 + 4, tiles {c['block_sizes'][0]}x{c['block_sizes'][1]})")
    ax.set(xlabel="step", ylabel="training loss (MSE)", yscale="log", title="loss curves")
    ax.legend(loc="upper right")
    # The gap is float64 rounding (a few 1e-15 relative; notebook 04 prints it): too small to draw, and
    # machine-dependent, so the figure states how many steps agree to TRAIN_DIGITS digits instead.
    same = sum(f"{x:.{TRAIN_DIGITS - 1}e}" == f"{y:.{TRAIN_DIGITS - 1}e}" for x, y in zip(a, b))
    ax.text(0.02, 0.04, f"the two losses agree to {TRAIN_DIGITS} significant digits at {same} of {len(steps)} "
            "steps;\nthe rest of the gap is float64 rounding, a few 1e-15 relative (notebook 04)",
            transform=ax.transAxes, fontsize=7.5, va="bottom")
    return fig


# ------------------------------------------------------------------------------------ Figure 2

FIG2 = dict(N=1024, d=64, heads=16, batch=64, dtype_bytes=2, pad_fraction=0.1)

# Citations, not computed: the paper's Figure 2 (left) in its two official versions
# (docs/reference.md, "Figure 2 (left) of [FA1]: two official versions").
PAPER_FIG2 = {
    "arXiv 2205.14135 (setting not stated)": {"standard": dict(gflops=66.6, hbm_gb=40.3, ms=41.7),
                                              "flash1": dict(gflops=75.2, hbm_gb=4.4, ms=7.3)},
    "NeurIPS 2022 (key-padding mask, no dropout)": {"standard": dict(gflops=66.6, hbm_gb=35.3, ms=35.1),
                                                    "flash1": dict(gflops=75.2, hbm_gb=4.4, ms=11.7)},
}
# Measured on one H100 with Nsight Compute, fwd+bwd at B=8, scaled to batch 64 and rounded to 0.1 GB:
# loaded from the recorded runs in figures/gpu/ (see h100_dram_gb).
GPU_DIR = Path(__file__).resolve().parents[2] / "figures" / "gpu"
DRAM_RUN = "h100-80gb-hbm3-dram.json"  # python -m flashref profile
DRAM_SDPA_RUN = "h100-80gb-hbm3-dram-sdpa.json"  # the first run; the only one with the key-padding mask


def h100_dram_gb() -> dict:
    """DRAM GB of one fwd+bwd at the Figure 2 shape (B=8 measured, scaled to 64), from figures/gpu/*.json."""
    prof = json.loads((GPU_DIR / DRAM_RUN).read_text())["rows"]
    sdpa = json.loads((GPU_DIR / DRAM_SDPA_RUN).read_text())["rows"]

    def fig2(rows, impl, key, scale):
        r = next(r for r in rows if r["impl"] == impl and (r["N"], r["d"], r["H"]) == (FIG2["N"], FIG2["d"], 16))
        return round(r[key] * scale * FIG2["batch"] / r["B"], 1)

    return {"plain fp16 PyTorch": fig2(prof, "plain", "total_bytes", 1e-9),
            "with masked_fill key padding": fig2(sdpa, "plain_masked", "total_gb", 1.0),
            "SDPA flash (FA2)": fig2(prof, "flash", "total_bytes", 1e-9)}
# The FlashAttention v1 CUDA kernels for d = 64 and seqlen_k >= 256 (Dao-AILab/flash-attention,
# csrc/flash_attn/src/fmha_fwd_hdim64.cu and fmha_bwd_hdim64.cu: FMHA_kernel_traits<256, 64, 16, ...>)
# loop over keys in chunks of 256 and over queries 16 rows at a time: (Br, Bc) = (16, 256).
FA1_TILES = (16, 256)
# tridao, flash-attention issue #741: matmul-only FLOPs of this setting.
TRIDAO_GFLOPS = {"standard": 825, "flash1": 963}


def _inputs(N, d, seed=0):
    rng = np.random.default_rng(seed)
    # float32 on the host is enough for counting (counts do not depend on the values) and twice as fast
    return [rng.standard_normal((N, d)).astype(np.float32) for _ in range(4)]


def simulate_fwd_bwd(algorithm: str, mask=None, **opts):
    """One head of forward + backward at FIG2's N, d: returns the (io, flops) reports and the blocks used."""
    N, d = FIG2["N"], FIG2["d"]
    Q, K, V, dO = _inputs(N, d)
    opts = dict(opts, mask=mask, dtype_bytes=FIG2["dtype_bytes"])
    if algorithm == "standard":
        fwd = standard.forward(Q, K, V, **opts)
        bwd = standard.backward(Q, K, V, dO, fwd.P, **opts)
        blocks = ""
    else:
        fwd = flash1.forward(Q, K, V, **opts)
        bwd = flash1.backward(Q, K, V, fwd.O, dO, fwd.l, fwd.m, **opts)
        blocks = "{}x{} / {}x{}".format(*fwd.block_sizes, *bwd.block_sizes)  # forward / backward
    return fwd.io + bwd.io, fwd.flops + bwd.flops, blocks


def key_padding_mask(N: int, frac: float) -> np.ndarray:
    """(1, N) boolean: the last ``frac`` of the keys are padding (as the H100 measurement's mask)."""
    m = np.ones((1, N), dtype=bool)
    m[:, N - int(round(frac * N)):] = False
    return m


def figure2_data() -> list[dict]:
    N, H, B = FIG2["N"], FIG2["heads"], FIG2["batch"]
    scale = H * B  # simulate one head, multiply by heads x batch
    mask = key_padding_mask(N, FIG2["pad_fraction"])
    configs = [
        ("no mask", "standard", "standard attention (Alg. 0 + 3)", None, {}),
        ("no mask", "flash1", "FlashAttention, M = 100 KB", None, {"sram_size": 100_000 // FIG2["dtype_bytes"]}),
        ("no mask", "flash1", "FlashAttention, M = 164 KB (A100)", None,
         {"sram_size": A100_SMEM_PER_SM // FIG2["dtype_bytes"]}),
        ("no mask", "flash1", f"FlashAttention, v1 kernel tiles {FA1_TILES[0]}x{FA1_TILES[1]}", None,
         {"block_sizes": FA1_TILES}),
        ("key-padding mask", "standard", "standard attention (Alg. 0 + 3)", mask, {}),
        ("key-padding mask", "flash1", f"FlashAttention, v1 kernel tiles {FA1_TILES[0]}x{FA1_TILES[1]}", mask,
         {"block_sizes": FA1_TILES}),
    ]
    paper = {"no mask": "arXiv 2205.14135 (setting not stated)",
             "key-padding mask": "NeurIPS 2022 (key-padding mask, no dropout)"}
    dram = h100_dram_gb()
    h100 = {("no mask", "standard"): dram["plain fp16 PyTorch"],
            ("key-padding mask", "standard"): dram["with masked_fill key padding"],
            ("no mask", "flash1"): dram["SDPA flash (FA2)"],
            ("key-padding mask", "flash1"): None}
    rows = []
    for setting, alg, label, m, opts in configs:
        io, fl, blocks = simulate_fwd_bwd(alg, mask=m, **opts)
        matmul, nonmatmul, nbytes = fl.matmul * scale, fl.nonmatmul * scale, io.bytes * scale
        cited = PAPER_FIG2[paper[setting]][alg]
        rows.append({
            "setting": setting, "algorithm": alg, "implementation": label,
            "gflops_matmul": matmul / 1e9, "gflops_nonmatmul": nonmatmul / 1e9, "gflops": (matmul + nonmatmul) / 1e9,
            "blocks_BrxBc": blocks,
            "hbm_gb": nbytes / 1e9, "reads_gb": io.reads * io.dtype_bytes * scale / 1e9,
            "writes_gb": io.writes * io.dtype_bytes * scale / 1e9, "peak_sram_elements": io.peak_sram,
            "roofline_ms_a100_40gb": roofline_seconds(matmul, nonmatmul, nbytes) * 1e3,
            "hbm_ms_a100_40gb": nbytes / A100_HBM_BANDWIDTH * 1e3,
            "paper_version": paper[setting], "paper_gflops": cited["gflops"], "paper_hbm_gb": cited["hbm_gb"],
            "paper_ms": cited["ms"], "tridao_matmul_gflops": TRIDAO_GFLOPS[alg],
            "h100_measured_gb": h100.get((setting, alg)),
        })
    return rows


def figure2_plot(rows):
    """The table, like beside like: counted matmul GFLOPs beside tridao's recount of the same quantity,
    counted HBM bytes beside the paper's, and an H100 measurement only in the rows of the code it measured."""
    c = FIG2
    fig, ax = figure(f"Figure 2 (left) from counted IO: fwd + bwd, N={c['N']}, d={c['d']}, {c['heads']} heads, "
                     f"batch {c['batch']}, fp16 ({c['dtype_bytes']} B), no dropout, one head simulated x "
                     f"{c['heads'] * c['batch']};\nkey-padding mask: the last {c['pad_fraction']:.0%} of the keys "
                     "(as the H100 measurement's)", width=12, height=3.6)
    ax.axis("off")
    ax.grid(False)
    cols = ["setting", "implementation", "Br x Bc\nfwd / bwd",
            "matmul GFLOPs\nflashref", "matmul GFLOPs\ntridao (#741)",
            "HBM GB\nflashref", "HBM GB\npaper", "DRAM GB\nH100, same code",
            "ms, A100\nroofline", "ms\npaper"]
    widths = [0.1, 0.22, 0.1, 0.085, 0.085, 0.07, 0.07, 0.09, 0.07, 0.06]
    ours, cited = (3, 5, 8), (4, 6, 7, 9)

    def f(x, fmt):
        return "–" if x is None or x == "" else format(float(x), fmt)

    cells = []
    for r in rows:
        # the H100 measurement of SDPA's FlashAttention-2 is another algorithm: not in FlashAttention-1's rows
        h100 = f(r["h100_measured_gb"], ".1f") if r["algorithm"] == "standard" else "–"
        cells.append([r["setting"], r["implementation"], r["blocks_BrxBc"] or "–",
                      f(r["gflops_matmul"], ".0f"), f(r["tridao_matmul_gflops"], ".0f"),
                      f(r["hbm_gb"], ".1f"), f(r["paper_hbm_gb"], ".1f"), h100,
                      f(r["roofline_ms_a100_40gb"], ".1f"), f(r["paper_ms"], ".1f")])
    table = ax.table(cellText=cells, colLabels=cols, colWidths=widths, bbox=[0, 0.27, 1, 0.73], cellLoc="center")
    table.auto_set_font_size(False)
    table.set_fontsize(8)
    for (i, j), cell in table.get_celld().items():
        if i == 0:
            cell.set_facecolor("#eeeeee")
            cell.set_text_props(fontweight="bold")
        elif j in ours:
            cell.set_facecolor("#e8f0fa")
        elif j in cited:
            cell.set_facecolor("#fbf3e4")
    fa2 = next((r["h100_measured_gb"] for r in rows if r["algorithm"] != "standard" and r["h100_measured_gb"]), None)
    paper = rows[0]
    fa_paper = next(r for r in rows if r["algorithm"] != "standard")
    ax.text(0.0, 0.23,
            "Blue: counted by flashref (roofline: max of matmul / 312 TFLOP/s, other / 19.5 TFLOP/s, bytes / 1.555 "
            "TB/s on an A100 40GB).  Beige: cited or measured.\n"
            "Paper: the arXiv version for 'no mask', the NeurIPS version (key-padding mask, no dropout) for "
            f"'key-padding mask'. The paper prints {paper['paper_gflops']} and {fa_paper['paper_gflops']} GFLOPs; "
            "tridao's recount (#741) of the\nsame matmuls gives the numbers shown, which flashref's counts match.  "
            "H100: Nsight Compute DRAM bytes of the same eager PyTorch code, batch 8 scaled to 64\n"
            "(figures/gpu/h100-80gb-hbm3-dram*.json); "
            + (f"SDPA's FlashAttention-2, a different kernel, measures {fa2:.1f} GB (notebook 07)."
               if fa2 is not None else ""),
            transform=ax.transAxes, fontsize=7.5, va="top")
    return fig


FIGURES = [
    Figure("backward_training", training_data, training_plot),
    Figure("backward_figure2_table", figure2_data, figure2_plot),
]
