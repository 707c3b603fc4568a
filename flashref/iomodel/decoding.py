"""Closed form for split-KV decoding (``flashref.decoding``), line by line.

Per head, with Nq queries in Tr = ⌈Nq/Br⌉ blocks, Nk keys and S = ``num_splits`` splits:

split pass (S·Tr work items)                   reads              writes
  load Q_i (every split)                       S·Nq·d (+ S·Tr slopes with ALiBi)
  load K_j, V_j (each key once per Q block)    Tr·2·Nk·d
  write partial O, m, ℓ   (S > 1)                                 S·(Nq·d + 2·Nq)
  write O, ℓ, m           (S = 1)                                 Nq·d + 2·Nq
merge pass (S > 1 only; Tr work items)
  load partial O, m, ℓ                         S·(Nq·d + 2·Nq)
  write O, ℓ, m                                                   Nq·d + 2·Nq

Streaming the cache (2·Nk·d) dominates; splitting adds ``(S−1)·Nq·d`` Q reads and
``2·S·(Nq·d + 2·Nq)`` partial traffic, which for one query is tiny next to the cache.
``causal``, ``window``, ``mask``, ``dropout_p``, ``softcap`` and ``scale`` change no IO (no block is
skipped); with ``enable_gqa`` each query head reads its group's K/V, so the count is per query head, and with
``gqa_packing`` per K/V head with g·Nq rows: the cache is read g times less while those rows fit as
few row blocks as Nq did (decoding's few queries).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from .. import decoding, variants
from .._numbers import _nonnegative_int
from ..problem import Problem, _slopes
from ..variants import band
from . import Prediction, Tally
from .flash2 import band_totals

__all__ = ["forward", "forward_paged", "resolve", "work_items"]


def _planned(where: str, Nq, Nk, d, heads, num_splits, sms, opts: dict):
    """``(pb, grid, S)``: the problem ``decoding.forward`` would check, from shapes, and its split pass's plan."""
    # decoding.forward's options (its variants too: ALiBi's slope changes the footprint, so the blocks); heads a
    # count, as predict's (None would be from_shapes's grid of one head)
    pb = Problem.from_shapes(where, decoding.OPTIONS, Nq=Nq, Nk=Nk, d=d, heads=_nonnegative_int(heads, "heads"),
                             **opts)
    return (pb, *decoding.plan(pb, num_splits, sms))


def resolve(*, Nq, Nk, d, heads=1, num_splits=None, sms=None, **opts) -> tuple[int, int, int]:
    """``(Br, Bc, num_splits)`` exactly as ``decoding.forward`` resolves them, from shapes and options."""
    pb, g, S = _planned("iomodel.decoding.resolve", Nq, Nk, d, heads, num_splits, sms, opts)
    return g.Br // variants.packed_group(pb, pb.gqa_packing), g.Bc, S  # Br in query positions, as the simulator's


def forward(pb: Problem, *, num_splits=None, sms=None) -> Prediction:
    # [gqa] packed, a loop head is a K/V head with g·Nq rows (and g slopes): the table above with Nq → g·Nq
    G = variants.packed_group(pb, pb.gqa_packing)
    g, S = decoding.plan(pb, num_splits, sms)
    Nq, Nk, d, Tr = G * pb.Nq, pb.Nk, pb.d, g.Tr
    t = Tally(decoding.loop_heads(pb), pb.dtype_bytes)
    # [alibi] every work item loads its head's slope (the group's g, packed) beside Q_i
    t.add("split: load Q_i", reads=S * Nq * d + (S * Tr * G if pb.alibi_slopes is not None else 0))
    t.add("split: load K_j, V_j", reads=Tr * 2 * Nk * d)
    if S == 1:
        t.add("split: write O, l, m", writes=Nq * d + 2 * Nq)
        return t.prediction()
    t.add("split: write partial O, m, l", writes=S * (Nq * d + 2 * Nq))
    t.add("merge: load partial O, m, l", reads=S * (Nq * d + 2 * Nq))
    t.add("merge: write O, l, m", writes=Nq * d + 2 * Nq)
    return t.prediction()


def work_items(*, Nq, Nk, d, heads=1, num_splits=None, sms=None, **opts) -> int:
    """Independent thread blocks of the split pass: loop heads × Tr × num_splits (loop heads: K/V's with packed
    GQA, whose Tr counts g·Nq rows)."""
    pb, g, S = _planned("iomodel.decoding.work_items", Nq, Nk, d, heads, num_splits, sms, opts)
    return decoding.loop_heads(pb) * g.Tr * S  # an empty batch (heads = 0) launches no thread block


def forward_paged(*, Nq, d, heads, page_size, cache_seqlens, alibi_slopes=None, **opts) -> Prediction:
    """Exact reads and writes of ``decoding.forward_paged``, summed over the sequences of the batch.

    Per head and sequence b of length N_b, with Tr = ⌈Nq/Br⌉ row blocks, and per row block i the
    pages that meet the band [a_i − L, b_i + R] (all ⌈N_b/page_size⌉ pages without a window):

    =====================================  ===============================  ===========
    line                                   reads                            writes
    load Q_i (+ ALiBi slope)               Nq·d (+ Tr)
    [paged] block_table                    Σ_i pages_i
    [paged] load K_j, V_j                  2·d·Σ_i keys_i (used slots only)
    write O_i, L_i                                                          Nq·d + Nq
    =====================================  ===============================  ===========

    Leading term: ``2·N_b·d·Tr`` per head, the same bytes as a contiguous cache, plus
    ``Tr·⌈N_b/page_size⌉`` block-table reads; the unused slots of the last page are not read.
    """
    lens = decoding.check_cache_seqlens(cache_seqlens)
    heads = _nonnegative_int(heads, "heads")  # as predict's
    # An array of slopes is checked as the simulator checks it, against (B, H); True/False say whether there are any.
    given = alibi_slopes is not None and not isinstance(alibi_slopes, (bool, np.bool_))
    pb0, Br = decoding.paged_problem(Nq, 1, d, heads, page_size, "iomodel.predict_paged",
                                     alibi_slopes=True if given else alibi_slopes, **opts)
    if given:
        _slopes(alibi_slopes, (lens.size, pb0.heads), from_shapes=False)
    total = Tally(pb0.heads, pb0.dtype_bytes).prediction()  # an empty batch moves nothing
    page_size = int(page_size)  # checked above; a numpy uint8's arithmetic below would wrap
    for n in lens:
        total = total + _paged_sequence(dataclasses.replace(pb0, Nk=int(n)), Br, pb0.Nq, page_size)
    return total


def _paged_sequence(pb: Problem, Br: int, Nq: int, page_size: int) -> Prediction:
    """One sequence of N_b = ``pb.Nk`` cached keys, all heads."""
    n, d = pb.Nk, pb.d
    L, R = band(pb)
    t = Tally(pb.heads, pb.dtype_bytes)
    Tr = -(-Nq // Br)
    t.add("load Q_i", reads=Nq * d + (Tr if pb.alibi_slopes is not None else 0))
    # row block i (rows a..b) reads the pages that meet its band [a − L, b + R], whole but for the last page's
    # unused slots: FlashAttention-2's tiles with Bc = page_size, summed in closed form (a loop over the row
    # blocks took seconds at Nq = 2^31)
    band_sums = band_totals(Nq, Br, n, page_size, L, R)
    pages, keys = band_sums.tiles, band_sums.loaded
    if pages:
        t.add("[paged] block_table", reads=pages)
        t.add("[paged] load K_j, V_j", reads=2 * d * keys)
    t.add("write O_i, L_i", writes=Nq * d + Nq)
    return t.prediction()
