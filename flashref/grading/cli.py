"""The course's commands: ``grade``, ``student-release``, ``autograder`` (``python -m flashref ...``)."""

from __future__ import annotations

import argparse


def grade_main(argv) -> int:
    from . import grade
    from .exercises import EXERCISES

    p = argparse.ArgumentParser(prog="python -m flashref grade",
                                description="Grade an exercise file on correctness, counted IO and footprint. "
                                            f"Exercises: {', '.join(EXERCISES)}")
    p.add_argument("exercise")
    p.add_argument("file")
    p.add_argument("--json", metavar="OUT", help="also write the report as JSON")
    p.add_argument("--timeout", type=float, default=30.0, help="seconds the file may run (default 30)")
    p.add_argument("--seed", type=int, default=None, help="seed of the random data (default: fresh)")
    a = p.parse_args(argv)
    try:
        rep = grade(a.exercise, a.file, seed=a.seed, timeout=a.timeout)
    except ValueError as e:
        p.error(str(e))
    print(rep)
    if a.json:
        rep.to_json(a.json)
    return 0 if rep.passed else 1


def release_main(argv) -> int:
    from .release import student_release

    p = argparse.ArgumentParser(prog="python -m flashref student-release",
                                description="Write the course for students: stubs, no solutions.")
    p.add_argument("out_dir")
    student_release(p.parse_args(argv).out_dir)
    return 0


def autograder_main(argv) -> int:
    from .release import autograder

    p = argparse.ArgumentParser(prog="python -m flashref autograder", description="Write a Gradescope bundle.")
    p.add_argument("out_zip")
    autograder(p.parse_args(argv).out_zip)
    return 0
