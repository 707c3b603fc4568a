"""The simulated memory counts every element it moves and measures the on-chip footprint."""

import numpy as np
import pytest

from flashref.memory import IOReport, Memory, SRAMOverflowError, TensorIO


def test_load_store_count_elements_and_events():
    mem = Memory(sram_size=100, lead_shape=(3,))
    mem.input("Q", np.arange(3 * 10 * 4, dtype=float).reshape(3, 10, 4))
    tile = mem.load("Q", rows=(8, 12), as_="Q_i", line="l.8")  # ragged: only rows 8, 9 exist
    assert tile.shape == (3, 2, 4)
    assert mem.report().reads == 3 * 2 * 4
    mem.store("Q", tile * 0, rows=(8, 10), line="l.12")
    assert mem.report().writes == 24
    assert np.all(mem.result("Q")[:, 8:] == 0)
    e = mem.events[0]
    assert (e.tensor, e.rows, e.cols, e.direction, e.elements, e.line) == ("Q", (8, 10), (0, 4), "read", 24, "l.8")


def test_alloc_counts_writes_and_vectors_index_rows():
    mem = Memory(lead_shape=())
    mem.alloc("m", (7,), -np.inf)
    assert mem.report().writes == 7
    m_i = mem.load("m", rows=(4, 8))
    assert m_i.shape == (3,) and np.all(np.isneginf(m_i))


def test_footprint_is_measured_and_overflow_names_it():
    mem = Memory(sram_size=10)
    mem.hold("a", np.zeros((2, 3)))
    mem.hold("b", np.zeros(4))
    assert mem.sram_in_use == 10 and mem.peak_sram == 10
    mem.free("b")
    with pytest.raises(SRAMOverflowError, match="11 elements"):
        mem.hold("c", np.zeros(5))


def test_reports_add():
    a = IOReport({"Q": TensorIO(3, 0)}, peak_sram=5)
    b = IOReport({"Q": TensorIO(1, 2), "O": TensorIO(0, 4)}, peak_sram=7)
    c = a + b
    assert (c.reads, c.writes, c.total, c.peak_sram) == (4, 6, 10, 7)
    assert c.by_tensor["Q"].total == 6 and sum([a, b]).total == 10


def test_reports_of_different_precisions_add_their_bytes():
    """A tensor moved in two precisions keeps a row per precision: (a + b).bytes == a.bytes + b.bytes whichever
    comes first (an FP8 forward's 1-byte Q beside its backward's 2-byte Q; reports of dtype_bytes 4 and 2)."""
    from flashref import flash2, iomodel
    r = np.random.default_rng(0)
    Q, K, V, dO = (r.standard_normal((2, 8, 4)) for _ in range(4))
    f8 = flash2.forward(Q, K, V, fp8="e4m3", block_sizes=(4, 4))
    f4 = flash2.forward(Q, K, V, block_sizes=(4, 4), dtype_bytes=4)
    f = flash2.forward(Q, K, V, block_sizes=(4, 4))
    b = flash2.backward(Q, K, V, f.O, dO, f.L, block_sizes=(4, 4))
    for x, y in ((f8.io, b.io), (f4.io, f.io)):
        assert (x + y).bytes == (y + x).bytes == x.bytes + y.bytes
        assert (x + y).total == x.total + y.total
    assert "Q (2 B/elt)" in (f8.io + b.io).by_tensor
    p4 = iomodel.predict("flash2", "forward", Nq=8, Nk=8, d=4, dtype_bytes=4)
    p2 = iomodel.predict("flash2", "backward", Nq=8, Nk=8, d=4)
    assert (p4 + p2).bytes == (p2 + p4).bytes == p4.bytes + p2.bytes


def test_a_store_counts_the_tile_it_writes():
    """A value that broadcasts (a scalar, one head's row) writes the whole tile, and that is what is counted."""
    m = Memory(lead_shape=(2,))
    m.output("O", (4, 3))
    m.store("O", np.ones((2, 1, 3)), rows=(0, 4))
    m.store("O", 5.0)
    assert m.report().by_tensor["O"].writes == 2 * (2 * 4 * 3)


def test_ranges_and_names_are_checked():
    m = Memory()
    m.input("Q", np.ones((6, 2)))
    with pytest.raises(ValueError, match=r"0 <= start <= stop, got \(-2, 5\)"):
        m.load("Q", rows=(-2, 5))
    with pytest.raises(ValueError, match="start <= stop"):
        m.load("Q", rows=(4, 2))
    with pytest.raises(KeyError, match="HBM has no tensor 'X' to load .* place it with input, output or init"):
        m.load("X")


# ----------------------------------------------------------------- bad input to the simulated machine


def _mem():
    m = Memory(lead_shape=(2,))
    m.input("Q", np.ones((2, 8, 4)))
    return m


@pytest.mark.parametrize("kwargs,exc,msg", [
    (dict(sram_size=-5), ValueError, "sram_size: expected a positive integer"),
    (dict(sram_size=1.5), TypeError, "sram_size: expected a positive integer"),
    (dict(sram_size="big"), TypeError, "sram_size: expected a positive integer"),
    (dict(dtype_bytes=-2), ValueError, "dtype_bytes: expected a positive integer"),
    (dict(dtype_bytes=0), ValueError, "dtype_bytes"),
    (dict(lead_shape=2), TypeError, "lead_shape"),
])
def test_memory_checks_its_parameters(kwargs, exc, msg):
    with pytest.raises(exc, match=msg):
        Memory(**kwargs)


@pytest.mark.parametrize("verb,exc,msg", [
    (lambda m: m.load("Q", rows=(0,)), TypeError, r"rows of 'Q': expected a range \(start, stop\) of two integers"),
    (lambda m: m.load("Q", rows=3), TypeError, r"rows of 'Q': expected a range"),
    (lambda m: m.load("Q", rows=(1.5, 3)), TypeError, r"rows of 'Q': .* two integers, got \(1.5, 3\)"),
    (lambda m: m.load("Q", cols=(0, True)), TypeError, "cols of 'Q'"),
    (lambda m: m.store("Q", np.ones((2, 3, 4)), rows=(0, 2)), ValueError,
     r"value: shape \(2, 3, 4\) does not fit the tile of 'Q' at rows=\(0, 2\), cols=\(0, 4\)"),
    (lambda m: m.store("Z", np.ones((5, 3, 4))), ValueError, r"Z: shape \(5, 3, 4\) is not the memory's leading axes"),
    (lambda m: m.store("Z", np.float64(1.0)), ValueError, "Z: shape"),
    (lambda m: m.init("O", (), 0.0), ValueError, r"shape of 'O': expected \(rows,\) or \(rows, cols\)"),
    (lambda m: m.output("O", (2, 3, 4)), ValueError, "shape of 'O'"),
    (lambda m: m.init("O", (-1, 2), 0.0), ValueError, "shape of 'O': expected a non-negative integer"),
    (lambda m: m.init("O", 4, 0.0), TypeError, r"shape of 'O': expected a tuple \(rows,\)"),
    (lambda m: m.result("nope"), KeyError, "HBM has no tensor 'nope' to return .it holds Q."),
])
def test_memory_verbs_name_the_bad_argument(verb, exc, msg):
    with pytest.raises(exc, match=msg):
        verb(_mem())


def test_memory_takes_numpy_integers_and_lists():
    m = Memory(sram_size=np.int64(1000), dtype_bytes=np.int32(4), lead_shape=[2])
    m.input("Q", np.ones((2, 8, 4)))
    assert m.load("Q", rows=(np.int64(2), np.int32(5))).shape == (2, 3, 4)
    m.init("O", [8, np.int64(4)], 0.0)
    m.store("O", np.ones((2, 2, 4)), rows=[0, 2])
    assert m.report().bytes == 4 * (2 * 3 * 4 + 2 * 8 * 4 + 2 * 2 * 4)


def test_a_broadcast_input_is_kept_as_a_read_only_view():
    """One (Nq, Nk) bias shared by every head: was copied in full, heads×Nq×Nk (1.35 GB at B=4, H=16, N=1024).
    It is kept as a view now; its IO still counts the logical shape, and a store into it is refused by name."""
    import tracemalloc

    b = np.random.default_rng(0).standard_normal((256, 256))
    B = np.broadcast_to(b, (64, 256, 256))  # 32 MiB if materialised
    mem = Memory(lead_shape=(64,))
    tracemalloc.start()
    mem.input("bias", B)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < b.nbytes  # not a copy of B, nor even of b
    tile = mem.load("bias", rows=(8, 24), cols=(100, 132), as_="B_ij")
    np.testing.assert_array_equal(tile, B[:, 8:24, 100:132])
    assert mem.report().reads == 64 * 16 * 32  # every head's tile, as a kernel reads it
    with pytest.raises(ValueError, match="^bias: a broadcast input, kept as a read-only view"):
        mem.store("bias", tile, rows=(8, 24), cols=(100, 132))
    assert b.flags.writeable  # the caller's array is left as it was


def test_a_contiguous_input_is_still_copied():
    X = np.arange(12.0).reshape(3, 4)
    mem = Memory()
    mem.input("X", X)
    X[:] = -1  # the caller changes its array afterwards: HBM keeps what was placed
    np.testing.assert_array_equal(mem.load("X"), np.arange(12.0).reshape(3, 4))
    mem.store("X", np.zeros((3, 4)))  # and it can be stored into
