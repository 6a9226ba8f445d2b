r"""Step-size bias of the discretised chain's stationary expected loss (linearised model).

Linearise the model at :math:`\bar\theta`: :math:`L(\theta) = \tfrac12\|J(\theta - \bar\theta)
+ r\|^2`, Hessian :math:`H = J^\top J`, per-parameter weight decays :math:`\Lambda`,
:math:`A = H + \Lambda`. CLD's stationary law is :math:`N(A^{-1}b, T A^{-1})`. The Euler chain
:math:`\theta^+ = \theta - \eta(A\theta - b) + \sqrt{2\eta T}\xi` has the same mean and, since
:math:`M = I - \eta A` commutes with :math:`A`, the covariance
:math:`\Sigma_\eta = T A^{-1}(I - \eta A/2)^{-1}`. The mean being unbiased, the stationary
expected loss exceeds CLD's by

.. math::

    \Delta = \tfrac12\operatorname{tr}H(\Sigma_\eta - \Sigma_0)
    = \tfrac{T\eta}{4}\operatorname{tr}J(I - \tfrac{\eta}{2}A)^{-1}J^\top
    = \tfrac{T}{2}\sum_i \frac{x_i}{1 - x_i}, \qquad x_i = \tfrac{\eta}{2} g_i,

with :math:`g_i` the eigenvalues of :math:`G = J D^{-1} J^\top`, :math:`D = I - \eta\Lambda/2`
(:math:`A^{-1}(I - \eta A/2)^{-1} - A^{-1} = \tfrac{\eta}{2}(I - \eta A/2)^{-1}`, then the
push-through identity :math:`J(D - cJ^\top J)^{-1}J^\top = G(I - cG)^{-1}`). With a decay per
layer, :math:`G = \sum_l K_l/(1 - \eta\lambda_l/2)`, :math:`K_l` the layer's share of the NTK:
an :math:`n \times n` computation. Each data mode adds :math:`\tfrac T2 x/(1-x)` to its
continuous-time :math:`\tfrac T2`; a mode at :math:`\eta g = c` is inflated by
:math:`1/(1 - c/2)`.

Exact for the Euler chain on a linear-Gaussian model. The exact-OU scheme with a frozen
gradient is the same recursion with step :math:`u_l = (1 - e^{-\lambda_l\eta})/\lambda_l` and
noise :math:`T u_l(2 - \lambda_l u_l)` per layer, which differs from Euler's by a relative
:math:`O(\eta\max_l\lambda_l)`; on a non-quadratic loss :math:`\Delta` evaluated along the
chain is the leading-order (in :math:`\eta`) bias, third derivatives of :math:`L` neglected.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from .langevin import check_nonneg, check_positive

__all__ = ["stationary_loss_bias"]


def stationary_loss_bias(
    layer_kernels: Sequence[Tensor], decays: Sequence[float], lr: float, temperature: float
) -> Tensor:
    r"""The excess :math:`\Delta` of the Euler chain's stationary expected loss over CLD's.

    Args:
        layer_kernels: each layer's share :math:`K_l = J_l J_l^\top` of the NTK, ``(..., n, n)``
            (batched over leading dimensions, e.g. seeds).
        decays: the layers' weight decays :math:`\lambda_l`.
        lr: the step :math:`\eta`; the chain must be stable (:math:`\eta g_i < 2`).
        temperature: :math:`T`; ``0`` gives zero bias.

    Returns:
        :math:`\Delta` with the kernels' leading shape.

    Example:
        >>> k = torch.eye(2, dtype=torch.float64)  # two modes at curvature 1
        >>> float(stationary_loss_bias([k], [0.0], lr=1.0, temperature=1.0))  # 2 * 0.5 * 1
        1.0
    """
    if len(layer_kernels) == 0 or len(layer_kernels) != len(decays):
        raise ValueError(
            f"need one decay per layer kernel, got {len(layer_kernels)} kernels and "
            f"{len(decays)} decays"
        )
    eta = check_positive("lr", lr)
    temp = check_nonneg("temperature", temperature)
    g = 0.0
    for k, lam in zip(layer_kernels, decays, strict=True):
        d = 1.0 - eta * check_nonneg("weight decay", lam) / 2
        if d <= 0:
            raise ValueError(f"lr * weight_decay must be < 2, got {eta * lam}")
        g = g + k / d
    x = eta * torch.linalg.eigvalsh(0.5 * (g + g.mT)) / 2
    if bool((x >= 1).any()):
        raise ValueError(f"the chain is unstable: lr * eig(G) reaches {2 * float(x.max())} >= 2")
    return temp / 2 * (x / (1 - x)).sum(-1)
