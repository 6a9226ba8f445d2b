"""The four problems of the optimizer conformance battery, each a fresh seeded instance.

Every problem gives its parameters as fresh leaf tensors (``init``) and a scalar loss of them
(``loss``). Matrix-shaped parameters are used where the problem allows, so that optimizers
that treat matrices specially (Muon-like LMO steps) meet one.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass
class Problem:
    name: str
    starts: list[Tensor]
    data: dict[str, Tensor]
    # Required reduction: loss after the run <= shrink * loss at the start.
    shrink: float
    steps: int

    def init(self, dtype: torch.dtype = torch.float64) -> list[Tensor]:
        return [s.to(dtype).clone().requires_grad_(True) for s in self.starts]

    def loss(self, params: list[Tensor]) -> Tensor:
        return LOSSES[self.name](params, self.data)


def _quadratic(params: list[Tensor], d: dict[str, Tensor]) -> Tensor:
    (w,) = params
    a, b = d["A"].to(w.dtype), d["B"].to(w.dtype)
    return 0.5 * (a @ w - b).pow(2).sum() / a.shape[0]


def _rosenbrock(params: list[Tensor], d: dict[str, Tensor]) -> Tensor:
    (x,) = params
    return (1 - x[0]) ** 2 + 100 * (x[1] - x[0] ** 2) ** 2


def _logistic(params: list[Tensor], d: dict[str, Tensor]) -> Tensor:
    w, b = params
    logits = d["X"].to(w.dtype) @ w.T + b
    return torch.nn.functional.cross_entropy(logits, d["y"])


def mlp_forward(params: list[Tensor], x: Tensor) -> Tensor:
    w1, b1, w2, b2 = params
    return torch.tanh(x @ w1.T + b1) @ w2.T + b2


def _mlp(params: list[Tensor], d: dict[str, Tensor]) -> Tensor:
    x = d["X"].to(params[0].dtype)
    return (mlp_forward(params, x) - d["Y"].to(x.dtype)).pow(2).mean()


LOSSES = {"quadratic": _quadratic, "rosenbrock": _rosenbrock, "logistic": _logistic, "mlp": _mlp}


def make(name: str, seed: int = 0) -> Problem:
    g = torch.Generator().manual_seed(seed)

    def rand(*shape: int) -> Tensor:
        return torch.randn(*shape, generator=g, dtype=torch.float64)

    if name == "quadratic":
        a = rand(13, 7)
        w_star = rand(7, 5)
        return Problem(name, [rand(7, 5)], {"A": a, "B": a @ w_star}, shrink=0.3, steps=150)
    if name == "rosenbrock":
        start = torch.tensor([-1.2, 1.0], dtype=torch.float64)
        return Problem(name, [start], {}, shrink=0.5, steps=200)
    if name == "logistic":
        x = rand(67, 9)
        w_true = 2.0 * rand(3, 9)
        y = (x @ w_true.T + 0.5 * rand(67, 3)).argmax(1)
        starts = [torch.zeros(3, 9, dtype=torch.float64), torch.zeros(3, dtype=torch.float64)]
        return Problem(name, starts, {"X": x, "y": y}, shrink=0.7, steps=100)
    if name == "mlp":
        x = rand(53, 6)
        teacher = [rand(4, 6), rand(4), rand(1, 4), rand(1)]
        y = mlp_forward(teacher, x)
        starts = [0.4 * rand(11, 6), torch.zeros(11), 0.4 * rand(1, 11), torch.zeros(1)]
        starts = [s.to(torch.float64) for s in starts]
        return Problem(name, starts, {"X": x, "Y": y}, shrink=0.5, steps=200)
    raise KeyError(name)


NAMES = tuple(LOSSES)
