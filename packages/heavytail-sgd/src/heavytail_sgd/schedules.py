r"""Step sizes from the heavy-tail analysis, and the rates they give.

Notation: :math:`T` steps (horizon), :math:`t = 1, 2, \dots` the step count, :math:`p \in (1, 2]`
with :math:`E\|\xi\|_*^p \le \sigma^p` for the gradient noise :math:`\xi`, :math:`L` the
smoothness constant, :math:`D` a distance scale (:math:`D^2/2 \ge B_\psi(x^\star, x_1)`, the
Bregman distance from the start to a minimiser; :math:`\|x_1 - x^\star\|` in the Euclidean case)
and :math:`\Delta \ge F(x_1) - \inf F` the initial gap.

* convex, horizon: :math:`\eta = \min(\frac{1}{2L}, \frac{D}{\sigma T^{1/p}})`, giving
  :math:`E F(\bar x_T) - F^\star = O(LD^2/T + \sigma D\,T^{(1-p)/p})` for the uniform average.
* convex, anytime: :math:`\eta_t = \min(\frac{1}{2L}, \frac{D}{\sigma t^{1/p}})`, the same order
  for the :math:`\eta_t`-weighted average.
* nonconvex, horizon: :math:`\eta = \min(\frac{1}{2L}, \frac{\sqrt{\Delta/L}}{\sigma T^{1/p}})`,
  giving :math:`\min_t \|\nabla F(x_t)\| = O(\sqrt{L\Delta/T}
  + (L\Delta)^{1/4}\sigma^{1/2}\,T^{(1-p)/(2p)})`.
* nonconvex, anytime: the same with :math:`t` in place of :math:`T`.

Why :math:`T^{1/p}`: the largest of :math:`T` noise draws is of order :math:`\sigma T^{1/p}`
(Markov on :math:`\|\xi\|^p`), so below that level a heavy tail behaves like a variance of
:math:`\sigma^p(\sigma T^{1/p})^{2-p} = \sigma^2 T^{(2-p)/p}`; putting that "effective
variance" into the finite-variance step sizes gives the forms above. The package README
spells out the derivation. :math:`L` is optional for the convex forms (``None``: nonsmooth
analysis, no cap).

Example:
    >>> eta = convex_smd_horizon(T=1000, p=1.5, sigma=2.0, D=1.0)
    >>> round(eta(1), 6) == round(1.0 / (2.0 * 1000 ** (1 / 1.5)), 6)
    True
    >>> convex_rate_exponent(1.5)
    -0.3333333333333333
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

__all__ = [
    "StepSchedule",
    "check_p",
    "convex_rate",
    "convex_rate_exponent",
    "convex_smd_anytime",
    "convex_smd_horizon",
    "nonconvex_rate",
    "nonconvex_rate_exponent",
    "nonconvex_sgd_anytime",
    "nonconvex_sgd_horizon",
]


def check_p(p: float) -> float:
    """Return ``p`` as a float, or raise ``ValueError`` unless ``1 < p <= 2``."""
    if isinstance(p, bool) or not isinstance(p, int | float) or not 1 < p <= 2:
        raise ValueError(f"p must lie in (1, 2], got {p!r}")
    return float(p)


def _pos(name: str, value: float | None, *, optional: bool = False) -> float | None:
    if value is None and optional:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not value > 0
        or not math.isfinite(value)
    ):
        raise ValueError(f"{name} must be a positive finite number, got {value!r}")
    return float(value)


def _horizon(T: int) -> int:
    if isinstance(T, bool) or not isinstance(T, int) or T < 1:
        raise ValueError(f"T must be a positive int, got {T!r}")
    return T


@dataclass(frozen=True)
class StepSchedule:
    r""":math:`\eta_t = \min(\mathrm{cap}, \mathrm{base}\cdot t^{-\mathrm{power}})` for ``t >= 1``.

    ``power = 0`` is a constant step. A frozen dataclass, so it pickles and can sit in an
    optimizer's ``param_groups`` (and its ``state_dict``).
    """

    base: float
    power: float = 0.0
    cap: float = math.inf

    def __call__(self, t: int) -> float:
        if isinstance(t, bool) or not isinstance(t, int) or t < 1:
            raise ValueError(f"step count t must be an int >= 1, got {t!r}")
        return min(self.cap, self.base * t ** (-self.power))


# A schedule given as ``lr`` sits in param_groups and so in state_dict(); allowlisted so that
# torch.load's default weights_only=True accepts it (it holds three floats).
torch.serialization.add_safe_globals([StepSchedule])


def _cap(L: float | None) -> float:
    return math.inf if L is None else 1 / (2 * L)


def convex_smd_horizon(
    T: int, p: float, sigma: float, D: float, L: float | None = None
) -> StepSchedule:
    r"""Constant step for a known horizon :math:`T` (convex SMD/SGD, output the uniform average).

    .. math:: \eta = \min\Big(\frac{1}{2L}, \frac{D}{\sigma T^{1/p}}\Big)

    Rate: :math:`E[F(\bar x_T)] - F^\star = O(LD^2/T + \sigma D\,T^{(1-p)/p})`.

    Args:
        T: horizon, positive int.
        p: noise moment order in (1, 2].
        sigma: noise p-th moment bound, positive.
        D: distance scale, positive.
        L: smoothness, positive, or ``None`` for no cap.

    Returns:
        A constant :class:`StepSchedule`.
    """
    T, p = _horizon(T), check_p(p)
    sigma, D, L = _pos("sigma", sigma), _pos("D", D), _pos("L", L, optional=True)
    return StepSchedule(base=D / (sigma * T ** (1 / p)), power=0.0, cap=_cap(L))


def convex_smd_anytime(p: float, sigma: float, D: float, L: float | None = None) -> StepSchedule:
    r"""Anytime step :math:`\eta_t = \min(1/(2L), D/(\sigma t^{1/p}))` (use the weighted average).

    Args:
        p, sigma, D, L: as in :func:`convex_smd_horizon`.

    Returns:
        A decaying :class:`StepSchedule` with power :math:`1/p`.
    """
    p = check_p(p)
    sigma, D, L = _pos("sigma", sigma), _pos("D", D), _pos("L", L, optional=True)
    return StepSchedule(base=D / sigma, power=1 / p, cap=_cap(L))


def nonconvex_sgd_horizon(T: int, p: float, sigma: float, delta: float, L: float) -> StepSchedule:
    r"""Constant SGD step for nonconvex :math:`L`-smooth :math:`F` and a known horizon.

    .. math:: \eta = \min\Big(\frac{1}{2L}, \frac{\sqrt{\Delta/L}}{\sigma T^{1/p}}\Big)

    Rate (min over iterates of the gradient norm):
    :math:`O(\sqrt{L\Delta/T} + (L\Delta)^{1/4}\sigma^{1/2}T^{(1-p)/(2p)})`.

    Args:
        T: horizon; p: moment order in (1, 2]; sigma: noise bound; delta: initial gap;
        L: smoothness. All constants positive.

    Returns:
        A constant :class:`StepSchedule`.
    """
    T, p = _horizon(T), check_p(p)
    sigma, delta, L = _pos("sigma", sigma), _pos("delta", delta), _pos("L", L)
    return StepSchedule(base=math.sqrt(delta / L) / (sigma * T ** (1 / p)), cap=_cap(L))


def nonconvex_sgd_anytime(p: float, sigma: float, delta: float, L: float) -> StepSchedule:
    r"""Anytime nonconvex step :math:`\eta_t = \min(1/(2L), \sqrt{\Delta/L}/(\sigma t^{1/p}))`."""
    p = check_p(p)
    sigma, delta, L = _pos("sigma", sigma), _pos("delta", delta), _pos("L", L)
    return StepSchedule(base=math.sqrt(delta / L) / sigma, power=1 / p, cap=_cap(L))


def convex_rate_exponent(p: float) -> float:
    r"""The exponent :math:`(1-p)/p` of :math:`T` in the convex rate."""
    p = check_p(p)
    return (1 - p) / p


def nonconvex_rate_exponent(p: float) -> float:
    r"""The exponent :math:`(1-p)/(2p)` of :math:`T` in the nonconvex gradient-norm rate."""
    p = check_p(p)
    return (1 - p) / (2 * p)


def convex_rate(T: int, p: float, sigma: float, D: float, L: float | None = None) -> float:
    r"""The convex bound's shape :math:`LD^2/T + \sigma D T^{(1-p)/p}` (constants dropped)."""
    T, p = _horizon(T), check_p(p)
    sigma, D, L = _pos("sigma", sigma), _pos("D", D), _pos("L", L, optional=True)
    smooth = 0.0 if L is None else L * D * D / T
    return smooth + sigma * D * T ** ((1 - p) / p)


def nonconvex_rate(T: int, p: float, sigma: float, delta: float, L: float) -> float:
    r"""The nonconvex bound's shape :math:`\sqrt{L\Delta/T} + (L\Delta)^{1/4}\sigma^{1/2}
    T^{(1-p)/(2p)}` (constants dropped)."""
    T, p = _horizon(T), check_p(p)
    sigma, delta, L = _pos("sigma", sigma), _pos("delta", delta), _pos("L", L)
    return math.sqrt(L * delta / T) + (L * delta) ** 0.25 * math.sqrt(sigma) * T ** (
        (1 - p) / (2 * p)
    )
