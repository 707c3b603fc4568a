"""Split-KV decoding (Flash-Decoding): a few queries against a long K/V cache, split for parallelism.

When a language model generates text, each step attends with one new query (per head) against
the whole key/value cache: ``Nq`` is 1 (or a few, with speculative decoding), ``Nk`` is the cache
length. FlashAttention parallelises over batch × heads (FlashAttention-2 also over the Tr query
blocks), so a decoding step offers only ``heads × 1`` work items: at batch 1 with 32 heads, 32
thread blocks on a GPU with 108 (A100) or 132 (H100) SMs, most of which sit idle while each busy
one streams its head's whole cache.

Split-KV decoding (Flash-Decoding; in the FlashAttention repository as ``flash_attn_with_kvcache``
with ``num_splits``, release 2.2) cuts the keys into ``num_splits`` contiguous chunks:

1. **Split pass** — each work item (head, split s) loads its chunk of K/V block by block and the
   queries Q, runs the online softmax over its chunk only, and writes a *partial* result to HBM:
   the normalised partial output ``O^(s)`` and its softmax statistics ``m^(s)`` (row max) and
   ``ℓ^(s)`` (row sum of ``exp(S − m^(s))``).
2. **Merge pass** — for each query row, read the partials and combine them exactly with the same
   rescaling FlashAttention uses between blocks (Alg.1 l.11-12)::

       m   = max_s m^(s)
       ℓ   = Σ_s e^{m^(s) − m} ℓ^(s)
       O   = Σ_s (e^{m^(s) − m} ℓ^(s) / ℓ) O^(s)

   which is softmax over the whole row, because each partial is a softmax over its chunk with its
   own normaliser. Nothing is approximated; the merge adds ``2·S·(Nq·d + 2·Nq)`` HBM traffic
   (partials written, then read) to the ``2·Nk·d`` of streaming the cache.

With ``num_splits = 1`` there is nothing to merge: the split writes O, ℓ, m directly (as the
FlashAttention kernel skips its combine kernel), and the algorithm runs FlashAttention-2's loop
order (Q in row blocks of Br, an unnormalised O_i divided once) but writes O, ℓ, m (2·Nq statistics,
where FlashAttention-2 writes L, Nq) and holds five row vectors, rescaling by FlashAttention's two factors.

Semantics are those of every flashref algorithm (``scale``, ``causal``, ``mask``, ``dropout_p``,
``seed``, ``sram_size``, ``block_sizes``, ``dtype_bytes``) and of the variants a decoding kernel
carries (``enable_gqa`` with or without ``gqa_packing``, ``window``, ``alibi_slopes``, ``softcap``; the
lines marked ``[gqa]``, ``[alibi]``, ``[softcap]``), so the result equals standard attention whatever
``num_splits`` is.
Causal, the window and ALiBi's distances are top-left aligned as everywhere in flashref (a decoding
query usually sees the whole cache: leave ``causal`` off or pass a ``mask``).

No key block is skipped: every split streams its whole chunk, and causal ∧ window, like ``mask``, is
the MASK function of the coordinates (no IO). So every score is computed, and one that overflows the
dtype raises even where causal ∧ window hides it, as in :func:`flashref.standard.forward`. A
sliding-window model keeps only its window in the cache (Mistral's rolling buffer), so the cache is
what a step streams. ``forward_paged``, FlashAttention-2's loop over pages, does skip the pages
outside causal ∧ window.

How many splits to use is a scheduling question (fill the SMs in whole waves), answered in
:mod:`flashref.parallelism` (:func:`~flashref.parallelism.choose_num_splits`,
:func:`~flashref.parallelism.wave_utilisation`); they are re-exported here.

Example::

    res = decoding.forward(q, K_cache, V_cache, num_splits=8)   # q: (heads, 1, d)
    res.O, res.io.total, res.work_items, res.parallelism
"""

from __future__ import annotations

import dataclasses

import numpy as np

from . import blocks, masks, variants
from .flops import FlopCounter
from .memory import IOReport, Memory
from .parallelism import DEFAULT_SMS, check_num_splits, choose_num_splits, resolve_num_splits
from .parallelism import wave_utilisation as parallelism
from .problem import (
    MAX_N,
    Problem,
    _array,
    _nonnegative_int,
    _slopes,
    check_finite,
    check_options,
    overflow_checked,
    positive_int,
)
from .results import ForwardResult
from .softmax import finite_or_zero

__all__ = ["forward", "footprint", "merge_footprint", "grid", "plan", "split_bounds", "choose_num_splits",
           "resolve_num_splits", "parallelism", "DEFAULT_SMS", "OPTIONS", "forward_paged", "footprint_paged",
           "paged_problem", "PAGED_OPTIONS", "check_cache_seqlens"]

#: Options beyond the shared ones: the number of splits, the SM count that picks a default, and the variants.
OPTIONS = ("num_splits", "sms", "enable_gqa", "gqa_packing", "window", "alibi_slopes", "softcap")


def footprint(Br: int, Bc: int, d: int, slopes: int = 0) -> int:
    """Peak on-chip elements per head of the split pass with full (Br, Bc) tiles.

    Q_i and the accumulator O_i (2·Br·d), K_j and V_j (2·Bc·d), the statistics m_i, ℓ_i, m̃_ij,
    ℓ̃_ij, m_i^new (5·Br; the factors e^{m_i − m_i^new} and e^{m̃_ij − m_i^new} take the slots of
    m_i and m̃_ij, as in Algorithm 1) and P̃_ij (Br·Bc). With dropout the same: P̃_ij ∘ Z_ij takes P̃_ij's
    slot and Z_ij, used by that one statement, is not held (as in FlashAttention's and FlashAttention-2's
    forwards). With ALiBi, the head's slope stays on chip (``slopes`` = 1). The merge pass holds less
    (:func:`merge_footprint`).
    """
    return 2 * Br * d + 2 * Bc * d + 5 * Br + Br * Bc + slopes


def merge_footprint(Br: int, d: int) -> int:
    """Peak on-chip elements per head of the merge pass: O, O^(s) (2·Br·d) and m, ℓ, m^(s), ℓ^(s) (4·Br)."""
    return 2 * Br * d + 4 * Br


def grid(pb: Problem) -> blocks.Grid:
    """The tiling of the split pass: the paper's rule fitted to :func:`footprint` and M.

    The merge pass holds less than the split pass (merge_footprint ≤ footprint), so the split decides.
    [gqa] Packed, a work item holds the g query heads of its group: ``Br`` is g·Br loop rows (as in
    :func:`flashref.flash2.grid_forward`), and the grid runs over g·Nq rows.
    """
    G = variants.packed_group(pb, pb.gqa_packing)
    Br, Bc = blocks.resolve(pb, lambda Br, Bc, d: footprint(G * Br, Bc, d, _slopes_held(pb)), packed=G)
    return blocks.Grid.of(G * Br, Bc, G * pb.Nq, pb.Nk)


def _slopes_held(pb: Problem) -> int:
    """[alibi] Slopes a work item holds on chip: its head's one (g packed), or none."""
    return 0 if pb.alibi_slopes is None else variants.packed_group(pb, pb.gqa_packing)


def loop_heads(pb: Problem) -> int:
    """The heads the split pass loops over: Q's (batch, head) pairs, or K/V's with packed GQA."""
    return pb.kv_heads if variants.packed_group(pb, pb.gqa_packing) > 1 else pb.heads


def plan(pb: Problem, num_splits, sms) -> tuple[blocks.Grid, int]:
    """The split pass's grid and its number of splits S, as :func:`forward` runs them.

    S is chosen from the grid (how many query blocks there are to fill the GPU), and each split then holds at most
    its own keys on chip: a ``Bc`` of explicit ``block_sizes`` larger than the longest split is never loaded whole.
    So explicit block sizes are checked against ``sram_size`` with the key tile a split really holds (checked with
    ``Bc`` clipped to Nk alone, a run that held 31 elements was refused as needing 85)."""
    given = pb.block_sizes is not None and pb.sram_size is not None
    g = grid(dataclasses.replace(pb, sram_size=None) if given else pb)
    S = resolve_num_splits(num_splits, max(loop_heads(pb), 1), g.Tr, g.Tc, pb.Nk, sms)
    if given:
        Bc = min(g.Bc, -(-pb.Nk // S))  # the longest split's first key tile
        need = footprint(g.Br, Bc, pb.d, _slopes_held(pb))
        if need > pb.sram_size:
            G = variants.packed_group(pb, pb.gqa_packing)
            rows = "" if G == 1 else f" ({g.Br} rows with the group's {G} query heads packed)"
            splits = f"{S} split{'s' if S != 1 else ''}"
            raise blocks.SRAMOverflowError(
                f"block_sizes=(Br={g.Br // G}, Bc={g.Bc}){rows} with {splits} (key tiles of at most {Bc}) need an "
                f"on-chip footprint of {need} elements per head, more than sram_size={pb.sram_size}")
    return g, S


def split_bounds(Nk: int, num_splits: int) -> list[tuple[int, int]]:
    """The key ranges ``[k0, k1)`` of the splits: contiguous, as equal as possible, none empty."""
    Nk = positive_int(Nk, "Nk")
    num_splits = check_num_splits(num_splits, Nk)  # more splits than keys would leave some empty
    return [(s * Nk // num_splits, (s + 1) * Nk // num_splits) for s in range(num_splits)]


@overflow_checked("O")
def forward(Q, K, V, **opts) -> ForwardResult:
    """Split-KV decoding: ``O = dropout(softmax(MASK(scale · Q Kᵀ))) V`` computed in ``num_splits`` chunks.

    ``num_splits``: positive int ≤ Nk, or ``None`` for :func:`choose_num_splits` on ``sms`` SMs
    (default :data:`DEFAULT_SMS`, an H100). Other options as every algorithm, and the variants:
    ``enable_gqa`` (K and V with fewer heads, PyTorch's convention), ``gqa_packing``, ``window``,
    ``alibi_slopes`` (broadcastable to the leading axes) and ``softcap``, as :func:`flashref.flash2.forward`
    takes them. With ``gqa_packing=True`` a work item holds the g query heads of a K/V head's group as
    g·Nq rows (FlashAttention-3's PackGQA; the grouped-query decoding kernels of flash-attn and vLLM):
    the cache is streamed once per K/V head instead of once per query head: g times less while the
    g·Nq rows fit as few row blocks as the Nq did (decoding's few queries), and that is most of a
    decoding step's traffic. With many queries the packed row blocks hold g times fewer positions.

    Returns ``.O``, ``.l``, ``.m`` (merged row statistics, as FlashAttention's), ``.io``,
    ``.flops``, ``.events``, the partials ``.O_partial`` (..., S, Nq, d), ``.m_partial`` and
    ``.l_partial`` (..., S, Nq), ``.num_splits``, ``.block_sizes``, ``.work_items`` (loop heads × Tr ×
    splits of the split pass: K/V's heads and g·Nq rows with packed GQA) and ``.parallelism``
    (:func:`parallelism` of those items).
    """
    # num_splits and sms are decoding's own options: checked by name here, by value below
    pb0 = Problem.from_arrays(Q, K, V, "decoding.forward", OPTIONS, **opts)
    num_splits, sms = opts.get("num_splits"), opts.get("sms")
    g, S = plan(pb0, num_splits, sms)
    sms = DEFAULT_SMS if sms is None else int(sms)
    # [gqa] Unpacked (flash2's default), query head h reads K/V head h // g: each query head's work items load their
    # group's K, V. Packed, a work item holds the g query heads of one K/V head as g·Nq rows (row p is position
    # p // g of head p mod g) and loads its K, V once. The slopes become (..., 1), or the group's (..., g).
    pb = variants.loop_problem(pb0, pb0.gqa_packing)
    G = pb.q_group  # loop rows a query position: g packed, else 1
    Nq, Nk, d = pb.Nq, pb.Nk, pb.d

    mem = Memory(pb.sram_size, pb.dtype_bytes, pb.lead_shape)
    fc = FlopCounter()
    for name, X in (("Q", pb.Q), ("K", pb.K), ("V", pb.V)):
        mem.input(name, X)  # inputs start in HBM at no cost (rule 1)
    if pb.alibi_slopes is not None:
        mem.input("alibi_slopes", pb.alibi_slopes)  # (..., G): one slope per query head of the loop head
    # Output buffers are allocated, not initialised (torch.empty): every element is written once
    # by a store below, so no initialisation writes are counted (rule 3 counts only initialised ones).
    # Partial s of query row r lives at row s·Nq + r of the (S·Nq)-row partial buffers.
    out, rows_out = ("O", Nq) if S == 1 else ("O_partial", S * Nq)
    mem.output(out, (rows_out, d), dtype=pb.dtype)
    for stat in ("m", "l"):
        mem.output(stat if S == 1 else stat + "_partial", (rows_out,), dtype=pb.dtype)

    # ---------------------------------------------------------------- split pass
    # Each (split s, query block i) is an independent work item: loop heads × Tr × S thread blocks.
    for s, (k0, k1) in enumerate(split_bounds(Nk, S)):
        for i in range(g.Tr):
            _split_item(mem, fc, pb, g.rows(i), (k0, k1), g.Bc, s, S)

    if S > 1:
        O_part = mem.result("O_partial").reshape(pb.lead_shape + (S, Nq, d))  # (..., S, Nq, d)
        m_part = mem.result("m_partial").reshape(pb.lead_shape + (S, Nq))  # (..., S, Nq)
        l_part = mem.result("l_partial").reshape(pb.lead_shape + (S, Nq))
        _merge_pass(mem, fc, pb, S, g)
    else:
        # one split: O, m, l are its partial, with a split axis of 1
        O_part = mem.result("O")[..., None, :, :]
        m_part, l_part = mem.result("m")[..., None, :], mem.result("l")[..., None, :]
    # [gqa] back to Q's heads (the packed rows of each split unpacked, its split axis moved out of the way)
    partials = {"O_partial": np.moveaxis(variants.unpack_rows(np.moveaxis(O_part, -3, 0), G), 0, -3),
                **{name: np.moveaxis(variants.unpack_vec(np.moveaxis(X, -2, 0), G), 0, -2)
                   for name, X in (("m_partial", m_part), ("l_partial", l_part))}}
    O = variants.unpack_rows(mem.result("O"), G)
    l, m = variants.unpack_vec(mem.result("l"), G), variants.unpack_vec(mem.result("m"), G)
    items = pb.heads * g.Tr * S  # loop heads; an empty batch (a zero leading axis) launches no thread block
    return ForwardResult(O=O, l=l, m=m, io=mem.report(), flops=fc.report(), events=mem.events,
                         num_splits=S, block_sizes=(g.Br // G, g.Bc), work_items=items,
                         parallelism=_parallelism(items, sms), **partials)


def _parallelism(items: int, sms: int) -> dict:
    """:func:`parallelism` of ``items`` work items, which refuses 0: no item runs no wave and uses no SM."""
    if items == 0:
        return {"work_items": 0, "sms": sms, "waves": 0, "busy_sms_first_wave": 0, "utilisation": 0.0}
    return parallelism(items, sms)


def _split_item(mem: Memory, fc: FlopCounter, pb: Problem, rows, keys, Bc: int, s: int, S: int) -> None:
    """One work item of the split pass: query block ``rows`` against the keys ``[k0, k1)`` of split s."""
    tau = pb.scale
    # Load Q_i from HBM to on-chip SRAM (every split loads the queries: S·Nq·d reads).
    Q_i = mem.load("Q", rows=rows, as_="Q_i", line="split: load Q_i")  # (Br, d)
    # [alibi] load the head's slope (the group's g, packed), as every split loads Q_i (S·Tr·g reads per loop head).
    slopes_i = (None if pb.alibi_slopes is None
                else mem.load("alibi_slopes", rows=(0, pb.q_group), as_="slopes_i", line="split: load Q_i"))
    # Initialise on chip the accumulator O_i = 0 and the statistics m_i = -inf, ℓ_i = 0.
    O_i = mem.hold("O_i", np.zeros(Q_i.shape, dtype=pb.dtype))  # (Br, d), unnormalised
    m_i = mem.hold("m_i", np.full(Q_i.shape[:-1] + (1,), -np.inf, dtype=pb.dtype))  # (Br, 1)
    l_i = mem.hold("l_i", np.zeros(Q_i.shape[:-1] + (1,), dtype=pb.dtype))  # (Br, 1)
    # for each K/V block of this split's chunk [k0, k1)
    for c0 in range(keys[0], keys[1], Bc):
        cols = (c0, min(c0 + Bc, keys[1]))
        # Load K_j, V_j from HBM to on-chip SRAM (each key of the cache once per query block).
        K_j = mem.load("K", rows=cols, as_="K_j", line="split: load K_j, V_j")  # (Bc, d)
        V_j = mem.load("V", rows=cols, as_="V_j", line="split: load K_j, V_j")  # (Bc, d)
        # On chip, S_ij = τ Q_i K_jᵀ.
        S_ij = mem.hold("S_ij", fc.scores(Q_i, K_j, tau))  # (Br, Bc)
        if pb.softcap is not None or slopes_i is not None:
            # [softcap] S_ij = c·tanh(S_ij/c); [alibi] S_ij −= slope·|i − j|: on chip, no IO.
            S_ij = mem.hold("S_ij", variants.modify_scores(fc, pb, S_ij, rows, cols, slopes_i)[0])
        # MASK: causal ∧ window ∧ mask, a function of the coordinates (no IO).
        attend = variants.tile_attend(pb, rows, cols)
        if attend is not None:
            S_ij = mem.hold("S_ij", fc.ew(masks.apply(S_ij, attend), "mask"))
        # On chip, m̃_ij = rowmax(S_ij), P̃_ij = exp(S_ij − m̃_ij), ℓ̃_ij = rowsum(P̃_ij)   (Alg.1 l.10)
        m_tilde_ij = mem.hold("m_tilde_ij", fc.rowmax(S_ij)[..., None])  # (Br, 1)
        P_tilde_ij = mem.reuse("S_ij", "P_tilde_ij",
                               fc.ew(np.exp(S_ij - finite_or_zero(m_tilde_ij)), "subtract", "exp"))  # (Br, Bc)
        l_tilde_ij = mem.hold("l_tilde_ij", fc.rowsum(P_tilde_ij)[..., None])  # (Br, 1)
        # On chip, m_i^new = max(m_i, m̃_ij), and the two rescaling factors   (Alg.1 l.11)
        m_new = mem.hold("m_new", fc.ew(np.maximum(m_i, m_tilde_ij), "max"))  # (Br, 1)
        alpha = mem.reuse("m_i", "alpha", fc.ew(np.exp(m_i - finite_or_zero(m_new)), "subtract", "exp"))
        beta = mem.reuse("m_tilde_ij", "beta", fc.ew(np.exp(m_tilde_ij - finite_or_zero(m_new)), "subtract", "exp"))
        # ℓ_i^new from the undropped P̃; O_i is unnormalised, so ℓ_i is not needed again: its slot.
        l_i = mem.hold("l_i", fc.ew(alpha * l_i + beta * l_tilde_ij, "multiply", "multiply", "add"))
        if pb.dropout_p > 0:
            # On chip, P̃_ij^dropped = P̃_ij ∘ Z_ij, in P̃_ij's slot: the same entries as every algorithm drops
            # (Z_ij, used by this one statement, is a register, as in FlashAttention's Alg.2 l.14).
            P_tilde_ij = mem.hold("P_tilde_ij", fc.ew(P_tilde_ij * pb.dropout_Z(rows, cols), "dropout"))
        # On chip, O_i ← e^{m_i − m_new} O_i + e^{m̃_ij − m_new} P̃_ij^dropped V_j
        # (unnormalised, as FlashAttention-2: divide by ℓ once, at the end of the chunk)
        O_i = mem.hold("O_i", fc.ew(alpha * O_i + beta * fc.matmul(P_tilde_ij, V_j), "rescale O_i", "scale P̃V",
                                    "add"))
        m_i = mem.reuse("alpha", "m_i", m_new)
        mem.free("K_j", "V_j", "beta", "P_tilde_ij", "l_tilde_ij", "m_new")
    # On chip, O^(s)_i = diag(ℓ_i)⁻¹ O_i (a row that saw no key: ℓ = 0, O stays 0).
    O_i = mem.hold("O_i", fc.ew(O_i / np.where(l_i == 0, 1.0, l_i), "divide"))
    if S == 1:
        # Nothing to merge: write O_i, ℓ_i, m_i to HBM as the final result.
        out_rows, suffix, line = rows, "", "split: write O, l, m"
    else:
        # Write the partial (O^(s)_i, m^(s)_i, ℓ^(s)_i) to HBM.
        out_rows, suffix, line = (s * pb.Nq + rows[0], s * pb.Nq + rows[1]), "_partial", "split: write partial O, m, l"
    mem.store("O" + suffix, O_i, rows=out_rows, line=line)  # Br·d writes
    mem.store("m" + suffix, m_i[..., 0], rows=out_rows, line=line)  # Br writes
    mem.store("l" + suffix, l_i[..., 0], rows=out_rows, line=line)  # Br writes
    mem.free("Q_i", "O_i", "m_i", "l_i", "slopes_i")


def _merge_pass(mem: Memory, fc: FlopCounter, pb: Problem, S: int, g: blocks.Grid) -> None:
    """Read the S partials of each query block and combine them exactly by log-sum-exp."""
    Nq, d = pb.Nq, pb.d
    mem.output("O", (Nq, d), dtype=pb.dtype)  # allocated, not initialised (see forward)
    mem.output("l", (Nq,), dtype=pb.dtype)
    mem.output("m", (Nq,), dtype=pb.dtype)
    # One work item per (head, query block): heads × Tr, each streaming its S partials.
    for i in range(g.Tr):
        rows = g.rows(i)
        n = rows[1] - rows[0]
        O_acc = mem.hold("O_acc", np.zeros(pb.lead_shape + (n, d), dtype=pb.dtype))  # (Br, d)
        m = mem.hold("m", np.full(pb.lead_shape + (n, 1), -np.inf, dtype=pb.dtype))  # (Br, 1)
        l = mem.hold("l", np.zeros(pb.lead_shape + (n, 1), dtype=pb.dtype))  # (Br, 1)
        for s in range(S):
            prow = (s * Nq + rows[0], s * Nq + rows[1])
            # Load the partial (O^(s)_i, m^(s)_i, ℓ^(s)_i) from HBM.
            O_s = mem.load("O_partial", rows=prow, as_="O_s", line="merge: load partial O, m, l")  # (Br, d)
            m_s = mem.load("m_partial", rows=prow, as_="m_s", line="merge: load partial O, m, l")[..., None]
            l_s = mem.load("l_partial", rows=prow, as_="l_s", line="merge: load partial O, m, l")[..., None]
            # On chip, m^new = max(m, m^(s)), ℓ^new = e^{m − m^new} ℓ + e^{m^(s) − m^new} ℓ^(s)
            # (Alg.1 l.11, the merge of two softmax states, softmax.merge), with the two weights kept:
            m_new = fc.ew(np.maximum(m, m_s), "max")  # (Br, 1)
            a = fc.ew(np.exp(m - finite_or_zero(m_new)) * l, "subtract", "exp", "multiply")  # what is merged so far
            b = fc.ew(np.exp(m_s - finite_or_zero(m_new)) * l_s, "subtract", "exp", "multiply")  # partial s
            l_new = fc.ew(a + b, "add")  # (Br, 1)
            # On chip, O ← diag(ℓ^new)⁻¹ (a O + b O^(s))   (Alg.1 l.12 with normalised partials)
            O_acc = mem.hold("O_acc", fc.ew((a * O_acc + b * O_s) / np.where(l_new == 0, 1.0, l_new),
                                            "multiply", "multiply", "add", "divide"))
            m, l = mem.hold("m", m_new), mem.hold("l", l_new)
            mem.free("O_s", "m_s", "l_s")
        # Write O_i, ℓ_i, m_i to HBM.
        mem.store("O", O_acc, rows=rows, line="merge: write O, l, m")  # Br·d writes
        mem.store("m", m[..., 0], rows=rows, line="merge: write O, l, m")  # Br writes
        mem.store("l", l[..., 0], rows=rows, line="merge: write O, l, m")  # Br writes
        mem.free("O_acc", "m", "l")


# --------------------------------------------------------------------------- a paged KV cache

#: Options of :func:`forward_paged` (the tile width is the page: no ``block_sizes``, no mask, no dropout).
PAGED_OPTIONS = ("scale", "causal", "window", "alibi_slopes", "softcap", "sram_size", "dtype_bytes")


def check_cache_seqlens(cache_seqlens, B: int | None = None) -> np.ndarray:
    """``cache_seqlens``: one non-negative integer length per sequence (``B`` of them, when known)."""
    want = f"integers of shape ({'B' if B is None else f'B={B}'},)"
    L = _int_array(cache_seqlens, "cache_seqlens", want)
    if L.ndim != 1 or (B is not None and L.shape[0] != B):
        raise TypeError(f"cache_seqlens: expected {want}, got {L.dtype} {L.shape}")
    # element by element as given: a bool inside a list would already be an integer in L
    items = cache_seqlens if isinstance(cache_seqlens, (list, tuple)) else L
    # a sequence is indexed with 32-bit integers (Problem's Nq, Nk bound); past int64, np.array would raise an
    # OverflowError that names nothing
    bound = (MAX_N, f"a length of at most {MAX_N} (32-bit indices)")
    lens = [_nonnegative_int(n, f"cache_seqlens[{b}]", bound) for b, n in enumerate(items)]
    return np.array(lens, dtype=np.int64)


def _int_array(x, name: str, want: str) -> np.ndarray:
    """``x`` as an array, a ragged list refused by ``name`` (numpy's own error names nothing)."""
    try:
        return np.asarray(x)
    except (ValueError, TypeError) as e:
        raise TypeError(f"{name}: expected {want}, got a ragged or non-numeric {type(x).__name__}") from e


def _check_paged(Q, K_pages, V_pages, block_table, cache_seqlens):
    Q, Kp, Vp = _array(Q, "Q"), _array(K_pages, "K_pages"), _array(V_pages, "V_pages")
    if Q.ndim != 4:
        raise ValueError(f"Q: expected shape (B, H, Nq, d), got {Q.shape}")
    B, H, Nq, d = Q.shape
    if Kp.ndim != 4 or Kp.shape[1] != H or Kp.shape[3] != d:
        raise ValueError(f"K_pages: expected shape (num_pages, H={H}, page_size, d={d}), got {Kp.shape}")
    if Vp.shape != Kp.shape:
        raise ValueError(f"V_pages: expected K_pages' shape {Kp.shape}, got {Vp.shape}")
    if Kp.shape[2] == 0:
        raise ValueError(f"K_pages: expected pages of at least one slot (page_size >= 1), got shape {Kp.shape}")
    check_finite(Q, "Q")  # the pages are checked below, where a sequence reads them
    num_pages, page_size = Kp.shape[0], Kp.shape[2]
    want = f"integers of shape (B={B}, max_pages)"
    bt, L = _int_array(block_table, "block_table", want), check_cache_seqlens(cache_seqlens, B)
    if bt.ndim != 2 or bt.shape[0] != B or not np.issubdtype(bt.dtype, np.integer):
        raise TypeError(f"block_table: expected {want}, got {bt.dtype} {bt.shape}")
    # a bool among the page ids of a list is refused as a bool array is (numpy made it an integer: page 0 or 1)
    if isinstance(block_table, (list, tuple)) and any(isinstance(v, (bool, np.bool_))
                                                      for v in np.asarray(block_table, dtype=object).ravel()):
        raise TypeError(f"block_table: expected {want}, got a bool among them")
    for b in range(B):
        if L[b] > bt.shape[1] * page_size:
            raise ValueError(f"cache_seqlens: sequence {b} has length {int(L[b])}, beyond its "
                             f"{bt.shape[1]} pages of {page_size} slots ({bt.shape[1] * page_size})")
        used = bt[b, : -(-int(L[b]) // page_size)]
        bad = np.flatnonzero((used < 0) | (used >= num_pages))
        if bad.size:
            p = int(bad[0])
            raise ValueError(f"block_table: entry [{b}, {p}] = {int(used[p])} is out of range "
                             f"[0, num_pages={num_pages})")
        # only the slots a sequence reads must be finite: a real cache's free pages and the slots past a
        # sequence's length hold whatever memory held (NaN too), and forward_paged never loads them
        for j, page in enumerate(used):
            slots = min(page_size, int(L[b]) - j * page_size)
            for a, name in ((Kp, "K_pages"), (Vp, "V_pages")):
                if not np.isfinite(a[page, :, :slots]).all():
                    raise ValueError(f"{name}: contains NaN or inf in page {int(page)}, slots 0-{slots - 1}, which "
                                     f"sequence {b} reads (block_table[{b}, {j}])")
    dt = np.result_type(Q.dtype, Kp.dtype, Vp.dtype, np.float32)
    return Q.astype(dt), Kp.astype(dt), Vp.astype(dt), bt.astype(np.int64), L


def paged_problem(Nq, Nk, d, H, page_size, where="decoding.forward_paged", /, **opts) -> tuple[Problem, int]:
    """The problem of one sequence of a paged batch, and Br: the largest that fits M with Bc = page_size.

    The options are checked against :data:`PAGED_OPTIONS` (no mask, dropout or block sizes: the tile is
    the page), for ``forward_paged`` and ``iomodel.predict_paged`` alike. The shapes and ``where`` are
    positional only, so that an option a user names ``Nq`` or ``where`` is refused as unknown, not a clash.
    """
    check_options(opts, PAGED_OPTIONS, where)
    page_size = positive_int(page_size, "page_size")
    pb = Problem.from_shapes(where, ("window", "alibi_slopes", "softcap"), Nq=Nq, Nk=max(Nk, 1), d=d, heads=H,
                             **opts)
    M = pb.sram_size if pb.sram_size is not None else blocks.default_sram_size(pb.dtype_bytes)
    slopes = 1 if pb.alibi_slopes is not None else 0
    # footprint_paged is linear in Br (fixed + Br·per_row): the largest Br that fits M, solved (a search down from Nq
    # took seconds at Nq = 10^7), no larger than Nq
    base = footprint_paged(0, page_size, pb.d)
    fixed, per_row = base + slopes, footprint_paged(1, page_size, pb.d) - base
    Br = min(pb.Nq, (M - fixed) // per_row) if M >= fixed else 0
    if Br >= 1:
        return pb, Br
    raise blocks.SRAMOverflowError(f"a page of {page_size} slots needs a footprint of "
                                   f"{footprint_paged(1, page_size, pb.d) + slopes} elements, more than sram_size={M}")


def footprint_paged(Br: int, page_size: int, d: int) -> int:
    """On-chip elements per head of :func:`forward_paged`: Q_i, O_i, one page of K and V, S_ij,
    ℓ_i, m_i, m_i^new and the page id (the ALiBi slope adds 1)."""
    return 2 * Br * d + 2 * page_size * d + Br * page_size + 3 * Br + 1


@overflow_checked("O")
def forward_paged(Q, K_pages, V_pages, block_table, cache_seqlens, **opts) -> ForwardResult:
    """Decoding against a paged KV cache (vLLM's PagedAttention layout, flash-attn's ``block_table``).

    Q ``(B, H, Nq, d)``; the cache lives in pages ``K_pages``, ``V_pages`` of shape
    ``(num_pages, H, page_size, d)``; sequence b's keys are the first ``cache_seqlens[b]`` slots of
    pages ``block_table[b, 0], block_table[b, 1], …``. The result equals :func:`forward` on the
    gathered cache (one split). It is FlashAttention-2's forward with one page as the K/V tile
    (Bc = page_size); the extra lines are marked ``[paged]``:

    * each visited page costs one block-table read per (head, row block) work item (1 element);
    * loads are predicated on the sequence length: the last page's unused slots (up to
      ``page_size − 1`` per sequence) are *not* read. They waste memory, not traffic: reported as
      ``.wasted_slots`` (slots allocated but unused, per head).

    Options: ``scale``, ``causal``, ``window``, ``alibi_slopes`` ((H,) or (B, H)), ``softcap``,
    ``sram_size``, ``dtype_bytes``. ``causal``, ``window`` and ``alibi_slopes`` are top-left aligned, as
    everywhere in flashref: with Nq > 1, query i sees the cache's keys ≤ i, not its last ones; and ALiBi's
    bias ``−slope·|i − j|`` puts query i at cache position i, so a decoding query (i = 0) penalises the
    newest keys most, the reverse of the recency bias an ALiBi model was trained with (flash-attn's
    kvcache aligns all three bottom-right, the query at the end of the cache). Returns ``.O``, ``.L``
    (B, H, Nq), ``.io``, ``.flops``, ``.block_sizes`` ((Br, page_size)), ``.wasted_slots``. No sequence
    (B = 0) or no head (H = 0): an empty result and an IO report of zeros.
    """
    Q, Kp, Vp, bt, lens = _check_paged(Q, K_pages, V_pages, block_table, cache_seqlens)
    B, H, Nq, d = Q.shape
    num_pages, ps = Kp.shape[0], Kp.shape[2]
    slopes_all = _slopes(opts.pop("alibi_slopes", None), (B, H), from_shapes=False)  # (B, H) or None
    # One problem for the batch: the options and Br do not depend on the sequence's length.
    pb0, Br = paged_problem(Nq, 1, d, H, ps, alibi_slopes=True if slopes_all is not None else None, **opts)
    # The cache as one HBM tensor per head: page p holds rows p·page_size … (p+1)·page_size − 1.
    K_cache = Kp.transpose(1, 0, 2, 3).reshape(H, num_pages * ps, d)  # (H, num_pages·ps, d)
    V_cache = Vp.transpose(1, 0, 2, 3).reshape(H, num_pages * ps, d)
    O, Lse = np.zeros(Q.shape, dtype=Q.dtype), np.full((B, H, Nq), -np.inf, dtype=Q.dtype)
    io, fc = IOReport(dtype_bytes=pb0.dtype_bytes), FlopCounter()  # an empty batch moves nothing
    for b in range(B):
        Nk = int(lens[b])
        pb = dataclasses.replace(pb0, Nk=Nk, lead_shape=(H,), kv_lead=(H,),
                                 alibi_slopes=None if slopes_all is None else slopes_all[b][:, None])
        mem = Memory(pb.sram_size, pb.dtype_bytes, (H,))
        mem.input("Q", Q[b])
        mem.input("K", K_cache)
        mem.input("V", V_cache)
        mem.input("block_table", np.broadcast_to(bt[b], (H, bt.shape[1])))  # every head's work item reads it
        if pb.alibi_slopes is not None:
            mem.input("alibi_slopes", pb.alibi_slopes)
        mem.output("O", (Nq, d), dtype=Q.dtype)
        mem.output("L", (Nq,), dtype=Q.dtype)
        for i in range(-(-Nq // Br)):
            rows = blocks.tile(i, Br, Nq)
            _paged_item(mem, fc, pb, rows, ps, bt[b, : -(-Nk // ps)])
        O[b], Lse[b] = mem.result("O"), mem.result("L")
        io = io + mem.report()
    wasted = int(sum(-(-int(n) // ps) * ps - int(n) for n in lens))
    return ForwardResult(O=O, L=Lse, io=io, flops=fc.report(), block_sizes=(Br, ps), wasted_slots=wasted)


def _paged_item(mem, fc, pb, rows, ps, table):
    """One work item (head, row block): FlashAttention-2's Algorithm 1 over the sequence's pages.

    ``table`` is the sequence's row of the block table (its used entries): the addresses the item reads.
    """
    Q_i = mem.load("Q", rows=rows, as_="Q_i", line="load Q_i")  # (Br, d)
    slopes_i = (None if pb.alibi_slopes is None
                else mem.load("alibi_slopes", rows=(0, 1), as_="slopes_i", line="load Q_i"))
    O_i = mem.hold("O_i", np.zeros(Q_i.shape, dtype=Q_i.dtype))  # (Br, d), unscaled
    l_i = mem.hold("l_i", np.zeros(Q_i.shape[:-1], dtype=Q_i.dtype))  # (Br,)
    m_i = mem.hold("m_i", np.full(Q_i.shape[:-1], -np.inf, dtype=Q_i.dtype))  # (Br,)
    for p in range(len(table)):
        cols = (p * ps, min((p + 1) * ps, pb.Nk))  # the logical keys of page p of the sequence
        if not variants.tile_visited(pb, rows, cols):
            continue  # causal ∧ window: the page is not needed, nor its block-table entry
        # [paged] read the block-table entry: which physical page holds logical page p (1 element).
        mem.load("block_table", rows=(p, p + 1), as_="page_id", line="[paged] block_table")
        page = int(table[p])  # the entry just read, the same for every head (known even with no heads)
        # [paged] load the page's used slots only (a predicated load: the last page may be partly empty).
        phys = (page * ps, page * ps + cols[1] - cols[0])
        K_j = mem.load("K", rows=phys, as_="K_j", line="[paged] load K_j, V_j")  # (≤ps, d)
        V_j = mem.load("V", rows=phys, as_="V_j", line="[paged] load K_j, V_j")  # (≤ps, d)
        S_ij = mem.hold("S_ij", fc.scores(Q_i, K_j, pb.scale))  # (Br, ≤ps)
        S_ij = mem.hold("S_ij", variants.modify_scores(fc, pb, S_ij, rows, cols, slopes_i)[0])
        attend = variants.tile_attend(pb, rows, cols)
        if attend is not None:
            S_ij = mem.hold("S_ij", fc.ew(masks.apply(S_ij, attend), "mask"))
        # Alg.1 l.9-10 of FlashAttention-2 (see flash2.forward).
        m_new = mem.hold("m_new", fc.ew(np.maximum(m_i, fc.rowmax(S_ij)), "max"))
        m_safe = finite_or_zero(m_new)
        P_ij = mem.reuse("S_ij", "P_tilde_ij", fc.ew(np.exp(S_ij - m_safe[..., None]), "subtract", "exp"))
        alpha = mem.reuse("m_i", "alpha", fc.ew(np.exp(m_i - m_safe), "subtract", "exp"))
        l_i = mem.hold("l_i", fc.ew(alpha * l_i + fc.rowsum(P_ij), "multiply", "add"))
        O_i = mem.hold("O_i", fc.ew(alpha[..., None] * O_i, "rescale") + fc.matmul(P_ij, V_j))
        m_i = mem.reuse("alpha", "m_i", m_new)
        mem.free("K_j", "V_j", "P_tilde_ij", "m_new", "page_id")
    O_i = mem.hold("O_i", fc.ew(O_i / np.where(l_i == 0, 1.0, l_i)[..., None], "divide"))
    L_i = np.where(l_i == 0, -np.inf, m_i + np.log(np.where(l_i == 0, 1.0, l_i)))
    L_i = mem.reuse("m_i", "L_i", fc.ew(L_i, "log", "add"))
    mem.store("O", O_i, rows=rows, line="write O_i, L_i")
    mem.store("L", L_i, rows=rows, line="write O_i, L_i")
    mem.free("Q_i", "O_i", "l_i", "L_i", "slopes_i")
