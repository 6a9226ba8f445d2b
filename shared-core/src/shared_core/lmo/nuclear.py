r"""The nuclear norm (sum of singular values) and its LMO, a rank-one matrix.

.. math::

    \|G\|_* = \textstyle\sum_i s_i, \qquad \|G\|_{S_\infty} = s_1 \quad\text{(the dual)},

    \operatorname{lmo}(G, r) = \operatorname*{argmin}_{\|D\|_* \le r} \langle G, D\rangle
    = -r\, u_1 v_1^\top.

The nuclear ball is the convex hull of the rank-one matrices :math:`r\,a b^\top` with unit
:math:`a, b`, and a linear function is least at an extreme point; :math:`a^\top G b` is least,
at :math:`-s_1`, for :math:`a = -u_1, b = v_1`. This is the Frank-Wolfe oracle of low-rank
matrix completion: it needs only the top singular pair, which a few power iterations give far
more cheaply than a full SVD when the spectrum has a gap.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor

from ._common import check_matrix, check_radius, safe_div, upcast

__all__ = ["NuclearMethod", "nuclear_lmo", "nuclear_norm", "top_singular_pair"]

NuclearMethod = Literal["svd", "power"]


def nuclear_norm(G: Tensor) -> Tensor:
    r"""The nuclear (trace) norm :math:`\|G\|_* = \sum_i \sigma_i(G)`, batched.

    Args:
        G: a tensor of shape ``(..., m, n)``.

    Returns:
        A tensor of shape ``(...)`` in ``G``'s dtype.

    Example:
        >>> nuclear_norm(torch.tensor([[3.0, 0.0], [0.0, -4.0]]))
        tensor(7.)
    """
    G = check_matrix(G, "nuclear_norm")
    if G.shape[-1] == 0 or G.shape[-2] == 0:
        return G.new_zeros(G.shape[:-2])
    return torch.linalg.svdvals(upcast(G)).sum(-1).to(G.dtype)


def _unit(x: Tensor) -> Tensor:
    return safe_div(x, torch.linalg.vector_norm(x, dim=-1, keepdim=True))


def _check_method(method: str, power_iters: int) -> None:
    if method not in ("svd", "power"):
        raise ValueError(f"method must be 'svd' or 'power', got {method!r}")
    if isinstance(power_iters, bool) or not isinstance(power_iters, int) or power_iters < 1:
        raise ValueError(f"power_iters must be an int >= 1, got {power_iters!r}")


def top_singular_pair(
    G: Tensor,
    *,
    method: NuclearMethod = "svd",
    power_iters: int = 10,
    seed: int = 0,
    v0: Tensor | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    r"""The top singular triple :math:`(u_1, \sigma_1, v_1)` of every matrix in ``G``.

    ``method="power"`` runs ``power_iters`` steps of :math:`v \leftarrow G^\top G v /
    \|G^\top G v\|` from ``v0`` or, without one, from one Gaussian vector drawn with ``seed``
    (in float64 on the CPU, shared by the whole batch, so the start is the same on every
    device, in every dtype and whatever else is in the batch). The error of :math:`v` shrinks like
    :math:`(\sigma_2/\sigma_1)^{2k}` after :math:`k` steps. A zero matrix gives zero vectors.

    Args:
        G: a tensor of shape ``(..., m, n)``.
        method: ``"svd"`` (exact) or ``"power"``.
        power_iters: power-iteration steps (``method="power"`` only).
        seed: seed of the starting vector (``method="power"`` without ``v0``).
        v0: a warm start of shape ``(..., n)``, for example the previous step's ``v``.

    Returns:
        ``(u, sigma, v)`` of shapes ``(..., m)``, ``(...)``, ``(..., n)`` in ``G``'s dtype, with
        :math:`G v = \sigma u`.

    Example:
        >>> u, s, v = top_singular_pair(torch.tensor([[0.0, 2.0], [1.0, 0.0]]), method="power")
        >>> s, u.abs().round(decimals=4), v.abs().round(decimals=4)
        (tensor(2.), tensor([1., 0.]), tensor([0., 1.]))
    """
    G = check_matrix(G, "top_singular_pair")
    _check_method(method, power_iters)
    A = upcast(G)
    m, n = A.shape[-2:]
    if m == 0 or n == 0:
        batch = A.shape[:-2]
        return G.new_zeros(*batch, m), G.new_zeros(batch), G.new_zeros(*batch, n)
    if method == "svd":
        U, s, Vh = torch.linalg.svd(A, full_matrices=False)
        sigma = s[..., 0]
        # The SVD of a zero matrix still returns unit vectors; the pair must be zero there.
        nonzero = (sigma != 0).to(A.dtype).unsqueeze(-1)
        u, v = U[..., :, 0] * nonzero, Vh[..., 0, :] * nonzero
    else:
        if v0 is None:
            # One start for every matrix of the batch, drawn in float64: a matrix's result then
            # depends neither on the other matrices in its batch nor on the dtype.
            gen = torch.Generator().manual_seed(seed)
            start = torch.randn(n, generator=gen, dtype=torch.float64)
            v = start.to(device=A.device, dtype=A.dtype).expand(*A.shape[:-2], n)
        else:
            if v0.shape != (*A.shape[:-2], n):
                raise ValueError(
                    f"v0 must have shape {(*A.shape[:-2], n)} for G of shape "
                    f"{tuple(G.shape)}, got {tuple(v0.shape)}"
                )
            v = v0.to(device=A.device, dtype=A.dtype)
        v = _unit(v)
        for _ in range(power_iters):
            u = _unit((A @ v.unsqueeze(-1)).squeeze(-1))
            v = _unit((A.mT @ u.unsqueeze(-1)).squeeze(-1))
        Av = (A @ v.unsqueeze(-1)).squeeze(-1)
        sigma = torch.linalg.vector_norm(Av, dim=-1)
        u = safe_div(Av, sigma.unsqueeze(-1))
    return u.to(G.dtype), sigma.to(G.dtype), v.to(G.dtype)


def nuclear_lmo(
    G: Tensor,
    radius: float = 1.0,
    *,
    method: NuclearMethod = "svd",
    power_iters: int = 10,
    seed: int = 0,
) -> Tensor:
    r"""The nuclear-norm LMO :math:`-r\,u_1 v_1^\top`, batched.

    Args:
        G: the gradient, shape ``(..., m, n)``.
        radius: the radius :math:`r \ge 0` of the nuclear-norm ball.
        method: ``"svd"`` (exact) or ``"power"`` (see :func:`top_singular_pair`).
        power_iters: power-iteration steps for ``method="power"``.
        seed: seed of the power method's starting vector.

    Returns:
        A rank-one (or zero) tensor shaped and typed like ``G``.

    Example:
        >>> nuclear_lmo(torch.tensor([[3.0, 0.0], [0.0, -1.0]]), radius=2.0).abs()
        tensor([[2., 0.],
                [0., 0.]])
    """
    G = check_matrix(G, "nuclear_lmo")
    r = check_radius(radius)
    u, _, v = top_singular_pair(upcast(G), method=method, power_iters=power_iters, seed=seed)
    return (u.unsqueeze(-1) * v.unsqueeze(-2)).mul_(-r).to(G.dtype)
