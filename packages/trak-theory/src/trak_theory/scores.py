r"""The TRAK / ALO score formulas as small pure functions (float64 linear algebra).

Setting: a model trained with loss :math:`\sum_i L(f_i(\theta)) + \tfrac{\lambda}{2}\|\theta\|^2`
where :math:`L(f) = \log(1+e^{-f})` is the loss as a function of the margin f. With features
:math:`\phi_i = \nabla_\theta f_i` (possibly projected), :math:`q_i = -L'(f_i) = 1 - p_i`,
:math:`w_i = L''(f_i) = p_i(1-p_i)` and :math:`H = \Phi^\top W \Phi + \lambda I`, one Newton
step of the leave-one-out objective from :math:`\theta^\star` gives
:math:`\theta_{-i} - \theta^\star = -q_i H_{-i}^{-1}\phi_i`, and by Sherman--Morrison

.. math::
    \tau^{\mathrm{ALO}}_{t i} = f_t(\theta^\star) - f_t(\theta_{-i})
    = \frac{q_i\, \phi_t^\top H^{-1}\phi_i}{1 - w_i\,\phi_i^\top H^{-1} \phi_i}.

TRAK drops the curvature weights (:math:`W \to I`) and the leverage denominator:

.. math::
    \tau^{\mathrm{TRAK}}_{t i} = \phi_t^\top(\Phi^\top\Phi + \lambda I)^{-1}\phi_i\, q_i .

Scores are laid out (targets, train).
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import Tensor

__all__ = [
    "alo_scores",
    "default_ridge",
    "effective_dimension",
    "ensemble_mean",
    "gram",
    "kernel_solve",
    "trak_scores",
    "traker_scores",
]


def _f64(a) -> Tensor:
    return torch.as_tensor(np.asarray(a) if not torch.is_tensor(a) else a).to(torch.float64)


def gram(phi) -> Tensor:
    r""":math:`\Phi^\top\Phi` in float64."""
    p = _f64(phi)
    return p.T @ p


def effective_dimension(eigs, ridge: float) -> float:
    r""":math:`d_{\mathrm{eff}}(\lambda) = \sum_j e_j/(e_j + \lambda)` for Gram eigenvalues e."""
    e = _f64(eigs).clamp_min(0)
    if ridge == 0:
        return float((e > e.max() * 1e-12).sum())
    return float((e / (e + ridge)).sum())


def default_ridge(gram_matrix, n: int, fraction: float = 0.5) -> float:
    r"""The smallest ridge with :math:`d_{\mathrm{eff}}(\lambda) \le \text{fraction}\cdot n`.

    Why: the TRAK estimator :math:`\phi_t^\top(\Phi^\top\Phi+\lambda I)^{-1}\Phi^\top` is a
    least-squares fit of n points with :math:`d_{\mathrm{eff}}` degrees of freedom. Its variance
    grows like :math:`d_{\mathrm{eff}}/(n - d_{\mathrm{eff}})` and diverges as the projection
    dimension k approaches n (the collapse traker shows with its default ridge 0). Capping the
    effective dimension at a fixed fraction of n keeps that variance bounded, and when
    :math:`k \le \text{fraction}\cdot n` the answer is 0, i.e. plain TRAK. Solved by bisection
    on :math:`\log\lambda` over the Gram eigenvalues.

    Args:
        gram_matrix: (k, k) :math:`\Phi^\top\Phi`.
        n: number of training examples.
        fraction: target :math:`d_{\mathrm{eff}}/n` in (0, 1].

    Returns:
        The ridge :math:`\lambda \ge 0`.

    Example:
        >>> phi = torch.randn(100, 20, dtype=torch.float64)
        >>> default_ridge(phi.T @ phi, 100)
        0.0
    """
    if not 0 < fraction <= 1:
        raise ValueError(f"fraction must be in (0, 1], got {fraction}")
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    e = torch.linalg.eigvalsh(_f64(gram_matrix)).clamp_min(0)
    cap = fraction * n
    if effective_dimension(e, 0.0) <= cap:
        return 0.0
    lo, hi = float(e.max()) * 1e-12, float(e.sum()) + 1.0
    for _ in range(200):
        mid = (lo * hi) ** 0.5
        if effective_dimension(e, mid) > cap:
            lo = mid
        else:
            hi = mid
        if hi / lo < 1 + 1e-10:
            break
    return hi


def kernel_solve(gram_matrix, ridge: float) -> Tensor:
    r""":math:`(\Phi^\top\Phi + \lambda I)^{-1}` (float64; pseudo-inverse when singular at 0)."""
    if ridge < 0 or not np.isfinite(ridge):
        raise ValueError(f"ridge must be a finite number >= 0, got {ridge}")
    g = _f64(gram_matrix)
    a = g + ridge * torch.eye(g.shape[0], dtype=torch.float64, device=g.device)
    lower, info = torch.linalg.cholesky_ex(a)
    if int(info) == 0:
        return torch.cholesky_inverse(lower)
    return torch.linalg.pinv(a, hermitian=True)  # singular at ridge 0: minimum-norm solution


def trak_scores(phi_train, phi_target, q, ridge: float = 0.0) -> Tensor:
    r""":math:`\tau_{ti} = \phi_t^\top(\Phi^\top\Phi+\lambda I)^{-1}\phi_i\,q_i`, shape (m, n).

    Example:
        >>> phi = torch.randn(30, 5, dtype=torch.float64)
        >>> trak_scores(phi, phi[:2], torch.ones(30)).shape
        torch.Size([2, 30])
    """
    pt, pg, qq = _f64(phi_train), _f64(phi_target), _f64(q)
    if pt.shape[0] == 0:
        raise ValueError("empty training set")
    if pt.shape[1] != pg.shape[1]:
        raise ValueError(f"feature dims differ: train {pt.shape[1]}, target {pg.shape[1]}")
    if qq.shape != (pt.shape[0],):
        raise ValueError(f"q must have shape ({pt.shape[0]},), got {tuple(qq.shape)}")
    inv = kernel_solve(pt.T @ pt, ridge)
    return (pg @ inv @ pt.T) * qq[None, :]


def alo_scores(phi_train, phi_target, q, w, ridge: float) -> Tensor:
    r"""The one-Newton-step leave-one-out effect with leverage correction, shape (m, n).

    :math:`\tau_{ti} = q_i\,\phi_t^\top H^{-1}\phi_i / (1 - w_i\phi_i^\top H^{-1}\phi_i)`,
    :math:`H = \Phi^\top W\Phi + \lambda I`.
    """
    pt, pg, qq, ww = _f64(phi_train), _f64(phi_target), _f64(q), _f64(w)
    if isinstance(ridge, bool) or not isinstance(ridge, int | float) or not ridge >= 0:
        raise ValueError(f"ridge must be a number >= 0, got {ridge!r}")
    if not math.isfinite(ridge):
        raise ValueError(f"ridge must be finite, got {ridge!r}")
    if pt.dim() != 2 or pt.shape[0] == 0:
        raise ValueError(f"phi_train must be a non-empty (n, k) matrix, got {tuple(pt.shape)}")
    if pg.dim() != 2 or pg.shape[1] != pt.shape[1]:
        raise ValueError(f"phi_target must be (m, {pt.shape[1]}), got {tuple(pg.shape)}")
    if qq.shape != (pt.shape[0],) or ww.shape != (pt.shape[0],):
        raise ValueError(
            f"q and w must have shape ({pt.shape[0]},), got {tuple(qq.shape)}, {tuple(ww.shape)}"
        )
    if not all(bool(torch.isfinite(a).all()) for a in (pt, pg, qq, ww)):
        raise ValueError("alo_scores inputs must be finite (found NaN or inf)")
    h = pt.T @ (ww[:, None] * pt) + ridge * torch.eye(
        pt.shape[1], dtype=torch.float64, device=pt.device
    )
    hinv_phi = torch.linalg.solve(h, pt.T)  # (p, n)
    lev = (pt * hinv_phi.T).sum(1)
    return (pg @ hinv_phi) * (qq / (1 - ww * lev))[None, :]


def ensemble_mean(scores: list[Tensor]) -> Tensor:
    """Average per-model score matrices (each model: its own features, weights and ridge)."""
    if not scores:
        raise ValueError("no per-model scores to ensemble")
    shapes = {tuple(s.shape) for s in scores}
    if len(shapes) != 1:
        raise ValueError(f"per-model score shapes differ: {sorted(shapes)}")
    return torch.stack([_f64(s) for s in scores]).mean(0)


def traker_scores(phis_train, phis_target, qs, ridge: float = 0.0) -> Tensor:
    r"""traker 0.3.2's ensemble, reproduced: (m, n).

    traker normalises each model's :math:`(\Phi_j^\top\Phi_j+\lambda I)^{-1}` by its mean
    absolute entry :math:`c_j`, averages the un-reweighted scores over models, and multiplies
    by the model-averaged :math:`\bar q`:
    :math:`\tau = \big(\tfrac1J\sum_j \phi_{t,j}^\top A_j^{-1}\Phi_j^\top / c_j\big)\,\bar q`.
    (traker computes in float32; this is float64.)
    """
    if not phis_train:
        raise ValueError("no models")
    acc, qbar = None, None
    for pt, pg, q in zip(phis_train, phis_target, qs, strict=True):
        pt, pg = _f64(pt), _f64(pg)
        a = pt.T @ pt + ridge * torch.eye(pt.shape[1], dtype=torch.float64, device=pt.device)
        inv = torch.linalg.inv(a)
        inv = inv / inv.abs().mean()
        s = pg @ inv @ pt.T
        acc = s if acc is None else acc + s
        qbar = _f64(q) if qbar is None else qbar + _f64(q)
    j = len(phis_train)
    return (acc / j) * (qbar / j)[None, :]
