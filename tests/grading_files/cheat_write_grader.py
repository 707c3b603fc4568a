"""Write a file into the grader's package (the tester appended to grading/lab.py, which the grader imported later)."""

import os

import flashref

with open(os.path.join(flashref.__path__[0], "grading", "_written_by_student.py"), "a") as f:
    f.write("import json\n")


def merge_states(mem, spec):
    pass
