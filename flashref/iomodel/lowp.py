"""Closed form of FlashAttention-2's forward with the FP8 options (``flashref.lowp``), in bytes too.

Per head, with the block sizes ``lowp`` resolves (its footprint holds three descales more than
FlashAttention-2's), Tr = ⌈Nq/Br⌉ and kv_i, nb_i = ⌈kv_i/Bc⌉ the keys and key blocks row block i
visits (all Nk and Tc without causal masking):

  line                     reads                     writes   bytes per element
  Alg.1 l.4   Q_i          Nq·d                               1 (FP8)
  Alg.1 l.4   descales     "tensor": 3·Tr                     4 (float32)
                           "block":  Tr (Q_scale_i)
  Alg.1 l.7   K_j, V_j     2·d·Σ_i kv_i                       1 (FP8)
  Alg.1 l.7   descales     "block": 2·Σ_i nb_i                4
  Alg.1 l.14  O_i                                    Nq·d     dtype_bytes
  Alg.1 l.15  L_i                                    Nq       dtype_bytes

So FP8 halves the bytes of the Q, K, V reads against fp16, and the block scales add
Tr + 2·Tr·Tc reads without causal masking (per-tensor: 3·Tr), 4 bytes each: one per Bc·d-byte
FP8 tile of K or V, a fraction 4/(Bc·d) of their bytes (0.05% at Bc = 128, d = 64): negligible.
P never leaves the chip: ``p_fp8``, ``p_scale``, ``key_order`` and ``incoherent`` (done before
the kernel) change no count.
"""

from __future__ import annotations

from .. import blocks, lowp
from ..problem import Problem
from . import Prediction, Tally
from .flash2 import band_totals

__all__ = ["forward", "requested"]

requested = lowp.requested


def forward(pb: Problem, **opts) -> Prediction:
    lp = lowp.check_options(pb, **opts)
    scaled = lp["scaling"] is not None
    Nq, Nk, d, causal = pb.Nq, pb.Nk, pb.d, pb.causal
    Br, Bc = blocks.resolve(pb, lambda r, c, dd: lowp.footprint(r, c, dd, scaled))
    Tr = -(-Nq // Br)
    # Σ_i kv_i and the K tiles they span (Nq + Nk: a reach without a bound; causal: none ahead)
    kv = band_totals(Nq, Br, Nk, Bc, Nq + Nk, 0 if causal else Nq + Nk)
    fp8 = 1 if lp["qkv"] is not None else None
    t = Tally(pb.heads, pb.dtype_bytes)
    t.add("Alg.1 l.4", reads=Nq * d, dtype_bytes=fp8)
    if lp["scaling"] == "tensor":
        t.add("Alg.1 l.4 descales", reads=3 * Tr, dtype_bytes=lowp.SCALE_BYTES)
    elif lp["scaling"] == "block":
        t.add("Alg.1 l.4 descales", reads=Tr, dtype_bytes=lowp.SCALE_BYTES)
    t.add("Alg.1 l.7", reads=2 * d * kv.loaded, dtype_bytes=fp8)
    if lp["scaling"] == "block":
        t.add("Alg.1 l.7 descales", reads=2 * kv.tiles, dtype_bytes=lowp.SCALE_BYTES)
    t.add("Alg.1 l.14", writes=Nq * d)
    t.add("Alg.1 l.15", writes=Nq)
    return t.prediction()
