"""flashref.ring: the ring simulation equals one device, and its communication equals the closed form."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from reference import attention_ref, torch_grads

from flashref import ring
from flashref.iomodel import ring as iom


def _qkv(rng, lead, N, d):
    return tuple(rng.standard_normal(lead + (N, d)) for _ in range(4))


@given(P=st.integers(1, 5), extra=st.integers(0, 11), d=st.integers(1, 6), causal=st.booleans(),
       layout=st.sampled_from(ring.LAYOUTS), heads=st.integers(1, 2), seed=st.integers(0, 2**16))
def test_ring_equals_one_device_and_closed_form(P, extra, d, causal, layout, heads, seed):
    N = ring.min_length(layout, P) + extra  # most N are not multiples of P (or of 2P)
    rng = np.random.default_rng(seed)
    Q, K, V, dO = _qkv(rng, (heads,), N, d)
    O, _, lse = attention_ref(Q, K, V, causal=causal)  # the float64 oracle
    dQ, dK, dV = torch_grads(Q, K, V, dO, causal=causal)
    fwd = ring.forward(Q, K, V, world_size=P, layout=layout, causal=causal)
    bwd = ring.backward(Q, K, V, fwd.O, dO, fwd.L, world_size=P, layout=layout, causal=causal)
    for got, want in ((fwd.O, O), (fwd.L, lse), (bwd.dQ, dQ), (bwd.dK, dK), (bwd.dV, dV)):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    # communication: simulated == closed form, exactly, every rank and every step
    for res, direction in ((fwd, "forward"), (bwd, "backward")):
        pred = iom.comm(direction, N=N, d=d, world_size=P, layout=layout, heads=heads)
        np.testing.assert_array_equal(res.comm.sent, pred.sent)
        np.testing.assert_array_equal(res.comm.received, pred.received)
    assert [len(p) for p in fwd.positions] == iom.shard_lengths(N, P, layout)


def test_forward_bytes_match_the_textbook_formula():
    # equal shards: 2(P-1)/P N H d b per rank, P/2 times Ulysses'
    for P in (2, 4, 8):
        N, d, H = 64 * P, 8, 3
        pred = iom.comm("forward", N=N, d=d, world_size=P, layout="zigzag", heads=H)
        assert (pred.per_rank == iom.ring_bytes_per_rank(N, d, P, heads=H)).all()
        assert iom.ring_bytes_per_rank(N, d, P) / iom.ulysses_bytes_per_rank(N, d, P) == pytest.approx(P / 2)


def test_positions_partition_the_sequence():
    for layout in ring.LAYOUTS:
        for P in (1, 2, 3, 5):
            for N in range(ring.min_length(layout, P), ring.min_length(layout, P) + 12):
                pos = ring.positions(N, P, layout)
                allpos = np.sort(np.concatenate(pos))
                np.testing.assert_array_equal(allpos, np.arange(N))
                assert all((np.diff(p) > 0).all() for p in pos)
                assert max(map(len, pos)) - min(map(len, pos)) <= (2 if layout == "zigzag" else 1)


def test_closed_forms_refuse_what_positions_refuses():
    """iomodel.ring.shard_lengths (and comm) equal ring.positions' lengths wherever positions deals the tokens,
    and refuse, with the same error, where it does not (a device would hold no token)."""
    for layout in ring.LAYOUTS:
        for P in (2, 3, 4):
            short = ring.min_length(layout, P) - 1
            for f, args in ((ring.positions, (short, P, layout)), (iom.shard_lengths, (short, P, layout))):
                with pytest.raises(ValueError, match="N: the .* layout over world_size=.* needs at least"):
                    f(*args)
            with pytest.raises(ValueError, match="needs at least"):
                iom.comm("forward", N=short, d=4, world_size=P, layout=layout)
            N = short + 1
            assert iom.shard_lengths(N, P, layout) == [len(p) for p in ring.positions(N, P, layout)]


def test_zigzag_balances_causal_work():
    # contiguous: the last device does 2P-1 times the first's work; zigzag: all equal
    P, N = 4, 64
    rng = np.random.default_rng(1)
    Q, K, V, _ = _qkv(rng, (), N, 2)
    load = {lay: ring.forward(Q, K, V, world_size=P, layout=lay, causal=True).work.sum(axis=1)
            for lay in ring.LAYOUTS}
    assert load["contiguous"][-1] / load["contiguous"][0] == pytest.approx(2 * P - 1, rel=0.1)
    assert len(set(load["zigzag"])) == 1
    # the step takes as long as the busiest device: contiguous's per-step max is the full block
    work = ring.forward(Q, K, V, world_size=P, layout="contiguous", causal=True).work
    assert work.max(axis=0)[1:].tolist() == [(N // P) ** 2] * (P - 1)


def test_schedule_and_events():
    rng = np.random.default_rng(2)
    Q, K, V, dO = _qkv(rng, (), 12, 2)
    fwd = ring.forward(Q, K, V, world_size=3, layout="striped")
    assert fwd.source.tolist() == [[0, 2, 1], [1, 0, 2], [2, 1, 0]]
    assert fwd.comm.messages == 2  # P - 1 exchanges of K/V
    bwd = ring.backward(Q, K, V, fwd.O, dO, fwd.L, world_size=3, layout="striped")
    assert bwd.comm.messages == 2 + 3  # P - 1 of K/V, P of dK/dV: 3P - 2 with the forward
    both = fwd.comm + bwd.comm
    assert both.sent.shape == (3, 6) and both.total == fwd.comm.total + bwd.comm.total
    assert "bytes sent" in str(fwd.comm)
    assert len(fwd.io) == 3 and all(io.total > 0 for io in fwd.io)


def test_bad_input():
    Q = np.zeros((5, 2))
    with pytest.raises(ValueError, match="layout"):
        ring.forward(Q, Q, Q, world_size=2, layout="diagonal")
    with pytest.raises(ValueError, match="needs at least 6 tokens"):
        ring.forward(Q, Q, Q, world_size=3, layout="zigzag")
    with pytest.raises(ValueError, match="world_size"):
        ring.forward(Q, Q, Q, world_size=0)
    with pytest.raises(TypeError, match="mask"):
        ring.forward(Q, Q, Q, world_size=2, mask=np.ones((5, 5), bool))
    with pytest.raises(ValueError, match="Nk must equal Nq"):
        ring.forward(Q, np.zeros((6, 2)), np.zeros((6, 2)), world_size=2)
    with pytest.raises(ValueError, match="layout"):
        iom.shard_lengths(8, 2, "diagonal")
    with pytest.raises(ValueError, match="direction"):
        iom.comm("sideways", N=8, d=2, world_size=2)
    # the closed form's options by every entry point's rules: an unknown one named with the valid ones, a bool
    # where a size goes a TypeError (as ring.forward's), an empty batch nothing sent (as ring.forward's)
    with pytest.raises(TypeError, match="unknown option 'casual'; valid options are N, d"):
        iom.comm("forward", N=8, d=2, world_size=2, casual=True)
    for run in (lambda: iom.comm("forward", N=8, d=2, world_size=True),
                lambda: ring.forward(np.zeros((8, 2)), np.zeros((8, 2)), np.zeros((8, 2)), world_size=True)):
        with pytest.raises(TypeError, match="world_size"):
            run()
    empty = np.zeros((0, 8, 2))
    assert ring.forward(empty, empty, empty, world_size=2).comm.sent.sum() == 0
    assert iom.comm("forward", N=8, d=2, world_size=2, heads=0).sent.sum() == 0


def test_overlap_condition():
    n_min = iom.min_tokens_per_device("H200")
    assert n_min == pytest.approx(989.4e12 * 2 / (2 * 450e9))
    below = iom.overlap(N=2 * int(n_min * 0.9), d=128, world_size=2, gpu="H200")
    above = iom.overlap(N=2 * int(n_min * 1.1), d=128, world_size=2, gpu="H200")
    assert not below["forward"]["hidden"] and above["forward"]["hidden"]
    assert iom.min_tokens_per_device("H200", causal=True) == pytest.approx(2 * n_min)
