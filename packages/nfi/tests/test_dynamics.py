"""Classifier-mean drift and the linearised growth of the means."""

import math

import pytest
import torch
import torch.nn.functional as F

from nfi.dynamics import (
    class_mean,
    classifier_mean_drift,
    mean_pair_step,
    predicted_growth_rate,
    zero_sum_violation,
)
from nfi.loss import stable_cross_entropy


def head_problem(seed, gap=25.0):
    g = torch.Generator().manual_seed(seed)
    N, d, C = 23, 7, 5
    H = torch.randn(N, d, generator=g)
    # orthonormal classifier rows (times 2): the shift below moves only the target logit
    W = 2 * torch.linalg.qr(torch.randn(d, C, generator=g, dtype=torch.float64))[0].T.float()
    y = torch.randint(0, C, (N,), generator=g)
    # make the target logit lead by `gap` through the features' direction of w_y
    H = H + gap * W[y] / (W[y].norm(dim=1, keepdim=True) ** 2)
    return H, W, y


@pytest.mark.parametrize("loss_fn", [F.cross_entropy, stable_cross_entropy])
def test_drift_equals_mean_of_autograd_weight_gradient(loss_fn):
    H, W, y = head_problem(0)
    Wp = W.clone().requires_grad_(True)
    z = H @ Wp.T
    z.retain_grad()
    loss_fn(z, y, reduction="sum").backward()
    drift = classifier_mean_drift(z.grad, H)
    route2 = class_mean(Wp.grad).double()
    # two float32 routes of sum_i sigma_i h_i / C: error ~ N u max|sigma h|
    tol = 23 * 2.0**-24 * (z.grad.double().abs().sum(1)[:, None] * H.double().abs()).sum(0).max()
    torch.testing.assert_close(drift, route2, rtol=0, atol=float(tol) * 4)


def test_zero_sum_breaks_only_with_torch_ce():
    H, W, y = head_problem(1)
    z1 = (H @ W.T).requires_grad_(True)
    z2 = (H @ W.T).requires_grad_(True)
    F.cross_entropy(z1, y, reduction="sum").backward()
    stable_cross_entropy(z2, y, reduction="sum").backward()
    s1, s2 = zero_sum_violation(z1.grad), zero_sum_violation(z2.grad)
    assert (s1 > 0).sum() > 5  # absorbed rows: row sum = the others' mass
    assert s2.abs().max() <= 2.0**-24 * s1.abs().max()
    d1, d2 = classifier_mean_drift(z1.grad, H), classifier_mean_drift(z2.grad, H)
    assert d2.norm() <= 1e-6 * d1.norm()


def test_rate_is_the_eigenvalue_of_the_linear_step():
    sigma, C, lw, lh, N = 0.03, 7, 0.5, 0.2, 11
    a = lw * sigma * N / C
    b = lh * sigma
    M = torch.tensor([[1.0, -a], [-b, 1.0]], dtype=torch.float64)
    top = torch.linalg.eigvals(M).real.max().item()
    assert predicted_growth_rate(sigma, C, lw, lh, N) == pytest.approx(math.log(top), rel=1e-14)


def test_full_updates_reproduce_the_predicted_rate():
    # full per-sample updates of (W, H) with gradients of constant row sum sigma: every
    # classifier row and every feature moves; only the means should follow the 2x2 model
    g = torch.Generator().manual_seed(2)
    N, d, C, lw, lh, sigma = 9, 4, 6, 0.3, 0.7, 0.05
    u = torch.randn(d, generator=g, dtype=torch.float64)
    W = torch.randn(C, d, generator=g, dtype=torch.float64)
    H = torch.randn(N, d, generator=g, dtype=torch.float64)
    # put the means on the growing eigenvector
    W = W - W.mean(0) - math.sqrt(lw * N / C) * u
    H = H - H.mean(0) + math.sqrt(lh) * u
    G = torch.full((N, C), sigma / C, dtype=torch.float64)  # rows sum to sigma
    T = 50
    w0, h0 = W.mean(0).norm(), H.mean(0).norm()
    for _ in range(T):
        gW = G.T @ H
        gH = G @ W
        W, H = W - lw * gW, H - lh * gH
    rate = predicted_growth_rate(sigma, C, lw, lh, N)
    assert math.log(W.mean(0).norm() / w0) / T == pytest.approx(rate, rel=1e-10)
    assert math.log(H.mean(0).norm() / h0) / T == pytest.approx(rate, rel=1e-10)
    # and the averaged model gives the same numbers
    wb, hb = -math.sqrt(lw * N / C) * u, math.sqrt(lh) * u
    for _ in range(T):
        wb, hb = mean_pair_step(wb, hb, sigma, C, lw, lh, N)
    torch.testing.assert_close(wb, W.mean(0), rtol=1e-12, atol=0)
    torch.testing.assert_close(hb, H.mean(0), rtol=1e-12, atol=0)
    assert (W.mean(0) @ H.mean(0)) < 0  # the growing mode has anti-aligned means


def test_no_drift_no_growth():
    assert predicted_growth_rate(0.0, 10, 1.0, 1.0) == 0.0


def test_bad_inputs():
    with pytest.raises(ValueError, match="sigma_bar"):
        predicted_growth_rate(-1.0, 10, 1.0, 1.0)
    with pytest.raises(ValueError, match="lr_w"):
        predicted_growth_rate(0.1, 10, 0.0, 1.0)
    with pytest.raises(ValueError, match="num_classes"):
        predicted_growth_rate(0.1, 1, 1.0, 1.0)
    with pytest.raises(ValueError, match="num_samples"):
        predicted_growth_rate(0.1, 3, 1.0, 1.0, 0)
    with pytest.raises(ValueError, match="shape"):
        class_mean(torch.zeros(3))
    with pytest.raises(ValueError, match="need"):
        classifier_mean_drift(torch.zeros(3, 2), torch.zeros(4, 2))
    with pytest.raises(ValueError, match="class dim"):
        zero_sum_violation(torch.zeros(3, 1))
