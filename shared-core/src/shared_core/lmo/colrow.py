r"""Column- and row-wise l2 norms (Scion's ColNorm / RowNorm), their duals and LMOs.

For :math:`G \in \mathbb{R}^{m \times n}` with columns :math:`g_j` and rows :math:`g^i`:

.. math::

    \mathrm{ColNorm}(G) = \max_j \|g_j\|_2 = \|G\|_{1 \to 2}, \qquad
    \mathrm{ColNorm}^*(G) = \textstyle\sum_j \|g_j\|_2,

    \operatorname{lmo}_{\mathrm{ColNorm}}(G, r)_{:, j} = -r\, g_j / \|g_j\|_2, \qquad
    \operatorname{lmo}_{\mathrm{ColNorm}^*}(G, r) = -r\, (g_k / \|g_k\|_2)\, e_k^\top,
    \ k = \operatorname*{argmax}_j \|g_j\|_2 .

The ColNorm ball is a product of l2 balls, one per column, so the LMO normalises each column on
its own, and :math:`\langle G, D\rangle = -r \sum_j \|g_j\|` gives the dual. The dual ball (sum of
column norms, the group-lasso norm) is the hull of single-column unit directions, so its LMO
puts the whole radius on the longest column. RowNorm (:math:`\|G\|_{2 \to \infty}`, the max
row norm) is the same with rows for columns. Zero columns (rows) get a zero step.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ._common import check_matrix, check_radius, safe_div, upcast

__all__ = [
    "colnorm",
    "colnorm_dual",
    "colnorm_dual_lmo",
    "colnorm_lmo",
    "rownorm",
    "rownorm_dual",
    "rownorm_dual_lmo",
    "rownorm_lmo",
]

# The axis each vector runs along: a column is G[..., :, j] (axis -2), a row G[..., i, :].
_COL, _ROW = -2, -1


def _group_norms(A: Tensor, axis: int) -> Tensor:
    return torch.linalg.vector_norm(A, dim=axis, keepdim=True)


def _max_norm(G: Tensor, axis: int, what: str) -> Tensor:
    G = check_matrix(G, what)
    if G.numel() == 0:
        return G.new_zeros(G.shape[:-2])
    return _group_norms(upcast(G), axis).amax(dim=(-2, -1)).to(G.dtype)


def _sum_norm(G: Tensor, axis: int, what: str) -> Tensor:
    G = check_matrix(G, what)
    return _group_norms(upcast(G), axis).sum(dim=(-2, -1)).to(G.dtype)


def _normalise_groups(G: Tensor, radius: float, axis: int, what: str) -> Tensor:
    G = check_matrix(G, what)
    r = check_radius(radius)
    A = upcast(G)
    return safe_div(A, _group_norms(A, axis)).mul_(-r).to(G.dtype)


def _longest_group(G: Tensor, radius: float, axis: int, what: str) -> Tensor:
    G = check_matrix(G, what)
    r = check_radius(radius)
    if G.numel() == 0:
        return torch.zeros_like(G)
    A = upcast(G)
    norms = _group_norms(A, axis)  # (..., 1, n) for columns, (..., m, 1) for rows
    other = _ROW if axis == _COL else _COL
    k = norms.argmax(dim=other, keepdim=True)
    # One-hot over the groups, then broadcast along each group's own axis.
    keep = torch.zeros_like(norms).scatter_(other, k, 1.0)
    return (safe_div(A, norms) * keep).mul_(-r).to(G.dtype)


def colnorm(G: Tensor) -> Tensor:
    r"""ColNorm :math:`\max_j \|g_j\|_2`, the largest column l2 norm, batched.

    Args:
        G: a tensor of shape ``(..., m, n)``.

    Returns:
        A tensor of shape ``(...)`` in ``G``'s dtype.

    Example:
        >>> colnorm(torch.tensor([[3.0, 1.0], [4.0, 0.0]]))
        tensor(5.)
    """
    return _max_norm(G, _COL, "colnorm")


def colnorm_dual(G: Tensor) -> Tensor:
    r"""The dual of ColNorm, :math:`\sum_j \|g_j\|_2` (sum of column l2 norms), batched.

    Example:
        >>> colnorm_dual(torch.tensor([[3.0, 1.0], [4.0, 0.0]]))
        tensor(6.)
    """
    return _sum_norm(G, _COL, "colnorm_dual")


def colnorm_lmo(G: Tensor, radius: float = 1.0) -> Tensor:
    r"""The ColNorm LMO: every column :math:`g_j` becomes :math:`-r\,g_j/\|g_j\|_2`.

    Args:
        G: the gradient, shape ``(..., m, n)``.
        radius: the radius :math:`r \ge 0` of the ColNorm ball.

    Returns:
        A tensor shaped and typed like ``G``.

    Example:
        >>> colnorm_lmo(torch.tensor([[3.0, 2.0], [4.0, 0.0]]))
        tensor([[-0.6000, -1.0000],
                [-0.8000, -0.0000]])
    """
    return _normalise_groups(G, radius, _COL, "colnorm_lmo")


def colnorm_dual_lmo(G: Tensor, radius: float = 1.0) -> Tensor:
    r"""The LMO of the sum of column norms: :math:`-r` times the longest column, normalised.

    Example:
        >>> colnorm_dual_lmo(torch.tensor([[3.0, 2.0], [4.0, 0.0]]))
        tensor([[-0.6000, -0.0000],
                [-0.8000, -0.0000]])
    """
    return _longest_group(G, radius, _COL, "colnorm_dual_lmo")


def rownorm(G: Tensor) -> Tensor:
    r"""RowNorm :math:`\max_i \|g^i\|_2`, the largest row l2 norm, batched.

    Example:
        >>> rownorm(torch.tensor([[3.0, 4.0], [1.0, 0.0]]))
        tensor(5.)
    """
    return _max_norm(G, _ROW, "rownorm")


def rownorm_dual(G: Tensor) -> Tensor:
    r"""The dual of RowNorm, :math:`\sum_i \|g^i\|_2` (sum of row l2 norms), batched.

    Example:
        >>> rownorm_dual(torch.tensor([[3.0, 4.0], [1.0, 0.0]]))
        tensor(6.)
    """
    return _sum_norm(G, _ROW, "rownorm_dual")


def rownorm_lmo(G: Tensor, radius: float = 1.0) -> Tensor:
    r"""The RowNorm LMO: every row :math:`g^i` becomes :math:`-r\,g^i/\|g^i\|_2`.

    Example:
        >>> rownorm_lmo(torch.tensor([[3.0, 4.0], [2.0, 0.0]]))
        tensor([[-0.6000, -0.8000],
                [-1.0000, -0.0000]])
    """
    return _normalise_groups(G, radius, _ROW, "rownorm_lmo")


def rownorm_dual_lmo(G: Tensor, radius: float = 1.0) -> Tensor:
    r"""The LMO of the sum of row norms: :math:`-r` times the longest row, normalised.

    Example:
        >>> rownorm_dual_lmo(torch.tensor([[3.0, 4.0], [2.0, 0.0]]))
        tensor([[-0.6000, -0.8000],
                [-0.0000, -0.0000]])
    """
    return _longest_group(G, radius, _ROW, "rownorm_dual_lmo")
