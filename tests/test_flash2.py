"""FlashAttention-2 (Algorithms 1 and 2) against the float64 oracle, torch autograd and its closed forms."""

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from reference import attend_mask, attention_ref, torch_grads
from strategies import problems

from flashref import SRAMOverflowError, dropout, flash2, iomodel, standard


def _heads(pb):
    return int(np.prod(pb["lead"])) if pb["lead"] else 1


@st.composite
def tiled(draw, **kw):
    pb = draw(problems(**kw))
    pb["opts"]["block_sizes"] = (draw(st.integers(1, 9)), draw(st.integers(1, 9)))
    return pb


def _torch_grads_with_dropout(Q, K, V, dO, *, scale=None, causal=False, mask=None, dropout_p=0.0, seed=0):
    """torch autograd of dropout(softmax(masked(τQKᵀ)))V with flashref's counter-based keep mask."""
    lead, Nq, Nk, d = Q.shape[:-2], Q.shape[-2], K.shape[-2], Q.shape[-1]
    q, k, v = (torch.tensor(x, requires_grad=True) for x in (Q, K, V))
    allowed = torch.tensor(attend_mask(Nq, Nk, causal, mask, lead))
    scale = 1.0 / np.sqrt(d) if scale is None else scale
    S = (scale * q @ k.transpose(-1, -2)).masked_fill(~allowed, float("-inf"))
    row_any = allowed.any(dim=-1, keepdim=True)
    P = torch.softmax(S.masked_fill(~row_any, 0.0), dim=-1) * row_any
    Z = torch.tensor(dropout.scale_mask(seed, dropout_p, lead, (0, Nq), (0, Nk)))
    ((P * Z) @ v).backward(torch.tensor(dO))
    return q.grad.numpy(), k.grad.numpy(), v.grad.numpy()


@given(tiled())
def test_forward_matches_reference_and_standard(pb):
    opts = pb["opts"]
    with np.errstate(all="raise"):  # no RuntimeWarning, even for fully masked rows
        fwd = flash2.forward(pb["Q"], pb["K"], pb["V"], **opts)
    ref_opts = {k: v for k, v in opts.items() if k != "block_sizes"}
    O_ref, _, lse = attention_ref(pb["Q"], pb["K"], pb["V"], **ref_opts)
    tol = 1e-12 * max(1.0, np.abs(O_ref).max())
    assert fwd.O.shape == O_ref.shape and np.abs(fwd.O - O_ref).max() <= tol
    # same dropped entries as standard attention for the same seed, so the outputs agree too
    assert np.abs(fwd.O - standard.forward(pb["Q"], pb["K"], pb["V"], **ref_opts).O).max() <= tol
    # L is the row log-sum-exp of the scaled, masked scores; -inf exactly where the row is fully masked
    assert fwd.L.shape == lse.shape
    assert np.array_equal(np.isneginf(fwd.L), np.isneginf(lse))
    finite = np.isfinite(lse)
    assert np.abs(fwd.L[finite] - lse[finite]).max(initial=0) <= 1e-12 * max(1.0, np.abs(lse[finite]).max(initial=0))


@given(tiled(), st.integers(1, 9), st.integers(1, 9))
def test_backward_matches_torch_autograd(pb, Br2, Bc2):
    opts = pb["opts"]
    fwd = flash2.forward(pb["Q"], pb["K"], pb["V"], **opts)
    bwd_opts = dict(opts, block_sizes=(Br2, Bc2))  # L does not depend on the forward's tiling
    with np.errstate(all="raise"):
        bwd = flash2.backward(pb["Q"], pb["K"], pb["V"], fwd.O, pb["dO"], fwd.L, **bwd_opts)
    ref_opts = {k: v for k, v in opts.items() if k != "block_sizes"}
    if ref_opts.get("dropout_p", 0) > 0:
        ref = _torch_grads_with_dropout(pb["Q"], pb["K"], pb["V"], pb["dO"], **ref_opts)
    else:
        ref = torch_grads(pb["Q"], pb["K"], pb["V"], pb["dO"], **{k: v for k, v in ref_opts.items() if k != "seed"})
    for got, want in zip((bwd.dQ, bwd.dK, bwd.dV), ref):
        assert got.shape == want.shape
        assert np.abs(got - want).max() <= 1e-10 * max(1.0, np.abs(want).max())


def test_fully_masked_rows_give_zeros_and_zero_gradients(rng):
    Q, K, V, dO = (rng.standard_normal((2, 7, 3)) for _ in range(4))
    mask = rng.random((7, 7)) < 0.6
    mask[[1, 5]] = False
    with np.errstate(all="raise"):
        fwd = flash2.forward(Q, K, V, mask=mask, causal=True, block_sizes=(2, 3))
        bwd = flash2.backward(Q, K, V, fwd.O, dO, fwd.L, mask=mask, causal=True, block_sizes=(3, 2))
    assert np.all(fwd.O[:, [1, 5]] == 0) and np.all(np.isneginf(fwd.L[:, [1, 5]]))
    assert np.all(bwd.dQ[:, [1, 5]] == 0)
    assert all(np.isfinite(g).all() for g in (bwd.dQ, bwd.dK, bwd.dV))


@given(tiled())
def test_io_equals_closed_form_line_by_line(pb):
    opts = pb["opts"]
    fwd = flash2.forward(pb["Q"], pb["K"], pb["V"], **opts)
    bwd = flash2.backward(pb["Q"], pb["K"], pb["V"], fwd.O, pb["dO"], fwd.L, **opts)
    for direction, res in (("forward", fwd), ("backward", bwd)):
        pred = iomodel.predict("flash2", direction, Nq=pb["Nq"], Nk=pb["Nk"], d=pb["d"], heads=_heads(pb), **opts)
        assert (res.io.reads, res.io.writes) == (pred.reads, pred.writes)
        counted = {}
        for e in res.events:
            r, w = counted.get(e.line, (0, 0))
            counted[e.line] = (r + e.elements, w) if e.direction == "read" else (r, w + e.elements)
        assert counted == {k: v for k, v in pred.by_line.items() if v != (0, 0)}


@given(st.integers(1, 30), st.integers(1, 30), st.integers(1, 8), st.integers(1, 12), st.integers(1, 12),
       st.booleans(), st.booleans())
def test_footprint_equals_measured_peak(Nq, Nk, d, Br, Bc, causal, drop):
    rng = np.random.default_rng(Nq * 31 + Nk)
    Q, dO = rng.standard_normal((Nq, d)), rng.standard_normal((Nq, d))
    K, V = rng.standard_normal((Nk, d)), rng.standard_normal((Nk, d))
    opts = dict(causal=causal, block_sizes=(Br, Bc), dropout_p=0.2 if drop else 0.0)
    fwd = flash2.forward(Q, K, V, **opts)
    bwd = flash2.backward(Q, K, V, fwd.O, dO, fwd.L, **opts)
    Br_, Bc_ = min(Br, Nq), min(Bc, Nk)
    assert fwd.block_sizes == bwd.block_sizes == (Br_, Bc_)
    assert fwd.io.peak_sram == flash2.footprint_forward(Br_, Bc_, d)
    assert bwd.io.peak_sram == flash2.footprint_backward(Br_, Bc_, d, dropout=drop)


def test_default_blocks_fit_sram_and_explicit_overflow_is_named(rng):
    Q = rng.standard_normal((100, 16))
    for M in (600, 2000, 5000):
        fwd = flash2.forward(Q, Q, Q, sram_size=M)
        bwd = flash2.backward(Q, Q, Q, fwd.O, Q, fwd.L, sram_size=M)
        assert fwd.io.peak_sram <= M and bwd.io.peak_sram <= M
        assert fwd.io.peak_sram == flash2.footprint_forward(*fwd.block_sizes, 16)
    with pytest.raises(SRAMOverflowError, match="footprint"):
        flash2.forward(Q, Q, Q, sram_size=600, block_sizes=(16, 16))


def test_bad_saved_tensors_are_named(rng):
    Q = rng.standard_normal((6, 4))
    fwd = flash2.forward(Q, Q, Q)
    with pytest.raises(ValueError, match="L"):
        flash2.backward(Q, Q, Q, fwd.O, Q, fwd.L[:-1])
    with pytest.raises(ValueError, match="dO"):
        flash2.backward(Q, Q, Q, fwd.O, Q[:-1], fwd.L)
    with pytest.raises(ValueError, match="L"):
        flash2.backward(Q, Q, Q, fwd.O, Q, np.full(6, np.nan))


def test_backward_refuses_an_L_of_minus_inf_on_a_row_that_sees_a_key(rng):
    """L_i = -inf says "every key of row i is hidden"; the backward subtracted 0 there, so a row that sees keys got
    P = exp(S), unnormalised, and wrong gradients with no error. Now a ValueError naming L (backward_varlen too).
    Rows that a bias, mask or window hides whole keep their -inf, and the counted IO is still predict's."""
    Q, K, V = (rng.standard_normal((1, n, 4)) for n in (3, 4, 4))
    dO = rng.standard_normal((1, 3, 4))
    fwd = flash2.forward(Q, K, V)
    L = fwd.L.copy()
    L[0, 0] = -np.inf  # row 0 sees all 4 keys
    msg = r"^L: L_i = -inf marks a row as fully masked"
    with pytest.raises(ValueError, match=msg):
        flash2.backward(Q, K, V, fwd.O, dO, L)
    with pytest.raises(ValueError, match=msg):
        flash2.backward_varlen(Q, K, V, fwd.O, dO, L, np.array([0, 3]), np.array([0, 4]))
    # a too small finite L_i overflows P = exp(S − L): the error names L as a cause, beside the cure
    L[0, 0] = -1e5
    with pytest.raises(FloatingPointError, match="or L is not the forward's"):
        flash2.backward(Q, K, V, fwd.O, dO, L)
    bias = np.zeros((3, 4))
    bias[2] = -np.inf
    for opts in ({"bias": bias}, {"mask": np.isfinite(bias)}, {"window": (0, 0)}):
        K2, V2 = (K, V) if "window" not in opts else (K[:, :2], V[:, :2])  # window: row 2 has no key j = 2
        f = flash2.forward(Q, K2, V2, block_sizes=(2, 2), **opts)
        assert np.isneginf(f.L[0, 2]) and np.isfinite(f.L[0, :2]).all()
        bwd = flash2.backward(Q, K2, V2, f.O, dO, f.L, block_sizes=(2, 2), **opts)
        ref = standard.backward(Q, K2, V2, dO, standard.forward(Q, K2, V2, **opts).P, **opts)
        np.testing.assert_allclose(bwd.dQ, ref.dQ, rtol=1e-10, atol=1e-12)
        pred = iomodel.predict("flash2", "backward", Nq=3, Nk=K2.shape[-2], d=4, heads=1, block_sizes=(2, 2), **opts)
        assert (bwd.io.reads, bwd.io.writes) == (pred.reads, pred.writes)


def test_causal_skips_blocks_above_the_diagonal_and_masks_only_the_diagonal():
    # N = 16, 4x4 blocks: the blocks the forward loads K_j for are exactly those with j <= i.
    rng = np.random.default_rng(4)
    Q = rng.standard_normal((16, 2))
    fwd = flash2.forward(Q, Q, Q, causal=True, block_sizes=(4, 4))
    q_block, visited = None, set()
    for e in fwd.events:
        if e.tensor == "Q":
            q_block = e.rows[0] // 4
        if e.tensor == "K":
            visited.add((q_block, e.rows[0] // 4))
    assert visited == {(i, j) for i in range(4) for j in range(i + 1)}
    crossed = {(i, j) for (i, j) in visited
               if flash2.mask_needed(True, (4 * i, 4 * i + 4), (4 * j, 4 * j + 4))}
    assert crossed == {(i, i) for i in range(4)}
    # the backward visits the same blocks, column by column
    bwd = flash2.backward(Q, Q, Q, fwd.O, Q, fwd.L, causal=True, block_sizes=(4, 4))
    k_block, visited_b = None, set()
    for e in bwd.events:
        if e.tensor == "K":
            k_block = e.rows[0] // 4
        if e.tensor == "Q":
            visited_b.add((e.rows[0] // 4, k_block))
    assert visited_b == visited


def test_causal_halves_matmul_flops_and_loads_at_large_n():
    rng = np.random.default_rng(5)
    N, d = 1024, 8
    Q, K, V, dO = (rng.standard_normal((N, d)) for _ in range(4))
    opts = dict(block_sizes=(64, 64))
    full = flash2.forward(Q, K, V, **opts)
    half = flash2.forward(Q, K, V, causal=True, **opts)
    assert 0.5 <= half.flops.matmul / full.flops.matmul <= 0.6
    kv = lambda io: io.by_tensor["K"].reads + io.by_tensor["V"].reads  # noqa: E731
    assert 0.5 <= kv(half.io) / kv(full.io) <= 0.6
    bfull = flash2.backward(Q, K, V, full.O, dO, full.L, **opts)
    bhalf = flash2.backward(Q, K, V, half.O, dO, half.L, causal=True, **opts)
    assert 0.5 <= bhalf.flops.matmul / bfull.flops.matmul <= 0.6
    assert 0.5 <= bhalf.io.reads / bfull.io.reads <= 0.6
    # 2 matmuls forward, 5 backward: the paper's 2.5x (FlashAttention-2 §4.1)
    assert full.flops.matmul == 4 * N * N * d and bfull.flops.matmul == 10 * N * N * d


def test_flash2_has_fewer_nonmatmul_flops_than_flash1_with_equal_matmul():
    from flashref import flash1

    rng = np.random.default_rng(6)
    Q, K, V = (rng.standard_normal((2, 96, 16)) for _ in range(3))
    opts = dict(block_sizes=(16, 16))
    f1 = flash1.forward(Q, K, V, **opts)
    f2 = flash2.forward(Q, K, V, **opts)
    assert np.abs(f1.O - f2.O).max() < 1e-12
    assert f2.flops.matmul == f1.flops.matmul
    assert f2.flops.nonmatmul < f1.flops.nonmatmul


def test_float32_inputs_stay_float32(rng):
    Q, K, V = (rng.standard_normal((9, 4)).astype(np.float32) for _ in range(3))
    fwd = flash2.forward(Q, K, V, block_sizes=(4, 4))
    assert fwd.O.dtype == np.float32 and fwd.L.dtype == np.float32
    O_ref, _, _ = attention_ref(Q, K, V)
    assert np.abs(fwd.O - O_ref).max() < 1e-5


# ----------------------------------------------------------------- variable-length batches: their own checks


def _varlen_batch():
    r = np.random.default_rng(5)
    Q, K, V, dO = (r.standard_normal((2, n, 4)) for n in (11, 14, 14, 11))
    return Q, K, V, dO, np.array([0, 3, 10, 11]), np.array([0, 5, 6, 14])


def test_varlen_checks_V_and_the_saved_tensors_against_the_packing():
    Q, K, V, dO, cq, ck = _varlen_batch()
    fwd = flash2.forward_varlen(Q, K, V, cq, ck)
    V_long = np.random.default_rng(6).standard_normal((2, 20, 4))  # each sequence's slice would look fine
    with pytest.raises(ValueError, match="V: total length 20 does not match K's 14"):
        flash2.forward_varlen(Q, K, V_long, cq, ck)
    with pytest.raises(ValueError, match="V: total length 20 does not match K's 14"):
        flash2.backward_varlen(Q, K, V_long, fwd.O, dO, fwd.L, cq, ck)
    for name, args in (("O", (fwd.O[:, :5], dO, fwd.L)), ("dO", (fwd.O, dO[..., :3], fwd.L)),
                       ("L", (fwd.O, dO, fwd.L[:1]))):
        with pytest.raises(ValueError, match=f"{name}: expected shape"):
            flash2.backward_varlen(Q, K, V, *args, cq, ck)


def test_varlen_takes_lists_as_forward_does():
    Q, K, V, dO, cq, ck = _varlen_batch()
    fwd = flash2.forward_varlen(Q, K, V, cq, ck)
    lists = flash2.forward_varlen(Q.tolist(), K.tolist(), V.tolist(), cq, ck)
    assert np.array_equal(lists.O, fwd.O) and lists.io.total == fwd.io.total
    bwd = flash2.backward_varlen(Q, K, V, fwd.O, dO, fwd.L, cq, ck)
    lbwd = flash2.backward_varlen(Q.tolist(), K.tolist(), V.tolist(), fwd.O.tolist(), dO.tolist(), fwd.L.tolist(),
                                  cq, ck)
    assert all(np.array_equal(a, b) for a, b in ((bwd.dQ, lbwd.dQ), (bwd.dK, lbwd.dK), (bwd.dV, lbwd.dV)))


def test_varlen_errors_name_the_function_called():
    Q, K, V, dO, cq, ck = _varlen_batch()
    fwd = flash2.forward_varlen(Q, K, V, cq, ck)
    with pytest.raises(TypeError, match=r"^flash2\.forward_varlen: unknown option 'casual'"):
        flash2.forward_varlen(Q, K, V, cq, ck, casual=True)
    with pytest.raises(TypeError, match=r"^flash2\.backward_varlen: unknown option 'casual'"):
        flash2.backward_varlen(Q, K, V, fwd.O, dO, fwd.L, cq, ck, casual=True)
    for direction in ("forward", "backward"):
        with pytest.raises(TypeError, match=rf"^iomodel\.predict_varlen\('{direction}'\): unknown option 'casual'"):
            iomodel.predict_varlen(direction, cu_seqlens_q=cq, cu_seqlens_k=ck, d=4, heads=2, casual=True)


def test_backward_refuses_an_L_that_cannot_carry_log_l():
    """A row masked by a huge finite bias (finfo.min, as HF-style padding masks are written): the forward is right
    (uniform over the row, as torch), the backward says why it cannot recompute P rather than return gradients ℓ
    times too large; with -inf for the same entries it runs and agrees with standard attention."""
    r = np.random.default_rng(5)
    q, k, v, g = (r.standard_normal((2, n, 3)) for n in (4, 6, 6, 4))
    bias = r.standard_normal((4, 6))
    bias[1] = np.finfo(np.float64).min
    fwd = flash2.forward(q, k, v, bias=bias)
    np.testing.assert_allclose(fwd.O, standard.forward(q, k, v, bias=bias).O, rtol=1e-12, atol=1e-12)
    with pytest.raises(FloatingPointError, match="L: a row's log-sum-exp .* mask with -inf"):
        flash2.backward(q, k, v, fwd.O, g, fwd.L, bias=bias)
    # float32 scores of a few million, no mask: the same limit, and the error names the cure, float64
    q32, k32 = (2000 * r.standard_normal((4, 4)).astype(np.float32) for _ in range(2))
    v32 = r.standard_normal((4, 4)).astype(np.float32)
    f32 = flash2.forward(q32, k32, v32)
    with pytest.raises(FloatingPointError, match="Compute in float64"):
        flash2.backward(q32, k32, v32, f32.O, v32, f32.L)
    bias[1] = -np.inf
    fwd = flash2.forward(q, k, v, bias=bias)
    ours, ref = flash2.backward(q, k, v, fwd.O, g, fwd.L, bias=bias), standard.backward(
        q, k, v, g, standard.forward(q, k, v, bias=bias).P, bias=bias)
    for a, b in ((ours.dQ, ref.dQ), (ours.dK, ref.dK), (ours.dV, ref.dV)):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)


def test_L_carries_log_l_to_a_spacing_of_2_to_the_minus_10():
    """The threshold past which flash2 refuses an L (L_SPACING): where its docstring says float32 and float64 stop
    holding it, and why it is not 1/4. At a spacing of 1/4 (float32 at |L| = 3e6) rounding L moves a recomputed P by
    up to 13%; the backward refuses that L now, where it returned such gradients before."""
    assert flash2.L_holds_log_l(np.array([-16383.0, 5.0], np.float32))
    assert not flash2.L_holds_log_l(np.array([-16384.0, 5.0], np.float32))
    assert flash2.L_holds_log_l(np.array([2.0 ** 43 - 1, -np.inf]))
    assert not flash2.L_holds_log_l(np.array([2.0 ** 43]))
    assert np.exp(flash2.L_SPACING / 2) - 1 < 5e-4 < np.exp(0.25 / 2) - 1
    # a row whose every score is -3e6 (a zero query under a mask of -3e6): its L's float32 spacing is 1/4
    r = np.random.default_rng(7)
    q, k, v, g = (r.standard_normal((n, 8)).astype(np.float32) for n in (4, 64, 64, 4))
    q[1] = 0
    bias = np.zeros((4, 64), np.float32)
    bias[1] = -3e6
    fwd = flash2.forward(q, k, v, bias=bias)
    assert np.spacing(np.abs(fwd.L[1])) == 0.25
    with pytest.raises(FloatingPointError, match=r"spacing exceeds 2\^-10"):
        flash2.backward(q, k, v, fwd.O, g, fwd.L, bias=bias)


def test_an_unpacked_gqa_backwards_events_keep_counting_through_its_reduction():
    """The reduction of the query heads' dK, dV runs on a Memory of its own, whose steps started again at 0: the
    tile-schedule animation orders events by step. They now follow the backward's."""
    rs = np.random.default_rng(0)
    Q = rs.standard_normal((2, 2, 3))
    K = V = rs.standard_normal((1, 2, 3))
    fwd = flash2.forward(Q, K, V, enable_gqa=True)
    events = flash2.backward(Q, K, V, fwd.O, Q, fwd.L, enable_gqa=True).events
    steps = [e.step for e in events]
    assert any(e.tensor == "dK_h" for e in events) and steps == sorted(steps)
