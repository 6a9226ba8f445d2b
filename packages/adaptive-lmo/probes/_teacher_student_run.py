"""One teacher-student training run as the probes need it (the experiment's data order).

Shared by ``teacher_student_routes.py``, ``teacher_student_schedule.py`` and
``teacher_student_step_aware.py``: they differ in the optimizer they build, not in the loop.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

import adaptive_lmo.experiments._common as common

SCHEDULES = ("constant", "cosine")


def run_to_end(
    cfg: dict,
    pb: dict,
    seed: int,
    model: torch.nn.Module,
    opt: torch.optim.Optimizer,
    *,
    fisher: str | None = None,
    schedule: str = "constant",
    on_step: Callable[[], None] | None = None,
) -> tuple[float, float]:
    """Train ``model`` with ``opt`` on ``pb["train"]``; return the (validation, test) MSE.

    ``fisher``: also call ``opt.fisher_backward(out, fisher)`` each step (AdaptiveLMO);
    ``schedule="cosine"``: the lr decays to 0 over the run (``CosineAnnealingLR``);
    ``on_step``: called after every step (to record the optimizer's state).
    """
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule must be one of {SCHEDULES}, got {schedule!r}")
    sched = (
        torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=cfg["steps"])
        if schedule == "cosine"
        else None
    )
    X, Y = pb["train"]
    for idx in common.batch_indices(X.shape[0], cfg["batch"], cfg["steps"], seed):
        opt.zero_grad()
        out = model(X[idx])
        if fisher is not None:
            opt.fisher_backward(out, fisher)
        F.mse_loss(out, Y[idx]).backward()
        opt.step()
        if sched is not None:
            sched.step()
        if on_step is not None:
            on_step()
    with torch.no_grad():
        val, test = (float(F.mse_loss(model(pb[s][0]), pb[s][1])) for s in ("val", "test"))
    return val, test
