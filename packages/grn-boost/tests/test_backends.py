"""The schemes inside the three backends: known answers, agreement, monotonicity, bad input."""

import doctest
import importlib
import itertools
import math
import sys

import numpy as np
import pytest
from sklearn.tree import DecisionTreeRegressor

import grn_boost
from grn_boost import fit, get_loss
from grn_boost.objectives import SchemeObjective, grad_hess

BACKENDS = ("native", "xgboost", "lightgbm")


def divergence_data(n=300, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(size=(n, 3))
    y = 10 * np.sin(6 * X[:, 0]) + 3 * rng.normal(size=n)
    return X, y


@pytest.mark.parametrize(
    "module", ["losses", "newton", "objectives", "api"], ids=lambda m: f"doctest-{m}"
)
def test_docstring_examples_run(module):
    mod = importlib.import_module(f"grn_boost.{module}")
    res = doctest.testmod(mod, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert res.attempted > 0 and res.failed == 0


def test_squared_error_all_schemes_equal_plain_boosting_native():
    """Independent route: residual fitting with sklearn trees and their own leaf means."""
    rng = np.random.default_rng(1)
    X = rng.normal(size=(157, 4))
    y = X[:, 0] ** 2 + np.sin(3 * X[:, 1]) + 0.1 * rng.normal(size=157)
    eta, depth, rounds = 0.5, 3, 12
    F = np.full_like(y, y.mean())
    for _ in range(rounds):
        t = DecisionTreeRegressor(max_depth=depth, random_state=0).fit(X, y - F)
        F = F + eta * t.predict(X)
    for scheme in ("grn", "newton", "gradient"):
        res = fit(X, y, "squared", scheme=scheme, rounds=rounds, learning_rate=eta, max_depth=depth)
        np.testing.assert_allclose(res.predict(X), F, rtol=0, atol=1e-10)
        assert all(r == 0.0 for r in res.history["reg"])


def _two_group_problem():
    # feature = group indicator, labels constant per group: a depth-1 tree splits the groups
    x = np.repeat([0.0, 1.0], [30, 50])[:, None]
    y = np.repeat([4.0, -6.0], [30, 50])
    return x, y


def _expected_first_step(loss, y, M, eta):
    F0 = np.zeros_like(y)
    g, h = loss.grad(y, F0), loss.hess(y, F0)
    lam = math.sqrt(M * np.linalg.norm(g))  # the regulariser, by hand
    out = np.empty_like(y)
    for grp in (y == 4.0, y == -6.0):
        out[grp] = -g[grp].sum() / (h[grp].sum() + grp.sum() * lam)  # per-sample shift
    return eta * out, lam


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", ["pseudo_huber", "logcosh"])
def test_first_grn_step_has_the_known_answer(backend, name):
    X, y = _two_group_problem()
    loss = get_loss(name)
    M, eta = loss.hessian_lipschitz, 0.8
    expect, lam = _expected_first_step(loss, y, M, eta)
    res = fit(X, y, loss, backend=backend, rounds=1, learning_rate=eta, max_depth=1, base_score=0)
    # float32 inside the libraries: relative 1e-6
    np.testing.assert_allclose(res.predict_margin(X), expect, rtol=2e-6)
    assert res.history["reg"][0] == pytest.approx(lam)
    # the restricted step is the exact Newton step here (labels constant per leaf)
    assert res.history["cosine"][0] == pytest.approx(1.0, abs=1e-6)


@pytest.mark.parametrize("backend", BACKENDS)
def test_grn_equals_newton_when_the_regulariser_vanishes(backend):
    X, y = divergence_data(120, seed=3)
    kw = {"backend": backend, "rounds": 4, "learning_rate": 0.5, "max_depth": 2}
    # squared error: M = 0 exactly
    a = fit(X, y, "squared", scheme="grn", **kw).predict_margin(X)
    b = fit(X, y, "squared", scheme="newton", **kw).predict_margin(X)
    np.testing.assert_array_equal(a, b)
    # log-cosh with a negligible M: the shift ~1e-150 vanishes in float64 against h >= 1e-3
    y = y / 10
    a = fit(X, y, "logcosh", scheme="grn", M=1e-300, **kw).predict_margin(X)
    b = fit(X, y, "logcosh", scheme="newton", **kw).predict_margin(X)
    np.testing.assert_array_equal(a, b)


def test_native_and_xgboost_agree_round_by_round_on_depth_one():
    """Exact split enumeration on one feature with distinct values: same candidates."""
    rng = np.random.default_rng(4)
    n = 90
    X = np.arange(n, dtype=float)[:, None]
    y = 8 * np.sign(X[:, 0] - 37.5) + rng.normal(size=n) + 0.05 * X[:, 0]
    kw = {"rounds": 8, "learning_rate": 1.0, "max_depth": 1, "base_score": 0.0}
    nat = fit(X, y, "pseudo_huber", backend="native", **kw)
    xg = fit(X, y, "pseudo_huber", backend="xgboost", backend_params={"tree_method": "exact"}, **kw)
    for k in range(1, 9):
        a, b = nat.predict_margin(X, k), xg.predict_margin(X, k)
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(xg.history["loss"], nat.history["loss"], rtol=1e-5)
    np.testing.assert_allclose(xg.history["cosine"], nat.history["cosine"], rtol=1e-4)


@pytest.mark.parametrize("backend", BACKENDS)
def test_grn_is_monotone_where_newton_diverges(backend):
    X, y = divergence_data()
    kw = {"backend": backend, "rounds": 25, "learning_rate": 1.0, "max_depth": 3}
    grn = fit(X, y, "pseudo_huber", scheme="grn", base_score=0.0, **kw).history["loss"]
    newton = fit(X, y, "pseudo_huber", scheme="newton", base_score=0.0, **kw).history["loss"]
    assert all(b <= a * (1 + 1e-6) for a, b in itertools.pairwise(grn))
    assert grn[-1] < 0.6 * grn[0]
    assert not (newton[-1] < 10 * newton[0])  # blown up (or inf / nan)


@pytest.mark.parametrize("backend", BACKENDS)
def test_history_diagnostics_match_the_trees(backend):
    X, y = divergence_data(150, seed=2)
    res = fit(X, y, "logcosh", backend=backend, rounds=3, learning_rate=0.7, max_depth=2)
    h = res.history
    assert len(h["loss"]) == 4 and all(len(h[k]) == 3 for k in ("cosine", "edge", "reg"))
    loss = get_loss("logcosh")
    for k in range(3):
        F = res.predict_margin(X, k)
        step = res.predict_margin(X, k + 1) - F
        g, a, lam, _ = grad_hess(loss, y, F, scheme="grn")
        d = -g / a
        cos = np.sum(a * d * step) / math.sqrt(np.sum(a * d * d) * np.sum(a * step * step))
        edge = -np.dot(g, step) / (np.linalg.norm(g) * np.linalg.norm(step))
        assert h["cosine"][k] == pytest.approx(cos, rel=1e-4)
        assert h["edge"][k] == pytest.approx(edge, rel=1e-4)
        assert h["reg"][k] == pytest.approx(lam, rel=1e-5)
        assert h["loss"][k] == pytest.approx(np.mean(loss.value(y, F)), rel=1e-5)


def test_sample_weights_enter_gradient_hessian_and_M():
    rng = np.random.default_rng(6)
    y, f = rng.normal(size=9), rng.normal(size=9)
    w = rng.uniform(0.5, 3, size=9)
    loss = get_loss("logcosh")
    g, a, lam, M = grad_hess(loss, y, f, scheme="grn", weight=w)
    np.testing.assert_allclose(g, w * np.tanh(f - y))
    assert pytest.approx(loss.hessian_lipschitz / math.sqrt(w.min())) == M
    lam_ref = math.sqrt(M * math.sqrt(np.sum(w * np.tanh(f - y) ** 2)))  # ||l'|| in L2(w)
    assert lam == pytest.approx(lam_ref)
    np.testing.assert_allclose(a, w * (1 - np.tanh(f - y) ** 2 + lam_ref))
    # scaling every weight by c changes neither the shift nor the step
    g2, a2, lam2, _ = grad_hess(loss, y, f, scheme="grn", weight=7.5 * w)
    assert lam2 == pytest.approx(lam)
    np.testing.assert_allclose(g2 / a2, g / a)
    # integer weights = repeated rows, in the native backend
    X = rng.normal(size=(9, 2))
    wi = rng.integers(1, 4, size=9)
    wi[0] = 1  # min weight 1: the default M is the same for both
    kw = {"rounds": 3, "max_depth": 2, "base_score": 0.0}
    a = fit(X, y, "logcosh", sample_weight=wi.astype(float), **kw)
    b = fit(np.repeat(X, wi, 0), np.repeat(y, wi), "logcosh", **kw)
    np.testing.assert_allclose(a.predict_margin(X), b.predict_margin(X), rtol=1e-10)


def test_estimators():
    X, y = divergence_data(200, seed=7)
    reg = grn_boost.GRNBoostRegressor(n_estimators=15, max_depth=2).fit(X, y)
    staged = list(reg.staged_predict(X))
    assert len(staged) == 15
    np.testing.assert_allclose(staged[-1], reg.predict(X))
    assert len(reg.evals_result_["loss"]) == 16
    labels = np.where(y > 0, "pos", "neg")
    clf = grn_boost.GRNBoostClassifier(n_estimators=10, backend="xgboost").fit(X, labels)
    assert set(clf.predict(X)) <= {"pos", "neg"}
    assert np.mean(clf.predict(X) == labels) > 0.8
    proba = clf.predict_proba(X)
    np.testing.assert_allclose(proba.sum(1), 1.0)
    assert len(list(clf.staged_predict_proba(X))) == 10
    with pytest.raises(RuntimeError, match="not fitted"):
        grn_boost.GRNBoostRegressor().predict(X)
    with pytest.raises(ValueError, match=">= 2 classes"):
        grn_boost.GRNBoostClassifier().fit(X, np.zeros(200))
    # more than two classes: softmax (tests/test_multiclass.py)
    assert (
        grn_boost.GRNBoostClassifier(n_estimators=2).fit(X, np.arange(200) % 3).classes_.size == 3
    )


def test_poisson_runs_with_the_estimated_constant():
    rng = np.random.default_rng(8)
    X = rng.uniform(size=(200, 2))
    y = rng.poisson(np.exp(2 * X[:, 0])).astype(float)
    res = fit(X, y, "poisson", rounds=10, max_depth=2)
    assert all(m > 0 for m in res.history["M"])
    assert res.history["loss"][-1] < res.history["loss"][0]


def test_bad_input():
    X, y = divergence_data(30)
    with pytest.raises(ValueError, match="unknown loss"):
        fit(X, y, "hinge")
    with pytest.raises(ValueError, match="unknown backend"):
        fit(X, y, backend="sklearn")
    with pytest.raises(ValueError, match="unknown scheme"):
        fit(X, y, scheme="adam")
    for M in (0.0, -1.0, math.inf, math.nan):
        with pytest.raises(ValueError, match="M must be"):
            fit(X, y, M=M)
    with pytest.raises(ValueError, match="sample_weight has 29"):
        fit(X, y, sample_weight=np.ones(29))
    with pytest.raises(ValueError, match="sample_weight must be >= 0"):
        fit(X, y, sample_weight=-np.ones(30))
    with pytest.raises(ValueError, match="labels >= 0"):
        fit(X, y, "poisson")
    with pytest.raises(ValueError, match="non-finite"):
        fit(X, np.where(np.arange(30) == 3, np.inf, y))
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        fit(X, y, "logistic")
    with pytest.raises(ValueError, match="rows"):
        fit(X[:10], y)
    with pytest.raises(ValueError, match="learning_rate"):
        fit(X, y, learning_rate=1.5)
    with pytest.raises(ValueError, match="rounds"):
        fit(X, y, rounds=-1)
    with pytest.raises(ValueError, match="max_depth"):
        fit(X, y, max_depth=0)
    with pytest.raises(ValueError, match="margins"):
        SchemeObjective(get_loss("squared"), y)(np.zeros(5))


@pytest.mark.parametrize(("backend", "module"), [("xgboost", "xgboost"), ("lightgbm", "lightgbm")])
def test_missing_backend_names_the_extra(monkeypatch, backend, module):
    monkeypatch.setitem(sys.modules, module, None)  # makes `import module` raise ImportError
    X, y = divergence_data(20)
    with pytest.raises(ImportError, match=rf"grn-boost\[{module}\]"):
        fit(X, y, backend=backend, rounds=1)


def test_missing_sklearn_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "sklearn.tree", None)
    X, y = divergence_data(20)
    with pytest.raises(ImportError, match=r"grn-boost\[native\]"):
        fit(X, y, backend="native", rounds=1)


def test_grad_hess_matches_autograd_of_the_weighted_risk():
    """Independent route: torch autograd of R(F) = sum_i w_i l(y_i, F_i) (pseudo-Huber)."""
    import torch

    rng = np.random.default_rng(9)
    n = 23
    y, f, w = rng.normal(size=n) * 4, rng.normal(size=n), rng.uniform(0.2, 2.0, size=n)
    ft = torch.tensor(f, requires_grad=True)
    risk = (torch.tensor(w) * (torch.sqrt(1 + (ft - torch.tensor(y)) ** 2) - 1)).sum()
    (g_ref,) = torch.autograd.grad(risk, ft, create_graph=True)
    (h_ref,) = torch.autograd.grad(g_ref.sum(), ft)
    loss = get_loss("pseudo_huber")
    for scheme in ("newton", "grn"):
        g, a, lam, M = grad_hess(loss, y, f, scheme=scheme, weight=w)
        np.testing.assert_allclose(g, g_ref.detach().numpy(), rtol=1e-12)
        np.testing.assert_allclose(a, h_ref.numpy() + w * lam, rtol=1e-12)
    assert lam == pytest.approx(math.sqrt(M * math.sqrt(np.sum(w * loss.grad(y, f) ** 2))))


def test_objective_stops_on_non_finite_loss_and_on_abort():
    y = np.array([0.0, 1.0, 2.0])
    obj = SchemeObjective(get_loss("pseudo_huber"), y, scheme="newton")
    obj(np.zeros(3))
    g, a = obj(np.array([np.inf, 0.0, 0.0]))  # the round's result is not finite
    assert obj.stopped and obj.stop_reason == "non-finite training loss"
    np.testing.assert_array_equal(g, 0.0)  # a no-op round for the backend
    np.testing.assert_array_equal(a, 1.0)
    assert len(obj.history["loss"]) == 2 and len(obj.history["reg"]) == 1
    obj2 = SchemeObjective(get_loss("pseudo_huber"), y)
    obj2(np.zeros(3))
    obj2.abort("backend refused")
    assert obj2.stopped and obj2.stop_reason == "backend refused"
    assert len(obj2.history["loss"]) == 1 and obj2.history["reg"] == []
    assert obj2.finish(np.ones(3)) is obj2.history  # nothing left open
    assert len(obj2.history["loss"]) == 1
