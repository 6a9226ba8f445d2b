r"""Rank-r m x n matrices, in the factored (quotient) view and in the embedded (SVD) view.

:class:`FixedRankFactored` is the geometry of LoRA-style factors ``X = A B^T`` with the
GL(r) gauge symmetry quotiented out; :class:`FixedRankEmbedded` is the submanifold of
:math:`\mathbb{R}^{m \times n}` with the Frobenius metric. Both describe the same set; they
differ in the representation of points and in the metric.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from ._linalg import eye_like, haar_stiefel, qr_positive, randn, sum_last
from .base import Manifold, NoClosedFormError, exceeds, finite_error, positive_int, shape_error
from .stiefel import orthonormality_error

__all__ = ["Factors", "FixedRankEmbedded", "FixedRankFactored", "SVDPoint", "SVDTangent"]


class Factors(NamedTuple):
    """A pair ``(A, B)``: a point ``X = A B^T`` or a tangent vector ``(xi_A, xi_B)``."""

    A: Tensor
    B: Tensor


class SVDPoint(NamedTuple):
    """A point ``X = U S V^T``: ``U`` (..., m, r), ``V`` (..., n, r) orthonormal, ``S``
    (..., r, r) invertible (diagonal after :meth:`FixedRankEmbedded.retr`)."""

    U: Tensor
    S: Tensor
    V: Tensor


class SVDTangent(NamedTuple):
    """A tangent vector ``U M V^T + Up V^T + U Vp^T`` with ``U^T Up = 0`` and ``V^T Vp = 0``."""

    M: Tensor
    Up: Tensor
    Vp: Tensor


def _rank_message(t: Tensor, r: int, what: str) -> str | None:
    """A message unless every matrix of the batch ``t`` (..., k, r) has numerical rank ``r``."""
    s = torch.linalg.svdvals(t)
    tol = max(t.shape[-2], t.shape[-1]) * torch.finfo(t.dtype).eps * s[..., 0]
    bad = ~(s[..., -1] > tol)
    if not bool(bad.any()):
        return None
    flat = int(bad.reshape(-1).int().argmax())
    lo = float(s[..., -1].reshape(-1)[flat])
    hi = float(s[..., 0].reshape(-1)[flat])
    where = ""
    if bad.ndim:
        idx = torch.unravel_index(torch.tensor(flat), bad.shape)
        where = f" at batch index {tuple(int(i) for i in idx)}"
    return (
        f"{what} has numerical rank below {r}{where}: smallest singular value {lo:.3g}, "
        f"largest {hi:.3g}"
    )


def _pair_message(obj: object, what: str, cls_name: str, k: int) -> str | None:
    if not isinstance(obj, tuple) or len(obj) != k:
        return f"the {what} must be a {cls_name} ({k}-tuple of tensors), got {type(obj).__name__}"
    for t in obj:
        if not isinstance(t, Tensor):
            return f"the {what} must hold torch.Tensors, got {type(t).__name__}"
    return None


class FixedRankFactored(Manifold):
    r"""Rank-r matrices ``X = A B^T`` as the quotient of full-rank factor pairs by GL(r).

    Points are :class:`Factors` ``(A, B)`` with ``A`` (..., m, r) and ``B`` (..., n, r) of
    full column rank (any 2-tuple is accepted; results are :class:`Factors`). The pairs
    ``(A M, B M^{-T})``, ``M`` invertible, give the same ``X`` and form one fibre; tangent
    vectors of the total space are pairs ``(xi_A, xi_B)`` shaped like ``(A, B)``, and the
    gauge maps them to ``(xi_A M, xi_B M^{-T})``.

    Metric, with the Gram matrices :math:`G_A = A^T A`, :math:`G_B = B^T B`:

    .. math:: g(\xi, \eta) = \mathrm{tr}(\xi_A G_B \eta_A^T) + \mathrm{tr}(\xi_B G_A \eta_B^T),

    unchanged by the gauge (:math:`G_B \to M^{-1} G_B M^{-T}` cancels ``M`` in
    :math:`\xi_A M`). It is positive definite on all pairs, so it is also the ambient inner
    product that ``inner`` computes.

    Vertical space (tangent to the fibre): :math:`\{(A K, -B K^T) : K \in \mathbb{R}^{r \times
    r}\}`. A pair is g-orthogonal to all of it iff
    :math:`G_A^{-1} A^T \xi_A = \xi_B^T B G_B^{-1}`; subtracting the vertical part with
    :math:`K = \tfrac12 (G_A^{-1} A^T \xi_A - \xi_B^T B G_B^{-1})` gives the g-orthogonal
    horizontal projection ``proju(x, xi) = (xi_A - A K, xi_B + B K^T)``.

    ``egrad2rgrad(x, (G_A^e, G_B^e))``: the Riesz representer of
    :math:`\mathrm{tr}(G_A^{eT} \xi_A) + \mathrm{tr}(G_B^{eT} \xi_B)` under g is
    :math:`(G^e_A G_B^{-1}, G^e_B G_A^{-1})`, then projected horizontally. Both steps run in QR
    coordinates (:math:`A = Q_AR_A`, :math:`G_A^{-1} = R_A^{-1}R_A^{-T}`,
    :math:`G_A^{-1}A^\top = R_A^{-1}Q_A^\top`): triangular solves of condition
    :math:`\kappa(A)`, never a solve with a Gram matrix of condition :math:`\kappa(A)^2`.
    For ``f(A B^T)`` (a gauge-invariant ``f``) it is horizontal already; its induced ambient
    direction ``xi_A B^T + A xi_B^T`` does not depend on the representative.

    ``retr(x, xi) = (A + xi_A, B + xi_B)`` (the product after a step with the transformed
    tangent is gauge invariant); ``transp(x, y, v) = proju(y, v)``; ``proj`` is the identity
    (every full-rank pair already is a point; see :meth:`balance` for a well-conditioned
    representative). No closed-form ``expmap``/``logmap``/``dist`` exists for this metric.

    Args:
        m, n: matrix size.
        r: rank, ``1 <= r <= min(m, n)``.

    Example:
        >>> import torch
        >>> from shared_core.manifolds import FixedRankFactored
        >>> F = FixedRankFactored(5, 4, 2)
        >>> g = torch.Generator().manual_seed(0)
        >>> x = F.random_point(generator=g, dtype=torch.float64)
        >>> target = torch.randn(5, 4, generator=g, dtype=torch.float64)
        >>> resid = F.matrix(x) - target  # f = ||A B^T - T||^2 / 2
        >>> rgrad = F.egrad2rgrad(x, (resid @ x.B, resid.mT @ x.A))
        >>> y = F.retr(x, (-0.1 * rgrad.A, -0.1 * rgrad.B))
        >>> F.is_point(y)
        True
    """

    def __init__(self, m: int, n: int, r: int):
        self.m = positive_int("m", m)
        self.n = positive_int("n", n)
        self.r = positive_int("r", r)
        if r > min(m, n):
            raise ValueError(f"{type(self).__name__} needs r <= min(m, n); got m={m}, n={n}, r={r}")

    def __repr__(self) -> str:
        return f"{type(self).__name__}(m={self.m}, n={self.n}, r={self.r})"

    @property
    def dim(self) -> int:
        return (self.m + self.n - self.r) * self.r

    # ------------------------------------------------------------------ views
    def matrix(self, x: Factors) -> Tensor:
        """The represented matrix ``A B^T`` (..., m, n)."""
        self._guard(x)
        return x[0] @ x[1].mT

    def tangent_matrix(self, x: Factors, u: Factors) -> Tensor:
        """The ambient direction ``xi_A B^T + A xi_B^T`` that ``u`` induces on ``A B^T``."""
        self._guard(x, u)
        return u[0] @ x[1].mT + x[0] @ u[1].mT

    def balance(self, x: Factors) -> Factors:
        r"""The representative with :math:`A^T A = B^T B = \Sigma` (same matrix ``A B^T``).

        With thin QRs ``A = Q_A R_A``, ``B = Q_B R_B`` and the SVD
        :math:`R_A R_B^T = W \Sigma Z^T`, it returns :math:`(Q_A W \Sigma^{1/2},
        Q_B Z \Sigma^{1/2})`, the best conditioned pair of the fibre.
        """
        self._guard(x)
        qa, ra = torch.linalg.qr(x[0])
        qb, rb = torch.linalg.qr(x[1])
        w, s, zh = torch.linalg.svd(ra @ rb.mT)
        root = s.sqrt().unsqueeze(-2)
        return Factors(qa @ w * root, qb @ zh.mT * root)

    # ------------------------------------------------------------------ geometry
    @staticmethod
    def _grams(x) -> tuple[Tensor, Tensor]:
        return x[0].mT @ x[0], x[1].mT @ x[1]

    def _proj(self, x) -> Factors:
        return Factors(x[0], x[1])

    @staticmethod
    def _frames(x) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        # Thin QRs A = Q_A R_A, B = Q_B R_B. Every G^{-1} below is applied as two triangular
        # solves with R (G = R^T R), whose condition is cond(A), not cond(A)^2 as a solve with
        # the Gram matrix itself: the difference between 1e-8 and 1e-16 relative error at
        # cond 1e4 in float64, and between working and not in float32.
        qa, ra = torch.linalg.qr(x[0])
        qb, rb = torch.linalg.qr(x[1])
        return qa, ra, qb, rb

    def _proju(self, x, u, frames=None) -> Factors:
        a, b = x
        qa, ra, qb, rb = frames if frames is not None else self._frames(x)
        # G_A^{-1} A^T u_A = R_A^{-1} Q_A^T u_A (and likewise for B)
        ka = torch.linalg.solve_triangular(ra, qa.mT @ u[0], upper=True)
        kb = torch.linalg.solve_triangular(rb, qb.mT @ u[1], upper=True)
        k = 0.5 * (ka - kb.mT)
        return Factors(u[0] - a @ k, u[1] + b @ k.mT)

    def _retr(self, x, u) -> Factors:
        return Factors(x[0] + u[0], x[1] + u[1])

    def _expmap(self, x, u):
        raise NoClosedFormError(
            f"{self!r}: the GL(r)-invariant quotient metric has no closed-form geodesics; "
            "use retr(x, u) (the additive retraction on the factors)"
        )

    def _transp(self, x, y, v) -> Factors:
        return self._proju(y, v)

    def _inner(self, x, u, v) -> Tensor:
        ga, gb = self._grams(x)
        return sum_last((u[0] @ gb) * v[0], 2) + sum_last((u[1] @ ga) * v[1], 2)

    def _egrad2rgrad(self, x, egrad) -> Factors:
        frames = self._frames(x)
        _, ra, _, rb = frames

        def right_gram_solve(g: Tensor, r: Tensor) -> Tensor:
            # g G^{-1} = (g R^{-1}) R^{-T}: two triangular solves from the right
            y = torch.linalg.solve_triangular(r, g, upper=True, left=False)
            return torch.linalg.solve_triangular(r.mT, y, upper=False, left=False)

        riesz = Factors(right_gram_solve(egrad[0], rb), right_gram_solve(egrad[1], ra))
        return self._proju(x, riesz, frames)

    def _random_point(self, batch, generator, dtype, device) -> Factors:
        a = randn((*batch, self.m, self.r), generator, dtype, device)
        b = randn((*batch, self.n, self.r), generator, dtype, device)
        return Factors(a, b)

    def _random_tangent(self, x, generator) -> Factors:
        a, b = x
        u = Factors(
            randn(a.shape, generator, a.dtype, a.device),
            randn(b.shape, generator, b.dtype, b.device),
        )
        return self._proju(x, u)

    def _zero_tangent(self, x) -> Factors:
        return Factors(torch.zeros_like(x[0]), torch.zeros_like(x[1]))

    def _structure_message(self, obj: object, what: str = "point") -> str | None:
        return _pair_message(obj, what, "Factors", 2)

    def _shape_message(self, x, what: str) -> str | None:
        a, b = x
        msg = shape_error(a, (self.m, self.r), f"{what} factor A") or shape_error(
            b, (self.n, self.r), f"{what} factor B"
        )
        if msg is None and a.shape[:-2] != b.shape[:-2]:
            msg = (
                f"{what} factors A and B must share batch dims; got {tuple(a.shape)} and "
                f"{tuple(b.shape)}"
            )
        return msg

    def _point_error(self, x, atol: float, rtol: float) -> str | None:
        msg = (
            self._shape_message(x, "point")
            or finite_error(x[0], "factor A")
            or finite_error(x[1], "factor B")
        )
        return msg or _rank_message(x[0], self.r, "A") or _rank_message(x[1], self.r, "B")

    def _tangent_error(self, x, u, atol: float, rtol: float) -> str | None:
        msg = self._shape_message(x, "point") or self._shape_message(u, "tangent vector")
        if msg is None and (u[0].shape != x[0].shape or u[1].shape != x[1].shape):
            msg = "the tangent vector's factors must have the point's shapes"
        msg = msg or finite_error(u[0], "tangent factor A")
        msg = msg or finite_error(u[1], "tangent factor B")
        if msg is not None:
            return msg
        h = self._proju(x, u)
        vertical = Factors(u[0] - h[0], u[1] - h[1])
        # The g-norm of the vertical part is gauge invariant, unlike raw residuals.
        err = self._inner(x, vertical, vertical).clamp_min(0).sqrt()
        bound = atol + rtol * self._inner(x, u, u).clamp_min(0).sqrt()
        return exceeds(err, bound, "g-norm of the vertical part (not horizontal)")


class FixedRankEmbedded(Manifold):
    r"""Rank-r ``m x n`` matrices as a submanifold of :math:`\mathbb{R}^{m \times n}`.

    Points are :class:`SVDPoint` ``(U, S, V)`` with ``X = U S V^T``. The tangent space at
    ``X`` is :math:`\{U M V^T + U_p V^T + U V_p^T : U^T U_p = 0,\ V^T V_p = 0\}`; tangent
    vectors are :class:`SVDTangent` ``(M, Up, Vp)`` (``r x r``, ``m x r``, ``n x r``), which
    keeps the cost at O((m + n) r^2) instead of O(mn). Ambient vectors are dense (..., m, n)
    tensors; ``proju``, ``inner`` and ``egrad2rgrad`` accept either form (a triple is read as
    a vector at ``x``).

    - metric: Frobenius, :math:`\langle\xi,\eta\rangle = \langle M, M'\rangle +
      \langle U_p, U_p'\rangle + \langle V_p, V_p'\rangle` (the three parts are mutually
      orthogonal);
    - ``proju(x, Z)``: :math:`M = U^T Z V`, :math:`U_p = (I - U U^T) Z V`,
      :math:`V_p = (I - V V^T) Z^T U`, i.e. :math:`Z - (I - UU^T) Z (I - VV^T)`, the
      Frobenius-orthogonal projection; ``egrad2rgrad`` is this projection of the gradient;
    - ``retr(x, xi)``: the best rank-r approximation (truncated SVD) of ``X + xi``, done on a
      small core: :math:`X + \xi = [U\ U_p] \begin{pmatrix} S + M & I\\ I & 0\end{pmatrix}
      [V\ V_p]^T`; thin QRs of ``[U Up]`` and ``[V Vp]`` reduce it to the SVD of a
      ``2r x 2r`` matrix (orthonormal results even when ``Up`` or ``Vp`` is rank deficient);
    - ``transp(x, y, v)``: projection of ``v`` (read at ``x``) onto the tangent space at
      ``y``, without forming the dense matrix;
    - ``proj``: truncated SVD of a dense matrix, or re-orthonormalisation of an
      :class:`SVDPoint`. There is no closed-form ``expmap``.

    Args:
        m, n: matrix size.
        r: rank, ``1 <= r <= min(m, n)``.

    Example:
        >>> import torch
        >>> from shared_core.manifolds import FixedRankEmbedded
        >>> E = FixedRankEmbedded(6, 5, 2)
        >>> g = torch.Generator().manual_seed(0)
        >>> x = E.random_point(generator=g, dtype=torch.float64)
        >>> Z = torch.randn(6, 5, generator=g, dtype=torch.float64)
        >>> y = E.retr(x, E.egrad2rgrad(x, -0.1 * Z))
        >>> int(torch.linalg.matrix_rank(E.to_dense(y)))
        2
    """

    def __init__(self, m: int, n: int, r: int):
        self.m = positive_int("m", m)
        self.n = positive_int("n", n)
        self.r = positive_int("r", r)
        if r > min(m, n):
            raise ValueError(f"{type(self).__name__} needs r <= min(m, n); got m={m}, n={n}, r={r}")

    def __repr__(self) -> str:
        return f"{type(self).__name__}(m={self.m}, n={self.n}, r={self.r})"

    @property
    def dim(self) -> int:
        return (self.m + self.n - self.r) * self.r

    # ------------------------------------------------------------------ views
    def to_dense(self, x: SVDPoint) -> Tensor:
        """The matrix ``U S V^T`` (..., m, n)."""
        self._guard(x)
        return x[0] @ x[1] @ x[2].mT

    def tangent_to_dense(self, x: SVDPoint, u: SVDTangent) -> Tensor:
        """The ambient matrix ``U M V^T + Up V^T + U Vp^T`` of a tangent triple at ``x``."""
        self._guard(x, u)
        uu, _, vv = x
        return (uu @ u[0] + u[1]) @ vv.mT + uu @ u[2].mT

    @staticmethod
    def _times_v(x, u, w: Tensor) -> Tensor:
        """``xi W`` for the triple ``u`` at ``x`` without forming ``xi``."""
        uu, _, vv = x
        vw = vv.mT @ w
        return uu @ (u[0] @ vw + u[2].mT @ w) + u[1] @ vw

    @staticmethod
    def _times_u(x, u, z: Tensor) -> Tensor:
        """``xi^T Z`` for the triple ``u`` at ``x`` without forming ``xi``."""
        uu, _, vv = x
        uz = uu.mT @ z
        return vv @ (u[0].mT @ uz + u[1].mT @ z) + u[2] @ uz

    @staticmethod
    def _from_products(x, zv: Tensor, ztu: Tensor) -> SVDTangent:
        uu, _, vv = x
        m = uu.mT @ zv
        return SVDTangent(m, zv - uu @ m, ztu - vv @ m.mT)

    # ------------------------------------------------------------------ geometry
    def _proj(self, x) -> SVDPoint:
        r = self.r
        if isinstance(x, Tensor):
            u, s, vh = torch.linalg.svd(x, full_matrices=False)
            return SVDPoint(u[..., :r], torch.diag_embed(s[..., :r]), vh[..., :r, :].mT)
        qu, ru = qr_positive(x[0])
        qv, rv = qr_positive(x[2])
        w, s, zh = torch.linalg.svd(ru @ x[1] @ rv.mT)
        return SVDPoint(qu @ w, torch.diag_embed(s), qv @ zh.mT)

    def _proju(self, x, u) -> SVDTangent:
        uu, _, vv = x
        if isinstance(u, Tensor):
            return self._from_products(x, u @ vv, u.mT @ uu)
        return SVDTangent(u[0], u[1] - uu @ (uu.mT @ u[1]), u[2] - vv @ (vv.mT @ u[2]))

    def _retr(self, x, u) -> SVDPoint:
        if isinstance(u, Tensor):
            u = self._proju(x, u)
        uu, s, vv = x
        r = self.r
        qa, ra = torch.linalg.qr(torch.cat([uu, u[1]], dim=-1))
        qb, rb = torch.linalg.qr(torch.cat([vv, u[2]], dim=-1))
        eye = eye_like(s, r).expand_as(s)
        core = torch.cat(
            [
                torch.cat([s + u[0], eye], dim=-1),
                torch.cat([eye, torch.zeros_like(s)], dim=-1),
            ],
            dim=-2,
        )
        w, sig, zh = torch.linalg.svd(ra @ core @ rb.mT)
        return SVDPoint(qa @ w[..., :r], torch.diag_embed(sig[..., :r]), qb @ zh[..., :r, :].mT)

    def _expmap(self, x, u):
        raise NoClosedFormError(
            f"{self!r}: geodesics of the embedded fixed-rank manifold have no closed form; "
            "use retr(x, u) (truncated SVD of X + u)"
        )

    def _transp(self, x, y, v) -> SVDTangent:
        if isinstance(v, Tensor):
            return self._proju(y, v)
        return self._from_products(y, self._times_v(x, v, y[2]), self._times_u(x, v, y[0]))

    def _inner(self, x, u, v) -> Tensor:
        dense_u, dense_v = isinstance(u, Tensor), isinstance(v, Tensor)
        if dense_u and dense_v:
            return sum_last(u * v, 2)
        if not dense_u and not dense_v:
            return sum(sum_last(a * b, 2) for a, b in zip(u, v, strict=True))
        if dense_u:
            u, v = v, u
        # <U M V^T + Up V^T + U Vp^T, Z> with no dense product formed.
        uu, _, vv = x
        zv = v @ vv
        return (
            sum_last(u[0] * (uu.mT @ zv), 2)
            + sum_last(u[1] * zv, 2)
            + sum_last(u[2] * (v.mT @ uu), 2)
        )

    def _egrad2rgrad(self, x, egrad) -> SVDTangent:
        return self._proju(x, egrad)

    def _random_point(self, batch, generator, dtype, device) -> SVDPoint:
        u = haar_stiefel(batch, self.m, self.r, generator, dtype, device)
        v = haar_stiefel(batch, self.n, self.r, generator, dtype, device)
        s = randn((*batch, self.r), generator, dtype, device).mul(0.5).exp()
        s = torch.sort(s, dim=-1, descending=True).values
        return SVDPoint(u, torch.diag_embed(s), v)

    def _random_tangent(self, x, generator) -> SVDTangent:
        uu, s, vv = x
        raw = SVDTangent(
            randn(s.shape, generator, s.dtype, s.device),
            randn(uu.shape, generator, uu.dtype, uu.device),
            randn(vv.shape, generator, vv.dtype, vv.device),
        )
        return self._proju(x, raw)

    def _zero_tangent(self, x) -> SVDTangent:
        return SVDTangent(torch.zeros_like(x[1]), torch.zeros_like(x[0]), torch.zeros_like(x[2]))

    def _structure_message(self, obj: object, what: str = "point") -> str | None:
        name = "SVDPoint" if what == "point" else "SVDTangent"
        return _pair_message(obj, what, name, 3)

    def _shapes(self, x, what: str, names, trailing) -> str | None:
        for t, name, shape in zip(x, names, trailing, strict=True):
            msg = shape_error(t, shape, f"{what} part {name}") or finite_error(t, name)
            if msg is not None:
                return msg
        batches = {tuple(t.shape[:-2]) for t in x}
        if len(batches) > 1:
            return f"the parts of the {what} must share batch dims; got {sorted(batches)}"
        return None

    def _point_error(self, x, atol: float, rtol: float) -> str | None:
        m, n, r = self.m, self.n, self.r
        msg = self._shapes(x, "point", ("U", "S", "V"), ((m, r), (r, r), (n, r)))
        if msg is not None:
            return msg
        uu, s, vv = x
        return (
            exceeds(orthonormality_error(uu, r), atol, "max |U^T U - I|")
            or exceeds(orthonormality_error(vv, r), atol, "max |V^T V - I|")
            or _rank_message(s, r, "S")
        )

    def _tangent_error(self, x, u, atol: float, rtol: float) -> str | None:
        m, n, r = self.m, self.n, self.r
        msg = self._shapes(x, "point", ("U", "S", "V"), ((m, r), (r, r), (n, r)))
        msg = msg or self._shapes(u, "tangent vector", ("M", "Up", "Vp"), ((r, r), (m, r), (n, r)))
        if msg is None and u[0].shape[:-2] != x[0].shape[:-2]:
            msg = "the tangent vector's batch dims must match the point's"
        if msg is not None:
            return msg
        uu, _, vv = x
        err_u = (uu.mT @ u[1]).abs().amax(dim=(-2, -1))
        err_v = (vv.mT @ u[2]).abs().amax(dim=(-2, -1))
        bound_u = atol + rtol * u[1].abs().amax(dim=(-2, -1))
        bound_v = atol + rtol * u[2].abs().amax(dim=(-2, -1))
        return exceeds(err_u, bound_u, "max |U^T Up| (Up not orthogonal to U)") or exceeds(
            err_v, bound_v, "max |V^T Vp| (Vp not orthogonal to V)"
        )
