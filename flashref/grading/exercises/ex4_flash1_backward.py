"""Exercise 4: the FlashAttention backward (Algorithm 4), with D_i = rowsum(dO_i ∘ O_i)."""

from . import Exercise, attention_setup

CASES = [
    {"Nq": 10, "Nk": 7, "d": 4, "heads": 2, "Br": 4, "Bc": 3},
    {"Nq": 9, "Nk": 9, "d": 3, "heads": 1, "Br": 3, "Bc": 4, "causal": True},
    {"Nq": 8, "Nk": 10, "d": 4, "heads": 1, "Br": 4, "Bc": 4, "masked_row": 5},
    {"Nq": 7, "Nk": 8, "d": 3, "heads": 1, "Br": 4, "Bc": 3, "dropout_p": 0.25},
    # the last row block and the last column block one row, one key each: a tile loop that stops one short
    # (range(0, N - 1, B)) loses them here
    {"Nq": 9, "Nk": 5, "d": 3, "heads": 1, "Br": 4, "Bc": 2},
]

EXERCISE = Exercise(
    number=4, name="04-flash1-backward", title="FlashAttention backward (Algorithm 4)",
    function="flash1_backward", signature="(mem, spec)", kind="memory", cases=CASES,
    setup=lambda case, rng: attention_setup(case, rng, ("dQ", "dK", "dV"), backward=True),
    solution="ex4_flash1_backward.py", io_rule="equal",
    io_note="Algorithm 4 with these Br, Bc moves exactly the budget",
)
