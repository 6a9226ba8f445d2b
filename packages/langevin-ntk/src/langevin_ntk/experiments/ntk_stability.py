r"""ntk-stability: does Langevin noise keep the NTK well conditioned while the weights move far?

Setting (paper P15): one-hidden-layer tanh networks in the standard parameterisation,
:math:`f(x) = \sum_j a_j\tanh(w_j^\top x)`, :math:`w_j \sim N(0, I/d)`, :math:`a_j \sim
N(0, 1/m)`, squared loss :math:`L = \tfrac12\sum_i(f(x_i) - y_i)^2` on :math:`n = 8` points
uniform on the sphere of radius :math:`\sqrt d` in :math:`d = 32`, unit-RMS random labels.
Each (width :math:`m`, temperature :math:`T`) trains :math:`S` seeds for continuous time
:math:`t_{\max} = 1` by the ``Langevin`` optimizer (exact-OU scheme, step
:math:`0.5/\lambda_{\max}(K_0)`, i.e. a resolved discretisation of CLD) with *prior-matched*
layer decays :math:`\lambda_W = Td`, :math:`\lambda_a = Tm` (the Gibbs law is then
:math:`e^{-L/T}\times` the init law; see the README). :math:`T = 0` is gradient descent (the
small-step proxy of gradient flow). Quick: :math:`m \in \{32, 128, 512\}`,
:math:`T \in \{0, 0.05, 0.2\}`, 4 seeds; default: :math:`m \in \{32, 128, 512, 1024\}`,
:math:`T \in \{0, 0.02, 0.05, 0.2\}`, 6 seeds; ``--full``: widths to 8192, :math:`T` up to
0.5, 16 seeds.

Recorded at 21 times: :math:`\lambda_{\min}(K_t)`, its ratio to :math:`\lambda_{\min}(K_0)`,
the relative Jacobian change :math:`\|J_t - J_0\|_F/\|J_0\|_F`, the relative weight distance
:math:`\|\theta_t - \theta_0\|/\|\theta_0\|`, the loss. Theory (``langevin_ntk.bounds``):
:math:`\lambda_G = \lambda_{\min}(G)` of the infinite-width feature Gram, the level-0.1
Chernoff bound :math:`\kappa_0(m)` on :math:`\lambda_{\min}(K_0)`, and the smallest width for
which the change-of-measure bound guarantees :math:`P(\lambda_{\min}(K_t) \le m\lambda_G/2)
\le 0.1` for all :math:`t`.

Rule (fixed before the first run; ``holds`` is the conjunction):

* **R1 (init bound).** At every width where :math:`\kappa_0(m) > 0`, at least 90% of seeds
  have :math:`\lambda_{\min}(K_0) > \kappa_0(m)`.
* **R2 (stability under noise).** For every :math:`T > 0` and width, at least 75% of seeds
  keep :math:`\min_t \lambda_{\min}(K_t) \ge m\lambda_G/2` (the :math:`\delta = 1/2` level of
  the theory).
* **R3 (non-lazy vs lazy).** For every :math:`T > 0` the median final Jacobian change at the
  largest width is at least half of that at the smallest width (it does not vanish with
  width), while for :math:`T = 0` (gradient descent) it is at most half (the lazy picture).
* **R4 (far from init).** For every :math:`T > 0` and width the median final relative weight
  distance is at least 0.25.

The sizes here are far below the widths that the proven bound needs (reported as
``min_width_T*``), so R2-R4 test the claimed behaviour outside the proven regime, and R1 tests
the init bound where it is non-vacuous.

**Depth 3** (added with the unconditional bound, ``langevin_ntk.deep_bounds``, and the radius
bound, ``langevin_ntk.stability_radius``; derivations in ``docs/deep_bounds.md``). Same data;
bias-free tanh MLPs with two hidden layers of width :math:`m` (standard parameterisation).
Init draws at :math:`m \in` ``DEEP_INIT_WIDTHS`` (2048, 4096; ``--full`` adds 8192; 10 / 20 /
50 seeds): measured :math:`\lambda_{\min}(K_0)` (exact, ``mlp_ntk``) against the
unconditional level-0.1 bound :math:`\kappa_u(m)`. Training (width 256 quick; 256 and 512
default; to 1024 ``--full``; 3 / 4 / 8 seeds; :math:`T \in \{0, 0.05\}`, default and full
add 0.2; prior-matched decays :math:`T\,\mathrm{fan\_in}`, exact-OU step
:math:`0.5/\lambda_{\max}(K_0)`, :math:`t_{\max} = 0.25`): each seed's certified radius
:math:`R` (``stability_radius`` of its init), the distance :math:`\|\theta_t - \theta_0\|` at
every step, :math:`\lambda_{\min}(K_t)` at every step inside the ball and at 21 records.

* **R5 (unconditional deep init bound).** :math:`\kappa_u(m) > 0` at every width of
  ``DEEP_INIT_WIDTHS`` (the derivation's prediction that the bound is not vacuous there), and
  at each width at least 90% of seeds have :math:`\lambda_{\min}(K_0) > \kappa_u(m)`.
* **R6 (radius bound, a theorem check).** For every trained seed,
  :math:`\lambda_{\min}(K) \ge \lambda_{\min}(K_0)/2` at 8 random points on the sphere of
  radius :math:`R` around its init and at every training step with
  :math:`\|\theta_t - \theta_0\| \le R`.

Reported, not ruled: the time each run leaves its ball, the distance travelled in units of
:math:`R`, the whole-run min-ratio of :math:`\lambda_{\min}` at depth 3, the radius that the
bound gives from (data, width, depth) alone, and the width at which the depth-3
change-of-measure bound reaches 0.1. (Disclosure: R5 and R6 were written after a pilot had
measured :math:`\lambda_{\min}(K_0)` of 10 depth-3 nets at width 2048 (473-519, against
:math:`\kappa_u = 21.9`) and the Jacobian change at random perturbations of small nets.)
"""

from __future__ import annotations

import math

import torch

from shared_core.experiment import ExperimentResult, RunContext, line_plot, progress, run_experiment

from ..bounds import (
    expected_init_loss,
    init_lambda_min_bound,
    last_layer_gram,
    min_width_for_stability,
)
from ..deep_bounds import deep_stability_failure_bound, deep_unconditional_init_bound
from ..stability_radius import deep_stability_radius
from ._common import RunResult, make_data, train_ensemble
from ._deep import DeepEnsemble, DeepRun, init_lambda_min, perturbed_min_ratio, train_deep

N, D, T_MAX, P_INIT, DELTA = 8, 32, 1.0, 0.1, 0.5
DEEP_DEPTH, DEEP_T_MAX, DEEP_PERTURBATIONS = 3, 0.25, 8
#: where R5 checks the unconditional bound (non-vacuous from width 1130 at this data)
DEEP_INIT_WIDTHS = (2048, 4096)
#: measured quick-mode seconds on 2 CPU cores (24 s of CPU for the whole process with the
#: depth-3 part, seed 0; 78 s wall on the loaded shared machine)
QUICK_SECONDS = 30


def _sizes(ctx: RunContext) -> tuple[list[int], list[float], int]:
    if ctx.quick:
        return [32, 128, 512], [0.0, 0.05, 0.2], 4
    if ctx.full:
        return [32, 128, 512, 2048, 8192], [0.0, 0.02, 0.05, 0.2, 0.5], 16
    return [32, 128, 512, 1024], [0.0, 0.02, 0.05, 0.2], 6


def _deep_sizes(ctx: RunContext) -> tuple[list[int], int, list[int], list[float], int]:
    """(init widths, init seeds, training widths, temperatures, training seeds)."""
    if ctx.quick:
        return list(DEEP_INIT_WIDTHS), 10, [256], [0.0, 0.05], 3
    if ctx.full:
        return [*DEEP_INIT_WIDTHS, 8192], 50, [256, 512, 1024], [0.0, 0.05, 0.2], 8
    return list(DEEP_INIT_WIDTHS), 20, [256, 512], [0.0, 0.05, 0.2], 4


def _min_width_deep(x: torch.Tensor, y: torch.Tensor, temp: float, target: float) -> int:
    """Smallest width with the depth-3 change-of-measure bound <= target (it falls with m)."""

    def ok(m: int) -> bool:
        return deep_stability_failure_bound(x, y, m, DEEP_DEPTH, temp, DELTA)["bound"] <= target

    hi = 1024
    while not ok(hi):
        hi *= 2
    lo = hi // 2
    while hi - lo > max(1, hi // 1000):  # 0.1% resolution is plenty for a report
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if ok(mid) else (mid, hi)
    return hi


def _deep_part(ctx: RunContext, x: torch.Tensor, y: torch.Tensor) -> tuple[list, dict, bool, bool]:
    init_widths, init_seeds, train_widths, temps, n_seeds = _deep_sizes(ctx)
    rows, metrics = [], {}
    r5 = True
    for m in progress(init_widths, desc="ntk-stability depth-3 init"):
        kappa = deep_unconditional_init_bound(x, m, DEEP_DEPTH, P_INIT)["kappa"]
        lam0 = torch.tensor(
            init_lambda_min(
                x, m, DEEP_DEPTH, [ctx.seed * 1000 + 500 + s for s in range(init_seeds)]
            )
        )
        frac = float((lam0 > kappa).double().mean())
        r5 = r5 and kappa > 0 and frac >= 0.9
        rows.append(
            {
                "depth": DEEP_DEPTH,
                "width": m,
                "kind": "init",
                "seeds": init_seeds,
                "kappa_unconditional": kappa,
                "lam0_min": float(lam0.min()),
                "lam0_median": _median(lam0),
                "frac_lam0_above_bound": frac,
                "radius_from_width": deep_stability_radius(x, m, DEEP_DEPTH, P_INIT)["radius"],
            }
        )
    r6 = True
    runs: dict[tuple[int, float], DeepRun] = {}
    seeds = [ctx.seed * 1000 + 300 + s for s in range(n_seeds)]
    for m, t in progress([(m, t) for t in temps for m in train_widths], desc="depth-3 training"):
        run_ = runs[(m, t)] = train_deep(x, y, m, DEEP_DEPTH, t, seeds, t_max=DEEP_T_MAX)
        if t == temps[0]:  # the init (and its radius) is the same draw at every T
            ens = DeepEnsemble(x.shape[1], m, DEEP_DEPTH, seeds)
            pert = [
                perturbed_min_ratio(ens.member(i), x, float(run_.radius[i]), DEEP_PERTURBATIONS, s)
                for i, s in enumerate(seeds)
            ]
            r6 = r6 and min(pert) >= 0.5
        else:
            pert = []
        r6 = r6 and float(run_.inside_min_ratio.min()) >= 0.5
        ratio = run_.lambda_min / run_.lambda_min[:, :1]
        rows.append(
            {
                "depth": DEEP_DEPTH,
                "width": m,
                "T": t,
                "kind": "train",
                "steps": run_.steps,
                "radius_median": _median(run_.radius),
                "radius_rel_median": _median(run_.radius / run_.init_norm),
                "perturbed_min_ratio": min(pert) if pert else math.nan,
                "inside_min_ratio": float(run_.inside_min_ratio.min()),
                "exit_time_median": _median(run_.exit_time),
                "first_step_distance_over_radius": _median(run_.first_step_distance / run_.radius),
                "final_distance_over_radius": _median(run_.distance[:, -1] / run_.radius),
                "final_distance_rel_median": _median(run_.distance[:, -1] / run_.init_norm),
                "min_ratio_median": _median(ratio.min(1).values),
                "frac_min_ratio_above_half": float((ratio.min(1).values >= 0.5).double().mean()),
            }
        )
    for t in temps:
        if t > 0:
            metrics[f"deep_min_width_T{t}"] = _min_width_deep(x, y, t, 0.1)
            metrics[f"deep_min_ratio_median_T{t}"] = _median(
                torch.cat(
                    [
                        (r.lambda_min / r.lambda_min[:, :1]).min(1).values
                        for (m, tt), r in runs.items()
                        if tt == t
                    ]
                )
            )
    return rows, metrics, r5, r6


def _median(t: torch.Tensor) -> float:
    return float(t.median())


def run(ctx: RunContext) -> ExperimentResult:
    torch.set_num_threads(min(torch.get_num_threads(), 2))
    widths, temps, n_seeds = _sizes(ctx)
    seeds = [ctx.seed * 1000 + s for s in range(n_seeds)]
    x, y = make_data(N, D, seed=ctx.seed)
    gram = last_layer_gram(x, "tanh")
    lam_g = float(torch.linalg.eigvalsh(gram)[0])
    lbar = expected_init_loss(gram, y)
    runs: dict[tuple[int, float], RunResult] = {}
    for m, t in progress([(m, t) for t in temps for m in widths], desc="ntk-stability"):
        runs[(m, t)] = train_ensemble(x, y, m, t, seeds, t_max=T_MAX)

    table, metrics = [], {"lambda_G": lam_g, "expected_init_loss": lbar}
    r1 = r2 = r4 = True
    for (m, t), r in runs.items():
        kappa = init_lambda_min_bound(m, N, lam_g, 1.0, P_INIT)
        lam0 = r.lambda_min[:, 0]
        frac_init = float((lam0 > kappa).double().mean()) if kappa > 0 else math.nan
        frac_stable = float((r.lambda_min.min(1).values >= 0.5 * m * lam_g).double().mean())
        row = {
            "width": m,
            "T": t,
            "steps": r.steps,
            "lam0_median": _median(lam0),
            "kappa0_bound": kappa,
            "frac_lam0_above_bound": frac_init,
            "min_ratio_median": _median(r.lambda_min_ratio.min(1).values),
            "frac_stable": frac_stable,
            "jac_change_median": _median(r.jacobian_change[:, -1]),
            "weight_dist_rel_median": _median(r.weight_distance_rel[:, -1]),
            "final_loss_median": _median(r.loss[:, -1]),
        }
        table.append(row)
        if kappa > 0 and t == temps[0]:  # the init is the same draw at every T
            r1 = r1 and frac_init >= 0.9
        if t > 0:
            r2 = r2 and frac_stable >= 0.75
            r4 = r4 and row["weight_dist_rel_median"] >= 0.25
    r3 = True
    jac_ratio = {}
    for t in temps:
        small = _median(runs[(widths[0], t)].jacobian_change[:, -1])
        large = _median(runs[(widths[-1], t)].jacobian_change[:, -1])
        jac_ratio[t] = large / small
        r3 = r3 and (jac_ratio[t] >= 0.5 if t > 0 else jac_ratio[t] <= 0.5)
        metrics[f"jac_change_ratio_T{t}"] = jac_ratio[t]
        if t > 0:
            metrics[f"min_width_T{t}"] = min_width_for_stability(N, lam_g, 1.0, DELTA, lbar, t, 0.1)
    deep_rows, deep_metrics, r5, r6 = _deep_part(ctx, x, y)
    table.extend(deep_rows)
    metrics.update(deep_metrics)
    metrics.update(
        {
            "R1_init_bound": r1,
            "R2_stable": r2,
            "R3_nonlazy": r3,
            "R4_far": r4,
            "R5_deep_init_bound": r5,
            "R6_radius": r6,
        }
    )
    holds = r1 and r2 and r3 and r4 and r5 and r6

    plots = []
    big = widths[-1]
    line_plot(
        ctx.path("lambda_min_ratio.png"),
        {
            f"T={t}": (
                runs[(big, t)].time,
                runs[(big, t)].lambda_min_ratio.median(0).values.tolist(),
            )
            for t in temps
        },
        bands={
            f"T={t}": (
                runs[(big, t)].lambda_min_ratio.min(0).values.tolist(),
                runs[(big, t)].lambda_min_ratio.max(0).values.tolist(),
            )
            for t in temps
        },
        title=f"lambda_min(K_t)/lambda_min(K_0), width {big} (median, min-max over seeds)",
        xlabel="time t",
        ylabel="ratio",
    )
    plots.append("lambda_min_ratio.png")
    line_plot(
        ctx.path("lazy_vs_langevin.png"),
        {
            ("GD" if t == 0 else f"Langevin T={t}"): (
                widths,
                [_median(runs[(m, t)].jacobian_change[:, -1]) for m in widths],
            )
            for t in temps
        },
        title="final relative Jacobian change vs width",
        xlabel="width m",
        ylabel="||J_t - J_0|| / ||J_0||",
        logx=True,
        logy=True,
    )
    plots.append("lazy_vs_langevin.png")

    tmax = temps[-1]
    init_rows = [r for r in deep_rows if r["kind"] == "init"]
    train_rows = [r for r in deep_rows if r["kind"] == "train"]
    measured = (
        f"R1 {r1}, R2 {r2}, R3 {r3}, R4 {r4}, R5 {r5}, R6 {r6}; Jacobian change ratio "
        f"(m={widths[-1]} vs {widths[0]}): GD {jac_ratio[0.0]:.2f}, Langevin T={tmax} "
        f"{jac_ratio[tmax]:.2f}; depth 3: "
        + ", ".join(
            f"m={r['width']}: kappa_u {r['kappa_unconditional']:.1f} vs min lambda_0 "
            f"{r['lam0_min']:.1f}"
            for r in init_rows
        )
        + "; radius R "
        + ", ".join(
            f"m={r['width']} T={r['T']}: {r['radius_median']:.2g} (left at t="
            f"{r['exit_time_median']:.2g}, first step {r['first_step_distance_over_radius']:.0f} R)"
            for r in train_rows
        )
    )
    summary = (
        f"{len(widths)} widths x {len(temps)} temperatures x {n_seeds} seeds, n={N}, d={D}, "
        f"t_max={T_MAX}. lambda_G = {lam_g:.4f}, E[L_0] = {lbar:.3f}. "
        + "; ".join(
            f"T={t}: median min-ratio of lambda_min at m={big} "
            f"{_median(runs[(big, t)].lambda_min_ratio.min(1).values):.2f}, weight distance "
            f"{_median(runs[(big, t)].weight_distance_rel[:, -1]):.3f}"
            for t in temps
        )
        + ". Proven-regime widths (bound <= 0.1): "
        + ", ".join(f"T={t}: {metrics[f'min_width_T{t}']}" for t in temps if t > 0)
        + "; depth 3: "
        + ", ".join(
            f"{k[len('deep_min_width_') :]}: {v}"
            for k, v in metrics.items()
            if k.startswith("deep_min_width")
        )
        + "."
    )
    return ExperimentResult(
        title="Langevin keeps lambda_min(NTK) away from 0 while the weights move far from init",
        claim=(
            "Under L2-regularised Langevin training the NTK's minimum eigenvalue stays bounded "
            "away from 0 w.h.p. while the weights leave the neighbourhood of their "
            "initialisation (non-lazy), and lambda_min at init is above the lower bound."
        ),
        summary=summary,
        metrics=metrics,
        holds=holds,
        plots=plots,
        table=table,
        paper="P15",
        measured=measured,
    )


def main(argv: list[str] | None = None) -> int:
    return run_experiment(run, name="langevin-ntk.ntk_stability", description=__doc__, argv=argv)


if __name__ == "__main__":
    raise SystemExit(main())
