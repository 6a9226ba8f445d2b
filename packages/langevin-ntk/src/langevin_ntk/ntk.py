r"""The empirical neural tangent kernel and its stability measures.

For a model :math:`f(\theta; x) \in R^k` and a batch :math:`x_1..x_n`, the Jacobian
:math:`J \in R^{nk \times P}` stacks :math:`\partial f(\theta; x_i)_o / \partial\theta` (row
``i * k + o``), and the empirical NTK is :math:`K = J J^\top \in R^{nk \times nk}`.

* :func:`jacobian` forms :math:`J` with ``torch.func`` (``vmap`` over samples of ``jacrev``);
  :func:`jacobian_loop` is the naive per-sample autograd loop (reference and benchmark anchor).
* :func:`ntk_matvec` gives :math:`v \mapsto J(J^\top v)` from one ``vjp`` and one ``jvp``
  without ever forming :math:`J` (memory :math:`O(P + nk)`).
* :func:`lanczos_extreme` runs Lanczos with full reorthogonalisation on such a product;
  :func:`ntk_min_eigenvalue` picks the exact ``eigvalsh`` route or Lanczos.
* :func:`relative_change`, :func:`weight_distance` and :class:`NTKMonitor` measure how far
  :math:`K_t`, :math:`J_t` and :math:`\theta_t` moved from initialisation.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Mapping

import torch
from torch import Tensor, nn
from torch.func import functional_call, jacrev, jvp, vjp, vmap

from .models import get_activation

__all__ = [
    "NTKMonitor",
    "empirical_ntk",
    "jacobian",
    "jacobian_loop",
    "lanczos_extreme",
    "mlp_ntk",
    "ntk_matvec",
    "ntk_min_eigenvalue",
    "param_dict",
    "relative_change",
    "two_layer_jacobian",
    "two_layer_ntk",
    "weight_distance",
]

#: largest NTK side (n * outputs) that ``ntk_min_eigenvalue(method="auto")`` solves exactly.
MAX_EXACT = 2048


def param_dict(model: nn.Module) -> dict[str, Tensor]:
    """The trainable parameters as a detached name -> tensor dict (what ``torch.func`` takes).

    Example:
        >>> sorted(param_dict(torch.nn.Linear(2, 1)))
        ['bias', 'weight']
    """
    out = {k: v.detach() for k, v in model.named_parameters() if v.requires_grad}
    if not out:
        raise ValueError("the model has no trainable parameters")
    return out


def _check_batch(x: Tensor) -> None:
    if not isinstance(x, Tensor) or x.ndim < 1 or x.shape[0] == 0:
        raise ValueError("x must be a tensor with a non-empty leading batch dimension")


def jacobian(model: nn.Module, x: Tensor, params: Mapping[str, Tensor] | None = None) -> Tensor:
    r"""The Jacobian :math:`J \in R^{nk \times P}` of the model's outputs on a batch.

    Each sample goes through the model alone (``vmap`` of ``jacrev``), so the model must not
    mix samples (no batch norm in training mode).

    Args:
        model: any ``nn.Module`` mapping a batch ``(n, ...)`` to ``(n,)`` or ``(n, k)``.
        x: the batch.
        params: parameters to differentiate at (default: the model's own).

    Returns:
        ``J`` with rows ``i * k + o`` and columns in ``named_parameters`` order, flattened.

    Example:
        >>> lin = torch.nn.Linear(3, 1, bias=False)
        >>> x = torch.randn(4, 3)
        >>> torch.allclose(jacobian(lin, x), x)
        True
    """
    _check_batch(x)
    params = dict(params) if params is not None else param_dict(model)

    def f(p: dict[str, Tensor], xi: Tensor) -> Tensor:
        return functional_call(model, p, (xi.unsqueeze(0),)).reshape(-1)

    jac = vmap(jacrev(f), in_dims=(None, 0))(params, x)
    n = x.shape[0]
    blocks = [j.reshape(n, j.shape[1], -1) for j in jac.values()]
    return torch.cat(blocks, dim=2).reshape(-1, sum(b.shape[2] for b in blocks))


def jacobian_loop(model: nn.Module, x: Tensor) -> Tensor:
    """The same Jacobian as :func:`jacobian`, by one ``autograd.grad`` per sample and output.

    The naive reference: ``n * k`` backward passes.

    Example:
        >>> lin = torch.nn.Linear(3, 2)
        >>> x = torch.randn(4, 3)
        >>> torch.allclose(jacobian_loop(lin, x), jacobian(lin, x))
        True
    """
    _check_batch(x)
    params = [p for p in model.parameters() if p.requires_grad]
    rows = []
    for i in range(x.shape[0]):
        out = model(x[i : i + 1]).reshape(-1)
        for o in range(out.shape[0]):
            grads = torch.autograd.grad(out[o], params, retain_graph=o + 1 < out.shape[0])
            rows.append(torch.cat([g.reshape(-1) for g in grads]))
    return torch.stack(rows)


def empirical_ntk(model: nn.Module, x: Tensor, x2: Tensor | None = None) -> Tensor:
    r"""The empirical NTK :math:`K(x, x_2) = J(x) J(x_2)^\top` (``x2`` defaults to ``x``).

    Example:
        >>> lin = torch.nn.Linear(3, 1, bias=False)
        >>> x = torch.randn(4, 3)
        >>> torch.allclose(empirical_ntk(lin, x), x @ x.T)
        True
    """
    j = jacobian(model, x)
    j2 = j if x2 is None else jacobian(model, x2)
    return j @ j2.mT


def ntk_matvec(model: nn.Module, x: Tensor) -> tuple[Callable[[Tensor], Tensor], int]:
    r"""The implicit product :math:`v \mapsto J(J^\top v)` and the side :math:`nk` of ``K``.

    :math:`J^\top v` is one reverse-mode pass (``vjp``) and :math:`J u` one forward-mode pass
    (``jvp``) through the whole batch; :math:`J` is never formed.

    Example:
        >>> lin = torch.nn.Linear(3, 1, bias=False)
        >>> x = torch.randn(4, 3); v = torch.randn(4)
        >>> mv, n = ntk_matvec(lin, x)
        >>> n, torch.allclose(mv(v), x @ (x.T @ v), atol=1e-5)
        (4, True)
    """
    _check_batch(x)
    params = param_dict(model)

    def f(p: dict[str, Tensor]) -> Tensor:
        return functional_call(model, p, (x,)).reshape(-1)

    out, vjp_fn = vjp(f, params)
    size = out.shape[0]

    def matvec(v: Tensor) -> Tensor:
        if v.shape != (size,):
            raise ValueError(f"v must have shape ({size},), got {tuple(v.shape)}")
        (ct,) = vjp_fn(v.to(out.dtype))
        return jvp(f, (params,), (ct,))[1]

    return matvec, size


def lanczos_extreme(
    matvec: Callable[[Tensor], Tensor],
    n: int,
    *,
    max_iter: int | None = None,
    tol: float = 1e-8,
    dtype: torch.dtype = torch.float64,
    device: torch.device | str = "cpu",
    seed: int = 0,
    check_every: int = 8,
) -> tuple[float, float, int]:
    r"""Smallest and largest eigenvalue of a symmetric operator by Lanczos.

    Full reorthogonalisation (two Gram-Schmidt passes per step) keeps the Krylov basis
    orthonormal, so after :math:`n` steps the Ritz values are the exact spectrum. It stops
    early when both extreme Ritz pairs have residual :math:`|\beta_j s_{j,i}| \le`
    ``tol`` :math:`\cdot |\theta_{\max}|` (or the Krylov space became invariant).

    Args:
        matvec: ``v -> A v`` for ``v`` of shape ``(n,)``.
        n: the operator's side.
        max_iter: most steps (default ``n``).
        tol: relative residual tolerance.
        dtype, device: of the Krylov basis (the product is called with this dtype).
        seed: seed of the start vector.
        check_every: test convergence (an ``eigh`` of the tridiagonal matrix) every this many
            steps after the first eight, and at the last step.

    Returns:
        ``(lambda_min, lambda_max, iterations)``.

    Example:
        >>> a = torch.diag(torch.arange(1.0, 11.0, dtype=torch.float64))
        >>> lo, hi, _ = lanczos_extreme(lambda v: a @ v, 10)
        >>> round(lo, 8), round(hi, 8)
        (1.0, 10.0)
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be a positive int, got {n!r}")
    max_iter = n if max_iter is None else min(int(max_iter), n)
    if max_iter < 1:
        raise ValueError(f"max_iter must be >= 1, got {max_iter!r}")
    if isinstance(check_every, bool) or not isinstance(check_every, int) or check_every < 1:
        raise ValueError(f"check_every must be a positive int, got {check_every!r}")
    gen = torch.Generator(device="cpu").manual_seed(seed)
    q = torch.randn(n, generator=gen, dtype=dtype).to(device)
    q = q / q.norm()
    basis = torch.zeros(max_iter, n, dtype=dtype, device=device)
    alphas: list[float] = []
    betas: list[float] = []
    lo = hi = float("nan")
    scale_est = 0.0
    for j in range(max_iter):
        basis[j] = q
        w = matvec(q).to(dtype)
        alpha = float(q @ w)
        w = w - alpha * q
        if j > 0:
            w = w - betas[-1] * basis[j - 1]
        for _ in range(2):
            w = w - basis[: j + 1].mT @ (basis[: j + 1] @ w)
        beta = float(w.norm())
        alphas.append(alpha)
        scale_est = max(scale_est, abs(alpha), beta)
        # a (near-)invariant Krylov space is always checked: never divide by a tiny beta
        small = beta <= max(tol, 1e-10) * scale_est
        if not (small or j + 1 == max_iter or j < 8 or j % check_every == 0):
            betas.append(beta)
            q = w / beta
            continue
        tri = torch.diag(torch.tensor(alphas, dtype=torch.float64))
        if j > 0:
            off = torch.tensor(betas, dtype=torch.float64)
            tri = tri + torch.diag(off, 1) + torch.diag(off, -1)
        theta, s = torch.linalg.eigh(tri)
        lo, hi = float(theta[0]), float(theta[-1])
        scale = max(abs(lo), abs(hi), 1e-300)
        res_lo, res_hi = abs(beta * float(s[-1, 0])), abs(beta * float(s[-1, -1]))
        if beta <= tol * scale or (res_lo <= tol * scale and res_hi <= tol * scale):
            return lo, hi, j + 1
        betas.append(beta)
        q = w / beta
    return lo, hi, max_iter


def ntk_min_eigenvalue(
    model: nn.Module,
    x: Tensor,
    *,
    method: str = "auto",
    max_exact: int = MAX_EXACT,
    tol: float = 1e-8,
    max_iter: int | None = None,
) -> float:
    r""":math:`\lambda_{\min}` of the empirical NTK on a batch.

    Args:
        model, x: as in :func:`jacobian`.
        method: ``"exact"`` (form :math:`K = JJ^\top`, ``eigvalsh``), ``"lanczos"``
            (:func:`lanczos_extreme` on :func:`ntk_matvec`, :math:`J` never formed) or
            ``"auto"`` (exact up to ``max_exact`` rows, else Lanczos). When the exact route is
            asked for a batch above ``max_exact`` it falls back to Lanczos with a warning.
        max_exact: the largest :math:`nk` solved exactly.
        tol, max_iter: Lanczos options.

    Returns:
        The smallest eigenvalue (float).

    Example:
        >>> lin = torch.nn.Linear(3, 1, bias=False)
        >>> x = torch.eye(3)
        >>> round(ntk_min_eigenvalue(lin, x), 6)
        1.0
    """
    if method not in ("auto", "exact", "lanczos"):
        raise ValueError(f"method must be 'auto', 'exact' or 'lanczos', got {method!r}")
    _check_batch(x)
    if method != "lanczos":
        with torch.no_grad():
            probe = model(x[:1])
        size = x.shape[0] * probe.reshape(1, -1).shape[1]
        if size <= max_exact:
            k = empirical_ntk(model, x)
            return float(torch.linalg.eigvalsh(k.to(torch.float64))[0])
        warnings.warn(
            f"NTK side {size} exceeds max_exact={max_exact}: falling back to Lanczos on the "
            "implicit J J^T v product",
            UserWarning,
            stacklevel=2,
        )
    mv, size = ntk_matvec(model, x)
    dtype = next(iter(param_dict(model).values())).dtype
    lo, _, _ = lanczos_extreme(mv, size, tol=tol, max_iter=max_iter, dtype=dtype, device=x.device)
    return lo


def relative_change(current: Tensor, reference: Tensor) -> float:
    r""":math:`\|A_t - A_0\|_F / \|A_0\|_F`.

    Example:
        >>> relative_change(torch.tensor([3.0, 4.0]), torch.tensor([3.0, 0.0]))
        1.3333333333333333
    """
    if current.shape != reference.shape:
        raise ValueError(f"shapes differ: {tuple(current.shape)} vs {tuple(reference.shape)}")
    den = float(reference.norm())
    if den == 0.0:
        raise ValueError("the reference has zero norm: the relative change is undefined")
    return float((current - reference).norm()) / den


def weight_distance(
    params: Mapping[str, Tensor], reference: Mapping[str, Tensor]
) -> tuple[float, float]:
    r"""Distance of the weights from a reference: :math:`(\|\theta - \theta_0\|,
    \|\theta - \theta_0\| / \|\theta_0\|)` over all tensors together.

    Example:
        >>> weight_distance({"w": torch.ones(4)}, {"w": torch.zeros(4) + 2})
        (2.0, 0.5)
    """
    if set(params) != set(reference):
        raise ValueError("params and reference name different tensors")
    num = math.sqrt(sum(float((params[k] - reference[k]).pow(2).sum()) for k in params))
    den = math.sqrt(sum(float(reference[k].pow(2).sum()) for k in reference))
    return num, (num / den if den > 0 else math.inf)


class NTKMonitor:
    """A callback that records NTK stability measures every ``every`` steps.

    At construction it stores :math:`\\theta_0`, :math:`J_0`, :math:`K_0` and
    :math:`\\lambda_{\\min}(K_0)`; each recording call appends a dict with ``step``,
    ``lambda_min``, ``lambda_min_ratio`` (:math:`\\lambda_{\\min}(K_t)/\\lambda_{\\min}(K_0)`),
    ``ntk_change``, ``jacobian_change`` (relative Frobenius changes), ``weight_distance`` and
    ``weight_distance_rel`` to :attr:`history`.

    Args:
        model: the model being trained (read, never changed).
        x: the probe batch.
        every: record when ``step % every == 0``.

    Example:
        >>> net = torch.nn.Sequential(torch.nn.Linear(2, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
        >>> mon = NTKMonitor(net, torch.randn(5, 2), every=2)
        >>> mon(0)["jacobian_change"]
        0.0
    """

    def __init__(self, model: nn.Module, x: Tensor, every: int = 1):
        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            raise ValueError(f"every must be a positive int, got {every!r}")
        _check_batch(x)
        self.model, self.x, self.every = model, x, every
        self.theta0 = {k: v.clone() for k, v in param_dict(model).items()}
        self.j0 = jacobian(model, x)
        self.k0 = self.j0 @ self.j0.mT
        self.lambda_min0 = float(torch.linalg.eigvalsh(self.k0.to(torch.float64))[0])
        self.history: list[dict[str, float]] = []

    def measure(self) -> dict[str, float]:
        """All measures at the model's current parameters."""
        j = jacobian(self.model, self.x)
        k = j @ j.mT
        lam = float(torch.linalg.eigvalsh(k.to(torch.float64))[0])
        dist, rel = weight_distance(param_dict(self.model), self.theta0)
        return {
            "lambda_min": lam,
            "lambda_min_ratio": lam / self.lambda_min0 if self.lambda_min0 > 0 else math.nan,
            "ntk_change": relative_change(k, self.k0),
            "jacobian_change": relative_change(j, self.j0),
            "weight_distance": dist,
            "weight_distance_rel": rel,
        }

    def __call__(self, step: int) -> dict[str, float] | None:
        """Record (and return) the measures if ``step`` is a multiple of ``every``."""
        if step % self.every:
            return None
        rec = {"step": float(step), **self.measure()}
        self.history.append(rec)
        return rec


def two_layer_jacobian(w: Tensor, a: Tensor, x: Tensor, activation: str = "tanh") -> Tensor:
    r"""Closed-form Jacobian of :math:`f(x) = \sum_j a_j\sigma(w_j^\top x)`, batched over nets.

    :math:`\partial f(x_i)/\partial w_{jk} = a_j\sigma'(w_j^\top x_i)x_{ik}` and
    :math:`\partial f(x_i)/\partial a_j = \sigma(w_j^\top x_i)`; columns in the order of
    :class:`~langevin_ntk.models.MLP` (standard parameterisation, depth 2): ``W`` row-major,
    then ``a``.

    Args:
        w: ``(..., m, d)`` first-layer weights.
        a: ``(..., m)`` output weights.
        x: ``(n, d)`` inputs.
        activation: a name in :data:`~langevin_ntk.models.ACTIVATIONS`.

    Returns:
        ``(..., n, m d + m)``.

    Example:
        >>> from langevin_ntk.models import MLP
        >>> net = MLP(3, 4, 2, "tanh", generator=torch.Generator().manual_seed(0))
        >>> x = torch.randn(5, 3)
        >>> j = two_layer_jacobian(net.weights[0], net.weights[1][0], x)
        >>> torch.allclose(j, jacobian(net, x), atol=1e-6)
        True
    """
    act = get_activation(activation)
    if w.ndim < 2 or a.shape != w.shape[:-1] or x.ndim != 2 or x.shape[1] != w.shape[-1]:
        raise ValueError(
            f"need w (..., m, d), a (..., m), x (n, d); got {tuple(w.shape)}, "
            f"{tuple(a.shape)}, {tuple(x.shape)}"
        )
    z = x @ w.mT  # (..., n, m)
    jw = (a[..., None, :] * act.deriv(z))[..., None] * x[:, None, :]  # (..., n, m, d)
    return torch.cat([jw.flatten(-2), act.fn(z)], dim=-1)


def two_layer_ntk(w: Tensor, a: Tensor, x: Tensor, activation: str = "tanh") -> Tensor:
    r"""Closed-form NTK :math:`\Phi\Phi^\top + (XX^\top)\odot(\Psi\,\mathrm{diag}(a^2)\Psi^\top)`
    of the two-layer network (:math:`\Phi = \sigma(XW^\top)`, :math:`\Psi = \sigma'(XW^\top)`),
    batched over leading dimensions of ``w`` and ``a``, without forming the Jacobian.

    Example:
        >>> from langevin_ntk.models import MLP
        >>> net = MLP(3, 4, 2, "tanh", generator=torch.Generator().manual_seed(0))
        >>> x = torch.randn(5, 3)
        >>> k = two_layer_ntk(net.weights[0], net.weights[1][0], x)
        >>> torch.allclose(k, empirical_ntk(net, x), atol=1e-5)
        True
    """
    act = get_activation(activation)
    if w.ndim < 2 or a.shape != w.shape[:-1] or x.ndim != 2 or x.shape[1] != w.shape[-1]:
        raise ValueError(
            f"need w (..., m, d), a (..., m), x (n, d); got {tuple(w.shape)}, "
            f"{tuple(a.shape)}, {tuple(x.shape)}"
        )
    z = x @ w.mT
    phi, psi = act.fn(z), act.deriv(z)
    return phi @ phi.mT + (x @ x.mT) * ((psi * a[..., None, :] ** 2) @ psi.mT)


def mlp_ntk(model: nn.Module, x: Tensor) -> Tensor:
    r"""Exact empirical NTK of a scalar-output :class:`~langevin_ntk.models.MLP` without J.

    A dense layer :math:`z_l = c_l h_{l-1} W_l^\top` has per-sample Jacobian block
    :math:`c_l\,\delta_l(x)\otimes h_{l-1}(x)` with :math:`\delta_l = \partial f/\partial z_l`,
    so its NTK contribution is the Hadamard product

    .. math::

        K_l = c_l^2\,(\delta_l\delta_l^\top) \odot (h_{l-1}h_{l-1}^\top),
        \qquad K = \sum_l K_l,

    computed by one forward and one hand-written backward pass over the batch:
    :math:`O(n^2\sum_l(\mathrm{fan\_in}_l + \mathrm{fan\_out}_l))` work and :math:`O(n\cdot
    \mathrm{width})` memory, against :math:`O(n^2 P)` and :math:`O(nP)` for :math:`JJ^\top`.

    Args:
        model: an ``MLP`` with ``d_out == 1``.
        x: ``(n, d_in)``.

    Returns:
        ``K`` of shape ``(n, n)``.

    Example:
        >>> from langevin_ntk.models import MLP
        >>> net = MLP(3, 8, 3, "tanh", generator=torch.Generator().manual_seed(0))
        >>> x = torch.randn(5, 3)
        >>> torch.allclose(mlp_ntk(net, x), empirical_ntk(net, x), atol=1e-5)
        True
    """
    from .models import MLP

    if not isinstance(model, MLP) or model.d_out != 1:
        raise ValueError("mlp_ntk needs a langevin_ntk.models.MLP with d_out == 1")
    _check_batch(x)
    ntk_par = model.parameterization == "ntk"
    ws = [w.detach() for w in model.weights]
    scale = [1.0 / math.sqrt(w.shape[1]) if ntk_par else 1.0 for w in ws]
    hs, zs = [x], []
    with torch.no_grad():
        for w, c in zip(ws[:-1], scale[:-1], strict=True):
            zs.append(c * (hs[-1] @ w.mT))
            hs.append(model.act.fn(zs[-1]))
        k = scale[-1] ** 2 * (hs[-1] @ hs[-1].mT)
        g = (scale[-1] * ws[-1]).expand(x.shape[0], -1)  # df/dh_{L-1}
        for layer in range(len(ws) - 2, -1, -1):
            delta = g * model.act.deriv(zs[layer])
            k = k + scale[layer] ** 2 * (delta @ delta.mT) * (hs[layer] @ hs[layer].mT)
            g = scale[layer] * (delta @ ws[layer])
    return k
