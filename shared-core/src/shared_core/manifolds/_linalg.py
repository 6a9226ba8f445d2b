"""Small batched matrix helpers shared by the manifolds (torch only, over leading dims)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor

__all__ = [
    "eye_like",
    "haar_stiefel",
    "polar_factor",
    "qr_positive",
    "randn",
    "sum_last",
    "sym",
    "sym_apply",
]


def sym(a: Tensor) -> Tensor:
    """Symmetric part ``(A + A^T) / 2`` of a batch of square matrices."""
    return (a + a.mT) / 2


def sum_last(t: Tensor, ndim: int) -> Tensor:
    """Sum over the last ``ndim`` dims (``ndim >= 1``; ``sum(dim=())`` would sum everything)."""
    return t.sum(dim=tuple(range(-ndim, 0)))


def eye_like(a: Tensor, n: int) -> Tensor:
    """An ``n x n`` identity with ``a``'s dtype and device."""
    return torch.eye(n, dtype=a.dtype, device=a.device)


def qr_positive(a: Tensor) -> tuple[Tensor, Tensor]:
    """Reduced QR with the signs fixed so that ``diag(R) >= 0``.

    Householder QR is unique only up to the signs of the columns of ``Q``; pinning them makes
    ``Q`` a continuous function of ``a`` (so a QR retraction at a zero step returns its input)
    and makes the QR of a Gaussian matrix Haar distributed.
    """
    q, r = torch.linalg.qr(a)
    s = torch.sign(torch.diagonal(r, dim1=-2, dim2=-1))
    s = torch.where(s == 0, torch.ones_like(s), s)
    return q * s.unsqueeze(-2), r * s.unsqueeze(-1)


def polar_factor(a: Tensor) -> Tensor:
    """The orthonormal polar factor ``U V^T`` of ``a = U S V^T`` (thin SVD).

    One Newton-Schulz pass ``Y + Y (I - Y^T Y) / 2`` follows the SVD: it leaves the polar
    factor unchanged to first order but squares the orthonormality error, which in float32
    LAPACK leaves at a few ``1e-6`` (after it, a few ``1e-7``).
    """
    u, _, vh = torch.linalg.svd(a, full_matrices=False)
    y = u @ vh
    return y + 0.5 * y @ (eye_like(y, y.shape[-1]) - y.mT @ y)


def sym_apply(x: Tensor, fn: Callable[[Tensor], Tensor]) -> Tensor:
    """``Q diag(fn(w)) Q^T`` for the eigendecomposition of ``sym(x)``.

    The input is symmetrised first: eigh reads one triangle only, so an asymmetric rounding
    error would otherwise be resolved silently in favour of that triangle.
    """
    w, q = torch.linalg.eigh(sym(x))
    return (q * fn(w).unsqueeze(-2)) @ q.mT


def randn(
    shape: Sequence[int],
    generator: torch.Generator | None,
    dtype: torch.dtype,
    device: torch.device | str | None,
) -> Tensor:
    """Standard normal samples drawn on the generator's device, then moved to ``device``.

    torch refuses a CPU generator for CUDA sampling; drawing where the generator lives keeps
    one seeded CPU generator usable for points on any device.
    """
    if generator is None:
        return torch.randn(tuple(shape), dtype=dtype, device=device)
    out = torch.randn(tuple(shape), generator=generator, dtype=dtype, device=generator.device)
    return out.to(device) if device is not None else out


def haar_stiefel(
    batch: Sequence[int],
    n: int,
    p: int,
    generator: torch.Generator | None,
    dtype: torch.dtype,
    device: torch.device | str | None,
) -> Tensor:
    """A Haar-random ``n x p`` orthonormal matrix per batch entry (sign-fixed QR of a Gaussian)."""
    return qr_positive(randn((*batch, n, p), generator, dtype, device))[0]
