"""FlashAttention forward (Algorithms 1/2): exact against the float64 oracle at every block size,
IO equal to the closed form, Theorem 2's N²d²/M scaling, and the on-chip footprint."""

import warnings

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from reference import attend_mask, attention_ref, rel_err, torch_grads
from strategies import problems

from flashref import blocks, blocksparse, flash1, iomodel, standard
from flashref.iomodel import bounds
from flashref.memory import SRAMOverflowError


def _rows_stats(pb_Q, K, opts):
    """Row max m and row sum ℓ of exp(S − m) of the scaled, masked scores, computed directly."""
    d = pb_Q.shape[-1]
    scale = opts.get("scale", 1 / np.sqrt(d))
    S = scale * np.einsum("...id,...jd->...ij", pb_Q, K)
    allowed = attend_mask(pb_Q.shape[-2], K.shape[-2], opts.get("causal", False), opts.get("mask"), pb_Q.shape[:-2])
    S = np.where(allowed, S, -np.inf)
    m = S.max(axis=-1)
    finite = np.isfinite(m)
    l = np.where(finite, np.exp(S - np.where(finite, m, 0)[..., None]).sum(axis=-1), 0.0)
    return m, l


@given(problems(), st.data())
def test_forward_matches_oracle_stats_and_iomodel_at_any_block_size(p, data):
    Q, K, V, opts = p["Q"], p["K"], p["V"], p["opts"]
    Nq, Nk, d = p["Nq"], p["Nk"], p["d"]
    Br = data.draw(st.integers(1, Nq), label="Br")  # from 1x1 up to Nq x Nk, ragged included
    Bc = data.draw(st.integers(1, Nk), label="Bc")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # fully masked rows: no RuntimeWarning
        fwd = flash1.forward(Q, K, V, block_sizes=(Br, Bc), **opts)
    O_ref, _, _ = attention_ref(Q, K, V, **opts)
    assert np.isfinite(fwd.O).all()
    assert rel_err(fwd.O, O_ref) < 1e-12
    # the same as standard attention, dropout with the same seed included (the same entries dropped)
    assert rel_err(fwd.O, standard.forward(Q, K, V, **opts).O) < 1e-12
    # l and m are the row sums and row maxima, computed directly (ℓ before dropout)
    m, l = _rows_stats(Q, K, opts)
    np.testing.assert_array_equal(np.isneginf(fwd.m), np.isneginf(m))
    np.testing.assert_allclose(fwd.m, m, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(fwd.l, l, rtol=1e-12)
    # IO: exactly the closed form
    heads = int(np.prod(p["lead"])) if p["lead"] else 1
    pred = iomodel.predict("flash1", "forward", Nq=Nq, Nk=Nk, d=d, heads=heads, block_sizes=(Br, Bc), **opts)
    assert (fwd.io.reads, fwd.io.writes) == (pred.reads, pred.writes)
    # the footprint function is the measured peak
    assert fwd.block_sizes == (Br, Bc)
    assert fwd.io.peak_sram == flash1.footprint(Br, Bc, d)
    # two matmuls over every tile: 2·(2·Nq·Nk·d) per head
    assert fwd.flops.matmul == 4 * Nq * Nk * d * heads


@given(problems(max_len=40, allow_dropout=False), st.integers(0, 3000))
def test_default_blocks_fit_sram_and_match_iomodel(p, extra):
    Q, K, V, opts = p["Q"], p["K"], p["V"], p["opts"]
    d = p["d"]
    M = flash1.footprint(1, 1, d) + extra  # any M from the smallest that holds 1x1 blocks
    fwd = flash1.forward(Q, K, V, sram_size=M, **opts)
    assert fwd.io.peak_sram <= M
    assert fwd.io.peak_sram == flash1.footprint(*fwd.block_sizes, d)
    heads = int(np.prod(p["lead"])) if p["lead"] else 1
    pred = iomodel.predict("flash1", "forward", Nq=p["Nq"], Nk=p["Nk"], d=d, heads=heads, sram_size=M)
    assert (fwd.io.reads, fwd.io.writes) == (pred.reads, pred.writes)
    # the paper's blocks are taken whenever their real footprint fits
    Br0, Bc0 = blocks.paper_block_sizes(M, d)
    Br0, Bc0 = min(Br0, p["Nq"]), min(Bc0, p["Nk"])
    if flash1.footprint(Br0, Bc0, d) <= M:
        assert fwd.block_sizes == (Br0, Bc0)
    else:  # they do not fit: smaller blocks were chosen
        Br, Bc = fwd.block_sizes
        assert Br <= Br0 and Bc <= Bc0 and (Br, Bc) != (Br0, Bc0)
    assert rel_err(fwd.O, attention_ref(Q, K, V, **opts)[0]) < 1e-12


def test_fully_masked_rows_give_zero_output_zero_l_and_minus_inf_m():
    rng = np.random.default_rng(1)
    Q, K, V = (rng.standard_normal((2, n, 6)) for n in (9, 7, 7))
    mask = rng.random((2, 9, 7)) < 0.6
    mask[0, 2] = False
    mask[1, :, :] = False  # a whole head with nothing to attend to
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fwd = flash1.forward(Q, K, V, mask=mask, block_sizes=(4, 3), dropout_p=0.2, seed=3)
    assert np.all(fwd.O[0, 2] == 0) and fwd.l[0, 2] == 0 and np.isneginf(fwd.m[0, 2])
    assert np.all(fwd.O[1] == 0) and np.all(fwd.l[1] == 0) and np.all(np.isneginf(fwd.m[1]))
    assert rel_err(fwd.O, attention_ref(Q, K, V, mask=mask, dropout_p=0.2, seed=3)[0]) < 1e-12


def test_dropout_drops_the_same_entries_as_standard_and_depends_on_seed():
    rng = np.random.default_rng(2)
    Q, K, V = (rng.standard_normal((3, 17, 8)) for _ in range(3))
    a = flash1.forward(Q, K, V, dropout_p=0.5, seed=11, block_sizes=(5, 3))
    b = flash1.forward(Q, K, V, dropout_p=0.5, seed=11, block_sizes=(17, 17))
    s = standard.forward(Q, K, V, dropout_p=0.5, seed=11)
    assert rel_err(a.O, s.O) < 1e-12 and rel_err(b.O, s.O) < 1e-12
    assert rel_err(a.O, flash1.forward(Q, K, V, dropout_p=0.5, seed=12, block_sizes=(5, 3)).O) > 1e-3
    # ℓ and m do not see dropout: the same as without it
    c = flash1.forward(Q, K, V, block_sizes=(5, 3))
    np.testing.assert_array_equal(a.m, c.m)
    np.testing.assert_allclose(a.l, c.l, rtol=1e-14)


def test_load_schedule_is_the_papers():
    """K_j, V_j once per j (l.6); Q_i, O_i, ℓ_i, m_i once per (j, i) (l.8); O_i, ℓ_i, m_i written per (j, i)."""
    rng = np.random.default_rng(3)
    Nq, Nk, d, Br, Bc = 10, 7, 4, 3, 2
    Q, K, V = rng.standard_normal((Nq, d)), rng.standard_normal((Nk, d)), rng.standard_normal((Nk, d))
    fwd = flash1.forward(Q, K, V, block_sizes=(Br, Bc))
    Tr, Tc = 4, 4
    ev = fwd.events
    reads = [(e.tensor, e.rows) for e in ev if e.direction == "read"]
    assert [r for t, r in reads if t == "K"] == [(0, 2), (2, 4), (4, 6), (6, 7)]
    assert len([1 for t, _ in reads if t == "Q"]) == Tr * Tc
    # the inner loop runs over i for each j: the Q loads of one j come between consecutive K loads
    k_steps = [e.step for e in ev if e.tensor == "K"]
    q_steps = [e.step for e in ev if e.tensor == "Q"]
    for j in range(Tc):
        lo, hi = k_steps[j], (k_steps[j + 1] if j + 1 < Tc else len(ev))
        assert len([s for s in q_steps if lo < s < hi]) == Tr
    io = fwd.io.by_tensor
    assert (io["K"].reads, io["V"].reads) == (Nk * d, Nk * d)
    assert (io["Q"].reads, io["O"].reads) == (Tc * Nq * d, Tc * Nq * d)
    assert io["O"].writes == Nq * d + Tc * Nq * d  # Alg.1 l.2 initialisation + l.12 per (j, i)
    assert io["l"].writes == io["m"].writes == Nq + Tc * Nq
    assert [e.line for e in ev[:3]] == ["Alg.1 l.2"] * 3


def test_algorithm5_with_all_ones_is_algorithm1_and_zeros_skip_tiles_but_load_every_K_j():
    """Algorithm 5's loop (blocksparse.forward): all-ones block mask = Algorithm 1, IO included."""
    rng = np.random.default_rng(4)
    Q, K, V = (rng.standard_normal((12, 5)) for _ in range(3))
    full = blocksparse.forward(Q, K, V, np.ones((3, 4), dtype=bool), block_sizes=(4, 3))
    plain = flash1.forward(Q, K, V, block_sizes=(4, 3))
    np.testing.assert_array_equal(full.O, plain.O)
    assert (full.io.reads, full.io.writes) == (plain.io.reads, plain.io.writes)
    assert full.flops == plain.flops
    bm = np.eye(3, 4, dtype=bool)
    sparse = blocksparse.forward(Q, K, V, bm, block_sizes=(4, 3))
    assert sparse.io.by_tensor["K"].reads == 12 * 5  # every K_j, even for the empty column 3
    assert sparse.io.by_tensor["Q"].reads == 3 * 4 * 5  # only the 3 visited tiles
    pred = iomodel.predict("blocksparse", "forward", Nq=12, Nk=12, d=5, block_sizes=(4, 3), block_mask=bm)
    assert (sparse.io.reads, sparse.io.writes) == (pred.reads, pred.writes)
    assert sparse.io.by_line == pred.by_line
    # equals attention restricted to the kept blocks
    allowed = np.kron(bm, np.ones((4, 3), dtype=bool))
    assert rel_err(sparse.O, attention_ref(Q, K, V, mask=allowed)[0]) < 1e-12
    with pytest.raises(ValueError, match="block_mask"):
        blocksparse.forward(Q, K, V, np.ones((4, 3), dtype=bool), block_sizes=(4, 3))
    with pytest.raises(TypeError, match="block_mask"):
        blocksparse.forward(Q, K, V, np.ones((3, 4)), block_sizes=(4, 3))


def test_explicit_blocks_too_big_raise_sram_overflow_naming_the_footprint():
    Q = K = V = np.ones((64, 16))
    need = flash1.footprint(32, 32, 16)
    with pytest.raises(SRAMOverflowError, match=str(need)):
        flash1.forward(Q, K, V, block_sizes=(32, 32), sram_size=need - 1)
    assert flash1.forward(Q, K, V, block_sizes=(32, 32), sram_size=need).io.peak_sram == need
    with pytest.raises(SRAMOverflowError, match="sram_size"):
        flash1.forward(Q, K, V, sram_size=flash1.footprint(1, 1, 16) - 1)


@pytest.mark.parametrize("opts, err, name", [
    ({"block_sizes": (0, 4)}, ValueError, "block_sizes"),
    ({"block_sizes": (4,)}, TypeError, "block_sizes"),
    ({"block_sizes": (2.5, 4)}, TypeError, "block_sizes"),
    ({"block_sizes": 8}, TypeError, "block_sizes"),
    ({"sram_size": 0}, ValueError, "sram_size"),
    ({"sram_size": -5}, ValueError, "sram_size"),
    ({"sram_size": 1e4}, TypeError, "sram_size"),
    ({"dropout_p": 1.0}, ValueError, "dropout_p"),
    ({"mask": np.ones((3, 3))}, TypeError, "mask"),
])
def test_bad_options_are_named(opts, err, name):
    Q = K = V = np.ones((4, 2))
    with pytest.raises(err, match=name):
        flash1.forward(Q, K, V, **opts)


# ----------------------------------------------------------------------------- Theorem 2 scaling
SWEEP_N = (256, 512, 1024, 2048, 4096)
SWEEP_D = (16, 32, 64)
SWEEP_M = (1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072)


def test_io_scales_as_N2_d2_over_M_and_falls_with_M():
    """Theorem 2 over N ∈ [256, 4096], d ∈ {16, 32, 64}, d ≤ M ≤ Nd.

    The smallest N is simulated and must equal the closed form exactly; then the closed form
    (so verified, and by the hypothesis test above) gives the larger N quickly.
    """
    rng = np.random.default_rng(5)
    for d in SWEEP_D:
        N = SWEEP_N[0]
        Q, K, V = (rng.standard_normal((N, d)).astype(np.float32) for _ in range(3))
        for M in (M for M in SWEEP_M if d <= M <= N * d):
            io = flash1.forward(Q, K, V, sram_size=M).io
            pred = iomodel.predict("flash1", "forward", Nq=N, Nk=N, d=d, sram_size=M)
            assert (io.reads, io.writes) == (pred.reads, pred.writes)
            assert io.peak_sram <= M
    ratios = []
    for d in SWEEP_D:
        for N in SWEEP_N:
            Ms = [M for M in SWEEP_M if bounds.in_theorem_range(N, d, M)]
            totals = [iomodel.predict("flash1", "forward", Nq=N, Nk=N, d=d, sram_size=M).total for M in Ms]
            assert all(b < a for a, b in zip(totals, totals[1:])), (N, d, totals)  # IO falls as M grows
            ratios += [t / bounds.flash1_theta(N, d, M) for t, M in zip(totals, Ms)]
    # a narrow constant band: at least the leading 12 (Tc ≥ 4Nd/M passes of 3Nd), at most ~1.6x that
    assert len(ratios) > 60
    assert 12 <= min(ratios) and max(ratios) <= 20, (min(ratios), max(ratios))
    # far below standard attention's Θ(Nd + N²) in the theorem's regime M ≫ d²: at M = 65536
    N, d, M = 4096, 64, 65536
    flash = iomodel.predict("flash1", "forward", Nq=N, Nk=N, d=d, sram_size=M).total
    std = iomodel.predict("standard", "forward", Nq=N, Nk=N, d=d).total
    assert flash < std / 4


def test_bounds_are_what_the_theorems_say():
    N, d = 1024, 64
    assert bounds.standard_theta(N, d) == N * d + N * N
    assert bounds.flash1_theta(N, d, 2 * d * d) == N * N / 2
    # Prop 3's floor: 4Nd, the same for every M, and never above any count (reads Q, K, V; writes O)
    for M in (flash1.footprint(1, 1, d), 4096, 65536, N * d):
        floor = bounds.prop3_lower_bound(N, d, M)
        assert floor == 4 * N * d
        assert iomodel.predict("flash1", "forward", Nq=N, Nk=N, d=d, sram_size=M).total >= floor
    assert iomodel.predict("standard", "forward", Nq=N, Nk=N, d=d).total >= bounds.prop3_lower_bound(N, d)
    assert bounds.in_theorem_range(N, d, d) and not bounds.in_theorem_range(N, d, N * d + 1)
    with pytest.raises(ValueError, match="M"):
        bounds.flash1_theta(N, d, 0)


def test_nonmatmul_flops_of_a_tile_count_every_row_vector_operation():
    """Algorithm 1's tile, counted by flops.py's rule (one FLOP per element per elementwise operation or reduction
    step): the scale, rowmax, subtract, exp and rowsum of S (5·Br·Bc); m_new's max, α's and β's subtract and exp,
    ℓ_new's two multiplies and add, l.12's divide and its three row-factor multiplies (12·Br; the three had gone
    uncounted); and O_i's rescale, P̃V's scale and their add (3·Br·d)."""
    rng = np.random.default_rng(0)
    Nq, Nk, d, Br, Bc = 6, 12, 4, 2, 3
    Q, K, V = rng.standard_normal((Nq, d)), rng.standard_normal((Nk, d)), rng.standard_normal((Nk, d))
    fwd = flash1.forward(Q, K, V, block_sizes=(Br, Bc))
    tiles = (Nq // Br) * (Nk // Bc)
    assert fwd.flops.nonmatmul == tiles * (5 * Br * Bc + 12 * Br + 3 * Br * d)


@pytest.mark.parametrize("block_sizes", [(16, 16), (4, 4)])
def test_causal_float32_error_at_most_twice_plain_float32(block_sizes):
    """DESIGN's rule for low precision: at most twice the error of plain float32 attention (each against float64,
    norm-wise), also causal, where Algorithm 1 visits tiles a row attends nothing in. There O_i must come out as it went
    in; rescaled by ℓ_i · (1/ℓ_i), which float32 rounds, it drifted once a masked tile (3.4x and 16x plain float32's
    error at these blocks; the backward's dQ, which reads O, 1.2x and 4x). Block-sparse FlashAttention runs the same
    tile step, so it is held to the same rule."""
    N, d = 128, 16
    worst = {"flash1": 0.0, "blocksparse": 0.0, "dQ": 0.0}
    for seed in range(6):
        rng = np.random.default_rng(seed)
        Q, K, V, dO = (rng.standard_normal((N, d)).astype(np.float32) for _ in range(4))
        exact = attention_ref(Q, K, V, causal=True)[0]
        plain = standard.forward(Q, K, V, causal=True).O
        assert plain.dtype == np.float32
        fwd = flash1.forward(Q, K, V, causal=True, block_sizes=block_sizes)
        g = blocksparse.grid(N, N, d, block_sizes=block_sizes)
        sparse = blocksparse.forward(Q, K, V, np.ones((g.Tr, g.Tc), bool), causal=True, block_sizes=block_sizes)
        worst["flash1"] = max(worst["flash1"], rel_err(fwd.O, exact) / rel_err(plain, exact))
        worst["blocksparse"] = max(worst["blocksparse"], rel_err(sparse.O, exact) / rel_err(plain, exact))
        # dQ against float32 autograd's, both against float64's
        dQ = flash1.backward(Q, K, V, fwd.O, dO, fwd.l, fwd.m, causal=True, block_sizes=block_sizes).dQ
        exact_dQ = torch_grads(Q, K, V, dO, causal=True)[0]
        q, k, v = (torch.tensor(x, requires_grad=True) for x in (Q, K, V))
        S = (q @ k.T / np.sqrt(d)).masked_fill(~torch.ones(N, N, dtype=torch.bool).tril(), float("-inf"))
        (torch.softmax(S, -1) @ v).backward(torch.tensor(dO))
        worst["dQ"] = max(worst["dQ"], rel_err(dQ, exact_dQ) / rel_err(q.grad.numpy(), exact_dQ))
    assert all(w <= 2 for w in worst.values()), worst
