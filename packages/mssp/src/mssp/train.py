r"""A synthetic clustered regression task and a plain training loop for the experiments.

Task (:class:`ClusterTeacher`): inputs from a mixture of ``C`` Gaussian clusters in
:math:`\mathbb R^{d}`, targets :math:`y = A_{c(x)} \tanh(B x) / \sqrt{H}` with a shared
:math:`B \in \mathbb R^{H \times d}` and a per-cluster readout :math:`A_c`: a function that a
router can split by cluster and that wider/more experts fit better. Fresh batches every step
(online learning), so the loss after a fixed number of steps measures the training dynamics,
not memorisation.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from .layers import MoEModel

__all__ = ["ClusterTeacher", "train"]


class ClusterTeacher:
    """A fixed random teacher; :meth:`sample` draws ``(x, y)`` batches.

    Args:
        d_in, d_out: input/output dimensions; clusters: ``C``; hidden: ``H``.
        seed: seed of the teacher's weights.

    Example:
        >>> t = ClusterTeacher(8, 2, seed=0)
        >>> x, y = t.sample(5, torch.Generator().manual_seed(1))
        >>> x.shape, y.shape
        (torch.Size([5, 8]), torch.Size([5, 2]))
    """

    def __init__(
        self, d_in: int, d_out: int, *, clusters: int = 8, hidden: int = 64, seed: int = 0
    ):
        for name, v in (
            ("d_in", d_in),
            ("d_out", d_out),
            ("clusters", clusters),
            ("hidden", hidden),
        ):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be a positive int, got {v!r}")
        g = torch.Generator().manual_seed(seed)
        self.d_in, self.d_out, self.clusters = d_in, d_out, clusters
        self.centers = 2.0 * torch.randn(clusters, d_in, generator=g) / math.sqrt(d_in)
        self.b = torch.randn(hidden, d_in, generator=g) * (2.0 / math.sqrt(d_in))
        self.a = torch.randn(clusters, d_out, hidden, generator=g) / math.sqrt(hidden)

    def sample(self, batch: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """``batch`` fresh ``(x, y)`` pairs drawn with ``gen``."""
        c = torch.randint(0, self.clusters, (batch,), generator=gen)
        x = self.centers[c] + 0.5 * torch.randn(batch, self.d_in, generator=gen) / math.sqrt(
            self.d_in
        )
        feats = torch.tanh(x @ self.b.T)
        y = torch.einsum("toh,th->to", self.a[c], feats)
        return x, y


def train(
    model: MoEModel,
    groups: list[dict],
    optimizer: str,
    teacher: ClusterTeacher,
    *,
    steps: int,
    batch: int,
    seed: int = 0,
    callback: Callable[[MoEModel], object] | None = None,
    tail: int = 10,
    eval_batch: int = 0,
) -> dict[str, float | list[float]]:
    """Train with fresh batches; return the mean loss of the last ``tail`` steps.

    Args:
        model: the model; groups: its param groups (from :func:`mssp.parameterize`).
        optimizer: ``"sgd"`` or ``"adam"``.
        teacher: the task; steps, batch: the run length and batch size.
        seed: seed of the data stream.
        callback: called as ``callback(model)`` before the first step and after every step.
        tail: steps averaged for the final loss.
        eval_batch: if positive, also the loss on a fixed held-out batch of this size (drawn
            with seed 12345, the same for every run) at the end, as ``"eval"``.

    Returns:
        ``{"final": mean of the last tail losses (inf if any loss was not finite),
        "losses": every step's loss, "eval": held-out loss (if asked)}``.
    """
    if optimizer == "adam":
        opt = torch.optim.Adam(groups)
    elif optimizer == "sgd":
        opt = torch.optim.SGD(groups)
    else:
        raise ValueError(f"unknown optimizer {optimizer!r}; choose 'sgd' or 'adam'")
    gen = torch.Generator().manual_seed(seed)
    losses: list[float] = []
    if callback is not None:
        callback(model)
    for _ in range(steps):
        x, y = teacher.sample(batch, gen)
        loss = torch.nn.functional.mse_loss(model(x), y)
        if model.aux_weight > 0:
            loss = loss + model.aux_loss()
        if not torch.isfinite(loss):
            losses.append(math.inf)
            return {"final": math.inf, "losses": losses, "eval": math.inf}
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if callback is not None:
            callback(model)
    final = sum(losses[-tail:]) / len(losses[-tail:])
    out: dict[str, float | list[float]] = {
        "final": final if math.isfinite(final) else math.inf,
        "losses": losses,
    }
    if eval_batch > 0:
        x, y = teacher.sample(eval_batch, torch.Generator().manual_seed(12345))
        with torch.no_grad():
            ev = float(torch.nn.functional.mse_loss(model(x), y))
        out["eval"] = ev if math.isfinite(ev) else math.inf
    return out
