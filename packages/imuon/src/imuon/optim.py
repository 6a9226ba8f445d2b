r"""``IMuon``: intrinsic Muon on Stiefel, Grassmann, SPD and fixed-rank (LoRA) parameters.

One step for a parameter on a manifold :math:`M` with Euclidean gradient :math:`G`:

.. math::

    \Gamma &= \mathrm{grad}\,f(x) \quad(\texttt{egrad2rgrad}), \qquad
    m \leftarrow \beta m + (1 - \beta)\Gamma, \qquad
    d = (1 - \beta)\Gamma + \beta m \ \text{(Nesterov) or } m, \\
    \xi &= L_x^{-1}\mathrm{LMO}_N(L_xd) \quad(\text{see } \texttt{imuon.lmo}), \qquad
    x^+ = R_x(\eta\,\xi), \qquad m \leftarrow \mathcal{T}_{x \to x^+}(m),

with the manifold's vector transport :math:`\mathcal{T}` (projection onto the new tangent space;
parallel transport on SPD). Euclidean matrices take the same step with :math:`L = I` (Muon) and
the Muon learning-rate rule; non-matrix parameters take AdamW.
"""

from __future__ import annotations

import copy
import difflib
import math
import sys
import warnings
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import Tensor, nn
from torch.optim import Optimizer

from shared_core.manifolds import SPD, Factors, FixedRankFactored, Grassmann, Stiefel
from shared_core.polar import powm_sym
from shared_core.routing import AUX_ADAMW, route_module

from .geoopt_compat import geoopt_kind
from .lmo import (
    balanced_gauge,
    euclidean_lmo,
    fixed_rank_frames,
    fixed_rank_lmo_of_blocks,
    grassmann_lmo,
    rsolve_triangular,
    spd_lmo,
    stiefel_lmo,
    triangular_inverse,
    use_inverse,
)
from .norms import POLAR_METHODS, parse_norm

__all__ = ["MANIFOLDS", "IMuon", "module_groups", "tag"]

MANIFOLDS = ("auto", "euclidean", "stiefel", "grassmann", "spd", "sphere", "fixed_rank", "adamw")
_CONSTRAINED = ("stiefel", "grassmann", "spd", "sphere")
_TAG = "imuon_manifold"
_LOW_PRECISION_TOL = 5e-2


def tag(param: Tensor, manifold: str) -> Tensor:
    """Mark ``param`` with its manifold (used by groups whose ``manifold`` is ``"auto"``).

    Example:
        >>> w = tag(torch.nn.Parameter(torch.linalg.qr(torch.randn(5, 2))[0]), "stiefel")
        >>> w.imuon_manifold
        'stiefel'
    """
    if manifold not in MANIFOLDS or manifold in ("auto", "fixed_rank"):
        raise ValueError(
            f"cannot tag a single tensor with manifold {manifold!r}; use one of "
            "'euclidean', 'stiefel', 'grassmann', 'spd', 'sphere', 'adamw' (fixed_rank pairs "
            "need a param group with manifold='fixed_rank')"
        )
    setattr(param, _TAG, manifold)
    return param


def _frame(t: Tensor) -> Tensor:
    """Tall view of a Stiefel/Grassmann parameter: wide ``(p, n)`` weights are orthonormal rows."""
    return t if t.shape[-2] >= t.shape[-1] else t.mT


def _matrix(kind: str, t: Tensor) -> Tensor:
    """The matrix view a manifold step works on: SPD as it is, a sphere vector as the single
    column of a Stiefel(n, 1) frame, Stiefel/Grassmann tall (:func:`_frame`). A view, so
    in-place updates reach ``t``."""
    if kind == "spd":
        return t
    if kind == "sphere":
        return t.unsqueeze(-1)
    return _frame(t)


def _dtensor_cls() -> type | None:
    """torch's DTensor class if ``torch.distributed.tensor`` is already imported, else None.

    A parameter can only be a DTensor once that module is loaded (FSDP2 loads it), so IMuon
    never imports it itself: the import pulls in sympy and costs ~3 s of CPU, more than
    ``import imuon`` otherwise does.
    """
    mod = sys.modules.get("torch.distributed.tensor")
    return getattr(mod, "DTensor", None)


def _full(t: Tensor) -> Tensor:
    """The whole tensor behind a DTensor (an all-gather); a plain tensor as it is."""
    dtensor = _dtensor_cls()
    return t.full_tensor() if dtensor is not None and isinstance(t, dtensor) else t


def _out(buf: Tensor, like: Tensor) -> Tensor | None:
    """``buf`` as the ``out=`` of a solve when it is row-major and of ``like``'s dtype."""
    return buf if buf.is_contiguous() and buf.dtype == like.dtype else None


def _store(buf: Tensor, value: Tensor) -> None:
    if value is not buf:
        buf.copy_(value)


def _work_dtype(p: Tensor) -> torch.dtype:
    return torch.float64 if p.dtype == torch.float64 else torch.float32


def adamw_rate(group: dict[str, Any]) -> float:
    """The AdamW route's rate in ``group``: ``adamw_lr`` scaled by the group's schedule.

    torch's schedulers write ``initial_lr`` into each group when they are created and then
    move ``lr`` only; scaling by ``lr / initial_lr`` lets one schedule drive both routes.
    Without a scheduler the rate is ``adamw_lr`` (0 when the group's ``lr`` is 0).
    """
    lr, base = group["lr"], group.get("initial_lr")
    if lr == 0:
        return 0.0
    if base is None or base == 0:
        return group["adamw_lr"]
    return group["adamw_lr"] * lr / base


def _check_unit(name: str, value: object, lo: float, hi: float, hi_open: bool = True) -> float:
    try:
        v = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ValueError(f"invalid {name}: {value!r}") from None
    ok = lo <= v < hi if hi_open else lo <= v <= hi
    if not ok or math.isnan(v):
        raise ValueError(f"invalid {name}: {value!r} (need {lo} <= {name} < {hi})")
    return v


def module_groups(model: nn.Module, head: str | bool | None = True) -> list[dict[str, Any]]:
    """Param groups of ``model`` by the suite's routing convention (:mod:`shared_core.routing`):
    matrices on ``"auto"``, embeddings, head and vectors on ``"adamw"``; a parameter tagged by
    :func:`tag` or a geoopt ``ManifoldParameter`` stays on ``"auto"`` wherever it sits."""
    matrix: list[Tensor] = []
    aux: list[Tensor] = []
    for r in route_module(model, head=head, owner="IMuon"):
        geo = geoopt_kind(r.param)
        pinned = getattr(r.param, _TAG, None) is not None or (geo is not None and geo.manifold)
        (matrix if r.matrix or pinned else aux).append(r.param)
    groups = [{"params": matrix, "manifold": "auto"}] if matrix else []
    if aux:
        groups.append({"params": aux, "manifold": "adamw"})
    if not groups:
        raise ValueError("IMuon got a module with no trainable parameters")
    return groups


class IMuon(Optimizer):
    r"""Intrinsic Muon with per-group manifolds, momentum with transport, Muon/AdamW fallbacks.

    Param groups choose their manifold with the key ``manifold``:

    - ``"stiefel"``: orthonormal frames (a wide ``(p, n)`` weight is read as orthonormal rows);
      ``stiefel_metric`` ``"euclidean"`` or ``"canonical"``; polar (default) or QR retraction.
    - ``"grassmann"``: subspaces (basis-invariant steps, polar retraction).
    - ``"spd"``: affine-invariant metric, exponential-map update (always SPD).
    - ``"sphere"``: a unit vector, stepped as the single column of a Stiefel(n, 1) frame.
    - ``"fixed_rank"``: the group's params come in pairs ``(A, B)`` with ``X = A B^T``
      (``factor_layout="AB"``: ``A`` (m, r), ``B`` (n, r)) or peft's ``(lora_B, lora_A)``
      (``factor_layout="peft"``: ``(out, r)`` and ``(r, in)``, ``X = lora_B @ lora_A``).
    - ``"euclidean"``: plain Muon-family step (``L = I``) on a matrix.
    - ``"adamw"``: AdamW with ``adamw_*`` options.
    - ``"auto"`` (default): a tensor tagged by :func:`tag` goes to its manifold, a
      ``geoopt.ManifoldParameter`` to its geoopt manifold's counterpart (Stiefel with its
      metric, Sphere, SymmetricPositiveDefinite; other geoopt manifolds are refused, see
      :mod:`imuon.geoopt_compat`), other 2-D tensors to ``"euclidean"``, everything else to
      ``"adamw"``.

    Args:
        params: tensors, param groups (any option below may be set per group), or an
            ``nn.Module``. A module is split by the suite's convention
            (:mod:`shared_core.routing`, the same as ``adaptive_lmo.AdaptiveLMO``'s):
            embeddings, anything tied to one, the output head and every parameter with fewer
            than 2 dims go to ``"adamw"``; the other matrices to ``"auto"`` (so a tagged or
            geoopt parameter still reaches its manifold, wherever it sits). Bare tensors
            cannot say which layer they belong to: there ``"auto"`` sends every 2-D tensor,
            embeddings included, to ``"euclidean"``.
        lr: step length in the intrinsic norm (Muon groups: scaled by ``lr_scale``).
        weight_decay: decoupled; Euclidean ``x <- (1 - lr wd) x``; fixed rank scales both
            factors by :math:`\sqrt{1 - \eta\lambda}` (so ``A B^T`` by :math:`1 - \eta\lambda`);
            SPD moves along the geodesic to ``I``: :math:`X \to X^{1 - \eta\lambda}`. Stiefel
            and Grassmann have no decay (must be 0). (torch.optim.Muon's default is 0.1;
            IMuon's is 0, as the manifold groups have nothing or something else to decay.)
        momentum: :math:`\beta \in [0, 1)`; the buffer lives in the tangent space.
        nesterov: use :math:`(1 - \beta)\Gamma + \beta m` as the LMO input.
        norm: ``"spectral" | "frobenius" | "nuclear" | ("schatten", p)``. This and every
            later option are keyword-only: the positional order ``(params, lr, weight_decay,
            momentum, nesterov)`` is torch.optim.Muon's, and torch's next positional
            arguments (``ns_coefficients``, ...) have no IMuon counterpart, so passing them
            positionally is a ``TypeError`` rather than a silently different option.
        manifold: see above.
        stiefel_metric, retraction: Stiefel options (``retraction`` ``"polar"``/``"qr"``).
        fixed_rank_lift: ``"horizontal"`` (quotient, default) or ``"total"`` (factor space).
        factor_layout: ``"AB"`` or ``"peft"`` (fixed rank).
        rebalance_every: fixed rank: every this many steps of a pair, replace its factors by
            the balanced ones of the same product (:func:`imuon.lmo.balanced_gauge`: equal Gram
            matrices) and move its momentum buffer by the same gauge. The step is
            gauge-covariant, so the product's trajectory does not change (to rounding); in
            float32/bf16 it keeps the factors from drifting into an ill-conditioned gauge,
            whose condition number multiplies the round-off of every step. 0 (default): never.
        polar: polar route of the spectral LMO: ``"auto"``, ``"svd"``, ``"gram"`` or a
            Newton-Schulz table (see :func:`imuon.norms.resolve_polar`).
        polar_dtype: Newton-Schulz dtype (``None``: float32 on CPU, bf16 on CUDA;
            ``torch.bfloat16`` is what torch.optim.Muon uses).
        scaling: ``"lmo"`` (default, Muon: the step has intrinsic length ``lr``) or ``"dual"``
            (the step is multiplied by the dual norm :math:`N_*(L_xd)`: steepest descent in the
            intrinsic norm; with Frobenius it is Riemannian gradient descent, which converges
            linearly where the unit step only reaches an ``O(lr)`` neighbourhood).
        lr_scale: Euclidean (Muon) groups only: ``"original"`` (``lr * sqrt(max(1, m/n))``,
            torch.optim.Muon's default), ``"match_rms_adamw"`` (``0.2 sqrt(max(m, n))``) or
            ``"none"``. Manifold steps are never rescaled: ``lr`` is their intrinsic length.
        adamw_lr, adamw_betas, adamw_eps, adamw_weight_decay: the AdamW route (defaults: the
            suite's :data:`shared_core.routing.AUX_ADAMW`, shared with adaptive-lmo). Its rate
            follows the group's learning-rate schedule: under a torch scheduler (which records
            ``initial_lr``) it is ``adamw_lr * lr / initial_lr``, so warm-up, decay and
            ``LambdaLR(lambda t: 0)`` reach these parameters too; a group whose ``lr`` is 0
            does not move them.
        nonfinite: ``"skip"`` (default: a NaN/inf gradient anywhere skips the whole step with
            a ``RuntimeWarning``; no state changes) or ``"raise"`` (``FloatingPointError``).
        head: with an ``nn.Module`` only: the output head sent to AdamW: True (found by
            :func:`shared_core.routing.locate_head`), a module name, or None (none).

    Low-precision (bf16/fp16) parameters keep a float32 master copy in the state; the update
    is computed on it and rounded into the parameter.

    Example:
        >>> torch.manual_seed(0)  # doctest: +ELLIPSIS
        <torch._C.Generator object at ...>
        >>> X = torch.nn.Parameter(torch.linalg.qr(torch.randn(8, 3))[0])
        >>> C = torch.randn(8, 8); C = C + C.T
        >>> opt = IMuon([{"params": [X], "manifold": "stiefel"}], lr=0.05)
        >>> for _ in range(5):
        ...     opt.zero_grad(); loss = torch.trace(X.T @ C @ X); loss.backward(); opt.step()
        >>> float((X.T @ X - torch.eye(3)).abs().max()) < 1e-5
        True
    """

    def __init__(
        self,
        params: Iterable[Tensor] | Iterable[dict[str, Any]],
        lr: float = 0.02,
        weight_decay: float = 0.0,
        momentum: float = 0.95,
        nesterov: bool = True,
        *,
        norm: object = "spectral",
        manifold: str = "auto",
        stiefel_metric: str = "euclidean",
        retraction: str = "polar",
        fixed_rank_lift: str = "horizontal",
        factor_layout: str = "AB",
        rebalance_every: int = 0,
        polar: str = "auto",
        polar_dtype: torch.dtype | None = None,
        scaling: str = "lmo",
        lr_scale: str = "original",
        adamw_lr: float = AUX_ADAMW.lr,
        adamw_betas: tuple[float, float] = AUX_ADAMW.betas,
        adamw_eps: float = AUX_ADAMW.eps,
        adamw_weight_decay: float = AUX_ADAMW.weight_decay,
        nonfinite: str = "skip",
        head: str | bool | None = True,
    ):
        defaults = dict(
            lr=lr,
            momentum=momentum,
            nesterov=nesterov,
            norm=norm,
            weight_decay=weight_decay,
            manifold=manifold,
            stiefel_metric=stiefel_metric,
            retraction=retraction,
            fixed_rank_lift=fixed_rank_lift,
            factor_layout=factor_layout,
            rebalance_every=rebalance_every,
            polar=polar,
            polar_dtype=polar_dtype,
            scaling=scaling,
            lr_scale=lr_scale,
            adamw_lr=adamw_lr,
            adamw_betas=adamw_betas,
            adamw_eps=adamw_eps,
            adamw_weight_decay=adamw_weight_decay,
        )
        self._validate(defaults)
        if nonfinite not in ("skip", "raise"):
            raise ValueError(f"invalid nonfinite: {nonfinite!r} (use 'skip' or 'raise')")
        self.nonfinite = nonfinite
        if isinstance(params, nn.Module):
            params = module_groups(params, head)
        elif head is not True:
            raise ValueError(f"head={head!r} needs an nn.Module as params, not tensors")
        super().__init__(params, defaults)
        self._owners: dict[int, Tensor] = {}
        self._gathered_grads: dict[int, Tensor] = {}
        self._work: dict[Tensor, Tensor] = {}

    # ------------------------------------------------------------------ validation
    def add_param_group(self, param_group: dict[str, Any]) -> None:
        """As torch's, then the same checks as the constructor: option values, and points
        on their manifolds (a group added later is held to the same rules)."""
        if isinstance(param_group, dict):
            self._check_keys(param_group)
        super().add_param_group(param_group)
        group = self.param_groups[-1]
        try:
            self._validate(group)
            self._check_group_points(group)
        except Exception:
            self.param_groups.pop()
            raise

    # keys torch itself or its schedulers put in a group, besides the options
    _TORCH_GROUP_KEYS = frozenset({"params", "param_names", "name", "initial_lr"})

    def _check_keys(self, group: dict[str, Any]) -> None:
        # a misspelt option ("manfold") would silently mean the default geometry
        known = set(getattr(self, "defaults", {})) | self._TORCH_GROUP_KEYS
        for key in group:
            if key not in known:
                close = difflib.get_close_matches(str(key), sorted(known), n=1)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                raise ValueError(f"unknown param group option {key!r}{hint}")

    @staticmethod
    def _check_decay(g: dict[str, Any]) -> None:
        # (1 - lr wd) <= 0 zeroes or flips the parameters (fixed-rank factors then collapse
        # to zero and the next step's SVD fails): refuse it, at construction and at each step
        # (a scheduler may raise lr later).
        for lr_key, wd_key in (("lr", "weight_decay"), ("adamw_lr", "adamw_weight_decay")):
            rate = adamw_rate(g) if lr_key == "adamw_lr" else g[lr_key]
            if g[wd_key] and rate * g[wd_key] >= 1:
                raise ValueError(
                    f"{lr_key} * {wd_key} = {g[lr_key]!r} * {g[wd_key]!r} >= 1: decoupled "
                    "weight decay would scale the parameters by 1 - lr * wd <= 0; lower one"
                )

    @staticmethod
    def _validate(g: dict[str, Any]) -> None:
        lr = g["lr"]
        if not isinstance(lr, (int, float)) or not math.isfinite(lr) or lr < 0:
            raise ValueError(f"invalid lr: {lr!r} (need a finite number >= 0)")
        _check_unit("momentum", g["momentum"], 0.0, 1.0)
        if not isinstance(g["nesterov"], bool):
            raise ValueError(f"invalid nesterov: {g['nesterov']!r} (need a bool)")
        parse_norm(g["norm"])
        wd = g["weight_decay"]
        if not isinstance(wd, (int, float)) or not math.isfinite(wd) or wd < 0:
            raise ValueError(f"invalid weight_decay: {wd!r} (need a finite number >= 0)")
        if g["manifold"] not in MANIFOLDS:
            raise ValueError(f"invalid manifold: {g['manifold']!r} (use one of {MANIFOLDS})")
        if g["manifold"] in ("stiefel", "grassmann", "sphere") and wd != 0:
            raise ValueError(
                f"weight_decay={wd!r} on manifold {g['manifold']!r}: the constraint fixes the "
                "scale, so there is nothing to decay; set weight_decay=0 for this group"
            )
        for key, options in (
            ("stiefel_metric", ("euclidean", "canonical")),
            ("retraction", ("polar", "qr")),
            ("fixed_rank_lift", ("horizontal", "total")),
            ("factor_layout", ("AB", "peft")),
            ("polar", POLAR_METHODS),
            ("scaling", ("lmo", "dual")),
            ("lr_scale", ("original", "match_rms_adamw", "none")),
        ):
            if g[key] not in options:
                raise ValueError(f"invalid {key}: {g[key]!r} (use one of {options})")
        if g["polar_dtype"] not in (None, torch.float32, torch.float64, torch.bfloat16):
            raise ValueError(
                f"invalid polar_dtype: {g['polar_dtype']!r} (None, float32, float64, bfloat16)"
            )
        k = g["rebalance_every"]
        if isinstance(k, bool) or not isinstance(k, int) or k < 0:
            raise ValueError(f"invalid rebalance_every: {k!r} (need an int >= 0; 0: never)")
        alr = g["adamw_lr"]
        if not isinstance(alr, (int, float)) or not math.isfinite(alr) or alr < 0:
            raise ValueError(f"invalid adamw_lr: {alr!r}")
        betas = g["adamw_betas"]
        if not isinstance(betas, (tuple, list)) or len(betas) != 2:
            raise ValueError(f"invalid adamw_betas: {betas!r} (need two numbers in [0, 1))")
        for b in betas:
            _check_unit("adamw_betas", b, 0.0, 1.0)
        if not (isinstance(g["adamw_eps"], (int, float)) and g["adamw_eps"] > 0):
            raise ValueError(f"invalid adamw_eps: {g['adamw_eps']!r} (need > 0)")
        awd = g["adamw_weight_decay"]
        if not isinstance(awd, (int, float)) or not math.isfinite(awd) or awd < 0:
            raise ValueError(f"invalid adamw_weight_decay: {awd!r}")
        IMuon._check_decay(g)

    def _kind(self, group: dict[str, Any], p: Tensor) -> str:
        kind = group["manifold"]
        geo = geoopt_kind(p)  # a geoopt ManifoldParameter's own manifold (or a clear refusal)
        if kind == "auto":
            kind = (
                getattr(p, _TAG, None)
                or (geo.manifold if geo is not None else None)
                or ("euclidean" if p.ndim == 2 else "adamw")
            )
        elif geo is not None and geo.manifold is not None and geo.manifold != kind:
            raise ValueError(
                f"a geoopt {type(p.manifold).__name__} parameter is in a group with "
                f"manifold={kind!r}: its steps would leave the manifold; put it in a group "
                f"with manifold={geo.manifold!r} or 'auto'"
            )
        if kind in ("stiefel", "grassmann", "spd", "euclidean") and p.ndim != 2:
            raise ValueError(f"manifold {kind!r} needs 2-D parameters; got shape {tuple(p.shape)}")
        if kind == "sphere" and p.ndim != 1:
            raise ValueError(f"manifold 'sphere' needs 1-D parameters; got shape {tuple(p.shape)}")
        return kind

    @staticmethod
    def _metric(group: dict[str, Any], p: Tensor) -> str:
        """The Stiefel metric of ``p``: a geoopt manifold's own, else the group's option."""
        geo = geoopt_kind(p)
        return (
            geo.stiefel_metric
            if geo is not None and geo.stiefel_metric
            else group["stiefel_metric"]
        )

    def _manifold(self, group: dict[str, Any], kind: str, x: Tensor, metric: str | None = None):
        n, p = x.shape[-2:]
        if kind in ("stiefel", "sphere"):
            metric = metric or group["stiefel_metric"]
            return Stiefel(n, p, metric=metric, retraction=group["retraction"])
        if kind == "grassmann":
            return Grassmann(n, p)
        if kind == "spd":
            if n != p:
                raise ValueError(f"SPD parameters must be square; got shape {(n, p)}")
            return SPD(n, retraction="expmap")
        raise AssertionError(kind)

    def _pairs(self, group: dict[str, Any]) -> list[tuple[Tensor, Tensor]]:
        ps = group["params"]
        if len(ps) % 2:
            raise ValueError(
                f"a fixed_rank group needs its params in (A, B) pairs; got {len(ps)} tensors"
            )
        pairs = list(zip(ps[0::2], ps[1::2], strict=True))
        for a, b in pairs:
            bb = b.mT if group["factor_layout"] == "peft" else b
            if a.ndim != 2 or bb.ndim != 2 or a.shape[1] != bb.shape[1]:
                raise ValueError(
                    f"fixed_rank pair shapes {tuple(a.shape)}, {tuple(b.shape)} do not fit "
                    f"factor_layout={group['factor_layout']!r} (A (m, r) with B (n, r), or "
                    "peft's lora_B (out, r) with lora_A (r, in))"
                )
            r = a.shape[1]
            if r > min(a.shape[0], bb.shape[0]):
                raise ValueError(
                    f"fixed_rank rank r={r} exceeds the matrix dims m={a.shape[0]}, n={bb.shape[0]}"
                )
        return pairs

    @torch.no_grad()
    def _check_group_points(self, group: dict[str, Any]) -> None:
        if group["manifold"] == "fixed_rank":
            for a, b in self._pairs(group):
                x = self._fr_point(group, _full(a), _full(b))
                FixedRankFactored(x[0].shape[0], x[1].shape[0], x[0].shape[1]).check_point(x)
                for t in (a, b):
                    geo = geoopt_kind(t)
                    if geo is not None and geo.manifold is not None:
                        raise ValueError(
                            f"a geoopt {type(t.manifold).__name__} parameter cannot be a "
                            "fixed_rank factor"
                        )
            return
        for p in group["params"]:
            kind = self._kind(group, p)
            if kind in _CONSTRAINED:
                metric = self._metric(group, p)
                p = _full(p)
                x = _matrix(kind, p).to(_work_dtype(p))
                # A bf16/fp16 point is rounded off the manifold by ~eps(bf16) = 8e-3; accept
                # that much, and start the float32 master at the nearest manifold point.
                tol = None if p.dtype in (torch.float32, torch.float64) else _LOW_PRECISION_TOL
                self._manifold(group, kind, x, metric).check_point(x, atol=tol, rtol=tol)

    # ------------------------------------------------------------------ state helpers
    def _master(self, p: Tensor, manifold=None, kind: str = "") -> Tensor:
        """The float32/float64 tensor the update is computed on (``p`` itself when possible).

        A low-precision point on a manifold is projected (``manifold.proj``: polar factor,
        eigenvalue floor) when its master copy is created.
        """
        if p.dtype in (torch.float32, torch.float64):
            return p
        st = self._state(p)
        if "master" not in st:
            m = p.detach().to(torch.float32)
            if manifold is not None:
                view = _matrix(kind, m)
                view.copy_(manifold.proj(view))
            st["master"] = m
        return st["master"]

    @staticmethod
    def _writeback(p: Tensor, master: Tensor) -> None:
        if master is not p:
            p.copy_(master.to(p.dtype))

    def _grad(self, p: Tensor) -> Tensor:
        g = self._gathered_grads.get(id(p))
        return (p.grad if g is None else g).to(_work_dtype(p))

    def _state(self, p: Tensor) -> dict:
        # During a step a gathered full tensor stands in for its sharded parameter; the state
        # stays keyed by the parameter itself, so state_dict and param_groups see no difference.
        return self.state[self._owners.get(id(p), p)]

    # ------------------------------------------------------------------ sharded parameters
    def _gather(self) -> dict[Tensor, Tensor]:
        """Full (unsharded) copies of every DTensor parameter and its gradient.

        The closed-form LMOs need the whole matrix (its polar factor, its frames), so a
        parameter sharded by FSDP2 is all-gathered, updated in full on every rank (each rank
        computes the same update from the same gathered gradient), and each rank keeps its own
        shard of the result. The optimizer state of a sharded parameter is held in full.
        """
        work: dict[Tensor, Tensor] = {}
        dtensor = _dtensor_cls()
        if dtensor is None:
            return work
        for group in self.param_groups:
            for p in group["params"]:
                if isinstance(p, dtensor):
                    full = p.full_tensor().detach()
                    work[p] = full
                    self._owners[id(full)] = p
                    if p.grad is not None:
                        self._gathered_grads[id(full)] = p.grad.full_tensor()
        return work

    @staticmethod
    def _scatter(work: dict[Tensor, Tensor]) -> None:
        if not work:
            return
        from torch.distributed.tensor import distribute_tensor  # loaded: work holds DTensors

        for p, full in work.items():
            # src_data_rank=None: every rank slices its own shard, no communication.
            shard = distribute_tensor(full, p.device_mesh, p.placements, src_data_rank=None)
            p.to_local().copy_(shard.to_local())

    def _buf(self, p: Tensor, like: Tensor) -> Tensor:
        st = self._state(p)
        if "momentum_buffer" not in st:
            st["momentum_buffer"] = torch.zeros_like(like)
        return st["momentum_buffer"]

    @staticmethod
    def _fr_point(group, a: Tensor, b: Tensor) -> Factors:
        bb = b.mT if group["factor_layout"] == "peft" else b
        return Factors(a.to(_work_dtype(a)), bb.to(_work_dtype(b)))

    # ------------------------------------------------------------------ step
    def _all_finite(self) -> bool:
        grads = [
            self._gathered_grads.get(id(q), q.grad)
            for g in self.param_groups
            for p in g["params"]
            if p.grad is not None
            for q in [self._work.get(p, p)]
        ]
        if not grads:
            return True
        if any(t.is_sparse for t in grads):
            raise RuntimeError(
                "IMuon does not support sparse gradients (an nn.Embedding with sparse=True?): "
                "its steps need the whole gradient matrix; use dense gradients, or "
                "torch.optim.SparseAdam for those parameters"
            )
        # Fast path, exact: a sum with a NaN or an infinite term is NaN or infinite (inf + x is
        # inf or NaN, NaN propagates, whatever the summation order), so a finite sum of sums
        # proves every entry finite. One read of each gradient instead of a boolean tensor per
        # gradient (~40x cheaper for a 4096x64 factor). A non-finite sum can also come from
        # finite entries that overflow; the exact entrywise check then decides.
        if bool(torch.isfinite(torch.stack([t.sum(dtype=torch.float32) for t in grads]).sum())):
            return True
        return bool(torch.stack([torch.isfinite(t).all() for t in grads]).all())

    @torch.no_grad()
    def step(self, closure: Callable[[], Tensor] | None = None):  # type: ignore[override]
        """One step; ``closure`` (re-evaluating the loss with grads) is called under grad mode.

        Returns:
            The closure's loss, or ``None``.
        """
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        self._owners, self._gathered_grads = {}, {}
        self._work = self._gather()
        try:
            return self._step(loss)
        finally:
            self._owners, self._gathered_grads, self._work = {}, {}, {}

    def _step(self, loss):
        if not self._all_finite():
            if self.nonfinite == "raise":
                raise FloatingPointError("IMuon.step: a gradient contains NaN or inf")
            warnings.warn(
                "IMuon.step: a gradient contains NaN or inf; the step was skipped",
                RuntimeWarning,
                stacklevel=2,
            )
            return loss
        for group in self.param_groups:
            self._check_decay(group)
            if group["manifold"] == "fixed_rank":
                for a, b in self._pairs(group):
                    if a.grad is not None and b.grad is not None:
                        self._step_fixed_rank(group, self._work.get(a, a), self._work.get(b, b))
                    elif a.grad is not None or b.grad is not None:
                        warnings.warn(
                            "IMuon.step: a fixed_rank pair has a gradient on one factor only "
                            f"(shapes {tuple(a.shape)}, {tuple(b.shape)}); the pair was not "
                            "stepped (is the other factor frozen or unused in the loss?)",
                            RuntimeWarning,
                            stacklevel=3,
                        )
                continue
            for p in group["params"]:
                if p.grad is None:
                    continue
                kind = self._kind(group, p)
                q = self._work.get(p, p)
                if kind == "adamw":
                    self._step_adamw(group, q)
                elif kind == "euclidean":
                    self._step_euclidean(group, q)
                else:
                    self._step_manifold(group, kind, q, self._metric(group, p))
        self._scatter(self._work)
        return loss

    @staticmethod
    def _direction(group, buf: Tensor, rgrad: Tensor) -> Tensor:
        beta = group["momentum"]
        buf.lerp_(rgrad, 1 - beta)
        return rgrad.lerp(buf, beta) if group["nesterov"] else buf.clone()

    def _count(self, p: Tensor) -> None:
        st = self._state(p)
        st["step"] = st.get("step", 0) + 1

    def _step_euclidean(self, group, p: Tensor) -> None:
        x = self._master(p)
        g = self._grad(p)
        self._count(p)
        d = self._direction(group, self._buf(p, x), g)
        m, n = x.shape
        lr = group["lr"]
        if group["lr_scale"] == "original":
            lr = lr * math.sqrt(max(1.0, m / n))
        elif group["lr_scale"] == "match_rms_adamw":
            lr = lr * 0.2 * math.sqrt(max(m, n))
        if group["weight_decay"]:
            x.mul_(1 - group["lr"] * group["weight_decay"])
        dual = group["scaling"] == "dual"
        x.add_(
            euclidean_lmo(d, group["norm"], group["polar"], dual, group["polar_dtype"]), alpha=lr
        )
        self._writeback(p, x)

    def _step_manifold(self, group, kind: str, p: Tensor, metric: str) -> None:
        M = self._manifold(group, kind, _matrix(kind, p), metric)
        master = self._master(p, M, kind)
        view = _matrix(kind, master)
        g = _matrix(kind, self._grad(p))
        self._count(p)
        buf = _matrix(kind, self._buf(p, master))
        d = self._direction(group, buf, M.egrad2rgrad(view, g))
        dual = group["scaling"] == "dual"
        if kind in ("stiefel", "sphere"):
            xi = stiefel_lmo(
                view, d, group["norm"], metric, group["polar"], dual, group["polar_dtype"]
            )
        elif kind == "grassmann":
            xi = grassmann_lmo(view, d, group["norm"], group["polar"], dual, group["polar_dtype"])
        else:
            xi = spd_lmo(view, d, group["norm"], dual)
        new = M.retr(view, group["lr"] * xi)
        if kind == "spd" and group["weight_decay"]:
            new = powm_sym(new, 1 - group["lr"] * group["weight_decay"])
        buf.copy_(M.transp(view, new, buf))
        view.copy_(new)
        self._writeback(p, master)

    def _step_fixed_rank(self, group, a: Tensor, b: Tensor) -> None:
        peft = group["factor_layout"] == "peft"
        ma, mb = self._master(a), self._master(b)
        vb = mb.mT if peft else mb
        x = Factors(ma, vb)
        ga = self._grad(a)
        gb = self._grad(b).mT if peft else self._grad(b)
        self._count(a)
        self._count(b)
        buf_a = self._buf(a, ma)
        buf_b_full = self._buf(b, mb)
        buf_b = buf_b_full.mT if peft else buf_b_full
        # One pair of QRs per step. Everything between them and the LMO happens in
        # L-coordinates eta = (xi_A R_B^T, xi_B R_A^T), where the metric is Frobenius, the
        # Riemannian gradient is the horizontal part of (G_A R_B^-1, G_B R_A^-1) and the
        # projection transport of the momentum is the horizontal part of its lift: one
        # projection and one pair of triangular solves back to the factors per step.
        frames = fixed_rank_frames(x)
        qa, ra, qb, rb = frames
        # Each R enters three solves (gradient lift, momentum store, way back): for tall
        # factors one float64 inverse of the r x r factor serves all three as GEMMs (the
        # machine-robust route, see imuon.lmo.triangular_inverse).
        tall = use_inverse(ma.shape[0], ma.shape[1]) and use_inverse(vb.shape[0], vb.shape[1])
        inv = (triangular_inverse(ra), triangular_inverse(rb)) if tall else None
        ia, ib = inv if inv is not None else (None, None)
        g_a = rsolve_triangular(rb, ga, upper=True, inverse=ib)
        g_b = rsolve_triangular(ra, gb, upper=True, inverse=ia)
        # The buffer is horizontal at the previous point; its lift here, projected, is the
        # transport (it stays right if the factors were changed between steps).
        beta = group["momentum"]
        # m = beta * transport(buf) + (1 - beta) * rgrad is the horizontal part of the same
        # combination of the raw lifts (projection is linear), built in place on the lift.
        raw_a = (buf_a @ rb.mT).lerp_(g_a, 1 - beta)
        raw_b = (buf_b @ ra.mT).lerp_(g_b, 1 - beta)
        # Horizontal part C + Q K (K the average of the two frame coefficients, C the
        # complement) written as raw + Q (K - Q^T raw): one product with each frame. (Products
        # plus in-place adds: torch.addmm is ~2x slower than both at r = 8 on a CPU.)
        ka, kb = qa.mT @ raw_a, qb.mT @ raw_b
        k = 0.5 * (ka + kb.mT)
        m_a = (qa @ (k - ka)).add_(raw_a)
        m_b = (qb @ (k.mT - kb)).add_(raw_b)
        if group["nesterov"]:
            # Nesterov's (1 - beta) * rgrad + beta * m is the horizontal part of the same
            # combination of the raw lifts: beta * raw + (1 - beta) * g, in place on g.
            d_a, d_b = g_a.lerp_(raw_a, beta), g_b.lerp_(raw_b, beta)
            kda, kdb = qa.mT @ d_a, qb.mT @ d_b
            kd = 0.5 * (kda + kdb.mT)
        else:
            d_a, d_b, kda, kdb, kd = raw_a, raw_b, ka, kb, k
        if group["fixed_rank_lift"] == "horizontal":
            # Lift diag(sqrt(2) K, C_A, C_B) with C = d - Q (Q^T d).
            blocks = [
                math.sqrt(2.0) * kd,
                (qa @ -kda).add_(d_a),
                (qb @ -kdb).add_(d_b),
            ]
        elif group["nesterov"]:
            blocks = [(qa @ (kd - kda)).add_(d_a), (qb @ (kd.mT - kdb)).add_(d_b)]
        else:
            blocks = [m_a, m_b]  # the horizontal direction is the momentum itself
        ib_t = None if ib is None else ib.mT
        ia_t = None if ia is None else ia.mT
        _store(
            buf_a, rsolve_triangular(rb.mT, m_a, upper=False, out=_out(buf_a, m_a), inverse=ib_t)
        )
        _store(
            buf_b, rsolve_triangular(ra.mT, m_b, upper=False, out=_out(buf_b, m_b), inverse=ia_t)
        )
        xi = fixed_rank_lmo_of_blocks(
            frames,
            blocks,
            group["norm"],
            group["fixed_rank_lift"],
            group["polar"],
            group["scaling"] == "dual",
            group["polar_dtype"],
            inv,
        )
        # x <- x + lr xi in place (ma, vb are the factors of x; xi no longer needs them).
        ma.add_(xi.A, alpha=group["lr"])
        vb.add_(xi.B, alpha=group["lr"])
        if group["weight_decay"]:
            s = math.sqrt(max(0.0, 1 - group["lr"] * group["weight_decay"]))
            ma.mul_(s)
            vb.mul_(s)
        every = group["rebalance_every"]
        if every and self._state(a)["step"] % every == 0:
            # the buffer is a tangent pair at the previous point; a gauge acts on it by the
            # same M whatever the point, so the next step's transport stays covariant
            for dst, src in zip(
                (ma, vb, buf_a, buf_b), balanced_gauge(ma, vb, buf_a, buf_b), strict=True
            ):
                dst.copy_(src)
        self._writeback(a, ma)
        self._writeback(b, mb)

    def _step_adamw(self, group, p: Tensor) -> None:
        x = self._master(p)
        g = self._grad(p)
        st = self._state(p)
        if "exp_avg" not in st:
            st["exp_avg"] = torch.zeros_like(x)
            st["exp_avg_sq"] = torch.zeros_like(x)
        self._count(p)
        t = st["step"]
        b1, b2 = group["adamw_betas"]
        st["exp_avg"].lerp_(g, 1 - b1)
        st["exp_avg_sq"].mul_(b2).addcmul_(g, g, value=1 - b2)
        lr = adamw_rate(group)
        if group["adamw_weight_decay"]:
            x.mul_(1 - lr * group["adamw_weight_decay"])
        denom = (st["exp_avg_sq"] / (1 - b2**t)).sqrt_().add_(group["adamw_eps"])
        x.addcdiv_(st["exp_avg"], denom, value=-lr / (1 - b1**t))
        self._writeback(p, x)

    # ------------------------------------------------------------------ state dict
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """As torch's, but float32 masters and buffers of bf16 parameters stay float32."""
        saved = copy.deepcopy(state_dict["state"])
        super().load_state_dict(state_dict)
        for group in self.param_groups:  # a checkpoint from before an option was added
            for key, value in self.defaults.items():
                group.setdefault(key, value)
        ids = [i for g in state_dict["param_groups"] for i in g["params"]]
        params = [p for g in self.param_groups for p in g["params"]]
        for pid, p in zip(ids, params, strict=True):
            for k, v in saved.get(pid, {}).items():
                if torch.is_tensor(v) and v.is_floating_point() and k != "step":
                    self.state[p][k] = v.to(device=p.device)
