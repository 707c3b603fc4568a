"""Block-sparse FlashAttention (Algorithm 5 + backward): oracle, autograd, exact IO, Prop 4, builders."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from reference import attention_ref, torch_grads
from strategies import problems

from flashref import blocksparse, flash1, iomodel, standard
from flashref.iomodel import blocksparse as io_blocksparse


def _heads(lead):
    return int(np.prod(lead)) if lead else 1


@st.composite
def sparse_problems(draw, allow_dropout=True):
    """A shared-strategy problem, block sizes (or the default grid), and a random block mask."""
    pb = draw(problems(max_len=20, allow_dropout=allow_dropout))
    if draw(st.booleans()):
        pb["opts"]["block_sizes"] = (draw(st.integers(1, 7)), draw(st.integers(1, 7)))
    g = blocksparse.grid(pb["Nq"], pb["Nk"], pb["d"], **pb["opts"])
    kind = draw(st.sampled_from(["random", "butterfly", "causal", "local", "empty_row"]))
    if kind == "random":
        M = blocksparse.random_blocks(g.Tr, g.Tc, draw(st.floats(0.0, 1.0)), seed=draw(st.integers(0, 99)))
    elif kind == "butterfly":
        M = blocksparse.butterfly_blocks(g.Tr, g.Tc)
    elif kind == "causal":
        M = blocksparse.causal_blocks(pb["Nq"], pb["Nk"], g.Br, g.Bc)
    elif kind == "local":
        M = blocksparse.local_blocks(pb["Nq"], pb["Nk"], g.Br, g.Bc, window=draw(st.integers(0, 6)))
    else:
        M = np.ones((g.Tr, g.Tc), dtype=bool)
        M[draw(st.integers(0, g.Tr - 1))] = False  # a block row with nothing to attend to
    pb["block_mask"], pb["grid"] = M, g
    return pb


def _ref_opts(pb):
    """Options for the oracle: the user's mask combined with the element mask the block mask implies."""
    g = pb["grid"]
    em = blocksparse.element_mask(pb["block_mask"], g.Br, g.Bc, pb["Nq"], pb["Nk"])
    opts = {k: v for k, v in pb["opts"].items() if k != "block_sizes"}
    opts["mask"] = em if opts.get("mask") is None else (em & opts["mask"])
    return opts


@given(sparse_problems())
def test_forward_equals_standard_attention_with_the_implied_mask(pb):
    with np.errstate(all="raise"):
        fwd = blocksparse.forward(pb["Q"], pb["K"], pb["V"], pb["block_mask"], **pb["opts"])
    O_ref, _, lse_ref = attention_ref(pb["Q"], pb["K"], pb["V"], **_ref_opts(pb))
    assert fwd.O.shape == O_ref.shape and np.isfinite(fwd.O).all()
    assert np.abs(fwd.O - O_ref).max() <= 1e-12 * max(1.0, np.abs(O_ref).max())
    seen = fwd.l > 0
    assert np.array_equal(seen, np.isfinite(lse_ref))  # rows with nothing to attend to: ℓ = 0
    assert np.allclose(fwd.m[seen] + np.log(fwd.l[seen]), lse_ref[seen], rtol=0, atol=1e-12)
    assert fwd.block_sizes == (pb["grid"].Br, pb["grid"].Bc)
    assert fwd.density == pytest.approx(pb["block_mask"].mean())


@given(sparse_problems(allow_dropout=False))
def test_backward_equals_torch_autograd(pb):
    opts = pb["opts"]
    fwd = blocksparse.forward(pb["Q"], pb["K"], pb["V"], pb["block_mask"], **opts)
    with np.errstate(all="raise"):
        bwd = blocksparse.backward(pb["Q"], pb["K"], pb["V"], fwd.O, pb["dO"], fwd.l, fwd.m, pb["block_mask"], **opts)
    ref_opts = {k: v for k, v in _ref_opts(pb).items() if k in ("scale", "causal", "mask")}
    ref = torch_grads(pb["Q"], pb["K"], pb["V"], pb["dO"], **ref_opts)
    for got, want in zip((bwd.dQ, bwd.dK, bwd.dV), ref):
        assert got.shape == want.shape and np.isfinite(got).all()
        assert np.abs(got - want).max() <= 1e-10 * max(1.0, np.abs(want).max())


@given(sparse_problems())
def test_io_equals_closed_form_exactly(pb):
    opts = pb["opts"]
    fwd = blocksparse.forward(pb["Q"], pb["K"], pb["V"], pb["block_mask"], **opts)
    bwd = blocksparse.backward(pb["Q"], pb["K"], pb["V"], fwd.O, pb["dO"], fwd.l, fwd.m, pb["block_mask"], **opts)
    pred_opts = {k: v for k, v in opts.items() if k != "mask"}
    for direction, io in (("forward", fwd.io), ("backward", bwd.io)):
        pred = iomodel.predict("blocksparse", direction, Nq=pb["Nq"], Nk=pb["Nk"], d=pb["d"],
                               heads=_heads(pb["lead"]), block_mask=pb["block_mask"], **pred_opts)
        assert (io.reads, io.writes) == (pred.reads, pred.writes), direction


def test_dropout_drops_the_same_entries_as_standard_attention(rng):
    Q, K, V = (rng.standard_normal((2, 12, 4)) for _ in range(3))
    opts = dict(dropout_p=0.3, seed=11, block_sizes=(4, 3))
    g = blocksparse.grid(12, 12, 4, **opts)
    dense = blocksparse.forward(Q, K, V, np.ones((g.Tr, g.Tc), dtype=bool), **opts)
    std = standard.forward(Q, K, V, dropout_p=0.3, seed=11)
    assert np.abs(dense.O - std.O).max() < 1e-12
    # a sparse mask: standard attention with the implied element mask and the same seed
    M = blocksparse.random_blocks(g.Tr, g.Tc, 0.5, seed=3)
    em = blocksparse.element_mask(M, g.Br, g.Bc, 12, 12)
    sparse = blocksparse.forward(Q, K, V, M, **opts)
    assert np.abs(sparse.O - standard.forward(Q, K, V, mask=em, dropout_p=0.3, seed=11).O).max() < 1e-12


def test_fully_masked_block_rows_give_zeros_and_zero_gradients(rng):
    Q, K, V, dO = rng.standard_normal((8, 3)), rng.standard_normal((8, 3)), rng.standard_normal((8, 3)), \
        rng.standard_normal((8, 3))
    M = np.array([[True, False], [False, False]])  # block row 1 (queries 4..7) sees nothing
    with np.errstate(all="raise"):
        fwd = blocksparse.forward(Q, K, V, M, block_sizes=(4, 4))
        bwd = blocksparse.backward(Q, K, V, fwd.O, dO, fwd.l, fwd.m, M, block_sizes=(4, 4))
    assert np.all(fwd.O[4:] == 0) and np.all(fwd.l[4:] == 0) and np.all(fwd.m[4:] == -np.inf)
    assert np.all(bwd.dQ[4:] == 0) and np.all(bwd.dK[4:] == 0) and np.all(bwd.dV[4:] == 0)
    # an all-zero mask: everything zero, and only the initialisations and the K/V loads move
    Z = np.zeros((2, 2), dtype=bool)
    fz = blocksparse.forward(Q, K, V, Z, block_sizes=(4, 4))
    assert np.all(fz.O == 0) and fz.flops.matmul == 0
    assert fz.io.total == 8 * 3 + 2 * 8 + 2 * 8 * 3  # Alg.5 l.2 writes + l.6 reads


def test_backward_refuses_an_m_of_minus_inf_on_a_block_row_that_sees_keys(rng):
    """It runs Algorithm 4's tile step, which refuses (m_i, ℓ_i) = (-inf, 0) on a row that a nonzero block lets see
    keys (it subtracted 0 there: P = exp(S), unnormalised); the rows of an empty block row keep theirs."""
    Q, K, V, dO = (rng.standard_normal((8, 3)) for _ in range(4))
    M = np.array([[True, False], [False, False]])
    fwd = blocksparse.forward(Q, K, V, M, block_sizes=(4, 4))
    l, m = fwd.l.copy(), fwd.m.copy()
    l[1], m[1] = 0.0, -np.inf  # query 1 sees keys 0..3 through block (0, 0)
    with pytest.raises(ValueError, match=r"^m: m_i = -inf marks a row as fully masked"):
        blocksparse.backward(Q, K, V, fwd.O, dO, l, m, M, block_sizes=(4, 4))
    m[1] = fwd.m[1] - 1e5
    l[1] = fwd.l[1]
    with pytest.raises(FloatingPointError, match="or l, m are not the forward's"):
        blocksparse.backward(Q, K, V, fwd.O, dO, l, m, M, block_sizes=(4, 4))


def test_causal_block_mask_with_causal_equals_causal_flash_and_skips_blocks(rng):
    Q, K, V = (rng.standard_normal((64, 8)) for _ in range(3))
    M = blocksparse.causal_blocks(64, 64, 8, 8)
    assert np.array_equal(M, np.tril(np.ones((8, 8), dtype=bool)))
    sparse = blocksparse.forward(Q, K, V, M, causal=True, block_sizes=(8, 8))
    dense = flash1.forward(Q, K, V, causal=True, block_sizes=(8, 8))
    assert np.abs(sparse.O - dense.O).max() < 1e-12
    assert sparse.io.total < dense.io.total and sparse.flops.matmul == dense.flops.matmul * 36 // 64


@pytest.mark.parametrize("d, Br, Bc", [(4, 4, 4), (6, 3, 5), (16, 8, 16)])
def test_io_is_affine_in_the_number_of_nonzero_blocks(d, Br, Bc):
    # Nq, Nk multiples of the blocks: every nonzero block adds (3d+4)·Br forward, (5d+2)·Br backward.
    Tr, Tc = 6, 5
    Nq, Nk = Tr * Br, Tc * Bc
    rng = np.random.default_rng(d)
    Q, K, V, dO = (rng.standard_normal((2, n, d)) for n in (Nq, Nk, Nk, Nq))
    order = rng.permutation(Tr * Tc)
    counts, fwd_io, bwd_io = [], [], []
    for nnz in range(0, Tr * Tc + 1, 5):
        M = np.zeros(Tr * Tc, dtype=bool)
        M[order[:nnz]] = True
        M = M.reshape(Tr, Tc)
        f = blocksparse.forward(Q, K, V, M, block_sizes=(Br, Bc))
        b = blocksparse.backward(Q, K, V, f.O, dO, f.l, f.m, M, block_sizes=(Br, Bc))
        counts.append(nnz)
        fwd_io.append(f.io.total)
        bwd_io.append(b.io.total)
    counts = np.array(counts)
    for io, slope in ((fwd_io, (3 * d + 4) * Br), (bwd_io, (5 * d + 2) * Br)):
        steps = np.diff(io) / np.diff(counts)
        assert np.all(steps == 2 * slope)  # 2 heads
        fit = np.polyfit(counts, io, 1)
        assert fit[0] == pytest.approx(2 * slope)


def test_prop4_scaling_at_density_n_to_the_minus_half():
    # Proposition 4: IO = Θ(Nd + N²d²s/M). Exactly, IO = (3d+2)·N + (3d+4)·s·N²/Bc here, so IO / prop4
    # lies between the constants of the two terms, c1 = (3d+2)/d and c2 = (3d+4)·M/(Bc·d²).
    d, M = 64, 8192
    Ns = [2**k for k in range(11, 16)]
    io = []
    for N in Ns:
        g = blocksparse.grid(N, N, d, sram_size=M)
        mask = blocksparse.random_blocks(g.Tr, g.Tc, N**-0.5, seed=0)
        io.append(iomodel.predict("blocksparse", "forward", Nq=N, Nk=N, d=d, block_mask=mask, sram_size=M).total)
    Bc = blocksparse.grid(Ns[0], Ns[0], d, sram_size=M).Bc
    c1, c2 = io_blocksparse.prop4_constants(d, M, Bc)
    assert (c1, c2) == ((3 * d + 2) / d, (3 * d + 4) * M / (Bc * d**2))
    for t, N in zip(io, Ns):
        ratio = t / io_blocksparse.prop4(N, d, M, N**-0.5)
        assert 0.99 * min(c1, c2) <= ratio <= 1.01 * max(c1, c2)
    # the log-log slope climbs from 1 (the Nd term) towards 1.5 (N√N)
    slopes = np.diff(np.log(io)) / np.diff(np.log(Ns))
    assert np.all(np.diff(slopes) > 0) and 1.2 < slopes[-1] < 1.5
    # and the dense case is quadratic: slope about 2
    dense = [iomodel.predict("blocksparse", "forward", Nq=N, Nk=N, d=d, sram_size=M,
                             block_mask=np.ones(blocksparse.grid(N, N, d, sram_size=M)[2:], dtype=bool)).total
             for N in Ns]
    assert 1.85 < np.polyfit(np.log(Ns), np.log(dense), 1)[0] < 2.05


@pytest.mark.parametrize("args,name", [(dict(d=0, M=8192, Bc=32), "d"), (dict(d=64, M=8192, Bc=0), "Bc"),
                                       (dict(d=64, M=-1, Bc=32), "M")])
def test_prop4_constants_names_a_bad_argument(args, name):
    """was: d = 0 or Bc = 0 raised a bare ZeroDivisionError."""
    with pytest.raises(ValueError, match=f"^{name}: expected a finite positive number"):
        io_blocksparse.prop4_constants(**args)


@pytest.mark.parametrize("s", [5, 1.5, -0.1, float("nan"), True])
def test_prop4_refuses_a_density_outside_0_1_by_name(s):
    """was: prop4(10, 4, 100, s=5) returned 120, for a 'fraction of nonzero blocks' of 5."""
    with pytest.raises(ValueError, match=r"^s: expected the fraction of nonzero blocks, a number in \[0, 1\]"):
        io_blocksparse.prop4(10, 4, 100, s)
    assert io_blocksparse.prop4(10, 4, 100, 0) == 40 and io_blocksparse.prop4(10, 4, 100, 1) == 56
    with pytest.raises(ValueError, match="^N: expected a finite positive number"):
        io_blocksparse.prop4(0, 4, 100, 0.5)


def test_builders_shapes_and_densities():
    for k in range(1, 7):
        T = 2**k
        B = blocksparse.butterfly_blocks(T, T)
        assert B.shape == (T, T) and np.all(B.sum(axis=1) == 1 + k) and np.array_equal(B, B.T)
        assert blocksparse.density(B) == pytest.approx((1 + k) / T)
    assert blocksparse.butterfly_blocks(3, 5).shape == (3, 5)
    for dens in (0.0, 0.1, 0.37, 1.0):
        R = blocksparse.random_blocks(7, 9, dens, seed=5)
        assert R.shape == (7, 9) and R.dtype == bool and R.sum() == round(dens * 63)
    assert np.array_equal(blocksparse.random_blocks(7, 9, 0.5, seed=1), blocksparse.random_blocks(7, 9, 0.5, seed=1))
    assert not np.array_equal(blocksparse.random_blocks(7, 9, 0.5, seed=1),
                              blocksparse.random_blocks(7, 9, 0.5, seed=2))
    # element masks: causal blocks cover the causal mask; local blocks cover the band |k - l| <= w
    Nq, Nk, Br, Bc, w = 21, 30, 4, 7, 5
    k, l_ = np.arange(Nq)[:, None], np.arange(Nk)[None, :]
    C = blocksparse.element_mask(blocksparse.causal_blocks(Nq, Nk, Br, Bc), Br, Bc, Nq, Nk)
    assert C.shape == (Nq, Nk) and np.all(C[l_ <= k]) and not np.all(C)
    L = blocksparse.local_blocks(Nq, Nk, Br, Bc, w)
    EL = blocksparse.element_mask(L, Br, Bc, Nq, Nk)
    assert np.all(EL[np.abs(k - l_) <= w])
    # and minimal: every nonzero block holds a pair of the band
    band = np.abs(k - l_) <= w
    for i, j in zip(*np.nonzero(L)):
        assert band[i * Br:(i + 1) * Br, j * Bc:(j + 1) * Bc].any()
    Lc = blocksparse.local_blocks(Nq, Nk, Br, Bc, w, causal=True)
    assert np.all(Lc <= L) and not np.array_equal(Lc, L)


def test_bad_block_mask_named_with_the_expected_shape(rng):
    Q, K, V = (rng.standard_normal((10, 4)) for _ in range(3))
    with pytest.raises(ValueError, match=r"block_mask: expected shape \(Tr, Tc\) = \(4, 2\)"):
        blocksparse.forward(Q, K, V, np.ones((3, 2), dtype=bool), block_sizes=(3, 5))
    with pytest.raises(TypeError, match="block_mask"):
        blocksparse.forward(Q, K, V, np.ones((4, 2), dtype=int), block_sizes=(3, 5))
    with pytest.raises(TypeError, match="block_mask"):
        blocksparse.forward(Q, K, V, None, block_sizes=(3, 5))
    with pytest.raises(ValueError, match="block_mask"):
        blocksparse.backward(Q, K, V, Q, Q, np.ones(10), np.zeros(10), np.ones((1, 1, 1), dtype=bool))
    with pytest.raises(ValueError, match="block_mask"):
        blocksparse.element_mask(np.ones((2, 2), dtype=bool), 3, 5, 10, 10)
    with pytest.raises(ValueError, match="density"):
        blocksparse.random_blocks(3, 3, 1.5)
    with pytest.raises(ValueError, match="window"):
        blocksparse.local_blocks(8, 8, 2, 2, -1)


def test_pattern_builders_name_a_bad_size():
    """Sizes go through the one positive-integer rule (Br = 0 divided by zero; Nq = -1 gave an empty mask;
    Nq = 4.5 a (5, 4) one), and element_mask refuses a non-boolean block mask as forward does."""
    for call, match in ((lambda: blocksparse.causal_blocks(4, 4, 0, 1), "Br"),
                        (lambda: blocksparse.causal_blocks(-1, 4, 1, 1), "Nq"),
                        (lambda: blocksparse.causal_blocks(4.5, 4, 1, 1), "Nq"),
                        (lambda: blocksparse.butterfly_blocks(-1, 2), "Tr"),
                        (lambda: blocksparse.local_blocks(4, 4, 1, 0, window=1), "Bc"),
                        (lambda: blocksparse.element_mask(np.ones((1, 1)), 4, 4, 4, 4), "block_mask"),
                        (lambda: blocksparse.element_mask(np.ones((1, 1), bool), 4.0, 4, 4, 4), "Br")):
        with pytest.raises((TypeError, ValueError), match=match):
            call()


def test_a_backward_that_overflows_raises_with_the_cure():
    """Finite inputs whose dP = dO Vᵀ overflows float32: a FloatingPointError naming float64, not NaN gradients
    with warnings (blocksparse, flash1, flash2 and standard share the rule)."""
    import warnings

    from flashref import flash2
    r = np.random.default_rng(0)
    Q = r.standard_normal((4, 2)).astype(np.float32)
    V, dO = ((r.standard_normal((4, 2)) * 1e20).astype(np.float32) for _ in range(2))
    M = np.ones((1, 1), bool)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        f, f1, f2, fs = (blocksparse.forward(Q, Q, V, M, block_sizes=(4, 4)), flash1.forward(Q, Q, V),
                         flash2.forward(Q, Q, V), standard.forward(Q, Q, V))
        for call in (lambda: blocksparse.backward(Q, Q, V, f.O, dO, f.l, f.m, M, block_sizes=(4, 4)),
                     lambda: flash1.backward(Q, Q, V, f1.O, dO, f1.l, f1.m),
                     lambda: flash2.backward(Q, Q, V, f2.O, dO, f2.L), lambda: standard.backward(Q, Q, V, dO, fs.P)):
            with pytest.raises(FloatingPointError, match="gradient .* overflowed float32.*float64"):
                call()


def test_a_result_prints_short():
    """A result's repr names its event trace's length instead of printing thousands of events."""
    x = np.ones((64, 8))
    text = repr(blocksparse.forward(x, x, x, np.ones((8, 8), bool), block_sizes=(8, 8)))
    assert len(text) < 300 and "events: [" in text
