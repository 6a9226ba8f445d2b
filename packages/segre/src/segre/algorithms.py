r"""Riemannian gradient descent and Riemannian Gauss-Newton on the Segre manifold.

Both keep every iterate a rank-one tensor (feasible) by retracting a tangent step:

- **RGD**: :math:`X_{t+1} = R_{X_t}(-\alpha_t \xi_t)`, :math:`\xi_t = P_{T}\mathcal{A}^*(r_t)`.
  Step rule ``"exact"``: :math:`\alpha_t = \|\xi_t\|^2/\|\mathcal{A}(\xi_t)\|^2`, the exact
  minimiser of :math:`\alpha \mapsto \tfrac12\|\mathcal{A}(X_t - \alpha\xi_t) - y\|^2` along
  the tangent line (the loss is quadratic in the ambient space, and
  :math:`\langle\mathcal{A}\xi, r\rangle = \langle \xi, P_T\mathcal{A}^* r\rangle = \|\xi\|^2`).
  For Gaussian sensing it is about ``1/m``, the normalised step of the recovery literature;
  a constant step or Armijo backtracking on the retracted loss are options.
- **RGN**: :math:`\xi_t = \arg\min_{\xi\in T_{X_t}} \|\mathcal{A}(X_t + \xi) - y\|^2`, then
  :math:`X_{t+1} = R_{X_t}(\xi_t)` with the HOSVD retraction, i.e. the rank-one truncated
  HOSVD of :math:`X_t + \xi_t`. The least-squares problem is solved exactly (``m x dim``
  Jacobian, QR or Cholesky of the normal equations) or by conjugate gradients on
  :math:`P_T \mathcal{A}^*\mathcal{A} P_T`; with full observation (``A^* A = I``) the
  solution is :math:`-P_T(r_t)` directly.

Why RGN is quadratic: the GN step is the Newton step of the lifted problem up to the term
:math:`\langle r, \mathrm{II}(\xi,\xi)\rangle` (curvature of the manifold times the residual);
without noise the residual vanishes at the solution, so the neglected term is
:math:`O(\|r\|\,\|\xi\|) = O(e_t^2)` and :math:`e_{t+1} = O(e_t^2)`. With noise the residual
stays of size :math:`\sigma\sqrt m`, the neglected term is :math:`O(\sigma e_t)`, and the
convergence becomes linear once :math:`e_t` nears the noise floor.

:func:`noise_floor` is the error of the oracle that knows the tangent space at the truth:
:math:`\sigma\,(\mathrm{tr}(J^\top J)^{-1})^{1/2}/\|X^\star\|_F` (the local Cramer-Rao bound
for Gaussian noise), the scale any estimator's error is judged against.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import torch
from torch import Tensor

from shared_core.manifolds import SegrePoint, SegreTangent

from .operators import RankOneSensing
from .problem import RecoveryProblem, check_point
from .tensors import relative_error

__all__ = [
    "Trace",
    "conjugate_gradient",
    "gn_direction",
    "noise_floor",
    "rgd",
    "rgn",
    "spectral_init",
    "tangent_dot",
]


@dataclass
class Trace:
    """What a solver run records, one entry per iterate (the start included).

    Attributes:
        method: the solver's name.
        x: the last iterate.
        errors: relative Frobenius errors to ``x_true`` (empty when none was given).
        losses: ``0.5 ||A(X) - y||^2``.
        times: cumulative wall seconds of the solver's own work (error evaluation excluded).
    """

    method: str
    x: SegrePoint
    errors: list[float] = field(default_factory=list)
    losses: list[float] = field(default_factory=list)
    times: list[float] = field(default_factory=list)

    def time_to(self, tol: float) -> float:
        """Wall seconds until the relative error first fell below ``tol`` (inf if never)."""
        for e, t in zip(self.errors, self.times, strict=True):
            if e < tol:
                return t
        return math.inf


class _Recorder:
    def __init__(self, problem, method, x, x_true, stop_error, ftol=0.0):
        self.problem, self.x_true, self.stop_error = problem, x_true, stop_error
        self.ftol = ftol
        # A loss at round-off level of the data: the iterate fits y exactly; nothing moves.
        self.floor = 0.5 * float(problem.y @ problem.y) * torch.finfo(problem.y.dtype).eps ** 2
        self.trace = Trace(method, x)
        self.elapsed = 0.0
        self._t0 = time.perf_counter()
        self.record(x, self.problem.loss(x))

    def record(self, x, loss) -> bool:
        """Log ``x``; True when the run should stop (error target reached or non-finite)."""
        self.elapsed += time.perf_counter() - self._t0
        tr = self.trace
        tr.x = x
        tr.losses.append(loss)
        tr.times.append(self.elapsed)
        stop = not math.isfinite(loss)
        if len(tr.losses) > 1 and self.ftol > 0:
            stop = stop or abs(tr.losses[-2] - loss) <= self.ftol * tr.losses[-2]
            stop = stop or loss <= self.floor
        if self.x_true is not None:
            err = relative_error(x, self.x_true)
            tr.errors.append(err)
            stop = stop or (self.stop_error is not None and err < self.stop_error)
        self._t0 = time.perf_counter()
        return stop


def tangent_dot(u: SegreTangent, v: SegreTangent) -> Tensor:
    """The metric on tangent tuples: ``mu mu' + sum_k <w_k, w'_k>``."""
    out = (u[0] * v[0]).sum()
    for a, b in zip(u[1], v[1], strict=True):
        out = out + (a * b).sum()
    return out


def _comb(a: float, u: SegreTangent, b: float, v: SegreTangent) -> SegreTangent:
    return SegreTangent(
        a * u[0] + b * v[0], tuple(a * p + b * q for p, q in zip(u[1], v[1], strict=True))
    )


def _scale(a: float, u: SegreTangent) -> SegreTangent:
    return SegreTangent(a * u[0], tuple(a * w for w in u[1]))


def conjugate_gradient(matvec, rhs: SegreTangent, *, tol: float = 1e-12, maxiter: int = 200):
    """CG for ``H xi = rhs`` on tangent tuples (``H`` symmetric positive semidefinite).

    Stops when ``|residual| <= tol |rhs|``. Returns ``(xi, iterations)``.
    """
    xi = _scale(0.0, rhs)
    res = rhs
    p = rhs
    rr = float(tangent_dot(res, res))
    stop = tol**2 * rr
    it = 0
    for it in range(1, maxiter + 1):
        if rr <= stop or rr == 0.0:
            it -= 1
            break
        hp = matvec(p)
        php = float(tangent_dot(p, hp))
        if php <= 0:
            break
        a = rr / php
        xi = _comb(1.0, xi, a, p)
        res = _comb(1.0, res, -a, hp)
        rr_new = float(tangent_dot(res, res))
        p = _comb(1.0, res, rr_new / rr, p)
        rr = rr_new
    return xi, it


def _check_iters(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{name} must be an int >= 0, got {value!r}")
    return value


def rgd(
    problem: RecoveryProblem,
    x0: SegrePoint,
    *,
    max_iter: int = 500,
    step: str | float = "exact",
    armijo: bool = False,
    x_true: SegrePoint | None = None,
    stop_error: float | None = None,
    ftol: float = 0.0,
) -> Trace:
    """Riemannian gradient descent with the exact tangent-line step (or a constant step).

    Args:
        problem: the recovery problem.
        x0: the start (a rank-one point of the problem's shape).
        max_iter: iterations.
        step: ``"exact"`` or a constant step size ``> 0``.
        armijo: backtrack (halving, sufficient decrease ``1e-4``) on the retracted loss.
        x_true: the planted tensor, to record relative errors.
        stop_error: stop once the relative error is below this (needs ``x_true``).
        ftol: when ``> 0``, stop once the loss changes by at most ``ftol`` times itself in one
            iteration, or falls to round-off level (``0.5 |y|^2 eps^2``).

    Returns:
        A :class:`Trace`.
    """
    man = problem.manifold
    x = check_point(man, x0)
    max_iter = _check_iters("max_iter", max_iter)
    if step != "exact" and (
        isinstance(step, bool) or not isinstance(step, int | float) or not step > 0
    ):
        raise ValueError(f"step must be 'exact' or a number > 0, got {step!r}")
    rec = _Recorder(problem, "rgd", x, x_true, stop_error, ftol)
    r = problem.residual(x)
    for _ in range(max_iter):
        g = problem.rgrad(x, r)
        gg = float(tangent_dot(g, g))
        if gg == 0.0:
            break
        if step == "exact":
            ag = problem.apply(x, g)
            alpha = gg / max(float(ag @ ag), torch.finfo(ag.dtype).tiny)
        else:
            alpha = float(step)
        f0 = 0.5 * float(r @ r)
        x_new = man.retr(x, _scale(-alpha, g))
        r = problem.residual(x_new)
        f_new = 0.5 * float(r @ r)
        if armijo:
            for _ in range(40):
                if f_new <= f0 - 1e-4 * alpha * gg:
                    break
                alpha *= 0.5
                x_new = man.retr(x, _scale(-alpha, g))
                r = problem.residual(x_new)
                f_new = 0.5 * float(r @ r)
        x = x_new
        if rec.record(x, f_new):
            break
    return rec.trace


def gn_direction(
    problem: RecoveryProblem,
    x: SegrePoint,
    r: Tensor,
    *,
    solver: str = "auto",
    cg_tol: float = 1e-12,
    cg_maxiter: int = 200,
) -> SegreTangent:
    r"""The Gauss-Newton step :math:`\arg\min_{\xi \in T_X}\|\mathcal{A}(\xi) + r\|^2`.

    ``solver``:

    - ``"exact"`` (alias ``"qr"``): QR least squares on the ``m x dim`` Jacobian (the
      minimum-norm solution when ``m < dim``);
    - ``"normal"``: Cholesky of :math:`J^\top J` (half the flops of QR; it squares the
      condition number, so it falls back to QR when the factorisation fails);
    - ``"cg"``: matrix-free conjugate gradients on :math:`P_T\mathcal{A}^*\mathcal{A}P_T`;
    - ``"auto"``: ``"cg"`` when the Jacobian would exceed ``5e7`` entries, else ``"normal"``
      when ``m >= 4 dim`` (well conditioned for random sensing), else ``"exact"``.

    Full observation needs no solve: the step is :math:`-P_T r`.
    """
    if solver not in ("auto", "exact", "qr", "normal", "cg"):
        raise ValueError(f"unknown solver {solver!r}; expected one of auto, exact, qr, normal, cg")
    if problem.op.isometry:
        return _scale(-1.0, problem.rgrad(x, r))
    m, dim = problem.op.num_measurements, problem.dof
    if solver == "auto":
        solver = "cg" if m * dim > 5e7 else ("normal" if m >= 4 * dim else "exact")
    if solver in ("exact", "qr", "normal"):
        jac, bases = problem.jacobian(x)
        coords = None
        if solver == "normal":
            chol, info = torch.linalg.cholesky_ex(jac.T @ jac)
            if int(info) == 0:
                coords = torch.cholesky_solve((jac.T @ -r)[:, None], chol)[:, 0]
        if coords is None and jac.shape[0] >= jac.shape[1]:
            coords = torch.linalg.lstsq(jac, -r[:, None]).solution[:, 0]
        elif coords is None:
            coords = torch.linalg.pinv(jac) @ -r
        return problem.tangent_from_coords(coords, bases)
    rhs = _scale(-1.0, problem.rgrad(x, r))
    xi, _ = conjugate_gradient(
        lambda v: problem.gn_matvec(x, v), rhs, tol=cg_tol, maxiter=cg_maxiter
    )
    return xi


def rgn(
    problem: RecoveryProblem,
    x0: SegrePoint,
    *,
    max_iter: int = 20,
    solver: str = "auto",
    cg_tol: float = 1e-12,
    cg_maxiter: int = 200,
    x_true: SegrePoint | None = None,
    stop_error: float | None = None,
    ftol: float = 0.0,
) -> Trace:
    """Riemannian Gauss-Newton: tangent least squares, then the HOSVD retraction.

    Args:
        problem, x0, max_iter, x_true, stop_error, ftol: as for :func:`rgd`.
        solver, cg_tol, cg_maxiter: how the Gauss-Newton system is solved
            (:func:`gn_direction`).

    Returns:
        A :class:`Trace`.
    """
    man = problem.manifold
    x = check_point(man, x0)
    max_iter = _check_iters("max_iter", max_iter)
    rec = _Recorder(problem, "rgn", x, x_true, stop_error, ftol)
    r = problem.residual(x)
    for _ in range(max_iter):
        xi = gn_direction(problem, x, r, solver=solver, cg_tol=cg_tol, cg_maxiter=cg_maxiter)
        x = man.retr(x, xi)
        r = problem.residual(x)
        if rec.record(x, 0.5 * float(r @ r)):
            break
    return rec.trace


def _fit_scale(problem: RecoveryProblem, factors) -> SegrePoint:
    one = torch.ones(1, dtype=factors[0].dtype)
    p = problem.op.forward(one, factors)
    pp = float(p @ p)
    lam = float(p @ problem.y) / pp if pp > 0 else 0.0
    if lam == 0.0 or not math.isfinite(lam):
        raise ValueError(
            "spectral initialisation found no signal: the measurements are orthogonal to the "
            "rank-one direction (is y zero?)"
        )
    factors = list(factors)
    if lam < 0:
        factors[0] = -factors[0]
    return SegrePoint(torch.full((1,), abs(lam), dtype=factors[0].dtype), tuple(factors))


def spectral_init(
    problem: RecoveryProblem,
    *,
    method: str = "auto",
    sweeps: int = 10,
    starts: int = 4,
    generator: torch.Generator | None = None,
) -> SegrePoint:
    r"""A rank-one start from :math:`\mathcal{A}^*(y)` (whose mean is :math:`mX` for Gaussian
    sensing), scaled by least squares on the measurements.

    ``"hosvd"`` forms the dense :math:`\mathcal{A}^*(y)` once and takes its rank-one truncated
    HOSVD refined by ``sweeps`` power sweeps; ``"power"`` is matrix-free: higher-order power
    iteration :math:`u_k \leftarrow \mathcal{A}^*(y)\times_{j\ne k}u_j / \|\cdot\|` from
    ``starts`` random starts (best kept; drawn from ``generator``, a fixed seed when None).
    ``"auto"``: power for rank-one sensing (whose point is never to form ``n^d`` arrays), else
    hosvd when the tensor has at most 2e6 entries.
    """
    if method not in ("auto", "hosvd", "power"):
        raise ValueError(f"unknown method {method!r}; expected one of auto, hosvd, power")
    sweeps = _check_iters("sweeps", sweeps)
    dims = problem.dims
    if method == "auto":
        small = math.prod(dims) <= 2_000_000
        method = "hosvd" if small and not isinstance(problem.op, RankOneSensing) else "power"
    y = problem.y
    if float(y.abs().max()) == 0.0:
        raise ValueError("all measurements are zero: the rank-one tensor cannot be initialised")
    if method == "hosvd":
        t = problem.op.adjoint_dense(y)
        from shared_core.manifolds import Segre

        x = Segre(dims, proj_sweeps=sweeps).proj(t)
        return _fit_scale(problem, x.factors)
    if generator is None:  # deterministic by default
        generator = torch.Generator().manual_seed(0)
    best, best_val = None, -1.0
    for _ in range(max(1, starts)):
        facs = []
        for n in dims:
            f = torch.randn(n, generator=generator, dtype=y.dtype)
            facs.append(f / f.norm())
        for _ in range(max(1, sweeps)):
            for k in range(len(dims)):
                g = problem.op.adjoint_contract(y, facs)[k]
                facs[k] = g / g.norm()
        one = torch.ones(1, dtype=y.dtype)
        val = abs(float(problem.op.forward(one, facs) @ y))
        if val > best_val:
            best, best_val = facs, val
    return _fit_scale(problem, best)


def noise_floor(problem: RecoveryProblem, x_true: SegrePoint, sigma: float) -> float:
    r"""The oracle relative error :math:`\sigma\,(\mathrm{tr}(J^\top J)^{-1})^{1/2}/\|X^\star\|`.

    ``J`` is the Jacobian at the truth in orthonormal tangent coordinates; this is the expected
    error of least squares restricted to the true tangent space under i.i.d.
    :math:`N(0, \sigma^2)` noise (inf when ``J`` is rank deficient).
    """
    if not (math.isfinite(sigma) and sigma >= 0):
        raise ValueError(f"sigma must be finite and >= 0, got {sigma!r}")
    jac, _ = problem.jacobian(x_true)
    s = torch.linalg.svdvals(jac)
    if jac.shape[0] < jac.shape[1] or float(s[-1]) <= s[0] * 1e-12:
        return math.inf
    return sigma * float((1 / s**2).sum().sqrt()) / float(x_true.scale[0])
