"""The sparse-plus-low-rank SVD route against dense float64 linear algebra."""

import pytest
import torch

from eps_completion import low_rank_matrix, observe, random_mask
from eps_completion.baselines import soft_impute
from eps_completion.lowrank_svd import SparsePlusLowRank, top_svd


def _operator(m, n, j, n_sparse, sparse_scale, seed):
    g = torch.Generator().manual_seed(seed)
    idx = torch.randperm(m * n, generator=g)[:n_sparse]
    rows, cols = idx // n, idx % n
    vals = sparse_scale * torch.randn(n_sparse, generator=g, dtype=torch.float64)
    u = torch.linalg.qr(torch.randn(m, j, generator=g, dtype=torch.float64)).Q
    v = torch.linalg.qr(torch.randn(n, j, generator=g, dtype=torch.float64)).Q
    s = torch.linspace(10.0, 2.0, j, dtype=torch.float64)
    z = SparsePlusLowRank((m, n), rows, cols, vals, u, s, v)
    dense = (u * s) @ v.T
    dense[rows, cols] += vals
    return z, dense, g


def test_products_match_the_dense_matrix():
    z, dense, g = _operator(31, 23, 3, 70, 1.0, 0)
    q = torch.randn(23, 4, generator=g, dtype=torch.float64)
    p = torch.randn(31, 5, generator=g, dtype=torch.float64)
    # sums of ~|Omega|/m + j terms of O(1): roundoff ~1e-15 relative
    torch.testing.assert_close(z.matmul(q), dense @ q, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(z.rmatmul(p), dense.T @ p, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize(("m", "n", "j", "q"), [(53, 37, 4, 4), (40, 61, 3, 5)])
def test_top_singular_values_match_the_dense_svd(m, n, j, q):
    """Rank j (sigma 10..2) plus a small sparse part (sigma <~ 0.2): for i <= j the error
    ratio (sigma_{q+11}/sigma_i)^9 is below roundoff; past j (q > j) the values sit in the
    sparse tail, where Rayleigh-Ritz values can only underestimate (interlacing) and the
    ratio is ~0.5^9: 1e-3 relative."""
    z, dense, g = _operator(m, n, j, 60, 0.05, 1)
    u, s, v = top_svd(z, q, generator=g)
    ref = torch.linalg.svdvals(dense)[:q]
    torch.testing.assert_close(s[:j], ref[:j], rtol=1e-10, atol=0)
    assert torch.all(s[j:] <= ref[j:] * (1 + 1e-12)) and torch.all(s[j:] >= ref[j:] * (1 - 1e-3))
    torch.testing.assert_close((u.T @ dense @ v)[:j, :j], torch.diag(s[:j]), rtol=0, atol=1e-9)


def test_soft_impute_sparse_route_matches_the_dense_route():
    g = torch.Generator().manual_seed(2)
    mat = low_rank_matrix(29, 23, 2, g)  # sigma_1 ~ 20
    obs = observe(mat, random_mask((29, 23), 0.6, g))
    # a lambda ~ 1% of sigma_1: the path contracts fast, so both routes reach tol
    kw = {"lam": 0.3, "max_rank": 4, "n_lambdas": 3, "max_iter": 300, "tol": 1e-11}
    dense = soft_impute(obs, svd="dense", **kw).matrix()
    sparse = soft_impute(obs, svd="sparse", **kw).matrix()
    # same regularised fixed point; stopping when a step moves < tol leaves each route
    # within tol * rho / (1 - rho) of it, rho the contraction (near 1: measured gap 9e-8)
    assert float((sparse - dense).norm() / dense.norm()) < 1e-6


def test_soft_impute_svd_choice_is_checked():
    g = torch.Generator().manual_seed(3)
    mat = low_rank_matrix(8, 7, 1, g)
    obs = observe(mat, random_mask((8, 7), 0.8, g))
    with pytest.raises(ValueError, match="max_rank"):
        soft_impute(obs, svd="sparse")
    with pytest.raises(ValueError, match="svd"):
        soft_impute(obs, svd="qr")
