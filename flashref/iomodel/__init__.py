"""Closed-form IO counts and the papers' bounds.

``predict(algorithm, direction, Nq=, Nk=, d=, **opts)`` returns the reads and writes, in elements,
that the simulator counts for the same shapes and options, *exactly*: the tests assert equality.
Each algorithm's formulas live in their own module (``iomodel.standard``, ``iomodel.flash1``...)
and follow the algorithm's lines one by one, so a formula can be read beside the code it counts.

Options are those of the algorithms (``causal``, ``mask``, ``dropout_p``, ``sram_size``,
``block_sizes``, ``dtype_bytes``...) plus ``heads``: the number of (batch, head) pairs, i.e. the
product of the leading axes. A ``mask`` may be passed as the array or as ``True``; only whether
there is one matters to the IO.

Example::

    iomodel.predict("standard", "forward", Nq=1024, Nk=1024, d=64, heads=16 * 64).bytes / 1e9
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field

from ..memory import Traffic

__all__ = ["Prediction", "predict", "ALGORITHMS", "dram"]

ALGORITHMS = ("standard", "flash1", "flash2", "blocksparse", "decoding")


@dataclass
class Prediction(Traffic):
    """Predicted HBM traffic in elements; ``by_line`` says where it comes from."""

    reads: int
    writes: int
    dtype_bytes: int = 2
    by_line: dict[str, tuple[int, int]] = field(default_factory=dict)


class Tally:
    """Helper for the per-algorithm modules: add (reads, writes) line by line, then ``.prediction()``."""

    def __init__(self, heads: int = 1, dtype_bytes: int = 2):
        self.heads, self.dtype_bytes = heads, dtype_bytes
        self.lines: dict[str, list[int]] = {}

    def add(self, line: str, reads: int = 0, writes: int = 0) -> None:
        acc = self.lines.setdefault(line, [0, 0])
        acc[0] += reads * self.heads
        acc[1] += writes * self.heads

    def prediction(self) -> Prediction:
        by_line = {k: (r, w) for k, (r, w) in self.lines.items()}
        return Prediction(sum(r for r, _ in by_line.values()), sum(w for _, w in by_line.values()),
                          self.dtype_bytes, by_line)


def predict(algorithm: str, direction: str, *, Nq: int, Nk: int, d: int, **opts) -> Prediction:
    """Exact reads and writes of ``algorithm``'s ``direction`` ("forward" or "backward")."""
    if algorithm not in ALGORITHMS:
        raise ValueError(f"algorithm: expected one of {ALGORITHMS}, got {algorithm!r}")
    if direction not in ("forward", "backward"):
        raise ValueError(f"direction: expected 'forward' or 'backward', got {direction!r}")
    for name, v in (("Nq", Nq), ("Nk", Nk), ("d", d)):
        if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
            raise ValueError(f"{name}: expected a positive integer, got {v!r}")
    module = importlib.import_module(f"{__name__}.{algorithm}")
    fn = getattr(module, direction, None)
    if fn is None:
        raise ValueError(f"direction: {algorithm} has no {direction} pass")
    return fn(Nq=Nq, Nk=Nk, d=d, **opts)


from .dram import dram  # noqa: E402  (three-level model: DRAM bytes through a simulated L2)
