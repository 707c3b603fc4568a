"""``python -m flashref.gpu.regcap_probe``: kernel 2's split-column forward with and without its register cap.

At a length its tiles do not divide, kernel 2's non-causal forward at d = 72-96 (two column tiles, 128 x 64 tiles,
8 warps) compiles the masked loads of its last tiles into the kernel, and ptxas gave it 136-149 registers a thread
where the even launch takes 128. Past 128, two CTAs of 256 threads no longer fit an SM's 65536 registers: Nsight
found check58's ragged d = 96 forwards holding one CTA an SM. ``config.FWD_MAXNREG`` caps those tiles at 128.

This probe times the forward and the forward+backward at ragged and even lengths, capped (as the kernels run) and
uncapped (``FWD_MAXNREG`` emptied), in interleaved rounds so that both see the same clocks, and records the best
of each. With ``--nsight`` it also records Nsight Compute's launch statistics (registers a thread, the occupancy
limits) of the capped forward at the ragged shapes, the same way ``profile-l2`` does.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

# (d, B, H, N): ragged lengths at each head dim the tiles serve, and an even one beside d = 96
SHAPES = ((72, 4, 16, 4000), (80, 4, 16, 4000), (88, 4, 16, 4000), (96, 4, 16, 4000), (96, 2, 16, 16001),
          (96, 1, 32, 8100), (96, 8, 8, 2047), (96, 4, 16, 4096))
LAUNCH = ("launch__registers_per_thread", "launch__occupancy_limit_registers", "launch__occupancy_limit_shared_mem",
          "launch__grid_size", "gpu__time_duration.sum")


def time_both(d, B, H, N, mode, rounds):
    """Best milliseconds of ``mode`` capped and uncapped, over ``rounds`` interleaved rounds."""
    import torch

    from . import config
    from .bench import time_one

    cap = dict(config.FWD_MAXNREG)
    best = {"capped": [], "uncapped": []}
    try:
        for _ in range(rounds):
            for name, table in (("uncapped", {}), ("capped", cap)):
                config.FWD_MAXNREG.clear()
                config.FWD_MAXNREG.update(table)
                best[name].append(time_one(mode, "flashref2", B, H, N, d, False, torch.float16))
    finally:
        config.FWD_MAXNREG.clear()
        config.FWD_MAXNREG.update(cap)
    return {k: min(v) for k, v in best.items()}


def nsight(timeout):
    """Nsight's launch statistics of kernel 2's forward (capped) at the ragged shapes, measured as profile-l2
    measures (writes_probe's ``all`` setting)."""
    from .l2profile import BASE
    from .writes_probe import measure

    ncu = shutil.which("ncu")
    if ncu is None:
        print("  --nsight: no ncu on PATH", flush=True)
        return []
    shape_list = [("regcap", f"regcap_{d}_{B}x{H}x{N}", B, H, N, d, False) for d, B, H, N in SHAPES]
    return [k for k in measure(ncu, "all", shape_list, (*BASE, *LAUNCH), timeout) if k.get("name") == "_fwd_kernel"]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m flashref.gpu.regcap_probe", description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True, help="the JSON file to write")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--nsight", action="store_true", help="also Nsight's launch statistics of the capped forward")
    p.add_argument("--timeout", type=float, default=150.0, help="seconds for Nsight's run")
    a = p.parse_args(argv)
    if a.rounds < 1:
        p.error(f"--rounds: at least 1, got {a.rounds}")
    import torch
    import triton

    if not torch.cuda.is_available():
        print("regcap_probe needs a CUDA GPU", file=sys.stderr)
        return 2
    rows = []
    for d, B, H, N in SHAPES:
        for mode in ("fwd", "fwd_bwd"):
            t = time_both(d, B, H, N, mode, a.rounds)
            row = dict(d=d, B=B, H=H, N=N, mode=mode, ms_capped=t["capped"], ms_uncapped=t["uncapped"],
                       speedup=t["uncapped"] / t["capped"])
            print(f"  d={d:3d} {B}x{H}x{N:<6d} {mode:7s} uncapped {row['ms_uncapped']:.3f} ms, capped "
                  f"{row['ms_capped']:.3f} ms: {row['speedup']:.2f}x", flush=True)
            rows.append(row)
    out = dict(device=torch.cuda.get_device_name(), torch=torch.__version__, triton=triton.__version__,
               rounds=a.rounds, rows=rows, launches=[])
    Path(a.out).write_text(json.dumps(out, indent=1) + "\n")  # the timings first: Nsight may fail
    if a.nsight:
        out["launches"] = nsight(a.timeout)
        Path(a.out).write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
