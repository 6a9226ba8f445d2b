"""Shared pieces of the experiments: paired bootstrap intervals, the theory setting, bounds."""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from functools import lru_cache

import torch

from ..bounds import bcr_bound
from ..info_gain import gamma_upper, greedy_information_gain, variance_ratio_bound
from ..models import KernelSpec
from ..objectives import gp_prior_objective

#: the theory setting shared by batch-scaling, warmup and noiseless: a known SE prior on a
#: 16 x 16 grid of the unit square, observation noise sd 0.1 (variance 0.01).
PRIOR = KernelSpec("se", lengthscale=0.15)
#: the Matern-5/2 version of the same setting (same lengthscale and scale): rougher draws,
#: a larger gamma_N (its eigenvalues decay polynomially, not exponentially).
MATERN_PRIOR = KernelSpec("matern52", lengthscale=0.15)
GRID = 16
NOISE = 0.1
BOOT = 2000
LEVEL = 0.95


def quiet() -> None:
    """Silence gpytorch's jitter notices (a smooth kernel on a dense grid is near-singular)."""
    warnings.filterwarnings("ignore", message=".*not p.d.*")
    warnings.filterwarnings("ignore", category=UserWarning, module="botorch")


def prior_label(prior: KernelSpec) -> str:
    name = {"se": "SE", "matern52": "Matern-5/2", "matern32": "Matern-3/2"}[prior.name]
    return f"{name}, lengthscale {prior.lengthscale:g}"


def suffix(prior: KernelSpec) -> str:
    """``""`` for the shared SE prior, else ``"_<kernel>"`` (plot names, titles)."""
    return "" if prior == PRIOR else f"_{prior.name}"


def objective(seed: int, prior: KernelSpec = PRIOR):
    return gp_prior_objective(seed, dim=2, grid_size=GRID, kernel=prior)


def bootstrap(
    stat: Callable[[torch.Tensor], torch.Tensor], samples: torch.Tensor, seed: int = 0
) -> tuple[float, float, float]:
    """Point value and percentile interval of ``stat`` over seeds (rows resampled jointly).

    ``samples`` has the seeds on its first axis, so paired quantities (two policies on the
    same objective and noise) stay paired.
    """
    g = torch.Generator().manual_seed(seed)
    n = samples.shape[0]
    idx = torch.randint(n, (BOOT, n), generator=g)
    boots = torch.stack([stat(samples[i]) for i in idx])
    a = (1 - LEVEL) / 2
    lo, hi = torch.quantile(boots, torch.tensor([a, 1 - a], dtype=boots.dtype)).tolist()
    return float(stat(samples)), lo, hi


@lru_cache(maxsize=16)
def _greedy_curve(noise_var: float, steps: int, prior: KernelSpec) -> torch.Tensor:
    obj = objective(0, prior)
    k = prior.matrix(obj.candidates)
    return gamma_upper(greedy_information_gain(k, noise_var, steps)[0])


def prior_gamma(n_evals: int, noise_var: float, prior: KernelSpec = PRIOR) -> float:
    """Certified upper end of gamma_N for ``prior`` (default the shared SE) on the shared grid."""
    steps = max(256, n_evals)
    return float(_greedy_curve(float(noise_var), steps, prior)[n_evals - 1])


def kernel_gammas(n_evals: int, noise_var: float) -> dict[str, float]:
    """Certified gamma_N upper ends on the shared grid for SE and Matern priors (same scale)."""
    grid = objective(0).candidates
    out = {}
    for name in ("se", "matern52", "matern32"):
        k = KernelSpec(name, lengthscale=PRIOR.lengthscale).matrix(grid)
        out[name] = float(gamma_upper(greedy_information_gain(k, noise_var, n_evals)[0])[-1])
    return out


def bounds_for(
    n_evals: int, batch_size: int, noise_var: float, prior: KernelSpec = PRIOR
) -> dict[str, float]:
    """The regret bound without and with the multiplicative batch factor, at N evaluations."""
    g = prior_gamma(n_evals, noise_var, prior)
    card = GRID**2
    xi = variance_ratio_bound(batch_size, noise_var)
    return {
        "gamma": g,
        "xi": xi,
        "bound_noQ": bcr_bound(g, n_evals, card, noise_var),
        "bound_withQ": bcr_bound(g, n_evals, card, noise_var, xi=xi),
    }


def fmt_ci(v: tuple[float, float, float], digits: int = 3) -> str:
    p, lo, hi = v
    return f"{p:.{digits}g} [{lo:.{digits}g}, {hi:.{digits}g}]"


def finite(x: float) -> float:
    return x if math.isfinite(x) else float("nan")
