"""FlashAttention (Dao et al. 2022, arXiv 2205.14135): Algorithm 1/2 forward and Algorithm 4 backward.

Standard attention (Algorithm 0) writes the Nq x Nk matrices S and P to HBM and reads them back.
Algorithm 1 never does: it splits Q into Tr row blocks and K, V into Tc column blocks, and for each
tile (i, j) computes S_ij, its softmax statistics and its contribution to O_i on chip. The pieces of
a row's softmax are combined exactly with the running max m and sum ℓ of §3.1
(:func:`flashref.softmax.merge`), and O_i is kept normalised after every tile.

The loops are as the paper prints them: K_j, V_j in the *outer* loop (loaded once each), Q_i, O_i,
ℓ_i, m_i in the *inner* loop (loaded and written back once per (j, i)). So Q and O are read Tc times
and O written Tc times: Θ(Nq·d·Tc) = Θ(N²d²/M) HBM accesses (Theorem 2) instead of Θ(Nd + N²).
Algorithm 2 adds the softmax scale τ (folded into S_ij, rule 5), MASK (applied on chip, no IO) and
dropout (applied to the tile; ℓ sums the *undropped* P̃_ij). Causal attention is MASK here: the
paper's Algorithms 1/2 visit every tile, including those above the diagonal (FlashAttention-2's
block skipping is in :mod:`flashref.flash2`).

On-chip footprint per head (:func:`footprint`, equal to the peak the memory measures): K_j, V_j
(2·Bc·d), Q_i, O_i (2·Br·d), one Br x Bc tile (S_ij; its masked version, P̃_ij and P̃_ij^dropped
overwrite it in place, as registers would), and six row vectors ℓ_i, m_i, m̃_ij, ℓ̃_ij, m_i^new,
ℓ_i^new (6·Br). The paper's blocks Bc = ⌈M/4d⌉, Br = min(⌈M/4d⌉, d) occupy about 3M/4 + 2d² + 6d,
which fits in M only when M ≥ 8d² + 24d; otherwise :func:`flashref.blocks.resolve` takes the largest
blocks that fit.

Example::

    fwd = flash1.forward(Q, K, V, causal=True, sram_size=50_000)
    fwd.block_sizes, fwd.io.total, fwd.io.peak_sram
"""

from __future__ import annotations

import numpy as np

from . import blocks, masks
from ._checks import attention_problem, check_block_mask
from .flops import FlopCounter
from .memory import Memory
from .results import ForwardResult
from .softmax import _finite_or_zero

__all__ = ["forward", "backward", "footprint", "block_sizes_for"]


def _T(X: np.ndarray) -> np.ndarray:
    return X.swapaxes(-1, -2)


def footprint(Br: int, Bc: int, d: int) -> int:
    """Peak on-chip elements per head of Algorithm 1's inner loop with full (Br, Bc) tiles.

    ``2·Bc·d`` (K_j, V_j) + ``2·Br·d`` (Q_i, O_i) + ``Br·Bc`` (S_ij, overwritten in place by
    MASK(S_ij), P̃_ij and P̃_ij^dropped) + ``6·Br`` (ℓ_i, m_i, m̃_ij, ℓ̃_ij, m_i^new, ℓ_i^new).
    """
    return 2 * Bc * d + 2 * Br * d + Br * Bc + 6 * Br


def block_sizes_for(pb) -> tuple[int, int]:
    """The (Br, Bc) that Algorithm 1 runs with for problem ``pb`` (l.1, fitted to the real footprint)."""
    return blocks.resolve(pb, footprint)


def forward(Q, K, V, **opts) -> ForwardResult:
    """Algorithm 1 (with Algorithm 2's scale τ, MASK and dropout): ``O = dropout(softmax(MASK(τ QKᵀ))) V``.

    Options: ``scale``, ``causal``, ``mask``, ``dropout_p``, ``seed``, ``sram_size`` (M, elements per
    head), ``block_sizes=(Br, Bc)``, ``dtype_bytes``. Returns ``.O``, ``.l`` (row sums of
    exp(S − m) before dropout; 0 for a fully masked row), ``.m`` (row maxima of the scaled, masked
    scores; -inf for a fully masked row), ``.io``, ``.flops``, ``.events`` and ``.block_sizes``.
    """
    pb = attention_problem(Q, K, V, **opts)
    return _forward(pb)


def _forward(pb, block_mask=None) -> ForwardResult:
    """The loop of Algorithm 1/2 on a validated problem; with ``block_mask`` (Tr x Tc bool), Algorithm 5."""
    Nq, Nk, d, lead = pb.Nq, pb.Nk, pb.d, pb.lead_shape
    # Alg.1 l.1: block sizes (the paper's, or the largest that really fit; see blocks.resolve).
    Br, Bc = block_sizes_for(pb)
    # Alg.1 l.3-4: Tr row blocks of Q, O, ℓ, m; Tc column blocks of K, V (last blocks may be ragged).
    Tr, Tc = -(-Nq // Br), -(-Nk // Bc)
    if block_mask is not None:
        block_mask = check_block_mask(block_mask, Tr, Tc)
    mem = Memory(pb.sram_size, pb.dtype_bytes, lead)
    fc = FlopCounter()
    for name, X in (("Q", pb.Q), ("K", pb.K), ("V", pb.V)):
        mem.put(name, X)

    # Alg.1 l.2: initialise O = 0 (Nq×d), ℓ = 0 (Nq), m = -inf (Nq) in HBM: Nq·d + 2·Nq writes (rule 3).
    mem.alloc("O", (Nq, d), 0.0, dtype=pb.dtype, line="Alg.1 l.2")
    mem.alloc("l", (Nq,), 0.0, dtype=pb.dtype, line="Alg.1 l.2")
    mem.alloc("m", (Nq,), -np.inf, dtype=pb.dtype, line="Alg.1 l.2")

    for j in range(Tc):  # Alg.1 l.5
        cols = blocks.tile(j, Bc, Nk)
        # Alg.1 l.6: load K_j, V_j from HBM to on-chip SRAM (once per j; Alg.5 l.6 too, even if
        # every block of column j is zero in the block mask).
        K_j = mem.load("K", rows=cols, as_="K_j", line="Alg.1 l.6")  # (Bc, d)
        V_j = mem.load("V", rows=cols, as_="V_j", line="Alg.1 l.6")  # (Bc, d)

        for i in range(Tr):  # Alg.1 l.7
            rows = blocks.tile(i, Br, Nq)
            # Alg.5 l.8: if M_ij ≠ 0 (block-sparse only): a zero block is skipped entirely.
            if block_mask is not None and not block_mask[i, j]:
                continue
            # Alg.1 l.8: load Q_i, O_i, ℓ_i, m_i from HBM to on-chip SRAM (once per (j, i)).
            Q_i = mem.load("Q", rows=rows, as_="Q_i", line="Alg.1 l.8")  # (Br, d)
            O_i = mem.load("O", rows=rows, as_="O_i", line="Alg.1 l.8")  # (Br, d)
            l_i = mem.load("l", rows=rows, as_="l_i", line="Alg.1 l.8")  # (Br,)
            m_i = mem.load("m", rows=rows, as_="m_i", line="Alg.1 l.8")  # (Br,)

            # Alg.1 l.9 / Alg.2 l.10: S_ij = τ Q_i K_jᵀ (τ folded into the matmul's epilogue, rule 5).
            S_ij = fc.matmul(Q_i, _T(K_j))  # (Br, Bc)
            fc.elementwise(S_ij)
            S_ij = mem.hold("S_ij", S_ij * pb.scale)
            # Alg.2 l.11: S_ij^masked = MASK(S_ij), in place; the mask is a function, no IO.
            attend = masks.tile_mask(pb.mask, pb.causal, rows, cols)
            if attend is not None:
                S_ij = mem.hold("S_ij", masks.apply(S_ij, attend))
                fc.elementwise(S_ij)

            # Alg.1 l.10: m̃_ij = rowmax(S_ij), P̃_ij = exp(S_ij − m̃_ij), ℓ̃_ij = rowsum(P̃_ij).
            m_tilde_ij = mem.hold("m_tilde_ij", S_ij.max(axis=-1))  # (Br,); -inf for a masked row
            # A row of the tile with nothing to attend to has m̃ = -inf: subtract 0, so P̃ = 0, no NaN.
            P_tilde_ij = mem.hold("S_ij", np.exp(S_ij - _finite_or_zero(m_tilde_ij)[..., None]))  # (Br, Bc)
            l_tilde_ij = mem.hold("l_tilde_ij", P_tilde_ij.sum(axis=-1))  # (Br,)
            fc.elementwise(S_ij, ops=4)  # rowmax, subtract, exp, rowsum

            # Alg.1 l.11: m_i^new = max(m_i, m̃_ij), ℓ_i^new = e^{m_i − m_i^new} ℓ_i + e^{m̃_ij − m_i^new} ℓ̃_ij.
            m_new = mem.hold("m_new", np.maximum(m_i, m_tilde_ij))  # (Br,)
            m_new_safe = _finite_or_zero(m_new)  # -inf only if both are -inf: then both factors are 0
            # The two factors replace m_i and m̃_ij on chip (neither is needed again).
            alpha = mem.hold("m_i", np.exp(m_i - m_new_safe))  # e^{m_i − m_i^new}, (Br,)
            beta = mem.hold("m_tilde_ij", np.exp(m_tilde_ij - m_new_safe))  # e^{m̃_ij − m_i^new}, (Br,)
            l_new = mem.hold("l_new", alpha * l_i + beta * l_tilde_ij)  # (Br,)
            fc.elementwise(m_new, ops=9)  # max; 2 subtracts, 2 exps; 2 multiplies, add

            # Alg.2 l.14: P̃_ij^dropped = dropout(P̃_ij), in place. ℓ above summed the undropped P̃_ij.
            if pb.dropout_p > 0:
                Z_ij = pb.dropout_Z(rows, cols)
                P_tilde_ij = mem.hold("S_ij", P_tilde_ij * Z_ij)  # (Br, Bc), the same entries as standard
                fc.elementwise(P_tilde_ij)

            # Alg.1 l.12: O_i ← diag(ℓ_i^new)⁻¹ (diag(ℓ_i) e^{m_i − m_i^new} O_i + e^{m̃_ij − m_i^new} P̃_ij V_j),
            # written to HBM. A row with ℓ_i^new = 0 (nothing attended yet) keeps O_i = 0: divide by 1.
            inv_l_new = 1.0 / np.where(l_new == 0, 1.0, l_new)  # (Br,)
            O_i = mem.hold("O_i", ((l_i * alpha * inv_l_new)[..., None] * O_i
                                   + (beta * inv_l_new)[..., None] * fc.matmul(P_tilde_ij, V_j)))  # (Br, d)
            fc.elementwise(O_i, ops=3)  # rescale O_i, scale P̃V, add (and the Br divisions, negligible)
            mem.store("O", O_i, rows=rows, line="Alg.1 l.12")  # Br·d writes
            # Alg.1 l.13: write ℓ_i ← ℓ_i^new, m_i ← m_i^new to HBM.
            mem.store("l", l_new, rows=rows, line="Alg.1 l.13")  # Br writes
            mem.store("m", m_new, rows=rows, line="Alg.1 l.13")  # Br writes
            mem.free("Q_i", "O_i", "l_i", "m_i", "S_ij", "m_tilde_ij", "l_tilde_ij", "m_new", "l_new")
        # Alg.1 l.14: end for.
        mem.free("K_j", "V_j")
    # Alg.1 l.15-16: end for; return O (and ℓ, m for the backward pass, Alg.2 l.19).
    return ForwardResult(O=mem.result("O"), l=mem.result("l"), m=mem.result("m"), io=mem.report(),
                         flops=fc.report(), events=mem.events, block_sizes=(Br, Bc))


from .flash1_bwd import backward  # noqa: E402,F401  Algorithm 4, in its own module
