r"""The group game's shared machinery: query planning, loss checks, the :math:`\theta` player.

The problem is :math:`\min_{\theta\in\Theta}\max_{q\in\Delta_m}\ \phi(\theta, q) =
\sum_i q_i R_i(\theta)`, :math:`R_i` the risk on group :math:`i`. Each round :math:`t` the
caller fixes how many groups :math:`r_t \in [1, m]` may be queried; the optimizer picks the set
(:meth:`GroupGame.plan`), the caller draws one sample from each (e.g. with
:class:`~gdro_fsq.data.GroupSampler`) and passes a closure returning the per-sample losses to
:meth:`GroupGame.step`. :meth:`GroupGame.round` does all three.

:class:`GroupGame` owns what every player-2 rule shares: the round's bookkeeping, the
:math:`\theta` update (proximal FTRL, anchored FTRL or projected SGD on the weighted
gradient), the averaged iterates and ``state_dict``. A subclass says how ``q`` is played
(``_inclusion``), how the losses are weighted into the gradient (``_theta_weights``) and how
``q`` learns (``_update_q``).
"""

from __future__ import annotations

import abc
import contextlib
import dataclasses
import math
from collections.abc import Callable, Iterable, Iterator
from typing import Any, NamedTuple

import torch
from torch import Tensor
from torch.optim import Optimizer

from .sampling import check_sample_size, systematic_sample

__all__ = ["THETA_UPDATES", "GroupGame", "LossFn", "Query", "RoundWeights", "positive"]

LossFn = Callable[[Any, Any], Tensor]
THETA_UPDATES = ("ftrl-prox", "ftrl", "sgd")


@dataclasses.dataclass(frozen=True)
class RoundWeights:
    r"""Player 2's choices for one round, fixed when the round is planned.

    Frozen: the plan hands them to the step and to player 2's update, and nothing in between
    may change them (they were a mutable dict before, which any method could overwrite).
    """

    #: the round weight :math:`c_t \in (0, 1]` of the round's estimates, gradient and share of
    #: the averages (1 except where :class:`~gdro_fsq.fsq.GDROFSQ` down-weights a small round).
    c: float = 1.0
    #: player 2's step :math:`\eta_t` of the round (``nan`` where the rule has none).
    eta: float = math.nan
    #: the exploration rate :math:`\gamma_t` (implicit for ``estimator="ix"``).
    gamma: float = math.nan
    #: the optimistic bonus :math:`\beta_t` of ``q_bonus`` (0 when off).
    bonus: float = 0.0


class Query(NamedTuple):
    """The groups a round queries, their inclusion probabilities and the round's constants."""

    groups: Tensor  #: the chosen group ids, sorted, length ``r``.
    probs: Tensor  #: ``P(i in S)`` for each chosen group.
    r: int  #: the round's sample size.
    pi: Tensor  #: ``P(i in S)`` for every group, shape ``(m,)``.
    #: player 2's step, exploration and round weight for this round.
    weights: RoundWeights = RoundWeights()
    #: :math:`\kappa_t`, the bound on the round's gradient-weight sum (computed once, at plan).
    kappa: float = 1.0


def positive(name: str, value: Any, allow_none: bool = False) -> float | None:
    """``float(value)`` when it is a finite number > 0 (or ``None`` when allowed), else a
    ``ValueError`` naming the argument and the value."""
    if value is None and allow_none:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not (math.isfinite(value) and value > 0)
    ):
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    return float(value)


class GroupGame(Optimizer, abc.ABC):
    r"""Common machinery: query planning, loss checks, the :math:`\theta` player and averaging.

    Args:
        params: the model parameters (or parameter groups).
        loss_fn: ``loss_fn(model_or_params, batch) -> Tensor`` of per-sample losses, one per
            queried group, in ``[0, loss_bound]``, differentiable in the parameters.
        n_groups: the number of groups ``m >= 2``.
        lr_theta: :math:`c_\theta`; the step is :math:`c_\theta/\sqrt{K_t}` (``theta_decay``),
            :math:`K_t = \sum_{j\le t} k_j` with :math:`k_j` the round's :meth:`_theta_sq`
            (:math:`(c_j\kappa_j)^2`; 1 for the baselines, so :math:`K_t = t`), or constant.
        model: what ``loss_fn`` receives first (default: the list of parameters).
        loss_bound: :math:`B`; losses outside ``[0, B]`` are refused.
        radius: :math:`D`: :math:`\Theta = \{\|\theta\|_2 \le D\}` over all parameters jointly
            (default: unconstrained).
        theta_update: ``"ftrl-prox"`` (FTRL with quadratic regularisers centred at the
            iterates, added as the step shrinks), ``"ftrl"`` (FTRL with one regulariser
            anchored at :math:`\theta_1`: lazy projection of the summed gradients) or ``"sgd"``
            (projected online gradient descent).
        theta_decay: the :math:`1/\sqrt t` decay of the :math:`\theta` step.
        generator: the random source for the query sets.
    """

    #: a bound on :math:`\kappa_t^2` valid for every future round (the anchored FTRL's
    #: look-ahead term); the baselines' :math:`\kappa` is 1.
    kappa_bound_sq = 1.0

    def __init__(
        self,
        params: Iterable[Tensor] | Iterable[dict[str, Any]],
        loss_fn: LossFn,
        n_groups: int,
        lr_theta: float,
        *,
        model: Any = None,
        loss_bound: float = 1.0,
        radius: float | None = None,
        theta_update: str = "sgd",
        theta_decay: bool = True,
        generator: torch.Generator | None = None,
    ) -> None:
        if not callable(loss_fn):
            raise ValueError(f"loss_fn must be callable, got {loss_fn!r}")
        if isinstance(n_groups, bool) or not isinstance(n_groups, int) or n_groups < 2:
            raise ValueError(f"n_groups must be an integer >= 2, got {n_groups!r}")
        if theta_update not in THETA_UPDATES:
            raise ValueError(f"theta_update must be one of {THETA_UPDATES}, got {theta_update!r}")
        defaults = {"lr_theta": positive("lr_theta", lr_theta)}
        super().__init__(params, defaults)
        for group in self.param_groups:
            group["lr_theta"] = positive("lr_theta", group["lr_theta"])
        self.loss_fn = loss_fn
        self.n_groups = n_groups
        self.model = model
        self.loss_bound = positive("loss_bound", loss_bound)
        self.radius = positive("radius", radius, allow_none=True)
        self.theta_update = theta_update
        self.theta_decay = bool(theta_decay)
        self.generator = generator
        self._query: Query | None = None
        #: the round weights of the latest planned (or last played) round.
        self.round_weights = RoundWeights()
        # the running sums; per-round values travel in the frozen Query, not here
        self.game: dict[str, Any] = {
            "t": 0,
            "samples": 0,
            "var_sum": 0.0,
            "q": torch.full((n_groups,), 1.0 / n_groups, dtype=torch.float64),
            "q_sum": torch.zeros(n_groups, dtype=torch.float64),
            "kappa_sq_sum": 0.0,
            # K_t of the theta step: the sum of the rounds' _theta_sq
            "theta_sq_sum": 0.0,
            # C_t = sum_j c_j, the summed round weights
            "weight_sum": 0.0,
        }
        if self.radius is not None:
            self._project_(self._params())

    # -- bookkeeping
    def _params(self) -> list[Tensor]:
        return [p for g in self.param_groups for p in g["params"]]

    @property
    def t(self) -> int:
        """Rounds completed."""
        return int(self.game["t"])

    @property
    def samples(self) -> int:
        """Samples queried so far, :math:`\\sum_j r_j`."""
        return int(self.game["samples"])

    @property
    def q(self) -> Tensor:
        """The group weights of the latest planned (or last played) round."""
        return self.game["q"].clone()

    @property
    def weight_sum(self) -> float:
        r""":math:`C_t = \sum_{j\le t} c_j`, the summed round weights (``t`` when every
        :math:`c_j = 1`)."""
        return float(self.game["weight_sum"])

    def averaged_q(self) -> Tensor:
        r""":math:`\bar q_t = \sum_{j\le t} c_j q_j / C_t` (uniform before the first round;
        :math:`c_j = 1` except for :class:`~gdro_fsq.fsq.GDROFSQ`'s down-weighted rounds)."""
        if self.t == 0:
            return self.q
        return self.game["q_sum"] / self.weight_sum

    def averaged_params(self) -> list[Tensor]:
        r""":math:`\bar\theta_t = \sum_{j\le t} c_j\theta_j / C_t`, one tensor per parameter."""
        out = []
        for p in self._params():
            avg = self.state[p].get("avg") if p in self.state else None
            out.append((avg if avg is not None else p).detach().clone())
        return out

    @contextlib.contextmanager
    def swap_average(self) -> Iterator[None]:
        """Within the block the parameters hold their averages; the iterates come back after."""
        params = self._params()
        saved = [p.detach().clone() for p in params]
        with torch.no_grad():
            for p, a in zip(params, self.averaged_params(), strict=True):
                p.copy_(a)
        try:
            yield
        finally:
            with torch.no_grad():
                for p, s in zip(params, saved, strict=True):
                    p.copy_(s)

    def state_dict(self) -> dict[str, Any]:
        """The torch.optim state plus the game's (weights, counters, generator state)."""
        sd = super().state_dict()
        sd["game"] = {k: (v.clone() if isinstance(v, Tensor) else v) for k, v in self.game.items()}
        sd["game"]["round_weights"] = dataclasses.asdict(self.round_weights)
        if self.generator is not None:
            sd["game"]["generator_state"] = self.generator.get_state()
        return sd

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output (any pending plan is dropped)."""
        sd = dict(state_dict)
        game = dict(sd.pop("game"))
        gen_state = game.pop("generator_state", None)
        weights = game.pop("round_weights", {})
        # a state saved before issue #19 kept the round's values among the running sums
        legacy = {"round_weight": "c", "eta_q": "eta", "gamma": "gamma", "bonus": "bonus"}
        for old, new in legacy.items():
            if old in game:
                weights[new] = float(game.pop(old))
        super().load_state_dict(sd)
        self.game = {k: (v.clone() if isinstance(v, Tensor) else v) for k, v in game.items()}
        self.round_weights = RoundWeights(**weights)
        if gen_state is not None and self.generator is not None:
            self.generator.set_state(gen_state)
        self._query = None

    # -- what a player-2 rule defines
    def _check_r(self, r: int) -> int:
        return check_sample_size(r, self.n_groups)

    @abc.abstractmethod
    def _inclusion(self, r: int, t: int) -> tuple[Tensor, RoundWeights]:
        """Set ``game['q']`` to :math:`q_t`; return the marginals :math:`\\pi_t` (shape (m,))
        and the round's weights."""

    @abc.abstractmethod
    def _theta_weights(self, query: Query) -> Tensor:
        """Weights ``w`` (shape (r,)) such that ``sum_k w_k loss_k`` estimates the objective."""

    def _kappa(self, q: Tensor, pi: Tensor, r: int) -> float:
        """A bound on the sum of the round's gradient weights (the baselines' is 1)."""
        return 1.0

    def _theta_sq(self, kappa: float, grads: tuple[Tensor | None, ...]) -> float:
        r"""The round's term of :math:`K_t` (in units of :math:`G^2`): the sure bound
        :math:`(c_t\kappa_t)^2` (``kappa`` is :math:`c_t\kappa_t`) on the weighted gradient's
        squared norm."""
        return kappa**2

    @abc.abstractmethod
    def _update_q(self, scaled: Tensor, query: Query, t: int) -> None:
        """Update player 2 from the losses divided by the loss bound (shape (r,))."""

    # -- the round
    def plan(self, r: int) -> Query:
        """Choose this round's groups: ``r`` distinct ids with their inclusion probabilities."""
        r = self._check_r(r)
        t = self.t + 1
        pi, weights = self._inclusion(r, t)
        groups = systematic_sample(pi, self.generator)
        kappa = self._kappa(self.game["q"], pi, r)
        self.round_weights = weights
        self._query = Query(groups, pi[groups], r, pi, weights, kappa)
        return self._query

    def _check_losses(self, losses: Any, r: int) -> Tensor:
        if not isinstance(losses, Tensor):
            raise ValueError(f"the closure must return a tensor of losses, got {type(losses)!r}")
        if losses.shape != (r,):
            raise ValueError(
                f"the closure must return one loss per queried group, shape ({r},); got "
                f"{tuple(losses.shape)}"
            )
        if not bool(torch.isfinite(losses).all()):
            raise ValueError(f"non-finite losses: {losses.detach().tolist()}")
        lo, hi = float(losses.detach().min()), float(losses.detach().max())
        tol = 1e-9 * self.loss_bound
        if lo < -tol or hi > self.loss_bound + tol:
            raise ValueError(
                f"losses must lie in [0, loss_bound={self.loss_bound}], got range [{lo}, {hi}]"
            )
        return losses

    def _theta_lr(self, group: dict[str, Any], k: float) -> float:
        """The step :math:`c_\\theta/\\sqrt K` (or :math:`c_\\theta` without decay)."""
        c = group["lr_theta"]
        return c / math.sqrt(k) if self.theta_decay else c

    def _project_(self, params: list[Tensor]) -> None:
        if self.radius is None:
            return
        with torch.no_grad():
            nrm = math.sqrt(sum(float((p.detach() ** 2).sum()) for p in params))
            if nrm > self.radius:
                for p in params:
                    p.mul_(self.radius / nrm)

    @torch.no_grad()
    def step(self, closure: Callable[[], Tensor] | None = None) -> Tensor:  # type: ignore[override]
        """Play the planned round: evaluate the losses, update both players, return the losses.

        Args:
            closure: returns the per-sample losses of the samples drawn for the groups of the
                last :meth:`plan` (in the order of ``query.groups``), with autograd enabled.

        Returns:
            The detached losses, shape ``(r,)``.
        """
        if closure is None:
            raise ValueError("step needs a closure returning the per-sample losses")
        query = self._query
        if query is None:
            raise ValueError("call plan(r) before step(closure): no round is planned")
        c = query.weights.c
        with torch.enable_grad():
            losses = self._check_losses(closure(), query.r)
            params = [p for p in self._params() if p.requires_grad]
            # the game's state is float64 on the CPU; the losses live with the model
            weights = c * self._theta_weights(query).to(losses)
            objective = (weights * losses).sum()
            grads = torch.autograd.grad(objective, params, allow_unused=True)
        t = self.t + 1
        kappa = c * query.kappa  # the weighted gradient c_t g_t has norm <= c_t kappa_t G
        self.game["kappa_sq_sum"] = float(self.game["kappa_sq_sum"]) + kappa**2
        k_prev = float(self.game["theta_sq_sum"])
        self.game["theta_sq_sum"] = k_prev + self._theta_sq(kappa, grads)
        self.game["weight_sum"] = self.weight_sum + c
        self._update_theta(dict(zip(map(id, params), grads, strict=True)), k_prev, c)
        self.game["q_sum"] = self.game["q_sum"] + c * self.game["q"]
        self._update_q(losses.detach().to("cpu", torch.float64) / self.loss_bound, query, t)
        self.game["t"] = t
        self.game["samples"] += query.r
        self._query = None
        return losses.detach()

    def _update_theta(self, grads: dict[int, Tensor | None], k_prev: float, c: float) -> None:
        r"""Move the parameters from :math:`\theta_t` to :math:`\theta_{t+1}`.

        With :math:`K = K_t` (this round included) and :math:`\eta = c_\theta/\sqrt K`:

        * ``sgd``: :math:`\theta_{t+1} = \Pi(\theta_t - \eta g_t)`;
        * ``ftrl``: :math:`\theta_{t+1} = \Pi(\theta_1 - \eta' \sum_{j\le t} g_j)`,
          :math:`\eta' = c_\theta/\sqrt{K + \lambda}` (:attr:`kappa_bound_sq` =
          :math:`\lambda` bounds the next round's :math:`\kappa^2`, so the step that
          produced :math:`\theta_{t+1}` is no larger than the next gradient allows);
        * ``ftrl-prox``: the regulariser is :math:`\sum_{j\le t}\frac{\sigma_j}{2}
          \|\theta - \theta_j\|^2` with :math:`\sigma_{1:t} = 1/\eta`, so
          :math:`\theta_{t+1} = \Pi(\bar z_t - \eta\sum_{j\le t} g_j)`,
          :math:`\bar z_t = \eta\sum_{j\le t}\sigma_j\theta_j`.

        The average takes :math:`\theta_t` with the round weight ``c`` (:math:`c_t/C_t`).
        """
        k = float(self.game["theta_sq_sum"])
        alpha = c / self.game["weight_sum"]  # c_t / C_t (1/t when every weight is 1)
        for group in self.param_groups:
            lr = group["lr_theta"]

            def sigma_total(kk: float, lr: float = lr) -> float:
                if kk <= 0:
                    return 0.0
                return math.sqrt(kk) / lr if self.theta_decay else 1.0 / lr

            sigma = sigma_total(k) - sigma_total(k_prev)
            for p in group["params"]:
                state = self.state[p]
                if not state:
                    state["avg"] = torch.zeros_like(p)
                    if self.theta_update == "ftrl":
                        state["anchor"] = p.detach().clone()
                    if self.theta_update != "sgd":
                        state["grad_sum"] = torch.zeros_like(p)
                    if self.theta_update == "ftrl-prox":
                        state["center_sum"] = torch.zeros_like(p)
                state["avg"].add_(p.detach() - state["avg"], alpha=alpha)
                g = grads.get(id(p))
                if g is None:
                    g = torch.zeros_like(p)
                if self.theta_update == "sgd":
                    if k > 0:  # K = 0 only with zero gradients so far (theta_step="observed")
                        p.sub_(g, alpha=self._theta_lr(group, k))
                elif self.theta_update == "ftrl":
                    state["grad_sum"].add_(g)
                    eta = self._theta_lr(group, k + self.kappa_bound_sq)
                    p.copy_(state["anchor"] - eta * state["grad_sum"])
                else:
                    state["grad_sum"].add_(g)
                    state["center_sum"].add_(p.detach(), alpha=sigma)
                    total = sigma_total(k)
                    if total > 0:  # no regulariser yet: zero gradients so far, theta stays
                        p.copy_(state["center_sum"] / total - state["grad_sum"] / total)
        self._project_(self._params())

    def round(self, sampler: Any, r: int) -> Tensor:
        """``plan(r)``, draw one sample per chosen group from ``sampler``, ``step``."""
        query = self.plan(r)
        batch = sampler.sample(query.groups)
        target = self.model if self.model is not None else self._params()
        return self.step(lambda: self.loss_fn(target, batch))
