r"""``Langevin``: L2-regularised Langevin training as a ``torch.optim`` optimizer.

Each step moves every parameter with a gradient by one discretised step of

.. math::

    d\theta = -(\nabla L(\theta) + \lambda\theta)\,dt + \sqrt{2T}\,dW

(:func:`langevin_ntk.langevin.euler_maruyama_step` or, with ``scheme="ou"``, the exact
Ornstein-Uhlenbeck step for the regulariser :func:`langevin_ntk.langevin.ou_step`). The noise
comes from the optimizer's own seeded ``torch.Generator`` (one per device), so a run replays
exactly and the generator state travels in ``state_dict()``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import Tensor
from torch.optim import Optimizer

from .langevin import SCHEMES, check_nonneg, check_positive, langevin_step

__all__ = ["Langevin"]

_GEN_KEY = "langevin_generators"


def _check_group(lr: object, weight_decay: object, temperature: object, scheme: object) -> None:
    check_positive("lr", lr)
    check_nonneg("weight_decay", weight_decay)
    try:
        check_nonneg("temperature", temperature)
    except ValueError as err:
        raise ValueError(
            f"{err} (temperature 0 is plain gradient descent with weight decay; "
            "a negative temperature has no meaning)"
        ) from None
    if scheme not in SCHEMES:
        raise ValueError(f"scheme must be one of {SCHEMES}, got {scheme!r}")


class Langevin(Optimizer):
    r"""Langevin dynamics with weight decay: :math:`\theta \leftarrow \theta - \eta(g +
    \lambda\theta) + \sqrt{2\eta T}\,\xi`.

    Args:
        params: tensors or param groups (``lr``, ``weight_decay``, ``temperature`` and
            ``scheme`` may be set per group).
        lr: step :math:`\eta > 0` (the time step of the discretised SDE).
        temperature: :math:`T = 1/\beta \ge 0`. ``0`` is **plain gradient descent with
            weight decay**: no noise is drawn at all. Required: there is no silent default.
        weight_decay: :math:`\lambda \ge 0`, coupled into the drift (the L2 regulariser
            :math:`\tfrac\lambda2\|\theta\|^2` of the target Gibbs law
            :math:`\exp(-(L + \tfrac\lambda2\|\theta\|^2)/T)`).
        scheme: ``"euler"`` (Euler-Maruyama) or ``"ou"`` (exact for the regulariser; the
            loss gradient is frozen over the step).
        seed: seed of the noise generator; ``None`` draws one from torch's global generator,
            so ``torch.manual_seed`` before construction also replays the run.
        check_finite: raise ``FloatingPointError`` on a NaN/inf gradient (no change made).

    Parameters whose ``grad`` is ``None`` are skipped (no drift, no noise), as in
    ``torch.optim.SGD``. Float16/bfloat16 parameters are updated in float32 and rounded back.

    Example:
        >>> w = torch.nn.Parameter(torch.zeros(3))
        >>> opt = Langevin([w], lr=0.01, temperature=0.1, weight_decay=1.0, seed=0)
        >>> for _ in range(3):
        ...     opt.zero_grad(); ((w - 1) ** 2).sum().backward(); opt.step()
        >>> w.shape
        torch.Size([3])
    """

    def __init__(
        self,
        params: Iterable[Tensor] | Iterable[dict[str, Any]],
        lr: float,
        temperature: float,
        weight_decay: float = 0.0,
        *,
        scheme: str = "euler",
        seed: int | None = None,
        check_finite: bool = True,
    ):
        _check_group(lr, weight_decay, temperature, scheme)
        if seed is None:
            seed = int(torch.randint(0, 2**62, (1,)).item())
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise ValueError(f"seed must be a non-negative int or None, got {seed!r}")
        defaults = dict(
            lr=float(lr),
            temperature=float(temperature),
            weight_decay=float(weight_decay),
            scheme=scheme,
        )
        super().__init__(params, defaults)
        for group in self.param_groups:
            _check_group(group["lr"], group["weight_decay"], group["temperature"], group["scheme"])
        self.seed = seed
        self.check_finite = bool(check_finite)
        self._generators: dict[str, torch.Generator] = {}

    def _generator(self, device: torch.device) -> torch.Generator:
        key = str(device)
        gen = self._generators.get(key)
        if gen is None:
            gen = torch.Generator(device=device)
            gen.manual_seed(self.seed)
            self._generators[key] = gen
        return gen

    @torch.no_grad()
    def step(self, closure: Callable[[], Tensor] | None = None) -> Tensor | None:
        """One Langevin step for every parameter with a gradient; returns the closure's loss."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            _check_group(group["lr"], group["weight_decay"], group["temperature"], group["scheme"])
            params = [p for p in group["params"] if p.grad is not None]
            for p in params:
                if p.grad.is_sparse:
                    raise RuntimeError("Langevin does not support sparse gradients")
                # one reduction per tensor; the elementwise test only confirms a suspect sum
                if (
                    self.check_finite
                    and not bool(torch.isfinite(p.grad.sum()))
                    and not bool(torch.isfinite(p.grad).all())
                ):
                    raise FloatingPointError(
                        f"non-finite gradient in a parameter of shape {tuple(p.shape)}"
                    )
            for p in params:
                work = torch.float64 if p.dtype == torch.float64 else torch.float32
                theta = p.to(work)
                grad = p.grad.to(work)
                noise = None
                if group["temperature"] > 0:
                    noise = torch.randn(
                        p.shape, generator=self._generator(p.device), dtype=work, device=p.device
                    )
                new = langevin_step(
                    theta,
                    grad,
                    group["lr"],
                    group["weight_decay"],
                    group["temperature"],
                    noise,
                    group["scheme"],
                )
                p.copy_(new)
                state = self.state[p]
                state["step"] = state.get("step", 0) + 1
        return loss

    def state_dict(self) -> dict[str, Any]:
        """The usual optimizer state plus the seed and every noise generator's state."""
        sd = super().state_dict()
        sd[_GEN_KEY] = {
            "seed": self.seed,
            "states": {k: g.get_state() for k, g in self._generators.items()},
        }
        return sd

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore the state written by :meth:`state_dict` (the noise stream continues)."""
        state_dict = dict(state_dict)
        gens = state_dict.pop(_GEN_KEY, None)
        if gens is None:
            raise ValueError(f"not a Langevin state_dict: no {_GEN_KEY!r} entry")
        super().load_state_dict(state_dict)
        for group in self.param_groups:
            _check_group(group["lr"], group["weight_decay"], group["temperature"], group["scheme"])
        self.seed = int(gens["seed"])
        self._generators = {}
        for key, st in gens["states"].items():
            gen = torch.Generator(device=torch.device(key))
            gen.set_state(st.cpu() if isinstance(st, Tensor) else torch.as_tensor(st))
            self._generators[key] = gen
