"""Closed forms for flashref's Triton kernels as written (``flashref/gpu/kernels.py``, kernel 2).

* :func:`kernel_model`: the HBM bytes of one forward+backward, line by line of the kernels, with no
  cache (what ``python -m flashref profile`` compares with Nsight Compute's DRAM and L2 counters);
* :func:`padding_waste`: the share of the matmul work spent on the zero columns that pad a head
  dimension to the next power of two on chip (``kernels.pad_dim``; the backward, and the forward
  where d does not split); :func:`dim_split` and :func:`forward_padding_waste`: the forward's two
  column tiles and what they still waste; :func:`padding_table` tabulates both.

Needs neither torch nor triton.
"""

from __future__ import annotations

import numbers

import numpy as np

from .._numbers import _bool, at_most, positive_int
from ..problem import SEQ_LEN
from .flash2 import band_totals

__all__ = ["kernel_model", "pad_dim", "dim_split", "padding_waste", "forward_padding_waste", "padding_table",
           "FA_TEST_HEAD_DIMS"]

# The head dimensions of the FlashAttention repository's test grid (tests/test_flash_attn.py)
FA_TEST_HEAD_DIMS = (32, 40, 59, 64, 80, 96, 111, 128, 160, 192, 256)


def pad_dim(d: int) -> int:
    """The tile width the kernels use for head dimension d: the next power of two, at least 16
    (``tl.arange`` needs a power of two, ``tl.dot`` at least 16). Same rule as ``kernels.pad_dim``."""
    d = _head_dim(d)
    return max(16, 1 << (d - 1).bit_length())


def _head_dim(d) -> int:
    """``d`` as a Python int in 1..256 (numpy's integers too, as the rest of the package takes them)."""
    if isinstance(d, (bool, np.bool_)) or not isinstance(d, numbers.Integral) or not 1 <= d <= 256:
        raise ValueError(f"d: expected an integer in 1..256, got {d!r}")
    return int(d)


def padding_waste(d: int) -> float:
    """Fraction of the kernels' matmul FLOPs spent on padding: ``1 − d / pad_dim(d)``.

    Every matmul of Algorithms 1 and 2 has d as its inner dimension (S = Q Kᵀ, dP = dO Vᵀ) or as
    one outer dimension (P V, dS K, Pᵀ dO, dSᵀ Q), so each runs over pad_dim(d) columns where d
    carry data. The HBM traffic is not padded: the loads mask the extra columns (they read d)."""
    return 1.0 - d / pad_dim(d)


def dim_split(d: int) -> tuple[int, int]:
    """The forward kernel's column tiles for head dimension d: ``(D_A, D_B)``, a power of two D_A <= d
    and a second tile of ``pad_dim(d - D_A)`` columns, where the two together are narrower than one
    pad_dim(d) tile (96 = 64 + 32, 80 = 64 + 16, 160 = 128 + 32, 192 = 128 + 64, 40 -> 32 + 16).
    Otherwise ``(pad_dim(d), 0)``: one tile (d a power of two, or 111 -> 64 + 64, no narrower).
    ``tl.arange`` needs powers of two, so this is as narrow as two tiles get."""
    d = _head_dim(d)
    D = pad_dim(d)
    a = max(16, 1 << (d.bit_length() - 1))  # the largest power of two <= d, at least 16
    if d <= a:
        return D, 0
    b = pad_dim(d - a)
    return (a, b) if a + b < D else (D, 0)


def forward_padding_waste(d: int) -> float:
    """Share of the forward's matmul FLOPs spent on padding with the split tiles: ``1 − d / (D_A + D_B)``."""
    return 1.0 - d / sum(dim_split(d))


def padding_table(dims=FA_TEST_HEAD_DIMS) -> list[tuple[int, int, float, tuple[int, int], float]]:
    """``(d, pad_dim(d), padding_waste(d), dim_split(d), forward_padding_waste(d))`` for each d."""
    return [(d, pad_dim(d), padding_waste(d), dim_split(d), forward_padding_waste(d)) for d in dims]


def kernel_model(B, H, N, d, blocks, causal=False, e=2):
    """HBM bytes of flashref's kernels as written (no cache): per (batch, head), then × B·H.

    ``blocks`` = {"fwd": (BM, BN), "dkdv_atomic": (BM, BN)} for the default backward (atomic dQ),
    or {"fwd": ..., "dkdv": ..., "dq": ...} for the deterministic one; L, D and the atomic dQ are
    fp32 (4 bytes).
    forward: Q once, K and V once per visited (i, j), O written, L written.
    D pre-pass: read O and dO, write D (and zeros into the fp32 dQ).  dK/dV: K_j, V_j once; Q_i, dO_i
    (and L_i, D_i) per visited (j, i); write dK, dV.  Atomic dQ: an fp32 read-modify-write of dQ_i per
    visited (j, i), then one pass reading it and writing dQ.  dQ kernel: Q_i, dO_i, L_i, D_i once; K_j,
    V_j per visited (i, j); write dQ.
    """
    # Python ints, checked as predict checks sizes: numpy's 32-bit integers would wrap in the products below
    B, H, N, d, e = (positive_int(x, name) for x, name in ((B, "B"), (H, "H"), (N, "N"), (d, "d"), (e, "e")))
    N = at_most(N, "N", SEQ_LEN)
    if not isinstance(blocks, dict):
        raise TypeError(f"blocks: expected a dict of (BM, BN) tiles by kernel, got {type(blocks).__name__}")
    atomic = "dkdv_atomic" in blocks
    needed = ("fwd", "dkdv_atomic") if atomic else ("fwd", "dkdv", "dq")
    missing = [k for k in needed if k not in blocks]
    if missing:
        raise ValueError(f"blocks: no {', '.join(missing)} tiles (expected {' and '.join(needed)})")
    blocks = {k: tuple(positive_int(x, f"blocks[{k!r}]") for x in blocks[k]) for k in needed}
    (fm, fn), (km, kn) = blocks["fwd"], blocks["dkdv_atomic" if atomic else "dkdv"]
    reach = 2 * N  # a side without a bound (causal: none ahead)
    ahead = 0 if _bool(causal, "causal") else reach
    pairs_dkdv = band_totals(N, kn, N, km, ahead, reach).loaded  # (j, i) pairs, in rows of Q
    lines = {
        "fwd: Q_i": (N * d * e, 0),
        "fwd: K_j, V_j per (i, j)": (2 * d * e * band_totals(N, fm, N, fn, reach, ahead).loaded, 0),
        "fwd: O_i, L_i": (0, N * d * e + 4 * N),
        "D pre-pass": (2 * N * d * e, 4 * N + (4 * N * d if atomic else 0)),
        "dkdv: K_j, V_j": (2 * N * d * e, 0),
        "dkdv: Q_i, dO_i, L_i, D_i per (j, i)": ((2 * d * e + 8) * pairs_dkdv, 0),
        "dkdv: dK_j, dV_j": (0, 2 * N * d * e),
    }
    if atomic:
        lines["dkdv: dQ_i += dS_ij K_j (fp32 atomics) per (j, i)"] = (4 * d * pairs_dkdv, 4 * d * pairs_dkdv)
        lines["dQ = τ dQ (fp32 → fp16)"] = (4 * N * d, N * d * e)
    else:
        qm, qn = blocks["dq"]
        lines["dq: Q_i, dO_i, L_i, D_i"] = ((2 * d * e + 8) * N, 0)
        lines["dq: K_j, V_j per (i, j)"] = (2 * d * e * band_totals(N, qm, N, qn, reach, ahead).loaded, 0)
        lines["dq: dQ_i"] = (0, N * d * e)
    heads = B * H
    reads = heads * sum(r for r, _ in lines.values())
    writes = heads * sum(w for _, w in lines.values())
    return dict(read_bytes=reads, write_bytes=writes, total_bytes=reads + writes,
                by_line={k: (heads * r, heads * w) for k, (r, w) in lines.items()})
