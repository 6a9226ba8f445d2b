r"""Explicit bounds for one-hidden-layer networks: :math:`\lambda_{\min}(\mathrm{NTK})` at init
and its stability under prior-matched Langevin training (derived in the README).

Setting: :math:`f(x) = \sum_{j=1}^m a_j\sigma(w_j^\top x)` in the standard parameterisation,
:math:`w_j \sim N(0, I/d)`, :math:`a_j \sim N(0, 1/m)`, squared loss
:math:`L = \tfrac12\sum_i (f(x_i) - y_i)^2 \ge 0`, bounded activation :math:`|\sigma| \le s`.

1. **Init.** The NTK contains the output layer's part: :math:`K \succeq \Phi\Phi^\top`,
   :math:`\Phi_{ij} = \sigma(w_j^\top x_i)`, a sum of :math:`m` i.i.d. PSD rank-one terms with
   mean :math:`mG` (:math:`G_{ik} = E\,\sigma(w^\top x_i)\sigma(w^\top x_k)`) and norms
   :math:`\le R = ns^2`. Matrix Chernoff (Tropp 2012, Thm 1.1):
   :math:`P(\lambda_{\min}(\Phi\Phi^\top) \le (1-\delta)m\lambda_G) \le n\,e^{-h(\delta) m
   \lambda_G / R}`, :math:`h(\delta) = \delta + (1-\delta)\log(1-\delta)`.
2. **Along training.** With per-layer weight decay :math:`\lambda_l = T/\mathrm{var}_l` the
   Gibbs law is :math:`\pi \propto e^{-L/T}\pi_0`, :math:`\pi_0` the init law. The law
   :math:`\rho_t` of CLD started at :math:`\pi_0` has :math:`KL(\rho_t\|\pi) \le
   KL(\pi_0\|\pi) \le \bar L/T` (free energy decreases: the "second law"; :math:`\bar L =
   E_{\pi_0}L`), and for any event :math:`A`, :math:`\rho_t(A) \le (KL + \log 2)/\log(1/\pi(A))`
   with :math:`\pi(A) \le \pi_0(A)e^{\bar L/T}`. So for all :math:`t \ge 0`

   .. math::

       P\big(\lambda_{\min}(K_t) \le (1-\delta)m\lambda_G\big) \le
       \frac{\bar L/T + \log 2}{h(\delta)m\lambda_G/(ns^2) - \log n - \bar L/T}.
"""

from __future__ import annotations

import math
import warnings

import torch
from torch import Tensor

from .kernels import nngp_and_derivative
from .models import Activation, get_activation

__all__ = [
    "bound_applies",
    "chernoff_rate",
    "expected_init_loss",
    "gibbs_loss_floor",
    "init_failure_probability",
    "init_lambda_min_bound",
    "last_layer_gram",
    "min_temperature_for_stability",
    "min_width_for_stability",
    "prior_matched_weight_decay",
    "stability_failure_bound",
    "stability_failure_bound_wd",
]


def _pos_int(name: str, v: object) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise ValueError(f"{name} must be a positive int, got {v!r}")
    return v


def _pos(name: str, v: object) -> float:
    if isinstance(v, bool):
        raise ValueError(f"{name} must be a positive number, got {v!r}")
    try:
        f = float(v)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a positive number, got {v!r}") from None
    if not f > 0 or math.isnan(f):
        raise ValueError(f"{name} must be > 0, got {v!r}")
    return f


def _delta(delta: object) -> float:
    d = float(delta)  # type: ignore[arg-type]
    if not 0.0 < d < 1.0:
        raise ValueError(f"delta must lie in (0, 1), got {delta!r}")
    return d


def bound_applies(activation: str | Activation) -> bool:
    """Whether the bounds here cover ``activation`` (smooth and bounded); warns when not.

    Example:
        >>> bound_applies("tanh")
        True
    """
    act = get_activation(activation)
    if not act.smooth:
        warnings.warn(
            f"activation {act.name!r} is not smooth: the paper's analysis (and these bounds) "
            "assume a smooth activation and do not apply",
            UserWarning,
            stacklevel=2,
        )
        return False
    if not math.isfinite(act.sup_abs):
        warnings.warn(
            f"activation {act.name!r} is unbounded: the Chernoff bound here needs "
            "sup|sigma| < inf and does not apply",
            UserWarning,
            stacklevel=2,
        )
        return False
    return True


def chernoff_rate(delta: float) -> float:
    r""":math:`h(\delta) = \delta + (1-\delta)\log(1-\delta)`, increasing from 0 to 1 on [0, 1).

    Example:
        >>> round(chernoff_rate(0.5), 6)
        0.153426
    """
    d = float(delta)
    if not 0.0 <= d <= 1.0:
        raise ValueError(f"delta must lie in [0, 1], got {delta!r}")
    return 1.0 if d == 1.0 else d + (1.0 - d) * math.log1p(-d)


def last_layer_gram(x: Tensor, activation: str | Activation, order: int = 48) -> Tensor:
    r""":math:`G_{ik} = E_{w \sim N(0, I/d)}\,\sigma(w^\top x_i)\sigma(w^\top x_k)` (float64).

    The Gram is well defined for any activation, but it feeds the bounds of this module, so a
    non-smooth or unbounded activation triggers :func:`bound_applies`'s warning.

    Example:
        >>> g = last_layer_gram(torch.eye(2, dtype=torch.float64) * 2 ** 0.5, "erf")
        >>> bool(abs(g[0, 1]) < 1e-12)
        True
    """
    if x.ndim != 2:
        raise ValueError(f"x must have shape (n, d), got {tuple(x.shape)}")
    x = x.to(torch.float64)
    act = get_activation(activation)
    bound_applies(act)
    cov = x @ x.mT / x.shape[1]
    return nngp_and_derivative(cov, act, 0 if act.name == "erf" else order)[0]


def expected_init_loss(gram: Tensor, y: Tensor) -> float:
    r""":math:`\bar L = E_{\pi_0}\tfrac12\sum_i(f(x_i) - y_i)^2 = \tfrac12\sum_i(G_{ii} + y_i^2)`.

    (:math:`E f = 0` and :math:`E f(x_i)^2 = m \cdot \tfrac1m G_{ii}`.)

    Example:
        >>> expected_init_loss(torch.eye(2), torch.ones(2))
        2.0
    """
    if gram.ndim != 2 or gram.shape[0] != gram.shape[1] or y.shape != (gram.shape[0],):
        raise ValueError(f"need gram (n, n) and y (n,), got {tuple(gram.shape)}, {tuple(y.shape)}")
    return 0.5 * float(torch.diagonal(gram).sum() + (y.to(gram.dtype) ** 2).sum())


def init_failure_probability(
    width: int, n: int, lambda_gram: float, sup_abs: float, delta: float
) -> float:
    r""":math:`\min(1, n\exp(-h(\delta)\,m\lambda_G/(ns^2)))`: the chance that
    :math:`\lambda_{\min}(K_0) \le (1-\delta)m\lambda_G`.

    Example:
        >>> init_failure_probability(10_000, 4, 0.5, 1.0, 0.5) < 1e-80
        True
    """
    m, n = _pos_int("width", width), _pos_int("n", n)
    lam, s = _pos("lambda_gram", lambda_gram), _pos("sup_abs", sup_abs)
    rate = chernoff_rate(_delta(delta)) * m * lam / (n * s * s)
    return min(1.0, n * math.exp(-rate))


def init_lambda_min_bound(
    width: int, n: int, lambda_gram: float, sup_abs: float, failure_prob: float
) -> float:
    r"""The largest :math:`\kappa = (1-\delta)m\lambda_G` with
    :math:`P(\lambda_{\min}(K_0) \le \kappa) \le` ``failure_prob`` by matrix Chernoff.

    Solves :math:`h(\delta) = ns^2\log(n/p)/(m\lambda_G)` by bisection; returns 0 when the
    right side is :math:`\ge 1` (the width is too small for any guarantee at level ``p``).

    Example:
        >>> round(init_lambda_min_bound(10_000, 4, 0.5, 1.0, 0.01), 1)
        4518.5
    """
    m, n = _pos_int("width", width), _pos_int("n", n)
    lam, s = _pos("lambda_gram", lambda_gram), _pos("sup_abs", sup_abs)
    p = float(failure_prob)
    if not 0.0 < p < 1.0:
        raise ValueError(f"failure_prob must lie in (0, 1), got {failure_prob!r}")
    need = n * s * s * math.log(n / p) / (m * lam)
    if need >= 1.0:
        return 0.0
    lo, hi = 0.0, 1.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if chernoff_rate(mid) < need:
            lo = mid
        else:
            hi = mid
    return (1.0 - hi) * m * lam


def stability_failure_bound(
    width: int,
    n: int,
    lambda_gram: float,
    sup_abs: float,
    delta: float,
    init_loss: float,
    temperature: float,
) -> float:
    r"""Upper bound, uniform in time, on :math:`P(\lambda_{\min}(K_t) \le (1-\delta)m\lambda_G)`
    under prior-matched CLD (module docstring); 1 when the denominator is not positive.

    Example:
        >>> b = stability_failure_bound(10**6, 8, 0.2, 1.0, 0.5, 5.0, 0.1)
        >>> 0 < b < 0.05
        True
    """
    m, n = _pos_int("width", width), _pos_int("n", n)
    lam, s = _pos("lambda_gram", lambda_gram), _pos("sup_abs", sup_abs)
    temp = _pos("temperature", temperature)
    lbar = float(init_loss)
    if lbar < 0:
        raise ValueError(f"init_loss must be >= 0, got {init_loss!r}")
    num = lbar / temp + math.log(2.0)
    den = chernoff_rate(_delta(delta)) * m * lam / (n * s * s) - math.log(n) - lbar / temp
    return 1.0 if den <= 0 else min(1.0, num / den)


def min_width_for_stability(
    n: int,
    lambda_gram: float,
    sup_abs: float,
    delta: float,
    init_loss: float,
    temperature: float,
    target_prob: float,
) -> int:
    r"""Smallest width with :func:`stability_failure_bound` :math:`\le` ``target_prob``:
    :math:`m \ge \frac{ns^2}{h(\delta)\lambda_G}\big(\frac{\bar L/T + \log 2}{p} + \log n +
    \bar L/T\big)`.

    Example:
        >>> m = min_width_for_stability(8, 0.2, 1.0, 0.5, 5.0, 0.1, 0.1)
        >>> stability_failure_bound(m, 8, 0.2, 1.0, 0.5, 5.0, 0.1) <= 0.1
        True
    """
    n = _pos_int("n", n)
    lam, s = _pos("lambda_gram", lambda_gram), _pos("sup_abs", sup_abs)
    temp, p = _pos("temperature", temperature), float(target_prob)
    if not 0.0 < p < 1.0:
        raise ValueError(f"target_prob must lie in (0, 1), got {target_prob!r}")
    k = float(init_loss) / temp
    c = chernoff_rate(_delta(delta)) * lam / (n * s * s)
    return math.ceil(((k + math.log(2.0)) / p + math.log(n) + k) / c)


def min_temperature_for_stability(
    width: int,
    n: int,
    lambda_gram: float,
    sup_abs: float,
    delta: float,
    init_loss: float,
    target_prob: float,
) -> float:
    r"""Smallest :math:`T` with :func:`stability_failure_bound` :math:`\le` ``target_prob``
    (``inf`` if none): :math:`T \ge \bar L(1/p + 1)/(cm - \log n - \log 2/p)`,
    :math:`c = h(\delta)\lambda_G/(ns^2)`.

    Example:
        >>> t = min_temperature_for_stability(10**5, 8, 0.2, 1.0, 0.5, 5.0, 0.1)
        >>> round(stability_failure_bound(10**5, 8, 0.2, 1.0, 0.5, 5.0, t * 1.000001), 6)
        0.1
    """
    m, n = _pos_int("width", width), _pos_int("n", n)
    lam, s = _pos("lambda_gram", lambda_gram), _pos("sup_abs", sup_abs)
    p = float(target_prob)
    if not 0.0 < p < 1.0:
        raise ValueError(f"target_prob must lie in (0, 1), got {target_prob!r}")
    c = chernoff_rate(_delta(delta)) * lam / (n * s * s)
    den = c * m - math.log(n) - math.log(2.0) / p
    return math.inf if den <= 0 else float(init_loss) * (1.0 / p + 1.0) / den


def prior_matched_weight_decay(init_var: float, temperature: float) -> float:
    r""":math:`\lambda = T/\mathrm{var}`: the weight decay whose Gibbs prior
    :math:`N(0, (T/\lambda) I)` is the initialisation law :math:`N(0, \mathrm{var}\,I)`.

    Example:
        >>> prior_matched_weight_decay(0.25, 0.1)
        0.4
    """
    var = _pos("init_var", init_var)
    temp = float(temperature)
    if not temp >= 0:
        raise ValueError(f"temperature must be >= 0, got {temperature!r}")
    return temp / var


def gibbs_loss_floor(
    x: Tensor,
    y: Tensor,
    width: int,
    temperature: float,
    *,
    samples: int = 2000,
    activation: str | Activation = "tanh",
    seed: int = 0,
) -> dict[str, float]:
    r"""The stationary expected loss of prior-matched CLD and its free-energy bound.

    The Gibbs law is :math:`\pi \propto e^{-L/T}\pi_0` with :math:`\pi_0` the init law of
    the two-layer net. Given the first layer :math:`W`, :math:`f = \Phi a` is Gaussian with
    covariance :math:`G_W = \Phi\Phi^\top/m`, so with :math:`A = G_W + TI` the :math:`a`-part
    is integrated exactly:

    .. math::

        Z(W) = E_a e^{-L/T} = \det(I + G_W/T)^{-1/2} e^{-\frac12 y^\top A^{-1}y},\qquad
        E_\pi[L \mid W] = \tfrac12\big(T^2\|A^{-1}y\|^2 + T\,\mathrm{tr}(G_W A^{-1})\big).

    Over :math:`W \sim \pi_0` (``samples`` draws) self-normalised importance weights
    :math:`Z(W)` give :math:`E_\pi[L]` (the floor), and :math:`F^\star = -T\log E_{\pi_0}Z(W)`
    is the free energy, which bounds it: :math:`E_\pi L \le T\,KL(\pi\|\pi) + F^\star`
    (Donsker-Varadhan with :math:`e^{L/T}`), and :math:`E_{\rho_t}L \le T\,KL(\rho_t\|\pi) +
    F^\star` along the dynamics.

    Args:
        x: inputs ``(n, d)``; y: targets ``(n,)``.
        width, temperature: :math:`m \ge 1`, :math:`T > 0`.
        samples: Monte-Carlo draws of :math:`W`.
        activation, seed: as usual.

    Returns:
        ``{"floor", "floor_se", "free_energy", "ess"}`` (``floor_se`` the delta-method standard
        error of the weighted mean, ``ess`` the effective sample size).

    Example:
        >>> x = torch.eye(3, dtype=torch.float64) * 3 ** 0.5
        >>> r = gibbs_loss_floor(x, torch.ones(3, dtype=torch.float64), 64, 0.1, samples=200)
        >>> 0 < r["floor"] <= r["free_energy"]
        True
    """
    m = _pos_int("width", width)
    temp = _pos("temperature", temperature)
    k = _pos_int("samples", samples)
    if x.ndim != 2 or y.shape != (x.shape[0],):
        raise ValueError(f"need x (n, d) and y (n,), got {tuple(x.shape)}, {tuple(y.shape)}")
    act = get_activation(activation)
    x, y = x.to(torch.float64), y.to(torch.float64)
    n, d = x.shape
    g = torch.Generator().manual_seed(seed)
    eye = torch.eye(n, dtype=torch.float64)
    log_z, cond = [], []
    for start in range(0, k, 256):
        b = min(256, k - start)
        w = torch.randn(b, m, d, generator=g, dtype=torch.float64) / math.sqrt(d)
        phi = act.fn(x @ w.mT)  # (b, n, m)
        gw = phi @ phi.mT / m
        a = gw + temp * eye
        chol = torch.linalg.cholesky(a)
        ainv_y = torch.cholesky_solve(y[None, :, None].expand(b, n, 1), chol)[..., 0]
        logdet_a = 2 * torch.log(torch.diagonal(chol, dim1=-2, dim2=-1)).sum(-1)
        log_z.append(-0.5 * (logdet_a - n * math.log(temp)) - 0.5 * (y * ainv_y).sum(-1))
        tr = torch.diagonal(torch.cholesky_solve(gw, chol), dim1=-2, dim2=-1).sum(-1)
        cond.append(0.5 * (temp**2 * ainv_y.pow(2).sum(-1) + temp * tr))
    lz, el = torch.cat(log_z), torch.cat(cond)
    wts = torch.softmax(lz, 0)
    floor = float((wts * el).sum())
    se = float(((wts**2) * (el - floor) ** 2).sum().sqrt())
    free = -temp * float(torch.logsumexp(lz, 0) - math.log(k))
    return {"floor": floor, "floor_se": se, "free_energy": free, "ess": float(1 / (wts**2).sum())}


def stability_failure_bound_wd(
    x: Tensor,
    y: Tensor,
    width: int,
    temperature: float,
    weight_decay_w: float,
    weight_decay_a: float,
    delta: float = 0.5,
    activation: str | Activation = "tanh",
) -> dict[str, float]:
    r"""The stability bound for any per-layer weight decays, not only the prior-matched ones.

    With decays :math:`\lambda_W, \lambda_a > 0` the Gibbs prior is
    :math:`\pi_0' = N(0, T/\lambda_W) \otimes N(0, T/\lambda_a)` while CLD starts at the init law
    :math:`\rho_0 = N(0, 1/d) \otimes N(0, 1/m)`. The argument of the module docstring goes
    through with :math:`KL(\rho_0\|\pi) \le KL(\rho_0\|\pi_0') + \bar L'/T`, :math:`\bar L' =
    E_{\pi_0'}L` and the Gram :math:`G'` of :math:`\pi_0'`'s first layer:

    .. math::

        P(\lambda_{\min}(K_t) \le (1-\delta)m\lambda_{G'}) \le
        \frac{KL(\rho_0\|\pi_0') + \bar L'/T + \log 2}{h(\delta)m\lambda_{G'}/(ns^2) - \log n -
        \bar L'/T},

    :math:`KL(\rho_0\|\pi_0') = \sum_l \tfrac{P_l}{2}(r_l - 1 - \log r_l)`,
    :math:`r_l = \mathrm{var}_l\lambda_l/T`, with :math:`P_l` the layer's parameter count. The
    KL term grows like the number of parameters unless every :math:`r_l \approx 1`: the decay
    has to match the temperature to the init scale, :math:`\lambda_l \approx T/\mathrm{var}_l`.

    Args:
        x, y: data ``(n, d)``, ``(n,)``.
        width, temperature: :math:`m`, :math:`T > 0`.
        weight_decay_w, weight_decay_a: :math:`\lambda_W, \lambda_a > 0` (at 0 the Gibbs law
            is not normalisable and no bound of this kind exists).
        delta: the level :math:`\delta \in (0, 1)`.
        activation: smooth and bounded (else a warning, see :func:`bound_applies`).

    Returns:
        ``{"bound", "kl_init", "lambda_gram", "expected_prior_loss", "threshold"}``
        (``threshold`` is :math:`(1-\delta)m\lambda_{G'}`).

    Example:
        >>> x = torch.eye(4, dtype=torch.float64) * 2.0
        >>> y = torch.ones(4, dtype=torch.float64)
        >>> r = stability_failure_bound_wd(x, y, 10**6, 0.1, 0.1 * 4, 0.1 * 10**6)
        >>> round(r["kl_init"], 12), r["bound"] < 1
        (0.0, True)
    """
    m = _pos_int("width", width)
    temp = _pos("temperature", temperature)
    lw = _pos("weight_decay_w", weight_decay_w)
    la = _pos("weight_decay_a", weight_decay_a)
    act = get_activation(activation)
    if x.ndim != 2 or y.shape != (x.shape[0],):
        raise ValueError(f"need x (n, d) and y (n,), got {tuple(x.shape)}, {tuple(y.shape)}")
    n, d = x.shape
    v_w, v_a = temp / lw, temp / la
    kl = 0.0
    for count, var_init, var_prior in ((m * d, 1.0 / d, v_w), (m, 1.0 / m, v_a)):
        r = var_init / var_prior
        kl += 0.5 * count * (r - 1.0 - math.log(r))
    # w ~ N(0, v_w I) on x equals w ~ N(0, I/d) on x * sqrt(v_w d)
    gram = last_layer_gram(x.to(torch.float64) * math.sqrt(v_w * d), act)
    lam_g = float(torch.linalg.eigvalsh(gram)[0])
    lbar = 0.5 * float(m * v_a * torch.diagonal(gram).sum() + (y.to(torch.float64) ** 2).sum())
    s = act.sup_abs if math.isfinite(act.sup_abs) else math.inf
    h = chernoff_rate(_delta(delta))
    den = (h * m * lam_g / (n * s * s) if math.isfinite(s) else 0.0) - math.log(n) - lbar / temp
    num = kl + lbar / temp + math.log(2.0)
    bound = 1.0 if den <= 0 else min(1.0, num / den)
    return {
        "bound": bound,
        "kl_init": kl,
        "lambda_gram": lam_g,
        "expected_prior_loss": lbar,
        "threshold": (1.0 - _delta(delta)) * m * lam_g,
    }
