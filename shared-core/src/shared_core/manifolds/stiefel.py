r"""The Stiefel manifold :math:`St(n, p) = \{X \in \mathbb{R}^{n \times p} : X^T X = I_p\}`."""

from __future__ import annotations

import torch
from torch import Tensor

from ._linalg import eye_like, haar_stiefel, polar_factor, qr_positive, randn, sum_last, sym
from .base import (
    Manifold,
    choice,
    exceeds,
    finite_error,
    match_error,
    positive_int,
    shape_error,
)

__all__ = ["Stiefel"]

_METRICS = ("euclidean", "canonical")
_RETRACTIONS = ("qr", "polar")


def orthonormality_error(x: Tensor, p: int) -> Tensor:
    """Batch-shaped ``max |X^T X - I|``."""
    return (x.mT @ x - eye_like(x, p)).abs().amax(dim=(-2, -1))


class Stiefel(Manifold):
    r"""Orthonormal ``n x p`` frames, with the embedded or the canonical metric.

    Tangent space at ``X``: :math:`\{U : X^T U + U^T X = 0\}`, i.e. :math:`U = X A + X_\perp B`
    with ``A`` skew. Metrics, for tangent ``U, V``:

    - ``"euclidean"`` (embedded): :math:`\langle U, V\rangle = \mathrm{tr}(U^T V)`;
    - ``"canonical"``: :math:`\langle U, V\rangle = \mathrm{tr}(U^T (I - \tfrac12 X X^T) V)`,
      which weighs the ``X A`` part by one half (the metric of St(n, p) as a quotient of O(n)).

    ``proju(X, U) = U - X sym(X^T U)`` for both metrics: the normal space of the embedded
    metric is :math:`\{X S : S = S^T\}`, and :math:`W = I - \tfrac12 X X^T` (which is how
    ``inner`` extends the canonical metric to all ambient matrices) maps ``X S`` to
    :math:`\tfrac12 X S` and tangents to tangents, so the same subspace is W-orthogonal to the
    tangent space and the projection is orthogonal for both.

    ``egrad2rgrad``: Euclidean metric: ``proju(X, G)``. Canonical: ``G - X G^T X``, which is
    tangent (``X^T(G - X G^T X) = X^T G - G^T X`` is skew) and satisfies
    :math:`\langle G - X G^T X, U\rangle_c = \mathrm{tr}(G^T U)` for tangent ``U`` (expand
    ``W`` and use :math:`X^T U = -U^T X`).

    ``retr``: ``"qr"`` gives the Q factor of ``X + U`` with ``diag(R) > 0`` (so that a zero
    step returns ``X``); ``"polar"`` gives the orthonormal polar factor of ``X + U`` (the
    nearest orthonormal matrix), computed by SVD.

    ``expmap`` (both closed forms of Edelman, Arias and Smith, 1998), with
    :math:`A = X^T U`:

    - euclidean: :math:`[X\ U]\,\exp\begin{pmatrix}A & -U^T U\\ I & A\end{pmatrix}
      \begin{pmatrix}I\\0\end{pmatrix} \exp(-A)`;
    - canonical: with the thin QR :math:`(I - X X^T) U = Q R`,
      :math:`[X\ Q]\,\exp\begin{pmatrix}A & -R^T\\ R & 0\end{pmatrix}
      \begin{pmatrix}I\\0\end{pmatrix}`.

    ``transp(X, Y, V) = proju(Y, V)``; ``proj(X)`` is the polar factor. There is no
    closed-form ``logmap``/``dist`` (both need an iterative solver) and none is offered.

    Args:
        n: rows, ``n >= p``.
        p: columns (the number of orthonormal vectors), ``p >= 1``.
        metric: ``"euclidean"`` or ``"canonical"``.
        retraction: ``"qr"`` or ``"polar"``.

    Example:
        >>> import torch
        >>> from shared_core.manifolds import Stiefel
        >>> St = Stiefel(5, 2, metric="canonical")
        >>> g = torch.Generator().manual_seed(0)
        >>> X = St.random_point(generator=g, dtype=torch.float64)
        >>> G = torch.randn(5, 2, generator=g, dtype=torch.float64)
        >>> Y = St.retr(X, -0.1 * St.egrad2rgrad(X, G))
        >>> St.is_point(Y)
        True
    """

    def __init__(self, n: int, p: int, metric: str = "euclidean", retraction: str = "qr"):
        self.n = positive_int("n", n)
        self.p = positive_int("p", p)
        if p > n:
            raise ValueError(f"Stiefel needs p <= n; got n={n}, p={p}")
        self.metric = choice("metric", metric, _METRICS)
        self.retraction = choice("retraction", retraction, _RETRACTIONS)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(n={self.n}, p={self.p}, metric={self.metric!r}, "
            f"retraction={self.retraction!r})"
        )

    @property
    def dim(self) -> int:
        return self.n * self.p - self.p * (self.p + 1) // 2

    def _proj(self, x: Tensor) -> Tensor:
        return polar_factor(x)

    def _proju(self, x: Tensor, u: Tensor) -> Tensor:
        return u - x @ sym(x.mT @ u)

    def _retr(self, x: Tensor, u: Tensor) -> Tensor:
        if self.retraction == "qr":
            return qr_positive(x + u)[0]
        return polar_factor(x + u)

    def _expmap(self, x: Tensor, u: Tensor) -> Tensor:
        p = self.p
        # Skew-symmetrising A (exact for tangent u) keeps the exponentials orthogonal.
        a = x.mT @ u
        a = (a - a.mT) / 2
        if self.metric == "euclidean":
            top = torch.cat([a, -(u.mT @ u)], dim=-1)
            bottom = torch.cat([eye_like(x, p).expand_as(a), a], dim=-1)
            e = torch.linalg.matrix_exp(torch.cat([top, bottom], dim=-2))[..., :p]
            return torch.cat([x, u], dim=-1) @ e @ torch.linalg.matrix_exp(-a)
        q, r = torch.linalg.qr(u - x @ a)
        top = torch.cat([a, -r.mT], dim=-1)
        bottom = torch.cat([r, torch.zeros_like(r)], dim=-1)
        e = torch.linalg.matrix_exp(torch.cat([top, bottom], dim=-2))[..., :p]
        return x @ e[..., :p, :] + q @ e[..., p:, :]

    def _transp(self, x: Tensor, y: Tensor, v: Tensor) -> Tensor:
        return self._proju(y, v)

    def _inner(self, x: Tensor, u: Tensor, v: Tensor) -> Tensor:
        out = sum_last(u * v, 2)
        if self.metric == "canonical":
            out = out - 0.5 * sum_last((x.mT @ u) * (x.mT @ v), 2)
        return out

    def _egrad2rgrad(self, x: Tensor, egrad: Tensor) -> Tensor:
        if self.metric == "canonical":
            return egrad - x @ egrad.mT @ x
        return self._proju(x, egrad)

    def _random_point(self, batch, generator, dtype, device) -> Tensor:
        return haar_stiefel(batch, self.n, self.p, generator, dtype, device)

    def _random_tangent(self, x: Tensor, generator) -> Tensor:
        return self._proju(x, randn(x.shape, generator, x.dtype, x.device))

    def _point_error(self, x: Tensor, atol: float, rtol: float) -> str | None:
        msg = shape_error(x, (self.n, self.p), "point") or finite_error(x, "point")
        if msg is not None:
            return msg
        return exceeds(orthonormality_error(x, self.p), atol, "max |X^T X - I|")

    def _tangent_error(self, x: Tensor, u: Tensor, atol: float, rtol: float) -> str | None:
        msg = (
            shape_error(x, (self.n, self.p), "point")
            or match_error(x, u)
            or finite_error(u, "tangent vector")
        )
        if msg is not None:
            return msg
        err = sym(x.mT @ u).abs().amax(dim=(-2, -1))
        bound = atol + rtol * u.abs().amax(dim=(-2, -1))
        return exceeds(err, bound, "max |sym(X^T U)|")
