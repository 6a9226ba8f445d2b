r"""Optimizers: stochastic mirror descent (the method) and two baselines (clipped, normalized SGD).

:class:`SMD` is the unmodified method of the heavy-tail analysis: one mirror step per stochastic
gradient, no clipping, no normalisation,

.. math:: x_{t+1} = \Pi^\psi\big(\nabla\psi^*(\nabla\psi(x_t) - \eta_t g_t)\big),

with the mirror map :math:`\psi` from :mod:`shared_core.mirror` (Euclidean: plain SGD;
negative entropy: exponentiated gradient on the simplex; p-norm). Optionally it keeps the
average :math:`\bar x_T = \sum_t w_t x_t / \sum_t w_t` of the query points, uniform
(:math:`w_t = 1`) or step-weighted (:math:`w_t = \eta_t`), which is the point the convex rates
are stated for.

:class:`ClippedSGD` and :class:`NormalizedSGD` are **baselines** for comparison, the standard
modifications that the analysis shows are not needed.

The mirror map acts on the last axis of each parameter (a 0-D parameter is a 1-vector).

Example:
    >>> import torch
    >>> x = torch.nn.Parameter(torch.full((3,), 1 / 3))
    >>> opt = SMD([x], lr=0.5, mirror="entropy", average="uniform")
    >>> x.grad = torch.tensor([1.0, 0.0, 0.0])
    >>> opt.step()
    >>> round(float(x.detach().sum()), 6), bool(x[0] < x[1])
    (1.0, True)
"""

from __future__ import annotations

import abc
import contextlib
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch
from torch.optim import Optimizer

from shared_core.mirror import Euclidean, MirrorMap, get_mirror

from ._lr import LR, eta_at, split_lr
from .multi_tensor import euclidean_step_, mirror_step_, rowwise

__all__ = ["SMD", "ClippedSGD", "NormalizedSGD", "clip_by_norm", "normalize"]


def _mirror(mirror: str | MirrorMap) -> MirrorMap:
    if isinstance(mirror, str) and mirror.strip().lower() == "pnorm":
        raise ValueError(
            "mirror='pnorm' needs its exponent: pass the map itself, "
            "shared_core.mirror.PNorm(p) with p in (1, 2] (e.g. PNorm(1.5))"
        )
    return get_mirror(mirror)


def _vec(x: torch.Tensor) -> torch.Tensor:
    return x.reshape(1) if x.ndim == 0 else x


def clip_by_norm(g: torch.Tensor, clip: float, dim: int | None = None) -> torch.Tensor:
    r""":math:`g \min(1, \tau/\|g\|_2)`: the clipped gradient (norm over ``dim``, or all).

    Example:
        >>> clip_by_norm(torch.tensor([3.0, 4.0]), 1.0)
        tensor([0.6000, 0.8000])
    """
    nrm = torch.linalg.vector_norm(g, dim=dim, keepdim=dim is not None)
    factor = torch.where(nrm > clip, clip / nrm.clamp(min=torch.finfo(g.dtype).tiny), 1.0)
    return g * factor


def normalize(g: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    r""":math:`g/\|g\|_2` (norm over ``dim``, or all); zero stays zero.

    Example:
        >>> normalize(torch.tensor([3.0, 4.0]))
        tensor([0.6000, 0.8000])
    """
    nrm = torch.linalg.vector_norm(g, dim=dim, keepdim=dim is not None)
    return torch.where(nrm > 0, g / nrm.clamp(min=torch.finfo(g.dtype).tiny), 0.0)


class _Scheduled(Optimizer):
    """Group handling shared by the optimizers: the step size of :mod:`heavytail_sgd._lr`.

    Groups are normalised and validated in :meth:`add_param_group` (which ``__init__`` also
    goes through), so a group added later is checked like the first ones.
    """

    def __init__(self, params: Any, defaults: dict[str, Any]) -> None:
        split_lr(defaults)
        super().__init__(params, defaults)

    def _check_group(self, group: dict[str, Any]) -> None:
        """Validate (and normalise in place) a group's own options; lr is done already."""

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        group = dict(param_group)
        params = group.get("params")
        group["params"] = [params] if isinstance(params, torch.Tensor) else list(params or ())
        # A group's own number means a constant step: it does not inherit the default schedule.
        if "lr" in group and "lr_schedule" not in group:
            group["lr_schedule"] = None
        for key, value in self.defaults.items():
            group.setdefault(key, value)
        split_lr(group)
        self._check_group(group)
        super().add_param_group(group)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        super().load_state_dict(state_dict)
        # a checkpoint of the first version kept a callable in group["lr"]
        for group in self.param_groups:
            split_lr(group)

    @staticmethod
    def _buckets(ps: list[torch.Tensor], state: Any) -> dict[tuple, list[torch.Tensor]]:
        """Parameters grouped by their step count (and average weight): one step size each.

        All parameters of a group share both unless some missed a gradient on some step.
        """
        out: dict[tuple, list[torch.Tensor]] = {}
        for p in ps:
            s = state[p]
            out.setdefault((s["step"], s.get("weight_sum")), []).append(p)
        return out


class SMD(_Scheduled):
    r"""Stochastic mirror descent on a :mod:`shared_core.mirror` map, with optional averaging.

    Args:
        params: parameters or parameter groups. Each must lie in the mirror map's domain
            (e.g. on the simplex for ``"entropy"``), checked here.
        lr: step size :math:`\eta \ge 0` (0 is a no-op step), or a callable ``t -> eta_t`` of
            the 1-based step count (e.g. a :class:`heavytail_sgd.schedules.StepSchedule`). A
            callable is kept as ``group["lr_schedule"]`` and ``group["lr"]`` becomes a
            multiplier 1.0 that torch's LR schedulers may drive: the step is
            ``group["lr"] * lr_schedule(t)`` (a scheduler and a schedule compose by product).
        mirror: ``"euclidean"``, ``"entropy"`` or a :class:`shared_core.mirror.MirrorMap`
            instance (e.g. ``PNorm(1.5)``, ``Euclidean(Ball(1.0))``); the p-norm map needs
            its exponent, so it is passed as ``PNorm(p)`` (the string ``"pnorm"`` is refused
            with that advice).
        average: ``None``, ``"uniform"`` (:math:`w_t = 1`) or ``"weighted"``
            (:math:`w_t = \eta_t`): keep :math:`\bar x = \sum_t w_t x_t / \sum_t w_t` over the
            points :math:`x_1, \dots, x_T` where gradients were taken. While the weights so far
            sum to 0 (weighted, ``lr = 0`` steps) the average is the current point.
        foreach: step all parameters of a group together (:mod:`heavytail_sgd.multi_tensor`:
            one ``torch._foreach_add_`` for the plain Euclidean map, one batched map call per
            row length for the p-norm, entropy and scalar-domain maps); ``False`` steps them
            one by one (the reference). ``None`` (default) means ``True``.

    Example:
        >>> import torch
        >>> w = torch.nn.Parameter(torch.tensor([2.0]))
        >>> opt = SMD([w], lr=0.25, average="uniform")
        >>> for _ in range(2):
        ...     opt.zero_grad(); (w**2).sum().backward(); opt.step()
        >>> [round(v.item(), 4) for v in opt.averaged_params()]
        [1.5]
    """

    def __init__(
        self,
        params: Iterable[torch.Tensor] | Iterable[dict[str, Any]],
        lr: LR,
        mirror: str | MirrorMap = "euclidean",
        average: str | None = None,
        *,
        foreach: bool | None = None,
    ) -> None:
        defaults = {"lr": lr, "mirror": mirror, "average": average, "foreach": foreach}
        super().__init__(params, defaults)

    def _check_group(self, group: dict[str, Any]) -> None:
        group["mirror"] = _mirror(group["mirror"])
        if group["average"] not in (None, "uniform", "weighted"):
            raise ValueError(
                f"average must be None, 'uniform' or 'weighted', got {group['average']!r}"
            )
        if group["foreach"] not in (None, True, False):
            raise ValueError(f"foreach must be None, True or False, got {group['foreach']!r}")
        for p in group["params"]:
            try:
                group["mirror"].check(_vec(p.detach()))
            except ValueError as err:
                raise ValueError(
                    f"parameter of shape {tuple(p.shape)} is outside the domain of "
                    f"{group['mirror']!r}: {err}"
                ) from None

    @torch.no_grad()
    def step(self, closure: Callable[[], torch.Tensor] | None = None) -> torch.Tensor | None:
        """One mirror step per parameter; returns the closure's loss if one is given."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            ps = [p for p in group["params"] if p.grad is not None]
            if any(p.grad.is_sparse for p in ps):
                raise ValueError("SMD does not take sparse gradients")
            for p in ps:
                self._init_state(p, group)
            for (t_prev, _), bucket in self._buckets(ps, self.state).items():
                self._step_bucket(group, bucket, t_prev + 1)
        return loss

    def _init_state(self, p: torch.Tensor, group: dict[str, Any]) -> None:
        state = self.state[p]
        if not state:
            state["step"] = 0
            if group["average"] is not None:
                state["avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                state["weight_sum"] = 0.0

    def _step_bucket(self, group: dict[str, Any], ps: list[torch.Tensor], t: int) -> None:
        """Step parameters that share the step count ``t`` (and the average's weight sum)."""
        eta = eta_at(group, t)
        if group["average"] is not None:
            self._update_average(group, ps, eta)
        if eta > 0:  # eta = 0: a no-op step, as torch.optim.SGD with lr = 0
            mirror: MirrorMap = group["mirror"]
            grads = [p.grad for p in ps]
            if group["foreach"] is False:
                for p, g in zip(ps, grads, strict=True):
                    p.copy_(mirror.step(_vec(p), _vec(g), eta).reshape(p.shape))
            elif type(mirror) is Euclidean and mirror.domain is None:
                euclidean_step_(ps, grads, eta)
            elif rowwise(mirror):
                mirror_step_(mirror, ps, grads, eta)
            else:
                for p, g in zip(ps, grads, strict=True):
                    p.copy_(mirror.step(_vec(p), _vec(g), eta).reshape(p.shape))
        for p in ps:
            self.state[p]["step"] = t

    def _update_average(self, group: dict[str, Any], ps: list[torch.Tensor], eta: float) -> None:
        w = 1.0 if group["average"] == "uniform" else eta
        total = self.state[ps[0]]["weight_sum"] + w
        avgs = [self.state[p]["avg"] for p in ps]
        for p in ps:
            self.state[p]["weight_sum"] = total
        # Running weighted mean avg += (w / W_t)(x_t - avg), i.e. lerp(avg, x_t, w / W_t). With
        # W_t = 0 so far (weighted, only lr = 0 steps) the points have not moved: avg = x_t.
        weight = w / total if total > 0 else 1.0
        if group["foreach"] is False:
            for a, p in zip(avgs, ps, strict=True):
                a.lerp_(p, weight)
        else:
            torch._foreach_lerp_(avgs, ps, weight)

    def averaged_params(self) -> list[torch.Tensor]:
        """The averaged iterates, one per parameter (the current value where none is kept)."""
        out = []
        for group in self.param_groups:
            for p in group["params"]:
                avg = self.state[p].get("avg") if p in self.state else None
                out.append((avg if avg is not None else p).detach().clone())
        return out

    @contextlib.contextmanager
    def swap_average(self) -> Iterator[None]:
        """Within the block the parameters hold their averages; the iterates come back after.

        Example:
            >>> import torch
            >>> w = torch.nn.Parameter(torch.tensor([2.0]))
            >>> opt = SMD([w], lr=0.5, average="uniform")
            >>> w.grad = torch.tensor([2.0]); opt.step()
            >>> with opt.swap_average():
            ...     inside = w.item()
            >>> inside, w.item()
            (2.0, 1.0)
        """
        swapped = []
        with torch.no_grad():
            for group in self.param_groups:
                for p in group["params"]:
                    avg = self.state[p].get("avg") if p in self.state else None
                    if avg is not None:
                        saved = p.detach().clone()
                        p.copy_(avg)
                        swapped.append((p, saved))
        try:
            yield
        finally:
            with torch.no_grad():
                for p, saved in swapped:
                    p.copy_(saved)


class _GroupNormSGD(_Scheduled, abc.ABC):
    """Shared loop of the baselines: transform the group's gradient as one vector, then step."""

    @abc.abstractmethod
    def _direction(self, g: torch.Tensor, group: dict[str, Any]) -> torch.Tensor:
        """The step direction for the group's flattened gradient ``g``."""

    @torch.no_grad()
    def step(self, closure: Callable[[], torch.Tensor] | None = None) -> torch.Tensor | None:
        """One step; returns the closure's loss if one is given."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            ps = [p for p in group["params"] if p.grad is not None]
            if not ps:
                continue
            if any(p.grad.is_sparse for p in ps):
                raise ValueError(f"{type(self).__name__} does not take sparse gradients")
            flat = torch.cat([p.grad.reshape(-1) for p in ps])
            direction = self._direction(flat, group)
            for p in ps:
                self.state[p].setdefault("step", 0)
            t = self.state[ps[0]]["step"] + 1
            eta = eta_at(group, t)
            offset = 0
            for p in ps:
                n = p.numel()
                if eta > 0:  # eta = 0: a no-op step
                    p.add_(direction[offset : offset + n].view_as(p), alpha=-eta)
                offset += n
                self.state[p]["step"] = t
        return loss


class ClippedSGD(_GroupNormSGD):
    r"""**Baseline**: SGD on the clipped gradient :math:`g\min(1, \tau/\|g\|_2)`.

    The norm is taken over the whole parameter group's gradient (global-norm clipping).

    Args:
        params: parameters or groups.
        lr: step size >= 0 or a callable of the 1-based step count (composes with torch's
            LR schedulers as in :class:`SMD`).
        clip: clipping level :math:`\tau > 0`.

    Example:
        >>> import torch
        >>> w = torch.nn.Parameter(torch.zeros(2))
        >>> opt = ClippedSGD([w], lr=1.0, clip=1.0)
        >>> w.grad = torch.tensor([3.0, 4.0]); opt.step()
        >>> w.tolist()
        [-0.6000000238418579, -0.800000011920929]
    """

    def __init__(self, params, lr: LR, clip: float) -> None:
        super().__init__(params, {"lr": lr, "clip": clip})

    def _check_group(self, group):
        clip = group["clip"]
        if isinstance(clip, bool) or not isinstance(clip, int | float) or not clip > 0:
            raise ValueError(f"clip must be a positive number, got {clip!r}")
        group["clip"] = float(clip)

    def _direction(self, g, group):
        return clip_by_norm(g, group["clip"])


class NormalizedSGD(_GroupNormSGD):
    r"""**Baseline**: SGD on the normalised gradient :math:`g/\|g\|_2` (no step on a zero one).

    The norm is over the whole parameter group's gradient.

    Args:
        params: parameters or groups.
        lr: step size >= 0 or a callable of the 1-based step count (composes with torch's
            LR schedulers as in :class:`SMD`).

    Example:
        >>> import torch
        >>> w = torch.nn.Parameter(torch.zeros(2))
        >>> opt = NormalizedSGD([w], lr=0.5)
        >>> w.grad = torch.tensor([30.0, 40.0]); opt.step()
        >>> [round(v, 4) for v in w.tolist()]
        [-0.3, -0.4]
    """

    def __init__(self, params, lr: LR) -> None:
        super().__init__(params, {"lr": lr})

    def _direction(self, g, group):
        return normalize(g)
