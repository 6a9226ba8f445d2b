"""Score formulas vs brute force; ALO vs explicit leave-one-out Newton steps; exact LOO."""

import numpy as np
import pytest
import torch

from trak_theory.loo import exact_loo_logistic, fit_logistic, logistic_alo, logistic_trak
from trak_theory.scores import (
    alo_scores,
    default_ridge,
    effective_dimension,
    ensemble_mean,
    kernel_solve,
    trak_scores,
    traker_scores,
)


def _data(gen, n, p, m=7):
    x = torch.randn(n, p, generator=gen, dtype=torch.float64) / p**0.5
    beta = 2 * torch.randn(p, generator=gen, dtype=torch.float64)
    u = torch.rand(n, generator=gen, dtype=torch.float64)
    y = torch.where(u < torch.sigmoid(x @ beta), 1.0, -1.0)
    xt = torch.randn(m, p, generator=gen, dtype=torch.float64) / p**0.5
    return x, y, xt, torch.sign(xt @ beta)


@pytest.mark.parametrize("ridge", [0.0, 0.37])
def test_trak_scores_brute_force(gen, ridge):
    phi = torch.randn(41, 9, generator=gen, dtype=torch.float64)
    tgt = torch.randn(5, 9, generator=gen, dtype=torch.float64)
    q = torch.rand(41, generator=gen, dtype=torch.float64)
    P, T, Q = phi.numpy(), tgt.numpy(), q.numpy()
    want = np.array(
        [
            [T[t] @ np.linalg.inv(P.T @ P + ridge * np.eye(9)) @ P[i] * Q[i] for i in range(41)]
            for t in range(5)
        ]
    )
    np.testing.assert_allclose(trak_scores(phi, tgt, q, ridge).numpy(), want, rtol=1e-9)


def test_kernel_solve_singular_gives_pseudo_inverse(gen):
    phi = torch.randn(4, 9, generator=gen, dtype=torch.float64)  # rank 4 < 9
    np.testing.assert_allclose(
        kernel_solve(phi.T @ phi, 0.0).numpy(), np.linalg.pinv((phi.T @ phi).numpy()), atol=1e-8
    )
    with pytest.raises(ValueError, match="ridge"):
        kernel_solve(phi.T @ phi, -1.0)


def test_alo_is_one_newton_step_on_the_loo_objective(gen):
    # Independent route: form H_{-i} explicitly, take theta_{-i} = theta - H_{-i}^{-1} grad_{-i}.
    x, y, xt, yt = _data(gen, 37, 6)
    lam = 0.3
    theta = fit_logistic(x, y, lam).numpy()
    z = (y[:, None] * x).numpy()
    zt = (yt[:, None] * xt).numpy()
    s = 1 / (1 + np.exp(z @ theta))  # 1 - p
    want = np.zeros((len(zt), len(z)))
    for i in range(len(z)):
        keep = np.arange(len(z)) != i
        w = s[keep] * (1 - s[keep])
        h = z[keep].T @ (w[:, None] * z[keep]) + lam * np.eye(6)
        g = -(s[keep][:, None] * z[keep]).sum(0) + lam * theta
        th_i = theta - np.linalg.solve(h, g)
        want[:, i] = zt @ theta - zt @ th_i
    got = logistic_alo(x, y, lam, torch.tensor(theta), xt, yt).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-7, atol=1e-12)


def test_exact_loo_matches_cold_refits_and_sklearn(gen):
    from sklearn.linear_model import LogisticRegression

    x, y, xt, yt = _data(gen, 31, 5)
    lam = 0.5
    scores, theta, thetas = exact_loo_logistic(x, y, lam, xt, yt)
    sk = LogisticRegression(C=1 / lam, fit_intercept=False, tol=1e-12, max_iter=10000)
    sk.fit(x.numpy(), y.numpy())
    np.testing.assert_allclose(theta.numpy(), sk.coef_[0], atol=1e-6)
    for i in (0, 13, 30):  # from scratch, no warm start, no batching
        keep = torch.arange(31) != i
        th = fit_logistic(x[keep], y[keep], lam)
        np.testing.assert_allclose(thetas[i].numpy(), th.numpy(), atol=1e-9)
        zt = yt[:, None] * xt
        np.testing.assert_allclose(scores[:, i].numpy(), (zt @ theta - zt @ th).numpy(), atol=1e-9)


def test_alo_approaches_exact_loo_for_large_n_over_p(gen):
    x, y, xt, yt = _data(gen, 300, 5)
    scores, theta, _ = exact_loo_logistic(x, y, 0.1, xt, yt)
    alo = logistic_alo(x, y, 0.1, theta, xt, yt)
    rel = float((alo - scores).norm() / scores.norm())
    assert rel < 0.02


def test_logistic_trak_without_projection_is_trak_scores(gen):
    x, y, xt, yt = _data(gen, 40, 6)
    theta = fit_logistic(x, y, 1.0)
    z, zt = y[:, None] * x, yt[:, None] * xt
    q = torch.sigmoid(-(z @ theta))
    torch.testing.assert_close(logistic_trak(x, y, theta, xt, yt, 0.2), trak_scores(z, zt, q, 0.2))


def test_default_ridge_hits_the_effective_dimension(gen):
    phi = torch.randn(60, 80, generator=gen, dtype=torch.float64)
    g = phi.T @ phi
    lam = default_ridge(g, n=60, fraction=0.5)
    eig = np.linalg.eigvalsh(g.numpy())
    assert lam > 0
    np.testing.assert_allclose(np.sum(eig / (eig + lam)), 30.0, rtol=1e-6)
    assert effective_dimension(torch.tensor(eig), lam) <= 30.0 + 1e-6
    assert default_ridge(g[:20, :20], n=60) == 0.0  # k = 20 <= n/2: plain TRAK
    assert default_ridge(g, 60, 0.25) > lam
    with pytest.raises(ValueError, match="fraction"):
        default_ridge(g, 60, 0.0)


def test_ensembles(gen):
    phis = [torch.randn(20, 4, generator=gen, dtype=torch.float64) for _ in range(3)]
    tgts = [torch.randn(3, 4, generator=gen, dtype=torch.float64) for _ in range(3)]
    qs = [torch.rand(20, generator=gen, dtype=torch.float64) for _ in range(3)]
    per = [trak_scores(p, t, q) for p, t, q in zip(phis, tgts, qs, strict=True)]
    torch.testing.assert_close(ensemble_mean(per), sum(per) / 3)
    # traker: per-model inverse normalised by its mean |entry|, q averaged separately
    want = 0
    for p, t in zip(phis, tgts, strict=True):
        inv = np.linalg.inv(p.numpy().T @ p.numpy())
        want = want + t.numpy() @ (inv / np.abs(inv).mean()) @ p.numpy().T
    want = want / 3 * (sum(q.numpy() for q in qs) / 3)[None, :]
    np.testing.assert_allclose(traker_scores(phis, tgts, qs).numpy(), want, rtol=1e-9)
    with pytest.raises(ValueError, match="shapes"):
        ensemble_mean([per[0], per[1][:2]])


def test_bad_inputs(gen):
    phi = torch.randn(5, 3, generator=gen)
    with pytest.raises(ValueError, match="empty"):
        trak_scores(phi[:0], phi, torch.ones(0))
    with pytest.raises(ValueError, match="feature dims"):
        trak_scores(phi, phi[:, :2], torch.ones(5))
    with pytest.raises(ValueError, match=r"\+1 / -1"):
        fit_logistic(phi, torch.tensor([0, 1, 0, 1, 1]), 1.0)
    with pytest.raises(ValueError, match="lam"):
        fit_logistic(phi, torch.ones(5), 0.0)
    with pytest.raises(ValueError, match="non-empty"):
        fit_logistic(phi[:0], torch.ones(0), 1.0)
    assert alo_scores(phi, phi, torch.ones(5), torch.zeros(5), 1.0).shape == (5, 5)


def test_alo_scores_refuses_bad_ridge_empty_sets_and_nan(gen):
    phi = torch.randn(9, 4, generator=gen, dtype=torch.float64)
    tgt = torch.randn(3, 4, generator=gen, dtype=torch.float64)
    q = torch.rand(9, generator=gen, dtype=torch.float64)
    w = q * (1 - q)
    assert alo_scores(phi, tgt, q, w, 0.5).shape == (3, 9)
    for ridge in (-1000.0, float("nan"), float("inf"), True):
        with pytest.raises(ValueError, match="ridge"):
            alo_scores(phi, tgt, q, w, ridge)
    with pytest.raises(ValueError, match="non-empty"):
        alo_scores(phi[:0], tgt, q[:0], w[:0], 0.5)
    bad = phi.clone()
    bad[2, 1] = float("nan")
    with pytest.raises(ValueError, match="finite"):
        alo_scores(bad, tgt, q, w, 0.5)
    with pytest.raises(ValueError, match="phi_target"):
        alo_scores(phi, tgt[:, :3], q, w, 0.5)
