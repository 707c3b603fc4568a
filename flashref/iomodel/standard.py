"""Closed forms for standard attention (Algorithms 0 and 3), line by line.

Per head, with Nq queries, Nk keys and head dimension d (Appendix C, proof of Theorem 2:
Θ(Nd + N²) for every line):

forward                      reads            writes
  Alg.0 l.1  S = QKᵀ         Nq·d + Nk·d      Nq·Nk
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
  Alg.3 l.4  dQ = dS K       Nq·Nk + Nk·d     Nq·d
  Alg.3 l.5  dK = dSᵀ Q      Nq·Nk + Nq·d     Nk·d
"""

from __future__ import annotations

from ..problem import Problem
from . import Prediction, Tally

__all__ = ["forward", "backward"]


def _has_mask(pb: Problem) -> bool:
    return pb.causal or pb.mask is not None


def forward(pb: Problem) -> Prediction:
    Nq, Nk, d = pb.Nq, pb.Nk, pb.d
    t = Tally(pb.heads, pb.dtype_bytes)
    t.add("Alg.0 l.1", reads=Nq * d + Nk * d, writes=Nq * Nk)
    if pb.bias is not None:
        t.add("bias", reads=2 * Nq * Nk, writes=Nq * Nk)
    if _has_mask(pb):
        t.add("mask", reads=Nq * Nk, writes=Nq * Nk)
    t.add("Alg.0 l.2", reads=Nq * Nk, writes=Nq * Nk)
    if pb.dropout_p > 0:
        t.add("dropout", reads=Nq * Nk, writes=Nq * Nk)
    t.add("Alg.0 l.3", reads=Nq * Nk + Nk * d, writes=Nq * d)
    return t.prediction()


def backward(pb: Problem) -> Prediction:
    Nq, Nk, d = pb.Nq, pb.Nk, pb.d
    t = Tally(pb.heads, pb.dtype_bytes)
    t.add("Alg.3 l.1", reads=Nq * Nk + Nq * d, writes=Nk * d)
    t.add("Alg.3 l.2", reads=Nq * d + Nk * d, writes=Nq * Nk)
    if pb.dropout_p > 0:
        t.add("dropout", reads=Nq * Nk, writes=Nq * Nk)
    t.add("Alg.3 l.3", reads=2 * Nq * Nk, writes=Nq * Nk)
    if _has_mask(pb):
        t.add("mask", reads=Nq * Nk, writes=Nq * Nk)
    t.add("Alg.3 l.4", reads=Nq * Nk + Nk * d, writes=Nq * d)
    t.add("Alg.3 l.5", reads=Nq * Nk + Nq * d, writes=Nk * d)
    return t.prediction()
