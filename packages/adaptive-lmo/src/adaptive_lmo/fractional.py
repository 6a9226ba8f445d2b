r"""The SGD-to-Muon family of updates :math:`U\,\mathrm{diag}(s^a)\,V^\top`, a in [0, 1].

For a direction :math:`G = U\,\mathrm{diag}(s)\,V^\top` (thin SVD), the member with exponent
``a`` is

.. math::

    \Phi_a(G) = U\,\mathrm{diag}(s^a)\,V^\top,

so :math:`\Phi_1(G) = G` (SGD) and :math:`\Phi_0(G) = UV^\top` (Muon's polar factor). Up to
scale, :math:`-\Phi_a(G)` is the LMO of the Schatten-:math:`p` ball with
:math:`p = (1 + a)/a` (dual exponent :math:`q = 1 + a`): Hölder's equality point of
:math:`\max_{\|D\|_{S_p} \le 1}\langle G, D\rangle` is :math:`d_i \propto s_i^{q-1} = s_i^a`.

Three scalings (``scale=``):

``"none"``
    :math:`\Phi_a(G)` itself: ``a = 1`` returns ``G`` unchanged (so the optimizer is exactly
    SGD) and ``a = 0`` the polar factor (exactly Muon).
``"polar"``
    :math:`\Phi_a(G)\cdot\sqrt{k}/\|s^a\|_2` with :math:`k` the number of non-zero singular
    values: every member has the Frobenius norm of the polar factor, so one learning rate
    serves every exponent and ``a = 0`` is still exactly Muon. ``a = 1`` (no SVD is taken) and
    the iterative route assume full rank, :math:`k = \min(m, n)`.
``"spectral"``
    :math:`\Phi_a(G)/\max_i s_i^a`: every member has the polar factor's spectral norm 1, so
    no member steps further than the polar factor in any direction; ``a = 0`` is exactly Muon.

Routes (``method=``):

``"auto"`` (the optimizer's default)
    ``a = 0`` without precomputed factors: five bfloat16 Newton-Schulz steps with Muon's
    quintic (:func:`shared_core.polar.msign`, table ``"muon"``), the routine and the cost of
    ``torch.optim.Muon``; float64 input goes to the exact SVD instead (bfloat16 would throw its
    precision away). Every other case is the ``"svd"`` route.
``"svd"``
    Exact; the factors can be returned for reuse by the criterion. Singular values at or
    below msign's numerical-rank cut-off ``max(m, n) * eps * s_max``
    (:func:`shared_core.polar.default_rtol`, :func:`shared_core.polar.significant`) map to 0
    for every ``a``, so a rank-``r`` direction gives a rank-``r`` step as ``msign`` does.
``"iterative"``
    Matmuls only, through :func:`shared_core.polar.spectral_power`; ``a = 0`` goes through
    msign's Newton-Schulz. The square-root iteration needs a full-rank, moderately conditioned
    direction; where it does not converge the SVD route is taken instead
    (:func:`fractional_update` reports it through ``fell_back``).

Example:
    >>> import torch
    >>> G = torch.randn(6, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    >>> torch.equal(fractional_update(G, 1.0, scale="none"), G)
    True
    >>> Q = fractional_update(G, 0.0)
    >>> torch.allclose(Q.T @ Q, torch.eye(4, dtype=torch.float64))
    True
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from shared_core.lmo import dual_exponent
from shared_core.polar import (
    coefficients_for,
    default_rtol,
    msign,
    newton_schulz_spectra,
    significant,
    spectral_power,
)

__all__ = [
    "METHODS",
    "SCALES",
    "SVDFactors",
    "check_exponent",
    "fractional_update",
    "lmo_direction",
    "ns_spectrum",
    "power_weights",
    "schatten_p",
    "svd_factors",
]

SCALES = ("none", "polar", "spectral")
METHODS = ("auto", "svd", "iterative")
#: torch.optim.Muon's polar routine: Muon's quintic, 5 steps, bfloat16.
NS_TABLE, NS_STEPS, NS_DTYPE = "muon", 5, torch.bfloat16


@dataclass(frozen=True)
class SVDFactors:
    """Thin SVD ``G = U diag(s) Vh`` (batched), in the compute dtype."""

    U: Tensor
    s: Tensor
    Vh: Tensor


def check_exponent(a: object, what: str = "exponent") -> float:
    """Return ``a`` as a float in [0, 1] or raise ``ValueError`` naming the bad value."""
    if isinstance(a, bool):
        raise ValueError(f"{what} must be a number in [0, 1], got {a!r}")
    try:
        af = float(a)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ValueError(f"{what} must be a number in [0, 1], got {a!r}") from None
    if not (math.isfinite(af) and 0.0 <= af <= 1.0):
        raise ValueError(f"{what} must be in [0, 1], got {a!r}")
    return af


def schatten_p(a: float) -> float:
    r"""The Schatten :math:`p = (1 + a)/a` whose LMO is :math:`\Phi_a` up to scale (inf at 0)."""
    # Hölder: Phi_a has dual exponent q = 1 + a, so p is q's conjugate (shared_core's rule)
    return dual_exponent(1.0 + check_exponent(a))


def _compute_dtype(G: Tensor) -> torch.dtype:
    return torch.float64 if G.dtype == torch.float64 else torch.float32


def svd_factors(G: Tensor) -> SVDFactors:
    """Thin SVD of ``G`` (``(..., m, n)``) in float32, or float64 for float64 input."""
    U, s, Vh = torch.linalg.svd(G.to(_compute_dtype(G)), full_matrices=False)
    return SVDFactors(U, s, Vh)


def power_weights(s: Tensor, a: float, scale: str, rtol: float = 0.0) -> Tensor:
    r"""The new singular values: :math:`s^a` (``"none"``) or :math:`s^a\sqrt{k}/\|s^a\|_2`.

    Singular values at or below ``rtol`` times the largest (the numerical zeros; ``rtol = 0``:
    exact zeros only) map to zero for every ``a``, also ``a = 0``, as in
    ``shared_core.polar.msign``; :func:`fractional_update` passes msign's own cut-off.
    """
    keep = significant(s, rtol)
    w = torch.where(keep, s.pow(a), 0.0)
    if scale == "spectral" and a != 0.0:
        top = w.amax(-1, keepdim=True)
        return w * torch.where(top > 0, 1.0 / top.clamp_min(torch.finfo(s.dtype).tiny), 0.0)
    if scale == "polar" and a != 0.0:
        k = keep.sum(-1, keepdim=True).to(s.dtype)
        nrm = torch.linalg.vector_norm(w, dim=-1, keepdim=True)
        w = w * torch.where(nrm > 0, k.sqrt() / nrm.clamp_min(torch.finfo(s.dtype).tiny), 0.0)
    return w


def fractional_update(
    G: Tensor,
    a: float,
    *,
    method: str = "svd",
    scale: str = "polar",
    factors: SVDFactors | None = None,
    check_finite: bool = True,
) -> Tensor:
    r"""The family member :math:`\Phi_a(G) = U\,\mathrm{diag}(s^a)\,V^\top`, scaled by ``scale``.

    Args:
        G: ``(..., m, n)`` floating tensor (leading dims are a batch, e.g. MoE experts).
        a: exponent in [0, 1]: 1 is ``G`` (SGD), 0 the polar factor (Muon).
        method: ``"auto"``, ``"svd"`` or ``"iterative"`` (module docstring).
        scale: ``"none"``, ``"polar"`` or ``"spectral"`` (module docstring).
        factors: a precomputed thin SVD of ``G`` to reuse (taken by every route).
        check_finite: raise on NaN/inf in ``G`` (a host sync; the optimizer checks all
            gradients of a step at once instead and passes False).

    Returns:
        Shaped like ``G``, in float32 (float64 for float64 input).

    Raises:
        ValueError: bad ``a``, ``method``, ``scale`` or shape; NaN/inf in ``G``.

    Example:
        >>> G = torch.diag(torch.tensor([4.0, 1.0]))
        >>> fractional_update(G, 0.5, scale="none")
        tensor([[2., 0.],
                [0., 1.]])
    """
    return lmo_direction(
        G, a, method=method, scale=scale, factors=factors, check_finite=check_finite
    )[0]


def _rescale(P: Tensor, scale: str, k: int) -> Tensor:
    """``P`` scaled to the polar factor's Frobenius norm sqrt(k) or spectral norm 1."""
    if scale == "polar":
        fro = torch.linalg.vector_norm(P, dim=(-2, -1), keepdim=True)
        return P * torch.where(fro > 0, math.sqrt(k) / fro.clamp_min(1e-300), 0.0)
    top = torch.linalg.matrix_norm(P, ord=2, keepdim=True)
    return P * torch.where(top > 0, 1.0 / top.clamp_min(1e-300), 0.0)


def lmo_direction(
    G: Tensor,
    a: float,
    *,
    method: str = "svd",
    scale: str = "polar",
    factors: SVDFactors | None = None,
    check_finite: bool = True,
) -> tuple[Tensor, bool]:
    """:func:`fractional_update`, and whether the iterative route fell back to the SVD."""
    a = check_exponent(a)
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; valid: {', '.join(METHODS)}")
    if scale not in SCALES:
        raise ValueError(f"unknown scale {scale!r}; valid: {', '.join(SCALES)}")
    if not isinstance(G, Tensor) or not G.is_floating_point() or G.ndim < 2:
        raise ValueError(f"G must be a floating tensor of shape (..., m, n), got {G!r:.60}")
    cd = _compute_dtype(G)
    X = G if G.dtype == cd else G.to(cd)
    if check_finite and factors is None and not bool(torch.isfinite(X).all()):
        raise ValueError("fractional_update got a non-finite direction (NaN or inf)")
    m, n = X.shape[-2:]
    if min(m, n) == 0:
        return torch.zeros_like(X), False
    if a == 1.0:
        if scale == "none":
            return X.clone(), False
        return _rescale(X, scale, min(m, n)), False
    if factors is None and a == 0.0 and method != "svd" and cd != torch.float64:
        # Muon's own routine (scale is moot at a = 0: every scale leaves U V^T as it is)
        Q = msign(X, NS_TABLE, steps=NS_STEPS, dtype=NS_DTYPE, check_finite=False)
        return (Q if Q.dtype == cd else Q.to(cd)), False
    fell_back = False
    if factors is None and method == "iterative":
        try:
            P = spectral_power(X, a, method="iterative", dtype=cd, check_finite=False)
        except ValueError:  # rank-deficient or too ill-conditioned: the exact route below
            fell_back = True
        else:
            if scale == "none":
                return P * torch.linalg.vector_norm(X, dim=(-2, -1), keepdim=True).pow(a), False
            return _rescale(P, scale, min(m, n)), False
    f = factors if factors is not None else svd_factors(X)
    w = power_weights(f.s, a, scale, rtol=default_rtol(m, n, f.s.dtype))
    return (f.U * w.unsqueeze(-2)) @ f.Vh, fell_back


def ns_spectrum(s: Tensor) -> Tensor:
    r"""The singular values torch Muon's routine (:data:`NS_TABLE`, :data:`NS_STEPS` steps)
    gives a direction with singular values ``s`` (``(..., r)``), in exact arithmetic.

    Newton-Schulz keeps the singular vectors and maps each singular value by the same odd
    polynomial: Frobenius normalisation, then :math:`x \mapsto ax + bx^3 + cx^5` per step.
    The exact polar factor has all ones here; small normalised values (a wide spectrum)
    stay far below 1, which is what the cost rule weighs (controller, ``exact_a0``). The
    bfloat16 rounding of the real routine is not modelled. float64.
    """
    return newton_schulz_spectra(s, coefficients_for(NS_TABLE, NS_STEPS))[..., -1]
