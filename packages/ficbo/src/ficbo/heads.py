r"""Predictive distributions of the model's output heads: Gaussian and bar (Riemann).

Both give, per candidate, the moments, the CDF, the negative log-likelihood used in
pretraining, expected improvement and a seeded draw, so the acquisitions never need to know
which head a model has.

**Bar (Riemann) distribution**, as in PFNs: fixed borders :math:`b_0 < \dots < b_K`, logits
:math:`\ell_k` per candidate, :math:`p = \mathrm{softmax}(\ell)`, density :math:`p_k / w_k` on
bar :math:`k` (width :math:`w_k = b_{k+1} - b_k`), so the density is piecewise constant and
integrates to :math:`\sum_k p_k = 1`. With :math:`c_k` the bar centres:

.. math::
    E[Y] = \sum_k p_k c_k, \qquad E[Y^2] = \sum_k p_k (c_k^2 + w_k^2/12),

    \mathrm{EI}(y^*) = E[(Y-y^*)_+] = \sum_k p_k \begin{cases}
        c_k - y^* & y^* \le b_k \\ (b_{k+1}-y^*)^2 / (2 w_k) & b_k < y^* < b_{k+1} \\
        0 & y^* \ge b_{k+1}. \end{cases}

Borders (:func:`bar_borders`): the objective of the prior is marginally :math:`N(0, 1)`, so the
borders are its quantiles at :math:`\varepsilon + (1-2\varepsilon)k/K`, equal prior mass per
bar, support :math:`[\Phi^{-1}(\varepsilon), \Phi^{-1}(1-\varepsilon)]` (:math:`\pm 3.29` at the
default :math:`\varepsilon = 5\cdot10^{-4}`). The support is finite (no half-normal tails as in
PFNs): a target outside it is clamped to the edge in the likelihood, and EI is exactly 0 for an
incumbent above the top border.
"""

from __future__ import annotations

import math

import torch

__all__ = ["BarPredictive", "GaussianPredictive", "bar_borders", "expected_improvement"]


def expected_improvement(mean: torch.Tensor, std: torch.Tensor, best: torch.Tensor) -> torch.Tensor:
    """EI per candidate; ``best`` broadcasts against ``mean`` (e.g. shape ``(B, 1)``)."""
    if (std <= 0).any():
        raise ValueError("std must be positive")
    z = (mean - best) / std
    cdf = 0.5 * torch.erfc(-z / math.sqrt(2))
    pdf = torch.exp(-0.5 * z**2) / math.sqrt(2 * math.pi)
    return (mean - best) * cdf + std * pdf


def bar_borders(n_bars: int, eps: float = 5e-4) -> torch.Tensor:
    """``n_bars + 1`` increasing borders, standard-normal quantiles of equal mass (float64)."""
    if isinstance(n_bars, bool) or not isinstance(n_bars, int) or n_bars < 2:
        raise ValueError(f"n_bars must be an int >= 2, got {n_bars!r}")
    if not 0 < eps < 0.5:
        raise ValueError(f"eps must lie in (0, 0.5), got {eps!r}")
    q = eps + (1 - 2 * eps) * torch.arange(n_bars + 1, dtype=torch.float64) / n_bars
    return torch.special.ndtri(q)


class GaussianPredictive:
    """Independent :math:`N(\\mu_c, \\sigma_c^2)` per candidate."""

    def __init__(self, mean: torch.Tensor, std: torch.Tensor):
        self.mean, self.std = mean, std

    def to(self, *args, **kwargs) -> GaussianPredictive:
        """Cast and/or move, with :meth:`torch.Tensor.to`'s arguments (a dtype, a device)."""
        return GaussianPredictive(self.mean.to(*args, **kwargs), self.std.to(*args, **kwargs))

    def nll(self, y: torch.Tensor) -> torch.Tensor:
        """Mean negative log-likelihood of ``y`` (same shape as ``mean``)."""
        z = (y - self.mean) / self.std
        return (torch.log(self.std) + 0.5 * z**2).mean() + 0.5 * math.log(2 * math.pi)

    def cdf(self, y: torch.Tensor) -> torch.Tensor:
        return 0.5 * torch.erfc(-(y - self.mean) / (self.std * math.sqrt(2)))

    def ei(self, best: torch.Tensor) -> torch.Tensor:
        return expected_improvement(self.mean, self.std, best)

    def sample(self, generator: torch.Generator) -> torch.Tensor:
        eps = torch.randn(self.mean.shape, generator=generator, dtype=self.mean.dtype)
        return self.mean + self.std * eps


class BarPredictive:
    """Bar (Riemann) distribution per candidate: ``logits (..., K)`` on ``borders (K+1,)``."""

    def __init__(self, logits: torch.Tensor, borders: torch.Tensor):
        if logits.shape[-1] + 1 != borders.shape[0]:
            raise ValueError(f"{logits.shape[-1]} logits need {logits.shape[-1] + 1} borders")
        self.logits = logits
        self.borders = borders.to(logits.dtype)
        self.probs = torch.softmax(logits, -1)
        self.width = self.borders[1:] - self.borders[:-1]
        self.centre = 0.5 * (self.borders[1:] + self.borders[:-1])

    def to(self, *args, **kwargs) -> BarPredictive:
        """Cast and/or move, with :meth:`torch.Tensor.to`'s arguments (a dtype, a device)."""
        logits = self.logits.to(*args, **kwargs)
        return BarPredictive(logits, self.borders.to(logits.device))

    @property
    def mean(self) -> torch.Tensor:
        return (self.probs * self.centre).sum(-1)

    @property
    def std(self) -> torch.Tensor:
        second = (self.probs * (self.centre**2 + self.width**2 / 12)).sum(-1)
        return (second - self.mean**2).clamp_min(0).sqrt()

    def _bar(self, y: torch.Tensor) -> torch.Tensor:
        """Index of the bar holding ``y`` (clamped into the support)."""
        inner = self.borders[1:-1].contiguous()
        return torch.bucketize(y.to(self.borders.dtype).contiguous(), inner, right=True)

    def nll(self, y: torch.Tensor) -> torch.Tensor:
        """Mean of :math:`-\\log p_k + \\log w_k` for the bar ``k`` holding each ``y``."""
        k = self._bar(y)
        logp = torch.log_softmax(self.logits, -1).gather(-1, k[..., None])[..., 0]
        return (torch.log(self.width[k]) - logp).mean()

    def cdf(self, y: torch.Tensor) -> torch.Tensor:
        """:math:`P(Y \\le y)`: full bars below ``y`` plus the covered part of its own bar."""
        y = y.to(self.borders.dtype)
        frac = ((y[..., None] - self.borders[:-1]) / self.width).clamp(0, 1)
        return (self.probs * frac).sum(-1)

    def ei(self, best: torch.Tensor) -> torch.Tensor:
        """:math:`E[(Y - y^*)_+]`, exact for the piecewise-constant density (module docstring)."""
        b = best.to(self.borders.dtype)[..., None]
        lo, hi = self.borders[:-1], self.borders[1:]
        above = self.centre - b
        inside = (hi - b).clamp_min(0) ** 2 / (2 * self.width)
        per_bar = torch.where(b <= lo, above, torch.where(b < hi, inside, torch.zeros_like(above)))
        return (self.probs * per_bar).sum(-1)

    def sample(self, generator: torch.Generator) -> torch.Tensor:
        """One draw per candidate: a bar by its probability, then uniform inside it."""
        shape = self.probs.shape[:-1]
        u = torch.rand(shape, generator=generator, dtype=self.probs.dtype)
        cum = self.probs.cumsum(-1)
        k = torch.searchsorted(cum.contiguous(), u[..., None].contiguous())[..., 0]
        k = k.clamp_max(self.probs.shape[-1] - 1)
        v = torch.rand(shape, generator=generator, dtype=self.probs.dtype)
        return self.borders[:-1][k] + v * self.width[k]
