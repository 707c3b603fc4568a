"""``python -m flashref profile``: DRAM bytes of one forward+backward, measured by Nsight Compute.

For each implementation (standard attention as plain fp16 PyTorch ops, SDPA's ``math`` backend,
SDPA ``flash``, flashref's Triton kernels) and each shape (the paper's Figure 2 shape B=8, H=16,
N=1024, d=64, and a long one B=1, H=16, N=8192, d=64; fp16, not causal), a child Python process
runs one warm-up forward+backward, then one more between ``cudaProfilerStart``/``Stop``, under

    ncu --target-processes all --profile-from-start off --clock-control none \\
        --metrics dram__bytes_read.sum,dram__bytes_write.sum --csv --page raw --print-units base

so every kernel of that call is counted, including the backward's, which PyTorch launches from
its autograd thread. The sums go to ``<out>/<device>-dram.json`` beside ``iomodel``'s predictions
for the same shapes (``standard``; ``flash2`` with the kernel's block sizes; and the closed form of
the kernels as implemented here, ``iomodel.triton.kernel_model``), and a bar chart to ``<device>-dram.png``.
"""

from __future__ import annotations

import argparse
import csv
import datetime as _dt
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from .. import _cli
from ..iomodel.triton import kernel_model

IMPLS = ("plain", "math", "flash", "flashref", "flashref_det")  # flashref_det: deterministic=True
SHAPES = {"fig2": (8, 16, 1024, 64), "long": (1, 16, 8192, 64)}
METRICS = ("dram__bytes_read.sum", "dram__bytes_write.sum")


# --------------------------------------------------------------------------------------------
# predictions (CPU only)
# --------------------------------------------------------------------------------------------

def predictions(B, H, N, d, blocks=None, causal=False):
    """iomodel's forward+backward bytes for this shape: standard, flash2 at the kernel's blocks, kernel_model."""
    from .. import iomodel

    heads = B * H
    out = {}
    std = [iomodel.predict("standard", dr, Nq=N, Nk=N, d=d, heads=heads, causal=causal, dtype_bytes=2)
           for dr in ("forward", "backward")]
    out["standard"] = dict(read_bytes=2 * sum(p.reads for p in std), write_bytes=2 * sum(p.writes for p in std),
                           total_bytes=sum(p.bytes for p in std))
    blocks = blocks or DEFAULT_BLOCKS
    try:
        f2 = [iomodel.predict("flash2", "forward", Nq=N, Nk=N, d=d, heads=heads, causal=causal, dtype_bytes=2,
                              block_sizes=tuple(blocks["fwd"])),
              iomodel.predict("flash2", "backward", Nq=N, Nk=N, d=d, heads=heads, causal=causal, dtype_bytes=2,
                              block_sizes=tuple(blocks.get("dkdv_atomic", blocks.get("dkdv"))))]
        out["flash2"] = dict(read_bytes=2 * sum(p.reads for p in f2), write_bytes=2 * sum(p.writes for p in f2),
                             total_bytes=sum(p.bytes for p in f2), block_sizes=blocks)
    except (ImportError, ValueError) as err:  # iomodel.flash2 missing, or blocks it refuses
        out["flash2"] = dict(error=str(err))
    out["kernel_model"] = kernel_model(B, H, N, d, blocks, causal)
    return out


DEFAULT_BLOCKS = {"fwd": (128, 128), "dkdv_atomic": (64, 128)}


# --------------------------------------------------------------------------------------------
# the child: one profiled forward+backward
# --------------------------------------------------------------------------------------------

def _child(impl, B, H, N, d, out_json):
    import torch
    import torch.nn.functional as F  # noqa: N812
    from torch.nn.attention import SDPBackend, sdpa_kernel

    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v, do = (torch.randn(B, H, N, d, device="cuda", dtype=torch.float16, generator=g) for _ in range(4))
    q, k, v = (x.requires_grad_() for x in (q, k, v))
    scale = d ** -0.5

    if impl == "plain":  # standard attention as three fp16 PyTorch ops (Algorithm 0)
        def f():
            return torch.softmax((q @ k.transpose(-1, -2)) * scale, dim=-1) @ v
    elif impl in ("flashref", "flashref_det"):
        from . import attention
        deterministic = impl == "flashref_det"

        def f():
            return attention(q, k, v, deterministic=deterministic)
    else:
        backend = {"math": SDPBackend.MATH, "flash": SDPBackend.FLASH_ATTENTION,
                   "cudnn": SDPBackend.CUDNN_ATTENTION}[impl]

        def f():
            with sdpa_kernel(backend):
                return F.scaled_dot_product_attention(q, k, v)

    f().backward(do)  # warm-up: compilation, autotuning, cuDNN plans
    q.grad = k.grad = v.grad = None
    torch.cuda.synchronize()
    cudart = torch.cuda.cudart()
    cudart.cudaProfilerStart()
    f().backward(do)
    torch.cuda.synchronize()
    cudart.cudaProfilerStop()
    info = {}
    if impl in ("flashref", "flashref_det"):
        from .kernels import Config
        cfg = Config().resolve(d, False, impl == "flashref_det")
        # with split the two halves share each K_j, V_j load: the IO row block is still BLOCK_M
        used = ("fwd", "dkdv", "dq") if impl == "flashref_det" else ("fwd", "dkdv")
        for name in used:
            t = getattr(cfg, name)
            info[name if impl == "flashref_det" or name == "fwd" else "dkdv_atomic"] = [t.block_m, t.block_n]
    Path(out_json).write_text(json.dumps(info))


# --------------------------------------------------------------------------------------------
# the parent: run ncu, parse, predict, save
# --------------------------------------------------------------------------------------------

L2_METRIC = "lts__t_bytes.sum"  # all traffic through L2 (hits included): where the model's re-reads go


def parse_ncu_csv(text, metrics=METRICS):
    """Sum each metric over the kernels of ncu's ``--csv --page raw`` output: ({metric: sum}, kernels)."""
    lines = [ln for ln in text.splitlines() if ln.startswith('"')]
    if not lines:
        return None
    rows = list(csv.reader(io.StringIO("\n".join(lines))))
    header = rows[0]
    if any(m not in header for m in metrics):
        return None
    idx = [header.index(m) for m in metrics]
    sums = dict.fromkeys(metrics, 0.0)
    n = 0
    for r in rows[1:]:
        try:
            vals = [float(r[i].replace(",", "")) for i in idx]
        except (ValueError, IndexError):
            continue  # the units row
        for m, v in zip(metrics, vals):
            sums[m] += v
        n += 1
    return sums, n


def measure(impl, shape, ncu="ncu", timeout=300):
    """Run the child under ncu; DRAM bytes (and L2 bytes when the counter is available)."""
    B, H, N, d = shape
    for metrics in (METRICS + (L2_METRIC,), METRICS):
        with tempfile.TemporaryDirectory() as tmp:
            info_path = os.path.join(tmp, "info.json")
            cmd = [ncu, "--target-processes", "all", "--profile-from-start", "off", "--clock-control", "none",
                   "--metrics", ",".join(metrics), "--csv", "--page", "raw", "--print-units", "base",
                   sys.executable, "-m", "flashref.gpu.profile", "--child", impl, str(B), str(H), str(N), str(d),
                   info_path]
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
            parsed = parse_ncu_csv(proc.stdout, metrics)
            if proc.returncode == 0 and parsed is not None:
                info = json.loads(Path(info_path).read_text()) if os.path.exists(info_path) else {}
                break
            print(f"  ncu failed for {impl} {shape} with {metrics}: rc={proc.returncode}\n"
                  f"{proc.stdout[-1000:]}\n{proc.stderr[-1000:]}")
    else:
        return None
    sums, n = parsed
    read, write = sums[METRICS[0]], sums[METRICS[1]]
    return dict(impl=impl, B=B, H=H, N=N, d=d, kernels=n, read_bytes=read, write_bytes=write,
                total_bytes=read + write, l2_bytes=sums.get(L2_METRIC), blocks=info or None)


def plot(result):
    import numpy as np

    from ..plots import COLORS, figure

    rows = result["rows"]
    shapes = list(dict.fromkeys((r["B"], r["H"], r["N"], r["d"]) for r in rows))
    fig, axes = figure(f"DRAM bytes of one forward+backward, measured (Nsight Compute) vs iomodel, "
                       f"{result['metadata']['device']}, fp16", ncols=len(shapes), width=5.2 * len(shapes),
                       height=3.8)
    axes = np.atleast_1d(axes).ravel()
    for ax, shape in zip(axes, shapes):
        rs = [r for r in rows if (r["B"], r["H"], r["N"], r["d"]) == shape]
        x = np.arange(len(rs))
        meas = [r["total_bytes"] / 1e9 for r in rs]
        pred = [r["predicted_bytes"] / 1e9 if r.get("predicted_bytes") else np.nan for r in rs]
        ax.bar(x - 0.2, meas, 0.4, label="measured", color=[COLORS.get(r["impl"], "#1f77b4") for r in rs])
        ax.bar(x + 0.2, pred, 0.4, label="predicted (iomodel)", color="#7f7f7f", alpha=0.6)
        for xi, m, p in zip(x, meas, pred):
            ax.text(xi - 0.2, m, f"{m:.3g}", ha="center", va="bottom", fontsize=7)
            if p == p:
                ax.text(xi + 0.2, p, f"{p:.3g}", ha="center", va="bottom", fontsize=7)
        ax.set_xticks(x, [f"{r['impl']}\n({r.get('predicted_by', '-')})" for r in rs], fontsize=7)
        ax.set_yscale("log")
        ax.set_ylabel("GB (read + written)")
        ax.set_title("B={}, H={}, N={}, d={}".format(*shape))
    axes[0].legend()
    fig.tight_layout()
    return fig


PREDICTED_BY = {"plain": "standard", "math": "standard", "flash": "flash2", "flashref": "flash2",
                "flashref_det": "flash2"}


def main(argv=None) -> int:
    if argv and argv[0] == "--child":  # measure()'s own call of this module under ncu, not a user's option
        if len(argv) != 7:
            raise SystemExit("profile --child is measure()'s call under ncu: IMPL B H N d OUT_JSON")
        impl, B, H, N, d, out_json = argv[1], *map(int, argv[2:6]), argv[6]
        _child(impl, B, H, N, d, out_json)
        return 0
    p = argparse.ArgumentParser(prog="python -m flashref profile", description=__doc__.split("\n")[0])
    p.add_argument("--out", type=_cli.folder, default="figures/gpu", help="folder for the JSON (default: %(default)s)")
    p.add_argument("--impls", type=_cli.choices(*IMPLS), default=IMPLS,
                   help=f"comma-separated, of {', '.join(IMPLS)} (flashref_det: deterministic=True; default: all)")
    p.add_argument("--shapes", type=_cli.choices(*SHAPES), default=tuple(SHAPES),
                   help="comma-separated, of " + ", ".join(f"{k} (B, H, N, d = {v})" for k, v in SHAPES.items()))
    p.add_argument("--name", type=_cli.stem, default=None, help="output stem (default: the device slug, then -dram)")
    args = p.parse_args(argv)
    ncu = shutil.which("ncu")
    import torch
    if not torch.cuda.is_available() or ncu is None:
        print("profile needs a CUDA GPU and Nsight Compute's ncu on PATH; recorded results are in "
              "figures/gpu/*-dram.json", file=sys.stderr)
        return 1
    import triton

    from .bench import device_slug
    rows = []
    for shape_name in args.shapes:
        shape = SHAPES[shape_name]
        for impl in args.impls:
            print(f"profiling {impl} at B,H,N,d={shape} ...", flush=True)
            r = measure(impl, shape, ncu)
            if r is None:
                continue
            r["shape"] = shape_name
            pred = predictions(*shape, blocks={k: tuple(v) for k, v in (r["blocks"] or DEFAULT_BLOCKS).items()})
            r["predictions"] = pred
            key = PREDICTED_BY.get(impl)
            if key and "total_bytes" in pred.get(key, {}):
                r["predicted_by"] = key
                r["predicted_bytes"] = pred[key]["total_bytes"]
                r["measured_over_predicted"] = round(r["total_bytes"] / pred[key]["total_bytes"], 3)
            rows.append(r)
            print(f"  {impl}: {r['kernels']} kernels, read {r['read_bytes'] / 1e9:.3f} GB, written "
                  f"{r['write_bytes'] / 1e9:.3f} GB; predicted ({key}) "
                  f"{r.get('predicted_bytes', float('nan')) / 1e9:.3f} GB", flush=True)
    meta = dict(device=torch.cuda.get_device_name(0), torch=torch.__version__, triton=triton.__version__,
                ncu=subprocess.run([ncu, "--version"], capture_output=True, text=True).stdout.strip().splitlines()[-1],
                date=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"), dtype="float16", causal=False,
                metrics=list(METRICS), note="one forward+backward after one warm-up; all kernels between "
                "cudaProfilerStart/Stop in all threads (--target-processes all)")
    result = dict(metadata=meta, rows=rows)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = args.name or device_slug(meta["device"]) + "-dram"
    (out / f"{stem}.json").write_text(json.dumps(result, indent=1))
    if rows:
        plot(result).savefig(out / f"{stem}.png", dpi=110)
    print(f"{'impl':9} {'shape':6} {'kernels':>7} {'read GB':>8} {'write GB':>8} {'total':>8} {'pred':>8} {'x':>6}")
    for r in rows:
        print(f"{r['impl']:9} {r['shape']:6} {r['kernels']:>7} {r['read_bytes'] / 1e9:8.3f}"
              f" {r['write_bytes'] / 1e9:8.3f}"
              f" {r['total_bytes'] / 1e9:8.3f} {r.get('predicted_bytes', float('nan')) / 1e9:8.3f}"
              f" {r.get('measured_over_predicted', float('nan')):6.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
