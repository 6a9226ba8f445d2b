r"""``parameterize``: apply a scheme of :mod:`mssp.tables` to a model and return param groups.

Like ``mup.set_base_shapes`` + ``MuAdam``/``MuSGD`` for width, but for the five MoE
dimensions: the ratios :math:`n, e, m, k, l` to the base shapes set every tensor's init std,
forward multiplier and learning rate; the regime names which dimensions may differ.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import torch
from torch import nn

from .layers import MoELayer, MoEModel, check_shape
from .tables import DIMS, REGIMES, ROLES, Scheme, get_scheme, monomial

__all__ = ["assign_roles", "parameterize", "size_ratios"]


def size_ratios(shape: Mapping[str, int], base: Mapping[str, int], regime: str) -> dict[str, float]:
    """Ratios ``shape[d] / base[d]`` after checking that only the regime's dimensions differ.

    Args:
        shape: ``{"N", "Ne", "M", "K", "L"}`` of the model.
        base: the same keys for the base model (where every scheme equals its base lr).
        regime: ``"I"``, ``"II"`` or ``"III"``.

    Raises:
        ValueError: a missing key, a bad size, ``K > M``, or a dimension that differs from the
            base but is not scaled in ``regime`` (the message lists them).

    Example:
        >>> size_ratios({"N": 64, "Ne": 64, "M": 4, "K": 1, "L": 2},
        ...             {"N": 32, "Ne": 32, "M": 4, "K": 1, "L": 2}, "I")
        {'N': 2.0, 'Ne': 2.0, 'M': 1.0, 'K': 1.0, 'L': 1.0}
    """
    if regime not in REGIMES:
        raise ValueError(f"unknown regime {regime!r}; choose one of {tuple(REGIMES)}")
    for name, d in (("shape", shape), ("base_shapes", base)):
        missing = [k for k in DIMS if k not in d]
        if missing:
            raise ValueError(f"{name} lacks {missing}; it needs all of {DIMS}")
        check_shape(d["N"], d["Ne"], d["M"], d["K"])
        if isinstance(d["L"], bool) or not isinstance(d["L"], int) or d["L"] < 1:
            raise ValueError(f"{name}['L'] must be a positive int, got {d['L']!r}")
    off = [
        f"{k}={shape[k]} (base {base[k]})"
        for k in ("N", "Ne", "M", "K")
        if shape[k] != base[k] and k not in REGIMES[regime]
    ]
    if off:
        raise ValueError(
            f"widths not matching base shapes: {', '.join(off)} differ from the base but "
            f"regime {regime!r} only scales {REGIMES[regime]} (and L)"
        )
    return {k: shape[k] / base[k] for k in DIMS}


def assign_roles(model: nn.Module, roles: Mapping[str, str] | None = None) -> dict[str, str]:
    """The role (``embed``/``router``/``w1``/``w2``/``readout``) of every parameter of ``model``.

    :class:`MoELayer` parameters and :class:`MoEModel`'s ``embed``/``readout`` are known;
    ``roles`` names the role of any other parameter (by its ``named_parameters`` name).

    Raises:
        ValueError: a parameter with no role (all are listed), or an unknown role name.
    """
    roles = dict(roles or {})
    bad = {k: v for k, v in roles.items() if v not in ROLES}
    if bad:
        raise ValueError(f"unknown role(s) {bad}; roles are {ROLES}")
    out: dict[str, str] = {}
    for mod_name, mod in model.named_modules():
        prefix = f"{mod_name}." if mod_name else ""
        if isinstance(mod, MoELayer):
            for p in ("router", "w1", "w2"):
                out[prefix + p] = p
        elif isinstance(mod, MoEModel):
            out[prefix + "embed"] = "embed"
            out[prefix + "readout"] = "readout"
    out.update(roles)
    names = [n for n, _ in model.named_parameters()]
    missing = [n for n in names if n not in out]
    if missing:
        raise ValueError(
            f"parameters not covered by the scheme: {missing}; pass roles={{name: role}} with "
            f"a role in {ROLES}, or remove them"
        )
    unknown = sorted(set(roles) - set(names))
    if unknown:
        raise ValueError(f"roles names parameters the model does not have: {unknown}")
    return {n: out[n] for n in names}


def _find_shape(model: nn.Module) -> dict[str, int]:
    if isinstance(model, MoEModel):
        return model.shape
    layers = [m for m in model.modules() if isinstance(m, MoELayer)]
    if not layers:
        raise ValueError("model has no MoELayer; parameterize needs at least one")
    shapes = {(m.n, m.ne, m.m, m.k) for m in layers}
    if len(shapes) != 1:
        raise ValueError(f"all MoELayers must share one shape, got {sorted(shapes)}")
    n, ne, m, k = shapes.pop()
    return {"N": n, "Ne": ne, "M": m, "K": k, "L": len(layers)}


def parameterize(
    model: nn.Module,
    scheme: str = "mssp",
    optimizer: str = "adam",
    *,
    regime: str,
    base_shapes: Mapping[str, int] | MoEModel,
    lr: float,
    init_scale: float = 1.0,
    roles: Mapping[str, str] | None = None,
    reinit: bool = True,
) -> list[dict]:
    r"""Set the multipliers (and init) of ``model`` for a scheme and return its param groups.

    For every parameter of role ``r`` with rule :math:`(\text{init}, \text{mult}, \text{lr})`
    of :func:`mssp.tables.get_scheme`: init std ``init_scale * fan_in**-0.5 * init(ratios)``,
    forward multiplier ``mult(ratios)``, learning rate ``lr * lr(ratios)``. Every
    :class:`MoELayer` also gets :math:`\alpha_{agg}` and a :class:`MoEModel` the branch
    multiplier :math:`\beta`. At the base shapes every scheme is the same model.

    Args:
        model: an :class:`MoEModel`, or any module holding equal-shaped :class:`MoELayer` s
            (its other parameters need ``roles``).
        scheme: ``"sp"``, ``"mup"`` or ``"mssp"``.
        optimizer: ``"sgd"`` or ``"adam"``.
        regime: ``"I"`` (N, N_e), ``"II"`` (N, M, K) or ``"III"`` (all four).
        base_shapes: ``{"N", "Ne", "M", "K", "L"}`` of the base model, or the base model.
        lr: the base learning rate (tuned at the base shapes), positive.
        init_scale: a global factor on every init std.
        roles: roles of parameters outside :class:`MoELayer`/:class:`MoEModel`.
        reinit: redraw the weights (``False`` keeps them and only sets multipliers).

    Returns:
        Param groups for ``torch.optim.SGD``/``Adam``, one per parameter, each with its
        ``"lr"`` and ``"role"``/``"name"`` keys.

    Example:
        >>> base = MoEModel(4, 1, n=8, ne=8, m=4, k=1)
        >>> big = MoEModel(4, 1, n=32, ne=32, m=4, k=1)
        >>> groups = parameterize(big, "mup", "adam", regime="I", base_shapes=base, lr=1e-2)
        >>> {g["name"]: g["lr"] for g in groups}["blocks.0.w1"]
        0.0025
    """
    if not (isinstance(lr, int | float) and lr > 0 and math.isfinite(lr)):
        raise ValueError(f"lr must be a positive finite number, got {lr!r}")
    if not (init_scale > 0 and math.isfinite(init_scale)):
        raise ValueError(f"init_scale must be a positive finite number, got {init_scale!r}")
    sch: Scheme = get_scheme(scheme, optimizer, regime)
    base = base_shapes.shape if isinstance(base_shapes, MoEModel) else dict(base_shapes)
    shape = _find_shape(model)
    ratios = size_ratios(shape, base, regime)
    role_of = assign_roles(model, roles)

    agg = monomial(sch.aggregate, ratios)
    for mod in model.modules():
        if isinstance(mod, MoELayer):
            mod.mult_router = monomial(sch.rules["router"].mult, ratios)
            mod.mult1 = monomial(sch.rules["w1"].mult, ratios)
            mod.mult2 = monomial(sch.rules["w2"].mult, ratios)
            mod.mult_agg = agg
        if isinstance(mod, MoEModel):
            mod.mult_embed = monomial(sch.rules["embed"].mult, ratios)
            mod.mult_readout = monomial(sch.rules["readout"].mult, ratios)
            mod.branch = monomial(sch.branch, ratios)

    groups = []
    for name, p in model.named_parameters():
        rule = sch.rules[role_of[name]]
        if reinit:
            fan_in = p.shape[-1]
            std = init_scale * monomial(rule.init, ratios) / math.sqrt(fan_in)
            with torch.no_grad():
                p.normal_(0.0, std)
        groups.append(
            {
                "params": [p],
                "lr": lr * monomial(rule.lr, ratios),
                "name": name,
                "role": role_of[name],
            }
        )
    return groups
