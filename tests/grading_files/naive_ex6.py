"""Exercise 6 untiled: each needed row of Q, K, V loaded once (no empty column's K_j, V_j), attention in Python,
with Algorithm 5's MASK and dropout."""

import numpy as np


def blocksparse_forward(mem, spec):
    Br, Bc, M = spec.Br, spec.Bc, spec.block_mask
    everything = ((0, spec.Nq), (0, spec.Nk))
    Q = mem.load("Q", as_="t")
    mem.free("t")
    cols = [(c0, min(c0 + Bc, spec.Nk)) for j, c0 in enumerate(range(0, spec.Nk, Bc)) if M[:, j].any()]
    K, V = np.zeros(spec.lead_shape + (spec.Nk, spec.d)), np.zeros(spec.lead_shape + (spec.Nk, spec.d))
    for c in cols:
        K[..., c[0]:c[1], :] = mem.load("K", rows=c, as_="t")
        V[..., c[0]:c[1], :] = mem.load("V", rows=c, as_="t")
        mem.free("t")
    attend = np.repeat(np.repeat(M, Br, 0), Bc, 1)[:spec.Nq, :spec.Nk]
    if spec.tile_mask(*everything) is not None:  # Algorithm 5 keeps MASK: causal and the mask's entries
        attend = attend & spec.tile_mask(*everything)
    S = np.where(attend, spec.scale * Q @ K.swapaxes(-1, -2), -np.inf)
    m = S.max(-1)
    P = np.exp(S - np.where(np.isneginf(m), 0, m)[..., None])
    l = P.sum(-1)
    if spec.dropout_p > 0:  # and dropout, after the row sums (l sums P before dropout)
        P = P * spec.dropout_Z(*everything)
    mem.store("O", (P @ V) / np.where(l == 0, 1, l)[..., None])
    mem.store("l", l)
    mem.store("m", m)
