"""Budgets: what the reference solution moves and holds, measured by running it through the harness.

In the repository the reference solutions are here (``solutions/``) and every budget is measured
on demand (once per process). The student copy has no solutions: ``python -m flashref
student-release`` measures them at release time and writes ``budgets.json`` beside this file, which
:func:`budgets` then reads. No budget is a typed-in number.
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
    with open(RELEASED) as f:
        return json.load(f)


@functools.cache
def budgets(name: str) -> list[dict]:
    """One budget per case: ``{"by_tensor": {name: [reads, writes]}, "peak_sram": int, "sram_size": int}``
    (for a choice exercise ``{"choices": [[Br, Bc, io], ...]}``)."""
    from .exercises import get

    ex = get(name)
    if not have_solutions():
        return _released()[ex.name]
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
    from .. import iomodel
    from .exercises.ex7_block_sizes import choices

    out = []
    for Br, Bc in choices(case):
        p = iomodel.predict("flash2", "forward", Nq=case["Nq"], Nk=case["Nk"], d=case["d"],
                            causal=case.get("causal", False), block_sizes=(Br, Bc))
        out.append([Br, Bc, p.total])
    return out


def all_budgets() -> dict:
    """Every exercise's budgets (what the student release writes)."""
    from .exercises import EXERCISES

    return {name: budgets(name) for name in EXERCISES}
