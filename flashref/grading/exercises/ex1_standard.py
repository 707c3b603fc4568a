"""Exercise 1: standard attention (Algorithm 0), graded on the IO of each of its three lines."""

from . import Exercise, attention_setup

CASES = [
    {"Nq": 7, "Nk": 5, "d": 3, "heads": 2},
    {"Nq": 4, "Nk": 9, "d": 5, "heads": 1, "scale": 1.0},
]

EXERCISE = Exercise(
    number=1, name="01-standard", title="Standard attention (Algorithm 0)",
    function="standard_forward", signature="(mem, spec)", kind="memory", cases=CASES,
    # O, and the S = τ QKᵀ and P = softmax(S) Algorithm 0 writes to HBM, all graded: an O computed from Python copies
    # beside wrong S and P is not Algorithm 0
    setup=lambda case, rng: attention_setup(case, rng, ("O",), created=("S", "P")),
    solution="ex1_standard.py", io_rule="equal",
    io_note="Algorithm 0 moves exactly the budget, line by line",
)
