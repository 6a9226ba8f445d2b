r"""The Grassmann manifold Gr(n, p) of p-dimensional subspaces of R^n, as St(n, p) / O(p)."""

from __future__ import annotations

import torch
from torch import Tensor

from ._linalg import haar_stiefel, polar_factor, qr_positive, randn, sum_last
from .base import (
    Manifold,
    choice,
    exceeds,
    finite_error,
    match_error,
    positive_int,
    shape_error,
)
from .stiefel import orthonormality_error

__all__ = ["Grassmann"]

_RETRACTIONS = ("polar", "qr")


class Grassmann(Manifold):
    r"""Subspaces represented by orthonormal bases, with horizontal tangent vectors.

    A point is an ``n x p`` matrix ``X`` with :math:`X^T X = I`; ``X`` and ``X Q`` (``Q``
    orthogonal) are the same subspace. The fibre through ``X`` is :math:`\{X Q\}`, its tangent
    (vertical) space is :math:`\{X \Omega : \Omega^T = -\Omega\}`, and the horizontal space,
    its Frobenius-orthogonal complement within the Stiefel tangent space, is
    :math:`\{U : X^T U = 0\}`. A tangent vector of Gr(n, p) at ``span(X)`` is represented by
    its unique horizontal lift at the basis ``X``; changing basis to ``X Q`` maps the lift
    ``U`` to ``U Q``.

    - metric :math:`\mathrm{tr}(U^T V)` (unchanged by ``(X, U, V) -> (XQ, UQ, VQ)``);
    - ``proju(X, U) = (I - X X^T) U`` and ``egrad2rgrad(X, G) = (I - X X^T) G`` (the metric is
      the ambient one restricted to the horizontal space, so the representer is the
      projection. For a basis-invariant ``f``, differentiating :math:`f(X e^{t\Omega})` shows
      that :math:`X^T G` is symmetric: ``G`` has no vertical part, and the result equals the
      Stiefel gradient; ``egrad2rgrad(XQ, GQ) = egrad2rgrad(X, G) Q``);
    - ``retr``: the orthonormal polar factor of ``X + U`` (``"polar"``, default; it satisfies
      ``retr(XQ, UQ) = retr(X, U) Q`` exactly) or the sign-fixed Q factor (``"qr"``, same
      subspace, a different basis);
    - ``expmap`` (Edelman, Arias and Smith, 1998): with the thin SVD :math:`U = W \Sigma V^T`,
      :math:`X V \cos\Sigma V^T + W \sin\Sigma V^T`;
    - ``logmap(X, Y)``: with :math:`(I - X X^T) Y (X^T Y)^{-1} = W T V^T` (thin SVD),
      :math:`W \arctan(T) V^T` (needs :math:`X^T Y` invertible, i.e. no principal angle of
      90 degrees);
    - ``dist``: :math:`\|\theta\|_2` over the principal angles, from the singular values of
      :math:`X^T Y` (cosines) paired with those of :math:`(I - X X^T) Y` (sines) through
      ``atan2``, which stays accurate for tiny angles where ``arccos`` loses half the digits;
    - ``transp(X, Y, V) = (I - Y Y^T) V``; ``proj`` is the polar factor.

    Args:
        n: ambient dimension, ``n >= p``.
        p: subspace dimension, ``p >= 1``.
        retraction: ``"polar"`` or ``"qr"``.

    Example:
        >>> import torch
        >>> from shared_core.manifolds import Grassmann
        >>> Gr = Grassmann(6, 2)
        >>> g = torch.Generator().manual_seed(0)
        >>> X, Y = Gr.random_point(2, generator=g, dtype=torch.float64)
        >>> Q = torch.linalg.qr(torch.randn(2, 2, generator=g, dtype=torch.float64))[0]
        >>> bool(torch.isclose(Gr.dist(X @ Q, Y), Gr.dist(X, Y)))
        True
    """

    def __init__(self, n: int, p: int, retraction: str = "polar"):
        self.n = positive_int("n", n)
        self.p = positive_int("p", p)
        if p > n:
            raise ValueError(f"Grassmann needs p <= n; got n={n}, p={p}")
        self.retraction = choice("retraction", retraction, _RETRACTIONS)

    def __repr__(self) -> str:
        return f"Grassmann(n={self.n}, p={self.p}, retraction={self.retraction!r})"

    @property
    def dim(self) -> int:
        return self.p * (self.n - self.p)

    def _proj(self, x: Tensor) -> Tensor:
        return polar_factor(x)

    def _proju(self, x: Tensor, u: Tensor) -> Tensor:
        return u - x @ (x.mT @ u)

    def _retr(self, x: Tensor, u: Tensor) -> Tensor:
        if self.retraction == "qr":
            return qr_positive(x + u)[0]
        return polar_factor(x + u)

    def _expmap(self, x: Tensor, u: Tensor) -> Tensor:
        w, s, vh = torch.linalg.svd(u, full_matrices=False)
        cos = torch.cos(s).unsqueeze(-2)
        sin = torch.sin(s).unsqueeze(-2)
        return (x @ vh.mT * cos + w * sin) @ vh

    def _logmap(self, x: Tensor, y: Tensor) -> Tensor:
        xty = x.mT @ y
        lifted = torch.linalg.solve(xty, y - x @ xty, left=False)
        w, t, vh = torch.linalg.svd(lifted, full_matrices=False)
        return (w * torch.atan(t).unsqueeze(-2)) @ vh

    def principal_angles(self, x: Tensor, y: Tensor) -> Tensor:
        """The ``p`` principal angles between ``span(x)`` and ``span(y)``, ascending.

        Example:
            >>> import torch
            >>> from shared_core.manifolds import Grassmann
            >>> X = torch.eye(3, 1, dtype=torch.float64)
            >>> Y = torch.tensor([[1.0], [1.0], [0.0]], dtype=torch.float64) / 2**0.5
            >>> Grassmann(3, 1).principal_angles(X, Y)
            tensor([0.7854], dtype=torch.float64)
        """
        self._guard(x, y)
        xty = x.mT @ y
        cos = torch.linalg.svdvals(xty)  # descending cosines = ascending angles
        sin = torch.linalg.svdvals(y - x @ xty).flip(-1)
        return torch.atan2(sin, cos)

    def _dist(self, x: Tensor, y: Tensor) -> Tensor:
        return self.principal_angles(x, y).norm(dim=-1)

    def _transp(self, x: Tensor, y: Tensor, v: Tensor) -> Tensor:
        return self._proju(y, v)

    def _inner(self, x: Tensor, u: Tensor, v: Tensor) -> Tensor:
        return sum_last(u * v, 2)

    def _egrad2rgrad(self, x: Tensor, egrad: Tensor) -> Tensor:
        return self._proju(x, egrad)

    def _random_point(self, batch, generator, dtype, device) -> Tensor:
        return haar_stiefel(batch, self.n, self.p, generator, dtype, device)

    def _random_tangent(self, x: Tensor, generator) -> Tensor:
        return self._proju(x, randn(x.shape, generator, x.dtype, x.device))

    def _point_error(self, x: Tensor, atol: float, rtol: float) -> str | None:
        msg = shape_error(x, (self.n, self.p), "point") or finite_error(x, "point")
        if msg is not None:
            return msg
        return exceeds(orthonormality_error(x, self.p), atol, "max |X^T X - I| (not a basis)")

    def _tangent_error(self, x: Tensor, u: Tensor, atol: float, rtol: float) -> str | None:
        msg = (
            shape_error(x, (self.n, self.p), "point")
            or match_error(x, u)
            or finite_error(u, "tangent vector")
        )
        if msg is not None:
            return msg
        err = (x.mT @ u).abs().amax(dim=(-2, -1))
        bound = atol + rtol * u.abs().amax(dim=(-2, -1))
        return exceeds(err, bound, "max |X^T U| (not horizontal)")
