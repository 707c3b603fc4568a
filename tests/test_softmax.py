"""Online softmax and the merge of partial (m, ℓ) states (§3.1 of the FlashAttention paper)."""

import warnings

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from flashref import softmax


@st.composite
def rows(draw, max_len=20):
    """A (2, n) float64 array with some -inf entries (masked keys), sometimes a fully masked row."""
    n = draw(st.integers(1, max_len))
    rng = np.random.default_rng(draw(st.integers(0, 2**31 - 1)))
    x = rng.standard_normal((2, n)) * draw(st.sampled_from([1.0, 30.0]))  # 30: exp would overflow unshifted
    x[rng.random((2, n)) < draw(st.sampled_from([0.0, 0.3]))] = -np.inf
    if draw(st.booleans()):
        x[1] = -np.inf
    return x


def _plain(x):
    # float64 softmax written directly; a fully masked row gives zeros
    out = np.zeros_like(x)
    for r in range(x.shape[0]):
        if np.isfinite(x[r]).any():
            e = np.exp(x[r] - x[r][np.isfinite(x[r])].max())
            out[r] = e / e.sum()
    return out


@given(rows(), st.integers(1, 25))
def test_online_softmax_equals_plain_for_every_block(x, block):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no RuntimeWarning from -inf - -inf
        got = softmax.online_softmax(x, block)
    np.testing.assert_allclose(got, _plain(x), rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(softmax.safe_softmax(x), _plain(x), rtol=1e-13, atol=1e-15)


@given(rows(), st.data())
def test_any_split_merged_in_any_order_equals_the_whole(x, data):
    n = x.shape[-1]
    cuts = sorted(data.draw(st.sets(st.integers(1, max(1, n - 1)), max_size=4)) - {n})
    parts = np.split(x, cuts, axis=-1)
    order = data.draw(st.permutations(range(len(parts))))
    m, l = softmax.EMPTY_STATE
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for k in order:
            m, l = softmax.merge(m, l, *softmax.softmax_state(parts[k]))
    m_whole, l_whole = softmax.softmax_state(x)
    np.testing.assert_array_equal(m, m_whole)
    np.testing.assert_allclose(l, l_whole, rtol=1e-13)
    # and the state is what §3.1 defines: the row max and the sum of e^{x - max}
    finite = np.isfinite(x).any(axis=-1)
    np.testing.assert_array_equal(m[finite], x[finite].max(axis=-1))
    np.testing.assert_allclose(l[finite], np.exp(x[finite] - x[finite].max(axis=-1, keepdims=True)).sum(-1),
                               rtol=1e-13)
    assert np.all(np.isneginf(m[~finite])) and np.all(l[~finite] == 0)


@given(rows(), rows(), rows())
def test_merge_is_associative_and_commutative(a, b, c):
    A, B, C = (softmax.softmax_state(v) for v in (a, b, c))
    left = softmax.merge(*softmax.merge(*A, *B), *C)
    right = softmax.merge(*A, *softmax.merge(*B, *C))
    swapped = softmax.merge(*softmax.merge(*C, *A), *B)
    for other in (right, swapped):
        np.testing.assert_array_equal(left[0], other[0])
        np.testing.assert_allclose(left[1], other[1], rtol=1e-13)


def test_small_concrete_example():
    # x = [1, 3 | 2, 0]: parts (m, ℓ) = (3, e^-2 + 1) and (2, 1 + e^-2); merged m = 3,
    # ℓ = 1·(e^-2 + 1) + e^{2-3}·(1 + e^-2)
    m, l = softmax.merge(*softmax.softmax_state(np.array([1.0, 3.0])), *softmax.softmax_state(np.array([2.0, 0.0])))
    assert m == 3.0
    assert l == pytest.approx(np.exp(-2) + 1 + np.exp(-1) * (1 + np.exp(-2)), rel=1e-15)
    assert l == pytest.approx(np.exp(np.array([1.0, 3, 2, 0]) - 3).sum(), rel=1e-15)


def test_empty_state_is_the_identity_and_two_empties_stay_empty():
    m, l = softmax.merge(-np.inf, 0.0, 2.0, 5.0)
    assert (m, l) == (2.0, 5.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        m, l = softmax.merge(-np.inf, 0.0, -np.inf, 0.0)
    assert np.isneginf(m) and l == 0.0


@pytest.mark.parametrize("block", [0, -1, 1.5, True])
def test_bad_block_is_rejected_by_name(block):
    with pytest.raises(ValueError, match="block"):
        softmax.online_softmax(np.zeros((1, 3)), block)


def test_nan_or_plus_inf_scores_are_refused_by_name():
    """No softmax of +inf or NaN could be returned without a NaN: a ValueError naming the input, no warning."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for bad in (np.array([[np.inf, 0.0]]), np.array([[np.nan, 1.0]])):
            with pytest.raises(ValueError, match="S: expected finite scores or -inf"):
                softmax.safe_softmax(bad)
            with pytest.raises(ValueError, match="x: expected finite scores or -inf"):
                softmax.online_softmax(bad, block=1)
            with pytest.raises(ValueError, match="x: expected finite scores or -inf"):
                softmax.softmax_state(bad)


def test_merge_refuses_states_of_different_rows():
    with pytest.raises(ValueError, match=r"m1, l1, m2, l2: the two states' shapes \(3,\), \(3,\), \(2,\), \(2,\)"):
        softmax.merge(np.ones(3), np.ones(3), np.ones(2), np.ones(2))
    m, l = softmax.merge(np.ones(3), np.ones(3), *softmax.EMPTY_STATE)  # the empty state is a scalar identity
    assert np.array_equal(m, np.ones(3)) and np.array_equal(l, np.ones(3))
