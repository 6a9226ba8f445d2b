r"""A radius around the init inside which :math:`\lambda_{\min}(\mathrm{NTK})` keeps half its
init value, for bias-free MLPs of any depth (standard parameterisation; derived in
``docs/deep_bounds.md``).

Weyl's inequality for singular values gives :math:`\sigma_{\min}(J) \ge \sigma_{\min}(J_0) -
\|J - J_0\|`, so :math:`\lambda_{\min}(K) \ge \lambda_{\min}(K_0)/2` whenever
:math:`\|J - J_0\|_F \le (1 - 1/\sqrt2)\sqrt{\lambda_{\min}(K_0)}` (``n`` at most the number
of parameters). :func:`jacobian_change_bound` bounds :math:`\|J(\theta) - J(\theta_0)\|_F`
for every :math:`\theta` with :math:`\|\theta - \theta_0\| \le R` by a forward and a backward
recursion over the layers that uses only :math:`\sup|\sigma|`, :math:`\sup|\sigma'|`,
:math:`\sup|\sigma''|`, the init weights' operator norms and largest column norms, and the
input norms. :func:`stability_radius` is the largest such :math:`R`.

Two sources for the init quantities: :func:`network_init_norms` reads them off a network (a
deterministic statement about that network), :func:`gaussian_init_norms` bounds them with
probability :math:`\ge 1-p` over the Gaussian init, which with the unconditional
:math:`\lambda_{\min}` bound gives :func:`deep_stability_radius`: a radius that is a function
of (data, width, depth, level) only. The radius shrinks with width (about :math:`m^{-1/4}` in
absolute terms while :math:`\|\theta_0\| \sim \sqrt m`): it certifies the lazy neighbourhood,
not the far-from-init regime that the change-of-measure bound addresses.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from .deep_bounds import deep_unconditional_init_bound
from .models import MLP, Activation, get_activation

__all__ = [
    "ACTIVATION_CONSTANTS",
    "InitNorms",
    "deep_stability_radius",
    "gaussian_init_norms",
    "jacobian_change_bound",
    "network_init_norms",
    "stability_radius",
]

#: ``(sup|sigma'|, sup|sigma''|)`` in closed form: tanh'' = -2 tanh sech^2 peaks at
#: tanh^2 = 1/3; erf'' = -(4/sqrt(pi)) u e^{-u^2} at u^2 = 1/2; sigmoid'' = s(1-s)(1-2s) at
#: s = 1/2 -+ 1/(2 sqrt 3). Tested against a grid maximum.
ACTIVATION_CONSTANTS: dict[str, tuple[float, float]] = {
    "tanh": (1.0, 4.0 / (3.0 * math.sqrt(3.0))),
    "erf": (2.0 / math.sqrt(math.pi), 2.0 * math.sqrt(2.0 / math.pi) * math.exp(-0.5)),
    "sigmoid": (0.25, 1.0 / (6.0 * math.sqrt(3.0))),
}

#: the singular-value margin: sigma_min(J) >= sigma_min(J_0)/sqrt(2) <=> lambda_min >= half
_MARGIN = 1.0 - 1.0 / math.sqrt(2.0)


@dataclass(frozen=True)
class InitNorms:
    """The init quantities the recursion needs (standard parameterisation, scalar output).

    Attributes:
        op: :math:`\\|W_l^0\\|_{op}` for :math:`l = 1..L` (the last is :math:`\\|a\\|_2`).
        max_col: the largest column norm of :math:`W_l^0` for :math:`l = 2..L` (the last is
            :math:`\\|a\\|_\\infty`).
        x_norms: :math:`\\|x_i\\|` for every sample.
        width: the hidden width :math:`m`.
    """

    op: tuple[float, ...]
    max_col: tuple[float, ...]
    x_norms: tuple[float, ...]
    width: int

    @property
    def depth(self) -> int:
        return len(self.op)


def _constants(activation: str | Activation) -> tuple[float, float, float]:
    act = get_activation(activation)
    if act.name not in ACTIVATION_CONSTANTS:
        raise ValueError(
            f"activation {act.name!r}: the radius needs bounded sigma, sigma', sigma''; "
            f"choose one of {sorted(ACTIVATION_CONSTANTS)}"
        )
    l1, l2 = ACTIVATION_CONSTANTS[act.name]
    return act.sup_abs, l1, l2


def network_init_norms(model: MLP, x: Tensor) -> InitNorms:
    """:class:`InitNorms` read off ``model`` (its current weights are the :math:`\\theta_0`).

    Example:
        >>> net = MLP(3, 6, 3, generator=torch.Generator().manual_seed(0))
        >>> network_init_norms(net, torch.randn(2, 3)).depth
        3
    """
    if not isinstance(model, MLP) or model.d_out != 1 or model.parameterization != "standard":
        raise ValueError("need a standard-parameterisation langevin_ntk.models.MLP, d_out == 1")
    if x.ndim != 2 or x.shape[1] != model.weights[0].shape[1]:
        raise ValueError(
            f"x must have shape (n, {model.weights[0].shape[1]}), got {tuple(x.shape)}"
        )
    ws = [w.detach().to(torch.float64) for w in model.weights]
    return InitNorms(
        op=tuple(float(torch.linalg.matrix_norm(w, ord=2)) for w in ws),
        max_col=tuple(float(w.norm(dim=0).max()) for w in ws[1:]),
        x_norms=tuple(float(v) for v in x.to(torch.float64).norm(dim=1)),
        width=ws[0].shape[0],
    )


def gaussian_init_norms(x: Tensor, width: int, depth: int, failure_prob: float) -> InitNorms:
    r"""Bounds on the init quantities holding together with probability
    :math:`\ge 1 - p` over :math:`W_l \sim N(0, 1/\mathrm{fan\_in})` entrywise.

    Each of the :math:`2L - 1` events gets :math:`p_e = p/(2L-1)`. Operator norms (Gordon's
    :math:`E\|G\| \le \sqrt r + \sqrt c` and Gaussian concentration of the 1-Lipschitz norm):
    :math:`\|W\| \le (\sqrt r + \sqrt c + t)/\sqrt{\mathrm{fan\_in}}`,
    :math:`t = \sqrt{2\log(1/p_e)}`. Column norms (:math:`\chi` concentration and a union over
    the :math:`m` columns): :math:`(\sqrt m + \sqrt{2\log(m/p_e)})/\sqrt m`; the output
    vector's largest entry: :math:`\sqrt{2\log(2m/p_e)/m}`.

    Example:
        >>> b = gaussian_init_norms(torch.ones(2, 4), 100, 3, 0.1)
        >>> b.op[1] > 2.0 and b.max_col[-1] < 1.0
        True
    """
    m, L = int(width), int(depth)
    if m < 1 or L < 2:
        raise ValueError(f"need width >= 1 and depth >= 2, got {width!r}, {depth!r}")
    p = float(failure_prob)
    if not 0.0 < p < 1.0:
        raise ValueError(f"failure_prob must lie in (0, 1), got {failure_prob!r}")
    if x.ndim != 2:
        raise ValueError(f"x must have shape (n, d), got {tuple(x.shape)}")
    pe = p / (2 * L - 1)
    t = math.sqrt(2.0 * math.log(1.0 / pe))
    d = x.shape[1]
    op = [(math.sqrt(m) + math.sqrt(d) + t) / math.sqrt(d)]
    op += [(2.0 * math.sqrt(m) + t) / math.sqrt(m)] * (L - 2)
    op += [(math.sqrt(m) + t) / math.sqrt(m)]  # ||a||, a ~ N(0, I/m)
    col = [(math.sqrt(m) + math.sqrt(2.0 * math.log(m / pe))) / math.sqrt(m)] * (L - 2)
    col += [math.sqrt(2.0 * math.log(2.0 * m / pe) / m)]
    return InitNorms(
        op=tuple(op),
        max_col=tuple(col),
        x_norms=tuple(float(v) for v in x.to(torch.float64).norm(dim=1)),
        width=m,
    )


def _sample_change(norms: InitNorms, radius: float, xn: float, s: float, l1: float, l2: float):
    """Per-sample bound on ``||grad f(x; theta) - grad f(x; theta_0)||`` (the recursion)."""
    m, L, R = norms.width, norms.depth, radius
    omega = [w + R for w in norms.op]  # ||W_l|| anywhere in the ball (||dW||_op <= ||dW||_F)
    kcol = [None, *[c + R for c in norms.max_col]]  # kcol[l] for W_{l+1}, l = 1..L-1
    # forward: eta ~ ||h_l||, eps ~ ||dh_l||, zeta ~ ||dz_l|| (index 0 is the input)
    eta = [xn] + [s * math.sqrt(m)] * (L - 1)  # bounded activation: ||h_l|| <= s sqrt(m)
    eps, zeta = [0.0] * L, [0.0] * L
    for layer in range(1, L):
        # z - z' = (W - W') h + W'(h - h')
        zeta[layer] = R * eta[layer - 1] + omega[layer - 1] * eps[layer - 1]
        eps[layer] = min(l1 * zeta[layer], 2.0 * s * math.sqrt(m))
    # backward: delta_L = 1 (the output), v_l = W_{l+1}^T delta_{l+1}, delta_l = sigma'(z_l) v_l
    beta, dbeta = [0.0] * (L + 1), [0.0] * (L + 1)
    beta[L] = 1.0
    for layer in range(L - 1, 0, -1):
        v2 = omega[layer] * beta[layer + 1]  # ||v_l||_2
        vinf = kcol[layer] * beta[layer + 1]  # ||v_l||_inf: a column of W_{l+1} dot delta
        dv = R * beta[layer + 1] + omega[layer] * dbeta[layer + 1]
        beta[layer] = l1 * v2
        # sigma'(z) v - sigma'(z') v' = sigma'(z)(v - v') + (sigma'(z) - sigma'(z')) v'
        dbeta[layer] = l1 * dv + min(l2 * zeta[layer] * vinf, 2.0 * l1 * v2)
    # the block of W_l is delta_l h_{l-1}^T: d(block) = d(delta) h^T + delta' d(h)^T
    blocks = [dbeta[k] * eta[k - 1] + beta[k] * eps[k - 1] for k in range(1, L + 1)]
    return math.sqrt(sum(b * b for b in blocks))


def jacobian_change_bound(
    norms: InitNorms, radius: float, activation: str | Activation = "tanh"
) -> float:
    r"""A bound on :math:`\|J(\theta) - J(\theta_0)\|_F` over :math:`\|\theta - \theta_0\| \le R`.

    Example:
        >>> net = MLP(3, 8, 3, generator=torch.Generator().manual_seed(0))
        >>> nb = network_init_norms(net, torch.randn(4, 3))
        >>> jacobian_change_bound(nb, 0.0), jacobian_change_bound(nb, 0.1) > 0
        (0.0, True)
    """
    r = float(radius)
    if not r >= 0 or not math.isfinite(r):
        raise ValueError(f"radius must be a finite number >= 0, got {radius!r}")
    s, l1, l2 = _constants(activation)
    total = sum(_sample_change(norms, r, xn, s, l1, l2) ** 2 for xn in norms.x_norms)
    return math.sqrt(total)


def stability_radius(
    norms: InitNorms, lambda0: float, activation: str | Activation = "tanh"
) -> float:
    r"""The largest :math:`R` with ``jacobian_change_bound(R)`` :math:`\le (1 - 1/\sqrt2)
    \sqrt{\lambda_0}`: every :math:`\theta` within :math:`R` of the init has
    :math:`\lambda_{\min}(K(\theta)) \ge \lambda_{\min}(K_0)/2` when
    :math:`\lambda_0 \le \lambda_{\min}(K_0)` (by bisection; the bound grows with :math:`R`).

    Example:
        >>> net = MLP(3, 50, 3, generator=torch.Generator().manual_seed(0))
        >>> x = torch.randn(2, 3)
        >>> r = stability_radius(network_init_norms(net, x), 1.0)
        >>> 0 < r < 1
        True
    """
    lam = float(lambda0)
    if not lam >= 0 or not math.isfinite(lam):
        raise ValueError(f"lambda0 must be a finite number >= 0, got {lambda0!r}")
    target = _MARGIN * math.sqrt(lam)
    if target == 0.0:
        return 0.0
    hi = 1.0
    while jacobian_change_bound(norms, hi, activation) <= target:
        hi *= 2.0
    lo = 0.0
    for _ in range(100):
        mid = 0.5 * (lo + hi)
        if jacobian_change_bound(norms, mid, activation) <= target:
            lo = mid
        else:
            hi = mid
    return lo


def deep_stability_radius(
    x: Tensor,
    width: int,
    depth: int,
    failure_prob: float,
    activation: str | Activation = "tanh",
) -> dict[str, float]:
    r"""A radius from (data, width, depth, level) only: with probability :math:`\ge 1 - p`
    over the init, every :math:`\theta` with :math:`\|\theta - \theta_0\| \le R` has
    :math:`\lambda_{\min}(K(\theta)) \ge \lambda_{\min}(K_0)/2 \ge \kappa/2`.

    Half the level goes to the unconditional bound :math:`\kappa` on
    :math:`\lambda_{\min}(K_0)` (:func:`~langevin_ntk.deep_bounds.deep_unconditional_init_bound`),
    half to :func:`gaussian_init_norms`; :math:`R = 0` when :math:`\kappa = 0`. Standard
    parameterisation.

    Returns:
        ``{"radius", "kappa", "init_norm"}``, the last the typical :math:`\|\theta_0\|`
        (:math:`\sqrt{(L-1)m + 1}`), to read the radius relative to it.

    Example:
        >>> x = torch.randn(4, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
        >>> r = deep_stability_radius(x, 20_000, 3, 0.1)
        >>> 0 < r["radius"] < r["init_norm"]
        True
    """
    kappa = deep_unconditional_init_bound(x, width, depth, failure_prob / 2, activation)["kappa"]
    norms = gaussian_init_norms(x, width, depth, failure_prob / 2)
    radius = stability_radius(norms, kappa, activation) if kappa > 0 else 0.0
    return {
        "radius": radius,
        "kappa": kappa,
        "init_norm": math.sqrt((depth - 1) * width + 1.0),
    }
