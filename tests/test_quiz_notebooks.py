"""Every notebook asks before it tells, and the solution copy answers every question correctly.

Reads the committed notebooks (00-12 and the exercises) without executing them:

* every ``quiz.check(ID, answer)`` names a registered question, and the solution copy answers it:
  ``answers.ANSWERS[ID]`` matches the salted hash, and where the notebook holds the answer in a
  ``# BEGIN SOLUTION`` region, that region, run on its own, sets ``answer`` to a correct value and the
  committed output of the cell says "right";
* every registered question is asked in some notebook, and every lesson notebook (00-12) asks at least two
  (00-07 at least three);
* a question's cell comes before the cell that answers it (marked ``# answers ID``), whose committed
  output shows the answer (numbers compared after the question's rounding), and no earlier cell shows
  a distinctive answer (a number of three digits or more, or a non-integer) already.
"""

import ast
import re
from pathlib import Path

import nbformat
import pytest

from flashref import quiz
from flashref.grading.release import strip_solutions
from flashref.grading.solutions.answers import ANSWERS

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb")) + sorted((ROOT / "notebooks" / "exercises").glob("*.ipynb"))
CHECK = re.compile(r"quiz\.check\(\s*['\"]([\w-]+)['\"]")
REVEAL = re.compile(r"^# answers ([\w-]+(?:, [\w-]+)*)", re.M)
REGION = re.compile(r"# BEGIN SOLUTION[^\n]*\n(.*?)# END SOLUTION", re.S)
NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?(?:[eE][+-]?\d+)?")


def _load(path):
    return nbformat.read(path, as_version=4)


def _output(cell) -> str:
    parts = []
    for o in cell.get("outputs", []):
        t = o.get("text") or o.get("data", {}).get("text/plain", "")
        parts.append("".join(t) if isinstance(t, list) else t)
    return "".join(parts)


def _questions(nb):
    """(cell index, question id, cell) of every quiz.check in the notebook."""
    return [(k, qid, c) for k, c in enumerate(nb.cells) if c.cell_type == "code" for qid in CHECK.findall(c.source)]


def _shows(text: str, qid: str, answer) -> bool:
    """Whether ``text`` shows ``answer`` (a number among its numbers after rounding; a word; True/False)."""
    want = quiz._norm(answer, quiz.digits(qid))
    if want in ("yes", "no"):
        return bool(re.search(rf"\b({want}|{'True' if want == 'yes' else 'False'})\b", text, re.I))
    try:
        float(want)
    except ValueError:
        return want in text.lower()
    return any(quiz._norm(tok.rstrip(","), quiz.digits(qid)) == want for tok in NUMBER.findall(text))


def _distinctive(qid: str, answer) -> bool:
    want = quiz._norm(answer, quiz.digits(qid))
    try:
        x = float(want)
    except ValueError:
        return False
    return x != int(x) or abs(x) >= 100


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_every_question_is_answered_by_the_solution_copy(path):
    nb = _load(path)
    for k, qid, cell in _questions(nb):
        assert qid in quiz.QUESTIONS, f"{path.name}: {qid} is not in flashref.quiz.QUESTIONS"
        assert qid in ANSWERS and quiz.digest(qid, ANSWERS[qid]) == quiz.QUESTIONS[qid][2], \
            f"{qid}: answers.ANSWERS does not hold a right answer"
        region = REGION.search(cell.source)
        if region is None:  # exercise notebooks: the committed copy is the student's stub
            assert "answer = None" in cell.source, f"{path.name} cell {k}: {qid} has neither an answer nor a stub"
            continue
        ns = {}
        exec(compile(ast.parse(region.group(1)), f"{path.name}[{k}]", "exec"), {}, ns)  # the region alone
        assert quiz.digest(qid, ns["answer"]) == quiz.QUESTIONS[qid][2], f"{path.name}: wrong answer to {qid}"
        assert f"[{qid}] right" in _output(cell), f"{path.name}: {qid}'s committed output does not say right"
        # the student copy of this cell keeps the check and loses the answer
        stripped = strip_solutions(cell.source)
        assert "answer = None" in stripped and f"{ANSWERS[qid]!r}" not in stripped.split("quiz.check")[0]


def test_every_registered_question_is_asked():
    asked = {qid for p in NOTEBOOKS for _, qid, _ in _questions(_load(p))}
    assert asked == set(quiz.QUESTIONS), set(quiz.QUESTIONS) ^ asked
    lessons = [p for p in NOTEBOOKS if p.parent.name == "notebooks"]
    assert {f"{k:02d}" for k in range(13)} <= {p.name[:2] for p in lessons}
    for p in lessons:
        n = len(_questions(_load(p)))
        assert n >= 2, f"{p.name} asks fewer than two questions"
        assert n >= 3 or p.name[:2] > "07", f"{p.name} asks fewer than three questions"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_questions_are_asked_before_they_are_answered(path):
    nb = _load(path)
    asked = {qid: k for k, qid, _ in _questions(nb)}
    revealed = {}
    for k, c in enumerate(nb.cells):
        if c.cell_type == "code":
            for m in REVEAL.finditer(c.source):
                for qid in m.group(1).split(", "):
                    revealed[qid] = k
    lesson = path.parent.name == "notebooks"
    for qid, k in asked.items():
        if not lesson:
            continue
        assert qid in revealed, f"{path.name}: no cell is marked '# answers {qid}'"
        r = revealed[qid]
        assert k < r, f"{path.name}: {qid} is asked in cell {k}, after the cell that answers it ({r})"
        assert _shows(_output(nb.cells[r]), qid, ANSWERS[qid]), \
            f"{path.name}: the output of cell {r} does not show the answer to {qid}"
        if _distinctive(qid, ANSWERS[qid]):
            early = [j for j in range(k) if nb.cells[j].cell_type == "code"
                     and _shows(_output(nb.cells[j]), qid, ANSWERS[qid])]
            assert not early, f"{path.name}: cells {early} show the answer to {qid} before it is asked"
    assert set(revealed) <= set(asked), f"{path.name}: answers marked for questions it does not ask"


def test_student_copy_of_the_notebooks_keeps_the_questions_without_the_answers(tmp_path):
    from flashref.grading.release import _strip_notebook

    for path in NOTEBOOKS:
        if "# BEGIN SOLUTION" not in path.read_text():
            continue
        out = tmp_path / path.name
        _strip_notebook(str(path), str(out))
        nb = _load(out)
        for _, qid, cell in _questions(nb):
            assert "BEGIN SOLUTION" not in cell.source and "answer = None" in cell.source, (path.name, qid)
            assert not cell.get("outputs"), f"{path.name}: the student copy keeps the output of {qid}'s cell"


def test_check_never_raises(capsys):
    """quiz.check answers a wrong id, an array or a huge int with a message, never an exception."""
    import numpy as np
    assert quiz.check("no-such-question", 1) is None
    quiz.ask("no-such-question")
    assert "no such question" in capsys.readouterr().out
    qid = next(iter(quiz.QUESTIONS))
    assert quiz.check(qid, np.array([40, 1])) is False
    assert quiz.check(qid, 10 ** 400) is False


def test_solution_cells_fold_on_the_site():
    # a reader of the site sees the question and the check's verdict, and opens the answer only on purpose: every
    # cell holding a solution region carries MyST-NB's hide-input tag (test_site checks the built page folds it)
    for path in NOTEBOOKS:
        for cell in _load(path).cells:
            if cell.cell_type == "code" and "# BEGIN SOLUTION" in cell.source:
                assert "hide-input" in cell.metadata.get("tags", []), (path.name, cell.source[:60])


def test_one_number_reads_the_same_in_any_container_and_commas_only_between_thousands():
    """A one-element numpy array was marked wrong where the same torch tensor was right; commas were removed
    anywhere, so "1,1520" was 11520. Several numbers are not one answer, in numpy or torch (torch's .item() raises a
    RuntimeError, which must not reach the student)."""
    import numpy as np
    import torch
    for same in (np.array([201.0]), torch.tensor([201.0]), np.float32(201.0), np.int64(201), 201, "201"):
        assert quiz._norm(same) == "201", same
    assert quiz._norm("11,520") == quiz._norm(11520) and quiz._norm("1,234,567.5") == quiz._norm(1234567.5)
    assert quiz._norm("1,1520") != quiz._norm(11520)
    qid = next(iter(quiz.QUESTIONS))
    assert quiz.check(qid, torch.tensor([40.0, 1.0])) is False


def test_a_number_written_as_a_percentage_a_fraction_or_with_spaced_thousands():
    """"71%" where the question asks for a percentage (or a share), "3/8" where it asks for an exact number between 0
    and 1, and "11 520" (a space, thin or plain, between groups of three digits) read as the numbers they write; a
    wrong percentage or fraction stays wrong, and a space elsewhere is no thousands separator."""
    for thousands in ("11 520", "11\u2009520", "11\u202f520"):
        assert quiz._norm(thousands) == quiz._norm(11520), thousands
    assert quiz._norm("1 1520") != quiz._norm(11520)
    assert quiz.check("nb12-q1", "71%") is quiz.check("nb12-q1", "71") is True
    assert quiz.check("nb12-q1", "72%") is False
    assert quiz.check("nb07-q3", "3/8") is True and quiz.check("nb07-q3", "3/9") is False
    assert quiz.check("nb07-q3", "3/0") is False  # no division by zero reaches the student
