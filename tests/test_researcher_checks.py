"""A researcher's checks of the derivations: every formula the docstrings of the algorithm and
``iomodel`` modules state, written out again independently and compared with the simulator's
counts at ragged shapes (Nq != Nk, N not a multiple of the blocks, d not a power of two, causal
and not); the theorems' scalings over sweeps (log-log slopes); the bounds; and the numbers the
reference sheet and notebooks 01-06 derive. No timing: counts only."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flashref import blocks, blocksparse, decoding, flash1, flash1_bwd, flash2, iomodel, parallelism, standard
from flashref.iomodel import blocksparse as io_bs
from flashref.iomodel import bounds
from flashref.iomodel import flash2 as io_f2
from flashref.problem import Problem

cdiv = blocks.cdiv
RAGGED = [(13, 7, 3), (7, 13, 5), (17, 11, 7), (1, 9, 3), (10, 10, 6)]
BLOCKS = [(3, 4), (4, 5), (5, 2)]


def _qkv(Nq, Nk, d, seed=0, lead=()):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(lead + (n, d)) for n in (Nq, Nk, Nk)] + [rng.standard_normal(lead + (Nq, d))]


def _slope(xs, ys):
    return float(np.polyfit(np.log(xs), np.log(ys), 1)[0])


def _io(r):
    return (r.io.reads, r.io.writes)


def _pred(p):
    return (p.reads, p.writes)


# --------------------------------------------------------------------------------------------
# 1. The closed forms the docstrings state, written out again, against the simulator
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("Nq,Nk,d", RAGGED)
@pytest.mark.parametrize("causal", [False, True])
def test_flash1_docstring_totals(Nq, Nk, d, causal):
    """iomodel.flash1: forward reads 2·Nk·d + Tc·(2·Nq·d + 2·Nq), writes Nq·d + 2·Nq + Tc·(Nq·d + 2·Nq);
    backward (Alg.4) reads 2·Nk·d + (4d + 2)·Tc·Nq, writes Nq·d + 2·Nk·d + d·Tc·Nq + 2·Nk·d.
    Causal changes no count (Algorithms 1/2/4 visit every tile)."""
    Q, K, V, dO = _qkv(Nq, Nk, d)
    for bs in BLOCKS:
        Tc = cdiv(Nk, min(bs[1], Nk))
        f = flash1.forward(Q, K, V, causal=causal, block_sizes=bs)
        assert _io(f) == (2 * Nk * d + Tc * (2 * Nq * d + 2 * Nq), Nq * d + 2 * Nq + Tc * (Nq * d + 2 * Nq))
        b = flash1.backward(Q, K, V, f.O, dO, f.l, f.m, causal=causal, block_sizes=bs)
        assert _io(b) == (2 * Nk * d + (4 * d + 2) * Tc * Nq, Nq * d + 4 * Nk * d + d * Tc * Nq)
        for direction, r in (("forward", f), ("backward", b)):
            p = iomodel.predict("flash1", direction, Nq=Nq, Nk=Nk, d=d, causal=causal, block_sizes=bs)
            assert _pred(p) == _io(r) and p.by_line == r.io.by_line


@settings(max_examples=400, deadline=None)
@given(st.integers(0, 300), st.integers(0, 300), st.integers(1, 40), st.integers(1, 40), st.booleans(),
       st.integers(-1, 350), st.integers(-1, 350))
def test_band_totals_sum_the_per_block_counts(Nq, Nk, Br, Bc, causal, L, R):
    """iomodel.flash2.band_totals, the closed form predict uses, against the per-block lists it sums (written as a
    loop over blocks), forward (rows of queries) and backward (rows of keys): columns loaded, rows × columns (a
    bias's tiles), tiles, the blocks that load any and their rows. Reaches of -1 are unbounded (any ≥ Nq + Nk)."""
    left, right = (Nq + Nk if x == -1 else x for x in (L, R))
    right = min(right, 0) if causal else right
    for n, B, m, C, lists, back, fwd in (
            (Nq, Br, Nk, Bc, io_f2.kv_per_row_block(Nq, Nk, Br, Bc, causal, L, R), left, right),
            (Nk, Bc, Nq, Br, io_f2.q_per_column_block(Nq, Nk, Br, Bc, causal, L, R), right, left)):
        rows = [min(B, n - i * B) for i in range(len(lists))]
        tiles = [cdiv(c, C) for c in lists]  # a block's columns start on a tile edge; only the last tile is ragged
        assert io_f2.band_totals(n, B, m, C, back, fwd) == (
            sum(lists), sum(r * c for r, c in zip(rows, lists)), sum(tiles), sum(c > 0 for c in lists),
            sum(r for r, c in zip(rows, lists) if c > 0))


def test_predict_at_the_longest_sequence():
    """At N = 2^31 − 1 with 1 x 1 blocks (a row block a query, a column block a key) the causal forward loads
    Σ_i (i + 1) = N(N + 1)/2 keys: predict sums its blocks in closed form (band_totals), not one by one."""
    N, d = 2**31 - 1, 4
    p = iomodel.predict("flash2", "forward", Nq=N, Nk=N, d=d, causal=True, block_sizes=(1, 1))
    assert (p.reads, p.writes) == (N * d + 2 * d * N * (N + 1) // 2, N * d + N)
    b = iomodel.predict("flash2", "backward", Nq=N, Nk=N, d=d, causal=True, block_sizes=(1, 1))
    # key j is seen by queries j..N-1: Σ_j q_j = N(N + 1)/2 again, every key block visited
    assert b.by_line["Alg.2 l.9"] == ((3 * d + 2) * N * (N + 1) // 2, 0)
    assert b.by_line["Alg.2 l.6"] == (2 * d * N, 0)


@pytest.mark.parametrize("Nq,Nk,d", RAGGED)
@pytest.mark.parametrize("causal", [False, True])
def test_flash2_docstring_totals(Nq, Nk, d, causal):
    """iomodel.flash2: kv_i = min(Nk, Bc·⌈r_i/Bc⌉) (r_i = last row + 1) causal, else Nk; forward reads
    Nq·d + 2·d·Σkv_i, writes Nq·d + Nq. Backward: q_j = Nq − Br·⌊j·Bc/Br⌋ if j·Bc < Nq else 0 (causal);
    reads 2·Nq·d + 2·d·Σ_{visited j} Bc_j + (3d + 2)·Σq_j, writes Nq·d + Nq + d·Σq_j + 2·Nk·d."""
    Q, K, V, dO = _qkv(Nq, Nk, d)
    for bs in BLOCKS:
        Br, Bc = min(bs[0], Nq), min(bs[1], Nk)
        Tr, Tc = cdiv(Nq, Br), cdiv(Nk, Bc)
        kv = [min(Nk, Bc * cdiv(min((i + 1) * Br, Nq), Bc)) if causal else Nk for i in range(Tr)]
        q = [(Nq - Br * (j * Bc // Br) if j * Bc < Nq else 0) if causal else Nq for j in range(Tc)]
        Bc_j = [min((j + 1) * Bc, Nk) - j * Bc for j in range(Tc)]
        assert io_f2.kv_per_row_block(Nq, Nk, Br, Bc, causal) == kv
        assert io_f2.q_per_column_block(Nq, Nk, Br, Bc, causal) == q
        f = flash2.forward(Q, K, V, causal=causal, block_sizes=bs)
        assert _io(f) == (Nq * d + 2 * d * sum(kv), Nq * d + Nq)
        b = flash2.backward(Q, K, V, f.O, dO, f.L, causal=causal, block_sizes=bs)
        visited_keys = sum(w for w, qj in zip(Bc_j, q) if qj > 0)
        assert _io(b) == (2 * Nq * d + 2 * d * visited_keys + (3 * d + 2) * sum(q),
                          Nq * d + Nq + d * sum(q) + 2 * Nk * d)
        if not causal:  # "Without causal masking: forward Nq·d + 2·Tr·Nk·d reads"
            assert f.io.reads == Nq * d + 2 * Tr * Nk * d


@pytest.mark.parametrize("Nq,Nk,d", RAGGED[:3])
def test_standard_docstring_lines(Nq, Nk, d):
    """iomodel.standard's table: a mask and dropout one Nq·Nk pass each, a bias 2·Nq·Nk reads + Nq·Nk writes;
    no dependence on sram_size or block_sizes (Theorem 2: Θ(Nd + N²) for every M)."""
    Q, K, V, dO = _qkv(Nq, Nk, d)
    bias = np.random.default_rng(1).standard_normal((Nq, Nk))
    NN = Nq * Nk
    for causal in (False, True):
        for p in (0.0, 0.3):
            for B in (None, bias):
                extra = (causal + (p > 0)) * NN
                f = standard.forward(Q, K, V, causal=causal, dropout_p=p, seed=3, bias=B)
                assert _io(f) == (Nq * d + 2 * Nk * d + 2 * NN + extra + (0 if B is None else 2 * NN),
                                  2 * NN + Nq * d + extra + (0 if B is None else NN))
                b = standard.backward(Q, K, V, dO, f.P, causal=causal, dropout_p=p, seed=3, bias=B)
                assert _io(b) == (3 * Nq * d + 2 * Nk * d + 5 * NN + extra, Nq * d + 2 * Nk * d + 2 * NN + extra)
    base = iomodel.predict("standard", "forward", Nq=Nq, Nk=Nk, d=d)
    for M in (64, 1000, 10 ** 6):
        assert _pred(iomodel.predict("standard", "forward", Nq=Nq, Nk=Nk, d=d, sram_size=M)) == _pred(base)


def test_blocksparse_affine_in_nonzero_blocks():
    """iomodel.blocksparse: IO = intercept + (3d + 4)·R forward, + (5d + 2)·R backward, R = Σ r_i over
    nonzero blocks (= Br·nnz without a ragged row block); s = 0 still moves 3·N·d + 2·N forward, 7·N·d backward."""
    N, d, B = 40, 6, 8  # 5 x 5 grid, no ragged block
    Q, K, V, dO = _qkv(N, N, d)
    for density in (0.0, 0.2, 0.44, 0.8, 1.0):
        M = blocksparse.random_blocks(5, 5, density, seed=2)
        nnz = int(M.sum())
        assert nnz == round(density * 25)  # "exactly round(density·Tr·Tc) nonzero blocks"
        f = blocksparse.forward(Q, K, V, M, block_sizes=(B, B))
        b = blocksparse.backward(Q, K, V, f.O, dO, f.l, f.m, M, block_sizes=(B, B))
        assert f.io.total == 3 * N * d + 2 * N + (3 * d + 4) * B * nnz
        assert b.io.total == 7 * N * d + (5 * d + 2) * B * nnz
        assert io_bs.nonzero_rows(M, N, B) == B * nnz
    # ragged: R sums the rows of each nonzero block's row block
    Nq, Nk = 13, 11
    Q, K, V, dO = _qkv(Nq, Nk, d)
    M = blocksparse.random_blocks(4, 3, 0.5, seed=0)
    R = io_bs.nonzero_rows(M, Nq, 4)
    assert R == sum(min(4, Nq - 4 * i) * int(M[i].sum()) for i in range(4))
    f = blocksparse.forward(Q, K, V, M, block_sizes=(4, 4))
    assert _io(f) == (2 * Nk * d + (2 * d + 2) * R, Nq * d + 2 * Nq + (d + 2) * R)
    # an all-ones mask is Algorithm 1 exactly
    ones = np.ones((4, 3), bool)
    dense = flash1.forward(Q, K, V, block_sizes=(4, 4))
    assert _io(blocksparse.forward(Q, K, V, ones, block_sizes=(4, 4))) == _io(dense)


@pytest.mark.parametrize("Nq,Nk,d,S,bs", [(1, 37, 5, 3, (1, 4)), (3, 50, 6, 4, (2, 7)), (5, 23, 3, 1, (2, 5))])
def test_decoding_docstring_totals(Nq, Nk, d, S, bs):
    """iomodel.decoding: S·Nq·d + Tr·2·Nk·d reads in the split pass; S > 1 adds S·(Nq·d + 2·Nq) written and
    read back, then Nq·d + 2·Nq written; the split pass's footprint is the measured peak."""
    Q, K, V, _ = _qkv(Nq, Nk, d, lead=(2,))
    r = decoding.forward(Q, K, V, num_splits=S, block_sizes=bs)
    Tr = cdiv(Nq, r.block_sizes[0])
    part = Nq * d + 2 * Nq
    reads = S * Nq * d + Tr * 2 * Nk * d + (S * part if S > 1 else 0)
    writes = S * part + part if S > 1 else part
    assert _io(r) == (2 * reads, 2 * writes)
    assert r.io.peak_sram == decoding.footprint(*r.block_sizes, d)


def test_footprints_are_the_measured_peaks():
    """flash1.footprint, flash1_bwd.footprint (with and without dropout), flash2.footprint_forward (bias)
    and footprint_backward (softcap, dropout) equal the peak on-chip elements the memory measures."""
    Nq, Nk, d = 12, 10, 5
    Q, K, V, dO = _qkv(Nq, Nk, d)
    bias = np.random.default_rng(1).standard_normal((Nq, Nk))
    for Br, Bc in ((4, 5), (3, 2), (5, 3)):
        for opts in ({}, {"dropout_p": 0.3, "seed": 1}):
            f = flash1.forward(Q, K, V, block_sizes=(Br, Bc), **opts)
            b = flash1.backward(Q, K, V, f.O, dO, f.l, f.m, block_sizes=(Br, Bc), **opts)
            assert f.io.peak_sram == flash1.footprint(Br, Bc, d)
            assert b.io.peak_sram == flash1_bwd.footprint(Br, Bc, d, dropout=bool(opts))
        drop = {"dropout_p": 0.3, "seed": 1}
        for opts, fk, bk in (({}, {}, {}), ({"bias": bias}, {"bias": True}, {}),
                             ({"softcap": 5.0}, {}, {"softcap": True}), (drop, {}, {"dropout": True}),
                             ({"softcap": 5.0, **drop}, {}, {"softcap": True, "dropout": True}),
                             ({"bias": bias, **drop}, {"bias": True}, {"dropout": True})):
            f = flash2.forward(Q, K, V, block_sizes=(Br, Bc), **opts)
            b = flash2.backward(Q, K, V, f.O, dO, f.L, block_sizes=(Br, Bc), **opts)
            assert f.io.peak_sram == flash2.footprint_forward(Br, Bc, d, **fk)
            assert b.io.peak_sram == flash2.footprint_backward(Br, Bc, d, **bk)


def test_dropout_costs_on_chip_space_by_one_rule_in_every_algorithm():
    """counting-rules.md's one rule for Z_ij: a factor two statements use is named and held, one used by a single
    statement is a register. Every forward uses Z_ij once (P̃∘Z takes P̃'s slot): dropout adds nothing on chip.
    Every backward uses it twice (P∘Z for dV, dP∘Z for dS): one Br×Bc tile more. (flash2's backward had held
    nothing for it, and decoding two tiles: Z_ij and a new slot for the dropped P̃.)"""
    Nq, Nk, d, Br, Bc = 16, 16, 4, 4, 4
    Q, K, V, dO = _qkv(Nq, Nk, d)
    drop, b = {"dropout_p": 0.3, "seed": 1}, {"block_sizes": (Br, Bc)}

    def peaks(opts):
        f1 = flash1.forward(Q, K, V, **b, **opts)
        f2 = flash2.forward(Q, K, V, **b, **opts)
        dec = decoding.forward(Q, K, V, num_splits=2, **b, **opts)
        b1 = flash1.backward(Q, K, V, f1.O, dO, f1.l, f1.m, **b, **opts)
        b2 = flash2.backward(Q, K, V, f2.O, dO, f2.L, **b, **opts)
        return np.array([r.io.peak_sram for r in (f1, f2, dec, b1, b2)])

    # (FlashAttention's fullest moment moves from l.20 to l.15, where D_i (Br) is not yet on chip: Br·Bc − Br)
    assert list(peaks(drop) - peaks({})) == [0, 0, 0, Br * Bc - Br, Br * Bc]
    # the block sizes follow: at equal M, FlashAttention-2's backward shrinks with dropout as FlashAttention's does
    shape = dict(Nq=4096, Nk=4096, d=64)
    for alg in ("flash1", "flash2"):
        assert iomodel.block_sizes(alg, "backward", **shape, dropout_p=0.1) < iomodel.block_sizes(alg, "backward",
                                                                                                   **shape)
    for alg in ("flash1", "flash2", "decoding"):
        assert iomodel.block_sizes(alg, "forward", **shape, dropout_p=0.1) == iomodel.block_sizes(alg, "forward",
                                                                                                    **shape)


# --------------------------------------------------------------------------------------------
# 2. Block sizes
# --------------------------------------------------------------------------------------------

def test_block_size_rule_and_resolver():
    """blocks: the paper's (Br, Bc) = (min(⌈M/4d⌉, d), ⌈M/4d⌉); resolve keeps Br = min(Bc, d) and takes the
    largest Bc whose real footprint fits; default M = 100,000 bytes / dtype_bytes."""
    assert blocks.default_sram_size(2) == 50_000 and blocks.default_sram_size(4) == 25_000
    for d in (3, 7, 64, 128):
        for M in (100, 500, 4000, 50_000):
            assert blocks.paper_block_sizes(M, d) == (min(cdiv(M, 4 * d), d), cdiv(M, 4 * d))
            if flash1.footprint(1, 1, d) > M:
                continue
            pb = Problem.from_shapes("t", Nq=10 ** 6, Nk=10 ** 6, d=d, sram_size=M)
            Br, Bc = blocks.resolve(pb, flash1.footprint)
            assert Br == min(Bc, d) and flash1.footprint(Br, Bc, d) <= M
            assert Bc == blocks.paper_block_sizes(M, d)[1] or flash1.footprint(min(Bc + 1, d), Bc + 1, d) > M


@pytest.mark.parametrize("d", [3, 5, 16, 64])
def test_paper_blocks_fit_only_above_8d2_plus_24d(d):
    """flash1: the paper's blocks occupy about 3M/4 + 2d² + 6d (M ≥ 4d²) and fit only when M ≥ 8d² + 24d
    (a necessary condition: just above it the ceiling in ⌈M/4d⌉ can still overflow)."""
    thr = 8 * d * d + 24 * d
    fits = [M for M in range(d, 2 * thr) if flash1.footprint(*blocks.paper_block_sizes(M, d), d) <= M]
    assert min(fits) == thr
    for M in (4 * d * d, 4 * d * d * 3, thr):
        Br, Bc = blocks.paper_block_sizes(M, d)
        assert Br == d
        assert 0 <= flash1.footprint(Br, Bc, d) - (3 * M / 4 + 2 * d * d + 6 * d) < 3 * d + Br + 1


def test_block_numbers_in_the_notebooks():
    """nb03: d = 64, M = 50,000 -> paper blocks 64 x 196 fit; d = 128 -> 98 x 98 need 21 % more than M.
    nb04: the backward's Bc is 87 at M = 50,000 and 217 at 100,000 (Tc 95 -> 38 at N = 8192: IO ÷ 2.45).
    nb03 Figure 2 (middle): Br = min(Bc, 64); Bc = 128 fits in 50,000, 256 does not."""
    assert blocks.paper_block_sizes(50_000, 64) == (64, 196)
    assert iomodel.block_sizes("flash1", "forward", Nq=4096, Nk=4096, d=64) == (64, 196)
    assert blocks.paper_block_sizes(50_000, 128) == (98, 98)
    assert round(flash1.footprint(98, 98, 128) / 50_000 - 1, 2) == 0.21
    assert (8 * 64 ** 2 + 24 * 64, 8 * 128 ** 2 + 24 * 128) == (34_304, 134_144)
    assert flash1.footprint(64, 128, 64) <= 50_000 < flash1.footprint(64, 256, 64)
    kw = dict(Nq=8192, Nk=8192, d=64)
    g1 = iomodel.grid("flash1", "backward", sram_size=50_000, **kw)
    g2 = iomodel.grid("flash1", "backward", sram_size=100_000, **kw)
    assert (g1.Br, g1.Bc, g1.Tc, g2.Br, g2.Bc, g2.Tc) == (64, 87, 95, 64, 217, 38)
    ratio = (iomodel.predict("flash1", "backward", sram_size=50_000, **kw).total
             / iomodel.predict("flash1", "backward", sram_size=100_000, **kw).total)
    assert round(ratio, 2) == 2.45
    assert iomodel.grid("flash1", "backward", Nq=1024, Nk=1024, d=64).Tc == 12


# --------------------------------------------------------------------------------------------
# 3. The theorems
# --------------------------------------------------------------------------------------------

def test_theorem2_scaling_with_the_papers_blocks():
    """Theorem 2: Algorithm 1's count is Θ(N²d²/M): slope 2 in N, -1 in M, over sweeps where the resolver
    keeps the paper's Bc = ⌈M/4d⌉, Br = min(⌈M/4d⌉, d) and d ≤ M ≤ Nd; count·M/(N²d²) tends to
    (3d + 4)·M/(Bc·d²) ≈ 12 + 16/d (bounds.flash1_forward_leading is its 12·N²d²/M part)."""
    d = 16
    # the closed form is the simulator's count (checked at two points of the sweep)
    Q, K, V, _ = _qkv(1024, 1024, d)
    for M in (4096, 8192):
        assert _io(flash1.forward(Q, K, V, sram_size=M)) == _pred(
            iomodel.predict("flash1", "forward", Nq=1024, Nk=1024, d=d, sram_size=M))
    Ns = [2048, 4096, 8192, 16384]
    for M in (4096, 8192):
        assert all(iomodel.block_sizes("flash1", "forward", Nq=N, Nk=N, d=d, sram_size=M)
                   == blocks.paper_block_sizes(M, d) and bounds.in_theorem_range(N, d, M) for N in Ns)
        ys = [iomodel.predict("flash1", "forward", Nq=N, Nk=N, d=d, sram_size=M).total for N in Ns]
        assert abs(_slope(Ns, ys) - 2) < 0.06
        Bc = blocks.paper_block_sizes(M, d)[1]
        limit = (3 * d + 4) * M / (Bc * d * d)
        assert limit == pytest.approx(12 + 16 / d, rel=0.01)
        assert ys[-1] / bounds.flash1_theta(Ns[-1], d, M) == pytest.approx(limit, rel=0.01)
        assert ys[-1] > bounds.flash1_forward_leading(Ns[-1], d, M)
    N = 16384
    Ms = [2432, 4096, 8192, 16384, 32768]
    assert all(iomodel.block_sizes("flash1", "forward", Nq=N, Nk=N, d=d, sram_size=M)
               == blocks.paper_block_sizes(M, d) for M in Ms)
    ys = [iomodel.predict("flash1", "forward", Nq=N, Nk=N, d=d, sram_size=M).total for M in Ms]
    assert abs(_slope(Ms, ys) + 1) < 0.05


def test_theorem5_backward_scaling():
    """Theorem 5: Algorithm 4's count is Θ(N²d²/M) too (its blocks shrink to fit, Bc = Θ(M/d) still)."""
    d = 16
    Ns = [2048, 4096, 8192, 16384]
    for M in (4096, 8192):
        ys = [iomodel.predict("flash1", "backward", Nq=N, Nk=N, d=d, sram_size=M).total for N in Ns]
        assert abs(_slope(Ns, ys) - 2) < 0.06
        Br, Bc = iomodel.block_sizes("flash1", "backward", Nq=Ns[0], Nk=Ns[0], d=d, sram_size=M)
        assert Br == min(Bc, d) and M / (4 * d) / 3 < Bc <= M / (4 * d) + 1
    Ms = [4096, 8192, 16384, 32768, 65536]
    ys = [iomodel.predict("flash1", "backward", Nq=16384, Nk=16384, d=d, sram_size=M).total for M in Ms]
    assert abs(_slope(Ms, ys) + 1) < 0.1
    # standard attention's backward: 7 N² passes, independent of M
    for N in (64, 1024):
        b = iomodel.predict("standard", "backward", Nq=N, Nk=N, d=d)
        assert b.total == 7 * N * N + 8 * N * d


def test_prop3_floor_holds_over_the_theorem_range():
    """Proposition 3's floor 4Nd (read Q, K, V, write O) is below every count for M in [d, Nd] where the
    blocks fit (M ≥ footprint(1, 1, d): below that the simulator refuses, SRAMOverflowError)."""
    for N in (16, 200, 1024):
        for d in (4, 16, 64):
            for M in np.unique(np.geomspace(d, N * d, 12).astype(int)):
                assert bounds.in_theorem_range(N, d, int(M))
                floor = bounds.prop3_lower_bound(N, d, int(M))
                assert floor == 4 * N * d
                if M >= flash1.footprint(1, 1, d):
                    assert iomodel.predict("flash1", "forward", Nq=N, Nk=N, d=d, sram_size=int(M)).total >= 3 * floor
                if M >= flash2.footprint_forward(1, 1, d):
                    assert iomodel.predict("flash2", "forward", Nq=N, Nk=N, d=d, sram_size=int(M)).total >= floor
            assert iomodel.predict("standard", "forward", Nq=N, Nk=N, d=d).total >= 4 * N * d


def test_standard_attention_theta_nd_plus_n2():
    """Theorem 2 for Algorithm 0: Θ(Nd + N²), exactly 4N² + 4Nd forward and 11N² + 12Nd forward + backward
    (nb01); the ratio to Nd + N² stays within [4, 12] over N and d."""
    for N in (8, 64, 1000, 4096):
        for d in (4, 64, 160):
            f = iomodel.predict("standard", "forward", Nq=N, Nk=N, d=d).total
            b = iomodel.predict("standard", "backward", Nq=N, Nk=N, d=d).total
            assert f == 4 * N * N + 4 * N * d and f + b == 11 * N * N + 12 * N * d
            assert 4 <= (f + b) / bounds.standard_theta(N, d) <= 12
    Ns = [4096, 8192, 16384]
    assert abs(_slope(Ns, [iomodel.predict("standard", "forward", Nq=N, Nk=N, d=64).total for N in Ns]) - 2) < 0.02


def test_prop4_block_sparse_proportional_to_s():
    """Proposition 4: Θ(Nd + N²d²s/M). The part above s = 0 is proportional to s exactly (full blocks), the
    ratio to Nd + N²d²s/M lies between c1 = (3d + 2)/d and c2 = (3d + 4)·M/(Bc·d²), and with s = N^(-1/2)
    the log-log slope climbs towards 1.5."""
    N, d, Br, Bc = 1024, 16, 16, 64
    M = blocksparse.footprint(Br, Bc, d)  # Prop. 4's M: what these blocks really need (nb05)
    g = blocksparse.grid(N, N, d, block_sizes=(Br, Bc))
    base = iomodel.predict("blocksparse", "forward", Nq=N, Nk=N, d=d, block_sizes=(Br, Bc),
                           block_mask=np.zeros((g.Tr, g.Tc), bool)).total
    assert base == 3 * N * d + 2 * N
    c1, c2 = io_bs.prop4_constants(d, M, g.Bc)
    assert c1 == (3 * d + 2) / d
    for s in (0.05, 0.2, 0.5, 1.0):
        Mk = blocksparse.random_blocks(g.Tr, g.Tc, s, seed=0)
        s_true = Mk.mean()
        io = iomodel.predict("blocksparse", "forward", Nq=N, Nk=N, d=d, block_sizes=(Br, Bc), block_mask=Mk).total
        assert io - base == pytest.approx(c2 * N * N * d * d * s_true / M, rel=1e-12)
        assert min(c1, c2) <= io / io_bs.prop4(N, d, M, s_true) <= max(c1, c2)
    # (at s = N^-1/2 the scaling tends to N^1.5: test_blocksparse.test_prop4_scaling_at_density_n_to_the_minus_half)


# --------------------------------------------------------------------------------------------
# 4. The variants' leading terms (iomodel.flash2)
# --------------------------------------------------------------------------------------------

def test_packed_gqa_divides_kv_traffic_by_g():
    """Packed GQA: the K/V term is 2·Hkv·Nq·Nk·d/Br' (Br' in query positions), i.e. ÷ g at equal Br;
    unpacked it is 2·Hq·Nq·Nk·d/Br."""
    Hq, Hkv, N, d = 8, 2, 512, 16
    for kw in (dict(block_sizes=(32, 32)), dict(sram_size=8192)):
        for packing, H in ((False, Hq), (True, Hkv)):
            opts = dict(Nq=N, Nk=N, d=d, heads=Hq, kv_heads=Hkv, enable_gqa=True, gqa_packing=packing, **kw)
            Br = iomodel.grid("flash2", "forward", **opts).Br
            kv = iomodel.predict("flash2", "forward", **opts).by_line["Alg.1 l.7"][0]
            assert kv == 2 * H * N * N * d // Br
    # the simulator agrees at a ragged shape
    rng = np.random.default_rng(0)
    Q, K, V = rng.standard_normal((1, 4, 13, 5)), rng.standard_normal((1, 2, 11, 5)), rng.standard_normal((1, 2, 11, 5))
    for packing in (False, True):
        f = flash2.forward(Q, K, V, enable_gqa=True, gqa_packing=packing, block_sizes=(4, 3))
        p = iomodel.predict("flash2", "forward", Nq=13, Nk=11, d=5, heads=4, kv_heads=2, enable_gqa=True,
                            gqa_packing=packing, block_sizes=(4, 3))
        assert _io(f) == _pred(p)


def test_window_kv_term_bounds():
    """Window (L, R): the K/V reads are at most 2·N·d·(w − 1 + Br + 2(Bc − 1))/Br, w = L + R + 1 (R = 0 causal),
    and equal to 2·N·d·(w − 1 + Br)/Br up to the two ends of the sequence when the band falls on tile edges."""
    N, d = 2048, 8
    for Br, Bc in ((32, 32), (16, 48), (40, 24)):
        for L, R in ((64, 31), (0, 0), (37, 5), (13, 77)):
            for causal in (False, True):
                w = L + (0 if causal else R) + 1
                kv = iomodel.predict("flash2", "forward", Nq=N, Nk=N, d=d, window=(L, R), causal=causal,
                                     block_sizes=(Br, Bc)).by_line["Alg.1 l.7"][0]
                assert kv <= 2 * N * d * (w - 1 + Br + 2 * (Bc - 1)) / Br
    kv = iomodel.predict("flash2", "forward", Nq=N, Nk=N, d=d, window=(64, 63),
                         block_sizes=(32, 32)).by_line["Alg.1 l.7"][0]
    w = 64 + 63 + 1
    ends = 2 * d * (64 + 64)  # the first two and last two row blocks lose part of their band
    assert 2 * N * d * (w - 1 + 32) / 32 - ends <= kv <= 2 * N * d * (w - 1 + 32) / 32


# --------------------------------------------------------------------------------------------
# 5. Numbers the notebooks and docs/reference.md derive
# --------------------------------------------------------------------------------------------

def test_notebook03_numbers():
    """nb03: M = 50,000, d = 64: N ≥ 782 is the theorem's range; at N = 256 and 512, Tc = 2 and 3 (4Nd/M ≈ 1.3,
    2.6) and the one-off 3Nd + 2N is a third and a quarter of the count; vs N, standard/flash ≈ M/(3d²) ≈ 4."""
    M, d = 50_000, 64
    assert cdiv(M, d) == 782
    for N, Tc, share in ((256, 2, 1 / 3), (512, 3, 1 / 4)):
        g = iomodel.grid("flash1", "forward", Nq=N, Nk=N, d=d, sram_size=M)
        assert g.Tc == Tc and round(4 * N * d / M, 1) == (1.3, 2.6)[Tc - 2]
        total = iomodel.predict("flash1", "forward", Nq=N, Nk=N, d=d, sram_size=M).total
        assert (3 * N * d + 2 * N) / total == pytest.approx(share, abs=0.01)
    N = 1 << 15
    ratio = (iomodel.predict("standard", "forward", Nq=N, Nk=N, d=d).total
             / iomodel.predict("flash1", "forward", Nq=N, Nk=N, d=d, sram_size=M).total)
    assert ratio == pytest.approx(M / (3 * d * d), rel=0.03) and round(ratio) == 4
    # tiny example of section 2: each row of Q read Tc = 2 times (N = 6, Br = 2, Bc = 3)
    Q, K, V, _ = _qkv(6, 6, 2)
    assert flash1.forward(Q, K, V, block_sizes=(2, 3)).io.by_tensor["Q"].reads == 2 * 6 * 2


def test_figure2_numbers_notebook04():
    """nb04 §5 (GPT-2 medium: N = 1024, d = 64, 16 × 64 heads, fp16): standard 25.2 GB (11 N² passes), 33.8 GB
    with a key-padding mask; FlashAttention 11.9 GB at M = 100 KB, 7.0 GB at 164 KB, 5.69 GB with the v1 tiles
    (16 x 256), 4.4x less than standard; matmul 825 / 962 GFLOPs; roofline 16.2 ms and 3.66 ms on an A100."""
    N, d, H = 1024, 64, 16 * 64
    GB = lambda elements: elements * H * 2 / 1e9  # noqa: E731

    def both(alg, **kw):
        return sum(iomodel.predict(alg, dr, Nq=N, Nk=N, d=d, **kw).total for dr in ("forward", "backward"))

    std = GB(both("standard"))
    assert round(std, 1) == 25.2 and round(GB(both("standard", causal=True)), 1) == 33.8
    assert round(GB(both("flash1")), 1) == 11.9
    assert round(GB(both("flash1", sram_size=164 * 1024 // 2)), 1) == 7.0
    v1 = GB(both("flash1", block_sizes=(16, 256)))
    assert round(v1, 2) == 5.69 and round(std / v1, 1) == 4.4
    assert (round(12 * N * N * d * H / 1e9), round(14 * N * N * d * H / 1e9)) == (825, 962)
    assert round(std * 1e9 / 1.555e12 * 1e3, 1) == 16.2 and round(v1 * 1e9 / 1.555e12 * 1e3, 2) == 3.66
    assert round(962e9 / 312e12 * 1e3, 2) == 3.08 and round(312 / 1.555) == 201


def test_notebook05_numbers():
    """nb05: the tiny example's lines (48, 48, 96, 64); one nonzero block adds (3d + 4)·Br = 832 at d = Br = 16;
    empty columns' K_j, V_j are ~40 % of the forward at s = 0.001 and 1.4 % (backward 1.6 %) at s = 0.01 on the
    274 x 274 grid of N = 4096, d = 64, M = 8192."""
    N, d, R = 12, 2, 16
    assert (N * d + 2 * N, 2 * N * d, (2 * d + 2) * R, (d + 2) * R, d * R, 2 * R) == (48, 48, 96, 64, 32, 32)
    assert (3 * 16 + 4) * 16 == 832
    Nq, dd, Ms = 4096, 64, 8192
    g = blocksparse.grid(Nq, Nq, dd, sram_size=Ms)
    assert (g.Tr, g.Tc) == (274, 274)
    widths = np.minimum((np.arange(g.Tc) + 1) * g.Bc, Nq) - np.arange(g.Tc) * g.Bc
    shares = {}
    for s in (0.001, 0.01):
        Mq = blocksparse.random_blocks(g.Tr, g.Tc, s, seed=0)
        kv = int(2 * dd * widths[~Mq.any(axis=0)].sum())
        f = iomodel.predict("blocksparse", "forward", Nq=Nq, Nk=Nq, d=dd, block_mask=Mq, sram_size=Ms).total
        b = iomodel.predict("blocksparse", "backward", Nq=Nq, Nk=Nq, d=dd, block_mask=Mq, sram_size=Ms).total
        shares[s] = (kv / f, 2 * kv / b)
    assert round(shares[0.001][0], 1) == 0.4
    assert (round(shares[0.01][0], 3), round(shares[0.01][1], 3)) == (0.014, 0.016)


def test_notebook06_numbers():
    """nb06: tiny run (Nq = 10, Nk = 7, d = 3, 4 x 3 blocks): Q 30, K/V 126, O + L 40; causal visits
    (T + 1)/2T of the tiles; waves 16 -> 15 %, 512 items -> 5 waves (95 %) on 108 SMs, 4 (97 %) on 132;
    128 x 128 fits M = 50,000 at d = 64; split-Q moves ~0.65 x split-K's shared-memory elements."""
    Q, K, V, _ = _qkv(10, 7, 3)
    f = flash2.forward(Q, K, V, block_sizes=(4, 3))
    assert f.io.by_line["Alg.1 l.4"][0] == 30 and f.io.by_line["Alg.1 l.7"][0] == 126
    assert f.io.writes == 40
    T = 1024 // 64
    visited = sum(flash2.block_visited(True, (i * 64, (i + 1) * 64), (j * 64, (j + 1) * 64))
                  for i in range(T) for j in range(T))
    assert visited / T ** 2 == (T + 1) / (2 * T) == 17 / 32
    assert round(16 / 108, 2) == 0.15
    items = 16 * 4096 // 128
    assert items == 512 and (cdiv(items, 108), round(items / 540, 2)) == (5, 0.95)
    assert (cdiv(items, 132), round(items / 528, 2)) == (4, 0.97)
    assert flash2.footprint_forward(128, 128, 64) <= 50_000
    k = parallelism.smem_traffic("split-K", Br=128, Bc=128, d=64, warps=4, inner=8).per_tile()["total"]
    q = parallelism.smem_traffic("split-Q", Br=128, Bc=128, d=64, warps=4, inner=8).per_tile()["total"]
    assert round(q / k, 2) == 0.65
