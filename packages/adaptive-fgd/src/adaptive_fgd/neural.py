r"""A neural representation of the functional gradient: trained tanh units as a feature family.

:class:`NeuralFeatures` is a :class:`~adaptive_fgd.representations.FeatureFamily` whose basis
functions are the hidden units :math:`\varphi_j(x) = \tanh(w_j^\top x + b_j)` of one-hidden-layer
networks. When the adaptive rule asks for more of them, a small network with the missing number
of hidden units (and ``k`` outputs) is **trained with Adam on the current residual**
:math:`g - \hat g` at the fit points (variable projection: at every Adam step the output layer
is the ridge least-squares fit, so the units are trained for the fit they will be used in), and
its hidden units are appended to the list. :func:`~adaptive_fgd.fgd.refine_until` then refits
the output weights over *all* units by ridge least squares, and checks the
relative-error condition on the held-out points, growing the width until it holds or the cap is
reached. So the representation is a network of growing width, fitted to the gradient until
:math:`\|\hat g - g\| \le \delta\|g\|` holds on points it never saw.

Because the units are appended and never changed, sizes are prefixes of one list, and the
iterate stays one output-weight vector over at most ``cap`` units (its evaluation does not grow
with the number of steps), exactly as for the kernel families.

Example:
    >>> import torch
    >>> fam = NeuralFeatures(dim=1, cap=32, seed=0)
    >>> x = torch.linspace(-1, 1, 50, dtype=torch.float64)[:, None]
    >>> fam.grow(8, x, torch.sin(3 * x), torch.Generator().manual_seed(0))
    >>> fam.features(x).shape
    torch.Size([50, 8])
"""

from __future__ import annotations

import math

import torch

from .representations import FeatureFamily

__all__ = ["NeuralFeatures"]


class NeuralFeatures(FeatureFamily):
    r"""Hidden tanh units trained on the residual when the family grows.

    Args:
        dim: input dimension.
        cap: most hidden units.
        scale: initial input weights :math:`w \sim N(0, \text{scale}^2 I)`, biases
            :math:`b \sim U(-\text{scale}, \text{scale})` (inputs are assumed O(1)).
        train_steps: Adam steps per growth (0: untrained random units, a baseline).
        lr: Adam step.
        seed: seed of the initialisation (independent of the rule's generator).
    """

    def __init__(
        self,
        dim: int,
        cap: int,
        *,
        scale: float = 3.0,
        train_steps: int = 300,
        lr: float = 1e-2,
        seed: int = 0,
    ) -> None:
        super().__init__(dim, cap)
        if not (scale > 0 and math.isfinite(scale)):
            raise ValueError(f"scale must be finite and > 0, got {scale!r}")
        if isinstance(train_steps, bool) or not isinstance(train_steps, int) or train_steps < 0:
            raise ValueError(f"train_steps must be a non-negative int, got {train_steps!r}")
        if not (lr > 0 and math.isfinite(lr)):
            raise ValueError(f"lr must be finite and > 0, got {lr!r}")
        self.scale = float(scale)
        self.train_steps = train_steps
        self.lr = float(lr)
        self._gen = torch.Generator().manual_seed(seed)
        self.weights = torch.empty(0, dim, dtype=torch.float64)
        self.biases = torch.empty(0, dtype=torch.float64)

    @property
    def size(self) -> int:
        return self.weights.shape[0]

    def features(self, x: torch.Tensor, m: int | None = None, start: int = 0) -> torch.Tensor:
        m = self._check_range(x, m, start)
        return torch.tanh(x @ self.weights[start:m].T.to(x) + self.biases[start:m].to(x))

    def grow(
        self, m: int, x_fit: torch.Tensor, residual: torch.Tensor, generator: torch.Generator
    ) -> None:
        """Train ``min(m, cap) - size`` new units on ``residual`` ``(n, k)`` and append them."""
        need = min(m, self.cap) - self.size
        if need <= 0:
            return
        self._check_x(x_fit)
        x = x_fit.detach().double()
        r = residual.detach().double()
        if r.ndim == 1:
            r = r[:, None]
        w = self.scale * torch.randn(need, self.dim, generator=self._gen, dtype=torch.float64)
        b = self.scale * (2 * torch.rand(need, generator=self._gen, dtype=torch.float64) - 1)
        if self.train_steps:
            w, b = self._train(x, r, w, b)
        self.weights = torch.cat([self.weights, w])
        self.biases = torch.cat([self.biases, b])

    def _train(self, x, r, w, b):
        # Variable projection: the output layer is eliminated by ridge least squares at every
        # Adam step, so the units are trained for the fit the adaptive rule will make with them.
        # The residual's scale varies by orders of magnitude over a run: fit r / rms(r).
        rms = r.pow(2).mean().sqrt().clamp_min(torch.finfo(torch.float64).tiny)
        target = r / rms
        w = w.clone().requires_grad_(True)
        b = b.clone().requires_grad_(True)
        opt = torch.optim.Adam([w, b], lr=self.lr)
        eye = torch.eye(w.shape[0], dtype=torch.float64)
        with torch.enable_grad():
            for _ in range(self.train_steps):
                opt.zero_grad()
                phi = torch.tanh(x @ w.T + b)
                gram = phi.T @ phi / x.shape[0]
                ridge = 1e-8 * gram.diagonal().mean() + 1e-12
                a = torch.linalg.solve(gram + ridge * eye, phi.T @ target / x.shape[0])
                loss = (phi @ a - target).pow(2).mean()
                loss.backward()
                opt.step()
        return w.detach(), b.detach()
