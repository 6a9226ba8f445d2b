r"""Burer–Monteiro GD on the ε-surrogate with one fused pass per iteration (NumPy/SciPy, CPU).

Why a second loop: the reference loop (:func:`eps_completion.solvers.bm_gd` with
``backend="torch"``) composes :func:`~eps_completion.objective.value_and_grad` and
:func:`~eps_completion.objective.line_quartic`; per iteration that is ~40 small torch
calls, 12 gathers of factor rows on Ω and 2 scatters. On small problems the calls' fixed
cost dominates, on large ones the gathers do. This module computes the same quantities
(value, gradient, quartic coefficients, step) with fewer and cheaper operations. Two routes:

* **sparse** (uniform weights, large m n): per iteration 4 gathers of factor rows on Ω
  (L, R, ∇_L, ∇_R; the reference loop takes 12), 2 sparse products with the residual on Ω
  (:class:`~eps_completion.omega.OmegaOps`: SciPy CSR built once, work arrays allocated
  once), 4 row-wise dot products and k x k Gram matrices:
  O(|Ω| k + (m+n) k²) time, O((m+n) k + |Ω| k) memory.
* **dense** (m n small, or dense weights ξ): X = L Rᵀ, the squared weights W² and
  :math:`\mathcal P_\Omega(B)` as m x n arrays; per iteration six BLAS products of size m n k
  and a few element-wise passes, each one call on a contiguous array.

Coefficients of :math:`f(t) - f(0)` along :math:`-(\nabla_L, \nabla_R)`, with
:math:`X_1 = \nabla_L R^\top + L\nabla_R^\top`, :math:`X_2 = \nabla_L\nabla_R^\top` and
:math:`G = W^2\odot(X - \mathcal P_\Omega B)` (the Euclidean gradient in X):
:math:`c_1 = -\|\nabla f\|^2` (the directional derivative, exact, and free of the
cancellation of :math:`P_{01} - q_1`), :math:`c_2 = \tfrac12\langle W^2 X_1, X_1\rangle +
\langle G, X_2\rangle`, :math:`c_3 = -\langle W^2 X_1, X_2\rangle`,
:math:`c_4 = \tfrac12\langle W^2 X_2, X_2\rangle`; on the sparse route each inner product
is its Ω part plus ε² times (Frobenius part from k x k Grams − Ω part), as in
:func:`~eps_completion.objective.line_quartic`.
"""

from __future__ import annotations

import math

import numpy as np

from .linesearch import quartic_argmin
from .omega import OmegaOps, dot
from .problem import Observations

__all__ = ["fused_bm_gd", "use_dense"]


def use_dense(m: int, n: int, k: int, n_observed: int) -> bool:
    """The route for uniform weights: dense while it is cheaper and single-threaded.

    Measured on the 2-core box (1 thread): a dense iteration costs ~50 µs plus ~27 ns per
    matrix entry, a sparse one ~200 µs plus ~165 ns per observed entry, so dense wins up to
    m n ≈ 6 |Ω|, and always below m n ≈ 5000 (2^12 here), where the sparse route's fixed
    cost dominates. Above m n k = 2^18 OpenBLAS runs its products multi-threaded, which on
    a loaded machine was up to 10x slower than the sparse route (512 x 512, p = 0.1), so
    dense stops there.
    """
    return m * n * k <= 2**18 and (m * n <= 2**12 or m * n <= 6 * n_observed)


class _Dense:
    """Value, gradient, quartic and step with m x n arrays."""

    def __init__(self, obs: Observations, eps: float, xi: np.ndarray | None, L, R):
        m, n = obs.shape
        rows, cols = obs.rows.numpy(), obs.cols.numpy()
        vals = obs.values.numpy()
        dtype = vals.dtype
        if xi is None:
            self.w2 = np.full((m, n), eps * eps, dtype=dtype)
        else:
            self.w2 = np.square(eps * xi.astype(dtype, copy=False))
        self.w2[rows, cols] = 1.0
        self.bd = np.zeros((m, n), dtype=dtype)
        self.bd[rows, cols] = vals
        self.L, self.R = L, R

    def value_grad(self) -> tuple[float, np.ndarray, np.ndarray]:
        L, R = self.L, self.R
        d = L @ R.T
        d -= self.bd  # X - P_Omega(B): the residual on Omega, X itself off it
        g = self.w2 * d
        self.g = g
        return 0.5 * dot(g, d), g @ R, g.T @ L

    def quartic(self, gl: np.ndarray, gr: np.ndarray, g2: float) -> list[float]:
        L, R = self.L, self.R
        x1 = gl @ R.T
        x1 += L @ gr.T
        x2 = gl @ gr.T
        wx1 = self.w2 * x1
        c2 = 0.5 * dot(wx1, x1) + dot(self.g, x2)
        c3 = -dot(wx1, x2)
        c4 = 0.5 * dot(self.w2 * x2, x2)
        return [-g2, c2, c3, c4]

    def step(self, t: float, gl: np.ndarray, gr: np.ndarray) -> None:
        self.L = self.L - t * gl
        self.R = self.R - t * gr


class _Sparse:
    """Value, gradient, quartic and step from the factor rows on Ω (uniform weights)."""

    def __init__(self, obs: Observations, eps: float, L, R):
        self.om = OmegaOps(obs)
        self.b = self.om.b
        self.e2 = eps * eps
        self.L, self.R = L, R

    def value_grad(self) -> tuple[float, np.ndarray, np.ndarray]:
        L, R, e2, om = self.L, self.R, self.e2, self.om
        # gathering the moved factors gives the same floats as moving the gathered rows,
        # in one pass instead of two
        lo, ro = om.rows_of(L, "lo"), om.cols_of(R, "ro")
        x = om.rowdot(lo, ro, "x")
        res = np.subtract(x, self.b, out=om.buffer("res"))
        ll, rr = L.T @ L, R.T @ R
        f = 0.5 * (dot(res, res) + e2 * (float(np.vdot(ll, rr)) - dot(x, x)))
        self.lo, self.ro, self.x, self.res, self.ll, self.rr = lo, ro, x, res, ll, rr
        if e2 != 0.0:
            vals = np.multiply(x, -e2, out=om.values)
            vals += res  # S = P_Omega((1 - eps^2) X - B) on Omega
        else:
            om.set_values(res)
        gl, gr = om.times(R), om.times_t(L)
        if e2 != 0.0:
            gl += e2 * (L @ rr)
            gr += e2 * (R @ ll)
        return f, gl, gr

    def quartic(self, gl: np.ndarray, gr: np.ndarray, g2: float) -> list[float]:
        L, R, e2, om = self.L, self.R, self.e2, self.om
        glo, gro = om.rows_of(gl, "glo"), om.cols_of(gr, "gro")
        e1 = om.rowdot(glo, self.ro, "e1")
        e1 += om.rowdot(self.lo, gro, "ex2")  # X_1 on Omega
        ex2 = om.rowdot(glo, gro, "ex2")  # X_2 on Omega
        ldl, rdr = L.T @ gl, R.T @ gr
        dldl, drdr = gl.T @ gl, gr.T @ gr
        ll, rr = self.ll, self.rr
        f11 = float(np.vdot(dldl, rr) + 2 * np.vdot(ldl.T, rdr) + np.vdot(ll, drdr))
        f12 = float(np.vdot(dldl, rdr) + np.vdot(ldl, drdr))
        f22 = float(np.vdot(dldl, drdr))
        f02 = float(np.vdot(ldl, rdr))
        on11, on12, on22 = dot(e1, e1), dot(e1, ex2), dot(ex2, ex2)
        on02 = dot(self.x, ex2)
        c2 = 0.5 * (on11 + e2 * (f11 - on11)) + dot(self.res, ex2) + e2 * (f02 - on02)
        c3 = -(on12 + e2 * (f12 - on12))
        c4 = 0.5 * (on22 + e2 * (f22 - on22))
        return [-g2, c2, c3, c4]

    def step(self, t: float, gl: np.ndarray, gr: np.ndarray) -> None:
        self.L = self.L - t * gl
        self.R = self.R - t * gr


def fused_bm_gd(
    obs: Observations,
    eps: float,
    xi: np.ndarray | None,
    L: np.ndarray,
    R: np.ndarray,
    max_iter: int,
    stop: float,
    route: str = "auto",
) -> tuple[np.ndarray, np.ndarray, int, bool, list[float]]:
    """The loop of :func:`eps_completion.solvers.bm_gd` (same stopping rules) on NumPy arrays.

    Args:
        obs: observed entries (CPU tensors).
        eps: ε ≥ 0 (0: the plain loss).
        xi: dense weights ξ or None (ξ = 1); dense weights force the dense route.
        L, R: starting factors (copied before use).
        max_iter: iteration cap.
        stop: absolute gradient-norm threshold.
        route: ``"auto"``, ``"dense"`` or ``"sparse"``.

    Returns:
        ``(L, R, n_iter, converged, history)``.
    """
    m, n = obs.shape
    if route not in ("auto", "dense", "sparse"):
        raise ValueError(f"route must be 'auto', 'dense' or 'sparse', got {route!r}")
    if route == "sparse" and xi is not None:
        raise ValueError("the sparse route needs uniform weights (xi=None)")
    auto_dense = use_dense(m, n, L.shape[1], obs.n_observed)
    dense = xi is not None or route == "dense" or (route == "auto" and auto_dense)
    L, R = np.array(L, copy=True), np.array(R, copy=True)
    state = _Dense(obs, eps, xi, L, R) if dense else _Sparse(obs, eps, L, R)
    f, gl, gr = state.value_grad()
    history = [f]
    for it in range(1, max_iter + 1):
        g2 = dot(gl, gl) + dot(gr, gr)
        if math.sqrt(g2) <= stop:
            return state.L, state.R, it - 1, True, history
        t = quartic_argmin(state.quartic(gl, gr, g2))
        if t <= 0.0:
            return state.L, state.R, it - 1, False, history  # stalled (rounding level)
        state.step(t, gl, gr)
        f, gl, gr = state.value_grad()
        history.append(f)
    g = math.sqrt(dot(gl, gl) + dot(gr, gr))
    return state.L, state.R, max_iter, g <= stop, history
