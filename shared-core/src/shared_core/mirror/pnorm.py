r"""The p-norm mirror map :math:`\psi(x) = \tfrac12\|x\|_p^2`, :math:`1 < p \le 2`.

With :math:`1/p + 1/q = 1`,

.. math::

    \nabla\psi(x)_i = \frac{\operatorname{sign}(x_i)\,|x_i|^{p-1}}{\|x\|_p^{p-2}}, \qquad
    \nabla\psi^*(\theta)_i = \frac{\operatorname{sign}(\theta_i)\,|\theta_i|^{q-1}}
    {\|\theta\|_q^{q-2}}, \qquad \psi^*(\theta) = \tfrac12\|\theta\|_q^2 .

The two maps are inverse because :math:`\|\nabla\psi(x)\|_q = \|x\|_p` and :math:`(p-1)(q-1) = 1`.
:math:`\psi` is :math:`(p-1)`-strongly convex in :math:`\|\cdot\|_p`, which is what the p-norm
algorithms (Grove-Littlestone-Schuurmans; Gentile) use with :math:`p` near 1 for sparse
targets. The optional domain is the l_p ball :math:`\|x\|_p \le R`; its Bregman projection is a
radial rescaling: for a fixed norm :math:`t` of :math:`z`, :math:`\langle\nabla\psi(y), z\rangle`
is largest along :math:`y`, and :math:`\tfrac12 t^2 - t\|y\|_p` is least at
:math:`t = \min(R, \|y\|_p)`.
"""

from __future__ import annotations

import math
from typing import ClassVar

import torch
from torch import Tensor

from ._common import check_vectors, safe_div, upcast
from .base import MirrorMap

__all__ = ["PNorm"]


def _link(x: Tensor, p: float) -> Tensor:
    r""":math:`\operatorname{sign}(x)|x|^{p-1}/\|x\|_p^{p-2}`, with 0 at 0."""
    if p == 2:
        return x.clone()
    # Factor out max|x| (the map is 1-homogeneous) so |x|^(p-1) cannot overflow for large p.
    top = x.abs().amax(dim=-1, keepdim=True)
    t = safe_div(x, top)
    nrm = torch.linalg.vector_norm(t, ord=p, dim=-1, keepdim=True)
    return top * safe_div(torch.sign(t) * t.abs().pow(p - 1), nrm.pow(p - 2))


class PNorm(MirrorMap):
    r"""The potential :math:`\tfrac12\|x\|_p^2` for :math:`1 < p \le 2`, on :math:`\mathbb{R}^d`
    or the ball :math:`\|x\|_p \le R`.

    Args:
        p: the exponent, :math:`1 < p \le 2` (``p = 2`` is :class:`Euclidean`).
        radius: ``None`` (unconstrained) or the radius :math:`R > 0` of the l_p ball.

    Example:
        >>> m = PNorm(1.5)
        >>> x = torch.tensor([1.0, -2.0, 0.5])
        >>> torch.allclose(m.grad_psi_star(m.grad_psi(x)), x)
        True
    """

    name: ClassVar[str] = "pnorm"

    def __init__(self, p: float, radius: float | None = None) -> None:
        try:
            value = float(p)
        except (TypeError, ValueError):
            raise ValueError(f"p must be a number with 1 < p <= 2, got {p!r}") from None
        if not 1 < value <= 2:  # also refuses NaN
            raise ValueError(f"p must be a number with 1 < p <= 2, got {p!r}")
        if radius is not None:
            r = float(radius)
            if not (math.isfinite(r) and r > 0):
                raise ValueError(f"radius must be None or a finite number > 0, got {radius!r}")
            radius = r
        self.p = value
        self.q = value / (value - 1)
        self.radius = radius

    def __repr__(self) -> str:
        return f"PNorm(p={self.p}, radius={self.radius})"

    def _norm(self, x: Tensor, ord: float) -> Tensor:
        return torch.linalg.vector_norm(upcast(x), ord=ord, dim=-1)

    def psi(self, x: Tensor) -> Tensor:
        x = check_vectors(x, "PNorm.psi")
        return (0.5 * self._norm(x, self.p).square()).to(x.dtype)

    def psi_star(self, theta: Tensor) -> Tensor:
        theta = check_vectors(theta, "PNorm.psi_star")
        return (0.5 * self._norm(theta, self.q).square()).to(theta.dtype)

    def grad_psi(self, x: Tensor) -> Tensor:
        x = check_vectors(x, "PNorm.grad_psi")
        return _link(upcast(x), self.p).to(x.dtype)

    def grad_psi_star(self, theta: Tensor) -> Tensor:
        theta = check_vectors(theta, "PNorm.grad_psi_star")
        return _link(upcast(theta), self.q).to(theta.dtype)

    def project(self, y: Tensor) -> Tensor:
        """Identity without a radius; otherwise ``y * min(1, R / ||y||_p)``."""
        y = check_vectors(y, "PNorm.project")
        if self.radius is None:
            return y.clone()
        yu = upcast(y)
        nrm = torch.linalg.vector_norm(yu, ord=self.p, dim=-1, keepdim=True)
        # `nrm <= R` is False for NaN, so a NaN point stays NaN.
        scale = torch.where(nrm <= self.radius, 1.0, self.radius / nrm)
        return (yu * scale).to(y.dtype)

    def check(self, x: Tensor) -> Tensor:
        x = check_vectors(x, "PNorm.check")
        if self.radius is not None:
            tol = 64 * torch.finfo(x.dtype).eps
            worst = self._norm(x, self.p).max()
            if not bool(worst <= self.radius * (1 + tol)):
                raise ValueError(
                    f"PNorm.check: a point has l_{self.p:g} norm {worst.item():.6g} "
                    f"> radius {self.radius}"
                )
        return x
