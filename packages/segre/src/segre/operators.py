r"""Linear measurement operators :math:`\mathcal{A}: \mathbb{R}^{n_1\times\dots\times n_d} \to
\mathbb{R}^m` evaluated on tensors in factored form.

Everything the algorithms need comes from two primitives evaluated at unit factors
:math:`u = (u_1, \dots, u_d)`:

- :meth:`MeasurementOperator.forward_cp`: :math:`\mathcal{A}(T)` for :math:`T = \sum_j c_j
  \bigotimes_k f_{kj}` in CP form (a point has one term, a tangent vector ``d + 1``);
- :meth:`MeasurementOperator.mode_matrix`: the ``m x n_k`` matrix
  :math:`M_k(u)` whose row ``i`` is :math:`A_i \times_{j\ne k} u_j`.

From them: :math:`\mathcal{A}(\lambda\otimes u) = \lambda M_k u_k`, the adjoint contractions
:math:`\mathcal{A}^*(r) \times_{j \ne k} u_j = M_k^\top r` (all a Riemannian gradient needs),
and the Jacobian of the tangent parametrisation
:math:`(\mu, w) \mapsto \mathcal{A}(\mu \otimes u + \sum_k \dots w_k \dots) = \mu\, p +
\sum_k M_k w_k`, :math:`p = M_1 u_1`, used by Gauss-Newton.

Operators:

- :class:`RankOneSensing`: :math:`A_i = a_{i1}\otimes\dots\otimes a_{id}` stored as ``d``
  matrices ``(m, n_k)``; memory and every primitive :math:`O(m \sum_k n_k)`, no dense tensor.
- :class:`DenseSensing`: arbitrary :math:`A_i` stored densely ``(m, n_1, ..., n_d)``: Gaussian
  sensing (:func:`gaussian_sensing`) and scalar-on-tensor regression (the design tensors of
  the samples are the :math:`A_i`). Small sizes.
- :class:`FullObservation`: :math:`\mathcal{A} = \mathrm{vec}`, i.e. tensor PCA / CP
  decomposition of an observed tensor :math:`Y = X + E` (``m = n_1 \cdots n_d``).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod

import torch
from torch import Tensor

from shared_core.manifolds import CPTensor

from .tensors import check_dims

__all__ = [
    "DenseSensing",
    "FullObservation",
    "MeasurementOperator",
    "RankOneSensing",
    "gaussian_sensing",
    "rank_one_sensing",
]


def khatri_rao(mats) -> Tensor:
    """Column-wise Kronecker product: ``(n_1 ... n_d, K)`` from ``d`` matrices ``(n_k, K)``
    (C order: the last mode varies fastest, as in ``reshape``)."""
    out = mats[0]
    for f in mats[1:]:
        out = (out[:, None, :] * f[None, :, :]).reshape(-1, f.shape[1])
    return out


def _kron_vec(vecs, like: Tensor) -> Tensor:
    out = torch.ones(1, dtype=like.dtype, device=like.device)
    for v in vecs:
        out = (out[:, None] * v[None, :]).reshape(-1)
    return out


def _mode_contract(t: Tensor, dims, factors, k: int) -> Tensor:
    """``(m, n_k)``: ``t`` of shape ``(m, n_1, ..., n_d)`` contracted with every ``u_j``,
    ``j != k``, by two matrix products (no multi-operand einsum)."""
    m = t.shape[0]
    before = math.prod(dims[:k])
    after = math.prod(dims[k + 1 :])
    n = dims[k]
    kb = _kron_vec(factors[:k], t)
    ka = _kron_vec(factors[k + 1 :], t)
    z = (t.reshape(m * before * n, after) @ ka).reshape(m, before, n)
    return (kb @ z) if before > 1 else z[:, 0, :]


def _check_factors(dims, factors, what="factors") -> tuple[Tensor, ...]:
    factors = tuple(factors)
    if len(factors) != len(dims):
        raise ValueError(f"{what}: expected {len(dims)} vectors (one per mode), got {len(factors)}")
    for k, (f, n) in enumerate(zip(factors, dims, strict=True)):
        if f.shape[0] != n:
            raise ValueError(f"{what}[{k}] must have {n} rows (mode size), got {tuple(f.shape)}")
    return factors


class MeasurementOperator(ABC):
    """A linear map from tensors of shape ``dims`` to ``R^m``, applied to factored tensors."""

    dims: tuple[int, ...]
    num_measurements: int
    #: True when ``A^* A`` is the identity (full observation): Gauss-Newton is then a projection.
    isometry: bool = False

    @property
    def order(self) -> int:
        return len(self.dims)

    @property
    def dtype(self) -> torch.dtype:
        return self._dtype

    @abstractmethod
    def forward_cp(self, t: CPTensor) -> Tensor:
        r""":math:`\mathcal{A}(\sum_j c_j \otimes_k f_{kj})`: weights ``(K,)``, factors
        ``(n_k, K)``; returns ``(m,)``."""

    @abstractmethod
    def mode_matrix(self, factors, k: int) -> Tensor:
        r"""The ``m x n_k`` matrix with rows :math:`A_i \times_{j\ne k} u_j` (``factors[k]`` is
        ignored)."""

    @abstractmethod
    def to_matrix(self) -> Tensor:
        """The dense ``m x (n_1 ... n_d)`` matrix (C order); for tests at small sizes."""

    def forward(self, scale: Tensor, factors) -> Tensor:
        r""":math:`\mathcal{A}(\lambda \otimes_k u_k)`, shape ``(m,)``."""
        factors = _check_factors(self.dims, factors)
        return self.forward_cp(CPTensor(scale.reshape(1), tuple(f[:, None] for f in factors)))

    def adjoint_contract(self, r: Tensor, factors) -> tuple[Tensor, ...]:
        r""":math:`g_k = \mathcal{A}^*(r) \times_{j\ne k} u_j = M_k^\top r` for every mode."""
        factors = _check_factors(self.dims, factors)
        return tuple(self.mode_matrix(factors, k).T @ r for k in range(self.order))

    def mode_matrices(self, factors) -> tuple[Tensor, ...]:
        """All ``M_k(u)``."""
        factors = _check_factors(self.dims, factors)
        return tuple(self.mode_matrix(factors, k) for k in range(self.order))

    def adjoint_dense(self, r: Tensor) -> Tensor:
        r"""The dense tensor :math:`\mathcal{A}^*(r)` (``n_1 x ... x n_d``); small sizes only."""
        return (self.to_matrix().T @ r).reshape(self.dims)


class RankOneSensing(MeasurementOperator):
    r"""Rank-one sensing tensors :math:`A_i = a_{i1}\otimes\dots\otimes a_{id}`.

    ``A(T)_i = sum_j c_j prod_k <a_ik, f_kj>``; ``M_k = diag(q_k) A_k`` with
    :math:`q_{ik} = \prod_{j\ne k}\langle a_{ij}, u_j\rangle`. Memory :math:`O(m\sum_k n_k)`.

    Args:
        factors: ``d`` matrices, ``factors[k]`` of shape ``(m, n_k)`` (row ``i`` is
            :math:`a_{ik}`), finite, float32 or float64.

    Example:
        >>> g = torch.Generator().manual_seed(0)
        >>> op = rank_one_sensing((3, 4, 2), 5, generator=g)
        >>> x = [torch.randn(n, generator=g, dtype=torch.float64) for n in (3, 4, 2)]
        >>> dense = torch.einsum("a,b,c->abc", *x).reshape(-1)
        >>> bool(torch.allclose(op.forward(torch.ones(1, dtype=torch.float64), x),
        ...                     op.to_matrix() @ dense))
        True
    """

    def __init__(self, factors):
        factors = tuple(torch.as_tensor(f) for f in factors)
        if len(factors) < 2:
            raise ValueError(f"RankOneSensing needs d >= 2 factor matrices, got {len(factors)}")
        m = factors[0].shape[0] if factors[0].ndim == 2 else -1
        for k, f in enumerate(factors):
            if f.ndim != 2 or f.shape[0] != m:
                raise ValueError(
                    f"factors[{k}] must have shape (m, n_{k}) with the same m for all modes; "
                    f"got {tuple(f.shape)}"
                )
            if f.dtype not in (torch.float32, torch.float64):
                raise ValueError(f"factors[{k}] must be float32 or float64, got {f.dtype}")
            if not bool(torch.isfinite(f).all()):
                raise ValueError(f"factors[{k}] contains NaN or inf")
        if m < 1:
            raise ValueError("RankOneSensing needs at least one measurement")
        self.dims = check_dims(tuple(int(f.shape[1]) for f in factors))
        self.factors = factors
        self.num_measurements = int(m)
        self._dtype = factors[0].dtype

    def __repr__(self) -> str:
        return f"RankOneSensing(dims={self.dims}, m={self.num_measurements})"

    def forward_cp(self, t: CPTensor) -> Tensor:
        prod = t.weights.reshape(1, -1)
        for a, f in zip(self.factors, t.factors, strict=True):
            prod = prod * (a @ f)
        return prod.sum(-1)

    def _q(self, factors, k: int) -> Tensor:
        q = torch.ones(self.num_measurements, dtype=self._dtype, device=self.factors[0].device)
        for j, (a, u) in enumerate(zip(self.factors, factors, strict=True)):
            if j != k:
                q = q * (a @ u)
        return q

    def mode_matrix(self, factors, k: int) -> Tensor:
        return self._q(factors, k)[:, None] * self.factors[k]

    def adjoint_contract(self, r: Tensor, factors) -> tuple[Tensor, ...]:
        factors = _check_factors(self.dims, factors)
        proj = [a @ u for a, u in zip(self.factors, factors, strict=True)]
        out = []
        for k in range(self.order):
            q = r
            for j, pj in enumerate(proj):
                if j != k:
                    q = q * pj
            out.append(self.factors[k].T @ q)
        return tuple(out)

    def adjoint_dense(self, r: Tensor) -> Tensor:
        # sum_i r_i a_i1 x ... x a_id as (r * A_1)^T times the row-wise Khatri-Rao of the rest:
        # m * n_2 ... n_d memory, never m * n_1 ... n_d.
        rest = self.factors[1]
        for a in self.factors[2:]:
            rest = (rest[:, :, None] * a[:, None, :]).reshape(self.num_measurements, -1)
        return ((self.factors[0] * r[:, None]).T @ rest).reshape(self.dims)

    def to_matrix(self) -> Tensor:
        rows = self.factors[0]
        for a in self.factors[1:]:
            rows = (rows[:, :, None] * a[:, None, :]).reshape(self.num_measurements, -1)
        return rows


class DenseSensing(MeasurementOperator):
    r"""Dense sensing tensors :math:`A_i` (``A`` of shape ``(m, n_1, ..., n_d)``).

    Gaussian sensing and scalar-on-tensor regression (:math:`y_i = \langle X_i, B\rangle +
    \varepsilon_i`, covariate tensors :math:`X_i` as the rows) are both this operator.
    """

    def __init__(self, tensors: Tensor):
        tensors = torch.as_tensor(tensors)
        if tensors.ndim < 3:
            raise ValueError(
                f"DenseSensing needs a tensor of shape (m, n_1, ..., n_d), d >= 2; got "
                f"{tuple(tensors.shape)}"
            )
        if tensors.dtype not in (torch.float32, torch.float64):
            raise ValueError(f"sensing tensors must be float32 or float64, got {tensors.dtype}")
        if not bool(torch.isfinite(tensors).all()):
            raise ValueError("sensing tensors contain NaN or inf")
        self.dims = check_dims(tuple(int(n) for n in tensors.shape[1:]))
        self.tensors = tensors
        self._layouts: dict[int, Tensor] = {}
        self.num_measurements = int(tensors.shape[0])
        self._dtype = tensors.dtype

    def __repr__(self) -> str:
        return f"DenseSensing(dims={self.dims}, m={self.num_measurements})"

    def forward_cp(self, t: CPTensor) -> Tensor:
        return self.to_matrix() @ (khatri_rao(t.factors) @ t.weights)

    def _mode_last(self, k: int) -> Tensor:
        """``A`` laid out as ``(m * n_k, prod of the other sizes)`` (built once per mode: one
        BLAS matrix-vector product per mode matrix afterwards, at the price of ``d`` copies)."""
        if k not in self._layouts:
            m, n = self.num_measurements, self.dims[k]
            self._layouts[k] = self.tensors.movedim(k + 1, 1).reshape(m * n, -1).contiguous()
        return self._layouts[k]

    def mode_matrix(self, factors, k: int) -> Tensor:
        others = [f for j, f in enumerate(factors) if j != k]
        kron = _kron_vec(others, self.tensors)
        return (self._mode_last(k) @ kron).reshape(self.num_measurements, self.dims[k])

    def adjoint_contract(self, r: Tensor, factors) -> tuple[Tensor, ...]:
        # One pass over A (A^T r, dense but only n_1 ... n_d long), then cheap contractions.
        factors = _check_factors(self.dims, factors)
        z = (r @ self.to_matrix()).reshape(1, *self.dims)
        return tuple(_mode_contract(z, self.dims, factors, k)[0] for k in range(self.order))

    def to_matrix(self) -> Tensor:
        return self.tensors.reshape(self.num_measurements, -1)


class FullObservation(MeasurementOperator):
    r"""Full observation :math:`\mathcal{A}(X) = \mathrm{vec}(X)`: tensor PCA / CP-1 fitting.

    ``m = prod(dims)``; the data are a dense tensor anyway. ``A^* A = I``, so the Gauss-Newton
    system on the tangent space is the identity (``isometry = True``).
    """

    isometry = True

    def __init__(self, dims, dtype: torch.dtype = torch.float64):
        self.dims = check_dims(dims)
        self.num_measurements = math.prod(self.dims)
        self._dtype = dtype

    def __repr__(self) -> str:
        return f"FullObservation(dims={self.dims})"

    def forward_cp(self, t: CPTensor) -> Tensor:
        return khatri_rao(t.factors) @ t.weights

    def mode_matrix(self, factors, k: int) -> Tensor:
        eye = torch.eye(self.dims[k], dtype=factors[0].dtype, device=factors[0].device)
        facs = [f[:, None].expand(-1, self.dims[k]) for f in factors]
        facs[k] = eye
        return khatri_rao(facs)

    def adjoint_contract(self, r: Tensor, factors) -> tuple[Tensor, ...]:
        factors = _check_factors(self.dims, factors)
        z = r.reshape(1, *self.dims)
        return tuple(_mode_contract(z, self.dims, factors, k)[0] for k in range(self.order))

    def to_matrix(self) -> Tensor:
        return torch.eye(self.num_measurements, dtype=self._dtype)

    def adjoint_dense(self, r: Tensor) -> Tensor:
        return r.reshape(self.dims)


def _check_m(m) -> int:
    if isinstance(m, bool) or not isinstance(m, int) or m < 1:
        raise ValueError(f"the number of measurements must be an int >= 1, got {m!r}")
    return m


def gaussian_sensing(
    dims, m: int, *, generator: torch.Generator | None = None, dtype=torch.float64
) -> DenseSensing:
    """Dense sensing tensors with i.i.d. N(0, 1) entries (``E A^* A = m I``)."""
    dims, m = check_dims(dims), _check_m(m)
    return DenseSensing(torch.randn((m, *dims), generator=generator, dtype=dtype))


def rank_one_sensing(
    dims, m: int, *, generator: torch.Generator | None = None, dtype=torch.float64
) -> RankOneSensing:
    """Rank-one sensing tensors with i.i.d. N(0, 1) factor entries (``E A^* A = m I``)."""
    dims, m = check_dims(dims), _check_m(m)
    return RankOneSensing([torch.randn(m, n, generator=generator, dtype=dtype) for n in dims])
