"""``get_norm``: a :class:`~shared_core.lmo.norms.Norm` from a name, a spec tuple or a Norm."""

from __future__ import annotations

from typing import Any

from .norms import (
    L1,
    L2,
    ColNorm,
    ColNormDual,
    Frobenius,
    LInf,
    Norm,
    Nuclear,
    RowNorm,
    RowNormDual,
    Schatten,
    Spectral,
)

__all__ = ["NORMS", "get_norm"]

#: name -> Norm class, for every norm :func:`get_norm` builds from a string.
NORMS: dict[str, type[Norm]] = {
    cls.name: cls
    for cls in (
        Spectral,
        Nuclear,
        Frobenius,
        LInf,
        L1,
        L2,
        ColNorm,
        ColNormDual,
        RowNorm,
        RowNormDual,
    )
}


def get_norm(spec: str | tuple[str, Any] | Norm, **kwargs: Any) -> Norm:
    """Build a norm from its name, from ``("schatten", p)``, or pass a :class:`Norm` through.

    Args:
        spec: one of ``"spectral"``, ``"nuclear"``, ``"frobenius"``, ``"linf"``, ``"l1"``,
            ``"l2"``, ``"colnorm"``, ``"colnorm_dual"``, ``"rownorm"``, ``"rownorm_dual"``
            (case-insensitive), a tuple ``("schatten", p)``, or a :class:`Norm` instance.
        **kwargs: the class's options, e.g. ``dim=-1`` for the vector norms, ``method="power"``
            for nuclear, ``polar_fn=...`` for spectral.

    Returns:
        The :class:`Norm`.

    Raises:
        ValueError: for an unknown name, a malformed spec or an invalid ``p``.

    Example:
        >>> get_norm("spectral").dual() == get_norm("nuclear", method="power")
        True
        >>> get_norm(("schatten", 4)).q
        1.3333333333333333
    """
    if isinstance(spec, Norm):
        if kwargs:
            raise ValueError(f"options {sorted(kwargs)} cannot be applied to a Norm instance")
        return spec
    if isinstance(spec, tuple):
        if len(spec) != 2 or not isinstance(spec[0], str) or spec[0].lower() != "schatten":
            raise ValueError(f"a norm spec tuple must be ('schatten', p), got {spec!r}")
        return Schatten(spec[1], **kwargs)
    if isinstance(spec, str):
        key = spec.strip().lower()
        if key == "schatten":
            raise ValueError("the Schatten norm needs its exponent: get_norm(('schatten', p))")
        if key in NORMS:
            return NORMS[key](**kwargs)
    raise ValueError(
        f"unknown norm {spec!r}; expected one of {sorted(NORMS)}, ('schatten', p) or a Norm"
    )
