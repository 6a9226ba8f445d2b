r"""Symmetric positive definite matrices with the affine-invariant or the log-Euclidean metric."""

from __future__ import annotations

import torch
from torch import Tensor

from ._linalg import haar_stiefel, randn, sum_last, sym, sym_apply
from .base import (
    Manifold,
    choice,
    exceeds,
    finite_error,
    match_error,
    positive_int,
    shape_error,
)

__all__ = ["SPD"]

_METRICS = ("affine", "log_euclidean")
_RETRACTIONS = ("second_order", "expmap")


def _whiten(chol: Tensor, u: Tensor) -> Tensor:
    """``L^{-1} U L^{-T}`` for the Cholesky factor ``L`` of ``X``."""
    left = torch.linalg.solve_triangular(chol, u, upper=False)
    return torch.linalg.solve_triangular(chol, left.mT, upper=False).mT


def _log_divided_differences(w: Tensor) -> Tensor:
    r"""``Gamma_ij = (log w_i - log w_j) / (w_i - w_j)``, and ``1 / w_i`` on ties.

    Written as ``log1p(d) / (d w_j)`` with ``d = w_i / w_j - 1`` so that close eigenvalues
    keep full accuracy; the naive quotient cancels catastrophically there.
    """
    wi = w.unsqueeze(-1)
    wj = w.unsqueeze(-2)
    d = wi / wj - 1
    safe = torch.where(d == 0, torch.ones_like(d), d)
    ratio = torch.where(d == 0, torch.ones_like(d), torch.log1p(safe) / safe)
    gamma = ratio / wj
    return (gamma + gamma.mT) / 2


class SPD(Manifold):
    r"""The open cone of ``n x n`` symmetric positive definite matrices.

    Every tangent space is :math:`\mathrm{Sym}(n)`, so ``proju(X, U) = sym(U)``. Both metrics
    below extend to inner products on all ``n x n`` matrices (that is what ``inner`` computes
    for non-symmetric arguments) under which symmetric and skew matrices are orthogonal, so
    ``sym`` is the orthogonal projection for them.

    ``metric="affine"``: :math:`\langle U, V\rangle_X = \mathrm{tr}(X^{-1} U X^{-1} V)`,
    invariant under :math:`X \to A X A^T`; computed as :math:`\langle L^{-1} U L^{-T},
    L^{-1} V L^{-T}\rangle_F` with the Cholesky factor ``X = L L^T``.

    - ``egrad2rgrad(X, G) = X sym(G) X``: :math:`\mathrm{tr}(X^{-1} X S X X^{-1} U) =
      \mathrm{tr}(S U) = \langle G, U\rangle_F` for symmetric ``U`` and ``S = sym(G)``;
    - ``expmap(X, U) = X^{1/2} expm(X^{-1/2} U X^{-1/2}) X^{1/2}``, ``logmap`` the same with
      ``logm``, ``dist(X, Y) = ||log eig(X^{-1} Y)||_2``;
    - ``transp(X, Y, V) = E V E^T`` with :math:`E = (Y X^{-1})^{1/2} = X^{1/2}
      (X^{-1/2} Y X^{-1/2})^{1/2} X^{-1/2}`: parallel transport along the geodesic from X to
      Y (an isometry).

    ``metric="log_euclidean"``: :math:`\langle U, V\rangle_X = \langle D\log_X[U],
    D\log_X[V]\rangle_F`, the pull-back of the Frobenius metric by the matrix logarithm, which
    makes SPD(n) isometric to the flat :math:`\mathrm{Sym}(n)`. With ``X = Q diag(w) Q^T``,
    :math:`D\log_X[U] = Q(\Gamma \circ Q^T U Q) Q^T` (Daleckii-Krein) with
    :math:`\Gamma_{ij} = (\log w_i - \log w_j)/(w_i - w_j)` (``1/w_i`` on ties).

    - ``egrad2rgrad(X, G) = Q((Q^T sym(G) Q) / Gamma^2) Q^T``: :math:`D\log_X` is self-adjoint
      on Sym(n), so the representer solves :math:`D\log_X^2[R] = sym(G)`;
    - ``expmap(X, U) = expm(log X + Dlog_X[U])``, ``logmap(X, Y) = Dlog_X^{-1}[log Y - log X]``,
      ``dist = ||log Y - log X||_F``;
    - ``transp(X, Y, V) = Dlog_Y^{-1}[Dlog_X[V]]`` (parallel transport; the space is flat).

    Retractions (``retraction=``): ``"second_order"`` (default)
    :math:`X + U + \tfrac12 U X^{-1} U = \tfrac12 X + \tfrac12 (X + U) X^{-1} (X + U)`, which
    is positive definite for every symmetric ``U`` and agrees with the affine ``expmap`` to
    second order; ``"expmap"`` uses the metric's exponential map.

    ``proj`` symmetrises and raises eigenvalues to at least ``n * eps * max|eig|`` (the cone is
    open, so there is no nearest point; this is the nearest matrix numerically certified
    positive definite). ``check_point`` requires symmetry within tolerance and a smallest
    eigenvalue above ``n * eps * max|eig|``. Matrix functions use ``eigh`` on ``sym(X)``.

    Args:
        n: matrix size.
        metric: ``"affine"`` or ``"log_euclidean"``.
        retraction: ``"second_order"`` or ``"expmap"``.

    Example:
        >>> import torch
        >>> from shared_core.manifolds import SPD
        >>> M = SPD(3)
        >>> X = torch.eye(3, dtype=torch.float64)
        >>> U = torch.diag(torch.tensor([1.0, 0.0, -1.0], dtype=torch.float64))
        >>> torch.diagonal(M.expmap(X, U))
        tensor([2.7183, 1.0000, 0.3679], dtype=torch.float64)
        >>> round(float(M.dist(X, M.expmap(X, 2 * U)) / M.norm(X, U)), 12)
        2.0
    """

    def __init__(self, n: int, metric: str = "affine", retraction: str = "second_order"):
        self.n = positive_int("n", n)
        self.metric = choice("metric", metric, _METRICS)
        self.retraction = choice("retraction", retraction, _RETRACTIONS)

    def __repr__(self) -> str:
        return f"SPD(n={self.n}, metric={self.metric!r}, retraction={self.retraction!r})"

    @property
    def dim(self) -> int:
        return self.n * (self.n + 1) // 2

    # ------------------------------------------------------------------ helpers
    @staticmethod
    def _sqrt_pair(x: Tensor) -> tuple[Tensor, Tensor]:
        w, q = torch.linalg.eigh(sym(x))
        r = w.sqrt()
        return (q * r.unsqueeze(-2)) @ q.mT, (q / r.unsqueeze(-2)) @ q.mT

    @staticmethod
    def _dlog(w: Tensor, q: Tensor, u: Tensor, power: int = 1) -> Tensor:
        """``Q (Gamma^power * (Q^T U Q)) Q^T``: ``Dlog_X`` and its inverse (power -1) etc."""
        gamma = _log_divided_differences(w)
        return q @ ((q.mT @ u @ q) * gamma**power) @ q.mT

    @staticmethod
    def _logm(w: Tensor, q: Tensor) -> Tensor:
        return (q * w.log().unsqueeze(-2)) @ q.mT

    # ------------------------------------------------------------------ geometry
    def _proj(self, x: Tensor) -> Tensor:
        w, q = torch.linalg.eigh(sym(x))
        floor = self.n * torch.finfo(x.dtype).eps * w.abs().amax(dim=-1, keepdim=True)
        floor = floor.clamp_min(torch.finfo(x.dtype).tiny)
        return sym((q * torch.maximum(w, floor).unsqueeze(-2)) @ q.mT)

    def _proju(self, x: Tensor, u: Tensor) -> Tensor:
        return sym(u)

    def _retr(self, x: Tensor, u: Tensor) -> Tensor:
        if self.retraction == "expmap":
            return self._expmap(x, u)
        u = sym(u)
        half = torch.linalg.solve_triangular(torch.linalg.cholesky(x), u, upper=False)
        # (L^{-1} U)^T (L^{-1} U) = U X^{-1} U, written as a Gram matrix so it stays PSD.
        return sym(x + u + 0.5 * half.mT @ half)

    def _expmap(self, x: Tensor, u: Tensor) -> Tensor:
        if self.metric == "affine":
            s, si = self._sqrt_pair(x)
            return sym(s @ sym_apply(si @ u @ si, torch.exp) @ s)
        w, q = torch.linalg.eigh(sym(x))
        return sym_apply(self._logm(w, q) + self._dlog(w, q, sym(u)), torch.exp)

    def _logmap(self, x: Tensor, y: Tensor) -> Tensor:
        if self.metric == "affine":
            s, si = self._sqrt_pair(x)
            return sym(s @ sym_apply(si @ y @ si, torch.log) @ s)
        w, q = torch.linalg.eigh(sym(x))
        diff = sym_apply(y, torch.log) - self._logm(w, q)
        return sym(self._dlog(w, q, diff, power=-1))

    def _dist(self, x: Tensor, y: Tensor) -> Tensor:
        if self.metric == "affine":
            w = torch.linalg.eigvalsh(sym(_whiten(torch.linalg.cholesky(x), y)))
            return w.log().norm(dim=-1)
        diff = sym_apply(y, torch.log) - sym_apply(x, torch.log)
        return sum_last(diff**2, 2).sqrt()

    def _transp(self, x: Tensor, y: Tensor, v: Tensor) -> Tensor:
        if self.metric == "affine":
            s, si = self._sqrt_pair(x)
            e = s @ sym_apply(si @ y @ si, torch.sqrt) @ si
            return sym(e @ v @ e.mT)
        wx, qx = torch.linalg.eigh(sym(x))
        wy, qy = torch.linalg.eigh(sym(y))
        return sym(self._dlog(wy, qy, self._dlog(wx, qx, v), power=-1))

    def _inner(self, x: Tensor, u: Tensor, v: Tensor) -> Tensor:
        if self.metric == "affine":
            chol = torch.linalg.cholesky(x)
            return sum_last(_whiten(chol, u) * _whiten(chol, v), 2)
        w, q = torch.linalg.eigh(sym(x))
        gamma = _log_divided_differences(w)
        return sum_last((q.mT @ u @ q) * (q.mT @ v @ q) * gamma**2, 2)

    def _egrad2rgrad(self, x: Tensor, egrad: Tensor) -> Tensor:
        if self.metric == "affine":
            return sym(x @ sym(egrad) @ x)
        w, q = torch.linalg.eigh(sym(x))
        return sym(self._dlog(w, q, sym(egrad), power=-2))

    def _random_point(self, batch, generator, dtype, device) -> Tensor:
        # Haar eigenvectors and log-normal eigenvalues: well conditioned, no preferred axes.
        q = haar_stiefel(batch, self.n, self.n, generator, dtype, device)
        w = randn((*batch, self.n), generator, dtype, device).mul(0.5).exp()
        return sym((q * w.unsqueeze(-2)) @ q.mT)

    def _random_tangent(self, x: Tensor, generator) -> Tensor:
        return sym(randn(x.shape, generator, x.dtype, x.device))

    def _point_error(self, x: Tensor, atol: float, rtol: float) -> str | None:
        msg = shape_error(x, (self.n, self.n), "point") or finite_error(x, "point")
        if msg is not None:
            return msg
        scale = x.abs().amax(dim=(-2, -1))
        asym = (x - x.mT).abs().amax(dim=(-2, -1))
        msg = exceeds(asym, atol + rtol * scale, "max |X - X^T| (not symmetric)")
        if msg is not None:
            return msg
        w = torch.linalg.eigvalsh(sym(x))
        floor = self.n * torch.finfo(x.dtype).eps * w.abs().amax(dim=-1)
        bad = ~(w[..., 0] > floor)
        if bool(bad.any()):
            flat = int(bad.reshape(-1).int().argmax())
            lo = float(w[..., 0].reshape(-1)[flat])
            hi = float(w[..., -1].reshape(-1)[flat])
            where = ""
            if bad.ndim:
                idx = torch.unravel_index(torch.tensor(flat), bad.shape)
                where = f" at batch index {tuple(int(i) for i in idx)}"
            return (
                f"not positive definite{where}: smallest eigenvalue {lo:.3g} "
                f"(largest {hi:.3g}); needs > n * eps * max|eig|"
            )
        return None

    def _tangent_error(self, x: Tensor, u: Tensor, atol: float, rtol: float) -> str | None:
        msg = (
            shape_error(x, (self.n, self.n), "point")
            or match_error(x, u)
            or finite_error(u, "tangent vector")
        )
        if msg is not None:
            return msg
        asym = (u - u.mT).abs().amax(dim=(-2, -1))
        bound = atol + rtol * u.abs().amax(dim=(-2, -1))
        return exceeds(asym, bound, "max |U - U^T| (not symmetric)")
