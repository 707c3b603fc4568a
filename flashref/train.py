"""``python -m flashref train``: GPT-2 trained end to end on each attention backend, measured.

Two experiments in one run (a *suite* fixes their sizes; ``--suite h100`` is the GPU one):

1. **Throughput** at sequence lengths N (1K … 16K on a GPU) and a fixed number of tokens per step
   (batch = tokens // N), for each backend: after ``warmup`` steps, ``steps`` timed steps (each
   synchronised; the median step gives tokens/s), the peak memory of the run, and
   ``profile_steps`` more steps under the PyTorch profiler, which give attention's share of the
   GPU time (:func:`attention_share`). A backend that runs out of memory at N is recorded as
   ``"oom"`` and not tried at longer N (its memory only grows with N at fixed tokens per step).
2. **Loss parity**: ``parity_steps`` steps from one seed (same initial weights, same batches) for
   each backend, on the suite's parity model, plus one run of the reference backend from another
   seed (the seed-to-seed spread). :func:`parity_verdict` states the tolerance.

Model FLOPs utilisation (MFU) counts the FLOPs the model needs, not what a kernel does (no
recomputation), per token, forward + backward:

    6 · P  +  12 · n_layer · N · n_embd

``6 · P``: each of the P weights (position embedding excluded: a lookup) does one multiply-add
(2 FLOPs) per token in the forward and two in the backward (gradient of the input and of the
weight). Attention: a query row's scores q kᵀ over N keys cost 2·N·d per head, P v as much, so
4·N·n_embd per token and layer forward over all heads, and twice that backward: 12·N·n_embd. This
is the papers' convention (FlashAttention-2 §4.2, Megatron, PaLM): the attention term is *not*
halved for the causal mask, although a causal kernel skips half of it; ``mfu_causal`` halves it
(6·n_layer·N·n_embd). MFU = FLOPs per token × tokens/s ÷ the GPU's dense bf16 peak
(:mod:`flashref.hardware`: 989.4 TFLOP/s for an H100 SXM).

Results go to one JSON file (``--out``), rewritten after every configuration so that a run cut
short keeps what it measured. Schema (:data:`SCHEMA` is the version)::

    {"schema": "flashref.train/1",
     "metadata": {device, peak_flops, torch, triton, suite, dtype, date, seconds, argv, ...},
     "config": {suite's settings: model (GPTConfig dict), Ns, backends, tokens_per_step, ...},
     "throughput": [{N, backend, status: "ok"|"oom"|"error"|"skipped", note, batch, tokens_per_step,
                     step_ms, step_ms_all, tokens_per_s, params, params_matmul, flops_per_token,
                     tflops, mfu, mfu_causal, peak_mem_gib, attn_share, attn_share_tree,
                     attn_share_by_name, attn_ms_per_step, device_ms_per_step, top_kernels, losses}],
     "parity": {config, N, batch, steps, seed, lr, loss_floor,
                curves: {backend: [loss per step]}, seed_curve: {backend, seed, losses},
                status: {backend: "ok"|"oom"|"error: ..."}, verdict: {...parity_verdict...}}}

``attn_share`` is the share of the profiled steps' GPU kernel time spent in kernels launched
inside attention's forward or backward (profiler ranges placed by :class:`flashref.gpt.GPT`); on
a CPU it is the share of wall time inside those ranges.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import gc
import json
import math
import numbers
import os
import re
import statistics
import sys
import time
from pathlib import Path

from . import _cli
from .gpt import BACKENDS, GPT, GPTConfig, copy_batch, loss_floor
from .problem import _nonnegative_int, _seed, check_options, positive_int, positive_real

SCHEMA = "flashref.train/1"

# Suites: every size of a run in one place. The h100 suite is sized to finish in about 6 minutes on
# one H100 (GPT-2 small, 16K tokens per step; parity on a 6-layer model, whose 300 steps take seconds).
SUITES = {
    "h100": dict(
        model=dict(n_layer=12, n_head=12, n_embd=768, vocab_size=50304),
        Ns=(1024, 2048, 4096, 8192, 16384), backends=("eager", "sdpa_flash", "sdpa_cudnn", "flashref"),
        tokens_per_step=16384, warmup=3, steps=10, profile_steps=2, data_vocab=512, period=16, amp=True, lr=3e-4,
        parity=dict(model=dict(n_layer=6, n_head=6, n_embd=384, vocab_size=50304), N=1024, batch=8, steps=300,
                    backends=("sdpa_flash", "sdpa_cudnn", "flashref", "eager"), lr=1e-3, warmup=30,
                    ref="sdpa_flash", peer="sdpa_cudnn"),
        parity_after_N=1024, budget_s=400),
    "cpu-tiny": dict(
        model=dict(n_layer=2, n_head=4, n_embd=64, vocab_size=128),
        Ns=(32, 64, 128, 256), backends=("eager", "sdpa_math", "numpy"),
        tokens_per_step=1024, warmup=2, steps=5, profile_steps=2, data_vocab=16, period=4, amp=False, lr=3e-3,
        parity=dict(model=dict(n_layer=2, n_head=4, n_embd=64, vocab_size=128), N=32, batch=8, steps=300,
                    backends=("sdpa_math", "eager", "numpy"), lr=3e-3, warmup=30,
                    ref="sdpa_math", peer="eager"),
        parity_after_N=32, budget_s=600),
    # the CI test's size: a few steps, the loss must fall (tests/test_train.py)
    "test": dict(
        model=dict(n_layer=1, n_head=2, n_embd=32, vocab_size=64),
        Ns=(32,), backends=("eager", "numpy"),
        tokens_per_step=128, warmup=1, steps=2, profile_steps=1, data_vocab=16, period=4, amp=False, lr=1e-2,
        parity=dict(model=dict(n_layer=1, n_head=2, n_embd=32, vocab_size=64), N=32, batch=4, steps=6,
                    backends=("eager", "numpy"), lr=1e-2, warmup=0,
                    ref="eager", peer="numpy"),
        parity_after_N=32, budget_s=600),
}

# Loss parity alone, at a gentler learning rate: at lr 1e-3 the h100 suite's curves spike after the
# warm-up, and the step at which the copy behaviour appears then differs between backends. The h100
# suite with no throughput sizes and a longer, slower parity run.
SUITES["h100-parity"] = dict(SUITES["h100"], Ns=(), backends=(),
                             parity=dict(SUITES["h100"]["parity"], steps=600, lr=3e-4, warmup=100))

_ATTN_KERNEL = re.compile(r"flash|fmha|sdpa|attention|attn|_fwd_kernel|_bwd_", re.I)


# --------------------------------------------------------------------------- helpers

def flops_per_token(cfg: GPTConfig, params_matmul: int, N: int, causal_halved: bool = False) -> float:
    """Model FLOPs per token, forward + backward: 6·P + 12·n_layer·N·n_embd (÷2 on the attention term
    when ``causal_halved``). See the module docstring for the derivation."""
    if not isinstance(cfg, GPTConfig):
        raise TypeError(f"cfg: expected a GPTConfig, got {type(cfg).__name__}")
    N, params_matmul = positive_int(N, "N"), _nonnegative_int(params_matmul, "params_matmul")
    attn = 12 * cfg.n_layer * N * cfg.n_embd
    return 6 * params_matmul + (attn / 2 if causal_halved else attn)


def peak_flops(device_name: str):
    """Dense bf16 tensor-core peak of the named GPU from :mod:`flashref.hardware`, or None. The H100 and H200
    presets are the SXM parts; an H100 PCIe (114 SMs, lower clocks) or NVL, or an H200 NVL (about 835 TFLOP/s),
    has another peak that no preset holds, so None: no model-FLOPs utilisation rather than one against the wrong
    peak. Names are matched as whole words: an "RTX A1000" is not an A100."""
    from . import hardware

    if not isinstance(device_name, str):
        raise TypeError(f"device_name: expected a GPU's name (str), got {type(device_name).__name__}")

    def has(word):
        return re.search(rf"\b{word}\b", device_name, re.I) is not None

    for gpu in ("H200", "H100"):
        if has(gpu):
            return None if has("PCIe") or has("NVL") else hardware.get(gpu).peak("matmul")
    if has("A100"):  # the PCIe A100 has the SXM4's 312 TFLOP/s
        return hardware.get("A100-80GB" if re.search(r"\b80\s?GB\b", device_name, re.I) else "A100").peak("matmul")
    return None


def mfu_peak(device_name: str, amp: bool):
    """The peak an MFU is taken against: :func:`peak_flops` for a bf16 autocast run; None for a float32 run (the
    CPU suites run on a GPU), whose roof is not the bf16 tensor cores', rather than an MFU against the wrong peak."""
    return peak_flops(device_name) if amp else None


def _progress(total):
    from .gpu.bench import _progress as progress

    return progress(total)


def _sync(device):
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize()


def _is_oom(e) -> bool:
    import torch

    return isinstance(e, torch.OutOfMemoryError) or "out of memory" in str(e).lower()


def _free(device):
    gc.collect()
    if device.type == "cuda":
        import torch

        torch.cuda.empty_cache()


_MODEL_KEYS = ("n_layer", "n_head", "n_embd", "vocab_size")  # GPTConfig's fields but block_size, which is N


def _model_cfg(model_cfg, N, data_vocab) -> GPTConfig:
    """The GPTConfig of a run: ``model_cfg`` (a dict of :data:`_MODEL_KEYS`) at block size N, checked
    against the copy task's vocabulary ``data_vocab``."""
    if not isinstance(model_cfg, dict):
        raise TypeError(f"model_cfg: expected a dict of {', '.join(_MODEL_KEYS)}, got {type(model_cfg).__name__}")
    check_options(model_cfg, _MODEL_KEYS, "model_cfg")  # block_size too: it is N
    cfg = GPTConfig(**model_cfg, block_size=positive_int(N, "N"))
    # on a CPU the model would refuse the tokens (naming idx); on a GPU they index past the embedding: a
    # device-side assert that poisons the CUDA context for every later configuration of the run
    if positive_int(data_vocab, "data_vocab") > cfg.vocab_size:
        raise ValueError(f"data_vocab={data_vocab}: the copy task's tokens must be ids of the model, "
                         f"data_vocab <= vocab_size={cfg.vocab_size}")
    return cfg


def _device(device):
    import torch

    if isinstance(device, str):
        device = torch.device(device)
    if not isinstance(device, torch.device):
        raise TypeError(f"device: expected a torch.device or 'cpu'/'cuda', got {type(device).__name__}")
    return device


def _batch_seed(seed: int) -> int:
    """The batches' generator seed: the model's plus one, modulo 2**64 (2**64 - 1 + 1 overflowed torch's seed)."""
    return (_seed(seed) + 1) % 2**64


def _build(model_cfg: dict, N: int, backend: str, device, seed: int, lr: float, data_vocab: int):
    """Model (initialised from ``seed`` directly on ``device``) and its AdamW optimizer."""
    import torch

    cfg = _model_cfg(model_cfg, N, data_vocab)
    seed = _seed(seed)
    lr = positive_real(lr, "lr", "a finite learning rate > 0")  # AdamW's own message does not name the argument
    torch.manual_seed(seed % 2**64)  # torch's generators hold 64 bits: any integer is a seed, modulo 2**64
    with torch.device(device):
        model = GPT(cfg, attention=backend)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.1,
                            fused=device.type == "cuda")
    return cfg, model, opt


def _step(model, opt, x, y, amp, device, lr=None):
    import torch

    if lr is not None:
        for g in opt.param_groups:
            g["lr"] = lr
    with torch.autocast(device.type, dtype=torch.bfloat16, enabled=amp):
        loss = model(x, y)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss


# --------------------------------------------------------------------------- attention share

def attention_share(prof, cuda: bool) -> dict:
    """Attention's share of the profiled steps, from the profiler ranges ``attention_fwd``/``_bwd``.

    On a GPU: kernels are attributed to the CPU op that launched them (the profiler's correlation
    ids); a kernel counts as attention when its op started inside one of the ranges. ``share`` is
    attention's kernel time over all kernel time. ``share_tree`` is the same from PyTorch's own
    event tree (``device_time_total`` of the ranges), ``share_by_name`` counts kernels whose name
    looks like a fused attention kernel (blind to eager attention's generic matmuls). On a CPU:
    time inside the ranges over time inside the ``train_step`` ranges."""
    from torch.autograd import DeviceType

    evs = prof.events()
    cpu = [e for e in evs if e.device_type == DeviceType.CPU]
    ranges = sorted((e.time_range.start, e.time_range.end) for e in cpu
                    if e.name in ("attention_fwd", "attention_bwd"))
    steps = [e for e in cpu if e.name == "train_step"]
    wall_us = sum(e.time_range.elapsed_us() for e in steps)
    if not cuda:
        inside = sum(b - a for a, b in ranges)
        return dict(share=inside / wall_us if wall_us else None, share_tree=None, share_by_name=None,
                    attn_us=inside, total_us=wall_us, wall_us=wall_us, top_kernels=[])
    starts = [a for a, _ in ranges]

    def in_attention(t):
        import bisect

        i = bisect.bisect_right(starts, t) - 1
        return i >= 0 and t <= ranges[i][1]

    attn = total = by_name = 0.0
    per_kernel: dict = {}
    for e in cpu:
        if not e.kernels:
            continue
        hit = in_attention(e.time_range.start)
        for k in e.kernels:
            total += k.duration
            attn += k.duration if hit else 0.0
            by_name += k.duration if _ATTN_KERNEL.search(k.name) else 0.0
            per_kernel[k.name] = per_kernel.get(k.name, 0.0) + k.duration
    tree = sum(e.device_time_total for e in cpu if e.name in ("attention_fwd", "attention_bwd"))
    top = sorted(per_kernel.items(), key=lambda kv: -kv[1])[:8]
    return dict(share=attn / total if total else None, share_tree=tree / total if total else None,
                share_by_name=by_name / total if total else None, attn_us=attn, total_us=total,
                wall_us=wall_us, top_kernels=[[n[:90], round(t / 1e3, 3)] for n, t in top])


# --------------------------------------------------------------------------- experiments

def _check_sizes(suite: dict, name: str = "suite") -> None:
    """The throughput sizes of ``suite`` (as :func:`measure` reads them), each named when wrong: a warm-up of -1 or 0
    timed steps ended in ``statistics.median`` of nothing, a ``tokens_per_step`` <= 0 ran batch 1 silently."""
    if not isinstance(suite, dict):
        raise TypeError(f"{name}: expected a dict of a suite's settings (as train.SUITES[...]), "
                        f"got {type(suite).__name__}")
    missing = [k for k in ("tokens_per_step", "warmup", "steps", "profile_steps", "amp") if k not in suite]
    if missing:
        raise ValueError(f"{name}: missing {', '.join(missing)} (see train.SUITES)")
    positive_int(suite["tokens_per_step"], f"{name}['tokens_per_step']")
    _nonnegative_int(suite["warmup"], f"{name}['warmup']")
    positive_int(suite["steps"], f"{name}['steps']")  # the median step time needs one
    positive_int(suite["profile_steps"], f"{name}['profile_steps']")  # the per-step attention time divides by it
    if not isinstance(suite["amp"], bool):  # was torch's set_autocast_enabled() TypeError
        raise TypeError(f"{name}['amp']: expected True or False, got {suite['amp']!r}")


def measure(suite: dict, N: int, backend: str, device, seed: int = 0) -> dict:
    """One throughput configuration: warm-up, timed steps, memory, profiled steps."""
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    _check_sizes(suite)
    N = positive_int(N, "N")
    device = _device(device)
    B = max(1, suite["tokens_per_step"] // N)
    cfg, model, opt = _build(suite["model"], N, backend, device, seed, suite["lr"], suite["data_vocab"])
    gen = torch.Generator(device=device).manual_seed(_batch_seed(seed))
    n = suite["warmup"] + suite["steps"] + suite["profile_steps"]
    batches = [copy_batch(B, N, suite["data_vocab"], gen, suite["period"]) for _ in range(n)]
    amp, losses, times = suite["amp"], [], []
    for x, y in batches[: suite["warmup"]]:
        losses.append(_step(model, opt, x, y, amp, device).detach())
    _sync(device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    for x, y in batches[suite["warmup"]: suite["warmup"] + suite["steps"]]:
        t = time.perf_counter()
        losses.append(_step(model, opt, x, y, amp, device).detach())
        _sync(device)
        times.append(time.perf_counter() - t)
    peak = torch.cuda.max_memory_allocated() / 2 ** 30 if device.type == "cuda" else None
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    model.set_profiling(True)
    try:  # a profiler failure costs the attention share, not the configuration
        with profile(activities=acts) as prof:
            for x, y in batches[suite["warmup"] + suite["steps"]:]:
                with record_function("train_step"):
                    losses.append(_step(model, opt, x, y, amp, device).detach())
                    _sync(device)
        share = attention_share(prof, device.type == "cuda")
        del prof
    except Exception as e:  # noqa: BLE001
        if _is_oom(e):
            raise
        share = dict(share=None, share_tree=None, share_by_name=None, attn_us=0.0, total_us=0.0, top_kernels=[],
                     error=f"profiler: {type(e).__name__}: {str(e)[:200]}")
    model.set_profiling(False)
    step_s = statistics.median(times)
    params, params_mm = model.num_params(), model.num_params(matmul_only=True)
    fpt, fpt_c = flops_per_token(cfg, params_mm, N), flops_per_token(cfg, params_mm, N, causal_halved=True)
    tps = B * N / step_s
    peak_f = mfu_peak(torch.cuda.get_device_name(0), suite["amp"]) if device.type == "cuda" else None
    k = suite["profile_steps"]
    return dict(N=N, backend=backend, status="ok", note=share.get("error", ""), batch=B, tokens_per_step=B * N,
                step_ms=round(step_s * 1e3, 3), step_ms_all=[round(t * 1e3, 3) for t in times],
                tokens_per_s=round(tps, 1), params=params, params_matmul=params_mm, flops_per_token=fpt,
                tflops=round(fpt * tps / 1e12, 3),
                mfu=None if peak_f is None else round(fpt * tps / peak_f, 4),
                mfu_causal=None if peak_f is None else round(fpt_c * tps / peak_f, 4),
                peak_mem_gib=None if peak is None else round(peak, 3),
                attn_share=_r(share["share"]), attn_share_tree=_r(share["share_tree"]),
                attn_share_by_name=_r(share["share_by_name"]),
                attn_ms_per_step=round(share["attn_us"] / 1e3 / k, 3) if share["share"] is not None else None,
                device_ms_per_step=round(share["total_us"] / 1e3 / k, 3) if share["share"] is not None else None,
                top_kernels=share["top_kernels"], losses=[round(float(v), 5) for v in losses])


def _r(x, nd=4):
    return None if x is None else round(x, nd)


def train_curve(model_cfg: dict, N: int, batch: int, steps: int, backend: str, device, seed: int, lr: float,
                warmup: int, amp: bool, data_vocab: int, period: int | None = None, progress=None) -> list:
    """Losses of ``steps`` steps from ``seed`` (weights and batches both follow it); linear lr
    warm-up over ``warmup`` steps, then constant."""
    import torch

    device = _device(device)
    steps = positive_int(steps, "steps")  # 0 steps: torch.stack of nothing, deep in the return line
    # a negative warm-up made every step's lr negative (lr * (s + 1) / warmup): gradient ascent, silently
    warmup = _nonnegative_int(warmup, "warmup")
    if not isinstance(amp, bool):
        raise TypeError(f"amp: expected True or False, got {amp!r}")
    _, model, opt = _build(model_cfg, N, backend, device, seed, lr, data_vocab)
    gen = torch.Generator(device=device).manual_seed(_batch_seed(seed))
    losses = []
    for s in range(steps):
        x, y = copy_batch(batch, N, data_vocab, gen, period)
        loss = _step(model, opt, x, y, amp, device, lr=lr * min(1.0, (s + 1) / warmup) if warmup else lr)
        losses.append(loss.detach())
        if progress is not None and s % 25 == 24:
            progress(s + 1)
    return [round(float(v), 5) for v in torch.stack(losses).cpu()]


def parity_verdict(curves: dict, seed_curve: list | None, ref: str, peer: str, window: int = 50) -> dict:
    """Do the curves agree within bf16 noise? The rule, per backend b over the last ``window`` steps:

        max_t |L_b(t) − L_ref(t)|  ≤  tol = max(2 · noise, 5e-3 · mean_t L_ref(t))

    ``noise`` is the same statistic between two independent production kernels of the same
    arithmetic (``peer`` against ``ref``: cuDNN against PyTorch's flash on a GPU): the spread
    that bf16 rounding in a different summation order produces after the same number of steps.
    The factor 2 is flash-attention's own test rule (a kernel's error at most twice a baseline's);
    the floor 5e-3 (relative) is about bf16's unit roundoff (2⁻⁸ = 3.9e-3) of the loss, for a
    pair of peers that happen to agree more closely than that. ``seed_spread`` (the reference
    from another seed) is reported beside it.

    What the window shows: by the last steps of the recorded runs every curve sits at the copy task's
    floor, so the rule says that each backend reached the same floor, with differences of the size of
    batch-to-batch noise there. It does not separate a backend from another seed: the recorded other-seed
    run is as close in the window (``seed_spread_max``). Where the curves do separate is on the way down:
    :func:`whole_curve_diff` gives the same maximum over every step, for each backend and the other seed."""
    window = positive_int(window, "window")
    if ref not in curves or peer not in curves:
        return dict(rule="reference or peer missing", ref=ref, peer=peer)
    n = min(len(c) for c in curves.values())
    if n == 0:
        raise ValueError(f"curves: every curve needs at least one loss, got lengths "
                         f"{ {b: len(c) for b, c in curves.items()} }")
    w = slice(max(0, n - window), n)
    if seed_curve is not None and len(seed_curve) < n:
        raise ValueError(f"seed_curve: expected at least the curves' {n} losses, got {len(seed_curve)}")

    def maxdiff(a, b):
        d = [abs(x - y) for x, y in zip(a[w], b[w])]
        # a NaN (a diverged run) fails every comparison, so max() kept or dropped it by where it stood in the
        # window: a curve that went NaN after its first windowed step was "within" tolerance
        return math.inf if any(math.isnan(x) for x in d) else max(d)

    L_ref = curves[ref][w]
    mean_ref = sum(L_ref) / len(L_ref)
    noise = maxdiff(curves[peer], curves[ref])
    if not (math.isfinite(noise) and math.isfinite(mean_ref)):  # no baseline to judge by: nobody is within
        return dict(rule="reference or peer diverged (a non-finite loss in the window)", ref=ref, peer=peer,
                    within={b: False for b in curves if b != ref})
    tol = max(2 * noise, 5e-3 * mean_ref)
    rule = f"max over the last {w.stop - w.start} steps of |L_b - L_ref| <= max(2*noise, 5e-3*mean L_ref)"
    out = dict(rule=rule, ref=ref, peer=peer, window=w.stop - w.start, mean_ref=round(mean_ref, 5),
        noise=round(noise, 5), tol=round(tol, 5), max_abs_diff={}, mean_abs_diff={}, within={})
    for b, c in curves.items():
        if b == ref:
            continue
        d = maxdiff(c, curves[ref])
        out["max_abs_diff"][b] = round(d, 5)
        out["mean_abs_diff"][b] = round(sum(abs(x - y) for x, y in zip(c[w], curves[ref][w])) / len(L_ref), 5)
        out["within"][b] = bool(d <= tol)
    if seed_curve:
        s = seed_curve[: n][w]
        out["seed_spread_max"] = round(maxdiff(seed_curve, curves[ref]), 5)
        out["seed_spread_mean_loss"] = round(abs(sum(s) / len(s) - mean_ref), 5)
    return out


def whole_curve_diff(parity: dict) -> dict:
    """``max_t |L_b(t) − L_ref(t)|`` over *every* step of a recorded ``parity`` section (the learning phase
    included, not only :func:`parity_verdict`'s window at the floor), for each backend b and for the other seed's
    run: ``{"ref": ref, "steps": n, "backends": {b: max}, "other_seed": max or None}``. NaN in a curve: inf."""
    if not isinstance(parity, dict) or "curves" not in parity or not isinstance(parity.get("verdict"), dict):
        raise ValueError("parity: expected a recorded run's 'parity' section (curves and verdict)")
    curves, ref = parity["curves"], parity["verdict"].get("ref")
    if ref not in curves:
        raise ValueError(f"parity: the reference {ref!r} has no curve (curves: {sorted(curves)})")

    def maxdiff(c):
        d = [abs(x - y) for x, y in zip(c, curves[ref])]
        return math.inf if any(math.isnan(x) for x in d) else round(max(d), 5)

    seed = (parity.get("seed_curve") or {}).get("losses")
    return dict(ref=ref, steps=min(len(c) for c in curves.values()),
                backends={b: maxdiff(c) for b, c in curves.items() if b != ref},
                other_seed=maxdiff(seed) if seed else None)


# --------------------------------------------------------------------------- the run

class Recorder:
    """The result dict, rewritten to ``path`` (atomically) after every change."""

    def __init__(self, path: Path, result: dict):
        self.path, self.result, self.t0 = Path(path), result, time.time()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.flush()

    def flush(self):
        self.result["metadata"]["seconds"] = round(time.time() - self.t0, 1)
        tmp = self.path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(self.result, indent=1))
        os.replace(tmp, self.path)


_OVERRIDES = ("backends", "Ns", "budget_s")  # what run() lets the CLI change in a suite


def run(suite_name: str, out: Path, device_name: str | None = None, overrides: dict | None = None,
        argv=None) -> dict:
    """Run ``suite_name`` (see :data:`SUITES`), recording into ``out`` as it goes; returns the recorded result. On a
    CPU it runs torch on one thread, and gives the caller's thread count back when it ends (a notebook that called
    it stayed single-threaded)."""
    import torch

    threads = torch.get_num_threads()
    try:
        return _run(suite_name, out, device_name, overrides, argv)
    finally:
        torch.set_num_threads(threads)


def _run(suite_name, out, device_name, overrides, argv) -> dict:
    import torch

    if not isinstance(suite_name, str) or suite_name not in SUITES:
        raise ValueError(f"suite_name: expected one of {', '.join(sorted(SUITES))}, got {suite_name!r}")
    suite = json.loads(json.dumps(SUITES[suite_name]))  # a deep copy
    # a misspelt override ("budget" for "budget_s") was set beside the real key and silently ignored
    check_options(overrides or {}, _OVERRIDES, "overrides")
    for k, v in (overrides or {}).items():
        if v is not None:
            suite[k] = v
    if overrides and overrides.get("backends") is not None:
        if not isinstance(suite["backends"], (list, tuple)):  # a string was iterated letter by letter
            raise TypeError(f"overrides['backends']: expected a list or tuple of names among {BACKENDS}, "
                            f"got {suite['backends']!r}")
        for b in suite["backends"]:
            if not isinstance(b, str) or b not in BACKENDS:
                raise ValueError(f"overrides['backends']: expected names among {BACKENDS}, got {b!r}")
    budget = suite["budget_s"]  # -1 skipped every configuration; "10" failed after the JSON file was made
    if isinstance(budget, bool) or not isinstance(budget, numbers.Real) or not budget > 0:
        raise ValueError(f"overrides['budget_s']: expected a number of seconds > 0, got {budget!r}")
    if not isinstance(suite["Ns"], (list, tuple)):
        raise TypeError(f"overrides['Ns']: expected a list or tuple of sequence lengths, got {suite['Ns']!r}")
    # ascending, once each (as the CLI's --N): a backend out of memory at N is skipped at every later N,
    # which must therefore be longer
    suite["Ns"] = sorted({positive_int(N, "overrides['Ns']") for N in suite["Ns"]})
    short = [N for N in suite["Ns"] if N < 2 * suite["period"]]  # as the CLI's --N: every configuration would fail
    if short:
        raise ValueError(f"overrides['Ns']: this suite's copy task repeats {suite['period']} tokens, so each "
                         f"sequence length must be at least {2 * suite['period']}, got {short}")
    _check_sizes(suite, f"SUITES[{suite_name!r}]")
    device = torch.device(device_name or ("cuda" if torch.cuda.is_available() else "cpu"))
    on_gpu = device.type == "cuda"
    if not on_gpu:
        torch.set_num_threads(1)  # tiny CPU models: more threads only add synchronisation
    try:
        import triton
        triton_version = triton.__version__
    except ImportError:
        triton_version = None
    dev = torch.cuda.get_device_name(0) if on_gpu else f"CPU (1 thread of {os.cpu_count()})"
    meta = dict(device=dev, peak_flops=mfu_peak(dev, suite["amp"]) if on_gpu else None, torch=torch.__version__,
                triton=triton_version, cuda=torch.version.cuda if on_gpu else None, suite=suite_name,
                dtype="bf16 autocast (fp32 weights, AdamW)" if suite["amp"] else "float32",
                triton_interpret=os.environ.get("TRITON_INTERPRET") == "1",
                date=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"), argv=argv,
                flops_formula="per token: 6*params_matmul + 12*n_layer*N*n_embd (mfu); "
                              "6*params_matmul + 6*n_layer*N*n_embd (mfu_causal)",
                mfu_peak="hardware.get(<gpu>).peak('matmul'): dense bf16 tensor-core peak", seconds=0)
    rec = Recorder(out, dict(schema=SCHEMA, metadata=meta, config=suite, throughput=[], parity=None))
    par = suite["parity"]
    ref, peer = par["ref"], par["peer"]
    plan = [("tp", N, b) for N in suite["Ns"] for b in suite["backends"]]
    cut = max([i + 1 for i, (_, N, _) in enumerate(plan) if N <= suite["parity_after_N"]], default=0)
    plan = plan[:cut] + [("parity", par["N"], b) for b in par["backends"]] + [("seed", par["N"], ref)] + plan[cut:]
    bar = _progress(len(plan))
    oom_at: dict = {}
    curves, status = {}, {}
    seed_curve = None
    for kind, N, backend in plan:
        bar.set_postfix_str(f"{kind} N={N} {backend}")
        over = time.time() - rec.t0 > suite["budget_s"]
        if kind == "tp":
            if backend in oom_at or over:
                row = dict(N=N, backend=backend, status="skipped",
                           note=f"{backend} OOM at N={oom_at[backend]}" if backend in oom_at else
                           f"time budget {suite['budget_s']} s spent")
            else:
                try:
                    row = measure(suite, N, backend, device)
                except Exception as e:  # noqa: BLE001 - record any failure and go on
                    oom = _is_oom(e)
                    row = dict(N=N, backend=backend, status="oom" if oom else "error",
                               note=(f"{backend} OOM at N={N}" if oom else f"{type(e).__name__}: {str(e)[:300]}"))
                    if oom:
                        oom_at[backend] = N
                _free(device)
            rec.result["throughput"].append(row)
            print(f"  N={N} {backend}: " + (f"{row['tokens_per_s']:.0f} tok/s, mfu {row['mfu']}, "
                  f"attn {row['attn_share']}, {row['peak_mem_gib']} GiB" if row["status"] == "ok"
                  else f"{row['status']} ({row['note']})"), flush=True)
        else:
            seed = 0 if kind == "parity" else 1
            if over:
                got = f"skipped: time budget {suite['budget_s']} s spent"
            else:
                try:
                    got = train_curve(par["model"], N, par["batch"], par["steps"], backend, device, seed, par["lr"],
                                      par["warmup"], suite["amp"], suite["data_vocab"], suite["period"])
                except Exception as e:  # noqa: BLE001
                    got = "oom" if _is_oom(e) else f"error: {type(e).__name__}: {str(e)[:300]}"
                _free(device)
            if kind == "parity":
                status[backend] = "ok" if isinstance(got, list) else got
                if isinstance(got, list):
                    curves[backend] = got
            elif isinstance(got, list):
                seed_curve = got
            rec.result["parity"] = dict(
                model=par["model"], N=N, batch=par["batch"], steps=par["steps"], seed=0, lr=par["lr"],
                warmup=par["warmup"], data_vocab=suite["data_vocab"], period=suite["period"],
                loss_floor=round(loss_floor(N, suite["data_vocab"], suite["period"]), 5),
                loss_unigram=round(math.log(suite["data_vocab"]), 5),
                loss_start=round(math.log(par["model"]["vocab_size"]), 5), curves=curves,
                seed_curve=None if seed_curve is None else dict(backend=ref, seed=1, losses=seed_curve),
                status=status, verdict=parity_verdict(curves, seed_curve, ref, peer) if curves else None)
            print(f"  parity {kind} {backend}: " + (f"final loss {got[-1]:.4f}" if isinstance(got, list) else got),
                  flush=True)
        bar.update()
        rec.flush()
    bar.close()
    rec.flush()
    return rec.result


# --------------------------------------------------------------------------- reading a result

def amdahl(a: float, s: float) -> float:
    """Whole-step speedup when a share ``a`` of the step gets ``s`` times faster: 1 / ((1 − a) + a / s)."""
    # "not 0 <= a <= 1" rather than "a < 0 or a > 1": a NaN fails every comparison, so it is refused too
    if isinstance(a, bool) or not isinstance(a, numbers.Real) or not 0 <= a <= 1:
        raise ValueError(f"a: expected the share of the step, a number in [0, 1], got {a!r}")
    if isinstance(s, bool) or not isinstance(s, numbers.Real) or not s > 0:
        raise ValueError(f"s: expected a speedup > 0, got {s!r}")
    if a == 1 and s == math.inf:  # the whole step infinitely faster: 1 / (0 + 0), a ZeroDivisionError
        return math.inf
    return 1.0 / ((1.0 - a) + a / s)


def rows_ok(result) -> dict:
    """``{(N, backend): row}`` of the configurations that ran."""
    return {(r["N"], r["backend"]): r for r in result["throughput"] if r.get("status") == "ok"}


def speedups(result, ours: str, other: str) -> list:
    """Tokens/s of ``ours`` over ``other`` at the shortest N both ran and at the longest N ``other`` ran
    (where eager still fits in memory), with the Amdahl reading of each: ``a`` = attention's share of
    ``other``'s step, ``s`` = attention's own speedup inside the step (profiled attention ms of
    ``other`` over ``ours``), ``predicted`` = amdahl(a, s), to set against ``measured``."""
    for name, b in (("ours", ours), ("other", other)):  # a misspelt name would give an empty list, silently
        if not isinstance(b, str) or b not in BACKENDS:
            raise ValueError(f"{name}: expected one of {BACKENDS}, got {b!r}")
    ok = rows_ok(result)
    both = sorted(N for (N, b) in ok if b == other and (N, ours) in ok)
    out = []
    for N in dict.fromkeys(both[:1] + both[-1:]):
        o, t = ok[(N, ours)], ok[(N, other)]
        row = dict(N=N, ours=ours, other=other, measured=round(o["tokens_per_s"] / t["tokens_per_s"], 3))
        if t.get("attn_share") is not None and o.get("attn_ms_per_step") and t.get("attn_ms_per_step"):
            a, s = t["attn_share"], t["attn_ms_per_step"] / o["attn_ms_per_step"]
            row.update(a=round(a, 3), s=round(s, 3), predicted=round(amdahl(a, s), 3))
        out.append(row)
    return out


# --------------------------------------------------------------------------- figures

BACKEND_COLORS = {"eager": "#d62728", "sdpa_flash": "#2ca02c", "sdpa_cudnn": "#8c564b", "sdpa_math": "#ff7f0e",
                  "flashref": "#1f77b4", "numpy": "#9467bd"}


def _title(result):
    m, c = result["metadata"], result["config"]
    mc = c["model"]
    return (f"GPT-2 ({mc['n_layer']} layers, {mc['n_embd']} wide, {mc['n_head']} heads) on {m['device']}, "
            f"{c['tokens_per_step']} tokens/step, {m['dtype'].split(' (')[0]}")


def plot_throughput(result):
    """Tokens/s, MFU (or attention share where MFU is unknown) and peak memory against N, per backend."""
    from .plots import figure

    rows = [r for r in result["throughput"] if r.get("status") == "ok"]
    has_mfu = any(r.get("mfu") is not None for r in rows)
    has_mem = any(r.get("peak_mem_gib") is not None for r in rows)
    panels = [("tokens_per_s", "tokens / s"), ("mfu", "MFU") if has_mfu else ("attn_share", "attention share"),
              ("peak_mem_gib", "peak memory (GiB)") if has_mem else ("attn_share", "attention share")]
    if not has_mfu and not has_mem:
        panels = panels[:2]
    fig, axes = figure(_title(result), ncols=len(panels), width=3.4 * len(panels), height=3.0)
    axes = list(axes.flat)
    backends = list(dict.fromkeys(r["backend"] for r in result["throughput"]))
    for ax, (key, label) in zip(axes, panels):
        for b in backends:
            pts = sorted((r["N"], r[key]) for r in rows if r["backend"] == b and r.get(key) is not None)
            if pts:
                ax.plot(*zip(*pts), marker="o", ms=3, color=BACKEND_COLORS.get(b), label=b,
                        lw=2 if b == "flashref" else 1)
        for r in result["throughput"]:  # where a backend ran out of memory
            if r.get("status") == "oom":
                ax.axvline(r["N"], color=BACKEND_COLORS.get(r["backend"]), ls=":", lw=1)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("sequence length N")
        ax.set_ylabel(label)
    if rows:  # nothing ran (all skipped or failed): no lines, and no empty legend's warning
        axes[0].legend()
    return fig


def plot_loss(result):
    """The parity curves, one per backend (and the other seed), with the copy task's floor."""
    from .plots import figure

    p = result["parity"]
    mc = p["model"]
    fig, axes = figure(f"Loss parity: {mc['n_layer']}-layer GPT, N={p['N']}, batch {p['batch']}, seed {p['seed']}, "
                       f"{result['metadata']['dtype'].split(' (')[0]} on {result['metadata']['device']}",
                       ncols=2, width=9.0, height=3.3)
    axes = list(axes.flat)
    ref = (p.get("verdict") or {}).get("ref")
    for b, c in p["curves"].items():
        axes[0].plot(range(1, len(c) + 1), c, color=BACKEND_COLORS.get(b), label=b, lw=1.2 if b == "flashref" else 0.8)
        if ref and b != ref and ref in p["curves"]:
            d = [x - y for x, y in zip(c, p["curves"][ref])]
            axes[1].plot(range(1, len(d) + 1), d, color=BACKEND_COLORS.get(b), label=f"{b} − {ref}", lw=0.8)
    if p.get("seed_curve"):
        s = p["seed_curve"]
        axes[0].plot(range(1, len(s["losses"]) + 1), s["losses"], color="0.6", ls="--", lw=0.8,
                     label=f"{s['backend']}, seed {s['seed']}")
        if ref in p["curves"]:
            d = [x - y for x, y in zip(s["losses"], p["curves"][ref])]
            axes[1].plot(range(1, len(d) + 1), d, color="0.6", ls="--", lw=0.8, label="other seed − ref")
    axes[0].axhline(p["loss_floor"], color="0.3", ls=":", lw=0.8, label="copy-task floor")
    axes[0].set_xlabel("step")
    axes[0].set_ylabel("training loss")
    axes[0].legend()
    axes[1].set_xlabel("step")
    axes[1].set_ylabel("loss difference")
    if axes[1].lines:  # only the reference ran: nothing to compare
        axes[1].legend()
    return fig


def table(result) -> str:
    lines = [f"{'N':>6} {'backend':11} {'status':7} {'tok/s':>10} {'MFU':>6} {'attn':>5} {'GiB':>7}  note"]
    for r in result["throughput"]:
        ok = r.get("status") == "ok"

        def f(k, fmt, r=r, ok=ok):
            return fmt.format(r[k]) if ok and r.get(k) is not None else "-"
        lines.append(f"{r['N']:>6} {r['backend']:11} {r['status']:7} {f('tokens_per_s', '{:.0f}'):>10} "
                     f"{f('mfu', '{:.3f}'):>6} {f('attn_share', '{:.2f}'):>5} {f('peak_mem_gib', '{:.2f}'):>7}  "
                     f"{r.get('note', '')}")
    p = result.get("parity")
    if p and p.get("verdict"):
        lines.append(f"parity: {json.dumps(p['verdict'])}")
    return "\n".join(lines)


def _save_plots(result, out: Path):
    """``out``'s figures beside it: ``<out>.png`` (throughput; none when no configuration ran or ran out of
    memory, as in a parity-only run, whose panels were empty under the throughput model's title) and
    ``<out>-loss.png`` (loss parity)."""
    if any(r.get("status") in ("ok", "oom") for r in result["throughput"]):
        plot_throughput(result).savefig(out.with_suffix(".png"), dpi=110)
    if result.get("parity") and result["parity"]["curves"]:
        plot_loss(result).savefig(out.with_name(out.stem + "-loss.png"), dpi=110)


GPU_SUITES = ("h100", "h100-parity")  # sized for an H100: bf16 autocast, GPT-2 124M, N up to 16K


def default_out(suite: str) -> Path:
    """Where ``train --suite <suite>`` writes without ``--out``: ``figures/gpu/e2e-<suite>.json`` for a GPU suite,
    ``figures/e2e-<suite>.json`` for one sized for a CPU (``test``, ``cpu-tiny``: notebook 12 reads
    ``figures/e2e-cpu-tiny.json``), in the checkout's ``figures/`` wherever the command is run from (as
    :func:`flashref.figures.default_dir`)."""
    from .figures import default_dir

    if not isinstance(suite, str) or suite not in SUITES:
        raise ValueError(f"suite: expected one of {', '.join(sorted(SUITES))}, got {suite!r}")
    folder = default_dir() / "gpu" if suite in GPU_SUITES else default_dir()
    return folder / f"e2e-{suite}.json"


def _backends(p, text):
    if text is None:
        return None
    if not text.strip():  # an empty list ran the suite's own, as if none were given
        p.error("--backends: expected a comma list of backends, got an empty one")
    from .gpt import BACKENDS
    names = tuple(b.strip() for b in text.split(","))  # "eager, numpy" is eager and numpy
    unknown = [repr(b) for b in names if b not in BACKENDS]
    if unknown:
        p.error(f"--backends: unknown backend(s) {', '.join(unknown)}; expected some of {', '.join(BACKENDS)}")
    return names


def _lengths(p, text, period: int):
    if text is None:
        return None
    if not text.strip():
        p.error("--N: expected a comma list of sequence lengths, got an empty one")
    try:
        Ns = tuple(int(x) for x in text.split(","))
    except ValueError:
        p.error(f"--N: expected a comma list of sequence lengths, got {text!r}")
    if any(N < 1 for N in Ns):
        p.error(f"--N: sequence lengths must be positive, got {text!r}")
    # the copy task repeats a block of `period` tokens, so a sequence must hold two of them (gpt.copy_batch):
    # a shorter N would fail in every configuration and leave a run of error rows
    if any(N < 2 * period for N in Ns):
        p.error(f"--N: this suite's copy task repeats {period} tokens, so each sequence length must be at least "
                f"{2 * period}, got {text!r}")
    # ascending, once each: a backend out of memory at N is skipped at every later N, which must be longer
    return tuple(sorted(set(Ns)))


def _load_run(p, out: Path) -> dict:
    """The recorded run that ``--plot`` redraws, or a clear error naming ``--plot``."""
    if not out.is_file():
        p.error(f"--plot: no recorded run at {out}")
    try:
        result = json.loads(out.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as e:
        p.error(f"--plot: {out} is not a JSON file ({type(e).__name__}: {e})")
    if not isinstance(result, dict) or result.get("schema") != SCHEMA:
        p.error(f"--plot: {out} is not a run recorded by this command (no \"schema\": \"{SCHEMA}\")")
    return result


def _check_out(p, out: Path) -> None:
    """``--out`` names a JSON file that can be written, before any minute is spent measuring."""
    if out.is_dir():
        p.error(f"--out: {out} is a folder; name the JSON file to write")
    if out.suffix.lower() == ".png":  # the JSON would be written there, then overwritten by the throughput plot
        p.error(f"--out: {out} names a PNG; name the JSON file to write (its figures go beside it: "
                f"{out.stem}.png, {out.stem}-loss.png)")
    blocker = _cli.file_in_the_way(out)
    if blocker is not None:
        p.error(f"--out: cannot write {out}: {blocker} is not a folder")
    try:  # the write that Recorder.flush does (a temporary file beside out), undone; out itself is untouched
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_suffix(".json.tmp")
        tmp.write_text("")
        tmp.unlink()
    except OSError as e:
        p.error(f"--out: cannot write {out}: {e.strerror or e}")


def _check_device(p, suite, device):
    """The device asked for exists, and a GPU suite gets a GPU: run on a CPU, the h100 suite would take hours and
    its default output would overwrite the recorded H100 run."""
    import torch
    if device is not None and device not in ("cuda", "cpu"):
        p.error(f"--device: expected cuda or cpu, got {device!r}")
    if device == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda: no CUDA GPU is visible to torch here")
    on_gpu = device == "cuda" or (device is None and torch.cuda.is_available())
    if suite in GPU_SUITES and not on_gpu:
        p.error(f"--suite {suite} is sized for an H100 and needs a CUDA GPU; on a CPU use --suite cpu-tiny "
                "(or --suite test)")


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    p = argparse.ArgumentParser(prog="python -m flashref train", description=__doc__.split("\n")[0])
    p.add_argument("--suite", default="h100", choices=sorted(SUITES))
    p.add_argument("--out", default=None,
                   help="JSON path; its figures go beside it (default, in the checkout's figures/: "
                        f"gpu/e2e-<suite>.json for {', '.join(GPU_SUITES)}; e2e-<suite>.json for "
                        f"{', '.join(s for s in sorted(SUITES) if s not in GPU_SUITES)})")
    p.add_argument("--device", default=None, help="cuda or cpu (default: cuda if available)")
    p.add_argument("--backends", default=None,
                   help="comma list overriding the suite's throughput backends (the parity part keeps its own)")
    p.add_argument("--N", default=None,
                   help="comma list of sequence lengths overriding the suite's throughput lengths (not the parity's)")
    p.add_argument("--budget-s", dest="budget_s", type=float, default=None,
                   help="stop starting new configurations after this many seconds")
    p.add_argument("--no-plots", action="store_true")
    p.add_argument("--plot", default=None, metavar="JSON",
                   help="only redraw the figures (JSON.png, JSON-loss.png) of a recorded run and print its table")
    args = p.parse_args(argv)
    if args.plot:  # redraws the recorded run beside its JSON: the run's options would be silently ignored
        given = [f"--{name.replace('_', '-')}" for name in ("suite", "out", "device", "backends", "N", "budget_s",
                                                             "no_plots") if getattr(args, name) != p.get_default(name)]
        if given:
            p.error(f"argument --plot: redraws a recorded run's figures beside it; {', '.join(given)} "
                    f"{'does' if len(given) == 1 else 'do'} not apply")
        out = Path(args.plot)
        result = _load_run(p, out)
        try:
            _save_plots(result, out)
            print(table(result))
        except (KeyError, TypeError, ValueError, AttributeError, IndexError) as e:
            # a file with the schema tag but not all a run records (cut short, or written by hand)
            p.error(f"--plot: {out} is not a complete recorded run ({type(e).__name__}: {e}); its figures need the "
                    f"metadata, config and throughput rows a run of this command writes")
        return 0
    over = dict(backends=_backends(p, args.backends), Ns=_lengths(p, args.N, SUITES[args.suite]["period"]),
                budget_s=args.budget_s)
    if args.budget_s is not None and not args.budget_s > 0:
        p.error(f"--budget-s: expected a positive number of seconds, got {args.budget_s}")
    _check_device(p, args.suite, args.device)
    out = Path(args.out) if args.out else default_out(args.suite)
    _check_out(p, out)
    result = run(args.suite, out, args.device, over, argv=argv)
    if not args.no_plots:
        try:
            _save_plots(result, out)
        except Exception as e:  # noqa: BLE001 - the JSON is what matters
            print(f"plotting failed: {type(e).__name__}: {e}", file=sys.stderr)
    print(table(result))
    print(f"wrote {out}")
    rows = result.get("throughput", [])
    if rows and all(r["status"] == "error" for r in rows):  # nothing ran: a script's caller must see it failed
        print("every throughput configuration failed (see the notes above)", file=sys.stderr)
        return 1
    return 0
