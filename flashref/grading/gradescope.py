"""Gradescope's results.json from a submission folder: ``python -m flashref.grading.gradescope SUB OUT``.

Each exercise whose file (``exNN_*.py``, the stub's name) is in the submission is graded; points
for correctness, IO and footprint are separate tests, so the student sees where each point went.
A missing file scores zero with a message. Never raises for a bad submission.
"""

from __future__ import annotations

import json
import os
import sys

from . import grade
from .exercises import EXERCISES


def results(submission: str) -> dict:
    tests, total = [], 0.0
    for ex in EXERCISES.values():
        path = os.path.join(submission, ex.solution)
        if os.path.exists(path):
            try:
                rep = grade(ex.name, path)
            except Exception as e:  # noqa: BLE001 - a grader bug must still produce results.json
                rep = None
                msg = f"the grader failed on this file ({type(e).__name__}: {e}); please tell the staff"
            else:
                msg = str(rep)
        else:
            rep, msg = None, f"not submitted: expected a file named {ex.solution}"
        for part, mx in zip(("correctness", "io", "footprint"), ex.points):
            if mx == 0:
                continue
            got = rep.parts[part][0] if rep is not None else 0
            total += got
            tests.append({"name": f"{ex.name} {part}", "score": got, "max_score": mx,
                          "output": msg if part == "correctness" else ""})
    return {"score": total, "tests": tests, "visibility": "visible", "stdout_visibility": "visible"}


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) != 2:
        print(__doc__)
        return 2
    out = results(argv[0])
    with open(argv[1], "w") as f:
        json.dump(out, f, indent=2)
    print(f"score {out['score']:g} / {sum(t['max_score'] for t in out['tests'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
