"""CatBoost backend: sign convention, the shift carried by the metric, known answers."""

import itertools
import math
import sys

import numpy as np
import pytest
import torch

from grn_boost import fit, get_loss
from grn_boost.catboost_backend import CatBoostObjective
from grn_boost.objectives import SchemeObjective

cb = pytest.importorskip("catboost")

# a few rounds, one thread: CatBoost's start-up dominates these tests
FAST = {"thread_count": 1}


def _data(n, seed):
    rng = np.random.default_rng(seed)
    X = rng.uniform(size=(n, 3))
    return X, 10 * np.sin(6 * X[:, 0]) + 3 * rng.normal(size=n)


@pytest.mark.parametrize("scheme", ["grn", "newton", "gradient"])
def test_calc_ders_range_is_minus_the_autograd_derivatives(scheme):
    """CatBoost maximises: der1 = -dR/dF, der2 = -(d2R/dF2 + w lam), checked against autograd."""
    rng = np.random.default_rng(11)
    n = 29
    y, f, w = 4 * rng.normal(size=n), rng.normal(size=n), rng.uniform(0.3, 2.0, size=n)
    ft = torch.tensor(f, requires_grad=True)
    risk = (torch.tensor(w) * torch.log(torch.cosh(ft - torch.tensor(y)))).sum()
    (g_ref,) = torch.autograd.grad(risk, ft, create_graph=True)
    (h_ref,) = torch.autograd.grad(g_ref.sum(), ft)
    obj = SchemeObjective(get_loss("logcosh"), y, scheme=scheme, weight=w)
    lam = 0.37
    ders = CatBoostObjective(obj, lam).calc_ders_range(f, y, w)
    np.testing.assert_allclose(ders[:, 0], -g_ref.detach().numpy(), rtol=1e-12, atol=1e-15)
    curv = {"grn": h_ref.numpy() + w * lam, "newton": h_ref.numpy(), "gradient": w}[scheme]
    np.testing.assert_allclose(ders[:, 1], -curv, rtol=1e-12, atol=1e-15)


def test_sign_convention_reproduces_catboosts_own_rmse():
    """Independent route: squared error through the objective = CatBoost's built-in RMSE."""
    X, y = _data(157, seed=1)
    base = float(np.mean(y))
    res = fit(
        X,
        y,
        "squared",
        backend="catboost",
        scheme="newton",
        rounds=3,
        learning_rate=0.5,
        max_depth=2,
        base_score=base,
        backend_params=FAST,
    )
    p = {
        "loss_function": "RMSE",
        "iterations": 3,
        "learning_rate": 0.5,
        "depth": 2,
        "l2_leaf_reg": 0.0,
        "leaf_estimation_method": "Newton",
        "leaf_estimation_iterations": 1,
        "leaf_estimation_backtracking": "No",
        "boosting_type": "Plain",
        "bootstrap_type": "No",
        "random_strength": 0.0,
        "score_function": "L2",
        "thread_count": 1,
        "random_seed": 0,
        "allow_writing_files": False,
        "verbose": 0,
        "boost_from_average": False,
    }
    ref = cb.CatBoost(p).fit(cb.Pool(X, y, baseline=np.full(157, base)))
    expect = base + ref.predict(X, prediction_type="RawFormulaVal")
    np.testing.assert_allclose(res.predict_margin(X), expect, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("name", ["pseudo_huber", "logcosh"])
def test_first_grn_step_agrees_with_the_other_backends(name):
    """Two groups, depth 1: CatBoost's first GRN step = the hand formula = native = XGBoost."""
    x = np.repeat([0.0, 1.0], [30, 50])[:, None]
    y = np.repeat([4.0, -6.0], [30, 50])
    loss = get_loss(name)
    g, h = loss.grad(y, 0 * y), loss.hess(y, 0 * y)
    lam = math.sqrt(loss.hessian_lipschitz * np.linalg.norm(g))
    expect = np.empty_like(y)
    for grp in (y == 4.0, y == -6.0):
        expect[grp] = -0.8 * g[grp].sum() / (h[grp].sum() + grp.sum() * lam)
    kw = {"rounds": 1, "learning_rate": 0.8, "max_depth": 1, "base_score": 0.0}
    res = fit(x, y, loss, backend="catboost", backend_params=FAST, **kw)
    # CatBoost's leaf values are float64 but its staged predictions pass float32 borders:
    # agreement to float32 precision of the step (rtol 2e-6, as for XGBoost)
    np.testing.assert_allclose(res.predict_margin(x), expect, rtol=2e-6)
    for other in ("native", "xgboost"):
        np.testing.assert_allclose(
            res.predict_margin(x),
            fit(x, y, loss, backend=other, **kw).predict_margin(x),
            rtol=2e-6,
        )
    assert res.history["reg"][0] == pytest.approx(lam)
    assert res.history["cosine"][0] == pytest.approx(1.0, abs=1e-6)


def test_shift_from_the_metric_equals_the_replayed_shift_and_grn_is_monotone():
    """lam_k used in training (blockwise metric sums) = lam_k recomputed from the full margins."""
    X, y = _data(2300, seed=2)  # > 1000 rows: CatBoost calls the objective in blocks
    w = np.random.default_rng(3).uniform(0.5, 2.0, size=2300)
    kw = {
        "backend": "catboost",
        "rounds": 6,
        "learning_rate": 1.0,
        "max_depth": 3,
        "base_score": 0.0,
        "backend_params": FAST,
    }
    res = fit(X, y, "pseudo_huber", sample_weight=w, **kw)
    np.testing.assert_allclose(res.model.lam_used, res.history["reg"], rtol=1e-6)
    assert len(res.history["reg"]) == 6
    L = res.history["loss"]
    assert all(b <= a * (1 + 1e-6) for a, b in itertools.pairwise(L)) and L[-1] < 0.95 * L[0]
    newton = fit(X, y, "pseudo_huber", scheme="newton", **kw).history["loss"]
    assert not (newton[-1] < 10 * newton[0])  # vanilla Newton blows up (or stops)


def test_poisson_estimated_constant_and_staged_predict():
    rng = np.random.default_rng(8)
    X = rng.uniform(size=(200, 2))
    y = rng.poisson(np.exp(2 * X[:, 0])).astype(float)
    res = fit(X, y, "poisson", backend="catboost", rounds=4, max_depth=2, backend_params=FAST)
    np.testing.assert_allclose(res.model.lam_used, res.history["reg"], rtol=1e-6)
    staged = list(res.staged_predict(X))
    assert len(staged) == 4
    np.testing.assert_allclose(staged[-1], res.predict(X), rtol=1e-12)
    assert fit(X, y, "poisson", backend="catboost", rounds=0).n_rounds == 0


def test_missing_catboost_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "catboost", None)
    X, y = _data(20, seed=0)
    with pytest.raises(ImportError, match=r"grn-boost\[catboost\]"):
        fit(X, y, backend="catboost", rounds=1)
