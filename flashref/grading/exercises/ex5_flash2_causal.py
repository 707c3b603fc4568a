"""Exercise 5: the FlashAttention-2 forward, skipping the blocks a causal mask hides."""

from . import Exercise, attention_setup

CASES = [
    {"Nq": 16, "Nk": 16, "d": 4, "heads": 2, "Br": 4, "Bc": 4, "causal": True},
    {"Nq": 13, "Nk": 18, "d": 3, "heads": 1, "Br": 4, "Bc": 3, "causal": True},  # ragged, Nq != Nk
    {"Nq": 10, "Nk": 10, "d": 4, "heads": 1, "Br": 4, "Bc": 4, "causal": True, "masked_row": 6},
    {"Nq": 9, "Nk": 7, "d": 4, "heads": 1, "Br": 3, "Bc": 4, "dropout_p": 0.2},
    # the last row block one row (query 8), and the one key of the last column block the only one it adds: a tile
    # loop that stops one short (range(0, N - 1, B)) loses them here
    {"Nq": 9, "Nk": 9, "d": 3, "heads": 1, "Br": 4, "Bc": 4, "causal": True},
]

EXERCISE = Exercise(
    number=5, name="05-flash2-causal", title="FlashAttention-2 forward with causal block skipping",
    function="flash2_forward", signature="(mem, spec)", kind="memory", cases=CASES,
    setup=lambda case, rng: attention_setup(case, rng, ("O", "L")),
    solution="ex5_flash2_causal.py", io_rule="equal",
    io_note="FlashAttention-2 with these Br, Bc, skipping the blocks above the diagonal, moves exactly "
            "the budget",
)
