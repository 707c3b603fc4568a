"""Start a process that outlives the run (it could rewrite results.json after the grader wrote it)."""

import subprocess


def merge_states(mem, spec):
    subprocess.Popen(["sleep", "30"])
