r"""Spectral functions through one SVD: :math:`U\,w(\Sigma)\,V^\top`, shared by msign and powers.

Both :func:`shared_core.polar.msign` (``method="svd"``) and
:func:`shared_core.polar.spectral_power` (``method="svd"``) go through :func:`svd_apply`, so
the power with exponent 0 is bitwise the SVD polar factor.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

__all__ = ["default_rtol", "significant", "svd_apply"]


def svd_apply(G: Tensor, weights: Callable[[Tensor], Tensor], dtype: torch.dtype) -> Tensor:
    """Return ``U diag(weights(s)) V^T`` of ``G`` (computed in ``dtype``), in ``G``'s dtype.

    Args:
        G: ``(..., m, n)`` tensor.
        weights: maps the singular values ``(..., k)`` (descending) to the new diagonal.
        dtype: float32 or float64.
    """
    m, n = G.shape[-2:]
    if min(m, n) == 0:
        return torch.zeros_like(G)
    if m < n:
        # LAPACK's divide and conquer is about twice as slow on a wide matrix as on its
        # transpose (measured at 64x4096); U w(S) V^T of G is the transpose of V w(S) U^T.
        return svd_apply(G.mT, weights, dtype).mT
    X = G.to(dtype)
    U, s, Vh = torch.linalg.svd(X, full_matrices=False)
    return ((U * weights(s).unsqueeze(-2)) @ Vh).to(G.dtype)


def default_rtol(m: int, n: int, dtype: torch.dtype) -> float:
    """The numerical-rank cut-off ``max(m, n) * eps`` (the rule of ``numpy.linalg.matrix_rank``)
    of an ``m x n`` matrix computed in ``dtype`` (float32's epsilon for half precision)."""
    eps_dtype = dtype if dtype in (torch.float32, torch.float64) else torch.float32
    return max(m, n) * torch.finfo(eps_dtype).eps


def significant(s: Tensor, rtol: float) -> Tensor:
    """Mask of the singular values ``s`` (``(..., k)``, any order) above ``rtol`` times the
    largest: the others are round-off of exact zeros, and their directions are noise.

    One rule for every exact polar route (SVD, Gram, fractional powers), so that they agree
    on rank-deficient input. An all-zero row of ``s`` keeps nothing."""
    top = s.amax(dim=-1, keepdim=True)
    return s > rtol * top
