r"""Step sizes from the heavy-tail analysis, and the rates they give.

Notation: :math:`T` steps (horizon), :math:`t = 1, 2, \dots` the step count, :math:`p \in (1, 2]`
with :math:`E\|\xi\|_*^p \le \sigma^p` for the gradient noise :math:`\xi`, :math:`L` the
smoothness constant, :math:`D` a distance scale (:math:`D^2/2 \ge B_\psi(x^\star, x_1)`, the
Bregman distance from the start to a minimiser; :math:`\|x_1 - x^\star\|` in the Euclidean case),
:math:`\Delta \ge F(x_1) - \inf F` the initial gap and, for the nonconvex forms, :math:`G \ge
\sup_x \|\nabla F(x)\|` a bound on the gradient.

* convex, horizon: :math:`\eta = \min(\frac{1}{2L}, \frac{D}{\sigma T^{1/p}})`, giving
  :math:`F(\bar x_T) - F^\star = O(LD^2/T + \sigma D\,T^{(1-p)/p})` for the uniform average.
  *Which statement holds depends on the assumptions.* In expectation when :math:`F` is
  Lipschitz or the domain is bounded (then :math:`E F(\bar x_T)` is finite). For an
  :math:`L`-smooth :math:`F` on all of :math:`\mathbb R^d` with infinite-variance noise the
  expectation is itself infinite (on :math:`x^2/2` one noisy step already has
  :math:`E F = \infty`; an independent check saw the sample mean of the gap grow 0.36 -> 1.01
  from 1e3 to 1e6 runs while the median stayed 0.30), so there the rate is a statement about
  the median (with high probability), which is what the experiments measure.
* strongly convex (:math:`\mu`-strongly convex, steps :math:`\propto 1/(\mu t)`): the noise
  term decays as :math:`T^{2(1-p)/p}` (:func:`strongly_convex_rate_exponent`; -0.46 measured at
  :math:`\kappa = 10`, :math:`p = 1.3` against -0.4615), the square of the convex one.
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
* nonconvex, :math:`L`-smooth **without** a gradient bound (:func:`nonconvex_sgd_horizon_smooth`):
  a weaker bound on :math:`E\min_{t\le T}\|\nabla F(x_t)\|` by truncating the noise at a level
  :math:`\tau` used only in the analysis (:func:`nonconvex_smooth_bound`), with the step that
  minimises it; exponent :math:`(2-2p)/(2+3p)` of :math:`T`, step :math:`\propto
  T^{-(6-p)/(2+3p)}`.

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
import numbers
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
    "nonconvex_sgd_horizon_smooth",
    "nonconvex_smooth_bound",
    "nonconvex_smooth_rate",
    "nonconvex_smooth_rate_exponent",
    "nonconvex_smooth_step",
    "nonconvex_smooth_truncation",
    "strongly_convex_rate_exponent",
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
    # any integer type (numpy.int64 from a sweep included), never a bool or a float
    if isinstance(T, bool) or not isinstance(T, numbers.Integral) or T < 1:
        raise ValueError(f"T must be a positive int, got {T!r}")
    return int(T)


@dataclass(frozen=True)
class StepSchedule:
    r""":math:`\eta_t = \min(\mathrm{cap}, \mathrm{base}\cdot t^{-\mathrm{power}})` for ``t >= 1``.

    ``power = 0`` is a constant step. A frozen dataclass, so it pickles and can sit in an
    optimizer's ``param_groups`` (and its ``state_dict``).
    """

    base: float
    power: float = 0.0
    cap: float = math.inf

    def __post_init__(self) -> None:
        # a NaN base with a cap would give min(cap, nan) = cap, a silent wrong step
        for name, lo_open in (("base", True), ("power", False), ("cap", True)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, numbers.Real) or math.isnan(v):
                raise ValueError(f"StepSchedule.{name} must be a real number, got {v!r}")
            if (v <= 0 if lo_open else v < 0) or (name != "cap" and math.isinf(v)):
                need = "> 0" if lo_open else ">= 0"
                raise ValueError(f"StepSchedule.{name} must be finite and {need}, got {v!r}")

    def __call__(self, t: int) -> float:
        if isinstance(t, bool) or not isinstance(t, numbers.Integral) or t < 1:
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

    Rate: :math:`F(\bar x_T) - F^\star = O(LD^2/T + \sigma D\,T^{(1-p)/p})`, in expectation
    for Lipschitz :math:`F` or a bounded domain, for the median (high probability) for
    :math:`L`-smooth :math:`F` on :math:`\mathbb R^d`, whose expectation can be infinite (module
    docstring).

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


def strongly_convex_rate_exponent(p: float) -> float:
    r"""The exponent :math:`2(1-p)/p` of :math:`T` for :math:`\mu`-strongly convex objectives.

    Sketch. With :math:`d_t = E\|x_t - x^\star\|^2` and steps :math:`\eta_t = c/(\mu t)`,
    strong convexity contracts :math:`d_t` by :math:`1 - \mu\eta_t` per step while the noise
    bracket adds at most :math:`2^{1-p}\eta_t^p\sigma^p R^{2-p}` (the same interpolation as in
    the convex case) with steps of size :math:`R \sim \sqrt{d_t}` near the optimum. The
    balance :math:`\mu\eta_t d_t \sim \eta_t^p\sigma^p d_t^{(2-p)/2}` gives
    :math:`d_t^{p/2} \sim \eta_t^{p-1}\sigma^p/\mu`, so
    :math:`d_T \sim T^{-2(p-1)/p}` and the gap :math:`\mu d_T/2` decays at the same rate:
    twice the convex exponent, :math:`-1` at :math:`p = 2` (the familiar :math:`1/(\mu T)`).

    Example:
        >>> round(strongly_convex_rate_exponent(1.3), 4)
        -0.4615
    """
    p = check_p(p)
    return 2 * (1 - p) / p


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


# --------------------------------------------------------------------------------------------
# Nonconvex, L-smooth only (no bound on the gradient): the truncation argument (README,
# "Without G").


def _smooth_args(T, p, sigma, delta, L):
    return _horizon(T), check_p(p), _pos("sigma", sigma), _pos("delta", delta), _pos("L", L)


def nonconvex_smooth_bound(
    T: int, p: float, sigma: float, delta: float, L: float, eta: float, tau: float
) -> float:
    r"""Bound on :math:`E\min_{t\le T}\|\nabla F(x_t)\|` for SGD with step ``eta``, no :math:`G`.

    Assumptions: :math:`F` is :math:`L`-smooth and bounded below, :math:`\Delta \ge F(x_1) -
    \inf F`; :math:`x_{t+1} = x_t - \eta(\nabla F(x_t) + \xi_t)` with :math:`E[\xi_t | \text{past}]
    = 0` and :math:`E[\|\xi_t\|^p | \text{past}] \le \sigma^p`; :math:`0 < \eta \le 1/L`. No bound
    on :math:`\|\nabla F\|` is assumed. ``tau > 0`` is a truncation level of the *analysis* (SGD
    does not clip). Then (derivation in the package README, "Without G")

    .. math:: E\min_{t\le T}\|\nabla F(x_t)\| \le \Big(\frac{4\Delta}{\eta T}
       + 4\sigma^{2p}\tau^{2-2p} + 2L\eta\sigma^p\tau^{2-p}\Big)^{1/2}
       + \sqrt{2L\Delta}\,\min\Big(1, \frac{T\sigma^p}{\tau^p}\Big).

    The first part bounds the run driven by the truncated noise (second moment
    :math:`\le\sigma^p\tau^{2-p}`, bias :math:`\le\sigma^p\tau^{1-p}`); the second pays
    :math:`\|\nabla F(x_1)\| \le \sqrt{2L\Delta}` on the event, of probability at most
    :math:`T\sigma^p/\tau^p`, that some :math:`\|\xi_t\|` exceeds :math:`\tau`.

    Raises:
        ValueError: on p outside (1, 2], non-positive constants, or ``eta > 1/L``.
    """
    T, p, sigma, delta, L = _smooth_args(T, p, sigma, delta, L)
    eta, tau = _pos("eta", eta), _pos("tau", tau)
    if eta > 1 / L * (1 + 1e-12):
        raise ValueError(f"the bound needs eta <= 1/L = {1 / L!r}, got {eta!r}")
    inner = (
        4 * delta / (eta * T)
        + 4 * sigma ** (2 * p) * tau ** (2 - 2 * p)
        + 2 * L * eta * sigma**p * tau ** (2 - p)
    )
    return math.sqrt(inner) + math.sqrt(2 * L * delta) * min(1.0, T * (sigma / tau) ** p)


def nonconvex_smooth_step(
    T: int, p: float, sigma: float, delta: float, L: float, tau: float
) -> float:
    r"""The step minimising :func:`nonconvex_smooth_bound` over :math:`\eta \in (0, 1/L]`.

    Only :math:`4\Delta/(\eta T) + 2L\eta\sigma^p\tau^{2-p}` depends on :math:`\eta`; it is
    convex in :math:`\eta`, with unconstrained minimiser
    :math:`\eta^\star = (2\Delta/(TL\sigma^p\tau^{2-p}))^{1/2}`, so the constrained one is
    :math:`\min(1/L, \eta^\star)`.
    """
    T, p, sigma, delta, L = _smooth_args(T, p, sigma, delta, L)
    tau = _pos("tau", tau)
    return min(1 / L, math.sqrt(2 * delta / (T * L * sigma**p * tau ** (2 - p))))


def nonconvex_smooth_truncation(T: int, p: float, sigma: float, delta: float, L: float) -> float:
    r"""The analysis' truncation level :math:`\tau` minimising the bound at its best step.

    Minimises :math:`\tau \mapsto` :func:`nonconvex_smooth_bound` at
    :func:`nonconvex_smooth_step` numerically: a grid of 4001 points in :math:`\log\tau` over
    :math:`[\sigma e^{-10}, \sigma T^2 e^{10}]`, then golden-section search between the grid
    neighbours of the best point. Asymptotically :math:`\tau \propto \sigma T^{5/(2+3p)}`.
    """
    T, p, sigma, delta, L = _smooth_args(T, p, sigma, delta, L)

    def h(u: float) -> float:
        tau = math.exp(u)
        return nonconvex_smooth_bound(
            T, p, sigma, delta, L, nonconvex_smooth_step(T, p, sigma, delta, L, tau), tau
        )

    lo, hi, n = math.log(sigma) - 10, math.log(sigma) + 2 * math.log(T) + 10, 4001
    us = [lo + (hi - lo) * k / (n - 1) for k in range(n)]
    vals = [h(u) for u in us]
    k = min(range(n), key=vals.__getitem__)
    a, b = us[max(k - 1, 0)], us[min(k + 1, n - 1)]
    g = (math.sqrt(5) - 1) / 2
    c, d = b - g * (b - a), a + g * (b - a)
    hc, hd = h(c), h(d)
    for _ in range(80):
        if hc <= hd:
            b, d, hd = d, c, hc
            c = b - g * (b - a)
            hc = h(c)
        else:
            a, c, hc = c, d, hd
            d = a + g * (b - a)
            hd = h(d)
    u = (a + b) / 2
    return math.exp(u if h(u) <= vals[k] else us[k])


def nonconvex_sgd_horizon_smooth(
    T: int, p: float, sigma: float, delta: float, L: float
) -> StepSchedule:
    r"""Constant SGD step for nonconvex :math:`L`-smooth :math:`F` with **no** gradient bound.

    :math:`\eta = \min(1/L, (2\Delta/(TL\sigma^p\tau^{2-p}))^{1/2})` at the truncation level
    :math:`\tau` = :func:`nonconvex_smooth_truncation`: the pair minimises
    :func:`nonconvex_smooth_bound`. Rate :func:`nonconvex_smooth_rate`, exponent
    :math:`(2-2p)/(2+3p)` of :math:`T` (:func:`nonconvex_smooth_rate_exponent`), step
    :math:`\propto T^{-(6-p)/(2+3p)}` for large :math:`T`. Weaker than the
    :math:`(1-p)/(2p)` of :func:`nonconvex_sgd_horizon` for :math:`p < 2` (which needs
    :math:`\|\nabla F\| \le G`); the same :math:`T^{-1/4}`, step :math:`\propto T^{-1/2}`, at
    :math:`p = 2`.

    Args:
        T: horizon; p: moment order in (1, 2]; sigma: noise bound; delta: initial gap;
        L: smoothness. All constants positive.
    """
    tau = nonconvex_smooth_truncation(T, p, sigma, delta, L)
    return StepSchedule(base=nonconvex_smooth_step(T, p, sigma, delta, L, tau))


def nonconvex_smooth_rate(T: int, p: float, sigma: float, delta: float, L: float) -> float:
    r"""The bound at the step and level of :func:`nonconvex_sgd_horizon_smooth`.

    A bound on :math:`E\min_{t\le T}\|\nabla F(x_t)\|` with the derivation's constants.
    """
    tau = nonconvex_smooth_truncation(T, p, sigma, delta, L)
    eta = nonconvex_smooth_step(T, p, sigma, delta, L, tau)
    return nonconvex_smooth_bound(T, p, sigma, delta, L, eta, tau)


def nonconvex_smooth_rate_exponent(p: float) -> float:
    r"""The exponent :math:`(2-2p)/(2+3p)` of :math:`T` in :func:`nonconvex_smooth_rate`.

    From balancing :math:`(L\Delta\sigma^p\tau^{2-p}/T)^{1/4}` against
    :math:`T\sigma^p\tau^{-p}` with :math:`\tau = \sigma T^{\gamma}`:
    :math:`\gamma = 5/(2+3p)`. Equals :math:`-1/4` at :math:`p = 2`.
    """
    p = check_p(p)
    return (2 - 2 * p) / (2 + 3 * p)
