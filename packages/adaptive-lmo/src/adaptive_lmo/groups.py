"""Param groups of :class:`adaptive_lmo.AdaptiveLMO` from what the user passed.

An ``nn.Module`` is scanned by :func:`adaptive_lmo.routing.scan_module`; parameters with a
pinned exponent (``fixed_exponents``) get their own groups (:func:`split_fixed`). Anything
else (tensors, ``model.named_parameters()`` pairs, group dicts) goes through
:func:`groups_from_params`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from torch import Tensor, nn

from .fractional import check_exponent

__all__ = ["groups_from_params", "is_named", "split_fixed"]


def is_named(item: object) -> bool:
    """A ``(name, tensor)`` pair, as ``named_parameters()`` yields."""
    return (
        isinstance(item, tuple)
        and len(item) == 2
        and isinstance(item[0], str)
        and isinstance(item[1], Tensor)
    )


def split_fixed(
    infos: list[Any], fixed: Mapping[str, float] | Callable[..., float | None] | None
) -> tuple[list[Tensor], dict[float, list[Tensor]]]:
    """Matrix parameters on ``exponent``'s setting, and those ``fixed_exponents`` pins."""
    if fixed is None:
        return [i.param for i in infos], {}
    if isinstance(fixed, Mapping):
        unknown = set(fixed) - {i.name for i in infos}
        if unknown:
            raise ValueError(
                f"fixed_exponents names {sorted(unknown)}, which are not matrix parameters "
                "on the LMO update (see opt.routing())"
            )
        pick = lambda name, p, m: fixed.get(name)  # noqa: E731
    elif callable(fixed):
        pick = fixed
    else:
        raise ValueError(
            f"fixed_exponents must be a mapping, a callable or None, got {type(fixed).__name__}"
        )
    free: list[Tensor] = []
    pinned: dict[float, list[Tensor]] = {}
    for i in infos:
        a = pick(i.name, i.param, i.module)
        if a is None:
            free.append(i.param)
        else:
            a = check_exponent(a, f"fixed_exponents[{i.name!r}]")
            pinned.setdefault(a, []).append(i.param)
    return free, pinned


def groups_from_params(
    params: Any,
    adamw: dict[str, Any],
    names: dict[int, str],
    views: dict[int, str],
    modules: dict[int, nn.Module | None],
) -> list[dict[str, Any]]:
    """Param groups from tensors, ``(name, tensor)`` pairs or group dicts (fills ``names``,
    ``views`` and ``modules`` by parameter id; bare tensors: matrices to "lmo", the rest to
    "adamw" with the ``adamw`` options)."""
    items = list(params)
    if not items:
        raise ValueError("AdaptiveLMO got an empty parameter list")
    groups: list[dict[str, Any]] = []
    if all(is_named(p) for p in items):  # model.named_parameters()
        for name, p in items:
            names.setdefault(id(p), name)
        items = [p for _, p in items]
    if all(isinstance(p, Tensor) for p in items):
        mats = [p for p in items if p.ndim >= 2]
        vecs = [p for p in items if p.ndim < 2]
        if mats:
            groups.append({"params": mats, "algorithm": "lmo"})
        if vecs:
            groups.append({"params": vecs, **adamw})
    else:
        for g in items:
            if not isinstance(g, dict):
                raise ValueError(
                    "params must be tensors, (name, tensor) pairs or dicts, not a mix; got "
                    f"{type(g).__name__}"
                )
            g = dict(g)
            ps = [g["params"]] if isinstance(g["params"], Tensor) else list(g["params"])
            if ps and all(is_named(q) for q in ps):
                for name, q in ps:
                    names.setdefault(id(q), name)
                ps = [q for _, q in ps]
            g["params"] = ps
            algo = g.get("algorithm")
            if algo is None:
                if all(p.ndim >= 2 for p in ps):
                    algo = "lmo"
                elif all(p.ndim < 2 for p in ps):
                    algo = "adamw"
                else:
                    raise ValueError(
                        "a param group mixes matrices and vectors: set its 'algorithm' to "
                        "'lmo' or 'adamw'"
                    )
            if algo == "adamw":
                g = {**adamw, **g}
            elif algo != "lmo":
                raise ValueError(f"algorithm must be 'lmo' or 'adamw', got {algo!r}")
            g["algorithm"] = algo
            groups.append(g)
    for gi, g in enumerate(groups):
        for pi, p in enumerate(g["params"]):
            names.setdefault(id(p), f"group{gi}.param{pi}")
            views.setdefault(id(p), "matrix" if p.ndim == 2 else "batched")
            modules.setdefault(id(p), None)
    return groups
