"""RGD, RGN and the baselines recover planted rank-one tensors; determinism; the noise floor
against a Monte-Carlo of the oracle estimator it describes."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from segre import (
    FullObservation,
    RecoveryProblem,
    gaussian_sensing,
    noise_floor,
    random_rank_one,
    rank_one_sensing,
    relative_error,
    rgd,
    rgn,
    solve,
    spectral_init,
    tensorly_cp,
)
from segre.algorithms import gn_direction

F64 = torch.float64


def instance(kind, dims, m, seed, sigma=0.0):
    g = torch.Generator().manual_seed(seed)
    x = random_rank_one(dims, generator=g)
    op = (gaussian_sensing if kind == "dense" else rank_one_sensing)(dims, m, generator=g)
    y = op.forward(x.scale, x.factors) + sigma * torch.randn(m, generator=g, dtype=F64)
    return RecoveryProblem(op, y), x


@pytest.mark.parametrize("kind", ["dense", "rank-one"])
def test_rgn_recovers_the_planted_tensor_up_to_the_gauge(kind):
    dims = (6, 5, 4)
    prob, x = instance(kind, dims, 150, seed=1)
    tr = rgn(prob, spectral_init(prob), max_iter=15, x_true=x)
    assert tr.errors[-1] < 1e-12
    # Up to the gauge: each factor equals the planted one up to a sign, signs multiply to +1.
    signs = [float((u * v).sum()) for u, v in zip(tr.x.factors, x.factors, strict=True)]
    assert all(abs(abs(s) - 1) < 1e-12 for s in signs)
    assert math.prod(signs) > 0
    assert abs(float(tr.x.scale - x.scale)) < 1e-12


def test_rgn_is_quadratic_and_rgd_linear_on_a_small_instance():
    prob, x = instance("dense", (8, 8, 8), 200, seed=3)
    x0 = spectral_init(prob)
    e = rgn(prob, x0, max_iter=10, x_true=x).errors
    pairs = [(a, b) for a, b in itertools.pairwise(e) if a < 0.3 and b > 1e-12]
    assert len(pairs) >= 2
    for a, b in pairs:
        assert b <= 10 * a**2  # e_{k+1} = O(e_k^2) with a modest constant
    e = rgd(prob, x0, max_iter=300, x_true=x, stop_error=1e-10).errors
    assert e[-1] < 1e-10
    ratios = [b / a for a, b in itertools.pairwise(e) if 1e-9 < a < 1e-3]
    assert max(ratios) < 1 and max(ratios) / min(ratios) < 3


def test_rgd_with_armijo_and_a_constant_step():
    prob, x = instance("dense", (5, 4, 3), 80, seed=4)
    x0 = spectral_init(prob)
    assert rgd(prob, x0, max_iter=400, armijo=True, step=1.0 / 40, x_true=x).errors[-1] < 1e-8
    with pytest.raises(ValueError, match="step"):
        rgd(prob, x0, step=-1.0)


@pytest.mark.parametrize("method", ["als", "factor-gd"])
def test_baselines_recover_noiseless(method):
    prob, x = instance("dense", (5, 4, 3), 80, seed=5)
    tr = solve(prob, method, max_iter=2000, x_true=x, stop_error=1e-10)
    assert tr.errors[-1] < 1e-10


def test_solve_runs_every_method_from_one_start_and_is_deterministic():
    prob, x = instance("rank-one", (4, 5, 3), 60, seed=6)
    x0 = spectral_init(prob)
    for method in ("rgd", "rgn", "als", "factor-gd"):
        a = solve(prob, method, x0, max_iter=5, x_true=x)
        b = solve(prob, method, x0, max_iter=5, x_true=x)
        assert a.errors == b.errors and a.losses == b.losses
        assert a.errors[0] == b.errors[0] == relative_error(x0, x)
    # A second instance from the same seed is bitwise the same.
    prob2, x2 = instance("rank-one", (4, 5, 3), 60, seed=6)
    assert torch.equal(prob.y, prob2.y) and torch.equal(x.factors[0], x2.factors[0])
    with pytest.raises(ValueError, match="unknown method"):
        solve(prob, "newton")


def test_tensor_pca_rgn_against_tensorly():
    g = torch.Generator().manual_seed(8)
    dims = (7, 6, 5)
    x = random_rank_one(dims, scale=10.0, generator=g)
    op = FullObservation(dims)
    y = op.forward(x.scale, x.factors) + 0.05 * torch.randn(
        op.num_measurements, generator=g, dtype=F64
    )
    prob = RecoveryProblem(op, y)
    ours = rgn(prob, spectral_init(prob), max_iter=30, x_true=x)
    ref = tensorly_cp(prob, max_iter=200, x_true=x)
    # Both find the best rank-one approximation of Y (the MLE): the same tensor.
    assert abs(ours.losses[-1] - ref.losses[-1]) <= 1e-8 * ref.losses[-1]
    assert abs(ours.errors[-1] - ref.errors[-1]) <= 1e-6
    with pytest.raises(ValueError, match="FullObservation"):
        tensorly_cp(instance("dense", (3, 3), 20, seed=0)[0])


def test_noise_floor_matches_a_monte_carlo_of_the_oracle():
    # The floor is the RMS error of least squares on the true tangent space; check the closed
    # form against 400 noise draws of that estimator (sampling error ~ 1/sqrt(2*400) ~ 3.5%).
    dims = (5, 4, 3)
    sigma = 1e-3
    prob, x = instance("dense", dims, 40, seed=9)
    floor = noise_floor(prob, x, sigma)
    g = torch.Generator().manual_seed(10)
    sq = []
    for _ in range(400):
        eps = sigma * torch.randn(40, generator=g, dtype=F64)
        xi = gn_direction(prob, x, -eps, solver="exact")  # min ||A(xi) - eps||
        sq.append(float(xi.scale.square().sum() + sum(w.square().sum() for w in xi.vecs)))
    mc = math.sqrt(sum(sq) / len(sq)) / float(x.scale)
    assert abs(mc / floor - 1) < 0.15
    # And RGN on noisy data lands near it (the oracle is the local MLE to first order).
    prob_noisy, x2 = instance("dense", dims, 40, seed=9, sigma=sigma)
    err = rgn(prob_noisy, spectral_init(prob_noisy), max_iter=20, x_true=x2).errors[-1]
    assert floor / 5 < err < 5 * floor
