"""Attention variants: GQA (both tile schedules), sliding windows,
ALiBi, softcapping and biases, in ``standard``, ``flash1``, ``blocksparse`` and ``flash2``, forward and backward,
against the float64 oracle and torch autograd, with simulation == ``iomodel.predict`` for every one."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from reference import variant_grads, variant_ref

from flashref import blocksparse, flash1, flash1_bwd, flash2, iomodel, standard


def close(ours, ref, tol=1e-9):
    ours, ref = np.asarray(ours), np.asarray(ref)
    assert ours.shape == ref.shape
    assert np.all(np.isfinite(ours))
    assert np.max(np.abs(ours - ref), initial=0.0) <= tol * (1.0 + np.max(np.abs(ref), initial=0.0))


def shapes_opts(o: dict) -> dict:
    """The options as iomodel.predict takes them (arrays → their presence)."""
    return {k: (True if k in ("bias", "alibi_slopes") and v is not None else v) for k, v in o.items()}


@st.composite
def variant_problems(draw):
    Hkv = draw(st.integers(1, 2))
    g = draw(st.integers(1, 3))
    Hq = Hkv * g
    B = draw(st.integers(1, 2))
    Nq, Nk, d = draw(st.integers(1, 13)), draw(st.integers(1, 13)), draw(st.integers(1, 6))
    seed = draw(st.integers(0, 2**31 - 1))
    r = np.random.default_rng(seed)
    Q, dO = r.standard_normal((B, Hq, Nq, d)), r.standard_normal((B, Hq, Nq, d))
    K, V = r.standard_normal((B, Hkv, Nk, d)), r.standard_normal((B, Hkv, Nk, d))
    o = {"enable_gqa": True, "causal": draw(st.booleans())}
    if draw(st.booleans()):
        o["window"] = (draw(st.integers(-1, 6)), draw(st.integers(-1, 6)))
    if draw(st.booleans()):
        o["softcap"] = draw(st.sampled_from([0.5, 2.0, 30.0]))
    if draw(st.booleans()):
        o["alibi_slopes"] = r.uniform(0.0, 1.0, size=(Hq,))
    if draw(st.booleans()):
        bias = r.standard_normal((Nq, Nk))
        if draw(st.booleans()):
            bias[r.integers(0, Nq), :] = -np.inf  # a row the bias masks fully
        o["bias"] = bias
    if draw(st.booleans()):
        mask = r.random((Nq, Nk)) < 0.7
        mask[r.integers(0, Nq), :] = False  # a fully masked row
        o["mask"] = mask
    if draw(st.booleans()):
        o["dropout_p"], o["seed"] = 0.3, draw(st.integers(0, 100))
    if draw(st.booleans()):
        o["scale"] = 0.7
    blocks = (draw(st.integers(1, 5)), draw(st.integers(1, 5)))
    return dict(Q=Q, K=K, V=V, dO=dO, B=B, Hq=Hq, Hkv=Hkv, Nq=Nq, Nk=Nk, d=d, opts=o, blocks=blocks)


def _check_io(name, direction, res, p, **extra):
    pred = iomodel.predict(name, direction, Nq=p["Nq"], Nk=p["Nk"], d=p["d"], heads=p["B"] * p["Hq"],
                           kv_heads=p["B"] * p["Hkv"], **shapes_opts(p["opts"]), **extra)
    assert (res.io.reads, res.io.writes) == (pred.reads, pred.writes)
    assert res.io.by_line == pred.by_line


@settings(max_examples=30)
@given(variant_problems(), st.booleans())
def test_flash2_every_variant_equals_the_oracle_and_its_prediction(p, packing):
    Q, K, V, dO, o = p["Q"], p["K"], p["V"], p["dO"], p["opts"]
    O, _, lse = variant_ref(Q, K, V, **o)
    fwd = flash2.forward(Q, K, V, block_sizes=p["blocks"], gqa_packing=packing, **o)
    close(fwd.O, O)
    assert np.array_equal(np.isinf(fwd.L), np.isinf(lse))  # fully masked rows: L = -inf, O = 0
    bwd = flash2.backward(Q, K, V, fwd.O, dO, fwd.L, block_sizes=p["blocks"], gqa_packing=packing, **o)
    for ours, ref in zip((bwd.dQ, bwd.dK, bwd.dV), variant_grads(Q, K, V, dO, **o)):
        close(ours, ref)
    _check_io("flash2", "forward", fwd, p, block_sizes=p["blocks"], gqa_packing=packing)
    _check_io("flash2", "backward", bwd, p, block_sizes=p["blocks"], gqa_packing=packing)


@settings(max_examples=25)
@given(variant_problems())
def test_standard_every_variant_equals_the_oracle_and_its_prediction(p):
    Q, K, V, dO, o = p["Q"], p["K"], p["V"], p["dO"], p["opts"]
    O, P, _ = variant_ref(Q, K, V, **o)
    fwd = standard.forward(Q, K, V, **o)
    close(fwd.O, O)
    close(fwd.P, P)
    bwd = standard.backward(Q, K, V, dO, fwd.P, **o)
    for ours, ref in zip((bwd.dQ, bwd.dK, bwd.dV), variant_grads(Q, K, V, dO, **o)):
        close(ours, ref)
    _check_io("standard", "forward", fwd, p)
    _check_io("standard", "backward", bwd, p)


@settings(max_examples=25)
@given(variant_problems())
def test_flash1_every_variant_equals_the_oracle_and_its_prediction(p):
    """Algorithm 1 and 4 with every variant (unpacked GQA, the only schedule of a loop over one head)."""
    Q, K, V, dO, o = p["Q"], p["K"], p["V"], p["dO"], p["opts"]
    O, _, lse = variant_ref(Q, K, V, **o)
    fwd = flash1.forward(Q, K, V, block_sizes=p["blocks"], **o)
    close(fwd.O, O)
    # the saved statistics are the oracle's log-sum-exp, kept apart: m + log ℓ (a fully masked row: -inf, 0)
    masked = np.isneginf(lse)
    assert np.array_equal(np.isneginf(fwd.m), masked) and np.all(fwd.l[masked] == 0)
    close(np.where(masked, 0.0, fwd.m + np.log(np.where(masked, 1.0, fwd.l))), np.where(masked, 0.0, lse))
    bwd = flash1.backward(Q, K, V, fwd.O, dO, fwd.l, fwd.m, block_sizes=p["blocks"], **o)
    for ours, ref in zip((bwd.dQ, bwd.dK, bwd.dV), variant_grads(Q, K, V, dO, **o)):
        close(ours, ref)
    _check_io("flash1", "forward", fwd, p, block_sizes=p["blocks"])
    _check_io("flash1", "backward", bwd, p, block_sizes=p["blocks"])


@settings(max_examples=20)
@given(variant_problems(), st.integers(0, 2**31 - 1))
def test_blocksparse_every_variant_equals_the_oracle_with_the_implied_mask(p, seed):
    """Algorithm 5 with every variant is the oracle with the block mask's element mask, counted exactly."""
    Q, K, V, dO, o = p["Q"], p["K"], p["V"], p["dO"], dict(p["opts"])
    Br, Bc = p["blocks"]
    g = blocksparse.grid(p["Nq"], p["Nk"], p["d"], block_sizes=(Br, Bc))
    M = np.random.default_rng(seed).random((g.Tr, g.Tc)) < 0.6
    implied = blocksparse.element_mask(M, Br, Bc, p["Nq"], p["Nk"])
    oracle = dict(o, mask=implied if o.get("mask") is None else (o["mask"] & implied))
    O, _, _ = variant_ref(Q, K, V, **oracle)
    fwd = blocksparse.forward(Q, K, V, M, block_sizes=(Br, Bc), **o)
    close(fwd.O, O)
    bwd = blocksparse.backward(Q, K, V, fwd.O, dO, fwd.l, fwd.m, M, block_sizes=(Br, Bc), **o)
    for ours, ref in zip((bwd.dQ, bwd.dK, bwd.dV), variant_grads(Q, K, V, dO, **oracle)):
        close(ours, ref)
    _check_io("blocksparse", "forward", fwd, p, block_sizes=(Br, Bc), block_mask=M)
    _check_io("blocksparse", "backward", bwd, p, block_sizes=(Br, Bc), block_mask=M)


def test_flash1_masks_a_window_where_flash2_and_a_local_block_mask_skip():
    """Algorithm 1 visits every tile, so a window is MASK, as causal is: its traffic is the dense one. FlashAttention-2
    skips the tiles outside the band, and so does Algorithm 5 with the band's blocks as its block mask."""
    r = np.random.default_rng(5)
    q, k, v = (r.standard_normal((2, 64, 4)) for _ in range(3))
    kw = dict(block_sizes=(8, 8))
    dense, windowed = flash1.forward(q, k, v, **kw), flash1.forward(q, k, v, window=(8, 0), **kw)
    assert (windowed.io.reads, windowed.io.writes) == (dense.io.reads, dense.io.writes)
    fa2 = flash2.forward(q, k, v, window=(8, 0), **kw)
    band = blocksparse.local_blocks(64, 64, 8, 8, window=8, causal=True)  # the tiles that meet 0 <= i - j <= 8
    local = blocksparse.forward(q, k, v, band, window=(8, 0), **kw)
    close(windowed.O, fa2.O)
    close(local.O, fa2.O)
    assert local.io.total < dense.io.total / 2 and fa2.io.total < dense.io.total / 2
    # the window moves no byte in Algorithm 1: its predicted traffic is the dense one too
    pred = iomodel.predict("flash1", "forward", Nq=64, Nk=64, d=4, heads=2, window=(8, 0), **kw)
    assert (pred.reads, pred.writes) == (dense.io.reads, dense.io.writes)


def test_flash1_bias_reads_every_tile_and_alibi_a_slope_per_column_block():
    kw = dict(Nq=1024, Nk=1024, d=64, heads=4, block_sizes=(64, 128))
    for direction, line in (("forward", "Alg.1 l.6"), ("backward", "Alg.4 l.7")):
        plain = iomodel.predict("flash1", direction, **kw)
        assert iomodel.predict("flash1", direction, alibi_slopes=True, **kw).reads - plain.reads == 4 * 1024 // 128
        assert iomodel.predict("flash1", direction, alibi_slopes=True, **kw).by_line[line][0] \
            - plain.by_line[line][0] == 4 * 1024 // 128
        assert iomodel.predict("flash1", direction, bias=True, **kw).reads - plain.reads == 4 * 1024 * 1024
        assert iomodel.predict("flash1", direction, softcap=30.0, **kw).total == plain.total
    # GQA: each query head reads its K/V head's tiles; the backward sums each group's dK_h, dV_h in one more pass
    gqa = dict(kw, heads=8, kv_heads=2, enable_gqa=True)
    fwd = iomodel.predict("flash1", "forward", **gqa)
    assert fwd.by_line["Alg.1 l.6"][0] == 8 * 2 * 1024 * 64
    bwd = iomodel.predict("flash1", "backward", **gqa).by_line
    assert bwd["GQA: sum dK_h, dV_h"] == (2 * 8 * 1024 * 64, 2 * 2 * 1024 * 64)


# ----------------------------------------------------------------- what each variant does to the IO


def test_window_makes_flash2_io_linear_in_n():
    kw = dict(d=64, block_sizes=(64, 64), window=(256, 0), causal=True)
    io = [iomodel.predict("flash2", "forward", Nq=N, Nk=N, **kw).total for N in (4096, 8192, 16384)]
    assert io[2] - io[1] == 2 * (io[1] - io[0])  # affine in N (a·N − c: the first rows see fewer keys)
    full = iomodel.predict("flash2", "forward", Nq=16384, Nk=16384, d=64, block_sizes=(64, 64), causal=True).total
    assert full > 10 * io[2]
    # leading term: 2·N·d·(w − 1 + Br)/Br for the K/V loads when tiles align (w = left + right + 1),
    # at most 2·N·d·(w − 1 + Br + 2(Bc − 1))/Br (the band rounds out to tile edges at both ends)
    kv = iomodel.predict("flash2", "forward", Nq=16384, Nk=16384, **kw).by_line["Alg.1 l.7"][0]
    assert 2 * 16384 * 64 * (256 + 64) / 64 * 0.98 < kv <= 2 * 16384 * 64 * (256 + 64) / 64
    kw["window"] = (250, 0)  # misaligned: one more tile at most
    kv = iomodel.predict("flash2", "forward", Nq=16384, Nk=16384, **kw).by_line["Alg.1 l.7"][0]
    assert 2 * 16384 * 64 * (250 + 64) / 64 * 0.98 < kv <= 2 * 16384 * 64 * (251 + 64 + 64) / 64
    # both edges off tile edges (non-causal, 129 each side): up to two more tiles, and the bound holds
    kw.update(window=(129, 129), causal=False)
    kv = iomodel.predict("flash2", "forward", Nq=16384, Nk=16384, **kw).by_line["Alg.1 l.7"][0]
    w = 129 + 129 + 1
    assert 2 * 16384 * 64 * (w - 1 + 64 + 64) / 64 < kv <= 2 * 16384 * 64 * (w - 1 + 64 + 2 * 63) / 64


def test_packed_gqa_divides_kv_loads_by_the_group_size():
    kw = dict(Nq=512, Nk=512, d=32, heads=8, kv_heads=1, enable_gqa=True, block_sizes=(16, 64))
    unpacked = iomodel.predict("flash2", "forward", **kw).by_line
    packed = iomodel.predict("flash2", "forward", gqa_packing=True, **kw).by_line
    assert unpacked["Alg.1 l.7"][0] == 8 * packed["Alg.1 l.7"][0]
    assert unpacked["Alg.1 l.4"] == packed["Alg.1 l.4"]  # Q is read once either way
    # the backward: unpacked sums dK_h, dV_h over each group in one more pass; packed does not
    ub = iomodel.predict("flash2", "backward", **kw).by_line
    pb = iomodel.predict("flash2", "backward", gqa_packing=True, **kw).by_line
    assert ub["GQA: sum dK_h, dV_h"] == (2 * 8 * 512 * 32, 2 * 512 * 32) and "GQA: sum dK_h, dV_h" not in pb
    assert ub["Alg.2 l.18"][1] == 8 * pb["Alg.2 l.18"][1]


def test_alibi_costs_its_slopes_where_a_bias_costs_n_squared():
    kw = dict(Nq=1024, Nk=1024, d=64, heads=4, block_sizes=(64, 64))
    plain = iomodel.predict("flash2", "forward", **kw)
    alibi = iomodel.predict("flash2", "forward", alibi_slopes=True, **kw)
    bias = iomodel.predict("flash2", "forward", bias=True, **kw)
    assert alibi.reads - plain.reads == 4 * 1024 // 64  # one slope per head per row block
    assert bias.reads - plain.reads == 4 * 1024 * 1024


def test_softcap_moves_nothing_and_adds_one_exp_unit_op_per_score():
    r = np.random.default_rng(0)
    q, k, v = (r.standard_normal((2, 16, 8)) for _ in range(3))
    a = flash2.forward(q, k, v, block_sizes=(8, 8))
    b = flash2.forward(q, k, v, block_sizes=(8, 8), softcap=5.0)
    assert (a.io.reads, a.io.writes) == (b.io.reads, b.io.writes)
    assert b.flops.exp - a.flops.exp == 2 * 16 * 16
    assert b.flops.nonmatmul - a.flops.nonmatmul == 3 * 2 * 16 * 16


@pytest.mark.parametrize("packing", [False, True])
def test_footprints_equal_the_measured_peak(packing):
    r = np.random.default_rng(2)
    q, dO = r.standard_normal((1, 4, 12, 4)), r.standard_normal((1, 4, 12, 4))
    k, v = r.standard_normal((1, 2, 12, 4)), r.standard_normal((1, 2, 12, 4))
    o = dict(enable_gqa=True, gqa_packing=packing, softcap=3.0, alibi_slopes=np.ones(4), block_sizes=(4, 6))
    G = 2 if packing else 1
    fwd = flash2.forward(q, k, v, **o)
    assert fwd.io.peak_sram == flash2.footprint_forward(G * 4, 6, 4, slopes=G)
    bwd = flash2.backward(q, k, v, fwd.O, dO, fwd.L, **o)
    assert bwd.io.peak_sram == flash2.footprint_backward(G * 4, 6, 4, softcap=True, slopes=G)


@pytest.mark.parametrize("dropout", [False, True])
def test_flash1_and_blocksparse_footprints_equal_the_measured_peak(dropout):
    r = np.random.default_rng(2)
    q, dO = r.standard_normal((1, 4, 12, 4)), r.standard_normal((1, 4, 12, 4))
    k, v = r.standard_normal((1, 2, 12, 4)), r.standard_normal((1, 2, 12, 4))
    o = dict(enable_gqa=True, softcap=3.0, alibi_slopes=np.ones(4), block_sizes=(4, 6),
             dropout_p=0.2 if dropout else 0.0)
    for bias in (None, r.standard_normal((12, 12))):
        fwd = flash1.forward(q, k, v, bias=bias, **o)
        assert fwd.io.peak_sram == flash1.footprint(4, 6, 4, bias=bias is not None, slopes=1)
        bwd = flash1.backward(q, k, v, fwd.O, dO, fwd.l, fwd.m, bias=bias, **o)
        assert bwd.io.peak_sram == flash1_bwd.footprint(4, 6, 4, dropout=dropout, softcap=True, slopes=1)
        # Algorithm 5's one grid is resolved with the larger of the two
        M = np.ones((3, 2), dtype=bool)
        sparse = blocksparse.forward(q, k, v, M, bias=bias, **o)
        assert max(sparse.io.peak_sram, blocksparse.backward(q, k, v, sparse.O, dO, sparse.l, sparse.m, M, bias=bias,
                                                             **o).io.peak_sram) \
            == blocksparse.footprint(4, 6, 4, dropout=dropout, bias=bias is not None, softcap=True, slopes=1)
    # a bias tile beside S_ij is the forward's fullest moment once the tile is wider than the four row vectors it
    # outgrows; M just below that footprint takes smaller blocks than without a bias
    need = flash1.footprint(4, 6, 4, bias=True)
    assert need > flash1.footprint(4, 6, 4)
    kw = dict(Nq=12, Nk=12, d=4, sram_size=need - 1, block_sizes=None)
    assert iomodel.block_sizes("flash1", "forward", bias=True, **kw) != (4, 6)


def test_blocksparse_grid_is_the_grid_its_passes_run_on_with_the_variants():
    """blocksparse.grid takes the variants: a softcap's tile in the backward shrinks the blocks at a given M, so a
    block mask built on grid's numbers fits the passes (it was built for the grid without the softcap, and refused)."""
    kw = dict(softcap=5.0, alibi_slopes=np.ones(2), sram_size=600)
    g = blocksparse.grid(64, 64, 8, softcap=5.0, alibi_slopes=True, sram_size=600)  # from shapes: "there are slopes"
    assert (g.Br, g.Bc) != tuple(blocksparse.grid(64, 64, 8, sram_size=600))[:2]
    assert g == iomodel.grid("blocksparse", "forward", Nq=64, Nk=64, d=8, heads=2, alibi_slopes=True, softcap=5.0,
                             sram_size=600)
    r = np.random.default_rng(6)
    q = r.standard_normal((2, 64, 8))
    res = blocksparse.forward(q, q, q, np.ones((g.Tr, g.Tc), dtype=bool), **kw)
    assert res.block_sizes == (g.Br, g.Bc)
    # bias_grad without a bias is refused before the block mask is looked at, by the pass, predict and grid alike
    bad = np.ones((1, 1), dtype=bool)
    with pytest.raises(ValueError, match="bias_grad: there is no bias"):
        blocksparse.backward(q, q, q, res.O, q, res.l, res.m, bad, bias_grad=True, **kw)
    for ask in (iomodel.predict, iomodel.grid):
        with pytest.raises(ValueError, match="bias_grad: there is no bias"):
            ask("blocksparse", "backward", Nq=64, Nk=64, d=8, heads=2, block_mask=bad, bias_grad=True, sram_size=600)


def test_window_and_causal_rows_that_see_nothing_give_zeros():
    r = np.random.default_rng(4)
    q, k, v, dO = (r.standard_normal((9 if n == "q" else 4, 3)) for n in ("q", "k", "v", "q"))
    # query i sees keys i - 1 <= j <= i: rows 5..8 have no key at all (Nk = 4)
    fwd = flash2.forward(q, k, v, window=(1, 0), block_sizes=(2, 2))
    assert np.all(fwd.O[5:] == 0) and np.all(np.isneginf(fwd.L[5:]))
    bwd = flash2.backward(q, k, v, fwd.O, dO, fwd.L, window=(1, 0), block_sizes=(2, 2))
    assert np.all(bwd.dQ[5:] == 0) and np.isfinite(bwd.dK).all()


# ----------------------------------------------------------------- bad input, named


Q, K, V = (np.zeros((1, 4, 6, 3)), np.zeros((1, 3, 9, 3)), np.zeros((1, 3, 9, 3)))


@pytest.mark.parametrize("module", [standard, flash1, flash2])
def test_bad_variant_input_is_named(module):
    with pytest.raises(ValueError, match="enable_gqa: query heads Hq=4 must be a multiple of key/value heads Hkv=3"):
        module.forward(Q, K, V, enable_gqa=True)
    with pytest.raises(ValueError, match="pass enable_gqa=True"):
        module.forward(Q, K[:, :2], V[:, :2])
    q = np.zeros((6, 3))
    for w in ((1, 2, 3), 5, (1.5, 2), (True, 1)):
        with pytest.raises(TypeError, match="window: expected two integers"):
            module.forward(q, q, q, window=w)
    with pytest.raises(ValueError, match="window"):
        module.forward(q, q, q, window=(-2, 1))
    for c in (-1.0, 0.0, float("nan")):
        with pytest.raises(ValueError, match="softcap: expected a finite float > 0"):
            module.forward(q, q, q, softcap=c)
    with pytest.raises(ValueError, match="alibi_slopes: shape"):
        module.forward(Q, Q, Q, alibi_slopes=np.ones(3))
    with pytest.raises(ValueError, match="bias: shape"):
        module.forward(q, q, q, bias=np.zeros((5, 6)))
    with pytest.raises(TypeError, match="enable_gqa: expected True or False"):
        module.forward(q, q, q, enable_gqa=1)


def test_predict_refuses_what_the_simulator_refuses():
    with pytest.raises(ValueError, match="enable_gqa: query heads Hq=4"):
        iomodel.predict("flash2", "forward", Nq=4, Nk=4, d=2, heads=4, kv_heads=3, enable_gqa=True)
    with pytest.raises(TypeError, match="window"):
        iomodel.predict("flash2", "forward", Nq=4, Nk=4, d=2, window=3)
    with pytest.raises(ValueError, match="softcap"):
        iomodel.predict("standard", "backward", Nq=4, Nk=4, d=2, softcap=-2.0)
    with pytest.raises(TypeError, match="unknown option 'gqa_packing'"):
        standard.forward(Q, Q, Q, gqa_packing=True)


# ----------------------------------------------------------------- GQA with empty head axes


def _fwd_bwd(module, Q, K, V, **o):
    """Forward and backward of ``module`` (each backward takes its algorithm's saved tensors)."""
    dO = np.zeros(Q.shape)
    fwd = module.forward(Q, K, V, **o)
    saved = (dO, fwd.P) if module is standard else (fwd.O, dO, fwd.l, fwd.m) if module is flash1 else (fwd.O, dO, fwd.L)
    return fwd, module.backward(Q, K, V, *saved, **o)


GQA_EMPTY = [(standard, {}), (flash1, {}), (flash2, {}), (flash2, {"gqa_packing": True})]


@pytest.mark.parametrize("module, packing", GQA_EMPTY)
def test_gqa_with_an_empty_batch_gives_empty_results(module, packing):
    """B = 0, Hq = 4, Hkv = 2: the group comes from the head axes, not from the (zero) products."""
    Q, K = np.zeros((0, 4, 5, 8)), np.zeros((0, 2, 6, 8))
    o = dict(enable_gqa=True, alibi_slopes=np.ones(4), **packing)
    fwd, bwd = _fwd_bwd(module, Q, K, K, **o)
    assert fwd.O.shape == (0, 4, 5, 8) and fwd.io.total == 0  # torch.nn.functional's shape
    assert (bwd.dQ.shape, bwd.dK.shape, bwd.dV.shape) == (Q.shape, K.shape, K.shape) and bwd.io.total == 0
    name = module.__name__.split(".")[-1]
    for direction, res in (("forward", fwd), ("backward", bwd)):
        p = iomodel.predict(name, direction, Nq=5, Nk=6, d=8, heads=0, kv_heads=0, **shapes_opts(o))
        assert (p.reads, p.writes) == (0, 0)
        assert p.by_line == res.io.by_line  # every line at 0, and no group sum that predict cannot know of


@pytest.mark.parametrize("module, packing", GQA_EMPTY)
def test_gqa_with_no_query_heads_moves_nothing(module, packing):
    """Hq = 0 < Hkv = 2: an empty output, zero gradients for K and V, zero IO (predicted zero too)."""
    r = np.random.default_rng(1)
    Q, K, V = np.zeros((1, 0, 5, 3)), r.standard_normal((1, 2, 4, 3)), r.standard_normal((1, 2, 4, 3))
    o = dict(enable_gqa=True, **packing)
    fwd, bwd = _fwd_bwd(module, Q, K, V, **o)
    assert fwd.O.shape == Q.shape and fwd.io.total == 0
    assert bwd.dQ.shape == Q.shape and bwd.io.total == 0
    assert bwd.dK.shape == K.shape and bwd.dV.shape == V.shape and not bwd.dK.any() and not bwd.dV.any()
    name = module.__name__.split(".")[-1]
    for direction, res in (("forward", fwd), ("backward", bwd)):
        p = iomodel.predict(name, direction, Nq=5, Nk=4, d=3, heads=0, kv_heads=2, **o)
        assert (p.reads, p.writes) == (res.io.reads, res.io.writes) == (0, 0)


@pytest.mark.parametrize("o", [dict(sram_size=200), dict(block_sizes=(3, 3))])
def test_iomodel_block_sizes_are_the_simulators_with_packed_gqa(o):
    """Packed GQA tiles g·Br loop rows; both report Br in query positions."""
    Q, K = np.ones((4, 8, 2)), np.ones((2, 8, 2))
    kw = dict(Nq=8, Nk=8, d=2, heads=4, kv_heads=2, enable_gqa=True, gqa_packing=True, **o)
    fwd, bwd = _fwd_bwd(flash2, Q, K, K, enable_gqa=True, gqa_packing=True, **o)
    for direction, res in (("forward", fwd), ("backward", bwd)):
        assert iomodel.block_sizes("flash2", direction, **kw) == res.block_sizes
        g = iomodel.grid("flash2", direction, **kw)
        assert (g.Tr, g.Tc) == (-(-8 // res.block_sizes[0]), -(-8 // res.block_sizes[1]))


def test_predict_refuses_slopes_that_cannot_fit_the_heads():
    kw = dict(Nq=4, Nk=4, d=2, heads=4)
    with pytest.raises(ValueError, match=r"alibi_slopes: shape \(3,\)"):
        iomodel.predict("flash2", "forward", alibi_slopes=np.ones(3), **kw)
    with pytest.raises(ValueError, match="alibi_slopes: shape"):
        flash2.forward(np.zeros((4, 4, 2)), np.zeros((4, 4, 2)), np.zeros((4, 4, 2)), alibi_slopes=np.ones(3))
    # (2,) broadcasts to (B, H) = (2, 2): four heads, accepted by both, counted alike
    q = np.zeros((2, 2, 4, 2))
    res = flash2.forward(q, q, q, alibi_slopes=np.ones(2))
    pred = iomodel.predict("flash2", "forward", alibi_slopes=np.ones(2), **kw)
    assert (res.io.reads, res.io.writes) == (pred.reads, pred.writes)
