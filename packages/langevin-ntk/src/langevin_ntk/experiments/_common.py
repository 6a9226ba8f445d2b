"""Shared pieces of the experiments: data, an ensemble of two-layer nets, one training run.

Seeds are trained together: the ensemble's parameters are stacked tensors ``W (S, m, d)``
and ``a (S, m)``, the loss is the sum of the per-seed losses (so each seed gets exactly its
own gradient) and :class:`~langevin_ntk.optim.Langevin` draws independent noise for every
entry: statistically the same as ``S`` separate runs, at one Python loop's cost. The NTK and
Jacobian use the closed forms :func:`~langevin_ntk.ntk.two_layer_ntk` and
:func:`~langevin_ntk.ntk.two_layer_jacobian` (tested equal to the ``torch.func`` route).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from ..bounds import prior_matched_weight_decay
from ..models import get_activation
from ..ntk import two_layer_jacobian, two_layer_ntk
from ..optim import Langevin
from ..step_bias import stationary_loss_bias


def make_data(n: int, d: int, seed: int) -> tuple[Tensor, Tensor]:
    """``n`` inputs uniform on the sphere of radius sqrt(d) and unit-RMS Gaussian labels."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g, dtype=torch.float64)
    x = x / x.norm(dim=1, keepdim=True) * math.sqrt(d)
    y = torch.randn(n, generator=g, dtype=torch.float64)
    return x, y / y.pow(2).mean().sqrt()


class TwoLayerEnsemble(nn.Module):
    """``S`` independent nets ``f_s(x) = sum_j a_sj tanh(w_sj . x)`` (standard param.).

    ``w ~ N(0, 1/d)``, ``a ~ N(0, 1/m)``; seed ``s`` uses ``torch.Generator(seed)``.
    """

    def __init__(self, d: int, width: int, seeds: list[int], activation: str = "tanh"):
        super().__init__()
        ws, as_ = [], []
        for s in seeds:
            g = torch.Generator().manual_seed(10_000 + s)
            ws.append(torch.randn(width, d, generator=g, dtype=torch.float64) / math.sqrt(d))
            as_.append(torch.randn(width, generator=g, dtype=torch.float64) / math.sqrt(width))
        self.w = nn.Parameter(torch.stack(ws))
        self.a = nn.Parameter(torch.stack(as_))
        self.act = get_activation(activation)

    def forward(self, x: Tensor) -> Tensor:
        """``(S, n)`` outputs."""
        return (self.act.fn(x @ self.w.mT) * self.a[:, None, :]).sum(-1)


def per_seed_loss(model: TwoLayerEnsemble, x: Tensor, y: Tensor) -> Tensor:
    """``0.5 * sum_i (f_s(x_i) - y_i)^2`` for each seed ``s``."""
    return 0.5 * (model(x) - y).pow(2).sum(-1)


@dataclass
class RunResult:
    """Everything recorded for one (width, temperature) over its seeds; arrays are (S, R)."""

    width: int
    temperature: float
    lr: float
    steps: int
    time: list[float]
    loss: Tensor
    lambda_min: Tensor
    lambda_min_ratio: Tensor
    jacobian_change: Tensor
    weight_distance_rel: Tensor
    #: the linearised Euler step-size bias of the stationary loss at each record
    #: (:func:`~langevin_ntk.step_bias.stationary_loss_bias`; zero at T = 0)
    step_bias: Tensor


def train_ensemble(
    x: Tensor,
    y: Tensor,
    width: int,
    temperature: float,
    seeds: list[int],
    *,
    t_max: float,
    records: int = 20,
    lr_factor: float = 0.5,
    activation: str = "tanh",
) -> RunResult:
    """Train ``len(seeds)`` two-layer nets by prior-matched Langevin up to time ``t_max``.

    Layer decays are ``T / init_var`` (``T d`` for ``W``, ``T m`` for ``a``), so the Gibbs law
    is the posterior ``exp(-L/T) x (init law)``; ``T = 0`` is plain gradient descent. The step
    is ``lr_factor / max_s lambda_max(K_0^s)`` with the exact-OU scheme.
    """
    model = TwoLayerEnsemble(x.shape[1], width, seeds, activation)
    w0, a0 = model.w.detach().clone(), model.a.detach().clone()
    k0 = two_layer_ntk(w0, a0, x, activation)
    j0 = two_layer_jacobian(w0, a0, x, activation)
    ev0 = torch.linalg.eigvalsh(k0)
    lr = lr_factor / float(ev0[:, -1].max())
    steps = max(records, math.ceil(t_max / lr))
    at = {round(r * steps / records) for r in range(records + 1)}
    decay_w = prior_matched_weight_decay(1.0 / x.shape[1], temperature)
    decay_a = prior_matched_weight_decay(1.0 / width, temperature)
    groups = [
        {"params": [model.w], "weight_decay": decay_w},
        {"params": [model.a], "weight_decay": decay_a},
    ]
    opt = Langevin(
        groups, lr=lr, temperature=temperature, scheme="ou", seed=seeds[0] + 7919 * width
    )
    norm0 = (w0.pow(2).sum((1, 2)) + a0.pow(2).sum(1)).sqrt()
    rec: dict[str, list[Tensor]] = {k: [] for k in ("loss", "lam", "jac", "dist", "bias")}
    times: list[float] = []

    def closure() -> Tensor:
        opt.zero_grad()
        loss = per_seed_loss(model, x, y).sum()
        loss.backward()
        return loss

    for k in range(steps + 1):
        if k in at:
            with torch.no_grad():
                w, a = model.w.detach(), model.a.detach()
                times.append(k * lr)
                rec["loss"].append(per_seed_loss(model, x, y))
                k_t = two_layer_ntk(w, a, x, activation)
                rec["lam"].append(torch.linalg.eigvalsh(k_t)[:, 0])
                phi = model.act.fn(x @ w.mT)
                k_a = phi @ phi.mT  # the output layer's share; the rest is the first layer's
                if temperature > 0:
                    kernels = [k_t - k_a, k_a]
                    bias = stationary_loss_bias(kernels, [decay_w, decay_a], lr, temperature)
                else:  # no noise, no stationary spread to inflate
                    bias = torch.zeros(len(seeds), dtype=x.dtype)
                rec["bias"].append(bias)
                j = two_layer_jacobian(w, a, x, activation)
                rec["jac"].append((j - j0).flatten(1).norm(dim=1) / j0.flatten(1).norm(dim=1))
                dist = ((w - w0).pow(2).sum((1, 2)) + (a - a0).pow(2).sum(1)).sqrt()
                rec["dist"].append(dist / norm0)
        if k < steps:
            opt.step(closure)
    lam = torch.stack(rec["lam"], 1)
    return RunResult(
        width=width,
        temperature=temperature,
        lr=lr,
        steps=steps,
        time=times,
        loss=torch.stack(rec["loss"], 1),
        lambda_min=lam,
        lambda_min_ratio=lam / ev0[:, :1],
        jacobian_change=torch.stack(rec["jac"], 1),
        weight_distance_rel=torch.stack(rec["dist"], 1),
        step_bias=torch.stack(rec["bias"], 1),
    )
