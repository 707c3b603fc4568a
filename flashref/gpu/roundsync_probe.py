"""``python -m flashref.gpu.roundsync_probe``: kernel 3's forward and its dQ kernel with and without the barrier
between rounds of tiles (``kernel3.Tiles3.round_sync``, ``kernel3_bwd.TilesQ.round_sync``: the dQ kernel then runs
persistent, on the main stream), side by side on one GPU.

For each shape (B, H, N, d, non-causal) and each of the two kernels: the output with the barrier (O; dQ, dK, dV)
must equal the output without it bit for bit (the barrier changes when a program starts its next tile, not what any
program computes, nor in which order), and O is compared with SDPA's flash backend; then each variant is timed, in
turn, ``--rounds`` times over (interleaved rounds, the median kept): the forward alone, and the backward
alone (``kernel3_bwd.backward`` on the forward's O and L). DRAM bytes are ``profile-l2``'s to measure. Writes one
JSON row per shape, pass and variant."""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import replace

SHAPES = "1x4x262144x128,4x1x196608x128,1x2x262144x128,1x8x65536x128,2x8x32768x128,1x1x786432x64,2x16x16384x128"


def _shape(text):
    B, H, N, d = (int(x) for x in text.split("x"))
    return B, H, N, d


def main(argv=None) -> int:
    import torch
    import torch.nn.functional as F  # noqa: N812
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from . import kernel3, kernel3_bwd
    from .bench import flops, save_rows

    p = argparse.ArgumentParser(prog="python -m flashref.gpu.roundsync_probe",
                                description=" ".join(__doc__.split("\n\n")[0].split()))
    p.add_argument("--shapes", default=SHAPES, help="BxHxNxd, comma-separated (non-causal, fp16)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--calls", type=int, default=5, help="timed calls a round (after one warm-up)")
    p.add_argument("--out", default=None)
    a = p.parse_args(argv)
    if kernel3.cannot_run_here():
        return 1
    rows = []
    for B, H, N, d in (_shape(s) for s in a.shapes.split(",")):
        fwd = kernel3.TILES[(d, False)]
        bwd = kernel3_bwd.BWD_TILES[(d, False)]
        g = torch.Generator(device="cuda").manual_seed(N + d)
        q, k, v, do = (torch.randn(B, H, N, d, device="cuda", dtype=torch.float16, generator=g) for _ in range(4))
        scale = d ** -0.5
        o, L2 = kernel3.forward(q, k, v, False, scale, tiles=fwd)

        def run_fwd(t, q=q, k=k, v=v, scale=scale):
            return kernel3.forward(q, k, v, False, scale, tiles=t)

        def run_bwd(t, q=q, k=k, v=v, o=o, L2=L2, do=do, scale=scale):
            return kernel3_bwd.backward(q, k, v, o, L2, do, False, scale, tiles=t)

        passes = {
            "fwd": ({"barrier": replace(fwd, round_sync=True), "no_barrier": replace(fwd, round_sync=False)},
                    run_fwd, kernel3.round_sync(fwd, N, d)),
            "bwd": ({n: replace(bwd, dq_tiles=replace(bwd.dq_tiles, round_sync=x))
                     for n, x in (("barrier", True), ("no_barrier", False))},
                    run_bwd, kernel3_bwd.dq_round_sync(bwd.dq_tiles, N, d, False)),
        }
        with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
            err = float((o.float() - F.scaled_dot_product_attention(q, k, v, scale=scale).float()).abs().max())
        for pas, (variants, run, default) in passes.items():
            outs = {n: run(t) for n, t in variants.items()}
            identical = all(bool(torch.equal(x, y)) for x, y in zip(outs["barrier"], outs["no_barrier"]))
            del outs
            ms = {n: [] for n in variants}
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            for _ in range(a.rounds):
                for n, t in variants.items():
                    run(t)  # warm-up
                    start.record()
                    for _ in range(a.calls):
                        run(t)
                    end.record()
                    torch.cuda.synchronize()
                    ms[n].append(start.elapsed_time(end) / a.calls)
            fl = flops("fwd", B, H, N, d, False) * (1 if pas == "fwd" else 2.5)  # the backward: 2.5x the forward
            for n, t in variants.items():
                med = statistics.median(ms[n])
                rows.append(dict(B=B, H=H, N=N, d=d, pass_=pas, variant=n, tiles=repr(t), ms=round(med, 4),
                                 rounds_ms=[round(x, 4) for x in ms[n]], tflops=round(fl / (med * 1e-3) / 1e12, 1),
                                 identical_outputs=identical, max_abs_err_fwd_vs_sdpa_flash=err,
                                 barrier_by_default=default))
            r = statistics.median(ms["no_barrier"]) / statistics.median(ms["barrier"])
            print(f"B={B} H={H} N={N} d={d} {pas}: barrier {statistics.median(ms['barrier']):.3f} ms, without "
                  f"{statistics.median(ms['no_barrier']):.3f} ms ({r:.3f}x), outputs identical: {identical}, "
                  f"barrier by default: {default}", flush=True)
        print(f"  max |O - SDPA flash| {err:.2e}", flush=True)
        del q, k, v, do, o, L2
        torch.cuda.empty_cache()
    meta = dict(device=torch.cuda.get_device_name(0), torch=torch.__version__,
                triton=__import__("triton").__version__, dtype="float16", rounds=a.rounds, calls=a.calls,
                date=time.strftime("%Y-%m-%d"),
                timing=f"median of {a.rounds} interleaved rounds, each the mean of {a.calls} calls after a warm-up "
                       "(CUDA events)", flop_convention="fwd 4BHN^2d, bwd 2.5x that")
    save_rows(a.out, meta, rows)
    return 0


if __name__ == "__main__":
    import sys
    sys.exit(main(sys.argv[1:]))
