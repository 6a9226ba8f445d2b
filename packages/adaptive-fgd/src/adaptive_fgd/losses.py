r"""Pointwise losses :math:`\ell(u, y)` and their derivatives in the prediction :math:`u`.

A functional loss built from them is :math:`R(f) = \int \ell(f(x), y(x))\,d\mu(x)`; its
smoothness constant in :math:`L^2(\mu)` is the sup of :math:`\partial_u^2 \ell`, which each
loss reports (:func:`smoothness`).

Example:
    >>> import torch
    >>> u, y = torch.tensor([[0.5]]), torch.tensor([[1.0]])
    >>> float(loss_value("squared", u, y))
    0.125
    >>> float(loss_derivative("squared", u, y))
    -0.5
"""

from __future__ import annotations

import torch

__all__ = ["LOSSES", "check_loss", "loss_derivative", "loss_value", "smoothness"]

#: the losses this module knows; ``logistic`` takes labels in [-1, +1], ``softmax`` a probability
#: vector per point (one-hot for hard labels; see :func:`loss_value`).
LOSSES = ("squared", "logistic", "softmax")


def check_loss(name: str) -> str:
    """Return ``name`` if it is one of :data:`LOSSES`, else raise ``ValueError``."""
    if name not in LOSSES:
        raise ValueError(f"loss must be one of {LOSSES}, got {name!r}")
    return name


def loss_value(name: str, u: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    r"""Pointwise loss :math:`\ell(u, y)`, same shape as ``u``.

    * ``squared``: :math:`\tfrac12 (u - y)^2`;
    * ``logistic``: :math:`\log(1 + e^{-y u})` for ``y`` in {-1, +1}; for ``y`` in
      :math:`[-1, 1]` the expected loss of a label that is :math:`+1` with probability
      :math:`p = (1+y)/2`: :math:`p\log(1+e^{-u}) + (1-p)\log(1+e^{u})` (the population risk
      at a point whose conditional probability is :math:`p`; its minimiser
      :math:`\operatorname{logit} p` is finite for :math:`|y| < 1`). Both forms agree at
      :math:`\pm1`; computed with softplus;
    * ``softmax`` (multiclass, ``k`` outputs): entry :math:`j` is
      :math:`-y_j\log\mathrm{softmax}(u)_j`, so the row sum is the cross-entropy
      :math:`-\sum_j y_j\log p_j(u)` of the label distribution :math:`y` (a probability vector:
      one-hot for a hard label). Per-entry terms keep "same shape as ``u``" for every loss.

    Args:
        name: one of :data:`LOSSES`.
        u: predictions, any shape.
        y: targets, broadcastable to ``u``.

    Returns:
        The loss at every entry.
    """
    check_loss(name)
    if name == "squared":
        return 0.5 * (u - y) ** 2
    if name == "softmax":
        return -y * torch.log_softmax(u, dim=-1)
    p = 0.5 * (1 + y)  # two softplus terms (not softplus(u) - p u) stay accurate for large |u|
    sp = torch.nn.functional.softplus
    return p * sp(-u) + (1 - p) * sp(u)


def loss_derivative(name: str, u: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    r""":math:`\partial_u \ell(u, y)`: ``u - y`` (squared), :math:`\sigma(u) - (1+y)/2` (logistic).

    For ``y`` in {-1, +1} the logistic one is :math:`-y\,\sigma(-y u)`. Softmax: the gradient of
    the row's cross-entropy, :math:`\mathrm{softmax}(u)\sum_j y_j - y` (:math:`= p - y` for a
    probability vector :math:`y`).
    """
    check_loss(name)
    if name == "squared":
        return u - y
    if name == "softmax":
        return torch.softmax(u, dim=-1) * y.sum(-1, keepdim=True) - y
    p = 0.5 * (1 + y)  # p(-sigma(-u)) + (1-p)sigma(u): no cancellation in 1 - sigma(u)
    return (1 - p) * torch.sigmoid(u) - p * torch.sigmoid(-u)


def smoothness(name: str) -> float:
    r"""Largest curvature of :math:`\ell(\cdot, y)`: 1 (squared), 1/4 (logistic), 1/2 (softmax).

    Softmax: the Hessian of a row's cross-entropy is :math:`\mathrm{diag}(p) - pp^\top`; for
    unit :math:`v`, :math:`v^\top(\mathrm{diag}(p) - pp^\top)v = \mathrm{Var}_p(v) \le
    \tfrac14(\max v - \min v)^2 \le \tfrac12` (Popoviciu, and :math:`(v_a - v_b)^2 \le 2`),
    attained by two classes at :math:`p = (\tfrac12, \tfrac12)`.
    """
    check_loss(name)
    return {"squared": 1.0, "logistic": 0.25, "softmax": 0.5}[name]
