"""Variable-length batches (``flash2.forward_varlen``), the paged KV cache (``decoding.forward_paged``),
and the variants against PyTorch's own: SDPA (``enable_gqa``, float ``attn_mask``), FlexAttention
(``score_mod``/``mask_mod``, forward: its CPU backward is not implemented in torch 2.13), and a
small model with GQA and a sliding window training on the torch front."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from reference import variant_grads, variant_ref

from flashref import decoding, flash2, iomodel
from flashref.functional import scaled_dot_product_attention as ref_sdpa


def close(ours, ref, tol=1e-9):
    ours, ref = np.asarray(ours), np.asarray(ref)
    assert ours.shape == ref.shape and np.all(np.isfinite(ours))
    assert np.max(np.abs(ours - ref), initial=0.0) <= tol * (1.0 + np.max(np.abs(ref), initial=0.0))


# ----------------------------------------------------------------- varlen


@settings(max_examples=25)
@given(st.lists(st.tuples(st.integers(1, 9), st.integers(1, 9)), min_size=1, max_size=4), st.integers(0, 2**31 - 1),
       st.booleans(), st.sampled_from([None, (2, 0), (1, 3)]), st.sampled_from([None, 2.0]))
def test_varlen_is_each_sequence_alone_and_counts_their_sum(lens, seed, causal, window, softcap):
    r = np.random.default_rng(seed)
    cq = np.concatenate([[0], np.cumsum([a for a, _ in lens])])
    ck = np.concatenate([[0], np.cumsum([b for _, b in lens])])
    H, d = 2, 3
    Q, dO = r.standard_normal((H, cq[-1], d)), r.standard_normal((H, cq[-1], d))
    K, V = r.standard_normal((H, ck[-1], d)), r.standard_normal((H, ck[-1], d))
    o = dict(causal=causal, window=window, softcap=softcap, alibi_slopes=np.array([0.5, 0.1]), block_sizes=(2, 3))
    fwd = flash2.forward_varlen(Q, K, V, cq, ck, **o)
    bwd = flash2.backward_varlen(Q, K, V, fwd.O, dO, fwd.L, cq, ck, **o)
    for b in range(len(lens)):
        q, k = slice(cq[b], cq[b + 1]), slice(ck[b], ck[b + 1])
        close(fwd.O[:, q], variant_ref(Q[:, q], K[:, k], V[:, k], **o)[0])
        dQ, dK, dV = variant_grads(Q[:, q], K[:, k], V[:, k], dO[:, q], **o)
        close(bwd.dQ[:, q], dQ)
        close(bwd.dK[:, k], dK)
        close(bwd.dV[:, k], dV)
    so = dict(o, alibi_slopes=True)
    for res, direction in ((fwd, "forward"), (bwd, "backward")):
        pred = iomodel.predict_varlen(direction, cu_seqlens_q=cq, cu_seqlens_k=ck, d=d, heads=H, **so)
        assert (res.io.reads, res.io.writes) == (pred.reads, pred.writes) and res.io.by_line == pred.by_line


def test_varlen_bad_cu_seqlens_are_named():
    Q = np.zeros((1, 6, 2))
    with pytest.raises(ValueError, match="cu_seqlens_q: expected non-decreasing"):
        flash2.forward_varlen(Q, Q, Q, np.array([0, 4, 2, 6]), np.array([0, 2, 4, 6]))
    with pytest.raises(ValueError, match="cu_seqlens_k: expected to end at the total length 6"):
        flash2.forward_varlen(Q, Q, Q, np.array([0, 6]), np.array([0, 5]))
    with pytest.raises(ValueError, match="cu_seqlens_q: expected to start at 0"):
        flash2.forward_varlen(Q, Q, Q, np.array([1, 6]), np.array([0, 6]))
    with pytest.raises(TypeError, match="cu_seqlens_q: expected a 1-D integer array"):
        flash2.forward_varlen(Q, Q, Q, np.array([0.0, 6.0]), np.array([0, 6]))
    # a bool inside a list (numpy would make it an integer) is refused, as a bool array is
    with pytest.raises(TypeError, match="cu_seqlens_q: .* a bool among them"):
        flash2.forward_varlen(Q[:, :1], Q[:, :1], Q[:, :1], [0, True], [0, 1])


def test_paged_lengths_and_page_size_take_numpy_integers_but_not_bools():
    """A numpy integer page_size is counted as the int (a uint8's arithmetic would wrap past 255); a bool among
    the cache lengths of a list is refused by the simulator and the closed form alike."""
    kw = dict(Nq=1, d=4, heads=1, cache_seqlens=[1000])
    as_int = iomodel.predict_paged(page_size=200, **kw)
    assert iomodel.predict_paged(page_size=np.uint8(200), **kw).reads == as_int.reads
    assert type(iomodel.predict_paged(page_size=np.int64(200), **kw).reads) is int
    with pytest.raises(TypeError, match=r"cache_seqlens\[0\]: expected a non-negative integer, got True"):
        iomodel.predict_paged(Nq=1, d=4, heads=1, page_size=3, cache_seqlens=[True, 6])
    Q, Kp, Vp, bt, _ = _paged(4)
    with pytest.raises(TypeError, match=r"cache_seqlens\[0\]: expected a non-negative integer, got True"):
        decoding.forward_paged(Q, Kp, Vp, bt, [True] + [1] * (Q.shape[0] - 1))


@pytest.mark.parametrize("name", ["mask", "bias"])
def test_predict_varlen_refuses_a_mask_or_bias_as_forward_varlen_does(name):
    Q, cu = np.zeros((1, 6, 2)), np.array([0, 2, 6])
    value = np.ones((6, 6), bool) if name == "mask" else np.zeros((6, 6))
    msg = f"{name} is not supported with variable-length batches"
    with pytest.raises(ValueError, match=msg):
        flash2.forward_varlen(Q, Q, Q, cu, cu, **{name: value})
    for direction in ("forward", "backward"):
        with pytest.raises(ValueError, match=msg):
            iomodel.predict_varlen(direction, cu_seqlens_q=cu, cu_seqlens_k=cu, d=2, **{name: True})


def test_cu_seqlens_are_checked_by_name_whatever_their_integer_type():
    Q, ok = np.zeros((1, 6, 2)), np.array([0, 2, 4, 6])
    wraps = np.array([0, 4, 2, 6], np.uint64)  # unsigned: np.diff would wrap 2 - 4 to a huge positive
    with pytest.raises(ValueError, match="cu_seqlens_q: expected non-decreasing"):
        flash2.forward_varlen(Q, Q, Q, wraps, ok)
    with pytest.raises(ValueError, match="cu_seqlens_k: expected non-decreasing"):
        iomodel.predict_varlen("forward", cu_seqlens_q=ok, cu_seqlens_k=wraps, d=2)
    for bad in (5, [[0, 6]], np.array([0.0, 6.0]), np.array([True, True])):
        for name in ("cu_seqlens_q", "cu_seqlens_k"):
            cus = {"cu_seqlens_q": np.array([0, 6]), "cu_seqlens_k": np.array([0, 6]), name: bad}
            with pytest.raises(TypeError, match=f"{name}: expected a 1-D integer array"):
                iomodel.predict_varlen("forward", d=2, **cus)
    # unsigned offsets that do increase are counted as their int64 copies
    u = np.array([0, 2, 6], np.uint32)
    res = flash2.forward_varlen(Q, Q, Q, u, u)
    pred = iomodel.predict_varlen("forward", cu_seqlens_q=u, cu_seqlens_k=u, d=2)
    assert (res.io.reads, res.io.writes) == (pred.reads, pred.writes)


# ----------------------------------------------------------------- paged KV cache


def _paged(seed, B=3, H=2, Nq=2, d=4, ps=4, num_pages=10, max_pages=4):
    r = np.random.default_rng(seed)
    lens = r.integers(0, max_pages * ps + 1, size=B)
    perm = r.permutation(num_pages * 4)[: B * max_pages] % num_pages
    bt = perm.reshape(B, max_pages)
    Kp, Vp = r.standard_normal((num_pages, H, ps, d)), r.standard_normal((num_pages, H, ps, d))
    return r.standard_normal((B, H, Nq, d)), Kp, Vp, bt, lens


def _gather(Kp, bt, b, n):
    ps = Kp.shape[2]
    pages = bt[b, : -(-n // ps)]
    return Kp[pages].transpose(1, 0, 2, 3).reshape(Kp.shape[1], -1, Kp.shape[3])[:, :n]


@settings(max_examples=25)
@given(st.integers(0, 2**31 - 1), st.sampled_from([{}, {"window": (3, 0)}, {"causal": True, "softcap": 2.0},
                                                   {"alibi_slopes": np.array([0.3, 0.7]), "window": (-1, 2)}]))
def test_paged_equals_decoding_on_the_gathered_cache_and_is_counted(seed, o):
    Q, Kp, Vp, bt, lens = _paged(seed)
    res = decoding.forward_paged(Q, Kp, Vp, bt, lens, **o)
    for b in range(Q.shape[0]):
        n = int(lens[b])
        if n == 0:
            assert np.all(res.O[b] == 0)  # an empty cache: nothing to attend to
            continue
        Kb, Vb = _gather(Kp, bt, b, n), _gather(Vp, bt, b, n)
        close(res.O[b], variant_ref(Q[b], Kb, Vb, **o)[0])
        close(res.O[b], decoding.forward(Q[b], Kb, Vb, num_splits=1, **o).O, 1e-12)  # every option it takes
    pred = iomodel.predict_paged(Nq=2, d=4, heads=2, page_size=4, cache_seqlens=lens,
                                 **{k: (True if k == "alibi_slopes" else v) for k, v in o.items()})
    assert (res.io.reads, res.io.writes) == (pred.reads, pred.writes) and res.io.by_line == pred.by_line
    assert res.wasted_slots == sum(-(-int(n) // 4) * 4 - int(n) for n in lens)


def test_paged_moves_the_contiguous_bytes_plus_the_block_table():
    Q, Kp, Vp, bt, _ = _paged(1)
    lens = np.array([13, 16, 5])
    paged = decoding.forward_paged(Q, Kp, Vp, bt, lens).io
    H, d = 2, 4
    table = sum(-(-int(n) // 4) for n in lens) * H  # one entry per page per head's work item
    assert paged.by_line["[paged] block_table"] == (table, 0)
    assert paged.by_line["[paged] load K_j, V_j"] == (2 * d * H * int(lens.sum()), 0)  # no wasted slot read


def test_paged_bad_input_is_named():
    Q, Kp, Vp, bt, _ = _paged(2)
    with pytest.raises(ValueError, match=r"block_table: entry \[0, 1\] = 10 is out of range"):
        bad = bt.copy()
        bad[0, 1] = 10
        decoding.forward_paged(Q, Kp, Vp, bad, np.array([8, 1, 1]))
    with pytest.raises(ValueError, match="cache_seqlens: sequence 1 has length 17, beyond its 4 pages"):
        decoding.forward_paged(Q, Kp, Vp, bt, np.array([1, 17, 1]))
    with pytest.raises(TypeError, match="unknown option 'mask'"):
        decoding.forward_paged(Q, Kp, Vp, bt, np.array([1, 1, 1]), mask=np.ones((2, 1), bool))


PAGED_VALID = "valid options are alibi_slopes, causal, dtype_bytes, scale, softcap, sram_size, window$"


@pytest.mark.parametrize("opt", [dict(mask=True), dict(dropout_p=0.5), dict(seed=3), dict(block_sizes=(1, 1))])
def test_predict_paged_takes_the_paged_options_only(opt):
    """The tile is the page: no mask, dropout or block sizes, for the simulator and the closed form alike."""
    Q, Kp, Vp, bt, lens = _paged(3)
    name = next(iter(opt))
    with pytest.raises(TypeError, match=f"unknown option '{name}'; {PAGED_VALID}"):
        decoding.forward_paged(Q, Kp, Vp, bt, lens, **opt)
    with pytest.raises(TypeError, match=f"unknown option '{name}'; {PAGED_VALID}"):
        iomodel.predict_paged(Nq=2, d=4, heads=2, page_size=4, cache_seqlens=lens, **opt)


@pytest.mark.parametrize("kw,exc,msg", [
    (dict(cache_seqlens=[-1]), ValueError, r"cache_seqlens\[0\]: expected a non-negative integer"),
    # the length that is not an integer is the one named (numpy would have made both floats)
    (dict(cache_seqlens=[3, 2.5]), TypeError, r"cache_seqlens\[1\]: expected a non-negative integer, got 2.5"),
    (dict(cache_seqlens=3), TypeError, r"cache_seqlens: expected integers of shape \(B,\)"),
    (dict(page_size=2.0), TypeError, "page_size: expected a positive integer"),
    (dict(page_size=0), ValueError, "page_size: expected a positive integer"),
    (dict(heads=-1), ValueError, "heads"),
    (dict(Nq=0), ValueError, "Nq"),
])
def test_predict_paged_checks_its_own_arguments(kw, exc, msg):
    with pytest.raises(exc, match=msg):
        iomodel.predict_paged(**{**dict(Nq=1, d=2, heads=2, page_size=2, cache_seqlens=[3]), **kw})


def test_forward_paged_refuses_negative_lengths_and_empty_pages():
    Q, Kp, Vp, bt, _ = _paged(4)
    with pytest.raises(ValueError, match=r"cache_seqlens\[1\]: expected a non-negative integer, got -1"):
        decoding.forward_paged(Q, Kp, Vp, bt, np.array([1, -1, 1]))
    empty = np.zeros(Kp.shape[:2] + (0,) + Kp.shape[3:])  # a zero page axis: pages of no slot
    with pytest.raises(ValueError, match="K_pages: expected pages of at least one slot"):
        decoding.forward_paged(Q, empty, empty, bt, np.zeros(3, int))


@pytest.mark.parametrize("seed", range(4))
def test_forward_paged_checks_only_the_slots_it_reads(seed):
    """NaN in a page no sequence reads, or in the slots past a sequence's length, changes nothing (a real cache holds
    whatever memory held there); NaN or inf in a slot a sequence reads is refused, naming the page and the sequence."""
    Q, Kp, Vp, bt, lens = _paged(seed)
    want = decoding.forward_paged(Q, Kp, Vp, bt, lens)
    ps = Kp.shape[2]
    read = np.zeros(Kp.shape[0], int)  # slots of each page that some sequence reads
    for b, n in enumerate(lens):
        for j, page in enumerate(bt[b, : -(-int(n) // ps)]):
            read[page] = max(read[page], min(ps, int(n) - j * ps))
    Kn, Vn = Kp.copy(), Vp.copy()
    for page, r in enumerate(read):
        Kn[page, :, r:] = Vn[page, :, r:] = np.nan
    got = decoding.forward_paged(Q, Kn, Vn, bt, lens)
    assert np.array_equal(got.O, want.O) and got.io.reads == want.io.reads
    for page in np.flatnonzero(read):
        for X, name in ((Kn, "K_pages"), (Vn, "V_pages")):
            bad = X.copy()
            bad[page, 1, read[page] - 1, 0] = np.inf
            with pytest.raises(ValueError, match=rf"{name}: contains NaN or inf in page {page}, .* which sequence"):
                decoding.forward_paged(Q, bad if name == "K_pages" else Kn, bad if name == "V_pages" else Vn, bt,
                                       lens)


@pytest.mark.parametrize("slopes,exc,msg", [
    (np.array([np.nan, 0.5]), ValueError, "alibi_slopes: contains NaN or inf"),
    (np.array([np.inf, 0.5]), ValueError, "alibi_slopes: contains NaN or inf"),
    (np.array([True, False]), TypeError, "alibi_slopes: expected a float array"),
    (np.array(["a", "b"]), TypeError, "alibi_slopes: expected a float array"),
    (np.ones(3), ValueError, r"alibi_slopes: shape \(3,\) does not broadcast"),
])
def test_paged_alibi_slopes_are_checked_as_everywhere(slopes, exc, msg):
    Q, Kp, Vp, bt, lens = _paged(5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # refused before any NaN or RuntimeWarning
        with pytest.raises(exc, match=msg):
            decoding.forward_paged(Q, Kp, Vp, bt, lens, alibi_slopes=slopes)
    with pytest.raises(exc, match=msg):
        iomodel.predict_paged(Nq=2, d=4, heads=2, page_size=4, cache_seqlens=lens, alibi_slopes=slopes)


def test_paged_with_no_heads_or_no_sequences_is_empty_and_moves_nothing():
    # H = 0: an empty result, zero IO, and the prediction's lines are the simulator's
    res = decoding.forward_paged(np.zeros((2, 0, 1, 3)), np.zeros((4, 0, 2, 3)), np.zeros((4, 0, 2, 3)),
                                 np.zeros((2, 2), int), np.array([3, 1]))
    pred = iomodel.predict_paged(Nq=1, d=3, heads=0, page_size=2, cache_seqlens=[3, 1])
    assert res.O.shape == (2, 0, 1, 3) and res.L.shape == (2, 0, 1)
    assert (res.io.reads, res.io.writes) == (pred.reads, pred.writes) == (0, 0) and res.io.by_line == pred.by_line
    # B = 0: an IO report (not None) and a prediction of zeros
    Kp = np.zeros((4, 2, 2, 3))
    res = decoding.forward_paged(np.zeros((0, 2, 1, 3)), Kp, Kp, np.zeros((0, 2), int), [])
    pred = iomodel.predict_paged(Nq=1, d=3, heads=2, page_size=2, cache_seqlens=[])
    assert res.O.shape == (0, 2, 1, 3) and res.io is not None
    assert (res.io.reads, res.io.writes) == (pred.reads, pred.writes) == (0, 0)


# ----------------------------------------------------------------- against PyTorch's own


def _t(x, grad=False):
    return torch.tensor(x, requires_grad=grad)


@pytest.mark.parametrize("algorithm, packing", [("flash2", None), ("flash2", True), ("standard", None)])
def test_front_gqa_and_float_mask_agree_with_sdpa(algorithm, packing):
    r = np.random.default_rng(5)
    q, k, v, g = r.standard_normal((2, 6, 7, 4)), r.standard_normal((2, 2, 9, 4)), r.standard_normal((2, 2, 9, 4)), \
        r.standard_normal((2, 6, 7, 4))
    bias = _t(r.standard_normal((7, 9)))
    ours, theirs = [_t(x, True) for x in (q, k, v)], [_t(x, True) for x in (q, k, v)]
    extra = {} if packing is None else {"gqa_packing": packing}
    O1 = ref_sdpa(*ours, attn_mask=bias, enable_gqa=True, algorithm=algorithm, block_sizes=(3, 4), **extra)
    O2 = torch.nn.functional.scaled_dot_product_attention(*theirs, attn_mask=bias, enable_gqa=True)
    close(O1.detach(), O2.detach(), 1e-12)
    O1.backward(_t(g))
    O2.backward(_t(g))
    for a, b in zip(ours, theirs):
        close(a.grad, b.grad, 1e-11)


@pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")
def test_flex_attention_forward_agrees_on_window_alibi_and_softcap():
    flex = pytest.importorskip("torch.nn.attention.flex_attention")
    r = np.random.default_rng(6)
    q, k, v = (r.standard_normal((1, 2, 16, 8)) for _ in range(3))
    slopes = torch.tensor([0.25, 0.5], dtype=torch.float64)

    def score_mod(score, b, h, i, j):  # softcap, then ALiBi (flash-attn's order)
        return 4.0 * torch.tanh(score / 4.0) - slopes[h] * (i - j).abs()

    def mask_mod(b, h, i, j):  # causal, window of 5 keys back
        return (j <= i) & (j >= i - 5)

    bm = flex.create_block_mask(mask_mod, None, None, 16, 16, device="cpu")
    with torch.no_grad():
        theirs = flex.flex_attention(_t(q), _t(k), _t(v), score_mod=score_mod, block_mask=bm)
    o = dict(causal=True, window=(5, -1), softcap=4.0, alibi_slopes=slopes.numpy(), block_sizes=(4, 4))
    close(flash2.forward(q, k, v, **o).O, theirs.numpy(), 1e-12)


def test_a_small_gqa_sliding_window_model_trains_on_the_reference_as_on_torch():
    """Two query heads per K/V head, a causal window of 4 keys: the loss falls, step for step as torch's."""
    torch.manual_seed(0)
    B, N, E, Hq, Hkv, hd = 2, 12, 16, 4, 2, 4
    x, y = torch.randn(B, N, E, dtype=torch.float64), torch.randn(B, N, E, dtype=torch.float64)
    i, j = torch.arange(N)[:, None], torch.arange(N)[None, :]
    window_mask = (j <= i) & (j >= i - 3)

    def make():
        torch.manual_seed(1)
        return torch.nn.ModuleDict({"q": torch.nn.Linear(E, Hq * hd), "kv": torch.nn.Linear(E, 2 * Hkv * hd),
                                    "o": torch.nn.Linear(Hq * hd, E)}).double()

    def loss_of(m, attend):
        q = m["q"](x).view(B, N, Hq, hd).transpose(1, 2)
        k, v = m["kv"](x).view(B, N, 2, Hkv, hd).permute(2, 0, 3, 1, 4)
        o = attend(q, k, v).transpose(1, 2).reshape(B, N, Hq * hd)
        return ((m["o"](o) - y) ** 2).mean()

    ours = lambda q, k, v: ref_sdpa(q, k, v, enable_gqa=True, window=(3, 0), is_causal=True,  # noqa: E731
                                    block_sizes=(4, 4))
    theirs = lambda q, k, v: torch.nn.functional.scaled_dot_product_attention(  # noqa: E731
        q, k, v, attn_mask=window_mask, enable_gqa=True)
    losses = []
    for attend in (ours, theirs):
        m = make()
        opt = torch.optim.SGD(m.parameters(), lr=0.5)
        run = []
        for _ in range(5):
            opt.zero_grad()
            loss = loss_of(m, attend)
            loss.backward()
            opt.step()
            run.append(loss.item())
        losses.append(run)
    assert losses[0][-1] < 0.9 * losses[0][0]
    np.testing.assert_allclose(losses[0], losses[1], rtol=1e-10)


def test_front_bad_variant_input_is_named():
    q = torch.zeros(1, 4, 3, 2, dtype=torch.float64)
    k = torch.zeros(1, 3, 3, 2, dtype=torch.float64)
    with pytest.raises(ValueError, match="enable_gqa: query heads Hq=4 must be a multiple"):
        ref_sdpa(q, k, k, enable_gqa=True)
    with pytest.raises(ValueError, match="softcap"):
        ref_sdpa(q, q, q, softcap=-1.0)
    with pytest.raises(TypeError, match="window"):
        ref_sdpa(q, q, q, window=(1, 2, 3))
    with pytest.raises(TypeError, match="gqa_packing: algorithm='standard' has no gqa_packing"):
        ref_sdpa(q, q, q, gqa_packing=True, algorithm="standard")
