r"""The surrogate objective on factors :math:`X = L R^\top` and its gradient, without dense X.

.. math::

    f_\varepsilon(L, R) = \tfrac12\sum_{(i,j)\in\Omega}(X_{ij} - b_{ij})^2
      + \tfrac{\varepsilon^2}2\sum_{(i,j)\notin\Omega}\xi_{ij}^2 X_{ij}^2
    = \tfrac12\|\mathcal A_\varepsilon(L R^\top) - b\|^2 .

With :math:`G = \nabla_X f = \mathcal P_\Omega(X - B) + \varepsilon^2\,\Xi^2\odot
\mathcal P_{\Omega^c}(X)`, the chain rule gives :math:`\nabla_L f = G R` and
:math:`\nabla_R f = G^\top L`. For uniform weights (ξ = 1) the unobserved part is a
low-rank correction of a sparse matrix,

.. math::

    G = S + \varepsilon^2 X,\quad S = \mathcal P_\Omega\big((1-\varepsilon^2) X - B\big),
    \qquad \nabla_L f = S R + \varepsilon^2 L (R^\top R),\quad
    \nabla_R f = S^\top L + \varepsilon^2 R (L^\top L),

and :math:`\sum_{\Omega^c} X_{ij}^2 = \langle L^\top L, R^\top R\rangle - \sum_\Omega X_{ij}^2`,
so value and gradient cost O(|Ω| k + (m+n) k^2) time and O((m+n) k + |Ω|) memory.
``eps=0`` is the plain completion loss. Dense weights (``xi``) take an O(mn) path.

Example:
    >>> import torch
    >>> from eps_completion.problem import observe
    >>> g = torch.Generator().manual_seed(0)
    >>> M = torch.randn(5, 4, generator=g, dtype=torch.float64)
    >>> obs = observe(M, torch.rand(5, 4, generator=g) < 0.7, allow_empty_lines=True)
    >>> L = torch.randn(5, 2, generator=g, dtype=torch.float64)
    >>> R = torch.randn(4, 2, generator=g, dtype=torch.float64)
    >>> f, gL, gR = value_and_grad(L, R, obs, 0.1)
    >>> gL.shape, gR.shape
    (torch.Size([5, 2]), torch.Size([4, 2]))
"""

from __future__ import annotations

import torch
from torch import Tensor

from .problem import Observations

__all__ = [
    "bilinear",
    "entries",
    "line_quartic",
    "quadratic_form",
    "sparse_times",
    "value_and_grad",
]


def entries(L: Tensor, R: Tensor, rows: Tensor, cols: Tensor) -> Tensor:
    """The entries :math:`(L R^\\top)_{ij}` at ``(rows, cols)``, O(|Ω| k)."""
    return (L[rows] * R[cols]).sum(-1)


def sparse_times(
    s: Tensor, rows: Tensor, cols: Tensor, right: Tensor, n_out: int, transpose: bool = False
) -> Tensor:
    """``S @ right`` (or ``S^T @ right``) for the sparse ``S`` with values ``s`` at (rows, cols)."""
    src, dst = (rows, cols) if transpose else (cols, rows)
    out = torch.zeros(n_out, right.shape[-1], dtype=right.dtype, device=right.device)
    return out.index_add_(0, dst, s.unsqueeze(-1) * right[src])


def _dense_weights_sq(obs: Observations, eps: float, xi: Tensor) -> Tensor:
    w2 = (eps * xi) ** 2
    w2[obs.rows, obs.cols] = 1.0
    return w2


def value_and_grad(
    L: Tensor, R: Tensor, obs: Observations, eps: float, xi: Tensor | None = None
) -> tuple[Tensor, Tensor, Tensor]:
    """Surrogate value :math:`f_\\varepsilon(L, R)` and its gradients ``(dL, dR)``.

    Args:
        L: ``(m, k)`` left factor.
        R: ``(n, k)`` right factor.
        obs: observed entries.
        eps: ε ≥ 0 (0: the plain completion loss).
        xi: optional dense ``(m, n)`` weights ξ (read on Ω^c only); None means ξ = 1.

    Returns:
        ``(f, dL, dR)``, ``f`` a 0-d tensor.
    """
    rows, cols, b = obs.rows, obs.cols, obs.values
    m, n = obs.shape
    if xi is not None:
        x = L @ R.mT
        w2 = _dense_weights_sq(obs, eps, xi.to(x.dtype))
        g = w2 * x
        g[rows, cols] -= b
        resid = x[rows, cols] - b
        f = 0.5 * (resid.pow(2).sum() + (w2 * x * x).sum() - x[rows, cols].pow(2).sum())
        return f, g @ R, g.mT @ L
    x_om = entries(L, R, rows, cols)
    resid = x_om - b
    e2 = eps * eps
    gram_l, gram_r = L.mT @ L, R.mT @ R
    unobs_sq = (gram_l * gram_r).sum() - x_om.pow(2).sum()
    f = 0.5 * resid.pow(2).sum() + 0.5 * e2 * unobs_sq
    s = resid - e2 * x_om
    d_l = sparse_times(s, rows, cols, R, m)
    d_r = sparse_times(s, rows, cols, L, n, transpose=True)
    if e2 != 0.0:
        d_l = d_l + e2 * (L @ gram_r)
        d_r = d_r + e2 * (R @ gram_l)
    return f, d_l, d_r


def quadratic_form(
    L: Tensor, R: Tensor, obs: Observations, eps: float, xi: Tensor | None = None
) -> Tensor:
    """:math:`\\|\\mathcal A_\\varepsilon(L R^\\top)\\|^2`: curvature along L R^T."""
    if xi is not None:
        z = L @ R.mT
        return (_dense_weights_sq(obs, eps, xi.to(z.dtype)) * z * z).sum()
    z_om = entries(L, R, obs.rows, obs.cols)
    on = z_om.pow(2).sum()
    total = ((L.mT @ L) * (R.mT @ R)).sum()
    return on + eps * eps * (total - on)


def bilinear(
    L1: Tensor,
    R1: Tensor,
    L2: Tensor,
    R2: Tensor,
    obs: Observations,
    eps: float,
    xi: Tensor | None = None,
) -> Tensor:
    """The inner product of :math:`\\mathcal A_\\varepsilon(L_1R_1^\\top)` and
    :math:`\\mathcal A_\\varepsilon(L_2R_2^\\top)`, without dense matrices (uniform weights)."""
    if xi is not None:
        z1, z2 = L1 @ R1.mT, L2 @ R2.mT
        return (_dense_weights_sq(obs, eps, xi.to(z1.dtype)) * z1 * z2).sum()
    on = (entries(L1, R1, obs.rows, obs.cols) * entries(L2, R2, obs.rows, obs.cols)).sum()
    total = ((L1.mT @ L2) * (R1.mT @ R2)).sum()
    return on + eps * eps * (total - on)


def line_quartic(
    L: Tensor,
    R: Tensor,
    dL: Tensor,
    dR: Tensor,
    obs: Observations,
    eps: float,
    xi: Tensor | None = None,
) -> list[float]:
    r"""Coefficients ``[c1, c2, c3, c4]`` of :math:`f(t) - f(0) = \sum_p c_p t^p` along
    :math:`(L + t\,dL)(R + t\,dR)^\top`.

    :math:`X(t) = X_0 + t X_1 + t^2 X_2` with :math:`X_0 = LR^\top`,
    :math:`X_1 = dL\,R^\top + L\,dR^\top`, :math:`X_2 = dL\,dR^\top`; with
    :math:`P_{ij} = \langle\mathcal A X_i, \mathcal A X_j\rangle` and
    :math:`q_i = \langle \mathcal A X_i, b\rangle`:
    :math:`c_1 = P_{01} - q_1`, :math:`c_2 = \tfrac12 P_{11} + P_{02} - q_2`,
    :math:`c_3 = P_{12}`, :math:`c_4 = \tfrac12 P_{22}`.
    """
    if xi is None:
        return _line_quartic_uniform(L, R, dL, dR, obs, eps)
    l1, r1 = torch.cat([dL, L], 1), torch.cat([R, dR], 1)

    def q(lf: Tensor, rf: Tensor) -> Tensor:
        return (entries(lf, rf, obs.rows, obs.cols) * obs.values).sum()

    p01 = bilinear(L, R, l1, r1, obs, eps, xi)
    p02 = bilinear(L, R, dL, dR, obs, eps, xi)
    p11 = bilinear(l1, r1, l1, r1, obs, eps, xi)
    p12 = bilinear(l1, r1, dL, dR, obs, eps, xi)
    p22 = bilinear(dL, dR, dL, dR, obs, eps, xi)
    c1 = p01 - q(l1, r1)
    c2 = 0.5 * p11 + p02 - q(dL, dR)
    return [float(c1), float(c2), float(p12), float(0.5 * p22)]


def _line_quartic_uniform(
    L: Tensor, R: Tensor, dL: Tensor, dR: Tensor, obs: Observations, eps: float
) -> list[float]:
    """:func:`line_quartic` for ξ = 1 with three gathers on Ω and k x k Gram matrices.

    :math:`P_{ij} = \\langle X_i, X_j\\rangle_\\Omega + \\varepsilon^2(\\langle X_i, X_j\\rangle_F
    - \\langle X_i, X_j\\rangle_\\Omega)`, the Frobenius parts from
    :math:`\\langle AB^\\top, CD^\\top\\rangle = \\sum (A^\\top C)\\odot(B^\\top D)`.
    """
    rows, cols, b = obs.rows, obs.cols, obs.values
    e0 = entries(L, R, rows, cols)
    e1 = entries(dL, R, rows, cols) + entries(L, dR, rows, cols)
    e2 = entries(dL, dR, rows, cols)
    ll, ldl, dldl = L.mT @ L, L.mT @ dL, dL.mT @ dL
    rr, rdr, drdr = R.mT @ R, R.mT @ dR, dR.mT @ dR
    f01 = (ldl * rr).sum() + (ll * rdr).sum()
    f02 = (ldl * rdr).sum()
    f11 = (dldl * rr).sum() + 2 * (ldl.mT * rdr).sum() + (ll * drdr).sum()
    f12 = (dldl * rdr).sum() + (ldl * drdr).sum()
    f22 = (dldl * drdr).sum()
    e2s = eps * eps

    def p(on: Tensor, full: Tensor) -> Tensor:
        return on + e2s * (full - on)

    p01 = p((e0 * e1).sum(), f01)
    p02 = p((e0 * e2).sum(), f02)
    p11 = p((e1 * e1).sum(), f11)
    p12 = p((e1 * e2).sum(), f12)
    p22 = p((e2 * e2).sum(), f22)
    c1 = p01 - (e1 * b).sum()
    c2 = 0.5 * p11 + p02 - (e2 * b).sum()
    return [float(c1), float(c2), float(p12), float(0.5 * p22)]
