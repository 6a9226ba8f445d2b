r"""Schatten-p norms (the l_p norm of the singular values) and their LMOs.

With :math:`G = U \operatorname{diag}(s) V^\top` and :math:`1/p + 1/q = 1`,

.. math::

    \|G\|_{S_p} = \|s\|_p, \qquad \|G\|_{S_p}^* = \|G\|_{S_q},

    \operatorname{lmo}_{S_p}(G, r) = -r\, U \operatorname{diag}\!\Big(
        \frac{s^{q-1}}{\|s\|_q^{q-1}}\Big) V^\top .

Von Neumann's trace inequality reduces the problem to the singular values,
:math:`\langle G, D\rangle \ge -\sum_i s_i d_i`, and the vector l_p LMO on them is the
Hölder-equality point :math:`d = r\,s^{q-1}/\|s\|_q^{q-1}` (then :math:`\|d\|_p = r` because
:math:`(q-1)p = q`). The family runs from nuclear (:math:`p = 1`) through Frobenius (:math:`p = 2`)
to spectral (:math:`p = \infty`); those three ends dispatch to their own closed forms.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from ._common import check_matrix, check_radius, safe_div, upcast
from .frobenius import frobenius_lmo, frobenius_norm
from .nuclear import nuclear_lmo, nuclear_norm
from .spectral import spectral_lmo, spectral_norm

__all__ = ["check_p", "dual_exponent", "schatten_lmo", "schatten_norm"]


def check_p(p: object) -> float:
    """Return the exponent ``p`` as a float; raise unless ``1 <= p <= inf``."""
    try:
        value = float(p)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ValueError(f"p must be a number with 1 <= p <= inf, got {p!r}") from None
    if math.isnan(value) or value < 1:
        raise ValueError(f"p must be a number with 1 <= p <= inf, got {p!r}")
    return value


def dual_exponent(p: float) -> float:
    r"""The Hölder conjugate :math:`q = p/(p-1)` (``1 <-> inf``).

    Example:
        >>> dual_exponent(3.0), dual_exponent(1.0), dual_exponent(math.inf)
        (1.5, inf, 1.0)
    """
    p = check_p(p)
    if p == 1:
        return math.inf
    if math.isinf(p):
        return 1.0
    return p / (p - 1)


def schatten_norm(G: Tensor, p: float) -> Tensor:
    r"""The Schatten-p norm :math:`\|\sigma(G)\|_p`, batched.

    Args:
        G: a tensor of shape ``(..., m, n)``.
        p: the exponent, :math:`1 \le p \le \infty`.

    Returns:
        A tensor of shape ``(...)`` in ``G``'s dtype.

    Example:
        >>> schatten_norm(torch.tensor([[3.0, 0.0], [0.0, -4.0]]), 2)
        tensor(5.)
    """
    G = check_matrix(G, "schatten_norm")
    p = check_p(p)
    if p == 1:
        return nuclear_norm(G)
    if p == 2:
        return frobenius_norm(G)
    if math.isinf(p):
        return spectral_norm(G)
    if G.shape[-1] == 0 or G.shape[-2] == 0:
        return G.new_zeros(G.shape[:-2])
    s = torch.linalg.svdvals(upcast(G))
    # Factor out s_1 so that s**p cannot overflow for large p.
    top = s[..., :1]
    t = safe_div(s, top)
    return (top.squeeze(-1) * t.pow(p).sum(-1).pow(1 / p)).to(G.dtype)


def schatten_lmo(G: Tensor, p: float, radius: float = 1.0) -> Tensor:
    r"""The Schatten-p LMO :math:`-r\,U \operatorname{diag}(s^{q-1}/\|s\|_q^{q-1}) V^\top`.

    ``p = 1``, ``2`` and ``inf`` give :func:`nuclear_lmo` (exact SVD), :func:`frobenius_lmo` and
    :func:`spectral_lmo`. A zero matrix maps to zero.

    Args:
        G: the gradient, shape ``(..., m, n)``.
        p: the exponent, :math:`1 \le p \le \infty`.
        radius: the radius :math:`r \ge 0` of the Schatten-p ball.

    Returns:
        A tensor shaped and typed like ``G``.

    Example:
        >>> D = schatten_lmo(torch.tensor([[3.0, 0.0], [0.0, -4.0]]), p=3.0)
        >>> torch.allclose(schatten_norm(D, 3.0), torch.tensor(1.0))
        True
    """
    G = check_matrix(G, "schatten_lmo")
    p = check_p(p)
    r = check_radius(radius)
    if p == 1:
        return nuclear_lmo(G, r)
    if p == 2:
        return frobenius_lmo(G, r)
    if math.isinf(p):
        return spectral_lmo(G, r)
    if G.shape[-1] == 0 or G.shape[-2] == 0:
        return torch.zeros_like(G)
    q = dual_exponent(p)
    A = upcast(G)
    U, s, Vh = torch.linalg.svd(A, full_matrices=False)
    # (s/s_1)^(q-1) / ||s/s_1||_q^(q-1) equals the closed form and stays finite for any q:
    # near p = 1 the exponent q - 1 is huge and s^(q-1) alone would overflow.
    t = safe_div(s, s[..., :1])
    w = t.pow(q - 1)
    w = safe_div(w, torch.linalg.vector_norm(t, ord=q, dim=-1, keepdim=True).pow(q - 1))
    return ((U * w.unsqueeze(-2)) @ Vh).mul_(-r).to(G.dtype)
