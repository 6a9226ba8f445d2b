r"""Step sizes from the heavy-tail analysis, and the rates they give.

Notation: :math:`T` steps (horizon), :math:`t = 1, 2, \dots` the step count, :math:`p \in (1, 2]`
with :math:`E\|\xi\|_*^p \le \sigma^p` for the gradient noise :math:`\xi`, :math:`L` the
smoothness constant, :math:`D` a distance scale (:math:`D^2/2 \ge B_\psi(x^\star, x_1)`, the
Bregman distance from the start to a minimiser; :math:`\|x_1 - x^\star\|` in the Euclidean case),
:math:`\Delta \ge F(x_1) - \inf F` the initial gap and, for the nonconvex forms, :math:`G \ge
\sup_x \|\nabla F(x)\|` a bound on the gradient.

* convex, horizon: :math:`\eta = \min(\frac{1}{2L}, \frac{D}{\sigma T^{1/p}})`, giving
  :math:`E F(\bar x_T) - F^\star = O(LD^2/T + \sigma D\,T^{(1-p)/p})` for the uniform average.
* convex, anytime: :math:`\eta_t = \min(\frac{1}{2L}, \frac{D}{\sigma t^{1/p}})`, the same order
  for the :math:`\eta_t`-weighted average.
* nonconvex, horizon: with :math:`H = 2^{3-2p}L^{p-1}G^{2-p}` (:func:`holder_constant`),
  :math:`\eta = \min(\frac{1}{2L}, \frac{(\Delta/(HT))^{1/p}}{\sigma})`, giving the explicit
  bound (derived in the package README, "nonconvex SGD")

  .. math:: \min_{t\le T} E\|\nabla F(x_t)\| \le \Big(\frac1T\sum_{t=1}^T E\|\nabla F(x_t)\|^2
     \Big)^{1/2} \le \Big(\frac{8L\Delta}{T} + 4\sigma H^{1/p}\Delta^{(p-1)/p}T^{(1-p)/p}
     \Big)^{1/2},

  i.e. the exponent :math:`(1-p)/(2p)` of :math:`T` for the gradient norm.
* nonconvex, anytime: the same with :math:`t` in place of :math:`T`; the same order up to a
  :math:`\sqrt{\log T}` factor, for the :math:`\eta_t`-weighted average of the squared norms.

Why :math:`T^{1/p}` and the interpolation constant :math:`H`: the second-order remainder
:math:`F(y) - F(x) - \langle\nabla F(x), y - x\rangle` is at most :math:`\frac L2\|y-x\|^2` and
at most :math:`2G\|y-x\|`, hence at most :math:`H\|y-x\|^p`; only the :math:`p`-th moment of the
noise then enters, and balancing :math:`\Delta/(\eta T)` against :math:`H\eta^{p-1}\sigma^p`
gives the step. :math:`L` is optional for the convex forms (``None``: nonsmooth analysis, no
cap).

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
    "holder_constant",
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


def holder_constant(p: float, L: float, G: float) -> float:
    r"""The constant :math:`H = 2^{3-2p}L^{p-1}G^{2-p}` of the remainder bound.

    For :math:`L`-smooth :math:`F` with :math:`\|\nabla F\| \le G` everywhere,
    :math:`F(y) - F(x) - \langle\nabla F(x), y-x\rangle \le \min(\frac L2 s^2, 2Gs) \le H s^p`
    with :math:`s = \|y - x\|` (interpolate the two bounds with weights :math:`p-1` and
    :math:`2-p`). At :math:`p = 2` it is :math:`L/2` and :math:`G` drops out.

    Args:
        p: moment order in (1, 2]; L: smoothness; G: gradient bound. Constants positive.

    Returns:
        :math:`H`.
    """
    p = check_p(p)
    L, G = _pos("L", L), _pos("G", G)
    return 2 ** (3 - 2 * p) * L ** (p - 1) * G ** (2 - p)


def nonconvex_sgd_horizon(
    T: int, p: float, sigma: float, delta: float, L: float, G: float
) -> StepSchedule:
    r"""Constant SGD step for nonconvex :math:`L`-smooth, :math:`G`-Lipschitz :math:`F`.

    .. math:: \eta = \min\Big(\frac{1}{2L}, \frac{(\Delta/(HT))^{1/p}}{\sigma}\Big),
       \qquad H = 2^{3-2p}L^{p-1}G^{2-p}.

    The uncapped branch makes the two terms :math:`2\Delta/(\eta T)` and
    :math:`2H\eta^{p-1}\sigma^p` of the bound on :math:`\frac1T\sum_t E\|\nabla F(x_t)\|^2`
    equal. Rate: see :func:`nonconvex_rate` (exponent :math:`(1-p)/(2p)` for the gradient
    norm). At :math:`p = 2` this is the classical :math:`\sqrt{2\Delta/(LT)}/\sigma`.

    Args:
        T: horizon; p: moment order in (1, 2]; sigma: noise bound; delta: initial gap;
        L: smoothness; G: bound on the gradient norm. All constants positive.

    Returns:
        A constant :class:`StepSchedule`.
    """
    T, p = _horizon(T), check_p(p)
    sigma, delta = _pos("sigma", sigma), _pos("delta", delta)
    H = holder_constant(p, L, G)
    return StepSchedule(base=(delta / (H * T)) ** (1 / p) / sigma, cap=_cap(L))


def nonconvex_sgd_anytime(p: float, sigma: float, delta: float, L: float, G: float) -> StepSchedule:
    r"""Anytime step :math:`\eta_t = \min(1/(2L), (\Delta/(Ht))^{1/p}/\sigma)`.

    Summing the one-step inequality with :math:`\eta_t` gives
    :math:`\sum_t \eta_t E\|\nabla F_t\|^2 \le 2\Delta + 2H\sigma^p\sum_t\eta_t^p`, and
    :math:`\sum_t \eta_t^p = O(\log T)` for this schedule: the horizon rate up to a
    :math:`\sqrt{\log T}` factor, for the :math:`\eta_t`-weighted average.
    """
    p = check_p(p)
    sigma, delta = _pos("sigma", sigma), _pos("delta", delta)
    H = holder_constant(p, L, G)
    return StepSchedule(base=(delta / H) ** (1 / p) / sigma, power=1 / p, cap=_cap(L))


def convex_rate_exponent(p: float) -> float:
    r"""The exponent :math:`(1-p)/p` of :math:`T` in the convex rate."""
    p = check_p(p)
    return (1 - p) / p


def nonconvex_rate_exponent(p: float) -> float:
    r"""The exponent :math:`(1-p)/(2p)` of :math:`T` in the nonconvex gradient-norm rate.

    Unmodified SGD with :func:`nonconvex_sgd_horizon`; slower than the
    :math:`(1-p)/(3p-2)` of clipped or normalized methods for :math:`p < 2`, equal at
    :math:`p = 2`.
    """
    p = check_p(p)
    return (1 - p) / (2 * p)


def convex_rate(T: int, p: float, sigma: float, D: float, L: float | None = None) -> float:
    r"""The convex bound's shape :math:`LD^2/T + \sigma D T^{(1-p)/p}` (constants dropped)."""
    T, p = _horizon(T), check_p(p)
    sigma, D, L = _pos("sigma", sigma), _pos("D", D), _pos("L", L, optional=True)
    smooth = 0.0 if L is None else L * D * D / T
    return smooth + sigma * D * T ** ((1 - p) / p)


def nonconvex_rate(T: int, p: float, sigma: float, delta: float, L: float, G: float) -> float:
    r"""The explicit nonconvex bound for the step :func:`nonconvex_sgd_horizon`.

    .. math:: \Big(\frac{8L\Delta}{T} + 4\sigma H^{1/p}\Delta^{(p-1)/p}T^{(1-p)/p}\Big)^{1/2}
       \ \ge\ \Big(\frac1T\sum_{t=1}^T E\|\nabla F(x_t)\|^2\Big)^{1/2}
       \ \ge\ \min_{t\le T} E\|\nabla F(x_t)\|,

    constants included (they are the derivation's, not tuned), with
    :math:`H` = :func:`holder_constant`. Its exponent in :math:`T` tends to
    :math:`(1-p)/(2p)`.
    """
    T, p = _horizon(T), check_p(p)
    sigma, delta = _pos("sigma", sigma), _pos("delta", delta)
    H = holder_constant(p, L, G)
    sq = 8 * L * delta / T + 4 * sigma * H ** (1 / p) * delta ** ((p - 1) / p) * T ** ((1 - p) / p)
    return math.sqrt(sq)
