r"""Feedforward networks in the standard and the NTK parameterisation, and their activations.

An ``MLP(d_in, width, depth)`` has ``depth`` weight layers (``depth - 1`` hidden layers of
``width`` units, no biases) and a scalar (or ``d_out``) output:

* **standard** (``"standard"``): :math:`W_l \sim N(0, 1/\mathrm{fan\_in})` entrywise,
  :math:`h_l = \sigma(W_l h_{l-1})`, :math:`f = W_L h_{L-1}`;
* **NTK** (``"ntk"``): :math:`W_l \sim N(0, 1)`,
  :math:`h_l = \sigma(W_l h_{l-1}/\sqrt{\mathrm{fan\_in}})`,
  :math:`f = W_L h_{L-1}/\sqrt{\mathrm{width}}`.

Both compute the same function at initialisation in law; they differ in how gradients scale
with width (the NTK of the standard one grows like ``width``).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor, nn

__all__ = ["ACTIVATIONS", "MLP", "Activation", "get_activation"]


@dataclass(frozen=True)
class Activation:
    """An activation with its derivative and the properties the bounds need.

    Attributes:
        name: registry key.
        fn: :math:`\\sigma`.
        deriv: :math:`\\sigma'` (almost everywhere for a non-smooth one).
        smooth: :math:`\\sigma \\in C^2` with bounded derivatives (the paper's assumption).
        sup_abs: :math:`\\sup|\\sigma|` (``inf`` when unbounded).
    """

    name: str
    fn: Callable[[Tensor], Tensor]
    deriv: Callable[[Tensor], Tensor]
    smooth: bool
    sup_abs: float


def _gelu_deriv(z: Tensor) -> Tensor:
    cdf = 0.5 * (1.0 + torch.erf(z / math.sqrt(2.0)))
    pdf = torch.exp(-0.5 * z * z) / math.sqrt(2.0 * math.pi)
    return cdf + z * pdf


ACTIVATIONS: dict[str, Activation] = {
    "tanh": Activation("tanh", torch.tanh, lambda z: 1.0 - torch.tanh(z) ** 2, True, 1.0),
    "erf": Activation(
        "erf", torch.erf, lambda z: 2.0 / math.sqrt(math.pi) * torch.exp(-z * z), True, 1.0
    ),
    "sigmoid": Activation(
        "sigmoid", torch.sigmoid, lambda z: torch.sigmoid(z) * torch.sigmoid(-z), True, 1.0
    ),
    "gelu": Activation("gelu", nn.functional.gelu, _gelu_deriv, True, math.inf),
    "softplus": Activation("softplus", nn.functional.softplus, torch.sigmoid, True, math.inf),
    "relu": Activation("relu", torch.relu, lambda z: (z > 0).to(z.dtype), False, math.inf),
}


def get_activation(name: str | Activation) -> Activation:
    """Look up an activation by name (or pass one through).

    Example:
        >>> get_activation("tanh").sup_abs
        1.0
    """
    if isinstance(name, Activation):
        return name
    if name not in ACTIVATIONS:
        raise ValueError(f"unknown activation {name!r}; choose one of {sorted(ACTIVATIONS)}")
    return ACTIVATIONS[name]


class MLP(nn.Module):
    """Bias-free feedforward network (see the module docstring for both parameterisations).

    Args:
        d_in: input dimension.
        width: hidden width.
        depth: number of weight layers, at least 2 (``2`` = one hidden layer).
        activation: a name in :data:`ACTIVATIONS`.
        parameterization: ``"standard"`` or ``"ntk"``.
        d_out: output dimension.
        generator: optional ``torch.Generator`` for the initialisation.
        dtype: parameter dtype.

    Example:
        >>> net = MLP(3, 16, 2, "tanh", generator=torch.Generator().manual_seed(0))
        >>> net(torch.randn(5, 3)).shape
        torch.Size([5])
    """

    def __init__(
        self,
        d_in: int,
        width: int,
        depth: int = 2,
        activation: str = "tanh",
        parameterization: str = "standard",
        d_out: int = 1,
        *,
        generator: torch.Generator | None = None,
        dtype: torch.dtype = torch.float32,
    ):
        super().__init__()
        for name, v, lo in (("d_in", d_in, 1), ("width", width, 1), ("depth", depth, 2)):
            if isinstance(v, bool) or not isinstance(v, int) or v < lo:
                raise ValueError(f"{name} must be an int >= {lo}, got {v!r}")
        if isinstance(d_out, bool) or not isinstance(d_out, int) or d_out < 1:
            raise ValueError(f"d_out must be an int >= 1, got {d_out!r}")
        if parameterization not in ("standard", "ntk"):
            raise ValueError(
                f"parameterization must be 'standard' or 'ntk', got {parameterization!r}"
            )
        self.act = get_activation(activation)
        #: ``None``, or ``(layer, input, z) -> z`` called on every pre-activation (see _dense)
        self._tap: Callable[[int, Tensor, Tensor], Tensor] | None = None
        self.parameterization = parameterization
        self.d_out = d_out
        dims = [d_in] + [width] * (depth - 1) + [d_out]
        self.weights = nn.ParameterList()
        for fan_in, fan_out in itertools.pairwise(dims):
            w = torch.randn(fan_out, fan_in, generator=generator, dtype=dtype)
            if parameterization == "standard":
                w = w / math.sqrt(fan_in)
            self.weights.append(nn.Parameter(w))

    def _dense(self, i: int, h: Tensor) -> Tensor:
        """Layer ``i``'s pre-activation; a set :attr:`_tap` sees (and may shift) it.

        The tap gets ``(i, c h, z)`` with ``c`` the layer's scale, so that the layer's
        per-sample Jacobian block is ``delta (c h)^T`` (``delta = df/dz``): what
        :func:`langevin_ntk.layerwise.layerwise_ntk` needs without knowing the parameterisation.
        """
        w = self.weights[i]
        z = h @ w.mT
        scaled = self.parameterization == "ntk"
        if scaled:
            z = z / math.sqrt(w.shape[1])
        if self._tap is not None:
            z = self._tap(i, h / math.sqrt(w.shape[1]) if scaled else h, z)
        return z

    def features(self, x: Tensor) -> Tensor:
        """The last hidden layer's activations :math:`h_{L-1}`, shape ``(n, width)``."""
        h = x
        for i in range(len(self.weights) - 1):  # index, not slice: torch.func swaps entries
            h = self.act.fn(self._dense(i, h))
        return h

    def forward(self, x: Tensor) -> Tensor:
        if x.ndim != 2 or x.shape[1] != self.weights[0].shape[1]:
            raise ValueError(
                f"input must have shape (n, {self.weights[0].shape[1]}), got {tuple(x.shape)}"
            )
        out = self._dense(len(self.weights) - 1, self.features(x))
        return out.squeeze(-1) if self.d_out == 1 else out
