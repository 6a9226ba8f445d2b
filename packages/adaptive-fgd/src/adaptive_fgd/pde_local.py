r"""Local (residual-driven) refinement of the :math:`H^1_0` gradient representation.

:mod:`adaptive_fgd.pde` refines *globally*: the gradient is represented on a whole coarser level
:math:`V_\ell`. Here it is represented on a **hierarchical grid**: a set :math:`S` of nodes of
the top mesh, each carrying its hierarchical basis function :math:`\psi_q` (the hat of the
coarsest level on which node :math:`q` exists). Every vector :math:`v` on the top mesh is
:math:`v = \sum_q w_q(v)\psi_q` with the **hierarchical surpluses**
:math:`w_q = v_q - \tfrac12(v_{p_1(q)} + v_{p_2(q)})`: a node of level :math:`\ell \ge 2` is the
midpoint of an edge of the level-:math:`\ell-1` mesh whose end points :math:`p_1, p_2` (its
*parents*; 0 on the boundary) give the coarse interpolant there (:meth:`HierarchicalGrid.surplus`,
:meth:`HierarchicalGrid.synthesis`, both :math:`O(N)`). Truncating to the levels
:math:`\le\ell` gives the level-:math:`\ell` interpolant (tested); truncating to a set :math:`S`
closed under parents gives a piecewise-linear function on a locally refined grid.

Representation of :math:`g = A^{-1}r` (:func:`truncate`): :math:`\hat g_S = \sum_{q\in S}
w_q(g)\psi_q`. Unlike the global route, :math:`g` itself is needed: one solve with the top
stiffness per step (factorised once), so the **relative-error condition is checked exactly**,
:math:`\|\hat g_S - g\|_A \le \delta\|g\|_A`, not estimated. What the representation saves is
the size of each step (nodes stored and added) and, for a user, a step that lives on a grid
refined only where the gradient has detail.

Refinement where the residual's representer is large (:func:`refine_local`): node :math:`q`'s
indicator is the energy of its hierarchical component, :math:`\eta_q^2 = 4 w_q(g)^2`
(:math:`\|\psi_q\|_A^2 = 4` on this mesh, every level). The set is the parent closure of the
:math:`k` nodes of largest :math:`\eta_q`; starting from the last :math:`k`, multiply :math:`k`
by ``growth`` (1.25) while the condition fails (the full set is exact), and start the next step
at :math:`k/1.25` when the error is at most ``coarsen_below`` :math:`\delta` (coarsen when
slack). ``mode="global"`` uses the same representation with whole levels as the sets (the
fair global baseline: same :math:`\hat g`, only the selection differs).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np
import scipy.sparse.linalg as spla

from .functional import check_delta, step_size
from .pde import PoissonHierarchy

__all__ = [
    "HierarchicalGrid",
    "LocalStepRecord",
    "local_pde_fgd",
    "refine_local",
    "truncate",
]


def _valuation(k: np.ndarray, cap: int) -> np.ndarray:
    """2-adic valuation of positive ints, capped at ``cap``."""
    v = np.zeros_like(k)
    for _ in range(cap):
        even = (k % 2 == 0) & (v < cap)
        if not even.any():
            break
        v = np.where(even, v + 1, v)
        k = np.where(even, k // 2, k)
    return v


class HierarchicalGrid:
    """Node levels, parents and hierarchical surpluses on the top mesh of ``hier``.

    Node ``q`` (top-grid index, x-index major, as :func:`adaptive_fgd.pde.grid_points`) has
    level ``level[q]`` and at most two interior parents ``parents[q]`` (``-1``: none or on the
    boundary, where the Dirichlet data make it present).
    """

    def __init__(self, hier: PoissonHierarchy) -> None:
        self.hier = hier
        top = hier.top
        n = 2**top
        i, j = np.meshgrid(np.arange(1, n), np.arange(1, n), indexing="ij")
        i, j = i.ravel(), j.ravel()
        self.i, self.j = i, j
        self.level = top - np.minimum(_valuation(i, top), _valuation(j, top))
        self.size = i.size
        half = 2 ** (top - self.level)  # own spacing; the parents sit at +-half
        odd_i = (i // half) % 2 == 1
        odd_j = (j // half) % 2 == 1
        # parents: along x (i odd), along y (j odd), along the mesh diagonal (both odd)
        di = np.where(odd_i, half, 0)
        dj = np.where(odd_j, half, 0)
        par = np.full((self.size, 2), -1, dtype=np.int64)
        for col, sign in ((0, -1), (1, 1)):
            pi, pj = i + sign * di, j + sign * dj
            inside = (pi >= 1) & (pi <= n - 1) & (pj >= 1) & (pj <= n - 1) & (self.level > 1)
            par[inside, col] = (pi[inside] - 1) * (n - 1) + (pj[inside] - 1)
        self.parents = par
        # coarse index of every node on its own level's grid
        m_lev = 2**self.level - 1
        self.coarse = (i // half - 1) * m_lev + (j // half - 1)
        self._by_level = [np.flatnonzero(self.level == lev) for lev in range(1, top + 1)]

    def _parent_mean(self, v: np.ndarray, q: np.ndarray) -> np.ndarray:
        p = self.parents[q]
        vals = np.where(p >= 0, v[np.maximum(p, 0)], 0.0)  # boundary parents carry 0
        return 0.5 * vals.sum(1)

    def surplus(self, v: np.ndarray) -> np.ndarray:
        """Hierarchical surpluses :math:`w(v)` of top-grid values ``v``."""
        v = np.asarray(v, dtype=np.float64)
        return v - self._parent_mean(v, np.arange(self.size))

    def synthesis(self, w: np.ndarray) -> np.ndarray:
        r"""Top-grid values :math:`\sum_q w_q\psi_q` (inverse of :meth:`surplus`), coarse first."""
        v = np.zeros(self.size)
        for q in self._by_level:
            v[q] = w[q] + self._parent_mean(v, q)
        return v

    def initial(self, level: int) -> np.ndarray:
        r"""Mask of all nodes of level at most ``level`` (spans :math:`V_\ell`)."""
        return self.level <= level

    def close(self, mask: np.ndarray) -> np.ndarray:
        """Smallest parent-closed superset of ``mask``."""
        mask = mask.copy()
        for _ in range(self.hier.top):
            need = self.parents[mask].ravel()
            need = need[need >= 0]
            if mask[need].all():
                break
            mask[need] = True
        return mask


def truncate(grid: HierarchicalGrid, w: np.ndarray, mask: np.ndarray) -> np.ndarray:
    r""":math:`\hat g_S = \sum_{q\in S} w_q\psi_q` on the top grid."""
    return grid.synthesis(np.where(mask, w, 0.0))


def _energy_error(a, g: np.ndarray, ghat: np.ndarray, gnorm: float) -> float:
    d = g - ghat
    return math.sqrt(max(float(d @ (a @ d)), 0.0)) / gnorm


def refine_local(
    grid: HierarchicalGrid,
    g: np.ndarray,
    delta: float,
    size: int,
    floor: np.ndarray,
    *,
    mode: str = "local",
    growth: float = 1.25,
) -> tuple[np.ndarray, np.ndarray, float, int, int]:
    r"""Smallest tried set meeting :math:`\|\hat g_S - g\|_A \le \delta\|g\|_A`.

    Args:
        grid: the hierarchical grid.
        g: the exact representer :math:`A^{-1}r` on the top grid.
        delta: :math:`\delta\in(0,1)`.
        size: ``local``: the number :math:`k` of largest-indicator nodes to try first;
            ``global``: the level to try first.
        floor: nodes always kept (the start grid).
        mode: ``"local"`` or ``"global"``.
        growth: factor :math:`> 1` between the tried :math:`k` (``local``).

    Returns:
        ``(mask, ghat, error, k, tries)``; the full set is exact, so ``error <= delta`` always.
    """
    delta = check_delta(delta)
    if mode not in ("local", "global"):
        raise ValueError(f"mode must be 'local' or 'global', got {mode!r}")
    if not (growth > 1 and math.isfinite(growth)):
        raise ValueError(f"growth must be finite and > 1, got {growth!r}")
    a = grid.hier.A
    gnorm = math.sqrt(max(float(g @ (a @ g)), 0.0))
    if gnorm == 0:
        raise ValueError("the gradient vanishes: the relative error is undefined")
    w = grid.surplus(g)
    if mode == "local":
        order = np.argsort(-np.abs(w), kind="stable")  # eta_q = 2|w_q|
        k_max = grid.size
    else:
        order = None
        k_max = grid.hier.top
    k, tries = max(1, min(int(size), k_max)), 0
    while True:
        if mode == "local":
            mask = floor.copy()
            mask[order[:k]] = True
            mask = grid.close(mask)
        else:
            mask = floor | (grid.level <= k)
        ghat = truncate(grid, w, mask)
        err = _energy_error(a, g, ghat, gnorm)
        tries += 1
        if err <= delta or k >= k_max:
            return mask, ghat, err, k, tries
        k = min(k_max, max(k + 1, math.ceil(growth * k))) if mode == "local" else k + 1


@dataclass
class LocalStepRecord:
    """One step of :func:`local_pde_fgd` (``size``: nodes of the step's representation)."""

    step: int
    size: int
    rel_error: float  #: exact :math:`\|\hat g - g\|_A/\|g\|_A`
    energy: float
    l2_error: float
    seconds: float
    tries: int


def local_pde_fgd(
    hier: PoissonHierarchy,
    steps: int,
    *,
    delta: float = 0.3,
    mode: str = "local",
    start_level: int = 2,
    growth: float = 1.25,
    coarsen_below: float = 0.5,
    lr: float | None = None,
    u_bound: float = 1.0,
    exact: np.ndarray | None = None,
) -> tuple[np.ndarray, list[LocalStepRecord]]:
    r"""FGD in :math:`H^1_0` with a hierarchical-grid gradient refined by :func:`refine_local`.

    Each step: :math:`r` at :math:`u`; :math:`g = A^{-1}r` (LU of the top stiffness, made once
    and timed); :func:`refine_local` from the last size; :math:`u \leftarrow u - \eta\hat g_S`;
    if the error is at most ``coarsen_below`` :math:`\delta` the next step starts at
    :math:`k/\gamma` (``growth``; one level lower for ``global``), never below the
    level-``start_level`` grid.
    Other arguments as in :func:`adaptive_fgd.pde.pde_fgd`.

    Returns:
        The final iterate on the top grid and the records (``seconds``: process CPU time).
    """
    delta = check_delta(delta)
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
        raise ValueError(f"steps must be a non-negative int, got {steps!r}")
    if not (0 <= coarsen_below < 1):
        raise ValueError(f"coarsen_below must lie in [0, 1), got {coarsen_below!r}")
    if not (isinstance(start_level, int) and 1 <= start_level <= hier.top):
        raise ValueError(f"start_level must be an int in [1, {hier.top}], got {start_level!r}")
    eta = step_size(hier.smoothness(u_bound), delta) if lr is None else float(lr)
    if not (eta > 0 and math.isfinite(eta)):
        raise ValueError(f"lr must be finite and > 0, got {lr!r}")
    t0 = time.process_time()
    grid = HierarchicalGrid(hier)
    lu = spla.splu(hier.A.tocsc())
    floor = grid.initial(start_level)
    k0 = int(floor.sum()) if mode == "local" else start_level
    k = k0
    cpu = time.process_time() - t0
    u = np.zeros(hier.A.shape[0])
    out = []
    for t in range(steps):
        t0 = time.process_time()
        r = hier.residual(u)
        g = lu.solve(r)
        mask, ghat, err, k, tries = refine_local(grid, g, delta, k, floor, mode=mode, growth=growth)
        u = u - eta * ghat
        energy = hier.energy(u)
        if not math.isfinite(energy):
            raise ValueError(f"non-finite energy at step {t}: lower lr")
        if err <= coarsen_below * delta:
            k = max(k0, int(k / growth) if mode == "local" else k - 1)
        cpu += time.process_time() - t0
        l2 = math.nan if exact is None else float(np.sqrt(np.mean((u - exact) ** 2)))
        out.append(LocalStepRecord(t, int(mask.sum()), err, energy, l2, cpu, tries))
    return u, out
