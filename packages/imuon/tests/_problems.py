"""Small shared problem builders for the tests."""

from __future__ import annotations

import torch

from shared_core.manifolds import Factors


def conditioned(r: int, cond: float, gen: torch.Generator, dtype=torch.float64) -> torch.Tensor:
    """A random r x r matrix with condition number ``cond`` (log-spaced singular values)."""
    u = torch.linalg.qr(torch.randn(r, r, generator=gen, dtype=dtype))[0]
    v = torch.linalg.qr(torch.randn(r, r, generator=gen, dtype=dtype))[0]
    s = torch.logspace(0, torch.log10(torch.tensor(float(cond))).item(), r, dtype=dtype)
    return u @ torch.diag(s) @ v.mT


def gauge(x: Factors, M: torch.Tensor) -> Factors:
    return Factors(x.A @ M, torch.linalg.solve(M, x.B.mT).mT)


def run_fixed_rank(opt_factory, x0: Factors, loss_fn, steps: int):
    """Run ``steps`` optimizer steps on the factor pair; return the product after each step."""
    a = torch.nn.Parameter(x0.A.clone())
    b = torch.nn.Parameter(x0.B.clone())
    opt = opt_factory([a, b])
    prods = []
    for _ in range(steps):
        opt.zero_grad()
        loss_fn(a @ b.mT).backward()
        opt.step()
        prods.append((a @ b.mT).detach().clone())
    return prods
