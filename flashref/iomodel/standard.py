"""Closed forms for standard attention (Algorithms 0 and 3), line by line.

Per head, with Nq queries, Nk keys and head dimension d (Appendix C, proof of Theorem 2:
Θ(Nd + N²) for every line):

forward                      reads            writes
  Alg.0 l.1  S = QKᵀ         Nq·d + Nk·d      Nq·Nk
  softcap    (if any)        Nq·Nk            Nq·Nk
  alibi      (if any)        Nq·Nk + 1        Nq·Nk       (the slope; the distances are generated)
  bias       (if any)        2·Nq·Nk          Nq·Nk
  mask       (if any)        Nq·Nk            Nq·Nk
  Alg.0 l.2  P = softmax(S)  Nq·Nk            Nq·Nk
  dropout    (if p > 0)      Nq·Nk            Nq·Nk
  Alg.0 l.3  O = PV          Nq·Nk + Nk·d     Nq·d

backward
  Alg.3 l.1  dV = Pᵀ dO      Nq·Nk + Nq·d     Nk·d
  Alg.3 l.2  dP = dO Vᵀ      Nq·d + Nk·d      Nq·Nk
  dropout    (if p > 0)      Nq·Nk            Nq·Nk
  Alg.3 l.3  dS              2·Nq·Nk          Nq·Nk
  mask       (if any)        Nq·Nk            Nq·Nk
  softcap    (if any)        Nq·d + Nk·d      Nq·Nk       (tanh recomputed from Q, K)
                             + Nq·Nk
  Alg.3 l.4  dQ = dS K       Nq·Nk + Nk·d     Nq·d
  Alg.3 l.5  dK = dSᵀ Q      Nq·Nk + Nq·d     Nk·d

``sram_size`` and ``block_sizes`` change no count (Theorem 2: the same Θ(Nd + N²) for every M; rule 6: a
matmul by blocks reads each operand once whatever its tiles), as in the simulator.

"mask" covers ``causal``, a boolean ``mask`` and a ``window`` (one pass for all of them). With
``enable_gqa`` the rows above are those of one K/V head's group: Nq → g·Nq for Q, S, P, O, dO,
dQ, dS (and g slopes), while K, V, dK, dV keep Nk·d: each K/V head is read once per matmul (rule 6),
so standard attention's GQA saves (g − 1)/g of its Θ(N·d) K/V traffic, not of its Θ(N²) passes.
A bias costs ``3·Nq·Nk`` per head; ALiBi ``2·Nq·Nk + 1`` in its own pass — the same Θ(N²) order,
since standard attention materialises S anyway: the ALiBi/bias contrast is FlashAttention's.
"""

from __future__ import annotations

from .. import variants
from ..problem import Problem
from . import Prediction, Tally

__all__ = ["forward", "backward"]


def _has_mask(pb: Problem) -> bool:
    return pb.causal or pb.mask is not None or pb.window is not None


def _shapes(pb: Problem):
    """(g·Nq, Nk, d, g): one K/V head's group (g = 1 without GQA)."""
    G = pb.group
    return G * pb.Nq, pb.Nk, pb.d, G


def _loop_heads(pb: Problem) -> int:
    """The K/V heads the packed matmuls run over: none when there are no query heads (g = 0)."""
    return pb.kv_heads if pb.group else 0


def forward(pb: Problem) -> Prediction:
    Nq, Nk, d, G = _shapes(pb)
    t = Tally(_loop_heads(pb), pb.dtype_bytes)
    t.add("Alg.0 l.1", reads=Nq * d + Nk * d, writes=Nq * Nk)
    if pb.softcap is not None:
        t.add("softcap", reads=Nq * Nk, writes=Nq * Nk)
    if pb.alibi_slopes is not None:
        t.add("alibi", reads=Nq * Nk + G, writes=Nq * Nk)
    if pb.bias is not None:
        t.add("bias", reads=2 * Nq * Nk, writes=Nq * Nk)
    if _has_mask(pb):
        t.add("mask", reads=Nq * Nk, writes=Nq * Nk)
    t.add("Alg.0 l.2", reads=Nq * Nk, writes=Nq * Nk)
    if pb.dropout_p > 0:
        t.add("dropout", reads=Nq * Nk, writes=Nq * Nk)
    t.add("Alg.0 l.3", reads=Nq * Nk + Nk * d, writes=Nq * d)
    return t.prediction()


def backward(pb: Problem, bias_grad=False) -> Prediction:
    # bias_grad: dBias is the dS already in HBM (standard.backward), so it moves nothing more
    variants.check_bias_grad(bias_grad, pb.bias)
    Nq, Nk, d, _ = _shapes(pb)
    t = Tally(_loop_heads(pb), pb.dtype_bytes)
    t.add("Alg.3 l.1", reads=Nq * Nk + Nq * d, writes=Nk * d)
    t.add("Alg.3 l.2", reads=Nq * d + Nk * d, writes=Nq * Nk)
    if pb.dropout_p > 0:
        t.add("dropout", reads=Nq * Nk, writes=Nq * Nk)
    t.add("Alg.3 l.3", reads=2 * Nq * Nk, writes=Nq * Nk)
    if _has_mask(pb):
        t.add("mask", reads=Nq * Nk, writes=Nq * Nk)
    if pb.softcap is not None:
        t.add("softcap", reads=Nq * d + Nk * d + Nq * Nk, writes=Nq * Nk)
    t.add("Alg.3 l.4", reads=Nq * Nk + Nk * d, writes=Nq * d)
    t.add("Alg.3 l.5", reads=Nq * Nk + Nq * d, writes=Nk * d)
    return t.prediction()
