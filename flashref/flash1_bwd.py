"""Algorithm 4 of the FlashAttention paper: the backward pass with recomputation.

Standard attention's backward (Algorithm 3) reads the Nq x Nk matrix P back from HBM and writes
and reads dP and dS as well. Algorithm 4 stores none of them. It keeps only O and the softmax
statistics ℓ, m from the forward pass, and, tile by tile, *recomputes* S_ij = τ Q_i K_jᵀ and
P_ij = diag(ℓ_i)⁻¹ exp(S_ij − m_i) on chip. That costs one more matmul per tile (5 instead of 4
in total, i.e. 2.5x the forward's 2; FlashAttention-2 §4.1, flash-attention issue #1525) and
saves every Θ(N²) HBM pass: Theorem 5 counts Θ(N²d²M⁻¹) accesses instead of Θ(Nd + N²).

Two ideas make the recomputation cheap (Appendix B.2 of the paper):

* D_i = rowsum(dO_i ∘ O_i) equals Σ_j P_ij dP_ij (eq. 4), so the softmax Jacobian term needs two
  Br x d tiles instead of a whole row of P and dP;
* the dropout mask Z is regenerated from the seed (here :func:`flashref.dropout.scale_mask`, a
  pure function of the coordinates), never stored.

The loop is K/V-outer (line 6) and Q-inner (line 9): dK_j and dV_j accumulate on chip and are
written once per j, while dQ_i is read and written back to HBM for every (j, i) — the T_c passes
over Q, O, dO and dQ that Theorem 5's proof counts.

On-chip footprint (elements per head), measured by :class:`flashref.memory.Memory` and returned
exactly by :func:`footprint`: K_j, V_j, d̃K_j, d̃V_j (4·Bc·d), Q_i, O_i, dO_i, dQ_i (4·Br·d),
ℓ_i, m_i (2·Br) and two Br x Bc tiles (P_ij and dP_ij / dS_ij) plus D_i (Br); with dropout a
third Br x Bc tile is live (P_ij, Z_ij and P_ij^dropped at line 15). The block sizes are chosen
by :func:`flashref.blocks.resolve` with this footprint, so they can differ from the forward's.

Example::

    fwd = flash1.forward(Q, K, V, causal=True)
    bwd = flash1.backward(Q, K, V, fwd.O, dO, fwd.l, fwd.m, causal=True)
    print(bwd.io)          # dQ_i is read and written T_c times; P never touches HBM
"""

from __future__ import annotations

import math

import numpy as np

from . import blocks, masks
from ._checks import attention_problem, check_block_mask, check_flash_stats
from .flops import FlopCounter
from .memory import Memory
from .results import BackwardResult
from .softmax import _finite_or_zero

__all__ = ["backward", "footprint"]


def _T(X: np.ndarray) -> np.ndarray:
    return X.swapaxes(-1, -2)


def footprint(Br: int, Bc: int, d: int, dropout: bool = False) -> int:
    """Peak on-chip elements per head of Algorithm 4's inner loop with full (Br, Bc) tiles.

    ``4·Bc·d`` (K_j, V_j, d̃K_j, d̃V_j) + ``4·Br·d`` (Q_i, O_i, dO_i, dQ_i) + the row vectors and
    Br x Bc tiles live at the fullest moment: line 20 without dropout (ℓ_i, m_i, D_i; P_ij, dP_ij),
    line 15 with dropout (ℓ_i, m_i; P_ij, Z_ij, P_ij^dropped).
    """
    if dropout:
        return 4 * Bc * d + 4 * Br * d + 2 * Br + 3 * Br * Bc
    return 4 * Bc * d + 4 * Br * d + 3 * Br + 2 * Br * Bc


def block_sizes_for(pb) -> tuple[int, int]:
    """The (Br, Bc) that Algorithm 4 runs with for problem ``pb`` (Alg.4 l.2, fitted to the real footprint)."""
    has_dropout = pb.dropout_p > 0
    return blocks.resolve(pb, lambda Br, Bc, d: footprint(Br, Bc, d, dropout=has_dropout))


def backward(Q, K, V, O, dO, l, m, **opts) -> BackwardResult:
    """Algorithm 4: gradients of ``O = dropout(softmax(MASK(τ QKᵀ))) V`` from ``O``, ``ℓ`` and ``m``.

    ``l`` and ``m`` are the forward's row statistics, shape ``(..., Nq)``: ``m`` the row maximum of
    the scaled, masked scores (-inf for a fully masked row) and ``l`` the row sum of
    ``exp(S − m)`` over the undropped scores (0 for a fully masked row). Options as every algorithm:
    ``scale``, ``causal``, ``mask``, ``dropout_p``, ``seed`` (the forward's), ``sram_size``,
    ``block_sizes``, ``dtype_bytes``. Returns ``.dQ``, ``.dK``, ``.dV``, ``.io``, ``.flops``, ``.events``.
    """
    pb = attention_problem(Q, K, V, **opts)
    O, dO, l, m = check_flash_stats(pb, O, dO, l, m)
    return _backward(pb, O, dO, l, m)


def _backward(pb, O, dO, l, m, block_mask=None) -> BackwardResult:
    """The loop of Algorithm 4 on a checked problem ``pb`` (see :func:`backward`).

    ``block_mask``: optional boolean ``(Tr, Tc)`` array; tile ``(i, j)`` is skipped entirely (no
    loads, no FLOPs) where it is False, as Algorithm 5's ``if M_ij ≠ 0`` does in the forward
    pass. The caller must use the same (Br, Bc) as this function (:func:`block_sizes_for`; pass
    ``block_sizes`` to pin them).
    """
    mem = Memory(pb.sram_size, pb.dtype_bytes, pb.lead_shape)
    fc = FlopCounter()
    for name, X in (("Q", pb.Q), ("K", pb.K), ("V", pb.V), ("O", O), ("dO", dO), ("l", l), ("m", m)):
        mem.put(name, X)  # inputs start in HBM at no cost (rule 1)
    Nq, Nk, d, tau = pb.Nq, pb.Nk, pb.d, pb.scale
    has_dropout = pb.dropout_p > 0

    # Alg.4 l.1: set the pseudo-random number generator state to R: the forward's seed, pb.seed,
    # from which pb.dropout_Z regenerates every tile's Z (l.14).
    # Alg.4 l.2: set block sizes (the paper's rule, shrunk until the real footprint fits M).
    Br, Bc = block_sizes_for(pb)
    # Alg.4 l.3-4: divide Q, O, dO, ℓ, m into Tr row blocks of Br, and K, V into Tc blocks of Bc.
    Tr, Tc = math.ceil(Nq / Br), math.ceil(Nk / Bc)
    if block_mask is not None:
        block_mask = check_block_mask(block_mask, Tr, Tc)

    # Alg.4 l.5: initialise dQ = 0 (Nq x d), dK = dV = 0 (Nk x d) in HBM: Nq·d + 2·Nk·d writes (rule 3).
    mem.alloc("dQ", (Nq, d), 0.0, dtype=pb.dtype, line="Alg.4 l.5")
    mem.alloc("dK", (Nk, d), 0.0, dtype=pb.dtype, line="Alg.4 l.5")
    mem.alloc("dV", (Nk, d), 0.0, dtype=pb.dtype, line="Alg.4 l.5")

    # Alg.4 l.6: for 1 ≤ j ≤ Tc
    for j in range(Tc):
        cols = blocks.tile(j, Bc, Nk)
        # Alg.4 l.7: load K_j, V_j from HBM to on-chip SRAM.
        K_j = mem.load("K", rows=cols, as_="K_j", line="Alg.4 l.7")  # (Bc, d)
        V_j = mem.load("V", rows=cols, as_="V_j", line="Alg.4 l.7")  # (Bc, d)
        # Alg.4 l.8: initialise d̃K_j = 0, d̃V_j = 0 (Bc x d) on SRAM.
        dK_tilde_j = mem.hold("dK_tilde_j", np.zeros_like(K_j))  # (Bc, d)
        dV_tilde_j = mem.hold("dV_tilde_j", np.zeros_like(V_j))  # (Bc, d)

        # Alg.4 l.9: for 1 ≤ i ≤ Tr
        for i in range(Tr):
            # Block-sparse skip (Alg.5 l.8 "if M_ij ≠ 0", applied to the backward): a zero block
            # of the sparsity mask contributes nothing to dQ_i, d̃K_j, d̃V_j, so its loads and
            # its arithmetic are skipped altogether.
            if block_mask is not None and not block_mask[i, j]:
                continue
            rows = blocks.tile(i, Br, Nq)
            # Alg.4 l.10: load Q_i, O_i, dO_i, dQ_i, ℓ_i, m_i from HBM to on-chip SRAM.
            Q_i = mem.load("Q", rows=rows, as_="Q_i", line="Alg.4 l.10")  # (Br, d)
            O_i = mem.load("O", rows=rows, as_="O_i", line="Alg.4 l.10")  # (Br, d)
            dO_i = mem.load("dO", rows=rows, as_="dO_i", line="Alg.4 l.10")  # (Br, d)
            dQ_i = mem.load("dQ", rows=rows, as_="dQ_i", line="Alg.4 l.10")  # (Br, d)
            l_i = mem.load("l", rows=rows, as_="l_i", line="Alg.4 l.10")[..., None]  # (Br, 1)
            m_i = mem.load("m", rows=rows, as_="m_i", line="Alg.4 l.10")[..., None]  # (Br, 1)

            # Alg.4 l.11: on chip, S_ij = τ Q_i K_jᵀ.
            S_ij = fc.matmul(Q_i, _T(K_j))  # (Br, Bc)
            fc.elementwise(S_ij)  # τ, folded into the matmul's epilogue (rule 5)
            S_ij = mem.hold("S_ij", S_ij * tau)

            # Alg.4 l.12: on chip, S_ij^masked = MASK(S_ij) (a function of the coordinates: no IO).
            attend = masks.tile_mask(pb.mask, pb.causal, rows, cols)
            if attend is not None:
                S_ij = mem.hold("S_ij", masks.apply(S_ij, attend))
                fc.elementwise(S_ij)

            # Alg.4 l.13: on chip, P_ij = diag(ℓ_i)⁻¹ exp(S_ij^masked − m_i); it overwrites S_ij.
            # A fully masked row has m_i = -inf and ℓ_i = 0: subtract 0 and divide by 1, so
            # exp(-inf) = 0 gives a zero row of P (no -inf - -inf, no 0/0).
            P_ij = np.exp(S_ij - _finite_or_zero(m_i)) / np.where(l_i == 0, 1.0, l_i)  # (Br, Bc)
            fc.elementwise(P_ij, ops=3)  # subtract, exp, divide
            mem.free("S_ij")
            P_ij = mem.hold("P_ij", P_ij)

            if has_dropout:
                # Alg.4 l.14: on chip, Z_ij: 1/(1-p) w.p. 1-p, else 0, regenerated from the seed
                # (the same entries the forward dropped, whatever the tiling: never stored).
                Z_ij = mem.hold("Z_ij", pb.dropout_Z(rows, cols))
                # Alg.4 l.15: on chip, P_ij^dropped = P_ij ∘ Z_ij.
                P_dropped_ij = mem.hold("P_dropped_ij", P_ij * Z_ij)  # (Br, Bc)
                fc.elementwise(P_dropped_ij)
            else:
                P_dropped_ij = P_ij  # no dropout: P^dropped is P itself, no new tile

            # Alg.4 l.16: on chip, d̃V_j ← d̃V_j + (P_ij^dropped)ᵀ dO_i.
            dV_update = fc.matmul(_T(P_dropped_ij), dO_i)  # (Bc, d)
            dV_tilde_j += dV_update
            fc.elementwise(dV_update)  # the accumulate
            mem.free("P_dropped_ij")

            # Alg.4 l.17: on chip, dP_ij^dropped = dO_i V_jᵀ.
            dP_ij = mem.hold("dP_ij", fc.matmul(dO_i, _T(V_j)))  # (Br, Bc)
            if has_dropout:
                # Alg.4 l.18: on chip, dP_ij = dP_ij^dropped ∘ Z_ij (in place).
                dP_ij = mem.hold("dP_ij", dP_ij * Z_ij)
                fc.elementwise(dP_ij)
                mem.free("Z_ij")

            # Alg.4 l.19: on chip, D_i = rowsum(dO_i ∘ O_i) = Σ_j P_ij dP_ij (Appendix B.2, eq. 4).
            D_i = mem.hold("D_i", (dO_i * O_i).sum(axis=-1, keepdims=True))  # (Br, 1)
            fc.elementwise(dO_i, ops=2)  # multiply, add

            # Alg.4 l.20: on chip, dS_ij = P_ij ∘ (dP_ij − D_i); it overwrites dP_ij.
            dS_ij = P_ij * (dP_ij - D_i)  # (Br, Bc)
            fc.elementwise(dS_ij, ops=2)  # subtract, multiply
            mem.free("dP_ij")
            dS_ij = mem.hold("dS_ij", dS_ij)

            # Alg.4 l.21: write dQ_i ← dQ_i + τ dS_ij K_j to HBM.
            dQ_update = fc.matmul(dS_ij, K_j)  # (Br, d)
            dQ_i += tau * dQ_update
            fc.elementwise(dQ_update, ops=2)  # scale, accumulate
            mem.store("dQ", dQ_i, rows=rows, line="Alg.4 l.21")

            # Alg.4 l.22: on chip, d̃K_j ← d̃K_j + τ dS_ijᵀ Q_i.
            dK_update = fc.matmul(_T(dS_ij), Q_i)  # (Bc, d)
            dK_tilde_j += tau * dK_update
            fc.elementwise(dK_update, ops=2)  # scale, accumulate

            # Alg.4 l.23: end for (the row block's tiles leave the chip).
            mem.free("Q_i", "O_i", "dO_i", "dQ_i", "l_i", "m_i", "P_ij", "D_i", "dS_ij")

        # Alg.4 l.24: write dK_j ← d̃K_j, dV_j ← d̃V_j to HBM.
        mem.store("dK", dK_tilde_j, rows=cols, line="Alg.4 l.24")
        mem.store("dV", dV_tilde_j, rows=cols, line="Alg.4 l.24")
        # Alg.4 l.25: end for.
        mem.free("K_j", "V_j", "dK_tilde_j", "dV_tilde_j")

    # Alg.4 l.26: return dQ, dK, dV.
    return BackwardResult(dQ=mem.result("dQ"), dK=mem.result("dK"), dV=mem.result("dV"),
                          io=mem.report(), flops=fc.report(), events=mem.events, block_sizes=(Br, Bc))
