r"""The Euclidean mirror map :math:`\psi(x) = \tfrac12\|x\|_2^2`: projected gradient descent.

:math:`\nabla\psi` and :math:`\nabla\psi^*` are the identity, :math:`D_\psi(x, y) =
\tfrac12\|x - y\|_2^2`, and the Bregman projection is the Euclidean one, so the mirror step is
:math:`\Pi_{\mathcal{X}}(x - \eta g)`. The domain is all of :math:`\mathbb{R}^d` or a
:class:`~shared_core.mirror.Ball` / :class:`~shared_core.mirror.Box`.
"""

from __future__ import annotations

from typing import ClassVar

from torch import Tensor

from ._common import check_vectors, upcast
from .base import MirrorMap
from .domains import Domain

__all__ = ["Euclidean"]


class Euclidean(MirrorMap):
    r"""The potential :math:`\tfrac12\|x\|_2^2` on :math:`\mathbb{R}^d` or a convex ``domain``.

    Args:
        domain: ``None`` (unconstrained), a :class:`~shared_core.mirror.Ball` or a
            :class:`~shared_core.mirror.Box`.

    Example:
        >>> import torch
        >>> from shared_core.mirror import Ball
        >>> Euclidean(Ball(1.0)).step(torch.tensor([0.6, 0.0]), torch.tensor([-1.0, 0.0]), lr=1.0)
        tensor([1., 0.])
    """

    name: ClassVar[str] = "euclidean"

    def __init__(self, domain: Domain | None = None) -> None:
        if domain is not None and not isinstance(domain, Domain):
            raise ValueError(f"domain must be None, a Ball or a Box, got {domain!r}")
        self.domain = domain

    def __repr__(self) -> str:
        return f"Euclidean(domain={self.domain!r})"

    def psi(self, x: Tensor) -> Tensor:
        x = check_vectors(x, "Euclidean.psi")
        return (0.5 * upcast(x).square().sum(-1)).to(x.dtype)

    def psi_star(self, theta: Tensor) -> Tensor:
        # The conjugate of the unconstrained potential (the domain enters through project).
        return self.psi(theta)

    def grad_psi(self, x: Tensor) -> Tensor:
        return check_vectors(x, "Euclidean.grad_psi").clone()

    def grad_psi_star(self, theta: Tensor) -> Tensor:
        return check_vectors(theta, "Euclidean.grad_psi_star").clone()

    def bregman(self, x: Tensor, y: Tensor) -> Tensor:
        r""":math:`\tfrac12\|x - y\|_2^2`, computed directly (no cancellation)."""
        x, y = check_vectors(x, "Euclidean.bregman"), check_vectors(y, "Euclidean.bregman")
        return (0.5 * (upcast(x) - upcast(y)).square().sum(-1)).to(x.dtype)

    def project(self, y: Tensor) -> Tensor:
        y = check_vectors(y, "Euclidean.project")
        return y.clone() if self.domain is None else self.domain.project(y)

    def check(self, x: Tensor) -> Tensor:
        x = check_vectors(x, "Euclidean.check")
        if self.domain is not None and not bool(self.domain.contains(x).all()):
            raise ValueError(f"Euclidean.check: a point lies outside {self.domain!r}")
        return x
