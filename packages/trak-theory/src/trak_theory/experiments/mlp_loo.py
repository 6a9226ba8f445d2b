r"""mlp-loo: TRAK vs exact leave-one-out for a small MLP, with the linearisation term.

Data: a 3-class Gaussian mixture in :math:`\mathbb{R}^6` (class means
:math:`\mu_c \sim N(0, I)`, :math:`x = \mu_y + N(0, I)`, so the classes overlap). Model: a
6-h-3 tanh MLP, p = 10h + 3 parameters, trained on the summed cross-entropy plus
:math:`\tfrac\lambda2\|\theta\|^2` (:math:`\lambda = 0.5`): a seeded initialisation, 300
full-batch Adam steps, then damped Newton to a gradient norm below 1e-9
(:mod:`trak_theory.loo_nn`). Regimes n/p in {0.5, 1, 2, 4} (quick: {0.5, 1, 2}).

Ground truth: every :math:`\hat\theta_{-i}` retrained by Newton from the full-data optimum
(warm start), :math:`\tau_{ti} = f_t(\hat\theta) - f_t(\hat\theta_{-i})` on held-out targets.
Approximations, each a step further from the truth:

- linearised LOO: the exact LOO of the model linearised at :math:`\hat\theta`;
- ALO: one Newton step of that problem (leverage kept);
- TRAK with the full gradient (ridge :math:`\lambda`): curvature :math:`W \to I`, no leverage;
- TRAK projected to k = p/2 by the seeded sketch.

Per example and regime, the decomposition exact -> linearised -> ALO -> TRAK -> projected
TRAK is reported in units of mean |exact LOO| (its terms add up to TRAK_k - exact), with the
separation diagnostics of every estimator against the exact LOO.

Verdict (``holds``), the separation claim as in ``separation``: in every regime TRAK's
(k = p, ridge lambda) relative error exceeds 0.3 while its AUC for the true top-10% is at
least 0.9.
"""

from __future__ import annotations

import copy
import time
from typing import Any

import torch
from torch import Tensor, nn
from torch.func import grad, vmap

from shared_core.experiment import (
    ExperimentResult,
    RunContext,
    line_plot,
    progress,
    run_experiment,
    save_json,
)

from ..loo_nn import (
    NetworkObjective,
    exact_loo_network,
    fit_network,
    linearized_loo,
    min_hessian_eig,
)
from ..projector import SketchProjector
from ..scores import alo_scores, trak_scores
from .separation import diagnostics, diagnostics_table, record_estimates

#: Quick-mode wall seconds on a 2-core CPU (README);
#: `nox -s repro` plans its budget with it.
QUICK_SECONDS = 22

LAM = 0.5
D_IN, CLASSES = 6, 3


def make_data(n: int, m: int, seed: int):
    """(x, y, x_targets, y_targets): overlapping Gaussian classes, float64."""
    g = torch.Generator().manual_seed(seed)
    mu = torch.randn(CLASSES, D_IN, generator=g, dtype=torch.float64)
    y = torch.randint(0, CLASSES, (n + m,), generator=g)
    x = mu[y] + torch.randn(n + m, D_IN, generator=g, dtype=torch.float64)
    return x[:n], y[:n], x[n:], y[n:]


def make_mlp(hidden: int, seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(D_IN, hidden), nn.Tanh(), nn.Linear(hidden, CLASSES)).double()


def pretrain(
    net: nn.Module, x, y, steps: int = 300, lr: float = 1e-2, lam: float = LAM
) -> nn.Module:
    """Full-batch Adam on the summed objective scaled by 1/n (Newton polishes afterwards)."""
    opt = torch.optim.Adam(net.parameters(), lr=lr)
    n = x.shape[0]
    for _ in range(steps):
        opt.zero_grad()
        ce = nn.functional.cross_entropy(net(x), y, reduction="sum")
        reg = 0.5 * lam * sum((p * p).sum() for p in net.parameters())
        ((ce + reg) / n).backward()
        opt.step()
    return net


def target_margins(obj: NetworkObjective, thetas: Tensor, x_t: Tensor, y_t: Tensor) -> Tensor:
    """(B, m) margins of the targets under each of the (B, p) parameter vectors."""
    return vmap(lambda t: obj.outputs(t, x_t, y_t))(thetas)


def cold_loo(
    obj: NetworkObjective,
    theta_init: Tensor,
    x_t: Tensor,
    y_t: Tensor,
    steps: int = 300,
    lr: float = 1e-2,
    tol: float = 1e-9,
    batch: int = 64,
) -> tuple[Tensor, Tensor, Tensor]:
    r"""LOO ground truth from cold retrains with a fixed seed: every training set (the full one
    and each leave-one-out set) is trained by the *same* procedure from the *same*
    initialisation ``theta_init``: full-batch Adam on the objective over n (as
    :func:`pretrain`, all sets at once: Adam is elementwise and the summed objectives are
    separable, so these are independent runs), then damped Newton to a gradient norm below
    ``tol`` (:func:`trak_theory.loo_nn.fit_network`). A LOO run may end in another basin than
    the full-data run; that is part of what a retrain measures.

    Returns:
        (scores (m, n): f_t(full) - f_t(LOO_i), theta_full (p,), thetas_loo (n, p)).
    """
    n = obj.x.shape[0]
    w_all = torch.cat(
        [torch.ones(1, n, dtype=torch.float64), 1 - torch.eye(n, dtype=torch.float64)]
    )
    gfn = vmap(grad(obj.value))
    out = []
    for s in range(0, n + 1, batch):
        w = w_all[s : s + batch]
        th = theta_init.to(torch.float64).expand(w.shape[0], -1).clone().requires_grad_(True)
        opt = torch.optim.Adam([th], lr=lr)
        for _ in range(steps):
            opt.zero_grad()
            th.grad = gfn(th.detach(), w) / n
            opt.step()
        out.append(fit_network(obj, w, th.detach(), tol))
    thetas = torch.cat(out)
    f = target_margins(obj, thetas, x_t, y_t)  # (n + 1, m)
    return (f[0][:, None] - f[1:].T), thetas[0], thetas[1:]


def run(ctx: RunContext, hidden: int | None = None, m: int | None = None) -> ExperimentResult:
    """Every regime: exact network LOO, linearised LOO, ALO, TRAK, projected TRAK."""
    hidden = hidden or (5 if ctx.quick else 8)
    m = m or (8 if ctx.quick else 20)
    ratios = (0.5, 1.0, 2.0) if ctx.quick else (0.5, 1.0, 2.0, 4.0)
    p = 10 * hidden + 3
    metrics: dict[str, Any] = {"p": p, "hidden": hidden, "targets": m, "train_ridge": LAM}
    table, verdicts, decomposition, dec_rows = [], [], {}, []
    for ratio in progress(ratios, desc="mlp-loo"):
        n = round(ratio * p)
        tag = f"n/p={ratio:g}"
        x, y, xt, yt = make_data(n, m, ctx.seed * 1000 + int(ratio * 10))
        net = pretrain(make_mlp(hidden, ctx.seed), x, y)
        obj = NetworkObjective(net, x, y, LAM)
        exact, theta, thetas = exact_loo_network(obj, xt, yt, tol=1e-9)
        eig_full = float(min_hessian_eig(obj, theta, torch.ones(n))[0])
        eig_loo = min_hessian_eig(obj, thetas, 1 - torch.eye(n, dtype=torch.float64))
        metrics[f"{tag} min Hessian eigenvalue (full)"] = eig_full
        metrics[f"{tag} LOO solutions at a local minimum"] = float((eig_loo > 0).double().mean())
        metrics[f"{tag} mean |theta_-i - theta|"] = float((thetas - theta).norm(dim=1).mean())
        metrics[f"{tag} train accuracy"] = float((obj.outputs(theta) > 0).double().mean())
        lin = linearized_loo(obj, theta, xt, yt)
        phi, phit = obj.features(theta), obj.features(theta, xt, yt)
        q = torch.sigmoid(-obj.outputs(theta))
        alo = alo_scores(phi, phit, q, q * (1 - q), LAM)
        trak_full = trak_scores(phi, phit, q, LAM)
        proj = SketchProjector(p, p // 2, seed=ctx.seed)
        phi_k = proj.project(phi.float()).double()
        phit_k = proj.project(phit.float()).double()
        trak_k = trak_scores(phi_k, phit_k, q, LAM)
        estimates = [
            ("linearised LOO", lin),
            ("ALO", alo),
            ("TRAK (k=p, ridge=lambda)", trak_full),
            (f"TRAK (k={p // 2}, ridge=lambda)", trak_k),
        ]
        verdicts.append(record_estimates(tag, n, estimates, exact, table, metrics))
        scale = float(exact.abs().mean())
        parts = {
            "linearisation (lin - exact)": (lin - exact) / scale,
            "ALO step (ALO - lin)": (alo - lin) / scale,
            "curvature+leverage (TRAK - ALO)": (trak_full - alo) / scale,
            "projection (TRAK_k - TRAK)": (trak_k - trak_full) / scale,
        }
        decomposition[tag] = {k: v.numpy() for k, v in parts.items()}
        row = {"regime": tag}
        for k, v in parts.items():
            val = float(v.abs().mean())
            metrics[f"{tag} mean |{k}| / mean |exact|"] = val
            row[k] = round(val, 4)
        dec_rows.append(row)
    save_json(ctx.path("decomposition.json"), decomposition)
    line_plot(
        ctx.path("decomposition.png"),
        {k: (list(ratios), [r[k] for r in dec_rows]) for k in dec_rows[0] if k != "regime"},
        title=f"MLP (p={p}): error terms, mean |term| / mean |exact LOO|",
        xlabel="n/p",
        ylabel="relative size",
        logx=True,
    )
    holds = all(verdicts)
    trak = [r for r in table if r["method"] == "TRAK (k=p, ridge=lambda)"]
    dcols = list(dec_rows[0])
    lines = [
        f"6-{hidden}-3 tanh MLP (p={p}), {m} targets, ridge {LAM}; exact LOO by Newton "
        "retraining of every point from the full-data optimum.",
        "",
        *diagnostics_table(table),
        "",
        "Error decomposition, mean |term| / mean |exact LOO|:",
        "",
        "| " + " | ".join(dcols) + " |",
        "|" + "---|" * len(dcols),
        *["| " + " | ".join(str(r[c]) for c in dcols) + " |" for r in dec_rows],
    ]
    return ExperimentResult(
        title="Small MLP: TRAK vs exact leave-one-out, with the linearisation error",
        claim=(
            "For a small network too, TRAK's scores are far from the exact leave-one-out "
            "effects yet separate the highly influential training points from the rest."
        ),
        summary="\n".join(lines),
        metrics=metrics,
        holds=holds,
        plots=["decomposition.png"],
        table=table,
        paper="P07",
        measured=(
            f"MLP p={p}: TRAK relative error {min(r['rel_error'] for r in trak):.2f}-"
            f"{max(r['rel_error'] for r in trak):.2f}, top-10% AUC "
            f"{min(r['auc_top10'] for r in trak):.2f}-{max(r['auc_top10'] for r in trak):.2f}; "
            "linearisation term "
            + ", ".join(f"{r['regime']}: {r['linearisation (lin - exact)']:.2f}" for r in dec_rows)
        ),
    )


def _fmt(v: float) -> float:
    """4 decimals, or 2 significant digits below 1e-3 (so small distances do not read 0)."""
    return float(f"{v:.2g}") if 0 < abs(v) < 1e-3 else round(v, 4)


def sweep_config(quick: bool, full: bool = False) -> dict[str, Any]:
    """The ``--sweep`` grid: ridges x widths at one n/p (quick: a 2 x 2 corner)."""
    if quick:
        return {"ratio": 2.0, "lams": [0.5, 8.0], "hiddens": [3, 5], "m": 8, "cold": True}
    if full:
        return {
            "ratio": 2.0,
            "lams": [0.1, 0.5, 2.0, 8.0, 32.0],
            "hiddens": [3, 5, 8, 16],
            "m": 20,
            "cold": True,
        }
    return {"ratio": 2.0, "lams": [0.5, 2.0, 8.0, 32.0], "hiddens": [3, 5], "m": 20, "cold": True}


def _sweep_point(seed: int, h: int, lam: float, ratio: float, m: int, with_cold: bool) -> dict:
    """One (width, ridge) point of the sweep: its row of diagnostics."""
    p = 10 * h + 3
    n = round(ratio * p)
    x, y, xt, yt = make_data(n, m, seed * 1000 + int(ratio * 10))
    init = make_mlp(h, seed)
    net = pretrain(copy.deepcopy(init), x, y, lam=lam)
    obj = NetworkObjective(net, x, y, lam)
    try:
        exact, theta, thetas = exact_loo_network(obj, xt, yt, tol=1e-9)
    except RuntimeError as exc:  # reported, not fatal: the sweep goes on
        return {"h": h, "p": p, "n": n, "lambda": lam, "failed": f"warm LOO: {exc}"}
    lin = linearized_loo(obj, theta, xt, yt)
    phi, phit = obj.features(theta), obj.features(theta, xt, yt)
    q = torch.sigmoid(-obj.outputs(theta))
    trak_full = trak_scores(phi, phit, q, lam)
    alo = alo_scores(phi, phit, q, q * (1 - q), lam)
    scale = float(exact.abs().mean())
    d_trak = diagnostics(trak_full, exact)
    row: dict[str, Any] = {
        "h": h,
        "p": p,
        "n": n,
        "lambda": lam,
        "train acc.": float((obj.outputs(theta) > 0).double().mean()),
        "min Hessian eig.": float(min_hessian_eig(obj, theta, torch.ones(n))[0]),
        "mean |theta_-i - theta|": float((thetas - theta).norm(dim=1).mean()),
        "linearisation": float((lin - exact).abs().mean()) / scale,
        "TRAK rel. error": d_trak["rel_error"],
        "TRAK Spearman": d_trak["spearman"],
        "TRAK AUC": d_trak["auc_top10"],
        "ALO AUC": diagnostics(alo, exact)["auc_top10"],
        "lin. LOO AUC": diagnostics(lin, exact)["auc_top10"],
    }
    row["rule holds"] = bool(d_trak["rel_error"] > 0.3 and d_trak["auc_top10"] >= 0.9)
    if with_cold:
        flat_init = obj.flat(init.double())
        try:
            cold, th_c, ths_c = cold_loo(obj, flat_init, xt, yt)
        except RuntimeError as exc:
            row["failed"] = f"cold LOO: {exc}"
            return row
        d_cold = diagnostics(trak_full, cold)
        row["|theta_cold - theta|"] = float((th_c - theta).norm())
        # the same solution up to the network's symmetries: the same target margins
        f_warm = target_margins(obj, thetas, xt, yt)
        f_cold = target_margins(obj, ths_c, xt, yt)
        same = ((f_warm - f_cold).abs().amax(1) < 1e-6).double().mean()
        row["cold LOO = warm LOO"] = float(same)
        row["warm vs cold Spearman"] = diagnostics(exact, cold)["spearman"]
        row["TRAK AUC (cold truth)"] = d_cold["auc_top10"]
        row["TRAK Spearman (cold truth)"] = d_cold["spearman"]
    return row


def run_sweep(ctx: RunContext, cfg: dict[str, Any] | None = None) -> ExperimentResult:
    r"""``--sweep``: the separation diagnostics over the ridge :math:`\lambda` and the width h at
    one n/p, against two ground truths: the warm-started Newton LOO (as the default mode) and
    cold retrains from the fixed-seed initialisation (:func:`cold_loo`).

    Each grid point reports whether the default mode's rule holds there (TRAK with k = p and
    ridge :math:`\lambda`: relative error > 0.3 and top-10% AUC >= 0.9 against the warm LOO).
    The sweep maps where the claim holds; it has no verdict of its own (``holds`` is None):
    the experiment's verdict is the default mode's.
    """
    cfg = cfg or sweep_config(ctx.quick, ctx.full)
    ratio, m = cfg["ratio"], cfg["m"]
    metrics: dict[str, Any] = {**{k: v for k, v in cfg.items()}, "targets": m}
    rows: list[dict[str, Any]] = []
    grid = [(h, lam) for h in cfg["hiddens"] for lam in cfg["lams"]]
    for h, lam in progress(grid, desc="mlp-loo sweep"):
        t0 = time.perf_counter()
        row = _sweep_point(ctx.seed, h, lam, ratio, m, bool(cfg.get("cold")))
        row["seconds"] = time.perf_counter() - t0
        rows.append(row)
        save_json(ctx.path("sweep_rows.json"), rows)  # partial results survive a crash
        tag = f"h={h} lambda={lam:g}"
        for key, val in row.items():
            if key not in ("h", "p", "n", "lambda"):
                metrics[f"{tag} {key}"] = val
    ok = [r for r in rows if "TRAK AUC" in r]
    widths = [h for h in cfg["hiddens"] if any(r["h"] == h for r in ok)]

    def series(key: str, label: str) -> dict[str, tuple[list, list]]:
        return {
            label.format(h=h): (
                [r["lambda"] for r in ok if r["h"] == h],
                [r[key] for r in ok if r["h"] == h],
            )
            for h in widths
        }

    plots = []
    if ok:
        line_plot(
            ctx.path("sweep_auc.png"),
            {**series("TRAK AUC", "TRAK, h={h}"), **series("lin. LOO AUC", "lin. LOO, h={h}")},
            title=f"MLP, n/p={ratio:g}: top-10% AUC vs exact LOO",
            xlabel="ridge lambda",
            ylabel="AUC",
            logx=True,
            hlines={"rule: 0.9": 0.9},
        )
        line_plot(
            ctx.path("sweep_linearisation.png"),
            series("linearisation", "h={h}"),
            title=f"MLP, n/p={ratio:g}: mean |lin. LOO - exact| / mean |exact|",
            xlabel="ridge lambda",
            ylabel="relative size",
            logx=True,
        )
        plots = ["sweep_auc.png", "sweep_linearisation.png"]
    table = [{k: (_fmt(v) if isinstance(v, float) else v) for k, v in r.items()} for r in rows]
    cols = list(dict.fromkeys(k for r in table for k in r))
    lines = [
        f"6-h-3 tanh MLP, n/p={ratio:g}, {m} targets; exact LOO by warm-started Newton"
        + (", and by cold fixed-seed retrains (Adam + Newton)" if cfg.get("cold") else "")
        + "; TRAK with k = p and ridge lambda. 'rule holds': rel. error > 0.3 and AUC >= 0.9.",
        "",
        "| " + " | ".join(cols) + " |",
        "|" + "---|" * len(cols),
        *["| " + " | ".join(str(r.get(c, "")) for c in cols) + " |" for r in table],
    ]
    held = [f"(h={r['h']}, lambda={r['lambda']:g})" for r in ok if r["rule holds"]]
    aucs = [r["TRAK AUC"] for r in ok]
    return ExperimentResult(
        title="Small MLP: where TRAK's separation holds, over the ridge and the width",
        claim=(
            "TRAK separates the highly influential training points of a small network from "
            "the rest, if the objective is convex enough (large ridge) or the network wide."
        ),
        summary="\n".join(lines),
        metrics=metrics,
        holds=None,
        plots=plots,
        table=table,
        paper="P07",
        measured=(
            (f"TRAK top-10% AUC {min(aucs):.2f}-{max(aucs):.2f} over the grid; " if aucs else "")
            + "rule holds at "
            + (", ".join(held) if held else "no grid point")
            + (
                f"; {len(rows) - len(ok)} point(s) failed to converge"
                if len(ok) < len(rows)
                else ""
            )
        ),
    )


def main(argv: list[str] | None = None) -> int:
    """Command-line entry: ``python -m trak_theory.experiments.mlp_loo [--quick|--full]
    [--sweep]``; ``--sweep`` runs the ridge x width sweep instead of the n/p regimes."""
    import argparse

    extra = argparse.ArgumentParser(add_help=False)
    extra.add_argument("--sweep", action="store_true")
    opts, rest = extra.parse_known_args(argv)
    fn = run_sweep if opts.sweep else run
    return run_experiment(fn, name="trak-theory.mlp-loo", description=__doc__, argv=rest)


if __name__ == "__main__":
    raise SystemExit(main())
