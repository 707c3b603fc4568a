"""A PyTorch front for the reference algorithms: a drop-in ``scaled_dot_product_attention`` with autograd.

It accepts what :func:`torch.nn.functional.scaled_dot_product_attention` accepts, and agrees with it:
float16, bfloat16, float32 or float64 (float8 is refused by name; ``flashref.lowp`` has FlashAttention-3's FP8
numerics); query ``(..., L, E)``, key ``(..., S, E)``, value ``(..., S, Ev)`` with ``Ev`` free; leading axes
that broadcast against each other; a boolean ``attn_mask`` (True = take part in attention) or a
float one (added to the scores); ``is_causal`` (top-left aligned); ``scale`` (default 1/√E);
``dropout_p`` (always applied, as PyTorch does); ``enable_gqa`` (K, V with fewer heads on axis -3);
empty inputs (zeros with query's own leading axes, unbroadcast, as PyTorch gives them). A fully masked
row gives zeros, as PyTorch ≥ 2.5 does. The forward and the backward run the numpy reference
algorithms on the CPU, so a model can train on FlashAttention's Algorithms 2 and 4 (or standard
attention, or FlashAttention-2) and be checked against PyTorch's own kernels. It is slow; it is for
teaching and testing.

How each PyTorch feature reaches the numpy algorithms (the first three in torch, before the
autograd function, so that autograd sums their gradients exactly as for PyTorch's own ops):

* ``enable_gqa``: passed to the algorithm natively (every one has it), so the counted IO is its GQA
  schedule (``gqa_packing=`` picks flash2's); where K and V have different numbers of heads (PyTorch takes
  that), each is repeated to Q's ``Hq`` (``repeat_interleave``) instead;
* broadcast leading axes: ``torch.broadcast_tensors`` over the leading axes;
* ``Ev != E``: the narrower side is zero-padded to the wider head dim (zero columns of Q and K add
  nothing to QKᵀ; zero columns of V give zero output columns, sliced off), with the scale of the
  original E; the counted IO is that of the padded problem, and where it outgrows ``sram_size`` the
  ``SRAMOverflowError`` says that its head dim is value's ``Ev``, not one the caller passed for Q and K;
* a boolean mask is the algorithms' ``mask``; a float mask is their ``bias`` (which they read from HBM
  tile by tile). Either is an input of the autograd function
  (the front's copy), read into numpy in its forward, so that torch.func sees it (below). A float mask
  whose padded query rows are ``finfo.min`` throughout (as Hugging Face builds them), or any huge finite number
  (past 16384 in float32), leaves flash2's one statistic a row, ``L = m + log ℓ``, unable to carry ``log ℓ``
  to ``flash2.L_SPACING``; there the backward recomputes P with ``standard``'s forward and runs ``standard``'s
  backward, and agrees with PyTorch (which reads such a row as uniform weights);
* the dropout seed is an input too, a 0-d int64 tensor, so that ``vmap`` may batch it (below).

torch.func. The autograd function is written as PyTorch documents for functions that run numpy
("Extending torch.func with autograd.Function"): a ``forward`` without ``ctx`` and a ``setup_context``,
so that the transforms hand ``forward`` plain tensors, which numpy can read; a ``vmap`` staticmethod;
and a backward that is an autograd function of its own, for the same reason. So:

* ``torch.func.grad``, ``vjp`` and ``jacrev`` give the gradients ``backward()`` gives, a float
  ``attn_mask`` among the arguments differentiated included (a learned bias);
* ``torch.func.vmap`` over query, key, value and ``attn_mask`` (any ``in_dims``; composed with ``grad`` in
  either order) runs the algorithm once, with vmap's axis as one more leading axis (expanded where an input
  is not batched). A batched mask gets 1s behind that axis up to the problem's rank, so that it broadcasts
  from the right as each element's did; an unbatched float mask that requires grad gets the sum of the
  elements' gradients (``grad`` of ``vmap``) or each element's own (``vmap`` of ``grad``);
* with dropout, ``vmap`` calls the function once per element instead: the keyed mask depends on (seed,
  head, row, column), the head being the flat index over the leading axes, which a leading batch axis would
  renumber. With ``seed=`` every element gets the mask a call on it alone gets, the same for all (the
  function is a pure function of its inputs and the seed). With ``seed=None`` the seed is drawn by
  ``torch.randint`` and follows vmap's ``randomness``: ``"error"`` (vmap's default) refuses, ``"same"`` draws
  one seed for all the elements, ``"different"`` one for each;
* a second order (grad of grad, jacrev of jacrev) raises a ``RuntimeError`` when it is asked for, and so does
  forward mode (``jvp``, ``jacfwd``, ``hessian``): the algorithms are numpy, with a backward only;
* torch's older batching of gradients (``torch.autograd.grad(..., is_grads_batched=True)``,
  ``torch.autograd.functional.jacobian(..., vectorize=True)``) skips the ``vmap`` staticmethod and hands the numpy
  backward a batched tensor: it raises a ``RuntimeError`` naming torch.func's ``vmap`` over ``vjp`` or ``grad``
  (or ``jacrev``), which batch it;
* the checks that read values (NaN, inf) run in the autograd functions, on plain tensors. In the zero shortcut
  (``dropout_p=1``, no queries or no keys), which does not call them, the front checks them itself (and the
  gradient flowing back into its zeros, ``grad_output``), except under a transform (vmap's values cannot be
  branched on in Python; the zeros do not depend on them);
* ``scale``, ``dropout_p``, ``softcap`` and ``alibi_slopes`` are read as numbers in the front: vmap cannot batch
  them (batched slopes are refused by name; a batched 0-d ``scale`` gets vmap's ``.item()`` error).

flashref's attention variants are keyword options beyond PyTorch's signature, passed to the
algorithm as they are (every algorithm takes them): ``window=(left, right)`` (a sliding window,
-1 unbounded), ``alibi_slopes`` (one per head, a tensor or array broadcastable to the head axes),
``softcap`` (a float > 0) and ``gqa_packing`` (``flash2``'s).

Under ``torch.compile`` the front runs outside the compiled graph (``torch.compiler.disable``: a graph break), as
it is: Dynamo would otherwise trace the numpy algorithms line by line.

Inside a ``torch.autocast`` region it casts as PyTorch's SDPA does (query, key, value and a float mask to the
region's dtype, all but float64 ones) and returns that dtype.

Differences from PyTorch, all deliberate:

* nested tensors (which PyTorch's SDPA takes) are refused by name: the algorithms take dense arrays
  (``flash2.forward_varlen`` takes packed sequences);
* ``attn_mask`` and ``is_causal`` may be given together: both apply, as PyTorch 2.13's fused CPU kernel applies
  them (its math path, which it takes with dropout or a mask that requires grad, refuses the pair);
* dropout draws a fresh mask on every call from torch's default generator (so
  ``torch.manual_seed`` makes runs reproducible), but the random numbers are flashref's keyed hash
  of (seed, head, row, column), not Philox: pass ``seed=`` to ask for the reference's keyed mask;
  the backward regenerates the same mask from the seed (Alg.4 l.1), never storing it;
* ``alibi_slopes``, and a 0-d tensor ``scale`` or ``dropout_p`` (PyTorch takes no tensor there), that
  require grad are refused: their gradients are not computed. A float ``attn_mask`` that requires grad
  gets its gradient (a learned bias, T5's relative positions): the backward's ``bias_grad=True``, each
  tile's dS before the scale, summed over the axes the mask was broadcast along;
* double backward (``create_graph=True``) raises a ``RuntimeError``: the backward is numpy; under torch.func
  (whose ``grad`` always builds a graph of the gradient) a second order raises when it is asked for, and forward
  mode (``jvp``, ``jacfwd``) raises. Where nothing is attended (no keys, ``dropout_p=1``, an empty batch) the
  output is the constant 0, built from torch's own ops: its gradients are zeros, and theirs too;
* NaN or inf in ``query``, ``key`` or ``value`` raises a ``ValueError`` naming it, wherever it is (PyTorch returns NaN
  where it is attended, and finite values where ``is_causal`` or a mask hides it: the check reads the inputs, not what
  the mask leaves of them), and so does NaN or inf in the gradient flowing back into the output (``grad_output``), in
  the backward (PyTorch propagates it into the gradients). So ``torch.amp.GradScaler`` (``torch.cuda.amp.GradScaler``)
  does not work through this function: its overflow skip needs the inf gradient to reach the parameters, and here the
  first overflowed step raises instead of being skipped. Train it without loss scaling (float32 or float64). Scores
  that overflow the compute dtype raise a ``FloatingPointError`` (PyTorch returns NaN), and so does a step whose
  result would fit but whose running sum does not: the unnormalised output (up to Nk·max|value|) or a gradient's sum
  past float32's 3.4e38, with fp16, bf16 or fp32 inputs (PyTorch's softmax, normalised first, returns it). Pass
  float64 tensors for values that large;
* ``scale`` must be a finite real number or ``None``: ``scale=nan`` and ``scale=inf`` (PyTorch returns zeros or
  NaN) and a bool (``scale=True``, which PyTorch takes as 1.0) are refused, naming ``scale``;
* ``dropout_p`` must be a probability in [0, 1]: ``dropout_p=nan`` (which PyTorch's math path takes, applying no
  dropout, and its fused CPU kernel refuses) and a bool are refused, naming ``dropout_p``;
* an ``attn_mask`` of fewer than 2 dims (``(S,)`` or 0-d) broadcasts, whatever the inputs' dims, as PyTorch's math
  path broadcasts it (PyTorch 2.13's fused CPU kernel, which it takes for 4-D inputs without dropout or a mask that
  requires grad, raises an ``IndexError`` there instead);
* a float ``attn_mask`` must be finite or ``-inf`` (a masked position): NaN or ``+inf`` is refused, naming
  ``attn_mask`` (PyTorch returns NaN rows), as for ``query``, ``key`` and ``value`` above;
* with ``enable_gqa=True``, ``key`` or ``value`` with no heads at all is refused, naming it: 0 divides no head count
  (PyTorch returns zeros);
* with no queries (``L = 0``) or an empty ``value``, PyTorch returns zeros of query's leading axes without checking
  the other arguments; flashref returns the same zeros but checks them first: leading axes that do not broadcast, a
  GQA head count that does not divide, a mismatched head dim or length, a mask of the wrong shape or dtype and an
  option out of range are refused as they are with data.

Example::

    from flashref.functional import scaled_dot_product_attention
    out = scaled_dot_product_attention(q, k, v, is_causal=True, algorithm="flash1")
    out.sum().backward()      # runs Algorithm 4
"""

from __future__ import annotations

import math
import numbers

import numpy as np
import torch

from . import flash1, flash2, standard
from .memory import SRAMOverflowError
from .problem import Problem, _bool, _scale, _seed, check_options

__all__ = ["scaled_dot_product_attention", "ALGORITHMS"]


class _Spec:
    """How to call one algorithm module: which saved statistics its forward returns and its
    backward takes (the tensors of the algorithm's *Require* line, in order)."""

    def __init__(self, module, stats: tuple[str, ...], backward_takes_O: bool):
        self.module, self.stats, self.backward_takes_O = module, stats, backward_takes_O


# Dispatch by name. backward signatures (the public contract, README): standard.backward(Q, K, V, dO, P),
# flash1.backward(Q, K, V, O, dO, l, m), flash2.backward(Q, K, V, O, dO, L).
ALGORITHMS = {
    "standard": _Spec(standard, ("P",), backward_takes_O=False),
    "flash1": _Spec(flash1, ("l", "m"), backward_takes_O=True),
    "flash2": _Spec(flash2, ("L",), backward_takes_O=True),
}

#: flashref's keyword-only options beyond PyTorch's signature.
OPTIONS = {"algorithm": "flash2", "sram_size": None, "block_sizes": None, "seed": None,
           "window": None, "alibi_slopes": None, "softcap": None, "gqa_packing": None}

#: The parameters named in the signature (PyTorch's), beside the keyword-only options above.
_NAMED = ("attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa")

#: The variant options, passed to the algorithm only when given.
_VARIANTS = ("window", "alibi_slopes", "softcap", "gqa_packing")


def _spec(algorithm: str) -> _Spec:
    if not isinstance(algorithm, str) or algorithm not in ALGORITHMS:
        raise ValueError(f"algorithm: expected one of {sorted(ALGORITHMS)}, got {algorithm!r}")
    return ALGORITHMS[algorithm]


def _to_numpy(t: torch.Tensor) -> np.ndarray:
    # float64 stays float64; every other float type (fp16, bf16, fp32) is computed in float32,
    # as the algorithms do (bf16 has no numpy dtype).
    # resolve_neg: a view with torch's lazy negation bit (x.conj().imag of a complex x) holds its values negated,
    # and .numpy() refuses it; resolving gives the values it stands for, as every torch op reads them
    t = t.detach().to("cpu").resolve_neg()
    return (t if t.dtype == torch.float64 else t.to(torch.float32)).numpy()


def _to_torch(a: np.ndarray, like: torch.Tensor) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(a)).to(dtype=like.dtype, device=like.device)


def _mask_arrays(attn_mask) -> dict:
    """The mask as the algorithms take it: a bool one is their ``mask``, a float one their ``bias`` (float64 stays
    float64, other floats become float32, as for the inputs). Read from the front's own copy (``_mask``)."""
    if attn_mask is None:
        return {}
    if attn_mask.dtype == torch.bool:
        return {"mask": attn_mask.detach().to("cpu").numpy()}
    return {"bias": _to_numpy(attn_mask)}


def _run(step, E: int, *arrays, **opts):
    """``step(*arrays, **opts)``: an algorithm's forward or backward. Where value's head dim Ev is wider than query's E,
    the front runs the algorithm with d = Ev (Q and K zero-padded); an SRAM overflow then names a d the caller never
    passed, so the error says where it came from (the same exception type, the algorithm's message first)."""
    try:
        return step(*arrays, **opts)
    except SRAMOverflowError as e:
        d = arrays[0].shape[-1]  # Q's head dim as the algorithm saw it
        if d <= E:  # not widened (Ev <= E pads V to E, the caller's own head dim)
            raise
        raise SRAMOverflowError(
            f"{e} [the torch front: the head dim d={d} is value's Ev; query's and key's head dim E={E} was zero-padded "
            f"to it, since the algorithms take one head dim for Q, K and V]") from e


def _under_torch_func() -> bool:
    """Whether a torch.func transform (grad, vjp, jacrev, vmap, ...) is running. torch.func has no public test for it;
    this private one is the test ``torch.autograd.Function.apply`` itself makes to choose its path."""
    return torch._C._are_functorch_transforms_active()


def _legacy_batched(t: torch.Tensor) -> bool:
    """Whether ``t`` is a batched tensor of torch's older vmap (``torch._vmap_internals``), which
    ``torch.autograd.grad(..., is_grads_batched=True)`` and ``torch.autograd.functional.jacobian(...,
    vectorize=True)`` hand a backward. It skips the Function's ``vmap`` staticmethod, and
    :func:`_under_torch_func` does not see it; numpy cannot read it. Another private test, the one torch.func offers
    (read with ``getattr``: a torch without it has no such batching to refuse)."""
    test = getattr(torch._C._functorch, "is_legacy_batchedtensor", None)
    return test is not None and test(t)


#: What the backward raises when torch's older batching hands it a batch of output gradients (:func:`_legacy_batched`).
_BATCHED_GRADS = ("a batch of gradients in one backward (torch.autograd.grad(..., is_grads_batched=True), "
                  "torch.autograd.functional.jacobian(..., vectorize=True))",
                  "the reference backward runs in numpy, which torch's older batching cannot run on a batch. Use "
                  "torch.func.vmap over torch.func.vjp or torch.func.grad (or torch.func.jacrev), which batch it, or "
                  "loop over the gradients (vectorize=False)")


def _higher_order_error(how: str, why: str) -> RuntimeError:
    return RuntimeError(f"flashref.functional.scaled_dot_product_attention: {how} is not supported; {why}")


#: What the backward raises when its own gradient is asked for (``create_graph=True``, grad of grad, jacrev of jacrev).
_DOUBLE_BACKWARD = ("double backward (a gradient of the gradient: create_graph=True, torch.func.grad of "
                    "torch.func.grad, jacrev of jacrev)", "the reference backward runs in numpy and has no "
                    "derivative of its own")
#: What the jvp staticmethods raise: forward mode needs a derivative of the forward, which the algorithms do not have.
_FORWARD_MODE = ("forward-mode AD (torch.func.jvp, jacfwd, hessian; torch.autograd.forward_ad)",
                 "the reference algorithms run in numpy and have a backward (reverse mode) only")


def _leading(t, dim, B: int):
    """``t`` with vmap's batch axis first: moved there, or, where vmap did not batch ``t``, made by expanding (a view,
    no copy), so that the three inputs share it as one more leading axis."""
    return t.movedim(dim, 0) if dim is not None else t.expand(B, *t.shape)


def _mask_leading(attn_mask, dim, rank: int):
    """The mask with vmap's batch axis first and 1s after it up to the problem's ``rank``. The algorithms broadcast the
    mask against (..., L, S) from the right: a (B, L, S) mask would meet the problem's heads with its batch axis,
    while (B, 1, L, S) meets (B, H, L, S) as each element's (L, S) met (H, L, S). An unbatched mask broadcasts from
    the right as it did per element: it stays as it is."""
    if attn_mask is None or dim is None:
        return attn_mask
    m = attn_mask.movedim(dim, 0)
    return m.reshape(m.shape[:1] + (1,) * (rank - (m.dim() - 1)) + m.shape[1:])


def _element(t, dim, b: int):
    """Batch element ``b`` of ``t``: all of ``t`` where vmap did not batch it."""
    return t if t is None or dim is None else t.select(dim, b)


def _per_element(info, opts) -> bool:
    """Whether the vmap rules call the function once per batch element rather than once on a batch axis: with dropout.
    The keyed dropout mask depends on (seed, head, row, column), the head being the flat index over the leading axes:
    a leading batch axis would renumber the heads of every element but the first, so element b would not get the
    mask a call on it alone gets. (Where vmap batches nothing the rules are not called; with batch size 0 there is no
    element to loop over, and no mask to get wrong.)"""
    return info.batch_size > 0 and opts["dropout_p"] > 0


def _stack(outs: list) -> tuple:
    """The per-element outputs (tuples of tensors) stacked along a new batch axis 0, with vmap's out_dims."""
    stacked = tuple(torch.stack(o) for o in zip(*outs))
    return stacked, (0,) * len(stacked)


class _Attention(torch.autograd.Function):
    """Forward: ``module.forward``; backward: ``module.backward`` (in :class:`_AttentionGradients`) with the statistics
    the forward saved.

    Written as PyTorch documents for functions that run numpy under torch.func ("Extending torch.func with
    autograd.Function"): ``forward`` takes no ``ctx`` and ``setup_context`` saves what the backward needs, so that a
    transform hands ``forward`` plain tensors, which numpy can read; ``vmap`` says how to run on a batch. Its
    inputs are the three tensors, ``attn_mask`` (the front's copy, bool or float, or None) and ``seed`` (a 0-d int64
    tensor, so that vmap may batch it), then the algorithm's name, its options (``opts``, without mask and seed) and
    query's head dim ``E`` before padding (for :func:`_run`'s error). It returns the output, O in the compute dtype and
    the algorithm's statistics: ``setup_context`` sees only inputs and outputs, so what the backward reads must be
    one of them.
    """

    @staticmethod
    def forward(query, key, value, attn_mask, seed, algorithm, opts, E):
        # Under any torch.func transform the tensors reach here plain (with vmap's batch axis in front where the vmap
        # staticmethod put it): the place where their values can be read, so the checks that read values are here
        _check_values(query, key, value, attn_mask)
        spec = _spec(algorithm)
        Q, K, V = _to_numpy(query), _to_numpy(key), _to_numpy(value)
        fwd = _run(spec.module.forward, E, Q, K, V, **opts, **_mask_arrays(attn_mask), seed=int(seed))
        # the output is its own copy of O: the caller may change it in place (as PyTorch's allows) without changing
        # the O that the backward reads (the second output, kept in full precision)
        out = _to_torch(fwd.O, query).clone()
        stats = tuple(torch.from_numpy(np.asarray(getattr(fwd, s))) for s in spec.stats)
        return (out, torch.from_numpy(fwd.O), *stats)

    @staticmethod
    def setup_context(ctx, inputs, output):
        query, key, value, attn_mask, seed, algorithm, opts, E = inputs
        out, O, *stats = output
        ctx.mark_non_differentiable(O, *stats)  # saved for the backward, not results: no gradient flows into them
        ctx.algorithm, ctx.opts, ctx.E = algorithm, opts, E
        # Recorded under a torch.func transform (grad, vjp, jacrev: the vjp's function may be called after the
        # transform has returned), the backward will run with grad mode on whether or not a second order is wanted
        ctx.under_torch_func = _under_torch_func()
        # the mask's shape (its gradient is summed to it), as the caller sees it: per element under vmap
        ctx.mask_shape = None if attn_mask is None else tuple(attn_mask.shape)
        # Everything the backward reads goes through save_for_backward, not onto ctx: the numpy arrays share memory
        # with the inputs (fp32, fp64), so autograd's version counters must see an in-place change to any of them (it
        # raises, as for PyTorch's own kernels, where a changed array would give wrong gradients), and it frees them
        # after the backward (a second backward raises). The mask is the front's own copy (_mask), and the options in
        # opts, slopes included, are the front's own copies (_variant_options): a caller may refill its buffers.
        ctx.save_for_backward(query, key, value, attn_mask, seed, O, *stats)

    @staticmethod
    def backward(ctx, grad_out, *unused):  # unused: the zero gradients of O and the statistics
        if torch.is_grad_enabled() and not ctx.under_torch_func:
            # create_graph=True runs the backward with grad mode on: a gradient of this gradient is asked for, and
            # the numpy backward has no graph to give one. (torch.func's grad and vjp always run the backward with
            # grad mode on, so that grad of grad can be asked for: there a second order raises only when it is
            # asked for, in _AttentionGradients.backward.)
            raise _higher_order_error("double backward (create_graph=True)", _DOUBLE_BACKWARD[1])
        if _legacy_batched(grad_out):
            raise _higher_order_error(*_BATCHED_GRADS)
        # raises if one was changed in place, or freed
        query, key, value, attn_mask, seed, O, *stats = ctx.saved_tensors
        mask_shape = ctx.mask_shape if ctx.needs_input_grad[3] else None  # a float mask's gradient: asked for?
        # The numpy backward runs in a function of its own, so that torch.func hands it plain tensors too (here they
        # may be a transform's wrappers), and so that its own backward, a second order, raises
        grads = _AttentionGradients.apply(grad_out, query, key, value, attn_mask, seed, O, tuple(stats),
                                          ctx.algorithm, ctx.opts, ctx.E, mask_shape)
        dQ, dK, dV = (g if need else None for g, need in zip(grads[:3], ctx.needs_input_grad[:3]))
        return dQ, dK, dV, (grads[3] if mask_shape is not None else None), None, None, None, None

    @staticmethod
    def jvp(ctx, *tangents):
        raise _higher_order_error(*_FORWARD_MODE)

    @staticmethod
    def vmap(info, in_dims, query, key, value, attn_mask, seed, algorithm, opts, E):
        dims = in_dims[:5]  # those of query, key, value, attn_mask and seed; the others are not tensors
        if _per_element(info, opts):
            tensors = (query, key, value, attn_mask, seed)
            return _stack([_Attention.apply(*(_element(t, d, b) for t, d in zip(tensors, dims)), algorithm, opts, E)
                           for b in range(info.batch_size)])
        # One call on a batch: vmap's axis in front of query, key and value (expanded where vmap did not batch one;
        # the front broadcast the three to the same leading axes, so they keep them), the mask aligned to broadcast
        B, rank = info.batch_size, query.dim() - (dims[0] is not None)  # rank: one element's
        outputs = _Attention.apply(_leading(query, dims[0], B), _leading(key, dims[1], B), _leading(value, dims[2], B),
                                   _mask_leading(attn_mask, dims[3], rank), seed, algorithm, opts, E)
        return outputs, (0,) * len(outputs)


class _AttentionGradients(torch.autograd.Function):
    """The numpy backward as a function of its own: ``_Attention.backward`` calls it. Under torch.func it receives
    plain tensors (in ``_Attention.backward`` they may be a transform's wrappers, which numpy cannot read), vmap can
    batch it (``jacrev`` vmaps the backward over the rows of the Jacobian; ``vmap(grad(f))`` vmaps it too), and its
    own backward, asked for only by a second order, raises. Inputs: the gradient of the output, the tensors
    ``_Attention`` saved (``stats`` a tuple), its non-tensor inputs, and ``mask_shape``: None, or the shape to sum the
    float mask's gradient to. Returns (dQ, dK, dV) and, with ``mask_shape``, the mask's gradient."""

    @staticmethod
    def forward(grad_out, query, key, value, attn_mask, seed, O, stats, algorithm, opts, E, mask_shape):
        _check_grad_output(grad_out)
        spec = _spec(algorithm)
        Q, K, V = _to_numpy(query), _to_numpy(key), _to_numpy(value)
        O = O.detach().numpy()
        dO = _to_numpy(grad_out).astype(O.dtype)
        stats = tuple(t.detach().numpy() for t in stats)
        bias_grad = mask_shape is not None
        mask = _mask_arrays(attn_mask)
        if spec.module is flash2 and not flash2.L_holds_log_l(stats[0]):
            # flash2 keeps one statistic a row, L = m + log ℓ, and where a row's every score is huge (a float mask
            # whose padded query rows are finfo.min throughout, as Hugging Face writes them) L cannot carry log ℓ:
            # flash2.backward refuses it. PyTorch takes such a mask, so the front recomputes P with standard's forward
            # and runs standard's backward, the same gradients by the same rule (its tiling options left out: they
            # change the order of sums, not what is summed)
            spec = ALGORITHMS["standard"]
            opts = {k: v for k, v in opts.items() if k not in ("sram_size", "block_sizes", "gqa_packing")}
            stats = (_run(standard.forward, E, Q, K, V, **opts, **mask, seed=int(seed)).P,)
        args = (Q, K, V) + ((O,) if spec.backward_takes_O else ()) + (dO,) + stats
        bwd = _run(spec.module.backward, E, *args, **opts, **mask, seed=int(seed),
                   **({"bias_grad": True} if bias_grad else {}))
        grads = tuple(_to_torch(g, like) for g, like in zip((bwd.dQ, bwd.dK, bwd.dV), (query, key, value)))
        if bias_grad:  # dBias has the problem's leading axes: summed over those the mask was broadcast along
            dmask = torch.from_numpy(bwd.dBias).sum_to_size(mask_shape)
            grads += (dmask.to(dtype=attn_mask.dtype, device=attn_mask.device),)
        return grads

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass  # nothing to save: the backward only raises

    @staticmethod
    def backward(ctx, *grads):
        raise _higher_order_error(*_DOUBLE_BACKWARD)

    @staticmethod
    def jvp(ctx, *tangents):
        # forward mode over the backward (torch.func.jvp of a vjp's function): a derivative of the backward too
        raise _higher_order_error(*_DOUBLE_BACKWARD)

    @staticmethod
    def vmap(info, in_dims, grad_out, query, key, value, attn_mask, seed, O, stats, algorithm, opts, E, mask_shape):
        tensors, dims = (grad_out, query, key, value, attn_mask, seed, O), in_dims[:7]
        stats_dims = in_dims[7]  # a tuple, as stats is
        if _per_element(info, opts):
            # each element's mask gradient has the mask's shape (mask_shape, one element's): stacked, (B,) + it
            return _stack([_AttentionGradients.apply(*(_element(t, d, b) for t, d in zip(tensors, dims)),
                                                     tuple(_element(s, d, b) for s, d in zip(stats, stats_dims)),
                                                     algorithm, opts, E, mask_shape)
                           for b in range(info.batch_size)])
        B, rank = info.batch_size, query.dim() - (dims[1] is not None)
        # Each element has its own gradient of the mask, batched or not (its cotangent is the element's): summed to
        # the mask's shape padded to the problem's rank behind the batch axis, as _mask_leading lays the mask out,
        # then given the shape of one element's mask behind the batch axis
        padded = None if mask_shape is None else (B,) + (1,) * (rank - len(mask_shape)) + tuple(mask_shape)
        grads = _AttentionGradients.apply(*(_leading(t, d, B) for t, d in zip(tensors[:4], dims[:4])),
                                          _mask_leading(attn_mask, dims[4], rank), seed, _leading(O, dims[6], B),
                                          tuple(_leading(s, d, B) for s, d in zip(stats, stats_dims)),
                                          algorithm, opts, E, padded)
        if mask_shape is not None:
            grads = grads[:3] + (grads[3].reshape((B,) + tuple(mask_shape)),)
        return grads, (0,) * len(grads)


#: The dtypes PyTorch's SDPA takes (float8 it refuses; flashref.lowp has FA3's FP8 numerics)
DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def _check_tensor(t, name: str) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
    if t.layout != torch.strided or t.is_nested:  # sparse or nested: the algorithms read dense tiles
        raise TypeError(f"{name}: expected a dense (strided) tensor, got "
                        + ("a nested tensor" if t.is_nested else f"layout {t.layout}"))
    if not t.is_floating_point():
        raise TypeError(f"{name}: expected a floating-point tensor, got dtype {t.dtype}")
    if t.dtype not in DTYPES:
        raise TypeError(f"{name}: expected one of {', '.join(str(x).removeprefix('torch.') for x in DTYPES)}, as "
                        f"PyTorch's SDPA takes, got {t.dtype} (FlashAttention-3's FP8 numerics are in flashref.lowp)")
    if t.dim() < 2:
        raise ValueError(f"{name}: expected shape (..., N, E) with at least 2 dims, got {tuple(t.shape)}")
    return t


def _autocast(*tensors):
    """Inside a ``torch.autocast`` region, its dtype: PyTorch's SDPA is on autocast's lower-precision list, so it
    casts every floating-point tensor argument (query, key, value, a float mask) to the region's dtype, all but
    float64 ones (autocast leaves those), and returns that dtype. Cast with ``.to``, so gradients flow back in the
    inputs' own dtypes, as autocast's do."""
    device = tensors[0].device.type
    if not (torch.amp.is_autocast_available(device) and torch.is_autocast_enabled(device)):  # (no meta autocast)
        return tensors
    dtype = torch.get_autocast_dtype(device)
    return tuple(t.to(dtype) if isinstance(t, torch.Tensor) and t.is_floating_point() and t.dtype != torch.float64
                 else t for t in tensors)


def _gqa(query, key, value, enable_gqa: bool, native: bool = False):
    """K, V heads repeated to Q's (PyTorch's convention: query head h uses K/V head h // (Hq // Hkv)),
    or, ``native``, only checked: the algorithm takes K, V with their Hkv heads. As in PyTorch, K and V may
    have different numbers of heads, each dividing Hq (then each is repeated on its own, never native)."""
    if not enable_gqa:
        return key, value
    if query.dim() < 3 or key.dim() < 3 or value.dim() < 3:
        raise ValueError("enable_gqa: expected query and key and value with a head axis at -3, "
                         f"got shapes {tuple(query.shape)}, {tuple(key.shape)} and {tuple(value.shape)}")
    Hq = query.shape[-3]
    for t, name in ((key, "key"), (value, "value")):
        if t.shape[-3] != Hq and (t.shape[-3] == 0 or Hq % t.shape[-3]):
            raise ValueError(f"enable_gqa: query heads Hq={Hq} must be a multiple of key/value heads "
                             f"Hkv={t.shape[-3]} ({name})")
    if native and key.shape[-3] == value.shape[-3]:
        return key, value
    # nothing to repeat where the heads match (no heads at all included: an empty result)
    return tuple(t if t.shape[-3] == Hq else t.repeat_interleave(Hq // t.shape[-3], dim=-3) for t in (key, value))


def _broadcast(query, key, value, keep=2):
    """Broadcast the leading axes of the three tensors against each other (their last ``keep`` axes
    stay: 2, or 3 for native GQA, whose head axes differ)."""
    try:
        lead = torch.broadcast_shapes(query.shape[:-keep], key.shape[:-keep], value.shape[:-keep])
    except RuntimeError:
        raise ValueError(f"query, key, value: leading axes {tuple(query.shape[:-2])}, {tuple(key.shape[:-2])}, "
                         f"{tuple(value.shape[:-2])} do not broadcast") from None
    return tuple(t.expand(lead + t.shape[-keep:]) for t in (query, key, value))


def _number(x, name: str):
    """A Python number, or a 0-d tensor's value (PyTorch takes both for ``dropout_p`` and ``scale``)."""
    if isinstance(x, torch.Tensor):
        if x.dim() != 0 or x.dtype == torch.bool:
            raise TypeError(f"{name}: expected a number or a 0-d float tensor, got a tensor of shape "
                            f"{tuple(x.shape)} and dtype {x.dtype}")
        if x.requires_grad:  # as for a float attn_mask: no gradient would reach it (PyTorch takes no tensor here)
            raise ValueError(f"{name}: a tensor that requires grad is not supported (its gradient is not computed); "
                             f"pass {name}.detach() or a float")
        return x.item()
    return x


def _variant_options(o: dict, spec: _Spec) -> dict:
    """The variant options given (``_VARIANTS``), refused by name where the algorithm has none of them, as the front's
    own copies: the backward reads them again, and a caller may change a list or an array in place before it runs."""
    given = {k: o[k] for k in _VARIANTS if o[k] is not None}
    for name in given:
        if name not in getattr(spec.module, "OPTIONS", ()):
            raise TypeError(f"{name}: algorithm={o['algorithm']!r} has no {name} (flash2 takes every option)")
    if isinstance(given.get("window"), list):
        given["window"] = tuple(given["window"])
    if "softcap" in given:
        given["softcap"] = _number(given["softcap"], "softcap")  # a 0-d tensor too, as scale
    slopes = given.get("alibi_slopes")
    if isinstance(slopes, torch.Tensor):
        if slopes.requires_grad:  # as for a float attn_mask: no gradient would reach them
            raise ValueError("alibi_slopes: slopes that require grad are not supported (their gradient is not "
                             "computed); pass alibi_slopes.detach()")
        if slopes.is_complex() or slopes.dtype == torch.bool:
            raise TypeError(f"alibi_slopes: expected real slopes, got dtype {slopes.dtype}")
        try:
            given["alibi_slopes"] = slopes.detach().to("cpu", torch.float64).numpy().copy()
        except RuntimeError:  # a torch.func wrapper (vmap's batch) has no storage for numpy to read
            raise ValueError("alibi_slopes: a tensor batched by torch.func.vmap is not supported (the front reads the "
                             "slopes into numpy); pass slopes shared by the batch, from outside the vmapped "
                             "function") from None
    elif slopes is not None:
        try:
            given["alibi_slopes"] = np.array(slopes, copy=True)  # numbers checked by the algorithm (variants)
        except (TypeError, ValueError):
            raise TypeError("alibi_slopes: expected a tensor or array of per-head slopes, got "
                            f"{type(slopes).__name__} that is not one (ragged?)") from None
    return given


def _check_finite(t: torch.Tensor, name: str) -> None:
    # checked here so that the error names the front's argument (the algorithms would say Q, K, V); a meta
    # tensor has a shape and no values: nothing to check
    if t.numel() and t.device.type != "meta" and not torch.isfinite(t).all():
        raise ValueError(f"{name}: contains NaN or inf")


def _check_values(query, key, value, attn_mask) -> None:
    """The checks that read values rather than shapes, naming the front's arguments (the algorithms would say Q, K, V,
    bias). Run where the values are plain tensors: in ``_Attention.forward``, and in the front's zero shortcut."""
    for t, n in ((query, "query"), (key, "key"), (value, "value")):
        _check_finite(t, n)
    if attn_mask is not None and attn_mask.is_floating_point() and attn_mask.device.type != "meta" \
            and (torch.isnan(attn_mask).any() or torch.isposinf(attn_mask).any()):
        raise ValueError("attn_mask: a float mask must be finite or -inf (a masked entry), got NaN or +inf")


def _mask(attn_mask, target: tuple, dtype: torch.dtype, device):
    """The front's copy of ``attn_mask`` (or None), its shape, dtype and device checked: an input of the autograd
    function, so that torch.func sees it (grad gives a float one its gradient, vmap may batch it); the function's
    forward reads it into numpy. A copy, not the caller's tensor: the backward reads the mask again, and a caller may
    refill its buffer before it runs. (A clone, so that a float mask's gradient still reaches the caller's.)"""
    if attn_mask is None:
        return None
    if not isinstance(attn_mask, torch.Tensor):
        raise TypeError(f"attn_mask: expected a torch.Tensor (bool or float), got {type(attn_mask).__name__}")
    if attn_mask.layout != torch.strided:  # as for query, key and value: the algorithms read dense tiles
        raise TypeError(f"attn_mask: expected a dense (strided) tensor, got layout {attn_mask.layout}")
    try:
        fits = torch.broadcast_shapes(attn_mask.shape, target) == target
    except RuntimeError:
        fits = False
    if not fits:
        raise ValueError(f"attn_mask: shape {tuple(attn_mask.shape)} does not broadcast to (..., L, S) = "
                         f"{tuple(target)}")
    if attn_mask.device != device:
        raise ValueError(f"attn_mask: on {attn_mask.device}, but query is on {device}")
    if attn_mask.dtype != torch.bool:
        if not attn_mask.is_floating_point():
            raise TypeError(f"attn_mask: expected a bool or float tensor, got dtype {attn_mask.dtype}")
        if attn_mask.dtype not in (torch.float32, dtype):  # PyTorch's rule: bool, float32 or the query's dtype
            raise TypeError(f"attn_mask: a float mask must be float32 or the query's dtype {dtype} (as PyTorch takes "
                            f"it), got {attn_mask.dtype}")
    return attn_mask.clone()


def _check_options_by_shapes(spec: _Spec, query, key, opts: dict) -> None:
    """On the zero shortcut no algorithm runs, so the checks it makes of the options' types and ranges (scale,
    seed, sram_size, block_sizes, window, softcap, alibi_slopes against query's leading axes, the GQA heads) are
    made here by ``Problem.from_shapes``, the algorithms' own checks from shapes alone: the same errors as with
    data, and nothing allocated. (Not whether the blocks fit ``sram_size``: that is the data path's block choice.)"""
    Problem.from_shapes("flashref.functional.scaled_dot_product_attention", getattr(spec.module, "OPTIONS", ()),
                        Nq=1, Nk=1, d=max(query.shape[-1], 1), heads=tuple(query.shape[:-2]),
                        kv_heads=math.prod(key.shape[:-2]), **opts)


def _check_zeros_grad(grad_out: torch.Tensor) -> None:
    """The zero shortcut's hook: ``grad_output`` checked as the backward with data checks it, where it has values to
    read (a meta tensor has none; torch's older batching hands a batch no Python branch can read: the zero
    gradients do not depend on it)."""
    if grad_out.device.type != "meta" and not _legacy_batched(grad_out):
        _check_grad_output(grad_out)


def _check_grad_output(grad_out: torch.Tensor) -> None:
    if not torch.isfinite(grad_out).all():  # named here: the numpy backward would call it dO
        raise ValueError("grad_output: the gradient flowing into scaled_dot_product_attention's output "
                         "contains NaN or inf")


def _seed_tensor(seed: int) -> torch.Tensor:
    """A dropout seed as a 0-d int64 tensor. The keyed mask takes the seed modulo 2**64 (flashref.dropout): its 64 bits,
    read as a signed int64, are the same seed to it, however large or negative the integer given."""
    seed = _seed(seed) % 2**64
    return torch.tensor(seed - 2**64 if seed >= 2**63 else seed, dtype=torch.int64)


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, *,
                                 scale=None, enable_gqa=False, **options) -> torch.Tensor:
    """``softmax(scale · query keyᵀ + mask) value`` with dropout, by a flashref reference algorithm.

    Parameters follow :func:`torch.nn.functional.scaled_dot_product_attention` (``scale`` and ``enable_gqa``
    keyword-only, as there); the keyword-only options are flashref's: ``algorithm`` (``"standard"``,
    ``"flash1"``, or ``"flash2"``, the default, the one with every option: FA3's ``gqa_packing`` too), the simulated
    on-chip size ``sram_size`` (elements per head), ``block_sizes=(Br, Bc)`` and the dropout ``seed``
    (``None``: a fresh one from torch's default generator on every call). Returns a tensor of
    query's dtype and device; gradients flow to the inputs that require them.
    """
    args = (query, key, value, attn_mask, dropout_p, is_causal)
    if torch.compiler.is_compiling():
        # Under torch.compile the front runs as it is, outside the graph (a graph break): it is numpy, which Dynamo
        # would trace line by line (and fail on, at the dropout mask's uint64 hashing). Asked for here, not by a
        # decorator: that would import Dynamo (a second) with the module, and only torch.compile needs it
        return torch.compiler.disable(_attention)(*args, scale=scale, enable_gqa=enable_gqa, **options)
    return _attention(*args, scale=scale, enable_gqa=enable_gqa, **options)


def _attention(query, key, value, attn_mask, dropout_p, is_causal, *, scale, enable_gqa, **options) -> torch.Tensor:
    """:func:`scaled_dot_product_attention`'s work."""
    # the valid ones listed include the named parameters, so that a misspelt is_causal's error shows it
    check_options(options, set(OPTIONS) | set(_NAMED), "flashref.functional.scaled_dot_product_attention")
    o = {**OPTIONS, **options}
    spec = _spec(o["algorithm"])  # a clear error before any work
    query, key, value = (_check_tensor(t, n) for t, n in ((query, "query"), (key, "key"), (value, "value")))
    query, key, value, attn_mask = _autocast(query, key, value, attn_mask)
    for t, n in ((key, "key"), (value, "value")):
        if t.dtype != query.dtype:  # PyTorch refuses mixed dtypes too
            raise TypeError(f"{n}: dtype {t.dtype} does not match query's {query.dtype}")
        if t.device != query.device:  # and mixed devices
            raise ValueError(f"{n}: on {t.device}, but query is on {query.device}")
    if key.shape[-1] != query.shape[-1]:
        raise ValueError(f"key: head dimension {key.shape[-1]} does not match query's {query.shape[-1]}")
    if value.shape[-2] != key.shape[-2]:
        raise ValueError(f"value: length {value.shape[-2]} does not match key's {key.shape[-2]}")
    is_causal = _bool(is_causal, "is_causal")  # not bool(...): "no" is truthy; PyTorch refuses a non-bool too
    enable_gqa = _bool(enable_gqa, "enable_gqa")  # the same rule (PyTorch and the algorithms refuse 1, "yes", None)
    dropout_p, scale = _number(dropout_p, "dropout_p"), _number(scale, "scale")
    # any real number, numpy's integers and floats too (as PyTorch takes them), but not a bool
    if isinstance(dropout_p, (bool, np.bool_)) or not isinstance(dropout_p, numbers.Real) \
            or not 0.0 <= dropout_p <= 1.0:
        raise ValueError(f"dropout_p: expected a probability in [0, 1], got {dropout_p!r}")
    dropout_p = float(dropout_p)
    variant_opts = _variant_options(o, spec)
    native = (enable_gqa and query.dim() >= 3 and key.dim() >= 3 and value.dim() >= 3
              and key.shape[-3] != query.shape[-3] and value.shape[-3] == key.shape[-3])
    # PyTorch's answer with no queries or an empty value: zeros with query's own leading axes, not broadcast. (Any
    # other empty input, a leading axis of 0 in query or key, or E = 0, broadcasts as with data.)
    empty_shape = query.shape[:-1] + value.shape[-1:] if query.shape[-2] == 0 or value.numel() == 0 else None
    key, value = _gqa(query, key, value, enable_gqa, native)
    # the scores' leading axes, before value's join them: a mask must broadcast to these and (L, S), as PyTorch
    # adds it to the scores in place (native GQA's key keeps its Hkv heads; the scores have query's Hq)
    leads = (query.shape[:-2], key.shape[:-3] + query.shape[-3:-2] if native else key.shape[:-2])
    query, key, value = _broadcast(query, key, value, keep=3 if native else 2)
    if native:
        variant_opts["enable_gqa"] = True
    scores = torch.broadcast_shapes(*leads) + query.shape[-2:-1] + key.shape[-2:-1]
    mask = _mask(attn_mask, scores, query.dtype, query.device)
    E, Ev, S = query.shape[-1], value.shape[-1], key.shape[-2]
    out_shape = query.shape[:-1] + (Ev,)
    if math.prod(out_shape) == 0 or S == 0 or dropout_p == 1.0 or query.device.type == "meta":
        # Nothing to attend with or to: an empty result, the zeros of fully masked rows (no keys), or every
        # weight dropped (PyTorch's dropout_p = 1); or meta tensors, shapes without values (PyTorch gives the
        # output's shape). The autograd function is not called, so its checks of the values are made here; not
        # under a torch.func transform, whose values may be vmap's batch, which Python cannot branch on (the zeros
        # do not depend on the values).
        # (dropout_p is checked above: the algorithms take p < 1, the front p = 1 too, answered here)
        _check_options_by_shapes(spec, query, key, dict(
            scale=scale, causal=is_causal, seed=0 if o["seed"] is None else o["seed"], sram_size=o["sram_size"],
            block_sizes=o["block_sizes"], dtype_bytes=query.element_size(), **variant_opts))
        if not _under_torch_func():
            _check_values(query, key, value, mask)
        # Zeros with a graph to the inputs, so zero gradients: the sums of empty slices, which
        # are 0 whatever the inputs hold (query.sum() * 0 is NaN once the sum overflows its dtype).
        # The result has the query's dtype, as PyTorch's: a float32 mask with an fp16/bf16 query (PyTorch takes it)
        # would otherwise promote the sum to float32. Its term is cast before the sum, so its zero gradient still
        # reaches it (the cast's backward returns it in float32).
        learned = (mask,) if mask is not None and mask.requires_grad else ()  # a float mask's zero gradient too
        zero = sum(t.reshape(-1)[:0].sum().to(query.dtype) for t in (query, key, value, *learned))
        out = zero.expand(out_shape if empty_shape is None else empty_shape).clone()
        if out.requires_grad and not _under_torch_func():
            out.register_hook(_check_zeros_grad)  # as the backward with data checks it (returns it unchanged)
        return out
    # E = 0 (and keys to attend to): every score is 0 whatever the scale; the padding below gives Q and K Ev
    # zero columns, so each row averages V over the keys it sees, as PyTorch does.
    scale = _scale(scale, E)
    if Ev < E:  # zero columns of V give zero columns of O, sliced off below
        value = torch.nn.functional.pad(value, (0, E - Ev))
    elif Ev > E:  # zero columns of Q and K add nothing to Q Kᵀ
        query, key = (torch.nn.functional.pad(t, (0, Ev - E)) for t in (query, key))
    # The seed goes in as a tensor, so that vmap may batch it: a fresh one from torch's default generator (on every
    # call) follows vmap's randomness ('error' refuses, 'same' draws one for all the elements, 'different' one each)
    if o["seed"] is not None:
        seed = _seed_tensor(o["seed"])
    elif dropout_p > 0:
        seed = torch.randint(0, 2**62, (), dtype=torch.int64)
    else:
        seed = _seed_tensor(0)  # no dropout: not read
    opts = dict(scale=scale, causal=is_causal, dropout_p=dropout_p, sram_size=o["sram_size"],
                block_sizes=o["block_sizes"], dtype_bytes=query.element_size(), **variant_opts)
    # the output only: the function's other outputs are what its backward reads (O, the statistics)
    out = _Attention.apply(query, key, value, mask, seed, o["algorithm"], opts, E)[0]
    # contiguous, so that a caller may .view() it, and without the padded columns' storage
    return out[..., :Ev].contiguous() if Ev < out.shape[-1] else out
