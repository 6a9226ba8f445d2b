r"""The MoE layer and a small residual MoE network (the model of the experiments).

:class:`MoELayer` (width ``N``, ``M`` experts of width ``N_e``, top-``K`` routing):

.. math::
    r = \alpha_r W_r \bar h,\quad (S, g) = \operatorname{route}_K(r),\quad
    y_e = \alpha_2 W_{2,e}\,\phi(\alpha_1 W_{1,e} \bar h),\quad
    \mathrm{MoE}(h) = \alpha_{\mathrm{agg}} \sum_{e \in S} g_e\, y_e,

with :math:`\bar h = h / \mathrm{rms}(h)` (a weightless RMS norm, optional). The multipliers
:math:`\alpha` are plain attributes (floats) set by :func:`mssp.parameterize`; a fresh layer has
all of them 1 (standard parameterisation).

:class:`MoEModel`: :math:`h_0 = \alpha_{in} W_{in} x`, ``L`` residual blocks
:math:`h_{l} = h_{l-1} + \beta\, \mathrm{MoE}_l(h_{l-1})` (:math:`\beta` = the branch
multiplier, :math:`L^{-1/2}` under depth-muP), readout :math:`z = \alpha_{out} W_{out} h_L`.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from .routing import combine, dispatch, expert_mlp, load_balancing_loss, topk_route

__all__ = ["MoELayer", "MoEModel", "check_shape"]

_ACTS = {"relu": torch.relu, "gelu": nn.functional.gelu, "tanh": torch.tanh}


def _positive_int(name: str, v) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise ValueError(f"{name} must be a positive int, got {v!r}")
    return v


def check_shape(n: int, ne: int, m: int, k: int) -> None:
    """Validate an MoE shape: positive ints and ``1 <= K <= M``.

    Raises:
        ValueError: naming the bad value.
    """
    for name, v in (("N", n), ("N_e", ne), ("M", m), ("K", k)):
        _positive_int(name, v)
    if k > m:
        raise ValueError(f"K (experts per token) must be <= M (experts), got K={k} > M={m}")


def _rms_norm(h: torch.Tensor) -> torch.Tensor:
    return h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)


class MoELayer(nn.Module):
    """Top-``K`` mixture of ``M`` two-layer MLP experts of width ``N_e`` on width-``N`` tokens.

    Args:
        n: model width ``N``.
        ne: expert width ``N_e``.
        m: number of experts ``M``.
        k: experts per token ``K`` (``1 <= K <= M``).
        act: ``"relu"``, ``"gelu"`` or ``"tanh"``.
        norm: apply a weightless RMS norm to the input first.
        renormalize: gates = softmax over the chosen ``K`` (Mixtral) instead of the full
            softmax's top-``K`` probabilities (Switch, the default; see :func:`topk_route`).

    Attributes:
        mult_router, mult1, mult2, mult_agg: the multipliers (floats, 1 by default).
        last: after each forward, detached statistics of the call: ``"logits"`` (router
            logits), ``"combine"`` (the layer output), ``"u"`` (expert pre-activations),
            ``"load"`` (tokens per expert); :meth:`aux_loss` gives that call's load-balancing
            loss.

    Example:
        >>> layer = MoELayer(8, 16, 4, 2)
        >>> layer(torch.randn(5, 8)).shape
        torch.Size([5, 8])
    """

    def __init__(
        self,
        n: int,
        ne: int,
        m: int,
        k: int,
        *,
        act: str = "relu",
        norm: bool = True,
        renormalize: bool = False,
    ):
        super().__init__()
        check_shape(n, ne, m, k)
        if act not in _ACTS:
            raise ValueError(f"act must be one of {sorted(_ACTS)}, got {act!r}")
        self.n, self.ne, self.m, self.k = n, ne, m, k
        self.act_name, self.norm, self.renormalize = act, norm, renormalize
        self.router = nn.Parameter(torch.empty(m, n))
        self.w1 = nn.Parameter(torch.empty(m, ne, n))
        self.w2 = nn.Parameter(torch.empty(m, n, ne))
        self.mult_router = self.mult1 = self.mult2 = self.mult_agg = 1.0
        self.last: dict[str, torch.Tensor] = {}
        self.reset_parameters()

    def reset_parameters(self, std_scale: dict[str, float] | None = None) -> None:
        """Gaussian init with std ``fan_in**-0.5`` times ``std_scale[name]`` (default 1)."""
        s = std_scale or {}
        with torch.no_grad():
            self.router.normal_(0.0, s.get("router", 1.0) / math.sqrt(self.n))
            self.w1.normal_(0.0, s.get("w1", 1.0) / math.sqrt(self.n))
            self.w2.normal_(0.0, s.get("w2", 1.0) / math.sqrt(self.ne))

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        if h.ndim != 2 or h.shape[1] != self.n:
            raise ValueError(f"input must have shape (T, {self.n}), got {tuple(h.shape)}")
        x = _rms_norm(h) if self.norm else h
        logits = self.mult_router * (x @ self.router.T)
        index, gate = topk_route(logits, self.k, renormalize=self.renormalize)
        d = dispatch(index, self.m)
        y, u = expert_mlp(x, d, self.w1, self.w2, self.mult1, self.mult2, _ACTS[self.act_name])
        out = self.mult_agg * combine(y, gate, d, h.shape[0])
        self.last = {
            "logits": logits.detach(),
            "combine": out.detach(),
            "u": u.detach(),
            "load": d.load,
        }
        self._route = (logits, index)
        return out

    def aux_loss(self) -> torch.Tensor:
        """The load-balancing loss of the last forward (with its graph, for training)."""
        if not self.last:
            raise RuntimeError("aux_loss needs a forward pass first")
        return load_balancing_loss(*self._route)

    def extra_repr(self) -> str:
        return f"N={self.n}, N_e={self.ne}, M={self.m}, K={self.k}, act={self.act_name}"


class MoEModel(nn.Module):
    """Embedding, ``L`` residual MoE blocks, linear readout.

    Args:
        d_in, d_out: input and output dimensions (fixed, not scaled).
        n, ne, m, k: the MoE shape of every block (see :class:`MoELayer`).
        depth: number of blocks ``L``.
        act, norm, renormalize: passed to every :class:`MoELayer`.
        aux_weight: weight of the load-balancing loss in :meth:`aux_loss` (0: off).

    Example:
        >>> model = MoEModel(3, 2, n=16, ne=8, m=4, k=2, depth=2)
        >>> model(torch.randn(7, 3)).shape
        torch.Size([7, 2])
        >>> model.shape
        {'N': 16, 'Ne': 8, 'M': 4, 'K': 2, 'L': 2}
    """

    def __init__(
        self,
        d_in: int,
        d_out: int,
        *,
        n: int,
        ne: int,
        m: int,
        k: int,
        depth: int = 1,
        act: str = "relu",
        norm: bool = True,
        renormalize: bool = False,
        aux_weight: float = 0.0,
    ):
        super().__init__()
        _positive_int("d_in", d_in)
        _positive_int("d_out", d_out)
        _positive_int("depth", depth)
        if not (aux_weight >= 0 and math.isfinite(aux_weight)):
            raise ValueError(f"aux_weight must be finite and >= 0, got {aux_weight!r}")
        self.d_in, self.d_out, self.aux_weight = d_in, d_out, aux_weight
        self.embed = nn.Parameter(torch.empty(n, d_in))
        self.blocks = nn.ModuleList(
            MoELayer(n, ne, m, k, act=act, norm=norm, renormalize=renormalize) for _ in range(depth)
        )
        self.readout = nn.Parameter(torch.empty(d_out, n))
        self.mult_embed = self.mult_readout = self.branch = 1.0
        self.reset_parameters()

    @property
    def shape(self) -> dict[str, int]:
        """``{"N", "Ne", "M", "K", "L"}`` of this model."""
        b = self.blocks[0]
        return {"N": b.n, "Ne": b.ne, "M": b.m, "K": b.k, "L": len(self.blocks)}

    def reset_parameters(self, std_scale: dict[str, float] | None = None) -> None:
        """Gaussian init with std ``fan_in**-0.5`` times ``std_scale[role]`` (default 1)."""
        s = std_scale or {}
        with torch.no_grad():
            self.embed.normal_(0.0, s.get("embed", 1.0) / math.sqrt(self.d_in))
            self.readout.normal_(0.0, s.get("readout", 1.0) / math.sqrt(self.embed.shape[0]))
        for b in self.blocks:
            b.reset_parameters(s)

    def features(self, x: torch.Tensor) -> list[torch.Tensor]:
        """The residual stream ``[h_0, ..., h_L]`` for inputs ``x`` of shape ``(T, d_in)``."""
        if x.ndim != 2 or x.shape[1] != self.d_in:
            raise ValueError(f"input must have shape (T, {self.d_in}), got {tuple(x.shape)}")
        h = self.mult_embed * (x @ self.embed.T)
        hs = [h]
        for b in self.blocks:
            h = h + self.branch * b(h)
            hs.append(h)
        return hs

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.features(x)[-1]
        return self.mult_readout * (h @ self.readout.T)

    def aux_loss(self) -> torch.Tensor:
        """``aux_weight`` times the mean load-balancing loss of the last forward's blocks."""
        aux = torch.stack([b.aux_loss() for b in self.blocks]).mean()
        return self.aux_weight * aux
