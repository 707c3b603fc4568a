"""The course: every exercise graded, cheats refused, bad files scored zero, the student copy, the bundle."""

import json
import os
import re
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from flashref import grading, iomodel, quiz
from flashref.grading import budgets, release
from flashref.grading.solutions.answers import ANSWERS

ROOT = Path(__file__).resolve().parents[1]
FILES = Path(__file__).parent / "grading_files"
SOLUTIONS = Path(budgets.SOLUTIONS)
NUMPY_EXERCISES = [ex for ex in grading.EXERCISES.values() if ex.kind != "triton"]


def stub(tmp_path, ex):
    p = tmp_path / ex.solution
    p.write_text(release.stub_source(ex))
    return p


@pytest.mark.parametrize("ex", NUMPY_EXERCISES, ids=lambda e: e.name)
def test_reference_full_marks_stub_zero(ex, tmp_path):
    rep = grading.grade(ex.name, SOLUTIONS / ex.solution)
    assert (rep.correct, rep.io_ok, rep.footprint_ok) == (True, True, ex.points[2] > 0 or rep.footprint_ok)
    assert rep.points == rep.max_points == ex.max_points, rep
    zero = grading.grade(ex.name, stub(tmp_path, ex))
    assert zero.points == 0 and not zero.correct and "FILL ME IN" in zero.message


def test_triton_lab_reference_and_stub(tmp_path):
    pytest.importorskip("triton")
    ex = grading.get("09")
    rep = grading.grade("09", SOLUTIONS / ex.solution)
    assert rep.points == rep.max_points == 8 and rep.io_ok, rep
    # the interpreter's counts of the reference kernel are FlashAttention-2's closed form, exactly
    for case, b in zip(ex.cases, budgets.budgets(ex.name)):
        p = iomodel.predict("flash2", "forward", Nq=case["Nq"], Nk=case["Nk"], d=case["d"],
                            heads=case["B"] * case["H"], causal=case["causal"],
                            block_sizes=(case["BLOCK_M"], case["BLOCK_N"]))
        assert (sum(r for r, _ in b["by_tensor"].values()), sum(w for _, w in b["by_tensor"].values())) == \
            (p.reads, p.writes)
    assert grading.grade("09", stub(tmp_path, ex)).points == 0


@pytest.mark.parametrize("number, algorithm, direction", [
    ("01", "standard", "forward"), ("03", "flash1", "forward"), ("04", "flash1", "backward"),
    ("05", "flash2", "forward"), ("08", "decoding", "forward")])
def test_budgets_equal_the_closed_forms(number, algorithm, direction):
    ex = grading.get(number)
    for case, b in zip(ex.cases, budgets.budgets(ex.name)):
        opts = {k: case[k] for k in ("causal", "dropout_p") if k in case}
        if case.get("masked_row") is not None:
            opts["mask"] = True
        if algorithm != "standard":
            opts["block_sizes"] = (case["Br"], case["Bc"])
        if algorithm == "decoding":
            opts["num_splits"] = case["num_splits"]
        p = iomodel.predict(algorithm, direction, Nq=case["Nq"], Nk=case["Nk"], d=case["d"], heads=case["heads"],
                            **opts)
        assert sum(r + w for r, w in b["by_tensor"].values()) == p.total


def test_blocksparse_budget_moves_less_than_algorithm_5():
    import numpy as np

    ex = grading.get("06")
    for case, b in zip(ex.cases, budgets.budgets(ex.name)):
        alg5 = iomodel.predict("blocksparse", "forward", Nq=case["Nq"], Nk=case["Nk"], d=case["d"],
                               heads=case["heads"], block_sizes=(case["Br"], case["Bc"]),
                               block_mask=np.array(case["block_mask"], bool))
        empty = sum(1 for j in range(len(case["block_mask"][0])) if not any(r[j] for r in case["block_mask"]))
        saved = alg5.total - sum(r + w for r, w in b["by_tensor"].values())
        assert saved == 2 * empty * case["Bc"] * case["d"] * case["heads"]


CHEATS = [  # (exercise, file, words the refusal must say)
    ("03", "cheat_private.py", "mem._hbm refused: the memory's internals are the grader's"),
    ("03", "cheat_verb.py", "mem.result refused: not a verb"),
    ("03", "cheat_import.py", "import flashref.flash1 refused"),
    ("03", "cheat_sram.py", "SRAMOverflowError"),
    ("02", "cheat_return.py", "returned a ndarray: the grader reads the output only from HBM"),
    ("02", "cheat_patch.py", "Memory._count was changed: the counter is the grader's"),
    ("02", "cheat_caught.py", "mem._io refused"),
]


@pytest.mark.parametrize("number, name, says", CHEATS, ids=[c[1] for c in CHEATS])
def test_cheats_are_refused(number, name, says):
    rep = grading.grade(number, FILES / name)
    assert rep.refused and rep.points == 0, rep
    assert says in rep.message, rep.message
    assert "REFUSED" in str(rep)


def test_output_without_a_store_is_never_stored(tmp_path):
    # The output is read only from HBM, NaN until stored: loading and computing is not enough,
    # and moving less than the budget earns no IO points when the answer is wrong.
    p = tmp_path / "no_store.py"
    p.write_text("def merge_states(mem, spec):\n    mem.load('m1')\n    mem.free('m1')\n")
    rep = grading.grade("02", p)
    assert rep.points == 0 and not rep.refused and "never stored" in rep.message, rep.message


BAD = [  # (file, words of the message)
    ("bad_import.py", "your file does not import: SyntaxError"),
    ("bad_signature.py", "wrong signature: merge_states takes 1 argument(s)"),
    ("bad_raises.py", "your function raised: ZeroDivisionError"),
    ("bad_loop.py", "time limit: your code ran past 3 s"),
    ("bad_junk.py", "wrong"),
    ("bad_exit.py", "ended the process"),
]


@pytest.mark.parametrize("name, says", BAD, ids=[b[0] for b in BAD])
def test_bad_files_get_a_message_and_zero(name, says):
    t = time.monotonic()
    rep = grading.grade("02", FILES / name, timeout=3)
    assert time.monotonic() - t < 15
    assert rep.points == 0 and says in rep.message, rep.message
    assert "Traceback (most recent call last)" not in rep.message or "File \"" + name in rep.message


def test_correct_but_over_budget_loses_only_io_points():
    rep = grading.grade("05", FILES / "worse_io.py")
    assert rep.correct and not rep.io_ok and rep.points == 7
    over = [r["tensor"] for r in rep.table if r["over"]]
    assert over == ["K", "V", "all"]


def test_block_size_choice_is_ranked():
    ex = grading.get("07")
    best = grading.grade("07", SOLUTIONS / ex.solution)
    assert best.points == 10 and all(c["rank"] == 1 for c in best.cases)


def test_cli_exit_status_and_json(tmp_path):
    ex = grading.get("02")
    out = tmp_path / "r.json"
    ok = subprocess.run([sys.executable, "-m", "flashref", "grade", "02", str(SOLUTIONS / ex.solution), "--json",
                         str(out)], capture_output=True, text=True, cwd=ROOT)
    assert ok.returncode == 0 and "score: 10 / 10" in ok.stdout
    data = json.loads(out.read_text())
    assert data["points"] == 10 and data["io_ok"] and data["table"][-1]["tensor"] == "all"
    bad = subprocess.run([sys.executable, "-m", "flashref", "grade", "02", str(stub(tmp_path, ex))],
                         capture_output=True, text=True, cwd=ROOT)
    assert bad.returncode == 1 and "score: 0 / 10" in bad.stdout


def test_quiz_answers_match_and_every_exercise_notebook_asks():
    assert set(ANSWERS) == set(quiz.QUESTIONS)
    for qid, a in ANSWERS.items():
        assert quiz.check(qid, a) is True
    assert quiz.check("ex1-writes", None) is None and quiz.check("ex1-writes", 39) is False


def test_student_copy_has_no_solution_and_its_notebooks_run(tmp_path):
    out = tmp_path / "student"
    subprocess.run([sys.executable, "-m", "flashref", "student-release", str(out)], check=True, cwd=ROOT)
    files = [p for p in out.rglob("*") if p.is_file()]
    text = {p: p.read_text(errors="replace") for p in files if p.suffix in (".py", ".ipynb", ".md", ".json")}
    # distinctive lines of each reference solution and of the algorithm modules
    needles = []
    for sol in SOLUTIONS.glob("ex*.py"):
        body = re.search(r"# BEGIN SOLUTION\n(.*?)# END SOLUTION", sol.read_text(), re.S).group(1)
        needles += [ln.strip() for ln in body.splitlines() if "mem." in ln and len(ln.strip()) > 30][:4]
    for mod in ("flash2.py", "flash1.py", "flash1_bwd.py", "decoding.py", "standard.py", "blocksparse.py"):
        needles += [ln.strip() for ln in (ROOT / "flashref" / mod).read_text().splitlines()
                    if "mem.load(" in ln or "mem.store(" in ln][:3]
    assert needles
    for n in needles:
        hits = [str(p.relative_to(out)) for p, t in text.items() if n in t]
        assert not hits, f"{n!r} found in {hits}"
    assert not (out / "flashref/grading/solutions").exists()
    for mod in ("flash2", "flash1", "flash1_bwd", "standard", "blocksparse", "decoding", "lowp", "variants"):
        assert not (out / "flashref" / f"{mod}.py").exists() and (out / "flashref" / f"{mod}.pyc").exists()
    for pkg in ("iomodel", "gpu"):  # compiled away: bytecode only
        assert not list((out / "flashref" / pkg).rglob("*.py")) and list((out / "flashref" / pkg).rglob("*.pyc"))
    assert "FILL ME IN" in (out / "exercises" / "ex3_flash1_forward.py").read_text()
    # the student copy grades with its released budgets and its own oracle (no solutions, no iomodel)
    env = dict(os.environ, PYTHONPATH=str(out))
    r = subprocess.run([sys.executable, "-m", "flashref", "grade", "02", str(out / "exercises" / "ex2_merge.py")],
                       capture_output=True, text=True, cwd=out, env=env)
    assert r.returncode == 1 and "score: 0 / 10" in r.stdout, r.stdout + r.stderr
    r = subprocess.run([sys.executable, "-m", "flashref", "grade", "02", str(SOLUTIONS / "ex2_merge.py")],
                       capture_output=True, text=True, cwd=out, env=env)
    assert r.returncode == 0 and "score: 10 / 10" in r.stdout, r.stdout + r.stderr
    # its exercise notebooks execute with the stubs unfilled (two of them: the kernel must not crash)
    nbformat = pytest.importorskip("nbformat")
    from flashref._nbrun import execute

    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = str(out)
    try:
        for name in ("02-merge-states.ipynb", "07-block-sizes.ipynb"):
            path = out / "notebooks" / "exercises" / name
            nb = execute(nbformat.read(path, as_version=4), path.parent)
            printed = "".join(o.get("text", "") for c in nb.cells for o in c.get("outputs", []))
            assert "score: 0 / 10" in printed
        # and a course notebook runs on the compiled-away modules, its questions unanswered
        path = out / "notebooks" / "01-standard-attention.ipynb"
        nb = execute(nbformat.read(path, as_version=4), path.parent)
        assert not any(o.get("output_type") == "error" for c in nb.cells for o in c.get("outputs", []))
    finally:
        if old is None:
            os.environ.pop("PYTHONPATH")
        else:
            os.environ["PYTHONPATH"] = old


def test_strip_solutions_regions():
    text = "x = 1\n    # BEGIN SOLUTION\n    y = f(x)\n    return y\n    # END SOLUTION\n"
    assert release.strip_solutions(text, 2) == 'x = 1\n    # FILL ME IN (~2 lines)\n    raise NotImplementedError(' \
                                               '"FILL ME IN (~2 lines)")\n'
    answer = "# BEGIN SOLUTION\nanswer = 40\n# END SOLUTION\nquiz.check('q', answer)\n"
    assert release.strip_solutions(answer) == "answer = None  # your answer\nquiz.check('q', answer)\n"


def test_autograder_bundle_on_reference_and_stub(tmp_path):
    bundle = tmp_path / "autograder.zip"
    subprocess.run([sys.executable, "-m", "flashref", "autograder", str(bundle)], check=True, cwd=ROOT)
    src = tmp_path / "source"
    with zipfile.ZipFile(bundle) as z:
        names = z.namelist()
        z.extractall(src)
    assert {"setup.sh", "run_autograder", "flashref/grading/gradescope.py", "flashref/grading/budgets.json"} <= \
        set(names)
    assert not any("solutions" in n or n.endswith("flash2.py") for n in names)
    recorded = {}
    for kind in ("reference", "stub"):
        sub = tmp_path / kind
        sub.mkdir()
        ex = grading.get("02")
        if kind == "reference":
            (sub / ex.solution).write_text((SOLUTIONS / ex.solution).read_text())
        else:
            (sub / ex.solution).write_text(release.stub_source(ex))
        out = tmp_path / f"{kind}.json"
        env = dict(os.environ, PYTHONPATH=str(src))
        subprocess.run([sys.executable, "-m", "flashref.grading.gradescope", str(sub), str(out)], check=True,
                       cwd=src, env=env, capture_output=True)
        recorded[kind] = json.loads(out.read_text())
    ref, stb = recorded["reference"], recorded["stub"]
    assert [t["score"] for t in ref["tests"] if t["name"].startswith("02-")] == [5, 3, 2]
    assert ref["score"] == 10 and stb["score"] == 0
    assert all(t["score"] == 0 for t in stb["tests"])
    assert "not submitted" in next(t for t in ref["tests"] if t["name"] == "01-standard correctness")["output"]
