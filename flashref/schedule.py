"""How a kernel's thread blocks (CTAs) run: grid order, CTAs resident per SM, waves, scan order.

A FlashAttention kernel is a grid of CTAs. Each one owns a private tile (the forward: a row block
Q_i, written back as O_i; the dK/dV kernels: a column block K_j, V_j, written back as dK_j, dV_j)
and *scans* the other operand of its head tile by tile (K_j, V_j for the forward; Q_i, dO_i, L_i,
D_i and the fp32 dQ_i for the backward). ``SMs x blocks_per_sm`` CTAs are resident at once; the
rest wait in grid order and start as slots free up. Whether a scanned tile comes from DRAM or from
L2 depends on how long ago another CTA of the same head read it: this module says who reads what
when, :mod:`flashref.l2` says what that costs, and :mod:`flashref.iomodel.dram` has the closed form.

:class:`ScanKernel` describes one such kernel; :func:`simulate` runs it against an
:class:`~flashref.l2.L2Cache`, one tile per resident CTA per step (every CTA of the kernel
advances at the same speed, so CTAs launched together walk the same tiles in lockstep). The
builders give the kernels modelled:

* flashref's Triton kernels (``flashref/gpu/kernels.py``, kernel 2, with its default tiles from
  ``flashref/gpu/config.py``): the forward over row blocks (grid ``(Tr, B·H)``, row block fastest;
  causal: longest rows first, and for d = 128 heads fastest, ``HEADS_FIRST``: also d = 96, which the
  kernel pads to 128), K/V scanned in ascending order; the dK/dV kernel over column blocks (grid
  ``(Tc, B·H)``), rows scanned ascending, non-causal programs starting at their own column block
  (``STAGGER``), with the fp32 dQ updated by atomics (read and written in L2);
* flashref's kernel 3 (``flashref/gpu/kernel3.py``, ``kernel3_bwd.py``, Gluon), what ``gpu.attention`` runs
  on Hopper: the 128 x 128 forward over row blocks, the dK/dV kernel without dQ, and the dQ kernel, which
  scans K and V again; their tiles from the kernel's own tables, their CTAs per SM from their builds'
  registers and shared memory (``python -m flashref.gpu.occupancy``);
* FlashAttention-2's CUDA kernels as PyTorch's SDPA flash backend runs them (``flash_fwd_kernel``
  with grid ``(Tr, B, H)``, 128 x 128 tiles at d = 64, 128 x 64 at d = 96, 128 and 192, 64 x 64 at d = 256
  (``FA2_TILES``: the head dims PyTorch builds; any other d runs the next larger), two CTAs per SM (one at
  d = 192), each CTA walking its key blocks from the last to the first;
  ``flash_bwd_dq_dk_dv_loop_seqk_parallel`` with grid ``(Tc, B, H)``, 128 x 128 tiles at d = 64,
  64 x 128 at d = 96 and 128, 64 x 64 at d = 192 and 256, one CTA per SM,
  walking its row blocks from the last to the first, dQ accumulated in fp32 with atomics).

The tiles, grids and CTAs per SM are what Nsight Compute reports for these launches (every recorded run's
``kernels``: the kernel's name, ``grid``, ``launch__occupancy_limit_*``; tested against all of them).
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import functools
import itertools
import math
import numbers
import re
from dataclasses import dataclass, field

import numpy as np

from .l2 import L2Cache
from .parallelism import efficiency
from .problem import _causal, _nonnegative_int, positive_int

__all__ = ["ScanKernel", "simulate", "launch_times", "flashref_fwd", "flashref_dkdv", "flashref3_fwd", "flashref3_dkdv",
           "flashref3_dq", "fa2_fwd", "fa2_bwd", "fa2_num_splits", "SMS"]

SMS = 132  # H100 SXM and H200


@dataclass
class ScanKernel:
    """One kernel of CTAs that each scan a range of tiles of their head's operand.

    ``ranges[c] = (lo, hi)``: CTA ``c`` of a head (by its block index) scans tiles lo..hi-1;
    ``descending`` scans hi-1 down to lo; ``stagger`` starts CTA c's non-causal scan at tile
    ``(c * stagger) % n_tiles`` and wraps. ``launch[p]`` is the block index the p-th CTA of a head
    launched runs (causal: longest first). ``heads_first``: the grid's fastest axis is the head. ``synced``: a
    barrier starts each round of CTAs together (kernel 3's persistent launches past its knee), so every CTA of a
    pass reads a tile at one reuse distance (the L2 model gives such a pass a sharper knee of its own).
    ``rounds_together``: kernel 3's non-causal forward and dQ kernel short of that barrier's threshold, whose rounds
    of equal tiles start together without it (they came apart without one only past it).
    ``drift_ramp``: the CTAs sharing an SM drift apart over the kernel's first waves (FlashAttention-2's forward
    kernels but the d = 64 one), not from the second wave on. ``comes_apart``: a pass's CTAs, one an SM, drift apart
    more the longer the kernel has run, where they scan the same tiles (FlashAttention-2's backward on its 128 x 128
    tiles). ``heads_roll_in``: the first pass of each head after the grid's first wave starts as the CTAs of the head
    before it end, and reads its tiles more than once (FlashAttention-2's forward on its 128 x 128 tiles).
    """

    name: str
    heads: int
    n_tiles: int  # tiles of the scanned operand per head
    tile_bytes: int  # bytes read per scanned tile
    rmw_bytes: int  # bytes read and written back per scanned tile (fp32 dQ atomics)
    private_read: int  # per CTA, read once at its start
    private_write: int  # per CTA, written once at its end
    resident: int  # CTAs resident at once (SMs x blocks per SM)
    ranges: list = field(repr=False, default_factory=list)
    launch: list = field(repr=False, default_factory=list)
    heads_first: bool = False
    descending: bool = False
    stagger: int = 0
    sms: int = SMS
    synced: bool = False  # a barrier between rounds of tiles: every CTA of a round starts its scan together
    rounds_together: bool = False  # no barrier, and its rounds start together all the same (short of the knee)
    drift_ramp: bool = False  # the CTAs sharing an SM drift apart over the kernel's first waves, not at once
    comes_apart: bool = False  # a pass's CTAs drift apart more the longer the kernel has run
    heads_roll_in: bool = False  # a head's first pass after the first wave reads its tiles more than once
    # A ragged last tile (N not a multiple of the block): the kernels mask the rows past N, which are never
    # read or written. Every byte of a tile is per row (K_j, V_j; Q_i, dO_i, L_i, D_i, dQ_i; O_i, L_i), so
    # the last scanned tile moves last_scan of a full one's bytes, and the last CTA's own tile last_cta.
    last_scan: float = 1.0
    last_cta: float = 1.0

    @property
    def ctas_per_head(self):
        return len(self.ranges)

    def grid_order(self):
        """(head, block) of every CTA in the order the hardware launches them."""
        heads, blocks = self.grid_arrays()
        return list(zip(heads.tolist(), blocks.tolist()))

    def grid_arrays(self):
        """The launch order as two integer arrays (heads, blocks): heads fastest when ``heads_first``, else each
        head's blocks in ``launch`` order, head by head."""
        T, H = self.ctas_per_head, self.heads
        block = np.asarray(self.launch, dtype=np.int64)
        if self.heads_first:
            return np.tile(np.arange(H, dtype=np.int64), T), np.repeat(block, H)
        return np.repeat(np.arange(H, dtype=np.int64), T), np.tile(block, H)

    @property
    def same_scans(self):
        """Whether every CTA of a head scans the same tiles (a non-causal grid)."""
        return len(set(map(tuple, self.ranges))) == 1  # (pairs, or the rows of an array given as ranges)

    @property
    def diagonal_starts(self):
        """Whether the CTAs start their scans at different tiles and do not wrap: flashref's causal
        dK/dV kernel, whose column block j starts at its diagonal row block and walks down (and
        FlashAttention-2's causal forward, which walks its keys from the diagonal down and has a rule
        of its own, ``iomodel.dram.staggered_scan_bytes``). Those launched together never read one
        tile at once."""
        if self.stagger or len(self.ranges) == 0:  # (not ``not ranges``: an array given as ranges has no truth)
            return False
        starts = self.range_array()[:, 1] - 1 if self.descending else self.range_array()[:, 0]
        return bool((starts != starts[0]).any())

    @property
    def rolling(self):
        """Whether the grid is a causal one of row blocks that all scan their key tiles from tile 0 up, to ends of
        their own, launched longest first: kernel 3's causal forward and dQ kernels, kernel 2's causal forward.
        Its CTAs of one wave end one after another, so after the first wave a CTA starts whenever one ends: a
        head's later passes roll in one CTA at a time rather than start together (``iomodel.dram.scan_bytes``)."""
        if self.descending or self.stagger or len(self.ranges) == 0:
            return False
        r = self.range_array()
        return bool((r[:, 0] == 0).all() and (r[:, 1] != r[0, 1]).any())

    def range_array(self):
        """``ranges`` as a (CTAs, 2) array of the bounds' own type (int64 for the builders'). numpy reads the flat
        list of bounds several times faster than the list of pairs, and the L2 scorecard reads tens of thousands of
        grids; ranges that are not all pairs (a grid edited by hand) are read as they are, for _checked to refuse."""
        # Kept with the list it was read from: the checks, ``rolling``, ``diagonal_starts`` and the closed forms each
        # ask for it, about five times a grid, and the scorecard's ablation lays out 140 thousand grids (a quarter of
        # its time went here). A grid's ranges are a value, replaced and never edited in place (the builders, tests
        # and notebooks all replace them); the array is read-only, so no caller can change what the next one reads.
        kept = self.__dict__.get("_range_array")
        if kept is not None and kept[0] is self.ranges and kept[1] == len(self.ranges):
            return kept[2]
        try:
            pairs = set(map(len, self.ranges)) == {2}
        except TypeError:  # an entry without a length
            pairs = False
        if pairs:
            r = np.array(list(itertools.chain.from_iterable(self.ranges))).reshape(-1, 2)
        else:
            r = np.asarray(self.ranges)
        if r is self.ranges:  # an array given as ranges: read, not frozen
            r = r.view()
        r.flags.writeable = False
        self.__dict__["_range_array"] = (self.ranges, len(self.ranges), r)
        return r

    def span(self, lo, hi):
        """Scanned tiles lo..hi-1 of one head, counted in full tiles (the ragged last one as its share)."""
        if hi <= lo:
            return 0.0
        return (hi - lo) - ((1.0 - self.last_scan) if hi == self.n_tiles else 0.0)

    def cta_share(self, c):
        """CTA ``c``'s own tile as a share of a full one (the last block of a head may be ragged)."""
        return self.last_cta if c == self.ctas_per_head - 1 else 1.0

    def private_total(self):
        """Tiles' worth of private blocks per head: every CTA's own tile, the ragged last one as its share."""
        return self.ctas_per_head - (1.0 - self.last_cta)

    def tiles(self, c):
        lo, hi = self.ranges[c]
        if self.stagger and (lo, hi) == (0, self.n_tiles):
            s = (c * self.stagger) % self.n_tiles
            return [(s + t) % self.n_tiles for t in range(self.n_tiles)]
        return list(range(hi - 1, lo - 1, -1)) if self.descending else list(range(lo, hi))


def _checked(k) -> ScanKernel:
    """``k``, refused unless a ScanKernel with CTAs resident (``resident`` may be set by hand, as notebook 08 does:
    with none, :func:`simulate` would wait forever for a free slot and the closed forms divide by zero), and a grid
    that describes one: the builders' always do, a kernel built or edited by hand may not."""
    if not isinstance(k, ScanKernel):
        raise TypeError(f"k: expected a schedule.ScanKernel, got {type(k).__name__}")
    positive_int(k.resident, "resident (CTAs resident at once)")
    # Unchecked, heads=-1 gave -1 waves and negative bytes, heads=0 an IndexError in scan_bytes, and a negative
    # tile_bytes negative DRAM bytes from scan_bytes (while simulate refused it).
    positive_int(k.heads, "heads")
    positive_int(k.n_tiles, "n_tiles")
    positive_int(k.sms, "sms")  # unchecked, 0 divided by zero in the closed forms and -1 ran silently
    _nonnegative_int(k.stagger, "stagger")
    for name in ("tile_bytes", "rmw_bytes", "private_read", "private_write"):
        v = getattr(k, name)
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, numbers.Real):
            raise TypeError(f"{name}: expected a number of bytes, got {v!r}")
        if not 0 <= v < math.inf:
            raise ValueError(f"{name}: expected a finite number of bytes >= 0, got {v!r}")
    for name in ("last_scan", "last_cta"):  # a ragged last tile moves a share of a full one's bytes: (0, 1]
        v = getattr(k, name)
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, numbers.Real) or not 0 < v <= 1:
            raise ValueError(f"{name}: expected the last tile's share of a full one, in (0, 1], got {v!r}")
    # Every CTA of a head launched exactly once, each scanning tiles inside 0..n_tiles-1: a launch list missing a
    # block ran too few CTAs, one naming a block twice ran it twice, a range past n_tiles read tiles the operand has
    # not, and lo > hi gave launch_times a CTA that ended before it started; all silently.
    T = len(k.ranges)
    if T == 0:
        raise ValueError("ranges: expected one (lo, hi) per CTA of a head, got none")
    launch = np.asarray(k.launch)
    if launch.shape != (T,) or launch.dtype.kind not in "iu" or not np.array_equal(np.sort(launch), np.arange(T)):
        raise ValueError(f"launch: expected each of the {T} blocks 0..{T - 1} once, in launch order")
    r = k.range_array()
    if r.shape != (T, 2) or r.dtype.kind not in "iu" or ((r[:, 0] < 0) | (r[:, 0] > r[:, 1])
                                                          | (r[:, 1] > k.n_tiles)).any():
        raise ValueError(f"ranges: expected integer (lo, hi) with 0 <= lo <= hi <= n_tiles ({k.n_tiles}) per CTA")
    return k


def simulate(k: ScanKernel, cache: L2Cache) -> L2Cache:
    """Run ``k`` against ``cache``: every resident CTA loads one scanned tile per step.

    A CTA's private tile is read when it starts and written when it ends; a finished CTA's slot
    takes the next CTA in grid order at the next step (a CTA with no tile to scan ends as it starts, in no step,
    as in :func:`launch_times`). Returns the cache, whose counters hold the
    L2 and DRAM bytes (``dram_writes + dirty_bytes()`` = every write that eventually reaches DRAM).
    """
    if not isinstance(cache, L2Cache):
        raise TypeError(f"cache: an L2Cache to run the kernel against, got {type(cache).__name__}")
    order = _checked(k).grid_order()
    nxt = 0
    slots = []  # [head, block, remaining tiles (reversed list)]

    def end(h, c):
        if k.private_write:
            cache.access(("o", h, c), round(k.private_write * k.cta_share(c)), write=True)

    while nxt < len(order) or slots:
        while len(slots) < k.resident and nxt < len(order):
            h, c = order[nxt]
            nxt += 1
            if k.private_read:
                cache.access(("p", h, c), round(k.private_read * k.cta_share(c)))
            tiles = k.tiles(c)
            if not tiles:  # nothing to scan (a causal column block past the last row block, Nk > Nq): it ends as it
                end(h, c)  # starts and frees its slot at once, as in launch_times (it used to hold it for a step)
                continue
            slots.append([h, c, tiles[::-1]])
        done = []
        for s in slots:
            h, c, rest = s
            if rest:
                t = rest.pop()
                share = k.span(t, t + 1)
                cache.access(("s", h, t), round(k.tile_bytes * share))
                if k.rmw_bytes:
                    cache.access(("r", h, t), round(k.rmw_bytes * share))  # read ...
                    cache.access(("r", h, t), round(k.rmw_bytes * share), write=True)  # ... modify, write (in L2)
            if not rest:
                done.append(s)
        for s in done:
            end(s[0], s[1])
            slots.remove(s)
    return cache


# ------------------------------------------------------------------------------------ builders

def _shape(BH, Nq, Nk, d, causal, e, sms):
    """A builder's arguments, checked by the rules of every entry point (flashref.problem); a head dim past the
    largest tiles' (256, as iomodel.dram refuses it) would be read with the d = 256 tiles and its own bytes."""
    BH, Nq, Nk, d = (positive_int(v, name) for v, name in ((BH, "BH"), (Nq, "Nq"), (Nk, "Nk"), (d, "d")))
    if d > 256:
        raise ValueError(f"d: the kernels modelled run head dims up to 256, got {d}")
    return BH, Nq, Nk, d, _causal(causal), positive_int(e, "e"), positive_int(sms, "sms")


def _blocks(blocks):
    """A builder's ``blocks=(BLOCK_M, BLOCK_N)`` override, checked (a zero would divide by zero), or None."""
    if blocks is None:
        return None
    if not isinstance(blocks, (tuple, list)) or len(blocks) != 2:
        raise TypeError(f"blocks: expected (BLOCK_M, BLOCK_N), got {blocks!r}")
    return positive_int(blocks[0], "blocks[0] (BLOCK_M)"), positive_int(blocks[1], "blocks[1] (BLOCK_N)")


def _tiles3(table, d, causal, what):
    """Kernel 3's tiles at (d, causal) from ``table``, or an error naming the head dims it has tiles for."""
    try:
        return table[(d, causal)]
    except KeyError:
        raise ValueError(f"d={d}: kernel 3's {what} has tiles for d in {sorted({k[0] for k in table})} only "
                         f"(causal={causal})") from None


def _tiles_arg(tiles, kind):
    """``tiles`` (None: the defaults), checked to be a ``kind`` (kernel 3's Tiles3 or TilesB)."""
    if tiles is not None and not isinstance(tiles, kind):
        raise TypeError(f"tiles: a {kind.__name__} or None, got {type(tiles).__name__}")
    return tiles


def _cdiv(a, b):
    return -(-a // b)


def _row_ranges(Tr, Tc, BM, BN, causal, Nk):
    """Key-tile range [0, hi) of each row block (causal: up to the diagonal)."""
    if not causal:
        return [(0, Tc)] * Tr
    # row block i sees keys up to min(Nk, (i + 1) * BM): numpy over the blocks (a causal grid at N = 10^6 has
    # thousands, and the L2 scorecard builds this list for every row it predicts), back to Python ints
    ends = np.minimum(Nk, np.arange(1, Tr + 1, dtype=np.int64) * BM)
    return list(zip([0] * Tr, np.minimum(Tc, -(-ends // BN)).tolist()))


def _col_ranges(Tc, Tr, BM, BN, causal, Nq):
    """Row-tile range [lo, Tr) of each column block (causal: from the diagonal down)."""
    if not causal:
        return [(0, Tr)] * Tc
    return [(min(Tr, (j * BN) // BM), Tr) for j in range(Tc)]


# Kernel 2's tiles and heads-first flag are its own defaults (flashref/gpu/config.py, Config().resolve, as on a
# GPU). Its CTAs per SM are Nsight's occupancy limits (registers, shared memory) of each launch its defaults make, keyed
# by what decides them: the padded head dim and the tiles (BLOCK_M, BLOCK_N, warps, stages). Every launch its defaults
# make has been measured (d = 32, 80, 160 and 192 first by check52, d = 16 by check54); a launch of tiles the defaults
# never choose takes the count of the same tiles at the nearest padded head dim (_kernel2_ctas).
KERNEL2_CTAS_PER_SM = {
    "fwd": {(16, 128, 64, 4, 3): 3, (32, 128, 64, 4, 3): 3, (64, 128, 128, 4, 3): 2, (128, 128, 64, 8, 3): 2,
            (128, 256, 64, 8, 3): 1, (256, 64, 64, 4, 2): 2, (256, 128, 64, 8, 2): 1},
    "dkdv_atomic": {(16, 64, 64, 4, 3): 3, (32, 64, 64, 4, 3): 2, (64, 128, 128, 8, 2): 1, (128, 64, 128, 8, 3): 1,
                    (256, 64, 128, 8, 2): 1, (256, 32, 128, 8, 2): 1, (256, 32, 64, 8, 2): 1}}
# Where Triton's build for lengths that are multiples of 16 holds a different count. Triton compiles a kernel once per
# specialization of its integer arguments, and one divisible by 16 is a specialization of its own (loads and masks may
# then assume it): kernel 2's d = 32 dK/dV kernel took 157-159 registers a thread where Nq and Nk are multiples of 16
# (3 CTAs an SM: check65, check69, causal or not) and 180-206 where they are not (2: check52's and check77's causal
# calls, every ragged non-causal one); k2div16, aimed at the rule, found non-causal lengths that are multiples of 16
# and fill no tile at 3 too. _kernel2_ctas reads this table first (KERNEL2_BUILDS = "div16 loop").
#
# Which length? Until check97 every call measured at d = 32 had both or neither a multiple of 16. check97's
# 2 x 16 x 1696 x 26653 (Nq a multiple, Nk not) held 3 CTAs an SM at 159 registers. The dK/dV kernel walks the query
# blocks in its inner loop: Q, dO, L and D are read there at row offsets bh·Nq·d (and masked by Nq), so a known
# multiple of 16 in Nq lets every load of the loop assume aligned rows; Nk is read once, for K_j and V_j. The build
# is therefore chosen by the length of the launch's inner loop: Nq for the dK/dV kernel, Nk for the forward (which
# walks the keys; its table has no entry yet). "div16" is the rule before check97 (both lengths), with which k2div16 to
# check99 were predicted; it and today's differ at check97's one shape of all those drawn.
KERNEL2_DIV16_CTAS_PER_SM = {"fwd": {}, "dkdv_atomic": {(32, 64, 64, 4, 3): 3}}
# Before check77 the two builds were told apart by other rules, each fitting the launches measured then
# (KERNEL2_BUILDS = "causal, even", with which every prediction up to check77 was written): a causal call's count
# first (KERNEL2_CAUSAL_CTAS_PER_SM: check65's causal d = 32 dK/dV at 158 registers, where check52's 196 were put down
# to a change of its row mask), then that of lengths that fill every tile (KERNEL2_EVEN_CTAS_PER_SM: check69's
# non-causal ones at 159). check77's causal call at N = 78841 took 180 registers and 2 CTAs; a multiple of 16 accounts
# for all 35 launches at d = 32 then, check52's too, and for k2div16's eight since. Each of those tables was empty
# before the run that measured it.
KERNEL2_BUILDS = "div16 loop"
KERNEL2_BUILDS_BEFORE_CHECK97 = "div16"
KERNEL2_BUILDS_BEFORE_CHECK77 = "causal, even"
KERNEL2_CAUSAL_CTAS_PER_SM = {"fwd": {}, "dkdv_atomic": {(32, 64, 64, 4, 3): 3}}
KERNEL2_CAUSAL_BEFORE_CHECK65 = {"fwd": {}, "dkdv_atomic": {}}
KERNEL2_EVEN_CTAS_PER_SM = {"fwd": {}, "dkdv_atomic": {(32, 64, 64, 4, 3): 3}}
KERNEL2_EVEN_BEFORE_CHECK69 = {"fwd": {}, "dkdv_atomic": {}}
# Before check52 the counts were by head dim, measured at d = 64 and 128 only and the next larger's elsewhere: d = 32's
# forward took 2 CTAs an SM where 3 run, and its dK/dV 1 where 2 run; d = 80 and 96's non-causal forward 1 where 2
# run, d = 160's 1 where 2 run (figures/gpu/NOTES-l2.md, "Twenty-fifth round"). Kept for the predictions written with
# them (the tests put it back to check those).
KERNEL2_CTAS_BEFORE_CHECK52 = {"fwd": {64: 2, 128: 1}, "dkdv_atomic": {64: 1, 128: 1}}
# FlashAttention-2's tiles (BLOCK_M, BLOCK_N) by the head dim it rounds d up to, as its launch templates choose
# them on an H100 or H200 (FlashAttention-2's run_mha_fwd_hdim* and run_mha_bwd_hdim*, in PyTorch's copy under
# aten/src/ATen/native/transformers/cuda/flash_attn: the branches for a GPU that is not sm8x and has 227 KB of
# shared memory a block; at d = 256 the forward takes 64 x 64 so that two CTAs fit an SM). Nsight Compute's grid
# sizes agree at d = 64, 96, 128 and 256 (figures/gpu/h100-l2-grid.json, h100-l2-check5.json). Until the check5
# measurement the table held d = 64 and 128 only, and d = 256 took d = 128's tiles: five of its pre-registered
# predictions missed (figures/gpu/NOTES-l2.md, "Tenth round").
# The PyTorch that ran every measurement (2.11) builds FlashAttention-2 for head dims 32, 64, 96, 128, 192 and 256
# only: check52 found d = 160 running the d = 192 kernels (Nsight's kernel names: Flash_fwd_kernel_traits<192, 128, 64,
# 8>, Flash_bwd_kernel_traits<192, 64, 64, 8>), and d = 80 the d = 96 ones. So a head dim takes the next larger of
# these; d = 224 takes d = 256's by the same rule (check54 measured it). Until check52 the table also held
# FlashAttention-2's own d = 160 and 224 tiles (FA2_TILES_BEFORE_CHECK52), which this build does not run.
FA2_TILES = {"fwd": {32: (128, 128), 64: (128, 128), 96: (128, 64), 128: (128, 64), 192: (128, 64), 256: (64, 64)},
             "bwd": {32: (128, 128), 64: (128, 128), 96: (64, 128), 128: (64, 128), 192: (64, 64), 256: (64, 64)}}
FA2_TILES_BEFORE_CHECK52 = {"fwd": {**FA2_TILES["fwd"], 160: (128, 32), 224: (128, 64)},
                            "bwd": {**FA2_TILES["bwd"], 160: (64, 64), 224: (64, 64)}}
# CTAs per SM: Nsight's occupancy limits at every head dim above (d = 32 and 192 first measured by check52). The d = 192
# forward runs eight warps of 228-236 registers a thread, which fill an SM's 64 K registers once: one CTA an SM, where
# the other forwards (four warps) run two. Until check52 the forward's was 2 at every head dim (FA2_CTAS_BEFORE_CHECK52)
FA2_CTAS_PER_SM = {"fwd": {32: 2, 64: 2, 96: 2, 128: 2, 192: 1, 256: 2},
                   "bwd": {32: 1, 64: 1, 96: 1, 128: 1, 192: 1, 256: 1}}
FA2_CTAS_BEFORE_CHECK52 = {"fwd": {d: 2 for d in FA2_TILES_BEFORE_CHECK52["fwd"]},
                           "bwd": {d: 1 for d in FA2_TILES_BEFORE_CHECK52["bwd"]}}


# The head dims of FlashAttention-2's kernels that carry the two rules measured on its d = 64 kernel: its forward's
# heads that roll in (``heads_roll_in``) and its backward's passes that come apart (``comes_apart``). FlashAttention-2
# builds one kernel per head dim of its table (``_key``); its d = 32 kernel runs the d = 64 kernel's 128 x 128
# tiles, and until knee32 the rules followed the tiles (FA2_D64_RULES_BEFORE_KNEE32). knee32 measured the d = 32 kernel
# across its knee (figures/gpu/NOTES-l2.md, "Thirty-sixth round"): its backward past the knee within 18% of the lockstep
# passes, where the rule had it 3.6x and 27.8x over, and its forward 4-19 points closer to what it reads without its
# heads rolling in. Those rules stand for a timing of the d = 64 kernel (d = 48 runs it too), not for its tiles.
FA2_D64_RULES = (64,)
FA2_D64_RULES_BEFORE_KNEE32 = (32, 64)


def _launch(Tr, causal):
    """The row block each program runs, in launch order: causal, the longest rows first (i = Tr - 1 - pid)."""
    return list(range(Tr - 1, -1, -1)) if causal else list(range(Tr))


def _key(table, d):
    """The head dim of ``table`` (a kernel's, keyed by head dim) whose build runs head dim ``d``: the smallest at least
    d, else the largest."""
    return min((k for k in table if k >= d), default=max(table))


def fa2_kernel_d(d: int) -> int:
    """The head dim of the FlashAttention-2 kernel that PyTorch's build runs head dim ``d`` on (FA2_TILES: d = 160 on
    the d = 192 kernel, its last columns masked)."""
    return _key(FA2_TILES["fwd"], d)


def _pick(table, d):
    return table[_key(table, d)]


def _share(N, B):
    """The last of N's blocks of B rows as a share of a full block (ragged when B does not divide N)."""
    return (N - (_cdiv(N, B) - 1) * B) / B


def _ragged(k: ScanKernel, N_scan, B_scan, N_own, B_own) -> ScanKernel:
    """``k`` with its last scanned tile (N_scan rows in blocks of B_scan) and its CTAs' last own tile ragged."""
    k.last_scan, k.last_cta = _share(N_scan, B_scan), _share(N_own, B_own)
    return k


def _kernel2_ctas(kind, d, tiles, causal=False, lengths=None):
    """Kernel 2's CTAs per SM for a ``kind`` launch ("fwd", "dkdv_atomic") at head dim ``d`` with ``tiles`` for a call
    of ``lengths`` (Nq, Nk): the measured count of its key in KERNEL2_CTAS_PER_SM, but where the build for those
    lengths holds another (KERNEL2_DIV16_CTAS_PER_SM, where the launch's inner loop runs over a multiple of 16: Nq for
    the dK/dV kernel, Nk for the forward; with KERNEL2_BUILDS as before check97, both lengths; as before check77, the
    causal and even tables); a key not measured takes the count of the same tiles at the nearest
    padded head dim. KERNEL2_CTAS_PER_SM set to the table before check52 (keyed by head dim) gives that rule back."""
    from .gpu.config import pad_dim

    table = KERNEL2_CTAS_PER_SM[kind]
    if all(isinstance(key, int) for key in table):  # the rule before check52: by head dim
        return _pick(table, d)
    D, shape = pad_dim(d), (tiles.block_m, tiles.block_n, tiles.warps, tiles.stages)
    # the tables of the builds this call's lengths (and, before check77, its causal flag) select, in the order read
    if KERNEL2_BUILDS == "div16 loop":  # the inner loop's length: the dK/dV kernel walks the queries, the forward keys
        loop = None if lengths is None else lengths[0] if kind == "dkdv_atomic" else lengths[1]
        builds = [KERNEL2_DIV16_CTAS_PER_SM] if loop is not None and loop % 16 == 0 else []
    elif KERNEL2_BUILDS == "div16":  # before check97: both lengths
        builds = [KERNEL2_DIV16_CTAS_PER_SM] if lengths is not None and all(n % 16 == 0 for n in lengths) else []
    else:  # before check77: a causal call's build, then that of lengths that fill every tile (the kernels' EVEN)
        even = lengths is not None and lengths[0] % tiles.block_m == 0 and lengths[1] % tiles.block_n == 0
        builds = [t for t, use in ((KERNEL2_CAUSAL_CTAS_PER_SM, causal), (KERNEL2_EVEN_CTAS_PER_SM, even)) if use]
    for build in builds:
        if (D, *shape) in build[kind]:
            return build[kind][(D, *shape)]
    if (D, *shape) in table:
        return table[(D, *shape)]
    same = [key for key in table if key[1:] == shape]
    if not same:  # a configuration no table entry shares (a non-default Config): the nearest head dim's count
        return table[min(table, key=lambda key: abs(key[0] - D))]
    return table[min(same, key=lambda key: abs(key[0] - D))]


def _kernel2(d, causal):
    """Kernel 2's default configuration on a GPU (pure Python: no Triton needed)."""
    from .gpu.config import Config
    return Config().resolve(d, bool(causal), False, interpret=False)


def flashref_fwd(BH, Nq, Nk, d, causal=False, e=2, sms=SMS, blocks=None, heads_first=None):
    BH, Nq, Nk, d, causal, e, sms = _shape(BH, Nq, Nk, d, causal, e, sms)
    cfg = _kernel2(d, causal)
    BM, BN = _blocks(blocks) or (cfg.fwd.block_m, cfg.fwd.block_n)
    Tr, Tc = _cdiv(Nq, BM), _cdiv(Nk, BN)
    hf = cfg.heads_first if heads_first is None else heads_first
    launch = _launch(Tr, causal)
    return _ragged(ScanKernel("flashref fwd", BH, Tc, 2 * BN * d * e, 0, BM * d * e, BM * d * e + 4 * BM,
                              sms * _kernel2_ctas("fwd", d, cfg.fwd, causal, (Nq, Nk)),
                              _row_ranges(Tr, Tc, BM, BN, causal, Nk),
                              launch, heads_first=hf, sms=sms), Nk, BN, Nq, BM)


def flashref_dkdv(BH, Nq, Nk, d, causal=False, e=2, sms=SMS, blocks=None, stagger=True):
    BH, Nq, Nk, d, causal, e, sms = _shape(BH, Nq, Nk, d, causal, e, sms)
    cfg = _kernel2(d, causal)
    BM, BN = _blocks(blocks) or (cfg.dkdv.block_m, cfg.dkdv.block_n)
    Tr, Tc = _cdiv(Nq, BM), _cdiv(Nk, BN)
    k = ScanKernel("flashref dK/dV (atomic dQ)", BH, Tr, 2 * BM * d * e + 8 * BM, 4 * BM * d, 2 * BN * d * e,
                   2 * BN * d * e, sms * _kernel2_ctas("dkdv_atomic", d, cfg.dkdv, causal, (Nq, Nk)),
                   _col_ranges(Tc, Tr, BM, BN, causal, Nq), list(range(Tc)),
                   stagger=(BN // BM if BN >= BM else 1) if (stagger and not causal) else 0, sms=sms)
    return _ragged(k, Nq, BM, Nk, BN)


def fa2_fwd(BH, Nq, Nk, d, causal=False, e=2, sms=SMS):
    """FlashAttention-2's forward (``flash_fwd_kernel``): grid (Tr, B, H), two CTAs an SM, each walking its key
    blocks from the last to the first. Past the knee the two CTAs of an SM drift apart; measured, those of the
    d = 64 kernel (128 x 128 tiles) are half a scan apart from the second wave on, and those of the others (128 x 64
    at d = 96 and 128, 64 x 64 at d = 256) get there over the kernel's first waves (``drift_ramp``; why is open:
    figures/gpu/NOTES-l2.md, "Nineteenth round"). The d = 64 kernel's heads after the first read their K and V more
    in their first pass than the lockstep pass says (``heads_roll_in``; "Twenty-first round"; not the d = 32 kernel's,
    which shares its tiles: FA2_D64_RULES)."""
    BH, Nq, Nk, d, causal, e, sms = _shape(BH, Nq, Nk, d, causal, e, sms)
    BM, BN = _pick(FA2_TILES["fwd"], d)
    Tr, Tc = _cdiv(Nq, BM), _cdiv(Nk, BN)
    k = ScanKernel("FA2 flash_fwd_kernel", BH, Tc, 2 * BN * d * e, 0, BM * d * e, BM * d * e + 4 * BM,
                   sms * _pick(FA2_CTAS_PER_SM["fwd"], d), _row_ranges(Tr, Tc, BM, BN, causal, Nk), list(range(Tr)),
                   descending=True, sms=sms, drift_ramp=(BM, BN) != FA2_TILES["fwd"][64],
                   heads_roll_in=fa2_kernel_d(d) in FA2_D64_RULES)
    return _ragged(k, Nk, BN, Nq, BM)


def fa2_num_splits(BH, Nq, Nk, d, sms=SMS):
    """How many key splits FlashAttention-2's forward runs (1: its ordinary kernel), as PyTorch's vendored
    ``flash_api.cpp`` decides without dropout (``set_params_splitkv``, ``num_splits_heuristic``): when the grid of
    64-row query blocks fills less than 0.8 of twice the SMs (two 128-thread CTAs an SM), the keys are cut into
    splits of ``block_n``-key tiles (256 at d <= 64, 128 at d <= 128, 64 above), the fewest whose waves are at
    least 85% as full as the best count's; a count that gives the same tiles per split as one fewer is skipped."""
    BH, Nq, Nk, d, sms = (positive_int(v, n) for v, n in ((BH, "BH"), (Nq, "Nq"), (Nk, "Nk"), (d, "d"), (sms, "sms")))
    block_n = 256 if d <= 64 else 128 if d <= 128 else 64
    n_blocks, work, slots = _cdiv(Nk, block_n), BH * _cdiv(Nq, 64), 2 * sms
    if work >= 0.8 * slots:  # enough query blocks to nearly fill the GPU: no split
        return 1
    max_splits = min(128, slots, n_blocks)

    def eligible(s):
        return s == 1 or _cdiv(n_blocks, s) != _cdiv(n_blocks, s - 1)

    # how full the waves are: parallelism.efficiency, FlashAttention-2's n_waves / ceil(n_waves)
    eff = {s: efficiency(work * s, slots) for s in range(1, max_splits + 1) if eligible(s)}
    best = max(eff.values())
    return next(s for s in sorted(eff) if eff[s] >= 0.85 * best)


def fa2_bwd(BH, Nq, Nk, d, causal=False, e=2, sms=SMS):
    """FlashAttention-2's backward (``flash_bwd_dq_dk_dv_loop_seqk_parallel``): grid (Tc, B, H), one CTA an SM, each
    column block of keys walking the query blocks from the last down, adding its part of dQ to an fp32 buffer with
    atomics. Past the knee the passes of its d = 64 kernel (128 x 128 tiles) come apart more the longer the kernel
    has run (``comes_apart``) where its CTAs scan the same query tiles (non-causal: ``ScanKernel.same_scans``);
    measured, the d = 128 kernel's do not, nor the causal d = 64 kernel's, whose columns end at their diagonals
    (figures/gpu/NOTES-l2.md, "Twenty-first round"), nor the d = 32 kernel's on the same tiles ("Thirty-sixth
    round": FA2_D64_RULES)."""
    BH, Nq, Nk, d, causal, e, sms = _shape(BH, Nq, Nk, d, causal, e, sms)
    BM, BN = _pick(FA2_TILES["bwd"], d)
    Tr, Tc = _cdiv(Nq, BM), _cdiv(Nk, BN)
    k = ScanKernel("FA2 flash_bwd_dq_dk_dv_loop_seqk_parallel", BH, Tr, 2 * BM * d * e + 8 * BM, 4 * BM * d,
                   2 * BN * d * e, 2 * BN * d * e, sms * _pick(FA2_CTAS_PER_SM["bwd"], d),
                   _col_ranges(Tc, Tr, BM, BN, causal, Nq), list(range(Tc)), descending=True, sms=sms,
                   comes_apart=_key(FA2_TILES["bwd"], d) in FA2_D64_RULES)
    return _ragged(k, Nq, BM, Nk, BN)


# Kernel 3 (flashref/gpu/kernel3.py and kernel3_bwd.py, Gluon, Hopper): its tiles are read from the kernel's
# own tables (kernel3.TILES, kernel3_bwd.BWD_TILES) when a builder runs, so the model follows the kernel.
K3_SMEM_PER_SM = 228 * 1024  # an sm_90 SM's shared memory
K3_SMEM_RESERVED = 1024  # per resident CTA, kept by the driver
K3_REGS_PER_SM = 65536
# A kernel 3 build uses at most 168 registers a thread (cuobjdump --dump-resource-usage of the Triton 3.6.0 sm_90
# cubins, compiled on a CPU; figures/gpu/NOTES-l2.md; the 192-row forward launches at 128 and moves them with
# setmaxnreg). A warp-specialized launch (the pingpong forward, the dK/dV and dQ kernels) declares 9 warps (the
# default partition, consumer warpgroup 0, and the workers, consumer warpgroup 1 and a 1-warp producer), and its
# build runs 12 (the count the occupancy tool reads); the 192-row forward (three consumers) 16. Either way one
# CTA an SM: 9 x 32 x 168 = 48384 registers already leave too few for a second.
K3_REGS_PER_THREAD = 168
K3_WS_WARPS = 12


def _k3_launch_warps(t) -> int:
    """Warps a kernel 3 forward build runs: pingpong, a warpgroup per consumer and one for the producer warp
    (padded); else the tiles' warps."""
    return 4 * (t.consumers + 1) if t.pingpong else t.warps


def _k3_ctas_per_sm(smem_bytes: int, warps: int, regs: int = K3_REGS_PER_THREAD) -> int:
    """CTAs of a kernel 3 launch resident on one SM: as many as both its registers and its shared memory allow.
    A thread launches with ``regs`` registers, or fewer where a CTA of ``warps`` warps would not fit an SM at that
    count: the 192-row forward's 16 warps launch at 65536 / (16 x 32) = 128 and move them between partitions with
    setmaxnreg (Triton 3.6.0's build says 128). A 12-warp warp-specialized kernel takes 12 x 32 x 168 = 64512 of
    the 65536 registers: one CTA. The causal d = 64 forward (one warpgroup, 4 warps: 21504 registers, 73.8 KB of
    shared memory) fits three."""
    at_launch = min(regs, K3_REGS_PER_SM // (warps * 32) // 8 * 8)  # registers are allocated 8 a thread at a time
    by_regs = K3_REGS_PER_SM // (warps * 32 * at_launch)
    by_smem = K3_SMEM_PER_SM // (smem_bytes + K3_SMEM_RESERVED)
    if by_smem == 0:  # kernel3.plan refuses such tiles; a schedule built from them directly must not divide by 0
        raise ValueError(f"kernel 3 tiles needing {smem_bytes} bytes of shared memory do not fit an SM's "
                         f"{K3_SMEM_PER_SM - K3_SMEM_RESERVED}")
    return min(by_regs, by_smem)


@functools.cache  # the scorecard reads each run's few reprs again for every row it predicts
def recorded_tiles3(text: str):
    """The ``kernel3.Tiles3`` a recorded repr names (``"Tiles3(block_m=128, ..., persistent=True)"``), read field
    by field as literals (no eval); a field the repr lacks keeps its default, but for ``round_sync``: a repr
    without it was recorded before the round barrier existed, so its launch ran none (False)."""
    from .gpu.kernel3 import Tiles3
    fields = {k: ast.literal_eval(v) for k, v in re.findall(r"(\w+)=([^,()]+)", text)}
    fields.setdefault("round_sync", False)
    return Tiles3(**fields)


def kernel3_info(run: dict) -> dict | None:
    """What a recorded ``profile-l2`` run says of kernel 3's tiles (``info["flashref"]["kernel3"]``: ``{"d64":
    {"fwd": "Tiles3(block_m=128, ...)", "bwd": ...}, "d128_causal": ...}``), or None where it ran no kernel 3."""
    return run.get("info", {}).get("flashref", {}).get("kernel3")


def recorded_kernel3_tiles(recorded: dict | None) -> dict:
    """``{(d, causal): Tiles3}``: the forward tiles of a run's :func:`kernel3_info` (``{}`` for None)."""
    return {(int(key[1:].removesuffix("_causal")), key.endswith("_causal")): recorded_tiles3(tiles["fwd"])
            for key, tiles in (recorded or {}).items()}


@contextlib.contextmanager
def kernel3_as_recorded(recorded: dict | None):
    """Within the block, the model runs kernel 3's forward with the tiles a recorded L2 measurement ran:
    ``recorded`` is its :func:`kernel3_info` (None: a run without kernel 3, nothing put back). The schedules read
    ``kernel3.TILES``, which move on as the kernel is tuned (the twelfth session's 192-row d = 64 tile); a
    prediction made for an older default is re-derived only with the tiles of its day. Fields a recorded repr
    lacks (added since) keep their defaults, which are off."""
    from .gpu.kernel3 import TILES
    from .gpu.kernel3_bwd import BWD_TILES
    saved, saved_bwd = dict(TILES), dict(BWD_TILES)
    try:
        TILES.update(recorded_kernel3_tiles(recorded))
        # a run recorded before the dQ kernel's barrier (its TilesQ repr without round_sync) ran none
        for key in _before_dq_barrier(recorded):
            if key in BWD_TILES:
                t = BWD_TILES[key]
                BWD_TILES[key] = dataclasses.replace(t, dq_tiles=dataclasses.replace(t.dq_tiles, round_sync=False))
        yield
    finally:
        TILES.clear()
        TILES.update(saved)
        BWD_TILES.clear()
        BWD_TILES.update(saved_bwd)


def _before_dq_barrier(recorded: dict | None) -> list:
    """The (d, causal) keys of a run's :func:`kernel3_info` whose backward repr names a dQ kernel (``TilesQ(...)``)
    without ``round_sync``: recorded before the dQ kernel's barrier existed."""
    return [(int(key[1:].removesuffix("_causal")), key.endswith("_causal"))
            for key, tiles in (recorded or {}).items()
            if "TilesQ(" in tiles.get("bwd", "") and "round_sync" not in tiles["bwd"].split("TilesQ(")[1].split(")")[0]]


def flashref3_fwd(BH, Nq, Nk, d, causal=False, e=2, sms=SMS, tiles=None):
    """Kernel 3's forward: grid (Tr, B·H), row block fastest (kernel3._k3ws_tile); causal, the longest rows
    first; each program scans its K/V blocks from 0 up. The persistent version (one program per SM striding
    over the tiles in grid order) runs the same waves: program p's t-th tile is tile p + t·SMs, where every tile
    is as long (non-causal, as the default persistent launch is). The dynamic version (Tiles3.dynamic: each
    program claims its next tile from a counter) takes the tiles in grid order as they free up, as the GPU
    hands out a one-tile-a-program grid, so it runs the same waves causal too. Measured, that holds below the
    knee. Past it, a wave without a barrier comes apart along the scan, persistent or not, by amounts that move
    from run to run: at two heads of N = 262144 the persistent d = 128 forward read 74-106 GB in five H100 rounds
    where these waves read 4.6 (figures/gpu/NOTES-l2.md, "Thirteenth round"). So the static persistent launch
    takes a barrier between its rounds there (``kernel3.round_sync``): each round of tiles starts together, and
    the same shapes read 4.71 GB, the same in every round ("Fifteenth round"). The schedule is that lockstep one,
    ``synced``."""
    from .gpu.kernel3 import HEADS_FIRST_CAUSAL, TILES, Tiles3, round_sync
    BH, Nq, Nk, d, causal, e, sms = _shape(BH, Nq, Nk, d, causal, e, sms)
    t = _tiles_arg(tiles, Tiles3) or _tiles3(TILES, d, causal, "forward")
    if t.persistent and causal and not t.dynamic:  # a static stride over tiles of unequal length
        raise NotImplementedError("the L2 model has no schedule for kernel 3's static persistent causal forward")
    BM, BN = t.block_m, t.block_n
    Tr, Tc = _cdiv(Nq, BM), _cdiv(Nk, BN)
    launch = _launch(Tr, causal)
    heads_first = bool(causal) and (t.heads_first if t.heads_first is not None else d in HEADS_FIRST_CAUSAL)
    k = ScanKernel("flashref kernel 3 fwd", BH, Tc, 2 * BN * d * e, 0, BM * d * e, BM * d * e + 4 * BM,
                   sms * _k3_ctas_per_sm(t.smem_bytes(d, e), _k3_launch_warps(t)),
                   _row_ranges(Tr, Tc, BM, BN, causal, Nk), launch, heads_first=heads_first, sms=sms,
                   synced=bool(t.persistent and not causal and round_sync(t, Nk, d, e)),
                   rounds_together=_k3_rounds_together(Nk, d, causal, e))
    return _ragged(k, Nk, BN, Nq, BM)


def _k3_rounds_together(Nk, d, causal, e) -> bool:
    """Kernel 3's non-causal forward and dQ kernel short of the barrier's threshold (one head's K and V, 2·Nk·d·e
    bytes, below ``kernel3.ROUND_SYNC_KV_BYTES``): every tile is as long, so each round of CTAs starts its scan
    together, barrier or not (``ScanKernel.rounds_together``). Past it, rounds without a barrier came apart."""
    from .gpu.kernel3 import kv_past_round_sync
    return not causal and not kv_past_round_sync(Nk, d, e)


def flashref3_dkdv(BH, Nq, Nk, d, causal=False, e=2, sms=SMS, tiles=None):
    """Kernel 3's dK/dV kernel without dQ (kernel3_bwd._k3b_tile): grid (Tc, B·H); column block j scans its
    row blocks (Q_i, dO_i, L_i, D_i) from its diagonal down (causal) or from row block j·BN/BM with wrap-around
    (not causal). No fp32 dQ: the dQ kernel computes it."""
    from .gpu.kernel3_bwd import BWD_TILES, TilesB
    BH, Nq, Nk, d, causal, e, sms = _shape(BH, Nq, Nk, d, causal, e, sms)
    t = _tiles_arg(tiles, TilesB) or _tiles3(BWD_TILES, d, causal, "backward")
    if t.dq or t.persistent:  # so that retuning BWD_TILES to either cannot leave the model silently wrong
        raise NotImplementedError("the L2 model has kernel 3's atomic-free, non-persistent backward only (dq = 0: "
                                  "the dK/dV kernel, then the dQ kernel); an atomic dQ adds an fp32 dQ read and "
                                  "written in L2 and no dQ kernel")
    BM, BN = t.block_m, t.block_n
    Tr, Tc = _cdiv(Nq, BM), _cdiv(Nk, BN)
    k = ScanKernel("flashref kernel 3 dK/dV", BH, Tr, 2 * BM * d * e + 8 * BM, 0, 2 * BN * d * e,
                   2 * BN * d * e, sms * _k3_ctas_per_sm(t.smem_bytes(d, e), K3_WS_WARPS),
                   _col_ranges(Tc, Tr, BM, BN, causal, Nq), list(range(Tc)),
                   stagger=0 if causal else BN // BM, sms=sms)
    return _ragged(k, Nq, BM, Nk, BN)


def flashref3_dq(BH, Nq, Nk, d, causal=False, e=2, sms=SMS, tiles=None):
    """Kernel 3's dQ kernel (kernel3_bwd._k3q_kernel): grid (N/128, B·H); row block i (128 rows: Q_i, dO_i,
    L_i, D_i read once, dQ_i written once) scans K_j, V_j from 0 up; causal, the longest rows first. Past the knee
    (``kernel3_bwd.dq_round_sync``, not causal) one program per SM takes the grid's tiles in rounds with a barrier
    between them: the same waves, which the one-tile-a-program launch kept below the knee only (``synced``)."""
    from .gpu.kernel3_bwd import BWD_TILES, TilesB, dq_round_sync
    BH, Nq, Nk, d, causal, e, sms = _shape(BH, Nq, Nk, d, causal, e, sms)
    tq = (_tiles_arg(tiles, TilesB) or _tiles3(BWD_TILES, d, causal, "backward")).dq_tiles
    BM, BN = 128, tq.block_n
    Tr, Tc = _cdiv(Nq, BM), _cdiv(Nk, BN)
    launch = _launch(Tr, causal)
    k = ScanKernel("flashref kernel 3 dQ", BH, Tc, 2 * BN * d * e, 0, 2 * BM * d * e + 8 * BM, BM * d * e,
                   sms * _k3_ctas_per_sm(tq.smem_bytes(d, e), K3_WS_WARPS), _row_ranges(Tr, Tc, BM, BN, causal, Nk),
                   launch, sms=sms, synced=dq_round_sync(tq, Nk, d, causal, e),
                   rounds_together=_k3_rounds_together(Nk, d, causal, e))
    return _ragged(k, Nk, BN, Nq, BM)


def launch_times(k: ScanKernel):
    """When each CTA runs, on :func:`simulate`'s one-speed machine: ``(heads, blocks, start, end)`` in grid order,
    times in steps (one scanned tile per CTA per step). The first ``k.resident`` CTAs start at 0; every later one
    takes the slot that frees first (a list schedule), so ``start`` never decreases along the grid."""
    import heapq

    heads, blocks = _checked(k).grid_arrays()
    steps = np.array([hi - lo for lo, hi in k.ranges], dtype=float)[blocks]
    free = [0.0] * min(k.resident, len(blocks))  # when each slot frees (a heap: the earliest first)
    # the slot that frees first takes the next CTA, and frees again when that CTA has scanned its tiles (a list
    # comprehension over plain floats: a grid of 512 heads at N = 131072 is half a million CTAs)
    replace = heapq.heapreplace
    start = np.array([replace(free, free[0] + s) for s in steps.tolist()], dtype=float)
    return heads, blocks, start, start + steps


def waves(k: ScanKernel) -> float:
    """CTAs of the grid over resident slots."""
    _checked(k)
    return k.heads * k.ctas_per_head / k.resident


def describe(k: ScanKernel) -> str:
    per, unit = k.ctas_per_head, k.tile_bytes + k.rmw_bytes
    per_head = math.ceil(per / k.resident) if per > k.resident else 1
    return (f"{k.name}: {k.heads} heads x {per} CTAs, {k.resident} resident ({waves(k):.2f} waves), scans "
            f"{k.n_tiles} tiles of {unit} B per head ({k.n_tiles * unit / 2**20:.1f} MiB), "
            f"{'heads first' if k.heads_first else 'head by head'}, {'descending' if k.descending else 'ascending'}"
            f"{', staggered' if k.stagger else ''}; {per_head} waves per head")
