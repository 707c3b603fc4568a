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
take its slot, as registers would), and six row vectors ℓ_i, m_i, m̃_ij, ℓ̃_ij, m_i^new,
ℓ_i^new (6·Br; the two rescaling factors e^{m_i − m_i^new} and e^{m̃_ij − m_i^new} take the slots
of m_i and m̃_ij, which are not needed again).

The attention variants (:mod:`flashref.variants`: ``enable_gqa``, ``window``, ``alibi_slopes``,
``softcap``, ``bias``) enter Algorithm 1 where its tile's scores are made, l.9 (Alg.2 l.10-11), by the
same code as FlashAttention-2's (:func:`flashref.variants.tile_scores`). What they cost here follows from
the loops as printed: every tile is visited, so a window is MASK, as causal is, and skips nothing
(FlashAttention-2 skips the tiles outside it; Algorithm 5's block mask can, e.g.
:func:`flashref.blocksparse.local_blocks`); a bias tile B_ij is read for every (j, i), Nq·Nk a head;
ALiBi's slope is loaded with K_j, V_j, once per column block; a softcap moves nothing at given blocks
(but its derivative's tile in the backward, like a bias tile here, takes room on chip: at a given M the
blocks :func:`grid` resolves may be smaller, and then the traffic larger). GQA is
FlashAttention-2's default schedule, the natural one for a loop over one head: each query head loads
the tiles of its K/V head h // g, so K and V are read as if repeated (FA3's packing is flash2's).

Algorithm 4 (the backward) lives in :mod:`flashref.flash1_bwd` and is re-exported here as
:func:`backward`; Algorithm 5 (block-sparse) in :mod:`flashref.blocksparse` runs the same tile
step, :func:`tile_step`, inside its own loop with its ``if M_ij ≠ 0``.

The paper's blocks Bc = ⌈M/4d⌉, Br = min(⌈M/4d⌉, d) occupy 3d·Bc + 2d² + 6d once Bc ≥ d (M > 4d² − 4d), about
3M/4 + 2d² + 6d. That fits in M first at M = 8d² + 24d and for every M ≥ 8d² + 33d (in between, rounding M/4d up can
push it past M: d = 64 fits at 34304 but not at 34305); where it does not, :func:`flashref.blocks.resolve` takes the
largest blocks that fit.

Example::

    fwd = flash1.forward(Q, K, V, causal=True, sram_size=50_000)
    fwd.block_sizes, fwd.io.total, fwd.io.peak_sram
"""

from __future__ import annotations

import numpy as np

from . import blocks, variants
from .flash1_bwd import OPTIONS, backward  # Algorithm 4 in its own module, and the options both passes take
from .flops import FlopCounter
from .memory import Memory
from .problem import Problem, overflow_checked
from .results import ForwardResult
from .softmax import finite_or_zero

__all__ = ["forward", "backward", "footprint", "grid", "tile_step", "init_outputs", "OPTIONS"]


def footprint(Br: int, Bc: int, d: int, bias: bool = False, slopes: int = 0) -> int:
    """Peak on-chip elements per head of Algorithm 1's inner loop with full (Br, Bc) tiles.

    ``2·Bc·d`` (K_j, V_j) + ``2·Br·d`` (Q_i, O_i) + ``Br·Bc`` (S_ij, whose slot MASK(S_ij), P̃_ij
    and P̃_ij^dropped take in turn) + ``6·Br`` (ℓ_i, m_i, m̃_ij, ℓ̃_ij, m_i^new, ℓ_i^new). With a
    ``bias``, its tile B_ij is on chip beside S_ij when it is loaded (with Q_i, O_i, ℓ_i, m_i): two
    tiles and two row vectors then. With ALiBi, the ``slopes`` of the column block's head (1) stay on chip.
    """
    after_l10 = 2 * Bc * d + 2 * Br * d + Br * Bc + 6 * Br
    at_bias = 2 * Bc * d + 2 * Br * d + 2 * Br * Bc + 2 * Br
    return (max(after_l10, at_bias) if bias else after_l10) + slopes


def grid(pb: Problem) -> blocks.Grid:
    """The tiling Algorithm 1 runs with for problem ``pb`` (l.1, fitted to the real footprint; l.3-4)."""
    has_bias, slopes = pb.bias is not None, 1 if pb.alibi_slopes is not None else 0
    return blocks.grid_for(pb, lambda Br, Bc, d: footprint(Br, Bc, d, bias=has_bias, slopes=slopes))


@overflow_checked("O")
def forward(Q, K, V, **opts) -> ForwardResult:
    """Algorithm 1 (with Algorithm 2's scale τ, MASK and dropout): ``O = dropout(softmax(MASK(τ QKᵀ))) V``.

    Options: ``scale``, ``causal``, ``mask``, ``dropout_p``, ``seed``, ``sram_size`` (M, elements per
    head), ``block_sizes=(Br, Bc)``, ``dtype_bytes``, and the variants ``enable_gqa``, ``window``,
    ``alibi_slopes``, ``softcap``, ``bias`` (:mod:`flashref.variants`). Returns ``.O``, ``.l`` (row sums of
    exp(S − m) before dropout; 0 for a fully masked row), ``.m`` (row maxima of the scaled, masked
    scores; -inf for a fully masked row), ``.io``, ``.flops``, ``.events`` and ``.block_sizes``.
    """
    pb0 = Problem.from_arrays(Q, K, V, "flash1.forward", OPTIONS, **opts)
    # Alg.1 l.1: block sizes (the paper's, or the largest that really fit; see blocks.resolve).
    # Alg.1 l.3-4: Tr row blocks of Q, O, ℓ, m; Tc column blocks of K, V (last blocks may be ragged).
    g = grid(pb0)
    # [gqa] each query head h loads the tiles of its K/V head h // g (K and V as if repeated).
    pb = variants.loop_problem(pb0, packed=False)
    mem, fc = init_outputs(pb, "Alg.1 l.2")
    for j in range(g.Tc):  # Alg.1 l.5
        cols = g.cols(j)
        # Alg.1 l.6: load K_j, V_j from HBM to on-chip SRAM (once per j).
        K_j = mem.load("K", rows=cols, as_="K_j", line="Alg.1 l.6")  # (Bc, d)
        V_j = mem.load("V", rows=cols, as_="V_j", line="Alg.1 l.6")  # (Bc, d)
        # [alibi] and the head's slope with them, once per column block.
        slopes_j = variants.load_slopes(mem, pb, "Alg.1 l.6")
        for i in range(g.Tr):  # Alg.1 l.7
            tile_step(mem, fc, pb, K_j, V_j, g.rows(i), cols, lines=LINES_ALG1, slopes_j=slopes_j)  # Alg.1 l.8-13
        # Alg.1 l.14: end for.
        mem.free("K_j", "V_j", "slopes_j")
    # Alg.1 l.15-16: end for; return O (and ℓ, m for the backward pass, Alg.2 l.19).
    return ForwardResult(O=mem.result("O"), l=mem.result("l"), m=mem.result("m"), io=mem.report(),
                         flops=fc.report(), events=mem.events, block_sizes=(g.Br, g.Bc))


def init_outputs(pb: Problem, line: str) -> tuple[Memory, FlopCounter]:
    """Inputs in HBM (free) and, per Alg.1 l.2, O = 0 (Nq×d), ℓ = 0, m = -inf (Nq): Nq·d + 2·Nq writes."""
    mem = Memory(pb.sram_size, pb.dtype_bytes, pb.lead_shape)
    for name, X in (("Q", pb.Q), ("K", pb.K), ("V", pb.V), ("bias", pb.bias), ("alibi_slopes", pb.alibi_slopes)):
        if X is not None:  # [bias] and [alibi]: inputs too, where given
            mem.input(name, X)
    mem.init("O", (pb.Nq, pb.d), 0.0, dtype=pb.dtype, line=line)
    mem.init("l", (pb.Nq,), 0.0, dtype=pb.dtype, line=line)
    mem.init("m", (pb.Nq,), -np.inf, dtype=pb.dtype, line=line)
    return mem, FlopCounter()


#: The algorithm lines of the tile step, as Algorithm 1 numbers them (Algorithm 5 numbers them l.9-16).
LINES_ALG1 = {"load": "Alg.1 l.8", "scores": "Alg.1 l.9", "write O": "Alg.1 l.12", "write l, m": "Alg.1 l.13"}


def tile_step(mem: Memory, fc: FlopCounter, pb: Problem, K_j, V_j, rows, cols, lines=LINES_ALG1,
              slopes_j=None) -> None:
    """Algorithm 1 l.8-13 (Algorithm 2 l.9-16 with τ, MASK, dropout) for tile (i, j): update O_i, ℓ_i, m_i in HBM.

    ``slopes_j``: the ALiBi slope on chip (:func:`flashref.variants.load_slopes`), or None."""
    # l.8: load Q_i, O_i, ℓ_i, m_i from HBM to on-chip SRAM (once per (j, i)).
    Q_i = mem.load("Q", rows=rows, as_="Q_i", line=lines["load"])  # (Br, d)
    O_i = mem.load("O", rows=rows, as_="O_i", line=lines["load"])  # (Br, d)
    l_i = mem.load("l", rows=rows, as_="l_i", line=lines["load"])  # (Br,)
    m_i = mem.load("m", rows=rows, as_="m_i", line=lines["load"])  # (Br,)

    # l.9 / Alg.2 l.10: S_ij = τ Q_i K_jᵀ (τ folded into the matmul's epilogue, rule 5), then the variants'
    # [softcap], [alibi] and [bias] (its tile B_ij read from HBM on this line).
    # Alg.2 l.11: S_ij^masked = MASK(S_ij), in S_ij's slot: causal ∧ [window] ∧ mask, a function, no IO.
    S_ij, _ = variants.tile_scores(mem, fc, pb, Q_i, K_j, rows, cols, lines["scores"], slopes_j)  # (Br, Bc)

    # l.10: m̃_ij = rowmax(S_ij), P̃_ij = exp(S_ij − m̃_ij), ℓ̃_ij = rowsum(P̃_ij).
    m_tilde_ij = mem.hold("m_tilde_ij", fc.rowmax(S_ij))  # (Br,); -inf for a masked row
    # A row of the tile with nothing to attend to has m̃ = -inf: subtract 0, so P̃ = 0, no NaN.
    P_tilde_ij = mem.reuse("S_ij", "P_tilde_ij",
                           fc.ew(np.exp(S_ij - finite_or_zero(m_tilde_ij)[..., None]), "subtract", "exp"))
    l_tilde_ij = mem.hold("l_tilde_ij", fc.rowsum(P_tilde_ij))  # (Br,)

    # l.11: m_i^new = max(m_i, m̃_ij), ℓ_i^new = e^{m_i − m_i^new} ℓ_i + e^{m̃_ij − m_i^new} ℓ̃_ij.
    m_new = mem.hold("m_new", fc.ew(np.maximum(m_i, m_tilde_ij), "max"))  # (Br,)
    m_new_safe = finite_or_zero(m_new)  # -inf only if both are -inf: then both factors are 0
    # The two factors are used again at l.12: they take the slots of m_i and m̃_ij (not needed again).
    alpha = mem.reuse("m_i", "alpha", fc.ew(np.exp(m_i - m_new_safe), "subtract", "exp"))  # (Br,)
    beta = mem.reuse("m_tilde_ij", "beta", fc.ew(np.exp(m_tilde_ij - m_new_safe), "subtract", "exp"))  # (Br,)
    l_new = mem.hold("l_new", fc.ew(alpha * l_i + beta * l_tilde_ij, "multiply", "multiply", "add"))  # (Br,)

    # Alg.2 l.14: P̃_ij^dropped = dropout(P̃_ij), in P̃_ij's slot. ℓ above summed the undropped P̃_ij.
    if pb.dropout_p > 0:
        P_tilde_ij = mem.hold("P_tilde_ij", fc.ew(P_tilde_ij * pb.dropout_Z(rows, cols), "dropout"))

    # l.12: O_i ← diag(ℓ_i^new)⁻¹ (diag(ℓ_i) e^{m_i − m_i^new} O_i + e^{m̃_ij − m_i^new} P̃_ij V_j),
    # written to HBM. A row with ℓ_i^new = 0 (nothing attended yet) keeps O_i = 0: divide by 1.
    l_new_safe = np.where(l_new == 0, 1.0, l_new)
    inv_l_new = fc.ew(1.0 / l_new_safe, "divide")  # (Br,), a register: used in this line only
    # the two row factors, registers too (one multiply, one divide, one multiply a row, counted):
    # diag(ℓ_i^new)⁻¹ diag(ℓ_i) e^{m_i − m_i^new} and diag(ℓ_i^new)⁻¹ e^{m̃_ij − m_i^new}.
    # The first is a quotient, not a product with 1/ℓ_i^new: on a tile where a row attends to nothing (causal rows
    # above the diagonal, Algorithm 1's loops visit those tiles too) ℓ_i^new = e^{m_i − m_i^new} ℓ_i exactly, so the
    # quotient is exactly 1 and O_i stays as it was, where ℓ_i · (1/ℓ_i) is 1 only up to rounding: in float32 that
    # rounding, taken once per masked tile, grew causal rows' error to several times plain float32 attention's.
    scale_O = fc.ew(l_i * alpha / l_new_safe, "multiply", "divide")  # (Br,)
    scale_PV = fc.ew(beta * inv_l_new, "multiply")  # (Br,)
    O_i = mem.hold("O_i", fc.ew(scale_O[..., None] * O_i + scale_PV[..., None] * fc.matmul(P_tilde_ij, V_j),
                                "rescale O_i", "scale P̃V", "add"))  # (Br, d)
    mem.store("O", O_i, rows=rows, line=lines["write O"])  # Br·d writes
    # l.13: write ℓ_i ← ℓ_i^new, m_i ← m_i^new to HBM.
    mem.store("l", l_new, rows=rows, line=lines["write l, m"])  # Br writes
    mem.store("m", m_new, rows=rows, line=lines["write l, m"])  # Br writes
    mem.free("Q_i", "O_i", "l_i", "alpha", "P_tilde_ij", "beta", "l_tilde_ij", "m_new", "l_new")
