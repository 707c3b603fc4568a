"""Closed forms for FlashAttention (Algorithms 2 and 4), line by line.

(Note: created by the backward pass's author with only ``backward``; the forward's author adds
``forward`` above the backward section.)
"""

from __future__ import annotations

from . import Tally

__all__ = ["backward"]  # the forward author adds "forward"


# ---------------------------------------------------------------------------------------------
# Algorithm 4 (backward), appended by the backward pass's author; the forward's formulas are above.
# ---------------------------------------------------------------------------------------------


def _bwd_block_sizes(Nq, Nk, d, sram_size, block_sizes, dtype_bytes, dropout_p):
    """The (Br, Bc) that ``flash1.backward`` resolves for these options (its real footprint, Alg.4 l.2)."""
    from types import SimpleNamespace

    from ..blocks import resolve
    from ..flash1_bwd import footprint

    pb = SimpleNamespace(Nq=Nq, Nk=Nk, d=d, sram_size=sram_size, dtype_bytes=dtype_bytes,
                         block_sizes=None if block_sizes is None else tuple(block_sizes))
    return resolve(pb, lambda Br, Bc, d_: footprint(Br, Bc, d_, dropout=dropout_p > 0))


def backward(*, Nq, Nk, d, heads=1, sram_size=None, block_sizes=None, dropout_p=0.0, dtype_bytes=2, **_):
    """Algorithm 4, line by line, per head (Tally multiplies by ``heads``).

    ``causal``, ``mask`` and ``scale`` change no IO: MASK is applied on chip and Algorithm 4
    visits every tile, as written (the causal skip is FlashAttention-2's). Dropout changes only the
    block sizes (its Z_ij tile is on chip). With Tc = ⌈Nk/Bc⌉::

        Alg.4 l.5   initialise dQ, dK, dV           writes Nq·d + 2·Nk·d
        Alg.4 l.7   load K_j, V_j (once each)       reads  2·Nk·d
        Alg.4 l.10  load Q_i, O_i, dO_i, dQ_i, ℓ_i, m_i, for every j
                                                    reads  Tc·(4·Nq·d + 2·Nq)
        Alg.4 l.21  write dQ_i, for every j         writes Tc·Nq·d
        Alg.4 l.24  write dK_j, dV_j                writes 2·Nk·d

    Total Θ(Tc·Nq·d) = Θ(N²d²/M) since Bc = Θ(M/d): Theorem 5.
    """
    Br, Bc = _bwd_block_sizes(Nq, Nk, d, sram_size, block_sizes, dtype_bytes, dropout_p)
    Tc = -(-Nk // Bc)
    t = Tally(heads, dtype_bytes)
    t.add("Alg.4 l.5", writes=Nq * d + 2 * Nk * d)
    t.add("Alg.4 l.7", reads=2 * Nk * d)
    t.add("Alg.4 l.10", reads=Tc * (4 * Nq * d + 2 * Nq))
    t.add("Alg.4 l.21", writes=Tc * Nq * d)
    t.add("Alg.4 l.24", writes=2 * Nk * d)
    return t.prediction()
