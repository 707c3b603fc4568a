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
FlashAttention kernel skips its combine kernel), and the algorithm is FlashAttention-2's forward
with the whole Q on chip.

Semantics are those of every flashref algorithm (``scale``, ``causal``, ``mask``, ``dropout_p``,
``seed``, ``sram_size``, ``block_sizes``, ``dtype_bytes``), so the result equals standard attention
whatever ``num_splits`` is. Causal is top-left aligned as everywhere in flashref (a decoding
query usually sees the whole cache: leave ``causal`` off or pass a ``mask``).

Example::

    res = decoding.forward(q, K_cache, V_cache, num_splits=8)   # q: (heads, 1, d)
    res.O, res.io.total, res.work_items, parallelism(heads=32, num_splits=8, sms=132)
"""

from __future__ import annotations

import math

import numpy as np

from . import blocks, masks, softmax
from . import parallelism as _par
from ._checks import attention_problem, positive_int
from .flops import FlopCounter
from .memory import Memory
from .results import ForwardResult
from .softmax import _finite_or_zero

__all__ = ["forward", "footprint", "merge_footprint", "block_sizes_for", "split_bounds", "choose_num_splits",
           "resolve_num_splits", "parallelism", "DEFAULT_SMS"]

# H100 SXM5 has 132 SMs (NVIDIA H100 whitepaper; also flashref.hardware.H100.sms).
DEFAULT_SMS = 132


def _T(X: np.ndarray) -> np.ndarray:
    return X.swapaxes(-1, -2)


def footprint(Br: int, Bc: int, d: int, dropout: bool = False) -> int:
    """Peak on-chip elements per head of the split pass with full (Br, Bc) tiles.

    Q_i and the accumulator O_i (2·Br·d), K_j and V_j (2·Bc·d), the statistics m_i, ℓ_i, m̃_ij,
    ℓ̃_ij (4·Br) and P̃_ij (Br·Bc), plus Z_ij and P̃_ij^dropped with dropout (2·Br·Bc more). The
    merge pass holds less (:func:`merge_footprint`).
    """
    return 2 * Br * d + 2 * Bc * d + 4 * Br + (3 if dropout else 1) * Br * Bc


def merge_footprint(Br: int, d: int) -> int:
    """Peak on-chip elements per head of the merge pass: O, O^(s) (2·Br·d) and m, ℓ, m^(s), ℓ^(s) (4·Br)."""
    return 2 * Br * d + 4 * Br


def block_sizes_for(pb) -> tuple[int, int]:
    """The (Br, Bc) the split pass runs with: the paper's rule fitted to :func:`footprint` and M."""
    has_dropout = pb.dropout_p > 0
    # The merge pass holds less than the split pass (merge_footprint ≤ footprint), so the split decides.
    return blocks.resolve(pb, lambda Br, Bc, d: footprint(Br, Bc, d, has_dropout))


def split_bounds(Nk: int, num_splits: int) -> list[tuple[int, int]]:
    """The key ranges ``[k0, k1)`` of the splits: contiguous, as equal as possible, none empty."""
    return [(s * Nk // num_splits, (s + 1) * Nk // num_splits) for s in range(num_splits)]



def parallelism(work_items: int, sms: int = DEFAULT_SMS) -> dict:
    """Waves and SM utilisation of ``work_items`` independent thread blocks on ``sms`` SMs.

    One work item per SM at a time (a FlashAttention thread block uses most of an SM's shared
    memory), so the items run in ``waves = ⌈items / sms⌉`` and the last wave may leave SMs idle:
    ``utilisation = items / (waves · sms)`` — wave quantisation (:mod:`flashref.parallelism`).
    """
    work_items, sms = positive_int(work_items, "work_items"), positive_int(sms, "sms")
    return {"work_items": work_items, "sms": sms, "waves": _par.waves(work_items, sms),
            "busy_sms_first_wave": min(work_items, sms), "utilisation": _par.efficiency(work_items, sms)}


def choose_num_splits(items: int, Tc: int, Nk: int, sms: int = DEFAULT_SMS, max_splits: int = 128) -> int:
    """A default ``num_splits``: the fewest splits whose SM utilisation is within 85% of the best.

    ``items`` is the number of work items without splitting (heads × query blocks). Splitting
    below one K/V block per split buys nothing, so at most ``Tc`` splits (and at most ``Nk``).
    Already a full wave or more: 1 split. This mirrors the idea of the FlashAttention repository's
    heuristic (fill the SMs in whole waves, prefer fewer splits because each adds merge traffic);
    the code is our own.
    """
    if items >= sms:
        return 1
    limit = max(1, min(Tc, Nk, max_splits))
    util = {s: parallelism(items * s, sms)["utilisation"] for s in range(1, limit + 1)}
    best = max(util.values())
    return min(s for s, u in util.items() if u >= 0.85 * best)


def resolve_num_splits(num_splits, heads: int, Tr: int, Tc: int, Nk: int, sms) -> int:
    """Check ``num_splits`` (a positive int ≤ Nk) or pick one with :func:`choose_num_splits`."""
    sms = DEFAULT_SMS if sms is None else positive_int(sms, "sms")
    if num_splits is None:
        return choose_num_splits(heads * Tr, Tc, Nk, sms)
    num_splits = positive_int(num_splits, "num_splits")
    if num_splits > Nk:
        raise ValueError(f"num_splits: expected at most Nk = {Nk} splits (each split needs a key), got {num_splits}")
    return num_splits


def forward(Q, K, V, *, num_splits=None, sms=None, **opts) -> ForwardResult:
    """Split-KV decoding: ``O = dropout(softmax(MASK(scale · Q Kᵀ))) V`` computed in ``num_splits`` chunks.

    ``num_splits``: positive int ≤ Nk, or ``None`` for :func:`choose_num_splits` on ``sms`` SMs
    (default :data:`DEFAULT_SMS`, an H100). Other options as every algorithm.

    Returns ``.O``, ``.l``, ``.m`` (merged row statistics, as FlashAttention's), ``.io``,
    ``.flops``, ``.events``, the partials ``.O_partial`` (..., S, Nq, d), ``.m_partial`` and
    ``.l_partial`` (..., S, Nq), ``.num_splits``, ``.block_sizes``, ``.work_items`` (heads × Tr ×
    splits of the split pass) and ``.parallelism`` (:func:`parallelism` of those items).
    """
    pb = attention_problem(Q, K, V, **opts)
    Nq, Nk, d, tau = pb.Nq, pb.Nk, pb.d, pb.scale
    heads = int(np.prod(pb.lead_shape, dtype=np.int64)) if pb.lead_shape else 1
    Br, Bc = block_sizes_for(pb)
    Tr, Tc = math.ceil(Nq / Br), math.ceil(Nk / Bc)
    S = resolve_num_splits(num_splits, heads, Tr, Tc, Nk, sms)
    sms = DEFAULT_SMS if sms is None else sms

    mem = Memory(pb.sram_size, pb.dtype_bytes, pb.lead_shape)
    fc = FlopCounter()
    for name, X in (("Q", pb.Q), ("K", pb.K), ("V", pb.V)):
        mem.put(name, X)  # inputs start in HBM at no cost (rule 1)
    # Output buffers are allocated, not initialised (torch.empty): every element is written once
    # by a store below, so no initialisation writes are counted (rule 3 counts only initialised ones).
    if S == 1:
        mem.put("O", np.zeros(pb.Q.shape, dtype=pb.dtype))
        mem.put("l", np.zeros(pb.lead_shape + (Nq,), dtype=pb.dtype))
        mem.put("m", np.zeros(pb.lead_shape + (Nq,), dtype=pb.dtype))
    else:
        # Partial s of query row r lives at row s·Nq + r of these (S·Nq)-row buffers.
        mem.put("O_partial", np.zeros(pb.lead_shape + (S * Nq, d), dtype=pb.dtype))
        mem.put("m_partial", np.zeros(pb.lead_shape + (S * Nq,), dtype=pb.dtype))
        mem.put("l_partial", np.zeros(pb.lead_shape + (S * Nq,), dtype=pb.dtype))

    # ---------------------------------------------------------------- split pass
    # Each (split s, query block i) is an independent work item: heads × Tr × S thread blocks.
    for s, (k0, k1) in enumerate(split_bounds(Nk, S)):
        for i in range(Tr):
            rows = blocks.tile(i, Br, Nq)
            # Load Q_i from HBM to on-chip SRAM (every split loads the queries: S·Nq·d reads).
            Q_i = mem.load("Q", rows=rows, as_="Q_i", line="split: load Q_i")  # (Br, d)
            # Initialise on chip the accumulator O_i = 0 and the statistics m_i = -inf, ℓ_i = 0.
            O_i = mem.hold("O_i", np.zeros(Q_i.shape, dtype=pb.dtype))  # (Br, d), unnormalised
            m_i = mem.hold("m_i", np.full(Q_i.shape[:-1] + (1,), -np.inf, dtype=pb.dtype))  # (Br, 1)
            l_i = mem.hold("l_i", np.zeros(Q_i.shape[:-1] + (1,), dtype=pb.dtype))  # (Br, 1)
            # for each K/V block of this split's chunk [k0, k1)
            for c0 in range(k0, k1, Bc):
                cols = (c0, min(c0 + Bc, k1))
                # Load K_j, V_j from HBM to on-chip SRAM (each key of the cache once per query block).
                K_j = mem.load("K", rows=cols, as_="K_j", line="split: load K_j, V_j")  # (Bc, d)
                V_j = mem.load("V", rows=cols, as_="V_j", line="split: load K_j, V_j")  # (Bc, d)
                # On chip, S_ij = τ Q_i K_jᵀ, then MASK (a function of the coordinates: no IO).
                S_ij = fc.matmul(Q_i, _T(K_j))  # (Br, Bc)
                fc.elementwise(S_ij)  # τ, folded into the matmul (rule 5)
                attend = masks.tile_mask(pb.mask, pb.causal, rows, cols)
                S_ij = masks.apply(S_ij * tau, attend)
                if attend is not None:
                    fc.elementwise(S_ij)
                # On chip, m̃_ij = rowmax(S_ij), P̃_ij = exp(S_ij − m̃_ij), ℓ̃_ij = rowsum(P̃_ij)   (Alg.1 l.10)
                m_tilde_ij = mem.hold("m_tilde_ij", np.max(S_ij, axis=-1, keepdims=True))  # (Br, 1)
                P_tilde_ij = mem.hold("P_tilde_ij", np.exp(S_ij - _finite_or_zero(m_tilde_ij)))  # (Br, Bc)
                l_tilde_ij = mem.hold("l_tilde_ij", P_tilde_ij.sum(axis=-1, keepdims=True))  # (Br, 1)
                fc.elementwise(S_ij, ops=4)  # max, subtract, exp, sum
                # On chip, m_i^new = max(m_i, m̃_ij), and the two rescaling factors   (Alg.1 l.11)
                m_new = np.maximum(m_i, m_tilde_ij)  # (Br, 1)
                alpha = np.exp(m_i - _finite_or_zero(m_new))  # e^{m_i − m_new}: 0 while m_i = -inf
                beta = np.exp(m_tilde_ij - _finite_or_zero(m_new))  # e^{m̃_ij − m_new}
                l_i = mem.hold("l_i", alpha * l_i + beta * l_tilde_ij)  # ℓ from the undropped P̃
                fc.elementwise(m_new, ops=9)
                if pb.dropout_p > 0:
                    # On chip, P̃_ij^dropped = dropout(P̃_ij): the same entries as every algorithm.
                    Z_ij = mem.hold("Z_ij", pb.dropout_Z(rows, cols))
                    P_tilde_ij = mem.hold("P_dropped_ij", P_tilde_ij * Z_ij)
                    fc.elementwise(P_tilde_ij)
                # On chip, O_i ← e^{m_i − m_new} O_i + e^{m̃_ij − m_new} P̃_ij^dropped V_j
                # (unnormalised, as FlashAttention-2: divide by ℓ once, at the end of the chunk)
                PV = fc.matmul(P_tilde_ij, V_j)  # (Br, d)
                O_i = mem.hold("O_i", alpha * O_i + beta * PV)
                fc.elementwise(O_i, ops=3)
                m_i = mem.hold("m_i", m_new)
                mem.free("K_j", "V_j", "m_tilde_ij", "P_tilde_ij", "l_tilde_ij", "Z_ij", "P_dropped_ij")
            # On chip, O^(s)_i = diag(ℓ_i)⁻¹ O_i (a row that saw no key: ℓ = 0, O stays 0).
            O_i = mem.hold("O_i", O_i / np.where(l_i == 0, 1.0, l_i))
            fc.elementwise(O_i)
            if S == 1:
                # Nothing to merge: write O_i, ℓ_i, m_i to HBM as the final result.
                out_rows = rows
            else:
                # Write the partial (O^(s)_i, m^(s)_i, ℓ^(s)_i) to HBM.
                out_rows = (s * Nq + rows[0], s * Nq + rows[1])
            prefix = "" if S == 1 else "_partial"
            line = "split: write O, l, m" if S == 1 else "split: write partial O, m, l"
            mem.store("O" + prefix, O_i, rows=out_rows, line=line)  # Br·d writes
            mem.store("m" + prefix, m_i[..., 0], rows=out_rows, line=line)  # Br writes
            mem.store("l" + prefix, l_i[..., 0], rows=out_rows, line=line)  # Br writes
            mem.free("Q_i", "O_i", "m_i", "l_i")

    if S > 1:
        O_part = mem.result("O_partial").reshape(pb.lead_shape + (S, Nq, d))  # (..., S, Nq, d)
        partials = {"O_partial": O_part,
                    "m_partial": mem.result("m_partial").reshape(pb.lead_shape + (S, Nq)),
                    "l_partial": mem.result("l_partial").reshape(pb.lead_shape + (S, Nq))}
        _merge_pass(mem, fc, pb, S, Br, Tr)
    else:
        partials = {"O_partial": mem.result("O")[..., None, :, :],
                    "m_partial": mem.result("m")[..., None, :], "l_partial": mem.result("l")[..., None, :]}
    items = heads * Tr * S
    return ForwardResult(O=mem.result("O"), l=mem.result("l"), m=mem.result("m"), io=mem.report(),
                         flops=fc.report(), events=mem.events, num_splits=S, block_sizes=(Br, Bc),
                         work_items=items, parallelism=parallelism(items, sms), **partials)


def _merge_pass(mem: Memory, fc: FlopCounter, pb, S: int, Br: int, Tr: int) -> None:
    """Read the S partials of each query block and combine them exactly by log-sum-exp."""
    Nq, d = pb.Nq, pb.d
    mem.put("O", np.zeros(pb.Q.shape, dtype=pb.dtype))  # allocated, not initialised (see above)
    mem.put("l", np.zeros(pb.lead_shape + (Nq,), dtype=pb.dtype))
    mem.put("m", np.zeros(pb.lead_shape + (Nq,), dtype=pb.dtype))
    # One work item per (head, query block): heads × Tr, each streaming its S partials.
    for i in range(Tr):
        rows = blocks.tile(i, Br, Nq)
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
            # (Alg.1 l.11; softmax.merge combines two softmax states exactly)
            m_new, l_new = softmax.merge(m, l, m_s, l_s)
            a = np.exp(m - _finite_or_zero(m_new)) * l  # weight of what is merged so far
            b = np.exp(m_s - _finite_or_zero(m_new)) * l_s  # weight of partial s
            # On chip, O ← diag(ℓ^new)⁻¹ (a O + b O^(s))   (Alg.1 l.12 with normalised partials)
            O_acc = mem.hold("O_acc", (a * O_acc + b * O_s) / np.where(l_new == 0, 1.0, l_new))
            fc.elementwise(O_acc, ops=4)
            fc.elementwise(m_new, ops=10)
            m, l = mem.hold("m", m_new), mem.hold("l", l_new)
            mem.free("O_s", "m_s", "l_s")
        # Write O_i, ℓ_i, m_i to HBM.
        mem.store("O", O_acc, rows=rows, line="merge: write O, l, m")  # Br·d writes
        mem.store("m", m[..., 0], rows=rows, line="merge: write O, l, m")  # Br writes
        mem.store("l", l[..., 0], rows=rows, line="merge: write O, l, m")  # Br writes
        mem.free("O_acc", "m", "l")
