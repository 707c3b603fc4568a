"""Softmax three ways: safe (two passes), online (one pass), and merged from partial states.

The FlashAttention paper (§3.1, "Tiling") writes the softmax of a row ``x`` with three numbers
per row: the maximum ``m(x)``, the shifted exponentials ``f(x) = e^{x − m(x)}`` and their sum
``ℓ(x)``, so ``softmax(x) = f(x) / ℓ(x)``. Split the row in two, ``x = [x⁽¹⁾ x⁽²⁾]``; then

    m(x) = max(m(x⁽¹⁾), m(x⁽²⁾))
    ℓ(x) = e^{m(x⁽¹⁾) − m(x)} ℓ(x⁽¹⁾) + e^{m(x⁽²⁾) − m(x)} ℓ(x⁽²⁾)

The pair ``(m, ℓ)`` is a *state* that summarises any part of the row, and two states combine with
:func:`merge` into the state of the concatenation. The merge is exact (no approximation: each
factor e^{m_part − m} only re-expresses the same exponentials relative to a new maximum), and it
is associative and commutative, so the parts may be visited in any order and grouped in any way
("algebraic aggregation", the paper's footnote). :func:`online_softmax` folds the elements of a
row one block at a time into a running state; Algorithm 1 does the same with tiles of S.

Scores are finite, or -inf where masked; a NaN or +inf is a ``ValueError`` naming the input (there is
no softmax of it to return without a NaN). Scores are real numbers (a string, complex or boolean array is a
``TypeError``) with at least one axis, the row. Scores that span more than the float range (``[1e308, -1e308]``)
are fine: ``x − m`` rounds to -inf and its exponential to 0, the correctly rounded answer, so that overflow is
expected and not warned about.

Fully masked rows: a row whose scores are all -inf (every key masked) has no maximum to subtract.
PyTorch (since 2.5, ``_safe_softmax``) and the FlashAttention kernels (``softmax.h``: a -inf row
max is replaced by 0) both return a zero row there. Here the empty state is ``(m, ℓ) = (-inf, 0)``;
every exponent subtracts :func:`finite_or_zero` of the maximum, so -inf − (-inf) never happens and
there is no NaN and no RuntimeWarning.
"""

from __future__ import annotations

import numpy as np

__all__ = ["safe_max", "finite_or_zero", "finite_or_masked", "safe_softmax", "softmax_state", "merge",
           "online_softmax", "online_state", "EMPTY_STATE"]

#: The state of an empty (or fully masked) part of a row: no maximum yet, nothing summed.
EMPTY_STATE = (-np.inf, 0.0)


def safe_max(S: np.ndarray, axis: int = -1, keepdims: bool = True) -> np.ndarray:
    """Row maximum, with -inf where the whole row is -inf (kept: it is the true max)."""
    S = np.asarray(S)
    if S.ndim and S.shape[axis] == 0:  # an empty row: nothing to attend to, the empty state's -inf (was a raw error)
        shape = list(S.shape)
        if keepdims:
            shape[axis] = 1
        else:
            del shape[axis]
        return np.full(shape, -np.inf)
    return np.max(S, axis=axis, keepdims=keepdims)


def finite_or_zero(m: np.ndarray) -> np.ndarray:
    """A row maximum to subtract: -inf ("nothing to attend to") becomes 0, so exp(-inf - 0) = 0, never NaN."""
    return np.where(np.isneginf(m), 0.0, m)


_finite_or_zero = finite_or_zero  # the first arc's private name, kept for older notebooks


def finite_or_masked(x: np.ndarray) -> bool:
    """Whether every entry is finite or -inf (a masked score): ``x < inf`` is False exactly for +inf and NaN, so
    one pass over ``x`` answers it."""
    return bool((x < np.inf).all())


def _scores(x, name: str) -> np.ndarray:
    """Scores to take a softmax of: finite, or -inf where masked. A NaN or +inf has no softmax this module could
    return without a NaN (+inf − +inf), so it is refused by name instead of returned with a warning."""
    x = np.asarray(x)
    # A string or complex array failed in a ufunc with numpy's words (complex with a ComplexWarning and the imaginary
    # part dropped); a boolean one is a mask passed as scores. A 0-d array has no row (an IndexError before).
    if x.dtype.kind not in "iuf":
        raise TypeError(f"{name}: expected real scores (a float or integer array), got dtype {x.dtype}")
    if x.ndim == 0:
        raise ValueError(f"{name}: expected an array with at least one axis (the row), got a 0-d array")
    if not finite_or_masked(x):
        raise ValueError(f"{name}: expected finite scores or -inf (masked), got NaN or +inf")
    return x


def safe_softmax(S: np.ndarray) -> np.ndarray:
    """Row-wise softmax over the last axis; a fully masked (all -inf) row gives zeros.

    Scores are finite, or -inf where masked. A NaN or +inf has no softmax that the promise above (no NaN,
    no warning) could keep (+inf − +inf is NaN), so it is a ``ValueError`` naming ``S``.
    """
    S = _scores(S, "S")
    m = finite_or_zero(safe_max(S))  # (..., N, 1)
    with np.errstate(over="ignore"):  # S − m <= 0 may round to -inf: e^{-inf} = 0 is the right answer
        P_tilde = np.exp(S - m)  # (..., N, Nk), 0 where masked
    l = P_tilde.sum(axis=-1, keepdims=True)  # (..., N, 1)
    return P_tilde / np.where(l == 0, 1.0, l)


def softmax_state(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The state ``(m(x), ℓ(x))`` of a block of a row (last axis), per §3.1.

    ``m`` is the row maximum, ``ℓ = Σ e^{x − m}``; for an all -inf (or empty) block ``(-inf, 0)``.
    """
    x = _scores(x, "x")
    if not np.issubdtype(x.dtype, np.floating):
        x = x.astype(np.float64)
    if x.shape[-1] == 0:
        shape = x.shape[:-1]  # the empty state, in the scores' precision as a non-empty block's
        return np.full(shape, -np.inf, dtype=x.dtype), np.zeros(shape, dtype=x.dtype)
    m = np.max(x, axis=-1)  # (...,)
    with np.errstate(over="ignore"):  # x − m <= 0 may round to -inf (scores spanning > the float range): e^{-inf} = 0
        f = np.exp(x - finite_or_zero(m)[..., None])  # f(x), 0 where x = -inf
    return m, f.sum(axis=-1)


def merge(m1, l1, m2, l2) -> tuple[np.ndarray, np.ndarray]:
    """Combine the states of two parts of a row into the state of both (§3.1).

    ``m = max(m1, m2)``, ``ℓ = e^{m1 − m} ℓ1 + e^{m2 − m} ℓ2``. An empty part ``(-inf, 0)`` is the
    identity; two empty parts give ``(-inf, 0)`` without NaN.
    """
    try:  # one state per row: both parts' (m, ℓ) have the same shape (a scalar, e.g. EMPTY_STATE, broadcasts)
        np.broadcast_shapes(np.shape(m1), np.shape(l1), np.shape(m2), np.shape(l2))
    except ValueError:
        raise ValueError(f"m1, l1, m2, l2: the two states' shapes {np.shape(m1)}, {np.shape(l1)}, {np.shape(m2)}, "
                         f"{np.shape(l2)} do not match (one (m, ℓ) per row)") from None
    # A state's m is a maximum of scores (finite, or -inf for an empty part) and its ℓ a sum of exponentials
    # (finite, >= 0): a NaN or +inf m gave NaN with a RuntimeWarning, a NaN ℓ a NaN silently.
    m1, m2 = _scores(np.asarray(m1)[..., None], "m1")[..., 0], _scores(np.asarray(m2)[..., None], "m2")[..., 0]
    for name, l_ in (("l1", l1), ("l2", l2)):
        a = np.asarray(l_)
        if a.dtype.kind not in "iuf" or not (np.isfinite(a) & (a >= 0)).all():
            raise ValueError(f"{name}: expected a finite sum of exponentials >= 0, got {l_!r}")
    m = np.maximum(m1, m2)
    m_safe = finite_or_zero(m)  # when m = -inf both parts are empty: e^{-inf - 0} = 0
    with np.errstate(over="ignore"):  # m1 − m <= 0 may round to -inf (m1 = -1e308, m = 1e308): e^{-inf} = 0
        l = np.exp(m1 - m_safe) * l1 + np.exp(m2 - m_safe) * l2
    return m, l


def online_state(x: np.ndarray, block: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """One pass over the row in blocks of ``block`` elements, folding each into a running (m, ℓ)."""
    if isinstance(block, bool) or not isinstance(block, (int, np.integer)) or block <= 0:
        raise ValueError(f"block: expected a positive integer, got {block!r}")
    x = _scores(x, "x")
    m = np.full(x.shape[:-1], -np.inf)
    l = np.zeros(x.shape[:-1])
    for start in range(0, x.shape[-1], block):
        m_b, l_b = softmax_state(x[..., start:start + block])
        m, l = merge(m, l, m_b, l_b)
    return m, l


def online_softmax(x: np.ndarray, block: int = 1) -> np.ndarray:
    """Softmax over the last axis from the one-pass running state, then one normalising pass.

    Equals :func:`safe_softmax` (fully masked rows give zeros) for every ``block`` size.
    """
    x = np.asarray(x)
    m, l = online_state(x, block)
    with np.errstate(over="ignore"):  # as softmax_state: x − m <= 0 may round to -inf, whose e^ is 0
        f = np.exp(x - finite_or_zero(m)[..., None])
    return f / np.where(l == 0, 1.0, l)[..., None]
