"""Reference solution, exercise 2: merge two softmax states (m, ℓ, O) row block by row block."""

import numpy as np


def merge_states(mem, spec):
    # BEGIN SOLUTION
    for r0 in range(0, spec.n, spec.Br):
        rows = (r0, min(r0 + spec.Br, spec.n))
        m1, l1, O1 = (mem.load(n + "1", rows=rows) for n in ("m", "l", "O"))  # (Br,), (Br,), (Br, d)
        m2, l2, O2 = (mem.load(n + "2", rows=rows) for n in ("m", "l", "O"))
        # m = max(m1, m2); ℓ = e^{m1 − m} ℓ1 + e^{m2 − m} ℓ2 (subtract 0 where both parts are empty)
        m = mem.hold("m", np.maximum(m1, m2))
        m_safe = np.where(np.isneginf(m), 0.0, m)
        a = mem.hold("a", np.exp(m1 - m_safe) * l1)  # weight of part 1
        b = mem.hold("b", np.exp(m2 - m_safe) * l2)  # weight of part 2
        l = mem.hold("l", a + b)
        # O = (a O1 + b O2) / ℓ, each partial O being normalised by its own ℓ
        O = mem.reuse("O1", "O", (a[..., None] * O1 + b[..., None] * O2) / np.where(l == 0, 1.0, l)[..., None])
        mem.store("m", m, rows=rows)
        mem.store("l", l, rows=rows)
        mem.store("O", O, rows=rows)
        mem.free("m1", "l1", "m2", "l2", "O2", "m", "a", "b", "l", "O")
    # END SOLUTION
