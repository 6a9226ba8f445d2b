r"""Maximum information gain :math:`\gamma_T` on a finite candidate set, and batch ratios.

For a GP prior :math:`f \sim GP(0, k)` observed with Gaussian noise of variance
:math:`\sigma^2`, the information that the observations at a multiset
:math:`A = \{x_1, \dots, x_T\}` carry about :math:`f` is

.. math:: I(A) = \tfrac12 \log\det(I_T + \sigma^{-2} K_{AA}),

and :math:`\gamma_T = \max_{|A| = T} I(A)` (points may repeat). The chain rule gives
:math:`I(A) = \sum_t \tfrac12 \log(1 + \sigma^{-2}\sigma^2_{t-1}(x_t))`, with
:math:`\sigma^2_{t-1}` the posterior variance after :math:`x_1..x_{t-1}` (it does not depend
on the observed values). :math:`I` is monotone submodular in :math:`A`, so the greedy choice
:math:`x_t = \arg\max_x \sigma^2_{t-1}(x)` (pure uncertainty sampling) reaches at least
:math:`(1 - 1/e)` of the optimum (Nemhauser, Wolsey and Fisher, 1978):

.. math:: G_T \le \gamma_T \le G_T / (1 - 1/e).

:func:`greedy_information_gain` computes :math:`G_T` exactly (float64, rank-one updates of
the candidate covariance); bounds that need :math:`\gamma_T` use the upper end
:math:`G_T/(1-1/e)` (:func:`gamma_upper`).
"""

from __future__ import annotations

import math

import torch

__all__ = [
    "GREEDY_FACTOR",
    "gamma_upper",
    "greedy_information_gain",
    "information_gain",
    "linear_kernel_gamma",
    "variance_ratio_bound",
]

#: Nemhauser et al.: greedy reaches at least this fraction of the best monotone submodular value.
GREEDY_FACTOR = 1.0 - math.exp(-1.0)


def _check_noise(noise_var: float) -> float:
    if not isinstance(noise_var, (int, float)) or isinstance(noise_var, bool):
        raise ValueError(f"noise_var must be a positive float, got {noise_var!r}")
    if not math.isfinite(noise_var) or noise_var <= 0:
        raise ValueError(f"noise_var must be positive and finite, got {noise_var!r}")
    return float(noise_var)


def _check_kernel(kernel: torch.Tensor) -> torch.Tensor:
    kernel = torch.as_tensor(kernel, dtype=torch.float64)
    if kernel.ndim != 2 or kernel.shape[0] != kernel.shape[1] or kernel.shape[0] == 0:
        raise ValueError(f"kernel must be a non-empty square matrix, got {tuple(kernel.shape)}")
    if not torch.isfinite(kernel).all():
        raise ValueError("kernel matrix contains NaN or inf")
    if not torch.allclose(kernel, kernel.T, rtol=1e-10, atol=1e-12):
        raise ValueError("kernel matrix is not symmetric")
    return kernel


def information_gain(kernel_aa: torch.Tensor, noise_var: float) -> float:
    r""":math:`\tfrac12 \log\det(I + \sigma^{-2} K_{AA})` for the Gram matrix of a multiset.

    Example:
        >>> round(information_gain(torch.eye(2), 1.0), 6) == round(math.log(2.0), 6)
        True
    """
    noise_var = _check_noise(noise_var)
    k = _check_kernel(kernel_aa)
    m = torch.eye(k.shape[0], dtype=torch.float64) + k / noise_var
    return 0.5 * float(torch.linalg.slogdet(m).logabsdet)


def greedy_information_gain(
    kernel: torch.Tensor, noise_var: float, steps: int
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Greedy (uncertainty-sampling) information gain :math:`G_1, \dots, G_T` on a candidate set.

    Step :math:`t` picks :math:`x_t = \arg\max_x \sigma^2_{t-1}(x)` over the candidates and
    adds :math:`\tfrac12\log(1 + \sigma^2_{t-1}(x_t)/\sigma^2)`; the candidate covariance is
    then updated by the rank-one rule
    :math:`\Sigma \leftarrow \Sigma - \Sigma_{:,x}\Sigma_{x,:}/(\Sigma_{xx} + \sigma^2)`.
    Ties go to the lowest index.

    Args:
        kernel: the prior covariance of the candidates, ``(n, n)``, symmetric PSD.
        noise_var: the observation noise variance :math:`\sigma^2 > 0`.
        steps: :math:`T \ge 1`.

    Returns:
        ``(gains, picks)``: ``gains[t-1]`` is :math:`G_t` (cumulative, float64), ``picks``
        the chosen candidate indices (they may repeat).

    Example:
        >>> g, p = greedy_information_gain(torch.eye(3), 1.0, 3)
        >>> [round(v, 6) for v in g.tolist()] == [round(math.log(2) / 2 * t, 6) for t in (1, 2, 3)]
        True
    """
    noise_var = _check_noise(noise_var)
    cov = _check_kernel(kernel).clone()
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps must be an int >= 1, got {steps!r}")
    gains = torch.empty(steps, dtype=torch.float64)
    picks = torch.empty(steps, dtype=torch.long)
    total = 0.0
    for t in range(steps):
        var = cov.diagonal().clamp_min(0.0)
        j = int(torch.argmax(var))
        v = float(var[j])
        total += 0.5 * math.log1p(v / noise_var)
        gains[t], picks[t] = total, j
        col = cov[:, j].clone()
        cov -= torch.outer(col, col) / (v + noise_var)
    return gains, picks


def gamma_upper(greedy_gains: torch.Tensor) -> torch.Tensor:
    r"""The certified upper end :math:`G_T/(1-1/e) \ge \gamma_T` of a greedy estimate."""
    return torch.as_tensor(greedy_gains, dtype=torch.float64) / GREEDY_FACTOR


def linear_kernel_gamma(dim: int, steps: int, noise_var: float) -> float:
    r"""Closed form of :math:`\gamma_T` for the linear kernel :math:`k(x, y) = x^\top y`.

    Over candidates of norm at most 1, :math:`I(A) = \tfrac12\log\det(I_d + \sigma^{-2} M)`
    with :math:`M = \sum_{x\in A} x x^\top`, :math:`\mathrm{tr} M \le T`; by AM-GM on the
    eigenvalues the maximum is at :math:`M = (T/d) I_d`:

    .. math:: \gamma_T = \tfrac d2 \log\bigl(1 + \tfrac{T}{d\sigma^2}\bigr),

    attained when the candidates contain an orthonormal basis and :math:`d` divides :math:`T`
    (each basis vector :math:`T/d` times); otherwise it is an upper bound.

    Example:
        >>> round(linear_kernel_gamma(2, 4, 1.0), 6) == round(math.log(3.0), 6)
        True
    """
    noise_var = _check_noise(noise_var)
    for name, v in (("dim", dim), ("steps", steps)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name} must be an int >= 1, got {v!r}")
    return 0.5 * dim * math.log1p(steps / (dim * noise_var))


def variance_ratio_bound(
    batch_size: int, noise_var: float, *, kernel_max: float = 1.0, gamma_qm1: float | None = None
) -> float:
    r"""A bound :math:`\xi_Q` on :math:`\sigma^2_{t-1}(x)/\sigma^2_{t-1,q-1}(x)` inside a batch.

    :math:`\sigma^2_{t-1}` is the posterior at the start of the round and
    :math:`\sigma^2_{t-1,q-1}` the one that also conditions on the round's first
    :math:`q - 1 \le Q - 1` queries (their values are irrelevant). With
    :math:`\rho^2` the squared correlation between :math:`f(x)` and those observations,
    the ratio is :math:`1/(1-\rho^2) = e^{2 I(f(x); y)}`. Two bounds follow:

    * :math:`e^{2 I(f(x);y)} \le e^{2\gamma_{Q-1}}` (Desautels et al., GP-BUCB), and
    * writing :math:`y = a f(x) + g + \varepsilon` with :math:`g` independent of
      :math:`f(x)`: :math:`1/(1-\rho^2) \le 1 + \sigma_{t-1}^2(x)\|a\|^2/\sigma^2 \le
      1 + (Q-1)k_{\max}/\sigma^2`.

    Both grow with :math:`Q`; this is the multiplicative factor of the earlier regret bounds.

    Returns:
        :math:`\xi_Q = \min(1 + (Q-1)k_{\max}/\sigma^2,\ e^{2\gamma_{Q-1}})` (the second term
        only when ``gamma_qm1`` is given); 1 when :math:`Q = 1`.

    Example:
        >>> variance_ratio_bound(1, 0.01), variance_ratio_bound(3, 0.5)
        (1.0, 5.0)
    """
    noise_var = _check_noise(noise_var)
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be an int >= 1, got {batch_size!r}")
    if not kernel_max > 0:
        raise ValueError(f"kernel_max must be positive, got {kernel_max!r}")
    xi = 1.0 + (batch_size - 1) * kernel_max / noise_var
    if gamma_qm1 is not None:
        if not gamma_qm1 >= 0:
            raise ValueError(f"gamma_qm1 must be >= 0, got {gamma_qm1!r}")
        xi = min(xi, math.exp(2.0 * gamma_qm1))
    return xi
