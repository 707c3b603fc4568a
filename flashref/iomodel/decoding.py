"""Closed form for split-KV decoding (``flashref.decoding``), line by line.

Per head, with Nq queries in Tr = ⌈Nq/Br⌉ blocks, Nk keys and S = ``num_splits`` splits:

split pass (S·Tr work items)                   reads              writes
  load Q_i (every split)                       S·Nq·d
  load K_j, V_j (each key once per Q block)    Tr·2·Nk·d
  write partial O, m, ℓ   (S > 1)                                 S·(Nq·d + 2·Nq)
  write O, ℓ, m           (S = 1)                                 Nq·d + 2·Nq
merge pass (S > 1 only; Tr work items)
  load partial O, m, ℓ                         S·(Nq·d + 2·Nq)
  write O, ℓ, m                                                   Nq·d + 2·Nq

Streaming the cache (2·Nk·d) dominates; splitting adds ``(S−1)·Nq·d`` Q reads and
``2·S·(Nq·d + 2·Nq)`` partial traffic, which for one query is tiny next to the cache.
``causal``, ``mask``, ``dropout_p`` and ``scale`` change no IO (no block is skipped).
"""

from __future__ import annotations

from types import SimpleNamespace

from . import Tally

__all__ = ["forward", "resolve"]


def resolve(*, Nq, Nk, d, heads=1, num_splits=None, sms=None, sram_size=None, block_sizes=None,
            dropout_p=0.0, dtype_bytes=2) -> tuple[int, int, int]:
    """``(Br, Bc, num_splits)`` exactly as ``decoding.forward`` resolves them."""
    from .. import decoding

    pb = SimpleNamespace(Nq=Nq, Nk=Nk, d=d, sram_size=sram_size, dtype_bytes=dtype_bytes, dropout_p=dropout_p,
                         block_sizes=None if block_sizes is None else tuple(block_sizes))
    Br, Bc = decoding.block_sizes_for(pb)
    Tr, Tc = -(-Nq // Br), -(-Nk // Bc)
    return Br, Bc, decoding.resolve_num_splits(num_splits, heads, Tr, Tc, Nk, sms)


def forward(*, Nq, Nk, d, heads=1, num_splits=None, sms=None, sram_size=None, block_sizes=None,
            dropout_p=0.0, dtype_bytes=2, **_):
    Br, _Bc, S = resolve(Nq=Nq, Nk=Nk, d=d, heads=heads, num_splits=num_splits, sms=sms, sram_size=sram_size,
                         block_sizes=block_sizes, dropout_p=dropout_p, dtype_bytes=dtype_bytes)
    Tr = -(-Nq // Br)
    t = Tally(heads, dtype_bytes)
    t.add("split: load Q_i", reads=S * Nq * d)
    t.add("split: load K_j, V_j", reads=Tr * 2 * Nk * d)
    if S == 1:
        t.add("split: write O, l, m", writes=Nq * d + 2 * Nq)
        return t.prediction()
    t.add("split: write partial O, m, l", writes=S * (Nq * d + 2 * Nq))
    t.add("merge: load partial O, m, l", reads=S * (Nq * d + 2 * Nq))
    t.add("merge: write O, l, m", writes=Nq * d + 2 * Nq)
    return t.prediction()


def work_items(*, Nq, Nk, d, heads=1, **opts) -> int:
    """Independent thread blocks of the split pass: heads × Tr × num_splits."""
    Br, _Bc, S = resolve(Nq=Nq, Nk=Nk, d=d, heads=heads, **opts)
    return heads * -(-Nq // Br) * S
