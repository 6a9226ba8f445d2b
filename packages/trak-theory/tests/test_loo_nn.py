"""Exact LOO for small networks against brute force (float64 L-BFGS retrains, the convex
logistic-regression solver, autograd stationarity)."""

import pytest
import torch
from torch import nn

from trak_theory.gradients import binary_margin
from trak_theory.loo import exact_loo_logistic
from trak_theory.loo_nn import (
    NetworkObjective,
    exact_loo_network,
    fit_glm_offsets,
    fit_network,
    linearized_loo,
    min_hessian_eig,
)
from trak_theory.scores import alo_scores

# tolerances here follow an error model; `nox -s numerics` reruns them on every BLAS path
pytestmark = pytest.mark.numerics


def _lbfgs(fun, x0: torch.Tensor, iters: int = 400) -> torch.Tensor:
    """Brute force: float64 L-BFGS (strong Wolfe) on fun from x0, to its own tolerance."""
    x = x0.clone().requires_grad_(True)
    opt = torch.optim.LBFGS(
        [x],
        lr=1,
        max_iter=iters,
        tolerance_grad=1e-13,
        tolerance_change=0,
        history_size=50,
        line_search_fn="strong_wolfe",
    )

    def closure():
        opt.zero_grad()
        v = fun(x)
        v.backward()
        return v

    for _ in range(5):
        opt.step(closure)
    return x.detach()


def _tiny_mlp(gen, d=3, h=4, c=3):
    torch.manual_seed(int(torch.randint(0, 10**6, (1,), generator=gen)))
    return nn.Sequential(nn.Linear(d, h), nn.Tanh(), nn.Linear(h, c))


def _tiny_data(gen, n=13, d=3, c=3):
    x = torch.randn(n, d, generator=gen, dtype=torch.float64)
    y = torch.randint(0, c, (n,), generator=gen)
    return x, y


def test_linear_model_matches_logistic_regression(gen):
    # one logit, no bias, binary margin: the network LOO is the logistic-regression LOO
    n, p, lam = 17, 5, 0.7
    x = torch.randn(n, p, generator=gen, dtype=torch.float64)
    y01 = (torch.rand(n, generator=gen) < 0.5).long()
    xt = torch.randn(4, p, generator=gen, dtype=torch.float64)
    yt01 = (torch.rand(4, generator=gen) < 0.5).long()
    net = nn.Linear(p, 1, bias=False)
    obj = NetworkObjective(net, x, y01, lam, output_fn=binary_margin)
    sc, th, ths = exact_loo_network(obj, xt, yt01, tol=1e-11)
    ref, th_ref, ths_ref = exact_loo_logistic(x, 2.0 * y01 - 1, lam, xt, 2.0 * yt01 - 1)
    torch.testing.assert_close(th, th_ref, rtol=0, atol=1e-10)
    torch.testing.assert_close(ths, ths_ref, rtol=0, atol=1e-10)
    torch.testing.assert_close(sc, ref, rtol=0, atol=1e-10)
    # the model is linear: linearising it changes nothing
    torch.testing.assert_close(linearized_loo(obj, th, xt, yt01), sc, rtol=0, atol=1e-9)
    # a cold start (here zeros) lands on the same optimum of a convex problem
    sc0, _, _ = exact_loo_network(obj, xt, yt01, start=torch.zeros(p), tol=1e-11)
    torch.testing.assert_close(sc0, sc, rtol=0, atol=1e-9)


def test_network_loo_matches_lbfgs_retraining(gen):
    x, y = _tiny_data(gen)
    xt, yt = _tiny_data(gen, n=3)
    net = _tiny_mlp(gen)
    lam = 0.3
    obj = NetworkObjective(net, x, y, lam)
    sc, th, ths = exact_loo_network(obj, xt, yt, tol=1e-10, batch=5)
    ones = torch.ones(x.shape[0], dtype=torch.float64)
    # the full solution: a stationary point (plain autograd) with a PD Hessian
    t = th.clone().requires_grad_(True)
    (g,) = torch.autograd.grad(obj.value(t, ones), t)
    assert float(g.norm()) < 1e-9
    assert float(min_hessian_eig(obj, th, ones)[0]) > 0
    for i in range(x.shape[0]):
        w = ones.clone()
        w[i] = 0
        ref = _lbfgs(lambda t, w=w: obj.value(t, w), th)
        torch.testing.assert_close(ths[i], ref, rtol=0, atol=1e-6)
        f_full = obj.outputs(th, xt, yt)
        torch.testing.assert_close(sc[:, i], f_full - obj.outputs(ref, xt, yt), rtol=0, atol=1e-6)
    assert bool((min_hessian_eig(obj, ths, 1 - torch.eye(x.shape[0])) > 0).all())


def test_linearized_loo_matches_lbfgs_and_alo_is_one_newton_step(gen):
    x, y = _tiny_data(gen, n=11)
    xt, yt = _tiny_data(gen, n=2)
    obj = NetworkObjective(_tiny_mlp(gen), x, y, 0.5)
    th = fit_network(obj, torch.ones(1, 11), obj.flat(), tol=1e-11)[0]
    lin = linearized_loo(obj, th, xt, yt)
    phi, f0 = obj.features(th), obj.outputs(th)
    phit = obj.features(th, xt, yt)
    # features by an independent route: autograd of each margin, one example at a time
    for i in (0, 5):
        t = th.clone().requires_grad_(True)
        (gi,) = torch.autograd.grad(obj.outputs(t)[i], t)
        torch.testing.assert_close(phi[i], gi, rtol=0, atol=1e-12)
    for i in range(11):
        w = torch.ones(11, dtype=torch.float64)
        w[i] = 0

        def lin_obj(t, w=w):
            f = f0 + phi @ (t - th)
            return (w * nn.functional.softplus(-f)).sum() + 0.5 * obj.lam * (t * t).sum()

        ref = _lbfgs(lin_obj, th)
        torch.testing.assert_close(lin[:, i], -phit @ (ref - th), rtol=0, atol=1e-7)
    # ALO = one Newton step of the linearised LOO problem from theta_hat (no leverage limit)
    q = torch.sigmoid(-f0)
    alo = alo_scores(phi, phit, q, q * (1 - q), obj.lam)
    h = phi.T @ ((q * (1 - q))[:, None] * phi) + obj.lam * torch.eye(obj.p, dtype=torch.float64)
    for i in (0, 7):
        h_i = h - (q[i] * (1 - q[i])) * torch.outer(phi[i], phi[i])
        step = torch.linalg.solve(h_i, q[i] * phi[i])  # gradient of the LOO objective at th
        torch.testing.assert_close(alo[:, i], phit @ step, rtol=1e-9, atol=1e-12)


def test_fit_glm_offsets_zero_offsets_is_logistic_regression(gen):
    n, p, lam = 23, 4, 0.2
    x = torch.randn(n, p, generator=gen, dtype=torch.float64)
    y = torch.where(torch.rand(n, generator=gen) < 0.5, 1.0, -1.0)
    _, _, ths_ref = exact_loo_logistic(x, y, lam, x[:1], y[:1])
    masks = 1 - torch.eye(n, dtype=torch.float64)
    d = fit_glm_offsets(y[:, None] * x, torch.zeros(n), lam, torch.zeros(p), masks)
    torch.testing.assert_close(d, ths_ref, rtol=0, atol=1e-9)


def test_bad_input(gen):
    x, y = _tiny_data(gen)
    net = _tiny_mlp(gen)
    with pytest.raises(ValueError, match="ridge"):
        NetworkObjective(net, x, y, 0.0)
    with pytest.raises(ValueError, match="empty"):
        NetworkObjective(net, x[:0], y[:0], 1.0)
    obj = NetworkObjective(net, x, y, 1.0)
    with pytest.raises(ValueError, match="weights"):
        fit_network(obj, torch.ones(2, 5), obj.flat())
    with pytest.raises(ValueError, match="start"):
        exact_loo_network(obj, x[:2], y[:2], start="cold")
    with pytest.raises(RuntimeError, match="converge"):
        fit_network(obj, torch.ones(1, x.shape[0]), obj.flat(), tol=1e-30, max_iter=2)


def test_saddle_is_escaped(gen):
    # f = w2 * tanh(w1 . x): theta = 0 is stationary, and a saddle when the labels correlate
    # with x more strongly than the ridge; Newton started there must not stop there
    n, d = 19, 2
    x = torch.randn(n, d, generator=gen, dtype=torch.float64)
    y01 = (x[:, 0] > 0).long()
    net = nn.Sequential(nn.Linear(d, 1, bias=False), nn.Tanh(), nn.Linear(1, 1, bias=False))
    obj = NetworkObjective(net, x, y01, 0.1, output_fn=binary_margin)
    zero, ones = torch.zeros(obj.p, dtype=torch.float64), torch.ones(1, n)
    stuck = fit_network(obj, ones, zero, max_escapes=0)[0]
    assert float(stuck.abs().max()) == 0.0
    assert float(min_hessian_eig(obj, stuck, ones[0])[0]) < 0
    th = fit_network(obj, ones, zero)[0]
    assert float(min_hessian_eig(obj, th, ones[0])[0]) > 0
    assert float(obj.value(th, ones[0])) < float(obj.value(zero, ones[0]))


def test_cold_loo_equals_warm_loo_on_a_convex_model(gen):
    # softmax regression with a ridge is strictly convex: every training set has one minimum,
    # so cold fixed-seed retrains (Adam from the initialisation, then Newton) must land where
    # the warm-started Newton LOO does
    from trak_theory.experiments.mlp_loo import cold_loo

    n, m = 29, 5
    x = torch.randn(n + m, 4, dtype=torch.float64, generator=gen)
    y = torch.randint(0, 3, (n + m,), generator=gen)
    torch.manual_seed(3)
    net = nn.Linear(4, 3).double()
    obj = NetworkObjective(net, x[:n], y[:n], 0.7)
    init = obj.flat()
    warm, theta, thetas = exact_loo_network(obj, x[n:], y[n:], tol=1e-10)
    cold, theta_c, thetas_c = cold_loo(obj, init, x[n:], y[n:], steps=50, tol=1e-10, batch=7)
    assert cold.shape == (m, n)
    torch.testing.assert_close(theta_c, theta, atol=1e-8, rtol=0)
    torch.testing.assert_close(thetas_c, thetas, atol=1e-8, rtol=0)
    torch.testing.assert_close(cold, warm, atol=1e-8, rtol=0)
