r"""A ``torch.optim`` optimizer for rank-one tensor parameters: Riemannian SGD with momentum.

A rank-one tensor parameter is stored as ``d + 1`` plain parameters, the scale ``(1,)`` and the
unit factors ``(n_k,)`` (:func:`rank_one_parameters`); the model uses
:math:`X = \lambda\, u_1\otimes\dots\otimes u_d` however it likes (densely for small sizes, or
through factored contractions). After ``backward`` the factor gradients give the Riemannian
gradient exactly, for any loss that depends on them only through :math:`X`: with
:math:`G = \nabla_X f`, :math:`\partial f/\partial\lambda = \langle G, \otimes_k u_k\rangle =
\mu` and :math:`\partial f/\partial u_k = \lambda\, G\times_{j\ne k}u_j = \lambda g_k`, so

.. math:: \mathrm{grad} f = (\mu,\ w_k = (I - u_k u_k^\top)\,\partial f/\partial u_k / \lambda)

in the tangent coordinates of :class:`shared_core.manifolds.Segre`. One step:
:math:`m \leftarrow \beta\,\mathcal{T}(m) + \mathrm{grad} f`, :math:`X \leftarrow R_X(-\eta m)`,
the momentum transported to the new point by projection. With ``momentum=0`` it is RGD with a
constant step.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch
from torch import Tensor

from shared_core.manifolds import Segre, SegrePoint, SegreTangent

__all__ = ["SegreSGD", "rank_one_parameters"]


def rank_one_parameters(x: SegrePoint) -> list[torch.nn.Parameter]:
    """The ``d + 1`` parameters ``[scale, u_1, ..., u_d]`` of a rank-one point (copies)."""
    return [torch.nn.Parameter(x.scale.detach().clone())] + [
        torch.nn.Parameter(f.detach().clone()) for f in x.factors
    ]


def riemannian_gradient(scale: Tensor, factors, scale_grad: Tensor, factor_grads) -> SegreTangent:
    r"""``(mu, w)`` from the gradients of the factor parameters (see the module docstring)."""
    ws = tuple((g - (g @ u) * u) / scale for g, u in zip(factor_grads, factors, strict=True))
    return SegreTangent(scale_grad.clone(), ws)


class SegreSGD(torch.optim.Optimizer):
    """Riemannian SGD with momentum on the Segre manifold; one rank-one tensor per param group.

    Args:
        params: param groups, each a dict whose ``"params"`` are ``[scale, u_1, ..., u_d]``
            (``scale`` of shape ``(1,)`` and ``> 0``, factors of unit norm, each mode ``>= 2``);
            a plain list of such tensors is one group.
        lr: step size ``> 0``.
        momentum: ``0 <= momentum < 1``.
        retraction: ``"hosvd"`` or ``"factor"`` (see :class:`~shared_core.manifolds.Segre`).

    Example:
        >>> import torch
        >>> from segre import random_rank_one
        >>> g = torch.Generator().manual_seed(0)
        >>> target = random_rank_one((4, 3, 5), generator=g)
        >>> params = rank_one_parameters(random_rank_one((4, 3, 5), generator=g))
        >>> opt = SegreSGD(params, lr=0.3, momentum=0.5)
        >>> T = torch.einsum("a,b,c->abc", *target.factors) * target.scale
        >>> for _ in range(200):
        ...     opt.zero_grad()
        ...     X = params[0] * torch.einsum("a,b,c->abc", *params[1:])
        ...     loss = 0.5 * ((X - T) ** 2).sum()
        ...     loss.backward()
        ...     opt.step()
        >>> bool(loss < 1e-12)
        True
    """

    def __init__(
        self,
        params: Iterable,
        lr: float = 1e-2,
        momentum: float = 0.0,
        retraction: str = "hosvd",
    ):
        if isinstance(lr, bool) or not isinstance(lr, int | float) or not (lr > 0):
            raise ValueError(f"lr must be a number > 0, got {lr!r}")
        if not isinstance(momentum, int | float) or not (0 <= momentum < 1):
            raise ValueError(f"momentum must lie in [0, 1), got {momentum!r}")
        if retraction not in ("hosvd", "factor"):
            raise ValueError(f"unknown retraction {retraction!r}; expected one of hosvd, factor")
        defaults = {"lr": float(lr), "momentum": float(momentum), "retraction": retraction}
        super().__init__(params, defaults)
        for i, group in enumerate(self.param_groups):
            self._check_group(i, group)

    @staticmethod
    def _check_group(i: int, group: dict) -> None:
        ps = group["params"]
        if len(ps) < 3:
            raise ValueError(
                f"param group {i}: expected [scale, u_1, ..., u_d] with d >= 2, got {len(ps)} "
                "tensors"
            )
        scale, facs = ps[0], ps[1:]
        if scale.shape != (1,):
            raise ValueError(
                f"param group {i}: scale must have shape (1,), got {tuple(scale.shape)}"
            )
        dims = []
        for k, f in enumerate(facs):
            if f.ndim != 1 or f.shape[0] < 2:
                raise ValueError(
                    f"param group {i}: factor {k} must be a vector of size >= 2, got shape "
                    f"{tuple(f.shape)}"
                )
            dims.append(int(f.shape[0]))
        man = Segre(tuple(dims), retraction=group.get("retraction", "hosvd"))
        x = SegrePoint(scale.detach(), tuple(f.detach() for f in facs))
        tol = 1e-6 if scale.dtype == torch.float64 else 1e-4
        try:
            man.check_point(x, atol=tol)
        except ValueError as exc:
            raise ValueError(f"param group {i}: not a rank-one point: {exc}") from None
        for key in ("lr", "momentum"):
            v = group[key]
            ok = v > 0 if key == "lr" else 0 <= v < 1
            if not (isinstance(v, int | float) and math.isfinite(v) and ok):
                raise ValueError(f"param group {i}: bad {key} {v!r}")

    @torch.no_grad()
    def step(self, closure=None):
        """One Riemannian step per param group whose parameters all have gradients."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            ps = group["params"]
            if any(p.grad is None for p in ps):
                continue
            scale, facs = ps[0], ps[1:]
            man = Segre(tuple(int(f.shape[0]) for f in facs), retraction=group["retraction"])
            x = SegrePoint(scale.detach().clone(), tuple(f.detach().clone() for f in facs))
            grad = riemannian_gradient(x.scale, x.factors, scale.grad, [f.grad for f in facs])
            state = self.state[scale]
            beta = group["momentum"]
            if beta > 0:
                buf = state.get("momentum_buffer")
                if buf is None:
                    direction = grad
                else:
                    old = SegreTangent(buf, tuple(self.state[f]["momentum_buffer"] for f in facs))
                    direction = SegreTangent(
                        beta * old.scale + grad.scale,
                        tuple(beta * a + b for a, b in zip(old.vecs, grad.vecs, strict=True)),
                    )
            else:
                direction = grad
            lr = group["lr"]
            step = SegreTangent(-lr * direction.scale, tuple(-lr * w for w in direction.vecs))
            y = man.retr(x, step)
            if not bool(torch.isfinite(y.scale).all()) or float(y.scale) <= 0:
                raise FloatingPointError(
                    f"SegreSGD step produced scale {float(y.scale)}: lower lr (the step reached "
                    "the apex of the cone, the zero tensor)"
                )
            if beta > 0:
                moved = man.transp(x, y, direction)
                state["momentum_buffer"] = moved.scale
                for f, w in zip(facs, moved.vecs, strict=True):
                    self.state[f]["momentum_buffer"] = w
            scale.copy_(y.scale)
            for f, u in zip(facs, y.factors, strict=True):
                f.copy_(u)
        return loss
