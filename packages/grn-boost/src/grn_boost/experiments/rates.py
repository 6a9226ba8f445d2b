r"""rates: GRN's O(1/k^2) suboptimality and vanilla Newton's linear rate, in the native booster.

Problem (fixed before the run). ``G`` groups of ``m`` samples; the only feature is the group
index, so the span of the weak learners (depth-1 trees, i.e. stumps on that feature) is every
function of the group, and the tree-restricted optimum is the per-group minimiser
:math:`c_g^\star = \arg\min_c \sum_{i \in g} l(y_i, c)`, computed in float64 by bisection on
the monotone derivative (:func:`restricted_optimum`, 200 halvings: exact to rounding). Labels
:math:`y = 15 u_g + 3\varepsilon`, :math:`u_g \sim U[-1, 1]`, start :math:`F_0 = 0`,
learning rate 1. Each round fits one stump, so the weak learner is genuinely restricted
(its cosine with the Newton step is below 1; reported).

Losses: ``pseudo_huber`` (:math:`\delta = 1`: convex, Lipschitz Hessian, *not*
Hessian-dominated: :math:`l''` ranges over :math:`(0, 1]`) and ``squared_logcosh``
(:math:`l'' \in [1, 2]`: Hessian-dominated, the paper's condition for vanilla Newton's linear
rate). Gap :math:`\Delta_k = R(F_k) - R^\star` (mean loss).

Rule (``holds``), stated before the recorded run (the window and the size come from one pilot
run, reported in the README):

(a) GRN on ``pseudo_huber``: the least-squares slope of :math:`\log\Delta_k` on :math:`\log k`
    over the last 1.5 decades of the run, :math:`k \in [K/10^{1.5}, K]` (points with
    :math:`\Delta_k \le` ``FLOOR`` excluded), is :math:`\le -2 + 0.25`;
(b) the same for GRN on ``squared_logcosh``;
(c) vanilla Newton on ``squared_logcosh`` converges linearly: every round contracts the gap
    (:math:`\max_k \Delta_{k+1}/\Delta_k < 1` while :math:`\Delta_k >` ``FLOOR``) and the gap
    reaches ``FLOOR`` within the run (a :math:`k^{-2}` method would need
    :math:`\sim 10^6` rounds for that);
(d) vanilla Newton on ``pseudo_huber`` does not: some round increases the gap (or the loss
    stops being finite).

Reported, not in the verdict: the slopes over the windows :math:`[10, 316]` and
:math:`[K/10^{1.5}, K]` for all runs, first-order boosting (``gradient``) as a reference, the
cosine angle and edge of the stumps.

Sizes: quick ``G = 8, m = 50, K = 1000``; default ``G = 16, m = 100, K = 3000``;
``--full``: the default problem with ``K = 30000`` for GRN on pseudo-Huber (the other runs keep
3000 rounds). **Added after seeing the default result** (slope -0.59 over [95, 3000]): the
rule is unchanged, the window moves with ``K``; see the README for what this does and does
not show.

Checks of the reference (reported, not in the verdict): :math:`R^\star` by a second,
independent route (per-group safeguarded Newton on the same convex problem,
:func:`restricted_optimum_newton`), and the smallest loss the runs reach, which must not be
below :math:`R^\star`; the local log-log slope of the GRN pseudo-Huber gap over consecutive
half-decades (the "slope profile": a pre-asymptotic window shows as a slope that is still
steepening).
"""

from __future__ import annotations

import math

import numpy as np

from shared_core.experiment import ExperimentResult, RunContext, line_plot, progress, run_experiment

from ..api import fit
from ..losses import Loss, get_loss

#: Quick-mode wall seconds on a 2-core CPU (helper: 30 s wall at load ~16, 11-14 s CPU);
#: `nox -s repro` plans its budget with it.
QUICK_SECONDS = 30

#: gaps at or below this (absolute, mean loss ~ 1) are rounding: excluded from every fit
FLOOR = 1e-11
SLOPE_TARGET, SLOPE_TOL = -2.0, 0.25
#: rounds of the vanilla-Newton pseudo-Huber run (it only has to show an increase, rule (d))
NEWTON_PH_ROUNDS = 100
DECADES = 1.5
#: (G, m, K for GRN on pseudo-Huber, rounds of the other runs) per mode; "full" was added
#: after the default result (see the module docstring)
SIZES = {
    "quick": (8, 50, 1000, 1000),
    "default": (16, 100, 3000, 3000),
    "full": (16, 100, 30000, 3000),
}
RUNS = (
    ("pseudo_huber", "grn"),
    ("pseudo_huber", "newton"),
    ("pseudo_huber", "gradient"),
    ("squared_logcosh", "grn"),
    ("squared_logcosh", "newton"),
)


def make_problem(G: int, m: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(X, y, group)``: one feature (the group index), labels ``15 u_g + 3 eps``."""
    rng = np.random.default_rng(seed)
    group = np.repeat(np.arange(G), m)
    u = rng.uniform(-1, 1, G)
    y = 15 * u[group] + 3 * rng.normal(size=G * m)
    return group[:, None].astype(np.float64), y, group


def restricted_optimum(loss: Loss, y: np.ndarray, group: np.ndarray) -> tuple[np.ndarray, float]:
    r"""Per-group minimisers :math:`c^\star_g` (bisection on :math:`\sum_{i\in g} l'`) and
    :math:`R^\star` (mean loss)."""
    G = int(group.max()) + 1
    lo = np.full(G, y.min() - 1.0)
    hi = np.full(G, y.max() + 1.0)
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        d = np.bincount(group, weights=loss.grad(y, mid[group]), minlength=G)
        hi = np.where(d > 0, mid, hi)
        lo = np.where(d > 0, lo, mid)
    c = 0.5 * (lo + hi)
    return c, float(np.mean(loss.value(y, c[group])))


def restricted_optimum_newton(
    loss: Loss, y: np.ndarray, group: np.ndarray, iters: int = 100
) -> tuple[np.ndarray, float]:
    r"""The same optimum by a second route: per-group Newton on :math:`\sum_{i\in g} l`.

    Starts at each group's median, takes Newton steps :math:`-\sum l'/\sum l''` and keeps a
    bracket from the sign of :math:`\sum l'`, falling back to its midpoint when a step
    leaves it (pseudo-Huber's curvature is tiny far out). Independent of
    :func:`restricted_optimum` except for the loss's derivatives.
    """
    G = int(group.max()) + 1
    c = np.array([np.median(y[group == j]) for j in range(G)])
    lo = np.full(G, y.min() - 1.0)
    hi = np.full(G, y.max() + 1.0)
    for _ in range(iters):
        d1 = np.bincount(group, weights=loss.grad(y, c[group]), minlength=G)
        d2 = np.bincount(group, weights=loss.hess(y, c[group]), minlength=G)
        hi = np.where(d1 > 0, np.minimum(hi, c), hi)
        lo = np.where(d1 < 0, np.maximum(lo, c), lo)
        with np.errstate(divide="ignore", invalid="ignore"):
            step = c - d1 / d2
        inside = np.isfinite(step) & (step > lo) & (step < hi)
        c = np.where(d1 == 0, c, np.where(inside, step, 0.5 * (lo + hi)))
    return c, float(np.mean(loss.value(y, c[group])))


def slope_profile(gap: np.ndarray, start: int = 10, width: float = 0.5) -> list[dict]:
    """Log-log slopes over consecutive windows ``[k, k 10^width]`` from ``start``.

    The last window ends at the last round; it is kept when it spans at least half a width.
    """
    out, k0, end = [], float(start), len(gap) - 1
    while k0 * 10 ** (width / 2) <= end:
        k1 = min(k0 * 10**width, float(end))
        out.append(
            {"k0": round(k0), "k1": round(k1), "slope": loglog_slope(gap, round(k0), round(k1))}
        )
        k0 = k1 if k1 < end else math.inf
    return out


def loglog_slope(gap: np.ndarray, k0: int, k1: int, floor: float = FLOOR) -> float:
    """Least-squares slope of ``log gap[k]`` on ``log k`` for ``k0 <= k <= k1``, gap > floor."""
    k = np.arange(max(k0, 1), min(k1, len(gap) - 1) + 1)
    g = gap[k]
    ok = np.isfinite(g) & (g > floor)
    if ok.sum() < 3:
        return math.nan
    return float(np.polyfit(np.log(k[ok]), np.log(g[ok]), 1)[0])


def contraction(gap: np.ndarray, floor: float = FLOOR) -> tuple[float, int | None]:
    """``(max ratio gap[k+1]/gap[k] while gap[k] > floor, first k with gap <= floor or None)``."""
    below = np.flatnonzero(gap <= floor)
    k_floor = int(below[0]) if below.size else None
    end = k_floor if k_floor is not None else len(gap) - 1
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = gap[1 : end + 1] / gap[:end]
    if not np.all(np.isfinite(ratios)):
        return math.inf, k_floor
    return float(np.max(ratios)) if ratios.size else math.nan, k_floor


def run(ctx: RunContext) -> ExperimentResult:
    G, m, K, K_other = SIZES["quick" if ctx.quick else ("full" if ctx.full else "default")]
    X, y, group = make_problem(G, m, ctx.seed)
    optimum, optimum_newton = {}, {}
    for name in sorted({r[0] for r in RUNS}):
        optimum[name] = restricted_optimum(get_loss(name), y, group)[1]
        optimum_newton[name] = restricted_optimum_newton(get_loss(name), y, group)[1]
    runs = [r for r in RUNS if not (ctx.quick and r[1] == "gradient")]
    bar = progress(total=len(runs), desc="rates")
    gaps, table, metrics, diag = {}, [], {}, {}
    for name, scheme in runs:
        # vanilla Newton on pseudo-Huber blows up within a few rounds: 100 rounds show it
        rounds = K if (name, scheme) == ("pseudo_huber", "grn") else K_other
        if (name, scheme) == ("pseudo_huber", "newton"):
            rounds = min(K, NEWTON_PH_ROUNDS)
        k0 = round(rounds / 10**DECADES)
        res = fit(
            X,
            y,
            name,
            scheme=scheme,
            rounds=rounds,
            learning_rate=1.0,
            max_depth=1,
            base_score=0.0,
        )
        gap = np.array(res.history["loss"]) - optimum[name]
        gaps[(name, scheme)] = gap
        cos = np.array(res.history["cosine"], dtype=float)
        diag[(name, scheme)] = cos
        rho, k_floor = contraction(gap)
        finite = gap[np.isfinite(gap)]
        row = {
            "loss": name,
            "scheme": scheme,
            "gap_0": float(gap[0]),
            "gap_K": float(gap[-1]),
            "gap_min": float(finite.min()) if finite.size else math.nan,
            "rounds_run": len(gap) - 1,
            "window": f"[{k0},{rounds}]",
            "slope_window": loglog_slope(gap, k0, rounds),
            "slope_[10,316]": loglog_slope(gap, 10, 316),
            "max_ratio": rho,
            "k_floor": k_floor,
            "cosine_median": float(np.nanmedian(cos)) if np.isfinite(cos).any() else math.nan,
            "cosine_min": float(np.nanmin(cos)) if np.isfinite(cos).any() else math.nan,
        }
        table.append(row)
        for key, v in row.items():
            if key not in ("loss", "scheme"):
                metrics[f"{name}/{scheme}/{key}"] = v
        bar.update(1)
    bar.close()
    get = {(r["loss"], r["scheme"]): r for r in table}
    slope_key = "slope_window"
    k0 = round(K / 10**DECADES)
    thr = SLOPE_TARGET + SLOPE_TOL
    a = get[("pseudo_huber", "grn")][slope_key] <= thr
    b = get[("squared_logcosh", "grn")][slope_key] <= thr
    nl = get[("squared_logcosh", "newton")]
    c = nl["max_ratio"] < 1 and nl["k_floor"] is not None
    d = not (get[("pseudo_huber", "newton")]["max_ratio"] < 1)
    metrics.update({"rule_a": a, "rule_b": b, "rule_c": c, "rule_d": d, "R_star": optimum})
    metrics.update({"G": G, "m": m, "K": K, "K_other": K_other, "window": [k0, K]})
    # the reference, by a second route; and no run may end up below it
    metrics["R_star_newton"] = optimum_newton
    metrics["R_star_routes_abs_diff"] = {k: abs(optimum[k] - optimum_newton[k]) for k in optimum}
    metrics["min_gap_over_runs"] = {f"{r['loss']}/{r['scheme']}": r["gap_min"] for r in table}
    profile = slope_profile(gaps[("pseudo_huber", "grn")])
    metrics["pseudo_huber/grn/slope_profile"] = profile

    series = {}
    for (name, scheme), gap in gaps.items():
        ks = np.arange(1, len(gap))
        g = gap[1:]
        keep = np.isfinite(g) & (g > FLOOR) & (g < 1e6)
        if keep.any():
            series[f"{name} {scheme}"] = (ks[keep].tolist(), g[keep].tolist())
    ref_k = np.array([k0, K], dtype=float)
    g_ref = get[("pseudo_huber", "grn")]["gap_K"]
    series["k^-2 reference"] = (ref_k.tolist(), (g_ref * (K / ref_k) ** 2).tolist())
    png = "rates.png"
    line_plot(
        ctx.path(png),
        series,
        title=f"suboptimality R(F_k) - R* (stumps, {G} groups x {m})",
        xlabel="round k",
        ylabel="gap",
        logx=True,
        logy=True,
    )
    ph, sl = get[("pseudo_huber", "grn")], get[("squared_logcosh", "grn")]
    measured = (
        f"GRN log-log slope over the last 1.5 decades: pseudo-Huber {ph[slope_key]:.2f} "
        f"(k in {ph['window']}), squared+logcosh {sl[slope_key]:.2f} (k in {sl['window']}) "
        f"(rule <= {thr}); Newton on the Hessian-dominated "
        f"loss: max ratio {nl['max_ratio']:.3f}, gap <= {FLOOR:g} at k = {nl['k_floor']}; "
        f"Newton on pseudo-Huber max ratio {get[('pseudo_huber', 'newton')]['max_ratio']:.3g}"
    )
    prof = ", ".join(f"[{p['k0']},{p['k1']}] {p['slope']:.2f}" for p in profile)
    diff = max(metrics["R_star_routes_abs_diff"].values())
    summary = (
        f"{G} groups x {m} samples, stumps, learning rate 1, {K} rounds (GRN pseudo-Huber; "
        f"{K_other} for the others), optimum by per-group bisection (a second route, per-group "
        f"Newton, agrees to {diff:.1e}; smallest gap reached "
        f"{get[('pseudo_huber', 'grn')]['gap_min']:.2e}). Rules: (a) {a}, (b) {b}, (c) {c}, "
        f"(d) {d}. {measured}. Slope profile of GRN on pseudo-Huber (half-decades): {prof}."
        "\n\n" + _markdown(table, slope_key)
    )
    return ExperimentResult(
        title=(
            "GRN boosting: suboptimality at least as fast as 1/k^2; "
            "Newton linear only if Hessian-dominated"
        ),
        claim=(
            "Gradient-regularised Newton boosting has a global O(1/k^2) rate on convex losses "
            "with Lipschitz Hessian; vanilla Newton boosting converges linearly under Hessian "
            "dominance and may diverge without it."
        ),
        summary=summary,
        metrics=metrics,
        holds=a and b and c and d,
        plots=[png],
        table=table,
        paper="P14",
        measured=measured,
    )


def _fmt(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.3g}"
    return str(v)


def _markdown(table: list[dict], slope_key: str) -> str:
    cols = [
        "loss",
        "scheme",
        "gap_0",
        "gap_K",
        "gap_min",
        "window",
        slope_key,
        "slope_[10,316]",
        "max_ratio",
        "k_floor",
        "cosine_median",
        "cosine_min",
    ]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in table:
        lines.append("| " + " | ".join(_fmt(r[c]) for c in cols) + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    return run_experiment(run, name="grn-boost.rates", description=__doc__, argv=argv)


if __name__ == "__main__":
    raise SystemExit(main())
