r"""Estimating the restricted isometry constant of a sensing operator by probing.

For an operator :math:`\mathcal A` and rank r, let
:math:`\rho(X) = \|\mathcal A X\|^2/\|X\|_F^2`. Over rank-≤r matrices,
:math:`\delta_r = (\rho_{\max}-\rho_{\min})/(\rho_{\max}+\rho_{\min})` at the best scale
:math:`c = 2/(\rho_{\max}+\rho_{\min})`. :func:`probe_rip` estimates the two extremes from
below/above by

1. random probes :math:`X = G_1 G_2^\top` with Gaussian factors, and
2. a truncated power method on the rank-r set started from the most extreme probes:
   :math:`X \leftarrow P_r(\mathcal A^*\mathcal A X)/\|\cdot\|` climbs :math:`\rho` and
   :math:`X \leftarrow P_r((\rho_{\rm top} I - \mathcal A^*\mathcal A) X)/\|\cdot\|` descends it,
   :math:`P_r` the truncated SVD (shared-core's ``FixedRankEmbedded.proj``).

Every probed X is a rank-≤r matrix, so the estimate is a **lower bound** on the true
:math:`\delta_r` (random probes alone are far from the extremes when they are spiky, as for
the ε-surrogate: the refinement is what finds them).

Example:
    >>> import torch
    >>> from eps_completion.problem import observe
    >>> from eps_completion.sensing import EpsSensing
    >>> g = torch.Generator().manual_seed(0)
    >>> mask = torch.rand(8, 9, generator=g) < 0.5
    >>> op = EpsSensing(observe(torch.zeros(8, 9), mask, allow_empty_lines=True), eps=0.2)
    >>> est = probe_rip(op, rank=2, generator=g)
    >>> est.delta <= op.rip_constant() + 1e-9
    True
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from shared_core.manifolds import FixedRankEmbedded

from .sensing import EpsSensing

__all__ = ["RipEstimate", "probe_rip"]


class RipEstimate(NamedTuple):
    """Probed extremes of :math:`\\rho = \\|\\mathcal A X\\|^2/\\|X\\|^2` and the implied δ."""

    delta: float
    scale: float
    ratio_min: float
    ratio_max: float
    delta_random: float  # from the random probes alone (before refinement)


def _ratio(op: EpsSensing, x: Tensor) -> float:
    return float(op.apply(x).pow(2).sum() / x.pow(2).sum())


def _power_step(man: FixedRankEmbedded, y: Tensor, previous: Tensor) -> Tensor:
    """``P_r(y)/||P_r(y)||``, or ``previous`` if that is zero (a fixed point was reached)."""
    z = man.to_dense(man.proj(y))
    nz = float(z.norm())
    return previous if nz == 0.0 else z / nz


def probe_rip(
    op: EpsSensing,
    rank: int,
    *,
    n_probes: int = 64,
    n_refine: int = 50,
    n_starts: int = 8,
    generator: torch.Generator | None = None,
) -> RipEstimate:
    """Estimate :math:`\\delta_r` of ``op`` from random rank-r probes refined by power steps.

    Args:
        op: the sensing operator (dense apply/adjoint: O(mn) per probe).
        rank: r, ``1 <= r <= min(m, n)``.
        n_probes: random Gaussian rank-r probes.
        n_refine: truncated power steps per start, for each extreme (0: none).
        n_starts: the power method starts from this many most extreme probes (it finds local
            extremes; several starts make missing the global one less likely).
        generator: random source.

    Returns:
        :class:`RipEstimate` (a lower bound on the true δ_r).
    """
    m, n = op.shape
    if isinstance(rank, bool) or not isinstance(rank, int) or not 1 <= rank <= min(m, n):
        raise ValueError(f"rank must be an int in [1, {min(m, n)}], got {rank!r}")
    if isinstance(n_probes, bool) or not isinstance(n_probes, int) or n_probes < 1:
        raise ValueError(f"n_probes must be a positive int, got {n_probes!r}")
    if isinstance(n_refine, bool) or not isinstance(n_refine, int) or n_refine < 0:
        raise ValueError(f"n_refine must be an int >= 0, got {n_refine!r}")
    if isinstance(n_starts, bool) or not isinstance(n_starts, int) or n_starts < 1:
        raise ValueError(f"n_starts must be a positive int, got {n_starts!r}")
    dtype = op.obs.values.dtype
    man = FixedRankEmbedded(m, n, rank)
    probes, ratios = [], []
    for _ in range(n_probes):
        x = torch.randn(m, rank, generator=generator, dtype=dtype) @ torch.randn(
            rank, n, generator=generator, dtype=dtype
        )
        probes.append(x / x.norm())
        ratios.append(_ratio(op, x))
    hi, lo = max(ratios), min(ratios)
    delta_random = (hi - lo) / (hi + lo)
    w2 = op.weight_map().pow(2)
    top = float(w2.max())
    order = sorted(range(n_probes), key=ratios.__getitem__)
    starts = min(n_starts, n_probes)
    for idx_hi, idx_lo in zip(order[::-1][:starts], order[:starts], strict=True):
        x_hi, x_lo = probes[idx_hi], probes[idx_lo]
        for _ in range(n_refine):
            x_hi = _power_step(man, w2 * x_hi, x_hi)
            x_lo = _power_step(man, (top - w2) * x_lo, x_lo)
        hi, lo = max(hi, _ratio(op, x_hi)), min(lo, _ratio(op, x_lo))
    return RipEstimate((hi - lo) / (hi + lo), 2.0 / (hi + lo), lo, hi, delta_random)
