r"""Monte-Carlo runs of SGD, LA, SLA and DiLoCo on Gaussian linear regression.

The same problem as :mod:`diloco_ef.theory`: :math:`y = \langle w^\star, x\rangle + \xi`,
:math:`x \sim N(0, \mathrm{diag}(\lambda))`, :math:`\xi \sim N(0,\sigma^2)`, start
:math:`w_0 = 0`. Many independent runs are packed as the rows of one ``(runs, d)`` parameter;
the loss is the sum over rows of each row's half mean squared error on its own batch, so each
row's gradient is exactly that run's minibatch gradient and the element-wise optimizers move
the rows independently. The two-phase algorithms are the package's own
:class:`~diloco_ef.algorithms.DiLoCo` (M simulated workers, each drawing its own batches), so
these runs test the implementation, not a re-derivation of it. Each run's exact population
risk :math:`\frac12\sum_i\lambda_i e_i^2 + \frac{\sigma^2}{2}` is recorded; the result is the
mean over runs and its standard error.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from .algorithms import DiLoCo
from .theory import risk_of_error

__all__ = ["MonteCarloRisk", "simulate_diloco", "simulate_sgd"]

_DT = torch.float64


@dataclass
class MonteCarloRisk:
    """Mean and standard error over runs of the population risk at each recorded time.

    Attributes:
        mean: ``(n,)`` mean risk over runs.
        se: ``(n,)`` standard error of that mean (sample std / sqrt(runs)).
        runs: the number of independent runs.
    """

    mean: Tensor
    se: Tensor
    runs: int


class _Rows(nn.Module):
    """One ``(runs, d)`` parameter: row r is the weight vector of run r."""

    def __init__(self, runs: int, d: int):
        super().__init__()
        self.w = nn.Parameter(torch.zeros(runs, d, dtype=_DT))


def _check(spectrum: Tensor, w_star: Tensor, runs: int) -> tuple[Tensor, Tensor]:
    lam = torch.as_tensor(spectrum, dtype=_DT)
    ws = torch.as_tensor(w_star, dtype=_DT)
    if lam.ndim != 1 or lam.numel() == 0:
        raise ValueError(f"spectrum must be a non-empty 1-d tensor, got shape {tuple(lam.shape)}")
    if bool((lam < 0).any()):
        raise ValueError("spectrum must hold eigenvalues >= 0")
    if ws.shape != lam.shape:
        raise ValueError(f"w_star has shape {tuple(ws.shape)}, the spectrum {tuple(lam.shape)}")
    if isinstance(runs, bool) or not isinstance(runs, int) or runs < 2:
        raise ValueError(f"runs must be an integer >= 2 (for a standard error), got {runs!r}")
    return lam, ws


def _batch_loss(
    model: _Rows, lam: Tensor, w_star: Tensor, sigma: float, batch: int, gen: torch.Generator
) -> Tensor:
    runs, d = model.w.shape
    x = torch.randn(runs, batch, d, generator=gen, dtype=_DT) * lam.sqrt()
    y = x @ w_star + sigma * torch.randn(runs, batch, generator=gen, dtype=_DT)
    pred = torch.einsum("rbd,rd->rb", x, model.w)
    return 0.5 * (pred - y).pow(2).mean(1).sum()


def _summary(risks: list[Tensor]) -> MonteCarloRisk:
    r = torch.stack(risks)  # (n, runs)
    return MonteCarloRisk(r.mean(1), r.std(1) / math.sqrt(r.shape[1]), r.shape[1])


def simulate_diloco(
    spectrum: Tensor,
    w_star: Tensor,
    sigma: float,
    *,
    batch: int,
    inner_lr: float,
    inner_steps: int,
    outer_lr: float,
    rounds: int,
    runs: int,
    workers: int = 1,
    outer_momentum: float = 0.0,
    nesterov: bool = False,
    inner_momentum: float = 0.0,
    seed: int = 0,
) -> MonteCarloRisk:
    r"""Run :class:`~diloco_ef.algorithms.DiLoCo` ``runs`` times; risk at rounds 0..T.

    Args:
        spectrum: ``(d,)`` eigenvalues of H.
        w_star: ``(d,)`` the target (fixed across runs; compare with theory at
            ``w_star_sq = w_star**2``).
        sigma: label-noise standard deviation.
        batch, inner_lr, inner_steps, outer_lr, rounds, workers, outer_momentum, nesterov,
            inner_momentum: as in :func:`diloco_ef.theory.diloco_risk`.
        runs: independent runs (>= 2).
        seed: seed of the data stream.

    Returns:
        :class:`MonteCarloRisk` with ``rounds + 1`` entries.

    Example:
        >>> mc = simulate_diloco(torch.ones(2), torch.ones(2), 0.1, batch=2, inner_lr=0.1,
        ...                      inner_steps=2, outer_lr=1.0, rounds=3, runs=8, workers=2)
        >>> mc.mean.shape, bool(mc.mean[-1] < mc.mean[0])
        (torch.Size([4]), True)
    """
    lam, ws = _check(spectrum, w_star, runs)
    gen = torch.Generator().manual_seed(seed)
    algo = DiLoCo(
        _Rows(runs, lam.numel()),
        lambda p: torch.optim.SGD(p, lr=inner_lr, momentum=inner_momentum),
        lambda p: torch.optim.SGD(
            p, lr=outer_lr, momentum=outer_momentum, nesterov=nesterov and outer_momentum > 0
        ),
        inner_steps=inner_steps,
        num_workers=workers,
    )

    def loss_fn(model: nn.Module, worker: int, rnd: int, step: int) -> Tensor:
        return _batch_loss(model, lam, ws, sigma, batch, gen)

    def risk() -> Tensor:
        return risk_of_error(lam, (algo.outer_params[0].detach() - ws).pow(2), sigma)

    risks = [risk()]
    for _ in range(rounds):
        algo.round(loss_fn)
        risks.append(risk())
    return _summary(risks)


def simulate_sgd(
    spectrum: Tensor,
    w_star: Tensor,
    sigma: float,
    *,
    batch: int,
    lr: float,
    steps: int,
    runs: int,
    seed: int = 0,
) -> MonteCarloRisk:
    r"""Run ``torch.optim.SGD`` ``runs`` times; risk after 0..``steps`` steps.

    Args:
        spectrum, w_star, sigma, runs, seed: as in :func:`simulate_diloco`.
        batch: B >= 1.
        lr: step size.
        steps: number of steps.

    Returns:
        :class:`MonteCarloRisk` with ``steps + 1`` entries.

    Example:
        >>> mc = simulate_sgd(torch.ones(2), torch.ones(2), 0.0, batch=1, lr=0.1, steps=2,
        ...                   runs=4)
        >>> mc.mean.shape
        torch.Size([3])
    """
    lam, ws = _check(spectrum, w_star, runs)
    gen = torch.Generator().manual_seed(seed)
    model = _Rows(runs, lam.numel())
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    risks = [risk_of_error(lam, (model.w.detach() - ws).pow(2), sigma)]
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        _batch_loss(model, lam, ws, sigma, batch, gen).backward()
        opt.step()
        risks.append(risk_of_error(lam, (model.w.detach() - ws).pow(2), sigma))
    return _summary(risks)
