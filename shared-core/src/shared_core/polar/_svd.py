r"""Spectral functions through one SVD: :math:`U\,w(\Sigma)\,V^\top`, shared by msign and powers.

Both :func:`shared_core.polar.msign` (``method="svd"``) and
:func:`shared_core.polar.spectral_power` (``method="svd"``) go through :func:`svd_apply`, so
the power with exponent 0 is bitwise the SVD polar factor.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

__all__ = ["svd_apply"]


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
    X = G.to(dtype)
    U, s, Vh = torch.linalg.svd(X, full_matrices=False)
    return ((U * weights(s).unsqueeze(-2)) @ Vh).to(G.dtype)
