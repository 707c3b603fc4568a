"""Parallelism: how many independent work items each algorithm offers, and what warps say to each other.

**Across the GPU** (FlashAttention-2 §3.2). A thread block runs on one streaming multiprocessor
(SM). FlashAttention gives one thread block to each (batch, head) pair: ``batch·heads`` items.
FlashAttention-2 also splits the sequence: its forward's outer loop over row blocks is
"embarrassingly parallel", so it offers ``batch·heads·Tr`` items; its backward gives a thread block
to each column block (dK_j, dV_j are private to it; dQ is shared through atomic adds):
``batch·heads·Tc`` items. The GPU runs them in *waves* of ``SMs·blocks_per_sm`` thread blocks; a last,
partly filled wave leaves SMs idle (wave quantisation)::

    waves = ⌈items / slots⌉,   efficiency = items / (waves · slots)

This counts thread blocks only: it assumes equal work per item (true without a causal mask),
ignores that a short wave's blocks may finish early, and ignores L2 and scheduling effects.

**Inside one thread block** (§3.3). Four warps share the block's shared memory. FlashAttention
splits K and V across the warps ("split-K"): each warp gets a slice of the keys, so each ends with
a *partial* softmax state (m, ℓ, Õ) for all Br rows; the partials are written to shared memory,
the warps synchronise, and the partials are read back and merged. FlashAttention-2 splits Q
("split-Q"): each warp owns Br/W rows and sees every key, so its (m, ℓ, Õ) is already final and the
warps never exchange results. :func:`smem_traffic` runs both on the simulated memory (a
:class:`~flashref.memory.Memory` whose "HBM" plays the block's shared memory and whose loads are
shared-memory-to-register reads) and counts what moves.

Example::

    parallelism.occupancy("flash2", "forward", batch=1, heads=16, Nq=4096, gpu="A100")
    parallelism.smem_traffic("split-K", Br=128, Bc=128, d=64)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from . import hardware
from .memory import Memory
from .problem import _nonnegative_int, positive_int
from .softmax import finite_or_zero

__all__ = ["work_items", "waves", "efficiency", "occupancy", "sm_count", "SmemTraffic", "smem_traffic",
           "DEFAULT_BLOCK", "SCHEMES", "DEFAULT_SMS", "wave_utilisation", "choose_num_splits",
           "resolve_num_splits", "check_num_splits"]

# H100 SXM5 has 132 SMs (NVIDIA H100 whitepaper; also flashref.hardware.H100.sms).
DEFAULT_SMS = 132

# FlashAttention-2's CUDA kernels use 128-row blocks in the forward (flash-attention issue #437:
# "each thread block will take care of 128 rows (or sometimes 64 rows)") and 128-key column
# blocks in the backward for d <= 64 (csrc/flash_attn/src/flash_bwd_launch_template.h).
DEFAULT_BLOCK = 128
SCHEMES = ("split-K", "split-Q")


def sm_count(gpu) -> int:
    """SMs of a GPU name ("A100", "H100", ...) or a :class:`flashref.hardware.GPU`, or an int as is."""
    if isinstance(gpu, (int, np.integer)) and not isinstance(gpu, bool):
        if gpu <= 0:
            raise ValueError(f"gpu: expected a positive SM count, got {gpu}")
        return int(gpu)
    return hardware.get(gpu, "gpu").sms  # A100: 108 SMs, H100 SXM5: 132 SMs (NVIDIA whitepapers; see hardware.py)


def _pos(x, name):
    """A positive integer by the package's one rule: a bool or a float is a TypeError, 0 or less a ValueError."""
    return positive_int(x, name)


def work_items(algorithm: str, direction: str, *, batch: int, heads: int, Nq: int, Nk: int | None = None,
               Br: int = DEFAULT_BLOCK, Bc: int = DEFAULT_BLOCK) -> int:
    """Independent thread blocks: flash1 ``batch·heads``; flash2 forward ``·Tr``, backward ``·Tc``."""
    batch, heads, Nq = _pos(batch, "batch"), _pos(heads, "heads"), _pos(Nq, "Nq")
    Nk = Nq if Nk is None else _pos(Nk, "Nk")
    Br, Bc = _pos(Br, "Br"), _pos(Bc, "Bc")
    if direction not in ("forward", "backward"):
        raise ValueError(f"direction: expected 'forward' or 'backward', got {direction!r}")
    if algorithm == "flash1":
        return batch * heads  # one thread block per (batch, head), both passes
    if algorithm == "flash2":
        Tr, Tc = math.ceil(Nq / Br), math.ceil(Nk / Bc)
        return batch * heads * (Tr if direction == "forward" else Tc)
    raise ValueError(f"algorithm: expected 'flash1' or 'flash2', got {algorithm!r}")


def waves(items: int, slots: int) -> int:
    """Number of waves: ``⌈items / slots⌉``."""
    return -(-_pos(items, "items") // _pos(slots, "slots"))


def efficiency(items: int, slots: int) -> float:
    """Fraction of SM time doing work: ``items / (waves · slots)``; 1.0 only for whole waves."""
    return items / (waves(items, slots) * slots)


def occupancy(algorithm: str, direction: str, *, batch: int, heads: int, Nq: int, gpu="A100",
              Nk: int | None = None, Br: int = DEFAULT_BLOCK, Bc: int = DEFAULT_BLOCK,
              blocks_per_sm: int = 1) -> dict:
    """Work items, SM slots, waves and wave efficiency of one pass on one GPU."""
    items = work_items(algorithm, direction, batch=batch, heads=heads, Nq=Nq, Nk=Nk, Br=Br, Bc=Bc)
    slots = sm_count(gpu) * _pos(blocks_per_sm, "blocks_per_sm")
    return {"items": items, "slots": slots, "waves": waves(items, slots), "efficiency": efficiency(items, slots)}


# ------------------------------------------------------------------ split-KV decoding's schedule
def wave_utilisation(work_items: int, sms: int = DEFAULT_SMS) -> dict:
    """Waves and SM utilisation of ``work_items`` independent thread blocks on ``sms`` SMs.

    One work item per SM at a time (a FlashAttention thread block uses most of an SM's shared
    memory), so the items run in ``waves = ⌈items / sms⌉`` and the last wave may leave SMs idle:
    ``utilisation = items / (waves · sms)`` — wave quantisation.
    """
    work_items, sms = positive_int(work_items, "work_items"), positive_int(sms, "sms")
    return {"work_items": work_items, "sms": sms, "waves": waves(work_items, sms),
            "busy_sms_first_wave": min(work_items, sms), "utilisation": efficiency(work_items, sms)}


def choose_num_splits(items: int, Tc: int, Nk: int, sms: int = DEFAULT_SMS, max_splits: int = 128) -> int:
    """A default ``num_splits`` for split-KV decoding: the fewest splits within 85% of the best utilisation.

    ``items`` is the number of work items without splitting (heads × query blocks). Splitting
    below one K/V block per split buys nothing, so at most ``Tc`` splits (and at most ``Nk``).
    Already a full wave or more: 1 split. This mirrors the idea of the FlashAttention repository's
    heuristic (fill the SMs in whole waves, prefer fewer splits because each adds merge traffic);
    the code is our own.
    """
    items, sms = _nonnegative_int(items, "items"), positive_int(sms, "sms")
    Tc, Nk, max_splits = positive_int(Tc, "Tc"), positive_int(Nk, "Nk"), positive_int(max_splits, "max_splits")
    if items == 0 or items >= sms:  # nothing to run (an empty batch), or already a full wave
        return 1
    limit = max(1, min(Tc, Nk, max_splits))
    util = {s: wave_utilisation(items * s, sms)["utilisation"] for s in range(1, limit + 1)}
    best = max(util.values())
    return min(s for s, u in util.items() if u >= 0.85 * best)


def resolve_num_splits(num_splits, heads: int, Tr: int, Tc: int, Nk: int, sms) -> int:
    """Check ``num_splits`` (a positive int ≤ Nk) or pick one with :func:`choose_num_splits`."""
    sms = DEFAULT_SMS if sms is None else positive_int(sms, "sms")
    if num_splits is None:
        items = heads * Tr  # work items without splitting
        # a full wave already takes 1 split, however many items (choose_num_splits caps its items at 2**53, a count
        # the caller never passed: its error would name "items", not heads or Nq)
        return 1 if items >= sms else choose_num_splits(items, Tc, Nk, sms)
    return check_num_splits(num_splits, Nk)


def check_num_splits(num_splits, Nk: int) -> int:
    """``num_splits`` for ``Nk`` keys: a positive int, at most ``Nk`` (each split needs a key)."""
    num_splits = positive_int(num_splits, "num_splits")
    if num_splits > Nk:
        raise ValueError(f"num_splits: expected at most Nk = {Nk} splits (each split needs a key), got {num_splits}")
    return num_splits


# ------------------------------------------------------------------ inside one thread block
@dataclass
class SmemTraffic:
    """Elements moved through one thread block's shared memory, and the barriers it needs.

    ``operand_reads``: Q, K, V tiles read from shared memory into warp registers.
    ``exchange_writes`` / ``exchange_reads``: partial results written and read back between warps.
    ``exchange_buffer``: shared memory the partials occupy (elements). ``syncs``: barriers around
    the exchange of partials only (both schemes also need one after each HBM-to-shared-memory tile
    load, not counted here). ``per_tile`` divides by the number of (i, j) tiles.
    """

    scheme: str
    warps: int
    tiles: int
    operand_reads: int
    exchange_writes: int
    exchange_reads: int
    exchange_buffer: int
    syncs: int

    @property
    def total(self) -> int:
        return self.operand_reads + self.exchange_writes + self.exchange_reads

    def per_tile(self) -> dict:
        return {k: getattr(self, k) / self.tiles
                for k in ("operand_reads", "exchange_writes", "exchange_reads", "syncs", "total")}


def _tile_state(Q, K, V, scale):
    """(m, ℓ, Õ) of one tile: rowmax, rowsum of e^{S−m}, and e^{S−m} V (unnormalised)."""
    S = scale * Q @ K.T  # (rows, keys)
    m = S.max(axis=-1)
    P = np.exp(S - finite_or_zero(m)[:, None])
    return m, P.sum(axis=-1), P @ V


def smem_traffic(scheme: str, *, Br: int = DEFAULT_BLOCK, Bc: int = DEFAULT_BLOCK, d: int = 64, warps: int = 4,
                 inner: int = 4, seed: int = 0, return_states: bool = False):
    """Run ``inner`` tiles of one thread block with ``warps`` warps and count its shared-memory traffic.

    ``scheme="split-K"`` (FlashAttention): the block holds K_j, V_j for its whole inner loop over
    ``inner`` query tiles Q_i; warp w keeps its key slice of K_j, V_j in registers (read once) and
    reads every Q_i whole. Each warp writes its partial (m, ℓ, Õ) for all Br rows, a barrier,
    then warp w reads back the W partials of its Br/W rows and merges them by log-sum-exp.
    ``scheme="split-Q"`` (FlashAttention-2): the block holds Q_i (each warp keeps its Br/W rows in
    registers, read once) over ``inner`` key tiles K_j, V_j, which every warp reads whole. Each
    warp's state is final for its rows: nothing is exchanged.

    Returns :class:`SmemTraffic` (and, with ``return_states``, the merged per-tile ``(m, ℓ, Õ)``
    and the same computed plainly, for checking).
    """
    if scheme not in SCHEMES:
        raise ValueError(f"scheme: expected one of {SCHEMES}, got {scheme!r}")
    Br, Bc, d, W, inner = (_pos(v, n) for v, n in ((Br, "Br"), (Bc, "Bc"), (d, "d"), (warps, "warps"),
                                                    (inner, "inner")))
    # split-Q splits the query rows Br across the warps; split-K splits the keys Bc, and then its merge splits
    # the rows Br again (each warp merges Br/W rows of the W partial states), so both must divide
    for name, split in (("Br", Br),) if scheme == "split-Q" else (("Bc", Bc), ("Br", Br)):
        if split % W:
            raise ValueError(f"warps: {scheme} splits {name}={split} across warps; expected a divisor of it, got {W}")
    # the seed checked here, by name: numpy's own refusal of a negative one names nothing
    rng = np.random.default_rng(_nonnegative_int(seed, "seed"))
    scale = 1.0 / math.sqrt(d)
    smem = Memory(None, 2, ())  # the block's shared memory; "loads" go to warp registers
    syncs = 0
    states, plain = [], []
    if scheme == "split-Q":
        Q_i = rng.standard_normal((Br, d))
        smem.input("Q", Q_i)
        rq = Br // W
        # Each warp reads its Br/W query rows once; they stay in registers for the whole loop.
        Q_w = [smem.load("Q", rows=(w * rq, (w + 1) * rq), as_=f"w{w}.Q") for w in range(W)]
        for _ in range(inner):
            K_j, V_j = rng.standard_normal((Bc, d)), rng.standard_normal((Bc, d))
            smem.input("K", K_j)
            smem.input("V", V_j)
            parts = []
            for w in range(W):
                K_ = smem.load("K", as_=f"w{w}.K")  # every warp reads all Bc keys
                V_ = smem.load("V", as_=f"w{w}.V")
                parts.append(_tile_state(Q_w[w], K_, V_, scale))  # final for rows of warp w
            states.append(tuple(np.concatenate(p) for p in zip(*parts)))
            plain.append(_tile_state(Q_i, K_j, V_j, scale))
        buffer = 0
    else:
        K_j, V_j = rng.standard_normal((Bc, d)), rng.standard_normal((Bc, d))
        smem.input("K", K_j)
        smem.input("V", V_j)
        ck, rq = Bc // W, Br // W
        # Each warp reads its Bc/W keys once; they stay in registers for the whole loop.
        KV_w = [(smem.load("K", rows=(w * ck, (w + 1) * ck), as_=f"w{w}.K"),
                 smem.load("V", rows=(w * ck, (w + 1) * ck), as_=f"w{w}.V")) for w in range(W)]
        # The exchange buffer: W partial states of Br rows each (allocated, not initialised).
        smem.output("m_part", (W * Br,))
        smem.output("l_part", (W * Br,))
        smem.output("O_part", (W * Br, d))
        buffer = W * Br * (d + 2)
        for _ in range(inner):
            Q_i = rng.standard_normal((Br, d))
            smem.input("Q", Q_i)
            for w in range(W):
                Q_ = smem.load("Q", as_=f"w{w}.Q")  # every warp reads all Br queries
                m_w, l_w, O_w = _tile_state(Q_, *KV_w[w], scale)  # partial: only keys of warp w
                rows = (w * Br, (w + 1) * Br)
                smem.store("m_part", m_w, rows=rows)
                smem.store("l_part", l_w, rows=rows)
                smem.store("O_part", O_w, rows=rows)
            syncs += 1  # __syncthreads(): every partial must be written before any is read
            merged = []
            for w in range(W):  # warp w merges rows [w·Br/W, (w+1)·Br/W) of the W partials
                ms, ls, Os = [], [], []
                for v in range(W):
                    rows = (v * Br + w * rq, v * Br + (w + 1) * rq)
                    ms.append(smem.load("m_part", rows=rows, as_=f"w{w}.m{v}"))
                    ls.append(smem.load("l_part", rows=rows, as_=f"w{w}.l{v}"))
                    Os.append(smem.load("O_part", rows=rows, as_=f"w{w}.O{v}"))
                m = np.max(ms, axis=0)
                a = [np.exp(mv - finite_or_zero(m)) for mv in ms]  # rescale each partial to the common max
                merged.append((m, sum(av * lv for av, lv in zip(a, ls)),
                               sum(av[:, None] * Ov for av, Ov in zip(a, Os))))
            syncs += 1  # the buffer is reused by the next tile: wait until every warp has read it
            states.append(tuple(np.concatenate(p) for p in zip(*merged)))
            plain.append(_tile_state(Q_i, K_j, V_j, scale))
    io = smem.report().by_tensor
    operand = sum(io[n].reads for n in ("Q", "K", "V") if n in io)
    ex_w = sum(io[n].writes for n in ("m_part", "l_part", "O_part") if n in io)
    ex_r = sum(io[n].reads for n in ("m_part", "l_part", "O_part") if n in io)
    out = SmemTraffic(scheme, W, inner, operand, ex_w, ex_r, buffer, syncs)
    return (out, states, plain) if return_states else out
