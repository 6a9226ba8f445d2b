"""GP baselines from BoTorch (the ``baselines`` extra; imported lazily).

``gp_ei_policy`` ignores the feedback: per task, a ``SingleTaskGP`` (BoTorch defaults:
Matern-5/2 ARD kernel, learned noise, outcome standardisation) is fitted by marginal likelihood
on the history and the next query maximises analytic log-EI over the unqueried pool points.
"""

from __future__ import annotations

import torch

from .optimize import PoolState, select

__all__ = ["gp_ei_policy"]


def _botorch():
    try:
        from botorch.acquisition.analytic import LogExpectedImprovement
        from botorch.fit import fit_gpytorch_mll
        from botorch.models import SingleTaskGP
        from gpytorch.mlls import ExactMarginalLogLikelihood
    except ImportError as err:  # pragma: no cover - depends on the install
        raise ImportError("GP baselines need BoTorch: pip install 'ficbo[baselines]'") from err
    return SingleTaskGP, ExactMarginalLogLikelihood, fit_gpytorch_mll, LogExpectedImprovement


def gp_ei_policy(*, fit: bool = True):
    """A :data:`ficbo.optimize.Policy`: GP-EI per task, feedback ignored.

    Args:
        fit: fit the GP hyperparameters by marginal likelihood (else BoTorch's priors' modes).
    """
    single_task_gp, mll_cls, fit_mll, log_ei = _botorch()

    def policy(state: PoolState) -> torch.Tensor:
        b = state.x_pool.shape[0]
        scores = torch.empty(state.queried.shape, dtype=torch.float64)
        for i in range(b):
            idx = state.hist_idx[i]
            x_h = state.x_pool[i, idx].double()
            y_h = state.y_hist[i].double()[:, None]
            if y_h.shape[0] < 2 or float(y_h.std()) == 0.0:  # nothing to fit yet
                u = torch.rand(scores.shape[1], generator=state.generator, dtype=torch.float64)
                scores[i] = u
                continue
            model = single_task_gp(x_h, y_h)
            if fit:
                fit_mll(mll_cls(model.likelihood, model))
            acq = log_ei(model, best_f=y_h.max())
            with torch.no_grad():
                scores[i] = acq(state.x_pool[i].double()[:, None, :])
        return select(scores, state.queried)

    return policy
