r"""The completion problem: observed entries of an ``m x n`` matrix, validated once.

A problem is the set :math:`\Omega` of observed positions and the values
:math:`b = (M^\star_{ij})_{(i,j)\in\Omega}`. It is stored as index arrays (``rows``, ``cols``,
``values``), memory :math:`O(|\Omega|)`, never as a dense operator.

Example:
    >>> import torch
    >>> M = torch.arange(6.0).reshape(2, 3)
    >>> mask = torch.tensor([[True, False, True], [False, True, True]])
    >>> obs = observe(M, mask)
    >>> obs.n_observed, obs.shape
    (4, (2, 3))
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
from torch import Tensor

__all__ = [
    "Observations",
    "check_eps",
    "check_rank",
    "empty_lines",
    "low_rank_matrix",
    "observe",
    "random_mask",
]


class Observations(NamedTuple):
    """Observed entries ``values[t] = M[rows[t], cols[t]]`` of an ``m x n`` matrix.

    ``rows``/``cols`` are int64, sorted row-major and unique; ``values`` float64 (or the
    input's floating dtype).
    """

    rows: Tensor
    cols: Tensor
    values: Tensor
    shape: tuple[int, int]

    @property
    def n_observed(self) -> int:
        return int(self.rows.numel())

    @property
    def rate(self) -> float:
        """The observed fraction :math:`|\\Omega| / (mn)`."""
        return self.n_observed / (self.shape[0] * self.shape[1])

    def dense_mask(self) -> Tensor:
        """The boolean ``m x n`` mask (O(mn) memory: for small problems and tests)."""
        mask = torch.zeros(self.shape, dtype=torch.bool, device=self.rows.device)
        mask[self.rows, self.cols] = True
        return mask

    def dense_values(self) -> Tensor:
        """``P_Omega(M)``: the observed values in place, zeros elsewhere (O(mn) memory)."""
        out = torch.zeros(self.shape, dtype=self.values.dtype, device=self.values.device)
        out[self.rows, self.cols] = self.values
        return out


def check_eps(eps: float) -> float:
    """``eps`` as a float, or ``ValueError`` unless it is finite and ``> 0``."""
    if isinstance(eps, bool) or not isinstance(eps, int | float):
        raise ValueError(f"eps must be a positive finite number, got {eps!r}")
    if not math.isfinite(eps) or eps <= 0:
        raise ValueError(f"eps must be a positive finite number, got {eps!r}")
    return float(eps)


def check_rank(rank: int, shape: tuple[int, int], name: str = "rank") -> int:
    """``rank`` if it is an int with ``1 <= rank < min(m, n)``, else ``ValueError``.

    A rank of ``min(m, n)`` is rejected: every matrix has it, so it constrains nothing and
    completion is ill-posed.
    """
    if isinstance(rank, bool) or not isinstance(rank, int):
        raise ValueError(f"{name} must be an int, got {rank!r}")
    m, n = shape
    if not 1 <= rank < min(m, n):
        raise ValueError(
            f"{name} must satisfy 1 <= {name} < min(m, n) = {min(m, n)} for a {m}x{n} matrix, "
            f"got {rank}"
        )
    return rank


def observe(m_obs: Tensor, mask: Tensor, *, allow_empty_lines: bool = False) -> Observations:
    """Validate ``(m_obs, mask)`` and return the observed entries.

    Args:
        m_obs: ``(m, n)`` real matrix; only the entries where ``mask`` is true are read
            (unobserved entries may hold anything, NaN included).
        mask: ``(m, n)`` boolean (or 0/1) tensor of observed positions.
        allow_empty_lines: if False (default) a row or column with no observed entry is an
            error: no method can infer it from the data (the perturbed surrogate would set it
            to zero, the plain problem leaves it arbitrary). If True such lines are accepted.

    Returns:
        :class:`Observations` (floating values kept in the input's dtype; integers -> float64).

    Raises:
        ValueError: wrong dimensions, shape mismatch, a non-0/1 mask, no observed entry,
            a non-finite observed value, or (unless allowed) an empty row/column.
    """
    if not isinstance(m_obs, Tensor):
        m_obs = torch.as_tensor(m_obs)
    if not isinstance(mask, Tensor):
        mask = torch.as_tensor(mask)
    if m_obs.ndim != 2:
        raise ValueError(f"the observed matrix must be 2-D, got shape {tuple(m_obs.shape)}")
    if mask.shape != m_obs.shape:
        raise ValueError(
            f"mask shape {tuple(mask.shape)} does not match the matrix shape {tuple(m_obs.shape)}"
        )
    if mask.dtype != torch.bool:
        if not bool(((mask == 0) | (mask == 1)).all()):
            raise ValueError("mask must be boolean or hold only 0 and 1")
        mask = mask != 0
    if m_obs.is_complex():
        raise ValueError("complex matrices are not supported")
    if not m_obs.is_floating_point():
        m_obs = m_obs.to(torch.float64)
    rows, cols = mask.nonzero(as_tuple=True)
    if rows.numel() == 0:
        raise ValueError("the mask observes no entry")
    values = m_obs[rows, cols]
    bad = ~torch.isfinite(values)
    if bool(bad.any()):
        t = int(bad.nonzero()[0, 0])
        raise ValueError(
            f"observed entry ({int(rows[t])}, {int(cols[t])}) is {float(values[t])}: observed "
            "values must be finite (mark missing entries False in the mask instead)"
        )
    m, n = m_obs.shape
    if not allow_empty_lines:
        empty_r, empty_c = empty_lines(rows, cols, (m, n))
        if empty_r or empty_c:
            raise ValueError(
                f"rows {empty_r[:10]} and columns {empty_c[:10]} have no observed entry; "
                "they cannot be completed from the data (pass allow_empty_lines=True to accept "
                "them: the perturbed surrogate then fills them with zeros)"
            )
    return Observations(rows, cols, values, (int(m), int(n)))


def empty_lines(rows: Tensor, cols: Tensor, shape: tuple[int, int]) -> tuple[list[int], list[int]]:
    """Indices of the rows and of the columns holding no observed entry."""
    cr = torch.bincount(rows, minlength=shape[0])
    cc = torch.bincount(cols, minlength=shape[1])
    return (cr == 0).nonzero().flatten().tolist(), (cc == 0).nonzero().flatten().tolist()


def random_mask(
    shape: tuple[int, int], p: float, generator: torch.Generator, *, min_per_line: int = 1
) -> Tensor:
    """A Bernoulli(``p``) mask, resampled until every row and column has ``min_per_line`` entries.

    Each entry is observed independently with probability ``p`` (the paper's sampling
    model); conditioning on non-empty lines only removes trivially impossible instances.
    """
    if not 0 < p <= 1:
        raise ValueError(f"p must be in (0, 1], got {p!r}")
    for _ in range(1000):
        mask = torch.rand(shape, generator=generator, dtype=torch.float64) < p
        if int(mask.sum(1).min()) >= min_per_line and int(mask.sum(0).min()) >= min_per_line:
            return mask
    raise ValueError(f"p = {p} too small to observe {min_per_line} entries in every line")


def low_rank_matrix(
    m: int,
    n: int,
    r: int,
    generator: torch.Generator,
    *,
    coherent: bool = False,
    dtype: torch.dtype = torch.float64,
) -> Tensor:
    r"""A random rank-``r`` matrix ``U V^T`` normalised to :math:`\|M\|_F^2 = mn`.

    ``coherent=False``: Gaussian factors (incoherent with high probability).
    ``coherent=True``: rows and columns scaled by a heavy-tailed (log-normal, :math:`\sigma=1.5`)
    weight, so a few rows/columns carry most of the energy (spiky singular vectors).
    """
    u = torch.randn(m, r, generator=generator, dtype=dtype)
    v = torch.randn(n, r, generator=generator, dtype=dtype)
    if coherent:
        u = u * torch.exp(1.5 * torch.randn(m, 1, generator=generator, dtype=dtype))
        v = v * torch.exp(1.5 * torch.randn(n, 1, generator=generator, dtype=dtype))
    mat = u @ v.T
    return mat * math.sqrt(m * n) / torch.linalg.norm(mat)
