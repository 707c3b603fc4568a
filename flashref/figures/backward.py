"""Figures for the backward pass: a tiny training run on flashref's attention, and Figure 2 (left).

``backward_training``: a one-layer, single-head causal attention model learns a running-maximum
task on synthetic sequences, once with :func:`flashref.functional.scaled_dot_product_attention`
(Algorithm 2 forward, Algorithm 4 backward, 4 x 4 tiles) and once with
``torch.nn.functional.scaled_dot_product_attention``, same seed, same data, float64. The two loss
curves overlap: the reference algorithms compute the same gradients as PyTorch's kernels.

``backward_figure2_table``: the FlashAttention paper's Figure 2 (left), GPT-2 medium attention
(N = 1024, d = 64, 16 heads, batch 64, fp16), forward + backward, standard attention against
FlashAttention. flashref's GFLOPs and HBM GB come from the simulator's counts for one head
multiplied by 16 x 64 = 1024 heads; its runtime is the A100 roofline of those counts. The paper's
figures (both official versions) and the H100 DRAM measurement are citations, typed in as
constants with their source.
"""

from __future__ import annotations

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


def training_data() -> list[dict]:
    ours, ref = train_tiny("flash1"), train_tiny("torch")
    return [{"step": s, "loss_flashref": a, "loss_torch": b} for s, (a, b) in enumerate(zip(ours, ref))]


def training_plot(rows):
    steps = [r["step"] for r in rows]
    a = np.array([float(r["loss_flashref"]) for r in rows])
    b = np.array([float(r["loss_torch"]) for r in rows])
    c = TRAIN
    fig, axes = figure(f"1-layer single-head causal attention, running-max task: {c['steps']} steps, batch "
                       f"{c['batch']}, N={c['N']}, d={c['d']}, Adam lr={c['lr']}, float64, seed {c['seed']}",
                       ncols=2, width=9, height=3.5)
    ax = axes.flat[0]
    ax.plot(steps, b, color=COLORS["standard"], lw=3, alpha=0.5, label="torch SDPA")
    ax.plot(steps, a, color=COLORS["flash1"], lw=1, ls="--",
            label=f"flashref flash1 (Alg. 2 + 4, tiles {c['block_sizes'][0]}x{c['block_sizes'][1]})")
    ax.set(xlabel="step", ylabel="training loss (MSE)", yscale="log", title="loss curves")
    ax.legend()
    ax = axes.flat[1]
    ax.semilogy(steps, np.maximum(np.abs(a - b), 1e-18), color=COLORS["bound"])
    ax.set(xlabel="step", ylabel="|loss_flashref - loss_torch|", title=f"gap (max {np.abs(a - b).max():.1e})")
    return fig


# ------------------------------------------------------------------------------------ Figure 2

FIG2 = dict(N=1024, d=64, heads=16, batch=64, dtype_bytes=2, pad_fraction=0.1)

# Citations, not computed: the paper's Figure 2 (left) in its two official versions
# (shared/reference/papers.md, "Figure 2 — TWO VERSIONS EXIST").
PAPER_FIG2 = {
    "arXiv 2205.14135 (setting not stated)": {"standard": dict(gflops=66.6, hbm_gb=40.3, ms=41.7),
                                              "flash1": dict(gflops=75.2, hbm_gb=4.4, ms=7.3)},
    "NeurIPS 2022 (key-padding mask, no dropout)": {"standard": dict(gflops=66.6, hbm_gb=35.3, ms=35.1),
                                                    "flash1": dict(gflops=75.2, hbm_gb=4.4, ms=11.7)},
}
# Measured on one H100 with Nsight Compute, fwd+bwd, B=8 scaled to batch 64
# (shared/reference/gpu-anchors.md, "Measured DRAM traffic").
H100_DRAM_GB = {"plain fp16 PyTorch": 39.0, "with masked_fill key padding": 46.8, "SDPA flash (FA2)": 2.6}
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
    h100 = {("no mask", "standard"): H100_DRAM_GB["plain fp16 PyTorch"],
            ("key-padding mask", "standard"): H100_DRAM_GB["with masked_fill key padding"],
            ("no mask", "flash1"): H100_DRAM_GB["SDPA flash (FA2)"],
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
    c = FIG2
    fig, ax = figure(f"Figure 2 (left) from counted IO: fwd + bwd, N={c['N']}, d={c['d']}, {c['heads']} heads, "
                     f"batch {c['batch']}, fp16 ({c['dtype_bytes']} B), one head simulated x "
                     f"{c['heads'] * c['batch']}; roofline on A100 40GB", width=12, height=3.4)
    ax.axis("off")
    ax.grid(False)
    cols = ["setting", "implementation", "Br x Bc\nfwd / bwd", "GFLOPs\n(matmul + other)", "HBM GB\nflashref",
            "A100 ms\nroofline", "paper\nGFLOPs", "paper\nHBM GB", "paper\nms", "H100 DRAM\nmeasured GB"]
    widths = [0.1, 0.24, 0.14, 0.1, 0.07, 0.07, 0.06, 0.06, 0.06, 0.1]

    def f(x, fmt):
        return "–" if x is None or x == "" else format(float(x), fmt)

    cells = []
    for r in rows:
        h100 = f(r["h100_measured_gb"], ".1f")
        if r["algorithm"] != "standard" and h100 != "–":
            h100 += " (FA2)"
        cells.append([r["setting"], r["implementation"], r["blocks_BrxBc"] or "–",
                      f"{float(r['gflops_matmul']):.0f} + {float(r['gflops_nonmatmul']):.0f}",
                      f(r["hbm_gb"], ".1f"), f(r["roofline_ms_a100_40gb"], ".1f"), f(r["paper_gflops"], ".1f"),
                      f(r["paper_hbm_gb"], ".1f"), f(r["paper_ms"], ".1f"), h100])
    table = ax.table(cellText=cells, colLabels=cols, colWidths=widths, bbox=[0, 0.12, 1, 0.88], cellLoc="center")
    table.auto_set_font_size(False)
    table.set_fontsize(7.5)
    for (i, j), cell in table.get_celld().items():
        if i == 0:
            cell.set_facecolor("#eeeeee")
        elif j in (3, 4, 5):
            cell.set_facecolor("#e8f0fa")
    ax.text(0.0, 0.08, "Shaded: computed by flashref from its counts. Paper: arXiv version for 'no mask', "
            "NeurIPS version (key-padding mask, no dropout) for 'key-padding mask';\n"
            "its GFLOPs are off by a constant factor (tridao, "
            "issue #741: 825 / 963 matmul GFLOPs). H100: Nsight Compute DRAM bytes, batch 8 scaled to 64 "
            "(shared/reference/gpu-anchors.md).", transform=ax.transAxes, fontsize=7, va="top")
    return fig


FIGURES = [
    Figure("backward_training", training_data, training_plot),
    Figure("backward_figure2_table", figure2_data, figure2_plot),
]
