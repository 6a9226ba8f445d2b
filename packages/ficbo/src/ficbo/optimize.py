r"""Acquisitions, query policies and the optimisation loop :func:`run`.

Setting: a pool of ``N`` candidate points per task, cheap feedback on every pool point (``NaN``
where a source does not score it), an expensive objective revealed one query at a time. All
functions are batched over ``B`` independent tasks that advance in lockstep.

Expected improvement of a Gaussian :math:`N(\mu,\sigma^2)` over the incumbent :math:`y^*`
(maximisation), :math:`z = (\mu - y^*)/\sigma`:

.. math:: \mathrm{EI} = (\mu - y^*)\,\Phi(z) + \sigma\,\varphi(z).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from .heads import expected_improvement
from .model import FICBOModel
from .prior import standardize_feedback

__all__ = [
    "Policy",
    "RunResult",
    "blind_feedback_policy",
    "expected_improvement",
    "log_expected_improvement",
    "model_policy",
    "random_policy",
    "run",
    "select",
    "standardize_history",
]


@dataclass
class PoolState:
    """What a policy sees: pool, standardized feedback, history so far."""

    x_pool: torch.Tensor  # (B, N, d)
    fb_pool: torch.Tensor  # (B, S, N), standardized over the pool, NaN = unscored
    hist_idx: torch.Tensor  # (B, t) long
    y_hist: torch.Tensor  # (B, t)
    queried: torch.Tensor  # (B, N) bool
    generator: torch.Generator


Policy = Callable[[PoolState], torch.Tensor]


def log_expected_improvement(
    mean: torch.Tensor, std: torch.Tensor, best: torch.Tensor
) -> torch.Tensor:
    r""":math:`\log \mathrm{EI}`, finite where EI itself underflows to 0.

    :math:`\mathrm{EI} = \sigma h(z)` with :math:`h(z) = \varphi(z) + z\Phi(z)`. For
    :math:`z < 0`, :math:`\Phi(z) = \tfrac12 e^{-z^2/2}\,\mathrm{erfcx}(-z/\sqrt2)` (the scaled
    complementary error function stays O(1/|z|)), so
    :math:`\log h = -z^2/2 + \log(1/\sqrt{2\pi} + \tfrac z2\,\mathrm{erfcx}(-z/\sqrt2))`;
    the bracket is :math:`\approx \varphi(0)/z^2` and loses about :math:`\log_{10} z^2` digits
    to cancellation, harmless for ranking below :math:`|z| \approx 10^6`. Ranking by it is
    ranking by EI (log is increasing), without the ties at 0 that float EI makes far from the
    incumbent.
    """
    if (std <= 0).any():
        raise ValueError("std must be positive")
    z = (mean - best) / std
    zn = z.clamp_max(0.0)
    bracket = 1 / math.sqrt(2 * math.pi) + 0.5 * zn * torch.special.erfcx(-zn / math.sqrt(2))
    log_h_neg = -0.5 * zn**2 + torch.log(bracket.clamp_min(torch.finfo(z.dtype).tiny))
    zp = z.clamp_min(0.0)
    h_pos = torch.exp(-0.5 * zp**2) / math.sqrt(2 * math.pi) + zp * 0.5 * torch.erfc(
        -zp / math.sqrt(2)
    )
    return torch.log(std) + torch.where(z < 0, log_h_neg, torch.log(h_pos))


def select(scores: torch.Tensor, queried: torch.Tensor) -> torch.Tensor:
    """Index of the highest score among unqueried candidates, per row ``(B,)``.

    Raises:
        ValueError: when a row has no unqueried candidate left.
    """
    if scores.shape != queried.shape:
        raise ValueError(f"scores {tuple(scores.shape)} vs queried {tuple(queried.shape)}")
    if queried.all(-1).any():
        raise ValueError("a task has no unqueried candidate left")
    masked = torch.where(queried, torch.full_like(scores, -math.inf), scores)
    return masked.argmax(-1)


def random_policy(state: PoolState) -> torch.Tensor:
    """Uniform among unqueried candidates."""
    u = torch.rand(state.queried.shape, generator=state.generator, dtype=torch.float64)
    return select(u, state.queried)


def blind_feedback_policy(state: PoolState) -> torch.Tensor:
    """Trust the feedback blindly: argmax of the sources' mean standardized feedback.

    Points no source scores rank below every scored point (random order among themselves).
    """
    fb = state.fb_pool
    ok = ~torch.isnan(fb)
    n = ok.sum(1)
    mean = torch.where(ok, fb, torch.zeros_like(fb)).sum(1) / n.clamp_min(1)
    u = torch.rand(mean.shape, generator=state.generator, dtype=mean.dtype)
    score = torch.where(n > 0, mean + 1e-9 * u, -1e9 + u)
    return select(score, state.queried)


def standardize_history(y: torch.Tensor) -> torch.Tensor:
    """Per row ``(y - mean) / std`` over the history ``(B, t)``; std 1 where undefined or 0.

    The prior's objectives have mean 0 and variance 1; a real objective (an accuracy in
    [0, 1]) does not, and the optimiser may only use what it has seen: its own history.
    An affine map with positive slope leaves the argmax of EI unchanged for an exact
    posterior; for a pretrained model it moves the input into the range it was trained on.
    """
    mean = y.mean(-1, keepdim=True)
    if y.shape[-1] < 2:
        return y - mean
    std = y.std(-1, keepdim=True)
    return (y - mean) / torch.where(std > 0, std, torch.ones_like(std))


def model_policy(
    model: FICBOModel,
    *,
    acquisition: str = "ei",
    use_feedback: bool = True,
    standardize: bool = False,
) -> Policy:
    """Policy from a pretrained model: EI or Thompson (independent Gaussian draws per candidate).

    Args:
        model: a :class:`~ficbo.model.FICBOModel` (``n_sources = 0`` for history-only).
        acquisition: ``"ei"`` or ``"ts"``.
        use_feedback: ``False`` hides every source from the model.
        standardize: feed the model the history's objective values standardized by their own
            mean and std (:func:`standardize_history`), for objectives not on the prior's scale.
    """
    if acquisition not in ("ei", "ts"):
        raise ValueError(f"acquisition must be 'ei' or 'ts', got {acquisition!r}")

    def policy(state: PoolState) -> torch.Tensor:
        y_hist = standardize_history(state.y_hist) if standardize else state.y_hist
        fb = state.fb_pool
        if not use_feedback or model.config.n_sources == 0:
            fb = fb[:, :0]
        idx = state.hist_idx
        x_h = torch.gather(state.x_pool, 1, idx[..., None].expand(-1, -1, state.x_pool.shape[2]))
        fb_h = torch.gather(fb, 2, idx[:, None, :].expand(-1, fb.shape[1], -1))
        with torch.no_grad():
            # back to the CPU: the acquisition and its seeded draws run where the loop runs
            pred = model.predict(x_h, y_hist, fb_h, state.x_pool, fb).to("cpu", torch.float64)
        if acquisition == "ei":
            score = pred.ei(y_hist.max(-1, keepdim=True).values)
        else:  # Thompson: independent draws from the marginals
            score = pred.sample(state.generator)
        return select(score, state.queried)

    return policy


@dataclass
class RunResult:
    """Trajectories of one :func:`run`.

    Attributes:
        queries: ``(B, T)`` pool indices in query order (the first ``n_init`` are random).
        best: ``(B, T)`` best objective value found after each query.
        simple_regret: ``(B, T)`` :math:`\\max f - \\text{best}`.
    """

    queries: torch.Tensor
    best: torch.Tensor
    simple_regret: torch.Tensor


def run(
    x_pool: torch.Tensor,
    f_pool: torch.Tensor,
    fb_pool: torch.Tensor,
    policy: Policy,
    *,
    n_iter: int,
    n_init: int = 1,
    seed: int = 0,
) -> RunResult:
    """Optimise ``B`` pooled tasks with ``policy`` for ``n_iter`` queries after ``n_init`` random.

    Args:
        x_pool: ``(B, N, d)`` candidates.
        f_pool: ``(B, N)`` objective (revealed only at queried points; maximised).
        fb_pool: ``(B, S, N)`` raw feedback, ``NaN`` where a source does not score a point
            (masked, never read as zero); standardized here per task and source.
        policy: maps a :class:`PoolState` to the next index per task.
        seed: seeds the initial design and any randomness of the policy.

    Returns:
        :class:`RunResult` with ``T = n_init + n_iter`` columns.
    """
    if x_pool.dim() != 3:
        raise ValueError(f"x_pool must be (B, N, d), got shape {tuple(x_pool.shape)}")
    b, n, _ = x_pool.shape
    if tuple(f_pool.shape) != (b, n):
        raise ValueError(f"f_pool must be ({b}, {n}), got {tuple(f_pool.shape)}")
    if fb_pool.dim() != 3 or fb_pool.shape[0] != b or fb_pool.shape[2] != n:
        raise ValueError(f"fb_pool must be ({b}, S, {n}), got {tuple(fb_pool.shape)}")
    if torch.isnan(f_pool).any():
        raise ValueError("f_pool contains NaN")
    if n_init < 1 or n_iter < 0 or n_init + n_iter > n:
        raise ValueError(f"need n_init >= 1, n_iter >= 0, n_init + n_iter <= N={n}")
    g = torch.Generator().manual_seed(seed)
    state = PoolState(
        x_pool=x_pool,
        fb_pool=standardize_feedback(fb_pool.double()),
        hist_idx=torch.zeros(b, 0, dtype=torch.long),
        y_hist=torch.zeros(b, 0, dtype=f_pool.dtype),
        queried=torch.zeros(b, n, dtype=torch.bool),
        generator=g,
    )
    rows = torch.arange(b)
    for t in range(n_init + n_iter):
        idx = random_policy(state) if t < n_init else policy(state)
        state.queried = state.queried.clone()
        state.queried[rows, idx] = True
        state.hist_idx = torch.cat([state.hist_idx, idx[:, None]], 1)
        state.y_hist = torch.cat([state.y_hist, f_pool[rows, idx][:, None]], 1)
    best = torch.cummax(state.y_hist, 1).values
    regret = f_pool.max(-1, keepdim=True).values - best
    return RunResult(queries=state.hist_idx, best=best, simple_regret=regret)
