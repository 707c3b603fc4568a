"""A simulated L2 cache: the third level between HBM and the SMs' on-chip memory.

The two-level machine of the papers (HBM and SRAM) sends every tile load to HBM. A GPU puts an L2
cache in between: a load that finds its bytes there costs no DRAM traffic. :class:`L2Cache` is a
write-back, write-allocate cache with LRU replacement over blocks of ``line_bytes`` (or over whole
tiles, each a key of its own size, which is the same thing when tiles are only ever loaded whole
and is what makes a long sequence fast enough to simulate). It counts:

* ``reads`` / ``writes``: bytes requested by the SMs (what ``lts__t_bytes`` sees, without the
  other partition's share);
* ``dram_reads``: bytes fetched from DRAM on a miss (a load of data never seen, or evicted);
* ``dram_writes``: dirty bytes written back to DRAM on eviction. What is still dirty when the
  kernel ends (``dirty_bytes()``) is *not* counted: Nsight Compute flushes the L2 between kernels
  and counts neither side of that flush, and the model predicts what Nsight measures.

Presets (:func:`preset`): the H100 SXM has 50 MB of L2 and the H200 60 MB, as their drivers report them
(hardware.py; until check55 the H200's was taken for the H100's: figures/gpu/NOTES-l2.md, "Twenty-fifth round"),
each split in two
partitions, each attached to half the memory controllers. An SM reads a line through the
partition near it; a line whose home is the far partition travels over the fabric between the two
and may be kept in both. For DRAM traffic only the home copy matters (a near-side miss that hits
the far partition is fabric traffic, ``lts__t_sectors_srcunit_ltcfabric``, not DRAM traffic), so
:class:`L2Cache` is **one LRU**, of whatever capacity it is given (the simulation runs it at the
effective capacity under test, not at the preset's 50 MB). The closed forms of
:mod:`flashref.iomodel.dram` do not leave the duplicated lines to the fit alone: a tile that a whole
lockstep wave reads at once is held in both partitions, so its reuse distance counts
``PARTITIONS`` = 2 times (``params["partitions"]``; the same as an LRU of half ``C_eff``), while a
wave that starts on the diagonal counts ``partitions_diagonal`` = 1 times and the staggered walk
once. What is left - other data, the hash of addresses over sets - is in the fitted ``C_eff`` and
``kappa``. (Before, this paragraph said the two partitions were one LRU of the preset's capacity and
that the duplicated lines were fitted, not assumed; the closed form assumes them.)
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from .problem import _bool, positive_int

__all__ = ["L2Cache", "L2Spec", "preset", "PRESETS"]

MB = 1024 * 1024


@dataclass(frozen=True)
class L2Spec:
    """An L2 as the model sees it: capacity (bytes), sector and line size, partitions."""

    name: str
    capacity: int
    line_bytes: int = 128  # an L2 line: four 32-byte sectors
    sector_bytes: int = 32  # the unit DRAM is read in
    partitions: int = 2
    sms: int = 132

    def __post_init__(self):
        # A spec is the hardware's shape: whole positive counts, a line of whole sectors and a capacity of whole
        # lines in each partition. Unchecked, L2Spec("x", -5) or one with sms=0 (every builder's resident CTAs)
        # was accepted and went wrong far from here.
        if not isinstance(self.name, str):
            raise TypeError(f"name: expected a string, got {self.name!r}")
        for f in ("capacity", "line_bytes", "sector_bytes", "partitions", "sms"):
            object.__setattr__(self, f, positive_int(getattr(self, f), f))
        if self.line_bytes % self.sector_bytes:
            raise ValueError(f"line_bytes: expected a multiple of sector_bytes ({self.sector_bytes}), "
                             f"got {self.line_bytes}")
        if self.capacity % (self.partitions * self.line_bytes):
            raise ValueError(f"capacity: expected whole lines of {self.line_bytes} bytes in each of "
                             f"{self.partitions} partitions, got {self.capacity}")


def _l2_size(name, default):
    try:
        from . import hardware
        return hardware.get(name).l2_size
    except (ImportError, KeyError, ValueError, AttributeError):
        return default


PRESETS = {
    "h100": L2Spec("H100 SXM5 (50 MB L2, 2 partitions)", _l2_size("H100", 50 * MB)),
    "h200": L2Spec("H200 SXM (60 MB L2, 2 partitions)", _l2_size("H200", 60 * MB)),
}


def preset(gpu: str) -> L2Spec:
    if not isinstance(gpu, str):
        raise TypeError(f"gpu: expected a GPU name, one of {sorted(PRESETS)}, got {gpu!r}")
    try:
        return PRESETS[gpu.lower()]
    except KeyError:
        raise ValueError(f"gpu: expected one of {sorted(PRESETS)}, got {gpu!r}") from None


class L2Cache:
    """Write-back LRU cache over keyed blocks.

    ``access(key, nbytes, write=False)``: one request for a block of ``nbytes`` (a line, or a whole
    tile used as one block). A read miss fetches the block from DRAM; a write allocates it dirty
    without reading (a whole-block write). Evicting a dirty block writes it back.
    """

    def __init__(self, capacity: int, line_bytes: int = 1):
        # whole bytes: a NaN, infinite or fractional capacity has no LRU meaning, and line_bytes=0 divides by 0
        self.capacity, self.line_bytes = positive_int(capacity, "capacity"), positive_int(line_bytes, "line_bytes")
        # whole lines: every block is a whole number of lines, so the bytes past the last whole line could never
        # hold anything, and a capacity under one line (L2Cache(100, line_bytes=128)) silently missed every access
        if self.capacity % self.line_bytes:
            raise ValueError(f"capacity: expected a whole number of {self.line_bytes}-byte lines (line_bytes), "
                             f"got {self.capacity}")
        self._blocks: OrderedDict = OrderedDict()  # key -> [nbytes, dirty]
        self.used = 0
        self.reads = self.writes = self.dram_reads = self.dram_writes = 0
        self.hits = self.misses = 0

    def _size(self, nbytes):
        lb = self.line_bytes
        return -(-int(nbytes) // lb) * lb

    def access(self, key, nbytes: int, write: bool = False) -> bool:
        """Touch ``key``, a block of ``nbytes`` (the same size each time, at least one byte); returns True on a hit."""
        # negative bytes would count negative traffic; a block of none would take no room, so it would never be
        # evicted and hit forever, however much traffic passed
        n = self._size(positive_int(nbytes, "nbytes"))
        write = _bool(write, "write")
        try:
            blk = self._blocks.get(key)
        except TypeError:  # a list or a dict as a key: name it rather than "unhashable type"
            raise TypeError(f"key: expected a hashable block name, got {key!r}") from None
        if blk is not None and blk[0] != n:  # a hit would count bytes the cache does not hold
            raise ValueError(f"nbytes: key {key!r} is a block of {blk[0]} bytes in the cache, got {nbytes}")
        if write:
            self.writes += n
        else:
            self.reads += n
        if blk is not None:
            self._blocks.move_to_end(key)
            blk[1] = blk[1] or write
            self.hits += 1
            return True
        self.misses += 1
        if not write:
            self.dram_reads += n
        self._blocks[key] = [n, write]
        self.used += n
        while self.used > self.capacity and self._blocks:
            _, (m, dirty) = self._blocks.popitem(last=False)
            self.used -= m
            if dirty:
                self.dram_writes += m
        return False

    def dirty_bytes(self) -> int:
        return sum(n for n, dirty in self._blocks.values() if dirty)

    def __repr__(self):
        return (f"L2Cache({self.capacity / MB:.3g} MB: {self.hits} hits, {self.misses} misses, DRAM read "
                f"{self.dram_reads} B, written {self.dram_writes} B, {self.dirty_bytes()} B dirty)")
