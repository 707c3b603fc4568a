"""Reference solution, exercise 4: FlashAttention backward (Algorithm 4), D_i from O_i and dO_i."""

import numpy as np


def flash1_backward(mem, spec):
    # BEGIN SOLUTION
    Br, Bc, Nq, Nk, d, tau = spec.Br, spec.Bc, spec.Nq, spec.Nk, spec.d, spec.scale
    # Alg.4 l.5: initialise dQ, dK, dV = 0 in HBM (counted).
    for name, n in (("dQ", Nq), ("dK", Nk), ("dV", Nk)):
        mem.init(name, (n, d), 0.0)
    for c0 in range(0, Nk, Bc):  # Alg.4 l.6
        cols = (c0, min(c0 + Bc, Nk))
        K_j = mem.load("K", rows=cols, as_="K_j")  # Alg.4 l.7
        V_j = mem.load("V", rows=cols, as_="V_j")
        dK_j = mem.hold("dK_j", np.zeros_like(K_j))  # Alg.4 l.8
        dV_j = mem.hold("dV_j", np.zeros_like(V_j))
        for r0 in range(0, Nq, Br):  # Alg.4 l.9
            rows = (r0, min(r0 + Br, Nq))
            Q_i, O_i, dO_i, dQ_i = (mem.load(n, rows=rows, as_=n + "_i") for n in ("Q", "O", "dO", "dQ"))  # l.10
            l_i = mem.load("l", rows=rows, as_="l_i")[..., None]
            m_i = mem.load("m", rows=rows, as_="m_i")[..., None]
            S_ij = mem.hold("S_ij", tau * Q_i @ K_j.swapaxes(-1, -2))  # l.11
            attend = spec.tile_mask(rows, cols)
            if attend is not None:  # l.12
                S_ij = mem.hold("S_ij", np.where(attend, S_ij, -np.inf))
            P_ij = mem.reuse("S_ij", "P_ij", np.exp(S_ij - np.where(np.isneginf(m_i), 0, m_i))
                             / np.where(l_i == 0, 1.0, l_i))  # l.13
            Z_ij = mem.hold("Z_ij", spec.dropout_Z(rows, cols)) if spec.dropout_p > 0 else None  # l.14
            P_drop = P_ij if Z_ij is None else mem.hold("P_dropped_ij", P_ij * Z_ij)  # l.15
            dV_j += P_drop.swapaxes(-1, -2) @ dO_i  # l.16
            mem.free("P_dropped_ij")
            dP_ij = mem.hold("dP_ij", dO_i @ V_j.swapaxes(-1, -2))  # l.17
            if Z_ij is not None:
                dP_ij = mem.hold("dP_ij", dP_ij * Z_ij)  # l.18
                mem.free("Z_ij")
            D_i = mem.hold("D_i", (dO_i * O_i).sum(axis=-1)[..., None])  # l.19
            dS_ij = mem.reuse("dP_ij", "dS_ij", P_ij * (dP_ij - D_i))  # l.20
            dQ_i += tau * dS_ij @ K_j  # l.21
            mem.store("dQ", dQ_i, rows=rows)
            dK_j += tau * dS_ij.swapaxes(-1, -2) @ Q_i  # l.22
            mem.free("Q_i", "O_i", "dO_i", "dQ_i", "l_i", "m_i", "P_ij", "D_i", "dS_ij")
        mem.store("dK", dK_j, rows=cols)  # l.24
        mem.store("dV", dV_j, rows=cols)
        mem.free("K_j", "V_j", "dK_j", "dV_j")
    # END SOLUTION
