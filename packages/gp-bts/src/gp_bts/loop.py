"""``gp_bts.run``: one batched Bayesian-optimisation run of a policy, returned as a trace.

Each round the loop (1) builds the BoTorch GP on all data so far (:mod:`gp_bts.models`),
(2) asks the policy for ``Q`` candidates (:mod:`gp_bts.policy`), (3) evaluates the objective's
noise-free values, adds Gaussian noise of standard deviation ``noise``, checks them, and
(4) appends them. Regret is measured on the noise-free values (:mod:`gp_bts.regret`).

Randomness: the policy uses the global torch RNG inside ``torch.random.fork_rng`` seeded by
``seed`` (the caller's RNG state is untouched); the observation noise and the continuous
candidate sets have their own streams from ``seed``, identical across policies, so runs of
different policies with the same seed see the same noise and the same candidates.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch.quasirandom import SobolEngine

from . import policy as pol
from .models import NOISELESS_JITTER, KernelSpec, build_model
from .objectives import Objective
from .regret import cumulative_regret, simple_regret

__all__ = ["POLICIES", "Trace", "run"]

POLICIES = ("bts", "bts-us", "qucb", "qlogei", "random")


@dataclass
class Trace:
    """What a run did.

    Attributes:
        policy, batch_size, rounds: the run's settings.
        X: queries ``(N, d)`` in order (``N = n_init + rounds * batch_size``).
        values: noise-free ``f(X)`` ``(N,)``; observations: what the model saw ``(N,)``.
        round_index: round of each query (0 = initial design, 1.. = policy rounds).
        phase: per query, ``"init"``, ``"us"`` (uncertainty sampling) or ``"policy"``.
        sigma: start-of-round posterior standard deviation at each query (NaN where no
            model was used: initial design, random search).
        simple_regret, cumulative_regret: per evaluation, ``None`` without a known optimum.
        round_seconds: wall time of each policy round (model + selection + evaluation).
        wall_seconds: total.
    """

    policy: str
    batch_size: int
    rounds: int
    X: torch.Tensor
    values: torch.Tensor
    observations: torch.Tensor
    round_index: torch.Tensor
    phase: list[str]
    sigma: torch.Tensor
    optimum: float | None
    simple_regret: torch.Tensor | None
    cumulative_regret: torch.Tensor | None
    round_seconds: list[float] = field(default_factory=list)
    wall_seconds: float = 0.0


def _int(name: str, v, low: int) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < low:
        raise ValueError(f"{name} must be an int >= {low}, got {v!r}")
    return v


def _check_bounds(bounds) -> torch.Tensor:
    b = torch.as_tensor(bounds, dtype=torch.float64)
    if b.ndim != 2 or b.shape[0] != 2 or b.shape[1] < 1:
        raise ValueError(f"bounds must have shape (2, d), got {tuple(b.shape)}")
    if not torch.isfinite(b).all():
        raise ValueError("bounds must be finite")
    if not (b[0] < b[1]).all():
        bad = (b[0] >= b[1]).nonzero().flatten().tolist()
        raise ValueError(f"bounds need low < high in every dimension; not in dims {bad}")
    return b


def _evaluate(fn: Callable, x: torch.Tensor) -> torch.Tensor:
    out = torch.as_tensor(fn(x), dtype=torch.float64)
    n = x.shape[0]
    if out.shape == (n, 1):
        out = out.squeeze(-1)
    if out.shape != (n,):
        raise ValueError(
            f"the objective returned shape {tuple(out.shape)} for {n} points; expected ({n},)"
        )
    if not torch.isfinite(out).all():
        raise ValueError("the objective returned NaN or inf; refusing to fit a GP to it")
    return out


def run(
    objective: Objective | Callable[[torch.Tensor], torch.Tensor],
    bounds: torch.Tensor | None = None,
    *,
    batch_size: int,
    rounds: int,
    policy: str = "bts",
    noise: float = 0.0,
    seed: int = 0,
    candidates: torch.Tensor | None = None,
    n_candidates: int = 1000,
    optimum: float | None = None,
    kernel: KernelSpec | None = None,
    n_init: int | None = None,
    us_rounds: int = 1,
    sampler: str = "auto",
    ucb_beta: float = 2.0,
    maximizer: str = "candidates",
) -> Trace:
    """Run ``rounds`` rounds of ``batch_size`` queries of ``policy`` and return the :class:`Trace`.

    Args:
        objective: an :class:`~gp_bts.objectives.Objective` (its box, optimum, candidates and
            known kernel are the defaults) or a callable ``X (n, d) -> f(X) (n,)``, noise-free.
        bounds: ``(2, d)`` box with low < high (taken from an ``Objective`` if omitted).
        batch_size: :math:`Q \\ge 1`; rounds: :math:`T \\ge 1`.
        policy: ``bts`` (batched TS, no warm-up), ``bts-us`` (``us_rounds`` rounds of
            uncertainty sampling first, then BTS), ``qucb``, ``qlogei``, ``random``.
        noise: observation noise standard deviation (0: exact observations; the model then
            uses the fixed jitter variance ``NOISELESS_JITTER``).
        seed: seeds the policy, the noise and the candidate sets.
        candidates: a finite domain ``(n, d)``; without one, each round draws
            ``n_candidates`` fresh scrambled-Sobol points in the box.
        optimum: the maximum of the objective, for regret (from an ``Objective`` if omitted).
        kernel: the known prior (no fitting); ``None`` fits the GP's hyperparameters.
        n_init: initial Sobol design size (default 0 with a known kernel, else ``d + 1``);
            its evaluations count in the regret of every policy alike.
        us_rounds: rounds of uncertainty sampling for ``bts-us``.
        sampler: ``auto``/``exact``/``pathwise`` posterior sampling for BTS.
        ucb_beta: the :math:`\\beta` of qUCB.
        maximizer: how BTS maximises a sample: ``candidates`` (its best candidate) or
            ``lbfgs`` (box domains only: pathwise samples, each refined from its best
            candidates by multi-start L-BFGS-B, :mod:`gp_bts.pathmax`).
    """
    if isinstance(objective, Objective):
        bounds = objective.bounds if bounds is None else bounds
        candidates = objective.candidates if candidates is None else candidates
        optimum = objective.optimum if optimum is None else optimum
        kernel = objective.kernel if kernel is None else kernel
    if not callable(objective):
        raise ValueError(f"objective must be callable, got {type(objective).__name__}")
    if bounds is None:
        raise ValueError("bounds are required for a plain callable objective")
    b = _check_bounds(bounds)
    d = b.shape[1]
    q = _int("batch_size", batch_size, 1)
    _int("rounds", rounds, 1)
    if policy not in POLICIES:
        raise ValueError(f"policy must be one of {POLICIES}, got {policy!r}")
    if not (isinstance(noise, (int, float)) and math.isfinite(noise) and noise >= 0):
        raise ValueError(f"noise must be a finite standard deviation >= 0, got {noise!r}")
    _int("us_rounds", us_rounds, 0)
    if maximizer not in ("candidates", "lbfgs"):
        raise ValueError(f"maximizer must be candidates or lbfgs, got {maximizer!r}")
    if maximizer == "lbfgs" and candidates is not None:
        raise ValueError("maximizer='lbfgs' needs a box domain; this objective is a finite set")
    _int("n_candidates", n_candidates, 1)
    if candidates is not None:
        candidates = torch.as_tensor(candidates, dtype=torch.float64)
        if candidates.ndim != 2 or candidates.shape[1] != d or candidates.shape[0] == 0:
            raise ValueError(f"candidates must have shape (n, {d}), got {tuple(candidates.shape)}")
        if ((candidates < b[0]) | (candidates > b[1])).any():
            raise ValueError("candidates must lie inside the bounds")
    if optimum is not None and not math.isfinite(optimum):
        raise ValueError(f"optimum must be finite, got {optimum!r}")
    n_init = (0 if kernel is not None else d + 1) if n_init is None else n_init
    _int("n_init", n_init, 0)
    if kernel is None and policy not in ("random",) and n_init < 1:
        raise ValueError("a fitted GP needs n_init >= 1 initial points")
    noise_var = float(noise) ** 2
    model_noise = noise_var if (kernel is not None or noise == 0) else None

    t_start = time.perf_counter()
    noise_gen = torch.Generator().manual_seed(10_007 * seed + 1)
    sobol_seed = 10_007 * seed + 2
    xs, fs, ys, rid, phase, sig, secs = [], [], [], [], [], [], []

    def add(x, r, ph, s):
        f = _evaluate(objective, x)
        y = f + (noise * torch.randn(f.shape, generator=noise_gen, dtype=torch.float64))
        xs.append(x), fs.append(f), ys.append(y), phase.extend([ph] * len(f))
        rid.append(torch.full((len(f),), r, dtype=torch.long)), sig.append(s)

    def pool(r: int) -> torch.Tensor:
        if candidates is not None:
            return candidates
        u = SobolEngine(d, scramble=True, seed=sobol_seed + r).draw(n_candidates)
        return b[0] + (b[1] - b[0]) * u.to(torch.float64)

    with torch.random.fork_rng():
        torch.manual_seed(seed)
        if n_init:
            c = pool(0)
            # a random subset of a finite domain; the first Sobol points of a box
            x0 = c[torch.randperm(len(c))[:n_init]] if candidates is not None else c[:n_init]
            add(x0, 0, "init", torch.full((len(x0),), math.nan, dtype=torch.float64))
        for r in range(1, rounds + 1):
            t0 = time.perf_counter()
            c = pool(r)
            model = None
            if xs and policy != "random":
                xt, yt = torch.cat(xs), torch.cat(ys).unsqueeze(-1)
                model = build_model(xt, yt, bounds=b, noise_var=model_noise, kernel=kernel)
            x, s, kind = _select_batch(
                policy,
                model,
                c,
                q,
                finite_domain=candidates is not None,
                warmup=policy == "bts-us" and r <= us_rounds,
                kernel=kernel,
                noise_var=noise_var,
                best_f=float(torch.cat(ys).max()) if ys else math.nan,
                sampler=sampler,
                ucb_beta=ucb_beta,
                box=b if maximizer == "lbfgs" else None,
            )
            add(x, r, kind, s.to(torch.float64))
            secs.append(time.perf_counter() - t0)

    values = torch.cat(fs)
    sr = cr = None
    if optimum is not None:
        sr, cr = simple_regret(values, optimum), cumulative_regret(values, optimum)
    return Trace(
        policy=policy,
        batch_size=q,
        rounds=rounds,
        X=torch.cat(xs),
        values=values,
        observations=torch.cat(ys),
        round_index=torch.cat(rid),
        phase=phase,
        sigma=torch.cat(sig),
        optimum=optimum,
        simple_regret=sr,
        cumulative_regret=cr,
        round_seconds=secs,
        wall_seconds=time.perf_counter() - t_start,
    )


def _select_batch(
    policy,
    model,
    c,
    q,
    *,
    finite_domain,
    warmup,
    kernel,
    noise_var,
    best_f,
    sampler,
    ucb_beta,
    box=None,
):
    """One round's queries ``(x, sigma, phase)`` of ``policy`` on the candidates ``c``."""
    if policy == "random":
        # uniform on a finite domain; on a box the first points of a fresh scrambled Sobol set
        idx = torch.randint(len(c), (q,)) if finite_domain else torch.arange(q) % len(c)
        return c[idx], torch.full((q,), math.nan, dtype=torch.float64), "policy"
    sub = c if len(c) <= pol.EXACT_MAX_CANDIDATES else c[: pol.EXACT_MAX_CANDIDATES]
    # qUCB/qLogEI without data (known prior, no initial design): the prior mean is 0
    # everywhere, so their first batch is the uncertainty-sampling batch.
    if warmup or (model is None and policy in ("qucb", "qlogei")):
        cov = _covariance(model, kernel, sub)
        us_noise = max(noise_var, NOISELESS_JITTER) if kernel is not None else _noise(model)
        idx, s = pol.uncertainty_batch(cov, q, us_noise)
        return sub[idx], s.to(torch.float64), "us"
    if policy in ("bts", "bts-us"):
        if model is None:  # first round without data: exact draws from the prior
            idx, s = pol.prior_thompson_batch(_covariance(None, kernel, sub), q)
            return sub[idx], s.to(torch.float64), "policy"
        if box is not None:  # continuous maximisation of pathwise samples
            x, s = pol.thompson_batch_continuous(model, c, box, q)
            return x, s.to(torch.float64), "policy"
        idx, s = pol.thompson_batch(model, c, q, sampler=sampler)
        return c[idx], s.to(torch.float64), "policy"
    idx, s = pol.acquisition_batch(model, c, q, policy, best_f, ucb_beta=ucb_beta)
    if len(idx) < q:  # fewer candidates than Q: fill with repeats
        idx, s = idx[torch.arange(q) % len(idx)], s[torch.arange(q) % len(s)]
    return c[idx], s.to(torch.float64), "policy"


def _covariance(model, kernel: KernelSpec | None, cands: torch.Tensor) -> torch.Tensor:
    """Posterior (or, without data, prior) covariance of the candidates, float64."""
    if model is None:
        if kernel is None:
            raise ValueError("no data and no known kernel: cannot form a prior covariance")
        return kernel.matrix(cands)
    with torch.no_grad():
        return model.posterior(cands).mvn.covariance_matrix.to(torch.float64)


def _noise(model) -> float:
    """The model's noise variance in the units of its posterior (mean over the data)."""
    lik_noise = float(model.likelihood.noise.mean())
    tf = getattr(model, "outcome_transform", None)
    if tf is not None and hasattr(tf, "stdvs"):
        lik_noise *= float(tf.stdvs.squeeze()) ** 2
    return max(lik_noise, NOISELESS_JITTER)
