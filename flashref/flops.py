"""FLOP counting as the algorithm runs.

Two kinds, because GPUs price them differently (FlashAttention-2 §3.1: an A100 does 312 TFLOP/s of
fp16 matmul but 19.5 TFLOP/s of fp32 non-matmul, so a non-matmul FLOP costs 16x more):

* ``matmul``: a product of an (m, k) and a (k, n) matrix costs ``2 * m * k * n`` (a multiply and
  an add per term), counted from the shapes of the arrays really multiplied.
* ``nonmatmul``: one FLOP per element per elementwise operation or reduction step (scale, mask,
  max, subtract, exp, sum, divide, dropout multiply...).

The counting rides on the operation, so each formula of the paper stays one statement: the
counter's methods compute *and* count, and each elementwise count names its operations::

    fc = FlopCounter()
    S_ij = fc.scores(Q_i, K_j, tau)                                  # τ Q_i K_jᵀ: 2·Br·d·Bc + Br·Bc
    m_ij = fc.rowmax(S_ij)                                           # Br·Bc comparisons
    P_ij = fc.ew(np.exp(S_ij - m_ij[..., None]), "subtract", "exp")  # 2·Br·Bc
    print(fc.report())

Of the non-matmul FLOPs, those that run on the exponential unit (``exp``, ``log``, ``tanh``: the
special-function unit of NVIDIA GPUs: an H100 SXM5 does 989 TFLOP/s of fp16 matmul but 3.9
TFLOP/s of special functions, FlashAttention-3 §3) are also counted apart, as ``flops.exp``:
softcapping's tanh adds one per score to the forward's one exp per score.

A matmul's accumulate into an existing block (``O_i + P̃_ij V_j``) is the matmul's own add, not
counted again: tensor cores do ``D = A·B + C`` in one instruction.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .problem import _nonnegative_int, require_finite

__all__ = ["FlopReport", "FlopCounter"]

#: Operations that run on the exponential (special-function) unit.
_EXP_UNIT = ("exp", "log", "tanh")


@dataclass
class FlopReport:
    """Matmul and non-matmul FLOPs of one run. Reports add."""

    matmul: int = 0
    nonmatmul: int = 0
    exp: int = 0  # of ``nonmatmul``: the exponential-unit operations (exp, log, tanh)

    @property
    def total(self) -> int:
        return self.matmul + self.nonmatmul

    def __add__(self, other: FlopReport) -> FlopReport:
        if not isinstance(other, FlopReport):
            return NotImplemented
        return FlopReport(self.matmul + other.matmul, self.nonmatmul + other.nonmatmul, self.exp + other.exp)

    def __radd__(self, other):
        return self if other == 0 else self.__add__(other)

    def __str__(self) -> str:
        return (f"FLOPs: matmul {self.matmul:,}  non-matmul {self.nonmatmul:,}  "
                f"total {self.total:,}")


def matmul(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """``A @ B``; with float32 operands, summed in float64 and rounded once to float32.

    Why: numpy hands a float32 product to OpenBLAS, which picks its kernel (and with it the order of the
    additions) by CPU, so the same call rounds differently on two machines, and a recorded figure would not
    reproduce. A float32 product is exact in float64 and the float64 sums differ by about 1e-16, so rounding
    them to float32 gives the same bits on (almost) every machine: the correctly rounded fp32 result that an
    fp32 accumulator approximates."""
    if np.result_type(A, B) == np.float32:
        return np.matmul(A.astype(np.float64), B.astype(np.float64)).astype(np.float32)
    return A @ B


class FlopCounter:
    """Counts FLOPs of the arrays an algorithm really computes with."""

    def __init__(self):
        self._matmul = 0
        self._nonmatmul = 0
        self._exp = 0

    def matmul(self, A: np.ndarray, B: np.ndarray) -> np.ndarray:
        """Return ``A @ B`` (:func:`matmul`) and count ``2 * m * k * n`` for every leading (batch, head) index."""
        C = matmul(A, B)
        k = A.shape[-1]
        # C holds m*n outputs per head, each a dot product of length k: k multiplies + k adds.
        self._matmul += 2 * int(C.size) * int(k)
        return C

    def scores(self, Q_i: np.ndarray, K_j: np.ndarray, tau: float) -> np.ndarray:
        """``S = τ Q Kᵀ``: the matmul and the scale in its epilogue (rule 5).

        Raises ``FloatingPointError`` if finite inputs overflow the compute dtype: every later
        step would turn the infinities into NaN.
        """
        with np.errstate(over="ignore", invalid="ignore"):  # an overflow is reported below, as an error
            S = self.ew(self.matmul(Q_i, K_j.swapaxes(-1, -2)) * tau, "scale")
        return require_finite(S, "scores τ·QKᵀ")

    def add_bias(self, S: np.ndarray, B: np.ndarray) -> np.ndarray:
        """``S + B``, one FLOP per element. The bias may hold -inf (a masked entry: the score becomes -inf
        on purpose), never +inf or NaN (refused when the bias is given); a sum of two finite numbers that
        overflows, to +inf or to -inf, raises ``FloatingPointError``, as :meth:`scores` does, instead of a NaN
        in the softmax or a row silently taken as masked."""
        with np.errstate(over="ignore", invalid="ignore"):  # an overflow is reported below, as an error
            X = self.ew(S + B, "add bias")
        # -inf on purpose only where S (an earlier MASK) or B (a masked entry) already held it
        overflow = ~np.isfinite(X) & ~np.isneginf(S) & ~np.isneginf(B)
        if overflow.any():
            require_finite(np.where(overflow, X, 0), "scores τ·QKᵀ + bias")
        return X

    def ew(self, X: np.ndarray, *ops: str) -> np.ndarray:
        """Return ``X``, counting one FLOP per element of ``X`` for each named operation that made it."""
        self._nonmatmul += len(ops) * int(np.size(X))
        self._exp += sum(op in _EXP_UNIT for op in ops) * int(np.size(X))
        return X

    def rowmax(self, X: np.ndarray) -> np.ndarray:
        """``rowmax(X)`` over the last axis: one comparison per element of ``X``."""
        self._nonmatmul += int(np.size(X))
        return X.max(axis=-1)

    def rowsum(self, X: np.ndarray) -> np.ndarray:
        """``rowsum(X)`` over the last axis: one addition per element of ``X``."""
        self._nonmatmul += int(np.size(X))
        return X.sum(axis=-1)

    def elementwise(self, X, ops: int = 1) -> None:
        """Count ``ops`` non-matmul FLOPs for every element of ``X`` (the first arc's form of :meth:`ew`)."""
        self._nonmatmul += _nonnegative_int(ops, "ops") * int(np.size(X))

    def report(self) -> FlopReport:
        return FlopReport(self._matmul, self._nonmatmul, self._exp)
