"""Time kernel variants against each other and the SDPA peers in one process, in interleaved rounds, the
median of each kept.

``python -m flashref.gpu.sweep --d 128 --N 4096,16384 --configs default 256,64,8,3:split 128,128,8,3:heads+ws``

Each config is ``default`` (``kernels.Config()``: every default for the head dim) or
``BM,BN,warps,stages`` (empty: the default tiles) with optional ``:flags`` joined by ``+``; a flag
not given is off. Forward (``--mode fwd``): ``split`` (two row halves per program), ``heads``
(heads-first grid), ``persistent`` (one program per SM, longest tiles first), ``ws`` (Triton's warp
specialisation of the K/V loop), ``lazy`` (conditional O rescale), ``dsplit`` (d in two column tiles,
``iomodel.triton.dim_split``), ``notma`` (pointer loads), ``v1``
(kernel 1, the readable one). Forward+backward (``--mode fwd_bwd``): the tiles set the backward's
``--kernel`` (dkdv or dq) and the flags are ``det`` (the deterministic dQ kernel), ``dsplit`` (the
dK/dV kernel with d in two column tiles), ``stagger``
(staggered dK/dV row loop), ``ws`` and ``v1``; the forward keeps its defaults.

For each shape, the peers (``--peers flash,cudnn``) and every config are timed in turn, ``--rounds``
times over, and each keeps its median: drift in the GPU's clocks during the run then falls on all of
them alike. Prints one line per shape and, last, each config's geometric mean and its ratios to the
peers.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys

FLAGS = {"fwd": {"split": "split", "heads": "heads_first", "persistent": "persistent", "ws": "warp_specialize",
                 "lazy": "lazy", "dsplit": "dsplit", "notma": None, "v1": None},
         "fwd_bwd": {"stagger": "stagger", "det": None, "ws": "warp_specialize", "dsplit": "dsplit_bwd", "v1": None}}


def parse_config(spec, mode, kernel="dkdv"):
    """One ``--configs`` entry: returns ``(kernels.Config, deterministic)``."""
    from .kernels import Config, Tiles

    if spec == "default":
        return Config(), None
    tiles, _, flags = spec.partition(":")
    flags = set(filter(None, flags.split("+")))
    unknown = flags - set(FLAGS[mode])
    if unknown:
        raise SystemExit(f"--configs: unknown flag(s) {sorted(unknown)} in {spec!r} for --mode {mode}; "
                         f"valid: {sorted(FLAGS[mode])}")
    fields = {field: flag in flags for flag, field in FLAGS[mode].items() if field}
    if mode == "fwd":
        fields["tma"] = "notma" not in flags
    fields["version"] = 1 if "v1" in flags else 2
    if tiles:
        fields["fwd" if mode == "fwd" else kernel] = Tiles.parse(tiles)
    return Config(**fields), ("det" in flags if mode == "fwd_bwd" else None)


def _geomean(xs):
    good = [x for x in xs if x == x and x > 0]
    return math.exp(sum(map(math.log, good)) / len(good)) if good and len(good) == len(xs) else float("nan")


def main(argv=None) -> int:
    import torch

    from . import bench

    p = argparse.ArgumentParser(prog="python -m flashref.gpu.sweep")
    p.add_argument("--d", type=int, default=128)
    p.add_argument("--N", default="4096,16384")
    p.add_argument("--mode", default="fwd", choices=("fwd", "fwd_bwd"))
    p.add_argument("--kernel", default="dkdv", choices=("dkdv", "dq"))
    p.add_argument("--causal", default="both", choices=("both", "true", "false"))
    p.add_argument("--peers", default="flash,cudnn")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--rep", type=int, default=30, help="do_bench ms per timing")
    p.add_argument("--configs", nargs="+", required=True)
    a = p.parse_args(argv)
    causals = {"both": (False, True), "true": (True,), "false": (False,)}[a.causal]
    shapes = [(N, c) for c in causals for N in (int(x) for x in a.N.split(","))]
    peers = [b for b in a.peers.split(",") if b]
    entries = [("peer", b) for b in peers] + [("cfg", c) for c in a.configs]
    try:
        parsed = {c: parse_config(c, a.mode, a.kernel) for c in a.configs}
    except ValueError as e:
        p.error(f"--configs: {e}")
    if not torch.cuda.is_available():
        print("python -m flashref.gpu.sweep times kernels and needs a CUDA GPU", file=sys.stderr)
        return 1
    tf = {e: [] for e in entries}  # entry -> TFLOP/s per shape (median of rounds)
    for N, causal in shapes:
        B, H = bench.TOKENS // N, bench.HIDDEN // a.d
        times = {e: [] for e in entries}
        for _ in range(a.rounds):
            for kind, name in entries:
                cfg, det = parsed[name] if kind == "cfg" else (None, None)
                backend = name if kind == "peer" else "flashref"
                times[(kind, name)].append(bench.time_one(a.mode, backend, B, H, N, a.d, causal, torch.float16,
                                                          rep=a.rep, deterministic=det, config=cfg))
        line = []
        for e, ms in times.items():
            ok = [x for x in ms if x is not None]
            t = bench.flops(a.mode, B, H, N, a.d, causal) / statistics.median(ok) / 1e9 if ok else float("nan")
            tf[e].append(t)
            spread = (max(ok) - min(ok)) / min(ok) if ok else float("nan")
            line.append(f"{e[1]}={t:.0f}(±{100 * spread / 2:.0f}%)")
        print(f"{a.mode} d={a.d} N={N} causal={causal}: " + "  ".join(line), flush=True)
    print(f"\n{a.mode} d={a.d}, shapes {shapes}: geomean TFLOP/s; per-shape ratios to each peer")
    for b in peers:
        print(f"  [{b}] {_geomean(tf[('peer', b)]):.0f}")
    for cfg in a.configs:
        ratios = "  ".join(f"x{b} " + " ".join(f"{t / m:.2f}" for t, m in zip(tf[("cfg", cfg)], tf[("peer", b)]))
                           for b in peers)
        print(f"  {cfg:24} {_geomean(tf[('cfg', cfg)]):5.0f}  {ratios}")
    best = max(a.configs, key=lambda c: -1 if _geomean(tf[("cfg", c)]) != _geomean(tf[("cfg", c)])
               else _geomean(tf[("cfg", c)]))
    print("BEST", best)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
