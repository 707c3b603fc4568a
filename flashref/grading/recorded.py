"""The recorded Gradescope results (a maintainer's tool): ``python -m flashref.grading.recorded [--check]``.

``docs/course/results-reference.json`` and ``docs/course/results-stub.json`` are the ``results.json`` that the
Gradescope bundle's entry point (:func:`flashref.grading.gradescope.results`) writes for a submission of every
reference solution and for one of every stub, each file under its stub's name: the instructor's examples of what
students are shown. They are the instructor's (the reference's exercise 7 table holds the best choices): neither the
student copy nor the bundle ships them. Write them again after a change to the grader's feedback; ``--check`` only
says whether they are current. It needs the solution copy, and Triton for the lab (it grades every exercise, about
15 s).
"""

from __future__ import annotations

import importlib.util
import os
import sys
import tempfile

from . import budgets, gradescope
from .exercises import EXERCISES
from .release import REPO, stub_source

#: the recorded results: which submission, and where its results.json is kept
RECORDED = {kind: os.path.join(REPO, "docs", "course", f"results-{kind}.json") for kind in ("reference", "stub")}


def results() -> dict[str, dict]:
    """``{"reference": results.json, "stub": results.json}``, graded now."""
    if not budgets.have_solutions():
        raise RuntimeError("the recorded results need the solution copy (flashref/grading/solutions)")
    if importlib.util.find_spec("triton") is None:
        raise RuntimeError("the recorded results grade the Triton lab, which needs Triton: pip install triton")
    out = {}
    with tempfile.TemporaryDirectory(prefix="flashref-recorded-") as tmp:
        for kind in RECORDED:
            folder = os.path.join(tmp, kind)
            os.makedirs(folder)
            for ex in EXERCISES.values():
                if kind == "reference":
                    with open(budgets.solution_path(ex)) as f:
                        text = f.read()
                else:
                    text = stub_source(ex)
                with open(os.path.join(folder, ex.solution), "w") as f:
                    f.write(text)
            out[kind] = gradescope.results(folder)
    return out


def main(argv=None) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m flashref.grading.recorded", description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="write nothing; exit 1 if a recorded file is not current")
    args = ap.parse_args(argv)
    try:
        graded = results()
    except RuntimeError as e:
        print(f"python -m flashref.grading.recorded: {e}", file=sys.stderr)
        return 2
    stale = []
    for kind, result in graded.items():
        path, text = RECORDED[kind], gradescope.dumps(result)
        current = False
        if os.path.exists(path):
            with open(path) as f:
                current = f.read() == text
        if args.check:
            if not current:
                stale.append(path)
            print(f"{os.path.relpath(path, REPO)}: {'current' if current else 'STALE'}")
        else:
            with open(path, "w") as f:
                f.write(text)
            print(f"{os.path.relpath(path, REPO)}: score {result['score']:g} / "
                  f"{sum(t['max_score'] for t in result['tests'])}")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
