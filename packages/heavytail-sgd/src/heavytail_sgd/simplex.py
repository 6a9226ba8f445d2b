r"""The Euclidean projection onto the probability simplex, and the simplex as a mirror domain.

:math:`\Pi_\Delta(y) = \operatorname{argmin}_{z \in \Delta} \|z - y\|_2` with
:math:`\Delta = \{z \ge 0, \sum_i z_i = 1\}`. The KKT conditions give
:math:`z_i = \max(y_i - \tau, 0)` for the one :math:`\tau` with :math:`\sum_i z_i = 1`. Sort
:math:`y` decreasingly (:math:`u_1 \ge \dots \ge u_d`); the support is the first :math:`k`
entries, :math:`k = \max\{j : u_j - (\sum_{i \le j} u_i - 1)/j > 0\}`, and
:math:`\tau = (\sum_{i \le k} u_i - 1)/k`. :math:`O(d \log d)` per vector, batched over the
leading axes. With :class:`Simplex` as the domain of ``shared_core.mirror.Euclidean``, the
package's ``SMD`` is projected SGD on the simplex.

Example:
    >>> import torch
    >>> project_simplex(torch.tensor([2.0, 0.0, 0.0]))
    tensor([1., 0., 0.])
    >>> project_simplex(torch.tensor([0.5, 0.5, 0.5]))
    tensor([0.3333, 0.3333, 0.3333])
"""

from __future__ import annotations

import torch
from torch import Tensor

from shared_core.mirror import Domain

__all__ = ["Simplex", "project_simplex"]


def project_simplex(y: Tensor) -> Tensor:
    """Euclidean projection of every vector (last axis) onto the probability simplex.

    Args:
        y: finite values, shape ``(..., d)`` with ``d >= 1``.

    Returns:
        The projections, shaped and typed like ``y``.
    """
    if not isinstance(y, Tensor) or not y.is_floating_point() or y.ndim == 0 or y.shape[-1] < 1:
        raise ValueError(f"y must be a floating tensor with a non-empty last axis, got {y!r:.80}")
    if not bool(torch.isfinite(y).all()):
        raise ValueError("y must be finite to project onto the simplex")
    u, _ = torch.sort(y, dim=-1, descending=True)
    css = torch.cumsum(u, dim=-1) - 1
    j = torch.arange(1, y.shape[-1] + 1, device=y.device, dtype=y.dtype)
    # u_j - css_j / j is positive for j up to k and nonpositive after (it falls in j).
    k = ((u - css / j) > 0).sum(-1, keepdim=True)
    tau = torch.gather(css, -1, k - 1) / k.to(y.dtype)
    return (y - tau).clamp(min=0)


class Simplex(Domain):
    r"""The probability simplex :math:`\{x \ge 0, \sum_i x_i = 1\}` over the last axis.

    Example:
        >>> import torch
        >>> from shared_core.mirror import Euclidean
        >>> Euclidean(Simplex()).step(torch.tensor([0.5, 0.5]), torch.tensor([1.0, 0.0]), lr=1.0)
        tensor([0., 1.])
    """

    def __repr__(self) -> str:
        return "Simplex()"

    def project(self, y: Tensor) -> Tensor:
        return project_simplex(y)

    def contains(self, x: Tensor, tol: float | None = None) -> Tensor:
        t = 64 * torch.finfo(x.dtype).eps * max(1, x.shape[-1]) if tol is None else float(tol)
        return ((x >= -t).all(-1)) & ((x.sum(-1) - 1).abs() <= t)
