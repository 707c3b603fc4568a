"""Block-sparse FlashAttention: Algorithm 5 of the FlashAttention paper, its backward, and sparsity patterns.

Block-sparse attention fixes, before looking at the data, which *blocks* of the score matrix may
be nonzero: a block mask ``M ∈ {0,1}^{Tr × Tc}`` on the grid of (Br × Bc) tiles. Its element mask
is ``M̃_kl = M_ij`` with ``i = ⌊k/Br⌋, j = ⌊l/Bc⌋`` (§3.3), and the output is ordinary attention
with that mask: ``P = softmax(S ⊙ 1_M̃)``, masked scores set to -inf.

Algorithm 5 is Algorithm 2 with one added line, ``if M_ij ≠ 0`` (l.8), around the inner body: a
zero block is never loaded and never computed. So the IO is the dense IO restricted to the
nonzero blocks; Proposition 4: Θ(Nd + N²d²M⁻¹s), where ``s`` is the fraction of nonzero blocks.
The loop is not duplicated here: :func:`flashref.flash1._forward` and
:func:`flashref.flash1_bwd._backward` take the block mask and skip exactly those tiles; this
module checks the block mask, fixes one block grid for both passes, and builds patterns.

One grid for both passes. The block mask is defined on the blocks, so the forward and the
backward must use the same (Br, Bc). Algorithm 4 holds more on chip than Algorithm 2, so
:func:`grid` resolves the blocks once with the larger of the two footprints (the paper's rule
``Bc = ⌈M/4d⌉, Br = min(Bc, d)``, shrunk until both loops really fit in M; see
:mod:`flashref.blocks`). Pass ``block_sizes=(Br, Bc)`` to pin them; build masks of shape
``(Tr, Tc)`` with :func:`grid`'s numbers.

Patterns (each returns a boolean ``(Tr, Tc)`` array):

* :func:`causal_blocks`: the blocks a causal mask touches (j·Bc ≤ last row of block i);
* :func:`local_blocks`: the blocks a sliding window ``|k − l| ≤ window`` touches;
* :func:`butterfly_blocks`: the flat butterfly of Pixelated Butterfly (Chen et al. 2021), which the
  FlashAttention paper uses for its block-sparse experiments: block (i, j) is nonzero when i and j
  differ in at most one bit, i.e. the union of the butterfly factors' supports; density about
  (1 + log₂T)/T, the ``N⁻¹ log N`` case of Proposition 4;
* :func:`random_blocks`: exactly ``round(density·Tr·Tc)`` nonzero blocks, seeded.

Example::

    g = blocksparse.grid(Nq=256, Nk=256, d=16, block_sizes=(16, 16))
    M = blocksparse.butterfly_blocks(g.Tr, g.Tc)
    fwd = blocksparse.forward(Q, K, V, M, block_sizes=(16, 16))
    bwd = blocksparse.backward(Q, K, V, fwd.O, dO, fwd.l, fwd.m, M, block_sizes=(16, 16))
"""

from __future__ import annotations

import dataclasses
import numbers
from typing import NamedTuple

import numpy as np

from . import blocks, flash1, flash1_bwd
from ._checks import attention_problem, check_flash_stats
from .results import BackwardResult, ForwardResult

__all__ = ["forward", "backward", "grid", "Grid", "footprint", "check_block_mask", "element_mask", "density",
           "causal_blocks", "local_blocks", "butterfly_blocks", "random_blocks"]


class Grid(NamedTuple):
    """The block grid: block sizes ``(Br, Bc)`` and counts ``Tr = ⌈Nq/Br⌉``, ``Tc = ⌈Nk/Bc⌉``."""

    Br: int
    Bc: int
    Tr: int
    Tc: int


def footprint(Br: int, Bc: int, d: int, dropout: bool = False) -> int:
    """On-chip elements per head that both passes need: the larger of Algorithm 2's and Algorithm 4's."""
    return max(flash1.footprint(Br, Bc, d), flash1_bwd.footprint(Br, Bc, d, dropout=dropout))


def _grid_of(pb) -> Grid:
    has_dropout = pb.dropout_p > 0
    Br, Bc = blocks.resolve(pb, lambda Br, Bc, d: footprint(Br, Bc, d, dropout=has_dropout))
    return Grid(Br, Bc, -(-pb.Nq // Br), -(-pb.Nk // Bc))


def grid(Nq: int, Nk: int, d: int, *, sram_size=None, block_sizes=None, dtype_bytes=2, dropout_p=0.0, **_) -> Grid:
    """The block grid that :func:`forward` and :func:`backward` use for these shapes and options."""
    from types import SimpleNamespace

    from ._checks import check_block_sizes, positive_int

    pb = SimpleNamespace(Nq=positive_int(Nq, "Nq"), Nk=positive_int(Nk, "Nk"), d=positive_int(d, "d"),
                         sram_size=None if sram_size is None else positive_int(sram_size, "sram_size"),
                         block_sizes=check_block_sizes(block_sizes),
                         dtype_bytes=positive_int(dtype_bytes, "dtype_bytes"),
                         dropout_p=float(dropout_p))
    return _grid_of(pb)


def check_block_mask(block_mask, g: Grid) -> np.ndarray:
    """A boolean ``(Tr, Tc)`` array, or a ``TypeError``/``ValueError`` naming ``block_mask`` and the grid."""
    where = (f"(Tr, Tc) = ({g.Tr}, {g.Tc}) for block sizes (Br, Bc) = ({g.Br}, {g.Bc}); "
             f"pass block_sizes=(Br, Bc) to fix the grid, and see blocksparse.grid")
    if block_mask is None:
        raise TypeError(f"block_mask: expected a boolean array of shape {where}, got None")
    try:
        a = np.asarray(block_mask)
    except Exception as e:
        raise TypeError(f"block_mask: expected a boolean array of shape {where}, "
                        f"got {type(block_mask).__name__}") from e
    if a.dtype != np.bool_:
        raise TypeError(f"block_mask: expected a boolean array (True = compute the block) of shape {where}; "
                        f"got dtype {a.dtype}")
    if a.shape != (g.Tr, g.Tc):
        raise ValueError(f"block_mask: expected shape {where}; got shape {a.shape}")
    return a


def _problem_and_grid(Q, K, V, block_mask, opts):
    pb = attention_problem(Q, K, V, **opts)
    g = _grid_of(pb)
    M = check_block_mask(block_mask, g)
    # Pin the resolved blocks so that flash1's loops (forward and backward) run on this very grid.
    return dataclasses.replace(pb, block_sizes=(g.Br, g.Bc)), g, M


def forward(Q, K, V, block_mask, **opts) -> ForwardResult:
    """Algorithm 5: ``O = dropout(softmax(MASK(τ QKᵀ) ⊙ 1_M̃)) V`` with the block mask ``M`` (Tr × Tc, bool).

    Options as every algorithm (``scale``, ``causal``, ``mask``, ``dropout_p``, ``seed``,
    ``sram_size``, ``block_sizes``, ``dtype_bytes``); ``causal`` and ``mask`` combine with the
    block mask (an entry is attended only if all allow it). Returns ``.O``, ``.l``, ``.m`` (for the
    backward; a row with no nonzero block has ℓ = 0, m = -inf and O = 0), ``.io``, ``.flops``,
    ``.events``, ``.block_sizes``, ``.block_mask`` and ``.density`` (the fraction s of nonzero blocks).
    """
    pb, g, M = _problem_and_grid(Q, K, V, block_mask, opts)
    # Alg.5 l.1-20 = Alg.2 with "if M_ij ≠ 0" (l.8) around the body: flash1._forward skips the zero blocks.
    res = flash1._forward(pb, block_mask=M)
    res.block_mask, res.density = M, density(M)
    return res


def backward(Q, K, V, O, dO, l, m, block_mask, **opts) -> BackwardResult:
    """Algorithm 4 with Algorithm 5's skip: a zero block of ``M`` is neither loaded nor computed.

    ``O``, ``l``, ``m`` are :func:`forward`'s; ``block_mask`` and the options must be the forward's.
    Gradients equal those of standard attention with the element mask :func:`element_mask` implies.
    """
    pb, g, M = _problem_and_grid(Q, K, V, block_mask, opts)
    O, dO, l, m = check_flash_stats(pb, O, dO, l, m)
    res = flash1_bwd._backward(pb, O, dO, l, m, block_mask=M)
    res.block_mask, res.density = M, density(M)
    return res


# ---------------------------------------------------------------------------------------------
# Block masks and the element masks they imply
# ---------------------------------------------------------------------------------------------


def element_mask(block_mask, Br: int, Bc: int, Nq: int, Nk: int) -> np.ndarray:
    """The ``(Nq, Nk)`` element mask M̃ of a block mask: ``M̃_kl = M_ij``, ``i = ⌊k/Br⌋``, ``j = ⌊l/Bc⌋`` (§3.3)."""
    M = np.asarray(block_mask, dtype=bool)
    g = Grid(Br, Bc, -(-Nq // Br), -(-Nk // Bc))
    check_block_mask(M, g)
    return M[np.arange(Nq) // Br][:, np.arange(Nk) // Bc]  # (Nq, Nk)


def density(block_mask) -> float:
    """s, the fraction of nonzero blocks."""
    M = np.asarray(block_mask, dtype=bool)
    return float(M.mean()) if M.size else 0.0


def _row_col_ranges(Nq, Nk, Br, Bc):
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
    lower = 0 if causal else -window
    return (hi >= lower) & (lo <= window)


def butterfly_blocks(Tr: int, Tc: int) -> np.ndarray:
    """Flat butterfly: block (i, j) is nonzero when i XOR j is 0 or a power of two.

    A butterfly matrix of size T = 2^k is a product of k sparse factors; factor t connects i with
    i XOR 2^t. The "flat" butterfly of Pixelated Butterfly keeps the union of the factors' supports
    (one sparse matrix instead of a product), so each block row has 1 + log₂T nonzero blocks.
    Written here from that definition; it works for any (Tr, Tc).
    """
    x = np.arange(Tr)[:, None] ^ np.arange(Tc)[None, :]
    return (x & (x - 1)) == 0  # 0 or a single set bit


def random_blocks(Tr: int, Tc: int, density: float, seed: int = 0) -> np.ndarray:
    """Exactly ``round(density·Tr·Tc)`` nonzero blocks at positions drawn with ``seed``."""
    if isinstance(density, bool) or not isinstance(density, numbers.Real) or not 0 <= density <= 1:
        raise ValueError(f"density: expected a fraction in [0, 1], got {density!r}")
    n = Tr * Tc
    k = int(round(density * n))
    M = np.zeros(n, dtype=bool)
    M[np.random.default_rng(seed).permutation(n)[:k]] = True
    return M.reshape(Tr, Tc)
