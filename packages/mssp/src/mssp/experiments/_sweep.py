"""Shared pieces of the experiments: sizes, the learning-rate grid, one training run."""

from __future__ import annotations

import hashlib
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
    seeds: int  # per point of monotone-scale
    sweep_seeds: int  # per point of lr-transfer's full lr x size sweep (repeat with --seed)


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
            sweep_seeds=1,
        )
    if full:
        return SweepConfig(
            base={"N": 32, "Ne": 32, "M": 4, "K": 1, "L": 2},
            scales=(1, 2, 4, 8),
            log2_lrs={"adam": tuple(range(-12, -1)), "sgd": tuple(range(-7, 3))},
            steps=300,
            batch=128,
            seeds=3,
            sweep_seeds=3,
        )
    # Default: N up to 256, M up to 32, 40 steps, 7-point grids; lr-transfer (Adam) is about
    # 1.5 minutes of one idle core (estimated from runs timed on 2026-12-04), monotone-scale
    # less. On the shared 2-core box at load ~30 a nice-10 job gets ~5 % of a core, and the
    # 60-step, 9-point variant had done 34 of 324 points after 8 minutes; this size took
    # 1346 s there, inside the 25-minute cap of a long run. lr-transfer runs one seed per run
    # (repeat with --seed, pool with lr_transfer.pool); monotone-scale has 2 seeds per point.
    return SweepConfig(
        base={"N": 32, "Ne": 32, "M": 4, "K": 1, "L": 1},
        scales=(1, 2, 4, 8),
        log2_lrs={"adam": tuple(range(-10, -3)), "sgd": tuple(range(-5, 2))},
        steps=40,
        batch=64,
        seeds=2,
        sweep_seeds=1,
    )


#: final losses of the runs done in this process, by :func:`_fingerprint`: at the base size
#: every scheme is the same model, and in regime I muP and MSSP coincide, so a sweep asks for
#: many runs that are identical to one already done.
_DONE: dict[str, float] = {}


def _fingerprint(model: MoEModel, groups: list[dict], cfg: SweepConfig, opt: str, seed: int):
    """A key that is equal for two runs iff they compute the same thing: the initial weights,
    every multiplier, every group's lr, the optimizer, run length, batch and data seed."""
    h = hashlib.sha256(repr((opt, cfg.steps, cfg.batch, seed)).encode())
    for name, p in model.named_parameters():
        h.update(name.encode())
        h.update(p.detach().contiguous().numpy().tobytes())
    attrs = ("k", "act_name", "norm", "renormalize", "aux_weight", "branch")
    attrs += ("mult_router", "mult1", "mult2", "mult_agg", "mult_embed", "mult_readout")
    settings = [getattr(m, a) for m in model.modules() for a in attrs if hasattr(m, a)]
    h.update(repr(settings).encode())
    h.update(repr([(g["name"], g["lr"], len(g["params"])) for g in groups]).encode())
    return h.hexdigest()


def run_point(
    cfg: SweepConfig, regime: str, scheme: str, optimizer: str, s: int, lr: float, seed: int
) -> float:
    """Final held-out loss (1024 fixed samples; inf if the run diverged) of one run.

    The init and the data stream depend on (s, seed) only, not on the scheme or the lr, so
    the lr curves use common random numbers. A run identical to one already done in this
    process (same weights, multipliers, lrs, seed) is not repeated.
    """
    sh = scaled_shape(cfg.base, regime, s)
    torch.manual_seed(10_000 * seed + s)
    model = MoEModel(D_IN, D_OUT, n=sh["N"], ne=sh["Ne"], m=sh["M"], k=sh["K"], depth=sh["L"])
    torch.manual_seed(10_000 * seed + s)
    groups = parameterize(model, scheme, optimizer, regime=regime, base_shapes=cfg.base, lr=lr)
    with torch.no_grad():  # zero readout (as mup advises): the same initial loss at every size
        model.readout.zero_()
    key = _fingerprint(model, groups, cfg, optimizer, seed)
    if key not in _DONE:
        _DONE[key] = _train_point(model, groups, optimizer, cfg, seed)
    return _DONE[key]


def _train_point(model, groups, optimizer, cfg, seed) -> float:
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
