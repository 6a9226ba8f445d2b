r"""The empirical NTK by per-layer contraction: ``torch.func`` for the backward, J never formed.

A dense layer :math:`z = h W^\top (+ b)` applied once per sample has per-sample Jacobian
block :math:`\partial f_o(x_i)/\partial W = \delta_{o,i} h_i^\top` with
:math:`\delta_{o,i} = \partial f_o(x_i)/\partial z_i`, so its share of the NTK is

.. math::

    K_W[(i,o),(j,p)] = (\delta_{o,i}^\top\delta_{p,j})\,(h_i^\top h_j), \qquad
    K_b[(i,o),(j,p)] = \delta_{o,i}^\top\delta_{p,j},

and :math:`K = \sum_{\text{layers}} (K_W + K_b)`. Every :math:`\delta` of the batch comes from
one reverse pass (``torch.func.vjp`` with respect to zero *probes* added to the
pre-activations; per output, ``vmap`` over the output cotangents), because samples do not mix.
Cost: one forward and :math:`k` backward passes plus :math:`O((nk)^2\sum_l(\mathrm{in}_l +
\mathrm{out}_l))`, against :math:`O((nk)^2 P)` for :math:`JJ^\top`; memory
:math:`O(n\sum_l(\mathrm{in}_l + \mathrm{out}_l))` instead of :math:`O(nkP)`.

Supported models: :class:`~langevin_ntk.models.MLP` (through its pre-activation tap) and any
module whose trainable parameters all belong to ``nn.Linear`` modules, each called once per
forward on ``(n, features)`` inputs (``nn.Sequential`` MLPs and the like). Anything else
raises ``ValueError``: use :func:`langevin_ntk.ntk.empirical_ntk` there.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn
from torch.func import vjp, vmap

from .models import MLP

__all__ = ["layerwise_ntk"]


class _Layer:
    """One tapped dense layer: its input ``h``, whether ``W`` and ``b`` are trained."""

    def __init__(self, weight_trained: bool, bias_trained: bool):
        self.weight_trained, self.bias_trained = weight_trained, bias_trained
        self.h: Tensor | None = None
        self.calls = 0


def _taps(model: nn.Module) -> tuple[list[_Layer], Callable[[Callable], Callable[[], None]]]:
    """The model's dense layers and an ``install(tap) -> remove`` for a tap ``(k, h, z) -> z``."""
    if isinstance(model, MLP):
        layers = [_Layer(w.requires_grad, False) for w in model.weights]

        def install_mlp(tap: Callable) -> Callable[[], None]:
            model._tap = tap

            def remove() -> None:
                model._tap = None

            return remove

        return layers, install_mlp
    linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
    owned = {id(p) for m in linears for p in m.parameters()}
    foreign = [
        name for name, p in model.named_parameters() if p.requires_grad and id(p) not in owned
    ]
    if foreign:
        raise ValueError(
            f"layerwise_ntk needs every trainable parameter inside an nn.Linear; {foreign[:3]} "
            "are not (use empirical_ntk)"
        )
    layers = [
        _Layer(m.weight.requires_grad, m.bias is not None and m.bias.requires_grad) for m in linears
    ]

    def install_linear(tap: Callable) -> Callable[[], None]:
        handles = [
            m.register_forward_hook(lambda mod, args, out, k=k: tap(k, args[0], out))
            for k, m in enumerate(linears)
        ]

        def remove() -> None:
            for hd in handles:
                hd.remove()

        return remove

    return layers, install_linear


def layerwise_ntk(model: nn.Module, x: Tensor) -> Tensor:
    r"""Exact empirical NTK :math:`JJ^\top` of a stack of dense layers, without forming J.

    Rows and columns are ordered ``i * k + o`` (sample ``i``, output ``o``), as in
    :func:`langevin_ntk.ntk.empirical_ntk`. Frozen weights or biases contribute nothing.

    Args:
        model: an :class:`~langevin_ntk.models.MLP`, or a module whose trainable parameters all
            sit in ``nn.Linear`` modules, each called once per forward; it must not mix samples.
        x: ``(n, ...)`` batch.

    Returns:
        ``K`` of shape ``(nk, nk)``.

    Example:
        >>> from langevin_ntk.ntk import empirical_ntk
        >>> net = torch.nn.Sequential(torch.nn.Linear(3, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
        >>> x = torch.randn(5, 3)
        >>> torch.allclose(layerwise_ntk(net, x), empirical_ntk(net, x), atol=1e-5)
        True
    """
    if not isinstance(x, Tensor) or x.ndim < 1 or x.shape[0] == 0:
        raise ValueError("x must be a tensor with a non-empty leading batch dimension")
    layers, install = _taps(model)
    shapes: list[torch.Size] = [torch.Size()] * len(layers)

    def record(k: int, h: Tensor, z: Tensor) -> Tensor:
        if h.ndim != 2:
            raise ValueError(
                f"layerwise_ntk needs (n, features) inputs to every dense layer; layer {k} got "
                f"{tuple(h.shape)} (use empirical_ntk)"
            )
        layers[k].calls += 1
        layers[k].h = h.detach()
        shapes[k] = z.shape
        return z

    remove = install(record)
    try:
        with torch.no_grad():
            out = model(x)
    finally:
        remove()
    shared = [k for k, lay in enumerate(layers) if lay.calls != 1]
    if shared:
        raise ValueError(
            f"dense layers {shared} ran {[layers[k].calls for k in shared]} times in one "
            "forward: layerwise_ntk needs each exactly once (use empirical_ntk)"
        )
    n = x.shape[0]
    k_out = out.reshape(n, -1).shape[1]

    def f(probes: list[Tensor]) -> Tensor:
        remove_probe = install(lambda k, h, z: z + probes[k])
        try:
            return model(x).reshape(n, k_out)
        finally:
            remove_probe()

    zeros = [torch.zeros(s, dtype=out.dtype, device=out.device) for s in shapes]
    # one cotangent per output o: e_o in every row; the pullback gives delta_{o,i} for all i
    basis = torch.eye(k_out, dtype=out.dtype, device=out.device)[:, None, :].expand(-1, n, -1)
    with torch.no_grad():  # torch.func still differentiates in the probes; no graph to params
        _, pullback = vjp(f, zeros)
        (deltas,) = vmap(pullback)(basis)  # list over layers of (k, n, width)
    gram = torch.zeros(n * k_out, n * k_out, dtype=out.dtype, device=out.device)
    for lay, d in zip(layers, deltas, strict=True):
        if not (lay.weight_trained or lay.bias_trained):
            continue
        d = d.transpose(0, 1).reshape(n * k_out, -1)  # rows i * k + o
        dd = d @ d.mT
        if lay.weight_trained:
            hh = lay.h @ lay.h.mT
            if k_out > 1:
                hh = hh.repeat_interleave(k_out, 0).repeat_interleave(k_out, 1)
            gram = gram + dd * hh
        if lay.bias_trained:
            gram = gram + dd
    return gram
