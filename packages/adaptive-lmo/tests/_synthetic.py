"""A linear layer with squared loss whose one-step decrease is computed exactly from data."""

from __future__ import annotations

import torch
from torch import Tensor


def problem(m: int, n: int, N: int, alpha: float, seed: int, noise: float = 0.5):
    """Features with a power-law covariance in a random basis, a random teacher, a start W."""
    g = torch.Generator().manual_seed(seed)
    Q, _ = torch.linalg.qr(torch.randn(n, n, generator=g, dtype=torch.float64))
    lam = torch.arange(1, n + 1, dtype=torch.float64) ** -alpha
    X = torch.randn(N, n, generator=g, dtype=torch.float64) * lam.sqrt() @ Q.T
    Wstar = torch.randn(m, n, generator=g, dtype=torch.float64)
    W = 0.1 * torch.randn(m, n, generator=g, dtype=torch.float64)
    Y = X @ Wstar.T + noise * torch.randn(N, m, generator=g, dtype=torch.float64)
    return X, Y, W


def loss(X: Tensor, Y: Tensor, W: Tensor) -> float:
    return float(0.5 * ((X @ W.T - Y) ** 2).sum() / X.shape[0])


def grad(X: Tensor, Y: Tensor, W: Tensor) -> Tensor:
    return (X @ W.T - Y).T @ X / X.shape[0]


def best_step_decrease(X: Tensor, Y: Tensor, W: Tensor, D: Tensor) -> float:
    """max over eta of L(W) - L(W - eta D), from three loss evaluations (L is quadratic in eta)."""
    l0, l1, l2 = loss(X, Y, W), loss(X, Y, W - D), loss(X, Y, W - 2 * D)
    c = (l2 - 2 * l1 + l0) / 2
    b = l1 - l0 - c
    return b * b / (4 * c)
