"""Exercise 5 without the causal block skipping: correct, but over the IO budget."""

import numpy as np


def flash2_forward(mem, spec):
    Br, Bc, Nq, Nk = spec.Br, spec.Bc, spec.Nq, spec.Nk
    for r0 in range(0, Nq, Br):
        rows = (r0, min(r0 + Br, Nq))
        Q_i = mem.load("Q", rows=rows, as_="Q_i")
        O_i = mem.hold("O_i", np.zeros(Q_i.shape))
        l_i = mem.hold("l_i", np.zeros(Q_i.shape[:-1]))
        m_i = mem.hold("m_i", np.full(Q_i.shape[:-1], -np.inf))
        for c0 in range(0, Nk, Bc):
            cols = (c0, min(c0 + Bc, Nk))
            K_j = mem.load("K", rows=cols, as_="K_j")
            V_j = mem.load("V", rows=cols, as_="V_j")
            S_ij = spec.scale * Q_i @ K_j.swapaxes(-1, -2)
            attend = spec.tile_mask(rows, cols)
            if attend is not None:
                S_ij = np.where(attend, S_ij, -np.inf)
            m_new = np.maximum(m_i, S_ij.max(axis=-1))
            m_safe = np.where(np.isneginf(m_new), 0.0, m_new)
            P = np.exp(S_ij - m_safe[..., None])
            alpha = np.exp(m_i - m_safe)
            l_i = alpha * l_i + P.sum(axis=-1)
            if spec.dropout_p > 0:
                P = P * spec.dropout_Z(rows, cols)
            O_i = alpha[..., None] * O_i + P @ V_j
            m_i = m_new
            mem.free("K_j", "V_j")
        O_i = O_i / np.where(l_i == 0, 1.0, l_i)[..., None]
        with np.errstate(divide="ignore"):
            L_i = np.where(l_i == 0, -np.inf, m_i + np.log(np.where(l_i == 0, 1, l_i)))
        mem.store("O", O_i, rows=rows)
        mem.store("L", L_i, rows=rows)
        mem.free("Q_i", "O_i", "l_i", "m_i")
