"""Exercise 3: the FlashAttention forward (Algorithm 1, with Algorithm 2's MASK and dropout)."""

from . import Exercise, attention_setup

CASES = [
    {"Nq": 10, "Nk": 13, "d": 4, "heads": 2, "Br": 4, "Bc": 3},  # ragged both ways, Nq != Nk
    {"Nq": 12, "Nk": 12, "d": 3, "heads": 1, "Br": 4, "Bc": 4, "causal": True},
    {"Nq": 9, "Nk": 11, "d": 4, "heads": 1, "Br": 3, "Bc": 4, "masked_row": 4},  # a fully masked row
    {"Nq": 8, "Nk": 10, "d": 4, "heads": 1, "Br": 4, "Bc": 5, "dropout_p": 0.2},
    # the last row block and the last column block one row, one key each: a tile loop that stops one short
    # (range(0, N - 1, B)) loses them here, where the cases above lose nothing
    {"Nq": 9, "Nk": 9, "d": 3, "heads": 1, "Br": 4, "Bc": 4},
]

EXERCISE = Exercise(
    number=3, name="03-flash1-forward", title="FlashAttention forward (Algorithm 1)",
    function="flash1_forward", signature="(mem, spec)", kind="memory", cases=CASES,
    setup=lambda case, rng: attention_setup(case, rng, ("O", "l", "m")),
    solution="ex3_flash1_forward.py", io_rule="equal",
    io_note="Algorithm 1 with these Br, Bc moves exactly the budget",
)
