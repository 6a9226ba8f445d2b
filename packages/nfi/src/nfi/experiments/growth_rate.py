r"""growth-rate: measured growth of the classifier and feature means vs the linearised theory.

Setting (the unconstrained-features model, where the theory of :mod:`nfi.dynamics` is exact up
to the averaging it states): free features :math:`h_i \in \mathbb R^{16}` for 40 samples of 10
balanced classes and a free classifier :math:`W \in \mathbb R^{10\times 16}`, both float32
parameters, trained by plain gradient descent (step 0.5 on both) on the *sum* of the
cross-entropies of bf16 logits :math:`z_i = \mathrm{bf16}(W h_i)` (mixed precision: the loss
is computed in bf16, as under bf16 autocast). Initial :math:`W, h_i \sim N(0, 0.25)`.
Quick: 1,500 steps; default: 4,000 steps. Two arms with the same initial state:
``torch.nn.functional.cross_entropy`` and :func:`nfi.stable_cross_entropy`.

At every step the measured row-sum mean :math:`\bar\sigma` of the bf16 logit gradient gives the
predicted per-step log growth rate :math:`\rho_t = \log(1 + \bar\sigma\sqrt{\eta_W\eta_H N/C})`
(:func:`nfi.predicted_growth_rate`). Over consecutive windows of 100 steps the measured rate of
:math:`\|\bar w\|` (and of :math:`\|\bar h\|`) is the log ratio of the end values over 100; the
prediction is the mean of :math:`\rho_t` over the window.

Rule (fixed before the run). Windows *in the absorbed phase* are those where every step has
``absorbed_frac`` :math:`\ge 0.9` and the means are on the growing mode,
:math:`\cos(\bar w, \bar h) \le -0.9` at the window's start. ``holds`` iff

1. there are at least 5 such windows for the CE arm;
2. the median ratio measured/predicted lies in :math:`[0.8, 1.25]` for both means, and every
   window's ratio in :math:`[0.5, 2]`;
3. with :func:`nfi.stable_cross_entropy` the classifier mean does not grow:
   :math:`\|\bar w_T\| \le 1.05\,\|\bar w_0\|`, while the CE arm's grows by at least 2x.
"""

from __future__ import annotations

import math
import statistics

import torch
import torch.nn.functional as F

from shared_core.experiment import ExperimentResult, RunContext, line_plot, progress, run_experiment

from ..dynamics import predicted_growth_rate, zero_sum_violation
from ..loss import stable_cross_entropy
from ..thresholds import absorbed_rows

#: quick-mode seconds on a quiet 2-core machine (7 s CPU time measured, plus start-up).
QUICK_SECONDS = 10

C, DIM, N = 10, 16, 40
LR = 0.5
WINDOW = 100
ABSORBED_MIN, COS_MAX = 0.9, -0.9
MEDIAN_BAND, ALL_BAND = (0.8, 1.25), (0.5, 2.0)
MIN_WINDOWS, CE_GROWTH, STABLE_GROWTH = 5, 2.0, 1.05


def simulate(loss_name: str, steps: int, seed: int, bar=None) -> dict[str, list[float]]:
    """Gradient descent on free features and classifier; per-step traces."""
    g = torch.Generator().manual_seed(seed)
    W = torch.randn(C, DIM, generator=g) * 0.5
    H = torch.randn(N, DIM, generator=g) * 0.5
    y = torch.arange(N) % C
    loss_fn = F.cross_entropy if loss_name == "ce" else stable_cross_entropy
    tr = {k: [] for k in ("w", "h", "cos", "sigma", "absorbed", "pred", "loss")}
    for t in range(steps):
        W.requires_grad_(True)
        H.requires_grad_(True)
        z = (H @ W.T).to(torch.bfloat16)
        z.retain_grad()
        loss = loss_fn(z, y, reduction="sum")
        loss.backward()
        with torch.no_grad():
            sigma = zero_sum_violation(z.grad).mean().item()
            wb, hb = W.mean(0).double(), H.mean(0).double()
            tr["w"].append(wb.norm().item())
            tr["h"].append(hb.norm().item())
            tr["cos"].append((wb @ hb / (wb.norm() * hb.norm())).item())
            tr["sigma"].append(sigma)
            tr["absorbed"].append(absorbed_rows(z.grad, y).double().mean().item())
            tr["pred"].append(predicted_growth_rate(max(sigma, 0.0), C, LR, LR, N))
            tr["loss"].append(float(loss))
            W = W - LR * W.grad
            H = H - LR * H.grad
        if bar is not None and t % 100 == 99:
            bar.update(100)
    return tr


def window_ratios(tr: dict[str, list[float]]) -> list[dict[str, float]]:
    """Measured/predicted growth-rate ratios over 100-step windows in the absorbed phase."""
    rows = []
    T = len(tr["w"])
    for a in range(0, T - WINDOW, WINDOW):
        b = a + WINDOW
        if min(tr["absorbed"][a:b]) < ABSORBED_MIN or tr["cos"][a] > COS_MAX:
            continue
        pred = sum(tr["pred"][a:b]) / WINDOW
        if pred <= 0:
            continue
        mw = math.log(tr["w"][b] / tr["w"][a]) / WINDOW
        mh = math.log(tr["h"][b] / tr["h"][a]) / WINDOW
        rows.append(
            {
                "start": a,
                "predicted_rate": pred,
                "measured_rate_w": mw,
                "measured_rate_h": mh,
                "ratio_w": mw / pred,
                "ratio_h": mh / pred,
            }
        )
    return rows


def run(ctx: RunContext) -> ExperimentResult:
    torch.set_num_threads(1)
    steps = 1500 if ctx.quick else 4000
    bar = progress(total=2 * steps, desc="growth-rate")
    ce = simulate("ce", steps, ctx.seed, bar)
    st = simulate("stable", steps, ctx.seed, bar)
    bar.close()
    rows = window_ratios(ce)
    rw = [r["ratio_w"] for r in rows]
    rh = [r["ratio_h"] for r in rows]
    med_w = statistics.median(rw) if rows else None
    med_h = statistics.median(rh) if rows else None
    ce_growth = ce["w"][-1] / ce["w"][0]
    st_growth = st["w"][-1] / st["w"][0]
    c1 = len(rows) >= MIN_WINDOWS
    c2 = (
        c1
        and all(MEDIAN_BAND[0] <= m <= MEDIAN_BAND[1] for m in (med_w, med_h))
        and all(ALL_BAND[0] <= r <= ALL_BAND[1] for r in rw + rh)
    )
    c3 = st_growth <= STABLE_GROWTH and ce_growth >= CE_GROWTH
    holds = c1 and c2 and c3

    xs = list(range(steps))
    line_plot(
        ctx.path("means.png"),
        {
            "|w_mean| CE": (xs, ce["w"]),
            "|h_mean| CE": (xs, ce["h"]),
            "|w_mean| StableCE": (xs, st["w"]),
            "|h_mean| StableCE": (xs, st["h"]),
        },
        title="classifier and feature means (bf16 logits, GD)",
        xlabel="step",
        ylabel="norm",
        logy=True,
    )
    if rows:
        starts = [r["start"] for r in rows]
        line_plot(
            ctx.path("rates.png"),
            {
                "predicted": (starts, [r["predicted_rate"] for r in rows]),
                "measured |w_mean|": (starts, [r["measured_rate_w"] for r in rows]),
                "measured |h_mean|": (starts, [r["measured_rate_h"] for r in rows]),
            },
            title="per-step log growth rate, 100-step windows",
            xlabel="window start",
            ylabel="rate",
            logy=True,
        )
    plots = ["means.png"] + (["rates.png"] if rows else [])

    def fmt(v):
        return "none" if v is None else f"{v:.3f}"

    measured = (
        f"median measured/predicted rate {fmt(med_w)} (w_mean), {fmt(med_h)} (h_mean) over "
        f"{len(rows)} windows; |w_mean| x{ce_growth:.2f} with CE, x{st_growth:.3f} with StableCE"
    )
    metrics = {
        "windows": len(rows),
        "median_ratio_w": med_w,
        "median_ratio_h": med_h,
        "min_ratio": min(rw + rh) if rows else None,
        "max_ratio": max(rw + rh) if rows else None,
        "ce_w_growth": ce_growth,
        "stable_w_growth": st_growth,
        "final_cos_ce": ce["cos"][-1],
        "clause.windows": c1,
        "clause.ratio_band": c2,
        "clause.stable_no_growth": c3,
        "steps": steps,
    }
    return ExperimentResult(
        title="NFI growth rate of the classifier/feature means matches the linearised theory",
        claim=(
            "With zero-sum broken, the classifier mean and the feature mean feed each other and "
            "grow at the rate log(1 + sigma sqrt(eta_W eta_H N / C)) predicted from the current "
            "row-sum mean sigma; with zero-sum restored they do not grow."
        ),
        summary=f"{steps} GD steps, free features and classifier, bf16 logits. {measured}.",
        metrics=metrics,
        holds=holds,
        plots=plots,
        table=rows[:: max(1, len(rows) // 8)],
        paper="P13",
        measured=measured,
    )


def main(argv=None) -> int:
    return run_experiment(run, name="nfi.growth-rate", description=__doc__, argv=argv)


if __name__ == "__main__":
    raise SystemExit(main())
