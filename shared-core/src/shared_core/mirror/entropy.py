r"""Negative entropy on the probability simplex: exponentiated gradient and the KL divergence.

.. math::

    \psi(x) = \textstyle\sum_i x_i \log x_i, \quad \nabla\psi(x) = 1 + \log x, \quad
    \nabla\psi^*(\theta) = e^{\theta - 1}, \quad \psi^*(\theta) = \textstyle\sum_i e^{\theta_i - 1},

    D_\psi(x, y) = \textstyle\sum_i x_i \log(x_i / y_i) - x_i + y_i
    \;=\; \mathrm{KL}(x \,\|\, y) \text{ on the simplex}.

:math:`\psi` and its conjugate are those of the positive orthant; the simplex enters through the
Bregman projection, which for a positive vector is normalisation (minimising the generalised KL
over :math:`\sum_i z_i = 1` gives :math:`\log z_i = \log y_i - \lambda`). The step is therefore
exponentiated gradient :math:`x^+ \propto x\, e^{-\eta g}`, computed as
:math:`\operatorname{softmax}(\log x - \eta g)` so that large :math:`\eta g` cannot overflow.
Zero entries follow :math:`0 \log 0 = 0`: they stay zero under the step.
"""

from __future__ import annotations

from typing import ClassVar

import torch
from torch import Tensor

from ._common import check_lr, check_same_shape, check_vectors, simplex_tol, upcast
from .base import MirrorMap

__all__ = ["NegEntropy"]


class NegEntropy(MirrorMap):
    r"""The negative entropy :math:`\sum_i x_i \log x_i` on the simplex (last axis).

    Args:
        tol: how far a point's sum may be from 1 in :meth:`check` (default: a few ulps of the
            dtype, growing with sqrt(d)).
        validate: check points and projections (nonnegative, finite, on the simplex) and raise
            ``ValueError`` on a bad one. The checks read values back from the device; turn them
            off in a hot loop on a GPU once the inputs are known to be good.

    Example:
        >>> x = torch.tensor([0.5, 0.5, 0.0])
        >>> NegEntropy().step(x, torch.tensor([0.0, 1.0, 5.0]), lr=torch.log(torch.tensor(3.0)))
        tensor([0.7500, 0.2500, 0.0000])
    """

    name: ClassVar[str] = "entropy"

    def __init__(self, tol: float | None = None, validate: bool = True) -> None:
        if tol is not None and not float(tol) >= 0:
            raise ValueError(f"tol must be a number >= 0, got {tol!r}")
        self.tol = None if tol is None else float(tol)
        self.validate = validate

    def __repr__(self) -> str:
        return f"NegEntropy(tol={self.tol}, validate={self.validate})"

    def _nonneg(self, x: Tensor, what: str) -> Tensor:
        x = check_vectors(x, what)
        if self.validate and not bool((x >= 0).all()):
            # `x >= 0` is False for NaN, so NaN points are refused here too.
            raise ValueError(f"{what}: negative entropy needs x >= 0 (no NaN); got min {x.min()}")
        return x

    def check(self, x: Tensor) -> Tensor:
        """Raise unless every vector of ``x`` is on the probability simplex; return ``x``."""
        x = self._nonneg(x, "NegEntropy.check")
        if self.validate:
            tol = simplex_tol(x.dtype, x.shape[-1]) if self.tol is None else self.tol
            err = (x.double().sum(-1) - 1).abs().max()
            if not bool(err <= tol):
                raise ValueError(
                    f"NegEntropy.check: points must lie on the simplex (sum 1 over the last "
                    f"axis); the largest |sum - 1| is {err.item():.3g} > tol {tol:.3g}"
                )
        return x

    def psi(self, x: Tensor) -> Tensor:
        x = self._nonneg(x, "NegEntropy.psi")
        xu = upcast(x)
        return torch.xlogy(xu, xu).sum(-1).to(x.dtype)

    def psi_star(self, theta: Tensor) -> Tensor:
        theta = check_vectors(theta, "NegEntropy.psi_star")
        return torch.exp(upcast(theta) - 1).sum(-1).to(theta.dtype)

    def grad_psi(self, x: Tensor) -> Tensor:
        x = self._nonneg(x, "NegEntropy.grad_psi")
        return (1 + torch.log(upcast(x))).to(x.dtype)

    def grad_psi_star(self, theta: Tensor) -> Tensor:
        theta = check_vectors(theta, "NegEntropy.grad_psi_star")
        return torch.exp(upcast(theta) - 1).to(theta.dtype)

    def bregman(self, x: Tensor, y: Tensor) -> Tensor:
        r"""The generalised KL :math:`\sum_i x_i\log(x_i/y_i) - x_i + y_i` (KL on the simplex).

        Entries with :math:`x_i = 0` contribute :math:`y_i`; :math:`x_i > 0 = y_i` gives ``inf``.
        """
        x = upcast(self._nonneg(x, "NegEntropy.bregman"))
        y_in = self._nonneg(y, "NegEntropy.bregman")
        y = upcast(y_in)
        # xlogy keeps 0 log 0 = 0 on both terms, where log(x/y) would give 0 * nan.
        terms = torch.xlogy(x, x) - torch.xlogy(x, y) - x + y
        return terms.sum(-1).clamp(min=0).to(y_in.dtype)

    def project(self, y: Tensor) -> Tensor:
        """The KL projection of a nonnegative vector onto the simplex: ``y / sum(y)``."""
        y = self._nonneg(y, "NegEntropy.project")
        yu = upcast(y)
        total = yu.sum(-1, keepdim=True)
        if self.validate and not bool((total > 0).all() and torch.isfinite(total).all()):
            raise ValueError(
                "NegEntropy.project needs a finite, nonzero sum in every vector to normalise"
            )
        return (yu / total).to(y.dtype)

    def step(self, x: Tensor, g: Tensor, lr: float) -> Tensor:
        r"""Exponentiated gradient :math:`x^+ = x\,e^{-\eta g} / Z`, stably in log space.

        Args:
            x: a point of the simplex, shape ``(..., d)``.
            g: the gradient, same shape. NaN entries make the whole vector NaN.
            lr: the step size :math:`\eta > 0`.

        Returns:
            The next point, on the simplex, shaped and typed like ``x``.
        """
        x = self.check(x)
        check_same_shape(x, g, "NegEntropy.step")
        eta = check_lr(lr)
        xu = upcast(x)
        logits = torch.log(xu) - eta * g.to(xu.dtype)
        return torch.softmax(logits, dim=-1).to(x.dtype)
