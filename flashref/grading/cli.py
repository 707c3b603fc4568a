"""The course's commands: ``grade``, ``student-release``, ``autograder`` (``python -m flashref ...``)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path


def _timeout(text: str) -> float:
    from . import check_timeout  # grade()'s own rule, so that the CLI and the function accept the same values

    try:
        t = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    try:
        return check_timeout(t)
    except (TypeError, ValueError):
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds up to a day, got {text!r}") from None


def _seed(text: str) -> int:
    from . import check_seed  # grade()'s own rule

    try:
        return check_seed(int(text))
    except (TypeError, ValueError):
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got {text!r}") from None


def _json_out(p, path: str, graded: str) -> None:
    """Refuse an --json path that cannot be written, before grading (not after printing the report), or that would
    write over the file being graded or a file of the grader's own package (its budgets among them)."""
    if not path.strip():
        p.error("argument --json: expected a file name, got an empty one")
    if os.path.exists(graded) and os.path.exists(path) and os.path.samefile(path, graded):
        p.error(f"argument --json: {path} is the file being graded: name another file for the report")
    from .release import within

    if within(path, os.path.dirname(os.path.dirname(os.path.abspath(__file__)))):  # flashref/
        p.error(f"argument --json: {path} is inside the flashref package, which the grader reads: write the report "
                f"elsewhere")
    if os.path.isdir(path):
        p.error(f"argument --json: {path} is a directory: name the file to write")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        p.error(f"argument --json: no directory {folder}")
    if not os.access(folder, os.W_OK | os.X_OK) or (os.path.exists(path) and not os.access(path, os.W_OK)):
        p.error(f"argument --json: {path} is not writable")


def grade_main(argv) -> int:
    from . import grade
    from .exercises import EXERCISES, get

    p = argparse.ArgumentParser(prog="python -m flashref grade",
                                description="Grade an exercise file on correctness, counted IO and footprint. "
                                            f"Exercises: {', '.join(EXERCISES)}")
    p.add_argument("exercise")
    p.add_argument("file")
    p.add_argument("--json", metavar="OUT", help="also write the report as JSON")
    p.add_argument("--timeout", type=_timeout, default=None,
                   help="seconds the file may run, up to a day (default 30; 120 for the Triton lab, which runs in "
                        "Triton's interpreter)")
    p.add_argument("--seed", type=_seed, default=None, help="seed of the random data, >= 0 (default: fresh)")
    p.add_argument("--instructor", action="store_true", help="also print what the student's feedback withholds "
                   "as the answer (exercise 7's least IO per case); the solution copy only")
    a = p.parse_args(argv)
    if a.instructor:
        from .budgets import have_solutions

        if not have_solutions():
            p.error("argument --instructor: this is the student copy (no solutions): the instructor's view needs "
                    "the solution copy")
    if a.json is not None:
        _json_out(p, a.json, a.file)
    try:
        ex = get(a.exercise)
    except ValueError as e:
        p.error(f"argument exercise: {str(e).removeprefix('exercise: ')}")
    # grade() scores a missing submission 0 with a message, as an autograder must; typed here, it is a typo
    if not Path(a.file).is_file():
        p.error(f"argument file: {a.file} is not a file")
    try:
        rep = grade(ex.name, a.file, seed=a.seed, timeout=a.timeout, instructor=a.instructor)
    except ModuleNotFoundError as e:  # the lab without Triton: what to install, in one line
        print(f"python -m flashref grade: {e}", file=sys.stderr)
        return 1
    except RuntimeError as e:  # a copy whose budgets are missing or damaged: what to do, in one line
        print(f"python -m flashref grade: {e}", file=sys.stderr)
        return 2
    print(rep)
    if a.json:
        try:
            rep.to_json(a.json)
        except OSError as e:
            print(f"python -m flashref grade: could not write --json {a.json}: {e}", file=sys.stderr)
            return 2
    return 0 if rep.passed else 1


def _write_main(argv, prog, description, metavar, check, write) -> int:
    """A command that writes one artefact at a path: checked first, each error naming the argument (exit 2)."""
    p = argparse.ArgumentParser(prog=prog, description=description)
    p.add_argument("out", metavar=metavar)
    out = p.parse_args(argv).out
    try:
        check(out)
        write(out)
    except (OSError, RuntimeError, ValueError) as e:
        p.error(f"argument {metavar}: {e}")
    print(f"wrote {out}")
    return 0


def release_main(argv) -> int:
    from .release import check_release_dir, student_release

    return _write_main(argv, "python -m flashref student-release", "Write the course for students: stubs, no "
                       "solutions.", "OUT_DIR", check_release_dir, student_release)


def autograder_main(argv) -> int:
    from .release import autograder, check_bundle_path

    return _write_main(argv, "python -m flashref autograder", "Write a Gradescope bundle.", "OUT.zip",
                       check_bundle_path, autograder)
