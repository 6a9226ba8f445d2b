r"""Top singular triplets of a sparse-plus-low-rank matrix without forming it.

Soft-impute's iterate is :math:`Z = P_\Omega(B) + P_{\Omega^c}(X) = S + U\Sigma V^\top` with
:math:`S = P_\Omega(B - X)` supported on Ω and :math:`X = U\Sigma V^\top` of rank ≤ q, so
:math:`Z Q = S Q + U(\Sigma V^\top Q)` costs :math:`O(|\Omega| q + (m+n) q^2)`: no dense
m x n array. :func:`top_svd` is the randomized range finder (Halko–Martinsson–Tropp) with
``niter`` power iterations, each re-orthonormalised by QR; its error on the i-th triplet
decays like :math:`(\sigma_{q+o+1}/\sigma_i)^{2\,\mathrm{niter}+1}` (o the oversampling).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

__all__ = ["SparsePlusLowRank", "top_svd"]


@dataclass(frozen=True)
class SparsePlusLowRank:
    """:math:`Z = S + U\\,\\mathrm{diag}(s)\\,V^\\top`, S given by (rows, cols, vals)."""

    shape: tuple[int, int]
    rows: Tensor
    cols: Tensor
    vals: Tensor
    u: Tensor  # (m, j)
    s: Tensor  # (j,)
    v: Tensor  # (n, j)

    def matmul(self, q: Tensor) -> Tensor:
        """``Z @ q`` for ``q`` of shape (n, c)."""
        out = torch.zeros(self.shape[0], q.shape[1], dtype=q.dtype)
        out.index_add_(0, self.rows, self.vals.unsqueeze(1) * q[self.cols])
        return out + (self.u * self.s) @ (self.v.mT @ q)

    def rmatmul(self, p: Tensor) -> Tensor:
        """``Z^T @ p`` for ``p`` of shape (m, c)."""
        out = torch.zeros(self.shape[1], p.shape[1], dtype=p.dtype)
        out.index_add_(0, self.cols, self.vals.unsqueeze(1) * p[self.rows])
        return out + (self.v * self.s) @ (self.u.mT @ p)


def top_svd(
    z: SparsePlusLowRank,
    q: int,
    *,
    oversample: int = 10,
    niter: int = 4,
    generator: torch.Generator | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """Approximate top-``q`` singular triplets ``(U, s, V)`` of ``z`` (``U`` is m x q)."""
    m, n = z.shape
    c = min(q + oversample, m, n)
    dtype = z.vals.dtype
    y = z.matmul(torch.randn(n, c, generator=generator, dtype=dtype))
    basis = torch.linalg.qr(y).Q
    for _ in range(niter):
        basis = torch.linalg.qr(z.rmatmul(basis)).Q
        basis = torch.linalg.qr(z.matmul(basis)).Q
    small = z.rmatmul(basis).mT  # basis^T Z, c x n
    ub, s, vh = torch.linalg.svd(small, full_matrices=False)
    return (basis @ ub)[:, :q], s[:q], vh[:q].mT
