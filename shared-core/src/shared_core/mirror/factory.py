"""``get_mirror``: a :class:`~shared_core.mirror.MirrorMap` by name."""

from __future__ import annotations

from typing import Any

from .base import MirrorMap
from .entropy import NegEntropy
from .euclidean import Euclidean
from .pnorm import PNorm

__all__ = ["MIRRORS", "get_mirror"]

#: name -> MirrorMap class.
MIRRORS: dict[str, type[MirrorMap]] = {
    "euclidean": Euclidean,
    "entropy": NegEntropy,
    "pnorm": PNorm,
}

_ALIASES = {"negentropy": "entropy", "neg_entropy": "entropy", "simplex": "entropy"}


def get_mirror(name: str | MirrorMap, **kwargs: Any) -> MirrorMap:
    """Build a mirror map by name (or pass a :class:`MirrorMap` through).

    Args:
        name: ``"euclidean"``, ``"entropy"`` (aliases ``"negentropy"``, ``"simplex"``) or
            ``"pnorm"``, case-insensitive.
        **kwargs: the class's arguments: ``domain=`` for Euclidean, ``p=`` and ``radius=`` for
            PNorm, ``tol=`` and ``validate=`` for NegEntropy.

    Returns:
        The :class:`MirrorMap`.

    Raises:
        ValueError: for an unknown name or invalid arguments.

    Example:
        >>> get_mirror("pnorm", p=1.5)
        PNorm(p=1.5, radius=None)
    """
    if isinstance(name, MirrorMap):
        if kwargs:
            raise ValueError(f"options {sorted(kwargs)} cannot be applied to a MirrorMap instance")
        return name
    key = name.strip().lower() if isinstance(name, str) else None
    key = _ALIASES.get(key, key) if key is not None else None
    if key not in MIRRORS:
        raise ValueError(f"unknown mirror map {name!r}; expected one of {sorted(MIRRORS)}")
    try:
        return MIRRORS[key](**kwargs)
    except TypeError as err:
        raise ValueError(f"bad arguments for mirror map {name!r}: {err}") from None
