r"""``AdaptiveLMO``: per-layer data-driven geometry between SGD and Muon (and Adam and MuAdam).

Update of a matrix parameter :math:`W` (its matrix view, see :mod:`adaptive_lmo.routing`) with
gradient :math:`g_t`:

.. math::

    \text{no preconditioning:}\quad & B_t = \mu B_{t-1} + g_t,\quad
        P_t = g_t + \mu B_t \ (\text{nesterov}) \text{ or } B_t \\
    \text{precondition="adam":}\quad & m_t = \beta_1 m_{t-1} + (1-\beta_1) g_t,\quad
        v_t = \beta_2 v_{t-1} + (1-\beta_2) g_t^2,\quad
        P_t = \frac{m_t/(1-\beta_1^t)}{\sqrt{v_t/(1-\beta_2^t)} + \epsilon} \\
    & W \leftarrow (1 - \gamma\lambda) W - \gamma\,\rho(W)\,\Phi_{a}(P_t),

with :math:`\Phi_a(P) = U\mathrm{diag}(s^a)V^\top`
(:func:`adaptive_lmo.fractional.fractional_update`,
``scale="none"`` or ``"polar"``), :math:`\rho` the optional shape factor ``adjust_lr_fn`` and
:math:`\beta_1` = ``momentum``. The four corners (``scale="none"``):

=====================  =========  =======================================================
precondition           a          the update is exactly
=====================  =========  =======================================================
None                   1          SGD with momentum (``torch.optim.SGD``, dampening 0)
None                   0          Muon with the exact polar factor
"adam"                 1          Adam (``torch.optim.Adam``; AdamW with weight decay)
"adam"                 0          MuAdam: :math:`W \leftarrow W - \gamma\,\mathrm{msign}(P_t)`
=====================  =========  =======================================================

With ``exponent="auto"`` the exponent of each layer is re-chosen every ``update_every`` steps
by :func:`adaptive_lmo.criterion.choose_exponent` from the SVD of :math:`P_t`, the alignments
:math:`d_i = u_i^\top \hat g v_i` (:math:`\hat g` = the bias-corrected first moment with
preconditioning, else :math:`P_t`, so :math:`d = s`), the input-activation second moment in
the right singular basis (forward hooks) and, with ``curvature="kfac"`` (default), the second
moment of the gradients back-propagated to the layer's output in the left singular basis
(tensor hooks on the module's output) (:mod:`adaptive_lmo.stats`). Non-matrix parameters go
to AdamW (:mod:`adaptive_lmo.routing`).

Example:
    >>> import torch
    >>> from torch import nn
    >>> torch.manual_seed(0) and None
    >>> model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 16), nn.Linear(16, 1))
    >>> opt = AdaptiveLMO(model, lr=0.02)
    >>> x, y = torch.randn(32, 8), torch.randn(32, 1)
    >>> for _ in range(3):
    ...     opt.zero_grad()
    ...     nn.functional.mse_loss(model(x), y).backward()
    ...     opt.step()
    >>> sorted(opt.geometry())
    ['0.weight', '2.weight']
"""

from __future__ import annotations

import math
import warnings
import weakref
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor, nn
from torch.optim import Optimizer

from .criterion import (
    RULES,
    alignment,
    choose_exponent,
    curvature_along,
    curvature_matrix,
    ledoit_wolf_shrinkage,
    row_moments,
    shrink_to_identity,
    switch_gain,
    t_quantile,
)
from .fractional import METHODS, SCALES, check_exponent, fractional_update, schatten_p, svd_factors
from .routing import VIEWS, matrix_shape, scan_module
from .stats import ActivationCollector

__all__ = ["AdaptiveLMO"]

PRECONDITIONERS = (None, "adam")
STATS = ("same_batch", "next_batch")
CURVATURES = ("input", "kfac")
SHRINKAGES = ("ledoit_wolf", "none")
ADJUST_LR = (None, "original", "match_rms_adamw", "spectral_unclamped")


def _adjust(fn: str | None, shape: tuple[int, ...]) -> float:
    A, B = shape[-2], shape[-1]
    if fn is None:
        return 1.0
    if fn == "original":
        return math.sqrt(max(1.0, A / B))
    if fn == "match_rms_adamw":
        return 0.2 * math.sqrt(max(A, B))
    return math.sqrt(A / B)


def _check_nonneg(name: str, v: object, upper: float | None = None, strict: bool = False) -> None:
    ok = isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
    ok = ok and (v > 0 if strict else v >= 0) and (upper is None or v < upper)
    if not ok:
        rng = f"{'(' if strict else '['}0, {upper if upper is not None else 'inf'})"
        raise ValueError(f"{name} must be a finite number in {rng}, got {v!r}")


def _validate_lmo(g: dict[str, Any]) -> None:
    _check_nonneg("lr", g["lr"])
    _check_nonneg("momentum", g["momentum"], 1.0)
    _check_nonneg("beta2", g["beta2"], 1.0)
    _check_nonneg("eps", g["eps"])
    _check_nonneg("weight_decay", g["weight_decay"])
    _check_nonneg("direction_floor", g.get("direction_floor", 0.0))
    if g["precondition"] not in PRECONDITIONERS:
        raise ValueError(f"precondition must be None or 'adam', got {g['precondition']!r}")
    if g["exponent"] != "auto":
        g["exponent"] = check_exponent(g["exponent"], "exponent (or 'auto')")
    g["fallback_exponent"] = check_exponent(g["fallback_exponent"], "fallback_exponent")
    ue = g["update_every"]
    if isinstance(ue, bool) or not isinstance(ue, int) or ue < 1:
        raise ValueError(f"update_every must be a positive int, got {ue!r}")
    if g["criterion"] not in RULES:
        raise ValueError(f"criterion must be one of {RULES}, got {g['criterion']!r}")
    if g["method"] not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {g['method']!r}")
    if g["scale"] not in SCALES:
        raise ValueError(f"scale must be one of {SCALES}, got {g['scale']!r}")
    if g["adjust_lr_fn"] not in ADJUST_LR:
        raise ValueError(f"adjust_lr_fn must be one of {ADJUST_LR}, got {g['adjust_lr_fn']!r}")
    if g.get("curvature", "kfac") not in CURVATURES:
        raise ValueError(f"curvature must be one of {CURVATURES}, got {g['curvature']!r}")
    sc = g.get("switch_confidence", 0.0)
    if not (isinstance(sc, int | float) and not isinstance(sc, bool) and (sc == 0 or 0.5 < sc < 1)):
        raise ValueError(f"switch_confidence must be 0 (off) or in (0.5, 1), got {sc!r}")
    if g.get("shrinkage", "none") not in SHRINKAGES:
        raise ValueError(f"shrinkage must be one of {SHRINKAGES}, got {g['shrinkage']!r}")
    if g.get("stats", "next_batch") not in STATS:
        raise ValueError(f"stats must be one of {STATS}, got {g['stats']!r}")
    if g.get("matrix_view", "auto") not in VIEWS:
        raise ValueError(f"matrix_view must be one of {VIEWS}, got {g['matrix_view']!r}")
    if not isinstance(g["nesterov"], bool):
        raise ValueError(f"nesterov must be a bool, got {g['nesterov']!r}")


def _validate_adamw(g: dict[str, Any]) -> None:
    _check_nonneg("adamw lr", g["lr"])
    b = g["betas"]
    if not (isinstance(b, tuple | list) and len(b) == 2):
        raise ValueError(f"adamw_betas must be a pair, got {b!r}")
    _check_nonneg("adamw beta1", b[0], 1.0)
    _check_nonneg("adamw beta2", b[1], 1.0)
    _check_nonneg("adamw eps", g["eps"])
    _check_nonneg("adamw weight_decay", g["weight_decay"])


class AdaptiveLMO(Optimizer):
    r"""Matrix layers: the fractional LMO update with a per-layer, data-chosen exponent.

    Args:
        model_or_params: an ``nn.Module`` (routing and activation hooks automatic), or an
            iterable of tensors / param-group dicts (a dict may set ``"algorithm"``: ``"lmo"``
            or ``"adamw"``; bare tensors with >= 2 dims take the matrix update). Bare
            parameters cannot be hooked, so ``exponent="auto"`` needs the module.
        lr: learning rate :math:`\gamma` of the matrix update.
        momentum: :math:`\mu` (SGD convention, no dampening) or, with ``precondition="adam"``,
            Adam's :math:`\beta_1`.
        nesterov: Nesterov momentum (no preconditioning only).
        precondition: None or ``"adam"`` (elementwise second moments, see the module docstring).
        beta2, eps: Adam's second-moment decay and epsilon (``precondition="adam"``).
        exponent: ``"auto"`` (the criterion) or a fixed float in [0, 1].
        update_every: the direction's SVD for the criterion is taken on steps 1, 1 + k,
            1 + 2k, ...; the exponent is chosen on steps 2, 2 + k, ... (``stats="next_batch"``)
            or on the same steps (``stats="same_batch"``).
        stats: where the activation energies come from. ``"next_batch"`` (default): the
            right factors and singular values of the direction of step 1 + jk are kept until
            the next step, whose forward (fresh data, not in that direction) supplies the
            sketch; the exponent is chosen then and used from that step on, so step 1 uses
            ``fallback_exponent``. No extra SVD; holds ``(n + 1) * rank`` numbers per layer
            for one step. ``"same_batch"``: the forward of the criterion step itself, whose
            gradient is already in the direction, which biases the choice towards a = 0
            (see the README).
        criterion: ``"surrogate"`` (maximise the surrogate decrease) or ``"loglog"``.
        curvature: the surrogate's curvature model. ``"kfac"`` (default): input activations
            and also the second moment :math:`B = E[g g^\top]` of the gradients back-propagated
            to the layer's output (a tensor hook on the module's output, sketched like the
            inputs), combined Kronecker-style, :math:`M = (U^\top B U)\circ(V^\top\Sigma
            V)` (see :mod:`adaptive_lmo.criterion`); these are the gradients of the user's
            own backward pass (an empirical-Fisher factor), no extra pass. A layer whose
            output gradients were not recorded falls back to ``"input"`` for that choice (with a
            warning). ``"input"``: the layer's output is read as the loss's (identity output
            Hessian), only input activations enter.
        switch_confidence: the switch test (``curvature="kfac"``; 0 turns it off). When the
            output factor rests on fewer effective rows than its dimension (Kish
            :math:`n_{eff} < r` of the surrogate's per-row denominator terms), the exponent
            changes only if the surrogate's log-gain exceeds the one-sided Student-t
            quantile at this level (df :math:`\lfloor n_{eff}\rfloor - 1`; below 2 rows it
            is kept) times its standard error over rows
            (:func:`adaptive_lmo.criterion.switch_gain`); otherwise the layer keeps its
            exponent (``geometry()`` source ``"kept: a = ... not resolved ..."``). Why: see
            the README ("Too few effective rows").
        shrinkage: how the output factor's estimate is regularised (``curvature="kfac"``).
            ``"none"`` (default): the raw empirical second moment. ``"ledoit_wolf"``:
            :math:`U^\top\hat B U` is shrunk towards its
            trace-scaled identity by the Ledoit-Wolf weight computed from the same rows
            (:func:`adaptive_lmo.criterion.ledoit_wolf_shrinkage`): close to 0 when many
            rows agree, close to 1 when a few rows carry the estimate, in which case the
            choice tends to the input-only criterion's (measured worse on ``image``).
            ``geometry()`` reports the weight as ``"output_shrinkage"``. Why:
            see the README ("Too few effective rows").
        method: ``"svd"`` or ``"iterative"`` (matmul-only fractional power).
        scale: ``"polar"`` (every exponent has the polar factor's Frobenius norm),
            ``"spectral"`` (its spectral norm: no member steps further than Muon in any
            direction) or ``"none"``.
        weight_decay: decoupled, :math:`W \leftarrow (1 - \gamma\lambda)W`.
        adjust_lr_fn: None (1), or torch.optim.Muon's ``"original"``, ``"match_rms_adamw"``,
            ``"spectral_unclamped"`` shape factors.
        fallback_exponent: used by ``"auto"`` layers that have no activation statistics yet
            (no hook could be attached, or the layer has not run in a recorded forward, as
            with weights used functionally, e.g. ``nn.MultiheadAttention``'s projections).
            One ``UserWarning`` names every such parameter, once per parameter, on its first
            criterion step; ``geometry()`` reports the fallback as the layer's source.
        direction_floor: a Frobenius norm :math:`\phi` below which the direction is treated as
            rounding noise (default 1e-7, torch.optim.Muon's ``eps``; 0 disables). The update
            becomes :math:`\Phi_a(P)\cdot\min(1, \|P\|_F/\phi)` (per matrix of a batched
            view), so its size falls linearly with the direction once that is below the floor
            instead of staying at the polar factor's, and an ``"auto"`` layer keeps its exponent
            on a criterion step whose scored direction is below the floor (``geometry()``
            source ``"kept: direction below direction_floor ..."``). Every corner is exact for
            :math:`\|P\|_F \ge \phi`. Why: see the README ("Vanishing directions").
        max_rows: rows of the activation sketch per layer.
        adamw_lr, adamw_betas, adamw_eps, adamw_weight_decay: the AdamW group.
        route: ``(name, param, module) -> "lmo" | "adamw" | None`` override of the routing.
        fixed_exponents: pins the exponent of some matrix parameters while the rest follow
            ``exponent`` (with an ``nn.Module`` only): ``{name: a}`` or
            ``(name, param, module) -> a | None``; pinned parameters get their own param
            group(s) with ``"exponent": a`` and no hooks. E.g. ``lambda n, p, m: 0.0 if
            ".attn." in n else None`` keeps attention projections at Muon's geometry.
        head: the output head excluded from the matrix update: True (last ``nn.Linear``), a
            module name, or None.
        sync_stats: average the activation energies over ``torch.distributed`` ranks (when a
            process group with more than one rank is initialised), so every rank picks the
            same exponent.
        seed: seed of the sketch's row sampling.
    """

    def __init__(
        self,
        model_or_params: nn.Module | Iterable[Tensor] | Iterable[dict[str, Any]],
        lr: float = 0.02,
        momentum: float = 0.95,
        *,
        nesterov: bool = True,
        precondition: str | None = None,
        beta2: float = 0.999,
        eps: float = 1e-8,
        exponent: str | float = "auto",
        update_every: int = 10,
        stats: str = "next_batch",
        criterion: str = "surrogate",
        curvature: str = "kfac",
        shrinkage: str = "none",
        switch_confidence: float = 0.975,
        method: str = "svd",
        scale: str = "polar",
        weight_decay: float = 0.0,
        adjust_lr_fn: str | None = None,
        fallback_exponent: float = 0.0,
        direction_floor: float = 1e-7,
        max_rows: int = 256,
        adamw_lr: float = 1e-3,
        adamw_betas: tuple[float, float] = (0.9, 0.999),
        adamw_eps: float = 1e-8,
        adamw_weight_decay: float = 0.0,
        route: Callable[[str, Tensor, nn.Module], str | None] | None = None,
        head: str | bool | None = True,
        fixed_exponents: (
            Mapping[str, float] | Callable[[str, Tensor, nn.Module], float | None] | None
        ) = None,
        sync_stats: bool = True,
        seed: int = 0,
    ) -> None:
        if isinstance(max_rows, bool) or not isinstance(max_rows, int) or max_rows < 1:
            raise ValueError(f"max_rows must be a positive int, got {max_rows!r}")
        lmo_defaults = {
            "algorithm": "lmo",
            "lr": lr,
            "momentum": momentum,
            "nesterov": nesterov,
            "precondition": precondition,
            "beta2": beta2,
            "eps": eps,
            "exponent": exponent,
            "update_every": update_every,
            "stats": stats,
            "criterion": criterion,
            "curvature": curvature,
            "shrinkage": shrinkage,
            "switch_confidence": switch_confidence,
            "method": method,
            "scale": scale,
            "weight_decay": weight_decay,
            "adjust_lr_fn": adjust_lr_fn,
            "fallback_exponent": fallback_exponent,
            "direction_floor": direction_floor,
            "matrix_view": "auto",
        }
        adamw = {
            "algorithm": "adamw",
            "lr": adamw_lr,
            "betas": tuple(adamw_betas),
            "eps": adamw_eps,
            "weight_decay": adamw_weight_decay,
        }
        _validate_lmo(dict(lmo_defaults))
        _validate_adamw(adamw)
        self._names: dict[int, str] = {}
        self._views: dict[int, str] = {}
        self._modules: dict[int, nn.Module | None] = {}
        groups: list[dict[str, Any]] = []
        if isinstance(model_or_params, nn.Module):
            infos = scan_module(model_or_params, route=route, head=head)
            for info in infos:
                self._names[id(info.param)] = info.name
                self._views[id(info.param)] = info.view
                self._modules[id(info.param)] = info.module
            lmo = [i for i in infos if i.algorithm == "lmo"]
            ad_ps = [i.param for i in infos if i.algorithm == "adamw"]
            lmo_ps, fixed = self._split_fixed(lmo, fixed_exponents)
            if lmo_ps:
                groups.append({"params": lmo_ps, "algorithm": "lmo"})
            for a, ps in fixed.items():
                groups.append({"params": ps, "algorithm": "lmo", "exponent": a})
            if ad_ps:
                groups.append({"params": ad_ps, **adamw})
            if not groups:
                raise ValueError("the model has no trainable parameters")
        else:
            if fixed_exponents is not None:
                raise ValueError(
                    "fixed_exponents selects parameters by module name: pass the nn.Module, or "
                    "give param groups their own 'exponent'"
                )
            groups = self._groups_from_params(model_or_params, adamw)
        self._collector = ActivationCollector(max_rows, seed)
        self._finalizer = weakref.finalize(
            self, ActivationCollector.remove_handles, self._collector.handles
        )
        self._warned: set[tuple[int, str]] = set()
        self._fallbacks: list[tuple[Tensor, bool]] = []
        self._manual: set[int] = set()
        self.sync_stats = bool(sync_stats)
        self._has_model = isinstance(model_or_params, nn.Module)
        super().__init__(groups, lmo_defaults)
        self._attach_hooks()
        self._refresh_due()

    # -- construction -----------------------------------------------------------------------

    @staticmethod
    def _split_fixed(
        infos: list[Any], fixed: Mapping[str, float] | Callable[..., float | None] | None
    ) -> tuple[list[Tensor], dict[float, list[Tensor]]]:
        """Matrix parameters on ``exponent``'s setting, and those ``fixed_exponents`` pins."""
        if fixed is None:
            return [i.param for i in infos], {}
        if isinstance(fixed, Mapping):
            unknown = set(fixed) - {i.name for i in infos}
            if unknown:
                raise ValueError(
                    f"fixed_exponents names {sorted(unknown)}, which are not matrix parameters "
                    "on the LMO update (see opt.routing())"
                )
            pick = lambda name, p, m: fixed.get(name)  # noqa: E731
        elif callable(fixed):
            pick = fixed
        else:
            raise ValueError(
                f"fixed_exponents must be a mapping, a callable or None, got {type(fixed).__name__}"
            )
        free: list[Tensor] = []
        pinned: dict[float, list[Tensor]] = {}
        for i in infos:
            a = pick(i.name, i.param, i.module)
            if a is None:
                free.append(i.param)
            else:
                a = check_exponent(a, f"fixed_exponents[{i.name!r}]")
                pinned.setdefault(a, []).append(i.param)
        return free, pinned

    def _groups_from_params(self, params: Any, adamw: dict[str, Any]) -> list[dict[str, Any]]:
        items = list(params)
        if not items:
            raise ValueError("AdaptiveLMO got an empty parameter list")
        groups: list[dict[str, Any]] = []
        if all(isinstance(p, Tensor) for p in items):
            mats = [p for p in items if p.ndim >= 2]
            vecs = [p for p in items if p.ndim < 2]
            if mats:
                groups.append({"params": mats, "algorithm": "lmo"})
            if vecs:
                groups.append({"params": vecs, **adamw})
        else:
            for g in items:
                if not isinstance(g, dict):
                    raise ValueError(
                        f"params must be tensors or dicts, not a mix; got {type(g).__name__}"
                    )
                g = dict(g)
                ps = [g["params"]] if isinstance(g["params"], Tensor) else list(g["params"])
                g["params"] = ps
                algo = g.get("algorithm")
                if algo is None:
                    if all(p.ndim >= 2 for p in ps):
                        algo = "lmo"
                    elif all(p.ndim < 2 for p in ps):
                        algo = "adamw"
                    else:
                        raise ValueError(
                            "a param group mixes matrices and vectors: set its 'algorithm' to "
                            "'lmo' or 'adamw'"
                        )
                if algo == "adamw":
                    g = {**adamw, **g}
                elif algo != "lmo":
                    raise ValueError(f"algorithm must be 'lmo' or 'adamw', got {algo!r}")
                g["algorithm"] = algo
                groups.append(g)
        for gi, g in enumerate(groups):
            for pi, p in enumerate(g["params"]):
                self._names.setdefault(id(p), f"group{gi}.param{pi}")
                self._views.setdefault(id(p), "matrix" if p.ndim == 2 else "batched")
                self._modules.setdefault(id(p), None)
        return groups

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        super().add_param_group(param_group)
        g = self.param_groups[-1]
        if g["algorithm"] == "adamw":
            _validate_adamw(g)
            return
        _validate_lmo(g)
        for p in g["params"]:
            if p.ndim < 2:
                raise ValueError(
                    f"parameter {self._names.get(id(p), '?')} of shape {tuple(p.shape)} cannot "
                    "take the matrix update (needs >= 2 dims); route it to 'adamw'"
                )
            self._names.setdefault(id(p), f"group{len(self.param_groups) - 1}.param")
            self._views.setdefault(id(p), "matrix" if p.ndim == 2 else "batched")
            self._modules.setdefault(id(p), None)
        if g["exponent"] == "auto" and not getattr(self, "_has_model", True):
            raise ValueError(
                "exponent='auto' needs input-activation statistics, which come from forward "
                "hooks on the model's layers: pass the nn.Module instead of its parameters, or "
                "set a fixed exponent in [0, 1]"
            )

    def _attach_hooks(self) -> None:
        for g in self.param_groups:
            if g["algorithm"] != "lmo" or g["exponent"] != "auto":
                continue
            for p in g["params"]:
                mod = self._modules.get(id(p))
                if mod is None or id(p) in self._collector.hooked:
                    continue
                if getattr(mod, "weight", None) is p and self._view(p, g) in ("matrix", "conv"):
                    self._collector.hook(mod, p)

    def _view(self, p: Tensor, group: dict[str, Any]) -> str:
        forced = group.get("matrix_view", "auto")
        if forced != "auto":
            return forced
        return self._views.get(id(p), "matrix" if p.ndim == 2 else "batched")

    def _refresh_due(self) -> None:
        due, want_out = set(), set()
        for g in self.param_groups:
            if g["algorithm"] != "lmo" or g["exponent"] != "auto":
                continue
            for p in g["params"]:
                st = self.state.get(p, {})
                if g["stats"] == "next_batch":
                    if "pending_Vh" in st:  # the next step pairs its forward with these factors
                        due.add(id(p))
                elif st.get("step", 0) % g["update_every"] == 0:
                    due.add(id(p))
                if id(p) in due and g.get("curvature", "kfac") == "kfac":
                    want_out.add(id(p))
        self._collector.due = due
        self._collector.want_out = want_out

    # -- public helpers ---------------------------------------------------------------------

    def remove_hooks(self) -> None:
        """Remove every forward hook now (also done automatically when the optimizer is freed)."""
        self._finalizer()

    def record_activations(
        self, param: Tensor, features: Tensor, output_gradients: Tensor | None = None
    ) -> None:
        """Feed input-feature rows for ``param`` by hand (layers hooks cannot see, MoE experts).

        Args:
            param: a parameter on the matrix update.
            features: ``(N, n)`` rows for a matrix view ``(m, n)``, or ``(..., N, n)`` for a
                batched view ``(..., m, n)``. Ignored on steps that do not update the exponent.
            output_gradients: optional rows of the loss gradient at the layer's output,
                ``(N', m)`` or ``(..., N', m)``, for ``curvature="kfac"``; without them such a
                layer uses the input-only criterion (its ``geometry()`` source says so).
        """
        group = self._group_of(param)
        if group is None or group["algorithm"] != "lmo":
            raise ValueError("record_activations: the parameter is not on the matrix update")
        shape = matrix_shape(tuple(param.shape), self._view(param, group))
        if features.ndim < 2 or features.shape[-1] != shape[-1]:
            raise ValueError(
                f"record_activations: features of shape {tuple(features.shape)} do not match "
                f"the matrix view {shape} (need (..., N, {shape[-1]}))"
            )
        if features.shape[:-2] != shape[:-2]:
            raise ValueError(
                f"record_activations: leading dims {tuple(features.shape[:-2])} must equal the "
                f"batch dims {shape[:-2]} of the matrix view"
            )
        if output_gradients is not None and (
            output_gradients.ndim < 2
            or output_gradients.shape[-1] != shape[-2]
            or output_gradients.shape[:-2] != shape[:-2]
        ):
            raise ValueError(
                f"record_activations: output_gradients of shape "
                f"{tuple(output_gradients.shape)} do not match the matrix view {shape} "
                f"(need (..., N, {shape[-2]}) with leading dims {shape[:-2]})"
            )
        self._manual.add(id(param))
        if id(param) in self._collector.due:
            self._collector.add(id(param), features.detach())
            if output_gradients is not None:
                self._collector.add_output(id(param), output_gradients.detach())

    def _group_of(self, p: Tensor) -> dict[str, Any] | None:
        for g in self.param_groups:
            if any(q is p for q in g["params"]):
                return g
        return None

    def geometry(self) -> dict[str, dict[str, Any]]:
        """Each matrix layer's current exponent and where it came from.

        Returns:
            ``{name: {"exponent", "schatten_p", "source", "steps", "matrix_shape",
            "output_shrinkage"}}``; ``exponent`` is None before the first step of an
            ``"auto"`` layer; ``output_shrinkage`` is the Ledoit-Wolf weight of the last
            K-FAC choice (mean over a batched view), None when there was none.
        """
        out: dict[str, dict[str, Any]] = {}
        for g in self.param_groups:
            if g["algorithm"] != "lmo":
                continue
            for p in g["params"]:
                st = self.state.get(p, {})
                a = st.get("exponent", None if g["exponent"] == "auto" else g["exponent"])
                out[self._names[id(p)]] = {
                    "exponent": a,
                    "schatten_p": None if a is None else schatten_p(a),
                    "source": st.get("source", "fixed" if g["exponent"] != "auto" else "none"),
                    "steps": st.get("step", 0),
                    "matrix_shape": matrix_shape(tuple(p.shape), self._view(p, g)),
                    "output_shrinkage": st.get("output_shrinkage"),
                }
        return out

    def routing(self) -> dict[str, str]:
        """``{name: "lmo" | "adamw"}`` for every parameter."""
        return {self._names[id(p)]: g["algorithm"] for g in self.param_groups for p in g["params"]}

    def stats_nbytes(self) -> int:
        """Bytes held by pending activation sketches (nonzero only between forward and step)."""
        return self._collector.nbytes()

    def state_dict(self) -> dict[str, Any]:
        """torch's state dict plus the sketch sampler's RNG state (for exact resumption)."""
        sd = super().state_dict()
        sd["sketch_rng_state"] = self._collector.generator.get_state()
        return sd

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        state_dict = dict(state_dict)
        rng = state_dict.pop("sketch_rng_state", None)
        # torch.optim casts iterable state values element-wise, which turns a str into a
        # generator: keep the "source" strings (the switch test reads them) and put them back
        saved = state_dict.get("state", {})
        sources = {k: v["source"] for k, v in saved.items() if isinstance(v.get("source"), str)}
        ids = [i for g in state_dict.get("param_groups", []) for i in g["params"]]
        params = [p for g in self.param_groups for p in g["params"]]
        super().load_state_dict(state_dict)
        for i, p in zip(ids, params, strict=False):
            if i in sources and p in self.state:
                self.state[p]["source"] = sources[i]
        if rng is not None:
            self._collector.generator.set_state(rng)
        self._refresh_due()

    # -- the step ---------------------------------------------------------------------------

    def _warn(self, p: Tensor, kind: str, msg: str) -> None:
        key = (id(p), kind)
        if key not in self._warned:
            self._warned.add(key)
            warnings.warn(f"AdaptiveLMO, layer {self._names[id(p)]}: {msg}", stacklevel=3)

    def _direction(self, p: Tensor, g: dict[str, Any], shape: tuple[int, ...]):
        """Update the moments; return (direction P, gradient estimate) in the matrix view."""
        state = self.state[p]
        grad = p.grad
        if grad.is_sparse:
            raise RuntimeError("AdaptiveLMO does not support sparse gradients")
        if torch.is_complex(p):
            raise RuntimeError("AdaptiveLMO does not support complex parameters")
        state["step"] = state.get("step", 0) + 1
        t = state["step"]
        cd = torch.float64 if p.dtype == torch.float64 else torch.float32
        if g["precondition"] == "adam":
            if "exp_avg" not in state:
                state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            m, v = state["exp_avg"], state["exp_avg_sq"]
            b1, b2 = g["momentum"], g["beta2"]
            m.lerp_(grad, 1 - b1)
            v.mul_(b2).addcmul_(grad, grad, value=1 - b2)
            mhat = m.to(cd) / (1 - b1**t)
            denom = (v.to(cd).sqrt() / math.sqrt(1 - b2**t)).add_(g["eps"])
            P = mhat / denom
            return P.reshape(shape), mhat.reshape(shape)
        mu = g["momentum"]
        if mu != 0:
            if "momentum_buffer" not in state:
                state["momentum_buffer"] = torch.clone(grad).detach()
            else:
                state["momentum_buffer"].mul_(mu).add_(grad)
            buf = state["momentum_buffer"]
            P = grad.add(buf, alpha=mu) if g["nesterov"] else buf
        else:
            P = grad
        P = P.to(cd).reshape(shape)
        return P, P

    @torch.no_grad()
    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """One update of every parameter with a gradient; returns the closure's loss."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        items: list[dict[str, Any]] = []
        for g in self.param_groups:
            if g["algorithm"] == "adamw":
                self._adamw_step(g)
                continue
            for p in g["params"]:
                if p.grad is None:
                    continue
                shape = matrix_shape(tuple(p.shape), self._view(p, g))
                P, ghat = self._direction(p, g, shape)
                if not bool(torch.isfinite(P).all()):
                    raise ValueError(
                        f"AdaptiveLMO, layer {self._names[id(p)]}: non-finite gradient or "
                        f"momentum (NaN or inf) at step {self.state[p]['step']}"
                    )
                it = {"p": p, "g": g, "P": P, "ghat": ghat, "shape": shape, "factors": None}
                fresh = (self.state[p]["step"] - 1) % g["update_every"] == 0
                auto = g["exponent"] == "auto"
                if g["stats"] == "next_batch":
                    # choose with the factors kept from an earlier step; keep this step's
                    it["due"] = auto and "pending_Vh" in self.state[p]
                    it["snap"] = auto and fresh
                else:
                    it["due"], it["snap"] = auto and fresh, False
                if it["due"] or it["snap"]:
                    self._prepare_criterion(it)
                    items.append(it)
                else:  # apply at once: only criterion steps hold every layer's direction
                    self._apply(it)
        self._sync_curvatures(items)
        for it in items:
            self._apply(it)
            if it["snap"]:
                self._keep_factors(it)
        self._collector.clear()
        self._refresh_due()
        self._warn_fallbacks()
        return loss

    def _warn_fallbacks(self) -> None:
        """One warning naming every matrix parameter that fell back for lack of statistics.

        Given once per parameter: on the first criterion step at which an ``"auto"`` layer
        has never had activation statistics (so it runs at ``fallback_exponent``).
        """
        new = [(p, h) for p, h in self._fallbacks if (id(p), "fallback") not in self._warned]
        self._fallbacks.clear()
        if not new:
            return
        parts = []
        for p, hooked in new:
            self._warned.add((id(p), "fallback"))
            why = (
                "hooked, but no activations recorded yet: its module did not run with "
                "gradients enabled in this step's forward (a weight used functionally never "
                "will, e.g. nn.MultiheadAttention's out_proj.weight)"
                if hooked
                else "no forward hook can see this layer's inputs: not the weight of an "
                "nn.Linear or a supported nn.Conv1d/nn.Conv2d (e.g. nn.MultiheadAttention's "
                "in_proj_weight)"
            )
            parts.append(f"'{self._names[id(p)]}' ({why})")
        warnings.warn(
            f"AdaptiveLMO: {len(new)} matrix parameter(s) received no input-activation "
            "statistics and use fallback_exponent instead of the criterion: "
            + "; ".join(parts)
            + ". To give them the criterion, compute them through nn.Linear/nn.Conv modules "
            "called as modules (e.g. separate q/k/v/out nn.Linear projections instead of "
            "nn.MultiheadAttention), or feed their input rows with "
            "AdaptiveLMO.record_activations(param, rows); or pin their exponent with "
            "AdaptiveLMO(..., fixed_exponents={name: a}). Warned once per parameter; "
            "geometry() reports each layer's source.",
            stacklevel=3,
        )

    def _prepare_criterion(self, it: dict[str, Any]) -> None:
        p, g, st = it["p"], it["g"], self.state[it["p"]]
        X = self._collector.take(id(p))
        Gout = self._collector.take_output(id(p))
        kfac = g.get("curvature", "kfac") == "kfac"
        U = None
        if g["stats"] == "next_batch":
            # this step's factors: used by the update (svd route) and kept for the next step
            it["factors"] = svd_factors(it["P"]) if it["snap"] or g["method"] == "svd" else None
            if not it["due"]:
                return
            s, Vh = st.pop("pending_s"), st.pop("pending_Vh")
            d = st.pop("pending_d", None)
            U = st.pop("pending_U", None)
        else:
            f = svd_factors(it["P"])
            it["factors"] = f
            s, Vh, U = f.s, f.Vh, f.U
            d = None if g["precondition"] is None else alignment(f.U, f.Vh, it["ghat"])
        it["crit"] = (s, d)
        it["c"], it["b"], it["bq"] = None, None, None
        r = s.shape[-1]
        # shapes every rank agrees on (for the all-reduce), whatever it recorded
        it["c_shape"] = (*s.shape, r) if kfac else (s.numel(),)
        it["b_shape"] = (*s.shape, r) if kfac else None
        it["bq_shape"] = (*s.shape[:-1], 2) if kfac else None
        if X is None:
            return
        if X.shape[-1] != it["shape"][-1]:
            raise ValueError(
                f"AdaptiveLMO, layer {self._names[id(p)]}: recorded features have "
                f"{X.shape[-1]} columns, the matrix view {it['shape']} needs {it['shape'][-1]}"
            )
        if not kfac:
            it["c"] = curvature_along(Vh, X.to(Vh.dtype)).reshape(-1)
            return
        it["c"] = curvature_matrix(Vh, X.to(Vh.dtype))
        if Gout is not None and U is not None:
            if Gout.shape[-1] != it["shape"][-2]:
                raise ValueError(
                    f"AdaptiveLMO, layer {self._names[id(p)]}: recorded output gradients have "
                    f"{Gout.shape[-1]} columns, the matrix view {it['shape']} needs "
                    f"{it['shape'][-2]}"
                )
            # the rows in the U basis: the factor's moments and the switch test's rows
            it["bz"] = Gout.to(U.dtype) @ U
            it["b"], q, k = row_moments(it["bz"])
            it["bq"] = torch.stack([q, torch.full_like(q, float(k))], dim=-1)

    def _keep_factors(self, it: dict[str, Any]) -> None:
        """``stats="next_batch"``: keep this step's s, V^T (and d) for the next step's sketch."""
        st, f = self.state[it["p"]], it["factors"]
        st["pending_s"], st["pending_Vh"] = f.s, f.Vh
        if it["g"].get("curvature", "kfac") == "kfac":
            st["pending_U"] = f.U
        if it["g"]["precondition"] is not None:
            st["pending_d"] = alignment(f.U, f.Vh, it["ghat"])

    def _sync_curvatures(self, items: list[dict[str, Any]]) -> None:
        """Average each due layer's curvature statistics (``c``, and ``b`` for kfac) over ranks.

        Every rank packs a fixed-shape slot per statistic (zeros and a 0 flag when it recorded
        none); the mean is over the ranks that recorded it. Non-finite statistics on any rank
        turn that statistic into NaN everywhere (the criterion then skips the layer).
        """
        due = [it for it in items if it["due"]]
        if not (
            due
            and self.sync_stats
            and dist.is_available()
            and dist.is_initialized()
            and dist.get_world_size() > 1
        ):
            return
        dev = due[0]["P"].device
        slots = [(it, k) for it in due for k in ("c", "b", "bq") if it[f"{k}_shape"] is not None]
        flats, flags, bad = [], [], []
        for it, k in slots:
            t, shape = it[k], it[f"{k}_shape"]
            n = math.prod(shape)
            if t is None:
                flats.append(torch.zeros(n, dtype=torch.float64, device=dev))
            else:
                flats.append(t.to(torch.float64).reshape(-1))
            flags.append(0.0 if t is None else 1.0)
            bad.append(1.0 if t is not None and not bool(torch.isfinite(t).all()) else 0.0)
        flat = torch.nan_to_num(torch.cat(flats), nan=0.0, posinf=0.0, neginf=0.0)
        fl = torch.tensor(flags, dtype=torch.float64, device=dev)
        bd = torch.tensor(bad, dtype=torch.float64, device=dev)
        packed = torch.cat([flat, fl, bd])
        dist.all_reduce(packed)
        n = flat.numel()
        flat, fl, bd = packed[:n], packed[n : n + len(slots)], packed[n + len(slots) :]
        off = 0
        for j, (it, k) in enumerate(slots):
            shape = it[f"{k}_shape"]
            seg = flat[off : off + math.prod(shape)].reshape(shape)
            off += math.prod(shape)
            dtype = it["crit"][0].dtype
            if float(bd[j]) > 0:
                it[k] = torch.full_like(seg, math.nan).to(dtype)
            elif float(fl[j]) > 0:
                seg = seg / fl[j]
                if k == "bq":  # (mean of |z|^4, rows): the row counts add up over ranks
                    seg = torch.stack([seg[..., 0], seg[..., 1] * fl[j]], dim=-1)
                    dtype = torch.float64
                it[k] = seg.to(dtype)
            else:
                it[k] = None

    def _choose(self, it: dict[str, Any]) -> None:
        p, g, st = it["p"], it["g"], self.state[it["p"]]
        s, d = it["crit"]
        if it["c"] is None:
            if "exponent" in st and st.get("source", "").startswith(("criterion", "kept")):
                st["source"] = f"kept: no activations recorded at step {st['step']}"
                self._warn(p, "noact", "no activations recorded; keeping its last exponent")
            else:
                st["exponent"] = g["fallback_exponent"]
                hooked = id(p) in self._collector.hooked or id(p) in self._manual
                st["source"] = (
                    "fallback: no activations recorded yet"
                    if hooked
                    else "fallback: no forward hook can see this layer's inputs"
                )
                self._fallbacks.append((p, hooked))
            return
        floor = g.get("direction_floor", 0.0)
        if floor > 0 and float(torch.linalg.vector_norm(s)) < floor and "exponent" in st:
            # the scored direction is rounding noise: its statistics say nothing (README)
            st["source"] = f"kept: direction below direction_floor at step {st['step']}"
            return
        curv, how = it["c"], ""
        if g.get("curvature", "kfac") == "kfac":
            if it.get("b") is None:
                curv = torch.diagonal(curv, dim1=-2, dim2=-1).reshape(-1)
                how = ", input only: no output gradients recorded"
                if id(p) in self._collector.hooked:
                    self._warn(
                        p,
                        "noout",
                        "curvature='kfac' but no output gradients were recorded (the module's "
                        "output did not require grad or no backward ran); using input statistics",
                    )
            else:
                b = it["b"]
                if it.get("bq") is not None:
                    bq = it["bq"]
                    rho = ledoit_wolf_shrinkage(b, bq[..., 0], bq[..., 1])
                    st["output_shrinkage"] = float(rho.mean())
                    if g.get("shrinkage", "none") == "ledoit_wolf":
                        b = shrink_to_identity(b, rho)
                curv, how = b * curv, ", kfac"
        try:
            a = choose_exponent(s, curv, d, rule=g["criterion"])
        except ValueError as e:
            st.setdefault("exponent", g["fallback_exponent"])
            st["source"] = f"kept: criterion skipped at step {st['step']} ({e})"
            self._warn(p, "bad", f"criterion skipped ({e}); keeping exponent {st['exponent']}")
            return
        z = g.get("switch_confidence", 0.0)
        old = st.get("exponent")
        if (
            z > 0
            and how == ", kfac"
            and old is not None
            and st.get("source", "").startswith(("criterion", "kept"))
            and a != old
        ):
            # too few effective rows for the r x r output factor: change only when the
            # surrogate's gain is resolved against its row-sampling error (README)
            gain, se, n_eff = switch_gain(
                a, old, s, it.get("bz"), it["c"], d, reduce=self._reducer(it["P"].device)
            )
            if not n_eff >= s.shape[-1]:  # NaN (nothing resolved) is tested, and kept
                df = math.floor(n_eff) - 1 if math.isfinite(n_eff) else 0
                thr = t_quantile(z, df) * se if df >= 1 else math.inf
                if not gain > thr:
                    st["source"] = (
                        f"kept: a = {a:.3f} not resolved at step {st['step']} (n_eff "
                        f"{n_eff:.3g} < r = {s.shape[-1]}; log-gain {gain:.3g}, s.e. {se:.3g})"
                    )
                    return
        st["exponent"] = a
        st["source"] = f"criterion ({g['criterion']}{how})"

    def _reducer(self, device: torch.device) -> Callable[[Tensor], Tensor] | None:
        """Sum over ``torch.distributed`` ranks (None for one process or ``sync_stats=False``)."""
        if not (
            self.sync_stats
            and dist.is_available()
            and dist.is_initialized()
            and dist.get_world_size() > 1
        ):
            return None

        def red(t: Tensor) -> Tensor:
            t = t.to(device)
            dist.all_reduce(t)
            return t.cpu()

        return red

    def _apply(self, it: dict[str, Any]) -> None:
        p, g = it["p"], it["g"]
        st = self.state[p]
        if g["exponent"] == "auto":
            if it["due"]:
                self._choose(it)
            elif "exponent" not in st:  # stats="next_batch": the first choice is on step 2
                st["exponent"] = g["fallback_exponent"]
                st["source"] = "fallback: first exponent chosen on the next step"
            a = st["exponent"]
        else:
            a = g["exponent"]
            st["exponent"], st["source"] = a, "fixed"
        use = it["factors"] if g["method"] == "svd" else None
        D = fractional_update(it["P"], a, method=g["method"], scale=g["scale"], factors=use)
        floor = g.get("direction_floor", 0.0)
        if floor > 0:
            # unconditional (x * 1.0 is exact): a data-dependent branch would sync a GPU
            nrm = torch.linalg.vector_norm(it["P"], dim=(-2, -1), keepdim=True)
            D = D * (nrm / floor).clamp(max=1.0).to(D.dtype)
        lr = g["lr"]
        if g["weight_decay"] != 0:
            p.mul_(1 - lr * g["weight_decay"])
        p.add_(D.reshape(p.shape).to(p.dtype), alpha=-lr * _adjust(g["adjust_lr_fn"], it["shape"]))

    def _adamw_step(self, g: dict[str, Any]) -> None:
        b1, b2 = g["betas"]
        lr, eps, wd = g["lr"], g["eps"], g["weight_decay"]
        for p in g["params"]:
            if p.grad is None:
                continue
            grad = p.grad
            if grad.is_sparse:
                raise RuntimeError("AdaptiveLMO (AdamW group) does not support sparse gradients")
            st = self.state[p]
            if "exp_avg" not in st:
                st["step"] = 0
                st["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                st["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            st["step"] += 1
            t = st["step"]
            if wd != 0:
                p.mul_(1 - lr * wd)
            m, v = st["exp_avg"], st["exp_avg_sq"]
            m.lerp_(grad, 1 - b1)
            v.mul_(b2).addcmul_(grad, grad, value=1 - b2)
            denom = (v.sqrt() / math.sqrt(1 - b2**t)).add_(eps)
            p.addcdiv_(m, denom, value=-lr / (1 - b1**t))
