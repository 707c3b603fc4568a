"""Standard attention: Algorithm 0 (forward) and Algorithm 3 (backward) of the FlashAttention paper.

Every line materialises an Nq x Nk matrix in HBM and reads it back in the next line: that round
trip is what FlashAttention removes. Each line is one HBM pass; a matmul "by blocks" reads each
operand once and writes its output once (rule 6 of docs/counting-rules.md), which is what a tiled GEMM achieves
with enough on-chip memory, so the IO of standard attention does not depend on the SRAM size M
(tridao, flash-attention issue #1260). A mask and dropout each cost one more read and write of
the Nq x Nk matrix, as eager PyTorch's ``masked_fill`` and ``dropout`` do (rule 7).

A ``bias`` (a float array added to the scaled scores, PyTorch's float ``attn_mask``) is one more
pass too, as eager PyTorch's ``S + bias``: read S and the bias, write S (2·Nq·Nk reads, Nq·Nk writes).

The attention variants are passes too, as eager PyTorch runs them (lines marked in the code):
``[softcap]`` one more pass over S (read, write; its backward recomputes tanh from Q and K by
blocks, since the backward's *Require* line saves only P: reads Nq·d + Nk·d + Nq·Nk, writes
Nq·Nk); ``[alibi]`` one more pass that reads S and the slopes and generates −slope·|i − j| in
the pass (the distances are never read: Nq·Nk + 1 reads, Nq·Nk writes per head); ``[window]``
is part of the mask pass. ``[gqa]``: the matmuls run on the packed layout (Q of a group's g heads
as g·Nq rows against their K/V head), so a matmul "by blocks" reads each K/V head once (rule 6).

On-chip memory: ``sram_size`` and ``block_sizes``. Both are among the options every algorithm shares
(one signature, so a loop over algorithms can pass the same options to each), and both are checked
here as everywhere. Neither changes a count: standard attention's IO does not depend on M (Theorem 2:
Θ(Nd + N²) HBM accesses for every M) nor on a tile shape (rule 6 models each matmul as a tiled GEMM
that reads its operands once, whatever its tiles), so pass the M and (Br, Bc) you give FlashAttention
and compare the two on the same machine. The memory records the footprint the simulation really
held, the whole matrices, which no ``sram_size`` bounds (the GEMM's own tiles are not modelled).

Example::

    fwd = standard.forward(Q, K, V, causal=True)
    bwd = standard.backward(Q, K, V, dO, fwd.P, causal=True)
    print(fwd.io + bwd.io)
"""

from __future__ import annotations

import numpy as np

from . import masks, variants
from .flops import FlopCounter
from .memory import Memory
from .problem import VARIANT_OPTIONS, Problem, check_finite, check_like, overflow_checked, require_finite
from .results import BackwardResult, ForwardResult
from .softmax import safe_softmax

__all__ = ["forward", "backward", "OPTIONS"]

#: Options beyond the shared ones: the attention variants.
OPTIONS = VARIANT_OPTIONS


def _T(X: np.ndarray) -> np.ndarray:
    return X.swapaxes(-1, -2)


@overflow_checked("O")
def forward(Q, K, V, **opts) -> ForwardResult:
    """Algorithm 0 with the Appendix B.3 additions: ``O = dropout(softmax(MASK(softcap(scale · Q Kᵀ) + bias))) V``.

    Returns ``.O``, ``.P`` (the softmax before dropout, which Algorithm 3 needs), ``.io``, ``.flops``.
    """
    pb0 = Problem.from_arrays(Q, K, V, "standard.forward", OPTIONS, **opts)
    pb = variants.loop_problem(pb0, packed=True)  # [gqa] g query heads as g·Nq rows per K/V head
    G, everything = pb.q_group, ((0, pb.Nq), (0, pb.Nk))
    mem = Memory(None, pb.dtype_bytes, pb.lead_shape)
    fc = FlopCounter()
    for name, X in (("Q", pb.Q), ("K", pb.K), ("V", pb.V)):
        mem.input(name, X)
    attend = variants.tile_attend(pb, *everything)  # causal ∧ [window] ∧ mask
    # eager PyTorch runs the pass even if nothing is hidden
    masked = pb.causal or pb.mask is not None or pb.window is not None

    # Alg.0 l.1: load Q, K by blocks from HBM, compute S = QKᵀ, write S to HBM.
    Q_ = mem.load("Q", line="Alg.0 l.1")  # read Nq*d
    K_ = mem.load("K", line="Alg.0 l.1")  # read Nk*d
    S = mem.hold("S", fc.scores(Q_, K_, pb.scale))  # (..., Nq, Nk), the scale in the matmul's epilogue (rule 5)
    mem.store("S", S, line="Alg.0 l.1")  # write Nq*Nk
    mem.free("Q", "K", "S")
    s_name = "S"

    if pb.softcap is not None:
        # [softcap] S = c·tanh(S/c), one more pass: read Nq*Nk, write Nq*Nk.
        S = mem.load(s_name, as_="S", line="softcap")
        S = mem.hold("S", variants.softcap(fc, pb, S)[0])
        mem.store("S_capped", S, line="softcap")
        mem.free("S")
        s_name = "S_capped"

    if pb.alibi_slopes is not None:
        # [alibi] S −= slope·|i − j|, one more pass: read Nq*Nk and the slopes, write Nq*Nk.
        mem.input("alibi_slopes", pb.alibi_slopes)
        S = mem.load(s_name, as_="S", line="alibi")
        slopes = mem.load("alibi_slopes", line="alibi")  # (..., G)
        S = mem.hold("S", variants.alibi(fc, pb, S, *everything, slopes))  # in S's dtype (variants.alibi)
        mem.store("S_alibi", S, line="alibi")
        mem.free("S", "alibi_slopes")
        s_name = "S_alibi"

    if pb.bias is not None:
        # S + bias, one more pass as eager PyTorch's add: read Nq*Nk twice (S, bias), write Nq*Nk.
        mem.input("bias", pb.bias)
        S = mem.load(s_name, as_="S", line="bias")
        B = mem.load("bias", line="bias")
        S = mem.hold("S", fc.add_bias(S, B))
        mem.store("S_biased", S, line="bias")
        mem.free("S", "bias")
        s_name = "S_biased"

    if masked:
        # MASK(S), one more pass as eager PyTorch's masked_fill: read Nq*Nk, write Nq*Nk.
        S = mem.load(s_name, as_="S", line="mask")
        S = mem.hold("S", fc.ew(masks.apply(S, attend), "mask"))
        mem.store("S_masked", S, line="mask")
        mem.free("S")
        s_name = "S_masked"

    # Alg.0 l.2: read S from HBM, compute P = softmax(S), write P to HBM.
    S = mem.load(s_name, as_="S", line="Alg.0 l.2")  # read Nq*Nk
    # τQKᵀ was checked where it was made; an ALiBi or bias pass may still have overflowed to +inf (or NaN).
    require_finite(S, "the scores S", masked=True)
    P = mem.hold("P", fc.ew(safe_softmax(S), "rowmax", "subtract", "exp", "rowsum", "divide"))
    mem.store("P", P, line="Alg.0 l.2")  # write Nq*Nk
    mem.free("S", "P")
    p_name = "P"

    if pb.dropout_p > 0:
        # dropout(P), one more pass as eager PyTorch's dropout: read Nq*Nk, write Nq*Nk.
        P_ = mem.load("P", line="dropout")
        P_dropped = mem.hold("P_dropped", fc.ew(P_ * pb.dropout_Z(*everything), "dropout"))
        mem.store("P_dropped", P_dropped, line="dropout")
        mem.free("P", "P_dropped")
        p_name = "P_dropped"

    # Alg.0 l.3: load P and V by blocks from HBM, compute O = PV, write O to HBM.
    P_ = mem.load(p_name, as_="P", line="Alg.0 l.3")  # read Nq*Nk
    V_ = mem.load("V", line="Alg.0 l.3")  # read Nk*d
    O = mem.hold("O", fc.matmul(P_, V_))  # (..., Nq, d)
    mem.store("O", O, line="Alg.0 l.3")  # write Nq*d

    # Alg.0 l.4: return O (and P, which the backward pass reads), in Q's head layout.
    return ForwardResult(O=variants.unpack_rows(mem.result("O"), G), P=variants.unpack_rows(mem.result("P"), G),
                         io=mem.report(), flops=fc.report(), events=mem.events)


@overflow_checked("dQ", "dK", "dV")
def backward(Q, K, V, dO, P, **opts) -> BackwardResult:
    """Algorithm 3: gradients from the stored softmax ``P`` (the forward's ``.P``).

    ``bias_grad=True`` (a backward option; needs a ``bias``) also returns ``.dBias``, ``(..., Nq, Nk)`` in Q's
    leading axes: the dS that Alg.3 l.3 (and the mask pass) leave in HBM, before softcap's pass (the bias is added
    after it), so no IO more."""
    bias_grad = opts.pop("bias_grad", False)
    # extra names bias_grad too (taken above): an unknown option's error lists every one backward takes
    pb0 = Problem.from_arrays(Q, K, V, "standard.backward", OPTIONS + ("bias_grad",), **opts)
    bias_grad = variants.check_bias_grad(bias_grad, pb0.bias)
    dO = check_like(dO, "dO", pb0.Q.shape, pb0.dtype)
    P = check_like(P, "P", pb0.lead_shape + (pb0.Nq, pb0.Nk), pb0.dtype)
    check_finite(dO, "dO")
    check_finite(P, "P")
    pb = variants.loop_problem(pb0, packed=True)  # [gqa] as in the forward
    G, everything = pb.q_group, ((0, pb.Nq), (0, pb.Nk))
    dO, P = variants.pack_rows(dO, G), variants.pack_rows(P, G)
    mem = Memory(None, pb.dtype_bytes, pb.lead_shape)
    fc = FlopCounter()
    for name, X in (("Q", pb.Q), ("K", pb.K), ("V", pb.V), ("dO", dO), ("P", P)):
        mem.input(name, X)
    attend = variants.tile_attend(pb, *everything)
    masked = pb.causal or pb.mask is not None or pb.window is not None
    Z = pb.dropout_Z(*everything) if pb.dropout_p > 0 else None

    # Alg.3 l.1: load P, dO by blocks from HBM, compute dV = Pᵀ dO, write dV to HBM.
    P_ = mem.load("P", line="Alg.3 l.1")  # read Nq*Nk
    dO_ = mem.load("dO", line="Alg.3 l.1")  # read Nq*d
    if Z is not None:
        # With dropout, dV = (P ∘ Z)ᵀ dO; Z is regenerated on chip from the seed, so no extra IO.
        P_ = mem.hold("P", fc.ew(P_ * Z, "dropout"))
    dV = mem.hold("dV", fc.matmul(_T(P_), dO_))  # (..., Nk, d)
    mem.store("dV", dV, line="Alg.3 l.1")  # write Nk*d
    mem.free("P", "dO", "dV")

    # Alg.3 l.2: load dO, V by blocks from HBM, compute dP = dO Vᵀ, write dP to HBM.
    dO_ = mem.load("dO", line="Alg.3 l.2")  # read Nq*d
    V_ = mem.load("V", line="Alg.3 l.2")  # read Nk*d
    dP = mem.hold("dP", fc.matmul(dO_, _T(V_)))  # (..., Nq, Nk)
    dp_name = "dP_dropped" if Z is not None else "dP"
    mem.store(dp_name, dP, line="Alg.3 l.2")  # write Nq*Nk
    mem.free("dO", "V", "dP")

    if Z is not None:
        # dropout backward, one more pass: dP = dP_dropped ∘ Z. Read Nq*Nk, write Nq*Nk.
        dP = mem.load("dP_dropped", as_="dP", line="dropout")
        dP = mem.hold("dP", fc.ew(dP * Z, "dropout"))
        mem.store("dP", dP, line="dropout")
        mem.free("dP")

    # Alg.3 l.3: read P, dP from HBM, compute dS_ij = P_ij (dP_ij − Σ_l P_il dP_il), write dS.
    P_ = mem.load("P", line="Alg.3 l.3")  # read Nq*Nk
    dP = mem.load("dP", line="Alg.3 l.3")  # read Nq*Nk
    D = (P_ * dP).sum(axis=-1, keepdims=True)  # (..., Nq, 1), counted with dS below
    dS = mem.hold("dS", fc.ew(P_ * (dP - D), "multiply", "rowsum", "subtract", "multiply"))  # (..., Nq, Nk)
    ds_name = "dS_masked" if masked else "dS"
    mem.store(ds_name, dS, line="Alg.3 l.3")  # write Nq*Nk
    mem.free("P", "dP", "dS")

    if masked:
        # masked_fill backward, one more pass: zero the gradient where the mask blocked attention.
        dS = mem.load("dS_masked", as_="dS", line="mask")
        dS = mem.hold("dS", fc.ew(dS if attend is None else np.where(attend, dS, 0.0), "mask"))
        mem.store("dS", dS, line="mask")
        mem.free("dS")

    # [bias] its gradient: dS as it stands in HBM now (the softcap pass below writes a new one in its place)
    dBias = variants.bias_gradient(pb0, mem, G, "dS") if bias_grad else None

    if pb.softcap is not None:
        # [softcap] backward, one more pass: dS ← dS ∘ (1 − tanh²(τQKᵀ/c)), tanh recomputed from
        # Q, K by blocks (only P is saved). Read Nq*d + Nk*d + Nq*Nk, write Nq*Nk.
        Q_, K_ = mem.load("Q", line="softcap"), mem.load("K", line="softcap")
        dtanh = variants.softcap(fc, pb, fc.scores(Q_, K_, pb.scale), keep_dtanh=True)[1]
        dS = mem.load("dS", line="softcap")
        dS = mem.hold("dS", fc.ew(dS * dtanh, "softcap grad"))
        mem.store("dS", dS, line="softcap")
        mem.free("Q", "K", "dS")

    # Alg.3 l.4: load dS and K by blocks from HBM, compute dQ = dS K, write dQ to HBM.
    dS = mem.load("dS", line="Alg.3 l.4")  # read Nq*Nk
    K_ = mem.load("K", line="Alg.3 l.4")  # read Nk*d
    dQ = mem.hold("dQ", fc.ew(fc.matmul(dS, K_) * pb.scale, "scale"))  # (..., Nq, d); τ in the epilogue
    mem.store("dQ", dQ, line="Alg.3 l.4")  # write Nq*d
    mem.free("dS", "K", "dQ")

    # Alg.3 l.5: load dS and Q by blocks from HBM, compute dK = dSᵀ Q, write dK to HBM.
    dS = mem.load("dS", line="Alg.3 l.5")  # read Nq*Nk
    Q_ = mem.load("Q", line="Alg.3 l.5")  # read Nq*d
    dK = mem.hold("dK", fc.ew(fc.matmul(_T(dS), Q_) * pb.scale, "scale"))  # (..., Nk, d)
    mem.store("dK", dK, line="Alg.3 l.5")  # write Nk*d

    # Alg.3 l.6: return dQ, dK, dV.
    dK, dV = variants.kv_gradients(pb0, mem.result("dK"), mem.result("dV"))  # [gqa] no query heads: zeros
    extra = {} if dBias is None else {"dBias": dBias}
    return BackwardResult(dQ=variants.unpack_rows(mem.result("dQ"), G), dK=dK, dV=dV,
                          io=mem.report(), flops=fc.report(), events=mem.events, **extra)
