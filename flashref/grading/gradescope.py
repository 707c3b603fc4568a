"""Gradescope's results.json from a submission folder: ``python -m flashref.grading.gradescope SUB OUT``.

Each exercise whose file is in the submission is graded: the stub's name (``ex3_flash1_forward.py``,
what ``student-release`` writes in ``exercises/``) or the exercise notebook's (``ex03_stub.py``, what
its ``%%writefile`` cell writes); with both, the stub's name wins. Points for correctness, IO and
footprint are separate tests, so the student sees where each point went. A missing file scores zero
with a message. Never raises for a bad submission.

Before any student code runs, every budget is computed (or read) and the grader's files are hashed
(:mod:`flashref.grading.integrity`); they are checked after every exercise and once more before
results.json is written. If a submission changed them, no exercise is scored: every test gets zero
and says why.
"""

from __future__ import annotations

import json
import os
import sys

from . import _grade, budgets, integrity
from .exercises import EXERCISES


def submitted(submission: str, ex) -> str | None:
    """The file of ``ex`` in the submission folder: the stub's name, else the notebook's ``exNN_stub.py``."""
    for name in (ex.solution, f"ex{ex.number:02d}_stub.py"):
        path = os.path.join(submission, name)
        if os.path.isfile(path):
            return path
    return None


def results(submission: str) -> dict:
    baseline = integrity.snapshot()
    for ex in EXERCISES.values():  # every budget in memory before any student code runs
        budgets.budgets(ex.name)
    tests, total, tampered = [], 0.0, None
    for ex in EXERCISES.values():
        path = submitted(submission, ex)
        rep = None
        if tampered:
            msg = tampered
        elif path is not None:
            try:
                rep = _grade(ex, path, baseline=baseline)
            except Exception as e:  # noqa: BLE001 - a grader bug must still produce results.json
                msg = f"the grader failed on this file ({type(e).__name__}: {e}); please tell the staff"
            else:
                name = os.path.basename(path)
                msg = str(rep) if name == ex.solution else f"graded {name}\n{rep}"
                other = f"ex{ex.number:02d}_stub.py"
                if name == ex.solution and os.path.isfile(os.path.join(submission, other)):
                    msg = (f"graded {name}; {other} was submitted too and not graded ({name}, the exercise's own "
                           f"file name, wins)\n{msg}")
        else:
            msg = f"not submitted: expected a file named {ex.solution} (or ex{ex.number:02d}_stub.py)"
        changed = integrity.changes(baseline)
        if changed and not tampered:
            tampered = f"not scored: while {ex.name} ran, {integrity.message(changed)}"
            rep, msg = None, tampered
        for part, mx in zip(("correctness", "io", "footprint"), ex.points):
            if mx == 0:
                continue
            got = rep.parts[part][0] if rep is not None else 0
            total += got
            tests.append({"name": f"{ex.name} {part}", "score": got, "max_score": mx,
                          "output": msg if part == "correctness" else ""})
    changed = integrity.changes(baseline)
    if changed or tampered:  # a change after the last exercise, or any before: nothing is scored
        why = tampered or f"not scored: {integrity.message(changed)}"
        for t in tests:
            t["score"], t["output"] = 0, why if t["output"] else ""
        total = 0.0
    return {"score": total, "tests": tests, "visibility": "visible", "stdout_visibility": "visible"}


def dumps(result: dict) -> str:
    """A results.json's text, as :func:`main` writes it (and the recorded examples are kept, grading.recorded)."""
    return json.dumps(result, indent=2)


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] in (["-h"], ["--help"]):
        print(__doc__)
        return 0
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    # both checked before any grading: a mistyped folder scored every exercise "not submitted", and an OUT that
    # cannot be written failed after the whole run
    if not os.path.isdir(argv[0]):
        print(f"python -m flashref.grading.gradescope: SUB: no folder {argv[0]}", file=sys.stderr)
        return 2
    try:
        with open(argv[1], "a"):
            pass
    except OSError as e:
        print(f"python -m flashref.grading.gradescope: OUT: cannot write {argv[1]} ({e.strerror})", file=sys.stderr)
        return 2
    out = results(argv[0])
    with open(argv[1], "w") as f:
        f.write(dumps(out))
    print(f"score {out['score']:g} / {sum(t['max_score'] for t in out['tests'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
