"""How long one ``iomodel.dram`` prediction takes on a CPU: under a second at N = 131072, fast enough to sweep.

    python examples/dram_speed.py --out figures/dram-speed-cpu.json

Times every implementation and mode, d = 64, 128, 192 and 256, causal and not, at N = 131072 for one sequence of 16
heads and for a grid of 8 x 32 heads (the largest B·H any recorded run has at that length), each the median of
``--repeat`` calls after one warm-up call (the staggered walk keeps its launch schedule for the next call on the same
kernel, so the first call of a shape is timed on its own too: ``first_s``). Writes the rows and the machine to
``--out``.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import statistics
import time
from pathlib import Path

from flashref._cli import file_in_the_way  # the check train and site make of an output path

D = importlib.import_module("flashref.iomodel.dram")  # the module (flashref.iomodel.dram is the function)

N = 131072
SHAPES = ((1, 16), (8, 32))  # (B, H)


def time_one(impl, mode, B, H, d, causal, repeat):
    """(seconds of the first call, median seconds of ``repeat`` calls after it) of one prediction."""
    kw = dict(B=B, H=H, Nq=N, Nk=N, d=d, causal=causal)
    t0 = time.perf_counter()
    D.dram(impl, mode, **kw)
    first = time.perf_counter() - t0
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        D.dram(impl, mode, **kw)
        times.append(time.perf_counter() - t0)
    return first, statistics.median(times)


def run(repeat=5, shapes=SHAPES, dims=(64, 128, 192, 256)):
    rows = []
    for B, H in shapes:
        for impl in D.IMPLS:
            for mode in D.MODES:
                for d in dims:
                    for causal in (False, True):
                        first, median = time_one(impl, mode, B, H, d, causal, repeat)
                        rows.append(dict(impl=impl, mode=mode, B=B, H=H, N=N, d=d, causal=causal,
                                         first_s=first, median_s=median))
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="one shape, d = 64, one repeat (a smoke run)")
    args = ap.parse_args(argv)
    if args.repeat < 1:
        ap.error(f"--repeat: expected at least 1, got {args.repeat}")
    blocker = file_in_the_way(args.out)
    if args.out.is_dir() or blocker is not None:  # before the predictions, not after them
        ap.error(f"--out: cannot write {args.out}: {blocker or args.out} is {'a file' if blocker else 'a folder'}")
    rows = run(1, ((1, 16),), (64,)) if args.quick else run(args.repeat)
    worst = max(max(r["first_s"], r["median_s"]) for r in rows)
    out = dict(machine=dict(processor=platform.processor() or platform.machine(), cpus=os.cpu_count(),
                            python=platform.python_version()),
               N=N, repeat=1 if args.quick else args.repeat, worst_s=worst, rows=rows)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    print(f"{len(rows)} predictions at N = {N}: the slowest took {worst:.3f} s -> {args.out}")
    return out


if __name__ == "__main__":
    main()
