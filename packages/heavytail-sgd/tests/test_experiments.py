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
    eps = entry_points(group="frontier_opt.experiments")
    assert "heavytail-sgd.convex-rates" in {e.name for e in eps}
