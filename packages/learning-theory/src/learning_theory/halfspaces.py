r"""Halfspaces :math:`1[w\cdot x + b > 0]` in :math:`\mathbb R^d` through their support set.

The hard-margin SVM of a separable sample,

.. math:: \min_{w, b} \tfrac12\|w\|^2 \quad\text{s.t.}\quad s_i(w\cdot x_i + b) \ge 1,
          \qquad s_i = 2y_i - 1,

has a unique solution, and its KKT conditions say: :math:`w = \sum_i \alpha_i s_i x_i`,
:math:`\sum_i \alpha_i s_i = 0`, :math:`\alpha \ge 0`, and :math:`\alpha_i > 0` only where the
constraint is tight. The optimum is found geometrically: :math:`w = 2u/\|u\|^2` for the
shortest vector :math:`u = p - q` between the convex hulls of the positive and the negative
points, which Wolfe's min-norm-point algorithm (:func:`min_norm_point`) finds exactly on the
difference set
:math:`\{x_i - x_j\}`. Its convex weights are the multipliers (scaled by
:math:`2/\|u\|^2`), all on tight points, and Carathéodory elimination on the vectors
:math:`(s_i x_i, s_i) \in \mathbb R^{d+1}` leaves at most :math:`d + 1` of them without changing
:math:`w` or :math:`\sum_i \alpha_i s_i` (in any position, general or not).

**Compression** keeps that support set :math:`S` (at most :math:`d + 1` points).
**Reconstruction** solves the same problem on the kept points alone. It returns the same
hyperplane: the full-sample multipliers satisfy the KKT conditions of the kept points' problem
(every kept point is tight, the multipliers are non-negative and sum to zero against the
labels), and that problem has one optimum. The kept hyperplane separates the whole sample with
margin 1, so the reconstruction is consistent with it.
"""

from __future__ import annotations

import numpy as np

from .compression import Compressed, CompressionScheme, _const

__all__ = ["HalfspaceScheme", "max_margin_halfspace", "min_norm_point"]

_TOL = 1e-9


def min_norm_point(
    points: np.ndarray, max_iter: int = 10_000
) -> tuple[np.ndarray, dict[int, float]]:
    """Wolfe's algorithm: the point of ``conv(points)`` nearest the origin, exactly.

    Keeps a corral S (affinely independent points) and convex weights on it: add the point
    most opposed to the current x, move to the affine minimiser of S, and where that leaves the
    hull, step back to its boundary and drop the points whose weight reached zero. Finite.

    Returns:
        ``x`` and its convex weights ``{index: weight > 0}``.
    """
    p = np.asarray(points, dtype=np.float64)
    # Stopping rule, relative (no absolute constant: the answer must not depend on the units
    # of the points): the duality gap x.x - min_j p_j.x is below 1e-12 of x.x, or below the
    # round-off of the products themselves (~ a few eps * |x| * max |p_j|), whichever is larger.
    radius = float(np.sqrt((p**2).sum(1).max()))
    floor = 64 * np.finfo(np.float64).eps * radius
    start = int((p**2).sum(1).argmin())
    corral, lam = [start], np.array([1.0])
    best = np.inf
    for _ in range(max_iter):
        x = lam @ p[corral]
        j = int((p @ x).argmin())
        xx = float(x @ x)
        gap = xx - float(p[j] @ x)
        # In exact arithmetic every major cycle strictly shortens x. A cycle that does not (an
        # affinely dependent corral, e.g. the parallelogram p_a - q_a, p_a - q_b, p_b - q_a,
        # p_b - q_b of a 2 x 2 difference set, re-adding and dropping the same point) means x
        # is already optimal to round-off: stop rather than cycle.
        if gap <= max(1e-12 * xx, floor * np.sqrt(xx)) or j in corral or xx >= best:
            return x, dict(zip(corral, lam.tolist(), strict=True))
        best = xx
        corral.append(j)
        lam = np.append(lam, 0.0)
        while True:
            ps = p[corral]
            k = len(corral)
            sys_ = np.zeros((k + 1, k + 1))
            sys_[:k, :k] = ps @ ps.T
            sys_[:k, k] = 1.0
            sys_[k, :k] = 1.0
            mu = np.linalg.lstsq(sys_, np.concatenate([np.zeros(k), [1.0]]), rcond=None)[0][:k]
            if (mu > 1e-12).all():
                lam = mu
                break
            neg = mu <= 1e-12
            theta = min(1.0, float(np.min(lam[neg] / (lam[neg] - mu[neg]))))
            lam = theta * mu + (1 - theta) * lam
            keep = lam > 1e-12
            corral = [c for c, kp in zip(corral, keep, strict=True) if kp]
            lam = lam[keep] / lam[keep].sum()
    raise ValueError(
        f"min_norm_point did not converge in {max_iter} iterations (numerically degenerate points?)"
    )


def _caratheodory(alpha: np.ndarray, vecs: np.ndarray) -> np.ndarray:
    """Non-negative weights with the same ``alpha @ vecs`` on at most ``vecs.shape[1]`` rows."""
    alpha = alpha.copy()
    while True:
        live = np.flatnonzero(alpha > 0)
        if live.size <= vecs.shape[1]:
            return alpha
        # A null vector z of the live rows (they are dependent): move alpha - t z until one
        # weight reaches zero; the weighted sum does not change.
        z = np.linalg.svd(vecs[live].T)[2][-1]
        if z.max() <= 0:
            z = -z
        ratios = np.where(z > 0, alpha[live] / np.where(z > 0, z, 1.0), np.inf)
        k = int(ratios.argmin())
        alpha[live] -= ratios[k] * z
        alpha[live[k]] = 0.0
        alpha[alpha < 0] = 0.0


def max_margin_halfspace(
    x: np.ndarray, y: np.ndarray
) -> tuple[np.ndarray, float, list[int]] | None:
    """Hard-margin SVM ``(w, b, support)`` of a two-class sample, or None if not separable.

    The margin-maximising direction is the shortest vector ``u = p - q`` between the convex
    hulls of the positives and the negatives (Wolfe's algorithm on their difference set), and
    ``w = 2u / |u|^2``. Wolfe's convex weights give non-negative multipliers ``alpha`` with
    ``w = sum alpha_i s_i x_i`` and ``sum alpha_i s_i = 0``, carried by tight points;
    Carathéodory elimination on the vectors ``(s_i x_i, s_i)`` keeps at most ``d + 1`` of them
    without changing ``w``: the support set.

    Args:
        x: (m, d) points.
        y: (m,) labels in {0, 1}, both present.

    Returns:
        ``w`` (d,), ``b`` and the sorted support indices (at most ``d + 1``), with
        ``(2y - 1)(z w' + b') >= 1 - 1e-7`` for every point in the centred, unit-radius
        coordinates ``z = (x - t) / c`` the problem is solved in (``w = w' / c``): the margin
        in the caller's units is that of the data, at any scale.
    """
    x_in = np.asarray(x, dtype=np.float64)
    s = 2.0 * np.asarray(y, dtype=np.float64) - 1.0
    pos, neg = np.flatnonzero(s > 0), np.flatnonzero(s < 0)
    if pos.size == 0 or neg.size == 0:
        raise ValueError("max_margin_halfspace needs both labels in the sample")
    # The max-margin hyperplane is equivariant under x -> (x - t) / c, so solve it on centred
    # points of unit radius: every tolerance below is then relative, and the support set the
    # same at any scale or offset of the data (tested over 1e-8..1e8).
    centre = x_in.mean(0)
    radius = float(np.sqrt(((x_in - centre) ** 2).sum(1).max()))
    if radius == 0.0 or not np.isfinite(radius):
        return None  # all points equal (both labels present): not separable
    x = (x_in - centre) / radius
    diff = (x[pos, None, :] - x[None, neg, :]).reshape(-1, x.shape[1])
    u, weights = min_norm_point(diff)
    uu = float(u @ u)
    # hulls closer than the round-off of the unit-radius differences touch: not separable
    if np.sqrt(uu) <= 64 * np.finfo(np.float64).eps:
        return None
    alpha = np.zeros(x.shape[0])
    for k, lam in weights.items():
        i, j = divmod(k, neg.size)
        alpha[pos[i]] += lam
        alpha[neg[j]] += lam
    alpha *= 2.0 / uu
    w = 2.0 * u / uu
    alpha = _caratheodory(alpha, np.column_stack([s[:, None] * x, s]))
    support = sorted(int(i) for i in np.flatnonzero(alpha > 0))
    b = float(np.mean(s[support] - x[support] @ w))  # every support point is tight
    if (s * (x @ w + b)).min() < 1.0 - 1e-7:
        return None
    # back to the caller's units: w.(x - t)/c + b = (w/c).x + (b - (w/c).t)
    w = w / radius
    return w, b - float(w @ centre), support


class HalfspaceScheme(CompressionScheme):
    r"""Halfspaces :math:`1[w\cdot x + b > 0]` in :math:`\mathbb R^d` via max-margin support sets.

    Keeps at most :math:`d + 1` points (general position); one-class samples keep one positive
    point (or nothing) and reconstruct a constant, as :class:`HalfplaneScheme` does.

    Example:
        >>> import numpy as np
        >>> rng = np.random.default_rng(1)
        >>> x = rng.normal(size=(40, 4)); y = (x @ [1.0, -2.0, 0.5, 1.0] > 0.3).astype(int)
        >>> s = HalfspaceScheme(4); c = s.compress(x, y)
        >>> len(c.indices) <= 5
        True
        >>> h = s.reconstruct(x[list(c.indices)], y[list(c.indices)])
        >>> bool((h(x) == y).all())
        True
    """

    name = "halfspaces"

    def __init__(self, dim: int):
        if isinstance(dim, bool) or not isinstance(dim, int) or dim < 1:
            raise ValueError(f"dim must be a positive int, got {dim!r}")
        self.dim = dim
        self.size = dim + 1

    def _realizable(self, x, y):
        if (y == 1).all() or (y == 0).all():
            return True
        return max_margin_halfspace(x, y) is not None

    def _compress(self, x, y):
        if (y == 0).all():
            return Compressed(())
        if (y == 1).all():
            return Compressed((0,))
        _, _, support = max_margin_halfspace(x, y)
        return Compressed(tuple(support))

    def _reconstruct(self, x, y, side):
        if x.shape[0] == 0 or (y == 0).all():
            return _const(0)
        if (y == 1).all():
            return _const(1)
        sol = max_margin_halfspace(x, y)
        if sol is None:
            raise ValueError("halfspaces: kept points are not separable")
        w, b, _ = sol
        dim = self.dim

        def h(z):
            z = np.asarray(z, dtype=np.float64).reshape(-1, dim)
            return (z @ w + b > 0).astype(np.int64)

        return h
