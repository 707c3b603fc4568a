"""Split-KV decoding: equals standard attention for any number of splits; IO equals the closed form."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from reference import attention_ref, variant_ref
from strategies import problems

from flashref import decoding, iomodel
from flashref.memory import SRAMOverflowError


def _heads(lead):
    return int(np.prod(lead)) if lead else 1


@st.composite
def decode_problems(draw):
    """A problem from the shared strategy plus a number of splits (≤ Nk) and maybe block sizes."""
    pb = draw(problems(max_len=20))
    pb["num_splits"] = draw(st.integers(1, pb["Nk"]))
    if draw(st.booleans()):
        pb["opts"]["block_sizes"] = (draw(st.integers(1, 6)), draw(st.integers(1, 6)))
    return pb


@given(decode_problems())
def test_forward_equals_standard_attention_for_any_split(pb):
    with np.errstate(all="raise"):  # fully masked rows and chunks: no NaN, no RuntimeWarning
        res = decoding.forward(pb["Q"], pb["K"], pb["V"], num_splits=pb["num_splits"], **pb["opts"])
    ref_opts = {k: v for k, v in pb["opts"].items() if k != "block_sizes"}
    O_ref, _, lse_ref = attention_ref(pb["Q"], pb["K"], pb["V"], **ref_opts)
    assert res.O.shape == O_ref.shape and np.isfinite(res.O).all()
    assert np.abs(res.O - O_ref).max() <= 1e-12 * max(1.0, np.abs(O_ref).max())
    # merged statistics: m + log ℓ is the row log-sum-exp; fully masked rows have ℓ = 0, m = -inf
    seen = res.l > 0
    with np.errstate(divide="ignore"):
        lse = res.m + np.log(np.where(seen, res.l, 1.0))
    assert np.array_equal(seen, np.isfinite(lse_ref))
    assert np.allclose(lse[seen], lse_ref[seen], rtol=0, atol=1e-12)
    assert np.all(res.m[~seen] == -np.inf)
    assert res.num_splits == pb["num_splits"]
    assert res.O_partial.shape == pb["lead"] + (pb["num_splits"], pb["Nq"], pb["d"])


@given(decode_problems())
def test_io_equals_closed_form(pb):
    res = decoding.forward(pb["Q"], pb["K"], pb["V"], num_splits=pb["num_splits"], **pb["opts"])
    opts = {k: v for k, v in pb["opts"].items() if k != "mask"}
    pred = iomodel.predict("decoding", "forward", Nq=pb["Nq"], Nk=pb["Nk"], d=pb["d"],
                           heads=_heads(pb["lead"]), num_splits=pb["num_splits"], **opts)
    assert (res.io.reads, res.io.writes) == (pred.reads, pred.writes)
    assert res.work_items == _heads(pb["lead"]) * -(-pb["Nq"] // res.block_sizes[0]) * pb["num_splits"]


def test_partials_merge_to_the_output_and_each_is_a_softmax_over_its_chunk(rng):
    Q = rng.standard_normal((2, 1, 8))
    K, V = rng.standard_normal((2, 50, 8)), rng.standard_normal((2, 50, 8))
    res = decoding.forward(Q, K, V, num_splits=4, block_sizes=(1, 5))
    for s, (k0, k1) in enumerate(decoding.split_bounds(50, 4)):
        O_s, _, lse_s = attention_ref(Q, K[:, k0:k1], V[:, k0:k1])
        assert np.allclose(res.O_partial[:, s], O_s, rtol=0, atol=1e-12)
        assert np.allclose(res.m_partial[:, s] + np.log(res.l_partial[:, s]), lse_s, rtol=0, atol=1e-12)
    w = np.exp(res.m_partial - res.m[:, None]) * res.l_partial / res.l[:, None]  # (2, S, 1)
    assert np.allclose((w[..., None] * res.O_partial).sum(axis=1), res.O, rtol=0, atol=1e-12)


def test_split_whose_chunk_is_fully_masked_contributes_nothing():
    rng = np.random.default_rng(1)
    Q, K, V = rng.standard_normal((2, 4)), rng.standard_normal((12, 4)), rng.standard_normal((12, 4))
    mask = np.ones((2, 12), dtype=bool)
    mask[:, 6:] = False  # the second of two splits sees only masked keys
    mask[1] = False  # and query 1 sees nothing at all
    with np.errstate(all="raise"):
        res = decoding.forward(Q, K, V, num_splits=2, mask=mask)
    O_ref, _, _ = attention_ref(Q, K, V, mask=mask)
    assert np.abs(res.O - O_ref).max() < 1e-12
    assert np.all(res.O[1] == 0) and res.l[1] == 0 and res.m[1] == -np.inf
    assert res.l_partial[1, 0] == 0 and np.all(res.O_partial[1] == 0)


def test_split_cost_is_extra_q_reads_and_partials_only():
    # per head: S·Nq·d Q reads, 2·Nk·d cache reads, and 2·S·(Nq·d + 2·Nq) + Nq·d + 2·Nq for partials/output
    Nq, Nk, d = 1, 4096, 64
    base = iomodel.predict("decoding", "forward", Nq=Nq, Nk=Nk, d=d, num_splits=1)
    for S in (2, 8, 32):
        p = iomodel.predict("decoding", "forward", Nq=Nq, Nk=Nk, d=d, num_splits=S)
        assert p.total - base.total == (S - 1) * Nq * d + 2 * S * (Nq * d + 2 * Nq)
        assert p.total < 1.2 * base.total  # the cache dominates


def test_peak_sram_equals_footprint(rng):
    Q, K, V = rng.standard_normal((4, 6)), rng.standard_normal((40, 6)), rng.standard_normal((40, 6))
    for p in (0.0, 0.2):
        res = decoding.forward(Q, K, V, num_splits=3, block_sizes=(4, 5), dropout_p=p)
        assert res.io.peak_sram == decoding.footprint(4, 5, 6)  # with dropout too: P̃∘Z takes P̃'s slot
        assert decoding.merge_footprint(4, 6) <= res.io.peak_sram


def test_parallelism_and_default_splits():
    # 32 heads, one query: FlashAttention offers 32 work items on 132 SMs; splitting fills the waves.
    assert decoding.parallelism(32, 132)["utilisation"] == pytest.approx(32 / 132)
    S = decoding.choose_num_splits(32, Tc=64, Nk=8192, sms=132)
    util = decoding.parallelism(32 * S, 132)["utilisation"]
    assert S > 1 and util >= 0.85 * max(decoding.parallelism(32 * s, 132)["utilisation"] for s in range(1, 65))
    assert decoding.choose_num_splits(200, Tc=64, Nk=8192, sms=132) == 1  # already a full wave
    assert decoding.choose_num_splits(32, Tc=1, Nk=8192, sms=132) == 1  # one K/V block: nothing to split
    rng = np.random.default_rng(0)
    Q, K, V = rng.standard_normal((8, 1, 16)), rng.standard_normal((8, 256, 16)), rng.standard_normal((8, 256, 16))
    res = decoding.forward(Q, K, V, block_sizes=(1, 16), sms=132)
    assert res.num_splits == decoding.choose_num_splits(8, Tc=16, Nk=256, sms=132)
    assert res.work_items == 8 * res.num_splits and res.parallelism["work_items"] == res.work_items


@pytest.mark.parametrize("bad, exc", [(0, ValueError), (-1, ValueError), (1.5, TypeError), (True, TypeError),
                                      ("4", TypeError), (11, ValueError)])
def test_bad_num_splits_named(bad, exc, rng):
    Q, K, V = rng.standard_normal((1, 4)), rng.standard_normal((10, 4)), rng.standard_normal((10, 4))
    with pytest.raises(exc, match="num_splits"):
        decoding.forward(Q, K, V, num_splits=bad)


def test_bad_sms_and_inputs_named(rng):
    Q, K, V = rng.standard_normal((1, 4)), rng.standard_normal((10, 4)), rng.standard_normal((10, 4))
    with pytest.raises(ValueError, match="sms"):
        decoding.forward(Q, K, V, sms=0)
    with pytest.raises(ValueError, match="V"):
        decoding.forward(Q, K, V[:9], num_splits=2)


# ----------------------------------------------------------------- the variants a decoding kernel carries


@st.composite
def variant_decodes(draw):
    """A few queries against a cache, with GQA, causal, a window, a softcap and ALiBi drawn independently."""
    B, Hkv, g = draw(st.integers(1, 2)), draw(st.integers(1, 2)), draw(st.integers(1, 3))
    Nq, Nk, d = draw(st.integers(1, 4)), draw(st.integers(1, 24)), draw(st.integers(1, 4))
    r = np.random.default_rng(draw(st.integers(0, 2**16)))
    o = {"enable_gqa": True} if g > 1 or draw(st.booleans()) else {}
    if o and draw(st.booleans()):
        o["gqa_packing"] = True  # a work item holds the group's g query heads as g·Nq rows
    if draw(st.booleans()):
        o["causal"] = True
    if draw(st.booleans()):
        o["window"] = (draw(st.integers(-1, 5)), draw(st.integers(-1, 3)))
    if draw(st.booleans()):
        o["softcap"] = draw(st.sampled_from([0.5, 2.0]))
    if draw(st.booleans()):
        o["alibi_slopes"] = r.random((B, Hkv * g)) if draw(st.booleans()) else r.random(Hkv * g)
    if draw(st.booleans()):
        o["block_sizes"] = (draw(st.integers(1, 4)), draw(st.integers(1, 6)))
    QKV = (r.standard_normal((B, Hkv * g, Nq, d)), r.standard_normal((B, Hkv, Nk, d)),
           r.standard_normal((B, Hkv, Nk, d)))
    return QKV, o, draw(st.integers(1, Nk))


@given(variant_decodes())
def test_variants_equal_the_oracle_and_their_closed_form_for_any_split(case):
    """Every split of a window, a softcap, ALiBi and GQA gives the float64 oracle's output and statistics, and
    the counted IO is the closed form's, line by line (the slopes read once per work item, as Q_i is)."""
    (Q, K, V), o, S = case
    with np.errstate(all="raise"):  # rows the window leaves without a key: no NaN, no warning
        res = decoding.forward(Q, K, V, num_splits=S, **o)
    O_ref, _, lse_ref = variant_ref(Q, K, V, **o)
    assert res.O.shape == Q.shape and np.allclose(res.O, O_ref, rtol=0, atol=1e-12)
    seen = res.l > 0
    assert np.array_equal(seen, np.isfinite(lse_ref))
    assert np.allclose((res.m + np.log(np.where(seen, res.l, 1.0)))[seen], lse_ref[seen], rtol=0, atol=1e-12)
    shapes = {k: (True if k == "alibi_slopes" else v) for k, v in o.items()}
    heads = dict(heads=Q.shape[0] * Q.shape[1], kv_heads=K.shape[0] * K.shape[1])
    pred = iomodel.predict("decoding", "forward", Nq=Q.shape[-2], Nk=K.shape[-2], d=Q.shape[-1], num_splits=S,
                           **heads, **shapes)
    assert pred.by_line == res.io.by_line and (pred.reads, pred.writes) == (res.io.reads, res.io.writes)
    assert iomodel.block_sizes("decoding", "forward", Nq=Q.shape[-2], Nk=K.shape[-2], d=Q.shape[-1], num_splits=S,
                               **heads, **shapes) == res.block_sizes
    if o.get("gqa_packing"):
        return  # the packed loop's count: test_packed_gqa_reads_the_cache_once_per_kv_head
    Tr = -(-Q.shape[-2] // res.block_sizes[0])
    slope_reads = Q.shape[0] * Q.shape[1] * S * Tr if "alibi_slopes" in o else 0
    plain = iomodel.predict("decoding", "forward", Nq=Q.shape[-2], Nk=K.shape[-2], d=Q.shape[-1],
                            heads=Q.shape[0] * Q.shape[1], num_splits=S, block_sizes=res.block_sizes)
    assert res.io.reads == plain.reads + slope_reads  # no key block skipped: the variants cost only the slopes


def test_alibi_slope_is_held_on_chip_and_counted_in_the_footprint(rng):
    Q, K = rng.standard_normal((4, 6)), rng.standard_normal((40, 6))
    res = decoding.forward(Q, K, K, num_splits=3, block_sizes=(4, 5), alibi_slopes=np.array(0.5))
    assert res.io.peak_sram == decoding.footprint(4, 5, 6, slopes=1) == decoding.footprint(4, 5, 6) + 1
    tight = decoding.footprint(4, 5, 6)  # enough without the slope, one element short with it
    with pytest.raises(SRAMOverflowError, match="more than sram_size"):
        decoding.forward(Q, K, K, num_splits=3, block_sizes=(4, 5), alibi_slopes=np.array(0.5), sram_size=tight)
    with pytest.raises(SRAMOverflowError, match="more than sram_size"):
        iomodel.predict("decoding", "forward", Nq=4, Nk=40, d=6, num_splits=3, block_sizes=(4, 5),
                        alibi_slopes=True, sram_size=tight)


@pytest.mark.parametrize("o", [{"window": (6, 0)}, {"softcap": 1.0}, {"alibi_slopes": np.array([0.25, 0.5])},
                               {"causal": True, "window": (3, 2), "softcap": 3.0,
                                "alibi_slopes": np.array([1.0, 0.1])}])
def test_paged_decoding_equals_decoding_on_the_gathered_cache_with_each_variant(o, rng):
    """The contract: forward_paged equals decoding.forward on the gathered cache, for every option it takes."""
    H, ps, lens = 2, 4, np.array([13, 7])
    Kp, Vp = rng.standard_normal((6, H, ps, 3)), rng.standard_normal((6, H, ps, 3))
    table = np.array([[5, 0, 3, 1], [2, 4, 0, 0]])
    Q = rng.standard_normal((2, H, 2, 3))
    res = decoding.forward_paged(Q, Kp, Vp, table, lens, **o)
    for b, n in enumerate(lens):
        K, V = (X[table[b, : -(-n // ps)]].transpose(1, 0, 2, 3).reshape(H, -1, 3)[:, :n] for X in (Kp, Vp))
        ours = decoding.forward(Q[b], K, V, num_splits=2, **o)
        assert np.allclose(res.O[b], ours.O, rtol=0, atol=1e-12)
        assert np.allclose(res.L[b], ours.m + np.log(ours.l), rtol=0, atol=1e-12)


def test_decoding_refuses_what_it_does_not_take_naming_the_variants(rng):
    Q, K = rng.standard_normal((1, 4)), rng.standard_normal((10, 4))
    with pytest.raises(TypeError, match=r"unknown option 'bias'; valid options are alibi_slopes, block_sizes, causal, "
                                        r"dropout_p, dtype_bytes, enable_gqa, gqa_packing, mask, num_splits, scale, "
                                        r"seed, sms, softcap, sram_size, window$"):
        decoding.forward(Q, K, K, bias=np.zeros((1, 10)))
    with pytest.raises(ValueError, match="softcap"):
        decoding.forward(Q, K, K, softcap=0.0)
    with pytest.raises(TypeError, match="window"):
        iomodel.predict("decoding", "forward", Nq=1, Nk=10, d=4, window=(1, 2, 3))


def test_resolve_and_work_items_take_the_variants_and_see_the_slope_in_the_footprint():
    """Before: iomodel.decoding.resolve and work_items refused every variant as unknown, and left without the slope
    they gave the blocks of a footprint one element too small: (2, 2) where decoding.forward runs (1, 1)."""
    from flashref.iomodel import decoding as closed
    Q, K = np.ones((4, 2, 2)), np.ones((4, 64, 2))
    res = decoding.forward(Q, K, K, num_splits=1, sram_size=30, alibi_slopes=np.ones(4))
    shapes = dict(Nq=2, Nk=64, d=2, heads=4, num_splits=1, sram_size=30)
    assert closed.resolve(**shapes, alibi_slopes=True)[:2] == res.block_sizes == (1, 1)
    assert closed.resolve(**shapes)[:2] != res.block_sizes  # the slope is what changes them
    assert closed.work_items(**shapes, alibi_slopes=np.ones(4)) == res.work_items == 8
    assert closed.work_items(**shapes, window=(1, 0), softcap=2.0, enable_gqa=True) == 4 * 1 * 1


@pytest.mark.parametrize("g, Nq", [(4, 1), (2, 3), (8, 2)])
def test_packed_gqa_reads_the_cache_once_per_kv_head(g, Nq):
    """Packed, a work item holds its group's g query heads as g·Nq rows: the same output and statistics as the
    unpacked loop, K and V read once per K/V head (g times less, when the packed rows fit one row block as the
    unpacked ones do), one work item where there were g, and the footprint of g·Br rows measured on chip."""
    rng = np.random.default_rng(g)
    Q = rng.standard_normal((2, 2 * g, Nq, 8))
    K, V = rng.standard_normal((2, 2, 96, 8)), rng.standard_normal((2, 2, 96, 8))
    o = dict(enable_gqa=True, num_splits=3, block_sizes=(Nq, 16), alibi_slopes=rng.random(2 * g), softcap=5.0)
    unpacked = decoding.forward(Q, K, V, **o)
    packed = decoding.forward(Q, K, V, gqa_packing=True, **o)
    for name in ("O", "l", "m", "O_partial", "m_partial", "l_partial"):
        assert np.allclose(getattr(packed, name), getattr(unpacked, name), rtol=0, atol=1e-12), name
    cache = "split: load K_j, V_j"
    assert unpacked.io.by_line[cache][0] == g * packed.io.by_line[cache][0] == 2 * 2 * g * 2 * 96 * 8
    assert unpacked.io.by_line["split: load Q_i"] == packed.io.by_line["split: load Q_i"]  # Q, slopes: once each
    assert unpacked.work_items == g * packed.work_items == 2 * 2 * g * 3
    assert packed.block_sizes == unpacked.block_sizes == (Nq, 16)
    assert packed.io.peak_sram == decoding.footprint(g * Nq, 16, 8, slopes=g)


def test_packing_without_gqa_is_the_plain_loop(rng):
    Q, K = rng.standard_normal((3, 2, 4)), rng.standard_normal((3, 20, 4))
    plain = decoding.forward(Q, K, K, num_splits=2)
    packed = decoding.forward(Q, K, K, num_splits=2, gqa_packing=True)
    assert np.array_equal(plain.O, packed.O) and plain.io.by_line == packed.io.by_line


def test_packed_errors_say_the_rows_are_packed_and_name_kv_heads():
    """Before: a packed loop too big for sram_size was refused as "even 1x1 blocks need 184 elements", where an
    unpacked 1x1 block needs 70 and runs; and a kv_heads that does not divide heads was not named."""
    Q, K = np.zeros((1, 8, 1, 16)), np.zeros((1, 2, 64, 16))
    packed = dict(enable_gqa=True, gqa_packing=True, sram_size=100)
    with pytest.raises(SRAMOverflowError, match=r"even 1x1 blocks \(4·Br rows with the group's 4 query heads packed\)"):
        decoding.forward(Q, K, K, **packed)
    decoding.forward(Q, K, K, enable_gqa=True, sram_size=100)  # unpacked, the same memory holds a 1x1 block
    with pytest.raises(SRAMOverflowError, match=r"\(4 rows with the group's 4 query heads packed\) with 1 split "):
        decoding.forward(Q, K, K, **packed, block_sizes=(1, 2), num_splits=1)
    with pytest.raises(ValueError, match=r"Hkv=3 \(Hkv from kv_heads\)"):
        iomodel.predict("decoding", "forward", Nq=1, Nk=16, d=8, heads=8, kv_heads=3, enable_gqa=True)
    with pytest.raises(ValueError, match=r"Hkv=3 \(Hkv from K\)"):
        decoding.forward(np.zeros((8, 1, 4)), np.zeros((3, 9, 4)), np.zeros((3, 9, 4)), enable_gqa=True)
