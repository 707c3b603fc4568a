"""Triton kernels: FlashAttention-2's Algorithm 1 (forward) and Algorithm 2 (backward) on a real GPU.

Two kernels, numbered as llm.c's ``dev/cuda`` numbers its versions, both checked against the same
float64 oracle (``tests/test_gpu_triton.py``) and both timed by ``python -m flashref bench``:

* **kernel 1** (``kernel1.py``): the readable one. It follows ``flashref/flash2.py`` line by line:
  one program per row block (forward) or column block (backward, dQ by atomic adds), plain masked
  pointer loads, the causal mask applied in every visited block.
* **kernel 2** (this file): the fast one. The same lines of the paper (each step carries the line
  it implements, ``# FA2 Alg.1 l.9 (flash2.py): ...``) plus what the H100 rewards, below.

What changes on hardware, in both:

* one *program* (a thread block) runs one iteration of the outer loop (FA2 §3.2);
* "load to SRAM" is ``tl.load`` into registers/shared memory, chosen by the compiler;
* softmax uses ``exp2``: log2(e) is folded into the scale, so S is kept in base-2 units and the
  saved statistic is the base-2 log-sum-exp ``L2 = m + log2(ℓ)`` (= L · log2 e);
* any head dimension 1 <= d <= 256: tiles are ``D_PAD = max(16, next power of two of d)`` wide and
  every load masks the columns past d to zero (``_load_rows``), so the padding lives in registers
  and shared memory only, never in HBM. Padded, the matmuls run over D_PAD columns
  (``iomodel.triton.padding_waste(d)``: 37.5% wasted at d = 80 or 160). So the forward and the
  dK/dV kernel (``Config.dsplit``, ``dsplit_bwd``: on by default where measured faster) split d into
  two column tiles instead, a power of two and a rest (``dim_split``: 96 = 64 + 32, 80 = 64 + 16),
  and waste nothing there; the deterministic backward still pads;
* dropout (``DROPOUT``, a constexpr: the no-dropout kernel has no RNG code) regenerates the keep
  mask of each tile from (seed, batch·head, row, column) with ``flashref/dropout.py``'s hash, in
  uint64 arithmetic, so the GPU drops exactly the entries numpy drops for the same seed;
* the backward (Algorithm 2): a pre-pass computes D = rowsum(dO ∘ O) (Alg.2 l.4) and zeroes an
  fp32 dQ in HBM (l.3); one kernel over column blocks j owns dK_j, dV_j on chip (l.5–19) and adds
  each dS_ij K_j into dQ_i with fp32 atomic adds (l.15, as FA2's CUDA code, issue #815); a last pass
  scales dQ by τ and casts it. With ``deterministic=True`` (``dq_acc=None``) a second kernel over row
  blocks keeps dQ_i on chip instead (7 matmuls per block pair instead of 5, no atomics).

What kernel 2 adds (figures/gpu/NOTES.md has every version's numbers on an H100), each a field of
:class:`Config` (no environment variables: only the command-line tools read flags):

* ``tma``: on Hopper, Q, K, V are loaded through TMA tensor descriptors (+6–34% over pointers), when
  d is a power of two;
* ``split``: one program runs two row blocks of BLOCK_M // 2 rows that share each K_j, V_j load, and
  issues both S matmuls before either softmax (d = 128 default);
* ``heads_first``: causal launches put (batch, head) on the grid's fast axis, so every head's longest
  row blocks run first and the short ones fill the last wave;
* ``persistent``: one program per SM walks the (row block, head) tiles, longest first when causal;
* ``warp_specialize``: Triton's automatic warp specialisation of the K/V loop (``tl.range(...,
  warp_specialize=True)``, Triton >= 3.5; Triton 3.6 fails to compile it on the loops with the
  variants' bounds, so it is experimental: off by default, and its CUDA test is an expected failure);
* ``stagger``: non-causal dK/dV programs start their row loop at their own block and wrap around;
* ``lazy``: FlashAttention-4's conditional rescaling (measured slower here; off);
* the causal mask only in the blocks the diagonal (or a ragged end) crosses, and ``EVEN`` (both
  lengths multiples of the blocks) compiles the loads without row masks.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

import triton
import triton.language as tl

from ..iomodel.triton import dim_split  # the forward's column tiles (pure Python, shared with the IO model)
from . import MAX_GRID_Y  # (gpu/__init__.py: iomodel.dram reads it without triton)
from .config import (  # noqa: F401  (kernel 2's configuration, re-exported: kernels.Config, kernels.Tiles, ...)
    DKDV,
    DKDV_ATOMIC,
    DKDV_DSPLIT,
    DQ,
    DSPLIT_MIN_PAD,
    DSPLIT_MIN_PAD_CAUSAL,
    FWD,
    FWD_DSPLIT,
    FWD_SPLIT,
    HEADS_FIRST_CAUSAL,
    INTERPRET,
    INTERPRET_TILES,
    SPLIT_DIMS,
    Config,
    Tiles,
    pad_dim,
)

LOG2E = 1.4426950408889634  # log2(e): exp(x) = exp2(x * LOG2E)
RESCALE_SLACK = tl.constexpr(8.0)  # lazy rescaling: P̃ may reach 2^8 before O_i, ℓ_i are rescaled
GOLDEN = tl.constexpr(0x9E3779B97F4A7C15)  # dropout.py's _GOLDEN
MAX_HEAD_DIM = 256
# Whether the kernels below run in Triton's interpreter: triton.jit reads TRITON_INTERPRET once, as it decorates
# them (at this import), so setting it later changes nothing here (gpu._check refuses the mismatch by name)
INTERPRETED = os.environ.get("TRITON_INTERPRET", "0") == "1"


def _pieces(n: int):
    """A grid's y of ``n`` programs (the kernels' (batch, head) axis) as launches of at most ``gpu.MAX_GRID_Y``,
    CUDA's bound: ``(first, count)`` pairs, none for ``n = 0``. Each kernel adds its piece's first row ``Y0`` to
    ``tl.program_id(1)``; the pieces run one after the other, in the order one grid would have launched them."""
    return [(first, min(MAX_GRID_Y, n - first)) for first in range(0, n, MAX_GRID_Y)]


def use_tma(cfg: Config, d: int, device, *tensors) -> bool:
    """Load Q, K, V through TMA descriptors: Hopper and later, d a power of two, not in the interpreter, and
    every one of ``tensors`` non-empty and starting on a 16-byte boundary (a descriptor's shape must be
    positive and its base aligned; a contiguous view into a larger buffer need not be)."""
    if INTERPRET or not cfg.tma or cfg.version == 1 or device.type != "cuda" or d != pad_dim(d):
        return False
    if any(x.numel() == 0 or x.data_ptr() % 16 for x in tensors):
        return False
    import torch
    try:
        from triton.tools.tensor_descriptor import TensorDescriptor  # noqa: F401
    except ImportError:
        return False
    return torch.cuda.get_device_capability(device)[0] >= 9


# --------------------------------------------------------------------------------------------
# dropout: flashref/dropout.py's keyed hash, in uint64
# --------------------------------------------------------------------------------------------

_M64 = (1 << 64) - 1


def _mix_int(x: int) -> int:
    """dropout._mix on one Python int (wrapping at 64 bits)."""
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _M64
    return x ^ (x >> 31)


def dropout_args(p: float, seed: int) -> tuple[int, int, float]:
    """(seed key, threshold, 1/(1-p)) for the kernels.

    The key is dropout.uniform's first step, mix(seed·G + G), done here once; it is passed as a
    signed int64 (two's complement) and reinterpreted as uint64 in the kernel. An entry is kept when
    ``u = (h >> 11) / 2^53 >= p``, i.e. when the integer ``h >> 11 >= ceil(p · 2^53)`` (exact: both
    sides are integers below 2^53, and p · 2^53 is exact in double precision)."""
    key = _mix_int(((seed & _M64) * 0x9E3779B97F4A7C15 + 0x9E3779B97F4A7C15) & _M64)
    key = key - (1 << 64) if key >= 1 << 63 else key
    return key, math.ceil(p * 2.0 ** 53), 1.0 / (1.0 - p)


@triton.jit
def _mix(x):
    # dropout._mix (SplitMix64's finaliser); uint64 arithmetic wraps as numpy's does.
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9
    x = (x ^ (x >> 27)) * 0x94D049BB133111EB
    return x ^ (x >> 31)


@triton.jit
def _dropout_key(seed_key, bh):
    # dropout.uniform: h = mix(mix(seed·G + G) ^ g·G), g the linear (batch, head) index
    return _mix(seed_key.to(tl.int64).to(tl.uint64, bitcast=True) ^ (bh.to(tl.uint64) * GOLDEN))


@triton.jit
def _keep(h_bh, rows, cols, thresh):
    # dropout.uniform: h = mix(mix(h ^ (i + 1)·G) ^ (j + 2)·G); kept iff (h >> 11) / 2^53 >= p.
    # rows and cols broadcast against each other: (Br, 1) × (1, Bc), or transposed.
    h_i = _mix(h_bh ^ ((rows.to(tl.uint64) + 1) * GOLDEN))
    h = _mix(h_i ^ ((cols.to(tl.uint64) + 2) * GOLDEN))
    return (h >> 11) >= thresh.to(tl.int64).to(tl.uint64)


@triton.jit(do_not_specialize=["seed_key", "thresh", "Z0"])
def _dropout_mask_kernel(Mask, seed_key, thresh, Nq, Nk, Z0, BLOCK: tl.constexpr):
    # The keep mask itself, for tests: the same _keep the attention kernels call.
    bh = tl.program_id(2).to(tl.int64) + Z0  # Z0: this launch's first (batch, head) (_pieces)
    offs_m = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    offs_n = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    keep = _keep(_dropout_key(seed_key, bh), offs_m[:, None], offs_n[None, :], thresh)
    ok = (offs_m[:, None] < Nq) & (offs_n[None, :] < Nk)
    tl.store(Mask + bh * Nq * Nk + offs_m[:, None] * Nk + offs_n[None, :], keep.to(tl.int8), mask=ok)


def dropout_mask(mask, p, seed):
    """Fill ``mask`` (int8, (B, H, Nq, Nk)) with the kernels' keep mask for (p, seed)."""
    B, H, Nq, Nk = mask.shape
    key, thresh, _ = dropout_args(p, seed)
    BLOCK = 16 if INTERPRET else 64
    for z0, nz in _pieces(B * H):
        _dropout_mask_kernel[(triton.cdiv(Nq, BLOCK), triton.cdiv(Nk, BLOCK), nz)](mask, key, thresh, Nq, Nk, z0,
                                                                                   BLOCK=BLOCK)


# --------------------------------------------------------------------------------------------
# loads and stores: one masked-load helper
# --------------------------------------------------------------------------------------------

@triton.jit
def _load_rows(base, offs_r, n_rows, offs_d, HEAD_D: tl.constexpr, D_PAD: tl.constexpr, MASK_ROWS: tl.constexpr):
    # Rows offs_r of a row-major (n_rows, HEAD_D) matrix as an (R, D_PAD) tile. Rows past n_rows
    # (when MASK_ROWS) and columns past HEAD_D (when D_PAD > HEAD_D) load as 0: the padding to a
    # power of two exists on chip only, and a zero column adds nothing to Q K^T, P V or dS K.
    ptrs = base + offs_r[:, None] * HEAD_D + offs_d[None, :]
    if MASK_ROWS:
        if D_PAD > HEAD_D:
            x = tl.load(ptrs, mask=(offs_r[:, None] < n_rows) & (offs_d[None, :] < HEAD_D), other=0.0)
        else:
            x = tl.load(ptrs, mask=offs_r[:, None] < n_rows, other=0.0)
    else:
        if D_PAD > HEAD_D:
            x = tl.load(ptrs, mask=offs_d[None, :] < HEAD_D, other=0.0)
        else:
            x = tl.load(ptrs)
    return x


@triton.jit
def _load_vec(base, offs, n, MASK: tl.constexpr):
    # A per-row statistic (L_i, D_i): rows past n load as 0 when MASK.
    if MASK:
        x = tl.load(base + offs, mask=offs < n, other=0.0)
    else:
        x = tl.load(base + offs)
    return x


@triton.jit
def _store_rows(base, offs_r, n_rows, offs_d, x, HEAD_D: tl.constexpr, D_PAD: tl.constexpr):
    # Write an (R, D_PAD) tile's rows < n_rows and columns < HEAD_D, cast to the output's dtype.
    ptrs = base + offs_r[:, None] * HEAD_D + offs_d[None, :]
    ok = offs_r[:, None] < n_rows
    if D_PAD > HEAD_D:
        ok = ok & (offs_d[None, :] < HEAD_D)
    tl.store(ptrs, x.to(base.dtype.element_ty), mask=ok)


@triton.jit
def _attend(offs_m, offs_n, Nk, CAUSAL: tl.constexpr, WINDOW: tl.constexpr, win_l, win_r):
    # Which (query, key) pairs exist: keys past Nk never; causal (top-left): key j <= query i.
    # [window] the band i − win_l <= j <= i + win_r instead (causal already folded into win_r <= 0).
    # offs_m and offs_n broadcast: (Br, 1) × (1, Bc), or transposed in the dK/dV kernel.
    ok = offs_n < Nk
    if WINDOW:
        ok = ok & (offs_n >= offs_m - win_l) & (offs_n <= offs_m + win_r)
    elif CAUSAL:
        ok = ok & (offs_m >= offs_n)
    return ok


@triton.jit
def _tanh(x, NEAR_ZERO: tl.constexpr):
    # tanh is odd: computed on a = |x| and given x's sign, so that tanh(−x) is −tanh(x) to the bit.
    a = tl.abs(x)
    # tanh(a) = 1 − 2 / (e^{2a} + 1): one exp2 on the exponential unit (and a reciprocal). On a at most
    # 16: tanh is 1 in fp32 from a ≈ 9 on, and e^{2a} then never overflows.
    t = 1.0 - 2.0 / (tl.math.exp2(tl.minimum(a, 16.0) * (2.0 * 1.4426950408889634)) + 1.0)
    if NEAR_ZERO:
        # Near 0 that formula cancels: it is 1 minus a number near 1, so its error is fp32's rounding of 1
        # (about 1e-7) however small tanh a is, and c·tanh(s/c) is off by c·1e-7 (0.1 at c = 1e6). For
        # a < 0.3, tanh's odd Taylor series instead, to a¹¹ (the next term, 21844a¹³/6081075, is under
        # 1e-9 of a there): a − a³/3 + 2a⁵/15 − 17a⁷/315 + 62a⁹/2835 − 1382a¹¹/155925, by Horner in a².
        # It runs on a clamped to 0.3, where it is used, so that a² stays finite for any x. It costs: the
        # causal softcap forward took 1.8x as long with it on an H100 (figures/gpu/h100-variants-softcap.json,
        # flashref_series against flashref), so the launcher asks for it only where the output's dtype
        # would resolve the formula's error (Variants.tanh_near_zero).
        r = tl.minimum(a, 0.3)
        z = r * r
        poly = -1.0 / 3 + z * (2.0 / 15 + z * (-17.0 / 315 + z * (62.0 / 2835 + z * (-1382.0 / 155925))))
        t = tl.where(a < 0.3, r + r * z * poly, t)
    return tl.where(x < 0, -t, t)


@triton.jit
def _modify(S, offs_m, offs_n, qk_scale, slope2, sc_in, sc_out, ALIBI: tl.constexpr, SOFTCAP: tl.constexpr):
    # The variants' score modifiers on an unscaled tile S = Q_i K_jᵀ, in flash2.py's order
    # (variants.modify_scores): scale, [softcap] c·tanh(s/c), [alibi] − slope·|i − j|. Returned in
    # base-2 units (× log2 e, folded into the constants: sc_in = τ/c, sc_out = c·log2 e, slope2 =
    # slope·log2 e), with T = tanh(τS/c) for the backward's softcap derivative 1 − T² (else S).
    T = S
    if SOFTCAP:
        T = _tanh(S * sc_in, SOFTCAP == 2)
        S = sc_out * T
    else:
        S = S * qk_scale
    if ALIBI:
        S = S - slope2 * tl.abs((offs_m - offs_n).to(tl.float32))
    return S, T


@triton.jit
def _window_cols(start_m, Nk, win_l, win_r, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    # [window] the key columns row block [start_m, start_m + Br) visits (flash2.py's tile_visited and
    # tile_inside as loop bounds): [j_lo, j_a) and [j_b, j_hi) are boundary tiles (masked), [j_a, j_b)
    # tiles wholly inside the band (and inside Nk), unmasked. Every bound but j_hi is a tile edge.
    j_lo = (tl.maximum(start_m - win_l, 0) // BLOCK_N) * BLOCK_N
    j_hi = tl.minimum(Nk, start_m + BLOCK_M + win_r)
    j_lo = tl.minimum(j_lo, j_hi)
    j_a = tl.cdiv(tl.maximum(start_m + BLOCK_M - 1 - win_l, 0), BLOCK_N) * BLOCK_N
    j_a = tl.minimum(tl.maximum(j_a, j_lo), j_hi)
    j_b = tl.minimum((start_m + win_r + 1) // BLOCK_N, Nk // BLOCK_N) * BLOCK_N
    j_b = tl.maximum(j_b, j_a)
    return j_lo, j_a, j_b, j_hi


@triton.jit
def _row_block_cols(start_m, Nk, win_l, win_r, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                    CAUSAL: tl.constexpr, WINDOW: tl.constexpr):
    # The key columns row block [start_m, start_m + Br) visits, as (j_lo, j_a, j_b, j_hi): boundary tiles
    # [j_lo, j_a) and [j_b, j_hi) are masked, [j_a, j_b) are not. Shared by the forward and the dQ kernel.
    if WINDOW:
        # [window] only the K/V tiles the band [i − left, i + right] reaches (tile_visited); the
        # boundary tiles masked, those wholly inside it not (tile_inside).
        j_lo, j_a, j_b, j_hi = _window_cols(start_m, Nk, win_l, win_r, BLOCK_M, BLOCK_N)
    else:
        # Causal block skipping (FA2 §3.1.1): keys past the block's last query are never visited;
        # blocks wholly at or below the first query need no mask.
        if CAUSAL:
            j_hi = tl.minimum(Nk, start_m + BLOCK_M)
            n_full = tl.minimum(start_m + 1, Nk) // BLOCK_N
        else:
            j_hi = Nk
            n_full = Nk // BLOCK_N
        j_lo = 0
        j_a = 0
        j_b = n_full * BLOCK_N
    return j_lo, j_a, j_b, j_hi


@triton.jit
def _window_rows(start_n, Nq, win_l, win_r, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    # [window] the transpose for column block [start_n, start_n + Bc): the query rows that see one
    # of its keys (i in [j − win_r, j + win_l]); [i_lo, i_a) and [i_b, i_hi) masked, [i_a, i_b) not.
    # It is _window_cols with rows and columns swapped: left and right trade places, so do the tiles.
    return _window_cols(start_n, Nq, win_r, win_l, BLOCK_N, BLOCK_M)


@triton.jit
def _kv_head(bh, Hq, group, GQA: tl.constexpr):
    # [gqa] the K/V head of (batch, query head) bh: head h uses K/V head h // group (PyTorch's rule).
    if GQA:
        kv_bh = (bh // Hq) * (Hq // group) + (bh % Hq) // group
    else:
        kv_bh = bh
    return kv_bh


# --------------------------------------------------------------------------------------------
# forward (FlashAttention-2 Algorithm 1)
# --------------------------------------------------------------------------------------------

@triton.jit
def _load_kv(K_base, V_base, desc_k, desc_v, kv_row0, start_n, offs_n, offs_d, Nk,
             HEAD_D: tl.constexpr, D_PAD: tl.constexpr, EVEN: tl.constexpr, TMA: tl.constexpr):
    # FA2 Alg.1 l.7 (flash2.py): load K_j (as K_jᵀ, d × Bc) and V_j (Bc × d) from HBM.
    if TMA:  # the Hopper bulk tensor copy engine (TMA); rows past this head's Nk are masked later
        K_jT = tl.trans(desc_k.load([kv_row0 + start_n, 0]))  # (d, Bc)
        V_j = desc_v.load([kv_row0 + start_n, 0])  # (Bc, d)
    else:
        K_jT = tl.trans(_load_rows(K_base, offs_n, Nk, offs_d, HEAD_D, D_PAD, not EVEN))  # (d, Bc)
        V_j = _load_rows(V_base, offs_n, Nk, offs_d, HEAD_D, D_PAD, not EVEN)  # (Bc, d)
    return K_jT, V_j


@triton.jit
def _online_softmax(S_ij, m_i, l_i, acc, V_j, qk_scale, h_bh, offs_m, offs_n, thresh,
                    LAZY: tl.constexpr, DROPOUT: tl.constexpr, SAFE: tl.constexpr, acc_b, V_b, D_B: tl.constexpr):
    # acc_b, V_b: the second column tile of O_i and V_j when the head dimension is split (D_B > 0,
    # dim_split); otherwise placeholders, and every line that uses them is compiled out.
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
            if D_B > 0:
                acc_b = acc_b * alpha[:, None]
            l_i = l_i * alpha
            m_i = m_new
    else:
        if SAFE:  # [window] a row with nothing to attend to yet: subtract 0, never NaN (flash2.py's m_safe)
            alpha = tl.math.exp2(m_i - tl.where(m_new == float("-inf"), 0.0, m_new))
        else:
            alpha = tl.math.exp2(m_i - m_new)  # e^{m_i − m_i^new}, (Br,)
        acc = acc * alpha[:, None]  # l.10's diag(e^{m_i − m_i^new}) O_i (the printed ^{-1} is a typo)
        if D_B > 0:
            acc_b = acc_b * alpha[:, None]
        l_i = l_i * alpha  # l.9's e^{m_i − m_i^new} ℓ_i
        m_i = m_new
    # FA2 Alg.1 l.9 (flash2.py): P̃_ij = exp(S_ij − m_i^new); ℓ_i^new = e^{..} ℓ_i + rowsum(P̃_ij).
    if SAFE:
        P_tilde_ij = tl.math.exp2(S_ij * qk_scale - tl.where(m_i == float("-inf"), 0.0, m_i)[:, None])
    else:
        P_tilde_ij = tl.math.exp2(S_ij * qk_scale - m_i[:, None])  # (Br, Bc)
    l_i = l_i + tl.sum(P_tilde_ij, 1)
    if DROPOUT:  # ℓ_i sums P̃ before dropout (flash2.py); Z's 1/(1-p) is applied once, in _finish
        P_tilde_ij = tl.where(_keep(h_bh, offs_m[:, None], offs_n[None, :], thresh), P_tilde_ij, 0.0)
    # FA2 Alg.1 l.10 (flash2.py): O_i = diag(e^{m_i − m_i^new}) O_i + P̃_ij V_j (un-scaled O).
    acc = tl.dot(P_tilde_ij.to(V_j.dtype), V_j, acc)  # (Br, d) fp32
    if D_B > 0:  # the second column tile of O_i: P̃_ij V_j[:, D_A:]
        acc_b = tl.dot(P_tilde_ij.to(V_b.dtype), V_b, acc_b)
    return m_i, l_i, acc, acc_b


@triton.jit
def _fwd_inner(acc, l_i, m_i, Q_i, K_base, V_base, desc_k, desc_v, kv_row0, offs_m, offs_d, j_lo, j_hi, Nk,
               qk_scale, h_bh, thresh, BLOCK_N: tl.constexpr, HEAD_D: tl.constexpr, D_PAD: tl.constexpr,
               CAUSAL: tl.constexpr, MASKED: tl.constexpr, EVEN: tl.constexpr, TMA: tl.constexpr,
               LAZY: tl.constexpr, DROPOUT: tl.constexpr, WS: tl.constexpr,
               win_l, win_r, slope2, sc_in, sc_out, WINDOW: tl.constexpr, ALIBI: tl.constexpr,
               SOFTCAP: tl.constexpr, acc_b, Q_b, offs_db, D_B: tl.constexpr):
    # win_l, win_r, slope2, sc_in, sc_out: the variants' runtime values (_attend, _modify), unused when
    # their flag is off. D_PAD: the first column tile's width (all of pad_dim(d) unless split); with a
    # split head dimension (D_B > 0) Q_b, offs_db, acc_b are the second tile's Q_i, columns and O_i.
    # The unmasked calls visit full K/V tiles only (j_b is a tile edge within Nk): their loads need no row
    # mask even when Nk is ragged (as the dK/dV kernel's full row blocks: figures/gpu/NOTES-l2.md, "k2writes").
    KV_FULL: tl.constexpr = EVEN or not MASKED
    offs_n0 = tl.arange(0, BLOCK_N)
    for start_n in tl.range(j_lo, j_hi, BLOCK_N, warp_specialize=WS):  # FA2 Alg.1 l.6: for 1 <= j <= Tc
        start_n = tl.multiple_of(start_n, BLOCK_N)
        offs_n = start_n + offs_n0
        # FA2 Alg.1 l.7 (flash2.py): load K_j, V_j.
        K_jT, V_j = _load_kv(K_base, V_base, desc_k, desc_v, kv_row0, start_n, offs_n, offs_d, Nk, HEAD_D, D_PAD,
                             KV_FULL, TMA)
        V_b = V_j
        if D_B > 0:  # the second column tile of K_j, V_j (columns D_A .. D_A + D_B, those past d masked)
            K_bT, V_b = _load_kv(K_base, V_base, desc_k, desc_v, kv_row0, start_n, offs_n, offs_db, Nk, HEAD_D,
                                 D_PAD + D_B, KV_FULL, False)
        # FA2 Alg.1 l.8 (flash2.py): S_ij = τ Q_i K_jᵀ (τ applied in l.9's FMA).
        S_ij = tl.dot(Q_i, K_jT)  # (Br, Bc) fp32, unscaled
        if D_B > 0:  # ... summed over both column tiles: Q_i[:, :D_A] K_j[:, :D_A]ᵀ + Q_i[:, D_A:] K_j[:, D_A:]ᵀ
            S_ij = tl.dot(Q_b, K_bT, S_ij)
        s_scale = qk_scale
        if SOFTCAP or ALIBI:  # [softcap] [alibi] on chip: S_ij is then scaled, in base 2
            S_ij, _ = _modify(S_ij, offs_m[:, None], offs_n[None, :], qk_scale, slope2, sc_in, sc_out,
                              ALIBI, SOFTCAP)
            s_scale = 1.0
        if MASKED:  # only in the blocks the diagonal, the [window]'s edges or a ragged end cross (FA2 §3.1.1)
            S_ij = tl.where(_attend(offs_m[:, None], offs_n[None, :], Nk, CAUSAL, WINDOW, win_l, win_r), S_ij,
                            float("-inf"))
        # FA2 Alg.1 l.9-10 (flash2.py): online softmax and O_i update.
        m_i, l_i, acc, acc_b = _online_softmax(S_ij, m_i, l_i, acc, V_j, s_scale, h_bh, offs_m, offs_n, thresh,
                                               LAZY, DROPOUT, WINDOW, acc_b, V_b, D_B)
    return acc, l_i, m_i, acc_b


@triton.jit
def _fwd_inner_split(acc0, l0, m0, Q0, acc1, l1, m1, Q1, K_base, V_base, desc_k, desc_v, kv_row0, offs_m0,
                     offs_m1, offs_d, j_lo, j_hi, Nk, qk_scale, h_bh, thresh, BLOCK_N: tl.constexpr,
                     HEAD_D: tl.constexpr, D_PAD: tl.constexpr, CAUSAL: tl.constexpr, MASKED: tl.constexpr,
                     EVEN: tl.constexpr, TMA: tl.constexpr, LAZY: tl.constexpr, DROPOUT: tl.constexpr,
                     WS: tl.constexpr, win_l, win_r, slope2, sc_in, sc_out, WINDOW: tl.constexpr,
                     ALIBI: tl.constexpr, SOFTCAP: tl.constexpr):
    # The same loop for two row blocks Q0, Q1 sharing each K_j, V_j. Both S matmuls are issued
    # before either softmax, so the tensor cores work on one half while the other's exp2 runs
    # (FlashAttention-3's intra-warpgroup overlap, left to Triton's scheduler).
    KV_FULL: tl.constexpr = EVEN or not MASKED  # as in _fwd_inner
    offs_n0 = tl.arange(0, BLOCK_N)
    for start_n in tl.range(j_lo, j_hi, BLOCK_N, warp_specialize=WS):  # FA2 Alg.1 l.6 (flash2.py)
        start_n = tl.multiple_of(start_n, BLOCK_N)
        offs_n = start_n + offs_n0
        K_jT, V_j = _load_kv(K_base, V_base, desc_k, desc_v, kv_row0, start_n, offs_n, offs_d, Nk, HEAD_D, D_PAD,
                             KV_FULL, TMA)
        S0 = tl.dot(Q0, K_jT)  # FA2 Alg.1 l.8, first half
        S1 = tl.dot(Q1, K_jT)  # FA2 Alg.1 l.8, second half
        s_scale = qk_scale
        if SOFTCAP or ALIBI:  # [softcap] [alibi]
            S0, _ = _modify(S0, offs_m0[:, None], offs_n[None, :], qk_scale, slope2, sc_in, sc_out, ALIBI, SOFTCAP)
            S1, _ = _modify(S1, offs_m1[:, None], offs_n[None, :], qk_scale, slope2, sc_in, sc_out, ALIBI, SOFTCAP)
            s_scale = 1.0
        if MASKED:
            S0 = tl.where(_attend(offs_m0[:, None], offs_n[None, :], Nk, CAUSAL, WINDOW, win_l, win_r), S0,
                          float("-inf"))
            S1 = tl.where(_attend(offs_m1[:, None], offs_n[None, :], Nk, CAUSAL, WINDOW, win_l, win_r), S1,
                          float("-inf"))
        m0, l0, acc0, _ = _online_softmax(S0, m0, l0, acc0, V_j, s_scale, h_bh, offs_m0, offs_n, thresh,
                                          LAZY, DROPOUT, WINDOW, l0, V_j, 0)  # l.9-10
        m1, l1, acc1, _ = _online_softmax(S1, m1, l1, acc1, V_j, s_scale, h_bh, offs_m1, offs_n, thresh,
                                          LAZY, DROPOUT, WINDOW, l1, V_j, 0)  # l.9-10
    return acc0, l0, m0, acc1, l1, m1


@triton.jit
def _load_q(Q_base, desc_q, q_row0, offs_m, offs_d, Nq, HEAD_D: tl.constexpr, D_PAD: tl.constexpr,
            EVEN: tl.constexpr, TMA: tl.constexpr):
    # FA2 Alg.1 l.4 (flash2.py): load Q_i from HBM, once per row block.
    if TMA:  # rows past Nq belong to the next head (or are zero past the tensor): never stored
        Q_i = desc_q.load([q_row0, 0])  # (Br, d)
    else:
        Q_i = _load_rows(Q_base, offs_m, Nq, offs_d, HEAD_D, D_PAD, not EVEN)  # (Br, d)
    return Q_i


@triton.jit
def _finish(acc, l_i, m_i, O_base, L2_base, offs_m, offs_d, Nq, inv_keep, HEAD_D: tl.constexpr,
            D_PAD: tl.constexpr, DROPOUT: tl.constexpr, SAFE: tl.constexpr, acc_b, offs_db, D_B: tl.constexpr):
    # FA2 Alg.1 l.11 (flash2.py): end for.
    # FA2 Alg.1 l.12 (flash2.py): O_i = diag(ℓ_i)^{-1} O_i, once per row block. (ℓ_i > 0 always:
    # key 0 is visible to every query, top-left causal included.) Dropout's 1/(1-p) here, once.
    l_div = l_i
    if SAFE:  # [window] ℓ_i = 0 only for a fully masked row: O_i = 0 (divide by 1), L_i = -inf
        l_div = tl.where(l_i == 0.0, 1.0, l_i)
    O_i = acc / l_div[:, None]
    if DROPOUT:
        O_i = O_i * inv_keep
    # FA2 Alg.1 l.13 (flash2.py): L_i = m_i + log ℓ_i, in base 2 (m_i is already base 2). A fully masked row
    # ([window]) has m_i = -inf and ℓ_i = 0: log2 of l_div (1 there) gives L_i = -inf without evaluating log2(0).
    L2_i = m_i + tl.math.log2(l_div)
    # FA2 Alg.1 l.14-15 (flash2.py): write O_i and L_i to HBM, once each.
    _store_rows(O_base, offs_m, Nq, offs_d, O_i, HEAD_D, D_PAD)
    if D_B > 0:  # the second column tile of O_i
        O_b = acc_b / l_div[:, None]
        if DROPOUT:
            O_b = O_b * inv_keep
        _store_rows(O_base, offs_m, Nq, offs_db, O_b, HEAD_D, D_PAD + D_B)
    tl.store(L2_base + offs_m, L2_i, mask=offs_m < Nq)


@triton.jit
def _fwd_tile(Q, K, V, O, L2, desc_q, desc_k, desc_v, Slopes, i, bh, Nq, Nk, qk_scale, seed_key, thresh, inv_keep,
              Hq, group, win_l, win_r, sc_in, sc_out,
              HEAD_D: tl.constexpr, D_PAD: tl.constexpr, CAUSAL: tl.constexpr, EVEN: tl.constexpr,
              TMA: tl.constexpr, LAZY: tl.constexpr, SPLIT: tl.constexpr, DROPOUT: tl.constexpr,
              WS: tl.constexpr, GQA: tl.constexpr, WINDOW: tl.constexpr, ALIBI: tl.constexpr,
              SOFTCAP: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, D_B: tl.constexpr):
    # One row block i of one (batch, head) bh: FA2 Alg.1 l.4-15.
    start_m = i * BLOCK_M
    kv_bh = _kv_head(bh, Hq, group, GQA)  # [gqa] query head h reads K/V head h // group
    Q_base = Q + bh * Nq * HEAD_D
    K_base = K + kv_bh * Nk * HEAD_D
    V_base = V + kv_bh * Nk * HEAD_D
    O_base = O + bh * Nq * HEAD_D
    L2_base = L2 + bh * Nq
    q_row0 = (bh * Nq + start_m).to(tl.int32)  # this block's first row in the (B·H·Nq, d) descriptor
    kv_row0 = (kv_bh * Nk).to(tl.int32)  # this head's first row in the (B·Hkv·Nk, d) descriptors
    h_bh = seed_key
    if DROPOUT:
        h_bh = _dropout_key(seed_key, bh)
    slope2 = 0.0
    if ALIBI:  # [alibi] this head's slope (× log2 e), loaded once per row block: the only IO ALiBi costs
        slope2 = tl.load(Slopes + bh)
    j_lo, j_a, j_b, j_hi = _row_block_cols(start_m, Nk, win_l, win_r, BLOCK_M, BLOCK_N, CAUSAL, WINDOW)
    if SPLIT:
        HALF: tl.constexpr = BLOCK_M // 2
        offs_d = tl.arange(0, D_PAD)
        offs_m0 = start_m + tl.arange(0, HALF)
        offs_m1 = start_m + HALF + tl.arange(0, HALF)
        Q0 = _load_q(Q_base, desc_q, q_row0, offs_m0, offs_d, Nq, HEAD_D, D_PAD, EVEN, TMA)  # l.4
        Q1 = _load_q(Q_base, desc_q, q_row0 + HALF, offs_m1, offs_d, Nq, HEAD_D, D_PAD, EVEN, TMA)  # l.4
        # FA2 Alg.1 l.5 (flash2.py): on chip O_i = 0, ℓ_i = 0, m_i = -inf, for both halves.
        acc0 = tl.zeros([HALF, D_PAD], dtype=tl.float32)
        acc1 = tl.zeros([HALF, D_PAD], dtype=tl.float32)
        l0 = tl.zeros([HALF], dtype=tl.float32)
        l1 = tl.zeros([HALF], dtype=tl.float32)
        m0 = tl.zeros([HALF], dtype=tl.float32) - float("inf")
        m1 = tl.zeros([HALF], dtype=tl.float32) - float("inf")
        if WINDOW:  # [window] the left boundary tiles, masked
            acc0, l0, m0, acc1, l1, m1 = _fwd_inner_split(
                acc0, l0, m0, Q0, acc1, l1, m1, Q1, K_base, V_base, desc_k, desc_v, kv_row0, offs_m0, offs_m1,
                offs_d, j_lo, j_a, Nk, qk_scale, h_bh, thresh, BLOCK_N, HEAD_D, D_PAD, CAUSAL, True, EVEN,
                TMA, LAZY, DROPOUT, WS, win_l, win_r, slope2, sc_in, sc_out, WINDOW, ALIBI, SOFTCAP)
        acc0, l0, m0, acc1, l1, m1 = _fwd_inner_split(
            acc0, l0, m0, Q0, acc1, l1, m1, Q1, K_base, V_base, desc_k, desc_v, kv_row0, offs_m0, offs_m1,
            offs_d, j_a, j_b, Nk, qk_scale, h_bh, thresh, BLOCK_N, HEAD_D, D_PAD, CAUSAL, False, EVEN,
            TMA, LAZY, DROPOUT, WS, win_l, win_r, slope2, sc_in, sc_out, WINDOW, ALIBI, SOFTCAP)
        acc0, l0, m0, acc1, l1, m1 = _fwd_inner_split(
            acc0, l0, m0, Q0, acc1, l1, m1, Q1, K_base, V_base, desc_k, desc_v, kv_row0, offs_m0, offs_m1,
            offs_d, j_b, j_hi, Nk, qk_scale, h_bh, thresh, BLOCK_N, HEAD_D, D_PAD, CAUSAL, True, EVEN,
            TMA, LAZY, DROPOUT, WS, win_l, win_r, slope2, sc_in, sc_out, WINDOW, ALIBI, SOFTCAP)
        _finish(acc0, l0, m0, O_base, L2_base, offs_m0, offs_d, Nq, inv_keep, HEAD_D, D_PAD, DROPOUT,
                WINDOW, l0, offs_d, 0)  # l.11-15
        _finish(acc1, l1, m1, O_base, L2_base, offs_m1, offs_d, Nq, inv_keep, HEAD_D, D_PAD, DROPOUT,
                WINDOW, l1, offs_d, 0)  # l.11-15
    else:
        offs_m = start_m + tl.arange(0, BLOCK_M)
        # With a split head dimension (D_B > 0) Q_i, K_j, V_j and O_i are two column tiles each,
        # D_A = D_PAD - D_B and D_B wide (dim_split): every matmul runs on d's columns plus less
        # padding than one pad_dim(d) tile. Otherwise one tile of D_PAD and placeholders for the second.
        D_A: tl.constexpr = D_PAD - D_B
        offs_da = tl.arange(0, D_A)
        # FA2 Alg.1 l.4 (flash2.py): load Q_i.
        Q_i = _load_q(Q_base, desc_q, q_row0, offs_m, offs_da, Nq, HEAD_D, D_A, EVEN, TMA)
        # FA2 Alg.1 l.5 (flash2.py): on chip O_i = 0, ℓ_i = 0, m_i = -inf (fp32 accumulators).
        acc = tl.zeros([BLOCK_M, D_A], dtype=tl.float32)
        l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
        m_i = tl.zeros([BLOCK_M], dtype=tl.float32) - float("inf")
        offs_db = offs_da
        Q_b = Q_i
        acc_b = l_i
        if D_B > 0:
            offs_db = D_A + tl.arange(0, D_B)
            Q_b = _load_rows(Q_base, offs_m, Nq, offs_db, HEAD_D, D_PAD, not EVEN)  # l.4, second tile
            acc_b = tl.zeros([BLOCK_M, D_B], dtype=tl.float32)  # l.5, second tile
        if WINDOW:  # [window] the left boundary tiles, masked
            acc, l_i, m_i, acc_b = _fwd_inner(acc, l_i, m_i, Q_i, K_base, V_base, desc_k, desc_v, kv_row0, offs_m,
                                              offs_da, j_lo, j_a, Nk, qk_scale, h_bh, thresh, BLOCK_N, HEAD_D, D_A,
                                              CAUSAL, True, EVEN, TMA, LAZY, DROPOUT, WS, win_l, win_r, slope2,
                                              sc_in, sc_out, WINDOW, ALIBI, SOFTCAP, acc_b, Q_b, offs_db, D_B)
        acc, l_i, m_i, acc_b = _fwd_inner(acc, l_i, m_i, Q_i, K_base, V_base, desc_k, desc_v, kv_row0, offs_m,
                                          offs_da, j_a, j_b, Nk, qk_scale, h_bh, thresh, BLOCK_N, HEAD_D, D_A,
                                          CAUSAL, False, EVEN, TMA, LAZY, DROPOUT, WS, win_l, win_r, slope2,
                                          sc_in, sc_out, WINDOW, ALIBI, SOFTCAP, acc_b, Q_b, offs_db, D_B)
        acc, l_i, m_i, acc_b = _fwd_inner(acc, l_i, m_i, Q_i, K_base, V_base, desc_k, desc_v, kv_row0, offs_m,
                                          offs_da, j_b, j_hi, Nk, qk_scale, h_bh, thresh, BLOCK_N, HEAD_D, D_A,
                                          CAUSAL, True, EVEN, TMA, LAZY, DROPOUT, WS, win_l, win_r, slope2,
                                          sc_in, sc_out, WINDOW, ALIBI, SOFTCAP, acc_b, Q_b, offs_db, D_B)
        _finish(acc, l_i, m_i, O_base, L2_base, offs_m, offs_da, Nq, inv_keep, HEAD_D, D_A, DROPOUT,
                WINDOW, acc_b, offs_db, D_B)  # l.11-15


@triton.jit(do_not_specialize=["seed_key", "thresh", "Y0"])
def _fwd_kernel(Q, K, V, O, L2, desc_q, desc_k, desc_v, Slopes, BH, Nq, Nk, qk_scale, seed_key, thresh, inv_keep,
                Hq, group, win_l, win_r, sc_in, sc_out, Y0,
                HEAD_D: tl.constexpr, D_PAD: tl.constexpr, CAUSAL: tl.constexpr, EVEN: tl.constexpr,
                TMA: tl.constexpr, LAZY: tl.constexpr, SPLIT: tl.constexpr, HEADS_FIRST: tl.constexpr,
                PERSISTENT: tl.constexpr, DROPOUT: tl.constexpr, WS: tl.constexpr,
                GQA: tl.constexpr, WINDOW: tl.constexpr, ALIBI: tl.constexpr, SOFTCAP: tl.constexpr,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, D_B: tl.constexpr = 0):
    # FA2 Alg.1 l.1-3 (flash2.py): Tr = ⌈Nq/Br⌉ row blocks; a program runs l.3's iteration i for one
    # (batch, head). Causal: the longest rows first (i counted from the end). HEADS_FIRST: tile t is
    # (row block t // BH, head t % BH), so every head's longest row block comes before any head's
    # next one. PERSISTENT: one program per SM walks tiles pid, pid + #programs, ... in that order.
    # The variants (GQA, WINDOW, ALIBI, SOFTCAP: constexpr, so a kernel without them has none of
    # their code) take Hq, group, win_l, win_r, Slopes, sc_in, sc_out (unused when off). Y0: the first grid row
    # of this launch (a grid of more than MAX_GRID_Y rows launches in pieces, _pieces).
    Tr = tl.cdiv(Nq, BLOCK_M)
    if PERSISTENT:
        for t in range(tl.program_id(0), Tr * BH, tl.num_programs(0)):
            if HEADS_FIRST:
                pid = t // BH
                bh = (t % BH).to(tl.int64)
            else:
                pid = t % Tr
                bh = (t // Tr).to(tl.int64)
            i = pid
            if CAUSAL:
                i = Tr - 1 - pid
            _fwd_tile(Q, K, V, O, L2, desc_q, desc_k, desc_v, Slopes, i, bh, Nq, Nk, qk_scale, seed_key, thresh,
                      inv_keep, Hq, group, win_l, win_r, sc_in, sc_out, HEAD_D, D_PAD, CAUSAL, EVEN, TMA, LAZY,
                      SPLIT, DROPOUT, WS, GQA, WINDOW, ALIBI, SOFTCAP, BLOCK_M, BLOCK_N, D_B)
    else:
        if HEADS_FIRST:
            pid = tl.program_id(1) + Y0
            bh = tl.program_id(0).to(tl.int64)
        else:
            pid = tl.program_id(0)
            bh = tl.program_id(1).to(tl.int64) + Y0
        i = pid
        if CAUSAL:
            i = Tr - 1 - pid
        _fwd_tile(Q, K, V, O, L2, desc_q, desc_k, desc_v, Slopes, i, bh, Nq, Nk, qk_scale, seed_key, thresh,
                  inv_keep, Hq, group, win_l, win_r, sc_in, sc_out, HEAD_D, D_PAD, CAUSAL, EVEN, TMA, LAZY,
                  SPLIT, DROPOUT, WS, GQA, WINDOW, ALIBI, SOFTCAP, BLOCK_M, BLOCK_N, D_B)


# --------------------------------------------------------------------------------------------
# backward (FlashAttention-2 Algorithm 2)
# --------------------------------------------------------------------------------------------

@triton.jit
def _bwd_preprocess(O, dO, D, dQacc, Nq, Y0, HEAD_D: tl.constexpr, D_PAD: tl.constexpr, BLOCK_M: tl.constexpr,
                    ATOMIC_DQ: tl.constexpr):
    # FA2 Alg.2 l.4 (flash2.py): D = rowsum(dO ∘ O), written to HBM (fp32).
    bh = tl.program_id(1).to(tl.int64) + Y0  # Y0: this launch's first (batch, head) (_pieces)
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, D_PAD)
    O_i = _load_rows(O + bh * Nq * HEAD_D, offs_m, Nq, offs_d, HEAD_D, D_PAD, True).to(tl.float32)
    dO_i = _load_rows(dO + bh * Nq * HEAD_D, offs_m, Nq, offs_d, HEAD_D, D_PAD, True).to(tl.float32)
    tl.store(D + bh * Nq + offs_m, tl.sum(O_i * dO_i, 1), mask=offs_m < Nq)
    if ATOMIC_DQ:
        # FA2 Alg.2 l.3 (flash2.py): initialise dQ = 0 in HBM (the fp32 buffer the atomics add into).
        _store_rows(dQacc + bh * Nq * HEAD_D, offs_m, Nq, offs_d, tl.zeros([BLOCK_M, D_PAD], dtype=tl.float32),
                    HEAD_D, D_PAD)


@triton.jit
def _bwd_dq_scale(dQacc, dQ, n_elements, sm_scale, BLOCK: tl.constexpr):
    # FA2 Alg.2 l.20 (flash2.py): return dQ, times τ (S = τ QKᵀ) and cast to the inputs' dtype.
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    ok = offs < n_elements
    tl.store(dQ + offs, (tl.load(dQacc + offs, mask=ok) * sm_scale).to(dQ.dtype.element_ty), mask=ok)


@triton.jit
def _bwd_dkdv_inner(dK_j, dV_j, K_j, V_j, Q_base, dO_base, L2_base, D_base, dQ_base, offs_n, offs_d,
                    i_lo, i_hi, Nq, Nk, qk_scale, h_bh, thresh, inv_keep, win_l, win_r, slope2, sc_in, sc_out,
                    BLOCK_M: tl.constexpr, HEAD_D: tl.constexpr, D_PAD: tl.constexpr, CAUSAL: tl.constexpr,
                    MASKED: tl.constexpr, RAGGED: tl.constexpr, EVEN: tl.constexpr, ATOMIC_DQ: tl.constexpr,
                    DROPOUT: tl.constexpr,
                    WS: tl.constexpr, WINDOW: tl.constexpr, ALIBI: tl.constexpr, SOFTCAP: tl.constexpr,
                    dK_b, dV_b, K_b, V_b, offs_db, D_B: tl.constexpr):
    # D_PAD: the first column tile's width (all of pad_dim(d) unless split). With a split head
    # dimension (D_B > 0, as in the forward) K_b, V_b, dK_b, dV_b and offs_db are the second tile's;
    # the matmuls that contract over d add both tiles, those that produce d columns produce each.
    # MASKED: apply the attend mask (causal diagonal, window band, keys past Nk). RAGGED: this call may
    # reach the ragged last row block (the tail, a window's first boundary blocks); the others visit full
    # row blocks only, so their loads need no row mask. Masking every row block's loads when N was
    # ragged made the compiler spill (at d = 48 and 160 on an H100: 0.76-1.3 GB of local-memory writes
    # through the L2, 74-81 MB of them out to DRAM; figures/gpu/NOTES-l2.md, "k2writes").
    ROWS_MASKED: tl.constexpr = RAGGED and not EVEN
    offs_m0 = tl.arange(0, BLOCK_M)
    for start_m in tl.range(i_lo, i_hi, BLOCK_M, warp_specialize=WS):  # FA2 Alg.2 l.8: for 1 <= i <= Tr
        start_m = tl.multiple_of(start_m, BLOCK_M)
        offs_m = start_m + offs_m0
        # FA2 Alg.2 l.9 (flash2.py): load Q_i, dO_i, L_i, D_i (O_i is not needed: D).
        Q_i = _load_rows(Q_base, offs_m, Nq, offs_d, HEAD_D, D_PAD, ROWS_MASKED)  # (Br, d)
        dO_i = _load_rows(dO_base, offs_m, Nq, offs_d, HEAD_D, D_PAD, ROWS_MASKED)  # (Br, d)
        L2_i = _load_vec(L2_base, offs_m, Nq, ROWS_MASKED)
        D_i = _load_vec(D_base, offs_m, Nq, ROWS_MASKED)
        # FA2 Alg.2 l.10 (flash2.py): S_ij = τ Q_i K_jᵀ, computed transposed: S_ijᵀ = K_j Q_iᵀ.
        QKT = tl.dot(K_j, tl.trans(Q_i))  # (Bc, Br), unscaled
        Q_b = Q_i
        dO_b = dO_i
        if D_B > 0:  # the second column tile of Q_i, dO_i; S_ijᵀ sums over both tiles of d
            Q_b = _load_rows(Q_base, offs_m, Nq, offs_db, HEAD_D, D_PAD + D_B, ROWS_MASKED)
            dO_b = _load_rows(dO_base, offs_m, Nq, offs_db, HEAD_D, D_PAD + D_B, ROWS_MASKED)
            QKT = tl.dot(K_b, tl.trans(Q_b), QKT)
        if SOFTCAP or ALIBI:  # [softcap] [alibi], keeping T = tanh(τS/c) for dS (flash2.py's dtanh_ij)
            S_ijT, T_ijT = _modify(QKT, offs_m[None, :], offs_n[:, None], qk_scale, slope2,
                                   sc_in, sc_out, ALIBI, SOFTCAP)  # (Bc, Br), base 2
        else:
            S_ijT = QKT * qk_scale  # (Bc, Br), base 2
        # FA2 Alg.2 l.11 (flash2.py): P_ij = exp(S_ij − L_i).
        P_ijT = tl.math.exp2(S_ijT - L2_i[None, :])  # (Bc, Br)
        if MASKED:  # (a fully masked row, L_i = -inf, is masked in every tile it meets: P = 0, no NaN)
            P_ijT = tl.where(_attend(offs_m[None, :], offs_n[:, None], Nk, CAUSAL, WINDOW, win_l, win_r)
                             & (offs_m[None, :] < Nq), P_ijT, 0.0)
        elif not EVEN:
            # The ragged last column block visits its full row blocks unmasked, and its keys past Nk are K_j's
            # zero rows: S = 0 there, so P = 2^(−L_i), which overflows for a row whose scores all lie far below
            # 0 (L_i < −11 in fp16). dK_j and dV_j never store those keys, but dQ_i += dS_ij K_j would add
            # inf · 0 = NaN: P is zeroed past Nk (a column mask only, not the row loads' that made the compiler spill).
            P_ijT = tl.where(offs_n[:, None] < Nk, P_ijT, 0.0)
        # FA2 Alg.2 l.12 (flash2.py): dV_j += (P_ij ∘ Z_ij)ᵀ dO_i.
        PZ_ijT = P_ijT
        if DROPOUT:
            keepT = _keep(h_bh, offs_m[None, :], offs_n[:, None], thresh)  # (Bc, Br)
            PZ_ijT = tl.where(keepT, P_ijT * inv_keep, 0.0)
        dV_j = tl.dot(PZ_ijT.to(dO_i.dtype), dO_i, dV_j)  # (Bc, d)
        if D_B > 0:
            dV_b = tl.dot(PZ_ijT.to(dO_b.dtype), dO_b, dV_b)
        # FA2 Alg.2 l.13 (flash2.py): dP_ij = dO_i V_jᵀ (∘ Z_ij), transposed: dP_ijᵀ = V_j dO_iᵀ.
        dP_ijT = tl.dot(V_j, tl.trans(dO_i))  # (Bc, Br)
        if D_B > 0:
            dP_ijT = tl.dot(V_b, tl.trans(dO_b), dP_ijT)
        if DROPOUT:
            dP_ijT = tl.where(keepT, dP_ijT * inv_keep, 0.0)
        # FA2 Alg.2 l.14 (flash2.py): dS_ij = P_ij ∘ (dP_ij − D_i).
        if SOFTCAP:  # [softcap] through c·tanh(s/c): dS_ij ∘ (1 − tanh²)
            dS_ijT = (P_ijT * (dP_ijT - D_i[None, :]) * (1.0 - T_ijT * T_ijT)).to(Q_i.dtype)  # (Bc, Br)
        else:
            dS_ijT = (P_ijT * (dP_ijT - D_i[None, :])).to(Q_i.dtype)  # (Bc, Br)
        if ATOMIC_DQ:
            # FA2 Alg.2 l.15 (flash2.py): dQ_i += dS_ij K_j, read-modified-written in HBM: an fp32
            # atomic add, since every column block's program adds into the same dQ_i (τ: at the end).
            dQ_ij = tl.dot(tl.trans(dS_ijT), K_j)  # (Br, d)
            dq_ptrs = dQ_base + offs_m[:, None] * HEAD_D + offs_d[None, :]
            if D_PAD > HEAD_D:
                tl.atomic_add(dq_ptrs, dQ_ij, mask=(offs_m[:, None] < Nq) & (offs_d[None, :] < HEAD_D),
                              sem="relaxed")
            elif MASKED:
                tl.atomic_add(dq_ptrs, dQ_ij, mask=offs_m[:, None] < Nq, sem="relaxed")
            else:
                tl.atomic_add(dq_ptrs, dQ_ij, sem="relaxed")
            if D_B > 0:  # the second column tile of dQ_i
                dQ_b = tl.dot(tl.trans(dS_ijT), K_b)
                dqb_ptrs = dQ_base + offs_m[:, None] * HEAD_D + offs_db[None, :]
                tl.atomic_add(dqb_ptrs, dQ_b, mask=(offs_m[:, None] < Nq) & (offs_db[None, :] < HEAD_D),
                              sem="relaxed")
        # FA2 Alg.2 l.16 (flash2.py): dK_j += dS_ijᵀ Q_i (τ applied once at the end).
        dK_j = tl.dot(dS_ijT, Q_i, dK_j)  # (Bc, d)
        if D_B > 0:
            dK_b = tl.dot(dS_ijT, Q_b, dK_b)
    return dK_j, dV_j, dK_b, dV_b


@triton.jit
def _bwd_dkdv_head(dK_j, dV_j, K_j, V_j, Q, dO, L2, D, dQacc, Slopes, bh, start_n, offs_n, offs_d, Nq, Nk,
                   qk_scale, seed_key, thresh, inv_keep, win_l, win_r, sc_in, sc_out,
                   HEAD_D: tl.constexpr, D_PAD: tl.constexpr, CAUSAL: tl.constexpr, EVEN: tl.constexpr,
                   ATOMIC_DQ: tl.constexpr, STAGGER: tl.constexpr, DROPOUT: tl.constexpr, WS: tl.constexpr,
                   WINDOW: tl.constexpr, ALIBI: tl.constexpr, SOFTCAP: tl.constexpr,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, dK_b, dV_b, K_b, V_b, offs_db, D_B: tl.constexpr):
    # FA2 Alg.2 l.8-17 for column block j and one query head bh: add its row blocks into dK_j, dV_j
    # (and, with a split head dimension, into the second column tiles dK_b, dV_b).
    Q_base = Q + bh * Nq * HEAD_D
    dO_base = dO + bh * Nq * HEAD_D
    L2_base = L2 + bh * Nq
    D_base = D + bh * Nq
    h_bh = seed_key
    if DROPOUT:
        h_bh = _dropout_key(seed_key, bh)
    if ATOMIC_DQ:
        dQ_base = dQacc + bh * Nq * HEAD_D  # this head's fp32 dQ, zeroed by the pre-pass
    else:
        dQ_base = dQacc  # None: dQ comes from the separate dQ kernel
    slope2 = 0.0
    if ALIBI:  # [alibi] this query head's slope (× log2 e)
        slope2 = tl.load(Slopes + bh)
    Nq_full = (Nq // BLOCK_M) * BLOCK_M  # row blocks that need no bound mask
    if WINDOW:
        # [window] only the row blocks whose band reaches this column block; boundary ones masked.
        i_lo, i_a, i_b, i_hi = _window_rows(start_n, Nq, win_l, win_r, BLOCK_M, BLOCK_N)
        dK_j, dV_j, dK_b, dV_b = _bwd_dkdv_inner(dK_j, dV_j, K_j, V_j, Q_base, dO_base, L2_base, D_base, dQ_base,
                                     offs_n, offs_d, i_lo, i_a, Nq, Nk, qk_scale, h_bh, thresh, inv_keep,
                                     win_l, win_r, slope2, sc_in, sc_out, BLOCK_M, HEAD_D, D_PAD, CAUSAL, True, True,
                                     EVEN, ATOMIC_DQ, DROPOUT, WS, WINDOW, ALIBI, SOFTCAP,
                                     dK_b, dV_b, K_b, V_b, offs_db, D_B)
        dK_j, dV_j, dK_b, dV_b = _bwd_dkdv_inner(dK_j, dV_j, K_j, V_j, Q_base, dO_base, L2_base, D_base, dQ_base,
                                     offs_n, offs_d, i_a, i_b, Nq, Nk, qk_scale, h_bh, thresh, inv_keep,
                                     win_l, win_r, slope2, sc_in, sc_out, BLOCK_M, HEAD_D, D_PAD, CAUSAL, False, False,
                                     EVEN, ATOMIC_DQ, DROPOUT, WS, WINDOW, ALIBI, SOFTCAP,
                                     dK_b, dV_b, K_b, V_b, offs_db, D_B)
        i_tail = i_b
        i_end = i_hi
    else:
        if CAUSAL:
            # causal skipping: row blocks wholly before key start_n are never visited; those crossing
            # the diagonal (rows < start_n + Bc) get the mask.
            i_lo = (start_n // BLOCK_M) * BLOCK_M
            i_diag = tl.minimum(tl.cdiv(start_n + BLOCK_N, BLOCK_M) * BLOCK_M, Nq_full)
            i_diag = tl.maximum(i_diag, i_lo)
            dK_j, dV_j, dK_b, dV_b = _bwd_dkdv_inner(dK_j, dV_j, K_j, V_j, Q_base, dO_base, L2_base, D_base, dQ_base,
                                         offs_n, offs_d, i_lo, i_diag, Nq, Nk, qk_scale, h_bh, thresh, inv_keep,
                                         win_l, win_r, slope2, sc_in, sc_out, BLOCK_M, HEAD_D, D_PAD, CAUSAL,
                                         True, False, EVEN, ATOMIC_DQ, DROPOUT, WS, WINDOW, ALIBI, SOFTCAP,
                                         dK_b, dV_b, K_b, V_b, offs_db, D_B)
            dK_j, dV_j, dK_b, dV_b = _bwd_dkdv_inner(dK_j, dV_j, K_j, V_j, Q_base, dO_base, L2_base, D_base, dQ_base,
                                         offs_n, offs_d, i_diag, Nq_full, Nq, Nk, qk_scale, h_bh, thresh, inv_keep,
                                         win_l, win_r, slope2, sc_in, sc_out, BLOCK_M, HEAD_D, D_PAD, CAUSAL,
                                         False, False, EVEN, ATOMIC_DQ, DROPOUT, WS, WINDOW, ALIBI, SOFTCAP,
                                         dK_b, dV_b, K_b, V_b, offs_db, D_B)
            i_tail = tl.maximum(Nq_full, i_diag)
        else:
            # STAGGER: start at this program's own row block and wrap around, so that the column blocks
            # of one head do not all add into the same dQ_i at the same moment (atomic contention).
            i_mid = 0
            if STAGGER:
                i_mid = tl.minimum((start_n // BLOCK_M) * BLOCK_M, Nq_full)
            dK_j, dV_j, dK_b, dV_b = _bwd_dkdv_inner(dK_j, dV_j, K_j, V_j, Q_base, dO_base, L2_base, D_base, dQ_base,
                                         offs_n, offs_d, i_mid, Nq_full, Nq, Nk, qk_scale, h_bh, thresh, inv_keep,
                                         win_l, win_r, slope2, sc_in, sc_out, BLOCK_M, HEAD_D, D_PAD, CAUSAL,
                                         False, False, EVEN, ATOMIC_DQ, DROPOUT, WS, WINDOW, ALIBI, SOFTCAP,
                                         dK_b, dV_b, K_b, V_b, offs_db, D_B)
            dK_j, dV_j, dK_b, dV_b = _bwd_dkdv_inner(dK_j, dV_j, K_j, V_j, Q_base, dO_base, L2_base, D_base, dQ_base,
                                         offs_n, offs_d, 0, i_mid, Nq, Nk, qk_scale, h_bh, thresh, inv_keep,
                                         win_l, win_r, slope2, sc_in, sc_out, BLOCK_M, HEAD_D, D_PAD, CAUSAL,
                                         False, False, EVEN, ATOMIC_DQ, DROPOUT, WS, WINDOW, ALIBI, SOFTCAP,
                                         dK_b, dV_b, K_b, V_b, offs_db, D_B)
            i_tail = Nq_full
        i_end = Nq
    # the masked tail: the ragged last row block (empty when Nq is a multiple of Br), or the
    # [window]'s lower boundary row blocks
    dK_j, dV_j, dK_b, dV_b = _bwd_dkdv_inner(dK_j, dV_j, K_j, V_j, Q_base, dO_base, L2_base, D_base, dQ_base,
                                 offs_n, offs_d, i_tail, i_end, Nq, Nk, qk_scale, h_bh, thresh, inv_keep,
                                 win_l, win_r, slope2, sc_in, sc_out, BLOCK_M, HEAD_D, D_PAD, CAUSAL, True, True,
                                 EVEN, ATOMIC_DQ, DROPOUT, WS, WINDOW, ALIBI, SOFTCAP,
                                     dK_b, dV_b, K_b, V_b, offs_db, D_B)
    return dK_j, dV_j, dK_b, dV_b


@triton.jit(do_not_specialize=["seed_key", "thresh", "Y0"])
def _bwd_dkdv_kernel(Q, K, V, dO, L2, D, dK, dV, dQacc, Slopes, Nq, Nk, sm_scale, qk_scale, seed_key, thresh,
                     inv_keep, group, win_l, win_r, sc_in, sc_out, Y0,
                     HEAD_D: tl.constexpr, D_PAD: tl.constexpr, CAUSAL: tl.constexpr, EVEN: tl.constexpr,
                     ATOMIC_DQ: tl.constexpr, STAGGER: tl.constexpr, DROPOUT: tl.constexpr, WS: tl.constexpr,
                     GQA: tl.constexpr, WINDOW: tl.constexpr, ALIBI: tl.constexpr, SOFTCAP: tl.constexpr,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, D_B: tl.constexpr = 0):
    # FA2 Alg.2 l.5 (flash2.py): this program is one column block j (and one (batch, K/V head)).
    # With a split head dimension (D_B > 0, Config.dsplit_bwd) every d-wide tile is two column tiles,
    # D_A = D_PAD - D_B and D_B wide, as in the forward; otherwise one D_PAD tile and placeholders.
    D_A: tl.constexpr = D_PAD - D_B
    j = tl.program_id(0)
    # (batch, K/V head); the query head too without GQA. Y0: this launch's first one (_pieces)
    bh = tl.program_id(1).to(tl.int64) + Y0
    start_n = j * BLOCK_N
    offs_n = start_n + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, D_A)
    # FA2 Alg.2 l.6 (flash2.py): load K_j, V_j from HBM, once.
    K_j = _load_rows(K + bh * Nk * HEAD_D, offs_n, Nk, offs_d, HEAD_D, D_A, not EVEN)  # (Bc, d)
    V_j = _load_rows(V + bh * Nk * HEAD_D, offs_n, Nk, offs_d, HEAD_D, D_A, not EVEN)  # (Bc, d)
    # FA2 Alg.2 l.7 (flash2.py): dK_j = 0, dV_j = 0 on chip (fp32).
    dK_j = tl.zeros([BLOCK_N, D_A], dtype=tl.float32)
    dV_j = tl.zeros([BLOCK_N, D_A], dtype=tl.float32)
    offs_db = offs_d
    K_b = K_j
    V_b = V_j
    dK_b = dK_j
    dV_b = dV_j
    if D_B > 0:  # l.6-7 for the second column tile
        offs_db = D_A + tl.arange(0, D_B)
        K_b = _load_rows(K + bh * Nk * HEAD_D, offs_n, Nk, offs_db, HEAD_D, D_PAD, not EVEN)
        V_b = _load_rows(V + bh * Nk * HEAD_D, offs_n, Nk, offs_db, HEAD_D, D_PAD, not EVEN)
        dK_b = tl.zeros([BLOCK_N, D_B], dtype=tl.float32)
        dV_b = tl.zeros([BLOCK_N, D_B], dtype=tl.float32)
    if GQA:
        # [gqa] the group's query heads (batch·Hq + K/V head·group + g) all add into this program's
        # dK_j, dV_j on chip, one after the other: no atomics on dK/dV, no per-query-head copies.
        for g in range(0, group):
            dK_j, dV_j, dK_b, dV_b = _bwd_dkdv_head(
                dK_j, dV_j, K_j, V_j, Q, dO, L2, D, dQacc, Slopes, bh * group + g, start_n, offs_n, offs_d, Nq, Nk,
                qk_scale, seed_key, thresh, inv_keep, win_l, win_r, sc_in, sc_out, HEAD_D, D_A, CAUSAL, EVEN,
                ATOMIC_DQ, STAGGER, DROPOUT, WS, WINDOW, ALIBI, SOFTCAP, BLOCK_M, BLOCK_N,
                dK_b, dV_b, K_b, V_b, offs_db, D_B)
    else:
        dK_j, dV_j, dK_b, dV_b = _bwd_dkdv_head(
            dK_j, dV_j, K_j, V_j, Q, dO, L2, D, dQacc, Slopes, bh, start_n, offs_n, offs_d, Nq, Nk, qk_scale,
            seed_key, thresh, inv_keep, win_l, win_r, sc_in, sc_out, HEAD_D, D_A, CAUSAL, EVEN, ATOMIC_DQ,
            STAGGER, DROPOUT, WS, WINDOW, ALIBI, SOFTCAP, BLOCK_M, BLOCK_N, dK_b, dV_b, K_b, V_b, offs_db, D_B)
    # FA2 Alg.2 l.17 (flash2.py): end for.
    # FA2 Alg.2 l.18 (flash2.py): write dK_j (times τ: S = τ QKᵀ) and dV_j to HBM, once.
    _store_rows(dK + bh * Nk * HEAD_D, offs_n, Nk, offs_d, dK_j * sm_scale, HEAD_D, D_A)
    _store_rows(dV + bh * Nk * HEAD_D, offs_n, Nk, offs_d, dV_j, HEAD_D, D_A)
    if D_B > 0:
        _store_rows(dK + bh * Nk * HEAD_D, offs_n, Nk, offs_db, dK_b * sm_scale, HEAD_D, D_PAD)
        _store_rows(dV + bh * Nk * HEAD_D, offs_n, Nk, offs_db, dV_b, HEAD_D, D_PAD)


@triton.jit
def _bwd_dq_inner(dQ_i, Q_i, dO_i, L2_i, D_i, K_base, V_base, offs_m, offs_d, j_lo, j_hi, Nk, qk_scale,
                  h_bh, thresh, inv_keep, win_l, win_r, slope2, sc_in, sc_out, BLOCK_N: tl.constexpr,
                  HEAD_D: tl.constexpr, D_PAD: tl.constexpr, CAUSAL: tl.constexpr, MASKED: tl.constexpr,
                  EVEN: tl.constexpr, DROPOUT: tl.constexpr, WS: tl.constexpr, WINDOW: tl.constexpr,
                  ALIBI: tl.constexpr, SOFTCAP: tl.constexpr):
    offs_n0 = tl.arange(0, BLOCK_N)
    for start_n in tl.range(j_lo, j_hi, BLOCK_N, warp_specialize=WS):  # Alg.2 l.5's j loop, inside row block i
        start_n = tl.multiple_of(start_n, BLOCK_N)
        offs_n = start_n + offs_n0
        # FA2 Alg.2 l.6 (flash2.py): load K_j and V_j.
        K_j = _load_rows(K_base, offs_n, Nk, offs_d, HEAD_D, D_PAD, not EVEN)  # (Bc, d)
        V_j = _load_rows(V_base, offs_n, Nk, offs_d, HEAD_D, D_PAD, not EVEN)  # (Bc, d)
        # FA2 Alg.2 l.10-11 (flash2.py): S_ij = τ Q_i K_jᵀ; P_ij = exp(S_ij − L_i).
        if SOFTCAP or ALIBI:  # [softcap] [alibi]
            S_ij, T_ij = _modify(tl.dot(Q_i, tl.trans(K_j)), offs_m[:, None], offs_n[None, :], qk_scale, slope2,
                                 sc_in, sc_out, ALIBI, SOFTCAP)
        else:
            S_ij = tl.dot(Q_i, tl.trans(K_j)) * qk_scale  # (Br, Bc)
        P_ij = tl.math.exp2(S_ij - L2_i[:, None])
        if MASKED:
            P_ij = tl.where(_attend(offs_m[:, None], offs_n[None, :], Nk, CAUSAL, WINDOW, win_l, win_r), P_ij, 0.0)
        # FA2 Alg.2 l.13-14 (flash2.py): dP_ij = dO_i V_jᵀ (∘ Z_ij); dS_ij = P_ij ∘ (dP_ij − D_i).
        dP_ij = tl.dot(dO_i, tl.trans(V_j))  # (Br, Bc)
        if DROPOUT:
            dP_ij = tl.where(_keep(h_bh, offs_m[:, None], offs_n[None, :], thresh), dP_ij * inv_keep, 0.0)
        dS_ij = P_ij * (dP_ij - D_i[:, None])
        if SOFTCAP:  # [softcap] dS_ij ∘ (1 − tanh²)
            dS_ij = dS_ij * (1.0 - T_ij * T_ij)
        # FA2 Alg.2 l.15 (flash2.py): dQ_i += dS_ij K_j, accumulated on chip (not in HBM).
        dQ_i = tl.dot(dS_ij.to(K_j.dtype), K_j, dQ_i)  # (Br, d)
    return dQ_i


@triton.jit(do_not_specialize=["seed_key", "thresh", "Y0"])
def _bwd_dq_kernel(Q, K, V, dO, L2, D, dQ, Slopes, Nq, Nk, sm_scale, qk_scale, seed_key, thresh, inv_keep,
                   Hq, group, win_l, win_r, sc_in, sc_out, Y0,
                   HEAD_D: tl.constexpr, D_PAD: tl.constexpr, CAUSAL: tl.constexpr, EVEN: tl.constexpr,
                   DROPOUT: tl.constexpr, WS: tl.constexpr, GQA: tl.constexpr, WINDOW: tl.constexpr,
                   ALIBI: tl.constexpr, SOFTCAP: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    Tr = tl.cdiv(Nq, BLOCK_M)
    pid = tl.program_id(0)
    i = pid
    if CAUSAL:
        i = Tr - 1 - pid
    bh = tl.program_id(1).to(tl.int64) + Y0  # Y0: this launch's first (batch, head) (_pieces)
    kv_bh = _kv_head(bh, Hq, group, GQA)  # [gqa]
    start_m = i * BLOCK_M
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, D_PAD)
    h_bh = seed_key
    if DROPOUT:
        h_bh = _dropout_key(seed_key, bh)
    slope2 = 0.0
    if ALIBI:
        slope2 = tl.load(Slopes + bh)
    # FA2 Alg.2 l.9 (flash2.py): load Q_i, dO_i, L_i, D_i, once per row block here.
    Q_i = _load_rows(Q + bh * Nq * HEAD_D, offs_m, Nq, offs_d, HEAD_D, D_PAD, not EVEN)
    dO_i = _load_rows(dO + bh * Nq * HEAD_D, offs_m, Nq, offs_d, HEAD_D, D_PAD, not EVEN)
    L2_i = _load_vec(L2 + bh * Nq, offs_m, Nq, not EVEN)
    D_i = _load_vec(D + bh * Nq, offs_m, Nq, not EVEN)
    # FA2 Alg.2 l.3 (flash2.py): dQ_i = 0, here on chip (fp32), written once at the end.
    dQ_i = tl.zeros([BLOCK_M, D_PAD], dtype=tl.float32)
    K_base = K + kv_bh * Nk * HEAD_D
    V_base = V + kv_bh * Nk * HEAD_D
    # the K/V tiles this row block visits, as the forward's (boundary tiles masked, the rest not)
    j_lo, j_a, j_b, j_hi = _row_block_cols(start_m, Nk, win_l, win_r, BLOCK_M, BLOCK_N, CAUSAL, WINDOW)
    if WINDOW:  # [window] the left boundary tiles, masked
        dQ_i = _bwd_dq_inner(dQ_i, Q_i, dO_i, L2_i, D_i, K_base, V_base, offs_m, offs_d, j_lo, j_a,
                             Nk, qk_scale, h_bh, thresh, inv_keep, win_l, win_r, slope2, sc_in, sc_out, BLOCK_N,
                             HEAD_D, D_PAD, CAUSAL, True, EVEN, DROPOUT, WS, WINDOW, ALIBI, SOFTCAP)
    dQ_i = _bwd_dq_inner(dQ_i, Q_i, dO_i, L2_i, D_i, K_base, V_base, offs_m, offs_d, j_a, j_b,
                         Nk, qk_scale, h_bh, thresh, inv_keep, win_l, win_r, slope2, sc_in, sc_out, BLOCK_N, HEAD_D,
                         D_PAD, CAUSAL, False, EVEN, DROPOUT, WS, WINDOW, ALIBI, SOFTCAP)
    dQ_i = _bwd_dq_inner(dQ_i, Q_i, dO_i, L2_i, D_i, K_base, V_base, offs_m, offs_d, j_b, j_hi,
                         Nk, qk_scale, h_bh, thresh, inv_keep, win_l, win_r, slope2, sc_in, sc_out, BLOCK_N, HEAD_D,
                         D_PAD, CAUSAL, True, EVEN, DROPOUT, WS, WINDOW, ALIBI, SOFTCAP)
    # FA2 Alg.2 l.15 (flash2.py): write dQ_i (times τ) to HBM, once per row block.
    _store_rows(dQ + bh * Nq * HEAD_D, offs_m, Nq, offs_d, dQ_i * sm_scale, HEAD_D, D_PAD)


# --------------------------------------------------------------------------------------------
# launchers
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Variants:
    """The attention variants as the kernels take them (``gpu.attention`` checks and builds this).

    group: query heads per K/V head (1: no GQA). band: ``(L, R)``, query i sees keys
    ``i − L <= j <= i + R`` (the window with causal folded in, -1 already replaced by Nq + Nk), or
    None. slopes: an fp32 tensor of ``B·Hq`` ALiBi slopes, or None. softcap: ``c > 0`` or None.
    tanh_near_zero: softcap's tanh with its series near 0 (``_tanh``'s ``NEAR_ZERO``).
    """

    group: int = 1
    band: tuple[int, int] | None = None
    slopes: object = None
    softcap: float | None = None
    tanh_near_zero: bool = False

    def args(self, scale: float) -> tuple:
        """(Slopes × log2 e, win_l, win_r, sc_in, sc_out) for the kernels (unused when a flag is off)."""
        L, R = self.band or (0, 0)
        slopes = None if self.slopes is None else self.slopes * LOG2E
        c = self.softcap or 1.0
        return slopes, L, R, scale / c, c * LOG2E

    def flags(self) -> dict:
        # SOFTCAP: 0 none, 1 c·tanh(s/c) by _tanh's exp2 formula, 2 with its series near 0
        softcap = 0 if self.softcap is None else 2 if self.tanh_near_zero else 1
        return dict(GQA=self.group > 1, WINDOW=self.band is not None, ALIBI=self.slopes is not None,
                    SOFTCAP=softcap)


NO_VARIANTS = Variants()


def _column_tiles(d: int, split: bool) -> dict:
    """The kernels' column constexprs for head dimension d: one pad_dim(d) tile (``D_B = 0``), or, split
    (dim_split), ``D_PAD`` spanning both column tiles (D_A + D_B) and the second ``D_B`` wide."""
    d_a, d_b = dim_split(d)
    return dict(D_PAD=d_a + d_b, D_B=d_b) if split else dict(D_PAD=pad_dim(d), D_B=0)


def _even(Nq, Nk, t: Tiles) -> bool:
    return Nq % t.block_m == 0 and Nk % t.block_n == 0


def _num_sms(device) -> int:
    import torch
    return torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else 4


def _positive(scale) -> None:
    # Kernel 2's forward masks S with -inf before scaling it and takes the row max as τ·rowmax(S) (one FMA with
    # the subtraction): both need τ > 0. flashref.gpu maps any other finite τ to one (gpu._positive_scale).
    if not scale > 0:
        raise ValueError(f"scale: the kernels take a scale > 0 (flashref.gpu.attention, forward and backward map "
                         f"any other finite scale to one), got {scale!r}")


def forward(q, k, v, o, L2, causal, scale, cfg: Config, dropout=None, var: Variants = NO_VARIANTS):
    """Launch Algorithm 1 on contiguous (B, H, N, d) tensors; fills o and the base-2 LSE L2.

    ``cfg`` is a :meth:`Config.resolve`-d config; ``dropout`` is ``(p, seed)`` or None; ``var`` the
    :class:`Variants` (k and v then have ``H / var.group`` heads)."""
    B, H, Nq, d = q.shape
    Nk = k.shape[2]
    _positive(scale)
    seed_key, thresh, inv_keep = dropout_args(*dropout) if dropout else (0, 0, 1.0)
    if cfg.version == 1:
        from . import kernel1  # kernel1 imports this module's helpers
        return kernel1.forward(q, k, v, o, L2, causal, scale, cfg, seed_key, thresh, inv_keep, bool(dropout), var)
    t = cfg.fwd
    tma = use_tma(cfg, d, q.device, q, k, v)
    descs = (None, None, None)
    if tma:  # 2-D (B·H·N, d) views with the tiles' block shapes
        from triton.tools.tensor_descriptor import TensorDescriptor
        shapes = ([t.block_m // (2 if cfg.split else 1), d], [t.block_n, d], [t.block_n, d])
        descs = tuple(TensorDescriptor(x, [x.shape[0] * x.shape[1] * x.shape[2], d], [d, 1], s)
                      for x, s in zip((q, k, v), shapes))
    BH, Tr = B * H, triton.cdiv(Nq, t.block_m)
    if cfg.persistent:  # one launch: its grid is 1-D
        grids = [((min(Tr * BH, _num_sms(q.device)),), 0)] if BH else []
    elif cfg.heads_first:
        grids = [((BH, n), y0) for y0, n in _pieces(Tr)]
    else:
        grids = [((Tr, n), y0) for y0, n in _pieces(BH)]
    slopes, win_l, win_r, sc_in, sc_out = var.args(scale)
    for grid, y0 in grids:
        _fwd_kernel[grid](q, k, v, o, L2, *descs, slopes, BH, Nq, Nk, scale * LOG2E, seed_key, thresh, inv_keep,
                          H, var.group, win_l, win_r, sc_in, sc_out, y0,
                          HEAD_D=d, **_column_tiles(d, cfg.dsplit), CAUSAL=causal, EVEN=_even(Nq, Nk, t), TMA=tma,
                          LAZY=cfg.lazy and var.band is None,  # lazy rescaling assumes every row has a finite max
                          SPLIT=cfg.split, HEADS_FIRST=cfg.heads_first, PERSISTENT=cfg.persistent,
                          DROPOUT=bool(dropout), WS=cfg.warp_specialize, **var.flags(), **cfg.fwd_launch())


def backward(q, k, v, o, L2, do, dq, dk, dv, D, causal, scale, cfg: Config, dropout=None, dq_acc=None,
             var: Variants = NO_VARIANTS):
    """Launch Algorithm 2: the D pre-pass, then dK/dV over column blocks, and dQ either

    * added by the same programs into ``dq_acc`` (fp32, same shape as q) with atomics, then
      scaled and cast into ``dq`` (FA2's own scheme; 5 matmuls per block pair), or
    * when ``dq_acc`` is None, by a second kernel over row blocks that keeps dQ_i on chip and
      recomputes S and dP (7 matmuls per block pair; deterministic).

    [gqa] dK, dV (``H / var.group`` heads): each dK/dV program owns one (batch, K/V head) column
    block and runs the row loop once per query head of its group, adding into the same dK_j, dV_j
    on chip, so no atomics and no per-query-head dK/dV in HBM (flash-attn's ``dk_expanded`` and its
    sum) are needed, and the result is deterministic; the price is ``group`` times fewer, longer
    programs, which at the bench's shapes (thousands of column-block programs) still fill the GPU.
    """
    B, H, Nq, d = q.shape
    Nk = k.shape[2]
    _positive(scale)
    D_PAD = pad_dim(d)
    atomic = dq_acc is not None
    seed_key, thresh, inv_keep = dropout_args(*dropout) if dropout else (0, 0, 1.0)
    for y0, n in _pieces(B * H):
        _bwd_preprocess[(triton.cdiv(Nq, 32), n)](o, do, D, dq_acc, Nq, y0, HEAD_D=d, D_PAD=D_PAD, BLOCK_M=32,
                                                  ATOMIC_DQ=atomic)
    if cfg.version == 1:
        from . import kernel1
        if not atomic:
            raise ValueError("kernel 1 computes dQ with atomic adds only (flash2.py's read-modify-write); "
                             "deterministic=True needs Config(version=2)")
        kernel1.backward(q, k, v, L2, do, dq_acc, dk, dv, D, causal, scale, cfg, seed_key, thresh, inv_keep,
                         bool(dropout), var)
    else:
        t = cfg.dkdv
        slopes, win_l, win_r, sc_in, sc_out = var.args(scale)
        for y0, n in _pieces(B * (H // var.group)):
            _bwd_dkdv_kernel[(triton.cdiv(Nk, t.block_n), n)](
                q, k, v, do, L2, D, dk, dv, dq_acc, slopes, Nq, Nk, scale, scale * LOG2E, seed_key, thresh,
                inv_keep, var.group, win_l, win_r, sc_in, sc_out, y0,
                HEAD_D=d, **_column_tiles(d, cfg.dsplit_bwd), CAUSAL=causal, EVEN=_even(Nq, Nk, t),
                ATOMIC_DQ=atomic, STAGGER=cfg.stagger, DROPOUT=bool(dropout), WS=cfg.warp_specialize, **var.flags(),
                **t.meta())
    if atomic:
        n = dq.numel()
        _bwd_dq_scale[(triton.cdiv(n, 1024),)](dq_acc, dq, n, 1.0 if cfg.version == 1 else scale, BLOCK=1024)
    else:
        t = cfg.dq
        slopes, win_l, win_r, sc_in, sc_out = var.args(scale)
        for y0, n in _pieces(B * H):
            _bwd_dq_kernel[(triton.cdiv(Nq, t.block_m), n)](
                q, k, v, do, L2, D, dq, slopes, Nq, Nk, scale, scale * LOG2E, seed_key, thresh, inv_keep,
                H, var.group, win_l, win_r, sc_in, sc_out, y0,
                HEAD_D=d, D_PAD=D_PAD, CAUSAL=causal, EVEN=_even(Nq, Nk, t), DROPOUT=bool(dropout),
                WS=cfg.warp_specialize, **var.flags(), **t.meta())
