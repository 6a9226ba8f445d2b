r"""The Frobenius norm, which is its own dual, and its LMO, the normalised gradient.

.. math::

    \|G\|_F = \sqrt{\textstyle\sum_{ij} G_{ij}^2} = \|s\|_2, \qquad
    \operatorname{lmo}(G, r) = -r\, G / \|G\|_F,

by Cauchy-Schwarz: :math:`\langle G, D\rangle \ge -\|G\|_F \|D\|_F \ge -r \|G\|_F`, with
equality when :math:`D` points against :math:`G`. It is the Schatten-2 norm; the LMO is
normalised gradient descent.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ._common import check_matrix, check_radius, safe_div, upcast

__all__ = ["frobenius_lmo", "frobenius_norm"]


def frobenius_norm(G: Tensor) -> Tensor:
    r"""The Frobenius norm :math:`\|G\|_F` of every matrix in ``G``.

    Args:
        G: a tensor of shape ``(..., m, n)``.

    Returns:
        A tensor of shape ``(...)`` in ``G``'s dtype.

    Example:
        >>> frobenius_norm(torch.tensor([[3.0, 0.0], [0.0, -4.0]]))
        tensor(5.)
    """
    G = check_matrix(G, "frobenius_norm")
    return torch.linalg.vector_norm(upcast(G), dim=(-2, -1)).to(G.dtype)


def frobenius_lmo(G: Tensor, radius: float = 1.0) -> Tensor:
    r"""The Frobenius-norm LMO :math:`-r\,G/\|G\|_F`, batched (zero maps to zero).

    Args:
        G: the gradient, shape ``(..., m, n)``.
        radius: the radius :math:`r \ge 0` of the Frobenius ball.

    Returns:
        A tensor shaped and typed like ``G``.

    Example:
        >>> frobenius_lmo(torch.tensor([[3.0, 0.0], [0.0, -4.0]]), radius=10.0)
        tensor([[-6., -0.],
                [-0.,  8.]])
    """
    G = check_matrix(G, "frobenius_lmo")
    r = check_radius(radius)
    A = upcast(G)
    nrm = torch.linalg.vector_norm(A, dim=(-2, -1), keepdim=True)
    return safe_div(A, nrm).mul_(-r).to(G.dtype)
