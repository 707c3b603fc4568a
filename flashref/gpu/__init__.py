"""flashref on a real GPU: FlashAttention-2 (forward and backward) in Triton, with autograd.

``attention(q, k, v, *, causal=False, scale=None, deterministic=None, dropout_p=0.0, seed=None,
config=None)`` takes ``(B, H, N, d)`` fp16/bf16 CUDA tensors (any head dimension 1 <= d <= 256;
``Nq`` may differ from ``Nk``; causal is top-left, as flashref and PyTorch's SDPA: query i sees keys
j <= i) and returns ``softmax(scale · q kᵀ) v``; gradients flow through Triton kernels
(``kernel1.py``: kernel 1, the readable one; ``flashref/gpu/kernels.py``: kernel 2, the fast one in
Triton; ``kernel3.py`` and ``kernel3_bwd.py``: kernel 3, in Gluon, the fastest, on Hopper only),
whose every step is tagged with the line of FlashAttention-2's Algorithm 1 or 2 (and of
``flashref/flash2.py``) it implements. By default kernel 3 runs wherever it takes the call and
kernel 2 everywhere else (:func:`which_kernel` says which, and why); ``config=kernels.Config(...)``
picks kernel 1 or 2, its tiles and its schedules; nothing is read from the environment.
``forward`` and ``backward`` (the pieces ring attention composes) run kernel 2. ``decode(q, k, v, *, scale=None,
num_splits=None)`` is split-KV decoding with packed GQA (``splitkv.py``), forward only.

torch and triton are imported only when this module is used: ``import flashref`` needs neither.
Under ``TRITON_INTERPRET=1`` (set before triton is imported) the kernels run on the CPU in
Triton's interpreter, and CPU tensors (float32 too) are accepted; this is how CI tests them.

``python -m flashref bench`` and ``python -m flashref profile`` live in ``bench.py`` and
``profile.py`` beside this file.
"""

from __future__ import annotations

import functools
import math
import numbers
import os

import numpy as np

from ..dropout import check_p
from ..problem import _bool, _causal, _nonnegative_int, _scale, _seed, _softcap, _window, check_options

__all__ = ["attention", "forward", "backward", "decode", "dropout_mask", "which_kernel", "MAX_HEAD_DIM", "OPTIONS"]

MAX_HEAD_DIM = 256  # kernels.MAX_HEAD_DIM (kept here so that checking needs no triton import)
# CUDA launches at most 65535 programs along a grid's y and z (2^31 - 1 along x). The kernels put (batch, head) on
# y (B·H = 65536 in one launch was "Triton Error [CUDA]: invalid argument" on an H100), so kernels 1 and 2 launch
# a longer y in pieces (kernels._pieces) and kernel 3 leaves such a call to kernel 2. Here so that iomodel.dram
# reads it without importing triton.
MAX_GRID_Y = 65535
LOG2E = 1.4426950408889634  # kernels.LOG2E: the kernels fold log2(e) into the scale (exp2 in their loops)
FP32_MAX = 3.4028234663852886e38  # torch.finfo(torch.float32).max: the kernels' scores are fp32 whatever the inputs
OPTIONS = ("causal", "scale", "deterministic", "dropout_p", "seed", "config", "enable_gqa", "window",
           "alibi_slopes", "softcap")


DOUBLE_BACKWARD = ("flashref.gpu.attention does not support double backward (create_graph=True, e.g. a gradient "
                   "penalty): its backward is a Triton kernel with no derivative of its own; use torch's "
                   "scaled_dot_product_attention with the math backend")

BATCHED_GRADS = ("flashref.gpu.attention does not support a batch of gradients in one backward "
                 "(torch.autograd.grad(..., is_grads_batched=True), torch.autograd.functional.jacobian(..., "
                 "vectorize=True)): torch's older batching hands the backward a batched tensor, which its kernels "
                 "cannot run on; loop over the gradients instead (one torch.autograd.grad call each, or "
                 "vectorize=False)")


def _refuse_batched(do) -> None:
    """Refuse the gradient flowing back when torch's older vmap (``torch._vmap_internals``: ``is_grads_batched``,
    ``jacobian(vectorize=True)``) batched it: the NaN check would fail inside torch (no batching rule for
    ``is_nonzero``), and the kernels would read a batch they cannot see. A flag of the tensor: no sync."""
    from ..functional import _legacy_batched  # the torch front's test (it imports torch: here, lazily)

    if _legacy_batched(do):
        raise RuntimeError(BATCHED_GRADS)


def _interpret() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def _check(q, k, v, causal, scale, enable_gqa=False, launch=True, any_scale=False, empty_ok=False):
    """q, k, v, causal, scale and enable_gqa checked, each error naming its argument; returns the scale (a float).
    ``launch=False`` (which_kernel: nothing runs) skips the one rule about where the tensors live.
    ``empty_ok=True`` (attention, which_kernel) takes ``Nq = 0``, ``Nk = 0`` and ``d = 0``: attention answers
    them without a kernel (:func:`_nothing_to_attend`); ``forward``, ``backward`` and kernel 3 refuse them.

    ``scale``: a finite real number (numpy's too, or a 0-d tensor, as the torch front takes it), the rule every
    entry point shares (``flashref.problem``). The kernels themselves need it positive (see
    :func:`_positive_scale`): ``any_scale=True`` for a caller that maps it there (``attention``, ``forward``,
    ``backward``); without it (``kernel3.attention``, which launches kernel 3 as it is) a scale <= 0 is refused."""
    import torch

    from ..functional import _number

    for name, x in (("q", q), ("k", k), ("v", v)):
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
        if x.layout != torch.strided:  # a sparse tensor has no strides for the kernels' pointers
            raise TypeError(f"{name} must be a dense (strided) tensor, got layout {x.layout}")
        if x.dim() != 4:
            raise ValueError(f"{name} must have shape (B, H, N, d), got {tuple(x.shape)}")
    # Triton's interpreter computes bf16 wrongly (numpy has no bf16: off by 1e8, tests/test_gpu_triton.py), so on
    # the CPU it takes fp16 and fp32; a GPU runs fp16 and bf16
    allowed = (torch.float16, torch.float32) if _interpret() else (torch.float16, torch.bfloat16)
    if q.dtype not in allowed:
        where = " in Triton's interpreter (bf16 runs on a GPU)" if _interpret() else ""
        raise TypeError(f"q must be {' or '.join(str(t).split('.')[1] for t in allowed)}{where}, got {q.dtype}")
    for name, x in (("k", k), ("v", v)):
        if x.dtype != q.dtype:
            raise TypeError(f"{name} must have q's dtype {q.dtype}, got {x.dtype}")
        if x.device != q.device:
            raise ValueError(f"{name} is on {x.device} but q is on {q.device}")
    if launch and q.device.type == "meta":  # no data for a kernel (or the interpreter) to read
        raise ValueError("q is a meta tensor: the kernels need data (flashref.functional gives a meta call its "
                         "output's shape)")
    if launch and q.device.type != "cuda" and not _interpret():
        raise ValueError(f"q must be a CUDA tensor (got device {q.device}); CPU tensors run only in "
                         "Triton's interpreter, TRITON_INTERPRET=1")
    if launch:
        from . import kernels

        if kernels.INTERPRETED != _interpret():  # else Triton's own "0 active drivers" from deep in a launch
            now, then = ("set", "unset") if _interpret() else ("unset", "set")
            raise RuntimeError(f"TRITON_INTERPRET=1 is {now} now but was {then} when flashref.gpu's kernels were "
                               "compiled (triton.jit reads it once, at their import): set it before the first "
                               "call, in a fresh Python process")
    B, H, Nq, d = q.shape
    # The smallest sizes taken: 0 where the caller answers an empty problem without launching anything
    least = 0 if empty_ok else 1
    if not least <= d <= MAX_HEAD_DIM:
        raise ValueError(f"q's head dimension d={d} is not supported; use {least} <= d <= {MAX_HEAD_DIM}")
    if Nq < least:
        raise ValueError("q must have at least one query (N >= 1); gpu.attention takes Nq = 0 (an empty result)")
    if not isinstance(enable_gqa, bool):  # a Python bool: it becomes a kernel's compile-time constant
        raise TypeError(f"enable_gqa must be True or False (a Python bool), got {enable_gqa!r}")
    if enable_gqa and k.shape[0] == B and k.shape[-1] == d and k.shape[1] >= 1 and k.shape[1] != H:
        if H % k.shape[1]:
            raise ValueError(f"enable_gqa: q's {H} heads must be a multiple of k's {k.shape[1]} heads "
                             f"(query head h uses K/V head h // (Hq // Hkv))")
    elif k.shape[:2] != (B, H) or k.shape[-1] != d:
        raise ValueError(f"k must have shape ({B}, {H}, Nk, {d}) like q, got {tuple(k.shape)}"
                         + ("" if enable_gqa or k.shape[1] == H else "; fewer K/V heads need enable_gqa=True"))
    if k.shape[2] < least:
        raise ValueError("k must have at least one key (Nk >= 1); gpu.attention takes Nk = 0 (zeros)")
    if v.shape != k.shape:
        raise ValueError(f"v must have k's shape {tuple(k.shape)}, got {tuple(v.shape)}")
    if not isinstance(causal, bool):
        raise TypeError(f"causal must be True or False (a Python bool), got {causal!r}")
    # d = 0 (attention's empty problem) has no score to scale: its default scale is d = 1's, 1.0, as the torch front's
    scale = _scale(_number(scale, "scale"), max(d, 1))
    # The kernels hold scale·log2(e) in fp32 (kernel 2's qk_scale): past fp32's range it is inf there, and the
    # scores inf - inf = NaN, silently (kernel 2's forward happened to survive it, its backward not). Refused on
    # the value alone, as _variants refuses a softcap or ALiBi slope fp32 cannot hold; the scores themselves are
    # bounded with the data where the inputs are read (_scores_fit)
    if abs(scale) * LOG2E > FP32_MAX:
        raise ValueError(f"scale: the kernels compute in fp32 and hold scale·log2(e) there, at most {FP32_MAX:.3g}; "
                         f"got {scale!r}")
    if not any_scale and scale <= 0:
        raise ValueError(f"scale: kernel 3 launched directly needs a scale > 0, got {scale!r}; "
                         "flashref.gpu.attention takes any finite scale")
    return scale


def _positive_scale(q, scale: float):
    """``(q', τ')`` with ``τ' > 0`` and ``τ' q' kᵀ = τ q kᵀ``: the same scores, so the same output and LSE.

    The kernels need ``τ > 0``: kernels 2 and 3 mask S = Q_i K_jᵀ with -inf *before* scaling it (τ · -inf is
    +inf for τ < 0 and NaN for τ = 0) and take the row max as ``τ · rowmax(S)`` (the min for τ < 0), folded
    with log2 e into one FMA per element. So τ < 0 runs as ``|τ|`` on ``-q``, and τ = 0 (every score 0) as 1 on
    ``0 · q``. These are torch ops: autograd carries dq through them (``-dq'``, and 0)."""
    if scale > 0:
        return q, scale
    if scale < 0:
        return -q, -scale
    return q * 0, 1.0


def _unchecked(x) -> bool:
    """A CUDA tensor outside anomaly mode: not checked for NaN and inf (:func:`_finite` says why)."""
    import torch

    return x.device.type == "cuda" and not torch.is_anomaly_enabled()


def _finite(*named, neginf_ok=()):
    """NaN or inf in an input: a ValueError naming it, as the torch front and the numpy algorithms raise. The
    inputs named in ``neginf_ok`` may hold -inf (backward's ``lse``: a row that a window leaves with no key).

    Checked where it is free: on the CPU (Triton's interpreter). On a GPU the check would read every input
    once more and wait for the GPU (a host sync) on every call, which would change what ``bench`` times and
    the DRAM bytes ``profile-l2`` measures for a call as a user makes it (``iomodel.dram``'s model of the
    kernels alone); there it runs only under ``torch.autograd.detect_anomaly()``, PyTorch's own switch for
    hunting NaNs at that price."""
    import torch

    for name, x in named:
        if _unchecked(x):
            continue
        if name in neginf_ok:
            if x.numel() and (torch.isnan(x).any() or torch.isposinf(x).any()):
                raise ValueError(f"{name} contains NaN or +inf")
        elif x.numel() and not torch.isfinite(x).all():
            raise ValueError(f"{name} contains NaN or inf")


def _scores_fit(q, k, scale):
    """The scores fit fp32, or a FloatingPointError naming ``scale`` (the numpy algorithms raise one when
    ``τ·QKᵀ`` overflows float32; here it is raised before any kernel runs, where the NaN would be silent).

    The kernels compute ``S = Q Kᵀ`` in fp32, then ``S·scale·log2(e)``. Both are bounded without forming
    ``Q Kᵀ``: ``|S| <= d·max|q|·max|k|``, so the bound is ``max(1, |scale|·log2 e)·d·max|q|·max|k|``, refused
    past a quarter of fp32's largest value (the margin softcap's guard keeps: a score minus a row max, or plus an
    ALiBi term, must not overflow either). It is an upper bound, so it can refuse a call whose largest entries of
    q and k never meet in one dot product; only calls whose scores approach 10^37 are near it (with q, k of
    order 1 and d = 128, a scale of order 10^34). It reads q and k once more (a max, not a product), so it runs where
    :func:`_finite` runs: on the CPU (Triton's interpreter), and on a GPU only under
    ``torch.autograd.detect_anomaly()``; there fp16 inputs cannot reach it unless the scale passes ~10^25, while
    bf16 inputs can (their range is fp32's). ``scale``: the value the caller gave (its sign is irrelevant).

    It guards against overflow, not against the loss of precision that comes well before it: on a GPU the compiler
    fuses ``S·scale·log2(e) - m`` into one FMA, which for a row's largest score gives the product's rounding error
    instead of 0, about ``|S·scale·log2 e|·2^-24``. Past scores of about 2^24 the softmax's weights are then off by
    factors of two and more, and near this bound exp2 of that error is inf: an H200 gave inf and NaN outputs at 0.99
    of it (``tests/test_gpu_triton.py``). Scores of that size mean weights that are one-hot to fp32 anyway."""
    if _unchecked(q) or q.numel() == 0 or k.numel() == 0:
        return
    d = q.shape[-1]
    qmax, kmax = float(q.detach().abs().amax()), float(k.detach().abs().amax())  # finite: _finite ran first
    bound = max(1.0, abs(scale) * LOG2E) * d * qmax * kmax  # a Python float: no overflow of its own
    if bound > FP32_MAX / 4:
        raise FloatingPointError(
            f"scale: the scores scale·q·kᵀ may overflow fp32, in which the kernels compute them: |scale| = "
            f"{abs(scale):.3g}, max|q| = {qmax:.3g}, max|k| = {kmax:.3g} and d = {d} bound them by {bound:.3g} "
            f"(max(1, |scale|·log2 e)·d·max|q|·max|k|), past the kernels' limit {FP32_MAX / 4:.3g}; use a smaller "
            f"scale, scale q and k down, or compute in float64 with the numpy algorithms or the torch front "
            f"(flashref.functional)")


def _variants(q, k, causal, options):
    """The variants' options checked (each error names its option), as a ``kernels.Variants``."""
    import torch

    from . import kernels

    B, Hq, Nq, _ = q.shape
    Nk = k.shape[2]
    group = Hq // k.shape[1] if k.shape[1] else 1  # no heads at all (H = 0): nothing to group
    big = Nq + Nk  # "unbounded": no query can reach that far
    band = None
    window = _window(options.get("window"))  # the shared rule (flashref.problem): numpy integers too; (-1, -1) is None
    if window is not None:
        left, right = (big if w < 0 else min(w, big) for w in window)
        if causal:
            right = min(right, 0)
        band = (left, right)
    softcap = _softcap(options.get("softcap"))  # None or a float > 0, numpy numbers too
    fp32_max = float(torch.finfo(torch.float32).max)
    if softcap is not None and softcap > fp32_max / 4:  # the kernels hold c and 2·s/c·log2(e) in fp32
        raise ValueError(f"softcap: the kernels compute in fp32, which holds at most {fp32_max / 4:.3g} here; "
                         f"got {softcap!r}")
    slopes = options.get("alibi_slopes")
    if slopes is not None:
        if isinstance(slopes, torch.Tensor) and slopes.requires_grad:  # as the torch front: no gradient reaches them
            raise ValueError("alibi_slopes: slopes that require grad are not supported (their gradient is not "
                             "computed); pass alibi_slopes.detach()")
        try:
            slopes = torch.as_tensor(slopes)
        except (TypeError, ValueError, RuntimeError):
            raise TypeError(f"alibi_slopes must be a float tensor of per-head slopes, got {type(slopes).__name__}"
                            ) from None
        if not (slopes.is_floating_point()):
            raise TypeError(f"alibi_slopes must be a float tensor of per-head slopes, got dtype {slopes.dtype}")
        # Any shape that broadcasts to the (batch, head) axes (B, Hq), numpy's rule, as the torch front and the
        # numpy algorithms take it: () or (1,) one slope for every head, (Hq,) or (1, Hq) one per head, (B, 1) one
        # per batch entry, (B, Hq) one per (batch, head). expand follows that rule and refuses any other shape
        try:
            slopes = slopes.expand(B, Hq)
        except RuntimeError:
            raise ValueError(f"alibi_slopes: shape {tuple(slopes.shape)} does not broadcast to the (batch, head) "
                             f"axes ({B}, {Hq}); give one slope per query head, ({Hq},), or per (batch, head), "
                             f"({B}, {Hq}), or one for all, ()") from None
        if not torch.isfinite(slopes).all():
            raise ValueError("alibi_slopes contains NaN or inf")
        # the kernels add -slope·|i - j|·log2(e) in fp32: a slope past fp32's range over the longest distance
        # would overflow there
        if slopes.numel() and float(slopes.abs().max()) * max(Nq, Nk) * math.log2(math.e) > fp32_max:
            raise ValueError(f"alibi_slopes: the kernels compute -slope·|i - j| in fp32, which cannot hold a slope "
                             f"of {float(slopes.abs().max()):.3g} over {max(Nq, Nk)} positions")
        # the kernels read one fp32 slope per (batch, head) program: a broadcast view becomes real memory here
        slopes = slopes.to(device=q.device, dtype=torch.float32).contiguous().reshape(-1)
    # softcap's tanh near 0: its exp2 formula is off by up to c·2⁻²³ in a score (kernels._tanh), which an fp16 or
    # bf16 output does not resolve at the caps in use (c = 30-50, Gemma-2's). The kernels add the series near 0
    # (slower) only where that error passes a sixteenth of the output's rounding: c > 512 in fp16, 4096 in bf16,
    # and always in fp32
    near_zero = softcap is not None and softcap * 2.0 ** -23 > torch.finfo(q.dtype).eps / 16
    return kernels.Variants(group=group, band=band, slopes=slopes, softcap=softcap, tanh_near_zero=near_zero)


def _options(where, causal, deterministic, options, allowed=OPTIONS):
    """The rules every entry point shares (flashref.problem), first of all: an unknown option is refused, naming
    it and listing the valid ones, before the tensors are looked at. ``causal``, ``deterministic`` and
    ``enable_gqa`` become Python bools (numpy's bools are taken, as the algorithms take them): the kernels compile
    them as constants. ``deterministic=None`` follows torch's switch (``torch.use_deterministic_algorithms``).
    Returns ``(causal, deterministic, options)``."""
    check_options(options, allowed, where)
    causal = _causal(causal)
    if deterministic is None:
        import torch
        deterministic = torch.are_deterministic_algorithms_enabled()
    if not isinstance(deterministic, (bool, np.bool_)):
        raise TypeError(f"deterministic: expected True, False or None, got {deterministic!r}")
    deterministic = bool(deterministic)
    if "enable_gqa" in options:
        options = {**options, "enable_gqa": _bool(options["enable_gqa"], "enable_gqa")}
    return causal, deterministic, options


def _is_one(p) -> bool:
    """``p`` is the number 1 (an int or float, numpy's too, or a 0-d array), but not ``True``: a bool is no
    probability (:func:`flashref.dropout.check_p` refuses it)."""
    if isinstance(p, np.ndarray) and p.ndim == 0:
        p = p[()]
    return isinstance(p, numbers.Real) and not isinstance(p, (bool, np.bool_)) and p == 1


def _check_options(options, d, causal, deterministic, where=None, all_dropped_ok=False):
    """The options beside q, k, v (their names checked already, by :func:`_options`); returns (dropout or None,
    resolved config). ``where``: a standalone :func:`forward` or :func:`backward`, which must be given the seed with
    ``dropout_p > 0`` (a seed drawn there is returned nowhere, so no backward could drop the forward's entries).

    ``all_dropped_ok`` (attention, which_kernel): ``dropout_p = 1`` is taken, as the torch front and PyTorch take
    it, and comes back as dropout ``(1.0, None)``: every weight dropped, so the result is zeros and attention
    launches nothing (:func:`_nothing_to_attend`); no mask, so no seed is drawn. Without it (``forward``,
    ``backward``) it is refused, as the numpy algorithms refuse it: the kernels would scale the kept weights by
    1/(1 - p) = 1/0."""
    from ..functional import _number
    from . import kernels

    p = _number(options.get("dropout_p", 0.0), "dropout_p")  # a 0-d tensor too, as the front
    all_dropped = all_dropped_ok and _is_one(p)
    if not all_dropped:
        try:
            p = check_p(p, "dropout_p")
        except ValueError:
            if not all_dropped_ok:
                raise
            # check_p's message, with the 1 taken here (which check_p refuses)
            raise ValueError(f"dropout_p: expected a dropout probability in [0, 1), or 1 (every weight dropped: "
                             f"zeros), got {p!r}") from None
    seed = options.get("seed")
    if seed is not None:
        seed = _seed(seed)

    config = options.get("config")
    if config is None:
        config = kernels.Config()
    if not isinstance(config, kernels.Config):
        raise TypeError(f"config must be a flashref.gpu.kernels.Config, got {type(config).__name__}")
    if config.version == 1 and deterministic:  # refused at the call, not after the forward has run
        raise ValueError("deterministic: kernel 1 (Config(version=1)) computes dQ with atomic adds only; use "
                         "kernel 2 (the default Config) for bit-identical gradients, or deterministic=False")
    dropout = None
    if all_dropped:
        dropout = (1.0, None)
    elif p > 0:
        if seed is None and where is not None:
            raise ValueError(f"seed: {where} with dropout_p > 0 needs the seed, the same for the forward and the "
                             f"backward, so that both drop the same entries (attention draws one and keeps it)")
        if seed is None:  # a fresh mask per call, from torch's default generator (torch.manual_seed)
            import torch
            seed = int(torch.randint(0, 2 ** 62, (), dtype=torch.int64))
        dropout = (float(p), seed)
    # d = 0 (an empty problem, which attention answers without a kernel) has no tiles of its own: the config is
    # checked and resolved as for d = 1
    return dropout, config.resolve(max(d, 1), causal, deterministic)


def forward(q, k, v, *, causal=False, scale=None, **options):
    """Run the forward kernel; returns ``(o, L)`` with ``L`` the natural-log log-sum-exp, (B, H, Nq) fp32
    (-inf for a row that a window leaves with no key).

    Takes attention's options except ``deterministic`` (a backward option). Unlike attention it refuses
    ``Nq = 0``, ``Nk = 0``, ``d = 0`` and ``dropout_p = 1``, as the numpy algorithms' ``forward`` does:
    a kernel has nothing to compute there (attention answers them with zeros, without one), and with
    ``dropout_p = 1`` it would scale by 1/(1 - p) = 1/0."""
    # deterministic chooses the backward's dQ scheme: not a forward option
    causal, _, options = _options("gpu.forward", causal, False, options, [n for n in OPTIONS if n != "deterministic"])
    scale = _check(q, k, v, causal, scale, options.get("enable_gqa", False), any_scale=True)
    dropout, cfg = _check_options(options, q.shape[-1], causal, False, "gpu.forward")
    var = _variants(q, k, causal, options)
    _finite(("q", q), ("k", k), ("v", v))
    _scores_fit(q, k, scale)
    q, scale = _positive_scale(q, scale)
    o, L2 = _forward(q.contiguous(), k.contiguous(), v.contiguous(), causal, scale, cfg, dropout, var)
    return o, L2 * math.log(2.0)


def backward(q, k, v, o, do, lse, *, causal=False, scale=None, deterministic=False, **options):
    """Run the backward kernels from a given log-sum-exp; returns ``(dq, dk, dv)``.

    ``lse`` is natural-log, (B, H, Nq) fp32, as :func:`forward` returns it (-inf only for a row that a window
    leaves with no key; NaN, +inf, and -inf without a window are refused where inputs are checked); a caller
    that merges partial results (ring attention) hands in the merged one. Options as :func:`forward`'s; with
    ``dropout_p > 0`` both take the same ``seed`` (required: a seed drawn here could match no forward)."""
    causal, deterministic, options = _options("gpu.backward", causal, deterministic, options)
    scale = _check(q, k, v, causal, scale, options.get("enable_gqa", False), any_scale=True)
    _check_saved(q, o, do, lse)
    dropout, cfg = _check_options(options, q.shape[-1], causal, deterministic, "gpu.backward")
    var = _variants(q, k, causal, options)
    # -inf in lse: a row that sees no key, which only a window makes (without one every query sees key 0 at least,
    # and an -inf there would rebuild P as exp(S + inf): NaN gradients)
    _finite(("q", q), ("k", k), ("v", v), ("do", do), ("o", o), ("lse", lse),
            neginf_ok=("lse",) if var.band is not None else ())
    _scores_fit(q, k, scale)  # the backward rebuilds the scores from q and k
    tau = scale
    q, scale = _positive_scale(q, scale)  # as forward ran it; dq of the original q below
    L2 = (lse / math.log(2.0)).float().contiguous()  # the kernels keep the base-2 LSE (exp2 in their loops)
    dq, dk, dv = _backward(q.contiguous(), k.contiguous(), v.contiguous(), o.contiguous(), L2, do.contiguous(),
                           causal, scale, deterministic, cfg, dropout, var)
    if tau < 0:  # q' = -q
        dq = dq.neg_()
    elif tau == 0:  # q' = 0 · q: no score depends on q
        dq = dq.zero_()
    return dq, dk, dv


def _check_saved(q, o, do, lse):
    """backward's o, do (q's shape, dtype and device) and lse (fp32 or fp64, q's (B, H, Nq)): the kernels index
    them with q's strides and sizes, so a wrong shape would read and write outside them."""
    import torch

    for name, x, shape in (("o", o, q.shape), ("do", do, q.shape), ("lse", lse, q.shape[:3])):
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
        if x.shape != shape:
            raise ValueError(f"{name} must have shape {tuple(shape)}, got {tuple(x.shape)}")
        if x.device != q.device:
            raise ValueError(f"{name} is on {x.device} but q is on {q.device}")
    for name, x in (("o", o), ("do", do)):
        if x.dtype != q.dtype:
            raise TypeError(f"{name} must have q's dtype {q.dtype}, got {x.dtype}")
    if lse.dtype not in (torch.float32, torch.float64):  # 16 bits would lose what the backward rebuilds P from
        raise TypeError(f"lse must be float32 (the natural-log log-sum-exp, as gpu.forward returns it) or float64, "
                        f"got {lse.dtype}")


def dropout_mask(B, H, Nq, Nk, p, seed, device=None):
    """The keep mask the kernels use for (p, seed): bool (B, H, Nq, Nk), computed by the same Triton
    code (``kernels._keep``); equal to ``flashref.dropout.keep_mask(seed, p, (B, H), (0, Nq), (0, Nk))``."""
    import torch

    B, H, Nq, Nk = (_nonnegative_int(n, name) for name, n in (("B", B), ("H", H), ("Nq", Nq), ("Nk", Nk)))
    p, seed = check_p(p), _seed(seed)  # the rules every entry point states once (flashref.dropout, problem)
    device = torch.device(device or ("cpu" if _interpret() else "cuda"))
    if (device.type == "cuda" and not torch.cuda.is_available()) or (device.type != "cuda" and not _interpret()):
        raise RuntimeError(f"gpu.dropout_mask: the mask is computed by a Triton kernel, which needs a CUDA GPU, or "
                           f"Triton's interpreter on the CPU (TRITON_INTERPRET=1, set before triton is imported); "
                           f"device {device} has neither")
    from . import kernels  # (after the check: on a machine without triton the error above says what is missing)

    mask = torch.empty((B, H, Nq, Nk), dtype=torch.int8, device=device)
    kernels.dropout_mask(mask, float(p), int(seed))
    return mask.bool()


def _forward(q, k, v, causal, scale, cfg, dropout, var):
    import torch

    from . import kernels

    B, H, Nq, d = q.shape
    o = torch.empty_like(q)
    L2 = torch.empty((B, H, Nq), device=q.device, dtype=torch.float32)  # base-2 LSE
    kernels.forward(q, k, v, o, L2, causal, scale, cfg, dropout, var)
    return o, L2


def _backward(q, k, v, o, L2, do, causal, scale, deterministic, cfg, dropout, var):
    import torch

    from . import kernels

    if q.numel() == 0:  # no query row (GQA over no query heads too): no score, so dK = dV = 0 and no launch
        return torch.empty_like(q), torch.zeros_like(k), torch.zeros_like(v)
    D = torch.empty(L2.shape, device=q.device, dtype=torch.float32)
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    # FA2's atomic dQ needs an fp32 dQ in HBM (zeroed by the kernels' pre-pass)
    dq_acc = None if deterministic else torch.empty(q.shape, device=q.device, dtype=torch.float32)
    kernels.backward(q, k, v, o, L2, do.contiguous(), dq, dk, dv, D, causal, scale, cfg, dropout, dq_acc, var)
    return dq, dk, dv


def _function():
    import torch

    class _Attention(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, k, v, causal, scale, deterministic, cfg, dropout, var):
            q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
            o, L2 = _forward(q, k, v, causal, scale, cfg, dropout, var)
            ctx.save_for_backward(q, k, v, o, L2)  # FA2 §3.1.1: O and L only, never P (nor the mask)
            ctx.args = causal, scale, deterministic, cfg, dropout, var
            return o

        @staticmethod
        def backward(ctx, do):
            if torch.is_grad_enabled():  # backward(create_graph=True): the kernels have no derivative
                raise RuntimeError(DOUBLE_BACKWARD)
            _refuse_batched(do)
            _finite(("grad_output (the gradient flowing into attention's output)", do))
            q, k, v, o, L2 = ctx.saved_tensors
            dq, dk, dv = _backward(q, k, v, o, L2, do, *ctx.args)
            return dq, dk, dv, None, None, None, None, None, None

    return _Attention


def _nothing_to_attend(q, k, dropout) -> str | None:
    """Why no kernel has anything to compute for this call (None: a kernel runs).

    * an empty output, ``q`` with no element (B, H, Nq or d = 0): nothing to write;
    * no keys (``Nk = 0``): every row sees none, so its output is 0, as for a row that a window leaves with no
      key (and as PyTorch's SDPA gives a fully masked row);
    * ``dropout_p = 1``: every weight is dropped, so every output is 0 (PyTorch's rule).

    In each the output is zeros whatever q, k and v hold, and so is every gradient. It is answered without a
    launch: a grid with no program along an axis may fail on a GPU, and 1/(1 - p) is 1/0."""
    if q.numel() == 0:
        return f"an empty output, q of shape {tuple(q.shape)}"
    if k.shape[2] == 0:
        return "no keys (Nk = 0): every output row is 0"
    if dropout is not None and dropout[0] == 1.0:
        return "dropout_p = 1: every weight is dropped, every output is 0"
    return None


def _zeros_function():
    import torch

    class _NothingToAttend(torch.autograd.Function):
        """attention's result where :func:`_nothing_to_attend` says no kernel has work: zeros of q's shape (v's
        head dimension is q's) and q's dtype, and zero gradients of each input's own shape (dk, dv with GQA's
        Hkv heads), since the output depends on no input value."""

        @staticmethod
        def forward(ctx, q, k, v):
            # shapes, dtypes and devices only: the backward reads no values
            ctx.like = [(x.shape, x.dtype, x.device) for x in (q, k, v)]
            return q.new_zeros(q.shape)

        @staticmethod
        def backward(ctx, do):
            if torch.is_grad_enabled():  # create_graph=True: refused as on the kernels' path, whatever the shape
                raise RuntimeError(DOUBLE_BACKWARD)
            _refuse_batched(do)  # as on the kernels' path: the same calls refused, whatever the shape
            # NaN or inf flowing back is refused as on the kernels' path (_Attention.backward), where it is checked
            _finite(("grad_output (the gradient flowing into attention's output)", do))
            return tuple(torch.zeros(shape, dtype=dtype, device=device) if need else None
                         for need, (shape, dtype, device) in zip(ctx.needs_input_grad, ctx.like))

    return _NothingToAttend


_FN = None
_ZEROS = None


def attention(q, k, v, *, causal=False, scale=None, deterministic=None, **options):
    """FlashAttention-2 in Triton: ``softmax(scale · q kᵀ [causal mask]) v`` with autograd.

    q: (B, H, Nq, d), k and v: (B, H, Nk, d); fp16 or bf16 CUDA tensors; any d in 1..256 (the
    kernels pad it to a power of two on chip). scale defaults to 1/sqrt(d); any finite real number (0 and
    negative ones too, as the numpy algorithms, the torch front and torch take them; the kernels run
    ``|scale|`` on ``-q``, or 1 on ``0·q``). The backward rebuilds the weights from the fp32 log-sum-exp (FA2
    §3.1.1), so past logits of a few hundred its gradients lose accuracy that SDPA's fp32 math keeps (at
    logits near 5·10^5 dV was off by 7% of its largest entry against SDPA's, 1% near 5·10^4); the forward is not.
    Kernels 2 and 3 round dS = P∘(dP − D) to the inputs' dtype before the scale, in FlashAttention-2's order: in
    fp16, where |dS| passes 65504, dq and dk come out inf or NaN although the gradients fit (kernel 1, which scales
    first, and the float64 reference are finite). On an H200, with 1000 flowing back into every output entry and
    every float64 gradient under 65504, kernel 3 left 2624 entries of dq non-finite at d = 64 and all 65536 at
    d = 128, the same as SDPA's flash backend, where its cuDNN and efficient backends left none
    (``examples/fp16_backward_range.py``, ``figures/gpu/h200-fp16-backward-range.json``). An unscaled loss does not
    send gradients that large. In fp16 too, dropout with p above 1 − 1/65504 overflows the kept weights' 1/(1 − p).
    causal masks key j for query i when j > i (top-left).
    NaN or inf in q, k, v (or in the gradient flowing back) raises a ValueError on the CPU (the interpreter);
    on a GPU only under ``torch.autograd.detect_anomaly()``, since the check reads every input again and waits
    for the GPU. The scores are computed in fp32: a scale whose ``scale·log2(e)`` fp32 cannot hold raises a
    ValueError everywhere, and scores that could overflow fp32 (bounded by
    ``max(1, |scale|·log2 e)·d·max|q|·max|k|``, see ``_scores_fit``) a FloatingPointError naming ``scale``,
    where the NaN check runs.

    deterministic: the backward's dQ. False: FA2's scheme, every column block's program adds its
    dS_ij K_j into an fp32 dQ in HBM with atomics (5 matmuls per block pair; the order of the adds,
    and so the last bits of dQ, vary between runs). True: a second kernel over row blocks keeps dQ_i
    on chip and recomputes S and dP (7 matmuls; bit-identical runs). None (default): follow
    ``torch.are_deterministic_algorithms_enabled()``.

    Other options: ``dropout_p`` (default 0) drops each attention weight with that probability
    (kept ones scaled by 1/(1-p)); ``seed`` (int) makes the mask flashref.dropout's keyed mask,
    the same entries numpy's reference drops; without it every call draws a fresh seed from torch's
    default generator. An unknown option raises a TypeError that lists the valid ones.

    Calls with nothing to compute give what the torch front (``flashref.functional``) and PyTorch's SDPA
    give, without launching a kernel (a grid with no program along an axis may fail on a GPU):

    * an empty problem, B, H, ``Nq`` or d = 0: the empty output ``(B, H, Nq, d)``;
    * no keys, ``Nk = 0``: zeros ``(B, H, Nq, d)``, every row being one with no key to see;
    * ``dropout_p = 1``: every weight is dropped, zeros (PyTorch's rule; no seed is drawn). ``dropout_p``
      is taken in [0, 1]; :func:`forward` and :func:`backward` keep the numpy algorithms' [0, 1), since
      the kernels would scale the kept weights by 1/(1 - p) = 1/0.

    There the output has q's dtype and device, and the gradients are zeros of q's, k's and v's shapes
    (k's Hkv heads with GQA). Every argument is checked first, so such a call is refused exactly where a
    call with work would be: wrong slopes, a bad window or seed raise here too, as in the torch front.

    Which kernel runs: without ``config``, kernel 3 (``kernel3.py``: Gluon, FlashAttention-3's warp
    specialization and pingpong; Hopper and Triton 3.6 only) wherever ``kernel3.choose`` takes the call
    (fp16/bf16, d 64, 128 or 256, Nq = Nk a multiple of its tiles, none of the options below), with its own
    backward (``kernel3_bwd.py``, atomic-free: ``deterministic`` changes nothing there); kernel 2 everywhere
    else. ``config=kernels.Config(...)`` asks for kernel 1 or 2 by name, with its tiles and schedules.
    :func:`which_kernel` says which one a call gets, and why.

    The variants (flashref.variants; the same semantics as the numpy reference, in forward and
    backward, and in both kernels):

    * ``enable_gqa=True``: k and v may have ``Hkv`` heads, ``Hq`` a multiple of it; query head h
      uses K/V head ``h // (Hq // Hkv)`` (PyTorch's rule); dk, dv come back with ``Hkv`` heads;
    * ``window=(left, right)``: query i sees keys ``i − left <= j <= i + right``, -1 unbounded,
      top-left aligned like causal and combinable with it; K/V tiles outside the band are skipped;
      a query that sees no key gets a zero output;
    * ``alibi_slopes``: a float tensor (or array, list, number) of any shape that broadcasts to the
      ``(B, Hq)`` axes, as the torch front and the numpy algorithms take it: ``()`` one slope for every
      head, ``(Hq,)`` or ``(1, Hq)`` one per head, ``(B, 1)`` one per batch entry, ``(B, Hq)``; adds
      ``−slope·|i − j|`` to the scaled scores, on chip. Any other shape raises a ValueError naming
      ``alibi_slopes``; so does a tensor that requires grad (their gradient is not computed), and
      integer slopes a TypeError (the torch front converts them);
    * ``softcap=c > 0``: the scaled scores become ``c·tanh(s/c)`` (before ALiBi and the mask).
    """
    global _FN, _ZEROS
    causal, deterministic, options = _options("gpu.attention", causal, deterministic, options)
    scale = _check(q, k, v, causal, scale, options.get("enable_gqa", False), any_scale=True, empty_ok=True)
    dropout, cfg = _check_options(options, q.shape[-1], causal, deterministic, all_dropped_ok=True)
    var = _variants(q, k, causal, options)
    _finite(("q", q), ("k", k), ("v", v))
    # Every argument is checked first, so that a call is refused the same way whatever its sizes; then the calls
    # whose result is zeros (empty, no keys, every weight dropped) return them without launching a kernel
    if _nothing_to_attend(q, k, dropout) is not None:
        if _ZEROS is None:
            _ZEROS = _zeros_function()
        return _ZEROS.apply(q, k, v)
    _scores_fit(q, k, scale)
    # Every kernel (kernel 3 included) gets a scale > 0: a scale <= 0 becomes one on -q or 0·q here, before the
    # dispatch, with autograd through the negation (_positive_scale says why the kernels need it).
    q, scale = _positive_scale(q, scale)
    if options.get("config") is None:  # no kernel asked for: kernel 3 wherever it takes the call
        from . import kernel3
        if kernel3.choose(q, k, v, causal, **options)[0]:
            return kernel3.run(q, k, v, causal, scale, deterministic)
    if _FN is None:
        _FN = _function()
    return _FN.apply(q, k, v, causal, scale, deterministic, cfg, dropout, var)


def which_kernel(q, k, v, *, causal=False, deterministic=None, **options) -> str:
    """Which kernel :func:`attention` runs for this call (arguments as attention's; nothing is launched):
    ``"kernel 3 (backward: ...)"``, or ``"kernel 1"`` / ``"kernel 2"`` followed by why kernel 3 does not take
    the call, or ``"no kernel: ..."`` where attention answers with zeros without one (an empty problem, no
    keys, ``dropout_p = 1``)."""
    # attention's checks, so that a call attention would refuse is not answered with a kernel (all but where the
    # tensors live: launch=False, so that a CPU tensor may ask what a GPU would run)
    causal, deterministic, options = _options("gpu.which_kernel", causal, deterministic, options)
    scale = _check(q, k, v, causal, options.get("scale"), options.get("enable_gqa", False), launch=False,
                   any_scale=True, empty_ok=True)
    dropout, _ = _check_options(options, q.shape[-1], causal, deterministic, all_dropped_ok=True)
    _variants(q, k, causal, options)
    _finite(("q", q), ("k", k), ("v", v))  # and its checks of the values, where attention makes them
    nothing = _nothing_to_attend(q, k, dropout)
    if nothing is not None:  # attention returns zeros without a launch, whatever the config asks for
        return f"no kernel: {nothing}; attention returns its zeros (or empty result) and zero gradients without one"
    _scores_fit(q, k, scale)
    config = options.get("config")
    if config is not None:
        return f"kernel {config.version}: a kernels.Config was given"
    from . import kernel3
    # as attention asks it: scale is attention's own argument, not one of the options kernel 3 refuses (any
    # scale reaches kernel 3 positive, see _positive_scale)
    ok, why = kernel3.choose(q, k, v, causal, **{n: x for n, x in options.items() if n != "scale"})
    if not ok:
        return f"kernel 2: kernel 3 does not take this call ({why})"
    tiles, why = kernel3.backward_tiles(q, k, v, causal, deterministic)  # the backward kernel3.run pairs
    return "kernel 3 (backward: " + ("kernel 3)" if tiles is not None else f"kernel 2, {why})")


def decode(q, k, v, *, scale=None, num_splits=None):
    """Split-KV decoding with packed GQA (``splitkv.py``, written beside ``flashref/decoding.py``): ``softmax(scale ·
    q kᵀ) v`` for a few queries against a long cache, forward only, as ``decoding.forward(q, k, v,
    enable_gqa=True, gqa_packing=True, num_splits=...)`` computes it.

    q ``(B, Hq, Nq, d)``, k and v ``(B, Hkv, Nk, d)`` with Hq a multiple of Hkv (Hkv = Hq is plain attention); fp16 or
    bf16 on a GPU (fp16 and fp32 in Triton's interpreter). A program holds the g = Hq/Hkv query heads of a K/V head
    at every position, g·Nq rows, and streams that head's keys of one split once for all of them; with more than
    one split a second kernel merges them, rescaling each by ``2^(m^(s) − m)`` with its m and ℓ kept apart.
    ``num_splits``: a positive int ≤ Nk, or ``None`` for ``parallelism.choose_num_splits`` on the GPU's SMs. No mask,
    causal or other option: a decoding query sees its whole cache. An empty batch (B = 0, or no query heads) returns
    the empty output; K/V heads that do not divide Q's are refused. While grad mode is on, inputs that require a
    gradient are refused (use :func:`attention`, which has a backward; under ``torch.no_grad()`` they are taken)."""
    import torch

    from ..parallelism import DEFAULT_SMS, check_num_splits

    scale = _check(q, k, v, False, scale, enable_gqa=True, any_scale=True)
    if torch.is_grad_enabled() and any(x.requires_grad for x in (q, k, v)):
        raise RuntimeError("gpu.decode is forward only (it has no backward); call it under torch.no_grad(), or use "
                           "gpu.attention, which has one")
    B, Hq, Nq, _ = q.shape
    Hkv, Nk = k.shape[1], k.shape[2]
    if num_splits is not None:  # checked first, so that an empty batch refuses what a full one refuses
        num_splits = check_num_splits(num_splits, Nk)
    if B * Hq * Hkv == 0:  # no program to launch (a grid with no program along an axis may fail on a GPU)
        return q.new_empty(q.shape)
    from . import splitkv

    rows = (Hq // Hkv) * Nq  # the packed rows of one K/V head
    Tr = -(-rows // splitkv.block_rows(rows))
    for n, what in ((B * Hkv, "B·Hkv (batch × K/V heads)"), (Tr, "the row tiles of (Hq/Hkv)·Nq packed rows")):
        if n > MAX_GRID_Y:  # the split kernel's grid is (num_splits, Tr, B·Hkv)
            raise ValueError(f"q, k: {what} = {n} programs along one axis of the grid, more than CUDA's {MAX_GRID_Y}")
    _finite(("q", q), ("k", k), ("v", v))
    _scores_fit(q, k, scale)
    if num_splits is None:
        sms = _sm_count(q.device.index) if q.is_cuda else DEFAULT_SMS
        num_splits = _choose_num_splits(B * Hkv * Tr, -(-Nk // splitkv.BLOCK_KEYS), Nk, sms)
    return splitkv.forward(q.contiguous(), k.contiguous(), v.contiguous(), scale, num_splits)


# A decoding step is short (tens of microseconds on a GPU), so the host's work per call is kept small: the SM count
# and the choice of splits (a Python search over up to 128 candidates, 0.55 ms on a 2-core CPU) are remembered.
@functools.cache
def _sm_count(index) -> int:
    import torch

    return torch.cuda.get_device_properties(index).multi_processor_count


@functools.lru_cache(maxsize=4096)
def _choose_num_splits(items: int, Tc: int, Nk: int, sms: int) -> int:
    from ..parallelism import choose_num_splits

    return choose_num_splits(items, Tc, Nk, sms)
