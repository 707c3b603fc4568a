"""exp2.py: 2^x on the FMA units (FlashAttention-4's polynomial and exponent-bit trick), checked on the CPU."""

import numpy as np
import pytest

from flashref.gpu import exp2

FP16_HALF_ULP = 2.0 ** -11  # P̃ is rounded to fp16 (or the coarser bf16) before P̃V


def test_degree_three_is_below_half_an_fp16_ulp():
    err = exp2.max_relative_error()
    assert 0 < err < FP16_HALF_ULP


def test_error_falls_with_the_degree():
    errs = [exp2.max_relative_error(exp2.coefficients(k)) for k in (1, 2, 3, 4)]
    assert all(a > 2 * b for a, b in zip(errs, errs[1:])), errs


def test_the_fit_is_about_two_to_the_f():
    c = exp2.coefficients(3)
    f = np.linspace(-0.5, 0.5, 1001)
    assert np.max(np.abs(np.polyval(c[::-1], f) / 2.0 ** f - 1)) < 1e-4
    assert abs(c[0] - 1) < 1e-3 and abs(c[1] - np.log(2)) < 1e-2  # 2^f = 1 + f ln 2 + …


@pytest.mark.parametrize("x", [0.0, -0.5, -0.49999, -1.0, -1.5, -7.25, -23.75, -100.0, -125.9])
def test_exponent_bits_carry_the_integer_part(x):
    # 2^x = 2^round(x) · 2^f: a wrong j would be off by a factor of two or more
    got = float(exp2.exp2_fma(np.float32(x)))
    assert got == pytest.approx(2.0 ** x, rel=FP16_HALF_ULP)


def test_below_the_normal_range_is_clamped_not_wrapped():
    # −inf (a masked score) and −200 go to 2^−126, the smallest normal float32: 0 once rounded to fp16
    y = exp2.exp2_fma(np.array([-np.inf, -200.0, -126.0], dtype=np.float32))
    assert np.all(y > 0) and np.all(y <= 2.0 ** -126 * 1.001)
    assert np.all(y.astype(np.float16) == 0)


def test_a_softmax_row():
    rng = np.random.default_rng(0)
    s = rng.normal(0, 4, 4096).astype(np.float32)
    x = s - s.max()
    p_fma, p_mufu = exp2.exp2_fma(x), np.exp2(x)
    assert np.max(np.abs(p_fma / p_fma.sum() - p_mufu / p_mufu.sum())) < 1e-4 * p_mufu.max() / p_mufu.sum() * 4


def test_degree_must_be_positive():
    with pytest.raises(ValueError, match="degree"):
        exp2.coefficients(0)
