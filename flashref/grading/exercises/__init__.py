"""The course's exercises, one module each, in ramp order.

Each module defines ``EXERCISE``: what the student writes (``function`` and its ``signature``), the
cases it is run on (shapes fixed here, data drawn fresh at every grading), how each case is set up
in the grader's memory, and the reference solution (in ``solutions/``) whose counted IO and
measured footprint are the budget. No budget is typed in: the grader runs the reference solution
through the same harness (or, in the student copy, reads the numbers that run produced at release).
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from .. import oracle

__all__ = ["Exercise", "Setup", "EXERCISES", "get", "attention_setup"]


@dataclass
class Setup:
    """One case as the grader lays it out: the student's spec, HBM inputs, outputs to fill, the truth."""

    spec: dict
    inputs: dict = field(default_factory=dict)  # name -> array in HBM (lead + shape)
    outputs: dict = field(default_factory=dict)  # name -> shape (without lead), NaN until stored
    expected: dict = field(default_factory=dict)  # name -> array the stored output must match
    # names of tensors the student's code creates in HBM (exercise 1's S and P), checked as outputs are: in expected
    # too, read back after the run (NaN where never stored)
    created: tuple = ()
    lead_shape: tuple = ()
    args: list | None = None  # for exercises that return a value instead of using memory


@dataclass
class Exercise:
    number: int
    name: str
    title: str
    function: str
    signature: str
    kind: str  # "memory" (works in the counted memory), "choice" (returns a value), "triton" (the lab)
    cases: list
    setup: Callable | None
    solution: str
    # "FILL ME IN (~N lines)": None (every exercise) counts the reference solution's lines of code, so that the hint
    # follows the reference when a case makes it longer
    lines: int | None = None
    # "equal": the exercise is an algorithm's schedule (fixed Br, Bc): its IO must equal the reference's,
    # per tensor; loading everything once and computing untiled in Python is not that algorithm.
    # "at_most": no more than the reference's, per tensor (where moving less is fair game).
    io_rule: str = "at_most"
    io_note: str = ""  # why the IO must be equal, said when it is not
    points: tuple = (5, 3, 2)  # correctness, IO, footprint

    @property
    def params(self) -> list[str]:
        return [p.strip() for p in self.signature.strip("()").split(",") if p.strip()]

    @property
    def max_points(self) -> int:
        return sum(self.points)


_MODULES = ("ex1_standard", "ex2_merge", "ex3_flash1_forward", "ex4_flash1_backward", "ex5_flash2_causal",
            "ex6_blocksparse", "ex7_block_sizes", "ex8_split_kv", "ex9_triton_lab")


def _load():
    out = {}
    for m in _MODULES:
        ex = importlib.import_module(f"{__name__}.{m}").EXERCISE
        out[ex.name] = ex
    return out



def get(name) -> Exercise:
    """An exercise by name (``"03-flash1-forward"``), number (``3`` or ``"3"``) or prefix (``"03"``)."""
    key = str(name)
    for ex in EXERCISES.values():
        if key in (ex.name, str(ex.number), f"{ex.number:02d}") or ex.name.startswith(key + "-"):
            return ex
    raise ValueError(f"exercise: expected one of {', '.join(EXERCISES)} (or its number), got {name!r}")


def attention_setup(case: dict, rng, outputs: tuple, *, backward=False, element_mask=None, extra_spec=None,
                    created: tuple = ()):
    """Q, K, V (and for a backward O, dO, l, m from the oracle) for an attention case. ``created``: tensors of the
    oracle's forward the student's code writes as new HBM tensors (exercise 1's S and P), graded too.

    ``case`` keys: Nq, Nk, d, heads, and optionally causal, masked_row (a query row that sees no
    key), blind_keys (``(row, k)``: that row sees no key before k), dropout_p, Br, Bc, scale.
    """
    Nq, Nk, d, lead = case["Nq"], case["Nk"], case["d"], (case.get("heads", 1),)
    Q, K, V = (rng.standard_normal(lead + (n, d)) for n in (Nq, Nk, Nk))
    mask = None
    if case.get("masked_row") is not None:
        mask = rng.random((Nq, Nk)) > 0.25
        mask[case["masked_row"]] = False  # a fully masked row: zeros out, zero gradients
    if case.get("blind_keys") is not None:
        row, k = case["blind_keys"]
        mask = np.ones((Nq, Nk), dtype=bool) if mask is None else mask
        mask[row, :k] = False
    causal, p, seed = case.get("causal", False), case.get("dropout_p", 0.0), int(rng.integers(1 << 30))
    scale = case.get("scale", 1.0 / math.sqrt(d))
    attend = oracle.attend_mask(Nq, Nk, causal, mask, element_mask)
    fwd = oracle.forward(Q, K, V, scale=scale, attend=attend, dropout_p=p, seed=seed)
    spec = {"Nq": Nq, "Nk": Nk, "d": d, "lead_shape": lead, "scale": scale, "causal": causal, "mask": mask,
            "dropout_p": p, "seed": seed, "Br": case.get("Br"), "Bc": case.get("Bc"), **(extra_spec or {})}
    inputs = {"Q": Q, "K": K, "V": V}
    if backward:
        dO = rng.standard_normal(Q.shape)
        inputs.update(O=fwd["O"], dO=dO, l=fwd["l"], m=fwd["m"])
        expected = oracle.backward(Q, K, V, dO, scale=scale, attend=attend, dropout_p=p, seed=seed)
    else:
        expected = {k: fwd[k] for k in outputs}
    shapes = {"O": (Nq, d), "l": (Nq,), "m": (Nq,), "L": (Nq,), "dQ": (Nq, d), "dK": (Nk, d), "dV": (Nk, d)}
    return Setup(spec=spec, inputs=inputs, outputs={k: shapes[k] for k in outputs},
                 expected={k: expected[k] for k in outputs} | {k: fwd[k] for k in created}, created=tuple(created),
                 lead_shape=lead)


def nan_like_outputs(setup: Setup) -> dict:
    return {k: np.full(setup.lead_shape + tuple(s), np.nan) for k, s in setup.outputs.items()}


# Last: the exercise modules import Exercise, Setup and attention_setup from here.
EXERCISES: dict[str, Exercise] = _load()
