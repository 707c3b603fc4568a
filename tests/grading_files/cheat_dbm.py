"""Write a file outside the grader's temporary folder through the dbm extension module (no "open" audit event)."""

import _dbm


def merge_states(mem, spec):
    _dbm.open("/tmp/flashref_written_by_student", "n")
