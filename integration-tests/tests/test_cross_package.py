"""Packages used together: each one's output is another's input."""

import torch

from diloco_ef import EFSGD
from diloco_ef.compressors import RandomK, TopK
from heavytail_sgd.noise import SymmetricAlphaStable
from heavytail_sgd.oracle import HeavyTailedOracle
from heavytail_sgd.schedules import convex_smd_horizon


def _least_squares(d=23, seed=0):
    g = torch.Generator().manual_seed(seed)
    A = torch.randn(61, d, generator=g, dtype=torch.float64) / 61**0.5
    x_star = torch.randn(d, generator=g, dtype=torch.float64)
    b = A @ x_star

    def f(x):
        return 0.5 * ((A @ x - b) ** 2).sum()

    L = float(torch.linalg.eigvalsh(A.T @ A).max())  # the smoothness constant of f
    return f, x_star, L


def _run_ef_sgd(compressor, steps, seed):
    f, x_star, L = _least_squares()
    oracle = HeavyTailedOracle(f, SymmetricAlphaStable(1.6), scale=0.05, seed=seed)
    schedule = convex_smd_horizon(T=steps, p=1.5, sigma=0.05 * 23**0.5, D=float(x_star.norm()), L=L)
    x = torch.nn.Parameter(torch.zeros(23, dtype=torch.float64))
    opt = EFSGD([x], lr=schedule(1), compressor=compressor, seed=seed)
    for _ in range(steps):
        _, x.grad = oracle(x.detach())
        opt.step()
    return float(f(x.detach())), float(f(torch.zeros(23, dtype=torch.float64)))


def test_heavy_tailed_oracle_drives_error_feedback_sgd():
    # heavytail-sgd's oracle and step size feeding diloco-ef's EF-SGD: with Top-k and Random-k
    # at a quarter of the coordinates, heavy-tailed (infinite-variance) noise and no clipping,
    # the loss must still fall a hundredfold from its start, on several seeds.
    for compressor in (TopK(k=6), RandomK(k=6, scaled=False)):
        finals = []
        for seed in range(3):
            final, start = _run_ef_sgd(compressor, steps=1500, seed=seed)
            finals.append(final)
        assert max(finals) < 0.01 * start, (type(compressor).__name__, finals, start)
        assert all(torch.isfinite(torch.tensor(finals)))
