"""Deep (depth >= 3) pieces of ``ntk_stability``: init draws and a batched training run.

Seeds train together as in ``_common``: layer ``l`` of all seeds is one stacked parameter
``(S, fan_out, fan_in)``, the loss is the sum of per-seed losses (each seed gets its own
gradient) and ``Langevin`` draws independent noise per entry. The NTK at a record is the
exact :func:`~langevin_ntk.ntk.mlp_ntk` of a per-seed :class:`~langevin_ntk.models.MLP`
holding that seed's weights (tested equal to separate runs).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from ..bounds import prior_matched_weight_decay
from ..models import MLP
from ..ntk import mlp_ntk
from ..optim import Langevin
from ..stability_radius import network_init_norms, stability_radius


def perturbed_min_ratio(net: MLP, x: Tensor, radius: float, draws: int, seed: int) -> float:
    """min over ``draws`` random points on the sphere of radius ``radius`` around ``net``'s
    weights (a Gaussian direction over all layers, normalised) of
    ``lambda_min(K)/lambda_min(K_0)``: the radius bound says it is at least 1/2."""
    g = torch.Generator().manual_seed(seed)
    w0 = [w.detach().clone() for w in net.weights]
    lam0 = float(torch.linalg.eigvalsh(mlp_ntk(net, x))[0])
    worst = math.inf
    for _ in range(draws):
        dirs = [torch.randn(w.shape, generator=g, dtype=w.dtype) for w in w0]
        norm = math.sqrt(sum(float(v.pow(2).sum()) for v in dirs))
        with torch.no_grad():
            for w, w_0, v in zip(net.weights, w0, dirs, strict=True):
                w.copy_(w_0 + radius * v / norm)
        worst = min(worst, float(torch.linalg.eigvalsh(mlp_ntk(net, x))[0]) / lam0)
    with torch.no_grad():
        for w, w_0 in zip(net.weights, w0, strict=True):
            w.copy_(w_0)
    return worst


def init_lambda_min(x: Tensor, width: int, depth: int, seeds: list[int]) -> list[float]:
    """``lambda_min(K_0)`` of fresh standard-parameterisation tanh MLPs, one per seed
    (float32 weights: the draw of a 4096^2 layer dominates; the NTK is accumulated in float64
    from float32 features, whose rounding is far below the bounds' slack)."""
    out = []
    for s in seeds:
        net = MLP(x.shape[1], width, depth, "tanh", generator=torch.Generator().manual_seed(s))
        k = mlp_ntk(net, x.to(torch.float32)).to(torch.float64)
        out.append(float(torch.linalg.eigvalsh(k)[0]))
    return out


class DeepEnsemble(nn.Module):
    """``S`` independent bias-free tanh MLPs (standard parameterisation), stacked per layer.

    Seed ``s``'s weights are exactly those of ``MLP(d, width, depth,
    generator=torch.Generator().manual_seed(s), dtype=float64)``.
    """

    def __init__(self, d: int, width: int, depth: int, seeds: list[int]):
        super().__init__()
        nets = [
            MLP(
                d,
                width,
                depth,
                "tanh",
                generator=torch.Generator().manual_seed(s),
                dtype=torch.float64,
            )
            for s in seeds
        ]
        self.d, self.width, self.depth = d, width, depth
        self.weights = nn.ParameterList(
            nn.Parameter(torch.stack([net.weights[i].detach() for net in nets]))
            for i in range(depth)
        )

    def forward(self, x: Tensor) -> Tensor:
        """``(S, n)`` outputs."""
        h = x.expand(self.weights[0].shape[0], -1, -1)
        for w in self.weights[:-1]:
            h = torch.tanh(h @ w.mT)
        return (h @ self.weights[-1].mT)[..., 0]

    def member(self, i: int) -> MLP:
        """Seed ``i``'s network as an ``MLP`` (a copy)."""
        net = MLP(self.d, self.width, self.depth, "tanh", dtype=torch.float64)
        with torch.no_grad():
            for w, ws in zip(net.weights, self.weights, strict=True):
                w.copy_(ws[i])
        return net


@dataclass
class DeepRun:
    """One (width, temperature) over its seeds; arrays are ``(S, R)``."""

    width: int
    temperature: float
    steps: int
    time: list[float]
    lambda_min: Tensor
    distance: Tensor  # ||theta_t - theta_0|| (absolute)
    radius: Tensor  # (S,): the certified radius of each seed's init
    init_norm: Tensor  # (S,): ||theta_0||
    exit_time: Tensor  # (S,): first time ||theta_t - theta_0|| > radius (inf: never)
    inside_min_ratio: Tensor  # (S,): min lambda_min(K_t)/lambda_min(K_0) over steps inside
    first_step_distance: Tensor  # (S,): ||theta_1 - theta_0|| after one step


def train_deep(
    x: Tensor,
    y: Tensor,
    width: int,
    depth: int,
    temperature: float,
    seeds: list[int],
    *,
    t_max: float,
    records: int = 20,
    lr_factor: float = 0.5,
) -> DeepRun:
    """Prior-matched Langevin (decay ``T * fan_in`` per layer, exact-OU scheme; ``T = 0`` is
    gradient descent) up to time ``t_max``, step ``lr_factor / max_s lambda_max(K_0^s)``."""
    model = DeepEnsemble(x.shape[1], width, depth, seeds)
    w0 = [w.detach().clone() for w in model.weights]
    k0 = [mlp_ntk(model.member(i), x) for i in range(len(seeds))]
    ev0 = torch.stack([torch.linalg.eigvalsh(k) for k in k0])
    radius = torch.tensor(
        [
            stability_radius(network_init_norms(model.member(i), x), float(ev0[i, 0]))
            for i in range(len(seeds))
        ],
        dtype=torch.float64,
    )
    lr = lr_factor / float(ev0[:, -1].max())
    steps = max(records, math.ceil(t_max / lr))
    at = {round(r * steps / records) for r in range(records + 1)}
    groups = [
        {"params": [w], "weight_decay": prior_matched_weight_decay(1.0 / w.shape[2], temperature)}
        for w in model.weights
    ]
    opt = Langevin(
        groups, lr=lr, temperature=temperature, scheme="ou", seed=seeds[0] + 7919 * width
    )

    def closure() -> Tensor:
        opt.zero_grad()
        loss = 0.5 * (model(x) - y).pow(2).sum()
        loss.backward()
        return loss

    n_seeds = len(seeds)
    lam, dist, times = [], [], []
    # every step: the distance; while a seed is inside its radius, also its lambda_min (the
    # certified statement is checked at every step it covers, not only at the records)
    exit_time = torch.full((n_seeds,), math.inf, dtype=torch.float64)
    inside_min_ratio = torch.ones(n_seeds, dtype=torch.float64)
    for k in range(steps + 1):
        with torch.no_grad():
            sq = sum((w - w_0).pow(2).sum((1, 2)) for w, w_0 in zip(model.weights, w0, strict=True))
        d_k = sq.sqrt()
        if k == 1:
            first = d_k.clone()
        for i in range(n_seeds):
            if math.isinf(exit_time[i]):
                if d_k[i] > radius[i]:
                    exit_time[i] = k * lr
                elif k > 0:
                    lam_k = torch.linalg.eigvalsh(mlp_ntk(model.member(i), x))[0]
                    inside_min_ratio[i] = min(inside_min_ratio[i], lam_k / ev0[i, 0])
        if k in at:
            times.append(k * lr)
            lam.append(
                torch.stack(
                    [torch.linalg.eigvalsh(mlp_ntk(model.member(i), x))[0] for i in range(n_seeds)]
                )
            )
            dist.append(d_k)
        if k < steps:
            opt.step(closure)
    init_norm = sum(w.pow(2).sum((1, 2)) for w in w0).sqrt()
    return DeepRun(
        width=width,
        temperature=temperature,
        steps=steps,
        time=times,
        lambda_min=torch.stack(lam, 1),
        distance=torch.stack(dist, 1),
        radius=radius,
        init_norm=init_norm,
        exit_time=exit_time,
        inside_min_ratio=inside_min_ratio,
        first_step_distance=first,
    )
