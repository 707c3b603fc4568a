"""Time the forward kernel over fixed configs in one process (the METHOD.md variant sweep).

``python -m flashref.gpu.sweep --d 128 --N 4096,16384 --configs 128,128,8,3 128,64,4,2 s256,64,8,3``
(a leading ``s`` selects the SPLIT forward). Prints one line per (config, N, causal) and, last, the
config with the best geometric-mean TFLOP/s.
"""

from __future__ import annotations

import argparse
import math
import os
import sys


def main(argv=None) -> int:
    import torch

    from .bench import flops, time_one

    p = argparse.ArgumentParser()
    p.add_argument("--d", type=int, default=128)
    p.add_argument("--N", default="4096,16384")
    p.add_argument("--configs", nargs="+", required=True)
    a = p.parse_args(argv)
    Ns = [int(x) for x in a.N.split(",")]
    scores = {}
    for cfg in a.configs:
        split = cfg.startswith("s")
        os.environ["FLASHREF_SPLIT"] = "1" if split else "0"
        os.environ["FLASHREF_CONFIG_FWD"] = cfg.lstrip("s")
        logs = []
        for causal in (False, True):
            for N in Ns:
                B, H = 16384 // N, 2048 // a.d
                ms = time_one("fwd", "flashref", B, H, N, a.d, causal, torch.float16, rep=50)
                tf = float("nan") if ms is None else flops("fwd", B, H, N, a.d, causal) / ms / 1e9
                logs.append(math.log(tf) if tf == tf else -1e9)
                print(f"{cfg:14} N={N:6} causal={causal!s:5} {tf:6.0f} TFLOP/s", flush=True)
        scores[cfg] = math.exp(sum(logs) / len(logs))
    best = max(scores, key=scores.get)
    print("geomean:", {k: round(v) for k, v in scores.items()})
    print("BEST", best)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
