r"""Bounds on :math:`\lambda_{\min}(\mathrm{NTK})` for MLPs of any depth, at init and along
training (derived in ``docs/deep_bounds.md``).

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
:func:`deep_gram_infinite_width` gives the width-only prediction (asymptotic).

:func:`deep_unconditional_init_bound` removes the conditioning: a Chernoff floor on every hidden
layer's Gram :math:`C_l = H_lH_l^\top/m`, carried to the next layer's mean by the Stein floor
:math:`\lambda_{\min}(G(C)) \ge c\,\nu(s^2, c)` (:func:`stein_contraction`, any
:math:`c \le \lambda_{\min}(C)`), with a union bound over the layers; and
:func:`deep_stability_failure_bound` is the change-of-measure stability bound along training
at any depth.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import torch
from torch import Tensor

from .bounds import (
    bound_applies,
    chernoff_rate,
    init_failure_probability,
    init_lambda_min_bound,
    last_layer_gram,
)
from .kernels import nngp_and_derivative
from .models import MLP, Activation, get_activation

__all__ = [
    "deep_gram_infinite_width",
    "deep_init_failure_probability",
    "deep_init_lambda_min_bound",
    "deep_stability_failure_bound",
    "deep_unconditional_init_bound",
    "infinite_width_floor",
    "last_hidden_inputs",
    "stein_contraction",
]


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


# --------------------------------------------------------------------------------------------
# The unconditional bound: propagate a floor on lambda_min of every hidden layer's Gram.


#: activations whose derivative is symmetric and non-increasing in |u| (what the Stein floor
#: needs to take its worst case at the largest variance); all bounded ones of the registry
_UNIMODAL_DERIV = frozenset({"tanh", "erf", "sigmoid"})


def stein_contraction(
    activation: str | Activation, variance: float, floor: float, order: int = 128
) -> float:
    r""":math:`\nu(v, c) = E_{a \sim N(0, v-c)}\big(E_{z \sim N(0, c)}\,\sigma'(a + z)\big)^2`.

    The factor of the Stein floor :math:`\lambda_{\min}(G(C)) \ge c\,\nu(\max_i C_{ii}, c)`
    for any :math:`0 < c \le \lambda_{\min}(C)` (``docs/deep_bounds.md``): it lies between
    :math:`(E\sigma'(\sqrt v Z))^2` (:math:`c = v`) and :math:`E\sigma'(\sqrt v Z)^2`
    (:math:`c \to 0`). Tensor Gauss-Hermite rule of ``order`` nodes per dimension.

    Example:
        >>> round(stein_contraction("erf", 1.0, 1.0), 10) == round(4 / 3.141592653589793 / 3, 10)
        True
    """
    act = get_activation(activation)
    v, c = float(variance), float(floor)
    if not (0.0 < c <= v) or not math.isfinite(v):
        raise ValueError(
            f"need 0 < floor <= variance < inf, got floor={floor!r}, variance={variance!r}"
        )
    nodes, weights = np.polynomial.hermite_e.hermegauss(order)
    z = torch.as_tensor(nodes, dtype=torch.float64)
    w = torch.as_tensor(weights / math.sqrt(2.0 * math.pi), dtype=torch.float64)
    a = math.sqrt(v - c) * z
    inner = act.deriv(a[:, None] + math.sqrt(c) * z[None, :]) @ w  # E_z sigma'(a + z)
    return float((inner**2 * w).sum())


def _check_depth(depth: object) -> int:
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 2:
        raise ValueError(f"depth must be an int >= 2, got {depth!r}")
    return depth


def _layer_chain(
    x: Tensor,
    width: int,
    depth: int,
    act: Activation,
    levels: list[float] | None,
    delta: float | None,
) -> dict[str, object]:
    """Walk the hidden layers: either at Chernoff levels ``levels`` (one per hidden layer,
    the floor solved from each) or at a common relative deviation ``delta`` (the failure
    probability of each layer computed). Returns the floors and per-layer probabilities."""
    n = x.shape[0]
    s = act.sup_abs
    gamma = float(torch.linalg.eigvalsh(last_layer_gram(x, act))[0])  # exact for layer 1
    gammas, floors, probs = [], [], []
    for layer in range(depth - 1):
        gammas.append(gamma)
        if gamma <= 0:
            floors.append(0.0)
            probs.append(1.0)
            break
        if levels is not None:
            c = init_lambda_min_bound(width, n, gamma, s, levels[layer]) / width
            probs.append(levels[layer])
        else:
            c = (1.0 - delta) * gamma
            probs.append(init_failure_probability(width, n, gamma, s, delta))
        floors.append(c)
        if c <= 0:
            break
        if layer < depth - 2:  # the next layer's mean Gram is G(C_l), C_l above c
            gamma = c * stein_contraction(act, s * s, min(c, s * s))
    return {"gammas": gammas, "floors": floors, "probs": probs}


def deep_unconditional_init_bound(
    x: Tensor,
    width: int,
    depth: int,
    failure_prob: float,
    activation: str | Activation = "tanh",
    parameterization: str = "standard",
) -> dict[str, object]:
    r"""An unconditional finite-width bound :math:`\kappa`:
    :math:`P(\lambda_{\min}(K_0) \le \kappa) \le` ``failure_prob`` over the whole init.

    Every hidden layer ``l`` has Gram :math:`C_l = H_lH_l^\top/m`; given the layer below it is
    an average of :math:`m` i.i.d. PSD terms with mean :math:`G(C_{l-1})`. Layer 1's mean is
    the data Gram :math:`G(xx^\top/d)`, exact; above, the Stein floor
    :math:`\lambda_{\min}(G(C)) \ge c\,\nu(s^2, c)` turns the previous layer's Chernoff floor
    :math:`c` into the next mean's floor. Each of the ``depth - 1`` hidden layers gets the
    level ``failure_prob / (depth - 1)``; the union bound gives the total. The output layer's
    part of the NTK is :math:`m C_{L-1}` (standard; :math:`C_{L-1}` for NTK
    parameterisation), so :math:`\kappa = m c_{L-1}`. Derivation: ``docs/deep_bounds.md``.

    Returns:
        ``{"kappa", "floors", "gammas", "levels", "infinite_width"}``: the bound (0 when some
        layer is too narrow for its level), each hidden layer's Gram floor :math:`c_l` and
        mean floor :math:`\gamma_l`, the levels, and the bound's limit
        :math:`\lim_m \kappa/m` (the chain with every :math:`\delta_l = 0`).

    Example:
        >>> x = torch.randn(4, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
        >>> b = deep_unconditional_init_bound(x, 20_000, 3, 0.1)
        >>> 0 < b["kappa"] / 20_000 < b["infinite_width"]
        True
    """
    m = _pos_width(width)
    depth = _check_depth(depth)
    p = float(failure_prob)
    if not 0.0 < p < 1.0:
        raise ValueError(f"failure_prob must lie in (0, 1), got {failure_prob!r}")
    if parameterization not in ("standard", "ntk"):
        raise ValueError(f"parameterization must be 'standard' or 'ntk', got {parameterization!r}")
    x = _check_x(x)
    act = _bounded_activation(activation)
    levels = [p / (depth - 1)] * (depth - 1)
    chain = _layer_chain(x, m, depth, act, levels, None)
    floors = chain["floors"]
    ok = len(floors) == depth - 1 and floors[-1] > 0
    kappa = floors[-1] * (m if parameterization == "standard" else 1.0) if ok else 0.0
    return {
        "kappa": kappa,
        "floors": floors,
        "gammas": chain["gammas"],
        "levels": levels,
        "infinite_width": infinite_width_floor(x, depth, act),
    }


def infinite_width_floor(x: Tensor, depth: int, activation: str | Activation = "tanh") -> float:
    r"""The limit of :func:`deep_unconditional_init_bound`'s :math:`\kappa/m` as the width
    grows: the Stein chain :math:`\gamma_{l+1} = \gamma_l\,\nu(s^2, \gamma_l)` from the data
    Gram's :math:`\gamma_1`, ``depth - 2`` times. At most :math:`\lambda_{\min}(\Sigma^L)`.

    Example:
        >>> x = torch.randn(4, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
        >>> lim = float(torch.linalg.eigvalsh(deep_gram_infinite_width(x, 3, "tanh"))[0])
        >>> 0 < infinite_width_floor(x, 3) <= lim
        True
    """
    depth = _check_depth(depth)
    act = _bounded_activation(activation)
    x = _check_x(x)
    s2 = act.sup_abs**2
    gamma = float(torch.linalg.eigvalsh(last_layer_gram(x, act))[0])
    for _ in range(depth - 2):
        if gamma <= 0:
            return 0.0
        gamma *= stein_contraction(act, s2, min(gamma, s2))
    return max(gamma, 0.0)


def deep_init_failure_probability(
    x: Tensor, width: int, depth: int, delta: float, activation: str | Activation = "tanh"
) -> dict[str, float]:
    r"""The other way round: at a common relative deviation :math:`\delta` per layer, the
    threshold :math:`\kappa_\delta = m c_{L-1}` (:math:`c_l = (1-\delta)\gamma_l`) and a bound
    on :math:`P(\lambda_{\min}(K_0) \le \kappa_\delta)`:
    :math:`\sum_l n\,e^{-h(\delta)m\gamma_l/(ns^2)}` and its logarithm (kept finite when the
    probability underflows). Standard parameterisation.

    Example:
        >>> x = torch.randn(4, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
        >>> r = deep_init_failure_probability(x, 10**6, 3, 0.5)
        >>> r["log_prob"] < -100 and r["kappa"] > 0
        True
    """
    m = _pos_width(width)
    depth = _check_depth(depth)
    d = float(delta)
    if not 0.0 < d < 1.0:
        raise ValueError(f"delta must lie in (0, 1), got {delta!r}")
    x = _check_x(x)
    act = _bounded_activation(activation)
    chain = _layer_chain(x, m, depth, act, None, d)
    n, s2 = x.shape[0], act.sup_abs**2
    gammas = chain["gammas"]
    if len(gammas) < depth - 1 or min(gammas) <= 0:
        return {"kappa": 0.0, "prob": 1.0, "log_prob": 0.0}
    h = chernoff_rate(d)
    logs = torch.tensor([math.log(n) - h * m * g / (n * s2) for g in gammas], dtype=torch.float64)
    log_prob = min(0.0, float(torch.logsumexp(logs, 0)))
    return {"kappa": m * chain["floors"][-1], "prob": math.exp(log_prob), "log_prob": log_prob}


def deep_stability_failure_bound(
    x: Tensor,
    y: Tensor,
    width: int,
    depth: int,
    temperature: float,
    delta: float = 0.5,
    activation: str | Activation = "tanh",
) -> dict[str, float]:
    r"""Step 2 of the README (the second law plus a change of measure) at any depth: a bound,
    uniform in time, on :math:`P(\lambda_{\min}(K_t) \le \kappa_\delta)` under prior-matched
    CLD started at the init (standard parameterisation, decays :math:`T\,\mathrm{fan\_in}`):

    .. math::

        \frac{\bar L/T + \log 2}{\log(1/P_0) - \bar L/T},\qquad
        \bar L = \tfrac12(ns^2 + |y|^2) \ge E_{\pi_0}L,

    with :math:`P_0` and :math:`\kappa_\delta` from :func:`deep_init_failure_probability`
    (:math:`E f(x_i)^2 = E\,C_{L-1,ii} \le s^2`). 1 when the denominator is not positive.

    Example:
        >>> x = torch.randn(4, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
        >>> r = deep_stability_failure_bound(x, torch.ones(4), 10**7, 3, 0.1)
        >>> 0 < r["bound"] < 0.1
        True
    """
    temp = float(temperature)
    if not temp > 0:
        raise ValueError(f"temperature must be > 0, got {temperature!r}")
    x = _check_x(x)
    if y.shape != (x.shape[0],):
        raise ValueError(f"y must have shape ({x.shape[0]},), got {tuple(y.shape)}")
    act = _bounded_activation(activation)
    r = deep_init_failure_probability(x, width, depth, delta, act)
    lbar = 0.5 * (x.shape[0] * act.sup_abs**2 + float((y.to(torch.float64) ** 2).sum()))
    num = lbar / temp + math.log(2.0)
    den = -r["log_prob"] - lbar / temp
    bound = 1.0 if den <= 0 else min(1.0, num / den)
    return {"bound": bound, "kappa": r["kappa"], "init_loss_bound": lbar}


def _pos_width(width: object) -> int:
    if isinstance(width, bool) or not isinstance(width, int) or width < 1:
        raise ValueError(f"width must be a positive int, got {width!r}")
    return width


def _check_x(x: Tensor) -> Tensor:
    if x.ndim != 2:
        raise ValueError(f"x must have shape (n, d), got {tuple(x.shape)}")
    return x.to(torch.float64)


def _bounded_activation(activation: str | Activation) -> Activation:
    """The unconditional chain needs sup|sigma| < inf (Chernoff) and, for the Stein floor's
    worst case, sigma' symmetric and non-increasing in |u|: unbounded ones raise."""
    act = get_activation(activation)
    bound_applies(act)
    if not math.isfinite(act.sup_abs):
        raise ValueError(f"activation {act.name!r} is unbounded: no unconditional bound here")
    if act.name not in _UNIMODAL_DERIV:
        warnings.warn(
            f"activation {act.name!r}: the Stein floor assumes sigma' symmetric and "
            "non-increasing in |u| (checked for tanh, erf, sigmoid only)",
            UserWarning,
            stacklevel=3,
        )
    return act
