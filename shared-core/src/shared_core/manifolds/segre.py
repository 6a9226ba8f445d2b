r"""The Segre manifold: nonzero rank-one tensors :math:`\lambda\, u_1 \otimes \dots \otimes u_d`.

Points are stored as a scale and unit factors, so memory is :math:`O(\sum_k n_k)`; the dense
``n_1 x ... x n_d`` tensor is formed only when asked (:meth:`Segre.to_dense`).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
from torch import Tensor

from ._linalg import randn
from .base import Manifold, exceeds, finite_error, positive_int

__all__ = ["CPTensor", "Segre", "SegrePoint", "SegreTangent"]

_LETTERS = "abcdefghijklmnopqrstuvwxyz"


class SegrePoint(NamedTuple):
    r"""A point :math:`X = \lambda\, u_1 \otimes \dots \otimes u_d`.

    ``scale`` has shape ``(..., 1)`` (``lambda > 0``), ``factors[k]`` shape ``(..., n_k)``
    with unit norm. The representative is unique up to flipping the signs of an even number
    of factors.
    """

    scale: Tensor
    factors: tuple[Tensor, ...]


class SegreTangent(NamedTuple):
    r"""A tangent vector :math:`\mu\, u_1 \otimes\dots\otimes u_d + \sum_k u_1 \otimes\dots
    \otimes w_k \otimes\dots\otimes u_d` at the point with factors ``u``, ``w_k \perp u_k``.

    ``scale`` is ``mu`` (shape ``(..., 1)``), ``vecs[k]`` is ``w_k`` (shape ``(..., n_k)``).
    The ``d + 1`` terms are mutually Frobenius-orthogonal, so the Frobenius norm of the
    tangent tensor is :math:`(\mu^2 + \sum_k \|w_k\|^2)^{1/2}`.
    """

    scale: Tensor
    vecs: tuple[Tensor, ...]


class CPTensor(NamedTuple):
    r"""An ambient tensor in CP form :math:`\sum_{j=1}^K c_j\, f_{1j} \otimes\dots\otimes f_{dj}`.

    ``weights`` has shape ``(..., K)``, ``factors[k]`` shape ``(..., n_k, K)``. It lets
    :meth:`Segre.proju` and :meth:`Segre.egrad2rgrad` take a Euclidean gradient such as
    :math:`\mathcal{A}^*(r) = \sum_i r_i\, a_{i1}\otimes\dots\otimes a_{id}` (rank-one sensing
    tensors) without ever forming the dense tensor.
    """

    weights: Tensor
    factors: tuple[Tensor, ...]


def _unsq(s: Tensor) -> Tensor:
    return s.unsqueeze(-1)


def _dot(a: Tensor, b: Tensor) -> Tensor:
    """Batched dot product over the last dim, keeping it as size 1."""
    return (a * b).sum(dim=-1, keepdim=True)


def _cp_of(x: SegrePoint, u: SegreTangent | SegrePoint | CPTensor) -> CPTensor:
    """The CP form of a point, of a tangent tuple read at ``x``, or a CP tensor unchanged."""
    if isinstance(u, CPTensor):
        return u
    if isinstance(u, SegrePoint):
        return CPTensor(u.scale, tuple(_unsq(f) for f in u.factors))
    # A tangent tuple (mu, w): term 0 is mu * (u_1 x ... x u_d), term k is w_k in mode k.
    d = len(x.factors)
    mu, w = u[0], u[1]
    weights = torch.cat([mu, torch.ones_like(mu).expand(*mu.shape[:-1], d)], dim=-1)
    factors = []
    for k, fk in enumerate(x.factors):
        cols = [fk] * (d + 1)
        cols[k + 1] = w[k]
        factors.append(torch.stack(cols, dim=-1))
    return CPTensor(weights, tuple(factors))


def cp_mode_contractions(t: CPTensor, ys: tuple[Tensor, ...]) -> tuple[Tensor, ...]:
    r"""``g_m = T x_{j != m} y_j`` for every mode ``m``, for ``T`` in CP form.

    With :math:`G_j = y_j^T F_j` (one number per CP term), :math:`g_m = F_m\,(c \odot
    \prod_{j\ne m} G_j)`; cost :math:`O(K \sum_k n_k)`, no dense tensor.
    """
    gram = [(y.unsqueeze(-1) * f).sum(dim=-2) for y, f in zip(ys, t.factors, strict=True)]
    out = []
    for m, fm in enumerate(t.factors):
        coef = t.weights
        for j, gj in enumerate(gram):
            if j != m:
                coef = coef * gj
        out.append((fm * coef.unsqueeze(-2)).sum(dim=-1))
    return tuple(out)


def _cp_inner(a: CPTensor, b: CPTensor) -> Tensor:
    """Frobenius inner product of two CP tensors, ``(..., 1)``."""
    gram = a.weights.unsqueeze(-1) * b.weights.unsqueeze(-2)
    for fa, fb in zip(a.factors, b.factors, strict=True):
        gram = gram * (fa.mT @ fb)
    return gram.sum(dim=(-2, -1)).unsqueeze(-1)


def _cp_dense(t: CPTensor) -> Tensor:
    d = len(t.factors)
    letters = _LETTERS[:d]
    spec = ",".join(f"...{c}z" for c in letters)
    return torch.einsum(f"...z,{spec}->...{letters}", t.weights, *t.factors)


def dense_mode_contractions(z: Tensor, ys: tuple[Tensor, ...]) -> tuple[Tensor, ...]:
    """``g_m = Z x_{j != m} y_j`` for a dense ``Z`` of shape ``(..., n_1, ..., n_d)``."""
    d = len(ys)
    letters = _LETTERS[:d]
    out = []
    for m in range(d):
        others = [f"...{letters[j]}" for j in range(d) if j != m]
        spec = ",".join([f"...{letters}", *others])
        out.append(
            torch.einsum(f"{spec}->...{letters[m]}", z, *[ys[j] for j in range(d) if j != m])
        )
    return tuple(out)


_SMALL = 1e-8


def _cos_sqrt(t2: Tensor) -> Tensor:
    """``cos(sqrt(t2))``, smooth at 0."""
    small = t2 < _SMALL
    safe = torch.where(small, torch.ones_like(t2), t2)
    return torch.where(small, 1 - t2 / 2 + t2 * t2 / 24, torch.cos(safe.sqrt()))


def _sinc_sqrt(t2: Tensor) -> Tensor:
    """``sin(t) / t`` at ``t = sqrt(t2)``, smooth at 0."""
    small = t2 < _SMALL
    safe = torch.where(small, torch.ones_like(t2), t2).sqrt()
    return torch.where(small, 1 - t2 / 6 + t2 * t2 / 120, torch.sin(safe) / safe)


def _atan_ratio(s2: Tensor, a: Tensor) -> Tensor:
    """``atan2(s, a) / s`` at ``s = sqrt(s2)``, smooth at ``s = 0`` when ``a > 0``."""
    r = s2 / torch.where(a != 0, a * a, torch.ones_like(a))
    small = (r < _SMALL) & (a > 0)
    safe_s = torch.where(small | (s2 == 0), torch.ones_like(s2), s2).sqrt()
    series = (1 - r / 3 + r * r / 5) / torch.where(a > 0, a, torch.ones_like(a))
    return torch.where(small, series, torch.atan2(safe_s, a) / safe_s)


class Segre(Manifold):
    r"""Nonzero rank-one tensors of shape ``dims`` with the Frobenius (embedded) metric.

    A point is :class:`SegrePoint` ``(scale, factors)``, :math:`X = \lambda \bigotimes_k u_k`,
    ``lambda > 0``, ``|u_k| = 1``; a tangent vector is :class:`SegreTangent` ``(mu, w)``
    (``w_k \perp u_k``). Dimension :math:`1 + \sum_k (n_k - 1)`. Ambient vectors may be dense
    tensors ``(..., n_1, ..., n_d)``, :class:`CPTensor` or tangent-shaped tuples read at ``x``.

    Geometry (derived in the docstrings of the methods it uses):

    - ``proju(x, Z)``: with :math:`g_k = Z \times_{j\ne k} u_j`,
      :math:`\mu = \langle g_k, u_k\rangle`, :math:`w_k = g_k - \mu u_k`. The image is the
      span of :math:`\otimes u` and the single-mode variations, which are orthonormal
      directions, so this is the Frobenius-orthogonal projection; ``egrad2rgrad`` is it.
    - metric: Frobenius on the dense forms (``inner`` computes it for any mix of forms without
      forming dense tensors when both are factored).
    - The Frobenius metric in the coordinates :math:`(\lambda, u_1, ..., u_d)` is
      :math:`d\lambda^2 + \lambda^2 \sum_k |du_k|^2`: the Segre manifold is the metric cone
      over the product of unit spheres, divided by the even sign flips. Hence closed forms:
      ``expmap`` is the straight line in the flat 2-D cone section (radius ``|lambda + mu +
      i|w||``, angle ``phi = atan2(|w|, lambda + mu)``, factors moved along great circles by
      ``phi |w_k| / |w|``), and
      ``dist(x, y)^2 = lambda^2 + rho^2 - 2 lambda rho cos(min(Theta, pi))`` with ``Theta`` the
      product-of-spheres distance between the factors, minimised over even sign flips.
      ``logmap`` inverts ``expmap`` for ``Theta < pi``. A geodesic through the apex (``w = 0``,
      ``lambda + mu <= 0``) leaves the manifold; ``expmap`` is not defined there.
    - ``retr``: ``"hosvd"`` (default) is the rank-one truncated HOSVD of ``X + xi``: each
      unfolding of ``X + xi`` has rank 2 with column space ``span(u_k, w_k)``, so its top left
      singular vector comes from a 2 x 2 eigenproblem in closed form; the scale is the full
      contraction of ``X + xi`` with the new factors. ``"factor"`` is the normalised factor
      update :math:`(\lambda+\mu) \bigotimes_k (u_k + w_k/\lambda)` (normalised). Both are
      first-order retractions; neither forms a dense tensor.
    - ``proj``: a :class:`SegrePoint` is renormalised; a dense tensor gets its rank-one
      truncated HOSVD refined by ``proj_sweeps`` higher-order power (ALS) sweeps, the metric
      projection for ``d = 2`` (the SVD) and a local one otherwise (the best rank-one
      approximation of a general tensor is NP-hard).
    - ``transp(x, y, v) = proju(y, v)`` with ``v`` read at ``x``, in factored form.
    - :meth:`ehess2rhess`: the Riemannian Hessian of a submanifold,
      :math:`P_x(\nabla^2 f[\xi]) + P_x(\mathrm{D}P_x[\xi]\,\nabla f)`, for dense Euclidean
      gradients (small sizes).

    Args:
        dims: the tensor shape ``(n_1, ..., n_d)``, ``d >= 2`` and each ``n_k >= 2`` (a mode
            of size 1 carries only a sign; drop it).
        retraction: ``"hosvd"`` or ``"factor"``.
        proj_sweeps: power sweeps after the HOSVD in :meth:`proj` of a dense tensor.

    Example:
        >>> import torch
        >>> from shared_core.manifolds import Segre
        >>> M = Segre((4, 3, 5))
        >>> g = torch.Generator().manual_seed(0)
        >>> x = M.random_point(generator=g, dtype=torch.float64)
        >>> Z = torch.randn(4, 3, 5, generator=g, dtype=torch.float64)
        >>> y = M.retr(x, M.egrad2rgrad(x, -0.1 * Z))
        >>> M.is_point(y), M.dim
        (True, 10)
    """

    _point_ndim = 1

    def __init__(self, dims, retraction: str = "hosvd", proj_sweeps: int = 20):
        try:
            dims = tuple(dims)
        except TypeError:
            raise ValueError(f"dims must be a sequence of ints, got {dims!r}") from None
        if len(dims) < 2:
            raise ValueError(
                f"Segre needs at least 2 modes, got dims={dims!r} (order-1 'rank-one tensors' "
                "are all nonzero vectors; use Euclidean)"
            )
        for k, n in enumerate(dims):
            positive_int(f"dims[{k}]", n)
            if n < 2:
                raise ValueError(
                    f"dims[{k}] = {n}: every mode needs size >= 2 (a size-1 mode only carries "
                    f"a sign; drop it); got dims={dims!r}"
                )
        if retraction not in ("hosvd", "factor"):
            raise ValueError(f"unknown retraction {retraction!r}; expected one of hosvd, factor")
        if isinstance(proj_sweeps, bool) or not isinstance(proj_sweeps, int) or proj_sweeps < 0:
            raise ValueError(f"proj_sweeps must be an integer >= 0, got {proj_sweeps!r}")
        self.dims = dims
        self.retraction = retraction
        self.proj_sweeps = proj_sweeps

    def __repr__(self) -> str:
        extra = "" if self.retraction == "hosvd" else f", retraction={self.retraction!r}"
        return f"Segre(dims={self.dims}{extra})"

    @property
    def order(self) -> int:
        """The number of modes ``d``."""
        return len(self.dims)

    @property
    def dim(self) -> int:
        return 1 + sum(n - 1 for n in self.dims)

    def batch_shape(self, x) -> torch.Size:
        if isinstance(x, Tensor):
            return x.shape[: x.ndim - self.order]
        return x[0].shape[:-1]

    # ------------------------------------------------------------------ views
    def to_dense(self, x: SegrePoint) -> Tensor:
        """The dense tensor ``lambda u_1 x ... x u_d`` (..., n_1, ..., n_d)."""
        self._guard(x)
        return _cp_dense(_cp_of(x, SegrePoint(x[0], tuple(x[1]))))

    def tangent_to_dense(self, x: SegrePoint, u) -> Tensor:
        """The dense tensor of a tangent tuple (or :class:`CPTensor`) read at ``x``."""
        self._guard(x, u)
        return _cp_dense(_cp_of(x, u))

    def to_cp(self, x: SegrePoint, u=None) -> CPTensor:
        """The CP form of the point ``x`` (``u=None``, one term) or of a tangent tuple ``u``
        read at ``x`` (``d + 1`` terms: ``mu`` on ``u_1 x ... x u_d``, then ``w_k`` in mode
        ``k``)."""
        if u is None:
            self._guard(x)
            return _cp_of(x, SegrePoint(x[0], tuple(x[1])))
        self._guard(x, u)
        return _cp_of(x, u)

    def contract(self, x: SegrePoint, z) -> tuple[Tensor, ...]:
        """``g_k = Z x_{j != k} u_j`` for an ambient ``Z`` (dense, CP, or tangent tuple)."""
        self._guard(x, z)
        return self._contractions(x, z)

    def _contractions(self, x, z) -> tuple[Tensor, ...]:
        if isinstance(z, Tensor):
            return dense_mode_contractions(z, tuple(x[1]))
        return cp_mode_contractions(_cp_of(x, z), tuple(x[1]))

    def tangent_from_contractions(self, x: SegrePoint, gs) -> SegreTangent:
        """The projection ``P_x(Z)`` from the contractions ``g_k = Z x_{j != k} u_j``.

        ``mu = <g_1, u_1>`` (the full contraction; equal for every ``k``) and
        ``w_k = g_k - <g_k, u_k> u_k``.
        """
        self._guard(x, tuple(gs))
        return self._from_contractions(x, gs)

    @staticmethod
    def _from_contractions(x, gs) -> SegreTangent:
        us = x[1]
        mu = _dot(gs[0], us[0])
        vecs = tuple(g - _dot(g, u) * u for g, u in zip(gs, us, strict=True))
        return SegreTangent(mu, vecs)

    # ------------------------------------------------------------------ geometry
    def _normalise(self, scale: Tensor, factors) -> SegrePoint:
        norms = [f.norm(dim=-1, keepdim=True) for f in factors]
        s = scale
        for nrm in norms:
            s = s * nrm
        sign = torch.where(s < 0, -torch.ones_like(s), torch.ones_like(s))
        facs = [f / nrm for f, nrm in zip(factors, norms, strict=True)]
        facs[0] = facs[0] * sign
        return SegrePoint(s.abs(), tuple(facs))

    def _proj(self, x) -> SegrePoint:
        if not isinstance(x, Tensor):
            return self._normalise(x[0], x[1])
        d = self.order
        if x.ndim < d or tuple(x.shape[-d:]) != self.dims:
            raise ValueError(f"{self!r}: a dense tensor must have shape (..., {self.dims})")
        batch = x.shape[: x.ndim - d]
        nrm = x.reshape(*batch, -1).norm(dim=-1)
        if bool((nrm == 0).any()) or not bool(torch.isfinite(nrm).all()):
            raise ValueError(
                f"{self!r}: proj of a zero or non-finite tensor: the zero tensor has no rank-one "
                "approximation on the Segre manifold (which excludes 0)"
            )
        factors = []
        nb = len(batch)
        for k in range(d):
            unf = x.movedim(nb + k, nb).reshape(*batch, self.dims[k], -1)
            left = torch.linalg.svd(unf, full_matrices=False)[0][..., 0]
            factors.append(left)
        for _ in range(self.proj_sweeps):
            for k in range(d):
                g = dense_mode_contractions(x, tuple(factors))[k]
                gn = g.norm(dim=-1, keepdim=True)
                factors[k] = torch.where(gn > 0, g / torch.where(gn > 0, gn, 1.0), factors[k])
        scale = _dot(dense_mode_contractions(x, tuple(factors))[0], factors[0])
        return self._normalise(scale, factors)

    def _proju(self, x, u) -> SegreTangent:
        return self._from_contractions(x, self._contractions(x, u))

    def _retr(self, x, u) -> SegrePoint:
        if isinstance(u, Tensor | CPTensor):
            u = self._proju(x, u)
        lam, us = x
        mu, ws = u[0], u[1]
        if self.retraction == "factor":
            safe = torch.where(lam > 0, lam, torch.ones_like(lam))
            facs = [uk + wk / safe for uk, wk in zip(us, ws, strict=True)]
            return self._normalise(lam + mu, facs)
        a0 = lam + mu
        sq = [_dot(w, w) for w in ws]
        total = sum(sq)
        facs = []
        for uk, wk, s2 in zip(us, ws, sq, strict=True):
            # Gram of the mode unfolding in the basis (u_k, w_k/|w_k|):
            # [[a0^2 + sum_{l != k} |w_l|^2, a0 |w_k|], [a0 |w_k|, |w_k|^2]].
            s = s2.sqrt()
            p = a0 * a0 + total - s2
            theta = 0.5 * torch.atan2(2 * a0 * s, p - s2)
            safe = torch.where(s > 0, s, torch.ones_like(s))
            facs.append(torch.cos(theta) * uk + torch.sin(theta) * wk / safe)
        gs = cp_mode_contractions(_cp_of(x, SegreTangent(mu + lam, tuple(ws))), tuple(facs))
        return self._normalise(_dot(gs[0], facs[0]), facs)

    def _expmap(self, x, u) -> SegrePoint:
        # Written with squared norms and series near 0 so that it is smooth (and autograd
        # gives finite derivatives) at a zero step: theta_k = phi |w_k| / |w| with
        # phi / |w| = atan2(|w|, lambda + mu) / |w|, and sin(theta_k) / |w_k| =
        # sinc(theta_k) * phi / |w|.
        lam, us = x
        mu, ws = u[0], u[1]
        wsq = [_dot(w, w) for w in ws]
        wtot2 = sum(wsq)
        a0 = lam + mu
        radius = torch.sqrt(a0 * a0 + wtot2)
        ratio = _atan_ratio(wtot2, a0)
        facs = []
        for uk, wk, sk in zip(us, ws, wsq, strict=True):
            t2 = ratio * ratio * sk
            facs.append(_cos_sqrt(t2) * uk + (_sinc_sqrt(t2) * ratio) * wk)
        return self._normalise(radius, facs)

    def _aligned(self, x, y):
        """Angles between factors of x and sign-aligned factors of y (even flips only)."""
        us, vs = x[1], y[1]
        cos = torch.cat([_dot(u, v) for u, v in zip(us, vs, strict=True)], dim=-1)
        perp = [v - _dot(u, v) * u for u, v in zip(us, vs, strict=True)]
        sin = torch.cat([p.norm(dim=-1, keepdim=True) for p in perp], dim=-1)
        alpha = torch.atan2(sin, cos)  # in [0, pi]
        flip = alpha > math.pi / 2
        odd = (flip.sum(dim=-1, keepdim=True) % 2) == 1
        # With an odd count, toggle the mode whose choice costs least to change.
        delta = ((math.pi - alpha) ** 2 - alpha**2).abs()
        toggle = torch.nn.functional.one_hot(delta.argmin(dim=-1), len(us)).bool()
        flip = flip ^ (toggle & odd)
        theta = torch.where(flip, math.pi - alpha, alpha)
        signs = torch.where(flip, -torch.ones_like(alpha), torch.ones_like(alpha))
        return theta, signs, perp

    def _logmap(self, x, y) -> SegreTangent:
        lam, us = x
        rho = y[0]
        theta, signs, perp = self._aligned(x, y)
        big = (theta * theta).sum(dim=-1, keepdim=True).sqrt()
        mu = rho * torch.cos(big) - lam
        wtot = rho * torch.sin(big)
        safe_big = torch.where(big > 0, big, torch.ones_like(big))
        vecs = []
        for k, _uk in enumerate(us):
            # s_k v_k - cos(theta_k) u_k = s_k * (v_k - <u_k, v_k> u_k): direction of w_k.
            dirk = signs[..., k : k + 1] * perp[k]
            nrm = dirk.norm(dim=-1, keepdim=True)
            safe = torch.where(nrm > 0, nrm, torch.ones_like(nrm))
            vecs.append(wtot * theta[..., k : k + 1] / safe_big * dirk / safe)
        return SegreTangent(mu, tuple(vecs))

    def _dist(self, x, y) -> Tensor:
        theta = self._aligned(x, y)[0]
        big = (theta * theta).sum(dim=-1).sqrt().clamp_max(math.pi)
        lam, rho = x[0][..., 0], y[0][..., 0]
        sq = (lam - rho) ** 2 + 2 * lam * rho * (1 - torch.cos(big))
        return sq.clamp_min(0).sqrt()

    def _transp(self, x, y, v) -> SegreTangent:
        if isinstance(v, Tensor):
            return self._proju(y, v)
        return self._from_contractions(y, cp_mode_contractions(_cp_of(x, v), tuple(y[1])))

    def _inner(self, x, u, v) -> Tensor:
        if isinstance(u, Tensor) and isinstance(v, Tensor):
            return (u * v).sum(dim=tuple(range(-self.order, 0)))
        if isinstance(u, Tensor):
            u, v = v, u
        cu = _cp_of(x, u)
        if isinstance(v, Tensor):
            # <CP, Z>: contract Z with all modes but the first, then with the first factor.
            d = self.order
            letters = _LETTERS[:d]
            spec = ",".join(f"...{c}z" for c in letters)
            return torch.einsum(f"...{letters},...z,{spec}->...", v, cu.weights, *cu.factors)
        return _cp_inner(cu, _cp_of(x, v))[..., 0]

    def _egrad2rgrad(self, x, egrad) -> SegreTangent:
        return self._proju(x, egrad)

    def ehess2rhess(self, x: SegrePoint, egrad: Tensor, ehess: Tensor, u: SegreTangent):
        r"""The Riemannian Hessian-vector product from Euclidean ones (dense, small sizes).

        For a Riemannian submanifold, :math:`\mathrm{Hess} f(x)[\xi] = P_x(\nabla^2 f(x)[\xi])
        + P_x(\mathrm{D}_\xi P_x(\nabla f(x)))`; the second (Weingarten) term is the
        derivative of the projection along the curve :math:`t \mapsto \exp_x(t\xi)`, taken
        here by autodiff (``torch.autograd.functional.jvp``).

        Args:
            x: a point (unbatched or batched).
            egrad: the dense Euclidean gradient at ``x``.
            ehess: the dense Euclidean Hessian applied to the dense form of ``u``.
            u: a tangent vector at ``x``.

        Returns:
            The :class:`SegreTangent` ``Hess f(x)[u]``.
        """
        self._guard(x, egrad, ehess, u)
        x = SegrePoint(x[0], tuple(x[1]))
        u = SegreTangent(u[0], tuple(u[1]))

        def projected(t: Tensor) -> Tensor:
            y = self._expmap(x, SegreTangent(t * u[0], tuple(t * w for w in u[1])))
            return self.tangent_to_dense(y, self._proju(y, egrad))

        zero = torch.zeros((), dtype=x[0].dtype, device=x[0].device)
        _, dproj = torch.autograd.functional.jvp(projected, zero, torch.ones_like(zero))
        first = self._proju(x, ehess)
        second = self._proju(x, dproj)
        vecs = tuple(a + b for a, b in zip(first[1], second[1], strict=True))
        return SegreTangent(first[0] + second[0], vecs)

    def _random_point(self, batch, generator, dtype, device) -> SegrePoint:
        # Factors uniform on their spheres; scale 1 + |N(0, 1)| keeps unit steps away from
        # the apex of the cone.
        facs = []
        for n in self.dims:
            f = randn((*batch, n), generator, dtype, device)
            facs.append(f / f.norm(dim=-1, keepdim=True))
        scale = 1 + randn((*batch, 1), generator, dtype, device).abs()
        return SegrePoint(scale, tuple(facs))

    def _random_tangent(self, x, generator) -> SegreTangent:
        lam, us = x
        raw = SegreTangent(
            randn(lam.shape, generator, lam.dtype, lam.device),
            tuple(randn(u.shape, generator, u.dtype, u.device) for u in us),
        )
        return self._proju(x, raw)

    def _zero_tangent(self, x) -> SegreTangent:
        return SegreTangent(torch.zeros_like(x[0]), tuple(torch.zeros_like(u) for u in x[1]))

    # ------------------------------------------------------------------ checks
    def _structure_message(self, obj: object, what: str = "point") -> str | None:
        name = "SegrePoint" if what == "point" else "SegreTangent"
        if not isinstance(obj, tuple) or len(obj) != 2 or not isinstance(obj[1], tuple | list):
            return f"the {what} must be a {name} (scale, tuple of {self.order} factor tensors)"
        if not isinstance(obj[0], Tensor) or not all(isinstance(t, Tensor) for t in obj[1]):
            return f"the {what} must hold torch.Tensors"
        if len(obj[1]) != self.order:
            return f"the {what} needs {self.order} factors, got {len(obj[1])}"
        return None

    def _shape_message(self, x, what: str) -> str | None:
        scale, facs = x
        if scale.ndim < 1 or scale.shape[-1] != 1:
            return f"{what} scale must have shape (..., 1); got {tuple(scale.shape)}"
        batch = scale.shape[:-1]
        for k, (f, n) in enumerate(zip(facs, self.dims, strict=True)):
            if tuple(f.shape) != (*batch, n):
                return (
                    f"{what} factor {k} must have shape {(*batch, n)} (batch {tuple(batch)}, "
                    f"size {n}); got {tuple(f.shape)}"
                )
        msg = finite_error(scale, f"{what} scale")
        for k, f in enumerate(facs):
            msg = msg or finite_error(f, f"{what} factor {k}")
        return msg

    def _point_error(self, x, atol: float, rtol: float) -> str | None:
        msg = self._shape_message(x, "point")
        if msg is not None:
            return msg
        scale, facs = x
        if not bool((scale > 0).all()):
            return (
                f"scale = {float(scale.min()):.3g}; it must be > 0 (the zero tensor is not on the "
                "Segre manifold, and signs live in the factors)"
            )
        for k, f in enumerate(facs):
            err = (f.norm(dim=-1) - 1).abs()
            msg = exceeds(err, atol, f"| |u_{k}| - 1 |")
            if msg is not None:
                return msg
        return None

    def _tangent_error(self, x, u, atol: float, rtol: float) -> str | None:
        msg = self._shape_message(x, "point") or self._shape_message(u, "tangent vector")
        if msg is not None:
            return msg
        for k, (uk, wk) in enumerate(zip(x[1], u[1], strict=True)):
            err = _dot(uk, wk)[..., 0].abs()
            bound = atol + rtol * wk.norm(dim=-1)
            msg = exceeds(err, bound, f"|<u_{k}, w_{k}>| (w_{k} not orthogonal to u_{k})")
            if msg is not None:
                return msg
        return None
