"""A block that is round-off next to the others gets no step (one rank rule for the whole
block-diagonal matrix), so a float32 Stiefel step matches the float64 one."""

from __future__ import annotations

import pytest
import torch

from imuon.lmo import stiefel_lmo
from imuon.norms import block_lmo
from shared_core.manifolds import Stiefel

pytestmark = pytest.mark.numerics


@pytest.mark.parametrize("seed", range(3))
def test_float32_stiefel_lmo_of_a_quadratic_matches_float64(seed):
    # For F = trace(X^T C X) the skew block X^T G - G^T X is exactly 0: the float64 LMO has no
    # rotation part, and float32 must not invent one from rounding (it did: error 0.14).
    n, p = 17, 5
    gen = torch.Generator().manual_seed(seed)
    St = Stiefel(n, p)
    X = St.random_point(generator=gen, dtype=torch.float64)
    c = torch.randn(n, n, generator=gen, dtype=torch.float64)
    G = 2 * (c + c.T) @ X
    ref = stiefel_lmo(X, St.egrad2rgrad(X, G), polar="svd")
    X32 = X.float()
    got = stiefel_lmo(X32, St.egrad2rgrad(X32, G.float()), polar="svd").double()
    # normal block only: polar perturbation <= 2 d cond with d ~ eps32 sqrt(n p)
    s = torch.linalg.svdvals(G - X @ (X.T @ G))
    cond = float(s[0] / s[-1])
    bound = 4 * torch.finfo(torch.float32).eps * (n * p) ** 0.5 * (1 + cond)
    err = float(torch.linalg.matrix_norm(got - ref))
    assert err <= bound, (err, bound, cond)
    assert float(torch.linalg.matrix_norm(X.T @ ref)) < 1e-12  # no rotation part in float64


def test_a_round_off_block_is_cut_and_a_small_real_block_is_kept():
    gen = torch.Generator().manual_seed(4)
    big = torch.randn(6, 4, generator=gen)
    noise = 1e-9 * torch.randn(3, 3, generator=gen)  # below 9 * eps32 of the big block
    small = 1e-4 * torch.randn(3, 3, generator=gen)  # tiny, but far above round-off
    d_big, d_noise = block_lmo([big, noise], "spectral", polar="svd")
    assert torch.count_nonzero(d_noise) == 0 and torch.linalg.matrix_norm(d_big, 2) > 0.99
    _, d_small = block_lmo([big, small], "spectral", polar="svd")
    assert torch.linalg.matrix_norm(d_small, 2) > 0.99
