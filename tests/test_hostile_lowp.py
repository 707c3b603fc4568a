"""Hostile inputs to the low-precision module (flashref.lowp): the FP8 formats' edges, the descales, the options.

Each test marked "was:" is a defect found and fixed (a raw internal error, a NaN, or a silent wrong answer before
the fix); the property tests at the end check what the docstrings and notebook 11 claim, on random inputs."""

import warnings

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from flashref import flash2, iomodel, lowp
from flashref.problem import Problem

E4M3, E5M2 = ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2
FMT = {"e4m3": E4M3, "e5m2": E5M2}


def _qkv(rng, lead, Nq, Nk, d):
    return (rng.standard_normal(lead + (Nq, d)), rng.standard_normal(lead + (Nk, d)),
            rng.standard_normal(lead + (Nk, d)))


def _roundtrip(X, dtype, rows=None):
    """s·X8 per entry (float64), and the FP8 value X/s (to pick the entries in the format's normal range)."""
    X8, s = lowp.quantize(X, dtype, rows)
    B = X.shape[-2] if rows is None else rows
    s_rows = np.repeat(s.astype(np.float64), B, axis=-1)[..., :X.shape[-2], None]
    return lowp.decode(X8, np.float64) * s_rows, np.asarray(X, np.float64) / s_rows


def _nearest_code(X, dtype):
    """The FP8 codes of X (float64, no NaN, within ±max) rounded once to nearest, ties to the even code: searched
    in the format's table of positive finite values, independent of any cast."""
    codes = np.arange(128, dtype=np.uint8)
    values = codes.view(dtype).astype(np.float64)
    codes, values = codes[np.isfinite(values)], values[np.isfinite(values)]  # increasing with the code
    a = np.abs(X).ravel()
    hi = np.clip(np.searchsorted(values, a), 1, len(values) - 1)
    lo = hi - 1
    d_lo, d_hi = a - values[lo], values[hi] - a
    pick = np.where((d_hi < d_lo) | ((d_hi == d_lo) & (codes[hi] % 2 == 0)), hi, lo)
    sign = np.signbit(X).ravel().astype(np.uint8) << 7
    return (codes[pick] | sign).reshape(np.shape(X))


def _ref(Q, K, V, dtype=np.float64):
    Q, K, V = (X.astype(dtype) for X in (Q, K, V))
    S = Q @ K.swapaxes(-1, -2) * dtype(1 / np.sqrt(Q.shape[-1]))
    P = np.exp(S - S.max(-1, keepdims=True))
    return (P / P.sum(-1, keepdims=True)) @ V


# ---------------------------------------------------------------- quantize: input dtypes and values
@pytest.mark.parametrize("amp", [1e-6, 1e-5])
def test_quantize_of_float16_computes_the_descale_in_float32(amp):
    """was: the descale was made and applied in float16, whose subnormals are coarse: max|X| ≈ 4e-5 gave
    s = 6e-8 for 1e-7, so X/s reached 1.5·448 and saturated (29% error); at 4e-6 s rounded to 0 (100%)."""
    X = (np.random.default_rng(0).standard_normal((64, 8)) * amp).astype(np.float16)
    Xd, _ = _roundtrip(X, E4M3)
    X64 = X.astype(np.float64)
    big = np.abs(X64) > np.abs(X64).max() / 64  # X/s in e4m3's normal range
    assert (np.abs(Xd - X64)[big] / np.abs(X64)[big]).max() <= 2 ** -4 * (1 + 1e-6)  # e4m3's half ulp
    np.testing.assert_array_equal(lowp.quantize(X, E4M3)[1], lowp.quantize(X64, E4M3)[1])


def test_quantize_of_integers_is_that_of_their_float_values():
    """was: the descale was cast to the integer dtype (0), so X/0 gave inf and NaN (with RuntimeWarnings)."""
    X = np.array([[1, 2], [3, 400], [-7, 0]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        X8, s = lowp.quantize(X, E4M3)
    X8f, sf = lowp.quantize(X.astype(np.float64), E4M3)
    np.testing.assert_array_equal(s, sf)
    np.testing.assert_array_equal(X8.view(np.uint8), X8f.view(np.uint8))


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_quantize_refuses_nan_and_inf_by_name(bad):
    """was: NaN gave s = 1 and a NaN code silently; inf gave s = inf and NaN codes (a RuntimeWarning)."""
    X = np.ones((4, 2))
    X[1, 1] = bad
    with pytest.raises(ValueError, match="^X: contains NaN or inf"):
        lowp.quantize(X, E4M3)
    with pytest.raises(ValueError, match="^K: contains NaN or inf"):
        lowp.quantize(X, E4M3, 2, name="K")


def test_a_descale_past_float32_is_refused_naming_the_tensor(rng):
    """max|X| > 448 × float32's max: the descale was inf and X/inf gave all-zero codes, silently; through the
    forward it surfaced as an 'accumulator O_i overflowed' error naming no input. Now V is named."""
    with pytest.raises(FloatingPointError, match="^X: max |X| = 1e\\+300 needs a descale"):
        lowp.quantize(np.array([[1e300, 1.0]]), E4M3)
    Q, K, V = _qkv(rng, (), 8, 8, 4)
    with pytest.raises(FloatingPointError, match="^V: max |V| .* past float32's largest value"):
        flash2.forward(Q, K, V * 1e42, fp8="e4m3")
    # e5m2's larger max still holds the descale of 1e42: that one runs (and is exact up to e5m2 rounding)
    X8, s = lowp.quantize(np.array([[1e42, 1.0]]), E5M2)
    assert np.isclose(float(lowp.decode(X8[0, 0:1], np.float64)[0]) * float(s[0]), 1e42, rtol=2 ** -3)


@pytest.mark.parametrize("amax", [9e-43, 3e-43, 2e-44, 1e-38])
def test_a_subnormal_descale_is_rounded_up_so_nothing_saturates(amax):
    """was: max|X| = 9e-43 gives amax/448 = 2.0e-45, which float32 rounded *down* to 1.4e-45: X/s = 643,
    saturated to 448, a 30% error. Rounded up, the round trip is e4m3's half ulp at worst."""
    X = amax * np.array([[1.0, -0.77], [0.61, -1.0]])
    Xd, X_over_s = _roundtrip(X, E4M3)
    assert np.abs(X_over_s).max() <= 448
    assert (np.abs(Xd - X) / np.abs(X)).max() <= 2 ** -4 * (1 + 1e-6)


def test_a_descale_tinier_than_float32_holds_is_its_smallest_subnormal():
    X = np.array([[1e-300, 0.0], [-1e-300, 0.0]])
    X8, s = lowp.quantize(X, E4M3)
    assert s[0] == np.finfo(np.float32).smallest_subnormal
    assert not lowp.decode(X8).any()  # 1e-300/1.4e-45 underflows in e4m3, as on the GPU; no NaN from X/0


@pytest.mark.parametrize("X, exc", [(np.array([1.0, 2.0]), ValueError), (np.float64(3.0), ValueError),
                                    (np.array([[True, False]]), TypeError),
                                    (np.array([[1 + 1j, 2]]), TypeError)])
def test_quantize_refuses_what_is_not_a_real_matrix_by_name(X, exc):
    """was: a 1-D or 0-D X raised a bare IndexError; a boolean one was quantised (flash2.forward refuses it)."""
    with pytest.raises(exc, match="^X: expected"):
        lowp.quantize(X, E4M3)


def test_quantize_takes_nested_lists():
    """was: AttributeError: 'list' object has no attribute 'shape'."""
    X8, s = lowp.quantize([[1.0, -2.0], [0.5, 4.0]], E4M3)
    np.testing.assert_allclose(lowp.decode(X8, np.float64) * float(s[0]), [[1.0, -2.0], [0.5, 4.0]], rtol=1e-6)


@pytest.mark.parametrize("f", [lambda dt: lowp.fmax(dt), lambda dt: lowp.cast(np.ones(2), dt),
                               lambda dt: lowp.quantize(np.ones((2, 2)), dt)])
@pytest.mark.parametrize("dt", ["e4m3", np.int8, bool])
def test_a_storage_dtype_that_is_not_a_float_is_named(f, dt):
    """was: ml_dtypes' "data type <class 'numpy.str_'> not inexact", naming no argument."""
    with pytest.raises(TypeError, match="^dtype: expected a floating-point storage dtype"):
        f(dt)


# ---------------------------------------------------------------- the rotation's helpers
@pytest.mark.parametrize("seed, exc", [(-1, ValueError), (1.5, TypeError), (True, TypeError),
                                       (np.int64(-3), ValueError)])
def test_rotate_checks_its_seed_as_forward_checks_incoherent_seed(seed, exc):
    """was: numpy's bare "expected non-negative integer" (-1), a SeedSequence TypeError (1.5), and True taken as 1."""
    with pytest.raises(exc, match="^seed: expected a non-negative integer"):
        lowp.rotate(np.ones((2, 4)), seed)
    with pytest.raises(exc, match="^seed: expected a non-negative integer"):
        lowp.random_signs(4, seed)


def test_fwht_of_a_scalar_is_refused_by_name():
    """was: IndexError: tuple index out of range."""
    with pytest.raises(ValueError, match="^X: expected at least one axis"):
        lowp.fwht(np.float64(2.0))


# ---------------------------------------------------------------- options
@pytest.mark.parametrize("p_scale", [1e-40, 1e39, 1e300])
def test_p_scale_outside_float32_is_refused_by_name_by_both(rng, p_scale):
    """was: 1e-40 made s_v / p_scale inf in fp32, raised as 'the accumulator O_i overflowed: the inputs are
    too large' (they were not); 1e39 and 1e300 ran, P̃·p_scale overflowing fp32; predict took all three."""
    Q, K, V = _qkv(rng, (), 8, 8, 4)
    with pytest.raises(ValueError, match="^p_scale: .*float32's normal range"):
        flash2.forward(Q, K, V, p_fp8="e4m3", p_scale=p_scale)
    with pytest.raises(ValueError, match="^p_scale: .*float32's normal range"):
        iomodel.predict("flash2", "forward", Nq=8, Nk=8, d=4, p_fp8="e4m3", p_scale=p_scale)


def test_p_scale_at_float32s_edges_runs(rng):
    Q, K, V = _qkv(rng, (), 8, 8, 4)
    for p_scale in (float(np.finfo(np.float32).max), 2.0 ** -100):
        r = flash2.forward(Q, K, V, p_fp8="e4m3", p_scale=p_scale)
        assert np.isfinite(r.O).all()


def test_lowp_forward_called_directly_raises_as_flash2_forward_does(rng):
    """was: lowp.forward (public) ran without flash2.forward's overflow guard: s_v / p_scale past fp32
    (max|V| = 1e36, p_scale = 1e-6) warned 'overflow encountered in divide' before its FloatingPointError."""
    Q, K, V = _qkv(rng, (2,), 16, 16, 8)
    opts = dict(p_fp8="e4m3", p_scale=1e-6, fp8="e4m3", block_sizes=(8, 8))
    for forward in (lowp.forward, flash2.forward):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            with pytest.raises(FloatingPointError, match="overflowed float32"):
                forward(Q, K, V * 1e36, **opts)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        np.testing.assert_array_equal(lowp.forward(Q, K, V, **opts).O, flash2.forward(Q, K, V, **opts).O)


def test_p_scale_takes_a_0d_array_as_scale_and_dropout_p_do(rng):
    """was: p_scale=np.array(2.0) was refused ("expected a finite number > 0"), where scale and dropout_p take it."""
    Q, K, V = _qkv(rng, (), 8, 8, 4)
    a = flash2.forward(Q, K, V, p_fp8="e4m3", p_scale=np.array(256.0))
    np.testing.assert_array_equal(a.O, flash2.forward(Q, K, V, p_fp8="e4m3", p_scale=256.0).O)
    pred = iomodel.predict("flash2", "forward", Nq=8, Nk=8, d=4, p_fp8="e4m3", p_scale=np.array(256.0))
    assert (pred.reads, pred.writes) == (a.io.reads, a.io.writes)
    with pytest.raises(ValueError, match="^p_scale: "):
        flash2.forward(Q, K, V, p_fp8="e4m3", p_scale=np.array(0.0))


def test_enable_gqa_with_equal_heads_is_accepted_by_both(rng):
    """was: refused ("enable_gqa: not supported") even with Hq = Hkv, a group of 1, where it changes nothing."""
    Q, K, V = _qkv(rng, (2, 3), 8, 8, 4)
    opts = dict(fp8="e4m3", p_fp8="e4m3", block_sizes=(4, 4))
    a = flash2.forward(Q, K, V, enable_gqa=True, **opts)
    b = flash2.forward(Q, K, V, **opts)
    np.testing.assert_array_equal(a.O, b.O)
    pred = iomodel.predict("flash2", "forward", Nq=8, Nk=8, d=4, heads=6, kv_heads=6, enable_gqa=True, **opts)
    assert (pred.reads, pred.writes, pred.bytes) == (a.io.reads, a.io.writes, a.io.bytes)


# ---------------------------------------------------------------- P in FP8 with dropout
@pytest.mark.parametrize("p_scale", [256.0, 448.0])
@pytest.mark.parametrize("dropout_p", [0.2, 0.5])
def test_p_fp8_with_dropout_does_not_saturate(p_scale, dropout_p):
    """was: P̃ was multiplied by Z = 1/(1 − p) before P̃·p_scale was cast, so at p_scale = 256 and p = 0.5 the cast
    saw up to 512 > 448 and clipped it: 16× the error without dropout (0.23), silently. The kept entries' rounding
    error is that of the same P̃ without dropout, scaled by 1/(1 − p) in the product: so against the float64
    forward with the same seed, the error is within twice (slack for which entries are kept) 1/(1 − p) times the
    no-dropout error."""
    rng = np.random.default_rng(0)
    Q, K, V = _qkv(rng, (2,), 64, 64, 16)
    lp = dict(p_fp8="e4m3", p_scale=p_scale, block_sizes=(16, 16))
    plain = np.abs(flash2.forward(Q, K, V, **lp).O - flash2.forward(Q, K, V).O).max()
    drop = dict(dropout_p=dropout_p, seed=1)
    r = flash2.forward(Q, K, V, **drop, **lp)
    err = np.abs(r.O - flash2.forward(Q, K, V, **drop).O).max()
    assert 0 < err <= 2 * plain / (1 - dropout_p)


@pytest.mark.parametrize("lp", [dict(fp8="e4m3"), dict(fp8="e5m2", fp8_scaling="block", p_fp8="e4m3"),
                                dict(p_fp8="e4m3", p_scale=256.0)])
def test_fp8_with_dropout_accumulates_in_fp32_for_float64_inputs(lp):
    """was: Z came in the inputs' dtype, so float64 inputs made P̃·V and O_i float64 (the module says fp32 whenever
    an FP8 option is set): the error reported was smaller than the modelled hardware's. Inputs exact in float32
    give the same FP8 codes from either dtype, so an fp32 loop gives the same O, bit for bit."""
    rng = np.random.default_rng(3)
    Q, K, V = (X.astype(np.float32) for X in _qkv(rng, (2,), 24, 20, 8))
    opts = dict(dropout_p=0.3, seed=5, block_sizes=(8, 8), **lp)
    r32 = flash2.forward(Q, K, V, **opts)
    r64 = flash2.forward(*(X.astype(np.float64) for X in (Q, K, V)), **opts)
    assert r64.O.dtype == np.float32
    np.testing.assert_array_equal(r64.O, r32.O)
    np.testing.assert_array_equal(r64.L, r32.L)


@pytest.mark.parametrize("f", [lowp.check_options, lowp.grid])
def test_check_options_lists_the_valid_options(rng, f):
    """was: Python's bare "_values() got an unexpected keyword argument 'casual'"."""
    Q = rng.standard_normal((8, 4))
    pb = Problem.from_arrays(Q, Q, Q, "test")
    with pytest.raises(TypeError, match="unknown option 'casual'; valid options are fp8, fp8_scaling"):
        f(pb, fp8="e4m3", casual=True)


# ---------------------------------------------------------------- what already held, pinned down
def test_cast_saturates_as_satfinite_and_keeps_negative_zero():
    """±inf and everything past max become ±max (cvt.satfinite), NaN stays NaN; -0 keeps its sign bit."""
    x = np.array([np.inf, -np.inf, 1e30, 464.0, 449.0, -0.0, np.nan])
    np.testing.assert_array_equal(lowp.cast(x, E4M3).astype(float)[:5], [448, -448, 448, 448, 448])
    assert lowp.cast(x, E4M3).view(np.uint8)[5] == 0x80 and np.isnan(lowp.cast(x, E4M3).astype(float)[6])
    np.testing.assert_array_equal(lowp.cast(np.array([np.inf, 61440.0, -1e10]), E5M2).astype(float),
                                  [57344, 57344, -57344])


@pytest.mark.parametrize("fmt", ["e4m3", "e5m2"])
def test_cast_of_float64_rounds_once(fmt):
    """was: lowp.cast(1.0625 + 2^-30) gave E4M3's 1.0: ml_dtypes casts float64 through float32, whose rounding
    lands on the midpoint 1.0625, and the tie goes to the even 1; once rounded, it is 1.125 (above the midpoint).
    Now every float64, just off every midpoint and on it, in every binade and the subnormals, rounds as a search of
    the format's values says; float32 and float16 inputs as ml_dtypes casts them (one rounding already)."""
    dt = FMT[fmt]
    assert lowp.cast(np.array([1.0625 + 2 ** -30, 1.0625, -1.0625 - 2 ** -30]), E4M3).astype(float).tolist() \
        == [1.125, 1.0, -1.125]
    values = np.unique(np.abs(np.arange(256, dtype=np.uint8).view(dt).astype(np.float64)))
    values = values[np.isfinite(values)]
    mid = (values[:-1] + values[1:]) / 2
    X = np.concatenate([mid, mid * (1 + 2 ** -40), mid * (1 - 2 ** -40), mid + 2 ** -60, values,
                        np.random.default_rng(3).standard_normal(20000) * 2.0 ** np.arange(-20, 20).repeat(500)])
    X = np.concatenate([X, -X])
    X = X[np.abs(X) <= lowp.fmax(dt)]
    np.testing.assert_array_equal(lowp.cast(X, dt).view(np.uint8), _nearest_code(X, dt))
    X32 = X.astype(np.float32)
    np.testing.assert_array_equal(lowp.cast(X32, dt).view(np.uint8), X32.astype(dt).view(np.uint8))


@pytest.mark.parametrize("lead", [(0,), (2, 0), (0, 3)])
def test_an_empty_head_axis_gives_empty_results(lead):
    Z = np.zeros(lead + (5, 4))
    r = flash2.forward(Z, Z, Z, fp8="e4m3", fp8_scaling="block", p_fp8="e4m3", block_sizes=(2, 3))
    assert r.O.shape == lead + (5, 4) and r.L.shape == lead + (5,) and r.p_underflow.shape == lead + (5, 5)
    assert r.scales["Q"].shape == lead + (3,) and r.scales["K"].shape == lead + (2,)
    assert r.io.bytes == 0


@pytest.mark.parametrize("rows_per_block", [None, 2])
def test_quantize_of_no_rows_is_empty(rows_per_block):
    # rows_per_block=None (one tile of every row) divided by N = 0: ZeroDivisionError
    X8, s = lowp.quantize(np.ones((3, 0, 4)), lowp.FORMATS["e4m3"], rows_per_block)
    assert X8.shape == (3, 0, 4) and s.shape == (3, 0)


def test_all_zero_and_negative_zero_blocks_have_descale_one(rng):
    Q, K, V = _qkv(rng, (), 12, 12, 4)
    V[4:8] = -0.0  # one all-(-0) block of V
    r = flash2.forward(Q, K, V, fp8="e4m3", fp8_scaling="block", block_sizes=(4, 4))
    assert r.scales["V"][1] == 1.0 and np.isfinite(r.O).all()
    Z = np.zeros((6, 4))
    np.testing.assert_array_equal(flash2.forward(Z, Z, Z, fp8="e5m2").O, 0.0)


@given(mag=st.integers(-150, 120), fmt=st.sampled_from(["e4m3", "e5m2"]), seed=st.integers(0, 2 ** 16),
       rows=st.sampled_from([None, 1, 3, 7]))
def test_quantize_is_ml_dtypes_cast_of_x_over_s(mag, fmt, seed, rows):
    """The codes are X/s rounded once to nearest even (ml_dtypes' own cast of float64 rounds twice, through
    float32; the table search of _nearest_code does not); s is a positive float32 with
    max|X/s| ≤ max (to float32's rounding of s, 2⁻²⁴, which still rounds to max: none saturates); and s·X8 is
    X to half the format's ulp (2⁻⁴ e4m3, 2⁻³ e5m2) wherever X/s is in the format's normal range: at any
    magnitude from 1e-45 to 1e36."""
    dt = FMT[fmt]
    X = np.random.default_rng(seed).standard_normal((2, 9, 4)) * 2.0 ** mag
    X8, s = lowp.quantize(X, dt, rows)
    Xd, X_over_s = _roundtrip(X, dt, rows)
    assert (s > 0).all() and s.dtype == np.float32 and np.abs(X_over_s).max() <= lowp.fmax(dt) * (1 + 2 ** -23)
    np.testing.assert_array_equal(X8.view(np.uint8), _nearest_code(X_over_s, dt))
    normal = np.abs(X_over_s) >= float(ml_dtypes.finfo(dt).tiny)
    half_ulp = 2.0 ** -(ml_dtypes.finfo(dt).nmant + 1)
    assert (np.abs(Xd - X) <= half_ulp * np.abs(X) * (1 + 1e-6))[normal].all()


@given(Nq=st.integers(1, 40), Nk=st.integers(1, 40), fmt=st.sampled_from(["e4m3", "e5m2"]),
       scaling=st.sampled_from(["tensor", "block"]), incoherent=st.booleans(), seed=st.integers(0, 999),
       amp=st.sampled_from([1e-3, 1.0, 4.0]), Br=st.integers(1, 20), Bc=st.integers(1, 20))
def test_fp8_error_is_at_most_twice_plain_fp8(Nq, Nk, fmt, scaling, incoherent, seed, amp, Br, Bc):
    """The oracle: against float64, the FP8 loop's error is at most twice that of the same FP8 values (Q, K, V
    rotated, quantised with the same descales, dequantised) through plain fp32 attention."""
    rng = np.random.default_rng(seed)
    Q, K, V = _qkv(rng, (2,), Nq, Nk, 8)
    Q, K = Q * amp, K * amp
    Q[0, 0, 0] *= 30.0  # an outlier
    r = flash2.forward(Q, K, V, fp8=fmt, fp8_scaling=scaling, incoherent=incoherent, block_sizes=(Br, Bc))
    Qh, Kh = (lowp.rotate(Q, 0), lowp.rotate(K, 0)) if incoherent else (Q, K)
    rows = {"Q": Br, "K": Bc, "V": Bc} if scaling == "block" else dict.fromkeys("QKV")
    plain = [_roundtrip(X, FMT[fmt], rows[n])[0] for n, X in zip("QKV", (Qh, Kh, V))]
    O = _ref(Q, K, V)
    assert np.abs(r.O - O).max() <= 2 * np.abs(_ref(*plain, dtype=np.float32) - O).max() + 1e-6


@given(Nq=st.integers(1, 30), Nk=st.integers(1, 30), d=st.sampled_from([1, 3, 4, 8]), causal=st.booleans(),
       lead=st.sampled_from([(), (2,), (0,)]), Br=st.integers(1, 33), Bc=st.integers(1, 33),
       fmt=st.sampled_from(["e4m3", "e5m2"]), scaling=st.sampled_from(["tensor", "block"]),
       p_fp8=st.sampled_from([None, "e4m3"]), reverse=st.booleans(), dropout=st.booleans(), mask=st.booleans())
def test_simulation_equals_prediction_with_ragged_blocks_masks_and_dropout(Nq, Nk, d, causal, lead, Br, Bc, fmt,
                                                                          scaling, p_fp8, reverse, dropout, mask):
    """Block sizes that do not divide N, Nq ≠ Nk, causal, a mask, dropout, d not a power of two, no heads: the
    simulator and iomodel.predict count the same reads, writes and bytes, descales included, line by line."""
    rng = np.random.default_rng(Nq * 31 + Nk)
    Q, K, V = _qkv(rng, lead, Nq, Nk, d)
    opts = dict(fp8=fmt, fp8_scaling=scaling, p_fp8=p_fp8, key_order="reverse" if reverse else "forward",
                causal=causal, dropout_p=0.3 if dropout else 0.0, seed=2, block_sizes=(Br, Bc))
    if mask:
        opts["mask"] = rng.random((Nq, Nk)) < 0.5
    sim = flash2.forward(Q, K, V, **opts)
    pred = iomodel.predict("flash2", "forward", Nq=Nq, Nk=Nk, d=d, heads=int(np.prod(lead)), **opts)
    assert sim.io.by_line == pred.by_line
    assert (sim.io.reads, sim.io.writes, sim.io.bytes) == (pred.reads, pred.writes, pred.bytes)
    assert sim.O.shape == Q.shape and np.isfinite(sim.O).all()
