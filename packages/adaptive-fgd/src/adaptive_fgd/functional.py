r"""Functional gradients as Riesz representers, the relative-error condition, the step size.

Setting. :math:`R(f) = \int \ell(f(x), y(x))\,d\mu(x) + \tfrac{\lambda}{2}\|f\|_{\mathcal H}^2`
over functions :math:`f:\Omega\to\mathbb R^k`. The directional derivative is

.. math::
    DR(f)[h] = \int \partial_u\ell(f(x), y(x))\cdot h(x)\,d\mu(x)
    + \lambda\langle f, h\rangle_{\mathcal H}.

The functional gradient in a Hilbert space :math:`\mathcal G` is the Riesz representer
:math:`g` with :math:`\langle g, h\rangle_{\mathcal G} = DR(f)[h]` for all :math:`h`:

* in :math:`L^2(\mu)` (``lam = 0``): :math:`g(x) = \partial_u\ell(f(x), y(x))`, the pointwise
  derivative (:func:`l2_gradient`);
* in an RKHS :math:`\mathcal H_k` with :math:`\mu = \sum_i w_i \delta_{x_i}`: the reproducing
  property :math:`h(x_i) = \langle k(x_i,\cdot), h\rangle` gives
  :math:`g = \sum_i w_i\,\partial_u\ell(f(x_i), y_i)\,k(x_i,\cdot) + \lambda f`, a finite
  expansion (:func:`rkhs_gradient_coefficients`).

Inexact step (the analysis behind the adaptive rule). If :math:`R` is :math:`L`-smooth in
:math:`\mathcal G` and the approximation :math:`\hat g` satisfies the *relative-error
condition* :math:`\|\hat g - g\| \le \delta\|g\|` with :math:`\delta\in(0,1)`, then
:math:`\langle g, \hat g\rangle \ge (1-\delta)\|g\|^2` and :math:`\|\hat g\| \le (1+\delta)\|g\|`,
so the descent lemma gives

.. math::
    R(f - \eta\hat g) \le R(f) - \eta\Big[(1-\delta) - \tfrac{L\eta}{2}(1+\delta)^2\Big]\|g\|^2,

maximised by :math:`\eta = (1-\delta)/(L(1+\delta)^2)` (:func:`step_size`) with guaranteed
decrease :math:`\tfrac{(1-\delta)^2}{2L(1+\delta)^2}\|g\|^2` (:func:`guaranteed_decrease`).
Under a PL condition :math:`\|g\|^2 \ge 2m\,(R(f) - R^\star)` the gap contracts by
:math:`1 - \tfrac{m}{L}\tfrac{(1-\delta)^2}{(1+\delta)^2}` per step (:func:`pl_rate`).
"""

from __future__ import annotations

import math

import torch

from .losses import loss_derivative

__all__ = [
    "check_delta",
    "guaranteed_decrease",
    "l2_gradient",
    "l2_inner",
    "l2_norm",
    "pl_rate",
    "relative_error",
    "rkhs_gradient_coefficients",
    "step_size",
]


def check_delta(delta: float) -> float:
    """Return ``delta`` as a float if it lies in the open interval (0, 1), else ``ValueError``."""
    if isinstance(delta, bool) or not isinstance(delta, int | float):
        raise ValueError(f"delta must be a number in (0, 1), got {delta!r}")
    if not (0.0 < float(delta) < 1.0):
        raise ValueError(f"delta must lie in the open interval (0, 1), got {delta!r}")
    return float(delta)


def _weights(n: int, weights: torch.Tensor | None, like: torch.Tensor) -> torch.Tensor:
    if n == 0:
        raise ValueError("the sample is empty: need at least one point")
    if weights is None:
        return torch.full((n,), 1.0 / n, dtype=like.dtype, device=like.device)
    if weights.shape != (n,):
        raise ValueError(f"weights must have shape ({n},), got {tuple(weights.shape)}")
    if not torch.isfinite(weights).all() or (weights < 0).any():
        raise ValueError("weights must be finite and non-negative")
    return weights.to(like)


def l2_inner(a: torch.Tensor, b: torch.Tensor, weights: torch.Tensor | None = None) -> torch.Tensor:
    r""":math:`\langle a, b\rangle_{L^2(\mu)} = \sum_i w_i\, a(x_i)\cdot b(x_i)`.

    Args:
        a, b: values at the nodes, shape ``(n, k)``.
        weights: the measure's weights :math:`w_i` (default uniform ``1/n``).

    Returns:
        A scalar tensor.
    """
    if a.shape != b.shape or a.ndim != 2:
        raise ValueError(
            f"need two (n, k) arrays of equal shape, got {tuple(a.shape)}, {tuple(b.shape)}"
        )
    w = _weights(a.shape[0], weights, a)
    return (w[:, None] * a * b).sum()


def l2_norm(a: torch.Tensor, weights: torch.Tensor | None = None) -> torch.Tensor:
    r""":math:`\|a\|_{L^2(\mu)}` for values ``a`` of shape ``(n, k)``."""
    return l2_inner(a, a, weights).clamp_min(0).sqrt()


def l2_gradient(loss: str, f_values: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    r"""The :math:`L^2(\mu)` gradient at the nodes: :math:`g(x_i) = \partial_u\ell(f(x_i), y_i)`.

    It is the Riesz representer for *every* weighting :math:`\mu`, because the same weights
    appear in the derivative and in the inner product.

    Args:
        loss: a name from :mod:`adaptive_fgd.losses`.
        f_values: :math:`f(x_i)`, shape ``(n, k)``.
        y: targets, shape ``(n, k)``.

    Returns:
        ``(n, k)`` gradient values.

    Example:
        >>> import torch
        >>> l2_gradient("squared", torch.ones(2, 1), torch.zeros(2, 1)).flatten().tolist()
        [1.0, 1.0]
    """
    if f_values.shape != y.shape or f_values.ndim != 2:
        raise ValueError(
            "f_values and y must both have shape (n, k), got "
            f"{tuple(f_values.shape)}, {tuple(y.shape)}"
        )
    if f_values.shape[0] == 0:
        raise ValueError("the sample is empty: need at least one point")
    if not torch.isfinite(f_values).all():
        raise ValueError("f has non-finite values at the sample points")
    g = loss_derivative(loss, f_values, y)
    if not torch.isfinite(g).all():
        raise ValueError("the loss derivative is not finite at some sample point")
    return g


def rkhs_gradient_coefficients(
    loss: str,
    f_values: torch.Tensor,
    y: torch.Tensor,
    f_coefficients: torch.Tensor,
    lam: float,
    weights: torch.Tensor | None = None,
) -> torch.Tensor:
    r"""Coefficients :math:`\alpha` of the RKHS gradient :math:`g = \sum_i \alpha_i k(x_i, \cdot)`.

    For :math:`f = \sum_i c_i k(x_i,\cdot)` (centres = the sample points),
    :math:`\alpha_i = w_i\,\partial_u\ell(f(x_i), y_i) + \lambda c_i`.

    Args:
        loss: a name from :mod:`adaptive_fgd.losses`.
        f_values: :math:`f(x_i) = (K c)_i`, shape ``(n, k)``.
        y: targets ``(n, k)``.
        f_coefficients: :math:`c`, shape ``(n, k)``.
        lam: the RKHS penalty :math:`\lambda \ge 0`.
        weights: :math:`w_i` (default ``1/n``).

    Returns:
        :math:`\alpha`, shape ``(n, k)``.
    """
    if lam < 0 or not math.isfinite(lam):
        raise ValueError(f"lam must be finite and >= 0, got {lam!r}")
    g = l2_gradient(loss, f_values, y)
    if f_coefficients.shape != g.shape:
        raise ValueError(
            f"f_coefficients must have shape {tuple(g.shape)}, got {tuple(f_coefficients.shape)}"
        )
    w = _weights(g.shape[0], weights, g)
    return w[:, None] * g + lam * f_coefficients


def relative_error(
    approx: torch.Tensor, exact: torch.Tensor, weights: torch.Tensor | None = None
) -> float:
    r""":math:`\|\hat g - g\|_{L^2(\mu)} / \|g\|_{L^2(\mu)}` from values at the nodes.

    Used on points held out from the fit of :math:`\hat g`, it is an unbiased-in-square
    Monte-Carlo estimate of the condition's left side over :math:`\mu`.

    Raises:
        ValueError: non-finite values, or :math:`g = 0` on the nodes (then the iterate is
        stationary there and the ratio is undefined).
    """
    if not (torch.isfinite(approx).all() and torch.isfinite(exact).all()):
        raise ValueError("non-finite gradient values: cannot check the relative-error condition")
    den = float(l2_norm(exact, weights))
    if den == 0.0:
        raise ValueError(
            "the exact gradient vanishes on the check points: the relative error is undefined"
        )
    return float(l2_norm(approx - exact, weights)) / den


def step_size(smoothness: float, delta: float) -> float:
    r""":math:`\eta = (1-\delta) / (L (1+\delta)^2)`: the step maximising the guaranteed decrease.

    Example:
        >>> step_size(1.0, 0.5)
        0.2222222222222222
    """
    if not (smoothness > 0 and math.isfinite(smoothness)):
        raise ValueError(f"smoothness must be finite and > 0, got {smoothness!r}")
    d = check_delta(delta)
    return (1 - d) / (smoothness * (1 + d) ** 2)


def guaranteed_decrease(smoothness: float, delta: float, eta: float, grad_norm_sq: float) -> float:
    r"""Lower bound on :math:`R(f) - R(f - \eta\hat g)`.

    It is :math:`\eta[(1-\delta) - \tfrac{L\eta}{2}(1+\delta)^2]\|g\|^2` for any :math:`\hat g` with
    :math:`\|\hat g - g\| \le \delta\|g\|` (``grad_norm_sq`` is :math:`\|g\|^2`).
    """
    d = check_delta(delta)
    return eta * ((1 - d) - 0.5 * smoothness * eta * (1 + d) ** 2) * grad_norm_sq


def pl_rate(smoothness: float, pl_constant: float, delta: float) -> float:
    r"""Per-step contraction of :math:`R - R^\star` under PL(:math:`m`) with :func:`step_size`:
    :math:`1 - \tfrac{m}{L}\tfrac{(1-\delta)^2}{(1+\delta)^2}`."""
    d = check_delta(delta)
    if not (0 < pl_constant <= smoothness):
        raise ValueError(f"need 0 < pl_constant <= smoothness, got {pl_constant!r}, {smoothness!r}")
    return 1 - (pl_constant / smoothness) * (1 - d) ** 2 / (1 + d) ** 2
