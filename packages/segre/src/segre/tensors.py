r"""Rank-one tensors in factored form: drawing them and measuring distances without dense arrays.

A rank-one tensor is a :class:`~shared_core.manifolds.SegrePoint`
``(scale (1,), factors (n_k,))`` with :math:`X = \lambda\, u_1 \otimes \dots \otimes u_d`.
Frobenius inner products of rank-one tensors factor:
:math:`\langle \lambda \otimes_k u_k, \rho \otimes_k v_k\rangle = \lambda\rho \prod_k
\langle u_k, v_k\rangle`, so every error in this package costs :math:`O(\sum_k n_k)`.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from shared_core.manifolds import Segre, SegrePoint

__all__ = [
    "check_dims",
    "degrees_of_freedom",
    "frobenius_distance",
    "frobenius_inner",
    "make_point",
    "random_rank_one",
    "relative_error",
]


def check_dims(dims) -> tuple[int, ...]:
    """``dims`` as a tuple of ints, each ``>= 2``, at least two modes; ``ValueError`` otherwise.

    Example:
        >>> check_dims([3, 4])
        (3, 4)
    """
    try:
        dims = tuple(dims)
    except TypeError:
        raise ValueError(f"dims must be a sequence of ints, got {dims!r}") from None
    if len(dims) < 2:
        raise ValueError(f"dims needs at least 2 modes, got {dims!r}")
    for k, n in enumerate(dims):
        if isinstance(n, bool) or not isinstance(n, int) or n < 2:
            raise ValueError(
                f"dims[{k}] = {n!r}: every mode size must be an int >= 2 (0 is empty; a size-1 "
                f"mode only carries a sign); got dims={dims!r}"
            )
    return dims


def degrees_of_freedom(dims) -> int:
    r"""The dimension :math:`1 + \sum_k (n_k - 1)` of the Segre manifold of shape ``dims``.

    Example:
        >>> degrees_of_freedom((20, 20, 20))
        58
    """
    return 1 + sum(n - 1 for n in check_dims(dims))


def make_point(scale: float | Tensor, factors) -> SegrePoint:
    """A :class:`SegrePoint` from any nonzero factors: they are normalised, the sign goes to
    the first factor, and ``ValueError`` is raised for a zero scale or factor (the zero tensor
    is not on the manifold) or non-finite input.

    Example:
        >>> x = make_point(2.0, [torch.tensor([3.0, 4.0]), torch.tensor([0.0, -1.0])])
        >>> float(x.scale), x.factors[1].tolist()
        (10.0, [0.0, -1.0])
    """
    factors = tuple(torch.as_tensor(f) for f in factors)
    if not factors:
        raise ValueError("make_point needs at least two factors")
    dtype = factors[0].dtype if factors[0].is_floating_point() else torch.float64
    factors = tuple(f.to(dtype) for f in factors)
    scale = torch.as_tensor(scale, dtype=dtype, device=factors[0].device).reshape(1)
    for k, f in enumerate(factors):
        if f.ndim != 1:
            raise ValueError(f"factor {k} must be a vector, got shape {tuple(f.shape)}")
        if not bool(torch.isfinite(f).all()):
            raise ValueError(f"factor {k} contains NaN or inf")
        if float(f.norm()) == 0.0:
            raise ValueError(f"factor {k} is zero: the zero tensor is not a rank-one point")
    if not bool(torch.isfinite(scale).all()) or float(scale) == 0.0:
        raise ValueError(
            f"scale = {float(scale)}: must be finite and nonzero (the zero tensor is not a "
            "point of the Segre manifold)"
        )
    man = Segre(tuple(int(f.shape[0]) for f in factors))
    return man.proj(SegrePoint(scale, factors))


def random_rank_one(
    dims, *, scale: float = 1.0, generator: torch.Generator | None = None, dtype=torch.float64
) -> SegrePoint:
    """A rank-one tensor with Haar-uniform unit factors and the given Frobenius norm."""
    dims = check_dims(dims)
    if not (math.isfinite(scale) and scale > 0):
        raise ValueError(f"scale must be finite and > 0, got {scale!r}")
    facs = []
    for n in dims:
        f = torch.randn(n, generator=generator, dtype=dtype)
        facs.append(f / f.norm())
    return SegrePoint(torch.full((1,), float(scale), dtype=dtype), tuple(facs))


def frobenius_inner(x: SegrePoint, y: SegrePoint) -> Tensor:
    r""":math:`\langle X, Y\rangle_F = \lambda\rho\prod_k \langle u_k, v_k\rangle` (0-d)."""
    out = x.scale[..., 0] * y.scale[..., 0]
    for u, v in zip(x.factors, y.factors, strict=True):
        out = out * (u * v).sum(-1)
    return out


def frobenius_distance(x: SegrePoint, y: SegrePoint) -> Tensor:
    r""":math:`\|X - Y\|_F = (\lambda^2 + \rho^2 - 2\langle X, Y\rangle)^{1/2}`, factored.

    The subtraction loses relative accuracy once the distance is below about
    :math:`\sqrt{\epsilon}\,\|X\|`; then the error is computed from the factor differences
    instead (:math:`X - Y` telescopes into ``d + 1`` rank-one terms after aligning signs).
    """
    lam, rho = x.scale[..., 0], y.scale[..., 0]
    sq = lam**2 + rho**2 - 2 * frobenius_inner(x, y)
    eps = torch.finfo(lam.dtype).eps
    if bool((sq > 1e4 * eps * (lam**2 + rho**2)).all()):
        return sq.clamp_min(0).sqrt()
    return _telescoped_distance(x, y)


def _telescoped_distance(x: SegrePoint, y: SegrePoint) -> Tensor:
    r"""Accurate :math:`\|X - Y\|_F` for nearby points from the factor differences.

    With the factors of ``y`` sign-aligned to those of ``x`` (flips of pairs only),
    :math:`X - Y = (\lambda - \rho)\otimes_k u_k + \rho \sum_k v_1\otimes\dots\otimes v_{k-1}
    \otimes (u_k - v_k) \otimes u_{k+1} \otimes\dots\otimes u_d`; the Gram matrix of these
    ``d + 1`` terms gives the norm without cancellation.
    """
    us = list(x.factors)
    vs = list(y.factors)
    signs = [1.0 if float((u * v).sum()) >= 0 else -1.0 for u, v in zip(us, vs, strict=True)]
    if math.prod(signs) < 0:  # an odd number of flips is not a gauge move: undo the weakest
        k = min(range(len(us)), key=lambda i: abs(float((us[i] * vs[i]).sum())))
        signs[k] = -signs[k]
    vs = [s * v for s, v in zip(signs, vs, strict=True)]
    lam, rho = x.scale[..., 0], y.scale[..., 0]
    d = len(us)
    terms = [(lam - rho, us)]
    for k in range(d):
        facs = [*vs[:k], us[k] - vs[k], *us[k + 1 :]]
        terms.append((rho, facs))
    total = torch.zeros((), dtype=lam.dtype)
    for ca, fa in terms:
        for cb, fb in terms:
            prod = ca * cb
            for a, b in zip(fa, fb, strict=True):
                prod = prod * (a * b).sum(-1)
            total = total + prod
    return total.clamp_min(0).sqrt()


def relative_error(x: SegrePoint, x_true: SegrePoint) -> float:
    r""":math:`\|X - X^\star\|_F / \|X^\star\|_F`, gauge free (signs and scale live in ``X``)."""
    return float(frobenius_distance(x, x_true) / x_true.scale[..., 0])
