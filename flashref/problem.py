"""One way in: every option of every entry point is checked here, by the same rules.

An attention *problem* is the shapes (``Nq``, ``Nk``, ``d``, the leading batch/head axes) plus the
options shared by all algorithms. It is built either from the arrays (:meth:`Problem.from_arrays`,
what ``standard.forward`` and friends call) or from shapes alone (:meth:`Problem.from_shapes`,
what ``iomodel.predict`` calls). Both go through the same option checks, so the simulator and the
closed forms accept and refuse exactly the same values: an unknown option is a ``TypeError`` that
names it and lists the valid ones; a bad value is a ``ValueError``/``TypeError`` naming the option.

The shared options (the public contract, README):

=================  ===========================================================================
``scale``          ``None`` (1/√d, as PyTorch) or a finite real
``causal``         ``True``/``False``: query ``i`` sees keys ``j <= i`` (top-left aligned)
``mask``           ``None`` or a boolean array broadcastable to ``(..., Nq, Nk)``, True = attend
``bias``           ``None`` or a float array broadcastable to ``(..., Nq, Nk)``, added to the
                   scaled scores and read from HBM (a variant: not ``decoding``'s)
``dropout_p``      a probability in [0, 1)
``seed``           an integer: the dropout mask is a pure function of (seed, head, row, column)
``sram_size``      ``None`` or a positive integer: M, in elements per head
``block_sizes``    ``None`` or a pair of positive integers ``(Br, Bc)``
``dtype_bytes``    a positive integer: bytes per element, for ``io.bytes``
=================  ===========================================================================

The attention variants (taken by the modules that list them in their
``OPTIONS``, see :mod:`flashref.variants` for what each one does on chip and to the IO):

=================  ===========================================================================
``enable_gqa``     ``True``/``False``: K, V may have ``Hkv`` heads on axis -3 where Q has ``Hq``
                   (``Hq`` a multiple of ``Hkv``); query head h uses K/V head ``h // (Hq // Hkv)``
``gqa_packing``    ``True``/``False`` (flash2): the query heads of a group share one K/V tile load
``window``         ``None`` or ``(left, right)``: query i sees keys ``i - left <= j <= i + right``;
                   -1 is unbounded on that side; combinable with ``causal``
``alibi_slopes``   ``None`` or a float array broadcastable to the leading (head) axes:
                   ``-slope·|i - j|`` is added to the scaled (and capped) scores
``softcap``        ``None`` or a float > 0: scores become ``softcap·tanh(scores/softcap)``
=================  ===========================================================================

From shapes, ``kv_heads`` (the product of K's leading axes, with ``enable_gqa``) says the group
size, and ``alibi_slopes=True`` says "there are slopes" (only their presence changes the IO). An
empty batch's products (``heads=0, kv_heads=0``) cannot say the group, so from shapes it is 1; the
simulator reads it from the head axes. With ``gqa_packing`` the two can then resolve different
block sizes (and refuse different ``sram_size`` values) for a call that moves nothing.

Algorithm-specific options (``num_splits`` and ``sms`` of ``decoding``) are declared by the
module that uses them and checked by it; this module only knows which names are allowed.

Example::

    pb = Problem.from_shapes("my sweep", Nq=1024, Nk=1024, d=64, heads=16, causal=True)
    pb.Nq, pb.heads, pb.causal
"""

from __future__ import annotations

import dataclasses
import functools
import math
import numbers
from dataclasses import dataclass

import numpy as np

# re-exported: the entry points import them from here (they live apart so that the grader's bundle has them)
from ._numbers import _bool, _nonnegative_int, _seed, at_most, finite_float, positive_int, positive_real  # noqa: F401
from .dropout import check_p, scale_mask
from .softmax import finite_or_masked

__all__ = ["Problem", "SHARED_OPTIONS", "VARIANT_OPTIONS", "MAX_N", "check_options", "positive_int", "check_like",
           "check_finite", "check_block_sizes", "require_finite", "overflow_checked", "cast_checked",
           "check_masked_rows"]

#: The options every algorithm takes, with their defaults.
SHARED_OPTIONS = {"scale": None, "causal": False, "mask": None, "dropout_p": 0.0, "seed": 0,
                  "sram_size": None, "block_sizes": None, "dtype_bytes": 2}

#: The attention variants, taken by ``standard``, ``flash1``, ``blocksparse``, ``flash2`` (``decoding``: all but bias).
VARIANT_OPTIONS = ("bias", "enable_gqa", "window", "alibi_slopes", "softcap")


def check_options(opts: dict, allowed, where: str) -> None:
    """Refuse an option ``where`` does not know, naming it and listing the valid ones."""
    unknown = [k for k in opts if k not in allowed]
    if unknown:
        names = ", ".join(repr(k) for k in unknown)
        raise TypeError(f"{where}: unknown option{'s' if len(unknown) > 1 else ''} {names}; "
                        f"valid options are {', '.join(sorted(allowed))}")


# --------------------------------------------------------------------------- single values



#: The longest sequence (Nq, Nk) any entry point takes: GPU kernels index a sequence with 32-bit integers
#: (``iomodel.dram.MAX_N``, the same bound). Checked by ``from_shapes`` and ``from_arrays`` alike, so ``predict``
#: refuses what the simulator refuses, at once. (FlashAttention-2's closed forms sum the row blocks without a loop,
#: ``iomodel.flash2.band_totals``; the per-block lists, ``kv_per_row_block`` and the like, and a block mask have a
#: term a block, which for Nq = 10**12 would take hours and gigabytes.)
MAX_N = 2 ** 31 - 1


#: MAX_N as positive_int's and _nonnegative_int's ``bound`` (and :func:`_seq_len`'s), in the words of its errors
SEQ_LEN = (MAX_N, f"a sequence length of at most {MAX_N} (32-bit indices)")


def _seq_len(n: int, name: str) -> int:
    """A length ``n`` already known to be an integer (an array's), refused above :data:`MAX_N`, naming ``name``."""
    return at_most(n, name, SEQ_LEN)


def check_block_sizes(block_sizes) -> tuple[int, int] | None:
    if block_sizes is None:
        return None
    if not isinstance(block_sizes, (tuple, list)) or len(block_sizes) != 2:
        raise TypeError(f"block_sizes: expected a pair (Br, Bc) of positive integers, got {block_sizes!r}")
    return (positive_int(block_sizes[0], "block_sizes[0] (Br)"),
            positive_int(block_sizes[1], "block_sizes[1] (Bc)"))


def _scale(scale, d: int) -> float:
    if scale is None:  # 1/√d; at d = 0 (the torch fronts take it) every score is 0 whatever the scale
        return 1.0 / math.sqrt(d) if d else 1.0
    if isinstance(scale, np.ndarray) and scale.ndim == 0:  # a 0-d array, as dropout_p takes one (dropout.check_p)
        scale = scale[()]
    if isinstance(scale, (bool, np.bool_)) or not isinstance(scale, numbers.Real):
        raise ValueError(f"scale: expected a finite real number or None, got {scale!r}")
    value = finite_float(scale, "scale", "a finite real number or None")
    if not math.isfinite(value):
        raise ValueError(f"scale: expected a finite real number or None, got {scale!r}")
    return value


def _causal(causal) -> bool:
    if not isinstance(causal, (bool, np.bool_)):
        raise TypeError(f"causal: expected True or False, got {causal!r}")
    return bool(causal)




def _window(w):
    """``None`` or ``(left, right)``, each an integer >= 0 or -1 (unbounded). ``(-1, -1)`` is no window."""
    if w is None:
        return None
    bad = (not isinstance(w, (tuple, list)) or len(w) != 2
           or any(isinstance(x, (bool, np.bool_)) or not isinstance(x, numbers.Integral) for x in w))
    if bad:
        raise TypeError(f"window: expected two integers (left, right), each >= 0 or -1 for unbounded, got {w!r}")
    left, right = int(w[0]), int(w[1])
    if left < -1 or right < -1:
        raise ValueError(f"window: expected (left, right) each >= 0 or -1 for unbounded, got {w!r}")
    # an edge past any sequence (MAX_N) is unbounded: the same band, and the tile arithmetic stays in int64
    left, right = (-1 if x > MAX_N else x for x in (left, right))
    return None if (left, right) == (-1, -1) else (left, right)


def _softcap(c):
    if c is None:
        return None
    return positive_real(c, "softcap", "a finite float > 0 (or None)")


def _slopes(x, lead: tuple, from_shapes: bool):
    """ALiBi slopes broadcast to the leading (batch, head) axes ``lead`` (one slope per head)."""
    if x is None:
        return None
    if from_shapes and isinstance(x, (bool, np.bool_)):
        if not x:  # "no slopes" is None, as the simulator takes it; True is the shapes-only "there are slopes"
            raise TypeError("alibi_slopes: expected None, True (there are slopes) or an array of slopes, got False")
        return np.zeros(lead)
    a = np.asarray(x)
    if not (np.issubdtype(a.dtype, np.floating) or np.issubdtype(a.dtype, np.integer)) or a.dtype == np.bool_:
        raise TypeError(f"alibi_slopes: expected a float array of per-head slopes, got dtype {a.dtype}")
    if not np.isfinite(a).all():
        raise ValueError("alibi_slopes: contains NaN or inf")
    if from_shapes:
        _fits_heads("alibi_slopes", a.shape, a.size, int(np.prod(lead, dtype=np.int64)))
        return np.zeros(lead)  # the values do not change the IO; their presence does
    try:
        return np.broadcast_to(a.astype(np.float64), lead)
    except ValueError:
        raise ValueError(f"alibi_slopes: shape {a.shape} does not broadcast to the leading (batch, head) "
                         f"axes {lead}") from None


def _fits_heads(name: str, shape: tuple, n: int, heads: int) -> None:
    """From shapes only the product ``heads`` of the leading (batch, head) axes is known. An array whose own
    leading axes hold ``n`` entries (slopes; masks or biases of (Nq, Nk)) broadcasts to some leading axes of
    that product exactly when ``n`` divides it (or anything, for an empty batch): the simulator's
    ``np.broadcast_to`` rule, as far as shapes alone can tell it."""
    if heads and (n == 0 or heads % n):
        raise ValueError(f"{name}: shape {shape} ({n} along its leading axes) does not broadcast to the leading "
                         f"(batch, head) axes of heads={heads}")


def _kv_lead(q_lead: tuple, kv_lead: tuple, enable_gqa: bool, what: str) -> tuple:
    """K/V's leading axes: Q's, or with ``enable_gqa`` Q's with ``Hkv`` heads on axis -3, Hq % Hkv == 0."""
    if kv_lead == q_lead:
        return kv_lead
    if not enable_gqa:
        raise ValueError(f"{what}: leading (batch, head) axes {kv_lead} do not match Q's {q_lead} "
                         f"(pass enable_gqa=True for fewer K/V heads, to an algorithm that takes the variants' "
                         f"options)")
    if len(kv_lead) != len(q_lead) or not q_lead or kv_lead[:-1] != q_lead[:-1]:
        raise ValueError(f"enable_gqa: K/V leading axes {kv_lead} must equal Q's {q_lead} except the head "
                         f"axis (-3)")
    Hq, Hkv = q_lead[-1], kv_lead[-1]
    if Hkv == 0 or Hq % Hkv:
        raise ValueError(f"enable_gqa: query heads Hq={Hq} must be a multiple of key/value heads Hkv={Hkv} "
                         f"(Hkv from {what})")
    return kv_lead


def _scores_array(x, name: str, kind: str, target: tuple, from_shapes: bool = False):
    """A ``mask`` (boolean) or ``bias`` (float) array broadcast to ``target = lead + (Nq, Nk)``.

    From shapes, ``lead`` is ``(heads,)``, the product of the real leading axes: the array's own leading axes
    must fit it (:func:`_fits_heads`) and are then dropped, since they do not change the IO.
    """
    if x is None:
        return None
    if isinstance(x, (bool, np.bool_)) and not x:
        # "no mask" is None: as a 0-d mask False would hide every key (and count a mask pass), silently
        hides = "; a mask that hides every key is an array of False" if kind == "mask" else ""
        raise TypeError(f"{name}: expected None or an array, got False (no {name} is None{hides})")
    a = np.asarray(x)
    if kind == "mask" and a.dtype != np.bool_:
        raise TypeError(f"mask: expected a boolean array (True = attend), got dtype {a.dtype}")
    if kind == "bias":
        if not np.issubdtype(a.dtype, np.floating):
            raise TypeError(f"bias: expected a float array added to the scores, got dtype {a.dtype}")
        if np.isnan(a).any() or np.isposinf(a).any():
            raise ValueError("bias: expected finite values or -inf (a masked entry), got NaN or +inf")
    if from_shapes and a.ndim > 2:
        _fits_heads(name, a.shape, int(np.prod(a.shape[:-2], dtype=np.int64)), target[0])
        a = a.reshape((-1,) + a.shape[-2:])[:1]
    # broadcast *to* target: an array with more axes than it would grow the target instead. Read off the axes, not
    # np.broadcast_shapes, which refuses a target of more elements than numpy can count as if the shapes clashed
    fits = a.ndim <= len(target) and all(x in (1, t) for x, t in zip(a.shape[::-1], tuple(target)[::-1]))
    if not fits:
        raise ValueError(f"{name}: shape {a.shape} does not broadcast to (..., Nq, Nk) = {target}")
    try:
        return np.broadcast_to(a, target)
    except ValueError:  # the shapes fit, but numpy cannot index that many bytes even as a view (Nq·Nk near 2^62)
        raise ValueError(f"{name}: a {a.dtype} array of shape {target} is more than numpy can address, even as a "
                         f"broadcast view; a {name} needs Nq·Nk·{a.dtype.itemsize} bytes below 2^63") from None


# --------------------------------------------------------------------------- arrays


def _array(x, name: str) -> np.ndarray:
    try:
        a = np.asarray(x)
    except Exception as e:  # e.g. a CUDA tensor
        raise TypeError(f"{name}: expected a numpy array of floats, got {type(x).__name__}") from e
    if a.dtype == object or not (np.issubdtype(a.dtype, np.floating) or np.issubdtype(a.dtype, np.integer)):
        raise TypeError(f"{name}: expected a real floating-point array, got dtype {a.dtype}")
    return a


def check_finite(a: np.ndarray, name: str) -> None:
    if not np.isfinite(a).all():
        raise ValueError(f"{name}: contains NaN or inf")


def require_finite(X: np.ndarray, what: str, cure: str | None = None, masked: bool = False,
                   note: str | None = None) -> np.ndarray:
    """Raise ``FloatingPointError`` if a computed array overflowed (finite inputs, infinite result), naming the
    cure: float64 where the computation follows the inputs' dtype, else ``cure`` (e.g. the FP8 path, whose
    accumulators are fp32 whatever the inputs). ``masked``: scores after MASK, where -inf is on purpose.
    ``note``: another cause to name after the cure (a backward's saved statistics that are not the forward's)."""
    # Called on τ·QKᵀ before MASK and bias (which may add -inf on purpose) and on results.
    if not (finite_or_masked(X) if masked else np.isfinite(X).all()):
        cure = cure or ("scale the inputs down" if X.dtype == np.float64 else
                        "compute in float64 (float64 inputs: Q.astype(np.float64), or query.double() at the torch "
                        "front) or scale the inputs down")
        raise FloatingPointError(
            f"{what} overflowed {X.dtype}: the inputs are finite but too large for this precision; {cure}"
            + (f"; {note}" if note else ""))
    return X


def cast_checked(a: np.ndarray, dtype, name: str, copy: bool = False) -> np.ndarray:
    """``a`` cast to the compute ``dtype`` (``a`` itself where it has it, unless ``copy``), raising
    ``FloatingPointError`` (:func:`require_finite`'s, naming ``name`` and the cure) where a finite value is past its
    range: a float64 bias of -1e300 becomes -inf in float32, which would pass for a masked entry, and a saved
    statistic or gradient would turn infinite on the way in."""
    out = a.astype(dtype, copy=copy)
    if out.dtype != a.dtype and np.issubdtype(a.dtype, np.floating):
        overflow = np.isinf(out) & np.isfinite(a)
        if overflow.any():
            require_finite(np.where(overflow, out, 0), f"{name}, cast to the compute dtype,")
    return out


def check_masked_rows(masked_i: np.ndarray, S_ij: np.ndarray, error: str) -> None:
    """Refuse a saved row statistic that marks a row of the tile fully masked (``masked_i``, ``(..., Br)``: L_i = -inf,
    or m_i = -inf) where the recomputed scores ``S_ij`` (``(..., Br, Bc)``, after MASK and bias) still show a key:
    the backward subtracts 0 for such a row, so P_ij = exp(S_ij) would be unnormalised weights, not zeros. Raises
    ``ValueError(error)``. Both are on chip in the backward's inner loop: no IO."""
    if (masked_i & (S_ij > -np.inf).any(axis=-1)).any():
        raise ValueError(error)


def overflow_checked(*outputs: str, note: str | None = None):
    """A decorator: the algorithm runs with numpy's overflow warnings off, then its ``outputs`` (``"O"`` of a
    forward; ``"dQ", "dK", "dV"`` of a backward) are checked. Its inputs were checked finite, and a fully masked
    row gives zeros, so an inf or NaN there is an overflow on the way (an accumulator O_i past the dtype, the
    merge of partials, dP_ij = dO_i V_jᵀ): raised as ``FloatingPointError`` with the cure, never returned with
    warnings. An inf never leaves an accumulator once in it (it stays inf, or becomes NaN), so checking the
    outputs catches every step's overflow; the scores are checked where they are made (:meth:`FlopCounter.scores`),
    before a mask's -inf is added on purpose. ``note``: another cause the error names (a backward's: its saved
    statistics may not be the forward's, and too small a one overflows the recomputed P)."""
    def decorate(algorithm):
        @functools.wraps(algorithm)
        def checked(*args, **opts):
            with np.errstate(over="ignore", invalid="ignore"):
                result = algorithm(*args, **opts)
            for name in outputs:
                require_finite(getattr(result, name), name if name == "O" else f"the gradient {name}", note=note)
            return result
        return checked
    return decorate


def check_like(x, name: str, shape: tuple, dtype=None) -> np.ndarray:
    """A saved tensor or upstream gradient (``dO``, ``O``, ``P``, ``l``, ``m``, ``L``) of ``shape``, cast to
    ``dtype`` (``None``: its own); a finite value past ``dtype``'s range raises (:func:`cast_checked`)."""
    a = _array(x, name)
    if a.shape != tuple(shape):
        raise ValueError(f"{name}: expected shape {tuple(shape)}, got {a.shape}")
    return a if dtype is None else cast_checked(a, dtype, name, copy=True)


# --------------------------------------------------------------------------- the problem


def check_heads_and_values(Q, K, V, opts) -> tuple[tuple, tuple]:
    """The checks of ``Q``, ``K``, ``V`` that do not look at their lengths, for :meth:`Problem.from_arrays` and for a
    varlen packing (``flash2``), whose lengths are its sequences': K's and V's head dimension is Q's; K's leading axes
    are Q's, or with ``enable_gqa`` a divisor of them; V's are K's; every value is finite. Returns (Q's leading
    axes, K's)."""
    for a, name in ((K, "K"), (V, "V")):
        if a.shape[-1] != Q.shape[-1]:
            raise ValueError(f"{name}: head dimension {a.shape[-1]} does not match Q's {Q.shape[-1]}")
    lead = Q.shape[:-2]
    kv_lead = _kv_lead(lead, K.shape[:-2], _bool(opts.get("enable_gqa", False), "enable_gqa"), "K")
    if V.shape[:-2] != kv_lead:
        raise ValueError(f"V: leading (batch, head) axes {V.shape[:-2]} do not match K's {kv_lead}")
    for a, name in ((Q, "Q"), (K, "K"), (V, "V")):
        check_finite(a, name)
    return lead, kv_lead


@dataclass
class Problem:
    """Shapes and checked options of one attention call. ``Q``, ``K``, ``V`` are None for shapes only."""

    Nq: int
    Nk: int
    d: int
    lead_shape: tuple
    scale: float
    causal: bool
    mask: np.ndarray | None  # broadcast to lead + (Nq, Nk), or None
    bias: np.ndarray | None  # broadcast to lead + (Nq, Nk), or None
    dropout_p: float
    seed: int
    sram_size: int | None
    block_sizes: tuple[int, int] | None
    dtype_bytes: int
    enable_gqa: bool = False
    kv_lead: tuple | None = None  # K/V's leading axes (Q's unless enable_gqa)
    window: tuple[int, int] | None = None
    alibi_slopes: np.ndarray | None = None  # broadcast to lead_shape: one slope per (batch, head)
    softcap: float | None = None
    gqa_packing: bool = False
    #: Rows of the tile loop per query position: 1, or the group size in a packed-GQA loop
    #: (:func:`flashref.variants.loop_problem`), whose row p is query position p // q_group.
    q_group: int = 1
    q_lead: tuple | None = None  # Q's own leading axes, when the loop runs over K/V's (packed GQA)
    Q: np.ndarray | None = None
    K: np.ndarray | None = None
    V: np.ndarray | None = None

    @property
    def dtype(self):
        return self.Q.dtype if self.Q is not None else np.dtype(np.float64)

    @property
    def heads(self) -> int:
        """The number of (batch, head) pairs: the product of the leading axes."""
        return int(np.prod(self.lead_shape, dtype=np.int64)) if self.lead_shape else 1

    @property
    def kv_heads(self) -> int:
        """The product of K/V's leading axes (``heads`` unless ``enable_gqa``)."""
        lead = self.kv_lead if self.kv_lead is not None else self.lead_shape
        return int(np.prod(lead, dtype=np.int64)) if lead else 1

    @property
    def group(self) -> int:
        """Query heads per K/V head: 1 without GQA, 0 with no query heads (Hq = 0 < Hkv).

        Taken from the head axes (-3), not the products, so an empty batch keeps its group.
        """
        kv = self.kv_lead if self.kv_lead is not None else self.lead_shape
        if not kv or kv[-1] == 0:
            return 1
        return self.lead_shape[-1] // kv[-1]

    def with_blocks(self, Br: int, Bc: int) -> Problem:
        """The same problem with its block sizes pinned (block-sparse passes share one grid)."""
        return dataclasses.replace(self, block_sizes=(Br, Bc))

    def dropout_Z(self, rows: tuple[int, int], cols: tuple[int, int]) -> np.ndarray:
        """Z of the tile ``rows x cols`` (Alg.4 l.14), regenerated from the seed: never stored."""
        G = self.q_group
        if G == 1:
            return scale_mask(self.seed, self.dropout_p, self.lead_shape, rows, cols, self.dtype.type)
        # A packed-GQA loop: rows are (position, head in group) pairs; the mask is keyed by Q's heads.
        from .variants import pack_rows
        Z = scale_mask(self.seed, self.dropout_p, self.q_lead, (rows[0] // G, rows[1] // G), cols, self.dtype.type)
        return pack_rows(Z, G)

    # ------------------------------------------------------------------ constructors
    @classmethod
    def from_arrays(cls, Q, K, V, where: str, extra=(), /, **opts) -> Problem:
        """Check ``Q``, ``K``, ``V`` and the options; ``extra`` names options beyond the shared ones. ``where`` and
        ``extra`` are positional only, as in :meth:`from_shapes`: an option named ``where`` is refused as unknown."""
        check_options(opts, set(SHARED_OPTIONS) | set(extra), where)
        Q, K, V = _array(Q, "Q"), _array(K, "K"), _array(V, "V")
        for a, name, rows in ((Q, "Q", "Nq"), (K, "K", "Nk"), (V, "V", "Nk")):
            if a.ndim < 2:
                raise ValueError(f"{name}: expected shape (..., {rows}, d) with at least 2 axes, got {a.shape}")
            if a.shape[-1] == 0 or a.shape[-2] == 0:
                raise ValueError(f"{name}: expected non-empty {rows} and d, got shape {a.shape}")
            _seq_len(a.shape[-2], f"{name} ({rows})")  # predict's bound: a broadcast view can be that long
        if V.shape[-2] != K.shape[-2]:
            raise ValueError(f"V: length {V.shape[-2]} does not match K's {K.shape[-2]} (K and V pair up row by row)")
        lead, kv_lead = check_heads_and_values(Q, K, V, opts)
        # float64 stays float64; float16/float32/integers compute in at least float32.
        dt = np.result_type(Q.dtype, K.dtype, V.dtype, np.float32)
        pb = cls._checked(Q.shape[-2], K.shape[-2], Q.shape[-1], lead, opts, kv_lead=kv_lead)
        pb.Q, pb.K, pb.V = Q.astype(dt), K.astype(dt), V.astype(dt)
        if pb.bias is not None:
            # Cast the caller's array, then broadcast: casting the broadcast view would materialise it
            # (an (Nq, Nk) bias shared by all heads became heads × Nq × Nk). A read-only view, as the mask is.
            # A finite value past dt's range raises (cast_checked): as -inf it would silently mask its entry.
            pb.bias = np.broadcast_to(cast_checked(np.asarray(opts["bias"]), dt, "bias"), pb.bias.shape)
        return pb

    @classmethod
    def from_shapes(cls, where: str, extra=(), /, *, Nq, Nk, d, heads=None, **opts) -> Problem:
        """The same checks from shapes alone (``heads`` = product of the leading axes; 0 is an empty batch; or the
        leading axes themselves, a tuple such as ``(B, H)``). ``where`` names the entry point in errors and
        ``extra`` lists its own options beyond the shared ones; both positional only, so that an option a user
        misspells as ``where`` is refused as unknown, not a clash.

        ``mask`` and ``bias`` may be arrays (their last two axes must broadcast to ``(Nq, Nk)``, and their
        leading axes to some of product ``heads``, as ``alibi_slopes``'s) or ``True`` for "there is one":
        only their presence changes the IO. With ``heads`` a tuple of leading axes they must broadcast to those
        axes, exactly as the simulator checks them against Q's (a product cannot tell ``(2, 3)`` from ``(3, 2)``).
        ``heads=None`` (a grid, which no head count changes) is one head and lets any leading axes of a mask or
        bias through.
        """
        check_options(opts, set(SHARED_OPTIONS) | set(extra) | {"heads", "kv_heads"}, where)
        Nq, Nk, d = positive_int(Nq, "Nq", SEQ_LEN), positive_int(Nk, "Nk", SEQ_LEN), positive_int(d, "d")
        # a mask or bias as an array: a nested list is the array it spells, as the algorithms take it; True (numpy's
        # too) is "there is one" (only a mask's or bias's presence changes the IO)
        for name in ("mask", "bias"):
            v = opts.get(name)
            if isinstance(v, (bool, np.bool_)) and v:  # (False is refused by _scores_array, as with arrays)
                opts[name] = np.asarray(True) if name == "mask" else np.zeros(())  # "a mask / a bias is present"
            elif v is not None and not isinstance(v, (np.ndarray, bool, np.bool_)):
                opts[name] = np.asarray(v)
        if isinstance(heads, (tuple, list)):
            # Q's leading axes: the arrays are checked against them as the algorithm checks them against Q's
            # (exact broadcasting); the IO needs only their product, which the rest of the check takes
            axes = tuple(_nonnegative_int(h, f"heads[{i}]") for i, h in enumerate(heads))
            for name in ("mask", "bias"):
                if isinstance(opts.get(name), np.ndarray):
                    _scores_array(opts[name], name, name, axes + (Nq, Nk))
            slopes = opts.get("alibi_slopes")
            if slopes is not None and not isinstance(slopes, (bool, np.bool_)):
                _slopes(slopes, axes, from_shapes=False)
            heads = math.prod(axes)
        if heads is None:
            heads = 1
            for name in ("mask", "bias"):
                v = opts.get(name)
                if isinstance(v, np.ndarray) and v.ndim > 2:
                    flat = v.reshape((-1,) + v.shape[-2:])
                    # one head's worth: it fits any. An empty batch's has no head; a stand-in of its shape takes
                    # its place (from shapes only a mask's or bias's presence changes the IO, not its values)
                    opts[name] = flat[:1] if len(flat) else np.zeros((1,) + v.shape[-2:], v.dtype)
        heads = _nonnegative_int(heads, "heads")
        kv = opts.pop("kv_heads", None)
        # kv_heads = 0 only with heads = 0: in an empty batch K's leading axes multiply to 0 too
        kv_lead = (heads,) if kv is None else ((positive_int if heads else _nonnegative_int)(kv, "kv_heads"),)
        if kv_lead != (heads,):
            kv_lead = _kv_lead((heads,), kv_lead, _bool(opts.get("enable_gqa", False), "enable_gqa"), "kv_heads")
        return cls._checked(Nq, Nk, d, (heads,), opts, kv_lead=kv_lead, from_shapes=True)

    @classmethod
    def _checked(cls, Nq, Nk, d, lead, opts, kv_lead=None, from_shapes=False) -> Problem:
        o = {**SHARED_OPTIONS, **{k: v for k, v in opts.items() if k in SHARED_OPTIONS}}
        target = tuple(lead) + (Nq, Nk)
        return cls(
            Nq=Nq, Nk=Nk, d=d, lead_shape=tuple(lead),
            scale=_scale(o["scale"], d),
            causal=_causal(o["causal"]),
            mask=_scores_array(o["mask"], "mask", "mask", target, from_shapes),
            bias=_scores_array(opts.get("bias"), "bias", "bias", target, from_shapes),
            dropout_p=check_p(o["dropout_p"], "dropout_p"),
            seed=_seed(o["seed"]),
            sram_size=None if o["sram_size"] is None else positive_int(o["sram_size"], "sram_size"),
            block_sizes=check_block_sizes(o["block_sizes"]),
            dtype_bytes=positive_int(o["dtype_bytes"], "dtype_bytes"),
            enable_gqa=_bool(opts.get("enable_gqa", False), "enable_gqa"),
            kv_lead=tuple(lead) if kv_lead is None else tuple(kv_lead),
            window=_window(opts.get("window")),
            alibi_slopes=_slopes(opts.get("alibi_slopes"), tuple(lead), from_shapes),
            softcap=_softcap(opts.get("softcap")),
            gqa_packing=_bool(opts.get("gqa_packing", False), "gqa_packing"),
        )
