r"""GP baselines from BoTorch (the ``baselines`` extra; imported lazily).

Each policy fits, at every query, one ``SingleTaskGP`` per task (BoTorch defaults: Matern-5/2
ARD kernel, learned noise, outcome standardisation) by marginal likelihood on the history. The
``B`` tasks advance in lockstep, so their histories have the same length and the ``B`` GPs are
fitted as **one batched model** (``batch_shape = (B,)``): the summed marginal likelihood has
separate hyperparameters per task, so its optimum is every task's own optimum, and one L-BFGS
run replaces ``B`` of them (tested against per-task posteriors).

- :func:`gp_ei_policy`: feedback ignored; log expected improvement over the unqueried pool.
- :func:`gp_ts_policy`: feedback ignored; Thompson sampling, one joint posterior draw over the
  pool per task and query (seeded by the run's generator, not the global RNG).
- :func:`gp_feedback_policy`: the feedback as extra GP inputs: the kernel acts on
  :math:`[x, \hat s_1, \dots, \hat s_S]` with :math:`\hat s_j` source :math:`j` min-max scaled
  to :math:`[0,1]` over the pool, so ARD learns how much each source matters (a long
  lengthscale = ignored). An unscored point (``NaN``) is imputed with the source's pool median
  and an availability column is added for that source; log-EI as above.

Before two history points (or on a task whose history is constant) there is nothing to fit and
the policy picks uniformly at random among unqueried points.
"""

from __future__ import annotations

import torch

from .optimize import PoolState, log_expected_improvement, select

__all__ = [
    "feedback_inputs",
    "fit_batched_gp",
    "gp_ei_policy",
    "gp_feedback_policy",
    "gp_ts_policy",
    "joint_draw",
]


def _botorch():
    try:
        from botorch.fit import fit_gpytorch_mll
        from botorch.models import SingleTaskGP
        from gpytorch.mlls import ExactMarginalLogLikelihood
    except ImportError as err:  # pragma: no cover - depends on the install
        raise ImportError("GP baselines need BoTorch: pip install 'ficbo[baselines]'") from err
    return SingleTaskGP, ExactMarginalLogLikelihood, fit_gpytorch_mll


def fit_batched_gp(x_hist: torch.Tensor, y_hist: torch.Tensor, *, fit: bool = True):
    """A batched ``SingleTaskGP`` on ``x_hist (B, t, k)``, ``y_hist (B, t)`` (eval mode)."""
    single_task_gp, mll_cls, fit_mll = _botorch()
    model = single_task_gp(x_hist.double(), y_hist.double()[..., None])
    if fit:
        fit_mll(mll_cls(model.likelihood, model))
    return model.eval()


def feedback_inputs(fb_pool: torch.Tensor) -> torch.Tensor:
    """GP inputs from the feedback ``(B, S, N)``: ``(B, N, S + #sources with a NaN)``.

    Per task and source: min-max scaled to ``[0, 1]`` over the scored pool points; a ``NaN``
    becomes the scaled median of the scored points, and a 0/1 availability column (1 =
    scored) is appended for every source with at least one ``NaN`` in the batch. A source
    with no scored point is all 0.5 with availability 0.
    """
    ok = ~torch.isnan(fb_pool)
    big = torch.finfo(fb_pool.dtype).max
    lo = torch.where(ok, fb_pool, torch.full_like(fb_pool, big)).amin(-1, keepdim=True)
    hi = torch.where(ok, fb_pool, torch.full_like(fb_pool, -big)).amax(-1, keepdim=True)
    span = torch.where(hi > lo, hi - lo, torch.ones_like(hi))
    scaled = (fb_pool - lo) / span
    med = torch.nanmedian(scaled, -1, keepdim=True).values
    med = torch.where(torch.isnan(med), torch.full_like(med, 0.5), med)
    cols = [torch.where(ok, scaled, med.expand_as(scaled)).transpose(1, 2)]
    missing = (~ok).any(-1).any(0)  # (S,)
    if missing.any():
        cols.append(ok[:, missing].transpose(1, 2).to(fb_pool.dtype))
    return torch.cat(cols, -1)


def joint_draw(mean: torch.Tensor, cov: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    r"""One draw of :math:`N(\mu, \Sigma)` per row: :math:`\mu + V\sqrt{\Lambda}\,\varepsilon`.

    :math:`\Sigma = V\Lambda V^\top` by ``eigh`` with round-off negatives clipped to 0, so a
    singular covariance (two equal pool points) still gives a valid draw where Cholesky
    would need jitter. ``mean (B, N)``, ``cov (B, N, N)``.
    """
    lam, vec = torch.linalg.eigh(0.5 * (cov + cov.transpose(-1, -2)))
    eps = torch.randn(lam.shape, generator=generator, dtype=lam.dtype)
    return mean + (vec @ (lam.clamp_min(0).sqrt() * eps)[..., None])[..., 0]


def _history(inputs: torch.Tensor, state: PoolState) -> torch.Tensor:
    idx = state.hist_idx[..., None].expand(-1, -1, inputs.shape[-1])
    return torch.gather(inputs, 1, idx)


def _fallback(state: PoolState) -> torch.Tensor:
    """Rows with nothing to fit (fewer than 2 points or a constant history)."""
    if state.y_hist.shape[1] < 2:
        return torch.ones(state.y_hist.shape[0], dtype=torch.bool)
    return state.y_hist.std(-1) == 0


def _policy(inputs_of, acquisition: str, fit: bool):
    def policy(state: PoolState) -> torch.Tensor:
        u = torch.rand(state.queried.shape, generator=state.generator, dtype=torch.float64)
        rand = _fallback(state)
        if rand.all():
            return select(u, state.queried)
        inputs = inputs_of(state).double()
        model = fit_batched_gp(_history(inputs, state), state.y_hist, fit=fit)
        with torch.no_grad():
            post = model.posterior(inputs)
            if acquisition == "ei":
                mean, var = post.mean[..., 0], post.variance[..., 0]
                best = state.y_hist.max(-1, keepdim=True).values.double()
                scores = log_expected_improvement(mean, var.clamp_min(1e-12).sqrt(), best)
            else:
                cov = post.mvn.covariance_matrix
                scores = joint_draw(post.mean[..., 0], cov, state.generator)
        scores = torch.where(rand[:, None], u, scores)
        return select(scores, state.queried)

    return policy


def gp_ei_policy(*, fit: bool = True):
    """A :data:`ficbo.optimize.Policy`: GP log-EI per task, feedback ignored.

    Args:
        fit: fit the GP hyperparameters by marginal likelihood (else BoTorch's priors' modes).
    """
    _botorch()  # fail at construction, not at the first query
    return _policy(lambda s: s.x_pool, "ei", fit)


def gp_ts_policy(*, fit: bool = True):
    """A :data:`ficbo.optimize.Policy`: GP Thompson sampling per task, feedback ignored."""
    _botorch()
    return _policy(lambda s: s.x_pool, "ts", fit)


def gp_feedback_policy(*, fit: bool = True):
    """A :data:`ficbo.optimize.Policy`: GP log-EI with the feedback as extra inputs.

    With no source (``S = 0``) it is :func:`gp_ei_policy`.
    """
    _botorch()

    def inputs_of(state: PoolState) -> torch.Tensor:
        return torch.cat([state.x_pool.double(), feedback_inputs(state.fb_pool.double())], -1)

    return _policy(inputs_of, "ei", fit)
