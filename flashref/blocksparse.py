"""Block-sparse FlashAttention: Algorithm 5 of the FlashAttention paper, its backward, and sparsity patterns.

Block-sparse attention fixes, before looking at the data, which *blocks* of the score matrix may
be nonzero: a block mask ``M ∈ {0,1}^{Tr × Tc}`` on the grid of (Br × Bc) tiles. Its element mask
is ``M̃_kl = M_ij`` with ``i = ⌊k/Br⌋, j = ⌊l/Bc⌋`` (§3.3), and the output is ordinary attention
with that mask: ``P = softmax(S ⊙ 1_M̃)``, masked scores set to -inf.

Algorithm 5 is Algorithm 2 with one added line, ``if M_ij ≠ 0`` (l.8), around the inner body: a
zero block is never loaded and never computed. So the IO is the dense IO restricted to the
nonzero blocks; Proposition 4: Θ(Nd + N²d²M⁻¹s), where ``s`` is the fraction of nonzero blocks.
Its loop is written out below, line by line; the body of the inner loop (l.9-16) is the same
tile step as Algorithm 1's (:func:`flashref.flash1.tile_step`), and the backward runs
Algorithm 4's tile step (:func:`flashref.flash1_bwd.tile_step`) behind the same ``if``. With an
all-ones block mask both equal FlashAttention's passes exactly, IO included (tested).

Note what Algorithm 5 still does for an empty block *column*: l.6 loads K_j, V_j before the inner
loop looks at the mask, so a column with no nonzero block costs 2·Bc·d reads for nothing.

One grid for both passes. The block mask is defined on the blocks, so the forward and the
backward must use the same (Br, Bc). Algorithm 4 holds more on chip than Algorithm 2, so
:func:`grid` resolves the blocks once with the larger of the two footprints (the paper's rule
``Bc = ⌈M/4d⌉, Br = min(Bc, d)``, shrunk until both loops really fit in M; see
:mod:`flashref.blocks`). Pass ``block_sizes=(Br, Bc)`` to pin them; build masks of shape
``(Tr, Tc)`` with :func:`grid`'s numbers.

The attention variants (``enable_gqa``, ``window``, ``alibi_slopes``, ``softcap``, ``bias``) are
FlashAttention's (:mod:`flashref.flash1`): the same tile steps make them, on the nonzero blocks only.
A window is MASK within the blocks the block mask keeps (:func:`local_blocks` is the block mask that
skips the blocks outside it); a bias tile is read for each nonzero block; with ``bias_grad`` the
backward writes zeros for dBias's zero blocks, so that every tile of it is written once.

Patterns (in :mod:`flashref.patterns`, re-exported here; each returns a boolean ``(Tr, Tc)`` array):

* :func:`causal_blocks`: the blocks a causal mask touches (j·Bc ≤ last row of block i);
* :func:`local_blocks`: the blocks a sliding window ``|k − l| ≤ window`` touches;
* :func:`butterfly_blocks`: the flat butterfly of Pixelated Butterfly (Chen et al. 2021), which the
  FlashAttention paper uses for its block-sparse experiments: block (i, j) is nonzero when i and j
  differ in at most one bit, i.e. the union of the butterfly factors' supports; density about
  (1 + log₂T)/T, the ``N⁻¹ log N`` case of Proposition 4;
* :func:`random_blocks`: exactly ``round(density·Tr·Tc)`` nonzero blocks, seeded.

Example::

    g = blocksparse.grid(Nq=256, Nk=256, d=16, block_sizes=(16, 16))
    M = blocksparse.butterfly_blocks(g.Tr, g.Tc)
    fwd = blocksparse.forward(Q, K, V, M, block_sizes=(16, 16))
    bwd = blocksparse.backward(Q, K, V, fwd.O, dO, fwd.l, fwd.m, M, block_sizes=(16, 16))
"""

from __future__ import annotations

import numpy as np

from . import blocks, flash1, flash1_bwd, variants
from .blocks import Grid
from .patterns import (
    butterfly_blocks,
    causal_blocks,
    check_block_mask,
    density,
    element_mask,
    local_blocks,
    random_blocks,
)
from .problem import Problem, overflow_checked
from .results import BackwardResult, ForwardResult

__all__ = ["OPTIONS", "forward", "backward", "grid", "Grid", "footprint", "check_block_mask", "element_mask", "density",
           "causal_blocks", "local_blocks", "butterfly_blocks", "random_blocks", "grid_of"]

#: Alg.5's numbers for the tile step's lines (the same lines as Alg.1 l.8-13).
LINES_ALG5 = {"load": "Alg.5 l.9", "scores": "Alg.5 l.10", "write O": "Alg.5 l.15", "write l, m": "Alg.5 l.16"}

#: Options beyond the shared ones: FlashAttention's (the variants); ``block_mask`` is an argument.
OPTIONS = flash1.OPTIONS


def footprint(Br: int, Bc: int, d: int, dropout: bool = False, bias: bool = False, softcap: bool = False,
              slopes: int = 0) -> int:
    """On-chip elements per head that both passes need: the larger of Algorithm 2's and Algorithm 4's."""
    return max(flash1.footprint(Br, Bc, d, bias=bias, slopes=slopes),
               flash1_bwd.footprint(Br, Bc, d, dropout=dropout, softcap=softcap, slopes=slopes))


def grid_of(pb: Problem) -> Grid:
    """The one grid of both passes for problem ``pb`` (resolved with the larger footprint)."""
    flags = dict(dropout=pb.dropout_p > 0, bias=pb.bias is not None, softcap=pb.softcap is not None,
                 slopes=1 if pb.alibi_slopes is not None else 0)
    return blocks.grid_for(pb, lambda Br, Bc, d: footprint(Br, Bc, d, **flags))


def grid(Nq: int, Nk: int, d: int, **opts) -> Grid:
    """The block grid that :func:`forward` and :func:`backward` use for these shapes and options (the variants'
    too: a bias, a softcap or ALiBi take room on chip, so at a given ``sram_size`` they can shrink the blocks)."""
    return grid_of(Problem.from_shapes("blocksparse.grid", OPTIONS, Nq=Nq, Nk=Nk, d=d, **opts))


def _pinned(pb: Problem, block_mask):
    """``pb`` with its blocks pinned, the grid, and the checked block mask."""
    g = grid_of(pb)
    # Pin the resolved blocks so that both passes run on this very grid.
    return pb.with_blocks(g.Br, g.Bc), g, check_block_mask(block_mask, g)


@overflow_checked("O")
def forward(Q, K, V, block_mask, **opts) -> ForwardResult:
    """Algorithm 5: ``O = dropout(softmax(MASK(τ QKᵀ) ⊙ 1_M̃)) V`` with the block mask ``M`` (Tr × Tc, bool).

    Options as every algorithm (``scale``, ``causal``, ``mask``, ``dropout_p``, ``seed``,
    ``sram_size``, ``block_sizes``, ``dtype_bytes``) and flash1's variants; ``causal``, ``window`` and ``mask``
    combine with the block mask (an entry is attended only if all allow it). Returns ``.O``, ``.l``, ``.m`` (for the
    backward; a row with no nonzero block has ℓ = 0, m = -inf and O = 0), ``.io``, ``.flops``,
    ``.events``, ``.block_sizes``, ``.block_mask`` and ``.density`` (the fraction s of nonzero blocks).
    """
    pb0, g, M = _pinned(Problem.from_arrays(Q, K, V, "blocksparse.forward", OPTIONS, **opts), block_mask)
    # [gqa] each query head loads the tiles of its K/V head h // g, as in flash1.
    pb = variants.loop_problem(pb0, packed=False)
    # Alg.5 l.1: the generator state R is pb.seed. l.2: O = 0, ℓ = 0, m = -inf in HBM (counted).
    # Alg.5 l.3-4: divide Q, O, ℓ, m into Tr blocks and K, V into Tc blocks (the grid g).
    mem, fc = flash1.init_outputs(pb, "Alg.5 l.2")
    for j in range(g.Tc):  # Alg.5 l.5
        cols = g.cols(j)
        # Alg.5 l.6: load K_j, V_j from HBM to on-chip SRAM (even if column j has no nonzero block).
        K_j = mem.load("K", rows=cols, as_="K_j", line="Alg.5 l.6")  # (Bc, d)
        V_j = mem.load("V", rows=cols, as_="V_j", line="Alg.5 l.6")  # (Bc, d)
        slopes_j = variants.load_slopes(mem, pb, "Alg.5 l.6")  # [alibi] with them, as flash1
        for i in range(g.Tr):  # Alg.5 l.7
            if M[i, j]:  # Alg.5 l.8: if M_ij ≠ 0 (a zero block is neither loaded nor computed)
                flash1.tile_step(mem, fc, pb, K_j, V_j, g.rows(i), cols, lines=LINES_ALG5,
                                 slopes_j=slopes_j)  # Alg.5 l.9-16
        mem.free("K_j", "V_j", "slopes_j")
    # Alg.5 l.17-20: end if, end for, end for; return O, ℓ, m.
    return ForwardResult(O=mem.result("O"), l=mem.result("l"), m=mem.result("m"), io=mem.report(),
                         flops=fc.report(), events=mem.events, block_sizes=(g.Br, g.Bc), block_mask=M,
                         density=density(M))


@overflow_checked("dQ", "dK", "dV", note=flash1_bwd.OVERFLOW_NOTE)
def backward(Q, K, V, O, dO, l, m, block_mask, **opts) -> BackwardResult:
    """Algorithm 4 with Algorithm 5's skip: a zero block of ``M`` is neither loaded nor computed.

    ``O``, ``l``, ``m`` are :func:`forward`'s; ``block_mask`` and the options must be the forward's
    (``bias_grad=True`` adds ``.dBias``, as :func:`flashref.flash1.backward`'s). Gradients equal those of
    standard attention with the element mask :func:`element_mask` implies.
    """
    bias_grad = opts.pop("bias_grad", False)
    # extra names bias_grad too (taken above): an unknown option's error lists every one backward takes
    pb = Problem.from_arrays(Q, K, V, "blocksparse.backward", OPTIONS + ("bias_grad",), **opts)
    bias_grad = variants.check_bias_grad(bias_grad, pb.bias)  # before the grid, as flash1's and iomodel.grid
    pb0, g, M = _pinned(pb, block_mask)
    O, dO, l, m = flash1_bwd.check_stats(pb0, O, dO, l, m)
    pb = variants.loop_problem(pb0, packed=False)  # [gqa] as flash1's backward
    # Alg.4 l.5: dQ = dK = dV = 0 in HBM (counted).
    mem, fc = flash1_bwd.init_gradients(pb0, pb, O, dO, l, m, "Alg.4 l.5", bias_grad)
    for j in range(g.Tc):  # Alg.4 l.6
        cols = g.cols(j)
        # Alg.4 l.7: load K_j, V_j ([alibi] and the slope); l.8: d̃K_j = d̃V_j = 0 on chip.
        K_j = mem.load("K", rows=cols, as_="K_j", line="Alg.4 l.7")  # (Bc, d)
        V_j = mem.load("V", rows=cols, as_="V_j", line="Alg.4 l.7")  # (Bc, d)
        slopes_j = variants.load_slopes(mem, pb, "Alg.4 l.7")
        dK_tilde_j = mem.hold("dK_tilde_j", np.zeros_like(K_j))  # (Bc, d)
        dV_tilde_j = mem.hold("dV_tilde_j", np.zeros_like(V_j))  # (Bc, d)
        for i in range(g.Tr):  # Alg.4 l.9
            rows = g.rows(i)
            if M[i, j]:  # Alg.5's "if M_ij ≠ 0", applied to the backward
                flash1_bwd.tile_step(mem, fc, pb, K_j, V_j, dK_tilde_j, dV_tilde_j, rows, cols, slopes_j, bias_grad)
            elif bias_grad:  # [bias] no gradient reaches a zero block's bias: its tile of dBias is zeros, written
                mem.store("dBias", np.zeros(pb.lead_shape + (rows[1] - rows[0], cols[1] - cols[0]), dtype=pb.dtype),
                          rows=rows, cols=cols, line="dBias")
        # Alg.4 l.24: write dK_j, dV_j to HBM.
        flash1_bwd.write_kv_gradients(mem, pb0, dK_tilde_j, dV_tilde_j, cols)
        mem.free("K_j", "V_j", "dK_tilde_j", "dV_tilde_j", "slopes_j")
    return flash1_bwd.gradients(mem, fc, pb0, g, bias_grad, block_mask=M, density=density(M))
