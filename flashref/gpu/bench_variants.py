"""``python -m flashref bench --variants``: the attention variants on a GPU, flashref against PyTorch.

Three rows, each timed forward and forward+backward, causal, d = 128, fp16 by default:

* **gqa**: B = 2, 32 query heads over 4 K/V heads (8 query heads per K/V head), N = 8192.
  flashref's ``enable_gqa`` against SDPA's ``enable_gqa=True`` on each backend that takes it
  (flash, efficient, cuDNN; a refused one is recorded with its error) and FlexAttention
  (``torch.compile(flex_attention)``, ``enable_gqa=True``, a causal block mask);
* **window**: B = 1, 16 heads, N = 32768, a causal sliding window of 4096 keys (``window=(4095, 0)``).
  flashref's window against FlexAttention with a sliding-window block mask, SDPA without a window
  (flash and cuDNN doing full causal attention: what a model pays without window support) and
  SDPA's efficient backend with the window materialised as an N×N boolean ``attn_mask``; plus
  flashref without the window (full causal) for the saving of skipped tiles;
* **softcap**: B = 2, 16 heads, N = 8192, a softcap of 50 (Gemma-2's: ``c·tanh(s/c)`` on the scaled
  scores). flashref against FlexAttention with the same ``score_mod``, flashref without the softcap (what
  the tanh costs), and flashref at c = 10⁴ (``flashref_series``), where the kernels add tanh's series near
  0 (``kernels._tanh``: the launcher asks for it past c = 512 in fp16; the work is the same at any such c,
  and the output is not compared, being another function).

The backends of a row are timed in turn, ``--rounds`` times over, each a ``triton.testing.do_bench``
median (warm-up 25 ms, L2 flushed), and keep the median of their rounds, as ``bench`` does.
TFLOP/s count the attended (query, key) pairs only: ``4·B·Hq·pairs·d`` forward, 3.5× that for
forward+backward; so a backend that computes the full causal triangle for the window row is
charged only for the window's pairs (its TFLOP/s are then "useful" TFLOP/s).
Writes ``<out>/<stem>.json`` (default ``figures/gpu/<device>-variants.json``).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import statistics
import sys
import time
import traceback
from pathlib import Path

ROWS = {
    "gqa": dict(B=2, Hq=32, Hkv=4, N=8192, d=128, window=None),
    "window": dict(B=1, Hq=16, Hkv=16, N=32768, d=128, window=(4095, 0)),
    "softcap": dict(B=2, Hq=16, Hkv=16, N=8192, d=128, window=None, softcap=50.0),
}
SERIES_CAP = 1e4  # flashref_series: a cap past what fp16 resolves of tanh's exp2 form (gpu._variants)
BACKENDS = {
    "gqa": ("flashref", "sdpa_flash", "sdpa_efficient", "sdpa_cudnn", "flex"),
    "window": ("flashref", "flashref_full", "flex", "sdpa_flash_full", "sdpa_cudnn_full", "sdpa_efficient_mask"),
    "softcap": ("flashref", "flashref_full", "flashref_series", "flex"),
}


def pairs(N, window):
    """Attended (query, key) pairs of causal attention over N tokens, with a window (left, 0) or none."""
    if window is None:
        return N * (N + 1) // 2
    w = window[0] + 1  # keys per query, the query's own included
    w = min(w, N)
    return w * (w + 1) // 2 + (N - w) * w


def _flex(causal_window, N, B, H, enable_gqa, softcap=None):
    import torch
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    if causal_window is None:
        def mask_mod(b, h, q_idx, kv_idx):
            return q_idx >= kv_idx
    else:
        left = causal_window[0]

        def mask_mod(b, h, q_idx, kv_idx):
            return (q_idx >= kv_idx) & (q_idx - kv_idx <= left)
    block_mask = create_block_mask(mask_mod, B=None, H=None, Q_LEN=N, KV_LEN=N, device="cuda")
    compiled = torch.compile(flex_attention, dynamic=False)
    if softcap is None:
        return lambda q, k, v: compiled(q, k, v, block_mask=block_mask, enable_gqa=enable_gqa)

    def score_mod(score, b, h, q_idx, kv_idx):  # flex applies it to the scaled score, as flashref's order
        return softcap * torch.tanh(score / softcap)
    return lambda q, k, v: compiled(q, k, v, score_mod=score_mod, block_mask=block_mask, enable_gqa=enable_gqa)


def make_fn(backend, spec):
    """A callable (q, k, v) -> o for one backend of one row."""
    import torch
    import torch.nn.functional as F  # noqa: N812
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from . import attention

    gqa = spec["Hq"] != spec["Hkv"]
    window, softcap = spec["window"], spec.get("softcap")
    if backend == "flashref":
        return lambda q, k, v: attention(q, k, v, causal=True, enable_gqa=gqa, window=window, softcap=softcap)
    if backend == "flashref_full":  # without the row's window or softcap
        return lambda q, k, v: attention(q, k, v, causal=True, enable_gqa=gqa)
    if backend == "flashref_series":
        return lambda q, k, v: attention(q, k, v, causal=True, enable_gqa=gqa, softcap=SERIES_CAP)
    if backend == "flex":
        return _flex(window, spec["N"], spec["B"], spec["Hq"], gqa, softcap)
    name, _, extra = backend.partition("_")[2].partition("_")
    sdp = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
           "efficient": SDPBackend.EFFICIENT_ATTENTION}[name]
    if extra == "mask":
        N, left = spec["N"], window[0]
        i = torch.arange(N, device="cuda")
        mask = (i[None, :] <= i[:, None]) & (i[:, None] - i[None, :] <= left)  # (N, N) bool: N² bytes

        def run(q, k, v):
            with sdpa_kernel(sdp):
                return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=gqa)
        return run

    def run(q, k, v):  # "full": causal without a window; gqa: enable_gqa
        with sdpa_kernel(sdp):
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)
    return run


def _inputs(spec, dtype, seed=0):
    import torch
    g = torch.Generator(device="cuda").manual_seed(seed)
    B, Hq, Hkv, N, d = (spec[k] for k in ("B", "Hq", "Hkv", "N", "d"))
    q, do = (torch.randn(B, Hq, N, d, device="cuda", dtype=dtype, generator=g) for _ in range(2))
    k, v = (torch.randn(B, Hkv, N, d, device="cuda", dtype=dtype, generator=g) for _ in range(2))
    return q, k, v, do


def time_one(f, mode, q, k, v, do, rep):
    import torch
    from triton.testing import do_bench

    if mode == "fwd":
        with torch.no_grad():
            return do_bench(lambda: f(q, k, v), warmup=25, rep=rep, return_mode="median")
    q, k, v = (x.detach().requires_grad_() for x in (q, k, v))
    return do_bench(lambda: f(q, k, v).backward(do), warmup=25, rep=rep, grad_to_none=[q, k, v],
                    return_mode="median")


def run(args) -> dict:
    import torch
    import triton

    dtype = getattr(torch, args.dtype)
    rows, errors, checks = [], {}, {}
    t0 = time.time()
    for name in args.rows:
        spec = ROWS[name]
        q, k, v, do = _inputs(spec, dtype)
        fns = {}
        for b in BACKENDS[name]:
            try:
                fns[b] = make_fn(b, spec)
            except Exception as e:  # noqa: BLE001 (a backend that cannot be built is recorded)
                errors[f"{name}/{b}"] = f"{type(e).__name__}: {str(e)[:300]}"
        # forward outputs against flashref's (a check that every backend computes the same thing)
        ref = None
        for b in list(fns):
            try:
                with torch.no_grad():
                    o = fns[b](q, k, v)
                torch.cuda.synchronize()
                if b == "flashref":
                    ref = o
                elif ref is not None and not b.endswith(("_full", "_series")):
                    checks[f"{name}/{b}"] = round(float((o.float() - ref.float()).abs().max()), 5)
            except Exception as e:  # noqa: BLE001
                errors[f"{name}/{b}"] = f"{type(e).__name__}: {str(e)[:300]}"
                print(f"  {name} {b}: {errors[f'{name}/{b}']}", flush=True)
                traceback.print_exc(limit=2)
                fns.pop(b)
            torch.cuda.empty_cache()
        for mode in args.modes:
            times = {b: [] for b in fns}
            for _ in range(args.rounds):
                for b in fns:
                    if None in times[b]:
                        continue
                    try:
                        times[b].append(time_one(fns[b], mode, q, k, v, do, max(10, args.rep // args.rounds)))
                    except Exception as e:  # noqa: BLE001
                        errors[f"{name}/{b}/{mode}"] = f"{type(e).__name__}: {str(e)[:300]}"
                        print(f"  {name} {b} {mode}: {errors[f'{name}/{b}/{mode}']}", flush=True)
                        times[b].append(None)
                    torch.cuda.empty_cache()
            for b, ms_list in times.items():
                if not ms_list or None in ms_list:
                    continue
                ms = statistics.median(ms_list)
                f = 4 * spec["B"] * spec["Hq"] * pairs(spec["N"], spec["window"]) * spec["d"]
                f = f if mode == "fwd" else 3.5 * f
                rows.append(dict(row=name, mode=mode, backend=b, **{k: spec[k] for k in ("B", "Hq", "Hkv", "N", "d")},
                                 window=spec["window"], softcap=spec.get("softcap"), causal=True, ms=round(ms, 4),
                                 tflops=round(f / (ms * 1e-3) / 1e12, 1), rounds_ms=[round(x, 4) for x in ms_list]))
            print(f"{name} {mode}: " + ", ".join(f"{r['backend']} {r['ms']:.3f} ms" for r in rows
                                                 if r["row"] == name and r["mode"] == mode), flush=True)
    # speed ratios: the other backend's time over flashref's (> 1: flashref is faster)
    by = {(r["row"], r["mode"], r["backend"]): r for r in rows}
    ratios = {}
    for (name, mode, b), r in by.items():
        fr = by.get((name, mode, "flashref"))
        if fr and b != "flashref":
            ratios[f"{name}/{mode}/{b}"] = round(r["ms"] / fr["ms"], 3)
    props = torch.cuda.get_device_properties(0)
    meta = dict(device=torch.cuda.get_device_name(0), sms=props.multi_processor_count, torch=torch.__version__,
                triton=triton.__version__, cuda=torch.version.cuda, dtype=args.dtype,
                date=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                timing=f"median of {args.rounds} interleaved rounds (backends of a row in turn), each a "
                f"triton.testing.do_bench median, warmup 25 ms, rep {max(10, args.rep // args.rounds)} ms",
                flop_convention="fwd 4*B*Hq*pairs*d over attended (query, key) pairs; fwd_bwd 3.5x fwd",
                ratio_convention="ratios[row/mode/backend] = backend ms / flashref ms (> 1: flashref faster)",
                rows={k: ROWS[k] for k in args.rows}, seconds=round(time.time() - t0, 1))
    return dict(metadata=meta, rows=rows, ratios=ratios, errors=errors, max_abs_diff_vs_flashref=checks)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m flashref bench --variants", description=__doc__.split("\n")[0])
    p.add_argument("--variants", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--out", default="figures/gpu")
    p.add_argument("--rows", type=lambda s: tuple(s.split(",")), default=tuple(ROWS))
    p.add_argument("--modes", type=lambda s: tuple(s.split(",")), default=("fwd", "fwd_bwd"))
    p.add_argument("--dtype", default="float16", choices=("float16", "bfloat16"))
    p.add_argument("--rep", type=int, default=90, help="do_bench repetition time per backend and row, ms")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--name", default=None, help="output stem (default: <device slug>-variants)")
    args = p.parse_args(argv)
    for r in args.rows:
        if r not in ROWS:
            p.error(f"--rows: unknown row {r!r}; choose from {tuple(ROWS)}")
    import torch
    if not torch.cuda.is_available():
        print("bench --variants needs a CUDA GPU; the recorded results are in figures/gpu/*-variants.json",
              file=sys.stderr)
        return 1
    from .bench import device_slug
    result = run(args)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{args.name or device_slug(result['metadata']['device']) + '-variants'}.json"
    path.write_text(json.dumps(result, indent=1))
    print(json.dumps(result["ratios"], indent=1))
    print(f"wrote {path}")
    return 0
