"""Exercise 8 untiled: K, V loaded tile by tile (each tile freed at once, kept in Python), no splits, no partials."""

import numpy as np


def split_kv_decode(mem, spec):
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
    m = S.max(-1)
    P = np.exp(S - m[..., None])
    l = P.sum(-1)
    mem.store("O", (P @ V) / l[..., None])
    mem.store("m", m)
    mem.store("l", l)
