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
