r"""DiLoCo(-EF) driven by the user's own training loop: a hook on the inner optimizer.

:class:`DiLoCoHook` registers a step post-hook on the user's inner optimizer; every
``sync_every``-th call of ``optimizer.step()`` triggers one outer round (the collective
finiteness check, compression with error feedback, the exchange and the outer step) and writes
the outer parameters back into the model. Everything the user's loop does around ``step()``
keeps working because the hook only sees completed steps: per-step LR schedulers, gradient
clipping, gradient accumulation (call ``step()`` once per accumulated batch), and
``torch.amp.GradScaler`` (it skips ``step()`` on overflow, so a skipped step is not counted).

The round itself is :class:`~diloco_ef.algorithms.DiLoCo`'s (same checks, the same start-up
agreement and broadcast, the same checkpoint), with one worker per process; the hook holds a
``DiLoCo`` as :attr:`DiLoCoHook.engine`.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from .algorithms import DiLoCo, OptimizerFactory
from .comm import Communicator, LocalCommunicator
from .compressors import Compressor

__all__ = ["DiLoCoHook"]


class DiLoCoHook:
    """Outer rounds every ``sync_every`` steps of the user's own inner optimizer.

    Args:
        model: this worker's model (the inner iterate); rank 0's parameters and buffers are
            broadcast to all ranks at construction.
        inner_optimizer: the user's optimizer over ``model``'s parameters; its ``step()`` drives
            everything.
        outer: ``params -> optimizer`` for the outer step (on private copies of the parameters).
        sync_every: H >= 1, inner steps per round.
        communicator: default :class:`~diloco_ef.comm.LocalCommunicator` with one worker; on
            several processes a :class:`~diloco_ef.comm.TorchDistCommunicator`.
        compressor, error_feedback, seed, on_nonfinite: as for :class:`DiLoCo` (a non-finite
            pseudo-gradient rolls the model and the inner optimizer back to the last round; with
            ``"raise"`` the error comes out of ``optimizer.step()``).

    Example:
        >>> model = torch.nn.Linear(3, 1)
        >>> opt = torch.optim.SGD(model.parameters(), lr=0.1)
        >>> hook = DiLoCoHook(model, opt, lambda p: torch.optim.SGD(p, lr=0.7), sync_every=2)
        >>> x = torch.randn(8, 3)
        >>> for _ in range(4):
        ...     opt.zero_grad(); (model(x) ** 2).mean().backward(); opt.step()
        >>> hook.engine.rounds_done
        2
    """

    def __init__(
        self,
        model: nn.Module,
        inner_optimizer: torch.optim.Optimizer,
        outer: OptimizerFactory,
        *,
        sync_every: int,
        communicator: Communicator | None = None,
        compressor: Compressor | None = None,
        error_feedback: bool = True,
        seed: int = 0,
        on_nonfinite: str = "raise",
    ):
        if on_nonfinite == "retry":
            # A retry re-runs the round's inner steps, and those are the user's loop's.
            raise ValueError(
                "on_nonfinite='retry' needs the round engine (DiLoCo.round); the hook can "
                "only 'raise' or 'skip'"
            )
        comm = communicator if communicator is not None else LocalCommunicator(1)
        if len(comm.worker_ids) != 1:
            raise ValueError(
                f"the hook runs one worker per process; the communicator holds {comm.worker_ids}"
            )
        mine = {id(p) for p in model.parameters()}
        theirs = {id(p) for g in inner_optimizer.param_groups for p in g["params"]}
        if mine != theirs:
            raise ValueError("inner_optimizer must optimise exactly the model's parameters")
        self.inner_optimizer = inner_optimizer
        self.engine = DiLoCo(
            model,
            lambda _params: inner_optimizer,
            outer,
            inner_steps=sync_every,
            communicator=comm,
            compressor=compressor,
            error_feedback=error_feedback,
            seed=seed,
            on_nonfinite=on_nonfinite,
        )
        self.steps = 0
        self._begin()
        self._handle = inner_optimizer.register_step_post_hook(self._after_step)

    def _begin(self) -> None:
        self._snap = self.engine._snapshot()
        self._meter0 = self.engine.comm.meter.totals()

    def _after_step(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        self.steps += 1
        if self.steps % self.engine.inner_steps == 0:
            self.sync()

    def sync(self) -> dict[str, float]:
        """Run the outer round now (called by the hook every ``sync_every`` steps)."""
        try:
            return self.engine._finish_round(None, self._snap, self._meter0)
        finally:
            self._begin()

    @property
    def history(self) -> list[dict[str, float]]:
        return self.engine.history

    def remove(self) -> None:
        """Detach the hook from the inner optimizer."""
        self._handle.remove()

    def state_dict(self) -> dict[str, Any]:
        return {"engine": self.engine.state_dict(), "steps": self.steps}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.engine.load_state_dict(state["engine"])
        self.steps = int(state["steps"])
        self._begin()
