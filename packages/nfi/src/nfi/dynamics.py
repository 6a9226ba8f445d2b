r"""The drift that broken zero-sum puts on the classifier mean, and its feedback with features.

Setting: a linear head :math:`z_i = W h_i` (:math:`W \in \mathbb R^{C\times d}`, features
:math:`h_i \in \mathbb R^d`), per-sample logit gradients :math:`g_i = \partial \ell/\partial z_i`
and their row sums :math:`\sigma_i = \mathbf 1^\top g_i` (zero in exact arithmetic). Split each
classifier row into the *classifier mean* :math:`\bar w = \frac1C\sum_c w_c` and the centred
rows :math:`\tilde w_c = w_c - \bar w`.

One step. :math:`\nabla_W L = \sum_i g_i h_i^\top`, so the classifier mean moves by

.. math:: \bar w^+ = \bar w - \frac{\eta_W}{C} \sum_i \sigma_i h_i ,

which is *zero* when every row sums to zero: exact CE never moves :math:`\bar w` (plain
gradient descent). The feature gradient is
:math:`\nabla_{h_i}\ell = W^\top g_i = \sigma_i \bar w + \tilde W^\top g_i`, so the features pick
up a push :math:`-\eta_H \sigma_i \bar w` along the classifier mean. In the absorbed regime
:math:`\sigma_i = s_i = \sum_{j\ne y_i} p_{ij} > 0` for every absorbed sample: both pushes have a
fixed sign. Averaging over samples with :math:`\bar\sigma = \frac1N\sum_i\sigma_i`,
:math:`\bar h = \frac1N\sum_i h_i` and neglecting the correlation of :math:`\sigma_i` with
:math:`h_i` and the centred term (which averages out of :math:`\bar h`):

.. math::

    \begin{pmatrix}\bar w\\ \bar h\end{pmatrix}^+ =
    \begin{pmatrix} I & -\frac{\eta_W\bar\sigma N}{C} I \\ -\eta_H\bar\sigma I & I\end{pmatrix}
    \begin{pmatrix}\bar w\\ \bar h\end{pmatrix}

(with a sum-reduced loss :math:`\sum_i \sigma_i h_i = N\bar\sigma\bar h`). The eigenvalues are
:math:`1 \pm \bar\sigma\sqrt{\eta_W\eta_H N/C}`: along the eigenvector with
:math:`\bar w \propto -\sqrt{\eta_W N/C}\,u`, :math:`\bar h \propto \sqrt{\eta_H}\,u` (the two
means pointing in opposite directions, so :math:`\bar w^\top\bar h < 0`), both grow by the
factor :math:`1 + \bar\sigma\sqrt{\eta_W\eta_H N/C}` per step: the positive feedback loop.
Its rate is :func:`predicted_growth_rate`; :func:`mean_pair_step` is the exact linear step,
checked in the tests against a simulation of the full (unaveraged) updates.

This is the gradient-descent picture. Under Adam the same fixed-sign drift is divided by the
root of its own second moment, so a drift of size :math:`u` still moves the means at the
learning rate: that is why the spikes are seen with adaptive optimizers.
"""

from __future__ import annotations

import math

from torch import Tensor

__all__ = [
    "class_mean",
    "classifier_mean_drift",
    "mean_pair_step",
    "predicted_growth_rate",
    "zero_sum_violation",
]


def class_mean(weight: Tensor) -> Tensor:
    r"""The classifier mean :math:`\bar w = \frac1C\sum_c w_c` of a ``(C, d)`` head weight."""
    if weight.dim() != 2:
        raise ValueError(f"weight must have shape (C, d), got {tuple(weight.shape)}")
    return weight.mean(dim=0)


def zero_sum_violation(grad_logits: Tensor) -> Tensor:
    r"""Row sums :math:`\sigma_i = \sum_c g_{ic}` in float64 (exactly 0 for exact CE).

    Args:
        grad_logits: ``(..., C)`` logit gradients (classes last).

    Returns:
        ``(...)`` float64.
    """
    if grad_logits.dim() < 1 or grad_logits.shape[-1] < 2:
        raise ValueError(
            f"grad_logits must have a class dim of size >= 2, got {tuple(grad_logits.shape)}"
        )
    return grad_logits.double().sum(dim=-1)


def classifier_mean_drift(grad_logits: Tensor, features: Tensor) -> Tensor:
    r"""The gradient of the classifier mean, :math:`\frac1C\sum_i \sigma_i h_i`.

    Equals ``class_mean(grad_W)`` for :math:`\nabla_W = G^\top H`; zero when rows sum to zero.

    Args:
        grad_logits: ``(N, C)``.
        features: ``(N, d)``.

    Returns:
        ``(d,)`` float64.
    """
    if grad_logits.dim() != 2 or features.dim() != 2 or grad_logits.shape[0] != features.shape[0]:
        raise ValueError(
            f"need grad_logits (N, C) and features (N, d), got {tuple(grad_logits.shape)}, "
            f"{tuple(features.shape)}"
        )
    sigma = zero_sum_violation(grad_logits)
    return sigma @ features.double() / grad_logits.shape[1]


def _check_pos(name: str, v: float) -> float:
    v = float(v)
    if not (v > 0 and math.isfinite(v)):
        raise ValueError(f"{name} must be a positive finite number, got {v!r}")
    return v


def predicted_growth_rate(
    sigma_bar: float, num_classes: int, lr_w: float, lr_h: float, num_samples: int = 1
) -> float:
    r"""Per-step log growth rate :math:`\log(1 + \bar\sigma\sqrt{\eta_W\eta_H N/C})` of the means.

    Args:
        sigma_bar: mean row sum :math:`\bar\sigma \ge 0` of the logit gradients (absorbed
            samples contribute their :math:`s_i`, the others 0).
        num_classes: ``C``.
        lr_w, lr_h: step sizes of the head and of the features (positive).
        num_samples: ``N`` for a sum-reduced loss; 1 when the gradients already carry the
            ``1/N`` of a mean.

    Returns:
        The rate (0 when ``sigma_bar == 0``).

    Example:
        >>> round(predicted_growth_rate(0.01, 4, 1.0, 1.0, 4), 6) == round(math.log1p(0.01), 6)
        True
    """
    if not (sigma_bar >= 0 and math.isfinite(sigma_bar)):
        raise ValueError(f"sigma_bar must be a finite number >= 0, got {sigma_bar!r}")
    if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 2:
        raise ValueError(f"num_classes must be an int >= 2, got {num_classes!r}")
    if isinstance(num_samples, bool) or not isinstance(num_samples, int) or num_samples < 1:
        raise ValueError(f"num_samples must be an int >= 1, got {num_samples!r}")
    k = math.sqrt(_check_pos("lr_w", lr_w) * _check_pos("lr_h", lr_h) * num_samples / num_classes)
    return math.log1p(sigma_bar * k)


def mean_pair_step(
    w_bar: Tensor,
    h_bar: Tensor,
    sigma_bar: float,
    num_classes: int,
    lr_w: float,
    lr_h: float,
    num_samples: int = 1,
) -> tuple[Tensor, Tensor]:
    r"""One step of the averaged linear model of the module docstring.

    Returns:
        ``(w_bar_next, h_bar_next)``.
    """
    w_next = w_bar - lr_w * sigma_bar * num_samples / num_classes * h_bar
    h_next = h_bar - lr_h * sigma_bar * w_bar
    return w_next, h_next
