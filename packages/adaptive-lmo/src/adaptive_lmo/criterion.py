r"""The exponent criterion: a one-step random-feature regression surrogate of the loss decrease.

Surrogate. A layer ``z = W x`` (``W``: ``m x n``) is read as a linear regression on the features
``x`` it receives (the random-feature view: everything before the layer is frozen for one step)
with squared loss :math:`L(W) = \tfrac12\,\mathbb{E}\|Wx - y\|^2`. Moving
:math:`W \to W - \eta D` changes it by exactly

.. math::

    L(W - \eta D) - L(W)
    = -\eta\,\langle G, D\rangle + \tfrac{\eta^2}{2}\,\mathrm{tr}(D\Sigma D^\top),
    \qquad \Sigma = \mathbb{E}[x x^\top],

and at the best step :math:`\eta^\star = \langle G, D\rangle/\mathrm{tr}(D\Sigma D^\top)` the
decrease is :math:`\Delta(D) = \langle G, D\rangle^2 / (2\,\mathrm{tr}(D\Sigma D^\top))`.

Family. For :math:`D_a = U\,\mathrm{diag}(s^a)\,V^\top` built from the SVD of the direction
``P`` (the momentum, or the Adam-preconditioned momentum), with :math:`d_i = u_i^\top G v_i`
(:math:`= s_i` when ``P = G``) and :math:`c_i = v_i^\top \Sigma v_i`,

.. math::

    \langle G, D_a\rangle = \sum_i d_i s_i^a, \qquad
    \mathrm{tr}(D_a\Sigma D_a^\top) = \sum_i s_i^{2a} c_i
    \quad(\text{because } U^\top U = I),

so :math:`\Delta(a) = (\sum_i d_i s_i^a)^2 / (2\sum_i s_i^{2a} c_i)`: a scalar function of ``a``
that needs only ``s``, ``d`` and the activation energy ``c`` along the right singular vectors.

Rules. ``"surrogate"`` maximises :math:`\Delta(a)` on [0, 1] (129-point grid searched coarse
to fine, then a parabola through the best point and its neighbours). ``"loglog"`` is the
closed form: by Cauchy-Schwarz
:math:`\Delta \le \tfrac12\sum_i d_i^2/c_i` for every :math:`D = U\mathrm{diag}(t)V^\top`, with
equality iff :math:`t_i \propto d_i / c_i`; the family can only match that if
:math:`s_i^a \propto d_i/c_i`, so ``a`` is the slope of :math:`\log(d_i/c_i)` against
:math:`\log s_i`, fitted by least squares with weights :math:`d_i^2/c_i` (each direction's
share of the bound), clipped to [0, 1]. When :math:`d = s` and :math:`c_i = \kappa s_i^\beta`
both rules return :math:`\mathrm{clip}(1 - \beta, 0, 1)` exactly (the surrogate is unimodal
there: see the README).

Output-side curvature (``curvature="kfac"`` in the optimizer). The squared-loss surrogate
takes the loss to be the layer's output itself (output Hessian ``I``). For a hidden layer the
one-step change is, to second order, :math:`-\eta\langle G, D\rangle +
\tfrac{\eta^2}{2}\,\mathbb{E}\|J\,D x\|_H^2` with ``J`` the Jacobian of the network's
output with respect to the layer output and ``H`` the loss Hessian there. With the Kronecker
(K-FAC) factorisation :math:`\mathbb{E}[x x^\top]\otimes\mathbb{E}[g g^\top]` of that
curvature (``g``: the back-propagated gradient at the layer output, one row per token/example)
the quadratic term becomes :math:`\mathrm{tr}(B D \Sigma D^\top)`, :math:`B =
\mathbb{E}[g g^\top]`, and on the family

.. math::

    \mathrm{tr}(B D_a \Sigma D_a^\top) = \sum_{ij} s_i^a s_j^a\,M_{ij},\qquad
    M = (U^\top B U) \circ (V^\top \Sigma V),

so every function here also accepts an ``r x r`` matrix ``M`` in place of the vector ``c`` (one
more dimension than ``s``; a batch of experts is block-diagonal). ``B = I`` gives back
:math:`M = \mathrm{diag}(c)`. ``"loglog"`` uses the diagonal of ``M``.

Example:
    >>> import torch
    >>> s = torch.tensor([4.0, 2.0, 1.0, 0.5], dtype=torch.float64)
    >>> round(choose_exponent(s, 3.0 * s**0.7, rule="loglog"), 6)
    0.3
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import torch
from torch import Tensor

__all__ = [
    "RULES",
    "alignment",
    "choose_exponent",
    "curvature_along",
    "curvature_matrix",
    "kfac_curvature",
    "ledoit_wolf_shrinkage",
    "loglog_exponent",
    "member_spectrum",
    "moments_in_basis",
    "preload_quantiles",
    "row_moments",
    "shrink_to_identity",
    "spectrum_gain",
    "surrogate_decrease",
    "surrogate_exponent",
    "switch_gain",
    "t_quantile",
    "weighted_decrease",
]

RULES = ("surrogate", "loglog")
GRID_POINTS = 129
COARSE_POINTS = 17  # every 8th grid point: (GRID_POINTS - 1) / (COARSE_POINTS - 1) = 8


def curvature_along(Vh: Tensor, X: Tensor) -> Tensor:
    r""":math:`c_i = v_i^\top \hat\Sigma v_i` with :math:`\hat\Sigma = X^\top X / N`.

    Args:
        Vh: ``(..., r, n)`` right singular vectors as rows.
        X: ``(..., N, n)`` feature rows (the layer's inputs; same leading dims as ``Vh``).

    Returns:
        ``(..., r)`` in ``Vh``'s dtype.
    """
    if X.shape[-1] != Vh.shape[-1]:
        raise ValueError(
            f"features have {X.shape[-1]} columns but the layer's matrix has {Vh.shape[-1]}"
        )
    if X.shape[-2] == 0:
        raise ValueError("no feature rows: the layer saw no activations")
    return (X.to(Vh.dtype) @ Vh.mT).pow(2).mean(-2)


def curvature_matrix(Q: Tensor, R: Tensor) -> Tensor:
    r""":math:`Q \hat S Q^\top` with :math:`\hat S = R^\top R / N`: a second moment in a basis.

    Args:
        Q: ``(..., r, k)`` basis vectors as rows (``V^T`` for inputs, ``U^T`` for outputs).
        R: ``(..., N, k)`` rows (input features, or back-propagated output gradients).

    Returns:
        ``(..., r, r)`` in ``Q``'s dtype.
    """
    if R.shape[-1] != Q.shape[-1]:
        raise ValueError(f"rows have {R.shape[-1]} columns but the basis has {Q.shape[-1]}")
    if R.shape[-2] == 0:
        raise ValueError("no rows: the layer saw no activations or gradients")
    Z = R.to(Q.dtype) @ Q.mT
    return Z.mT @ Z / Z.shape[-2]


def kfac_curvature(U: Tensor, Vh: Tensor, X: Tensor, Gout: Tensor) -> Tensor:
    r""":math:`M = (U^\top \hat B U)\circ(V^\top \hat\Sigma V)`, ``(..., r, r)``.

    ``X``: input feature rows ``(..., N, n)``; ``Gout``: output-gradient rows ``(..., N', m)``
    (not necessarily the same rows: the two factors are estimated separately).
    """
    return curvature_matrix(U.mT, Gout) * curvature_matrix(Vh, X)


def moments_in_basis(Q: Tensor, R: Tensor) -> tuple[Tensor, Tensor, int]:
    r"""Second moment of the rows ``R`` in the basis ``Q`` and what its precision needs.

    With :math:`z_t = Q r_t` (``k`` rows), returns :math:`S = \tfrac1k\sum_t z_t z_t^\top`
    (``(..., r, r)``, as :func:`curvature_matrix`), :math:`q = \tfrac1k\sum_t\|z_t\|^4`
    (``(...,)``, float64: fourth powers of small gradients underflow float32) and ``k``: the
    sufficient statistics of :func:`ledoit_wolf_shrinkage`. All
    three are means over rows (``k`` a count), so ranks holding equally many rows combine by
    averaging ``S`` and ``q`` and summing ``k``.
    """
    if R.shape[-1] != Q.shape[-1]:
        raise ValueError(f"rows have {R.shape[-1]} columns but the basis has {Q.shape[-1]}")
    return row_moments(R.to(Q.dtype) @ Q.mT)


def row_moments(Z: Tensor) -> tuple[Tensor, Tensor, int]:
    r""":func:`moments_in_basis` of rows already in the basis, :math:`z_t` (``(..., k, r)``).

    For callers that keep ``Z`` itself (the switch test reads the rows), so the product with
    the basis is formed once.
    """
    if Z.shape[-2] == 0:
        raise ValueError("no rows: the layer saw no activations or gradients")
    k = Z.shape[-2]
    return Z.mT @ Z / k, Z.to(torch.float64).pow(2).sum(-1).pow(2).mean(-1), k


def ledoit_wolf_shrinkage(S: Tensor, q: Tensor, k: int | float) -> Tensor:
    r"""Ledoit-Wolf weight :math:`\rho\in[0, 1]` of the target :math:`\mu I` for ``S``.

    ``S`` (``(..., r, r)``) is the mean of ``k`` outer products :math:`z_t z_t^\top` and
    :math:`q = \tfrac1k\sum_t \|z_t\|^4`. With :math:`\mu = \mathrm{tr}\,S/r`,
    :math:`\delta^2 = \|S - \mu I\|_F^2` (how far the estimate is from the target) and
    :math:`\bar\beta^2 = \tfrac1{k^2}\sum_t \|z_t z_t^\top - S\|_F^2
    = (q - \|S\|_F^2)/k` (the estimated variance of ``S``, the squared standard error of a
    mean of ``k`` terms), :math:`\rho = \min(\bar\beta^2, \delta^2)/\delta^2`
    (0 when :math:`\delta = 0`: ``S`` is then the target). One row carrying all the energy
    gives :math:`\rho = \min(1, (1 - 1/k)/(1 - 1/r))`; ``k < r`` rows of equal energy
    along orthonormal directions, :math:`\rho = \min(1, r(k - 1)/(k(r - k)))`
    (see the README); many rows of a fixed ``S``, :math:`\rho = O(1/k)`.

    Returns:
        ``(...,)`` float64 (computed in float64).
    """
    S = S.to(torch.float64)  # squared second moments of tiny gradients underflow float32
    q = torch.as_tensor(q, dtype=torch.float64, device=S.device)
    r = S.shape[-1]
    fro2 = S.pow(2).sum((-2, -1))
    mu = torch.diagonal(S, dim1=-2, dim2=-1).sum(-1) / r
    delta2 = (fro2 - r * mu**2).clamp(min=0)
    beta2 = ((q - fro2) / k).clamp(min=0)
    safe = torch.where(delta2 > 0, delta2, torch.ones_like(delta2))
    return torch.where(delta2 > 0, torch.minimum(beta2, delta2) / safe, torch.zeros_like(delta2))


def shrink_to_identity(S: Tensor, rho: Tensor) -> Tensor:
    r""":math:`(1 - \rho) S + \rho\,\mu I` with :math:`\mu = \mathrm{tr}\,S / r` (batched)."""
    r = S.shape[-1]
    mu = torch.diagonal(S, dim1=-2, dim2=-1).sum(-1) / r
    eye = torch.eye(r, dtype=S.dtype, device=S.device)
    rho = rho.to(S.dtype)[..., None, None]
    return (1 - rho) * S + rho * mu[..., None, None] * eye


def _as_matrix(s: Tensor, c: Tensor) -> Tensor | None:
    """``c`` as one ``(R, R)`` matrix (R = s.numel()) if it is a matrix curvature, else None."""
    c = torch.as_tensor(c)
    if c.ndim != s.ndim + 1:
        return None
    if c.shape[:-1] != s.shape or c.shape[-1] != s.shape[-1]:
        raise ValueError(
            f"a matrix curvature for singular values of shape {tuple(s.shape)} must have shape "
            f"{(*s.shape, s.shape[-1])}, got {tuple(c.shape)}"
        )
    c = c.to(torch.float64)
    if c.ndim == 2:
        return c
    return torch.block_diag(*c.reshape(-1, c.shape[-2], c.shape[-1]).unbind(0))


def alignment(U: Tensor, Vh: Tensor, G: Tensor) -> Tensor:
    r""":math:`d_i = u_i^\top G v_i` (the diagonal of :math:`U^\top G V`), shape ``(..., r)``."""
    return ((U.mT @ G.to(U.dtype)) * Vh).sum(-1)


def _prepare(s: Tensor, c: Tensor, d: Tensor | None) -> tuple[Tensor, Tensor, Tensor]:
    s = torch.as_tensor(s).to(torch.float64)
    M = _as_matrix(s, c)
    if M is not None:
        return _prepare_matrix(s.reshape(-1), M, d)
    s = s.reshape(-1)
    c = torch.as_tensor(c).to(torch.float64).reshape(-1)
    d = s if d is None else torch.as_tensor(d).to(torch.float64).reshape(-1)
    if not (s.shape == c.shape == d.shape):
        raise ValueError(
            f"s, c and d must have the same number of entries, got {s.numel()}, {c.numel()}, "
            f"{d.numel()}"
        )
    for name, t in (("singular values", s), ("activation curvatures", c), ("alignments", d)):
        if not bool(torch.isfinite(t).all()):
            raise ValueError(f"non-finite {name} (NaN or inf) given to the exponent criterion")
    if bool((s < 0).any()) or bool((c < 0).any()):
        raise ValueError("singular values and activation curvatures must be >= 0")
    keep = s > 0
    s, c, d = s[keep], c[keep], d[keep]
    if s.numel() == 0 or not bool((c > 0).any()):
        raise ValueError(
            "the criterion needs a non-zero direction and non-zero activations "
            "(all singular values or all activation curvatures are 0)"
        )
    # Directions the sampled activations never excite would make the surrogate's curvature
    # vanish there; floor them at a tiny ridge so the step size stays finite.
    c = c.clamp_min(1e-12 * float(c.max()))
    return s / s.max(), c / c.max(), d / d.abs().max().clamp_min(1e-300)


def _all_finite(t: Tensor) -> bool:
    """No NaN or inf in ``t``. A finite sum has no non-finite term (inf and NaN propagate), so
    the elementwise test, several times slower, runs only when the sum is not finite."""
    return math.isfinite(float(t.sum())) or bool(torch.isfinite(t).all())


def _prepare_matrix(s: Tensor, M: Tensor, d: Tensor | None) -> tuple[Tensor, Tensor, Tensor]:
    d = s if d is None else torch.as_tensor(d).to(torch.float64).reshape(-1)
    if d.shape != s.shape:
        raise ValueError(
            f"s and d must have the same number of entries, got {s.numel()}, {d.numel()}"
        )
    for name, t in (("singular values", s), ("curvature matrix", M), ("alignments", d)):
        if not _all_finite(t):
            raise ValueError(f"non-finite {name} (NaN or inf) given to the exponent criterion")
    diag = torch.diagonal(M)
    if s.numel() == 0:
        raise ValueError("the criterion needs a non-zero direction (no singular values given)")
    if float(torch.minimum(s.min(), diag.min())) < 0:
        raise ValueError("singular values and curvatures must be >= 0")
    keep = s > 0
    if not bool(keep.all()):  # copying M is a large share of a criterion step: only if needed
        s, d, M = s[keep], d[keep], M[keep][:, keep]
    if s.numel() == 0 or not bool((torch.diagonal(M) > 0).any()):
        raise ValueError(
            "the criterion needs a non-zero direction and non-zero curvature "
            "(all singular values or all curvatures are 0)"
        )
    M = 0.5 * (M + M.T)
    top = float(torch.diagonal(M).max())
    M = M + torch.diag((1e-12 * top - torch.diagonal(M)).clamp_min(0.0))  # same ridge as c
    return s / s.max(), M / top, d / d.abs().max().clamp_min(1e-300)


def surrogate_decrease(a: float | Tensor, s: Tensor, c: Tensor, d: Tensor | None = None) -> Tensor:
    r""":math:`\Delta(a) = (\sum_i d_i s_i^a)^2 / (2\sum_i s_i^{2a} c_i)` for one or many ``a``.

    Scale conventions: ``s``, ``c`` and ``d`` are used as given (no normalisation), so this is
    the surrogate's decrease in the caller's units. Zero singular values drop out. ``c`` may
    be a matrix curvature ``M`` (one more dimension than ``s``, see the module docstring), then
    the denominator is :math:`2\,(s^a)^\top M s^a`.

    Args:
        a: exponent(s), a float or a 1-D tensor.
        s: singular values of the direction, any shape (flattened; a batch of experts counts
            as one block sharing a step size).
        c: activation energy along each right singular vector, same shape.
        d: alignments :math:`u_i^\top G v_i` (default ``s``: the direction is the gradient).

    Returns:
        A float64 tensor shaped like ``a``.
    """
    s = torch.as_tensor(s).to(torch.float64)
    M = _as_matrix(s, c)
    s = s.reshape(-1)
    d = s if d is None else torch.as_tensor(d).to(torch.float64).reshape(-1)
    keep = s > 0
    s, d = s[keep], d[keep]
    c = torch.as_tensor(c).to(torch.float64).reshape(-1)[keep] if M is None else M[keep][:, keep]
    at = torch.as_tensor(a, dtype=torch.float64)
    return _decrease(at.reshape(-1), s, c, d).reshape(at.shape)


def weighted_decrease(w: Tensor, s: Tensor, c: Tensor, d: Tensor | None = None) -> Tensor:
    r""":math:`(\sum_i d_i w_i)^2 / (2\,w^\top M w)` for direction weights ``w`` (``(k, ...)``:
    ``k`` vectors shaped like ``s``), the surrogate's best-step decrease of
    :math:`U\,\mathrm{diag}(w)\,V^\top`. :func:`surrogate_decrease` is the case
    :math:`w = s^a`; this one scores any spectrum map, e.g. Newton-Schulz's
    (:func:`adaptive_lmo.fractional.ns_spectrum`) against the exact polar factor's ones.
    Same conventions as :func:`surrogate_decrease` (zero singular values drop out)."""
    s = torch.as_tensor(s).to(torch.float64)
    M = _as_matrix(s, c)
    s = s.reshape(-1)
    d = s if d is None else torch.as_tensor(d).to(torch.float64).reshape(-1)
    keep = s > 0
    W = torch.as_tensor(w).to(torch.float64).reshape(-1, s.numel())[:, keep]
    d = d[keep]
    num = (W * d).sum(-1).pow(2)
    if M is None:
        c = torch.as_tensor(c).to(torch.float64).reshape(-1)[keep]
        return num / (2.0 * (W * W * c).sum(-1))
    M = M[keep][:, keep]
    return num / (2.0 * ((W @ M) * W).sum(-1))


def _decrease(a: Tensor, s: Tensor, c: Tensor, d: Tensor) -> Tensor:
    """:func:`surrogate_decrease` at the 1-D float64 ``a`` for prepared statistics: float64,
    flattened, zero singular values removed, ``c`` a vector or an ``(r, r)`` matrix."""
    P = s.log().unsqueeze(0) * a.unsqueeze(1)
    E = P.exp()
    num = (d * E).sum(-1).pow(2)
    # the quadratic form (s^a)^T M s^a, or its diagonal case sum_i c_i s_i^(2a)
    den = 2.0 * ((E @ c) * E).sum(-1) if c.ndim == 2 else 2.0 * (c * (2.0 * P).exp()).sum(-1)
    return num / den


def surrogate_exponent(s: Tensor, c: Tensor, d: Tensor | None = None) -> float:
    """The maximiser of :func:`surrogate_decrease` over [0, 1] (grid plus parabolic refinement).

    The grid is ``GRID_POINTS`` (129) points, searched coarse to fine: every 8th point, then
    the points within one coarse spacing of the coarse maximiser. For a unimodal decrease this
    finds the same grid point as scanning all 129 (the maximiser lies between the coarse
    maximiser's neighbours), with 34 evaluations instead of 129: each costs ``r^2`` for a
    matrix curvature, the largest share of a criterion step.
    """
    s, c, d = _prepare(s, c, d)
    n = GRID_POINTS - 1
    stride = n // (COARSE_POINTS - 1)

    def at(idx: Tensor) -> Tensor:
        return _decrease(idx.to(torch.float64) / n, s, c, d)

    dev = s.device  # grids on the statistics' device: a CPU grid cannot multiply CUDA values
    kc = stride * int(torch.argmax(at(torch.arange(0, n + 1, stride, device=dev))))
    lo, hi = max(0, kc - stride), min(n, kc + stride)
    k = lo + int(torch.argmax(at(torch.arange(lo, hi + 1, device=dev))))
    if k in (0, n):
        return k / n
    y0, y1, y2 = (float(v) for v in at(torch.tensor([k - 1, k, k + 1], device=dev)))
    curv = y0 - 2.0 * y1 + y2
    shift = 0.5 * (y0 - y2) / curv if curv < 0 else 0.0
    return float(min(1.0, max(0.0, (k + max(-1.0, min(1.0, shift))) / n)))


def loglog_exponent(s: Tensor, c: Tensor, d: Tensor | None = None) -> float:
    r"""Closed form: weighted slope of :math:`\log(d_i/c_i)` on :math:`\log s_i`, clipped to [0, 1].

    Weights :math:`w_i = d_i^2/c_i`; directions with :math:`d_i \le 0` (the direction points
    against the gradient there) are left out. If every kept ``s_i`` is equal the family is a
    single direction and 1.0 is returned.
    """
    s, c, d = _prepare(s, c, d)
    if c.ndim == 2:  # a matrix curvature: the closed form reads its diagonal
        c = torch.diagonal(c)
    keep = d > 0
    if not bool(keep.any()):
        raise ValueError("no direction is aligned with the gradient (all d_i <= 0)")
    s, c, d = s[keep], c[keep], d[keep]
    x, y = s.log(), (d / c).log()
    w = d.pow(2) / c
    w = w / w.sum()
    xm, ym = (w * x).sum(), (w * y).sum()
    var = (w * (x - xm).pow(2)).sum()
    if float(var) <= 1e-24:
        return 1.0
    slope = float((w * (x - xm) * (y - ym)).sum() / var)
    return float(min(1.0, max(0.0, slope)))


def choose_exponent(
    s: Tensor, c: Tensor, d: Tensor | None = None, *, rule: str = "surrogate"
) -> float:
    """The exponent in [0, 1] chosen by ``rule`` (``"surrogate"`` or ``"loglog"``).

    Raises:
        ValueError: unknown rule; non-finite, negative or all-zero statistics.
    """
    if rule == "surrogate":
        a = surrogate_exponent(s, c, d)
    elif rule == "loglog":
        a = loglog_exponent(s, c, d)
    else:
        raise ValueError(f"unknown criterion rule {rule!r}; valid: {', '.join(RULES)}")
    if not math.isfinite(a):  # pragma: no cover - guarded by _prepare
        raise ValueError("the criterion produced a non-finite exponent")
    return a


def switch_gain(
    a_new: float,
    a_old: float,
    s: Tensor,
    Z: Tensor | None,
    C: Tensor,
    d: Tensor | None = None,
    reduce: Callable[[Tensor], Tensor] | None = None,
) -> tuple[float, float, float]:
    r"""Estimated gain of the K-FAC surrogate from ``a_old`` to ``a_new`` and its standard error.

    :func:`spectrum_gain` for the family's members, :math:`w = (s/s_{max})^a`.

    Args:
        a_new, a_old: exponents in [0, 1].
        s, Z, C, d, reduce: as for :func:`spectrum_gain`.

    Returns:
        ``(gain, standard error, n_eff)``, as :func:`spectrum_gain`.
    """
    return spectrum_gain(member_spectrum(s, a_new), member_spectrum(s, a_old), s, Z, C, d, reduce)


def member_spectrum(s: Tensor, a: float) -> Tensor:
    """The family member's spectrum :math:`(s/s_{max})^a` of each matrix, float64
    (``s``: ``(..., r)``; the scale, which no gain sees, is the largest value's)."""
    s64 = s.to(torch.float64)
    return (s64 / s64.amax(-1, keepdim=True)).pow(a)


def spectrum_gain(
    w_new: Tensor,
    w_old: Tensor,
    s: Tensor,
    Z: Tensor | None,
    C: Tensor,
    d: Tensor | None = None,
    reduce: Callable[[Tensor], Tensor] | None = None,
) -> tuple[float, float, float]:
    r"""Estimated gain of the K-FAC surrogate from spectrum ``w_old`` to ``w_new``, with its
    standard error: the directions :math:`U\,\mathrm{diag}(w)\,V^\top` in the scored
    direction's singular basis (a family member, :math:`w = s^a`, or any spectrum map, e.g.
    Newton-Schulz's against the exact polar factor's ones).

    The surrogate's denominator is a mean over the output-gradient rows :math:`z_t`
    (in the ``U`` basis): :math:`w^\top[(U^\top\hat BU)\circ C]w = \tfrac1k\sum_t
    f_t(w)`, :math:`f_t(w) = (z_t\circ w)^\top C (z_t\circ w)` (``C`` = the input factor
    :math:`V^\top\hat\Sigma V`, treated as known). So the log-decrease gain
    :math:`L = \log\Delta(w_{new}) - \log\Delta(w_{old}) = 2\log(n_{new}/n_{old}) -
    \log(\bar f_{new}/\bar f_{old})` (:math:`n = \sum_i d_i w_i`) has, by the delta method
    over i.i.d. rows, the variance :math:`\frac1{k(k-1)}\sum_t h_t^2` with :math:`h_t =
    f_t(w_{new})/\bar f_{new} - f_t(w_{old})/\bar f_{old}` (whose mean is exactly 0). When one
    row carries both denominators, :math:`h_t \approx 0` on it and this error is
    :math:`\approx 0`: a sample cannot show its own variance, which is why the optimizer
    compares the gain with a Student-t quantile at ``n_eff - 1`` degrees of freedom,
    ``n_eff`` Kish's effective number of rows :math:`(\sum_t f_t)^2/\sum_t f_t^2`.

    Args:
        w_new, w_old: ``(..., r)`` non-negative spectra (the gain does not change when
            either is scaled).
        s: ``(..., r)`` singular values of the scored direction.
        Z: ``(..., k, r)`` output-gradient rows in the ``U`` basis (None: this process has no
            rows, it only contributes zeros to ``reduce``).
        C: ``(..., r, r)`` input factor.
        d: alignments (None: ``s``).
        reduce: sums a float64 tensor over processes (``torch.distributed``); None: one
            process.

    Returns:
        ``(gain, standard error, n_eff)``; ``n_eff`` is the smaller Kish effective number of
        rows :math:`(\sum_t f_t)^2/\sum_t f_t^2` of the two denominators. Gain and error
        are NaN (and ``n_eff`` 0) when a denominator is 0 or not finite or fewer than 2 rows
        were seen (nothing resolved).

    Example:
        >>> g = torch.Generator().manual_seed(0)
        >>> s, C = torch.tensor([1.0, 0.1], dtype=torch.float64), torch.eye(2, dtype=torch.float64)
        >>> Z = torch.randn(50, 2, generator=g, dtype=torch.float64)
        >>> gain, se, n_eff = spectrum_gain(s, torch.ones_like(s), s, Z, C)  # a = 1 over a = 0
        >>> gain > 0 and se > 0 and 1 < n_eff <= 50
        True
    """
    red = reduce or (lambda t: t)
    s64, C64 = s.to(torch.float64), C.to(torch.float64)
    d64 = s64 if d is None else d.to(torch.float64)
    w_new, w_old = w_new.to(torch.float64), w_old.to(torch.float64)
    n_new, n_old = (d64 * w_new).sum(), (d64 * w_old).sum()
    # the k x r x r row products in the statistics' own precision (float32 for float32
    # layers: a standard error needs no float64, and they were half of a criterion step);
    # the sums over rows below are float64
    rd = torch.float64 if torch.float64 in (s.dtype, C.dtype) else torch.float32
    Cr = C64.to(rd)

    def rows(Zr: Tensor, w: Tensor) -> Tensor:
        Y = Zr * w.to(rd).unsqueeze(-2)  # (..., k, r): z_t o s^a
        f = ((Y @ Cr) * Y).sum(-1).to(torch.float64)  # (..., k)
        return f.reshape(-1, f.shape[-1]).sum(0)  # a batched view sums its blocks per row

    if Z is not None and Z.shape[-2] > 0:
        Zr = Z.to(rd)
        f_new, f_old = rows(Zr, w_new), rows(Zr, w_old)
        tot = torch.stack(
            [
                f_new.sum(),
                f_old.sum(),
                torch.tensor(float(f_new.numel()), dtype=torch.float64, device=f_new.device),
                f_new.pow(2).sum(),
                f_old.pow(2).sum(),
            ]
        )
    else:
        f_new = f_old = None
        tot = torch.zeros(5, dtype=torch.float64, device=s.device)
    tot = red(tot.to(torch.float64))
    k = float(tot[2])
    m_new, m_old = tot[0] / max(k, 1.0), tot[1] / max(k, 1.0)
    good = k > 1 and bool(m_new > 0) and bool(m_old > 0) and bool(n_new != 0)
    good = good and bool(n_old != 0) and bool(torch.isfinite(tot).all())
    h2 = torch.zeros((), dtype=torch.float64, device=s.device)
    if good and f_new is not None:
        h2 = (f_new / m_new - f_old / m_old).pow(2).sum()
    h2 = red(h2.reshape(1))[0]
    if not good:
        return math.nan, math.nan, 0.0
    gain = float(2 * torch.log(n_new.abs() / n_old.abs()) - torch.log(m_new / m_old))
    n_eff = min(float(tot[0] ** 2 / tot[3]), float(tot[1] ** 2 / tot[4]))
    return gain, math.sqrt(float(h2) / (k * (k - 1))), n_eff


@functools.lru_cache(maxsize=1024)
def t_quantile(q: float, df: int) -> float:
    """Quantile ``q`` in (0.5, 1) of Student's t with ``df`` degrees of freedom.

    SciPy's inverse of the t distribution function (``scipy.special.stdtrit``), cached: the
    optimizer asks for one ``q`` and at most ``r`` distinct ``df``. (A hand-written Simpson
    integration with bisection cost about 0.1 s per new ``df``, 11% of a training run's time.)
    """
    if not 0.5 < q < 1.0 or df < 1:
        raise ValueError(f"need 0.5 < q < 1 and df >= 1, got q={q}, df={df}")
    return float(_stdtrit()(df, q))


@functools.cache
def _stdtrit() -> Callable:
    """``scipy.special.stdtrit``, imported once. The import costs ~0.4 s, so the optimizer
    calls this at construction when a group can need a quantile (:func:`preload_quantiles`):
    imported lazily inside the first step that needs it, it made that one ``opt.step()``
    ~100x a Newton-Schulz step (the overhead benchmark's 2.2-2.3x pair, docs/overhead.md)."""
    from scipy.special import stdtrit

    return stdtrit


def preload_quantiles() -> None:
    """Import what :func:`t_quantile` needs now instead of inside a training step."""
    _stdtrit()
