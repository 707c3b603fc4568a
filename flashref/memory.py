"""The simulated GPU: a large slow HBM, a small fast SRAM, and a counter on the wire between them.

Every algorithm in flashref runs against a :class:`Memory`. Its inputs are placed in HBM for free
(rule 1 of DESIGN.md); from then on the algorithm can only reach HBM through :meth:`Memory.load`
and :meth:`Memory.store`, and each of those counts the elements it moves. Arrays the algorithm
keeps on chip are registered with :meth:`Memory.hold` (loads register themselves), so the on-chip
footprint is *measured* from what the code really holds, not assumed from a formula.

Leading axes (batch, heads) are simulated in lockstep: one load of ``Q[..., rows, :]`` moves the
tile of every head, and counts ``heads * rows * d`` elements. The footprint is counted per head,
because each head runs in its own thread block with its own SRAM (FlashAttention parallelises over
batch and heads; an SM's shared memory belongs to the block running on it).

Example::

    mem = Memory(sram_size=1024)
    mem.put("Q", Q)                                   # inputs start in HBM at no cost
    Q_1 = mem.load("Q", rows=(0, 16), as_="Q_i")       # 16*d reads per head, held on chip
    mem.store("O", O_1, rows=(0, 16))                  # 16*d writes per head
    print(mem.report())
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

__all__ = ["Memory", "IOReport", "TensorIO", "Event", "SRAMOverflowError"]


class SRAMOverflowError(MemoryError):
    """The on-chip footprint of an algorithm grew past ``sram_size``."""


@dataclass
class TensorIO:
    """Elements read from and written to HBM for one named tensor.

    ``dtype_bytes`` is ``None`` (the report's own ``dtype_bytes``) unless the tensor is stored in
    another precision, as the FP8 Q, K, V (1 byte) and their float32 scales (4 bytes) of
    :mod:`flashref.lowp`.
    """

    reads: int = 0
    writes: int = 0
    dtype_bytes: int | None = None

    @property
    def total(self) -> int:
        return self.reads + self.writes


@dataclass(frozen=True)
class Event:
    """One transfer between HBM and SRAM, for animating the tile schedule.

    ``rows`` and ``cols`` are half-open ``(start, stop)`` ranges of the tensor's last two axes
    (``cols`` is ``(0, 1)`` for a vector); ``direction`` is ``"read"`` (HBM to SRAM) or
    ``"write"`` (SRAM to HBM); ``line`` is the algorithm line that asked for it.
    """

    step: int
    tensor: str
    rows: tuple[int, int]
    cols: tuple[int, int]
    direction: str
    elements: int
    line: str = ""


class Traffic:
    """``total`` and ``bytes`` from ``reads``, ``writes`` and ``dtype_bytes`` (shared with iomodel's predictions)."""

    @property
    def total(self) -> int:
        return self.reads + self.writes

    @property
    def bytes(self) -> int:
        return self.total * self.dtype_bytes


@dataclass
class IOReport(Traffic):
    """HBM traffic of one run, in elements. Reports add: ``fwd.io + bwd.io``.

    ``bytes`` weighs each tensor's elements by its own ``dtype_bytes`` where it has one (mixed
    precision), else by the report's: without such tensors ``bytes == total * dtype_bytes``.
    """

    by_tensor: dict[str, TensorIO] = field(default_factory=dict)
    peak_sram: int = 0
    dtype_bytes: int = 2

    @property
    def reads(self) -> int:
        return sum(t.reads for t in self.by_tensor.values())

    @property
    def writes(self) -> int:
        return sum(t.writes for t in self.by_tensor.values())

    @property
    def bytes(self) -> int:
        return sum(t.total * (self.dtype_bytes if t.dtype_bytes is None else t.dtype_bytes)
                   for t in self.by_tensor.values())

    def __add__(self, other: IOReport) -> IOReport:
        if not isinstance(other, IOReport):
            return NotImplemented
        merged = {name: TensorIO(t.reads, t.writes, t.dtype_bytes) for name, t in self.by_tensor.items()}
        for name, t in other.by_tensor.items():
            m = merged.setdefault(name, TensorIO(dtype_bytes=t.dtype_bytes))
            m.reads += t.reads
            m.writes += t.writes
        return IOReport(merged, max(self.peak_sram, other.peak_sram), self.dtype_bytes)

    def __radd__(self, other):
        # lets sum([io1, io2, ...]) start from 0
        return self if other == 0 else self.__add__(other)

    def __str__(self) -> str:
        rows = [("tensor", "reads", "writes", "total")]
        for name, t in self.by_tensor.items():
            rows.append((name, f"{t.reads:,}", f"{t.writes:,}", f"{t.total:,}"))
        rows.append(("all", f"{self.reads:,}", f"{self.writes:,}", f"{self.total:,}"))
        widths = [max(len(r[k]) for r in rows) for k in range(4)]
        lines = ["  ".join(c.rjust(w) if k else c.ljust(w) for k, (c, w) in enumerate(zip(r, widths)))
                 for r in rows]
        lines.insert(1, "-" * len(lines[0]))
        lines.insert(len(lines) - 1, "-" * len(lines[0]))
        own = [f"{n} {t.dtype_bytes}" for n, t in self.by_tensor.items() if t.dtype_bytes is not None]
        per = f"{self.dtype_bytes} B/elt" + (f"; {', '.join(own)}" if own else "")
        lines.append(f"elements moved: {self.total:,}  bytes ({per}): {self.bytes:,}"
                     f"  peak SRAM: {self.peak_sram:,} elements")
        return "\n".join(lines)

    __repr__ = __str__


def _range(r, n: int) -> tuple[int, int]:
    """Normalise a ``(start, stop)`` pair or ``None`` (everything) to a clipped half-open range."""
    if r is None:
        return (0, n)
    start, stop = int(r[0]), int(r[1])
    # A ragged last tile asks for rows past the end: it holds only the rows that exist (rule 2).
    return (max(0, min(start, n)), max(0, min(stop, n)))


class Memory:
    """HBM plus one SRAM per head, with every transfer counted.

    Parameters
    ----------
    sram_size : int or None
        On-chip capacity per head, in elements (the paper's M). ``None`` means unlimited.
    dtype_bytes : int
        Bytes per element, for :attr:`IOReport.bytes`.
    lead_shape : tuple
        The leading (batch, head) axes shared by every tensor placed in this memory.
    """

    def __init__(self, sram_size: int | None = None, dtype_bytes: int = 2, lead_shape: tuple = ()):
        self.sram_size = sram_size
        self.dtype_bytes = dtype_bytes
        self.lead_shape = tuple(lead_shape)
        self.heads = int(np.prod(self.lead_shape, dtype=np.int64)) if self.lead_shape else 1
        self._hbm: dict[str, np.ndarray] = {}
        self._is_vector: dict[str, bool] = {}
        self._bytes: dict[str, int] = {}  # tensors stored in their own precision (put(..., dtype_bytes=))
        self._sram: dict[str, int] = {}  # on-chip buffer name -> elements per head
        self._io: dict[str, TensorIO] = {}
        self.peak_sram = 0
        self.events: list[Event] = []

    # ---------------------------------------------------------------- HBM
    def put(self, name: str, array: np.ndarray, dtype_bytes: int | None = None) -> None:
        """Place an input in HBM. Inputs start in HBM at no cost (rule 1).

        ``dtype_bytes`` gives this tensor its own bytes per element (e.g. 1 for FP8) in the
        report's ``bytes``; ``None`` uses the memory's.
        """
        array = np.asarray(array)
        if dtype_bytes is not None:
            self._bytes[name] = int(dtype_bytes)
        self._check_lead(name, array)
        self._hbm[name] = array.copy()
        self._is_vector[name] = array.ndim == len(self.lead_shape) + 1

    def alloc(self, name: str, shape: tuple, fill: float, dtype=np.float64, line: str = "") -> None:
        """Initialise a buffer in HBM (e.g. Alg.1 l.2 ``O = 0``): the initialisation counts as writes (rule 3)."""
        full = self.lead_shape + tuple(shape)
        self._hbm[name] = np.full(full, fill, dtype=dtype)
        self._is_vector[name] = len(shape) == 1
        rows = (0, shape[0])
        cols = (0, shape[1]) if len(shape) == 2 else (0, 1)
        self._count(name, "write", rows, cols, self._hbm[name].size, line)

    def load(self, name: str, rows=None, cols=None, *, as_: str | None = None, line: str = "") -> np.ndarray:
        """Copy a tile of HBM tensor ``name`` into SRAM, count its elements as reads, and return it.

        The tile is held on chip under ``as_`` (default: ``name``) until :meth:`free` or until
        another array is held under the same name.
        """
        src = self._hbm[name]
        r = _range(rows, src.shape[-1] if self._is_vector[name] else src.shape[-2])
        if self._is_vector[name]:
            tile = src[..., r[0]:r[1]].copy()
            c = (0, 1)
        else:
            c = _range(cols, src.shape[-1])
            tile = src[..., r[0]:r[1], c[0]:c[1]].copy()
        self._count(name, "read", r, c, tile.size, line)
        self.hold(as_ or name, tile)
        return tile

    def store(self, name: str, value: np.ndarray, rows=None, cols=None, *, line: str = "") -> None:
        """Write ``value`` from SRAM into a tile of HBM tensor ``name`` and count the writes.

        Storing to a name HBM does not hold yet creates it (the output of a matmul "by blocks").
        """
        value = np.asarray(value)
        if name not in self._hbm:
            if rows is not None or cols is not None:
                raise KeyError(f"HBM has no tensor {name!r} to store a tile into")
            self._hbm[name] = value.copy()
            self._is_vector[name] = value.ndim == len(self.lead_shape) + 1
            r = (0, value.shape[-1] if self._is_vector[name] else value.shape[-2])
            c = (0, 1) if self._is_vector[name] else (0, value.shape[-1])
        else:
            dst = self._hbm[name]
            if self._is_vector[name]:
                r, c = _range(rows, dst.shape[-1]), (0, 1)
                dst[..., r[0]:r[1]] = value
            else:
                r, c = _range(rows, dst.shape[-2]), _range(cols, dst.shape[-1])
                dst[..., r[0]:r[1], c[0]:c[1]] = value
        self._count(name, "write", r, c, value.size, line)

    def result(self, name: str) -> np.ndarray:
        """Hand an HBM tensor back to the caller (the host); not counted, like the inputs."""
        return self._hbm[name].copy()

    # ---------------------------------------------------------------- SRAM
    def hold(self, name: str, value):
        """Keep ``value`` on chip under ``name``; returns ``value``. Replaces an earlier holding of ``name``."""
        n = int(np.size(value)) // self.heads if np.ndim(value) > len(self.lead_shape) else 1
        self._sram[name] = n
        used = sum(self._sram.values())
        if self.sram_size is not None and used > self.sram_size:
            parts = ", ".join(f"{k}={v}" for k, v in self._sram.items())
            raise SRAMOverflowError(
                f"on-chip footprint of {used} elements per head ({parts}) exceeds sram_size={self.sram_size}")
        self.peak_sram = max(self.peak_sram, used)
        return value

    def free(self, *names: str) -> None:
        """Release on-chip buffers."""
        for name in names:
            self._sram.pop(name, None)

    @property
    def sram_in_use(self) -> int:
        return sum(self._sram.values())

    # ---------------------------------------------------------------- report
    def _count(self, name, direction, rows, cols, elements, line):
        t = self._io.setdefault(name, TensorIO(dtype_bytes=self._bytes.get(name)))
        if direction == "read":
            t.reads += int(elements)
        else:
            t.writes += int(elements)
        self.events.append(Event(len(self.events), name, rows, cols, direction, int(elements), line))

    def _check_lead(self, name, array):
        if array.shape[: len(self.lead_shape)] != self.lead_shape:
            raise ValueError(f"{name}: leading axes {array.shape[:len(self.lead_shape)]} "
                             f"do not match the memory's {self.lead_shape}")

    def report(self) -> IOReport:
        """The IO of everything run so far."""
        by_tensor = {k: TensorIO(v.reads, v.writes, v.dtype_bytes) for k, v in self._io.items()}
        return IOReport(by_tensor, self.peak_sram, self.dtype_bytes)
