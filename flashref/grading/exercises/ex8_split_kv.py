"""Exercise 8: split-KV decoding (Flash-Decoding): the split pass, then the log-sum-exp merge."""

import numpy as np

from .. import oracle
from . import Exercise, attention_setup

CASES = [
    {"Nq": 1, "Nk": 29, "d": 4, "heads": 3, "Br": 1, "Bc": 4, "num_splits": 3},
    {"Nq": 2, "Nk": 17, "d": 3, "heads": 1, "Br": 2, "Bc": 5, "num_splits": 2},
    # S = 1: nothing to merge, O, m, l written by the split pass (a solution that writes partials and then
    # skips the merge leaves O unwritten).
    {"Nq": 3, "Nk": 10, "d": 3, "heads": 2, "Br": 2, "Bc": 4, "num_splits": 1},
    # S = Tc = ⌈Nk/Bc⌉: one key tile per split, the first ragged (keys [0, 3), [3, 7), [7, 11)), so a split
    # whose last tile runs past its own end, min(c0 + Bc, Nk), reads the next split's keys too.
    {"Nq": 1, "Nk": 11, "d": 3, "heads": 2, "Br": 1, "Bc": 4, "num_splits": 3},
    # decoding.forward takes every algorithm's MASK and dropout, in the split pass's tile step: one case each, so
    # that a tile step without spec.tile_mask's causal part, its mask part, or spec.dropout_Z is wrong.
    # Causal is top-left aligned (as everywhere in flashref): row r sees keys ≤ r, so here rows 3-4 reach into
    # split 1 (keys [3, 6)), rows 0-2 see nothing of it, and no row sees split 2 (a partial with m = −inf, ℓ = 0).
    {"Nq": 5, "Nk": 9, "d": 3, "heads": 2, "Br": 3, "Bc": 2, "num_splits": 3, "causal": True},
    {"Nq": 3, "Nk": 13, "d": 3, "heads": 1, "Br": 2, "Bc": 3, "num_splits": 2, "masked_row": 1},  # row 1 sees no key
    {"Nq": 2, "Nk": 15, "d": 3, "heads": 2, "Br": 2, "Bc": 4, "num_splits": 3, "dropout_p": 0.2},
    # row 2 sees no key of split 0 (keys [0, 6)) and keys of split 1: the merge's first partial is empty and the second
    # is not (causal never gives that: split 0 holds key 0, which every row sees), so a merge that guards the first
    # partial's m instead of the merged one is wrong here
    {"Nq": 3, "Nk": 13, "d": 3, "heads": 1, "Br": 2, "Bc": 3, "num_splits": 2, "blind_keys": (2, 6)},
]


def partials(st, S: int) -> dict:
    """The split pass's ``O_partial``, ``m_partial``, ``l_partial`` as the spec defines them: split s holds keys
    [s·Nk//S, (s+1)·Nk//S) and writes, at rows s·Nq + r, its normalised O⁽ˢ⁾ (dropout's Z_ij by each key's own
    column), m⁽ˢ⁾ and ℓ⁽ˢ⁾ (before dropout); a split that holds no key of a row gives (0, −inf, 0)."""
    spec, (Q, K, V) = st.spec, (st.inputs[n] for n in ("Q", "K", "V"))
    Nq, Nk = spec["Nq"], spec["Nk"]
    attend = oracle.attend_mask(Nq, Nk, spec["causal"], spec["mask"])
    parts = []
    for s in range(S):  # the oracle's forward on the split's keys, its dropout drawn at their own columns
        k0, k1 = s * Nk // S, (s + 1) * Nk // S
        parts.append(oracle.forward(Q, K[..., k0:k1, :], V[..., k0:k1, :], scale=spec["scale"],
                                    attend=None if attend is None else attend[..., k0:k1],
                                    dropout_p=spec["dropout_p"], seed=spec["seed"], first_key=k0))
    return {f"{n}_partial": np.concatenate([f[n] for f in parts], axis=-2 if n == "O" else -1) for n in "Oml"}


def setup(case, rng):
    S = case["num_splits"]
    st = attention_setup(case, rng, ("O", "l", "m"), extra_spec={"num_splits": S})
    # Scratch buffers for the partials: allocated (free), each row written once by the split pass.
    st.outputs.update(O_partial=(S * case["Nq"], case["d"]), m_partial=(S * case["Nq"],),
                      l_partial=(S * case["Nq"],))
    if S > 1:  # graded as the spec defines them (with S = 1 the split pass writes O, m, l and no partial)
        st.expected.update(partials(st, S))
    return st


EXERCISE = Exercise(
    number=8, name="08-split-kv", title="Split-KV decoding: split pass and log-sum-exp merge",
    function="split_kv_decode", signature="(mem, spec)", kind="memory", cases=CASES, setup=setup,
    solution="ex8_split_kv.py", io_rule="equal",
    io_note="the split pass and the merge with these Br, Bc and S move exactly the budget",
)
