"""The registry of every optimizer the suite ships, for the conformance battery.

One :class:`Case` per optimizer configuration: how to build it on a list of parameters (or
parameter groups) and a learning rate, and which of the battery's claims it makes. A new
package adds its optimizers here; ``test_conformance.py`` and the DDP worker pick them up.

``torch.optim.AdamW`` and ``torch.optim.SGD`` are registered as controls: if one fails a check,
the check is wrong. (AdamW makes no compile claim: on torch 2.15 its compiled step differs from
the eager one by ~1e-6 in float64 from the first step, while SGD's matches bitwise.)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

Params = list[torch.Tensor] | list[dict[str, Any]]


@dataclass(frozen=True)
class Case:
    """One optimizer configuration and the claims it makes.

    Attributes:
        name: test id.
        make: ``(params, lr) -> optimizer``.
        lr: learning rate per battery problem (``quadratic``, ``rosenbrock``, ``logistic``,
            ``mlp``); a problem missing here is not run for this case.
        bf16: claims to step bf16 parameters.
        compile: claims that ``torch.compile`` of a training step holding ``opt.step()`` works.
        ddp: claims that under DDP every rank applies the same update (a pure function of the
            all-reduced gradient and the optimizer state).
        groups: supports several param groups with their own ``lr``.
        lr_keys: the group keys that hold a learning rate (optimizers that route some
            parameters to AdamW carry its rate as ``adamw_lr``).
    """

    name: str
    make: Callable[[Params, float], Any]
    lr: dict[str, float] = field(default_factory=dict)
    bf16: bool = True
    compile: bool = False
    ddp: bool = True
    groups: bool = True
    lr_keys: tuple[str, ...] = ("lr",)


def _adamw(params: Params, lr: float):
    return torch.optim.AdamW(params, lr=lr, weight_decay=0.0)


def _sgd(params: Params, lr: float):
    return torch.optim.SGD(params, lr=lr, momentum=0.9)


def _smd(mirror: str | None = None):
    def make(params: Params, lr: float):
        from heavytail_sgd import SMD

        if mirror == "pnorm":
            from shared_core.mirror import PNorm

            return SMD(params, lr=lr, mirror=PNorm(1.5))
        return SMD(params, lr=lr)

    return make


def _clipped(params: Params, lr: float):
    from heavytail_sgd import ClippedSGD

    return ClippedSGD(params, lr=lr, clip=1.0)


def _normalized(params: Params, lr: float):
    from heavytail_sgd import NormalizedSGD

    return NormalizedSGD(params, lr=lr)


def _efsgd(kind: str):
    def make(params: Params, lr: float):
        from diloco_ef import EFSGD
        from diloco_ef.compressors import RandomK, TopK

        comp = TopK(ratio=0.5) if kind == "topk" else RandomK(ratio=0.5, scaled=False)
        return EFSGD(params, lr=lr, compressor=comp, seed=3)

    return make


def _la(params: Params, lr: float):
    from diloco_ef import LA

    return LA(
        params,
        lambda p: torch.optim.SGD(p, lr=lr, momentum=0.5),
        lambda p: torch.optim.SGD(p, lr=0.8),
        inner_steps=3,
    )


def _sla(params: Params, lr: float):
    from diloco_ef import sla

    return sla(params, lr=lr, momentum=0.5, outer_lr=0.7, outer_momentum=0.5, inner_steps=3)


def _imuon(params: Params, lr: float):
    from imuon import IMuon

    # Matrices take the intrinsic (here Euclidean: Muon) step, vectors the AdamW route.
    return IMuon(params, lr=lr, momentum=0.9, adamw_lr=lr, polar="svd")


def _langevin(params: Params, lr: float):
    from langevin_ntk import Langevin

    # a cold chain (tiny temperature): the battery's loss-decrease checks stay meaningful
    return Langevin(params, lr=lr, temperature=1e-8, seed=0)


def _adaptive_lmo(exponent: float | str, precondition: str | None = None):
    def make(params: Params, lr: float):
        from adaptive_lmo import AdaptiveLMO

        return AdaptiveLMO(
            params,
            lr=lr,
            momentum=0.9,
            exponent=exponent,
            precondition=precondition,
            adamw_lr=lr,
            fallback_exponent=0.5,
        )

    return make


STANDARD_LR = {"quadratic": 0.05, "rosenbrock": 1e-3, "logistic": 0.5, "mlp": 0.05}

# LMO steps have length lr whatever the gradient's size: rates of AdamW's order.
MATRIX_LR = {"quadratic": 0.05, "rosenbrock": 0.02, "logistic": 0.05, "mlp": 0.01}

CASES: list[Case] = [
    Case(
        "torch-AdamW",
        _adamw,
        {"quadratic": 0.05, "rosenbrock": 0.02, "logistic": 0.05, "mlp": 0.01},
    ),
    Case(
        "torch-SGD-momentum",
        _sgd,
        {"quadratic": 0.01, "rosenbrock": 2e-4, "logistic": 0.1, "mlp": 0.01},
        compile=True,
    ),
    Case("heavytail-SMD-euclidean", _smd(), STANDARD_LR, compile=True),
    Case("heavytail-SMD-pnorm1.5", _smd("pnorm"), STANDARD_LR),
    Case("heavytail-ClippedSGD", _clipped, STANDARD_LR),
    Case(
        "heavytail-NormalizedSGD",
        _normalized,
        {"quadratic": 0.05, "rosenbrock": 1e-3, "logistic": 0.1, "mlp": 0.02},
    ),
    Case("diloco-EFSGD-topk", _efsgd("topk"), STANDARD_LR),
    Case("diloco-EFSGD-randomk", _efsgd("randomk"), STANDARD_LR),
    # LA/SLA wrap two torch optimizers and expose the inner one's groups.
    Case("imuon-IMuon", _imuon, MATRIX_LR, lr_keys=("lr", "adamw_lr")),
    # exponent="auto" needs the nn.Module (activation hooks) and the battery passes tensors; the
    # criterion is tested in adaptive-lmo itself. Here: the interior a = 0.5 and MuAdam.
    Case("adaptive-lmo-a0.5", _adaptive_lmo(0.5), MATRIX_LR, lr_keys=("lr", "adamw_lr")),
    Case("adaptive-lmo-MuAdam", _adaptive_lmo(0.0, "adam"), MATRIX_LR, lr_keys=("lr", "adamw_lr")),
    Case("langevin-ntk-Langevin", _langevin, STANDARD_LR, bf16=False, ddp=False),
    Case("diloco-LA", _la, STANDARD_LR, groups=False),
    Case("diloco-SLA", _sla, STANDARD_LR, groups=False),
]


def by_name(name: str) -> Case:
    for case in CASES:
        if case.name == name:
            return case
    raise KeyError(name)
