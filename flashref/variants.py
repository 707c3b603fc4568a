"""Attention as it is used today: the variants' on-chip lines, in one place.

Each variant changes the scores of a tile ``S_ij`` or which tiles are visited, and nothing else.
The algorithms (``standard``, ``flash1``, ``blocksparse``, ``flash2``, ``decoding``) call the helpers below at the
line where the variant enters; the algorithm boxes mark those lines ``[gqa]``, ``[window]``, ``[alibi]``,
``[softcap]`` and ``[bias]``. Where a loop visits every tile (Algorithm 1, and Algorithm 5 on its nonzero
blocks), a window is MASK and skips nothing.

Order of application (the one of flash-attn's kernels, csrc/flash_attn/src/flash_fwd_kernel.h:
``gemm`` → ``apply_softcap`` → ``mask.apply_mask``, which adds ALiBi and then masks causal/local;
flash-attn has no bias, which we add after ALiBi, as FlexAttention's ``score_mod`` would)::

    S = τ Q Kᵀ                         scale (in the matmul's epilogue)
    S = c · tanh(S / c)                [softcap]   3 non-matmul FLOPs, 1 of them on the exp unit
    S = S − slope_h · |i − j|          [alibi]     3 non-matmul FLOPs; IO: the slopes only
    S = S + B                          [bias]      IO: the bias tile, Br·Bc per visited tile
    S = MASK(S)                        causal ∧ window ∧ mask: a function of (i, j), no IO

**Window.** Query ``i`` sees keys ``i − left ≤ j ≤ i + right`` (-1: unbounded; with ``causal`` the
right end is ``min(right, 0)``). A tile whose every (i, j) is outside the band is skipped whole
(no load, no FLOP) at both ends; one inside it needs no MASK. Per row block about
``⌈(w − 1 + Br)/Bc⌉`` K/V tiles are visited (``w = left + right + 1``), up to 1 more where the band's edges are
not on tile edges (it rounds out by up to Bc − 1 keys at each end, but a span of s keys meets at most
⌈s/Bc⌉ + 1 tiles), so the forward's K/V traffic is at most ``2·Nq·d·(w − 1 + Br + 2(Bc − 1))/Br`` and, for
N ≫ w ≫ Br, Bc, at least about ``2·Nq·d·(w − 1 + Br)/Br`` (the first rows' bands, clipped at key 0, read less:
12% below it at N = 2048, w = 512, 128 x 128 tiles, causal): linear in N, and Θ(N·w·d²/M) where
Br = Θ(M/d) (the default Br = min(⌈M/4d⌉, d) stops growing at d: see notebook 06).

**GQA** (``enable_gqa``). K and V have ``Hkv`` heads, Q has ``Hq = g·Hkv``; query head h uses K/V
head ``h // g``. Two tile schedules:

* unpacked (``gqa_packing=False``, the default: FlashAttention-2's kernel, one thread block per
  (batch, query head, row block) reading K/V head ``h // g``): every query head loads its K/V
  tiles, so K/V traffic is that of ``Hq`` heads, as if K and V were repeated; the backward
  writes per-query-head ``dK_h, dV_h`` and one more pass sums each group (reads ``2·Hq·Nk·d``,
  writes ``2·Hkv·Nk·d``), as flash-attn's ``dk_expanded.sum``;
* packed (``gqa_packing=True``: FA3's ``PackGQA``): one thread block per (batch, K/V head, row
  block) holds the ``g`` query heads' rows of the block, ``g·Br`` rows laid out position-major
  (row ``p`` is position ``p // g`` of head ``p mod g`` in the group), so each K/V tile is
  loaded once for the group: K/V traffic falls by ``g``, and dK_j, dV_j are reduced on chip.
  The price is on chip: every row-sized buffer is ``g`` times taller (the footprint is that of
  ``Br' = g·Br``), so for the same M the blocks are smaller.

``standard`` with GQA runs its matmuls on the packed layout too: a batched matmul "by blocks"
(rule 6) reads each K/V head once for its group.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from . import masks
from ._numbers import _bool
from .flops import FlopCounter
from .memory import Memory
from .problem import require_finite

__all__ = ["pack_rows", "unpack_rows", "pack_vec", "unpack_vec", "packed_group", "loop_problem", "kv_gradients",
           "band", "tile_visited", "tile_inside", "tile_attend", "modify_scores", "softcap", "alibi", "slopes_of_rows",
           "sum_groups", "check_bias_grad", "bias_gradient", "tile_scores", "reduce_groups", "load_slopes"]


# --------------------------------------------------------------------------- GQA layouts


def pack_rows(X: np.ndarray, G: int) -> np.ndarray:
    """``(..., Hq, n, c) → (..., Hq/G, n·G, c)``: row ``r·G + k`` is row r of head k of the group."""
    if G == 1:
        return X
    *lead, Hq, n, c = X.shape
    Y = X.reshape(tuple(lead) + (Hq // G, G, n, c)).swapaxes(-3, -2)  # (..., Hkv, n, G, c)
    return np.ascontiguousarray(Y).reshape(tuple(lead) + (Hq // G, n * G, c))


def unpack_rows(X: np.ndarray, G: int) -> np.ndarray:
    """Inverse of :func:`pack_rows`: ``(..., Hkv, n·G, c) → (..., Hkv·G, n, c)``."""
    if G == 1:
        return X
    *lead, Hkv, nG, c = X.shape
    Y = X.reshape(tuple(lead) + (Hkv, nG // G, G, c)).swapaxes(-3, -2)  # (..., Hkv, G, n, c)
    return np.ascontiguousarray(Y).reshape(tuple(lead) + (Hkv * G, nG // G, c))


def pack_vec(x: np.ndarray, G: int) -> np.ndarray:
    """:func:`pack_rows` of a per-row vector (L, ℓ, m): ``(..., Hq, n) → (..., Hq/G, n·G)``."""
    return pack_rows(x[..., None], G)[..., 0]


def unpack_vec(x: np.ndarray, G: int) -> np.ndarray:
    """Inverse of :func:`pack_vec`: ``(..., Hkv, n·G) → (..., Hkv·G, n)``."""
    return unpack_rows(x[..., None], G)[..., 0]


def packed_group(pb, packed: bool) -> int:
    """Loop rows per query position: g with packed GQA, else 1 (also with no query heads: nothing to pack)."""
    return pb.group if packed and pb.group > 1 else 1


def loop_problem(pb, packed: bool):
    """The problem the tile loop runs on, in the GQA schedule asked for.

    Without GQA (or a group of 1) it is ``pb``. Unpacked: K and V are K/V head ``h // g`` for every
    query head h (each query head's loads are counted). Packed: Q, masks, biases and slopes are
    laid out per K/V head with ``g·Nq`` rows (:func:`pack_rows`) and ``q_group = g``.
    ALiBi slopes become a vector of ``q_group`` slopes per loop head (row p uses slope p mod q_group).
    """
    G = pb.group
    slopes = pb.alibi_slopes
    if G == 1:
        return dataclasses.replace(pb, alibi_slopes=None if slopes is None else np.asarray(slopes)[..., None])
    if packed_group(pb, packed) == 1:  # unpacked, or no query heads (G = 0: K, V repeated 0 times, an empty loop)
        rep = {n: (None if getattr(pb, n) is None else np.repeat(getattr(pb, n), G, axis=-3)) for n in ("K", "V")}
        return dataclasses.replace(pb, kv_lead=pb.lead_shape, **rep,
                                   alibi_slopes=None if slopes is None else np.asarray(slopes)[..., None])
    kv = tuple(pb.kv_lead)
    return dataclasses.replace(
        pb, Nq=pb.Nq * G, lead_shape=kv, q_group=G, q_lead=pb.lead_shape,
        Q=None if pb.Q is None else pack_rows(pb.Q, G),
        mask=None if pb.mask is None else pack_rows(np.broadcast_to(pb.mask, pb.lead_shape + (pb.Nq, pb.Nk)), G),
        bias=None if pb.bias is None else pack_rows(np.broadcast_to(pb.bias, pb.lead_shape + (pb.Nq, pb.Nk)), G),
        alibi_slopes=None if slopes is None else np.asarray(slopes).reshape(kv + (G,)))


def check_bias_grad(bias_grad, bias) -> bool:
    """The backwards' ``bias_grad`` option: True or False, True only with a bias."""
    bias_grad = _bool(bias_grad, "bias_grad")
    if bias_grad and bias is None:
        raise ValueError("bias_grad: there is no bias to differentiate; pass the forward's bias=...")
    return bias_grad


def bias_gradient(pb, mem, G: int, name: str = "dBias") -> np.ndarray:
    """[bias] dBias in Q's leading axes, ``(..., Nq, Nk)``, from the loop's HBM tensor ``name`` (the tiled
    backwards' ``dBias``; standard's ``dS``), packed GQA's rows unpacked, as dQ's. ``pb`` is the problem before the
    loop's layout."""
    return unpack_rows(mem.result(name), G).reshape(pb.lead_shape + (pb.Nq, pb.Nk))


def kv_gradients(pb, dK, dV):
    """dK, dV in K's and V's own shape: zeros when there are no query heads (G = 0) or no (batch, head) pair at all,
    whose loop was empty (an empty batch's per-query-head dK_h are not summed: :func:`reduce_groups`)."""
    if pb.group and pb.heads:
        return dK, dV
    return np.zeros(pb.K.shape, dtype=dK.dtype), np.zeros(pb.V.shape, dtype=dV.dtype)


def reduce_groups(pb0, g, dK_h, dV_h, fc: FlopCounter, io, events=()):
    """[gqa] The pass after an unpacked backward: ``dK[h'] = Σ_{h: h // g = h'} dK_h[h]`` (and dV).

    One work item per (K/V head, column block of the grid ``g``): it loads the g query heads' Bc×d tiles one by
    one and writes their sum once. Reads 2·Hq·Nk·d, writes 2·Hkv·Nk·d (flash-attn's ``dk_expanded.sum``).
    ``io`` and ``events`` are the backward's own; returns ``(dK, dV, io, events)`` with the pass's traffic added
    and its events numbered after the backward's (the animations play them in order). An empty batch (no (batch,
    head) pair) has nothing to sum: no pass runs, and :func:`kv_gradients` gives its zeros (predict, which sees only
    the heads' product, 0, could not say the group of such a pass).
    """
    if not pb0.heads:
        return dK_h, dV_h, io, list(events)
    G, kv, Nk, d = pb0.group, tuple(pb0.kv_lead), pb0.Nk, pb0.d
    mem = Memory(pb0.sram_size, pb0.dtype_bytes, kv)
    out = []
    for name, X in (("dK", dK_h), ("dV", dV_h)):
        # (..., Hq, Nk, d) → (..., Hkv, g·Nk, d): the g query heads of a group one after another.
        mem.input(name + "_h", X.reshape(kv + (G * Nk, d)))
        mem.output(name, (Nk, d), dtype=X.dtype)
        for j in range(g.Tc):
            c0, c1 = g.cols(j)
            acc = mem.hold("acc_j", np.zeros(kv + (c1 - c0, d), dtype=X.dtype))  # (Bc, d)
            for k in range(G):
                T = mem.load(name + "_h", rows=(k * Nk + c0, k * Nk + c1), as_="T_j", line="GQA: sum dK_h, dV_h")
                acc = mem.hold("acc_j", fc.ew(acc + T, "add"))
                mem.free("T_j")
            mem.store(name, acc, rows=(c0, c1), line="GQA: sum dK_h, dV_h")
            mem.free("acc_j")
        out.append(mem.result(name))
    events = list(events)
    after = events[-1].step + 1 if events else 0  # the pass's own Memory counts its steps from 0
    events += [dataclasses.replace(e, step=e.step + after) for e in mem.events]
    return out[0], out[1], io + mem.report(), events


def sum_groups(X: np.ndarray, G: int) -> np.ndarray:
    """``(..., Hq, n, c) → (..., Hq/G, n, c)``: the sum over each group of query heads."""
    *lead, Hq, n, c = X.shape
    return X.reshape(tuple(lead) + (Hq // G, G, n, c)).sum(axis=-3)


# --------------------------------------------------------------------------- which (i, j) are seen


def band(pb) -> tuple[int, int]:
    """``(L, R)``: query i sees keys ``i − L ≤ j ≤ i + R`` (causal ∧ window; unbounded = Nq + Nk)."""
    L = R = pb.Nq + pb.Nk
    if pb.window is not None:
        left, right = pb.window
        L = left if left >= 0 else L
        R = right if right >= 0 else R
    if pb.causal:
        R = min(R, 0)
    return L, R


def _positions(pb, rows) -> tuple[int, int]:
    """First and last query position of the loop rows ``rows`` (row p is position p // q_group)."""
    return rows[0] // pb.q_group, (rows[1] - 1) // pb.q_group


def tile_visited(pb, rows, cols) -> bool:
    """False when every (i, j) of the tile is outside causal ∧ window: skip it whole (no IO)."""
    a, b = _positions(pb, rows)
    L, R = band(pb)
    return cols[0] <= b + R and cols[1] - 1 >= a - L


def tile_inside(pb, rows, cols) -> bool:
    """True when every (i, j) of the tile is inside causal ∧ window: no MASK needed for them."""
    a, b = _positions(pb, rows)
    L, R = band(pb)
    return cols[0] >= b - L and cols[1] - 1 <= a + R


def tile_attend(pb, rows, cols):
    """The attend-mask of the tile (causal ∧ window ∧ the boolean ``mask``), or ``None``: all attend."""
    out = None
    if (pb.causal or pb.window is not None) and not tile_inside(pb, rows, cols):
        L, R = band(pb)
        i = (np.arange(rows[0], rows[1]) // pb.q_group)[:, None]
        j = np.arange(cols[0], cols[1])[None, :]
        out = (j >= i - L) & (j <= i + R)  # (r, c)
    if pb.mask is not None:
        m = pb.mask[..., rows[0]:rows[1], cols[0]:cols[1]]
        out = m if out is None else (m & out)
    return out


# --------------------------------------------------------------------------- the score modifiers


def load_slopes(mem, pb, line: str, as_: str = "slopes_j"):
    """[alibi] The slopes of the loop head's query heads (1, or g with packed GQA), loaded from HBM on ``line`` and
    held on chip as ``as_``; None without ALiBi. A tile loop loads them once per block of its outer loop."""
    return None if pb.alibi_slopes is None else mem.load("alibi_slopes", rows=(0, pb.q_group), as_=as_, line=line)


def slopes_of_rows(pb, slopes_i: np.ndarray, rows) -> np.ndarray:
    """The slope of each loop row, ``(..., r)``, from the on-chip slopes ``(..., q_group)``."""
    return slopes_i[..., np.arange(rows[0], rows[1]) % pb.q_group]


def softcap(fc, pb, S, keep_dtanh=False):
    """[softcap] ``S = c·tanh(S/c)``; with ``keep_dtanh`` also its derivative ``1 − tanh²(S/c)``."""
    # c in float64 whatever S's dtype, the results cast back to it: in float32, c = 1e39 rounded to inf and
    # c = 1e-46 to 0 (S/c then NaN), where |c·tanh(S/c)| <= |S| always fits S's dtype.
    c = np.float64(pb.softcap)
    with np.errstate(over="ignore"):  # S/c past float64's range is ±inf, and tanh(±inf) = ±1 is the exact limit
        T = np.tanh(S / c)  # on the exponential unit
    S = fc.ew((c * T).astype(S.dtype), "softcap divide", "tanh", "softcap multiply")
    return S, (fc.ew((1.0 - T * T).astype(S.dtype), "square", "subtract") if keep_dtanh else None)


def alibi(fc, pb, S, rows, cols, slopes):
    """[alibi] ``S = S − slope·|i − j|`` for the loop rows ``rows`` and keys ``cols``; no IO but the slopes."""
    i = (np.arange(rows[0], rows[1]) // pb.q_group)[:, None]
    j = np.arange(cols[0], cols[1])[None, :]
    slope = slopes_of_rows(pb, slopes, rows)[..., None]  # (..., r, 1)
    # In S's dtype (the float64 slopes would promote a float32 tile). A product past the dtype is -inf, which
    # the softmax would read as "masked" (a row of zeros, or the wrong keys): raise it, as scores() does.
    with np.errstate(over="ignore", invalid="ignore"):
        S = S - (slope * np.abs(i - j)).astype(S.dtype, copy=False)
    S = require_finite(S, "the scores with ALiBi, τ·QKᵀ − alibi_slopes·|i − j|,")
    return fc.ew(S, "alibi distance", "alibi multiply", "alibi add")


def tile_scores(mem, fc, pb, Q_i, K_j, rows, cols, line, slopes_i=None, keep_dtanh=False):
    """The scores of tile (i, j), every variant in: S_ij = τ Q_i K_jᵀ, [softcap], [alibi], + B_ij (loaded from HBM on
    ``line``), then MASK where needed. The tile loops of ``flash1`` (Algorithm 1 l.9, Algorithm 4 l.11-12) and
    ``flash2`` (Algorithm 1 l.8, Algorithm 2 l.10) all compute them here.

    Held as S_ij (and, in a backward with a softcap, its derivative as dtanh_ij). Returns both.
    """
    dtanh_ij = None
    # S_ij = τ Q_i K_jᵀ (the scale folded into the matmul's epilogue, rule 5).
    S_ij = mem.hold("S_ij", fc.scores(Q_i, K_j, pb.scale))  # (Br, Bc)
    if pb.softcap is not None or slopes_i is not None:
        # [softcap] S_ij = c·tanh(S_ij/c); [alibi] S_ij −= slope·|i − j|: on chip, no IO.
        S_ij, dtanh_ij = modify_scores(fc, pb, S_ij, rows, cols, slopes_i, keep_dtanh)
        S_ij = mem.hold("S_ij", S_ij)
        if dtanh_ij is not None:
            mem.hold("dtanh_ij", dtanh_ij)  # (Br, Bc): the softcap's derivative, for dS_ij
    if pb.bias is not None:
        # [bias] load B_ij from HBM (Br·Bc reads) and add it: data, not a function of (i, j).
        B_ij = mem.load("bias", rows=rows, cols=cols, as_="B_ij", line=line)  # (Br, Bc)
        S_ij = mem.hold("S_ij", fc.add_bias(S_ij, B_ij))
        mem.free("B_ij")
    # MASK only where needed: causal ∧ [window] ∧ mask, only on tiles their edges cross (a function: no IO).
    attend = tile_attend(pb, rows, cols)
    if attend is not None:
        S_ij = mem.hold("S_ij", fc.ew(masks.apply(S_ij, attend), "mask"))
    return S_ij, dtanh_ij


def modify_scores(fc, pb, S_ij, rows, cols, slopes_i=None, keep_dtanh=False):
    """[softcap] then [alibi] on the scaled scores of one tile. Returns ``(S_ij, dtanh_ij or None)``.

    ``dtanh_ij = 1 − tanh²(S/c)`` is the softcap's derivative, kept for the backward (flash-attn's
    ``calculate_dtanh``).
    """
    dtanh = None
    if pb.softcap is not None:
        S_ij, dtanh = softcap(fc, pb, S_ij, keep_dtanh)
    if slopes_i is not None:
        S_ij = alibi(fc, pb, S_ij, rows, cols, slopes_i)
    return S_ij, dtanh
