r"""Entrywise norms of vectors and tensors: l-inf, l1, l2, and their LMOs.

Every function measures ``G`` over the axes ``dim`` (``None``: the whole tensor is one vector)
and treats the other axes as a batch of independent vectors.

.. math::

    \operatorname{lmo}_\infty(g, r) = -r \operatorname{sign}(g), \qquad
    \operatorname{lmo}_1(g, r) = -r \operatorname{sign}(g_k)\, e_k
    \ \ (k = \operatorname*{argmax}_i |g_i|), \qquad \operatorname{lmo}_2(g, r) = -r\, g / \|g\|_2 .

l-inf and l1 are each other's duals, l2 is its own. On the l-inf box every coordinate goes to
the end of its interval against the gradient; the l1 ball is the hull of :math:`\pm r e_i`, so
the best vertex carries the largest :math:`|g_i|`; on the l2 ball Cauchy-Schwarz is tight
against :math:`g`. The l-inf LMO runs through :func:`shared_core.kernels.sign_lmo`, a fused
Triton kernel on CUDA.
"""

from __future__ import annotations

import torch
from torch import Tensor

from shared_core.kernels import sign_lmo

from ._common import (
    Dim,
    check_radius,
    check_tensor,
    normalize_dim,
    safe_div,
    sign_keep_nan,
    upcast,
)

__all__ = ["l1_lmo", "l1_norm", "l2_lmo", "l2_norm", "linf_lmo", "linf_norm"]


def _vector_norm(G: Tensor, ord: float, dim: Dim, what: str) -> Tensor:
    G = check_tensor(G, what)
    dims = None if dim is None else normalize_dim(dim, G.ndim, what)
    return torch.linalg.vector_norm(upcast(G), ord=ord, dim=dims).to(G.dtype)


def linf_norm(G: Tensor, dim: Dim = None) -> Tensor:
    r"""The l-inf norm :math:`\max_i |g_i|` over ``dim``.

    Args:
        G: any floating tensor.
        dim: the axes measured (``None``: all).

    Returns:
        ``G`` reduced over ``dim``, in ``G``'s dtype.

    Example:
        >>> linf_norm(torch.tensor([[1.0, -3.0], [2.0, 0.5]]), dim=-1)
        tensor([3., 2.])
    """
    return _vector_norm(G, float("inf"), dim, "linf_norm")


def l1_norm(G: Tensor, dim: Dim = None) -> Tensor:
    r"""The l1 norm :math:`\sum_i |g_i|` over ``dim``.

    Example:
        >>> l1_norm(torch.tensor([[1.0, -3.0], [2.0, 0.5]]))
        tensor(6.5000)
    """
    return _vector_norm(G, 1.0, dim, "l1_norm")


def l2_norm(G: Tensor, dim: Dim = None) -> Tensor:
    r"""The l2 norm :math:`\sqrt{\sum_i g_i^2}` over ``dim``.

    Example:
        >>> l2_norm(torch.tensor([3.0, -4.0]))
        tensor(5.)
    """
    return _vector_norm(G, 2.0, dim, "l2_norm")


def linf_lmo(G: Tensor, radius: float = 1.0, dim: Dim = None) -> Tensor:
    r"""The l-inf LMO :math:`-r\,\operatorname{sign}(g)`; zeros stay zero and NaN stays NaN.

    ``dim`` does not change the result (the box is a product of intervals); it is accepted so
    that every entrywise LMO takes the same arguments.

    Args:
        G: the gradient, any shape.
        radius: the radius :math:`r \ge 0` of the l-inf ball.
        dim: the axes of each vector (checked, otherwise unused).

    Returns:
        A tensor shaped and typed like ``G``.

    Example:
        >>> linf_lmo(torch.tensor([2.0, -0.5, 0.0]), radius=0.1)
        tensor([-0.1000,  0.1000, -0.0000])
    """
    G = check_tensor(G, "linf_lmo")
    r = check_radius(radius)
    if dim is not None:
        normalize_dim(dim, G.ndim, "linf_lmo")
    return sign_lmo(G, r)


def l1_lmo(G: Tensor, radius: float = 1.0, dim: Dim = None) -> Tensor:
    r"""The l1 LMO: :math:`-r\,\operatorname{sign}(g_k)` at each vector's largest :math:`|g_k|`.

    Ties go to the first largest entry in row-major order; a zero vector maps to zero.

    Args:
        G: the gradient, any shape.
        radius: the radius :math:`r \ge 0` of the l1 ball.
        dim: the axes of each vector (``None``: the whole tensor is one vector).

    Returns:
        A tensor shaped and typed like ``G`` with one nonzero entry per vector.

    Example:
        >>> l1_lmo(torch.tensor([[1.0, -3.0], [2.0, 0.5]]), radius=2.0, dim=-1)
        tensor([[ 0.,  2.],
                [-2.,  0.]])
    """
    G = check_tensor(G, "l1_lmo")
    r = check_radius(radius)
    if G.numel() == 0:
        return torch.zeros_like(G)
    dims = normalize_dim(dim, G.ndim, "l1_lmo") if G.ndim else ()
    tail = tuple(range(G.ndim - len(dims), G.ndim))
    # Gather the measured axes at the end, flatten them, and pick one entry per vector.
    moved = torch.movedim(G, dims, tail)
    flat = moved.reshape(*moved.shape[: moved.ndim - len(dims)], -1)
    k = flat.abs().argmax(dim=-1, keepdim=True)
    picked = torch.gather(flat, -1, k)
    out = torch.zeros_like(flat).scatter_(-1, k, sign_keep_nan(picked).mul_(-r))
    return torch.movedim(out.reshape(moved.shape), tail, dims)


def l2_lmo(G: Tensor, radius: float = 1.0, dim: Dim = None) -> Tensor:
    r"""The l2 LMO :math:`-r\,g/\|g\|_2` of each vector; a zero vector maps to zero.

    Args:
        G: the gradient, any shape.
        radius: the radius :math:`r \ge 0` of the l2 ball.
        dim: the axes of each vector (``None``: the whole tensor is one vector).

    Returns:
        A tensor shaped and typed like ``G``.

    Example:
        >>> l2_lmo(torch.tensor([3.0, -4.0]), radius=10.0)
        tensor([-6.,  8.])
    """
    G = check_tensor(G, "l2_lmo")
    r = check_radius(radius)
    dims = None if dim is None else normalize_dim(dim, G.ndim, "l2_lmo")
    A = upcast(G)
    nrm = torch.linalg.vector_norm(A, dim=dims, keepdim=True)
    return safe_div(A, nrm).mul_(-r).to(G.dtype)
