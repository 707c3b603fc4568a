"""Closed forms for FlashAttention (Algorithms 1/2 as ``flashref.flash1`` runs them), line by line.

Per head, with Tr = ⌈Nq/Br⌉, Tc = ⌈Nk/Bc⌉ and the block sizes ``flash1`` resolves for the same
options (:func:`block_sizes`). Row block i holds r_i rows (the last may be ragged), so Σ_i r_i = Nq.

forward                                  reads                    writes
  Alg.1 l.2   O = 0, ℓ = 0, m = -inf                              Nq·d + 2·Nq
  Alg.1 l.6   K_j, V_j once per j        2·Nk·d
  Alg.1 l.8   Q_i, O_i, ℓ_i, m_i per     (2d + 2)·Σ_{(i,j)} r_i
              visited (j, i)
  Alg.1 l.12  O_i per visited (j, i)                              d·Σ_{(i,j)} r_i
  Alg.1 l.13  ℓ_i, m_i per visited (j, i)                         2·Σ_{(i,j)} r_i

Every tile is visited in Algorithms 1/2 (Σ r_i = Tc·Nq): reads ``2·Nk·d + Tc·(2·Nq·d + 2·Nq)``,
writes ``Nq·d + 2·Nq + Tc·(Nq·d + 2·Nq)``. With Algorithm 5's ``block_mask`` (Tr x Tc) only the
tiles with M_ij ≠ 0 are visited; K_j, V_j are still loaded for every j. Causal masking, a mask and
dropout change no count: they are applied on chip to tiles that are loaded anyway.

Asymptotically (Appendix C): Tc = Θ(Nd/M) passes over Q and O, each Θ(Nd): Θ(N²d²/M). With the
paper's Bc = M/4d the constant is about 3·4 = 12 (3Nd per pass: read Q, read O, write O).
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from .._checks import check_block_mask
from . import Tally

__all__ = ["forward", "backward", "block_sizes", "visited_rows"]


def _resolve(Nq, Nk, d, sram_size, block_sizes, dtype_bytes, footprint) -> tuple[int, int]:
    # A plain-argument resolver: forward() and backward() take an option named ``block_sizes``,
    # which would hide the public function of that name inside them.
    from .. import blocks

    pb = SimpleNamespace(d=d, Nq=Nq, Nk=Nk, sram_size=sram_size, dtype_bytes=dtype_bytes,
                         block_sizes=None if block_sizes is None else tuple(block_sizes))
    return blocks.resolve(pb, footprint)


def block_sizes(*, Nq, Nk, d, sram_size=None, block_sizes=None, dtype_bytes=2, footprint=None) -> tuple[int, int]:
    """The ``(Br, Bc)`` that ``flash1.forward`` resolves for these options (no simulation).

    ``footprint`` defaults to the forward's (:func:`flashref.flash1.footprint`); pass another (e.g.
    Algorithm 4's) to resolve the blocks of a different loop the same way.
    """
    from ..flash1 import footprint as forward_footprint

    return _resolve(Nq, Nk, d, sram_size, block_sizes, dtype_bytes, footprint or forward_footprint)


def visited_rows(Nq, Br, Tc, block_mask=None) -> int:
    """Σ over visited tiles (i, j) of r_i, the rows in row block i."""
    Tr = -(-Nq // Br)
    r = np.array([min(Br, Nq - i * Br) for i in range(Tr)], dtype=np.int64)  # (Tr,)
    if block_mask is None:
        return int(r.sum()) * Tc
    bm = check_block_mask(block_mask, Tr, Tc)
    return int((r[:, None] * bm).sum())


def forward(*, Nq, Nk, d, heads=1, sram_size=None, block_sizes=None, dtype_bytes=2, block_mask=None, **_):
    from ..flash1 import footprint

    Br, Bc = _resolve(Nq, Nk, d, sram_size, block_sizes, dtype_bytes, footprint)
    Tc = -(-Nk // Bc)
    R = visited_rows(Nq, Br, Tc, block_mask)
    t = Tally(heads, dtype_bytes)
    t.add("Alg.1 l.2", writes=Nq * d + 2 * Nq)
    t.add("Alg.1 l.6", reads=2 * Nk * d)
    t.add("Alg.1 l.8", reads=(2 * d + 2) * R)
    t.add("Alg.1 l.12", writes=d * R)
    t.add("Alg.1 l.13", writes=2 * R)
    return t.prediction()


# ---------------------------------------------------------------------------------------------
# Algorithm 4 (backward)
# ---------------------------------------------------------------------------------------------


def backward(*, Nq, Nk, d, heads=1, sram_size=None, block_sizes=None, dropout_p=0.0, dtype_bytes=2,
             block_mask=None, **_):
    """Algorithm 4 as ``flash1.backward`` runs it, line by line, per head (Tally multiplies by ``heads``).

    ``causal``, ``mask`` and ``scale`` change no IO: MASK is applied on chip and Algorithm 4 visits
    every tile, as written (skipping causal blocks is FlashAttention-2's). Dropout changes only the
    block sizes (its Z_ij tile is on chip: :func:`flashref.flash1_bwd.footprint`). With R = Σ r_i over
    visited tiles (Tc·Nq without a ``block_mask``)::

        Alg.4 l.5   initialise dQ, dK, dV                   writes Nq·d + 2·Nk·d
        Alg.4 l.7   load K_j, V_j once per j                reads  2·Nk·d
        Alg.4 l.10  load Q_i, O_i, dO_i, dQ_i, ℓ_i, m_i     reads  (4d + 2)·R
        Alg.4 l.21  write dQ_i per visited (j, i)           writes d·R
        Alg.4 l.24  write dK_j, dV_j once per j             writes 2·Nk·d

    Total Θ(Tc·Nq·d) = Θ(N²d²/M) since Bc = Θ(M/d): Theorem 5.
    """
    from ..flash1_bwd import footprint as backward_footprint

    has_dropout = dropout_p > 0
    Br, Bc = _resolve(Nq, Nk, d, sram_size, block_sizes, dtype_bytes,
                      lambda Br_, Bc_, d_: backward_footprint(Br_, Bc_, d_, dropout=has_dropout))
    Tc = -(-Nk // Bc)
    R = visited_rows(Nq, Br, Tc, block_mask)
    t = Tally(heads, dtype_bytes)
    t.add("Alg.4 l.5", writes=Nq * d + 2 * Nk * d)
    t.add("Alg.4 l.7", reads=2 * Nk * d)
    t.add("Alg.4 l.10", reads=(4 * d + 2) * R)
    t.add("Alg.4 l.21", writes=d * R)
    t.add("Alg.4 l.24", writes=2 * Nk * d)
    return t.prediction()

