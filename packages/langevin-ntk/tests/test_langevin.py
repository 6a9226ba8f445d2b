"""The Langevin step, its Gibbs target and the quadratic closed forms, against references."""

import math

import numpy as np
import pytest
import torch
from scipy import stats

from langevin_ntk import Langevin
from langevin_ntk.langevin import (
    euler_maruyama_step,
    gibbs_log_density,
    langevin_step,
    ou_coefficients,
    ou_step,
    quadratic_discrete_stationary,
    quadratic_stationary,
)

F64 = torch.float64


def _spd(d, seed, lo=0.5, hi=3.0):
    g = torch.Generator().manual_seed(seed)
    q, _ = torch.linalg.qr(torch.randn(d, d, generator=g, dtype=F64))
    return (q * torch.linspace(lo, hi, d, dtype=F64)) @ q.T


def test_euler_step_matches_formula():
    g = torch.Generator().manual_seed(0)
    th, gr, xi = (torch.randn(3, 5, 7, generator=g, dtype=F64) for _ in range(3))
    out = euler_maruyama_step(th, gr, 0.03, 0.7, 0.2, xi)
    ref = th - 0.03 * (gr + 0.7 * th) + math.sqrt(2 * 0.03 * 0.2) * xi
    assert torch.allclose(out, ref, rtol=0, atol=1e-15)


def test_temperature_zero_is_gradient_descent_with_weight_decay():
    th, gr = torch.randn(11, dtype=F64), torch.randn(11, dtype=F64)
    out = euler_maruyama_step(th, gr, 0.1, 0.5, 0.0, noise=torch.full((11,), 1e9, dtype=F64))
    assert torch.equal(out, th - 0.1 * (gr + 0.5 * th))  # noise ignored at T = 0


def test_ou_tends_to_euler_as_weight_decay_vanishes():
    th, gr, xi = (torch.randn(6, dtype=F64) for _ in range(3))
    e = euler_maruyama_step(th, gr, 0.01, 0.0, 0.3, xi)
    assert torch.allclose(ou_step(th, gr, 0.01, 0.0, 0.3, xi), e, atol=1e-15)
    # O(lr * wd) away for small wd: the difference shrinks linearly
    d1 = ou_step(th, gr, 0.01, 1e-3, 0.3, xi) - euler_maruyama_step(th, gr, 0.01, 1e-3, 0.3, xi)
    d2 = ou_step(th, gr, 0.01, 1e-4, 0.3, xi) - euler_maruyama_step(th, gr, 0.01, 1e-4, 0.3, xi)
    assert float(d2.norm()) < 0.2 * float(d1.norm())


def test_ou_coefficients_solve_the_linear_sde():
    # Mean of dθ = -(g + λθ)dt: θ(η) = e^{-λη}θ - g(1 - e^{-λη})/λ; variance T(1 - e^{-2λη})/λ
    lr, wd, temp = 0.37, 2.3, 0.8
    a, c, s = ou_coefficients(lr, wd, temp)
    # integrate the mean ODE and the variance ODE  v' = -2λv + 2T  by fine RK-free exact steps
    steps = 200_000
    h = lr / steps
    m, v, th, g = 0.0, 0.0, 1.3, -0.4
    m = th
    for _ in range(steps):  # midpoint rule on linear ODEs: O(h^2)
        m = m + h * (-(g + wd * (m + 0.5 * h * (-(g + wd * m)))))
        v = v + h * (-2 * wd * (v + 0.5 * h * (-2 * wd * v + 2 * temp)) + 2 * temp)
    assert a * th - c * g == pytest.approx(m, abs=1e-9)
    assert s * s == pytest.approx(v, abs=1e-9)


def test_ou_samples_the_prior_exactly_for_any_step():
    # L = 0: N(0, T/λ) is invariant under the OU step for every lr (no step-size bias)
    temp, wd, lr = 0.5, 2.0, 0.9
    a, _, s = ou_coefficients(lr, wd, temp)
    var = temp / wd
    assert a * a * var + s * s == pytest.approx(var, rel=1e-14)
    # Euler with the same lr is biased: variance T/(λ(1 - lr λ/2))
    _, cov = quadratic_discrete_stationary(
        torch.zeros(1, 1, dtype=F64), torch.zeros(1, dtype=F64), lr, wd, temp
    )
    assert float(cov) == pytest.approx(temp / (wd * (1 - lr * wd / 2)), rel=1e-12)


@pytest.mark.parametrize("scheme", ["euler", "ou"])
def test_discrete_stationary_solves_the_lyapunov_fixed_point(scheme):
    d = 5
    a = _spd(d, 1, 0.2, 2.0) - 0.1 * torch.eye(d, dtype=F64)
    b = torch.randn(d, generator=torch.Generator().manual_seed(2), dtype=F64)
    lr, wd, temp = 0.3, 0.4, 0.7
    mean, cov = quadratic_discrete_stationary(a, b, lr, wd, temp, scheme)
    if scheme == "euler":
        m = torch.eye(d, dtype=F64) - lr * (a + wd * torch.eye(d, dtype=F64))
        c, s2 = lr, 2 * lr * temp
    else:
        ac, c, s = ou_coefficients(lr, wd, temp)
        m, s2 = ac * torch.eye(d, dtype=F64) - c * a, s * s
    # independent route: iterate the recursions to their fixed point
    mu, sig = torch.zeros(d, dtype=F64), torch.zeros(d, d, dtype=F64)
    for _ in range(3000):
        mu = m @ mu + c * b
        sig = m @ sig @ m.T + s2 * torch.eye(d, dtype=F64)
    assert torch.allclose(mean, mu, atol=1e-12)
    assert torch.allclose(cov, sig, atol=1e-12)
    # both schemes have the continuous mean; covariances tend to T H^{-1} as lr -> 0
    cmean, ccov = quadratic_stationary(a, b, wd, temp)
    assert torch.allclose(mean, cmean, atol=1e-12)
    _, cov_small = quadratic_discrete_stationary(a, b, 1e-6, wd, temp, scheme)
    assert torch.allclose(cov_small, ccov, rtol=1e-5, atol=1e-9)


def _run_chains(a, b, lr, wd, temp, scheme, chains, steps, seed):
    theta = torch.nn.Parameter(torch.zeros(chains, a.shape[0], dtype=F64))
    opt = Langevin([theta], lr=lr, temperature=temp, weight_decay=wd, scheme=scheme, seed=seed)
    for _ in range(steps):
        opt.zero_grad()
        # sum over independent chains of 0.5 θᵀAθ - bᵀθ: each row gets its own gradient
        loss = 0.5 * ((theta @ a) * theta).sum() - (theta @ b).sum()
        loss.backward()
        opt.step()
    return theta.detach()


@pytest.mark.parametrize("scheme", ["euler", "ou"])
def test_optimizer_matches_the_quadratic_stationary_law_by_monte_carlo(scheme):
    d, chains = 3, 8000
    a = _spd(d, 3, 0.3, 2.0)
    b = torch.tensor([1.0, -0.5, 0.25], dtype=F64)
    lr, wd, temp = 0.2, 0.5, 0.3
    mean, cov = quadratic_discrete_stationary(a, b, lr, wd, temp, scheme)
    # burn-in: contraction (1 - lr h_min)^k = (1 - 0.16)^120 < 1e-9 of the start error
    x = _run_chains(a, b, lr, wd, temp, scheme, chains, 120, seed=7)
    emp_mean = x.mean(0)
    emp_cov = torch.cov(x.T)
    se_mean = (torch.diagonal(cov) / chains).sqrt()
    dv = torch.diagonal(cov)
    se_cov = ((dv[:, None] * dv[None, :] + cov**2) / chains).sqrt()
    # 5 standard errors: a false alarm has probability ~1e-6 per entry
    assert ((emp_mean - mean).abs() <= 5 * se_mean).all()
    assert ((emp_cov - cov).abs() <= 5 * se_cov).all()
    # power: the continuous-time law differs from Euler's at this lr, and MC sees it
    if scheme == "euler":
        _, ccov = quadratic_stationary(a, b, wd, temp)
        assert ((emp_cov - ccov).abs() > 5 * se_cov).any()


def _double_well_cdf(temp, wd, tilt):
    grid = np.linspace(-3.5, 3.5, 200_001)
    u = (grid**2 - 1) ** 2 + tilt * grid + 0.5 * wd * grid**2
    dens = np.exp(-(u - u.min()) / temp)
    cdf = np.concatenate([[0.0], np.cumsum(0.5 * (dens[1:] + dens[:-1]) * np.diff(grid))])
    cdf /= cdf[-1]
    return lambda x: np.interp(x, grid, cdf)


@pytest.mark.parametrize("scheme", ["euler", "ou"])
def test_double_well_samples_follow_the_gibbs_density_ks(scheme):
    temp, wd, tilt, lr = 0.6, 0.5, 0.3, 3e-3
    chains, steps = 2000, 4000  # time 12: tens of well-to-well crossings per chain at T = 0.6
    gen = torch.Generator().manual_seed(11)
    x = torch.nn.Parameter(torch.rand(chains, generator=gen, dtype=F64) * 4 - 2)
    opt = Langevin([x], lr=lr, temperature=temp, weight_decay=wd, scheme=scheme, seed=3)
    for _ in range(steps):
        opt.zero_grad()
        ((x**2 - 1) ** 2 + tilt * x).sum().backward()
        opt.step()
    sample = x.detach().numpy()
    p_true = stats.kstest(sample, _double_well_cdf(temp, wd, tilt)).pvalue
    p_wrong = stats.kstest(sample, _double_well_cdf(1.5 * temp, wd, tilt)).pvalue
    assert p_true > 1e-3, p_true
    assert p_wrong < 1e-6, p_wrong  # the test has power against a wrong temperature


def test_gibbs_log_density_matches_the_gaussian_for_a_quadratic():
    a, b = _spd(2, 5), torch.tensor([0.3, -1.0], dtype=F64)
    wd, temp = 0.4, 0.9
    mean, cov = quadratic_stationary(a, b, wd, temp)
    mvn = torch.distributions.MultivariateNormal(mean, cov)
    pts = torch.randn(7, 2, dtype=F64)
    loss = 0.5 * ((pts @ a) * pts).sum(1) - pts @ b
    lg = gibbs_log_density(loss, (pts**2).sum(1), wd, temp)
    diff = lg - mvn.log_prob(pts)  # equal up to one constant (log Z)
    assert torch.allclose(diff, diff[0].expand_as(diff), atol=1e-12)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"lr": 0.0}, "lr"),
        ({"lr": -1.0}, "lr"),
        ({"lr": float("nan")}, "lr"),
        ({"weight_decay": -0.1}, "weight_decay"),
        ({"temperature": -1.0}, "temperature"),
        ({"temperature": True}, "temperature"),
        ({"scheme": "heun"}, "scheme"),
    ],
)
def test_step_bad_input(kwargs, match):
    th = torch.zeros(3)
    args = {"lr": 0.1, "weight_decay": 0.0, "temperature": 0.1, "noise": torch.zeros(3)}
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        langevin_step(th, th, **args)


def test_step_noise_errors():
    th = torch.zeros(3)
    with pytest.raises(ValueError, match="noise"):
        euler_maruyama_step(th, th, 0.1, 0.0, 0.5, None)
    with pytest.raises(ValueError, match="shape"):
        ou_step(th, th, 0.1, 0.0, 0.5, torch.zeros(4))
    with pytest.raises(ValueError, match="temperature"):
        gibbs_log_density(th, th, 0.1, 0.0)
    with pytest.raises(ValueError, match="positive definite"):
        quadratic_stationary(-torch.eye(2, dtype=F64), torch.zeros(2, dtype=F64), 0.5, 1.0)
    with pytest.raises(ValueError, match="symmetric"):
        quadratic_stationary(torch.tensor([[1.0, 2.0], [0.0, 1.0]]), torch.zeros(2), 0.5, 1.0)
    with pytest.raises(ValueError, match="unstable"):
        quadratic_discrete_stationary(
            torch.eye(2, dtype=F64), torch.zeros(2, dtype=F64), 3.0, 0.0, 1.0
        )
