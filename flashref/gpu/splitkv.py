"""Split-KV decoding in Triton with packed GQA, written to be read beside ``flashref/decoding.py``.

The two passes of ``decoding.forward`` with ``enable_gqa=True, gqa_packing=True``, one kernel each:

* ``_split``: one program per (split s, row block i, K/V head). Its rows are the g query heads of the K/V head's
  group at each of the Nq positions, g·Nq of them (row p is position p // g of query head p mod g, as
  ``variants.pack_rows`` lays them out), so the program streams its K/V head's keys ``[k0, k1)`` once for all g
  heads: the packed schedule, which reads the cache g times less than one program per query head. It runs
  ``_split_item``'s online softmax (in base 2, as kernel 1: S in units of log2, P̃ = exp2(S − m)) and writes the
  partial ``O^(s)`` (normalised, fp32) and its statistics ``m^(s)``, ``ℓ^(s)``; with one split, O itself.
* ``_merge``: one program per (row block, K/V head), ``_merge_pass``: reads the S partials of its rows and combines
  them as ``decoding._merge_pass`` does, rescaling by ``2^(m^(s) − m)``. The statistics stay apart, not summed into
  one log-sum-exp ``m + log2 ℓ``: at scores of 10^5 and more, fp32 cannot hold ``log2 ℓ`` beside ``m``, and the
  merged weights would no longer sum to 1 (two splits of equal scores 10^7 gave 0.75 for 1).

What the simulator does with ``mem.load``/``mem.store`` is a masked ``tl.load``/``tl.store`` here, as in kernel 1.
No mask, causal, window, dropout, ALiBi or softcap: a decoding query sees its whole cache. ``gpu.decode`` checks the
inputs and picks the number of splits.
"""

from __future__ import annotations

import triton
import triton.language as tl

from .kernels import LOG2E, _load_rows, _store_rows, pad_dim


@triton.jit
def _packed_rows(base, rows, M, group, Nq, offs_d, HEAD_D: tl.constexpr):
    # The addresses of packed rows p = (position p // g, query head p mod g) of one K/V head's group, whose query
    # heads are consecutive from ``base``: row p lives at ((p mod g)·Nq + p // g)·d.
    src = ((rows % group) * Nq + rows // group).to(tl.int64)  # int64: g·Nq·d may pass 2^31 elements
    return base + src[:, None] * HEAD_D + offs_d[None, :], (rows[:, None] < M) & (offs_d[None, :] < HEAD_D)


@triton.jit
def _split(Q, K, V, O, Opart, Mpart, Lpart, Nq, Nk, group, num_splits, qk_scale, HEAD_D: tl.constexpr,
           D_PAD: tl.constexpr, SINGLE: tl.constexpr, Br: tl.constexpr, Bc: tl.constexpr):
    # The work item (split s, query block i) of decoding.forward's split pass, for K/V head kv.
    s = tl.program_id(0).to(tl.int64)
    i = tl.program_id(1)
    kv = tl.program_id(2).to(tl.int64)
    M = group * Nq  # [gqa] packed: the group's g query heads at each position
    rows = i * Br + tl.arange(0, Br)
    offs_d = tl.arange(0, D_PAD)
    k0 = s * Nk // num_splits  # split_bounds: contiguous, as equal as possible
    k1 = (s + 1) * Nk // num_splits
    # Load Q_i from HBM to on-chip SRAM (every split loads the queries). [gqa] rows of the group's g heads.
    q_ptrs, q_ok = _packed_rows(Q + kv * group * Nq * HEAD_D, rows, M, group, Nq, offs_d, HEAD_D)
    Q_i = tl.load(q_ptrs, mask=q_ok, other=0.0)  # (Br, d)
    # Initialise on chip O_i = 0, ℓ_i = 0, m_i = -inf.
    O_i = tl.zeros([Br, D_PAD], dtype=tl.float32)  # unnormalised
    l_i = tl.zeros([Br], dtype=tl.float32)
    m_i = tl.zeros([Br], dtype=tl.float32) - float("inf")
    cols0 = tl.arange(0, Bc)
    for start in range(k0, k1, Bc):  # each K/V block of this split's chunk [k0, k1)
        cols = start + cols0
        # Load K_j, V_j from HBM to on-chip SRAM (keys past the chunk load as 0 and are masked below).
        K_j = _load_rows(K + kv * Nk * HEAD_D, cols, k1, offs_d, HEAD_D, D_PAD, True)  # (Bc, d)
        V_j = _load_rows(V + kv * Nk * HEAD_D, cols, k1, offs_d, HEAD_D, D_PAD, True)  # (Bc, d)
        # On chip, S_ij = τ Q_i K_jᵀ (in units of log2: τ·log2 e); keys past the chunk never attend.
        S_ij = tl.where(cols[None, :] < k1, tl.dot(Q_i, tl.trans(K_j)) * qk_scale, float("-inf"))  # (Br, Bc)
        # m_i^new = max(m_i, rowmax(S_ij)); P̃_ij = exp(S_ij − m_i^new); ℓ_i^new = e^{m_i − m_i^new} ℓ_i + rowsum(P̃_ij)
        # (one factor where decoding.py keeps FlashAttention's two: the same result, FlashAttention-2's Alg.1 l.9).
        m_new = tl.maximum(m_i, tl.max(S_ij, 1))  # finite: every tile holds at least one key of the chunk
        P_tilde = tl.math.exp2(S_ij - m_new[:, None])  # (Br, Bc)
        alpha = tl.math.exp2(m_i - m_new)  # (Br,)
        l_i = alpha * l_i + tl.sum(P_tilde, 1)
        # O_i ← e^{m_i − m_new} O_i + P̃_ij V_j (unnormalised: divided by ℓ once, at the end of the chunk).
        O_i = alpha[:, None] * O_i + tl.dot(P_tilde.to(V_j.dtype), V_j)
        m_i = m_new
    # On chip, O^(s)_i = diag(ℓ_i)⁻¹ O_i.
    O_i = O_i / l_i[:, None]
    if SINGLE:
        # Nothing to merge: write O_i, in Q's layout, as the result.
        o_ptrs, o_ok = _packed_rows(O + kv * group * Nq * HEAD_D, rows, M, group, Nq, offs_d, HEAD_D)
        tl.store(o_ptrs, O_i.to(O.dtype.element_ty), mask=o_ok)
    else:
        # Write the partial (O^(s)_i, m^(s)_i, ℓ^(s)_i) to HBM: partial s of row p at row s·M + p of this K/V head's
        # buffers.
        part = (kv * num_splits + s) * M
        _store_rows(Opart + part * HEAD_D, rows, M, offs_d, O_i, HEAD_D, D_PAD)
        tl.store(Mpart + part + rows, m_i, mask=rows < M)
        tl.store(Lpart + part + rows, l_i, mask=rows < M)


@triton.jit
def _merge(O, Opart, Mpart, Lpart, Nq, group, num_splits, HEAD_D: tl.constexpr, D_PAD: tl.constexpr,
           Br: tl.constexpr):
    # The merge pass's work item: query block i of K/V head kv, streaming its S partials.
    i = tl.program_id(0)
    kv = tl.program_id(1).to(tl.int64)
    M = group * Nq
    rows = i * Br + tl.arange(0, Br)
    offs_d = tl.arange(0, D_PAD)
    m = tl.zeros([Br], dtype=tl.float32) - float("inf")  # the merged statistics so far
    l = tl.zeros([Br], dtype=tl.float32)
    O_acc = tl.zeros([Br, D_PAD], dtype=tl.float32)
    for s in range(0, num_splits):
        part = (kv * num_splits + s) * M
        # Load the partial (O^(s)_i, m^(s)_i, ℓ^(s)_i) from HBM (padding rows past M: m = 0, ℓ = 1, never stored).
        O_s = _load_rows(Opart + part * HEAD_D, rows, M, offs_d, HEAD_D, D_PAD, True)
        m_s = tl.load(Mpart + part + rows, mask=rows < M, other=0.0)
        l_s = tl.load(Lpart + part + rows, mask=rows < M, other=1.0)
        # On chip, m^new = max(m, m^(s)), ℓ^new = 2^{m − m^new} ℓ + 2^{m^(s) − m^new} ℓ^(s)   (Alg.1 l.11), the two
        # weights kept; every split saw a key, so m^(s) and m^new are finite.
        m_new = tl.maximum(m, m_s)
        a = tl.math.exp2(m - m_new) * l  # what is merged so far (0 before the first partial)
        b = tl.math.exp2(m_s - m_new) * l_s  # partial s
        l_new = a + b
        # On chip, O ← diag(ℓ^new)⁻¹ (a O + b O^(s))   (Alg.1 l.12 with normalised partials)
        O_acc = (a[:, None] * O_acc + b[:, None] * O_s) / l_new[:, None]
        m, l = m_new, l_new
    # Write O_i, in Q's layout.
    o_ptrs, o_ok = _packed_rows(O + kv * group * Nq * HEAD_D, rows, M, group, Nq, offs_d, HEAD_D)
    tl.store(o_ptrs, O_acc.to(O.dtype.element_ty), mask=o_ok)


#: The key tile Bc of the split pass.
BLOCK_KEYS = 64


def block_rows(rows: int) -> int:
    """The row tile: the packed rows rounded up to a power of two, at least 16 (``tl.dot``'s least) and at most 64."""
    return min(64, max(16, triton.next_power_of_2(rows)))


def forward(q, k, v, scale: float, num_splits: int, Bc: int = BLOCK_KEYS):
    """O of split-KV decoding, q ``(B, Hq, Nq, d)``, k and v ``(B, Hkv, Nk, d)`` contiguous, Hq a multiple of Hkv."""
    import torch

    B, Hq, Nq, d = q.shape
    Hkv, Nk = k.shape[1], k.shape[2]
    group, M = Hq // Hkv, (Hq // Hkv) * Nq
    Br = block_rows(M)
    o = torch.empty_like(q)
    single = num_splits == 1
    # the partials in fp32 (nothing to write with one split: a one-element placeholder the kernel never touches)
    shape = (B * Hkv, num_splits, M) if not single else (1,)
    Mpart, Lpart = (torch.empty(shape, dtype=torch.float32, device=q.device) for _ in range(2))
    Opart = torch.empty(shape + ((d,) if not single else ()), dtype=torch.float32, device=q.device)
    Tr = triton.cdiv(M, Br)
    _split[(num_splits, Tr, B * Hkv)](q, k, v, o, Opart, Mpart, Lpart, Nq, Nk, group, num_splits, scale * LOG2E,
                                      HEAD_D=d, D_PAD=pad_dim(d), SINGLE=single, Br=Br, Bc=Bc)
    if not single:
        _merge[(Tr, B * Hkv)](o, Opart, Mpart, Lpart, Nq, group, num_splits, HEAD_D=d, D_PAD=pad_dim(d), Br=Br)
    return o
