"""Closed forms for FlashAttention-2 (Algorithms 1 and 2 as ``flashref.flash2`` runs them), line by line.

The counts below are per *loop head*: each (batch, query head), or with packed GQA each (batch,
K/V head), whose row blocks then hold g·Br rows (Nq → g·Nq for Q, O, L, dO, dQ, D). The variants:

* ``window`` (and causal): kv_i counts only the K/V tiles that meet the band [a_i − L, b_i + R]
  of row block i's positions [a_i, b_i], at both ends. Leading term of the forward with a window
  w = left + right + 1 (Nq = Nk = N ≫ w ≫ Br, Bc): ``2·N·d·(w − 1 + Br)/Br`` when the window's
  edges fall on tile edges, at most ``2·N·d·(w − 1 + Br + 2(Bc − 1))/Br`` (a row block's band can round out
  by up to Bc − 1 keys at each end); ≈ ``2·N·w·d/Br``, linear in N (against ≈ N²·d/Br causal, 2·N²·d/Br full,
  without it), and Θ(N·w·d²/M) where Br = Θ(M/d).
* ``enable_gqa`` unpacked (default): the counts of Hq heads; the backward adds the group sum
  ``2·Hq·Nk·d`` reads and ``2·Hkv·Nk·d`` writes. Packed: K/V reads are those of Hkv loop heads, so
  the forward's leading term ``2·Hq·Nq·Nk·d/Br`` becomes ``2·Hkv·Nq·Nk·d/Br'``, with Br' ≤ Br (in
  query positions, as :func:`flashref.iomodel.grid` reports it) the block the g-times taller tile
  (g·Br' loop rows) allows: K/V traffic ÷ g at equal Br.
* ``alibi_slopes``: g slopes (1 unpacked) per row block (forward) or visited column block
  (backward): ``Hq·Tr`` reads in the forward and ``Hq·(visited column blocks)`` in the backward (``Hq·Tc``
  without causal skipping), against the bias's ``Hq·Nq·Nk``.
* ``softcap``: no IO (one more exp-unit FLOP per score; a third Br×Bc tile in the backward's footprint).

Per head, Tr = ⌈Nq/Br⌉, Tc = ⌈Nk/Bc⌉, with the block sizes ``flash2`` resolves for the same options.

forward                               reads                      writes
  Alg.1 l.4   Q_i, once per i         Nq·d
  Alg.1 l.7   K_j, V_j per (i, j)     2·d·Σ_i kv_i               (kv_i = Nk, or causal: the keys of
  Alg.1 l.8   bias B_ij (if any)      Σ_i Br_i·kv_i               the blocks j not skipped; Br_i: the
                                                                  rows of block i)
  Alg.1 l.14  O_i, once per i                                    Nq·d
  Alg.1 l.15  L_i, once per i                                    Nq

backward
  Alg.2 l.3   dQ = 0 in HBM                                      Nq·d
  Alg.2 l.4   D = rowsum(dO∘O)        2·Nq·d                     Nq
  Alg.2 l.6   K_j, V_j per visited j  2·d·Σ_j Bc_j [j visited]
  Alg.2 l.9   Q_i, dO_i, dQ_i, L_i,   (3d + 2)·Σ_j q_j           (q_j = Nq, or causal: the queries
              D_i per (j, i)                                      of the row blocks not skipped)
  Alg.2 l.10  bias B_ij (if any)      Σ_j q_j·Bc_j
  Alg.2 l.15  dQ_i per (j, i)                                    d·Σ_j q_j
  Alg.2 l.18  dK_j, dV_j once per j                              2·Nk·d

The backward drops the two redundant loads of the printed box (the one exception to rule 4 of
docs/counting-rules.md): O_i at l.9, unused once D is precomputed, and dQ_i again at l.15, which l.9
loaded; as printed, the box would read ``2·d·Σ_j q_j`` more.

Without causal masking: forward ``Nq·d + 2·Tr·Nk·d`` reads and ``Nq·d + Nq`` writes. A mask or
dropout changes no count at given blocks (both are applied on chip; but the backward holds dropout's Z_ij,
a Br×Bc tile, from l.12 to l.13, so at a given M its blocks may be smaller); a bias adds ``Nq·Nk`` reads per pass
(fewer with causal skipping), the Θ(N²) term that MASK as a function avoids. Causal skipping makes Σ_i kv_i and Σ_j q_j
about half of Tr·Nk and Tc·Nq for Nq = Nk ≫ Br, Bc: kv_i = min(Nk, Bc·⌈r_i/Bc⌉) where r_i is the
last query row of block i plus one; a column block j is visited by the row blocks
i ≥ ⌊j·Bc/Br⌋, so q_j = Nq − Br·⌊j·Bc/Br⌋ when j·Bc < Nq, else 0 (and then K_j, V_j are not loaded
but dK_j = dV_j = 0 are still written).
"""

from __future__ import annotations

import numbers
from typing import NamedTuple

import numpy as np

from .. import flash2, variants
from .._numbers import _bool, _nonnegative_int, positive_int
from ..problem import SEQ_LEN, Problem
from ..variants import band
from . import Prediction, Tally

__all__ = ["forward", "backward", "backward_without_queries", "kv_per_row_block", "q_per_column_block",
           "band_totals", "BandTotals", "group_sum"]

_UNBOUNDED = 1 << 62


def _tiles(Nq, Nk, Br, Bc, causal, L, R):
    """The public tile counters' arguments checked as ``predict`` checks them, and made Python ints: numpy's small
    integers would wrap (``np.uint8(255) * 3`` is 253), and a list of a length past SEQ_LEN would take hours.

    A reach ``L``, ``R`` is an integer >= 0, or -1 for unbounded, as each side of ``window=`` is; a reach below -1
    is refused (it had counted no key at all, silently)."""
    Nq, Nk = _nonnegative_int(Nq, "Nq", SEQ_LEN), _nonnegative_int(Nk, "Nk", SEQ_LEN)
    Br, Bc = positive_int(Br, "Br"), positive_int(Bc, "Bc")
    return Nq, Nk, Br, Bc, _bool(causal, "causal"), _reach(L, "L"), _reach(R, "R")


def _reach(x, name: str) -> int:
    """A band's reach as a Python int: an integer >= 0, or -1 for unbounded (as each side of ``window=``)."""
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, numbers.Integral):
        raise TypeError(f"{name}: expected an integer (a band's reach), got {x!r}")
    if x < -1:
        raise ValueError(f"{name}: expected a band's reach >= 0, or -1 for unbounded (as window=), got {x!r}")
    return _UNBOUNDED if x == -1 else int(x)


def _block(a, b, m, C, back, fwd) -> tuple[int, int]:
    """One block of rows [a, b] that sees the columns [a − back, b + fwd] of ``m``, loaded as whole tiles of ``C``
    columns (the last ragged): ``(columns loaded, tiles loaded)``. The tiles run from ⌊max(0, a − back)/C⌋ to
    ⌊min(m − 1, b + fwd)/C⌋; none where that range is empty."""
    lo, hi = max(0, a - back), min(m - 1, b + fwd)
    if hi < lo:
        return 0, 0
    return min(m, (hi // C + 1) * C) - (lo // C) * C, hi // C - lo // C + 1


def kv_per_row_block(Nq, Nk, Br, Bc, causal, L=_UNBOUNDED, R=_UNBOUNDED) -> list[int]:
    """Keys loaded (K_j, V_j rows) for each row block i of the forward (``Br`` query positions).

    Row block i holds positions [a, b]; it sees keys [a − L, b + R] (R ≤ 0 if causal), so the
    tiles from ⌊max(0, a − L)/Bc⌋ to ⌊min(Nk − 1, b + R)/Bc⌋ are loaded, whole. ``L`` or ``R`` = -1 (or left
    out) is unbounded, as in ``window=``; below -1 is refused. (:func:`band_totals` sums these without a loop.)
    """
    Nq, Nk, Br, Bc, causal, L, R = _tiles(Nq, Nk, Br, Bc, causal, L, R)
    R = min(R, 0) if causal else R
    return [_block(i * Br, min((i + 1) * Br, Nq) - 1, Nk, Bc, L, R)[0] for i in range(-(-Nq // Br))]


def q_per_column_block(Nq, Nk, Br, Bc, causal, L=_UNBOUNDED, R=_UNBOUNDED) -> list[int]:
    """Query positions visited (rows of Q_i, dO_i, dQ_i, L_i, D_i) for each column block j of the backward.

    Keys [c0, c1) are seen by positions [c0 − R, c1 − 1 + L]: the row blocks from
    ⌊max(0, c0 − R)/Br⌋ to ⌊min(Nq − 1, c1 − 1 + L)/Br⌋ are visited, whole. ``L`` or ``R`` = -1 (or left
    out) is unbounded, as in ``window=``; below -1 is refused.
    """
    Nq, Nk, Br, Bc, causal, L, R = _tiles(Nq, Nk, Br, Bc, causal, L, R)
    R = min(R, 0) if causal else R
    # the forward's rule with rows and columns swapped: key block j sees queries [c0 − R, c1 − 1 + L]
    return [_block(j * Bc, min((j + 1) * Bc, Nk) - 1, Nq, Br, R, L)[0] for j in range(-(-Nk // Bc))]


class BandTotals(NamedTuple):
    """:func:`band_totals`: sums over the blocks of rows."""
    loaded: int  # Σ columns loaded (Σ_i kv_i in the forward, Σ_j q_j in the backward)
    weighted: int  # Σ rows × columns loaded (the bias's tiles)
    tiles: int  # Σ tiles loaded
    blocks: int  # blocks that load any column
    rows: int  # Σ rows of those blocks


def _floor_sum(n: int, m: int, a: int, b: int) -> int:
    """Σ_{t=0}^{n-1} ⌊(a·t + b)/m⌋ for integers n ≥ 0, m ≥ 1, a ≥ 0, b ≥ 0, in O(log m) steps.

    The whole parts of a/m and b/m add ⌊a/m⌋·n(n−1)/2 + ⌊b/m⌋·n; what is left (a, b < m) counts the lattice points
    under the line y = (a·t + b)/m, which counted along y instead is the same kind of sum with a and m swapped (the
    Euclidean algorithm's step): n' = ⌊(a·n + b)/m⌋ terms, a' = m, m' = a, b' = (a·n + b) mod m."""
    total = 0
    while n > 0:
        total += (a // m) * (n * (n - 1) // 2) + (b // m) * n
        a, b = a % m, b % m
        top = a * n + b
        if top < m:  # every term left is 0
            break
        n, b, m, a = top // m, top % m, a, m
    return total


def band_totals(n: int, B: int, m: int, C: int, back: int, fwd: int) -> BandTotals:
    """The per-block counts of :func:`kv_per_row_block` (rows n = Nq in blocks B = Br, columns m = Nk in tiles
    C = Bc, back = L, fwd = R) or :func:`q_per_column_block` (n = Nk, B = Bc, m = Nq, C = Br, back = R, fwd = L),
    summed in closed form: the predictions need only the sums, and a loop over row blocks takes minutes at
    N = 2^31 with small blocks. Reaches are integers ≥ 0, or -1 for unbounded (as the per-block lists take them);
    the arguments are checked as those lists check theirs (numpy's small integers made Python ints, which do not
    wrap).

    Every block but the last holds B rows: block i sees columns from max(0, iB − back), whose tile index is 0 up to
    i = ⌊back/B⌋ and ⌊(iB − back)/C⌋ after, to the tile of min(m − 1, iB + B − 1 + fwd), whose index plus one is
    ⌊(iB + B − 1 + fwd)/C⌋ + 1 until it reaches Tc = ⌈m/C⌉, and Tc after. Blocks load columns while iB − back < m.
    Each piece is a sum of ⌊(B·t + b)/C⌋ (:func:`_floor_sum`); the last block is added as :func:`_block` counts it.
    """
    n, m = _nonnegative_int(n, "n", SEQ_LEN), _nonnegative_int(m, "m", SEQ_LEN)
    B, C = positive_int(B, "B"), positive_int(C, "C")
    back, fwd = _reach(back, "back"), _reach(fwd, "fwd")
    T = -(-n // B)
    if T == 0:
        return BandTotals(0, 0, 0, 0, 0)
    full, Tc = T - 1, -(-m // C)
    E = min(full, (m - 1 + back) // B + 1) if m else 0  # blocks 0..E-1 of the full ones load columns
    # first tile: 0 for blocks i < p1, ⌊(iB − back)/C⌋ from p1 on
    p1 = min(E, back // B + 1)
    first = _floor_sum(E - p1, C, B, p1 * B - back)
    # one past the last tile: ⌊(iB + B − 1 + fwd)/C⌋ + 1 for blocks i < k, Tc (the ragged last tile) from k on
    k = min(E, max(0, -(-(C * (Tc - 1) - (B - 1 + fwd)) // B)))
    end = k + _floor_sum(k, C, B, B - 1 + fwd) + Tc * (E - k)
    # columns: C per tile, but the last tile holds m − C·(Tc − 1) of them
    loaded = C * (end - first) - (C * Tc - m) * (E - k)
    last_rows = n - full * B
    last, last_tiles = _block(full * B, n - 1, m, C, back, fwd)
    return BandTotals(loaded=loaded + last, weighted=B * loaded + last_rows * last, tiles=end - first + last_tiles,
                      blocks=E + (last > 0), rows=B * E + (last_rows if last > 0 else 0))


def _loop(pb: Problem, g):
    """(loop heads, g rows per position, Br in positions, band L, R) of the tile loop."""
    G = variants.packed_group(pb, pb.gqa_packing)
    heads = pb.kv_heads if G > 1 else pb.heads
    L, R = band(pb)
    return heads, G, g.Br // G, L, R


def forward(pb: Problem, **lowp_opts) -> Prediction:
    from . import lowp  # iomodel.lowp builds on this module, so it is imported when called

    if lowp.requested(lowp_opts):
        return lowp.forward(pb, **lowp_opts)
    g = flash2.grid_forward(pb)
    Nq, Nk, d = pb.Nq, pb.Nk, pb.d
    heads, G, Br, L, R = _loop(pb, g)
    kv = band_totals(Nq, Br, Nk, g.Bc, L, R)  # Σ_i kv_i, and Σ_i r_i·kv_i (r_i: block i's query positions)
    t = Tally(heads, pb.dtype_bytes)
    t.add("Alg.1 l.4", reads=G * Nq * d + (G * g.Tr if pb.alibi_slopes is not None else 0))
    t.add("Alg.1 l.7", reads=2 * d * kv.loaded)
    if pb.bias is not None:  # G loop rows a query position
        t.add("Alg.1 l.8", reads=G * kv.weighted)
    t.add("Alg.1 l.14", writes=G * Nq * d)
    t.add("Alg.1 l.15", writes=G * Nq)
    return t.prediction()


def backward(pb: Problem, bias_grad=False, **lowp_opts) -> Prediction:
    from . import lowp  # iomodel.lowp builds on this module, so it is imported when called

    if lowp.requested(lowp_opts):
        raise TypeError(f"{', '.join(sorted(lowp_opts))}: the low-precision options apply to flash2's forward only")
    bias_grad = variants.check_bias_grad(bias_grad, pb.bias)
    g = flash2.grid_backward(pb)
    Nq, Nk, d = pb.Nq, pb.Nk, pb.d
    heads, G, Br, L, R = _loop(pb, g)
    t = Tally(heads, pb.dtype_bytes)
    # the forward's sums with rows and columns swapped: Σ_j q_j (in query positions; G loop rows each), the column
    # blocks visited and their keys, and Σ_j q_j·Bc_j (the bias's tiles)
    q = band_totals(Nk, g.Bc, Nq, Br, R, L)
    t.add("Alg.2 l.3", writes=G * Nq * d)
    t.add("Alg.2 l.4", reads=2 * G * Nq * d, writes=G * Nq)
    t.add("Alg.2 l.6", reads=2 * d * q.rows + (G * q.blocks if pb.alibi_slopes is not None else 0))
    t.add("Alg.2 l.9", reads=(3 * d + 2) * G * q.loaded)
    if pb.bias is not None:
        t.add("Alg.2 l.10", reads=G * q.weighted)
    t.add("Alg.2 l.15", writes=d * G * q.loaded)
    t.add("Alg.2 l.18", writes=2 * Nk * d)
    if bias_grad:  # [bias] dBias: every tile written once, dS_ij where visited and zeros where skipped
        t.add("dBias", writes=G * Nq * Nk)
    return t.prediction() + group_sum(pb)


def backward_without_queries(pb: Problem) -> Prediction:
    """``flash2.backward_varlen`` on a sequence with keys but no queries (``pb.Nq = 0``).

    No column block is visited, so nothing is loaded, and each writes its zero dK_j, dV_j once
    (Alg.2 l.18): ``2·Nk·d`` writes per loop head, plus with unpacked GQA the group sum of those zeros.
    (The general form above at Nq = 0 gives the same counts, with its other lines at zero.)
    """
    flash2.grid_backward(pb)  # the simulator's block sizes: refused alike when they do not fit (the counts need none)
    G = variants.packed_group(pb, pb.gqa_packing)
    t = Tally(pb.kv_heads if G > 1 else pb.heads, pb.dtype_bytes)
    t.add("Alg.2 l.18", writes=2 * pb.Nk * pb.d)
    return t.prediction() + group_sum(pb)


def group_sum(pb: Problem) -> Prediction:
    """[gqa] unpacked: dK = Σ_group dK_h (and dV): read the g query heads' tiles, write one. Else nothing."""
    red = Tally(pb.kv_heads, pb.dtype_bytes)
    if pb.group > 1 and not pb.gqa_packing:
        red.add("GQA: sum dK_h, dV_h", reads=2 * pb.group * pb.Nk * pb.d, writes=2 * pb.Nk * pb.d)
    return red.prediction()

