"""A hostile pass over ring attention: flashref.ring, flashref.iomodel.ring and flashref.distributed.

Each test pins a defect that was found (its docstring says what the input did before): a repr that
crashed, merges and sums that overflowed to inf silently, a world of one that counted bytes on a
link it does not have, closed forms that divided by zero or took nonsense, ``unshard`` that cut one
tensor into "shards", and ``ring_attention`` that let a NaN ``do`` or an overflow through as NaN/inf.
The multi-process test is one gloo world of 2 processes against torch's own SDPA.
"""


import numpy as np
import pytest
import torch
from reference import attention_ref, torch_grads
from test_distributed import _run_world

from flashref import distributed as fd
from flashref import ring, standard
from flashref.iomodel import ring as iom


def _qkv(rng, shape, n=4, dtype=np.float64):
    return tuple(rng.standard_normal(shape).astype(dtype) for _ in range(n))


# ---------------------------------------------------------------- flashref.ring (the simulator)


def test_results_repr_sums_the_devices_reports():
    """``repr(ring.forward(...))`` (what a notebook shows) raised AttributeError: ``.io`` and ``.flops`` are lists
    of per-device reports and the result's repr asked them for ``.total``. Now ``.total`` is all devices' sum."""
    Q, K, V, dO = _qkv(np.random.default_rng(0), (2, 8, 3))
    fwd = ring.forward(Q, K, V, world_size=2, layout="zigzag", causal=True)
    bwd = ring.backward(Q, K, V, fwd.O, dO, fwd.L, world_size=2, layout="zigzag", causal=True)
    for res in (fwd, bwd):
        assert len(res.io) == 2 and res.io.total == sum(io.total for io in res.io) > 0
        assert res.flops.total == sum(f.total for f in res.flops) > 0
        assert f"io.total={res.io.total:,}" in repr(res) and f"flops.total={res.flops.total:,}" in repr(res)


def test_forward_and_backward_reports_add_device_by_device():
    """``fwd.io + bwd.io`` concatenated the two lists (a list's +): eight reports for four devices, no ``.total``,
    and ``(fwd.io + bwd.io)[r]`` rank r's forward alone. Reports add, here device by device."""
    Q, K, V, dO = _qkv(np.random.default_rng(1), (2, 8, 3))
    fwd = ring.forward(Q, K, V, world_size=4)
    bwd = ring.backward(Q, K, V, fwd.O, dO, fwd.L, world_size=4)
    for name in ("io", "flops"):
        a, b = getattr(fwd, name), getattr(bwd, name)
        both = a + b
        assert len(both) == 4 and both.total == a.total + b.total > 0
        assert all(both[r].total == a[r].total + b[r].total for r in range(4))
        assert sum([a, b]).total == both.total
    assert [io.reads for io in fwd.io + bwd.io] == [f.reads + g.reads for f, g in zip(fwd.io, bwd.io)]
    with pytest.raises(ValueError, match="reports of 4 and 2 devices"):
        fwd.io + ring.forward(Q, K, V, world_size=2).io
    with pytest.raises(TypeError):
        fwd.io + [None] * 4  # a plain list is not a device's reports


def test_merge_of_large_outputs_does_not_overflow_on_the_way():
    """fp32 V = 2e38 (finite, as is the answer, V itself): each device's partial O is 2e38, and the merge summed
    e^{L1-m}·O1 + e^{L2-m}·O2 = 4e38 = inf before dividing by ℓ = 2, so ring.forward returned inf silently."""
    Q = np.zeros((2, 4), np.float32)
    V = np.full((2, 4), 2e38, np.float32)
    want = standard.forward(Q, Q, V).O
    for layout in ("contiguous", "striped"):
        got = ring.forward(Q, Q, V, world_size=2, layout=layout).O
        np.testing.assert_array_equal(got, want)
    O, L = ring.merge_lse(V[:1], np.zeros(1, np.float32), V[1:], np.zeros(1, np.float32))
    assert np.isfinite(O).all() and O[0, 0] == np.float32(2e38) and L[0] == np.float32(np.log(2))


def test_backward_sum_overflow_raises_naming_float64():
    """Every query attends key 0 alone, so dV_0 = Σ_i dO_i = 4 · 3e38: past fp32. Each pair's share (3e38) fits,
    so flash2 raised nothing, and the ring's sum of shares returned inf silently. Now a FloatingPointError, as
    flash2.backward's on one device; float64 gets the right answer."""
    N = 4
    Q = np.zeros((N, 2), np.float32)
    Q[:, 0] = 10
    K = np.zeros((N, 2), np.float32)
    K[0, 0] = 10
    V = np.zeros((N, 2), np.float32)
    dO = np.full((N, 2), 3e38, np.float32)
    fwd = ring.forward(Q, K, V, world_size=4)
    with pytest.raises(FloatingPointError, match="dV overflowed float32.*float64"):
        ring.backward(Q, K, V, fwd.O, dO, fwd.L, world_size=4)
    Q, K, V, dO = (x.astype(np.float64) for x in (Q, K, V, dO))
    fwd = ring.forward(Q, K, V, world_size=4)
    bwd = ring.backward(Q, K, V, fwd.O, dO, fwd.L, world_size=4)
    np.testing.assert_allclose(bwd.dV, torch_grads(Q, K, V, dO)[2], rtol=1e-12)


def _independent_comm(N, d, P, layout, H, b, g, direction):
    """What a ring sends, counted from the schedule: device r holds shard (r - t) mod P at step t and passes it on
    (K, V at every step but the last; forward none after it), and in the backward also its dK, dV, home at the end.
    One device has no link: it sends nothing."""
    n = [len(p) for p in ring.positions(N, P, layout)]
    sent = np.zeros((P, P), dtype=np.int64)
    for r in range(P):
        for t in range(P):
            if P == 1:
                continue
            s = (r - t) % P
            sent[r, t] = 2 * H * n[s] * d * b * (t < P - 1) + (2 * H * n[s] * d * g if direction == "backward" else 0)
    return sent


@pytest.mark.parametrize("lead", [(), (2, 3), (0, 2)])
def test_comm_counted_independently_with_one_device_sending_nothing(lead):
    """A world of one has no link, but ring.backward counted its dK, dV as sent to itself (2·H·N·d·g bytes) and the
    closed form agreed; distributed.ring_attention sends nothing there. Now both count 0 at P = 1, and for any P,
    leading axes, dtype_bytes and grad_bytes they equal a count made from the schedule alone."""
    rng = np.random.default_rng(3)
    d, b, g = 3, 4, 8
    H = int(np.prod(lead)) if lead else 1
    for layout in ring.LAYOUTS:
        for P in (1, 2, 3):
            for N in (ring.min_length(layout, P), ring.min_length(layout, P) + 3):
                Q, K, V, dO = _qkv(rng, lead + (N, d))
                fwd = ring.forward(Q, K, V, world_size=P, layout=layout, causal=True, dtype_bytes=b)
                bwd = ring.backward(Q, K, V, fwd.O, dO, fwd.L, world_size=P, layout=layout, causal=True,
                                    dtype_bytes=b, grad_bytes=g)
                for res, direction in ((fwd, "forward"), (bwd, "backward")):
                    want = _independent_comm(N, d, P, layout, H, b, g, direction)
                    pred = iom.comm(direction, N=N, d=d, world_size=P, layout=layout, heads=H, dtype_bytes=b,
                                    grad_bytes=g)
                    for got in (res.comm, pred):
                        np.testing.assert_array_equal(got.sent, want)
                        np.testing.assert_array_equal(got.received, np.roll(want, 1, axis=0))
                assert bwd.comm.messages == (0 if P == 1 else 2 * P - 1)
                if H:
                    np.testing.assert_allclose(fwd.O, attention_ref(Q, K, V, causal=True)[0], rtol=1e-12, atol=1e-12)


def test_closed_forms_check_their_inputs():
    """overlap(N=0) (or d=0, heads=0, link_bandwidth=0) and ring_bytes_per_rank(world_size=0) divided by zero;
    N=-8 returned a negative ratio and hidden=True; N=True, causal='yes', flops=-1, dtype_bytes=0 were taken; a
    misspelt option named no valid ones. Now the rules of every entry point (an empty batch sends nothing)."""
    with pytest.raises(ValueError, match=r"^N: expected a positive integer, got 0"):
        iom.overlap(N=0, d=8, world_size=2)
    with pytest.raises(ValueError, match=r"^N: expected at least one token per device"):
        iom.overlap(N=1, d=8, world_size=2)
    with pytest.raises(ValueError, match=r"^N: expected a positive integer"):
        iom.overlap(N=-8, d=8, world_size=2)
    with pytest.raises(TypeError, match=r"^N: expected a positive integer, got True"):
        iom.overlap(N=True, d=8, world_size=1)
    with pytest.raises(ValueError, match=r"^d: expected a positive integer"):
        iom.overlap(N=8, d=0, world_size=2)
    with pytest.raises(ValueError, match=r"^link_bandwidth: expected a finite positive number"):
        iom.overlap(N=8, d=8, world_size=2, link_bandwidth=0)
    with pytest.raises(TypeError, match=r"^causal: expected True or False"):
        iom.overlap(N=8, d=8, world_size=2, causal="yes")
    with pytest.raises(TypeError, match=r"iomodel.ring.overlap: unknown option 'casual'; valid options are N, "):
        iom.overlap(N=8, d=8, world_size=2, casual=True)
    empty = iom.overlap(N=8, d=8, world_size=2, heads=0)
    assert empty["forward"]["t_comm"] == 0 and empty["forward"]["ratio"] == float("inf") and empty["forward"]["hidden"]
    for f in (iom.ring_bytes_per_rank, iom.ulysses_bytes_per_rank):
        with pytest.raises(ValueError, match=r"^world_size: expected a positive integer"):
            f(8, 4, 0)
        with pytest.raises(TypeError, match=r"^world_size: expected a positive integer"):
            f(8, 4, True)
        with pytest.raises(TypeError, match=r"unknown option 'head'; valid options are dtype_bytes, heads"):
            f(8, 4, 2, head=2)
        assert f(8, 4, 2, heads=0) == 0
    with pytest.raises(ValueError, match=r"^flops: expected a finite positive number"):
        iom.min_tokens_per_device("H100", flops=-1)
    with pytest.raises(ValueError, match=r"^dtype_bytes: expected a positive integer"):
        iom.min_tokens_per_device("H100", dtype_bytes=0)
    with pytest.raises(TypeError, match=r"unknown option 'casual'"):
        iom.min_tokens_per_device("H100", casual=True)
    # the GPU is named gpu in its errors, and checked even where both rates are given (it was ignored there)
    for f in (lambda **kw: iom.min_tokens_per_device(**kw), lambda **kw: iom.overlap(N=64, d=8, world_size=2, **kw)):
        with pytest.raises(ValueError, match=r"^gpu: unknown GPU 'V100'"):
            f(gpu="V100")
        with pytest.raises(ValueError, match=r"^gpu: unknown GPU 'V100'"):
            f(gpu="V100", flops=1e15, link_bandwidth=1e11)
        with pytest.raises(TypeError, match=r"^gpu: expected a GPU name"):
            f(gpu=7)
    # what took good values still gives what it gave
    assert iom.min_tokens_per_device("H200", flops=np.float64(1e15), link_bandwidth=1e11) == pytest.approx(1e4)
    assert iom.overlap(N=np.int64(4096), d=128, world_size=4)["n"] == 1024


# ---------------------------------------------------------------- shard / unshard


def test_unshard_refuses_what_is_not_a_list_of_like_shards():
    """``unshard(o_r, layout)`` (one tensor, not a list) cut it along its first axis into "shards" and returned a
    tensor of another shape; ``unshard(None, ...)`` raised Python's "not iterable" naming nothing; shards of
    different dtypes were promoted silently. Each is now a TypeError naming shards."""
    x = torch.arange(2 * 2 * 8 * 3, dtype=torch.float64).reshape(2, 2, 8, 3)
    parts = [fd.shard(x, "zigzag", r, 2) for r in range(2)]
    assert torch.equal(fd.unshard(parts, "zigzag"), x)
    assert torch.equal(fd.unshard(tuple(parts), "zigzag"), x)
    with pytest.raises(TypeError, match=r"^shards: expected a list of tensors, one per rank, got one torch.Tensor"):
        fd.unshard(parts[0], "zigzag")
    with pytest.raises(TypeError, match=r"^shards: expected a list of tensors, one per rank, got NoneType"):
        fd.unshard(None, "zigzag")
    with pytest.raises(TypeError, match=r"^shards: expected one dtype, got \['torch.float64', 'torch.float32'\]"):
        fd.unshard([parts[0], parts[1].float()], "zigzag")


def test_shard_unshard_round_trips_on_every_axis():
    """Not a defect: every layout, P and axis (negative, numpy) round-trips, and an empty batch stays empty."""
    x = torch.arange(3 * 12 * 2 * 5, dtype=torch.float64).reshape(3, 12, 2, 5)
    for layout in fd.LAYOUTS:
        for P in (1, 2, 3):
            for dim in (1, -3, np.int64(1)):
                parts = [fd.shard(x, layout, r, P, dim=dim) for r in range(P)]
                assert torch.equal(fd.unshard(parts, layout, dim=dim), x)
    e = torch.zeros(0, 2, 8, 3)
    assert fd.unshard([fd.shard(e, "zigzag", r, 2) for r in range(2)], "zigzag").shape == e.shape


# ---------------------------------------------------------------- ring_attention on gloo


def _sdpa(q, k, v, do, causal):
    q, k, v = (x.detach().clone().requires_grad_(True) for x in (q, k, v))
    o = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
    o.backward(do)
    return o.detach(), q.grad, k.grad, v.grad


def _raises(fn, exc, match):
    try:
        fn()
    except exc as e:
        assert match in str(e), f"expected {match!r} in {e!r}"
        return
    raise AssertionError(f"expected {exc.__name__} matching {match!r}, nothing raised")


def _hostile(rank, P):
    fd.CHECK_TIMEOUT_S = 10.0  # a rank left behind is an error within seconds, not a hang
    ra = fd.ring_attention
    g = torch.Generator().manual_seed(0)
    x = torch.randn(1, 2, 4, 8, generator=g, dtype=torch.float64)

    # A NaN in do on rank 1 only: every rank raises before any exchange (it gave rank 1 a NaN dq, every rank
    # NaN dk, dv, silently).
    def nan_do():
        q = x.clone().requires_grad_()
        o = ra(q, x, x)
        do = torch.ones_like(o)
        if rank == 1:
            do[0, 0, 0, 0] = float("nan")
        o.backward(do)
    _raises(nan_do, ValueError, "backward: on rank 1: do (the gradient of the output) contains NaN or inf")

    # Scores past fp32 (|q·k| = 8e40): the output was inf; all scores past -fp32max: the output was 0. Both silent.
    big = torch.ones(1, 1, 4, 8) * 1e20
    _raises(lambda: ra(big, big, big), FloatingPointError, "the scores overflowed torch.float32")
    _raises(lambda: ra(big, -big, big), FloatingPointError, "compute in float64")
    _raises(lambda: ra(big.double() ** 8, big.double() ** 8, big.double()), FloatingPointError,
            "overflowed torch.float64")

    # Huge finite scores (|q·k| = 1e8): an fp32 log-sum-exp drops log ℓ, and the pairs were weighed alike (up to
    # 25% off, and outside V's range). fp32 refuses; fp64 is exact.
    N = 4 * P
    huge = torch.zeros(1, N, 2)
    huge[..., 0] = 1e4
    vals = torch.arange(2.0 * N).reshape(1, N, 2)
    mine = [fd.shard(t, "zigzag", rank, P) for t in (huge, huge, vals)]
    _raises(lambda: ra(*mine), FloatingPointError, "too large for torch.float32 to carry log ℓ")
    o = ra(*(t.double() for t in mine))
    want = fd.shard(vals.double().mean(dim=1, keepdim=True).expand(1, N, 2), "zigzag", rank, P)  # equal scores
    assert (o - want).abs().max().item() < 1e-6  # float64 keeps log ℓ to its spacing at 1e8 (1.5e-8)

    # A gradient past fp32: every query attends key 0 alone, dv_0 = Σ_i do_i (rank 0 holds key 0).
    N = 4 * P
    q = torch.zeros(1, N, 2)
    q[..., 0] = 10
    k = torch.zeros(1, N, 2)
    k[:, 0, 0] = 10
    mine = [fd.shard(t, "zigzag", rank, P).requires_grad_() for t in (q, k, torch.zeros(1, N, 2))]
    o = ra(*mine)
    if rank == 0:
        _raises(lambda: o.backward(torch.full_like(o, 3e38)), FloatingPointError, "the gradient dv overflowed")
    else:
        o.backward(torch.full_like(o, 3e38))

    # After the refusals, the ring against torch's SDPA, gradients included, on shapes the other tests skip:
    # no leading axis, five axes, fp32, an empty batch.
    for shape, dtype, tol in (((N, 4), torch.float64, 1e-12), ((1, 2, 1, N, 4), torch.float64, 1e-12),
                              ((2, 3, N, 8), torch.float32, 1e-5)):
        for layout in fd.LAYOUTS:
            for causal in (False, True):
                full = [torch.randn(shape, generator=g, dtype=torch.float64) for _ in range(4)]
                want = _sdpa(*full, causal)
                mine = [fd.shard(t.to(dtype), layout, rank, P).requires_grad_(i < 3) for i, t in enumerate(full)]
                o = ra(*mine[:3], causal=causal, layout=layout)
                o.backward(mine[3])
                for got, w in zip((o, *(m.grad for m in mine[:3])), want):
                    assert got.dtype == dtype and got.shape == mine[0].shape
                    err = (got.double() - fd.shard(w, layout, rank, P)).abs().max().item()
                    assert err < tol, (shape, dtype, layout, causal, err)
    e = torch.zeros(0, 2, 4, 8, dtype=torch.float64, requires_grad=True)
    o = ra(e, e, e, causal=True)
    o.backward(torch.zeros_like(o))
    assert o.shape == e.shape and e.grad.shape == e.shape
    # a head dim of 0 (SDPA takes it and returns (..., n, 0)): 1/sqrt(0) raised ZeroDivisionError
    q0 = fd.shard(torch.zeros(1, N, 0, dtype=torch.float64), "zigzag", rank, P).requires_grad_()
    o = ra(q0, q0, q0, causal=True)
    o.backward(torch.zeros_like(o))
    assert o.shape == q0.shape == (1, N // P, 0) and q0.grad.shape == q0.shape


def test_ring_attention_refuses_nan_do_and_overflow_and_matches_sdpa(tmp_path):
    _run_world(2, ["test_hostile_ring:_hostile"], tmp_path)  # test_distributed's gloo world of spawned ranks
