r"""FGD for elliptic PDEs in the Sobolev space :math:`H^1_0`, with grid levels as representations.

Problem: on :math:`\Omega = (0,1)^2` with zero Dirichlet data, minimise

.. math:: E(u) = \int_\Omega \tfrac12|\nabla u|^2 + \phi(u) - s\,u\,dx,

:math:`\phi = 0` (Poisson, :math:`-\Delta u = s`) or :math:`\phi(u) = u^4/4` (semilinear,
:math:`-\Delta u + u^3 = s`). Discretised with P1 finite elements on the uniform right-triangle
mesh of level :math:`L` (:math:`2^L` intervals per side, lumped quadrature for :math:`\phi`
and :math:`s`): :math:`E(u) = \tfrac12 u^\top A u + h^2\sum_i \phi(u_i) - b^\top u`,
:math:`b_i = h^2 s(x_i)`, :math:`A` the 5-point matrix (the P1 stiffness on this mesh).

Functional gradient in :math:`H^1_0` (inner product :math:`\langle u, v\rangle = u^\top A v =
\int\nabla u\cdot\nabla v`): the Riesz representer of :math:`DE(u)` is
:math:`g = A^{-1} r`, :math:`r = Au + h^2\phi'(u) - b`. Representations: the P1 spaces
:math:`V_\ell \subset V_L` of coarser levels (nested: :math:`P_\ell`, linear interpolation, is
exact). The best approximation of :math:`g` in :math:`V_\ell` is its :math:`A`-orthogonal
projection, computable without :math:`g`:

.. math:: \hat g_\ell = P_\ell A_\ell^{-1} P_\ell^\top r, \qquad A_\ell = P_\ell^\top A P_\ell,

(:func:`projected_gradient`). Relative error estimate (hierarchical, :func:`hierarchical_error`):
with orthogonal nested projections :math:`\|\hat g_{\ell+1} - \hat g_\ell\|^2 =
\|\hat g_{\ell+1}\|^2 - \|\hat g_\ell\|^2`, so
:math:`e_\ell = (\|\hat g_{\ell+1}\|^2 - \|\hat g_\ell\|^2)^{1/2}/\|\hat g_{\ell+1}\|` uses one
solve per level. It is a lower bound of the true error over :math:`V_{\ell+1}`; under the
saturation assumption :math:`\|g - \hat g_{\ell+1}\| \le \beta\|g - \hat g_\ell\|` it is within
:math:`\sqrt{1-\beta^2}` of it. The run records the true error too (one fine solve, outside the
method's timing).

Iterate: the vector of :math:`u` on the finest level (prolongation merges each coarse step
exactly), so evaluation never grows with the number of steps.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla

from .functional import check_delta, step_size

__all__ = [
    "PDEStepRecord",
    "PoissonHierarchy",
    "grid_points",
    "hierarchical_error",
    "pde_fgd",
    "projected_gradient",
    "prolongation",
    "stiffness",
]

_REACTIONS = ("none", "cubic")


def _check_level(level: int, lo: int = 1) -> int:
    if isinstance(level, bool) or not isinstance(level, int) or level < lo or level > 12:
        raise ValueError(f"level must be an int in [{lo}, 12], got {level!r}")
    return level


def grid_points(level: int) -> np.ndarray:
    """Interior nodes of level ``level``: ``((2^level - 1)^2, 2)``, x-index major."""
    n = 2 ** _check_level(level)
    t = np.arange(1, n) / n
    xx, yy = np.meshgrid(t, t, indexing="ij")
    return np.stack([xx.ravel(), yy.ravel()], axis=1)


def stiffness(level: int) -> sp.csr_matrix:
    """P1 stiffness on the right-triangle mesh = the 5-point matrix (4 on the diagonal, -1)."""
    m = 2 ** _check_level(level) - 1
    t = sp.diags([-np.ones(m - 1), 2 * np.ones(m), -np.ones(m - 1)], [-1, 0, 1])
    eye = sp.identity(m)
    return (sp.kron(t, eye) + sp.kron(eye, t)).tocsr()


def prolongation(level: int) -> sp.csr_matrix:
    r"""Linear interpolation :math:`V_\ell \to V_{\ell+1}` (mesh diagonals (i,j)-(i+1,j+1)).

    Fine node (I, J): both even -> the coarse node; one odd -> mean of the two coarse
    neighbours along that axis; both odd -> mean of the two ends of the mesh diagonal.
    """
    nc = 2 ** _check_level(level)
    nf, mc, mf = 2 * nc, nc - 1, 2 * nc - 1
    rows, cols, vals = [], [], []

    def add(fi, fj, ci, cj, w):
        ok = (ci >= 1) & (ci <= mc) & (cj >= 1) & (cj <= mc)
        rows.append(((fi - 1) * mf + (fj - 1))[ok])
        cols.append(((ci - 1) * mc + (cj - 1))[ok])
        vals.append(np.full(int(ok.sum()), w))

    fi, fj = np.meshgrid(np.arange(1, nf), np.arange(1, nf), indexing="ij")
    fi, fj = fi.ravel(), fj.ravel()
    ei, ej = fi % 2 == 0, fj % 2 == 0
    m = ei & ej
    add(fi[m], fj[m], fi[m] // 2, fj[m] // 2, 1.0)
    m = ~ei & ej
    add(fi[m], fj[m], (fi[m] - 1) // 2, fj[m] // 2, 0.5)
    add(fi[m], fj[m], (fi[m] + 1) // 2, fj[m] // 2, 0.5)
    m = ei & ~ej
    add(fi[m], fj[m], fi[m] // 2, (fj[m] - 1) // 2, 0.5)
    add(fi[m], fj[m], fi[m] // 2, (fj[m] + 1) // 2, 0.5)
    m = ~ei & ~ej
    add(fi[m], fj[m], (fi[m] - 1) // 2, (fj[m] - 1) // 2, 0.5)
    add(fi[m], fj[m], (fi[m] + 1) // 2, (fj[m] + 1) // 2, 0.5)
    r, c, v = (np.concatenate(a) for a in (rows, cols, vals))
    return sp.csr_matrix((v, (r, c)), shape=(mf * mf, mc * mc))


class PoissonHierarchy:
    r"""The discrete functional on level ``top`` and its coarse representations.

    Args:
        top: finest level (the discrete problem), at least 2.
        source: :math:`s`, a callable ``(n, 2) -> (n,)``.
        reaction: ``"none"`` (Poisson) or ``"cubic"`` (:math:`\phi = u^4/4`).
    """

    def __init__(
        self, top: int, source: Callable[[np.ndarray], np.ndarray], reaction: str = "none"
    ) -> None:
        self.top = _check_level(top, lo=2)
        if reaction not in _REACTIONS:
            raise ValueError(f"reaction must be one of {_REACTIONS}, got {reaction!r}")
        self.reaction = reaction
        self.h = 1.0 / 2**top
        self.points = grid_points(top)
        s = np.asarray(source(self.points), dtype=np.float64).reshape(-1)
        if s.shape[0] != self.points.shape[0] or not np.isfinite(s).all():
            raise ValueError("source must return one finite value per grid point")
        self.b = self.h**2 * s
        self.A = stiffness(top)
        self._to_top: dict[int, sp.csr_matrix] = {top: sp.identity(self.A.shape[0], format="csr")}
        for lev in range(top - 1, 0, -1):
            self._to_top[lev] = (self._to_top[lev + 1] @ prolongation(lev)).tocsr()
        self._lu: dict[int, object] = {}

    def to_top(self, level: int) -> sp.csr_matrix:
        """:math:`P_\\ell`: values on level ``level`` -> values on ``top``."""
        if level not in self._to_top:
            raise ValueError(f"level must lie in 1..{self.top}, got {level!r}")
        return self._to_top[level]

    def factor(self, level: int):
        """Cached sparse LU of :math:`A_\\ell = P_\\ell^\\top A P_\\ell` (the level's stiffness)."""
        if level not in self._lu:
            self._lu[level] = spla.splu(stiffness(level).tocsc())
        return self._lu[level]

    def clear_cache(self) -> None:
        """Drop the cached factorisations (so that each timed run pays for its own)."""
        self._lu.clear()

    def energy(self, u: np.ndarray) -> float:
        """:math:`E(u)` of the discrete functional."""
        with np.errstate(over="ignore", invalid="ignore"):  # a diverging run reports inf/nan
            phi = 0.25 * u**4 if self.reaction == "cubic" else 0.0
            return float(0.5 * u @ (self.A @ u) + self.h**2 * np.sum(phi) - self.b @ u)

    def residual(self, u: np.ndarray) -> np.ndarray:
        """:math:`r = Au + h^2\\phi'(u) - b` (the derivative as a dual vector)."""
        if not np.isfinite(u).all():
            raise ValueError("the iterate has non-finite values")
        r = self.A @ u - self.b
        if self.reaction == "cubic":
            r = r + self.h**2 * u**3
        return r

    def smoothness(self, bound: float) -> float:
        r"""Smoothness of :math:`E` in the :math:`A`-norm on :math:`\|u\|_\infty \le` ``bound``.

        :math:`1 + 3\,\text{bound}^2 h^2/\lambda_{\min}(A)` with
        :math:`\lambda_{\min}(A) = 8\sin^2(\pi h/2)` (1 for Poisson).
        """
        if self.reaction == "none":
            return 1.0
        lam_min = 8 * math.sin(math.pi * self.h / 2) ** 2
        return 1.0 + 3 * bound**2 * self.h**2 / lam_min

    def reference(self, tol: float = 1e-12, max_iter: int = 50) -> np.ndarray:
        """The discrete minimiser: one sparse solve (Poisson) or Newton's method (cubic)."""
        lu = spla.splu(self.A.tocsc())
        u = lu.solve(self.b)
        if self.reaction == "none":
            return u
        for _ in range(max_iter):
            r = self.residual(u)
            jac = (self.A + sp.diags(3 * self.h**2 * u**2)).tocsc()
            du = spla.spsolve(jac, r)
            u = u - du
            if np.linalg.norm(du) <= tol * max(1.0, np.linalg.norm(u)):
                return u
        raise RuntimeError("Newton did not converge")


def projected_gradient(
    hier: PoissonHierarchy, level: int, r: np.ndarray
) -> tuple[np.ndarray, float]:
    r"""The level-``level`` representer and its squared energy norm.

    Returns:
        :math:`\hat g_\ell = P_\ell A_\ell^{-1}P_\ell^\top r` on the top grid, and
        :math:`\|\hat g_\ell\|_A^2 = c^\top P_\ell^\top r` (:math:`c = A_\ell^{-1}P_\ell^\top r`).
    """
    p = hier.to_top(level)
    rc = p.T @ r
    c = hier.factor(level).solve(rc)
    return p @ c, float(c @ rc)


def hierarchical_error(hier: PoissonHierarchy, level: int, r: np.ndarray) -> float:
    r"""Hierarchical relative-error estimate of the level-``level`` representer.

    :math:`e_\ell = (\|\hat g_{\ell+1}\|^2-\|\hat g_\ell\|^2)^{1/2}/\|\hat g_{\ell+1}\|`.

    At the top level the representation is exact for the discrete functional: returns 0.
    """
    if level >= hier.top:
        return 0.0
    _, n1 = projected_gradient(hier, level + 1, r)
    _, n0 = projected_gradient(hier, level, r)
    if n1 <= 0:
        raise ValueError(
            "the gradient vanishes on the finer level: the relative error is undefined"
        )
    return math.sqrt(max(n1 - n0, 0.0) / n1)


@dataclass
class PDEStepRecord:
    """One step: the estimate the rule used, the true error, the level, the energy, errors."""

    step: int
    level: int
    est_error: float
    true_error: float
    energy: float
    l2_error: float
    seconds: float


def pde_fgd(
    hier: PoissonHierarchy,
    steps: int,
    *,
    delta: float = 0.3,
    start_level: int = 2,
    adaptive: bool = True,
    lr: float | None = None,
    u_bound: float = 1.0,
    coarsen_below: float = 0.5,
    exact: np.ndarray | None = None,
    u0: np.ndarray | None = None,
) -> tuple[np.ndarray, list[PDEStepRecord]]:
    r"""FGD in :math:`H^1_0` with the level chosen by the relative-error rule.

    Each step: :math:`r` at :math:`u`; from the current level, raise the level while the
    hierarchical estimate exceeds ``delta`` (the top level is exact); step
    :math:`u \leftarrow u - \eta\hat g_\ell`; if the estimate is at most
    ``coarsen_below * delta``, start the next step one level lower (not below ``start_level``).
    ``adaptive=False``: always ``start_level`` (the fixed baseline).

    Args:
        hier: the problem.
        steps: number of steps.
        delta: :math:`\delta\in(0,1)`.
        start_level: first (and for the baseline, only) level.
        adaptive: see above.
        lr: step; default :func:`~adaptive_fgd.functional.step_size` with the smoothness on
            :math:`\|u\|_\infty \le` ``u_bound``.
        u_bound: bound used for the smoothness of the cubic term.
        coarsen_below: slack fraction for coarsening, in [0, 1).
        exact: grid values of the exact solution (for the recorded :math:`L^2` error).
        u0: start (default 0).

    Returns:
        The final iterate on the top grid and the per-step records (``seconds``: process CPU
        time of the method's own work; the true error is computed outside it).
    """
    delta = check_delta(delta)
    _check_level(start_level)
    if start_level > hier.top:
        raise ValueError(f"start_level {start_level} above the top level {hier.top}")
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
        raise ValueError(f"steps must be a non-negative int, got {steps!r}")
    if not (0 <= coarsen_below < 1):
        raise ValueError(f"coarsen_below must lie in [0, 1), got {coarsen_below!r}")
    eta = step_size(hier.smoothness(u_bound), delta) if lr is None else float(lr)
    if not (eta > 0 and math.isfinite(eta)):
        raise ValueError(f"lr must be finite and > 0, got {lr!r}")
    u = np.zeros(hier.A.shape[0]) if u0 is None else np.array(u0, dtype=np.float64)
    lu_top = spla.splu(hier.A.tocsc())  # diagnostics only: not the method's cache, not timed
    level, cpu, out = start_level, 0.0, []
    for t in range(steps):
        t0 = time.process_time()
        r = hier.residual(u)
        est = hierarchical_error(hier, level, r)
        while adaptive and est > delta and level < hier.top:
            level += 1
            est = hierarchical_error(hier, level, r)
        ghat, _ = projected_gradient(hier, level, r)
        u = u - eta * ghat
        energy = hier.energy(u)
        if not math.isfinite(energy):
            raise ValueError(f"non-finite energy at step {t}: lower lr")
        used = level
        if adaptive and est <= coarsen_below * delta and level > start_level:
            level -= 1
        cpu += time.process_time() - t0
        g = lu_top.solve(r)  # diagnostics: the exact representer
        gnorm = math.sqrt(max(float(g @ r), 0.0))
        diff = g - ghat
        true_err = math.sqrt(max(float(diff @ (hier.A @ diff)), 0.0)) / gnorm if gnorm > 0 else 0.0
        l2 = math.nan if exact is None else float(np.sqrt(np.mean((u - exact) ** 2)))
        out.append(PDEStepRecord(t, used, est, true_err, energy, l2, cpu))
    return u, out
