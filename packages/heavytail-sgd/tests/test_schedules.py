"""Schedules: the formulas, the rates' exponents, and the refusals."""

import math
import pickle

import numpy as np
import pytest
import torch

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
    p, sigma, delta, L, G = 1.8, 3.0, 2.0, 0.5, 7.0
    H = 2 ** (3 - 2 * p) * L ** (p - 1) * G ** (2 - p)
    assert S.holder_constant(p, L, G) == pytest.approx(H)
    eta = S.nonconvex_sgd_horizon(500, p, sigma, delta, L, G)
    assert eta(1) == eta(400) == pytest.approx(min(1.0, (delta / (H * 500)) ** (1 / p) / sigma))
    any_ = S.nonconvex_sgd_anytime(p, sigma, delta, L, G)
    assert any_(500) == pytest.approx(eta(1))
    assert any_(10**6) < any_(500)
    capped = S.nonconvex_sgd_horizon(3, 1.5, 1e-6, 1.0, 4.0, 1.0)
    assert capped(1) == pytest.approx(1 / 8)


def test_nonconvex_p2_is_the_classical_step_and_G_drops_out():
    # p = 2: H = L/2, step sqrt(2 Delta / (L T)) / sigma, bound (8 L Delta / T
    # + 4 sigma sqrt(L Delta / (2 T)))^(1/2): the finite-variance (L Delta sigma^2 / T)^(1/4).
    T, sigma, delta, L = 777, 0.3, 1.7, 2.5
    for G in (0.1, 10.0, 1e4):
        assert S.holder_constant(2.0, L, G) == pytest.approx(L / 2)
        eta = S.nonconvex_sgd_horizon(T, 2.0, sigma, delta, L, G)(1)
        assert eta == pytest.approx(math.sqrt(2 * delta / (L * T)) / sigma)
        bound = S.nonconvex_rate(T, 2.0, sigma, delta, L, G)
        ref = 8 * L * delta / T + 4 * sigma * math.sqrt(L * delta / (2 * T))
        assert bound == pytest.approx(math.sqrt(ref))


def test_remainder_bound_on_a_brute_force_grid():
    # F(x) = sum(1 - cos x_i): L = 1, |grad| <= sqrt(d). The remainder
    # F(y) - F(x) - <grad F(x), y - x> must be <= H ||y - x||^p at distances over 6 decades.
    g = torch.Generator().manual_seed(3)
    d = 7
    x = 4 * torch.randn(4000, d, generator=g, dtype=torch.float64)
    step = torch.randn(4000, d, generator=g, dtype=torch.float64)
    step = step / step.norm(dim=1, keepdim=True)
    step = step * torch.logspace(-3, 3, 4000, dtype=torch.float64)[:, None]
    y = x + step

    def f(z):
        return (1 - torch.cos(z)).sum(-1)

    rem = f(y) - f(x) - (torch.sin(x) * step).sum(-1)
    s = step.norm(dim=1)
    for p in (1.05, 1.3, 1.77, 2.0):
        H = S.holder_constant(p, 1.0, math.sqrt(d))
        assert bool((rem <= H * s**p + 1e-12).all())
    # the two bounds it interpolates are both attained in order: the quadratic one at short
    # range (ratio -> 1/2 of L s^2 along a coordinate at a minimum) and the linear at long range
    assert float((rem / (0.5 * s**2))[s < 1e-2].max()) > 0.9
    assert float((rem / (2 * math.sqrt(d) * s))[s > 100].max()) > 0.1


def test_one_step_inequality_by_monte_carlo():
    # E F(x - eta (grad F(x) + xi)) <= F(x) - (eta/2)||grad F(x)||^2 + H eta^p sigma^p, the step
    # the derivation sums; F bounded so the Monte-Carlo mean is reliable. SaS noise, alpha = p + .1.
    from heavytail_sgd.noise import SymmetricAlphaStable, norm_moment_bound

    g = torch.Generator().manual_seed(11)
    d, n = 5, 400_000
    for p, eta in ((1.3, 0.03), (1.6, 0.05), (2.0, 0.5)):
        noise = SymmetricAlphaStable(min(p + 0.1, 2.0))
        sigma = norm_moment_bound(noise, p, d)  # bound on (E||xi||^p)^(1/p) at scale 1
        x = torch.randn(d, generator=g, dtype=torch.float64)
        grad = torch.sin(x)
        xi = noise.sample((n, d), generator=g, dtype=torch.float64)
        lhs = (1 - torch.cos(x - eta * (grad + xi))).sum(-1)
        mean, se = float(lhs.mean()), float(lhs.std() / math.sqrt(n))
        H = S.holder_constant(p, 1.0, math.sqrt(d))
        rhs = float((1 - torch.cos(x)).sum()) - eta / 2 * float(grad @ grad) + H * eta**p * sigma**p
        assert mean - 4 * se <= rhs


def test_noise_term_of_the_step_is_attained_at_p_2():
    # At a minimiser the noise's cost E F(-eta xi) - F(0) is at most H eta^p sigma^p; with
    # Gaussian noise (p = 2) and a small step it is (L/2) eta^2 sigma^2 to first order, so the
    # constant H = L/2 cannot be lowered there. For p < 2 the ratio stays below 1.
    from heavytail_sgd.noise import SymmetricAlphaStable, norm_moment_bound

    g = torch.Generator().manual_seed(5)
    n = 400_000
    for p, eta in ((1.2, 0.1), (1.5, 1.0), (1.8, 0.3), (2.0, 0.1)):
        noise = SymmetricAlphaStable(min(p + 0.1, 2.0))
        sigma = norm_moment_bound(noise, p, 1)
        cost = 1 - torch.cos(eta * noise.sample((n,), generator=g, dtype=torch.float64))
        bound = S.holder_constant(p, 1.0, 1.0) * eta**p * sigma**p
        ratio, se = float(cost.mean()) / bound, float(cost.std()) / math.sqrt(n) / bound
        assert ratio - 4 * se <= 1.0
        if p == 2.0:
            assert ratio > 0.95


def test_nonconvex_horizon_step_minimises_the_derived_bound_up_to_a_constant():
    # The bound on (1/T) sum E||grad||^2 is 2 Delta/(eta T) + 2 H eta^(p-1) sigma^p for eta <=
    # 1/L. The formula's step equalises the two terms; the exact minimiser is larger by
    # (p - 1)^(-1/p) (set the derivative to zero), and the bound at the formula is within 2x of
    # the optimum and below the closed form nonconvex_rate^2.
    T, p, sigma, delta, L, G = 50_000, 1.35, 0.8, 3.0, 2.0, 5.0
    H = S.holder_constant(p, L, G)

    def bound(eta):
        return 2 * delta / (eta * T) + 2 * H * eta ** (p - 1) * sigma**p

    grid = [10 ** (k / 400) for k in range(-4000, 0) if 10 ** (k / 400) <= 1 / (2 * L)]
    best = min(grid, key=bound)
    formula = S.nonconvex_sgd_horizon(T, p, sigma, delta, L, G)(1)
    assert best / formula == pytest.approx((p - 1) ** (-1 / p), rel=0.01)
    assert 2 * delta / (formula * T) == pytest.approx(2 * H * formula ** (p - 1) * sigma**p)
    assert bound(formula) <= 2 * bound(best)
    assert bound(formula) <= S.nonconvex_rate(T, p, sigma, delta, L, G) ** 2 * (1 + 1e-12)


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
    n1 = S.nonconvex_rate(10**8, 1.5, 1.0, 1.0, 1.0, 1.0)
    n2 = S.nonconvex_rate(10**10, 1.5, 1.0, 1.0, 1.0, 1.0)
    assert math.log(n2 / n1) / math.log(100) == pytest.approx(-1 / 6, abs=0.01)
    # unmodified SGD's exponent is slower than the clipped methods' (1-p)/(3p-2) below p = 2
    for p in (1.1, 1.5, 1.9):
        assert S.nonconvex_rate_exponent(p) > (1 - p) / (3 * p - 2)


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
        (lambda: S.nonconvex_sgd_horizon(10, 1.5, 1.0, 0.0, 1.0, 1.0), "delta"),
        (lambda: S.nonconvex_sgd_anytime(1.5, 1.0, 1.0, -2.0, 1.0), "L"),
        (lambda: S.nonconvex_sgd_horizon(10, 1.5, 1.0, 1.0, 1.0, 0.0), "G"),
        (lambda: S.nonconvex_rate(10, 1.5, 1.0, 1.0, 1.0, math.nan), "G"),
        (lambda: S.holder_constant(1.5, 1.0, -1.0), "G"),
        (lambda: S.convex_smd_anytime(1.5, 1.0, 1.0)(0), "t must"),
    ],
)
def test_bad_constants(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_step_schedule_validates_its_fields():
    for bad in (
        dict(base=float("nan"), cap=0.5),  # used to give a silent step of 0.5
        dict(base=0.0),
        dict(base=-1.0),
        dict(base=math.inf),
        dict(base=1.0, power=-0.5),
        dict(base=1.0, power=float("nan")),
        dict(base=1.0, cap=0.0),
        dict(base=1.0, cap=float("nan")),
        dict(base=True),
    ):
        with pytest.raises(ValueError, match="StepSchedule"):
            S.StepSchedule(**bad)
    assert S.StepSchedule(0.5, 0.5, cap=0.1)(4) == pytest.approx(0.1)


def test_horizon_accepts_numpy_integers():
    a = S.convex_smd_horizon(np.int64(100), 1.5, 1.0, 1.0)
    b = S.convex_smd_horizon(100, 1.5, 1.0, 1.0)
    assert a == b
    for bad in (100.0, True, np.float64(100), 0):
        with pytest.raises(ValueError, match="T must be"):
            S.convex_smd_horizon(bad, 1.5, 1.0, 1.0)


def test_strongly_convex_exponent_is_twice_the_convex_one():
    for p in (1.1, 1.3, 1.5, 1.9, 2.0):
        assert S.strongly_convex_rate_exponent(p) == pytest.approx(2 * S.convex_rate_exponent(p))
    assert S.strongly_convex_rate_exponent(2.0) == pytest.approx(-1.0)  # 1/(mu T)
    with pytest.raises(ValueError, match="p"):
        S.strongly_convex_rate_exponent(0.9)
