r"""The unit sphere :math:`\{x : \|x\|_F = 1\}` of tensors of a fixed trailing shape."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from ._linalg import randn, sum_last
from .base import Manifold, exceeds, finite_error, match_error, positive_int, shape_error

__all__ = ["Sphere"]


class Sphere(Manifold):
    r"""Unit-Frobenius-norm tensors with the metric inherited from the ambient space.

    With :math:`\langle a, b\rangle = \sum a_i b_i` over the trailing dims and
    :math:`\|x\| = 1`:

    - tangent space :math:`\{u : \langle x, u\rangle = 0\}`; ``proju(x, u) = u - <x, u> x``
      removes the radial part, and ``egrad2rgrad`` is that projection of the gradient (the
      metric is the ambient one, so the Riesz representer is the projected gradient);
    - ``retr(x, u) = (x + u) / ||x + u||``;
    - ``expmap(x, u) = cos(|u|) x + sin(|u|) u / |u|`` (great circles), ``logmap`` its inverse
      for ``y != -x``, ``dist = atan2(|y - <x, y> x|, <x, y>)`` (the angle, accurate at both
      small and large angles, unlike ``arccos``);
    - ``transp(x, y, v) = proju(y, v)``; ``proj(x) = x / ||x||`` (undefined at 0).

    Args:
        *shape: trailing shape of one point; ``Sphere(n)`` is :math:`S^{n-1}` and
            ``Sphere(m, n)`` the matrices of unit Frobenius norm. The total size must be >= 2.

    Example:
        >>> import torch
        >>> from shared_core.manifolds import Sphere
        >>> S = Sphere(3)
        >>> x = torch.tensor([1.0, 0.0, 0.0], dtype=torch.float64)
        >>> y = S.expmap(x, torch.tensor([0.0, torch.pi / 2, 0.0], dtype=torch.float64))
        >>> torch.allclose(y, torch.tensor([0.0, 1.0, 0.0], dtype=torch.float64))
        True
    """

    def __init__(self, *shape: int):
        if not shape:
            raise ValueError("Sphere(*shape) needs at least one dim, e.g. Sphere(3)")
        self.shape = tuple(positive_int("each dim of shape", d) for d in shape)
        if math.prod(self.shape) < 2:
            raise ValueError(
                f"Sphere{self.shape} has total size {math.prod(self.shape)}; a sphere of "
                "positive dimension needs at least 2 entries"
            )

    @property
    def _point_ndim(self) -> int:
        return len(self.shape)

    def __repr__(self) -> str:
        return f"Sphere{self.shape}" if len(self.shape) > 1 else f"Sphere({self.shape[0]})"

    @property
    def dim(self) -> int:
        return math.prod(self.shape) - 1

    # The batch-shaped reductions get the manifold's dims back as size-1 dims so they
    # broadcast against points.
    def _dot(self, a: Tensor, b: Tensor) -> Tensor:
        return sum_last(a * b, len(self.shape))

    def _expand(self, s: Tensor) -> Tensor:
        return s.reshape(*s.shape, *([1] * len(self.shape)))

    def _proj(self, x: Tensor) -> Tensor:
        return x / self._expand(self._dot(x, x).sqrt())

    def _proju(self, x: Tensor, u: Tensor) -> Tensor:
        return u - self._expand(self._dot(x, u)) * x

    def _retr(self, x: Tensor, u: Tensor) -> Tensor:
        return self._proj(x + u)

    def _expmap(self, x: Tensor, u: Tensor) -> Tensor:
        theta = self._expand(self._dot(u, u).sqrt())
        # sin(t)/t -> 1 as t -> 0; the guard keeps a zero step exact instead of 0/0.
        safe = torch.where(theta > 0, theta, torch.ones_like(theta))
        sinc = torch.where(theta > 0, torch.sin(safe) / safe, torch.ones_like(theta))
        return self._proj(torch.cos(theta) * x + sinc * u)

    def _logmap(self, x: Tensor, y: Tensor) -> Tensor:
        c = self._dot(x, y)
        v = y - self._expand(c) * x
        s = self._dot(v, v).sqrt()
        theta = torch.atan2(s, c)
        scale = torch.where(s > 0, theta / torch.where(s > 0, s, torch.ones_like(s)), 1.0)
        return self._expand(scale) * v

    def _dist(self, x: Tensor, y: Tensor) -> Tensor:
        c = self._dot(x, y)
        v = y - self._expand(c) * x
        return torch.atan2(self._dot(v, v).sqrt(), c)

    def _transp(self, x: Tensor, y: Tensor, v: Tensor) -> Tensor:
        return self._proju(y, v)

    def _inner(self, x: Tensor, u: Tensor, v: Tensor) -> Tensor:
        return self._dot(u, v)

    def _egrad2rgrad(self, x: Tensor, egrad: Tensor) -> Tensor:
        return self._proju(x, egrad)

    def _random_point(self, batch, generator, dtype, device) -> Tensor:
        # A normalised Gaussian is uniform on the sphere.
        return self._proj(randn((*batch, *self.shape), generator, dtype, device))

    def _random_tangent(self, x: Tensor, generator) -> Tensor:
        return self._proju(x, randn(x.shape, generator, x.dtype, x.device))

    def _point_error(self, x: Tensor, atol: float, rtol: float) -> str | None:
        msg = shape_error(x, self.shape, "point") or finite_error(x, "point")
        if msg is not None:
            return msg
        err = (self._dot(x, x).sqrt() - 1).abs()
        return exceeds(err, atol, "| ||x||_F - 1 |")

    def _tangent_error(self, x: Tensor, u: Tensor, atol: float, rtol: float) -> str | None:
        msg = (
            shape_error(x, self.shape, "point")
            or match_error(x, u)
            or finite_error(u, "tangent vector")
        )
        if msg is not None:
            return msg
        err = self._dot(x, u).abs()
        bound = atol + rtol * self._dot(u, u).sqrt()
        return exceeds(err, bound, "|<x, u>| (the radial part)")
