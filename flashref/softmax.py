"""Softmax, written so that fully masked rows give zeros instead of NaN.

A row whose scores are all -inf (every key masked) has no maximum to subtract. PyTorch (since 2.5,
``_safe_softmax``) and the FlashAttention kernels (``softmax.h``: a -inf row max is replaced by 0)
both return a zero row there; :func:`safe_max` and :func:`safe_softmax` do the same.
"""

from __future__ import annotations

import numpy as np

__all__ = ["safe_max", "safe_softmax"]


def safe_max(S: np.ndarray, axis: int = -1, keepdims: bool = True) -> np.ndarray:
    """Row maximum, with -inf where the whole row is -inf (kept: it is the true max)."""
    return np.max(S, axis=axis, keepdims=keepdims)


def _finite_or_zero(m: np.ndarray) -> np.ndarray:
    # A -inf maximum means "nothing to attend to": subtract 0 so exp(-inf - 0) = 0, never NaN.
    return np.where(np.isneginf(m), 0.0, m)


def safe_softmax(S: np.ndarray) -> np.ndarray:
    """Row-wise softmax over the last axis; a fully masked (all -inf) row gives zeros."""
    m = _finite_or_zero(safe_max(S))  # (..., N, 1)
    P_tilde = np.exp(S - m)  # (..., N, Nk), 0 where masked
    l = P_tilde.sum(axis=-1, keepdims=True)  # (..., N, 1)
    return P_tilde / np.where(l == 0, 1.0, l)
