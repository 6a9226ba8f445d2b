r"""The ε-surrogate: matrix completion rewritten as noisy matrix sensing.

Plain completion measures :math:`\mathcal P_\Omega(X)` (the observed entries). Its nullspace
is every matrix supported on the unobserved set :math:`\Omega^c`, which contains rank-one
matrices (a single unobserved entry), so :math:`\mathcal P_\Omega` has no restricted isometry
property (RIP) for any rank. The surrogate adds an ε-level perturbation acting **only on that
nullspace**:

.. math::

    \mathcal A_\varepsilon(X) = \mathcal P_\Omega(X) + \varepsilon\,\Xi \odot
    \mathcal P_{\Omega^c}(X),
    \qquad b = \mathcal P_\Omega(M^\star) \ (\text{zero on } \Omega^c),

with weights :math:`\xi_{ij} > 0` on :math:`\Omega^c` (all ones for ``weights="uniform"``, or
i.i.d. uniform on :math:`[1-s, 1+s]` for ``weights="random"``). On :math:`\Omega` the operator
and the data are those of the plain problem (the observed entries are untouched); the
perturbation is invisible to every matrix supported on :math:`\Omega`. The unknown values
:math:`M^\star_{\Omega^c}` are measured as zero, so
:math:`b = \mathcal A_\varepsilon(M^\star) - w` with the noise
:math:`w = \varepsilon\,\Xi\odot\mathcal P_{\Omega^c}(M^\star)`, :math:`\|w\| \le
\varepsilon\,\xi_{\max}\|M^\star\|_F`: a noisy matrix-sensing problem at noise level ε.

RIP: :math:`\|\mathcal A_\varepsilon(X)\|^2 = \sum_{ij} w_{ij}^2 X_{ij}^2` with
:math:`w_{ij} \in \{1\}\cup\{\varepsilon\xi_{ij}\}`, so for every :math:`X`
:math:`w_{\min}^2\|X\|_F^2 \le \|\mathcal A_\varepsilon X\|^2 \le w_{\max}^2\|X\|_F^2`;
scaled by :math:`c = 2/(w_{\max}^2 + w_{\min}^2)` this is RIP with
:math:`\delta = (w_{\max}^2 - w_{\min}^2)/(w_{\max}^2 + w_{\min}^2)`, for every rank, no
sampling-rate or incoherence condition (uniform weights, ε < 1:
:math:`\delta = (1-\varepsilon^2)/(1+\varepsilon^2)`). Both extremes are attained by single
entries (rank one), so :math:`\delta_r = \delta` for every :math:`r \ge 1` when both
:math:`\Omega` and :math:`\Omega^c` are non-empty.

Example:
    >>> import torch
    >>> from eps_completion.problem import observe
    >>> M = torch.ones(3, 4, dtype=torch.float64)
    >>> mask = torch.rand(3, 4, generator=torch.Generator().manual_seed(1)) < 0.6
    >>> op = EpsSensing(observe(M, mask, allow_empty_lines=True), eps=0.1)
    >>> round(op.rip_constant(), 6)  # (1 - 0.01) / (1 + 0.01)
    0.980198
"""

from __future__ import annotations

import torch
from torch import Tensor

from .problem import Observations, check_eps

__all__ = ["EpsSensing", "rip_from_weights"]


def rip_from_weights(w_min: float, w_max: float) -> tuple[float, float]:
    r"""RIP constant and scale of a diagonal operator with weights in ``[w_min, w_max]``.

    Returns ``(delta, c)`` with :math:`c = 2/(w_{\max}^2+w_{\min}^2)` and
    :math:`\delta = (w_{\max}^2-w_{\min}^2)/(w_{\max}^2+w_{\min}^2)`, the smallest δ for which
    :math:`(1-\delta)\|X\|^2 \le c\|\mathcal A X\|^2 \le (1+\delta)\|X\|^2` over all scales c.
    """
    lo, hi = w_min**2, w_max**2
    return (hi - lo) / (hi + lo), 2.0 / (hi + lo)


class EpsSensing:
    """The surrogate sensing operator :math:`\\mathcal A_\\varepsilon` and its data.

    Measurements are a vector of length ``m n``: the ``|Ω|`` observed entries (in the order of
    ``obs.rows, obs.cols``) followed by ``ε ξ_ij X_ij`` over the unobserved entries in row-major
    order. Nothing of size ``(mn) x (mn)`` is ever formed; :meth:`apply` and :meth:`adjoint`
    cost O(mn), the factored objective in :mod:`eps_completion.objective` O(|Ω| k + (m+n) k^2)
    for uniform weights.

    Args:
        obs: the observed entries (:func:`eps_completion.problem.observe`).
        eps: perturbation level ε > 0.
        weights: ``"uniform"`` (ξ = 1, memory O(|Ω|)) or ``"random"`` (ξ_ij i.i.d. uniform on
            ``[1 - spread, 1 + spread]``, stored densely: memory O(mn)).
        spread: half-width of the random weights, in ``[0, 1)``.
        generator: random source for ``"random"`` weights.
    """

    def __init__(
        self,
        obs: Observations,
        eps: float,
        *,
        weights: str = "uniform",
        spread: float = 0.5,
        generator: torch.Generator | None = None,
    ):
        if not isinstance(obs, Observations):
            raise TypeError(f"obs must be Observations (see observe()), got {type(obs).__name__}")
        self.obs = obs
        self.eps = check_eps(eps)
        if weights not in ("uniform", "random"):
            raise ValueError(f"weights must be 'uniform' or 'random', got {weights!r}")
        if not 0 <= spread < 1:
            raise ValueError(f"spread must be in [0, 1), got {spread!r}")
        self.weights = weights
        self.shape = obs.shape
        dtype = obs.values.dtype
        self._unobs = ~obs.dense_mask()
        if weights == "random":
            u = torch.rand(self.shape, generator=generator, dtype=torch.float64)
            xi = (1 - spread + 2 * spread * u).to(dtype)
            self.xi: Tensor | None = torch.where(self._unobs, xi, torch.zeros_like(xi))
        else:
            self.xi = None

    # ------------------------------------------------------------------ operator
    def weight_map(self) -> Tensor:
        """Dense ``m x n`` weights: 1 on Ω, ε ξ_ij on Ω^c."""
        w = torch.ones(self.shape, dtype=self.obs.values.dtype)
        xi = self.xi if self.xi is not None else torch.ones_like(w)
        return torch.where(self._unobs, self.eps * xi, w)

    def apply(self, x: Tensor) -> Tensor:
        """:math:`\\mathcal A_\\varepsilon(X)` as a vector of length ``m n``."""
        self._check_matrix(x)
        observed = x[self.obs.rows, self.obs.cols]
        pert = (self.weight_map() * x)[self._unobs]
        return torch.cat([observed, pert])

    def adjoint(self, y: Tensor) -> Tensor:
        """:math:`\\mathcal A_\\varepsilon^*(y)` as an ``m x n`` matrix."""
        m, n = self.shape
        if y.shape != (m * n,):
            raise ValueError(f"adjoint needs a vector of length {m * n}, got {tuple(y.shape)}")
        k = self.obs.n_observed
        out = torch.zeros(self.shape, dtype=y.dtype)
        out[self.obs.rows, self.obs.cols] = y[:k]
        out[self._unobs] = y[k:]
        return out * self.weight_map().to(y.dtype)

    def measurements(self) -> Tensor:
        """The surrogate data ``b``: observed values, then zeros for the perturbation rows."""
        m, n = self.shape
        zeros = torch.zeros(m * n - self.obs.n_observed, dtype=self.obs.values.dtype)
        return torch.cat([self.obs.values, zeros])

    def noise(self, m_true: Tensor) -> Tensor:
        """The implicit noise :math:`w = \\mathcal A_\\varepsilon(M^\\star) - b` (zero on Ω)."""
        return self.apply(m_true) - self.measurements()

    def loss(self, x: Tensor) -> Tensor:
        """:math:`\\tfrac12\\|\\mathcal A_\\varepsilon(X) - b\\|^2` for a dense ``X``."""
        return 0.5 * (self.apply(x) - self.measurements()).pow(2).sum()

    # ------------------------------------------------------------------ RIP
    def weight_range(self) -> tuple[float, float]:
        """Smallest and largest weight of the operator (over the whole m x n grid)."""
        w = self.weight_map()
        return float(w.min()), float(w.max())

    def rip_constant(self) -> float:
        """The exact RIP constant δ (valid for every rank; see the module docstring)."""
        return rip_from_weights(*self.weight_range())[0]

    def rip_scale(self) -> float:
        """The scale c at which :meth:`rip_constant` is attained."""
        return rip_from_weights(*self.weight_range())[1]

    def _check_matrix(self, x: Tensor) -> None:
        if not isinstance(x, Tensor) or x.shape != self.shape:
            got = tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__
            raise ValueError(f"expected an {self.shape} matrix, got {got}")

    def __repr__(self) -> str:
        m, n = self.shape
        return (
            f"EpsSensing({m}x{n}, |Omega|={self.obs.n_observed}, eps={self.eps:g}, "
            f"weights={self.weights!r})"
        )
