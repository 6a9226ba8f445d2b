"""The convex-rates experiment's measuring parts, and its registration."""

from importlib.metadata import entry_points

import pytest
import torch

from heavytail_sgd.experiments import convex_rates as cr
from heavytail_sgd.noise import SymmetricAlphaStable


def test_fit_slope_recovers_an_exact_power_law():
    ts = torch.tensor([10.0, 100.0, 1000.0], dtype=torch.float64)
    assert float(cr.fit_slope(ts, 3.0 * ts**-0.4)) == pytest.approx(-0.4, abs=1e-12)


def test_bootstrap_ci_covers_the_slope_of_noisy_power_law_data():
    g = torch.Generator().manual_seed(0)
    ts = torch.tensor([10.0, 100.0, 1000.0, 10000.0], dtype=torch.float64)
    errs = ts[:, None] ** -0.3 * torch.exp(torch.randn(4, 300, generator=g, dtype=torch.float64))
    point, lo, hi = cr.bootstrap_slope(ts, errs, 0.5, 300, g)
    assert lo < -0.3 < hi and lo < point < hi and hi - lo < 0.1


def test_problem_has_the_designed_geometry():
    prob = cr.make_problem(12, 0)
    eig = torch.linalg.eigvalsh(prob["H"])
    torch.testing.assert_close(eig, torch.logspace(-5, 0, 12, dtype=torch.float64))
    assert float((prob["x1"] - prob["x_star"]).norm()) == pytest.approx(1.0)
    assert float(cr.excess(prob, prob["x_star"][None])) == pytest.approx(0.0, abs=1e-20)


def test_sgd_and_baseline_runners_reduce_the_error():
    prob = cr.make_problem(8, 1)
    noise = SymmetricAlphaStable(1.5)
    start = float(cr.excess(prob, prob["x1"][None]))
    g = torch.Generator().manual_seed(0)
    for errs in (
        cr.run_sgd(prob, noise, 0.01, 200, 16, 0.4, g),
        cr.run_baseline(prob, noise, 0.01, 200, 16, 0.4, g, clip=1.0),
    ):
        assert errs.shape == (16,) and float(errs.median()) < 0.5 * start


def test_experiment_is_registered():
    eps = entry_points(group="frontier_opt.experiments.extra")  # quick run over 90 s
    assert "heavytail-sgd.convex-rates" in {e.name for e in eps}


def test_logistic_gradient_matches_autograd_and_the_minimiser_matches_scipy():
    from scipy.optimize import minimize

    prob = cr.make_logistic_problem(5, 40, 3)
    x = torch.randn(3, 5, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    xr = x.clone().requires_grad_(True)
    (auto,) = torch.autograd.grad(cr.logistic_loss(prob, xr).sum(), xr)
    torch.testing.assert_close(cr.logistic_grad(prob, x), auto)
    res = minimize(
        lambda z: float(cr.logistic_loss(prob, torch.from_numpy(z))),
        x0=[0.0] * 5,
        jac=lambda z: cr.logistic_grad(prob, torch.from_numpy(z)).numpy(),
        method="BFGS",
        options={"gtol": 1e-12, "maxiter": 10_000},
    )
    assert float(cr.logistic_loss(prob, prob["x_star"])) <= res.fun + 1e-12
    assert float(cr.excess(prob, prob["x1"][None])) > 0
    assert float((prob["x1"] - prob["x_star"]).norm()) == pytest.approx(1.0)


def test_logistic_problem_rejects_bad_sizes():
    with pytest.raises(ValueError, match="n must be"):
        cr.make_logistic_problem(5, 9, 0)
    with pytest.raises(ValueError, match="d must be"):
        cr.make_problem(1, 0)


def test_noise_meets_the_theorems_moment_assumption():
    for p in cr.P_VALUES:
        noise = cr.noise_for(p)
        assert noise.finite_moment(p)
        assert noise.alpha == pytest.approx(min(p + cr.TAIL_MARGIN, 2.0))
    with pytest.raises(ValueError, match="p must lie"):
        cr.noise_for(2.5)


def test_mean_bootstrap_and_simultaneous_interval_are_wider():
    g = torch.Generator().manual_seed(1)
    ts = torch.tensor([10.0, 100.0, 1000.0], dtype=torch.float64)
    errs = ts[:, None] ** -0.5 * torch.exp(torch.randn(3, 400, generator=g, dtype=torch.float64))
    point, slopes = cr.bootstrap_slopes(ts, errs, None, 400, g)
    lo95, hi95 = cr.interval(slopes, 0.95)
    lo99, hi99 = cr.interval(slopes, 0.99)
    assert lo99 <= lo95 < -0.5 < hi95 <= hi99 and lo95 < point < hi95
    with pytest.raises(ValueError, match="level"):
        cr.interval(slopes, 1.0)
    with pytest.raises(ValueError, match="q must"):
        cr.bootstrap_slopes(ts, errs, 1.5, 10, g)


def test_quick_path_runs_end_to_end_at_a_tiny_size(tmp_path, monkeypatch):
    import json

    monkeypatch.setattr(cr, "_horizons", lambda ctx: ([20, 60, 180], 8, 20))
    assert cr.main(["--quick", "--out", str(tmp_path)]) == 0
    res = json.loads((tmp_path / "result.json").read_text())
    assert isinstance(res["holds"], bool)
    assert len(res["table"]) == len(cr.PROBLEMS) * len(cr.P_VALUES) * 4
    inside = [r["prediction_in_verdict_ci"] for r in res["table"] if "verdict_ci" in r]
    assert len(inside) == 2 * len(cr.P_VALUES) and res["holds"] == all(inside)
    assert all((tmp_path / png).is_file() for png in res["plots"])
