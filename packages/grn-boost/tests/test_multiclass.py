"""Softmax cross-entropy: derivatives, the Hessian's Lipschitz bound, the per-class GRN step."""

import itertools
import math

import numpy as np
import pytest
import torch
from scipy.optimize import minimize

import grn_boost
from grn_boost import fit, get_loss
from grn_boost.losses import Softmax
from grn_boost.newton import leaf_values, modified_hessian

BACKENDS = ("native", "xgboost", "lightgbm")


def _problem(rng, n, K):
    return rng.integers(0, K, n).astype(float), 2.5 * rng.normal(size=(n, K))


def test_softmax_derivatives_match_autograd():
    """value, p - e_y, the diagonal p(1-p) and the full quadratic form, against torch."""
    rng = np.random.default_rng(0)
    n, K = 31, 5
    y, f = _problem(rng, n, K)
    loss = get_loss("softmax", n_classes=K)
    ft = torch.tensor(f, requires_grad=True)
    v = torch.nn.functional.cross_entropy(ft, torch.tensor(y, dtype=torch.long), reduction="none")
    (g,) = torch.autograd.grad(v.sum(), ft, create_graph=True)
    np.testing.assert_allclose(loss.value(y, f), v.detach().numpy(), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(loss.grad(y, f), g.detach().numpy(), rtol=1e-12, atol=1e-14)
    d = rng.normal(size=(n, K))
    # d_i^T H_i d_i by a Hessian-vector product (the losses are per sample: one sum suffices)
    (hd,) = torch.autograd.grad((g * torch.tensor(d)).sum(), ft)
    quad = np.sum(hd.numpy() * d, axis=1)
    np.testing.assert_allclose(loss.hess_quadratic(y, f, d), quad, rtol=1e-10, atol=1e-14)
    # the diagonal: the quadratic form along each unit vector e_k
    for k in range(K):
        e = np.zeros((n, K))
        e[:, k] = 1.0
        np.testing.assert_allclose(loss.hess(y, f)[:, k], loss.hess_quadratic(y, f, e), rtol=1e-12)
    _, grad, hess = loss.evaluate(y, f)
    np.testing.assert_array_equal(grad, loss.grad(y, f))
    np.testing.assert_array_equal(hess, loss.hess(y, f))


def _third_moment(F, U):
    """|E_p (u - E_p u)^3| for rows of logits F and unit directions U (paired rows)."""
    p = np.exp(F - F.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    v = U - np.sum(p * U, axis=1, keepdims=True)
    return np.abs(np.sum(p * v**3, axis=1))


def _brute_force_sup(K, seed):
    """Random search over (F, u) (40k pairs), then BFGS from the 4 best."""
    rng = np.random.default_rng(seed)
    m = 40_000
    F = rng.normal(size=(m, K)) * rng.choice([0.5, 2.0, 5.0], size=(m, 1))
    U = rng.normal(size=(m, K))
    U /= np.linalg.norm(U, axis=1, keepdims=True)
    vals = _third_moment(F, U)

    def neg(z):
        u = z[K:] / np.linalg.norm(z[K:])
        return -_third_moment(z[None, :K], u[None])[0]

    best = float(vals.max())
    for i in np.argsort(vals)[-4:]:
        r = minimize(neg, np.concatenate([F[i], U[i]]), method="BFGS", options={"gtol": 1e-10})
        best = max(best, -float(r.fun))
    return best


@pytest.mark.parametrize("K", [3, 4, pytest.param(6, marks=pytest.mark.slow)])
def test_softmax_hessian_lipschitz_bound_against_brute_force(K):
    """sup_F,|u|=1 |D^3 l[u,u,u]| by brute force: below the proved 1/sqrt(2); it is sqrt(6)/9."""
    sup = _brute_force_sup(K, seed=K)
    assert sup <= Softmax(K).hessian_lipschitz
    # the search finds the two-class value (logistic's 1/(6 sqrt 3) times (sqrt 2)^3)
    assert sup == pytest.approx(math.sqrt(6) / 9, rel=1e-6)


def test_softmax_hessian_is_at_most_twice_its_diagonal():
    rng = np.random.default_rng(1)
    for K in (2, 3, 7):
        for _ in range(50):
            p = rng.dirichlet(np.full(K, 0.3))
            H = np.diag(p) - np.outer(p, p)
            gap = np.linalg.eigvalsh(2 * np.diag(p * (1 - p)) - H)
            assert gap.min() >= -1e-14


def test_per_class_grn_step_decreases_and_the_cubic_bound_holds():
    """Exact per-class GRN step on random partitions: R(F+f) - R(F) <= the cubic bound < 0.

    Bound: <g, f> + 1/2 sum_i f_i^T H_i f_i + M/6 sum_i ||f_i||^3 (full Hessian, Euclidean
    norm per sample), which the README's argument makes <= -(5/6) lam ||f||^2.
    """
    rng = np.random.default_rng(2)
    n, K = 47, 4
    loss = get_loss("softmax", n_classes=K)
    M = loss.hessian_lipschitz
    for _ in range(20):
        y, F = _problem(rng, n, K)
        F *= 3
        _, g, h = loss.evaluate(y, F)
        a, lam = modified_hessian(g, h, "grn", M)
        f = np.empty_like(F)
        for k in range(K):  # one partition per class, as one tree per class
            leaf = rng.integers(0, 4, n)
            f[:, k] = leaf_values(g[:, k], a[:, k], leaf)[leaf]
        actual = float(np.sum(loss.value(y, F + f) - loss.value(y, F)))
        bound = float(
            np.sum(g * f)
            + 0.5 * np.sum(loss.hess_quadratic(y, F, f))
            + M / 6 * np.sum(np.linalg.norm(f, axis=1) ** 3)
        )
        scale = 1e-12 * float(np.sum(loss.value(y, F)))
        assert actual <= bound + scale
        assert bound <= -5 / 6 * lam * np.sum(f * f) + scale


def _two_groups_three_classes():
    # every class's mean gradient differs between the groups, so every class's stump splits
    # (LightGBM adds nothing for a class whose tree cannot split)
    x = np.repeat([0.0, 1.0], [30, 50])[:, None]
    return x, np.repeat([0.0, 1.0, 1.0, 2.0], [20, 10, 10, 40])


@pytest.mark.parametrize("backend", BACKENDS)
def test_first_multiclass_grn_step_has_the_known_answer(backend):
    """Per class k and group j: f_jk = -eta sum g / sum (p(1-p) + lam), lam = sqrt(M ||g||_F)."""
    X, y = _two_groups_three_classes()
    loss = get_loss("softmax", n_classes=3)
    F0 = np.zeros((80, 3))
    g, h = loss.grad(y, F0), loss.hess(y, F0)
    lam = math.sqrt(loss.hessian_lipschitz * np.linalg.norm(g))
    expect = np.empty_like(F0)
    for grp in (X[:, 0] == 0, X[:, 0] == 1):
        expect[grp] = -0.8 * g[grp].sum(0) / (h[grp].sum(0) + grp.sum() * lam)
    res = fit(
        X,
        y,
        loss,
        backend=backend,
        rounds=1,
        learning_rate=0.8,
        max_depth=1,
        base_score=np.zeros(3),
    )
    np.testing.assert_allclose(res.predict_margin(X), expect, rtol=2e-6, atol=1e-7)
    assert res.history["reg"][0] == pytest.approx(lam)


@pytest.mark.parametrize("backend", BACKENDS)
def test_multiclass_grn_is_monotone_where_newton_diverges(backend):
    rng = np.random.default_rng(3)
    n, K = 300, 4
    X = rng.uniform(size=(n, 3))
    y = (np.floor(X[:, 0] * K) + (rng.uniform(size=n) < 0.15) * rng.integers(0, K, n)) % K
    kw = {
        "backend": backend,
        "rounds": 15,
        "learning_rate": 1.0,
        "max_depth": 3,
        "base_score": np.array([4.0, 0.0, 0.0, 0.0]),
    }  # a confident, wrong start
    grn = fit(X, y, "softmax", **kw).history["loss"]
    with np.errstate(all="ignore"):
        newton = fit(X, y, "softmax", scheme="newton", **kw).history["loss"]
    assert all(b <= a * (1 + 1e-6) for a, b in itertools.pairwise(grn))
    assert grn[-1] < 0.3 * grn[0]
    assert not (max(newton) < 10 * newton[0])  # blown up (or inf / nan)


def test_classifier_with_more_than_two_classes():
    rng = np.random.default_rng(4)
    X = rng.uniform(size=(240, 2))
    names = np.array(["ant", "bee", "cat"])
    labels = names[np.minimum((X[:, 0] * 3).astype(int), 2)]
    for backend in ("native", "lightgbm"):
        clf = grn_boost.GRNBoostClassifier(n_estimators=8, backend=backend).fit(X, labels)
        proba = clf.predict_proba(X)
        assert proba.shape == (240, 3)
        np.testing.assert_allclose(proba.sum(1), 1.0, rtol=1e-12)
        assert np.mean(clf.predict(X) == labels) > 0.9
        staged = list(clf.staged_predict_proba(X))
        assert len(staged) == 8
        np.testing.assert_allclose(staged[-1], proba, rtol=1e-9)
    assert clf.loss == "logistic"  # the estimator's own parameter is left as given
    with pytest.raises(ValueError, match="single-output"):
        grn_boost.GRNBoostClassifier(backend="catboost").fit(X, labels)


def test_softmax_bad_input():
    X = np.zeros((4, 1))
    with pytest.raises(ValueError, match="integer labels"):
        fit(X, [0.0, 1.5, 2.0, 0.0], "softmax")
    with pytest.raises(ValueError, match="integer labels"):
        fit(X, [0.0, 1.0, 3.0, 0.0], "softmax", loss_params={"n_classes": 3})
    with pytest.raises(ValueError, match="n_classes >= 2"):
        get_loss("softmax", n_classes=1)
    with pytest.raises(ValueError, match="vector of 3"):
        fit(X, [0.0, 1.0, 2.0, 0.0], "softmax", base_score=0.0)
    with pytest.raises(ValueError, match="finite"):
        fit(X, [0.0, 1.0, 2.0, 0.0], "softmax", base_score=[0.0, np.inf, 0.0])
