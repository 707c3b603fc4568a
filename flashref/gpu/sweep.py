"""Time kernel variants over fixed configs in one process (the METHOD.md variant sweep).

``python -m flashref.gpu.sweep --d 128 --N 4096,16384 --configs 256,64,8,3:split 128,128,8,3:pipe``

Each config is ``BM,BN,warps,stages`` with optional ``:flags`` joined by ``+``: ``split`` (two row
halves per program), ``pipe`` (one-block software pipelining), ``heads`` (heads-first grid) for the
forward. With ``--mode fwd_bwd`` the config sets the backward's dK/dV kernel instead
(``--kernel dkdv_atomic|dkdv|dq``), and the flag ``det`` uses the deterministic dQ kernel.
``--peers flash,cudnn`` times those SDPA backends at each shape before and after the configs, so
ratios come from the same process. Prints one line per (config, N, causal), then each config's
geometric-mean TFLOP/s and ratio to the peers.
"""

from __future__ import annotations

import argparse
import math
import os
import sys

FLAGS = {"split": "FLASHREF_SPLIT", "pipe": "FLASHREF_PIPE", "heads": "FLASHREF_HEADS_FIRST"}


def _set_env(cfg, mode, kernel):
    tiles, _, flags = cfg.partition(":")
    flags = set(filter(None, flags.split("+")))
    unknown = flags - set(FLAGS) - {"det"}
    if unknown:
        raise SystemExit(f"--configs: unknown flag(s) {sorted(unknown)} in {cfg!r}")
    for flag, var in FLAGS.items():  # forward flags; fwd_bwd runs leave the forward at its defaults
        if mode == "fwd":
            os.environ[var] = "1" if flag in flags else "0"
        else:
            os.environ.pop(var, None)
    for name in ("FWD", "DKDV", "DKDV_ATOMIC", "DQ"):
        os.environ.pop(f"FLASHREF_CONFIG_{name}", None)
    if tiles:
        os.environ["FLASHREF_CONFIG_" + ("FWD" if mode == "fwd" else kernel.upper())] = tiles
    return "det" in flags


def main(argv=None) -> int:
    import torch

    from . import bench

    p = argparse.ArgumentParser()
    p.add_argument("--d", type=int, default=128)
    p.add_argument("--N", default="4096,16384")
    p.add_argument("--mode", default="fwd", choices=("fwd", "fwd_bwd"))
    p.add_argument("--kernel", default="dkdv_atomic", choices=("dkdv_atomic", "dkdv", "dq"))
    p.add_argument("--causal", default="both", choices=("both", "true", "false"))
    p.add_argument("--peers", default="flash,cudnn")
    p.add_argument("--rep", type=int, default=50)
    p.add_argument("--configs", nargs="+", required=True)
    a = p.parse_args(argv)
    Ns = [int(x) for x in a.N.split(",")]
    causals = {"both": (False, True), "true": (True,), "false": (False,)}[a.causal]
    shapes = [(N, c) for c in causals for N in Ns]

    def tflops(backend, N, causal, deterministic=None):
        B, H = bench.TOKENS // N, bench.HIDDEN // a.d
        ms = bench.time_one(a.mode, backend, B, H, N, a.d, causal, torch.float16, rep=a.rep,
                            deterministic=deterministic)
        return float("nan") if ms is None else bench.flops(a.mode, B, H, N, a.d, causal) / ms / 1e9

    def geomean(xs):
        good = [x for x in xs if x == x and x > 0]
        return math.exp(sum(map(math.log, good)) / len(good)) if len(good) == len(xs) else float("nan")

    peers = [b for b in a.peers.split(",") if b]
    peer_tf = {b: {s: [] for s in shapes} for b in peers}

    def time_peers():
        for b in peers:
            for N, c in shapes:
                tf = tflops(b, N, c)
                peer_tf[b][(N, c)].append(tf)
                print(f"{'[' + b + ']':22} N={N:6} causal={c!s:5} {tf:6.0f} TFLOP/s", flush=True)

    time_peers()
    scores = {}
    for cfg in a.configs:
        det = _set_env(cfg, a.mode, a.kernel)
        scores[cfg] = [tflops("flashref", N, c, det) for N, c in shapes]
        for (N, c), tf in zip(shapes, scores[cfg]):
            print(f"{cfg:22} N={N:6} causal={c!s:5} {tf:6.0f} TFLOP/s", flush=True)
    time_peers()
    peer_mean = {b: [sum(v) / len(v) for v in peer_tf[b].values()] for b in peers}
    print(f"\n{a.mode} d={a.d}: geomean TFLOP/s over N={Ns} causal={list(causals)}; ratios per shape to the "
          "peers' mean of two timings")
    for b in peers:
        first, last = (geomean([v[k] for v in peer_tf[b].values()]) for k in (0, -1))
        print(f"  [{b}] {geomean(peer_mean[b]):.0f}  (first/second timing geomean: {first:.0f}/{last:.0f})")
    for cfg, tfs in scores.items():
        ratios = "  ".join(f"x{b} " + " ".join(f"{t / m:.2f}" for t, m in zip(tfs, peer_mean[b]))
                           for b in peers)
        print(f"  {cfg:22} {geomean(tfs):5.0f}  {ratios}")
    best = max(scores, key=lambda k: geomean(scores[k]) if geomean(scores[k]) == geomean(scores[k]) else -1)
    print("BEST", best)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
