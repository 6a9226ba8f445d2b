"""The ε-surrogate operator: adjoint pair, nullspace placement, RIP (exact, brute force, probe)."""

import math

import pytest
import torch

from eps_completion.problem import observe
from eps_completion.rip import probe_rip
from eps_completion.sensing import EpsSensing

EPS64 = torch.finfo(torch.float64).eps


def _problem(m, n, p, seed, *, weights="uniform", eps=0.1):
    g = torch.Generator().manual_seed(seed)
    mat = torch.randn(m, n, generator=g, dtype=torch.float64)
    mask = torch.rand(m, n, generator=g) < p
    obs = observe(mat, mask, allow_empty_lines=True)
    return mat, mask, EpsSensing(obs, eps, weights=weights, generator=g), g


def _dense_matrix(op):
    """The (mn) x (mn) matrix of the operator, column by column (tiny sizes only)."""
    m, n = op.shape
    cols = []
    for t in range(m * n):
        e = torch.zeros(m * n, dtype=torch.float64)
        e[t] = 1.0
        cols.append(op.apply(e.reshape(m, n)))
    return torch.stack(cols, 1)


@pytest.mark.parametrize("weights", ["uniform", "random"])
@pytest.mark.parametrize(("m", "n"), [(7, 5), (3, 11), (13, 13)])
def test_adjoint_pair(weights, m, n):
    _, _, op, g = _problem(m, n, 0.4, m * n, weights=weights, eps=0.37)
    x = torch.randn(m, n, generator=g, dtype=torch.float64)
    y = torch.randn(m * n, generator=g, dtype=torch.float64)
    lhs = float(op.apply(x) @ y)
    rhs = float((x * op.adjoint(y)).sum())
    # two sums of mn products of O(1) numbers: rounding ~ mn * eps64 * |x||y|
    tol = 4 * m * n * EPS64 * float(x.norm() * y.norm())
    assert abs(lhs - rhs) <= max(tol, 1e-12)


@pytest.mark.parametrize("weights", ["uniform", "random"])
def test_perturbation_lives_in_the_nullspace_of_the_mask(weights):
    mat, mask, op, g = _problem(9, 6, 0.5, 3, weights=weights, eps=0.2)
    k = op.obs.n_observed
    # observed measurements are the plain ones, whatever eps
    x = torch.randn(9, 6, generator=g, dtype=torch.float64)
    assert torch.equal(op.apply(x)[:k], x[mask])
    # a matrix supported on Omega has no perturbation part; one on Omega^c has no observed part
    on = torch.where(mask, x, torch.zeros_like(x))
    off = x - on
    assert torch.equal(op.apply(on)[k:], torch.zeros(54 - k, dtype=torch.float64))
    assert torch.equal(op.apply(off)[:k], torch.zeros(k, dtype=torch.float64))
    # A_eps - P_Omega is eps * (weights) on Omega^c entries exactly
    w = op.weight_map()
    assert torch.equal(w[mask], torch.ones(k, dtype=torch.float64))
    xi = op.xi[~mask] if op.xi is not None else torch.ones(54 - k, dtype=torch.float64)
    assert torch.allclose(w[~mask], 0.2 * xi, rtol=0, atol=0)
    # data: observed values untouched, zeros elsewhere; the implicit noise is zero on Omega
    b = op.measurements()
    assert torch.equal(b[:k], mat[mask])
    assert torch.equal(b[k:], torch.zeros(54 - k, dtype=torch.float64))
    noise = op.noise(mat)
    assert torch.equal(noise[:k], torch.zeros(k, dtype=torch.float64))
    assert float(noise.norm()) <= 0.2 * float(w.max() / 0.2 if w.max() < 1 else 1.5) * float(
        mat.norm()
    )


def test_eps_to_zero_reduces_to_plain_loss():
    mat, mask, _, g = _problem(8, 7, 0.5, 5)
    obs = observe(mat, mask, allow_empty_lines=True)
    x = torch.randn(8, 7, generator=g, dtype=torch.float64)
    plain = 0.5 * float(((x - mat)[mask]).pow(2).sum())
    for eps in (1e-2, 1e-4, 1e-6):
        sur = float(EpsSensing(obs, eps).loss(x))
        extra = 0.5 * eps**2 * float(x[~mask].pow(2).sum())
        # the difference of two O(plain) sums: rounding ~ mn * eps64 * plain
        assert math.isclose(sur - plain, extra, rel_tol=1e-9, abs_tol=56 * EPS64 * plain)


@pytest.mark.parametrize("weights", ["uniform", "random"])
def test_rip_closed_form_matches_eigenvalues_of_dense_operator(weights):
    _, _, op, _ = _problem(4, 5, 0.5, 11, weights=weights, eps=0.3)
    gram = _dense_matrix(op).T @ _dense_matrix(op)
    ev = torch.linalg.eigvalsh(gram)
    lo, hi = float(ev[0]), float(ev[-1])
    assert op.rip_constant() == pytest.approx((hi - lo) / (hi + lo), abs=1e-12)
    if weights == "uniform":
        assert op.rip_constant() == pytest.approx((1 - 0.09) / (1 + 0.09), abs=1e-15)


def test_rank_one_rip_by_exhaustive_search_and_probe():
    """delta_1 on a 2x3 problem: brute force over a grid of unit rank-one x y^T."""
    mask = torch.tensor([[True, False, True], [False, True, False]])
    obs = observe(torch.zeros(2, 3, dtype=torch.float64), mask)
    op = EpsSensing(obs, 0.25, weights="random", generator=torch.Generator().manual_seed(2))
    w2 = op.weight_map().pow(2)
    a = torch.linspace(0, math.pi, 721, dtype=torch.float64)
    x = torch.stack([a.cos(), a.sin()], 1)  # unit vectors of R^2 (up to sign)
    th = torch.linspace(0, math.pi, 181, dtype=torch.float64)
    ph = torch.linspace(0, 2 * math.pi, 361, dtype=torch.float64)
    t, p = torch.meshgrid(th, ph, indexing="ij")
    y = torch.stack([t.sin() * p.cos(), t.sin() * p.sin(), t.cos()], -1).reshape(-1, 3)
    # rho(x y^T) = sum_ij w_ij^2 x_i^2 y_j^2
    rho = (x.pow(2) @ w2) @ y.pow(2).T
    lo, hi = float(rho.min()), float(rho.max())
    brute = (hi - lo) / (hi + lo)
    exact = op.rip_constant()
    assert brute <= exact + 1e-12  # grid points are rank-one matrices: a lower bound
    assert brute >= exact - 1e-9  # the grid contains the spikes e_i e_j^T (angles 0, pi/2)
    est = probe_rip(
        op, 1, n_probes=16, n_refine=30, n_starts=16, generator=torch.Generator().manual_seed(0)
    )
    assert est.delta <= exact + 1e-12
    assert est.delta >= exact - 1e-6
    assert est.delta_random <= est.delta


@pytest.mark.parametrize("rank", [1, 3])
def test_probe_is_a_lower_bound_that_refinement_tightens(rank):
    _, _, op, g = _problem(12, 9, 0.3, 7, eps=0.1)
    est = probe_rip(op, rank, n_probes=32, n_refine=60, generator=g)
    exact = op.rip_constant()
    assert est.delta <= exact + 1e-12
    assert est.delta_random < exact - 0.1  # random directions miss the spiky extremes
    assert est.delta >= exact - 1e-3
    assert est.scale == pytest.approx(2 / (est.ratio_min + est.ratio_max))
