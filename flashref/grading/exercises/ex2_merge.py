"""Exercise 2: merge two online-softmax states (m, ℓ, O) of the two halves of every row."""

import numpy as np

from . import Exercise, Setup

CASES = [
    {"n": 9, "d": 4, "k1": 5, "k2": 3, "Br": 4, "heads": 2},
    {"n": 6, "d": 3, "k1": 2, "k2": 7, "Br": 6, "heads": 1},
]


def _state(S, V):
    """(m, ℓ, O) of scores S (rows, k) against values V (k, d); O normalised, empty rows zero."""
    m = S.max(axis=-1)
    m_safe = np.where(np.isneginf(m), 0.0, m)
    P = np.exp(S - m_safe[..., None])
    l = P.sum(axis=-1)
    return m, l, (P / np.where(l == 0, 1.0, l)[..., None]) @ V


def setup(case, rng):
    n, d, k1, k2, lead = case["n"], case["d"], case["k1"], case["k2"], (case["heads"],)
    S = rng.standard_normal(lead + (n, k1 + k2)) * 2
    V = rng.standard_normal(lead + (k1 + k2, d))
    S[..., 1, k1:] = -np.inf  # row 1: the second part saw no key (the empty state is the identity)
    S[..., 2, :] = -np.inf  # row 2: neither part saw a key: zeros, no NaN
    # row 3: the first part saw no key and the second did (a merge that guards the -inf of m1 rather than of the
    # merged m would take exp(m2 - 0) for the second part's weight)
    S[..., 3, :k1] = -np.inf
    m1, l1, O1 = _state(S[..., :k1], V[..., :k1, :])
    m2, l2, O2 = _state(S[..., k1:], V[..., k1:, :])
    m, l, O = _state(S, V)
    spec = {"n": n, "d": d, "Br": case["Br"], "lead_shape": lead}
    return Setup(spec=spec, inputs={"m1": m1, "l1": l1, "O1": O1, "m2": m2, "l2": l2, "O2": O2},
                 outputs={"m": (n,), "l": (n,), "O": (n, d)}, expected={"m": m, "l": l, "O": O}, lead_shape=lead)


EXERCISE = Exercise(
    number=2, name="02-merge-states", title="Merging two online-softmax states (m, ℓ, O)",
    function="merge_states", signature="(mem, spec)", kind="memory", cases=CASES, setup=setup,
    solution="ex2_merge.py",
)
