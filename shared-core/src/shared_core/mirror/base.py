r"""The :class:`MirrorMap` interface: a potential, its gradient maps, Bregman divergence and step.

A mirror map is a strictly convex, differentiable potential :math:`\psi` on a convex set
:math:`\mathcal{X}` (the *domain*). Its Bregman divergence

.. math::

    D_\psi(x, y) = \psi(x) - \psi(y) - \langle \nabla\psi(y), x - y\rangle \ge 0

measures how far :math:`x` is from the tangent of :math:`\psi` at :math:`y`, and the mirror
descent step

.. math::

    x^+ = \Pi^\psi_{\mathcal{X}}\big(\nabla\psi^*(\nabla\psi(x) - \eta\, g)\big)
    = \operatorname*{argmin}_{x' \in \mathcal{X}} \eta \langle g, x'\rangle + D_\psi(x', x)

takes the gradient step in the dual (mirror) space, maps back with the gradient of the convex
conjugate :math:`\psi^*`, and lands in :math:`\mathcal{X}` by the Bregman projection
:math:`\Pi^\psi_{\mathcal{X}}(y) = \operatorname{argmin}_{z \in \mathcal{X}} D_\psi(z, y)`. The two
forms agree by the three-point identity
:math:`D(z, x) = D(z, y) + D(y, x) - \langle \nabla\psi(x) - \nabla\psi(y), z - y\rangle`.

Every method treats the last axis as the vector and the leading axes as a batch.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar

from torch import Tensor

from ._common import check_lr, check_same_shape, check_vectors, upcast

__all__ = ["MirrorMap"]


class MirrorMap(ABC):
    """A potential with its gradient maps, Bregman divergence, projection and mirror step."""

    #: the name :func:`shared_core.mirror.get_mirror` knows it by.
    name: ClassVar[str]

    @abstractmethod
    def psi(self, x: Tensor) -> Tensor:
        r"""The potential :math:`\psi(x)`, one value per vector."""

    @abstractmethod
    def psi_star(self, theta: Tensor) -> Tensor:
        r"""The conjugate :math:`\psi^*(\theta) = \sup_x \langle\theta, x\rangle - \psi(x)`."""

    @abstractmethod
    def grad_psi(self, x: Tensor) -> Tensor:
        r"""The mirror map :math:`\nabla\psi(x)` (primal to dual)."""

    @abstractmethod
    def grad_psi_star(self, theta: Tensor) -> Tensor:
        r"""The inverse mirror map :math:`\nabla\psi^*(\theta)` (dual to primal)."""

    @abstractmethod
    def project(self, y: Tensor) -> Tensor:
        r"""The Bregman projection :math:`\operatorname{argmin}_{z\in\mathcal{X}} D_\psi(z, y)`."""

    def check(self, x: Tensor) -> Tensor:
        """Raise ``ValueError`` unless ``x`` is a valid point of the domain; return it."""
        return check_vectors(x, f"{type(self).__name__}.check")

    def bregman(self, x: Tensor, y: Tensor) -> Tensor:
        r"""The Bregman divergence :math:`D_\psi(x, y)`, one value per vector.

        The generic formula subtracts nearly equal numbers when ``x`` is near ``y``; the result
        is clamped at 0, which the divergence can only undershoot by rounding.
        """
        what = f"{type(self).__name__}.bregman"
        x, y = check_vectors(x, what), check_vectors(y, what)
        xu, yu = upcast(x), upcast(y)
        gap = (self.grad_psi(yu) * (xu - yu)).sum(-1)
        return (self.psi(xu) - self.psi(yu) - gap).clamp(min=0).to(x.dtype)

    def step(self, x: Tensor, g: Tensor, lr: float) -> Tensor:
        r"""One mirror-descent step :math:`\Pi(\nabla\psi^*(\nabla\psi(x) - \eta g))`.

        Args:
            x: the current point, shape ``(..., d)``.
            g: the (sub)gradient at ``x``, same shape.
            lr: the step size :math:`\eta > 0`.

        Returns:
            The next point, shaped and typed like ``x``.
        """
        what = f"{type(self).__name__}.step"
        # The point need not lie in the domain: the step is the minimiser of
        # eta <g, x'> + D(x', x) over the domain for any x where grad_psi is defined.
        x = check_vectors(x, what)
        check_same_shape(x, g, what)
        eta = check_lr(lr)
        xu = upcast(x)
        theta = self.grad_psi(xu) - eta * g.to(xu.dtype)
        return self.project(self.grad_psi_star(theta)).to(x.dtype)
