"""The grader's own files, hashed before student code runs and checked after: a changed tree is not scored.

A student's code runs in another process, so it cannot change the grader's objects; but it runs as
the same OS user, so it could try to change the grader's *files* (the modules a later import would
load, the budgets, the solutions), to move a later grading or the next student's. :func:`snapshot`
records the SHA-256 of every file of the installed ``flashref`` package (the solutions and the
budgets included; Python's ``__pycache__`` folders excepted, since Python itself rewrites them), and
:func:`changes` lists what differs now. The grader takes a snapshot before it starts any student
code and refuses to score a run after which the list is not empty.
"""

from __future__ import annotations

import hashlib
import os

#: The folders hashed: the installed flashref package (which holds the grader, its budgets and, in
#: the repository, the reference solutions).
ROOTS = [os.path.dirname(os.path.dirname(os.path.abspath(__file__)))]


def snapshot(roots=None) -> dict:
    """``{path: sha256}`` of every file under ``roots`` (default :data:`ROOTS`), ``__pycache__`` excepted."""
    out = {}
    for root in roots or ROOTS:
        for folder, dirs, files in os.walk(root):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            for fn in sorted(files):
                path = os.path.join(folder, fn)
                try:
                    with open(path, "rb") as f:
                        out[path] = hashlib.sha256(f.read()).hexdigest()
                except OSError:
                    out[path] = None  # unreadable now: a change if it becomes readable
    return out


def changes(before: dict, roots=None) -> list[str]:
    """The files added, removed or changed since ``before`` (paths relative to their root)."""
    roots = roots or ROOTS
    now = snapshot(roots)
    diff = sorted(p for p in set(before) | set(now) if before.get(p, "absent") != now.get(p, "absent"))
    return [_rel(p, roots) for p in diff]


def message(changed: list[str]) -> str:
    shown = ", ".join(changed[:5]) + (f" and {len(changed) - 5} more" if len(changed) > 5 else "")
    return (f"the grader's files changed while your code ran ({shown}): a run that changes the grader is not "
            f"scored. (Instructors: reinstall the package before grading anything else.)")


def _rel(path, roots):
    for r in roots:
        if path.startswith(r + os.sep):
            return os.path.join(os.path.basename(r), os.path.relpath(path, r))
    return path
