"""Bound formulas against hand-computed values, and their bad-input errors."""

import math

import pytest

from learning_theory.bounds import (
    compression_bound,
    compression_bound_exact,
    high_arity_bound,
    n_subsets,
)


def test_n_subsets_by_hand():
    assert n_subsets(5, 2) == 16  # 1 + 5 + 10
    assert n_subsets(3, 7) == 8  # every subset of 3 points: 2^3
    assert n_subsets(4, 0) == 1


def test_compression_bound_by_hand():
    # m=11, k=1, delta=0.1: N = 1 + 11 = 12; (ln 12 + ln 10)/10 = (2.4849066 + 2.3025851)/10
    assert compression_bound(11, 1, 0.1) == pytest.approx(0.47874917, abs=1e-8)
    # m=20, k=2, |B|=4, delta=0.05: N = 1 + 20 + 190 = 211; ln(4*211) = ln 844 = 6.7381518,
    # ln 20 = 2.9957323; (6.7381518 + 2.9957323)/18 = 0.5407713
    assert compression_bound(20, 2, 0.05, n_side=4) == pytest.approx(0.5407713, abs=1e-7)
    # vacuous values are capped at 1: m=3, k=2 gives (ln 7 + ln 10)/1 > 1
    assert compression_bound(3, 2, 0.1) == 1.0


def test_exact_bound_by_hand():
    # k=0, m=2: (1-e)^2 = 1/4  ->  e = 1/2
    assert compression_bound_exact(2, 0, 0.25) == pytest.approx(0.5, abs=1e-9)
    # k=1, m=3: (1-e)^3 + 3(1-e)^2 at e=1/2 is 1/8 + 3/4 = 7/8
    assert compression_bound_exact(3, 1, 0.875) == pytest.approx(0.5, abs=1e-9)
    # side information multiplies the tail: 2 (1-e)^2 = 1/2  ->  e = 1/2
    assert compression_bound_exact(2, 0, 0.5, n_side=2) == pytest.approx(0.5, abs=1e-9)


@pytest.mark.parametrize(
    ("m", "k", "delta", "b"), [(10, 1, 0.1, 1), (50, 4, 0.01, 16), (7, 6, 0.5, 2)]
)
def test_exact_bound_is_never_looser(m, k, delta, b):
    e = compression_bound_exact(m, k, delta, n_side=b)
    assert e <= compression_bound(m, k, delta, n_side=b) + 1e-12
    tail = b * sum(math.comb(m, j) * (1 - e) ** (m - j) for j in range(k + 1))
    assert tail <= delta * (1 + 1e-9) or e == 1.0


def test_high_arity_bound_by_hand():
    # m=11, s=1, k=2, delta=0.1: (2 ln 12 + ln 10)/(11 - 1) = (4.9698133 + 2.3025851)/10
    assert high_arity_bound(11, 1, 2, 0.1) == pytest.approx(0.72723984, abs=1e-8)
    # arity 1 is the classical bound
    assert high_arity_bound(40, 2, 1, 0.05, n_side=3) == compression_bound(40, 2, 0.05, n_side=3)


@pytest.mark.parametrize(
    ("args", "match"),
    [
        ((3, 3, 0.1), "m must be"),
        ((10, -1, 0.1), "non-negative"),
        ((10, 1, 0.0), "delta"),
        ((10, 1, 1.5), "delta"),
    ],
)
def test_bad_bound_arguments(args, match):
    with pytest.raises(ValueError, match=match):
        compression_bound(*args)
    with pytest.raises(ValueError, match=match):
        compression_bound_exact(*args)


def test_bad_side_and_arity():
    with pytest.raises(ValueError, match="n_side"):
        compression_bound(10, 1, 0.1, n_side=0)
    with pytest.raises(ValueError, match="arity"):
        high_arity_bound(10, 1, 0, 0.1)
