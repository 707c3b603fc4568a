"""A student's pass over the exercises: what the exercise text promises is what the grader does, and the report
says in words which tensor's IO is off and by how much, and shows what the student's code printed."""

import json
import os
import re

import numpy as np
import pytest

from flashref import dropout, masks
from flashref.grading import budgets, grade, notebooks
from flashref.grading._student import _Spec
from flashref.grading.exercises import EXERCISES
from flashref.grading.report import Report

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Exercise 2 as the text asks for it: row blocks of spec.Br, stored into the allocated outputs (no mem.init),
# m, l, O put into the slots of m1, l1, O1 (the hint). It prints, as a student debugging does.
MERGE = '''import numpy as np


def merge_states(mem, spec):
    print("merging", spec.n, "rows")
    n, Br = spec.n, spec.Br
    for r0 in range(0, n, Br):
        rows = (r0, min(r0 + Br, n))
        m1 = mem.load("m1", rows); l1 = mem.load("l1", rows); O1 = mem.load("O1", rows)
        m2 = mem.load("m2", rows); l2 = mem.load("l2", rows); O2 = mem.load("O2", rows)
        {extra}
        m = np.maximum(m1, m2)
        ms = np.where(np.isfinite(m), m, 0.0)
        a1, a2 = l1 * np.exp(m1 - ms), l2 * np.exp(m2 - ms)
        l = a1 + a2
        O = (a1[..., None] * O1 + a2[..., None] * O2) / np.where(l == 0, 1.0, l)[..., None]
        mem.reuse("m1", "m", m); mem.reuse("l1", "l", l); mem.reuse("O1", "O", O)
        mem.store("m", m, rows); mem.store("l", l, rows); mem.store("O", O, rows)
        mem.free("m2", "l2", "O2", "m", "l", "O")
'''


def _markdown(number) -> str:
    ex = next(e for e in EXERCISES.values() if e.number == number)
    name = f"{number:02d}-{ex.name.split('-', 1)[1]}.ipynb"
    with open(os.path.join(ROOT, "notebooks", "exercises", name)) as f:
        nb = json.load(f)
    return "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown")


def test_the_text_says_what_the_helpers_return_and_they_do():
    """dropout_Z is already 1/(1-p) where kept (a student who rescales again fails the dropout case), and
    tile_mask is True where the query may attend: the text says both, in every memory exercise's notebook."""
    for ex in EXERCISES.values():
        if ex.kind == "memory":
            text = _markdown(ex.number)
            assert "1/(1−p) where kept, 0 where" in text and "True where the" in text, ex.name
            assert "already allocated in HBM" in text, ex.name
    case = {"spec": {"Nq": 3, "Nk": 3, "d": 2, "lead_shape": (1,), "scale": 1.0, "causal": True, "mask": None,
                     "dropout_p": 0.25, "seed": 7, "Br": 2, "Bc": 2}}
    spec = _Spec(case, masks, dropout, np)
    Z = spec.dropout_Z((0, 3), (0, 3))
    assert set(np.unique(Z)) <= {0.0, 1 / 0.75}
    assert spec.tile_mask((0, 2), (0, 2)).tolist() == [[True, False], [True, True]]
    assert spec.tile_mask((2, 3), (0, 2)) is None  # nothing masked in the tile


def test_the_exercise_texts_name_what_a_student_could_not_guess():
    """Exercise 5's cases include dropout (its box has none); exercise 8's partial buffers are allocated (a
    student who mem.init's them loses the IO points); exercise 1's Br, Bc are None; the lab's L is m + log ℓ."""
    assert "dropout_p` > 0, line 10 uses P̃_ij ∘ Z_ij" in _markdown(5)
    assert any(c.get("dropout_p") for c in EXERCISES["05-flash2-causal"].cases)
    assert "do not `mem.init` them" in _markdown(8)
    assert "`spec.Br`, `spec.Bc` are None here" in _markdown(1)
    assert "m + log ℓ (natural log)" in notebooks.LAB
    assert "mem.reuse('O1', 'O', O)" in _markdown(2)


def test_the_merge_as_the_text_asks_gets_full_marks_and_its_prints_are_shown(tmp_path):
    f = tmp_path / "merge.py"
    f.write_text(MERGE.format(extra="pass"))
    rep = grade("02", f, seed=0)
    assert rep.points == rep.max_points == 10, str(rep)
    text = str(rep)
    assert "your code printed (last 2 line(s)):" in text and "  merging 9 rows" in text
    assert "IO that differs" not in text


def test_a_tensor_loaded_twice_is_named_with_its_excess(tmp_path):
    """A correct merge that loads m1 twice per block: IO points lost, and the report says m1's reads are over by
    exactly one extra load of it (its n rows per head, summed over the cases)."""
    f = tmp_path / "merge_twice.py"
    f.write_text(MERGE.format(extra='mem.free("m1"); m1 = mem.load("m1", rows)'))
    rep = grade("02", f, seed=0)
    assert rep.parts["correctness"][0] == 5 and rep.parts["io"][0] == 0, str(rep)
    extra = sum(c["n"] * c["heads"] for c in EXERCISES["02-merge-states"].cases)
    budget = next(r["budget_reads"] for r in rep.table if r["tensor"] == "m1")
    assert f"  m1: reads {budget + extra:,} against a budget of {budget:,} (+{extra:,})" in str(rep)
    assert "l1:" not in str(rep)  # only the tensor that differs


def test_the_io_differences_are_left_out_of_wrong_runs_and_of_exercise_7():
    row = {"tensor": "K", "reads": 9, "writes": 0, "budget_reads": 4, "budget_writes": 0, "ok": False, "over": True}
    case = dict(row, tensor="case 1: (8, 8)")
    assert "IO that differs" not in str(Report("x", "t", correct=False, table=[row]))
    assert "  K: reads 9 against a budget of 4 (+5)" in str(Report("x", "t", correct=True, table=[row]))
    assert "IO that differs" not in str(Report("x", "t", correct=True, table=[case]))


@pytest.mark.parametrize("number", [1, 2, 3, 4, 5, 6, 8])
def test_the_committed_notebooks_hold_the_built_text(number):
    """The notebooks are rebuilt from notebooks.py: its spec paragraph is what the student reads."""
    ex = next(e for e in EXERCISES.values() if e.number == number)
    spec = notebooks.TEXT[number][2]
    assert spec in _markdown(number).replace("\n", " ") or spec in _markdown(number), ex.name


@pytest.mark.parametrize("number", [5, 9])
def test_the_exercise_text_does_not_state_the_causal_skip_test(number):
    """A review: exercise 5's hint gave its skip test (`cols[0] > rows[1] - 1`), the condition the exercise asks the
    student to derive, and its algorithm box and the lab's spec said it in words. The text points the way (what to
    compare, which section to reread) without stating it: neither the reference solution's condition nor a
    comparison of the blocks' bounds is in what the student reads."""
    ex = next(e for e in EXERCISES.values() if e.number == number)
    with open(os.path.join(budgets.SOLUTIONS, ex.solution)) as f:
        solution = f.read()
    # the condition as the reference writes it: exercise 5's `if ...: break`, the lab's loop bound
    condition = (re.search(r"if spec\.causal and (.+):\n\s+break", solution)
                 or re.search(r"hi = (.+) if CAUSAL", solution))
    assert condition, ex.name
    intro, box, spec, hints = notebooks.TEXT.get(number, ("", "", "", []))
    built = notebooks.LAB if ex.kind == "triton" else "\n".join([intro, box, spec, *hints])
    for where, text in (("notebook", _markdown(number)), ("notebooks.py", built)):
        squeezed = re.sub(r"\s+", "", text)
        assert re.sub(r"\s+", "", condition.group(1)) not in squeezed, (where, condition.group(1))
        assert not re.search(r"cols\[0\]\s*[<>]|rows\[1\]\s*-\s*1|[<>]=?\s*rows\[", text), where
        for words in ("later than every query", "last query row"):
            assert words not in " ".join(text.split()), (where, words)
