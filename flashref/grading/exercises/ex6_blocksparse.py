"""Exercise 6: a block-sparse forward that moves less than Algorithm 5 (no K_j, V_j for an empty column)."""

import numpy as np

from . import Exercise, attention_setup

CASES = [
    {"Nq": 12, "Nk": 16, "d": 4, "heads": 2, "Br": 4, "Bc": 4,
     "block_mask": [[1, 0, 0, 1], [0, 0, 1, 1], [1, 0, 0, 0]]},  # column 1 empty
    {"Nq": 10, "Nk": 11, "d": 3, "heads": 1, "Br": 4, "Bc": 3,
     "block_mask": [[1, 0, 1, 0], [0, 0, 0, 0], [1, 0, 0, 1]]},  # ragged; row block 1 and column 1 empty
    # Algorithm 5 is Algorithm 2 behind `if M_ij ≠ 0`: MASK and dropout stay in the tile step. One case each,
    # so that a tile step without spec.tile_mask's causal part, its mask part, or spec.dropout_Z is wrong.
    {"Nq": 10, "Nk": 12, "d": 3, "heads": 2, "Br": 4, "Bc": 4, "causal": True,
     "block_mask": [[1, 0, 0], [1, 1, 0], [0, 1, 1]]},  # M's diagonal blocks partly causal-masked
    {"Nq": 9, "Nk": 10, "d": 3, "heads": 1, "Br": 3, "Bc": 4, "masked_row": 4,
     "block_mask": [[1, 1, 0], [0, 1, 1], [1, 0, 1]]},  # a mask, and row 4 (in a nonzero row block) sees no key
    {"Nq": 8, "Nk": 12, "d": 3, "heads": 1, "Br": 4, "Bc": 4, "dropout_p": 0.2,
     "block_mask": [[1, 0, 1], [1, 0, 0]]},  # dropout; column 1 empty
    # the last row block and the last column block one row, one key each, and M_ij = 1 there: a tile loop that
    # stops one short (range(0, N - 1, B)) loses them here
    {"Nq": 9, "Nk": 9, "d": 3, "heads": 1, "Br": 4, "Bc": 4,
     "block_mask": [[1, 0, 1], [0, 1, 0], [1, 0, 1]]},
]


def setup(case, rng):
    M = np.array(case["block_mask"], dtype=bool)  # (Tr, Tc)
    Br, Bc = case["Br"], case["Bc"]
    element = np.repeat(np.repeat(M, Br, axis=0), Bc, axis=1)[: case["Nq"], : case["Nk"]]  # M̃_kl = M_ij
    return attention_setup(case, rng, ("O", "l", "m"), element_mask=element, extra_spec={"block_mask": M})


EXERCISE = Exercise(
    number=6, name="06-blocksparse", title="Block-sparse forward that moves less than Algorithm 5",
    function="blocksparse_forward", signature="(mem, spec)", kind="memory", cases=CASES, setup=setup,
    solution="ex6_blocksparse.py", io_rule="equal",
    io_note="Algorithm 5 with these Br, Bc, loading no K_j, V_j of an empty column, moves exactly the "
            "budget",
)
