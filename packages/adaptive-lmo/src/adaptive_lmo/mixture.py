r"""Fractional members between criterion steps without an SVD: weighted Newton-Schulz iterates.

A layer whose criterion chose ``0 < a < 1`` needs :math:`\Phi_a(P) = U\,\mathrm{diag}(w(s))\,V^\top`
(:mod:`adaptive_lmo.fractional`) on every step, and an SVD per step costs 5-8x torch Muon's
Newton-Schulz on a CPU (docs/overhead.md). Newton-Schulz keeps the singular vectors and maps
the normalised singular values :math:`\hat s = s/\|s\|_2` through odd polynomials, so its
iterates :math:`X_0 = P/\|P\|_F, X_1, \dots, X_K` are :math:`U f_k(\hat s) V^\top`
(:func:`shared_core.polar.newton_schulz_spectra`), and any weighted sum of them is the
spectral function :math:`\sum_k c_k f_k(\hat s)`
(:func:`shared_core.polar.newton_schulz_combination`). The iterates run from the scaled
input (a = 1) to the polar factor (a = 0), so a few weights fit the intermediate members.

On a criterion step, where the exact factors exist anyway, :func:`fit_weights` solves the
ridge least-squares problem

.. math::

    \min_c \ \Big\|\sum_k c_k f_k(\hat s) - t\Big\|_2^2
        + \sum_k \delta_k^2 \|f_k(\hat s)\|_2^2\, c_k^2,
    \qquad \delta_k = (k + 1)\,u_{\text{bf16}},

subject to :math:`c_k \ge 0`, with :math:`t` the exact member's singular values (its
``scale`` folded in). The ridge is the rounding model of the bfloat16 iterates (each carries
a relative error of order :math:`(k+1)u`, :math:`u = 2^{-8}`): without it the weights of the
nearly collinear late iterates grow to hundreds and amplify that rounding. The sign
constraint is for the steps between criterion steps, where the weights are held while the
spectrum drifts. Muon's quintic :math:`p(x) = x(3.4445 - 4.775x^2 + 2.0315x^4)` has no real
root but 0 (the quadratic in :math:`x^2` has a negative discriminant), so every iterate maps
every positive singular value to a positive one, bounded by the iteration's range; with
non-negative weights the fitted map stays positive and bounded at **any** spectrum, so a
drifted spectrum cannot flip a direction or blow one up. Unconstrained weights fitted at one
spectrum's points could: on teacher-student's layer A (criterion every 10 steps) they
departed from the member by up to 65% of its norm a few steps later, against at most 13%
with the constraint (docs/mixture.md); the fit itself loses little (the target lies between
the first iterate, :math:`a = 1`, and the saturated ones, :math:`a \to 0`).

Whether the fitted sum may stand in for the SVD until the next criterion step is decided by
the controller from the surrogate's decrease of the **realised** bfloat16 combination
against the exact member's (:func:`realised_decrease`): it stands when it loses less than
``min_gain`` (the price the cost rule puts on an SVD per step). Between criterion steps the
weights are held while the spectrum drifts; the next criterion step refits and re-checks
them.

Example:
    >>> import torch
    >>> g = torch.Generator().manual_seed(0)
    >>> P = torch.randn(40, 30, dtype=torch.float64, generator=g)
    >>> U, s, Vh = torch.linalg.svd(P, full_matrices=False)
    >>> c = fit_weights(s, 0.5, "none")
    >>> exact = (U * (s / s.norm()).sqrt()) @ Vh * P.norm().sqrt()
    >>> approx = mixed_member(P, c, 0.5, "none")
    >>> bool((approx - exact).norm() / exact.norm() < 0.05)
    True
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor

from shared_core.polar import checked_table, newton_schulz_combination, newton_schulz_spectra

from .criterion import weighted_decrease
from .fractional import NS_DTYPE, NS_STEPS, NS_TABLE, power_weights

__all__ = [
    "MIXTURE_STEPS",
    "fit_weights",
    "mixed_member",
    "mixture_loss",
    "polar_norm",
    "preload",
    "realised_decrease",
    "target_spectrum",
]

#: bfloat16's unit roundoff (8 significand bits): the per-iterate rounding scale of the ridge.
BF16_U = 2.0**-8


#: Newton-Schulz step counts a mixture may use, cheapest first (the controller takes the first
#: whose realised combination passes its test). Only torch Muon's five by default: three- and
#: four-step mixtures pass the test on the criterion step's spectrum and are cheaper (1.04x and
#: 1.19x torch Muon's Newton-Schulz at 256², against 1.27x), but their weights do not survive
#: the spectrum's drift between criterion steps: on teacher-student's layer A (criterion every
#: 10 steps) their realised error against the exact member reached 50-190% (five steps: at
#: most 13%), and the layer's test MSE rose from 1.20 to 1.21-1.26 (docs/mixture.md). With
#: the non-negative fit the three-step error stays bounded (30-37%) but too coarse (1.14-1.24).
MIXTURE_STEPS: tuple[int, ...] = (NS_STEPS,)


def _coefficients(steps: int = NS_STEPS) -> tuple[tuple[float, ...], ...]:
    """The first ``steps`` quintics of torch Muon's table (its prefix: the same iterates),
    checked once and cached by shared-core (a per-step call on the mixture's route)."""
    if not (type(steps) is int and 1 <= steps <= NS_STEPS):
        raise ValueError(f"a mixture takes 1 to {NS_STEPS} Newton-Schulz steps, got {steps}")
    return checked_table(NS_TABLE, steps)


def target_spectrum(s: Tensor, a: float, scale: str, rtol: float) -> Tensor:
    r"""The exact member's singular values on the normalised spectrum, float64.

    ``"polar"`` and ``"spectral"`` members are scale-free maps of ``s``
    (:func:`adaptive_lmo.fractional.power_weights`); ``"none"`` is :math:`\hat s^a`, the
    remaining factor :math:`\|P\|_F^a` is applied by :func:`mixed_member` on each step.
    Singular values at or below ``rtol`` times the largest map to 0 (msign's rank cut-off,
    :func:`shared_core.polar.default_rtol`), as in the exact member.
    """
    s64 = s.to(torch.float64)
    if scale == "none":
        keep = s64 > rtol * s64.amax(-1, keepdim=True)
        shat = s64 / torch.linalg.vector_norm(s64, dim=-1, keepdim=True).clamp_min(1e-300)
        return torch.where(keep, shat.pow(a), 0.0)
    return power_weights(s64, a, scale, rtol=rtol)


def fit_weights(
    s: Tensor, a: float, scale: str, rtol: float = 0.0, steps: int = NS_STEPS
) -> Tensor:
    """Non-negative ridge weights of the Newton-Schulz iterates for the member ``a``
    (module docstring).

    Args:
        s: ``(..., r)`` singular values of the direction (a batch gets one row of weights
            per matrix).
        a: the exponent, in (0, 1).
        scale: ``"none"``, ``"polar"`` or ``"spectral"``.
        rtol: the rank cut-off of :func:`target_spectrum`.
        steps: ``K``, the Newton-Schulz steps combined (the first ``K`` of torch Muon's
            table).

    Returns:
        ``(..., K + 1)`` float64 weights for
        :func:`shared_core.polar.newton_schulz_combination` with those steps.
    """
    B = newton_schulz_spectra(s, _coefficients(steps))  # (..., r, K+1)
    t = target_spectrum(s, a, scale, rtol)
    k1 = B.shape[-1]
    delta = BF16_U * torch.arange(1, k1 + 1, dtype=torch.float64, device=B.device)
    ridge = delta * torch.linalg.vector_norm(B, dim=-2)  # (..., K+1)
    # the ridge as extra rows, [B; diag(ridge)] w ~ [t; 0], solved with w >= 0 (SciPy)
    rows = torch.cat([B, torch.diag_embed(ridge)], dim=-2).cpu().reshape(-1, B.shape[-2] + k1, k1)
    rhs = torch.cat([t, torch.zeros_like(ridge)], dim=-1).cpu().reshape(-1, B.shape[-2] + k1)
    nnls = _nnls()
    w = [torch.from_numpy(nnls(A.numpy(), b.numpy())[0]) for A, b in zip(rows, rhs, strict=True)]
    return torch.stack(w).reshape(*B.shape[:-2], k1).to(B.device)


def _nnls():
    """``scipy.optimize.nnls``, imported once (~0.4-0.8 s: :func:`preload` at construction)."""
    from scipy.optimize import nnls

    return nnls


def preload() -> None:
    """Import what :func:`fit_weights` needs now instead of inside a training step."""
    _nnls()


def mixed_member(
    X: Tensor,
    weights: Tensor | Sequence[float],
    a: float,
    scale: str,
    frobenius: float | None = None,
) -> Tensor:
    """The fitted member of ``X`` (``(..., m, n)``): bfloat16 iterates, summed in float32.

    ``weights``: :func:`fit_weights`'s, as a tensor (one row per matrix of a batch) or, for
    one matrix, as Python floats (the optimizer keeps them so: no device read per step).
    ``frobenius``: rescale each matrix to this Frobenius norm (``scale="polar"``: the exact
    member's ``sqrt(k)``). The weights fold the member's scale in for the spectrum they were
    fitted on; when the spectrum drifts between criterion steps the sum's norm drifts with
    it (measured up to 24% on teacher-student's layer A, whose shape error stayed <= 6%), so
    the polar scale is restored on every step (one norm, no device read).

    The number of weights fixes the steps: ``K + 1`` weights combine the iterates of the
    first ``K`` steps of torch Muon's table. Costs ``K`` of its Newton-Schulz steps plus
    ``K + 1`` scaled additions (and one norm for ``scale="none"``). Returns float32 (float64
    for float64 input, iterated in float64). Summing in bfloat16 instead was measured at
    1.29x against 1.32x torch Muon's Newton-Schulz at 256² (1.19x against 1.23x at 512²; a
    bfloat16 addition is no faster than a float32 one on the CPU): a few percent of one
    layer's polar step, not worth rounding every addition, so the sum stays float32.
    """
    dtype = torch.float64 if X.dtype == torch.float64 else NS_DTYPE
    k1 = weights.shape[-1] if isinstance(weights, Tensor) else len(weights)
    D = newton_schulz_combination(
        X, _coefficients(k1 - 1), weights, dtype=dtype, check_finite=False
    )
    if scale == "none":
        D = D * torch.linalg.vector_norm(X, dim=(-2, -1), keepdim=True).to(D.dtype).pow(a)
    if frobenius is not None:  # D is this call's own sum: scaled in place, no copy
        nrm = torch.linalg.vector_norm(D, dim=(-2, -1), keepdim=True)
        D.mul_(frobenius / nrm.clamp_min(torch.finfo(D.dtype).tiny))
    return D


def realised_decrease(
    D: Tensor, U: Tensor, Vh: Tensor, d: Tensor, curv: Tensor, b_out: Tensor | None
) -> Tensor:
    r"""The surrogate's best-step decrease of a direction ``D`` given in full (float64 scalar).

    In the direction's singular basis :math:`\tilde D = U^\top D V` (``r x r``; diagonal for
    an exact family member), the numerator is :math:`(\sum_i d_i \tilde D_{ii})^2` and the
    curvature :math:`\mathrm{tr}(\tilde D^\top B \tilde D A)` with ``A`` the input factor
    (``curv``, ``r x r``) and ``B`` the output factor (``b_out``; None: the identity), so the
    off-diagonal (rounding) part of a realised combination is charged its curvature. With a
    vector ``curv`` (input-only curvature) the form is :math:`\sum_{ij} \tilde D_{ij}^2 c_j`.
    Energy of ``D`` outside the thin basis (a tall or wide matrix's complement) is not seen.
    Same conventions (no normalisation) as
    :func:`adaptive_lmo.criterion.weighted_decrease`, which it equals for diagonal
    :math:`\tilde D`.
    """
    # the r^3 products in the factors' precision (float32 for float32 layers: a relative
    # decrease compared with min_gain needs no float64); the sums are float64
    rd = U.dtype
    Dt = (U.mT @ D.to(rd)) @ Vh.mT
    Dt = Dt.reshape(-1, *Dt.shape[-2:])
    d = d.to(torch.float64).reshape(Dt.shape[0], -1)
    num = (torch.diagonal(Dt, dim1=-2, dim2=-1).to(torch.float64) * d).sum().pow(2)
    c = curv.to(rd)
    r = Dt.shape[-1]
    if c.numel() == Dt.numel():  # an (..., r, r) input factor
        A = c.reshape(Dt.shape)
        left = Dt if b_out is None else b_out.to(rd).reshape(Dt.shape) @ Dt
        den = ((left @ A) * Dt).sum(dtype=torch.float64)
    else:  # (..., r): the input factor's diagonal
        den = (Dt.pow(2) * c.reshape(Dt.shape[0], 1, r)).sum(dtype=torch.float64)
    return num / (2.0 * den)


def polar_norm(s: Tensor, scale: str, rtol: float) -> float | None:
    """The exact polar member's Frobenius norm ``sqrt(k)`` (``k`` significant singular values
    of one matrix, the per-matrix count of a batch's first), or None for other scales."""
    if scale != "polar":
        return None
    s64 = s.to(torch.float64).reshape(-1, s.shape[-1])[0]
    k = int((s64 > rtol * s64.max()).sum())
    return math.sqrt(max(k, 1))


def mixture_loss(
    U: Tensor,
    s: Tensor,
    Vh: Tensor,
    a: float,
    scale: str,
    rtol: float,
    d: Tensor | None,
    curv_in: Tensor,
    curv_out: Tensor | None,
    steps: int = NS_STEPS,
) -> tuple[Tensor, float]:
    r"""Fit the weights on a criterion step and score the realised combination.

    The direction the criterion scored, :math:`U\,\mathrm{diag}(s)\,V^\top` (rebuilt from its
    factors, which with ``stats="next_batch"`` belong to the previous step), is put through
    :func:`mixed_member` as the optimizer would (bfloat16 iterates), and the surrogate's
    decrease of that realised direction is compared with the exact member's, both with the
    criterion's own statistics (:func:`realised_decrease`).

    Args:
        U, s, Vh: the thin SVD the criterion used (``(..., m, r)``, ``(..., r)``, ``(..., r, n)``).
        a: the chosen exponent, in (0, 1).
        scale: the group's ``scale``.
        rtol: the rank cut-off of the exact member.
        d: the alignments (None: ``s``, the direction is the gradient estimate itself).
        curv_in: the input factor in the right singular basis (``(..., r, r)``) or its
            diagonal (``(..., r)``).
        curv_out: the output factor in the left singular basis (``(..., r, r)``), or None.
        steps: the Newton-Schulz steps combined (:func:`fit_weights`).

    Returns:
        The weights (``(..., K + 1)`` float64) and the relative loss
        ``1 - decrease(realised) / decrease(exact)`` (negative when the combination happens
        to score better; NaN when the exact member's decrease is not positive).
    """
    w = fit_weights(s, a, scale, rtol, steps)
    P = (U * s.unsqueeze(-2)) @ Vh
    D = mixed_member(P, w if w.ndim > 1 else w.tolist(), a, scale, polar_norm(s, scale, rtol))
    dd = s if d is None else d
    dec_mix = realised_decrease(D, U, Vh, dd, curv_in, curv_out)
    # the exact member is diagonal in the basis: its form needs no r^3 products
    t = power_weights(s.to(torch.float64), a, scale, rtol).reshape(1, -1)
    full = curv_in.numel() == s.numel() * s.shape[-1]
    M = curv_in if not full or curv_out is None else curv_out * curv_in
    dec_exact = weighted_decrease(t, s, M if full else M.reshape(-1), dd)[0]
    if not float(dec_exact) > 0:
        return w, float("nan")
    return w, 1.0 - float(dec_mix / dec_exact)
