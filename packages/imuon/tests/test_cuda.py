"""IMuon on a CUDA device against a float64 CPU reference (run by the GPU pass).

A multi-step trajectory is the wrong thing to compare: the Stiefel LMO is a polar factor, which
is discontinuous where a singular value of its argument crosses zero, so two devices' rounding
can send trajectories apart while both are right. One step from the same state is compared
instead, with a tolerance from the polar factor's perturbation bound.
"""

from __future__ import annotations

import pytest
import torch

from imuon import IMuon
from shared_core.manifolds import Stiefel

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]


def _one_step(X0, C, B, device: str, dtype, lr: float) -> torch.Tensor:
    X = torch.nn.Parameter(X0.to(device, dtype, copy=True))
    opt = IMuon([{"params": [X], "manifold": "stiefel", "polar": "svd"}], lr=lr)
    Cd, Bd = C.to(device, dtype), B.to(device, dtype)
    (torch.trace(X.T @ Cd @ X) + (Bd * X).sum()).backward()
    opt.step()
    return X.detach().to("cpu", torch.float64)


def _cond(A: torch.Tensor) -> float:
    """s_max / s_min over the nonzero singular values (a skew matrix of odd size has a
    structural zero, which the polar factor's rank cut removes on both devices)."""
    s = torch.linalg.svdvals(A)
    s = s[s > 1e-10 * s[0]]
    return float(s[0] / s[-1])


@pytest.mark.parametrize("seed", range(4))
def test_a_cuda_float32_step_matches_a_float64_cpu_step(seed):
    # The step is X - lr (X msign(X^T G) + msign((I - X X^T) G)), then a retraction. A relative
    # perturbation d of a full-rank matrix moves its polar factor by at most about 2 d cond in
    # Frobenius norm; float32 rounding of the gradient and of the SVD gives d ~ eps32 sqrt(n p).
    n, p, lr = 17, 5, 0.05
    gen = torch.Generator().manual_seed(seed)
    X0 = Stiefel(n, p).random_point(generator=gen, dtype=torch.float64)
    c = torch.randn(n, n, generator=gen, dtype=torch.float64)
    C = c + c.T
    # the linear term gives X^T G a skew part: with trace(X^T C X) alone it is exactly zero,
    # and the polar factor of a rounding-level block is arbitrary (a tie of the LMO)
    B = torch.randn(n, p, generator=gen, dtype=torch.float64)
    G = 2 * C @ X0 + B
    cond = _cond(X0.T @ G - G.T @ X0) + _cond(G - X0 @ (X0.T @ G))
    eps32 = torch.finfo(torch.float32).eps
    bound = 4 * eps32 * (n * p) ** 0.5 * (1 + lr * cond)
    ref = _one_step(X0, C, B, "cpu", torch.float64, lr)
    got = _one_step(X0, C, B, "cuda", torch.float32, lr)
    err = float(torch.linalg.matrix_norm(got - ref))
    assert err <= bound, (err, bound, cond)
    assert float(torch.linalg.matrix_norm(ref - X0)) > 100 * bound  # the step is not tiny
