"""Reference solution, exercise 8: split-KV decoding, the split pass then the log-sum-exp merge."""

import numpy as np


def split_kv_decode(mem, spec):
    # BEGIN SOLUTION
    Nq, Nk, Br, Bc, S = spec.Nq, spec.Nk, spec.Br, spec.Bc, spec.num_splits
    for s in range(S):  # split pass: one work item per (split, query block)
        k0, k1 = s * Nk // S, (s + 1) * Nk // S
        for r0 in range(0, Nq, Br):
            rows = (r0, min(r0 + Br, Nq))
            Q_i = mem.load("Q", rows=rows, as_="Q_i")
            O_i = mem.hold("O_i", np.zeros(Q_i.shape))
            m_i = mem.hold("m_i", np.full(Q_i.shape[:-1], -np.inf))
            l_i = mem.hold("l_i", np.zeros(Q_i.shape[:-1]))
            for c0 in range(k0, k1, Bc):
                cols = (c0, min(c0 + Bc, k1))
                K_j = mem.load("K", rows=cols, as_="K_j")
                V_j = mem.load("V", rows=cols, as_="V_j")
                S_ij = mem.hold("S_ij", spec.scale * Q_i @ K_j.swapaxes(-1, -2))
                attend = spec.tile_mask(rows, cols)  # MASK: causal (top-left) and the mask, by coordinates
                if attend is not None:
                    S_ij = mem.hold("S_ij", np.where(attend, S_ij, -np.inf))
                m_new = mem.hold("m_new", np.maximum(m_i, S_ij.max(axis=-1)))
                m_safe = np.where(np.isneginf(m_new), 0.0, m_new)
                P_t = mem.reuse("S_ij", "P_tilde_ij", np.exp(S_ij - m_safe[..., None]))
                alpha = mem.reuse("m_i", "alpha", np.exp(m_i - m_safe))
                l_i = mem.hold("l_i", alpha * l_i + P_t.sum(axis=-1))
                if spec.dropout_p > 0:  # P̃_ij^dropped = P̃_ij ∘ Z_ij (ℓ_i above sums P̃_ij before dropout)
                    P_t = mem.hold("P_tilde_ij", P_t * spec.dropout_Z(rows, cols))
                O_i = mem.hold("O_i", alpha[..., None] * O_i + P_t @ V_j)
                m_i = mem.reuse("alpha", "m_i", m_new)
                mem.free("K_j", "V_j", "P_tilde_ij", "m_new")
            O_i = mem.hold("O_i", O_i / np.where(l_i == 0, 1.0, l_i)[..., None])
            if S == 1:
                out, suffix = rows, ""
            else:
                out, suffix = (s * Nq + rows[0], s * Nq + rows[1]), "_partial"
            mem.store("O" + suffix, O_i, rows=out)
            mem.store("m" + suffix, m_i, rows=out)
            mem.store("l" + suffix, l_i, rows=out)
            mem.free("Q_i", "O_i", "m_i", "l_i")
    if S == 1:
        return
    for r0 in range(0, Nq, Br):  # merge pass: one work item per query block
        rows = (r0, min(r0 + Br, Nq))
        n = rows[1] - rows[0]
        O = mem.hold("O_acc", np.zeros(spec.lead_shape + (n, spec.d)))
        m = mem.hold("m", np.full(spec.lead_shape + (n,), -np.inf))
        l = mem.hold("l", np.zeros(spec.lead_shape + (n,)))
        for s in range(S):
            prow = (s * Nq + rows[0], s * Nq + rows[1])
            O_s = mem.load("O_partial", rows=prow, as_="O_s")
            m_s = mem.load("m_partial", rows=prow, as_="m_s")
            l_s = mem.load("l_partial", rows=prow, as_="l_s")
            m_new = np.maximum(m, m_s)
            m_safe = np.where(np.isneginf(m_new), 0.0, m_new)
            a, b = np.exp(m - m_safe) * l, np.exp(m_s - m_safe) * l_s
            l_new = a + b
            O = mem.hold("O_acc", (a[..., None] * O + b[..., None] * O_s) / np.where(l_new == 0, 1, l_new)[..., None])
            m, l = mem.hold("m", m_new), mem.hold("l", l_new)
            mem.free("O_s", "m_s", "l_s")
        mem.store("O", O, rows=rows)
        mem.store("m", m, rows=rows)
        mem.store("l", l, rows=rows)
        mem.free("O_acc", "m", "l")
    # END SOLUTION
