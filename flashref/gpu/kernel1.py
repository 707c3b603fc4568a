"""Kernel 1: FlashAttention-2 in Triton, written to be read beside ``flashref/flash2.py``.

Each step carries the line of flash2.py (and of the paper's Algorithm 1 or 2) it implements, in
the same order. What the simulator does with ``mem.load``/``mem.store`` is a masked ``tl.load``/
``tl.store`` here (kernels._load_rows: rows past N and columns past d read as zero); what it holds
on chip (``mem.hold``) lives in registers. The outer loop of each algorithm is the grid: one
program per row block i (forward) or column block j (backward) and per (batch, head).

Simplifications against kernel 2 (kernels.py), which computes the same function faster: no TMA,
no split row blocks, no separate unmasked loop (the causal and bound masks are applied in every
visited block, as ``masks.tile_mask`` would be if every block needed it), and dQ only by atomic
adds (flash2.py's read-modify-write of dQ_i, l.15). Softmax in base 2 as in kernel 2: S is kept in
units of log2, P̃ = exp2(S·τ·log2 e − m), so ``L2 = m + log2 ℓ`` is saved.

The variants enter at flash2.py's marked lines: ``[gqa]`` K/V head h // group (the backward's
program owns a K/V head's column block and loops over the group's query heads), ``[window]`` the
loop bounds of the visited tiles (and the band in the mask), ``[softcap]`` and ``[alibi]`` on S_ij
(kernels._modify), ``[softcap]``'s derivative on dS_ij.
"""

from __future__ import annotations

import triton
import triton.language as tl

from .kernels import (
    LOG2E,
    NO_VARIANTS,
    _attend,
    _dropout_key,
    _keep,
    _kv_head,
    _load_rows,
    _load_vec,
    _modify,
    _pieces,
    _store_rows,
    _window_cols,
    _window_rows,
    pad_dim,
)


@triton.jit(do_not_specialize=["seed_key", "thresh", "Y0"])
def _forward(Q, K, V, O, L2, Slopes, Nq, Nk, qk_scale, seed_key, thresh, inv_keep, Hq, group, win_l, win_r,
             sc_in, sc_out, Y0, HEAD_D: tl.constexpr, D_PAD: tl.constexpr, CAUSAL: tl.constexpr, DROPOUT: tl.constexpr,
             GQA: tl.constexpr, WINDOW: tl.constexpr, ALIBI: tl.constexpr, SOFTCAP: tl.constexpr,
             Br: tl.constexpr, Bc: tl.constexpr):
    # Alg.1 l.3: for 1 <= i <= Tr (this program is one i, for one (batch, head) bh).
    i = tl.program_id(0)
    bh = tl.program_id(1).to(tl.int64) + Y0  # Y0: this launch's first (batch, head) (kernels._pieces)
    kv_bh = _kv_head(bh, Hq, group, GQA)  # [gqa] K/V head h // group
    slope2 = 0.0
    if ALIBI:  # [alibi] load this head's slope (× log2 e), once per row block
        slope2 = tl.load(Slopes + bh)
    rows = i * Br + tl.arange(0, Br)  # blocks.tile(i, Br, Nq)
    cols0 = tl.arange(0, Bc)
    offs_d = tl.arange(0, D_PAD)
    h_bh = seed_key
    if DROPOUT:
        h_bh = _dropout_key(seed_key, bh)
    # Alg.1 l.4: load Q_i from HBM to on-chip SRAM, once per row block.
    Q_i = _load_rows(Q + bh * Nq * HEAD_D, rows, Nq, offs_d, HEAD_D, D_PAD, True)  # (Br, d)
    # Alg.1 l.5: on chip, O_i = 0 (Br×d), ℓ_i = 0 (Br), m_i = -inf (Br).
    O_i = tl.zeros([Br, D_PAD], dtype=tl.float32)  # unscaled
    l_i = tl.zeros([Br], dtype=tl.float32)
    m_i = tl.zeros([Br], dtype=tl.float32) - float("inf")
    # Alg.1 l.6: for 1 <= j <= Tc; causal: stop after the last block_visited (a key <= the last query).
    n_cols = Nk
    first = 0
    if CAUSAL:
        n_cols = tl.minimum(Nk, (i + 1) * Br)
    if WINDOW:  # [window] from the first to the last tile_visited: the tiles the band reaches
        first, _a, _b, n_cols = _window_cols(i * Br, Nk, win_l, win_r, Br, Bc)
    for start in range(first, n_cols, Bc):
        cols = start + cols0  # blocks.tile(j, Bc, Nk)
        # Alg.1 l.7: load K_j, V_j from HBM to on-chip SRAM.
        K_j = _load_rows(K + kv_bh * Nk * HEAD_D, cols, Nk, offs_d, HEAD_D, D_PAD, True)  # (Bc, d)
        V_j = _load_rows(V + kv_bh * Nk * HEAD_D, cols, Nk, offs_d, HEAD_D, D_PAD, True)  # (Bc, d)
        # Alg.1 l.8: S_ij = τ Q_i K_jᵀ (in log2 units: τ·log2 e), then [softcap], [alibi].
        if SOFTCAP or ALIBI:
            S_ij, _T = _modify(tl.dot(Q_i, tl.trans(K_j)), rows[:, None], cols[None, :], qk_scale, slope2, sc_in,
                              sc_out, ALIBI, SOFTCAP)
        else:
            S_ij = tl.dot(Q_i, tl.trans(K_j)) * qk_scale  # (Br, Bc)
        # MASK: keys past Nk, and keys after the query when causal (outside the band: [window]).
        S_ij = tl.where(_attend(rows[:, None], cols[None, :], Nk, CAUSAL, WINDOW, win_l, win_r), S_ij, float("-inf"))
        # Alg.1 l.9: m_i^new = max(m_i, rowmax(S_ij)); P̃_ij = exp(S_ij − m_i^new);
        #            ℓ_i^new = e^{m_i − m_i^new} ℓ_i + rowsum(P̃_ij).
        m_new = tl.maximum(m_i, tl.max(S_ij, 1))  # (Br,)
        m_safe = m_new
        if WINDOW:  # a row with nothing to attend to yet: subtract 0, never NaN (flash2.py's m_safe)
            m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        P_tilde = tl.math.exp2(S_ij - m_safe[:, None])  # (Br, Bc)
        alpha = tl.math.exp2(m_i - m_safe)  # (Br,)
        l_i = alpha * l_i + tl.sum(P_tilde, 1)
        if DROPOUT:
            # Dropout on the tile, regenerated from (seed, head, row, column): dropout.py's hash.
            P_tilde = tl.where(_keep(h_bh, rows[:, None], cols[None, :], thresh), P_tilde * inv_keep, 0.0)
        # Alg.1 l.10: O_i = diag(e^{m_i − m_i^new}) O_i + P̃_ij V_j (the printed ^{−1} is a typo).
        O_i = alpha[:, None] * O_i + tl.dot(P_tilde.to(V_j.dtype), V_j)  # (Br, d)
        m_i = m_new
    # Alg.1 l.11: end for.
    # Alg.1 l.12: O_i = diag(ℓ_i)^{−1} O_i, once per row block (ℓ_i > 0: key 0 is always visible;
    # [window] ℓ_i = 0 for a fully masked row: O_i = 0, and L_i below is -inf).
    l_div = l_i
    if WINDOW:
        l_div = tl.where(l_i == 0.0, 1.0, l_i)
    O_i = O_i / l_div[:, None]
    # Alg.1 l.13: L_i = m_i + log(ℓ_i) (base 2 here; a fully masked row: m_i = -inf, log2 of 1, never of 0).
    L_i = m_i + tl.math.log2(l_div)
    # Alg.1 l.14: write O_i to HBM; l.15: write L_i to HBM. Once each per row block.
    _store_rows(O + bh * Nq * HEAD_D, rows, Nq, offs_d, O_i, HEAD_D, D_PAD)
    tl.store(L2 + bh * Nq + rows, L_i, mask=rows < Nq)


@triton.jit(do_not_specialize=["seed_key", "thresh", "Y0"])
def _backward(Q, K, V, dO, L2, D, dQ, dK, dV, Slopes, Nq, Nk, scale, qk_scale, seed_key, thresh, inv_keep, group,
              win_l, win_r, sc_in, sc_out, Y0, HEAD_D: tl.constexpr, D_PAD: tl.constexpr, CAUSAL: tl.constexpr,
              DROPOUT: tl.constexpr, WINDOW: tl.constexpr, ALIBI: tl.constexpr, SOFTCAP: tl.constexpr,
              Br: tl.constexpr, Bc: tl.constexpr):
    # (Alg.2 l.3, dQ = 0 in HBM, and l.4, D = rowsum(dO ∘ O), ran in kernels._bwd_preprocess.)
    # Alg.2 l.5: for 1 <= j <= Tc (this program is one j, for one (batch, K/V head) kv_bh).
    j = tl.program_id(0)
    kv_bh = tl.program_id(1).to(tl.int64) + Y0  # Y0: this launch's first (batch, K/V head) (kernels._pieces)
    cols = j * Bc + tl.arange(0, Bc)  # blocks.tile(j, Bc, Nk)
    rows0 = tl.arange(0, Br)
    offs_d = tl.arange(0, D_PAD)
    # Alg.2 l.6: load K_j, V_j from HBM to on-chip SRAM.
    K_j = _load_rows(K + kv_bh * Nk * HEAD_D, cols, Nk, offs_d, HEAD_D, D_PAD, True)  # (Bc, d)
    V_j = _load_rows(V + kv_bh * Nk * HEAD_D, cols, Nk, offs_d, HEAD_D, D_PAD, True)  # (Bc, d)
    # Alg.2 l.7: initialise dK_j = 0, dV_j = 0 on SRAM.
    dK_j = tl.zeros([Bc, D_PAD], dtype=tl.float32)
    dV_j = tl.zeros([Bc, D_PAD], dtype=tl.float32)
    # Alg.2 l.8: for 1 <= i <= Tr; causal: from the first block_visited row block (a query >= key j·Bc).
    i_start = 0
    i_end = Nq
    if CAUSAL:
        i_start = (j * Bc // Br) * Br
    if WINDOW:  # [window] from the first to the last row block whose band reaches this column block
        i_start, _a, _b, i_end = _window_rows(j * Bc, Nq, win_l, win_r, Br, Bc)
    # [gqa] the group's query heads kv_bh·group + g (one head without GQA) add into the same dK_j, dV_j.
    for g in range(0, group):
        bh = kv_bh * group + g
        h_bh = seed_key
        if DROPOUT:
            h_bh = _dropout_key(seed_key, bh)
        slope2 = 0.0
        if ALIBI:  # [alibi] this query head's slope (× log2 e)
            slope2 = tl.load(Slopes + bh)
        for start in range(i_start, i_end, Br):
            rows = start + rows0  # blocks.tile(i, Br, Nq)
            # Alg.2 l.9: load Q_i, dO_i, L_i, D_i (dQ_i is read and written by the atomic add of l.15).
            Q_i = _load_rows(Q + bh * Nq * HEAD_D, rows, Nq, offs_d, HEAD_D, D_PAD, True)  # (Br, d)
            dO_i = _load_rows(dO + bh * Nq * HEAD_D, rows, Nq, offs_d, HEAD_D, D_PAD, True)  # (Br, d)
            L_i = _load_vec(L2 + bh * Nq, rows, Nq, True)  # (Br,)
            D_i = _load_vec(D + bh * Nq, rows, Nq, True)  # (Br,)
            # Alg.2 l.10: S_ij = τ Q_i K_jᵀ (log2 units), [softcap], [alibi], masked.
            if SOFTCAP or ALIBI:
                S_ij, T_ij = _modify(tl.dot(Q_i, tl.trans(K_j)), rows[:, None], cols[None, :], qk_scale, slope2,
                                     sc_in, sc_out, ALIBI, SOFTCAP)
            else:
                S_ij = tl.dot(Q_i, tl.trans(K_j)) * qk_scale  # (Br, Bc)
            attend = _attend(rows[:, None], cols[None, :], Nk, CAUSAL, WINDOW, win_l, win_r) & (rows[:, None] < Nq)
            # Alg.2 l.11: P_ij = exp(S_ij − L_i); 0 where masked (a fully masked row's L_i = -inf too).
            P_ij = tl.where(attend, tl.math.exp2(S_ij - L_i[:, None]), 0.0)  # (Br, Bc)
            # Alg.2 l.12: dV_j ← dV_j + (P_ij ∘ Z_ij)ᵀ dO_i (Z regenerated from the seed).
            P_dropped = P_ij
            if DROPOUT:
                keep = _keep(h_bh, rows[:, None], cols[None, :], thresh)
                P_dropped = tl.where(keep, P_ij * inv_keep, 0.0)
            dV_j = dV_j + tl.dot(tl.trans(P_dropped.to(dO_i.dtype)), dO_i)  # (Bc, d)
            # Alg.2 l.13: dP_ij = dO_i V_jᵀ (and ∘ Z_ij: the gradient of dropout).
            dP_ij = tl.dot(dO_i, tl.trans(V_j))  # (Br, Bc)
            if DROPOUT:
                dP_ij = tl.where(keep, dP_ij * inv_keep, 0.0)
            # Alg.2 l.14: dS_ij = P_ij ∘ (dP_ij − D_i), then τ (the scale's gradient).
            dS_ij = P_ij * (dP_ij - D_i[:, None]) * scale  # (Br, Bc)
            if SOFTCAP:  # [softcap] dS_ij ∘ (1 − tanh²)
                dS_ij = dS_ij * (1.0 - T_ij * T_ij)
            # Alg.2 l.15: dQ_i ← dQ_i + dS_ij K_j, written back to HBM: an fp32 atomic add, since the
            # programs of every column block j add into the same dQ_i.
            dq_ptrs = dQ + bh * Nq * HEAD_D + rows[:, None] * HEAD_D + offs_d[None, :]
            tl.atomic_add(dq_ptrs, tl.dot(dS_ij.to(K_j.dtype), K_j),
                          mask=(rows[:, None] < Nq) & (offs_d[None, :] < HEAD_D), sem="relaxed")
            # Alg.2 l.16: dK_j ← dK_j + dS_ijᵀ Q_i.
            dK_j = dK_j + tl.dot(tl.trans(dS_ij.to(Q_i.dtype)), Q_i)  # (Bc, d)
    # Alg.2 l.17: end for.
    # Alg.2 l.18: write dK_j, dV_j to HBM, once per column block.
    _store_rows(dK + kv_bh * Nk * HEAD_D, cols, Nk, offs_d, dK_j, HEAD_D, D_PAD)
    _store_rows(dV + kv_bh * Nk * HEAD_D, cols, Nk, offs_d, dV_j, HEAD_D, D_PAD)
    # (Alg.2 l.20, return dQ: kernels._bwd_dq_scale casts the fp32 dQ.)


def forward(q, k, v, o, L2, causal, scale, cfg, seed_key, thresh, inv_keep, dropout, var=NO_VARIANTS):
    B, H, Nq, d = q.shape
    t = cfg.fwd
    slopes, win_l, win_r, sc_in, sc_out = var.args(scale)
    for y0, n in _pieces(B * H):  # grids of more than MAX_GRID_Y rows launch in pieces
        _forward[(triton.cdiv(Nq, t.block_m), n)](
            q, k, v, o, L2, slopes, Nq, k.shape[2], scale * LOG2E, seed_key, thresh, inv_keep, H, var.group, win_l,
            win_r, sc_in, sc_out, y0, HEAD_D=d, D_PAD=pad_dim(d), CAUSAL=causal, DROPOUT=dropout, **var.flags(),
            Br=t.block_m, Bc=t.block_n, num_warps=t.warps, num_stages=t.stages)


def backward(q, k, v, L2, do, dq_acc, dk, dv, D, causal, scale, cfg, seed_key, thresh, inv_keep, dropout,
             var=NO_VARIANTS):
    B, H, Nq, d = q.shape
    Nk = k.shape[2]
    t = cfg.dkdv
    slopes, win_l, win_r, sc_in, sc_out = var.args(scale)
    flags = var.flags()
    flags.pop("GQA")  # the backward's group loop runs for any group size
    for y0, n in _pieces(B * (H // var.group)):
        _backward[(triton.cdiv(Nk, t.block_n), n)](
            q, k, v, do, L2, D, dq_acc, dk, dv, slopes, Nq, Nk, scale, scale * LOG2E, seed_key, thresh, inv_keep,
            var.group, win_l, win_r, sc_in, sc_out, y0, HEAD_D=d, D_PAD=pad_dim(d), CAUSAL=causal,
            DROPOUT=dropout, **flags, Br=t.block_m, Bc=t.block_n, num_warps=t.warps, num_stages=t.stages)
