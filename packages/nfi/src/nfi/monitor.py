r"""A hook-based detector of Numerical Feature Inflation for any classifier or LM head.

Attach it to a model, name the head (a linear layer mapping features to logits), train as
usual. Every ``every``-th training step it records, from the head's input
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
is about 15 small tensor ops over the logits every ``every`` steps, and between records one
Python call per step (a hook on the head weight's gradient that counts steps and installs the
forward hook for the next recording step only).
"""

from __future__ import annotations

import functools
import math
from typing import Any

import torch
from torch import Tensor, nn

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


_FLUSH_RECORDS = 32  # records reduced together (their values do not depend on it)
_FLUSH_BYTES = 64 * 2**20  # ... or fewer, when their gradients would hold more memory


def _signature(rec: tuple) -> tuple:
    _, g, h, _ = rec
    return (g.shape, g.dtype, g.device, None if h is None else (h.shape, h.dtype))


def _reduce(run: list[tuple[int, Tensor, Tensor | None, Tensor]]) -> list[dict[str, float]]:
    """The scalars of a run of same-shape records, in one batch of tensor ops.

    The quantities of :func:`nfi.thresholds.absorbed_rows` and :mod:`nfi.dynamics`
    (``zero_sum_violation``, ``classifier_mean_drift``), written out batched (the tests check
    the two routes agree)."""
    with torch.no_grad():
        g = torch.stack([r[1] for r in run])  # (B, N, C)
        _, N, C = g.shape
        g64 = g.to(torch.float64)
        sigma = g64.sum(dim=2)  # (B, N) row sums: 0 for exact CE
        if N:
            lo, hi = g.aminmax(dim=2)  # absorbed: no negative entry, a positive one
            absorbed = ((lo >= 0) & (hi > 0)).sum(dim=1).to(torch.float64)
        else:
            absorbed = sigma.sum(dim=1)
        vecs = [torch.stack([r[3] for r in run])]  # (B, d) mean classifier rows
        has_h = run[0][2] is not None
        if has_h:
            h64 = torch.stack([r[2] for r in run]).to(torch.float64)  # (B, N, d)
            vecs += [h64.mean(dim=1), torch.einsum("bn,bnd->bd", sigma, h64)]
        norms = torch.linalg.vector_norm(torch.stack(vecs, dim=1), dim=2)  # (B, 1 or 3)
        scal = torch.stack([absorbed, sigma.sum(dim=1), g64.abs().sum(dim=(1, 2))], dim=1)
        rows = torch.cat([scal, norms], dim=1).tolist()  # one host sync per batch
    out = []
    for n_abs, zs, total, wn, *hd in rows:
        hn, dn = (hd[0], hd[1] / C) if has_h else (math.nan, math.nan)
        out.append(
            {
                "absorbed_frac": n_abs / N if N else 0.0,
                "zero_sum": zs,
                "zero_sum_rel": zs / total if total > 0 else 0.0,
                "w_mean_norm": wn,
                "h_mean_norm": hn,
                "drift_norm": dn,
            }
        )
    return out


class Monitor:
    r"""Detect NFI in a training run through hooks on the classifier head.

    Args:
        model: the network (any ``nn.Module``).
        head: the head: its name in ``model.named_modules()``, the module itself, or ``None``
            for the last ``nn.Linear``. It must have a 2-D ``weight`` of shape ``(C, d)`` and
            map features ``(..., d)`` to logits ``(..., C)``.
        every: record every ``every``-th training step (>= 1): steps are counted as backward
            passes through the head's weight (training forwards of the head if the weight
            is frozen); the forward of step 0, every, 2 every, ... is the one recorded.
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
        self.calls = 0  # training steps seen (backward passes through the head)
        self._history: dict[str, list[float]] = {"step": [], **{k: [] for k in KEYS}}
        self._first_alarm: int | None = None
        # captured (step, grad, feats, mean classifier row) not yet reduced to scalars
        self._pending: list[tuple[int, Tensor, Tensor | None, Tensor]] = []
        self._pending_bytes = 0
        # A forward hook on the head is only installed for the steps that record: on a small
        # model a hook that merely runs costs ~2% of a step (it sends every call of the head
        # through Module's slow path). Steps are counted by a hook on the weight's gradient
        # instead, which costs nothing measurable. A frozen head (no weight gradient) has no
        # such hook to count with; it keeps the forward hook and counts training forwards.
        self._counting = weight.requires_grad
        self._fwd = None
        self._count_handle = weight.register_hook(self._count) if self._counting else None
        self._arm()

    # -- hooks -------------------------------------------------------------------------------
    def _arm(self) -> None:
        if self._fwd is None:
            self._fwd = self.head.register_forward_hook(self._forward_hook)

    def _count(self, grad: Tensor) -> None:
        self.calls += 1
        if self.calls % self.every == 0:
            self._arm()  # the next training forward records

    def _forward_hook(self, module: nn.Module, inputs: tuple, output: Any) -> None:
        if (
            not torch.is_grad_enabled()
            or not isinstance(output, Tensor)
            or not output.requires_grad
        ):
            return  # an eval forward does not use up the armed record
        step = self.calls
        if self._counting:
            self._fwd.remove()  # safe: Module calls its hooks from a copy of the dict
            self._fwd = None
        else:
            self.calls += 1
            if step % self.every:
                return
        feats = inputs[0].detach() if inputs and isinstance(inputs[0], Tensor) else None
        output.register_hook(functools.partial(self._capture, step, feats))

    # -- records -----------------------------------------------------------------------------
    def _capture(self, step: int, feats: Tensor | None, grad: Tensor) -> None:
        # Only what will not survive the step is taken now: copies of the logit gradient
        # and the features, and the mean classifier row (the weight moves on). The reductions
        # wait for a batch of records (or for the history to be read): done one record at a
        # time, between training steps, each of their ~15 small ops runs cold and a record
        # cost ~10% of a step of the slingshot model; for a batch at once, they run once.
        with torch.no_grad():
            C = grad.shape[-1]
            g = grad.detach().reshape(-1, C).clone()
            w = self.head.weight.detach()
            wbar = w.mean(dim=0, dtype=torch.float64)
            h = None
            if feats is not None and feats.shape[-1] == w.shape[1]:
                h = feats.reshape(-1, w.shape[1])
                # copied too: a static activation buffer would be overwritten by later steps
                h = h.clone() if h.shape[0] == g.shape[0] else None
        self._pending.append((step, g, h, wbar))
        self._pending_bytes += g.numel() * g.element_size()
        if h is not None:
            self._pending_bytes += h.numel() * h.element_size()
        if len(self._pending) >= _FLUSH_RECORDS or self._pending_bytes >= _FLUSH_BYTES:
            self._flush()

    def _flush(self) -> None:
        pending, self._pending, self._pending_bytes = self._pending, [], 0
        i = 0
        while i < len(pending):
            # a run of records of one shape is reduced as one batch
            j = i + 1
            while j < len(pending) and _signature(pending[j]) == _signature(pending[i]):
                j += 1
            run = pending[i:j]
            for (step, *_), rec in zip(run, _reduce(run), strict=True):
                self._append(step, rec)
            i = j

    def _append(self, step: int, rec: dict[str, float]) -> None:
        self._history["step"].append(step)
        for k, v in rec.items():
            self._history[k].append(v)
        alarm = self._alarm()
        self._history["alarm"].append(float(alarm))
        if alarm and self._first_alarm is None:
            self._first_alarm = step

    @property
    def history(self) -> dict[str, list[float]]:
        """``{"step": [...], key: [...] for key in KEYS}``, one entry per record."""
        if self._pending:
            self._flush()
        return self._history

    @property
    def first_alarm(self) -> int | None:
        """The step of the first record that raised the alarm, or None."""
        if self._pending:
            self._flush()
        return self._first_alarm

    def _alarm(self) -> bool:
        wn, hn = self._history["w_mean_norm"], self._history["h_mean_norm"]
        if len(wn) < self.window:
            return False
        w0, w1, h0, h1 = wn[-self.window], wn[-1], hn[-self.window], hn[-1]
        rel = self._history["zero_sum_rel"][-self.window :]
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
        """Detach the hooks (records are kept)."""
        for h in (self._fwd, self._count_handle):
            if h is not None:
                h.remove()
        self._fwd = self._count_handle = None

    def __enter__(self) -> Monitor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()
