"""Hostile inputs to the variants, low precision, decoding and block-sparse modules: each test is a defect
that was found and fixed (a raw internal error, a NaN, or a silent wrong answer before the fix)."""

import tracemalloc
import warnings

import numpy as np
import pytest

from flashref import blocksparse, decoding, flash2, iomodel, lowp, patterns, standard
from flashref.iomodel import blocksparse as io_blocksparse
from flashref.problem import VARIANT_OPTIONS, Problem


def _qkv(rng, Nq, Nk, d=2, lead=(1,)):
    return (rng.standard_normal(lead + (Nq, d)), rng.standard_normal(lead + (Nk, d)),
            rng.standard_normal(lead + (Nk, d)))


# ---------------------------------------------------------------- ALiBi
@pytest.mark.parametrize("alg", [flash2, standard])
def test_alibi_that_overflows_raises_instead_of_masking_the_row(rng, alg):
    """slope·|i − j| past the dtype became -inf, read as "masked": a row whose nearest allowed key is 2 away
    gave O = 0 where the answer is V[2] (softmax of finite scores). Now a FloatingPointError names ALiBi."""
    Q, K, V = _qkv(rng, 1, 4)
    mask = np.array([[False, False, True, True]])
    with pytest.raises(FloatingPointError, match="ALiBi"):
        alg.forward(Q, K, V, alibi_slopes=np.array([1e308]), mask=mask)


def test_alibi_overflow_is_checked_in_the_inputs_dtype(rng):
    """standard cast the float64 ALiBi scores back to float32 after the fact: -6e38 became -inf silently."""
    Q, K, V = (X.astype(np.float32) for X in _qkv(rng, 1, 4))
    with pytest.raises(FloatingPointError, match="float32"):
        standard.forward(Q, K, V, alibi_slopes=np.array([3e38]), mask=np.array([[False, False, True, True]]))


def test_paged_decoding_alibi_overflow_raises(rng):
    Q = rng.standard_normal((1, 1, 1, 2))
    Kp, Vp = rng.standard_normal((1, 1, 4, 2)), rng.standard_normal((1, 1, 4, 2))
    with pytest.raises(FloatingPointError, match="ALiBi"):
        decoding.forward_paged(Q, Kp, Vp, np.array([[0]]), np.array([4]), alibi_slopes=np.array([1e308]),
                               window=(-1, -1), causal=False, scale=1.0, softcap=None)


# ---------------------------------------------------------------- softcap
@pytest.mark.parametrize("alg", [flash2, standard])
@pytest.mark.parametrize("c", [1e-46, 1e-300, 1e39, 1e300])
def test_softcap_outside_float32s_range_is_computed_right_in_float32(alg, c):
    """was: with float32 inputs, S/c ran in float32, where c rounded to 0 or inf: a RuntimeWarning (divide by zero),
    then a FloatingPointError telling the user to scale the inputs down, which cannot help. Now the cap is
    computed with c in float64, and the float32 answer is the float64 one to float32's rounding."""
    rng = np.random.default_rng(0)
    Q, K, V = (X.astype(np.float32) for X in _qkv(rng, 6, 6, d=4, lead=(2,)))
    Q[0, 0] = 0.0  # a row of zero scores: S/c = 0/c
    dO = rng.standard_normal(Q.shape).astype(np.float32)
    X64 = [X.astype(np.float64) for X in (Q, K, V, dO)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        r32, r64 = alg.forward(Q, K, V, softcap=c), alg.forward(*X64[:3], softcap=c)
        saved32 = (r32.O, dO, r32.L) if alg is flash2 else (dO, r32.P)
        saved64 = (r64.O, X64[3], r64.L) if alg is flash2 else (X64[3], r64.P)
        g32 = alg.backward(Q, K, V, *saved32, softcap=c)
        g64 = alg.backward(*X64[:3], *saved64, softcap=c)
    assert r32.O.dtype == np.float32 and g32.dQ.dtype == np.float32
    np.testing.assert_allclose(r32.O, r64.O, rtol=1e-5, atol=1e-5)
    for name in ("dQ", "dK", "dV"):
        np.testing.assert_allclose(getattr(g32, name), getattr(g64, name), rtol=1e-4, atol=1e-4)


# ---------------------------------------------------------------- bias
def test_a_bias_shared_by_every_head_is_not_materialised_per_head():
    """was: one (Nq, Nk) bias under B·H heads was cast after broadcasting (problem.py: a full heads×Nq×Nk array),
    then copied into HBM (memory.py: a second one): 1.35 GB more at B=4, H=16, N=1024. It stays a broadcast view
    now, cast once at its own shape; the results and the IO, counted by the logical shape, are unchanged."""
    rng = np.random.default_rng(0)
    B, H, N = 2, 16, 64
    Q, K, V = (X.astype(np.float32) for X in _qkv(rng, N, N, d=8, lead=(B, H)))
    bias = rng.standard_normal((N, N))  # float64, cast to the float32 compute dtype
    full = np.ascontiguousarray(np.broadcast_to(bias, (B, H, N, N)))  # the same bias, materialised
    pb = Problem.from_arrays(Q, K, V, "flash2.forward", VARIANT_OPTIONS, bias=bias)
    assert pb.bias.shape == (B, H, N, N) and pb.bias.dtype == np.float32
    assert pb.bias.strides[:2] == (0, 0) and not pb.bias.flags.writeable  # read-only: nothing writes into it
    assert pb.bias.base.nbytes == N * N * 4  # one float32 copy of (N, N), not B·H of them
    pb64 = Problem.from_arrays(*(X.astype(np.float64) for X in (Q, K, V)), "flash2.forward", VARIANT_OPTIONS,
                               bias=bias)
    assert np.shares_memory(pb64.bias, bias)  # already in the compute dtype: the caller's array itself

    def peak(**bias_opt):
        tracemalloc.start()
        try:
            fwd = flash2.forward(Q, K, V, block_sizes=(16, 16), **bias_opt)
            bwd = flash2.backward(Q, K, V, fwd.O, Q, fwd.L, block_sizes=(16, 16), **bias_opt)
            return tracemalloc.get_traced_memory()[1], fwd, bwd
        finally:
            tracemalloc.stop()

    none, _, _ = peak()
    shared, fwd, bwd = peak(bias=bias)
    assert shared - none < full.nbytes / 4  # two full copies (one in float32) before
    fwd_full = flash2.forward(Q, K, V, block_sizes=(16, 16), bias=full)
    bwd_full = flash2.backward(Q, K, V, fwd_full.O, Q, fwd_full.L, block_sizes=(16, 16), bias=full)
    np.testing.assert_array_equal(fwd.O, fwd_full.O)
    np.testing.assert_array_equal(bwd.dQ, bwd_full.dQ)
    assert fwd.io.by_line == fwd_full.io.by_line and bwd.io.by_line == bwd_full.io.by_line
    pred = iomodel.predict("flash2", "forward", Nq=N, Nk=N, d=8, heads=B * H, bias=bias, block_sizes=(16, 16))
    assert (pred.reads, pred.writes) == (fwd.io.reads, fwd.io.writes)
    s = standard.forward(Q, K, V, bias=bias)
    np.testing.assert_array_equal(s.O, standard.forward(Q, K, V, bias=full).O)


# ---------------------------------------------------------------- FP8
def test_fp8_descale_of_a_tiny_tensor_does_not_underflow_to_zero(rng):
    """max|V| = 1e-300: its float32 descale amax/448 was 0, so V/0 gave NaN (0/0) and a FloatingPointError
    that told the user to scale the inputs *down*. Now the values underflow in FP8 as they would: O ≈ 0."""
    Q, K, _ = _qkv(rng, 3, 5, d=4)
    V = np.zeros((1, 5, 4))
    V[0, 2, 1] = 1e-300
    O = flash2.forward(Q, K, V, fp8="e4m3").O
    assert np.isfinite(O).all() and np.abs(O.astype(np.float64)).max() < 1e-299


def test_fp8_quantize_refuses_a_bad_rows_per_block(rng):
    X = rng.standard_normal((4, 2))
    with pytest.raises(ValueError, match="rows_per_block"):  # was ZeroDivisionError
        lowp.quantize(X, lowp.FORMATS["e4m3"], 0)


def test_negative_incoherent_seed_is_refused_by_name_and_by_predict(rng):
    """The simulator raised numpy's bare "expected non-negative integer"; predict accepted it."""
    Q, K, V = _qkv(rng, 3, 3, d=4)
    with pytest.raises(ValueError, match="incoherent_seed"):
        flash2.forward(Q, K, V, fp8="e4m3", incoherent=True, incoherent_seed=-1)
    with pytest.raises(ValueError, match="incoherent_seed"):
        iomodel.predict("flash2", "forward", Nq=3, Nk=3, d=4, fp8="e4m3", incoherent=True, incoherent_seed=-1)


# ---------------------------------------------------------------- decoding
@pytest.mark.parametrize("Nk, S", [(3, 5), (5, 0), (5, True)])
def test_split_bounds_refuses_splits_it_cannot_make(Nk, S):
    """split_bounds(3, 5) returned empty splits (its docstring: "none empty"); (5, 0) divided by zero."""
    with pytest.raises((TypeError, ValueError), match="num_splits"):
        decoding.split_bounds(Nk, S)


# ---------------------------------------------------------------- block-sparse
def test_predict_blocksparse_without_a_block_mask_names_it():
    """Was "forward() missing 1 required keyword-only argument", an internal function's signature."""
    with pytest.raises(TypeError, match="block_mask: expected a boolean array"):
        iomodel.predict("blocksparse", "forward", Nq=4, Nk=4, d=4)


def test_nonzero_rows_checks_its_arguments():
    with pytest.raises(ValueError, match="Br"):  # was ZeroDivisionError
        io_blocksparse.nonzero_rows(np.ones((2, 2), bool), 4, 0)
    with pytest.raises(ValueError, match="block_mask"):  # 3 block rows for Tr = 2: numpy's broadcasting error
        io_blocksparse.nonzero_rows(np.ones((3, 2), bool), 4, 2)
    assert io_blocksparse.nonzero_rows(np.array([[True, True], [False, True]]), 3, 2) == 2 + 2 + 1
    # a mask that is not boolean is a TypeError, as patterns.check_block_mask (the simulator, predict) raises
    for bad in (np.ones((2, 2)), np.ones((2, 2), int), "junk", [[1, 0], [0, 1]]):
        with pytest.raises(TypeError, match="^block_mask: expected a boolean array"):
            io_blocksparse.nonzero_rows(bad, 4, 2)
        with pytest.raises(TypeError, match="^block_mask: expected a boolean array"):
            iomodel.predict("blocksparse", "forward", Nq=4, Nk=4, d=2, block_sizes=(2, 2), block_mask=bad)


@pytest.mark.parametrize("bad", [None, "ab", np.ones(3, bool)])
def test_density_refuses_what_is_not_a_block_mask(bad):
    """density(None) was 0.0 and density("ab") 1.0."""
    with pytest.raises(TypeError, match="block_mask"):
        patterns.density(bad)


@pytest.mark.parametrize("seed, err", [(1.5, TypeError), (-1, ValueError), (None, TypeError)])
def test_random_blocks_seed_is_checked(seed, err):
    """A float seed or a negative one raised numpy's messages, not naming seed; None drew an unseeded mask."""
    with pytest.raises(err, match="seed"):
        blocksparse.random_blocks(3, 3, 0.5, seed=seed)


def test_local_blocks_causal_must_be_a_bool():
    with pytest.raises(TypeError, match="causal"):  # "no" was truthy: a causal pattern
        blocksparse.local_blocks(4, 4, 2, 2, 1, causal="no")
