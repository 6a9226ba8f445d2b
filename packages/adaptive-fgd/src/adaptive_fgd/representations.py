r"""Nested feature families that represent functional gradients (and hence the iterate).

A family is an append-only list of basis functions :math:`\varphi_1, \varphi_2, \dots` (at most
``cap``). A representation of size :math:`m` is :math:`\hat g = \sum_{j\le m}\beta_j\varphi_j`,
its coefficients the ridge least-squares fit of the gradient values on the fit points
(:func:`fit_coefficients`). Because every size is a *prefix* of the same list, the FGD iterate
:math:`f_T = f_0 - \sum_t \eta_t \hat g_t` is one coefficient vector over the longest prefix
used: adding a step adds :math:`-\eta\beta` to the first :math:`m` entries. Evaluating
:math:`f_T` costs :math:`O(\text{list length}) \le O(\text{cap})` per point, independent of
:math:`T` (the sum is merged exactly, not refit).

Families:

* :class:`KernelCentres`: :math:`\varphi_j = k(c_j, \cdot)` with a Gaussian kernel; new centres
  are drawn among the fit points with probability proportional to the squared residual
  :math:`|g - \hat g|^2` there (adaptively chosen centres).
* :class:`RandomFourierFeatures`: :math:`\varphi_j(x) = \sqrt2\cos(\omega_j^\top x + b_j)`,
  :math:`\omega_j \sim N(0, \ell^{-2} I)`, drawn once up to ``cap``; refining grows the count.

Example:
    >>> import torch
    >>> fam = RandomFourierFeatures(dim=1, bandwidth=0.3, cap=64, seed=0)
    >>> fam.features(torch.zeros(5, 1, dtype=torch.float64), 16).shape
    torch.Size([5, 16])
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod

import torch

__all__ = [
    "FeatureFamily",
    "KernelCentres",
    "NestedRidge",
    "RandomFourierFeatures",
    "fit_coefficients",
    "gaussian_kernel",
]


def gaussian_kernel(x: torch.Tensor, z: torch.Tensor, bandwidth: float) -> torch.Tensor:
    r""":math:`k(x, z) = \exp(-\|x - z\|^2 / (2\ell^2))` for all pairs: ``(len(x), len(z))``."""
    if x.ndim != 2 or z.ndim != 2 or x.shape[1] != z.shape[1]:
        raise ValueError(f"need (n, d) and (m, d) points, got {tuple(x.shape)}, {tuple(z.shape)}")
    d2 = (x * x).sum(1)[:, None] + (z * z).sum(1)[None, :] - 2.0 * x @ z.T
    return torch.exp(-d2.clamp_min(0) / (2.0 * bandwidth**2))


def fit_coefficients(phi: torch.Tensor, values: torch.Tensor, ridge: float = 1e-8) -> torch.Tensor:
    r"""Ridge least squares :math:`\beta = (\Phi^\top\Phi/n + \rho I)^{-1}\Phi^\top G/n`.

    :math:`\rho` is ``ridge`` times the mean diagonal of :math:`\Phi^\top\Phi/n` (scale free),
    solved by Cholesky in float64 (jitter raised tenfold until it factorises).

    Args:
        phi: features at the fit points, ``(n, m)``.
        values: gradient values there, ``(n, k)``.
        ridge: relative ridge :math:`\ge 0`.

    Returns:
        :math:`\beta`, ``(m, k)``, in ``phi``'s dtype.
    """
    if phi.ndim != 2 or values.ndim != 2 or phi.shape[0] != values.shape[0]:
        raise ValueError(
            f"need phi (n, m) and values (n, k), got {tuple(phi.shape)}, {tuple(values.shape)}"
        )
    if phi.shape[0] == 0:
        raise ValueError("no fit points: cannot fit a representation to an empty sample")
    if ridge < 0:
        raise ValueError(f"ridge must be >= 0, got {ridge!r}")
    n = phi.shape[0]
    p64, v64 = phi.double(), values.double()
    gram = p64.T @ p64 / n
    rhs = p64.T @ v64 / n
    scale = float(gram.diagonal().mean()) or 1.0
    jitter = max(ridge, 1e-14) * scale
    eye = torch.eye(gram.shape[0], dtype=gram.dtype)
    for _ in range(8):
        chol, info = torch.linalg.cholesky_ex(gram + jitter * eye)
        if int(info) == 0:
            return torch.cholesky_solve(rhs, chol).to(phi.dtype)
        jitter *= 10.0
    raise RuntimeError("fit_coefficients: the feature Gram matrix does not factorise")


class NestedRidge:
    r"""Ridge fits at every prefix size from one Cholesky factor, extended as columns arrive.

    With :math:`A = \Phi^\top\Phi/n + \rho I = LL^\top` over the whole list, the leading
    block :math:`A_{:m,:m}` factors as :math:`L_{:m,:m}L_{:m,:m}^\top`, so the fit at size
    :math:`m` is two triangular solves with :math:`L_{:m,:m}` (:math:`O(nm + m^2)` per right-hand
    side). Appending :math:`p` columns :math:`\Psi` costs one block update
    :math:`L_{21} = (L^{-1}\Phi^\top\Psi/n)^\top`,
    :math:`L_{22} = \mathrm{chol}(\Psi^\top\Psi/n + \rho I - L_{21}L_{21}^\top)`.
    :math:`\rho` is ``ridge`` times the mean squared feature of the first columns, then fixed
    (raised tenfold, and the factor rebuilt, if an update fails to factorise).

    Args:
        ridge: relative ridge :math:`\ge 0`.

    Example:
        >>> import torch
        >>> nr = NestedRidge(1e-10)
        >>> nr.extend(torch.eye(4, 2, dtype=torch.float64))
        >>> nr.solve(2, torch.ones(4, 1, dtype=torch.float64)).flatten().round(decimals=6).tolist()
        [1.0, 1.0]
    """

    def __init__(self, ridge: float = 1e-8) -> None:
        if not (ridge >= 0 and math.isfinite(ridge)):
            raise ValueError(f"ridge must be finite and >= 0, got {ridge!r}")
        self.ridge = float(ridge)
        self.phi: torch.Tensor | None = None
        self.chol = torch.zeros(0, 0, dtype=torch.float64)
        self.jitter: float | None = None

    @property
    def size(self) -> int:
        """Columns held."""
        return 0 if self.phi is None else self.phi.shape[1]

    def _refactor(self) -> None:
        assert self.phi is not None and self.jitter is not None
        n = self.phi.shape[0]
        gram = self.phi.T @ self.phi / n
        eye = torch.eye(gram.shape[0], dtype=gram.dtype)
        for _ in range(12):
            chol, info = torch.linalg.cholesky_ex(gram + self.jitter * eye)
            if int(info) == 0:
                self.chol = chol
                return
            self.jitter *= 10.0
        raise RuntimeError("NestedRidge: the feature Gram matrix does not factorise")

    def extend(self, new: torch.Tensor) -> None:
        """Append feature columns ``new`` ``(n, p)`` at the fit points."""
        new = new.double()
        if new.ndim != 2 or new.shape[0] == 0:
            raise ValueError(f"need (n, p) columns with n >= 1, got {tuple(new.shape)}")
        if self.phi is not None and new.shape[0] != self.phi.shape[0]:
            raise ValueError(f"new columns have {new.shape[0]} rows, expected {self.phi.shape[0]}")
        if new.shape[1] == 0:
            return
        n = new.shape[0]
        if self.phi is None:
            self.phi = new
            self.jitter = max(self.ridge, 1e-14) * (float((new * new).mean()) or 1.0)
            self._refactor()
            return
        b = self.phi.T @ new / n
        c = new.T @ new / n
        l21 = torch.linalg.solve_triangular(self.chol, b, upper=False).T
        schur = c + self.jitter * torch.eye(c.shape[0], dtype=c.dtype) - l21 @ l21.T
        l22, info = torch.linalg.cholesky_ex(schur)
        self.phi = torch.cat([self.phi, new], dim=1)
        if int(info) != 0:
            self._refactor()
            return
        m, p = self.chol.shape[0], new.shape[1]
        chol = self.chol.new_zeros(m + p, m + p)
        chol[:m, :m], chol[m:, :m], chol[m:, m:] = self.chol, l21, l22
        self.chol = chol

    def solve(self, m: int, values: torch.Tensor) -> torch.Tensor:
        r"""Ridge fit at size ``m``: :math:`\beta = A_{:m,:m}^{-1}\Phi_{:,:m}^\top G/n`, ``(m, k)``.

        Args:
            m: the prefix size, ``1 <= m <= size``.
            values: gradient values at the fit points, ``(n, k)``.
        """
        if not (1 <= m <= self.size):
            raise ValueError(f"size {m} outside 1..{self.size}")
        assert self.phi is not None
        if values.ndim != 2 or values.shape[0] != self.phi.shape[0]:
            raise ValueError(
                f"values must have shape ({self.phi.shape[0]}, k), got {tuple(values.shape)}"
            )
        rhs = self.phi[:, :m].T @ values.double() / self.phi.shape[0]
        return torch.cholesky_solve(rhs, self.chol[:m, :m])


class FeatureFamily(ABC):
    """An append-only list of basis functions; sizes are prefixes of it."""

    def __init__(self, dim: int, cap: int) -> None:
        if isinstance(dim, bool) or not isinstance(dim, int) or dim < 1:
            raise ValueError(f"dim must be a positive int, got {dim!r}")
        if isinstance(cap, bool) or not isinstance(cap, int) or cap < 1:
            raise ValueError(f"cap must be a positive int, got {cap!r}")
        self.dim = dim
        self.cap = cap

    @property
    @abstractmethod
    def size(self) -> int:
        """How many basis functions the list holds now."""

    @abstractmethod
    def features(self, x: torch.Tensor, m: int | None = None, start: int = 0) -> torch.Tensor:
        """Basis functions ``start..m-1`` (default all) at ``x`` ``(n, dim)``: ``(n, m-start)``."""

    @abstractmethod
    def grow(
        self, m: int, x_fit: torch.Tensor, residual: torch.Tensor, generator: torch.Generator
    ) -> None:
        """Make the list at least ``min(m, cap)`` long, using the residual to place new ones."""

    def _check_x(self, x: torch.Tensor) -> None:
        if x.ndim != 2 or x.shape[1] != self.dim:
            raise ValueError(f"points must have shape (n, {self.dim}), got {tuple(x.shape)}")

    def _check_range(self, x: torch.Tensor, m: int | None, start: int) -> int:
        self._check_x(x)
        m = self.size if m is None else m
        if not (0 <= start <= m <= self.size):
            raise ValueError(f"asked for features {start}..{m} but the family holds {self.size}")
        return m


class KernelCentres(FeatureFamily):
    r"""Gaussian-kernel sections :math:`k(c_j,\cdot)` on adaptively placed centres.

    Args:
        dim: input dimension.
        bandwidth: kernel length scale :math:`\ell > 0`.
        cap: most centres.
    """

    def __init__(self, dim: int, bandwidth: float, cap: int) -> None:
        super().__init__(dim, cap)
        if not (bandwidth > 0 and math.isfinite(bandwidth)):
            raise ValueError(f"bandwidth must be finite and > 0, got {bandwidth!r}")
        self.bandwidth = float(bandwidth)
        self.centres = torch.empty(0, dim, dtype=torch.float64)

    @property
    def size(self) -> int:
        return self.centres.shape[0]

    def features(self, x: torch.Tensor, m: int | None = None, start: int = 0) -> torch.Tensor:
        m = self._check_range(x, m, start)
        return gaussian_kernel(x, self.centres[start:m].to(x), self.bandwidth)

    def grow(
        self, m: int, x_fit: torch.Tensor, residual: torch.Tensor, generator: torch.Generator
    ) -> None:
        m = min(m, self.cap)
        need = m - self.size
        if need <= 0:
            return
        self._check_x(x_fit)
        score = (residual.double() ** 2).sum(1)
        if self.size:  # never pick a point that is already a centre
            # exact distances (the matmul form can leave ~1e-8 between identical points)
            dist = torch.cdist(
                x_fit.double(), self.centres, compute_mode="donot_use_mm_for_euclid_dist"
            )
            taken = dist.min(1).values == 0
            score = torch.where(taken, torch.zeros_like(score), score)
        free = int((score > 0).sum())
        if free < need:  # fall back to uniform over the unused points
            unused = torch.ones_like(score)
            if self.size:
                unused = torch.where(taken, torch.zeros_like(score), unused)
            score = score + 1e-12 * unused
            need = min(need, int((score > 0).sum()))
        if need <= 0:
            return
        idx = torch.multinomial(score, need, replacement=False, generator=generator)
        self.centres = torch.cat([self.centres, x_fit[idx].double()])


class RandomFourierFeatures(FeatureFamily):
    r"""Random Fourier features of the Gaussian kernel, drawn once up to ``cap``.

    :math:`\varphi_j(x) = \sqrt 2\cos(\omega_j^\top x + b_j)` with
    :math:`\omega_j\sim N(0,\ell^{-2}I)`, :math:`b_j\sim U[0,2\pi)`; the mean of
    :math:`\varphi_j(x)\varphi_j(z)` over draws is :math:`k(x, z)`.
    """

    def __init__(self, dim: int, bandwidth: float, cap: int, seed: int = 0) -> None:
        super().__init__(dim, cap)
        if not (bandwidth > 0 and math.isfinite(bandwidth)):
            raise ValueError(f"bandwidth must be finite and > 0, got {bandwidth!r}")
        self.bandwidth = float(bandwidth)
        gen = torch.Generator().manual_seed(seed)
        self.omega = torch.randn(cap, dim, generator=gen, dtype=torch.float64) / bandwidth
        self.phase = 2 * math.pi * torch.rand(cap, generator=gen, dtype=torch.float64)
        self._size = 0

    @property
    def size(self) -> int:
        return self._size

    def features(self, x: torch.Tensor, m: int | None = None, start: int = 0) -> torch.Tensor:
        m = self._check_range(x, m, start)
        return math.sqrt(2.0) * torch.cos(
            x @ self.omega[start:m].T.to(x) + self.phase[start:m].to(x)
        )

    def grow(
        self, m: int, x_fit: torch.Tensor, residual: torch.Tensor, generator: torch.Generator
    ) -> None:
        self._size = max(self._size, min(m, self.cap))
