r"""The init bound on :math:`\lambda_{\min}(\mathrm{NTK})` for MLPs of any depth (derived in
``docs/deep_bounds.md``).

For an :class:`~langevin_ntk.models.MLP` with :math:`L \ge 2` weight layers, let
:math:`h(x) \in R^{q}` be the input of the last hidden layer (:math:`x` itself when
:math:`L = 2`), :math:`\phi_j(x) = \sigma(w_j^\top h(x))` its :math:`m` units and :math:`a` the
output weights. The NTK is a sum of PSD per-layer parts, one of them the output layer's
:math:`c^2\Phi\Phi^\top` (:math:`c = 1` standard, :math:`1/\sqrt m` NTK parameterisation), so
:math:`\lambda_{\min}(K) \ge c^2\lambda_{\min}(\Phi\Phi^\top)`. *Conditionally on the layers
below*, the rows :math:`w_j \sim N(0, I/q)` are i.i.d., so :math:`\Phi\Phi^\top =
\sum_j\phi_j\phi_j^\top` is a sum of :math:`m` i.i.d. PSD terms with mean :math:`mG(C)`,
:math:`G(C)_{ik} = E\,\sigma(u_i)\sigma(u_k)`, :math:`u \sim N(0, C)`, :math:`C = HH^\top/q`,
and norms :math:`\le ns^2`. Matrix Chernoff then gives, for every value of the lower layers,

.. math::

    P\big(\lambda_{\min}(K_0) \le (1-\delta)\,c^2 m\,\lambda_{\min}(G(C)) \,\big|\,
    \text{lower layers}\big) \le n\,e^{-h(\delta)m\lambda_{\min}(G(C))/(ns^2)},

the depth-2 bound with the data Gram replaced by the hidden-layer Gram :math:`C`: the bound is
rigorous at every width and depth, computable from the network at hand. As the widths grow,
:math:`C` tends to the infinite-width NNGP kernel :math:`\Sigma^{L-1}(x)`, so
:func:`deep_gram_infinite_width` gives the width-only prediction (asymptotic, not a bound at
finite width: that would need a concentration bound on :math:`C`, not derived here).
"""

from __future__ import annotations

import torch
from torch import Tensor

from .bounds import bound_applies, init_lambda_min_bound, last_layer_gram
from .kernels import nngp_and_derivative
from .models import MLP, Activation, get_activation

__all__ = ["deep_gram_infinite_width", "deep_init_lambda_min_bound", "last_hidden_inputs"]


def last_hidden_inputs(model: MLP, x: Tensor) -> Tensor:
    """The input :math:`h(x)` of the last hidden layer (``x`` itself for depth 2), float64.

    Example:
        >>> net = MLP(3, 5, 3, generator=torch.Generator().manual_seed(0))
        >>> last_hidden_inputs(net, torch.randn(4, 3)).shape
        torch.Size([4, 5])
    """
    if not isinstance(model, MLP) or model.d_out != 1:
        raise ValueError("need a langevin_ntk.models.MLP with d_out == 1")
    if x.ndim != 2:
        raise ValueError(f"x must have shape (n, d), got {tuple(x.shape)}")
    h = x
    with torch.no_grad():
        for i in range(len(model.weights) - 2):
            h = model.act.fn(model._dense(i, h))
    return h.detach().to(torch.float64)


def deep_init_lambda_min_bound(model: MLP, x: Tensor, failure_prob: float) -> dict[str, float]:
    r"""The conditional Chernoff bound :math:`\kappa` on :math:`\lambda_{\min}(K_0)` given the
    network's layers below the last hidden one.

    :math:`P(\lambda_{\min}(K_0) \le \kappa \mid \text{lower layers}) \le` ``failure_prob``
    over the last hidden layer's weights; ``kappa = 0`` when the width is too small for a
    guarantee at that level. Warns (and still computes) for an activation the bound does not
    cover (non-smooth or unbounded).

    Returns:
        ``{"kappa", "lambda_gram", "width"}``: the bound, :math:`\lambda_{\min}(G(C))`, and
        the last hidden width :math:`m`.

    Example:
        >>> net = MLP(4, 2000, 3, "tanh", generator=torch.Generator().manual_seed(0))
        >>> x = torch.randn(3, 4, generator=torch.Generator().manual_seed(1))
        >>> deep_init_lambda_min_bound(net, x, 0.1)["kappa"] > 0
        True
    """
    bound_applies(model.act)
    h = last_hidden_inputs(model, x)
    # the last hidden layer sees h with weights N(0, I/q) in both parameterisations
    gram = last_layer_gram(h, model.act)
    lam = float(torch.linalg.eigvalsh(gram)[0])
    m = model.weights[-1].shape[1]
    kappa = init_lambda_min_bound(m, x.shape[0], lam, model.act.sup_abs, failure_prob)
    if model.parameterization == "ntk":
        kappa /= m  # the output layer's part is Phi Phi^T / m
    return {"kappa": kappa, "lambda_gram": lam, "width": float(m)}


def deep_gram_infinite_width(
    x: Tensor, depth: int, activation: str | Activation, order: int = 48
) -> Tensor:
    r"""The infinite-width limit :math:`G(\Sigma^{L-1})` of the last hidden layer's Gram:
    the NNGP recursion :math:`\Sigma^1 = xx^\top/d`, :math:`\Sigma^{l+1} = E\,\sigma(u)
    \sigma(v)`, applied ``depth - 1`` times (``depth = 2``: :func:`last_layer_gram`).

    Example:
        >>> x = torch.randn(3, 4, dtype=torch.float64)
        >>> from langevin_ntk.bounds import last_layer_gram
        >>> bool(torch.allclose(deep_gram_infinite_width(x, 2, "tanh"), last_layer_gram(x, "tanh")))
        True
    """
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 2:
        raise ValueError(f"depth must be an int >= 2, got {depth!r}")
    if x.ndim != 2:
        raise ValueError(f"x must have shape (n, d), got {tuple(x.shape)}")
    act = get_activation(activation)
    bound_applies(act)
    x = x.to(torch.float64)
    cov = x @ x.mT / x.shape[1]
    for _ in range(depth - 1):
        cov = nngp_and_derivative(cov, act, 0 if act.name == "erf" else order)[0]
    return cov
