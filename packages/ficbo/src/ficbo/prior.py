r"""The structured feedback prior: latent objectives and unreliable side feedback.

A task is an objective :math:`f` on :math:`[0,1]^d` and :math:`S` feedback sources. Everything
is drawn by pure, seeded, batched functions (one generator in, tensors out).

**Objective.** A random-Fourier-feature draw of a zero-mean GP with the RBF kernel
:math:`k(x,x') = \exp(-\|x-x'\|^2 / (2\ell^2))`:

.. math:: f(x) = \sqrt{2/M}\sum_{m=1}^M w_m \cos(\omega_m^\top x / \ell + b_m),\quad
          w_m \sim N(0,1),\ \omega_m \sim N(0, I_d),\ b_m \sim U[0, 2\pi].

For every :math:`M`, :math:`E[f(x)f(x')] = E_\omega[\cos(\omega^\top(x-x')/\ell)] = k(x,x')`
(the characteristic function of a Gaussian), so the covariance is exact in expectation and the
marginal variance is 1.

**Source s.** Relevance :math:`\rho_s \in [-1, 1]`, an independent GP draw :math:`h_s` with the
same kernel, and

.. math:: g_s = \rho_s f + \sqrt{1-\rho_s^2}\,h_s, \qquad
          s_s(x) = c_s\,\phi_{a_s}(g_s(x)) + \beta_s + \sigma_s(x)\,\varepsilon,

so :math:`g_s` is again a unit-variance GP with :math:`\mathrm{corr}(f(x), g_s(x)) = \rho_s`
(informative near 1, useless at 0, adversarial near -1). Distortion: the strictly increasing
warp :math:`\phi_a(z) = (e^{az}-1)/a` (:math:`\phi_0 = \mathrm{id}`), scale :math:`c_s > 0`,
bias :math:`\beta_s`, and input-dependent noise :math:`\sigma_s(x) = \sigma_s (1/2 + \bar x)`
(:math:`\bar x` the mean coordinate). Access: each point is scored by source :math:`s` with
probability :math:`p_s`; unscored points carry ``NaN``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

__all__ = [
    "FeedbackTasks",
    "evaluate",
    "rbf_kernel",
    "sample_tasks",
    "sample_training_batch",
    "standardize_feedback",
    "warp",
]


@dataclass
class FeedbackTasks:
    """Parameters of a batch of ``B`` tasks, each with ``S`` sources (float64 tensors).

    Attributes:
        omega: ``(B, S+1, M, d)`` feature frequencies; latent 0 is the objective, latent
            ``s+1`` the independent part :math:`h_s` of source ``s``.
        phase: ``(B, S+1, M)`` feature phases :math:`b_m`.
        weight: ``(B, S+1, M)`` feature weights :math:`w_m`.
        lengthscale: ``(B,)``.
        rho: ``(B, S)`` relevance :math:`\\rho_s`.
        warp: ``(B, S)`` warp parameter :math:`a_s`.
        scale: ``(B, S)`` :math:`c_s > 0`.
        bias: ``(B, S)`` :math:`\\beta_s`.
        noise: ``(B, S)`` noise level :math:`\\sigma_s \\ge 0`.
        access: ``(B, S)`` probability that a point is scored.
    """

    omega: torch.Tensor
    phase: torch.Tensor
    weight: torch.Tensor
    lengthscale: torch.Tensor
    rho: torch.Tensor
    warp: torch.Tensor
    scale: torch.Tensor
    bias: torch.Tensor
    noise: torch.Tensor
    access: torch.Tensor

    @property
    def n_sources(self) -> int:
        return self.rho.shape[1]

    @property
    def dim(self) -> int:
        return self.omega.shape[-1]

    def __len__(self) -> int:
        return self.rho.shape[0]


def rbf_kernel(x1: torch.Tensor, x2: torch.Tensor, lengthscale: float) -> torch.Tensor:
    r""":math:`\exp(-\|x_1-x_2\|^2/(2\ell^2))` for rows ``(n, d)`` x ``(m, d)`` -> ``(n, m)``."""
    d2 = (x1[:, None, :] - x2[None, :, :]).pow(2).sum(-1)
    return torch.exp(-d2 / (2 * lengthscale**2))


def warp(z: torch.Tensor, a: torch.Tensor | float) -> torch.Tensor:
    r"""The monotone warp :math:`\phi_a(z) = (e^{az}-1)/a`, :math:`\phi_0(z) = z`.

    Strictly increasing for every real ``a`` (derivative :math:`e^{az} > 0`).

    Example:
        >>> warp(torch.tensor([0.0, 1.0]), 0.0).tolist()
        [0.0, 1.0]
    """
    a = torch.as_tensor(a, dtype=z.dtype)
    small = a.abs() < 1e-8
    safe = torch.where(small, torch.ones_like(a), a)
    return torch.where(small, z, torch.expm1(safe * z) / safe)


def _check_range(name: str, t: torch.Tensor, lo: float, hi: float) -> None:
    if torch.isnan(t).any() or (t < lo).any() or (t > hi).any():
        raise ValueError(f"{name} must lie in [{lo}, {hi}], got {t.flatten()[:8].tolist()}")


def _fill(value, shape: tuple[int, ...], draw) -> torch.Tensor:
    if value is None:
        return draw()
    return torch.as_tensor(value, dtype=torch.float64).expand(shape).clone()


def sample_tasks(
    n_tasks: int,
    dim: int,
    n_sources: int,
    *,
    generator: torch.Generator,
    n_features: int = 128,
    lengthscale: float | tuple[float, float] = (0.1, 0.4),
    rho: float | torch.Tensor | None = None,
    warp_param: float | torch.Tensor | None = None,
    noise: float | torch.Tensor | None = None,
    access: float | torch.Tensor | None = None,
) -> FeedbackTasks:
    r"""Draw ``n_tasks`` tasks from the feedback prior.

    Unset source parameters are drawn: :math:`\rho \sim U[-1, 1]`, :math:`a \sim U[-1, 1]`,
    :math:`\log c \sim U[\log 0.2, \log 5]`, :math:`\beta \sim N(0, 1)`,
    :math:`\sigma \sim U[0, 0.5]`, :math:`p \sim U[0.5, 1]`. Given values (a scalar or a
    tensor broadcastable to ``(n_tasks, n_sources)``) fix them, e.g. ``rho=0.0`` for useless
    feedback. ``lengthscale`` is a value or a log-uniform range.

    Args:
        n_tasks: batch size ``B >= 1``.
        dim: input dimension ``d >= 1``.
        n_sources: ``S >= 0``.
        generator: the only source of randomness.
        n_features: random features ``M`` per latent function.

    Returns:
        :class:`FeedbackTasks`.
    """
    for name, v, lo in (("n_tasks", n_tasks, 1), ("dim", dim, 1), ("n_sources", n_sources, 0)):
        if isinstance(v, bool) or not isinstance(v, int) or v < lo:
            raise ValueError(f"{name} must be an int >= {lo}, got {v!r}")
    if n_features < 1:
        raise ValueError(f"n_features must be >= 1, got {n_features!r}")
    g, f64 = generator, torch.float64
    b, s, m = n_tasks, n_sources, n_features
    omega = torch.randn(b, s + 1, m, dim, generator=g, dtype=f64)
    phase = 2 * math.pi * torch.rand(b, s + 1, m, generator=g, dtype=f64)
    weight = torch.randn(b, s + 1, m, generator=g, dtype=f64)
    if isinstance(lengthscale, tuple):
        lo, hi = math.log(lengthscale[0]), math.log(lengthscale[1])
        ell = torch.exp(lo + (hi - lo) * torch.rand(b, generator=g, dtype=f64))
    else:
        if lengthscale <= 0:
            raise ValueError(f"lengthscale must be > 0, got {lengthscale!r}")
        ell = torch.full((b,), float(lengthscale), dtype=f64)
    shape = (b, s)

    def unif(lo: float, hi: float):
        return lambda: lo + (hi - lo) * torch.rand(shape, generator=g, dtype=f64)

    rho_t = _fill(rho, shape, unif(-1.0, 1.0))
    warp_t = _fill(warp_param, shape, unif(-1.0, 1.0))
    scale = torch.exp(unif(math.log(0.2), math.log(5.0))())
    bias = torch.randn(shape, generator=g, dtype=f64)
    noise_t = _fill(noise, shape, unif(0.0, 0.5))
    access_t = _fill(access, shape, unif(0.5, 1.0))
    _check_range("rho", rho_t, -1.0, 1.0)
    _check_range("noise", noise_t, 0.0, math.inf)
    _check_range("access", access_t, 0.0, 1.0)
    return FeedbackTasks(omega, phase, weight, ell, rho_t, warp_t, scale, bias, noise_t, access_t)


def _latents(tasks: FeedbackTasks, x: torch.Tensor) -> torch.Tensor:
    """All ``S+1`` unit-variance GP draws at ``x`` ``(B, N, d)`` -> ``(B, S+1, N)``."""
    proj = torch.einsum("bnd,bsmd->bsnm", x, tasks.omega) / tasks.lengthscale[:, None, None, None]
    feats = torch.cos(proj + tasks.phase[:, :, None, :])
    m = tasks.omega.shape[2]
    return math.sqrt(2.0 / m) * torch.einsum("bsnm,bsm->bsn", feats, tasks.weight)


def evaluate(
    tasks: FeedbackTasks, x: torch.Tensor, *, generator: torch.Generator | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Objective and feedback of every task at its points.

    Args:
        tasks: ``B`` tasks of dimension ``d`` with ``S`` sources.
        x: points, ``(B, N, d)`` in :math:`[0,1]^d`.
        generator: draws the feedback noise and the access pattern; ``None`` gives noise-free
            feedback on every point (the sources' clean values).

    Returns:
        ``f`` of shape ``(B, N)`` and feedback ``(B, S, N)`` (``NaN`` where not scored).
    """
    if x.dim() != 3 or x.shape[0] != len(tasks) or x.shape[2] != tasks.dim:
        raise ValueError(f"x must have shape ({len(tasks)}, N, {tasks.dim}), got {tuple(x.shape)}")
    x = x.to(torch.float64)
    lat = _latents(tasks, x)
    f = lat[:, 0]
    if tasks.n_sources == 0:
        return f, lat[:, 1:]
    rho = tasks.rho[..., None]
    gs = rho * f[:, None, :] + torch.sqrt((1 - rho**2).clamp_min(0)) * lat[:, 1:]
    fb = tasks.scale[..., None] * warp(gs, tasks.warp[..., None]) + tasks.bias[..., None]
    if generator is not None:
        sigma = tasks.noise[..., None] * (0.5 + x.mean(-1))[:, None, :]
        fb = fb + sigma * torch.randn(fb.shape, generator=generator, dtype=fb.dtype)
        seen = torch.rand(fb.shape, generator=generator, dtype=fb.dtype) < tasks.access[..., None]
        fb = torch.where(seen, fb, torch.full_like(fb, math.nan))
    return f, fb


def standardize_feedback(fb: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    r"""Per task and source: :math:`(s - \text{mean}) / \text{std}` over the scored points.

    The prior's scale and bias are unidentifiable from feedback alone, so the model sees
    feedback in this form. ``NaN`` (unscored) entries stay ``NaN``; a source with fewer than
    two scored points becomes all ``NaN``.

    Args:
        fb: ``(..., N)``.

    Returns:
        Same shape.
    """
    ok = ~torch.isnan(fb)
    n = ok.sum(-1, keepdim=True)
    z = torch.where(ok, fb, torch.zeros_like(fb))
    mean = z.sum(-1, keepdim=True) / n.clamp_min(1)
    var = torch.where(ok, (fb - mean) ** 2, torch.zeros_like(fb)).sum(-1, keepdim=True)
    std = torch.sqrt(var / (n - 1).clamp_min(1)) + eps
    out = (fb - mean) / std
    return torch.where(ok & (n >= 2), out, torch.full_like(fb, math.nan))


def sample_training_batch(
    batch_size: int,
    n_points: int,
    n_history: int,
    *,
    dim: int,
    max_dim: int,
    n_sources: int,
    generator: torch.Generator,
    **prior_kwargs,
) -> dict[str, torch.Tensor]:
    """One pretraining batch: history, candidates, their standardized feedback, targets.

    Points are uniform in ``[0,1]^dim`` and zero-padded to ``max_dim`` coordinates.

    Returns:
        ``x_hist (B, H, D)``, ``y_hist (B, H)``, ``fb_hist (B, S, H)``, ``x_cand (B, C, D)``,
        ``fb_cand (B, S, C)``, ``y_cand (B, C)`` in float32 with ``H = n_history``,
        ``C = n_points - n_history``, ``D = max_dim``.
    """
    if not 1 <= n_history < n_points:
        raise ValueError(f"need 1 <= n_history < n_points, got {n_history}, {n_points}")
    if dim > max_dim:
        raise ValueError(f"dim {dim} exceeds max_dim {max_dim}")
    tasks = sample_tasks(batch_size, dim, n_sources, generator=generator, **prior_kwargs)
    x = torch.rand(batch_size, n_points, dim, generator=generator, dtype=torch.float64)
    f, fb = evaluate(tasks, x, generator=generator)
    fb = standardize_feedback(fb)
    xp = torch.nn.functional.pad(x, (0, max_dim - dim))
    h = n_history
    out = {
        "x_hist": xp[:, :h],
        "y_hist": f[:, :h],
        "fb_hist": fb[..., :h],
        "x_cand": xp[:, h:],
        "fb_cand": fb[..., h:],
        "y_cand": f[:, h:],
    }
    return {k: v.float() for k, v in out.items()}
