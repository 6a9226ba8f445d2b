"""Functional gradients against finite differences, autograd and closed forms (float64)."""

import math

import numpy as np
import pytest
import torch
from sklearn.kernel_ridge import KernelRidge

from adaptive_fgd.functional import (
    check_delta,
    guaranteed_decrease,
    l2_gradient,
    l2_inner,
    pl_rate,
    relative_error,
    rkhs_gradient_coefficients,
    step_size,
)
from adaptive_fgd.losses import loss_derivative, loss_value, smoothness
from adaptive_fgd.representations import gaussian_kernel


def _labels(n, k, gen, loss):
    if loss == "logistic":  # hard labels and soft (expected) labels 2p - 1 mixed
        hard = torch.where(torch.rand(n, k, generator=gen) < 0.5, -1.0, 1.0)
        soft = 2 * torch.rand(n, k, generator=gen) - 1
        return torch.where(torch.rand(n, k, generator=gen) < 0.5, hard, soft)
    if loss == "softmax":  # one-hot rows and random probability vectors mixed
        hot = torch.nn.functional.one_hot(torch.randint(k, (n,), generator=gen), k).double()
        soft = torch.rand(n, k, generator=gen) ** 3  # skewed: some entries near 0
        soft = soft / soft.sum(1, keepdim=True)
        return torch.where(torch.rand(n, 1, generator=gen) < 0.5, hot, soft)
    return torch.randn(n, k, generator=gen)


def _risk(loss, f, y, w):
    return (w[:, None] * loss_value(loss, f, y)).sum()


@pytest.mark.parametrize("loss", ["squared", "logistic", "softmax"])
@pytest.mark.parametrize(("n", "k"), [(1, 1), (37, 3), (101, 2), (53, 10)])
def test_l2_gradient_is_riesz_representer_fd(loss, n, k):
    gen = torch.Generator().manual_seed(n * 7 + k)
    f, h = torch.randn(n, k, generator=gen), torch.randn(n, k, generator=gen)
    y = _labels(n, k, gen, loss)
    w = torch.rand(n, generator=gen) + 0.1
    w = w / w.sum()
    g = l2_gradient(loss, f, y)
    eps = 1e-5
    fd = (_risk(loss, f + eps * h, y, w) - _risk(loss, f - eps * h, y, w)) / (2 * eps)
    # central difference: truncation ~ eps^2 |l'''| |h|^3, rounding ~ 1e-16 |R| / eps
    scale = float((w[:, None] * h.abs() ** 3).sum() + _risk(loss, f, y, w).abs() + 1)
    assert abs(float(fd - l2_inner(g, h, w))) <= 1e-8 * scale


@pytest.mark.parametrize("loss", ["squared", "logistic", "softmax"])
@pytest.mark.parametrize("k", [2, 7])
def test_loss_derivative_matches_autograd(loss, k):
    gen = torch.Generator().manual_seed(3 + k)
    u = (5 * torch.randn(50, k, generator=gen)).requires_grad_()
    y = _labels(50, k, gen, loss)
    (grad,) = torch.autograd.grad(loss_value(loss, u, y).sum(), u)
    torch.testing.assert_close(loss_derivative(loss, u.detach(), y), grad, rtol=1e-12, atol=1e-14)


def test_smoothness_bounds_second_derivative():
    u = torch.linspace(-20, 20, 4001)
    for loss in ("squared", "logistic"):
        y = torch.ones_like(u)
        d = loss_derivative(loss, u, y)
        second = (d[2:] - d[:-2]) / (u[2:] - u[:-2])
        assert float(second.max()) <= smoothness(loss) * (1 + 1e-6)
        assert float(second.max()) >= smoothness(loss) * (1 - 1e-3)  # the constant is tight


@pytest.mark.parametrize("k", [2, 3, 10])
def test_softmax_smoothness_bounds_the_hessian(k):
    # the Hessian of a row's cross-entropy by autograd (independent of the closed form), its
    # largest eigenvalue by eigvalsh, over random logits of several scales and label vectors
    gen = torch.Generator().manual_seed(k)
    top = 0.0
    for trial in range(40):
        u0 = (0.3 * trial / 10) * torch.randn(k, generator=gen)
        y = _labels(1, k, gen, "softmax")[0]
        hess = torch.autograd.functional.hessian(
            lambda u, y=y: loss_value("softmax", u, y).sum(), u0
        )
        top = max(top, float(torch.linalg.eigvalsh(hess).max()))
    assert top <= smoothness("softmax") * (1 + 1e-12)
    # tight: two classes with equal logits (other logits far below) give 1/2
    u = torch.full((k,), -40.0)
    u[:2] = 0.0
    y = torch.nn.functional.one_hot(torch.tensor(0), k).double()
    hess = torch.autograd.functional.hessian(lambda v: loss_value("softmax", v, y).sum(), u)
    assert float(torch.linalg.eigvalsh(hess).max()) >= smoothness("softmax") * (1 - 1e-12)


def _rkhs_setup(n=23, d=2, k=2, seed=0, loss="squared"):
    gen = torch.Generator().manual_seed(seed)
    x = torch.rand(n, d, generator=gen)
    c = torch.randn(n, k, generator=gen)
    y = _labels(n, k, gen, loss)
    return x, c, y


def _rkhs_risk(loss, centres, coef, x, y, lam, bw):
    """R(f) for f = sum_j coef_j k(centres_j, .), written from the definition."""
    f_x = gaussian_kernel(x, centres, bw) @ coef
    norm2 = (coef * (gaussian_kernel(centres, centres, bw) @ coef)).sum()
    return loss_value(loss, f_x, y).sum(1).mean() + 0.5 * lam * norm2


@pytest.mark.parametrize("loss", ["squared", "logistic"])
def test_rkhs_gradient_pointwise_equals_derivative_along_kernel_section(loss):
    # Riesz + reproducing property: g(z) = <g, k(z, .)> = DR(f)[k(z, .)], by autograd on eps.
    x, c, y = _rkhs_setup(loss=loss, seed=1)
    lam, bw = 0.3, 0.4
    K = gaussian_kernel(x, x, bw)
    alpha = rkhs_gradient_coefficients(loss, K @ c, y, c, lam)
    z = torch.rand(5, 2, generator=torch.Generator().manual_seed(9))
    g_z = gaussian_kernel(z, x, bw) @ alpha  # (5, k)
    for i in range(5):
        for j in range(y.shape[1]):
            eps = torch.zeros(1, y.shape[1], requires_grad=True)
            e = torch.zeros(1, y.shape[1])
            e[0, j] = 1.0
            coef = torch.cat([c, eps * e])
            centres = torch.cat([x, z[i : i + 1]])
            (d,) = torch.autograd.grad(_rkhs_risk(loss, centres, coef, x, y, lam, bw), eps)
            assert abs(float(d[0, j]) - float(g_z[i, j])) <= 1e-12 * (1 + abs(float(g_z[i, j])))


def test_rkhs_gradient_inner_product_matches_finite_difference():
    x, c, y = _rkhs_setup(n=31, k=1, seed=2)
    lam, bw = 0.05, 0.3
    K = gaussian_kernel(x, x, bw)
    alpha = rkhs_gradient_coefficients("squared", K @ c, y, c, lam)
    b = torch.randn(31, 1, generator=torch.Generator().manual_seed(5))
    eps = 1e-6
    fd = (
        _rkhs_risk("squared", x, c + eps * b, x, y, lam, bw)
        - _rkhs_risk("squared", x, c - eps * b, x, y, lam, bw)
    ) / (2 * eps)
    inner = float((alpha * (K @ b)).sum())  # <g, h>_H = alpha^T K b
    assert abs(float(fd) - inner) <= 1e-7 * (1 + abs(inner))


def test_exact_fgd_equals_closed_form_iteration_and_kernel_ridge():
    # Squared loss + RKHS penalty: c <- c - eta [(K/n + lam I) c - y/n]; route 1 loops it,
    # route 2 is the spectral closed form c_T = c* + (I - eta A)^T (c_0 - c*); the fixed point
    # c* = (K + n lam I)^{-1} y is scikit-learn's KernelRidge(alpha = n lam) (route 3).
    n, lam, bw = 40, 1e-2, 0.35
    gen = torch.Generator().manual_seed(4)
    x = torch.rand(n, 2, generator=gen)
    y = torch.sin(4 * x[:, :1]) + 0.1 * torch.randn(n, 1, generator=gen)
    K = gaussian_kernel(x, x, bw)
    A = K / n + lam * torch.eye(n)
    evals, evecs = torch.linalg.eigh(A)
    eta = 1.0 / float(evals.max())  # 1/L in the RKHS
    c = torch.zeros(n, 1)
    T = 400
    for _ in range(T):
        c = c - eta * rkhs_gradient_coefficients("squared", K @ c, y, c, lam)
    c_star = torch.linalg.solve(K + n * lam * torch.eye(n), y)
    decay = evecs @ torch.diag((1 - eta * evals) ** T) @ evecs.T
    closed = c_star + decay @ (torch.zeros(n, 1) - c_star)
    torch.testing.assert_close(c, closed, rtol=0, atol=1e-10 * float(c_star.abs().max()) * n)
    krr = KernelRidge(alpha=n * lam, kernel="rbf", gamma=1 / (2 * bw**2)).fit(x.numpy(), y.numpy())
    np.testing.assert_allclose(krr.dual_coef_, c_star.numpy(), rtol=1e-8, atol=1e-10)
    # and the iterate is within the predicted linear rate of c*
    rate = float(1 - eta * evals.min())
    assert float((c - c_star).norm()) <= rate**T * float(c_star.norm()) * (1 + 1e-8) + 1e-12


def test_step_size_maximises_guaranteed_decrease():
    for L, d in [(1.0, 0.3), (0.25, 0.5), (7.0, 0.9)]:
        eta = step_size(L, d)
        grid = np.linspace(1e-4, 2 * eta, 2001)
        vals = [guaranteed_decrease(L, d, e, 1.0) for e in grid]
        assert guaranteed_decrease(L, d, eta, 1.0) >= max(vals) - 1e-12
        expected = (1 - d) ** 2 / (2 * L * (1 + d) ** 2)
        assert math.isclose(guaranteed_decrease(L, d, eta, 1.0), expected, rel_tol=1e-12)


@pytest.mark.parametrize("delta", [0.1, 0.5, 0.9])
def test_descent_lemma_and_pl_rate_hold_for_any_error_of_relative_size_delta(delta):
    # R(f) = 1/2 ||f - y||^2 in L^2(mu): L = 1, PL with m = 1, R* = 0.
    gen = torch.Generator().manual_seed(int(delta * 100))
    n = 53
    w = torch.full((n,), 1.0 / n)
    y = torch.randn(n, 1, generator=gen)
    eta = step_size(1.0, delta)
    for trial in range(50):
        f = torch.randn(n, 1, generator=gen)
        g = l2_gradient("squared", f, y)
        e = torch.randn(n, 1, generator=gen) if trial else -g  # trial 0: the worst direction
        e = e * (delta * float(l2_inner(g, g, w).sqrt()) / float(l2_inner(e, e, w).sqrt()))
        r0 = float(_risk("squared", f, y, w))
        r1 = float(_risk("squared", f - eta * (g + e), y, w))
        bound = guaranteed_decrease(1.0, delta, eta, float(l2_inner(g, g, w)))
        assert r0 - r1 >= bound * (1 - 1e-10)
        assert r1 <= pl_rate(1.0, 1.0, delta) * r0 * (1 + 1e-10)


def test_relative_error_matches_definition_and_rejects_bad_input():
    a = torch.tensor([[3.0], [4.0]])
    assert math.isclose(relative_error(a + torch.tensor([[0.3], [0.4]]), a), 0.1, rel_tol=1e-12)
    with pytest.raises(ValueError, match="vanishes"):
        relative_error(a, torch.zeros(2, 1))
    with pytest.raises(ValueError, match="non-finite"):
        relative_error(a, torch.tensor([[math.nan], [1.0]]))


@pytest.mark.parametrize("bad", [0, 1, 0.0, 1.0, -0.2, 1.5, math.nan, math.inf, True, "0.5", None])
def test_delta_outside_open_unit_interval_is_rejected(bad):
    with pytest.raises(ValueError, match="delta"):
        check_delta(bad)


def test_gradient_bad_inputs():
    with pytest.raises(ValueError, match="empty"):
        l2_gradient("squared", torch.zeros(0, 1), torch.zeros(0, 1))
    with pytest.raises(ValueError, match="non-finite"):
        l2_gradient("squared", torch.tensor([[math.inf]]), torch.zeros(1, 1))
    with pytest.raises(ValueError, match="loss must be"):
        l2_gradient("hinge", torch.zeros(1, 1), torch.zeros(1, 1))
    with pytest.raises(ValueError, match="shape"):
        l2_gradient("squared", torch.zeros(3, 1), torch.zeros(3, 2))
    with pytest.raises(ValueError, match="lam"):
        rkhs_gradient_coefficients(
            "squared", torch.zeros(2, 1), torch.zeros(2, 1), torch.zeros(2, 1), -1.0
        )
    with pytest.raises(ValueError, match="smoothness"):
        step_size(0.0, 0.5)
    with pytest.raises(ValueError, match="pl_constant"):
        pl_rate(1.0, 2.0, 0.5)


def test_soft_label_logistic_is_the_expected_hard_label_loss_and_minimised_at_logit():
    # route 1: the soft-label formula; route 2: the average of the two hard-label losses
    # softplus(-y u) weighted by P(y = +1) = p, written independently here.
    gen = torch.Generator().manual_seed(21)
    u = 6 * torch.randn(40, 3, generator=gen)
    p = torch.rand(40, 3, generator=gen)
    hard = p * torch.log1p(torch.exp(-u)) + (1 - p) * torch.log1p(torch.exp(u))
    torch.testing.assert_close(loss_value("logistic", u, 2 * p - 1), hard, rtol=1e-13, atol=0)
    # the derivative vanishes at logit p (the minimiser) and is increasing (convex loss)
    logit = torch.log(p) - torch.log1p(-p)
    d0 = loss_derivative("logistic", logit, 2 * p - 1)
    assert float(d0.abs().max()) <= 4 * torch.finfo(torch.float64).eps
    assert bool((loss_derivative("logistic", logit + 0.1, 2 * p - 1) > 0).all())
