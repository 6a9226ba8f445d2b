"""The sampled-target (true) Fisher output factor, through the optimizer's own hooks.

On the two-layer linear networks of ``test_kfac`` the exact one-step decrease of every family
member is a closed-form quadratic; the exponent the optimizer chooses from the rows its hooks
record during ``fisher_backward`` must land on the brute-force best, at initialisation and
near the least-squares optimum, where the user's own gradients (empirical Fisher) miss it.

Error model. With ``k`` draws per example the output factor is a Wishart-type average of
``N k`` rows, relative error about :math:`\\varepsilon = \\sqrt{m/(N k)}` (``m`` the output
width). The chosen exponent maximises a surrogate perturbed at first order in
:math:`\\varepsilon`; the *true* decrease at a perturbed argmax loses only second order, so
the test asks for :math:`\\Delta(\\hat a) \\ge (1 - 4\\varepsilon^2)\\max_a \\Delta(a)`.
"""

from __future__ import annotations

import copy
import math
import warnings

import pytest
import torch
from test_kfac import CASES, exact_decrease, grad_w1, grid_best, two_layer
from torch import nn

from adaptive_lmo import AdaptiveLMO, fractional_update


def _net(W1, W2):
    h, n = W1.shape
    m = W2.shape[0]
    net = nn.Sequential(nn.Linear(n, h, bias=False), nn.Linear(h, m, bias=False)).double()
    with torch.no_grad():
        net[0].weight.copy_(W1)
        net[1].weight.copy_(W2)
    net[1].weight.requires_grad_(False)  # W2 fixed: the loss is quadratic in W1
    return net


def _chosen(X, Y, W1, W2, samples, seed=0):
    """The exponent the optimizer picks on one full-batch criterion step (0: no Fisher)."""
    net = _net(W1, W2)
    opt = AdaptiveLMO(
        net,
        lr=0.0,
        momentum=0.0,
        update_every=1,
        stats="same_batch",
        max_rows=100_000,
        head=None,
        seed=seed,
    )
    out = net(X)
    if samples:
        opt.fisher_backward(out, "mse", samples=samples)
    (0.5 * ((out - Y) ** 2).sum() / X.shape[0]).backward()
    opt.step()
    geo = opt.geometry()["0.weight"]
    assert geo["source"].endswith("sampled Fisher)" if samples else "kfac)")
    return geo["exponent"]


def _near_optimum(X, Y, W1, W2, seed):
    T = torch.linalg.lstsq(X, Y).solution.T
    W1o = torch.linalg.pinv(W2) @ T
    g = torch.Generator().manual_seed(seed + 100)
    noise = torch.randn(W1o.shape, generator=g, dtype=torch.float64)
    return W1o + 0.05 * noise * W1o.norm() / math.sqrt(W1o.numel())


@pytest.mark.parametrize("where", ["init", "near_optimum"])
def test_sampled_fisher_choice_lands_on_the_brute_force_best(where):
    misses = 0
    for n, h, m, N, seed, decay in CASES:
        X, Y, W1, W2 = two_layer(n, h, m, N, seed, decay)
        if where == "near_optimum":
            W1 = _near_optimum(X, Y, W1, W2, seed)
        G = grad_w1(X, Y, W1, W2)
        a_best, dec, _ = grid_best(X, Y, W1, W2, G)
        best = max(dec)

        def frac(a, G=G, X=X, Y=Y, W1=W1, W2=W2, best=best):
            return exact_decrease(X, Y, W1, W2, fractional_update(G, a, scale="none")) / best

        for k in (1, 16):
            eps2 = m / (N * k)
            a = _chosen(X, Y, W1, W2, k)
            assert frac(a) >= 1 - 4 * eps2, (n, h, m, k, a, a_best)
        # 16 draws: on the grid's best (spacing 0.005) up to the sampling error
        assert abs(a - a_best) <= 0.02
        # the user's own gradients (empirical Fisher) are biased by the residual
        if frac(_chosen(X, Y, W1, W2, 0)) < 1 - 4 * m / (N * 16):
            misses += 1
    assert misses >= 2  # so the sampled rows, not the problem, make the difference


def test_cross_entropy_rows_estimate_the_gauss_newton_factor():
    """Second moment of the recorded rows vs the exact E[W2^T (diag p - p p^T) W2]."""
    g = torch.Generator().manual_seed(3)
    n, h, C, N = 6, 9, 5, 40
    net = nn.Sequential(nn.Linear(n, h, bias=False), nn.Linear(h, C, bias=False)).double()
    X = torch.randn(N, n, generator=g, dtype=torch.float64)
    y = torch.randint(0, C, (N,), generator=g)
    opt = AdaptiveLMO(net, lr=0.0, update_every=1, stats="same_batch", max_rows=10**6, head=None)
    samples = 400
    out = net(X)
    assert opt.fisher_due()
    opt.fisher_backward(out, "cross_entropy", samples=samples)
    assert all(q.grad is None for q in net.parameters())  # the extra backward touches no .grad
    rows = torch.cat(opt._collector.fisher_rows[id(net[0].weight)])
    assert rows.shape == (N * samples, h)
    B_mc = rows.T @ rows / rows.shape[0]
    W2 = net[1].weight.detach()
    p = torch.softmax(out.detach(), -1)
    H = torch.diag_embed(p) - p[:, :, None] * p[:, None, :]
    B = W2.T @ H.mean(0) @ W2
    # Monte-Carlo: each entry's standard error is about |B| / sqrt(N * samples)
    tol = 5 * float(torch.linalg.matrix_norm(B)) / math.sqrt(N * samples)
    assert float(torch.linalg.matrix_norm(B_mc - B)) < tol
    # the user's backward afterwards is recorded apart and does not touch the Fisher rows
    torch.nn.functional.cross_entropy(out, y).backward()
    assert len(opt._collector.fisher_rows[id(net[0].weight)]) == samples
    opt.step()
    assert opt.geometry()["0.weight"]["source"] == "criterion (surrogate, kfac, sampled Fisher)"


def test_fisher_backward_is_free_off_criterion_steps_and_validates():
    net = nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 3))
    opt = AdaptiveLMO(net, lr=0.01, update_every=3, backoff=0)  # next_batch: first choice on step 2
    x = torch.randn(8, 4)
    calls = []
    for _ in range(7):
        out = net(x)
        calls.append(opt.fisher_due())
        opt.fisher_backward(out, "mse")
        opt.zero_grad()
        out.pow(2).mean().backward()
        opt.step()
    assert calls == [False, True, False, False, True, False, False]
    assert opt.stats_nbytes() == 0
    out = net(x)
    for bad, match in [({"loss": "hinge"}, "loss"), ({"samples": 0}, "samples")]:
        with pytest.raises(ValueError, match=match):
            opt.fisher_backward(out, **bad)
    with pytest.raises(ValueError, match="graph"):
        opt.fisher_backward(out.detach())


def test_fisher_rng_round_trips_through_state_dict():
    def run(opt, net, x, steps):
        got = []
        for _ in range(steps):
            out = net(x)
            opt.fisher_backward(out, "cross_entropy")
            opt.zero_grad()
            out.logsumexp(-1).mean().backward()
            opt.step()
            got.append(opt.geometry()["0.weight"]["exponent"])
        return got

    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(5, 7), nn.Tanh(), nn.Linear(7, 4)).double()
    x = torch.randn(16, 5, dtype=torch.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        opt = AdaptiveLMO(net, lr=0.01, update_every=1, switch_confidence=0)
        run(opt, net, x, 3)
        sd = copy.deepcopy(opt.state_dict())  # state_dict() shares the live buffers
        snap = {k: v.detach().clone() for k, v in net.state_dict().items()}
        ref = run(opt, net, x, 3)
        net.load_state_dict(snap)
        opt.remove_hooks()
        opt2 = AdaptiveLMO(net, lr=0.01, update_every=1, switch_confidence=0)
        opt2.load_state_dict(sd)
        assert run(opt2, net, x, 3) == ref
