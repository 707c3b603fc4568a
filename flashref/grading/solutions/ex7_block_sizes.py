"""Reference solution, exercise 7: the (Br, Bc) that minimises FlashAttention-2's forward IO under M."""


def choose_blocks(Nq, Nk, d, M, causal):
    # BEGIN SOLUTION
    # K and V are streamed once per row block: IO = 2·Nq·d + Nq + Tr·2·Nk·d (fewer K, V blocks when
    # causal). So the largest Br that fits wins; Bc barely matters: take the smallest that fits.
    def io(Br, Bc):
        Tr = -(-Nq // Br)
        kv = 0
        for i in range(Tr):
            last_row = min((i + 1) * Br, Nq) - 1
            seen = min(Nk, (last_row // Bc + 1) * Bc) if causal else Nk
            kv += 2 * seen * d
        return 2 * Nq * d + Nq + kv

    fits = [(Br, Bc) for Br in range(8, Nq + 1, 8) for Bc in range(8, Nk + 1, 8)
            if 2 * Br * d + 2 * Bc * d + Br * Bc + 3 * Br <= M]
    return min(fits, key=lambda b: (io(*b), -b[0]))
    # END SOLUTION
