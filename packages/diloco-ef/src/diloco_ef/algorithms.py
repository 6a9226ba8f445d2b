r"""Two-phase optimizers: LA, SLA, DiLoCo and DiLoCo-EF.

All of them alternate an *inner phase* and an *outer step*. Starting from the outer iterate
:math:`x`, each worker :math:`m` runs :math:`H` steps of an inner optimizer on its own data
(:math:`x_m^{(0)} = x \to x_m^{(H)}`). The pseudo-gradient is
:math:`\Delta_m = x - x_m^{(H)}` (for inner SGD with step :math:`\eta_l`, the sum
:math:`\eta_l\sum_h g_m^{(h)}` of the inner steps), and the outer optimizer takes one step with
the averaged pseudo-gradient as its gradient:

.. math:: \bar\Delta = \frac1M\sum_m \Delta_m, \qquad x \leftarrow \mathrm{OuterOpt}(x, \bar\Delta).

- LA (one worker): SGD outer with step :math:`\eta_o`, :math:`x \leftarrow x - \eta_o\Delta`,
  i.e. linear interpolation between the start and the end of the inner phase (Lookahead).
- SLA: LA with inner momentum and an outer Nesterov step.
- DiLoCo: M workers; the only communication is one average of :math:`\Delta_m` per round.
- DiLoCo-EF: worker m sends :math:`s_m = C(e_m + \Delta_m)` and keeps
  :math:`e_m \leftarrow e_m + \Delta_m - s_m`; the outer step uses :math:`\frac1M\sum_m s_m`.

With :math:`H = 1`, inner SGD and outer SGD with learning rate 1, :math:`\bar\Delta =
\eta_l \bar g` and DiLoCo is synchronous data-parallel SGD.
"""

from __future__ import annotations

import copy
import logging
import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch
from torch import Tensor, nn

from ._rng import keyed_generator
from .comm import Communicator, LocalCommunicator
from .compressors import ApproxTopK, Compressor
from .error_feedback import ErrorFeedback
from .powersgd import powersgd_exchange

__all__ = [
    "LA",
    "DiLoCo",
    "NonFiniteRoundError",
    "local_step_size",
    "local_step_size_schedule",
    "sla",
]

_log = logging.getLogger("diloco_ef")

#: settings a checkpoint must share with the run that loads it
_CHECKPOINT_FIELDS = ("world_size", "inner_steps", "compressor", "error_feedback", "parameters")


class NonFiniteRoundError(FloatingPointError):
    """A round produced a non-finite loss or pseudo-gradient on some worker; it was rolled back."""


OptimizerFactory = Callable[[list[Tensor]], torch.optim.Optimizer]
#: ``loss_fn(model, worker_id, round, inner_step) -> scalar loss``
LossFn = Callable[[nn.Module, int, int, int], Tensor]


def local_step_size(c: float, inner_steps: int, total_rounds: int) -> float:
    r"""The local step size :math:`\eta_l = c / (H\sqrt T)` of DiLoCo-EF's analysis.

    Args:
        c: the constant (> 0).
        inner_steps: H >= 1.
        total_rounds: T >= 1, the number of outer rounds.

    Example:
        >>> local_step_size(0.8, 4, 100)
        0.02
    """
    if not c > 0:
        raise ValueError(f"c must be > 0, got {c!r}")
    _check_pos_int(inner_steps, "inner_steps")
    _check_pos_int(total_rounds, "total_rounds")
    return c / (inner_steps * math.sqrt(total_rounds))


def local_step_size_schedule(
    c: float, inner_steps: int, total_rounds: int
) -> Callable[[int], float]:
    """``round -> eta_l``: the rule above as a schedule for :class:`DiLoCo`'s ``inner_lr``.

    Rounds past ``total_rounds`` are refused, since the rule is tied to the horizon T.

    Example:
        >>> local_step_size_schedule(1.0, 2, 4)(3)
        0.25
    """
    lr = local_step_size(c, inner_steps, total_rounds)

    def schedule(round_index: int) -> float:
        if not 0 <= round_index < total_rounds:
            raise ValueError(f"round {round_index} is outside the horizon T={total_rounds}")
        return lr

    return schedule


def _check_pos_int(v: Any, name: str) -> None:
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {v!r}")


class LA:
    r"""LA (Lookahead-style two-phase optimizer) on one worker, as a torch.optim-style wrapper.

    Every call of :meth:`step` is an inner step; every ``inner_steps``-th call then sets the
    outer parameters' gradient to the pseudo-gradient :math:`x_{outer} - x_{inner}`, steps the
    outer optimizer and copies the outer parameters into the model.

    Args:
        params: the model's parameters (the inner iterate).
        inner: ``params -> optimizer`` for the inner phase.
        outer: ``params -> optimizer`` for the outer step (on private copies of the parameters).
        inner_steps: H >= 1.

    Example:
        >>> w = torch.nn.Parameter(torch.tensor([1.0]))
        >>> opt = LA([w], lambda p: torch.optim.SGD(p, lr=0.1),
        ...          lambda p: torch.optim.SGD(p, lr=0.5), inner_steps=2)
        >>> for _ in range(2):
        ...     opt.zero_grad(); (w ** 2).sum().backward(); _ = opt.step()
        >>> w  # inner: 1 -> 0.8 -> 0.64; outer: 1 - 0.5 * (1 - 0.64)
        Parameter containing:
        tensor([0.8200], requires_grad=True)
    """

    def __init__(
        self,
        params: Iterable[Tensor],
        inner: OptimizerFactory,
        outer: OptimizerFactory,
        inner_steps: int,
    ):
        _check_pos_int(inner_steps, "inner_steps")
        self.params = list(params)
        if not self.params:
            raise ValueError("LA got an empty parameter list")
        self.inner = inner(self.params)
        self.slow = [p.detach().clone().requires_grad_(True) for p in self.params]
        self.outer = outer(self.slow)
        self.inner_steps = inner_steps
        self.steps = 0

    @property
    def param_groups(self) -> list[dict[str, Any]]:
        return self.inner.param_groups

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.inner.zero_grad(set_to_none=set_to_none)

    @torch.no_grad()
    def step(self, closure: Callable[[], Tensor] | None = None) -> Tensor | None:
        loss = self.inner.step(closure) if closure is not None else self.inner.step()
        self.steps += 1
        if self.steps % self.inner_steps == 0:
            for s, p in zip(self.slow, self.params, strict=True):
                s.grad = s.detach() - p.detach()
            self.outer.step()
            self.outer.zero_grad(set_to_none=True)
            for s, p in zip(self.slow, self.params, strict=True):
                p.copy_(s)
        return loss

    def state_dict(self) -> dict[str, Any]:
        return {
            "inner": self.inner.state_dict(),
            "outer": self.outer.state_dict(),
            "slow": [s.detach().clone() for s in self.slow],
            "steps": self.steps,
            "inner_steps": self.inner_steps,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state["inner_steps"] != self.inner_steps:
            raise ValueError(
                f"checkpoint has inner_steps={state['inner_steps']}, this LA {self.inner_steps}"
            )
        self.inner.load_state_dict(state["inner"])
        self.outer.load_state_dict(state["outer"])
        with torch.no_grad():
            for s, v in zip(self.slow, state["slow"], strict=True):
                s.copy_(v)
        self.steps = int(state["steps"])


def sla(
    params: Iterable[Tensor],
    *,
    lr: float,
    momentum: float,
    outer_lr: float,
    outer_momentum: float,
    inner_steps: int,
    nesterov: bool = True,
) -> LA:
    """SLA: LA with heavy-ball inner SGD and an outer (by default Nesterov) momentum step.

    Example:
        >>> w = torch.nn.Parameter(torch.ones(2))
        >>> opt = sla([w], lr=0.1, momentum=0.9, outer_lr=0.7, outer_momentum=0.9, inner_steps=4)
        >>> opt.inner_steps
        4
    """
    return LA(
        params,
        lambda p: torch.optim.SGD(p, lr=lr, momentum=momentum),
        lambda p: torch.optim.SGD(p, lr=outer_lr, momentum=outer_momentum, nesterov=nesterov),
        inner_steps,
    )


class DiLoCo:
    r"""DiLoCo with M workers, optionally with compression and per-worker error feedback.

    Args:
        model: the model, or one replica per local worker (same parameter shapes). A single
            module is deep-copied for the other simulated workers. After each round every
            replica holds the outer parameters.
        inner: ``params -> optimizer``, built once per worker (its state persists across rounds).
        outer: ``params -> optimizer`` on the outer parameters.
        inner_steps: H >= 1.
        communicator: how workers average; default :class:`LocalCommunicator` with
            ``num_workers`` simulated workers.
        num_workers: M for the default communicator (ignored otherwise).
        compressor: compress pseudo-gradients (None: plain DiLoCo, dense average).
        error_feedback: keep per-worker error buffers (DiLoCo-EF); False sends C(Δ) directly.
        inner_lr: optional ``round -> lr`` applied to every inner param group at each round
            start (e.g. :func:`local_step_size_schedule`); a value that is not a finite number
            >= 0 raises ``ValueError`` before the round changes anything.
        seed: base seed of the compressors' randomness (must be equal on all ranks).
        on_nonfinite: what a round does when any worker's mean inner loss or pseudo-gradient
            is not finite (checked collectively, before error buffers or the outer state
            change): it is rolled back (replicas, their buffers and inner optimizer states back
            to the round's start) and then ``"raise"`` raises :class:`NonFiniteRoundError`
            (the round can be retried), ``"skip"`` logs a warning, records the round with
            ``skipped = 1`` and moves on to the next one, ``"retry"`` logs a warning and runs
            the round's inner phase again with the inner lr multiplied by
            ``retry_lr_factor`` (then its square, ...), at most ``max_retries`` times, and
            raises :class:`NonFiniteRoundError` (rolled back) when every attempt failed.
            The smaller lr applies to that round only (without an ``inner_lr`` schedule the
            optimizer's own lr is restored afterwards); the record's ``retries`` counts them.
        retry_lr_factor: the factor in (0, 1) of ``"retry"`` (default 0.5).
        max_retries: retries per round of ``"retry"``, an integer >= 1 (default 3).

    Start-up agreement: on a process group the constructor checks that all ranks share the
    settings in :meth:`fingerprint` (``ValueError`` naming the first field that differs) and
    then broadcasts rank 0's parameters and buffers, so replicas built without a common seed
    start equal; :meth:`load_state_dict` re-checks and broadcasts rank 0's outer parameters and
    outer optimizer state.

    Attributes:
        history: one dict per round: ``round``, ``loss`` (mean over local workers and inner
            steps), ``bits`` (the message size: bits of the local workers' payloads), ``alpha``
            (contraction factor over all tensors and local workers; 1 without compression),
            ``skipped`` (1 for a rolled-back round), and the exchange measured by the
            communicator's meter for one rank: ``bytes_handed`` (given to the collectives),
            ``bytes_sent`` and ``bytes_received`` (the traffic those collectives cause).

    Example:
        >>> torch.manual_seed(0) and None
        >>> model = torch.nn.Linear(3, 1)
        >>> algo = DiLoCo(model, lambda p: torch.optim.SGD(p, lr=0.1),
        ...               lambda p: torch.optim.SGD(p, lr=0.7, momentum=0.9, nesterov=True),
        ...               inner_steps=5, num_workers=2)
        >>> x, y = torch.randn(8, 3), torch.randn(8, 1)
        >>> loss = lambda m, w, r, h: ((m(x[4 * w:4 * w + 4]) - y[4 * w:4 * w + 4]) ** 2).mean()
        >>> for _ in range(3):
        ...     rec = algo.round(loss)
        >>> len(algo.history), algo.history[0]["alpha"]
        (3, 1.0)
    """

    def __init__(
        self,
        model: nn.Module | Sequence[nn.Module],
        inner: OptimizerFactory,
        outer: OptimizerFactory,
        *,
        inner_steps: int,
        communicator: Communicator | None = None,
        num_workers: int = 1,
        compressor: Compressor | None = None,
        error_feedback: bool = True,
        inner_lr: Callable[[int], float] | None = None,
        seed: int = 0,
        on_nonfinite: str = "raise",
        retry_lr_factor: float = 0.5,
        max_retries: int = 3,
    ):
        _check_pos_int(inner_steps, "inner_steps")
        if on_nonfinite not in ("raise", "skip", "retry"):
            raise ValueError(
                f"on_nonfinite must be 'raise', 'skip' or 'retry', got {on_nonfinite!r}"
            )
        ok = isinstance(retry_lr_factor, (int, float)) and not isinstance(retry_lr_factor, bool)
        if not ok or not 0 < retry_lr_factor < 1:
            raise ValueError(f"retry_lr_factor must be a number in (0, 1), got {retry_lr_factor!r}")
        _check_pos_int(max_retries, "max_retries")
        self.comm = communicator if communicator is not None else LocalCommunicator(num_workers)
        n_local = len(self.comm.worker_ids)
        if isinstance(model, nn.Module):
            self.replicas = [model] + [copy.deepcopy(model) for _ in range(n_local - 1)]
        else:
            self.replicas = list(model)
            if len(self.replicas) != n_local:
                raise ValueError(
                    f"got {len(self.replicas)} model replicas for {n_local} local workers"
                )
        shapes = [tuple(p.shape) for p in self.replicas[0].parameters()]
        if not shapes:
            raise ValueError("the model has no parameters")
        for i, m in enumerate(self.replicas[1:], start=1):
            theirs = [tuple(p.shape) for p in m.parameters()]
            if theirs != shapes:
                raise ValueError(f"replica {i} has parameter shapes {theirs}, replica 0 {shapes}")
        if compressor is not None and not isinstance(compressor, Compressor):
            raise ValueError(f"compressor must be a Compressor or None, got {compressor!r}")
        if isinstance(compressor, ApproxTopK) and not compressor.refine:
            raise ValueError("ApproxTopK(refine=False) sends a variable count; use refine=True")
        self.compressor = compressor
        self.inner_steps = inner_steps
        self.inner_lr = inner_lr
        self.seed = int(seed)
        self.on_nonfinite = on_nonfinite
        self.retry_lr_factor = float(retry_lr_factor)
        self.max_retries = max_retries
        self.error_feedback = bool(error_feedback)
        src = list(self.replicas[0].parameters())
        self.outer_params = [p.detach().clone().requires_grad_(True) for p in src]
        self.outer_opt = outer(self.outer_params)
        self.inner_opts = [inner(list(m.parameters())) for m in self.replicas]
        # Agree on the settings first: a broadcast between mismatched shapes would fail or hang.
        self.comm.check_agreement(self.fingerprint())
        first = self.replicas[0]
        self.comm.broadcast_(list(first.parameters()) + list(first.buffers()))
        with torch.no_grad():
            for x, p in zip(self.outer_params, first.parameters(), strict=True):
                x.copy_(p)
            for m in self.replicas[1:]:
                for p, q in zip(m.parameters(), first.parameters(), strict=True):
                    p.copy_(q)
                for b, c in zip(m.buffers(), first.buffers(), strict=True):
                    b.copy_(c)
        self.ef = [
            ErrorFeedback(compressor, enabled=error_feedback) if compressor is not None else None
            for _ in self.replicas
        ]
        self.rounds_done = 0
        self.history: list[dict[str, float]] = []

    @property
    def model(self) -> nn.Module:
        """The first local replica (holds the outer parameters after each round)."""
        return self.replicas[0]

    def fingerprint(self) -> dict[str, str]:
        """The settings every rank must share, as strings: world size, H, the compressor and
        its parameters, error feedback, seed, the non-finite policy, parameter and buffer
        names, shapes and dtypes, the optimizers' types and the outer hyperparameters."""
        m = self.replicas[0]
        outer_groups = [
            {k: v for k, v in g.items() if k != "params"} for g in self.outer_opt.param_groups
        ]
        return {
            "world_size": str(self.comm.world_size),
            "inner_steps": str(self.inner_steps),
            "compressor": "None" if self.compressor is None else self.compressor.config(),
            "error_feedback": str(self.error_feedback),
            "seed": str(self.seed),
            "on_nonfinite": self.on_nonfinite
            + (
                f" (factor {self.retry_lr_factor!r}, at most {self.max_retries})"
                if self.on_nonfinite == "retry"
                else ""
            ),
            "parameters": repr([(n, tuple(p.shape), p.dtype) for n, p in m.named_parameters()]),
            "buffers": repr([(n, tuple(b.shape), b.dtype) for n, b in m.named_buffers()]),
            "inner_optimizer": type(self.inner_opts[0]).__name__,
            "outer_optimizer": f"{type(self.outer_opt).__name__}{outer_groups!r}",
            "inner_lr schedule": "none" if self.inner_lr is None else "given",
        }

    def _scheduled_lr(self) -> float | None:
        if self.inner_lr is None:
            return None
        lr = self.inner_lr(self.rounds_done)
        ok = isinstance(lr, (int, float)) and not isinstance(lr, bool)
        if not ok or not math.isfinite(lr) or lr < 0:
            raise ValueError(
                f"inner_lr({self.rounds_done}) returned {lr!r}; it must be a finite number >= 0"
            )
        return float(lr)

    def _inner_phase(self, w: int, loss_fn: LossFn, lr: float | None) -> float:
        model, opt, wid = self.replicas[w], self.inner_opts[w], self.comm.worker_ids[w]
        if lr is not None:
            for g in opt.param_groups:
                g["lr"] = lr
        total = 0.0
        for h in range(self.inner_steps):

            def closure(h: int = h) -> Tensor:
                opt.zero_grad(set_to_none=True)
                loss = loss_fn(model, wid, self.rounds_done, h)
                loss.backward()
                return loss

            total += float(opt.step(closure).detach())
        return total / self.inner_steps

    def _snapshot(self) -> list[tuple[dict[str, Any], list[Tensor]]]:
        # What an inner phase changes besides the parameters (which restart from the outer
        # iterate): each worker's inner optimizer state and its module buffers.
        return [
            (copy.deepcopy(o.state_dict()), [b.detach().clone() for b in m.buffers()])
            for o, m in zip(self.inner_opts, self.replicas, strict=True)
        ]

    def _rollback(self, snap: list[tuple[dict[str, Any], list[Tensor]]]) -> None:
        with torch.no_grad():
            for m, o, (state, bufs) in zip(self.replicas, self.inner_opts, snap, strict=True):
                for p, x in zip(m.parameters(), self.outer_params, strict=True):
                    p.copy_(x)
                for b, v in zip(m.buffers(), bufs, strict=True):
                    b.copy_(v)
                # load_state_dict adopts the given tensors (momentum buffers) without copying,
                # and the next attempt updates them in place: load a copy so that the snapshot
                # survives for a further rollback (retries).
                o.load_state_dict(copy.deepcopy(state))

    def round(self, loss_fn: LossFn) -> dict[str, float]:
        """Run one round: H inner steps per local worker, one exchange, one outer step.

        The round is a transaction: nothing outside the inner replicas changes until every
        worker has reported a finite loss and pseudo-gradient; otherwise it is rolled back
        (see ``on_nonfinite``).
        """
        lr = base_lr = self._scheduled_lr()
        snap = self._snapshot()
        meter0 = self.comm.meter.totals()
        retries = 0
        while True:
            losses = [self._inner_phase(w, loss_fn, lr) for w in range(len(self.replicas))]
            can_retry = self.on_nonfinite == "retry" and retries < self.max_retries
            rec = self._finish_round(losses, snap, meter0, retries, can_retry)
            if rec is not None:
                break
            # Rolled back (optimizer states, hence their lrs, are the round start's again):
            # the next attempt runs with the lr times factor ** retries.
            retries += 1
            factor = self.retry_lr_factor**retries
            if base_lr is not None:
                lr = base_lr * factor
            else:
                for o in self.inner_opts:
                    for g in o.param_groups:
                        g["lr"] = g["lr"] * factor
        if retries and self.inner_lr is None:  # the user's own lr again for the next round
            for o, (state, _) in zip(self.inner_opts, snap, strict=True):
                for g, saved in zip(o.param_groups, state["param_groups"], strict=True):
                    g["lr"] = saved["lr"]
        return rec

    def _finish_round(
        self,
        losses: list[float] | None,
        snap: list[tuple[dict[str, Any], list[Tensor]]],
        meter0: dict[str, float],
        retries: int = 0,
        can_retry: bool = False,
    ) -> dict[str, float] | None:
        """Everything after the inner phases: the collective finiteness check, the exchange
        and the outer step (or the rollback). ``losses`` None: not known (the hook API).
        None: rolled back for a retry (``can_retry``)."""
        known = losses is not None
        if losses is None:
            losses = [math.nan] * len(self.replicas)
        with torch.no_grad():
            deltas = [
                [x.detach() - p.detach() for x, p in zip(self.outer_params, ps, strict=True)]
                for ps in (list(m.parameters()) for m in self.replicas)
            ]
            local_ok = [
                (math.isfinite(loss) or not known)
                and bool(torch.stack([d.isfinite().all() for d in ds]).all())
                for loss, ds in zip(losses, deltas, strict=True)
            ]
            ok = self.comm.gather_flags(local_ok)
            if not all(ok):
                return self._abort(snap, ok, meter0, retries, can_retry)
            bits, sq_in, sq_err = 0, 0.0, 0.0
            if self.compressor is None:
                averaged = self.comm.average_dense_bucket(deltas)
                bits = sum(d.numel() * torch.finfo(d.dtype).bits for ds in deltas for d in ds)
            elif getattr(self.compressor, "shared_factors", False):
                # PowerSGD: two all-reduces of factors, with the Q shared by all workers.
                averaged, sents = powersgd_exchange(
                    self.compressor,  # type: ignore[arg-type]
                    self.comm,
                    self.ef,  # type: ignore[arg-type]
                    deltas,
                    lambda i: self._generator(i, 0),
                )
                for sent in (x for mine in sents for x in mine):
                    bits += sent.bits
                    sq_in += sent.sq_input
                    sq_err += (1.0 - sent.alpha) * sent.sq_input
            else:
                shared = self._shared_absmax(deltas)
                payloads = []
                for w, ds in enumerate(deltas):
                    mine = []
                    for i, d in enumerate(ds):
                        gen = self._generator(i, self.comm.worker_ids[w])
                        kw = {} if shared is None else {"shared_absmax": shared[i]}
                        sent = self.ef[w].send(i, d, gen, **kw)
                        mine.append(sent.payload)
                        bits += sent.bits
                        sq_in += sent.sq_input
                        sq_err += (1.0 - sent.alpha) * sent.sq_input
                    payloads.append(mine)
                averaged = self.comm.average_payloads_bucket(self.compressor, payloads)
            for x, g in zip(self.outer_params, averaged, strict=True):
                x.grad = g
            self.outer_opt.step()
            self.outer_opt.zero_grad(set_to_none=True)
            for m in self.replicas:
                for p, x in zip(m.parameters(), self.outer_params, strict=True):
                    p.copy_(x)
        alpha = 1.0 - sq_err / sq_in if sq_in > 0 else 1.0
        rec = {
            "round": self.rounds_done,
            "loss": sum(losses) / len(losses),
            "bits": bits,
            "alpha": alpha,
            "skipped": 0,
            "retries": retries,
            **self._traffic(meter0),
        }
        self.history.append(rec)
        self.rounds_done += 1
        return rec

    def _shared_absmax(self, deltas: list[list[Tensor]]) -> Tensor | None:
        # Compressors with a shared scale (SharedScaleQuant) need max_m |e_m + delta_m|_inf per
        # tensor from all workers before anyone compresses: one all-reduce (MAX) of a vector.
        if not getattr(self.compressor, "needs_shared_scale", False):
            return None
        local = [
            torch.stack([ef.pending(i, d).abs().max().double() for i, d in enumerate(ds)])
            for ef, ds in zip(self.ef, deltas, strict=True)
        ]
        return self.comm.max_bucket(local)

    def _traffic(self, before: dict[str, float]) -> dict[str, float]:
        now = self.comm.meter.totals()
        return {f"bytes_{k}": now[k] - before[k] for k in ("handed", "sent", "received")}

    def _abort(
        self,
        snap: list[tuple[dict[str, Any], list[Tensor]]],
        ok: list[bool],
        meter0,
        retries: int,
        can_retry: bool,
    ) -> dict[str, float] | None:
        self._rollback(snap)
        bad = [w for w, f in enumerate(ok) if not f]
        what = f"round {self.rounds_done}: non-finite loss or pseudo-gradient on workers {bad}"
        if can_retry:
            _log.warning(
                "%s; round rolled back, retry %d of %d with the inner lr x %r",
                what,
                retries + 1,
                self.max_retries,
                self.retry_lr_factor ** (retries + 1),
            )
            return None
        if self.on_nonfinite == "retry":
            raise NonFiniteRoundError(
                f"{what} after {retries} retries with smaller inner lr; the round was rolled back"
            )
        if self.on_nonfinite == "raise":
            raise NonFiniteRoundError(what + "; the round was rolled back")
        _log.warning("%s; round rolled back and skipped", what)
        rec = {
            "round": self.rounds_done,
            "loss": math.nan,
            "bits": 0,
            "alpha": math.nan,
            "skipped": 1,
            "retries": 0,
            **self._traffic(meter0),
        }
        self.history.append(rec)
        self.rounds_done += 1
        return rec

    def _generator(self, tensor_index: int, worker_id: int) -> torch.Generator:
        # Shared-randomness compressors (Random-k) must draw the same coordinates on every
        # worker; the others draw independently per worker.
        if self.compressor is not None and self.compressor.shared_randomness:
            return keyed_generator(self.seed, self.rounds_done, tensor_index)
        return keyed_generator(self.seed, self.rounds_done, tensor_index, worker_id + 1)

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to resume: replicas, inner/outer optimizers, EF buffers, counters,
        the torch CPU RNG state."""
        return {
            "fingerprint": self.fingerprint(),
            "world_size": self.comm.world_size,
            "worker_ids": list(self.comm.worker_ids),
            "inner_steps": self.inner_steps,
            "rounds_done": self.rounds_done,
            "seed": self.seed,
            "replicas": [m.state_dict() for m in self.replicas],
            "inner_opts": [o.state_dict() for o in self.inner_opts],
            "outer_params": [x.detach().clone() for x in self.outer_params],
            "outer_opt": self.outer_opt.state_dict(),
            "ef": [e.state_dict() if e is not None else None for e in self.ef],
            "history": [dict(h) for h in self.history],
            "torch_rng": torch.get_rng_state(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`; refuses a checkpoint of another world size, worker
        layout, H, compressor (or compressor settings), error-feedback setting or parameter
        layout. On a process group all ranks must resume at the same round; rank 0's outer
        parameters and outer optimizer state are then broadcast."""
        theirs = state.get("fingerprint")
        if theirs is not None:
            mine = self.fingerprint()
            for key in _CHECKPOINT_FIELDS:
                if theirs.get(key) != mine[key]:
                    raise ValueError(
                        f"checkpoint was written with {key}={theirs.get(key)}, "
                        f"this run has {key}={mine[key]}"
                    )
        if state["world_size"] != self.comm.world_size:
            raise ValueError(
                f"checkpoint was written with world_size={state['world_size']}, "
                f"resuming with world_size={self.comm.world_size}"
            )
        if list(state["worker_ids"]) != list(self.comm.worker_ids):
            raise ValueError(
                f"checkpoint holds workers {state['worker_ids']}, this process "
                f"{self.comm.worker_ids}"
            )
        if state["inner_steps"] != self.inner_steps:
            raise ValueError(
                f"checkpoint has inner_steps={state['inner_steps']}, this run {self.inner_steps}"
            )
        if (state["ef"][0] is None) != (self.ef[0] is None):
            raise ValueError("checkpoint and this run disagree on whether compression is used")
        for m, s in zip(self.replicas, state["replicas"], strict=True):
            m.load_state_dict(s)
        for o, s in zip(self.inner_opts, state["inner_opts"], strict=True):
            o.load_state_dict(s)
        with torch.no_grad():
            for x, v in zip(self.outer_params, state["outer_params"], strict=True):
                x.copy_(v)
        self.outer_opt.load_state_dict(state["outer_opt"])
        for e, s in zip(self.ef, state["ef"], strict=True):
            if e is not None:
                e.load_state_dict(s)
        self.rounds_done = int(state["rounds_done"])
        self.seed = int(state["seed"])
        self.history = [dict(h) for h in state["history"]]
        torch.set_rng_state(state["torch_rng"])
        self.comm.check_agreement({**self.fingerprint(), "rounds_done": str(self.rounds_done)})
        self.comm.broadcast_(self.outer_params)
        self.outer_opt.load_state_dict(self.comm.broadcast_object(self.outer_opt.state_dict()))
        with torch.no_grad():
            for m in self.replicas:
                for p, x in zip(m.parameters(), self.outer_params, strict=True):
                    p.copy_(x)
