"""Low precision: FlashAttention-3's FP8 forward (Shah et al. 2024, arXiv 2407.08608, §3.3, §4.3).

FlashAttention-2's forward loop (:mod:`flashref.flash2`, Algorithm 1) with Q, K, V stored in FP8,
as ``flash2.forward(Q, K, V, fp8="e4m3", ...)`` runs it. The extra lines are marked ``# FP8:``.

* **Formats** come from ``ml_dtypes``: ``"e4m3"`` (float8_e4m3fn: max 448, 3 mantissa bits, no
  inf) and ``"e5m2"`` (float8_e5m2: max 57344, 2 mantissa bits). Casts **saturate**: a value is
  clipped to ±max before the cast, because ml_dtypes turns an overflow into NaN (e4m3fn) or inf
  (e5m2), where the GPU's ``cvt.satfinite`` gives ±max.
* **Scales** (``fp8_scaling``): a tensor X is stored as ``X8 = cast(X / s)`` with the descale
  ``s = amax / max_format`` (1 where amax = 0), so ``X ≈ s · X8``. ``"tensor"``: one s per head's
  ``(N, d)`` matrix, as FlashAttention-3's ``q_descale`` of shape (batch, heads). ``"block"``: one s
  per ``Br×d`` tile of Q and per ``Bc×d`` tile of K and V, the tiles of the loop; it therefore
  needs explicit ``block_sizes``: the scales are made before the kernel runs, so the tiling cannot
  be left to depend on ``sram_size``. The S and P·V accumulators are descaled in fp32.
* **Incoherent processing** (``incoherent=True``): Q and K are multiplied by the same random
  orthogonal matrix ``M = D H / √d`` (D a ±1 diagonal drawn from ``incoherent_seed``, H the
  Walsh–Hadamard matrix, applied in O(d log d) by :func:`fwht`). ``(QM)(KM)ᵀ = QKᵀ``, but an
  outlier coordinate is spread over all d coordinates before rounding. d must be a power of two.
* **P**: with ``p_fp8``, P̃_ij = exp(S_ij − m_i^new) is multiplied by ``p_scale`` and cast before
  P̃_ij·V_j (ℓ_i sums the fp32 P̃_ij, as the kernel does); the product is divided by ``p_scale``.
  Dropout zeroes the dropped entries of P̃ before the cast and multiplies the product by 1/(1 − p),
  so P̃·p_scale ≤ p_scale is all the cast sees.
  ``key_order="reverse"`` visits the key blocks last to first (FlashAttention-3's mainloop does).
  ``.p_underflow`` marks the entries whose P̃·p_scale > 0 was cast to 0.
* Accumulation and the softmax statistics are fp32 whenever an FP8 option is set.

IO: the FP8 tiles are counted with ``dtype_bytes=1`` (``io.by_tensor["Q"].dtype_bytes``), the
float32 scales ``"Q_scale"``, ``"K_scale"``, ``"V_scale"`` with 4, and ``io.bytes`` adds them up.
A tensor-wide scale is read once per row block (each thread block reads its copy); a block scale
is read with its tile. The quantisation and the rotation happen before the kernel (fused into the
previous layer, or into the rotary embedding, §3.3): like every input they start in HBM at no cost.
``iomodel.predict("flash2", "forward", fp8=..., ...)`` counts it exactly (:mod:`flashref.iomodel.lowp`).
"""

from __future__ import annotations

import numbers

import ml_dtypes
import numpy as np

from . import blocks, flash2, masks
from .dropout import keep_mask
from .flops import FlopCounter
from .memory import Memory
from .problem import Problem, _bool, _nonnegative_int, check_finite, overflow_checked, positive_int, require_finite
from .problem import check_options as _check_names
from .results import ForwardResult
from .softmax import finite_or_zero

__all__ = ["FORMATS", "OPTIONS", "fmax", "cast", "decode", "fwht", "random_signs", "rotate", "quantize",
           "check_options", "requested", "footprint", "grid", "forward"]

FORMATS = {"e4m3": ml_dtypes.float8_e4m3fn, "e5m2": ml_dtypes.float8_e5m2}
# The options this module adds to flash2.forward, with their defaults (all off).
OPTIONS = {"fp8": None, "p_fp8": None, "fp8_scaling": None, "incoherent": False, "incoherent_seed": 0,
           "p_scale": 1.0, "key_order": "forward"}
SCALE_BYTES = 4  # descales are float32
_F32 = np.finfo(np.float32)
# as Python floats: compared with a Python float, a float32 would cast it to float32 (and warn of the overflow)
_F32_TINY, _F32_MAX = float(_F32.tiny), float(_F32.max)


def fmax(dtype) -> float:
    """Largest finite value of a storage dtype (448 for e4m3, 57344 for e5m2, 65504 for float16)."""
    try:
        return float(ml_dtypes.finfo(dtype).max)
    except (TypeError, ValueError):  # ml_dtypes' own message names no argument ("data type ... not inexact")
        raise TypeError(f"dtype: expected a floating-point storage dtype such as ml_dtypes.float8_e4m3fn "
                        f"(lowp.FORMATS[{sorted(FORMATS)[0]!r}]), got {dtype!r}") from None


def cast(X: np.ndarray, dtype) -> np.ndarray:
    """Round X to ``dtype`` (to nearest, ties to even) with saturation: clip to ±max first (ml_dtypes would give
    NaN or inf). float64 goes through float32 rounded to odd, so that it is rounded once, not twice."""
    m = fmax(dtype)
    X = np.clip(np.asarray(X), -m, m)
    if X.dtype == np.float64:
        X = _float32_round_to_odd(X)
    return X.astype(dtype)


def _float32_round_to_odd(X: np.ndarray) -> np.ndarray:
    """X (float64) as float32, truncated toward zero and its last bit set where that lost anything.

    Why: ml_dtypes casts float64 to FP8 through float32, rounding twice. 1.0625 + 2^-30 is above the midpoint of
    E4M3's 1 and 1.125, so it rounds to 1.125; but float32 first rounds it to 1.0625, the midpoint itself, whose
    tie then goes to the even 1. Rounding to odd (Boldo and Melquiond, 2008) keeps "above, below or on a midpoint"
    intact for any later rounding to a format with at least two bits fewer, which FP8's 3-4 bits are next to
    float32's 24: the second rounding is then the correct one."""
    X32 = X.astype(np.float32)  # to nearest
    back = X32.astype(np.float64)
    inexact = (back != X) & ~np.isnan(X)
    # rounded away from zero: one float32 step back toward it (truncation), then the sticky last bit
    X32 = np.where(inexact & (np.abs(back) > np.abs(X)), np.nextafter(X32, np.float32(0)), X32)
    bits = X32.view(np.uint32)
    return np.where(inexact, bits | np.uint32(1), bits).view(np.float32)


def decode(X: np.ndarray, dtype=np.float32) -> np.ndarray:
    """Exact values of a 1-byte float array as ``dtype``, by a 256-entry table (numpy's astype is slow)."""
    X = np.asarray(X)
    if X.dtype.itemsize != 1:
        return X.astype(dtype)
    table = np.arange(256, dtype=np.uint8).view(X.dtype).astype(dtype)
    return table[X.view(np.uint8)]


def fwht(X: np.ndarray) -> np.ndarray:
    """Normalised fast Walsh–Hadamard transform along the last axis: ``X H / √d``, O(d log d) per row.

    H is symmetric and ``H H = d I``, so the transform is its own inverse.
    """
    X = np.array(X, dtype=np.result_type(X, np.float32))
    if X.ndim == 0:
        raise ValueError("X: expected at least one axis (the rows' coordinates are the last), got a scalar")
    d = X.shape[-1]
    if d & (d - 1):
        raise ValueError(f"d: the Walsh–Hadamard transform needs a power of two, got {d}")
    h = 1
    while h < d:  # log2(d) butterfly stages, each touching every coordinate once
        Y = X.reshape(X.shape[:-1] + (d // (2 * h), 2, h))  # (..., blocks, pair, h)
        a, b = Y[..., 0, :].copy(), Y[..., 1, :].copy()
        Y[..., 0, :], Y[..., 1, :] = a + b, a - b
        h *= 2
    return X / np.sqrt(d)


def random_signs(d: int, seed: int) -> np.ndarray:
    """The ±1 diagonal D of incoherent processing, a pure function of ``seed``."""
    # checked as incoherent_seed is: numpy took seed=True as 1 and named nothing for -1 or 1.5
    d, seed = _nonnegative_int(d, "d"), _nonnegative_int(seed, "seed")
    return np.random.default_rng(seed).choice(np.array([-1.0, 1.0]), size=d)


def rotate(X: np.ndarray, seed: int) -> np.ndarray:
    """``X D H / √d`` (rows of X rotated): apply to Q and K with the same seed; QKᵀ is unchanged."""
    return fwht(X * random_signs(X.shape[-1], seed))


def quantize(X: np.ndarray, dtype, rows_per_block: int | None = None, *, name: str = "X"):
    """``(X8, s)`` with ``X ≈ s · X8``: one descale per head (``rows_per_block=None``) or per tile of rows.

    ``s`` has shape ``lead + (T,)`` with T = ⌈N / rows_per_block⌉ (1 per tensor; 0 where N = 0: no rows, no tile).
    ``name`` names X in errors.
    """
    X = np.asarray(X)
    if X.ndim < 2:
        raise ValueError(f"{name}: expected an array of shape (..., N, d), got shape {X.shape}")
    if X.dtype.kind not in "iuf":
        raise TypeError(f"{name}: expected a real floating-point array, got dtype {X.dtype}")
    check_finite(X, name)  # a NaN gave s = 1 and NaN codes; an inf, s = inf and NaN codes: both silently
    # float16 or integers: divide in float32 at least. In float16 the descale itself rounded coarsely or to 0
    # (max|X| = 1e-5 gave s = 6e-8 instead of 2.2e-8, saturating X/s; integers gave s = 0 and X/0).
    X = X.astype(np.result_type(X, np.float32), copy=False)
    m = fmax(dtype)
    N = X.shape[-2]
    # one tile of every row (at least one row: an empty X has no tile, as with any rows_per_block)
    B = max(N, 1) if rows_per_block is None else positive_int(rows_per_block, "rows_per_block")
    big = float(np.abs(X).max(initial=0.0))
    if big / m > _F32_MAX:  # the descale would be inf, and X/inf gave zeros silently
        raise FloatingPointError(f"{name}: max |{name}| = {big:.3g} needs a descale max/{m:g} past float32's "
                                 f"largest value {_F32_MAX:.3g} (descales are float32): scale {name} down")
    T = -(-N // B)
    s = np.empty(X.shape[:-2] + (T,), dtype=np.float32)
    X8 = np.empty(X.shape, dtype=dtype)
    for t in range(T):
        r0, r1 = blocks.tile(t, B, N)
        exact = np.abs(X[..., r0:r1, :]).max(axis=(-2, -1)).astype(np.float64) / m
        s_t = exact.astype(np.float32)
        # Below float32's normal range (max|X| < ~5e-36 for e4m3) the descale rounds to a coarse subnormal: rounded
        # down, max/s went up to 1.5 max and saturated (30% error); round it up instead, so nothing saturates. A
        # tiny amax rounds up to the smallest subnormal, not 0 (X/0 was NaN): such values underflow in FP8.
        # (In the normal range, rounding down moves max/s by under 2⁻²⁴: it still rounds to max. Left as is.)
        s_t = np.where((s_t < exact) & (s_t < _F32.tiny), np.nextafter(s_t, np.float32(np.inf)), s_t)
        s[..., t] = np.where(exact > 0, s_t, 1.0)
        X8[..., r0:r1, :] = cast(X[..., r0:r1, :] / s[..., t, None, None].astype(X.dtype), dtype)
    return X8, s


def _format(value, name: str):
    if value is None:
        return None
    if isinstance(value, str) and value in FORMATS:
        return FORMATS[value]
    raise ValueError(f"{name}: expected None or one of {sorted(FORMATS)}, got {value!r}")


def _values(fp8=None, p_fp8=None, fp8_scaling=None, incoherent=False, incoherent_seed=0, p_scale=1.0,
            key_order="forward") -> dict:
    """The options' own checks, which need no problem: each value, and the options that need another."""
    qkv, p = _format(fp8, "fp8"), _format(p_fp8, "p_fp8")
    if fp8_scaling is not None and (not isinstance(fp8_scaling, str) or fp8_scaling not in ("tensor", "block")):
        raise ValueError(f"fp8_scaling: expected 'tensor' or 'block', got {fp8_scaling!r}")
    if fp8_scaling is not None and qkv is None:
        raise ValueError(f"fp8_scaling={fp8_scaling!r} needs fp8='e4m3' or 'e5m2' (Q, K, V in FP8)")
    # non-negative: numpy's generator (random_signs) refuses a negative seed with a message that names nothing
    incoherent, seed = _bool(incoherent, "incoherent"), _nonnegative_int(incoherent_seed, "incoherent_seed")
    if seed != 0 and not incoherent:
        raise ValueError("incoherent_seed: only used with incoherent=True")
    # P̃·p_scale is made in fp32 and the product divided by it: outside float32's normal range, s_v / p_scale
    # overflowed (p_scale = 1e-40: a FloatingPointError blaming the inputs) or P̃·p_scale did (1e39).
    if isinstance(p_scale, np.ndarray) and p_scale.ndim == 0:  # a 0-d array, as scale and dropout_p take it
        p_scale = p_scale[()]
    if (isinstance(p_scale, (bool, np.bool_)) or not isinstance(p_scale, numbers.Real)
            or not (_F32_TINY <= p_scale <= _F32_MAX)):
        raise ValueError(f"p_scale: expected a finite number > 0 in float32's normal range "
                         f"[{_F32_TINY:.3g}, {_F32_MAX:.3g}] (P̃ is scaled in fp32), got {p_scale!r}")
    if p_scale != 1.0 and p is None:
        raise ValueError(f"p_scale={p_scale!r} needs p_fp8='e4m3' or 'e5m2' (P is only scaled to be cast)")
    if not isinstance(key_order, str) or key_order not in ("forward", "reverse"):
        raise ValueError(f"key_order: expected 'forward' or 'reverse', got {key_order!r}")
    return dict(qkv=qkv, p=p, scaling=(fp8_scaling or "tensor") if qkv is not None else None,
                incoherent=incoherent, seed=seed, p_scale=float(p_scale), reverse=key_order == "reverse")


def check_options(pb: Problem, **opts) -> dict:
    """Normalise the low-precision options (shared by the simulator and ``iomodel``); clear errors."""
    _check_names(opts, OPTIONS, "lowp.check_options")  # else Python's bare "unexpected keyword argument"
    d, block_sizes = pb.d, pb.block_sizes
    if pb.bias is not None:
        raise ValueError("bias: not supported with the low-precision options (FlashAttention-3's FP8 forward has none)")
    # enable_gqa with Hq = Hkv (a group of 1) changes nothing, so it is accepted.
    for name, on in (("enable_gqa", pb.group != 1), ("window", pb.window is not None),
                     ("alibi_slopes", pb.alibi_slopes is not None), ("softcap", pb.softcap is not None)):
        if on:
            raise ValueError(f"{name}: not supported with the low-precision options (the FP8 loop here has "
                             f"FlashAttention-2's plain lines only)")
    lp = _values(**opts)
    if lp["scaling"] == "block" and block_sizes is None:
        raise ValueError("fp8_scaling='block' needs block_sizes=(Br, Bc): one scale per Br×d tile of Q and "
                         "Bc×d tile of K, V, fixed before the kernel runs (got block_sizes=None)")
    if lp["incoherent"] and d & (d - 1):
        raise ValueError(f"incoherent: the fast Walsh–Hadamard transform needs d a power of two, got d={d}; "
                         f"pad Q and K with zero columns to {1 << (d - 1).bit_length()} (QKᵀ is unchanged) "
                         "or set incoherent=False")
    return lp


def requested(opts: dict) -> bool:
    """True when ``opts`` sets any low-precision option to other than its default.

    The values are checked first, whatever they are: a wrongly typed value equal to the default
    (``incoherent=0``) is refused as any other, and nothing is compared with ``==`` unchecked.
    """
    return _values(**{k: v for k, v in opts.items() if k in OPTIONS}) != _values()


def footprint(Br: int, Bc: int, d: int, scaled: bool = True) -> int:
    """On-chip elements per head: FlashAttention-2's tiles, plus the three descales held (Q's, K_j's, V_j's)."""
    return flash2.footprint_forward(Br, Bc, d) + (3 if scaled else 0)


def _grid(pb: Problem, scaled: bool) -> blocks.Grid:
    return blocks.grid_for(pb, lambda r, c, d: footprint(r, c, d, scaled))


def grid(pb: Problem, **opts) -> blocks.Grid:
    """The tiling of the FP8 loop for the low-precision options ``opts``: FlashAttention-2's rule
    fitted to :func:`footprint` (three descales more on chip when Q, K, V are scaled)."""
    return _grid(pb, check_options(pb, **opts)["scaling"] is not None)


@overflow_checked("O")  # called directly as through flash2.forward: no RuntimeWarning, an overflow raised
def forward(Q, K, V, **opts) -> ForwardResult:
    """FlashAttention-2's forward with the FP8 options (see the module docstring).

    Returns what ``flash2.forward`` returns, plus ``.scales`` (the descales ``{"Q", "K", "V"}`` or
    None) and ``.p_underflow`` (boolean ``(..., Nq, Nk)``, or None without ``p_fp8``).
    """
    lp_opts = {k: opts.pop(k) for k in list(opts) if k in OPTIONS}
    pb = Problem.from_arrays(Q, K, V, "flash2.forward", flash2.OPTIONS + tuple(OPTIONS), **opts)
    lp = check_options(pb, **lp_opts)
    return run(pb, **lp)


# With FP8 the accumulators are fp32 whatever the inputs' dtype: float64 inputs would not help.
FP32_CURE = "scale the inputs down (the FP8 path accumulates in fp32 whatever the inputs' dtype)"


def run(pb, *, qkv, p, scaling, incoherent=False, seed=0, p_scale=1.0, reverse=False) -> ForwardResult:
    """The loop, for a checked problem. ``qkv`` and ``p`` are storage dtypes (or None for none);
    ``scaling`` is "tensor", "block" or None (unscaled storage, e.g. float16)."""
    g = _grid(pb, scaling is not None)
    Br, Bc = g.Br, g.Bc
    Nq, Nk, d, lead = pb.Nq, pb.Nk, pb.d, pb.lead_shape
    low = qkv is not None or p is not None
    cdt = np.dtype(np.float32) if low else pb.dtype  # FP8: accumulate in fp32, as on the GPU
    mem = Memory(pb.sram_size, pb.dtype_bytes, lead)
    fc = FlopCounter()
    # FP8 (host, before the kernel, not counted): rotate Q and K, then quantise Q, K, V with their descales.
    Qh, Kh = (rotate(pb.Q, seed), rotate(pb.K, seed)) if incoherent else (pb.Q, pb.K)
    scales = None
    if qkv is None:
        inputs = {"Q": (Qh, None), "K": (Kh, None), "V": (pb.V, None)}
    elif scaling is None:
        inputs = {n: (cast(X, qkv), np.dtype(qkv).itemsize) for n, X in (("Q", Qh), ("K", Kh), ("V", pb.V))}
    else:
        rb = {"Q": Br, "K": Bc, "V": Bc} if scaling == "block" else dict.fromkeys("QKV")
        q = {n: quantize(X, qkv, rb[n], name=n) for n, X in (("Q", Qh), ("K", Kh), ("V", pb.V))}
        inputs = {n: (X8, 1) for n, (X8, _) in q.items()}
        scales = {n: s for n, (_, s) in q.items()}
        for n, s in scales.items():
            mem.input(f"{n}_scale", s, dtype_bytes=SCALE_BYTES)
    for name, (X, nbytes) in inputs.items():
        mem.input(name, X, dtype_bytes=nbytes)  # FP8: Q, K, V stored in 1 byte per element

    def up(X):  # FP8 → fp32 operands of the tensor-core matmul (exact)
        return decode(X, cdt)

    one = np.ones(lead + (1,), dtype=cdt)
    s_q = s_k = s_v = one
    underflow = np.zeros(lead + (Nq, Nk), dtype=bool) if p is not None else None

    Tr, Tc = -(-Nq // Br), -(-Nk // Bc)  # Alg.1 l.1
    mem.output("O", (Nq, d), dtype=cdt)
    mem.output("L", (Nq,), dtype=cdt)
    for i in range(Tr):  # Alg.1 l.3
        rows = blocks.tile(i, Br, Nq)
        Q_i = mem.load("Q", rows=rows, as_="Q_i", line="Alg.1 l.4")  # (Br, d), FP8
        if scaling == "block":  # FP8: Q_i's own descale
            s_q = mem.load("Q_scale", rows=(i, i + 1), as_="Q_scale_i", line="Alg.1 l.4 descales").astype(cdt)  # (1,)
        elif scaling == "tensor":  # FP8: the tensor's descales, once per row block
            s_q = mem.load("Q_scale", rows=(0, 1), as_="Q_scale_i", line="Alg.1 l.4 descales").astype(cdt)
            s_k = mem.load("K_scale", rows=(0, 1), as_="K_scale_j", line="Alg.1 l.4 descales").astype(cdt)
            s_v = mem.load("V_scale", rows=(0, 1), as_="V_scale_j", line="Alg.1 l.4 descales").astype(cdt)
        O_i = mem.hold("O_i", np.zeros(Q_i.shape, dtype=cdt))  # Alg.1 l.5
        l_i = mem.hold("l_i", np.zeros(Q_i.shape[:-1], dtype=cdt))
        m_i = mem.hold("m_i", np.full(Q_i.shape[:-1], -np.inf, dtype=cdt))
        # Alg.1 l.6, with causal skipping; FP8: key_order="reverse" visits the blocks last to first.
        visited = [j for j in range(Tc) if flash2.block_visited(pb.causal, rows, blocks.tile(j, Bc, Nk))]
        for j in (visited[::-1] if reverse else visited):
            cols = blocks.tile(j, Bc, Nk)
            K_j = mem.load("K", rows=cols, as_="K_j", line="Alg.1 l.7")  # (Bc, d), FP8
            V_j = mem.load("V", rows=cols, as_="V_j", line="Alg.1 l.7")  # (Bc, d), FP8
            if scaling == "block":  # FP8: the descales of K_j and V_j, with their tiles
                s_k = mem.load("K_scale", rows=(j, j + 1), as_="K_scale_j", line="Alg.1 l.7 descales").astype(cdt)
                s_v = mem.load("V_scale", rows=(j, j + 1), as_="V_scale_j", line="Alg.1 l.7 descales").astype(cdt)
            # Alg.1 l.8: S_ij = τ Q_i K_jᵀ; FP8: FP8 products summed in fp32, times τ·s_q·s_k.
            with np.errstate(over="ignore", invalid="ignore"):  # an overflow is raised just below, not warned
                S_ij = fc.matmul(up(Q_i), up(K_j).swapaxes(-1, -2))  # (Br, Bc)
                fc.elementwise(S_ij)
                S_ij = S_ij * (pb.scale * s_q * s_k)[..., None]
            S_ij = mem.hold("S_ij", require_finite(S_ij, "scores τ·QKᵀ", FP32_CURE if low else None))
            attend = masks.tile_mask(pb.mask, flash2.mask_needed(pb.causal, rows, cols), rows, cols)
            if attend is not None:
                S_ij = mem.hold("S_ij", masks.apply(S_ij, attend))
                fc.elementwise(S_ij)
            # Alg.1 l.9: m_i^new, P̃_ij, ℓ_i^new (fp32).
            m_new = mem.hold("m_new", np.maximum(m_i, S_ij.max(axis=-1)))  # (Br,)
            fc.elementwise(S_ij)
            fc.elementwise(m_new)
            m_safe = finite_or_zero(m_new)
            P_tilde = mem.hold("S_ij", np.exp(S_ij - m_safe[..., None]))  # (Br, Bc)
            fc.elementwise(P_tilde, ops=2)
            alpha = mem.hold("m_i", np.exp(m_i - m_safe))  # (Br,)
            fc.elementwise(alpha, ops=2)
            l_i = mem.hold("l_i", alpha * l_i + P_tilde.sum(axis=-1))  # ℓ from the fp32 P̃
            fc.elementwise(P_tilde)
            fc.elementwise(l_i, ops=2)
            s_pv = s_v
            if pb.dropout_p > 0:
                # Dropout, P̃_ij ∘ Z_ij with Z = keep/(1 − p): P̃ takes the 0/1 keep mask only, and 1/(1 − p) joins
                # the descale of the product. So the FP8 cast below sees P̃·p_scale ≤ p_scale (with Z inside it
                # reached p_scale/(1 − p), 512 > 448 at p_scale = 256, p = 0.5, and saturated), and the loop stays
                # fp32 (Z comes in the inputs' dtype: float64 inputs made P̃·V and O_i float64). The mask is Z's own
                # (the same seed and tile); the FP8 options refuse a GQA group, so Q's heads are the loop's.
                keep = keep_mask(pb.seed, pb.dropout_p, pb.lead_shape, rows, cols)  # (Br, Bc) bool
                P_tilde = mem.hold("S_ij", np.where(keep, P_tilde, 0))  # (Br, Bc), cdt
                fc.elementwise(P_tilde)
                s_pv = s_pv / (1.0 - pb.dropout_p)
            if p is not None:
                # FP8: P̃_ij · p_scale cast to FP8 in place (saturating); entries > 0 that became 0 underflowed.
                P_scaled = P_tilde * p_scale
                P_tilde = mem.hold("S_ij", up(cast(P_scaled, p)))  # (Br, Bc), exact FP8 values
                underflow[..., rows[0]:rows[1], cols[0]:cols[1]] = (P_scaled > 0) & (P_tilde == 0)
                fc.elementwise(P_tilde, ops=2)  # scale, cast
                s_pv = s_pv / p_scale
            # Alg.1 l.10: O_i = diag(e^{m_i − m_i^new}) O_i + P̃_ij V_j; FP8: the product times s_v / p_scale
            # (and by 1/(1 − p) with dropout).
            with np.errstate(over="ignore", invalid="ignore"):  # an overflow is raised just below, not warned
                PV = fc.matmul(P_tilde, up(V_j))  # (Br, d)
                if s_pv is not one:
                    PV = PV * s_pv[..., None]
                    fc.elementwise(PV)
                fc.elementwise(O_i)
                O_i = alpha[..., None] * O_i + PV
            O_i = mem.hold("O_i", require_finite(O_i, "the accumulator O_i (with its product P̃_ij V_j)",
                                                  FP32_CURE if low else None))
            m_i = mem.hold("m_i", m_new)
            mem.free("K_j", "V_j", "S_ij", "m_new", *(("K_scale_j", "V_scale_j") if scaling == "block" else ()))
        # Alg.1 l.12-15: normalise, log-sum-exp, write O_i and L_i once.
        O_i = mem.hold("O_i", O_i / np.where(l_i == 0, 1.0, l_i)[..., None])
        fc.elementwise(O_i)
        L_i = np.where(l_i == 0, -np.inf, m_i + np.log(np.where(l_i == 0, 1.0, l_i)))
        fc.elementwise(L_i, ops=2)
        mem.free("m_i")
        L_i = mem.hold("L_i", L_i)
        mem.store("O", O_i, rows=rows, line="Alg.1 l.14")
        mem.store("L", L_i, rows=rows, line="Alg.1 l.15")
        mem.free("Q_i", "O_i", "l_i", "L_i", "Q_scale_i", "K_scale_j", "V_scale_j")
    return ForwardResult(O=mem.result("O"), L=mem.result("L"), io=mem.report(), flops=fc.report(),
                         events=mem.events, block_sizes=(Br, Bc), scales=scales, p_underflow=underflow)
