"""A PyTorch front for the reference algorithms: ``scaled_dot_product_attention`` with autograd.

Same signature and conventions as :func:`torch.nn.functional.scaled_dot_product_attention`
(query ``(..., L, E)``, key and value ``(..., S, E)``; a boolean ``attn_mask`` with True = take
part in attention; ``is_causal`` top-left aligned; ``scale`` keyword, default 1/√E; ``dropout_p``
always applied, as PyTorch does), plus keyword-only options that pick the algorithm and its
simulated SRAM. The forward and the backward run the numpy reference algorithms on the CPU, so a
model can train on FlashAttention's Algorithm 2 and 4 (or standard attention, or FlashAttention-2)
and be checked against PyTorch's own kernels. It is slow; it is for teaching and testing.

Differences from PyTorch, all deliberate:

* only boolean masks: a float ``attn_mask`` (an additive bias) raises a ``TypeError`` — the
  papers' MASK function sets scores to -inf, it does not add a bias;
* ``attn_mask`` and ``is_causal`` may be given together (PyTorch refuses): both apply;
* dropout is reproducible: ``seed`` fixes the mask, and the backward regenerates it from the seed
  (Alg.4 l.1), never storing it;
* value must have the same head dimension as query and key (``E == Ev``), as in the papers;
* no ``enable_gqa``.

Example::

    from flashref.functional import scaled_dot_product_attention
    out = scaled_dot_product_attention(q, k, v, is_causal=True, algorithm="flash1")
    out.sum().backward()      # runs Algorithm 4
"""

from __future__ import annotations

import numpy as np
import torch
from torch.autograd.function import once_differentiable

from . import flash1, flash2, standard

__all__ = ["scaled_dot_product_attention", "ALGORITHMS"]


class _Spec:
    """How to call one algorithm module: which saved statistics its forward returns and its
    backward takes (the tensors of the algorithm's *Require* line, in order)."""

    def __init__(self, module, stats: tuple[str, ...], backward_takes_O: bool):
        self.module, self.stats, self.backward_takes_O = module, stats, backward_takes_O


# Dispatch by name. backward signatures (DESIGN.md): standard.backward(Q, K, V, dO, P),
# flash1.backward(Q, K, V, O, dO, l, m), flash2.backward(Q, K, V, O, dO, L).
ALGORITHMS = {
    "standard": _Spec(standard, ("P",), backward_takes_O=False),
    "flash1": _Spec(flash1, ("l", "m"), backward_takes_O=True),
    "flash2": _Spec(flash2, ("L",), backward_takes_O=True),
}


def _spec(algorithm: str) -> _Spec:
    if algorithm not in ALGORITHMS:
        raise ValueError(f"algorithm: expected one of {sorted(ALGORITHMS)}, got {algorithm!r}")
    return ALGORITHMS[algorithm]


def _to_numpy(t: torch.Tensor) -> np.ndarray:
    # float64 stays float64; every other float type (fp16, bf16, fp32) is computed in float32,
    # as the algorithms do (bf16 has no numpy dtype).
    t = t.detach().to("cpu")
    return (t if t.dtype == torch.float64 else t.to(torch.float32)).numpy()


def _to_torch(a: np.ndarray, like: torch.Tensor) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(a)).to(dtype=like.dtype, device=like.device)


class _Attention(torch.autograd.Function):
    """Forward: ``module.forward``; backward: ``module.backward`` with the statistics it saved."""

    @staticmethod
    def forward(ctx, query, key, value, algorithm, opts):
        spec = _spec(algorithm)
        Q, K, V = _to_numpy(query), _to_numpy(key), _to_numpy(value)
        fwd = spec.module.forward(Q, K, V, **opts)
        ctx.algorithm, ctx.opts = algorithm, opts
        ctx.saved_arrays = (Q, K, V, fwd.O) + tuple(getattr(fwd, s) for s in spec.stats)
        ctx.shapes_like = (query, key, value)
        return _to_torch(fwd.O, query)

    @staticmethod
    @once_differentiable  # the reference backward is numpy: no graph through it (no double backward)
    def backward(ctx, grad_out):
        spec = _spec(ctx.algorithm)
        Q, K, V, O, *stats = ctx.saved_arrays
        dO = _to_numpy(grad_out).astype(O.dtype)
        args = (Q, K, V) + ((O,) if spec.backward_takes_O else ()) + (dO,) + tuple(stats)
        bwd = spec.module.backward(*args, **ctx.opts)
        grads = []
        for need, g, like in zip(ctx.needs_input_grad[:3], (bwd.dQ, bwd.dK, bwd.dV), ctx.shapes_like):
            grads.append(_to_torch(g, like) if need else None)
        return (*grads, None, None)


def _check_tensor(t, name: str) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
    if not t.is_floating_point():
        raise TypeError(f"{name}: expected a floating-point tensor, got dtype {t.dtype}")
    return t


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False,
                                 scale=None, *, algorithm="flash1", sram_size=None, block_sizes=None,
                                 seed=0) -> torch.Tensor:
    """``softmax(MASK(scale · query keyᵀ)) value`` with dropout, by a flashref reference algorithm.

    Parameters follow :func:`torch.nn.functional.scaled_dot_product_attention`; the keyword-only
    ones are flashref's: ``algorithm`` (``"standard"``, ``"flash1"``, ``"flash2"``), the
    simulated on-chip size ``sram_size`` (elements per head), ``block_sizes=(Br, Bc)`` and the
    dropout ``seed``. Returns a tensor of query's dtype and device; gradients flow to the inputs
    that require them.
    """
    query, key, value = (_check_tensor(t, n) for t, n in ((query, "query"), (key, "key"), (value, "value")))
    _spec(algorithm)  # a clear error before any work
    mask = None
    if attn_mask is not None:
        if not isinstance(attn_mask, torch.Tensor):
            raise TypeError(f"attn_mask: expected a boolean torch.Tensor, got {type(attn_mask).__name__}")
        if attn_mask.dtype != torch.bool:
            raise TypeError(f"attn_mask: only boolean masks (True = attend) are supported, got dtype "
                            f"{attn_mask.dtype}; a float mask is an additive bias, which the papers' MASK "
                            f"function does not model")
        mask = attn_mask.detach().to("cpu").numpy()
    opts = dict(scale=scale, causal=bool(is_causal), mask=mask, dropout_p=dropout_p, seed=seed,
                sram_size=sram_size, block_sizes=block_sizes, dtype_bytes=query.element_size())
    return _Attention.apply(query, key, value, algorithm, opts)
