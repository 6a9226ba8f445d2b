r"""L2-regularised Langevin dynamics: one discretised step, its target law, and closed forms.

The continuous-time dynamics (CLD) at temperature :math:`T = 1/\beta` with weight decay
:math:`\lambda` is

.. math::

    d\theta_t = -\big(\nabla L(\theta_t) + \lambda\theta_t\big)\,dt + \sqrt{2T}\,dW_t ,

whose stationary law (when it is normalisable) is the Gibbs density

.. math::

    \pi(\theta) \propto \exp\!\Big(-\frac{L(\theta) + \tfrac{\lambda}{2}\|\theta\|^2}{T}\Big).

Two one-step discretisations with step :math:`\eta` and :math:`\xi \sim N(0, I)`:

* **Euler-Maruyama** (``"euler"``):
  :math:`\theta^+ = \theta - \eta(g + \lambda\theta) + \sqrt{2\eta T}\,\xi`,
  :math:`g = \nabla L(\theta)`.
* **exact Ornstein-Uhlenbeck for the regulariser** (``"ou"``): freeze :math:`g` over the step
  and solve the remaining linear SDE :math:`d\theta = -(g + \lambda\theta)dt + \sqrt{2T}dW`
  exactly,

  .. math::

      \theta^+ = e^{-\lambda\eta}\theta - \frac{1 - e^{-\lambda\eta}}{\lambda}\,g
      + \sqrt{\frac{T(1 - e^{-2\lambda\eta})}{\lambda}}\;\xi ,

  which tends to the Euler step as :math:`\lambda \to 0`. With :math:`L \equiv 0` it samples the
  Gaussian :math:`N(0, (T/\lambda) I)` exactly for every step size (no step-size bias).

At :math:`T = 0` both are deterministic: plain gradient descent with (coupled) weight decay.

All functions here are pure (no in-place changes of their inputs) and work on any shape.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

__all__ = [
    "SCHEMES",
    "check_nonneg",
    "check_positive",
    "euler_maruyama_step",
    "gibbs_log_density",
    "langevin_step",
    "ou_coefficients",
    "ou_step",
    "quadratic_discrete_stationary",
    "quadratic_stationary",
]

SCHEMES = ("euler", "ou")


def _as_float(name: str, value: object) -> float:
    if isinstance(value, bool):
        raise ValueError(f"{name} must be a real number, got {value!r}")
    try:
        v = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a real number, got {value!r}") from None
    if not math.isfinite(v):
        raise ValueError(f"{name} must be finite, got {value!r}")
    return v


def check_positive(name: str, value: object) -> float:
    """``float(value)`` if it is a finite number > 0, else ``ValueError`` naming it.

    Example:
        >>> check_positive("lr", 0.1)
        0.1
    """
    v = _as_float(name, value)
    if v <= 0:
        raise ValueError(f"{name} must be > 0, got {value!r}")
    return v


def check_nonneg(name: str, value: object) -> float:
    """``float(value)`` if it is a finite number >= 0, else ``ValueError`` naming it.

    Example:
        >>> check_nonneg("temperature", 0)
        0.0
    """
    v = _as_float(name, value)
    if v < 0:
        raise ValueError(f"{name} must be >= 0, got {value!r}")
    return v


def _noise_like(theta: Tensor, noise: Tensor | None, temperature: float) -> Tensor | None:
    if temperature == 0.0:
        return None
    if noise is None:
        raise ValueError("temperature > 0 needs a noise tensor (standard normal, theta's shape)")
    if noise.shape != theta.shape:
        raise ValueError(f"noise has shape {tuple(noise.shape)}, theta {tuple(theta.shape)}")
    return noise


def euler_maruyama_step(
    theta: Tensor,
    grad: Tensor,
    lr: float,
    weight_decay: float = 0.0,
    temperature: float = 0.0,
    noise: Tensor | None = None,
) -> Tensor:
    r"""One Euler-Maruyama step :math:`\theta - \eta(g + \lambda\theta) + \sqrt{2\eta T}\,\xi`.

    Args:
        theta: current parameters :math:`\theta`.
        grad: :math:`g = \nabla L(\theta)`, same shape.
        lr: step :math:`\eta > 0`.
        weight_decay: :math:`\lambda \ge 0` (coupled: it is part of the drift).
        temperature: :math:`T \ge 0`; ``0`` is plain gradient descent (``noise`` ignored).
        noise: standard normal :math:`\xi` of ``theta``'s shape (needed when ``T > 0``).

    Returns:
        :math:`\theta^+` (a new tensor).

    Example:
        >>> th = torch.tensor([1.0, -2.0]); g = torch.tensor([0.5, 0.5])
        >>> euler_maruyama_step(th, g, lr=0.1, weight_decay=1.0)
        tensor([ 0.8500, -1.8500])
    """
    lr = check_positive("lr", lr)
    wd = check_nonneg("weight_decay", weight_decay)
    temp = check_nonneg("temperature", temperature)
    xi = _noise_like(theta, noise, temp)
    out = theta - lr * (grad + wd * theta)
    if xi is not None:
        out = out + math.sqrt(2.0 * lr * temp) * xi
    return out


def ou_coefficients(
    lr: float, weight_decay: float, temperature: float
) -> tuple[float, float, float]:
    r"""The exact OU step's coefficients :math:`(a, c, s)`: :math:`\theta^+ = a\theta - cg + s\xi`.

    .. math::

        a = e^{-\lambda\eta},\quad c = \frac{1 - e^{-\lambda\eta}}{\lambda},\quad
        s = \sqrt{\frac{T(1 - e^{-2\lambda\eta})}{\lambda}},

    computed with ``expm1`` so that :math:`\lambda \to 0` gives :math:`(1, \eta, \sqrt{2\eta T})`
    without cancellation.

    Example:
        >>> ou_coefficients(0.1, 0.0, 1.0) == (1.0, 0.1, math.sqrt(0.2))
        True
    """
    lr = check_positive("lr", lr)
    wd = check_nonneg("weight_decay", weight_decay)
    temp = check_nonneg("temperature", temperature)
    if wd == 0.0:
        return 1.0, lr, math.sqrt(2.0 * lr * temp)
    a = math.exp(-wd * lr)
    c = -math.expm1(-wd * lr) / wd
    s = math.sqrt(temp * -math.expm1(-2.0 * wd * lr) / wd)
    return a, c, s


def ou_step(
    theta: Tensor,
    grad: Tensor,
    lr: float,
    weight_decay: float = 0.0,
    temperature: float = 0.0,
    noise: Tensor | None = None,
) -> Tensor:
    r"""One exact-OU step for the regulariser with the loss gradient frozen over the step.

    :math:`\theta^+ = e^{-\lambda\eta}\theta - \frac{1-e^{-\lambda\eta}}{\lambda}g +
    \sqrt{T(1-e^{-2\lambda\eta})/\lambda}\,\xi` (see :func:`ou_coefficients`).

    Args:
        theta, grad, lr, weight_decay, temperature, noise: as in :func:`euler_maruyama_step`.

    Returns:
        :math:`\theta^+` (a new tensor).

    Example:
        >>> th = torch.tensor([1.0]); g = torch.zeros(1)
        >>> ou_step(th, g, lr=1.0, weight_decay=math.log(2.0))  # exp(-lr wd) = 1/2
        tensor([0.5000])
    """
    temp = check_nonneg("temperature", temperature)
    a, c, s = ou_coefficients(lr, weight_decay, temp)
    xi = _noise_like(theta, noise, temp)
    out = a * theta - c * grad
    if xi is not None:
        out = out + s * xi
    return out


def langevin_step(
    theta: Tensor,
    grad: Tensor,
    lr: float,
    weight_decay: float = 0.0,
    temperature: float = 0.0,
    noise: Tensor | None = None,
    scheme: str = "euler",
) -> Tensor:
    """Dispatch to :func:`euler_maruyama_step` (``"euler"``) or :func:`ou_step` (``"ou"``).

    Example:
        >>> th = torch.ones(2); g = torch.zeros(2)
        >>> langevin_step(th, g, 0.5, scheme="ou")
        tensor([1., 1.])
    """
    if scheme == "euler":
        return euler_maruyama_step(theta, grad, lr, weight_decay, temperature, noise)
    if scheme == "ou":
        return ou_step(theta, grad, lr, weight_decay, temperature, noise)
    raise ValueError(f"scheme must be one of {SCHEMES}, got {scheme!r}")


def gibbs_log_density(
    loss: Tensor, theta_sq_norm: Tensor, weight_decay: float, temperature: float
) -> Tensor:
    r"""Unnormalised log Gibbs density :math:`-(L + \tfrac{\lambda}{2}\|\theta\|^2)/T`.

    Args:
        loss: :math:`L(\theta)` (any shape: one value per point).
        theta_sq_norm: :math:`\|\theta\|^2`, broadcastable against ``loss``.
        weight_decay: :math:`\lambda \ge 0`.
        temperature: :math:`T > 0` (at :math:`T = 0` the law is a point mass: no density).

    Returns:
        The log density up to the additive constant :math:`-\log Z`.

    Example:
        >>> gibbs_log_density(torch.tensor(1.0), torch.tensor(4.0), 0.5, 2.0)
        tensor(-1.)
    """
    wd = check_nonneg("weight_decay", weight_decay)
    temp = check_positive("temperature", temperature)
    return -(loss + 0.5 * wd * theta_sq_norm) / temp


def _quadratic_h(a: Tensor, weight_decay: float) -> Tensor:
    if a.ndim != 2 or a.shape[0] != a.shape[1]:
        raise ValueError(f"A must be a square matrix, got shape {tuple(a.shape)}")
    if not torch.allclose(a, a.mT, rtol=1e-10, atol=1e-12):
        raise ValueError("A must be symmetric")
    wd = check_nonneg("weight_decay", weight_decay)
    return a + wd * torch.eye(a.shape[0], dtype=a.dtype, device=a.device)


def quadratic_stationary(
    a: Tensor, b: Tensor, weight_decay: float, temperature: float
) -> tuple[Tensor, Tensor]:
    r"""Mean and covariance of the Gibbs law of a quadratic loss.

    The loss is :math:`L = \tfrac12\theta^\top A\theta - b^\top\theta`.

    With :math:`H = A + \lambda I \succ 0`, the density
    :math:`\exp(-(L + \tfrac\lambda2\|\theta\|^2)/T) \propto
    \exp(-\tfrac{1}{2T}(\theta - H^{-1}b)^\top H(\theta - H^{-1}b))` is
    :math:`N(H^{-1}b,\; T H^{-1})`: the continuous-time stationary law.

    Args:
        a: symmetric ``(d, d)``; ``A + weight_decay I`` must be positive definite.
        b: ``(d,)``.
        weight_decay, temperature: :math:`\lambda \ge 0`, :math:`T \ge 0`.

    Returns:
        ``(mean, cov)``.

    Example:
        >>> m, c = quadratic_stationary(torch.eye(2), torch.ones(2), 1.0, 0.5)
        >>> m, torch.diag(c)
        (tensor([0.5000, 0.5000]), tensor([0.2500, 0.2500]))
    """
    h = _quadratic_h(a, weight_decay)
    temp = check_nonneg("temperature", temperature)
    evals, evecs = torch.linalg.eigh(h)
    if float(evals.min()) <= 0:
        raise ValueError(f"A + weight_decay I must be positive definite, min eig {evals.min()}")
    inv = (evecs / evals) @ evecs.mT
    return inv @ b, temp * inv


def quadratic_discrete_stationary(
    a: Tensor, b: Tensor, lr: float, weight_decay: float, temperature: float, scheme: str = "euler"
) -> tuple[Tensor, Tensor]:
    r"""Exact stationary mean and covariance of the *discretised* chain on a quadratic loss.

    On :math:`L = \tfrac12\theta^\top A\theta - b^\top\theta` both schemes are linear
    recursions :math:`\theta^+ = M\theta + c\,b + s\,\xi`:

    * Euler: :math:`M = I - \eta H`, :math:`c = \eta`, :math:`s^2 = 2\eta T`;
    * OU: :math:`M = aI - cA`, :math:`s^2 = T(1 - a^2)/\lambda` (:func:`ou_coefficients`).

    :math:`M` is symmetric and shares :math:`A`'s eigenvectors, so with :math:`M = V\,
    \mathrm{diag}(m_i) V^\top` the fixed point of :math:`\Sigma = M\Sigma M + s^2 I` is
    :math:`V \mathrm{diag}(s^2/(1 - m_i^2)) V^\top`, and the mean solves
    :math:`(I - M)\mu = c\,b`. Both schemes have the continuous mean :math:`H^{-1}b`; Euler's
    covariance is :math:`T\,(H(I - \eta H/2))^{-1}`, biased by :math:`O(\eta)`.

    Args:
        a, b: the quadratic (``a`` symmetric); weight_decay, temperature as usual.
        lr: step :math:`\eta`; the chain must be stable (all :math:`|m_i| < 1`).
        scheme: ``"euler"`` or ``"ou"``.

    Returns:
        ``(mean, cov)``.

    Example:
        >>> m, c = quadratic_discrete_stationary(torch.eye(1), torch.zeros(1), 0.5, 0.0, 1.0)
        >>> float(c)  # T / (h (1 - eta h / 2)) = 1 / 0.75
        1.3333333730697632
    """
    h = _quadratic_h(a, weight_decay)
    temp = check_nonneg("temperature", temperature)
    eye = torch.eye(a.shape[0], dtype=a.dtype, device=a.device)
    if scheme == "euler":
        lr = check_positive("lr", lr)
        m, c, s2 = eye - lr * h, lr, 2.0 * lr * temp
    elif scheme == "ou":
        ac, c, s = ou_coefficients(lr, weight_decay, temp)
        m, s2 = ac * eye - c * a, s * s
    else:
        raise ValueError(f"scheme must be one of {SCHEMES}, got {scheme!r}")
    m = 0.5 * (m + m.mT)
    evals, evecs = torch.linalg.eigh(m)
    if float(evals.abs().max()) >= 1.0:
        raise ValueError(f"the chain is unstable at lr={lr}: |eig(M)| max {evals.abs().max()}")
    mean = evecs @ ((evecs.mT @ (c * b)) / (1.0 - evals))
    cov = (evecs * (s2 / (1.0 - evals**2))) @ evecs.mT
    return mean, cov
