"""flashref.distributed on gloo: 2 and 3 processes on localhost against one process's full attention.

Each world is one spawn (the processes start once and run every case), bounded by a deadline; a
worker that fails raises, and the parent reports its traceback. Everything is float64 on the CPU.
"""

import datetime
import importlib
import os
import socket
import time
import traceback

import pytest
import torch

from flashref import distributed as fd

DEADLINE_S = 90  # per world; the whole file takes ~20 s on two busy cores


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _full_attention(q, k, v, do, causal, scale=None):
    """One process's float64 attention and its gradients by autograd (the oracle)."""
    q, k, v = (x.detach().clone().requires_grad_(True) for x in (q, k, v))
    S = (q @ k.transpose(-1, -2)) * (q.shape[-1] ** -0.5 if scale is None else scale)
    if causal:
        N = q.shape[-2]
        S = S.masked_fill(~torch.ones(N, N, dtype=torch.bool).tril(), float("-inf"))
    o = torch.softmax(S, dim=-1) @ v
    o.backward(do)
    return o.detach(), q.grad, k.grad, v.grad


def _correctness(rank, P):
    g = torch.Generator().manual_seed(0)
    B, H, d = 2, 2, 8
    for layout in fd.LAYOUTS:
        N = 2 * P * 3  # a multiple of 2P, so every layout shards it equally
        q, k, v, do = (torch.randn(B, H, N, d, generator=g, dtype=torch.float64) for _ in range(4))
        for causal in (False, True):
            o, dq, dk, dv = _full_attention(q, k, v, do, causal)
            mine = [fd.shard(x, layout, rank, P).requires_grad_(x is not do) for x in (q, k, v, do)]
            fd.reset_counts()
            o_r = fd.ring_attention(*mine[:3], causal=causal, layout=layout)
            assert fd.collective_counts() == {"all_gather": 1, "kv": P - 1, "p2p": 2 * (P - 1)}, fd.collective_counts()
            o_r.backward(mine[3])
            # P - 1 exchanges forward, 3P - 2 with the backward (K/V P - 1 times, dK/dV P times)
            counts = fd.collective_counts()
            assert counts["kv"] + counts["dkv"] == 3 * P - 2 and counts["dkv"] == P, counts
            for got, want, name in ((o_r, o, "o"), (mine[0].grad, dq, "dq"), (mine[1].grad, dk, "dk"),
                                    (mine[2].grad, dv, "dv")):
                err = (got - fd.shard(want, layout, rank, P)).abs().max().item()
                assert err < 1e-12, f"{layout} causal={causal} {name}: error {err:.2e} on rank {rank}"
            # the shards put back together are the full output, on every rank
            full = fd.gather(o_r.detach(), layout)
            assert (full - o).abs().max().item() < 1e-12


def _triton_interpreted(rank, P):
    """The CUDA path's pieces and LSE handling, run by the Triton kernels in the CPU interpreter (float32)."""
    fd._FORCE_TRITON, fd.HEAD_GROUP_SIZE = True, 1  # and one ring per head (two groups)
    try:
        g = torch.Generator().manual_seed(1)
        N = 2 * P * 3
        for layout in ("zigzag", "striped"):
            q, k, v, do = (torch.randn(1, 2, N, 16, generator=g) for _ in range(4))
            o, dq, dk, dv = _full_attention(*(x.double() for x in (q, k, v, do)), causal=True)
            mine = [fd.shard(x, layout, rank, P).requires_grad_(i < 3) for i, x in enumerate((q, k, v, do))]
            o_r = fd.ring_attention(*mine[:3], causal=True, layout=layout)
            o_r.backward(mine[3])
            for got, want in ((o_r, o), (mine[0].grad, dq), (mine[1].grad, dk), (mine[2].grad, dv)):
                assert (got.double() - fd.shard(want, layout, rank, P)).abs().max().item() < 1e-5
    finally:
        fd._FORCE_TRITON, fd.HEAD_GROUP_SIZE = False, 2**18


def _expect(fn, exc, match):
    try:
        fn()
    except exc as e:
        assert match in str(e), f"expected {match!r} in {e!r}"
        return
    except Exception as e:  # noqa: BLE001
        raise AssertionError(f"expected {exc.__name__} matching {match!r}, got {type(e).__name__}: {e}") from e
    raise AssertionError(f"expected {exc.__name__} matching {match!r}, nothing raised")


def _bad_inputs(rank, P):
    x = torch.zeros(1, 2, 4, 8, dtype=torch.float64)
    ra = fd.ring_attention
    # an unknown layout on one rank only: both ranks raise
    _expect(lambda: ra(x, x, x, layout="diagonal" if rank == 1 else "zigzag"), ValueError, "unknown layout")
    _expect(lambda: ra(x, x, x, layout="diagonal"), ValueError, "unknown layout")
    # shards of unequal length
    y = torch.zeros(1, 2, 4 + 2 * rank, 8, dtype=torch.float64)
    _expect(lambda: ra(y, y, y), ValueError, "unequal length")
    # wrong length: k and v do not hold q's tokens
    short = torch.zeros(1, 2, 3, 8, dtype=torch.float64)
    _expect(lambda: ra(x, short if rank == 0 else x, short if rank == 0 else x), ValueError, "wrong shard length")
    # zigzag shards are two chunks: an odd length is wrong, one token is too short
    odd = torch.zeros(1, 2, 3, 8, dtype=torch.float64)
    _expect(lambda: ra(odd, odd, odd, layout="zigzag"), ValueError, "wrong shard length for zigzag")
    one = torch.zeros(1, 2, 1, 8, dtype=torch.float64)
    _expect(lambda: ra(one, one, one, layout="zigzag"), ValueError, "too short")
    empty = torch.zeros(1, 2, 0, 8, dtype=torch.float64)
    _expect(lambda: ra(empty, empty, empty, layout="contiguous"), ValueError, "too short")
    # ranks disagree on shapes (heads) or dtypes
    z = torch.zeros(1, 2 + rank, 4, 8, dtype=torch.float64)
    _expect(lambda: ra(z, z, z), ValueError, "disagree on shapes")
    w = x.to(torch.float32) if rank == 1 else x
    _expect(lambda: ra(w, w, w), ValueError, "disagree on dtype")
    _expect(lambda: ra(x, x, x, causal=rank == 1), ValueError, "disagree on causal")
    # scale=None (1/√d) against scale=-1.0, a valid scale that the check once encoded None as: refused, each
    # rank's value shown (and None against another scale too)
    _expect(lambda: ra(x, x, x, scale=None if rank == 0 else -1.0), ValueError,
            "disagree on scale: [None, -1.0] by rank")
    _expect(lambda: ra(x, x, x, scale=0.5 if rank == 0 else None), ValueError,
            "disagree on scale: [0.5, None] by rank")
    _expect(lambda: ra(x, x, "v" if rank == 0 else x), TypeError, "torch.Tensor")
    # shard's own checks (local, no communication)
    _expect(lambda: fd.shard(torch.zeros(1, 6, 2), "zigzag", rank, P), ValueError, "multiple of 4")
    _expect(lambda: fd.shard(torch.zeros(1, 2, 2), "zigzag", rank, P), ValueError, "too short")
    _expect(lambda: fd.shard(x, "diagonal", rank, P), ValueError, "layout")
    # the ring still works after all those refusals
    o = ra(x + 1, x, x + 2)
    assert torch.allclose(o, torch.full_like(o, 2.0))
    # last: a rank that never calls. The other gets an error after the check's timeout, not a hang.
    fd.CHECK_TIMEOUT_S = 1.0
    if rank == 0:
        t0 = time.monotonic()
        _expect(lambda: ra(x, x, x), RuntimeError, "not every rank")
        assert time.monotonic() - t0 < 20
    else:
        time.sleep(2.5)


def _nan_scale_and_double_backward(rank, P):
    ra = fd.ring_attention
    g = torch.Generator().manual_seed(2)
    x = torch.randn(1, 2, 4, 8, generator=g, dtype=torch.float64)
    # NaN or inf on one rank only: every rank raises the same error (never an all-NaN output, never a hang)
    nan = x.clone().index_fill_(-1, torch.tensor([0]), float("nan"))
    _expect(lambda: ra(nan if rank == 1 else x, x, x), ValueError, "on rank 1: q contains NaN or inf")
    _expect(lambda: ra(x, x, x.clone().fill_(float("inf")) if rank == 0 else x), ValueError,
            "on rank 0: v contains NaN or inf")
    # double backward: the front's clear RuntimeError; a first-order gradient still works
    q = x.clone().requires_grad_()
    _expect(lambda: torch.autograd.grad(ra(q, x, x).sum(), q, create_graph=True), RuntimeError, "double backward")
    (gq,) = torch.autograd.grad(ra(q, x, x).sum(), q)
    assert gq.shape == q.shape and not gq.requires_grad
    # any finite scale, as every entry point takes it (0 and negative included, numpy floats too)
    import numpy as np
    N = 4 * P
    q, k, v, do = (torch.randn(1, 2, N, 8, generator=g, dtype=torch.float64) for _ in range(4))
    # (torch's own SDPA gives NaN for causal with scale 0: not the oracle); a 0-d float tensor as the torch front takes
    for scale in (0.0, -0.7, np.float32(0.5), torch.tensor(0.25)):
        want = _full_attention(q, k, v, do, True, float(scale))
        mine = [fd.shard(t, "zigzag", rank, P).requires_grad_(i < 3) for i, t in enumerate((q, k, v, do))]
        got = ra(*mine[:3], causal=True, scale=scale)
        got.backward(mine[3])
        for a, b in zip((got, *(t.grad for t in mine[:3])), want):
            assert (a - fd.shard(b, "zigzag", rank, P)).abs().max().item() < 1e-12, scale
    _expect(lambda: ra(x, x, x, scale=float("nan")), ValueError, "scale: expected a finite real number")
    _expect(lambda: ra(x, x, x, scale=torch.tensor([0.5])), ValueError, "scale: expected a finite real number")
    # ... and on the CUDA path's Triton pair kernels (interpreted), which take |scale| on -q (gpu.forward/backward)
    fd._FORCE_TRITON = True
    try:
        q32, k32, v32, do32 = (t.float() for t in (q, k, v, do))
        want = _full_attention(q, k, v, do, True, -0.7)
        mine = [fd.shard(t, "zigzag", rank, P).requires_grad_(i < 3) for i, t in enumerate((q32, k32, v32, do32))]
        got = ra(*mine[:3], causal=True, scale=-0.7)
        got.backward(mine[3])
        for a, b in zip((got, *(t.grad for t in mine[:3])), want):
            assert (a.double() - fd.shard(b, "zigzag", rank, P)).abs().max().item() < 1e-5
    finally:
        fd._FORCE_TRITON = False


def _case(name):
    """A world's case by name: a function of this module, or "module:function" of another test module (the spawned
    child imports it by name, as it imports this one)."""
    if ":" in name:
        module, function = name.split(":")
        return getattr(importlib.import_module(module), function)
    return globals()[name]


def _worker(rank, P, port, cases, errfile):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), TRITON_INTERPRET="1")
    torch.set_num_threads(1)
    try:
        torch.distributed.init_process_group("gloo", rank=rank, world_size=P, timeout=datetime.timedelta(seconds=30))
        for case in cases:
            _case(case)(rank, P)
    except BaseException:
        with open(f"{errfile}.{rank}", "w") as f:
            f.write(traceback.format_exc())
        os._exit(1)  # never wait on the others in a shutdown barrier
    os._exit(0)  # the timed-out check leaves an all-gather pending: skip the process group's teardown


def _run_world(P, cases, tmp_path):
    ctx = torch.multiprocessing.start_processes(_worker, args=(P, _free_port(), cases, str(tmp_path / "err")),
                                                nprocs=P, join=False, start_method="spawn")
    deadline = time.monotonic() + DEADLINE_S
    try:
        while not ctx.join(timeout=1.0):
            if time.monotonic() > deadline:
                pytest.fail(f"world of {P} did not finish within {DEADLINE_S} s")
    except torch.multiprocessing.ProcessExitedException:
        pass
    finally:
        for p in ctx.processes:
            if p.is_alive():
                p.kill()
    errors = [(tmp_path / f"err.{r}").read_text() for r in range(P) if (tmp_path / f"err.{r}").exists()]
    assert not errors, "\n".join(errors)
    assert all(p.exitcode == 0 for p in ctx.processes), [p.exitcode for p in ctx.processes]


def test_two_ranks_match_one_process_and_refuse_bad_input(tmp_path):
    _run_world(2, ["_correctness", "_triton_interpreted", "_nan_scale_and_double_backward", "_bad_inputs"], tmp_path)


def test_three_ranks_match_one_process(tmp_path):
    _run_world(3, ["_correctness"], tmp_path)


def test_shard_unshard_round_trip():
    x = torch.arange(2 * 24 * 3, dtype=torch.float64).reshape(2, 24, 3)
    for layout in fd.LAYOUTS:
        for P in (1, 2, 3, 4):
            parts = [fd.shard(x, layout, r, P) for r in range(P)]
            assert torch.equal(fd.unshard(parts, layout), x)
    t = torch.arange(24).reshape(1, 24, 1)  # token i holds i
    assert fd.shard(t, "zigzag", 0, 2).flatten().tolist() == [0, 1, 2, 3, 4, 5, 18, 19, 20, 21, 22, 23]
    assert fd.shard(t, "striped", 1, 4).flatten().tolist() == [1, 5, 9, 13, 17, 21]
    assert fd.shard(t, "contiguous", 2, 3).flatten().tolist() == list(range(16, 24))


def test_shard_checks_its_axis_and_takes_numpy_ints():
    import numpy as np
    t = torch.arange(24).reshape(1, 24, 1)
    assert torch.equal(fd.shard(t, "zigzag", np.int64(0), np.int64(2), dim=1), fd.shard(t, "zigzag", 0, 2))
    for bad in (5, -4, 1.0):
        with pytest.raises(ValueError, match="dim: expected an axis of x"):
            fd.shard(t, "zigzag", 0, 2, dim=bad)
    with pytest.raises(ValueError, match="dim: expected an axis of shards"):
        fd.unshard([t, t], "contiguous", dim=3)


def test_shard_names_world_size_before_rank():
    """No ranks at all is world_size's fault, said as such; a rank outside 0..world_size-1 is rank's."""
    t = torch.arange(24).reshape(1, 24, 1)
    for world_size in (0, -1):
        with pytest.raises(ValueError, match=r"^world_size: expected a positive number of ranks"):
            fd.shard(t, "zigzag", 0, world_size)
    for rank in (2, -1):
        with pytest.raises(ValueError, match=r"^rank: expected 0 <= rank < world_size"):
            fd.shard(t, "zigzag", rank, 2)


def test_unshard_names_shards_that_differ_off_the_sequence_axis():
    x = torch.zeros(2, 6, 3)
    with pytest.raises(ValueError, match=r"shards: expected the same size on every axis but the sequence axis "
                                         r"\(dim=-2\), got shapes \[\(1, 3, 3\), \(2, 3, 3\)\]"):
        fd.unshard([x[:1, :3], x[:, 3:]], "contiguous")
    with pytest.raises(ValueError, match="shards: expected the same size"):
        fd.unshard([x[:, :3], x[:, 3:, :2]], "contiguous")
    with pytest.raises(ValueError, match="shards: expected the same size"):
        fd.unshard([x[:, :3], x[0, 3:]], "contiguous")


def test_pieces_cover_exactly_the_causal_pairs():
    from flashref import ring

    for layout in fd.LAYOUTS:
        for P in (1, 2, 3, 4):
            n = 6
            pos = ring.positions(n * P, P, layout)
            for r in range(P):
                for s in range(P):
                    want = torch.as_tensor(pos[r][:, None] >= pos[s][None, :])
                    got = torch.zeros(n, n, dtype=torch.int64)
                    for qs, ks, c in fd.pieces(layout, True, r, s, n):
                        block = torch.ones(qs.stop - qs.start, ks.stop - ks.start, dtype=torch.int64)
                        got[qs, ks] += block.tril() if c else block
                    assert torch.equal(got, want.long()), (layout, P, r, s)


def test_not_initialised():
    x = torch.zeros(1, 2, 4, 8)
    with pytest.raises(RuntimeError, match="not initialised"):
        fd.ring_attention(x, x, x)


def test_ring_attention_names_an_unknown_option():
    """Options enter one way: a misspelt option is a TypeError that lists the valid ones (before any process group)."""
    q = torch.zeros(1, 1, 4, 2)
    with pytest.raises(TypeError, match=r"ring_attention: unknown option 'casual'; valid options are causal, group"):
        fd.ring_attention(q, q, q, casual=True)


def test_ring_attention_signature_is_the_contracts():
    """q, k, v, then group, causal, layout and scale, keyword only, with the contract's defaults (it was
    ``(q, k, v, **options)``, which inspect could not read)."""
    import inspect

    params = inspect.signature(fd.ring_attention).parameters
    want = {"group": None, "causal": False, "layout": "zigzag", "scale": None}
    assert list(params)[:3] == ["q", "k", "v"]
    assert {n: params[n].default for n in want} == want
    assert all(params[n].kind is inspect.Parameter.KEYWORD_ONLY for n in want)


def test_pair_outputs_and_merges_stay_normalised_at_huge_scores():
    # Two keys of equal score 7e7 in float32: lse rounds to m (its log 2 lost). P = exp(S − lse) summed to 2 (o twice
    # the mean of v), and two equal halves merged by e^{lse − logaddexp} weighed 1 each; ℓ kept apart, both are exact.
    q = torch.zeros(1, 2, 2)
    q[..., 0] = 1e4
    v = torch.arange(4.0).reshape(1, 2, 2)
    mean = torch.tensor([[[1.0, 2.0], [1.0, 2.0]]])
    o, lse = fd.block_forward(q, q.clone(), v, False, 0.5 ** 0.5)
    assert torch.equal(o, mean)
    o1, l1 = fd.block_forward(q, q[:, :1], v[:, :1], False, 0.5 ** 0.5)
    o2, l2 = fd.block_forward(q, q[:, 1:], v[:, 1:], False, 0.5 ** 0.5)
    fd._merge(o1, l1, o2, l2)
    assert torch.equal(o1, mean)
    # at ordinary scores, the pieces merged are the whole, lse included; a row with no key yet weighs nothing
    g = torch.Generator().manual_seed(0)
    a, b, c = (torch.randn(2, n, 3, generator=g, dtype=torch.float64) for n in (5, 7, 7))
    S = a @ b.transpose(-1, -2) * 0.5
    o1, l1 = fd.block_forward(a, b[:, :3], c[:, :3], False, 0.5)
    o2, l2 = fd.block_forward(a, b[:, 3:], c[:, 3:], False, 0.5)
    fd._merge(o1, l1, o2, l2)
    assert torch.allclose(o1, torch.softmax(S, -1) @ c, atol=1e-14) and torch.allclose(l1, torch.logsumexp(S, -1))
    o0, l0 = torch.zeros_like(o2), torch.full_like(l2, float("-inf"))
    fd._merge(o0, l0, o2, l2)
    assert torch.equal(o0, o2) and torch.equal(l0, l2)
