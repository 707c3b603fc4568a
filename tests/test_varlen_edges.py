"""Variable-length batches at their edges: empty sequences (two equal offsets in ``cu_seqlens``, which
flash-attn's varlen kernels take) and ALiBi slopes per sequence, ``(B, H)`` (flash-attn's
``(batch_size, nheads)``).

A varlen batch is its sequences run one by one, so each test states the edge against ``flash2.forward`` /
``backward`` on every non-empty sequence alone, and against ``iomodel.predict_varlen``:

* no queries and no keys: no row, no work item, no IO;
* keys but no queries: no row of O, L or dQ, no work item and no IO in the forward; in the backward its keys'
  dK, dV are 0 and are written (Alg.2 l.18, as any column block no query sees, and as flash-attn's kernel does);
* queries but no keys: refused, naming ``cu_seqlens_k``, as ``flash2.forward`` refuses Nk = 0.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from reference import variant_grads, variant_ref

from flashref import flash2, iomodel
from flashref.memory import IOReport, SRAMOverflowError


@st.composite
def varlen_batches(draw):
    """A packed batch whose sequences are each full, without queries, or without anything; GQA, the variants."""
    B = draw(st.integers(1, 4))
    lens = []
    for _ in range(B):
        kind = draw(st.sampled_from(["full", "no queries", "empty"]))
        nq = draw(st.integers(1, 6)) if kind == "full" else 0
        nk = draw(st.integers(1, 6)) if kind != "empty" else 0
        lens.append((nq, nk))
    Hkv, g, d = draw(st.integers(0, 2)), draw(st.sampled_from([1, 2])), draw(st.integers(1, 3))
    Hq = Hkv * g
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    cq = np.concatenate([[0], np.cumsum([nq for nq, _ in lens])]).astype(np.int64)
    ck = np.concatenate([[0], np.cumsum([nk for _, nk in lens])]).astype(np.int64)
    Q, dO = rng.standard_normal((Hq, cq[-1], d)), rng.standard_normal((Hq, cq[-1], d))
    K, V = rng.standard_normal((Hkv, ck[-1], d)), rng.standard_normal((Hkv, ck[-1], d))
    o = {"block_sizes": (draw(st.integers(1, 3)), draw(st.integers(1, 4)))}
    if g > 1:
        o["enable_gqa"] = True
        o["gqa_packing"] = draw(st.booleans())
    if draw(st.booleans()):
        o["causal"] = True
    if draw(st.booleans()):
        o["window"] = (draw(st.integers(-1, 2)), draw(st.integers(-1, 2)))
    if draw(st.booleans()):
        o["softcap"] = 1.5
    slopes = draw(st.sampled_from([None, "per head", "per sequence"]))
    if slopes is not None:
        o["alibi_slopes"] = rng.random(Hq) if slopes == "per head" else rng.random((B, Hq))
    return Q, K, V, dO, cq, ck, o


def _alone(o: dict, b: int) -> dict:
    """Sequence b's options when run alone: its row of (B, H) slopes."""
    S = o.get("alibi_slopes")
    return o if S is None or S.ndim == 1 else dict(o, alibi_slopes=S[b])


def _lines(io) -> tuple:
    return io.reads, io.writes, io.by_line


def _add_line(lines: dict, line: str, reads: int = 0, writes: int = 0) -> None:
    r, w = lines.get(line, (0, 0))
    lines[line] = (r + reads, w + writes)


@settings(max_examples=40, deadline=None)
@given(varlen_batches())
def test_a_batch_with_empty_sequences_is_its_other_sequences_run_alone(batch):
    """Outputs, L, gradients, summed IO and work items: those of the sequences that have queries, run alone, plus
    (backward) the zero dK, dV written for keys that no query sees."""
    Q, K, V, dO, cq, ck, o = batch
    (Hq, _, d), Hkv = Q.shape, K.shape[0]
    fwd = flash2.forward_varlen(Q, K, V, cq, ck, **o)
    bwd = flash2.backward_varlen(Q, K, V, fwd.O, dO, fwd.L, cq, ck, **o)
    assert fwd.O.shape == Q.shape and fwd.L.shape == Q.shape[:-1]
    assert bwd.dQ.shape == Q.shape and bwd.dK.shape == K.shape and bwd.dV.shape == V.shape
    assert not any(np.isnan(x).any() for x in (fwd.O, fwd.L, bwd.dQ, bwd.dK, bwd.dV))
    assert fwd.seqlens == [(int(cq[b + 1] - cq[b]), int(ck[b + 1] - ck[b])) for b in range(cq.size - 1)]
    f_io, b_io, items = IOReport(), IOReport(), 0
    unseen = {}  # the backward's lines for keys no query sees
    packed = o.get("gqa_packing", False) and Hq > Hkv
    for b in range(cq.size - 1):
        q, k = slice(cq[b], cq[b + 1]), slice(ck[b], ck[b + 1])
        nk = int(k.stop - k.start)
        if q.start == q.stop:
            assert np.all(bwd.dK[:, k] == 0) and np.all(bwd.dV[:, k] == 0)
            if nk == 0:
                continue  # nothing at all: no line
            # dK_j = dV_j = 0 written once per loop head (K/V heads when packed); unpacked GQA then sums the groups
            _add_line(unseen, "Alg.2 l.18", writes=2 * (Hkv if packed else Hq) * nk * d)
            if Hq > Hkv and not packed:
                _add_line(unseen, "GQA: sum dK_h, dV_h", reads=2 * Hq * nk * d, writes=2 * Hkv * nk * d)
            continue
        ob = _alone(o, b)
        alone = flash2.forward(Q[:, q], K[:, k], V[:, k], **ob)
        back = flash2.backward(Q[:, q], K[:, k], V[:, k], alone.O, dO[:, q], alone.L, **ob)
        assert np.array_equal(fwd.O[:, q], alone.O) and np.array_equal(fwd.L[:, q], alone.L)
        for got, want in ((bwd.dQ[:, q], back.dQ), (bwd.dK[:, k], back.dK), (bwd.dV[:, k], back.dV)):
            assert np.array_equal(got, want)
        f_io, b_io = f_io + alone.io, b_io + back.io
        items += (Hkv if packed else Hq) * -(-(q.stop - q.start) // alone.block_sizes[0])
    assert fwd.work_items == items
    assert _lines(fwd.io) == _lines(f_io)
    want = dict(b_io.by_line)
    for line, (r, w) in unseen.items():
        _add_line(want, line, r, w)
    assert bwd.io.by_line == want
    assert (bwd.io.reads, bwd.io.writes) == (sum(r for r, _ in want.values()), sum(w for _, w in want.values()))
    # the closed form counts the same, from the offsets alone
    po = dict(o, alibi_slopes=True) if "alibi_slopes" in o else o
    kv = {"kv_heads": Hkv} if Hq != Hkv else {}
    for res, direction in ((fwd, "forward"), (bwd, "backward")):
        pred = iomodel.predict_varlen(direction, cu_seqlens_q=cq, cu_seqlens_k=ck, d=d, heads=Hq, **po, **kv)
        assert _lines(res.io) == _lines(pred)


def test_alibi_slopes_per_sequence_give_sequence_b_row_b():
    """(B, H) slopes: sequence b uses row b, against the float64 oracle and forward alone; (H,) is every
    sequence's, as are (1, H) and its rows repeated; the closed form takes the (B, H) array too."""
    r = np.random.default_rng(7)
    H, d = 2, 3
    cq, ck = np.array([0, 3, 3, 7]), np.array([0, 4, 9, 12])  # sequence 1 has keys but no queries
    Q, dO, K, V = (r.standard_normal((H, n, d)) for n in (7, 7, 12, 12))
    S = r.random((3, H))
    o = dict(causal=True, block_sizes=(2, 3))
    fwd = flash2.forward_varlen(Q, K, V, cq, ck, alibi_slopes=S, **o)
    bwd = flash2.backward_varlen(Q, K, V, fwd.O, dO, fwd.L, cq, ck, alibi_slopes=S, **o)
    for b in (0, 2):
        q, k = slice(cq[b], cq[b + 1]), slice(ck[b], ck[b + 1])
        assert np.array_equal(fwd.O[:, q], flash2.forward(Q[:, q], K[:, k], V[:, k], alibi_slopes=S[b], **o).O)
        O_ref, _, lse = variant_ref(Q[:, q], K[:, k], V[:, k], alibi_slopes=S[b], **o)
        assert np.allclose(fwd.O[:, q], O_ref, rtol=0, atol=1e-12) and np.allclose(fwd.L[:, q], lse, rtol=0, atol=1e-12)
        refs = variant_grads(Q[:, q], K[:, k], V[:, k], dO[:, q], alibi_slopes=S[b], **o)
        for got, want in zip((bwd.dQ[:, q], bwd.dK[:, k], bwd.dV[:, k]), refs):
            assert np.allclose(got, want, rtol=0, atol=1e-12)
    assert np.all(bwd.dK[:, 4:9] == 0) and np.all(bwd.dV[:, 4:9] == 0)
    # the rows differ, so the outputs do: row b is used, not row 0
    assert not np.allclose(fwd.O, flash2.forward_varlen(Q, K, V, cq, ck, alibi_slopes=S[0], **o).O)
    # (H,) is every sequence's: the same as (1, H), and as (B, H) with that row repeated
    per_head = flash2.forward_varlen(Q, K, V, cq, ck, alibi_slopes=S[0], **o).O
    for same in (S[:1], np.tile(S[0], (3, 1))):
        assert np.array_equal(flash2.forward_varlen(Q, K, V, cq, ck, alibi_slopes=same, **o).O, per_head)
    for res, direction in ((fwd, "forward"), (bwd, "backward")):
        for slopes in (S, True):
            pred = iomodel.predict_varlen(direction, cu_seqlens_q=cq, cu_seqlens_k=ck, d=d, heads=H,
                                          alibi_slopes=slopes, **o)
            assert _lines(res.io) == _lines(pred)


def test_slopes_of_length_H_are_per_head_when_B_equals_H():
    """With B = H, a 1-D (H,) array is still one slope per head (broadcast along the last axis), as
    flash-attn reads a 1-D ``alibi_slopes``: head h of every sequence uses slope h."""
    r = np.random.default_rng(8)
    cu = np.array([0, 3, 5])
    Q = r.standard_normal((2, 5, 2))
    s = np.array([0.2, 1.5])
    got = flash2.forward_varlen(Q, Q, Q, cu, cu, alibi_slopes=s).O
    assert np.array_equal(got, flash2.forward_varlen(Q, Q, Q, cu, cu, alibi_slopes=np.stack([s, s])).O)


@pytest.mark.parametrize("shape", [(4, 2), (2, 2, 1), (3,), (2, 3)])
def test_slopes_of_another_shape_are_refused_naming_alibi_slopes(shape):
    """B = 3 sequences of H = 2 heads: (B+1, H), an extra axis, (H+1,), (B, H+1) are refused by the simulator
    (both directions) and the closed form, with the shapes that are taken."""
    Q, cu, bad = np.zeros((2, 6, 2)), np.array([0, 2, 2, 6]), np.ones(shape)
    msg = (r"^alibi_slopes: expected one slope per head, \(H,\) = \(2,\), "
           r"or one per sequence and head, \(B, H\) = \(3, 2\)")
    with pytest.raises(ValueError, match=msg):
        flash2.forward_varlen(Q, Q, Q, cu, cu, alibi_slopes=bad)
    with pytest.raises(ValueError, match=msg):
        flash2.backward_varlen(Q, Q, Q, Q, Q, Q[..., 0], cu, cu, alibi_slopes=bad)
    for direction in ("forward", "backward"):
        with pytest.raises(ValueError, match=msg):
            iomodel.predict_varlen(direction, cu_seqlens_q=cu, cu_seqlens_k=cu, d=2, heads=2, alibi_slopes=bad)
    with pytest.raises(TypeError, match="^alibi_slopes: expected a float array"):
        flash2.forward_varlen(Q, Q, Q, cu, cu, alibi_slopes=np.ones((3, 2), bool))
    with pytest.raises(ValueError, match="^alibi_slopes: contains NaN or inf"):
        flash2.forward_varlen(Q, Q, Q, cu, cu, alibi_slopes=np.full((3, 2), np.nan))


@pytest.mark.parametrize("bias_grad", [False, True])
def test_bias_grad_is_unknown_to_a_packed_batch_in_both(bias_grad):
    """A packed batch has no bias: backward_varlen refuses bias_grad as an unknown option, and predict_varlen took
    it (reads for False, a ValueError about the missing bias for True). Both refuse it alike now."""
    Q, cu = np.ones((2, 3, 4)), [0, 3]
    msg = r"unknown option 'bias_grad'; valid options are"
    with pytest.raises(TypeError, match="^flash2.backward_varlen: " + msg):
        flash2.backward_varlen(Q, Q, Q, Q, Q, Q[..., 0], cu, cu, bias_grad=bias_grad)
    with pytest.raises(TypeError, match=r"^iomodel.predict_varlen\('backward'\): " + msg):
        iomodel.predict_varlen("backward", cu_seqlens_q=cu, cu_seqlens_k=cu, d=4, heads=2, bias_grad=bias_grad)


def test_a_sequence_with_queries_but_no_keys_is_refused_naming_cu_seqlens_k():
    """Its rows would be a softmax over no score; flash2.forward refuses Nk = 0, and so does the batch."""
    Q, K = np.zeros((1, 5, 2)), np.zeros((1, 4, 2))
    cq, ck = np.array([0, 3, 5]), np.array([0, 4, 4])
    msg = r"^cu_seqlens_k: sequence 1 has 2 queries but no keys \(cu_seqlens_k\[1\] = cu_seqlens_k\[2\] = 4\)"
    with pytest.raises(ValueError, match=msg):
        flash2.forward_varlen(Q, K, K, cq, ck)
    with pytest.raises(ValueError, match=msg):
        flash2.backward_varlen(Q, K, K, Q, Q, Q[..., 0], cq, ck)
    for direction in ("forward", "backward"):
        with pytest.raises(ValueError, match=msg):
            iomodel.predict_varlen(direction, cu_seqlens_q=cq, cu_seqlens_k=ck, d=2)
    with pytest.raises(ValueError, match="^K: expected non-empty Nk"):  # the rule it follows
        flash2.forward(Q, K[:, :0], K[:, :0])
    with pytest.raises(ValueError, match="^cu_seqlens_q: expected non-decreasing"):  # a negative length still is
        flash2.forward_varlen(Q, K, K, np.array([0, 3, 2, 5]), np.array([0, 2, 2, 4]))


def test_a_batch_of_empty_sequences_has_the_right_shapes_and_moves_nothing():
    """No sequence with a query: O (H, 0, d) and L (H, 0) in forward's dtype, no work item, no IO; keys without
    queries get zero dK, dV, written once; the closed form agrees, line by line."""
    H, d = 2, 3
    Q = np.zeros((H, 0, d), np.float32)
    K = np.random.default_rng(1).standard_normal((H, 5, d)).astype(np.float32)
    for cq, ck in (([0, 0, 0], [0, 0, 0]), ([0, 0, 0], [0, 5, 5])):
        Kb = K[:, : ck[-1]]
        fwd = flash2.forward_varlen(Q, Kb, Kb, cq, ck, causal=True)
        assert fwd.O.shape == (H, 0, d) and fwd.L.shape == (H, 0) and fwd.O.dtype == np.float32
        assert fwd.work_items == 0 and fwd.io.total == 0 and fwd.io.by_line == {} and fwd.flops.total == 0
        bwd = flash2.backward_varlen(Q, Kb, Kb, Q, Q, Q[..., 0], cq, ck, causal=True)
        assert bwd.dQ.shape == (H, 0, d) and bwd.dK.shape == Kb.shape and not bwd.dK.any() and not bwd.dV.any()
        assert bwd.dK.dtype == np.float32
        assert bwd.io.reads == 0 and bwd.io.writes == 2 * H * ck[-1] * d
        for res, direction in ((fwd, "forward"), (bwd, "backward")):
            pred = iomodel.predict_varlen(direction, cu_seqlens_q=cq, cu_seqlens_k=ck, d=d, heads=H, causal=True)
            assert _lines(res.io) == _lines(pred)
    # FP8 storage: forward's fp32 accumulators give O its dtype, as they would with a query
    assert flash2.forward_varlen(Q, K, K, [0, 0], [0, 5], fp8="e4m3").O.dtype == np.float32
    assert flash2.forward_varlen(Q.astype(np.float64), K, K, [0, 0], [0, 5]).O.dtype == np.float64


def test_a_batch_of_empty_sequences_still_refuses_what_a_sequence_would():
    """The per-sequence calls check options and values on their slices; with no query nothing runs, so the batch
    checks them once: an option's value, the head dimensions, the heads, NaN in keys no query sees."""
    H, d = 2, 3
    Q, K = np.zeros((H, 0, d)), np.zeros((H, 4, d))
    cq, ck = [0, 0], [0, 4]
    with pytest.raises(TypeError, match="^causal: expected True or False"):
        flash2.forward_varlen(Q, K, K, cq, ck, causal="yes")
    with pytest.raises(ValueError, match="^block_sizes"):
        flash2.backward_varlen(Q, K, K, Q, Q, Q[..., 0], cq, ck, block_sizes=(0, 2))
    with pytest.raises(ValueError, match="^K: head dimension 4 does not match Q's 3"):
        flash2.forward_varlen(Q, np.zeros((H, 4, 4)), np.zeros((H, 4, 4)), cq, ck)
    with pytest.raises(ValueError, match=r"^K: leading \(batch, head\) axes \(3,\) do not match Q's \(2,\)"):
        flash2.forward_varlen(Q, np.zeros((3, 4, d)), np.zeros((3, 4, d)), cq, ck)
    Kn = K.copy()
    Kn[0, 2, 1] = np.nan
    with pytest.raises(ValueError, match="^K: contains NaN or inf"):
        flash2.backward_varlen(Q, Kn, K, Q, Q, Q[..., 0], cq, ck)
    with pytest.raises(ValueError, match="^fp8: expected None or one of"):
        flash2.forward_varlen(Q, K, K, cq, ck, fp8="e9")
    with pytest.raises(ValueError, match="^softcap: not supported with the low-precision options"):
        flash2.forward_varlen(Q, K, K, cq, ck, fp8="e4m3", softcap=2.0)
    for direction in ("forward", "backward"):
        with pytest.raises(TypeError, match="^causal: expected True or False"):
            iomodel.predict_varlen(direction, cu_seqlens_q=cq, cu_seqlens_k=ck, d=d, heads=H, causal="yes")
    # the zero dK_j, dV_j are written per column block of the backward's Bc: blocks that do not fit are refused
    tight = dict(block_sizes=(1, 4), sram_size=20)
    with pytest.raises(SRAMOverflowError, match="more than sram_size=20"):
        flash2.backward_varlen(Q, K, K, Q, Q, Q[..., 0], cq, ck, **tight)
    with pytest.raises(SRAMOverflowError, match="more than sram_size=20"):
        iomodel.predict_varlen("backward", cu_seqlens_q=cq, cu_seqlens_k=ck, d=d, heads=H, **tight)
    with pytest.raises(ValueError, match="^direction: expected 'forward' or 'backward'"):
        iomodel.predict_varlen("sideways", cu_seqlens_q=cq, cu_seqlens_k=ck, d=d)


def test_a_batch_of_no_sequences_is_an_empty_result():
    """B = 0 is ``cu_seqlens = [0]`` (B + 1 offsets): an empty result, no IO, in the forward, the backward and the
    closed form; an empty offset array is still refused by name."""
    E = np.zeros((2, 0, 4))
    cu = np.array([0])
    fwd = flash2.forward_varlen(E, E, E, cu, cu)
    assert fwd.O.shape == (2, 0, 4) and fwd.L.shape == (2, 0) and fwd.io.total == 0
    bwd = flash2.backward_varlen(E, E, E, fwd.O, E, fwd.L, cu, cu)
    assert bwd.dQ.shape == bwd.dK.shape == bwd.dV.shape == (2, 0, 4) and bwd.io.total == 0
    for direction in ("forward", "backward"):
        p = iomodel.predict_varlen(direction, cu_seqlens_q=[0], cu_seqlens_k=[0], d=4, heads=2)
        assert (p.reads, p.writes) == (0, 0)
    with pytest.raises(TypeError, match="cu_seqlens_q"):
        flash2.forward_varlen(E, E, E, np.array([], dtype=np.int64), cu)
