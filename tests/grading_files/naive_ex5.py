"""Exercise 5 untiled: Q, K, V each loaded once (freed at once, kept in Python), dense attention, O and L."""

import numpy as np


def _all(mem, name):
    x = mem.load(name, as_="t")
    mem.free("t")
    return x


def flash2_forward(mem, spec):
    Q, K, V = _all(mem, "Q"), _all(mem, "K"), _all(mem, "V")
    everything = ((0, spec.Nq), (0, spec.Nk))
    S = spec.scale * Q @ K.swapaxes(-1, -2)
    attend = spec.tile_mask(*everything)
    if attend is not None:
        S = np.where(attend, S, -np.inf)
    m = S.max(-1)
    P = np.exp(S - np.where(np.isneginf(m), 0, m)[..., None])
    l = P.sum(-1)
    if spec.dropout_p > 0:
        P = P * spec.dropout_Z(*everything)
    mem.store("O", (P @ V) / np.where(l == 0, 1, l)[..., None])
    with np.errstate(divide="ignore"):
        mem.store("L", np.where(l == 0, -np.inf, m + np.log(np.where(l == 0, 1, l))))
