"""Algorithm 4 of the FlashAttention paper: the backward pass with recomputation.

Standard attention's backward (Algorithm 3) reads the Nq x Nk matrix P back from HBM and writes
and reads dP and dS as well. Algorithm 4 stores none of them. It keeps only O and the softmax
statistics ℓ, m from the forward pass, and, tile by tile, *recomputes* S_ij = τ Q_i K_jᵀ and
P_ij = diag(ℓ_i)⁻¹ exp(S_ij − m_i) on chip. That costs one more matmul per tile (5 instead of 4
in total, i.e. 2.5x the forward's 2; FlashAttention-2 §4.1, flash-attention issue #1525) and
saves every Θ(N²) HBM pass: Theorem 5 counts Θ(N²d²M⁻¹) accesses instead of Θ(Nd + N²).

Two ideas make the recomputation cheap (Appendix B.2 of the paper):

* D_i = rowsum(dO_i ∘ O_i) equals Σ_j P_ij dP_ij (eq. 4), so the softmax Jacobian term needs two
  Br x d tiles instead of a whole row of P and dP;
* the dropout mask Z is regenerated from the seed (here :func:`flashref.dropout.scale_mask`, a
  pure function of the coordinates), never stored.

The loop is K/V-outer (line 6) and Q-inner (line 9): dK_j and dV_j accumulate on chip and are
written once per j, while dQ_i is read and written back to HBM for every (j, i) — the T_c passes
over Q, O, dO and dQ that Theorem 5's proof counts.

On-chip footprint (elements per head), measured by :class:`flashref.memory.Memory` and returned
exactly by :func:`footprint`: K_j, V_j, d̃K_j, d̃V_j (4·Bc·d), Q_i, O_i, dO_i, dQ_i (4·Br·d),
ℓ_i, m_i (2·Br) and two Br x Bc tiles (P_ij and dP_ij / dS_ij) plus D_i (Br); with dropout a
third Br x Bc tile is live (P_ij, Z_ij and P_ij^dropped at line 15). The block sizes are chosen
by :func:`flashref.blocks.resolve` with this footprint, so they can differ from the forward's.

The body of the inner loop (lines 10-22) is :func:`tile_step`; block-sparse FlashAttention
(:mod:`flashref.blocksparse`) runs it inside its own loop, behind Algorithm 5's ``if M_ij ≠ 0``.

The variants (:mod:`flashref.variants`) recompute their scores at l.11-12 as the forward made them
(:func:`flashref.variants.tile_scores`): a bias tile is read again for every (j, i); a softcap keeps
its derivative 1 − tanh² on chip (one more Br x Bc tile) and multiplies dS_ij by it after l.20;
ALiBi's slope is loaded with K_j, V_j. With GQA each query head h writes its own dK_h, dV_h, and
one more pass sums each group's (:func:`flashref.variants.reduce_groups`). ``bias_grad=True``
returns the bias's gradient too, dS_ij before τ, each tile written once (Nq·Nk writes a head).

Example::

    fwd = flash1.forward(Q, K, V, causal=True)
    bwd = flash1.backward(Q, K, V, fwd.O, dO, fwd.l, fwd.m, causal=True)
    print(bwd.io)          # dQ_i is read and written T_c times; P never touches HBM
"""

from __future__ import annotations

import numpy as np

from . import blocks, variants
from .flops import FlopCounter
from .memory import Memory
from .problem import VARIANT_OPTIONS, Problem, check_finite, check_like, check_masked_rows, overflow_checked
from .results import BackwardResult
from .softmax import finite_or_zero

__all__ = ["backward", "footprint", "grid", "tile_step", "check_stats", "init_gradients", "OPTIONS"]

#: Options beyond the shared ones, of FlashAttention's forward and backward (and Algorithm 5's): the attention
#: variants. (FA3's packed GQA is ``flash2``'s; the backward takes ``bias_grad`` too.)
OPTIONS = VARIANT_OPTIONS


def footprint(Br: int, Bc: int, d: int, dropout: bool = False, softcap: bool = False, slopes: int = 0) -> int:
    """Peak on-chip elements per head of Algorithm 4's inner loop with full (Br, Bc) tiles.

    ``4·Bc·d`` (K_j, V_j, d̃K_j, d̃V_j) + ``4·Br·d`` (Q_i, O_i, dO_i, dQ_i) + the row vectors and
    Br x Bc tiles live at the fullest moment: line 20 without dropout (ℓ_i, m_i, D_i; P_ij, dP_ij),
    line 15 with dropout (ℓ_i, m_i; P_ij, Z_ij, P_ij^dropped). A ``softcap`` keeps one more tile, its
    derivative, from l.11 to after l.20; ALiBi keeps the ``slopes`` of the column block's head (1). A bias
    tile is on chip only while S_ij is made, below these peaks.
    """
    tiles = (3 if dropout else 2) + (1 if softcap else 0)
    rows = 2 if dropout else 3
    return 4 * Bc * d + 4 * Br * d + rows * Br + tiles * Br * Bc + slopes


def grid(pb: Problem) -> blocks.Grid:
    """The tiling Algorithm 4 runs with for problem ``pb`` (Alg.4 l.2-4, fitted to the real footprint)."""
    has_dropout, softcap = pb.dropout_p > 0, pb.softcap is not None
    slopes = 1 if pb.alibi_slopes is not None else 0
    return blocks.grid_for(pb, lambda Br, Bc, d: footprint(Br, Bc, d, has_dropout, softcap, slopes))


def check_stats(pb: Problem, O, dO, l, m):
    """Check the tensors Algorithm 4 takes from the forward (its Require line): shapes, and no NaN/inf."""
    O = check_like(O, "O", pb.Q.shape, pb.dtype)
    dO = check_like(dO, "dO", pb.Q.shape, pb.dtype)
    l = check_like(l, "l", pb.lead_shape + (pb.Nq,), pb.dtype)
    m = check_like(m, "m", pb.lead_shape + (pb.Nq,), pb.dtype)
    for a, name in ((O, "O"), (dO, "dO"), (l, "l")):
        check_finite(a, name)
    if np.isnan(m).any() or np.isposinf(m).any():
        raise ValueError("m: expected finite row maxima (or -inf for fully masked rows)")
    if (l < 0).any():
        raise ValueError("l: expected non-negative row sums")
    # A fully masked row is (m_i, ℓ_i) = (-inf, 0), and only it: a finite m_i has ℓ_i >= 1 (its own e^0).
    if (np.isneginf(m) & (l > 0)).any():
        raise ValueError("m: m_i = -inf (a fully masked row) where ℓ_i > 0; a row's saved statistics are (-inf, 0) "
                         "for a fully masked row, else a finite m_i and ℓ_i >= 1 (pass the forward's .l and .m)")
    if (np.isfinite(m) & (l == 0)).any():
        raise ValueError("l: ℓ_i = 0 (a fully masked row) where m_i is finite; a row's saved statistics are (-inf, 0) "
                         "for a fully masked row, else a finite m_i and ℓ_i >= 1 (pass the forward's .l and .m)")
    return O, dO, l, m


#: The overflow error's other cause: P = exp(S − m)/ℓ overflows where an m_i is below its row's scores.
OVERFLOW_NOTE = "or l, m are not the forward's: an m_i below its row's largest score makes P = exp(S − m)/ℓ overflow"

#: The error for an m_i = -inf on a row with a key to attend to (:func:`flashref.problem.check_masked_rows`).
_M_MASKED = ("m: m_i = -inf marks a row as fully masked, but causal, window, mask and bias (and blocksparse's block "
             "mask) leave it a key to attend to; the forward's m is -inf only on a row whose every key they hide "
             "(pass the forward's .l and .m)")


@overflow_checked("dQ", "dK", "dV", note=OVERFLOW_NOTE)
def backward(Q, K, V, O, dO, l, m, **opts) -> BackwardResult:
    """Algorithm 4: gradients of ``O = dropout(softmax(MASK(τ QKᵀ))) V`` from ``O``, ``ℓ`` and ``m``.

    ``l`` and ``m`` are the forward's row statistics, shape ``(..., Nq)``: ``m`` the row maximum of
    the scaled, masked scores (-inf for a fully masked row) and ``l`` the row sum of
    ``exp(S − m)`` over the undropped scores (0 for a fully masked row). Options as the forward's:
    ``scale``, ``causal``, ``mask``, ``dropout_p``, ``seed`` (the forward's), ``sram_size``,
    ``block_sizes``, ``dtype_bytes``, the variants; and ``bias_grad=True`` (with a ``bias``) for ``.dBias``,
    ``(..., Nq, Nk)`` in Q's leading axes (sum it over the axes the bias was broadcast along). Returns ``.dQ``,
    ``.dK``, ``.dV``, ``.io``, ``.flops``, ``.events``.
    """
    bias_grad = opts.pop("bias_grad", False)
    # extra names bias_grad too (taken above): an unknown option's error lists every one backward takes
    pb0 = Problem.from_arrays(Q, K, V, "flash1.backward", OPTIONS + ("bias_grad",), **opts)
    bias_grad = variants.check_bias_grad(bias_grad, pb0.bias)
    O, dO, l, m = check_stats(pb0, O, dO, l, m)
    # Alg.4 l.1: set the pseudo-random number generator state to R: the forward's seed, pb.seed,
    # from which pb.dropout_Z regenerates every tile's Z (l.14).
    # Alg.4 l.2: set block sizes (the paper's rule, shrunk until the real footprint fits M).
    # Alg.4 l.3-4: divide Q, O, dO, ℓ, m into Tr row blocks of Br, and K, V into Tc blocks of Bc.
    g = grid(pb0)
    # [gqa] each query head h reads the tiles of its K/V head h // g and writes its own dK_h, dV_h.
    pb = variants.loop_problem(pb0, packed=False)
    mem, fc = init_gradients(pb0, pb, O, dO, l, m, "Alg.4 l.5", bias_grad)
    for j in range(g.Tc):  # Alg.4 l.6
        cols = g.cols(j)
        # Alg.4 l.7: load K_j, V_j from HBM to on-chip SRAM ([alibi] and the head's slope with them).
        K_j = mem.load("K", rows=cols, as_="K_j", line="Alg.4 l.7")  # (Bc, d)
        V_j = mem.load("V", rows=cols, as_="V_j", line="Alg.4 l.7")  # (Bc, d)
        slopes_j = variants.load_slopes(mem, pb, "Alg.4 l.7")
        # Alg.4 l.8: initialise d̃K_j = 0, d̃V_j = 0 (Bc x d) on SRAM.
        dK_tilde_j = mem.hold("dK_tilde_j", np.zeros_like(K_j))  # (Bc, d)
        dV_tilde_j = mem.hold("dV_tilde_j", np.zeros_like(V_j))  # (Bc, d)
        for i in range(g.Tr):  # Alg.4 l.9
            tile_step(mem, fc, pb, K_j, V_j, dK_tilde_j, dV_tilde_j, g.rows(i), cols, slopes_j,
                      bias_grad)  # Alg.4 l.10-22
        # Alg.4 l.23: end for. l.24: write dK_j ← d̃K_j, dV_j ← d̃V_j to HBM.
        write_kv_gradients(mem, pb0, dK_tilde_j, dV_tilde_j, cols)
        # Alg.4 l.25: end for.
        mem.free("K_j", "V_j", "dK_tilde_j", "dV_tilde_j", "slopes_j")
    # Alg.4 l.26: return dQ, dK, dV.
    return gradients(mem, fc, pb0, g, bias_grad)


def _kv_names(pb0: Problem) -> tuple[str, str]:
    """Where l.24 writes: dK, dV; with GQA each query head's dK_h, dV_h, which a last pass sums per group."""
    return ("dK_h", "dV_h") if pb0.group > 1 else ("dK", "dV")


def init_gradients(pb0: Problem, pb: Problem, O, dO, l, m, line: str, bias_grad: bool = False):
    """Inputs in HBM (free) and, per Alg.4 l.5, dQ = 0 (Nq×d), dK = dV = 0 (Nk×d): Nq·d + 2·Nk·d writes a loop head.

    ``pb0`` is the problem as called, ``pb`` the loop's (:func:`flashref.variants.loop_problem`). Returns the
    Memory and a FlopCounter."""
    mem = Memory(pb.sram_size, pb.dtype_bytes, pb.lead_shape)
    for name, X in (("Q", pb.Q), ("K", pb.K), ("V", pb.V), ("O", O), ("dO", dO), ("l", l), ("m", m),
                    ("bias", pb.bias), ("alibi_slopes", pb.alibi_slopes)):
        if X is not None:  # inputs start in HBM at no cost (rule 1); [bias], [alibi] where given
            mem.input(name, X)
    dK_name, dV_name = _kv_names(pb0)
    mem.init("dQ", (pb.Nq, pb.d), 0.0, dtype=pb.dtype, line=line)
    mem.init(dK_name, (pb.Nk, pb.d), 0.0, dtype=pb.dtype, line=line)
    mem.init(dV_name, (pb.Nk, pb.d), 0.0, dtype=pb.dtype, line=line)
    if bias_grad:
        mem.output("dBias", (pb.Nq, pb.Nk), dtype=pb.dtype)  # [bias] every tile written once
    return mem, FlopCounter()


def write_kv_gradients(mem: Memory, pb0: Problem, dK_tilde_j, dV_tilde_j, cols) -> None:
    """Alg.4 l.24: write dK_j ← d̃K_j, dV_j ← d̃V_j to HBM (each query head's own, with GQA)."""
    dK_name, dV_name = _kv_names(pb0)
    mem.store(dK_name, dK_tilde_j, rows=cols, line="Alg.4 l.24")
    mem.store(dV_name, dV_tilde_j, rows=cols, line="Alg.4 l.24")


def gradients(mem: Memory, fc: FlopCounter, pb0: Problem, g: blocks.Grid, bias_grad: bool, **extra) -> BackwardResult:
    """Alg.4 l.26: the result, after [gqa]'s pass that sums each group's dK_h, dV_h (one more pass, counted)."""
    io, events = mem.report(), list(mem.events)
    dK, dV = (mem.result(name) for name in _kv_names(pb0))
    if pb0.group > 1:
        dK, dV, io, events = variants.reduce_groups(pb0, g, dK, dV, fc, io, events)
    dK, dV = variants.kv_gradients(pb0, dK, dV)  # [gqa] no query heads: zero gradients, nothing moved
    if bias_grad:
        extra["dBias"] = variants.bias_gradient(pb0, mem, 1)
    return BackwardResult(dQ=mem.result("dQ"), dK=dK, dV=dV, io=io, flops=fc.report(), events=events,
                          block_sizes=(g.Br, g.Bc), **extra)


def tile_step(mem: Memory, fc: FlopCounter, pb: Problem, K_j, V_j, dK_tilde_j, dV_tilde_j, rows, cols,
              slopes_j=None, bias_grad: bool = False) -> None:
    """Algorithm 4 l.10-22 for tile (i, j): update dQ_i in HBM and d̃K_j, d̃V_j on chip (in place).

    ``slopes_j``: the ALiBi slope on chip (:func:`flashref.variants.load_slopes`), or None; ``bias_grad``: write
    the tile's dBias."""
    tau, has_dropout = pb.scale, pb.dropout_p > 0
    # Alg.4 l.10: load Q_i, O_i, dO_i, dQ_i, ℓ_i, m_i from HBM to on-chip SRAM.
    Q_i = mem.load("Q", rows=rows, as_="Q_i", line="Alg.4 l.10")  # (Br, d)
    O_i = mem.load("O", rows=rows, as_="O_i", line="Alg.4 l.10")  # (Br, d)
    dO_i = mem.load("dO", rows=rows, as_="dO_i", line="Alg.4 l.10")  # (Br, d)
    dQ_i = mem.load("dQ", rows=rows, as_="dQ_i", line="Alg.4 l.10")  # (Br, d)
    l_i = mem.load("l", rows=rows, as_="l_i", line="Alg.4 l.10")[..., None]  # (Br, 1)
    m_i = mem.load("m", rows=rows, as_="m_i", line="Alg.4 l.10")[..., None]  # (Br, 1)

    # Alg.4 l.11: on chip, S_ij = τ Q_i K_jᵀ (τ folded into the matmul's epilogue, rule 5), then the variants'
    # [softcap] (its derivative kept as dtanh_ij), [alibi] and [bias] (B_ij read from HBM again on this line).
    # Alg.4 l.12: on chip, S_ij^masked = MASK(S_ij): causal ∧ [window] ∧ mask, a function of the coordinates, no IO.
    S_ij, dtanh_ij = variants.tile_scores(mem, fc, pb, Q_i, K_j, rows, cols, "Alg.4 l.11", slopes_j,
                                          keep_dtanh=pb.softcap is not None)  # (Br, Bc)
    # m_i = -inf only on a fully masked row, whose S_ij is -inf throughout: refuse one that sees a key (on chip,
    # no IO), whose P_ij below would be exp(S_ij), unnormalised.
    check_masked_rows(np.isneginf(m_i[..., 0]), S_ij, _M_MASKED)

    # Alg.4 l.13: on chip, P_ij = diag(ℓ_i)⁻¹ exp(S_ij^masked − m_i), in S_ij's slot.
    # A fully masked row has m_i = -inf and ℓ_i = 0: subtract 0 and divide by 1, so
    # exp(-inf) = 0 gives a zero row of P (no -inf - -inf, no 0/0).
    P_ij = mem.reuse("S_ij", "P_ij", fc.ew(np.exp(S_ij - finite_or_zero(m_i)) / np.where(l_i == 0, 1.0, l_i),
                                           "subtract", "exp", "divide"))  # (Br, Bc)
    if has_dropout:
        # Alg.4 l.14: on chip, Z_ij: 1/(1-p) w.p. 1-p, else 0, regenerated from the seed
        # (the same entries the forward dropped, whatever the tiling: never stored).
        Z_ij = mem.hold("Z_ij", pb.dropout_Z(rows, cols))
        # Alg.4 l.15: on chip, P_ij^dropped = P_ij ∘ Z_ij.
        P_dropped_ij = mem.hold("P_dropped_ij", fc.ew(P_ij * Z_ij, "dropout"))  # (Br, Bc)
    else:
        P_dropped_ij = P_ij  # no dropout: P^dropped is P itself, no new tile

    # Alg.4 l.16: on chip, d̃V_j ← d̃V_j + (P_ij^dropped)ᵀ dO_i (the + is the matmul's accumulate: no FLOP of its own).
    dV_tilde_j += fc.matmul(P_dropped_ij.swapaxes(-1, -2), dO_i)  # (Bc, d)
    mem.free("P_dropped_ij")

    # Alg.4 l.17: on chip, dP_ij^dropped = dO_i V_jᵀ.
    dP_ij = mem.hold("dP_ij", fc.matmul(dO_i, V_j.swapaxes(-1, -2)))  # (Br, Bc)
    if has_dropout:
        # Alg.4 l.18: on chip, dP_ij = dP_ij^dropped ∘ Z_ij (in its slot).
        dP_ij = mem.hold("dP_ij", fc.ew(dP_ij * Z_ij, "dropout"))
        mem.free("Z_ij")

    # Alg.4 l.19: on chip, D_i = rowsum(dO_i ∘ O_i) = Σ_j P_ij dP_ij (Appendix B.2, eq. 4).
    D_i = mem.hold("D_i", fc.rowsum(fc.ew(dO_i * O_i, "multiply"))[..., None])  # (Br, 1)

    # Alg.4 l.20: on chip, dS_ij = P_ij ∘ (dP_ij − D_i), in dP_ij's slot.
    dS_ij = mem.reuse("dP_ij", "dS_ij", fc.ew(P_ij * (dP_ij - D_i), "subtract", "multiply"))  # (Br, Bc)
    if bias_grad:
        # [bias] the bias is added after τ (and after the softcap): its gradient is this tile, written to HBM.
        mem.store("dBias", dS_ij, rows=rows, cols=cols, line="dBias")  # Br·Bc writes
    if dtanh_ij is not None:
        # [softcap] through c·tanh(S/c): dS_ij ← dS_ij ∘ (1 − tanh²), then the derivative's tile is freed.
        dS_ij = mem.hold("dS_ij", fc.ew(dS_ij * dtanh_ij, "softcap grad"))
        mem.free("dtanh_ij")

    # Alg.4 l.21: write dQ_i ← dQ_i + τ dS_ij K_j to HBM (τ is counted; the + is the matmul's accumulate).
    dQ_i += fc.ew(tau * fc.matmul(dS_ij, K_j), "scale")  # (Br, d)
    mem.store("dQ", dQ_i, rows=rows, line="Alg.4 l.21")

    # Alg.4 l.22: on chip, d̃K_j ← d̃K_j + τ dS_ijᵀ Q_i (τ is counted; the + is the matmul's accumulate).
    dK_tilde_j += fc.ew(tau * fc.matmul(dS_ij.swapaxes(-1, -2), Q_i), "scale")  # (Bc, d)

    # Alg.4 l.23: end for (the row block's tiles leave the chip).
    mem.free("Q_i", "O_i", "dO_i", "dQ_i", "l_i", "m_i", "P_ij", "D_i", "dS_ij")
