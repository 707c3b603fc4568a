"""Reference solution, the Triton lab: a FlashAttention-2 forward kernel (one program per query block and head)."""

import triton
import triton.language as tl


@triton.jit
def flash2_kernel(Q, K, V, O, L, stride_qh, stride_qn, stride_kh, stride_kn, stride_oh, stride_on,
                  Nq, Nk, scale, D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                  CAUSAL: tl.constexpr):
    # BEGIN SOLUTION
    start_m = tl.program_id(0)
    head = tl.program_id(1)
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)  # this program's query rows
    offs_d = tl.arange(0, D)
    offs_n = tl.arange(0, BLOCK_N)
    # Alg.1 l.4: load Q_i (rows past Nq are masked: not loaded, not counted)
    q = tl.load(Q + head * stride_qh + offs_m[:, None] * stride_qn + offs_d[None, :],
                mask=offs_m[:, None] < Nq, other=0.0)
    # Alg.1 l.5: O_i = 0, ℓ_i = 0, m_i = -inf on chip
    acc = tl.zeros([BLOCK_M, D], dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    # causal: stop after the block holding this program's last query row (FA2's block skipping)
    hi = tl.minimum(Nk, (start_m + 1) * BLOCK_M) if CAUSAL else Nk
    for start_n in range(0, hi, BLOCK_N):  # Alg.1 l.6
        cols = start_n + offs_n
        kv_mask = cols[:, None] < Nk
        # Alg.1 l.7: load K_j, V_j
        k = tl.load(K + head * stride_kh + cols[:, None] * stride_kn + offs_d[None, :], mask=kv_mask, other=0.0)
        v = tl.load(V + head * stride_kh + cols[:, None] * stride_kn + offs_d[None, :], mask=kv_mask, other=0.0)
        # Alg.1 l.8: S_ij = τ Q_i K_jᵀ, masked past Nk (and above the diagonal)
        s = tl.dot(q, tl.trans(k)) * scale
        ok = cols[None, :] < Nk
        if CAUSAL:
            ok = ok & (cols[None, :] <= offs_m[:, None])
        s = tl.where(ok, s, float("-inf"))
        # Alg.1 l.9: m_new, P̃, ℓ
        m_new = tl.maximum(m_i, tl.max(s, 1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        p = tl.exp(s - m_safe[:, None])
        alpha = tl.exp(m_i - m_safe)
        l_i = alpha * l_i + tl.sum(p, 1)
        # Alg.1 l.10: O_i = diag(α) O_i + P̃ V_j
        acc = acc * alpha[:, None] + tl.dot(p, v)
        m_i = m_new
    # Alg.1 l.12-13: O_i / ℓ_i, L_i = m_i + log ℓ_i
    l_safe = tl.where(l_i == 0.0, 1.0, l_i)
    acc = acc / l_safe[:, None]
    lse = tl.where(l_i == 0.0, float("-inf"), m_i + tl.log(l_safe))
    # Alg.1 l.14-15: write O_i and L_i
    tl.store(O + head * stride_oh + offs_m[:, None] * stride_on + offs_d[None, :], acc, mask=offs_m[:, None] < Nq)
    tl.store(L + head * Nq + offs_m, lse, mask=offs_m < Nq)
    # END SOLUTION
