r"""Baselines on the same measurements, behind one interface with the Riemannian methods.

- **ALS** (alternating least squares on the factors): :math:`\mathcal{A}(\otimes_k v_k)` is
  linear in each :math:`v_k`, so with the others fixed :math:`v_k = \arg\min \|M_k v - y\|`
  (``m x n_k`` least squares, :math:`M_k` the operator's mode matrix). One iteration = one
  sweep over the modes.
- **factor GD** (Burer-Monteiro): plain gradient descent on unnormalised factors
  :math:`(v_1, \dots, v_d)` of :math:`f = \tfrac12\|\mathcal{A}(\otimes_k v_k) - y\|^2`,
  :math:`\partial f/\partial v_k = \mathcal{A}^*(r)\times_{j\ne k} v_j`, started balanced
  (:math:`\|v_k\| = \lambda^{1/d}`), step by Armijo backtracking that remembers and doubles
  its last accepted step (a fixed step would need the unknown curvature).
- **tensorly CP-ALS** (``tensorly.decomposition.parafac``, rank 1, SVD init): only for full
  observation (tensor PCA), where it applies. Needs the ``baselines`` extra.

:func:`solve` runs any of them or RGD/RGN by name, from the same start.
"""

from __future__ import annotations

import math
import time

import torch

from shared_core.manifolds import SegrePoint

from .algorithms import Trace, _check_iters, _Recorder, rgd, rgn, spectral_init
from .operators import FullObservation
from .problem import RecoveryProblem, check_point
from .tensors import relative_error

__all__ = ["METHODS", "als", "factor_gd", "solve", "tensorly_cp"]


def _point(vs) -> SegrePoint:
    norms = [v.norm() for v in vs]
    lam = math.prod(float(n) for n in norms)
    if lam == 0.0 or not math.isfinite(lam):
        raise FloatingPointError(f"factor iterate degenerated (product of factor norms {lam})")
    facs = tuple(v / n for v, n in zip(vs, norms, strict=True))
    return SegrePoint(torch.full((1,), lam, dtype=vs[0].dtype), facs)


def als(
    problem: RecoveryProblem,
    x0: SegrePoint,
    *,
    max_iter: int = 100,
    x_true: SegrePoint | None = None,
    stop_error: float | None = None,
    ftol: float = 0.0,
) -> Trace:
    """Alternating least squares on the factors; one iteration = one sweep over the modes."""
    x = check_point(problem.manifold, x0)
    max_iter = _check_iters("max_iter", max_iter)
    rec = _Recorder(problem, "als", x, x_true, stop_error, ftol)
    facs = list(x.factors)
    lam = x.scale
    for _ in range(max_iter):
        for k in range(len(facs)):
            mk = problem.op.mode_matrix(facs, k)
            v = torch.linalg.lstsq(mk, problem.y[:, None]).solution[:, 0]
            nv = v.norm()
            if float(nv) == 0.0:
                raise FloatingPointError("ALS produced a zero factor (no signal in y)")
            facs[k] = v / nv
            lam = nv.reshape(1)
        x = SegrePoint(lam, tuple(facs))
        if rec.record(x, problem.loss(x)):
            break
    return rec.trace


def factor_gd(
    problem: RecoveryProblem,
    x0: SegrePoint,
    *,
    max_iter: int = 1000,
    x_true: SegrePoint | None = None,
    stop_error: float | None = None,
    ftol: float = 0.0,
) -> Trace:
    """Gradient descent on balanced unnormalised factors with remembered Armijo steps."""
    x = check_point(problem.manifold, x0)
    max_iter = _check_iters("max_iter", max_iter)
    rec = _Recorder(problem, "factor-gd", x, x_true, stop_error, ftol)
    d = len(x.factors)
    root = float(x.scale[0]) ** (1 / d)
    vs = [root * u for u in x.factors]
    one = torch.ones(1, dtype=vs[0].dtype)

    def loss_of(vs):
        r = problem.op.forward(one, vs) - problem.y
        return 0.5 * float(r @ r), r

    f, r = loss_of(vs)
    # Curvature of f in v_k is about ||A||^2 prod_{j != k} |v_j|^2; start one order below.
    eta = 0.1 / (problem.op.num_measurements * root ** (2 * (d - 1)))
    for _ in range(max_iter):
        grads = problem.op.adjoint_contract(r, vs)
        gg = sum(float(g @ g) for g in grads)
        if gg == 0.0:
            break
        for _ in range(60):
            trial = [v - eta * g for v, g in zip(vs, grads, strict=True)]
            f_new, r_new = loss_of(trial)
            if f_new <= f - 1e-4 * eta * gg:
                break
            eta *= 0.5
        else:
            break
        vs, f, r = trial, f_new, r_new
        eta *= 2.0
        if rec.record(_point(vs), f):
            break
    return rec.trace


def tensorly_cp(
    problem: RecoveryProblem,
    x0: SegrePoint | None = None,
    *,
    max_iter: int = 100,
    x_true: SegrePoint | None = None,
    stop_error: float | None = None,
    ftol: float = 0.0,
) -> Trace:
    """tensorly's rank-1 ``parafac`` (CP-ALS, SVD init) on a fully observed tensor.

    ``x0`` is ignored (tensorly initialises itself); the trace holds the final iterate only,
    timed around the tensorly call. ``ftol`` is passed as tensorly's ``tol`` (its stopping
    test on the change of the relative reconstruction error), ``stop_error`` is ignored.
    """
    if not isinstance(problem.op, FullObservation):
        raise ValueError(
            "tensorly parafac fits an observed tensor: it applies to FullObservation (tensor "
            f"PCA) only, not to {problem.op!r}"
        )
    try:
        import tensorly as tl
        from tensorly.decomposition import parafac
    except ImportError as exc:  # pragma: no cover - exercised without the extra
        raise ImportError("tensorly_cp needs tensorly: pip install 'segre[baselines]'") from exc
    max_iter = _check_iters("max_iter", max_iter)
    y = problem.y.reshape(problem.dims).cpu().numpy()
    t0 = time.perf_counter()
    with tl.backend_context("numpy"):
        cp = parafac(y, rank=1, n_iter_max=max(1, max_iter), init="svd", tol=ftol)
    seconds = time.perf_counter() - t0
    weights, factors = cp
    facs = [torch.as_tensor(f[:, 0], dtype=problem.y.dtype) for f in factors]
    facs[0] = facs[0] * float(weights[0])
    x = _point(facs)
    trace = Trace("tensorly-cp", x, losses=[problem.loss(x)], times=[seconds])
    if x_true is not None:
        trace.errors.append(relative_error(x, x_true))
    return trace


METHODS = {
    "rgd": rgd,
    "rgn": rgn,
    "als": als,
    "factor-gd": factor_gd,
    "tensorly-cp": tensorly_cp,
}


def solve(
    problem: RecoveryProblem,
    method: str,
    x0: SegrePoint | None = None,
    *,
    max_iter: int | None = None,
    x_true: SegrePoint | None = None,
    stop_error: float | None = None,
    ftol: float = 0.0,
    **options,
) -> Trace:
    """Run one method by name from ``x0`` (default: :func:`spectral_init`).

    Args:
        problem: the recovery problem.
        method: one of ``METHODS`` (``rgd``, ``rgn``, ``als``, ``factor-gd``, ``tensorly-cp``).
        x0: the common start.
        max_iter: iterations (each method's default when None).
        x_true, stop_error, ftol: error recording and early stops.
        **options: passed to the method (e.g. ``step``/``armijo`` for RGD, ``solver`` for RGN).

    Example:
        >>> import torch
        >>> from segre import RecoveryProblem, gaussian_sensing, random_rank_one
        >>> g = torch.Generator().manual_seed(0)
        >>> x = random_rank_one((4, 5, 3), generator=g)
        >>> op = gaussian_sensing((4, 5, 3), 60, generator=g)
        >>> prob = RecoveryProblem(op, op.forward(x.scale, x.factors))
        >>> solve(prob, "rgn", x_true=x, max_iter=15).errors[-1] < 1e-10
        True
    """
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; expected one of {', '.join(METHODS)}")
    if x0 is None and method != "tensorly-cp":
        x0 = spectral_init(problem)
    kwargs = dict(options)
    if max_iter is not None:
        kwargs["max_iter"] = max_iter
    return METHODS[method](problem, x0, x_true=x_true, stop_error=stop_error, ftol=ftol, **kwargs)
