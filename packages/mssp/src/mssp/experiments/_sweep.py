"""Shared pieces of the experiments: sizes, the learning-rate grid, one training run."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ..layers import MoEModel
from ..observables import scaled_shape
from ..parameterize import parameterize
from ..train import ClusterTeacher, train

D_IN, D_OUT = 16, 4


@dataclass(frozen=True)
class SweepConfig:
    """Sizes and run lengths of one mode (quick / default / full)."""

    base: dict
    scales: tuple[int, ...]
    log2_lrs: dict  # optimizer -> tuple of log2 learning rates
    steps: int
    batch: int
    seeds: int


def config(quick: bool, full: bool) -> SweepConfig:
    """The mode's sizes: base shape, scales s (regime dims times s), lr grid, steps, seeds."""
    if quick:
        return SweepConfig(
            base={"N": 16, "Ne": 16, "M": 4, "K": 1, "L": 1},
            scales=(1, 2, 3, 4),
            log2_lrs={"adam": (-8, -7, -6, -5, -4), "sgd": (-4, -3, -2, -1, 0)},
            steps=30,
            batch=64,
            seeds=1,
        )
    if full:
        return SweepConfig(
            base={"N": 32, "Ne": 32, "M": 4, "K": 1, "L": 2},
            scales=(1, 2, 4, 8),
            log2_lrs={"adam": tuple(range(-12, -1)), "sgd": tuple(range(-7, 3))},
            steps=300,
            batch=128,
            seeds=3,
        )
    return SweepConfig(
        base={"N": 32, "Ne": 32, "M": 4, "K": 1, "L": 1},
        scales=(1, 2, 4, 8),
        log2_lrs={"adam": tuple(range(-10, -3)), "sgd": tuple(range(-5, 2))},
        steps=60,
        batch=64,
        seeds=1,
    )


def run_point(
    cfg: SweepConfig, regime: str, scheme: str, optimizer: str, s: int, lr: float, seed: int
) -> float:
    """Final held-out loss (1024 fixed samples; inf if the run diverged) of one run.

    The init and the data stream depend on (s, seed) only, not on the scheme or the lr, so
    the lr curves use common random numbers.
    """
    sh = scaled_shape(cfg.base, regime, s)
    torch.manual_seed(10_000 * seed + s)
    model = MoEModel(D_IN, D_OUT, n=sh["N"], ne=sh["Ne"], m=sh["M"], k=sh["K"], depth=sh["L"])
    torch.manual_seed(10_000 * seed + s)
    groups = parameterize(model, scheme, optimizer, regime=regime, base_shapes=cfg.base, lr=lr)
    with torch.no_grad():  # zero readout (as mup advises): the same initial loss at every size
        model.readout.zero_()
    teacher = ClusterTeacher(D_IN, D_OUT, seed=0)
    out = train(
        model,
        groups,
        optimizer,
        teacher,
        steps=cfg.steps,
        batch=cfg.batch,
        seed=seed,
        eval_batch=1024,
    )
    return float(out["eval"])


def argmin_index(losses: list[float]) -> int:
    """Index of the smallest finite loss (0 if all diverged)."""
    finite = [(v, i) for i, v in enumerate(losses) if math.isfinite(v)]
    return min(finite)[1] if finite else 0
