"""The integer and flag checks every entry point shares (``flashref.problem`` re-exports them), in a module of
their own that imports nothing of flashref: the memory, the masks, dropout and the grader import them too, and
the autograder bundle ships them (``grading/release.py``'s ``BUNDLE``) without the algorithms."""

from __future__ import annotations

import math
import numbers

import numpy as np

#: The largest count any entry point takes: sizes past it overflow numpy's int64 products (heads x rows x d) and
#: a float's 53-bit mantissa; no memory holds such an array, so they are a mistake, refused by name.
MAX_COUNT = 2**53


def positive_int(x, name: str, bound=None) -> int:
    """A positive integer (Python or numpy), else a clear error naming ``name``. ``bound``: ``(limit, words)``, an
    upper limit tighter than MAX_COUNT and how the error says it (:func:`at_most`)."""
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, numbers.Integral):
        raise TypeError(f"{name}: expected a positive integer, got {x!r}")
    if x <= 0:
        raise ValueError(f"{name}: expected a positive integer, got {x}")
    return at_most(int(x), name, bound or (MAX_COUNT, "a positive integer of at most 2**53"))


def at_most(x: int, name: str, bound) -> int:
    """``x`` if it is at most ``bound``'s limit, else a ValueError naming ``name`` in ``bound``'s words: the one place
    an upper limit is checked, so a caller's tighter limit (a 32-bit sequence length) is the one its error names."""
    limit, words = bound
    if x > limit:
        raise ValueError(f"{name}: expected {words}, got {x}")
    return x


def finite_float(x, name: str, what: str) -> float:
    """``float(x)`` for a real number ``x`` already checked, or a ValueError naming ``name`` where it is an integer
    too large for a float (Python's ints have no bound; ``float(10**400)`` raises an OverflowError)."""
    try:
        return float(x)
    except OverflowError:
        raise ValueError(f"{name}: expected {what}, got an integer of {len(str(abs(int(x))))} digits, too large for "
                         "a float") from None


def _nonnegative_int(x, name: str, bound=None) -> int:
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, numbers.Integral):
        raise TypeError(f"{name}: expected a non-negative integer, got {x!r}")
    if x < 0:
        raise ValueError(f"{name}: expected a non-negative integer, got {x}")
    return at_most(int(x), name, bound or (MAX_COUNT, "a non-negative integer of at most 2**53"))


def positive_real(x, name: str, what: str = "a finite number > 0") -> float:
    """A finite real number > 0 (Python or numpy; not a bool), else a ValueError naming ``name`` and ``what`` it
    expects. "not 0 < x < inf" refuses a NaN too, which fails every comparison."""
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, numbers.Real) or not 0 < x < math.inf:
        raise ValueError(f"{name}: expected {what}, got {x!r}")
    return finite_float(x, name, what)


def _seed(seed, name: str = "seed") -> int:
    if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, numbers.Integral):
        raise TypeError(f"{name}: expected an integer, got {seed!r}")
    return int(seed)


def _bool(x, name: str) -> bool:
    if not isinstance(x, (bool, np.bool_)):
        raise TypeError(f"{name}: expected True or False, got {x!r}")
    return bool(x)
