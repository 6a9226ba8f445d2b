r"""How a parameter group holds its step size, so that torch's LR schedulers can drive it.

A group's step at its ``t``-th update (1-based) is

.. math:: \eta_t = \mathrm{group["lr"]} \cdot s(t),

where ``group["lr_schedule"]`` is the user's callable :math:`s` (or ``None``, :math:`s \equiv 1`).
``group["lr"]`` is always a number: torch's schedulers (``LambdaLR``, ``CosineAnnealingLR``,
warm-up chains, ``ReduceLROnPlateau``) read and write ``group["lr"]`` with arithmetic, which a
callable stored there breaks (``'function' * float``). So ``lr=schedule`` is stored as
``lr = 1.0`` (a multiplier a scheduler may scale) and ``lr_schedule = schedule``: a scheduler
and a callable *compose* by multiplication, e.g. a linear warm-up times the analysis'
:math:`t^{-1/p}` decay.

``lr = 0`` (a warm-up's first step, ``CosineAnnealingLR`` at its end) is allowed and makes the
step a no-op, as in ``torch.optim.SGD``; negative or non-finite values are refused, at
construction for numbers and at the step (naming ``t``) for a callable's values.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

__all__ = ["LR", "check_lr", "eta_at", "split_lr"]

LR = float | Callable[[int], float]


def check_lr(lr: Any, what: str = "lr") -> float:
    """Return ``lr`` as a float; raise ``ValueError`` unless it is a finite number >= 0."""
    if (
        isinstance(lr, bool)
        or not isinstance(lr, int | float)
        or not lr >= 0  # also refuses NaN
        or not math.isfinite(lr)
    ):
        raise ValueError(
            f"{what} must be a finite number >= 0 or a callable of the step count t, got {lr!r}"
        )
    return float(lr)


def split_lr(group: dict[str, Any]) -> None:
    """Normalise ``group`` in place to a numeric ``"lr"`` and an ``"lr_schedule"``.

    A callable ``"lr"`` becomes the schedule with multiplier 1; a number is validated and
    kept with the group's schedule (``None`` if it has none).
    """
    lr = group["lr"]
    if callable(lr):
        group["lr"], group["lr_schedule"] = 1.0, lr
        return
    group["lr"] = check_lr(lr)
    sched = group.setdefault("lr_schedule", None)
    if sched is not None and not callable(sched):
        raise ValueError(f"lr_schedule must be None or a callable of t, got {sched!r}")


def eta_at(group: dict[str, Any], t: int) -> float:
    """The group's step at its ``t``-th update: ``group["lr"] * lr_schedule(t)``."""
    scale = group["lr"]
    if callable(scale):
        # set by hand after construction, or an old checkpoint's callable: a schedule, scale 1
        scale, sched = 1.0, scale
    else:
        sched = group.get("lr_schedule")
    eta = scale if sched is None else scale * sched(t)
    if isinstance(eta, bool) or not isinstance(eta, int | float) or not (0 <= eta < math.inf):
        raise ValueError(
            f"the step size at t={t} must be a finite number >= 0, got {eta!r}"
            + ("" if sched is None else f" (lr={scale!r} times the schedule's value)")
        )
    return float(eta)
