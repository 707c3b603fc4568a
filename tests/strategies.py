"""Hypothesis strategies for attention problems: ragged lengths, Nq != Nk, odd d, masks, dropout."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st


@st.composite
def problems(draw, max_len=24, max_d=9, allow_dropout=True, allow_lead=True):
    """A dict with Q, K, V, dO (float64) and the options (causal, mask, dropout_p, seed, scale)."""
    lead = tuple(draw(st.lists(st.integers(1, 2), max_size=2))) if allow_lead else ()
    Nq = draw(st.integers(1, max_len))
    Nk = draw(st.integers(1, max_len))
    d = draw(st.integers(1, max_d))
    seed = draw(st.integers(0, 2**31 - 1))
    rng = np.random.default_rng(seed)
    Q, K, V, dO = (rng.standard_normal(lead + (n, d)) for n in (Nq, Nk, Nk, Nq))
    opts = {"causal": draw(st.booleans())}
    kind = draw(st.sampled_from(["none", "random", "rows_masked"]))
    if kind == "random":
        opts["mask"] = rng.random((Nq, Nk)) < draw(st.floats(0.3, 1.0))
    elif kind == "rows_masked":
        mask = rng.random(lead + (Nq, Nk)) < 0.7
        mask[..., rng.integers(0, Nq), :] = False  # a fully masked row
        opts["mask"] = mask
    if allow_dropout and draw(st.booleans()):
        opts["dropout_p"] = draw(st.sampled_from([0.1, 0.5]))
        opts["seed"] = draw(st.integers(0, 1000))
    if draw(st.booleans()):
        opts["scale"] = draw(st.sampled_from([1.0, 0.3]))
    return {"Q": Q, "K": K, "V": V, "dO": dO, "lead": lead, "Nq": Nq, "Nk": Nk, "d": d, "opts": opts}
