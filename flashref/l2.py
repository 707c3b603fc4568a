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

Presets (:func:`preset`): the H100 SXM and the H200 have 50 MB of L2 (hardware.py), split in two
partitions of 25 MB, each attached to half the memory controllers. An SM reads a line through the
partition near it; a line whose home is the far partition travels over the fabric between the two
and may be kept in both. For DRAM traffic only the home copy matters (a near-side miss that hits
the far partition is fabric traffic, ``lts__t_sectors_srcunit_ltcfabric``, not DRAM traffic), so
the model treats the two partitions as **one LRU of an effective capacity** ``capacity``; how much
of the 50 MB the K and V tiles of a wave really get (other data, duplicated lines, the hash of
addresses over sets) is a fitted parameter of :mod:`flashref.iomodel.dram` (``C_eff``), not
assumed.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from .problem import _bool, _nonnegative_int, positive_int

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


def _l2_size(name, default):
    try:
        from . import hardware
        return hardware.get(name).l2_size
    except (ImportError, KeyError, ValueError, AttributeError):
        return default


PRESETS = {
    "h100": L2Spec("H100 SXM5 (50 MB L2, 2 partitions)", _l2_size("H100", 50 * MB)),
    "h200": L2Spec("H200 SXM (50 MB L2, 2 partitions)", _l2_size("H200", 50 * MB)),
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
        self._blocks: OrderedDict = OrderedDict()  # key -> [nbytes, dirty]
        self.used = 0
        self.reads = self.writes = self.dram_reads = self.dram_writes = 0
        self.hits = self.misses = 0

    def _size(self, nbytes):
        lb = self.line_bytes
        return -(-int(nbytes) // lb) * lb

    def access(self, key, nbytes: int, write: bool = False) -> bool:
        """Touch ``key``, a block of ``nbytes`` (the same size each time); returns True on a hit."""
        n = self._size(_nonnegative_int(nbytes, "nbytes"))  # negative bytes would count negative traffic
        write = _bool(write, "write")
        blk = self._blocks.get(key)
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
        return (f"L2Cache({self.capacity / MB:.1f} MB: {self.hits} hits, {self.misses} misses, DRAM read "
                f"{self.dram_reads} B, written {self.dram_writes} B, {self.dirty_bytes()} B dirty)")
