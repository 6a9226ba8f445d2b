r"""Cartesian products :math:`\mathcal{M}_1 \times \dots \times \mathcal{M}_k` of manifolds."""

from __future__ import annotations

import torch
from torch import Tensor

from .base import Manifold

__all__ = ["Product"]


class Product(Manifold):
    r"""The product manifold; points and tangent vectors are tuples, one entry per factor.

    Everything acts factor by factor: ``proju``, ``retr``, ``expmap``, ``transp`` and
    ``egrad2rgrad`` map each entry with its own manifold, the metric is the sum
    :math:`\sum_i \langle u_i, v_i\rangle_{x_i}` (so the Riesz representer is the tuple of the
    factors' representers, and ``proju`` stays orthogonal), and
    :math:`\mathrm{dist} = (\sum_i \mathrm{dist}_i^2)^{1/2}`. ``expmap``, ``logmap`` and
    ``dist`` exist when every factor has them. All factors must use the same batch shape.

    Args:
        *manifolds: the factors (at least one), any :class:`Manifold` including products.

    Example:
        >>> import torch
        >>> from shared_core.manifolds import Product, Sphere, Stiefel
        >>> P = Product(Sphere(4), Stiefel(5, 2))
        >>> g = torch.Generator().manual_seed(0)
        >>> x = P.random_point(3, generator=g, dtype=torch.float64)
        >>> [t.shape for t in x]
        [torch.Size([3, 4]), torch.Size([3, 5, 2])]
        >>> P.inner(x, P.random_tangent(x, generator=g)).shape
        torch.Size([3])
    """

    def __init__(self, *manifolds: Manifold):
        if not manifolds:
            raise ValueError("Product needs at least one manifold")
        for i, man in enumerate(manifolds):
            if not isinstance(man, Manifold):
                raise ValueError(f"Product factor {i} must be a Manifold, got {type(man).__name__}")
        self.manifolds = tuple(manifolds)

    def __repr__(self) -> str:
        return "Product(" + ", ".join(repr(m) for m in self.manifolds) + ")"

    def __len__(self) -> int:
        return len(self.manifolds)

    @property
    def dim(self) -> int:
        return sum(m.dim for m in self.manifolds)

    def _each(self, name: str, *args) -> tuple:
        return tuple(
            getattr(man, name)(*parts) for man, *parts in zip(self.manifolds, *args, strict=True)
        )

    def _proj(self, x) -> tuple:
        return self._each("proj", x)

    def _proju(self, x, u) -> tuple:
        return self._each("proju", x, u)

    def _retr(self, x, u) -> tuple:
        return self._each("retr", x, u)

    def _expmap(self, x, u) -> tuple:
        return self._each("expmap", x, u)

    def _logmap(self, x, y) -> tuple:
        return self._each("logmap", x, y)

    def _dist(self, x, y) -> Tensor:
        return sum(d**2 for d in self._each("dist", x, y)).sqrt()

    def _transp(self, x, y, v) -> tuple:
        return self._each("transp", x, y, v)

    def _inner(self, x, u, v) -> Tensor:
        return sum(self._each("inner", x, u, v))

    def _egrad2rgrad(self, x, egrad) -> tuple:
        return self._each("egrad2rgrad", x, egrad)

    def _random_point(self, batch, generator, dtype, device) -> tuple:
        return tuple(
            man.random_point(*batch, generator=generator, dtype=dtype, device=device)
            for man in self.manifolds
        )

    def _random_tangent(self, x, generator) -> tuple:
        return tuple(
            man.random_tangent(xi, generator=generator)
            for man, xi in zip(self.manifolds, x, strict=True)
        )

    def _zero_tangent(self, x) -> tuple:
        return self._each("zero_tangent", x)

    def _structure_message(self, obj: object, what: str = "point") -> str | None:
        k = len(self.manifolds)
        if not isinstance(obj, tuple | list) or len(obj) != k:
            got = f"a {type(obj).__name__}"
            if isinstance(obj, tuple | list):
                got += f" of length {len(obj)}"
            return f"the {what} must be a tuple with one entry per factor ({k}); got {got}"
        return None

    def _tolerances(self, x, atol, rtol):
        # Each factor resolves its own defaults from its own dtype.
        return atol, rtol

    def batch_shape(self, x) -> torch.Size:
        return self.manifolds[0].batch_shape(x[0])

    def _batch_message(self, x) -> str | None:
        shapes = [tuple(m.batch_shape(xi)) for m, xi in zip(self.manifolds, x, strict=True)]
        if len(set(shapes)) > 1:
            return f"the factors' batch shapes differ: {shapes}"
        return None

    def _point_error(self, x, atol, rtol) -> str | None:
        for i, (man, xi) in enumerate(zip(self.manifolds, x, strict=True)):
            msg = man._point_message(xi, atol, rtol)
            if msg is not None:
                return f"factor {i} ({man!r}): {msg}"
        return self._batch_message(x)

    def _tangent_error(self, x, u, atol, rtol) -> str | None:
        for i, (man, xi, ui) in enumerate(zip(self.manifolds, x, u, strict=True)):
            msg = man._tangent_message(xi, ui, atol, rtol)
            if msg is not None:
                return f"factor {i} ({man!r}): {msg}"
        return None
