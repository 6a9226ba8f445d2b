r"""A stochastic first-order oracle built from a deterministic objective plus heavy-tailed noise.

Given :math:`F` and a noise model, the oracle answers a query at :math:`x` with
:math:`(F(x),\ g(x) = \nabla F(x) + s\,\xi)`, :math:`\xi` i.i.d. coordinates of the noise model:
an unbiased gradient (when the tail index exceeds 1) whose error has exactly the noise
model's finite moments. That is the assumption of the heavy-tail analysis, made concrete.

Example:
    >>> import torch
    >>> from heavytail_sgd.noise import StudentT
    >>> oracle = HeavyTailedOracle(lambda x: 0.5 * (x**2).sum(), StudentT(3.0), seed=0)
    >>> value, g = oracle(torch.ones(3))
    >>> float(value), tuple(g.shape)
    (1.5, (3,))
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

import torch

from .noise import NoiseModel

__all__ = ["HeavyTailedOracle", "add_gradient_noise_"]


def add_gradient_noise_(
    params: Iterable[torch.Tensor],
    noise: NoiseModel,
    *,
    scale: float = 1.0,
    generator: torch.Generator | None = None,
) -> None:
    """Add ``scale * noise`` in place to the ``.grad`` of each parameter that has one.

    The hook for network training: call it between ``loss.backward()`` and ``opt.step()``.

    Args:
        params: tensors whose ``.grad`` is perturbed.
        noise: the noise model.
        scale: multiplier, positive.
        generator: seeded ``torch.Generator`` on the parameters' device.
    """
    if not (isinstance(scale, int | float) and scale > 0 and math.isfinite(scale)):
        raise ValueError(f"scale must be a positive finite number, got {scale!r}")
    with torch.no_grad():
        for p in params:
            if p.grad is None:
                continue
            xi = noise.sample(p.grad.shape, generator=generator, device=p.device, dtype=p.dtype)
            p.grad.add_(xi, alpha=scale)


class HeavyTailedOracle:
    r"""Stochastic first-order oracle :math:`x \mapsto (F(x), \nabla F(x) + s\,\xi)`.

    Args:
        objective: ``x -> scalar tensor``, the deterministic :math:`F`.
        noise: coordinate noise model for :math:`\xi`.
        grad: optional ``x -> tensor`` giving :math:`\nabla F(x)`; default autograd.
        scale: noise multiplier :math:`s > 0`.
        seed: seed of the oracle's own ``torch.Generator`` (ignored if ``generator`` given).
        generator: a ``torch.Generator`` to draw from (must live on the query's device).

    Attributes:
        calls: how many queries were answered.
    """

    def __init__(
        self,
        objective: Callable[[torch.Tensor], torch.Tensor],
        noise: NoiseModel,
        *,
        grad: Callable[[torch.Tensor], torch.Tensor] | None = None,
        scale: float = 1.0,
        seed: int | None = None,
        generator: torch.Generator | None = None,
    ) -> None:
        if not callable(objective):
            raise ValueError(f"objective must be callable, got {objective!r}")
        if not isinstance(noise, NoiseModel):
            raise ValueError(f"noise must be a NoiseModel, got {noise!r}")
        if grad is not None and not callable(grad):
            raise ValueError(f"grad must be callable or None, got {grad!r}")
        if not (isinstance(scale, int | float) and scale > 0 and math.isfinite(scale)):
            raise ValueError(f"scale must be a positive finite number, got {scale!r}")
        self.objective = objective
        self.noise = noise
        self.grad_fn = grad
        self.scale = float(scale)
        self._seed = seed
        self._generator = generator
        self.calls = 0

    def _gen(self, device: torch.device) -> torch.Generator | None:
        if self._generator is None and self._seed is not None:
            self._generator = torch.Generator(device=device).manual_seed(self._seed)
        return self._generator

    def true_grad(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(F(x), grad F(x))`` without noise."""
        if self.grad_fn is not None:
            with torch.no_grad():
                return self.objective(x), self.grad_fn(x)
        with torch.enable_grad():
            xr = x.detach().requires_grad_(True)
            value = self.objective(xr)
            if value.numel() != 1:
                raise ValueError(f"objective must return a scalar, got shape {tuple(value.shape)}")
            (g,) = torch.autograd.grad(value, xr)
        return value.detach(), g

    def __call__(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Answer one query: ``(F(x), grad F(x) + scale * xi)``."""
        value, g = self.true_grad(x)
        xi = self.noise.sample(
            g.shape, generator=self._gen(g.device), device=g.device, dtype=g.dtype
        )
        self.calls += 1
        return value, g + self.scale * xi

    def grad(self, x: torch.Tensor) -> torch.Tensor:
        """Only the stochastic gradient."""
        return self(x)[1]
