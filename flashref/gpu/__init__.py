"""flashref on a real GPU: FlashAttention-2 (forward and backward) in Triton, with autograd.

``attention(q, k, v, *, causal=False, scale=None)`` takes ``(B, H, N, d)`` fp16/bf16 CUDA tensors
(``d`` in 16, 32, 64, 128; ``Nq`` may differ from ``Nk``; causal is top-left, as flashref and
PyTorch's SDPA: query i sees keys j <= i) and returns ``softmax(scale · q kᵀ) v``; gradients flow
through Triton kernels (``flashref/gpu/kernels.py``), whose every step is tagged with the line of
FlashAttention-2's Algorithm 1 or 2 (and of ``flashref/flash2.py``) it implements.

torch and triton are imported only when this module is used: ``import flashref`` needs neither.
Under ``TRITON_INTERPRET=1`` (set before triton is imported) the kernels run on the CPU in
Triton's interpreter, and CPU tensors (float32 too) are accepted; this is how CI tests them.

``python -m flashref bench`` and ``python -m flashref profile`` live in ``bench.py`` and
``profile.py`` beside this file.
"""

from __future__ import annotations

import math
import os

__all__ = ["attention", "forward", "HEAD_DIMS"]

HEAD_DIMS = (16, 32, 64, 128)


def _interpret() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def _check(q, k, v, causal, scale):
    import torch

    for name, x in (("q", q), ("k", k), ("v", v)):
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
        if x.dim() != 4:
            raise ValueError(f"{name} must have shape (B, H, N, d), got {tuple(x.shape)}")
    allowed = (torch.float16, torch.bfloat16) + ((torch.float32,) if _interpret() else ())
    if q.dtype not in allowed:
        raise TypeError(f"q must be float16 or bfloat16, got {q.dtype}")
    for name, x in (("k", k), ("v", v)):
        if x.dtype != q.dtype:
            raise TypeError(f"{name} must have q's dtype {q.dtype}, got {x.dtype}")
        if x.device != q.device:
            raise ValueError(f"{name} is on {x.device} but q is on {q.device}")
    if q.device.type != "cuda" and not _interpret():
        raise ValueError(f"q must be a CUDA tensor (got device {q.device}); CPU tensors run only in "
                         "Triton's interpreter, TRITON_INTERPRET=1")
    B, H, Nq, d = q.shape
    if d not in HEAD_DIMS:
        raise ValueError(f"q's head dimension d={d} is not supported; use one of {HEAD_DIMS}")
    if Nq < 1:
        raise ValueError("q must have at least one query (N >= 1)")
    if k.shape[:2] != (B, H) or k.shape[-1] != d:
        raise ValueError(f"k must have shape ({B}, {H}, Nk, {d}) like q, got {tuple(k.shape)}")
    if k.shape[2] < 1:
        raise ValueError("k must have at least one key (Nk >= 1)")
    if v.shape != k.shape:
        raise ValueError(f"v must have k's shape {tuple(k.shape)}, got {tuple(v.shape)}")
    if not isinstance(causal, bool):
        raise TypeError(f"causal must be a bool, got {type(causal).__name__}")
    if scale is None:
        scale = 1.0 / math.sqrt(d)
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not math.isfinite(scale) or scale <= 0:
        raise ValueError(f"scale must be a positive finite number, got {scale!r}")
    return float(scale)


def forward(q, k, v, *, causal=False, scale=None):
    """Run the forward kernel; returns ``(o, L)`` with ``L`` the natural-log log-sum-exp, (B, H, Nq) fp32."""
    scale = _check(q, k, v, causal, scale)
    o, L2 = _forward(q.contiguous(), k.contiguous(), v.contiguous(), causal, scale)
    return o, L2 * math.log(2.0)


def _forward(q, k, v, causal, scale):
    import torch

    from . import kernels

    B, H, Nq, d = q.shape
    o = torch.empty_like(q)
    L2 = torch.empty((B, H, Nq), device=q.device, dtype=torch.float32)  # base-2 LSE
    kernels.forward(q, k, v, o, L2, causal, scale)
    return o, L2


def _backward(q, k, v, o, L2, do, causal, scale, deterministic):
    import torch

    from . import kernels

    B, H, Nq, d = q.shape
    D = torch.empty((B, H, Nq), device=q.device, dtype=torch.float32)
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    # FA2's atomic dQ needs an fp32 dQ in HBM (zeroed by the kernels' pre-pass)
    dq_acc = None if deterministic else torch.empty(q.shape, device=q.device, dtype=torch.float32)
    kernels.backward(q, k, v, o, L2, do.contiguous(), dq, dk, dv, D, causal, scale, dq_acc)
    return dq, dk, dv


def _function():
    import torch

    class _Attention(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, k, v, causal, scale, deterministic):
            q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
            o, L2 = _forward(q, k, v, causal, scale)
            ctx.save_for_backward(q, k, v, o, L2)  # FA2 §3.1.1: O and L only, never P
            ctx.causal, ctx.scale, ctx.deterministic = causal, scale, deterministic
            return o

        @staticmethod
        def backward(ctx, do):
            q, k, v, o, L2 = ctx.saved_tensors
            dq, dk, dv = _backward(q, k, v, o, L2, do, ctx.causal, ctx.scale, ctx.deterministic)
            return dq, dk, dv, None, None, None

    return _Attention


_FN = None


def attention(q, k, v, *, causal=False, scale=None, deterministic=None):
    """FlashAttention-2 in Triton: ``softmax(scale · q kᵀ [causal mask]) v`` with autograd.

    q: (B, H, Nq, d), k and v: (B, H, Nk, d); fp16 or bf16 CUDA tensors; d in (16, 32, 64, 128).
    scale defaults to 1/sqrt(d). causal masks key j for query i when j > i (top-left).

    deterministic: the backward's dQ. False: FA2's scheme, every column block's program adds its
    dS_ij K_j into an fp32 dQ in HBM with atomics (5 matmuls per block pair; the order of the adds,
    and so the last bits of dQ, vary between runs). True: a second kernel over row blocks keeps dQ_i
    on chip and recomputes S and dP (7 matmuls; bit-identical runs). None (default): follow
    ``torch.are_deterministic_algorithms_enabled()``.
    """
    global _FN
    scale = _check(q, k, v, causal, scale)
    if deterministic is None:
        import torch
        deterministic = torch.are_deterministic_algorithms_enabled()
    if not isinstance(deterministic, bool):
        raise TypeError(f"deterministic must be a bool or None, got {type(deterministic).__name__}")
    if _FN is None:
        _FN = _function()
    return _FN.apply(q, k, v, causal, scale, deterministic)
