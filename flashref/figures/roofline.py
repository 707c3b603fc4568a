"""Figures: standard attention's operations on the A100 and H100 rooflines; its HBM traffic by tensor.

``roofline``: every line of Algorithm 0 (with the mask and dropout passes of eager PyTorch) is one
kernel that reads its inputs from HBM and writes its output back. Its arithmetic intensity is the
FLOPs it does divided by the bytes it moves. At N = 1024 both come from running
:func:`flashref.standard.forward` on one head (IO from the memory's events, grouped by line;
FLOPs from the counter, split by line with :func:`line_flops`, whose sum is checked against the
count). At N = 16384 the N x N matrices are too large to simulate quickly, so the IO comes from
``iomodel.predict`` (which the tests check equal to the simulation) and the FLOPs from
:func:`line_flops` (which the tests check against the counter).

``standard_io_by_tensor``: HBM traffic of one forward + backward, split by tensor, against N.
Simulated for N <= 1024; beyond, each tensor's count is ``a*N*d + b*N*N`` with integer ``a, b``
solved from the simulated runs (checked exact on all of them), and the total is asserted equal
to ``iomodel.predict`` for every N.
"""

from __future__ import annotations

import numpy as np

from .. import hardware, iomodel, standard
from ..memory import io_by_line
from ..plots import figure
from . import Figure

D = 64
DTYPE_BYTES = 2
ROOF_GPUS = ("A100-40GB", "H100")
ROOF_N = (1024, 16384)
SIMULATE_MAX_N = 1024
DROPOUT_P = 0.1

# Algorithm-0 line -> the operation it performs (the names used in the figure).
OPS = {"Alg.0 l.1": "S = QK^T", "mask": "mask", "Alg.0 l.2": "softmax", "dropout": "dropout", "Alg.0 l.3": "O = PV"}
OP_COLORS = {"S = QK^T": "#1f77b4", "mask": "#7f7f7f", "softmax": "#d62728", "dropout": "#9467bd",
             "O = PV": "#2ca02c"}


def line_flops(Nq: int, Nk: int, d: int) -> dict[str, tuple[int, int]]:
    """(matmul, non-matmul) FLOPs per head of each line of ``standard.forward`` with mask and dropout.

    Follows the counter calls in standard.py: l.1 a (Nq,d)x(d,Nk) matmul plus the scale (1 op per
    element of S); the mask 1 op per element; softmax 5 (rowmax, subtract, exp, rowsum, divide);
    dropout 1 (multiply by Z); l.3 a (Nq,Nk)x(Nk,d) matmul. Tests check the sum against a run.
    """
    return {"Alg.0 l.1": (2 * Nq * Nk * d, Nq * Nk), "mask": (0, Nq * Nk), "Alg.0 l.2": (0, 5 * Nq * Nk),
            "dropout": (0, Nq * Nk), "Alg.0 l.3": (2 * Nq * Nk * d, 0)}


def _qkv(N, d, seed=0, lead=()):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(lead + (N, d)).astype(np.float32) for _ in range(3)]


def forward_line_counts(N: int, d: int = D, simulate: bool | None = None) -> dict[str, dict]:
    """Per line of the masked, dropout forward on one head: matmul/non-matmul FLOPs, reads, writes, source."""
    simulate = N <= SIMULATE_MAX_N if simulate is None else simulate
    flops = line_flops(N, N, d)
    if simulate:
        Q, K, V = _qkv(N, d)
        fwd = standard.forward(Q, K, V, causal=True, dropout_p=DROPOUT_P, dtype_bytes=DTYPE_BYTES)
        io = io_by_line(fwd.events)
        # the per-line FLOP split must add up to what the counter counted while the code ran
        if (sum(f[0] for f in flops.values()), sum(f[1] for f in flops.values())) != (fwd.flops.matmul,
                                                                                     fwd.flops.nonmatmul):
            raise RuntimeError("line_flops does not match standard.forward's FLOP count")
        source = "simulated"
    else:
        io = iomodel.predict("standard", "forward", Nq=N, Nk=N, d=d, causal=True, dropout_p=DROPOUT_P,
                             dtype_bytes=DTYPE_BYTES).by_line
        source = "iomodel"
    return {line: {"matmul_flops": flops[line][0], "nonmatmul_flops": flops[line][1],
                   "reads": io[line][0], "writes": io[line][1], "source": source} for line in OPS}


def roofline_data() -> list[dict]:
    rows = []
    for N in ROOF_N:
        counts = forward_line_counts(N)
        for name in ROOF_GPUS:
            gpu = hardware.get(name)
            for line, c in counts.items():
                nbytes = (c["reads"] + c["writes"]) * DTYPE_BYTES
                kind = "matmul" if c["matmul_flops"] else "nonmatmul"
                flops = c["matmul_flops"] if kind == "matmul" else c["nonmatmul_flops"]
                intensity = hardware.arithmetic_intensity(flops, nbytes)
                ridge = hardware.ridge_point(gpu, kind)
                rows.append({
                    "gpu": gpu.name, "N": N, "d": D, "dtype_bytes": DTYPE_BYTES, "op": OPS[line], "line": line,
                    "kind": kind, "matmul_flops": c["matmul_flops"], "nonmatmul_flops": c["nonmatmul_flops"],
                    "reads": c["reads"], "writes": c["writes"], "bytes": nbytes,
                    "intensity_flop_per_byte": intensity, "ridge_flop_per_byte": ridge,
                    "bound": "memory" if intensity < ridge else "compute",
                    "attainable_tflops": float(hardware.attainable_flops(intensity, gpu, kind)) / 1e12,
                    "matmul_peak_tflops": gpu.matmul_flops / 1e12, "fp32_peak_tflops": gpu.nonmatmul_flops / 1e12,
                    "hbm_tb_per_s": gpu.hbm_bandwidth / 1e12,
                    "time_us": 1e6 * hardware.time_estimate(c["matmul_flops"], c["nonmatmul_flops"], nbytes, gpu),
                    "source": c["source"],
                })
    return rows


def roofline_plot(rows):
    gpus = list(dict.fromkeys(r["gpu"] for r in rows))
    fig, axes = figure("Standard attention's kernels on the roofline: forward, one head, d=64, fp16 (2 B/element), "
                       "causal mask and dropout p=0.1 as eager passes;\nN=1024 simulated, N=16384 from iomodel; "
                       "peak datasheet numbers", ncols=len(gpus), width=11, height=4.6)
    x = np.logspace(-1.5, 4, 200)
    markers = {ROOF_N[0]: "o", ROOF_N[1]: "s"}
    for ax, g in zip(np.atleast_1d(axes).flat, gpus):
        R = [r for r in rows if r["gpu"] == g]
        r0 = R[0]
        bw = r0["hbm_tb_per_s"]
        for peak, style, label in ((r0["matmul_peak_tflops"], "-", "fp16 tensor-core roof"),
                                   (r0["fp32_peak_tflops"], "--", "fp32 CUDA-core roof")):
            ax.plot(x, np.minimum(peak, x * bw), style, color="k", lw=1.2, label=f"{label} ({peak:g} TFLOP/s)")
            ridge = peak / bw
            ax.axvline(ridge, color="k", lw=0.6, ls=":")
            ax.annotate(f"ridge {ridge:.0f}", (ridge, peak), textcoords="offset points", xytext=(4, -12), fontsize=7)
        for r in R:
            ax.scatter(r["intensity_flop_per_byte"], r["attainable_tflops"], marker=markers[r["N"]], s=46,
                       color=OP_COLORS[r["op"]], edgecolor="k", linewidth=0.5, zorder=3)
        # ops at the same intensity (mask and dropout; QK^T and PV) share one label
        spots: dict[tuple, list] = {}
        for r in (r for r in R if r["N"] == ROOF_N[-1]):
            spots.setdefault((r["intensity_flop_per_byte"], r["attainable_tflops"]), []).append(r["op"])
        for (xi, yi), ops in spots.items():
            ax.annotate(" & ".join(ops), (xi, yi), textcoords="offset points", xytext=(8, -10), fontsize=7,
                        color=OP_COLORS[ops[0]])
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("arithmetic intensity (FLOP / byte of HBM traffic)")
        ax.set_ylabel("attainable TFLOP/s")
        ax.set_title(f"{g}: HBM {bw:g} TB/s")
        ax.set_ylim(0.01, 3000)
        for N, m in markers.items():
            ax.scatter([], [], marker=m, color="w", edgecolor="k", label=f"N = {N}")
        ax.legend(loc="upper left", fontsize=7)
    return fig


# ----------------------------------------------------------------------------- traffic by tensor
IO_N = tuple(2 ** k for k in range(6, 17))  # 64 ... 65536
NXN = ("S", "P", "dP", "dS")


def _simulate_by_tensor(N: int, d: int = D) -> dict[str, tuple[int, int]]:
    Q, K, V = _qkv(N, d)
    dO = np.random.default_rng(1).standard_normal((N, d)).astype(np.float32)
    fwd = standard.forward(Q, K, V, dtype_bytes=DTYPE_BYTES)
    bwd = standard.backward(Q, K, V, dO, fwd.P, dtype_bytes=DTYPE_BYTES)
    io = fwd.io + bwd.io
    return {name: (t.reads, t.writes) for name, t in io.by_tensor.items()}


def _fit(counts: dict[int, int], d: int) -> tuple[int, int]:
    """Integer (a, b) with count(N) = a*N*d + b*N*N, solved from the two largest N, checked on all."""
    (N1, c1), (N2, c2) = sorted(counts.items())[-2:]
    A = np.array([[N1 * d, N1 * N1], [N2 * d, N2 * N2]], dtype=float)
    a, b = (int(round(v)) for v in np.linalg.solve(A, np.array([c1, c2], dtype=float)))
    if any(a * N * d + b * N * N != c for N, c in counts.items()):
        raise RuntimeError(f"traffic is not a*N*d + b*N^2 with integer a, b: {counts}")
    return a, b


def io_by_tensor_data() -> list[dict]:
    simulated = {N: _simulate_by_tensor(N) for N in IO_N if N <= SIMULATE_MAX_N}
    names = list(next(iter(simulated.values())))
    fits = {(name, k): _fit({N: s[name][k] for N, s in simulated.items()}, D) for name in names for k in (0, 1)}
    rows = []
    for N in IO_N:
        pred = (iomodel.predict("standard", "forward", Nq=N, Nk=N, d=D, dtype_bytes=DTYPE_BYTES).total
                + iomodel.predict("standard", "backward", Nq=N, Nk=N, d=D, dtype_bytes=DTYPE_BYTES).total)
        total = 0
        for name in names:
            if N in simulated:
                reads, writes = simulated[N][name]
            else:
                (ar, br), (aw, bw) = fits[(name, 0)], fits[(name, 1)]
                reads, writes = ar * N * D + br * N * N, aw * N * D + bw * N * N
            total += reads + writes
            rows.append({"N": N, "d": D, "heads": 1, "dtype_bytes": DTYPE_BYTES, "tensor": name,
                         "shape": "NxN" if name in NXN else "Nxd", "reads": reads, "writes": writes,
                         "bytes": (reads + writes) * DTYPE_BYTES,
                         "source": "simulated" if N in simulated else "fit to simulation (= iomodel)"})
        if total != pred:
            raise RuntimeError(f"N={N}: traffic by tensor {total} != iomodel {pred}")
    return rows


def io_by_tensor_plot(rows):
    fig, axes = figure("Standard attention (Alg. 0 + Alg. 3), HBM traffic of one forward + backward by tensor: "
                             f"one head, d={D}, fp16 (2 B/element), no mask/dropout;\nsimulated for N ≤ "
                             f"{SIMULATE_MAX_N}, beyond from per-tensor counts fitted to the simulation "
                             "(total = iomodel.predict)", ncols=2, width=11, height=4.4)
    ax1, ax2 = axes.flat
    Ns = sorted({r["N"] for r in rows})
    names = list(dict.fromkeys(r["tensor"] for r in rows))
    by = {(r["N"], r["tensor"]): r["bytes"] for r in rows}
    total = np.array([sum(by[(N, t)] for t in names) for N in Ns], dtype=float)
    nn = np.array([sum(by[(N, t)] for t in names if t in NXN) for N in Ns], dtype=float)
    ax1.loglog(Ns, total / 1e6, "o-", color="k", label="total")
    ax1.loglog(Ns, nn / 1e6, "s--", color="#d62728", label="N×N tensors (S, P, dP, dS)")
    ax1.loglog(Ns, (total - nn) / 1e6, "^--", color="#1f77b4", label="N×d tensors (Q, K, V, O, dO, dQ, dK, dV)")
    ax1.axvline(SIMULATE_MAX_N, color="k", lw=0.6, ls=":")
    ax1.annotate("simulated | fitted", (SIMULATE_MAX_N, total[0] / 1e6), textcoords="offset points",
                 xytext=(-40, 0), fontsize=7)
    ax1.set_xscale("log", base=2)
    ax1.set_xlabel("sequence length N")
    ax1.set_ylabel("HBM traffic (MB)")
    ax1.legend(loc="upper left")
    cmap = __import__("matplotlib").colormaps["tab20"]
    bottom = np.zeros(len(Ns))
    xs = np.arange(len(Ns))
    for i, t in enumerate(names):
        share = np.array([by[(N, t)] for N in Ns]) / total
        ax2.bar(xs, share, bottom=bottom, color=cmap(i % 20), label=t, width=0.8)
        bottom += share
    ax2.set_xticks(xs, [str(N) for N in Ns], rotation=45, fontsize=7)
    ax2.set_xlabel("sequence length N")
    ax2.set_ylabel("share of HBM traffic")
    ax2.set_ylim(0, 1)
    ax2.legend(loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=7)
    return fig


FIGURES = [
    Figure("roofline", roofline_data, roofline_plot),
    Figure("standard_io_by_tensor", io_by_tensor_data, io_by_tensor_plot),
]
