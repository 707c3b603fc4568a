"""Kernel 3: the forward in Gluon, with FlashAttention-3's intra-warpgroup overlap and pingpong (Hopper only).

Kernels 1 and 2 are Triton: the compiler decides when a tensor-core op is waited for, and on Hopper
Triton 3.6 waits for every ``wgmma`` at once (``wgmma.wait_group 0`` after each, figures/gpu/NOTES.md), so
the softmax of a tile never runs while the tensor cores work. Gluon (``triton.experimental.gluon``) is
Triton's lower-level dialect: the program names its layouts, shared-memory buffers, TMA copies,
mbarriers and the asynchronous ``warpgroup_mma`` and its ``warpgroup_mma_wait`` itself. Kernel 3 uses
that to write FlashAttention-3's Algorithm 2 (Shah et al. 2024, "intra-warpgroup overlapping"):

* S_next = Q_i K_jᵀ is issued *asynchronously*; O_i += P̃_cur V_{j−1} is issued behind it; the
  program waits only for the first (``warpgroup_mma_wait(1)``: one group may stay in flight), runs the
  softmax of S_next (exp2 on the multi-function unit) while the tensor cores still compute P̃ V, and
  waits for that one only before rescaling O_i;
* K_j and V_j arrive by TMA into ``STAGES`` shared-memory slots each, every slot with its own mbarrier
  (K and V separately: S can start as soon as K_j has landed); the next loads are issued as soon as the
  wgmma that read a slot is known to be done.

Two versions, both with every step tagged by the line it implements: ``FA3 Alg.2 l.N`` (the consumer
warpgroup of FA3's Algorithm 2) and the FlashAttention-2 line (``FA2 Alg.1 l.N``, as in kernels.py) the
arithmetic is:

* ``_k3_fwd_kernel`` (``Tiles3(pingpong=False)``): Algorithm 2 alone. The program's two warpgroups (8 warps,
  128 rows, 64 each) both run it, and the same warps issue the TMA copies. Gluon puts a CTA-wide barrier
  before each copy, which keeps the warpgroups in step. Measured 0.88-0.94x kernel 2 on an H100.
* ``_k3ws_fwd_kernel`` (``pingpong=True``, the default but for causal d = 64): FA3's Algorithm 1 around it
  (``gl.warp_specialize``). One producer warp issues every TMA load into STAGES slots and waits on "slot
  empty" mbarriers. Each of two consumer warpgroups owns 64 rows and runs Algorithm 2, and the two take
  turns at the tensor cores (FA3 §3.1, "pingpong"): one warpgroup's softmax runs under the other's GEMMs.
  At d = 64 without a mask the tile has 192 rows and three consumer warpgroups, taking turns in a ring.
  With ``persistent=True`` (the default at d = 128, and at d = 64 without a mask) one program per SM loops over
  the tiles; with ``q_prefetch`` (d = 128) it loads its next tile's Q_i while this tile's last step runs, and with
  ``dynamic`` (d = 128 causal) it claims each next tile from an atomic counter (FA3's dynamic scheduler). Past
  the L2 knee the static persistent launch puts a barrier between its rounds of tiles (``round_sync``), which
  keeps its waves reading K and V together (figures/gpu/NOTES-l2.md, "Fifteenth round").
  Measured 0.99-1.11x cuDNN at d = 128 (figures/gpu/NOTES.md, "Issue 14, third session" and "Kernel 3,
  fourth session").

What it computes is kernel 2's forward: O and the base-2 log-sum-exp ``L2 = m + log2(ℓ)`` (B, H, N) fp32,
so kernel 2's backward consumes them (:func:`attention` pairs the two). What it takes is narrower, and
:func:`plan` decides, per call, whether kernel 3 runs or kernel 2 does (and says why):

* a Hopper GPU (sm_90: ``wgmma`` exists there only) and Triton 3.6.0 exactly (Gluon's API changes between
  releases; another version, or no Gluon at all, as under CI's interpreter, reports kernel 3 unavailable);
* fp16 or bf16; d in {64, 128, 256} (a power of two: Gluon's shapes are, and the tiles were sized for these;
  at d = 256 the backward is kernel 2's, see :mod:`kernel3_bwd`);
* Nq = Nk, a multiple of both blocks (no ragged tile, so no row mask; the 192-row tile needs only a multiple of
  64 rows: its last tile runs past N by whole warpgroups, which store nothing);
* none of kernel 2's options: dropout, GQA, window, ALiBi, softcap.

This module imports without Gluon (CI's Triton 3.9 runs the interpreter, where Gluon does not run):
the kernels are then left undefined, and :func:`unavailable` says why they cannot run.
"""

from __future__ import annotations

import functools
import numbers
from dataclasses import dataclass

import numpy as np

from .._numbers import positive_int
from . import exp2 as _exp2

LOG2E = 1.4426950408889634
TRITON_VERSION = "3.6.0"  # the Gluon API this file is written against
HEAD_DIMS = (64, 128, 256)
DTYPES = ("float16", "bfloat16")


def positive_fields(tiles, names) -> None:
    """Refuse a launch shape whose ``names`` (block sizes, warps, stages) are not positive integers (the entry
    points' rule, positive_int): the planners divide by them and size buffers with them, so a zero or a float is a
    clear error here, not one deep inside."""
    for name in names:
        positive_int(getattr(tiles, name), f"{type(tiles).__name__}.{name}")


@dataclass(frozen=True)
class Tiles3:
    """Kernel 3's launch shape: BLOCK_M query rows (16 per warp: 8 warps = two warpgroups of 64 rows; pingpong
    also 12 warps = three, FA3's d = 64 tile of 192 rows), BLOCK_N key columns, STAGES shared-memory slots for
    each of K and V."""

    block_m: int = 128
    block_n: int = 128
    warps: int = 8
    stages: int = 2
    pingpong: bool = False  # FA3 Alg.1: a TMA producer warp and the two consumer warpgroups in ping-pong
    heads_first: bool | None = None  # causal grid order; None: HEADS_FIRST_CAUSAL decides
    # pingpong: every emu-th K/V step (2, 4 or 8) takes its exponentials on the FMA units (exp2.py); 0 (the default):
    # none. On an H100 every fraction was slower (0.82-0.99x; figures/gpu/NOTES.md)
    emu: int = 0
    persistent: bool = False  # pingpong: one program per SM looping over the tiles (FA3's static tile scheduler)
    q_regs: bool = False  # pingpong: Q_i (a warpgroup's 64 rows) as the S product's A operand in registers
    # persistent: O_i staged for its store in a buffer of its own, so Q_i's buffer is handed back after the tile's
    # last S product and the next tile's Q_i loads under this tile's last step and store (FA3 keeps smem_o apart)
    q_prefetch: bool = False
    # persistent: each program claims its next tile from an atomic counter (FA3's dynamic tile scheduler), so
    # causal tiles of unequal length balance over the programs as a one-tile-a-program launch's do
    dynamic: bool = False
    # persistent, static: a grid-wide barrier between rounds of tiles (round_sync below); None: where one head's K
    # and V outgrow ROUND_SYNC_KV_BYTES, as the launcher decides per call; True or False: always or never
    round_sync: bool | None = None

    def __post_init__(self):
        positive_fields(self, ("block_m", "block_n", "warps", "stages"))

    @property
    def consumers(self) -> int:
        """pingpong: the consumer warpgroups (64 rows each) that take turns at the tensor cores."""
        return self.block_m // 64

    @property
    def rows_multiple(self) -> int:
        """What N must be a multiple of: for the 192-row tile, a warpgroup's 64 rows (a tile may run past N, and
        a warpgroup whose rows all lie past it stores nothing: so it takes N = 4096); else BLOCK_M. (The kernel
        treats a two-consumer tile past N the same way, but only the 192-row tile's ragged tiles were tested on
        a GPU, so the others keep whole tiles.)"""
        return 64 if self.pingpong and self.consumers == 3 else self.block_m

    @property
    def box_rows(self) -> int:
        """Rows of Q_i's and O_i's TMA boxes: pingpong, a consumer warpgroup's 64 (each loads and stores its
        own); else BLOCK_M."""
        return 64 if self.pingpong else self.block_m

    def smem_bytes(self, d: int, elem: int = 2) -> int:
        """Shared memory the tiles take: Q_i (reused for O_i's store unless q_prefetch, which gives O_i its
        own buffer) and STAGES slots of K_j and V_j."""
        o_rows = self.block_m if self.q_prefetch else 0
        return elem * d * (self.block_m + o_rows + 2 * self.stages * self.block_n) + 8 * (1 + 2 * self.stages)


# The defaults by (head dimension, causal), from three interleaved sweeps on an H100 (figures/gpu/NOTES.md,
# "Issue 14, third session"): the pingpong version with 3 K/V stages, except causal d = 64, where three
# programs of one warpgroup (64 rows) per SM beat it; causal grids in plain longest-first order (heads first
# was 2-5% slower with pingpong at N = 4096). Non-causal d = 64 persistent (one program per SM looping over the
# tiles): +2-5% at N = 4096 and 8192, a tie at 16384, in the one sweep that measured it (NOTES.md, "persistent");
# causal d = 128 4-20% slower (a static order balances the causal tiles' lengths badly). Non-causal d = 128
# persistent with q_prefetch (the next tile's Q_i loaded under this tile's last step, so two K/V stages):
# +6.4%, +5.4%, +0.2% at N = 4096, 8192, 16384 over three stages one tile a program (NOTES.md, "Eleventh
# session"); at d = 64 the same change was a tie. Causal d = 128 the same with the dynamic scheduler (tiles
# claimed from a counter, head by head): +6.0%, +3.6%, +1.1% over three stages one tile a program; a static
# stride, even in a snake order, lost 23% at N = 16384 (NOTES.md, "Eleventh session"). Non-causal d = 64: FA3's
# 192-row tile, three consumer warpgroups, persistent with three stages: +10%, +16%, +18% at N = 4096, 8192, 16384
# over the two-consumer tile (NOTES.md, "Twelfth session"); causal it lost 1-10%, so causal d = 64 stays.
TILES = {(128, False): Tiles3(128, 128, 8, 2, pingpong=True, persistent=True, q_prefetch=True),
         (128, True): Tiles3(128, 128, 8, 2, pingpong=True, heads_first=False, persistent=True, q_prefetch=True,
                             dynamic=True),
         (64, False): Tiles3(192, 128, 12, 3, pingpong=True, persistent=True),
         (64, True): Tiles3(64, 128, 4, 2, heads_first=False),
         # d = 256 (ninth session, one sweep on an H100: figures/gpu/NOTES.md, "Ninth session"): 128 x 64 with
         # two stages, 1.07-1.08x cuDNN non-causal and 1.01-1.04x causal, against 0.77-0.84x for kernel 2; one
         # stage, or 32 keys a step, 0.65-0.86x; persistent a tie non-causal and 0.68-0.95x causal
         (256, False): Tiles3(128, 64, 8, 2, pingpong=True),
         (256, True): Tiles3(128, 64, 8, 2, pingpong=True, heads_first=False)}
HEADS_FIRST_CAUSAL = (128,)  # causal, where a Tiles3 leaves heads_first at None
# A persistent static launch (program p takes tiles p, p + step, ...) gives its programs no reason to stay together:
# each runs its own tiles back to back, and past the L2 knee, once the programs of a wave scan one head's K and V
# more than an L2 apart, every one of them reads K and V from DRAM. On an H100 the d = 128 forward read 74-274 GB
# where the wave's lockstep scan reads 4.6-9.2 (two and four heads of N = 262144, four of 196608;
# figures/gpu/NOTES-l2.md, "Thirteenth round" and "Fifteenth round"). With round_sync the producer warps meet at a
# barrier after each round of `step` tiles: no program starts round r + 1's loads before every program has issued
# round r's, so the programs start every round together and can drift apart within one tile's scan only. The
# barrier is taken where one head's K and V are at least this many bytes (a third of the H100's 50 MB L2): below
# it even a wave that has come apart finds its head's K and V in L2, and a barrier would cost time for nothing.
ROUND_SYNC_KV_BYTES = 16 * 2 ** 20


def kv_past_round_sync(N: int, d: int, elem: int = 2) -> bool:
    """Whether one head's K and V (2·N·d·elem bytes) reach ``ROUND_SYNC_KV_BYTES``: where the forward and the dQ
    kernel put their barrier between rounds (:func:`round_sync`, ``kernel3_bwd.dq_round_sync``), and short of which
    the L2 model has their rounds start together without one (``schedule._k3_rounds_together``)."""
    return 2 * N * d * elem >= ROUND_SYNC_KV_BYTES

SMEM_LIMIT = 227 * 1024  # an sm_90 thread block's shared memory
# registers a thread of a worker consumer warpgroup (setmaxnreg) by the number of consumers; the producer warp gets
# 24 and the default partition (consumer 0) the rest. Three consumers and the producer's (padded) warpgroup share
# the SM's 64K registers: 128 threads x (168 + 160 + 160 + 24) as compiled.
PINGPONG_REGS = {2: 240, 3: 160}


# --------------------------------------------------------------------------------------------
# whether kernel 3 can run here, and for which calls (pure Python: tested on CI)
# --------------------------------------------------------------------------------------------

def _gluon_import():
    """(modules, None) or (None, why not)."""
    try:
        import triton
    except ImportError as e:
        return None, f"triton is not installed ({e})"
    if triton.__version__ != TRITON_VERSION:
        return None, (f"kernel 3 is written against Gluon in Triton {TRITON_VERSION} (its API changes between "
                      f"releases); this is Triton {triton.__version__}")
    try:
        from triton.experimental import gluon
        from triton.experimental.gluon import language as gl
        from triton.experimental.gluon.language.nvidia import hopper
        from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
    except ImportError as e:
        return None, f"Triton {triton.__version__} has no usable Gluon here ({e})"
    return (gluon, gl, hopper, TensorDescriptor), None


_MODS, _WHY = _gluon_import()


def unavailable(device=None) -> str | None:
    """None when kernel 3 can run (on ``device``, if given), else the reason it cannot."""
    if _WHY:
        return _WHY
    import os
    if os.environ.get("TRITON_INTERPRET", "0") == "1":
        return "Gluon kernels do not run in Triton's interpreter (TRITON_INTERPRET=1)"
    import torch
    if not torch.cuda.is_available():
        return "no CUDA GPU"
    device = torch.device("cuda") if device is None else torch.device(device)
    return _capability_why(torch.cuda.current_device() if device.index is None else device.index)


@functools.cache
def _capability_why(index: int) -> str | None:
    # cached per device: gpu.attention asks on every call, and a GPU's capability does not change
    import torch
    cap = torch.cuda.get_device_capability(index)
    if cap[0] != 9:
        return f"kernel 3 uses Hopper's wgmma (sm_90); this GPU is sm_{cap[0]}{cap[1]}"
    return None


def available(device=None) -> bool:
    return unavailable(device) is None


def cannot_run_here() -> bool:
    """For the command-line sweeps: True, after printing why, where kernel 3 cannot run on this machine."""
    why = unavailable()
    if why:
        print(f"kernel 3 cannot run here: {why}")
    return bool(why)


def refusal(what: str, d: int, Nq: int, Nk: int, dtype: str, options: dict | None, tiles,
            head_dims: tuple = HEAD_DIMS, rows: int | None = None) -> str | None:
    """The rules kernel 3's forward and backward share, in this order (None: they take the call): fp16 or
    bf16; d in ``head_dims`` (the forward's HEAD_DIMS; the backward passes its own); Nq = Nk; N a multiple of
    ``tiles``' BLOCK_N and of ``rows`` (default BLOCK_M: no ragged tile); no option set (dropout, GQA, window,
    ALiBi, softcap). ``what`` names the kernel in the reason."""
    if dtype not in DTYPES:
        return f"dtype {dtype}: {what} takes float16 or bfloat16"
    if d not in head_dims:
        return f"d={d}: {what} takes d in {head_dims} (a power of two with tuned tiles)"
    if Nq != Nk:
        return f"Nq={Nq} != Nk={Nk}: {what} takes equal lengths"
    if Nq < 1:
        return f"N={Nq}: {what} needs at least one row"
    rows = rows or tiles.block_m
    if Nq % rows or Nq % tiles.block_n:
        return (f"N={Nq} is not a multiple of {rows} rows and {tiles.block_n} keys (tiles {tiles.block_m}x"
                f"{tiles.block_n}; no ragged blocks in {what})")
    options = _asked(options or {})
    if options:
        return f"option(s) {options}: {what} is the plain one (no dropout or variants)"
    return None


def _is_set(value) -> bool:
    """An option that asks for something: not None, and not a zero or False number (dropout_p=0.0,
    enable_gqa=False; a 0-d tensor or array is its number); anything else (a tensor of ALiBi slopes) is set."""
    if value is None:
        return False
    if isinstance(value, (numbers.Number, np.bool_)):  # numpy's scalars too: np.float32(0.0) asks for nothing
        return bool(value)
    if getattr(value, "ndim", None) == 0:  # dropout_p=torch.tensor(0.) is 0, as attention reads it
        return bool(value)
    return True


def _asked(options: dict) -> list:
    """The names of the options that ask for something, as attention reads them: a seed draws nothing without
    dropout, and a window of (-1, -1), unbounded both ways, is no window (problem._window)."""
    from ..problem import _window

    def asks(name, value):
        if name == "seed":
            return _is_set(value) and _is_set(options.get("dropout_p"))
        if name == "window" and value is not None:
            try:
                return _window(value) is not None
            except (TypeError, ValueError):  # not a window: set (attention's own checks refuse it)
                return True
        return _is_set(value)

    return sorted(k for k, v in options.items() if asks(k, v))


def plan(d: int, Nq: int, Nk: int, dtype: str, causal: bool, options: dict | None = None,
         tiles: Tiles3 | None = None):
    """The dispatcher's decision for one call: ``(Tiles3, None)`` where kernel 3 runs, else ``(None, why)``,
    and kernel 2 runs instead. Pure Python (no GPU, no Gluon): the rules, in order:

    * dtype fp16 or bf16 (the wgmma paths written here);
    * d in {64, 128, 256}: powers of two (Gluon's tensor shapes are), the widths the tiles and the register
      budget were sized for. At d = 256 O alone is 128 registers a thread of a consumer warpgroup, so its tiles
      take 64 keys a step (S and S_next 32 registers each) and two K/V stages (192 KB of shared memory);
    * Nq = Nk (the causal diagonal then sits at i = j; the kernel has no offset for Nq != Nk) and a
      multiple of BLOCK_N and of BLOCK_M (the 192-row tile: of a warpgroup's 64 rows, so it runs past N by
      whole warpgroups, which store nothing): no row masks within a warpgroup, no ragged key block;
    * no dropout, GQA, window, ALiBi or softcap (kernel 2 has them; kernel 3 is the plain forward);
    * the tiles fit in shared memory.
    """
    t = tiles or TILES.get((d, bool(causal)))
    why = refusal("kernel 3", d, Nq, Nk, dtype, options, t, rows=t.rows_multiple if t is not None else None)
    if why:
        return None, why
    if t.pingpong and (t.block_m, t.warps) not in ((128, 8), (192, 12)):
        return None, ("pingpong: two or three consumer warpgroups of 64 rows each (BLOCK_M=128 with 8 warps, or "
                      "192 with 12)")
    if t.pingpong and t.consumers == 3 and d != 64:
        return None, (f"d={d}: three consumer warpgroups at d = 64 only (160 registers a thread hold S, P and O "
                      f"of 64 rows at d = 64; FA3 takes 192-row tiles there only)")
    if t.persistent and not t.pingpong:
        return None, "persistent: the pingpong version only (its producer warp streams the next tile's loads)"
    if t.q_regs and not t.pingpong:
        return None, "q_regs: the pingpong version only"
    if t.q_prefetch and not t.persistent:
        return None, "q_prefetch: the persistent version only (it loads the program's next tile's Q_i early)"
    if t.dynamic and not t.persistent:
        return None, "dynamic: the persistent version only (its programs claim their tiles from a counter)"
    if t.round_sync and (t.dynamic or not t.persistent):
        return None, "round_sync: the persistent static version only (its programs take their tiles in rounds)"
    if t.emu not in (0, 2, 4, 8) or (t.emu and not t.pingpong):
        return None, f"emu={t.emu}: 0, or 2, 4 or 8 with pingpong (every emu-th step's exponentials on the FMA units)"
    if not t.pingpong and (t.warps & (t.warps - 1) or t.warps < 4):  # pingpong: num_warps=4 and workers
        return None, f"{t.warps} warps: Triton launches a power of two, at least one warpgroup (4)"
    if t.block_m != 16 * t.warps:
        return None, f"BLOCK_M={t.block_m} must be 16 rows per warp ({t.warps} warps: {16 * t.warps})"
    if t.smem_bytes(d) > SMEM_LIMIT:
        return None, f"tiles {t} need {t.smem_bytes(d)} B of shared memory at d={d} (> {SMEM_LIMIT})"
    del causal  # causal and not: both run
    return t, None


def round_sync(t: Tiles3, N: int, d: int, elem: int = 2) -> bool:
    """Whether a call of kernel 3's forward with tiles ``t`` at sequence length N and head dim d puts a barrier
    between rounds of tiles (see ``ROUND_SYNC_KV_BYTES``): ``t.round_sync`` if set, else where the launch is
    persistent and static and one head's K and V (2·N·d·elem bytes) reach ``ROUND_SYNC_KV_BYTES``."""
    if t.round_sync is not None:
        return t.round_sync
    return t.pingpong and t.persistent and not t.dynamic and kv_past_round_sync(N, d, elem)


# --------------------------------------------------------------------------------------------
# the kernel
# --------------------------------------------------------------------------------------------

if _MODS is not None:
    gluon, gl, _hopper, _TensorDescriptor = _MODS
    # exp2.py's constants and degree-3 coefficients, as constexprs the kernels read
    _c = _exp2.coefficients(3)
    EXP2_C0, EXP2_C1, EXP2_C2, EXP2_C3 = (gl.constexpr(float(x)) for x in _c)
    EXP2_MAGIC = gl.constexpr(_exp2.MAGIC)
    EXP2_LOWEST = gl.constexpr(_exp2.LOWEST)
    tma = _hopper.tma
    mbarrier = _hopper.mbarrier
    warpgroup_mma = _hopper.warpgroup_mma
    warpgroup_mma_wait = _hopper.warpgroup_mma_wait
    fence_async_shared = _hopper.fence_async_shared

    @gluon.jit
    def _k3_kv_blocks(start_m, N, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, CAUSAL: gl.constexpr):
        # The key blocks the row block starting at row start_m visits (FA2 §3.1.1 causal block skipping):
        # [0, n_full) wholly at or below the diagonal, unmasked; [n_full, n_blocks) crossed by it, masked.
        if CAUSAL:
            n_blocks = gl.minimum(gl.cdiv(start_m + BLOCK_M, BLOCK_N), N // BLOCK_N)
            n_full = (start_m + 1) // BLOCK_N
        else:
            n_blocks = N // BLOCK_N
            n_full = n_blocks
        return n_full, n_blocks

    @gluon.jit
    def _k3_program_tiles(n_tiles, PERSISTENT: gl.constexpr):
        # The tiles this program takes, as range(first, n_tiles, step), in the order the GPU launches the grid:
        # persistent, one program per SM striding over all of them (FA3's static tile scheduler); otherwise the
        # one tile of its (2D) grid position.
        if PERSISTENT:
            first = gl.program_id(0)
            step = gl.num_programs(0)
        else:
            first = gl.program_id(0) + gl.program_id(1) * gl.num_programs(0)
            step = n_tiles
        return first, step

    @gluon.jit
    def _k3_operand_a(x_smem, parent: gl.constexpr, IN_REGS: gl.constexpr):
        # The A operand of a product every step repeats with the same tile (Q_i in the forward; K_j, V_j or Q_i,
        # dO_i in the backward): the shared-memory tile itself, or (IN_REGS: Tiles3.q_regs, TilesB.kv_regs,
        # TilesQ.qdo_regs) the tile loaded into registers once, in the layout wgmma reads a register A operand in
        # (parent: the product's accumulator layout), so that the steps' products read only B from shared memory.
        if IN_REGS:
            return x_smem.load(gl.DotOperandLayout(operand_index=0, parent=parent, k_width=2))
        else:
            return x_smem

    @gluon.jit
    def _k3_ring_turns(turns, WG: gl.constexpr, NUM_WG: gl.constexpr):
        # Ping-pong among NUM_WG warpgroups (two, or FA3's three at d = 64) in a ring: (the mbarrier this
        # warpgroup waits on, the one it signals the next warpgroup through). With two, each waits on its own
        # mbarrier and signals the other's (the backward kernels' pair).
        return turns.index(WG), turns.index((WG + 1) % NUM_WG)

    @gluon.jit
    def _k3_turn(my_turn, t, FIRST: gl.constexpr, ON: gl.constexpr = True):
        # Ping-pong: the t-th GEMM issue of a warpgroup waits for the previous warpgroup's matching issue
        # (warpgroup 0, FIRST, waits for the last warpgroup's (t−1)-th, warpgroup w > 0 for warpgroup w−1's t-th).
        # ON = False: no turns.
        if ON:
            if FIRST:
                mbarrier.wait(my_turn, (t - 1) & 1, pred=t > 0)
            else:
                mbarrier.wait(my_turn, t & 1)

    @gluon.jit
    def _exp2_fma(x):
        # 2^x on the FMA units (exp2.py, FlashAttention-4's trick), for x <= 0: clamp to the normal range;
        # t = x + 1.5·2^23 rounds x to j in t's low mantissa bits; f = x − j in [−½, ½]; 2^f by Horner;
        # 2^j by adding j·2^23 (= bits(t) << 23) to the bits of 2^f.
        x = gl.maximum(x, EXP2_LOWEST)
        t = x + EXP2_MAGIC
        f = x - (t - EXP2_MAGIC)
        p = f * EXP2_C3 + EXP2_C2
        p = p * f + EXP2_C1
        p = p * f + EXP2_C0
        bits = p.to(gl.int32, bitcast=True) + (t.to(gl.int32, bitcast=True) << 23)
        return bits.to(gl.float32, bitcast=True)

    @gluon.jit
    def _softmax_step(S, m_i, l_i, qk_scale, offs_m, offs_n, MASK: gl.constexpr, EMU: gl.constexpr = False):
        # FA2 Alg.1 l.9 (flash2.py), in base 2 (τ·log2 e folded into qk_scale): m_i^new = max(m_i, rowmax(S_ij));
        # P̃_ij = exp2(S_ij − m_i^new); ℓ_i^new = e^{m_i − m_i^new} ℓ_i + rowsum(P̃_ij). Returns alpha = e^{m_i − m_i^new}
        # for the O_i rescale (l.10), which the caller applies once the P̃ V wgmma in flight has landed.
        if MASK:  # the causal diagonal's block only (FA2 §3.1.1): key j > query i → −inf
            S = gl.where(gl.expand_dims(offs_m, 1) >= gl.expand_dims(offs_n, 0), S, float("-inf"))
        m_new = gl.maximum(m_i, gl.max(S, 1) * qk_scale)
        alpha = gl.exp2(m_i - m_new)
        if EMU:  # this step's exponentials on the FMA units (Tiles3.emu), the MUFU left to the other warpgroup
            P = _exp2_fma(S * qk_scale - gl.expand_dims(m_new, 1))
        else:
            P = gl.exp2(S * qk_scale - gl.expand_dims(m_new, 1))
        l_i = l_i * alpha + gl.sum(P, 1)
        return P, m_new, l_i, alpha

    @gluon.jit
    def _k3_loop(j_lo, j_hi, P, m_i, l_i, O, q_smem, k_smem, v_smem, k_bars, v_bars, desc_k, desc_v, kv_row0,
                 offs_m, qk_scale, n_blocks,
                 BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr, MASK: gl.constexpr,
                 s_layout: gl.constexpr, o_layout: gl.constexpr, p_layout: gl.constexpr):
        # FA3 Alg.2 l.7: for 1 <= j < Tc (the paper prints "< Tc − 1"; l.18-19 then finish block Tc − 1, so
        # the loop runs to Tc − 1 inclusive of j = Tc − 1 as S_next's index).
        dtype: gl.constexpr = desc_k.dtype
        kv_bytes: gl.constexpr = desc_k.block_type.nbytes
        for j in range(j_lo, j_hi):
            s = j % STAGES
            sp = (j - 1) % STAGES
            # Refill the slot K_{j−1} occupied (its S wgmma was waited for in the last step) with
            # K_{j−1+STAGES}: FA3 Alg.1's producer, done here by the consumer (no producer warpgroup).
            nxt = j - 1 + STAGES
            mbarrier.expect(k_bars.index(sp), kv_bytes, pred=nxt < n_blocks)
            tma.async_copy_global_to_shared(desc_k, [kv_row0 + nxt * BLOCK_N, 0], k_bars.index(sp), k_smem.index(sp),
                                            pred=nxt < n_blocks)
            # FA3 Alg.2 l.8: wait for K_j to be loaded in shared memory.
            mbarrier.wait(k_bars.index(s), (j // STAGES) & 1)
            # FA3 Alg.2 l.9 = FA2 Alg.1 l.8: S_next = Q_i K_jᵀ by wgmma; commit, do not wait.
            S_tok = warpgroup_mma(q_smem, k_smem.index(s).permute((1, 0)),
                                  gl.zeros([BLOCK_M, BLOCK_N], gl.float32, s_layout),
                                  use_acc=False, is_async=True)
            # FA3 Alg.2 l.10: wait for V_{j−1} to be loaded in shared memory.
            mbarrier.wait(v_bars.index(sp), ((j - 1) // STAGES) & 1)
            # FA3 Alg.2 l.11 = FA2 Alg.1 l.10: O_i = O_i + P̃_cur V_{j−1} by wgmma (P̃ from registers);
            # commit, do not wait.
            O_tok = warpgroup_mma(P, v_smem.index(sp), O, is_async=True)
            # FA3 Alg.2 l.12: wait for Q_i K_jᵀ only: the older of the two groups in flight (P̃ V keeps running).
            S = warpgroup_mma_wait(1, deps=(S_tok,))
            # FA3 Alg.2 l.13 = FA2 Alg.1 l.9: m_i, P̃_next, ℓ_i from S_next, while the tensor cores do P̃_cur V_{j−1}.
            offs_n = j * BLOCK_N + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, s_layout))
            P_next, m_i, l_i, alpha = _softmax_step(S, m_i, l_i, qk_scale, offs_m, offs_n, MASK)
            # FA3 Alg.2 l.14 = FA2 Alg.1 l.10's diag(e^{m_i − m_i^new}) O_i: wait for P̃_cur V_{j−1}, then rescale O_i.
            O, P = warpgroup_mma_wait(0, deps=(O_tok, P))
            O = O * gl.expand_dims(gl.convert_layout(alpha, gl.SliceLayout(1, o_layout)), 1)
            # FA3 Alg.2 l.15: release V_{j−1}'s slot: load V_{j−1+STAGES} into it (K_j's is refilled next step).
            mbarrier.expect(v_bars.index(sp), kv_bytes, pred=nxt < n_blocks)
            tma.async_copy_global_to_shared(desc_v, [kv_row0 + nxt * BLOCK_N, 0], v_bars.index(sp), v_smem.index(sp),
                                            pred=nxt < n_blocks)
            # FA3 Alg.2 l.16: S_next becomes S_cur (here P̃_next becomes P̃_cur, the wgmma's A operand).
            P = gl.convert_layout(P_next.to(dtype), p_layout)
        return P, m_i, l_i, O

    @gluon.jit
    def _k3_fwd_kernel(desc_q, desc_k, desc_v, desc_o, L2, N, qk_scale, BH,
                       HEAD_D: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr,
                       CAUSAL: gl.constexpr, HEADS_FIRST: gl.constexpr, num_warps: gl.constexpr):
        # FA2 Alg.1 l.1-3: a program runs row block i of one (batch, head) bh. Causal: the longest rows first.
        Tr = N // BLOCK_M
        if HEADS_FIRST:
            pid = gl.program_id(1)
            bh = gl.program_id(0)
        else:
            pid = gl.program_id(0)
            bh = gl.program_id(1)
        i = pid
        if CAUSAL:
            i = Tr - 1 - pid
        start_m = i * BLOCK_M
        q_row0 = bh * N + start_m  # rows of the (B·H·N, d) views
        kv_row0 = bh * N
        dtype: gl.constexpr = desc_q.dtype

        # Register layouts: the wgmma accumulators of S (BLOCK_M × BLOCK_N) and O (BLOCK_M × d), 16 rows a warp,
        # and P̃ as wgmma's register A operand.
        s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                           instr_shape=[16, BLOCK_N, 16])
        o_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                           instr_shape=[16, HEAD_D, 16])
        p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
        row_layout: gl.constexpr = gl.SliceLayout(1, s_layout)

        # Shared memory: Q_i (later O_i's staging buffer), STAGES slots each of K_j and V_j, one mbarrier each.
        q_smem = gl.allocate_shared_memory(dtype, [BLOCK_M, HEAD_D], desc_q.layout)
        k_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_D], desc_k.layout)
        v_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_D], desc_v.layout)
        q_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
        k_bars = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        v_bars = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        mbarrier.init(q_bar, count=1)
        for s in gl.static_range(STAGES):
            mbarrier.init(k_bars.index(s), count=1)
            mbarrier.init(v_bars.index(s), count=1)

        n_full, n_blocks = _k3_kv_blocks(start_m, N, BLOCK_M, BLOCK_N, CAUSAL)

        # FA2 Alg.1 l.4 / FA3 Alg.1's producer: Q_i, and the first STAGES blocks of K and V, by TMA.
        mbarrier.expect(q_bar, desc_q.block_type.nbytes)
        tma.async_copy_global_to_shared(desc_q, [q_row0, 0], q_bar, q_smem)
        kv_bytes: gl.constexpr = desc_k.block_type.nbytes
        for s in gl.static_range(STAGES):
            mbarrier.expect(k_bars.index(s), kv_bytes, pred=s < n_blocks)
            tma.async_copy_global_to_shared(desc_k, [kv_row0 + s * BLOCK_N, 0], k_bars.index(s), k_smem.index(s),
                                            pred=s < n_blocks)
            mbarrier.expect(v_bars.index(s), kv_bytes, pred=s < n_blocks)
            tma.async_copy_global_to_shared(desc_v, [kv_row0 + s * BLOCK_N, 0], v_bars.index(s), v_smem.index(s),
                                            pred=s < n_blocks)

        # FA3 Alg.2 l.2 = FA2 Alg.1 l.5: on chip O_i = 0, ℓ_i = 0, m_i = −inf (fp32).
        O = gl.zeros([BLOCK_M, HEAD_D], gl.float32, o_layout)
        l_i = gl.zeros([BLOCK_M], gl.float32, row_layout)
        m_i = gl.full([BLOCK_M], float("-inf"), gl.float32, row_layout)
        offs_m = start_m + gl.arange(0, BLOCK_M, layout=row_layout)

        # FA3 Alg.2 l.3: wait for Q_i and K_0 to be loaded in shared memory.
        mbarrier.wait(q_bar, 0)
        mbarrier.wait(k_bars.index(0), 0)
        # FA3 Alg.2 l.4 = FA2 Alg.1 l.8: S_cur = Q_i K_0ᵀ by wgmma; commit and wait.
        S_tok = warpgroup_mma(q_smem, k_smem.index(0).permute((1, 0)),
                              gl.zeros([BLOCK_M, BLOCK_N], gl.float32, s_layout), use_acc=False, is_async=True)
        S = warpgroup_mma_wait(0, deps=(S_tok,))
        # FA3 Alg.2 l.5: release K_0's slot (refilled by the loop's first step).
        # FA3 Alg.2 l.6 = FA2 Alg.1 l.9: m_i, P̃_cur, ℓ_i from S_cur (O_i = 0 needs no rescale). Masked where
        # block 0 is crossed by the diagonal (row block 0 of a causal call).
        offs_n = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, s_layout))
        P, m_i, l_i, alpha = _softmax_step(S, m_i, l_i, qk_scale, offs_m, offs_n, CAUSAL)
        P = gl.convert_layout(P.to(dtype), p_layout)

        # FA3 Alg.2 l.7-17: the pipelined loop, first over the unmasked blocks, then the diagonal's (causal).
        P, m_i, l_i, O = _k3_loop(1, n_full, P, m_i, l_i, O, q_smem, k_smem, v_smem, k_bars, v_bars, desc_k, desc_v,
                                  kv_row0, offs_m, qk_scale, n_blocks, BLOCK_M, BLOCK_N, STAGES, False,
                                  s_layout, o_layout, p_layout)
        P, m_i, l_i, O = _k3_loop(gl.maximum(n_full, 1), n_blocks, P, m_i, l_i, O, q_smem, k_smem, v_smem, k_bars,
                                  v_bars, desc_k, desc_v, kv_row0, offs_m, qk_scale, n_blocks, BLOCK_M, BLOCK_N, STAGES,
                                  CAUSAL, s_layout, o_layout, p_layout)

        # FA3 Alg.2 l.18: wait for V_{Tc−1} to be loaded in shared memory.
        last = n_blocks - 1
        mbarrier.wait(v_bars.index(last % STAGES), (last // STAGES) & 1)
        # FA3 Alg.2 l.19 = FA2 Alg.1 l.10: O_i = O_i + P̃_last V_{Tc−1}; commit and wait.
        O_tok = warpgroup_mma(P, v_smem.index(last % STAGES), O, is_async=True)
        O, P = warpgroup_mma_wait(0, deps=(O_tok, P))

        # FA3 Alg.2 l.20 = FA2 Alg.1 l.12-13: O_i = diag(ℓ_i)^{-1} O_i; L_i = m_i + log ℓ_i (base 2).
        O = O / gl.expand_dims(gl.convert_layout(l_i, gl.SliceLayout(1, o_layout)), 1)
        L2_i = m_i + gl.log2(l_i)
        # FA2 Alg.1 l.14-15: write O_i (through Q_i's shared-memory buffer, by TMA) and L_i to HBM.
        q_smem.store(O.to(dtype))
        fence_async_shared()
        tma.async_copy_shared_to_global(desc_o, [q_row0, 0], q_smem)
        gl.store(L2 + bh * N + offs_m, L2_i)
        tma.store_wait(0)
        mbarrier.invalidate(q_bar)
        for s in gl.static_range(STAGES):
            mbarrier.invalidate(k_bars.index(s))
            mbarrier.invalidate(v_bars.index(s))


    # ----------------------------------------------------------------------------------------
    # pingpong: FA3 Algorithm 1 (warp specialisation) around Algorithm 2: one producer warp issues
    # every TMA load; each of the two consumer warpgroups owns 64 of the tile's 128 rows and runs
    # Algorithm 2 on them, and the two take turns at the tensor cores (FA3 §3.1 "pingpong
    # scheduling"): warpgroup 1 issues its GEMMs only after warpgroup 0 has issued its own, and the
    # other way round, so one warpgroup's softmax runs while the other's GEMMs do.
    # ----------------------------------------------------------------------------------------

    @gluon.jit
    def _k3ws_tile(tile, Tr, BH, N, n_tiles, step, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
                   CAUSAL: gl.constexpr, HEADS_FIRST: gl.constexpr):
        # FA2 Alg.1 l.3: which row block i of which (batch, head) bh the tile-th program's work is, in the
        # order the GPU launches a grid of (Tr, BH) programs (or (BH, Tr) heads first); causal, the longest
        # rows first. Returns bh, the first row, and the key blocks it visits (_k3_kv_blocks).
        if CAUSAL:
            # Persistent (step programs take tiles p, p + step, ...): causal tiles shorten along the order, so
            # every other round of `step` tiles is taken in reverse (a snake), and the program that took a
            # round's longest tile takes the next round's shortest. One program a tile: step = n_tiles, r = 0.
            r = tile // step
            c = gl.minimum(step, n_tiles - r * step)  # tiles in round r (the last may be short)
            pos = tile - r * step
            tile = tile + (r % 2) * (c - 1 - 2 * pos)
        if HEADS_FIRST:
            bh = tile % BH
            pid = tile // BH
        else:
            pid = tile % Tr
            bh = tile // Tr
        i = pid
        if CAUSAL:
            i = Tr - 1 - pid
        start_m = i * BLOCK_M
        n_full, n_blocks = _k3_kv_blocks(start_m, N, BLOCK_M, BLOCK_N, CAUSAL)
        return bh, start_m, n_full, n_blocks

    @gluon.jit
    def _k3_load_kv(desc_k, desc_v, k_smem, v_smem, k_ready, v_ready, k_empty, v_empty, row0, n_blocks, it):
        # FA3 Alg.1 l.5-8 (producer), the forward's and the dQ kernel's: for j = 0 .. n_blocks - 1, wait until the
        # consumers have released slot it % STAGES of the K/V ring (it counts the K/V blocks loaded so far, over
        # every tile), then load K_j and V_j (rows row0 + j·BLOCK_N) into it by TMA. Returns it.
        STAGES: gl.constexpr = k_smem.shape[0]
        BLOCK_N: gl.constexpr = k_smem.shape[1]
        kv_bytes: gl.constexpr = desc_k.block_type.nbytes
        for j in range(n_blocks):
            s = it % STAGES
            ph = ((it // STAGES) & 1) ^ 1  # the release of the previous round of this slot
            mbarrier.wait(k_empty.index(s), ph, pred=it >= STAGES)
            mbarrier.expect(k_ready.index(s), kv_bytes)
            tma.async_copy_global_to_shared(desc_k, [row0 + j * BLOCK_N, 0], k_ready.index(s), k_smem.index(s))
            mbarrier.wait(v_empty.index(s), ph, pred=it >= STAGES)
            mbarrier.expect(v_ready.index(s), kv_bytes)
            tma.async_copy_global_to_shared(desc_v, [row0 + j * BLOCK_N, 0], v_ready.index(s), v_smem.index(s))
            it += 1
        return it

    @gluon.jit
    def _k3ws_load_tile(tile, it, tc, desc_q, desc_k, desc_v, q_smem, k_smem, v_smem, q_bar, q_empty, k_ready,
                        v_ready, k_empty, v_empty, N, Tr, BH, n_tiles, order_step, CAUSAL: gl.constexpr,
                        HEADS_FIRST: gl.constexpr):
        # FA3 Alg.1 l.3-9 (producer) for one tile: load Q_i; for each j, wait until the consumers have released
        # slot it % STAGES (it counts the K/V blocks of every tile so far), then load K_j and V_j into it by TMA.
        # tc counts the program's tiles (Q_i's phase). Returns it.
        BLOCK_N: gl.constexpr = k_smem.shape[1]
        BLOCK_M: gl.constexpr = q_smem.shape[0] * q_smem.shape[1]  # warpgroups x 64 rows
        bh, start_m, n_full, n_blocks = _k3ws_tile(tile, Tr, BH, N, n_tiles, order_step, BLOCK_M, BLOCK_N,
                                                   CAUSAL, HEADS_FIRST)
        # Q_i's buffer is free once all consumers are done with the previous tile's Q: after their O stores
        # (O staged in Q's buffer), or with q_prefetch after their last S product.
        mbarrier.wait(q_empty, (tc - 1) & 1, pred=tc > 0)
        # Q_i as one 64-row box per consumer warpgroup (a shared-memory tile's rows are a power of two: 192 is not);
        # a box past the tensor's last row is zero-filled by the TMA unit, and its bytes still count.
        NUM_WG: gl.constexpr = q_smem.shape[0]
        mbarrier.expect(q_bar, NUM_WG * desc_q.block_type.nbytes)
        for w in gl.static_range(NUM_WG):
            tma.async_copy_global_to_shared(desc_q, [bh * N + start_m + w * 64, 0], q_bar, q_smem.index(w))
        return _k3_load_kv(desc_k, desc_v, k_smem, v_smem, k_ready, v_ready, k_empty, v_empty, bh * N, n_blocks, it)

    @gluon.jit
    def _k3ws_publish(nxt, tc, ring, t_full, t_empty):
        # Tiles3.dynamic: hand the program's next tile to every consumer warpgroup through slot tc % 2 of a
        # two-slot ring in shared memory, once all have read what the slot held two tiles ago.
        s = tc % 2
        mbarrier.wait(t_empty.index(s), ((tc // 2) & 1) ^ 1, pred=tc >= 2)
        ring.index(s).store(gl.full([32], nxt, gl.int32, gl.BlockedLayout([1], [32], [1], [0])))
        mbarrier.arrive(t_full.index(s), count=1)  # release: the store above is seen by whoever waits on it

    @gluon.jit
    def _k3ws_take(tc, ring, t_full, t_empty):
        # Tiles3.dynamic: the consumer's side of _k3ws_publish; every lane holds the same tile.
        s = tc % 2
        mbarrier.wait(t_full.index(s), (tc // 2) & 1)
        x = ring.index(s).load(gl.BlockedLayout([1], [32], [4], [0]))
        mbarrier.arrive(t_empty.index(s), count=1)
        return gl.max(x, axis=0)

    @gluon.jit
    def _k3ws_round_barrier(counter, rounds, wait, n_tiles, step):
        # Tiles3.round_sync: this program has issued every load of its tile of round `rounds` - 1. Count it in
        # `counter` (an int32 the launcher zeroes: the tiles whose loads are all issued), and, if the program has a
        # tile in the next round (`wait`), spin until every tile of rounds 0 .. rounds - 1 is counted: the tiles
        # below min(rounds·step, n_tiles). Every program is resident (one per SM), so those it waits for run.
        gl.atomic_add(counter, 1)
        if wait:
            done = gl.minimum(rounds * step, n_tiles)
            seen = gl.atomic_add(counter, 0)  # an atomic read: served by the L2, never a stale cached value
            while seen < done:
                seen = gl.atomic_add(counter, 0)

    @gluon.jit
    def _k3ws_producer(desc_q, desc_k, desc_v, q_smem, k_smem, v_smem, q_bar, q_empty, k_ready, v_ready, k_empty,
                       v_empty, ring, t_full, t_empty, counter, cfg, N, Tr, BH, first, n_tiles, step):
        # FA3 Alg.1 (producer warpgroup, here one warp): _k3ws_load_tile for each of this program's tiles.
        # (A worker partition's arguments are IR values: its constexprs come from the buffers' shapes, the flags
        # from the cfg placeholder's.) Static: tiles first, first + step, ... Dynamic (FA3's dynamic tile
        # scheduler): the first tile is the program's id; each next one is claimed from a global counter once
        # this tile's last loads are issued, STAGES blocks before the consumers finish it (late enough that the
        # claim follows the order in which programs free up, early enough that the atomic's round trip is
        # hidden), and handed to the consumers.
        CAUSAL: gl.constexpr = cfg.shape[1] == 2
        HEADS_FIRST: gl.constexpr = cfg.shape[2] == 2
        DYNAMIC: gl.constexpr = cfg.shape[5] == 2
        ROUND_SYNC: gl.constexpr = cfg.shape[6] == 2
        it = 0
        tc = 0
        if DYNAMIC:
            tile = first
            while tile < n_tiles:
                it = _k3ws_load_tile(tile, it, tc, desc_q, desc_k, desc_v, q_smem, k_smem, v_smem, q_bar, q_empty,
                                     k_ready, v_ready, k_empty, v_empty, N, Tr, BH, n_tiles, n_tiles, CAUSAL,
                                     HEADS_FIRST)
                nxt = step + gl.atomic_add(counter, 1)  # tiles 0 .. step - 1 went to the programs' ids
                _k3ws_publish(nxt, tc, ring, t_full, t_empty)  # past n_tiles: the consumers stop too
                tile = nxt
                tc += 1
        else:
            for tile in range(first, n_tiles, step):
                it = _k3ws_load_tile(tile, it, tc, desc_q, desc_k, desc_v, q_smem, k_smem, v_smem, q_bar, q_empty,
                                     k_ready, v_ready, k_empty, v_empty, N, Tr, BH, n_tiles, step, CAUSAL,
                                     HEADS_FIRST)
                tc += 1
                if ROUND_SYNC:
                    _k3ws_round_barrier(counter, tc, tile + step < n_tiles, n_tiles, step)

    @gluon.jit
    def _k3ws_compute_tile(tile, it, tt, tc, desc_o, L2, q_smem, o_smem, k_smem, v_smem, q_bar, q_empty, k_ready,
                           v_ready, k_empty, v_empty, my_turn, other_turn, N, Tr, BH, n_tiles, order_step, qk_scale,
                           WG: gl.constexpr, EMU: gl.constexpr, CAUSAL: gl.constexpr, HEADS_FIRST: gl.constexpr,
                           Q_REGS: gl.constexpr, Q_PREFETCH: gl.constexpr):
        # FA3 Alg.2 on rows [WG·64, WG·64 + 64) of one tile, one warpgroup (4 warps). it counts the K/V blocks
        # of the tiles so far (slot it % STAGES), tt this warpgroup's GEMM issues (the pingpong turns), tc the
        # tiles (Q_i's phase). Returns it and tt after the tile.
        ROWS: gl.constexpr = 64
        STAGES: gl.constexpr = k_smem.shape[0]
        BLOCK_N: gl.constexpr = k_smem.shape[1]
        HEAD_D: gl.constexpr = k_smem.shape[2]
        BLOCK_M: gl.constexpr = q_smem.shape[0] * ROWS
        dtype: gl.constexpr = desc_o.dtype
        s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                           instr_shape=[16, BLOCK_N, 16])
        o_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                           instr_shape=[16, HEAD_D, 16])
        p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
        row_layout: gl.constexpr = gl.SliceLayout(1, s_layout)
        q_c = q_smem.index(WG)  # this warpgroup's rows of Q_i
        o_c = o_smem.index(WG)  # and of O_i's staging buffer (Q_i's own unless q_prefetch)
        bh, start_m, n_full, n_blocks = _k3ws_tile(tile, Tr, BH, N, n_tiles, order_step, BLOCK_M, BLOCK_N,
                                                   CAUSAL, HEADS_FIRST)
        offs_m = start_m + WG * ROWS + gl.arange(0, ROWS, layout=row_layout)
        # FA3 Alg.2 l.2 = FA2 Alg.1 l.5: O_i = 0, ℓ_i = 0, m_i = −inf.
        O = gl.zeros([ROWS, HEAD_D], gl.float32, o_layout)
        l_i = gl.zeros([ROWS], gl.float32, row_layout)
        m_i = gl.full([ROWS], float("-inf"), gl.float32, row_layout)
        # FA3 Alg.2 l.3: wait for Q_i and K_0.
        mbarrier.wait(q_bar, tc & 1)
        q_a = _k3_operand_a(q_c, s_layout, Q_REGS)  # Q_i, the A operand of every S product of the tile
        mbarrier.wait(k_ready.index(it % STAGES), (it // STAGES) & 1)
        # FA3 Alg.2 l.4 = FA2 Alg.1 l.8: S_cur = Q_i K_0ᵀ; commit and wait (one issue of the ping-pong).
        _k3_turn(my_turn, tt, WG == 0)
        S_tok = warpgroup_mma(q_a, k_smem.index(it % STAGES).permute((1, 0)),
                              gl.zeros([ROWS, BLOCK_N], gl.float32, s_layout), use_acc=False, is_async=True)
        mbarrier.arrive(other_turn, count=1)
        S = warpgroup_mma_wait(0, deps=(S_tok,))
        # FA3 Alg.2 l.5: release K_0's slot to the producer (and, q_prefetch, Q_i's buffer if it was the last S).
        mbarrier.arrive(k_empty.index(it % STAGES), count=1)
        mbarrier.arrive(q_empty, count=1, pred=Q_PREFETCH and n_blocks == 1)
        # FA3 Alg.2 l.6 = FA2 Alg.1 l.9: m_i, P̃_cur, ℓ_i from S_cur.
        offs_n = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, s_layout))
        P, m_i, l_i, alpha = _softmax_step(S, m_i, l_i, qk_scale, offs_m, offs_n, CAUSAL)
        P = gl.convert_layout(P.to(dtype), p_layout)
        # FA3 Alg.2 l.7: for 1 <= j < Tc.
        for j in range(1, n_blocks):
            s = (it + j) % STAGES
            sp = (it + j - 1) % STAGES
            # FA3 Alg.2 l.8: wait for K_j.
            mbarrier.wait(k_ready.index(s), ((it + j) // STAGES) & 1)
            # FA3 Alg.2 l.10: wait for V_{j−1} (before taking the turn, so the turn is spent on GEMMs).
            mbarrier.wait(v_ready.index(sp), ((it + j - 1) // STAGES) & 1)
            _k3_turn(my_turn, tt + j, WG == 0)
            # FA3 Alg.2 l.9 = FA2 Alg.1 l.8: S_next = Q_i K_jᵀ; commit, do not wait.
            S_tok = warpgroup_mma(q_a, k_smem.index(s).permute((1, 0)),
                                  gl.zeros([ROWS, BLOCK_N], gl.float32, s_layout), use_acc=False, is_async=True)
            # FA3 Alg.2 l.11 = FA2 Alg.1 l.10: O_i += P̃_cur V_{j−1}; commit, do not wait.
            O_tok = warpgroup_mma(P, v_smem.index(sp), O, is_async=True)
            mbarrier.arrive(other_turn, count=1)  # the other warpgroup's GEMMs may go next
            # FA3 Alg.2 l.12: wait for Q_i K_jᵀ; release K_j's slot.
            S = warpgroup_mma_wait(1, deps=(S_tok,))
            mbarrier.arrive(k_empty.index(s), count=1)
            # q_prefetch: the tile's last S product has read Q_i; the producer may load the next tile's.
            mbarrier.arrive(q_empty, count=1, pred=Q_PREFETCH and j == n_blocks - 1)
            # FA3 Alg.2 l.13 = FA2 Alg.1 l.9: softmax of S_next while P̃_cur V_{j−1} runs.
            offs_n = j * BLOCK_N + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, s_layout))
            if EMU > 1:
                # Tiles3.emu: every EMU-th step's exponentials on the FMA units (exp2.py); the two warpgroups'
                # emulated steps differ by one (WG), so the SM's MUFU is never idle on both at once.
                emu = (j + WG) % EMU == 0
            else:
                emu = False
            if CAUSAL:
                P_next, m_i, l_i, alpha = _softmax_step(S, m_i, l_i, qk_scale, offs_m, offs_n, j >= n_full, emu)
            else:
                P_next, m_i, l_i, alpha = _softmax_step(S, m_i, l_i, qk_scale, offs_m, offs_n, False, emu)
            # FA3 Alg.2 l.14: wait for P̃_cur V_{j−1}, rescale O_i; l.15: release V_{j−1}'s slot.
            O, P = warpgroup_mma_wait(0, deps=(O_tok, P))
            mbarrier.arrive(v_empty.index(sp), count=1)
            O = O * gl.expand_dims(gl.convert_layout(alpha, gl.SliceLayout(1, o_layout)), 1)
            # FA3 Alg.2 l.16: S_next becomes S_cur.
            P = gl.convert_layout(P_next.to(dtype), p_layout)
        # FA3 Alg.2 l.18-19: wait for V_{Tc−1}; O_i += P̃_last V_{Tc−1}; commit and wait.
        last = it + n_blocks - 1
        mbarrier.wait(v_ready.index(last % STAGES), (last // STAGES) & 1)
        _k3_turn(my_turn, tt + n_blocks, WG == 0)
        O_tok = warpgroup_mma(P, v_smem.index(last % STAGES), O, is_async=True)
        mbarrier.arrive(other_turn, count=1)
        O, P = warpgroup_mma_wait(0, deps=(O_tok, P))
        mbarrier.arrive(v_empty.index(last % STAGES), count=1)
        # FA3 Alg.2 l.20 = FA2 Alg.1 l.12-15: O_i / ℓ_i, L_i = m_i + log2 ℓ_i; write both (O through this
        # warpgroup's rows of the staging buffer, by TMA). Staged in Q_i's buffer, the store must be done
        # before the buffer goes back to the producer; in its own buffer (q_prefetch) it runs on under the
        # next tile, and only the next tile's store waits for it (the store_wait before o_c.store).
        O = O / gl.expand_dims(gl.convert_layout(l_i, gl.SliceLayout(1, o_layout)), 1)
        if start_m + WG * ROWS < N:  # a 192-row tile's last warpgroup may lie past N: it computed, stores nothing
            if Q_PREFETCH:
                tma.store_wait(0)
            o_c.store(O.to(dtype))
            fence_async_shared()
            tma.async_copy_shared_to_global(desc_o, [bh * N + start_m + WG * ROWS, 0], o_c)
            gl.store(L2 + bh * N + offs_m, m_i + gl.log2(l_i))
        if not Q_PREFETCH:
            tma.store_wait(0)
            mbarrier.arrive(q_empty, count=1)
        return it + n_blocks, tt + n_blocks + 1

    @gluon.jit
    def _k3ws_consumer(desc_o, L2, q_smem, o_smem, k_smem, v_smem, q_bar, q_empty, k_ready, v_ready, k_empty, v_empty,
                       turns, ring, t_full, t_empty, cfg, N, Tr, BH, first, n_tiles, step, qk_scale,
                       WG: gl.constexpr):
        # _k3ws_compute_tile for each of this program's tiles: static, first, first + step, ...; dynamic, the
        # program's id, then each tile the producer hands over (_k3ws_take), until one is past the last.
        # The flags travel as the placeholder buffer's shape (kernel3_bwd.py's cfg: a constexpr passed to
        # gl.warp_specialize arrives as a tensor, a shape does not): Tiles3.emu (extent 1: never), causal,
        # heads first, q_regs, q_prefetch, dynamic, round_sync (the producer's alone).
        EMU: gl.constexpr = cfg.shape[0]
        CAUSAL: gl.constexpr = cfg.shape[1] == 2
        HEADS_FIRST: gl.constexpr = cfg.shape[2] == 2
        Q_REGS: gl.constexpr = cfg.shape[3] == 2
        Q_PREFETCH: gl.constexpr = cfg.shape[4] == 2
        DYNAMIC: gl.constexpr = cfg.shape[5] == 2
        NUM_WG: gl.constexpr = q_smem.shape[0]
        my_turn, other_turn = _k3_ring_turns(turns, WG, NUM_WG)
        it = 0
        tt = 0
        tc = 0
        if DYNAMIC:
            tile = first
            while tile < n_tiles:
                it, tt = _k3ws_compute_tile(tile, it, tt, tc, desc_o, L2, q_smem, o_smem, k_smem, v_smem, q_bar,
                                            q_empty, k_ready, v_ready, k_empty, v_empty, my_turn, other_turn, N, Tr,
                                            BH, n_tiles, n_tiles, qk_scale, WG, EMU, CAUSAL, HEADS_FIRST, Q_REGS,
                                            Q_PREFETCH)
                tile = _k3ws_take(tc, ring, t_full, t_empty)
                tc += 1
        else:
            for tile in range(first, n_tiles, step):
                it, tt = _k3ws_compute_tile(tile, it, tt, tc, desc_o, L2, q_smem, o_smem, k_smem, v_smem, q_bar,
                                            q_empty, k_ready, v_ready, k_empty, v_empty, my_turn, other_turn, N, Tr,
                                            BH, n_tiles, step, qk_scale, WG, EMU, CAUSAL, HEADS_FIRST, Q_REGS,
                                            Q_PREFETCH)
                tc += 1
        tma.store_wait(0)  # the last O store has read its buffer before the program ends

    @gluon.jit
    def _k3ws_consumer0(desc_o, L2, q_smem, o_smem, k_smem, v_smem, q_bar, q_empty, k_ready, v_ready, k_empty,
                        v_empty, turns, ring, t_full, t_empty, cfg, N, Tr, BH, first, n_tiles, step, qk_scale):
        _k3ws_consumer(desc_o, L2, q_smem, o_smem, k_smem, v_smem, q_bar, q_empty, k_ready, v_ready, k_empty, v_empty,
                       turns, ring, t_full, t_empty, cfg, N, Tr, BH, first, n_tiles, step, qk_scale, 0)

    @gluon.jit
    def _k3ws_consumer1(desc_o, L2, q_smem, o_smem, k_smem, v_smem, q_bar, q_empty, k_ready, v_ready, k_empty,
                        v_empty, turns, ring, t_full, t_empty, cfg, N, Tr, BH, first, n_tiles, step, qk_scale):
        _k3ws_consumer(desc_o, L2, q_smem, o_smem, k_smem, v_smem, q_bar, q_empty, k_ready, v_ready, k_empty, v_empty,
                       turns, ring, t_full, t_empty, cfg, N, Tr, BH, first, n_tiles, step, qk_scale, 1)

    @gluon.jit
    def _k3ws_consumer2(desc_o, L2, q_smem, o_smem, k_smem, v_smem, q_bar, q_empty, k_ready, v_ready, k_empty,
                        v_empty, turns, ring, t_full, t_empty, cfg, N, Tr, BH, first, n_tiles, step, qk_scale):
        _k3ws_consumer(desc_o, L2, q_smem, o_smem, k_smem, v_smem, q_bar, q_empty, k_ready, v_ready, k_empty, v_empty,
                       turns, ring, t_full, t_empty, cfg, N, Tr, BH, first, n_tiles, step, qk_scale, 2)

    @gluon.jit
    def _k3ws_fwd_kernel(desc_q, desc_k, desc_v, desc_o, L2, counter, N, qk_scale, BH,
                         HEAD_D: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr,
                         CAUSAL: gl.constexpr, HEADS_FIRST: gl.constexpr, EMU: gl.constexpr,
                         PERSISTENT: gl.constexpr, Q_REGS: gl.constexpr, Q_PREFETCH: gl.constexpr,
                         DYNAMIC: gl.constexpr, ROUND_SYNC: gl.constexpr, CONSUMER_REGS: gl.constexpr,
                         num_warps: gl.constexpr):
        # FA2 Alg.1 l.1-3, as _k3_fwd_kernel; the program's default partition is consumer warpgroup 0, the
        # workers consumer warpgroups 1 (and 2, for the 192-row tile) and last the producer warp. Not
        # persistent: one program per tile (row block i of one (batch, head)), the grid (Tr, BH) or (BH, Tr).
        # Persistent (FA3's tile scheduler, static): one program per SM, taking tiles first, first + step, ...
        # in the same order, so the next tile's K/V loads start while this one's last products and O store
        # run. Dynamic: one program per SM, each claiming its next tile from `counter` (an int32 zeroed by the
        # launcher) in the grid's order. Static with ROUND_SYNC: the rounds of tiles separated by a barrier of
        # the producer warps on `counter` (_k3ws_round_barrier).
        NUM_WG: gl.constexpr = BLOCK_M // 64  # consumer warpgroups
        Tr = gl.cdiv(N, BLOCK_M)  # 192-row tiles: the last of a head may run past N (Tiles3.rows_multiple)
        n_tiles = BH * Tr
        first, step = _k3_program_tiles(n_tiles, PERSISTENT)
        dtype: gl.constexpr = desc_q.dtype
        # Q_i (and O_i's staging buffer) as NUM_WG tiles of 64 rows, one a consumer warpgroup
        q_smem = gl.allocate_shared_memory(dtype, [NUM_WG, 64, HEAD_D], desc_q.layout)
        if Q_PREFETCH:
            o_smem = gl.allocate_shared_memory(dtype, [NUM_WG, 64, HEAD_D], desc_q.layout)
        else:
            o_smem = q_smem
        k_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_D], desc_k.layout)
        v_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_D], desc_v.layout)
        q_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
        q_empty = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
        k_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        v_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        k_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        v_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        turns = gl.allocate_shared_memory(gl.int64, [NUM_WG, 1], mbarrier.MBarrierLayout())
        # the dynamic scheduler's two-slot ring of tile numbers and its mbarriers (256 bytes; unused if static)
        ring = gl.allocate_shared_memory(gl.int32, [2, 32], gl.SwizzledSharedLayout(1, 1, 1, order=[0]))
        t_full = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
        t_empty = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
        cfg = gl.allocate_shared_memory(gl.int8, [EMU + (EMU == 0), 1 + CAUSAL, 1 + HEADS_FIRST, 1 + Q_REGS,
                                                  1 + Q_PREFETCH, 1 + DYNAMIC, 1 + ROUND_SYNC],
                                        gl.SwizzledSharedLayout(1, 1, 1, order=[6, 5, 4, 3, 2, 1, 0]))
        mbarrier.init(q_bar, count=1)
        mbarrier.init(q_empty, count=NUM_WG)  # one arrival from each consumer warpgroup, after its O store
        for w in gl.static_range(NUM_WG):
            mbarrier.init(turns.index(w), count=1)
        if DYNAMIC:
            for s in gl.static_range(2):
                mbarrier.init(t_full.index(s), count=1)
                mbarrier.init(t_empty.index(s), count=NUM_WG)  # every consumer warpgroup has read the slot
        for s in gl.static_range(STAGES):
            mbarrier.init(k_ready.index(s), count=1)
            mbarrier.init(v_ready.index(s), count=1)
            mbarrier.init(k_empty.index(s), count=NUM_WG)  # one arrival from each consumer warpgroup
            mbarrier.init(v_empty.index(s), count=NUM_WG)
        cargs = (desc_o, L2, q_smem, o_smem, k_smem, v_smem, q_bar, q_empty, k_ready, v_ready, k_empty, v_empty, turns,
                 ring, t_full, t_empty, cfg, N, Tr, BH, first, n_tiles, step, qk_scale)
        pargs = (desc_q, desc_k, desc_v, q_smem, k_smem, v_smem, q_bar, q_empty, k_ready, v_ready, k_empty, v_empty,
                 ring, t_full, t_empty, counter, cfg, N, Tr, BH, first, n_tiles, step)
        if NUM_WG == 3:  # FA3's d = 64 tile: three consumer warpgroups in a ring of turns
            gl.warp_specialize([(_k3ws_consumer0, cargs), (_k3ws_consumer1, cargs), (_k3ws_consumer2, cargs),
                                (_k3ws_producer, pargs)], [4, 4, 1], [CONSUMER_REGS, CONSUMER_REGS, 24])
        else:
            gl.warp_specialize([(_k3ws_consumer0, cargs), (_k3ws_consumer1, cargs), (_k3ws_producer, pargs)],
                               [4, 1], [CONSUMER_REGS, 24])


# --------------------------------------------------------------------------------------------
# launcher, and kernel 3's forward beside kernel 2's backward
# --------------------------------------------------------------------------------------------

def _gl_dtype(torch_dtype):
    import torch
    return {torch.float16: gl.float16, torch.bfloat16: gl.bfloat16, torch.float32: gl.float32}[torch_dtype]


@functools.cache
def _box_layout(rows: int, d: int, torch_dtype):
    # The shared-memory layout of a rows x d box. Built once per box: Gluon's get_default_for takes tens of
    # microseconds of Python, and a forward at N = 4096 causal runs in half a millisecond, so per-call host work
    # of that size decided whether the GPU waited for the host (figures/gpu/NOTES.md, "Eleventh session").
    return gl.NVMMASharedLayout.get_default_for([rows, d], _gl_dtype(torch_dtype))


def descriptor(x, rows: int):
    """A TMA descriptor over the (B·H·N, d) view of ``x`` whose box is ``rows`` whole rows."""
    d = x.shape[-1]
    x2 = x.view(-1, d)
    return _TensorDescriptor(x2, list(x2.shape), list(x2.stride()), [rows, d], _box_layout(rows, d, x.dtype))


def descriptors(q, k, v, o, t: Tiles3):
    """TMA descriptors over the (B·H·N, d) views of q, k, v, o with the tiles' boxes."""
    return [descriptor(x, rows) for x, rows in ((q, t.box_rows), (k, t.block_n), (v, t.block_n), (o, t.box_rows))]


def forward(q, k, v, causal: bool, scale: float, tiles: Tiles3 | None = None, heads_first: bool | None = None):
    """Kernel 3's forward on contiguous (B, H, N, d) CUDA tensors: returns ``(o, L2)``, L2 the base-2
    log-sum-exp (B, H, N) fp32, as kernel 2's. Raises ValueError where :func:`plan` refuses the call
    (use :func:`attention`, which falls back to kernel 2 instead)."""
    import torch

    from .kernels import _num_sms

    bad = _not_a_tensor(q, k, v)
    if bad:
        raise TypeError(f"{bad[0]} must be a torch.Tensor, got {type(bad[1]).__name__}")
    why = unavailable(q.device)
    if why:
        raise RuntimeError(f"kernel 3 is unavailable: {why}")
    B, H, N, d = q.shape
    t, why = plan(d, N, k.shape[2], str(q.dtype).removeprefix("torch."), causal, tiles=tiles)
    if why:
        raise ValueError(f"kernel 3 cannot run this call: {why}")
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    o = torch.empty_like(q)
    L2 = torch.empty((B, H, N), device=q.device, dtype=torch.float32)
    dq, dk, dv, do = descriptors(q, k, v, o, t)
    if heads_first is None:
        heads_first = t.heads_first if t.heads_first is not None else d in HEADS_FIRST_CAUSAL
    heads_first = heads_first and causal
    Tr = -(-N // t.block_m)  # 192-row tiles: the last may run past N (Tiles3.rows_multiple)
    grid = (B * H, Tr) if heads_first else (Tr, B * H)
    if t.pingpong:
        if t.persistent:  # one program per SM (one fits: its registers), each looping over the tiles
            grid = (min(B * H * Tr, _num_sms(q.device)),)
        sync = bool(t.persistent and round_sync(t, N, d, q.element_size()))
        # dynamic: the tile counter; round_sync: the barrier's; zeroed each call (else L2 in its place, never read)
        counter = torch.zeros(1, device=q.device, dtype=torch.int32) if t.dynamic or sync else L2
        _k3ws_fwd_kernel[grid](dq, dk, dv, do, L2, counter, N, scale * LOG2E, B * H, HEAD_D=d, BLOCK_M=t.block_m,
                               BLOCK_N=t.block_n, STAGES=t.stages, CAUSAL=causal, HEADS_FIRST=heads_first,
                               EMU=t.emu, PERSISTENT=t.persistent, Q_REGS=t.q_regs, Q_PREFETCH=t.q_prefetch,
                               DYNAMIC=t.dynamic, ROUND_SYNC=sync, CONSUMER_REGS=PINGPONG_REGS[t.consumers],
                               num_warps=4)
    else:
        _k3_fwd_kernel[grid](dq, dk, dv, do, L2, N, scale * LOG2E, B * H, HEAD_D=d, BLOCK_M=t.block_m,
                             BLOCK_N=t.block_n, STAGES=t.stages, CAUSAL=causal, HEADS_FIRST=heads_first,
                             num_warps=t.warps)
    return o, L2


def _not_a_tensor(q, k, v) -> tuple | None:
    """``(name, value)`` of the first of q, k, v that is not a torch tensor (None: all are)."""
    import torch

    return next(((name, x) for name, x in (("q", q), ("k", k), ("v", v)) if not isinstance(x, torch.Tensor)), None)


def choose(q, k, v, causal: bool, **options):
    """The dispatcher: ``(True, tiles)`` where kernel 3 runs this call, ``(False, why)`` where kernel 2 does."""
    bad = _not_a_tensor(q, k, v)
    if bad:  # kernel 2's path (gpu.attention) then refuses it, naming the argument
        return False, f"{bad[0]} is not a torch.Tensor"
    why = unavailable(q.device) if q.device.type == "cuda" else f"q is on {q.device}, not a CUDA GPU"
    if why:
        return False, why
    options = {k_: v_ for k_, v_ in options.items() if k_ != "config"}  # the config picks kernel 2's backward
    if options.get("enable_gqa") and k.shape[1] == q.shape[1]:  # as many K/V heads as query heads: plain attention
        options.pop("enable_gqa")
    t, why = plan(q.shape[-1], q.shape[2], k.shape[2], str(q.dtype).removeprefix("torch."), causal, options)
    why = why or tensor_refusal(q, k, v)
    return (False, why) if why else (True, t)


def tensor_refusal(q, k, v) -> str | None:
    """The rules that need the tensors, not only their shape (None: kernel 3 takes them): k and v shaped as q
    (no GQA), no empty batch or head axis, B·H within one grid's y, and contiguous tensors 16-byte aligned."""
    from . import MAX_GRID_Y

    if k.shape != q.shape or v.shape != q.shape:
        return f"k's shape {tuple(k.shape)} or v's {tuple(v.shape)} differs from q's {tuple(q.shape)}"
    if q.numel() == 0:
        return "an empty batch or head axis (kernel 2 returns the empty result)"
    BH = q.shape[0] * q.shape[1]
    if BH > MAX_GRID_Y:  # its grids put B·H on y in one launch; kernel 2 launches such a grid in pieces
        return f"B·H = {BH} is more than one launch's grid y takes ({MAX_GRID_Y}; kernel 2 launches it in pieces)"
    # a TMA descriptor's base address must be 16-byte aligned; a contiguous view can start anywhere in its
    # storage (a non-contiguous one is copied to a fresh, aligned tensor before the launch)
    if any(x.is_contiguous() and x.data_ptr() % 16 for x in (q, k, v)):
        return "q, k or v starts at an address that is not 16-byte aligned (TMA needs it)"
    return None


_FN = None

# Where attention() pairs kernel 3's forward with kernel 3's own backward (kernel3_bwd.py) by default, by
# (d, causal): where it measured faster than kernel 2's on an H100 (figures/gpu/NOTES.md, "kernel 3's backward
# in Gluon"; in the last runs, forward+backward 0.97-1.27x kernel 2 on the H100 and 1.06-1.25x on the H200).
# Elsewhere kernel 2's backward runs.
BACKWARD3 = {(128, False), (128, True), (64, False), (64, True)}


def backward_plan(d: int, Nq: int, Nk: int, dtype: str, causal: bool, deterministic: bool = False,
                  options: dict | None = None, backward3: bool | None = None):
    """The backward that :func:`run` pairs with kernel 3's forward for a call of this shape, without an explicit
    ``config``: ``(TilesB, None)`` for kernel 3's (kernel3_bwd.py), ``(None, why)`` for kernel 2's. Pure Python
    (no tensors, no GPU): the one place this is decided (``gpu.which_kernel``, ``bench`` and
    ``iomodel.dram`` ask it too). ``backward3`` None: kernel 3's where :data:`BACKWARD3` lists (d, causal) and
    ``kernel3_bwd.plan`` takes the call; False: kernel 2's; True: kernel 3's wherever allowed.
    ``deterministic=True`` takes kernel 3's atomic-free mode (``TilesB.dq = 0``: the dK/dV kernel and a separate
    dQ kernel, no atomic adds) where the default tiles add dQ atomically."""
    from . import kernel3_bwd
    if not ((d, bool(causal)) in BACKWARD3 if backward3 is None else backward3):
        return None, "not in BACKWARD3" if backward3 is None else "backward3=False"
    t, why = kernel3_bwd.plan(d, Nq, Nk, dtype, causal, options)
    if why:
        return None, why
    if deterministic and t.dq != 0:
        separate = kernel3_bwd.SEPARATE_TILES[(d, bool(causal))]
        t, why = kernel3_bwd.plan(d, Nq, Nk, dtype, causal, options, tiles=separate)
        if why:
            return None, f"deterministic=True: kernel 3's atomic-free backward cannot run this call ({why})"
    return t, None


def choose_backward(q, k, v, causal: bool, deterministic: bool, **options):
    """Whether kernel 3's backward can follow its forward on these tensors: ``(True, TilesB)``, or
    ``(False, why)`` for kernel 2's. An explicit kernel 2 ``config`` keeps kernel 2's; otherwise
    :func:`backward_plan` with ``backward3=True`` decides."""
    config = options.pop("config", None)
    t, why = backward_tiles(q, k, v, causal, deterministic, config, backward3=True, options=options)
    return (False, why) if why else (True, t)


def _function():
    import torch

    from . import DOUBLE_BACKWARD, _backward, _refuse_batched

    class _Attention3(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, k, v, causal, scale, deterministic, cfg, bwd3):
            q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
            o, L2 = forward(q, k, v, causal, scale)
            ctx.save_for_backward(q, k, v, o, L2)
            ctx.args = causal, scale, deterministic, cfg, bwd3
            return o

        @staticmethod
        def backward(ctx, do):
            if torch.is_grad_enabled():  # backward(create_graph=True): the kernels have no derivative
                raise RuntimeError(DOUBLE_BACKWARD)
            _refuse_batched(do)  # is_grads_batched, jacobian(vectorize=True): as gpu's _Attention refuses them
            q, k, v, o, L2 = ctx.saved_tensors
            causal, scale, deterministic, cfg, bwd3 = ctx.args
            if bwd3 is not None:  # kernel 3's backward (kernel3_bwd.py) with these TilesB
                from .kernel3_bwd import backward as backward3
                grads = backward3(q, k, v, o, L2, do.contiguous(), causal, scale, tiles=bwd3)
            else:
                grads = _backward(q, k, v, o, L2, do, causal, scale, deterministic, cfg, None, _no_variants())
            return (*grads, None, None, None, None, None)

    return _Attention3


def _no_variants():
    from .kernels import NO_VARIANTS
    return NO_VARIANTS


def attention(q, k, v, *, causal=False, scale=None, deterministic=None, backward3=None, **options):
    """``flashref.gpu.attention`` with kernel 3's forward where :func:`choose` allows it, and with kernel 3's
    backward (kernel3_bwd.py) where ``backward3`` asks for it (None: where :data:`BACKWARD3` lists the call's
    (d, causal)) and :func:`choose_backward` allows it, else kernel 2's (it reads the same O and L2); every other
    call goes to ``gpu.attention`` with kernel 2. Without ``backward3`` and ``config`` this is what
    ``gpu.attention`` itself runs."""
    from . import _check
    from . import attention as attention2
    from .kernels import Config

    ok, _ = choose(q, k, v, causal, **options)
    if not ok or options.get("config") is not None and options["config"].version != 2:
        options["config"] = options.get("config") or Config()  # kernel 2 (no second dispatch)
        return attention2(q, k, v, causal=causal, scale=scale, deterministic=deterministic, **options)
    scale = _check(q, k, v, causal, scale)
    if deterministic is None:
        import torch
        deterministic = torch.are_deterministic_algorithms_enabled()
    return run(q, k, v, causal, scale, deterministic, options.get("config"), backward3)


def backward_tiles(q, k, v, causal: bool, deterministic: bool, config=None, backward3=None, options=None):
    """The backward that :func:`run` pairs with kernel 3's forward: ``(TilesB, None)`` for kernel 3's, or
    ``(None, why)`` for kernel 2's: an explicit kernel 2 ``config`` keeps kernel 2's, otherwise
    :func:`backward_plan` decides from the call's shape (and ``options``)."""
    if config is not None:
        return None, "a kernels.Config was given: kernel 2's backward with it"
    return backward_plan(q.shape[-1], q.shape[2], k.shape[2], str(q.dtype).removeprefix("torch."), causal,
                         deterministic, options, backward3)


def run(q, k, v, causal: bool, scale: float, deterministic: bool, config=None, backward3=None):
    """Kernel 3's forward, with autograd, on a call that :func:`choose` took and that was checked
    (``gpu._check``): the backward is kernel 3's (``backward3`` None: where :data:`BACKWARD3` lists (d, causal)
    and :func:`choose_backward` allows it) or kernel 2's with ``config`` resolved."""
    global _FN
    from .kernels import Config
    cfg = (config or Config()).resolve(q.shape[-1], causal, deterministic)
    bwd3, _ = backward_tiles(q, k, v, causal, deterministic, config, backward3)  # None: kernel 2's backward
    if _FN is None:
        _FN = _function()
    return _FN.apply(q, k, v, causal, scale, deterministic, cfg, bwd3)


# --------------------------------------------------------------------------------------------
# ``python -m flashref.gpu.kernel3``: kernel 3's tiles against kernel 2 and cuDNN, one process
# --------------------------------------------------------------------------------------------

def _parse_tiles(text: str) -> Tiles3:
    """``BM,BN,warps,stages`` then optional flags: ``pp`` (pingpong: producer warp + BM/64 consumer warpgroups),
    ``hf`` / ``nohf`` (causal grid heads first or not), ``emuK`` (Tiles3.emu = K), ``persist`` (persistent),
    ``qregs`` (Tiles3.q_regs), ``qpre`` (Tiles3.q_prefetch), ``dyn`` (Tiles3.dynamic), ``sync`` / ``nosync``
    (Tiles3.round_sync True or False; neither: the launcher decides by the shape)."""
    parts = text.split(",")
    flags = set(parts[4:])
    known = {"pp", "hf", "nohf", "persist", "qregs", "qpre", "dyn", "sync", "nosync"}
    unknown = sorted(f for f in flags - known if not (f.startswith("emu") and f[3:].isdigit()))
    if unknown:
        raise ValueError(f"tiles {text!r}: unknown flag(s) {unknown} (pp, hf, nohf, emuK, persist, qregs, qpre, dyn, "
                         f"sync, nosync)")
    hf = True if "hf" in flags else False if "nohf" in flags else None
    emu = [int(f[3:]) for f in flags if f.startswith("emu")]
    return Tiles3(*(int(x) for x in parts[:4]), pingpong="pp" in flags, heads_first=hf, emu=emu[0] if emu else 0,
                  persistent="persist" in flags, q_regs="qregs" in flags, q_prefetch="qpre" in flags,
                  dynamic="dyn" in flags, round_sync=True if "sync" in flags else False if "nosync" in flags
                  else None)


def _sweep_fns(q, k, v, causal, configs, dtype_name):
    """The timed callables of one shape: SDPA cuDNN, kernel 2, and kernel 3 with each config that plan takes
    and that runs (checked against kernel 2's output first; a config that fails is reported, not timed)."""
    import torch
    import torch.nn.functional as F  # noqa: N812
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from . import attention as attention2
    from .config import Config

    B, H, N, d = q.shape

    def cudnn():
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

    def kernel2():
        return attention2(q, k, v, causal=causal, config=Config())

    def kernel3(t):
        return lambda: forward(q, k, v, causal, d ** -0.5, tiles=t)[0]

    fns = {"cudnn": cudnn, "kernel2": kernel2}
    with torch.no_grad():
        ref = kernel2()
    for name, t in configs:
        why = plan(d, N, N, dtype_name, causal, tiles=t)[1]
        if why:
            print(f"  d={d} N={N} tiles {name}: {why}")
            continue
        try:
            with torch.no_grad():
                err = float((kernel3(t)().float() - ref.float()).abs().max())
        except Exception as e:  # out of shared memory or registers: reported, not timed
            print(f"  d={d} N={N} tiles {name}: {type(e).__name__}: {str(e)[:160]}")
            continue
        if err > 2e-2:
            print(f"  MISMATCH d={d} N={N} causal={causal} tiles {name}: max |k3 - k2| = {err:.3g}")
        fns[f"k3[{name}]"] = kernel3(t)
    return fns


def _sweep(argv=None) -> int:
    """Time kernel 3 with each ``--tiles`` (``BM,BN,warps,stages``), kernel 2's forward (its defaults) and
    SDPA cuDNN in turn per shape, ``--rounds`` times over (interleaved rounds); each keeps its median. Shapes as
    ``bench``: 16384 tokens, hidden 2048. Before timing, each kernel 3 config's output is compared with
    kernel 2's on the first shape. Prints a table of TFLOP/s and ratios; ``--out`` writes the rows (JSON)."""
    import argparse
    import statistics
    import time

    import torch
    import triton
    from triton.testing import do_bench

    from .bench import HIDDEN, TOKENS, flops, save_rows

    p = argparse.ArgumentParser(prog="python -m flashref.gpu.kernel3")
    p.add_argument("--d", default="128,64")
    p.add_argument("--N", default="4096,8192,16384")
    p.add_argument("--causal", default="both", choices=("both", "true", "false"))
    p.add_argument("--dtype", default="float16", choices=DTYPES)
    p.add_argument("--tiles", nargs="+", default=["default"])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--rep", type=int, default=40)
    p.add_argument("--out", default=None)
    a = p.parse_args(argv)
    if cannot_run_here():
        return 1
    dtype = getattr(torch, a.dtype)
    causals = {"both": (False, True), "true": (True,), "false": (False,)}[a.causal]
    rows, t0 = [], time.time()
    for d in (int(x) for x in a.d.split(",")):
        for causal in causals:
            configs = [(name, TILES[(d, causal)] if name == "default" else _parse_tiles(name)) for name in a.tiles]
            for N in (int(x) for x in a.N.split(",")):
                B, H = TOKENS // N, HIDDEN // d
                g = torch.Generator(device="cuda").manual_seed(N + d)
                q, k, v = (torch.randn(B, H, N, d, device="cuda", dtype=dtype, generator=g) for _ in range(3))
                fns = _sweep_fns(q, k, v, causal, configs, a.dtype)
                times = {n: [] for n in fns}
                for _ in range(a.rounds):
                    for n, f in fns.items():
                        with torch.no_grad():
                            times[n].append(do_bench(f, warmup=25, rep=a.rep, return_mode="median"))
                fl = flops("fwd", B, H, N, d, causal)
                tf = {n: fl / (statistics.median(ms) * 1e-3) / 1e12 for n, ms in times.items()}
                for n, ms in times.items():
                    rows.append(dict(d=d, N=N, causal=causal, dtype=a.dtype, backend=n, B=B, H=H,
                                     ms=round(statistics.median(ms), 5), tflops=round(tf[n], 1),
                                     rounds_ms=[round(x, 5) for x in ms],
                                     x_cudnn=round(tf[n] / tf["cudnn"], 3), x_kernel2=round(tf[n] / tf["kernel2"], 3)))
                print(f"d={d:3} causal={causal!s:5} N={N:5}  " + "  ".join(
                    f"{n}={tf[n]:.0f} ({tf[n] / tf['cudnn']:.2f}x cu, {tf[n] / tf['kernel2']:.2f}x k2)" for n in tf),
                    flush=True)
                del q, k, v
                torch.cuda.empty_cache()
    meta = dict(device=torch.cuda.get_device_name(0), torch=torch.__version__, triton=triton.__version__,
                cuda=torch.version.cuda, dtype=a.dtype, tokens=TOKENS, hidden=HIDDEN, rounds=a.rounds, rep_ms=a.rep,
                timing=f"median of {a.rounds} interleaved rounds (backends of a shape in turn), each a "
                f"triton.testing.do_bench median, warmup 25 ms, rep {a.rep} ms",
                flop_convention="fwd 4BHN^2d (/2 causal)", seconds=round(time.time() - t0, 1))
    save_rows(a.out, meta, rows)
    return 0


if __name__ == "__main__":
    import sys
    sys.exit(_sweep(sys.argv[1:]))
