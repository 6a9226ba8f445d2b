"""Deterministic toy problems shared by the algorithm tests and the distributed worker script."""

from __future__ import annotations

import torch

D_IN, D_OUT = 6, 3


def make_model(seed: int = 0, dtype: torch.dtype = torch.float64) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(
        torch.nn.Linear(D_IN, 5), torch.nn.Tanh(), torch.nn.Linear(5, D_OUT)
    ).to(dtype)


def batch(worker: int, rnd: int, step: int, n: int = 8, dtype=torch.float64):
    """Worker ``worker``'s batch at inner step ``step`` of round ``rnd`` (keyed, stateless)."""
    g = torch.Generator().manual_seed(1_000_003 * worker + 1009 * rnd + step)
    x = torch.randn(n, D_IN, generator=g, dtype=dtype)
    w = torch.linspace(-1, 1, D_IN * D_OUT, dtype=dtype).reshape(D_IN, D_OUT)
    y = torch.sin(x @ w) + 0.1 * torch.randn(n, D_OUT, generator=g, dtype=dtype)
    return x, y


def loss_fn(model, worker, rnd, step):
    x, y = batch(worker, rnd, step)
    return ((model(x) - y) ** 2).mean()
