"""Exercise 7: choose (Br, Bc) to minimise FlashAttention-2's forward IO under a fixed M; scored by rank.

The choices are Br, Bc in multiples of 8 (up to the sequence lengths) whose on-chip footprint
``2·Br·d + 2·Bc·d + Br·Bc + 3·Br`` (FlashAttention-2's forward, measured) fits in M. The student's
function returns ``(Br, Bc)``; it is ranked by the forward's counted IO among all those choices.
"""

from . import Exercise, Setup

CASES = [
    {"Nq": 256, "Nk": 256, "d": 16, "M": 4096},
    {"Nq": 512, "Nk": 96, "d": 32, "M": 12000, "causal": True},
    {"Nq": 128, "Nk": 1024, "d": 8, "M": 2500},
]

STEP = 8


def footprint(Br, Bc, d):
    """What the FlashAttention-2 forward holds on chip per head (given in the exercise's spec)."""
    return 2 * Br * d + 2 * Bc * d + Br * Bc + 3 * Br


def choices(case):
    """Every feasible (Br, Bc) of a case."""
    Nq, Nk, d, M = case["Nq"], case["Nk"], case["d"], case["M"]
    return [(Br, Bc) for Br in range(STEP, Nq + 1, STEP) for Bc in range(STEP, Nk + 1, STEP)
            if footprint(Br, Bc, d) <= M]


EXERCISE = Exercise(
    number=7, name="07-block-sizes", title="Choosing (Br, Bc) to minimise FlashAttention-2's IO under M",
    function="choose_blocks", signature="(Nq, Nk, d, M, causal)", kind="choice", cases=CASES,
    setup=lambda case, rng: Setup(spec=dict(case),
                                  args=[case["Nq"], case["Nk"], case["d"], case["M"], case.get("causal", False)]),
    solution="ex7_block_sizes.py", points=(5, 5, 0),
)
