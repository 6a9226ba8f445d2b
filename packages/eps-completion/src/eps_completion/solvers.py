r"""Solvers of the ε-surrogate (and, with ``eps=None``, of plain completion).

* :func:`bm_gd`: over-parameterised Burer–Monteiro gradient descent on
  :math:`f_\varepsilon(L, R)`, :math:`L \in \mathbb R^{m\times k}`,
  :math:`R\in\mathbb R^{n\times k}`, :math:`k \ge r`, from a small random start
  :math:`L_0, R_0 \sim \alpha\,\mathcal N(0, s/m), \mathcal N(0, s/n)`. Step:
  :math:`(L, R) \leftarrow (L, R) - t\,(\nabla_L f, \nabla_R f)`,
  where t exactly minimises the quartic :math:`t \mapsto f_\varepsilon(L - t\nabla_L f,
  R - t\nabla_R f)` (its four coefficients cost O(|Ω| k + (m+n) k^2); see
  :func:`~eps_completion.objective.line_quartic`).
* :func:`rgd`: Riemannian gradient descent on the fixed-rank-k manifold (shared-core's
  :class:`~shared_core.manifolds.FixedRankEmbedded`): the Riemannian gradient is the tangent
  projection :math:`\xi = P_{T_X}(G)` of the Euclidean gradient, the step is the exact
  minimiser of the quadratic :math:`t\mapsto f(X - t\xi)`,
  :math:`t^\star = \|\xi\|^2/\|\mathcal A_\varepsilon \xi\|^2`, followed by the truncated-SVD
  retraction (halved until the value decreases). Spectral start by default.

Both return a :class:`SolveResult` holding the factors, never a dense matrix.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import partial

import torch
from torch import Tensor

from shared_core.manifolds import FixedRankEmbedded, SVDPoint, SVDTangent

from .fused_bm import fused_bm_gd
from .fused_rgd import RgdProducts
from .linesearch import quartic_argmin
from .objective import entries, line_quartic, quadratic_form, sparse_times, value_and_grad
from .problem import Observations, check_eps

__all__ = ["SolveResult", "bm_gd", "quartic_argmin", "rgd", "scale_estimate", "spectral_init"]

#: ``bm_gd`` backends: the fused NumPy/SciPy loop (CPU) and the reference torch loop.
BACKENDS = ("auto", "fused", "torch")


@dataclass
class SolveResult:
    """Factors ``X = L R^T`` and the run's record."""

    L: Tensor
    R: Tensor
    n_iter: int
    converged: bool
    history: list[float] = field(default_factory=list)

    def matrix(self) -> Tensor:
        """The dense completed matrix ``L R^T``."""
        return self.L @ self.R.mT


def _eps_value(eps: float | None) -> float:
    return 0.0 if eps is None else check_eps(eps)


def _check_k(k: int, obs: Observations) -> int:
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= min(obs.shape):
        raise ValueError(f"factor rank k must be an int in [1, {min(obs.shape)}], got {k!r}")
    return k


def _check_iter(max_iter: int, gtol: float) -> None:
    if isinstance(max_iter, bool) or not isinstance(max_iter, int) or max_iter < 1:
        raise ValueError(f"max_iter must be a positive int, got {max_iter!r}")
    if not (isinstance(gtol, int | float) and gtol >= 0 and math.isfinite(gtol)):
        raise ValueError(f"gtol must be a finite number >= 0, got {gtol!r}")


def scale_estimate(obs: Observations) -> float:
    """Estimate of :math:`\\|M\\|_F`: :math:`\\|b\\|/\\sqrt{|\\Omega|/(mn)}`."""
    return float(obs.values.norm()) / math.sqrt(obs.rate)


def bm_gd(
    obs: Observations,
    k: int,
    eps: float | None = None,
    *,
    xi: Tensor | None = None,
    init_scale: float = 1e-3,
    init: tuple[Tensor, Tensor] | None = None,
    max_iter: int = 20000,
    gtol: float = 1e-10,
    generator: torch.Generator | None = None,
    backend: str = "auto",
) -> SolveResult:
    """Burer–Monteiro gradient descent with exact line search on the ε-surrogate.

    Args:
        obs: observed entries.
        k: factor rank (over-parameterised when larger than the true rank).
        eps: ε > 0, or None for the plain completion loss (the unperturbed baseline).
        xi: optional dense random weights of the perturbation (see :class:`EpsSensing`).
        init_scale: α of the small random start (relative to the scale of M).
        init: explicit starting factors ``(L0, R0)`` instead of the random start.
        max_iter: iteration cap.
        gtol: stop when :math:`\\|\\nabla f\\|_F \\le` gtol · s^{3/2}, s = :func:`scale_estimate`.
        generator: random source for the start.
        backend: ``"fused"``: :mod:`eps_completion.fused_bm`, one fused NumPy/SciPy pass per
            iteration (CPU tensors only); ``"torch"``: the reference loop built from
            :func:`~eps_completion.objective.value_and_grad` and
            :func:`~eps_completion.objective.line_quartic` (any device); ``"auto"``: fused
            on CPU, torch elsewhere. Both take the same steps up to rounding.

    Returns:
        :class:`SolveResult` (``history``: the objective every iteration).
    """
    e = _eps_value(eps)
    k = _check_k(k, obs)
    _check_iter(max_iter, gtol)
    if not (isinstance(init_scale, int | float) and init_scale > 0):
        raise ValueError(f"init_scale must be positive, got {init_scale!r}")
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    m, n = obs.shape
    dtype = obs.values.dtype
    s = scale_estimate(obs)
    if init is None:
        L = torch.randn(m, k, generator=generator, dtype=dtype) * (init_scale * math.sqrt(s / m))
        R = torch.randn(n, k, generator=generator, dtype=dtype) * (init_scale * math.sqrt(s / n))
    else:
        L, R = (t.detach().to(dtype).clone() for t in init)
        if L.shape != (m, k) or R.shape != (n, k):
            raise ValueError(f"init factors must be {(m, k)} and {(n, k)}")
    stop = gtol * s**1.5
    on_cpu = obs.values.device.type == "cpu" and (xi is None or xi.device.type == "cpu")
    if backend == "fused" and not on_cpu:
        raise ValueError("backend='fused' needs CPU tensors")
    if backend == "fused" or (backend == "auto" and on_cpu):
        xi_np = None if xi is None else xi.detach().numpy()
        lf, rf, n_it, conv, hist = fused_bm_gd(obs, e, xi_np, L.numpy(), R.numpy(), max_iter, stop)
        return SolveResult(torch.from_numpy(lf), torch.from_numpy(rf), n_it, conv, hist)
    f, gl, gr = value_and_grad(L, R, obs, e, xi)
    history = [float(f)]
    for it in range(1, max_iter + 1):
        g2 = float(gl.pow(2).sum() + gr.pow(2).sum())
        if math.sqrt(g2) <= stop:
            return SolveResult(L, R, it - 1, True, history)
        t = quartic_argmin(line_quartic(L, R, -gl, -gr, obs, e, xi))
        if t <= 0.0:
            return SolveResult(L, R, it - 1, False, history)  # stalled (rounding level)
        L, R = L - t * gl, R - t * gr
        f, gl, gr = value_and_grad(L, R, obs, e, xi)
        history.append(float(f))
    g = math.sqrt(float(gl.pow(2).sum() + gr.pow(2).sum()))
    return SolveResult(L, R, max_iter, g <= stop, history)


def spectral_init(obs: Observations, k: int) -> SVDPoint:
    """Top-k SVD of :math:`\\mathcal P_\\Omega(B)/p` (p the observed fraction)."""
    m, n = obs.shape
    dense = obs.dense_values() / obs.rate
    if m * n <= 250_000:
        u, sv, vh = torch.linalg.svd(dense, full_matrices=False)
        u, sv, v = u[:, :k], sv[:k], vh[:k].mT
    else:
        u, sv, v = torch.svd_lowrank(dense, q=min(k + 10, min(m, n)), niter=4)
        u, sv, v = u[:, :k], sv[:k], v[:, :k]
    return SVDPoint(u, torch.diag_embed(sv.clamp_min(1e-12 * float(sv[0]))), v)


def _egrad_products(
    x: SVDPoint, obs: Observations, e: float, xi: Tensor | None
) -> tuple[Tensor, Tensor, Tensor]:
    """``(f, G V, G^T U)`` at ``X = U S V^T`` for the Euclidean gradient G of the surrogate."""
    u, s, v = x
    us = u @ s
    if xi is not None:
        f, _, _ = value_and_grad(us, v, obs, e, xi)
        xd = us @ v.mT
        w2 = (e * xi.to(xd.dtype)) ** 2
        w2[obs.rows, obs.cols] = 1.0
        g = w2 * xd
        g[obs.rows, obs.cols] -= obs.values
        return f, g @ v, g.mT @ u
    x_om = entries(us, v, obs.rows, obs.cols)
    resid = x_om - obs.values
    e2 = e * e
    sq = s.pow(2).sum()  # ||U S V^T||_F = ||S||_F
    f = 0.5 * resid.pow(2).sum() + 0.5 * e2 * (sq - x_om.pow(2).sum())
    sv = resid - e2 * x_om
    gv = sparse_times(sv, obs.rows, obs.cols, v, obs.shape[0]) + e2 * us
    gtu = sparse_times(sv, obs.rows, obs.cols, u, obs.shape[1], transpose=True) + e2 * (v @ s.mT)
    return f, gv, gtu


def rgd(
    obs: Observations,
    k: int,
    eps: float | None = None,
    *,
    xi: Tensor | None = None,
    init: SVDPoint | str = "spectral",
    max_iter: int = 2000,
    gtol: float = 1e-10,
    generator: torch.Generator | None = None,
    backend: str = "auto",
) -> SolveResult:
    """Riemannian gradient descent on rank-k matrices (exact line search + SVD retraction).

    Args:
        obs: observed entries.
        k: the fixed rank of the iterates.
        eps: ε > 0, or None for the plain completion loss.
        xi: optional dense random weights of the perturbation.
        init: ``"spectral"``, ``"random"`` (a random rank-k point of Frobenius norm
            :func:`scale_estimate`), or an :class:`SVDPoint`.
        max_iter: iteration cap.
        gtol: stop when the Riemannian gradient's norm is at most gtol · s, s the scale.
        generator: random source for ``init="random"``.
        backend: ``"fused"``: the Ω-products of :mod:`eps_completion.fused_rgd`
            (NumPy/SciPy, CPU, uniform weights); ``"torch"``: the reference products;
            ``"auto"``: fused when it applies. Same iterates up to rounding.

    Returns:
        :class:`SolveResult` with ``L = U S`` and ``R = V``.
    """
    e = _eps_value(eps)
    k = _check_k(k, obs)
    _check_iter(max_iter, gtol)
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    fusable = obs.values.device.type == "cpu" and xi is None
    if backend == "fused" and not fusable:
        raise ValueError("backend='fused' needs CPU tensors and uniform weights (xi=None)")
    if backend == "fused" or (backend == "auto" and fusable):
        prods = RgdProducts(obs, e)
        products, curvature = prods.egrad, prods.curvature
    else:
        products = partial(_egrad_products, obs=obs, e=e, xi=xi)
        curvature = partial(quadratic_form, obs=obs, eps=e, xi=xi)
    m, n = obs.shape
    dtype = obs.values.dtype
    man = FixedRankEmbedded(m, n, k)
    s_est = scale_estimate(obs)
    if isinstance(init, str):
        if init == "spectral":
            x = spectral_init(obs, k)
        elif init == "random":
            x = man.random_point(generator=generator, dtype=dtype)
            x = SVDPoint(x.U, x.S * (s_est / float(x.S.norm())), x.V)
        else:
            raise ValueError(f"init must be 'spectral', 'random' or an SVDPoint, got {init!r}")
    else:
        x = SVDPoint(*(t.to(dtype) for t in init))
        man.check_point(x)
    f, gv, gtu = products(x)
    history = [float(f)]
    stop = gtol * s_est
    for it in range(1, max_iter + 1):
        u, s, v = x
        mm = u.mT @ gv
        xi_t = SVDTangent(mm, gv - u @ mm, gtu - v @ mm.mT)
        g2 = float(man.inner(x, xi_t, xi_t))
        if math.sqrt(max(g2, 0.0)) <= stop:
            return SolveResult(u @ s, v, it - 1, True, history)
        # xi = [U M + Up, U] [V, Vp]^T
        lf = torch.cat([u @ mm + xi_t.Up, u], dim=1)
        rf = torch.cat([v, xi_t.Vp], dim=1)
        curv = float(curvature(lf, rf))
        t = g2 / curv if curv > 0 else 1.0 / s_est
        for _ in range(40):
            x_new = man.retr(x, SVDTangent(-t * xi_t.M, -t * xi_t.Up, -t * xi_t.Vp))
            f_new, gv_new, gtu_new = products(x_new)
            if float(f_new) <= float(f) + 1e-13 * abs(float(f)):  # rounding slack
                break
            t *= 0.5
        else:
            return SolveResult(u @ s, v, it - 1, False, history)
        x, f, gv, gtu = x_new, f_new, gv_new, gtu_new
        history.append(float(f))
    u, s, v = x
    return SolveResult(u @ s, v, max_iter, False, history)
