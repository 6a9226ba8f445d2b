"""A scikit-learn-style front end: ``MatrixCompleter(...).fit(M_obs, mask).transform()``."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from shared_core.manifolds import SVDPoint

from . import baselines
from .problem import Observations, check_eps, check_rank, observe
from .sensing import EpsSensing
from .solvers import SolveResult, bm_gd, rgd

__all__ = ["METHODS", "MatrixCompleter"]

#: method name -> (uses the ε-surrogate, short description)
METHODS = {
    "eps-bm": (True, "Burer-Monteiro GD on the eps-surrogate (factor rank k >= rank)"),
    "eps-rgd": (True, "Riemannian GD on rank-k matrices, eps-surrogate"),
    "bm": (False, "Burer-Monteiro GD on the plain problem"),
    "rgd": (False, "Riemannian GD on the plain problem"),
    "als": (False, "alternating least squares"),
    "soft-impute": (False, "soft-impute, lambda path to 1e-4 sigma_1 (keeps a shrinkage bias)"),
    "svp": (False, "singular value projection"),
    "nuclear": (False, "nuclear-norm minimisation (cvxpy; small sizes)"),
}


class MatrixCompleter:
    """Complete a partially observed low-rank matrix.

    Args:
        rank: target rank r, ``1 <= r < min(m, n)``.
        eps: perturbation level ε > 0 of the surrogate (used by ``eps-*`` methods).
        method: one of :data:`METHODS`.
        factor_rank: k for ``eps-bm``/``bm``/``eps-rgd``/``rgd`` (default ``rank``);
            ``k > rank`` over-parameterises.
        weights: ``"uniform"`` or ``"random"`` perturbation weights (see :class:`EpsSensing`).
        polish: after the surrogate, continue on the plain loss (ε = 0) from its solution,
            removing the surrogate's O(ε²) bias when the completion is locally unique.
        max_iter: iteration cap of the solver.
        gtol: relative gradient tolerance of the gradient solvers.
        seed: seed of the random start.
        allow_empty_lines: accept rows/columns without observations (see :func:`observe`).

    Attributes (after ``fit``): ``result_`` (:class:`SolveResult` or None for ``nuclear``),
    ``operator_`` (the :class:`EpsSensing` for ``eps-*``), ``n_iter_``, ``converged_``.
    """

    def __init__(
        self,
        rank: int,
        *,
        eps: float = 1e-2,
        method: str = "eps-bm",
        factor_rank: int | None = None,
        weights: str = "uniform",
        polish: bool = False,
        max_iter: int = 20000,
        gtol: float = 1e-10,
        seed: int = 0,
        allow_empty_lines: bool = False,
    ):
        if method not in METHODS:
            raise ValueError(f"method must be one of {sorted(METHODS)}, got {method!r}")
        if isinstance(rank, bool) or not isinstance(rank, int) or rank < 1:
            raise ValueError(f"rank must be a positive int, got {rank!r}")
        if factor_rank is not None and (
            isinstance(factor_rank, bool) or not isinstance(factor_rank, int) or factor_rank < rank
        ):
            raise ValueError(f"factor_rank must be an int >= rank = {rank}, got {factor_rank!r}")
        if weights not in ("uniform", "random"):
            raise ValueError(f"weights must be 'uniform' or 'random', got {weights!r}")
        self.rank = rank
        self.eps = check_eps(eps)
        self.method = method
        self.factor_rank = factor_rank
        self.weights = weights
        self.polish = bool(polish)
        self.max_iter = max_iter
        self.gtol = gtol
        self.seed = seed
        self.allow_empty_lines = allow_empty_lines
        self._x: Tensor | None = None

    def fit(self, m_obs: Tensor, mask: Tensor) -> MatrixCompleter:
        """Validate the data and solve; returns ``self``."""
        obs = observe(m_obs, mask, allow_empty_lines=self.allow_empty_lines)
        check_rank(self.rank, obs.shape)
        k = self.rank if self.factor_rank is None else self.factor_rank
        if k > min(obs.shape):
            raise ValueError(f"factor_rank {k} exceeds min(m, n) = {min(obs.shape)}")
        gen = torch.Generator().manual_seed(self.seed)
        self.operator_ = None
        self.result_: SolveResult | None = None
        method = self.method
        if METHODS[method][0]:
            self.operator_ = EpsSensing(obs, self.eps, weights=self.weights, generator=gen)
        xi = None if self.operator_ is None else self.operator_.xi
        eps = self.eps if METHODS[method][0] else None
        if method in ("eps-bm", "bm"):
            res = bm_gd(obs, k, eps, xi=xi, max_iter=self.max_iter, gtol=self.gtol, generator=gen)
            if self.polish and eps is not None:
                res = _continue(
                    res,
                    bm_gd(
                        obs, k, None, init=(res.L, res.R), max_iter=self.max_iter, gtol=self.gtol
                    ),
                )
        elif method in ("eps-rgd", "rgd"):
            res = rgd(obs, k, eps, xi=xi, max_iter=self.max_iter, gtol=self.gtol, generator=gen)
            if self.polish and eps is not None:
                res = _continue(
                    res,
                    rgd(
                        obs,
                        k,
                        None,
                        init=_svd_point(res, k),
                        max_iter=self.max_iter,
                        gtol=self.gtol,
                    ),
                )
        elif method == "als":
            res = baselines.als(obs, k, max_iter=min(self.max_iter, 2000), generator=gen)
        elif method == "svp":
            res = baselines.svp(obs, k, max_iter=min(self.max_iter, 2000))
        elif method == "soft-impute":
            res = baselines.soft_impute(obs)
        else:
            self._x = baselines.nuclear_norm_completion(obs).to(obs.values.dtype)
            self.n_iter_, self.converged_ = 0, True
            self.obs_ = obs
            return self
        self.result_ = res
        self.n_iter_, self.converged_ = res.n_iter, res.converged
        self._x = res.matrix()
        self.obs_ = obs
        return self

    def transform(self, m_obs: Tensor | None = None, mask: Tensor | None = None) -> Tensor:
        """The completed ``m x n`` matrix (observed entries are the model's, not copied in).

        The arguments are accepted for scikit-learn symmetry and ignored; the fitted data are
        used.
        """
        if self._x is None:
            raise RuntimeError("call fit(M_obs, mask) before transform()")
        return self._x.clone()

    def fit_transform(self, m_obs: Tensor, mask: Tensor) -> Tensor:
        """``fit(m_obs, mask).transform()``."""
        return self.fit(m_obs, mask).transform()

    def observed_rmse(self) -> float:
        """Root-mean-square error of the completion on the observed entries."""
        if self._x is None:
            raise RuntimeError("call fit first")
        obs: Observations = self.obs_
        d = self._x[obs.rows, obs.cols] - obs.values
        return math.sqrt(float(d.pow(2).mean()))

    def __repr__(self) -> str:
        return (
            f"MatrixCompleter(rank={self.rank}, eps={self.eps:g}, method={self.method!r}, "
            f"factor_rank={self.factor_rank}, polish={self.polish})"
        )


def _continue(first: SolveResult, second: SolveResult) -> SolveResult:
    return SolveResult(
        second.L,
        second.R,
        first.n_iter + second.n_iter,
        second.converged,
        first.history + second.history,
    )


def _svd_point(res: SolveResult, k: int) -> SVDPoint:
    """The rank-k SVD of ``L R^T`` from the factors (QRs + a k x k SVD)."""
    ql, rl = torch.linalg.qr(res.L)
    qr_, rr = torch.linalg.qr(res.R)
    w, s, zh = torch.linalg.svd(rl @ rr.mT)
    return SVDPoint(ql @ w, torch.diag_embed(s), qr_ @ zh.mT)
