r"""Operations on the observed set Ω with its pattern fixed once (NumPy/SciPy, CPU).

The solvers' inner loops need three things on Ω, every iteration: the entries
:math:`(LR^\top)_{ij}` at the observed positions (gather the factor rows, then row-wise dot
products), and the products :math:`S R` and :math:`S^\top L` for a sparse S with a new value
on each observed position. :class:`OmegaOps` builds the CSR structure of Ω once (only its
values change) and keeps the |Ω|-sized work arrays in buffers allocated once: arrays of
this size, allocated fresh, cost page faults on every call, and these loops are
memory-bound when |Ω| is large.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from .problem import Observations

__all__ = ["OmegaOps", "dot"]


def dot(a: np.ndarray, b: np.ndarray) -> float:
    """Σ a⊙b for contiguous arrays. einsum, not BLAS: OpenBLAS threads ddot above 10⁴
    entries, and on a loaded machine waking its threads cost more than the sum itself
    (measured: 5-25x slower solver iterations at 400 x 64)."""
    return float(np.einsum("i,i->", a.ravel(), b.ravel()))


class OmegaOps:
    """Gathers, entries and sparse products on the observed set of ``obs``.

    Args:
        obs: observed entries (CPU tensors); ``rows`` sorted row-major and unique, as
            :func:`~eps_completion.problem.observe` returns them.
    """

    def __init__(self, obs: Observations):
        m, n = obs.shape
        self.rows, self.cols = obs.rows.numpy(), obs.cols.numpy()
        self.b = obs.values.numpy()
        self.dtype = self.b.dtype
        # rows sorted row-major and unique: (cols, indptr) is a canonical CSR structure whose
        # data array lines up with b
        indptr = np.zeros(m + 1, dtype=np.int64)
        np.cumsum(np.bincount(self.rows, minlength=m), out=indptr[1:])
        self.s = sp.csr_matrix((self.b.copy(), self.cols, indptr), shape=(m, n))
        self.st = self.s.T  # CSC view sharing the data array
        if not np.shares_memory(self.s.data, self.st.data):  # pragma: no cover - scipy detail
            raise RuntimeError("scipy's transpose copied the CSR data")
        self._bufs: dict[tuple[str, int], np.ndarray] = {}

    def buffer(self, name: str, k: int = 0) -> np.ndarray:
        """The work array ``name``: |Ω| x k (or length |Ω| for k = 0), allocated on first use."""
        key = (name, k)
        if key not in self._bufs:
            shape = (self.b.shape[0], k) if k else (self.b.shape[0],)
            self._bufs[key] = np.empty(shape, self.dtype)
        return self._bufs[key]

    def rows_of(self, L: np.ndarray, slot: str) -> np.ndarray:
        """``L[rows]`` into the buffer ``slot``."""
        return np.take(L, self.rows, axis=0, out=self.buffer(slot, L.shape[1]))

    def cols_of(self, R: np.ndarray, slot: str) -> np.ndarray:
        """``R[cols]`` into the buffer ``slot``."""
        return np.take(R, self.cols, axis=0, out=self.buffer(slot, R.shape[1]))

    def rowdot(self, a: np.ndarray, b: np.ndarray, slot: str) -> np.ndarray:
        """Row-wise dot products of two gathered blocks into the vector buffer ``slot``."""
        return np.einsum("ij,ij->i", a, b, out=self.buffer(slot))

    def entries(self, L: np.ndarray, R: np.ndarray, slot: str) -> np.ndarray:
        """:math:`(LR^\\top)_{ij}` on Ω into the vector buffer ``slot``."""
        lo = self.rows_of(L, "_l")
        ro = self.cols_of(R, "_r")
        return self.rowdot(lo, ro, slot)

    def set_values(self, vals: np.ndarray) -> None:
        """Set the values of S on Ω (the next :meth:`times`/:meth:`times_t` use them)."""
        self.s.data[:] = vals

    @property
    def values(self) -> np.ndarray:
        """S's values on Ω, writable in place."""
        return self.s.data

    def times(self, right: np.ndarray) -> np.ndarray:
        """``S @ right`` (m x c)."""
        return self.s @ right

    def times_t(self, left: np.ndarray) -> np.ndarray:
        """``S^T @ left`` (n x c)."""
        return self.st @ left
