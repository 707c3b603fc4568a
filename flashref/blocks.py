"""Tiling, in one place: block sizes, the grid of tiles, and the row range of each tile.

Algorithm 1 l.1 sets ``Bc = ⌈M/4d⌉, Br = min(⌈M/4d⌉, d)``. The constant 4 is there "so that the
proof works out" (tridao, flash-attention issue #175): those blocks keep Bc·d (K_j), Bc·d (V_j),
Br·d (Q_i, O_i) and Br·Bc (S_ij) each within M/4 or so, but their *sum*, plus the row statistics
and the temporaries of the O update, can exceed M. Each algorithm module gives a ``footprint``
function that returns what its loop really holds on chip (the tests check it equals the peak the
simulated memory measures), and :func:`resolve` picks:

1. the explicit ``block_sizes`` if given (an ``SRAMOverflowError`` if they do not fit ``sram_size``);
2. else the paper's sizes for ``M = sram_size`` if their footprint fits;
3. else the largest blocks that fit, shrinking Bc and keeping the paper's shape ``Br = min(Bc, d)``.

Without ``sram_size`` the default M is :data:`DEFAULT_SRAM_BYTES` = 100,000 bytes ("M around
100KB", §3.2 of the paper) divided by ``dtype_bytes``: 50,000 elements of fp16. Blocks longer
than the sequence are clipped to it: one block then covers everything and moves the same data.

Every algorithm module exposes ``footprint(Br, Bc, d)`` and ``grid(pb)``; :mod:`flashref.iomodel`
calls the same ``grid`` on a shapes-only problem, so the closed forms tile exactly as the
simulator does.

Example::

    g = blocks.grid_for(pb, flash2.footprint_forward)
    for i in range(g.Tr):
        rows = g.rows(i)          # (start, stop) of row block i; the last may be ragged
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .memory import SRAMOverflowError
from .problem import _nonnegative_int, positive_int

__all__ = ["DEFAULT_SRAM_BYTES", "paper_block_sizes", "default_sram_size", "resolve", "tile", "cdiv", "Grid",
           "grid_for"]

DEFAULT_SRAM_BYTES = 100_000


def cdiv(a: int, b: int) -> int:
    """⌈a / b⌉ for ``a >= 0`` and ``b > 0`` (the number of blocks of size ``b`` covering ``a``)."""
    # Two comparisons, no type checks: the loops call this; a block of 0 would divide by zero.
    if not b > 0:
        raise ValueError(f"b: expected a positive block size, got {b!r}")
    if not a >= 0:
        raise ValueError(f"a: expected a non-negative length, got {a!r}")
    return -(-a // b)


def paper_block_sizes(M: int, d: int) -> tuple[int, int]:
    """Alg.1 l.1: ``(Br, Bc) = (min(⌈M/4d⌉, d), ⌈M/4d⌉)``, for an on-chip size ``M`` and head dimension ``d``."""
    M, d = positive_int(M, "M"), positive_int(d, "d")  # M = 0 would give 0x0 blocks, d = 0 divide by zero
    Bc = cdiv(M, 4 * d)
    return min(Bc, d), Bc


def tile(i: int, B: int, N: int) -> tuple[int, int]:
    """Half-open range of block ``i`` of size ``B`` along a length-``N`` axis (the last block may be ragged)."""
    return (i * B, min((i + 1) * B, N))


def default_sram_size(dtype_bytes: int = 2) -> int:
    """The default M in elements: 100 KB (100,000 bytes, the paper's "around 100KB") of on-chip memory at
    ``dtype_bytes`` per element."""
    M = DEFAULT_SRAM_BYTES // positive_int(dtype_bytes, "dtype_bytes")
    if M < 2:  # not one element of Q and one of K: no tile fits, whatever the shape
        raise ValueError(f"dtype_bytes: the default on-chip memory of {DEFAULT_SRAM_BYTES:,} bytes holds {M} "
                         f"element(s) of {dtype_bytes} bytes; pass sram_size, or a dtype_bytes of at most "
                         f"{DEFAULT_SRAM_BYTES // 2:,}")
    return M


@dataclass(frozen=True)
class Grid:
    """Block sizes ``(Br, Bc)`` and counts ``Tr = ⌈Nq/Br⌉``, ``Tc = ⌈Nk/Bc⌉`` (Alg.1 l.3-4).

    It unpacks, and indexes, as the four numbers ``(Br, Bc, Tr, Tc)``, so ``Br, Bc, Tr, Tc = g``.
    """

    Br: int
    Bc: int
    Tr: int
    Tc: int
    Nq: int
    Nk: int

    @classmethod
    def of(cls, Br: int, Bc: int, Nq: int, Nk: int) -> Grid:
        """The grid of ``Br x Bc`` tiles over ``Nq`` queries and ``Nk`` keys (blocks positive, lengths >= 0)."""
        Br, Bc = positive_int(Br, "Br"), positive_int(Bc, "Bc")
        Nq, Nk = _nonnegative_int(Nq, "Nq"), _nonnegative_int(Nk, "Nk")
        return cls(Br, Bc, cdiv(Nq, Br), cdiv(Nk, Bc), Nq, Nk)

    def rows(self, i: int) -> tuple[int, int]:
        """Rows of row block i (of Q, O, ℓ, m, L)."""
        return tile(i, self.Br, self.Nq)

    def cols(self, j: int) -> tuple[int, int]:
        """Keys of column block j (rows of K, V)."""
        return tile(j, self.Bc, self.Nk)

    def _four(self):
        return (self.Br, self.Bc, self.Tr, self.Tc)

    def __iter__(self):
        return iter(self._four())

    def __getitem__(self, k):
        return self._four()[k]

    def __len__(self):
        return 4


def resolve(pb, footprint: Callable[[int, int, int], int], packed: int = 1) -> tuple[int, int]:
    """Block sizes ``(Br, Bc)`` for problem ``pb`` given ``footprint(Br, Bc, d)`` in elements per head.

    ``packed``: loop rows a query position (g with packed GQA, whose footprint counts g·Br rows), for the errors."""
    d, Nq, Nk = pb.d, pb.Nq, pb.Nk
    rows = "" if packed == 1 else f" ({packed}·Br rows with the group's {packed} query heads packed)"
    if pb.block_sizes is not None:
        Br, Bc = min(pb.block_sizes[0], Nq), min(pb.block_sizes[1], Nk)
        need = footprint(Br, Bc, d)
        if pb.sram_size is not None and need > pb.sram_size:
            raise SRAMOverflowError(
                f"block_sizes=(Br={Br}, Bc={Bc}){rows} need an on-chip footprint of {need} elements per head, "
                f"more than sram_size={pb.sram_size}")
        return Br, Bc
    M = pb.sram_size if pb.sram_size is not None else default_sram_size(pb.dtype_bytes)
    Br0, Bc0 = paper_block_sizes(M, d)
    # Try the paper's Bc first, then smaller ones; Br keeps the paper's relation to Bc.
    for Bc in range(Bc0, 0, -1):
        Br = min(Bc, Br0)
        Br_c, Bc_c = min(Br, Nq), min(Bc, Nk)
        if footprint(Br_c, Bc_c, d) <= M:
            return Br_c, Bc_c
    default = "" if pb.sram_size is not None else f" (the default, {DEFAULT_SRAM_BYTES} bytes of the dtype)"
    raise SRAMOverflowError(
        f"even 1x1 blocks{rows} need an on-chip footprint of {footprint(1, 1, d)} elements per head "
        f"with d={d}, more than sram_size={M}{default}; pass a larger sram_size= (M, in elements)")


def grid_for(pb, footprint: Callable[[int, int, int], int]) -> Grid:
    """The grid of problem ``pb`` for a loop whose on-chip footprint is ``footprint``: the one resolver."""
    Br, Bc = resolve(pb, footprint)
    return Grid.of(Br, Bc, pb.Nq, pb.Nk)
