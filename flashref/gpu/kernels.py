"""Triton kernels: FlashAttention-2's Algorithm 1 (forward) and Algorithm 2 (backward) on a real GPU.

Each step carries the line of the paper's algorithm box it implements, as ``flashref/flash2.py``
does for the simulated memory (``# FA2 Alg.1 l.9 (flash2.py): ...``). What changes on hardware:

* one *program* (a thread block) runs one iteration of the outer loop: the forward's programs are
  the row blocks i (Alg.1 l.3 runs in parallel over i and over batch × heads, FA2 §3.2);
* "load to SRAM" is ``tl.load`` into registers/shared memory, chosen by the compiler; the
  pipelining (``num_stages``) issues the loads of K_{j+1}, V_{j+1} while block j is computed;
* softmax uses ``exp2``: log2(e) is folded into the scale, so S is kept in base-2 units and
  ``exp(x) = exp2(x · log2 e)`` costs one multiply less per element. The saved statistic is the
  base-2 log-sum-exp ``L2 = m + log2(ℓ)`` (= L · log2 e), used as is by the backward.
* causal attention (FA2 §3.1.1): blocks entirely above the diagonal are never visited, and the
  mask is applied only in the blocks the diagonal (or a ragged end) crosses: a second call of the
  same inner loop with ``MASKED=True``.
* the backward (Algorithm 2): a pre-pass computes D = rowsum(dO ∘ O) (Alg.2 l.4) and zeroes an
  fp32 dQ in HBM (l.3); one kernel over column blocks j owns dK_j, dV_j on chip (l.5–19) and adds
  each dS_ij K_j into dQ_i with fp32 atomic adds (l.15: every column block's program writes the
  same dQ_i, as in FA2's CUDA code, issue #815); a last pass scales dQ by τ and casts it. With
  ``deterministic=True`` (``dq_acc=None`` here) a second kernel over row blocks i keeps dQ_i on chip
  instead: it recomputes S and dP (7 matmuls per block pair instead of 5) but needs no atomics and no
  fp32 dQ buffer, and gives bit-reproducible gradients.

Ragged ends (N not a multiple of the block) are masked: out-of-range rows load as 0 and are
never stored; out-of-range keys get score -inf. ``EVEN`` (both lengths multiples of the blocks)
compiles the loads without bound masks.

Speed (figures/gpu/NOTES.md has every version's numbers on an H100):

* on Hopper, Q, K, V are loaded through TMA tensor descriptors (``TMA``; +6–34% over pointers);
* ``SPLIT``: one program runs two row blocks of BLOCK_M // 2 rows that share each K_j, V_j load, and
  issues both S matmuls before either softmax, so exp2 of one half can overlap the tensor cores'
  work on the other (d = 128 default);
* ``HEADS_FIRST``: causal d = 128 launches (heads, row blocks) with the heads on the fast grid axis,
  so every head's longest row blocks run first and the short ones fill the last wave;
* ``STAGGER``: non-causal dK/dV programs start their row loop at their own block and wrap around,
  so the atomic adds of one head's programs go to different dQ_i at any moment;
* tiles come from the ``FIXED`` table per head dimension (``FLASHREF_AUTOTUNE=1`` autotunes instead;
  ``FLASHREF_CONFIG_FWD=BM,BN,warps,stages`` overrides, as ``sweep.py`` does);
* ``LAZY`` (off; ``FLASHREF_LAZY=1``): FlashAttention-4's conditional rescaling, measured slower here.

Tried and dropped (numbers in NOTES.md): software-pipelining the S matmul one block ahead (2× slower:
Triton 3.6 waits for each wgmma to finish, ``wgmma.wait_group 0``, so nothing overlapped and the
second S tile only added register pressure), an exp2 polynomial on the FMA units for half of the
tile (FlashAttention-4; 0.93×), Triton's ``warp_specialize`` (no gain).
"""

from __future__ import annotations

import os

import triton
import triton.language as tl

LOG2E = 1.4426950408889634  # log2(e): exp(x) = exp2(x * LOG2E)
RESCALE_SLACK = tl.constexpr(8.0)  # lazy rescaling: P̃ may reach 2^8 before O_i, ℓ_i are rescaled

INTERPRET = os.environ.get("TRITON_INTERPRET", "0") == "1"


def lazy_rescale() -> bool:
    """Skip the O_i rescale while no row's max grew by more than 2^RESCALE_SLACK (``FLASHREF_LAZY=0``: never)."""
    return os.environ.get("FLASHREF_LAZY", "0") == "1"


def use_tma(device) -> bool:
    """Load Q, K, V through TMA descriptors (Hopper and later, not in the interpreter).

    ``FLASHREF_TMA=0`` forces plain pointer loads (both paths compute the same thing)."""
    if INTERPRET or os.environ.get("FLASHREF_TMA", "1") != "1" or device.type != "cuda":
        return False
    import torch
    try:
        from triton.tools.tensor_descriptor import TensorDescriptor  # noqa: F401
    except ImportError:
        return False
    return torch.cuda.get_device_capability(device)[0] >= 9


# --------------------------------------------------------------------------------------------
# forward (FlashAttention-2 Algorithm 1)
# --------------------------------------------------------------------------------------------

@triton.jit
def _load_kv(K_base, V_base, desc_k, desc_v, kv_row0, start_n, offs_n, offs_d, Nk,
             HEAD_D: tl.constexpr, EVEN: tl.constexpr, TMA: tl.constexpr):
    # FA2 Alg.1 l.7 (flash2.py): load K_j (as K_jᵀ, d × Bc) and V_j (Bc × d) from HBM.
    if TMA:  # the Hopper bulk tensor copy engine (TMA); rows past this head's Nk are masked later
        K_jT = tl.trans(desc_k.load([kv_row0 + start_n, 0]))  # (d, Bc)
        V_j = desc_v.load([kv_row0 + start_n, 0])  # (Bc, d)
    else:
        kT_ptrs = K_base + offs_n[None, :] * HEAD_D + offs_d[:, None]  # (d, Bc)
        v_ptrs = V_base + offs_n[:, None] * HEAD_D + offs_d[None, :]  # (Bc, d)
        if EVEN:
            K_jT = tl.load(kT_ptrs)
            V_j = tl.load(v_ptrs)
        else:
            K_jT = tl.load(kT_ptrs, mask=offs_n[None, :] < Nk, other=0.0)
            V_j = tl.load(v_ptrs, mask=offs_n[:, None] < Nk, other=0.0)
    return K_jT, V_j


@triton.jit
def _mask_scores(S_ij, offs_m, offs_n, Nk, CAUSAL: tl.constexpr):
    # only in the blocks the diagonal or a ragged end crosses (FA2 §3.1.1)
    attend = offs_n[None, :] < Nk
    if CAUSAL:  # top-left: query i sees keys j <= i
        attend = attend & (offs_m[:, None] >= offs_n[None, :])
    return tl.where(attend, S_ij, float("-inf"))


@triton.jit
def _online_softmax(S_ij, m_i, l_i, acc, V_j, qk_scale, LAZY: tl.constexpr, RESCALE_SLACK: tl.constexpr):
    # FA2 Alg.1 l.9 (flash2.py): m_i^new = max(m_i, rowmax(S_ij)), in base 2 (τ·log2 e applied here,
    # and below fused with the max subtraction into one FMA per element) ...
    m_new = tl.maximum(m_i, tl.max(S_ij, 1) * qk_scale)  # (Br,)
    if LAZY:
        # ... rescaled lazily (FlashAttention-4's trick): keep the old m_i unless some row's max grew
        # by more than RESCALE_SLACK (log2 units), so P̃ <= 2^RESCALE_SLACK and the O_i, ℓ_i rescale
        # of l.9-10 is skipped for the whole block in most iterations. Exact: l.12-13 divide by the
        # ℓ_i that belongs to the m_i kept. (Measured slower on an H100 at d=128: off by default.)
        if tl.max(m_new - m_i, 0) > RESCALE_SLACK:
            alpha = tl.math.exp2(m_i - m_new)
            acc = acc * alpha[:, None]
            l_i = l_i * alpha
            m_i = m_new
    else:
        alpha = tl.math.exp2(m_i - m_new)  # e^{m_i − m_i^new}, (Br,)
        acc = acc * alpha[:, None]  # l.10's diag(e^{m_i − m_i^new}) O_i (the printed ^{-1} is a typo)
        l_i = l_i * alpha  # l.9's e^{m_i − m_i^new} ℓ_i
        m_i = m_new
    # FA2 Alg.1 l.9 (flash2.py): P̃_ij = exp(S_ij − m_i^new); ℓ_i^new = e^{..} ℓ_i + rowsum(P̃_ij).
    P_tilde_ij = tl.math.exp2(S_ij * qk_scale - m_i[:, None])  # (Br, Bc)
    l_i = l_i + tl.sum(P_tilde_ij, 1)
    # FA2 Alg.1 l.10 (flash2.py): O_i = diag(e^{m_i − m_i^new}) O_i + P̃_ij V_j (un-scaled O).
    acc = tl.dot(P_tilde_ij.to(V_j.dtype), V_j, acc)  # (Br, d) fp32
    return m_i, l_i, acc


@triton.jit
def _fwd_inner(acc, l_i, m_i, Q_i, K_base, V_base, desc_k, desc_v, kv_row0, offs_m, offs_d, j_lo, j_hi, Nk,
               qk_scale, BLOCK_N: tl.constexpr, HEAD_D: tl.constexpr, CAUSAL: tl.constexpr,
               MASKED: tl.constexpr, EVEN: tl.constexpr, TMA: tl.constexpr, LAZY: tl.constexpr,
               RESCALE_SLACK: tl.constexpr):
    offs_n0 = tl.arange(0, BLOCK_N)
    for start_n in range(j_lo, j_hi, BLOCK_N):  # FA2 Alg.1 l.6 (flash2.py): for 1 <= j <= Tc
        start_n = tl.multiple_of(start_n, BLOCK_N)
        offs_n = start_n + offs_n0
        # FA2 Alg.1 l.7 (flash2.py): load K_j, V_j.
        K_jT, V_j = _load_kv(K_base, V_base, desc_k, desc_v, kv_row0, start_n, offs_n, offs_d, Nk, HEAD_D, EVEN, TMA)
        # FA2 Alg.1 l.8 (flash2.py): S_ij = τ Q_i K_jᵀ (τ applied in l.9's FMA).
        S_ij = tl.dot(Q_i, K_jT)  # (Br, Bc) fp32, unscaled
        if MASKED:
            S_ij = _mask_scores(S_ij, offs_m, offs_n, Nk, CAUSAL)
        # FA2 Alg.1 l.9-10 (flash2.py): online softmax and O_i update.
        m_i, l_i, acc = _online_softmax(S_ij, m_i, l_i, acc, V_j, qk_scale, LAZY, RESCALE_SLACK)
    return acc, l_i, m_i


@triton.jit
def _fwd_inner_split(acc0, l0, m0, Q0, acc1, l1, m1, Q1, K_base, V_base, desc_k, desc_v, kv_row0, offs_m0,
                     offs_m1, offs_d, j_lo, j_hi, Nk, qk_scale, BLOCK_N: tl.constexpr, HEAD_D: tl.constexpr,
                     CAUSAL: tl.constexpr, MASKED: tl.constexpr, EVEN: tl.constexpr, TMA: tl.constexpr,
                     LAZY: tl.constexpr, RESCALE_SLACK: tl.constexpr):
    # The same loop for two row blocks Q0, Q1 sharing each K_j, V_j. Both S matmuls are issued
    # before either softmax, so the tensor cores work on one half while the other's exp2 runs
    # (FlashAttention-3's intra-warpgroup overlap, left to Triton's scheduler).
    offs_n0 = tl.arange(0, BLOCK_N)
    for start_n in range(j_lo, j_hi, BLOCK_N):  # FA2 Alg.1 l.6 (flash2.py)
        start_n = tl.multiple_of(start_n, BLOCK_N)
        offs_n = start_n + offs_n0
        K_jT, V_j = _load_kv(K_base, V_base, desc_k, desc_v, kv_row0, start_n, offs_n, offs_d, Nk, HEAD_D, EVEN, TMA)
        S0 = tl.dot(Q0, K_jT)  # FA2 Alg.1 l.8, first half
        S1 = tl.dot(Q1, K_jT)  # FA2 Alg.1 l.8, second half
        if MASKED:
            S0 = _mask_scores(S0, offs_m0, offs_n, Nk, CAUSAL)
            S1 = _mask_scores(S1, offs_m1, offs_n, Nk, CAUSAL)
        m0, l0, acc0 = _online_softmax(S0, m0, l0, acc0, V_j, qk_scale, LAZY, RESCALE_SLACK)  # l.9-10
        m1, l1, acc1 = _online_softmax(S1, m1, l1, acc1, V_j, qk_scale, LAZY, RESCALE_SLACK)  # l.9-10
    return acc0, l0, m0, acc1, l1, m1


@triton.jit
def _load_q(Q_base, desc_q, q_row0, offs_m, offs_d, Nq, HEAD_D: tl.constexpr, EVEN: tl.constexpr,
            TMA: tl.constexpr):
    # FA2 Alg.1 l.4 (flash2.py): load Q_i from HBM, once per row block.
    if TMA:  # rows past Nq belong to the next head (or are zero past the tensor): never stored
        Q_i = desc_q.load([q_row0, 0])  # (Br, d)
    else:
        q_ptrs = Q_base + offs_m[:, None] * HEAD_D + offs_d[None, :]  # (Br, d)
        if EVEN:
            Q_i = tl.load(q_ptrs)
        else:
            Q_i = tl.load(q_ptrs, mask=offs_m[:, None] < Nq, other=0.0)
    return Q_i


@triton.jit
def _finish(acc, l_i, m_i, O, L2, bh, offs_m, offs_d, Nq, HEAD_D: tl.constexpr):
    # FA2 Alg.1 l.11 (flash2.py): end for.
    # FA2 Alg.1 l.12 (flash2.py): O_i = diag(ℓ_i)^{-1} O_i, once per row block. (ℓ_i > 0 always:
    # key 0 is visible to every query, top-left causal included.)
    O_i = acc / l_i[:, None]
    # FA2 Alg.1 l.13 (flash2.py): L_i = m_i + log ℓ_i, in base 2 (m_i is already base 2).
    L2_i = m_i + tl.math.log2(l_i)
    # FA2 Alg.1 l.14-15 (flash2.py): write O_i and L_i to HBM, once each.
    o_ptrs = O + bh * Nq * HEAD_D + offs_m[:, None] * HEAD_D + offs_d[None, :]
    tl.store(o_ptrs, O_i.to(O.dtype.element_ty), mask=offs_m[:, None] < Nq)
    tl.store(L2 + bh * Nq + offs_m, L2_i, mask=offs_m < Nq)


@triton.jit
def _fwd_kernel(Q, K, V, O, L2, desc_q, desc_k, desc_v, Nq, Nk, qk_scale,
                HEAD_D: tl.constexpr, CAUSAL: tl.constexpr, EVEN: tl.constexpr, TMA: tl.constexpr,
                LAZY: tl.constexpr, SPLIT: tl.constexpr, HEADS_FIRST: tl.constexpr,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    # FA2 Alg.1 l.1-3 (flash2.py): Tr = ⌈Nq/Br⌉ row blocks; this program is one i of l.3's loop
    # (and one (batch, head)). Causal: the longest rows are launched first (reversed order);
    # HEADS_FIRST puts (batch, head) on the grid's fastest axis, so every head's longest row block
    # is launched before any head's next one.
    Tr = tl.cdiv(Nq, BLOCK_M)
    if HEADS_FIRST:
        pid = tl.program_id(1)
        bh = tl.program_id(0).to(tl.int64)
    else:
        pid = tl.program_id(0)
        bh = tl.program_id(1).to(tl.int64)
    if CAUSAL:
        i = Tr - 1 - pid
    else:
        i = pid
    start_m = i * BLOCK_M
    offs_d = tl.arange(0, HEAD_D)
    Q_base = Q + bh * Nq * HEAD_D
    K_base = K + bh * Nk * HEAD_D
    V_base = V + bh * Nk * HEAD_D
    q_row0 = (bh * Nq + start_m).to(tl.int32)  # this block's first row in the (B·H·Nq, d) descriptor
    kv_row0 = (bh * Nk).to(tl.int32)  # this head's first row in the (B·H·Nk, d) descriptors
    # Causal block skipping (FA2 §3.1.1): keys past the block's last query are never visited;
    # blocks wholly at or below the first query need no mask.
    if CAUSAL:
        j_hi = tl.minimum(Nk, start_m + BLOCK_M)
        n_full = tl.minimum(start_m + 1, Nk) // BLOCK_N
    else:
        j_hi = Nk
        n_full = Nk // BLOCK_N
    if SPLIT:
        HALF: tl.constexpr = BLOCK_M // 2
        offs_m0 = start_m + tl.arange(0, HALF)
        offs_m1 = start_m + HALF + tl.arange(0, HALF)
        Q0 = _load_q(Q_base, desc_q, q_row0, offs_m0, offs_d, Nq, HEAD_D, EVEN, TMA)  # l.4
        Q1 = _load_q(Q_base, desc_q, q_row0 + HALF, offs_m1, offs_d, Nq, HEAD_D, EVEN, TMA)  # l.4
        # FA2 Alg.1 l.5 (flash2.py): on chip O_i = 0, ℓ_i = 0, m_i = -inf, for both halves.
        acc0 = tl.zeros([HALF, HEAD_D], dtype=tl.float32)
        acc1 = tl.zeros([HALF, HEAD_D], dtype=tl.float32)
        l0 = tl.zeros([HALF], dtype=tl.float32)
        l1 = tl.zeros([HALF], dtype=tl.float32)
        m0 = tl.zeros([HALF], dtype=tl.float32) - float("inf")
        m1 = tl.zeros([HALF], dtype=tl.float32) - float("inf")
        acc0, l0, m0, acc1, l1, m1 = _fwd_inner_split(
            acc0, l0, m0, Q0, acc1, l1, m1, Q1, K_base, V_base, desc_k, desc_v, kv_row0, offs_m0, offs_m1,
            offs_d, 0, n_full * BLOCK_N, Nk, qk_scale, BLOCK_N, HEAD_D, CAUSAL, False, EVEN, TMA, LAZY,
            RESCALE_SLACK)
        acc0, l0, m0, acc1, l1, m1 = _fwd_inner_split(
            acc0, l0, m0, Q0, acc1, l1, m1, Q1, K_base, V_base, desc_k, desc_v, kv_row0, offs_m0, offs_m1,
            offs_d, n_full * BLOCK_N, j_hi, Nk, qk_scale, BLOCK_N, HEAD_D, CAUSAL, True, EVEN, TMA, LAZY,
            RESCALE_SLACK)
        _finish(acc0, l0, m0, O, L2, bh, offs_m0, offs_d, Nq, HEAD_D)  # l.11-15
        _finish(acc1, l1, m1, O, L2, bh, offs_m1, offs_d, Nq, HEAD_D)  # l.11-15
    else:
        offs_m = start_m + tl.arange(0, BLOCK_M)
        # FA2 Alg.1 l.4 (flash2.py): load Q_i.
        Q_i = _load_q(Q_base, desc_q, q_row0, offs_m, offs_d, Nq, HEAD_D, EVEN, TMA)
        # FA2 Alg.1 l.5 (flash2.py): on chip O_i = 0, ℓ_i = 0, m_i = -inf (fp32 accumulators).
        acc = tl.zeros([BLOCK_M, HEAD_D], dtype=tl.float32)
        l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
        m_i = tl.zeros([BLOCK_M], dtype=tl.float32) - float("inf")
        acc, l_i, m_i = _fwd_inner(acc, l_i, m_i, Q_i, K_base, V_base, desc_k, desc_v, kv_row0, offs_m, offs_d,
                                   0, n_full * BLOCK_N, Nk, qk_scale, BLOCK_N, HEAD_D, CAUSAL, False, EVEN, TMA,
                                   LAZY, RESCALE_SLACK)
        acc, l_i, m_i = _fwd_inner(acc, l_i, m_i, Q_i, K_base, V_base, desc_k, desc_v, kv_row0, offs_m, offs_d,
                                   n_full * BLOCK_N, j_hi, Nk, qk_scale, BLOCK_N, HEAD_D, CAUSAL, True, EVEN, TMA,
                                   LAZY, RESCALE_SLACK)
        _finish(acc, l_i, m_i, O, L2, bh, offs_m, offs_d, Nq, HEAD_D)  # l.11-15


# --------------------------------------------------------------------------------------------
# backward (FlashAttention-2 Algorithm 2)
# --------------------------------------------------------------------------------------------

@triton.jit
def _bwd_preprocess(O, dO, D, dQacc, Nq, HEAD_D: tl.constexpr, BLOCK_M: tl.constexpr, ATOMIC_DQ: tl.constexpr):
    # FA2 Alg.2 l.4 (flash2.py): D = rowsum(dO ∘ O), written to HBM (fp32).
    bh = tl.program_id(1).to(tl.int64)
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_D)
    ptrs = bh * Nq * HEAD_D + offs_m[:, None] * HEAD_D + offs_d[None, :]
    row_ok = offs_m[:, None] < Nq
    O_i = tl.load(O + ptrs, mask=row_ok, other=0.0).to(tl.float32)
    dO_i = tl.load(dO + ptrs, mask=row_ok, other=0.0).to(tl.float32)
    tl.store(D + bh * Nq + offs_m, tl.sum(O_i * dO_i, 1), mask=offs_m < Nq)
    if ATOMIC_DQ:
        # FA2 Alg.2 l.3 (flash2.py): initialise dQ = 0 in HBM (the fp32 buffer the atomics add into).
        tl.store(dQacc + ptrs, tl.zeros([BLOCK_M, HEAD_D], dtype=tl.float32), mask=row_ok)


@triton.jit
def _bwd_dq_scale(dQacc, dQ, n_elements, sm_scale, BLOCK: tl.constexpr):
    # FA2 Alg.2 l.20 (flash2.py): return dQ, times τ (S = τ QKᵀ) and cast to the inputs' dtype.
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    ok = offs < n_elements
    tl.store(dQ + offs, (tl.load(dQacc + offs, mask=ok) * sm_scale).to(dQ.dtype.element_ty), mask=ok)


@triton.jit
def _bwd_dkdv_inner(dK_j, dV_j, K_j, V_j, Q_base, dO_base, L2_base, D_base, dQ_base, offs_n, offs_d,
                    i_lo, i_hi, Nq, Nk, qk_scale,
                    BLOCK_M: tl.constexpr, HEAD_D: tl.constexpr, CAUSAL: tl.constexpr,
                    MASKED: tl.constexpr, EVEN: tl.constexpr, ATOMIC_DQ: tl.constexpr):
    offs_m0 = tl.arange(0, BLOCK_M)
    for start_m in range(i_lo, i_hi, BLOCK_M):  # FA2 Alg.2 l.8 (flash2.py): for 1 <= i <= Tr
        start_m = tl.multiple_of(start_m, BLOCK_M)
        offs_m = start_m + offs_m0
        # FA2 Alg.2 l.9 (flash2.py): load Q_i (as Q_iᵀ), dO_i, L_i, D_i (O_i is not needed: D).
        qT_ptrs = Q_base + offs_m[None, :] * HEAD_D + offs_d[:, None]  # (d, Br)
        do_ptrs = dO_base + offs_m[:, None] * HEAD_D + offs_d[None, :]  # (Br, d)
        if EVEN:
            Q_iT = tl.load(qT_ptrs)
            dO_i = tl.load(do_ptrs)
            L2_i = tl.load(L2_base + offs_m)
            D_i = tl.load(D_base + offs_m)
        else:
            Q_iT = tl.load(qT_ptrs, mask=offs_m[None, :] < Nq, other=0.0)
            dO_i = tl.load(do_ptrs, mask=offs_m[:, None] < Nq, other=0.0)
            L2_i = tl.load(L2_base + offs_m, mask=offs_m < Nq, other=0.0)
            D_i = tl.load(D_base + offs_m, mask=offs_m < Nq, other=0.0)
        # FA2 Alg.2 l.10 (flash2.py): S_ij = τ Q_i K_jᵀ, computed transposed: S_ijᵀ = K_j Q_iᵀ.
        S_ijT = tl.dot(K_j, Q_iT) * qk_scale  # (Bc, Br), base 2
        # FA2 Alg.2 l.11 (flash2.py): P_ij = exp(S_ij − L_i).
        P_ijT = tl.math.exp2(S_ijT - L2_i[None, :])  # (Bc, Br)
        if MASKED:
            attend = (offs_m[None, :] < Nq) & (offs_n[:, None] < Nk)
            if CAUSAL:
                attend = attend & (offs_m[None, :] >= offs_n[:, None])
            P_ijT = tl.where(attend, P_ijT, 0.0)
        # FA2 Alg.2 l.12 (flash2.py): dV_j += P_ijᵀ dO_i.
        dV_j = tl.dot(P_ijT.to(dO_i.dtype), dO_i, dV_j)  # (Bc, d)
        # FA2 Alg.2 l.13 (flash2.py): dP_ij = dO_i V_jᵀ, transposed: dP_ijᵀ = V_j dO_iᵀ.
        dP_ijT = tl.dot(V_j, tl.trans(dO_i))  # (Bc, Br)
        # FA2 Alg.2 l.14 (flash2.py): dS_ij = P_ij ∘ (dP_ij − D_i).
        dS_ijT = (P_ijT * (dP_ijT - D_i[None, :])).to(Q_iT.dtype)  # (Bc, Br)
        if ATOMIC_DQ:
            # FA2 Alg.2 l.15 (flash2.py): dQ_i += dS_ij K_j, read-modified-written in HBM: an fp32
            # atomic add, since every column block's program adds into the same dQ_i (τ: at the end).
            dQ_ij = tl.dot(tl.trans(dS_ijT), K_j)  # (Br, d)
            dq_ptrs = dQ_base + offs_m[:, None] * HEAD_D + offs_d[None, :]
            if MASKED:
                tl.atomic_add(dq_ptrs, dQ_ij, mask=offs_m[:, None] < Nq, sem="relaxed")
            else:
                tl.atomic_add(dq_ptrs, dQ_ij, sem="relaxed")
        # FA2 Alg.2 l.16 (flash2.py): dK_j += dS_ijᵀ Q_i (τ applied once at the end).
        dK_j = tl.dot(dS_ijT, tl.trans(Q_iT), dK_j)  # (Bc, d)
    return dK_j, dV_j


@triton.jit
def _bwd_dkdv_kernel(Q, K, V, dO, L2, D, dK, dV, dQacc, Nq, Nk, sm_scale, qk_scale,
                     HEAD_D: tl.constexpr, CAUSAL: tl.constexpr, EVEN: tl.constexpr, ATOMIC_DQ: tl.constexpr,
                     STAGGER: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    # FA2 Alg.2 l.5 (flash2.py): this program is one column block j (and one (batch, head)).
    j = tl.program_id(0)
    bh = tl.program_id(1).to(tl.int64)
    start_n = j * BLOCK_N
    offs_n = start_n + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_D)
    kv_ptrs = bh * Nk * HEAD_D + offs_n[:, None] * HEAD_D + offs_d[None, :]  # (Bc, d)
    # FA2 Alg.2 l.6 (flash2.py): load K_j, V_j from HBM, once.
    if EVEN:
        K_j = tl.load(K + kv_ptrs)
        V_j = tl.load(V + kv_ptrs)
    else:
        K_j = tl.load(K + kv_ptrs, mask=offs_n[:, None] < Nk, other=0.0)
        V_j = tl.load(V + kv_ptrs, mask=offs_n[:, None] < Nk, other=0.0)
    # FA2 Alg.2 l.7 (flash2.py): dK_j = 0, dV_j = 0 on chip (fp32).
    dK_j = tl.zeros([BLOCK_N, HEAD_D], dtype=tl.float32)
    dV_j = tl.zeros([BLOCK_N, HEAD_D], dtype=tl.float32)
    Q_base = Q + bh * Nq * HEAD_D
    dO_base = dO + bh * Nq * HEAD_D
    L2_base = L2 + bh * Nq
    D_base = D + bh * Nq
    if ATOMIC_DQ:
        dQ_base = dQacc + bh * Nq * HEAD_D  # this head's fp32 dQ, zeroed by the pre-pass
    else:
        dQ_base = dQacc  # None: dQ comes from the separate dQ kernel
    Nq_full = (Nq // BLOCK_M) * BLOCK_M  # row blocks that need no bound mask
    if CAUSAL:
        # causal skipping: row blocks wholly before key start_n are never visited; those crossing
        # the diagonal (rows < start_n + Bc) get the mask.
        i_lo = (start_n // BLOCK_M) * BLOCK_M
        i_diag = tl.minimum(tl.cdiv(start_n + BLOCK_N, BLOCK_M) * BLOCK_M, Nq_full)
        i_diag = tl.maximum(i_diag, i_lo)
        dK_j, dV_j = _bwd_dkdv_inner(dK_j, dV_j, K_j, V_j, Q_base, dO_base, L2_base, D_base, dQ_base,
                                     offs_n, offs_d, i_lo, i_diag, Nq, Nk, qk_scale, BLOCK_M, HEAD_D, CAUSAL,
                                     True, EVEN, ATOMIC_DQ)
        dK_j, dV_j = _bwd_dkdv_inner(dK_j, dV_j, K_j, V_j, Q_base, dO_base, L2_base, D_base, dQ_base,
                                     offs_n, offs_d, i_diag, Nq_full, Nq, Nk, qk_scale, BLOCK_M, HEAD_D, CAUSAL,
                                     False, EVEN, ATOMIC_DQ)
        i_tail = tl.maximum(Nq_full, i_diag)
    else:
        # STAGGER: start at this program's own row block and wrap around, so that the column blocks
        # of one head do not all add into the same dQ_i at the same moment (atomic contention).
        i_mid = 0
        if STAGGER:
            i_mid = tl.minimum((start_n // BLOCK_M) * BLOCK_M, Nq_full)
        dK_j, dV_j = _bwd_dkdv_inner(dK_j, dV_j, K_j, V_j, Q_base, dO_base, L2_base, D_base, dQ_base,
                                     offs_n, offs_d, i_mid, Nq_full, Nq, Nk, qk_scale, BLOCK_M, HEAD_D, CAUSAL,
                                     False, EVEN, ATOMIC_DQ)
        dK_j, dV_j = _bwd_dkdv_inner(dK_j, dV_j, K_j, V_j, Q_base, dO_base, L2_base, D_base, dQ_base,
                                     offs_n, offs_d, 0, i_mid, Nq, Nk, qk_scale, BLOCK_M, HEAD_D, CAUSAL,
                                     False, EVEN, ATOMIC_DQ)
        i_tail = Nq_full
    # the ragged last row block (empty when Nq is a multiple of Br)
    dK_j, dV_j = _bwd_dkdv_inner(dK_j, dV_j, K_j, V_j, Q_base, dO_base, L2_base, D_base, dQ_base,
                                 offs_n, offs_d, i_tail, Nq, Nq, Nk, qk_scale, BLOCK_M, HEAD_D, CAUSAL,
                                 True, EVEN, ATOMIC_DQ)
    # FA2 Alg.2 l.17 (flash2.py): end for.
    # FA2 Alg.2 l.18 (flash2.py): write dK_j (times τ: S = τ QKᵀ) and dV_j to HBM, once.
    row_ok = offs_n[:, None] < Nk
    tl.store(dK + kv_ptrs, (dK_j * sm_scale).to(dK.dtype.element_ty), mask=row_ok)
    tl.store(dV + kv_ptrs, dV_j.to(dV.dtype.element_ty), mask=row_ok)


@triton.jit
def _bwd_dq_inner(dQ_i, Q_i, dO_i, L2_i, D_i, K_base, V_base, offs_m, offs_d, j_lo, j_hi, Nk, qk_scale,
                  BLOCK_N: tl.constexpr, HEAD_D: tl.constexpr, CAUSAL: tl.constexpr,
                  MASKED: tl.constexpr, EVEN: tl.constexpr):
    offs_n0 = tl.arange(0, BLOCK_N)
    for start_n in range(j_lo, j_hi, BLOCK_N):  # Alg.2 l.5's j loop, run inside row block i
        start_n = tl.multiple_of(start_n, BLOCK_N)
        offs_n = start_n + offs_n0
        # FA2 Alg.2 l.6 (flash2.py): load K_j (as K_jᵀ) and V_j (as V_jᵀ).
        kT_ptrs = K_base + offs_n[None, :] * HEAD_D + offs_d[:, None]  # (d, Bc)
        vT_ptrs = V_base + offs_n[None, :] * HEAD_D + offs_d[:, None]  # (d, Bc)
        if EVEN:
            K_jT = tl.load(kT_ptrs)
            V_jT = tl.load(vT_ptrs)
        else:
            K_jT = tl.load(kT_ptrs, mask=offs_n[None, :] < Nk, other=0.0)
            V_jT = tl.load(vT_ptrs, mask=offs_n[None, :] < Nk, other=0.0)
        # FA2 Alg.2 l.10-11 (flash2.py): S_ij = τ Q_i K_jᵀ; P_ij = exp(S_ij − L_i).
        S_ij = tl.dot(Q_i, K_jT) * qk_scale  # (Br, Bc)
        P_ij = tl.math.exp2(S_ij - L2_i[:, None])
        if MASKED:
            attend = offs_n[None, :] < Nk
            if CAUSAL:
                attend = attend & (offs_m[:, None] >= offs_n[None, :])
            P_ij = tl.where(attend, P_ij, 0.0)
        # FA2 Alg.2 l.13-14 (flash2.py): dP_ij = dO_i V_jᵀ; dS_ij = P_ij ∘ (dP_ij − D_i).
        dP_ij = tl.dot(dO_i, V_jT)  # (Br, Bc)
        dS_ij = P_ij * (dP_ij - D_i[:, None])
        # FA2 Alg.2 l.15 (flash2.py): dQ_i += dS_ij K_j, accumulated on chip (not in HBM).
        dQ_i = tl.dot(dS_ij.to(K_jT.dtype), tl.trans(K_jT), dQ_i)  # (Br, d)
    return dQ_i


@triton.jit
def _bwd_dq_kernel(Q, K, V, dO, L2, D, dQ, Nq, Nk, sm_scale, qk_scale,
                   HEAD_D: tl.constexpr, CAUSAL: tl.constexpr, EVEN: tl.constexpr,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    Tr = tl.cdiv(Nq, BLOCK_M)
    pid = tl.program_id(0)
    if CAUSAL:
        i = Tr - 1 - pid
    else:
        i = pid
    bh = tl.program_id(1).to(tl.int64)
    start_m = i * BLOCK_M
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_D)
    q_ptrs = bh * Nq * HEAD_D + offs_m[:, None] * HEAD_D + offs_d[None, :]  # (Br, d)
    # FA2 Alg.2 l.9 (flash2.py): load Q_i, dO_i, L_i, D_i, once per row block here.
    if EVEN:
        Q_i = tl.load(Q + q_ptrs)
        dO_i = tl.load(dO + q_ptrs)
        L2_i = tl.load(L2 + bh * Nq + offs_m)
        D_i = tl.load(D + bh * Nq + offs_m)
    else:
        row_ok = offs_m < Nq
        Q_i = tl.load(Q + q_ptrs, mask=row_ok[:, None], other=0.0)
        dO_i = tl.load(dO + q_ptrs, mask=row_ok[:, None], other=0.0)
        L2_i = tl.load(L2 + bh * Nq + offs_m, mask=row_ok, other=0.0)
        D_i = tl.load(D + bh * Nq + offs_m, mask=row_ok, other=0.0)
    # FA2 Alg.2 l.3 (flash2.py): dQ_i = 0, here on chip (fp32), written once at the end.
    dQ_i = tl.zeros([BLOCK_M, HEAD_D], dtype=tl.float32)
    K_base = K + bh * Nk * HEAD_D
    V_base = V + bh * Nk * HEAD_D
    if CAUSAL:
        j_hi = tl.minimum(Nk, start_m + BLOCK_M)
        n_full = tl.minimum(start_m + 1, Nk) // BLOCK_N
    else:
        j_hi = Nk
        n_full = Nk // BLOCK_N
    dQ_i = _bwd_dq_inner(dQ_i, Q_i, dO_i, L2_i, D_i, K_base, V_base, offs_m, offs_d, 0, n_full * BLOCK_N,
                         Nk, qk_scale, BLOCK_N, HEAD_D, CAUSAL, False, EVEN)
    dQ_i = _bwd_dq_inner(dQ_i, Q_i, dO_i, L2_i, D_i, K_base, V_base, offs_m, offs_d, n_full * BLOCK_N, j_hi,
                         Nk, qk_scale, BLOCK_N, HEAD_D, CAUSAL, True, EVEN)
    # FA2 Alg.2 l.15 (flash2.py): write dQ_i (times τ) to HBM, once per row block.
    tl.store(dQ + q_ptrs, (dQ_i * sm_scale).to(dQ.dtype.element_ty), mask=offs_m[:, None] < Nq)


# --------------------------------------------------------------------------------------------
# configurations
# --------------------------------------------------------------------------------------------

def _even(args):
    return args["Nq"] % args["BLOCK_M"] == 0 and args["Nk"] % args["BLOCK_N"] == 0


def _set_descriptor_blocks(nargs):
    """Pre-hook: the host-side TMA descriptors take the config's tile shape."""
    if nargs.get("desc_q") is None:
        return
    d = nargs["HEAD_D"]
    nargs["desc_q"].block_shape = [nargs["BLOCK_M"] // (2 if nargs.get("SPLIT") else 1), d]
    nargs["desc_k"].block_shape = [nargs["BLOCK_N"], d]
    nargs["desc_v"].block_shape = [nargs["BLOCK_N"], d]


def _configs(pairs, pre_hook=None):
    return [triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_warps=w, num_stages=s, pre_hook=pre_hook)
            for bm, bn, w, s in pairs]


# (BLOCK_M, BLOCK_N, num_warps, num_stages). Forward: BLOCK_M query rows per program; with
# SPLIT, two halves of BLOCK_M // 2 rows interleaved in one program. The autotuner picks.
FWD_CONFIGS = ([triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "SPLIT": False}, num_warps=w, num_stages=st,
                              pre_hook=_set_descriptor_blocks)
                for bm, bn, w, st in [(128, 128, 8, 3), (128, 64, 8, 3), (128, 128, 4, 3), (128, 64, 4, 3)]]
               + [triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "SPLIT": True}, num_warps=w, num_stages=st,
                                pre_hook=_set_descriptor_blocks)
                  for bm, bn, w, st in [(256, 64, 8, 2), (256, 64, 8, 3), (256, 128, 8, 2), (128, 64, 4, 3)]])
# dK/dV: the program's column block is BLOCK_N (outer), the inner row block BLOCK_M.
DKDV_CONFIGS = _configs([(64, 128, 8, 3), (32, 128, 4, 3), (64, 64, 4, 3), (64, 128, 4, 2)])
# dQ: the program's row block is BLOCK_M (outer), the inner column block BLOCK_N.
DQ_CONFIGS = _configs([(128, 64, 8, 3), (128, 32, 4, 3), (64, 64, 4, 3), (128, 64, 4, 2)])

# Without autotuning (the default): the configs the autotuner chose most often on an H100 at
# N >= 4096 (figures/gpu/NOTES.md), by head dimension.
FIXED = {
    "fwd": {16: (128, 64, 4, 3), 32: (128, 64, 4, 3), 64: (128, 128, 4, 3), 128: (256, 64, 8, 3)},
    "dkdv": {16: (64, 64, 4, 3), 32: (64, 64, 4, 3), 64: (64, 64, 4, 3), 128: (64, 128, 8, 3)},
    "dq": {16: (64, 64, 4, 3), 32: (64, 64, 4, 3), 64: (128, 64, 8, 3), 128: (128, 64, 8, 3)},
    # dK/dV with the atomic dQ update: one more matmul and its (Br, d) fp32 tile per step
    "dkdv_atomic": {16: (64, 64, 4, 3), 32: (64, 64, 4, 3), 64: (128, 128, 8, 2), 128: (64, 128, 8, 3)},
}
# d = 128 forward: two interleaved halves of 128 rows (SPLIT), best geometric mean in sweep.py's run
FIXED_SPLIT = {16: False, 32: False, 64: False, 128: True}
# causal forward, heads on the grid's fast axis (longest-first across heads): +7 to +14% at d = 128,
# -1 to -5% at d = 64 in sweep.py's interleaved run (NOTES.md, call 11)
HEADS_FIRST_CAUSAL = (128,)
STAGGER = True  # see stagger_on: +2% fwd+bwd with atomic dQ at d = 64 and 128 (NOTES.md, call 11)
INTERPRET_BLOCKS = {"BLOCK_M": 16, "BLOCK_N": 16}  # the CPU interpreter: small fixed tiles, no tuning

_KEY = ["Nq", "Nk", "HEAD_D", "CAUSAL"]  # the autotuner's cache key


def autotune_on() -> bool:
    """Autotune over the config lists (``FLASHREF_AUTOTUNE=1``); by default the FIXED table is used:
    the autotuner's picks were noisier between runs than the gaps between configs (NOTES.md)."""
    return not INTERPRET and os.environ.get("FLASHREF_AUTOTUNE", "0") == "1"


def split_on(d) -> bool:
    """Two interleaved row halves per forward program: ``FLASHREF_SPLIT=0/1``, else FIXED_SPLIT[d]
    (never under the interpreter unless asked; when autotuning, the tuner picks)."""
    env = os.environ.get("FLASHREF_SPLIT")
    if env is not None:
        return env == "1"
    return not INTERPRET and FIXED_SPLIT.get(d, False)


def heads_first_on(d, causal) -> bool:
    """Launch the forward's grid as (heads, row blocks) instead of (row blocks, heads):
    ``FLASHREF_HEADS_FIRST=0/1``, else for causal attention at the head dims in HEADS_FIRST_CAUSAL."""
    env = os.environ.get("FLASHREF_HEADS_FIRST")
    if env is not None:
        return env == "1"
    return causal and d in HEADS_FIRST_CAUSAL and not INTERPRET


def stagger_on() -> bool:
    """Non-causal dK/dV programs start their row loop at their own column block (``FLASHREF_STAGGER``)."""
    return os.environ.get("FLASHREF_STAGGER", "1" if STAGGER else "0") == "1"


def _build(kernel, configs, key=tuple(_KEY)):
    with_even = triton.heuristics({"EVEN": _even})(kernel)
    if not autotune_on():
        return with_even
    return triton.autotune(configs=configs, key=list(key))(with_even)


fwd = _build(_fwd_kernel, FWD_CONFIGS)
bwd_dkdv = _build(_bwd_dkdv_kernel, DKDV_CONFIGS, key=(*_KEY, "ATOMIC_DQ"))
bwd_dq = _build(_bwd_dq_kernel, DQ_CONFIGS)
bwd_preprocess = _bwd_preprocess


def launch_meta(name, d):
    """Launch keywords: fixed 16×16 blocks in the interpreter, none when autotuning, else FIXED[name][d]."""
    if INTERPRET:
        return dict(INTERPRET_BLOCKS)
    if autotune_on():
        return {}
    bm, bn, w, st = FIXED[name][d]
    override = os.environ.get(f"FLASHREF_CONFIG_{name.upper()}")  # "BM,BN,warps,stages" (sweep.py)
    if override:
        bm, bn, w, st = (int(x) for x in override.split(","))
    return dict(BLOCK_M=bm, BLOCK_N=bn, num_warps=w, num_stages=st)


def best_config(kernel):
    """The autotuner's choice for the last key (None when not autotuning)."""
    return getattr(kernel, "best_config", None)


def _grid(n_rows, bh, key):
    return lambda meta: (triton.cdiv(n_rows, meta[key]), bh)


def forward(q, k, v, o, L2, causal, scale):
    """Launch Algorithm 1 on contiguous (B, H, N, d) tensors; fills o and the base-2 LSE L2."""
    B, H, Nq, d = q.shape
    Nk = k.shape[2]
    tma = use_tma(q.device)
    meta = launch_meta("fwd", d)
    if not autotune_on():
        meta["SPLIT"] = split_on(d)
    descs = (None, None, None)
    if tma:  # 2-D (B·H·N, d) views; block shapes set by the pre-hook (autotune) or here
        from triton.tools.tensor_descriptor import TensorDescriptor
        descs = tuple(TensorDescriptor(x, [x.shape[0] * x.shape[1] * x.shape[2], d], [d, 1], [64, d])
                      for x in (q, k, v))
        if not autotune_on():
            _set_descriptor_blocks(dict(desc_q=descs[0], desc_k=descs[1], desc_v=descs[2], HEAD_D=d, **meta))
    heads_first = heads_first_on(d, causal)
    grid = _grid(Nq, B * H, "BLOCK_M")
    if heads_first:
        grid = lambda meta: (B * H, triton.cdiv(Nq, meta["BLOCK_M"]))  # noqa: E731
    fwd[grid](q, k, v, o, L2, *descs, Nq, Nk, scale * LOG2E, HEAD_D=d, CAUSAL=causal, TMA=tma, LAZY=lazy_rescale(),
              HEADS_FIRST=heads_first, **meta)


def backward(q, k, v, o, L2, do, dq, dk, dv, D, causal, scale, dq_acc=None):
    """Launch Algorithm 2: the D pre-pass, then dK/dV over column blocks, and dQ either

    * added by the same programs into ``dq_acc`` (fp32, same shape as q) with atomics, then
      scaled and cast into ``dq`` (FA2's own scheme; 5 matmuls per block pair), or
    * when ``dq_acc`` is None, by a second kernel over row blocks that keeps dQ_i on chip and
      recomputes S and dP (7 matmuls per block pair; deterministic).
    """
    B, H, Nq, d = q.shape
    Nk = k.shape[2]
    atomic = dq_acc is not None
    _bwd_preprocess[(triton.cdiv(Nq, 64), B * H)](o, do, D, dq_acc, Nq, HEAD_D=d, BLOCK_M=64, ATOMIC_DQ=atomic)
    qk_scale = scale * LOG2E
    bwd_dkdv[_grid(Nk, B * H, "BLOCK_N")](q, k, v, do, L2, D, dk, dv, dq_acc, Nq, Nk, scale, qk_scale,
                                          HEAD_D=d, CAUSAL=causal, ATOMIC_DQ=atomic, STAGGER=stagger_on(),
                                          **launch_meta("dkdv_atomic" if atomic else "dkdv", d))
    if atomic:
        n = dq.numel()
        _bwd_dq_scale[(triton.cdiv(n, 1024),)](dq_acc, dq, n, scale, BLOCK=1024)
    else:
        bwd_dq[_grid(Nq, B * H, "BLOCK_M")](q, k, v, do, L2, D, dq, Nq, Nk, scale, qk_scale,
                                            HEAD_D=d, CAUSAL=causal, **launch_meta("dq", d))
