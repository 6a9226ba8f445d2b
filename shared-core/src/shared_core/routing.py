"""Which parameters of a model take a matrix (Muon-family) update and which take AdamW.

One convention for every optimizer of the suite that pairs a matrix update with an AdamW side
(``imuon.IMuon``, ``adaptive_lmo.AdaptiveLMO``), so a model moved from one to the other is split
the same way and its AdamW side starts from the same hyper-parameters.

The rule for an ``nn.Module`` (the Muon recipe of Jordan et al.; ``torch.optim.Muon``'s
documentation asks the same of its users):

- **AdamW**: every parameter with fewer than 2 dimensions (biases, norm gains); every
  ``nn.Embedding`` / ``nn.EmbeddingBag`` weight and anything tied to one; the output head.
- **matrix update**: every other parameter with 2 or more dimensions.

Why embeddings and the head go to AdamW: an embedding's gradient touches only the rows of the
tokens in the batch, so its polar factor spreads a step of equal size over every row; the head
maps features to logits, where a step of fixed spectral norm ignores how peaked the softmax is.
Both are the layers the Muon recipe keeps on AdamW.

The output head (:func:`locate_head`) is, in this order: the ``nn.Linear`` whose weight is tied
to an embedding; the one ``nn.Linear`` whose own name is a conventional head name
(:data:`HEAD_NAMES`); in a model built only of ``nn.Sequential`` containers, the last
``nn.Linear`` (registration order is execution order there). Otherwise it is a guess (the last
registered ``nn.Linear``) and a ``UserWarning`` says so; :func:`find_head` reads the head from
one forward pass instead.

The AdamW side's defaults are :data:`AUX_ADAMW`: learning rate 3e-4, betas (0.9, 0.95),
eps 1e-8, no weight decay (the Muon recipe's auxiliary Adam; beta2 = 0.95 rather than 0.999
because the AdamW side of these optimizers trains the layers with the noisiest, sparsest
gradients, where a shorter second-moment memory reacts faster to loss spikes).

Example:
    >>> import torch
    >>> from torch import nn
    >>> model = nn.Sequential(nn.Embedding(10, 8), nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 10))
    >>> [r.name for r in route_module(model) if r.matrix]
    ['1.weight']
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

__all__ = [
    "AUX_ADAMW",
    "HEAD_NAMES",
    "AdamWDefaults",
    "Routed",
    "embedding_ids",
    "find_head",
    "locate_head",
    "resolve_head",
    "route_module",
    "takes_matrix_update",
]

#: Own names (last component of the module path) read as "this Linear is the output head".
HEAD_NAMES = ("lm_head", "head", "classifier", "fc_out", "readout", "output_layer", "output_head")


@dataclass(frozen=True)
class AdamWDefaults:
    """Hyper-parameters of the AdamW side of a matrix optimizer."""

    lr: float = 3e-4
    betas: tuple[float, float] = (0.9, 0.95)
    eps: float = 1e-8
    weight_decay: float = 0.0


#: The suite's one default for the AdamW side (see the module docstring).
AUX_ADAMW = AdamWDefaults()


@dataclass
class Routed:
    """One trainable parameter of a model: its name, owning module and side."""

    name: str
    param: Tensor
    module: nn.Module
    matrix: bool  # True: matrix update; False: AdamW


def embedding_ids(model: nn.Module) -> set[int]:
    """``id`` of every embedding weight in ``model`` (a Linear tied to one shares the id)."""
    return {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding | nn.EmbeddingBag)}


def takes_matrix_update(
    param: Tensor, module: nn.Module | None, head: nn.Module | None, embedded: set[int]
) -> bool:
    """The default rule for one parameter (module docstring): True for the matrix update."""
    if param.ndim < 2 or id(param) in embedded:
        return False
    if isinstance(module, nn.Embedding | nn.EmbeddingBag):
        return False
    return not (head is not None and module is head)


def _only_sequential(model: nn.Module) -> bool:
    """Every container (module with children) is an ``nn.Sequential``: execution order is
    registration order."""
    return all(isinstance(m, nn.Sequential) for m in model.modules() if next(m.children(), None))


def locate_head(model: nn.Module, warn: bool = False, owner: str = "routing") -> nn.Module | None:
    """The output head by the module docstring's rule (None when the model has no Linear).

    Args:
        model: the model.
        warn: emit a ``UserWarning`` naming the module when the choice is a guess.
        owner: who is guessing (the optimizer's name, for the warning).

    Returns:
        The head module, or None.
    """
    linears = [(n, m) for n, m in model.named_modules() if isinstance(m, nn.Linear)]
    if not linears:
        return None
    embedded = embedding_ids(model)
    tied = [m for _, m in linears if id(m.weight) in embedded]
    if len(tied) == 1:
        return tied[0]
    named = [m for n, m in linears if n.rsplit(".", 1)[-1] in HEAD_NAMES]
    if len(named) == 1:
        return named[0]
    if _only_sequential(model):
        return linears[-1][1]
    name, mod = linears[-1]
    if warn:
        warnings.warn(
            f"{owner}: guessing the output head as {name!r}, the last nn.Linear registered "
            "(the module tree does not say which Linear produces the output). If that is "
            "wrong, the real head gets the matrix update and this layer AdamW. Pass "
            "head='<module name>' (shared_core.routing.find_head(model, example_input) "
            "reads it from a forward pass) or head=None to silence this.",
            stacklevel=4,
        )
    return mod


def resolve_head(
    model: nn.Module, head: str | bool | None, owner: str = "routing"
) -> nn.Module | None:
    """The head module for a ``head=`` argument: True (:func:`locate_head`, warning when it
    guesses), a module name, or None/False (no head on the AdamW side)."""
    if head is True:
        return locate_head(model, warn=True, owner=owner)
    if isinstance(head, str):
        mods = dict(model.named_modules())
        if head not in mods:
            raise ValueError(f"head={head!r} is not a module of the model")
        return mods[head]
    if head in (None, False):
        return None
    raise ValueError(f"head must be True, a module name or None, got {head!r}")


def route_module(
    model: nn.Module,
    route: Callable[[str, Tensor, nn.Module], bool | None] | None = None,
    head: str | bool | None = True,
    owner: str = "routing",
) -> list[Routed]:
    """Every trainable parameter of ``model`` on its side (each tensor once, first owner wins).

    Args:
        model: the model.
        route: optional ``(name, param, module) -> True (matrix) | False (AdamW) | None``;
            None falls back to the default rule.
        head: True (default: :func:`locate_head`), a module name, or None/False.
        owner: the optimizer's name, for warnings.

    Returns:
        One :class:`Routed` per trainable parameter, in module order.
    """
    head_mod = resolve_head(model, head, owner)
    embedded = embedding_ids(model)
    seen: set[int] = set()
    out: list[Routed] = []
    for mod_name, mod in model.named_modules():
        for p_name, p in mod.named_parameters(recurse=False):
            if id(p) in seen or not p.requires_grad:
                continue
            seen.add(id(p))
            name = f"{mod_name}.{p_name}" if mod_name else p_name
            side = route(name, p, mod) if route is not None else None
            if side is None:
                side = takes_matrix_update(p, mod, head_mod, embedded)
            if side and p.ndim < 2:
                raise ValueError(f"route sent {name} (shape {tuple(p.shape)}) to the matrix update")
            out.append(Routed(name, p, mod, bool(side)))
    return out


def _tensors(out: Any) -> list[Tensor]:
    if isinstance(out, Tensor):
        return [out]
    if isinstance(out, dict):
        out = list(out.values())
    if isinstance(out, list | tuple):
        return [t for o in out for t in _tensors(o)]
    return []


def find_head(model: nn.Module, *args: Any, **kwargs: Any) -> str | None:
    """Name of the output head, read from one forward pass ``model(*args, **kwargs)``.

    The head is the ``nn.Linear`` whose output tensor is (one of) the model's outputs; when
    the output is computed further (a reshape, a scale), the last ``nn.Linear`` that ran.
    Runs under ``torch.no_grad()``; returns None when no ``nn.Linear`` ran.

    Example:
        >>> import torch
        >>> from torch import nn
        >>> class Net(nn.Module):
        ...     def __init__(self):
        ...         super().__init__()
        ...         self.out = nn.Linear(8, 2)  # registered first, runs last
        ...         self.body = nn.Linear(4, 8)
        ...     def forward(self, x):
        ...         return self.out(torch.relu(self.body(x)))
        >>> find_head(Net(), torch.randn(3, 4))
        'out'
    """
    names = {m: n for n, m in model.named_modules()}
    ran: list[tuple[str, Tensor]] = []

    def hook(mod: nn.Module, inputs: tuple, output: Any) -> None:
        if isinstance(output, Tensor):
            ran.append((names[mod], output))

    handles = [m.register_forward_hook(hook) for m in names if isinstance(m, nn.Linear)]
    try:
        with torch.no_grad():
            out = model(*args, **kwargs)
    finally:
        for h in handles:
            h.remove()
    if not ran:
        return None
    outs = {id(t) for t in _tensors(out)}
    direct = [n for n, t in ran if id(t) in outs]
    return direct[-1] if direct else ran[-1][0]
