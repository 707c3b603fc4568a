"""The simulated GPU: a large slow HBM, a small fast SRAM, and a counter on the wire between them.

Every algorithm in flashref runs against a :class:`Memory`. Its verbs say the counting rules
(docs/counting-rules.md) as they apply them:

=============================  ==============================================================
``mem.input(name, X)``         an input starts in HBM at no cost (rule 1)
``mem.output(name, shape)``    an HBM output buffer, allocated but *not* initialised
                               (``torch.empty``): free; each block is written once by a store
``mem.init(name, shape, v)``   an HBM buffer initialised to ``v`` (Alg.1 l.2 ``O = 0``):
                               counted as writes (rule 3)
``mem.load(name, rows)``       HBM → SRAM: counted as reads (rule 2), held on chip
``mem.store(name, X, rows)``   SRAM → HBM: counted as writes (rule 2)
``mem.hold(name, X)``          keep a quantity on chip (counted in the footprint)
``mem.reuse(old, new, X)``     ``X`` takes the slot of ``old`` ("we use S for P", as
                               flash-attention-minimal puts it): ``old`` is gone
``mem.free(*names)``           release on-chip slots
``mem.result(name)``           hand an HBM tensor back to the caller (not counted)
=============================  ==============================================================

**What counts as on chip** (one rule, applied by every algorithm): each quantity that the
algorithm box names — a tile such as ``Q_i``, ``S_ij``, ``P̃_ij``, or a row vector such as
``m_i``, ``ℓ_i^new`` — is held from the statement that computes it until it is freed or its slot
is reused. Sub-expressions inside one statement (``e^{m_i − m_i^new}`` used once, the product
before a scale) are registers and are not counted; a factor used by two statements is named and
held. So the footprint is *measured* from what the code keeps, not assumed from a formula, and
each module's ``footprint(Br, Bc, d)`` is tested equal to the measured peak.

Leading axes (batch, heads) are simulated in lockstep: one load of ``Q[..., rows, :]`` moves the
tile of every head, and counts ``heads * rows * d`` elements. The footprint is counted per head,
because each head runs in its own thread block with its own SRAM (FlashAttention parallelises over
batch and heads; an SM's shared memory belongs to the block running on it).

Example::

    mem = Memory(sram_size=1024)
    mem.input("Q", Q)                                  # inputs start in HBM at no cost
    mem.output("O", Q.shape[-2:])                      # an output buffer in HBM, free until written
    Q_1 = mem.load("Q", rows=(0, 16), as_="Q_i")       # 16*d reads per head, held on chip
    mem.store("O", 2 * Q_1, rows=(0, 16))              # 16*d writes per head
    print(mem.report())
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass, field

import numpy as np

# the integer checks from flashref._numbers, not .problem: memory.py ships in the autograder bundle without the
# algorithms and the options they share (grading/release.py's BUNDLE)
from ._numbers import _nonnegative_int, positive_int


def _numeric(a: np.ndarray, what: str) -> np.ndarray:
    """HBM holds numbers: a string or object array would fail far from its cause (or be cast silently)."""
    if a.dtype.kind in "OSUMm":  # not "biufc" alone: ml_dtypes' float8 arrays (lowp's FP8 Q, K, V) are kind "V"
        raise TypeError(f"{what}: expected a numeric array, got dtype {a.dtype}")
    return a

__all__ = ["Memory", "IOReport", "TensorIO", "Event", "SRAMOverflowError", "io_by_line", "merge_by_precision"]


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


def _lead_shape(lead) -> tuple:
    """The leading (batch, head) axes: a tuple of non-negative integers (0 is an empty batch)."""
    if not isinstance(lead, (tuple, list)):
        raise TypeError(f"lead_shape: expected a tuple of non-negative integers, got {lead!r}")
    return tuple(_nonnegative_int(n, "lead_shape") for n in lead)


def merge_by_precision(entries) -> dict[str, tuple[int, int, int]]:
    """``{key: (reads, writes, bytes per element)}`` from ``(name, reads, writes, bytes per element)`` entries:
    counts of one name add up while their precision agrees, and a name met in another precision (an FP8
    forward's 1-byte Q beside its backward's 2-byte Q) gets a key of its own, ``"Q (2 B/elt)"``. So the bytes of
    a sum of reports (:class:`IOReport`) or predictions (``iomodel.Prediction``) are the sum of their bytes,
    whichever is added first."""
    out: dict[str, tuple[int, int, int]] = {}
    for name, r, w, b in entries:
        key = name if out.get(name, (0, 0, b))[2] == b else f"{name} ({b} B/elt)"
        r0, w0, _ = out.get(key, (0, 0, b))
        out[key] = (r0 + r, w0 + w, b)
    return out


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
    #: (reads, writes) per algorithm line, in elements, as ``iomodel``'s ``Prediction.by_line``.
    by_line: dict[str, tuple[int, int]] = field(default_factory=dict)

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
        # each tensor's elements keep their own bytes per element (a row per precision)
        merged = merge_by_precision((name, t.reads, t.writes, t.dtype_bytes or rep.dtype_bytes)
                                    for rep in (self, other) for name, t in rep.by_tensor.items())
        merged = {k: TensorIO(r, w, None if b == self.dtype_bytes else b) for k, (r, w, b) in merged.items()}
        lines = dict(self.by_line)
        for line, (r, w) in other.by_line.items():
            r0, w0 = lines.get(line, (0, 0))
            lines[line] = (r0 + r, w0 + w)
        return IOReport(merged, max(self.peak_sram, other.peak_sram), self.dtype_bytes, lines)

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


def io_by_line(events) -> dict[str, tuple[int, int]]:
    """(reads, writes) in elements per algorithm line, from a run's memory events."""
    out: dict[str, list[int]] = {}
    for e in events:
        acc = out.setdefault(e.line, [0, 0])
        acc[0 if e.direction == "read" else 1] += e.elements
    return {k: (r, w) for k, (r, w) in out.items()}


def _range(r, n: int, axis: str, name: str) -> tuple[int, int]:
    """Normalise a ``(start, stop)`` pair or ``None`` (everything) to a clipped half-open range.

    ``axis`` ("rows" or "cols") and the tensor's ``name`` are for the errors. This runs on every load and
    store, so the common case (a pair of Python ints, as :class:`~flashref.blocks.Grid` makes) costs two
    type checks; anything else takes the slow path and is refused by name.
    """
    if r is None:
        return (0, n)
    try:
        start, stop = r
    except (TypeError, ValueError):  # an int, a 1-tuple, a triple...
        raise TypeError(f"{axis} of {name!r}: expected a range (start, stop) of two integers, or None, "
                        f"got {r!r}") from None
    if type(start) is not int or type(stop) is not int:  # numpy integers pass; floats and bools do not
        start, stop = _index(start, axis, name, r), _index(stop, axis, name, r)
    if not 0 <= start <= stop:
        raise ValueError(f"{axis} of {name!r}: expected a range (start, stop) with 0 <= start <= stop, "
                         f"got {tuple(r)}")
    # A ragged last tile asks for rows past the end: it holds only the rows that exist (rule 2).
    return (start if start < n else n, stop if stop < n else n)


def _no_cols(cols, name: str) -> None:
    """A vector has no columns: ``cols`` was ignored for one, so a tile of a matrix asked of a vector went unseen."""
    if cols is not None:
        raise ValueError(f"cols of {name!r}: {name!r} is a vector (rows,) per head and has no columns; "
                         f"pass cols=None, got {cols!r}")


def _index(x, axis: str, name: str, r) -> int:
    """An integer end of a range (numpy's too); a float would silently truncate, so it is refused."""
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, numbers.Integral):
        raise TypeError(f"{axis} of {name!r}: expected a range (start, stop) of two integers, got {r!r}")
    return int(x)


def _fill(fill, name: str):
    """An init's fill: a real number (-inf for Alg.1 l.2's m). numpy would turn None into NaN and drop a complex part
    silently, and a bool is not a fill anyone means."""
    if isinstance(fill, (bool, np.bool_)) or not isinstance(fill, numbers.Real):
        raise TypeError(f"fill: expected a real number for {name!r}, got {type(fill).__name__} {fill!r}")
    return fill


def _shape(shape, name: str) -> tuple:
    """The per-head shape of an HBM buffer: ``(rows,)`` for a vector or ``(rows, cols)`` for a matrix."""
    if not isinstance(shape, (tuple, list)):
        raise TypeError(f"shape of {name!r}: expected a tuple (rows,) or (rows, cols) per head, got {shape!r}")
    if len(shape) not in (1, 2):
        raise ValueError(f"shape of {name!r}: expected (rows,) or (rows, cols) per head, got {tuple(shape)}")
    return tuple(_nonnegative_int(n, f"shape of {name!r}") for n in shape)


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

    #: The verbs that create an HBM tensor before tiles are stored into it, as an error names them (the exercises'
    #: memory, which has no ``output``, names its own)
    CREATE_VERBS = ("output", "init")

    def __init__(self, sram_size: int | None = None, dtype_bytes: int = 2, lead_shape: tuple = ()):
        # Checked here, once, so that the verbs below can trust them (a negative dtype_bytes would make
        # io.bytes negative; a string sram_size would fail at the first hold, far from its cause).
        self.sram_size = None if sram_size is None else positive_int(sram_size, "sram_size")
        self.dtype_bytes = positive_int(dtype_bytes, "dtype_bytes")
        self.lead_shape = _lead_shape(lead_shape)
        self.heads = int(np.prod(self.lead_shape, dtype=np.int64)) if self.lead_shape else 1
        self._hbm: dict[str, np.ndarray] = {}
        self._is_vector: dict[str, bool] = {}
        self._sram: dict[str, int] = {}  # on-chip buffer name -> elements per head
        self._io: dict[str, TensorIO] = {}
        self._bytes: dict[str, int] = {}  # tensors stored in their own precision (input(..., dtype_bytes=))
        self.peak_sram = 0
        self.peak_held: dict[str, int] = {}  # name -> elements per head on chip at the peak
        self.events: list[Event] = []

    # ---------------------------------------------------------------- HBM
    def input(self, name: str, array: np.ndarray, dtype_bytes: int | None = None) -> None:
        """Place an input in HBM. Inputs start in HBM at no cost (rule 1).

        ``dtype_bytes`` gives this tensor its own bytes per element (e.g. 1 for FP8) in the
        report's ``bytes``; ``None`` uses the memory's.

        A broadcast input (an axis of length > 1 with stride 0, e.g. one ``(Nq, Nk)`` bias shared by
        every head) is kept as a read-only view: a copy would materialise every repeat. Its IO still
        counts the elements of its logical shape, as a GPU kernel reads the tile for every head.
        """
        array = _numeric(np.asarray(array), name)
        if dtype_bytes is not None:
            self._bytes[name] = positive_int(dtype_bytes, "dtype_bytes")
        self._check_lead(name, array)
        # (an empty array has all strides 0 too, but copying it costs nothing: it is copied as any other)
        if array.size and any(stride == 0 and n > 1 for stride, n in zip(array.strides, array.shape)):
            view = array.view()
            view.flags.writeable = False  # the caller's memory: a store into it is refused (see store)
            self._hbm[name] = view
        else:
            self._hbm[name] = array.copy()
        self._is_vector[name] = array.ndim == len(self.lead_shape) + 1

    def output(self, name: str, shape: tuple, dtype=np.float64) -> None:
        """Allocate an HBM output buffer without initialising it: free, since nothing is written yet.

        Use it for a buffer whose every block is written exactly once by :meth:`store` (FA2's O and L).
        Its content before those stores is undefined on a GPU; here it is zeros, never read.
        """
        shape = _shape(shape, name)
        self._hbm[name] = np.zeros(self.lead_shape + shape, dtype=dtype)
        self._is_vector[name] = len(shape) == 1

    def init(self, name: str, shape: tuple, fill: float, dtype=np.float64, line: str = "") -> None:
        """Initialise a buffer in HBM (e.g. Alg.1 l.2 ``O = 0``): the initialisation counts as writes (rule 3)."""
        shape, fill = _shape(shape, name), _fill(fill, name)
        self._hbm[name] = np.full(self.lead_shape + shape, fill, dtype=dtype)
        self._is_vector[name] = len(shape) == 1
        rows = (0, shape[0])
        cols = (0, shape[1]) if len(shape) == 2 else (0, 1)
        self._count(name, "write", rows, cols, self._hbm[name].size, line)

    # The first arc's names for the same verbs, kept so older notebooks and user code still run.
    put = input
    alloc = init

    def load(self, name: str, rows=None, cols=None, *, as_: str | None = None, line: str = "") -> np.ndarray:
        """Copy a tile of HBM tensor ``name`` into SRAM, count its elements as reads, and return it.

        The tile is held on chip under ``as_`` (default: ``name``) until :meth:`free` or until
        another array is held under the same name.
        """
        src = self._tensor(name, "load")
        r = _range(rows, src.shape[-1] if self._is_vector[name] else src.shape[-2], "rows", name)
        if self._is_vector[name]:
            _no_cols(cols, name)
            tile = src[..., r[0]:r[1]].copy()
            c = (0, 1)
        else:
            c = _range(cols, src.shape[-1], "cols", name)
            tile = src[..., r[0]:r[1], c[0]:c[1]].copy()
        # Hold first: a tile that does not fit is refused before its reads are counted (the load never happened).
        self.hold(as_ or name, tile)
        self._count(name, "read", r, c, tile.size, line)
        return tile

    def store(self, name: str, value: np.ndarray, rows=None, cols=None, *, line: str = "") -> None:
        """Write ``value`` from SRAM into a tile of HBM tensor ``name`` and count the writes.

        Storing to a name HBM does not hold yet creates it (the output of a matmul "by blocks").
        """
        value = _numeric(np.asarray(value), "value")
        if name not in self._hbm:
            if rows is not None or cols is not None:
                raise KeyError(f"HBM has no tensor {name!r} to store a tile into (it holds "
                               f"{', '.join(self._hbm) or 'nothing'}); store it whole first, or create it with "
                               f"{' or '.join(self.CREATE_VERBS)}")
            self._check_lead(name, value)
            self._hbm[name] = value.copy()
            self._is_vector[name] = value.ndim == len(self.lead_shape) + 1
            r = (0, value.shape[-1] if self._is_vector[name] else value.shape[-2])
            c = (0, 1) if self._is_vector[name] else (0, value.shape[-1])
        else:
            dst = self._hbm[name]
            if not dst.flags.writeable:
                raise ValueError(f"{name}: a broadcast input, kept as a read-only view (see input): it cannot be "
                                 f"stored into; store to a buffer made by output or init")
            if self._is_vector[name]:
                _no_cols(cols, name)
                r, c = _range(rows, dst.shape[-1], "rows", name), (0, 1)
                tile = dst[..., r[0]:r[1]]
            else:
                r, c = _range(rows, dst.shape[-2], "rows", name), _range(cols, dst.shape[-1], "cols", name)
                tile = dst[..., r[0]:r[1], c[0]:c[1]]
            # A store that would lose information (complex into a real tensor, a float into an integer one) is
            # refused; numpy's assignment casts it silently (a ComplexWarning at most). float64 → float32 is fine.
            if {value.dtype.kind, tile.dtype.kind} <= set("biufc") and not np.can_cast(value.dtype, tile.dtype,
                                                                                        "same_kind"):
                raise TypeError(f"value: dtype {value.dtype} cannot be stored into {name!r} of dtype {tile.dtype} "
                                f"without losing information")
            try:
                tile[...] = value  # a value that broadcasts (a scalar, a row) still writes the whole tile ...
            except ValueError:
                raise ValueError(f"value: shape {value.shape} does not fit the tile of {name!r} at rows={r}"
                                 f"{'' if self._is_vector[name] else f', cols={c}'}, of shape {tile.shape}") from None
            value = tile  # ... and the whole tile is what is counted
        self._count(name, "write", r, c, value.size, line)

    def result(self, name: str) -> np.ndarray:
        """Hand an HBM tensor back to the caller (the host); not counted, like the inputs."""
        return self._tensor(name, "return").copy()

    def _tensor(self, name: str, verb: str) -> np.ndarray:
        """The HBM tensor ``name``, or a KeyError that lists the ones HBM holds."""
        try:
            return self._hbm[name]
        except KeyError:
            raise KeyError(f"HBM has no tensor {name!r} to {verb} (it holds {', '.join(self._hbm) or 'nothing'}); "
                           "place it with input, output or init first") from None

    # ---------------------------------------------------------------- SRAM
    def hold(self, name: str, value):
        """Keep ``value`` on chip under ``name``; returns ``value``. Replaces an earlier holding of ``name``."""
        # Elements per head: the trailing (non-leading) axes. Counted from the shape, not by
        # dividing by the number of heads, so an empty batch (0 heads) holds what one head would.
        return self._place(name, value)

    def _place(self, name: str, value, old: str | None = None):
        """Hold ``value`` as ``name`` in place of ``name`` (and of ``old``, for :meth:`reuse`), if it fits.

        A refused holding changes nothing: the chip keeps what it held (before, the overflowing value stayed
        held, so a caller that caught the error went on with a footprint past ``sram_size``).
        """
        n = self._per_head(np.shape(value))
        kept = {k: v for k, v in self._sram.items() if k != name and k != old}
        used = sum(kept.values()) + n
        if self.sram_size is not None and used > self.sram_size:
            parts = ", ".join(f"{k}={v}" for k, v in kept.items()) or "nothing"
            raise SRAMOverflowError(
                f"on-chip footprint of {used} elements per head exceeds sram_size={self.sram_size}: holding "
                f"{name}={n} beside what is held ({parts})")
        kept[name] = n
        self._sram = kept
        if used > self.peak_sram:
            self.peak_held = dict(kept)  # what was on chip at the peak (the grader names it)
        self.peak_sram = max(self.peak_sram, used)
        return value

    def _per_head(self, shape) -> int:
        """Elements per head of a value of ``shape``: its trailing axes, where its leading axes are the heads'
        (each the head axis's size, or 1 for a value shared along it); else every element it has. A value without
        the heads' axes is not divided among them: a 1-D array of 10^6 held beside (2,) heads is 10^6 on chip, not
        a per-head scalar."""
        k = len(self.lead_shape)
        lead = shape[:k]
        if len(shape) >= k and all(a in (b, 1) for a, b in zip(lead, self.lead_shape)):
            return int(np.prod(shape[k:], dtype=np.int64))  # () for a per-head scalar: 1
        return max(int(np.prod(shape, dtype=np.int64)), 1)

    def reuse(self, old: str, new: str, value):
        """``value`` takes the on-chip slot of ``old``, which is no longer needed (``old`` is freed).

        The paper's algorithms overwrite in place: P̃_ij = exp(S_ij − m̃_ij) where S_ij was, as
        registers would. Naming the reuse keeps the footprint honest and the names the paper's.
        """
        return self._place(new, value, old=old)

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
        """A tensor placed in HBM is ``lead_shape`` + a vector's (rows,) or a matrix's (rows, cols)."""
        if array.ndim <= len(self.lead_shape) or array.shape[: len(self.lead_shape)] != self.lead_shape:
            raise ValueError(f"{name}: shape {array.shape} is not the memory's leading axes {self.lead_shape} "
                             f"followed by (rows,) or (rows, cols)")

    def report(self) -> IOReport:
        """The IO of everything run so far."""
        by_tensor = {k: TensorIO(v.reads, v.writes, v.dtype_bytes) for k, v in self._io.items()}
        return IOReport(by_tensor, self.peak_sram, self.dtype_bytes, io_by_line(self.events))
