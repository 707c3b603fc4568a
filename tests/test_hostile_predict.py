"""A hostile round on the closed forms (predict and its helpers): what each entry point took that it should have
refused, or refused with an error that named no argument. Predictions against the counts held throughout (about
160,000 cases); these are the arguments."""

import dataclasses

import numpy as np
import pytest

from flashref import SRAMOverflowError, hardware, iomodel
from flashref.iomodel import bounds
from flashref.iomodel import ring as iom_ring
from flashref.iomodel.flash2 import band_totals, kv_per_row_block, q_per_column_block


@pytest.mark.parametrize("args,error,match", [
    ((10, -1, 12, 4, 2, 3), ValueError, "^B: expected a positive integer"),
    ((10, 3, -5, 4, 2, 3), ValueError, "^m: expected a non-negative integer"),
    ((10.5, 3, 12, 4, 2, 3), TypeError, "^n: expected a non-negative integer"),
    ((np.int64(2 ** 62), 3, 12, 4, 2, 3), ValueError, "^n: expected a sequence length of at most"),
    ((10, 0, 12, 4, 2, 3), ValueError, "^B: expected a positive integer"),
    ((10, 3, 12, 0, 2, 3), ValueError, "^C: expected a positive integer"),
    ((10, 3, 12, 4, -2, 3), ValueError, "^back: expected a band's reach >= 0, or -1"),
    ((10, 3, 12, 4, 2, 1.5), TypeError, "^fwd: expected an integer")])
def test_band_totals_checks_its_arguments(args, error, match):
    """band_totals (public) checked nothing: negative and float counts came back, an int64 wrapped to -4.6e18, and
    B = 0 was a bare ZeroDivisionError."""
    with pytest.raises(error, match=match):
        band_totals(*args)


@pytest.mark.parametrize("L,R", [(-1, 3), (2, -1), (-1, -1), (0, 5)])
def test_band_totals_reads_minus_one_as_unbounded_as_the_lists_do(L, R):
    """-1 is 'unbounded' in window= and in the per-block lists; band_totals read it as a reach of -1 (28 columns
    where the rows load 44)."""
    n, Br, m, Bc = 10, 3, 12, 4
    assert band_totals(n, Br, m, Bc, L, R).loaded == sum(kv_per_row_block(n, m, Br, Bc, False, L=L, R=R))
    assert band_totals(m, Bc, n, Br, R, L).loaded == sum(q_per_column_block(n, m, Br, Bc, False, L=L, R=R))
    # numpy's small integers are made Python ints: np.uint8 arithmetic would wrap at 255
    small = band_totals(*(np.uint8(x) for x in (200, 3, 250, 4, 2, 3)))
    assert small == band_totals(200, 3, 250, 4, 2, 3)


@pytest.mark.parametrize("call", [
    lambda: iomodel.predict("flash1", "forward", Nq=8, Nk=8, d=4, heads=None, mask=np.ones((16, 8, 8), bool)),
    lambda: iomodel.predict_varlen("forward", cu_seqlens_q=[0, 4], cu_seqlens_k=[0, 4], d=4, heads=None),
    lambda: iomodel.predict_paged(Nq=1, d=4, heads=None, page_size=4, cache_seqlens=[8]),
    lambda: iomodel.decoding.resolve(Nq=1, Nk=8, d=4, heads=None),
    lambda: iomodel.decoding.work_items(Nq=1, Nk=8, d=4, heads=None)])
def test_heads_none_is_refused_where_heads_is_a_count(call):
    """heads=None is Problem.from_shapes's 'a grid, one head', which lets a mask of any leading axes through:
    predict(heads=None) counted one head beside a mask of sixteen (240 elements, where heads=16 counts 3840)."""
    with pytest.raises(TypeError, match="^heads: expected a non-negative integer, got None"):
        call()


@pytest.mark.parametrize("name", ["mask", "bias"])
@pytest.mark.parametrize("false", [False, np.False_])
def test_a_mask_of_false_is_refused(name, false):
    """mask=False was read as a 0-d mask hiding every key, by predict and the simulator alike (a mask pass counted:
    512 elements where no mask gives 384, and O = 0), where a user means no mask. A bool False is refused by both,
    with the same error, pointing at None; an array of False is still the mask that hides every key, and True (from
    shapes, 'there is one') still counts the pass."""
    from flashref import standard
    q = np.ones((8, 4))
    with pytest.raises(TypeError, match=rf"^{name}: expected None or an array, got False \(no {name} is None"):
        iomodel.predict("standard", "forward", Nq=8, Nk=8, d=4, **{name: false})
    with pytest.raises(TypeError, match=rf"^{name}: expected None or an array, got False \(no {name} is None"):
        standard.forward(q, q, q, **{name: false})
    plain = iomodel.predict("standard", "forward", Nq=8, Nk=8, d=4).total
    hides = iomodel.predict("standard", "forward", Nq=8, Nk=8, d=4, mask=np.zeros((8, 8), bool)).total
    assert hides == iomodel.predict("standard", "forward", Nq=8, Nk=8, d=4, mask=True).total > plain


@pytest.mark.parametrize("algorithm", ["flash1", "blocksparse"])
def test_fewer_kv_heads_names_the_algorithms_that_take_enable_gqa(algorithm):
    """The hint said 'pass enable_gqa=True', which flash1 and blocksparse refuse as an unknown option (they take no
    variant's option)."""
    with pytest.raises(ValueError, match="enable_gqa=True for fewer K/V heads, to an algorithm that takes the "
                                         "variants' options"):
        iomodel.predict(algorithm, "forward", Nq=8, Nk=8, d=4, heads=2, kv_heads=1)
    assert iomodel.predict("flash2", "forward", Nq=8, Nk=8, d=4, heads=2, kv_heads=1, enable_gqa=True).total > 0


@pytest.mark.parametrize("call", [
    lambda: bounds.flash1_theta(N=np.inf, d=64, M=1e5), lambda: bounds.in_theorem_range(N=np.inf, d=64, M=1e5),
    lambda: bounds.standard_theta(N=1024, d=np.inf), lambda: iomodel.blocksparse.prop4(1024, 64, np.inf, 0.5),
    lambda: iomodel.blocksparse.prop4_constants(d=np.inf, M=1e5, Bc=32)])
def test_the_theta_forms_refuse_infinity(call):
    """+inf passed (NaN was refused): flash1_theta(N=inf) was inf, prop4_constants(d=inf) (nan, nan), and
    in_theorem_range(N=inf) True."""
    with pytest.raises(ValueError, match="expected a finite positive number, got inf"):
        call()


def test_the_ring_formulas_take_equal_shards_and_name_an_unknown_gpu():
    """ulysses_bytes_per_rank(10, 4, 4) returned 60 and overlap(N=10, world_size=4) n = 2.5 tokens, where
    ring_bytes_per_rank refused (a number no rank sends); a GPU not in hardware.GPUS ended in a bare StopIteration
    looking up its NVLink bandwidth. A copy of a listed GPU is that GPU."""
    for call in (lambda: iom_ring.ulysses_bytes_per_rank(10, 4, 4), lambda: iom_ring.overlap(N=10, d=4, world_size=4),
                 lambda: iom_ring.ring_bytes_per_rank(10, 4, 4)):
        with pytest.raises(ValueError, match="^N: the formula is for equal shards, so N must be a multiple of"):
            call()
    h100 = hardware.GPUS["H100"]
    assert iom_ring.min_tokens_per_device(dataclasses.replace(h100)) == iom_ring.min_tokens_per_device("H100")
    own = dataclasses.replace(h100, sms=100)
    with pytest.raises(ValueError, match="^link_bandwidth: .* is not one of hardware.GPUS"):
        iom_ring.min_tokens_per_device(own)
    assert iom_ring.min_tokens_per_device(own, link_bandwidth=450e9) == iom_ring.min_tokens_per_device("H100")


@pytest.mark.parametrize("layout", [np.array(["zigzag"]), np.array(["zigzag", "x"]), ["zigzag"]])
def test_a_ring_layout_is_a_string(layout):
    """A one-element array was taken as its string; a longer one failed on an array's truth value, naming nothing."""
    with pytest.raises(ValueError, match="^layout: expected one of"):
        iom_ring.comm("forward", N=8, d=4, world_size=4, layout=layout)


def test_paged_row_blocks_are_solved_not_searched():
    """paged_problem searched Br down from Nq (seconds at Nq = 10^7, minutes at 2^31) and predict_paged summed its
    row blocks one by one. Br is now solved from the footprint, linear in Br: the same Br as the search on a grid
    of shapes, and the largest that fits; the pages and keys are FlashAttention-2's band sums (band_totals)."""
    import itertools

    from flashref import decoding
    from flashref.decoding import footprint_paged
    for Nq, d, page, M, slopes in itertools.product((1, 2, 5, 17, 300), (1, 4, 64), (1, 3, 16),
                                                      (50, 500, 5000, 100000), (False, True)):
        opts = dict(sram_size=M, **({"alibi_slopes": True} if slopes else {}))
        searched = next((Br for Br in range(Nq, 0, -1) if footprint_paged(Br, page, d) + slopes <= M), None)
        if searched is None:
            with pytest.raises(SRAMOverflowError, match="more than sram_size"):
                decoding.paged_problem(Nq, 1, d, 1, page, **opts)
        else:
            assert decoding.paged_problem(Nq, 1, d, 1, page, **opts)[1] == searched
    # the whole range of Nq, as every other predict takes it
    assert iomodel.predict_paged(Nq=2 ** 31 - 1, d=64, heads=1, page_size=16, cache_seqlens=[100]).total > 0


def _leading_shapes():
    """Every leading shape of up to two axes of sizes 1-3 (as a mask, bias or slopes might carry them)."""
    return [()] + [(a,) for a in (1, 2, 3)] + [(a, b) for a in (1, 2, 3) for b in (1, 2, 3)]


@pytest.mark.parametrize("algorithm", ["standard", "flash2"])
@pytest.mark.parametrize("lead", [(2, 3), (3, 2), (1, 3), (2, 1, 3)])
def test_heads_as_leading_axes_accepts_and_refuses_as_the_simulator(algorithm, lead):
    """A product of heads cannot tell (2, 3) from (3, 2): predict(heads=6) took a mask of leading axes (3, 1) that
    the simulator refuses for Q of (2, 3). With heads the leading axes themselves, predict accepts exactly the masks,
    biases and slopes the simulator accepts for that Q, and counts what it counts."""
    from flashref import flash2, standard
    run = {"standard": standard.forward, "flash2": flash2.forward}[algorithm]
    rng = np.random.default_rng(1)
    Nq, Nk, d = 5, 7, 4
    Q, K = rng.standard_normal(lead + (Nq, d)), rng.standard_normal(lead + (Nk, d))
    agreed = refused = 0
    for name in ("mask", "bias", "alibi_slopes"):
        for axes in _leading_shapes():
            value = (rng.random(axes + (Nq, Nk)) > 0.3 if name == "mask" else rng.standard_normal(axes + (Nq, Nk))
                     if name == "bias" else rng.random(axes))
            try:
                counted = run(Q, K, K, **{name: value}).io.total
            except ValueError as e:
                with pytest.raises(ValueError, match=f"^{name}: "):
                    iomodel.predict(algorithm, "forward", Nq=Nq, Nk=Nk, d=d, heads=lead, **{name: value})
                assert str(e).startswith(f"{name}: ")
                refused += 1
                continue
            assert iomodel.predict(algorithm, "forward", Nq=Nq, Nk=Nk, d=d, heads=lead, **{name: value}).total \
                == counted
            agreed += 1
    assert agreed and refused  # both sides of the rule were exercised


@pytest.mark.parametrize("bad,error", [((2, -1), ValueError), ((2, 1.5), TypeError), ((True, 2), TypeError)])
def test_heads_axes_are_checked_by_position(bad, error):
    i = next(i for i, h in enumerate(bad) if isinstance(h, bool) or not isinstance(h, int) or h < 0)
    with pytest.raises(error, match=rf"^heads\[{i}\]: expected a non-negative integer"):
        iomodel.predict("flash2", "forward", Nq=8, Nk=8, d=4, heads=bad)
    # an empty axis is an empty batch; no axes, one head
    assert iomodel.predict("flash2", "forward", Nq=8, Nk=8, d=4, heads=(0, 3)).total == 0
    assert iomodel.predict("flash2", "forward", Nq=8, Nk=8, d=4, heads=()).total \
        == iomodel.predict("flash2", "forward", Nq=8, Nk=8, d=4).total
