r"""Sampled-target output gradients: the true Fisher's output factor from one extra backward.

The K-FAC output factor :math:`B = \mathbb{E}[g g^\top]` of a layer, built from the gradients
of the user's own loss at the layer output (the *empirical* Fisher), is biased wherever the
model is systematically wrong: a residual that is mostly signal, not noise, points ``B``
along the error instead of along the curvature. Drawing the targets from the model's own
predictive distribution removes the bias: with :math:`\hat y \sim p(\cdot\mid f)` the
gradient of :math:`-\log p(\hat y\mid f)` at the output, :math:`e`, has
:math:`\mathbb{E}[e e^\top] = H` (the loss Hessian at the output for the canonical links
below), so the back-propagated rows :math:`g = J^\top e` give
:math:`\mathbb{E}[g g^\top] = \mathbb{E}[J^\top H J]`, the Gauss-Newton factor.

- ``"cross_entropy"``: :math:`\hat y\sim\mathrm{softmax}(f)`, :math:`e = p - \mathrm{onehot}
  (\hat y)`, :math:`\mathbb{E}[e e^\top] = \mathrm{diag}(p) - p p^\top`.
- ``"mse"``: a Gaussian likelihood, :math:`e = \varepsilon\sim N(0, I)`,
  :math:`\mathbb{E}[ee^\top] = I` (the criterion is invariant to the noise scale).

Example:
    >>> g = torch.Generator().manual_seed(0)
    >>> e = sample_output_gradient(torch.zeros(3, 4), "cross_entropy", g)
    >>> torch.allclose(e.sum(-1), torch.zeros(3))  # p - onehot sums to 0
    True
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["FISHER_LOSSES", "sample_output_gradient"]

FISHER_LOSSES = ("cross_entropy", "mse")


def sample_output_gradient(output: Tensor, loss: str, generator: torch.Generator) -> Tensor:
    """One draw of :math:`e` (module docstring), shaped like ``output``, float32.

    Args:
        output: model output (detached is fine); for ``"cross_entropy"`` logits with the
            classes in the last dimension.
        loss: ``"cross_entropy"`` or ``"mse"``.
        generator: a generator on ``output``'s device.
    """
    if loss not in FISHER_LOSSES:
        raise ValueError(f"loss must be one of {FISHER_LOSSES}, got {loss!r}")
    out = output.detach().to(torch.float32)
    if loss == "mse":
        return torch.randn(out.shape, generator=generator, device=out.device)
    prob = torch.softmax(out.reshape(-1, out.shape[-1]), dim=-1)
    y = torch.multinomial(prob, 1, generator=generator).squeeze(-1)
    e = prob.clone()
    e[torch.arange(len(y), device=y.device), y] -= 1.0
    return e.reshape(out.shape)
