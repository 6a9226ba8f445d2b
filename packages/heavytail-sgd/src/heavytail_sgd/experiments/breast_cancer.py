r"""breast-cancer: unmodified SGD vs clipped and normalized SGD on real logistic regression.

The logistic-regression part of ``convex-rates`` on an offline data set: scikit-learn's bundled
Wisconsin breast-cancer table (569 samples, 30 features, no download), labels :math:`\pm 1`,
**no intercept** (with an intercept column the two classes are linearly separable and the loss
has no minimiser; without it three points are misclassified at the optimum, so :math:`x^\star`
exists).

**Features, part of the problem definition: standardised, then whitened.** Each column is
centred and scaled to unit variance, then the table is multiplied by :math:`C^{-1/2}`,
:math:`C = A^\top A/n` (ZCA whitening), so that :math:`A^\top A/n = I`. Whitening is the change of
variables :math:`x \mapsto C^{1/2}x` of the same linear model: the predictions, the margins at
the optimum and :math:`F^\star` are unchanged, but the global smoothness constant becomes exactly
:math:`L = \lambda_{\max}(A^\top A/n)/4 = 1/4`. Why: on the merely standardised table (kept as
``load_data(whiten=False)``) the collinear columns give :math:`L = 3.32`, 48 times the largest
curvature near :math:`x^\star` (0.069); the step's cap :math:`1/(2L)` then keeps
:math:`\eta T` below the regime in which the deterministic error of the average falls like
:math:`1/(\eta T)` unless :math:`T_{\min} \gtrsim 3000` (measured, README), which is beyond
the budget. Whitened, the ratio is 5.4.

The loss :math:`F(x) = \frac1n\sum_i \log(1 + e^{-y_i a_i^\top x})` on all of :math:`R^{30}`,
:math:`L`-smooth, convex, not strongly convex in any useful sense (the Hessian at
:math:`x^\star` spans five decades, smallest eigenvalue about :math:`4\cdot 10^{-7}`).
:math:`x^\star` is computed in float64 by damped Newton and certified
(:math:`\|\nabla F\|^2/(2\lambda_{\min}) < 10^{-12}`), so the optimality gap
:math:`F(\bar x_T) - F^\star` is exact to that level. Start:
:math:`x_1 = x^\star + V\mathbf 1/\sqrt d` (:math:`V` the Hessian's eigenvectors at
:math:`x^\star`), i.e. :math:`D = \|x_1 - x^\star\| = 1` with equal mass on every direction, as
in ``convex-rates``.

**Horizons, chosen by a rule on the noise-free control only** (before any noisy run). For each
:math:`p` the horizons are :math:`T_{\min}\cdot 10^{j/2}`, :math:`j = 0..4` (two decades), the
noise scale is :math:`\sigma = 2LD/T_{\min}^{1/p}` (the step's cap is reached exactly at
:math:`T_{\min}`, every horizon runs the :math:`T^{-1/p}` branch), and :math:`T_{\min}` is the
**smallest** candidate in ``T_MIN_CANDIDATES`` (eighth-decade grid from 50) for which the
noise-free SGD control's fitted slope is within ``CONTROL_TOL`` = 0.02 of :math:`(1-p)/p`.
The control is deterministic, so its value at the chosen :math:`T_{\min}` is the control
reported. If no candidate passes, the largest is used and the control check fails.

Noise: the stochastic gradients come from :class:`heavytail_sgd.oracle.HeavyTailedOracle`
(objective: the sum of the runs' losses, so each row of the batched query gets its own exact
gradient plus its own noise), with i.i.d. symmetric :math:`\alpha`-stable coordinates,
:math:`\alpha = p + 0.1` (finite :math:`p`-th moment), scaled so that
:math:`(d\,E|\xi_1|^p)^{1/p} = \sigma`, for :math:`p \in \{1.2, 1.5, 1.8\}`.

Methods, for each horizon :math:`T`, all started at :math:`x_1`, uniform average of the iterates:

* **SGD**: ``SMD`` with the Euclidean map and the analysis' step ``convex_smd_horizon``
  :math:`\eta = \min(1/(2L), D/(\sigma T^{1/p}))`;
* **clipped SGD** (baseline): the same step, clipping level :math:`c\,\sigma T^{1/p}`;
* **normalized SGD** (baseline): step :math:`c\,D/\sqrt T`;
* a **noise-free** SGD control (same step, no noise).

The baselines' :math:`c` is tuned per :math:`T` over ``TUNE_GRID`` on the median gap of separate
tuning runs; the chosen value is rerun on fresh runs. The reported runs of the three methods use
**common random numbers**: the oracle's generator is reseeded identically for each method, so
run :math:`r` of every method sees the same noise draws, and their gaps can be compared run by
run.

Verdict (``holds``), stated before measuring: for every :math:`p`, (a) the noise-free control's
slope is within ``CONTROL_TOL`` of :math:`(1-p)/p` (the deterministic error is in the regime the
prediction is about, otherwise the noisy comparison means nothing), and (b) the predicted
exponent :math:`(1-p)/p` lies in the bootstrap interval (runs resampled at each :math:`T`) of
the fitted slope of :math:`\log` *mean* gap of SGD's averaged iterate against :math:`\log T`;
the three intervals of (b) are simultaneous (Bonferroni, each at level :math:`1 - 0.05/3`). The
mean is the statistic of the in-expectation theorem and is finite here (the loss is Lipschitz,
the noise has a finite mean). Reported but not part of the verdict: median and 90%-quantile
slopes, and the paired comparison with the baselines at the largest :math:`T`: the mean over
runs of :math:`\log(\text{gap}_{\text{SGD}}/\text{gap}_{\text{baseline}})` with a 95% bootstrap
interval (negative: SGD better).
"""

from __future__ import annotations

import math

import torch

from shared_core.experiment import ExperimentResult, RunContext, line_plot, progress, run_experiment

from ..noise import NoiseModel, norm_moment_bound
from ..optim import SMD, clip_by_norm, normalize
from ..oracle import HeavyTailedOracle
from ..schedules import convex_rate_exponent, convex_smd_horizon
from . import convex_rates as cr

P_VALUES = (1.2, 1.5, 1.8)
TUNE_GRID = (0.3, 1.0, 3.0)
FAMILY_ALPHA = 0.05
#: the Newton solve must certify F(x) - F* <= this (float64): ||g||^2 / (2 lambda_min(H)),
#: the strong-convexity bound at the solution. An absolute gradient threshold would not do:
#: with ||x*|| ~ 425 the gradient's rounding floor (~1e-11) depends on the BLAS summation order.
GAP_TOL = 1e-12
#: the noise-free control's slope must be within this of (1 - p)/p (set before any run; the
#: tolerance the ``nonconvex`` experiment allows for finite-T curvature).
CONTROL_TOL = 0.02
#: candidate smallest horizons for the rule choosing T_min (eighth-decade grid from 50).
T_MIN_CANDIDATES = tuple(round(50 * 10 ** (k / 8)) for k in range(9))
#: horizons per p: T_min * 10^(j/2), j = 0..4 (two decades).
N_HORIZONS = 5

Problem = dict[str, torch.Tensor]


def load_data(whiten: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """Breast-cancer features ``(569, 30)`` and labels in ``{-1, +1}`` (float64).

    Columns standardised (mean 0, standard deviation 1); with ``whiten`` (the experiment's
    problem) then multiplied by ``C^{-1/2}``, ``C = A^T A / n`` (symmetric, by ``eigh``), so
    that ``A^T A / n = I``. Imports scikit-learn here (the ``data`` extra); its copy of the table
    ships with it.
    """
    from sklearn.datasets import load_breast_cancer

    x, y = load_breast_cancer(return_X_y=True)
    a = torch.as_tensor(x, dtype=torch.float64)
    a = (a - a.mean(0)) / a.std(0, correction=0)
    if whiten:
        lam, v = torch.linalg.eigh(a.T @ a / a.shape[0])
        a = a @ (v @ torch.diag(lam.rsqrt()) @ v.T)
    return a, torch.as_tensor(2.0 * y - 1.0, dtype=torch.float64)


def make_problem(a: torch.Tensor, y: torch.Tensor) -> Problem:
    r"""Logistic regression on ``(a, y)`` with its exact optimum and the unit-distance start.

    Returns:
        ``{"A", "y", "x_star", "f_star", "x1", "L", "hess_eig"}`` (float64; ``L`` and the
        Hessian eigenvalues at :math:`x^\star` as 0-d / 1-d tensors).

    Raises:
        ValueError: if Newton's method does not certify a gap below ``GAP_TOL``, or if every
            point is classified correctly there (the data are separable: no minimiser).
    """
    x_star = cr.solve_logistic(a, y, iters=200)
    prob = {"A": a, "y": y}
    gnorm = float(cr.logistic_grad(prob, x_star).norm())
    # If every margin were positive at x*, F(2 x*) < F(x*): the data would be separable, the
    # infimum not attained, and a tiny gradient only underflow.
    misfit = int((y * (a @ x_star) <= 0).sum())
    eig, vecs = torch.linalg.eigh(cr._logistic_hessian(a, y, x_star))
    certified_gap = gnorm**2 / (2 * float(eig[0])) if float(eig[0]) > 0 else math.inf
    if not certified_gap < GAP_TOL or misfit == 0:
        raise ValueError(
            f"no minimiser found (gradient norm {gnorm:.3g}, certified gap {certified_gap:.3g}, "
            f"{misfit} points on the wrong side); are the data separable?"
        )
    d = a.shape[1]
    prob["x_star"] = x_star
    prob["f_star"] = cr.logistic_loss(prob, x_star)
    prob["x1"] = x_star + vecs @ (torch.ones(d, dtype=torch.float64) / math.sqrt(d))
    prob["L"] = torch.linalg.eigvalsh(a.T @ a / a.shape[0])[-1] / 4
    prob["hess_eig"] = eig
    return prob


def make_oracle(prob: Problem, noise: NoiseModel, scale: float, seed: int) -> HeavyTailedOracle:
    """The heavy-tailed oracle of the problem for a batch of runs (one run per row)."""
    return HeavyTailedOracle(
        lambda x: cr.logistic_loss(prob, x).sum(),
        noise,
        grad=lambda x: cr.logistic_grad(prob, x),
        scale=scale,
        seed=seed,
    )


def run_method(prob, oracle, T, runs, eta, method="sgd", level=None) -> torch.Tensor:
    """``F(avg x_T) - F*`` per run for ``sgd`` (the package's SMD), ``clipped``, ``normalized``.

    ``oracle=None`` runs noise-free SGD.
    """
    x0 = prob["x1"].expand(runs, -1).clone()
    if method == "sgd":
        x = torch.nn.Parameter(x0)
        opt = SMD([x], lr=eta, average="uniform")
        for _ in range(T):
            xd = x.detach()
            x.grad = cr.logistic_grad(prob, xd) if oracle is None else oracle.grad(xd)
            opt.step()
        (avg,) = opt.averaged_params()
        return cr.logistic_loss(prob, avg) - prob["f_star"]
    if method not in ("clipped", "normalized"):
        raise ValueError(f"unknown method {method!r}")
    x, avg = x0, torch.zeros_like(x0)
    for t in range(1, T + 1):
        avg += (x - avg) / t
        g = oracle.grad(x)
        x = x - eta * (
            normalize(g, dim=-1) if method == "normalized" else clip_by_norm(g, level, dim=-1)
        )
    return cr.logistic_loss(prob, avg) - prob["f_star"]


def paired_log_ratio(a: torch.Tensor, b: torch.Tensor, reps: int, gen: torch.Generator):
    """Mean of ``log(a / b)`` over paired runs and a 95% bootstrap interval."""
    r = torch.log(a / b)
    idx = torch.randint(0, len(r), (reps, len(r)), generator=gen)
    lo, hi = cr.interval(r[idx].mean(1), 0.95)
    return float(r.mean()), lo, hi


def _sizes(ctx: RunContext) -> tuple[tuple[int, ...], int, int]:
    """``(T_min candidates, runs, bootstrap reps)`` of the mode."""
    if ctx.quick:
        return T_MIN_CANDIDATES, 64, 400
    if ctx.full:
        return T_MIN_CANDIDATES, 400, 1000
    return T_MIN_CANDIDATES, 200, 1000


def horizons_from(t_min: int, n: int | None = None) -> list[int]:
    """``[t_min * 10^(j/2) for j < n]``, rounded: two decades for ``n = 5`` (default)."""
    n = N_HORIZONS if n is None else n
    return [round(t_min * 10 ** (j / 2)) for j in range(n)]


def design_sigma(L: float, D: float, p: float, t_min: int) -> float:
    """``sigma = 2 L D / t_min^(1/p)``: the horizon step's cap ``1/(2L)`` binds exactly at t_min."""
    return 2 * L * D / t_min ** (1 / p)


def choose_t_min(prob: Problem, p: float, candidates, n: int | None = None, tol=CONTROL_TOL):
    r"""The rule for the horizons: the smallest candidate whose noise-free control passes.

    For each candidate :math:`T_{\min}` in order: horizons :func:`horizons_from`, noise scale
    :func:`design_sigma`, the step ``convex_smd_horizon`` at each horizon, and one noise-free
    SGD run per horizon; the candidate is taken when the fitted slope of the noise-free gap is
    within ``tol`` of :math:`(1-p)/p`. Uses no noisy run.

    Returns:
        ``(t_min, control gaps (1-d tensor, one per horizon), control slope, passed)``; when
        no candidate passes, the last one with ``passed = False``.

    Raises:
        ValueError: if ``candidates`` is empty.
    """
    if not candidates:
        raise ValueError("choose_t_min needs at least one candidate T_min")
    pred, L, D = convex_rate_exponent(p), float(prob["L"]), 1.0
    for t_min in candidates:
        hs = horizons_from(t_min, n)
        sigma = design_sigma(L, D, p, t_min)
        gaps = torch.stack(
            [run_method(prob, None, T, 1, convex_smd_horizon(T, p, sigma, D, L)(1))[0] for T in hs]
        )
        slope = float(cr.fit_slope(torch.tensor(hs, dtype=torch.float64), gaps))
        if abs(slope - pred) <= tol:
            return t_min, gaps, slope, True
    return t_min, gaps, slope, False


def _measure(prob, p, horizons, control, runs, seed, bar):
    d = prob["A"].shape[1]
    noise = cr.noise_for(p)
    D, L = 1.0, float(prob["L"])
    sigma = design_sigma(L, D, p, horizons[0])
    scale = sigma / norm_moment_bound(noise, p, d)
    tune_runs = max(8, runs // 4)
    errs = {"sgd": [], "clipped": [], "normalized": [], "noise-free": []}
    tuned = {"clipped": [], "normalized": []}
    for k, T in enumerate(horizons):
        eta = convex_smd_horizon(T, p, sigma, D, L)(1)
        # the same seed for every method: common random numbers across methods at this T
        crn = seed * 1000 + k

        def go(method, c, n, s, T=T, eta=eta):
            oracle = make_oracle(prob, noise, scale, s)
            if method == "clipped":
                return run_method(prob, oracle, T, n, eta, "clipped", c * sigma * T ** (1 / p))
            return run_method(prob, oracle, T, n, c * D / math.sqrt(T), "normalized")

        errs["sgd"].append(run_method(prob, make_oracle(prob, noise, scale, crn), T, runs, eta))
        errs["noise-free"].append(control[k : k + 1])
        bar.update(1)
        for name in tuned:
            med = []
            for j, c in enumerate(TUNE_GRID):
                med.append(float(go(name, c, tune_runs, crn + 10**6 * (j + 1)).median()))
                bar.update(1)
            best = TUNE_GRID[min(range(len(med)), key=med.__getitem__)]
            tuned[name].append(best)
            errs[name].append(go(name, best, runs, crn))
    return {k: torch.stack(v) for k, v in errs.items()}, tuned, sigma


def run(ctx: RunContext) -> ExperimentResult:
    torch.set_num_threads(1)
    candidates, runs, reps = _sizes(ctx)
    boot_gen = torch.Generator().manual_seed(ctx.seed + 2)
    prob = make_problem(*load_data())
    family_level = 1 - FAMILY_ALPHA / len(P_VALUES)
    bar = progress(
        total=len(P_VALUES) * N_HORIZONS * (1 + 2 * len(TUNE_GRID)), desc="breast-cancer"
    )
    table, metrics, series, bands = [], {}, {}, {}
    holds = True
    metrics["L"] = float(prob["L"])
    metrics["x_star_norm"] = float(prob["x_star"].norm())
    metrics["f_star"] = float(prob["f_star"])
    metrics["hessian_eig_min_max"] = [float(prob["hess_eig"][0]), float(prob["hess_eig"][-1])]
    metrics["grad_norm_at_x_star"] = float(cr.logistic_grad(prob, prob["x_star"]).norm())
    all_horizons = {}
    for ip, p in enumerate(P_VALUES):
        pred = convex_rate_exponent(p)
        # the rule: horizons from the noise-free control alone, before any noisy run
        t_min, control, control_slope, control_ok = choose_t_min(prob, p, candidates)
        horizons = horizons_from(t_min)
        all_horizons[p] = horizons
        ts = torch.tensor(horizons, dtype=torch.float64)
        errs, tuned, sigma = _measure(prob, p, horizons, control, runs, ctx.seed * 10 + ip, bar)
        holds = holds and control_ok
        metrics[f"p{p}_sigma"] = sigma
        metrics[f"p{p}_horizons"] = horizons
        metrics[f"p{p}_control_slope"] = control_slope
        metrics[f"p{p}_control_within_tol"] = control_ok
        for name, e in errs.items():
            row = {"p": p, "method": name, "predicted": round(pred, 4)}
            for sname, q in {"mean": None, "median": 0.5, "q90": 0.9}.items():
                if name == "noise-free":
                    row[f"{sname}_slope"] = round(float(cr.fit_slope(ts, e[:, 0])), 4)
                    row[f"{sname}_ci"] = None
                    row["control_within_tol"] = control_ok
                    continue
                point, slopes = cr.bootstrap_slopes(ts, e, q, reps, boot_gen)
                lo, hi = cr.interval(slopes, 0.95)
                row[f"{sname}_slope"] = round(point, 4)
                row[f"{sname}_ci"] = [round(lo, 4), round(hi, 4)]
                metrics[f"p{p}_{name}_{sname}_slope"] = point
                metrics[f"p{p}_{name}_{sname}_ci95"] = [lo, hi]
                if name == "sgd" and q is None:
                    flo, fhi = cr.interval(slopes, family_level)
                    inside = flo <= pred <= fhi
                    holds = holds and inside
                    row["verdict_ci"] = [round(flo, 4), round(fhi, 4)]
                    row["prediction_in_verdict_ci"] = inside
            row["T"] = horizons
            row["mean_gap_at_T_max"] = float(e[-1].mean())
            row["median_gap_at_T_max"] = float(e[-1].median())
            if name in tuned:
                row["tuned_c"] = tuned[name]
                m, lo, hi = paired_log_ratio(errs["sgd"][-1], e[-1], reps, boot_gen)
                row["log_ratio_sgd_vs_this"] = [round(m, 4), round(lo, 4), round(hi, 4)]
                metrics[f"p{p}_log_ratio_sgd_vs_{name}_T{horizons[-1]}"] = [m, lo, hi]
            table.append(row)
            metrics[f"p{p}_{name}_mean_gap"] = e.mean(1).tolist()
            metrics[f"p{p}_{name}_median_gap"] = e.median(1).values.tolist()
            if name != "noise-free":
                series[f"p={p} {name}"] = (horizons, e.mean(1).tolist())
        series[f"p={p} noise-free"] = (horizons, errs["noise-free"][:, 0].tolist())
        bands[f"p={p} sgd"] = (
            torch.quantile(errs["sgd"], 0.1, dim=1).tolist(),
            torch.quantile(errs["sgd"], 0.9, dim=1).tolist(),
        )
    bar.close()
    metrics["verdict_level_each"] = family_level
    metrics["control_tol"] = CONTROL_TOL
    png = "breast_cancer.png"
    line_plot(
        ctx.path(png),
        series,
        bands=bands,
        title="breast cancer: mean F(avg x_T) - F* (SGD band: 10-90%)",
        xlabel="T",
        ylabel="optimality gap",
        logx=True,
        logy=True,
    )
    summary = (
        f"Logistic regression on whitened breast-cancer data (n=569, d=30, no intercept, "
        f"L = {float(prob['L']):.4g}), {runs} runs per (p, T); horizons per p chosen by the "
        f"noise-free control rule (slope within {CONTROL_TOL} of (1-p)/p): "
        + "; ".join(f"p={p}: T in {h}" for p, h in all_horizons.items())
        + f". SaS noise (tail index p + 0.1) through HeavyTailedOracle, scaled to the p-th "
        f"moment bound sigma. Slopes of log gap vs log T with 95% bootstrap CIs ({reps} reps); "
        f"the verdict needs every control within tolerance and reads simultaneous intervals "
        f"(each at {family_level:.4f}) of SGD's mean-gap slope. Last column: mean "
        f"log(gap_SGD / gap_method) over common-random-number runs at each p's largest T "
        f"[95% CI].\n\n" + _markdown(table)
    )
    return ExperimentResult(
        title="unmodified SGD on real logistic regression under heavy-tailed noise",
        claim=(
            "Unmodified SGD with step D/(sigma T^(1/p)) has mean optimality gap falling like "
            "T^((1-p)/p) on an unbounded, non-strongly-convex real-data problem."
        ),
        summary=summary,
        metrics=metrics,
        holds=holds,
        plots=[png],
        table=table,
        paper="P03",
    )


def _markdown(table: list[dict]) -> str:
    lines = [
        "| p | method | predicted | mean slope | median slope | q90 slope | verdict CI "
        "| mean gap at T_max | log(SGD/this) [CI] |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in table:
        verdict = ""
        if "verdict_ci" in r:
            ok = "contains" if r["prediction_in_verdict_ci"] else "misses"
            verdict = f"[{r['verdict_ci'][0]:.3f}, {r['verdict_ci'][1]:.3f}] {ok}"
        if "control_within_tol" in r:
            verdict = f"control {'within' if r['control_within_tol'] else 'outside'} tolerance"
        ratio = ""
        if "log_ratio_sgd_vs_this" in r:
            m, lo, hi = r["log_ratio_sgd_vs_this"]
            ratio = f"{m:.3f} [{lo:.3f}, {hi:.3f}]"
        lines.append(
            f"| {r['p']} | {r['method']} | {r['predicted']:.3f} | "
            f"{cr._fmt_ci(r['mean_slope'], r['mean_ci'])} | "
            f"{cr._fmt_ci(r['median_slope'], r['median_ci'])} | "
            f"{cr._fmt_ci(r['q90_slope'], r['q90_ci'])} | {verdict} | "
            f"{r['mean_gap_at_T_max']:.3g} | {ratio} |"
        )
    return "\n".join(lines)


def main(argv=None) -> int:
    return run_experiment(run, name="heavytail-sgd.breast-cancer", description=__doc__, argv=argv)


if __name__ == "__main__":
    raise SystemExit(main())
