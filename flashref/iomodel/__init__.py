"""Closed-form IO counts and the papers' bounds.

``predict(algorithm, direction, Nq=, Nk=, d=, **opts)`` returns the reads and writes, in elements,
that the simulator counts for the same shapes and options, *exactly*: the tests assert equality.
Each algorithm's formulas live in their own module (``iomodel.standard``, ``iomodel.flash1``...)
and follow the algorithm's lines one by one, so a formula can be read beside the code it counts.

Options are those of the algorithm (``causal``, ``mask``, ``dropout_p``, ``sram_size``,
``block_sizes``, ``dtype_bytes``...) plus ``heads``: the number of (batch, head) pairs, i.e. the
product of the leading axes (0 is an empty batch: no traffic), or the leading axes themselves, a tuple
such as ``(B, H)`` (``predict`` and ``grid``; the varlen and paged entry points take H per sequence): then a
mask, bias or ALiBi slopes must broadcast to them exactly as the simulator requires of Q's (with the product,
to some axes of that product). They are checked by the same code
as the simulator's (:class:`flashref.problem.Problem`), so ``predict`` accepts and refuses exactly
what the algorithm does: an unknown option (``casual=True``, ``M=8192``, ``batch=64``) is a
``TypeError`` listing the valid ones. A ``mask`` (or ``bias``) may be passed as the array or as
``True``; only whether there is one matters to the IO.

Example::

    iomodel.predict("standard", "forward", Nq=1024, Nk=1024, d=64, heads=16 * 64).bytes / 1e9
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from .. import blocksparse as _blocksparse
from .. import decoding as _decoding
from .. import flash1 as _flash1
from .. import flash1_bwd as _flash1_bwd
from .. import flash2 as _flash2
from .. import lowp as _lowp
from .. import standard as _standard
from .. import variants as _variants
from .._numbers import _nonnegative_int
from ..blocks import Grid
from ..memory import Traffic, merge_by_precision
from ..patterns import check_block_mask
from ..problem import VARIANT_OPTIONS, Problem, check_options

__all__ = ["Prediction", "predict", "predict_varlen", "predict_paged", "grid", "block_sizes", "dram",
           "ALGORITHMS"]

ALGORITHMS = ("standard", "flash1", "flash2", "blocksparse", "decoding")

#: Options that are fields of the Problem (checked there), not arguments of a closed form.
_PROBLEM_FIELDS = VARIANT_OPTIONS + ("gqa_packing",)

#: Options each algorithm takes beyond the shared ones (the same lists its simulator checks).
_EXTRA = {"standard": _standard.OPTIONS, "flash1": _flash1.OPTIONS, "flash2": _flash2.OPTIONS,
          "blocksparse": _blocksparse.OPTIONS + ("block_mask",),
          "decoding": _decoding.OPTIONS}


def _extra(algorithm: str, direction: str) -> tuple:
    """The options ``algorithm``'s ``direction`` takes beyond the shared ones: the low-precision
    ones are flash2's forward's only (``flash2.backward`` refuses them as unknown), and ``bias_grad``
    every backward's (the forwards refuse it)."""
    if (algorithm, direction) == ("flash2", "forward"):
        return _EXTRA["flash2"] + tuple(_lowp.OPTIONS)
    if direction == "backward":
        return _EXTRA[algorithm] + ("bias_grad",)
    return _EXTRA[algorithm]


def _own_options(algorithm: str, direction: str, opts: dict, extra=None) -> dict:
    """Take out of ``opts`` the options that are arguments of the closed form, not fields of the Problem (of
    ``extra``, where the caller takes fewer than ``algorithm``'s ``direction`` does)."""
    extra = _extra(algorithm, direction) if extra is None else extra
    return {k: opts.pop(k) for k in extra if k in opts and k not in _PROBLEM_FIELDS}


@dataclass
class Prediction(Traffic):
    """Predicted HBM traffic in elements; ``by_line`` says where it comes from.

    ``line_bytes`` gives a line its own bytes per element (FP8 tiles, float32 scales: see
    ``iomodel.lowp``); ``bytes`` weighs each line by it, the others by ``dtype_bytes``.
    """

    reads: int
    writes: int
    dtype_bytes: int = 2
    by_line: dict[str, tuple[int, int]] = field(default_factory=dict)
    line_bytes: dict[str, int] = field(default_factory=dict)

    @property
    def bytes(self) -> int:
        if not self.line_bytes:
            return self.total * self.dtype_bytes
        return sum((r + w) * self.line_bytes.get(line, self.dtype_bytes) for line, (r, w) in self.by_line.items())

    def __add__(self, other: Prediction) -> Prediction:
        """Predictions add as reports do (a varlen batch, a forward plus its backward)."""
        if not isinstance(other, Prediction):
            return NotImplemented
        # each line keeps its own bytes per element, as IOReport's tensors do (a line per precision)
        merged = merge_by_precision((k, r, w, pred.line_bytes.get(k, pred.dtype_bytes))
                                    for pred in (self, other) for k, (r, w) in pred.by_line.items())
        lines = {k: (r, w) for k, (r, w, _) in merged.items()}
        own = {k: b for k, (_, _, b) in merged.items() if b != self.dtype_bytes}
        return Prediction(self.reads + other.reads, self.writes + other.writes, self.dtype_bytes, lines, own)

    def __radd__(self, other):
        return self if other == 0 else self.__add__(other)


class Tally:
    """Helper for the per-algorithm modules: add (reads, writes) line by line, then ``.prediction()``."""

    def __init__(self, heads: int = 1, dtype_bytes: int = 2):
        self.heads, self.dtype_bytes = heads, dtype_bytes
        self.lines: dict[str, list[int]] = {}
        self.line_bytes: dict[str, int] = {}

    def add(self, line: str, reads: int = 0, writes: int = 0, dtype_bytes: int | None = None) -> None:
        """Count ``reads``/``writes`` per head on ``line``; ``dtype_bytes`` if the line moves another precision."""
        if dtype_bytes is not None:
            self.line_bytes[line] = int(dtype_bytes)
        acc = self.lines.setdefault(line, [0, 0])
        acc[0] += reads * self.heads
        acc[1] += writes * self.heads

    def prediction(self) -> Prediction:
        by_line = {k: (r, w) for k, (r, w) in self.lines.items()}
        return Prediction(sum(r for r, _ in by_line.values()), sum(w for _, w in by_line.values()),
                          self.dtype_bytes, by_line, dict(self.line_bytes))


def predict(algorithm: str, direction: str, *, Nq: int, Nk: int, d: int, heads: int = 1, **opts) -> Prediction:
    """Exact reads and writes of ``algorithm``'s ``direction`` ("forward" or "backward")."""
    return _predict(algorithm, direction, f"iomodel.predict({algorithm!r}, {direction!r})", Nq=Nq, Nk=Nk, d=d,
                    heads=heads, **opts)


def _predict(algorithm: str, direction: str, where: str, /, *, Nq, Nk, d, heads, **opts) -> Prediction:
    """:func:`predict`, its errors naming ``where``: the entry point the user called."""
    if algorithm not in ALGORITHMS:
        raise ValueError(f"algorithm: expected one of {ALGORITHMS}, got {algorithm!r}")
    if direction not in ("forward", "backward"):
        raise ValueError(f"direction: expected 'forward' or 'backward', got {direction!r}")
    if algorithm == "decoding" and direction == "backward":
        raise ValueError("direction: decoding has no backward pass")
    # the number of (batch, head) pairs, or the leading axes (a tuple, checked by Problem.from_shapes): None is
    # from_shapes's "a grid, one head", which lets a mask of any leading axes through, so it is refused here (grid()
    # takes it)
    if not isinstance(heads, (tuple, list)):
        heads = _nonnegative_int(heads, "heads")
    extra = _own_options(algorithm, direction, opts)
    pb = Problem.from_shapes(where, _extra(algorithm, direction), Nq=Nq, Nk=Nk, d=d, heads=heads, **opts)
    module = _MODULES[algorithm]
    return getattr(module, direction)(pb, **extra)


def predict_varlen(direction: str, *, cu_seqlens_q, cu_seqlens_k, d: int, heads: int = 1, **opts) -> Prediction:
    """Exact reads and writes of ``flash2.forward_varlen`` / ``backward_varlen``: the sum, over the
    sequences, of ``predict("flash2", direction, Nq=Nq_b, Nk=Nk_b, ...)``; no padding is counted.

    A sequence with no queries moves nothing, except in the backward the zero dK, dV of its keys
    (:func:`flashref.iomodel.flash2.backward_without_queries`); one with queries but no keys is
    refused, as by the simulator. ``alibi_slopes``: ``True``, or the array, ``(H,)`` or ``(B, H)``.
    """
    where = f"iomodel.predict_varlen({direction!r})"
    if direction not in ("forward", "backward"):  # checked here too: a batch of empty sequences predicts none
        raise ValueError(f"direction: expected 'forward' or 'backward', got {direction!r}")
    heads = _nonnegative_int(heads, "heads")  # as predict's
    for name in ("Nq", "Nk"):  # the lengths are the offsets': passed on, they would clash with each sequence's
        if name in opts:
            raise TypeError(f"{where}: {name} is each sequence's length, from cu_seqlens_q and cu_seqlens_k; "
                            f"it is not an option")
    _flash2.refuse_varlen_scores(opts, where)
    # the totals are theirs: no Q, K to match
    cq, ck = _flash2.check_cu_seqlens_pair(cu_seqlens_q, cu_seqlens_k)
    slopes = opts.get("alibi_slopes")
    given = slopes is not None and not isinstance(slopes, (bool, np.bool_))
    if given:
        opts["alibi_slopes"] = True  # only their presence changes the IO; the array is checked below, as (B, H)
    # The batch's options, checked once as the simulator checks them (each sequence's predict checks them
    # again): a batch whose sequences have no queries predicts no sequence, and must refuse alike.
    # no bias_grad: a packed batch has no bias, and backward_varlen refuses it as unknown (so it stays among the
    # options the Problem checks, which refuse it)
    extra = tuple(name for name in _extra("flash2", direction) if name != "bias_grad")
    # an unknown option's error lists what the simulator's varlen entry points take (less mask and bias, refused
    # above unless None), and the shapes' heads and kv_heads
    check_options({k: v for k, v in opts.items() if k not in _flash2.VARLEN_REFUSED},
                  _flash2.varlen_options(extra) | {"heads", "kv_heads"}, where)
    probe = dict(opts)
    own = _own_options("flash2", direction, probe, extra)
    pb = Problem.from_shapes(where, extra, Nq=1, Nk=1, d=d, heads=heads, **probe)
    if _lowp.requested(own):
        _lowp.check_options(pb, **own)
    if given:
        _flash2.check_varlen_slopes(slopes, cq.size - 1, pb.heads)
    total = Tally(pb.heads, pb.dtype_bytes).prediction()  # a batch of empty sequences moves nothing
    for b in range(cq.size - 1):
        Nq, Nk = int(cq[b + 1] - cq[b]), int(ck[b + 1] - ck[b])
        if Nq:
            total = total + _predict("flash2", direction, where, Nq=Nq, Nk=Nk, d=d, heads=heads, **opts)
        elif Nk and direction == "backward":
            total = total + flash2.backward_without_queries(replace(pb, Nq=0, Nk=Nk))
    return total


def predict_paged(*, Nq: int, d: int, heads: int, page_size: int, cache_seqlens, **opts) -> Prediction:
    """Exact reads and writes of ``decoding.forward_paged`` (``heads`` = H per sequence); see
    :func:`flashref.iomodel.decoding.forward_paged`. Its options are ``forward_paged``'s
    (``decoding.PAGED_OPTIONS``), checked by the same code."""
    return decoding.forward_paged(Nq=Nq, d=d, heads=heads, page_size=page_size, cache_seqlens=cache_seqlens, **opts)


#: Each tiled algorithm's own grid function, per direction: the one block-size resolver, shared with the simulator.
_GRIDS = {("flash1", "forward"): _flash1.grid, ("flash1", "backward"): _flash1_bwd.grid,
          ("flash2", "forward"): _flash2.grid_forward, ("flash2", "backward"): _flash2.grid_backward,
          ("blocksparse", "forward"): _blocksparse.grid_of, ("blocksparse", "backward"): _blocksparse.grid_of,
          ("decoding", "forward"): _decoding.grid}


def grid(algorithm: str, direction: str, *, Nq: int, Nk: int, d: int, heads: int | None = None, **opts) -> Grid:
    """The tiling (Br, Bc, Tr, Tc) that ``algorithm``'s ``direction`` runs with, from shapes alone.

    ``heads`` (the product of the leading axes) matters only where decoding picks its number of splits; left out,
    it is one head, and a ``mask`` or ``bias`` may have any leading axes (an empty batch's included), as for
    ``blocksparse.grid``. It takes :func:`predict`'s options; those that leave the grid as it is (``num_splits``,
    ``sms``, ``block_mask``, ``bias_grad``) are still checked as ``predict`` checks them, so both refuse the same
    values."""
    if (algorithm, direction) not in _GRIDS:
        raise ValueError(f"algorithm, direction: expected one of {sorted(_GRIDS)}, got {(algorithm, direction)!r}")
    where = f"iomodel.grid({algorithm!r}, {direction!r})"
    # block_mask, num_splits, sms, bias_grad leave the grid as it is (it is fixed before they are looked at), but
    # their values are checked as predict checks them, in its order; FP8 changes the grid
    own = _own_options(algorithm, direction, opts)
    pb = Problem.from_shapes(where, _extra(algorithm, direction), Nq=Nq, Nk=Nk, d=d, heads=heads, **opts)
    lowp_opts = {k: v for k, v in own.items() if k in _lowp.OPTIONS}
    if _lowp.requested(lowp_opts):
        return _lowp.grid(pb, **lowp_opts)  # the FP8 loop holds three descales more: its own blocks
    if "bias_grad" in own:  # checked before the blocks are resolved, as by every backward
        _variants.check_bias_grad(own["bias_grad"], pb.bias)
    if algorithm == "decoding":  # the grid and the splits chosen on it, explicit block sizes checked per split
        g, _ = _decoding.plan(pb, own.get("num_splits"), own.get("sms"))
    else:
        g = _GRIDS[algorithm, direction](pb)
    if "block_mask" in own:  # left out it is not needed here; given, it must fit this grid (None is refused)
        check_block_mask(own["block_mask"], g)
    # Packed GQA tiles g·Br loop rows; the simulator reports (and this gives) Br in query positions.
    G = _variants.packed_group(pb, pb.gqa_packing)
    return g if G == 1 else Grid.of(g.Br // G, g.Bc, pb.Nq, pb.Nk)


def block_sizes(algorithm: str, direction: str, **kw) -> tuple[int, int]:
    """``(Br, Bc)`` of :func:`grid`."""
    g = grid(algorithm, direction, **kw)
    return g.Br, g.Bc


# The per-algorithm closed forms import Tally and Prediction from this package, so they come last.
from . import blocksparse, decoding, flash1, flash2, standard  # noqa: E402

_MODULES = {"standard": standard, "flash1": flash1, "flash2": flash2, "blocksparse": blocksparse,
            "decoding": decoding}

from .dram import dram  # noqa: E402  (three-level model: DRAM bytes through a simulated L2)
