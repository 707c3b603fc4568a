"""``python -m flashref bench --ceilings``: the two roofline ceilings of a GPU, measured.

The datasheet's peaks (``flashref.hardware``) are upper bounds no program reaches. Notebook 00 draws the
roofline with both: the vendor's, and these two, measured on one GPU:

* **HBM bandwidth**: a device-to-device copy of ``--copy-gib`` GiB (``dst.copy_(src)``), counted as the
  bytes read plus the bytes written, over the copy's time;
* **matmul**: a ``--matmul-n``³ bf16 matrix product (``2n³`` FLOPs) over its time.

Each is ``triton.testing.do_bench``'s median (warm-up 25 ms, ``--rep`` ms), taken ``--rounds`` times; the
JSON keeps every round and their median. Writes ``<out>/<device>-ceilings.json`` (default
``figures/gpu``), the file ``hardware.H100``'s ``measured_*`` fields are checked against
(``tests/test_hardware.py``).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import statistics
import sys
from pathlib import Path


def measure(copy_gib: float, matmul_n: int, rep: int, rounds: int) -> dict:
    import torch
    from triton.testing import do_bench

    n_bytes = int(copy_gib * 2**30)
    src = torch.empty(n_bytes // 2, dtype=torch.bfloat16, device="cuda").normal_()
    dst = torch.empty_like(src)
    a, b = (torch.randn(matmul_n, matmul_n, dtype=torch.bfloat16, device="cuda") for _ in range(2))
    copy_bps, matmul_fps = [], []
    for _ in range(rounds):
        ms = do_bench(lambda: dst.copy_(src), warmup=25, rep=rep, return_mode="median")
        copy_bps.append(2 * n_bytes / (ms * 1e-3))  # read src + write dst
        ms = do_bench(lambda: a @ b, warmup=25, rep=rep, return_mode="median")
        matmul_fps.append(2 * matmul_n**3 / (ms * 1e-3))
    return dict(copy_bytes_per_s=statistics.median(copy_bps), copy_rounds=copy_bps,
                matmul_flops_per_s=statistics.median(matmul_fps), matmul_rounds=matmul_fps)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m flashref bench --ceilings", description=__doc__.split("\n")[0])
    p.add_argument("--ceilings", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--out", default="figures/gpu")
    p.add_argument("--copy-gib", type=float, default=1.0, help="size of the copied tensor, GiB")
    p.add_argument("--matmul-n", type=int, default=8192)
    p.add_argument("--rep", type=int, default=200, help="do_bench repetition time, ms")
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args(argv)
    if not args.copy_gib > 0 or args.matmul_n < 1 or args.rep < 1 or args.rounds < 1:
        p.error("--copy-gib, --matmul-n, --rep and --rounds must be positive")
    import torch
    if not torch.cuda.is_available():
        print("bench --ceilings needs a CUDA GPU; the recorded ceilings are in figures/gpu/*-ceilings.json",
              file=sys.stderr)
        return 1
    import triton

    from .bench import device_slug
    result = measure(args.copy_gib, args.matmul_n, args.rep, args.rounds)
    device = torch.cuda.get_device_name(0)
    result["metadata"] = dict(device=device, torch=torch.__version__, triton=triton.__version__,
                              cuda=torch.version.cuda, copy_gib=args.copy_gib, matmul_n=args.matmul_n,
                              rep_ms=args.rep, rounds=args.rounds,
                              date=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{device_slug(device)}-ceilings.json"
    path.write_text(json.dumps(result, indent=1))
    print(f"copy {result['copy_bytes_per_s'] / 1e12:.3f} TB/s, bf16 matmul "
          f"{result['matmul_flops_per_s'] / 1e12:.1f} TFLOP/s; wrote {path}")
    return 0
