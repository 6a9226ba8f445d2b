r"""Euclidean space :math:`\mathbb{R}^{d_1 \times \dots \times d_k}` with the Frobenius metric."""

from __future__ import annotations

import math

from torch import Tensor

from ._linalg import randn, sum_last
from .base import Manifold, finite_error, match_error, positive_int, shape_error

__all__ = ["Euclidean"]


class Euclidean(Manifold):
    r"""Flat space of tensors of a fixed trailing shape.

    Every tangent space is the whole space, the metric is :math:`\langle U, V\rangle =
    \sum_{ij} U_{ij} V_{ij}`, and ``proj``, ``proju`` and ``egrad2rgrad`` are identities;
    ``retr`` and ``expmap`` are ``x + u``, ``transp`` returns ``v``, ``dist`` is
    :math:`\|x - y\|_F`. It lets an unconstrained parameter sit in a :class:`Product`.

    Args:
        *shape: the trailing shape of one point (at least one dim, each >= 1).

    Example:
        >>> import torch
        >>> from shared_core.manifolds import Euclidean
        >>> E = Euclidean(3)
        >>> x = torch.zeros(3, dtype=torch.float64)
        >>> E.retr(x, torch.ones(3, dtype=torch.float64))
        tensor([1., 1., 1.], dtype=torch.float64)
    """

    def __init__(self, *shape: int):
        if not shape:
            raise ValueError("Euclidean(*shape) needs at least one dim, e.g. Euclidean(1)")
        self.shape = tuple(positive_int("each dim of shape", d) for d in shape)

    @property
    def _point_ndim(self) -> int:
        return len(self.shape)

    def __repr__(self) -> str:
        return f"Euclidean{self.shape}" if len(self.shape) > 1 else f"Euclidean({self.shape[0]})"

    @property
    def dim(self) -> int:
        return math.prod(self.shape)

    def _proj(self, x: Tensor) -> Tensor:
        return x

    def _proju(self, x: Tensor, u: Tensor) -> Tensor:
        return u

    def _retr(self, x: Tensor, u: Tensor) -> Tensor:
        return x + u

    def _expmap(self, x: Tensor, u: Tensor) -> Tensor:
        return x + u

    def _logmap(self, x: Tensor, y: Tensor) -> Tensor:
        return y - x

    def _dist(self, x: Tensor, y: Tensor) -> Tensor:
        return sum_last((y - x) ** 2, len(self.shape)).sqrt()

    def _transp(self, x: Tensor, y: Tensor, v: Tensor) -> Tensor:
        return v

    def _inner(self, x: Tensor, u: Tensor, v: Tensor) -> Tensor:
        return sum_last(u * v, len(self.shape))

    def _egrad2rgrad(self, x: Tensor, egrad: Tensor) -> Tensor:
        return egrad

    def _random_point(self, batch, generator, dtype, device) -> Tensor:
        return randn((*batch, *self.shape), generator, dtype, device)

    def _random_tangent(self, x: Tensor, generator) -> Tensor:
        return randn(x.shape, generator, x.dtype, x.device)

    def _point_error(self, x: Tensor, atol: float, rtol: float) -> str | None:
        return shape_error(x, self.shape, "point") or finite_error(x, "point")

    def _tangent_error(self, x: Tensor, u: Tensor, atol: float, rtol: float) -> str | None:
        # Every vector of the right shape is tangent; only shape and finiteness can fail.
        return match_error(x, u) or finite_error(u, "tangent vector")
