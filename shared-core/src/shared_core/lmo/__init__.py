r"""Norms, dual norms and linear minimization oracles (LMOs).

For a norm :math:`\|\cdot\|` with dual :math:`\|G\|_* = \max_{\|D\| \le 1} \langle G, D\rangle`,
the LMO is

.. math::

    \operatorname{lmo}(G, r) = \operatorname*{argmin}_{\|D\| \le r} \langle G, D\rangle,
    \qquad \langle G, \operatorname{lmo}(G, r)\rangle = -r\,\|G\|_* .

It is the step of Frank-Wolfe / conditional gradient, and steepest descent in a norm (signSGD is
l-inf, Muon is spectral, Scion's ColNorm/RowNorm layers are the column/row-wise l2 norms).

Two APIs of the same math:

- functions: ``spectral_norm``, ``spectral_lmo``, ``nuclear_lmo``, ``schatten_lmo``, ``l1_lmo``,
  ``colnorm_lmo``, ... (each module is one norm family);
- objects: :class:`Norm` subclasses (:class:`Spectral`, :class:`Nuclear`, :class:`Frobenius`,
  :class:`Schatten`, :class:`LInf`, :class:`L1`, :class:`L2`, :class:`ColNorm`,
  :class:`RowNorm` and the duals :class:`ColNormDual`, :class:`RowNormDual`) with ``norm``,
  ``dual_norm``, ``lmo``, ``dual`` and ``inner``, and :func:`get_norm` to build them by name.

Matrix norms measure the last two axes and batch over the rest; vector norms measure ``dim``
(default: the whole tensor). Zero gradients give zero steps, NaN stays NaN, half precisions are
computed in float32 and returned in their own dtype.

Example:
    >>> import torch
    >>> from shared_core.lmo import get_norm
    >>> G = torch.tensor([[3.0, 0.0], [0.0, -1.0]])
    >>> n = get_norm("spectral")
    >>> D = n.lmo(G, radius=0.1)
    >>> n.inner(G, D), -0.1 * n.dual_norm(G)
    (tensor(-0.4000), tensor(-0.4000))
"""

from __future__ import annotations

from .colrow import (
    colnorm,
    colnorm_dual,
    colnorm_dual_lmo,
    colnorm_lmo,
    rownorm,
    rownorm_dual,
    rownorm_dual_lmo,
    rownorm_lmo,
)
from .entrywise import l1_lmo, l1_norm, l2_lmo, l2_norm, linf_lmo, linf_norm
from .factory import NORMS, get_norm
from .frobenius import frobenius_lmo, frobenius_norm
from .norms import (
    L1,
    L2,
    ColNorm,
    ColNormDual,
    Frobenius,
    LInf,
    MatrixNorm,
    Norm,
    Nuclear,
    RowNorm,
    RowNormDual,
    Schatten,
    Spectral,
    VectorNorm,
)
from .nuclear import nuclear_lmo, nuclear_norm, top_singular_pair
from .schatten import dual_exponent, schatten_lmo, schatten_norm
from .spectral import PolarFn, polar_svd, spectral_lmo, spectral_norm

__all__ = [
    "L1",
    "L2",
    "NORMS",
    "ColNorm",
    "ColNormDual",
    "Frobenius",
    "LInf",
    "MatrixNorm",
    "Norm",
    "Nuclear",
    "PolarFn",
    "RowNorm",
    "RowNormDual",
    "Schatten",
    "Spectral",
    "VectorNorm",
    "colnorm",
    "colnorm_dual",
    "colnorm_dual_lmo",
    "colnorm_lmo",
    "dual_exponent",
    "frobenius_lmo",
    "frobenius_norm",
    "get_norm",
    "l1_lmo",
    "l1_norm",
    "l2_lmo",
    "l2_norm",
    "linf_lmo",
    "linf_norm",
    "nuclear_lmo",
    "nuclear_norm",
    "polar_svd",
    "rownorm",
    "rownorm_dual",
    "rownorm_dual_lmo",
    "rownorm_lmo",
    "schatten_lmo",
    "schatten_norm",
    "spectral_lmo",
    "spectral_norm",
    "top_singular_pair",
]
