"""Objectives to maximise, each with its box, its maximum and (for grid tasks) its candidates.

* :func:`gp_prior_objective`: one draw of :math:`f \\sim GP(0, k)` on a regular grid of
  :math:`[0,1]^d` (fixed seed, exact Cholesky of the float64 Gram matrix with a :math:`10^{-10}`
  jitter): the regret theory's assumptions hold exactly, with the grid as the finite domain
  and the known kernel.
* :func:`branin`, :func:`hartmann6`, :func:`ackley`: BoTorch's test functions, negated so
  that larger is better, with their known maxima.
* :func:`tabular_svc`: an offline "real" task, the 3-fold cross-validated accuracy of an
  RBF support-vector classifier on scikit-learn's breast-cancer data over a 20 x 20 grid of
  :math:`(\\log_{10} C, \\log_{10}\\gamma)`, precomputed and shipped (``data/``; how it was
  made: ``scripts/make_tabular.py`` in the repository).
"""

from __future__ import annotations

import csv
import math
from collections.abc import Callable
from dataclasses import dataclass
from importlib.resources import files

import torch
from botorch.test_functions import Ackley, Branin, Hartmann

from .models import KernelSpec

__all__ = [
    "Objective",
    "ackley",
    "branin",
    "gp_prior_objective",
    "hartmann6",
    "tabular_svc",
]


@dataclass
class Objective:
    """A noise-free objective to maximise.

    Attributes:
        name: label.
        fn: ``X (n, d) -> f(X) (n,)``, float64.
        bounds: ``(2, d)`` box.
        optimum: :math:`\\max f` over the domain (the candidates when given).
        candidates: the finite domain ``(n, d)``, or ``None`` for the whole box.
        kernel: the true prior when ``f`` is a GP draw (the theory's setting), else ``None``.
    """

    name: str
    fn: Callable[[torch.Tensor], torch.Tensor]
    bounds: torch.Tensor
    optimum: float
    candidates: torch.Tensor | None = None
    kernel: KernelSpec | None = None

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return self.fn(x)


def _grid(dim: int, size: int) -> torch.Tensor:
    axes = [torch.linspace(0.0, 1.0, size, dtype=torch.float64)] * dim
    return torch.cartesian_prod(*axes).reshape(-1, dim)


def _lookup(grid: torch.Tensor, values: torch.Tensor) -> Callable[[torch.Tensor], torch.Tensor]:
    def fn(x: torch.Tensor) -> torch.Tensor:
        x = torch.as_tensor(x, dtype=torch.float64)
        if x.ndim != 2 or x.shape[1] != grid.shape[1]:
            raise ValueError(f"expected points of shape (n, {grid.shape[1]}), got {tuple(x.shape)}")
        d, idx = torch.cdist(x, grid, compute_mode="donot_use_mm_for_euclid_dist").min(-1)
        if float(d.max()) > 1e-9:
            raise ValueError("a query is not a grid point of this tabular/grid objective")
        return values[idx]

    return fn


def gp_prior_objective(
    seed: int, *, dim: int = 2, grid_size: int = 16, kernel: KernelSpec | None = None
) -> Objective:
    """A GP-prior draw on the ``grid_size**dim`` grid of ``[0,1]^dim`` (fixed by ``seed``).

    Example:
        >>> f = gp_prior_objective(0, dim=1, grid_size=20)
        >>> f.candidates.shape, bool(f(f.candidates).max() == f.optimum)
        (torch.Size([20, 1]), True)
    """
    kernel = kernel or KernelSpec("se", lengthscale=0.15)
    if isinstance(grid_size, bool) or not isinstance(grid_size, int) or grid_size < 2:
        raise ValueError(f"grid_size must be an int >= 2, got {grid_size!r}")
    grid = _grid(dim, grid_size)
    k = kernel.matrix(grid)
    chol = torch.linalg.cholesky(k + 1e-10 * torch.eye(len(grid), dtype=torch.float64))
    g = torch.Generator().manual_seed(int(seed))
    values = chol @ torch.randn(len(grid), generator=g, dtype=torch.float64)
    bounds = torch.tensor([[0.0] * dim, [1.0] * dim], dtype=torch.float64)
    return Objective(
        f"gp-prior-{kernel.name}-d{dim}-seed{seed}",
        _lookup(grid, values),
        bounds,
        float(values.max()),
        candidates=grid,
        kernel=kernel,
    )


def _botorch(fn_module, name: str, optimum: float) -> Objective:
    def fn(x: torch.Tensor) -> torch.Tensor:
        return fn_module(torch.as_tensor(x, dtype=torch.float64))

    return Objective(name, fn, fn_module.bounds.to(torch.float64), optimum)


def branin() -> Objective:
    """Negated Branin on ``[-5, 10] x [0, 15]``; maximum ``-0.397887``."""
    return _botorch(Branin(negate=True).to(torch.float64), "branin", -0.397887357729739)


def hartmann6() -> Objective:
    """Negated Hartmann-6 on ``[0, 1]^6``; maximum ``3.32237``."""
    return _botorch(Hartmann(dim=6, negate=True).to(torch.float64), "hartmann6", 3.32236801141551)


def ackley(dim: int = 2) -> Objective:
    """Negated Ackley on ``[-32.768, 32.768]^dim``; maximum 0 at the origin."""
    return _botorch(Ackley(dim=dim, negate=True).to(torch.float64), f"ackley{dim}", 0.0)


def tabular_svc() -> Objective:
    """Cross-validated accuracy of an RBF SVC on breast-cancer data, on a shipped 20 x 20 grid.

    Coordinates are ``(log10 C, log10 gamma)`` rescaled to ``[0, 1]^2``.

    Example:
        >>> t = tabular_svc()
        >>> t.candidates.shape, 0.9 < t.optimum <= 1.0
        (torch.Size([400, 2]), True)
    """
    text = files("gp_bts").joinpath("data/svc_breast_cancer.csv").read_text()
    rows = [r for r in csv.reader(line for line in text.splitlines() if not line.startswith("#"))]
    header, body = rows[0], rows[1:]
    if header != ["log10_C", "log10_gamma", "cv_accuracy"]:
        raise ValueError(f"unexpected tabular header {header}")
    data = torch.tensor([[float(v) for v in r] for r in body], dtype=torch.float64)
    raw, acc = data[:, :2], data[:, 2]
    lo, hi = raw.min(0).values, raw.max(0).values
    grid = (raw - lo) / (hi - lo)
    if not torch.isfinite(acc).all() or math.isclose(float(acc.max()), float(acc.min())):
        raise ValueError("tabular data are not a usable surface")
    bounds = torch.tensor([[0.0, 0.0], [1.0, 1.0]], dtype=torch.float64)
    return Objective("tabular-svc", _lookup(grid, acc), bounds, float(acc.max()), candidates=grid)
