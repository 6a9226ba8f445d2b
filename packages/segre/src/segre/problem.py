r"""The least-squares recovery problem on the Segre manifold and its first/second-order pieces.

.. math:: \min_{X \in \mathrm{Seg}} f(X) = \tfrac12 \|\mathcal{A}(X) - y\|^2 .

At :math:`X = \lambda \otimes_k u_k` with residual :math:`r = \mathcal{A}(X) - y`:

- Euclidean gradient :math:`\nabla f = \mathcal{A}^*(r)`; its Riemannian gradient is the
  tangent projection, which needs only :math:`g_k = \mathcal{A}^*(r)\times_{j\ne k}u_j =
  M_k^\top r`: :math:`\mu = \langle g_1, u_1\rangle`, :math:`w_k = g_k - \langle g_k,
  u_k\rangle u_k`.
- Gauss-Newton: linearise :math:`\mathcal{A}(X + \xi)` over the tangent space (exact, since
  :math:`\mathcal{A}` is linear and :math:`X \in T_X`): :math:`\min_{\xi\in T_X}
  \|\mathcal{A}(\xi) + r\|^2`. In orthonormal tangent coordinates
  :math:`(\mu, z_1, ..., z_d)` with :math:`w_k = B_k z_k` (:math:`B_k` an orthonormal basis
  of :math:`u_k^\perp`) the Jacobian is :math:`J = [p, M_1 B_1, \dots, M_d B_d]`, an
  ``m x dim`` matrix; the GN operator is :math:`J^\top J = P_T\mathcal{A}^*\mathcal{A}P_T`.
"""

from __future__ import annotations

import warnings

import torch
from torch import Tensor

from shared_core.manifolds import Segre, SegrePoint, SegreTangent

from .operators import MeasurementOperator
from .tensors import degrees_of_freedom

__all__ = ["RecoveryProblem", "UnderdeterminedWarning", "check_point", "orthonormal_complement"]


class UnderdeterminedWarning(UserWarning):
    """Fewer measurements than the manifold's degrees of freedom: recovery is not unique."""


def orthonormal_complement(u: Tensor) -> Tensor:
    """An ``n x (n-1)`` orthonormal basis of the complement of the unit vector ``u``."""
    n = u.shape[0]
    # [u, I] has rank n; its QR's first column is +-u and the other n - 1 span the complement.
    q = torch.linalg.qr(
        torch.cat([u[:, None], torch.eye(n, dtype=u.dtype, device=u.device)], dim=1),
        mode="reduced",
    )[0]
    return q[:, 1:n]


def check_point(man: Segre, x) -> SegrePoint:
    """``x`` as a :class:`SegrePoint` of ``man`` (unbatched); a clear ``ValueError`` otherwise,
    in particular for the zero tensor (scale 0)."""
    if not isinstance(x, tuple) or len(x) != 2:
        raise ValueError(f"expected a SegrePoint (scale, factors), got {type(x).__name__}")
    x = SegrePoint(x[0], tuple(x[1]))
    if x.scale.shape != (1,):
        raise ValueError(
            f"expected an unbatched point with scale of shape (1,), got {x.scale.shape}"
        )
    man.check_point(x, atol=1e-6 if x.scale.dtype == torch.float64 else 1e-4)
    return x


class RecoveryProblem:
    r"""``f(X) = 0.5 ||A(X) - y||^2`` over rank-one tensors, with gradient and Gauss-Newton pieces.

    Args:
        op: the measurement operator.
        y: measurements, shape ``(m,)``, finite.

    Raises:
        ValueError: non-finite or wrongly shaped ``y``.

    Warns:
        UnderdeterminedWarning: when ``m`` is below the degrees of freedom
            :math:`1 + \sum_k (n_k - 1)` (the count is in the message).
    """

    def __init__(self, op: MeasurementOperator, y: Tensor):
        if not isinstance(op, MeasurementOperator):
            raise ValueError(f"op must be a MeasurementOperator, got {type(op).__name__}")
        y = torch.as_tensor(y)
        m = op.num_measurements
        if y.shape != (m,):
            raise ValueError(
                f"y must have shape ({m},) (one value per measurement), got {tuple(y.shape)}"
            )
        if not y.is_floating_point():
            y = y.to(op.dtype)
        bad = (~torch.isfinite(y)).sum()
        if int(bad):
            raise ValueError(f"y contains {int(bad)} non-finite value(s) (NaN or inf) out of {m}")
        self.op = op
        self.y = y
        self.manifold = Segre(op.dims)
        self.dof = degrees_of_freedom(op.dims)
        if m < self.dof:
            warnings.warn(
                f"{m} measurements < {self.dof} degrees of freedom of rank-one tensors of shape "
                f"{op.dims}: the rank-one tensor is not identifiable",
                UnderdeterminedWarning,
                stacklevel=2,
            )

    @property
    def dims(self) -> tuple[int, ...]:
        return self.op.dims

    def residual(self, x: SegrePoint) -> Tensor:
        """``A(X) - y``."""
        return self.op.forward(x.scale, x.factors) - self.y

    def loss(self, x: SegrePoint) -> float:
        """``0.5 ||A(X) - y||^2``."""
        r = self.residual(x)
        return 0.5 * float(r @ r)

    def rgrad(self, x: SegrePoint, r: Tensor | None = None) -> SegreTangent:
        """The Riemannian gradient ``P_T A^*(A(X) - y)`` from the adjoint contractions."""
        r = self.residual(x) if r is None else r
        gs = self.op.adjoint_contract(r, x.factors)
        return self.manifold.tangent_from_contractions(x, gs)

    def apply(self, x: SegrePoint, xi: SegreTangent) -> Tensor:
        """``A(xi)`` for a tangent vector at ``x`` (``d + 1`` rank-one terms, no dense tensor)."""
        return self.op.forward_cp(self.manifold.to_cp(x, xi))

    def gn_matvec(self, x: SegrePoint, xi: SegreTangent) -> SegreTangent:
        """The Gauss-Newton operator ``P_T A^* A P_T`` applied to a tangent vector."""
        gs = self.op.adjoint_contract(self.apply(x, xi), x.factors)
        return self.manifold.tangent_from_contractions(x, gs)

    def jacobian(self, x: SegrePoint) -> tuple[Tensor, list[Tensor]]:
        """``(J, bases)``: the ``m x dim`` Jacobian in orthonormal tangent coordinates and the
        bases :math:`B_k` of :math:`u_k^\\perp` that define them."""
        mats = self.op.mode_matrices(x.factors)
        p = mats[0] @ x.factors[0]
        bases = [orthonormal_complement(u) for u in x.factors]
        cols = [p[:, None]] + [mk @ bk for mk, bk in zip(mats, bases, strict=True)]
        return torch.cat(cols, dim=1), bases

    def tangent_from_coords(self, coords: Tensor, bases: list[Tensor]) -> SegreTangent:
        """The tangent vector with orthonormal coordinates ``coords`` (``(mu, z_1, ..., z_d)``)."""
        mu = coords[:1]
        vecs, pos = [], 1
        for b in bases:
            k = b.shape[1]
            vecs.append(b @ coords[pos : pos + k])
            pos += k
        return SegreTangent(mu, tuple(vecs))
