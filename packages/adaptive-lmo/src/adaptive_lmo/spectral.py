r"""A cheaper spectral decomposition for criterion steps, with an a-posteriori check.

Every criterion step decomposes each layer's direction ``P`` (``m x n``, ``r = min(m, n)``);
its factors feed the criterion and that step's update. The exact route is LAPACK's SVD. The
estimate here is the symmetric eigendecomposition of the smaller Gram matrix,
:math:`P^\top P = \hat V\,\mathrm{diag}(\hat s^2)\,\hat V^\top` (``m >= n``; the transpose
otherwise), and :math:`\hat U = P\hat V\,\mathrm{diag}(\hat s)^{-1}`: one matmul, one ``eigh``
of an ``r x r`` matrix (about half an SVD on CPU, README) and one matmul. It squares the
condition number, so its left factor loses orthogonality along small singular values. That
loss is the whole error, and it is measured, not assumed.

Accuracy the criterion needs. The criterion scores family members
:math:`\Phi_a = U\mathrm{diag}(s^a)V^\top`, ``a`` in [0, 1] (:mod:`adaptive_lmo.criterion`):
numerator :math:`\langle G, \Phi_a\rangle` and denominator
:math:`\mathrm{tr}(B\Phi_a\Sigma\Phi_a^\top)`, both of which hold for any factors, orthogonal
or not. So the factors are good enough when every member built from them is within a relative
Frobenius distance ``tol`` of the exact member; the decrease :math:`\Delta(a)` then moves by at
most :math:`2\,\mathrm{tol}\,(1/\cos_a + \kappa_a)` relative to first order (``cos_a`` the
cosine of ``G`` and :math:`\Phi_a`, :math:`\kappa_a` the curvature's condition along it).
``tol = 1e-4`` (:data:`MEMBER_TOL`) keeps that below 1e-3 for ``1/cos + kappa <= 5``, two
orders under the 5% ``min_gain`` the criterion's choices are judged by and under the row
noise of the gain (s.e. 0.3-0.9%, docs/overhead.md).

The check (:func:`member_error`). With :math:`K = \hat U^\top\hat U - I` (``V̂`` is orthogonal
to working precision, ``eigh``), :math:`\hat U = Q(I + K)^{1/2}` with ``Q`` orthonormal, so
:math:`(Q, \hat s, \hat V)` is an exact SVD of :math:`\tilde P`, and
:math:`P - \tilde P = Q((I+K)^{1/2} - I)\mathrm{diag}(\hat s) \approx Q\,\tfrac K2\,
\mathrm{diag}(\hat s)`. The Fréchet derivative of :math:`P \mapsto \Phi_a(P)` in the singular
bases weighs the symmetric part of a perturbation's ``(i, j)`` entry by the divided difference
:math:`(s_i^a - s_j^a)/(s_i - s_j)` and the skew part by :math:`(s_i^a + s_j^a)/(s_i + s_j)`;
for that perturbation both terms together are at most :math:`|K_{ij}|\max(s_i, s_j)^a` (for
``a`` in [0, 1]: :math:`(1 + x)(1 - x^a)/(1 - x) \le 2` and
:math:`(1 - x)(1 + x^a)/(1 + x) \le 2`, ``x`` the ratio of the two values). Using ``Û``
instead of ``Q`` adds :math:`\|K\mathrm{diag}(\hat s^a)\|_F/2`. So, to first order,

.. math::

    \frac{\|\hat\Phi_a - \Phi_a\|_F}{\|\Phi_a\|_F} \le
    \frac{\big(\sum_{ij} K_{ij}^2 \max(\hat s_i, \hat s_j)^{2a}\big)^{1/2}
          + \tfrac12\|K\,\mathrm{diag}(\hat s^a)\|_F}{\|\hat s^a\|_2},

evaluated on the criterion's whole 129-point grid of ``a`` in ``O(r^2)`` (the max is the
earlier index once ``ŝ`` is sorted). Where the bound exceeds ``tol`` for some ``a`` (or a
value is not finite: a zero or unresolved singular value divides by zero), the exact SVD is
taken instead. A rank-deficient direction therefore always takes the SVD.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .criterion import GRID_POINTS
from .fractional import SVDFactors, svd_factors

__all__ = ["MEMBER_TOL", "SPECTRAL", "criterion_factors", "gram_factors", "member_error"]

#: ``"gram"``: the estimate, checked, with the SVD as fallback; ``"svd"``: always the SVD.
SPECTRAL = ("gram", "svd")
#: Largest first-order relative error of a family member the criterion accepts (module).
MEMBER_TOL = 1e-4


def gram_factors(P: Tensor) -> tuple[SVDFactors, Tensor]:
    """Thin SVD estimate of ``P`` (``(..., m, n)``) from the smaller Gram matrix's ``eigh``.

    Returns the factors (singular values in descending order, in float32, or float64 for
    float64 input) and ``K = Û^T Û - I`` of the factor computed by division (``(..., r, r)``).
    """
    cd = torch.float64 if P.dtype == torch.float64 else torch.float32
    X = P.to(cd)
    wide = X.shape[-2] < X.shape[-1]
    if wide:  # decompose P^T, then swap the factors back
        X = X.mT
    lam, V = torch.linalg.eigh(X.mT @ X)
    lam, V = lam.flip(-1), V.flip(-1)  # descending, as torch.linalg.svd
    s = lam.clamp_min(0.0).sqrt()
    inv = torch.where(s > 0, 1.0 / s.clamp_min(torch.finfo(cd).tiny), 0.0)
    U = (X @ V) * inv.unsqueeze(-2)
    K = U.mT @ U
    K.diagonal(dim1=-2, dim2=-1).sub_(1.0)
    if wide:
        return SVDFactors(U=V, s=s, Vh=U.mT), K
    return SVDFactors(U=U, s=s, Vh=V.mT), K


def member_error(K: Tensor, s: Tensor, exponents: Tensor) -> Tensor:
    """The first-order bound on every family member's relative error (module docstring).

    Args:
        K: ``(..., r, r)`` orthogonality defect of the divided factor.
        s: ``(..., r)`` the estimate's singular values, descending.
        exponents: ``(k,)`` the exponents ``a`` to bound.

    Returns:
        ``(k,)`` float64: the largest bound over the batch for each ``a`` (inf where a
        singular value is 0 at ``a = 0``'s weights, i.e. an unresolved direction).
    """
    K2 = K.to(torch.float64).pow(2)
    # pairs (i, j) weigh max(s_i, s_j)^(2a) = s_min(i,j)^(2a): fold each pair onto its
    # earlier index t (diagonal once, off-diagonal twice by symmetry)
    q = K2.diagonal(dim1=-2, dim2=-1) + 2.0 * K2.triu(1).sum(-1)
    col = K2.sum(-2)  # ||K e_j||^2: the columns that diag(s^a) scales
    ls = s.to(torch.float64).clamp_min(0.0).log()  # -inf at 0: weight 0 for a > 0
    a = exponents.to(torch.float64).reshape(-1, *([1] * s.ndim))
    w = torch.exp(2.0 * a * ls)  # (k, ..., r); exp(0 * -inf) is NaN: a = 0 below
    w = torch.where(a == 0, torch.ones_like(w), w)
    num = (w * q).sum(-1).sqrt() + 0.5 * (w * col).sum(-1).sqrt()
    err = num / w.sum(-1).sqrt()
    if (s <= 0).any():  # a zero singular value: its column of Û was never resolved
        err = torch.full_like(err, torch.inf)
    err = torch.where(torch.isnan(err), torch.inf, err)
    return err.reshape(err.shape[0], -1).amax(-1)


def criterion_factors(
    P: Tensor, spectral: str = "gram", tol: float = MEMBER_TOL
) -> tuple[SVDFactors, bool]:
    """The factors a criterion step uses, and whether they are the checked estimate.

    ``spectral="svd"``, float64 and empty matrices take
    :func:`adaptive_lmo.fractional.svd_factors`; otherwise :func:`gram_factors`, kept when
    :func:`member_error` is at most ``tol`` for every exponent of the criterion's grid, else
    the SVD (one host read).
    """
    if spectral not in SPECTRAL:
        raise ValueError(f"spectral must be one of {SPECTRAL}, got {spectral!r}")
    if spectral == "svd" or P.dtype == torch.float64 or min(P.shape[-2:]) == 0:
        return svd_factors(P), False
    f, K = gram_factors(P)
    grid = torch.linspace(0.0, 1.0, GRID_POINTS, dtype=torch.float64)
    if bool(member_error(K, f.s, grid).max() <= tol):
        return f, True
    return svd_factors(P), False
