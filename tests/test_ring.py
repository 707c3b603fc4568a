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


def _pieces_by_hand(layout, fa, Q, K, V, dO, fwd, P, **opts):
    """Each rank's forward and backward FLOPs and HBM elements, from FlashAttention-2 run on each piece of each
    of its pairs (what distributed.ring_attention runs), plus the forward's merges: per piece, O_r and L_r's rows
    read, the piece's O and L read, O_r and L_r's rows written; and the backward's sums: per piece, dQ_r's rows and
    the piece's dQ read, dQ_r's rows written, and the same for dK_s and dV_s over its key rows."""
    lead, d = Q.shape[:-2], Q.shape[-1]
    H = int(np.prod(lead)) if lead else 1
    pos, n = fwd.positions, len(fwd.positions[0])
    want = {k: [0] * P for k in ("fwd_flops", "fwd_io", "bwd_flops", "bwd_io")}
    for r in range(P):
        for s in range(P):
            for qs, ks, c in ring.pieces(layout, True, r, s, n):
                q, k = pos[r][qs], pos[s][ks]
                f = fa.forward(Q[..., q, :], K[..., k, :], V[..., k, :], causal=c, **opts)
                b = fa.backward(Q[..., q, :], K[..., k, :], V[..., k, :], fwd.O[..., q, :], dO[..., q, :],
                                fwd.L[..., q], causal=c, **opts)
                merge = 3 * H * len(q) * (d + 1)  # read (O_r, L_r) and (O_rs, L_rs) rows, write (O_r, L_r) rows
                want["fwd_flops"][r] += f.flops.total
                want["fwd_io"][r] += f.io.total + merge
                want["bwd_flops"][r] += b.flops.total
                add = 3 * H * (len(q) + 2 * len(k)) * d  # dQ_r += dQ_rs; dK_s += dK_rs; dV_s += dV_rs
                want["bwd_io"][r] += b.io.total + add
    return want


@pytest.mark.parametrize("layout", ring.LAYOUTS)
def test_causal_ring_charges_what_its_pieces_compute(layout):
    """Each causal pair runs as the full or top-left causal pieces of ring.pieces (distributed.ring_attention's),
    so a rank's FLOPs and HBM traffic are FlashAttention-2's on those pieces, counted by running it. Zigzag's and
    striped's off-diagonal pairs once ran with an explicit mask, visiting every tile: every zigzag rank was charged
    the FLOPs and traffic of contiguous's busiest rank, and striped's charges ran against its work."""
    from flashref import flash2

    P, N, d = 4, 128, 8
    opts = {"block_sizes": (8, 8)}
    rng = np.random.default_rng(5)
    Q, K, V, dO = _qkv(rng, (2,), N, d)
    fwd = ring.forward(Q, K, V, world_size=P, layout=layout, causal=True, **opts)
    bwd = ring.backward(Q, K, V, fwd.O, dO, fwd.L, world_size=P, layout=layout, causal=True, **opts)
    want = _pieces_by_hand(layout, flash2, Q, K, V, dO, fwd, P, **opts)
    assert [f.total for f in fwd.flops] == want["fwd_flops"]
    assert [io.total for io in fwd.io] == want["fwd_io"]
    assert [f.total for f in bwd.flops] == want["bwd_flops"]
    assert [io.total for io in bwd.io] == want["bwd_io"]


def test_balanced_layouts_are_charged_like_their_work():
    """The charges follow .work: zigzag's busiest rank is charged less than contiguous's busiest, forward and
    backward, FLOPs and HBM traffic; striped's ranks are charged in the order of their work (rank 0 least)."""
    P, N, d = 4, 256, 16
    rng = np.random.default_rng(0)
    Q, K, V, dO = _qkv(rng, (), N, d)
    res = {}
    for lay in ring.LAYOUTS:
        f = ring.forward(Q, K, V, world_size=P, layout=lay, causal=True, block_sizes=(16, 16))
        b = ring.backward(Q, K, V, f.O, dO, f.L, world_size=P, layout=lay, causal=True, block_sizes=(16, 16))
        res[lay] = (f, b)
    for which in (0, 1):  # forward, backward
        zig, con = res["zigzag"][which], res["contiguous"][which]
        # FLOPs: zigzag P/2 blocks a rank, contiguous P - 1/2 on its last: 4/7 at P = 4; traffic less too
        for report, below in (("flops", 0.7), ("io", 0.9)):
            zig_max, con_max = (max(x.total for x in getattr(r, report)) for r in (zig, con))
            assert zig_max < below * con_max, (which, report, zig_max, con_max)
        striped = res["striped"][which]
        work = striped.work.sum(axis=1)
        assert (np.diff(work) > 0).all()
        for report in ("flops", "io"):
            charged = [x.total for x in getattr(striped, report)]
            assert (np.diff(charged) > 0).all(), (which, report, charged)
    # all ranks together do about one device's work: the ring adds no FLOPs beyond the pieces' diagonal tiles
    from flashref import flash2
    one = flash2.forward(Q, K, V, causal=True, block_sizes=(16, 16)).flops.total
    assert res["zigzag"][0].flops.total < 1.05 * one


@pytest.mark.parametrize("layout", ring.LAYOUTS)
def test_pieces_cover_exactly_the_causal_pairs_for_any_N(layout):
    """ring.pieces, given each shard's length and (zigzag) first-chunk length, covers exactly pair_mask's pairs,
    with no row or column that sees nothing, for N not a multiple of P or 2P too (the simulator's shards)."""
    for P in (1, 2, 3, 4):
        for N in range(ring.min_length(layout, P), ring.min_length(layout, P) + 2 * P + 1):
            pos = ring.positions(N, P, layout)
            first = [N // (2 * P) + (k < N % (2 * P)) for k in range(P)]  # array_split's chunk lengths
            for r in range(P):
                for s in range(P):
                    want = ring.pair_mask(pos[r], pos[s], True)
                    want = np.ones((len(pos[r]), len(pos[s])), bool) if want is None else np.asarray(want)
                    got = np.zeros(want.shape, int)
                    for qs, ks, c in ring.pieces(layout, True, r, s, len(pos[r]), len(pos[s]), h_q=first[r],
                                                 h_k=first[s]):
                        block = np.ones((qs.stop - qs.start, ks.stop - ks.start), int)
                        assert block.size, (layout, N, P, r, s)
                        block = np.tril(block) if c else block
                        assert block.any(axis=0).all() and block.any(axis=1).all(), (layout, N, P, r, s)
                        got[qs, ks] += block
                    np.testing.assert_array_equal(got, want, err_msg=f"{layout} N={N} P={P} r={r} s={s}")


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


def test_closed_forms_refuse_what_their_formula_does_not_describe():
    """ring_bytes_per_rank is the equal-shard formula: N = 10 over P = 4 returned 15·H·d·b, a number no rank sends
    (comm gives each rank's). Refused, naming N; comm still counts unequal shards."""
    with pytest.raises(ValueError, match=r"^N: the formula is for equal shards, so N must be a multiple of "
                                         r"world_size=4, got N=10"):
        iom.ring_bytes_per_rank(10, 4, 4)
    assert len(set(iom.comm("forward", N=10, d=4, world_size=4).per_rank.tolist())) > 1  # ranks send unequal bytes
    assert iom.ring_bytes_per_rank(12, 4, 4) == 2 * 3 / 4 * 12 * 4 * 2


def test_each_device_holds_its_merges_to_sram_size():
    """The forward's merges and the backward's sums run as many rows at a time as fit in sram_size, as the device's
    FlashAttention-2 calls do: the peak on chip stays within it (the merge once loaded a piece's whole O_r, L_r,
    O_rs and L_rs: 1152 elements a head at sram_size=600), and the HBM traffic is what the unbounded pass moves, each
    element read and written once whatever the cut."""
    rng = np.random.default_rng(3)
    Q, K, V, dO = _qkv(rng, (2,), 128, 8)
    runs = {}
    for M in (600, 10**6):
        opts = dict(world_size=2, layout="contiguous", causal=True, sram_size=M, block_sizes=(4, 8))
        fwd = ring.forward(Q, K, V, **opts)
        bwd = ring.backward(Q, K, V, fwd.O, dO, fwd.L, **opts)
        runs[M] = (fwd, bwd)
    for res in runs[600]:
        assert all(io.peak_sram <= 600 for io in res.io), [io.peak_sram for io in res.io]
    for small, big in zip(runs[600], runs[10**6]):
        assert [io.total for io in small.io] == [io.total for io in big.io]
        assert small.io.by_tensor == big.io.by_tensor


def test_per_device_reports_read_as_one_report():
    """ring's .io and .flops are lists, one report per rank; read as a report they are the ranks' together (their
    sum, the largest peak), as every other algorithm's .io reads: .reads used to be an AttributeError."""
    rng = np.random.default_rng(4)
    Q, K, V, _ = _qkv(rng, (1,), 24, 4)
    fwd = ring.forward(Q, K, V, world_size=3)
    assert fwd.io.reads == sum(io.reads for io in fwd.io) > 0
    assert fwd.io.writes == sum(io.writes for io in fwd.io)
    assert fwd.io.total == fwd.io.reads + fwd.io.writes
    assert fwd.io.peak_sram == max(io.peak_sram for io in fwd.io)
    assert fwd.flops.matmul == sum(f.matmul for f in fwd.flops)
    with pytest.raises(AttributeError):
        fwd.io.no_such_field  # noqa: B018


def test_per_device_reports_pass_on_their_own_errors():
    """The combined view raises the error of what went wrong, not a RecursionError (an AttributeError inside the
    combining once sent __getattr__ round again), and says so where no device has a report."""
    from flashref.ring import _PerDevice

    class Broken:
        def __add__(self, other):
            return self.missing

    with pytest.raises(AttributeError, match="missing"):
        _PerDevice([Broken(), Broken()]).reads  # noqa: B018
    with pytest.raises(AttributeError, match="no device has a report"):
        _PerDevice([None]).reads  # noqa: B018
    # and a dtype_bytes past the default M's half runs with explicit blocks, as flash2 does (the merges' row cut
    # once asked default_sram_size, which refuses it)
    Q = np.random.default_rng(0).standard_normal((8, 4))
    assert ring.forward(Q, Q, Q, world_size=2, block_sizes=(2, 2), dtype_bytes=50001).O.shape == (8, 4)


def test_forward_refuses_an_L_too_large_to_weigh_the_shards():
    # Every score 7e7 in float32: each shard's L rounds to m (spacing 8), its log ℓ lost, and the merge weighed shards
    # of 3 and 2 keys alike (26% off, silently). float32 refuses, as the backward refuses such an L; float64 is exact.
    N, d = 9, 2
    Q = np.zeros((1, N, d), np.float32)
    Q[..., 0] = 1e4
    V = np.arange(N * d, dtype=np.float32).reshape(1, N, d)
    with pytest.raises(FloatingPointError, match="too large for float32 to carry log ℓ.*weigh its shards"):
        ring.forward(Q, Q, V, world_size=4)
    O = ring.forward(Q.astype(np.float64), Q.astype(np.float64), V.astype(np.float64), world_size=4).O
    # float64 keeps log ℓ to its spacing at 7e7 (1.5e-8): the weights are off by that much, no more
    np.testing.assert_allclose(O, np.broadcast_to(V.mean(axis=1, keepdims=True), O.shape), rtol=1e-8)
