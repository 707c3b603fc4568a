"""Exercise 8 untiled: K, V loaded tile by tile (each tile freed at once, kept in Python), no splits, no partials,
with the split pass's MASK and dropout."""

import numpy as np


def split_kv_decode(mem, spec):
    everything = ((0, spec.Nq), (0, spec.Nk))
    Q = mem.load("Q", as_="t")
    mem.free("t")
    K, V = [], []
    for c0 in range(0, spec.Nk, spec.Bc):
        c = (c0, min(c0 + spec.Bc, spec.Nk))
        K.append(mem.load("K", rows=c, as_="t"))
        V.append(mem.load("V", rows=c, as_="t"))
        mem.free("t")
    K, V = np.concatenate(K, axis=-2), np.concatenate(V, axis=-2)
    S = spec.scale * Q @ K.swapaxes(-1, -2)
    attend = spec.tile_mask(*everything)  # causal and the mask's entries
    if attend is not None:
        S = np.where(attend, S, -np.inf)
    m = S.max(-1)
    P = np.exp(S - np.where(np.isneginf(m), 0, m)[..., None])
    l = P.sum(-1)
    if spec.dropout_p > 0:  # after the row sums (l sums P before dropout)
        P = P * spec.dropout_Z(*everything)
    mem.store("O", (P @ V) / np.where(l == 0, 1, l)[..., None])
    mem.store("m", m)
    mem.store("l", l)
