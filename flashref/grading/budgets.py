"""Budgets: what the reference solution moves and holds, measured by running it through the harness.

In the repository the reference solutions are here (``solutions/``) and every budget is measured
on demand (once per process). The student copy has no solutions: ``python -m flashref
student-release`` measures them at release time and writes ``budgets.json`` beside this file, which
:func:`budgets` then reads. No budget is a typed-in number.

Exercise 7's budget is different: it is the answer (every feasible (Br, Bc) with its IO, so the
best one too). The student copy's ``budgets.json`` leaves it out, and its grader computes the table
in the grading process from the closed form (``iomodel``); only the Gradescope bundle, which is the
instructor's and has no ``iomodel``, carries it, where the audit hook of the process that runs
student code refuses to open it.
"""

from __future__ import annotations

import functools
import json
import os

import numpy as np

from . import harness
from .exercises import Exercise

HERE = os.path.dirname(os.path.abspath(__file__))
SOLUTIONS = os.path.join(HERE, "solutions")
RELEASED = os.path.join(HERE, "budgets.json")
BUDGET_SEED = 12345  # the data the reference runs on (budgets do not depend on it: IO is data-independent)


def have_solutions() -> bool:
    return os.path.isdir(SOLUTIONS)


def solution_path(ex: Exercise) -> str:
    return os.path.join(SOLUTIONS, ex.solution)


@functools.cache
def _released() -> dict:
    try:
        with open(RELEASED) as f:
            released = json.load(f)
    except (OSError, ValueError) as e:  # ValueError: json's decode error
        raise RuntimeError(f"{RELEASED} cannot be read ({e}): rebuild this copy") from None
    if not isinstance(released, dict):
        raise RuntimeError(f"{RELEASED} is not the budgets this copy was released with: rebuild this copy")
    return released


@functools.cache
def budgets(name: str) -> list[dict]:
    """One budget per case: ``{"by_tensor": {name: [reads, writes]}, "peak_sram": int, "sram_size": int}``
    (for a choice exercise ``{"choices": [[Br, Bc, io], ...]}``)."""
    from .exercises import get

    ex = get(name)
    if not have_solutions():
        released = _released()
        if ex.name in released:
            return released[ex.name]
        if ex.kind != "choice":
            raise RuntimeError(f"{RELEASED} has no budget for {ex.name}: rebuild this copy")
    if ex.kind == "choice":
        return [{"choices": choice_table(case)} for case in ex.cases]
    if ex.kind == "triton":
        from . import lab

        return lab.measure_budgets(ex, solution_path(ex))
    rng = np.random.default_rng(BUDGET_SEED)
    setups = [ex.setup(case, rng) for case in ex.cases]
    res = harness.run(ex, solution_path(ex), setups, [None] * len(setups), timeout=120)
    if res.error or res.refused or len(res.cases) != len(setups):
        raise RuntimeError(f"the reference solution of {ex.name} failed: {res.error or res.refused}\n{res.output}")
    out = []
    for c in res.cases:
        peak = int(c.io.peak_sram)
        out.append({"by_tensor": {k: [t.reads, t.writes] for k, t in c.io.by_tensor.items()},
                    "peak_sram": peak, "sram_size": (3 * peak) // 2})
    return out


def choice_table(case: dict) -> list[list[int]]:
    """Every feasible (Br, Bc) of exercise 7's case with FlashAttention-2's counted forward IO."""
    from .exercises.ex7_block_sizes import choices

    try:
        from .. import iomodel
    except ImportError as e:  # the student copy ships it as bytecode, for the Python that built the copy
        # a module missing by name is a dependency not installed (ml_dtypes, say); else the bytecode's Python
        missing = getattr(e, "name", None)
        fix = (f"pip install {missing.split('.')[0]}" if missing and not missing.startswith("flashref")
               else "run the grader with the Python that built the copy")
        raise RuntimeError(f"exercise 7's ranking needs flashref.iomodel, which this copy cannot import ({e}); "
                           f"{fix}") from e

    out = []
    for Br, Bc in choices(case):
        p = iomodel.predict("flash2", "forward", Nq=case["Nq"], Nk=case["Nk"], d=case["d"],
                            causal=case.get("causal", False), block_sizes=(Br, Bc))
        out.append([Br, Bc, p.total])
    return out


def all_budgets(*, answers: bool = False) -> dict:
    """Every exercise's budgets: what the student copy writes (``answers=False``: not exercise 7's table of
    choices, which is its answer) and the Gradescope bundle writes (``answers=True``)."""
    from .exercises import EXERCISES

    return {name: budgets(name) for name, ex in EXERCISES.items() if answers or ex.kind != "choice"}
