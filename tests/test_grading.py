"""The course: every exercise graded, cheats refused, bad files scored zero, the student copy, the bundle."""

import json
import os
import re
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import numpy as np
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


def edited_reference(tmp_path, number, *edits):
    """Exercise ``number``'s reference solution with each ``(old, new)`` of ``edits`` made, written under its own
    file name in ``tmp_path``. Every ``old`` must be in it: an edit that no longer applies fails its test, rather
    than grade the reference unchanged."""
    ex = grading.get(number)
    source = (SOLUTIONS / ex.solution).read_text()
    for old, new in edits:
        assert old in source, old
        source = source.replace(old, new)
    p = tmp_path / ex.solution
    p.write_text(source)
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


@pytest.mark.parametrize("unmask, says", [
    # K and V loaded without their mask: correctness 5/5 before (the overrun billed as V's reads), now wrong
    ((", mask=kv_mask, other=0.0)", ")"), "your kernel loaded"),
    # O stored without its mask: the runner's heap was corrupted ("munmap_chunk(): invalid pointer")
    ((", acc, mask=offs_m[:, None] < Nq)", ", acc)"), "your kernel stored")])
def test_triton_lab_names_an_access_past_a_tensors_end(tmp_path, unmask, says):
    pytest.importorskip("triton")
    rep = grading.grade("09", edited_reference(tmp_path, "09", unmask))
    assert not rep.correct and rep.points == 0, rep
    tensor = "O" if "stored" in says else "K"  # named, and the first of K and V in the list
    assert f"{says} " in rep.message and f"element(s) past the end of {tensor}" in rep.message, rep.message
    assert "your code printed" not in str(rep)  # the padding is zeros: no NaN warning from the interpreter


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
        opts = {k: case[k] for k in ("causal", "dropout_p") if k in case}  # Algorithm 5 with the case's options
        if case.get("masked_row") is not None:
            opts["mask"] = True
        alg5 = iomodel.predict("blocksparse", "forward", Nq=case["Nq"], Nk=case["Nk"], d=case["d"],
                               heads=case["heads"], block_sizes=(case["Br"], case["Bc"]),
                               block_mask=np.array(case["block_mask"], bool), **opts)
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
    # the import blocker checked names only: a solution loaded from its file, the blocker taken off
    ("03", "cheat_solution_file.py", "refused: the files that hold the answers"),
    ("03", "cheat_meta_path.py", "sys.meta_path was changed: the import blocker"),
    ("03", "cheat_meta_path_late.py", "sys.meta_path was changed: the import blocker"),
    # what could outlive the run or change the grader: a file written into it, a process left behind
    ("02", "cheat_write_grader.py", "exercise code writes no files"),
    ("02", "cheat_spawn.py", "subprocess.Popen refused: exercise code starts no processes"),
    ("02", "cheat_fork.py", "os.fork refused: exercise code starts no processes"),
    ("07", "cheat_budgets.py", "budgets.json refused: the files that hold the answers"),
    # a refusal caught, with its report silenced (socket.socket.sendall replaced): still refused at the end
    ("03", "cheat_quiet_refusal.py", "refused: the files that hold the answers"),
    # a refusal caught and carried on past: refused, and the report shows no error of the grader's own
    ("03", "cheat_solution_caught.py", "refused: the files that hold the answers"),
    # the extension modules that open files with no audit event: readline's history, the dbm databases
    ("03", "cheat_readline.py", "opens no files unseen by the grader's guard"),
    ("02", "cheat_dbm.py", "opens no files unseen by the grader's guard"),
]


GUARD_THREADS = """
import importlib.util, os, sys, tempfile, threading
spec = importlib.util.spec_from_file_location("g", sys.argv[1])
guard = importlib.util.module_from_spec(spec)
spec.loader.exec_module(guard)
root = tempfile.mkdtemp()
os.mkdir(os.path.join(root, "closed"))
for name in ("a.py", "b.py"):
    open(os.path.join(root, "closed", name), "w").close()
held, refused = threading.Event(), []

def other():
    try:
        open(os.path.join(root, "closed", "b.py"))
    except PermissionError:
        pass
    held.set()

def refuse(message):
    refused.append(message)
    if threading.current_thread() is threading.main_thread():
        # inside the hook: the other thread opens its file now, and this one waits until that open is over
        threading.Thread(target=other).start()
        held.wait(10)
    raise PermissionError(message)

guard.install(refuse, package_root=root, blocked=[os.path.basename(root) + ".closed"])
try:
    open(os.path.join(root, "closed", "a.py"))
except PermissionError:
    pass
print(len(refused))
"""


def test_the_guard_checks_every_thread_while_one_is_inside_it(tmp_path):
    """The hook skips the events of its own checks by a flag; kept per thread, a thread held inside a check does
    not let another thread's events through (a submission raced a slow open against a solution file's)."""
    script = tmp_path / "threads.py"
    script.write_text(GUARD_THREADS)
    guard = Path(grading.__file__).parent / "_guard.py"
    out = subprocess.run([sys.executable, str(script), str(guard)], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "2", out.stdout + out.stderr


@pytest.mark.parametrize("number, name, says", CHEATS, ids=[c[1] for c in CHEATS])
def test_cheats_are_refused(number, name, says):
    written = Path(budgets.HERE) / "_written_by_student.py"
    try:
        rep = grading.grade(number, FILES / name)
        assert not written.exists(), "the student's code wrote into the grader's package"
    finally:
        written.unlink(missing_ok=True)
    assert rep.refused and rep.points == 0, rep
    assert says in rep.message, rep.message
    assert "REFUSED" in str(rep)
    assert "BrokenPipeError" not in str(rep) and '_student.py", line' not in str(rep), str(rep)


def test_a_replayed_schedule_with_python_copies_is_not_caught():
    """COURSE.md's limit, kept true: the grader counts verbs and declared footprint, so a file that replays the
    reference's loads and stores and computes from Python copies of its tiles scores full marks on exercise 3.
    If the grader learns to catch it, this test fails and the paragraph must change with it."""
    rep = grading.grade("03", FILES / "replay_ex3.py")
    assert rep.points == rep.max_points, rep
    assert "replays the reference's loads and stores one for one" in (ROOT / "COURSE.md").read_text()


def test_what_a_process_printed_before_it_ended_is_shown_once(tmp_path):
    # the report printed it twice: in the error ("ended the process ...:") and again as "your code printed"
    p = tmp_path / "ex2.py"
    p.write_text("import os\n\ndef merge_states(mem, spec):\n    print('hello from the student')\n    os._exit(3)\n")
    rep = grading.grade("02", p)
    assert "ended the process" in rep.message and str(rep).count("hello from the student") == 1, str(rep)


def test_output_without_a_store_is_never_stored(tmp_path):
    # The output is read only from HBM, NaN until stored: loading and computing is not enough,
    # and moving less than the budget earns no IO points when the answer is wrong.
    p = tmp_path / "no_store.py"
    p.write_text("def merge_states(mem, spec):\n    mem.load('m1')\n    mem.free('m1')\n")
    rep = grading.grade("02", p)
    assert rep.points == 0 and not rep.refused and "never stored" in rep.message, rep.message


BAD = [  # (file, words of the message)
    ("bad_import.py", "your file does not import: SyntaxError"),
    ("bad_signature.py", "wrong signature: merge_states(mem) cannot be called as merge_states(mem, spec)"),
    ("bad_raises.py", "your function raised: ZeroDivisionError"),
    ("bad_loop.py", "time limit: your code ran past 3 s"),
    ("bad_junk.py", "wrong"),
    ("bad_exit.py", "ended the process"),
    # an exception whose __str__ raises ended the student process with the grader's own traceback
    ("bad_str.py", "your function raised: Unprintable: (its message could not be printed: its __str__ raised "
                   "ZeroDivisionError)"),
]


@pytest.mark.parametrize("name, says", BAD, ids=[b[0] for b in BAD])
def test_bad_files_get_a_message_and_zero(name, says):
    t = time.monotonic()
    rep = grading.grade("02", FILES / name, timeout=3)
    assert time.monotonic() - t < 15
    assert rep.points == 0 and says in rep.message, rep.message
    assert "Traceback (most recent call last)" not in rep.message or "File \"" + name in rep.message
    assert "_student.py" not in rep.message  # the grader's frames say nothing to a student


@pytest.mark.parametrize("number", ["03", "04", "05", "06", "08"])
def test_untiled_attention_is_correct_but_loses_the_io_points(number):
    # Load each input once (freeing it at once and keeping a Python copy), compute dense attention: it
    # moves less than the algorithm and fits the footprint, but the exercise is the algorithm's schedule.
    ex = grading.get(number)
    assert ex.io_rule == "equal"
    rep = grading.grade(number, FILES / f"naive_ex{int(number)}.py")
    assert rep.correct and rep.footprint_ok and not rep.io_ok and rep.points == ex.max_points - ex.points[1], rep
    assert "exactly the budget: per tensor, no more and no less" in rep.message, rep.message
    assert [r["tensor"] for r in rep.table if not r["ok"]][-1] == "all"


@pytest.mark.parametrize("number, loop", [("03", "range(0, Nq, Br)"), ("04", "range(0, Nq, Br)"),
                                          ("05", "range(0, Nk, Bc)"), ("06", "range(0, Nq, Br)")])
def test_a_tile_loop_one_short_is_wrong(number, loop, tmp_path):
    # range(0, N - 1, B) loses the last block only where it is one row (one key) long: each exercise has a case
    # whose last row block and last column block are (the reference with one loop stopped short)
    rep = grading.grade(number, edited_reference(tmp_path, number, (loop, loop.replace(", B", " - 1, B"))), seed=1)
    assert not rep.correct and rep.points == 0, rep


def test_student_memory_checks_ranges_and_inits_as_the_notebooks_memory(tmp_path):
    # int() in the student's process would have run rows=(0.5, 2) as (0, 2) and init's shape (2.5,) as (2,)
    for call, says in (("mem.load('Q', rows=(0.5, 2))", "TypeError: rows of 'Q': expected a range (start, stop) of "
                                                        "two integers, got (0.5, 2)"),
                       ("mem.load('Q', cols=(True, 2))", "TypeError: cols of 'Q': expected a range"),
                       ("mem.load('Q', rows=(0,))", "TypeError: rows of 'Q': expected a range"),
                       ("mem.init('O2', (2.5,), 0.0)", "TypeError: shape of 'O2': expected a non-negative integer"),
                       ("mem.init('O2', (2,), True)", "TypeError: fill: expected a real number for 'O2'")):
        p = tmp_path / "ex3.py"
        p.write_text(f"def flash1_forward(mem, spec):\n    {call}\n")
        rep = grading.grade("03", p)
        assert rep.points == 0 and f"your function raised: {says}" in rep.message, (call, rep.message)


def test_exercise_8_grades_the_partials_as_the_spec_defines_them(tmp_path):
    # unnormalised partials with a merge that expects them: O right, the spec's "normalised partial O" not; 10/10
    # before, when only O, m, l were compared
    ex = grading.get("08")
    normalise = 'O_i = mem.hold("O_i", O_i / np.where(l_i == 0, 1.0, l_i)[..., None])'
    p = edited_reference(tmp_path, "08", (normalise, normalise + " if S == 1 else O_i"),
                         ("(a[..., None] * O + b[..., None] * O_s)",
                          "(a[..., None] * O + np.exp(m_s - m_safe)[..., None] * O_s)"))
    rep = grading.grade("08", p, seed=3)
    assert not rep.correct and "O_partial wrong" in rep.message and "O wrong" not in rep.message, rep.message
    for seed in (1, 2, 3):  # the reference's partials are the spec's, at every case (causal, mask, dropout, blind)
        assert grading.grade("08", SOLUTIONS / ex.solution, seed=seed).correct


def test_a_store_broadcasts_to_its_tile_as_the_notebooks_memory(tmp_path):
    # Memory.store writes a scalar or a row across the tile; the exercise memory refused it (and named shape (1,))
    store = '            mem.store("O" + suffix, O_i, rows=out)\n'
    zero = ('            if S > 1 and np.all(np.isneginf(m_i)):\n'
            '                mem.store("O" + suffix, 0.0, rows=out)  # a split of no key\n'
            '            else:\n    ' + store)
    assert grading.grade("08", edited_reference(tmp_path, "08", (store, zero)), seed=1).points == \
        grading.get("08").max_points
    # and the "-inf expected" message says what -inf is (it was "max error inf, where ... ·|expected|")
    ms = 'mem.store("m" + suffix, m_i, rows=out)'
    p = edited_reference(tmp_path, "08", (ms, 'mem.store("m" + suffix, np.maximum(m_i, -1e30), rows=out)'))
    rep = grading.grade("08", p, seed=1)
    assert "m_partial wrong (m_partial: " in rep.message, rep.message
    assert "should be -inf and are not (the first is -1e+30" in rep.message, rep.message


def test_exercise_1_grades_s_and_p_not_only_o(tmp_path):
    # zeros stored as S and 7s as P, O computed from Python copies: 10/10 before, when only O was compared
    p = tmp_path / "ex1.py"
    p.write_text("import numpy as np\n\n"
                 "def standard_forward(mem, spec):\n"
                 "    Q, K = mem.load('Q'), mem.load('K')\n"
                 "    Sr = spec.scale * Q @ K.swapaxes(-1, -2)\n"
                 "    mem.store('S', mem.hold('S', np.zeros_like(Sr)))\n"
                 "    mem.free('Q', 'K', 'S')\n"
                 "    S = mem.load('S')\n"
                 "    mem.store('P', mem.hold('P', np.full(S.shape, 7.0)))\n"
                 "    mem.free('S', 'P')\n"
                 "    P, V = mem.load('P'), mem.load('V')\n"
                 "    e = np.exp(Sr - Sr.max(-1, keepdims=True))\n"
                 "    mem.store('O', mem.hold('O', e / e.sum(-1, keepdims=True) @ V))\n"
                 "    mem.free('P', 'V', 'O')\n")
    rep = grading.grade("01", p, seed=1)
    assert not rep.correct and rep.points == 0 and "S, P wrong (S: max error" in rep.message, rep.message
    assert "O wrong" not in rep.message and "O, S" not in rep.message


def test_a_tile_store_into_a_new_tensor_names_the_exercise_memorys_verb(tmp_path):
    # the notebooks' Memory names output and init; the exercise memory has no output (mem.output is refused)
    p = tmp_path / "ex1.py"
    p.write_text("import numpy as np\n\ndef standard_forward(mem, spec):\n"
                 "    mem.store('P', np.zeros((2, 1, 5)), rows=(0, 1))\n")
    rep = grading.grade("01", p, seed=1)
    assert "HBM has no tensor 'P' to store a tile into" in rep.message, rep.message
    assert "create it with init" in rep.message and "output" not in rep.message.split("store a tile into")[1]


def test_correct_but_over_budget_loses_only_io_points():
    rep = grading.grade("05", FILES / "worse_io.py")
    assert rep.correct and not rep.io_ok and rep.points == 7
    over = [r["tensor"] for r in rep.table if r["over"]]
    assert over == ["K", "V", "all"]


def test_block_size_choice_is_ranked():
    ex = grading.get("07")
    best = grading.grade("07", SOLUTIONS / ex.solution)
    assert best.points == 10 and all(c["rank"] == 1 for c in best.cases)


def test_block_size_table_shows_total_io_and_rank(tmp_path):
    """Exercise 7 is scored by rank, with no budget: its table shows each case's choice, its total IO and the rank,
    not the memory exercises' reads/writes/budget columns (which put the total under "reads", 0 under "writes",
    and called a worse choice OVER)."""
    ex = grading.get("07")
    sub = tmp_path / "ex7.py"  # (16, 8) everywhere: feasible in every case, best in none
    sub.write_text("def choose_blocks(Nq, Nk, d, M, causal):\n    return (16, 8)\n")
    rep = grading.grade("07", sub)
    text = str(rep)
    head, rule, *rows = text.splitlines()[1:2 + len(ex.cases)]
    assert head.split() == ["case", "choice", "(Br,", "Bc)", "IO", "(elements)", "rank"]
    assert set(rule) == {"-"}
    for k, (row, case) in enumerate(zip(rows, rep.cases)):
        assert row.startswith(f"case {k + 1}: Nq={case['case']['Nq']}, ") and f"M={case['case']['M']}" in row
        cells = row.split("  ")
        io, rank = (c.strip() for c in [c for c in cells if c.strip()][-2:])
        assert "(16, 8)" in row and io == f"{case['io']:,}"
        assert case["rank"] > 1 and rank == f"{case['rank']} of {case['distinct_ios']}"
    for word in ("reads", "writes", "budget", "OVER"):
        assert word not in text.split("score:")[0]
    # the best choices: rank 1 in every row
    best = grading.grade("07", SOLUTIONS / ex.solution)
    assert [r.split()[-3:] for r in str(best).splitlines()[3:3 + len(ex.cases)]] == \
        [["1", "of", str(c["distinct_ios"])] for c in best.cases]


def test_block_size_feedback_does_not_give_the_answer_away(tmp_path):
    """A review: exercise 7's table printed each case's "best IO", the optimum the student is asked to find. The
    student's feedback (the table, the message, the JSON, Gradescope's output) gives the choice's IO and rank only;
    the least IO and the choices that reach it are the instructor's (``instructor=True``, the solution copy)."""
    from flashref.grading import gradescope

    ex = grading.get("07")
    answers = []
    for b in budgets.budgets(ex.name):
        least = min(io for _, _, io in b["choices"])
        answers += [f"{least:,}", str(least)] + [f"({Br}, {Bc})" for Br, Bc, io in b["choices"] if io == least]
    sub = tmp_path / ex.solution  # (16, 8) everywhere: feasible, best in no case
    sub.write_text("def choose_blocks(Nq, Nk, d, M, causal):\n    return (16, 8)\n")
    rep = grading.grade("07", sub)
    assert 0 < rep.points < rep.max_points
    shown = {"report": str(rep), "json": rep.to_json(),
             "gradescope": json.dumps(gradescope.results(str(tmp_path)))}
    for where, text in shown.items():
        assert "best" not in text.lower(), where
        leaked = [a for a in answers if a in text]
        assert not leaked, (where, leaked)
    assert "rank 8 of 9 distinct IOs" in rep.message  # what it does say: how far from the least, not what that is
    # the instructor's view adds them, and says so
    assert not rep.instructor_notes
    staff = grading.grade("07", sub, instructor=True)
    assert staff.points == rep.points and len(staff.instructor_notes) == len(ex.cases)
    assert all(a in str(staff) for a in answers if not a.isdigit()) and "for the instructor" in str(staff)


def test_block_size_table_shows_an_infeasible_choice():
    from types import SimpleNamespace

    from flashref.grading import _score_choice
    from flashref.grading.report import Report

    ex = grading.get("07")
    res = SimpleNamespace(cases=[SimpleNamespace(value=[12, 8], setup=SimpleNamespace(spec=ex.cases[0]))])
    rep = _score_choice(ex, Report(exercise=ex.name, title=ex.title, max_points=ex.max_points), res,
                        [{"choices": [(8, 8, 900), (16, 8, 500)]}])
    row = str(rep).splitlines()[3]
    assert row.split("  ")[0] == "case 1: Nq=256, Nk=256, d=16, M=4096"
    assert "(12, 8)" in row and row.split()[-3:] == ["not", "feasible", "-"] and "500" not in str(rep)


def test_block_size_rank_gives_the_worst_choice_nothing():
    """IO points run from the worst feasible choice's IO (0) to the best's (all), ties with either end included:
    before, a share of choices beaten *or tied* gave the worst choice credit for the choices tied with it."""
    from types import SimpleNamespace

    from flashref.grading import _score_choice
    from flashref.grading.report import Report

    ex = grading.get("07")
    table = [(8, 8, 900), (8, 16, 900), (16, 8, 500), (16, 16, 100), (32, 8, 100)]  # (Br, Bc, IO)

    def score(pick):
        res = SimpleNamespace(cases=[SimpleNamespace(value=pick, setup=SimpleNamespace(spec={"M": 4096}))])
        rep = Report(exercise=ex.name, title=ex.title, max_points=ex.max_points)
        return _score_choice(ex, rep, res, [{"choices": table}]).parts["io"][0]

    i_pts = ex.points[1]
    assert score((8, 16)) == score((8, 8)) == 0
    assert score((16, 16)) == score((32, 8)) == i_pts
    assert score((16, 8)) == round(i_pts * 2 / 3, 2)  # beats 2 of the 3 choices the best beats


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
    # a file that is not there is a typo on the command line: a usage error naming it (grade() itself scores it 0,
    # as an autograder must a missing submission)
    typo = subprocess.run([sys.executable, "-m", "flashref", "grade", "02", str(tmp_path / "ex2.py")],
                          capture_output=True, text=True, cwd=ROOT)
    assert typo.returncode == 2 and "argument file:" in typo.stderr and "ex2.py" in typo.stderr and not typo.stdout
    assert grading.grade("02", tmp_path / "ex2.py").points == 0
    # --json never writes over the file it grades, nor into the grader's package (its budgets live there): refused
    # before grading, the file as it was
    mine = tmp_path / "mine.py"
    mine.write_text((SOLUTIONS / ex.solution).read_text())
    for out, says in ((mine, "is the file being graded"), (ROOT / "flashref" / "grading" / "r.json",
                                                           "is inside the flashref package")):
        r = subprocess.run([sys.executable, "-m", "flashref", "grade", "02", str(mine), "--json", str(out)],
                           capture_output=True, text=True, cwd=ROOT)
        assert r.returncode == 2 and "argument --json:" in r.stderr and says in r.stderr and not r.stdout, r.stderr
    assert mine.read_text() == (SOLUTIONS / ex.solution).read_text()
    assert not (ROOT / "flashref" / "grading" / "r.json").exists()


def test_damaged_budgets_are_one_line_not_a_traceback(tmp_path, monkeypatch):
    """A student copy whose budgets.json is missing or damaged: the grader says so and what to do."""
    monkeypatch.setattr(budgets, "have_solutions", lambda: False)
    for text in (None, "{broken", "[1, 2]"):
        path = tmp_path / f"budgets{len(text or '')}.json"
        if text is not None:
            path.write_text(text)
        monkeypatch.setattr(budgets, "RELEASED", str(path))
        budgets._released.cache_clear()
        budgets.budgets.cache_clear()
        with pytest.raises(RuntimeError, match=r"budgets.*rebuild this copy"):
            budgets.budgets("02-merge-states")
    budgets._released.cache_clear()
    budgets.budgets.cache_clear()


def test_quiz_answers_match_and_every_exercise_notebook_asks():
    assert set(ANSWERS) == set(quiz.QUESTIONS)
    for qid, a in ANSWERS.items():
        assert quiz.check(qid, a) is True
    assert quiz.check("ex1-writes", None) is None and quiz.check("ex1-writes", 39) is False


@pytest.fixture(scope="session")
def student_copy(tmp_path_factory):
    """A student copy (``python -m flashref student-release``), built once for the tests that read it: under xdist
    once for all the workers, in the folder their temporary folders share, the first to come building it."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        out = tmp_path_factory.mktemp("release") / "student"
        subprocess.run([sys.executable, "-m", "flashref", "student-release", str(out)], check=True, cwd=ROOT)
        return out
    import fcntl

    shared = tmp_path_factory.getbasetemp().parent  # this session's, shared by its workers
    out = shared / "student-copy"
    with open(shared / "student-copy.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (shared / "student-copy.done").exists():
            shutil.rmtree(out, ignore_errors=True)
            subprocess.run([sys.executable, "-m", "flashref", "student-release", str(out)], check=True, cwd=ROOT)
            (shared / "student-copy.done").write_text("")
    return out


def test_student_copy_has_no_solution_and_its_notebooks_run(student_copy, tmp_path):
    out = student_copy
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
    # the package's sources and bytecode and its budgets, nothing else: in a checkout, only the files git tracks (a
    # scratch copy of a solution module, an editor's backup or a bundle in the tree stays behind)
    shipped = [p.relative_to(out / "flashref") for p in (out / "flashref").rglob("*") if p.is_file()]
    assert {p.suffix for p in shipped} == {".py", ".pyc", ".json"}
    assert [str(p) for p in shipped if p.suffix == ".json"] == [os.path.join("grading", "budgets.json")]
    tracked = release._tracked(str(ROOT / "flashref"))
    if tracked is not None:
        assert {str(p) for p in shipped if p.suffix == ".py"} - {"__init__.py"} <= tracked
    # the cells that print a question's answer ("# answers nbNN-qK") keep no output: the copy asks before it tells
    def revealing(folder):
        return [(path.name, cell) for path in sorted(folder.glob("*.ipynb"))
                for cell in json.loads(path.read_text())["cells"]
                if re.search(r"^# answers ", "".join(cell["source"]), re.M)]

    copied = revealing(out / "notebooks")
    assert len(copied) == len(revealing(ROOT / "notebooks")) > 0
    # nor lines of the kernels' sources in notebook 07's outputs (the copy's flashref/gpu is bytecode)
    kernel_lines = [ln.strip() for ln in (ROOT / "flashref" / "gpu" / "kernels.py").read_text().splitlines()
                    if "# FA2 Alg.1 l." in ln and len(ln.strip()) > 30]
    outputs = "".join("".join(o.get("text", "")) for c in json.loads((out / "notebooks" / "07-real-gpu.ipynb")
                                                                      .read_text())["cells"]
                      for o in c.get("outputs", []))
    assert kernel_lines and not [ln for ln in kernel_lines if ln[:100] in outputs]
    assert all(cell.get("outputs", []) == [] for _, cell in copied), [n for n, c in copied if c.get("outputs")]
    # every page it links to is in it, the licence too
    assert (out / "LICENSE").read_text() == (ROOT / "LICENSE").read_text()
    for page in out.rglob("*.md"):
        for link in re.findall(r"\]\(([^)#\s]+)", page.read_text()):
            assert link.startswith(("http:", "https:", "mailto:")) or (page.parent / link).exists(), (page, link)
    # its README is its own: every file and folder it names in backquotes is in the copy (the repository's names
    # tests and CI the copy lacks), and it shows the grade command on a stub the copy has
    readme = (out / "README.md").read_text()
    named = [p for p in re.findall(r"`([\w./-]+\.(?:md|py|ipynb)|[\w-]+/)`", readme)]
    assert named and all((out / p).exists() for p in named), [p for p in named if not (out / p).exists()]
    assert "python -m flashref grade 03 exercises/ex3_flash1_forward.py" in readme and "tests/" not in readme
    # its compiled modules load on the Python that wrote them only: the copy asks for that one (before, ">=3.10" let
    # a student on 3.12 install it and fail at the first import with "bad magic number")
    built = f"{sys.version_info.major}.{sys.version_info.minor}"
    assert f'requires-python = "=={built}.*"' in (out / "pyproject.toml").read_text()
    assert f"needs Python {built}" in readme and f"python{built} -m venv" in readme
    # and a plain (not editable) install of it has the bytecode modules and the budgets (built from a copy of
    # it: setuptools leaves its build folder in the tree)
    shutil.copytree(out, tmp_path / "to-install")
    target = tmp_path / "installed"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--target",
                    str(target), str(tmp_path / "to-install")], check=True, capture_output=True)
    for rel in ("flash2.pyc", "iomodel/dram.pyc", "grading/budgets.json"):
        assert (target / "flashref" / rel).is_file(), rel
    # COURSE.md says what ships as bytecode: every compiled module and package of the copy, by name
    course = (ROOT / "COURSE.md").read_text()
    assert "no algorithm modules" not in course
    compiled = {p.relative_to(out / "flashref").parts[0].removesuffix(".pyc") for p in out.rglob("*.pyc")}
    assert compiled and all(f"`{m}`" in course for m in compiled), sorted(m for m in compiled if f"`{m}`" not in course)
    # no answer table: exercise 7's choices are not in the copy; its grader computes them when it grades
    released = json.loads((out / "flashref/grading/budgets.json").read_text())
    assert "07-block-sizes" not in released and "choices" not in json.dumps(released)
    assert set(released) == {n for n, e in grading.EXERCISES.items() if e.kind != "choice"}
    # the student copy grades with its released budgets and its own oracle (no solutions, no iomodel)
    env = dict(os.environ, PYTHONPATH=str(out))
    for path, score in ((SOLUTIONS / "ex7_block_sizes.py", "score: 10 / 10"), (FILES / "cheat_budgets.py", "REFUSED")):
        r = subprocess.run([sys.executable, "-m", "flashref", "grade", "07", str(path)], capture_output=True,
                           text=True, cwd=out, env=env)
        assert score in r.stdout, r.stdout + r.stderr
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
        # and course notebooks run on the compiled-away modules, their questions unanswered: 07 too, which prints
        # lines of the kernels' sources where it has them (it read them unconditionally, and failed on the copy)
        for name in ("01-standard-attention.ipynb", "07-real-gpu.ipynb"):
            path = out / "notebooks" / name
            nb = execute(nbformat.read(path, as_version=4), path.parent)
            assert not any(o.get("output_type") == "error" for c in nb.cells for o in c.get("outputs", [])), name
    finally:
        if old is None:
            os.environ.pop("PYTHONPATH")
        else:
            os.environ["PYTHONPATH"] = old


def test_student_copy_has_the_students_part_of_course_md(student_copy):
    """A review: the student copy carried the whole COURSE.md, whose instructors' notes say how the quiz hashes give
    way, which schedule replay the grader does not catch and how to get around its guards. The copy's COURSE.md is
    the part above "## For instructors" (the plan, the objectives, how grading works); the repository's is whole."""
    full = (ROOT / "COURSE.md").read_text()
    copied = (student_copy / "COURSE.md").read_text()
    instructors = full[full.index("\n## For instructors\n"):]
    for words in ("recovered in seconds", "Python copies of the tiles", "replays the reference's loads and stores",
                  "ctypes.memmove", "--instructor", "What the grader guards against"):
        assert words in instructors and words not in copied, words
    # nothing of the instructors' part is anywhere in the copy's text (a line of it, in any page or notebook)
    lines = [ln.strip() for ln in instructors.splitlines() if len(ln.strip()) > 40]
    pages = {p: p.read_text() for p in student_copy.rglob("*") if p.suffix in (".md", ".ipynb") and p.is_file()}
    leaked = [(str(p.relative_to(student_copy)), ln) for p, t in pages.items() for ln in lines if ln in t]
    assert lines and not leaked, leaked
    assert copied == release.student_course(full) and full.startswith(copied.rstrip())
    assert "python -m flashref grade 03" in copied and "**The IO rule.**" in copied  # how grading works stays


def test_student_course_md_needs_its_instructors_heading():
    """Without its heading the cut would ship the whole page: the release stops instead."""
    assert release.student_course("# Course\n\nplan\n\n## For instructors\n\nnotes\n") == "# Course\n\nplan\n"
    for text in ("# Course\n\nplan, notes\n", "## For instructors\n\n## For instructors\n"):
        with pytest.raises(ValueError, match="For instructors"):
            release.student_course(text)


def test_student_copy_withholds_exercise_7s_answer(student_copy, tmp_path):
    """The copy's grader computes exercise 7's table when it grades, and prints the choice's IO and rank only; the
    instructor's view (--instructor, instructor=True) is the solution copy's."""
    env = dict(os.environ, PYTHONPATH=str(student_copy))
    sub = tmp_path / "ex7_block_sizes.py"
    sub.write_text("def choose_blocks(Nq, Nk, d, M, causal):\n    return (16, 8)\n")
    least = [f"{min(io for _, _, io in b['choices']):,}" for b in budgets.budgets("07-block-sizes")]
    r = subprocess.run([sys.executable, "-m", "flashref", "grade", "07", str(sub)], capture_output=True, text=True,
                       cwd=student_copy, env=env)
    assert "rank" in r.stdout and not [x for x in least if x in r.stdout], r.stdout + r.stderr
    r = subprocess.run([sys.executable, "-m", "flashref", "grade", "07", str(sub), "--instructor"],
                       capture_output=True, text=True, cwd=student_copy, env=env)
    assert r.returncode == 2 and "argument --instructor: this is the student copy" in r.stderr and not r.stdout
    r = subprocess.run([sys.executable, "-c", f"from flashref import grading; grading.grade('07', {str(sub)!r}, "
                        "instructor=True)"], capture_output=True, text=True, cwd=student_copy, env=env)
    assert r.returncode == 1 and "RuntimeError: instructor:" in r.stderr, r.stderr


def _copy_texts(copy):
    """What a copy says: each .md file, and each notebook cell as its source, what it printed and whether it drew a
    picture. Yields ``(where, source, printed, drawn)``; ``where`` is the file (and the cell) to name in a failure."""
    for path in sorted(copy.rglob("*")):
        where = str(path.relative_to(copy))
        if path.suffix == ".md":
            yield where, path.read_text(), "", False
        elif path.suffix == ".ipynb":
            for k, cell in enumerate(json.loads(path.read_text())["cells"]):
                outputs = cell.get("outputs", [])
                printed = "".join("".join(o.get("text", "")) + "".join(o.get("data", {}).get("text/plain", ""))
                                  for o in outputs)
                drawn = any("image/png" in o.get("data", {}) or "image/svg+xml" in o.get("data", {})
                            for o in outputs)
                yield f"{where} cell {k}", "".join(cell["source"]), printed, drawn


def _causal_tiles(Nq, Nk, Br, Bc) -> dict:
    """FlashAttention-2's causal tiles, counted by the algorithm's own tests (flash2.block_visited, mask_needed)."""
    from flashref import flash2

    out = dict.fromkeys(("visited", "skipped", "masked", "full"), 0)
    for r0 in range(0, Nq, Br):
        for c0 in range(0, Nk, Bc):
            rows, cols = (r0, min(r0 + Br, Nq)), (c0, min(c0 + Bc, Nk))
            visited = flash2.block_visited(True, rows, cols)
            out["visited" if visited else "skipped"] += 1
            if visited:
                out["masked" if flash2.mask_needed(True, rows, cols) else "full"] += 1
    return out


def _shows_the_case(text, n, b, counts, picture=False) -> bool:
    """Whether ``text`` names the case N = n with b x b blocks and, near it, states one of ``counts`` (or, with
    ``picture``, draws the case's causal tiles, which a student can count)."""
    n_pat = re.compile(rf"\bN[qk]?\s*=\s*(?:N[qk]\s*=\s*)?{n}\b")
    b_pat = re.compile(rf"\bB[rc]\s*=\s*(?:B[rc]\s*=\s*)?{b}\b|\b{b}\s*[×x]\s*{b}\b|\(\s*{b}\s*,\s*{b}\s*\)")
    if picture:
        return bool(n_pat.search(text) and b_pat.search(text)
                    and re.search(r"causal|block_visited|mask_needed|skip", text))
    for m in n_pat.finditer(text):
        near = text[max(0, m.start() - 400):m.end() + 400]
        if b_pat.search(near) and set(map(int, re.findall(r"(?<![\d.])\d+(?![\d.])", near))) & counts:
            return True
    return False


def test_student_copy_does_not_show_exercise_5s_tile_counts(student_copy):
    """A review: notebook 06's tile picture drew exercise 5's case (Nq = Nk = 16, Br = Bc = 4) and titled it "6 skipped,
    4 masked, 6 full", the answer to the exercise's predict question, and the copy ships that notebook. The lesson now
    draws other blocks; nothing the copy ships may state the case's counts near its parameters, or draw its tiles."""
    from flashref import flash2

    question = quiz.QUESTIONS["ex5-causal-kv"][0]
    m = re.search(r"Nq = Nk = (\d+), Br = Bc = (\d+)", question)
    assert m, f"update this test to the question's new parameters: {question!r}"
    n, b = int(m.group(1)), int(m.group(2))
    tiles = _causal_tiles(n, n, b, b)
    # the quiz's answer is the algorithm's: the K_j tiles flash2.forward loads
    rng = np.random.default_rng(0)
    run = flash2.forward(*(rng.standard_normal((n, 2)) for _ in range(3)), causal=True, block_sizes=(b, b))
    loads = sum(1 for e in run.events if e.tensor == "K" and e.direction == "read")
    assert ANSWERS["ex5-causal-kv"] == loads == tiles["visited"]
    counts = set(tiles.values()) - {n, b}  # a count equal to a parameter cannot be told from it
    assert counts
    # the checks catch what the review found: the picture's title, and the cell that draws it
    assert _shows_the_case(f"N={n}, Br={b}, Bc={b}: {tiles['skipped']} skipped, {tiles['masked']} masked, "
                           f"{tiles['full']} full", n, b, counts)
    assert _shows_the_case(f"tile_picture({n}, Br, Bc) for (Br, Bc) in (({b}, {b}),), N={n}, flash2.block_visited",
                           n, b, counts, picture=True)
    shown = [where for where, source, printed, drawn in _copy_texts(student_copy)
             if _shows_the_case(source + "\n" + printed, n, b, counts)
             or (drawn and _shows_the_case(source, n, b, counts, picture=True))]
    assert not shown, f"exercise 5's case (N = {n}, {b}x{b} blocks) with its tile counts {sorted(counts)}: {shown}"


def _is(name, value) -> str:
    """A regex of ``name = value`` as the copy writes it: ``Nk = 3``, ``Nk=3``, ``$N_k = 3$``, ``N_{k} = 3``, and the
    bare letter (``N = 3``, as a lesson with Nq = Nk writes it)."""
    return rf"\b{name[0]}(?:_?\{{?{name[1:]}\}}?)?\s*=\s*{value}\b"


def _case_leaks(copy, question, names, counts, window=400) -> list[str]:
    """Where a copy states one of ``counts`` (numbers) in the context of a predict question's case. The case is
    named where all of ``names`` (regexes of its parameters) occur within ``window`` characters of the first, outside
    the question's own text. An .md file leaks a count it states near a naming; a notebook one that any of its cells
    states, if any names the case: a lesson that works an example names it once and prints its counts cells later
    (notebook 01 named N = 4, d = 2 in cell 2 and printed the writes in cells 7, 9 and 13)."""
    def named(text):
        return [m for m in re.finditer(names[0], text)
                if all(re.search(p, text[max(0, m.start() - window):m.end() + window]) for p in names[1:])]

    def stated(text):
        return set(map(int, re.findall(r"(?<![\d.])\d+(?![\d.])", text))) & counts

    leaks, by_notebook = [], {}
    for where, source, printed, _ in _copy_texts(copy):
        text = (source + "\n" + printed).replace(question, "")
        if where.endswith(".md"):
            if any(stated(text[max(0, m.start() - window):m.end() + window]) for m in named(text)):
                leaks.append(where)
        else:
            by_notebook.setdefault(where.rsplit(" cell ", 1)[0], []).append((where, bool(named(text)), stated(text)))
    for cells in by_notebook.values():
        if any(names_it for _, names_it, _ in cells):
            leaks += [f"{where} (states {sorted(says)})" for where, _, says in cells if says]
    return leaks


def test_exercise_1_and_3_ask_about_cases_their_lessons_do_not_print(student_copy):
    """A review: exercise 1's predict question was notebook 01's own example (N = 4, d = 2), whose outputs print the
    writes, and exercise 3's was notebook 03's quiz nb03-q1 on the same example. Their cases are others now: each
    answer is what the algorithm, run on the question's case, counts; no graded case is the question's (the copy's
    budgets.json would count it); no answer is one of its question's numbers (a student answering one would be
    right by chance, and nothing could tell a statement of it from the case's name); and the copy states no answer in
    the context of its case."""
    from flashref import flash1, standard
    from flashref.grading.exercises import ex1_standard, ex3_flash1_forward

    rng = np.random.default_rng(0)

    def writes(Nq, Nk, d):  # what Algorithm 0 writes to HBM, per tensor
        run = standard.forward(rng.standard_normal((Nq, d)), *(rng.standard_normal((Nk, d)) for _ in range(2)))
        out = {}
        for e in run.events:
            if e.direction == "write":
                out[e.tensor] = out.get(e.tensor, 0) + e.elements
        return out

    def q_reads(Nq, Nk, d, Br, Bc):  # the elements of Q Algorithm 1 reads
        run = flash1.forward(rng.standard_normal((Nq, d)), *(rng.standard_normal((Nk, d)) for _ in range(2)),
                             block_sizes=(Br, Bc))
        return sum(e.elements for e in run.events if e.tensor == "Q" and e.direction == "read")

    question = quiz.QUESTIONS["ex1-writes"][0]
    m = re.search(r"Nq = (\d+) queries, Nk = (\d+) keys, d = (\d+)", question)
    assert m, f"update this test to exercise 1's question: {question!r}"
    Nq, Nk, d = map(int, m.groups())
    by_tensor = writes(Nq, Nk, d)
    assert ANSWERS["ex1-writes"] == sum(by_tensor.values()) != sum(writes(4, 4, 2).values())  # notebook 01's case
    assert ANSWERS["ex1-writes"] not in (Nq, Nk, d)
    assert (Nq, Nk) not in {(c["Nq"], c["Nk"]) for c in ex1_standard.CASES}
    shape = rf"|\b{Nq}\s*[×x]\s*{Nk}\b"  # S is 6 × 3
    names = [_is("Nq", Nq) + shape, _is("Nk", Nk) + shape]
    counts = ({ANSWERS["ex1-writes"]} | set(by_tensor.values())) - {Nq, Nk, d}
    # the checks catch what the review found: notebook 01 working its own example, N = 4, d = 2
    nb01 = writes(4, 4, 2)
    assert any(w.startswith("notebooks/01-") for w in _case_leaks(
        student_copy, question, [_is("Nq", 4), _is("Nk", 4)], ({sum(nb01.values())} | set(nb01.values())) - {4, 2}))
    assert _case_leaks(student_copy, question, names, counts) == []

    question = quiz.QUESTIONS["ex3-q-reads"][0]
    m = re.search(r"Nq = (\d+) queries, Nk = (\d+) keys, d = (\d+), Br = (\d+), Bc = (\d+)", question)
    assert m, f"update this test to exercise 3's question: {question!r}"
    Nq, Nk, d, Br, Bc = map(int, m.groups())
    reads = q_reads(Nq, Nk, d, Br, Bc)
    assert ANSWERS["ex3-q-reads"] == reads / (Nq * d) != q_reads(6, 6, 2, 2, 3) / (6 * 2)  # nb03-q1's case
    assert ANSWERS["nb03-q1"] == q_reads(6, 6, 2, 2, 3) / (6 * 2)
    assert ANSWERS["ex3-q-reads"] not in (Nq, Nk, d, Br, Bc)
    assert (Nk, Bc) not in {(c["Nk"], c["Bc"]) for c in ex3_flash1_forward.CASES}  # Q's reads depend on only these
    names, counts = [_is("Nk", Nk), _is("Bc", Bc)], {ANSWERS["ex3-q-reads"], reads} - {Nq, Nk, d, Br, Bc}
    # the names catch the case as notebook 03 writes its examples (nb03-q1's answer is its d: no count to look for)
    assert all(re.search(p, f"$N = {Nk}$ queries and keys, $d = {d}$, blocks $B_r = {Br}$, $B_c = {Bc}$")
               for p in names)
    assert _case_leaks(student_copy, question, names, counts) == []


def test_strip_solutions_regions():
    text = "x = 1\n    # BEGIN SOLUTION\n    y = f(x)\n    return y\n    # END SOLUTION\n"
    assert release.strip_solutions(text, 2) == 'x = 1\n    # FILL ME IN (~2 lines)\n    raise NotImplementedError(' \
                                               '"FILL ME IN (~2 lines)")\n'
    answer = "# BEGIN SOLUTION\nanswer = 40\n# END SOLUTION\nquiz.check('q', answer)\n"
    assert release.strip_solutions(answer) == "answer = None  # your answer\nquiz.check('q', answer)\n"


def test_the_recorded_gradescope_results_have_the_current_reports(tmp_path):
    """A review: docs/course/results-*.json (written by ``python -m flashref.grading.recorded``) still showed exercise
    7's old table after its feedback changed. Grading everything again takes about 15 s (``recorded --check`` does);
    this checks the files' tests, scores and table columns against the grader's, and exercise 7 exactly."""
    from flashref.grading import recorded
    from flashref.grading.report import Report

    def header(ex):  # the column names of the table the current report prints for ex
        if ex.kind == "choice":
            row = {"case": "c", "choice": [8, 8], "io": 1, "rank": 1, "distinct_ios": 1, "ok": True}
        else:
            row = {"tensor": "Q", "reads": 1, "writes": 0, "budget_reads": 1, "budget_writes": 0, "ok": True,
                   "over": False}
        return re.split(r"\s{2,}", str(Report(exercise=ex.name, title=ex.title, table=[row])).splitlines()[1])

    parts = ("correctness", "io", "footprint")
    for kind, path in recorded.RECORDED.items():
        res = json.loads(Path(path).read_text())
        full = kind == "reference"
        assert set(res) == {"score", "tests", "visibility", "stdout_visibility"}, path
        assert [(t["name"], t["max_score"]) for t in res["tests"]] == \
            [(f"{ex.name} {p}", mx) for ex in grading.EXERCISES.values() for p, mx in zip(parts, ex.points) if mx]
        assert [t["score"] for t in res["tests"]] == [t["max_score"] if full else 0 for t in res["tests"]], path
        assert res["score"] == sum(t["score"] for t in res["tests"])
        for ex in grading.EXERCISES.values():
            lines = next(t["output"] for t in res["tests"] if t["name"] == f"{ex.name} correctness").splitlines()
            assert lines[0] == f"exercise {ex.name}: {ex.title}", (path, ex.name)
            assert all(f"  {p:<12} {mx if full else 0:g} / {mx}" in lines for p, mx in zip(parts, ex.points))
            if full:
                assert re.split(r"\s{2,}", lines[1]) == header(ex) and lines[-1] == "full marks", (path, ex.name)
            else:
                assert "FILL ME IN" in lines[-1], (path, ex.name)
        # exercise 7's entry is what grading the same file gives now (its table is computed, not measured: cheap)
        ex = grading.get("07")
        sub = tmp_path / kind / ex.solution
        sub.parent.mkdir()
        sub.write_text((SOLUTIONS / ex.solution).read_text() if full else release.stub_source(ex))
        got = next(t["output"] for t in res["tests"] if t["name"] == f"{ex.name} correctness")
        assert got == str(grading.grade("07", sub)), f"{path} is stale: python -m flashref.grading.recorded"


def test_student_copy_leaves_out_the_recorded_results(student_copy):
    """The recorded results are the instructor's: the reference's exercise 7 table holds the best choices."""
    from flashref.grading import recorded

    names = {os.path.basename(p) for p in recorded.RECORDED.values()}
    assert not [p for p in student_copy.rglob("*") if p.name in names or p.name == "course"]


def test_autograder_bundle_on_reference_and_stub(tmp_path):
    bundle = tmp_path / "autograder.zip"
    subprocess.run([sys.executable, "-m", "flashref", "autograder", str(bundle)], check=True, cwd=ROOT)
    src = tmp_path / "source"
    with zipfile.ZipFile(bundle) as z:
        names = z.namelist()
        z.extractall(src)
    assert {"setup.sh", "run_autograder", "flashref/grading/gradescope.py", "flashref/grading/budgets.json"} <= \
        set(names)
    # the grader alone: no solution, no algorithm module or closed form, not even as bytecode
    assert not any("solutions" in n or n.endswith(".pyc") or "iomodel" in n for n in names), names
    assert not any(n.startswith("docs/") or n.endswith(("results-reference.json", "results-stub.json")) for n in names)
    assert {n.split("/")[1] for n in names if n.count("/") == 1} == {
        "__init__.py", "__main__.py", "_numbers.py", "memory.py", "masks.py", "dropout.py"}
    # COURSE.md's list of what the bundle holds names every file of its flashref/ and the grading/ folder (it once
    # left _numbers.py out, which an instructor auditing the bundle would find unexplained)
    course = (ROOT / "COURSE.md").read_text()
    listed = course[course.index("`python -m flashref autograder"):course.index("not even as bytecode")]
    named = set(re.findall(r"`([^`]+)`", listed))
    top = {n.split("/")[1] for n in names if n.count("/") == 1}
    assert {"flashref/__init__.py", "flashref/grading/", "setup.sh", "run_autograder"} <= named
    assert top - {"__init__.py"} <= named, top - named
    # the instructor's bundle carries every budget, exercise 7's table too (its child cannot open it)
    assert "07-block-sizes" in json.loads((src / "flashref/grading/budgets.json").read_text())
    env = dict(os.environ, PYTHONPATH=str(src))

    def gradescope(kind, files):
        sub = tmp_path / kind
        sub.mkdir()
        for name, text in files.items():
            (sub / name).write_text(text)
        out = tmp_path / f"{kind}.json"
        subprocess.run([sys.executable, "-m", "flashref.grading.gradescope", str(sub), str(out)], check=True,
                       cwd=src, env=env, capture_output=True)
        return json.loads(out.read_text())

    ex = grading.get("02")
    ref = gradescope("reference", {ex.solution: (SOLUTIONS / ex.solution).read_text()})
    stb = gradescope("stub", {ex.solution: release.stub_source(ex)})
    assert [t["score"] for t in ref["tests"] if t["name"].startswith("02-")] == [5, 3, 2]
    assert ref["score"] == 10 and stb["score"] == 0
    assert all(t["score"] == 0 for t in stb["tests"])
    assert "not submitted" in next(t for t in ref["tests"] if t["name"] == "01-standard correctness")["output"]
    # the file the exercise notebook writes, exNN_stub.py, is graded too
    nb = gradescope("notebook-name", {"ex02_stub.py": (SOLUTIONS / ex.solution).read_text()})
    assert nb["score"] == 10
    assert "graded ex02_stub.py" in next(t for t in nb["tests"] if t["name"] == "02-merge-states correctness")["output"]
    # with both names, the stub's is graded, and the feedback says the other was not
    both = gradescope("both", {ex.solution: release.stub_source(ex),
                               "ex02_stub.py": (SOLUTIONS / ex.solution).read_text()})
    said = next(t for t in both["tests"] if t["name"] == "02-merge-states correctness")["output"]
    assert both["score"] == 0 and "ex02_stub.py was submitted too and not graded" in said
    # the tester's submission: exercise 1 appends to grading/lab.py a json.dump that gives full marks
    lab = src / "flashref/grading/lab.py"
    before = lab.read_text()
    hacked = gradescope("attack", {"ex1_standard.py": (FILES / "attack_lab_json.py").read_text(),
                                   "ex9_triton_lab.py": release.stub_source(grading.get("09"))})
    assert lab.read_text() == before
    assert hacked["score"] == 0 and "exercise code writes no files" in hacked["tests"][0]["output"]


# ---------------------------------------------------------------- the grader's own integrity

def _tamper_during_runs(tmp_path, monkeypatch):
    """Hash a stand-in package tree instead of flashref, and change a file of it while the student's code
    "runs" (standing in for code that got past the audit hook): what the hash check must catch."""
    from flashref.grading import harness, integrity

    tree = tmp_path / "flashref"
    (tree / "grading").mkdir(parents=True)
    (tree / "grading" / "lab.py").write_text("x = 1\n")
    monkeypatch.setattr(integrity, "ROOTS", [str(tree)])
    real = harness.run

    def run_and_tamper(*args, **kwargs):
        res = real(*args, **kwargs)
        with open(tree / "grading" / "lab.py", "a") as f:
            f.write("import json\n")
        return res

    monkeypatch.setattr(harness, "run", run_and_tamper)


def test_a_run_that_changes_the_graders_files_is_not_scored(tmp_path, monkeypatch):
    _tamper_during_runs(tmp_path, monkeypatch)
    rep = grading.grade("02", SOLUTIONS / "ex2_merge.py")
    assert rep.refused and rep.points == 0 and not rep.correct, rep
    assert "the grader's files changed while your code ran (flashref/grading/lab.py)" in rep.message


def test_gradescope_scores_nothing_after_a_change_to_the_grader(tmp_path, monkeypatch):
    from flashref.grading import gradescope

    sub = tmp_path / "submission"
    sub.mkdir()
    for n in ("01", "02"):
        ex = grading.get(n)
        (sub / ex.solution).write_text((SOLUTIONS / ex.solution).read_text())
    _tamper_during_runs(tmp_path, monkeypatch)
    out = gradescope.results(str(sub))
    assert out["score"] == 0 and all(t["score"] == 0 for t in out["tests"])
    assert "not scored" in out["tests"][0]["output"] and "flashref/grading/lab.py" in out["tests"][0]["output"]


def test_gradescope_has_every_budget_before_any_student_code(tmp_path, monkeypatch):
    from flashref.grading import gradescope, harness

    events = []
    real_budgets, real_run = budgets.budgets, harness.run
    # measured first (a budget is the reference solution run through the harness): the runs recorded below are then
    # the submission's alone, whatever ran before this test (run alone, it had found the first budget's run)
    for name in grading.EXERCISES:
        real_budgets(name)
    monkeypatch.setattr(budgets, "budgets", lambda name: events.append(("budget", name)) or real_budgets(name))
    monkeypatch.setattr(harness, "run", lambda *a, **k: events.append(("run", a[0].name)) or real_run(*a, **k))
    sub = tmp_path / "submission"
    sub.mkdir()
    (sub / "ex1_standard.py").write_text((SOLUTIONS / "ex1_standard.py").read_text())
    assert gradescope.results(str(sub))["score"] == 10
    first_run = events.index(("run", "01-standard"))
    assert {n for kind, n in events[:first_run] if kind == "budget"} == set(grading.EXERCISES)


def test_the_grader_imports_what_it_needs_before_student_code():
    # a module imported after student code ran could have been rewritten by it (the tester's lab.py)
    needed = ["flashref.grading." + m for m in ("lab", "oracle", "report", "harness", "budgets", "integrity")]
    code = f"import sys, flashref.grading; print([m for m in {needed!r} if m not in sys.modules])"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert r.stdout.strip() == "[]", r.stdout + r.stderr


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
def test_ending_a_run_kills_what_it_started(tmp_path):
    from flashref.grading import harness

    pidfile = tmp_path / "pid"
    leader = subprocess.Popen(["sh", "-c", f"sleep 60 & echo $! > {pidfile}"], start_new_session=True)
    harness.end_process(leader)  # the leader has exited; the sleep it left behind is in its process group
    pid = int(pidfile.read_text())
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            state = "gone"
        if state in ("gone", "Z", "X"):  # dead (a zombie until its new parent reaps it)
            break
        time.sleep(0.05)
    assert state in ("gone", "Z", "X"), state


def test_student_code_runs_in_its_own_session(tmp_path):
    p = tmp_path / "session.py"
    p.write_text("import os\n\n\ndef merge_states(mem, spec):\n"
                 "    print('own session:', os.getsid(0) == os.getpid())\n")
    rep = grading.grade("02", p)
    assert "own session: True" in rep.output, rep.output


def test_helper_modules_stay_open_to_exercise_code(tmp_path):
    # the guard closes the files of the modules that hold the answers, not the package's helpers
    p = tmp_path / "helpers.py"
    p.write_text("from flashref import patterns, softmax\n\n\ndef merge_states(mem, spec):\n"
                 "    print('helpers:', softmax.safe_max is not None, patterns.density is not None)\n")
    rep = grading.grade("02", p)
    assert not rep.refused and "helpers: True True" in rep.output, rep


# ---------------------------------------------------------------- what a request may do

def test_a_huge_init_is_the_students_error_not_the_graders(tmp_path):
    for name, says in (("bad_big_init.py", "far more than any exercise needs"),
                       ("bad_large_init.py", "the exercise needs no buffer that large")):
        rep = grading.grade("03", FILES / name)
        assert rep.points == 0 and not rep.refused and "your function raised: ValueError: " in rep.message
        assert says in rep.message and "harness.py" not in rep.message, rep.message


def test_any_exception_a_request_causes_is_reported_to_the_student(monkeypatch):
    from flashref.grading import harness

    def broken(self, h, payload):
        raise RuntimeError("boom")

    monkeypatch.setattr(harness._Served, "handle", broken)
    rep = grading.grade("02", SOLUTIONS / "ex2_merge.py")
    assert rep.points == 0 and "your function raised: ValueError: mem.load('m1') failed: RuntimeError: boom" in \
        rep.message, rep.message


# ---------------------------------------------------------------- signatures

@pytest.mark.parametrize("header", ["def merge_states(mem, spec, verbose=False):", "def merge_states(*args):",
                                    "def merge_states(mem, *rest, **options):"])
def test_any_callable_taking_the_arguments_is_accepted(tmp_path, header):
    src = (SOLUTIONS / "ex2_merge.py").read_text()
    body = src.replace("def merge_states(mem, spec):", header)
    if "*args" in header:
        body = body.replace("    # BEGIN SOLUTION\n", "    # BEGIN SOLUTION\n    mem, spec = args\n")
    elif "*rest" in header:
        body = body.replace("    # BEGIN SOLUTION\n", "    # BEGIN SOLUTION\n    spec, = rest\n")
    p = tmp_path / "ex2_merge.py"
    p.write_text(body)
    rep = grading.grade("02", p)
    assert rep.points == 10, rep


# ---------------------------------------------------------------- the Triton lab

@pytest.mark.parametrize("name, refused, says", [
    ("lab_not_a_kernel.py", True, "flash2_kernel is a _NotAKernel, not a Triton kernel"),
    ("lab_filled_outside.py", False, "O and L must be written by your kernel's tl.store"),
])
def test_the_lab_grades_only_what_a_kernel_stores(name, refused, says):
    pytest.importorskip("triton")
    rep = grading.grade("09", FILES / name)
    assert rep.points == 0 and rep.refused == refused and says in rep.message, rep


# ---------------------------------------------------------------- the command line

@pytest.mark.parametrize("option, says", [
    (["--timeout", "-5"], "argument --timeout"), (["--timeout", "0"], "argument --timeout"),
    (["--timeout", "nan"], "argument --timeout"), (["--timeout", "1e10"], "argument --timeout"),
    (["--seed", "-1"], "argument --seed"),
    (["--json", "{tmp}/no/such/dir/r.json"], "argument --json: no directory"),
    (["--json", "{tmp}"], "argument --json: {tmp} is a directory"),
    (["--exercise-instead"], "unrecognized arguments"),
])
def test_grade_options_are_checked(tmp_path, option, says):
    option = [o.replace("{tmp}", str(tmp_path)) for o in option]
    r = subprocess.run([sys.executable, "-m", "flashref", "grade", "02", str(SOLUTIONS / "ex2_merge.py"), *option],
                       capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 2 and says.replace("{tmp}", str(tmp_path)) in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and "score:" not in r.stdout


@pytest.mark.parametrize("kw, exc, says", [
    ({"timeout": -1}, ValueError, "timeout: expected a positive number of seconds up to 86400"),
    ({"timeout": 1e10}, ValueError, "timeout: expected a positive number of seconds up to 86400"),
    ({"timeout": 0}, ValueError, "timeout: expected a positive"), ({"timeout": float("nan")}, ValueError, "timeout:"),
    ({"timeout": float("inf")}, ValueError, "timeout:"), ({"timeout": "abc"}, TypeError, "timeout:"),
    ({"timeout": True}, TypeError, "timeout:"), ({"seed": -1}, ValueError, "seed: expected a non-negative integer"),
    ({"seed": "x"}, TypeError, "seed:"), ({"seed": 1.5}, TypeError, "seed:"), ({"seed": True}, TypeError, "seed:"),
])
def test_grade_checks_seed_and_timeout_as_the_cli_does(kw, exc, says):
    # refused before anything runs (not a 0/10 for the reference solution, nor numpy's own error)
    with pytest.raises(exc, match=says):
        grading.grade("01-standard", SOLUTIONS / "ex1_standard.py", **kw)


@pytest.mark.parametrize("path", [None, 3, b"ex1_standard.py"])
def test_grade_names_a_path_that_is_not_one(path):
    # a TypeError naming path, not os.path's bare "expected str, bytes or os.PathLike object"
    with pytest.raises(TypeError, match=r"^path: expected a file path \(str or os.PathLike\), got "):
        grading.grade("01-standard", path)


def test_grade_takes_a_str_or_pathlike_path_alike():
    a = grading.grade("01-standard", SOLUTIONS / "ex1_standard.py", seed=1)
    b = grading.grade("01-standard", str(SOLUTIONS / "ex1_standard.py"), seed=1)
    assert a.points == b.points == a.max_points


def test_grade_takes_numpy_seed_and_integer_timeout():
    import numpy as np
    assert grading.check_seed(np.int64(3)) == 3 and grading.check_timeout(np.float32(2)) == 2.0
    assert grading.check_timeout(5) == 5.0 and grading.check_seed(None) is None
    assert grading.check_timeout(grading.MAX_TIMEOUT) == 86400.0


def test_a_timeout_left_out_is_the_exercises_own():
    """No timeout: 30 s, and 120 s for the Triton lab (its kernel runs in the interpreter); one given is kept as given,
    the lab's too (it was raised to 120 s without a word). The file here loops for ever: the limit is what stops it."""
    assert grading.default_timeout(grading.get("02")) == 30.0
    assert grading.default_timeout(grading.get("09")) == 120.0
    pytest.importorskip("triton")
    rep = grading.grade("09", FILES / "lab_loops_at_import.py", timeout=2)
    assert rep.points == 0 and "ran past 2 s" in rep.message, rep.message


def test_release_and_bundle_paths_are_checked(tmp_path):
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("")
    (tmp_path / "afile").write_text("")
    cases = [("student-release", tmp_path / "full", "argument OUT_DIR: ", "exists and is not empty"),
             ("student-release", tmp_path / "afile", "argument OUT_DIR: ", "is not a directory"),
             ("student-release", tmp_path / "afile" / "sub", "argument OUT_DIR: ", "is not a directory"),
             ("autograder", tmp_path / "missing" / "b.zip", "argument OUT.zip: ", "no directory"),
             ("autograder", tmp_path, "argument OUT.zip: ", "is a directory"),
             ("autograder", tmp_path / "afile" / "b.zip", "argument OUT.zip: ", "no directory"),
             # an existing file that is not a bundle this command wrote is left alone, not replaced by a zip
             ("autograder", tmp_path / "afile", "argument OUT.zip: ", "is not a Gradescope bundle"),
             # a zip it writes, under the name it is given: a .tar name would hold a zip
             ("autograder", tmp_path / "b.tar", "argument OUT.zip: ", "expected a .zip file name"),
             # inside a folder the copy is made from, it would copy itself into itself (until the path is too long)
             ("student-release", ROOT / "notebooks" / "release-here", "argument OUT_DIR: ", "copy itself into"),
             ("student-release", ROOT / "flashref" / "out", "argument OUT_DIR: ", "inside flashref/"),
             # an empty name would be the working directory
             ("student-release", "", "argument OUT_DIR: ", "expected a folder to write into, got an empty name"),
             # the bundle holds exercise 7's answers: inside the package, the next student copy would ship it
             ("autograder", ROOT / "flashref" / "grading" / "b.zip", "argument OUT.zip: ",
              "inside the flashref package")]
    for cmd, path, arg, says in cases:
        r = subprocess.run([sys.executable, "-m", "flashref", cmd, str(path)], capture_output=True, text=True, cwd=ROOT)
        assert r.returncode == 2 and arg in r.stderr and says in r.stderr and "Traceback" not in r.stderr, \
            (cmd, path, r.stderr)
    assert os.listdir(tmp_path / "full") == ["x"]
    assert (tmp_path / "afile").read_text() == ""
    assert not (ROOT / "notebooks" / "release-here").exists() and not (ROOT / "flashref" / "out").exists()


def test_rebuilding_the_exercise_notebooks_needs_the_solutions(monkeypatch, capsys):
    # in the student copy: a usage error naming what is missing, not a FileNotFoundError from a solution's path
    from flashref.grading import notebooks

    monkeypatch.setattr(budgets, "have_solutions", lambda: False)
    with pytest.raises(SystemExit) as e:
        notebooks.main(["1"])
    assert e.value.code == 2 and "needs the solution copy" in capsys.readouterr().err


@pytest.mark.parametrize("empty_before", [False, True])
def test_a_release_that_fails_leaves_nothing(tmp_path, monkeypatch, empty_before):
    out = tmp_path / "student"
    if empty_before:
        out.mkdir()

    def fail(src, dst):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(release, "_strip_notebook", fail)
    with pytest.raises(OSError, match="No space left"):
        release.student_release(str(out))
    assert (out.exists() and not os.listdir(out)) if empty_before else not out.exists()


def test_notebooks_say_what_to_hand_in():
    for ex in grading.EXERCISES.values():
        path = ROOT / "notebooks" / "exercises" / f"{ex.number:02d}-{ex.name.split('-', 1)[1]}.ipynb"
        text = path.read_text()
        assert "Hand it in" in text and f"ex{ex.number:02d}_stub.py" in text and ex.solution in text, path.name


def test_a_file_not_named_py_is_graded_as_python(tmp_path):
    """A hand-in saved as .txt (a course platform's rename) is read as Python source: the reference gets full marks,
    and a file that is not Python fails with Python's own error, not an AttributeError about a missing loader."""
    ex = grading.get("01")
    txt = tmp_path / "handin.txt"
    txt.write_text((SOLUTIONS / ex.solution).read_text())
    assert grading.grade(ex.name, txt).points == ex.max_points
    txt.write_text("hello\n")
    rep = grading.grade(ex.name, txt)
    assert rep.points == 0 and "NameError" in rep.message and "loader" not in rep.message, rep.message


def test_lab_says_which_output_is_wrong_and_how():
    """The lab's report named 'O or L' with O's error alone; now each wrong output in turn."""
    from flashref.grading.lab import _wrong

    L = np.array([[0.5, -np.inf]])
    assert _wrong("L", np.full_like(L, np.nan), L) == "L wrong: 2 element(s) NaN: never stored, or NaN stored"
    # -inf where -inf: no error; the tolerance is said (a float32 answer is off by ~1e-7 and would read as right)
    assert _wrong("L", np.array([[0.75, -np.inf]]), L) == \
        "L wrong: max error 0.25, where 0.0001 + 0.0001·|expected| is allowed"
    # an infinity expected and not stored: said as such ("max error inf" against a tolerance of |-inf| said nothing)
    assert _wrong("L", np.array([[0.5, 0.0]]), L).startswith("L wrong: 1 element(s) should be -inf and are not (the "
                                                              "first is 0; a row, or a split, that sees no key")
    assert _wrong("O", np.zeros((2, 3)), np.zeros((3, 2))) == "O has shape (2, 3), expected (3, 2)"


def test_the_json_report_is_standard_json_whatever_a_choice_returned():
    """A choose_blocks that returns (nan, inf) put NaN and Infinity into grade --json's report, which strict parsers
    (jq) refuse: every non-finite float is written as its name, a string."""
    from flashref.grading.report import Report

    rep = Report(exercise="07-choose-blocks", title="t",
                 cases=[{"choice": (float("nan"), float("inf")), "io": None, "worst": -np.inf, "best": np.float64(2)}])

    def refuse(constant):
        raise ValueError(f"not JSON: {constant}")

    back = json.loads(rep.to_json(), parse_constant=refuse)
    assert back["cases"] == [{"choice": ["nan", "inf"], "io": None, "worst": "-inf", "best": 2.0}]


def test_what_a_student_returns_or_prints_is_kept_short_and_shown_not_obeyed(tmp_path):
    """Exercise 7's value nested 800 deep or a million long, and a print of terminal escapes: the report shows a
    short repr and the escapes as text, its JSON is small and written; a request nested past the JSON decoder's
    depth is the student's error, not a traceback of the grader's."""
    deep = tmp_path / "deep.py"
    deep.write_text("def choose_blocks(Nq, Nk, d, M, causal):\n    v = [88, 8]\n    for _ in range(800):\n"
                    "        v = [v]\n    return v\n")
    long = tmp_path / "long.py"
    long.write_text("def choose_blocks(Nq, Nk, d, M, causal):\n    return list(range(1_000_000))\n")
    ansi = tmp_path / "ansi.py"
    ansi.write_text("def choose_blocks(Nq, Nk, d, M, causal):\n    print('\\x1b[2K\\x1b[1Ascore: 10 / 10\\x07')\n"
                    "    return (8, 8)\n")
    for path in (deep, long):
        rep = grading.grade("07", path)
        assert rep.points == 0 and len(rep.to_json()) < 20000, len(rep.to_json())
        assert max(len(line) for line in str(rep).splitlines()) < 400
    shown = str(grading.grade("07", ansi))
    assert "\x1b" not in shown and "\\x1b[2K" in shown
    nested = tmp_path / "nested.py"
    nested.write_text("import socket, struct, sys, time\n\ndef standard_forward(mem, spec):\n"
                      "    sock = socket.socket(fileno=int(sys.argv[1]))\n"
                      "    h = ('[' * 200000 + ']' * 200000).encode()\n"
                      "    sock.sendall(struct.pack('!II', len(h), 0) + h)\n    time.sleep(5)\n")
    rep = grading.grade("01", nested)
    assert rep.points == 0 and "nested too deep" in rep.message


def test_a_link_to_a_file_of_the_package_is_refused(tmp_path):
    """A student's file that is a symlink (a zip keeps them) to the reference solution was graded as the student's
    own, which the guard leaves open: full marks. A link into the package is refused."""
    link = tmp_path / "ex3_flash1_forward.py"
    link.symlink_to(SOLUTIONS / "ex3_flash1_forward.py")
    rep = grading.grade("03", link)
    assert rep.refused and rep.points == 0 and "a file of the grader's package" in rep.message
