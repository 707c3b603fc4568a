"""2^x on the FMA units: the exponential that FlashAttention-4 computes without the multi-function unit.

At head dimension 64 the softmax's exponentials take about as long as the GEMMs on an H100: a row of S costs
4·d = 256 tensor-core flops per element and one ``ex2`` on the multi-function unit (MUFU), which does 16 a
clock per SM against the tensor cores' ~4096 flops (FlashAttention-3 §3.1: 989 TFLOP/s of matmul against
3.9 TFLOP/s of special functions). FlashAttention-4 (the flash-attention repository's Blackwell kernels, 2025)
computes part of the exponentials with ordinary fused multiply-adds instead, so both units work:

    2^x = 2^j · 2^f,   j = round(x),  f = x − j ∈ [−½, ½]

* 2^f by a polynomial p(f) of low degree (Horner: ``degree`` FMAs);
* 2^j by adding j to the float's exponent field: the bits of p(f) plus j·2^23 (an integer add).

The rounding uses the "magic number" trick: t = x + 1.5·2^23 rounds x to an integer in t's low mantissa bits,
so j = t − 1.5·2^23 and ``bits(t) << 23`` is j·2^23 without a float-to-int conversion. Arguments below −126
would leave the exponent's range; the softmax never needs them (2^−126 is 0 in fp16 and bf16's P̃), so they are
clamped first.

This module holds the fit and a numpy model of the kernel's arithmetic (float32 throughout) so the trick can be
read, tested and plotted on a CPU; kernel 3 (``kernel3.py``, ``Tiles3.emu``) runs the same lines in Gluon.
On an H100 that made kernel 3's forward slower at every fraction tried (figures/gpu/NOTES.md): on Hopper the
FMA and issue slots are no freer than the MUFU.
"""

from __future__ import annotations

import numpy as np

MAGIC = 1.5 * 2.0 ** 23  # x + MAGIC rounds x to an integer, kept in the low mantissa bits of the sum
LOWEST = -126.0  # the clamp: 2^−126 is the smallest normal float32


def coefficients(degree: int = 3, nodes: int = 2000) -> np.ndarray:
    """c_0 … c_degree of p(f) = Σ c_k f^k ≈ 2^f on [−½, ½]: least squares of the *relative* error
    (p(f) − 2^f) / 2^f on Chebyshev nodes, which is close to the minimax fit. Degree 3 (FlashAttention-4's
    cubic) keeps the float32 result within about 1.4e-4 of 2^x (:func:`max_relative_error`), under half an
    fp16 ulp (4.9e-4): P̃ is rounded to fp16 or bf16 before the P̃V product anyway."""
    if degree < 1:
        raise ValueError(f"degree must be at least 1, got {degree}")
    f = 0.5 * np.cos(np.pi * (np.arange(nodes) + 0.5) / nodes)
    y = 2.0 ** f
    A = np.vander(f, degree + 1, increasing=True) / y[:, None]
    return np.linalg.lstsq(A, np.ones_like(f), rcond=None)[0]


def exp2_fma(x, c: np.ndarray | None = None) -> np.ndarray:
    """2^x in float32 by the lines kernel 3 runs (clamp, round by MAGIC, Horner, exponent add)."""
    c = coefficients() if c is None else np.asarray(c)
    x = np.maximum(np.asarray(x, dtype=np.float32), np.float32(LOWEST))
    t = x + np.float32(MAGIC)  # round(x) in t's low mantissa bits
    j = t - np.float32(MAGIC)
    f = x - j  # in [−½, ½]
    p = np.full_like(f, np.float32(c[-1]))
    for ck in c[-2::-1]:  # Horner: one FMA per coefficient
        p = p * f + np.float32(ck)
    bits = p.view(np.int32) + (t.view(np.int32) << 23)  # 2^j: j added to the exponent field
    return bits.view(np.float32)


def max_relative_error(c: np.ndarray | None = None, lo: float = -126.0, hi: float = 0.0, n: int = 200001) -> float:
    """max |exp2_fma(x) / 2^x − 1| over [lo, hi] (the softmax's range: x ≤ 0), against float64."""
    x = np.linspace(lo, hi, n, dtype=np.float32)
    return float(np.max(np.abs(exp2_fma(x, c).astype(np.float64) / np.exp2(x.astype(np.float64)) - 1.0)))
