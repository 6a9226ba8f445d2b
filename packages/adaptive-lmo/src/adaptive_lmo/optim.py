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
:math:`\beta_1` = ``momentum``. The four corners (``scale="none"``; ``adjust_lr_fn="unit"``
for non-square layers; at a = 0 ``method="svd"`` gives the exact polar factor, the default
``"auto"`` torch.optim.Muon's bf16 Newton-Schulz, i.e. torch's own Muon step):

=====================  =========  =======================================================
precondition           a          the update is exactly
=====================  =========  =======================================================
None                   1          SGD with momentum (``torch.optim.SGD``, dampening 0)
None                   0          Muon (exact polar factor, or torch's Newton-Schulz)
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

import warnings
import weakref
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import torch
from torch import Tensor, nn
from torch.optim import Optimizer

from shared_core.polar import msign
from shared_core.routing import AUX_ADAMW

from .controller import ExponentController
from .criterion import preload_quantiles
from .fisher import FISHER_LOSSES, sample_output_gradient
from .fractional import NS_DTYPE, NS_STEPS, NS_TABLE, lmo_direction, schatten_p
from .groups import groups_from_params, split_fixed
from .layer_step import LayerStep
from .mixture import mixed_member
from .mixture import preload as preload_mixture
from .moments import adamw_update, any_nonfinite, direction, nonfinite_names
from .options import (
    NONFINITE,
    adjust_lr_factor,
    option_fingerprint,
    validate_adamw,
    validate_lmo,
)
from .routing import matrix_shape, scan_module
from .stats import ActivationCollector

__all__ = ["AdaptiveLMO"]


class AdaptiveLMO(ExponentController, Optimizer):
    r"""Matrix layers: the fractional LMO update with a per-layer, data-chosen exponent.

    Args:
        model_or_params: an ``nn.Module`` (routing and activation hooks automatic), or an
            iterable of tensors, of ``(name, tensor)`` pairs (``model.named_parameters()``:
            the names appear in ``geometry()``/``routing()``), or of param-group dicts (a dict
            may set ``"algorithm"``: ``"lmo"`` or ``"adamw"``; bare tensors with >= 2 dims
            take the matrix update). Bare parameters cannot be hooked, so
            ``exponent="auto"`` needs the module.
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
        min_gain: the cost-aware rule (``method="auto"`` only, where a layer off a = 0 pays an
            SVD per step instead of torch Muon's Newton-Schulz). A chosen exponent ``a > 0``
            (or one the switch test would keep) stands only when the lower
            ``switch_confidence`` bound of the surrogate's predicted relative gain
            :math:`\Delta(a)/\Delta(0) - 1` in one-step decrease over a = 0 reaches
            ``min_gain`` (the bound from the rows' own delta-method variance on both K-FAC
            factors: an argmax of a noisy curve always shows some gain); otherwise the layer
            takes a = 0 (``geometry()`` says so, with the gain and its bound). With
            ``switch_confidence=0`` the point estimate is compared. Default 0.05 (fixed
            before any benchmark; README, "Cost-aware rule"); ``min_gain=0`` with
            ``switch_confidence=0`` turns it off.
        exact_polar: ``method="auto"`` only; off by default. When True, each criterion step
            of a layer at a = 0 also scores the exact polar factor against the spectrum torch
            Muon's Newton-Schulz would give (:func:`adaptive_lmo.fractional.ns_spectrum`)
            with the same surrogate; where the lower ``switch_confidence`` bound of
            Newton-Schulz's loss reaches ``min_gain`` (the point estimate with
            ``switch_confidence=0``), that layer's a = 0 steps take the exact polar factor
            (an SVD per step) until its next criterion step (``geometry()["exact_polar"]``).
            Meant for layers with ill-conditioned inputs (teacher-student's layer B, with
            ``fisher_backward``: README, Results). Off by default: on the overhead benchmark
            the estimate moves between -23% and +51% from one criterion step to the next,
            far beyond its row-sampling error, and flags a quarter of the layer-steps
            (docs/overhead.md).
        backoff: criterion steps of a layer whose choice is stable (same route, exponent
            moved by at most one grid step) are spaced ``update_every * 2**j`` steps apart,
            ``j`` the number of stable choices in a row, capped at ``backoff`` (default 3:
            at most 8x ``update_every``); any change resets the spacing. 0: fixed spacing.
        spectral: how criterion steps decompose the direction. ``"svd"`` (default): the
            exact SVD. ``"gram"`` (``method="auto"``, float32 layers; opt-in): ``eigh`` of the
            smaller Gram matrix (0.65x an SVD on CPU at 256²), kept only when an a-posteriori
            bound puts every family member it builds within 1e-4 relative Frobenius error of
            the exact one, else the SVD (:mod:`adaptive_lmo.spectral`); ``geometry()`` counts
            both (``"spectral_estimated"``, ``"spectral_exact"``). Not the default: the
            overhead benchmark's momenta (condition 3e3-1e5) fail the check every time
            (docs/overhead.md).
        method: ``"auto"`` (default: a = 0 steps outside criterion steps by torch.optim.Muon's
            routine, five bfloat16 Newton-Schulz steps; a layer the criterion put at
            0 < a < 1 takes a fitted sum of those iterates until its next choice when the
            surrogate scores it within ``min_gain`` of the exact member
            (:mod:`adaptive_lmo.mixture`), else the SVD; criterion steps and fixed exponents
            take the SVD; float64 always exact), ``"svd"`` (exact everywhere) or
            ``"iterative"`` (matmul-only fractional power; a step whose iteration does not
            converge takes the SVD, with one warning per layer). See :mod:`adaptive_lmo.fractional`.
        scale: ``"polar"`` (every exponent has the polar factor's Frobenius norm),
            ``"spectral"`` (its spectral norm: no member steps further than Muon in any
            direction) or ``"none"``.
        weight_decay: decoupled, :math:`W \leftarrow (1 - \gamma\lambda)W`.
        adjust_lr_fn: torch.optim.Muon's shape factor with torch's meaning: None is
            ``"original"`` (:math:`\sqrt{\max(1, A/B)}`), ``"match_rms_adamw"``,
            ``"spectral_unclamped"``; ``"unit"`` is a factor of 1 (the exact SGD/Adam corners
            of tall matrices need it).
        nonfinite: what a step does when any gradient holds NaN/inf. All gradients are
            checked before anything is mutated (one host read per step): ``"raise"``
            (default, ``ValueError`` naming the parameters; nothing updated) or ``"skip"``
            (the whole step is skipped, GradScaler-style: no parameter, moment or statistic
            changes; counted in ``skipped_steps``, one warning). ``"off"``: not checked (no
            host sync; NaN then flows into the state, as in torch.optim).
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
        adamw_lr, adamw_betas, adamw_eps, adamw_weight_decay: the AdamW group; defaults are
            the suite's :data:`shared_core.routing.AUX_ADAMW` (3e-4, (0.9, 0.95), 1e-8, 0),
            the same as ``imuon.IMuon``'s.
        route: ``(name, param, module) -> "lmo" | "adamw" | None`` override of the routing.
        fixed_exponents: pins the exponent of some matrix parameters while the rest follow
            ``exponent`` (with an ``nn.Module`` only): ``{name: a}`` or
            ``(name, param, module) -> a | None``; pinned parameters get their own param
            group(s) with ``"exponent": a`` and no hooks. E.g. ``lambda n, p, m: 0.0 if
            ".attn." in n else None`` keeps attention projections at Muon's geometry.
        head: the output head excluded from the matrix update: True (identified by
            :func:`shared_core.routing.locate_head`: tied to an embedding, a conventional
            head name, or the last Linear of an all-``nn.Sequential`` model; otherwise the last
            registered Linear with a warning that it is a guess), a module name (e.g. from
            :func:`shared_core.routing.find_head`), or None.
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
        min_gain: float = 0.05,
        exact_polar: bool = False,
        backoff: int = 3,
        spectral: str = "svd",
        method: str = "auto",
        scale: str = "polar",
        weight_decay: float = 0.0,
        adjust_lr_fn: str | None = None,
        fallback_exponent: float = 0.0,
        direction_floor: float = 1e-7,
        max_rows: int = 256,
        adamw_lr: float = AUX_ADAMW.lr,
        adamw_betas: tuple[float, float] = AUX_ADAMW.betas,
        adamw_eps: float = AUX_ADAMW.eps,
        adamw_weight_decay: float = AUX_ADAMW.weight_decay,
        route: Callable[[str, Tensor, nn.Module], str | None] | None = None,
        head: str | bool | None = True,
        fixed_exponents: (
            Mapping[str, float] | Callable[[str, Tensor, nn.Module], float | None] | None
        ) = None,
        sync_stats: bool = True,
        seed: int = 0,
        nonfinite: str = "raise",
    ) -> None:
        if isinstance(max_rows, bool) or not isinstance(max_rows, int) or max_rows < 1:
            raise ValueError(f"max_rows must be a positive int, got {max_rows!r}")
        if nonfinite not in NONFINITE:
            raise ValueError(f"nonfinite must be one of {NONFINITE}, got {nonfinite!r}")
        self.nonfinite = nonfinite
        #: steps skipped because a gradient held NaN/inf (``nonfinite="skip"``)
        self.skipped_steps = 0
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
            "min_gain": min_gain,
            "exact_polar": exact_polar,
            "backoff": backoff,
            "spectral": spectral,
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
        validate_lmo(dict(lmo_defaults))
        validate_adamw(adamw)
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
            lmo_ps, fixed = split_fixed(lmo, fixed_exponents)
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
            groups = groups_from_params(
                model_or_params, adamw, self._names, self._views, self._modules
            )
        self._collector = ActivationCollector(max_rows, seed)
        self._finalizer = weakref.finalize(
            self, ActivationCollector.remove_handles, self._collector.handles
        )
        self._warned: set[tuple[int, str]] = set()
        # id(group) -> (group, fingerprint of its options when they last passed validation)
        self._validated: dict[int, tuple[dict[str, Any], tuple]] = {}
        self._fallbacks: list[tuple[Tensor, bool]] = []
        self._manual: set[int] = set()
        self.sync_stats = bool(sync_stats)
        self._seed = int(seed)
        self._fisher_gen: torch.Generator | None = None
        self._fisher_state: Tensor | None = None
        self._has_model = isinstance(model_or_params, nn.Module)
        super().__init__(groups, lmo_defaults)
        self._attach_hooks()
        self._refresh_due()
        if any(
            g["algorithm"] == "lmo" and g["exponent"] == "auto" and g["switch_confidence"] > 0
            for g in self.param_groups
        ):
            preload_quantiles()  # SciPy's import (~0.4 s) here, not inside a timed step
        if any(
            g["algorithm"] == "lmo" and g["exponent"] == "auto" and g["method"] == "auto"
            for g in self.param_groups
        ):
            preload_mixture()  # the mixture's fit (scipy.optimize) likewise

    # -- construction -----------------------------------------------------------------------

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        super().add_param_group(param_group)
        g = self.param_groups[-1]
        if g["algorithm"] == "adamw":
            validate_adamw(g)
            return
        validate_lmo(g)
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

    def fisher_due(self) -> bool:
        """Whether the coming ``step`` chooses an exponent from output statistics, i.e.
        whether :meth:`fisher_backward` would do any work now."""
        return bool(self._collector.want_out)

    def fisher_backward(
        self, output: Tensor, loss: str = "cross_entropy", samples: int = 1
    ) -> None:
        r"""Record the true (sampled-target) Fisher's output factor for the coming criterion step.

        Call it after the forward that produced ``output`` and before ``loss.backward()``
        (which frees the graph). On steps where no layer chooses its exponent it returns at
        once; on criterion steps it runs one extra backward per sample, from ``output``
        with targets drawn from the model's own predictive distribution, through the layers
        whose exponent is due (no ``.grad`` is touched). Their K-FAC output factor
        :math:`B = \mathbb{E}[g g^\top]` is then estimated from these rows instead of the
        user's loss gradients: in expectation it is the Gauss-Newton factor
        :math:`\mathbb{E}[J^\top H J]` (``H`` the loss Hessian at the output), not the
        empirical Fisher, which a systematic residual biases (README: "Sampled-target
        Fisher"). ``geometry()`` reports ``"criterion (surrogate, kfac, sampled Fisher)"``.

        Args:
            output: the model's output; for ``"cross_entropy"`` logits with classes in the
                last dimension, for ``"mse"`` any shape.
            loss: ``"cross_entropy"`` (targets ~ softmax(output); output gradient
                ``softmax - onehot``) or ``"mse"`` (a Gaussian likelihood: output gradient
                :math:`\varepsilon \sim N(0, I)`, so :math:`H = I`; the criterion does not
                depend on the noise scale).
            samples: target draws per example (each one more backward; more draws, less
                noise in the factor: its relative error falls like :math:`1/\sqrt{N\cdot
                \text{samples}}`).
        """
        if loss not in FISHER_LOSSES:
            raise ValueError(f"loss must be one of {FISHER_LOSSES}, got {loss!r}")
        if isinstance(samples, bool) or not isinstance(samples, int) or samples < 1:
            raise ValueError(f"samples must be a positive int, got {samples!r}")
        if not isinstance(output, Tensor) or not output.requires_grad:
            raise ValueError("fisher_backward needs the model output with its autograd graph")
        if not self.fisher_due():
            return
        due = [
            p
            for g in self.param_groups
            for p in g["params"]
            if id(p) in self._collector.want_out and p.requires_grad
        ]
        if not due:
            return
        gen = self._fisher_generator(output.device)
        self._collector.fisher_mode = True  # the hooks file these rows apart
        try:
            for _ in range(samples):
                e = sample_output_gradient(output, loss, gen)
                torch.autograd.grad(
                    output,
                    due,
                    grad_outputs=e.to(output.dtype),
                    retain_graph=True,
                    allow_unused=True,
                )
        finally:
            self._collector.fisher_mode = False

    def _fisher_generator(self, device: torch.device) -> torch.Generator:
        gen = self._fisher_gen
        if gen is None or gen.device != device:
            gen = torch.Generator(device=device).manual_seed(self._seed + 1)
            if self._fisher_state is not None and device.type == "cpu":
                gen.set_state(self._fisher_state)
            self._fisher_gen = gen
        return gen

    def _group_of(self, p: Tensor) -> dict[str, Any] | None:
        for g in self.param_groups:
            if any(q is p for q in g["params"]):
                return g
        return None

    def geometry(self) -> dict[str, dict[str, Any]]:
        """Each matrix layer's current exponent and where it came from.

        Returns:
            ``{name: {"exponent", "schatten_p", "source", "steps", "matrix_shape",
            "output_shrinkage", "exact_polar", "spectral_estimated", "spectral_exact",
            "mixture", "mixture_loss", "mixture_steps"}}``;
            ``exponent`` is None before the first
            step of an ``"auto"`` layer; ``output_shrinkage`` is the Ledoit-Wolf weight of the
            last K-FAC choice (mean over a batched view), None when there was none;
            ``exact_polar``: this layer's a = 0 steps take the exact polar factor instead of
            Newton-Schulz (``method="auto"``: the criterion found it pays ``min_gain``);
            ``spectral_estimated`` / ``spectral_exact``: criterion decompositions taken by the
            checked Gram estimate / by the SVD (``spectral="gram"``); ``mixture``: this layer's
            steps off a = 0 between criterion steps take the weighted Newton-Schulz iterates
            (:mod:`adaptive_lmo.mixture`) instead of an SVD, and ``mixture_loss`` is the
            surrogate decrease the realised mixture lost against the exact member at the last
            choice (None where not scored); ``mixture_steps``: the Newton-Schulz steps the
            accepted mixture combines, None without one.
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
                    "exact_polar": bool(st.get("exact_a0", False)),
                    "spectral_estimated": st.get("spectral_estimated", 0),
                    "spectral_exact": st.get("spectral_exact", 0),
                    "mixture": "mixture" in st,
                    "mixture_loss": st.get("mixture_loss"),
                    "mixture_steps": _mixture_steps(st.get("mixture")),
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
        sd["skipped_steps"] = self.skipped_steps
        if self._fisher_gen is not None:
            sd["fisher_rng_state"] = self._fisher_gen.get_state()
        return sd

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        state_dict = dict(state_dict)
        rng = state_dict.pop("sketch_rng_state", None)
        self.skipped_steps = int(state_dict.pop("skipped_steps", self.skipped_steps))
        fisher = state_dict.pop("fisher_rng_state", None)
        if fisher is not None:
            self._fisher_state = fisher
            if self._fisher_gen is not None:
                self._fisher_gen.set_state(fisher)
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

    @torch.no_grad()
    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """One update of every parameter with a gradient; returns the closure's loss."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        work = self._checked_work()
        if work is None:  # a non-finite gradient and nonfinite="skip": nothing changes
            return loss
        items: list[LayerStep] = []
        for p, g in work:
            if g["algorithm"] == "adamw":
                adamw_update(p, p.grad, self.state[p], g)
                continue
            shape = matrix_shape(tuple(p.shape), self._view(p, g))
            P, ghat = direction(self.state[p], p.grad, g, shape)
            auto = g["exponent"] == "auto"
            fresh = self._fresh(self.state[p], g, self.state[p]["step"])
            if auto and fresh:  # the criterion's spacing (backoff) is counted from here
                self._mark_snap(self.state[p], g)
            if g["stats"] == "next_batch":
                # choose with the factors kept from an earlier step; keep this step's
                due, snap = auto and "pending_Vh" in self.state[p], auto and fresh
            else:
                due, snap = auto and fresh, False
            it = LayerStep(p=p, group=g, P=P, ghat=ghat, shape=shape, due=due, snap=snap)
            if due or snap:
                self._prepare_criterion(it)
                items.append(it)
            else:  # apply at once: only criterion steps hold every layer's direction
                self._apply(it)
        self._sync_curvatures(items)
        for it in items:
            self._apply(it)
            if it.snap:
                self._keep_factors(it)
        self._collector.clear()
        self._refresh_due()
        self._warn_fallbacks()
        return loss

    def _checked_work(self) -> list[tuple[Tensor, dict[str, Any]]] | None:
        """Every (parameter, group) with a gradient, after checking all of them.

        Runs before anything is mutated, so a bad option, a sparse or complex gradient or a
        NaN/inf gradient leaves parameters, moments and statistics as they were. Returns
        None when the step is to be skipped (``nonfinite="skip"``).
        """
        work: list[tuple[Tensor, dict[str, Any]]] = []
        changed = False
        for g in self.param_groups:
            if self._options_changed(g):
                changed = True
                if g["algorithm"] == "adamw":
                    validate_adamw(g)
                else:
                    validate_lmo(g)
                    if g["exponent"] == "auto" and not self._has_model:
                        raise ValueError(
                            "exponent='auto' was set on a group of bare parameters: the "
                            "criterion needs forward hooks on the model's layers (pass the "
                            "nn.Module)"
                        )
                # after validation, which may normalise values (an int exponent to float)
                self._validated[id(g)] = (g, option_fingerprint(g))
            for p in g["params"]:
                if p.grad is None:
                    continue
                if p.grad.is_sparse:
                    raise RuntimeError("AdaptiveLMO does not support sparse gradients")
                if g["algorithm"] == "lmo" and torch.is_complex(p):
                    raise RuntimeError("AdaptiveLMO does not support complex parameters")
                work.append((p, g))
        if changed:  # a group switched to "auto" after construction gets its hooks
            self._attach_hooks()
        if self.nonfinite == "off" or not work:
            return work
        grads = [p.grad for p, _ in work]
        if not any_nonfinite(grads):
            return work
        bad = nonfinite_names(grads, [self._names.get(id(p), "?") for p, _ in work])
        # the bad forward's hook rows must not feed the next criterion step (either mode)
        self._collector.clear()
        if self.nonfinite == "raise":
            raise ValueError(
                f"AdaptiveLMO: non-finite gradient (NaN or inf) in {', '.join(bad)}; nothing "
                "was updated (nonfinite='skip' skips such steps instead)"
            )
        self.skipped_steps += 1
        if (0, "skip") not in self._warned:
            self._warned.add((0, "skip"))
            warnings.warn(
                f"AdaptiveLMO: step skipped, non-finite gradient (NaN or inf) in "
                f"{', '.join(bad)}; later skips are counted in opt.skipped_steps",
                stacklevel=3,
            )
        return None

    def _options_changed(self, g: dict[str, Any]) -> bool:
        """Whether ``g``'s options differ from those last validated (or ``g`` is new).

        Validation runs at every ``step`` in effect (a value written into ``param_groups``
        is caught before anything is mutated), but only does work when the fingerprint
        moved: re-checking ~25 unchanged options per group per step was part of the
        wiring's cost (docs/overhead.md).
        """
        seen = self._validated.get(id(g))
        return seen is None or seen[0] is not g or seen[1] != option_fingerprint(g)

    def _apply(self, it: LayerStep) -> None:
        p, g = it.p, it.group
        st = self.state[p]
        if g["exponent"] == "auto":
            if it.due:
                self._choose(it)
            elif "exponent" not in st:  # stats="next_batch": the first choice is on step 2
                st["exponent"] = g["fallback_exponent"]
                st["source"] = "fallback: first exponent chosen on the next step"
            a = st["exponent"]
        else:
            a = g["exponent"]
            st["exponent"], st["source"] = a, "fixed"
        # a criterion step's exact factors are reused by every route: the SVD is paid anyway
        method = g["method"]
        if a == 0.0 and method == "auto" and st.get("exact_a0"):
            method = "svd"  # Newton-Schulz measured too inexact for this layer (controller)
        # the weights are the criterion's for this very exponent (a group switched to a fixed
        # exponent after construction must not reuse them)
        mix = (
            st.get("mixture")
            if method == "auto" and it.factors is None and st.get("mixture_a") == a
            else None
        )
        if a == 0.0 and method == "auto" and it.factors is None and it.P.dtype != torch.float64:
            # torch Muon's step to the bit, and like torch the bfloat16 factor is added to the
            # parameter as it is (no float32 copy: a pass over the matrix saved)
            D = msign(
                it.P.to(NS_DTYPE),  # our own copy: normalised in place, as torch's div_
                NS_TABLE,
                steps=NS_STEPS,
                dtype=NS_DTYPE,
                check_finite=False,
                overwrite_input=True,
            )
            fell_back = False
        elif mix is not None and 0.0 < a < 1.0:
            # the criterion found the Newton-Schulz mixture within min_gain of this member
            D = mixed_member(it.P, mix, a, g["scale"], st.get("mixture_norm"))
            fell_back = False
        else:
            D, fell_back = lmo_direction(
                it.P,
                a,
                method=method,
                scale=g["scale"],
                factors=it.factors,
                check_finite=False,
            )
        if fell_back:
            self._warn(
                p,
                "iterative",
                "method='iterative' did not converge on this direction (rank-deficient or "
                "ill-conditioned); the step used the SVD (and will whenever this recurs)",
            )
        lr = g["lr"]
        if g["weight_decay"] != 0:
            p.mul_(1 - lr * g["weight_decay"])
        alpha = -lr * adjust_lr_factor(g["adjust_lr_fn"], it.shape)
        floor = g.get("direction_floor", 0.0)
        if floor > 0:
            nrm = torch.linalg.vector_norm(it.P, dim=(-2, -1), keepdim=True)
            # the factor min(|P|/floor, 1) is exactly 1 on every realistic step; on a GPU it
            # is applied unconditionally (x * 1.0 is exact; a data-dependent branch would
            # sync), on the CPU a read is free and saves a pass over the direction (~4% of a
            # 256-wide step; docs/overhead.md)
            if not host_reads_are_free(nrm.device) or bool((nrm < floor).any()):
                # a bfloat16 D widens to float32 inside the product: one pass, no copy
                D = D * (nrm / floor).clamp_(max=1.0)
        D = D.reshape(p.shape)
        p.add_(D if self._adds_directly(D, p) else D.to(p.dtype), alpha=alpha)

    @staticmethod
    def _adds_directly(D: Tensor, p: Tensor) -> bool:
        """Whether ``D`` goes into ``p`` without a conversion: same dtype, or torch Muon's
        bfloat16 factor into a float32 parameter (exact: bfloat16 widens to float32)."""
        return D.dtype == p.dtype or (D.dtype == torch.bfloat16 and p.dtype == torch.float32)


def host_reads_are_free(device: torch.device) -> bool:
    """Whether reading a value on the host costs no device synchronisation (the CPU).

    The update branches on data only where this holds; elsewhere (CUDA and other
    accelerators) it computes unconditionally so that a step reads the host once (the
    finiteness check), not once per matrix. The tests monkeypatch this to run the
    accelerator's code path on a CPU.
    """
    return device.type == "cpu"


def _mixture_steps(w: Any) -> int | None:
    """The Newton-Schulz steps a layer's mixture weights combine (``K + 1`` weights)."""
    if w is None:
        return None
    return (w.shape[-1] if isinstance(w, Tensor) else len(w)) - 1
