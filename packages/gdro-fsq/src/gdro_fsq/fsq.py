r"""GDRO-FSQ, the method: anytime GDRO with flexible per-round sample sizes.

:class:`GDROFSQ` is a :class:`~gdro_fsq.game.GroupGame` whose player 2 runs FTRL with entropy
(exponential weights) on importance-weighted (or implicit-exploration) estimates, with the
query set drawn from :math:`\pi = (1-\gamma_t)a(q_t, r_t) + \gamma_t r_t/m`, anytime steps
that follow the per-round variance of the estimates, round weights for rounds smaller than the
step allows, and the running error bounds :meth:`GDROFSQ.bound` and :meth:`GDROFSQ.bound_hp`
(:mod:`gdro_fsq.bounds`). Derivations: ``docs/math.md``.

Example:
    >>> import torch
    >>> from gdro_fsq.data import GroupSampler
    >>> X = torch.randn(30, 2, dtype=torch.float64); y = torch.randn(30, dtype=torch.float64)
    >>> g = torch.arange(30) % 3
    >>> w = torch.zeros(2, dtype=torch.float64, requires_grad=True)
    >>> loss = lambda params, b: ((b.X @ params[0] - b.y) ** 2).clamp(max=1.0)
    >>> gen = torch.Generator().manual_seed(0)
    >>> opt = GDROFSQ([w], loss, n_groups=3, lr_theta=0.1, generator=gen)
    >>> losses = opt.round(GroupSampler(X, y, g, generator=gen), r=2)
    >>> losses.shape, round(float(opt.q.sum()), 6)
    (torch.Size([2]), 1.0)
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any, NamedTuple

import torch
from torch import Tensor

from .bounds import fsq_bound, fsq_bound_hp, fsq_bound_hp_ix
from .estimates import (
    ADAPTIVE_V0,
    FULL_INFO_CAP,
    exploration_rate,
    importance_weighted_losses,
    ix_cost_estimates,
    q_step_size,
    q_variance,
    variance_proxy,
)
from .game import GroupGame, LossFn, Query, RoundWeights, positive
from .sampling import inclusion_probabilities, max_weight_sum

__all__ = [
    "ESTIMATORS",
    "GDROFSQ",
    "Q_STEPS",
    "STEP_CAPS",
    "THETA_STEPS",
    "Options",
    "resolve_options",
]

ESTIMATORS = ("iw", "ix")
Q_STEPS = ("bound", "adaptive")
#: the rules for the non-increasing ``q`` step cap :math:`\bar\eta_t` of :class:`GDROFSQ`
#: (docs/math.md, "Round weights"): the cap of the running mean size (rounds below it
#: down-weighted), of the smallest size so far (no down-weighting; the earlier rule), or none.
STEP_CAPS = ("mean", "min", "none")
#: what the :math:`\theta` step's :math:`K_t` of :class:`GDROFSQ` sums: the sure bounds
#: :math:`(c_j\kappa_j)^2` or the observed :math:`\|c_jg_j\|^2/G^2` (docs/math.md, "Observed
#: gradient step").
THETA_STEPS = ("kappa", "observed")


class Options(NamedTuple):
    """:class:`GDROFSQ`'s player-2 options once checked and defaulted."""

    estimator: str
    explore: bool
    q_step: str
    step_cap: str
    theta_step: str
    q_bonus: float


def _choice(name: str, value: Any, allowed: tuple[str, ...], allow_none: bool = True) -> None:
    if (value is None and allow_none) or value in allowed:
        return
    raise ValueError(f"{name} must be one of {allowed}, got {value!r}")


def resolve_options(
    *,
    estimator: str = "iw",
    explore: bool | None = None,
    q_step: str | None = None,
    step_cap: str | None = None,
    theta_step: str = "kappa",
    q_bonus: float = 0.0,
    grad_bound: float | None = None,
) -> Options:
    """Check :class:`GDROFSQ`'s options, alone and together, and fill in the defaults.

    ``None`` means "the default for the other options". A combination the method does not
    define raises a ``ValueError`` that names it (before, some were silently overridden:
    ``estimator="ix"`` replaced ``q_step`` and ignored ``explore`` and ``step_cap``).

    Example:
        >>> resolve_options(estimator="ix").q_step
        'bound'
    """
    _choice("estimator", estimator, ESTIMATORS, allow_none=False)
    _choice("q_step", q_step, Q_STEPS)
    _choice("step_cap", step_cap, STEP_CAPS)
    _choice("theta_step", theta_step, THETA_STEPS, allow_none=False)
    if explore is not None and not isinstance(explore, bool):
        raise ValueError(f"explore must be True, False or None, got {explore!r}")
    if isinstance(q_bonus, bool) or not (
        isinstance(q_bonus, int | float) and math.isfinite(q_bonus) and q_bonus >= 0
    ):
        raise ValueError(f"q_bonus must be a finite number >= 0, got {q_bonus!r}")
    if theta_step == "observed" and grad_bound is None:
        raise ValueError('theta_step="observed" needs grad_bound (K_t is in units of G^2)')
    ix = estimator == "ix"
    if ix and explore:
        raise ValueError(
            "explore=True does not combine with estimator='ix' (implicit exploration has no "
            "explicit exploration rate)"
        )
    if ix and q_step == "adaptive":
        raise ValueError(
            "q_step='adaptive' does not combine with estimator='ix' (its analysis needs the "
            "worst-case schedule m/r): leave q_step unset or pass 'bound'"
        )
    explore = not ix and explore is not False
    if step_cap not in (None, "none") and not explore:
        why = "estimator='ix'" if ix else "explore=False"
        raise ValueError(
            f"step_cap={step_cap!r} does not combine with {why} (the cap belongs to the "
            "explicit exploration): leave step_cap unset or pass 'none'"
        )
    if q_bonus > 0 and not explore:
        raise ValueError("q_bonus needs estimator='iw' with explore=True")
    return Options(
        estimator=estimator,
        explore=explore,
        q_step=q_step or ("bound" if ix else "adaptive"),
        step_cap=step_cap or ("mean" if explore else "none"),
        theta_step=theta_step,
        q_bonus=float(q_bonus),
    )


class GDROFSQ(GroupGame):
    r"""Anytime GDRO with flexible sample queries (the method).

    Round :math:`t` with budget :math:`r_t`:

    1. :math:`\eta_t = \min(c_q\sqrt{\log m/(v_0 + X_{t-1})}, \bar\eta_t)` with
       :math:`X_t = \sum_{j\le t}\operatorname{Var}_{q_j}(\hat\ell_j)` the observed
       variances (``q_step="adaptive"``, the default; :data:`ADAPTIVE_V0` = :math:`v_0`), or
       :math:`\eta_t = \min(c_q\sqrt{\log m/V_t}, \bar\eta_t)`,
       :math:`V_t = V_{t-1} + v(r_t)`, :math:`v(r) = m/r - 3/4` (``q_step="bound"``,
       :func:`variance_proxy`); :math:`\bar\eta_t = \min_{j\le t} \rho(\bar r_j)`,
       :math:`\bar r_j` the running mean size (``step_cap``),
       :math:`\rho(r) = r/(2m)` for :math:`r < m` and 1 for :math:`r = m`;
       :math:`q_t = \operatorname{softmax}(\eta_t \hat L_{t-1})`; the round weight
       :math:`c_t = \min(1, \rho(r_t)/\eta_t)` (1 for a constant :math:`r`),
       :math:`\gamma_t = c_t\eta_t m/r_t \le 1/2` (so :math:`\pi_{t,i} \ge c_t\eta_t` and
       :math:`\eta_t c_t\hat\ell_{t,i} \le 1`); the round's estimates and gradient are
       multiplied by :math:`c_t` and the averages weighted by it (docs/math.md, "Round weights");
    2. query :math:`S_t`, :math:`|S_t| = r_t`, with marginals
       :math:`\pi_t = (1-\gamma_t)a(q_t, r_t) + \gamma_t r_t/m`;
    3. :math:`\theta`: stochastic gradient :math:`g_t = \sum_{i\in S_t} (q_{t,i}/\pi_{t,i})
       \nabla\ell(\theta_t; z_{t,i})`, :math:`\|g_t\| \le \kappa_t G` with
       :math:`\kappa_t` the sum of the :math:`r_t` largest :math:`q_{t,i}/\pi_{t,i}`;
       :math:`K_t = K_{t-1} + \kappa_t^2`, :math:`\eta^\theta = c_\theta/\sqrt{K_t}`; proximal
       FTRL :math:`\theta_{t+1} = \Pi_\Theta(\bar z_t - \eta^\theta\sum_{j\le t} g_j)`,
       :math:`\bar z_t` the :math:`\sigma`-weighted mean of :math:`\theta_1..\theta_t`
       (:meth:`GroupGame._update_theta`);
    4. :math:`q`: :math:`\hat L_t = \hat L_{t-1} + \hat\ell_t`,
       :math:`\hat\ell_{t,i} = (\ell_{t,i}/B)\mathbb 1[i\in S_t]/\pi_{t,i}` (the losses are
       the max player's gains).

    Args:
        params, loss_fn, n_groups, model, loss_bound, radius, generator: as in
            :class:`GroupGame`.
        lr_theta: :math:`c_\theta` (default, when ``radius`` and ``grad_bound`` are given:
            :math:`R/(\sqrt2 G)`, the minimiser of the bound, with :math:`R = 2D` for
            ``ftrl-prox`` and ``sgd`` and :math:`R = D + \|\theta_1\|` for ``ftrl``).
        lr_q: :math:`c_q` (default 1; the bound's minimiser is :math:`1/\sqrt2` for
            ``q_step="bound"`` and :math:`2^{-3/4}` for ``"adaptive"``).
        q_step: ``"adaptive"`` (default for ``estimator="iw"``: self-confident tuning on the
            observed variances, the worst-case rate with a data-dependent constant) or
            ``"bound"`` (the worst-case schedule :math:`V_t`; the default, and the only
            choice, for ``estimator="ix"``, whose analysis needs the schedule :math:`m/r`:
            ``q_step="adaptive"`` with ``"ix"`` is refused). docs/math.md, "Adaptive q step".
        grad_bound: :math:`G`, a bound on the per-sample gradient norm; with ``radius`` it
            enables :meth:`bound`.
        theta_update: ``"ftrl-prox"`` (default), ``"ftrl"`` or ``"sgd"`` (see
            :class:`GroupGame`).
        explore: use the adaptive exploration :math:`\gamma_t` and the step cap (default
            ``True`` for ``estimator="iw"``; ``False``: :math:`\gamma = 0`, no cap; the
            estimates are then unbounded and :meth:`bound` is refused). ``explore=True`` with
            ``estimator="ix"`` is refused (ix has no explicit exploration).
        estimator: player 2's estimates. ``"iw"`` (default): the importance-weighted gains
            above, with the explicit exploration. ``"ix"``: implicit exploration on the costs
            :math:`c = 1 - \ell/B`: no explicit exploration (:math:`\pi_t = a(q_t, r_t)`),
            no step cap, :math:`q_t = \operatorname{softmax}(-\eta_t\hat C_{t-1})` with
            :math:`\hat c_{t,i} = c_{t,i}\mathbb 1[i\in S_t]/(\pi_{t,i} + \gamma_t)`,
            :math:`\gamma_t = \eta_t/2` for :math:`r_t < m` and 0 for :math:`r_t = m`;
            its :meth:`bound_hp` (:func:`fsq_bound_hp_ix`) has the :math:`\sqrt t` rate for
            every :math:`r` (docs/math.md, "Implicit exploration").
        theta_step: what the :math:`\theta` step :math:`c_\theta/\sqrt{K_t}` sums in
            :math:`K_t`: ``"kappa"`` (default) the sure bounds :math:`(c_j\kappa_j)^2`;
            ``"observed"`` the realised :math:`\|c_jg_j\|^2/G^2` (AdaGrad-norm proximal
            FTRL: the step follows the gradient's actual size, so an :math:`r`-sample
            gradient's smaller variance buys a larger step; needs ``grad_bound``; the same
            regret bound with the observed :math:`K_t`; docs/math.md, "Observed gradient step").
        q_bonus: :math:`b \ge 0` (default 0: off), an experimental Exp3.P-style optimistic
            bonus for player 2: the gain estimates become :math:`c_t(\hat\ell_{t,i} +
            \beta_t/\pi_{t,i})` for every group, :math:`\beta_t = b\,\eta_t`, with the round
            weight and exploration computed for :math:`\eta_t(1 + \beta_t)` so that
            :math:`c_t\eta_t(\hat\ell + \beta_t/\pi) \le 1` still holds. Only with
            ``estimator="iw"`` and ``explore=True``; :meth:`bound` and :meth:`bound_hp` are
            refused (not derived; docs/math.md, "Optimistic bonus").
        step_cap: the non-increasing cap :math:`\bar\eta_t` on the ``q`` step (docs/math.md,
            "Round weights"): ``"mean"`` (default) :math:`\min_{j\le t}\rho(\bar r_j)`,
            :math:`\bar r_j` the running mean size; ``"min"`` :math:`\min_{j\le t}\rho(r_j)`
            (the earlier rule: one small round caps the step for good); ``"none"``: no cap
            beyond :math:`\eta \le 1`. A round with :math:`\rho(r_t) < \eta_t` gets the weight
            :math:`c_t = \rho(r_t)/\eta_t` (its gains, its gradient and its share of the
            averages), which keeps :math:`c_t\eta_t\hat\ell \le 1`; with ``"min"`` every
            :math:`c_t = 1`. The cap belongs to the explicit exploration: with
            ``estimator="ix"`` or ``explore=False`` only ``"none"`` (the default there) is
            accepted.

    Raises:
        ValueError: a bad value, or a combination of options that the method does not
            define (named in the message), at construction rather than at the first round.
    """

    def __init__(
        self,
        params: Iterable[Tensor] | Iterable[dict[str, Any]],
        loss_fn: LossFn,
        n_groups: int,
        lr_theta: float | None = None,
        *,
        lr_q: float = 1.0,
        grad_bound: float | None = None,
        radius: float | None = None,
        loss_bound: float = 1.0,
        model: Any = None,
        theta_update: str = "ftrl-prox",
        explore: bool | None = None,
        estimator: str = "iw",
        q_step: str | None = None,
        step_cap: str | None = None,
        theta_step: str = "kappa",
        q_bonus: float = 0.0,
        generator: torch.Generator | None = None,
    ) -> None:
        opts = resolve_options(
            estimator=estimator,
            explore=explore,
            q_step=q_step,
            step_cap=step_cap,
            theta_step=theta_step,
            q_bonus=q_bonus,
            grad_bound=grad_bound,
        )
        self.grad_bound = positive("grad_bound", grad_bound, allow_none=True)
        default_lr = lr_theta is None
        if default_lr and (radius is None or grad_bound is None):
            raise ValueError("lr_theta is needed unless both radius and grad_bound are given")
        super().__init__(
            params,
            loss_fn,
            n_groups,
            1.0 if default_lr else lr_theta,
            model=model,
            loss_bound=loss_bound,
            radius=radius,
            theta_update=theta_update,
            theta_decay=True,
            generator=generator,
        )
        self.estimator = opts.estimator
        self.explore = opts.explore
        self.q_step = opts.q_step
        self.step_cap = opts.step_cap
        self.theta_step = opts.theta_step
        self.q_bonus = opts.q_bonus
        self.lr_q = positive("lr_q", lr_q)
        # kappa <= 2 / (1 - gamma) with gamma <= 1/2 (docs/math.md, "Why the variance is m/r")
        self.kappa_bound_sq = 16.0 if self.explore else 4.0
        self.reg_radius: float | None = None
        if self.radius is not None:
            if theta_update == "ftrl":  # the regulariser is anchored at theta_1
                start = math.sqrt(sum(float((p.detach() ** 2).sum()) for p in self._params()))
                self.reg_radius = self.radius + start
            else:  # ||theta - theta_j|| <= 2D for every iterate theta_j
                self.reg_radius = 2 * self.radius
        if default_lr:
            assert self.reg_radius is not None and self.grad_bound is not None
            for group in self.param_groups:
                group["lr_theta"] = self.reg_radius / (math.sqrt(2) * self.grad_bound)
        self.game["est_sum"] = torch.zeros(n_groups, dtype=torch.float64)
        # for the high-probability bound (fsq_bound_hp)
        self.game["second_moment_sum"] = 0.0
        self.game["var_obs"] = 0.0  # X_t: the observed q-variances of the estimates
        self.game["inv_pi_sum"] = torch.zeros(n_groups, dtype=torch.float64)
        self.game["noise_sq_sum"] = 0.0
        self.game["eta_cap"] = 1.0
        # for the implicit-exploration variant (fsq_bound_hp_ix)
        self.game["bias_sum"] = 0.0
        self.game["gamma_min"] = math.inf
        self.game["full_rounds"] = 0

    def _step_cap(self, r: float) -> float:
        """The largest :math:`\\eta` a round of size ``r`` allows: ``r/(2m)`` (so that
        :math:`\\gamma \\le 1/2`), or 1 when ``r = m`` (every estimate is then at most 1).
        Also used at the running mean size :math:`\\bar r_t` (not an integer in general)."""
        return FULL_INFO_CAP if r >= self.n_groups else r / (2 * self.n_groups)

    def _history_cap(self, r: int) -> float:
        r"""The step cap :math:`\bar\eta_t = \min_{j\le t}\rho(\bar r_j)` of round ``t``,
        :math:`\bar r_j = \frac1j\sum_{i\le j} r_i` the running mean size (this round's ``r``
        included): non-increasing in ``t``, :math:`\rho(r)` for a constant ``r``, and not
        pulled down for good by one small round (docs/math.md, "Round weights")."""
        if self.step_cap == "none":
            return FULL_INFO_CAP
        if self.step_cap == "min":
            return min(self.game["eta_cap"], self._step_cap(r))
        mean_r = (self.samples + r) / (self.t + 1)
        return min(self.game["eta_cap"], self._step_cap(mean_r))

    def _q_step(self, r: int) -> float:
        """Player 2's step before the cap (docs/math.md, "Adaptive q step")."""
        m = self.n_groups
        if self.estimator == "ix":
            return q_step_size(self.lr_q, m, self.game["var_sum"] + m / r)
        if self.q_step == "adaptive":
            return q_step_size(self.lr_q, m, ADAPTIVE_V0 + self.game["var_obs"])
        return q_step_size(self.lr_q, m, self.game["var_sum"] + variance_proxy(m, r))

    def _inclusion(self, r: int, t: int) -> tuple[Tensor, RoundWeights]:
        m = self.n_groups
        eta = self._q_step(r)
        if self.estimator == "ix":  # costs, no explicit exploration, implicit gamma = eta/2
            self.game["q"] = torch.softmax(-eta * self.game["est_sum"], dim=0)
            weights = RoundWeights(c=1.0, eta=eta, gamma=eta / 2 if r < m else 0.0)
            return inclusion_probabilities(self.game["q"], r, 0.0), weights
        c, beta = 1.0, 0.0
        if self.explore:
            eta = min(eta, self._history_cap(r))
            # the optimistic bonus beta_t = b eta_t (0 unless q_bonus): the estimates
            # c (l_hat + beta / pi) need pi >= c eta (1 + beta)
            beta = self.q_bonus * eta
            # a round smaller than the step allows is down-weighted: c eta (1 + beta) <= rho(r)
            c = min(1.0, self._step_cap(r) / (eta * (1.0 + beta)))
        self.game["q"] = torch.softmax(eta * self.game["est_sum"], dim=0)
        gamma = exploration_rate(c * eta * (1.0 + beta), m, r) if self.explore else 0.0
        weights = RoundWeights(c=c, eta=eta, gamma=gamma, bonus=beta)
        return inclusion_probabilities(self.game["q"], r, gamma), weights

    def _kappa(self, q: Tensor, pi: Tensor, r: int) -> float:
        return max_weight_sum(q, pi, r)

    def _theta_sq(self, kappa: float, grads: tuple[Tensor | None, ...]) -> float:
        if self.theta_step == "observed":  # |c_t g_t|^2 / G^2 <= (c_t kappa_t)^2
            sq = sum(float((g.detach() ** 2).sum()) for g in grads if g is not None)
            assert self.grad_bound is not None  # resolve_options requires it
            return sq / self.grad_bound**2
        return kappa**2

    def _theta_weights(self, query: Query) -> Tensor:
        return self.game["q"][query.groups] / query.probs

    def _update_q(self, scaled: Tensor, query: Query, t: int) -> None:
        q, w, m, r = self.game["q"], query.weights, self.n_groups, query.r
        pi = query.pi.to(torch.float64)
        if self.estimator == "ix":
            est = ix_cost_estimates(scaled, query.groups, query.probs, m, w.gamma)
            # e^{-x} <= 1 - x + x^2/2 (x >= 0): the second-order term carries a 1/2
            self.game["second_moment_sum"] += float(w.eta / 2 * (q * est**2).sum())
            self.game["bias_sum"] += w.gamma * float((q / (pi + w.gamma)).sum())
            if w.gamma > 0:
                self.game["gamma_min"] = min(self.game["gamma_min"], w.gamma)
            else:
                self.game["full_rounds"] += 1
            self.game["var_sum"] += m / r
        else:
            # the round's weighted gains c_t * l_hat_t (c_t = 1 unless the round is down-weighted)
            est = w.c * importance_weighted_losses(scaled, query.groups, query.probs, m)
            if self.q_bonus > 0:  # the optimistic bonus c beta / pi on every group
                est = est + w.c * w.bonus / pi
            var = q_variance(q, est)
            self.game["second_moment_sum"] += w.eta * var
            self.game["var_obs"] += var
            # (with ix, pi has no exploration floor and W is not used)
            self.game["inv_pi_sum"] = self.game["inv_pi_sum"] + w.c**2 / pi
            self.game["var_sum"] += w.c**2 * variance_proxy(m, r)
            # the cap of this round (samples and t still exclude it here)
            self.game["eta_cap"] = self._history_cap(r)
        self.game["est_sum"] = self.game["est_sum"] + est
        # kappa from the plan: the same q_t and pi_t, computed once per round
        self.game["noise_sq_sum"] += (
            w.c**2 * (query.kappa + 1.0) ** 2 * (self.grad_bound or 0.0) ** 2
        )

    def _check_bound_ready(self) -> None:
        if self.radius is None or self.grad_bound is None:
            raise ValueError("the bound needs radius and grad_bound")
        if not self.explore and self.estimator == "iw":
            raise ValueError("the bound needs the exploration (explore=True)")
        if self.t == 0:
            raise ValueError("the bound is defined after the first round")
        if self.q_bonus > 0:
            raise ValueError(
                "no bound is derived for the q_bonus variant (an experimental option; "
                'docs/math.md, "Optimistic bonus")'
            )

    def _theta_terms(self) -> dict[str, Any]:
        """Player 1's inputs, shared by every bound (:func:`~gdro_fsq.bounds.theta_regret`)."""
        return {
            "kappa_sq_sum": self.game["kappa_sq_sum"],
            "theta_sq_sum": self.game["theta_sq_sum"],
            "reg_radius": self.reg_radius,
            "grad_bound": self.grad_bound,
            "lr_theta": self.param_groups[0]["lr_theta"],
            "lag": self.kappa_bound_sq if self.theta_update == "ftrl" else 0.0,
            "loss_bound": self.loss_bound,
        }

    def bound(self) -> float:
        """:func:`~gdro_fsq.bounds.fsq_bound` at the current round (needs ``radius`` and
        ``grad_bound``)."""
        self._check_bound_ready()
        return fsq_bound(
            self.weight_sum,
            self.game["var_sum"],
            self.n_groups,
            lr_q=self.lr_q,
            # the ix variant has no step cap (its estimates are nonnegative costs)
            q_cap=math.inf if self.estimator == "ix" else self.game["eta_cap"],
            adaptive_v0=ADAPTIVE_V0 if self.q_step == "adaptive" else None,
            **self._theta_terms(),
        )

    def bound_hp(self, delta: float = 0.1) -> float:
        """:func:`~gdro_fsq.bounds.fsq_bound_hp` (or :func:`~gdro_fsq.bounds.fsq_bound_hp_ix`
        for ``estimator="ix"``) at the current round: holds with probability ``1 - delta``."""
        self._check_bound_ready()
        common = {
            **self._theta_terms(),
            "noise_sq_sum": self.game["noise_sq_sum"],
            "radius": self.radius,
            "eta_q": self.round_weights.eta,
            "second_moment_sum": self.game["second_moment_sum"],
        }
        if self.estimator == "ix":
            return fsq_bound_hp_ix(
                self.t,
                delta,
                self.n_groups,
                bias_sum=self.game["bias_sum"],
                gamma_min=self.game["gamma_min"],
                full_rounds=self.game["full_rounds"],
                **common,
            )
        return fsq_bound_hp(self.weight_sum, delta, inv_pi_sum=self.game["inv_pi_sum"], **common)
