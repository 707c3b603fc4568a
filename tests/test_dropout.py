"""Counter-based dropout: the mask is a pure function of (seed, leading index, row, column)."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from flashref import dropout


@given(st.integers(0, 2**40), st.integers(1, 40), st.integers(1, 40), st.integers(1, 9), st.integers(1, 9))
def test_same_mask_however_tiled(seed, Nq, Nk, Br, Bc):
    whole = dropout.keep_mask(seed, 0.3, (2,), (0, Nq), (0, Nk))
    tiled = np.zeros_like(whole)
    for r in range(0, Nq, Br):
        for c in range(0, Nk, Bc):
            rows, cols = (r, min(r + Br, Nq)), (c, min(c + Bc, Nk))
            tiled[:, rows[0]:rows[1], cols[0]:cols[1]] = dropout.keep_mask(seed, 0.3, (2,), rows, cols)
    assert np.array_equal(whole, tiled)


def test_different_seeds_and_heads_differ():
    a = dropout.keep_mask(0, 0.5, (2,), (0, 64), (0, 64))
    b = dropout.keep_mask(1, 0.5, (2,), (0, 64), (0, 64))
    assert (a != b).mean() > 0.4  # independent masks disagree on about half the entries
    assert (a[0] != a[1]).mean() > 0.4
    assert (a[:, :32, :32] != a[:, :32, 32:]).mean() > 0.4  # and shifted blocks are not copies


@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_kept_fraction_is_one_minus_p(p):
    keep = dropout.keep_mask(123, p, (4,), (0, 256), (0, 256))
    n = keep.size
    # five standard deviations of a binomial proportion
    assert abs(keep.mean() - (1 - p)) < 5 * np.sqrt(p * (1 - p) / n)


def test_scale_mask_values():
    Z = dropout.scale_mask(5, 0.25, (), (0, 16), (0, 16))
    assert set(np.unique(Z)) <= {0.0, 1 / 0.75}
    assert np.array_equal(Z > 0, dropout.keep_mask(5, 0.25, (), (0, 16), (0, 16)))


def test_seeds_modulo_2_to_the_64_and_p_checked():
    """The seed keys a 64-bit generator (numpy ints taken as Python's); Z refuses p = 1 instead of dividing by 0."""
    a = dropout.uniform(5, (2,), (0, 3), (0, 4))
    assert np.array_equal(a, dropout.uniform(np.int64(5), (2,), (0, 3), (0, 4)))
    assert np.array_equal(a, dropout.uniform(5 + 2 ** 64, (2,), (0, 3), (0, 4)))
    minus_one = dropout.uniform(np.int64(-1), (1,), (0, 1), (0, 3))
    assert np.array_equal(minus_one, dropout.uniform(2 ** 64 - 1, (1,), (0, 1), (0, 3)))
    with pytest.raises(ValueError, match="p: expected a dropout probability"):
        dropout.scale_mask(0, 1.0, (1,), (0, 1), (0, 2))


@pytest.mark.parametrize("p", [-1.0, 1.0, 1.5, float("nan"), True])
def test_keep_mask_refuses_what_is_not_a_dropout_probability(p):
    with pytest.raises(ValueError, match=r"p: expected a dropout probability in \[0, 1\)"):
        dropout.keep_mask(0, p, (), (0, 4), (0, 4))


def test_check_p_is_the_one_rule_for_a_dropout_probability():
    """dropout.check_p: numbers and 0-d arrays in [0, 1) come back as floats; anything else is refused under the
    name the caller gives (the options path and the GPU front say dropout_p)."""
    assert dropout.check_p(0.25) == 0.25 and dropout.check_p(np.float32(0.5)) == 0.5
    assert dropout.check_p(np.array(0.125)) == 0.125 and dropout.check_p(0) == 0.0
    for bad in (1.0, -0.5, float("nan"), True, np.bool_(False), "0.1", np.ones(2)):
        with pytest.raises(ValueError, match=r"dropout_p: expected a dropout probability in \[0, 1\)"):
            dropout.check_p(bad, "dropout_p")
