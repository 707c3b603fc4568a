"""Hostile tests of split-KV decoding, the paged KV cache and variable-length batches: the inputs the other
tests do not try (option names that clash with internal keywords, ragged tables, bools among integers,
lengths past 32 bits, empty batches, dropout across sequences, packed GQA's thread blocks), and the
simulator against the float64 oracle and the closed form on shared, repeated and tiny or oversized pages."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from reference import variant_grads, variant_ref

from flashref import decoding, flash2, iomodel
from flashref.memory import SRAMOverflowError

PAGED_VALID = "valid options are alibi_slopes, causal, dtype_bytes, scale, softcap, sram_size, window$"


def _paged_batch(B=2, H=1, Nq=1, d=2, ps=2, num_pages=3, seed=0):
    r = np.random.default_rng(seed)
    Kp, Vp = r.standard_normal((num_pages, H, ps, d)), r.standard_normal((num_pages, H, ps, d))
    return r.standard_normal((B, H, Nq, d)), Kp, Vp


def _gather(Xp, table, n):
    """Sequence keys (H, n, d) of the pages ``table`` (one row of the block table)."""
    pages = table[: -(-n // Xp.shape[2])]
    return Xp[pages].transpose(1, 0, 2, 3).reshape(Xp.shape[1], len(pages) * Xp.shape[2], Xp.shape[3])[:, :n]


# ----------------------------------------------------------------- option names


@pytest.mark.parametrize("name", ["where", "Nq", "Nk", "d", "H", "page_size"])
def test_paged_option_named_like_an_internal_argument_is_refused_as_unknown(name):
    """paged_problem's own arguments are positional only: before, ``where=`` was silently taken as the
    error location by forward_paged, and Nq=, H=, ... raised Python's 'got multiple values' naming nothing."""
    Q, Kp, Vp = _paged_batch()
    bt = np.array([[0, 1], [1, 2]])
    with pytest.raises(TypeError, match=f"^decoding.forward_paged: unknown option '{name}'; {PAGED_VALID}"):
        decoding.forward_paged(Q, Kp, Vp, bt, [3, 1], **{name: 1})
    if name not in ("Nq", "d", "page_size"):  # predict_paged's own keywords
        with pytest.raises(TypeError, match=f"^iomodel.predict_paged: unknown option '{name}'; {PAGED_VALID}"):
            iomodel.predict_paged(Nq=1, d=2, heads=1, page_size=2, cache_seqlens=[3, 1], **{name: 1})


@pytest.mark.parametrize("name", ["where", "extra"])
@pytest.mark.parametrize("entry", ["decoding.forward", "flash2.forward", "flash2.backward", "standard.forward",
                                   "standard.backward", "flash1.forward", "flash1.backward"])
def test_an_option_named_like_from_arrays_keywords_is_unknown(name, entry):
    """Before: Problem.from_arrays() got multiple values for keyword argument 'where' (predict named it): its
    ``where`` and ``extra`` are positional only now, as from_shapes' are."""
    import importlib
    import inspect

    Q, K = np.ones((1, 2)), np.ones((3, 2))
    module, fn = entry.split(".")
    f = getattr(importlib.import_module(f"flashref.{module}"), fn)
    f = getattr(f, "__wrapped__", f)  # the overflow guard's wrapper: the function's own positional arguments
    args = (Q, K, K) + (np.zeros(1),) * (len(inspect.signature(f).parameters) - 4)  # all but **opts
    with pytest.raises(TypeError, match=f"^{entry}: unknown option '{name}'; valid options are "):
        f(*args, **{name: 1})
    with pytest.raises(TypeError, match=f"unknown option '{name}'"):
        iomodel.predict(module if module != "flash1" else "flash1", fn, Nq=1, Nk=3, d=2, **{name: 1})


# ----------------------------------------------------------------- the block table and the lengths


@pytest.mark.parametrize("table, lens, msg", [
    ([[0, 1], [2]], [1, 1], r"^block_table: expected integers of shape \(B=2, max_pages\), got a ragged"),
    (np.array([[0, 1], [1, 2]]), [[1], [2, 3]], r"^cache_seqlens: expected integers of shape \(B=2,\), got a ragged"),
    ([[0, True], [1, 2]], [3, 3], r"^block_table: .* got a bool among them"),
    ([[0, 1], [np.True_, 2]], [3, 3], r"^block_table: .* got a bool among them"),
])
def test_ragged_tables_and_bools_among_page_ids_are_named(table, lens, msg):
    """Before: numpy's 'setting an array element with a sequence' (no name), and a True among the page ids of a
    list was read as page 1 (bools are refused where integers are expected, as in cache_seqlens)."""
    Q, Kp, Vp = _paged_batch()
    with pytest.raises(TypeError, match=msg):
        decoding.forward_paged(Q, Kp, Vp, table, lens)


def test_a_block_table_of_lists_and_numpy_integers_is_taken():
    Q, Kp, Vp = _paged_batch()
    ref = decoding.forward_paged(Q, Kp, Vp, np.array([[0, 1], [1, 2]]), np.array([3, 4]))
    res = decoding.forward_paged(Q, Kp, Vp, [(0, 1), [1, np.int8(2)]], (3, np.uint8(4)))
    assert np.array_equal(res.O, ref.O) and res.io.total == ref.io.total


@pytest.mark.parametrize("lens", [[1, 2**31], np.array([2**63 + 1], np.uint64)])
def test_cache_lengths_past_32_bits_are_named_by_the_closed_form_and_the_simulator(lens):
    """Before: predict_paged counted 2**31 keys (a sequence the simulator's 32-bit indices cannot hold) and
    raised a bare 'OverflowError: Python int too large to convert to C long' past int64."""
    b = len(lens) - 1
    msg = rf"^cache_seqlens\[{b}\]: expected a length of at most {2**31 - 1}"
    with pytest.raises(ValueError, match=msg):
        iomodel.predict_paged(Nq=1, d=2, heads=1, page_size=4, cache_seqlens=lens)
    Q, Kp, Vp = _paged_batch(B=len(lens))
    with pytest.raises(ValueError, match=msg):
        decoding.forward_paged(Q, Kp, Vp, np.zeros((len(lens), 1), int), lens)
    assert iomodel.predict_paged(Nq=1, d=2, heads=1, page_size=4, cache_seqlens=[2**31 - 1]).total > 0


# ----------------------------------------------------------------- split-KV decoding's empty batch


def test_an_empty_batch_launches_no_work_item():
    """Before: work_items was 1 (max(heads, 1)) for a batch of no head, in the simulator and the closed form."""
    Q, K = np.zeros((0, 1, 4)), np.zeros((0, 9, 4))
    res = decoding.forward(Q, K, K, num_splits=3, sms=8)
    assert res.O.shape == (0, 1, 4) and res.io.total == 0
    assert res.work_items == 0 == iomodel.decoding.work_items(Nq=1, Nk=9, d=4, heads=0, num_splits=3)
    assert res.parallelism == {"work_items": 0, "sms": 8, "waves": 0, "busy_sms_first_wave": 0, "utilisation": 0.0}
    # a batch that has heads is unchanged
    one = decoding.forward(np.zeros((2, 1, 4)), np.zeros((2, 9, 4)), np.zeros((2, 9, 4)), num_splits=3, sms=8)
    assert one.work_items == 6 == iomodel.decoding.work_items(Nq=1, Nk=9, d=4, heads=2, num_splits=3)
    assert one.parallelism["waves"] == 1


# ----------------------------------------------------------------- varlen


def test_varlen_dropout_is_its_sequences_run_one_by_one_and_the_backward_regenerates_it():
    """With dropout, sequence b draws the mask forward draws for it alone (the same seed, its own rows and columns
    from 0): the same sequence twice gets the same output, and the backward regenerates each mask."""
    r = np.random.default_rng(3)
    q, k, v = r.standard_normal((2, 5, 3)), r.standard_normal((2, 6, 3)), r.standard_normal((2, 6, 3))
    Q, K, V = (np.concatenate([x, x], axis=1) for x in (q, k, v))  # the same sequence twice
    cq, ck = np.array([0, 5, 10]), np.array([0, 6, 12])
    o = dict(dropout_p=0.5, seed=11, causal=True)
    fwd = flash2.forward_varlen(Q, K, V, cq, ck, **o)
    alone = flash2.forward(q, k, v, **o).O
    assert np.array_equal(fwd.O[:, :5], alone) and np.array_equal(fwd.O[:, 5:], alone)
    assert not np.allclose(alone, flash2.forward(q, k, v, causal=True).O)  # the mask is there
    dO = r.standard_normal(Q.shape)
    bwd = flash2.backward_varlen(Q, K, V, fwd.O, dO, fwd.L, cq, ck, **o)
    for b in range(2):
        qs, ks = slice(cq[b], cq[b + 1]), slice(ck[b], ck[b + 1])
        assert np.allclose(fwd.O[:, qs], variant_ref(q, k, v, **o)[0], rtol=0, atol=1e-12)
        for got, want in zip((bwd.dQ[:, qs], bwd.dK[:, ks], bwd.dV[:, ks]), variant_grads(q, k, v, dO[:, qs], **o)):
            assert np.allclose(got, want, rtol=0, atol=1e-12)
    with pytest.raises(TypeError, match="seed: expected an integer, got True"):
        flash2.forward_varlen(Q, K, V, cq, ck, dropout_p=0.5, seed=True)


@pytest.mark.parametrize("bs", [(4, 3), (2, 3), (1, 2)])
def test_varlen_work_items_count_one_thread_block_per_kv_head_with_packed_gqa(bs):
    """Before: Hq·Tr_b per sequence with packed GQA too, g times the thread blocks (one per (K/V head, block))."""
    r = np.random.default_rng(0)
    Hq, Hkv, d = 4, 2, 3
    cq, ck = np.array([0, 5, 12]), np.array([0, 6, 9])
    Q, K = r.standard_normal((Hq, 12, d)), r.standard_normal((Hkv, 9, d))
    blocks = sum(-(-int(n) // bs[0]) for n in np.diff(cq))
    unpacked = flash2.forward_varlen(Q, K, K, cq, ck, enable_gqa=True, block_sizes=bs)
    packed = flash2.forward_varlen(Q, K, K, cq, ck, enable_gqa=True, gqa_packing=True, block_sizes=bs)
    assert unpacked.work_items == Hq * blocks and packed.work_items == Hkv * blocks
    assert np.allclose(packed.O, unpacked.O, rtol=0, atol=1e-12)
    # a group of one: nothing is packed, K/V heads are the query heads
    same = flash2.forward_varlen(Q, Q, Q, cq, cq, enable_gqa=True, gqa_packing=True, block_sizes=bs)
    assert same.work_items == Hq * blocks


# ----------------------------------------------------------------- paged: oracle and closed form


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_paged_on_any_page_size_with_shared_repeated_pages_is_the_oracle_and_counted(data):
    """Page size 1 up to larger than every sequence, pages shared between sequences and repeated within one,
    zero lengths, empty batches, small SRAM (Br < Nq) and every variant the paged entry point takes."""
    B, H, Nq, d = (data.draw(st.integers(lo, hi)) for lo, hi in ((0, 3), (0, 2), (1, 4), (1, 3)))
    ps, max_pages, num_pages = (data.draw(st.integers(1, hi)) for hi in (6, 3, 4))
    r = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    lens = np.array([data.draw(st.integers(0, max_pages * ps)) for _ in range(B)], dtype=np.int64)
    table = r.integers(0, num_pages, size=(B, max_pages))  # few pages: shared and repeated
    o = {}
    if data.draw(st.booleans()):
        o["causal"] = True
    if data.draw(st.booleans()):
        o["window"] = (data.draw(st.integers(-1, 3)), data.draw(st.integers(-1, 3)))
    if data.draw(st.booleans()):
        o["softcap"] = 1.5
    if data.draw(st.booleans()):
        o["alibi_slopes"] = r.random((B, H)) if data.draw(st.booleans()) else r.random(H)
    sram = {"sram_size": data.draw(st.integers(40, 120))} if data.draw(st.booleans()) else {}
    Q = r.standard_normal((B, H, Nq, d))
    Kp, Vp = r.standard_normal((num_pages, H, ps, d)), r.standard_normal((num_pages, H, ps, d))
    po = {k: (True if k == "alibi_slopes" else v) for k, v in {**o, **sram}.items()}
    try:
        res = decoding.forward_paged(Q, Kp, Vp, table, lens, **o, **sram)
    except Exception as e:  # only the SRAM may refuse, and the closed form refuses it alike
        assert type(e).__name__ == "SRAMOverflowError"
        with pytest.raises(type(e), match="more than sram_size"):
            iomodel.predict_paged(Nq=Nq, d=d, heads=H, page_size=ps, cache_seqlens=lens, **po)
        return
    pred = iomodel.predict_paged(Nq=Nq, d=d, heads=H, page_size=ps, cache_seqlens=lens, **po)
    assert (res.io.reads, res.io.writes) == (pred.reads, pred.writes) and res.io.by_line == pred.by_line
    assert res.O.shape == Q.shape and res.L.shape == Q.shape[:-1] and not np.isnan(res.L).any()
    for b in range(B):
        n = int(lens[b])
        if n == 0:
            assert np.all(res.O[b] == 0) and np.all(res.L[b] == -np.inf)
            continue
        ob = dict(o)
        if "alibi_slopes" in o:
            ob["alibi_slopes"] = np.broadcast_to(o["alibi_slopes"], (B, H))[b]
        O_ref, _, lse = variant_ref(Q[b], _gather(Kp, table[b], n), _gather(Vp, table[b], n), **ob)
        assert np.allclose(res.O[b], O_ref, rtol=0, atol=1e-12)
        assert np.array_equal(np.isfinite(res.L[b]), np.isfinite(lse))
        seen = np.isfinite(lse)
        assert np.allclose(res.L[b][seen], lse[seen], rtol=0, atol=1e-12)


@pytest.mark.parametrize("name", ["Nq", "Nk"])
def test_predict_varlen_names_a_length_given_as_an_option(name):
    """Before: _predict() got multiple values for keyword argument 'Nq'."""
    with pytest.raises(TypeError, match=rf"^iomodel.predict_varlen\('forward'\): {name} is each sequence's length"):
        iomodel.predict_varlen("forward", cu_seqlens_q=[0, 3], cu_seqlens_k=[0, 4], d=2, **{name: 3})


@pytest.mark.parametrize("H,Nq,Nk,d", [(2 ** 40, 2 ** 20, 2 ** 20, 64), (2 ** 30, 2 ** 31 - 1, 2 ** 31 - 1, 256)])
def test_more_work_items_than_2_53_is_one_split_and_counted_exactly(H, Nq, Nk, d):
    """heads × query blocks past 2**53 had been refused by the split heuristic, naming "items", a count the caller
    never passed. A full wave takes one split whatever its size: the count is the one head's, H times, exactly."""
    many = iomodel.predict("decoding", "forward", Nq=Nq, Nk=Nk, d=d, heads=H)
    one = iomodel.predict("decoding", "forward", Nq=Nq, Nk=Nk, d=d, heads=1, num_splits=1)
    assert (many.reads, many.writes) == (H * one.reads, H * one.writes)


@given(Nk=st.integers(2, 40), S=st.integers(1, 8), Bc=st.integers(1, 48), d=st.integers(1, 6))
@settings(max_examples=60, deadline=None)
def test_explicit_block_sizes_are_checked_with_the_key_tile_a_split_holds(Nk, S, Bc, d):
    """A split holds at most its own keys: with Bc = 8 and 4 splits of 2 keys, a run holds 31 elements, and the
    same call with sram_size=31 was refused as needing 85 (Bc clipped to Nk alone). Now the measured peak is
    accepted and one element less refused, by the simulator, predict and grid alike."""
    S = min(S, Nk)
    Q, K = np.ones((1, 2, d)), np.ones((1, Nk, d))
    opts = dict(block_sizes=(1, Bc), num_splits=S)
    peak = decoding.forward(Q, K, K, **opts).io.peak_sram
    assert peak == decoding.footprint(1, min(Bc, Nk, -(-Nk // S)), d)
    ran = decoding.forward(Q, K, K, sram_size=peak, **opts)
    assert iomodel.predict("decoding", "forward", Nq=2, Nk=Nk, d=d, sram_size=peak, **opts).total == ran.io.total
    assert iomodel.grid("decoding", "forward", Nq=2, Nk=Nk, d=d, sram_size=peak, **opts).Bc == min(Bc, Nk)
    for f in (lambda: decoding.forward(Q, K, K, sram_size=peak - 1, **opts),
              lambda: iomodel.predict("decoding", "forward", Nq=2, Nk=Nk, d=d, sram_size=peak - 1, **opts),
              lambda: iomodel.grid("decoding", "forward", Nq=2, Nk=Nk, d=d, sram_size=peak - 1, **opts)):
        with pytest.raises(SRAMOverflowError, match=f"footprint of {peak} elements"):
            f()
