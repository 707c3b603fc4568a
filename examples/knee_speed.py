"""What kernel 2's waves leaving lockstep past the knee cost in time: flashref's default kernel against SDPA's flash
backend at d = 32, where ``gpu.attention`` runs kernel 2 (as at d = 48: kernel 3 runs d = 64, 128 and 256),
below and past the knee, beside d = 64 (kernel 3) at the same shapes.

    python examples/knee_speed.py --out figures/gpu/h200-knee-speed.json

knee32 and check71 (figures/gpu/NOTES-l2.md, "Thirty-sixth round") measured kernel 2's forward+backward past the knee
reading up to 53x the DRAM bytes the lockstep passes need (2.06 TB at 1 x 4 x 524288, d = 32), where FlashAttention-2
read 37 GB. This times the same calls: each backend's median of ``--rounds`` interleaved rounds of
``triton.testing.do_bench`` (fp16, non-causal), and the ratio of flashref's time to SDPA flash's. Needs a CUDA GPU.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

# (B, H, N): 2^21 tokens a call; one head's K and V at d = 32 are 16 MiB at N = 131072 (below the H200's knee) and
# 64 MiB at 524288 (past it)
SHAPES = ((1, 16, 131072), (1, 4, 524288))
HEAD_DIMS = (32, 64)


def _runner(fn, q, k, v, do, mode):
    """One timed call: the forward without autograd's graph, or the forward and its backward from ``do``."""
    import torch

    def forward():
        with torch.no_grad():
            return fn(q, k, v)

    def forward_backward():
        torch.autograd.backward(fn(q, k, v), do)

    return forward if mode == "fwd" else forward_backward


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--rounds", type=int, default=2, help="interleaved timing rounds per shape")
    ap.add_argument("--rep", type=int, default=200, help="do_bench repetition time per round, ms")
    args = ap.parse_args(argv)

    import torch
    import torch.nn.functional as F  # noqa: N812
    import triton
    from torch.nn.attention import SDPBackend, sdpa_kernel

    if not torch.cuda.is_available():
        ap.error("times kernels on a CUDA GPU, and none is here (the recorded run: figures/gpu/h200-knee-speed.json)")

    from flashref import gpu
    from flashref.gpu import kernel3
    from flashref.gpu.bench import flops  # FlashAttention-2's convention, as python -m flashref bench counts

    def sdpa(q, k, v):
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            return F.scaled_dot_product_attention(q, k, v)

    rows = []
    out = dict(device=torch.cuda.get_device_name(), torch=torch.__version__, triton=triton.__version__,
               dtype="float16", causal=False, rounds=args.rounds, rep_ms=args.rep,
               timing="median of interleaved rounds of triton.testing.do_bench", rows=rows)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    for d in HEAD_DIMS:
        for B, H, N in SHAPES:
            q, k, v = (torch.randn(B, H, N, d, device="cuda", dtype=torch.float16, requires_grad=True)
                       for _ in range(3))
            do = torch.randn_like(q)
            ran, _ = kernel3.choose(q, k, v, False)
            for mode in ("fwd", "fwd_bwd"):
                fns = {"flashref": _runner(gpu.attention, q, k, v, do, mode),
                       "sdpa_flash": _runner(sdpa, q, k, v, do, mode)}
                times = {name: [] for name in fns}
                for _ in range(args.rounds):  # interleaved: a clock that drifts moves both alike
                    for name, fn in fns.items():
                        times[name].append(triton.testing.do_bench(fn, rep=args.rep, grad_to_none=[q, k, v]))
                ms = {name: statistics.median(t) for name, t in times.items()}
                row = dict(B=B, H=H, N=N, d=d, mode=mode, flashref_kernel=3 if ran else 2,
                           ms=ms, tflops={n: flops(mode, B, H, N, d, False) / t / 1e9 for n, t in ms.items()},
                           flashref_over_sdpa=ms["flashref"] / ms["sdpa_flash"])
                rows.append(row)
                print(f"d={d:3d} {B}x{H}x{N:<7d} {mode:8s} kernel {row['flashref_kernel']}  flashref "
                      f"{ms['flashref']:9.2f} ms  sdpa_flash {ms['sdpa_flash']:9.2f} ms  "
                      f"ratio {row['flashref_over_sdpa']:.2f}", flush=True)
                args.out.write_text(json.dumps(out, indent=1) + "\n")  # after every row: a run cut short keeps them
            del q, k, v, do
            torch.cuda.empty_cache()
    print(f"wrote {args.out}")
    return out


if __name__ == "__main__":
    main()
