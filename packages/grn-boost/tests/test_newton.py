"""The step and the diagnostics against independent references (lstsq, brute force, Taylor)."""

import math

import numpy as np
import pytest

from grn_boost.losses import get_loss
from grn_boost.newton import (
    cosine_angle,
    descent_certificate,
    gradient_edge,
    grn_regulariser,
    leaf_values,
    model_decrease,
    modified_hessian,
    newton_direction,
)


def _random_problem(rng, n=53, leaves=6):
    g = rng.normal(size=n)
    h = rng.uniform(0.05, 2.0, size=n)
    leaf = rng.integers(0, leaves, size=n)
    leaf[:leaves] = np.arange(leaves)  # every leaf non-empty
    return g, h, leaf


def test_leaf_values_minimise_the_quadratic_model_over_the_span():
    """Independent route: the normal equations of min <g, Pc> + 1/2 <Pc, A Pc> via lstsq."""
    rng = np.random.default_rng(0)
    g, h, leaf = _random_problem(rng)
    a, _ = modified_hessian(g, h, "grn", M=0.7)
    P = np.eye(leaf.max() + 1)[leaf]  # n x J leaf indicators
    c_ref = np.linalg.lstsq(P.T @ (a[:, None] * P), -P.T @ g, rcond=None)[0]
    np.testing.assert_allclose(leaf_values(g, a, leaf), c_ref, rtol=1e-12, atol=1e-14)
    # and it is a minimum: perturbing any leaf value increases the model
    f = c_ref[leaf]
    for j in range(P.shape[1]):
        for eps in (1e-3, -1e-3):
            assert model_decrease(g, a, f + eps * P[:, j]) > model_decrease(g, a, f)


def test_grn_shift_closed_form_and_schemes():
    g, h = np.array([3.0, -4.0]), np.array([0.5, 2.0])
    assert grn_regulariser(g, 5.0) == pytest.approx(5.0)  # sqrt(5 * 5)
    a, lam = modified_hessian(g, h, "grn", 5.0)
    np.testing.assert_allclose(a, h + 5.0)
    assert lam == 5.0
    a, lam = modified_hessian(g, h, "grn", 0.0)
    np.testing.assert_array_equal(a, h)  # no regulariser: plain Newton
    assert modified_hessian(g, h, "newton")[0] is h
    np.testing.assert_array_equal(modified_hessian(g, h, "gradient")[0], np.ones(2))
    w = np.array([2.0, 0.5])
    np.testing.assert_array_equal(modified_hessian(g, h, "gradient", weight=w)[0], w)
    with pytest.raises(ValueError, match="unknown scheme"):
        modified_hessian(g, h, "adam")
    with pytest.raises(ValueError, match="M must be"):
        grn_regulariser(g, -1.0)


def test_leaf_value_by_hand():
    # leaf 0: g = (1, 3), a = (1, 1) + lam = 2 each -> -4 / 4 = -1; leaf 1: g = -2, a = 2 -> 1
    g, a = np.array([1.0, 3.0, -2.0]), np.array([2.0, 2.0, 2.0])
    np.testing.assert_allclose(leaf_values(g, a, np.array([0, 0, 1])), [-1.0, 1.0])
    # an empty leaf gets 0, a flat leaf with a gradient an infinite step
    np.testing.assert_array_equal(leaf_values(g, a, np.array([0, 0, 2])), [-1.0, 0.0, 1.0])
    with np.errstate(divide="ignore"):
        assert np.isinf(leaf_values(np.array([1.0]), np.array([0.0]), np.array([0]))[0])


def test_cosine_and_edge_match_their_definitions_on_hand_made_cases():
    g = np.array([1.0, -1.0, 2.0])
    a = np.array([1.0, 4.0, 1.0])
    d = newton_direction(g, a)  # (-1, 1/4, -2)
    np.testing.assert_allclose(d, [-1.0, 0.25, -2.0])
    # the full Newton step: cosine 1; its negative: -1; A-orthogonal vector: 0
    assert cosine_angle(g, a, d) == pytest.approx(1.0)
    assert cosine_angle(g, a, -3 * d) == pytest.approx(-1.0)
    ortho = np.array([1.0, 0.0, -0.5])  # <d, ortho>_A = -1 + 0 + 1 = 0
    assert cosine_angle(g, a, ortho) == pytest.approx(0.0, abs=1e-15)
    # hand-made: f = (1, 0, 0): <d, f>_A = -1, ||d||_A = sqrt(1 + 1/4 + 4), ||f||_A = 1
    assert cosine_angle(g, a, np.array([1.0, 0, 0])) == pytest.approx(-1 / math.sqrt(5.25))
    # edge: plain cosine with -g
    assert gradient_edge(g, -g) == pytest.approx(1.0)
    assert gradient_edge(g, np.array([0.0, 1.0, 0.0])) == pytest.approx(1 / math.sqrt(6))
    assert math.isnan(gradient_edge(g, np.zeros(3)))
    assert math.isnan(cosine_angle(g, a, np.zeros(3)))


def test_cosine_of_exact_leaf_values_is_the_norm_ratio():
    """For the A-projection f of d: cos = ||f||_A / ||d||_A, in [0, 1]."""
    rng = np.random.default_rng(1)
    for _ in range(5):
        g, h, leaf = _random_problem(rng, n=int(rng.integers(20, 90)))
        a, _ = modified_hessian(g, h, "grn", M=0.3)
        f = leaf_values(g, a, leaf)[leaf]
        d = newton_direction(g, a)
        ratio = math.sqrt(np.sum(a * f * f) / np.sum(a * d * d))
        assert cosine_angle(g, a, f) == pytest.approx(ratio, rel=1e-12)
        assert 0 <= ratio <= 1


@pytest.mark.parametrize("name", ["pseudo_huber", "logcosh", "logistic"])
def test_grn_step_decreases_the_loss_and_the_cubic_bound_holds(name):
    """Exact restricted GRN step: R(F + f) - R(F) <= certificate <= 0 (Taylor with |l'''| <= M)."""
    rng = np.random.default_rng(2)
    loss = get_loss(name)
    n = 61
    y = rng.integers(0, 2, n).astype(float) if name == "logistic" else rng.normal(size=n) * 20
    for _ in range(10):
        F = rng.normal(size=n) * 5
        leaf = rng.integers(0, 5, n)
        g, h = loss.grad(y, F), loss.hess(y, F)
        M = loss.hessian_lipschitz
        a, _lam = modified_hessian(g, h, "grn", M)
        f = leaf_values(g, a, leaf)[leaf]
        actual = float(np.sum(loss.value(y, F + f) - loss.value(y, F)))
        bound = descent_certificate(g, h, f, M)
        scale = float(np.sum(np.abs(loss.value(y, F)))) * 1e-12
        assert actual <= bound + scale
        assert bound <= 0
