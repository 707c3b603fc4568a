"""Input checking shared by every algorithm: clear errors that name the argument.

Each public ``forward``/``backward`` calls :func:`attention_problem` first. It returns a
:class:`Problem` holding the arrays in the dtype they will be computed in and the options
normalised, so the algorithm modules can read like the paper and trust their inputs.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

import numpy as np

__all__ = ["Problem", "attention_problem", "check_like", "check_block_sizes", "check_block_mask",
           "check_flash_stats", "positive_int"]


@dataclass
class Problem:
    Q: np.ndarray
    K: np.ndarray
    V: np.ndarray
    lead_shape: tuple
    Nq: int
    Nk: int
    d: int
    scale: float
    causal: bool
    mask: np.ndarray | None  # broadcast to lead + (Nq, Nk), or None
    dropout_p: float
    seed: int
    sram_size: int | None
    block_sizes: tuple[int, int] | None
    dtype_bytes: int

    @property
    def dtype(self):
        return self.Q.dtype

    def dropout_Z(self, rows: tuple[int, int], cols: tuple[int, int]) -> np.ndarray:
        """Z of the tile ``rows x cols`` (Alg.4 l.14), regenerated from the seed: never stored."""
        from .dropout import scale_mask

        return scale_mask(self.seed, self.dropout_p, self.lead_shape, rows, cols, self.dtype.type)


def _array(x, name: str) -> np.ndarray:
    try:
        a = np.asarray(x)
    except Exception as e:  # e.g. a CUDA tensor
        raise TypeError(f"{name}: expected a numpy array of floats, got {type(x).__name__}") from e
    if a.dtype == object or not (np.issubdtype(a.dtype, np.floating) or np.issubdtype(a.dtype, np.integer)):
        raise TypeError(f"{name}: expected a real floating-point array, got dtype {a.dtype}")
    return a


def _compute_dtype(*arrays):
    # float64 stays float64; float16/float32/integers compute in at least float32.
    return np.result_type(*(a.dtype for a in arrays), np.float32)


def _finite(a: np.ndarray, name: str) -> None:
    if not np.isfinite(a).all():
        raise ValueError(f"{name}: contains NaN or inf")


def positive_int(x, name: str) -> int:
    if isinstance(x, bool) or not isinstance(x, numbers.Integral):
        raise TypeError(f"{name}: expected a positive integer, got {x!r}")
    if x <= 0:
        raise ValueError(f"{name}: expected a positive integer, got {x}")
    return int(x)


def check_block_sizes(block_sizes) -> tuple[int, int] | None:
    if block_sizes is None:
        return None
    if not isinstance(block_sizes, (tuple, list)) or len(block_sizes) != 2:
        raise TypeError(f"block_sizes: expected a pair (Br, Bc), got {block_sizes!r}")
    return (positive_int(block_sizes[0], "block_sizes[0] (Br)"),
            positive_int(block_sizes[1], "block_sizes[1] (Bc)"))


def attention_problem(Q, K, V, *, scale=None, causal=False, mask=None, dropout_p=0.0, seed=0,
                      sram_size=None, block_sizes=None, dtype_bytes=2) -> Problem:
    """Check Q, K, V and the shared options; raise ``ValueError``/``TypeError`` naming the culprit."""
    Q, K, V = _array(Q, "Q"), _array(K, "K"), _array(V, "V")
    for a, name, rows in ((Q, "Q", "Nq"), (K, "K", "Nk"), (V, "V", "Nk")):
        if a.ndim < 2:
            raise ValueError(f"{name}: expected shape (..., {rows}, d) with at least 2 axes, got {a.shape}")
        if a.shape[-1] == 0 or a.shape[-2] == 0:
            raise ValueError(f"{name}: expected non-empty {rows} and d, got shape {a.shape}")
    if K.shape[-1] != Q.shape[-1]:
        raise ValueError(f"K: head dimension {K.shape[-1]} does not match Q's {Q.shape[-1]}")
    if V.shape[-1] != Q.shape[-1]:
        raise ValueError(f"V: head dimension {V.shape[-1]} does not match Q's {Q.shape[-1]}")
    if V.shape[-2] != K.shape[-2]:
        raise ValueError(f"V: length {V.shape[-2]} does not match K's {K.shape[-2]} (K and V pair up row by row)")
    lead = Q.shape[:-2]
    for a, name in ((K, "K"), (V, "V")):
        if a.shape[:-2] != lead:
            raise ValueError(f"{name}: leading (batch, head) axes {a.shape[:-2]} do not match Q's {lead}")
    for a, name in ((Q, "Q"), (K, "K"), (V, "V")):
        _finite(a, name)
    dt = _compute_dtype(Q, K, V)
    Q, K, V = Q.astype(dt), K.astype(dt), V.astype(dt)
    Nq, Nk, d = Q.shape[-2], K.shape[-2], Q.shape[-1]

    if scale is None:
        scale = 1.0 / math.sqrt(d)
    elif isinstance(scale, bool) or not isinstance(scale, numbers.Real) or not math.isfinite(scale):
        raise ValueError(f"scale: expected a finite real number or None, got {scale!r}")
    if not isinstance(causal, (bool, np.bool_)):
        raise TypeError(f"causal: expected True or False, got {causal!r}")
    if mask is not None:
        m = np.asarray(mask)
        if m.dtype != np.bool_:
            raise TypeError(f"mask: expected a boolean array (True = attend), got dtype {m.dtype}")
        try:
            mask = np.broadcast_to(m, lead + (Nq, Nk))
        except ValueError:
            raise ValueError(f"mask: shape {m.shape} does not broadcast to (..., Nq, Nk) = {lead + (Nq, Nk)}") from None
    if isinstance(dropout_p, bool) or not isinstance(dropout_p, numbers.Real) or not (0.0 <= dropout_p < 1.0):
        raise ValueError(f"dropout_p: expected a probability in [0, 1), got {dropout_p!r}")
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
        raise TypeError(f"seed: expected an integer, got {seed!r}")
    if sram_size is not None:
        sram_size = positive_int(sram_size, "sram_size")
    block_sizes = check_block_sizes(block_sizes)
    dtype_bytes = positive_int(dtype_bytes, "dtype_bytes")
    return Problem(Q, K, V, lead, Nq, Nk, d, float(scale), bool(causal), mask, float(dropout_p),
                   int(seed), sram_size, block_sizes, dtype_bytes)


def check_like(x, name: str, shape: tuple, dtype) -> np.ndarray:
    """Check a saved tensor or upstream gradient (``dO``, ``O``, ``P``, ``l``, ``m``, ``L``) has ``shape``."""
    a = _array(x, name)
    if a.shape != tuple(shape):
        raise ValueError(f"{name}: expected shape {tuple(shape)}, got {a.shape}")
    return a.astype(dtype)


def check_finite(a: np.ndarray, name: str) -> None:
    _finite(a, name)


def check_block_mask(block_mask, Tr: int, Tc: int) -> np.ndarray:
    """A block-sparsity mask must be boolean of shape (Tr, Tc), one entry per tile."""
    a = np.asarray(block_mask)
    if a.dtype != np.bool_:
        raise TypeError(f"block_mask: expected a boolean array of shape (Tr, Tc) = ({Tr}, {Tc}), got dtype {a.dtype}")
    if a.shape != (Tr, Tc):
        raise ValueError(f"block_mask: expected shape (Tr, Tc) = ({Tr}, {Tc}), got {a.shape}")
    return a


def check_flash_stats(pb: Problem, O, dO, l, m):
    """Check the tensors FlashAttention's backward takes from its forward (Alg.4's Require line)."""
    O = check_like(O, "O", pb.Q.shape, pb.dtype)
    dO = check_like(dO, "dO", pb.Q.shape, pb.dtype)
    l = check_like(l, "l", pb.lead_shape + (pb.Nq,), pb.dtype)
    m = check_like(m, "m", pb.lead_shape + (pb.Nq,), pb.dtype)
    for a, name in ((O, "O"), (dO, "dO"), (l, "l")):
        _finite(a, name)
    if np.isnan(m).any() or np.isposinf(m).any():
        raise ValueError("m: expected finite row maxima (or -inf for fully masked rows)")
    if (l < 0).any():
        raise ValueError("l: expected non-negative row sums")
    return O, dO, l, m
