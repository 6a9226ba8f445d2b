"""Nonconvex SGD without a gradient bound: the truncation bound, its step, and its rate.

Checks the derivation in the README ("Without G") piece by piece: the pointwise truncation
inequalities and the Young step on grids, the step and the level against brute-force
minimisation of the bound, the exponents at large T, the one-step inequality by Monte Carlo on
a nonconvex smooth function with unbounded gradient under heavy-tailed noise, and the whole
bound against simulated SGD.
"""

import math

import pytest
import torch

from heavytail_sgd import schedules as S
from heavytail_sgd.noise import StudentT, SymmetricAlphaStable, norm_moment_bound

# F(x) = sum_i (x_i^2 / 2 + 2 cos x_i): F'' = 1 - 2 cos x in [-1, 3], so L = 3; nonconvex;
# bounded below; gradient x - 2 sin x unbounded (no G exists).
L_TEST = 3.0


def f_test(x):
    return (0.5 * x * x + 2 * torch.cos(x)).sum(-1)


def grad_test(x):
    return x - 2 * torch.sin(x)


def inf_test(d: int) -> float:
    """``inf F`` exactly (float64): the 1-d minimiser solves x = 2 sin x, by Newton."""
    x = 1.9
    for _ in range(50):
        x -= (x - 2 * math.sin(x)) / (1 - 2 * math.cos(x))
    return d * (0.5 * x * x + 2 * math.cos(x))


def test_inf_and_gradient_to_gap_inequality_on_a_grid():
    # ||grad F(x)||^2 <= 2 L (F(x) - inf F): pays ||grad F(x_1)|| <= sqrt(2 L Delta)
    xs = torch.linspace(-40, 40, 200001, dtype=torch.float64)[:, None]
    vals = f_test(xs)
    assert float(vals.min()) >= inf_test(1) - 1e-12
    assert float(vals.min()) == pytest.approx(inf_test(1), abs=1e-8)
    gap = vals - inf_test(1)
    assert bool((grad_test(xs)[:, 0] ** 2 <= 2 * L_TEST * gap + 1e-12).all())
    # L = 3 is the sup of F'' (attained at x = pi): not an overestimate
    assert float((1 - 2 * torch.cos(xs)).max()) == pytest.approx(L_TEST, abs=1e-6)


@pytest.mark.parametrize("p", [1.05, 1.3, 1.5, 1.77, 2.0])
def test_truncation_inequalities_pointwise_on_a_grid(p):
    # r = ||xi||: r^2 1{r<=tau} <= r^p tau^(2-p); r 1{r>tau} <= r^p tau^(1-p);
    # 1{r>tau} <= (r/tau)^p.
    # Taking E gives second moment <= sigma^p tau^(2-p), bias <= sigma^p tau^(1-p), tail prob.
    r = torch.logspace(-6, 6, 2001, dtype=torch.float64)[:, None]
    tau = torch.logspace(-4, 4, 37, dtype=torch.float64)[None, :]
    small, big = (r <= tau).double(), (r > tau).double()
    tol = 1e-12
    assert bool((r * r * small <= r**p * tau ** (2 - p) * (1 + tol)).all())
    assert bool((r * big <= r**p * tau ** (1 - p) * (1 + tol)).all())
    assert bool((big <= (r / tau) ** p * (1 + tol)).all())


def test_young_step_of_the_bias_term_on_a_grid():
    # |eta (1 - L eta) <g, b>| <= (eta/4)||g||^2 + eta ||b||^2 for 0 < eta <= 1/L (scalars
    # suffice: Cauchy-Schwarz first); checked over a grid of eta, ||g||, ||b||.
    L = 2.7
    eta = torch.linspace(1e-4, 1 / L, 60, dtype=torch.float64)[:, None, None]
    g = torch.logspace(-4, 4, 50, dtype=torch.float64)[None, :, None]
    b = torch.logspace(-4, 4, 50, dtype=torch.float64)[None, None, :]
    lhs = eta * (1 - L * eta) * g * b
    assert bool((lhs <= eta * g * g / 4 + eta * b * b + 1e-12 * (g * g + b * b)).all())


def test_bound_formula_and_refusals():
    T, p, sigma, delta, L, eta, tau = 1000, 1.4, 0.7, 2.0, 1.5, 0.01, 30.0
    inner = (
        4 * delta / (eta * T)
        + 4 * sigma ** (2 * p) * tau ** (2 - 2 * p)
        + 2 * L * eta * sigma**p * tau ** (2 - p)
    )
    ref = math.sqrt(inner) + math.sqrt(2 * L * delta) * min(1, T * (sigma / tau) ** p)
    assert S.nonconvex_smooth_bound(T, p, sigma, delta, L, eta, tau) == pytest.approx(ref)
    # a tiny tau: the probability term saturates at 1
    small = S.nonconvex_smooth_bound(T, p, sigma, delta, L, eta, 1e-3)
    assert small >= math.sqrt(2 * L * delta)
    with pytest.raises(ValueError, match="eta <= 1/L"):
        S.nonconvex_smooth_bound(T, p, sigma, delta, L, 1.0, tau)
    for bad, msg in [
        (dict(p=1.0), "p must"),
        (dict(p=2.5), "p must"),
        (dict(sigma=0.0), "sigma"),
        (dict(delta=-1.0), "delta"),
        (dict(L=math.inf), "L must"),
        (dict(T=0), "T must"),
    ]:
        kw = dict(T=T, p=p, sigma=sigma, delta=delta, L=L) | bad
        with pytest.raises(ValueError, match=msg):
            S.nonconvex_sgd_horizon_smooth(**kw)
    with pytest.raises(ValueError, match="tau"):
        S.nonconvex_smooth_step(T, p, sigma, delta, L, 0.0)


@pytest.mark.parametrize(
    ("T", "p", "sigma", "delta", "L"),
    [(100, 1.2, 0.3, 1.0, 1.0), (3163, 1.5, 2.0, 0.7, 4.0), (50000, 1.8, 0.05, 9.0, 0.3)],
)
def test_step_and_level_minimise_the_bound_brute_force(T, p, sigma, delta, L):
    tau = S.nonconvex_smooth_truncation(T, p, sigma, delta, L)
    eta = S.nonconvex_sgd_horizon_smooth(T, p, sigma, delta, L)(1)
    assert eta == pytest.approx(S.nonconvex_smooth_step(T, p, sigma, delta, L, tau))
    best = S.nonconvex_smooth_rate(T, p, sigma, delta, L)
    assert best == pytest.approx(S.nonconvex_smooth_bound(T, p, sigma, delta, L, eta, tau))
    # 1-d: over eta at this tau, a fine grid on (0, 1/L] never beats the returned step
    etas = torch.logspace(-9, 0, 20001, dtype=torch.float64) / L
    vals = [S.nonconvex_smooth_bound(T, p, sigma, delta, L, float(e), tau) for e in etas]
    k = min(range(len(vals)), key=vals.__getitem__)
    assert min(vals) >= best * (1 - 1e-12)
    assert abs(math.log(float(etas[k]) / eta)) <= 2 * math.log(10) * 9 / 20000
    # 2-d: over (eta, tau), a log grid never beats the pair and comes within 0.5%
    taus = sigma * torch.logspace(-2, 2 + 2 * math.log10(T), 241, dtype=torch.float64)
    etas2 = torch.logspace(-9, 0, 241, dtype=torch.float64) / L
    grid = min(
        S.nonconvex_smooth_bound(T, p, sigma, delta, L, float(e), float(t))
        for e in etas2
        for t in taus
    )
    assert best <= grid * (1 + 1e-9)
    assert grid <= best * 1.005


@pytest.mark.parametrize("p", [1.2, 1.5, 1.8, 2.0])
def test_rate_and_step_exponents_at_large_T(p):
    sigma, delta, L = 0.4, 3.0, 2.0
    T1, T2 = 10**24, 10**26
    r1, r2 = (S.nonconvex_smooth_rate(T, p, sigma, delta, L) for T in (T1, T2))
    e1, e2 = (S.nonconvex_sgd_horizon_smooth(T, p, sigma, delta, L)(1) for T in (T1, T2))
    assert math.log(r2 / r1) / math.log(T2 / T1) == pytest.approx(
        S.nonconvex_smooth_rate_exponent(p), abs=2e-3
    )
    assert math.log(e2 / e1) / math.log(T2 / T1) == pytest.approx(-(6 - p) / (2 + 3 * p), abs=2e-3)
    assert S.nonconvex_smooth_rate_exponent(p) == pytest.approx((2 - 2 * p) / (2 + 3 * p))
    # weaker than the (1 - p)/(2p) of the G-bounded analysis, equal at p = 2
    if p < 2:
        assert S.nonconvex_smooth_rate_exponent(p) > S.nonconvex_rate_exponent(p)
    else:
        assert S.nonconvex_smooth_rate_exponent(p) == pytest.approx(-0.25)


@pytest.mark.parametrize(
    ("noise", "p"),
    [(SymmetricAlphaStable(1.7), 1.5), (StudentT(1.6), 1.3)],
    ids=["sas", "student"],
)
def test_one_step_inequality_by_monte_carlo(noise, p):
    """E F(y - eta (grad F(y) + zeta)) <= F(y) - (eta/4)||grad F(y)||^2 + eta b2 + (L eta^2/2) m2.

    zeta = xi 1{||xi|| <= tau}; checked with the actual ||E zeta||^2 and E||zeta||^2 (the
    descent step) and with their bounds sigma^(2p) tau^(2-2p) and sigma^p tau^(2-p) (the bound's
    terms). The noise has infinite variance and a finite p-th moment.
    """
    d, n = 5, 400_000
    g = torch.Generator().manual_seed(23)
    y = 3 * torch.randn(d, generator=g, dtype=torch.float64)
    scale = 0.8
    sigma = scale * norm_moment_bound(noise, p, d)
    xi = scale * noise.sample((n, d), generator=g, dtype=torch.float64)
    assert not noise.finite_moment(2.0) and noise.finite_moment(p)
    gy = grad_test(y)
    for tau, eta in [(2.0, 0.3), (10.0, 1 / L_TEST), (0.5, 0.05)]:
        keep = (xi.norm(dim=1) <= tau).double()[:, None]
        zeta = xi * keep
        vals = f_test(y - eta * (gy + zeta))
        lhs, se = float(vals.mean()), float(vals.std() / math.sqrt(n))
        b2 = float(zeta.mean(0).norm() ** 2)
        m2 = float((zeta * zeta).sum(1).mean())
        base = float(f_test(y)) - eta / 4 * float(gy @ gy)
        rhs_actual = base + eta * b2 + L_TEST * eta**2 / 2 * m2
        rhs_bound = base + eta * sigma ** (2 * p) * tau ** (2 - 2 * p)
        rhs_bound += L_TEST * eta**2 / 2 * sigma**p * tau ** (2 - p)
        assert lhs <= rhs_actual + 5 * se
        assert rhs_actual <= rhs_bound + 5 * se * (1 + eta)
        # and the step does descend: without the noise terms the inequality is violated only
        # by the noise (a check that the Monte-Carlo side is not trivially small)
        assert lhs > float(f_test(y)) - eta * float(gy @ gy) * 2


def test_whole_bound_holds_for_simulated_sgd():
    """E min_t ||grad F(x_t)|| from 4000 runs of SGD at the schedule's step, below the bound."""
    d, T, runs, p = 4, 300, 4000, 1.5
    noise = SymmetricAlphaStable(1.6)
    g = torch.Generator().manual_seed(5)
    x1 = torch.tensor([2.5, -3.0, 0.5, 4.0], dtype=torch.float64)
    delta = float(f_test(x1)) - inf_test(d)
    sigma = 2.0
    scale = sigma / norm_moment_bound(noise, p, d)
    eta = S.nonconvex_sgd_horizon_smooth(T, p, sigma, delta, L_TEST)(1)
    assert 0 < eta <= 1 / L_TEST
    x = x1.expand(runs, -1).clone()
    best = grad_test(x).norm(dim=1)
    for _ in range(T - 1):
        x = x - eta * (grad_test(x) + scale * noise.sample((runs, d), generator=g, dtype=x.dtype))
        best = torch.minimum(best, grad_test(x).norm(dim=1))
    measured = float(best.mean())
    bound = S.nonconvex_smooth_rate(T, p, sigma, delta, L_TEST)
    assert measured <= bound
    assert measured < float(grad_test(x1).norm())  # SGD made progress at this step
