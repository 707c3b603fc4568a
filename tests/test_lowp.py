"""Low precision (issue 17): FP8 storage, block scales, incoherent processing, P cast, IO in bytes."""

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from flashref import flash2, iomodel, lowp
from flashref.memory import IOReport, TensorIO

E4M3 = ml_dtypes.float8_e4m3fn


def _qkv(rng, lead, Nq, Nk, d):
    return rng.standard_normal(lead + (Nq, d)), rng.standard_normal(lead + (Nk, d)), rng.standard_normal(lead + (Nk, d))


def _ref(Q, K, V):
    S = Q @ K.swapaxes(-1, -2) / np.sqrt(Q.shape[-1])
    P = np.exp(S - S.max(-1, keepdims=True))
    return (P / P.sum(-1, keepdims=True)) @ V


# ---------------------------------------------------------------- the Hadamard rotation
@given(k=st.integers(0, 8), n=st.integers(1, 20), seed=st.integers(0, 2**31))
def test_rotation_leaves_qk_unchanged(k, n, seed):
    d = 1 << k
    rng = np.random.default_rng(seed)
    Q, K = rng.standard_normal((n, d)) * 5, rng.standard_normal((n + 3, d))
    S, S_rot = Q @ K.T, lowp.rotate(Q, seed) @ lowp.rotate(K, seed).T
    np.testing.assert_allclose(S_rot, S, rtol=0, atol=1e-12 * max(1.0, np.abs(Q).max() * np.abs(K).max() * d))


def test_fwht_is_the_normalised_hadamard_matrix():
    d = 16
    H = np.array([[1.0]])
    while H.shape[0] < d:
        H = np.block([[H, H], [H, -H]])
    X = np.random.default_rng(0).standard_normal((3, d))
    np.testing.assert_allclose(lowp.fwht(X), X @ H / 4, atol=1e-14)
    np.testing.assert_allclose(lowp.fwht(lowp.fwht(X)), X, atol=1e-14)  # its own inverse


def test_rotation_spreads_one_outlier():
    x = np.zeros(64)
    x[5] = 64.0
    y = lowp.rotate(x, 0)
    np.testing.assert_allclose(np.abs(y), 8.0)  # |x|/√d on every coordinate
    assert np.isclose(np.linalg.norm(y), 64.0)


def test_incoherent_forward_equals_plain_in_float64(rng):
    Q, K, V = _qkv(rng, (2,), 70, 50, 32)
    a = flash2.forward(Q, K, V, block_sizes=(16, 16))
    b = flash2.forward(Q, K, V, block_sizes=(16, 16), incoherent=True, incoherent_seed=3, key_order="reverse")
    np.testing.assert_allclose(b.O, a.O, atol=1e-12)
    np.testing.assert_allclose(b.L, a.L, atol=1e-12)


def test_lowp_loop_keeps_mask_causal_and_dropout(rng):
    Q, K, V = _qkv(rng, (2,), 45, 37, 16)
    mask = rng.random((45, 37)) < 0.7
    mask[3] = False  # a fully masked row
    opts = dict(block_sizes=(16, 8), mask=mask, causal=True, dropout_p=0.2, seed=4)
    a = flash2.forward(Q, K, V, **opts)
    b = flash2.forward(Q, K, V, incoherent=True, key_order="reverse", **opts)
    np.testing.assert_allclose(b.O, a.O, atol=1e-12)
    assert not b.O[:, 3].any() and np.isneginf(b.L[:, 3]).all()
    c = flash2.forward(Q, K, V, fp8="e4m3", p_fp8="e4m3", p_scale=256.0, **opts)
    assert np.isfinite(c.O).all() and np.abs(c.O - a.O).max() < 0.2


# ---------------------------------------------------------------- scales
def test_block_scales_equal_tensor_scales_when_blocks_span_the_tensor(rng):
    Q, K, V = _qkv(rng, (2, 3), 40, 56, 16)
    t = flash2.forward(Q, K, V, fp8="e4m3", p_fp8="e4m3", block_sizes=(40, 56))
    b = flash2.forward(Q, K, V, fp8="e4m3", p_fp8="e4m3", fp8_scaling="block", block_sizes=(40, 56))
    for n in "QKV":
        np.testing.assert_array_equal(b.scales[n], t.scales[n])
    np.testing.assert_array_equal(b.O, t.O)
    X8t, st_ = lowp.quantize(Q, E4M3)
    X8b, sb = lowp.quantize(Q, E4M3, rows_per_block=40)
    np.testing.assert_array_equal(sb, st_)
    np.testing.assert_array_equal(X8b.view(np.uint8), X8t.view(np.uint8))


def test_block_scales_follow_their_tiles(rng):
    Q = rng.standard_normal((50, 8))
    Q[37, 2] = 100.0
    _, s = lowp.quantize(Q, E4M3, rows_per_block=16)  # tiles 0-15, 16-31, 32-47, 48-49
    assert s.shape == (4,)
    assert np.isclose(s[2], 100.0 / 448)
    for t in (0, 1, 3):
        assert np.isclose(s[t], np.abs(Q[16 * t:16 * t + 16]).max() / 448)


def test_quantize_roundtrip_error_is_e4m3_rounding(rng):
    X = rng.standard_normal((4, 64, 32))
    X8, s = lowp.quantize(X, E4M3, rows_per_block=16)
    Xd = lowp.decode(X8, np.float64) * np.repeat(s, 16, axis=-1)[..., None]
    rel = np.abs(Xd - X) / np.abs(X)
    assert rel[np.abs(X) / np.repeat(s, 16, axis=-1)[..., None] > 2**-6].max() <= 2**-4 + 1e-7  # half an ulp


def test_decode_is_exact():
    x = np.arange(256, dtype=np.uint8).view(E4M3)
    np.testing.assert_array_equal(lowp.decode(x, np.float64), x.astype(np.float64))


# ---------------------------------------------------------------- saturation
def test_cast_saturates_where_ml_dtypes_would_not():
    x = np.array([1e6, -1e6, 449.0, 500.0])
    assert np.isnan(x.astype(E4M3).astype(float)).any()  # why we clip
    np.testing.assert_array_equal(lowp.cast(x, E4M3).astype(float), [448, -448, 448, 448])
    y = lowp.cast(np.array([1e9]), ml_dtypes.float8_e5m2).astype(float)
    np.testing.assert_array_equal(y, [57344.0])


def test_p_scale_past_the_format_saturates_not_nan(rng):
    Q, K, V = _qkv(rng, (), 32, 32, 16)
    r = flash2.forward(Q, K, V, p_fp8="e4m3", p_scale=4096.0, block_sizes=(16, 16))
    assert np.isfinite(r.O).all()  # P̃ = 1 maps to 4096 → 448, not NaN


# ---------------------------------------------------------------- error ordering
def test_error_ordering(rng):
    Q, K, V = _qkv(rng, (2,), 256, 256, 64)
    Q[0, 3, 7] = K[1, 100, 9] = 40.0  # outliers
    O = _ref(Q, K, V)

    def err(**kw):
        return np.sqrt(np.mean((flash2.forward(Q, K, V, block_sizes=(64, 64), **kw).O - O) ** 2))

    f32 = np.sqrt(np.mean((flash2.forward(*(X.astype(np.float32) for X in (Q, K, V))).O - O) ** 2))
    e4, e5 = err(fp8="e4m3", p_fp8="e4m3", p_scale=256.0), err(fp8="e5m2", p_fp8="e4m3", p_scale=256.0)
    assert f32 < 1e-5 < e4 < e5 < 0.1  # more mantissa bits, less error
    assert err(fp8="e4m3") < e4  # casting P adds error
    # P in the normal range (×2⁸) is no worse than P unscaled
    assert err(fp8="e4m3", p_fp8="e4m3", p_scale=256.0) <= err(fp8="e4m3", p_fp8="e4m3") * 1.05


def test_reverse_order_with_static_scale_removes_sink_underflow():
    from flashref.figures.lowp import sink_inputs

    Q, K, V = (X.astype(np.float32) for X in sink_inputs(8.0, shape=(1, 256, 32)))

    def frac(**kw):
        return flash2.forward(Q, K, V, p_fp8="e4m3", block_sizes=(64, 64), **kw).p_underflow[..., 64:].mean()

    assert frac(key_order="forward") > 0.5  # P-collapse
    assert frac(key_order="forward", p_scale=256.0) > 0
    assert frac(key_order="reverse", p_scale=256.0) == 0


# ---------------------------------------------------------------- IO in bytes, simulation == prediction
FP8_OPTS = [
    dict(fp8="e4m3"),
    dict(fp8="e5m2", p_fp8="e4m3", p_scale=256.0),
    dict(fp8="e4m3", fp8_scaling="block", block_sizes=(16, 24)),
    dict(fp8="e4m3", fp8_scaling="block", incoherent=True, key_order="reverse", block_sizes=(32, 8)),
    dict(p_fp8="e4m3", key_order="reverse"),
    dict(incoherent=True, incoherent_seed=5),
]


@pytest.mark.parametrize("opts", FP8_OPTS)
@given(Nq=st.integers(1, 70), Nk=st.integers(1, 70), causal=st.booleans(), lead=st.sampled_from([(), (2,), (2, 3)]))
def test_simulation_equals_prediction(opts, Nq, Nk, causal, lead):
    d = 16
    rng = np.random.default_rng(Nq * 100 + Nk)
    Q, K, V = _qkv(rng, lead, Nq, Nk, d)
    sim = flash2.forward(Q, K, V, causal=causal, sram_size=4000, **opts)
    heads = int(np.prod(lead)) if lead else 1
    pred = iomodel.predict("flash2", "forward", Nq=Nq, Nk=Nk, d=d, heads=heads, causal=causal, sram_size=4000, **opts)
    assert (sim.io.reads, sim.io.writes, sim.io.bytes) == (pred.reads, pred.writes, pred.bytes)
    Br, Bc = sim.block_sizes
    assert sim.io.peak_sram == lowp.footprint(Br, Bc, d, "fp8" in opts)


def test_fp8_bytes_by_hand():
    Nq = Nk = 256
    d, Br, Bc, heads = 64, 64, 128, 3
    Q = K = V = np.ones((heads, Nq, d))
    fp16 = flash2.forward(Q, K, V, block_sizes=(Br, Bc))
    t = flash2.forward(Q, K, V, block_sizes=(Br, Bc), fp8="e4m3")
    b = flash2.forward(Q, K, V, block_sizes=(Br, Bc), fp8="e4m3", fp8_scaling="block")
    Tr, Tc = Nq // Br, Nk // Bc
    qkv = (Nq * d + 2 * Tr * Nk * d) * heads
    out = (Nq * d + Nq) * heads
    assert fp16.io.bytes == 2 * (qkv + out)
    assert t.io.by_tensor["Q"].dtype_bytes == 1 and t.io.by_tensor["Q_scale"].dtype_bytes == 4
    assert t.io.bytes == qkv + 2 * out + 4 * 3 * Tr * heads  # FP8 tiles, fp16 O and L, one scale each per row block
    assert b.io.bytes == qkv + 2 * out + 4 * (Tr + 2 * Tr * Tc) * heads  # a scale per tile
    assert t.io.total == fp16.io.total + 3 * Tr * heads  # elements: only the scales are new
    assert "Q_scale 4" in str(t.io)


def test_mixed_bytes_report_adds():
    a = IOReport({"Q": TensorIO(10, 0, 1), "O": TensorIO(0, 4)}, dtype_bytes=2)
    b = IOReport({"Q": TensorIO(6, 0, 1), "dQ": TensorIO(0, 3)}, dtype_bytes=2)
    s = a + b
    assert s.by_tensor["Q"].dtype_bytes == 1
    assert s.bytes == 16 * 1 + 4 * 2 + 3 * 2
    assert IOReport({"Q": TensorIO(3, 4)}, dtype_bytes=2).bytes == 14  # default unchanged


def test_explicit_defaults_run_the_plain_loop(rng):
    Q, K, V = _qkv(rng, (), 30, 30, 8)
    a = flash2.forward(Q, K, V)
    b = flash2.forward(Q, K, V, **lowp.OPTIONS)
    np.testing.assert_array_equal(a.O, b.O)
    assert a.io.by_tensor == b.io.by_tensor


# ---------------------------------------------------------------- bad options
BAD = [
    (dict(fp8="e4m4"), ValueError, "fp8"),
    (dict(fp8="fp8"), ValueError, "fp8"),
    (dict(p_fp8="int8"), ValueError, "p_fp8"),
    (dict(fp8="e4m3", fp8_scaling="row"), ValueError, "fp8_scaling"),
    (dict(fp8="e4m3", fp8_scaling="block"), ValueError, "block_sizes"),
    (dict(fp8_scaling="block", block_sizes=(8, 8)), ValueError, "fp8_scaling"),
    (dict(incoherent=1), TypeError, "incoherent"),
    (dict(incoherent_seed=3), ValueError, "incoherent_seed"),
    (dict(p_scale=256.0), ValueError, "p_scale"),
    (dict(p_fp8="e4m3", p_scale=0.0), ValueError, "p_scale"),
    (dict(p_fp8="e4m3", p_scale=float("inf")), ValueError, "p_scale"),
    (dict(key_order="backward"), ValueError, "key_order"),
]


# A wrongly typed value is refused even when it equals the default; nothing is compared unchecked.
BAD_DEFAULTS = [
    (dict(p_scale=np.array([1.0, 2.0])), ValueError, "p_scale"),
    (dict(incoherent=0), TypeError, "incoherent"),
    (dict(incoherent_seed=0.0), TypeError, "incoherent_seed"),
    (dict(incoherent_seed=1.5), TypeError, "incoherent_seed"),
    (dict(key_order=np.array(["forward", "reverse"])), ValueError, "key_order"),
    (dict(fp8_scaling=np.array(["tensor", "block"])), ValueError, "fp8_scaling"),
]


@pytest.mark.parametrize("opts,exc,word", BAD + BAD_DEFAULTS)
def test_bad_options(rng, opts, exc, word):
    Q, K, V = _qkv(rng, (), 8, 8, 16)
    with pytest.raises(exc, match=word):
        flash2.forward(Q, K, V, **opts)
    with pytest.raises(exc, match=word):
        iomodel.predict("flash2", "forward", Nq=8, Nk=8, d=16, **opts)


def test_incoherent_needs_a_power_of_two(rng):
    Q, K, V = _qkv(rng, (), 8, 8, 48)
    with pytest.raises(ValueError, match=r"incoherent.*power of two.*d=48.*64"):
        flash2.forward(Q, K, V, incoherent=True)
    with pytest.raises(ValueError, match="incoherent"):
        iomodel.predict("flash2", "forward", Nq=8, Nk=8, d=48, incoherent=True)
    with pytest.raises(ValueError, match="power of two"):
        lowp.fwht(np.ones((2, 6)))


@pytest.mark.parametrize("variant", [dict(enable_gqa=True), dict(window=(2, 2)), dict(softcap=5.0),
                                     dict(alibi_slopes=np.ones(4))])
def test_fp8_with_an_attention_variant_is_refused_by_name(variant):
    rng = np.random.default_rng(0)
    Q = rng.standard_normal((4, 16, 8))
    K = Q[:2] if "enable_gqa" in variant else Q
    name = next(iter(variant))
    with pytest.raises(ValueError, match=f"{name}: not supported with the low-precision options"):
        flash2.forward(Q, K, K, fp8="e4m3", **variant)
    with pytest.raises(ValueError, match=f"{name}: not supported with the low-precision options"):
        iomodel.predict("flash2", "forward", Nq=16, Nk=16, d=8, heads=4, fp8="e4m3",
                        **({"kv_heads": 2, **variant} if "enable_gqa" in variant else variant))



def test_defaults_of_numpy_types_run_the_plain_loop():
    assert not lowp.requested(dict(incoherent=np.bool_(False), incoherent_seed=np.int64(0), p_scale=np.float32(1.0)))
    assert lowp.requested(dict(key_order="reverse"))


def test_the_low_precision_options_are_the_forwards_only(rng):
    """flash2.backward refuses them as unknown; so do predict and predict_varlen for the backward."""
    Q, K, V = _qkv(rng, (), 4, 4, 2)
    fwd = flash2.forward(Q, K, V)
    cu = np.array([0, 4])
    for name, default in lowp.OPTIONS.items():
        msg = f"unknown option '{name}'"
        with pytest.raises(TypeError, match=msg):
            flash2.backward(Q, K, V, fwd.O, Q, fwd.L, **{name: default})
        with pytest.raises(TypeError, match=msg):
            iomodel.predict("flash2", "backward", Nq=4, Nk=4, d=2, **{name: default})
        with pytest.raises(TypeError, match=msg):
            iomodel.predict_varlen("backward", cu_seqlens_q=cu, cu_seqlens_k=cu, d=2, **{name: default})
        iomodel.predict("flash2", "forward", Nq=4, Nk=4, d=2, **{name: default})  # the forward takes them


@pytest.mark.parametrize("M", [100, 140, 200])
@pytest.mark.parametrize("lp", [dict(fp8="e4m3"), dict(fp8="e4m3", fp8_scaling="tensor"), dict(p_fp8="e5m2")])
def test_grid_is_the_fp8_loops(rng, M, lp):
    """The FP8 loop holds three descales more than FlashAttention-2's (when Q, K, V are scaled): its blocks."""
    Q = rng.standard_normal((1, 64, 4))
    res = flash2.forward(Q, Q, Q, sram_size=M, **lp)
    kw = dict(Nq=64, Nk=64, d=4, sram_size=M, **lp)
    assert iomodel.block_sizes("flash2", "forward", **kw) == res.block_sizes
    g = iomodel.grid("flash2", "forward", **kw)
    assert (g.Tr, g.Tc) == (-(-64 // res.block_sizes[0]), -(-64 // res.block_sizes[1]))


@pytest.mark.parametrize("opts", [dict(fp8="e4m3"), dict(p_fp8="e4m3"),
                                  dict(fp8="e5m2", fp8_scaling="block", block_sizes=(4, 4))])
def test_fp8_scores_that_overflow_raise_with_the_cure_that_works(opts):
    """Scores past fp32 under the FP8 options: a FloatingPointError (no NaN with warnings), and its cure is scaling
    the inputs down, not float64: the FP8 path accumulates in fp32 whatever the inputs' dtype."""
    import warnings
    Q = np.random.default_rng(0).standard_normal((16, 8)) * 1e19
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(FloatingPointError, match=r"scores .* overflowed float32.*scale the inputs down \(the FP8"):
            flash2.forward(Q, Q, Q, **opts)
