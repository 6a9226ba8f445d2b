r"""Functions of symmetric (positive-definite) matrices through one eigendecomposition.

For symmetric :math:`X = V\Lambda V^\top`, :math:`f(X) = V f(\Lambda) V^\top`. ``eigh`` is
exact to round-off, batched over leading dimensions, and for the moderate sizes of
preconditioners and SPD-manifold points it is the simplest correct route:

- :func:`sqrtm` :math:`X^{1/2}`, :func:`inv_sqrtm` :math:`X^{-1/2}`, :func:`logm_sym`
  :math:`\log X`, :func:`powm_sym` :math:`X^a`: ``X`` symmetric positive definite;
- :func:`expm_sym` :math:`\exp S`: ``S`` symmetric.

Inputs are checked: non-square, non-symmetric (beyond round-off: max|X - X^T| over max|X|
above the square root of the dtype's epsilon), non-finite, or (where required) not positive
definite (smallest eigenvalue <= 0) raise ``ValueError``. The input is symmetrised
(:math:`(X + X^\top)/2`) before ``eigh`` and every result is exactly symmetric. Half-precision
inputs are computed in float32, and every result is returned in the input's dtype.

Example:
    >>> X = torch.tensor([[4.0, 0.0], [0.0, 9.0]])
    >>> sqrtm(X)
    tensor([[2., 0.],
            [0., 3.]])
    >>> torch.allclose(logm_sym(expm_sym(torch.tensor([[0.0, 1.0], [1.0, 0.0]]))),
    ...                torch.tensor([[0.0, 1.0], [1.0, 0.0]]), atol=1e-6)
    True
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor

from ._checks import check_finite, check_matrix, check_symmetric, exact_dtype

__all__ = ["expm_sym", "inv_sqrtm", "logm_sym", "powm_sym", "sqrtm"]


def _sym_apply(
    X: Tensor,
    fn: Callable[[Tensor], Tensor],
    what: str,
    *,
    positive: bool,
    dtype: torch.dtype | None,
    rtol: float | None,
) -> Tensor:
    X = check_matrix(X, what, square=True)
    cd = exact_dtype(X, dtype)
    check_finite(X, what)
    if X.shape[-1] == 0:
        return X.clone()
    Y = X.to(cd)
    check_symmetric(Y, what, rtol)
    lam, V = torch.linalg.eigh((Y + Y.mT) / 2)
    if positive:
        lmin = lam[..., 0]
        if not bool((lmin > 0).all()):
            raise ValueError(
                f"{what} needs symmetric positive-definite matrices; the smallest eigenvalue "
                f"is {float(lmin.min()):.3e} (<= 0)"
            )
    out = (V * fn(lam).unsqueeze(-2)) @ V.mT
    # V f V^T is symmetric only up to round-off; downstream SPD code expects exact symmetry.
    return ((out + out.mT) / 2).to(X.dtype)


def sqrtm(X: Tensor, *, dtype: torch.dtype | None = None, rtol: float | None = None) -> Tensor:
    r"""Principal square root :math:`X^{1/2}` of SPD ``X`` (the SPD matrix squaring to ``X``).

    Args:
        X: ``(..., n, n)`` symmetric positive-definite tensor.
        dtype: float32 or float64 (``None``: float64 for float64 input, else float32).
        rtol: symmetry tolerance (default: square root of the dtype's epsilon).

    Returns:
        Shaped and typed like ``X``.

    Example:
        >>> R = sqrtm(torch.tensor([[2.0, 1.0], [1.0, 2.0]]))
        >>> R @ R
        tensor([[2.0000, 1.0000],
                [1.0000, 2.0000]])
    """
    return _sym_apply(X, torch.sqrt, "sqrtm", positive=True, dtype=dtype, rtol=rtol)


def inv_sqrtm(X: Tensor, *, dtype: torch.dtype | None = None, rtol: float | None = None) -> Tensor:
    r"""Inverse principal square root :math:`X^{-1/2}` of SPD ``X`` (whitening matrix).

    Args:
        X: ``(..., n, n)`` symmetric positive-definite tensor.
        dtype: float32 or float64 (``None``: float64 for float64 input, else float32).
        rtol: symmetry tolerance.

    Returns:
        Shaped and typed like ``X``.

    Example:
        >>> inv_sqrtm(torch.tensor([[4.0, 0.0], [0.0, 0.25]]))
        tensor([[0.5000, 0.0000],
                [0.0000, 2.0000]])
    """
    return _sym_apply(X, torch.rsqrt, "inv_sqrtm", positive=True, dtype=dtype, rtol=rtol)


def powm_sym(
    X: Tensor, a: float, *, dtype: torch.dtype | None = None, rtol: float | None = None
) -> Tensor:
    r"""Real power :math:`X^a = V\Lambda^a V^\top` of SPD ``X``.

    Args:
        X: ``(..., n, n)`` symmetric positive-definite tensor.
        a: any finite real exponent.
        dtype: float32 or float64 (``None``: float64 for float64 input, else float32).
        rtol: symmetry tolerance.

    Returns:
        Shaped and typed like ``X``.

    Example:
        >>> powm_sym(torch.tensor([[8.0, 0.0], [0.0, 27.0]]), 1 / 3)
        tensor([[2., 0.],
                [0., 3.]])
    """
    try:
        af = float(a)
    except (TypeError, ValueError):
        raise ValueError(f"the exponent a must be a finite number, got {a!r}") from None
    if not math.isfinite(af):
        raise ValueError(f"the exponent a must be a finite number, got {a!r}")
    return _sym_apply(X, lambda lam: lam.pow(af), "powm_sym", positive=True, dtype=dtype, rtol=rtol)


def logm_sym(X: Tensor, *, dtype: torch.dtype | None = None, rtol: float | None = None) -> Tensor:
    r"""Principal logarithm :math:`\log X` of SPD ``X`` (a symmetric matrix).

    Args:
        X: ``(..., n, n)`` symmetric positive-definite tensor.
        dtype: float32 or float64 (``None``: float64 for float64 input, else float32).
        rtol: symmetry tolerance.

    Returns:
        Shaped and typed like ``X``.

    Example:
        >>> logm_sym(torch.diag(torch.tensor([1.0, math.e])))
        tensor([[0., 0.],
                [0., 1.]])
    """
    return _sym_apply(X, torch.log, "logm_sym", positive=True, dtype=dtype, rtol=rtol)


def expm_sym(S: Tensor, *, dtype: torch.dtype | None = None, rtol: float | None = None) -> Tensor:
    r"""Matrix exponential :math:`\exp S` of symmetric ``S`` (an SPD matrix).

    Args:
        S: ``(..., n, n)`` symmetric tensor (any sign).
        dtype: float32 or float64 (``None``: float64 for float64 input, else float32).
        rtol: symmetry tolerance.

    Returns:
        Shaped and typed like ``S``.

    Example:
        >>> expm_sym(torch.zeros(2, 2))
        tensor([[1., 0.],
                [0., 1.]])
    """
    return _sym_apply(S, torch.exp, "expm_sym", positive=False, dtype=dtype, rtol=rtol)
