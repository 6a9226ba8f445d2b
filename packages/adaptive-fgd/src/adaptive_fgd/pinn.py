r"""A physics-informed neural network (PINN): the neural baseline for the PDE experiment.

:math:`u_\theta(x, y) = x(1-x)y(1-y)\,N_\theta(x, y)` (zero Dirichlet data built in, so the loss
has no boundary term), :math:`N_\theta` a tanh MLP 2 -> h -> h -> 1, trained with Adam on the
mean squared strong-form residual at fixed collocation points drawn uniformly in the square,

.. math:: \mathcal L(\theta) = \frac1{n_c}\sum_c \big(-\Delta u_\theta(x_c) + \phi'(u_\theta(x_c))
          - s(x_c)\big)^2,

:math:`\phi' = 0` (Poisson) or :math:`u^3` (semilinear). The Laplacian is taken by automatic
differentiation (:func:`laplacian`). Timing is the process CPU time of the training steps only
(evaluating the error on the grid is outside it), as for the FGD methods.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import numpy as np
import torch

__all__ = ["laplacian", "pinn_fit"]


def laplacian(fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    r""":math:`\Delta f` at the rows of ``x`` ``(n, d)`` by two reverse passes (graph kept)."""
    x = x.detach().requires_grad_(True)
    u = fn(x)
    (g,) = torch.autograd.grad(u.sum(), x, create_graph=True)
    lap = torch.zeros_like(u)
    for i in range(x.shape[1]):
        (gi,) = torch.autograd.grad(g[:, i].sum(), x, create_graph=True)
        lap = lap + gi[:, i]
    return lap


class _Pinn(torch.nn.Module):
    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(2, hidden),
            torch.nn.Tanh(),
            torch.nn.Linear(hidden, hidden),
            torch.nn.Tanh(),
            torch.nn.Linear(hidden, 1),
        ).double()

    def forward(self, p: torch.Tensor) -> torch.Tensor:
        x, y = p[:, 0], p[:, 1]
        return x * (1 - x) * y * (1 - y) * self.net(p)[:, 0]


def pinn_fit(
    source: Callable[[np.ndarray], np.ndarray],
    points: np.ndarray,
    exact: np.ndarray,
    *,
    cubic: bool = False,
    budget: float | None = None,
    steps: int | None = None,
    hidden: int = 32,
    n_colloc: int = 1024,
    lr: float = 1e-3,
    every: int = 25,
    seed: int = 0,
) -> list[dict]:
    """Train a PINN for ``budget`` CPU seconds or ``steps`` Adam steps (whichever is given).

    Args:
        source: :math:`s`, ``(n, 2) -> (n,)``.
        points, exact: where the RMS error to the exact solution is measured, and its values.
        cubic: add :math:`u^3` to the operator (semilinear problem).
        budget, steps: stopping rule (exactly one of them).
        hidden, n_colloc, lr: width, collocation points, Adam step.
        every: record every this many steps.
        seed: seed of the collocation points and the initialisation.

    Returns:
        Records ``{"step", "seconds", "loss", "l2_error"}``.
    """
    if (budget is None) == (steps is None):
        raise ValueError("give exactly one of budget (seconds) and steps")
    if budget is not None and not (budget > 0 and math.isfinite(budget)):
        raise ValueError(f"budget must be finite and > 0, got {budget!r}")
    if steps is not None and (isinstance(steps, bool) or not isinstance(steps, int) or steps < 1):
        raise ValueError(f"steps must be a positive int, got {steps!r}")
    gen = np.random.default_rng(seed)
    xc = gen.uniform(0.0, 1.0, size=(n_colloc, 2))
    sc = torch.as_tensor(np.asarray(source(xc), dtype=np.float64))
    xc_t = torch.as_tensor(xc)
    pts = torch.as_tensor(np.asarray(points, dtype=np.float64))
    ex = np.asarray(exact, dtype=np.float64)
    torch.manual_seed(seed)
    model = _Pinn(hidden)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    rows, cpu, it = [], 0.0, 0
    while (budget is None or cpu < budget) and (steps is None or it < steps):
        t0 = time.process_time()
        for _ in range(every):
            opt.zero_grad()
            lap = laplacian(model, xc_t)
            res = -lap - sc
            if cubic:
                u = model(xc_t)
                res = res + u**3
            loss = (res**2).mean()
            loss.backward()
            opt.step()
        cpu += time.process_time() - t0
        it += every
        with torch.no_grad():
            err = float(np.sqrt(np.mean((model(pts).numpy() - ex) ** 2)))
        value = loss.item()
        rows.append({"step": it, "seconds": cpu, "loss": value, "l2_error": err})
        if not math.isfinite(value):
            raise ValueError(f"non-finite PINN loss at step {it}: lower lr")
    return rows
