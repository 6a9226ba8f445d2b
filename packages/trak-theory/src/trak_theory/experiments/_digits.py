"""sklearn digits and a batch of small MLPs trained at once (for LDS ground truth).

The MLP is 64 -> 64 (ReLU) -> 10: 4,810 parameters. ``train_mlps`` trains B models on B
subsets in one stacked computation: the summed loss is separable over models and Adam acts
elementwise, so this is exactly B independent full-batch Adam runs (each from the
``nn.Linear`` initialisation drawn with its own seed).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor, nn

from ..gradients import margin

HIDDEN = 64


def load_split(n_train: int = 1000, n_target: int = 200, seed: int = 0):
    """(x_train, y_train, x_target, y_target): a seeded split of the bundled digits."""
    from sklearn.datasets import load_digits

    d = load_digits()
    x = torch.tensor(d.data / 16.0, dtype=torch.float32)
    y = torch.tensor(d.target, dtype=torch.long)
    if n_train + n_target > len(y):
        raise ValueError(f"digits has {len(y)} images, asked for {n_train} + {n_target}")
    perm = torch.from_numpy(np.random.default_rng(seed).permutation(len(y)))
    tr, te = perm[:n_train], perm[n_train : n_train + n_target]
    return x[tr], y[tr], x[te], y[te]


def make_mlp() -> nn.Module:
    """The 4,810-parameter MLP."""
    return nn.Sequential(nn.Linear(64, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, 10))


def _stacked_init(seeds: list[int]) -> list[Tensor]:
    mods = []
    for s in seeds:
        torch.manual_seed(int(s))
        mods.append(make_mlp())
    return [torch.stack([list(m.parameters())[i].detach() for m in mods]) for i in range(4)]


def _forward(params: list[Tensor], x: Tensor) -> Tensor:
    w1, b1, w2, b2 = params
    h = torch.relu(torch.baddbmm(b1[:, None, :], x.expand(w1.shape[0], -1, -1), w1.transpose(1, 2)))
    return torch.baddbmm(b2[:, None, :], h, w2.transpose(1, 2))


def train_mlps(
    x: Tensor,
    y: Tensor,
    masks: Tensor,
    seeds: list[int],
    steps: int = 300,
    lr: float = 1e-2,
    weight_decay: float = 1e-3,
) -> list[dict[str, Tensor]]:
    """Train one MLP per row of ``masks`` (0/1 over the training set); return state dicts."""
    masks = masks.to(torch.float32)
    params = [p.clone().requires_grad_(True) for p in _stacked_init(seeds)]
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)
    counts = masks.sum(1).clamp_min(1)
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        logits = _forward(params, x)  # (B, n, 10)
        ce = nn.functional.cross_entropy(
            logits.reshape(-1, 10), y.repeat(len(seeds)), reduction="none"
        ).view(len(seeds), -1)
        ((ce * masks).sum(1) / counts).sum().backward()
        opt.step()
    names = ["0.weight", "0.bias", "2.weight", "2.bias"]
    return [
        {n: p[b].detach().clone() for n, p in zip(names, params, strict=True)}
        for b in range(len(seeds))
    ]


def margins_of(states: list[dict[str, Tensor]], x: Tensor, y: Tensor) -> Tensor:
    """(B, m) margins of each model on (x, y)."""
    params = [
        torch.stack([s[n] for s in states]) for n in ["0.weight", "0.bias", "2.weight", "2.bias"]
    ]
    with torch.no_grad():
        logits = _forward(params, x)
    return torch.stack([torch.vmap(margin)(lg, y) for lg in logits])


def accuracy(state: dict[str, Tensor], x: Tensor, y: Tensor) -> float:
    with torch.no_grad():
        logits = _forward([state[n][None] for n in ["0.weight", "0.bias", "2.weight", "2.bias"]], x)
    return float((logits[0].argmax(1) == y).float().mean())
