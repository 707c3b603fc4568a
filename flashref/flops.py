"""FLOP counting as the algorithm runs.

Two kinds, because GPUs price them differently (FlashAttention-2 §3.1: an A100 does 312 TFLOP/s of
fp16 matmul but 19.5 TFLOP/s of fp32 non-matmul, so a non-matmul FLOP costs 16x more):

* ``matmul``: a product of an (m, k) and a (k, n) matrix costs ``2 * m * k * n`` (a multiply and
  an add per term), counted from the shapes of the arrays really multiplied.
* ``nonmatmul``: one FLOP per element per elementwise operation or reduction step (scale, mask,
  max, subtract, exp, sum, divide, dropout multiply...). The algorithm names how many operations
  it applies to an array; the counter takes the array's size from the array itself.

Example::

    fc = FlopCounter()
    S = fc.matmul(Q_i, K_j.swapaxes(-1, -2))      # 2 * Br * d * Bc (times heads)
    fc.elementwise(S, ops=3)                       # max, subtract, exp: 3 * Br * Bc
    print(fc.report())
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["FlopReport", "FlopCounter"]


@dataclass
class FlopReport:
    """Matmul and non-matmul FLOPs of one run. Reports add."""

    matmul: int = 0
    nonmatmul: int = 0

    @property
    def total(self) -> int:
        return self.matmul + self.nonmatmul

    def __add__(self, other: FlopReport) -> FlopReport:
        if not isinstance(other, FlopReport):
            return NotImplemented
        return FlopReport(self.matmul + other.matmul, self.nonmatmul + other.nonmatmul)

    def __radd__(self, other):
        return self if other == 0 else self.__add__(other)

    def __str__(self) -> str:
        return (f"FLOPs: matmul {self.matmul:,}  non-matmul {self.nonmatmul:,}  "
                f"total {self.total:,}")


class FlopCounter:
    """Counts FLOPs of the arrays an algorithm really computes with."""

    def __init__(self):
        self._matmul = 0
        self._nonmatmul = 0

    def matmul(self, A: np.ndarray, B: np.ndarray) -> np.ndarray:
        """Return ``A @ B`` and count ``2 * m * k * n`` for every leading (batch, head) index."""
        C = A @ B
        k = A.shape[-1]
        # C holds m*n outputs per head, each a dot product of length k: k multiplies + k adds.
        self._matmul += 2 * int(C.size) * int(k)
        return C

    def elementwise(self, X, ops: int = 1) -> None:
        """Count ``ops`` non-matmul FLOPs for every element of ``X``."""
        self._nonmatmul += int(ops) * int(np.size(X))

    def report(self) -> FlopReport:
        return FlopReport(self._matmul, self._nonmatmul)
