"""One way in: every entry point checks options by the same rules; edge cases behave as the contract says."""

import subprocess
import sys
import warnings

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from reference import attention_ref, rel_err

from flashref import Memory, blocksparse, decoding, flash1, flash2, iomodel, standard

rng = np.random.default_rng(0)
Q, K, V = rng.standard_normal((2, 6, 4)), rng.standard_normal((2, 9, 4)), rng.standard_normal((2, 9, 4))
dO = rng.standard_normal((2, 6, 4))


def _bm(**opts):
    g = blocksparse.grid(6, 9, 4, **{k: v for k, v in opts.items() if k in ("sram_size", "block_sizes")})
    return np.ones((g.Tr, g.Tc), dtype=bool)


# Each entry point as a function of its options.
ENTRY_POINTS = {
    "standard.forward": lambda **o: standard.forward(Q, K, V, **o),
    "standard.backward": lambda **o: standard.backward(Q, K, V, dO, standard.forward(Q, K, V).P, **o),
    "flash1.forward": lambda **o: flash1.forward(Q, K, V, **o),
    "flash1.backward": lambda **o: flash1.backward(Q, K, V, *_f1(), **o),
    "flash2.forward": lambda **o: flash2.forward(Q, K, V, **o),
    "flash2.backward": lambda **o: flash2.backward(Q, K, V, *_f2(), **o),
    "blocksparse.forward": lambda **o: blocksparse.forward(Q, K, V, _bm(**o), **o),
    "decoding.forward": lambda **o: decoding.forward(Q, K, V, **o),
    "iomodel.predict": lambda **o: iomodel.predict("flash2", "forward", Nq=6, Nk=9, d=4, heads=2, **o),
    "iomodel.grid": lambda **o: iomodel.grid("flash1", "forward", Nq=6, Nk=9, d=4, **o),
}


def _f1():
    f = flash1.forward(Q, K, V)
    return f.O, dO, f.l, f.m


def _f2():
    f = flash2.forward(Q, K, V)
    return f.O, dO, f.L


@pytest.mark.parametrize("entry", ENTRY_POINTS)
@pytest.mark.parametrize("typo", ["casual", "M", "block_size", "dropout", "batch"])
def test_unknown_option_is_a_type_error_naming_it_and_the_valid_ones(entry, typo):
    with pytest.raises(TypeError, match=rf"unknown option '{typo}'; valid options are .*causal"):
        ENTRY_POINTS[entry](**{typo: 1})


def _listed(call) -> set:
    """The names an unknown option's TypeError lists as the valid ones."""
    with pytest.raises(TypeError, match="valid options are ") as err:
        call(bogus=1)
    return set(str(err.value).split("valid options are ")[1].split(", "))


def test_the_valid_options_listed_are_every_option_taken():
    """Each algorithm's error lists exactly what it takes: flash2.forward its FP8 options too (which it takes
    and runs through flashref.lowp), flash2.backward not them (it refuses them); each listed one is taken.
    Every backward takes bias_grad, which the lists of standard's and flash2's left out; the varlen entry points
    listed mask and bias, which they refuse (a ValueError saying why): their lists leave those out now."""
    from flashref import lowp
    from flashref.problem import SHARED_OPTIONS

    shared = set(SHARED_OPTIONS)
    want = {"standard.forward": shared | set(standard.OPTIONS),
            "standard.backward": shared | set(standard.OPTIONS) | {"bias_grad"},
            "flash1.forward": shared | set(flash1.OPTIONS),
            "flash1.backward": shared | set(flash1.OPTIONS) | {"bias_grad"},
            "blocksparse.forward": shared | set(flash1.OPTIONS),
            "flash2.forward": shared | set(flash2.OPTIONS) | set(lowp.OPTIONS),
            "flash2.backward": shared | set(flash2.OPTIONS) | {"bias_grad"},
            "decoding.forward": shared | set(decoding.OPTIONS)}
    for entry, names in want.items():
        assert _listed(ENTRY_POINTS[entry]) == names, entry
    cu = np.array([0, 2, 6])
    refused = {"mask", "bias"}  # refused by name (a ValueError saying why) unless None
    varlen = {"flash2.forward": lambda **o: flash2.forward_varlen(Q, Q, Q, cu, cu, **o),
              "flash2.backward": lambda **o: flash2.backward_varlen(Q, Q, Q, Q, Q, Q[..., 0], cu, cu, **o)}
    for entry, call in varlen.items():
        assert _listed(call) == want[entry] - refused - {"bias_grad"}, entry
        call(mask=None, bias=None)
        with pytest.raises(ValueError, match="mask is not supported with variable-length batches"):
            call(mask=np.ones((2, 2), bool))
        # predict_varlen lists the same, and the shapes' heads and kv_heads
        direction = entry.split(".")[1]
        assert _listed(lambda direction=direction, **o: iomodel.predict_varlen(
            direction, cu_seqlens_q=cu, cu_seqlens_k=cu, d=4, **o)) \
            == want[entry] - refused - {"bias_grad"} | {"heads", "kv_heads"}, entry
    # the FP8 options listed are taken (at their defaults: the plain loop, the same result)
    assert np.array_equal(flash2.forward(Q, K, V, **lowp.OPTIONS).O, flash2.forward(Q, K, V).O)
    with pytest.raises(TypeError, match="^flash2.backward: unknown option 'fp8'"):
        ENTRY_POINTS["flash2.backward"](fp8=None)


# The first arc's hostile inputs to iomodel.predict, each with what it must raise now.
PREDICT_FINDINGS = [
    (dict(heads=-3), ValueError, "heads"),
    (dict(heads=2.5), TypeError, "heads"),
    (dict(dropout_p=2.0), ValueError, "dropout_p"),
    (dict(causal="no"), TypeError, "causal"),
    (dict(block_sizes=(-1, 4)), ValueError, r"block_sizes\[0\]"),
    (dict(dtype_bytes=0), ValueError, "dtype_bytes"),
    (dict(block_sizes=(0, 4)), ValueError, r"block_sizes\[0\]"),
    (dict(sram_size=-5), ValueError, "sram_size"),
    # the second arc's: "no slopes" is None in both (predict had taken False as None, the simulator refused it)
    (dict(alibi_slopes=False), TypeError, "alibi_slopes"),
]


@pytest.mark.parametrize("opts,exc,msg", PREDICT_FINDINGS, ids=[str(c[0]) for c in PREDICT_FINDINGS])
def test_predict_refuses_what_the_simulator_refuses(opts, exc, msg):
    with pytest.raises(exc, match=msg):
        iomodel.predict("flash1", "forward", Nq=64, Nk=64, d=8, **opts)
    sim_opts = {k: v for k, v in opts.items() if k != "heads"}
    if sim_opts:
        with pytest.raises(exc, match=msg):
            flash1.forward(Q, K, V, **sim_opts)


# The options iomodel.grid takes but does not need (the grid is fixed before they are looked at), good and bad:
# (algorithm, direction, options). grid had accepted every value; it must take and refuse what predict does.
_SHAPE = dict(Nq=6, Nk=9, d=4, heads=2)
_G = iomodel.grid("blocksparse", "forward", **_SHAPE)
GRID_IGNORED = [
    ("decoding", "forward", dict(num_splits=3)),
    ("decoding", "forward", dict(num_splits=10)),  # more splits than keys
    ("decoding", "forward", dict(num_splits=0)),
    ("decoding", "forward", dict(num_splits=2.5)),
    ("decoding", "forward", dict(sms=8)),
    ("decoding", "forward", dict(sms="junk")),
    ("decoding", "forward", dict(sms=-1, num_splits=2)),
    ("blocksparse", "forward", dict(block_mask=np.ones((_G.Tr, _G.Tc), bool))),
    ("blocksparse", "forward", dict(block_mask="junk")),
    ("blocksparse", "backward", dict(block_mask=np.ones((_G.Tr, _G.Tc)))),  # float, not bool
    ("blocksparse", "backward", dict(block_mask=np.ones((_G.Tr + 1, _G.Tc), bool))),
    ("blocksparse", "forward", dict(block_mask=None)),
    ("flash2", "backward", dict(bias_grad=True)),  # no bias
    ("flash2", "backward", dict(bias_grad=True, bias=True)),
    ("flash2", "backward", dict(bias_grad="yes", bias=True)),
]


@pytest.mark.parametrize("algorithm,direction,opts", GRID_IGNORED, ids=[str(c) for c in GRID_IGNORED])
def test_grid_checks_the_options_it_ignores_as_predict_does(algorithm, direction, opts):
    def outcome(f):
        try:
            f(algorithm, direction, **_SHAPE, **opts)
        except (TypeError, ValueError) as e:
            return type(e), str(e).replace("iomodel.grid", "iomodel.predict")
        return "ok"

    assert outcome(iomodel.grid) == outcome(iomodel.predict)
    if outcome(iomodel.predict) == "ok":  # taken: the same grid as without the option
        plain = {k: v for k, v in opts.items() if k == "bias"}
        assert iomodel.grid(algorithm, direction, **_SHAPE, **opts) == iomodel.grid(algorithm, direction, **_SHAPE,
                                                                                      **plain)


def test_numpy_integers_are_integers_everywhere():
    i = np.int64
    p = iomodel.predict("flash2", "forward", Nq=i(64), Nk=i(48), d=i(8), heads=i(3), block_sizes=(i(16), i(8)),
                        sram_size=i(10_000), dtype_bytes=i(2))
    assert p == iomodel.predict("flash2", "forward", Nq=64, Nk=48, d=8, heads=3, block_sizes=(16, 8),
                                sram_size=10_000, dtype_bytes=2)
    f = flash2.forward(Q, K, V, block_sizes=(i(4), i(4)), seed=i(3), dropout_p=0.1)
    assert f.block_sizes == (4, 4)


@pytest.mark.parametrize("name,n", [("Nq", 10**12), ("Nk", 10**12), ("Nq", 2**31), ("Nk", np.int64(2**31))])
def test_sequence_lengths_past_32_bits_are_refused_naming_them(name, n):
    """predict refuses Nq or Nk > 2**31 - 1 at once (as iomodel.dram does), not after minutes and gigabytes of
    per-block work; the simulator refuses the same lengths (a broadcast view costs no memory), naming Q or K."""
    import importlib

    MAX_N = importlib.import_module("flashref.iomodel.dram").MAX_N  # dram's bound, the one every entry point keeps
    assert MAX_N == 2**31 - 1
    shape = dict(Nq=8, Nk=8, d=128, heads=1)
    for algorithm in ("standard", "flash1", "flash2", "decoding"):  # standard first: quick even unrefused
        with pytest.raises(ValueError, match=rf"^{name}: expected a sequence length of at most {MAX_N}"):
            iomodel.predict(algorithm, "forward", **{**shape, name: n})
    with pytest.raises(ValueError, match=rf"^{name}: expected a sequence length"):
        iomodel.grid("flash2", "backward", **{**shape, name: n})
    long = np.broadcast_to(np.zeros((1, 4)), (int(n) if n < 2**40 else 2**31, 4))
    args = (long, Q[0], Q[0]) if name == "Nq" else (Q[0], long, long)
    for run in (flash2.forward, flash1.forward, standard.forward):
        with pytest.raises(ValueError, match=rf"^{name[-1].upper()} \({name}\): expected a sequence length"):
            run(*args)
    # the longest one is taken (standard's closed form is quick at any length)
    assert iomodel.predict("standard", "forward", **{**shape, name: MAX_N}).reads > 0


# A pool of option values, good and bad; the simulator and predict must agree on each draw.
VALUES = {
    "causal": [True, False, np.bool_(True), "no", 1, None],
    "dropout_p": [0.0, 0.25, np.float32(0.5), 1.0, -0.1, True, "0.1"],
    "sram_size": [None, 500, np.int32(800), 0, -5, 2.5, 10**9],
    "block_sizes": [None, (2, 3), (np.int64(4), 4), (0, 4), (-1, 4), (2,), 8, (2.0, 4), (100, 100)],
    "dtype_bytes": [1, 2, np.int8(4), 0, -2, 1.5],
    "scale": [None, 0.5, 1, float("nan"), float("inf"), True, "x"],
    "seed": [0, 7, np.uint16(3), 1.5, None],
    "mask": [None, True, np.ones((6, 9), bool), np.ones((6, 9)), np.ones((5, 9), bool)],
}


@settings(max_examples=60, deadline=None)
@given(st.fixed_dictionaries({}, optional={k: st.sampled_from(v) for k, v in VALUES.items()}))
def test_predict_and_simulator_accept_and_refuse_the_same_values(opts):
    def outcome(f, *args, **kw):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                return f(*args, **kw)
        except Exception as e:  # the kind of refusal is what must agree
            return type(e)

    for algorithm, run in (("flash2", flash2.forward), ("standard", standard.forward), ("flash1", flash1.forward)):
        sim = outcome(run, Q, K, V, **opts)
        pred = outcome(iomodel.predict, algorithm, "forward", Nq=6, Nk=9, d=4, heads=2, **opts)
        if isinstance(sim, type) or isinstance(pred, type):
            assert sim == pred, (algorithm, opts, sim, pred)
        else:
            assert (sim.io.reads, sim.io.writes) == (pred.reads, pred.writes)


@pytest.mark.parametrize("lead", [(0,), (0, 3), (2, 0)])
def test_empty_leading_axes_give_empty_results(lead):
    q, k, v = np.zeros(lead + (5, 4)), np.zeros(lead + (7, 4)), np.zeros(lead + (7, 4))
    g = np.zeros(lead + (5, 4))
    s = standard.forward(q, k, v, causal=True)
    assert s.O.shape == q.shape and s.io.total == 0
    assert standard.backward(q, k, v, g, s.P).dK.shape == k.shape
    f1 = flash1.forward(q, k, v, dropout_p=0.2)
    assert f1.O.shape == q.shape and f1.io.total == 0
    assert flash1.backward(q, k, v, f1.O, g, f1.l, f1.m, dropout_p=0.2).dV.shape == v.shape
    f2 = flash2.forward(q, k, v, causal=True)
    assert f2.O.shape == q.shape and f2.L.shape == lead + (5,)
    assert flash2.backward(q, k, v, f2.O, g, f2.L, causal=True).dQ.shape == q.shape
    assert decoding.forward(q, k, v, num_splits=2).O.shape == q.shape
    heads = int(np.prod(lead))
    assert iomodel.predict("flash2", "forward", Nq=5, Nk=7, d=4, heads=heads).total == 0


def test_a_grid_takes_an_empty_batchs_mask_as_the_forward_does():
    """blocksparse.grid and iomodel.grid size block masks from shapes; a mask or bias of an empty batch, which every
    forward takes, fits them too (it has no head to stand for the others), and gives the grid the forward runs on.
    predict counts heads: at heads=1 such a mask does not fit, at heads=0 it does."""
    mask, bias = np.ones((0, 2, 5, 7), bool), np.zeros((0, 5, 7))
    x = np.zeros((0, 2, 5, 4))
    xk = np.zeros((0, 2, 7, 4))
    g = blocksparse.grid(5, 7, 4, mask=mask, block_sizes=(2, 3))
    fwd = blocksparse.forward(x, xk, xk, np.ones((g.Tr, g.Tc), bool), mask=mask, block_sizes=(2, 3))
    assert fwd.O.shape == x.shape and fwd.block_sizes == (g.Br, g.Bc) == (2, 3)
    assert iomodel.grid("flash2", "forward", Nq=5, Nk=7, d=4, mask=mask, block_sizes=(2, 3)) == g
    assert iomodel.grid("flash2", "forward", Nq=5, Nk=7, d=4, bias=bias) == \
        iomodel.grid("flash2", "forward", Nq=5, Nk=7, d=4, bias=np.zeros((5, 7)))
    assert iomodel.predict("flash2", "forward", Nq=5, Nk=7, d=4, heads=0, mask=mask).total == 0
    with pytest.raises(ValueError, match="mask: shape .* heads=1"):
        iomodel.predict("flash2", "forward", Nq=5, Nk=7, d=4, mask=mask)


def test_a_grid_and_predict_take_a_mask_or_bias_given_as_lists():
    """The forwards take a mask or bias as a nested list; from shapes only an ndarray's leading axes were dropped, so
    a per-head list was refused with "heads=1", a value the caller never gave. numpy's True is "a bias is present"
    as Python's True is (it was a TypeError)."""
    mask = [[[True] * 4] * 4] * 2  # (2, 4, 4)
    bias = np.zeros((2, 4, 4)).tolist()
    g = blocksparse.grid(4, 4, 3, mask=mask)
    assert g == blocksparse.grid(4, 4, 3, mask=np.asarray(mask))
    assert blocksparse.forward(*[np.ones((2, 4, 3))] * 3, np.ones((g.Tr, g.Tc), bool), mask=mask).O.shape == (2, 4, 3)
    for name, v in (("mask", mask), ("bias", bias)):
        assert iomodel.grid("flash2", "forward", Nq=4, Nk=4, d=3, **{name: v}) == \
            iomodel.grid("flash2", "forward", Nq=4, Nk=4, d=3, **{name: np.asarray(v)})
        ran = flash2.forward(*[np.ones((2, 4, 3))] * 3, **{name: v})
        want = iomodel.predict("flash2", "forward", Nq=4, Nk=4, d=3, heads=2, **{name: v})
        assert (want.reads, want.writes) == (ran.io.reads, ran.io.writes)
    assert iomodel.predict("flash2", "forward", Nq=4, Nk=4, d=3, bias=np.True_).total == \
        iomodel.predict("flash2", "forward", Nq=4, Nk=4, d=3, bias=True).total


def test_every_backward_rejects_nan_and_inf():
    s, f1, f2 = standard.forward(Q, K, V), flash1.forward(Q, K, V), flash2.forward(Q, K, V)
    bad = dO.copy()
    bad[0, 0, 0] = np.nan
    with pytest.raises(ValueError, match="dO: contains NaN"):
        standard.backward(Q, K, V, bad, s.P)
    P = s.P.copy()
    P[0, 1, 1] = np.inf
    with pytest.raises(ValueError, match="P: contains NaN or inf"):
        standard.backward(Q, K, V, dO, P)
    O = f2.O.copy()
    O[1, 2, 3] = np.nan
    with pytest.raises(ValueError, match="O: contains NaN"):
        flash2.backward(Q, K, V, O, dO, f2.L)
    with pytest.raises(ValueError, match="dO: contains NaN"):
        flash2.backward(Q, K, V, f2.O, bad, f2.L)
    with pytest.raises(ValueError, match="dO: contains NaN"):
        flash1.backward(Q, K, V, f1.O, bad, f1.l, f1.m)


@pytest.mark.parametrize("module", [standard, flash1, flash2, decoding])
def test_overflowing_scores_raise_naming_the_cure(module):
    big = np.full((4, 3), 1e20, dtype=np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no RuntimeWarning on the way
        with pytest.raises(FloatingPointError, match="float64"):
            module.forward(big, big, big)
    # float64 holds them: the same inputs give a finite answer
    assert np.isfinite(module.forward(big.astype(np.float64), big.astype(np.float64), big.astype(np.float64)).O).all()


@pytest.mark.parametrize("module", [standard, flash2])
def test_a_bias_that_overflows_the_scores_raises(module):
    """Finite scores plus a finite bias can overflow float32: an error naming the cure, not NaN with warnings;
    a -inf in the bias is a masked entry, not an overflow."""
    Q = np.full((2, 4), 1e18, dtype=np.float32)
    bias = np.full((2, 3), 3.4e38, dtype=np.float32)
    bias[:, 0] = 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(FloatingPointError, match="bias overflowed float32.*float64"):
            module.forward(Q, np.full((3, 4), 1e18, np.float32), np.ones((3, 4), np.float32), bias=bias)
        masked = np.zeros((2, 3))
        masked[:, 1:] = -np.inf
        out = module.forward(np.ones((2, 4)), np.ones((3, 4)), np.arange(12.0).reshape(3, 4), bias=masked)
    assert np.array_equal(out.O, np.tile(np.arange(4.0), (2, 1)))


@pytest.mark.parametrize("module", [standard, flash2])
def test_a_bias_that_overflows_the_scores_to_minus_inf_raises(module):
    """The same overflow downward: every finite score plus a finite bias of -3e38 passes float32's -3.4e38. Taken as
    -inf, the row would be fully masked and return zeros; it is an error naming float64, and float64 holds it."""
    Q, K = np.full((2, 1), 1e19, np.float32), np.full((3, 1), -1e19, np.float32)
    V, bias = np.arange(3, dtype=np.float32)[:, None], np.full((2, 3), -3e38, np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(FloatingPointError, match="bias overflowed float32.*float64"):
            module.forward(Q, K, V, bias=bias, scale=1.0)
    O = module.forward(Q.astype(np.float64), K.astype(np.float64), V.astype(np.float64), bias=bias, scale=1.0).O
    np.testing.assert_allclose(O, 1.0)  # equal scores: the mean of V


@pytest.mark.parametrize("module", [standard, flash2])
def test_a_float64_bias_past_the_compute_dtype_raises_instead_of_masking(module):
    """float32 inputs compute in float32; a float64 bias of -1e300 became -inf on the cast, which passes for a masked
    entry: O = 0 for a row that sees keys, no error. Now the FloatingPointError every overflow of the compute dtype
    raises, naming the bias and float64 (which holds it: there the bias is what masks the row)."""
    Q = np.ones((1, 1, 2), np.float32)
    K, V = np.array([[[1, 0], [0, 1], [1, 1]]], np.float32), np.arange(6, dtype=np.float32).reshape(1, 3, 2)
    bias = np.full((1, 3), -1e300)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(FloatingPointError, match=r"^bias, cast to the compute dtype, overflowed float32.*float64"):
            module.forward(Q, K, V, bias=bias)
        bias[0, 1] = -np.inf  # a -inf (a masked entry) casts to itself: no error
        with pytest.raises(FloatingPointError, match="^bias, cast"):
            module.forward(Q, K, V, bias=bias)
        O = module.forward(Q.astype(np.float64), K.astype(np.float64), V.astype(np.float64), bias=bias).O
    np.testing.assert_allclose(O, [[[2.0, 3.0]]], rtol=1e-12)  # keys 0, 2 tie at -1e300: the mean of their values
    # a saved tensor is cast to the compute dtype by the same rule
    with pytest.raises(FloatingPointError, match=r"^(L|P), cast to the compute dtype, overflowed float32"):
        if module is flash2:
            flash2.backward(Q, K, V, Q, Q, np.full((1, 1), -1e300))  # O, dO, L
        else:
            standard.backward(Q, K, V, Q, np.full((1, 1, 3), 1e300))  # dO, P


OUTPUT_OVERFLOWS = {
    "flash1": lambda q, k, v: flash1.forward(q, k, v),
    "flash2": lambda q, k, v: flash2.forward(q, k, v),
    "decoding, one split": lambda q, k, v: decoding.forward(q, k, v, num_splits=1),
    "decoding, the merge": lambda q, k, v: decoding.forward(q, k, v, num_splits=8),  # one key per split
    "decoding.forward_paged": lambda q, k, v: decoding.forward_paged(
        q[None], k.reshape(4, 1, 2, 2), v.reshape(4, 1, 2, 2), np.arange(4)[None], np.array([8])),
}


@pytest.mark.parametrize("run", OUTPUT_OVERFLOWS.values(), ids=list(OUTPUT_OVERFLOWS))
def test_an_overflowing_output_accumulator_raises_naming_the_cure(run):
    """Scores of 0, values of 3e38: the unnormalised P̃V of 8 keys (or the merge of the partials) passes
    float32's 3.4e38. An error naming float64, not O = inf with a RuntimeWarning."""
    q, k = np.zeros((1, 4, 2), np.float32), np.zeros((1, 8, 2), np.float32)
    v = np.full((1, 8, 2), 3e38, np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no RuntimeWarning on the way
        with pytest.raises(FloatingPointError, match="overflowed float32.*float64"):
            run(q, k, v)
        O = run(q.astype(np.float64), k.astype(np.float64), v.astype(np.float64)).O
    np.testing.assert_allclose(O, float(v[0, 0, 0]), rtol=1e-12)  # float64 holds it: the mean of equal values


def test_star_import_needs_neither_torch_nor_triton():
    code = ("import sys; sys.modules['torch'] = None; sys.modules['triton'] = None\n"
            "from flashref import *\n"
            "print(flash2.forward, iomodel.predict, Memory)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "function forward" in out.stdout


# ----------------------------------------------------------------- bias (a materialised float mask)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("module", [standard, flash1, flash2])
def test_bias_matches_the_oracle_and_torch_and_is_counted_exactly(module, causal):
    r = np.random.default_rng(3)
    q, k, v, g = (r.standard_normal((2, n, 5)) for n in (7, 11, 11, 7))
    bias = r.standard_normal((7, 11))
    bias[2, :] = -np.inf  # a row the bias masks fully: zeros, no NaN
    fwd = module.forward(q, k, v, bias=bias, causal=causal, block_sizes=(3, 4))
    qt, kt, vt, bt = (torch.tensor(x, requires_grad=True) for x in (q, k, v, bias))
    S = qt @ kt.transpose(-1, -2) / np.sqrt(5) + bt
    if causal:
        S = S.masked_fill(~torch.ones(7, 11, dtype=torch.bool).tril(), float("-inf"))
    row_any = torch.isfinite(S).any(dim=-1, keepdim=True)  # a fully masked row: zeros and zero gradients
    P = torch.softmax(S.masked_fill(~row_any, 0.0), dim=-1) * row_any
    O = P @ vt
    assert rel_err(fwd.O, O.detach().numpy()) < 1e-12
    assert np.all(fwd.O[:, 2] == 0)
    O.backward(torch.tensor(g))
    stat = (fwd.P,) if module is standard else (fwd.O, g, fwd.l, fwd.m) if module is flash1 else (fwd.O, g, fwd.L)
    args = (q, k, v, g, *stat) if module is standard else (q, k, v, *stat)
    bwd = module.backward(*args, bias=bias, causal=causal, block_sizes=(3, 4))
    for ours, theirs in ((bwd.dQ, qt.grad), (bwd.dK, kt.grad), (bwd.dV, vt.grad)):
        assert rel_err(ours, theirs.numpy()) < 1e-11
    # bias_grad: the bias's gradient (a learned bias), per head of Q's leading axes, the rest unchanged
    learned = module.backward(*args, bias=bias, causal=causal, block_sizes=(3, 4), bias_grad=True)
    assert learned.dBias.shape == (2, 7, 11) and not hasattr(bwd, "dBias")
    assert rel_err(learned.dBias.sum(axis=0), bt.grad.numpy()) < 1e-11
    for ours, plain in ((learned.dQ, bwd.dQ), (learned.dK, bwd.dK), (learned.dV, bwd.dV)):
        np.testing.assert_array_equal(ours, plain)
    # flash1 and flash2 write every tile of dBias once (Nq·Nk a head); standard's dBias is the dS already in HBM
    more = learned.io.writes - bwd.io.writes
    assert more == (0 if module is standard else 2 * 7 * 11) and learned.io.reads == bwd.io.reads
    name = module.__name__.split(".")[-1]
    for res, direction, opts in ((fwd, "forward", {}), (bwd, "backward", {}),
                                 (learned, "backward", {"bias_grad": True})):
        pred = iomodel.predict(name, direction, Nq=7, Nk=11, d=5, heads=2, bias=True, causal=causal,
                               block_sizes=(3, 4), **opts)
        assert (res.io.reads, res.io.writes) == (pred.reads, pred.writes)
        assert res.io.by_line == pred.by_line
    with pytest.raises(TypeError, match="unknown option 'bias_grad'"):  # a backward option
        module.forward(q, k, v, bias=bias, bias_grad=True)
    with pytest.raises(ValueError, match="bias_grad: there is no bias"):
        module.backward(*args, bias_grad=True)
    with pytest.raises(ValueError, match="bias_grad: there is no bias"):
        iomodel.predict(name, "backward", Nq=7, Nk=11, d=5, bias_grad=True)


def test_bias_costs_a_read_per_visited_score_where_mask_costs_nothing():
    N, d = 64, 8
    plain = iomodel.predict("flash2", "forward", Nq=N, Nk=N, d=d, block_sizes=(16, 16), mask=True)
    biased = iomodel.predict("flash2", "forward", Nq=N, Nk=N, d=d, block_sizes=(16, 16), bias=True)
    assert biased.reads - plain.reads == N * N


def test_bias_footprint_equals_the_measured_peak():
    r = np.random.default_rng(1)
    q, k, v = (r.standard_normal((16, 4)) for _ in range(3))
    fwd = flash2.forward(q, k, v, bias=r.standard_normal((16, 16)), block_sizes=(8, 4))
    assert fwd.io.peak_sram == flash2.footprint_forward(8, 4, 4, bias=True)
    assert attention_ref(q, k, v)[0].shape == fwd.O.shape


def test_bias_bad_input_is_named():
    with pytest.raises(ValueError, match="bias: shape"):
        flash2.forward(Q, K, V, bias=np.zeros((5, 9)))
    with pytest.raises(TypeError, match="bias: expected a float array"):
        flash2.forward(Q, K, V, bias=np.zeros((6, 9), dtype=bool))
    with pytest.raises(ValueError, match="bias: expected finite values or -inf"):
        flash2.forward(Q, K, V, bias=np.full((6, 9), np.nan))
    with pytest.raises(TypeError, match="unknown option 'bias'"):
        decoding.forward(Q, K, V, bias=np.zeros((6, 9)))  # split-KV decoding has no bias
    with pytest.raises(ValueError, match="bias_grad: there is no bias"):
        flash1.backward(Q, K, V, *_f1(), bias_grad=True)


# ----------------------------------------------------------------- Memory verbs


def test_memory_verbs_say_the_counting_rule():
    mem = Memory(sram_size=100)
    mem.input("Q", np.ones((4, 2)))  # free
    mem.output("O", (4, 2))  # allocated, not initialised: free
    mem.init("l", (4,), 0.0, line="init")  # initialised: counted
    assert mem.report().total == 4 and mem.report().by_line == {"init": (0, 4)}
    S = mem.load("Q", rows=(0, 2), as_="S")  # 4 reads, 4 on chip
    mem.reuse("S", "P", S * 2)  # P takes S's slot: still 4 on chip
    assert mem.sram_in_use == 4
    mem.store("O", S, rows=(0, 2), line="store")
    r = mem.report()
    assert (r.reads, r.writes, r.peak_sram) == (4, 8, 4)


# ----------------------------------------------------------------- mask and bias leading axes, from shapes


@pytest.mark.parametrize("lead", [(3,), (0,), (2,), (1,), ()])
@pytest.mark.parametrize("name", ["mask", "bias"])
def test_predict_checks_the_leading_axes_of_a_mask_or_bias_as_the_simulator(name, lead):
    """predict knows heads = 2, the simulator Q's leading axes (2,): a (3, Nq, Nk) mask is refused by both."""
    r = np.random.default_rng(4)
    q = r.standard_normal((2, 8, 4))
    x = np.ones(lead + (8, 8), bool) if name == "mask" else r.standard_normal(lead + (8, 8))

    def outcome(f, *args, **kw):
        try:
            res = f(*args, **kw)
        except ValueError as e:
            return str(e).split(":")[0]  # the argument the error names
        return (res.io if hasattr(res, "io") else res).total

    for algorithm in ("flash2", "standard"):
        module = flash2 if algorithm == "flash2" else standard
        sim = outcome(module.forward, q, q, q, **{name: x})
        pred = outcome(iomodel.predict, algorithm, "forward", Nq=8, Nk=8, d=4, heads=2, **{name: x})
        assert sim == pred, (algorithm, sim, pred)
        assert (sim == name) == (lead in ((3,), (0,)))


def test_the_simulators_and_predicts_lines_agree_where_a_step_never_runs_or_moves_descales():
    """IOReport.by_line and Prediction.by_line have the same form: an all-zero block mask runs no inner step (no
    line for it in either), and FP8's descale reads are lines of their own in both."""
    Q = np.random.default_rng(0).standard_normal((8, 4))
    kw = dict(block_sizes=(4, 4))
    for bm in (np.zeros((2, 2), bool), np.eye(2, dtype=bool)):
        f = blocksparse.forward(Q, Q, Q, block_mask=bm, **kw)
        assert f.io.by_line == iomodel.predict("blocksparse", "forward", Nq=8, Nk=8, d=4, block_mask=bm,
                                               **kw).by_line
        b = blocksparse.backward(Q, Q, Q, f.O, Q, f.l, f.m, block_mask=bm, **kw)
        assert b.io.by_line == iomodel.predict("blocksparse", "backward", Nq=8, Nk=8, d=4, block_mask=bm,
                                               **kw).by_line
    for scaling in ("tensor", "block"):
        opts = dict(fp8="e4m3", fp8_scaling=scaling, **kw)
        ran = flash2.forward(Q, Q, Q, **opts).io.by_line
        assert ran == iomodel.predict("flash2", "forward", Nq=8, Nk=8, d=4, **opts).by_line
        assert ran["Alg.1 l.4 descales"][0] > 0


def test_a_window_edge_past_any_sequence_is_unbounded_in_both():
    """window=(2**63, 0) is the causal band (an edge past MAX_N reaches every key), for the simulator as for
    predict; and a dtype_bytes too large for the default on-chip memory names dtype_bytes, not an M never passed."""
    Q, K = np.ones((7, 4)), np.ones((9, 4))
    for w in ((2 ** 63, 0), (2 ** 40, 2 ** 70)):
        unbounded = tuple(-1 if x > 2 ** 31 else x for x in w)
        ran = flash2.forward(Q, K, K, window=w)
        assert ran.io.total == iomodel.predict("flash2", "forward", Nq=7, Nk=9, d=4, window=w).total
        np.testing.assert_array_equal(ran.O, flash2.forward(Q, K, K, window=unbounded).O)
        assert standard.forward(Q, K, K, window=w).io.total == standard.forward(Q, K, K, window=unbounded).io.total
    with pytest.raises(ValueError, match="dtype_bytes: the default on-chip memory of 100,000 bytes holds 0"):
        iomodel.predict("flash2", "forward", Nq=4, Nk=4, d=2, dtype_bytes=100_001)


def test_a_bias_too_large_to_address_says_so():
    """From shapes a bias is a broadcast view of (heads, Nq, Nk): at the longest sequence a float64 one is past what
    numpy can address, which used to read "does not broadcast" (its shape does); it says what it is. A mask (1 byte)
    still fits, and a shape that does not broadcast still says so."""
    N = 2**31 - 1
    with pytest.raises(ValueError, match="bias: a float64 array of shape .* is more than numpy can address"):
        iomodel.predict("flash2", "forward", Nq=N, Nk=N, d=4, bias=True)
    assert iomodel.predict("flash2", "forward", Nq=N, Nk=N, d=4, mask=True).reads > 0
    with pytest.raises(ValueError, match=r"bias: shape \(3, 8\) does not broadcast"):
        iomodel.predict("flash2", "forward", Nq=8, Nk=8, d=4, bias=np.zeros((3, 8)))
    # a mask or bias with more axes than (..., Nq, Nk): broadcasting would grow the target, which the later view
    # refused, and the message blamed numpy's addressing
    Q = np.ones((2, 4, 3))
    for f in (flash2, standard):
        for name, a in (("bias", np.zeros((1, 1, 4, 4))), ("mask", np.ones((1, 1, 4, 4), bool))):
            msg = rf"{name}: shape \(1, 1, 4, 4\) does not broadcast to .* = \(2, 4, 4\)"
            with pytest.raises(ValueError, match=msg):
                f.forward(Q, Q, Q, **{name: a})


def test_memory_init_takes_a_real_fill_and_names_it_otherwise():
    """``Memory.init``'s fill: a real number (-inf for Alg.1 l.2's m); numpy would turn None into NaN and drop a
    complex part silently, and a string failed naming nothing."""
    m = Memory(lead_shape=(1,))
    m.init("m", (2,), -np.inf)
    assert np.all(m.result("m") == -np.inf)
    for bad in (None, 1j, "abc", True):
        with pytest.raises(TypeError, match="fill"):
            m.init("O", (2, 2), bad)


def test_a_mask_from_shapes_past_numpys_count_is_refused_for_what_it_is():
    """A 0-d mask broadcasts to any scores; at heads·Nq·Nk past what numpy can count the refusal says so, not that
    the shapes do not broadcast."""
    N = 2 ** 31 - 1
    with pytest.raises(ValueError, match="more than numpy can address"):
        iomodel.predict("flash2", "forward", Nq=N, Nk=N, d=64, heads=3, mask=True)
    with pytest.raises(ValueError, match="does not broadcast"):
        iomodel.predict("flash2", "forward", Nq=4, Nk=4, d=8, mask=np.ones((3, 4), bool))


def test_ring_names_the_entry_point_the_user_called():
    from flashref import ring

    Q = np.zeros((1, 8, 4))
    with pytest.raises(TypeError, match=r"^ring\.forward: unknown option 'casual'"):
        ring.forward(Q, Q, Q, world_size=2, casual=True)
    fwd = ring.forward(Q, Q, Q, world_size=2)
    with pytest.raises(TypeError, match=r"^ring\.backward: unknown option 'casual'"):
        ring.backward(Q, Q, Q, fwd.O, Q, fwd.L, world_size=2, casual=True)
