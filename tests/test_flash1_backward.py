"""FlashAttention backward (Algorithm 4) against torch autograd, standard.backward, iomodel and Theorem 5."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from reference import attend_mask, attention_ref, torch_grads
from strategies import problems

from flashref import SRAMOverflowError, flash1, iomodel, standard
from flashref.flash1_bwd import footprint


def stats_ref(Q, K, *, scale=None, causal=False, mask=None, **_):
    """ℓ and m straight from the float64 scores: m = rowmax of the masked scaled scores (-inf when
    the row is fully masked), ℓ = rowsum exp(S − m) of the undropped scores (0 then)."""
    Q, K = np.asarray(Q, np.float64), np.asarray(K, np.float64)
    scale = 1.0 / np.sqrt(Q.shape[-1]) if scale is None else scale
    allowed = attend_mask(Q.shape[-2], K.shape[-2], causal, mask, Q.shape[:-2])
    S = np.where(allowed, scale * Q @ K.swapaxes(-1, -2), -np.inf)
    m = S.max(axis=-1)
    m_safe = np.where(np.isneginf(m), 0.0, m)
    l = np.where(allowed, np.exp(S - m_safe[..., None]), 0.0).sum(axis=-1)
    return l, m


def saved(pb, opts):
    """O, ℓ, m as the forward pass saves them (from the oracle, independent of flash1.forward)."""
    O, _, _ = attention_ref(pb["Q"], pb["K"], pb["V"], **opts)
    l, m = stats_ref(pb["Q"], pb["K"], **opts)
    return O, l, m


block_sizes = st.tuples(st.integers(1, 9), st.integers(1, 9))


def close(got, want, tol=1e-10):
    assert got.shape == want.shape
    assert np.isfinite(got).all()
    assert np.abs(got - want).max() <= tol * max(1.0, np.abs(want).max())


@given(problems(allow_dropout=False), block_sizes)
def test_gradients_match_torch_autograd(pb, bs):
    opts = pb["opts"]
    O, l, m = saved(pb, opts)
    with np.errstate(all="raise"):  # no -inf - -inf, no 0/0 on fully masked rows
        bwd = flash1.backward(pb["Q"], pb["K"], pb["V"], O, pb["dO"], l, m, block_sizes=bs, **opts)
    ref = torch_grads(pb["Q"], pb["K"], pb["V"], pb["dO"], **{k: opts[k] for k in ("scale", "causal", "mask")
                                                               if k in opts})
    for got, want in zip((bwd.dQ, bwd.dK, bwd.dV), ref):
        close(got, want)


@given(problems(), block_sizes, st.sampled_from([0.1, 0.5]), st.integers(0, 10_000))
def test_dropout_gradients_equal_standard_backward(pb, bs, p, seed):
    opts = dict(pb["opts"], dropout_p=p, seed=seed)
    fwd = standard.forward(pb["Q"], pb["K"], pb["V"], **opts)
    want = standard.backward(pb["Q"], pb["K"], pb["V"], pb["dO"], fwd.P, **opts)
    l, m = stats_ref(pb["Q"], pb["K"], **opts)
    got = flash1.backward(pb["Q"], pb["K"], pb["V"], fwd.O, pb["dO"], l, m, block_sizes=bs, **opts)
    for g, w in zip((got.dQ, got.dK, got.dV), (want.dQ, want.dK, want.dV)):
        close(g, w)


def test_dropout_changes_the_gradients(rng):
    # guards the test above: with the mask regenerated wrongly (or not at all) gradients would differ
    Q, K, V, dO = (rng.standard_normal((7, 4)) for _ in range(4))
    l, m = stats_ref(Q, K)
    O_a, _, _ = attention_ref(Q, K, V, dropout_p=0.5, seed=1)
    a = flash1.backward(Q, K, V, O_a, dO, l, m, dropout_p=0.5, seed=1, block_sizes=(3, 2))
    b = flash1.backward(Q, K, V, O_a, dO, l, m, dropout_p=0.5, seed=2, block_sizes=(3, 2))
    assert np.abs(a.dV - b.dV).max() > 1e-3


def test_fully_masked_rows_give_zero_gradients_without_warning(rng):
    Q, dO = rng.standard_normal((2, 9, 5)), rng.standard_normal((2, 9, 5))
    K, V = rng.standard_normal((2, 11, 5)), rng.standard_normal((2, 11, 5))
    mask = rng.random((2, 9, 11)) < 0.6
    mask[:, 4] = False
    mask[1, 0] = False
    mask[:, :, 7] = False  # a key nobody attends to: zero dK, dV rows
    O, l, m = saved({"Q": Q, "K": K, "V": V}, {"mask": mask})
    assert np.isneginf(m[:, 4]).all() and (l[:, 4] == 0).all()
    with np.errstate(all="raise"):
        bwd = flash1.backward(Q, K, V, O, dO, l, m, mask=mask, block_sizes=(2, 3))
    for g in (bwd.dQ, bwd.dK, bwd.dV):
        assert np.isfinite(g).all()
    assert (bwd.dQ[:, 4] == 0).all() and (bwd.dQ[1, 0] == 0).all()
    assert (bwd.dK[:, 7] == 0).all() and (bwd.dV[:, 7] == 0).all()
    ref = torch_grads(Q, K, V, dO, mask=mask)
    for got, want in zip((bwd.dQ, bwd.dK, bwd.dV), ref):
        close(got, want)


def test_end_to_end_with_flash1_forward(rng):
    Q, K, V = rng.standard_normal((2, 13, 6)), rng.standard_normal((2, 10, 6)), rng.standard_normal((2, 10, 6))
    dO = rng.standard_normal((2, 13, 6))
    mask = rng.random((13, 10)) < 0.7
    mask[5] = False
    opts = dict(causal=True, mask=mask, scale=0.4, sram_size=300)
    fwd = flash1.forward(Q, K, V, **opts)
    bwd = flash1.backward(Q, K, V, fwd.O, dO, fwd.l, fwd.m, **opts)
    for got, want in zip((bwd.dQ, bwd.dK, bwd.dV), torch_grads(Q, K, V, dO, causal=True, mask=mask, scale=0.4)):
        close(got, want)


def test_float32_inputs_stay_float32(rng):
    Q, K, V, dO = (rng.standard_normal((10, 4)).astype(np.float32) for _ in range(4))
    O, l, m = saved({"Q": Q, "K": K, "V": V}, {})
    bwd = flash1.backward(Q, K, V, O, dO, l, m, block_sizes=(4, 3))
    assert bwd.dQ.dtype == bwd.dK.dtype == bwd.dV.dtype == np.float32
    want = torch_grads(Q, K, V, dO)
    for got, w in zip((bwd.dQ, bwd.dK, bwd.dV), want):
        assert np.abs(got - w).max() <= 1e-5 * max(1.0, np.abs(w).max())


@given(problems(), st.one_of(st.none(), block_sizes), st.sampled_from([None, 200, 400, 1000]))
def test_io_equals_closed_form_and_footprint_is_measured(pb, bs, M):
    opts = pb["opts"]
    O, l, m = saved(pb, opts)
    d = pb["d"]
    if bs is not None and M is not None and footprint(min(bs[0], pb["Nq"]), min(bs[1], pb["Nk"]), d,
                                                       dropout=opts.get("dropout_p", 0) > 0) > M:
        with pytest.raises(SRAMOverflowError, match="sram_size"):
            flash1.backward(pb["Q"], pb["K"], pb["V"], O, pb["dO"], l, m, block_sizes=bs, sram_size=M, **opts)
        return
    try:
        bwd = flash1.backward(pb["Q"], pb["K"], pb["V"], O, pb["dO"], l, m, block_sizes=bs, sram_size=M, **opts)
    except SRAMOverflowError:
        # even 1x1 blocks do not fit: the closed form's block-size resolution must say so too
        with pytest.raises(SRAMOverflowError):
            iomodel.predict("flash1", "backward", Nq=pb["Nq"], Nk=pb["Nk"], d=d, sram_size=M, block_sizes=bs, **opts)
        return
    heads = int(np.prod(pb["lead"])) if pb["lead"] else 1
    pred = iomodel.predict("flash1", "backward", Nq=pb["Nq"], Nk=pb["Nk"], d=d, heads=heads,
                           sram_size=M, block_sizes=bs, **opts)
    assert (bwd.io.reads, bwd.io.writes) == (pred.reads, pred.writes)
    Br, Bc = bwd.block_sizes
    assert bwd.io.peak_sram == footprint(Br, Bc, d, dropout=opts.get("dropout_p", 0) > 0)
    if M is not None:
        assert bwd.io.peak_sram <= M
    # line by line too: dQ is written Tc times over plus its initialisation; P, dP, dS never reach HBM
    Tc = -(-pb["Nk"] // Bc)
    assert bwd.io.by_tensor["dQ"].writes == heads * (Tc + 1) * pb["Nq"] * d
    assert not {"P", "dP", "dS", "S"} & set(bwd.io.by_tensor)


def test_flops_five_matmuls_per_tile(rng):
    # 5 matmuls of 2·Br·Bc·d per tile: 2.5x the forward's two (FlashAttention-2 §4.1)
    Nq, Nk, d = 12, 20, 8
    Q, dO = rng.standard_normal((Nq, d)), rng.standard_normal((Nq, d))
    K, V = rng.standard_normal((Nk, d)), rng.standard_normal((Nk, d))
    O, l, m = saved({"Q": Q, "K": K, "V": V}, {})
    bwd = flash1.backward(Q, K, V, O, dO, l, m, block_sizes=(5, 7))
    assert bwd.flops.matmul == 5 * 2 * Nq * Nk * d
    assert bwd.flops.matmul == standard.backward(Q, K, V, dO, attention_ref(Q, K, V)[1]).flops.matmul \
        + 2 * Nq * Nk * d  # the recomputation of S = QKᵀ is the one extra matmul


def test_nonmatmul_flops_leave_the_matmuls_accumulates_out(rng):
    """flops.py's rule, as flash2.backward keeps it: the + of d̃V_j + P̃ᵀdO_i, dQ_i + τ dS K_j and d̃K_j + τ dSᵀQ_i
    is the matmul's own add, not a non-matmul FLOP (they had been counted: 2·Bc·d + Br·d more per tile). Per tile:
    the scale of S, P's subtract, exp and divide, dS's subtract and multiply (6·Br·Bc), D_i's multiply and
    rowsum (2·Br·d), and τ on dQ_i and d̃K_j (Br·d + Bc·d)."""
    Nq, Nk, d, Br, Bc = 15, 20, 8, 5, 4
    Q, dO = rng.standard_normal((Nq, d)), rng.standard_normal((Nq, d))
    K, V = rng.standard_normal((Nk, d)), rng.standard_normal((Nk, d))
    O, l, m = saved({"Q": Q, "K": K, "V": V}, {})
    bwd = flash1.backward(Q, K, V, O, dO, l, m, block_sizes=(Br, Bc))
    tiles = (Nq // Br) * (Nk // Bc)
    assert bwd.flops.nonmatmul == tiles * (6 * Br * Bc + 2 * Br * d + Br * d + Bc * d)


def test_theorem5_scaling():
    # Theorem 5: Θ(N²d²/M) HBM accesses for d ≤ M ≤ Nd. Over a sweep of N and M, the simulated IO
    # divided by N²d²/M stays within fixed constants, while standard attention's grows with M.
    d = 8
    rng = np.random.default_rng(0)
    ratios, seen = [], []
    for N in (128, 256, 512):
        Q, K, V, dO = (rng.standard_normal((N, d)) for _ in range(4))
        O, l, m = saved({"Q": Q, "K": K, "V": V}, {})
        P = attention_ref(Q, K, V)[1]
        std = standard.backward(Q, K, V, dO, P).io.total
        for M in (512, 1024, 2048):
            if not d <= M <= N * d:
                continue
            io = flash1.backward(Q, K, V, O, dO, l, m, sram_size=M).io.total
            ratios.append(io / (N**2 * d**2 / M))
            seen.append((N, M, io, std))
    assert len(ratios) == 8
    # the constant is ~5·(footprint per Bc)/d (five Br x d loads/stores per tile); Θ means it stays put
    assert 10 <= min(ratios) and max(ratios) <= 100 and max(ratios) / min(ratios) < 2
    # more SRAM => fewer accesses, at every N; and quadratic growth in N at fixed M
    by_N = {}
    for N, M, io, std in seen:
        by_N.setdefault(N, []).append(io)
        if M >= 1024:  # with M a few times d², FlashAttention moves less than standard attention
            assert io < std
    for ios in by_N.values():
        assert all(a > b for a, b in zip(ios, ios[1:]))
    io_M = {(N, M): io for N, M, io, _ in seen}
    assert 3.0 < io_M[(256, 512)] / io_M[(128, 512)] <= 4.5


def test_bad_saved_tensors_get_clear_errors(rng):
    Q, K, V, dO = (rng.standard_normal((6, 4)) for _ in range(4))
    O, l, m = saved({"Q": Q, "K": K, "V": V}, {})
    with pytest.raises(ValueError, match="l"):
        flash1.backward(Q, K, V, O, dO, l[:5], m)
    with pytest.raises(ValueError, match="m"):
        flash1.backward(Q, K, V, O, dO, l, m[None])
    with pytest.raises(ValueError, match="dO"):
        flash1.backward(Q, K, V, O, dO[:, :3], l, m)
    with pytest.raises(ValueError, match="O"):
        flash1.backward(Q, K, V, O * np.nan, dO, l, m)
    with pytest.raises(ValueError, match="m"):
        flash1.backward(Q, K, V, O, dO, l, m + np.inf)
    with pytest.raises(TypeError, match="block_sizes"):
        flash1.backward(Q, K, V, O, dO, l, m, block_sizes=4)
    with pytest.raises(SRAMOverflowError, match="sram_size"):
        flash1.backward(Q, K, V, O, dO, l, m, block_sizes=(6, 6), sram_size=50)


def test_row_statistics_that_mark_a_row_fully_masked_wrongly_are_refused(rng):
    """(m_i, ℓ_i) = (-inf, 0) marks a fully masked row, and the backward subtracts 0 and divides by 1 there. Given for
    a row that sees keys (or half of it: m_i = -inf with ℓ_i > 0, ℓ_i = 0 with a finite m_i), the row's P was exp(S)
    or exp(S − m), unnormalised, and its gradients wrong with no error. Now a ValueError naming l or m; a row the mask
    hides whole keeps its (-inf, 0). Too small an m_i overflows P: the error names l, m beside the cure."""
    Q, K, V, dO = (rng.standard_normal((6, 4)) for _ in range(4))
    O, l, m = saved({"Q": Q, "K": K, "V": V}, {})
    m_bad, l_bad = m.copy(), l.copy()
    m_bad[0], l_bad[0] = -np.inf, 0.0
    with pytest.raises(ValueError, match=r"^m: m_i = -inf \(a fully masked row\) where ℓ_i > 0"):
        flash1.backward(Q, K, V, O, dO, l, m_bad)
    with pytest.raises(ValueError, match=r"^l: ℓ_i = 0 \(a fully masked row\) where m_i is finite"):
        flash1.backward(Q, K, V, O, dO, l_bad, m)
    with pytest.raises(ValueError, match=r"^m: m_i = -inf marks a row as fully masked"):
        flash1.backward(Q, K, V, O, dO, l_bad, m_bad, block_sizes=(2, 3))
    m_small = m.copy()
    m_small[0] = -1e5
    with pytest.raises(FloatingPointError, match="or l, m are not the forward's"):
        flash1.backward(Q, K, V, O, dO, l, m_small)
    mask = np.ones((6, 6), bool)
    mask[0] = False
    Om, lm, mm = saved({"Q": Q, "K": K, "V": V}, {"mask": mask})
    assert lm[0] == 0 and np.isneginf(mm[0])
    bwd = flash1.backward(Q, K, V, Om, dO, lm, mm, mask=mask, block_sizes=(2, 3))
    ref = standard.backward(Q, K, V, dO, standard.forward(Q, K, V, mask=mask).P, mask=mask)
    np.testing.assert_allclose(bwd.dQ, ref.dQ, rtol=1e-10, atol=1e-12)
    pred = iomodel.predict("flash1", "backward", Nq=6, Nk=6, d=4, mask=True, block_sizes=(2, 3))
    assert (bwd.io.reads, bwd.io.writes) == (pred.reads, pred.writes)


def test_figure2_table_comes_from_counts():
    from flashref.figures.backward import FIG2, figure2_data

    rows = figure2_data()
    heads = FIG2["heads"] * FIG2["batch"]
    N, d = FIG2["N"], FIG2["d"]
    for r in rows:
        opts = {"mask": True} if r["setting"] == "key-padding mask" else {}
        if r["algorithm"] == "flash1":
            Br, Bc = (int(x) for x in r["blocks_BrxBc"].split(" / ")[0].split("x"))
            Br_b, Bc_b = (int(x) for x in r["blocks_BrxBc"].split(" / ")[1].split("x"))
            fwd = iomodel.predict("flash1", "forward", Nq=N, Nk=N, d=d, heads=heads, block_sizes=(Br, Bc))
            bwd = iomodel.predict("flash1", "backward", Nq=N, Nk=N, d=d, heads=heads, block_sizes=(Br_b, Bc_b))
        else:
            fwd = iomodel.predict("standard", "forward", Nq=N, Nk=N, d=d, heads=heads, **opts)
            bwd = iomodel.predict("standard", "backward", Nq=N, Nk=N, d=d, heads=heads, **opts)
        assert r["hbm_gb"] * 1e9 == pytest.approx((fwd.bytes + bwd.bytes), rel=1e-12)
    std = {r["setting"]: r for r in rows if r["algorithm"] == "standard"}
    for r in rows:
        if r["algorithm"] == "flash1" and "v1 kernel" in r["implementation"]:
            # several times less HBM traffic, more FLOPs (the recomputation): Figure 2's point
            assert std[r["setting"]]["hbm_gb"] / r["hbm_gb"] > 4
            assert r["gflops"] > std[r["setting"]]["gflops"]
            # matmul FLOPs: 4N²d forward, 10N²d backward (5 matmuls), as tridao counts in issue #741
            assert r["gflops_matmul"] * 1e9 == 14 * N * N * d * heads
