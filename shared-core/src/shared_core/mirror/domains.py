r"""Convex sets for :class:`~shared_core.mirror.Euclidean`, with their Euclidean projections.

Both act on the last axis (one vector per leading index):

- :class:`Ball`: :math:`\{x : \|x - c\|_2 \le r\}`, projection
  :math:`c + (y - c)\min(1, r/\|y - c\|_2)`: the nearest point lies on the segment to the centre.
- :class:`Box`: :math:`\{x : lo \le x \le hi\}`, projection ``clamp(y, lo, hi)``: the distance
  separates over coordinates.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod

import torch
from torch import Tensor

from ._common import check_vectors

__all__ = ["Ball", "Box", "Domain"]


class Domain(ABC):
    """A closed convex set of vectors (last axis), with its Euclidean projection."""

    @abstractmethod
    def project(self, y: Tensor) -> Tensor:
        r"""The nearest point :math:`\operatorname{argmin}_{z} \|z - y\|_2` of the set."""

    @abstractmethod
    def contains(self, x: Tensor, tol: float | None = None) -> Tensor:
        """A boolean per vector: is ``x`` in the set, up to ``tol`` (default: a few ulps)?"""


def _default_tol(x: Tensor, tol: float | None) -> float:
    return 64 * torch.finfo(x.dtype).eps if tol is None else float(tol)


def _as_tensor(value: float | Tensor, like: Tensor) -> Tensor:
    return torch.as_tensor(value, dtype=like.dtype, device=like.device)


class Ball(Domain):
    r"""The l2 ball :math:`\{x : \|x - c\|_2 \le r\}` over the last axis.

    Args:
        radius: :math:`r \ge 0`, finite.
        center: :math:`c`, a number or a tensor broadcastable to the points.

    Example:
        >>> Ball(1.0).project(torch.tensor([3.0, 4.0]))
        tensor([0.6000, 0.8000])
    """

    def __init__(self, radius: float, center: float | Tensor = 0.0) -> None:
        r = float(radius)
        if not math.isfinite(r) or r < 0:
            raise ValueError(f"Ball radius must be a finite number >= 0, got {radius!r}")
        c = torch.as_tensor(center)
        if not torch.isfinite(c).all():
            raise ValueError(f"Ball center must be finite, got {center!r}")
        self.radius = r
        self.center = center

    def __repr__(self) -> str:
        return f"Ball(radius={self.radius}, center={self.center!r})"

    def project(self, y: Tensor) -> Tensor:
        y = check_vectors(y, "Ball.project")
        c = _as_tensor(self.center, y)
        diff = y - c
        dist = torch.linalg.vector_norm(diff, dim=-1, keepdim=True)
        # `dist <= r` is False for NaN, so a NaN point stays NaN instead of being kept as is.
        scale = torch.where(dist <= self.radius, 1.0, self.radius / dist)
        return c + diff * scale

    def contains(self, x: Tensor, tol: float | None = None) -> Tensor:
        x = check_vectors(x, "Ball.contains")
        t = _default_tol(x, tol)
        dist = torch.linalg.vector_norm(x - _as_tensor(self.center, x), dim=-1)
        return dist <= self.radius * (1 + t) + t


class Box(Domain):
    r"""The box :math:`\{x : lo \le x \le hi\}` (bounds are numbers or broadcastable tensors).

    Example:
        >>> Box(-1.0, 1.0).project(torch.tensor([3.0, -0.5, -2.0]))
        tensor([ 1.0000, -0.5000, -1.0000])
    """

    def __init__(self, lo: float | Tensor, hi: float | Tensor) -> None:
        lo_t = torch.as_tensor(lo, dtype=torch.float64)
        hi_t = torch.as_tensor(hi, dtype=torch.float64)
        if torch.isnan(lo_t).any() or torch.isnan(hi_t).any():
            raise ValueError(f"Box bounds must not be NaN, got lo={lo!r}, hi={hi!r}")
        if not (lo_t <= hi_t).all():
            raise ValueError(f"Box needs lo <= hi everywhere, got lo={lo!r}, hi={hi!r}")
        self.lo = lo
        self.hi = hi

    def __repr__(self) -> str:
        return f"Box(lo={self.lo!r}, hi={self.hi!r})"

    def project(self, y: Tensor) -> Tensor:
        y = check_vectors(y, "Box.project")
        return torch.clamp(y, _as_tensor(self.lo, y), _as_tensor(self.hi, y))

    def contains(self, x: Tensor, tol: float | None = None) -> Tensor:
        x = check_vectors(x, "Box.contains")
        t = _default_tol(x, tol)
        lo, hi = _as_tensor(self.lo, x), _as_tensor(self.hi, x)
        inside = (x >= lo - t * (1 + lo.abs())) & (x <= hi + t * (1 + hi.abs()))
        return inside.all(dim=-1)
