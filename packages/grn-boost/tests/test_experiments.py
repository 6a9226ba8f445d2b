"""The experiments' rule helpers against independent references, and slow smoke runs."""

import math

import numpy as np
import pytest
from scipy.optimize import minimize_scalar

from grn_boost.experiments import divergence, rates
from grn_boost.losses import get_loss


@pytest.mark.parametrize("name", ["pseudo_huber", "squared_logcosh"])
def test_restricted_optimum_matches_a_scalar_solver(name):
    loss = get_loss(name)
    _, y, group = rates.make_problem(5, 13, seed=3)
    c, r_star = rates.restricted_optimum(loss, y, group)
    for gi in range(5):
        yy = y[group == gi]
        ref = minimize_scalar(
            lambda t, yy=yy: float(np.sum(loss.value(yy, np.full_like(yy, t)))),
            bracket=(yy.min(), yy.max()),
            options={"xtol": 1e-12},
        )
        # the scalar objective is flat at its minimum: compare values, tolerance eps * size
        assert np.sum(loss.value(yy, np.full_like(yy, c[gi]))) <= ref.fun * (1 + 1e-12) + 1e-12
        assert c[gi] == pytest.approx(ref.x, abs=1e-5)
    assert r_star == pytest.approx(np.mean(loss.value(y, c[group])))


@pytest.mark.parametrize("name", ["pseudo_huber", "squared_logcosh"])
def test_the_two_routes_to_the_restricted_optimum_agree(name):
    """Bisection on sum l' and safeguarded Newton: same minimisers, same R* (awkward sizes)."""
    loss = get_loss(name)
    _, y, group = rates.make_problem(7, 29, seed=5)
    c1, r1 = rates.restricted_optimum(loss, y, group)
    c2, r2 = rates.restricted_optimum_newton(loss, y, group)
    # both are accurate to the rounding of sum l' near the root: |c| eps x group size / l''
    np.testing.assert_allclose(c2, c1, rtol=0, atol=1e-9)
    assert r2 == pytest.approx(r1, rel=1e-14)


def test_slope_profile_of_a_power_law_then_a_geometric_tail():
    k = np.arange(0, 3001, dtype=float)
    gap = 5.0 / np.maximum(k, 1) ** 2
    prof = rates.slope_profile(gap)
    assert [(p["k0"], p["k1"]) for p in prof][-2:] == [(316, 1000), (1000, 3000)]
    assert all(p["slope"] == pytest.approx(-2.0, abs=1e-12) for p in prof)
    gap[1000:] = gap[1000] * 0.99 ** (k[1000:] - 1000)  # linear tail: steeper and steeper
    assert rates.slope_profile(gap)[-1]["slope"] < -5


def test_loglog_slope_and_contraction_on_exact_sequences():
    k = np.arange(0, 1001, dtype=float)
    gap = 7.0 / np.maximum(k, 1) ** 2
    assert rates.loglog_slope(gap, 32, 1000) == pytest.approx(-2.0, abs=1e-12)
    geo = 3.0 * 0.8 ** np.arange(200)
    rho, k_floor = rates.contraction(geo, floor=1e-11)
    assert rho == pytest.approx(0.8)
    assert k_floor == int(np.ceil(np.log(1e-11 / 3) / np.log(0.8)))
    rho, k_floor = rates.contraction(np.array([1.0, 2.0, np.inf]))
    assert rho == math.inf and k_floor is None


def test_divergence_rule_helpers():
    assert divergence.is_monotone([3.0, 2.0, 2.0 * (1 + 1e-7), 1.0])
    assert not divergence.is_monotone([3.0, 2.0, 2.1])
    assert not divergence.is_monotone([3.0, math.inf])
    assert divergence.blew_up([1.0, 5.0, 11.0], stopped=False)
    assert divergence.blew_up([1.0, math.nan], stopped=False)
    assert divergence.blew_up([1.0, 0.5], stopped=True)
    assert not divergence.blew_up([1.0, 9.0, 0.5], stopped=False)


@pytest.mark.slow
@pytest.mark.parametrize("module", [divergence, rates])
def test_quick_experiment_runs(tmp_path, module):
    assert module.main(["--quick", "--out", str(tmp_path)]) == 0
    assert (tmp_path / "result.json").is_file()
