"""``python -m flashref bench``: flashref's Triton kernel against PyTorch's SDPA backends, one run.

Shapes and FLOP convention follow FlashAttention-2's benchmark (§4.1): total tokens 16384
(batch = 16384 / N), hidden 2048 (heads = 2048 / d), fp16; forward FLOPs ``4·B·H·N²·d``, halved
when causal; forward+backward ``3.5×`` that. For each shape the backends are timed in turn,
``--rounds`` times over; each timing is the median of CUDA-event-timed calls after warm-up
(``triton.testing.do_bench``, which also flushes L2 between calls), and each backend keeps the
median of its rounds. Ratios of flashref to SDPA flash and cuDNN are taken from the same run, as the
median of the per-round ratios (``add_ratios``).

flashref's backends: ``flashref`` is ``gpu.attention`` as a user calls it: kernel 3 (``kernel3.py``, the
Gluon forward with FlashAttention-3's intra-warpgroup overlap and pingpong, and ``kernel3_bwd.py``) wherever
it takes the call (Hopper, Triton 3.6.0; ``kernel3.choose``), kernel 2 elsewhere; ``flashref2`` is kernel 2,
the Triton one, on every shape; ``flashref1`` kernel 1, the readable one. Each row's ``configs`` names the
kernel that ran. Optional: ``flashref3``, ``kernel3.attention`` (since ``gpu.attention`` dispatches to kernel 3,
the same kernels as ``flashref``; the older records time kernel 3 under this name), timed only where kernel 3
can run and skipped with one printed line otherwise.

Optional peer: ``fa4``, FlashAttention-4 (the ``flash-attn-4`` package, CuTe DSL kernels; Hopper and
Blackwell), timed only where ``flash_attn.cute`` imports and skipped with one printed line otherwise.
Before timing it, its output and gradients are checked against SDPA cuDNN's (``check_fa4``; the
differences go into the JSON metadata).

Also: extra peak memory of one forward+backward against N (batch 1, 16 heads, d = 64) up to 65536,
for flashref (atomic dQ and ``deterministic=True``) and the SDPA backends, and what is live at the
peak at the largest N, allocation by allocation.
Writes ``<out>/<device>.json`` and ``<out>/<device>.png`` (+ ``-memory.png``).

Options: ``--out DIR`` (figures/gpu), ``--d 64,96,128,256``, ``--N 512,...,16384``, ``--causal both|true|false``,
``--modes fwd,fwd_bwd``, ``--backends flashref,flashref2,flashref1,flash,cudnn,efficient,math,fa4`` (fa4 and
flashref3 are not in the default list), ``--mem-N ...``,
``--no-memory``, ``--dtype float16|bfloat16``. ``--variants``: the GQA and sliding-window rows instead
(``bench_variants.py``); ``--ceilings``: the measured HBM copy rate and bf16 matmul rate (``ceilings.py``).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import re
import statistics
import sys
import time
from pathlib import Path

from .. import _cli

# flashref: gpu.attention's own choice (kernel 3 where it takes the call, else 2); flashref2, flashref1: kernels 2, 1
BACKENDS = ("flashref", "flashref2", "flashref1", "flash", "cudnn", "efficient", "math", "fa4", "flashref3")
OPTIONAL = ("fa4", "flashref3")  # timed only where their package imports; not in the default --backends
NS = (512, 1024, 2048, 4096, 8192, 16384)
MEM_NS = (1024, 2048, 4096, 8192, 16384, 32768, 65536)
MEM_BACKENDS = ("flashref", "flashref_det", "flash", "cudnn", "math")  # flashref_det: deterministic=True
TOKENS, HIDDEN = 16384, 2048


def flops(mode, B, H, N, d, causal):
    """FlashAttention-2's convention: forward 4·B·H·N²·d (÷2 causal); fwd+bwd 3.5× that."""
    f = 4 * B * H * N * N * d / (2 if causal else 1)
    return f if mode == "fwd" else 3.5 * f


def save_rows(out, metadata: dict, rows: list) -> None:
    """Write a sweep's ``{"metadata": ..., "rows": ...}`` to the path ``out`` (None: nothing is written), as the
    command-line sweeps of kernel 3 and its probes record what they timed."""
    if out:
        Path(out).write_text(json.dumps(dict(metadata=metadata, rows=rows), indent=1))


def device_slug(name: str) -> str:
    s = re.sub(r"^nvidia\s+", "", name.strip(), flags=re.I).lower()
    return re.sub(r"[^a-z0-9]+", "-", s).strip("-") or "gpu"


def fa4_missing():
    """None if FlashAttention-4 (``flash_attn.cute``, pip package ``flash-attn-4``) imports, else why not."""
    try:
        import flash_attn.cute  # noqa: F401
    except Exception as e:  # not installed, or its CUDA / CuTe DSL libraries fail to load
        return f"{type(e).__name__}: {e}"
    return None


def available_backends(backends):
    """``backends`` less the optional ones whose package does not import, each skipped with one line."""
    keep = []
    for b in backends:
        why = fa4_missing() if b == "fa4" else None
        if b == "flashref3":
            from .kernel3 import unavailable
            why = unavailable()
            if why:
                print(f"skipping flashref3: kernel 3 (Gluon) cannot run here ({why[:160]})")
                continue
        if why:
            print(f"skipping fa4: FlashAttention-4 (flash-attn-4) is not importable here ({why[:120]})")
        else:
            keep.append(b)
    return tuple(keep)


def _fn(backend, causal, deterministic=None, config=None):
    import torch.nn.functional as F  # noqa: N812
    from torch.nn.attention import SDPBackend, sdpa_kernel

    if backend == "fa4":  # takes and returns (B, N, H, d); returns (out, lse)
        from flash_attn.cute import flash_attn_func
        return lambda q, k, v: flash_attn_func(q, k, v, causal=causal)[0]
    if backend == "flashref3":  # kernel 3's forward where kernel3.plan takes the call; its backward per BACKWARD3
        from .kernel3 import attention as attention3
        return lambda q, k, v: attention3(q, k, v, causal=causal, deterministic=deterministic)
    if backend in ("flashref", "flashref_det", "flashref1", "flashref2"):
        from . import attention
        from .kernels import Config
        deterministic = True if backend == "flashref_det" else deterministic
        if backend == "flashref1":
            config, deterministic = Config(version=1), False  # kernel 1: atomic dQ only
        if backend == "flashref2":
            config = config or Config()  # a Config names kernel 2: gpu.attention does not dispatch
        return lambda q, k, v: attention(q, k, v, causal=causal, deterministic=deterministic, config=config)
    sdp = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
           "efficient": SDPBackend.EFFICIENT_ATTENTION, "math": SDPBackend.MATH}[backend]

    def run(q, k, v):
        with sdpa_kernel(sdp):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    return run


def _math_too_big(mode, B, H, N):
    # eager math materialises fp32 (B, H, N, N) scores several times over (and more for backward)
    elems = B * H * N * N
    return elems > (2 ** 31 if mode == "fwd" else 2 ** 30)


def _progress(total):
    try:
        from tqdm import tqdm
        return tqdm(total=total, file=sys.stdout, mininterval=2.0, ascii=True)
    except ImportError:
        class _P:
            n = 0

            def update(self, k=1):
                self.n += k
                if self.n % 10 == 0 or self.n == total:
                    print(f"  [{self.n}/{total}]", flush=True)

            def set_postfix_str(self, s):
                pass

            def close(self):
                pass
        return _P()


def time_one(mode, backend, B, H, N, d, causal, dtype, rep=100, deterministic=None, config=None):
    """Median milliseconds of one call (fwd) or one forward+backward, or None if it fails."""
    import torch
    from triton.runtime.errors import OutOfResources
    from triton.testing import do_bench

    g = torch.Generator(device="cuda").manual_seed(N + d)
    q, k, v, do = (torch.randn(B, H, N, d, device="cuda", dtype=dtype, generator=g) for _ in range(4))
    if backend == "fa4":
        # FlashAttention-4 wants (B, N, H, d) in memory, ours are (B, H, N, d). The copy into its layout
        # happens here, before timing: a model that calls FA4 keeps its activations in that layout, so
        # the copy is no part of attention's cost, and the timed region stays the same work for every
        # backend (the attention call; for fwd_bwd its forward and backward).
        q, k, v, do = (x.transpose(1, 2).contiguous() for x in (q, k, v, do))
    f = _fn(backend, causal, deterministic, config)
    refused = (RuntimeError, torch.OutOfMemoryError, OutOfResources)  # refused shape, OOM, tile too big
    try:
        if mode == "fwd":
            with torch.no_grad():
                return do_bench(lambda: f(q, k, v), warmup=25, rep=rep, return_mode="median")
        q, k, v = (x.requires_grad_() for x in (q, k, v))
        return do_bench(lambda: f(q, k, v).backward(do), warmup=25, rep=rep, grad_to_none=[q, k, v],
                        return_mode="median")
    except Exception as e:
        if not isinstance(e, refused) and backend != "fa4":  # FA4 also refuses shapes by assertion
            raise
        print(f"  {backend} {mode} d={d} N={N} causal={causal}: {type(e).__name__}: {str(e)[:120]}")
        return None
    finally:
        torch.cuda.empty_cache()


def peak_memory(backend, N, d=64, H=16, dtype=None, breakdown=False):
    """Extra peak bytes of one forward+backward beyond q, k, v, dO (batch 1), or None on OOM.

    With ``breakdown``, returns ``(bytes, sizes)``: the sizes of the blocks allocated during the call
    that are live at the peak, largest first (from the caching allocator's event history)."""
    import torch

    dtype = dtype or torch.float16
    f = _fn(backend, causal=False)
    torch.cuda.empty_cache()
    try:
        q, k, v, do = (torch.randn(1, H, N, d, device="cuda", dtype=dtype) for _ in range(4))
        q, k, v = (x.requires_grad_() for x in (q, k, v))
        f(q, k, v).backward(do)  # warm-up (compilation, autotuning)
        q.grad = k.grad = v.grad = None
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        if breakdown:
            torch.cuda.memory._record_memory_history(enabled="all", context=None, stacks="python")
        f(q, k, v).backward(do)
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated() - base
        if not breakdown:
            return peak
        events = torch.cuda.memory._snapshot()["device_traces"][0]
        torch.cuda.memory._record_memory_history(enabled=None)
        return peak, _live_at_peak(events)
    except torch.OutOfMemoryError:
        return None
    finally:
        q = k = v = do = None
        torch.cuda.empty_cache()


def measure_memory(mem_N, dtype):
    """Memory rows for every N and backend (math only up to N = 16384), and, at the largest N, what
    is live at the peak for each fused backend: that run's peak is also its memory row."""
    memory, breakdown = [], {}
    N_max = max(mem_N)
    for N in mem_N:
        for backend in MEM_BACKENDS:
            if backend == "math" and N > 16384:
                continue
            with_breakdown = N == N_max and backend != "math"
            got = peak_memory(backend, N, dtype=dtype, breakdown=with_breakdown)
            peak = got[0] if with_breakdown and got is not None else got
            memory.append(dict(N=N, backend=backend, B=1, H=16, d=64,
                               peak_extra_mib=None if peak is None else round(peak / 2 ** 20, 2)))
            print(f"  memory N={N} {backend}: {memory[-1]['peak_extra_mib']} MiB", flush=True)
            if with_breakdown and got is not None:
                breakdown[backend] = dict(N=N, peak_extra_mib=memory[-1]["peak_extra_mib"],
                                          live_at_peak_mib=[round(x / 2 ** 20, 2) for x in got[1]])
                print(f"  at the peak, N={N} {backend}: {breakdown[backend]['live_at_peak_mib']} MiB", flush=True)
    return memory, breakdown


def _live_at_peak(events):
    """Replay alloc/free events; the sizes live when their sum was largest, largest first."""
    live, cur, best, at_best = {}, 0, -1, []
    for e in events:
        if e["action"] == "alloc":
            live[e["addr"]] = e["size"]
            cur += e["size"]
            if cur > best:
                best, at_best = cur, sorted(live.values(), reverse=True)
        elif e["action"] == "free_completed" and e["addr"] in live:
            cur -= live.pop(e["addr"])
    return at_best


def check_fa4(ds, causals, dtype, N=1024):
    """FA4's output and gradients against SDPA cuDNN's, one shape per (d, causal), before any timing.

    For each: the largest absolute difference FA4 − cuDNN of out, dq, dk, dv, and each backend's
    relative error ‖x − ref‖ / ‖ref‖ against a float32 reference (SDPA math on upcast inputs), so the
    difference can be read against both libraries' own rounding."""
    import torch
    import torch.nn.functional as F  # noqa: N812
    from torch.nn.attention import SDPBackend, sdpa_kernel

    def sdpa(backend, causal):
        def run(q, k, v):
            with sdpa_kernel(backend):
                return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        return run

    def out_and_grads(f, q, k, v, do):
        leaves = [x.detach().clone().requires_grad_() for x in (q, k, v)]
        o = f(*leaves)
        o.backward(do)
        return [o.detach()] + [x.grad for x in leaves]

    checks = []
    for d in ds:
        for causal in causals:
            B, H = 2, HIDDEN // d
            g = torch.Generator(device="cuda").manual_seed(7 * d + causal)
            q, k, v, do = (torch.randn(B, H, N, d, device="cuda", dtype=dtype, generator=g) for _ in range(4))
            rec = dict(d=d, causal=causal, B=B, H=H, N=N)
            t = [x.transpose(1, 2).contiguous() for x in (q, k, v, do)]  # FA4's (B, N, H, d)
            runs = {"ref": (sdpa(SDPBackend.MATH, causal), [x.float() for x in (q, k, v, do)], False),
                    "fa4": (_fn("fa4", causal), t, True),
                    "cudnn": (sdpa(SDPBackend.CUDNN_ATTENTION, causal), (q, k, v, do), False)}
            got = {}
            for name, (f, args, transposed) in runs.items():
                try:
                    res = out_and_grads(f, *args)
                    got[name] = [x.transpose(1, 2) for x in res] if transposed else res
                except Exception as e:  # a shape one library refuses, or a failed compile
                    rec[f"error_{name}"] = f"{type(e).__name__}: {str(e)[:200]}"
                    print(f"  fa4 check d={d} causal={causal}: {name} failed: {rec[f'error_{name}']}", flush=True)
            names = ("out", "dq", "dk", "dv")
            if "fa4" in got and "cudnn" in got:
                rec["max_abs_fa4_vs_cudnn"] = {n: float((a.float() - b.float()).abs().max())
                                               for n, a, b in zip(names, got["fa4"], got["cudnn"])}
            if "ref" in got:
                rec["relerr_vs_fp32"] = {
                    name: {n: float((x.float() - r).norm() / r.norm()) for n, x, r in zip(names, got[name], got["ref"])}
                    for name in ("fa4", "cudnn") if name in got}
            fa4_err = rec.get("relerr_vs_fp32", {}).get("fa4")
            rec["ok"] = bool(fa4_err) and all(e < 2e-2 for e in fa4_err.values())  # bf16/fp16 operands
            parts = [f"rel err vs fp32 {name} " + " ".join(f"{e:.1e}" for e in errs.values())
                     for name, errs in rec.get("relerr_vs_fp32", {}).items()]
            if "max_abs_fa4_vs_cudnn" in rec:
                parts.insert(0, "max |fa4 - cudnn| out,dq,dk,dv "
                             + " ".join(f"{e:.2e}" for e in rec["max_abs_fa4_vs_cudnn"].values()))
            print(f"  fa4 check d={d} causal={causal}: " + "; ".join(parts) + ("" if rec["ok"] else "  FAILED"),
                  flush=True)
            checks.append(rec)
            del q, k, v, do, t, runs, got
            torch.cuda.empty_cache()
    return checks


def _fa4_versions():
    from importlib.metadata import PackageNotFoundError, version
    out = {}
    for pkg in ("flash-attn-4", "nvidia-cutlass-dsl", "nvidia-cutlass-dsl-libs-cu13", "quack-kernels"):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            out[pkg] = None
    return out


def add_ratios(rows):
    """Each flashref and fa4 row's TFLOP/s over SDPA flash's and cuDNN's of the same shape (and, for
    flashref, over FA4's; for flashref and flashref3, over kernel 2's: ``flashref2``, or in the records made
    before gpu.attention dispatched to kernel 3, ``flashref``), all from the same run.

    Where both rows carry their rounds (``rounds_ms``, one per interleaved round), the ratio is the median of
    the per-round ratios: the two were timed seconds apart within each round, so a drift of the clocks from
    round to round (the H100's rounds often grow slower together) cancels in each ratio. Without rounds it is
    the ratio of the two medians."""
    by = {(r["mode"], r["d"], r["N"], r["causal"], r["backend"]): r for r in rows}
    kernel2 = "flashref2" if any(r["backend"] == "flashref2" for r in rows) else "flashref"
    for r in rows:
        if r["backend"].startswith("flashref") or r["backend"] == "fa4":
            others = ("flash", "cudnn") + (("fa4",) if r["backend"] != "fa4" else ())
            others += (kernel2,) if r["backend"] in ("flashref3", "flashref") and r["backend"] != kernel2 else ()
            for other in others:
                o = by.get((r["mode"], r["d"], r["N"], r["causal"], other))
                if o:
                    key = {"fa4": "ratio_vs_fa4", kernel2: "ratio_vs_kernel2"}.get(other, f"ratio_vs_sdpa_{other}")
                    r[key] = round(_ratio(r, o), 3)
    return rows


def _ratio(r, o) -> float:
    """r's speed over o's: the median of the per-round ratios where both have the same rounds, else of the
    medians (add_ratios)."""
    a, b = r.get("rounds_ms"), o.get("rounds_ms")
    if a and b and len(a) == len(b):
        return statistics.median(y / x for x, y in zip(a, b))  # time of o over time of r, round by round
    return r["tflops"] / o["tflops"]


def _flashref_configs(backend, d, causal, mode, N=1 << 14, dtype="float16"):
    """The tiles and flags each flashref kernel ran with (``kernels.Config.describe``; where kernel 3 ran
    (flashref3, and flashref where gpu.attention dispatched to it), kernel 3's tiles, or why kernel 2 ran)."""
    from .kernel3 import backward_plan, plan, unavailable
    from .kernels import Config
    if backend == "flashref3" or backend == "flashref" and not unavailable() and plan(d, N, N, dtype, causal)[0]:
        t, why = plan(d, N, N, dtype, causal)
        flags = "".join(f" {name}" for name, on in (("pingpong", t and t.pingpong), ("persistent", t and t.persistent),
                                                    ("q_prefetch", t and t.q_prefetch), ("dynamic", t and t.dynamic),
                                                    (f"emu{t and t.emu}", t and t.emu)) if on)
        out = {"fwd": f"{t.block_m}x{t.block_n} w{t.warps} s{t.stages}{flags} kernel3" if t else f"kernel 2 ({why})"}
        if mode != "fwd":
            tb, why = backward_plan(d, N, N, dtype, causal)
            bflags = "".join(f" {name}" for name in ("vec4", "pipe", "persistent") if getattr(tb, name, False))
            out["dkdv"] = (f"{tb.block_m}x{tb.block_n} s{tb.stages} dq{tb.dq}{bflags} kernel3" if tb
                           else f"kernel 2 ({why})")
        return out
    cfg = Config(version=1 if backend == "flashref1" else 2)
    out = cfg.resolve(d, causal, deterministic=False).describe()
    if mode == "fwd":
        out.pop("dkdv", None)
    out.pop("dq", None)  # the deterministic dQ kernel does not run (atomic dQ is the default)
    return out


def run(args) -> dict:
    import torch
    import triton

    dtype = getattr(torch, args.dtype)
    causals = {"both": (False, True), "true": (True,), "false": (False,)}[args.causal]
    shapes = [(m, d, c, N) for m in args.modes for d in args.d for c in causals for N in args.N]
    rows = []
    extra = {}
    if "fa4" in args.backends:
        extra = dict(fa4_versions=_fa4_versions(), fa4_check=check_fa4(args.d, causals, dtype),
                     fa4_layout="q, k, v, dO copied to (B, N, H, d) before timing; only the attention call(s) timed")
    bar = _progress(len(shapes) * len(args.backends) * args.rounds)
    skipped = set()  # (mode, N) where eager math's N x N scores would not fit: not timed, and said so
    t0 = time.time()
    for mode, d, causal, N in shapes:
        B, H = TOKENS // N, HIDDEN // d
        # The backends of one shape are timed in turn, `rounds` times over (each a `rep / rounds` ms
        # do_bench), and each keeps the median of its rounds: clock drift during the run then moves
        # every backend alike instead of whichever happened to run in a slow stretch.
        times = {b: [] for b in args.backends}
        for _ in range(args.rounds):
            for backend in args.backends:
                bar.set_postfix_str(f"{mode} d={d} causal={causal} N={N} {backend}")
                bar.update()
                if backend == "math" and _math_too_big(mode, B, H, N):
                    skipped.add((mode, N))
                    continue
                if None in times[backend]:
                    continue
                times[backend].append(time_one(mode, backend, B, H, N, d, causal, dtype, rep=_rep(args)))
        for backend, ms_list in times.items():
            if not ms_list or None in ms_list:
                continue
            ms = statistics.median(ms_list)
            row = dict(mode=mode, d=d, N=N, causal=causal, backend=backend, B=B, H=H, ms=round(ms, 5),
                       tflops=round(flops(mode, B, H, N, d, causal) / (ms * 1e-3) / 1e12, 2),
                       rounds_ms=[round(x, 5) for x in ms_list])
            if backend.startswith("flashref"):
                row["configs"] = _flashref_configs(backend, d, causal, mode, N, args.dtype)
            rows.append(row)
    bar.close()
    for mode, N in sorted(skipped):
        print(f"math not timed: {mode} at N = {N} (its B·H·N² scores in fp32 are past _math_too_big's bound)",
              file=sys.stderr)
    add_ratios(rows)
    memory, breakdown = ([], {}) if args.no_memory else measure_memory(args.mem_N, dtype)
    props = torch.cuda.get_device_properties(0)
    meta = dict(device=torch.cuda.get_device_name(0), sms=props.multi_processor_count,
                torch=torch.__version__, triton=triton.__version__, cuda=torch.version.cuda,
                date=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"), dtype=args.dtype,
                tokens=TOKENS, hidden=HIDDEN, timing=f"median of {args.rounds} interleaved rounds (backends of a "
                f"shape in turn), each a triton.testing.do_bench median, warmup 25 ms, rep {_rep(args)} "
                "ms", flop_convention="fwd 4BHN^2d (/2 causal); fwd_bwd 3.5x fwd",
                seconds=round(time.time() - t0, 1), **extra)
    return dict(metadata=meta, rows=rows, memory=memory, memory_breakdown=breakdown)


def plot(result):
    """Figure: TFLOP/s against N, one panel per (mode, d, causal)."""
    from ..plots import COLORS, figure

    rows = result["rows"]
    meta = result["metadata"]
    keys = sorted({(r["mode"], r["d"], r["causal"]) for r in rows}, key=lambda t: (t[0] != "fwd", t[1], t[2]))
    ncols = max(1, len({(d, c) for _, d, c in keys}))
    nrows = max(1, len({m for m, _, _ in keys}))
    fig, axes = figure(f"Attention TFLOP/s on {meta['device']} ({meta['dtype']}, {TOKENS} tokens, hidden "
                       f"{HIDDEN}; torch {meta['torch']}, triton {meta['triton']})",
                       ncols=ncols, nrows=nrows, width=3.2 * ncols, height=2.8 * nrows)
    import numpy as np
    axes = np.atleast_2d(axes)
    cols = sorted({(d, c) for _, d, c in keys})
    modes = sorted({m for m, _, _ in keys}, key=lambda m: m != "fwd")
    for (mode, d, causal) in keys:
        ax = axes[modes.index(mode), cols.index((d, causal))]
        for backend in BACKENDS:
            pts = sorted((r["N"], r["tflops"]) for r in rows
                         if (r["mode"], r["d"], r["causal"], r["backend"]) == (mode, d, causal, backend))
            if pts:
                ax.plot(*zip(*pts), marker="o", ms=3, color=COLORS.get(backend), label=backend,
                        lw=2 if backend == "flashref" else 1)
        ax.set_xscale("log", base=2)
        ax.set_title(f"{mode}, d={d}, causal={causal}")
        ax.set_xlabel("N")
        ax.set_ylabel("TFLOP/s")
    axes.flat[0].legend()
    fig.tight_layout()
    return fig


def plot_memory(result):
    from ..plots import COLORS, figure

    meta = result["metadata"]
    fig, ax = figure(f"Extra peak memory of forward+backward on {meta['device']}\n(batch 1, 16 heads, d=64, "
                     f"{meta['dtype']})")
    for backend in MEM_BACKENDS:
        pts = sorted((m["N"], m["peak_extra_mib"]) for m in result["memory"]
                     if m["backend"] == backend and m["peak_extra_mib"] is not None)
        if pts:  # cuDNN wide and pale underneath, flashref thin and dashed on top: equal bytes, both visible
            style = {"cudnn": dict(lw=5, alpha=0.45, zorder=2, ms=0),
                     "flashref": dict(lw=1.3, ls="--", zorder=4, ms=3)}.get(backend, dict(lw=1, zorder=3, ms=3))
            label = backend + (" (same bytes as cudnn)" if backend == "flashref" else "")
            ax.plot(*zip(*pts), marker="o", color=COLORS.get(backend), label=label, **style)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("N")
    ax.set_ylabel("MiB")
    lo, hi = ax.get_ylim()
    ax.set_ylim(lo, hi * 30)  # headroom: the legend sits above every line
    ax.legend(loc="upper left", ncol=2, fontsize=7)
    return fig


def table(result) -> str:
    """TFLOP/s per shape and backend; xflash, xcudnn, xfa4: flashref's ratios; fa4xcu: FA4's over cuDNN."""
    lines = [f"{'mode':7} {'d':>3} {'causal':6} {'N':>6} {'flashref':>8} {'kern2':>6} {'kern1':>6} {'flash':>6} "
             f"{'cudnn':>6} {'effic':>6} {'math':>5} {'fa4':>5} {'xflash':>6} {'xcudnn':>6} {'xkern2':>6} {'xfa4':>5} "
             f"{'fa4xcu':>6}"]
    k3 = any(r["backend"] == "flashref3" for r in result["rows"])  # kernel 3's columns, where it ran
    if k3:
        lines[0] += f" {'kern3':>6} {'k3xcu':>6} {'k3xk2':>6}"
    by = {(r["mode"], r["d"], r["N"], r["causal"], r["backend"]): r for r in result["rows"]}
    keys = sorted({(r["mode"], r["d"], r["causal"], r["N"]) for r in result["rows"]},
                  key=lambda t: (t[0] != "fwd", t[1], t[2], t[3]))
    for mode, d, causal, N in keys:
        def g(b, field="tflops", fmt="{:.0f}", key=(mode, d, N, causal)):
            r = by.get(key + (b,))
            return fmt.format(r[field]) if r and field in r else "-"
        lines.append(f"{mode:7} {d:>3} {causal!s:6} {N:>6} {g('flashref'):>8} {g('flashref2'):>6} {g('flashref1'):>6} "
                     f"{g('flash'):>6} {g('cudnn'):>6} {g('efficient'):>6} {g('math'):>5} {g('fa4'):>5} "
                     f"{g('flashref', 'ratio_vs_sdpa_flash', '{:.2f}'):>6} "
                     f"{g('flashref', 'ratio_vs_sdpa_cudnn', '{:.2f}'):>6} "
                     f"{g('flashref', 'ratio_vs_kernel2', '{:.2f}'):>6} "
                     f"{g('flashref', 'ratio_vs_fa4', '{:.2f}'):>5} {g('fa4', 'ratio_vs_sdpa_cudnn', '{:.2f}'):>6}"
                     + (f" {g('flashref3'):>6} {g('flashref3', 'ratio_vs_sdpa_cudnn', '{:.2f}'):>6} "
                        f"{g('flashref3', 'ratio_vs_kernel2', '{:.2f}'):>6}" if k3 else ""))
    for m in result.get("memory", []):
        lines.append(f"memory N={m['N']:>6} {m['backend']:9} {m['peak_extra_mib']} MiB")
    return "\n".join(lines)


def fa4_markdown(result, Ns=(4096, 8192, 16384)) -> str:
    """Markdown rows of FA4 beside cuDNN, SDPA flash and flashref: TFLOP/s and ratios, from a result."""
    by = {(r["mode"], r["d"], r["N"], r["causal"], r["backend"]): r for r in result["rows"]}
    keys = sorted({(r["mode"], r["d"], r["causal"], r["N"]) for r in result["rows"]
                   if r["backend"] == "fa4" and r["N"] in Ns}, key=lambda t: (t[0] != "fwd", t[1], t[2], t[3]))
    lines = ["| mode | d | causal | N | FA4 | cuDNN | SDPA flash | flashref | FA4 ×cuDNN | flashref ×cuDNN "
             "| flashref ×FA4 |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for mode, d, causal, N in keys:
        def g(b, field="tflops", fmt="{:.0f}", key=(mode, d, N, causal)):
            r = by.get(key + (b,))
            return fmt.format(r[field]) if r and field in r else "-"
        cells = [mode, d, causal, N, g("fa4"), g("cudnn"), g("flash"), g("flashref"),
                 g("fa4", "ratio_vs_sdpa_cudnn", "{:.2f}"), g("flashref", "ratio_vs_sdpa_cudnn", "{:.2f}"),
                 g("flashref", "ratio_vs_fa4", "{:.2f}")]
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    return "\n".join(lines)


def _rep(args) -> int:
    """The do_bench repetition time of one round, ms: --rep split among the rounds, 10 ms at least."""
    return max(10, args.rep // args.rounds)


def parse_args(argv):
    # allow_abbrev=False: main picks --variants and --ceilings out of argv by their whole names, so a prefix
    # (--ceil) must not reach this parser, which would take it, set a flag nothing reads, and run the plain bench
    p = argparse.ArgumentParser(prog="python -m flashref bench", description=__doc__.split("\n")[0],
                                allow_abbrev=False)
    p.add_argument("--out", type=_cli.folder, default="figures/gpu", help="folder for the JSON (default: %(default)s)")
    p.add_argument("--d", type=_cli.positive_ints, default=(64, 96, 128, 256),
                   help=f"head dims up to the hidden size {HIDDEN} (heads = {HIDDEN} // d: 21 at d = 96)")
    p.add_argument("--N", type=_cli.positive_ints, default=NS,
                   help=f"sequence lengths, each dividing the {TOKENS} tokens (batch = {TOKENS} / N)")
    p.add_argument("--causal", default="both", choices=("both", "true", "false"),
                   help="causal rows, non-causal rows or both (default)")
    p.add_argument("--modes", type=_cli.choices("fwd", "fwd_bwd"), default=("fwd", "fwd_bwd"),
                   help="comma-separated: fwd, fwd_bwd (default: both)")
    p.add_argument("--backends", type=_cli.choices(*BACKENDS), default=tuple(b for b in BACKENDS if b not in OPTIONAL),
                   help=f"comma-separated, of {', '.join(BACKENDS)} (default: all but {', '.join(OPTIONAL)}, "
                        "timed where their package imports)")
    p.add_argument("--mem-N", dest="mem_N", type=_cli.positive_ints, default=MEM_NS,
                   help="sequence lengths of the peak-memory rows (d = 64, 16 heads)")
    p.add_argument("--no-memory", action="store_true", help="skip the peak-memory rows")
    p.add_argument("--dtype", default="float16", choices=("float16", "bfloat16"), help="input dtype (default: float16)")
    p.add_argument("--rep", type=_cli.positive_int, default=120,
                   help="do_bench repetition time per backend and shape, ms")
    p.add_argument("--rounds", type=_cli.positive_int, default=3,
                   help="interleaved timing rounds per shape (rep split among them, at least 10 ms each)")
    p.add_argument("--name", type=_cli.stem, default=None, help="output stem (default: the device slug)")
    # taken by main before these arguments are parsed: listed here so that --help names them
    p.add_argument("--variants", action="store_true",
                   help="time the GQA and sliding-window rows instead (their own options: --variants --help)")
    p.add_argument("--ceilings", action="store_true",
                   help="measure the roofline's ceilings instead (their own options: --ceilings --help)")
    args = p.parse_args(argv)
    # the sweep holds the tokens fixed (batch = TOKENS / N: a length that does not divide them would change the work
    # it compares, or leave no batch at all) and the hidden size as near as whole heads allow (one head at least)
    bad = [N for N in args.N if TOKENS % N]
    if bad:
        p.error(f"argument --N: {bad} do not divide the {TOKENS} tokens")
    bad = [d for d in args.d if d > HIDDEN]
    if bad:
        p.error(f"argument --d: {bad} exceed the hidden size {HIDDEN} (no whole head)")
    if args.rep < args.rounds:
        p.error(f"argument --rounds: {args.rounds} rounds would leave less than 1 ms of --rep {args.rep} each")
    return args


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--variants" in argv:  # the GQA and sliding-window rows (bench_variants.py)
        from .bench_variants import main as variants
        return variants(argv)
    if "--ceilings" in argv:  # the measured roofline ceilings (ceilings.py)
        from .ceilings import main as ceilings
        return ceilings(argv)
    args = parse_args(argv)
    import torch
    if not torch.cuda.is_available():
        print("bench needs a CUDA GPU; the recorded results are in figures/gpu/*.json", file=sys.stderr)
        return 1
    args.backends = available_backends(args.backends)
    result = run(args)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = args.name or device_slug(result["metadata"]["device"])
    (out / f"{stem}.json").write_text(json.dumps(result, indent=1))
    fig = plot(result)
    fig.savefig(out / f"{stem}.png", dpi=110)
    if result["memory"]:
        plot_memory(result).savefig(out / f"{stem}-memory.png", dpi=110, metadata={"Software": None})
    print(table(result))
    print(f"wrote {out / (stem + '.json')}")
    return 0
