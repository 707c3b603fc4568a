"""Reference solution, exercise 6: block-sparse forward that skips the K_j, V_j loads of empty columns."""

import numpy as np


def blocksparse_forward(mem, spec):
    # BEGIN SOLUTION
    Br, Bc, Nq, Nk, d, M = spec.Br, spec.Bc, spec.Nq, spec.Nk, spec.d, spec.block_mask
    mem.init("O", (Nq, d), 0.0)  # Alg.5 l.2
    mem.init("l", (Nq,), 0.0)
    mem.init("m", (Nq,), -np.inf)
    for j, c0 in enumerate(range(0, Nk, Bc)):  # Alg.5 l.5
        if not M[:, j].any():
            continue  # an empty column: no query block needs K_j, V_j, so do not load them
        cols = (c0, min(c0 + Bc, Nk))
        K_j = mem.load("K", rows=cols, as_="K_j")
        V_j = mem.load("V", rows=cols, as_="V_j")
        for i, r0 in enumerate(range(0, Nq, Br)):  # Alg.5 l.7
            if not M[i, j]:  # Alg.5 l.8
                continue
            rows = (r0, min(r0 + Br, Nq))
            Q_i = mem.load("Q", rows=rows, as_="Q_i")  # Alg.5 l.9 ... l.16: the tile step (Algorithm 2's, exercise 3's)
            O_i = mem.load("O", rows=rows, as_="O_i")
            l_i = mem.load("l", rows=rows, as_="l_i")
            m_i = mem.load("m", rows=rows, as_="m_i")
            S_ij = mem.hold("S_ij", spec.scale * Q_i @ K_j.swapaxes(-1, -2))
            attend = spec.tile_mask(rows, cols)
            if attend is not None:
                S_ij = mem.hold("S_ij", np.where(attend, S_ij, -np.inf))
            m_t = mem.hold("m_tilde_ij", S_ij.max(axis=-1))
            P_t = mem.reuse("S_ij", "P_tilde_ij", np.exp(S_ij - np.where(np.isneginf(m_t), 0, m_t)[..., None]))
            l_t = mem.hold("l_tilde_ij", P_t.sum(axis=-1))
            m_new = mem.hold("m_new", np.maximum(m_i, m_t))
            m_safe = np.where(np.isneginf(m_new), 0.0, m_new)
            alpha = mem.reuse("m_i", "alpha", np.exp(m_i - m_safe))
            beta = mem.reuse("m_tilde_ij", "beta", np.exp(m_t - m_safe))
            l_new = mem.hold("l_new", alpha * l_i + beta * l_t)
            if spec.dropout_p > 0:  # Alg.5 l.14: P̃_ij^dropped (ℓ̃_ij above sums P̃_ij before dropout)
                P_t = mem.hold("P_tilde_ij", P_t * spec.dropout_Z(rows, cols))
            l_safe = np.where(l_new == 0, 1.0, l_new)
            # ℓ_i e^(m_i - m_new) / ℓ_new as a quotient: exactly 1 on a tile the row attends nothing in
            O_i = mem.hold("O_i", (l_i * alpha / l_safe)[..., None] * O_i + (beta / l_safe)[..., None] * (P_t @ V_j))
            mem.store("O", O_i, rows=rows)
            mem.store("l", l_new, rows=rows)
            mem.store("m", m_new, rows=rows)
            mem.free("Q_i", "O_i", "l_i", "alpha", "P_tilde_ij", "beta", "l_tilde_ij", "m_new", "l_new")
        mem.free("K_j", "V_j")
    # END SOLUTION
