"""The graded cases catch the wrong solutions they are there for: each is the reference solution with one thing
left out, which scores full marks without the case and loses the correctness points with it.

Exercise 6 (Algorithm 5 is Algorithm 2 behind ``if M_ij ≠ 0``, so its tile step has MASK and dropout): a case
each for causal, a mask (with a fully masked row) and dropout. Exercise 8: a case with S = 1 (nothing to merge),
one with S = Tc (one key tile per split), and, as decoding.forward takes every algorithm's MASK and dropout, a case
each for causal (top-left), a mask and dropout, on which decoding.forward agrees with the grader's oracle and
moves the budget. Exercise 1 is Algorithm 0, which has no MASK and no dropout: it has
no such case, and its reference ignores ``spec.causal``, ``spec.mask`` and ``spec.dropout_p``.
"""

import math
from pathlib import Path

import numpy as np
import pytest

from flashref import decoding, grading
from flashref.grading import _close, budgets

SOLUTIONS = Path(budgets.SOLUTIONS)


def reference_without(tmp_path, ex, *, first_line=None, old=None, new=None) -> Path:
    """The reference solution of ``ex`` with ``first_line`` put first in its body, or ``old`` replaced by ``new``."""
    text = (SOLUTIONS / ex.solution).read_text()
    if first_line is not None:
        text = text.replace("    # BEGIN SOLUTION\n", f"    # BEGIN SOLUTION\n    {first_line}\n", 1)
    if old is not None:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    path = tmp_path / ex.solution
    path.write_text(text)
    return path


def case_number(ex, **want) -> int:
    """The index of the one case of ``ex`` that has the keys and values ``want``."""
    found = [k for k, c in enumerate(ex.cases) if all(c.get(key) == v for key, v in want.items())]
    assert len(found) == 1, (ex.name, want, found)
    return found[0]


def failing(rep) -> list[int]:
    return [k for k, c in enumerate(rep.cases) if not c["correct"]]


@pytest.mark.parametrize("number", ["06", "08"])
def test_the_reference_passes_every_case(number):
    rep = grading.grade(number, SOLUTIONS / grading.get(number).solution, seed=0)
    assert rep.points == rep.max_points and failing(rep) == [], rep


# (the exercise, the option, the line that makes the reference ignore it, the case(s) that catch it)
IGNORED = [
    ("06", "causal", "spec.causal = False", {"causal": True}),  # spec.tile_mask without the causal part
    ("06", "mask", "spec.mask = None", {"masked_row": 4}),  # spec.tile_mask without the mask (and its empty row)
    ("06", "dropout", "spec.dropout_p = 0.0", {"dropout_p": 0.2}),  # no P̃_ij ∘ Z_ij at Alg.5 l.14
    # exercise 8: the split pass's tile step, as decoding._split_item's (MASK, then P̃_ij^dropped)
    ("08", "causal", "spec.causal = False", {"causal": True}),
    # the mask's cases: its fully masked row, and the row blind to split 0 (whose merge the mask makes)
    ("08", "mask", "spec.mask = None", ({"masked_row": 1}, {"blind_keys": (2, 6)})),
    ("08", "dropout", "spec.dropout_p = 0.0", {"dropout_p": 0.2}),
]


@pytest.mark.parametrize("number, option, line, case", IGNORED, ids=[f"{i[0]}-{i[1]}" for i in IGNORED])
def test_ignoring_an_option_fails_its_case(tmp_path, number, option, line, case):
    ex = grading.get(number)
    rep = grading.grade(number, reference_without(tmp_path, ex, first_line=line), seed=0)
    assert rep.parts["correctness"] == (0, 5) and rep.points == 0, rep
    cases = case if isinstance(case, tuple) else (case,)
    assert failing(rep) == [case_number(ex, **c) for c in cases], rep  # those alone: no other case had caught it


def test_split_kv_cases_are_what_decoding_forward_computes_and_moves():
    """The package's split-KV forward on each exercise-8 case's data and options (causal, mask, dropout included)
    gives the grader's oracle's O, m, l and, with S > 1, its partials (as the grader checks them) and moves the
    reference's budget, tensor by tensor: the exercise is decoding.forward, and its reference does what the package
    does."""
    ex = grading.get("08")
    rng = np.random.default_rng(0)
    options = set()
    for case, budget in zip(ex.cases, budgets.budgets(ex.name)):
        st = ex.setup(case, rng)
        s = st.spec
        res = decoding.forward(st.inputs["Q"], st.inputs["K"], st.inputs["V"], scale=s["scale"], causal=s["causal"],
                               mask=s["mask"], dropout_p=s["dropout_p"], seed=s["seed"],
                               block_sizes=(s["Br"], s["Bc"]), num_splits=s["num_splits"])
        assert res.num_splits == case["num_splits"] and res.block_sizes == (case["Br"], case["Bc"]), case
        for name, want in st.expected.items():
            got = getattr(res, name)
            if name.endswith("_partial"):  # decoding's (..., S, Nq[, d]) as the exercise lays it out: row s·Nq + r
                lead = len(s["lead_shape"])
                got = got.reshape(got.shape[:lead] + (-1,) + got.shape[lead + 2:])
            assert _close(got, want), (case, name)
        assert {k: [t.reads, t.writes] for k, t in res.io.by_tensor.items()} == budget["by_tensor"], case
        options |= {k for k in ("causal", "masked_row", "blind_keys", "dropout_p") if case.get(k) is not None}
    assert options == {"causal", "masked_row", "blind_keys", "dropout_p"}


def test_split_kv_with_one_split_writes_O_m_l(tmp_path):
    """S = 1: a solution that always writes the partials and, with nothing to merge, stops there leaves O, m, l
    NaN; one that merges the single partial anyway is correct but moves more than the budget."""
    ex = grading.get("08")
    one = case_number(ex, num_splits=1)
    partials_only = reference_without(tmp_path, ex, old="            if S == 1:\n",
                                      new="            if False:  # the partials, even for S = 1\n")
    rep = grading.grade("08", partials_only, seed=0)
    assert rep.parts["correctness"] == (0, 5) and failing(rep) == [one], rep
    assert f"case {one + 1} (" in rep.message and "NaN" in rep.message, rep.message
    merged = partials_only.read_text().replace("    if S == 1:\n        return\n", "")
    partials_only.write_text(merged)
    rep = grading.grade("08", partials_only, seed=0)
    assert rep.correct and not rep.io_ok and rep.points == 7, rep
    assert not rep.cases[one]["io_ok"] and all(c["io_ok"] for k, c in enumerate(rep.cases) if k != one), rep


def test_split_kv_with_one_key_tile_per_split(tmp_path):
    """S = Tc: each split is one tile, the first ragged; a tile clipped at Nk instead of the split's end reads
    keys of the next split (the cases with several tiles per split catch it too)."""
    ex = grading.get("08")
    tc = [k for k, c in enumerate(ex.cases) if c["num_splits"] == math.ceil(c["Nk"] / c["Bc"]) > 1]
    assert len(tc) == 1 and ex.cases[tc[0]]["Nk"] % ex.cases[tc[0]]["num_splits"], ex.cases
    rep = grading.grade("08", reference_without(tmp_path, ex, old="min(c0 + Bc, k1)", new="min(c0 + Bc, Nk)"),
                        seed=0)
    assert rep.parts["correctness"] == (0, 5) and tc[0] in failing(rep), rep


# Slips a hostile review found passing before the cases that catch them (2026-11-28): each is the reference with
# one line changed, and each must lose the correctness points.
SLIPS = [
    # the merge guards part 1's -inf instead of the merged m's: wrong where part 1 is empty and part 2 is not
    ("02", "m_safe = np.where(np.isneginf(m), 0.0, m)", "m_safe = np.where(np.isneginf(m1), 0.0, m)"),
    # the same slip in exercise 8's merge, on the running m: wrong where split 0 is empty and a later one is not
    ("08", "m_safe = np.where(np.isneginf(m_new), 0.0, m_new)\n            a, b",
     "m_safe = np.where(np.isneginf(m), 0.0, m_new)\n            a, b"),
    # the lab's K and V loads masked past Nq: wrong wherever Nq != Nk
    ("09", "kv_mask = cols[:, None] < Nk", "kv_mask = cols[:, None] < Nq"),
]


@pytest.mark.parametrize("number, old, new", SLIPS, ids=[s[0] for s in SLIPS])
def test_plausible_slips_lose_the_correctness_points(tmp_path, number, old, new):
    if number == "09":
        pytest.importorskip("triton")
    ex = grading.get(number)
    rep = grading.grade(number, reference_without(tmp_path, ex, old=old, new=new), seed=0)
    assert rep.parts["correctness"][0] == 0 and rep.points == 0, rep
