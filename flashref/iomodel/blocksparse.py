"""Closed forms for block-sparse FlashAttention (Algorithm 5 and its backward), and Proposition 4.

Both passes run on the grid :func:`flashref.blocksparse.grid` resolves (one (Br, Bc) for both).
Row block i holds r_i rows; ``R = Σ_{(i,j): M_ij ≠ 0} r_i`` sums them over the nonzero blocks
(``R = Br·nnz`` when no block row is ragged). Per head:

forward (Algorithm 5 = Algorithm 2 + "if M_ij ≠ 0")   reads             writes
  Alg.5 l.2   O = 0, ℓ = 0, m = -inf                                    Nq·d + 2·Nq
  Alg.5 l.6   K_j, V_j, for every j (even empty ones)   2·Nk·d
  Alg.5 l.9   Q_i, O_i, ℓ_i, m_i per nonzero block      (2d + 2)·R
  Alg.5 l.15  O_i per nonzero block                                     d·R
  Alg.5 l.16  ℓ_i, m_i per nonzero block                                2·R

backward (Algorithm 4 with the same skip)
  Alg.4 l.5   dQ = 0, dK = 0, dV = 0                                    Nq·d + 2·Nk·d
  Alg.4 l.7   K_j, V_j, for every j                     2·Nk·d
  Alg.4 l.10  Q_i, O_i, dO_i, dQ_i, ℓ_i, m_i per block  (4d + 2)·R
  Alg.4 l.21  dQ_i per nonzero block                                    d·R
  Alg.4 l.24  dK_j, dV_j                                                2·Nk·d

So the IO is an affine function of the number of nonzero blocks: slope ``(3d + 4)·Br`` elements
per block forward, ``(5d + 2)·Br`` backward. With Tc = Θ(Nd/M) and R = s·Tc·Nq this is
Proposition 4's Θ(Nd + N²d²M⁻¹s) (:func:`prop4`). Both delegate to
:mod:`flashref.iomodel.flash1`'s closed forms with the block mask (the same tile steps run).
"""

from __future__ import annotations

import numbers

import numpy as np

from .. import blocksparse, patterns, variants
from ..problem import Problem, positive_int
from . import Prediction
from . import flash1 as _flash1
from .bounds import _check

__all__ = ["forward", "backward", "prop4", "prop4_constants", "nonzero_rows"]

#: Algorithm 5's numbers for the lines its forward shares with Algorithm 1.
LINES_ALG5 = {"init": "Alg.5 l.2", "K_j, V_j": "Alg.5 l.6", "load": "Alg.5 l.9", "scores": "Alg.5 l.10",
              "write O": "Alg.5 l.15", "write l, m": "Alg.5 l.16"}


def nonzero_rows(block_mask, Nq: int, Br: int) -> int:
    """R = Σ over nonzero blocks (i, j) of r_i, the rows of row block i (``block_mask``: boolean, Tr rows)."""
    Nq, Br = positive_int(Nq, "Nq"), positive_int(Br, "Br")
    Tr = -(-Nq // Br)
    where = f"(Tr = {Tr}, Tc) for Nq={Nq}, Br={Br}"
    # as patterns.check_block_mask (the simulator's and predict's check): a TypeError for what is not a boolean
    # array, a ValueError for a boolean array of the wrong shape
    M = patterns.boolean_array(block_mask, where)
    if M.ndim != 2 or M.shape[0] != Tr:
        raise ValueError(f"block_mask: expected shape {where}; got shape {M.shape}")
    return _flash1.visited_rows(Nq, Br, M.shape[1], M)


# block_mask=None: left out, it is refused by check_block_mask with the simulator's message
def forward(pb: Problem, *, block_mask=None) -> Prediction:
    g = blocksparse.grid_of(pb)
    M = blocksparse.check_block_mask(block_mask, g)
    # Algorithm 5 runs Algorithm 1's tile step behind "if M_ij ≠ 0": the same closed form, on this grid.
    return _flash1.forward(pb, grid=g, block_mask=M, lines=LINES_ALG5)


def backward(pb: Problem, *, block_mask=None, bias_grad=False) -> Prediction:
    variants.check_bias_grad(bias_grad, pb.bias)  # before the grid and the block mask, as the simulator
    g = blocksparse.grid_of(pb)
    M = blocksparse.check_block_mask(block_mask, g)
    # Algorithm 4 with the same skip: its closed form with the block mask, on this grid.
    return _flash1.backward(pb, grid=g, block_mask=M, bias_grad=bias_grad)


def prop4(N, d, M, s):
    """Proposition 4's order of growth, constant 1: ``N·d + N²·d²·s / M`` HBM accesses (elements).

    ``s`` is the fraction of nonzero blocks; ``M`` the SRAM size in elements. Θ(·) hides the
    constant; the figures compare shapes (slopes), not values.
    """
    _check(N=N, d=d, M=M)
    # a density: 0 (no block) to 1 (dense); s = 5 gave a number with no meaning
    if isinstance(s, (bool, np.bool_)) or not isinstance(s, numbers.Real) or not 0 <= s <= 1:
        raise ValueError(f"s: expected the fraction of nonzero blocks, a number in [0, 1], got {s!r}")
    return N * d + N**2 * d**2 * s / M


def prop4_constants(d, M, Bc) -> tuple[float, float]:
    """The constants Θ hides, for the forward: IO = c1·Nd + c2·N²d²s/M with square grids and full blocks.

    From the table above with Nq = Nk = N and R = s·N²/Bc: ``c1 = (3d + 2)/d`` (initialisation and
    the K_j, V_j loads) and ``c2 = (3d + 4)·M/(Bc·d²)`` (the nonzero blocks). With the paper's
    Bc = M/4d, c2 = 4(3d + 4)/d ≈ 12.
    """
    _check(d=d, M=M, Bc=Bc)  # d = 0 or Bc = 0 raised a bare ZeroDivisionError
    return (3 * d + 2) / d, (3 * d + 4) * M / (Bc * d**2)
