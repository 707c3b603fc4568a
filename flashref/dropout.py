"""Counter-based dropout: the keep mask is a pure function of (seed, leading index, row, column).

FlashAttention never stores the N x N dropout mask. The forward saves only the generator state R
(Alg.2 l.1) and the backward regenerates the mask from it (Alg.4 l.1, l.14). That works because a
counter-based generator (Philox in the CUDA kernels; see flash-attention issue #612) computes the
random number of entry (row, col) from its coordinates alone, in whatever order the tiles visit
them. We use the same idea with a simple 64-bit mixing function (SplitMix64's finaliser), which is
enough for teaching: the keep decisions pass the statistical checks in the tests, but it is not a
cryptographic or Philox-quality generator. The seed is taken modulo 2^64 (it keys a 64-bit generator):
``seed`` and ``seed + 2**64`` drop the same entries, here and in the GPU kernels alike.

Example::

    Z = dropout.scale_mask(seed=0, p=0.1, lead_shape=(2,), rows=(0, 4), cols=(0, 8))  # (2, 4, 8)
"""

from __future__ import annotations

import numbers

import numpy as np

from ._numbers import _nonnegative_int, _seed

__all__ = ["uniform", "keep_mask", "scale_mask"]

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def _mix(x: np.ndarray) -> np.ndarray:
    # SplitMix64's finaliser: every input bit affects every output bit. uint64 arithmetic wraps.
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def uniform(seed: int, lead_shape: tuple, rows: tuple[int, int], cols: tuple[int, int]) -> np.ndarray:
    """Uniform numbers in [0, 1) for entries ``rows x cols`` of every leading index: shape ``lead + (r, c)``."""
    # int(seed) took 1.5, True and "3" as seeds, a reversed range gave an empty mask and a negative one a raw
    # OverflowError
    seed = _seed(seed)
    lead_shape, rows, cols = _lead(lead_shape), _pair(rows, "rows"), _pair(cols, "cols")
    G = int(np.prod(lead_shape, dtype=np.int64)) if lead_shape else 1
    g = np.arange(G, dtype=np.uint64).reshape(tuple(lead_shape) + (1, 1))  # linear (batch, head) index
    i = np.arange(rows[0], rows[1], dtype=np.uint64)[:, None]  # (r, 1)
    j = np.arange(cols[0], cols[1], dtype=np.uint64)[None, :]  # (1, c)
    with np.errstate(over="ignore"):
        # Chain the coordinates through the mixer one at a time, so (g, i, j) and (g, j, i) differ.
        h = _mix(np.uint64(int(seed) & 0xFFFFFFFFFFFFFFFF) * _GOLDEN + _GOLDEN)  # int(): numpy's ints too
        h = _mix(h ^ (g * _GOLDEN))
        h = _mix(h ^ (i + np.uint64(1)) * _GOLDEN)
        h = _mix(h ^ (j + np.uint64(2)) * _GOLDEN)
    # top 53 bits -> a double in [0, 1)
    return (h >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))


def _lead(lead_shape) -> tuple:
    if not isinstance(lead_shape, (tuple, list)):
        raise TypeError(f"lead_shape: expected a tuple of non-negative integers, got {lead_shape!r}")
    return tuple(_nonnegative_int(n, "lead_shape") for n in lead_shape)


def _pair(r, name: str) -> tuple[int, int]:
    """A half-open ``(start, stop)`` range of coordinates, ``0 <= start <= stop``."""
    if not isinstance(r, (tuple, list)) or len(r) != 2:
        raise TypeError(f"{name}: expected a range (start, stop) of two integers, got {r!r}")
    start, stop = _nonnegative_int(r[0], name), _nonnegative_int(r[1], name)
    if start > stop:
        raise ValueError(f"{name}: expected a range (start, stop) with 0 <= start <= stop, got {tuple(r)}")
    return start, stop


def keep_mask(seed: int, p: float, lead_shape: tuple, rows, cols) -> np.ndarray:
    """Boolean mask, True where the entry is kept (probability ``1 - p``)."""
    check_p(p)
    return uniform(seed, lead_shape, rows, cols) >= p


def check_p(p, name: str = "p") -> float:
    """The one rule for a dropout probability (here ``p``; ``dropout_p`` in the options): a real number, a 0-d
    array too, in [0, 1), not a bool. Returns it as a float."""
    if isinstance(p, np.ndarray) and p.ndim == 0:
        p = p[()]
    # p < 0 would keep everything and p = 1 drop everything (and scale_mask divide by 1 − p = 0): neither is
    # a dropout probability, and a NaN fails both comparisons.
    if isinstance(p, (bool, np.bool_)) or not isinstance(p, numbers.Real) or not 0.0 <= p < 1.0:
        raise ValueError(f"{name}: expected a dropout probability in [0, 1), got {p!r}")
    return float(p)


def scale_mask(seed: int, p: float, lead_shape: tuple, rows, cols, dtype=np.float64) -> np.ndarray:
    """The paper's Z (Alg.4 l.14): ``1/(1-p)`` where kept, ``0`` where dropped."""
    return keep_mask(seed, p, lead_shape, rows, cols).astype(dtype) / dtype(1.0 - p)
