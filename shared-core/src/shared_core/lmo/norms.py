r"""The object API: one :class:`Norm` per norm, bundling the norm, its dual and its LMO.

Every norm answers

- ``norm(G)`` and ``dual_norm(G)`` (reduced over the axes it measures),
- ``lmo(G, radius)``: :math:`\operatorname{argmin}_{\|D\| \le r} \langle G, D\rangle`,
- ``dual()``: the dual norm as a :class:`Norm` (``n.dual().dual() == n``),
- ``inner(G, D)``: :math:`\langle G, D\rangle` over the same axes,

with :math:`\langle G, \operatorname{lmo}(G, r)\rangle = -r\,\|G\|_*`. Two norms compare equal
when they are the same norm: options that change only how an LMO is computed (``polar_fn``, the
nuclear ``method``) do not enter the comparison, and ``dual()`` returns the dual with its
default options.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import ClassVar

import torch
from torch import Tensor

from ._common import Dim, check_matrix, check_tensor, normalize_dim
from .colrow import (
    colnorm,
    colnorm_dual,
    colnorm_dual_lmo,
    colnorm_lmo,
    rownorm,
    rownorm_dual,
    rownorm_dual_lmo,
    rownorm_lmo,
)
from .entrywise import l1_lmo, l1_norm, l2_lmo, l2_norm, linf_lmo, linf_norm
from .frobenius import frobenius_lmo, frobenius_norm
from .nuclear import NuclearMethod, _check_method, nuclear_lmo, nuclear_norm
from .schatten import check_p, dual_exponent, schatten_lmo, schatten_norm
from .spectral import PolarFn, spectral_lmo, spectral_norm

__all__ = [
    "L1",
    "L2",
    "ColNorm",
    "ColNormDual",
    "Frobenius",
    "LInf",
    "MatrixNorm",
    "Norm",
    "Nuclear",
    "RowNorm",
    "RowNormDual",
    "Schatten",
    "Spectral",
    "VectorNorm",
]


class Norm(ABC):
    """A norm with its dual and its linear minimization oracle."""

    #: the name :func:`shared_core.lmo.get_norm` knows it by.
    name: ClassVar[str]

    @abstractmethod
    def norm(self, G: Tensor) -> Tensor:
        """The norm of ``G`` over :meth:`dims`."""

    @abstractmethod
    def dual_norm(self, G: Tensor) -> Tensor:
        """The dual norm :math:`\\|G\\|_* = \\max_{\\|D\\| \\le 1} \\langle G, D\\rangle`."""

    @abstractmethod
    def lmo(self, G: Tensor, radius: float = 1.0) -> Tensor:
        """The minimiser of :math:`\\langle G, D\\rangle` over :math:`\\|D\\| \\le r`."""

    @abstractmethod
    def dual(self) -> Norm:
        """The dual norm as a :class:`Norm`."""

    @abstractmethod
    def dims(self, G: Tensor) -> tuple[int, ...]:
        """The axes of ``G`` this norm measures (the others are a batch)."""

    def inner(self, G: Tensor, D: Tensor) -> Tensor:
        r""":math:`\langle G, D\rangle` summed over :meth:`dims`, in float64 for half inputs."""
        G = check_tensor(G, f"{type(self).__name__}.inner")
        prod = G.double() * D.double() if G.dtype in (torch.float16, torch.bfloat16) else G * D
        return prod.sum(dim=self.dims(G))

    def __call__(self, G: Tensor) -> Tensor:
        return self.norm(G)


class MatrixNorm(Norm):
    """A norm of the last two axes ``(..., m, n)``; leading axes are a batch."""

    def dims(self, G: Tensor) -> tuple[int, ...]:
        G = check_matrix(G, type(self).__name__)
        return (G.ndim - 2, G.ndim - 1)


@dataclass(frozen=True)
class Spectral(MatrixNorm):
    r"""The spectral norm :math:`\sigma_1`; LMO :math:`-r\,U V^\top`; dual :class:`Nuclear`.

    Args:
        polar_fn: the polar-factor routine of the LMO (default: exact SVD); see
            :func:`shared_core.lmo.spectral_lmo`.

    Example:
        >>> Spectral().lmo(torch.tensor([[2.0, 0.0], [0.0, -3.0]]))
        tensor([[-1., -0.],
                [-0.,  1.]])
    """

    polar_fn: PolarFn | None = field(default=None, compare=False)
    name: ClassVar[str] = "spectral"

    def norm(self, G: Tensor) -> Tensor:
        return spectral_norm(G)

    def dual_norm(self, G: Tensor) -> Tensor:
        return nuclear_norm(G)

    def lmo(self, G: Tensor, radius: float = 1.0) -> Tensor:
        return spectral_lmo(G, radius, polar_fn=self.polar_fn)

    def dual(self) -> Nuclear:
        return Nuclear()


@dataclass(frozen=True)
class Nuclear(MatrixNorm):
    r"""The nuclear norm :math:`\sum_i \sigma_i`; LMO :math:`-r\,u_1 v_1^\top`; dual: spectral.

    Args:
        method: ``"svd"`` (exact) or ``"power"`` (``power_iters`` power-iteration steps from a
            start drawn with ``seed``).
        power_iters: power-iteration steps.
        seed: seed of the power method's starting vector.

    Example:
        >>> Nuclear().norm(torch.tensor([[2.0, 0.0], [0.0, -3.0]]))
        tensor(5.)
    """

    method: NuclearMethod = field(default="svd", compare=False)
    power_iters: int = field(default=10, compare=False)
    seed: int = field(default=0, compare=False)
    name: ClassVar[str] = "nuclear"

    def __post_init__(self) -> None:
        _check_method(self.method, self.power_iters)

    def norm(self, G: Tensor) -> Tensor:
        return nuclear_norm(G)

    def dual_norm(self, G: Tensor) -> Tensor:
        return spectral_norm(G)

    def lmo(self, G: Tensor, radius: float = 1.0) -> Tensor:
        return nuclear_lmo(
            G, radius, method=self.method, power_iters=self.power_iters, seed=self.seed
        )

    def dual(self) -> Spectral:
        return Spectral()


@dataclass(frozen=True)
class Frobenius(MatrixNorm):
    r"""The Frobenius norm; LMO :math:`-r\,G/\|G\|_F`; its own dual.

    Example:
        >>> Frobenius().dual() == Frobenius()
        True
    """

    name: ClassVar[str] = "frobenius"

    def norm(self, G: Tensor) -> Tensor:
        return frobenius_norm(G)

    def dual_norm(self, G: Tensor) -> Tensor:
        return frobenius_norm(G)

    def lmo(self, G: Tensor, radius: float = 1.0) -> Tensor:
        return frobenius_lmo(G, radius)

    def dual(self) -> Frobenius:
        return Frobenius()


@dataclass(frozen=True)
class Schatten(MatrixNorm):
    r"""The Schatten-p norm :math:`\|\sigma(G)\|_p`, :math:`1 \le p \le \infty`; dual Schatten-q.

    ``Schatten(1)``, ``Schatten(2)`` and ``Schatten(inf)`` have the values and LMOs of
    :class:`Nuclear`, :class:`Frobenius` and :class:`Spectral`.

    Args:
        p: the exponent; ``math.inf`` is allowed.

    Example:
        >>> Schatten(3).dual()
        Schatten(p=1.5)
    """

    p: float
    name: ClassVar[str] = "schatten"

    def __post_init__(self) -> None:
        object.__setattr__(self, "p", check_p(self.p))

    @property
    def q(self) -> float:
        """The dual exponent :math:`p/(p-1)`."""
        return dual_exponent(self.p)

    def norm(self, G: Tensor) -> Tensor:
        return schatten_norm(G, self.p)

    def dual_norm(self, G: Tensor) -> Tensor:
        return schatten_norm(G, self.q)

    def lmo(self, G: Tensor, radius: float = 1.0) -> Tensor:
        return schatten_lmo(G, self.p, radius)

    def dual(self) -> Schatten:
        return Schatten(self.q)


@dataclass(frozen=True)
class ColNorm(MatrixNorm):
    r"""Max column l2 norm :math:`\|G\|_{1\to 2}`; LMO normalises every column.

    The dual is :class:`ColNormDual`, the sum of column l2 norms.


    Example:
        >>> ColNorm().norm(torch.tensor([[3.0, 1.0], [4.0, 0.0]]))
        tensor(5.)
    """

    name: ClassVar[str] = "colnorm"

    def norm(self, G: Tensor) -> Tensor:
        return colnorm(G)

    def dual_norm(self, G: Tensor) -> Tensor:
        return colnorm_dual(G)

    def lmo(self, G: Tensor, radius: float = 1.0) -> Tensor:
        return colnorm_lmo(G, radius)

    def dual(self) -> ColNormDual:
        return ColNormDual()


@dataclass(frozen=True)
class ColNormDual(MatrixNorm):
    r"""Sum of column l2 norms; LMO takes the longest column; dual :class:`ColNorm`.

    Example:
        >>> ColNormDual().norm(torch.tensor([[3.0, 1.0], [4.0, 0.0]]))
        tensor(6.)
    """

    name: ClassVar[str] = "colnorm_dual"

    def norm(self, G: Tensor) -> Tensor:
        return colnorm_dual(G)

    def dual_norm(self, G: Tensor) -> Tensor:
        return colnorm(G)

    def lmo(self, G: Tensor, radius: float = 1.0) -> Tensor:
        return colnorm_dual_lmo(G, radius)

    def dual(self) -> ColNorm:
        return ColNorm()


@dataclass(frozen=True)
class RowNorm(MatrixNorm):
    r"""Max row l2 norm :math:`\|G\|_{2\to\infty}`; LMO normalises every row.

    The dual is :class:`RowNormDual`, the sum of row l2 norms.


    Example:
        >>> RowNorm().norm(torch.tensor([[3.0, 4.0], [1.0, 0.0]]))
        tensor(5.)
    """

    name: ClassVar[str] = "rownorm"

    def norm(self, G: Tensor) -> Tensor:
        return rownorm(G)

    def dual_norm(self, G: Tensor) -> Tensor:
        return rownorm_dual(G)

    def lmo(self, G: Tensor, radius: float = 1.0) -> Tensor:
        return rownorm_lmo(G, radius)

    def dual(self) -> RowNormDual:
        return RowNormDual()


@dataclass(frozen=True)
class RowNormDual(MatrixNorm):
    r"""Sum of row l2 norms; LMO takes the longest row; dual :class:`RowNorm`.

    Example:
        >>> RowNormDual().norm(torch.tensor([[3.0, 4.0], [1.0, 0.0]]))
        tensor(6.)
    """

    name: ClassVar[str] = "rownorm_dual"

    def norm(self, G: Tensor) -> Tensor:
        return rownorm_dual(G)

    def dual_norm(self, G: Tensor) -> Tensor:
        return rownorm(G)

    def lmo(self, G: Tensor, radius: float = 1.0) -> Tensor:
        return rownorm_dual_lmo(G, radius)

    def dual(self) -> RowNorm:
        return RowNorm()


@dataclass(frozen=True)
class VectorNorm(Norm):
    """An entrywise norm over the axes ``dim`` (``None``: the whole tensor is one vector)."""

    dim: Dim = None

    def __post_init__(self) -> None:
        dim = self.dim
        if dim is None:
            return
        if isinstance(dim, int):
            dims: tuple = (dim,)
        elif isinstance(dim, list | tuple):
            dims = tuple(dim)
        else:
            dims = ()  # refused just below, whatever the type
        bad = [d for d in dims if not isinstance(d, int) or isinstance(d, bool)]
        if not dims or bad or len(set(dims)) != len(dims):
            raise ValueError(
                f"{type(self).__name__}: dim must be None, an int or distinct ints, got {dim!r}"
            )
        if not isinstance(dim, int):
            # A hashable, comparable tuple, so that LInf((0, 1)) == LInf([0, 1]).
            object.__setattr__(self, "dim", dims)

    def dims(self, G: Tensor) -> tuple[int, ...]:
        return normalize_dim(self.dim, G.ndim, type(self).__name__)


@dataclass(frozen=True)
class LInf(VectorNorm):
    r"""The l-inf norm; LMO :math:`-r\,\operatorname{sign}(g)` (Triton on CUDA); dual :class:`L1`.

    Example:
        >>> LInf().lmo(torch.tensor([2.0, -0.5]), radius=0.1)
        tensor([-0.1000,  0.1000])
    """

    name: ClassVar[str] = "linf"

    def norm(self, G: Tensor) -> Tensor:
        return linf_norm(G, self.dim)

    def dual_norm(self, G: Tensor) -> Tensor:
        return l1_norm(G, self.dim)

    def lmo(self, G: Tensor, radius: float = 1.0) -> Tensor:
        return linf_lmo(G, radius, self.dim)

    def dual(self) -> L1:
        return L1(self.dim)


@dataclass(frozen=True)
class L1(VectorNorm):
    r"""The l1 norm; LMO: one signed coordinate per vector; dual :class:`LInf`.

    Example:
        >>> L1(dim=-1).lmo(torch.tensor([[2.0, -0.5], [0.1, -0.3]]))
        tensor([[-1.,  0.],
                [ 0.,  1.]])
    """

    name: ClassVar[str] = "l1"

    def norm(self, G: Tensor) -> Tensor:
        return l1_norm(G, self.dim)

    def dual_norm(self, G: Tensor) -> Tensor:
        return linf_norm(G, self.dim)

    def lmo(self, G: Tensor, radius: float = 1.0) -> Tensor:
        return l1_lmo(G, radius, self.dim)

    def dual(self) -> LInf:
        return LInf(self.dim)


@dataclass(frozen=True)
class L2(VectorNorm):
    r"""The l2 norm; LMO :math:`-r\,g/\|g\|_2`; its own dual.

    Example:
        >>> L2().lmo(torch.tensor([3.0, -4.0]))
        tensor([-0.6000,  0.8000])
    """

    name: ClassVar[str] = "l2"

    def norm(self, G: Tensor) -> Tensor:
        return l2_norm(G, self.dim)

    def dual_norm(self, G: Tensor) -> Tensor:
        return l2_norm(G, self.dim)

    def lmo(self, G: Tensor, radius: float = 1.0) -> Tensor:
        return l2_lmo(G, radius, self.dim)

    def dual(self) -> L2:
        return L2(self.dim)
