"""Closed forms for FlashAttention (Algorithms 1/2 as ``flashref.flash1`` runs them), line by line.

Per head, with Tr = ⌈Nq/Br⌉, Tc = ⌈Nk/Bc⌉ and the block sizes ``flash1`` resolves for the same
options (:func:`flashref.flash1.grid`). Row block i holds r_i rows (the last may be ragged), so Σ_i r_i = Nq.

forward                                  reads                    writes
  Alg.1 l.2   O = 0, ℓ = 0, m = -inf                              Nq·d + 2·Nq
  Alg.1 l.6   K_j, V_j once per j        2·Nk·d
  Alg.1 l.8   Q_i, O_i, ℓ_i, m_i per     (2d + 2)·Σ_{(i,j)} r_i
              visited (j, i)
  Alg.1 l.12  O_i per visited (j, i)                              d·Σ_{(i,j)} r_i
  Alg.1 l.13  ℓ_i, m_i per visited (j, i)                         2·Σ_{(i,j)} r_i

Every tile is visited in Algorithms 1/2 (Σ r_i = Tc·Nq): reads ``2·Nk·d + Tc·(2·Nq·d + 2·Nq)``,
writes ``Nq·d + 2·Nq + Tc·(Nq·d + 2·Nq)``. With Algorithm 5's ``block_mask`` (Tr x Tc) only the
tiles with M_ij ≠ 0 are visited; K_j, V_j are still loaded for every j. At given blocks causal masking, a
window, a mask, a softcap and dropout change no count: they are applied on chip to tiles that are loaded anyway.
(Dropout's Z_ij and the softcap's derivative in the backward, a bias tile and ALiBi's slope take room on chip,
so at a given M the blocks resolved can be smaller: :func:`flashref.flash1.footprint`.) The other variants:

* ``bias``: its tile B_ij at l.9, ``Σ_{(i,j)} r_i·c_j`` reads (``Nq·Nk``: every tile), and again in the
  backward (l.11), which with ``bias_grad`` writes dBias once, ``Nq·Nk`` (zero tiles for Algorithm 5's
  zero blocks);
* ``alibi_slopes``: one slope with each K_j, V_j, ``Tc`` reads in each pass;
* ``enable_gqa``: the counts of Hq heads (each query head reads its K/V head's tiles), and the backward's
  pass that sums each group's dK_h, dV_h: ``2·Hq·Nk·d`` reads, ``2·Hkv·Nk·d`` writes.

Asymptotically (Appendix C): Tc = Θ(Nd/M) passes over Q and O, each Θ(Nd): Θ(N²d²/M). With the
paper's Bc = M/4d the constant is about 3·4 = 12 (3Nd per pass: read Q, read O, write O); with the
4N per pass of ℓ, m it is (3d + 4)·4/d = 12 + 16/d.
"""

from __future__ import annotations

import numpy as np

from .. import flash1, flash1_bwd, variants
from .._numbers import _nonnegative_int, positive_int
from ..problem import SEQ_LEN, Problem
from . import Prediction, Tally
from .flash2 import group_sum

__all__ = ["forward", "backward", "visited_rows", "visited_area", "LINES_FWD", "LINES_BWD"]

#: Line names of the closed form; Algorithm 5 (``iomodel.blocksparse``) numbers the same lines its own way.
LINES_FWD = {"init": "Alg.1 l.2", "K_j, V_j": "Alg.1 l.6", "load": "Alg.1 l.8", "scores": "Alg.1 l.9",
             "write O": "Alg.1 l.12", "write l, m": "Alg.1 l.13"}
LINES_BWD = {"init": "Alg.4 l.5", "K_j, V_j": "Alg.4 l.7", "load": "Alg.4 l.10", "scores": "Alg.4 l.11",
             "write dQ": "Alg.4 l.21", "write dK, dV": "Alg.4 l.24"}


def visited_rows(Nq, Br, Tc, block_mask=None) -> int:
    """Σ over visited tiles (i, j) of r_i, the rows in row block i (``block_mask``: checked by the caller)."""
    # as predict checks them, and Python ints (numpy's small integers would wrap)
    Nq, Br, Tc = _nonnegative_int(Nq, "Nq", SEQ_LEN), positive_int(Br, "Br"), _nonnegative_int(Tc, "Tc")
    if block_mask is None:  # every tile: each row once per column block
        return Nq * Tc
    Tr = -(-Nq // Br)
    r = np.array([min(Br, Nq - i * Br) for i in range(Tr)], dtype=np.int64)  # (Tr,), as many as the mask's rows
    return int((r[:, None] * np.asarray(block_mask, dtype=bool)).sum())


def visited_area(g, block_mask=None) -> int:
    """Σ over visited tiles (i, j) of r_i·c_j, the entries of the tiles: what a bias reads a pass (``Nq·Nk`` without a
    ``block_mask``, which the caller has checked against the grid ``g``)."""
    if block_mask is None:
        return g.Nq * g.Nk
    r = np.array([b - a for a, b in map(g.rows, range(g.Tr))], dtype=np.int64)  # (Tr,) rows of each row block
    c = np.array([b - a for a, b in map(g.cols, range(g.Tc))], dtype=np.int64)  # (Tc,) keys of each column block
    return int(r @ np.asarray(block_mask, dtype=np.int64) @ c)


def _slopes(pb: Problem, g) -> int:
    """[alibi] One slope loaded with each K_j, V_j: Tc reads a loop head; none without ALiBi."""
    return g.Tc if pb.alibi_slopes is not None else 0


def forward(pb: Problem, *, grid=None, block_mask=None, lines=LINES_FWD) -> Prediction:
    """Algorithm 1's reads and writes; on ``grid`` with ``block_mask`` it is Algorithm 5's."""
    g = grid or flash1.grid(pb)
    Nq, Nk, d = pb.Nq, pb.Nk, pb.d
    R = visited_rows(Nq, g.Br, g.Tc, block_mask)
    # [gqa] every query head is a loop head: it reads its K/V head's tiles as if they were its own
    t = Tally(pb.heads, pb.dtype_bytes)
    t.add(lines["init"], writes=Nq * d + 2 * Nq)
    t.add(lines["K_j, V_j"], reads=2 * Nk * d + _slopes(pb, g))
    if _any_tile(block_mask):  # the simulator's report has a line only where a step ran
        t.add(lines["load"], reads=(2 * d + 2) * R)
        if pb.bias is not None:  # [bias] B_ij with each visited tile
            t.add(lines["scores"], reads=visited_area(g, block_mask))
        t.add(lines["write O"], writes=d * R)
        t.add(lines["write l, m"], writes=2 * R)
    return t.prediction()


def _any_tile(block_mask) -> bool:
    """Whether the inner loop runs at all: every tile without a block mask, none with an all-zero one."""
    return block_mask is None or bool(np.any(block_mask))


# ---------------------------------------------------------------------------------------------
# Algorithm 4 (backward)
# ---------------------------------------------------------------------------------------------


def backward(pb: Problem, *, grid=None, block_mask=None, lines=LINES_BWD, bias_grad=False) -> Prediction:
    """Algorithm 4 as ``flash1.backward`` runs it, line by line, per head (Tally multiplies by ``heads``).

    At given blocks ``causal``, ``mask``, a window, a softcap and ``scale`` change no IO: MASK is applied on chip
    and Algorithm 4 visits every tile, as written (skipping causal blocks is FlashAttention-2's). Dropout and a
    softcap can change the block sizes at a given M (their Z_ij and 1 − tanh² tiles are on chip:
    :func:`flashref.flash1_bwd.footprint`). With R = Σ r_i over visited tiles (Tc·Nq without a ``block_mask``)::

        Alg.4 l.5   initialise dQ, dK, dV                   writes Nq·d + 2·Nk·d
        Alg.4 l.7   load K_j, V_j once per j                reads  2·Nk·d (+ Tc slopes with ALiBi)
        Alg.4 l.10  load Q_i, O_i, dO_i, dQ_i, ℓ_i, m_i     reads  (4d + 2)·R
        Alg.4 l.11  [bias] B_ij per visited (j, i)          reads  Σ r_i·c_j
        Alg.4 l.21  write dQ_i per visited (j, i)           writes d·R
        dBias       [bias] with bias_grad, every tile once  writes Nq·Nk
        Alg.4 l.24  write dK_j, dV_j once per j             writes 2·Nk·d

    and, with GQA, the pass that sums each group's dK_h, dV_h. Total Θ(Tc·Nq·d) = Θ(N²d²/M) since
    Bc = Θ(M/d): Theorem 5.
    """
    bias_grad = variants.check_bias_grad(bias_grad, pb.bias)
    g = grid or flash1_bwd.grid(pb)
    Nq, Nk, d = pb.Nq, pb.Nk, pb.d
    R = visited_rows(Nq, g.Br, g.Tc, block_mask)
    t = Tally(pb.heads, pb.dtype_bytes)
    t.add(lines["init"], writes=Nq * d + 2 * Nk * d)
    t.add(lines["K_j, V_j"], reads=2 * Nk * d + _slopes(pb, g))
    if _any_tile(block_mask):
        t.add(lines["load"], reads=(4 * d + 2) * R)
        if pb.bias is not None:
            t.add(lines["scores"], reads=visited_area(g, block_mask))
        t.add(lines["write dQ"], writes=d * R)
    if bias_grad:
        t.add("dBias", writes=Nq * Nk)
    t.add(lines["write dK, dV"], writes=2 * Nk * d)
    # [gqa] unpacked, as FlashAttention-2's default: the group sum (flash2.gqa_packing is not an option here)
    return t.prediction() + group_sum(pb)
