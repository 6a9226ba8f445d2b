r"""Ground truth for regularised logistic regression: exact leave-one-out by retraining.

Model: :math:`f(x;\theta) = x^\top\theta`, labels :math:`y \in \{\pm1\}`, margin
:math:`m_i = y_i x_i^\top\theta`, objective

.. math::
    R_S(\theta) = \sum_{i \in S}\log(1 + e^{-m_i}) + \tfrac{\lambda}{2}\|\theta\|^2 ,

strictly convex for :math:`\lambda > 0`. Newton's method in float64, damped by backtracking,
solves it to a gradient norm of ``tol``. Leave-one-out problems start from the full-data
solution (a warm start: they differ by one term), and are solved all at once as a batch of
masked problems. The attribution of train point i to target t is the change of the target's
margin when i is removed: :math:`\tau_{ti} = m_t(\hat\theta) - m_t(\hat\theta_{-i})`.

The per-example margin gradient is :math:`\phi_i = y_i x_i` (the model is linear, so TRAK's
linearisation is exact here and its error budget is the ALO step, the curvature/leverage
simplification and the projection).
"""

from __future__ import annotations

import torch
from torch import Tensor

from .scores import alo_scores, trak_scores

__all__ = [
    "exact_loo_logistic",
    "fit_logistic",
    "fit_logistic_masked",
    "logistic_alo",
    "logistic_trak",
    "subset_margins_logistic",
]


def _as64(a) -> Tensor:
    return torch.as_tensor(a).to(torch.float64)


def _check(x: Tensor, y: Tensor, lam: float) -> None:
    if x.dim() != 2 or x.shape[0] == 0:
        raise ValueError(f"x must be a non-empty (n, p) matrix, got shape {tuple(x.shape)}")
    if y.shape != (x.shape[0],):
        raise ValueError(f"y must have shape ({x.shape[0]},), got {tuple(y.shape)}")
    if not torch.all((y == 1) | (y == -1)):
        raise ValueError("labels must be +1 / -1")
    if not lam > 0:
        raise ValueError(f"the ridge lam must be > 0 for a unique optimum, got {lam}")


def fit_logistic_masked(
    x, y, lam: float, masks, theta0=None, tol: float = 1e-11, max_iter: int = 100
) -> Tensor:
    r"""Solve B masked problems :math:`\min_\theta R_{S_b}(\theta)` at once (Newton, float64).

    Args:
        x: (n, p) inputs. y: (n,) labels in {-1, +1}. lam: ridge > 0.
        masks: (B, n) 0/1 weights selecting each problem's training points.
        theta0: (B, p) or (p,) warm start (default zeros).
        tol: stop when every problem's gradient norm is below ``tol``.

    Returns:
        (B, p) solutions.

    Raises:
        RuntimeError: when Newton does not converge in ``max_iter`` steps.
    """
    x, y, masks = _as64(x), _as64(y), _as64(masks)
    _check(x, y, lam)
    b, p = masks.shape[0], x.shape[1]
    z = y[:, None] * x  # phi_i = y_i x_i
    th = torch.zeros(b, p, dtype=torch.float64) if theta0 is None else _as64(theta0)
    th = th.expand(b, p).clone()
    eye = torch.eye(p, dtype=torch.float64)

    def obj(t):
        return (masks * torch.nn.functional.softplus(-(t @ z.T))).sum(1) + 0.5 * lam * (t * t).sum(
            1
        )

    for _ in range(max_iter):
        m = th @ z.T  # (B, n)
        s = torch.sigmoid(-m)  # 1 - p
        g = -(masks * s) @ z + lam * th
        gn = g.norm(dim=1)
        if float(gn.max()) < tol:
            return th
        w = masks * s * (1 - s)
        h = (z.T[None] * w[:, None, :]) @ z + lam * eye
        step = torch.linalg.solve(h, g.unsqueeze(-1)).squeeze(-1)
        f0, t = obj(th), torch.ones(b, dtype=torch.float64)
        for _ in range(30):  # backtracking: full Newton steps near the optimum
            cand = th - t[:, None] * step
            bad = obj(cand) > f0 - 1e-4 * t * (g * step).sum(1) + 1e-12 * f0.abs()
            if not bool(bad.any()):
                break
            t = torch.where(bad, t / 2, t)
        th = th - t[:, None] * step
    raise RuntimeError(f"Newton did not converge: max gradient norm {float(gn.max()):.3e}")


def fit_logistic(x, y, lam: float, theta0=None, tol: float = 1e-11) -> Tensor:
    """The full-data solution (p,). Example:

    >>> x = torch.randn(50, 3, dtype=torch.float64); y = torch.sign(x[:, 0] + 0.1)
    >>> fit_logistic(x, y, 1.0).shape
    torch.Size([3])
    """
    x = _as64(x)
    return fit_logistic_masked(x, y, lam, torch.ones(1, x.shape[0]), theta0, tol)[0]


def exact_loo_logistic(x, y, lam: float, x_t, y_t, tol: float = 1e-11, batch: int = 64):
    r"""Exact LOO attributions :math:`\tau_{ti} = m_t(\hat\theta) - m_t(\hat\theta_{-i})`.

    Returns:
        (scores (m, n), theta_full (p,), thetas_loo (n, p)).
    """
    x, y, x_t, y_t = _as64(x), _as64(y), _as64(x_t), _as64(y_t)
    n = x.shape[0]
    theta = fit_logistic(x, y, lam, tol=tol)
    loo = []
    for s in range(0, n, batch):
        idx = torch.arange(s, min(n, s + batch))
        masks = torch.ones(len(idx), n, dtype=torch.float64)
        masks[torch.arange(len(idx)), idx] = 0.0
        loo.append(fit_logistic_masked(x, y, lam, masks, theta, tol))
    thetas = torch.cat(loo)
    zt = y_t[:, None] * x_t
    scores = (zt @ theta)[:, None] - zt @ thetas.T
    return scores, theta, thetas


def subset_margins_logistic(x, y, lam: float, masks, x_t, y_t, theta0=None, tol=1e-11) -> Tensor:
    """Target margins (S, m) of models retrained on each subset mask (S, n) (for the LDS)."""
    th = fit_logistic_masked(x, y, lam, masks, theta0, tol)
    zt = _as64(y_t)[:, None] * _as64(x_t)
    return th @ zt.T


def _phi_q_w(x, y, theta):
    z = _as64(y)[:, None] * _as64(x)
    s = torch.sigmoid(-(z @ _as64(theta)))  # 1 - p_i
    return z, s, s * (1 - s)


def logistic_alo(x, y, lam: float, theta, x_t, y_t) -> Tensor:
    """ALO scores (m, n): one Newton step from the full solution, with the leverage term."""
    z, q, w = _phi_q_w(x, y, theta)
    zt = _as64(y_t)[:, None] * _as64(x_t)
    return alo_scores(z, zt, q, w, lam)


def logistic_trak(x, y, theta, x_t, y_t, ridge: float = 0.0, projector=None) -> Tensor:
    r"""TRAK scores (m, n) for logistic regression, optionally through a projector."""
    z, q, _ = _phi_q_w(x, y, theta)
    zt = _as64(y_t)[:, None] * _as64(x_t)
    if projector is not None:
        z = projector.project(z.to(torch.float32)).to(torch.float64)
        zt = projector.project(zt.to(torch.float32)).to(torch.float64)
    return trak_scores(z, zt, q, ridge)
