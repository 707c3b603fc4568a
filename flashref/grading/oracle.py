"""The truth the grader checks against: plain float64 attention, forward and backward, on whole matrices.

Written here, in a few lines of dense numpy, so that the student copy (which has none of the
algorithm modules) grades with the same oracle as the repository. It follows the package's semantics (README):
``causal`` is top-left aligned, ``mask`` is True = attend, a fully masked row gives zeros (output
and gradients), dropout is :func:`flashref.dropout.scale_mask` of (seed, head, row, column).
"""

from __future__ import annotations

import numpy as np

from ..dropout import scale_mask
from ..masks import full_mask


def attend_mask(Nq, Nk, causal=False, mask=None, element_mask=None):
    """The boolean (…, Nq, Nk) pattern of allowed pairs, or None if all are allowed."""
    attend = full_mask(mask, causal, Nq, Nk)
    if element_mask is not None:
        attend = element_mask if attend is None else (attend & element_mask)
    return attend


def forward(Q, K, V, *, scale, attend=None, dropout_p=0.0, seed=0, first_key=0):
    """``O``, row max ``m``, row sum ``l`` (of exp(S − m), before dropout), ``L = m + log l``, ``P`` and the scores
    ``S`` (after ``attend``). ``first_key``: K and V are the keys from that column on (a split of the keys, as
    exercise 8's split pass sees them): dropout's mask is drawn at their own columns."""
    S = scale * Q @ K.swapaxes(-1, -2)  # (..., Nq, Nk)
    if attend is not None:
        S = np.where(attend, S, -np.inf)
    m = S.max(axis=-1, initial=-np.inf)  # (..., Nq); -inf for a fully masked row (and for no keys at all)
    m_safe = np.where(np.isneginf(m), 0.0, m)
    P_tilde = np.exp(S - m_safe[..., None])
    l = P_tilde.sum(axis=-1)
    P = P_tilde / np.where(l == 0, 1.0, l)[..., None]
    Z = _Z(Q, K, dropout_p, seed, first_key)
    O = (P * Z if Z is not None else P) @ V
    with np.errstate(divide="ignore"):
        L = np.where(l == 0, -np.inf, m + np.log(np.where(l == 0, 1.0, l)))
    return {"O": O, "m": m, "l": l, "L": L, "P": P, "S": S}


def backward(Q, K, V, dO, *, scale, attend=None, dropout_p=0.0, seed=0):
    """``dQ``, ``dK``, ``dV`` of the forward above for upstream gradient ``dO``."""
    P = forward(Q, K, V, scale=scale, attend=attend, dropout_p=0.0)["P"]
    Z = _Z(Q, K, dropout_p, seed)
    Pd = P * Z if Z is not None else P
    dV = Pd.swapaxes(-1, -2) @ dO
    dP = dO @ V.swapaxes(-1, -2)
    if Z is not None:
        dP = dP * Z
    dS = P * (dP - (P * dP).sum(axis=-1, keepdims=True))
    return {"dQ": scale * dS @ K, "dK": scale * dS.swapaxes(-1, -2) @ Q, "dV": dV}


def _Z(Q, K, p, seed, first_key=0):
    if p == 0:
        return None
    return scale_mask(seed, p, Q.shape[:-2], (0, Q.shape[-2]), (first_key, first_key + K.shape[-2]))


def difference(got, want, rtol, atol) -> str:
    """What is wrong with an output against the oracle's ``want`` (the same shape), in words a student acts on:
    how many elements are NaN (never stored, or NaN stored), else the largest error (-inf against -inf, a row
    with no key, is none; an infinity against anything else is an infinite error) and the tolerance it is held to
    (``rtol``, ``atol`` as numpy's ``allclose``: a float32 answer is off by ~1e-7 and reads as right without it)."""
    nan = int(np.isnan(got).sum())
    if nan:
        return f"{nan} element(s) NaN: never stored, or NaN stored"
    # an infinity expected and not stored (m or L of a row, or a split, that sees no key): "max error inf" against a
    # tolerance of |−inf| would say nothing
    inf = np.isinf(want) & (got != want)
    if inf.any():
        i = np.flatnonzero(inf.ravel())[0]
        return (f"{int(inf.sum())} element(s) should be {want.ravel()[i]:g} and are not (the first is "
                f"{got.ravel()[i]:g}; a row, or a split, that sees no key has m = L = -inf and ℓ = 0)")
    with np.errstate(invalid="ignore"):
        err = np.abs(np.where(np.isfinite(got) & np.isfinite(want), got - want, np.where(got == want, 0, np.inf)))
    return f"max error {float(err.max()):.3g}, where {atol:g} + {rtol:g}·|expected| is allowed"
