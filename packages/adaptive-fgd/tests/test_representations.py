"""Feature families and the ridge fit against independent references."""

import math

import numpy as np
import pytest
import torch
from scipy.spatial.distance import cdist
from sklearn.metrics.pairwise import rbf_kernel

from adaptive_fgd.representations import (
    KernelCentres,
    NestedRidge,
    RandomFourierFeatures,
    fit_coefficients,
    gaussian_kernel,
)


def test_gaussian_kernel_matches_sklearn():
    gen = torch.Generator().manual_seed(0)
    x, z = torch.randn(17, 3, generator=gen), torch.randn(11, 3, generator=gen)
    ref = rbf_kernel(x.numpy(), z.numpy(), gamma=1 / (2 * 0.7**2))
    np.testing.assert_allclose(gaussian_kernel(x, z, 0.7).numpy(), ref, rtol=1e-12, atol=1e-14)


def test_fit_coefficients_is_least_squares():
    gen = torch.Generator().manual_seed(1)
    phi, g = torch.randn(203, 13, generator=gen), torch.randn(203, 2, generator=gen)
    ref, *_ = np.linalg.lstsq(phi.numpy(), g.numpy(), rcond=None)
    # cond(phi) ~ 1.6 here, so ridge 1e-14 and rounding move beta by ~1e-13
    np.testing.assert_allclose(
        fit_coefficients(phi, g, ridge=0.0).numpy(), ref, rtol=1e-9, atol=1e-11
    )


def test_fit_coefficients_rejects_empty_and_mismatched():
    with pytest.raises(ValueError, match="empty"):
        fit_coefficients(torch.zeros(0, 3), torch.zeros(0, 1))
    with pytest.raises(ValueError, match="need phi"):
        fit_coefficients(torch.zeros(4, 3), torch.zeros(5, 1))
    with pytest.raises(ValueError, match="ridge"):
        fit_coefficients(torch.ones(4, 3), torch.ones(4, 1), ridge=-1.0)


def test_random_fourier_features_average_to_the_kernel():
    m = 40_000
    fam = RandomFourierFeatures(dim=2, bandwidth=0.5, cap=m, seed=3)
    fam.grow(m, torch.zeros(1, 2), torch.zeros(1, 1), torch.Generator())
    x = torch.rand(6, 2, generator=torch.Generator().manual_seed(2))
    phi = fam.features(x)
    approx = phi @ phi.T / m
    # each entry is a mean of m terms bounded by 2: std <= 2/sqrt(m) = 0.01; allow 5 sigma
    assert float((approx - gaussian_kernel(x, x, 0.5)).abs().max()) <= 5 * 2 / m**0.5


def _nesting_rounding_bound(fam, family, x, m):
    """Worst-case |difference| of two float32 evaluations of the first ``m`` features at ``x``.

    Each evaluation sums d + 2 rounded terms of total magnitude ``s`` before a 1-Lipschitz (cos)
    or ``k/(2l^2)``-Lipschitz (Gaussian) map, so two evaluations differ by at most
    ``(d + 2) eps s`` times the map's slope, plus one output rounding ``eps |f|``.
    """
    eps = torch.finfo(x.dtype).eps
    d = x.shape[1]
    f = fam.features(x, m).double()
    xd = x.double()
    if family == "rff":
        w = fam.omega[:m].double()
        s = xd.abs() @ w.abs().T + fam.phase[:m].double().abs()
        slope = math.sqrt(2.0)
    else:
        z = fam.centres[:m].double()
        s = (xd * xd).sum(1)[:, None] + (z * z).sum(1)[None, :] + 2.0 * xd.abs() @ z.abs().T
        slope = f / (2.0 * fam.bandwidth**2)
    return (d + 2) * eps * slope * s + eps * f.abs()


@pytest.mark.parametrize("family", ["rff", "kernel"])
def test_families_are_nested_prefixes(family):
    gen = torch.Generator().manual_seed(4)
    x_fit = torch.rand(300, 2, generator=gen)
    fam = (
        RandomFourierFeatures(2, 0.3, cap=64, seed=1)
        if family == "rff"
        else KernelCentres(2, 0.3, cap=64)
    )
    fam.grow(10, x_fit, torch.randn(300, 1, generator=gen), gen)
    before = fam.features(x_fit)
    fam.grow(40, x_fit, torch.randn(300, 1, generator=gen), gen)
    after = fam.features(x_fit)
    assert fam.size == 40
    # Growing must not move the first features. Their values are recomputed through a matmul
    # whose blocking depends on the column count (MKL's AVX2 path differs in the last bits), so
    # "unchanged" means: within the rounding bound of the two evaluations of the same formula.
    bound = _nesting_rounding_bound(fam, family, x_fit, 40)
    assert bool(((after[:, :10] - before).abs() <= bound[:, :10]).all())
    sliced = fam.features(x_fit, 40, start=10)
    assert bool(((sliced - after[:, 10:]).abs() <= bound[:, 10:]).all())
    fam.grow(1000, x_fit, torch.randn(300, 1, generator=gen), gen)
    assert fam.size == 64  # the cap
    with pytest.raises(ValueError, match="holds"):
        fam.features(x_fit, 65)


def test_kernel_centres_are_distinct_sample_points_placed_by_residual():
    gen = torch.Generator().manual_seed(5)
    x_fit = torch.rand(500, 1, generator=gen)
    resid = torch.where(x_fit > 0.9, 1.0, 0.0)  # all residual mass on x > 0.9
    fam = KernelCentres(1, 0.1, cap=30)
    fam.grow(20, x_fit, resid, gen)
    c = fam.centres.numpy()
    assert (c > 0.9).all()
    assert len(np.unique(c)) == 20
    assert cdist(c, x_fit.numpy()).min(1).max() == 0  # every centre is a sample point
    # when the residual support runs out, the rest come from unused points: still distinct
    fam.grow(30, x_fit, resid, gen)
    assert len(np.unique(fam.centres.numpy())) == 30
    # in 2-D with more than 25 points (where cdist switches to its matmul form) and a residual
    # that stays on the chosen points, no point is picked twice and the list stops at n
    x2 = torch.rand(40, 2, generator=gen)
    fam2 = KernelCentres(2, 0.1, cap=100)
    for m in (10, 20, 40, 80):
        fam2.grow(m, x2, torch.ones(40, 1), gen)
    assert fam2.size == 40
    assert len(np.unique(fam2.centres.numpy(), axis=0)) == 40


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"dim": 0, "bandwidth": 1.0, "cap": 4}, "dim"),
        ({"dim": 1, "bandwidth": 0.0, "cap": 4}, "bandwidth"),
        ({"dim": 1, "bandwidth": 1.0, "cap": 0}, "cap"),
    ],
)
def test_family_bad_arguments(kwargs, match):
    for cls in (KernelCentres, RandomFourierFeatures):
        with pytest.raises(ValueError, match=match):
            cls(**kwargs)


def test_nested_ridge_equals_direct_solve_at_every_prefix():
    # route 1: one factor extended block by block (sizes 5, +1, +17, +9); route 2: a fresh dense
    # solve of (Phi_m^T Phi_m / n + rho I) beta = Phi_m^T g / n at each prefix m.
    gen = torch.Generator().manual_seed(6)
    n = 157
    phi = torch.randn(n, 32, generator=gen) @ torch.randn(32, 32, generator=gen)  # cond ~ 1e2
    g = torch.randn(n, 3, generator=gen)
    nr = NestedRidge(1e-6)
    for a, b in [(0, 5), (5, 6), (6, 23), (23, 32)]:
        nr.extend(phi[:, a:b])
    for m in (1, 5, 6, 17, 23, 32):
        a = phi[:, :m].T @ phi[:, :m] / n + nr.jitter * torch.eye(m)
        ref = torch.linalg.solve(a, phi[:, :m].T @ g / n)
        # both solve one system with cond(a) <= 1e4: agreement to ~1e-16 * 1e4 * size
        torch.testing.assert_close(
            nr.solve(m, g), ref, rtol=1e-9, atol=1e-9 * float(ref.abs().max())
        )


def test_nested_ridge_survives_duplicate_columns_and_rejects_bad_input():
    gen = torch.Generator().manual_seed(7)
    col = torch.randn(50, 1, generator=gen)
    nr = NestedRidge(0.0)
    nr.extend(col)
    nr.extend(col.clone())  # an exactly singular Gram: the jitter (>= 1e-14 scale) keeps it PD
    beta = nr.solve(2, col)
    torch.testing.assert_close(beta.sum(), torch.tensor(1.0), rtol=1e-6, atol=0)
    with pytest.raises(ValueError, match="size"):
        nr.solve(3, col)
    with pytest.raises(ValueError, match="rows"):
        nr.extend(torch.randn(49, 1))
    with pytest.raises(ValueError, match="ridge"):
        NestedRidge(-1.0)
