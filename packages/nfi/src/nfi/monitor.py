r"""A hook-based detector of Numerical Feature Inflation for any classifier or LM head.

Attach it to a model, name the head (a linear layer mapping features to logits), train as
usual. Every ``every``-th training forward of the head it records, from the head's input
(features :math:`h`), its weight and the gradient arriving at its output (logits):

* ``absorbed_frac``: fraction of rows whose gradient has no negative entry but a positive
  one, the fingerprint of an absorbed CE row (:func:`nfi.thresholds.absorbed_rows`; no
  targets needed);
* ``zero_sum``: :math:`\sum_i \sigma_i`, the signed total of the row sums of the logit
  gradient (0 for exact CE), and ``zero_sum_rel`` the same over :math:`\sum_{ic} |g_{ic}|`.
  Signed on purpose: ordinary rounding leaves row sums of either sign, of size about
  :math:`u` times the row's largest entry, which cancel over a batch; absorbed rows all
  leave a *positive* sum, which adds up (the drift of :mod:`nfi.dynamics`);
* ``w_mean_norm``: :math:`\|\bar w\|`, the norm of the mean classifier row;
* ``h_mean_norm``: :math:`\|\bar h\|`, the norm of the batch-mean feature;
* ``drift_norm``: :math:`\|\frac1C\sum_i\sigma_i h_i\|`, the classifier-mean gradient;
* ``alarm``: 1 once the positive feedback loop is on: over the last ``window`` records both
  :math:`\|\bar w\|` and :math:`\|\bar h\|` grew by at least ``growth`` and the rows no longer
  sum to zero (mean ``zero_sum_rel`` above ``rel_tol``).

All quantities are computed under ``torch.no_grad`` from tensors the step already has; the cost
is a few reductions over the logits every ``every`` steps.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

from .dynamics import classifier_mean_drift, zero_sum_violation
from .thresholds import absorbed_rows

__all__ = ["KEYS", "Monitor"]

#: The per-record scalars, in the order of :meth:`Monitor.summary`.
KEYS = (
    "absorbed_frac",
    "zero_sum",
    "zero_sum_rel",
    "w_mean_norm",
    "h_mean_norm",
    "drift_norm",
    "alarm",
)


def _find_head(model: nn.Module, head: str | nn.Module | None) -> tuple[str, nn.Module]:
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be an nn.Module, got {type(model).__name__}")
    named = dict(model.named_modules())
    if head is None:
        linears = [(n, m) for n, m in named.items() if isinstance(m, nn.Linear)]
        if not linears:
            raise ValueError("head=None looks for the last nn.Linear, but the model has none")
        return linears[-1]
    if isinstance(head, str):
        if head not in named:
            near = [n for n in named if n and head.split(".")[-1] in n][:5]
            raise ValueError(f"head {head!r} not found in the model; modules like it: {near}")
        return head, named[head]
    if isinstance(head, nn.Module):
        for n, m in named.items():
            if m is head:
                return n, m
        raise ValueError("the head module given is not a submodule of the model")
    raise TypeError(f"head must be a module name, an nn.Module or None, got {type(head).__name__}")


class Monitor:
    r"""Detect NFI in a training run through hooks on the classifier head.

    Args:
        model: the network (any ``nn.Module``).
        head: the head: its name in ``model.named_modules()``, the module itself, or ``None``
            for the last ``nn.Linear``. It must have a 2-D ``weight`` of shape ``(C, d)`` and
            map features ``(..., d)`` to logits ``(..., C)``.
        every: record every ``every``-th training forward of the head (>= 1).
        window: records the alarm looks back over (>= 2).
        growth: growth factor of both means over the window that raises the alarm (> 1).
        rel_tol: mean ``zero_sum_rel`` over the window above which zero-sum counts as broken.

    Example:
        >>> net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
        >>> mon = Monitor(net, head="2", every=1)
        >>> y = torch.tensor([0, 1, 2, 0, 1])
        >>> nn.functional.cross_entropy(net(torch.randn(5, 4)), y).backward()
        >>> mon.latest()["absorbed_frac"]
        0.0
    """

    def __init__(
        self,
        model: nn.Module,
        head: str | nn.Module | None = None,
        every: int = 1,
        window: int = 20,
        growth: float = 1.5,
        rel_tol: float = 1e-3,
    ):
        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            raise ValueError(f"every must be an int >= 1, got {every!r}")
        if isinstance(window, bool) or not isinstance(window, int) or window < 2:
            raise ValueError(f"window must be an int >= 2, got {window!r}")
        if not (growth > 1):
            raise ValueError(f"growth must be > 1, got {growth!r}")
        if not (rel_tol >= 0):
            raise ValueError(f"rel_tol must be >= 0, got {rel_tol!r}")
        self.head_name, self.head = _find_head(model, head)
        weight = getattr(self.head, "weight", None)
        if not isinstance(weight, Tensor) or weight.dim() != 2:
            raise ValueError(
                f"head {self.head_name!r} ({type(self.head).__name__}) has no 2-D weight (C, d)"
            )
        self.every, self.window, self.growth, self.rel_tol = every, window, growth, rel_tol
        self.calls = 0
        self.history: dict[str, list[float]] = {"step": [], **{k: [] for k in KEYS}}
        self.first_alarm: int | None = None
        self._handle = self.head.register_forward_hook(self._forward_hook)

    # -- hooks -------------------------------------------------------------------------------
    def _forward_hook(self, module: nn.Module, inputs: tuple, output: Any) -> None:
        if (
            not torch.is_grad_enabled()
            or not isinstance(output, Tensor)
            or not output.requires_grad
        ):
            return
        step = self.calls
        self.calls += 1
        if step % self.every:
            return
        feats = inputs[0].detach() if inputs and isinstance(inputs[0], Tensor) else None
        output.register_hook(self._make_grad_hook(step, feats))

    def _make_grad_hook(self, step: int, feats: Tensor | None) -> Callable[[Tensor], None]:
        def hook(grad: Tensor) -> None:
            self._record(step, grad.detach(), feats)

        return hook

    @torch.no_grad()
    def _record(self, step: int, grad: Tensor, feats: Tensor | None) -> None:
        C = grad.shape[-1]
        g = grad.reshape(-1, C)
        w = self.head.weight.detach()
        nan = torch.tensor(float("nan"), dtype=torch.float64, device=g.device)
        sigma = zero_sum_violation(g)
        parts = [
            absorbed_rows(g).double().mean() if g.shape[0] else torch.zeros_like(nan),
            sigma.sum(),
            g.double().abs().sum(),
            w.double().mean(dim=0).norm(),
            nan,
            nan,
        ]
        if feats is not None and feats.shape[-1] == w.shape[1]:
            h = feats.reshape(-1, w.shape[1])
            if h.shape[0] == g.shape[0]:
                parts[4] = h.double().mean(dim=0).norm()
                parts[5] = classifier_mean_drift(g, h).norm()
        absorbed, zs, total, wn, hn, dn = torch.stack(parts).tolist()  # one host sync
        rec = {
            "absorbed_frac": absorbed,
            "zero_sum": zs,
            "zero_sum_rel": zs / total if total > 0 else 0.0,
            "w_mean_norm": wn,
            "h_mean_norm": hn,
            "drift_norm": dn,
        }
        self.history["step"].append(step)
        for k, v in rec.items():
            self.history[k].append(v)
        alarm = self._alarm()
        self.history["alarm"].append(float(alarm))
        if alarm and self.first_alarm is None:
            self.first_alarm = step

    def _alarm(self) -> bool:
        wn, hn = self.history["w_mean_norm"], self.history["h_mean_norm"]
        if len(wn) < self.window:
            return False
        w0, w1, h0, h1 = wn[-self.window], wn[-1], hn[-self.window], hn[-1]
        rel = self.history["zero_sum_rel"][-self.window :]
        grew = w1 >= self.growth * w0 and h1 >= self.growth * h0
        return bool(grew and sum(rel) / len(rel) > self.rel_tol)

    # -- reading -----------------------------------------------------------------------------
    def latest(self) -> dict[str, float]:
        """The last record as a dict (``step`` included); empty before the first backward."""
        if not self.history["step"]:
            return {}
        return {k: v[-1] for k, v in self.history.items()}

    def scalars(self, prefix: str = "nfi/") -> dict[str, float]:
        """The last record as TensorBoard-style ``{prefix + name: value}`` (no ``step``)."""
        return {prefix + k: v for k, v in self.latest().items() if k != "step"}

    def log_to(self, writer: Any, prefix: str = "nfi/") -> None:
        """Send the last record to anything with ``add_scalar(tag, value, step)``."""
        last = self.latest()
        for tag, v in self.scalars(prefix).items():
            writer.add_scalar(tag, v, int(last["step"]))

    def summary(self, rows: int = 10) -> str:
        """A plain-text table of up to ``rows`` records spread over the history."""
        n = len(self.history["step"])
        head = f"{'step':>8} " + " ".join(f"{k:>13}" for k in KEYS)
        if n == 0:
            return head + "\n(no records yet)"
        idx = sorted({round(i * (n - 1) / max(rows - 1, 1)) for i in range(min(rows, n))})
        lines = [head]
        for i in idx:
            vals = " ".join(f"{self.history[k][i]:13.4g}" for k in KEYS)
            lines.append(f"{self.history['step'][i]:>8} {vals}")
        alarm = "never" if self.first_alarm is None else f"at step {self.first_alarm}"
        lines.append(f"head {self.head_name!r}; NFI alarm {alarm}")
        return "\n".join(lines)

    def remove(self) -> None:
        """Detach the hook (records are kept)."""
        self._handle.remove()

    def __enter__(self) -> Monitor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()
