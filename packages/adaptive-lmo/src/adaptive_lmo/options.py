"""Option names, their checks and torch.optim.Muon's learning-rate shape factors.

Every check raises ``ValueError`` naming the option and the bad value. The optimizer runs
:func:`validate_lmo` / :func:`validate_adamw` at construction, in ``add_param_group`` and again
at the start of a ``step`` (before anything is mutated) whenever a group's options differ from
those last validated (:func:`option_fingerprint`: values and types), so a bad value written
into ``param_groups`` after construction fails loudly at the next step instead of degrading
layer by layer, and unchanged options cost no re-check.
"""

from __future__ import annotations

import math
from typing import Any

from .criterion import RULES
from .fractional import METHODS, SCALES, check_exponent
from .routing import VIEWS
from .spectral import SPECTRAL

__all__ = [
    "ADJUST_LR",
    "CURVATURES",
    "NONFINITE",
    "PRECONDITIONERS",
    "SHRINKAGES",
    "STATS",
    "adjust_lr_factor",
    "option_fingerprint",
    "validate_adamw",
    "validate_lmo",
]

PRECONDITIONERS = (None, "adam")
STATS = ("same_batch", "next_batch")
CURVATURES = ("input", "kfac")
SHRINKAGES = ("ledoit_wolf", "none")
#: None means "original", as in torch.optim.Muon; "unit" is a factor of 1 (the exact corners).
ADJUST_LR = (None, "original", "match_rms_adamw", "spectral_unclamped", "unit")
#: What a step does with a NaN/inf gradient: raise before mutating anything, skip the whole
#: step (GradScaler-style), or not look (no host sync; NaN then propagates as in torch).
NONFINITE = ("raise", "skip", "off")


def adjust_lr_factor(fn: str | None, shape: tuple[int, ...]) -> float:
    """The factor torch.optim.Muon's ``_adjust_lr`` applies for ``adjust_lr_fn`` (``shape``:
    the matrix view ``(..., A, B)``; torch reads ``param.shape[:2]`` of 2-D weights)."""
    A, B = shape[-2], shape[-1]
    if fn is None or fn == "original":
        return math.sqrt(max(1.0, A / B))
    if fn == "match_rms_adamw":
        return 0.2 * math.sqrt(max(A, B))
    if fn == "spectral_unclamped":
        return math.sqrt(A / B)
    return 1.0


def _frozen(v: object) -> object:
    # type and value: nesterov=0 equals False, yet must be re-checked; lists are copied so
    # an in-place edit of the group's own list shows as a change
    if isinstance(v, list | tuple):
        return (type(v), tuple(_frozen(x) for x in v))
    return (type(v), v)


def option_fingerprint(g: dict[str, Any]) -> tuple:
    """Every option of a param group (not its params), with types, comparable with ``==``.

    Only a group that passed validation is fingerprinted, so a rejected value (a NaN
    included) is re-checked, and rejected, at every step as before. Options are plain
    Python values (numbers, strings, bools, None, tuples/lists of numbers).
    """
    return tuple((k, _frozen(v)) for k, v in g.items() if k != "params")


def check_number(name: str, v: object, upper: float | None = None, strict: bool = False) -> None:
    """``v`` a finite real in ``[0, upper)`` (``(0, upper)`` when ``strict``)."""
    ok = isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
    ok = ok and (v > 0 if strict else v >= 0) and (upper is None or v < upper)
    if not ok:
        rng = f"{'(' if strict else '['}0, {upper if upper is not None else 'inf'})"
        raise ValueError(f"{name} must be a finite number in {rng}, got {v!r}")


def _one_of(name: str, v: object, valid: tuple) -> None:
    if v not in valid:
        raise ValueError(f"{name} must be one of {valid}, got {v!r}")


def validate_lmo(g: dict[str, Any]) -> None:
    """Check a matrix-update group's options (normalises numeric exponents to float)."""
    check_number("lr", g["lr"])
    check_number("momentum", g["momentum"], 1.0)
    check_number("beta2", g["beta2"], 1.0)
    check_number("eps", g["eps"])
    check_number("weight_decay", g["weight_decay"])
    check_number("direction_floor", g.get("direction_floor", 0.0))
    if g["precondition"] not in PRECONDITIONERS:
        raise ValueError(f"precondition must be None or 'adam', got {g['precondition']!r}")
    if g["exponent"] != "auto":
        g["exponent"] = check_exponent(g["exponent"], "exponent (or 'auto')")
    g["fallback_exponent"] = check_exponent(g["fallback_exponent"], "fallback_exponent")
    ue = g["update_every"]
    if isinstance(ue, bool) or not isinstance(ue, int) or ue < 1:
        raise ValueError(f"update_every must be a positive int, got {ue!r}")
    _one_of("criterion", g["criterion"], RULES)
    _one_of("method", g["method"], METHODS)
    _one_of("scale", g["scale"], SCALES)
    _one_of("adjust_lr_fn", g["adjust_lr_fn"], ADJUST_LR)
    _one_of("curvature", g.get("curvature", "kfac"), CURVATURES)
    sc = g.get("switch_confidence", 0.0)
    if not (isinstance(sc, int | float) and not isinstance(sc, bool) and (sc == 0 or 0.5 < sc < 1)):
        raise ValueError(f"switch_confidence must be 0 (off) or in (0.5, 1), got {sc!r}")
    check_number("min_gain", g.get("min_gain", 0.0))
    if not isinstance(g.get("exact_polar", False), bool):
        raise ValueError(f"exact_polar must be a bool, got {g['exact_polar']!r}")
    bo = g.get("backoff", 0)
    if isinstance(bo, bool) or not isinstance(bo, int) or not 0 <= bo <= 16:
        raise ValueError(f"backoff must be an int in [0, 16], got {bo!r}")
    _one_of("shrinkage", g.get("shrinkage", "none"), SHRINKAGES)
    _one_of("spectral", g.get("spectral", "svd"), SPECTRAL)
    _one_of("stats", g.get("stats", "next_batch"), STATS)
    _one_of("matrix_view", g.get("matrix_view", "auto"), VIEWS)
    if not isinstance(g["nesterov"], bool):
        raise ValueError(f"nesterov must be a bool, got {g['nesterov']!r}")


def validate_adamw(g: dict[str, Any]) -> None:
    """Check an AdamW group's options."""
    check_number("adamw lr", g["lr"])
    b = g["betas"]
    if not (isinstance(b, tuple | list) and len(b) == 2):
        raise ValueError(f"adamw_betas must be a pair, got {b!r}")
    check_number("adamw beta1", b[0], 1.0)
    check_number("adamw beta2", b[1], 1.0)
    check_number("adamw eps", g["eps"])
    check_number("adamw weight_decay", g["weight_decay"])
