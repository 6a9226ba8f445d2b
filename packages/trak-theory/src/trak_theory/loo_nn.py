r"""Exact leave-one-out for small networks, and the linearised model's leave-one-out.

Objective (sum over the training set, margin loss, ridge on all parameters):

.. math::
    R_S(\theta) = \sum_{i \in S} L(f_i(\theta)) + \tfrac{\lambda}{2}\|\theta\|^2,\qquad
    L(f) = \log(1 + e^{-f}),

where :math:`f_i` is the margin (:func:`trak_theory.gradients.margin`), so L is exactly the
cross-entropy. A network's :math:`R_S` is not convex, so "the" leave-one-out model is defined
by the procedure: :func:`fit_network` runs damped Newton (Levenberg--Marquardt shift where the
Hessian is not positive definite, Armijo backtracking) in float64 to a gradient norm below
``tol``, and :func:`exact_loo_network` starts each :math:`\hat\theta_{-i}` from the full-data
optimum :math:`\hat\theta` (a warm start: the two problems differ by one term, so Newton
follows the same basin), or from a given fixed-seed initialisation. The answer is a stationary
point with a positive definite Hessian (a local minimum); :func:`min_hessian_eig` checks that.

The linearised model :math:`f^{\mathrm{lin}}_i(\theta) = f_i(\hat\theta) +
\phi_i^\top(\theta - \hat\theta)`, :math:`\phi_i = \nabla f_i(\hat\theta)`, has the same
gradient of :math:`R_S` at :math:`\hat\theta` (zero), so :math:`\hat\theta` is its optimum as
well, and its objective is convex (a logistic regression with offsets). Its exact leave-one-out
(:func:`linearized_loo`) is what TRAK's kernel machine would give with no further
approximation; the difference from the network's exact LOO is the **linearisation** term of the
error decomposition (it contains the Hessian terms :math:`\sum_j L'(f_j)\nabla^2 f_j` that the
Gauss--Newton curvature drops, and everything beyond second order). One Newton step of the
linearised problem from :math:`\hat\theta` is the ALO formula
(:func:`trak_theory.scores.alo_scores`), so the decomposition reads
exact = linearised + (linearisation), ALO = linearised + (ALO step), and so on.
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import torch
from torch import Tensor, nn
from torch.func import functional_call, grad, hessian, vmap

from .gradients import margin

__all__ = [
    "NetworkObjective",
    "exact_loo_network",
    "fit_glm_offsets",
    "fit_network",
    "linearized_loo",
    "min_hessian_eig",
]


class NetworkObjective:
    r"""A network as a function of one flat float64 parameter vector.

    Args:
        model: the network (copied to float64; buffers are held fixed).
        x, y: training inputs and labels (targets are passed to :meth:`outputs`).
        lam: ridge :math:`\lambda > 0`.
        output_fn: margin of one example, ``output_fn(model_output, label)``.
    """

    def __init__(
        self,
        model: nn.Module,
        x: Tensor,
        y: Tensor,
        lam: float,
        output_fn: Callable[[Tensor, Tensor], Tensor] = margin,
    ):
        if x.shape[0] == 0:
            raise ValueError("empty training set")
        if y.shape[0] != x.shape[0]:
            raise ValueError(f"x has {x.shape[0]} rows but y has {y.shape[0]}")
        if not lam > 0:
            raise ValueError(f"the ridge lam must be > 0, got {lam}")
        self.model = copy.deepcopy(model).to(torch.float64).eval()
        named = [(n, p) for n, p in self.model.named_parameters() if p.requires_grad]
        if not named:
            raise ValueError("model has no trainable parameters")
        self.names = [n for n, _ in named]
        self.shapes = [p.shape for _, p in named]
        self.sizes = [p.numel() for _, p in named]
        self.p = sum(self.sizes)
        self.buffers = {n: b.detach() for n, b in self.model.named_buffers()}
        self.x = x.to(torch.float64) if x.is_floating_point() else x
        self.y = y
        self.lam = float(lam)
        self.output_fn = output_fn

    def flat(self, model: nn.Module | None = None) -> Tensor:
        """The parameters of ``model`` (default: the copy held here) as one float64 vector."""
        mod = self.model if model is None else model
        ps = dict(mod.named_parameters())
        return torch.cat([ps[n].detach().reshape(-1).to(torch.float64) for n in self.names])

    def unflatten(self, theta: Tensor) -> dict[str, Tensor]:
        parts = torch.split(theta, self.sizes)
        return {n: t.view(s) for n, t, s in zip(self.names, parts, self.shapes, strict=True)}

    def outputs(self, theta: Tensor, x: Tensor | None = None, y: Tensor | None = None) -> Tensor:
        """The margins f(z; theta) of (x, y) (default: the training set), shape (n,)."""
        x = self.x if x is None else (x.to(torch.float64) if x.is_floating_point() else x)
        y = self.y if y is None else y
        out = functional_call(self.model, {**self.unflatten(theta), **self.buffers}, (x,))
        return vmap(self.output_fn)(out, y)

    def value(self, theta: Tensor, weights: Tensor) -> Tensor:
        r""":math:`\sum_i w_i L(f_i(\theta)) + \tfrac{\lambda}{2}\|\theta\|^2` (one problem)."""
        f = self.outputs(theta)
        return (weights * nn.functional.softplus(-f)).sum() + 0.5 * self.lam * (theta * theta).sum()

    def features(self, theta: Tensor, x: Tensor | None = None, y: Tensor | None = None) -> Tensor:
        r"""Per-example margin gradients :math:`\phi_i = \nabla_\theta f_i(\theta)`, (n, p)."""
        return torch.func.jacrev(lambda t: self.outputs(t, x, y))(theta)


def _psd_shift(h: Tensor, floor: float) -> tuple[Tensor, Tensor]:
    """Cholesky factors of h + mu I with mu >= 0 the smallest shift making it safely PD."""
    lower, info = torch.linalg.cholesky_ex(h)
    bad = info != 0
    if bool(bad.any()):
        eye = torch.eye(h.shape[-1], dtype=h.dtype)
        emin = torch.linalg.eigvalsh(h[bad])[:, 0]
        shifted = h[bad] + (floor - emin).clamp_min(0)[:, None, None] * eye
        lower = lower.clone()
        lower[bad] = torch.linalg.cholesky(shifted)
    return lower, bad


def fit_network(
    obj: NetworkObjective,
    weights: Tensor,
    theta0: Tensor,
    tol: float = 1e-9,
    max_iter: int = 200,
    max_escapes: int = 5,
) -> Tensor:
    """Damped Newton on B problems at once: ``weights`` (B, n), ``theta0`` (B, p) or (p,).

    A problem that converges to a saddle (a negative Hessian eigenvalue) is pushed off it
    along the most negative eigenvector, to where the objective decreases, and solved again
    (at most ``max_escapes`` rounds), so the answers are local minima.

    Returns the (B, p) stationary points (gradient norm < ``tol`` each).

    Raises:
        RuntimeError: when some problem has not converged after ``max_iter`` steps.
    """
    weights = torch.as_tensor(weights, dtype=torch.float64)
    if weights.dim() != 2 or weights.shape[1] != obj.x.shape[0]:
        raise ValueError(f"weights must be (B, {obj.x.shape[0]}), got {tuple(weights.shape)}")
    b = weights.shape[0]
    th = torch.as_tensor(theta0, dtype=torch.float64).expand(b, obj.p).clone()
    val = vmap(obj.value)
    gfn = vmap(grad(obj.value))
    hfn = vmap(hessian(obj.value))
    gn = torch.full((b,), float("inf"), dtype=torch.float64)
    escapes = 0
    for _ in range(max_iter):
        g = gfn(th, weights)
        gn = g.norm(dim=1)
        act = gn >= tol
        if not bool(act.any()):
            if escapes >= max_escapes or not _escape_saddles(obj, th, weights):
                return th
            escapes += 1
            continue
        ta, wa, ga = th[act], weights[act], g[act]
        lower, _ = _psd_shift(hfn(ta, wa), 0.1 * obj.lam)
        step = torch.cholesky_solve(ga.unsqueeze(-1), lower).squeeze(-1)
        f0, t = val(ta, wa), torch.ones(ta.shape[0], dtype=torch.float64)
        slope = (ga * step).sum(1)
        for _ in range(40):  # Armijo backtracking; full steps near the optimum
            bad = val(ta - t[:, None] * step, wa) > f0 - 1e-4 * t * slope + 1e-13 * f0.abs()
            if not bool(bad.any()):
                break
            t = torch.where(bad, t / 2, t)
        th[act] = ta - t[:, None] * step
    raise RuntimeError(f"Newton did not converge: max gradient norm {float(gn.max()):.3e}")


def _escape_saddles(obj: NetworkObjective, th: Tensor, weights: Tensor) -> bool:
    """Move every problem sitting at a saddle downhill along its most negative eigenvector
    (in place); True when some problem moved."""
    evals, evecs = torch.linalg.eigh(vmap(hessian(obj.value))(th, weights))
    moved = False
    for b in (evals[:, 0] < -1e-10 * evals[:, -1].abs().clamp_min(1)).nonzero().flatten():
        v, f0 = evecs[b, :, 0], obj.value(th[b], weights[b])
        for a in (1.0, 0.5, 0.25, 0.1, 0.05, 0.01, 1e-3):
            cands = [th[b] + a * v, th[b] - a * v]
            vals = [obj.value(c, weights[b]) for c in cands]
            best = int(vals[1] < vals[0])
            if vals[best] < f0:
                th[b] = cands[best]
                moved = True
                break
    return moved


def min_hessian_eig(obj: NetworkObjective, theta: Tensor, weights: Tensor) -> Tensor:
    """Smallest Hessian eigenvalue of each problem (> 0 at a strict local minimum), (B,)."""
    h = vmap(hessian(obj.value))(torch.atleast_2d(theta), torch.atleast_2d(weights))
    return torch.linalg.eigvalsh(h)[:, 0]


def exact_loo_network(
    obj: NetworkObjective,
    x_t: Tensor,
    y_t: Tensor,
    theta0: Tensor | None = None,
    start: str | Tensor = "warm",
    tol: float = 1e-9,
    batch: int = 32,
) -> tuple[Tensor, Tensor, Tensor]:
    r"""Exact LOO by retraining: :math:`\tau_{ti} = f_t(\hat\theta) - f_t(\hat\theta_{-i})`.

    Args:
        obj: the network objective.
        x_t, y_t: targets.
        theta0: where the full-data Newton starts (default: the model's parameters, e.g. after
            a seeded Adam run).
        start: ``"warm"`` (each LOO problem starts from the full-data optimum) or a (p,)
            parameter vector every LOO problem starts from (e.g. the fixed-seed
            initialisation; it may end in another basin).
        tol: gradient-norm tolerance of every solve.
        batch: LOO problems solved together.

    Returns:
        (scores (m, n), theta_full (p,), thetas_loo (n, p)).
    """
    n = obj.x.shape[0]
    th0 = obj.flat() if theta0 is None else torch.as_tensor(theta0, dtype=torch.float64)
    theta = fit_network(obj, torch.ones(1, n, dtype=torch.float64), th0, tol)[0]
    init = theta if isinstance(start, str) and start == "warm" else None
    if init is None:
        if isinstance(start, str):
            raise ValueError(f"start must be 'warm' or a parameter vector, got {start!r}")
        init = torch.as_tensor(start, dtype=torch.float64)
    loo = []
    for s in range(0, n, batch):
        idx = torch.arange(s, min(n, s + batch))
        w = torch.ones(len(idx), n, dtype=torch.float64)
        w[torch.arange(len(idx)), idx] = 0.0
        loo.append(fit_network(obj, w, init, tol))
    thetas = torch.cat(loo)
    ft = vmap(lambda t: obj.outputs(t, x_t, y_t))(thetas)  # (n, m)
    return obj.outputs(theta, x_t, y_t)[:, None] - ft.T, theta, thetas


def fit_glm_offsets(
    phi: Tensor,
    f0: Tensor,
    lam: float,
    center: Tensor,
    masks: Tensor,
    tol: float = 1e-10,
    max_iter: int = 100,
) -> Tensor:
    r"""Minimise :math:`\sum_j m_j L(f_{0j} + \phi_j^\top\delta) + \tfrac\lambda2\|c+\delta\|^2`
    over :math:`\delta` for B masks at once (Newton, float64; convex). Returns (B, p) deltas."""
    phi, f0, c, masks = (torch.as_tensor(a, dtype=torch.float64) for a in (phi, f0, center, masks))
    b, p = masks.shape[0], phi.shape[1]
    d = torch.zeros(b, p, dtype=torch.float64)
    eye = torch.eye(p, dtype=torch.float64)

    def obj(dd):
        f = f0[None] + dd @ phi.T
        reg = 0.5 * lam * ((c[None] + dd) ** 2).sum(1)
        return (masks * nn.functional.softplus(-f)).sum(1) + reg

    gn = torch.full((b,), float("inf"), dtype=torch.float64)
    for _ in range(max_iter):
        s = torch.sigmoid(-(f0[None] + d @ phi.T))  # 1 - p
        g = -(masks * s) @ phi + lam * (c[None] + d)
        gn = g.norm(dim=1)
        if float(gn.max()) < tol:
            return d
        w = masks * s * (1 - s)
        h = (phi.T[None] * w[:, None, :]) @ phi + lam * eye
        step = torch.linalg.solve(h, g.unsqueeze(-1)).squeeze(-1)
        v0, t = obj(d), torch.ones(b, dtype=torch.float64)
        for _ in range(40):
            bad = obj(d - t[:, None] * step) > v0 - 1e-4 * t * (g * step).sum(1) + 1e-13 * v0.abs()
            if not bool(bad.any()):
                break
            t = torch.where(bad, t / 2, t)
        d = d - t[:, None] * step
    raise RuntimeError(f"Newton did not converge: max gradient norm {float(gn.max()):.3e}")


def linearized_loo(
    obj: NetworkObjective,
    theta: Tensor,
    x_t: Tensor,
    y_t: Tensor,
    tol: float = 1e-10,
    batch: int = 64,
) -> Tensor:
    r"""Exact LOO of the model linearised at ``theta`` (the full-data optimum), (m, n).

    :math:`\tau^{\mathrm{lin}}_{ti} = -\phi_t^\top(\theta^{\mathrm{lin}}_{-i} - \hat\theta)`.
    """
    phi = obj.features(theta)
    f0 = obj.outputs(theta)
    n = phi.shape[0]
    masks = 1.0 - torch.eye(n, dtype=torch.float64)
    deltas = torch.cat(
        [
            fit_glm_offsets(phi, f0, obj.lam, theta, masks[s : s + batch], tol)
            for s in range(0, n, batch)
        ]
    )
    return -obj.features(theta, x_t, y_t) @ deltas.T
