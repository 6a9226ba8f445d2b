"""The exact risk recursions of `diloco_ef.theory`: identities, limits, and Monte-Carlo runs."""

from __future__ import annotations

import pytest
import torch

from diloco_ef.simulation import simulate_diloco, simulate_sgd
from diloco_ef.theory import (
    diloco_risk,
    la_risk,
    power_law_spectrum,
    risk_of_error,
    sgd_risk,
    sla_risk,
)

# tolerances here follow an error model; `nox -s numerics` reruns them on every BLAS path
pytestmark = pytest.mark.numerics

D = 20
LAM = power_law_spectrum(D, 1.5)
W_STAR = torch.arange(1, D + 1, dtype=torch.float64).pow(-0.5) * torch.tensor(
    [(-1.0) ** i for i in range(D)], dtype=torch.float64
)
SIGMA = 0.5
#: z-score bound per checked point: about 6e-5 two-sided for a normal mean, so the handful of
#: points below stays well clear of chance failures while a wrong recursion is rejected.
Z_MAX = 4.0
CHECK_ROUNDS = [1, 3, 6, 12]


@pytest.fixture(autouse=True)
def _one_thread():
    # Tiny tensor ops: a second thread only adds overhead (large on a loaded machine).
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def test_one_worker_one_step_outer_lr_one_is_sgd():
    th = diloco_risk(
        LAM, W_STAR**2, SIGMA, batch=3, inner_lr=0.4, inner_steps=1, outer_lr=1.0, rounds=30
    )
    assert torch.allclose(
        th, sgd_risk(LAM, W_STAR**2, SIGMA, batch=3, lr=0.4, steps=30), rtol=1e-12, atol=0
    )


def test_m_workers_one_inner_step_is_sgd_with_m_times_the_batch():
    # Averaging M one-step updates is one step on a batch of M*B: a check of the
    # cross-worker moments and of the 1/M in the pseudo-gradient.
    th = diloco_risk(
        LAM,
        W_STAR**2,
        SIGMA,
        batch=2,
        inner_lr=0.5,
        inner_steps=1,
        outer_lr=1.0,
        rounds=25,
        workers=4,
    )
    assert torch.allclose(
        th, sgd_risk(LAM, W_STAR**2, SIGMA, batch=8, lr=0.5, steps=25), rtol=1e-12, atol=0
    )


def test_la_matches_the_scalar_closed_form():
    # Independent implementation: per direction d <- (1-g)^2 d + 2 g (1-g) p d + g^2 q.
    eta, h, gamma, b, t = 0.3, 5, 0.6, 2, 8
    d2 = W_STAR**2
    expected = [risk_of_error(LAM, d2, SIGMA)]
    for _ in range(t):
        q = d2.clone()
        for _ in range(h):
            coupling = (LAM * q).sum() + SIGMA**2
            q = (1 - 2 * eta * LAM + eta**2 * LAM**2 * (1 + 1 / b)) * q + eta**2 * LAM * (
                coupling / b
            )
        p = (1 - eta * LAM) ** h
        d2 = (1 - gamma) ** 2 * d2 + 2 * gamma * (1 - gamma) * p * d2 + gamma**2 * q
        expected.append(risk_of_error(LAM, d2, SIGMA))
    got = la_risk(
        LAM, W_STAR**2, SIGMA, batch=b, inner_lr=eta, inner_steps=h, outer_lr=gamma, rounds=t
    )
    assert torch.allclose(got, torch.stack(expected), rtol=1e-12, atol=0)


def test_huge_batch_is_gradient_descent():
    eta, t = 0.7, 15
    got = sgd_risk(LAM, W_STAR**2, 0.0, batch=10**12, lr=eta, steps=t)
    steps = torch.arange(t + 1, dtype=torch.float64)[:, None]
    gd = 0.5 * (LAM * W_STAR**2 * (1 - eta * LAM) ** (2 * steps)).sum(1)
    assert torch.allclose(got, gd, rtol=1e-9, atol=0)


def test_nesterov_outer_momentum_deterministic_limit():
    # Noiseless, H = 1, inner lr eta: the outer iterate follows torch's Nesterov SGD on the
    # quadratic with lr gamma*eta, which is linear; compare with a direct run of torch.optim.SGD.
    eta, gamma, mu, t = 0.5, 0.8, 0.6, 12
    got = sla_risk(
        LAM,
        W_STAR**2,
        0.0,
        batch=10**12,
        inner_lr=eta,
        inner_steps=1,
        outer_lr=gamma,
        outer_momentum=mu,
        rounds=t,
    )
    w = torch.zeros(D, dtype=torch.float64, requires_grad=True)
    opt = torch.optim.SGD([w], lr=gamma * eta, momentum=mu, nesterov=True)
    ref = [risk_of_error(LAM, (w.detach() - W_STAR) ** 2, 0.0)]
    for _ in range(t):
        opt.zero_grad()
        (0.5 * (LAM * (w - W_STAR) ** 2).sum()).backward()
        opt.step()
        ref.append(risk_of_error(LAM, (w.detach() - W_STAR) ** 2, 0.0))
    assert torch.allclose(got, torch.stack(ref), rtol=1e-9, atol=1e-15)


def _z_scores(th: torch.Tensor, mc) -> torch.Tensor:
    return ((th - mc.mean) / mc.se)[CHECK_ROUNDS]


MC_CASES = {
    "LA": dict(workers=1, outer_lr=0.7),
    "LA-outer-lr-1.5": dict(workers=1, outer_lr=1.5),
    "DiLoCo-M4": dict(workers=4, outer_lr=1.0),
    "SLA-nesterov-inner-momentum": dict(
        workers=1, outer_lr=0.6, outer_momentum=0.6, nesterov=True, inner_momentum=0.5
    ),
    "DiLoCo-M3-heavy-ball-both": dict(
        workers=3, outer_lr=0.8, outer_momentum=0.5, nesterov=False, inner_momentum=0.3
    ),
}


@pytest.mark.parametrize("name", list(MC_CASES))
def test_theory_matches_monte_carlo_of_the_package_diloco(name):
    kw = MC_CASES[name]
    common = dict(batch=2, inner_lr=0.4, inner_steps=4, rounds=max(CHECK_ROUNDS))
    th = diloco_risk(LAM, W_STAR**2, SIGMA, **common, **kw)
    mc = simulate_diloco(LAM, W_STAR, SIGMA, **common, **kw, runs=3000, seed=11)
    z = _z_scores(th, mc)
    assert z.abs().max() < Z_MAX, f"{name}: z-scores {z.tolist()}"
    # The risk moved well beyond the standard error, so agreement is not vacuous.
    assert (th[0] - th[CHECK_ROUNDS]).min() > 20 * mc.se[CHECK_ROUNDS].max()


def test_theory_matches_monte_carlo_sgd():
    th = sgd_risk(LAM, W_STAR**2, SIGMA, batch=2, lr=0.4, steps=40)
    mc = simulate_sgd(LAM, W_STAR, SIGMA, batch=2, lr=0.4, steps=40, runs=3000, seed=5)
    z = ((th - mc.mean) / mc.se)[[1, 5, 10, 20, 40]]
    assert z.abs().max() < Z_MAX, z.tolist()


def test_monte_carlo_check_rejects_a_wrong_recursion():
    # Power of the check above: DiLoCo's averaging divides the noise by M; a theory that
    # forgot it (one worker with the same per-worker batch) is rejected by the same runs.
    common = dict(batch=2, inner_lr=0.4, inner_steps=4, rounds=max(CHECK_ROUNDS), outer_lr=1.0)
    mc = simulate_diloco(LAM, W_STAR, SIGMA, **common, workers=4, runs=3000, seed=11)
    wrong = diloco_risk(LAM, W_STAR**2, SIGMA, **common, workers=1)
    assert _z_scores(wrong, mc).abs().max() > 3 * Z_MAX


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (dict(spectrum=torch.ones(0), w_star_sq=torch.ones(0)), "spectrum"),
        (dict(spectrum=-torch.ones(2)), "spectrum"),
        (dict(w_star_sq=torch.ones(3)), "w_star_sq"),
        (dict(sigma=-1.0), "sigma"),
        (dict(batch=0), "batch"),
        (dict(inner_lr=-0.1), "step size"),
        (dict(inner_steps=0), "inner_steps"),
        (dict(outer_lr=0.0), "outer_lr"),
        (dict(rounds=0), "rounds"),
        (dict(workers=0), "workers"),
        (dict(outer_momentum=1.0), "outer_momentum"),
        (dict(inner_momentum=-0.1), "inner_momentum"),
    ],
)
def test_bad_inputs_are_named(kwargs, match):
    args = dict(
        spectrum=torch.ones(2),
        w_star_sq=torch.ones(2),
        sigma=0.1,
        batch=1,
        inner_lr=0.1,
        inner_steps=2,
        outer_lr=1.0,
        rounds=2,
        workers=1,
    )
    args.update(kwargs)
    spectrum, w2, sigma = args.pop("spectrum"), args.pop("w_star_sq"), args.pop("sigma")
    with pytest.raises(ValueError, match=match):
        diloco_risk(spectrum, w2, sigma, **args)


def test_power_law_spectrum_bad_inputs():
    with pytest.raises(ValueError, match="d must"):
        power_law_spectrum(0, 1.0)
    with pytest.raises(ValueError, match="a must"):
        power_law_spectrum(3, -1.0)
