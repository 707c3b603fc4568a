"""Bad input gets a ValueError or TypeError that names the argument."""

import numpy as np
import pytest

from flashref import iomodel, standard

rng = np.random.default_rng(0)
Q, K, V = rng.standard_normal((4, 3)), rng.standard_normal((5, 3)), rng.standard_normal((5, 3))


def bad(**changes):
    args = dict(Q=Q, K=K, V=V)
    opts = {k: v for k, v in changes.items() if k not in args}
    args.update({k: v for k, v in changes.items() if k in args})
    return args, opts


CASES = [
    (dict(K=rng.standard_normal((5, 4))), ValueError, "K: head dimension"),
    (dict(V=rng.standard_normal((6, 3))), ValueError, "V: length"),
    (dict(V=rng.standard_normal((5, 2))), ValueError, "V: head dimension"),
    (dict(Q=rng.standard_normal(3)), ValueError, "Q: expected shape"),
    (dict(K=rng.standard_normal((2, 5, 3))), ValueError, "K: leading"),
    (dict(Q=np.full((4, 3), np.nan)), ValueError, "Q: contains NaN"),
    (dict(V=np.full((5, 3), np.inf)), ValueError, "V: contains NaN or inf"),
    (dict(Q=np.array([["a"]])), TypeError, "Q: expected a real"),
    (dict(dropout_p=1.0), ValueError, "dropout_p"),
    (dict(dropout_p=-0.1), ValueError, "dropout_p"),
    (dict(mask=np.ones((4, 4), dtype=bool)), ValueError, "mask: shape"),
    (dict(mask=np.ones((4, 5))), TypeError, "mask: expected a boolean"),
    (dict(sram_size=0), ValueError, "sram_size"),
    (dict(sram_size=2.5), TypeError, "sram_size"),
    (dict(block_sizes=(0, 4)), ValueError, "block_sizes"),
    (dict(block_sizes=8), TypeError, "block_sizes"),
    (dict(scale=float("nan")), ValueError, "scale"),
    (dict(causal="yes"), TypeError, "causal"),
    (dict(seed=1.5), TypeError, "seed"),
    (dict(dtype_bytes=0), ValueError, "dtype_bytes"),
    # Python's ints have no bound: one too large for a float is a ValueError naming it, not an OverflowError
    (dict(scale=10**400), ValueError, "scale: .* too large for a float"),
    (dict(softcap=10**400), ValueError, "softcap: .* too large for a float"),
    (dict(sram_size=2**64), ValueError, "sram_size"),
]


@pytest.mark.parametrize("opts,msg", [(dict(d=10**400), "d: .* at most 2"), (dict(heads=2**64), "heads: .* at most 2"),
                                      (dict(scale=-10**400), "scale: .* too large"), (dict(Nq=2**60), "Nq")])
def test_predict_refuses_numbers_no_float_or_int64_holds(opts, msg):
    kw = {**dict(Nq=5, Nk=5, d=4), **opts}
    with pytest.raises(ValueError, match=msg):
        iomodel.predict("flash2", "forward", **kw)


@pytest.mark.parametrize("changes,exc,msg", CASES, ids=[c[2] for c in CASES])
def test_forward_rejects(changes, exc, msg):
    args, opts = bad(**changes)
    with pytest.raises(exc, match=msg):
        standard.forward(args["Q"], args["K"], args["V"], **opts)


def test_backward_rejects_wrong_shapes():
    fwd = standard.forward(Q, K, V)
    with pytest.raises(ValueError, match="dO: expected shape"):
        standard.backward(Q, K, V, np.zeros((4, 2)), fwd.P)
    with pytest.raises(ValueError, match="P: expected shape"):
        standard.backward(Q, K, V, np.zeros((4, 3)), fwd.P[:, :2])


def test_iomodel_rejects():
    with pytest.raises(ValueError, match="algorithm"):
        iomodel.predict("flash9", "forward", Nq=4, Nk=4, d=2)
    with pytest.raises(ValueError, match="direction"):
        iomodel.predict("standard", "sideways", Nq=4, Nk=4, d=2)
    with pytest.raises(ValueError, match="Nq"):
        iomodel.predict("standard", "forward", Nq=0, Nk=4, d=2)


def test_tiling_helpers_name_their_arguments():
    from flashref import blocks

    for call, msg in ((lambda: blocks.paper_block_sizes(0, 64), "M: expected a positive integer"),
                      (lambda: blocks.paper_block_sizes(50_000, 0), "d: expected a positive integer"),
                      (lambda: blocks.default_sram_size(0), "dtype_bytes: expected a positive integer"),
                      (lambda: blocks.cdiv(1, 0), "b: expected a positive block size"),
                      (lambda: blocks.Grid.of(0, 1, 1, 1), "Br: expected a positive integer"),
                      (lambda: blocks.Grid.of(1, 1, -1, 1), "Nq: expected a non-negative integer")):
        with pytest.raises(ValueError, match=msg):
            call()
    assert blocks.paper_block_sizes(np.int64(50_000), 64) == (64, 196)
    assert tuple(blocks.Grid.of(2, 3, 0, 7)) == (2, 3, 0, 3)


@pytest.mark.parametrize("name", ["where", "extra"])
def test_predict_refuses_internal_names_as_unknown_options(name):
    """The names the option checker uses inside are not options: refused with the list of valid ones, not a clash
    of keyword arguments."""
    with pytest.raises(TypeError, match=f"unknown option '{name}'; valid options are"):
        iomodel.predict("flash2", "forward", Nq=4, Nk=4, d=2, **{name: 1})



def test_scale_takes_a_0d_array_as_dropout_p_does():
    """scale takes what dropout_p takes (dropout.check_p): Python and numpy reals, a 0-d array too; an array of
    any other shape, or a bool, is refused naming it."""
    want = standard.forward(Q, K, V, scale=0.3).O
    for scale in (np.array(0.3), np.float64(0.3)):
        np.testing.assert_array_equal(standard.forward(Q, K, V, scale=scale).O, want)
    for scale in (np.array([0.3]), np.array(True)):
        with pytest.raises(ValueError, match="scale: expected a finite real number"):
            standard.forward(Q, K, V, scale=scale)


def test_public_tile_counters_check_their_sizes_as_predict_does():
    """iomodel's public tile counters (flash2.kv_per_row_block, q_per_column_block, flash1.visited_rows,
    triton.kernel_model) take numpy integers as Python ones (np.uint8(255) * 3 had wrapped to 253, an np.int32 kernel
    model to 0.5% of its bytes) and name a bad size instead of dividing by zero or looping for hours."""
    from flashref.iomodel import flash1 as io1
    from flashref.iomodel import flash2 as io2
    from flashref.iomodel import triton as iot

    assert io2.kv_per_row_block(np.uint8(255), 3, 1, 3, False) == io2.kv_per_row_block(255, 3, 1, 3, False) == [3] * 255
    assert io2.q_per_column_block(np.uint8(8), 8, 8, 4, np.bool_(False)) == [8, 8]
    assert io1.visited_rows(np.uint8(255), 1, 3) == 765
    blocks = {"fwd": (128, 64), "dkdv_atomic": (64, 128)}
    assert iot.kernel_model(1, 1, np.int32(65536), 128, blocks) == iot.kernel_model(1, 1, 65536, 128, blocks)
    for call, match in ((lambda: io2.kv_per_row_block(5, 6, 0, 3, False), "Br: expected a positive integer"),
                        (lambda: io2.q_per_column_block(2**40, 6, 4, 3, False), "Nq: expected a sequence length"),
                        (lambda: io2.kv_per_row_block(5, 6, 4, 3, "no"), "causal: expected True or False"),
                        (lambda: io1.visited_rows(5, 0, 3), "Br: expected a positive integer"),
                        (lambda: iot.kernel_model(1, 1, 64, 64, {"fwd": (64, 64)}), "blocks: no dkdv, dq tiles")):
        with pytest.raises((ValueError, TypeError), match=match):
            call()


def test_public_tile_counters_read_a_reach_as_window_does():
    """kv_per_row_block and q_per_column_block read a reach L, R of -1 as unbounded, as each side of window= is
    (they had returned zeros for it, silently), and refuse a reach below -1 naming it."""
    from flashref.iomodel import flash2 as io2

    assert io2.kv_per_row_block(8, 8, 2, 2, False, L=-1, R=-1) == io2.kv_per_row_block(8, 8, 2, 2, False) == [8] * 4
    assert io2.q_per_column_block(8, 8, 2, 2, False, L=-1, R=-1) == [8] * 4
    # one side unbounded: causal with L = -1 is causal; a window of (1, -1) reaches every later key
    assert io2.kv_per_row_block(8, 8, 2, 2, True, L=-1, R=0) == io2.kv_per_row_block(8, 8, 2, 2, True) == [2, 4, 6, 8]
    assert io2.q_per_column_block(8, 8, 2, 2, False, L=1, R=-1) == [4, 6, 8, 8]
    for call, name in ((lambda: io2.kv_per_row_block(8, 8, 2, 2, False, L=-5, R=0), "L"),
                       (lambda: io2.kv_per_row_block(8, 8, 2, 2, False, L=0, R=-2), "R"),
                       (lambda: io2.q_per_column_block(8, 8, 2, 2, False, L=-2, R=-1), "L"),
                       (lambda: io2.q_per_column_block(8, 8, 2, 2, True, L=3, R=-7), "R")):
        with pytest.raises(ValueError, match=f"^{name}: expected a band's reach >= 0, or -1 for unbounded"):
            call()


def test_a_head_dim_past_the_default_sram_names_the_fix():
    """Where even 1x1 blocks outgrow M, the error says whether M was the default and names sram_size= as the fix;
    a larger sram_size then runs."""
    from flashref import flash2
    from flashref.memory import SRAMOverflowError
    Q = np.zeros((4, 4000))
    with pytest.raises(SRAMOverflowError, match=r"sram_size=12500 \(the default, 100000 bytes of the dtype\); "
                                                r"pass a larger sram_size="):
        flash2.forward(Q, Q, Q, dtype_bytes=8)
    with pytest.raises(SRAMOverflowError, match=r"more than sram_size=16000; pass a larger sram_size="):
        flash2.forward(Q, Q, Q, dtype_bytes=8, sram_size=16000)
    assert flash2.forward(Q, Q, Q, dtype_bytes=8, sram_size=20000).O.shape == (4, 4000)
