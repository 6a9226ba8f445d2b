r"""Batch selection rules on a candidate set: the one-round step of each policy.

Every rule returns indices into ``candidates`` (``(n, d)``); the loop in :mod:`gp_bts.loop`
queries ``candidates[idx]``.

* **BTS** (:func:`thompson_batch`): draw :math:`Q` *independent* samples
  :math:`g_1..g_Q \sim p(f \mid D_{t-1})` and query :math:`x_{t,q} = \arg\max_x g_q(x)`. No
  fantasised observations, no penalty: the batch's diversity comes only from the posterior's
  spread. Exact joint samples on the candidates (``posterior.rsample``, what BoTorch's
  ``MaxPosteriorSampling(replacement=True)`` does) or pathwise samples
  (``draw_matheron_paths``: random-feature prior plus Matheron's update, evaluated on the
  candidates; cost linear in :math:`n`).
* **BTS on a box** (:func:`thompson_batch_continuous`): ``Q`` pathwise samples, each
  maximised over the box by multi-start L-BFGS-B from its best candidates
  (:mod:`gp_bts.pathmax`), so the query is a local maximiser of the sample path rather than
  the best point of a finite set.
* **uncertainty sampling** (:func:`uncertainty_batch`): :math:`x = \arg\max \sigma^2`, then
  the variance is updated as if :math:`x` had been observed (it does not depend on the value)
  and the next point is chosen, :math:`Q` times: the warm-up of the earlier analyses.
* **qUCB / qLogEI** (:func:`acquisition_batch`): BoTorch's MC acquisition functions maximised
  over the candidates by ``optimize_acqf_discrete`` (sequential greedy with pending points:
  for qUCB this is GP-BUCB's hallucination).
"""

from __future__ import annotations

import math

import torch
from botorch.acquisition import qLogExpectedImprovement, qUpperConfidenceBound
from botorch.optim import optimize_acqf_discrete
from botorch.sampling import SobolQMCNormalSampler
from botorch.sampling.pathwise import draw_matheron_paths

from .pathmax import maximize_paths

__all__ = [
    "EXACT_MAX_CANDIDATES",
    "acquisition_batch",
    "choose_sampler",
    "prior_thompson_batch",
    "thompson_batch",
    "thompson_batch_continuous",
    "uncertainty_batch",
]

#: up to this many candidates BTS samples the joint posterior exactly; above, pathwise
#: (see ``benchmarks/sampling_cost.py`` for the measured cost of both).
EXACT_MAX_CANDIDATES = 1000


def _check_q(batch_size) -> int:
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be an int >= 1, got {batch_size!r}")
    return batch_size


def choose_sampler(n_candidates: int, sampler: str = "auto") -> str:
    """``exact`` or ``pathwise``; ``auto`` is exact up to :data:`EXACT_MAX_CANDIDATES`.

    Example:
        >>> choose_sampler(500), choose_sampler(5000), choose_sampler(5000, "exact")
        ('exact', 'pathwise', 'exact')
    """
    if sampler not in ("auto", "exact", "pathwise"):
        raise ValueError(f"sampler must be auto, exact or pathwise, got {sampler!r}")
    if sampler != "auto":
        return sampler
    return "exact" if n_candidates <= EXACT_MAX_CANDIDATES else "pathwise"


def thompson_batch(model, candidates: torch.Tensor, batch_size: int, *, sampler="auto"):
    r"""Indices of the maximisers of :math:`Q` independent posterior samples.

    Uses the global torch RNG (as BoTorch does), so ``torch.manual_seed`` fixes the batch.

    Returns:
        ``(idx, sigma)``: ``idx`` ``(Q,)`` long, ``sigma`` the posterior standard deviation at
        the chosen candidates at the start of the round (what the regret analysis sums).
    """
    q = _check_q(batch_size)
    kind = choose_sampler(candidates.shape[0], sampler)
    with torch.no_grad():
        if kind == "exact":
            post = model.posterior(candidates)
            samples = post.rsample(torch.Size([q])).squeeze(-1)  # (Q, n)
            idx = samples.argmax(-1)
            sigma = post.variance.squeeze(-1)[idx].clamp_min(0).sqrt()
        else:
            paths = draw_matheron_paths(model, sample_shape=torch.Size([q]))
            idx = paths(candidates).argmax(-1)
            sigma = model.posterior(candidates[idx]).variance.squeeze(-1).clamp_min(0).sqrt()
    return idx, sigma


def thompson_batch_continuous(
    model, candidates: torch.Tensor, bounds: torch.Tensor, batch_size: int, *, n_starts: int = 4
):
    r"""Maximisers over the box of :math:`Q` pathwise posterior samples.

    Each of the ``Q`` independent ``draw_matheron_paths`` samples is maximised by L-BFGS-B
    from its ``n_starts`` best candidates (:func:`gp_bts.pathmax.maximize_paths`); its value
    there is at least its maximum over ``candidates``. Global torch RNG, like
    :func:`thompson_batch`.

    Returns:
        ``(x, sigma)``: the queries ``(Q, d)`` and the start-of-round posterior standard
        deviation there.
    """
    q = _check_q(batch_size)
    # drawn without a graph: the paths' weights are then constants, and the optimiser's
    # gradients flow to the inputs only (not back into the model's hyperparameters)
    with torch.no_grad():
        paths = draw_matheron_paths(model, sample_shape=torch.Size([q]))
    x, _ = maximize_paths(paths, candidates, bounds, n_starts=n_starts)
    with torch.no_grad():
        sigma = model.posterior(x).variance.squeeze(-1).clamp_min(0).sqrt()
    return x, sigma


def prior_thompson_batch(prior_cov: torch.Tensor, batch_size: int):
    """BTS's first round without data: maximisers of ``Q`` draws from ``N(0, prior_cov)``.

    The draws are ``V diag(sqrt(max(lambda, 0))) z`` from the eigendecomposition (exact for a
    singular PSD covariance, where a Cholesky factor would need jitter).

    Returns ``(idx, sigma)`` like :func:`thompson_batch`.
    """
    q = _check_q(batch_size)
    cov = prior_cov.to(torch.float64)
    evals, evecs = torch.linalg.eigh(cov)
    root = evecs * evals.clamp_min(0).sqrt()
    z = torch.randn(q, cov.shape[0], dtype=torch.float64)
    idx = (z @ root.T).argmax(-1)
    return idx, cov.diagonal()[idx].clamp_min(0).sqrt()


def uncertainty_batch(cov: torch.Tensor, batch_size: int, noise_var: float):
    r"""Greedy maximum-variance batch with in-batch variance updates (pure exploration).

    Args:
        cov: the posterior covariance of the candidates at the start of the round ``(n, n)``.
        batch_size: :math:`Q`.
        noise_var: the observation noise variance used in the update (the model's).

    Returns:
        ``(idx, sigma)``: the chosen indices and their start-of-round standard deviations.
    """
    q = _check_q(batch_size)
    if not (math.isfinite(noise_var) and noise_var > 0):
        raise ValueError(f"noise_var must be positive and finite, got {noise_var!r}")
    cov = cov.to(torch.float64).clone()
    sigma0 = cov.diagonal().clamp_min(0).sqrt().clone()
    picks = []
    for _ in range(q):
        var = cov.diagonal().clamp_min(0)
        j = int(torch.argmax(var))
        picks.append(j)
        col = cov[:, j].clone()
        cov -= torch.outer(col, col) / (float(var[j]) + noise_var)
    idx = torch.tensor(picks, dtype=torch.long)
    return idx, sigma0[idx]


def acquisition_batch(
    model, candidates: torch.Tensor, batch_size: int, kind: str, best_f: float, *, ucb_beta=2.0
):
    """qUCB or qLogEI maximised over the candidates (BoTorch, sequential greedy, unique points).

    Returns:
        ``(idx, sigma)`` like :func:`thompson_batch`.
    """
    q = _check_q(batch_size)
    sampler = SobolQMCNormalSampler(torch.Size([128]))
    if kind == "qucb":
        acq = qUpperConfidenceBound(model, beta=ucb_beta, sampler=sampler)
    elif kind == "qlogei":
        acq = qLogExpectedImprovement(model, best_f=best_f, sampler=sampler)
    else:
        raise ValueError(f"kind must be qucb or qlogei, got {kind!r}")
    q = min(q, candidates.shape[0])
    x, _ = optimize_acqf_discrete(acq, q=q, choices=candidates, unique=True)
    idx = torch.cdist(
        x.to(candidates.dtype), candidates, compute_mode="donot_use_mm_for_euclid_dist"
    ).argmin(-1)
    with torch.no_grad():
        sigma = model.posterior(candidates[idx]).variance.squeeze(-1).clamp_min(0).sqrt()
    return idx, sigma
