"""Schedules: the formulas, the rates' exponents, and the refusals."""

import math
import pickle

import pytest

from heavytail_sgd import schedules as S


def test_convex_horizon_formula_and_cap():
    eta = S.convex_smd_horizon(T=1000, p=1.5, sigma=2.0, D=3.0)
    assert eta(1) == eta(777) == pytest.approx(3.0 / (2.0 * 1000 ** (1 / 1.5)))
    capped = S.convex_smd_horizon(T=10, p=2.0, sigma=1e-6, D=1.0, L=4.0)
    assert capped(5) == pytest.approx(1 / 8)


def test_convex_anytime_formula():
    eta = S.convex_smd_anytime(p=1.2, sigma=0.5, D=2.0, L=1.0)
    for t in [1, 10, 1000]:
        assert eta(t) == pytest.approx(min(0.5, 2.0 / (0.5 * t ** (1 / 1.2))))


def test_nonconvex_formulas():
    eta = S.nonconvex_sgd_horizon(T=500, p=1.8, sigma=3.0, delta=2.0, L=0.5)
    assert eta(1) == pytest.approx(min(1.0, math.sqrt(4.0) / (3.0 * 500 ** (1 / 1.8))))
    any_ = S.nonconvex_sgd_anytime(p=1.8, sigma=3.0, delta=2.0, L=0.5)
    assert any_(500) == pytest.approx(eta(1))


def test_step_balances_the_two_terms_of_the_convex_bound():
    # The horizon step minimises the README's bound D^2/(2 eta T) + 2^(1-p) eta^(p-1) sigma^p
    # D^(2-p) over eta up to a constant factor: a brute-force scan lands within 2x of it.
    T, p, sigma, D = 10_000, 1.4, 1.7, 0.6
    grid = [10 ** (k / 200) for k in range(-1600, 400)]

    def bound(eta, T=T):
        return D * D / (2 * eta * T) + 2 ** (1 - p) * eta ** (p - 1) * sigma**p * D ** (2 - p)

    best = min(grid, key=bound)
    formula = S.convex_smd_horizon(T, p, sigma, D)(1)
    assert 0.5 < best / formula < 2.0
    # and the bound at the formula has the predicted T-exponent
    b1 = bound(S.convex_smd_horizon(T, p, sigma, D)(1))
    b2 = bound(S.convex_smd_horizon(100 * T, p, sigma, D)(1), T=100 * T)
    assert math.log(b2 / b1) / math.log(100) == pytest.approx(S.convex_rate_exponent(p))


def test_rate_exponents_and_shapes():
    assert S.convex_rate_exponent(2.0) == -0.5
    assert S.nonconvex_rate_exponent(2.0) == -0.25
    assert S.convex_rate_exponent(1.2) == pytest.approx(-1 / 6)
    r1, r2 = S.convex_rate(10**4, 1.5, 1.0, 1.0), S.convex_rate(10**6, 1.5, 1.0, 1.0)
    assert math.log(r2 / r1) / math.log(100) == pytest.approx(-1 / 3)
    n1 = S.nonconvex_rate(10**8, 1.5, 1.0, 1.0, 1.0)
    n2 = S.nonconvex_rate(10**10, 1.5, 1.0, 1.0, 1.0)
    assert math.log(n2 / n1) / math.log(100) == pytest.approx(-1 / 6, abs=0.01)


def test_schedules_pickle():
    eta = S.convex_smd_anytime(1.5, 1.0, 1.0)
    assert pickle.loads(pickle.dumps(eta)) == eta


@pytest.mark.parametrize("p", [1.0, 0.5, 2.01, 3, True, "1.5"])
def test_p_outside_range(p):
    with pytest.raises(ValueError, match="p must lie in"):
        S.convex_smd_horizon(10, p, 1.0, 1.0)
    with pytest.raises(ValueError, match="p must lie in"):
        S.nonconvex_rate_exponent(p)


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: S.convex_smd_horizon(10, 1.5, 0.0, 1.0), "sigma"),
        (lambda: S.convex_smd_horizon(10, 1.5, 1.0, -1.0), "D"),
        (lambda: S.convex_smd_horizon(10, 1.5, 1.0, 1.0, L=0), "L"),
        (lambda: S.convex_smd_horizon(0, 1.5, 1.0, 1.0), "T"),
        (lambda: S.convex_smd_anytime(1.5, math.inf, 1.0), "sigma"),
        (lambda: S.nonconvex_sgd_horizon(10, 1.5, 1.0, 0.0, 1.0), "delta"),
        (lambda: S.nonconvex_sgd_anytime(1.5, 1.0, 1.0, -2.0), "L"),
        (lambda: S.convex_smd_anytime(1.5, 1.0, 1.0)(0), "t must"),
    ],
)
def test_bad_constants(call, match):
    with pytest.raises(ValueError, match=match):
        call()
