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

Example::

    fwd = flash2.forward(Q, K, V, causal=True, block_sizes=(64, 64))
    bwd = flash2.backward(Q, K, V, fwd.O, dO, fwd.L, causal=True, block_sizes=(64, 64))
    print(fwd.io + bwd.io, fwd.flops)
"""

from __future__ import annotations

import numpy as np

from . import blocks, masks
from ._checks import attention_problem, check_like
from .flops import FlopCounter
from .memory import Memory
from .results import BackwardResult, ForwardResult
from .softmax import _finite_or_zero

__all__ = ["forward", "backward", "footprint_forward", "footprint_backward", "block_visited",
           "mask_needed"]


def _T(X: np.ndarray) -> np.ndarray:
    return X.swapaxes(-1, -2)


def block_visited(causal: bool, rows: tuple[int, int], cols: tuple[int, int]) -> bool:
    """False when causal and every key of the block comes after every query (j > i everywhere)."""
    return not causal or cols[0] <= rows[1] - 1


def mask_needed(causal: bool, rows: tuple[int, int], cols: tuple[int, int]) -> bool:
    """True when the causal diagonal crosses the block (some key j > some query i inside it)."""
    return causal and cols[1] - 1 > rows[0]


def footprint_forward(Br: int, Bc: int, d: int) -> int:
    """Elements per head that Algorithm 1's inner loop holds on chip (equals the measured peak).

    Q_i, O_i (Br·d each), K_j, V_j (Bc·d each), S_ij (Br·Bc; P̃_ij overwrites it in place, as in
    registers), and three row vectors ℓ_i, m_i, m_i^new (Br each).
    """
    return 2 * Br * d + 2 * Bc * d + Br * Bc + 3 * Br


def footprint_backward(Br: int, Bc: int, d: int) -> int:
    """Elements per head that Algorithm 2's inner loop holds on chip (equals the measured peak).

    K_j, V_j, dK_j, dV_j (Bc·d each), Q_i, dO_i, dQ_i (Br·d each), L_i, D_i (Br each) and two
    Br·Bc tiles: P_ij and dP_ij (dS_ij overwrites dP_ij; with dropout P_ij∘Z is a temporary that
    is freed before dP_ij exists, so the peak is the same).
    """
    return 4 * Bc * d + 3 * Br * d + 2 * Br * Bc + 2 * Br


def forward(Q, K, V, **opts) -> ForwardResult:
    """Algorithm 1 of FlashAttention-2, with scale τ, mask, dropout and causal block skipping.

    Returns ``.O``, ``.L`` (row log-sum-exp of the scaled, masked scores; -inf for a fully masked
    row), ``.io``, ``.flops``, ``.events`` and ``.block_sizes = (Br, Bc)``.

    Low precision (``fp8``, ``p_fp8``, ``fp8_scaling``, ``incoherent``, ``incoherent_seed``,
    ``p_scale``, ``key_order``): FlashAttention-3's FP8 forward, run by :func:`flashref.lowp.forward`.
    """
    # --- issue 17: the low-precision options run lowp's copy of this loop (FP8 lines marked there).
    from . import lowp
    if lowp.requested(opts):
        return lowp.forward(Q, K, V, **opts)
    opts = {k: v for k, v in opts.items() if k not in lowp.OPTIONS}  # explicit defaults: the plain loop
    # --- end issue 17
    pb = attention_problem(Q, K, V, **opts)
    Br, Bc = blocks.resolve(pb, footprint_forward)
    Nq, Nk, d, lead = pb.Nq, pb.Nk, pb.d, pb.lead_shape
    mem = Memory(pb.sram_size, pb.dtype_bytes, lead)
    fc = FlopCounter()
    for name, X in (("Q", pb.Q), ("K", pb.K), ("V", pb.V)):
        mem.put(name, X)

    # Alg.1 l.1: Tr = ⌈Nq/Br⌉ row blocks Q_i, Tc = ⌈Nk/Bc⌉ column blocks K_j, V_j.
    Tr, Tc = -(-Nq // Br), -(-Nk // Bc)
    # Alg.1 l.2: O and L are only divided into blocks: each block is written exactly once (l.14,
    # l.15), so, unlike FlashAttention's l.2, nothing is initialised in HBM and nothing is counted.
    mem.put("O", np.zeros(lead + (Nq, d), dtype=pb.dtype))
    mem.put("L", np.zeros(lead + (Nq,), dtype=pb.dtype))

    for i in range(Tr):  # Alg.1 l.3
        rows = blocks.tile(i, Br, Nq)
        # Alg.1 l.4: load Q_i from HBM to on-chip SRAM, once per row block.
        Q_i = mem.load("Q", rows=rows, as_="Q_i", line="Alg.1 l.4")  # (Br, d)
        # Alg.1 l.5: on chip, O_i = 0 (Br×d), ℓ_i = 0 (Br), m_i = -inf (Br).
        O_i = mem.hold("O_i", np.zeros(Q_i.shape, dtype=pb.dtype))  # (Br, d), unscaled
        l_i = mem.hold("l_i", np.zeros(Q_i.shape[:-1], dtype=pb.dtype))  # (Br,)
        m_i = mem.hold("m_i", np.full(Q_i.shape[:-1], -np.inf, dtype=pb.dtype))  # (Br,)

        for j in range(Tc):  # Alg.1 l.6
            cols = blocks.tile(j, Bc, Nk)
            if not block_visited(pb.causal, rows, cols):
                # Causal: every key of this block is later than every query: skip it whole, and
                # every later j too (their keys are later still).
                break
            # Alg.1 l.7: load K_j, V_j from HBM to on-chip SRAM.
            K_j = mem.load("K", rows=cols, as_="K_j", line="Alg.1 l.7")  # (Bc, d)
            V_j = mem.load("V", rows=cols, as_="V_j", line="Alg.1 l.7")  # (Bc, d)
            # Alg.1 l.8: S_ij = τ Q_i K_jᵀ (the scale folded into the matmul's epilogue, rule 5).
            S_ij = fc.matmul(Q_i, _T(K_j))  # (Br, Bc)
            fc.elementwise(S_ij)
            S_ij = mem.hold("S_ij", S_ij * pb.scale)
            # MASK only where needed: the causal part only on blocks the diagonal crosses.
            attend = masks.tile_mask(pb.mask, mask_needed(pb.causal, rows, cols), rows, cols)
            if attend is not None:
                S_ij = mem.hold("S_ij", masks.apply(S_ij, attend))
                fc.elementwise(S_ij)
            # Alg.1 l.9: m_i^new = max(m_i, rowmax(S_ij)); P̃_ij = exp(S_ij − m_i^new);
            #            ℓ_i^new = e^{m_i − m_i^new} ℓ_i + rowsum(P̃_ij).
            m_new = mem.hold("m_new", np.maximum(m_i, S_ij.max(axis=-1)))  # (Br,)
            fc.elementwise(S_ij)  # rowmax
            fc.elementwise(m_new)  # max with the old m_i
            m_safe = _finite_or_zero(m_new)  # a row with nothing to attend to yet: subtract 0, never NaN
            P_tilde = mem.hold("S_ij", np.exp(S_ij - m_safe[..., None]))  # (Br, Bc), overwrites S_ij
            fc.elementwise(P_tilde, ops=2)  # subtract, exp
            # e^{m_i − m_i^new}, 0 while m_i = -inf; it overwrites m_i, which is no longer needed.
            alpha = mem.hold("m_i", np.exp(m_i - m_safe))  # (Br,)
            fc.elementwise(alpha, ops=2)  # subtract, exp
            l_i = mem.hold("l_i", alpha * l_i + P_tilde.sum(axis=-1))  # (Br,)
            fc.elementwise(P_tilde)  # rowsum
            fc.elementwise(l_i, ops=2)  # multiply, add
            if pb.dropout_p > 0:
                # Dropout on the tile, regenerated from (seed, head, row, column): the same entries
                # as standard.forward drops. ℓ_i above sums P̃ *before* dropout, as in FA1's Alg.2.
                P_tilde = mem.hold("S_ij", P_tilde * pb.dropout_Z(rows, cols))
                fc.elementwise(P_tilde)
            # Alg.1 l.10: O_i = diag(e^{m_i − m_i^new}) O_i + P̃_ij V_j.
            # (The paper prints diag(e^{m^(j−1) − m^(j)})^{−1}; the inverse is a typo: the old
            # accumulator must shrink by e^{m_old − m_new} ≤ 1. Issues #991, #2342, #1349.)
            fc.elementwise(O_i)  # the diagonal rescale; the += is the matmul's accumulate
            O_i = mem.hold("O_i", alpha[..., None] * O_i + fc.matmul(P_tilde, V_j))  # (Br, d)
            m_i = mem.hold("m_i", m_new)
            mem.free("K_j", "V_j", "S_ij", "m_new")
        # Alg.1 l.11: end for.
        # Alg.1 l.12: O_i = diag(ℓ_i)^{−1} O_i, once per row block (the first tweak). ℓ_i = 0 only
        # for a fully masked row, whose O_i is 0: divide by 1 there.
        O_i = mem.hold("O_i", O_i / np.where(l_i == 0, 1.0, l_i)[..., None])
        fc.elementwise(O_i)
        # Alg.1 l.13: L_i = m_i + log(ℓ_i) (the second tweak); -inf for a fully masked row.
        L_i = np.where(l_i == 0, -np.inf, m_i + np.log(np.where(l_i == 0, 1.0, l_i)))
        fc.elementwise(L_i, ops=2)  # log, add
        mem.free("m_i")
        L_i = mem.hold("L_i", L_i)
        # Alg.1 l.14: write O_i to HBM; l.15: write L_i to HBM. Once each per row block.
        mem.store("O", O_i, rows=rows, line="Alg.1 l.14")  # Br*d writes
        mem.store("L", L_i, rows=rows, line="Alg.1 l.15")  # Br writes
        mem.free("Q_i", "O_i", "l_i", "L_i")
    # Alg.1 l.17: return O and L.
    return ForwardResult(O=mem.result("O"), L=mem.result("L"), io=mem.report(), flops=fc.report(),
                         events=mem.events, block_sizes=(Br, Bc))


def backward(Q, K, V, O, dO, L, **opts) -> BackwardResult:
    """Algorithm 2 of FlashAttention-2 without its redundant loads, with τ, mask, dropout, causal.

    ``O`` and ``L`` are the forward's ``.O`` and ``.L``; pass the same options as to the forward
    (``block_sizes`` may differ: L is a per-row statistic, independent of the tiling).
    Returns ``.dQ``, ``.dK``, ``.dV``, ``.io``, ``.flops``, ``.events``, ``.block_sizes``.
    """
    pb = attention_problem(Q, K, V, **opts)
    Nq, Nk, d, lead = pb.Nq, pb.Nk, pb.d, pb.lead_shape
    O = check_like(O, "O", pb.Q.shape, pb.dtype)
    dO = check_like(dO, "dO", pb.Q.shape, pb.dtype)
    L = check_like(L, "L", lead + (Nq,), pb.dtype)
    if np.isnan(L).any() or np.isposinf(L).any():
        raise ValueError("L: expected the forward's log-sum-exp (finite, or -inf for a fully masked row)")
    Br, Bc = blocks.resolve(pb, footprint_backward)
    mem = Memory(pb.sram_size, pb.dtype_bytes, lead)
    fc = FlopCounter()
    for name, X in (("Q", pb.Q), ("K", pb.K), ("V", pb.V), ("O", O), ("dO", dO), ("L", L)):
        mem.put(name, X)

    # Alg.2 l.1-2: Tr row blocks of Q, O, dO, L; Tc column blocks of K, V.
    Tr, Tc = -(-Nq // Br), -(-Nk // Bc)
    # Alg.2 l.3: initialise dQ = 0 in HBM (counts Nq*d writes, rule 3); dK, dV are only divided
    # into blocks: each dK_j, dV_j is written once, at l.18.
    mem.alloc("dQ", (Nq, d), 0.0, dtype=pb.dtype, line="Alg.2 l.3")
    mem.put("dK", np.zeros(lead + (Nk, d), dtype=pb.dtype))
    mem.put("dV", np.zeros(lead + (Nk, d), dtype=pb.dtype))

    # Alg.2 l.4: pre-pass D = rowsum(dO ∘ O) ∈ R^Nq (the paper prints R^d), written to HBM.
    mem.put("D", np.zeros(lead + (Nq,), dtype=pb.dtype))
    for i in range(Tr):
        rows = blocks.tile(i, Br, Nq)
        dO_i = mem.load("dO", rows=rows, as_="dO_i", line="Alg.2 l.4")  # Br*d reads
        O_i = mem.load("O", rows=rows, as_="O_i", line="Alg.2 l.4")  # Br*d reads
        D_i = mem.hold("D_i", (dO_i * O_i).sum(axis=-1))  # (Br,)
        fc.elementwise(O_i, ops=2)  # multiply, rowsum
        mem.store("D", D_i, rows=rows, line="Alg.2 l.4")  # Br writes
        mem.free("dO_i", "O_i", "D_i")

    for j in range(Tc):  # Alg.2 l.5
        cols = blocks.tile(j, Bc, Nk)
        # Causal: row blocks whose every query precedes every key of this column block are
        # skipped; they are the first ones, so the visited ones are i >= i_start.
        i_start = 0
        while i_start < Tr and not block_visited(pb.causal, blocks.tile(i_start, Br, Nq), cols):
            i_start += 1
        if i_start == Tr:
            # No query may see these keys: their gradients are zero. Skip the loads, write zeros.
            zeros = np.zeros(lead + (cols[1] - cols[0], d), dtype=pb.dtype)
            mem.store("dK", zeros, rows=cols, line="Alg.2 l.18")
            mem.store("dV", zeros, rows=cols, line="Alg.2 l.18")
            continue
        # Alg.2 l.6: load K_j, V_j from HBM to on-chip SRAM.
        K_j = mem.load("K", rows=cols, as_="K_j", line="Alg.2 l.6")  # (Bc, d)
        V_j = mem.load("V", rows=cols, as_="V_j", line="Alg.2 l.6")  # (Bc, d)
        # Alg.2 l.7: initialise dK_j = 0, dV_j = 0 on SRAM.
        dK_j = mem.hold("dK_j", np.zeros(K_j.shape, dtype=pb.dtype))  # (Bc, d)
        dV_j = mem.hold("dV_j", np.zeros(V_j.shape, dtype=pb.dtype))  # (Bc, d)

        for i in range(i_start, Tr):  # Alg.2 l.8
            rows = blocks.tile(i, Br, Nq)
            # Alg.2 l.9: load Q_i, dO_i, dQ_i, L_i, D_i. (The paper also loads O_i, which is not
            # needed once D_i is precomputed: we skip that redundant load.)
            Q_i = mem.load("Q", rows=rows, as_="Q_i", line="Alg.2 l.9")  # (Br, d)
            dO_i = mem.load("dO", rows=rows, as_="dO_i", line="Alg.2 l.9")  # (Br, d)
            dQ_i = mem.load("dQ", rows=rows, as_="dQ_i", line="Alg.2 l.9")  # (Br, d)
            L_i = mem.load("L", rows=rows, as_="L_i", line="Alg.2 l.9")  # (Br,)
            D_i = mem.load("D", rows=rows, as_="D_i", line="Alg.2 l.9")  # (Br,)
            # Alg.2 l.10: S_ij = τ Q_i K_jᵀ, masked where needed.
            S_ij = fc.matmul(Q_i, _T(K_j))  # (Br, Bc)
            fc.elementwise(S_ij)  # the scale
            S_ij = S_ij * pb.scale
            attend = masks.tile_mask(pb.mask, mask_needed(pb.causal, rows, cols), rows, cols)
            if attend is not None:
                S_ij = masks.apply(S_ij, attend)
                fc.elementwise(S_ij)
            # Alg.2 l.11: P_ij = exp(S_ij − L_i). A fully masked row has L_i = -inf and S_ij = -inf:
            # subtract 0 there, so P_ij = 0 without NaN.
            P_ij = mem.hold("P_ij", np.exp(S_ij - _finite_or_zero(L_i)[..., None]))  # (Br, Bc)
            fc.elementwise(P_ij, ops=2)  # subtract, exp
            Z_ij = pb.dropout_Z(rows, cols) if pb.dropout_p > 0 else None
            # Alg.2 l.12: dV_j ← dV_j + (P_ij ∘ Z_ij)ᵀ dO_i (Z regenerated from the seed).
            P_dropped = P_ij
            if Z_ij is not None:
                P_dropped = mem.hold("P_dropped", P_ij * Z_ij)
                fc.elementwise(P_dropped)
            dV_j = mem.hold("dV_j", dV_j + fc.matmul(_T(P_dropped), dO_i))  # (Bc, d)
            mem.free("P_dropped")
            # Alg.2 l.13: dP_ij = dO_i V_jᵀ (and ∘ Z_ij: the gradient of dropout).
            dP_ij = mem.hold("dP_ij", fc.matmul(dO_i, _T(V_j)))  # (Br, Bc)
            if Z_ij is not None:
                dP_ij = mem.hold("dP_ij", dP_ij * Z_ij)
                fc.elementwise(dP_ij)
            # Alg.2 l.14: dS_ij = P_ij ∘ (dP_ij − D_i), then τ (the scale's gradient), in place of dP.
            dS_ij = mem.hold("dP_ij", P_ij * (dP_ij - D_i[..., None]) * pb.scale)  # (Br, Bc)
            fc.elementwise(dS_ij, ops=3)  # subtract, multiply, scale
            # Alg.2 l.15: dQ_i ← dQ_i + dS_ij K_j, written back to HBM. (The paper loads dQ_i here a
            # second time; it is on chip since l.9.) On a GPU this read-add-write is an atomic add.
            dQ_i = mem.hold("dQ_i", dQ_i + fc.matmul(dS_ij, K_j))  # (Br, d)
            mem.store("dQ", dQ_i, rows=rows, line="Alg.2 l.15")  # Br*d writes
            # Alg.2 l.16: dK_j ← dK_j + dS_ijᵀ Q_i.
            dK_j = mem.hold("dK_j", dK_j + fc.matmul(_T(dS_ij), Q_i))  # (Bc, d)
            mem.free("Q_i", "dO_i", "dQ_i", "L_i", "D_i", "P_ij", "dP_ij")
        # Alg.2 l.17: end for.
        # Alg.2 l.18: write dK_j, dV_j to HBM, once per column block.
        mem.store("dK", dK_j, rows=cols, line="Alg.2 l.18")  # Bc*d writes
        mem.store("dV", dV_j, rows=cols, line="Alg.2 l.18")  # Bc*d writes
        mem.free("K_j", "V_j", "dK_j", "dV_j")
    # Alg.2 l.20: return dQ, dK, dV.
    return BackwardResult(dQ=mem.result("dQ"), dK=mem.result("dK"), dV=mem.result("dV"),
                          io=mem.report(), flops=fc.report(), events=mem.events, block_sizes=(Br, Bc))
