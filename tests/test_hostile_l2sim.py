"""Hostile tests of the simulated L2 (flashref.l2) and the CTA schedules (flashref.schedule): the cache against a
brute-force LRU, the one-speed machine's two descriptions (simulate, launch_times) against each other and against
a hand-run list schedule, the docstrings' closed forms at small sizes, and bad input named, never silently used."""

from __future__ import annotations

import dataclasses
import heapq
import importlib
import math
import random

import numpy as np
import pytest

from flashref import iomodel, schedule
from flashref.l2 import PRESETS, L2Cache, L2Spec, preset

D = importlib.import_module("flashref.iomodel.dram")  # the module; iomodel.dram is the function


# ----------------------------------------------------------------------------- the cache against a brute force


def _brute_lru(trace, capacity, line):
    """A write-back, write-allocate LRU by the book: a list of [key, bytes, dirty], the most recent last."""
    held, st = [], dict(hits=0, misses=0, reads=0, writes=0, dram_reads=0, dram_writes=0)
    for key, n, w in trace:
        n = -(-n // line) * line
        st["writes" if w else "reads"] += n
        e = next((x for x in held if x[0] == key), None)
        if e is not None:
            held.remove(e)
            e[2] = e[2] or w
            held.append(e)
            st["hits"] += 1
            continue
        st["misses"] += 1
        st["dram_reads"] += 0 if w else n
        held.append([key, n, w])
        while sum(x[1] for x in held) > capacity:
            _, m, dirty = held.pop(0)
            st["dram_writes"] += m if dirty else 0
    return st, sum(x[1] for x in held if x[2])


def test_cache_matches_a_brute_force_lru_on_random_traces():
    rng = random.Random(20240611)
    for _ in range(400):
        line = rng.choice([1, 4, 32, 128])
        capacity = rng.randint(1, 12) * line
        sizes = {key: rng.randint(1, 3 * line) for key in range(rng.randint(1, 10))}
        trace = [(key := rng.randrange(len(sizes)), sizes[key], rng.random() < 0.3) for _ in range(rng.randint(0, 50))]
        cache = L2Cache(capacity, line)
        got = [cache.access(*t) for t in trace]
        want, dirty = _brute_lru(trace, capacity, line)
        assert {f: getattr(cache, f) for f in want} == want, trace
        assert cache.dirty_bytes() == dirty and got.count(True) == want["hits"]
        assert cache.used == sum(n for n, _ in cache._blocks.values()) <= capacity


def test_whole_tiles_are_lines_loaded_in_order():
    """The docstring's shortcut: a tile as one block reads from DRAM exactly what its lines, touched one by one in
    order, would, and writes the same bytes in all (evicted dirty plus still dirty at the end)."""
    rng = random.Random(7)
    for _ in range(400):
        lines = {key: rng.randint(1, 5) for key in range(rng.randint(1, 8))}
        cap = rng.randint(1, 20)
        trace = [(rng.randrange(len(lines)), rng.random() < 0.3) for _ in range(rng.randint(0, 40))]
        tiles, by_line = L2Cache(cap), L2Cache(cap)
        for key, w in trace:
            tiles.access(key, lines[key], w)
            for i in range(lines[key]):
                by_line.access((key, i), 1, w)
        assert tiles.dram_reads == by_line.dram_reads
        assert tiles.dram_writes + tiles.dirty_bytes() == by_line.dram_writes + by_line.dirty_bytes()


def test_edge_traces():
    empty = L2Cache(64)
    assert (empty.hits, empty.misses, empty.dram_reads, empty.dram_writes, empty.dirty_bytes()) == (0, 0, 0, 0, 0)
    one = L2Cache(64, line_bytes=32)
    assert [one.access(2 ** 200, 1) for _ in range(5)] == [False] + [True] * 4  # a huge address is just a key
    assert (one.reads, one.dram_reads) == (5 * 32, 32)
    big = L2Cache(64)
    big.access("t", 100, write=True)  # a block larger than the cache passes through: written back at once
    assert (big.used, big.dram_writes, big.dirty_bytes()) == (0, 100, 0)
    with pytest.raises(TypeError, match="key"):
        L2Cache(64).access([1, 2], 8)


@pytest.mark.parametrize("capacity,line", [(100, 128), (300, 128), (50, 32)])
def test_capacity_must_be_whole_lines(capacity, line):
    """L2Cache(100, line_bytes=128) used to be a cache that can hold nothing: every access missed, silently."""
    with pytest.raises(ValueError, match="capacity.*line"):
        L2Cache(capacity, line_bytes=line)
    assert L2Cache(np.int64(2 * line), line_bytes=np.int32(line)).capacity == 2 * line


def test_no_policy_or_associativity_options():
    with pytest.raises(TypeError, match="policy"):
        L2Cache(1024, policy="fifo")


# ----------------------------------------------------------------------------- presets and specs


def test_presets():
    for gpu, mib in (("h100", 50), ("H200", 60), (np.str_("h100"), 50)):
        spec = preset(gpu)
        assert spec.capacity == mib * 2 ** 20 and spec.partitions == 2 and spec.sms == schedule.SMS
        assert spec.capacity % (spec.partitions * spec.line_bytes) == 0 and spec.line_bytes % spec.sector_bytes == 0
    for bad, exc in ((" h100", ValueError), ("a100", ValueError), (None, TypeError), (b"h100", TypeError)):
        with pytest.raises(exc, match="gpu"):
            preset(bad)
    assert set(PRESETS) == {"h100", "h200"}


@pytest.mark.parametrize("kw,exc,match", [
    (dict(capacity=0), ValueError, "capacity"), (dict(capacity=-5), ValueError, "capacity"),
    (dict(capacity=True), TypeError, "capacity"), (dict(capacity=2.5e7), TypeError, "capacity"),
    (dict(capacity=1000), ValueError, "capacity"),  # not whole lines in each partition
    (dict(line_bytes=100), ValueError, "line_bytes"),  # not whole sectors
    (dict(sector_bytes=0), ValueError, "sector_bytes"), (dict(partitions=0), ValueError, "partitions"),
    (dict(sms=0), ValueError, "sms"), (dict(sms=np.bool_(True)), TypeError, "sms"),
])
def test_spec_refuses_what_no_l2_is(kw, exc, match):
    """L2Spec took any value (a negative capacity, 0 SMs) and handed it on."""
    with pytest.raises(exc, match=match):
        L2Spec("x", **{"capacity": 2 ** 20, **kw})
    spec = L2Spec("ok", np.int64(2 ** 20), sms=np.int32(8))
    assert type(spec.capacity) is int and type(spec.sms) is int


def test_docstring_partitions_claim():
    """l2.py: the closed form counts a lockstep wave's reuse distance twice (both partitions hold the tile), which
    is an LRU of half ``C_eff``; a diagonal-start wave counts once, so ``partitions`` leaves it alone."""
    lock = schedule.flashref_fwd(4, 65536, 65536, 64)
    two = D.scan_bytes(lock, dict(D.PARAMS, partitions=2))
    half = D.scan_bytes(lock, dict(D.PARAMS, partitions=1, C_eff=D.PARAMS["C_eff"] / 2))
    one = D.scan_bytes(lock, dict(D.PARAMS, partitions=1))
    assert two[0] == pytest.approx(half[0], rel=1e-12) and one[0] < two[0]
    diag = schedule.flashref_dkdv(4, 65536, 65536, 64, causal=True)
    assert diag.diagonal_starts
    assert D.scan_bytes(diag, dict(D.PARAMS, partitions=1)) == D.scan_bytes(diag, dict(D.PARAMS, partitions=2))


# ----------------------------------------------------------------------------- the one-speed machine


def _kernel(**kw):
    base = dict(name="hand", heads=1, n_tiles=2, tile_bytes=1, rmw_bytes=0, private_read=0, private_write=0,
                resident=2, ranges=[(0, 2), (0, 2)], launch=[0, 1])
    return schedule.ScanKernel(**{**base, **kw})


def test_range_array_follows_ranges_replaced_and_cannot_be_written():
    """range_array is kept between calls (the closed forms ask for it about five times a grid): a grid whose ranges
    are replaced reads the new ones, and the kept array refuses a write, so no caller can change what the next reads.
    An array given as ranges is read, not frozen."""
    k = _kernel()
    first = k.range_array()
    assert first.tolist() == [[0, 2], [0, 2]] and k.range_array() is first
    with pytest.raises(ValueError, match="read-only"):
        first[0, 0] = 1
    k.ranges = [(0, 1), (1, 2)]
    assert k.range_array().tolist() == [[0, 1], [1, 2]] and k.diagonal_starts
    given = np.array([[0, 2], [0, 2]])
    k.ranges = given
    assert k.range_array().tolist() == [[0, 2], [0, 2]] and given.flags.writeable
    assert D.scan_bytes(dataclasses.replace(k, ranges=[(0, 2), (0, 2)])) == D.scan_bytes(_kernel())


def _list_schedule(steps, resident):
    """Start times by hand: the CTAs in grid order, each taking the slot that frees first."""
    free, start = [0] * resident, []
    for s in steps:
        t = heapq.heappop(free)
        start.append(t)
        heapq.heappush(free, t + s)
    return start


class _Stamped(L2Cache):
    """A cache that records each CTA's first private read, in order (simulate reads it as the CTA starts)."""

    def __init__(self, *a):
        super().__init__(*a)
        self.trace = []

    def access(self, key, nbytes, write=False):
        self.trace.append(key)
        return super().access(key, nbytes, write)


def test_a_cta_with_nothing_to_scan_holds_no_slot():
    """A causal column block past the last row block (Nk > Nq) scans nothing. simulate held its slot for a step,
    launch_times (the same machine, by its docstring) frees it at once: with one line of L2, the CTAs launched
    together used to miss each other's tiles (4 DRAM reads where 2 are the lockstep count)."""
    k = _kernel(ranges=[(0, 0), (0, 2), (0, 2)], launch=[0, 1, 2])
    _, _, start, end = schedule.launch_times(k)
    assert start.tolist() == [0, 0, 0] and end.tolist() == [0, 2, 2]
    c = schedule.simulate(k, L2Cache(1))
    assert (c.dram_reads, c.hits) == (2, 2)
    real = schedule.flashref_dkdv(1, 128, 1024, 64, causal=True, sms=1)
    assert real.ranges[1] == (1, 1)  # the builders make such blocks
    c = schedule.simulate(real, L2Cache(real.tile_bytes + real.rmw_bytes))
    assert c.reads + c.writes == D.scan_bytes(real)[2]  # every request, once


def test_simulate_runs_the_list_schedule():
    """simulate's per-step loop and launch_times's heap start every CTA at the same step (random hand-built grids,
    empty scans included), and that is the list schedule worked by hand."""
    rng = random.Random(3)
    for _ in range(150):
        T, n = rng.randint(1, 6), rng.randint(1, 5)
        ranges = [(lo := rng.randint(0, n), rng.randint(lo, n)) for _ in range(T)]
        launch = rng.sample(range(T), T)
        k = _kernel(heads=rng.randint(1, 3), n_tiles=n, private_read=1, resident=rng.randint(1, 5), ranges=ranges,
                    launch=launch, heads_first=rng.random() < 0.5)
        heads, blocks, start, end = schedule.launch_times(k)
        assert start.tolist() == _list_schedule([ranges[b][1] - ranges[b][0] for b in blocks.tolist()], k.resident)
        assert (np.diff(start) >= 0).all() and (end - start == [ranges[b][1] - ranges[b][0] for b in blocks]).all()
        # simulate: a CTA starting at step t reads its private tile after t steps' worth of scanned tiles
        cache = _Stamped(10 ** 9)
        schedule.simulate(k, cache)
        scanned, at = 0, {}
        per_step = np.array([np.sum((start <= t) & (t < end)) for t in range(int(end.max()) + 1)])
        for key in cache.trace:
            if key[0] == "p":
                at[key[1:]] = scanned
            elif key[0] == "s":
                scanned += 1
        done_by = np.concatenate([[0], np.cumsum(per_step)])  # scanned tiles before each step
        for h, b, s in zip(heads.tolist(), blocks.tolist(), start.tolist()):
            assert at[(h, b)] == done_by[int(s)], (ranges, launch, k.resident)


@pytest.mark.parametrize("extra", [-1, 0, 1])
def test_waves_at_the_edges(extra):
    """One CTA fewer than the resident slots, exactly one wave, one more: waves = CTAs / resident; all but the
    last CTA start at step 0, and the one past a wave starts when the first ends. With a cache that holds a head's
    tiles, each tile is read from DRAM once, whatever the waves."""
    k = schedule.flashref_fwd(1, 2048, 2048, 64, sms=4)  # 16 row blocks, 8 resident
    k = dataclasses.replace(k, resident=k.ctas_per_head + extra)
    assert schedule.waves(k) == pytest.approx(16 / (16 + extra))
    _, _, start, end = schedule.launch_times(k)
    if extra < 0:
        assert start.tolist() == [0] * 15 + [end[0]]
    else:
        assert (start == 0).all()
    c = schedule.simulate(k, L2Cache(2 ** 22))
    assert c.dram_reads == 2048 * 64 * 2 * 3  # Q, K and V, once
    lru = dict(D.PARAMS, kappa=math.inf, C_eff=2 ** 22)  # the closed form at an exact LRU of the same capacity
    assert c.dram_reads == D.scan_bytes(k, lru)[0]


def test_persistent_forward_runs_the_same_waves():
    """Kernel 3's persistent forward (one program an SM): program p's t-th tile is tile p + t * SMs, so on the
    one-speed machine tile i starts at (i // SMs) scans, which is what the list schedule of the grid gives."""
    from flashref.gpu.kernel3 import TILES
    assert TILES[(128, False)].persistent
    k = schedule.flashref3_fwd(3, 4096, 4096, 128, sms=5)
    assert k.resident == 5
    heads, blocks, start, end = schedule.launch_times(k)
    i = np.arange(len(heads))
    assert (start == (i // 5) * k.n_tiles).all() and (end == start + k.n_tiles).all()
    assert heads.tolist() == (i // k.ctas_per_head).tolist()  # row block fastest, head by head


def test_grid_orders_as_documented():
    """FlashAttention-2's forward: grid (Tr, B, H), row block fastest, ascending, keys walked from the last;
    backward: column blocks ascending, rows from the last down to the diagonal's (causal). Kernel 2's causal d = 128
    forward: heads fastest, longest rows first."""
    fa = schedule.fa2_fwd(2, 1024, 1024, 64)  # 128 x 128 tiles: 8 row blocks
    assert fa.grid_order() == [(h, i) for h in range(2) for i in range(8)]
    assert fa.tiles(3) == list(range(7, -1, -1)) and fa.resident == 2 * schedule.SMS
    fc = schedule.fa2_fwd(1, 1024, 1024, 128, True)  # 128 x 64: row block i sees key blocks 0..2i+1
    assert fc.ranges == [(0, 2 * i + 2) for i in range(8)] and fc.tiles(0) == [1, 0]
    fb = schedule.fa2_bwd(1, 1024, 1024, 128, True)  # 64 x 128: column j from row block 2j down
    assert fb.launch == list(range(8)) and fb.ranges == [(2 * j, 16) for j in range(8)]
    assert fb.tiles(7) == [15, 14] and fb.resident == schedule.SMS
    k2 = schedule.flashref_fwd(3, 1024, 1024, 128, True)
    assert k2.heads_first and k2.grid_order()[:4] == [(0, 3), (1, 3), (2, 3), (0, 2)]
    assert schedule.flashref_fwd(3, 1024, 1024, 96, True).heads_first  # padded to 128
    assert not schedule.flashref_fwd(3, 1024, 1024, 64, True).heads_first


def test_fa2_num_splits_is_the_heuristic():
    """fa2_num_splits against FlashAttention-2's num_splits_heuristic written out (float32 as in C++)."""
    def reference(BH, Nq, Nk, d, sms):
        block_n = 256 if d <= 64 else 128 if d <= 128 else 64
        n_blocks, work, slots = -(-Nk // block_n), BH * -(-Nq // 64), 2 * sms
        if np.float32(work) >= np.float32(0.8) * np.float32(slots):
            return 1
        ok = [s for s in range(1, min(128, slots, n_blocks) + 1)
              if s == 1 or -(-n_blocks // s) != -(-n_blocks // (s - 1))]
        waves = {s: np.float32(work * s) / np.float32(slots) for s in ok}
        eff = {s: w / np.float32(math.ceil(w)) for s, w in waves.items()}
        best = max(eff.values())
        return next(s for s in ok if float(eff[s]) >= 0.85 * float(best))
    for BH in (1, 3, 16, 40):
        for Nq in (1, 64, 1000):
            for Nk in (255, 4096, 100000):
                for d in (64, 128, 256):
                    for sms in (132, 7):
                        assert schedule.fa2_num_splits(BH, Nq, Nk, d, sms) == reference(BH, Nq, Nk, d, sms)


def test_simulation_is_deterministic():
    k = schedule.fa2_fwd(2, 4096, 4096, 64, True, sms=4)
    a, b = (schedule.simulate(k, L2Cache(2 ** 19)) for _ in range(2))
    assert repr(a) == repr(b) and a.hits == b.hits
    assert all((x == y).all() for x, y in zip(schedule.launch_times(k), schedule.launch_times(k)))


# ----------------------------------------------------------------------------- hand-built kernels, refused


@pytest.mark.parametrize("kw,exc,match", [
    (dict(launch=[0]), ValueError, "launch"),        # a CTA that never runs
    (dict(launch=[0, 0]), ValueError, "launch"),     # one that runs twice
    (dict(launch=[0, 5]), ValueError, "launch"),     # was an IndexError
    (dict(ranges=[(0, 5), (0, 2)]), ValueError, "ranges"),  # tiles the operand has not
    (dict(ranges=[(-1, 2), (0, 2)]), ValueError, "ranges"),
    (dict(ranges=[(2, 1), (0, 2)]), ValueError, "ranges"),  # launch_times: a CTA that ended before it started
    (dict(ranges=[(0, 1.5), (0, 2)]), ValueError, "ranges"),
    (dict(ranges=[], launch=[]), ValueError, "ranges"),
    (dict(heads=0), ValueError, "heads"),            # scan_bytes: an IndexError
    (dict(heads=-1), ValueError, "heads"),           # waves: -1.0
    (dict(n_tiles=0, ranges=[(0, 0), (0, 0)], stagger=1), ValueError, "n_tiles"),  # a ZeroDivisionError
    (dict(stagger=-1), ValueError, "stagger"),
    (dict(tile_bytes=-8), ValueError, "tile_bytes"),  # scan_bytes: negative DRAM bytes
    (dict(private_write=math.inf), ValueError, "private_write"),
    (dict(rmw_bytes="4"), TypeError, "rmw_bytes"),
    (dict(last_scan=2.0), ValueError, "last_scan"),  # the last tile moved twice a full one's bytes
    (dict(last_cta=0.0), ValueError, "last_cta"),
    (dict(sms=0), ValueError, "sms"),  # a ZeroDivisionError in scan_bytes
    (dict(sms=-1), ValueError, "sms"),  # taken silently
])
def test_a_kernel_that_describes_no_grid_is_refused(kw, exc, match):
    k = _kernel(**kw)
    for f in (lambda: schedule.simulate(k, L2Cache(64)), lambda: schedule.launch_times(k),
              lambda: schedule.waves(k), lambda: D.scan_bytes(k)):
        with pytest.raises(exc, match=match):
            f()


def test_ranges_given_as_an_array_and_builders_past_d_256():
    """range_array takes an array given as ranges, but ``rolling`` and ``diagonal_starts`` asked ``not ranges``
    (numpy's "truth value of an array is ambiguous"), and ``same_scans`` hashed its rows; FlashAttention-2's builders
    took d = 300 and ran it with the d = 256 tiles, where flashref's and iomodel.dram refuse it."""
    as_list = schedule.ScanKernel("r", 1, 3, 1, 0, 0, 0, 1, [(0, 3), (1, 2)], [1, 0])
    as_array = dataclasses.replace(as_list, ranges=np.array([[0, 3], [1, 2]]))
    assert D.scan_bytes(as_array) == D.scan_bytes(as_list)
    assert (as_array.rolling, as_array.diagonal_starts, as_array.same_scans) == \
        (as_list.rolling, as_list.diagonal_starts, as_list.same_scans)
    for build in (schedule.fa2_fwd, schedule.fa2_bwd, schedule.flashref_fwd, schedule.flashref_dkdv):
        with pytest.raises(ValueError, match="^d: "):
            build(1, 128, 128, 300)
        assert build(1, 128, 128, 256).heads == 1


def test_every_builder_passes_the_check():
    for build in (schedule.flashref_fwd, schedule.flashref_dkdv, schedule.fa2_fwd, schedule.fa2_bwd,
                  schedule.flashref3_fwd, schedule.flashref3_dkdv, schedule.flashref3_dq):
        for causal in (False, True):
            for Nq, Nk in ((1, 1), (1000, 1000), (128, 4096), (4096, 128)):
                for d in (64, 128):
                    assert schedule._checked(build(2, Nq, Nk, d, causal, sms=3)).resident > 0


# ----------------------------------------------------------------------------- iomodel.dram's input checks


@pytest.mark.parametrize("kw,exc,match", [
    (dict(impl="FLASHREF"), ValueError, "impl"), (dict(impl=None), ValueError, "impl"),
    (dict(mode="bwd"), ValueError, "mode"), (dict(gpu="a100"), ValueError, "gpu"), (dict(gpu=None), TypeError, "gpu"),
    (dict(dtype_bytes=True), TypeError, "dtype_bytes"), (dict(dtype_bytes=2.0), TypeError, "dtype_bytes"),
    (dict(dtype_bytes=4), ValueError, "dtype_bytes"), (dict(dtype_bytes=0), ValueError, "dtype_bytes"),
    (dict(Nq=2 ** 31), ValueError, "Nq"), (dict(Nk=0), ValueError, "Nk"), (dict(d=-64), ValueError, "d"),
    (dict(B=2.0), TypeError, "B"), (dict(H=True), TypeError, "H"), (dict(causal=1), TypeError, "causal"),
    (dict(windw=3), TypeError, "unknown option 'windw'; valid options are B, H, Nk, Nq, causal, d"),
    (dict(e=2), TypeError, "unknown option 'e'"), (dict(params=[]), TypeError, "params"),
])
def test_dram_names_bad_input(kw, exc, match):
    args = {**dict(impl="flashref", mode="fwd", B=1, H=2, Nq=256, Nk=256, d=64), **kw}
    impl, mode = args.pop("impl"), args.pop("mode")
    with pytest.raises(exc, match=match):
        iomodel.dram(impl, mode, **args)
    ok = iomodel.dram("flashref", "fwd", B=np.int8(1), H=2, Nq=256, Nk=256, d=64, gpu="H100",
                      dtype_bytes=np.int64(2), causal=np.bool_(False))
    assert ok.total_bytes == iomodel.dram("flashref", "fwd", B=1, H=2, Nq=256, Nk=256, d=64).total_bytes > 0
