"""``python -m flashref.gpu.writes_probe``: where kernel 2's dK/dV kernel's extra DRAM writes come from.

At three small non-causal shapes (check53's 1 x 3 x 9344 at d = 256, check54's 8 x 3 x 1803 at d = 48 and
1 x 4 x 7996 at d = 160) Nsight Compute counted 74-84 MB of DRAM writes in kernel 2's dK/dV kernel, where all it
writes (dK, dV and the fp32 dQ it adds into) is 17-57 MB and stays in the L2; at its other small shapes it wrote 0.
This probe runs ``profile-l2``'s child on ``l2profile.K2WRITES`` (those shapes, each beside neighbours that differ
in one thing) for kernel 2 (``flashref2``) under three Nsight settings:

* ``all``: as ``profile-l2`` measures (caches flushed before each kernel, kernel replay);
* ``none``: ``--cache-control none``, no flush: a kernel starts with whatever the one before left in the L2;
* ``app``: ``--replay-mode application``: each metric pass reruns the whole process instead of saving and restoring
  the memory a kernel writes between passes;

and records, beside the DRAM bytes, the L2's sectors by operation (reads, writes, reductions such as the fp32
``atomic_add`` into dQ, atomics) so the writes can be set against what caused them. One JSON file, every kernel of
every shape under each setting.

What it found (figures/gpu/NOTES-l2.md, "k2writes"): the writes were the kernel's own register spills at a ragged
N (hundreds of MB of local-memory writes through the L2), gone since its full row blocks load without a row mask;
check53's d = 256 shape fills its tiles and is a capacity effect instead."""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

from .l2profile import BASE, K2WRITES, MARKER, run_impl, runs_for

OPS = ("lts__t_sectors_op_read.sum", "lts__t_sectors_op_write.sum", "lts__t_sectors_op_red.sum",
       "lts__t_sectors_op_atom.sum")
METRICS = (*BASE, "lts__t_bytes.sum", *OPS, "gpu__time_duration.sum")
SETTINGS = {"all": ["--cache-control", "all"], "none": ["--cache-control", "none"],
            "app": ["--cache-control", "all", "--replay-mode", "application"]}


def measure(ncu, setting, shape_list, metrics, timeout):
    """Every kernel of every shape under one Nsight setting: ``profile-l2``'s per-kernel records, each with its
    ``setting``."""
    _, kernels, _, log, _ = run_impl(ncu, "flashref2", shape_list, metrics, timeout, ncu_flags=SETTINGS[setting])
    if not kernels:
        print(f"  {setting}: no kernels (rc={log['rc']}) {log['stderr_tail'][-600:]}", flush=True)
    return [dict(k, setting=setting) for k in kernels]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m flashref.gpu.writes_probe", description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True, help="the JSON file to write")
    p.add_argument("--settings", default="all,none,app")
    p.add_argument("--timeout", type=float, default=150.0, help="seconds for each setting")
    a = p.parse_args(argv)
    ncu = shutil.which("ncu")
    if ncu is None:
        print("writes_probe needs Nsight Compute's ncu on PATH and a CUDA GPU", file=sys.stderr)
        return 2
    todo = runs_for("flashref2", [("k2writes", *s) for s in K2WRITES])
    rows = []
    for setting in a.settings.split(","):
        t0 = time.time()
        got = measure(ncu, setting, todo, METRICS, a.timeout)
        if not got:  # this ncu may not know the L2's operation metrics: the DRAM bytes alone
            got = measure(ncu, setting, todo, (*BASE, "lts__t_bytes.sum"), a.timeout)
        rows += got
        print(f"{setting}: {len(got)} kernels in {time.time() - t0:.0f} s", flush=True)
        for k in got:
            if k["phase"] == "bwd" and MARKER not in k["name"]:
                ops = " ".join(f"{m.split('_op_')[1][:-4]}={32 * k[m] / 1e6:.0f}" for m in OPS if m in k)
                print(f"  {k['shape']:26s} {k['name'][:22]:22s} W {k[BASE[1]] / 1e6:7.1f} MB "
                      f"R {k[BASE[0]] / 1e6:7.1f} MB  L2 ops (MB): {ops}", flush=True)
    Path(a.out).write_text(json.dumps(dict(metrics=list(METRICS), kernels=rows), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
