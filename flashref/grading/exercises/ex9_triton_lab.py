"""The Triton lab: a FlashAttention-2 forward kernel, run on the CPU under TRITON_INTERPRET=1.

Graded on correctness against the float64 oracle and on the elements its ``tl.load`` and
``tl.store`` really move (counted in the interpreter, mask-true elements only) against
FlashAttention-2's counted IO for its block sizes.
"""

from . import Exercise

CASES = [
    {"B": 1, "H": 2, "Nq": 20, "Nk": 20, "d": 16, "causal": False, "BLOCK_M": 16, "BLOCK_N": 16},
    {"B": 1, "H": 1, "Nq": 37, "Nk": 37, "d": 16, "causal": True, "BLOCK_M": 16, "BLOCK_N": 16},
    # two sequences, more keys than queries (a kernel that takes Nq for Nk, or Q's strides for K's, is wrong here),
    # and causal with more queries than keys (top-left: the last rows see every key)
    {"B": 2, "H": 1, "Nq": 20, "Nk": 29, "d": 16, "causal": False, "BLOCK_M": 16, "BLOCK_N": 16},
    {"B": 2, "H": 1, "Nq": 29, "Nk": 20, "d": 16, "causal": True, "BLOCK_M": 16, "BLOCK_N": 16},
]

EXERCISE = Exercise(
    number=9, name="09-triton-lab", title="Triton lab: a FlashAttention-2 forward kernel",
    function="flash2_kernel", signature="(Q, K, V, O, L, ...)", kind="triton", cases=CASES, setup=None,
    solution="ex9_triton_lab.py", points=(5, 3, 0),
)
