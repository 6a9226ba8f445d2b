r"""Regret accounting for batched Bayesian optimisation (maximisation).

A run of ``T`` rounds with batch size ``Q`` queries ``x_{t,q}`` and the objective's noise-free
values ``f(x_{t,q})`` are known to the experimenter (never to the policy). With
:math:`f^\star = \max_x f(x)` and evaluations numbered :math:`i = 1..N`, :math:`N = TQ`, in
round order (within a round, in batch order):

* instantaneous regret :math:`r_i = f^\star - f(x_i)`;
* cumulative regret :math:`R_n = \sum_{i \le n} r_i`;
* simple regret :math:`S_n = f^\star - \max_{i \le n} f(x_i)` (best value queried so far).

Per-round curves take the value after the round's last evaluation. All functions work on the
last axis so a stack of seeds ``(S, N)`` is handled at once.
"""

from __future__ import annotations

import torch

__all__ = [
    "check_values",
    "cumulative_regret",
    "instant_regret",
    "per_round",
    "simple_regret",
]


def check_values(values: torch.Tensor, optimum: float | torch.Tensor, *, tol: float = 1e-9):
    """Validate noise-free values against the optimum; return them as a float64 tensor.

    Raises:
        ValueError: a non-finite value or optimum, or a value above the optimum by more
            than ``tol * max(1, |f*|)`` (the optimum given is then wrong).
    """
    values = torch.as_tensor(values, dtype=torch.float64)
    if values.ndim == 0 or values.shape[-1] == 0:
        raise ValueError(f"values need at least one evaluation, got shape {tuple(values.shape)}")
    if not torch.isfinite(values).all():
        raise ValueError("values contain NaN or inf")
    opt = torch.as_tensor(optimum, dtype=torch.float64)
    if not torch.isfinite(opt).all():
        raise ValueError(f"optimum must be finite, got {optimum!r}")
    excess = float((values - _opt(values, opt)).max())
    if excess > tol * max(1.0, float(opt.abs().max())):
        raise ValueError(
            f"a value exceeds the optimum by {excess:.3g}: the optimum given is not the maximum"
        )
    return values


def _opt(values: torch.Tensor, optimum) -> torch.Tensor:
    opt = torch.as_tensor(optimum, dtype=torch.float64)
    return opt.unsqueeze(-1) if opt.ndim else opt


def instant_regret(values, optimum) -> torch.Tensor:
    r""":math:`r_i = f^\star - f(x_i)` along the last axis (clipped at 0 within ``tol``).

    Example:
        >>> instant_regret(torch.tensor([1.0, 3.0, 2.0]), 3.0).tolist()
        [2.0, 0.0, 1.0]
    """
    values = check_values(values, optimum)
    return (_opt(values, optimum) - values).clamp_min(0.0)


def cumulative_regret(values, optimum) -> torch.Tensor:
    r""":math:`R_n = \sum_{i\le n} (f^\star - f(x_i))`, one entry per evaluation.

    Example:
        >>> cumulative_regret(torch.tensor([1.0, 3.0, 2.0]), 3.0).tolist()
        [2.0, 2.0, 3.0]
    """
    return instant_regret(values, optimum).cumsum(-1)


def simple_regret(values, optimum) -> torch.Tensor:
    r""":math:`S_n = f^\star - \max_{i\le n} f(x_i)`, one entry per evaluation.

    Example:
        >>> simple_regret(torch.tensor([1.0, 3.0, 2.0]), 3.0).tolist()
        [2.0, 0.0, 0.0]
    """
    values = check_values(values, optimum)
    return (_opt(values, optimum) - values.cummax(-1).values).clamp_min(0.0)


def per_round(curve: torch.Tensor, batch_size: int) -> torch.Tensor:
    """The value of a per-evaluation curve after each round's last evaluation.

    Example:
        >>> per_round(torch.arange(1.0, 7.0), 2).tolist()
        [2.0, 4.0, 6.0]
    """
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be an int >= 1, got {batch_size!r}")
    n = curve.shape[-1]
    if n % batch_size:
        raise ValueError(f"{n} evaluations are not whole rounds of {batch_size}")
    return curve[..., batch_size - 1 :: batch_size]
