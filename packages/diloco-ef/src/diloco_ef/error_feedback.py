r"""Error feedback (EF14-style) around any compressor, and single-node EF-SGD.

Error feedback keeps what compression dropped and adds it back before the next compression.
For a stream of inputs :math:`u_t` (gradients, or pseudo-gradients in DiLoCo-EF):

.. math::
    v_t = e_t + u_t, \qquad s_t = C(v_t), \qquad e_{t+1} = v_t - s_t,

so :math:`s_t + e_{t+1} = e_t + u_t` and, summed over rounds,
:math:`\sum_{t<T} s_t = \sum_{t<T} u_t - e_T`: nothing is lost, only delayed, and the delay is
bounded because a :math:`\delta`-contractive :math:`C` keeps
:math:`\mathbb{E}\|e_{t+1}\|^2 \le (1-\delta)\,\mathbb{E}\|v_t\|^2`.

For sparsifiers (:class:`~diloco_ef.compressors.TopK`, Random-k) :math:`s_t` copies entries of
:math:`v_t` and zeros the rest, so :math:`e_{t+1}` is the exact complement and the identity
holds bit for bit. For quantizers the subtraction :math:`v_t - s_t` is one rounded
floating-point operation, so the identity holds to within one rounding of :math:`e_{t+1}`.

EF-SGD is :math:`x_{t+1} = x_t - C(e_t + \eta g_t)` with the same buffer update.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from ._rng import keyed_generator
from .compressors import Compressor, Payload, contraction

__all__ = ["EFSGD", "ErrorFeedback", "Sent"]


@dataclass
class Sent:
    """One compressed message with its accounting.

    Attributes:
        payload: what travels.
        tensor: ``decompress(payload)``, what the receiver reconstructs.
        bits: ``compressor.bits_sent(payload)``.
        alpha: the measured contraction factor of the compressor on its input ``e + u``.
        sq_input: :math:`\\|e + u\\|^2` (to combine alphas over tensors).
    """

    payload: Payload
    tensor: Tensor
    bits: int
    alpha: float
    sq_input: float


class ErrorFeedback:
    """A compressor with one error buffer per key (one per parameter tensor).

    Args:
        compressor: any :class:`~diloco_ef.compressors.Compressor`.
        enabled: with False the buffers stay zero and this is plain compression (for ablations).

    Example:
        >>> from diloco_ef.compressors import TopK
        >>> ef = ErrorFeedback(TopK(k=1))
        >>> ef.send("w", torch.tensor([1.0, 3.0])).tensor
        tensor([0., 3.])
        >>> ef.errors["w"]
        tensor([1., 0.])
        >>> ef.send("w", torch.tensor([1.0, 0.5])).tensor  # the buffered 1 + the new 1 wins
        tensor([2., 0.])
    """

    def __init__(self, compressor: Compressor, *, enabled: bool = True):
        if not isinstance(compressor, Compressor):
            raise ValueError(f"compressor must be a Compressor, got {compressor!r}")
        self.compressor = compressor
        self.enabled = bool(enabled)
        self.errors: dict[Hashable, Tensor] = {}
        #: per-key state of a stateful compressor (e.g. :class:`~diloco_ef.compressors.LowRank`'s
        #: warm-start factor); kept whether or not the error buffers are enabled.
        self.states: dict[Hashable, dict[str, Tensor]] = {}

    def pending(self, key: Hashable, u: Tensor) -> Tensor:
        """What :meth:`send` would compress: ``u`` plus the buffered error (nothing changes)."""
        u = u.detach()
        e = self.errors.get(key)
        if e is not None and e.shape != u.shape:
            raise ValueError(
                f"error buffer {key!r} has shape {tuple(e.shape)}, input has {tuple(u.shape)}"
            )
        return u if e is None else e + u

    def send(
        self,
        key: Hashable,
        u: Tensor,
        generator: torch.Generator | None = None,
        **compress_kw: Tensor,
    ) -> Sent:
        """Compress ``u`` plus the buffered error of ``key``; update the buffer.

        ``compress_kw`` go to the compressor (e.g. the agreed ``shared_absmax`` of
        :class:`~diloco_ef.shared_scale.SharedScaleQuant`)."""
        v = self.pending(key, u)
        if self.compressor.stateful:
            state = self.states.setdefault(key, {})
            payload = self.compressor.compress(v, generator, state=state, **compress_kw)
        else:
            payload = self.compressor.compress(v, generator, **compress_kw)
        return self.commit(key, v, self.compressor.decompress(payload), payload)

    def commit(self, key: Hashable, v: Tensor, s: Tensor, payload: Payload) -> Sent:
        """Record that ``s`` (this worker's share, decompressed) was sent for the input ``v``
        (:meth:`pending`): the buffer becomes ``v - s``. For exchanges that compress in
        several collective phases (:func:`~diloco_ef.powersgd.powersgd_exchange`)."""
        if self.enabled:
            self.errors[key] = v - s
        sq = float(v.double().pow(2).sum())
        return Sent(payload, s, self.compressor.bits_sent(payload), contraction(v, s), sq)

    def state_dict(self) -> dict[str, Any]:
        return {
            "errors": {k: v.clone() for k, v in self.errors.items()},
            "states": {k: {n: t.clone() for n, t in d.items()} for k, d in self.states.items()},
            "enabled": self.enabled,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.errors = {k: v.clone() for k, v in state["errors"].items()}
        # Checkpoints written before stateful compressors existed have no "states".
        self.states = {
            k: {n: t.clone() for n, t in d.items()} for k, d in state.get("states", {}).items()
        }
        self.enabled = bool(state["enabled"])


class EFSGD(torch.optim.Optimizer):
    r"""Single-node SGD on compressed steps with error feedback.

    Per parameter: :math:`v = e + \eta (g + \lambda x)`, :math:`x \leftarrow x - C(v)`,
    :math:`e \leftarrow v - C(v)`. Randomised compressors draw from a generator keyed by
    ``(seed, step, parameter index)``, so a resumed run draws what the original run would have.

    Args:
        params: parameters or parameter groups.
        lr: step size :math:`\eta > 0`.
        compressor: the compressor :math:`C`.
        weight_decay: :math:`\lambda \ge 0`, added to the gradient.
        seed: base seed of the compressor randomness.

    Attributes:
        last_bits, last_alpha: traffic and the contraction factor (over all parameters) of the
            latest step.

    Example:
        >>> from diloco_ef.compressors import TopK
        >>> w = torch.nn.Parameter(torch.tensor([1.0, -2.0, 0.5]))
        >>> opt = EFSGD([w], lr=0.5, compressor=TopK(k=1))
        >>> w.grad = torch.tensor([1.0, 1.0, 4.0])
        >>> _ = opt.step()
        >>> w.data, opt.state[w]["error"]
        (tensor([ 1.0000, -2.0000, -1.5000]), tensor([0.5000, 0.5000, 0.0000]))
    """

    def __init__(
        self,
        params: Any,
        lr: float,
        compressor: Compressor,
        *,
        weight_decay: float = 0.0,
        seed: int = 0,
    ):
        if not (isinstance(lr, (int, float)) and lr > 0):
            raise ValueError(f"lr must be a positive number, got {lr!r}")
        if not (isinstance(weight_decay, (int, float)) and weight_decay >= 0):
            raise ValueError(f"weight_decay must be >= 0, got {weight_decay!r}")
        if not isinstance(compressor, Compressor):
            raise ValueError(f"compressor must be a Compressor, got {compressor!r}")
        super().__init__(params, {"lr": float(lr), "weight_decay": float(weight_decay)})
        self.compressor = compressor
        self.seed = int(seed)
        self.last_bits = 0
        self.last_alpha = 1.0

    @torch.no_grad()
    def step(self, closure: Callable[[], Tensor] | None = None) -> Tensor | None:
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        bits, sq_in, sq_err = 0, 0.0, 0.0
        index = 0
        for group in self.param_groups:
            for p in group["params"]:
                index += 1
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["step"] = 0
                    state["error"] = torch.zeros_like(p)
                g = p.grad
                if group["weight_decay"]:
                    g = g.add(p, alpha=group["weight_decay"])
                v = state["error"] + group["lr"] * g
                gen = keyed_generator(self.seed, state["step"], index)
                if self.compressor.stateful:
                    comp_state = state.setdefault("compressor", {})
                    payload = self.compressor.compress(v, gen, state=comp_state)
                else:
                    payload = self.compressor.compress(v, gen)
                s = self.compressor.decompress(payload)
                state["error"] = v - s
                state["step"] += 1
                p.sub_(s)
                bits += self.compressor.bits_sent(payload)
                sq_in += float(v.double().pow(2).sum())
                sq_err += float(state["error"].double().pow(2).sum())
        self.last_bits = bits
        self.last_alpha = 1.0 - sq_err / sq_in if sq_in > 0 else 1.0
        return loss
