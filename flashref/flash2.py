"""FlashAttention-2 (Dao 2023, arXiv 2307.08691): Algorithm 1 (forward) and Algorithm 2 (backward).

Two changes to FlashAttention's forward (§3.1.1), both about non-matmul FLOPs:

1. the loops are swapped: the outer loop runs over row blocks Q_i, so Q_i is loaded once and the
   output block O_i stays on chip for the whole inner loop over K_j, V_j; it is written to HBM once;
2. O_i is kept *unscaled* and divided by ℓ_i once at the end (Alg.1 l.12) instead of after every
   tile, and only the log-sum-exp L = m + log ℓ is saved for the backward pass (not both m and ℓ).

Causal attention (§3.1.1): a block whose every key is later than every query is skipped whole (no
load, no FLOP), and the mask is applied only to blocks the diagonal crosses.

The backward (Algorithm 2) runs the K/V loop outside: each column block j owns dK_j, dV_j on chip
and writes them once; dQ_i is read, updated and written back for every (j, i), which is what the
GPU kernel's atomic adds on dQ do (flash-attention issue #815). D = rowsum(dO ∘ O) is computed in a
pre-pass and written to HBM (Alg.2 l.4), so the inner loop needs neither O_i nor a second dQ_i load.

Corrections to the printed pseudocode, each noted where the line is implemented:

* Alg.1 l.10 prints ``diag(e^{m^(j−1) − m^(j)})^{−1} O^(j−1)``; the factor must multiply, not divide:
  ``diag(e^{m^(j−1) − m^(j)}) O^(j−1)`` (issues #991, #2342, #1349).
* Alg.2 l.9 loads O_i, which nothing in the loop uses once D is precomputed; we do not load it.
* Alg.2 l.15 loads dQ_i again although l.9 already loaded it; we load it once per (j, i).
* The pseudocode has no softmax scale τ; we fold it into S = τ Q_i K_jᵀ and into dQ_i, dK_j.

Options: those of every algorithm (``scale``, ``causal``, ``mask``, ``dropout_p``, ``seed``,
``sram_size``, ``block_sizes``, ``dtype_bytes``) and ``bias``: a float array broadcastable to
``(..., Nq, Nk)`` added to the scaled scores. Unlike MASK, which is a function of the coordinates,
a bias is data: its tile B_ij is loaded from HBM for every visited tile (Br·Bc reads), so a
materialised bias costs the Θ(Nq·Nk) traffic that FlashAttention otherwise avoids.

The attention variants (:mod:`flashref.variants`) enter at the
lines marked in the code:

* ``[softcap]``, ``[alibi]``: on chip after S_ij = τ Q_i K_jᵀ (Alg.1 l.8, Alg.2 l.10), in
  flash-attn's order (softcap, then ALiBi, then bias, then MASK); the backward multiplies dS_ij
  by the softcap's derivative ``1 − tanh²`` (held on chip beside P_ij, dP_ij: one more Br×Bc
  tile). ALiBi's slopes are loaded once per row block (forward) or column block (backward).
* ``[window]``: tiles entirely outside causal ∧ window are skipped at both ends (l.6, l.8).
* ``[gqa]``: ``enable_gqa`` with ``gqa_packing=False`` (default, FlashAttention-2's schedule: each
  query head loads the tiles of its K/V head, and the backward sums dK, dV over each group in
  one more pass) or ``gqa_packing=True`` (FA3's PackGQA: the g query heads of a group share each
  K/V tile load; Q_i holds g·Br rows).
* Variable-length batches: :func:`forward_varlen`, :func:`backward_varlen` run each sequence as
  its own problem (its own grid, flash-attn's ``cu_seqlens``): the counts add, with no padding.
  A sequence may be empty (no queries); ALiBi slopes may be per sequence, ``(B, H)``.

Example::

    fwd = flash2.forward(Q, K, V, causal=True, block_sizes=(64, 64))
    bwd = flash2.backward(Q, K, V, fwd.O, dO, fwd.L, causal=True, block_sizes=(64, 64))
    print(fwd.io + bwd.io, fwd.flops)
"""

from __future__ import annotations

import dataclasses

import numpy as np

from . import blocks, variants
from .flops import FlopCounter, FlopReport
from .memory import IOReport, Memory
from .problem import (
    SHARED_OPTIONS,
    VARIANT_OPTIONS,
    Problem,
    _array,
    _slopes,
    check_finite,
    check_heads_and_values,
    check_like,
    check_masked_rows,
    check_options,
    overflow_checked,
)
from .results import BackwardResult, ForwardResult
from .softmax import finite_or_zero

__all__ = ["forward", "backward", "forward_varlen", "backward_varlen", "footprint_forward", "footprint_backward",
           "grid_forward", "grid_backward", "block_visited", "mask_needed", "OPTIONS", "check_cu_seqlens",
           "check_cu_seqlens_pair", "check_varlen_slopes", "refuse_varlen_scores"]

#: Options beyond the shared ones: the attention variants, and the GQA tile schedule.
OPTIONS = VARIANT_OPTIONS + ("gqa_packing",)


def block_visited(causal: bool, rows: tuple[int, int], cols: tuple[int, int]) -> bool:
    """False when causal and every key of the block comes after every query (j > i everywhere).

    The causal-only case of :func:`flashref.variants.tile_visited`, which the loops use (it adds the window).
    """
    return not causal or cols[0] <= rows[1] - 1


def mask_needed(causal: bool, rows: tuple[int, int], cols: tuple[int, int]) -> bool:
    """True when the causal diagonal crosses the block (some key j > some query i inside it)."""
    return causal and cols[1] - 1 > rows[0]


def footprint_forward(Br: int, Bc: int, d: int, bias: bool = False, slopes: int = 0) -> int:
    """Elements per head that Algorithm 1's inner loop holds on chip (equals the measured peak).

    Q_i, O_i (Br·d each), K_j, V_j (Bc·d each), S_ij (Br·Bc; P̃_ij takes its slot, as in
    registers), and three row vectors ℓ_i, m_i, m_i^new (Br each). With a bias, the fullest moment
    may instead be l.8, where its tile B_ij (Br·Bc) is live beside S_ij while m_i^new is not yet.
    With ALiBi, the ``slopes`` of the row block's heads stay on chip (1, or g packed). Packed GQA
    holds g·Br rows: pass ``Br = g·Br``.
    """
    after_l9 = 2 * Br * d + 2 * Bc * d + Br * Bc + 3 * Br
    at_l8_bias = 2 * Br * d + 2 * Bc * d + 2 * Br * Bc + 2 * Br
    return (max(after_l9, at_l8_bias) if bias else after_l9) + slopes


def footprint_backward(Br: int, Bc: int, d: int, softcap: bool = False, slopes: int = 0, dropout: bool = False) -> int:
    """Elements per head that Algorithm 2's inner loop holds on chip (equals the measured peak).

    K_j, V_j, dK_j, dV_j (Bc·d each), Q_i, dO_i, dQ_i (Br·d each), L_i, D_i (Br each) and two
    Br·Bc tiles: P_ij and dP_ij (dS_ij takes dP_ij's slot; a bias tile is freed once added to S_ij, so the
    peak is the same). Dropout's Z_ij is used by two statements (l.12 and l.13), so it is held between them
    (one more tile, as in Algorithm 4): beside P_ij and P_ij∘Z_ij at l.12, or P_ij and dP_ij at l.13.
    A softcap keeps another tile, its derivative 1 − tanh²; ALiBi keeps its ``slopes``.
    """
    tiles = 2 + (1 if softcap else 0) + (1 if dropout else 0)
    return 4 * Bc * d + 3 * Br * d + tiles * Br * Bc + 2 * Br + slopes


def _loop_grid(pb: Problem, footprint) -> blocks.Grid:
    """The tiling of the loop: blocks resolved for the query positions, rows ×g when GQA is packed."""
    G = variants.packed_group(pb, pb.gqa_packing)
    Br, Bc = blocks.resolve(pb, lambda Br, Bc, d: footprint(G * Br, Bc, d), packed=G)
    # Nq = 0 (a varlen sequence with keys but no queries: backward_varlen) resolves Br = 0; its Tr = 0 row
    # blocks may have any height, and a Grid's blocks are positive.
    return blocks.Grid.of(G * max(Br, 1), Bc, G * pb.Nq, pb.Nk)


def grid_forward(pb: Problem) -> blocks.Grid:
    """The tiling of Algorithm 1 for problem ``pb`` (Alg.1 l.1); ``Br`` is g·Br with packed GQA."""
    has_bias, G = pb.bias is not None, variants.packed_group(pb, pb.gqa_packing)
    slopes = G if pb.alibi_slopes is not None else 0
    return _loop_grid(pb, lambda Br, Bc, d: footprint_forward(Br, Bc, d, bias=has_bias, slopes=slopes))


def grid_backward(pb: Problem) -> blocks.Grid:
    """The tiling of Algorithm 2 for problem ``pb`` (Alg.2 l.1-2); ``Br`` is g·Br with packed GQA."""
    G = variants.packed_group(pb, pb.gqa_packing)
    slopes = G if pb.alibi_slopes is not None else 0
    softcap, dropout = pb.softcap is not None, pb.dropout_p > 0
    return _loop_grid(pb, lambda Br, Bc, d: footprint_backward(Br, Bc, d, softcap, slopes, dropout))


@overflow_checked("O")
def forward(Q, K, V, **opts) -> ForwardResult:
    """Algorithm 1 of FlashAttention-2, with scale τ, mask, bias, dropout, causal block skipping and
    the variants (GQA, window, ALiBi, softcap).

    Returns ``.O``, ``.L`` (row log-sum-exp of the scaled, masked scores; -inf for a fully masked
    row), ``.io``, ``.flops``, ``.events`` and ``.block_sizes = (Br, Bc)``.

    Low precision (``fp8``, ``p_fp8``, ``fp8_scaling``, ``incoherent``, ``incoherent_seed``,
    ``p_scale``, ``key_order``): FlashAttention-3's FP8 forward, run by :func:`flashref.lowp.forward`.
    """
    # The low-precision options run lowp's copy of this loop (its FP8 lines are marked there).
    # lowp builds on this module (grids, footprints), so it is imported here, when called, not above.
    from . import lowp

    if lowp.requested(opts):
        return lowp.forward(Q, K, V, **opts)
    opts = {k: v for k, v in opts.items() if k not in lowp.OPTIONS}  # FP8 options at their defaults: the plain loop
    # extra names the FP8 options too (dropped above): an unknown option's error lists every one forward takes
    pb0 = Problem.from_arrays(Q, K, V, "flash2.forward", OPTIONS + tuple(lowp.OPTIONS), **opts)
    # Alg.1 l.1: Tr = ⌈Nq/Br⌉ row blocks Q_i, Tc = ⌈Nk/Bc⌉ column blocks K_j, V_j.
    g = grid_forward(pb0)
    # [gqa] the loop's layout: K/V head h // g per query head (unpacked), or g query heads' rows
    # per K/V head (packed: row p is position p // g of head p mod g).
    pb = variants.loop_problem(pb0, pb0.gqa_packing)
    G = pb.q_group
    Nq, d = pb.Nq, pb.d
    mem = Memory(pb.sram_size, pb.dtype_bytes, pb.lead_shape)
    fc = FlopCounter()
    for name, X in (("Q", pb.Q), ("K", pb.K), ("V", pb.V)):
        mem.input(name, X)
    if pb.bias is not None:
        mem.input("bias", pb.bias)
    if pb.alibi_slopes is not None:
        mem.input("alibi_slopes", pb.alibi_slopes)  # (..., G): one slope per query head
    # Alg.1 l.2: O and L are only divided into blocks: each block is written exactly once (l.14,
    # l.15), so, unlike FlashAttention's l.2, nothing is initialised in HBM and nothing is counted.
    mem.output("O", (Nq, d), dtype=pb.dtype)
    mem.output("L", (Nq,), dtype=pb.dtype)

    for i in range(g.Tr):  # Alg.1 l.3
        rows = g.rows(i)
        # Alg.1 l.4: load Q_i from HBM to on-chip SRAM, once per row block.
        Q_i = mem.load("Q", rows=rows, as_="Q_i", line="Alg.1 l.4")  # (Br, d)
        # [alibi] load the slopes of this block's heads (1, or g packed), once per row block.
        slopes_i = variants.load_slopes(mem, pb, "Alg.1 l.4", as_="slopes_i")
        # Alg.1 l.5: on chip, O_i = 0 (Br×d), ℓ_i = 0 (Br), m_i = -inf (Br).
        O_i = mem.hold("O_i", np.zeros(Q_i.shape, dtype=pb.dtype))  # (Br, d), unscaled
        l_i = mem.hold("l_i", np.zeros(Q_i.shape[:-1], dtype=pb.dtype))  # (Br,)
        m_i = mem.hold("m_i", np.full(Q_i.shape[:-1], -np.inf, dtype=pb.dtype))  # (Br,)

        for j in range(g.Tc):  # Alg.1 l.6
            cols = g.cols(j)
            if not variants.tile_visited(pb, rows, cols):
                # Causal ∧ [window]: no query of the block may see a key of this one: skip it whole
                # (the blocks left of the window and, causal or right-bounded, right of it).
                continue
            # Alg.1 l.7: load K_j, V_j from HBM to on-chip SRAM.
            K_j = mem.load("K", rows=cols, as_="K_j", line="Alg.1 l.7")  # (Bc, d)
            V_j = mem.load("V", rows=cols, as_="V_j", line="Alg.1 l.7")  # (Bc, d)
            # Alg.1 l.8: S_ij = τ Q_i K_jᵀ (+ bias), masked where the diagonal crosses the block.
            S_ij, _ = variants.tile_scores(mem, fc, pb, Q_i, K_j, rows, cols, "Alg.1 l.8", slopes_i)  # (Br, Bc)
            # Alg.1 l.9: m_i^new = max(m_i, rowmax(S_ij)); P̃_ij = exp(S_ij − m_i^new);
            #            ℓ_i^new = e^{m_i − m_i^new} ℓ_i + rowsum(P̃_ij).
            m_new = mem.hold("m_new", fc.ew(np.maximum(m_i, fc.rowmax(S_ij)), "max"))  # (Br,)
            m_safe = finite_or_zero(m_new)  # a row with nothing to attend to yet: subtract 0, never NaN
            P_tilde_ij = mem.reuse("S_ij", "P_tilde_ij",
                                   fc.ew(np.exp(S_ij - m_safe[..., None]), "subtract", "exp"))  # (Br, Bc)
            # e^{m_i − m_i^new} is used twice (ℓ and O): it takes m_i's slot, m_i is not needed again.
            alpha = mem.reuse("m_i", "alpha", fc.ew(np.exp(m_i - m_safe), "subtract", "exp"))  # (Br,)
            l_i = mem.hold("l_i", fc.ew(alpha * l_i + fc.rowsum(P_tilde_ij), "multiply", "add"))  # (Br,)
            if pb.dropout_p > 0:
                # Dropout on the tile, regenerated from (seed, head, row, column): the same entries
                # as standard.forward drops. ℓ_i above sums P̃ *before* dropout, as in FA1's Alg.2.
                P_tilde_ij = mem.hold("P_tilde_ij", fc.ew(P_tilde_ij * pb.dropout_Z(rows, cols), "dropout"))
            # Alg.1 l.10: O_i = diag(e^{m_i − m_i^new}) O_i + P̃_ij V_j (the + is the matmul's accumulate).
            # (The paper prints diag(e^{m^(j−1) − m^(j)})^{−1}; the inverse is a typo: the old
            # accumulator must shrink by e^{m_old − m_new} ≤ 1. Issues #991, #2342, #1349.)
            O_i = mem.hold("O_i", fc.ew(alpha[..., None] * O_i, "rescale") + fc.matmul(P_tilde_ij, V_j))  # (Br, d)
            m_i = mem.reuse("alpha", "m_i", m_new)
            mem.free("K_j", "V_j", "P_tilde_ij", "m_new")
        # Alg.1 l.11: end for.
        # Alg.1 l.12: O_i = diag(ℓ_i)^{−1} O_i, once per row block (the first tweak). ℓ_i = 0 only
        # for a fully masked row, whose O_i is 0: divide by 1 there.
        O_i = mem.hold("O_i", fc.ew(O_i / np.where(l_i == 0, 1.0, l_i)[..., None], "divide"))
        # Alg.1 l.13: L_i = m_i + log(ℓ_i) (the second tweak); -inf for a fully masked row. It takes m_i's slot.
        L_i = mem.reuse("m_i", "L_i", fc.ew(np.where(l_i == 0, -np.inf, m_i + np.log(np.where(l_i == 0, 1.0, l_i))),
                                            "log", "add"))
        # Alg.1 l.14: write O_i to HBM; l.15: write L_i to HBM. Once each per row block.
        mem.store("O", O_i, rows=rows, line="Alg.1 l.14")  # Br*d writes
        mem.store("L", L_i, rows=rows, line="Alg.1 l.15")  # Br writes
        mem.free("Q_i", "O_i", "l_i", "L_i", "slopes_i")
    # Alg.1 l.17: return O and L (in Q's head layout).
    O, L = variants.unpack_rows(mem.result("O"), G), variants.unpack_vec(mem.result("L"), G)
    return ForwardResult(O=O, L=L, io=mem.report(), flops=fc.report(), events=mem.events,
                         block_sizes=(g.Br // G, g.Bc))


#: The largest spacing of a float at ``|L_i|`` that still carries ``log ℓ_i``: rounding L to it moves every recomputed
#: ``P_ij = exp(S_ij − L_i)`` by at most e^(2^-11) − 1, about 0.05%. float32 holds it for ``|L_i| < 16384``, float64
#: for ``|L_i| < 2^43``. Since L_i ≥ max_j S_ij, a float32 row goes past it once its largest score (or its every
#: score, where a huge finite mask sits on all of them) is about 16384 in magnitude; ordinary scores are tens.
L_SPACING = 2.0 ** -10
_L_SPACING_TEXT = f"2^{round(np.log2(L_SPACING))}"  # how the errors write it


def L_holds_log_l(L: np.ndarray) -> bool:
    """Whether every finite ``L_i`` is small enough in magnitude to carry ``log ℓ_i`` (:func:`_check_L_holds_log_l`
    says why it may not): a float's spacing at ``|L_i|`` at most ``L_SPACING``."""
    finite = np.abs(L[np.isfinite(L)])
    with np.errstate(over="ignore"):  # the spacing at the dtype's largest finite value is inf: it does not hold
        return not finite.size or bool(np.spacing(finite.max()) <= L_SPACING)


def _check_L_holds_log_l(L: np.ndarray, use: str = "P = exp(S − L) cannot be recomputed") -> None:
    """Refuse an ``L`` too large in magnitude to carry ``log ℓ``: the backward's ``P = exp(S − L)`` would be off
    (``use``: what cannot be done with it, for another caller: ring attention weighs its shards' outputs by L).

    ``L_i = m_i + log ℓ_i`` is one float. A row whose scores are huge (a key-padding mask written as
    ``finfo.min`` instead of -inf, fully masking a row; or one score of a few thousand times a normal one) has
    ``|m_i|`` so large that its spacing swamps part of ``log ℓ_i ≤ log Nk``, or all of it: L_i rounds towards m_i
    and every recomputed P_ij comes out off, by up to ℓ_i times (the forward is right: it divides by ℓ_i itself).
    FlashAttention-1 keeps m and ℓ apart and has no such limit. The threshold is a spacing of ``L_SPACING``, where
    rounding log ℓ moves P by up to 0.05%; at a spacing of 1/4 it would already move P by up to e^(1/8) − 1 = 13%,
    silently."""
    if not L_holds_log_l(L):
        largest = np.abs(L[np.isfinite(L)]).max()
        raise FloatingPointError(
            f"L: a row's log-sum-exp is {largest:.3g} in magnitude, too large for {L.dtype} to carry log ℓ "
            f"(its spacing exceeds {_L_SPACING_TEXT}), so {use}: that row's scores are huge. "
            # float64 is a cure only where its own spacing at |L_i| is fine (not for a float32 finfo.min mask)
            + ("Compute in float64 (Q.astype(np.float64)); where" if np.spacing(np.float64(largest)) <= L_SPACING
               and L.dtype != np.float64 else "Where")
            + " a mask was added as finfo.min, mask with -inf (or a boolean mask); or use flash1 or standard, "
            "which keep m and ℓ apart")


#: The overflow error's other cause, in the backward: P = exp(S − L) overflows where an L_i is below its row's scores.
_L_NOTE = "or L is not the forward's: an L_i below its row's largest score makes P = exp(S − L) overflow"

#: The error for an L_i = -inf on a row with a key to attend to (:func:`flashref.problem.check_masked_rows`).
_L_MASKED = ("L: L_i = -inf marks a row as fully masked, but causal, window, mask and bias leave it a key to "
             "attend to; the forward's L is -inf only on a row whose every key they hide (pass the forward's .L)")


@overflow_checked("dQ", "dK", "dV", note=_L_NOTE)
def backward(Q, K, V, O, dO, L, **opts) -> BackwardResult:
    """Algorithm 2 of FlashAttention-2 without its redundant loads, with τ, mask, bias, dropout, causal.

    ``O`` and ``L`` are the forward's ``.O`` and ``.L``; pass the same options as to the forward
    (``block_sizes`` may differ: L is a per-row statistic, independent of the tiling).
    Returns ``.dQ``, ``.dK``, ``.dV``, ``.io``, ``.flops``, ``.events``, ``.block_sizes``.

    ``bias_grad=True`` (a backward option; needs a ``bias``) also returns ``.dBias``, the gradient of the
    bias, ``(..., Nq, Nk)`` in Q's leading axes (sum it over the axes the bias was broadcast along): each
    tile's dS_ij before τ, written to HBM, and zeros for the tiles the loop skips, so ``Nq·Nk`` writes a
    head more (FlashAttention's Triton kernel with a bias did the same; FlashAttention-2 has no bias).
    """
    bias_grad = opts.pop("bias_grad", False)
    # extra names bias_grad too (taken above): an unknown option's error lists every one backward takes
    pb0 = Problem.from_arrays(Q, K, V, "flash2.backward", OPTIONS + ("bias_grad",), **opts)
    bias_grad = variants.check_bias_grad(bias_grad, pb0.bias)
    O = check_like(O, "O", pb0.Q.shape, pb0.dtype)
    dO = check_like(dO, "dO", pb0.Q.shape, pb0.dtype)
    L = check_like(L, "L", pb0.lead_shape + (pb0.Nq,), pb0.dtype)
    check_finite(O, "O")
    check_finite(dO, "dO")
    if np.isnan(L).any() or np.isposinf(L).any():
        raise ValueError("L: expected the forward's log-sum-exp (finite, or -inf for a fully masked row)")
    _check_L_holds_log_l(L)
    # Alg.2 l.1-2: Tr row blocks of Q, O, dO, L; Tc column blocks of K, V.
    g = grid_backward(pb0)
    # [gqa] the loop's layout, as in the forward; O, dO, L follow Q.
    pb = variants.loop_problem(pb0, pb0.gqa_packing)
    G = pb.q_group
    O, dO, L = variants.pack_rows(O, G), variants.pack_rows(dO, G), variants.pack_vec(L, G)
    Nq, Nk, d, lead = pb.Nq, pb.Nk, pb.d, pb.lead_shape
    # [gqa] unpacked: each query head writes its own dK_h, dV_h; a last pass sums each group.
    reduce_groups = pb0.group > 1 and not pb0.gqa_packing
    dK_name, dV_name = ("dK_h", "dV_h") if reduce_groups else ("dK", "dV")
    mem = Memory(pb.sram_size, pb.dtype_bytes, lead)
    fc = FlopCounter()
    for name, X in (("Q", pb.Q), ("K", pb.K), ("V", pb.V), ("O", O), ("dO", dO), ("L", L)):
        mem.input(name, X)
    if pb.bias is not None:
        mem.input("bias", pb.bias)
    if pb.alibi_slopes is not None:
        mem.input("alibi_slopes", pb.alibi_slopes)  # (..., G): one slope per query head

    # Alg.2 l.3: initialise dQ = 0 in HBM (counts Nq*d writes, rule 3); dK, dV are only divided
    # into blocks: each dK_j, dV_j is written once, at l.18.
    mem.init("dQ", (Nq, d), 0.0, dtype=pb.dtype, line="Alg.2 l.3")
    mem.output(dK_name, (Nk, d), dtype=pb.dtype)
    mem.output(dV_name, (Nk, d), dtype=pb.dtype)
    if bias_grad:
        mem.output("dBias", (Nq, Nk), dtype=pb.dtype)  # [bias] every tile written once (below)

    # Alg.2 l.4: pre-pass D = rowsum(dO ∘ O) ∈ R^Nq (the paper prints R^d), written to HBM.
    mem.output("D", (Nq,), dtype=pb.dtype)
    for i in range(g.Tr):
        rows = g.rows(i)
        dO_i = mem.load("dO", rows=rows, as_="dO_i", line="Alg.2 l.4")  # Br*d reads
        O_i = mem.load("O", rows=rows, as_="O_i", line="Alg.2 l.4")  # Br*d reads
        D_i = mem.hold("D_i", fc.rowsum(fc.ew(dO_i * O_i, "multiply")))  # (Br,)
        mem.store("D", D_i, rows=rows, line="Alg.2 l.4")  # Br writes
        mem.free("dO_i", "O_i", "D_i")

    for j in range(g.Tc):  # Alg.2 l.5
        cols = g.cols(j)
        # Causal ∧ [window]: row blocks none of whose queries may see a key of this column block
        # are skipped (causal: the first ones; a window: also the last ones).
        visited = [i for i in range(g.Tr) if variants.tile_visited(pb, g.rows(i), cols)]
        if not visited:
            # No query may see these keys: their gradients are zero. Skip the loads, write zeros.
            zeros = np.zeros(lead + (cols[1] - cols[0], d), dtype=pb.dtype)
            mem.store(dK_name, zeros, rows=cols, line="Alg.2 l.18")
            mem.store(dV_name, zeros, rows=cols, line="Alg.2 l.18")
            if bias_grad:  # [bias] and no gradient reaches the bias there either
                mem.store("dBias", np.zeros(lead + (Nq, cols[1] - cols[0]), dtype=pb.dtype), cols=cols, line="dBias")
            continue
        # Alg.2 l.6: load K_j, V_j from HBM to on-chip SRAM.
        K_j = mem.load("K", rows=cols, as_="K_j", line="Alg.2 l.6")  # (Bc, d)
        V_j = mem.load("V", rows=cols, as_="V_j", line="Alg.2 l.6")  # (Bc, d)
        # [alibi] load the slopes of this block's query heads (1, or g packed), once per column block.
        slopes_j = variants.load_slopes(mem, pb, "Alg.2 l.6")
        # Alg.2 l.7: initialise dK_j = 0, dV_j = 0 on SRAM.
        dK_j = mem.hold("dK_j", np.zeros(K_j.shape, dtype=pb.dtype))  # (Bc, d)
        dV_j = mem.hold("dV_j", np.zeros(V_j.shape, dtype=pb.dtype))  # (Bc, d)
        if bias_grad:  # [bias] the skipped row blocks' tiles of dBias are zero
            for i in sorted(set(range(g.Tr)) - set(visited)):
                rows = g.rows(i)
                mem.store("dBias", np.zeros(lead + (rows[1] - rows[0], cols[1] - cols[0]), dtype=pb.dtype),
                          rows=rows, cols=cols, line="dBias")

        for i in visited:  # Alg.2 l.8
            rows = g.rows(i)
            # Alg.2 l.9: load Q_i, dO_i, dQ_i, L_i, D_i. (The paper also loads O_i, which is not
            # needed once D_i is precomputed: we skip that redundant load.)
            Q_i = mem.load("Q", rows=rows, as_="Q_i", line="Alg.2 l.9")  # (Br, d)
            dO_i = mem.load("dO", rows=rows, as_="dO_i", line="Alg.2 l.9")  # (Br, d)
            dQ_i = mem.load("dQ", rows=rows, as_="dQ_i", line="Alg.2 l.9")  # (Br, d)
            L_i = mem.load("L", rows=rows, as_="L_i", line="Alg.2 l.9")  # (Br,)
            D_i = mem.load("D", rows=rows, as_="D_i", line="Alg.2 l.9")  # (Br,)
            # Alg.2 l.10: S_ij = τ Q_i K_jᵀ (+ bias), masked where needed.
            S_ij, dtanh_ij = variants.tile_scores(mem, fc, pb, Q_i, K_j, rows, cols, "Alg.2 l.10", slopes_j,
                                                  keep_dtanh=pb.softcap is not None)  # (Br, Bc)
            # L_i = -inf only on a fully masked row, whose S_ij is -inf throughout: refuse one that sees a key
            # (on chip, no IO), whose P_ij below would be exp(S_ij), unnormalised.
            check_masked_rows(np.isneginf(L_i), S_ij, _L_MASKED)
            # Alg.2 l.11: P_ij = exp(S_ij − L_i), in S_ij's slot. A fully masked row has L_i = -inf
            # and S_ij = -inf: subtract 0 there, so P_ij = 0 without NaN.
            P_ij = mem.reuse("S_ij", "P_ij",
                             fc.ew(np.exp(S_ij - finite_or_zero(L_i)[..., None]), "subtract", "exp"))  # (Br, Bc)
            # Dropout's Z_ij, regenerated from the seed (the entries the forward dropped), is used by l.12 and
            # l.13: named and held on chip from here until l.13 has used it (the counting rule; Alg.4 l.14).
            Z_ij = mem.hold("Z_ij", pb.dropout_Z(rows, cols)) if pb.dropout_p > 0 else None  # (Br, Bc)
            # Alg.2 l.12: dV_j ← dV_j + (P_ij ∘ Z_ij)ᵀ dO_i.
            P_dropped_ij = P_ij if Z_ij is None else mem.hold("P_dropped_ij", fc.ew(P_ij * Z_ij, "dropout"))
            dV_j = mem.hold("dV_j", dV_j + fc.matmul(P_dropped_ij.swapaxes(-1, -2), dO_i))  # (Bc, d)
            mem.free("P_dropped_ij")
            # Alg.2 l.13: dP_ij = dO_i V_jᵀ (and ∘ Z_ij: the gradient of dropout, in dP_ij's slot; Z_ij leaves).
            dP_ij = mem.hold("dP_ij", fc.matmul(dO_i, V_j.swapaxes(-1, -2)))  # (Br, Bc)
            if Z_ij is not None:
                dP_ij = mem.hold("dP_ij", fc.ew(dP_ij * Z_ij, "dropout"))
                mem.free("Z_ij")
            # Alg.2 l.14: dS_ij = P_ij ∘ (dP_ij − D_i), in dP_ij's slot, then τ (the scale's gradient).
            dS_ij = mem.reuse("dP_ij", "dS_ij", fc.ew(P_ij * (dP_ij - D_i[..., None]), "subtract", "multiply"))
            if bias_grad:
                # [bias] the bias is added after τ (and after softcap): its gradient is this tile, written to HBM
                mem.store("dBias", dS_ij, rows=rows, cols=cols, line="dBias")  # Br*Bc writes
            dS_ij = mem.hold("dS_ij", fc.ew(dS_ij * pb.scale, "scale"))
            if pb.softcap is not None:
                # [softcap] through c·tanh(S/c): dS_ij ← dS_ij ∘ (1 − tanh²), then the tile is freed.
                dS_ij = mem.hold("dS_ij", fc.ew(dS_ij * dtanh_ij, "softcap grad"))
                mem.free("dtanh_ij")
            # Alg.2 l.15: dQ_i ← dQ_i + dS_ij K_j, written back to HBM. (The paper loads dQ_i here a
            # second time; it is on chip since l.9.) On a GPU this read-add-write is an atomic add.
            dQ_i = mem.hold("dQ_i", dQ_i + fc.matmul(dS_ij, K_j))  # (Br, d)
            mem.store("dQ", dQ_i, rows=rows, line="Alg.2 l.15")  # Br*d writes
            # Alg.2 l.16: dK_j ← dK_j + dS_ijᵀ Q_i.
            dK_j = mem.hold("dK_j", dK_j + fc.matmul(dS_ij.swapaxes(-1, -2), Q_i))  # (Bc, d)
            mem.free("Q_i", "dO_i", "dQ_i", "L_i", "D_i", "P_ij", "dS_ij")
        # Alg.2 l.17: end for.
        # Alg.2 l.18: write dK_j, dV_j to HBM, once per column block.
        mem.store(dK_name, dK_j, rows=cols, line="Alg.2 l.18")  # Bc*d writes
        mem.store(dV_name, dV_j, rows=cols, line="Alg.2 l.18")  # Bc*d writes
        mem.free("K_j", "V_j", "dK_j", "dV_j", "slopes_j")
    io, events = mem.report(), list(mem.events)
    dQ = variants.unpack_rows(mem.result("dQ"), G)
    dK, dV = mem.result(dK_name), mem.result(dV_name)
    if reduce_groups:
        # [gqa] unpacked: dK = Σ over each group of the query heads' dK_h (and dV), one more pass.
        dK, dV, io, events = variants.reduce_groups(pb0, g, dK, dV, fc, io, events)
    dK, dV = variants.kv_gradients(pb0, dK, dV)  # [gqa] no query heads: zero gradients, nothing moved
    extra = {"dBias": variants.bias_gradient(pb0, mem, G)} if bias_grad else {}
    # Alg.2 l.20: return dQ, dK, dV.
    return BackwardResult(dQ=dQ, dK=dK, dV=dV, io=io, flops=fc.report(), events=events,
                          block_sizes=(g.Br // G, g.Bc), **extra)


# --------------------------------------------------------------------------- variable-length batches


def check_cu_seqlens(cu, name: str, total: int | None = None) -> np.ndarray:
    """``cu_seqlens``: ints ``0 = cu[0] ≤ cu[1] ≤ … ≤ cu[B] = total`` (flash-attn's convention).

    Two equal offsets are an empty sequence: flash-attn's varlen kernels take them (a batch unpadded
    from a padding mask may hold a sequence with no token), and :func:`check_cu_seqlens_pair` says
    which are defined. ``total`` (the packed length of Q or K) is checked when given;
    ``iomodel.predict_varlen`` has none.
    """
    a = np.asarray(cu)
    # a bool inside a list becomes an integer in the array: refused as a bool array is
    bools = isinstance(cu, (list, tuple)) and any(isinstance(x, (bool, np.bool_)) for x in cu)
    if a.ndim != 1 or a.size < 1 or not np.issubdtype(a.dtype, np.integer) or bools:
        raise TypeError(f"{name}: expected a 1-D integer array of B+1 offsets, got "
                        f"{'a bool among them' if bools else f'{a.dtype} of shape {a.shape}'}")
    a = a.astype(np.int64)  # before np.diff: unsigned differences wrap around instead of going negative
    if a[0] != 0:
        raise ValueError(f"{name}: expected to start at 0, got {int(a[0])}")
    if np.any(np.diff(a) < 0):
        raise ValueError(f"{name}: expected non-decreasing offsets (two equal ones are an empty sequence), "
                         f"got {a.tolist()}")
    if total is not None and a[-1] != total:
        raise ValueError(f"{name}: expected to end at the total length {total}, got {int(a[-1])}")
    return a


def check_cu_seqlens_pair(cu_seqlens_q, cu_seqlens_k, total_q: int | None = None,
                          total_k: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Both offsets (:func:`check_cu_seqlens`), B sequences each, none with queries but no keys.

    Sequence b has ``Nq_b = cu_q[b+1] − cu_q[b]`` queries and ``Nk_b`` keys. ``Nq_b = 0`` is defined
    whatever ``Nk_b``: no output row, and in the backward zero dK, dV for its keys (no query sees them).
    ``Nq_b > 0`` with ``Nk_b = 0`` is not: each row would be a softmax over no score (O = 0/0, ℓ = 0).
    A varlen batch is its sequences run one by one, and :func:`forward` refuses Nk = 0, so the batch
    refuses that sequence too, rather than pick a convention silently (flash-attn writes O = 0 and
    LSE = +inf there; a fully masked row here has L = -inf).
    """
    cq = check_cu_seqlens(cu_seqlens_q, "cu_seqlens_q", total_q)
    ck = check_cu_seqlens(cu_seqlens_k, "cu_seqlens_k", total_k)
    if cq.size != ck.size:
        raise ValueError(f"cu_seqlens_k: {ck.size - 1} sequences, cu_seqlens_q has {cq.size - 1}")
    nq, nk = np.diff(cq), np.diff(ck)
    no_keys = np.flatnonzero((nq > 0) & (nk == 0))
    if no_keys.size:
        b = int(no_keys[0])
        raise ValueError(f"cu_seqlens_k: sequence {b} has {int(nq[b])} queries but no keys (cu_seqlens_k[{b}] = "
                         f"cu_seqlens_k[{b + 1}] = {int(ck[b])}): attention over no key is undefined, and "
                         f"flash2.forward refuses Nk = 0 alike; a sequence may have no queries, not no keys")
    return cq, ck


def check_varlen_slopes(alibi_slopes, B: int, H: int) -> np.ndarray | None:
    """ALiBi slopes of a batch of B sequences of H query heads, as a ``(B, H)`` array (None: none).

    One slope per head, ``(H,)``, is every sequence's; one per sequence and head, ``(B, H)``, gives
    sequence b row b, as flash-attn's ``alibi_slopes`` of shape ``(batch_size, nheads)``. Any shape
    that broadcasts to (B, H) is taken, as ``decoding.forward_paged`` takes it; the values are
    checked by the rule every entry point applies (:func:`flashref.problem._slopes`).
    """
    if alibi_slopes is None:
        return None
    shape = np.shape(alibi_slopes)
    try:
        fits = np.broadcast_shapes(shape, (B, H)) == (B, H)
    except ValueError:
        fits = False
    if not fits:
        raise ValueError(f"alibi_slopes: expected one slope per head, (H,) = ({H},), or one per sequence and "
                         f"head, (B, H) = ({B}, {H}) as flash-attn's (batch_size, nheads); got shape {shape}")
    return _slopes(alibi_slopes, (B, H), from_shapes=False)


#: The score options a varlen batch refuses (:func:`refuse_varlen_scores`): its (Nq, Nk) differs per sequence.
VARLEN_REFUSED = ("mask", "bias")


def varlen_options(extra) -> set:
    """The options a varlen entry point takes, for its unknown-option error: the shared ones and ``extra``, less
    ``mask`` and ``bias`` (taken only as None, refused otherwise by :func:`refuse_varlen_scores`)."""
    return (set(SHARED_OPTIONS) | set(extra)) - set(VARLEN_REFUSED)


def refuse_varlen_scores(opts: dict, where: str) -> None:
    """A ``mask`` or ``bias`` is refused in a varlen batch (the simulator's and the closed form's one rule)."""
    for name in VARLEN_REFUSED:
        if opts.get(name) is not None:
            raise ValueError(f"{where}: {name} is not supported with variable-length batches "
                             f"(its (Nq, Nk) shape differs per sequence); use causal, window, alibi_slopes")


def _varlen_args(Q, K, V, cu_seqlens_q, cu_seqlens_k, opts, where, extra):
    """Check a packed batch once, as a whole, under the name of the function called (``where``).

    Returns ``Q, K, V`` as arrays (lists work, as in :func:`forward`), the checked offsets, ``pb``
    (the batch's heads, head dimension and options, checked from shapes with one query and one key:
    the lengths are each sequence's) and each sequence's options (its row of ``alibi_slopes``).

    The per-sequence calls check everything again on their slices. What no slice sees is checked
    here: V longer than K, and all of a sequence with no queries, which runs no call (its K, V rows
    too), so that a batch of only such sequences still refuses a bad option, head dimension or value.
    """
    # mask and bias are refused by name (a ValueError saying why); an unknown option's error lists the others
    refuse_varlen_scores(opts, where)
    check_options({k: v for k, v in opts.items() if k not in VARLEN_REFUSED}, varlen_options(extra), where)
    Q, K, V = _array(Q, "Q"), _array(K, "K"), _array(V, "V")
    if Q.ndim != 3 or K.ndim != 3 or V.ndim != 3:
        raise ValueError(f"{where}: expected Q (H, total_q, d) and K, V (H, total_k, d), got Q {Q.shape}, "
                         f"K {K.shape}, V {V.shape}")
    if V.shape[-2] != K.shape[-2]:
        raise ValueError(f"V: total length {V.shape[-2]} does not match K's {K.shape[-2]} (K and V pair up row "
                         f"by row)")
    cq, ck = check_cu_seqlens_pair(cu_seqlens_q, cu_seqlens_k, Q.shape[-2], K.shape[-2])
    (Hq, _, d), Hkv = Q.shape, K.shape[0]
    if d == 0:  # d alone: the lengths may be 0 here (a batch of empty sequences)
        raise ValueError(f"Q: expected non-empty d, got shape {Q.shape}")
    check_heads_and_values(Q, K, V, opts)  # Problem.from_arrays's checks, on the whole packing
    slopes = check_varlen_slopes(opts.get("alibi_slopes"), cq.size - 1, Hq)  # (B, Hq) or None
    # The option values, by the rules every entry point applies (only the slopes' presence is a field here).
    pb = Problem.from_shapes(where, extra, Nq=1, Nk=1, d=d, heads=Hq, kv_heads=Hkv,
                             **dict(opts, alibi_slopes=True if slopes is not None else None))
    seq_opts = [opts if slopes is None else dict(opts, alibi_slopes=slopes[b]) for b in range(cq.size - 1)]
    return Q, K, V, cq, ck, pb, seq_opts


def forward_varlen(Q, K, V, cu_seqlens_q, cu_seqlens_k, **opts) -> ForwardResult:
    """Algorithm 1 on a packed batch of sequences of different lengths (flash-attn's ``varlen``).

    Q ``(H, total_q, d)``, K and V ``(H, total_k, d)``; sequence b is rows ``cu[b]:cu[b+1]`` and
    attends only within itself. Each sequence is tiled on its own (Tr_b = ⌈Nq_b/Br⌉ work items
    per head), so the counts are the sums of the per-sequence counts, with no padding bytes;
    ragged last tiles count what they hold. Returns ``.O`` (H, total_q, d), ``.L`` (H, total_q),
    ``.io``, ``.flops``, ``.work_items`` (Σ_b H·Tr_b: query heads H, or K/V heads with packed GQA, whose
    thread block holds a group) and ``.seqlens`` (the (Nq_b, Nk_b) pairs). With dropout, sequence b draws the
    mask ``forward`` draws for it alone (the same seed, its rows and columns from 0), so that a varlen batch is
    exactly its sequences run one by one; two sequences of the same lengths then drop the same entries, where
    flash-attn's kernels draw one stream per (sequence, head).

    Empty sequences (two equal offsets), as flash-attn takes them: a sequence with no queries has no
    row of O or L, launches no work item and moves nothing, whatever its keys; one with queries but
    no keys is refused, as :func:`forward` refuses Nk = 0 (:func:`check_cu_seqlens_pair`).
    ``alibi_slopes``: ``(H,)`` for every sequence, or ``(B, H)``, row b for sequence b.
    """
    from . import lowp  # the FP8 options pass through to forward (lowp imports this module: imported here)

    Q, K, V, cq, ck, pb, seq_opts = _varlen_args(Q, K, V, cu_seqlens_q, cu_seqlens_k, opts, "flash2.forward_varlen",
                                                 OPTIONS + tuple(lowp.OPTIONS))
    fp8 = {k: v for k, v in opts.items() if k in lowp.OPTIONS}
    lp = lowp.check_options(pb, **fp8) if lowp.requested(fp8) else {}
    # O and L in forward's dtype: fp32 with FP8 storage (its accumulators), else Q, K, V's (at least float32).
    # The empty pieces give the result its shape when no sequence has a query.
    dt = (np.dtype(np.float32) if lp.get("qkv") is not None or lp.get("p") is not None
          else np.result_type(Q.dtype, K.dtype, V.dtype, np.float32))
    (H, _, d), items = Q.shape, 0
    Os, Ls = [np.zeros((H, 0, d), dtype=dt)], [np.zeros((H, 0), dtype=dt)]
    io, flops = IOReport(dtype_bytes=pb.dtype_bytes), FlopReport()
    for b, ob in enumerate(seq_opts):
        q, k = slice(cq[b], cq[b + 1]), slice(ck[b], ck[b + 1])
        if q.start == q.stop:
            # No queries: no row block (Tr_b = 0), so no work item and nothing loaded or written, whatever
            # its keys. flash-attn's kernel returns at once for such a block (m_block·Br ≥ seqlen_q).
            continue
        fwd = forward(Q[..., q, :], K[..., k, :], V[..., k, :], **ob)
        Os.append(fwd.O)
        Ls.append(fwd.L)
        io, flops = io + fwd.io, flops + fwd.flops
        # thread blocks: one per (head, row block), per K/V head when packed GQA holds a group's rows in one
        # (opts checked by forward above; with a group of 1, or no query heads, nothing is packed)
        packed = bool(opts.get("gqa_packing", False)) and Q.shape[0] > K.shape[0]
        items += (K if packed else Q).shape[0] * -(-(cq[b + 1] - cq[b]) // fwd.block_sizes[0])
    return ForwardResult(O=np.concatenate(Os, axis=-2), L=np.concatenate(Ls, axis=-1), io=io,
                         flops=flops, work_items=int(items),
                         seqlens=[(int(cq[b + 1] - cq[b]), int(ck[b + 1] - ck[b])) for b in range(cq.size - 1)])


def backward_varlen(Q, K, V, O, dO, L, cu_seqlens_q, cu_seqlens_k, **opts) -> BackwardResult:
    """Algorithm 2 on a packed batch (see :func:`forward_varlen`); ``O``, ``L`` from its forward.

    A sequence with neither queries nor keys has no row and moves nothing. One with keys but no
    queries has no row of dQ, and its keys' dK, dV are 0, written once (:func:`_backward_without_queries`).
    """
    Q, K, V, cq, ck, pb, seq_opts = _varlen_args(Q, K, V, cu_seqlens_q, cu_seqlens_k, opts,
                                                 "flash2.backward_varlen", OPTIONS)
    # The saved tensors follow Q's packing (their values are checked per sequence, by backward).
    O, dO, L = check_like(O, "O", Q.shape), check_like(dO, "dO", Q.shape), check_like(L, "L", Q.shape[:-1])
    dt = np.result_type(Q.dtype, K.dtype, V.dtype, np.float32)  # backward's dtype (Problem.from_arrays's rule)
    (Hq, _, d), Hkv = Q.shape, K.shape[0]
    # the empty pieces give the result its shape when no sequence has a row
    dQs = [np.zeros((Hq, 0, d), dtype=dt)]
    dKs, dVs = [np.zeros((Hkv, 0, d), dtype=dt)], [np.zeros((Hkv, 0, d), dtype=dt)]
    io, flops = IOReport(dtype_bytes=pb.dtype_bytes), FlopReport()
    for b, ob in enumerate(seq_opts):
        q, k = slice(cq[b], cq[b + 1]), slice(ck[b], ck[b + 1])
        if q.start < q.stop:
            bwd = backward(Q[..., q, :], K[..., k, :], V[..., k, :], O[..., q, :], dO[..., q, :], L[..., q], **ob)
        elif k.start < k.stop:
            bwd = _backward_without_queries(dataclasses.replace(pb, Nq=0, Nk=int(k.stop - k.start)), dt)
        else:
            continue  # no query and no key: no row of dQ, dK or dV, nothing to run
        dQs.append(bwd.dQ)
        dKs.append(bwd.dK)
        dVs.append(bwd.dV)
        io, flops = io + bwd.io, flops + bwd.flops
    return BackwardResult(dQ=np.concatenate(dQs, axis=-2), dK=np.concatenate(dKs, axis=-2),
                          dV=np.concatenate(dVs, axis=-2), io=io, flops=flops)


def _backward_without_queries(pb: Problem, dtype) -> BackwardResult:
    """Algorithm 2 on a varlen sequence with keys but no queries (``pb.Nq = 0 < pb.Nk``): Tr = 0.

    No query sees its keys, so every column block j is the one :func:`backward` skips: nothing is
    loaded, the l.8 loop is empty, and dK_j = dV_j = 0 are written once (Alg.2 l.18). They must be
    written: the gradients are allocated, not initialised (``mem.output``, flash-attn's
    ``torch.empty_like``), and flash-attn's backward kernel writes them ("this also covers the case
    where actual_seqlen_q == 0"). With unpacked GQA the query heads' zero dK_h, dV_h are then summed
    per group, as :func:`backward` sums any. Its closed form: ``iomodel.flash2.backward_without_queries``.
    """
    g = grid_backward(pb)  # Tr = 0 row blocks; Bc as backward resolves it for these keys
    G = variants.packed_group(pb, pb.gqa_packing)
    lead = pb.kv_lead if G > 1 else pb.lead_shape  # the loop heads: one per K/V head when packed GQA holds a group
    reduce_groups = pb.group > 1 and not pb.gqa_packing
    names = ("dK_h", "dV_h") if reduce_groups else ("dK", "dV")
    mem, fc = Memory(pb.sram_size, pb.dtype_bytes, lead), FlopCounter()
    for name in names:
        mem.output(name, (pb.Nk, pb.d), dtype=dtype)
    for j in range(g.Tc):  # Alg.2 l.5
        cols = g.cols(j)
        zeros = np.zeros(lead + (cols[1] - cols[0], pb.d), dtype=dtype)
        for name in names:
            mem.store(name, zeros, rows=cols, line="Alg.2 l.18")  # Bc*d writes each
    dK, dV = mem.result(names[0]), mem.result(names[1])
    io = mem.report()
    if reduce_groups:
        dK, dV, io, _ = variants.reduce_groups(pb, g, dK, dV, fc, io)
    if not pb.group:  # [gqa] no query heads: K/V's zero gradients, nothing moved (variants.kv_gradients)
        dK = dV = np.zeros(pb.kv_lead + (pb.Nk, pb.d), dtype=dtype)
    return BackwardResult(dQ=np.zeros(pb.lead_shape + (0, pb.d), dtype=dtype), dK=dK, dV=dV, io=io,
                          flops=fc.report())
