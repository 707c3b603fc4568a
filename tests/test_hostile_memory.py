"""A hostile pass over the counted memory, the masks, dropout, the softmax helpers and block-sparse attention.

Each test below the first group pins a defect that was fixed (what the input did before is in its docstring);
the last group checks block-sparse attention against the float64 reference and the closed form on random masks.
"""

import ast
import pathlib
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flashref import blocksparse, dropout, flash1, iomodel, masks, softmax, standard
from flashref.memory import Memory, SRAMOverflowError

PKG = pathlib.Path(__file__).resolve().parent.parent / "flashref"


# ----------------------------------------------------------------------------- the grader's bundle


def _bundle_modules():
    """The modules the autograder bundle ships (grading/release.py's BUNDLE), as paths under flashref/ without .py."""
    from flashref.grading.release import BUNDLE

    out = {"__init__"}  # written by the release
    for name in BUNDLE:
        p = PKG / name
        files = [f for f in p.rglob("*.py") if "solutions" not in f.parts] if p.is_dir() else [p]
        out |= {f.relative_to(PKG).with_suffix("").as_posix() for f in files}
    return out


def test_the_grader_bundle_imports_at_load_only_what_it_ships():
    """The bundle ships the grader, the memory, the masks and dropout, not the algorithms. memory.py's
    ``from .problem import ...`` and grading's ``from ..problem import _seed`` made ``import flashref.grading`` a
    ModuleNotFoundError there (it passed here because the editable install finds problem.py). Every import a shipped
    module makes when it loads (imports inside functions run only for the commands that need them) must be shipped."""
    shipped = _bundle_modules()
    missing = []
    for mod in sorted(shipped - {"__init__"}):
        path = PKG / f"{mod}.py"
        package = pathlib.PurePosixPath(mod).parent  # grading/__init__ and grading/lab: grading; memory: .
        for node in ast.parse(path.read_text()).body:  # module level only
            if isinstance(node, ast.ImportFrom) and node.level:
                base = package
                for _ in range(node.level - 1):
                    base = base.parent
                targets = [f"{base}/{node.module.replace('.', '/')}" if node.module else str(base)]
                # from . import a: a submodule, unless a package's own __init__ (shipped) defines it; the bundle's
                # flashref/__init__ is the release's own and defines nothing
                if not node.module and (str(base) == "." or f"{base}/__init__" not in shipped):
                    targets = [f"{base}/{a.name}" for a in node.names]
                for t in targets:
                    t = t.removeprefix("./")
                    if t not in shipped and f"{t}/__init__" not in shipped:
                        missing.append(f"{mod}: {ast.unparse(node)}")
            elif isinstance(node, (ast.Import, ast.ImportFrom)) and "flashref" in ast.unparse(node):
                missing.append(f"{mod}: {ast.unparse(node)} (absolute)")
    assert not missing, missing
    assert {"_numbers", "memory", "masks", "dropout", "grading/__init__"} <= shipped


# ----------------------------------------------------------------------------- Memory


def test_a_refused_hold_changes_nothing_and_says_what_is_held():
    """Before, the value that overflowed stayed held: sram_in_use read 13 > sram_size = 10 after the error, and every
    later hold failed. A reuse that overflowed had already dropped ``old``; a replacement had dropped the original."""
    m = Memory(sram_size=10)
    m.hold("a", np.zeros(8))
    with pytest.raises(SRAMOverflowError, match=r"13 elements .* holding b=5 beside what is held \(a=8\)"):
        m.hold("b", np.zeros(5))
    assert (m.sram_in_use, m.peak_sram) == (8, 8)
    m.hold("c", np.zeros(2))  # still room for 2
    with pytest.raises(SRAMOverflowError, match=r"holding a=9 beside what is held \(c=2\)"):
        m.hold("a", np.zeros(9))  # a replacement that does not fit keeps the original
    with pytest.raises(SRAMOverflowError, match=r"holding P=11 beside what is held \(a=8\)"):
        m.reuse("c", "P", np.zeros(11))  # a reuse that does not fit keeps old
    assert m.sram_in_use == 10 and m.peak_sram == 10
    m.reuse("c", "P", np.zeros(2))  # the slot of c taken: no growth
    assert m.sram_in_use == 10


def test_a_value_without_the_heads_axes_counts_every_element():
    """Before, a value with no more axes than the heads counted 1 element a head whatever its size: a student's
    ``mem.hold("junk", np.zeros(100000))`` beside (2,) heads passed the grader's footprint check, where the same
    array shaped (1, 100000) was refused. A value's leading axes are the heads' only where each is the head axis's
    size or 1; otherwise every element it has is on chip."""
    m = Memory(sram_size=100, lead_shape=(2,))
    with pytest.raises(SRAMOverflowError, match=r"holding junk=100000 "):
        m.hold("junk", np.zeros(100000))
    with pytest.raises(SRAMOverflowError, match=r"holding junk=250 "):
        m.hold("junk", np.zeros((5, 50)))  # 5 is not the head axis: not 50 a head
    m.hold("m", np.zeros(2))  # one number a head
    m.hold("m_shared", np.float64(0.0))  # a scalar
    m.hold("Q_i", np.zeros((2, 3, 4)))  # a tile a head
    m.hold("K_j", np.zeros((1, 3, 4)))  # one tile shared by both heads
    assert m.sram_in_use == 1 + 1 + 12 + 12
    empty = Memory(sram_size=10, lead_shape=(0, 3))
    empty.hold("Q_i", np.zeros((0, 3, 2, 4)))  # an empty batch holds what one head would
    assert empty.sram_in_use == 8


def test_a_load_that_does_not_fit_counts_no_reads():
    """Before, a refused load had counted its reads (and an event) before the hold raised."""
    m = Memory(sram_size=8)
    m.input("Q", np.ones((4, 4)))
    with pytest.raises(SRAMOverflowError):
        m.load("Q", rows=(0, 4), as_="Q_i")
    assert m.report().total == 0 and m.events == [] and m.sram_in_use == 0
    m.load("Q", rows=(0, 2), as_="Q_i")
    assert m.report().reads == 8


def test_loading_a_name_twice_counts_both_transfers_and_holds_one_tile():
    m = Memory(sram_size=8)
    m.input("Q", np.ones((4, 4)))
    m.load("Q", rows=(0, 2), as_="Q_i")
    m.load("Q", rows=(2, 4), as_="Q_i")  # the second tile replaces the first on chip
    assert m.report().reads == 16 and m.sram_in_use == 8 == m.peak_sram


def test_store_refuses_lossy_and_non_numeric_values():
    """Before: a complex value lost its imaginary part with only a ComplexWarning, a float into an integer tensor was
    truncated silently, and a string was refused as a 'shape () does not fit' (or, stored whole, kept in HBM)."""
    m = Memory()
    m.output("O", (2, 2))
    m.output("idx", (2,), dtype=np.int64)
    with pytest.raises(TypeError, match=r"value: dtype complex128 cannot be stored into 'O' of dtype float64"):
        m.store("O", np.ones((2, 2)) * 1j)
    with pytest.raises(TypeError, match=r"value: dtype float64 cannot be stored into 'idx' of dtype int64"):
        m.store("idx", np.array([0.5, 1.5]))
    for bad in ("ab", np.array([None, 1.0])):
        with pytest.raises(TypeError, match="value: expected a numeric array"):
            m.store("O", bad)
        with pytest.raises(TypeError, match="value: expected a numeric array"):
            m.store("new", bad)
    with pytest.raises(TypeError, match="S: expected a numeric array, got dtype <U1"):
        m.input("S", np.array(["a", "b"]))
    assert m.report().total == 0
    m.store("O", np.ones((2, 2), np.float32))  # a narrower float, or an int, widens without loss
    m.store("idx", np.array([1, 2], np.int32))
    m32 = Memory()
    m32.output("O", (2,), dtype=np.float32)
    m32.store("O", np.array([0.1, 0.2]))  # float64 to a float32 output: a precision, not a kind, and allowed
    assert m.report().writes == 6 and m32.report().writes == 2


def test_a_vector_has_no_columns():
    """Before, ``cols`` was ignored for a vector: load("m", cols=(0, 99)) returned the rows without a word."""
    m = Memory()
    m.init("m", (5,), 0.0)
    for verb in (lambda: m.load("m", rows=(0, 2), cols=(0, 99)), lambda: m.store("m", 1.0, cols=(0, 1))):
        with pytest.raises(ValueError, match=r"cols of 'm': 'm' is a vector .* pass cols=None"):
            verb()
    assert m.load("m", rows=(0, 2)).shape == (2,)


def test_io_report_totals_are_the_sum_of_its_lines():
    rng = np.random.default_rng(1)
    Q, K, V = (rng.standard_normal((2, 9, 3)) for _ in range(3))
    io = flash1.forward(Q, K, V, block_sizes=(4, 2), causal=True).io
    assert io.reads == sum(t.reads for t in io.by_tensor.values()) == sum(r for r, _ in io.by_line.values())
    assert io.writes == sum(t.writes for t in io.by_tensor.values()) == sum(w for _, w in io.by_line.values())
    assert io.bytes == 2 * io.total and f"{io.total:,}" in str(io)


# ----------------------------------------------------------------------------- masks


def test_causal_mask_refuses_sizes_that_are_not_counts():
    """Before: causal_mask(2.5, 3) was a (3, 3) mask, causal_mask(True, 3) a (1, 3) one, causal_mask(-1, 3) (0, 3)."""
    for Nq, exc in ((2.5, TypeError), (True, TypeError), (-1, ValueError), ("3", TypeError)):
        with pytest.raises(exc, match="Nq: expected a non-negative integer"):
            masks.causal_mask(Nq, 3)
    with pytest.raises(TypeError, match="Nk"):
        masks.causal_mask(3, np.float64(2))
    assert masks.causal_mask(np.int64(3), np.int32(2)).shape == (3, 2)
    assert masks.causal_mask(0, 4).shape == (0, 4)


def test_fully_masked_rows_and_columns_give_zeros_not_nan():
    rng = np.random.default_rng(2)
    Q, K, V = (rng.standard_normal((6, 3)) for _ in range(3))
    M = np.ones((6, 6), bool)
    M[2], M[:, 4] = False, False
    ref = standard.forward(Q, K, V, mask=M).O
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = flash1.forward(Q, K, V, mask=M, block_sizes=(2, 2)).O
    assert np.all(ref[2] == 0) and np.all(out[2] == 0) and np.abs(out - ref).max() < 1e-12


# ----------------------------------------------------------------------------- dropout


def test_dropout_checks_seed_ranges_and_leading_axes():
    """Before: int(seed) took 1.5, True, "3" and 3.7 as seeds; rows=(3, 1) gave an empty mask, rows=(-2, 1) a raw
    OverflowError; lead_shape=(-1,) an empty mask and lead_shape=3 "'int' object is not iterable"."""
    for seed in (1.5, True, "3", np.float64(3.7), None):
        with pytest.raises(TypeError, match="seed: expected an integer"):
            dropout.uniform(seed, (), (0, 2), (0, 2))
    for kw, exc, msg in ((dict(rows=(3, 1)), ValueError, r"rows: .* 0 <= start <= stop, got \(3, 1\)"),
                         (dict(rows=(-2, 1)), ValueError, "rows: expected a non-negative integer"),
                         (dict(cols=(0, 1.5)), TypeError, "cols: expected a non-negative integer"),
                         (dict(cols=3), TypeError, r"cols: expected a range \(start, stop\)"),
                         (dict(lead_shape=(-1,)), ValueError, "lead_shape"),
                         (dict(lead_shape=3), TypeError, "lead_shape"),
                         (dict(lead_shape=(True,)), TypeError, "lead_shape")):
        args = dict(seed=0, lead_shape=(), rows=(0, 2), cols=(0, 2)) | kw
        with pytest.raises(exc, match=msg):
            dropout.keep_mask(args["seed"], 0.5, args["lead_shape"], args["rows"], args["cols"])


def test_dropout_seeds_at_the_edges_of_64_bits_and_numpy_integers():
    u = lambda s: dropout.uniform(s, (2,), (0, 3), (0, 5))  # noqa: E731
    assert np.array_equal(u(2 ** 64 - 1), u(-1)) and np.array_equal(u(2 ** 64), u(0))
    assert np.array_equal(u(np.uint64(2 ** 64 - 1)), u(-1)) and np.array_equal(u(np.int32(7)), u(7))
    assert not np.array_equal(u(2 ** 63), u(0))
    assert dropout.uniform(0, (0, 3), (0, 2), (0, 4)).shape == (0, 3, 2, 4)  # an empty batch
    assert dropout.keep_mask(0, 0.0, (2,), (0, 50), (0, 50)).all()  # p = 0 keeps everything
    with pytest.raises(ValueError, match=r"dropout_p: expected a dropout probability in \[0, 1\)"):
        standard.forward(*(np.ones((2, 2)),) * 3, dropout_p=1.0)  # p = 1: refused, never a 0/0


@given(st.integers(-2 ** 63, 2 ** 64 - 1), st.lists(st.integers(0, 30), max_size=4),
       st.lists(st.integers(0, 30), max_size=4))
@settings(max_examples=30)
def test_keep_mask_is_the_same_whatever_the_rows_and_cols_split(seed, row_cuts, col_cuts):
    """Any cuts, not a regular grid: ragged, empty and single-entry tiles included."""
    whole = dropout.keep_mask(seed, 0.4, (2,), (0, 30), (0, 30))
    rs, cs = sorted({0, 30, *row_cuts}), sorted({0, 30, *col_cuts})
    tiled = np.zeros_like(whole)
    for r0, r1 in zip(rs, rs[1:]):
        for c0, c1 in zip(cs, cs[1:]):
            tiled[:, r0:r1, c0:c1] = dropout.keep_mask(seed, 0.4, [2], (np.int64(r0), r1), [c0, c1])
    assert np.array_equal(whole, tiled)


# ----------------------------------------------------------------------------- softmax


def test_merge_refuses_states_that_are_not_states():
    """Before: merge(inf, 1, 3, 2) and merge(nan, 1, 3, 2) returned NaN (with a RuntimeWarning for +inf), a NaN or
    negative ℓ came back as a wrong sum, and strings raised numpy's UFuncTypeError."""
    for args, name in (((np.inf, 1.0, 3.0, 2.0), "m1"), ((0.0, 1.0, np.nan, 2.0), "m2"),
                       ((0.0, -1.0, 0.0, 1.0), "l1"), ((0.0, 1.0, 0.0, np.nan), "l2"), (("a", 1.0, 0.0, 1.0), "m1")):
        with pytest.raises((ValueError, TypeError), match=name):
            softmax.merge(*args)


def test_softmax_of_scores_spanning_more_than_the_float_range_is_exact_and_quiet():
    """Before: a RuntimeWarning (overflow in subtract) from safe_softmax, softmax_state and merge; the results
    were right, since x − m rounds to -inf and e^{-inf} = 0, so the warning only alarmed."""
    x = np.array([[1.7e308, -1.7e308, 1.0]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert np.array_equal(softmax.safe_softmax(x), [[1.0, 0.0, 0.0]])
        assert np.array_equal(softmax.online_softmax(x, 1), [[1.0, 0.0, 0.0]])
        assert softmax.softmax_state(x[0]) == (1.7e308, 1.0)
        assert softmax.merge(1e308, 1.0, -1e308, 1.0) == (1e308, 1.0)
        assert np.array_equal(softmax.safe_softmax(np.array([[60000, -60000]], np.float16)), [[1.0, 0.0]])
        assert softmax.merge(-np.inf, 0.0, -np.inf, 0.0) == (-np.inf, 0.0)  # two empty states


def test_softmax_helpers_on_empty_rows_and_bad_scores():
    """Before: safe_softmax and safe_max of an empty row raised numpy's 'zero-size array to reduction'; a 0-d array
    was an IndexError for softmax_state and online_softmax (and 1.0 for safe_softmax); a complex array lost its
    imaginary part with a ComplexWarning; softmax_state of an empty float32 block gave float64."""
    assert softmax.safe_softmax(np.zeros((3, 0))).shape == (3, 0)
    assert softmax.online_softmax(np.zeros((3, 0))).shape == (3, 0)
    assert np.array_equal(softmax.safe_max(np.zeros((2, 0))), np.full((2, 1), -np.inf))
    m, l = softmax.softmax_state(np.zeros((2, 0), np.float32))
    assert m.dtype == l.dtype == np.float32 and np.all(np.isneginf(m)) and np.all(l == 0)
    for f in (softmax.safe_softmax, softmax.softmax_state, softmax.online_softmax):
        with pytest.raises(ValueError, match="at least one axis"):
            f(np.float64(3.0))
        for bad in (np.array([[1 + 1j, 2]]), np.array([["a"]]), np.array([[True, False]])):
            with pytest.raises(TypeError, match="expected real scores"):
                f(bad)


# ----------------------------------------------------------------------------- block-sparse


@st.composite
def sparse_cases(draw):
    lead = draw(st.sampled_from([(), (2,), (1, 2)]))
    Nq, Nk, d = draw(st.integers(1, 11)), draw(st.integers(1, 11)), draw(st.integers(1, 4))
    Br, Bc = draw(st.integers(1, 5)), draw(st.integers(1, 5))
    g = blocksparse.grid(Nq, Nk, d, block_sizes=(Br, Bc))
    M = np.array(draw(st.lists(st.booleans(), min_size=g.Tr * g.Tc, max_size=g.Tr * g.Tc))).reshape(g.Tr, g.Tc)
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 32 - 1)))
    Q, dO = (rng.standard_normal(lead + (Nq, d)) for _ in range(2))
    K, V = (rng.standard_normal(lead + (Nk, d)) for _ in range(2))
    causal = draw(st.booleans())
    return dict(Q=Q, K=K, V=V, dO=dO, M=M, g=g, opts=dict(block_sizes=(np.int64(Br), Bc), causal=causal), lead=lead)


@given(sparse_cases())
@settings(max_examples=30)
def test_blocksparse_backward_equals_the_float64_reference_on_random_masks(c):
    Q, K, V, dO, M, g, opts = c["Q"], c["K"], c["V"], c["dO"], c["M"], c["g"], c["opts"]
    em = blocksparse.element_mask(M, g.Br, g.Bc, g.Nq, g.Nk)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fwd = blocksparse.forward(Q, K, V, M, **opts)
        bwd = blocksparse.backward(Q, K, V, fwd.O, dO, fwd.l, fwd.m, M, **opts)
    ref = standard.forward(Q, K, V, mask=em, causal=opts["causal"])
    rb = standard.backward(Q, K, V, dO, ref.P, mask=em, causal=opts["causal"])
    assert np.abs(fwd.O - ref.O).max() <= 1e-12
    for got, want in ((bwd.dQ, rb.dQ), (bwd.dK, rb.dK), (bwd.dV, rb.dV)):
        assert got.shape == want.shape and np.isfinite(got).all()
        assert np.abs(got - want).max() <= 1e-10 * max(1.0, np.abs(want).max())
    heads = int(np.prod(c["lead"])) if c["lead"] else 1
    for direction, io in (("forward", fwd.io), ("backward", bwd.io)):
        pred = iomodel.predict("blocksparse", direction, Nq=g.Nq, Nk=g.Nk, d=Q.shape[-1], heads=np.int64(heads),
                               block_mask=M, **opts)
        assert (pred.reads, pred.writes, pred.by_line) == (io.reads, io.writes, io.by_line)


def test_blocksparse_all_ones_is_flash_attention_and_an_empty_batch_is_empty():
    rng = np.random.default_rng(3)
    Q, K, V, dO = (rng.standard_normal((2, 9, 3)) for _ in range(4))
    ones = np.ones((3, 5), bool)
    f, f1 = blocksparse.forward(Q, K, V, ones, block_sizes=(3, 2)), flash1.forward(Q, K, V, block_sizes=(3, 2))
    b = blocksparse.backward(Q, K, V, f.O, dO, f.l, f.m, ones, block_sizes=(3, 2))
    b1 = flash1.backward(Q, K, V, f1.O, dO, f1.l, f1.m, block_sizes=(3, 2))
    assert np.array_equal(f.O, f1.O) and np.array_equal(b.dK, b1.dK) and (f.io.total, b.io.total) == (f1.io.total,
                                                                                                         b1.io.total)
    E = np.zeros((0, 2, 9, 3))
    fe = blocksparse.forward(E, E, E, ones, block_sizes=(3, 2))
    be = blocksparse.backward(E, E, E, fe.O, E, fe.l, fe.m, ones, block_sizes=(3, 2))
    assert fe.O.shape == be.dQ.shape == (0, 2, 9, 3) and fe.l.shape == (0, 2, 9) and fe.io.total == be.io.total == 0
    with pytest.raises(TypeError, match="unknown option 'block_size'; valid options are alibi_slopes, bias, block_s"):
        blocksparse.forward(Q, K, V, ones, block_size=(3, 2))
    with pytest.raises(ValueError, match=r"block_mask: expected shape \(Tr, Tc\) = \(3, 5\)"):
        blocksparse.forward(Q, K, V, ones.T, block_sizes=(3, 2))
