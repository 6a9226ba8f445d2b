"""Output-side curvature (``curvature="kfac"``) against brute-force float64 references.

A two-layer linear network ``y_hat = W2 W1 x`` with squared loss: the loss is exactly quadratic
in ``W1`` and its curvature is exactly the Kronecker product of the input second moment and
``W2^T W2`` (the Gauss-Newton output factor), so the one-step decrease of every family member
is computed exactly from the data and the K-FAC surrogate must reproduce it.
"""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

from adaptive_lmo import AdaptiveLMO
from adaptive_lmo.criterion import (
    choose_exponent,
    curvature_along,
    curvature_matrix,
    kfac_curvature,
    surrogate_decrease,
)
from adaptive_lmo.fractional import fractional_update, svd_factors
from adaptive_lmo.stats import output_rows

GRID = torch.linspace(0.0, 1.0, 201, dtype=torch.float64)


def two_layer(n, h, m, N, seed, w2_decay, noise=0.3):
    """Whitened inputs, a random teacher, a second layer with singular values j^-w2_decay."""
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(N, n, generator=g, dtype=torch.float64)
    Qa, _ = torch.linalg.qr(torch.randn(m, m, generator=g, dtype=torch.float64))
    Qb, _ = torch.linalg.qr(torch.randn(h, h, generator=g, dtype=torch.float64))
    k = min(m, h)
    sv = torch.arange(1, k + 1, dtype=torch.float64) ** -w2_decay
    W2 = Qa[:, :k] @ torch.diag(sv) @ Qb[:, :k].T
    W1 = 0.1 * torch.randn(h, n, generator=g, dtype=torch.float64)
    T = torch.randn(m, n, generator=g, dtype=torch.float64)
    Y = X @ T.T + noise * torch.randn(N, m, generator=g, dtype=torch.float64)
    return X, Y, W1, W2


def loss(X, Y, W1, W2):
    return float(0.5 * ((X @ W1.T @ W2.T - Y) ** 2).sum() / X.shape[0])


def grad_w1(X, Y, W1, W2):
    R = X @ W1.T @ W2.T - Y  # residuals, N x m
    return (R @ W2).T @ X / X.shape[0]


def exact_decrease(X, Y, W1, W2, D):
    """max_eta L(W1) - L(W1 - eta D): L is a quadratic in eta, fitted from three evaluations."""
    l0, l1, l2 = loss(X, Y, W1, W2), loss(X, Y, W1 - D, W2), loss(X, Y, W1 - 2 * D, W2)
    c = (l2 - 2 * l1 + l0) / 2
    b = l1 - l0 - c
    return b * b / (4 * c)


def grid_best(X, Y, W1, W2, G):
    f = svd_factors(G)
    dec = [
        exact_decrease(X, Y, W1, W2, fractional_update(G, float(a), scale="none", factors=f))
        for a in GRID
    ]
    k = max(range(len(dec)), key=dec.__getitem__)
    return float(GRID[k]), dec, f


# (n, h, m, N, seed, w2_decay): awkward sizes; w2_decay 0 makes W2's spectrum flat
CASES = [
    (23, 17, 11, 900, 0, 0.3),  # grid best 0.215 (interior)
    (14, 29, 9, 800, 2, 0.4),  # 0.35
    (19, 15, 21, 600, 7, 0.5),  # 0.045
    (31, 13, 19, 700, 1, 2.0),  # 0 (the Muon end)
]


@pytest.mark.parametrize("case", CASES)
def test_kfac_surrogate_is_the_exact_decrease_and_lands_on_the_grid_best(case):
    n, h, m, N, seed, decay = case
    X, Y, W1, W2 = two_layer(n, h, m, N, seed, decay)
    G = grad_w1(X, Y, W1, W2)
    a_best, dec, f = grid_best(X, Y, W1, W2, G)
    # exact output factor of the Gauss-Newton curvature: B = W2^T W2, rows of W2 as a sketch
    M = kfac_curvature(f.U, f.Vh, X, W2 * W2.shape[0] ** 0.5)
    for a in (0.0, 0.3, 0.8, 1.0):
        k = round(a * 200)
        assert float(surrogate_decrease(a, f.s, M)) == pytest.approx(dec[k], rel=1e-9)
    a_kfac = choose_exponent(f.s, M)
    assert abs(a_kfac - a_best) <= 0.01
    exact_at = exact_decrease(X, Y, W1, W2, fractional_update(G, a_kfac, scale="none"))
    assert exact_at >= (1 - 1e-4) * max(dec)
    # the input-only criterion (identity output Hessian) is wrong here, and loses decrease
    a_in = choose_exponent(f.s, curvature_along(f.Vh, X))
    assert abs(a_in - a_best) > 0.25
    exact_in = exact_decrease(X, Y, W1, W2, fractional_update(G, a_in, scale="none"))
    assert exact_in < 0.97 * max(dec)


def test_kfac_with_identity_output_factor_is_the_input_criterion():
    X, Y, W1, W2 = two_layer(17, 12, 12, 500, 3, 0.0)
    G = grad_w1(X, Y, W1, W2)
    f = svd_factors(G)
    Gout = torch.eye(12, dtype=torch.float64) * 12**0.5  # B = I
    M = kfac_curvature(f.U, f.Vh, X, Gout)
    c = curvature_along(f.Vh, X)
    grid = torch.linspace(0, 1, 11, dtype=torch.float64)
    torch.testing.assert_close(surrogate_decrease(grid, f.s, M), surrogate_decrease(grid, f.s, c))
    assert choose_exponent(f.s, M) == pytest.approx(choose_exponent(f.s, c), abs=1e-12)


def test_matrix_curvature_batched_is_block_diagonal_and_shapes_checked():
    g = torch.Generator().manual_seed(4)
    s = torch.rand(3, 5, generator=g, dtype=torch.float64) + 0.1
    R = torch.randn(3, 40, 5, generator=g, dtype=torch.float64)
    M = R.mT @ R / 40
    grid = torch.linspace(0, 1, 7, dtype=torch.float64)
    total = sum(
        (s[e].unsqueeze(0) ** grid.unsqueeze(1)) @ M[e] @ (s[e].unsqueeze(1) ** grid.unsqueeze(0))
        for e in range(3)
    ).diagonal()
    num = (s.reshape(-1).unsqueeze(0) ** (1 + grid.unsqueeze(1))).sum(1) ** 2
    torch.testing.assert_close(surrogate_decrease(grid, s, M), num / (2 * total))
    with pytest.raises(ValueError, match="matrix curvature"):
        surrogate_decrease(0.5, s, M[:, :4, :4])
    with pytest.raises(ValueError, match="non-finite"):
        choose_exponent(s[0], torch.full((5, 5), float("nan"), dtype=torch.float64))


def _net(n, h, m, W1, W2):
    net = nn.Sequential(nn.Linear(n, h, bias=False), nn.Linear(h, m, bias=False)).double()
    with torch.no_grad():
        net[0].weight.copy_(W1)
        net[1].weight.copy_(W2)
    return net


def _brute_exponent(s, U, Vh, X, Gout):
    """Maximise the K-FAC surrogate on a 401-point grid, all by hand (no package code)."""
    A = Vh @ X.T @ X @ Vh.T / X.shape[0]
    B = U.T @ Gout.T @ Gout @ U / Gout.shape[0]
    M = A * B
    grid = torch.linspace(0, 1, 401, dtype=torch.float64)
    E = (s / s.max()).unsqueeze(0) ** grid.unsqueeze(1)
    vals = (E * s).sum(1) ** 2 / ((E @ M) * E).sum(1)
    return float(grid[int(torch.argmax(vals))])


@pytest.mark.parametrize("stats", ["same_batch", "next_batch"])
def test_optimizer_hooks_record_exact_output_gradients_and_choose_by_them(stats):
    n, h, m, N = 13, 9, 7, 57
    X, Y, W1, W2 = two_layer(n, h, m, 3 * N, 5, 1.5)
    net = _net(n, h, m, W1, W2)
    opt = AdaptiveLMO(
        net,
        lr=0.05,
        momentum=0.0,
        curvature="kfac",
        stats=stats,
        update_every=1,
        max_rows=1000,
        adamw_lr=0.0,
    )
    lossf = lambda out, y: 0.5 * ((out - y) ** 2).sum() / out.shape[0]  # noqa: E731
    key = id(net[0].weight)
    factors = None
    for t in range(3):
        xb, yb = X[t * N : (t + 1) * N], Y[t * N : (t + 1) * N]
        W1t = net[0].weight.detach().clone()
        opt.zero_grad()
        lossf(net(xb), yb).backward()
        # brute force: dL/dh_t = W2^T r_t / N for every row, the layer's inputs are xb
        R = xb @ W1t.T @ W2.T - yb
        Gout = R @ W2 / N
        if key in opt._collector.due:
            got = torch.cat(opt._collector.out_rows[key], dim=-2)
            torch.testing.assert_close(got, Gout, rtol=1e-12, atol=1e-15)
            torch.testing.assert_close(torch.cat(opt._collector.rows[key]), xb)
        P = net[0].weight.grad.detach().clone()
        opt.step()
        geo = opt.geometry()["0.weight"]
        if stats == "same_batch":
            U, s, Vh = torch.linalg.svd(P, full_matrices=False)
            assert geo["source"] == "criterion (surrogate, kfac)"
            assert geo["exponent"] == pytest.approx(_brute_exponent(s, U, Vh, xb, Gout), abs=0.01)
        elif factors is not None:  # next batch: the previous direction, this batch's statistics
            U, s, Vh = factors
            assert geo["source"] == "criterion (surrogate, kfac)"
            assert geo["exponent"] == pytest.approx(_brute_exponent(s, U, Vh, xb, Gout), abs=0.01)
        factors = torch.linalg.svd(P, full_matrices=False)
    assert opt.stats_nbytes() == 0


def test_output_rows_of_a_conv_match_autograd():
    torch.manual_seed(0)
    conv = nn.Conv2d(3, 5, 3, padding=1).double()
    x = torch.randn(2, 3, 6, 7, dtype=torch.float64)
    out = conv(x)
    out.retain_grad()
    w = torch.randn_like(out)
    (out * w).sum().backward()
    rows = output_rows(conv, out.grad)
    assert rows.shape == (2 * 6 * 7, 5)
    torch.testing.assert_close(rows[6 * 7 + 7 * 2 + 3], w[1, :, 2, 3])
    # curvature_matrix of those rows equals the brute-force second moment in a basis
    Q = torch.randn(4, 5, dtype=torch.float64)
    ref = sum(torch.outer(Q @ r, Q @ r) for r in rows) / rows.shape[0]
    torch.testing.assert_close(curvature_matrix(Q, rows), ref)


def test_kfac_without_output_gradients_falls_back_to_input_statistics():
    X, Y, W1, W2 = two_layer(8, 6, 5, 40, 6, 1.0)
    net = _net(8, 6, 5, W1, W2)
    opt = AdaptiveLMO(net, lr=0.01, momentum=0.0, curvature="kfac", stats="same_batch")
    out = net(X)  # recorded forward, but no backward through it
    del out
    net[0].weight.grad = grad_w1(X, Y, W1, W2)
    net[1].weight.grad = torch.zeros_like(W2)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        opt.step()
    assert any("no output gradients" in str(x.message) for x in w)
    geo = opt.geometry()["0.weight"]
    assert "input only" in geo["source"]
    _, s, Vh = torch.linalg.svd(grad_w1(X, Y, W1, W2), full_matrices=False)
    assert geo["exponent"] == pytest.approx(choose_exponent(s, curvature_along(Vh, X)), abs=1e-9)


def test_bad_curvature_option_raises():
    net = nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 2))
    with pytest.raises(ValueError, match="curvature"):
        AdaptiveLMO(net, curvature="hessian")


def test_moe_output_gradients_fed_by_hand_give_the_block_diagonal_kfac_choice():
    # stacked experts (E, h, d): every expert sees every token; z_e = x W_e^T
    g = torch.Generator().manual_seed(8)
    E, h, d, N = 3, 5, 7, 19
    w = nn.Parameter(torch.randn(E, h, d, generator=g, dtype=torch.float64) / d**0.5)
    head = nn.Linear(h, 1).double()

    class MoE(nn.Module):
        def __init__(self):
            super().__init__()
            self.w, self.head = w, head

        def forward(self, x):
            z = torch.einsum("ehd,nd->enh", self.w, x)
            return z, self.head(torch.tanh(z).mean(0))

    moe = MoE()
    opt = AdaptiveLMO(moe, lr=0.05, momentum=0.0, update_every=1, stats="same_batch")
    x = torch.randn(N, d, generator=g, dtype=torch.float64)
    y = torch.randn(N, 1, generator=g, dtype=torch.float64)
    z, out = moe(x)
    z.retain_grad()
    ((out - y) ** 2).mean().backward()
    Gz = z.grad.detach().clone()  # (E, N, h): the loss gradient at each expert's output
    P = w.grad.detach().clone()
    with pytest.raises(ValueError, match="output_gradients"):
        opt.record_activations(w, x.expand(E, N, d), output_gradients=Gz[..., :4])
    opt.record_activations(w, x.expand(E, N, d), output_gradients=Gz)
    opt.step()
    geo = opt.geometry()["w"]
    assert geo["source"] == "criterion (surrogate, kfac)"
    # brute force: sum over experts of (s_e^a)^T [(U_e^T B_e U_e) o (V_e^T S V_e)] s_e^a
    U, s, Vh = torch.linalg.svd(P, full_matrices=False)
    grid = torch.linspace(0, 1, 401, dtype=torch.float64)
    num = torch.zeros_like(grid)
    den, den_in = torch.zeros_like(grid), torch.zeros_like(grid)
    top = s.max()
    for e in range(E):
        A = Vh[e] @ x.T @ x @ Vh[e].T / N
        B = U[e].T @ Gz[e].T @ Gz[e] @ U[e] / N
        Ea = (s[e] / top).unsqueeze(0) ** grid.unsqueeze(1)
        num += (Ea * s[e]).sum(1)
        den += ((Ea @ (A * B)) * Ea).sum(1)
        den_in += ((Ea @ torch.diag(torch.diagonal(A))) * Ea).sum(1)
    best = float(grid[int(torch.argmax(num**2 / den))])
    best_in = float(grid[int(torch.argmax(num**2 / den_in))])
    assert abs(best - best_in) > 0.3  # the output factor matters here
    assert geo["exponent"] == pytest.approx(best, abs=0.01)
