r"""The bottleneck: a router-weighted mixture of program distributions, fitted to the teacher.

For a state :math:`s` with feasible set :math:`F(s)`, program :math:`k` with scores
:math:`g_k(s) \in \mathbb R^n` and inverse temperature :math:`\beta_k = e^{\tau_k}` gives
:math:`p_k(\cdot \mid s) = \mathrm{softmax}_{F(s)}(\beta_k g_k(s))`. The router
:math:`w_\phi(s) = \mathrm{softmax}(\mathrm{MLP}_\phi(r(s)))` on the state summary :math:`r(s)`
(:func:`epb.features.router_features`) mixes them:

.. math:: q(a \mid s) = \sum_k w_{\phi,k}(s)\, p_k(a \mid s).

Router and temperatures are fitted by gradient descent on the mean teacher-student KL over
the collected teacher states :math:`\mathcal S`,

.. math:: \mathcal L(\phi, \tau) = \frac1{|\mathcal S|} \sum_{s}
    \sum_{a \in F(s)} t(a \mid s) \bigl(\log t(a \mid s) - \log q(a \mid s)\bigr),

computed in log space (:math:`\log q = \mathrm{logsumexp}_k(\log w_k + \log p_k)`), so the
"numerical gradient" half of EPB is plain autograd.

Example:
    >>> import torch
    >>> from epb.problems import random_tsp
    >>> from epb.policy import FunctionTeacher
    >>> from epb.programs import compile_program
    >>> teach = FunctionTeacher(lambda s: -s.dist[torch.arange(len(s.current)), s.current], 0.1)
    >>> bank = collect_states(teach, random_tsp(4, 8, torch.Generator().manual_seed(0)))
    >>> progs = [compile_program("def score(s):\n    return -s.d_cur")]
    >>> port = Portfolio(progs)
    >>> kl = port.fit(bank, steps=20)
    >>> bool(port.log_probs(bank).exp().sum(-1).sub(1).abs().max() < 1e-5)
    True
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from .features import FEATURES, node_features, router_features
from .problems import Instances, RolloutState
from .programs import Program, ProgramError, evaluate
from .rollout import rollout, start_nodes


@dataclass
class StateBank:
    """Teacher states: per-node features, router inputs, feasibility, the teacher's log-probs
    and the episode stage (``t / T`` in ``[0, 1)``) of each state."""

    feats: dict[str, Tensor]
    router_in: Tensor
    mask: Tensor
    teacher_logp: Tensor
    stage: Tensor
    cache: dict = field(default_factory=dict, repr=False)  # program source -> scores

    def __len__(self) -> int:
        return self.mask.shape[0]

    def index(self, idx) -> StateBank:
        f = {k: v[idx] for k, v in self.feats.items()}
        return StateBank(
            f, self.router_in[idx], self.mask[idx], self.teacher_logp[idx], self.stage[idx]
        )

    def to(self, dtype) -> StateBank:
        f = {k: v.to(dtype) for k, v in self.feats.items()}
        return StateBank(
            f, self.router_in.to(dtype), self.mask, self.teacher_logp.to(dtype), self.stage
        )

    @staticmethod
    def cat(banks: list[StateBank]) -> StateBank:
        f = {k: torch.cat([b.feats[k] for b in banks]) for k in banks[0].feats}
        return StateBank(
            f,
            *(
                torch.cat([getattr(b, a) for b in banks])
                for a in ("router_in", "mask", "teacher_logp", "stage")
            ),
        )

    def split(self, frac: float, generator: torch.Generator) -> tuple[StateBank, StateBank]:
        perm = torch.randperm(len(self), generator=generator)
        k = round(frac * len(self))
        return self.index(perm[:k]), self.index(perm[k:])


def collect_states(
    teacher,
    inst: Instances,
    starts: int = 1,
    actor=None,
    generator: torch.Generator | None = None,
) -> StateBank:
    """Roll out on ``inst`` and record every decision state with the teacher's distribution.

    Args:
        teacher: a :class:`epb.policy.Teacher`.
        starts: first nodes per instance (multi-start rows, as in POMO).
        actor: ``None`` (teacher greedy) or a step function choosing the actions, e.g. the
            student portfolio (DAgger-style states the student actually visits).
    """
    p = len(start_nodes(inst, starts))
    rows = inst.repeat(p) if p > 1 else inst
    first = start_nodes(inst, starts).repeat(inst.size)
    with torch.no_grad():
        t_step = teacher.bind(inst, p)
        st = RolloutState.start(rows, first if rows.kind == "tsp" else None)
        if rows.kind == "cvrp":
            st = st.step(first)
        total = st.expected_steps() if rows.kind == "tsp" else None
        banks, row_ids, steps = [], [], []
        n_rows = len(st.current)
        length = torch.zeros(n_rows)  # decisions each row takes (its own episode length)
        while not st.done():
            lp = t_step(st)
            feats = node_features(st)
            mask = st.feasible()
            live = ~(
                st.all_served() if rows.kind == "tsp" else (st.all_served() & (st.current == 0))
            )
            denom = total or (2 * (rows.n - 1))
            stage = torch.full((len(mask),), min(st.t / denom, 0.999))
            bank = StateBank(feats, router_features(feats, mask), mask, lp, stage)
            idx = live.nonzero().squeeze(-1)
            banks.append(bank.index(idx))
            row_ids.append(idx)
            steps.append(torch.full((len(idx),), float(st.t)))
            length[idx] += 1
            a = lp.argmax(-1) if actor is None else actor(st).masked_fill(~mask, -1e30).argmax(-1)
            st = st.step(a)
    bank = StateBank.cat(banks)
    if rows.kind == "cvrp":  # stage: the step's position within the row's own episode
        rid, t = torch.cat(row_ids), torch.cat(steps)
        t0 = t - t.min()  # CVRP rows start after the forced first customer
        bank.stage = (t0 / length[rid].clamp_min(1)).clamp(0, 0.999)
    return bank


class Router(nn.Module):
    """Small MLP from the router features to ``K`` mixture weights (log-softmax output);
    inputs are standardised with statistics frozen at :meth:`set_stats`."""

    def __init__(self, n_in: int, k: int, hidden: int = 32):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(n_in, hidden), nn.Tanh(), nn.Linear(hidden, k))
        self.register_buffer("mu", torch.zeros(n_in))
        self.register_buffer("sd", torch.ones(n_in))

    def set_stats(self, x: Tensor) -> None:
        self.mu = x.mean(0).to(self.mu.dtype)
        self.sd = x.std(0).clamp_min(1e-3).to(self.sd.dtype)

    def forward(self, x: Tensor) -> Tensor:
        return self.net((x - self.mu) / self.sd).log_softmax(-1)


def adam_minimise(params, loss_fn, steps: int, lr: float, betas=(0.9, 0.999), eps=1e-8):
    """Minimise ``loss_fn()`` over ``params`` with ``steps`` Adam steps (a few lines of plain
    torch: ``torch.optim`` would import the compiler stack, seconds per process, for nothing).

    Returns the last loss value.
    """
    params = [p for p in params if p.requires_grad]
    m = [torch.zeros_like(p) for p in params]
    v = [torch.zeros_like(p) for p in params]
    b1, b2 = betas
    last = float("nan")
    for t in range(1, steps + 1):
        loss = loss_fn()
        grads = torch.autograd.grad(loss, params, allow_unused=True)
        last = float(loss.detach())
        with torch.no_grad():
            for p, g, mi, vi in zip(params, grads, m, v, strict=True):
                if g is None:
                    continue
                mi.mul_(b1).add_(g, alpha=1 - b1)
                vi.mul_(b2).addcmul_(g, g, value=1 - b2)
                den = (vi / (1 - b2**t)).sqrt_().add_(eps)
                p.addcdiv_(mi, den, value=-lr / (1 - b1**t))
    return last


NEG = -1e9  # a finite "minus infinity": keeps gradients of masked entries at exactly zero


def masked_log_softmax(z: Tensor, mask: Tensor) -> Tensor:
    return z.masked_fill(~mask, NEG).log_softmax(-1)


def kl_per_state(t_logp: Tensor, q_logp: Tensor, mask: Tensor) -> Tensor:
    """``KL(t || q)`` per state over the feasible nodes, ``(S,)``."""
    t_logp = t_logp.clamp_min(NEG)
    t = t_logp.exp()
    diff = torch.where(mask & (t > 0), t_logp - q_logp, torch.zeros_like(t_logp))
    return (t * diff).sum(-1)


class Portfolio(nn.Module):
    """A program bank with learned temperatures and a router.

    Args:
        programs: the bank. hidden: router width.
    """

    def __init__(
        self,
        programs: list[Program],
        hidden: int = 32,
        n_router_in: int | None = None,
        weight_decay: float = 1e-3,
    ):
        super().__init__()
        from .features import ROUTER_FEATURES

        self.weight_decay = weight_decay
        self.programs = list(programs)
        k = len(self.programs)
        self.log_beta = nn.Parameter(torch.full((k,), math.log(10.0)))
        self.router = Router(n_router_in or len(ROUTER_FEATURES), k, hidden)

    @property
    def k(self) -> int:
        return len(self.programs)

    def program_scores(self, bank: StateBank) -> Tensor:
        """``(S, K, n)`` program scores (cached per bank and program)."""
        todo = list({p.source: p for p in self.programs if p.source not in bank.cache}.values())
        for p, g in zip(todo, evaluate(todo, bank.feats), strict=True):  # one sandbox batch
            if isinstance(g, ProgramError):
                raise g
            bank.cache[p.source] = g.detach()
        return torch.stack([bank.cache[p.source] for p in self.programs], 1)

    def program_log_probs(self, bank: StateBank, scores: Tensor | None = None) -> Tensor:
        """``(S, K, n)`` per-program log-distributions."""
        g = self.program_scores(bank) if scores is None else scores
        z = g * self.log_beta.exp().to(g.dtype)[None, :, None]
        return masked_log_softmax(z, bank.mask[:, None, :])

    def weights(self, bank: StateBank) -> Tensor:
        """``(S, K)`` router log-weights."""
        return self.router(bank.router_in)

    def log_probs(self, bank: StateBank, scores: Tensor | None = None) -> Tensor:
        """``(S, n)`` student log-distribution (the mixture)."""
        lp = self.program_log_probs(bank, scores)
        lw = self.weights(bank)
        out = torch.logsumexp(lw[:, :, None] + lp, 1)
        return out.masked_fill(~bank.mask, NEG)

    def loss(self, bank: StateBank, scores: Tensor | None = None) -> Tensor:
        return kl_per_state(bank.teacher_logp, self.log_probs(bank, scores), bank.mask).mean()

    def penalty(self) -> Tensor:
        """``weight_decay`` times the squared norm of the router's weight matrices."""
        w = [p for n, p in self.router.named_parameters() if n.endswith("weight")]
        return self.weight_decay * sum((p * p).sum() for p in w)

    def fit(self, bank: StateBank, steps: int = 200, lr: float = 0.03, reset: bool = True):
        """Fit router and temperatures by Adam on the KL plus the router's L2 penalty
        :meth:`penalty` (without it the router overfits small state banks: more steps lower the
        training KL and raise the validation KL, which would make every refit in the EPB loop
        look worse on validation); returns the final KL (without the penalty)."""
        if reset:
            self.router.set_stats(bank.router_in)
        scores = self.program_scores(bank)

        def objective():
            loss = self.loss(bank, scores)
            return loss + self.penalty() if self.weight_decay else loss

        adam_minimise(list(self.parameters()), objective, steps, lr)
        with torch.no_grad():
            return float(self.loss(bank, scores))

    @torch.no_grad()
    def fidelity(self, bank: StateBank) -> dict[str, float]:
        """Top-1 agreement with the teacher's argmax and mean KL."""
        q = self.log_probs(bank)
        agree = (q.argmax(-1) == bank.teacher_logp.argmax(-1)).float().mean()
        return {
            "agreement": float(agree),
            "kl": float(kl_per_state(bank.teacher_logp, q, bank.mask).mean()),
        }

    def step_fn(self, st: RolloutState) -> Tensor:
        """Student log-probs on a live rollout state (for greedy / multi-start rollouts)."""
        feats = node_features(st)
        mask = st.feasible()
        bank = StateBank(
            feats,
            router_features(feats, mask),
            mask,
            torch.zeros_like(feats["d_cur"]),
            torch.zeros(len(mask)),
        )
        scores = torch.stack(_all_scores(self.programs, feats), 1)
        return self.log_probs(bank, scores)

    def bind(self, inst: Instances, repeats: int = 1):
        return self.step_fn

    def clone_with(self, programs: list[Program]) -> Portfolio:
        """A new portfolio over ``programs`` (same width); temperatures of kept programs carry
        over, the router is re-initialised."""
        new = Portfolio(
            programs,
            self.router.net[0].out_features,
            self.router.net[0].in_features,
            self.weight_decay,
        )
        with torch.no_grad():
            for i, p in enumerate(programs):
                if p in self.programs:
                    new.log_beta[i] = self.log_beta[self.programs.index(p)]
        return new


def _all_scores(programs: list[Program], feats: dict[str, Tensor]) -> list[Tensor]:
    out = evaluate(programs, feats)
    for g in out:
        if isinstance(g, ProgramError):
            raise g
    return out


def program_rollout(program: Program, beta: float = 1.0):
    """Step function of a single program (greedy = argmax of its scores)."""

    def step(st: RolloutState) -> Tensor:
        return program.scores(node_features(st)) * beta

    return step


__all__ = [
    "FEATURES",
    "Portfolio",
    "Router",
    "StateBank",
    "collect_states",
    "kl_per_state",
    "program_rollout",
    "rollout",
]
