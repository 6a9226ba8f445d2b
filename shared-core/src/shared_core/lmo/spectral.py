r"""The spectral norm (largest singular value) and its LMO, the scaled polar factor.

With the reduced SVD :math:`G = U \operatorname{diag}(s) V^\top`,

.. math::

    \|G\|_{S_\infty} = s_1, \qquad \|G\|_* = \textstyle\sum_i s_i \quad\text{(the dual)},

    \operatorname{lmo}(G, r) = \operatorname*{argmin}_{\|D\|_{S_\infty} \le r} \langle G, D\rangle
    = -r\, U V^\top,

because :math:`\langle G, D\rangle = \sum_i s_i\, u_i^\top D v_i \ge -r \sum_i s_i` whenever
every singular value of :math:`D` is at most :math:`r`, with equality at :math:`D = -r U V^\top`.
This is the update direction of Muon-style optimizers.

Singular values that are zero up to rounding get weight 0, the matrix-sign convention
(:math:`\operatorname{sign}(0) = 0`): a rank-deficient ``G`` gets the polar factor of its range
only, and a zero ``G`` gets a zero step. Both choices are minimisers.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from ._common import check_matrix, check_radius, upcast

__all__ = ["PolarFn", "polar_svd", "spectral_lmo", "spectral_norm"]

#: ``polar_fn(G) -> Q``: the polar factor of every matrix of a ``(..., m, n)`` batch.
PolarFn = Callable[[Tensor], Tensor]


def _is_empty(G: Tensor) -> bool:
    return G.shape[-1] == 0 or G.shape[-2] == 0


def spectral_norm(G: Tensor) -> Tensor:
    r"""The spectral norm :math:`\|G\|_{S_\infty} = \sigma_{\max}(G)`, batched.

    Args:
        G: a tensor of shape ``(..., m, n)``.

    Returns:
        A tensor of shape ``(...)`` in ``G``'s dtype.

    Example:
        >>> spectral_norm(torch.tensor([[3.0, 0.0], [0.0, -4.0]]))
        tensor(4.)
    """
    G = check_matrix(G, "spectral_norm")
    if _is_empty(G):
        return G.new_zeros(G.shape[:-2])
    return torch.linalg.svdvals(upcast(G))[..., 0].to(G.dtype)


def polar_svd(G: Tensor) -> Tensor:
    r"""The polar factor :math:`U V^\top` of every matrix in ``G`` by an exact SVD.

    Singular values at or below :math:`\max(m, n)\,\varepsilon\,\sigma_1` (the usual numerical
    rank cut) are mapped to 0, so a zero matrix maps to zero.

    Args:
        G: a tensor of shape ``(..., m, n)``; half precisions are computed in float32.

    Returns:
        A tensor shaped and typed like ``G``.

    Example:
        >>> polar_svd(torch.tensor([[2.0, 0.0], [0.0, -0.5]]))
        tensor([[ 1.,  0.],
                [ 0., -1.]])
    """
    G = check_matrix(G, "polar_svd")
    if _is_empty(G):
        return torch.zeros_like(G)
    A = upcast(G)
    U, s, Vh = torch.linalg.svd(A, full_matrices=False)
    tol = s[..., :1] * (max(A.shape[-2:]) * torch.finfo(A.dtype).eps)
    # `s <= tol` is False for NaN, so NaN singular values keep weight 1 and stay visible.
    w = torch.where(s <= tol, 0.0, 1.0).to(A.dtype)
    return ((U * w.unsqueeze(-2)) @ Vh).to(G.dtype)


def spectral_lmo(G: Tensor, radius: float = 1.0, *, polar_fn: PolarFn | None = None) -> Tensor:
    r"""The spectral-norm LMO :math:`-r\,U V^\top`, batched.

    Args:
        G: the gradient, shape ``(..., m, n)``.
        radius: the radius :math:`r \ge 0` of the spectral-norm ball.
        polar_fn: computes the polar factor of a ``(..., m, n)`` batch (for example a
            Newton-Schulz iteration); the default is the exact :func:`polar_svd`. It receives
            ``G`` unchanged (its own dtype) and its result is cast to ``G``'s dtype. Matrices
            that are exactly zero get a zero step whatever ``polar_fn`` returns for them.

    Returns:
        The minimiser of :math:`\langle G, D\rangle` over :math:`\|D\|_{S_\infty} \le r`, shaped
        and typed like ``G``.

    Example:
        >>> spectral_lmo(torch.tensor([[3.0, 0.0], [0.0, -1.0]]), radius=0.5)
        tensor([[-0.5000, -0.0000],
                [-0.0000,  0.5000]])
    """
    G = check_matrix(G, "spectral_lmo")
    r = check_radius(radius)
    if polar_fn is None:
        return polar_svd(G).mul_(-r)
    Q = polar_fn(G)
    if not isinstance(Q, Tensor) or Q.shape != G.shape:
        got = tuple(Q.shape) if isinstance(Q, Tensor) else type(Q).__name__
        raise ValueError(f"polar_fn must return a tensor of shape {tuple(G.shape)}, got {got}")
    Q = Q.to(G.dtype)
    if _is_empty(G):
        return Q * -r
    # A polar factor of 0 is undefined and iterative methods may return noise there, so the
    # zero-matrix case is pinned to the minimiser 0 here, whatever polar_fn did.
    zero = (G == 0).all(dim=-1, keepdim=True).all(dim=-2, keepdim=True)
    return torch.where(zero, torch.zeros_like(Q), Q).mul_(-r)
