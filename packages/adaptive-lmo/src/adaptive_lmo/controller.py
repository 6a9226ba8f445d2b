r"""The exponent controller: when a layer's exponent is chosen and from which statistics.

A mixin of :class:`adaptive_lmo.AdaptiveLMO` (it reads the optimizer's ``state``, its
:class:`adaptive_lmo.stats.ActivationCollector` and its layer names). Per criterion step and
layer (a :class:`~adaptive_lmo.layer_step.LayerStep`, whose ``crit`` it fills):
:meth:`~ExponentController._prepare_criterion` pairs the direction's SVD (this step's, or the
one kept from the previous step with ``stats="next_batch"``) with the sketches the hooks
recorded; :meth:`~ExponentController._sync_curvatures` averages them over
``torch.distributed`` ranks; :meth:`~ExponentController._choose` runs
:func:`adaptive_lmo.criterion.choose_exponent` with the K-FAC curvature, the direction floor,
the fallbacks and the switch test (README: "Too few effective rows"). Only criterion steps
read values on the host.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor

from shared_core.polar import default_rtol

from .criterion import (
    GRID_POINTS,
    alignment,
    choose_exponent,
    curvature_along,
    curvature_matrix,
    ledoit_wolf_shrinkage,
    member_spectrum,
    row_moments,
    shrink_to_identity,
    spectrum_gain,
    surrogate_decrease,
    switch_gain,
    t_quantile,
    weighted_decrease,
)
from .fractional import SVDFactors, ns_spectrum, svd_factors
from .layer_step import SYNCED_STATS, CriterionInputs, LayerStep
from .mixture import MIXTURE_STEPS, mixture_loss, polar_norm
from .spectral import criterion_factors

__all__ = ["ExponentController"]


class ExponentController:
    """Criterion-step logic of :class:`adaptive_lmo.AdaptiveLMO` (a mixin; see the module)."""

    state: Any
    param_groups: list[dict[str, Any]]
    sync_stats: bool

    @staticmethod
    def _fresh(st: dict[str, Any], g: dict[str, Any], t: int) -> bool:
        """Whether the layer's step ``t`` takes a fresh spectral decomposition for the criterion.

        Steps 1, 1 + k, ... (``k = update_every``) until the first choice; after that the
        step scheduled by the backoff (:meth:`_mark_snap`, :meth:`_choose`)."""
        nxt = st.get("next_snap")
        if nxt is None:
            return (t - 1) % g["update_every"] == 0
        return t >= nxt

    @staticmethod
    def _interval(st: dict[str, Any], g: dict[str, Any]) -> int:
        return g["update_every"] * 2 ** min(st.get("stable", 0), g.get("backoff", 0))

    def _mark_snap(self, st: dict[str, Any], g: dict[str, Any]) -> None:
        st["last_snap"] = st["step"]
        st["next_snap"] = st["step"] + self._interval(st, g)

    def _choose(self, it: LayerStep) -> None:
        """Choose the exponent, then count stable choices and space the next criterion step.

        Stable: the layer stays on the same route (a = 0 or not) and its exponent moves by at
        most one criterion grid step, or (off a = 0, ``min_gain > 0``) by an amount whose
        predicted one-step decrease differs from the old exponent's by less than ``min_gain``
        on this step's statistics (:meth:`_move_below_price`). Each stable choice in a row
        doubles the spacing (up to ``2**backoff``): a geometry the criterion keeps confirming
        is re-checked less often, so its SVDs amortise over more steps; a change resets the
        spacing to ``update_every``. The exponent itself always takes the new choice.
        """
        st, g = self.state[it.p], it.group
        # a fallback exponent is no choice to be stable against
        old = None if st.get("source", "").startswith("fallback") else st.get("exponent")
        crit = it.crit
        assert crit is not None  # chosen on due steps only, which _prepare_criterion filled
        self._choose_exponent(it, crit)
        self._exact_rule(it, crit)
        self._mixture_rule(it, crit)
        new = st.get("exponent")
        stable = (
            old is not None
            and new is not None
            and (old == 0.0) == (new == 0.0)
            and (abs(new - old) <= 1.0 / (GRID_POINTS - 1) or self._move_below_price(it, old, new))
        )
        st["stable"] = st.get("stable", 0) + 1 if stable else 0
        if "last_snap" in st:
            st["next_snap"] = st["last_snap"] + self._interval(st, g)

    @staticmethod
    def _move_below_price(it: LayerStep, old: float, new: float) -> bool:
        """Whether a move of an exponent off a = 0 from ``old`` to ``new`` changes the
        surrogate's predicted one-step decrease (this step's statistics) by less than
        ``min_gain``: the resolution at which the cost rule prices geometries, so such a
        move confirms the geometry for the backoff's purpose. Why not the exponent alone:
        the decrease is flat in ``a`` near its best, and an exponent drifting a few grid
        steps at a relative decrease change of a fraction of a percent reset the spacing to
        ``update_every`` at every choice (measured on the overhead benchmark, docs/overhead.md).
        Inert where ``min_gain`` is (``method="svd"``, float64 layers: every step pays an SVD,
        so there is no price to measure a move against).
        """
        mg, crit = it.group.get("min_gain", 0.0), it.crit
        if (
            not mg > 0
            or it.group["method"] != "auto"
            or it.P.dtype == torch.float64
            or crit is None
            or crit.curv is None
            or old == 0.0
            or new == 0.0
        ):
            return False
        at = torch.tensor([new, old], dtype=torch.float64, device=crit.s.device)
        dec = surrogate_decrease(at, crit.s, crit.curv, crit.d)
        change = float(dec[0] / dec[1]) - 1.0
        return math.isfinite(change) and abs(change) < mg

    def _exact_rule(self, it: LayerStep, crit: CriterionInputs) -> None:
        """Whether this layer's a = 0 steps take the exact polar factor until the next choice
        (option ``exact_polar``).

        On the ``"auto"`` route a = 0 steps use torch Muon's five bfloat16 Newton-Schulz
        steps, which leave the small normalised singular values of a wide spectrum far below
        1 (:func:`adaptive_lmo.fractional.ns_spectrum`). The surrogate scores both spectra
        with the same statistics: the exact factor (all ones) is used when the lower
        ``switch_confidence`` bound of its predicted gain in one-step decrease over
        Newton-Schulz's (:meth:`_spectrum_bound`, the rows' delta-method variance on both
        K-FAC factors) reaches ``min_gain``, the price of an SVD per step, as for an exponent
        off 0: an SVD per step is paid only for a loss the rows resolve. Both spectra are
        fixed maps of ``s`` (no argmax, so no winner's curse). ``switch_confidence=0``: the
        point estimate. Off by default: on the overhead benchmark the estimate moves between
        -23% and +51% from one criterion step to the next while its bound sits about 2%
        below it, so those moves are not row noise (docs/teacher-student-routes.md).
        """
        st, g = self.state[it.p], it.group
        st["exact_a0"] = False
        if (
            not g.get("exact_polar", False)
            or st.get("exponent") != 0.0
            or g["method"] != "auto"
            or it.P.dtype == torch.float64  # its a = 0 is exact already
            or crit.curv is None
        ):
            return
        s, d, curv = crit.s, crit.d, crit.curv
        ones, ns = torch.ones_like(s, dtype=torch.float64), ns_spectrum(s)
        dec = weighted_decrease(torch.stack([ones, ns]), s, curv, d)
        loss = float(dec[0] / dec[1]) - 1.0
        z, mg = g.get("switch_confidence", 0.0), g.get("min_gain", 0.0)
        low = self._spectrum_bound(ones, ns, it, crit, loss, z) if z > 0 and loss > 0 else loss
        st["ns_loss"], st["ns_loss_bound"] = loss, low
        if loss > 0 and low >= mg:
            st["exact_a0"] = True
            bound = f", lower {z:g} bound {low:.2%}" if z > 0 else ""
            st["source"] += f"; exact polar at a = 0 (Newton-Schulz loses {loss:.2%}{bound})"

    def _mixture_rule(self, it: LayerStep, crit: CriterionInputs) -> None:
        """Whether this layer's steps off a = 0 take the Newton-Schulz mixture until the next
        choice, instead of an SVD per step (``method="auto"``).

        The weights are fitted on the criterion's spectrum and the realised bfloat16
        combination is scored by the surrogate with the criterion's own statistics against
        the exact member (:func:`adaptive_lmo.mixture.mixture_loss`); it stands when it
        loses less than ``min_gain``, the price the cost rule puts on an SVD per step (so an
        SVD per step is paid only for a resolved ``min_gain`` of predicted decrease).
        """
        st, g = self.state[it.p], it.group
        for k in ("mixture", "mixture_a", "mixture_norm", "mixture_loss"):
            st.pop(k, None)
        a = st.get("exponent")
        if a is None or not self._mixable(it, crit, a):
            return
        w, loss = self._score_mixture(it, crit, a)
        st["mixture_loss"] = loss
        if loss < g.get("min_gain", 0.0):
            # Python floats for one matrix: the per-step sum then needs no device read
            st["mixture"] = w.tolist() if w.ndim == 1 else w.to(it.P.device)
            st["mixture_a"] = a
            st["mixture_norm"] = polar_norm(crit.s, g["scale"], self._rank_rtol(it))

    @staticmethod
    def _rank_rtol(it: LayerStep) -> float:
        return default_rtol(*it.shape[-2:], it.P.dtype)

    @staticmethod
    def _mixable(it: LayerStep, crit: CriterionInputs, a: float) -> bool:
        """Whether exponent ``a`` of this layer could take the mixture: the ``"auto"`` route,
        0 < a < 1, a float32-or-lower layer (float64 stays exact everywhere) and the
        criterion's factors and curvature at hand to score it with."""
        return (
            it.group["method"] == "auto"
            and 0.0 < a < 1.0
            and it.P.dtype != torch.float64
            and crit.curv is not None
            and crit.U is not None
            and crit.Vh is not None
        )

    def _score_mixture(
        self, it: LayerStep, crit: CriterionInputs, a: float
    ) -> tuple[Tensor, float]:
        """The mixture's weights and loss for exponent ``a`` (computed once per step and a).

        The cheapest that passes: the step counts of
        :data:`adaptive_lmo.mixture.MIXTURE_STEPS` (by default torch Muon's five alone; fewer
        did not survive the spectrum's drift, see there) are tried in order and the first
        whose realised combination loses less than ``min_gain`` against the exact member is
        taken (the acceptance test of :meth:`_mixture_rule`); none passing: the last one
        tried, which the rule then rejects.
        """
        if crit.mixture is not None and crit.mixture[0] == a:
            return crit.mixture[1], crit.mixture[2]
        assert crit.U is not None and crit.Vh is not None and crit.curv is not None
        mg = it.group.get("min_gain", 0.0)
        for steps in MIXTURE_STEPS:
            w, loss = mixture_loss(
                crit.U,
                crit.s,
                crit.Vh,
                a,
                it.group["scale"],
                self._rank_rtol(it),
                crit.d,
                crit.c if crit.b_used is not None else crit.curv,
                crit.b_used,
                steps=steps,
            )
            if loss < mg:
                break
        crit.mixture = (a, w, loss)
        return w, loss

    def _mixture_keeps(self, it: LayerStep, crit: CriterionInputs, a: float, low: float) -> bool:
        """Whether ``a``, whose resolved gain ``low`` is positive but below ``min_gain``, stands
        on the Newton-Schulz mixture: the mixture is accepted (loses less than ``min_gain``)
        and keeps a positive realised gain over a = 0, ``(1 + low)(1 - loss) > 1``. Then the
        layer costs the mixture (1.3-1.4x a Newton-Schulz step, docs/mixture.md), not an SVD
        per step, so the SVD's price (``min_gain``) does not apply."""
        if not (low > 0 and self._mixable(it, crit, a)):
            return False
        _, loss = self._score_mixture(it, crit, a)
        return loss < it.group.get("min_gain", 0.0) and (1.0 + low) * (1.0 - loss) > 1.0

    def _cost_rule(self, a: float, it: LayerStep, crit: CriterionInputs, curv: Tensor) -> str:
        """``""`` when ``a`` pays for its per-step SVD, else why the layer takes a = 0.

        ``a`` stands when the lower confidence bound of its predicted relative gain over
        a = 0 reaches ``min_gain`` (:meth:`_gain_bound`; the point estimate itself when
        ``switch_confidence=0``). Why a bound and not the estimate: the criterion picks the
        argmax of a noisy curve, so even a layer whose true best is a = 0 shows a positive
        predicted gain at its pick; the bound removes those (docs/overhead.md). A bound that
        is positive but below ``min_gain`` still keeps ``a`` when the Newton-Schulz mixture
        carries it (:meth:`_mixture_keeps`): ``min_gain`` is the price of an SVD per step,
        which such a layer does not pay.
        """
        g = it.group
        crit.cheap_keep = False
        mg, z = g.get("min_gain", 0.0), g.get("switch_confidence", 0.0)
        if a == 0.0 or (mg <= 0 and z <= 0) or g["method"] != "auto":
            return ""
        s, d = crit.s, crit.d
        at = torch.tensor([a, 0.0], dtype=torch.float64, device=s.device)
        dec = surrogate_decrease(at, s, curv, d)
        gain = float(dec[0] / dec[1]) - 1.0
        if not gain > 0:
            # the lower bound never exceeds the estimate (t quantile and s.e. >= 0), so no
            # point gain decides without the bound's row sums (half of a criterion step's
            # cost, docs/overhead.md); NaN (unresolved) goes to a = 0 too
            return f"; a = {a:.3f} gains {gain:.2%} < min_gain over a = 0: Newton-Schulz"
        low = gain if z <= 0 else self._gain_bound(a, it, crit, gain, z)
        if low >= mg:
            return ""
        if self._mixture_keeps(it, crit, a, low):
            crit.cheap_keep = True
            return ""
        if z <= 0:
            return f"; a = {a:.3f} gains {gain:.2%} < min_gain over a = 0: Newton-Schulz"
        return (
            f"; a = {a:.3f} gains {gain:.2%}, lower {z:g} bound {low:.2%} < min_gain over "
            "a = 0: Newton-Schulz"
        )

    def _gain_bound(
        self, a: float, it: LayerStep, crit: CriterionInputs, gain: float, z: float
    ) -> float:
        r"""One-sided lower ``z`` confidence bound of the relative gain of ``a`` over a = 0:
        :meth:`_spectrum_bound` for the members :math:`(s/s_{max})^a` and :math:`1`."""
        w_new, w_old = member_spectrum(crit.s, a), member_spectrum(crit.s, 0.0)
        return self._spectrum_bound(w_new, w_old, it, crit, gain, z)

    def _spectrum_bound(
        self,
        w_new: Tensor,
        w_old: Tensor,
        it: LayerStep,
        crit: CriterionInputs,
        gain: float,
        z: float,
    ) -> float:
        r"""One-sided lower ``z`` confidence bound of the relative gain of the spectrum
        ``w_new`` over ``w_old`` (in the direction's singular basis), whose point estimate is
        ``gain``.

        The surrogate's denominator :math:`w^\top[(U^\top\hat BU)\circ(V^\top\hat\Sigma V)]w`
        is a mean over output-gradient rows with the input factor fixed, and equally a mean
        over input rows with the output factor fixed; to first order the two factors' row
        errors add, so the log-gain's variance is the sum of the two delta-method variances
        of :func:`adaptive_lmo.criterion.spectrum_gain` (input side: rows ``X V``, factor
        :math:`U^\top\hat BU`, or the identity for the input-only curvature). The bound is
        :math:`\exp(\log(1 + \text{gain}) - t_{z, n_{eff}-1}\,\text{s.e.}) - 1`, ``n_eff``
        the smaller Kish count of the two sides; fewer than 2 effective rows: ``-inf``.
        """
        s, d = crit.s, crit.d
        red = self._reducer(it.P.device)
        var, n_eff = 0.0, math.inf
        b = crit.b  # synchronised over ranks, so every rank takes the same sides
        sides = [] if b is None else [(crit.bz, crit.c)]
        xz = None  # a rank that recorded no input rows adds zeros to the sums
        if crit.x is not None and crit.Vh is not None:  # set together
            xz = crit.x.to(crit.Vh.dtype) @ crit.Vh.mT  # input rows in the V basis
        if b is None:  # input-only curvature: the quadratic form is diag(c)
            b = torch.eye(s.shape[-1], dtype=s.dtype, device=s.device)
            b = b.expand(*s.shape[:-1], -1, -1)
        sides.append((xz, b))
        for Z, C in sides:
            _, se, ne = spectrum_gain(w_new, w_old, s, Z, C, d, reduce=red)
            if not math.isfinite(se):
                return -math.inf
            var, n_eff = var + se * se, min(n_eff, ne)
        df = math.floor(n_eff) - 1 if math.isfinite(n_eff) else 0
        if df < 1 or not gain > -1.0:
            return -math.inf
        return math.expm1(math.log1p(gain) - t_quantile(z, df) * math.sqrt(var))

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
                elif self._fresh(st, g, st.get("step", 0) + 1):
                    due.add(id(p))
                if id(p) in due and g.get("curvature", "kfac") == "kfac":
                    want_out.add(id(p))
        self._collector.due = due
        self._collector.want_out = want_out

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

    def _prepare_criterion(self, it: LayerStep) -> None:
        """Take the hooks' rows for ``it``; on a due step, fill ``it.crit`` (and the factors
        the update reuses; ``stats="next_batch"`` also on steps that only keep them)."""
        p, g, st = it.p, it.group, self.state[it.p]
        X = self._collector.take(id(p))
        Gout, fisher = self._collector.take_output(id(p))
        kfac = g.get("curvature", "kfac") == "kfac"
        U = None
        if g["stats"] == "next_batch":
            # this step's factors: used by the update (svd route) and kept for the next step
            if it.snap:
                it.factors = self._decompose(it)
            else:
                it.factors = svd_factors(it.P) if g["method"] == "svd" else None
            if not it.due:
                return
            s, Vh = st.pop("pending_s"), st.pop("pending_Vh")
            d = st.pop("pending_d", None)
            U = st.pop("pending_U", None)
        else:
            f = self._decompose(it)
            it.factors = f
            s, Vh, U = f.s, f.Vh, f.U
            d = None if g["precondition"] is None else alignment(f.U, f.Vh, it.ghat)
        r = s.shape[-1]
        # shapes every rank agrees on (for the all-reduce), whatever it recorded
        crit = it.crit = CriterionInputs(
            s=s,
            d=d,
            c_shape=(*s.shape, r) if kfac else (s.numel(),),
            b_shape=(*s.shape, r) if kfac else None,
            bq_shape=(*s.shape[:-1], 2) if kfac else None,
            fisher=fisher,
            U=U,
        )
        if X is None:
            return
        if X.shape[-1] != it.shape[-1]:
            raise ValueError(
                f"AdaptiveLMO, layer {self._names[id(p)]}: recorded features have "
                f"{X.shape[-1]} columns, the matrix view {it.shape} needs {it.shape[-1]}"
            )
        crit.x, crit.Vh = X, Vh  # the cost rule's error estimate reads the input rows
        if not kfac:
            crit.c = curvature_along(Vh, X.to(Vh.dtype)).reshape(-1)
            return
        crit.c = curvature_matrix(Vh, X.to(Vh.dtype))
        if Gout is not None and U is not None:
            if Gout.shape[-1] != it.shape[-2]:
                raise ValueError(
                    f"AdaptiveLMO, layer {self._names[id(p)]}: recorded output gradients have "
                    f"{Gout.shape[-1]} columns, the matrix view {it.shape} needs "
                    f"{it.shape[-2]}"
                )
            # the rows in the U basis: the factor's moments and the switch test's rows
            crit.bz = Gout.to(U.dtype) @ U
            crit.b, q, k = row_moments(crit.bz)
            crit.bq = torch.stack([q, torch.full_like(q, float(k))], dim=-1)

    def _decompose(self, it: LayerStep) -> SVDFactors:
        """The criterion step's factors of the direction: the checked Gram estimate or the SVD.

        ``spectral="gram"`` on the ``"auto"`` route (``method="svd"`` promises the exact SVD
        everywhere) tries :func:`adaptive_lmo.spectral.criterion_factors`; a layer whose
        estimate failed its check ``j`` times in a row goes straight to the SVD on its next
        ``min(2**(j-1), 8)`` criterion steps, so an ill-conditioned layer does not pay for a
        rejected estimate (0.65x an SVD at 256²,
        measured) every time. ``geometry()`` counts both routes.
        """
        st, g, P = self.state[it.p], it.group, it.P
        gram = g["method"] == "auto" and g.get("spectral", "svd") == "gram"
        if not gram or P.dtype == torch.float64 or st.get("gram_skip", 0) > 0:
            if gram and st.get("gram_skip", 0) > 0:
                st["gram_skip"] -= 1
            st["spectral_exact"] = st.get("spectral_exact", 0) + 1
            return svd_factors(P)
        f, estimated = criterion_factors(P, "gram")
        if estimated:
            st["gram_fails"] = 0
            st["spectral_estimated"] = st.get("spectral_estimated", 0) + 1
        else:
            st["gram_fails"] = st.get("gram_fails", 0) + 1
            st["gram_skip"] = min(2 ** (st["gram_fails"] - 1), 8)
            st["spectral_exact"] = st.get("spectral_exact", 0) + 1
        return f

    def _keep_factors(self, it: LayerStep) -> None:
        """``stats="next_batch"``: keep this step's s, V^T (and d) for the next step's sketch."""
        st, f = self.state[it.p], it.factors
        assert f is not None  # a snap step always decomposes (_prepare_criterion)
        st["pending_s"], st["pending_Vh"], st["pending_U"] = f.s, f.Vh, f.U
        if it.group["precondition"] is not None:
            st["pending_d"] = alignment(f.U, f.Vh, it.ghat)

    def _sync_curvatures(self, items: list[LayerStep]) -> None:
        """Average each due layer's curvature statistics (``c``, and ``b``, ``bq`` for kfac)
        over ranks (the fields named in :data:`adaptive_lmo.layer_step.SYNCED_STATS`).

        Every rank packs a fixed-shape slot per statistic (zeros and a 0 flag when it recorded
        none); the mean is over the ranks that recorded it. Non-finite statistics on any rank
        turn that statistic into NaN everywhere (the criterion then skips the layer).
        """
        due = [it for it in items if it.due]
        if not (
            due
            and self.sync_stats
            and dist.is_available()
            and dist.is_initialized()
            and dist.get_world_size() > 1
        ):
            return
        dev = due[0].P.device
        # (layer's inputs, statistic, the shape every rank agrees on) per statistic to average
        slots: list[tuple[CriterionInputs, str, tuple[int, ...]]] = []
        for crit in [it.crit for it in due if it.crit is not None]:  # every due step's
            for k in SYNCED_STATS:
                shape = getattr(crit, f"{k}_shape")
                if shape is not None:
                    slots.append((crit, k, shape))
        flats, flags, bad = [], [], []
        for crit, k, shape in slots:
            t = getattr(crit, k)
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
        for j, (crit, k, shape) in enumerate(slots):
            seg = flat[off : off + math.prod(shape)].reshape(shape)
            off += math.prod(shape)
            dtype = crit.s.dtype
            if float(bd[j]) > 0:
                setattr(crit, k, torch.full_like(seg, math.nan).to(dtype))
            elif float(fl[j]) > 0:
                seg = seg / fl[j]
                if k == "bq":  # (mean of |z|^4, rows): the row counts add up over ranks
                    seg = torch.stack([seg[..., 0], seg[..., 1] * fl[j]], dim=-1)
                    dtype = torch.float64
                setattr(crit, k, seg.to(dtype))
            else:
                setattr(crit, k, None)

    def _choose_exponent(self, it: LayerStep, crit: CriterionInputs) -> None:
        p, g, st = it.p, it.group, self.state[it.p]
        s, d = crit.s, crit.d
        if crit.c is None:
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
        curv, how = crit.c, ""
        if g.get("curvature", "kfac") == "kfac":
            if crit.b is None:
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
                b = crit.b
                if crit.bq is not None:
                    bq = crit.bq
                    rho = ledoit_wolf_shrinkage(b, bq[..., 0], bq[..., 1])
                    st["output_shrinkage"] = float(rho.mean())
                    if g.get("shrinkage", "none") == "ledoit_wolf":
                        b = shrink_to_identity(b, rho)
                curv, how = b * curv, (", kfac, sampled Fisher" if crit.fisher else ", kfac")
                crit.b_used = b
        crit.curv = curv
        try:
            a = choose_exponent(s, curv, d, rule=g["criterion"])
        except ValueError as e:
            st.setdefault("exponent", g["fallback_exponent"])
            st["source"] = f"kept: criterion skipped at step {st['step']} ({e})"
            self._warn(p, "bad", f"criterion skipped ({e}); keeping exponent {st['exponent']}")
            return
        # float64 takes the exact SVD at a = 0 as well: no cost to weigh
        costed = it.P.dtype != torch.float64
        cost = self._cost_rule(a, it, crit, curv) if costed else ""
        if cost:
            a = 0.0
        z = g.get("switch_confidence", 0.0)
        old = st.get("exponent")
        if (
            z > 0
            and how.startswith(", kfac")
            and old is not None
            and st.get("source", "").startswith(("criterion", "kept"))
            and a != old
        ):
            # too few effective rows for the r x r output factor: change only when the
            # surrogate's gain is resolved against its row-sampling error (README)
            gain, se, n_eff = switch_gain(
                a, old, s, crit.bz, crit.c, d, reduce=self._reducer(it.P.device)
            )
            if not n_eff >= s.shape[-1]:  # NaN (nothing resolved) is tested, and kept
                df = math.floor(n_eff) - 1 if math.isfinite(n_eff) else 0
                thr = t_quantile(z, df) * se if df >= 1 else math.inf
                # a kept exponent off 0 must still pay for its SVDs (else: a = 0, cheaply)
                drop = self._cost_rule(old, it, crit, curv) if costed and not gain > thr else ""
                if drop:
                    a, cost = 0.0, drop
                elif not gain > thr:
                    st["source"] = (
                        f"kept: a = {a:.3f} not resolved at step {st['step']} (n_eff "
                        f"{n_eff:.3g} < r = {s.shape[-1]}; log-gain {gain:.3g}, s.e. {se:.3g})"
                    )
                    return
        st["exponent"] = a
        kept = "; gain below min_gain, on the Newton-Schulz mixture" if crit.cheap_keep else ""
        st["source"] = f"criterion ({g['criterion']}{how}){cost}{kept}"

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
