r"""The relative-error condition in the norm of an RKHS, checked exactly by kernel algebra.

In the RKHS :math:`\mathcal H_k` of a kernel :math:`k`, the gradient of
:math:`R(f) = \frac1n\sum_i \ell(f(x_i), y_i)` is the finite expansion
:math:`g = \sum_i \alpha_i k(x_i,\cdot)`, :math:`\alpha_i = \partial_u\ell(f(x_i), y_i)/n`
(:func:`adaptive_fgd.functional.rkhs_gradient_coefficients`). Its approximation on centres
:math:`c_1..c_m` (a prefix of :class:`~adaptive_fgd.representations.KernelCentres`) is
:math:`\hat g = \sum_j \beta_j k(c_j,\cdot)`; the best one in :math:`\|\cdot\|_{\mathcal H}` is the
orthogonal projection, :math:`K_{cc}\beta = K_{cx}\alpha` (the values of :math:`g` at the centres).
Unlike the :math:`L^2(\mu)` check, nothing has to be held out: with
:math:`v = K_{xx}\alpha` (the values of :math:`g` on the sample)

.. math::
    \|\hat g - g\|_{\mathcal H}^2 = \alpha^\top v - 2\beta^\top K_{cx}\alpha
    + \beta^\top K_{cc}\beta, \qquad \|g\|_{\mathcal H}^2 = \alpha^\top v,

exactly, for whatever :math:`\beta` the (ridged) solve returned. The RKHS norm weighs the
roughness of the error, not only its size at the sample, so an approximation whose values are
close to :math:`g`'s can still fail it (``tests/test_rkhs.py`` has such a case).

Smoothness in :math:`\mathcal H`: :math:`D^2R[h, h] = \frac1n\sum_i\ell''h(x_i)^2 \le
L\,\lambda_{\max}(K_{xx}/n)\,\|h\|_{\mathcal H}^2`, and for a kernel with non-negative values
:math:`\lambda_{\max}(K_{xx}) \le \max_i\sum_j k(x_i, x_j)` (the largest row sum bounds every
eigenvalue of a non-negative matrix), so :func:`operator_bound` gives a smoothness constant from
which :func:`~adaptive_fgd.functional.step_size` keeps the descent guarantee.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from .representations import KernelCentres, gaussian_kernel

__all__ = ["RkhsFit", "operator_bound", "project", "refine_rkhs"]


def operator_bound(gram: torch.Tensor) -> float:
    r"""Upper bound :math:`\max_i\frac1n\sum_j K_{ij} \ge \lambda_{\max}(K/n)` for ``K >= 0``."""
    if gram.ndim != 2 or gram.shape[0] != gram.shape[1] or gram.shape[0] == 0:
        raise ValueError(f"need a non-empty square Gram matrix, got {tuple(gram.shape)}")
    if bool((gram < 0).any()):
        raise ValueError("the row-sum bound needs a kernel with non-negative values")
    return float(gram.sum(1).max()) / gram.shape[0]


@dataclass
class RkhsFit:
    """Outcome of :func:`refine_rkhs` (the fields of ``FitResult`` and the gradient's norm)."""

    coefficients: torch.Tensor  #: ``(size, k)``
    size: int
    rel_error: float  #: exact, in the RKHS norm
    tries: int
    met: bool
    norm_sq: float  #: :math:`\|g\|_{\mathcal H}^2`


def project(
    centres: torch.Tensor,
    bandwidth: float,
    phi: torch.Tensor,
    alpha: torch.Tensor,
    values: torch.Tensor,
    jitter: float = 1e-10,
) -> tuple[torch.Tensor, float, float]:
    r"""RKHS projection of :math:`g = \sum_i\alpha_i k(x_i,\cdot)` on the centres' span.

    Args:
        centres: ``(m, d)`` centres.
        bandwidth: the Gaussian kernel's length scale.
        phi: :math:`K(x, c)` ``(n, m)``.
        alpha: ``(n, k)``.
        values: :math:`v = K_{xx}\alpha` ``(n, k)``.
        jitter: relative ridge on :math:`K_{cc}` (raised tenfold until it factorises).

    Returns:
        ``(beta, relative error, ||g||^2)``; the error from the exact three-term formula.
    """
    norm_sq = float((alpha * values).sum())
    if not math.isfinite(norm_sq):
        raise ValueError("non-finite gradient: cannot check the relative-error condition")
    if norm_sq <= 0.0:
        raise ValueError("the RKHS gradient vanishes: the relative error is undefined")
    kcc = gaussian_kernel(centres, centres, bandwidth)
    rhs = phi.T @ alpha  # g at the centres
    eye = torch.eye(kcc.shape[0], dtype=kcc.dtype)
    j = max(jitter, 1e-15)
    for _ in range(10):
        chol, info = torch.linalg.cholesky_ex(kcc + j * eye)
        if int(info) == 0:
            break
        j *= 10.0
    else:  # pragma: no cover - a Gaussian Gram matrix with ridge 1e-5 always factorises
        raise RuntimeError("project: the centres' Gram matrix does not factorise")
    beta = torch.cholesky_solve(rhs, chol)
    err_sq = norm_sq - 2.0 * float((beta * rhs).sum()) + float((beta * (kcc @ beta)).sum())
    return beta, math.sqrt(max(err_sq, 0.0) / norm_sq), norm_sq


def refine_rkhs(
    family: KernelCentres,
    x: torch.Tensor,
    phi_upto,
    alpha: torch.Tensor,
    values: torch.Tensor,
    delta: float,
    size: int,
    *,
    growth: float = 2.0,
    generator: torch.Generator | None = None,
    adaptive: bool = True,
) -> RkhsFit:
    r"""Grow the centres until :math:`\|\hat g - g\|_{\mathcal H} \le \delta\|g\|_{\mathcal H}`.

    New centres are drawn among the sample points with probability proportional to the squared
    residual :math:`(g - \hat g)(x_i)^2`, as in :func:`adaptive_fgd.fgd.refine_until`.

    Args:
        family: the kernel centres (grown in place).
        x: the sample ``(n, d)`` (candidate centres).
        phi_upto: ``m -> K(x, c_{:m})`` ``(n, m)`` (a caller may cache).
        alpha, values: the gradient's coefficients and its values on the sample.
        delta: the target in (0, 1).
        size: the size to try first.
        growth: factor > 1 between tries.
        generator: random source of the placement.
        adaptive: False: fit once at ``size``.
    """
    if not isinstance(family, KernelCentres):
        raise ValueError(f"the RKHS check needs KernelCentres, got {type(family).__name__}")
    gen = generator if generator is not None else torch.Generator().manual_seed(0)
    m = max(1, min(int(size), family.cap))
    tries, m_prev, resid = 0, 0, values
    while True:
        if family.size < m:
            family.grow(m, x, resid, gen)
            m = min(m, family.size)
        phi = phi_upto(m)
        beta, err, norm_sq = project(family.centres[:m], family.bandwidth, phi, alpha, values)
        tries += 1
        if err <= delta or not adaptive or m >= family.cap or m <= m_prev:
            return RkhsFit(beta, m, err, tries, err <= delta, norm_sq)
        resid = values - phi @ beta
        m_prev = m
        m = min(family.cap, max(m + 1, math.ceil(growth * m)))
