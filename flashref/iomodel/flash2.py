"""Closed forms for FlashAttention-2 (Algorithms 1 and 2 as ``flashref.flash2`` runs them), line by line.

Per head, Tr = ⌈Nq/Br⌉, Tc = ⌈Nk/Bc⌉, with the block sizes ``flash2`` resolves for the same options.

forward                               reads                      writes
  Alg.1 l.4   Q_i, once per i         Nq·d
  Alg.1 l.7   K_j, V_j per (i, j)     2·d·Σ_i kv_i               (kv_i = Nk, or causal: the keys of
  Alg.1 l.8   bias B_ij (if any)      Σ_i r_i·kv_i                the blocks j not skipped)
  Alg.1 l.14  O_i, once per i                                    Nq·d
  Alg.1 l.15  L_i, once per i                                    Nq

backward
  Alg.2 l.3   dQ = 0 in HBM                                      Nq·d
  Alg.2 l.4   D = rowsum(dO∘O)        2·Nq·d                     Nq
  Alg.2 l.6   K_j, V_j per visited j  2·d·Σ_j Bc_j [j visited]
  Alg.2 l.9   Q_i, dO_i, dQ_i, L_i,   (3d + 2)·Σ_j q_j           (q_j = Nq, or causal: the queries
              D_i per (j, i)                                      of the row blocks not skipped)
  Alg.2 l.10  bias B_ij (if any)      Σ_j q_j·Bc_j
  Alg.2 l.15  dQ_i per (j, i)                                    d·Σ_j q_j
  Alg.2 l.18  dK_j, dV_j once per j                              2·Nk·d

Without causal masking: forward ``Nq·d + 2·Tr·Nk·d`` reads and ``Nq·d + Nq`` writes. A mask or
dropout changes no count (both are applied on chip); a bias adds ``Nq·Nk`` reads per pass (fewer
with causal skipping), the Θ(N²) term that MASK as a function avoids. Causal skipping makes Σ_i kv_i and Σ_j q_j
about half of Tr·Nk and Tc·Nq for Nq = Nk ≫ Br, Bc: kv_i = min(Nk, Bc·⌈r_i/Bc⌉) where r_i is the
last query row of block i plus one; a column block j is visited by the row blocks
i ≥ ⌊j·Bc/Br⌋, so q_j = Nq − Br·⌊j·Bc/Br⌋ when j·Bc < Nq, else 0 (and then K_j, V_j are not loaded
but dK_j = dV_j = 0 are still written).
"""

from __future__ import annotations

from .. import flash2
from ..problem import Problem
from . import Prediction, Tally

__all__ = ["forward", "backward", "kv_per_row_block", "q_per_column_block"]


def kv_per_row_block(Nq, Nk, Br, Bc, causal) -> list[int]:
    """Keys loaded (K_j, V_j rows) for each row block i of the forward."""
    Tr = -(-Nq // Br)
    out = []
    for i in range(Tr):
        r_end = min((i + 1) * Br, Nq)  # one past the last query of block i
        # visited j: the blocks starting at or before the last query, j·Bc <= r_end − 1
        out.append(min(Nk, Bc * ((r_end - 1) // Bc + 1)) if causal else Nk)
    return out


def q_per_column_block(Nq, Nk, Br, Bc, causal) -> list[int]:
    """Queries visited (rows of Q_i, dO_i, dQ_i, L_i, D_i) for each column block j of the backward."""
    Tc = -(-Nk // Bc)
    out = []
    for j in range(Tc):
        if not causal:
            out.append(Nq)
        elif j * Bc >= Nq:
            out.append(0)  # no query reaches these keys
        else:
            out.append(Nq - Br * ((j * Bc) // Br))
    return out


def forward(pb: Problem, **lowp_opts) -> Prediction:
    from . import lowp  # issue 17: the FP8 options are counted by iomodel.lowp

    if lowp.requested(lowp_opts):
        return lowp.forward(pb, **lowp_opts)
    g = flash2.grid_forward(pb)
    Nq, Nk, d = pb.Nq, pb.Nk, pb.d
    kv = kv_per_row_block(Nq, Nk, g.Br, g.Bc, pb.causal)
    t = Tally(pb.heads, pb.dtype_bytes)
    t.add("Alg.1 l.4", reads=Nq * d)
    t.add("Alg.1 l.7", reads=2 * d * sum(kv))
    if pb.bias is not None:
        r = [g.rows(i)[1] - g.rows(i)[0] for i in range(g.Tr)]
        t.add("Alg.1 l.8", reads=sum(r_i * kv_i for r_i, kv_i in zip(r, kv)))
    t.add("Alg.1 l.14", writes=Nq * d)
    t.add("Alg.1 l.15", writes=Nq)
    return t.prediction()


def backward(pb: Problem, **lowp_opts) -> Prediction:
    from . import lowp  # issue 17: the low-precision options are the forward's

    if lowp.requested(lowp_opts):
        raise TypeError(f"{', '.join(sorted(lowp_opts))}: the low-precision options apply to flash2's forward only")
    g = flash2.grid_backward(pb)
    Nq, Nk, d = pb.Nq, pb.Nk, pb.d
    t = Tally(pb.heads, pb.dtype_bytes)
    q = q_per_column_block(Nq, Nk, g.Br, g.Bc, pb.causal)
    Bc_j = [g.cols(j)[1] - g.cols(j)[0] for j in range(g.Tc)]
    t.add("Alg.2 l.3", writes=Nq * d)
    t.add("Alg.2 l.4", reads=2 * Nq * d, writes=Nq)
    t.add("Alg.2 l.6", reads=2 * d * sum(b for b, qj in zip(Bc_j, q) if qj > 0))
    t.add("Alg.2 l.9", reads=(3 * d + 2) * sum(q))
    if pb.bias is not None:
        t.add("Alg.2 l.10", reads=sum(qj * b for qj, b in zip(q, Bc_j)))
    t.add("Alg.2 l.15", writes=d * sum(q))
    t.add("Alg.2 l.18", writes=2 * Nk * d)
    return t.prediction()
