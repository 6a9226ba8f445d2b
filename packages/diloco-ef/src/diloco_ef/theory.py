r"""Exact expected-risk recursions for SGD, LA, SLA and DiLoCo on Gaussian linear regression.

Model: :math:`y = \langle w^\star, x\rangle + \xi`, :math:`x \sim N(0, H)`, :math:`H =
\mathrm{diag}(\lambda)`, :math:`\xi \sim N(0, \sigma^2)` independent. Everything is written in
the error :math:`e = w - w^\star`; the population risk of :math:`w` is

.. math:: R(w) = \tfrac12 \mathbb{E}(\langle w, x\rangle - y)^2
          = \tfrac12 \sum_i \lambda_i e_i^2 + \tfrac{\sigma^2}{2}.

A stochastic gradient on a fresh batch of :math:`B` samples is :math:`g = \hat H e - \hat\xi`
with :math:`\hat H = \frac1B\sum_b x_b x_b^\top`, :math:`\hat\xi = \frac1B\sum_b x_b\xi_b`.
Write :math:`g = He + \zeta`. Conditionally on the current state :math:`\zeta` has mean zero,
so it is uncorrelated with every linear function of the state, and (Gaussian fourth moment
:math:`\mathbb{E}[x x^\top A x x^\top] = 2HAH + \mathrm{tr}(AH)H`)

.. math:: \mathbb{E}[\zeta_i^2] = \frac1B\Big(\lambda_i^2\,\mathbb{E}e_i^2
          + \lambda_i\big(\textstyle\sum_j \lambda_j\,\mathbb{E}e_j^2 + \sigma^2\big)\Big).

Every algorithm here is a linear map of its state plus such :math:`\zeta` terms, and the maps
are diagonal in the eigenbasis, so the second moments *per eigendirection* close on
themselves: direction :math:`i` needs only its own :math:`K\times K` moment matrix
:math:`S_i = \mathbb{E}[z_i z_i^\top]` of the state coordinates :math:`z_i`, and the directions
couple only through the scalar :math:`\sum_j\lambda_j\,\mathbb{E}e_j^2` (twice the excess
risk of a worker's iterate). Cross-direction moments never enter.

The state of :func:`diloco_risk` per direction is
:math:`z = (e, b, \bar e, \bar v, e_1, v_1)`: the outer error, the outer momentum buffer, the
workers' mean inner error and mean inner heavy-ball buffer, and worker 1's own error and
buffer (inner buffers persist across rounds, as in :class:`~diloco_ef.algorithms.DiLoCo`).
The workers are exchangeable (same start, same law), so worker 1 stands for every worker's
marginal and :math:`K = 6` for any M. An inner step of a worker is
:math:`v \leftarrow \mu_l v + \lambda e + \zeta`, :math:`e \leftarrow e - \eta v`; the mean
gets :math:`\bar\zeta = \frac1M\sum_m\zeta_m`, and since the workers draw independent batches,
:math:`\mathrm{Var}\,\bar\zeta = \mathrm{Cov}(\bar\zeta,\zeta_1) = s/M` with
:math:`s = \mathbb{E}\zeta_1^2` computed from :math:`\mathbb{E}e_1^2`. So
:math:`S \leftarrow A S A^\top + s\,N` with
:math:`N = (\bar c\bar c^\top + \bar c c_1^\top + c_1\bar c^\top)/M + c_1c_1^\top`,
:math:`\bar c = -\eta\,\epsilon_{\bar e} + \epsilon_{\bar v}`,
:math:`c_1 = -\eta\,\epsilon_{e_1} + \epsilon_{v_1}`. The outer step is deterministic (torch
SGD conventions): :math:`\Delta = e - \bar e`, :math:`b \leftarrow \mu b + \Delta`,
:math:`p = \Delta + \mu b` (Nesterov) or :math:`p = b`, :math:`e \leftarrow e - \gamma p`, then
:math:`\bar e, e_1 \leftarrow e`; so :math:`S \leftarrow A_{out} S A_{out}^\top`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor

__all__ = [
    "diloco_risk",
    "la_risk",
    "power_law_spectrum",
    "risk_of_error",
    "sgd_noise_variance",
    "sgd_risk",
    "sla_risk",
]

_DT = torch.float64


def power_law_spectrum(d: int, a: float) -> Tensor:
    r"""The spectrum :math:`\lambda_i = i^{-a}`, :math:`i = 1..d`, in float64.

    Args:
        d: dimension (>= 1).
        a: decay exponent (>= 0).

    Returns:
        A ``(d,)`` float64 tensor.

    Example:
        >>> power_law_spectrum(3, 1.0)
        tensor([1.0000, 0.5000, 0.3333], dtype=torch.float64)
    """
    if isinstance(d, bool) or not isinstance(d, int) or d < 1:
        raise ValueError(f"d must be an integer >= 1, got {d!r}")
    if not a >= 0:
        raise ValueError(f"a must be >= 0, got {a!r}")
    return torch.arange(1, d + 1, dtype=_DT).pow(-float(a))


def risk_of_error(spectrum: Tensor, err_sq: Tensor, sigma: float) -> Tensor:
    r"""Expected risk :math:`\frac12\sum_i\lambda_i\,\mathbb{E}e_i^2 + \frac{\sigma^2}{2}`.

    Args:
        spectrum: ``(d,)`` eigenvalues :math:`\lambda`.
        err_sq: ``(..., d)`` second moments :math:`\mathbb{E}e_i^2` (or squared errors of one
            run, giving that run's population risk).
        sigma: label-noise standard deviation.

    Returns:
        A tensor of shape ``err_sq.shape[:-1]``.

    Example:
        >>> risk_of_error(torch.tensor([1.0, 0.5]), torch.tensor([2.0, 2.0]), 1.0)
        tensor(2.)
    """
    return 0.5 * (err_sq * spectrum).sum(-1) + 0.5 * sigma**2


def sgd_noise_variance(spectrum: Tensor, err_sq: Tensor, sigma: float, batch: int) -> Tensor:
    r"""Per-direction variance of the gradient noise :math:`\zeta = g - He`.

    .. math:: \mathbb{E}\zeta_i^2 = \frac1B\Big(\lambda_i^2\,\mathbb{E}e_i^2 +
              \lambda_i\big(\textstyle\sum_j\lambda_j\,\mathbb{E}e_j^2 + \sigma^2\big)\Big)

    Args:
        spectrum: ``(d,)`` eigenvalues.
        err_sq: ``(..., d)`` second moments of the iterate's error.
        sigma: label-noise standard deviation.
        batch: batch size B >= 1.

    Returns:
        ``(..., d)`` variances.

    Example:
        >>> sgd_noise_variance(torch.tensor([1.0]), torch.tensor([1.0]), 0.0, 1)
        tensor([2.])
    """
    coupling = (err_sq * spectrum).sum(-1, keepdim=True) + sigma**2
    return (spectrum**2 * err_sq + spectrum * coupling) / batch


def _check(
    spectrum: Tensor,
    w_star_sq: Tensor,
    sigma: float,
    batch: int,
    lr: float,
    ints: Sequence[tuple[str, int]],
) -> tuple[Tensor, Tensor]:
    lam = torch.as_tensor(spectrum, dtype=_DT)
    w2 = torch.as_tensor(w_star_sq, dtype=_DT)
    if lam.ndim != 1 or lam.numel() == 0:
        raise ValueError(f"spectrum must be a non-empty 1-d tensor, got shape {tuple(lam.shape)}")
    if bool((lam < 0).any()) or not bool(torch.isfinite(lam).all()):
        raise ValueError("spectrum must hold finite eigenvalues >= 0")
    if w2.shape != lam.shape:
        raise ValueError(f"w_star_sq has shape {tuple(w2.shape)}, the spectrum {tuple(lam.shape)}")
    if bool((w2 < 0).any()):
        raise ValueError("w_star_sq holds second moments, which must be >= 0")
    if not sigma >= 0:
        raise ValueError(f"sigma must be >= 0, got {sigma!r}")
    if not (isinstance(lr, int | float) and lr > 0 and math.isfinite(lr)):
        raise ValueError(f"the step size must be a positive number, got {lr!r}")
    for name, v in (("batch", batch), *ints):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {v!r}")
    return lam, w2


def sgd_risk(
    spectrum: Tensor, w_star_sq: Tensor, sigma: float, *, batch: int, lr: float, steps: int
) -> Tensor:
    r"""Expected risk of minibatch SGD from :math:`w_0 = 0`, after 0..``steps`` steps.

    With :math:`d_i = \mathbb{E}e_i^2`, one step :math:`e \leftarrow e - \eta g` gives

    .. math:: d_i \leftarrow \big(1 - 2\eta\lambda_i + \eta^2\lambda_i^2(1 + \tfrac1B)\big) d_i
              + \frac{\eta^2\lambda_i}{B}\Big(\sum_j\lambda_j d_j + \sigma^2\Big).

    Args:
        spectrum: ``(d,)`` eigenvalues :math:`\lambda_i` of :math:`H`.
        w_star_sq: ``(d,)`` second moments :math:`\mathbb{E}(w^\star_i)^2` (pass ``w_star**2``
            for a fixed target); the start is :math:`e_0 = -w^\star`.
        sigma: label-noise standard deviation.
        batch: B >= 1.
        lr: step size :math:`\eta > 0`.
        steps: number of steps (>= 1).

    Returns:
        ``(steps + 1,)`` float64 risks, entry 0 at the start.

    Example:
        >>> r = sgd_risk(torch.ones(1), torch.ones(1), 0.0, batch=1, lr=0.5, steps=1)
        >>> r  # d: 1 -> (1 - 1 + 0.5) * 1 + 0.25 * 1 = 0.75
        tensor([0.5000, 0.3750], dtype=torch.float64)
    """
    lam, d2 = _check(spectrum, w_star_sq, sigma, batch, lr, [("steps", steps)])
    out = [risk_of_error(lam, d2, sigma)]
    contraction = 1 - 2 * lr * lam + lr**2 * lam**2 * (1 + 1 / batch)
    for _ in range(steps):
        coupling = (lam * d2).sum() + sigma**2
        d2 = contraction * d2 + lr**2 * lam * coupling / batch
        out.append(risk_of_error(lam, d2, sigma))
    return torch.stack(out)


# Per-direction state z = (e, b, e_bar, v_bar, e_1, v_1): outer error, outer buffer, the
# workers' mean error and mean inner buffer, and worker 1's own error and buffer.
_E, _B, _EBAR, _VBAR, _E1, _V1 = range(6)
_K = 6


def _inner_matrix(lam: Tensor, lr: float, momentum: float) -> Tensor:
    """``(d, 6, 6)``: one inner heavy-ball step of every worker, noise excluded."""
    a = torch.eye(_K, dtype=_DT).repeat(lam.numel(), 1, 1)
    for e, v in ((_EBAR, _VBAR), (_E1, _V1)):
        # v' = mu v + lam e;  e' = e - lr v' = (1 - lr lam) e - lr mu v
        a[:, v, v] = momentum
        a[:, v, e] = lam
        a[:, e, e] = 1 - lr * lam
        a[:, e, v] = -lr * momentum
    return a


def _noise_shape(lr: float, workers: int) -> Tensor:
    r"""``(6, 6)``: the noise covariance per unit :math:`\mathbb{E}\zeta_m^2`.

    Worker 1's noise :math:`\zeta_1` enters :math:`(e_1, v_1)` as :math:`(-\eta, 1)\zeta_1`; the
    mean noise :math:`\bar\zeta = \frac1M\sum_m\zeta_m` enters :math:`(\bar e, \bar v)` the same
    way, with :math:`\mathrm{Var}\,\bar\zeta = \mathrm{Cov}(\bar\zeta, \zeta_1) = s/M`.
    """
    c_bar = torch.zeros(_K, dtype=_DT)
    c_bar[_EBAR], c_bar[_VBAR] = -lr, 1.0
    c_one = torch.zeros(_K, dtype=_DT)
    c_one[_E1], c_one[_V1] = -lr, 1.0
    cross = torch.outer(c_bar, c_one)
    return (torch.outer(c_bar, c_bar) + cross + cross.T) / workers + torch.outer(c_one, c_one)


def _outer_matrix(outer_lr: float, momentum: float, nesterov: bool) -> Tensor:
    """``(6, 6)``: pseudo-gradient, outer momentum step, and the broadcast to the workers."""
    delta = torch.zeros(_K, dtype=_DT)
    delta[_E], delta[_EBAR] = 1.0, -1.0
    b_old = torch.zeros(_K, dtype=_DT)
    b_old[_B] = 1.0
    b_new = momentum * b_old + delta
    step = delta + momentum * b_new if nesterov else b_new
    e_new = torch.zeros(_K, dtype=_DT)
    e_new[_E] = 1.0
    e_new = e_new - outer_lr * step
    a = torch.eye(_K, dtype=_DT)
    a[_B] = b_new
    for row in (_E, _EBAR, _E1):
        a[row] = e_new
    return a


def diloco_risk(
    spectrum: Tensor,
    w_star_sq: Tensor,
    sigma: float,
    *,
    batch: int,
    inner_lr: float,
    inner_steps: int,
    outer_lr: float,
    rounds: int,
    workers: int = 1,
    outer_momentum: float = 0.0,
    nesterov: bool = False,
    inner_momentum: float = 0.0,
) -> Tensor:
    r"""Expected risk of the outer iterate of DiLoCo (M workers) at rounds 0..``rounds``.

    Each round every worker runs ``inner_steps`` SGD steps (heavy ball with
    ``inner_momentum``, buffer kept across rounds) on its own fresh batches of size B from the
    outer iterate; the outer SGD step (``outer_lr`` :math:`\gamma`, optional momentum, Nesterov
    or heavy ball, torch conventions) uses the averaged pseudo-gradient. ``workers=1`` is LA,
    plus momenta SLA. The per-direction moment matrices of
    :math:`z = (e, b, e_{1..M}, v_{1..M})` evolve exactly as in the module docstring.

    Args:
        spectrum: ``(d,)`` eigenvalues of H.
        w_star_sq: ``(d,)`` second moments of :math:`w^\star` (start :math:`w_0 = 0`).
        sigma: label-noise standard deviation.
        batch: per-worker batch B >= 1.
        inner_lr: :math:`\eta > 0`.
        inner_steps: H >= 1.
        outer_lr: :math:`\gamma > 0`.
        rounds: T >= 1.
        workers: M >= 1.
        outer_momentum: :math:`\mu \in [0, 1)`.
        nesterov: Nesterov form of the outer momentum.
        inner_momentum: :math:`\mu_l \in [0, 1)`.

    Returns:
        ``(rounds + 1,)`` float64 expected risks of the outer iterate.

    Example:
        >>> lam, w2 = torch.ones(1), torch.ones(1)
        >>> r = diloco_risk(lam, w2, 0.0, batch=1, inner_lr=0.5, inner_steps=1, outer_lr=1.0,
        ...                 rounds=1)
        >>> torch.allclose(r, sgd_risk(lam, w2, 0.0, batch=1, lr=0.5, steps=1))
        True
    """
    lam, w2 = _check(
        spectrum,
        w_star_sq,
        sigma,
        batch,
        inner_lr,
        [("inner_steps", inner_steps), ("rounds", rounds), ("workers", workers)],
    )
    if not (isinstance(outer_lr, int | float) and outer_lr > 0 and math.isfinite(outer_lr)):
        raise ValueError(f"outer_lr must be a positive number, got {outer_lr!r}")
    for name, mu in (("outer_momentum", outer_momentum), ("inner_momentum", inner_momentum)):
        if not 0 <= mu < 1:
            raise ValueError(f"{name} must be in [0, 1), got {mu!r}")
    u = torch.zeros(_K, dtype=_DT)
    u[[_E, _EBAR, _E1]] = 1.0  # every worker starts at the outer iterate, buffers at 0
    s = w2[:, None, None] * torch.outer(u, u)  # (d, 6, 6)
    a_in = _inner_matrix(lam, inner_lr, inner_momentum)
    a_in_t = a_in.transpose(1, 2)
    a_out = _outer_matrix(outer_lr, outer_momentum, nesterov)
    shape = _noise_shape(inner_lr, workers)
    out = [risk_of_error(lam, s[:, _E, _E], sigma)]
    for _ in range(rounds):
        for _ in range(inner_steps):
            var = sgd_noise_variance(lam, s[:, _E1, _E1], sigma, batch)  # (d,)
            s = a_in @ s @ a_in_t + var[:, None, None] * shape
        s = a_out @ s @ a_out.T
        out.append(risk_of_error(lam, s[:, _E, _E], sigma))
    return torch.stack(out)


def la_risk(
    spectrum: Tensor,
    w_star_sq: Tensor,
    sigma: float,
    *,
    batch: int,
    inner_lr: float,
    inner_steps: int,
    outer_lr: float,
    rounds: int,
) -> Tensor:
    r"""Expected risk of LA: :math:`x \leftarrow x + \gamma(x^{(H)} - x)` after H SGD steps.

    Equivalent to :func:`diloco_risk` with one worker and no momentum. Per direction, with
    :math:`p_i = (1-\eta\lambda_i)^H` and :math:`q_i` the SGD recursion run H steps from
    :math:`d_i`, one round gives :math:`d_i \leftarrow (1-\gamma)^2 d_i + 2\gamma(1-\gamma)p_i d_i
    + \gamma^2 q_i` (the inner noise is uncorrelated with the start).

    Args:
        spectrum, w_star_sq, sigma, batch: as in :func:`sgd_risk`.
        inner_lr: :math:`\eta > 0`.
        inner_steps: H >= 1.
        outer_lr: :math:`\gamma > 0`.
        rounds: T >= 1.

    Returns:
        ``(rounds + 1,)`` float64 risks.

    Example:
        >>> la_risk(torch.ones(1), torch.ones(1), 0.0, batch=1, inner_lr=0.5, inner_steps=1,
        ...         outer_lr=0.5, rounds=1)  # (0.25 + 0.25 + 0.25 * 0.75) / 2
        tensor([0.5000, 0.3438], dtype=torch.float64)
    """
    return diloco_risk(
        spectrum,
        w_star_sq,
        sigma,
        batch=batch,
        inner_lr=inner_lr,
        inner_steps=inner_steps,
        outer_lr=outer_lr,
        rounds=rounds,
    )


def sla_risk(
    spectrum: Tensor,
    w_star_sq: Tensor,
    sigma: float,
    *,
    batch: int,
    inner_lr: float,
    inner_steps: int,
    outer_lr: float,
    outer_momentum: float,
    rounds: int,
    inner_momentum: float = 0.0,
    nesterov: bool = True,
) -> Tensor:
    r"""Expected risk of SLA: LA with outer (default Nesterov) momentum, optional inner momentum.

    Args:
        spectrum, w_star_sq, sigma, batch, inner_lr, inner_steps, outer_lr, rounds: as in
            :func:`la_risk`.
        outer_momentum: :math:`\mu \in [0, 1)`.
        inner_momentum: heavy-ball momentum of the inner SGD, :math:`[0, 1)`.
        nesterov: Nesterov (default) or heavy-ball outer momentum.

    Returns:
        ``(rounds + 1,)`` float64 risks.

    Example:
        >>> r = sla_risk(torch.ones(2), torch.ones(2), 0.1, batch=4, inner_lr=0.1,
        ...              inner_steps=4, outer_lr=0.5, outer_momentum=0.5, rounds=20)
        >>> bool(r[-1] < r[0])
        True
    """
    return diloco_risk(
        spectrum,
        w_star_sq,
        sigma,
        batch=batch,
        inner_lr=inner_lr,
        inner_steps=inner_steps,
        outer_lr=outer_lr,
        rounds=rounds,
        outer_momentum=outer_momentum,
        nesterov=nesterov,
        inner_momentum=inner_momentum,
    )
