r"""A small convex grouped problem and its exact GDRO optimum.

:func:`make_grouped_logistic` builds :math:`m` groups of logistic-regression data whose planted
directions disagree, so that the worst-group optimum differs from the average-risk one. The loss
is scaled into :math:`[0, 1]` on :math:`\Theta = \{\|\theta\|_2 \le D\}`:
:math:`\ell(\theta; x, y) = \log(1 + e^{-y\,x^\top\theta}) / B`, :math:`B = \log(1 + e^{D})`,
with :math:`\|x\|_2 \le 1`, so the per-sample gradient is bounded by :math:`G = 1/B`.

:func:`gdro_optimum` solves the epigraph form

.. math::

    \min_{\theta, s}\ s \quad\text{s.t.}\quad R_i(\theta) \le s\ (i \le m),
    \quad \|\theta\|_2^2 \le D^2

with SciPy's SLSQP (exact gradients; the problem is smooth and convex, so its KKT point is the
global optimum). :func:`gdro_optimum_cvxpy` solves the same program as a conic problem with
cvxpy (exponential cone: :math:`\log(1+e^z)` is ``cvxpy.logistic``), an independent route to the
same number. SciPy and cvxpy are imported only here (``pip install 'gdro-fsq[oracle]'``).

Example:
    >>> prob = make_grouped_logistic(n_groups=3, dim=3, n_per_group=20, seed=0)
    >>> theta, value = gdro_optimum(prob)
    >>> bool(value <= prob.max_risk(torch.zeros(3, dtype=torch.float64)) + 1e-9)
    True
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from .data import Batch, GroupSampler

__all__ = [
    "GroupedProblem",
    "gdro_optimum",
    "gdro_optimum_cvxpy",
    "make_grouped_logistic",
    "smoothed_max_optimum",
]


@dataclass
class GroupedProblem:
    """Grouped logistic-regression data with its loss scaling and constants."""

    X: Tensor  #: features, ``(n, d)``, rows of norm <= 1.
    y: Tensor  #: labels in {-1, +1}, ``(n,)``.
    groups: Tensor  #: group ids, ``(n,)``.
    n_groups: int
    radius: float  #: D.
    loss_bound: float  #: B = log(1 + e^D): the raw loss bound on the ball.

    @property
    def dim(self) -> int:
        """The number of features ``d``."""
        return int(self.X.shape[1])

    @property
    def grad_bound(self) -> float:
        """G = 1/B, the bound on the scaled loss's per-sample gradient."""
        return 1.0 / self.loss_bound

    def per_sample_loss(self, theta: Tensor, X: Tensor, y: Tensor) -> Tensor:
        """The scaled logistic loss of each row, in [0, 1] on the ball."""
        return torch.nn.functional.softplus(-y * (X @ theta)) / self.loss_bound

    def loss_fn(self, params: list[Tensor], batch: Batch) -> Tensor:
        """The ``loss_fn`` for the optimizers: ``params[0]`` is theta."""
        return self.per_sample_loss(params[0], batch.X, batch.y)

    def group_risks(self, theta: Tensor) -> Tensor:
        r""":math:`R_i(\theta)`, the mean scaled loss on each group, shape ``(m,)``."""
        # evaluated where the data lives (theta may come from a model on another device)
        losses = self.per_sample_loss(theta.to(self.X), self.X, self.y)
        sums = torch.zeros(self.n_groups, dtype=losses.dtype, device=losses.device)
        sums = sums.index_add_(0, self.groups.to(losses.device), losses)
        counts = torch.bincount(self.groups, minlength=self.n_groups).to(losses)
        return sums / counts

    def max_risk(self, theta: Tensor) -> float:
        r""":math:`\max_i R_i(\theta)`."""
        return float(self.group_risks(theta).max())

    def sampler(self, generator: torch.Generator | None = None) -> GroupSampler:
        """A :class:`GroupSampler` over this data."""
        return GroupSampler(
            self.X, self.y, self.groups, generator=generator, n_groups=self.n_groups
        )


def make_grouped_logistic(
    n_groups: int,
    dim: int,
    n_per_group: int,
    *,
    radius: float = 2.0,
    noise: float = 0.5,
    seed: int = 0,
) -> GroupedProblem:
    r"""Synthetic groups: group :math:`i` has its own planted direction :math:`w_i` and shift.

    Features :math:`x = (u + \mu_i)/\|u + \mu_i\|` with :math:`u \sim N(0, I/d)`, labels
    :math:`y = \operatorname{sign}(w_i^\top x + \text{noise}\cdot\xi)`. Group sizes vary
    (between ``n_per_group/2`` and ``n_per_group``) so the groups weigh differently in ERM.

    Args:
        n_groups: m.
        dim: d.
        n_per_group: the largest group's size.
        radius: D, the radius of the parameter ball.
        noise: label noise scale.
        seed: the data seed.

    Returns:
        A :class:`GroupedProblem` in float64.
    """
    if n_groups < 2 or dim < 1 or n_per_group < 2:
        raise ValueError("need n_groups >= 2, dim >= 1, n_per_group >= 2")
    g = torch.Generator().manual_seed(seed)
    base = torch.randn(dim, generator=g, dtype=torch.float64)
    xs, ys, gs = [], [], []
    for i in range(n_groups):
        w = base + 1.5 * torch.randn(dim, generator=g, dtype=torch.float64)
        mu = 0.5 * torch.randn(dim, generator=g, dtype=torch.float64) / math.sqrt(dim)
        n_i = n_per_group // 2 + int(torch.randint(0, n_per_group // 2 + 1, (), generator=g))
        u = torch.randn(n_i, dim, generator=g, dtype=torch.float64) / math.sqrt(dim) + mu
        x = u / u.norm(dim=1, keepdim=True).clamp(min=1e-12)
        xi = torch.randn(n_i, generator=g, dtype=torch.float64)
        y = torch.sign(x @ w / w.norm() + noise * xi)
        y[y == 0] = 1
        xs.append(x)
        ys.append(y)
        gs.append(torch.full((n_i,), i, dtype=torch.long))
    return GroupedProblem(
        X=torch.cat(xs),
        y=torch.cat(ys),
        groups=torch.cat(gs),
        n_groups=n_groups,
        radius=float(radius),
        loss_bound=math.log1p(math.exp(radius)),
    )


def _risks_and_jac(prob: GroupedProblem, theta_np):
    theta = torch.tensor(theta_np, dtype=torch.float64, requires_grad=True)
    risks = prob.group_risks(theta)
    jac = torch.stack(
        [torch.autograd.grad(risks[i], theta, retain_graph=True)[0] for i in range(prob.n_groups)]
    )
    return risks.detach().numpy(), jac.numpy()


def gdro_optimum(prob: GroupedProblem, *, tol: float = 1e-12) -> tuple[Tensor, float]:
    r"""The exact :math:`\min_{\|\theta\|\le D}\max_i R_i(\theta)` by SLSQP on the epigraph.

    Returns:
        ``(theta_star, value)``; ``value`` is :math:`\max_i R_i(\theta^\star)` recomputed in
        torch.

    Raises:
        ImportError: without SciPy. RuntimeError: if the solver reports failure.
    """
    try:
        import numpy as np
        from scipy.optimize import minimize
    except ImportError as err:  # pragma: no cover - exercised only without scipy
        raise ImportError("the oracle needs SciPy: pip install 'gdro-fsq[oracle]'") from err
    d, m = prob.dim, prob.n_groups

    def objective(z):
        return z[-1], np.concatenate([np.zeros(d), [1.0]])

    def cons_fun(z):
        risks, _ = _risks_and_jac(prob, z[:d])
        return np.concatenate([z[-1] - risks, [prob.radius**2 - z[:d] @ z[:d]]])

    def cons_jac(z):
        _, jac = _risks_and_jac(prob, z[:d])
        top = np.concatenate([-jac, np.ones((m, 1))], axis=1)
        ball = np.concatenate([-2 * z[:d], [0.0]])[None, :]
        return np.concatenate([top, ball], axis=0)

    z0 = np.zeros(d + 1)
    z0[-1] = float(prob.max_risk(torch.zeros(d, dtype=torch.float64)))
    res = minimize(
        objective,
        z0,
        jac=True,
        method="SLSQP",
        constraints=[{"type": "ineq", "fun": cons_fun, "jac": cons_jac}],
        options={"ftol": tol, "maxiter": 1000},
    )
    if not res.success:
        raise RuntimeError(f"SLSQP failed: {res.message}")
    theta = torch.tensor(res.x[:d], dtype=torch.float64)
    norm = float(theta.norm())
    if norm > prob.radius:
        theta = theta * (prob.radius / norm)
    return theta, prob.max_risk(theta)


def gdro_optimum_cvxpy(prob: GroupedProblem, *, solver: str | None = None) -> tuple[Tensor, float]:
    r"""The exact :math:`\min_{\|\theta\|\le D}\max_i R_i(\theta)` as a conic program (cvxpy).

    .. math::

        \min_{\theta, s}\ s \quad\text{s.t.}\quad \frac{1}{n_i B}\sum_{k \in i}
        \log\big(1 + e^{-y_k x_k^\top\theta}\big) \le s,\quad \|\theta\|_2 \le D.

    Args:
        prob: the grouped logistic problem.
        solver: a cvxpy solver name (default: cvxpy's choice; CLARABEL when installed).

    Returns:
        ``(theta_star, value)``; ``value`` is :math:`\max_i R_i(\theta^\star)` recomputed in
        torch (so it is an upper bound on OPT up to the solver's feasibility tolerance).

    Raises:
        ImportError: without cvxpy. RuntimeError: if the solver does not report an optimum.
    """
    try:
        import cvxpy as cp
    except ImportError as err:  # pragma: no cover - exercised only without cvxpy
        raise ImportError("this oracle needs cvxpy: pip install 'gdro-fsq[oracle]'") from err
    X = prob.X.detach().to(torch.float64).numpy()
    y = prob.y.detach().to(torch.float64).numpy()
    groups = prob.groups.numpy()
    theta, s = cp.Variable(prob.dim), cp.Variable()
    cons = [cp.norm(theta, 2) <= prob.radius]
    for i in range(prob.n_groups):
        rows = groups == i
        margins = cp.multiply(-y[rows], X[rows] @ theta)
        cons.append(cp.sum(cp.logistic(margins)) / (rows.sum() * prob.loss_bound) <= s)
    problem = cp.Problem(cp.Minimize(s), cons)
    if solver is None and "CLARABEL" in cp.installed_solvers():
        solver = "CLARABEL"
    problem.solve(solver=solver)
    if problem.status not in ("optimal", "optimal_inaccurate") or theta.value is None:
        raise RuntimeError(f"cvxpy did not find the optimum: status {problem.status}")
    th = torch.tensor(theta.value, dtype=torch.float64)
    norm = float(th.norm())
    if norm > prob.radius:
        th = th * (prob.radius / norm)
    return th, prob.max_risk(th)


def smoothed_max_optimum(prob: GroupedProblem, beta: float, steps: int = 200) -> float:
    r"""An independent check: minimise :math:`\frac1\beta\log\sum_i e^{\beta R_i(\theta)}` on the
    ball (projected gradient descent with backtracking).

    Its value :math:`v_\beta` satisfies :math:`\mathrm{OPT} \le \max_i R_i(\theta_\beta) \le
    v_\beta \le \mathrm{OPT} + \log m/\beta` at its minimiser; returns
    :math:`\max_i R_i(\theta_\beta)`.
    """
    theta = torch.zeros(prob.dim, dtype=torch.float64)
    step = 1.0

    def f(th: Tensor) -> Tensor:
        return torch.logsumexp(beta * prob.group_risks(th), 0) / beta

    for _ in range(steps):
        th = theta.clone().requires_grad_(True)
        val = f(th)
        (grad,) = torch.autograd.grad(val, th)
        while True:
            cand = theta - step * grad
            nrm = float(cand.norm())
            if nrm > prob.radius:
                cand = cand * (prob.radius / nrm)
            decrease = 1e-4 * float(grad @ (theta - cand))
            if float(f(cand)) <= float(val.detach()) - decrease or step < 1e-12:
                break
            step *= 0.5
        theta = cand
        step *= 2.0
    return prob.max_risk(theta)
