r"""simplex: entropic SMD vs projected SGD on the probability simplex under heavy-tailed noise.

Problem: a linear objective on the simplex :math:`\Delta_d`,

.. math:: F(x) = \langle c, x\rangle, \qquad c_1 = 0,\ c_j \in [\tfrac12, 1]\ (j > 1),

with :math:`F^\star = 0` at the vertex :math:`x^\star = e_1`, start at the centre
:math:`x_1 = \mathbf 1/d` (initial gap in :math:`[\tfrac12, 1]` for every :math:`d`), and
:math:`\|\nabla F\|_\infty \le 1` for every :math:`d`. The vertex optimum is where the entropic
distance :math:`B_\psi(x^\star, x_1) = \log d` is largest, so the entropic geometry gets no
free help.

Noise (chosen so that the two geometries see different noise sizes):
:math:`\xi = R\,s`, with :math:`R` a scalar symmetric :math:`\alpha`-stable draw
(:math:`\alpha = p + 0.1`, so :math:`E|R|^p < \infty`) and :math:`s \in \{\pm1\}^d` a
Rademacher sign vector, independent, fresh at each step. Then exactly

.. math:: \|\xi\|_\infty = |R|, \qquad \|\xi\|_2 = \sqrt d\,|R|,

so :math:`\sigma_\infty = (E|R|^p)^{1/p}` and :math:`\sigma_2 = \sqrt d\,\sigma_\infty`.
With i.i.d. heavy-tailed coordinates both norms are dominated by the largest coordinate and
scale alike (:math:`\approx d^{1/\alpha}`); with sparse noise they coincide. The ratio
:math:`\|v\|_2/\|v\|_\infty` reaches its maximum :math:`\sqrt d` only for *flat* vectors,
which is what :math:`R\,s` is: heavy-tailed in magnitude, dense in direction.

Methods, each with the horizon step of :func:`heavytail_sgd.schedules.convex_smd_horizon`
for its own geometry (no cap: the objective is linear) and the uniform average:

* **entropic SMD** (``mirror="entropy"``, 1-strongly convex in :math:`\|\cdot\|_1`):
  :math:`D^2 = 2\log d \ge 2 B_\psi(x^\star, x_1)`, noise in the dual norm
  :math:`\|\cdot\|_\infty`: :math:`\eta = D/(\sigma_\infty T^{1/p})`;
* **projected SGD** (``mirror=Euclidean(Simplex())``): :math:`D^2 = 2` (the squared diameter),
  noise in :math:`\|\cdot\|_2`: :math:`\eta = D/(\sigma_2 T^{1/p})`.

The bound :math:`\sigma D\,T^{(1-p)/p}` predicts errors :math:`\propto \sqrt{2\log d}` for the
entropic map and :math:`\propto \sqrt{2d}` for projected SGD at fixed :math:`T`, and the slope
:math:`(1-p)/p` in :math:`T` for both. Measured: :math:`F(\bar x_T) - F^\star` over many
runs, for :math:`d \in \{10, 100, 1000\}` and :math:`T` over 1.5 decades; slopes of the median
against :math:`\log T` (per method and :math:`d`) and against :math:`\log d` /
:math:`\log\log d` (per method, at each :math:`T`), with bootstrap intervals over runs.

Rule (fixed in the code before the first recorded run; ``holds`` is the conjunction): (T) for
each method and :math:`d`, the bootstrap interval of the median gap's slope in :math:`\log T`
lies within 0.1 of :math:`(1-p)/p`; (d) at the largest horizon, the simultaneous intervals
(family level 0.05) of projected SGD's slope in :math:`\log d` and of entropic SMD's slope in
:math:`\log\log d` each lie within 0.1 of 1/2, and entropic SMD's slope in :math:`\log d` lies
entirely below projected SGD's.
"""

from __future__ import annotations

import math

import torch

from shared_core.experiment import ExperimentResult, RunContext, line_plot, progress, run_experiment
from shared_core.mirror import Euclidean

from ..noise import SymmetricAlphaStable
from ..optim import SMD
from ..schedules import check_p, convex_rate_exponent, convex_smd_horizon
from ..simplex import Simplex
from .convex_rates import bootstrap_slopes, interval

#: Quick-mode wall seconds on a 2-core CPU (README: 24 s alone);
#: `nox -s repro` plans its budget with it.
QUICK_SECONDS = 24

P = 1.5
TAIL_MARGIN = 0.1
DIMS = (10, 100, 1000)
#: the dual-norm moment bound sigma_inf of the noise (sigma_2 = sqrt(d) sigma_inf).
SIGMA_INF = 0.1
METHODS = ("entropy", "euclidean")
#: the verdict asks each simultaneous interval of a fitted slope to lie within this of its
#: prediction (T: (1 - p)/p; d: 1/2 as a power of d or of log d).
SLOPE_TOL = 0.1
FAMILY_ALPHA = 0.05


def make_cost(d: int, seed: int) -> torch.Tensor:
    r"""The cost vector :math:`c`: :math:`c_1 = 0`, :math:`c_j \sim U[\frac12, 1]` for ``j > 1``.

    Args:
        d: dimension, at least 2.
        seed: seed of the draw.

    Returns:
        ``c`` in float64, shape ``(d,)``; :math:`\min_\Delta \langle c, x\rangle = 0` at ``e_1``.
    """
    if isinstance(d, bool) or not isinstance(d, int) or d < 2:
        raise ValueError(f"d must be an int >= 2, got {d!r}")
    g = torch.Generator().manual_seed(seed)
    c = 0.5 + 0.5 * torch.rand(d, generator=g, dtype=torch.float64)
    c[0] = 0.0
    return c


def radial_noise(
    runs: int, d: int, noise: SymmetricAlphaStable, scale: float, gen: torch.Generator
) -> torch.Tensor:
    r"""Draws of :math:`\xi = \mathrm{scale}\cdot R\,s`: a heavy-tailed scalar per run times signs.

    :math:`\|\xi\|_\infty = \mathrm{scale}\,|R|` and :math:`\|\xi\|_2 = \sqrt d\,\|\xi\|_\infty`.

    Args:
        runs: number of independent vectors.
        d: dimension.
        noise: the law of :math:`R`.
        scale: multiplier, positive.
        gen: generator of both draws.

    Returns:
        Shape ``(runs, d)``, float64.
    """
    if not (scale > 0 and math.isfinite(scale)):
        raise ValueError(f"scale must be a positive finite number, got {scale!r}")
    r = noise.sample((runs, 1), generator=gen, dtype=torch.float64)
    signs = torch.randint(0, 2, (runs, d), generator=gen, dtype=torch.float64) * 2 - 1
    return scale * r * signs


def noise_bounds(d: int, sigma_inf: float) -> dict[str, float]:
    r"""The dual-norm moment bound each geometry uses: :math:`\sigma_\infty` and
    :math:`\sigma_2 = \sqrt d\,\sigma_\infty` (exact for :math:`R\,s`)."""
    return {"entropy": sigma_inf, "euclidean": math.sqrt(d) * sigma_inf}


def distance_scale(method: str, d: int) -> float:
    r""":math:`D` with :math:`D^2/2 \ge \max_{u \in \Delta} B_\psi(u, \mathbf 1/d)`.

    Entropy: :math:`B = \mathrm{KL}(u\,\|\,\mathbf 1/d) \le \log d`, so :math:`D = \sqrt{2\log d}`.
    Euclidean: :math:`\|u - v\|_2^2 \le 2` on the simplex, :math:`D = \sqrt 2`.
    """
    if method == "entropy":
        return math.sqrt(2 * math.log(d))
    if method == "euclidean":
        return math.sqrt(2.0)
    raise ValueError(f"method must be one of {METHODS}, got {method!r}")


def run_smd(
    c: torch.Tensor,
    method: str,
    T: int,
    runs: int,
    eta: float,
    noise: SymmetricAlphaStable | None,
    scale: float,
    gen: torch.Generator,
) -> torch.Tensor:
    r"""``runs`` independent SMD runs from the centre; the gap :math:`\langle c, \bar x_T\rangle`.

    Args:
        c: cost vector, shape ``(d,)``.
        method: ``"entropy"`` (exponentiated gradient) or ``"euclidean"`` (projected SGD).
        T: steps; runs: batch of runs; eta: constant step.
        noise, scale: the law of :math:`R` and the multiplier of :func:`radial_noise`;
            ``noise=None`` runs the noise-free control.
        gen: generator of the noise.

    Returns:
        Optimality gaps of the uniform averages, shape ``(runs,)``.
    """
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    d = c.shape[0]
    mirror = "entropy" if method == "entropy" else Euclidean(Simplex())
    x = torch.nn.Parameter(torch.full((runs, d), 1.0 / d, dtype=torch.float64))
    opt = SMD([x], lr=eta, mirror=mirror, average="uniform")
    for _ in range(T):
        if noise is None:
            x.grad = c.expand(runs, d).clone()
        else:
            x.grad = c + radial_noise(runs, d, noise, scale, gen)
        opt.step()
    (avg,) = opt.averaged_params()
    return avg @ c


def _sizes(ctx: RunContext) -> tuple[list[int], int, int]:
    if ctx.quick:
        return [100, 300, 1000, 3000], 48, 400
    if ctx.full:
        return [100, 316, 1000, 3162, 10000], 400, 1000
    return [100, 300, 1000, 3000, 10000], 128, 1000


def fit_slope_x(xs: torch.Tensor, ys: torch.Tensor) -> torch.Tensor:
    """Least-squares slope of ``log ys`` on ``xs`` along the last axis."""
    lx = xs - xs.mean()
    return (torch.log(ys) * lx).sum(-1) / (lx * lx).sum()


def bootstrap_d_slope(
    xs: torch.Tensor, errs: torch.Tensor, reps: int, gen: torch.Generator
) -> tuple[float, torch.Tensor]:
    """Slope of ``log median(errs)`` on ``xs`` (one row of ``errs`` per ``x``) and its draws.

    Args:
        xs: regressors (e.g. ``log d``), shape ``(k,)``.
        errs: shape ``(k, runs)``, independent runs.
        reps: bootstrap resamples.
        gen: generator.

    Returns:
        ``(point slope, reps resampled slopes)``.
    """
    point = float(fit_slope_x(xs, errs.median(1).values))
    runs = errs.shape[1]
    idx = torch.randint(0, runs, (reps, len(xs), runs), generator=gen)
    res = torch.gather(errs.expand(reps, -1, -1), 2, idx)
    return point, fit_slope_x(xs, res.median(2).values)


def within(fit: tuple[float, float, float], target: float, tol: float) -> bool:
    """Whether the interval ``fit[1:]`` of a fit ``(point, lo, hi)`` lies in ``target +- tol``."""
    return target - tol <= fit[1] and fit[2] <= target + tol


def run(ctx: RunContext) -> ExperimentResult:
    torch.set_num_threads(1)
    p = check_p(P)
    horizons, runs, reps = _sizes(ctx)
    ts = torch.tensor(horizons, dtype=torch.float64)
    gen = torch.Generator().manual_seed(ctx.seed + 1)
    boot = torch.Generator().manual_seed(ctx.seed + 2)
    noise = SymmetricAlphaStable(min(p + TAIL_MARGIN, 2.0))
    scale = SIGMA_INF / noise.abs_moment(p) ** (1 / p)  # (E|scale R|^p)^(1/p) = SIGMA_INF
    pred = convex_rate_exponent(p)
    bar = progress(total=len(DIMS) * len(horizons) * len(METHODS), desc="simplex")
    errs: dict[str, dict[int, torch.Tensor]] = {m: {} for m in METHODS}
    free: dict[str, dict[int, list[float]]] = {m: {d: [] for d in DIMS} for m in METHODS}
    for d in DIMS:
        c = make_cost(d, ctx.seed)
        sig = noise_bounds(d, SIGMA_INF)
        for m in METHODS:
            rows = []
            for T in horizons:
                eta = convex_smd_horizon(T, p, sig[m], distance_scale(m, d))(1)
                rows.append(run_smd(c, m, T, runs, eta, noise, scale, gen))
                free[m][d].append(float(run_smd(c, m, T, 1, eta, None, scale, gen)[0]))
                bar.update(1)
            errs[m][d] = torch.stack(rows)
    bar.close()

    n_t_tests = len(METHODS) * len(DIMS)
    t_level = 1 - FAMILY_ALPHA / n_t_tests
    table, metrics, holds_t = [], {}, True
    for m in METHODS:
        for d in DIMS:
            e = errs[m][d]
            row = {"method": m, "d": d, "predicted_T_slope": round(pred, 4)}
            for sname, q in (("median", 0.5), ("q90", 0.9)):
                point, slopes = bootstrap_slopes(ts, e, q, reps, boot)
                lo, hi = interval(slopes, t_level)
                row[f"{sname}_T_slope"] = round(point, 4)
                row[f"{sname}_T_ci"] = [round(lo, 4), round(hi, 4)]
                metrics[f"{m}_d{d}_{sname}_T_slope"] = point
                metrics[f"{m}_d{d}_{sname}_T_ci"] = [lo, hi]
            row["median_gap"] = e.median(1).values.tolist()
            row["q90_gap"] = torch.quantile(e, 0.9, dim=1).tolist()
            row["noise_free_gap"] = free[m][d]
            row["noise_free_T_slope"] = round(
                float(fit_slope_x(ts.log(), torch.tensor(free[m][d], dtype=torch.float64))), 4
            )
            metrics[f"{m}_d{d}_noise_free_gap"] = free[m][d]
            ci = row["median_T_ci"]
            ok = pred - SLOPE_TOL <= ci[0] and ci[1] <= pred + SLOPE_TOL
            row["T_slope_ok"] = ok
            holds_t = holds_t and ok
            table.append(row)
            metrics[f"{m}_d{d}_median_gap"] = row["median_gap"]
            metrics[f"{m}_d{d}_q90_gap"] = row["q90_gap"]

    # d-dependence at the largest horizon: log gap against log d (power of d) and against
    # log log d (power of log d), per method.
    dims = torch.tensor(DIMS, dtype=torch.float64)
    regs = {"log_d": dims.log(), "loglog_d": dims.log().log()}
    dfits = {}
    for m in METHODS:
        e = torch.stack([errs[m][d][-1] for d in DIMS])
        for rname, xs in regs.items():
            point, slopes = bootstrap_d_slope(xs, e, reps, boot)
            lo, hi = interval(slopes, 1 - FAMILY_ALPHA / 2)
            dfits[(m, rname)] = (point, lo, hi)
            metrics[f"{m}_d_slope_{rname}"] = point
            metrics[f"{m}_d_slope_{rname}_ci"] = [lo, hi]
    # Claim: Euclidean's error is a power 1/2 of d, entropic's a power 1/2 of log d: each
    # simultaneous interval must lie within SLOPE_TOL of 1/2, and the entropic power of d
    # must lie below the Euclidean one with the intervals separated.
    eu = dfits[("euclidean", "log_d")]
    en_ll = dfits[("entropy", "loglog_d")]
    holds_d = (
        within(eu, 0.5, SLOPE_TOL)
        and within(en_ll, 0.5, SLOPE_TOL)
        and dfits[("entropy", "log_d")][2] < eu[1]
    )
    metrics["holds_T"] = holds_t
    metrics["holds_d"] = holds_d
    metrics["predicted_T_slope"] = pred
    holds = bool(holds_t and holds_d)

    series, bands = {}, {}
    for m in METHODS:
        for d in DIMS:
            label = f"{m} d={d}"
            series[label] = (horizons, errs[m][d].median(1).values.tolist())
            bands[label] = (
                torch.quantile(errs[m][d], 0.1, dim=1).tolist(),
                torch.quantile(errs[m][d], 0.9, dim=1).tolist(),
            )
    line_plot(
        ctx.path("simplex_vs_T.png"),
        series,
        bands=bands,
        title="median <c, avg x_T> - F* on the simplex (band: 10-90%)",
        xlabel="T",
        ylabel="optimality gap",
        logx=True,
        logy=True,
    )
    dseries = {
        f"{m} T={horizons[-1]}": (list(DIMS), [float(errs[m][d][-1].median()) for d in DIMS])
        for m in METHODS
    }
    line_plot(
        ctx.path("simplex_vs_d.png"),
        dseries,
        title=f"median gap at T={horizons[-1]} vs d",
        xlabel="d",
        ylabel="optimality gap",
        logx=True,
        logy=True,
    )
    summary = (
        f"Linear objective on the simplex, d in {list(DIMS)}, p = {p}, noise R*s (R SaS with "
        f"alpha = {p + TAIL_MARGIN}, s Rademacher), sigma_inf = {SIGMA_INF}, sigma_2 = sqrt(d) "
        f"sigma_inf; {runs} runs per cell, T in {horizons}; intervals simultaneous "
        f"(T slopes at level {t_level:.4f} each, d slopes at {1 - FAMILY_ALPHA / 2:.3f}).\n\n"
        + _markdown(table, horizons)
        + "\n\n"
        + _d_markdown(dfits)
    )
    return ExperimentResult(
        title="entropic SMD's error grows like sqrt(log d), projected SGD's like sqrt(d)",
        claim=(
            "On the simplex under heavy-tailed noise with sigma_2 = sqrt(d) sigma_inf, SMD with "
            "the entropy map and the theory's step has error ~ sqrt(log d) T^((1-p)/p), "
            "projected SGD ~ sqrt(d) T^((1-p)/p)."
        ),
        summary=summary,
        metrics=metrics,
        holds=holds,
        plots=["simplex_vs_T.png", "simplex_vs_d.png"],
        table=table,
        paper="P03",
        measured=(
            f"T-slopes inside the band: {holds_t}; sqrt(log d) vs sqrt(d) growth: {holds_d} "
            f"(predicted T-slope {pred:.3f})"
        ),
    )


def _markdown(table: list[dict], horizons: list[int]) -> str:
    lines = [
        "| method | d | median gap at T = " + ", ".join(map(str, horizons)) + " | q90 gap at "
        f"T={horizons[-1]} | median T-slope [CI] | q90 T-slope [CI] | predicted | "
        "noise-free T-slope |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in table:
        med = ", ".join(f"{v:.4f}" for v in r["median_gap"])
        ci, qci = r["median_T_ci"], r["q90_T_ci"]
        lines.append(
            f"| {r['method']} | {r['d']} | {med} | {r['q90_gap'][-1]:.4f} | "
            f"{r['median_T_slope']:.3f} [{ci[0]:.3f}, {ci[1]:.3f}] | "
            f"{r['q90_T_slope']:.3f} [{qci[0]:.3f}, {qci[1]:.3f}] | {r['predicted_T_slope']:.3f} | "
            f"{r['noise_free_T_slope']:.3f} |"
        )
    return "\n".join(lines)


def _d_markdown(dfits: dict) -> str:
    lines = [
        "| method | slope vs log d [CI] (power of d) | slope vs log log d [CI] (power of log d) |",
        "|---|---|---|",
    ]
    for m in METHODS:
        a, b = dfits[(m, "log_d")], dfits[(m, "loglog_d")]
        lines.append(
            f"| {m} | {a[0]:.3f} [{a[1]:.3f}, {a[2]:.3f}] | {b[0]:.3f} [{b[1]:.3f}, {b[2]:.3f}] |"
        )
    return "\n".join(lines)


def main(argv=None) -> int:
    return run_experiment(run, name="heavytail-sgd.simplex", description=__doc__, argv=argv)


if __name__ == "__main__":
    raise SystemExit(main())
