"""The answers to :mod:`flashref.quiz`'s questions (solution copy only; the student release leaves this out)."""

ANSWERS = {
    "ex1-writes": 16 + 16 + 8,  # S (4x4), P (4x4), O (4x2)
    "ex2-identity": "yes",  # e^{-inf - m} · 0 = 0: the empty state is the identity of the merge
    "ex3-q-reads": 2,  # once per column block: Tc = 6 / 3
    "ex4-d-reads": 5,  # O_i is loaded with every (j, i): Tc times
    "ex5-causal-kv": 10,  # row block i sees i + 1 key blocks: 1 + 2 + 3 + 4
    "ex6-saved": 2 * 2 * 4 * 4,  # K_j and V_j, Bc·d each, per head, 2 heads
    "ex7-bc": "no",  # Q, O, L once; K, V once per row block: only Tr = ⌈Nq/Br⌉ appears
    "ex8-merge-io": 4 * (64 + 2),  # S partials of O (d), m and ℓ (1 each) per query row
    "lab-blocks": 3,  # ⌈37 / 16⌉
}
