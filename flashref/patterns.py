"""Block-sparsity patterns: which (Br × Bc) tiles of the score matrix block-sparse attention computes.

Each builder returns a boolean ``(Tr, Tc)`` block mask ``M`` for :func:`flashref.blocksparse.forward`;
:func:`element_mask` expands it to the ``(Nq, Nk)`` element mask M̃ it implies (§3.3 of the
FlashAttention paper), and :func:`density` is Proposition 4's ``s``.
"""

from __future__ import annotations

import numbers

import numpy as np

from .blocks import Grid
from .problem import _bool, _nonnegative_int, positive_int

__all__ = ["check_block_mask", "element_mask", "density", "causal_blocks", "local_blocks", "butterfly_blocks",
           "random_blocks"]


def boolean_array(block_mask, where: str) -> np.ndarray:
    """``block_mask`` as a numpy boolean array, or a ``TypeError`` naming it and the shape ``where`` describes (its
    shape is the caller's to check: a ``ValueError``)."""
    try:
        a = np.asarray(block_mask)
    except Exception as e:
        raise TypeError(f"block_mask: expected a boolean array of shape {where}, "
                        f"got {type(block_mask).__name__}") from e
    if a.dtype != np.bool_:
        raise TypeError(f"block_mask: expected a boolean array (True = compute the block) of shape {where}; "
                        f"got dtype {a.dtype}")
    return a


def check_block_mask(block_mask, g: Grid) -> np.ndarray:
    """A boolean ``(Tr, Tc)`` array, or a ``TypeError``/``ValueError`` naming ``block_mask`` and the grid."""
    where = (f"(Tr, Tc) = ({g.Tr}, {g.Tc}) for block sizes (Br, Bc) = ({g.Br}, {g.Bc}); "
             f"pass block_sizes=(Br, Bc) to fix the grid, and see blocksparse.grid")
    if block_mask is None:
        raise TypeError(f"block_mask: expected a boolean array of shape {where}, got None")
    a = boolean_array(block_mask, where)
    if a.shape != (g.Tr, g.Tc):
        raise ValueError(f"block_mask: expected shape {where}; got shape {a.shape}")
    return a


def element_mask(block_mask, Br: int, Bc: int, Nq: int, Nk: int) -> np.ndarray:
    """The ``(Nq, Nk)`` element mask M̃ of a block mask: ``M̃_kl = M_ij``, ``i = ⌊k/Br⌋``, ``j = ⌊l/Bc⌋`` (§3.3)."""
    Br, Bc, Nq, Nk = _sizes(Br=Br, Bc=Bc, Nq=Nq, Nk=Nk)
    M = check_block_mask(block_mask, Grid.of(Br, Bc, Nq, Nk))  # a non-boolean mask is refused, not cast
    return M[np.arange(Nq) // Br][:, np.arange(Nk) // Bc]  # (Nq, Nk)


def density(block_mask) -> float:
    """s, the fraction of nonzero blocks of a boolean ``(Tr, Tc)`` block mask."""
    M = np.asarray(block_mask)
    if M.dtype != np.bool_ or M.ndim != 2:  # a cast would make density(None) 0 and density("ab") 1
        raise TypeError(f"block_mask: expected a boolean (Tr, Tc) array, got {M.dtype} of shape {M.shape}")
    return float(M.mean()) if M.size else 0.0


def _sizes(**sizes) -> tuple[int, ...]:
    """Each size a positive integer (numpy's included), or a ``TypeError``/``ValueError`` naming it."""
    return tuple(positive_int(v, name) for name, v in sizes.items())


def _row_col_ranges(Nq, Nk, Br, Bc):
    Nq, Nk, Br, Bc = _sizes(Nq=Nq, Nk=Nk, Br=Br, Bc=Bc)
    i = np.arange(-(-Nq // Br))
    j = np.arange(-(-Nk // Bc))
    r0, r1 = i * Br, np.minimum((i + 1) * Br, Nq) - 1  # first and last row of block i
    c0, c1 = j * Bc, np.minimum((j + 1) * Bc, Nk) - 1  # first and last key of block j
    return r0[:, None], r1[:, None], c0[None, :], c1[None, :]


def causal_blocks(Nq: int, Nk: int, Br: int, Bc: int) -> np.ndarray:
    """Blocks that hold at least one causal pair (key ≤ query): those on or below the diagonal.

    Alone it attends to whole diagonal blocks ("block-causal"); with ``causal=True`` the diagonal
    blocks are masked element-wise on chip, which is exactly causal attention with the blocks
    above the diagonal skipped.
    """
    r0, r1, c0, c1 = _row_col_ranges(Nq, Nk, Br, Bc)
    return np.broadcast_to(c0 <= r1, (r0.size, c0.size)).copy()


def local_blocks(Nq: int, Nk: int, Br: int, Bc: int, window: int, causal: bool = False) -> np.ndarray:
    """Blocks that hold at least one pair of a sliding window: ``|k − l| ≤ window`` (``0 ≤ k − l ≤ window``
    if ``causal``), for query k and key l."""
    if isinstance(window, bool) or not isinstance(window, numbers.Integral) or window < 0:
        raise ValueError(f"window: expected a non-negative integer, got {window!r}")
    r0, r1, c0, c1 = _row_col_ranges(Nq, Nk, Br, Bc)
    lo, hi = r0 - c1, r1 - c0  # smallest and largest k − l inside the block
    lower = 0 if _bool(causal, "causal") else -window
    return (hi >= lower) & (lo <= window)


def butterfly_blocks(Tr: int, Tc: int) -> np.ndarray:
    """Flat butterfly: block (i, j) is nonzero when i XOR j is 0 or a power of two.

    A butterfly matrix of size T = 2^k is a product of k sparse factors; factor t connects i with
    i XOR 2^t. The "flat" butterfly of Pixelated Butterfly keeps the union of the factors' supports
    (one sparse matrix instead of a product), so each block row has 1 + log₂T nonzero blocks.
    Written here from that definition; it works for any (Tr, Tc).
    """
    Tr, Tc = _sizes(Tr=Tr, Tc=Tc)
    x = np.arange(Tr)[:, None] ^ np.arange(Tc)[None, :]
    return (x & (x - 1)) == 0  # 0 or a single set bit


def random_blocks(Tr: int, Tc: int, density: float, seed: int = 0) -> np.ndarray:
    """Exactly ``round(density·Tr·Tc)`` nonzero blocks at positions drawn with ``seed``."""
    if isinstance(density, bool) or not isinstance(density, numbers.Real) or not 0 <= density <= 1:
        raise ValueError(f"density: expected a fraction in [0, 1], got {density!r}")
    Tr, Tc = _sizes(Tr=Tr, Tc=Tc)
    seed = _nonnegative_int(seed, "seed")  # numpy's generator takes None (unseeded), refuses floats and negatives
    n = Tr * Tc
    k = int(round(density * n))
    M = np.zeros(n, dtype=bool)
    M[np.random.default_rng(seed).permutation(n)[:k]] = True
    return M.reshape(Tr, Tc)
