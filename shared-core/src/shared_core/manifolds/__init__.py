r"""Riemannian manifolds behind one small interface (:class:`Manifold`).

=========================  ==============================  ===================================
manifold                   point                           metric
=========================  ==============================  ===================================
:class:`Euclidean`         tensor of a fixed shape         Frobenius
:class:`Sphere`            unit Frobenius norm             Frobenius
:class:`Stiefel`           ``X^T X = I`` (n x p)           ``"euclidean"`` or ``"canonical"``
:class:`Grassmann`         orthonormal basis of a subspace Frobenius on horizontal lifts
:class:`SPD`               symmetric positive definite     ``"affine"`` or ``"log_euclidean"``
:class:`FixedRankFactored` :class:`Factors` ``(A, B)``     GL(r)-invariant quotient metric
:class:`FixedRankEmbedded` :class:`SVDPoint` ``(U, S, V)`` Frobenius (embedded)
:class:`Product`           tuple of factor points          sum of the factors' metrics
:class:`Segre`             :class:`SegrePoint` (scale, u)  Frobenius (embedded), a metric cone
=========================  ==============================  ===================================

Every manifold offers ``proj``, ``proju``, ``retr``, ``expmap`` (where a closed form exists),
``transp``, ``inner``, ``norm``, ``egrad2rgrad``, ``random_point``, ``random_tangent``,
``zero_tangent``, ``check_point``/``check_tangent`` (``ValueError`` with the size of the
violation) and ``is_point``/``is_tangent``; ``logmap`` and ``dist`` where closed forms exist.
Inputs must be float32 or float64 (:class:`UnsupportedDtypeError` otherwise).

Example:
    >>> import torch
    >>> from shared_core.manifolds import Stiefel
    >>> St = Stiefel(7, 3)
    >>> g = torch.Generator().manual_seed(0)
    >>> X = St.random_point(generator=g, dtype=torch.float64)
    >>> G = torch.randn(7, 3, generator=g, dtype=torch.float64)
    >>> X = St.retr(X, -0.1 * St.egrad2rgrad(X, G))
    >>> St.check_point(X)
"""

from __future__ import annotations

from .base import Manifold, NoClosedFormError, UnsupportedDtypeError, default_tolerance
from .euclidean import Euclidean
from .fixed_rank import Factors, FixedRankEmbedded, FixedRankFactored, SVDPoint, SVDTangent
from .grassmann import Grassmann
from .product import Product
from .segre import CPTensor, Segre, SegrePoint, SegreTangent
from .spd import SPD
from .sphere import Sphere
from .stiefel import Stiefel

__all__ = [
    "SPD",
    "CPTensor",
    "Euclidean",
    "Factors",
    "FixedRankEmbedded",
    "FixedRankFactored",
    "Grassmann",
    "Manifold",
    "NoClosedFormError",
    "Product",
    "SVDPoint",
    "SVDTangent",
    "Segre",
    "SegrePoint",
    "SegreTangent",
    "Sphere",
    "Stiefel",
    "UnsupportedDtypeError",
    "default_tolerance",
]
