"""Kernel 3's backward: dK, dV (and dQ by atomic adds) in Gluon, in FlashAttention-3's structure (Hopper only).

Kernel 2's backward (kernels.py: ``_bwd_dkdv_inner``) is FlashAttention-2's Algorithm 2 in Triton: per
row block i it issues five matrix products and Triton 3.6 waits for each ``wgmma`` before the next
instruction (figures/gpu/NOTES.md), so the exponentials and the dS arithmetic never run under a GEMM.
This kernel is the same Algorithm 2, one program per column block j (FA2 Alg.2 l.5), written as
FlashAttention-3 (Shah et al. 2024, §3 and its backward in Appendix B) arranges it on Hopper:

* ``gl.warp_specialize``: one producer warp loads K_j, V_j once and then streams Q_i and dO_i by TMA into
  ``STAGES`` shared-memory slots (one mbarrier "full" and one "empty" per slot, the latter counting the two
  consumer warpgroups' releases);
* two consumer warpgroups split the column block: warpgroup w owns keys ``[64w, 64w + 64)`` of it and keeps
  their dK_j, dV_j (64 × d fp32 each) in registers. Per row block each issues S_ijᵀ = K_j Q_iᵀ and
  dP_ijᵀ = V_j dO_iᵀ asynchronously, computes P_ijᵀ while dP_ijᵀ is still on the tensor cores, issues
  dV_j += P_ijᵀ dO_i and computes dS_ijᵀ while that one runs;
* dQ_i += dS_ij K_j sums over all 128 keys of the column block, split between the warpgroups: both
  write their 64 rows of dS_ijᵀ to one shared buffer (two slots, mbarriers "dS full"/"dS empty" of count 2),
  and warpgroup w computes columns ``[w·d/2, (w+1)·d/2)`` of dQ_i from the whole buffer, then adds them to
  the fp32 dQ in HBM with atomic adds (FA2's scheme, as kernel 2's atomic path: the same number of atomics,
  BLOCK_M × d per (i, j) pair). dK_j += dS_ijᵀ Q_i reads the warpgroup's own rows of the same buffer.
  By default (``TilesB.dq = 2``) each warpgroup computes dQ for row block i−1 in step i, after its dK product:
  the other warpgroup's rows of that dS are long written, so neither waits for the other in the step that
  wrote them and the two drift apart, one's exponentials under the other's GEMMs (+1–15% on an H100 over the
  same-step hand-over, ``dq = 1``). ``TilesB.vec4`` makes the adds 16 bytes wide.

Measured on an H100 (figures/gpu/NOTES.md, "kernel 3's backward in Gluon"): with kernel 3's forward,
forward+backward at 1.00–1.18× kernel 2's and 0.78–0.94× cuDNN's; without any dQ the same kernel ran at
1.1–1.5× cuDNN's backward, so the dQ path (hand-over and atomics) is where the rest of the gap is.

**Without atomics** (``TilesB.dq = 0``, FlashAttention-2's other option, §3.2): the same dK/dV kernel without
l.15 (four products a step, nothing handed over), then :func:`_k3q_kernel`, one program per 128 query rows that
owns dQ_i in registers and streams K_j, V_j by TMA in the forward's pingpong structure (producer warp, two consumer
warpgroups of 64 rows): per j, S_ij, dP_ij and dQ_i += dS_i(j−1) K_(j−1) issued together, P_ij and dS_ij computed
under them, dQ_i·τ written once in the input dtype (no fp32 buffer, no zeroing, no dq_scale pass). Seven products
instead of five, no atomics, and bit-reproducible gradients. On an H100 it is the default (at d = 128 fwd+bwd
0.91-0.98x cuDNN in the call that chose it, 1.07-1.19x the atomic backward; at d = 64 a tie with the atomic one,
and with ``TilesB.pipe`` 1.02x it on average). ``TilesB.pipe`` (the d = 64 default) pipelines the dK/dV kernel as
the dQ kernel is: step i issues S, dP of row block i with dV, dK of row block i−1, and the two warpgroups take
turns at issuing.

**FlashAttention-3's dQ** (``TilesB.pipe`` with ``dq = 4``, d = 64): the pipelined dK/dV kernel adds dQ itself,
as FA3 does, without an atomic instruction per element. Each warpgroup keeps dS_ijᵀ of its 64 keys in shared
memory, computes dQ_i = dS_ij K_j over those keys with the step's other products, stages it (fp32) in shared memory
and adds it into the fp32 dQ in HBM with one TMA reduce-add (``cp.reduce.async.bulk.tensor ... .add``, the adds
done in L2; Gluon 3.6 has no wrapper for it, so :func:`_tma_reduce_add` calls its builder). Five products a step
pair instead of the separate backward's seven, no second pass over K and V. Measured on an H100 it ties with the
default (0.97-1.04x; figures/gpu/NOTES.md): not the default.

``TilesB.wide`` (d = 64) is FlashAttention-3's layout for the dK/dV kernel: 128-row steps, each warpgroup computing
S and dP for 64 rows against all 128 keys, P and dS handed to both warpgroups through shared memory for the dV and
dK products (:func:`_k3b_consumer_wide`). Measured 0.93-0.99x the default on an H100: the hand-over every step
keeps the two warpgroups in lockstep. An option, not the default.

``TilesB.kv_regs`` (K_j, V_j) and ``TilesQ.qdo_regs`` (Q_i, dO_i) load the S and dP products' A operand into
registers once instead of reading it from shared memory at every step: tried to relieve shared-memory
bandwidth, measured no faster (figures/gpu/NOTES.md), kept as options.

kernel 2's pre-pass (D = rowsum(dO ∘ O), and dQ = 0 for the atomic path) and, for the atomic path, its
dq_scale kernel run unchanged around it (:func:`backward`). It takes what kernel 3's forward takes but d = 256 (d in
``BWD_HEAD_DIMS`` = {64, 128}, fp16/bf16, Nq = Nk a multiple of the tiles, no options; :func:`plan`);
:func:`kernel3.attention <flashref.gpu.kernel3.attention>` uses it where ``plan`` allows and kernel 2's
backward everywhere else.

Like kernel3.py this module imports without Gluon (CI: Triton 3.9, interpreter): the kernel is then left
undefined and :func:`flashref.gpu.kernel3.unavailable` says why.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from .kernel3 import _MODS, DTYPES, LOG2E, SMEM_LIMIT, kv_past_round_sync, positive_fields, refusal

BWD_REGS = 240  # registers a consumer thread gets (setmaxnreg); the producer warp 24


@dataclass(frozen=True)
class TilesQ:
    """The separate dQ kernel's launch shape (``TilesB.dq = 0``): one program per 128 query rows (two consumer
    warpgroups of 64), BLOCK_N keys per step, STAGES shared-memory slots each of K_j and V_j; ``pingpong``:
    the two warpgroups take turns at issuing their GEMMs, as kernel 3's forward."""

    block_n: int = 128
    stages: int = 2
    pingpong: bool = True
    # Q_i and dO_i as the S and dP products' A operand in registers (loaded once), not read from shared memory
    # by every step's products: each step's wgmmas then read only K_j, V_j (and dS from registers)
    qdo_regs: bool = False
    # persistent (one program per SM looping over the row blocks, on the main stream) with a barrier between rounds
    # of row blocks, as kernel 3's forward (kernel3.round_sync): None where one head's K and V reach
    # kernel3.ROUND_SYNC_KV_BYTES and the call is not causal; True or False: always or never (not causal)
    round_sync: bool | None = None

    def __post_init__(self):
        positive_fields(self, ("block_n", "stages"))

    def smem_bytes(self, d: int, elem: int = 2) -> int:
        """Q_i and dO_i (128 rows each), STAGES slots of K_j and V_j, the mbarriers."""
        return elem * d * (2 * 128 + 2 * self.stages * self.block_n) + 8 * (3 + 4 * self.stages)


@dataclass(frozen=True)
class TilesB:
    """The backward's launch shape: BLOCK_N keys per program (64 per consumer warpgroup), BLOCK_M query rows
    per step of the row loop, STAGES shared-memory slots of (Q_i, dO_i)."""

    block_m: int = 64
    block_n: int = 128
    stages: int = 2
    dq: int = 1  # 1 dQ_i split by columns between the warpgroups, this step; 2 the same a step later; 4 per warpgroup
    #              (with pipe: per warpgroup, added by one TMA reduce-add a step, FA3's dQ);
    #              0 no dQ here: the separate dQ kernel (FA2 §3.2's other option, no atomics) computes it
    vec4: bool = False  # dQ's atomic adds 16 bytes wide (a layout conversion through shared memory first)
    dq_tiles: TilesQ = TilesQ()  # dq = 0: the dQ kernel's tiles
    pipe: bool = False  # dq = 0 or 4: dV, dK (and dQ) of row block i−1 issued with S, dP of row block i, in turns
    persistent: bool = False  # pipe only: one dK/dV program per SM, looping over the column blocks
    kv_regs: bool = False  # pipe only: K_j, V_j (this warpgroup's keys) as the S, dP products' A operand in registers
    side_stream: bool = False  # dq = 0 only: the dQ kernel on a second CUDA stream, beside the dK/dV kernel (backward)
    # dq = 0, d = 64: FlashAttention-3's layout, 128-row steps, S and dP of 64 rows x 128 keys a warpgroup, P and dS
    # through shared memory for the dV, dK products (_k3b_consumer_wide)
    wide: bool = False

    def __post_init__(self):
        positive_fields(self, ("block_m", "block_n", "stages"))

    @property
    def tma_dq(self) -> bool:
        """The pipelined dK/dV kernel adds dQ itself by TMA reduce-adds (pipe with dq = 4; plan refuses other dq
        with pipe): it then needs the fp32 dQ's descriptor and stages dS and dQ in shared memory."""
        return self.pipe and self.dq == 4

    def smem_bytes(self, d: int, elem: int = 2) -> int:
        """K_j, V_j; STAGES slots of Q_i and dO_i; two slots of dS_ijᵀ (not with pipe; with pipe and dq = 4 one per
        warpgroup, and each warpgroup's fp32 dQ_i staged for its TMA reduce-add); the mbarriers (K/V full and
        empty, Q/dO full and empty per slot, dS full and empty or the two turns); vec4: the fp32 dQ of both
        warpgroups, the layout conversion's scratch."""
        # (wide: P_ij and dS_ij of the step, BLOCK_M x BLOCK_N each, the same bytes as the two dS slots; its two
        # hand-over mbarriers are counted as the four dS ones, 16 bytes over)
        ds = (self.block_n * self.block_m if self.tma_dq else 0) if self.pipe else 2 * self.block_n * self.block_m
        staged = 2 * self.block_m * d * 4 if self.tma_dq else 0
        return elem * (2 * self.block_n * d + 2 * self.stages * self.block_m * d + ds) + staged \
            + 8 * (2 + 2 * self.stages + (2 if self.pipe else 4)) + (4 * self.block_m * d if self.vec4 else 0)


# The atomic dQ's best tiles by (head dimension, causal), from four interleaved H100 runs (figures/gpu/NOTES.md,
# "kernel 3's backward in Gluon"; the defaults until the atomic-free backward below): dQ a step late (dq=2), two
# Q/dO stages; 16-byte atomic adds (vec4) except at d = 128 non-causal, where they measured 0-5% slower.
ATOMIC_TILES = {(128, False): TilesB(64, 128, 2, dq=2), (128, True): TilesB(64, 128, 2, dq=2, vec4=True),
                (64, False): TilesB(64, 128, 2, dq=2, vec4=True), (64, True): TilesB(64, 128, 2, dq=2, vec4=True)}
# The atomic-free backward (dq = 0): the dK/dV kernel without dQ, then the dQ kernel (_k3q_kernel). Deterministic:
# kernel3.choose_backward takes it for deterministic=True. From H100 calls 1 and 2 (figures/gpu/NOTES.md, "kernel
# 3's backward without atomics"): the dQ kernel with 64 keys a step at d = 128 (S, dP, dQ and dS of 64 rows fit
# the 240 registers without spilling; 128 keys: 0.80-0.85x as fast) and four K/V stages (+1-4% over three, call 2),
# 128 keys and three stages at d = 64 (K_j's slot is released a step late, after dQ's product); at d = 128 three
# Q/dO stages in the dK/dV kernel (+0-10% over two, call 1). At d = 64 the pipelined dK/dV kernel (pipe) with four
# Q/dO stages: +1-4% over the unpipelined one with two on all six rows of one call ("the pipelined dK/dV kernel",
# h100-kernel3-pipe-call1.json). At d = 128 pipe spills (S, dP, P, dS and dK, dV of 128 columns: 152-280 bytes)
# and ran at 0.65-0.70x cuDNN.
SEPARATE_TILES = {(128, False): TilesB(64, 128, 3, dq=0, dq_tiles=TilesQ(64, 4)),
                  (128, True): TilesB(64, 128, 3, dq=0, dq_tiles=TilesQ(64, 4)),
                  (64, False): TilesB(64, 128, 4, dq=0, dq_tiles=TilesQ(128, 3), pipe=True),
                  (64, True): TilesB(64, 128, 4, dq=0, dq_tiles=TilesQ(128, 3), pipe=True)}
# The default per (d, causal): the atomic-free backward everywhere, so the default gradients are bit-reproducible.
# At d = 128 it was 1.07-1.19x the atomic one (calls 1 and 2). At d = 64 the unpipelined one tied with the atomic
# one (within 3-4% either way in both calls: a tie, the same atomic backward timed twice moved up to 3%); the
# pipelined one was 0.99-1.08x the atomic one, mean 1.02x, in the call that measured it. At d = 128 the dQ kernel
# runs on a second stream beside the dK/dV kernel (side_stream): over one stream, backward 1.00-1.05x (mean 1.02x)
# and forward+backward 1.00-1.04x on the twelve d = 128 rows of one H100 call; at d = 64 0.99-1.02x, not taken.
BWD_HEAD_DIMS = (64, 128)  # kernel 3's forward also takes d = 256; its backward there is kernel 2's
BWD_TILES = dict(SEPARATE_TILES)
BWD_TILES.update({(128, c): replace(SEPARATE_TILES[(128, c)], side_stream=True) for c in (False, True)})


def plan(d: int, Nq: int, Nk: int, dtype: str, causal: bool, options: dict | None = None,
         tiles: TilesB | None = None):
    """``(TilesB, None)`` where this backward runs the call, else ``(None, why)`` (kernel 2's backward runs).
    Pure Python. The rules: fp16/bf16; d in {64, 128}; Nq = Nk, a multiple of BLOCK_N and BLOCK_M; no
    options (dropout, GQA, window, ALiBi, softcap); two consumer warpgroups of 64 keys (BLOCK_N = 128) and
    64 query rows a step (128 allowed at d = 64, where the registers hold S and dP of 128 columns); the tiles fit
    in shared memory."""
    t = tiles or BWD_TILES.get((d, bool(causal)), TilesB())
    why = refusal("kernel 3's backward", d, Nq, Nk, dtype, options, t, head_dims=BWD_HEAD_DIMS)
    if why:
        return None, why
    if t.block_n != 128 or t.block_m not in (64, 128) or (t.block_m == 128 and d != 64):
        return None, ("BLOCK_N=128 (two consumer warpgroups of 64 keys) and BLOCK_M=64 query rows a step "
                      "(128 at d=64 only: the registers)")
    if t.dq not in (0, 1, 2, 4):
        return None, (f"dq={t.dq}: 0 (a separate dQ kernel), 1 (split by columns), 2 (the same, a step later) "
                      "or 4 (per warpgroup)")
    if t.pipe and t.dq not in (0, 4):
        return None, (f"pipe=True needs dq=0 (the dK/dV kernel without dQ) or dq=4 (each warpgroup's dQ by a TMA "
                      f"reduce-add), not dq={t.dq}")
    if t.tma_dq and (t.block_m != 64 or t.vec4 or d != 64):
        return None, ("pipe=True with dq=4: d=64, BLOCK_M=64 (dQ_i of 64 rows a warpgroup in registers), no vec4 "
                      "(at d=128 the dQ tile beside dK, dV spills 552 bytes a thread; not tested there)")
    if t.persistent and not t.pipe:
        return None, "persistent=True needs pipe=True (the tile loop is the pipelined consumers')"
    if t.wide and (t.dq or t.pipe or t.persistent or t.kv_regs or (t.block_m, t.block_n) != (128, 128) or d != 64):
        return None, ("wide=True: d=64, 128 x 128 tiles, dq=0, not pipe/persistent/kv_regs (S, dP of 64 x 128 and "
                      "dK, dV a warpgroup fill its registers)")
    if t.side_stream and t.dq != 0:
        return None, "side_stream=True needs dq=0 (a separate dQ kernel to run beside the dK/dV kernel)"
    if t.kv_regs and not t.pipe:
        return None, "kv_regs=True needs pipe=True (the pipelined consumers load K_j, V_j into registers)"
    if t.smem_bytes(d) > SMEM_LIMIT:
        return None, f"tiles {t} need {t.smem_bytes(d)} B of shared memory at d={d} (> {SMEM_LIMIT})"
    if t.dq == 0:
        tq = t.dq_tiles
        if tq.block_n not in (64, 128) or Nq % 128 or Nq % tq.block_n:
            return None, (f"dQ kernel: 128 query rows a program and BLOCK_N in (64, 128) keys a step, N={Nq} a "
                          f"multiple of both (BLOCK_N={tq.block_n})")
        if tq.stages < 2:
            return None, "dQ kernel: at least 2 K/V stages (K_j's slot is released a step late)"
        if tq.smem_bytes(d) > SMEM_LIMIT:
            return None, f"dQ kernel tiles {tq} need {tq.smem_bytes(d)} B of shared memory at d={d} (> {SMEM_LIMIT})"
        if tq.round_sync and causal:
            return None, ("dQ kernel: round_sync=True only without a mask (its persistent rounds take causal row "
                          "blocks of unequal length)")
    return t, None


def dq_round_sync(tq: TilesQ, N: int, d: int, causal: bool, elem: int = 2) -> bool:
    """Whether the dQ kernel runs persistent, with a barrier between rounds of row blocks (``TilesQ.round_sync``;
    None: not causal, and one head's K and V, 2·N·d·elem bytes, at least ``kernel3.ROUND_SYNC_KV_BYTES``). Past the
    knee the one-row-block-a-program launch read 1.3-9x the lockstep bytes on an H100, differently from run to run
    (figures/gpu/NOTES-l2.md, "Fifteenth round"): the GPU starts each program as another ends, so the programs scan
    K and V from different places. Causal grids run longest rows first, and were measured within the model."""
    if causal:
        return False
    return tq.round_sync if tq.round_sync is not None else kv_past_round_sync(N, d, elem)


# --------------------------------------------------------------------------------------------
# the kernel
# --------------------------------------------------------------------------------------------

if _MODS is not None:  # the Gluon names kernel3.py binds from the same modules
    from triton._C.libtriton import ir as _ir
    from triton.experimental.gluon.language._core import builtin as _builtin

    from .kernel3 import (
        _k3_kv_blocks,
        _k3_load_kv,
        _k3_operand_a,
        _k3_program_tiles,
        _k3_ring_turns,
        _k3_turn,
        _k3ws_round_barrier,
        fence_async_shared,
        gl,
        gluon,
        mbarrier,
        tma,
        warpgroup_mma,
        warpgroup_mma_wait,
    )

    @_builtin
    def _tma_reduce_add(tensor_desc, coord, src, _semantic=None):
        # TMA's bulk reduce-add (cp.reduce.async.bulk.tensor ... .add): the copy engine adds a shared-memory tile
        # into global memory, element by element, the adds done in L2. Gluon 3.6's hopper.tma wraps the plain
        # store (async_copy_shared_to_global) but not this sibling op, so this calls its builder as that wrapper
        # does; tma.store_wait waits for it like for a store.
        coord = _semantic._convert_to_ir_values(coord, require_i64=False)
        _semantic.builder.create_async_tma_reduce(_ir.DESCRIPTOR_REDUCE_KIND.ADD, tensor_desc.handle, coord,
                                                  src.handle)

    @gluon.jit
    def _k3b_row_block(t, i0, Tr, CAUSAL: gl.constexpr):
        # The t-th row block a program visits. Causal: from the diagonal's first (i0) down to the last.
        # Not causal: from i0 with wrap-around (kernel 2's STAGGER: the column blocks of one head start at
        # different row blocks, so their atomic adds into dQ_i do not all land at once).
        if CAUSAL:
            i = i0 + t
        else:
            i = (i0 + t) % Tr
        return i

    @gluon.jit
    def _k3b_tile(tile, N, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, CAUSAL: gl.constexpr):
        # FA2 Alg.2 l.5: the tile-th program's work is column block j of (batch, head) bh, in the order the GPU
        # launches a grid of (N / BLOCK_N, BH) programs (causal: j = 0 first, the longest row loop). Returns bh,
        # the block's first key, the first row block i0 it visits (causal: the diagonal's; else the stagger
        # start), how many row blocks it visits, and how many of those the diagonal crosses (masked).
        Tc = N // BLOCK_N
        j = tile % Tc
        bh = tile // Tc
        start_n = j * BLOCK_N
        i0 = start_n // BLOCK_M
        if CAUSAL:
            n_steps = N // BLOCK_M - i0
            n_mask = BLOCK_N // BLOCK_M  # Nq = Nk and BLOCK_N a multiple of BLOCK_M
        else:
            n_steps = N // BLOCK_M
            n_mask = 0
        return bh, start_n, i0, n_steps, n_mask

    @gluon.jit
    def _k3b_producer(desc_q, desc_do, desc_k, desc_v, q_smem, do_smem, k_smem, v_smem, kv_bar, kv_empty, qd_ready,
                      qd_empty, cfg, N, first, n_tiles, step):
        # FA3 Alg.1's producer (one warp), for each of this program's tiles: K_j, V_j once (FA2 Alg.2 l.6), once
        # the consumers have released the previous tile's; then for each row block the pair Q_i, dO_i (FA2
        # Alg.2 l.9) into slot it % STAGES (it counts the pairs of every tile so far) once both consumers have
        # released it. (A worker's constexprs come from buffer shapes, here the ``cfg`` placeholder's.)
        STAGES: gl.constexpr = q_smem.shape[0]
        BLOCK_M: gl.constexpr = q_smem.shape[1]
        BLOCK_N: gl.constexpr = k_smem.shape[0]
        CAUSAL: gl.constexpr = cfg.shape[0] == 2
        Tr = N // BLOCK_M
        nbytes: gl.constexpr = 2 * desc_q.block_type.nbytes
        it = 0
        tc = 0
        for tile in range(first, n_tiles, step):
            bh, start_n, i0, n_steps, n_mask = _k3b_tile(tile, N, BLOCK_M, BLOCK_N, CAUSAL)
            mbarrier.wait(kv_empty, (tc - 1) & 1, pred=tc > 0)
            mbarrier.expect(kv_bar, 2 * desc_k.block_type.nbytes)
            tma.async_copy_global_to_shared(desc_k, [bh * N + start_n, 0], kv_bar, k_smem)
            tma.async_copy_global_to_shared(desc_v, [bh * N + start_n, 0], kv_bar, v_smem)
            for t in range(n_steps):
                s = it % STAGES
                mbarrier.wait(qd_empty.index(s), ((it // STAGES) & 1) ^ 1, pred=it >= STAGES)
                row = bh * N + _k3b_row_block(t, i0, Tr, CAUSAL) * BLOCK_M
                mbarrier.expect(qd_ready.index(s), nbytes)
                tma.async_copy_global_to_shared(desc_q, [row, 0], qd_ready.index(s), q_smem.index(s))
                tma.async_copy_global_to_shared(desc_do, [row, 0], qd_ready.index(s), do_smem.index(s))
                it += 1
            tc += 1

    @gluon.jit
    def _k3b_dq_add(dQ_bh, dQ, i, col0, BLOCK_M: gl.constexpr, COLS: gl.constexpr, HEAD_D: gl.constexpr,
                    VEC4: gl.constexpr):
        # FA2 Alg.2 l.15 (flash2.py): the read-modify-write of dQ_i in HBM: fp32 atomic adds into columns
        # [col0, col0 + COLS) of row block i (τ at the end, in kernel 2's dq_scale kernel).
        dq_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                            instr_shape=[16, COLS, 16])
        if VEC4:  # through shared memory into 4 consecutive columns a thread: 16-byte atomic adds
            add_layout: gl.constexpr = gl.BlockedLayout(size_per_thread=[1, 4],
                                                        threads_per_warp=[128 // COLS, COLS // 4],
                                                        warps_per_cta=[4, 1], order=[1, 0])
            dQ = gl.convert_layout(dQ, add_layout)
        else:
            add_layout: gl.constexpr = dq_layout
        offs_qm = i * BLOCK_M + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, add_layout))
        offs_qd = col0 + gl.arange(0, COLS, layout=gl.SliceLayout(0, add_layout))
        gl.atomic_add(dQ_bh + gl.expand_dims(offs_qm, 1) * HEAD_D + gl.expand_dims(offs_qd, 0), dQ, sem="relaxed")

    @gluon.jit
    def _k3b_store_dkdv(dK, dV, dK_out, dV_out, head, row0, sm_scale):
        # FA2 Alg.2 l.17-18: dK_j (times τ) and dV_j of a warpgroup's 64 keys, rows [row0, row0 + 64) of one
        # (batch, head)'s (N, d) block of the outputs (its first element at ``head``), to HBM in the outputs' dtype,
        # once.
        KEYS: gl.constexpr = dK.shape[0]
        HEAD_D: gl.constexpr = dK.shape[1]
        offs_r = row0 + gl.arange(0, KEYS, layout=gl.SliceLayout(1, dK.type.layout))
        offs_d = gl.arange(0, HEAD_D, layout=gl.SliceLayout(0, dK.type.layout))
        off = head + gl.expand_dims(offs_r, 1) * HEAD_D + gl.expand_dims(offs_d, 0)
        gl.store(dK_out + off, (dK * sm_scale).to(dK_out.dtype.element_ty))
        gl.store(dV_out + off, dV.to(dV_out.dtype.element_ty))

    @gluon.jit
    def _k3b_step(t, i0, Tr, dK, dV, q_smem, do_smem, k_w, v_w, k_cols, ds_smem, qd_ready, qd_empty,
                  ds_full, ds_empty, L2_bh, D_bh, dQ_bh, offs_n, qk_scale, N, n_steps,
                  WG: gl.constexpr, MASK: gl.constexpr, CAUSAL: gl.constexpr, DQ: gl.constexpr,
                  HAS_PREV: gl.constexpr, VEC4: gl.constexpr):
        # FA2 Alg.2 l.8-16 for row block i = the t-th, on this warpgroup's 64 keys of column block j.
        # DQ, how dQ_i += dS_ij K_j is shared between the warpgroups (see the module docstring):
        #   1: both warpgroups' dS_ijᵀ in shared memory, each computes d/2 columns of dQ_i, this step;
        #   2: the same one step later (dQ_{i−1} here, after this step's dK): no warpgroup waits for the
        #      other's dS in the step that wrote it, so the two drift apart and overlap (HAS_PREV: t > 0);
        #   4: each warpgroup all d columns from its own 64 keys (no hand-over; twice the atomic adds).
        STAGES: gl.constexpr = q_smem.shape[0]
        BLOCK_M: gl.constexpr = q_smem.shape[1]
        HEAD_D: gl.constexpr = q_smem.shape[2]
        KEYS: gl.constexpr = 64
        DQ_COLS: gl.constexpr = HEAD_D // 2
        dtype: gl.constexpr = q_smem.dtype
        st_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                            instr_shape=[16, BLOCK_M, 16])
        acc_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                             instr_shape=[16, HEAD_D, 16])
        dq_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                            instr_shape=[16, DQ_COLS, 16])
        p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=acc_layout, k_width=2)
        col_layout: gl.constexpr = gl.SliceLayout(0, st_layout)
        s = t % STAGES
        b = t % 2
        i = _k3b_row_block(t, i0, Tr, CAUSAL)
        # FA2 Alg.2 l.9: L_i, D_i into registers (issued before the waits below, which hide their latency; at
        # BLOCK_M = 128, D_i later: its 32 registers a thread do not fit beside S, dP, dK and dV from the start).
        offs_m = i * BLOCK_M + gl.arange(0, BLOCK_M, layout=col_layout)
        L_i = gl.load(L2_bh + offs_m)
        if BLOCK_M == 64:
            D_i = gl.load(D_bh + offs_m)
        # FA2 Alg.2 l.9: wait for Q_i and dO_i in shared memory.
        mbarrier.wait(qd_ready.index(s), (t // STAGES) & 1)
        q_i = q_smem.index(s)
        do_i = do_smem.index(s)
        # FA2 Alg.2 l.10: S_ijᵀ = K_j Q_iᵀ (this warpgroup's 64 keys × BLOCK_M rows); commit, do not wait.
        S_tok = warpgroup_mma(k_w, q_i.permute((1, 0)), gl.zeros([KEYS, BLOCK_M], gl.float32, st_layout),
                              use_acc=False, is_async=True)
        # FA2 Alg.2 l.13: dP_ijᵀ = V_j dO_iᵀ, issued behind it; commit, do not wait.
        dP_tok = warpgroup_mma(v_w, do_i.permute((1, 0)), gl.zeros([KEYS, BLOCK_M], gl.float32, st_layout),
                               use_acc=False, is_async=True)
        # Wait for S_ijᵀ only (dP_ijᵀ stays in flight).
        S = warpgroup_mma_wait(1, deps=(S_tok,))
        if BLOCK_M == 128:  # FA2 Alg.2 l.9: D_i, loaded under the exponentials
            D_i = gl.load(D_bh + offs_m)
        # FA2 Alg.2 l.11: P_ijᵀ = exp2(S_ijᵀ·τ·log2 e − L_i) (base 2: L_i is the forward's L2), under dP_ijᵀ.
        P = gl.exp2(S * qk_scale - gl.expand_dims(L_i, 0))
        if MASK:  # the diagonal's row blocks (causal): key > query → P = 0
            P = gl.where(gl.expand_dims(offs_m, 0) >= gl.expand_dims(offs_n, 1), P, 0.0)
        if BLOCK_M == 128:
            # 128 columns a step: P kept only in the input dtype, and dS computed from that rounded P (as plain
            # attention in that dtype does), so that the registers hold S, dP, dK and dV without spilling.
            P = P.to(dtype)
        P_op = gl.convert_layout(P.to(dtype), p_layout)
        # FA2 Alg.2 l.12: dV_j += P_ijᵀ dO_i (P from registers); commit, do not wait.
        dV_tok = warpgroup_mma(P_op, do_i, dV, is_async=True)
        # Wait for dP_ijᵀ (dV_j's product stays in flight).
        dP = warpgroup_mma_wait(1, deps=(dP_tok,))
        # FA2 Alg.2 l.14: dS_ijᵀ = P_ijᵀ ∘ (dP_ijᵀ − D_i), while dV_j's product runs.
        dS = (P.to(gl.float32) * (dP - gl.expand_dims(D_i, 0))).to(dtype)
        if DQ == 0:
            # FA2 Alg.2 l.16: dK_j += dS_ijᵀ Q_i, dS_ijᵀ from registers (as P_ijᵀ for dV). No l.15 here: the
            # separate dQ kernel (_k3q_kernel) computes dQ, so nothing is handed over and nothing is added atomically.
            dS_op = gl.convert_layout(dS, p_layout)
            dK_tok = warpgroup_mma(dS_op, q_i, dK, is_async=True)
            dV, dK, P_op, dS_op = warpgroup_mma_wait(0, deps=(dV_tok, dK_tok, P_op, dS_op))
            # Both products that read slot s (Q_i, dO_i) are done: release it to the producer.
            mbarrier.arrive(qd_empty.index(s), count=1)
        else:
            # Publish this warpgroup's 64 rows of dS_ijᵀ in shared memory (slot t % 2), once both warpgroups
            # have finished reading the slot's previous contents (step t − 2).
            mbarrier.wait(ds_empty.index(b), ((t // 2) & 1) ^ 1, pred=t >= 2)
            ds_b = ds_smem.index(b)
            ds_w = ds_b.slice(WG * KEYS, KEYS)
            ds_w.store(dS)
            fence_async_shared()
            mbarrier.arrive(ds_full.index(b), count=1)
            # FA2 Alg.2 l.16: dK_j += dS_ijᵀ Q_i (dS_ijᵀ from this warpgroup's rows of the buffer); commit.
            dK_tok = warpgroup_mma(ds_w, q_i, dK, is_async=True)
            if DQ == 1:
                # FA2 Alg.2 l.15: dQ_i += dS_ij K_j over the column block's 128 keys (both warpgroups' rows of
                # dS_ijᵀ): this warpgroup's d/2 columns of it. Wait for the other warpgroup's rows first.
                mbarrier.wait(ds_full.index(b), (t // 2) & 1)
                dQ_tok = warpgroup_mma(ds_b.permute((1, 0)), k_cols,
                                       gl.zeros([BLOCK_M, DQ_COLS], gl.float32, dq_layout), use_acc=False,
                                       is_async=True)
                dQ, dV, dK, P_op = warpgroup_mma_wait(0, deps=(dQ_tok, dV_tok, dK_tok, P_op))
                # Every product that read slot s (Q_i, dO_i) and slot b (dS_ijᵀ) is done: release both.
                mbarrier.arrive(qd_empty.index(s), count=1)
                mbarrier.arrive(ds_empty.index(b), count=1)
                _k3b_dq_add(dQ_bh, dQ, i, WG * DQ_COLS, BLOCK_M, DQ_COLS, HEAD_D, VEC4)
            elif DQ == 2:
                if HAS_PREV:
                    # FA2 Alg.2 l.15 for the previous row block: dQ_{i'} += dS_{i'j} K_j, d/2 columns, from slot
                    # (t − 1) % 2, which the other warpgroup has long finished writing.
                    tp = t - 1
                    mbarrier.wait(ds_full.index(tp % 2), (tp // 2) & 1)
                    dQ_tok = warpgroup_mma(ds_smem.index(tp % 2).permute((1, 0)), k_cols,
                                           gl.zeros([BLOCK_M, DQ_COLS], gl.float32, dq_layout), use_acc=False,
                                           is_async=True)
                    dQ, dV, dK, P_op = warpgroup_mma_wait(0, deps=(dQ_tok, dV_tok, dK_tok, P_op))
                    mbarrier.arrive(qd_empty.index(s), count=1)
                    mbarrier.arrive(ds_empty.index(tp % 2), count=1)
                    _k3b_dq_add(dQ_bh, dQ, _k3b_row_block(tp, i0, Tr, CAUSAL), WG * DQ_COLS, BLOCK_M, DQ_COLS,
                                HEAD_D, VEC4)
                else:
                    dV, dK, P_op = warpgroup_mma_wait(0, deps=(dV_tok, dK_tok, P_op))
                    mbarrier.arrive(qd_empty.index(s), count=1)
            else:
                # FA2 Alg.2 l.15 on this warpgroup's 64 keys only: dQ_i += dS_ij K_j (all d columns).
                dQ_tok = warpgroup_mma(ds_w.permute((1, 0)), k_w, gl.zeros([BLOCK_M, HEAD_D], gl.float32, acc_layout),
                                       use_acc=False, is_async=True)
                dQ, dV, dK, P_op = warpgroup_mma_wait(0, deps=(dQ_tok, dV_tok, dK_tok, P_op))
                mbarrier.arrive(qd_empty.index(s), count=1)
                mbarrier.arrive(ds_empty.index(b), count=1)
                _k3b_dq_add(dQ_bh, dQ, i, 0, BLOCK_M, HEAD_D, HEAD_D, VEC4)
        return dK, dV

    @gluon.jit
    def _k3b_consumer(dK_out, dV_out, L2, Dd, dQacc, q_smem, do_smem, k_smem, v_smem, ds_smem, kv_bar, qd_ready,
                      qd_empty, ds_full, ds_empty, cfg, bh, N, start_n, i0, Tr, n_steps, n_mask, qk_scale, sm_scale,
                      WG: gl.constexpr):
        # FA2 Alg.2 l.5-19 on keys [start_n + 64·WG, + 64) of column block j, one warpgroup (4 warps).
        BLOCK_M: gl.constexpr = q_smem.shape[1]
        HEAD_D: gl.constexpr = q_smem.shape[2]
        CAUSAL: gl.constexpr = cfg.shape[0] == 2
        DQ: gl.constexpr = cfg.shape[1] % 8  # 8: DQ = 0 (see the kernel)
        VEC4: gl.constexpr = cfg.shape[2] == 2
        KEYS: gl.constexpr = 64
        DQ_COLS: gl.constexpr = HEAD_D // 2
        st_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                            instr_shape=[16, BLOCK_M, 16])
        acc_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                             instr_shape=[16, HEAD_D, 16])
        dq_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                            instr_shape=[16, DQ_COLS, 16])
        bh64 = bh.to(gl.int64)
        L2_bh = L2 + bh64 * N
        D_bh = Dd + bh64 * N
        dQ_bh = dQacc + bh64 * N * HEAD_D
        k_w = k_smem.slice(WG * KEYS, KEYS)  # this warpgroup's keys of K_j, V_j
        v_w = v_smem.slice(WG * KEYS, KEYS)
        k_cols = k_smem.slice(WG * DQ_COLS, DQ_COLS, dim=1)  # the columns of K_j for its part of dQ_i
        offs_n = start_n + WG * KEYS + gl.arange(0, KEYS, layout=gl.SliceLayout(1, st_layout))
        # FA2 Alg.2 l.7: dK_j = 0, dV_j = 0 on chip (fp32).
        dK = gl.zeros([KEYS, HEAD_D], gl.float32, acc_layout)
        dV = gl.zeros([KEYS, HEAD_D], gl.float32, acc_layout)
        # FA2 Alg.2 l.6: wait for K_j, V_j.
        mbarrier.wait(kv_bar, 0)
        # FA2 Alg.2 l.8: for each row block i (causal: the diagonal's n_mask blocks masked, then the rest);
        # step 0 apart, since with DQ = 2 it has no previous row block to finish.
        dK, dV = _k3b_step(0, i0, Tr, dK, dV, q_smem, do_smem, k_w, v_w, k_cols, ds_smem, qd_ready, qd_empty,
                           ds_full, ds_empty, L2_bh, D_bh, dQ_bh, offs_n, qk_scale, N, n_steps, WG, CAUSAL, CAUSAL,
                           DQ, False, VEC4)
        for t in range(1, n_mask):
            dK, dV = _k3b_step(t, i0, Tr, dK, dV, q_smem, do_smem, k_w, v_w, k_cols, ds_smem, qd_ready, qd_empty,
                               ds_full, ds_empty, L2_bh, D_bh, dQ_bh, offs_n, qk_scale, N, n_steps, WG, True, CAUSAL,
                               DQ, True, VEC4)
        for t in range(gl.maximum(n_mask, 1), n_steps):
            dK, dV = _k3b_step(t, i0, Tr, dK, dV, q_smem, do_smem, k_w, v_w, k_cols, ds_smem, qd_ready, qd_empty,
                               ds_full, ds_empty, L2_bh, D_bh, dQ_bh, offs_n, qk_scale, N, n_steps, WG, False, CAUSAL,
                               DQ, True, VEC4)
        if DQ == 2:  # FA2 Alg.2 l.15 for the last row block
            tp = n_steps - 1
            mbarrier.wait(ds_full.index(tp % 2), (tp // 2) & 1)
            dQ_tok = warpgroup_mma(ds_smem.index(tp % 2).permute((1, 0)), k_cols,
                                   gl.zeros([BLOCK_M, DQ_COLS], gl.float32, dq_layout), use_acc=False, is_async=True)
            dQ = warpgroup_mma_wait(0, deps=(dQ_tok,))
            _k3b_dq_add(dQ_bh, dQ, _k3b_row_block(tp, i0, Tr, CAUSAL), WG * DQ_COLS, BLOCK_M, DQ_COLS, HEAD_D, VEC4)
        # FA2 Alg.2 l.17-18: write dK_j (times τ) and dV_j to HBM, once.
        _k3b_store_dkdv(dK, dV, dK_out, dV_out, bh64 * N * HEAD_D, start_n + WG * KEYS, sm_scale)

    @gluon.jit
    def _k3b_consumer0(dK_out, dV_out, L2, Dd, dQacc, q_smem, do_smem, k_smem, v_smem, ds_smem, kv_bar, qd_ready,
                       qd_empty, ds_full, ds_empty, cfg, bh, N, start_n, i0, Tr, n_steps, n_mask, qk_scale, sm_scale):
        _k3b_consumer(dK_out, dV_out, L2, Dd, dQacc, q_smem, do_smem, k_smem, v_smem, ds_smem, kv_bar, qd_ready,
                      qd_empty, ds_full, ds_empty, cfg, bh, N, start_n, i0, Tr, n_steps, n_mask, qk_scale, sm_scale, 0)

    @gluon.jit
    def _k3b_consumer1(dK_out, dV_out, L2, Dd, dQacc, q_smem, do_smem, k_smem, v_smem, ds_smem, kv_bar, qd_ready,
                       qd_empty, ds_full, ds_empty, cfg, bh, N, start_n, i0, Tr, n_steps, n_mask, qk_scale, sm_scale):
        _k3b_consumer(dK_out, dV_out, L2, Dd, dQacc, q_smem, do_smem, k_smem, v_smem, ds_smem, kv_bar, qd_ready,
                      qd_empty, ds_full, ds_empty, cfg, bh, N, start_n, i0, Tr, n_steps, n_mask, qk_scale, sm_scale, 1)

    @gluon.jit
    def _k3b_dq_reduce(dQ, dq_w, desc_dq, row, ds_w, dS):
        # FA2 Alg.2 l.15 (FA3's dQ): this warpgroup's dQ_i' (its 64 keys' share) to HBM by one TMA reduce-add
        # into the fp32 dQ, the adds done in L2 (no atomic instruction per element); then dS_ijᵀ into shared
        # memory for the next step's dQ product. The caller has waited for every product that read ds_w, and
        # its arrive on the Q/dO slot synchronised the warpgroup. First, the previous reduce-add must have read
        # dq_w (store_wait), for every thread of the warpgroup (the barrier).
        tma.store_wait(0)
        gl.thread_barrier()
        dq_w.store(dQ)
        if dS is not None:
            ds_w.store(dS)
        fence_async_shared()
        gl.thread_barrier()
        _tma_reduce_add(desc_dq, [row, 0], dq_w)

    @gluon.jit
    def _k3b_consumer_pipe(dK_out, dV_out, L2, Dd, q_smem, do_smem, k_smem, v_smem, kv_bar, kv_empty, qd_ready,
                           qd_empty, turns, cfg, N, first, n_tiles, step, qk_scale, sm_scale, ds_smem, dq_smem,
                           desc_dq, WG: gl.constexpr):
        # FA2 Alg.2 l.5-19 (TilesB.pipe) on keys [start_n + 64·WG, + 64) of each of this program's column
        # blocks j, in the dQ kernel's order (FA3 Alg.2's software pipeline): step t issues S_ijᵀ and dP_ijᵀ of
        # row block i = the t-th together with the previous row block's dV_j += P_i'jᵀ dO_i' and
        # dK_j += dS_i'jᵀ Q_i' (P, dS from registers), then computes P_ijᵀ and dS_ijᵀ under them. The two
        # warpgroups take turns at issuing (pingpong), so one's exponentials run under the other's products.
        # The Q/dO slot of step t is released in step t + 1, after the products that read it.
        # dq = 0: no l.15 here (the dQ kernel computes it). dq = 4 (TMA_DQ): l.15 too, as FlashAttention-3
        # does it: with the previous row block's products, dQ_i' = dS_i'j K_j over this warpgroup's 64 keys
        # (dS_i'jᵀ from shared memory, written a step before), added into an fp32 dQ in HBM by a TMA
        # reduce-add (_k3b_dq_reduce).
        # it counts the Q/dO pairs of every tile so far (slot it % STAGES), tt this warpgroup's issues (the
        # turns), tc the tiles (K_j, V_j's phase).
        STAGES: gl.constexpr = q_smem.shape[0]
        BLOCK_M: gl.constexpr = q_smem.shape[1]
        HEAD_D: gl.constexpr = q_smem.shape[2]
        BLOCK_N: gl.constexpr = k_smem.shape[0]
        CAUSAL: gl.constexpr = cfg.shape[0] == 2
        TMA_DQ: gl.constexpr = cfg.shape[1] == 2
        KV_REGS: gl.constexpr = cfg.shape[2] == 2
        MORE: gl.constexpr = cfg.shape[1] - 1  # products in flight beyond dq = 0's: the dQ product
        KEYS: gl.constexpr = 64
        dtype: gl.constexpr = q_smem.dtype
        st_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                            instr_shape=[16, BLOCK_M, 16])
        acc_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                             instr_shape=[16, HEAD_D, 16])
        p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=acc_layout, k_width=2)
        col_layout: gl.constexpr = gl.SliceLayout(0, st_layout)
        my_turn, other_turn = _k3_ring_turns(turns, WG, 2)
        Tr = N // BLOCK_M
        k_w = k_smem.slice(WG * KEYS, KEYS)  # this warpgroup's keys of K_j, V_j
        v_w = v_smem.slice(WG * KEYS, KEYS)
        if TMA_DQ:
            ds_w = ds_smem.index(WG)  # this warpgroup's dS_i'jᵀ (64 keys x BLOCK_M rows), for dQ's product
            dq_w = dq_smem.index(WG)  # its fp32 dQ_i' (BLOCK_M x d), staged for the TMA reduce-add
        it = 0
        tt = 0
        tc = 0
        for tile in range(first, n_tiles, step):
            bh, start_n, i0, n_steps, n_mask = _k3b_tile(tile, N, BLOCK_M, BLOCK_N, CAUSAL)
            bh64 = bh.to(gl.int64)
            L2_bh = L2 + bh64 * N
            D_bh = Dd + bh64 * N
            offs_n = start_n + WG * KEYS + gl.arange(0, KEYS, layout=gl.SliceLayout(1, st_layout))
            # FA2 Alg.2 l.7: dK_j = 0, dV_j = 0 on chip (fp32).
            dK = gl.zeros([KEYS, HEAD_D], gl.float32, acc_layout)
            dV = gl.zeros([KEYS, HEAD_D], gl.float32, acc_layout)
            # FA2 Alg.2 l.6: wait for K_j, V_j.
            mbarrier.wait(kv_bar, tc & 1)
            # this warpgroup's K_j, V_j: the A operands of every S, dP product of the column block
            k_a = _k3_operand_a(k_w, st_layout, KV_REGS)
            v_a = _k3_operand_a(v_w, st_layout, KV_REGS)
            # Step 0 (FA2 Alg.2 l.8, the first row block i0): l.9 L_i, D_i; wait for Q_i, dO_i.
            s0 = it % STAGES
            offs_m = i0 * BLOCK_M + gl.arange(0, BLOCK_M, layout=col_layout)
            L_i = gl.load(L2_bh + offs_m)
            D_i = gl.load(D_bh + offs_m)
            mbarrier.wait(qd_ready.index(s0), (it // STAGES) & 1)
            _k3_turn(my_turn, tt, WG == 0)
            # FA2 Alg.2 l.10: S_ijᵀ = K_j Q_iᵀ; l.13: dP_ijᵀ = V_j dO_iᵀ; commit both.
            S_tok = warpgroup_mma(k_a, q_smem.index(s0).permute((1, 0)),
                                  gl.zeros([KEYS, BLOCK_M], gl.float32, st_layout), use_acc=False, is_async=True)
            dP_tok = warpgroup_mma(v_a, do_smem.index(s0).permute((1, 0)),
                                   gl.zeros([KEYS, BLOCK_M], gl.float32, st_layout), use_acc=False, is_async=True)
            mbarrier.arrive(other_turn, count=1)
            S = warpgroup_mma_wait(1, deps=(S_tok,))
            dP = warpgroup_mma_wait(0, deps=(dP_tok,))
            # FA2 Alg.2 l.11 (causal: row block i0 is crossed by the diagonal), l.14: dS_ijᵀ = P_ijᵀ ∘ (dP_ijᵀ − D_i).
            P = _k3b_p(S, L_i, qk_scale, offs_m, offs_n, CAUSAL, True)
            dS = P * (dP - gl.expand_dims(D_i, 0))
            P_op = gl.convert_layout(P.to(dtype), p_layout)
            if TMA_DQ:  # dS_i0jᵀ into shared memory, for step 1's dK and dQ products
                ds_w.store(dS.to(dtype))
                fence_async_shared()
                gl.thread_barrier()
            else:
                dS_op = gl.convert_layout(dS.to(dtype), p_layout)
            # FA2 Alg.2 l.8: for each further row block (causal: the diagonal's n_mask blocks masked).
            for t in range(1, n_steps):
                s = (it + t) % STAGES
                sp = (it + t - 1) % STAGES
                i = _k3b_row_block(t, i0, Tr, CAUSAL)
                # FA2 Alg.2 l.9: L_i, D_i (issued before the waits, which hide their latency); wait for Q_i, dO_i.
                offs_m = i * BLOCK_M + gl.arange(0, BLOCK_M, layout=col_layout)
                L_i = gl.load(L2_bh + offs_m)
                D_i = gl.load(D_bh + offs_m)
                mbarrier.wait(qd_ready.index(s), ((it + t) // STAGES) & 1)
                _k3_turn(my_turn, tt + t, WG == 0)
                # FA2 Alg.2 l.10, l.13: S_ijᵀ, dP_ijᵀ; commit, do not wait.
                S_tok = warpgroup_mma(k_a, q_smem.index(s).permute((1, 0)),
                                      gl.zeros([KEYS, BLOCK_M], gl.float32, st_layout), use_acc=False, is_async=True)
                dP_tok = warpgroup_mma(v_a, do_smem.index(s).permute((1, 0)),
                                       gl.zeros([KEYS, BLOCK_M], gl.float32, st_layout), use_acc=False, is_async=True)
                # FA2 Alg.2 l.12, l.16 for the previous row block i': dV_j += P_i'jᵀ dO_i', dK_j += dS_i'jᵀ Q_i'.
                dV_tok = warpgroup_mma(P_op, do_smem.index(sp), dV, is_async=True)
                if TMA_DQ:
                    # dS_i'jᵀ from shared memory (fewer registers live); FA2 Alg.2 l.15 for i': dQ_i' = dS_i'j K_j
                    # over this warpgroup's keys.
                    dK_tok = warpgroup_mma(ds_w, q_smem.index(sp), dK, is_async=True)
                    dQ_tok = warpgroup_mma(ds_w.permute((1, 0)), k_w, gl.zeros([BLOCK_M, HEAD_D], gl.float32,
                                                                               acc_layout), use_acc=False,
                                           is_async=True)
                else:
                    dK_tok = warpgroup_mma(dS_op, q_smem.index(sp), dK, is_async=True)
                mbarrier.arrive(other_turn, count=1)  # the other warpgroup's products may go next
                # Wait for S_ijᵀ only; P_ijᵀ under dP and the other products. Then dP_ijᵀ, and dS_ijᵀ under those.
                S = warpgroup_mma_wait(3 + MORE, deps=(S_tok,))
                # FA2 Alg.2 l.11 (causal: masked on the diagonal's n_mask row blocks).
                if t < n_mask:
                    P = _k3b_p(S, L_i, qk_scale, offs_m, offs_n, True, True)
                else:
                    P = _k3b_p(S, L_i, qk_scale, offs_m, offs_n, False, True)
                dP = warpgroup_mma_wait(2 + MORE, deps=(dP_tok,))
                # FA2 Alg.2 l.14: dS_ijᵀ = P_ijᵀ ∘ (dP_ijᵀ − D_i).
                dS = P * (dP - gl.expand_dims(D_i, 0))
                # Wait for the previous row block's products: slot sp (Q_i', dO_i') is read no more, release it.
                if TMA_DQ:
                    dV, dK, dQ, P_op = warpgroup_mma_wait(0, deps=(dV_tok, dK_tok, dQ_tok, P_op))
                    mbarrier.arrive(qd_empty.index(sp), count=1)
                    ip = _k3b_row_block(t - 1, i0, Tr, CAUSAL)
                    _k3b_dq_reduce(dQ, dq_w, desc_dq, bh * N + ip * BLOCK_M, ds_w, dS.to(dtype))
                else:
                    dV, dK, P_op, dS_op = warpgroup_mma_wait(0, deps=(dV_tok, dK_tok, P_op, dS_op))
                    mbarrier.arrive(qd_empty.index(sp), count=1)
                    dS_op = gl.convert_layout(dS.to(dtype), p_layout)
                P_op = gl.convert_layout(P.to(dtype), p_layout)
            # K_j, V_j are read no more by S, dP (the last have landed); with dq = 4, K_j is, by the last dQ product.
            if not TMA_DQ:
                mbarrier.arrive(kv_empty, count=1)
            # FA2 Alg.2 l.12, l.16 (and l.15) for the last row block; commit and wait; release its slot.
            sl = (it + n_steps - 1) % STAGES
            _k3_turn(my_turn, tt + n_steps, WG == 0)
            dV_tok = warpgroup_mma(P_op, do_smem.index(sl), dV, is_async=True)
            if TMA_DQ:
                dK_tok = warpgroup_mma(ds_w, q_smem.index(sl), dK, is_async=True)
                dQ_tok = warpgroup_mma(ds_w.permute((1, 0)), k_w, gl.zeros([BLOCK_M, HEAD_D], gl.float32, acc_layout),
                                       use_acc=False, is_async=True)
            else:
                dK_tok = warpgroup_mma(dS_op, q_smem.index(sl), dK, is_async=True)
            mbarrier.arrive(other_turn, count=1)
            if TMA_DQ:
                dV, dK, dQ, P_op = warpgroup_mma_wait(0, deps=(dV_tok, dK_tok, dQ_tok, P_op))
                mbarrier.arrive(kv_empty, count=1)
                mbarrier.arrive(qd_empty.index(sl), count=1)
                il = _k3b_row_block(n_steps - 1, i0, Tr, CAUSAL)
                _k3b_dq_reduce(dQ, dq_w, desc_dq, bh * N + il * BLOCK_M, ds_w, None)
            else:
                dV, dK, P_op, dS_op = warpgroup_mma_wait(0, deps=(dV_tok, dK_tok, P_op, dS_op))
                mbarrier.arrive(qd_empty.index(sl), count=1)
            # FA2 Alg.2 l.17-18: write dK_j (times τ) and dV_j to HBM, once.
            _k3b_store_dkdv(dK, dV, dK_out, dV_out, bh64 * N * HEAD_D, start_n + WG * KEYS, sm_scale)
            it += n_steps
            tt += n_steps + 1
            tc += 1
        if TMA_DQ:  # the last reduce-add must have read its shared memory before the program ends
            tma.store_wait(0)

    @gluon.jit
    def _k3b_consumer_pipe0(dK_out, dV_out, L2, Dd, q_smem, do_smem, k_smem, v_smem, kv_bar, kv_empty, qd_ready,
                            qd_empty, turns, cfg, N, first, n_tiles, step, qk_scale, sm_scale, ds_smem,
                            dq_smem, desc_dq):
        _k3b_consumer_pipe(dK_out, dV_out, L2, Dd, q_smem, do_smem, k_smem, v_smem, kv_bar, kv_empty, qd_ready,
                           qd_empty, turns, cfg, N, first, n_tiles, step, qk_scale, sm_scale, ds_smem, dq_smem,
                           desc_dq, 0)

    @gluon.jit
    def _k3b_consumer_pipe1(dK_out, dV_out, L2, Dd, q_smem, do_smem, k_smem, v_smem, kv_bar, kv_empty, qd_ready,
                            qd_empty, turns, cfg, N, first, n_tiles, step, qk_scale, sm_scale, ds_smem,
                            dq_smem, desc_dq):
        _k3b_consumer_pipe(dK_out, dV_out, L2, Dd, q_smem, do_smem, k_smem, v_smem, kv_bar, kv_empty, qd_ready,
                           qd_empty, turns, cfg, N, first, n_tiles, step, qk_scale, sm_scale, ds_smem, dq_smem,
                           desc_dq, 1)

    @gluon.jit
    def _k3b_wide_rows(L2_bh, D_bh, i, BLOCK_M: gl.constexpr, WG: gl.constexpr, row_layout: gl.constexpr):
        # FA2 Alg.2 l.9: L_i, D_i of this warpgroup's 64 rows of row block i (loaded before the wait for Q_i,
        # dO_i, which hides their latency), and the rows' indices.
        offs_m = i * BLOCK_M + WG * 64 + gl.arange(0, 64, layout=row_layout)
        return gl.load(L2_bh + offs_m), gl.load(D_bh + offs_m), offs_m

    @gluon.jit
    def _k3b_wide_sdp(q_s, do_s, k_smem, v_smem, WG: gl.constexpr, s_layout: gl.constexpr):
        # FA2 Alg.2 l.10: S_ij = Q_i K_jᵀ; l.13: dP_ij = dO_i V_jᵀ, this warpgroup's 64 rows and all the
        # column block's keys; committed, not waited for.
        BLOCK_N: gl.constexpr = k_smem.shape[0]
        S_tok = warpgroup_mma(q_s.slice(WG * 64, 64), k_smem.permute((1, 0)),
                              gl.zeros([64, BLOCK_N], gl.float32, s_layout), use_acc=False, is_async=True)
        dP_tok = warpgroup_mma(do_s.slice(WG * 64, 64), v_smem.permute((1, 0)),
                               gl.zeros([64, BLOCK_N], gl.float32, s_layout), use_acc=False, is_async=True)
        return S_tok, dP_tok

    @gluon.jit
    def _k3b_p(S, L_i, qk_scale, offs_m, offs_n, MASK: gl.constexpr, KEYS_FIRST: gl.constexpr = False):
        # FA2 Alg.2 l.11: P_ij = exp2(S_ij·τ·log2 e − L_i) (base 2: L_i is the forward's L2); on the diagonal's
        # blocks (MASK, causal), key > query → P = 0. S is S_ij (rows first: the dQ kernel, TilesB.wide), or
        # S_ijᵀ (KEYS_FIRST: the pipelined dK/dV kernel); L_i and the row indices run along the rows' axis.
        ROW_AXIS: gl.constexpr = 0 if KEYS_FIRST else 1
        P = gl.exp2(S * qk_scale - gl.expand_dims(L_i, ROW_AXIS))
        if MASK:
            P = gl.where(gl.expand_dims(offs_m, ROW_AXIS) >= gl.expand_dims(offs_n, 1 - ROW_AXIS), P, 0.0)
        return P

    @gluon.jit
    def _k3b_wide_publish(P, dP, D_i, p_w, ds_w, pd_full, t):
        # FA2 Alg.2 l.14: dS_ij = P_ij ∘ (dP_ij − D_i). P_ij, dS_ij of this warpgroup's rows into shared memory
        # (the buffers are free: the caller waited for pd_empty); then wait until the other warpgroup's rows are
        # there too, for the dV, dK products over all 128 rows.
        dtype: gl.constexpr = p_w.dtype
        p_w.store(P.to(dtype))
        ds_w.store((P * (dP - gl.expand_dims(D_i, 1))).to(dtype))
        fence_async_shared()
        mbarrier.arrive(pd_full, count=1)
        mbarrier.wait(pd_full, t & 1)

    @gluon.jit
    def _k3b_consumer_wide(dK_out, dV_out, L2, Dd, q_smem, do_smem, k_smem, v_smem, p_smem, ds_smem, kv_bar,
                           qd_ready, qd_empty, pd_full, pd_empty, cfg, N, tile, qk_scale, sm_scale, WG: gl.constexpr):
        # FA2 Alg.2 l.5-19 without l.15 (TilesB.wide, dq = 0) in FlashAttention-3's layout: a step is a row block of
        # 128 queries against the program's column block of 128 keys. Warpgroup WG computes S_ij and dP_ij for its
        # 64 rows of the step and all 128 keys (64 x 128 products, twice the pipelined kernel's 64 x 64), P_ij and
        # dS_ij from them, and writes both into shared memory; once both warpgroups' rows are there, it computes
        # dV_j += P_ijᵀ dO_i and dK_j += dS_ijᵀ Q_i for its 64 keys over all 128 rows (shared-memory A operands,
        # transposed). Step t issues S, dP of its row block together with dV, dK of the previous one, so the
        # exponentials run under those products.
        STAGES: gl.constexpr = q_smem.shape[0]
        BLOCK_M: gl.constexpr = q_smem.shape[1]
        HEAD_D: gl.constexpr = q_smem.shape[2]
        BLOCK_N: gl.constexpr = k_smem.shape[0]
        CAUSAL: gl.constexpr = cfg.shape[0] == 2
        ROWS: gl.constexpr = 64  # a warpgroup's rows of S_ij, dP_ij
        KEYS: gl.constexpr = 64  # a warpgroup's keys of dK_j, dV_j
        s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                           instr_shape=[16, BLOCK_N, 16])
        acc_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                             instr_shape=[16, HEAD_D, 16])
        row_layout: gl.constexpr = gl.SliceLayout(1, s_layout)
        # (n_mask, the diagonal's row blocks, is 1 here: BLOCK_M = BLOCK_N, so only step 0 is masked)
        bh, start_n, i0, n_steps, n_mask = _k3b_tile(tile, N, BLOCK_M, BLOCK_N, CAUSAL)
        Tr = N // BLOCK_M
        bh64 = bh.to(gl.int64)
        L2_bh = L2 + bh64 * N
        D_bh = Dd + bh64 * N
        offs_n = start_n + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, s_layout))
        p_w = p_smem.slice(WG * ROWS, ROWS)  # this warpgroup's rows of P_ij, dS_ij (written)
        ds_w = ds_smem.slice(WG * ROWS, ROWS)
        pT_w = p_smem.slice(WG * KEYS, KEYS, dim=1).permute((1, 0))  # P_ijᵀ, dS_ijᵀ of its keys (read)
        dsT_w = ds_smem.slice(WG * KEYS, KEYS, dim=1).permute((1, 0))
        # FA2 Alg.2 l.7: dK_j = 0, dV_j = 0 on chip (fp32), this warpgroup's 64 keys.
        dK = gl.zeros([KEYS, HEAD_D], gl.float32, acc_layout)
        dV = gl.zeros([KEYS, HEAD_D], gl.float32, acc_layout)
        # FA2 Alg.2 l.6: wait for K_j, V_j.
        mbarrier.wait(kv_bar, 0)
        # FA2 Alg.2 l.8, step 0 (the first row block i0; causal: the diagonal's, masked): l.9-11, l.13-14.
        L_i, D_i, offs_m = _k3b_wide_rows(L2_bh, D_bh, i0, BLOCK_M, WG, row_layout)
        mbarrier.wait(qd_ready.index(0), 0)
        S_tok, dP_tok = _k3b_wide_sdp(q_smem.index(0), do_smem.index(0), k_smem, v_smem, WG, s_layout)
        S = warpgroup_mma_wait(1, deps=(S_tok,))
        P = _k3b_p(S, L_i, qk_scale, offs_m, offs_n, CAUSAL)
        dP = warpgroup_mma_wait(0, deps=(dP_tok,))
        _k3b_wide_publish(P, dP, D_i, p_w, ds_w, pd_full, 0)
        # FA2 Alg.2 l.8: for each further row block.
        for t in range(1, n_steps):
            s = t % STAGES
            sp = (t - 1) % STAGES
            L_i, D_i, offs_m = _k3b_wide_rows(L2_bh, D_bh, _k3b_row_block(t, i0, Tr, CAUSAL), BLOCK_M, WG, row_layout)
            mbarrier.wait(qd_ready.index(s), (t // STAGES) & 1)
            # FA2 Alg.2 l.10, l.13: S_ij, dP_ij; commit. Then l.12, l.16 for the previous row block i' (P, dS of
            # both warpgroups are in shared memory): dV_j += P_i'jᵀ dO_i', dK_j += dS_i'jᵀ Q_i'; commit.
            S_tok, dP_tok = _k3b_wide_sdp(q_smem.index(s), do_smem.index(s), k_smem, v_smem, WG, s_layout)
            dV_tok = warpgroup_mma(pT_w, do_smem.index(sp), dV, is_async=True)
            dK_tok = warpgroup_mma(dsT_w, q_smem.index(sp), dK, is_async=True)
            # FA2 Alg.2 l.11 under dP and the two products (causal: only step 0 is on the diagonal).
            S = warpgroup_mma_wait(3, deps=(S_tok,))
            P = _k3b_p(S, L_i, qk_scale, offs_m, offs_n, False)
            dP = warpgroup_mma_wait(2, deps=(dP_tok,))
            # The previous row block's products are done: its Q/dO slot is free, and the P, dS buffers once the
            # other warpgroup's are done too.
            dV, dK = warpgroup_mma_wait(0, deps=(dV_tok, dK_tok))
            mbarrier.arrive(qd_empty.index(sp), count=1)
            mbarrier.arrive(pd_empty, count=1)
            mbarrier.wait(pd_empty, (t - 1) & 1)
            _k3b_wide_publish(P, dP, D_i, p_w, ds_w, pd_full, t)
        # FA2 Alg.2 l.12, l.16 for the last row block; commit and wait; release its slot.
        sl = (n_steps - 1) % STAGES
        dV_tok = warpgroup_mma(pT_w, do_smem.index(sl), dV, is_async=True)
        dK_tok = warpgroup_mma(dsT_w, q_smem.index(sl), dK, is_async=True)
        dV, dK = warpgroup_mma_wait(0, deps=(dV_tok, dK_tok))
        mbarrier.arrive(qd_empty.index(sl), count=1)
        # FA2 Alg.2 l.17-18: write dK_j (times τ) and dV_j to HBM, once.
        _k3b_store_dkdv(dK, dV, dK_out, dV_out, bh64 * N * HEAD_D, start_n + WG * KEYS, sm_scale)

    @gluon.jit
    def _k3b_consumer_wide0(dK_out, dV_out, L2, Dd, q_smem, do_smem, k_smem, v_smem, p_smem, ds_smem, kv_bar,
                            qd_ready, qd_empty, pd_full, pd_empty, cfg, N, tile, qk_scale, sm_scale):
        _k3b_consumer_wide(dK_out, dV_out, L2, Dd, q_smem, do_smem, k_smem, v_smem, p_smem, ds_smem, kv_bar,
                           qd_ready, qd_empty, pd_full, pd_empty, cfg, N, tile, qk_scale, sm_scale, 0)

    @gluon.jit
    def _k3b_consumer_wide1(dK_out, dV_out, L2, Dd, q_smem, do_smem, k_smem, v_smem, p_smem, ds_smem, kv_bar,
                            qd_ready, qd_empty, pd_full, pd_empty, cfg, N, tile, qk_scale, sm_scale):
        _k3b_consumer_wide(dK_out, dV_out, L2, Dd, q_smem, do_smem, k_smem, v_smem, p_smem, ds_smem, kv_bar,
                           qd_ready, qd_empty, pd_full, pd_empty, cfg, N, tile, qk_scale, sm_scale, 1)

    @gluon.jit
    def _k3b_dkdv_kernel(desc_q, desc_do, desc_k, desc_v, desc_dq, L2, Dd, dQacc, dK_out, dV_out, N, qk_scale,
                         sm_scale, BH,
                         HEAD_D: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr,
                         CAUSAL: gl.constexpr, DQ: gl.constexpr, VEC4: gl.constexpr, PIPE: gl.constexpr,
                         WIDE: gl.constexpr,
                         PERSISTENT: gl.constexpr, KV_REGS: gl.constexpr, CONSUMER_REGS: gl.constexpr,
                         num_warps: gl.constexpr):
        # FA2 Alg.2 l.5: a program per column block j of one (batch, head) bh, the grid (N / BLOCK_N, BH)
        # (causal: j = 0 first, the longest row loop); persistent (pipe only): one program per SM striding over
        # the tiles in the same order. Default partition: consumer warpgroup 0; workers: warpgroup 1, the
        # producer warp.
        n_tiles = (N // BLOCK_N) * BH
        first, step = _k3_program_tiles(n_tiles, PERSISTENT)
        dtype: gl.constexpr = desc_q.dtype
        q_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_M, HEAD_D], desc_q.layout)
        do_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_M, HEAD_D], desc_do.layout)
        k_smem = gl.allocate_shared_memory(dtype, [BLOCK_N, HEAD_D], desc_k.layout)
        v_smem = gl.allocate_shared_memory(dtype, [BLOCK_N, HEAD_D], desc_v.layout)
        kv_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
        kv_empty = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
        qd_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        qd_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        mbarrier.init(kv_bar, count=1)
        mbarrier.init(kv_empty, count=2)  # one arrival from each consumer warpgroup (a persistent program's)
        for s in gl.static_range(STAGES):
            mbarrier.init(qd_ready.index(s), count=1)
            mbarrier.init(qd_empty.index(s), count=2)  # one arrival from each consumer warpgroup
        if WIDE:
            # TilesB.wide: one column block a program, 128-row steps; P_ij and dS_ij of the step's 128 rows in
            # shared memory, handed between the warpgroups through pd_full (both have written their rows) and
            # pd_empty (both have read them). The causal flag travels as a placeholder buffer's shape.
            pd_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_M, BLOCK_N], dtype)
            p_smem = gl.allocate_shared_memory(dtype, [BLOCK_M, BLOCK_N], pd_layout)
            ds_smem = gl.allocate_shared_memory(dtype, [BLOCK_M, BLOCK_N], pd_layout)
            pd_full = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
            pd_empty = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
            mbarrier.init(pd_full, count=2)
            mbarrier.init(pd_empty, count=2)
            cfg = gl.allocate_shared_memory(gl.int8, [1 + CAUSAL], gl.SwizzledSharedLayout(1, 1, 1, order=[0]))
            cargs = (dK_out, dV_out, L2, Dd, q_smem, do_smem, k_smem, v_smem, p_smem, ds_smem, kv_bar, qd_ready,
                     qd_empty, pd_full, pd_empty, cfg, N, first, qk_scale, sm_scale)
            pargs = (desc_q, desc_do, desc_k, desc_v, q_smem, do_smem, k_smem, v_smem, kv_bar, kv_empty, qd_ready,
                     qd_empty, cfg, N, first, n_tiles, step)
            gl.warp_specialize([(_k3b_consumer_wide0, cargs), (_k3b_consumer_wide1, cargs), (_k3b_producer, pargs)],
                               [4, 1], [CONSUMER_REGS, 24])
        elif PIPE:
            # TilesB.pipe: the pipelined consumers take turns through two mbarriers. dq = 0: no dS buffer; dq = 4:
            # each warpgroup's dS_i'jᵀ and its fp32 dQ_i' (staged for the TMA reduce-add) in shared memory. The
            # causal and dq flags travel as a placeholder buffer's shape (see below).
            TMA_DQ: gl.constexpr = DQ == 4
            cfg = gl.allocate_shared_memory(gl.int8, [1 + CAUSAL, 1 + TMA_DQ, 1 + KV_REGS],
                                            gl.SwizzledSharedLayout(1, 1, 1, order=[2, 1, 0]))
            if TMA_DQ:
                ds_smem = gl.allocate_shared_memory(dtype, [2, 64, BLOCK_M],
                                                    gl.NVMMASharedLayout.get_default_for([64, BLOCK_M], dtype))
                dq_smem = gl.allocate_shared_memory(gl.float32, [2, BLOCK_M, HEAD_D], desc_dq.layout)
            else:  # never read or written (the dq = 0 consumers do not touch them)
                ds_smem = cfg
                dq_smem = cfg
            turns = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())  # _k3_ring_turns
            for w in gl.static_range(2):
                mbarrier.init(turns.index(w), count=1)
            cargs = (dK_out, dV_out, L2, Dd, q_smem, do_smem, k_smem, v_smem, kv_bar, kv_empty, qd_ready, qd_empty,
                     turns, cfg, N, first, n_tiles, step, qk_scale, sm_scale, ds_smem, dq_smem, desc_dq)
            pargs = (desc_q, desc_do, desc_k, desc_v, q_smem, do_smem, k_smem, v_smem, kv_bar, kv_empty, qd_ready,
                     qd_empty, cfg, N, first, n_tiles, step)
            gl.warp_specialize([(_k3b_consumer_pipe0, cargs), (_k3b_consumer_pipe1, cargs), (_k3b_producer, pargs)],
                               [4, 1], [CONSUMER_REGS, 24])
        else:
            # One tile per program (the consumers below run one column block).
            bh, start_n, i0, n_steps, n_mask = _k3b_tile(first, N, BLOCK_M, BLOCK_N, CAUSAL)
            Tr = N // BLOCK_M
            ds_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_N, BLOCK_M], dtype)
            ds_smem = gl.allocate_shared_memory(dtype, [2, BLOCK_N, BLOCK_M], ds_layout)
            ds_full = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
            ds_empty = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
            # The partitions' flags travel as a placeholder buffer's shape (a few bytes, never read or written):
            # a constexpr passed to gl.warp_specialize arrives as a tensor (figures/gpu/NOTES.md), a shape does
            # not. (DQ = 0, the dQ kernel's mode, travels as extent 8: an extent is a power of two, never 0.)
            cfg = gl.allocate_shared_memory(gl.int8, [1 + CAUSAL, DQ + 8 * (DQ == 0), 1 + VEC4],
                                            gl.SwizzledSharedLayout(1, 1, 1, order=[2, 1, 0]))
            for b in gl.static_range(2):
                mbarrier.init(ds_full.index(b), count=2)
                mbarrier.init(ds_empty.index(b), count=2)
            cargs = (dK_out, dV_out, L2, Dd, dQacc, q_smem, do_smem, k_smem, v_smem, ds_smem, kv_bar, qd_ready,
                     qd_empty, ds_full, ds_empty, cfg, bh, N, start_n, i0, Tr, n_steps, n_mask, qk_scale, sm_scale)
            pargs = (desc_q, desc_do, desc_k, desc_v, q_smem, do_smem, k_smem, v_smem, kv_bar, kv_empty, qd_ready,
                     qd_empty, cfg, N, first, n_tiles, step)
            gl.warp_specialize([(_k3b_consumer0, cargs), (_k3b_consumer1, cargs), (_k3b_producer, pargs)],
                               [4, 1], [CONSUMER_REGS, 24])


    # ----------------------------------------------------------------------------------------
    # the dQ kernel (TilesB.dq = 0): FA2 Alg.2 l.15 as its own pass, one program per row block i that owns
    # dQ_i in registers and streams K_j, V_j (FA2 §3.2's alternative to the atomic adds; kernel 3's forward's
    # structure: a producer warp, two consumer warpgroups of 64 rows taking turns at the tensor cores)
    # ----------------------------------------------------------------------------------------

    @gluon.jit
    def _k3q_tile(tile, Tr, N, BLOCK_N: gl.constexpr, CAUSAL: gl.constexpr):
        # Which row block i (128 rows) of which (batch, head) bh the tile is, in the order of a (Tr, BH) grid;
        # causal, the longest rows first. Returns bh, the first row and the key blocks it visits (FA2 §3.1.1).
        bh = tile // Tr
        i = tile % Tr
        if CAUSAL:
            i = Tr - 1 - i
        start_m = i * 128
        n_full, n_blocks = _k3_kv_blocks(start_m, N, 128, BLOCK_N, CAUSAL)
        return bh, start_m, n_full, n_blocks

    @gluon.jit
    def _k3q_producer(desc_q, desc_do, desc_k, desc_v, q_smem, do_smem, k_smem, v_smem, q_bar, q_empty, k_ready,
                      v_ready, k_empty, v_empty, counter, cfg, N, Tr, first, n_tiles, step):
        # FA3 Alg.1's producer (one warp), for each of the program's tiles (one, or persistent first, first + step,
        # ...): Q_i and dO_i once both consumers are done with the previous tile's (FA2 Alg.2 l.9, for this row
        # block), then for each j, K_j and V_j (l.6) into slot it % STAGES once both consumers have released it (it
        # counts the K/V blocks of every tile so far); ROUND_SYNC: the round barrier after each tile's loads.
        BLOCK_N: gl.constexpr = k_smem.shape[1]
        CAUSAL: gl.constexpr = cfg.shape[0] == 2
        ROUND_SYNC: gl.constexpr = cfg.shape[3] == 2
        it = 0
        tc = 0
        for tile in range(first, n_tiles, step):
            bh, start_m, n_full, n_blocks = _k3q_tile(tile, Tr, N, BLOCK_N, CAUSAL)
            mbarrier.wait(q_empty, (tc - 1) & 1, pred=tc > 0)
            mbarrier.expect(q_bar, desc_q.block_type.nbytes + desc_do.block_type.nbytes)
            tma.async_copy_global_to_shared(desc_q, [bh * N + start_m, 0], q_bar, q_smem)
            tma.async_copy_global_to_shared(desc_do, [bh * N + start_m, 0], q_bar, do_smem)
            it = _k3_load_kv(desc_k, desc_v, k_smem, v_smem, k_ready, v_ready, k_empty, v_empty, bh * N, n_blocks, it)
            tc += 1
            if ROUND_SYNC:
                _k3ws_round_barrier(counter, tc, tile + step < n_tiles, n_tiles, step)

    @gluon.jit
    def _k3q_ds(S, dP, L_i, D_i, qk_scale, offs_m, offs_n, MASK: gl.constexpr):
        # FA2 Alg.2 l.11: P_ij (causal, masked on the diagonal's blocks only); l.14: dS_ij = P_ij ∘ (dP_ij − D_i).
        P = _k3b_p(S, L_i, qk_scale, offs_m, offs_n, MASK)
        return P * (dP - gl.expand_dims(D_i, 1))

    @gluon.jit
    def _k3q_consumer(dQ_out, L2, Dd, q_smem, do_smem, k_smem, v_smem, q_bar, q_empty, k_ready, v_ready, k_empty,
                      v_empty, turns, cfg, N, Tr, first, n_tiles, step, qk_scale, sm_scale, WG: gl.constexpr):
        # _k3q_compute_tile for each of the program's tiles: one, or (persistent) first, first + step, ...
        BLOCK_N: gl.constexpr = k_smem.shape[1]
        CAUSAL: gl.constexpr = cfg.shape[0] == 2
        it = 0
        tt = 0
        tc = 0
        for tile in range(first, n_tiles, step):
            bh, start_m, n_full, n_blocks = _k3q_tile(tile, Tr, N, BLOCK_N, CAUSAL)
            it, tt = _k3q_compute_tile(dQ_out, L2, Dd, q_smem, do_smem, k_smem, v_smem, q_bar, q_empty, k_ready,
                                       v_ready, k_empty, v_empty, turns, cfg, bh, N, start_m, n_full, n_blocks,
                                       qk_scale, sm_scale, it, tt, tc, WG)
            tc += 1

    @gluon.jit
    def _k3q_compute_tile(dQ_out, L2, Dd, q_smem, do_smem, k_smem, v_smem, q_bar, q_empty, k_ready, v_ready,
                          k_empty, v_empty, turns, cfg, bh, N, start_m, n_full, n_blocks, qk_scale, sm_scale, it, tt,
                          tc, WG: gl.constexpr):
        # FA2 Alg.2's dQ part on rows [start_m + 64·WG, + 64) of row block i, one warpgroup (4 warps). Step j
        # issues S_ij, dP_ij and dQ_i += dS_i(j−1) K_(j−1) together (FA3 Alg.2's order: the product of the
        # previous block's result runs while this block's exponentials and dS are computed). it counts the K/V
        # blocks of the program's tiles so far (block j sits in slot (it + j) % STAGES), tt this warpgroup's GEMM
        # issues (the ping-pong turns), tc the tiles (Q_i's phase). Returns it and tt after the tile.
        ROWS: gl.constexpr = 64
        STAGES: gl.constexpr = k_smem.shape[0]
        BLOCK_N: gl.constexpr = k_smem.shape[1]
        HEAD_D: gl.constexpr = k_smem.shape[2]
        CAUSAL: gl.constexpr = cfg.shape[0] == 2
        PINGPONG: gl.constexpr = cfg.shape[1] == 2
        QDO_REGS: gl.constexpr = cfg.shape[2] == 2
        dtype: gl.constexpr = k_smem.dtype
        s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                           instr_shape=[16, BLOCK_N, 16])
        acc_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                             instr_shape=[16, HEAD_D, 16])
        ds_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=acc_layout, k_width=2)
        row_layout: gl.constexpr = gl.SliceLayout(1, s_layout)
        col_layout: gl.constexpr = gl.SliceLayout(0, s_layout)
        my_turn, other_turn = _k3_ring_turns(turns, WG, 2)
        q_c = q_smem.slice(WG * ROWS, ROWS)  # this warpgroup's rows of Q_i, dO_i
        do_c = do_smem.slice(WG * ROWS, ROWS)
        bh64 = bh.to(gl.int64)
        offs_m = start_m + WG * ROWS + gl.arange(0, ROWS, layout=row_layout)
        # FA2 Alg.2 l.9: L_i, D_i into registers (before the wait for Q_i, dO_i, which hides their latency).
        L_i = gl.load(L2 + bh64 * N + offs_m)
        D_i = gl.load(Dd + bh64 * N + offs_m)
        # FA2 Alg.2 l.3 (for this row block only): dQ_i = 0 on chip, fp32.
        dQ = gl.zeros([ROWS, HEAD_D], gl.float32, acc_layout)
        # FA2 Alg.2 l.9: wait for Q_i and dO_i; l.6: for K_0, V_0.
        mbarrier.wait(q_bar, tc & 1)
        q_a = _k3_operand_a(q_c, s_layout, QDO_REGS)  # Q_i, dO_i: the A operands of every S, dP product
        do_a = _k3_operand_a(do_c, s_layout, QDO_REGS)
        s0 = it % STAGES
        mbarrier.wait(k_ready.index(s0), (it // STAGES) & 1)
        mbarrier.wait(v_ready.index(s0), (it // STAGES) & 1)
        # Block j = 0. FA2 Alg.2 l.10: S_i0 = Q_i K_0ᵀ; l.13: dP_i0 = dO_i V_0ᵀ; commit both.
        _k3_turn(my_turn, tt, WG == 0, PINGPONG)
        S_tok = warpgroup_mma(q_a, k_smem.index(s0).permute((1, 0)),
                              gl.zeros([ROWS, BLOCK_N], gl.float32, s_layout), use_acc=False, is_async=True)
        dP_tok = warpgroup_mma(do_a, v_smem.index(s0).permute((1, 0)),
                               gl.zeros([ROWS, BLOCK_N], gl.float32, s_layout), use_acc=False, is_async=True)
        if PINGPONG:
            mbarrier.arrive(other_turn, count=1)
        S = warpgroup_mma_wait(1, deps=(S_tok,))
        dP = warpgroup_mma_wait(0, deps=(dP_tok,))
        mbarrier.arrive(v_empty.index(s0), count=1)  # V_0 read (K_0 still is: dQ's product, next step)
        offs_n = gl.arange(0, BLOCK_N, layout=col_layout)
        # FA2 Alg.2 l.11, l.14: P_i0, dS_i0 (causal: masked; a no-op unless block 0 is crossed by the diagonal).
        dS = gl.convert_layout(_k3q_ds(S, dP, L_i, D_i, qk_scale, offs_m, offs_n, CAUSAL).to(dtype), ds_layout)
        # FA2 Alg.2 l.8: for each further column block j (causal: up to the diagonal).
        for j in range(1, n_blocks):
            s = (it + j) % STAGES
            sp = (it + j - 1) % STAGES
            mbarrier.wait(k_ready.index(s), ((it + j) // STAGES) & 1)
            mbarrier.wait(v_ready.index(s), ((it + j) // STAGES) & 1)
            _k3_turn(my_turn, tt + j, WG == 0, PINGPONG)
            # FA2 Alg.2 l.10: S_ij = Q_i K_jᵀ; commit, do not wait.
            S_tok = warpgroup_mma(q_a, k_smem.index(s).permute((1, 0)),
                                  gl.zeros([ROWS, BLOCK_N], gl.float32, s_layout), use_acc=False, is_async=True)
            # FA2 Alg.2 l.13: dP_ij = dO_i V_jᵀ; commit, do not wait.
            dP_tok = warpgroup_mma(do_a, v_smem.index(s).permute((1, 0)),
                                   gl.zeros([ROWS, BLOCK_N], gl.float32, s_layout), use_acc=False, is_async=True)
            # FA2 Alg.2 l.15 for the previous block: dQ_i += dS_i(j−1) K_(j−1) (dS from registers); commit.
            dQ_tok = warpgroup_mma(dS, k_smem.index(sp), dQ, is_async=True)
            if PINGPONG:
                mbarrier.arrive(other_turn, count=1)  # the other warpgroup's GEMMs may go next
            # Wait for S_ij only (dP_ij and the dQ product stay in flight).
            S = warpgroup_mma_wait(2, deps=(S_tok,))
            offs_n = j * BLOCK_N + gl.arange(0, BLOCK_N, layout=col_layout)
            # FA2 Alg.2 l.11: P_ij = exp2(S_ij·τ·log2 e − L_i), under dP_ij; then wait for dP_ij, release V_j.
            P = gl.exp2(S * qk_scale - gl.expand_dims(L_i, 1))
            if CAUSAL:
                if j >= n_full:  # the diagonal's blocks: key > query → P = 0
                    P = gl.where(gl.expand_dims(offs_m, 1) >= gl.expand_dims(offs_n, 0), P, 0.0)
            dP = warpgroup_mma_wait(1, deps=(dP_tok,))
            mbarrier.arrive(v_empty.index(s), count=1)
            # FA2 Alg.2 l.14: dS_ij = P_ij ∘ (dP_ij − D_i), while the dQ product runs.
            dS_next = (P * (dP - gl.expand_dims(D_i, 1))).to(dtype)
            # Wait for dQ's product; K_(j−1) is no longer read: release its slot.
            dQ, dS = warpgroup_mma_wait(0, deps=(dQ_tok, dS))
            mbarrier.arrive(k_empty.index(sp), count=1)
            dS = gl.convert_layout(dS_next, ds_layout)
        # FA2 Alg.2 l.15 for the last block: dQ_i += dS_i,last K_last; commit and wait.
        last = (it + n_blocks - 1) % STAGES
        _k3_turn(my_turn, tt + n_blocks, WG == 0, PINGPONG)
        dQ_tok = warpgroup_mma(dS, k_smem.index(last), dQ, is_async=True)
        if PINGPONG:
            mbarrier.arrive(other_turn, count=1)
        dQ, dS = warpgroup_mma_wait(0, deps=(dQ_tok, dS))
        # The tile's last product is done: release K_last's slot (read by nothing after it) and Q_i, dO_i, so the
        # producer may load the program's next tile (one program a tile: nobody waits for these).
        mbarrier.arrive(k_empty.index(last), count=1)
        mbarrier.arrive(q_empty, count=1)
        # FA2 Alg.2 l.20 (for row block i): dQ_i times τ, in the inputs' dtype, written to HBM once.
        offs_r = start_m + WG * ROWS + gl.arange(0, ROWS, layout=gl.SliceLayout(1, acc_layout))
        offs_d = gl.arange(0, HEAD_D, layout=gl.SliceLayout(0, acc_layout))
        off = bh64 * N * HEAD_D + gl.expand_dims(offs_r, 1) * HEAD_D + gl.expand_dims(offs_d, 0)
        gl.store(dQ_out + off, (dQ * sm_scale).to(dQ_out.dtype.element_ty))
        return it + n_blocks, tt + n_blocks + 1

    @gluon.jit
    def _k3q_consumer0(dQ_out, L2, Dd, q_smem, do_smem, k_smem, v_smem, q_bar, q_empty, k_ready, v_ready, k_empty,
                       v_empty, turns, cfg, N, Tr, first, n_tiles, step, qk_scale, sm_scale):
        _k3q_consumer(dQ_out, L2, Dd, q_smem, do_smem, k_smem, v_smem, q_bar, q_empty, k_ready, v_ready, k_empty,
                      v_empty, turns, cfg, N, Tr, first, n_tiles, step, qk_scale, sm_scale, 0)

    @gluon.jit
    def _k3q_consumer1(dQ_out, L2, Dd, q_smem, do_smem, k_smem, v_smem, q_bar, q_empty, k_ready, v_ready, k_empty,
                       v_empty, turns, cfg, N, Tr, first, n_tiles, step, qk_scale, sm_scale):
        _k3q_consumer(dQ_out, L2, Dd, q_smem, do_smem, k_smem, v_smem, q_bar, q_empty, k_ready, v_ready, k_empty,
                      v_empty, turns, cfg, N, Tr, first, n_tiles, step, qk_scale, sm_scale, 1)

    @gluon.jit
    def _k3q_kernel(desc_q, desc_do, desc_k, desc_v, L2, Dd, dQ_out, counter, N, qk_scale, sm_scale, BH,
                    HEAD_D: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr, CAUSAL: gl.constexpr,
                    PINGPONG: gl.constexpr, QDO_REGS: gl.constexpr, PERSISTENT: gl.constexpr,
                    ROUND_SYNC: gl.constexpr, CONSUMER_REGS: gl.constexpr, num_warps: gl.constexpr):
        # One program per row block i (128 rows) of one (batch, head) bh, the grid (Tr, BH); causal: the longest
        # rows first. PERSISTENT: one program per SM, taking the tiles of that grid first, first + step, ...;
        # ROUND_SYNC: with a barrier of the producer warps on `counter` between rounds (kernel3.round_sync).
        # Default partition: consumer warpgroup 0; workers: warpgroup 1, the producer warp.
        BLOCK_M: gl.constexpr = 128
        Tr = N // BLOCK_M
        n_tiles = BH * Tr
        first, step = _k3_program_tiles(n_tiles, PERSISTENT)
        dtype: gl.constexpr = desc_q.dtype
        q_smem = gl.allocate_shared_memory(dtype, [BLOCK_M, HEAD_D], desc_q.layout)
        do_smem = gl.allocate_shared_memory(dtype, [BLOCK_M, HEAD_D], desc_do.layout)
        k_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_D], desc_k.layout)
        v_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_D], desc_v.layout)
        q_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
        q_empty = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
        k_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        v_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        k_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        v_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        turns = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())  # _k3_ring_turns
        # The flags travel to the partitions as a placeholder buffer's shape (as in _k3b_dkdv_kernel).
        cfg = gl.allocate_shared_memory(gl.int8, [1 + CAUSAL, 1 + PINGPONG, 1 + QDO_REGS, 1 + ROUND_SYNC],
                                        gl.SwizzledSharedLayout(1, 1, 1, order=[3, 2, 1, 0]))
        mbarrier.init(q_bar, count=1)
        mbarrier.init(q_empty, count=2)  # one arrival from each consumer warpgroup, after its tile's last product
        for w in gl.static_range(2):
            mbarrier.init(turns.index(w), count=1)
        for s in gl.static_range(STAGES):
            mbarrier.init(k_ready.index(s), count=1)
            mbarrier.init(v_ready.index(s), count=1)
            mbarrier.init(k_empty.index(s), count=2)  # one arrival from each consumer warpgroup
            mbarrier.init(v_empty.index(s), count=2)
        cargs = (dQ_out, L2, Dd, q_smem, do_smem, k_smem, v_smem, q_bar, q_empty, k_ready, v_ready, k_empty,
                 v_empty, turns, cfg, N, Tr, first, n_tiles, step, qk_scale, sm_scale)
        pargs = (desc_q, desc_do, desc_k, desc_v, q_smem, do_smem, k_smem, v_smem, q_bar, q_empty, k_ready,
                 v_ready, k_empty, v_empty, counter, cfg, N, Tr, first, n_tiles, step)
        gl.warp_specialize([(_k3q_consumer0, cargs), (_k3q_consumer1, cargs), (_k3q_producer, pargs)],
                           [4, 1], [CONSUMER_REGS, 24])

# --------------------------------------------------------------------------------------------
# launcher: kernel 2's pre-pass, this dK/dV kernel (with atomic dQ), kernel 2's dQ scaling
# --------------------------------------------------------------------------------------------

def backward(q, k, v, o, L2, do, causal: bool, scale: float, tiles: TilesB | None = None):
    """dq, dk, dv for kernel 3's (or kernel 2's) forward outputs o and L2 (base-2 LSE), on contiguous
    (B, H, N, d) CUDA tensors. Raises ValueError where :func:`plan` refuses the call."""
    import torch
    import triton

    from .kernel3 import descriptor, unavailable
    from .kernels import _bwd_dq_scale, _bwd_preprocess, _num_sms

    why = unavailable(q.device)
    if why:
        raise RuntimeError(f"kernel 3 is unavailable: {why}")
    B, H, N, d = q.shape
    t, why = plan(d, N, k.shape[2], str(q.dtype).removeprefix("torch."), causal, tiles=tiles)
    if why:
        raise ValueError(f"kernel 3's backward cannot run this call: {why}")
    q, k, v, o, do = (x.contiguous() for x in (q, k, v, o, do))
    D = torch.empty((B, H, N), device=q.device, dtype=torch.float32)
    atomic = t.dq != 0
    dq_acc = torch.empty(q.shape, device=q.device, dtype=torch.float32) if atomic else D  # dq = 0: unused
    # FA2 Alg.2 l.4 (and l.3, dQ = 0 in HBM, for the atomic adds): D = rowsum(dO ∘ O): kernel 2's pre-pass.
    _bwd_preprocess[(triton.cdiv(N, 32), B * H)](o, do, D, dq_acc, N, 0, HEAD_D=d, D_PAD=d, BLOCK_M=32,
                                                 ATOMIC_DQ=atomic)  # one launch: kernel3.choose bounds B·H
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    descs = [descriptor(q, t.block_m), descriptor(do, t.block_m), descriptor(k, t.block_n), descriptor(v, t.block_n)]
    # the fp32 dQ's TMA reduce-adds (pipe with dq = 4), BLOCK_M rows of d a box; otherwise a placeholder never used
    descs.append(descriptor(dq_acc, t.block_m) if t.tma_dq else descs[0])
    main = torch.cuda.current_stream(q.device)
    if t.side_stream:
        # TilesB.side_stream: the dQ kernel below runs on a second stream, at the same time as the dK/dV kernel.
        # They are independent (both read Q, K, V, dO, L, D; one writes dK, dV, the other dQ), and each is a
        # whole number of waves and a few CTAs (4096 CTAs on 132 SMs: 31.03 waves), so one after the other each
        # ends on a wave of 4 CTAs with 128 SMs idle. Side by side, the other kernel's CTAs fill those SMs.
        side = _side_stream(q.device)
        side.wait_stream(main)  # after the pre-pass's D
    # FA2 Alg.2 l.5-19 (dq = 0: without l.15): dK, dV (and dQ by atomic adds).
    grid = (N // t.block_n, B * H)
    if t.persistent:  # one program per SM (one fits: its registers), each looping over the column blocks
        grid = (min(grid[0] * grid[1], _num_sms(q.device)),)
    _k3b_dkdv_kernel[grid](*descs, L2, D, dq_acc, dk, dv, N, scale * LOG2E, scale, B * H, HEAD_D=d,
                           BLOCK_M=t.block_m, BLOCK_N=t.block_n, STAGES=t.stages, CAUSAL=causal, DQ=t.dq, VEC4=t.vec4,
                           PIPE=t.pipe, WIDE=t.wide, PERSISTENT=t.persistent, KV_REGS=t.kv_regs,
                           CONSUMER_REGS=BWD_REGS, num_warps=4)
    if atomic:
        # FA2 Alg.2 l.20: dQ times τ, cast: kernel 2's dq_scale kernel, unchanged.
        n = dq.numel()
        _bwd_dq_scale[(triton.cdiv(n, 1024),)](dq_acc, dq, n, scale, BLOCK=1024)
    else:
        # FA2 Alg.2 l.15 (and l.20) as its own kernel: dQ_i = τ Σ_j dS_ij K_j, one program per 128 rows.
        tq = t.dq_tiles
        sync = dq_round_sync(tq, N, d, causal, q.element_size())
        grid = (N // 128, B * H)
        if sync:  # persistent: one program per SM; each must be resident for the barrier, so not beside dK/dV
            grid = (min(grid[0] * grid[1], _num_sms(q.device)),)
        counter = torch.zeros(1, device=q.device, dtype=torch.int32) if sync else D  # D: a placeholder, never read
        with torch.cuda.stream(side if t.side_stream and not sync else main):
            _k3q_kernel[grid](descriptor(q, 128), descriptor(do, 128), descriptor(k, tq.block_n),
                              descriptor(v, tq.block_n), L2, D, dq, counter, N, scale * LOG2E, scale, B * H,
                              HEAD_D=d, BLOCK_N=tq.block_n, STAGES=tq.stages, CAUSAL=causal, PINGPONG=tq.pingpong,
                              QDO_REGS=tq.qdo_regs, PERSISTENT=sync, ROUND_SYNC=sync, CONSUMER_REGS=BWD_REGS,
                              num_warps=4)
        if t.side_stream:
            main.wait_stream(side)  # the caller's stream sees dQ, and nothing it frees is still read on side
    return dq, dk, dv


_SIDE_STREAMS = {}


def _side_stream(device):
    """One second stream per device for the dQ kernel (TilesB.side_stream), made once."""
    import torch
    key = torch.device(device).index
    if key not in _SIDE_STREAMS:
        _SIDE_STREAMS[key] = torch.cuda.Stream(device)
    return _SIDE_STREAMS[key]


# --------------------------------------------------------------------------------------------
# ``python -m flashref.gpu.kernel3_bwd``: forward+backward against kernel 2 and cuDNN, one process
# --------------------------------------------------------------------------------------------

def _parse_tiles(text: str):
    """``BM,BN,stages[,dq[,vec4[,qBN,qstages,qpingpong[,pipe[,persistent]]]]]`` (TilesB's fields, vec4 as 0 or
    1; then, for dq = 0, the dQ kernel's TilesQ, TilesB.pipe and TilesB.persistent), then any ``name=0|1`` of
    TilesB's ``kv_regs``, ``side_stream`` and ``wide`` and TilesQ's ``qdo_regs``."""
    parts = text.split(",")
    flags = dict(p.split("=") for p in parts if "=" in p)
    names = ("kv_regs", "qdo_regs", "side_stream", "wide")
    unknown = set(flags) - set(names)
    if unknown:
        raise ValueError(f"tiles {text!r}: unknown field(s) {sorted(unknown)} ({', '.join(names)})")
    x = [int(v) for v in parts if "=" not in v]
    kv_regs, qdo_regs, side, wide = (bool(int(flags.get(k, 0))) for k in names)
    if len(x) > 5:
        return text, TilesB(x[0], x[1], x[2], x[3], bool(x[4]), TilesQ(x[5], x[6], bool(x[7]), qdo_regs),
                            *(bool(v) for v in x[8:10]), kv_regs=kv_regs, side_stream=side, wide=wide)
    return text, TilesB(*x[:4], *(bool(v) for v in x[4:]), kv_regs=kv_regs, side_stream=side, wide=wide,
                        dq_tiles=TilesQ(qdo_regs=qdo_regs))


def _bench(argv=None) -> int:
    """Time, per shape and in turn (``--rounds`` interleaved rounds, each a ``do_bench`` median):
    SDPA cuDNN, kernel 2 (``gpu.attention``), kernel 3's forward with kernel 2's backward (``k3f+k2b``), and
    kernel 3's forward with this backward (``k3``, and ``k3[tiles]`` for each extra ``--tiles``), for
    forward+backward (``fwd_bwd``) and the backward alone (``bwd``, one forward then ``retain_graph``
    backwards). Shapes as ``bench``: 16384 tokens, hidden 2048. Before timing, every backward's gradients are
    compared with kernel 2's on the shape. ``--out`` writes the rows (JSON)."""
    import argparse
    import time

    import torch
    import triton

    from . import kernel3
    from .bench import HIDDEN, TOKENS, save_rows

    p = argparse.ArgumentParser(prog="python -m flashref.gpu.kernel3_bwd")
    p.add_argument("--d", default="128,64")
    p.add_argument("--N", default="4096,8192,16384")
    p.add_argument("--causal", default="both", choices=("both", "true", "false"))
    p.add_argument("--dtype", default="float16", choices=DTYPES)
    p.add_argument("--modes", default="fwd_bwd,bwd")
    p.add_argument("--tiles", nargs="*", default=[],
                   help="extra backward tiles to time: BM,BN,stages[,dq[,vec4[,qBN,qstages,qpp[,pipe[,persist]]]]] "
                   "(TilesB, TilesQ)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--rep", type=int, default=40)
    p.add_argument("--drop", default="", help="base backends not to time, comma-separated (e.g. k3f+k2b)")
    p.add_argument("--out", default=None)
    a = p.parse_args(argv)
    if kernel3.cannot_run_here():
        return 1
    dtype = getattr(torch, a.dtype)
    causals = {"both": (False, True), "true": (True,), "false": (False,)}[a.causal]
    extra = [_parse_tiles(x) for x in a.tiles]
    rows, t0 = [], time.time()
    for d in (int(x) for x in a.d.split(",")):
        for causal in causals:
            for N in (int(x) for x in a.N.split(",")):
                rows += _bench_shape(d, N, causal, dtype, a, extra)
                torch.cuda.empty_cache()
    meta = dict(device=torch.cuda.get_device_name(0), torch=torch.__version__, triton=triton.__version__,
                cuda=torch.version.cuda, dtype=a.dtype, tokens=TOKENS, hidden=HIDDEN, rounds=a.rounds, rep_ms=a.rep,
                timing=f"median of {a.rounds} interleaved rounds (backends of a shape in turn), each a "
                f"triton.testing.do_bench median, warmup 25 ms, rep {a.rep} ms",
                flop_convention="fwd 4BHN^2d (/2 causal); fwd_bwd 3.5x, bwd 2.5x that",
                seconds=round(time.time() - t0, 1))
    save_rows(a.out, meta, rows)
    return 0


def _bench_shape(d, N, causal, dtype, a, extra):
    """One shape of :func:`_bench`: check every backward against kernel 2's, then time; returns the rows."""
    import statistics

    import torch
    import torch.nn.functional as F  # noqa: N812
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from triton.testing import do_bench

    from . import attention as attention2
    from . import kernel3
    from .bench import HIDDEN, TOKENS, flops

    B, H = TOKENS // N, HIDDEN // d
    g = torch.Generator(device="cuda").manual_seed(N + d)
    q, k, v, do = (torch.randn(B, H, N, d, device="cuda", dtype=dtype, generator=g) for _ in range(4))
    q, k, v = (x.requires_grad_() for x in (q, k, v))

    def cudnn(q, k, v):
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

    fns = {"cudnn": cudnn, "kernel2": lambda q, k, v: attention2(q, k, v, causal=causal),
           "k3f+k2b": lambda q, k, v: kernel3.attention(q, k, v, causal=causal, backward3=False),
           "k3": lambda q, k, v: kernel3.attention(q, k, v, causal=causal, backward3=True)}

    def k3_tiles(t):
        class _F(torch.autograd.Function):
            @staticmethod
            def forward(ctx, q, k, v):
                o, L2 = kernel3.forward(q, k, v, causal, d ** -0.5)
                ctx.save_for_backward(q, k, v, o, L2)
                return o

            @staticmethod
            def backward(ctx, do_):
                return backward(*ctx.saved_tensors, do_.contiguous(), causal, d ** -0.5, tiles=t)
        return _F.apply

    for name in a.drop.split(","):
        if name not in ("cudnn", "kernel2"):  # the references stay
            fns.pop(name, None)
    for name, t in extra:
        if plan(d, N, N, a.dtype, causal, tiles=t)[1] is None:
            fns[f"k3[{name}]"] = k3_tiles(t)
    # gradients against kernel 2's, before timing
    ref = None
    for name in ("kernel2", *[n for n in fns if n.startswith("k3")]):
        fns[name](q, k, v).backward(do)
        gr = [x.grad.float() for x in (q, k, v)]
        q.grad = k.grad = v.grad = None
        if ref is None:
            ref = gr
            continue
        if name.startswith("k3"):  # run to run: bit-equal gradients? (dq = 0 has no atomic adds)
            fns[name](q, k, v).backward(do)
            same = all(bool(torch.equal(x.grad.float(), y)) for x, y in zip((q, k, v), gr))
            q.grad = k.grad = v.grad = None
            print(f"  bit-equal run to run: {same!s:5} {name} d={d} N={N} causal={causal}", flush=True)
        err = max(float((x - y).abs().max()) / max(1.0, float(y.abs().max())) for x, y in zip(gr, ref))
        if err > 2e-2 or not all(bool(torch.isfinite(x).all()) for x in gr):
            print(f"  MISMATCH {name} d={d} N={N} causal={causal}: rel max |grad - kernel 2's| = {err:.3g}")
    rows = []
    for mode in a.modes.split(","):
        runs = {}
        for name, f in fns.items():
            if mode == "fwd_bwd":
                runs[name] = (lambda f: lambda: f(q, k, v).backward(do))(f)  # noqa: B023 (bound by the outer lambda)
            else:
                runs[name] = (lambda o: lambda: o.backward(do, retain_graph=True))(f(q, k, v))
        times = {n: [] for n in runs}
        for _ in range(a.rounds):
            for n, r in runs.items():
                times[n].append(do_bench(r, warmup=25, rep=a.rep, grad_to_none=[q, k, v], return_mode="median"))
        fl = flops("fwd", B, H, N, d, causal) * (3.5 if mode == "fwd_bwd" else 2.5)
        tf = {n: fl / (statistics.median(ms) * 1e-3) / 1e12 for n, ms in times.items()}
        for n, ms in times.items():
            rows.append(dict(mode=mode, d=d, N=N, causal=causal, dtype=a.dtype, backend=n, B=B, H=H,
                             ms=round(statistics.median(ms), 5), tflops=round(tf[n], 1),
                             rounds_ms=[round(x, 5) for x in ms], x_cudnn=round(tf[n] / tf["cudnn"], 3),
                             x_kernel2=round(tf[n] / tf["kernel2"], 3)))
        print(f"{mode:7} d={d:3} causal={causal!s:5} N={N:5}  " + "  ".join(
            f"{n}={tf[n]:.0f} ({tf[n] / tf['cudnn']:.2f}x cu, {tf[n] / tf['kernel2']:.2f}x k2)" for n in tf),
            flush=True)
    return rows


if __name__ == "__main__":
    import sys
    sys.exit(_bench(sys.argv[1:]))
