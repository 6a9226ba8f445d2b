r"""The Newton-Schulz iteration for the polar factor, for any table of odd quintics.

For :math:`G = U \Sigma V^\top`, each step :math:`X \leftarrow aX + (bA + cA^2)X` with
:math:`A = XX^\top` replaces every singular value ``s`` by :math:`p(s) = as + bs^3 + cs^5` and
keeps the singular vectors, so after the table's steps :math:`X = U f(\Sigma) V^\top` with
``f`` the composition of the quintics; a good table makes :math:`f \approx 1` on the
normalised spectrum, i.e. :math:`X \approx UV^\top`.

Three details, all as in ``torch.optim.Muon``'s loop so that the cost is the same:

- normalisation :math:`X_0 = G / \max(\|G\|_F \cdot \text{margin}, \text{eps})`, which puts
  every singular value in :math:`[0, 1/\text{margin}]` (the spectral norm is at most the
  Frobenius norm), maps zero to zero and never divides by zero;
- a tall matrix is transposed first so that ``A`` is the smaller Gram matrix
  (``min(m, n)`` squared);
- the iteration runs in a chosen dtype (bfloat16 by default on CUDA, float32 elsewhere).

On CUDA each step is ``torch.ops.shared_core.ns_step`` (Triton SYRK kernels,
:mod:`shared_core.kernels.ns_step`); elsewhere it is the plain-torch reference, two
``addmm`` per step like Muon's.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor

from shared_core.kernels import HAS_TRITON
from shared_core.kernels.ns_step import ns_step_reference

from ._checks import check_finite as _check_finite
from ._checks import check_matrix, iteration_dtype

__all__ = ["newton_schulz", "normalize_frobenius"]

_KERNEL_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def normalize_frobenius(
    X: Tensor, *, margin: float = 1.0, eps: float = 1e-7, check_finite: bool = True
) -> Tensor:
    r""":math:`X / \max(\|X\|_F \cdot \text{margin}, \text{eps})` per matrix (last two dims).

    Args:
        X: ``(..., m, n)`` tensor.
        margin: safety margin ``>= 1`` on the norm.
        eps: floor of the denominator (zero maps to zero).
        check_finite: raise ``ValueError`` on NaN/inf. The check reads the norm, which is
            computed anyway; when the norm overflows while every entry is finite, ``X`` is
            first rescaled by its largest entry (the polar factor is scale invariant).

    Returns:
        The normalised tensor, dtype of ``X``.

    Example:
        >>> normalize_frobenius(torch.tensor([[3.0, 0.0], [0.0, 4.0]]))
        tensor([[0.6000, 0.0000],
                [0.0000, 0.8000]])
    """
    norm = torch.linalg.vector_norm(X, dim=(-2, -1), keepdim=True)
    if check_finite and not bool(torch.isfinite(norm).all()):
        _check_finite(X, "normalize_frobenius")
        X = X / X.abs().amax(dim=(-2, -1), keepdim=True)
        norm = torch.linalg.vector_norm(X, dim=(-2, -1), keepdim=True)
    return X / (norm * margin).clamp_min(eps)


def _check_coefficients(coefficients: Sequence[Sequence[float]]) -> list[tuple[float, ...]]:
    out = []
    for i, abc in enumerate(coefficients):
        try:
            a, b, c = (float(v) for v in abc)
        except (TypeError, ValueError):
            raise ValueError(
                f"coefficients[{i}] must be three numbers (a, b, c), got {abc!r}"
            ) from None
        if not all(math.isfinite(v) for v in (a, b, c)):
            raise ValueError(f"coefficients[{i}] must be finite, got {abc!r}")
        out.append((a, b, c))
    return out


def newton_schulz(
    G: Tensor,
    coefficients: Sequence[Sequence[float]],
    *,
    margin: float = 1.0,
    eps: float = 1e-7,
    dtype: torch.dtype | None = None,
    check_finite: bool = True,
) -> Tensor:
    r"""Apply Newton-Schulz quintic steps to the Frobenius-normalised ``G``.

    Args:
        G: ``(..., m, n)`` real floating tensor; leading dimensions are a batch.
        coefficients: one ``(a, b, c)`` per step (see
            :func:`shared_core.polar.coefficients_for` for the named tables).
        margin: normalisation margin ``>= 1`` (1.01 for Polar Express).
        eps: floor of the normalising denominator.
        dtype: iteration dtype; ``None`` is bfloat16 on CUDA and float32 elsewhere.
        check_finite: raise ``ValueError`` on NaN/inf input (one scalar check; on CUDA a
            host sync). With ``False`` a non-finite input gives a non-finite output.

    Returns:
        ``U f(Σ) V^T`` shaped like ``G``, in ``G``'s dtype.

    Example:
        >>> G = torch.diag(torch.tensor([1.0, 0.5]))
        >>> X = newton_schulz(G, [(1.875, -1.25, 0.375)] * 8)
        >>> torch.allclose(X, torch.eye(2), atol=1e-4)
        True
    """
    G = check_matrix(G, "newton_schulz")
    coeffs = _check_coefficients(coefficients)
    if not (isinstance(margin, int | float) and math.isfinite(margin) and margin >= 1):
        raise ValueError(f"margin must be a finite number >= 1, got {margin!r}")
    if not (isinstance(eps, int | float) and math.isfinite(eps) and eps > 0):
        raise ValueError(f"eps must be a finite number > 0, got {eps!r}")
    it_dtype = iteration_dtype(G, dtype)
    X = G.to(it_dtype)
    transposed = X.shape[-2] > X.shape[-1]
    if transposed:
        X = X.mT
    X = normalize_frobenius(X, margin=margin, eps=eps, check_finite=check_finite)
    if X.is_cuda and HAS_TRITON and it_dtype in _KERNEL_DTYPES:
        step = torch.ops.shared_core.ns_step
    else:
        step = ns_step_reference
    for a, b, c in coeffs:
        X = step(X, a, b, c)
    if transposed:
        X = X.mT
    return X.to(G.dtype)
