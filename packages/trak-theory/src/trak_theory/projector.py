r"""Projectors: maps from per-example gradients :math:`g \in \mathbb{R}^p` to features in
:math:`\mathbb{R}^k` with :math:`\mathbb{E}\,\|P^\top g\|^2 = \|g\|^2`.

:class:`SketchProjector` is the seeded sketch :math:`P = S/\sqrt{k}` of
:mod:`trak_theory.kernels.sketch` (entries of unit variance, so by Johnson--Lindenstrauss inner
products are preserved up to :math:`O(1/\sqrt{k})` relative error). On CUDA it runs the fused
Triton kernel; on the CPU it materialises S once when it fits in ``cache_bytes`` (a plain
matmul, the fastest CPU path) and otherwise streams over row blocks.
:class:`MatrixProjector` applies a given matrix (for example traker's projector matrix, to
compare with traker on identical features); :class:`IdentityProjector` keeps the full gradient.
"""

from __future__ import annotations

import abc
import functools
import math

import torch
from torch import Tensor

from .kernels.sketch import KINDS, sketch_block_reference, sketch_project

__all__ = ["IdentityProjector", "MatrixProjector", "Projector", "SketchProjector"]


@functools.lru_cache(maxsize=2)
def _cached_matrix(p: int, k: int, seed: int, kind: str) -> Tensor:
    # The sketch is a pure function of (p, k, seed, kind): projectors rebuilt for the same
    # model (featurising train, then targets) share one materialised copy.
    return sketch_block_reference(seed, 0, p, k, kind) / math.sqrt(k)


class Projector(abc.ABC):
    """Interface: ``project(g)`` maps (n, p) to (n, k); ``p`` and ``k`` are attributes."""

    p: int
    k: int

    @abc.abstractmethod
    def project(self, g: Tensor) -> Tensor:
        """The (n, k) projection of (n, p) gradients."""

    def describe(self) -> dict:
        """A JSON-able description, stored with saved features to refuse mismatched resumes."""
        return {"type": type(self).__name__, "p": self.p, "k": self.k}

    def _check(self, g: Tensor) -> None:
        if g.dim() != 2 or g.shape[1] != self.p:
            raise ValueError(f"expected gradients of shape (n, {self.p}), got {tuple(g.shape)}")


class SketchProjector(Projector):
    r"""The seeded sketch :math:`g \mapsto S^\top g/\sqrt{k}`.

    Args:
        p: input dimension (number of parameters).
        k: sketch dimension, ``1 <= k <= p``.
        seed: sketch seed (model ``j`` of an ensemble should use its own seed).
        kind: ``"rademacher"`` or ``"gaussian"``.
        cache_bytes: on the CPU, materialise S when ``4 p k`` bytes fit in this budget.

    Example:
        >>> proj = SketchProjector(p=300, k=32, seed=0)
        >>> proj.project(torch.randn(5, 300)).shape
        torch.Size([5, 32])
    """

    def __init__(
        self, p: int, k: int, seed: int = 0, kind: str = "rademacher", cache_bytes: int = 2**28
    ):
        if p < 1:
            raise ValueError(f"p must be >= 1, got {p}")
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        if k > p:
            raise ValueError(
                f"projection dimension k={k} exceeds the number of parameters p={p}; "
                "use IdentityProjector (no projection) instead"
            )
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
        self.p, self.k, self.seed, self.kind = p, k, int(seed), kind
        self.cache_bytes = cache_bytes

    def describe(self) -> dict:
        return {**super().describe(), "seed": self.seed, "kind": self.kind}

    def matrix(self) -> Tensor:
        """The (p, k) scaled matrix :math:`S/\\sqrt{k}` (materialised; small p only)."""
        return sketch_block_reference(self.seed, 0, self.p, self.k, self.kind) / math.sqrt(self.k)

    def project(self, g: Tensor) -> Tensor:
        self._check(g)
        if g.device.type == "cpu" and 4 * self.p * self.k <= self.cache_bytes:
            return g.to(torch.float32) @ _cached_matrix(self.p, self.k, self.seed, self.kind)
        return sketch_project(g, self.seed, self.k, self.kind, 0)


class MatrixProjector(Projector):
    """Multiply by a given (p, k) matrix times ``scale``.

    Example:
        >>> MatrixProjector(torch.eye(4)[:, :2]).project(torch.ones(3, 4)).shape
        torch.Size([3, 2])
    """

    def __init__(self, matrix: Tensor, scale: float = 1.0):
        if matrix.dim() != 2:
            raise ValueError(f"matrix must be 2-D, got shape {tuple(matrix.shape)}")
        self.p, self.k = matrix.shape
        self.matrix_ = matrix.to(torch.float32)
        self.scale = float(scale)

    def project(self, g: Tensor) -> Tensor:
        self._check(g)
        return (g.to(torch.float32) @ self.matrix_.to(g.device)) * self.scale


class IdentityProjector(Projector):
    """No projection: features are the full gradients (k = p)."""

    def __init__(self, p: int):
        if p < 1:
            raise ValueError(f"p must be >= 1, got {p}")
        self.p = self.k = p

    def project(self, g: Tensor) -> Tensor:
        self._check(g)
        return g.to(torch.float32)
