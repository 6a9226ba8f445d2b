"""Step-size bias of the stationary loss against discrete Lyapunov solutions (scipy)."""

import math

import numpy as np
import pytest
import torch
from scipy.linalg import solve_discrete_lyapunov

from langevin_ntk.step_bias import stationary_loss_bias

F64 = torch.float64


def _problem(seed, n=5, sizes=(7, 4)):
    """A random Jacobian split into two layers with their own decays (awkward sizes)."""
    g = torch.Generator().manual_seed(seed)
    j = torch.randn(n, sum(sizes), generator=g, dtype=F64)
    lams = (0.3 + torch.rand(len(sizes), generator=g, dtype=F64)).tolist()
    lam_vec = torch.cat(
        [torch.full((s,), lam, dtype=F64) for s, lam in zip(sizes, lams, strict=True)]
    )
    blocks = torch.split(j, list(sizes), dim=1)
    return j, blocks, lams, lam_vec


def _excess(j, m, q, temperature, lam_vec):
    """0.5 tr(H (Sigma_chain - Sigma_CLD)) with Sigma_chain from the discrete Lyapunov eq."""
    h = (j.T @ j).numpy()
    a = h + np.diag(lam_vec.numpy())
    sig = solve_discrete_lyapunov(m, q)
    return 0.5 * float(np.trace(h @ (sig - temperature * np.linalg.inv(a))))


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("c", [0.1, 0.5, 1.5])
def test_euler_bias_is_exact_on_linear_gaussian_model(seed, c):
    j, blocks, lams, lam_vec = _problem(seed)
    temp = 0.37
    a = j.T @ j + torch.diag(lam_vec)
    lr = c / float(torch.linalg.eigvalsh(a)[-1])  # c < 2: stable
    m = np.eye(a.shape[0]) - lr * a.numpy()
    ref = _excess(j, m, 2 * lr * temp * np.eye(a.shape[0]), temp, lam_vec)
    got = float(stationary_loss_bias([b @ b.T for b in blocks], lams, lr, temp))
    # float64 Lyapunov solve: error ~ eps * cond(I - M^2) * size, far below 1e-8 here
    assert got == pytest.approx(ref, rel=1e-8)
    assert got > 0


@pytest.mark.parametrize("seed", [3, 4])
def test_ou_scheme_bias_within_its_stated_order(seed):
    """OU's per-layer step (1 - e^{-lam eta})/lam differs from Euler by O(eta lam): check the
    formula's error against OU's exact excess is below 2 * eta * max(lam) of the CLD excess."""
    j, blocks, lams, lam_vec = _problem(seed)
    temp = 0.5
    a = j.T @ j + torch.diag(lam_vec)
    lr = 0.5 / float(torch.linalg.eigvalsh(a)[-1])
    u = (1 - torch.exp(-lam_vec * lr)) / lam_vec
    m = np.eye(a.shape[0]) - np.diag(u.numpy()) @ a.numpy()
    q = np.diag((temp * u * (2 - lam_vec * u)).numpy())
    ref = _excess(j, m, q, temp, lam_vec)
    got = float(stationary_loss_bias([b @ b.T for b in blocks], lams, lr, temp))
    h = j.T @ j
    cld = 0.5 * temp * float(torch.trace(h @ torch.linalg.inv(a)))
    assert abs(got - ref) <= 2 * lr * max(lams) * cld
    assert abs(got - ref) < 0.5 * got  # and the formula is not trivially loose


def test_batched_over_seeds_and_zero_temperature():
    g = torch.Generator().manual_seed(5)
    k = torch.randn(3, 4, 6, generator=g, dtype=F64)
    k = k @ k.mT
    lr = 0.4 / float(torch.linalg.eigvalsh(k)[:, -1].max())
    both = stationary_loss_bias([k], [0.0], lr, 0.2)
    assert both.shape == (3,)
    for s in range(3):
        one = stationary_loss_bias([k[s]], [0.0], lr, 0.2)
        assert float(one) == pytest.approx(float(both[s]), rel=1e-12)
    assert float(stationary_loss_bias([k], [0.0], lr, 0.0).abs().max()) == 0.0


def test_top_mode_inflation_is_one_over_one_minus_c_half():
    # one mode at curvature g, step c/g: the mode's loss T/2 becomes T/2 / (1 - c/2)
    for c in (0.1, 0.5, 1.0):
        bias = float(stationary_loss_bias([torch.ones(1, 1, dtype=F64)], [0.0], c, 2.0))
        assert bias + 1.0 == pytest.approx(1.0 / (1 - c / 2), rel=1e-12)


def test_bad_input():
    k = torch.eye(2, dtype=F64)
    with pytest.raises(ValueError, match="unstable"):
        stationary_loss_bias([k], [0.0], 2.0, 1.0)
    with pytest.raises(ValueError, match="one decay per layer"):
        stationary_loss_bias([k, k], [0.0], 0.1, 1.0)
    with pytest.raises(ValueError, match="temperature"):
        stationary_loss_bias([k], [0.0], 0.1, -1.0)
    with pytest.raises(ValueError, match="lr"):
        stationary_loss_bias([k], [0.0], 0.0, 1.0)
    with pytest.raises(ValueError, match="< 2"):
        stationary_loss_bias([k], [30.0], 0.1, 1.0)
    assert math.isfinite(float(stationary_loss_bias([k], [1.0], 0.1, 1.0)))
