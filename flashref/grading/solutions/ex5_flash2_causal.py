"""Reference solution, exercise 5: FlashAttention-2 forward, skipping blocks above the causal diagonal."""

import numpy as np


def flash2_forward(mem, spec):
    # BEGIN SOLUTION
    Br, Bc, Nq, Nk = spec.Br, spec.Bc, spec.Nq, spec.Nk
    for r0 in range(0, Nq, Br):  # Alg.1 l.3
        rows = (r0, min(r0 + Br, Nq))
        Q_i = mem.load("Q", rows=rows, as_="Q_i")  # l.4
        O_i = mem.hold("O_i", np.zeros(Q_i.shape))  # l.5
        l_i = mem.hold("l_i", np.zeros(Q_i.shape[:-1]))
        m_i = mem.hold("m_i", np.full(Q_i.shape[:-1], -np.inf))
        for c0 in range(0, Nk, Bc):  # l.6
            cols = (c0, min(c0 + Bc, Nk))
            if spec.causal and cols[0] > rows[1] - 1:
                break  # every key of this block (and of every later one) comes after every query
            K_j = mem.load("K", rows=cols, as_="K_j")  # l.7
            V_j = mem.load("V", rows=cols, as_="V_j")
            S_ij = mem.hold("S_ij", spec.scale * Q_i @ K_j.swapaxes(-1, -2))  # l.8
            attend = spec.tile_mask(rows, cols)
            if attend is not None:
                S_ij = mem.hold("S_ij", np.where(attend, S_ij, -np.inf))
            m_new = mem.hold("m_new", np.maximum(m_i, S_ij.max(axis=-1)))  # l.9
            m_safe = np.where(np.isneginf(m_new), 0.0, m_new)
            P_t = mem.reuse("S_ij", "P_tilde_ij", np.exp(S_ij - m_safe[..., None]))
            alpha = mem.reuse("m_i", "alpha", np.exp(m_i - m_safe))
            l_i = mem.hold("l_i", alpha * l_i + P_t.sum(axis=-1))
            if spec.dropout_p > 0:
                P_t = mem.hold("P_tilde_ij", P_t * spec.dropout_Z(rows, cols))
            O_i = mem.hold("O_i", alpha[..., None] * O_i + P_t @ V_j)  # l.10
            m_i = mem.reuse("alpha", "m_i", m_new)
            mem.free("K_j", "V_j", "P_tilde_ij", "m_new")
        O_i = mem.hold("O_i", O_i / np.where(l_i == 0, 1.0, l_i)[..., None])  # l.12
        with np.errstate(divide="ignore"):
            L_i = mem.reuse("m_i", "L_i", np.where(l_i == 0, -np.inf, m_i + np.log(np.where(l_i == 0, 1, l_i))))
        mem.store("O", O_i, rows=rows)  # l.14
        mem.store("L", L_i, rows=rows)  # l.15
        mem.free("Q_i", "O_i", "l_i", "L_i")
    # END SOLUTION
