"""Small checks of the experiments' helpers (the experiments themselves run in `nox -s repro`)."""

import math

import numpy as np
import pytest
import torch

from adaptive_fgd.experiments import digits, regression, vision
from adaptive_fgd.experiments import pde as pde_exp


def test_time_to_and_fitted_rate():
    rows = [
        {"seconds": 1.0, "test_error": 0.5, "loss": 0.5, "met": True},
        {"seconds": 2.0, "test_error": 0.1, "loss": 0.25, "met": True},
        {"seconds": 3.0, "test_error": 0.2, "loss": 0.3, "met": False},
    ]
    assert regression.time_to(rows, 0.1) == 2.0
    assert regression.time_to(rows, 0.01) == math.inf
    rate, mono, used = regression.fitted_rate(rows, initial_loss=1.0)
    assert used == 2 and mono and math.isclose(rate, 0.5)  # (0.5 * 0.5) ** (1/2)


def test_manufactured_source_matches_finite_differences():
    # s = -Laplacian(u*) by autograd vs a 5-point stencil with h = 1e-3 (error ~ h^2 u'''' ~ 1e-2
    # relative to the bump's curvature scale 1/0.05^2 = 400)
    p = np.array([[0.31, 0.58], [0.7, 0.2], [0.5, 0.5]])
    h = 1e-3
    u = pde_exp.exact_solution
    lap = sum(
        (u(p + h * e) - 2 * u(p) + u(p - h * e)) / h**2
        for e in (np.array([1.0, 0]), np.array([0, 1.0]))
    )
    np.testing.assert_allclose(pde_exp.make_source(False)(p), -lap, rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(pde_exp.make_source(True)(p), -lap + u(p) ** 3, rtol=1e-4, atol=1e-3)


def test_vision_helpers():
    g = vision.pixel_grid(3, 4)
    assert g.shape == (12, 2) and float(g.abs().max()) < 1
    np.testing.assert_allclose(sorted(set(g[:, 0].tolist())), [-0.75, -0.25, 0.25, 0.75])
    assert math.isclose(
        vision.psnr(
            torch.zeros(4, 3, dtype=torch.float64), torch.full((4, 3), 0.1, dtype=torch.float64)
        ),
        20.0,
    )
    assert vision.Siren()(torch.zeros(5, 2)).shape == (5, 3)


@pytest.mark.parametrize("pool", [8])
def test_vision_image_loads_in_range(pool):
    img = vision.load_image(pool)
    assert img.shape == (256 // pool, 256 // pool, 3)
    assert float(img.min()) >= 0 and float(img.max()) <= 1


def test_logistic_excess_risk_is_the_kl_divergence():
    # route 1: loss minus its value at logit p (the helper); route 2: KL(p || sigmoid(f)) written
    # out with logs of probabilities.
    x, y, _, yt = regression.make_data(50, 40, seed=3, loss="logistic")
    assert bool((y.abs() < 1).all()) and x.shape == (50, 2) and yt.shape == (40, 1)
    f = torch.randn(40, 1, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    p, q = (1 + yt) / 2, torch.sigmoid(f)
    kl = (p * torch.log(p / q) + (1 - p) * torch.log((1 - p) / (1 - q))).mean()
    assert math.isclose(regression.excess_risk("logistic", f, yt), float(kl), rel_tol=1e-10)
    assert regression.excess_risk("logistic", 2 * torch.atanh(yt), yt) <= 1e-15
    assert math.isclose(regression.excess_risk("squared", f, yt), float(((f - yt) ** 2).mean()))


def test_fitted_rate_measures_the_gap_above_the_floor():
    rows = [{"loss": 1.5, "met": True}, {"loss": 1.25, "met": True}, {"loss": 1.3, "met": False}]
    rate, mono, used = regression.fitted_rate(rows, initial_loss=2.0, floor=1.0)
    assert used == 2 and mono and math.isclose(rate, 0.5)  # gaps 1 -> 0.5 -> 0.25


def test_digits_helpers_against_scikit_learn():
    from sklearn.metrics import log_loss
    from sklearn.svm import SVC

    x, t, xt, _ = digits.load_split(seed=4)
    assert x.shape == (digits.N_TRAIN, 64) and xt.shape == (1797 - digits.N_TRAIN, 64)
    assert float(x.min()) >= 0 and float(x.max()) <= 1 and set(t.tolist()) == set(range(10))
    # gamma="scale" as scikit-learn computes it, from the fitted SVC (an independent route)
    svc = SVC(gamma="scale").fit(x.numpy(), t.numpy())
    assert math.isclose(digits.scale_bandwidth(x), math.sqrt(1 / (2 * svc._gamma)), rel_tol=1e-12)
    gen = torch.Generator().manual_seed(1)
    logits = 3 * torch.randn(40, 10, generator=gen)
    labels = torch.arange(40) % 10
    ref = log_loss(labels.numpy(), torch.softmax(logits, 1).numpy(), labels=list(range(10)))
    assert math.isclose(digits.cross_entropy(logits, labels), ref, rel_tol=1e-9)
    assert digits.accuracy(torch.nn.functional.one_hot(labels, 10).double(), labels) == 1.0
    rows = [{"seconds": 1.0, "acc": 0.9}, {"seconds": 2.0, "acc": 0.98}]
    assert digits.time_to_acc(rows, 0.97) == 2.0 and math.isinf(digits.time_to_acc(rows, 0.99))
    assert digits.at_time(rows, 1.5, "acc") == 0.9 and digits.at_time(rows, 0.5, "acc") < 0
    met = [{"loss": 1.0, "met": True}, {"loss": 1.2, "met": False}, {"loss": 1.1, "met": True}]
    assert digits.monotone_on_met(met, 2.0)
    assert not digits.monotone_on_met([{"loss": 2.5, "met": True}], 2.0)
