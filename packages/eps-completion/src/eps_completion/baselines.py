r"""Baselines on the **plain** completion problem (no perturbation).

* :func:`als`: alternating least squares on ``X = L R^T``: each row of ``L`` solves
  :math:`\min_\ell \sum_{j\in\Omega_i}(\ell^\top r_j - b_{ij})^2 + \lambda\|\ell\|^2`, all rows
  at once by batched ``k x k`` normal equations; then the same for ``R``; λ is annealed
  from the scale of the data down to a tiny floor.
* :func:`soft_impute`: Mazumder–Hastie–Tibshirani,
  :math:`X \leftarrow \mathcal S_\lambda(\mathcal P_\Omega(B) + \mathcal P_{\Omega^c}(X))`
  (singular-value soft thresholding), along a decreasing λ path with warm starts.
* :func:`svp`: singular value projection (Jain–Meka–Dhillon),
  :math:`X \leftarrow \mathcal P_k(X - \eta\,\mathcal P_\Omega(X - B))`, η = 3/(4p).
* :func:`nuclear_norm_completion`: :math:`\min \|X\|_*` s.t. :math:`X_\Omega = b` with cvxpy
  (small sizes; needs the ``solver`` extra).
* Burer–Monteiro GD and Riemannian GD without perturbation are
  :func:`eps_completion.solvers.bm_gd` / :func:`~eps_completion.solvers.rgd` with ``eps=None``.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor

from .lowrank_svd import SparsePlusLowRank, top_svd
from .problem import Observations
from .solvers import SolveResult, _check_iter, _check_k, scale_estimate

__all__ = ["als", "nuclear_norm_completion", "soft_impute", "svp"]


def _ridge_rows(
    rows: Tensor, cols: Tensor, b: Tensor, other: Tensor, n_rows: int, lam: float
) -> Tensor:
    """Rows ``l_i = argmin sum_{j in Omega_i} (l^T o_j - b_ij)^2 + lam ||l||^2`` (batched)."""
    k = other.shape[1]
    o = other[cols]
    gram = torch.zeros(n_rows, k, k, dtype=other.dtype).index_add_(
        0, rows, o.unsqueeze(2) * o.unsqueeze(1)
    )
    rhs = torch.zeros(n_rows, k, dtype=other.dtype).index_add_(0, rows, o * b.unsqueeze(1))
    gram = gram + lam * torch.eye(k, dtype=other.dtype)
    return torch.linalg.solve(gram, rhs.unsqueeze(-1)).squeeze(-1)


def als(
    obs: Observations,
    k: int,
    *,
    lam: float = 1e-12,
    lam_start: float = 1.0,
    lam_decay: float = 0.5,
    max_iter: int = 500,
    tol: float = 1e-10,
    generator: torch.Generator | None = None,
) -> SolveResult:
    r"""Alternating least squares with a ridge annealed from ``lam_start`` down to ``lam``.

    Ridges are **relative**: the absolute ridge is ``c * p * s / sqrt(k)`` (``p`` the
    sampling rate, ``s`` the Frobenius scale estimate), the size of a row Gram matrix
    :math:`\sum_{j\in\Omega_i} r_j r_j^\top \approx p\,R^\top R` when the factors are
    balanced and the k singular values equal; a relative ridge c then shrinks the solution by
    about c (relative). Sweep t uses ``max(lam, lam_start * lam_decay**(t-1))``.

    Why anneal: with a ridge much larger than the Gram, a row solve is
    :math:`\ell_i \approx \sum_j b_{ij} r_j/\lambda`, so the first sweeps are power
    iterations on :math:`P_\Omega(B)`, i.e. a spectral start, which random-start ALS lacks;
    halving then follows the ridge (nuclear-norm) regularisation path down to the plain
    problem, whose final bias is about ``lam``. With a fixed tiny ridge, 4 of 6 random
    starts on n = 300, r = 5, p = 0.1 ended with relative error 30-110 (factors blown up);
    starting at 0.1 instead of 1, 2 of 6 still did; from 1 all converged in 45 sweeps
    (``docs/als_ridge.md``). ``lam_start=lam`` gives fixed-ridge ALS.

    Converged when the observed-entry residual is at most ``tol`` · ||b||; once the ridge is
    at ``lam`` it stops early (not converged) when the residual changes by less than 1e-12
    relative between sweeps. Random Gaussian start (not spectral).
    """
    k = _check_k(k, obs)
    _check_iter(max_iter, tol)
    for name, val in (("lam", lam), ("lam_start", lam_start)):
        if not (math.isfinite(val) and val >= 0):
            raise ValueError(f"{name} must be finite and >= 0, got {val!r}")
    if not 0 < lam_decay <= 1:
        raise ValueError(f"lam_decay must be in (0, 1], got {lam_decay!r}")
    m, n = obs.shape
    s = scale_estimate(obs)
    unit = obs.rate * s / math.sqrt(k)
    dtype = obs.values.dtype
    R = torch.randn(n, k, generator=generator, dtype=dtype) * math.sqrt(s / n)
    L = torch.zeros(m, k, dtype=dtype)
    prev = math.inf
    history: list[float] = []
    for it in range(1, max_iter + 1):
        rel = max(lam, lam_start * lam_decay ** (it - 1))
        # a zero ridge still needs an invertible Gram: floor it at roundoff of the unit
        ridge = max(rel, 1e-15) * unit
        L = _ridge_rows(obs.rows, obs.cols, obs.values, R, m, ridge)
        R = _ridge_rows(obs.cols, obs.rows, obs.values, L, n, ridge)
        res = float(((L[obs.rows] * R[obs.cols]).sum(1) - obs.values).norm())
        history.append(0.5 * res * res)
        if res <= tol * float(obs.values.norm()):
            return SolveResult(L, R, it, True, history)
        if rel <= lam and abs(prev - res) <= 1e-12 * res:
            return SolveResult(L, R, it, False, history)
        prev = res
    return SolveResult(L, R, max_iter, False, history)


def _svd_top(x: Tensor, q: int) -> tuple[Tensor, Tensor, Tensor]:
    m, n = x.shape
    if q >= min(m, n) // 2 or m * n <= 40_000:
        u, s, vh = torch.linalg.svd(x, full_matrices=False)
        return u[:, :q], s[:q], vh[:q].mT
    return torch.svd_lowrank(x, q=q, niter=4)


def soft_impute(
    obs: Observations,
    *,
    lam: float | None = None,
    max_rank: int | None = None,
    n_lambdas: int = 10,
    max_iter: int = 200,
    tol: float = 1e-9,
    svd: str = "auto",
    callback: Callable[[int, Tensor, Tensor], None] | None = None,
) -> SolveResult:
    """Soft-impute along ``n_lambdas`` geometric λ values from σ_1(P_Ω B) down to ``lam``.

    ``lam`` defaults to 1e-4 σ_1(P_Ω B). ``max_rank`` (default: full) truncates each SVD
    (a randomized SVD of that size when the matrix is large). ``max_iter`` is per λ.
    ``svd="sparse"`` (needs ``max_rank``) keeps the iterate as factors and takes randomized
    SVDs of the sparse-plus-low-rank iterate (:mod:`eps_completion.lowrank_svd`):
    O(|Ω| q + (m+n) q²) time and O((m+n) q + |Ω|) memory per iteration, q = ``max_rank``;
    ``"dense"`` forms the m x n iterate; ``"auto"`` is sparse when ``max_rank`` is given and
    mn > 10⁶ (below that, dense SVDs are cheap).
    ``callback(it, L, R)``, if given, sees the iterate ``X = L R^T`` after every iteration
    (``it`` counts all iterations): a benchmark records accuracy against time with it.
    """
    _check_iter(max_iter, tol)
    if svd not in ("auto", "dense", "sparse"):
        raise ValueError(f"svd must be 'auto', 'dense' or 'sparse', got {svd!r}")
    m, n = obs.shape
    if svd == "sparse" and max_rank is None:
        raise ValueError("svd='sparse' needs max_rank (the rank of the factored iterate)")
    if svd == "sparse" or (svd == "auto" and max_rank is not None and m * n > 10**6):
        return _soft_impute_factored(
            obs, lam, _check_k(max_rank, obs), n_lambdas, max_iter, tol, callback
        )
    b_dense = obs.dense_values()
    mask = obs.dense_mask()
    sigma1 = float(torch.linalg.matrix_norm(b_dense, ord=2))
    lam_final = 1e-4 * sigma1 if lam is None else float(lam)
    if not lam_final > 0:
        raise ValueError(f"lam must be positive, got {lam!r}")
    q = min(m, n) if max_rank is None else _check_k(max_rank, obs)
    x = torch.zeros_like(b_dense)
    lams = torch.logspace(math.log10(sigma1), math.log10(lam_final), n_lambdas).tolist()
    total, history = 0, []
    u = s = v = None
    for lam_t in lams:
        for _ in range(max_iter):
            total += 1
            z = torch.where(mask, b_dense, x)
            u, s, v = _svd_top(z, q)
            s = (s - lam_t).clamp_min(0)
            x_new = (u * s) @ v.mT
            change = float((x_new - x).norm()) / max(float(x.norm()), 1e-300)
            x = x_new
            history.append(0.5 * float((x[obs.rows, obs.cols] - obs.values).pow(2).sum()))
            if callback is not None:
                callback(total, u * s, v)
            if change <= tol:
                break
    keep = s > 0
    return SolveResult((u * s)[:, keep], v[:, keep], total, change <= tol, history)


def _lowrank_dist(a: tuple[Tensor, Tensor, Tensor], b: tuple[Tensor, Tensor, Tensor]) -> float:
    """||U_a S_a V_a^T - U_b S_b V_b^T||_F from the factors (expanded square)."""
    (ua, sa, va), (ub, sb, vb) = a, b
    cross = float(((sa.unsqueeze(1) * (ua.mT @ ub) * sb) * (va.mT @ vb)).sum())
    return math.sqrt(max(float(sa.pow(2).sum() + sb.pow(2).sum()) - 2 * cross, 0.0))


def _soft_impute_factored(
    obs: Observations,
    lam: float | None,
    q: int,
    n_lambdas: int,
    max_iter: int,
    tol: float,
    callback: Callable[[int, Tensor, Tensor], None] | None = None,
) -> SolveResult:
    """:func:`soft_impute` with the iterate kept as rank-q factors (never m x n)."""
    m, n = obs.shape
    rows, cols, vals = obs.rows, obs.cols, obs.values
    dtype = vals.dtype
    gen = torch.Generator().manual_seed(0)  # the sketches' randomness; results reproducible
    point = (
        torch.zeros(m, 0, dtype=dtype),
        torch.zeros(0, dtype=dtype),
        torch.zeros(n, 0, dtype=dtype),
    )
    sigma1 = float(
        top_svd(SparsePlusLowRank((m, n), rows, cols, vals, *point), 1, generator=gen)[1][0]
    )
    lam_final = 1e-4 * sigma1 if lam is None else float(lam)
    if not lam_final > 0:
        raise ValueError(f"lam must be positive, got {lam!r}")
    lams = torch.logspace(math.log10(sigma1), math.log10(lam_final), n_lambdas).tolist()
    total, history, change = 0, [], math.inf
    for lam_t in lams:
        for _ in range(max_iter):
            total += 1
            u, s, v = point
            x_obs = ((u * s)[rows] * v[cols]).sum(1)
            z = SparsePlusLowRank((m, n), rows, cols, vals - x_obs, u, s, v)
            u2, s2, v2 = top_svd(z, q, generator=gen)
            new = (u2, (s2 - lam_t).clamp_min(0), v2)
            change = _lowrank_dist(new, point) / max(float(point[1].norm()), 1e-300)
            point = new
            u, s, v = point
            history.append(0.5 * float((((u * s)[rows] * v[cols]).sum(1) - vals).pow(2).sum()))
            if callback is not None:
                callback(total, u * s, v)
            if change <= tol:
                break
    u, s, v = point
    keep = s > 0
    return SolveResult((u * s)[:, keep], v[:, keep], total, change <= tol, history)


def svp(
    obs: Observations,
    k: int,
    *,
    step: float | None = None,
    max_iter: int = 1000,
    tol: float = 1e-10,
) -> SolveResult:
    """Singular value projection: rank-k projected gradient steps, η = 3/(4p) by default.

    Converged when the observed residual is at most ``tol`` times ``||b||``. If the iteration
    diverges (residual above 1e8 ||b||, or non-finite) it stops and returns the last finite
    iterate, not converged.
    """
    k = _check_k(k, obs)
    _check_iter(max_iter, tol)
    eta = 0.75 / obs.rate if step is None else float(step)
    b_dense = obs.dense_values()
    mask = obs.dense_mask()
    x = torch.zeros_like(b_dense)
    bn = float(obs.values.norm())
    history: list[float] = []
    u = s = v = None
    u_ok, s_ok, v_ok = torch.zeros(x.shape[0], k), torch.zeros(k), torch.zeros(x.shape[1], k)
    u_ok, s_ok, v_ok = (t.to(x.dtype) for t in (u_ok, s_ok, v_ok))
    for it in range(1, max_iter + 1):
        resid = torch.where(mask, x - b_dense, torch.zeros_like(x))
        rn = float(resid.norm())
        if not rn <= 1e8 * bn:  # diverged (the step is too long for this mask): give up
            return SolveResult(u_ok * s_ok, v_ok, it - 1, False, history)
        history.append(0.5 * rn * rn)
        if rn <= tol * bn:
            return SolveResult(u * s, v, it - 1, True, history)
        if u is not None:
            u_ok, s_ok, v_ok = u, s, v
        u, s, v = _svd_top(x - eta * resid, k)
        x = (u * s) @ v.mT
    return SolveResult(u * s, v, max_iter, False, history)


def nuclear_norm_completion(obs: Observations, *, solver: str | None = None) -> Tensor:
    """:math:`\\arg\\min \\|X\\|_*` s.t. :math:`X_{ij} = b_{ij}` on Ω, by cvxpy (dense, small m, n).

    Returns the dense float64 solution. Needs ``pip install "eps-completion[solver]"``.
    """
    try:
        import cvxpy as cp
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise ImportError(
            'nuclear_norm_completion needs cvxpy: pip install "eps-completion[solver]"'
        ) from err
    import numpy as np

    m, n = obs.shape
    x = cp.Variable((m, n))
    rows, cols = obs.rows.numpy(), obs.cols.numpy()
    b = obs.values.detach().to(torch.float64).numpy()
    prob = cp.Problem(cp.Minimize(cp.normNuc(x)), [x[rows, cols] == b])
    prob.solve(solver=solver or "CLARABEL")
    if x.value is None:
        raise RuntimeError(f"cvxpy did not solve the nuclear-norm program: {prob.status}")
    return torch.as_tensor(np.asarray(x.value), dtype=torch.float64)
