"""Standard attention (Algorithms 0 and 3) against the float64 oracle and torch autograd."""

import warnings

import numpy as np
import pytest
from hypothesis import given
from reference import attention_ref, rel_err, torch_grads
from strategies import problems

from flashref import flash2, iomodel, standard


@given(problems())
def test_forward_matches_reference(pb):
    fwd = standard.forward(pb["Q"], pb["K"], pb["V"], **pb["opts"])
    O_ref, P_ref, _ = attention_ref(pb["Q"], pb["K"], pb["V"], **pb["opts"])
    assert fwd.O.shape == O_ref.shape and fwd.P.shape == P_ref.shape
    assert np.isfinite(fwd.O).all()
    assert np.abs(fwd.O - O_ref).max() <= 1e-12 * max(1.0, np.abs(O_ref).max())
    assert np.abs(fwd.P - P_ref).max() <= 1e-12


@given(problems(allow_dropout=False))
def test_backward_matches_torch_autograd(pb):
    opts = pb["opts"]
    fwd = standard.forward(pb["Q"], pb["K"], pb["V"], **opts)
    bwd = standard.backward(pb["Q"], pb["K"], pb["V"], pb["dO"], fwd.P, **opts)
    ref_opts = {k: opts[k] for k in ("scale", "causal", "mask") if k in opts}
    ref = torch_grads(pb["Q"], pb["K"], pb["V"], pb["dO"], **ref_opts)
    for got, want in zip((bwd.dQ, bwd.dK, bwd.dV), ref):
        assert got.shape == want.shape
        assert np.abs(got - want).max() <= 1e-10 * max(1.0, np.abs(want).max())


def test_backward_with_dropout_matches_finite_differences(rng):
    # Dropout is deterministic for a fixed seed, so the gradient of <dO, O> is well defined.
    Q, K, V = (rng.standard_normal((5, 4)) for _ in range(3))
    dO = rng.standard_normal((5, 4))
    opts = dict(dropout_p=0.3, seed=7, causal=True)
    fwd = standard.forward(Q, K, V, **opts)
    bwd = standard.backward(Q, K, V, dO, fwd.P, **opts)
    eps = 1e-6
    for X, grad in ((Q, bwd.dQ), (K, bwd.dK), (V, bwd.dV)):
        num = np.zeros_like(X)
        for idx in np.ndindex(X.shape):
            old = X[idx]
            X[idx] = old + eps
            up = (standard.forward(Q, K, V, **opts).O * dO).sum()
            X[idx] = old - eps
            down = (standard.forward(Q, K, V, **opts).O * dO).sum()
            X[idx] = old
            num[idx] = (up - down) / (2 * eps)
        assert rel_err(grad, num) < 1e-7


def test_fully_masked_row_gives_zeros_and_no_warning(rng):
    Q, K, V, dO = (rng.standard_normal((2, 6, 3)) for _ in range(4))
    mask = np.ones((6, 6), dtype=bool)
    mask[2] = False
    with np.errstate(all="raise"):
        fwd = standard.forward(Q, K, V, mask=mask)
        bwd = standard.backward(Q, K, V, dO, fwd.P, mask=mask)
    assert np.all(fwd.O[:, 2] == 0) and np.all(bwd.dQ[:, 2] == 0)
    assert all(np.isfinite(g).all() for g in (bwd.dQ, bwd.dK, bwd.dV))


def test_float32_inputs_compute_in_float32(rng):
    Q, K, V = (rng.standard_normal((8, 4)).astype(np.float32) for _ in range(3))
    fwd = standard.forward(Q, K, V)
    assert fwd.O.dtype == np.float32
    O_ref, _, _ = attention_ref(Q, K, V)
    assert rel_err(fwd.O, O_ref) < 1e-5


@given(problems())
def test_io_equals_closed_form(pb):
    opts = dict(pb["opts"])
    fwd = standard.forward(pb["Q"], pb["K"], pb["V"], **opts)
    bwd = standard.backward(pb["Q"], pb["K"], pb["V"], pb["dO"], fwd.P, **opts)
    heads = int(np.prod(pb["lead"])) if pb["lead"] else 1
    for direction, io in (("forward", fwd.io), ("backward", bwd.io)):
        pred = iomodel.predict("standard", direction, Nq=pb["Nq"], Nk=pb["Nk"], d=pb["d"], heads=heads, **opts)
        assert (io.reads, io.writes) == (pred.reads, pred.writes)


def test_io_per_line_equals_closed_form():
    rng = np.random.default_rng(1)
    Q, K, V = rng.standard_normal((7, 3)), rng.standard_normal((11, 3)), rng.standard_normal((11, 3))
    fwd = standard.forward(Q, K, V, causal=True, dropout_p=0.2)
    counted = {}
    for e in fwd.events:
        r, w = counted.get(e.line, (0, 0))
        counted[e.line] = (r + e.elements, w) if e.direction == "read" else (r, w + e.elements)
    pred = iomodel.predict("standard", "forward", Nq=7, Nk=11, d=3, causal=True, dropout_p=0.2)
    assert counted == pred.by_line


def test_io_grows_as_n_squared():
    totals = [iomodel.predict("standard", "forward", Nq=n, Nk=n, d=64).total for n in (1024, 2048, 4096)]
    # Θ(Nd + N²): doubling N roughly quadruples the traffic once N >> d
    assert 3.5 < totals[1] / totals[0] < 4.0 and 3.7 < totals[2] / totals[1] < 4.0


def test_reports_add_and_print():
    rng = np.random.default_rng(2)
    Q, K, V, dO = (rng.standard_normal((4, 2)) for _ in range(4))
    fwd = standard.forward(Q, K, V, dtype_bytes=4)
    bwd = standard.backward(Q, K, V, dO, fwd.P, dtype_bytes=4)
    both = fwd.io + bwd.io
    assert both.reads == fwd.io.reads + bwd.io.reads and both.writes == fwd.io.writes + bwd.io.writes
    assert both.bytes == 4 * both.total
    assert both.by_tensor["P"].reads == fwd.io.by_tensor["P"].reads + bwd.io.by_tensor["P"].reads
    assert (fwd.flops + bwd.flops).matmul == fwd.flops.matmul + bwd.flops.matmul
    text = str(both)
    assert "dS" in text and f"{both.total:,}" in text


def test_flops_count_matmuls():
    rng = np.random.default_rng(3)
    Q, K, V = rng.standard_normal((3, 5, 4)), rng.standard_normal((3, 6, 4)), rng.standard_normal((3, 6, 4))
    fwd = standard.forward(Q, K, V)
    # two matmuls of 2*Nq*Nk*d each, per head
    assert fwd.flops.matmul == 3 * 2 * (2 * 5 * 6 * 4)
    assert fwd.flops.nonmatmul > 0


@pytest.mark.parametrize("leading", [(), (2,), (2, 3)])
def test_leading_axes_add_up(leading):
    rng = np.random.default_rng(4)
    Q, K, V = (rng.standard_normal(leading + (5, 3)) for _ in range(3))
    one = standard.forward(Q.reshape(-1, 5, 3)[0], K.reshape(-1, 5, 3)[0], V.reshape(-1, 5, 3)[0])
    many = standard.forward(Q, K, V)
    heads = int(np.prod(leading)) if leading else 1
    assert many.io.total == heads * one.io.total
    assert many.io.peak_sram == one.io.peak_sram  # the footprint is per head


# ----------------------------------------------------------------- overflow, dtype, and the options it takes


def test_overflow_raises_floating_point_error_naming_float64_like_flash2():
    """Finite inputs whose result overflows: a FloatingPointError with the cure, never inf/NaN with warnings."""
    Q = np.zeros((2, 16, 4), np.float32)
    V = np.full((2, 16, 4), 3e38, np.float32)  # dropout's 1/(1-p) = 2 doubles the row average past float32
    big = np.full((1, 1, 1), 1e19, np.float32)  # τ·QKᵀ = 1e38 is finite; + a bias of 3e38 is not
    bias = np.full((1, 1), 3e38, np.float32)
    r = np.random.default_rng(0)
    X = r.standard_normal((2, 4, 3))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for module, args, opts in ((standard, (Q, Q, V), dict(dropout_p=0.5, seed=0)),
                                   (flash2, (Q, Q, V), dict(dropout_p=0.5, seed=0)),
                                   (standard, (X, X, X), dict(alibi_slopes=np.full(2, -1e308))),
                                   (standard, (big, big, big), dict(scale=1.0, bias=bias))):
            with pytest.raises(FloatingPointError, match="float64|scale the inputs down"):
                module.forward(*args, **opts)
        with pytest.raises(FloatingPointError, match="compute in float64"):  # dP = dO Vᵀ overflows
            standard.backward(Q + 1, Q + 1, V, V, np.full((2, 16, 16), 1 / 16, np.float32))


def test_alibi_keeps_the_inputs_dtype():
    r = np.random.default_rng(1)
    Q, K, V = (r.standard_normal((2, 5, 3)).astype(np.float32) for _ in range(3))
    fwd = standard.forward(Q, K, V, alibi_slopes=np.array([0.5, 0.25]))
    assert fwd.O.dtype == fwd.P.dtype == np.float32
    assert flash2.forward(Q, K, V, alibi_slopes=np.array([0.5, 0.25])).O.dtype == np.float32


def test_block_sizes_and_sram_size_are_checked_and_change_nothing(rng):
    """The options every algorithm shares: standard attention takes them (one signature for a loop over
    algorithms), checks their values as everywhere, and, as Theorem 2 and rule 6 say, counts the same IO
    whatever they are, in the simulator and in the closed form."""
    Q, K, V, dO = (rng.standard_normal((2, 6, 3)) for _ in range(4))
    plain = standard.forward(Q, K, V)
    for opts in (dict(block_sizes=(2, 2)), dict(sram_size=10), dict(block_sizes=(5, 1), sram_size=4096)):
        fwd = standard.forward(Q, K, V, **opts)
        bwd = standard.backward(Q, K, V, dO, fwd.P, **opts)
        assert (fwd.io.reads, fwd.io.writes) == (plain.io.reads, plain.io.writes)
        np.testing.assert_array_equal(fwd.O, plain.O)
        ref = standard.backward(Q, K, V, dO, plain.P)
        assert (bwd.io.reads, bwd.io.writes) == (ref.io.reads, ref.io.writes)
        for direction, got in (("forward", fwd.io), ("backward", bwd.io)):
            pred = iomodel.predict("standard", direction, Nq=6, Nk=6, d=3, heads=2, **opts)
            assert (pred.reads, pred.writes) == (got.reads, got.writes)
    for bad, name in (((0, 2), r"block_sizes\[0\]"), (0, "sram_size")):
        key = "block_sizes" if isinstance(bad, tuple) else "sram_size"
        with pytest.raises(ValueError, match=name):
            standard.forward(Q, K, V, **{key: bad})
        with pytest.raises(ValueError, match=name):
            iomodel.predict("standard", "forward", Nq=6, Nk=6, d=3, **{key: bad})
