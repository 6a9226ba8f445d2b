r"""Infinite-width kernels of the bias-free MLPs of :mod:`langevin_ntk.models`, computed here.

For a pair of inputs the first-layer pre-activations are jointly Gaussian with covariance
:math:`\Sigma^{(1)}(x, y) = x^\top y / d`. Layer by layer (hidden width :math:`\to\infty`),

.. math::

    \Sigma^{(l+1)}(x, y) &= E[\sigma(u)\sigma(v)], \qquad
    \dot\Sigma^{(l+1)}(x, y) = E[\sigma'(u)\sigma'(v)], \qquad
    (u, v) \sim N\Big(0, \begin{pmatrix}\Sigma^{(l)}_{xx} & \Sigma^{(l)}_{xy}\\
    \Sigma^{(l)}_{xy} & \Sigma^{(l)}_{yy}\end{pmatrix}\Big), \\
    \Theta^{(1)} &= \Sigma^{(1)}, \qquad
    \Theta^{(l+1)} = \Theta^{(l)}\dot\Sigma^{(l+1)} + \Sigma^{(l+1)},

and the NTK of a depth-:math:`L` network in the NTK parameterisation tends to
:math:`\Theta^{(L)}` (for one hidden layer: :math:`E[\sigma\sigma] + E[\sigma'\sigma']\,x^\top y/d`:
the output-layer part plus the hidden-layer part). The Gaussian expectations use either the
closed forms for :math:`\sigma = \mathrm{erf}` (Williams 1997),

.. math::

    E[\mathrm{erf}(u)\mathrm{erf}(v)] = \tfrac{2}{\pi}\arcsin\frac{2c}{\sqrt{(1+2a)(1+2b)}},\qquad
    E[\mathrm{erf}'(u)\mathrm{erf}'(v)] = \tfrac{4}{\pi}\big((1+2a)(1+2b) - 4c^2\big)^{-1/2}

(:math:`a, b` the variances, :math:`c` the covariance; the second is the Gaussian integral
:math:`\int e^{-u^2-v^2}dN = \det(I + 2C)^{-1/2}`), or a tensor Gauss-Hermite rule for any
activation (:func:`gaussian_expectation`).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import torch
from torch import Tensor

from .models import Activation, get_activation

__all__ = [
    "analytic_ntk",
    "erf_dot_kernel",
    "erf_kernel",
    "gaussian_expectation",
    "nngp_and_derivative",
]


def _pair_cov(k: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    diag = torch.diagonal(k)
    return diag[:, None].expand_as(k), diag[None, :].expand_as(k), k


def erf_kernel(cov: Tensor) -> Tensor:
    r""":math:`E[\mathrm{erf}(u_i)\mathrm{erf}(u_j)]` for :math:`u \sim N(0, \mathrm{cov})`.

    Example:
        >>> erf_kernel(torch.tensor([[0.0]]))
        tensor([[0.]])
    """
    a, b, c = _pair_cov(cov)
    return (2.0 / math.pi) * torch.asin(
        (2.0 * c / torch.sqrt((1 + 2 * a) * (1 + 2 * b))).clamp(-1, 1)
    )


def erf_dot_kernel(cov: Tensor) -> Tensor:
    r""":math:`E[\mathrm{erf}'(u_i)\mathrm{erf}'(u_j)]` for :math:`u \sim N(0, \mathrm{cov})`.

    Example:
        >>> float(erf_dot_kernel(torch.tensor([[0.0]])))  # erf'(0)^2 = 4/pi
        1.2732395447351628
    """
    a, b, c = _pair_cov(cov.to(torch.float64))
    return (4.0 / math.pi) / torch.sqrt((1 + 2 * a) * (1 + 2 * b) - 4 * c * c)


def gaussian_expectation(
    f: Callable[[Tensor], Tensor],
    g: Callable[[Tensor], Tensor],
    cov: Tensor,
    order: int = 48,
) -> Tensor:
    r""":math:`E[f(u_i)g(u_j)]` for every pair, :math:`u \sim N(0, \mathrm{cov})`, by quadrature.

    Writes :math:`(u_i, u_j) = (\sqrt{a}\,z_1,\ \rho\sqrt{b}\,z_1 + \sqrt{b(1-\rho^2)}\,z_2)` with
    :math:`z \sim N(0, I)` and applies the probabilists' Gauss-Hermite rule of ``order`` nodes
    in each of :math:`z_1, z_2` (exact for polynomials of degree :math:`2\cdot` ``order`` - 1).

    Args:
        f, g: elementwise torch functions.
        cov: a PSD ``(n, n)`` covariance (float64 recommended).
        order: nodes per dimension.

    Returns:
        ``(n, n)`` matrix of expectations.

    Example:
        >>> c = torch.tensor([[1.0, 0.5], [0.5, 2.0]], dtype=torch.float64)
        >>> e = gaussian_expectation(lambda z: z, lambda z: z, c)  # E[u_i u_j] = cov
        >>> torch.allclose(e, c)
        True
    """
    if cov.ndim != 2 or cov.shape[0] != cov.shape[1]:
        raise ValueError(f"cov must be square, got shape {tuple(cov.shape)}")
    if isinstance(order, bool) or not isinstance(order, int) or order < 2:
        raise ValueError(f"order must be an int >= 2, got {order!r}")
    nodes, weights = np.polynomial.hermite_e.hermegauss(order)
    z = torch.as_tensor(nodes, dtype=cov.dtype)
    w = torch.as_tensor(weights / math.sqrt(2.0 * math.pi), dtype=cov.dtype)
    a, b, c = _pair_cov(cov)
    sa, sb = a.clamp_min(0).sqrt(), b.clamp_min(0).sqrt()
    rho = torch.where((sa * sb) > 0, c / (sa * sb).clamp_min(1e-300), torch.zeros_like(c)).clamp(
        -1, 1
    )
    u = sa[..., None, None] * z[:, None]  # (n, n, q, 1)
    v = sb[..., None, None] * (
        rho[..., None, None] * z[:, None] + (1 - rho**2).sqrt()[..., None, None] * z[None, :]
    )
    vals = f(u) * g(v)  # (n, n, q, q)
    return torch.einsum("ijab,a,b->ij", vals, w, w)


def nngp_and_derivative(
    cov: Tensor, activation: str | Activation, order: int = 48
) -> tuple[Tensor, Tensor]:
    r""":math:`(E[\sigma\sigma], E[\sigma'\sigma'])` under ``cov`` (erf: closed form).

    Example:
        >>> c = torch.eye(2, dtype=torch.float64)
        >>> s, sd = nngp_and_derivative(c, "erf")
        >>> bool(torch.allclose(s, nngp_and_derivative(c, "erf", order=0)[0]))
        True
    """
    act = get_activation(activation)
    if act.name == "erf" and order == 0:
        return erf_kernel(cov), erf_dot_kernel(cov)
    if order == 0:
        raise ValueError("order=0 (closed form) exists only for the erf activation")
    return (
        gaussian_expectation(act.fn, act.fn, cov, order),
        gaussian_expectation(act.deriv, act.deriv, cov, order),
    )


def analytic_ntk(
    x: Tensor,
    activation: str | Activation = "erf",
    depth: int = 2,
    *,
    closed_form: bool = True,
    order: int = 48,
    return_nngp: bool = False,
) -> Tensor | tuple[Tensor, Tensor]:
    r"""The infinite-width NTK :math:`\Theta^{(L)}` of the NTK-parameterised MLP on a batch.

    Args:
        x: inputs ``(n, d)`` (any dtype; computed in float64).
        activation: name or :class:`~langevin_ntk.models.Activation`.
        depth: number of weight layers :math:`L \ge 2`.
        closed_form: use the erf closed forms when the activation is erf.
        order: Gauss-Hermite nodes otherwise.
        return_nngp: also return the last hidden layer's kernel :math:`\Sigma^{(L)}`.

    Returns:
        ``Theta`` ``(n, n)`` float64, or ``(Theta, Sigma_L)``.

    Example:
        >>> x = torch.eye(3, dtype=torch.float64) * 3 ** 0.5
        >>> th = analytic_ntk(x, "erf")
        >>> bool(torch.allclose(th, th.T))
        True
    """
    if x.ndim != 2:
        raise ValueError(f"x must have shape (n, d), got {tuple(x.shape)}")
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 2:
        raise ValueError(f"depth must be an int >= 2, got {depth!r}")
    act = get_activation(activation)
    x = x.to(torch.float64)
    sigma = x @ x.mT / x.shape[1]
    theta = sigma
    use_closed = closed_form and act.name == "erf"
    for _ in range(depth - 1):
        s, sd = nngp_and_derivative(sigma, act, 0 if use_closed else order)
        theta = theta * sd + s
        sigma = s
    return (theta, sigma) if return_nngp else theta
