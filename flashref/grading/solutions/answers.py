"""The answers to :mod:`flashref.quiz`'s questions (solution copy only; the student release leaves this out)."""

ANSWERS = {
    "ex1-writes": 18 + 18 + 12,  # S (6x3), P (6x3), O (6x2)
    "ex2-identity": "yes",  # e^{-inf - m} · 0 = 0: the empty state is the identity of the merge
    "ex3-q-reads": 6,  # once per column block (line 8 sits inside the loop over j): Tc = 18 / 3 (Nq, Br do not enter)
    "ex4-d-reads": 5,  # O_i is loaded with every (j, i): Tc times
    "ex5-causal-kv": 10,  # row block i sees i + 1 key blocks: 1 + 2 + 3 + 4
    "ex6-saved": 2 * 2 * 4 * 4,  # K_j and V_j, Bc·d each, per head, 2 heads
    "ex7-bc": "no",  # Q, O, L once; K, V once per row block: only Tr = ⌈Nq/Br⌉ appears
    "ex8-merge-io": 4 * (64 + 2),  # S partials of O (d), m and ℓ (1 each) per query row
    "lab-blocks": 3,  # ⌈37 / 16⌉
    # notebooks 00-07 (the same answers sit in the notebooks' solution regions)
    "nb00-q1": 201,  # 312e12 / 1.555e12 = 200.6 FLOP/byte
    "nb00-q2": 11_520,  # 2·M·K·N: a multiply and an add for each of the K terms of each of the M·N outputs
    "nb00-q3": "memory",  # 2MKN / 2(MK + KN + MN) ≈ 124 FLOP/byte, below the ridge (201)
    "nb00-q4": 1.25,  # 5 FLOPs per (2 bytes read + 2 bytes written), whatever N is
    "nb01-q1": 96,  # l.1: 2Nd + N² = 32; l.2: 2N² = 32; l.3: N² + Nd + Nd = 32
    "nb01-q2": 160,  # 96, plus a read and a write of the 4 × 4 matrix for the mask and again for dropout: 96 + 4·16
    "nb01-q3": 3.76,  # (11·1024² + 12·1024·64) / (11·512² + 12·512·64) = 12,320,768 / 3,276,800
    "nb02-q1": 1.55,  # e^(1-3) + e^0 + e^(2-3) + e^(0-3) = 1.553
    "nb02-q2": 3,  # at 2.0, 3.5 and 4.0
    "nb02-q3": 1.10,  # 1 + 2·e^(1-4) = 1.0996
    "nb03-q1": 2,  # once per column block j (line 8 sits inside the loop over j): Tc = 6 / 3
    "nb03-q2": "no",  # Tc = 1024/16 = 64 passes over Q and O (3Nd each): about 3N²d/Bc = 12N² against standard's 4N²
    "nb03-q3": 2,  # Theorem 2: Θ(N²d²/M); the cell prints 1.85: the blocks that fit grow 28 -> 52, not 56 (S_ij's
    # Br·Bc share of the footprint grows with both sides), so Tc falls 147 -> 79, 1.86x
    "nb04-q1": 120,  # once per (j, i): Tc·(4·Nq·d + 2·Nq) = 2·(48 + 12)
    "nb04-q2": 1.17,  # forward 4N²d for both; backward 10N²d (5 matmuls: S is recomputed) against 8N²d: 14/12
    "nb04-q3": "yes",  # Br is capped at d, so all the extra SRAM goes to columns: Bc 87 -> 217, Tc 95 -> 38
    "nb04-q4": "no",  # Algorithm 3 moves whole N × N matrices: nothing in its count depends on M
    "nb05-q1": 256,  # l.2: Nd + 2N = 48; l.6: 2Nd = 48; each nonzero block (2d+2)·Br in, (d+2)·Br out: 4·40 = 160
    "nb05-q2": 5,  # i itself and i XOR 2^t for t = 0, 1, 2, 3: 1 + log2(16)
    "nb05-q3": 832,  # (3d + 4)·Br: Q_i, O_i, ℓ_i, m_i in, O_i, ℓ_i, m_i out
    "nb06-q1": 63,  # K is read once per row block: Tr·Nk·d = 3·7·3
    "nb06-q2": 0.531,  # T(T+1)/2 of T² tiles with T = 16: 17/32
    "nb06-q3": 5,  # 16·4096/128 = 512 work items: ⌈512/108⌉
    "nb06-q4": 0.505,  # 2 waves: 109 / 216
    "nb07-q1": 0.201,  # 12 tensors of B·H·N·d = 8,388,608 elements, 2 bytes each
    "nb07-q2": "no",  # the repeated passes over K, V and Q, dO, dQ hit the 50 MB L2, not DRAM
    "nb07-q3": 0.375,  # (128 − 80) / 128
    "nb07-q4": 254,  # 989 / 3.9 = 253.6: a forward's score costs 4d = 256 of them at d = 64
    # notebooks 08-12
    "nb08-q1": 'yes',  # 12 kernels, not 8 lines (scale passes, a binary kernel): no N × N pass fits the L2
    "nb08-q2": 4.5,  # Q once (0.5 MiB), K and V (1 MiB) once per wave: 0.5 + 4 · 1
    "nb08-q3": 46080,  # 45 · 2^20 / 2 bytes / (2 · 128 · 2 bytes per token)
    "nb08-q4": 15.5,  # 262144 / 128 = 2048 row blocks over 132 SMs: 15.52 waves, each one pass over K and V
    "nb08-q5": 33,  # waves 0-14 hold head 0 only, wave 15 both (row blocks 1980-2111), 16-31 head 1: 16 + 17
    "nb08-q6": 673,  # schedule.launch_times: head 0's last 264 blocks run ~1000 steps, head 1's short ones churn
    "nb09-q1": 8,  # each K/V tile is loaded once per group instead of once per query head: g
    "nb09-q2": 2,  # ⌈(w − 1 + Br)/Bc⌉ = 5 tiles per row block whatever N: 2.01 (causal alone 3.95)
    "nb09-q3": 1272,  # bias: visited tiles (1+2+3+4) · 64 · 2 heads = 1280; ALiBi: 8 slopes
    "nb10-q1": 0.533,  # work P²n²/2, time n²/2 + (P − 1)·n²: P/(2P − 1) = 8/15
    "nb10-q2": 1.5,  # P − 1 sends of its K and V shards, 2·(N/P)·d·b each: 2(P − 1)/P
    "nb10-q3": 4400,  # n ≥ F·b/(2W) = 2198, twice that for causal blocks
    "nb11-q1": 448,  # exponent 1111 → 2^(15−7) = 256, mantissa 110 (111 is NaN) → 1.75: 1.75 · 256
    "nb11-q2": 1.9,  # Q, K, V reads (4,456,448) at 1 byte, O, L (266,240) at 2: 9,445,376 / 4,989,312
    "nb11-q3": 11.4,  # Φ(x) = 1/2 at x = 0: Δ = 18 ln 2 − 1.03 = 11.45
    "nb12-q1": 71,  # 1.812 GFLOP against 6P = 0.742 GFLOP: 70.9%
    "nb12-q2": 1.11,  # 1 / (0.7 + 0.3/1.5) = 1/0.9
    "nb12-q3": 1.43,  # 1 / (1 − a) = 1/0.7
}
