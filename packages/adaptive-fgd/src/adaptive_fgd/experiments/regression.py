r"""regression: adaptive FGD vs fixed-size FGD, an MLP with Adam, and kernel ridge, in wall time.

Problem (fixed before any run). Least squares in :math:`L^2(\mu_n)` on a synthetic 2-D
regression task with two scales: :math:`x \sim U[-1,1]^2`,

.. math::
    y = \sin(2\pi x_1)\cos(\pi x_2) + 0.8\,e^{-\|x - c\|^2/(2\cdot 0.08^2)} + \sigma\xi,
    \quad c = (0.3, 0.3),

:math:`\sigma = 10^{-3}`, :math:`\xi\sim N(0,1)`; ``n`` training points (3000; quick 2000), 1000
noiseless test points. :math:`R(f) = \frac1{2n}\sum_i (f(x_i) - y_i)^2` is 1-smooth and
1-PL in :math:`L^2(\mu_n)` (PL-type problem: :math:`\|g\|^2 = 2R` with :math:`R^\star = 0`).

Methods, all from :math:`f_0 = 0`, all timed on their own steps only (test evaluation excluded)
with the process CPU clock at one thread (``torch.set_num_threads(1)``): on an idle core that
is the wall time, and on a shared machine it is not inflated by other processes:

* **adaptive FGD**: :class:`~adaptive_fgd.AdaptiveFGD` with :class:`~adaptive_fgd.KernelCentres`
  (Gaussian, :math:`\ell = 0.15`, cap 1024), :math:`\delta = 0.3`, start size 8, growth 2,
  20% of the sample held out for the check, step :math:`(1-\delta)/(1+\delta)^2 = 0.414`;
  ``on_cap="record"`` so the run continues past the point where the cap cannot meet
  :math:`\delta` (those steps are marked; they carry no guarantee);
* **adaptive FGD, random Fourier features** (same settings, RFF family, cap 1024);
* **fixed FGD** at sizes 64, 128, 256, 512, 1024 (same family, fit, step; size never changes);
* **MLP + Adam**: 2 -> 64 -> 64 -> 1, tanh, full batch, lr 3e-3, same loss, for a wall-time
  budget (10 s of CPU; quick 4 s);
* **kernel ridge** (scikit-learn ``KernelRidge``, same kernel, ``alpha = 1e-4 * n``): one
  closed-form solve, the reference.

FGD methods run 30 steps (quick 25).

Rule (written before the recorded runs; an exploratory run on another seed preceded it, see
the README). Targets: test MSE :math:`\le \tau\,\mathrm{Var}(y_{\rm test})` for
:math:`\tau \in \{10^{-2}, 10^{-3}, 10^{-4}\}`. The claim **holds** iff, for every target and in
the median over seeds, adaptive FGD (kernel centres) reaches it in strictly less wall time
than every fixed-size FGD and the MLP (a method that never reaches it counts as infinitely
slow) **and** the training loss decreases at every step where the held-out condition was met,
**and** the linear rate fitted on those steps (geometric mean of :math:`R_{t+1}/R_t`) is at most
the PL bound :math:`1 - ((1-\delta)/(1+\delta))^2 = 0.710`. Kernel ridge is reported, not
ranked.
"""

from __future__ import annotations

import math
import statistics
import time

import torch

from shared_core.experiment import ExperimentResult, RunContext, line_plot, progress, run_experiment

from ..fgd import AdaptiveFGD
from ..functional import pl_rate
from ..representations import KernelCentres, RandomFourierFeatures

#: Quick-mode wall seconds on a 2-core CPU (helper: 20 s CPU, 63 s wall at load ~15);
#: `nox -s repro` plans its budget with it.
QUICK_SECONDS = 30

DELTA = 0.3
BANDWIDTH = 0.15
CAP = 1024
FIXED_SIZES = (64, 128, 256, 512, 1024)
TARGETS = (1e-2, 1e-3, 1e-4)
NOISE = 1e-3


def target_function(x: torch.Tensor) -> torch.Tensor:
    """The regression function, ``(n, 2) -> (n, 1)``."""
    bump = torch.exp(-((x - 0.3) ** 2).sum(1, keepdim=True) / (2 * 0.08**2))
    return torch.sin(2 * math.pi * x[:, :1]) * torch.cos(math.pi * x[:, 1:]) + 0.8 * bump


def make_data(n: int, n_test: int, seed: int):
    """Training sample (noisy) and test sample (noiseless), float64."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.rand(n, 2, generator=gen, dtype=torch.float64) * 2 - 1
    y = target_function(x) + NOISE * torch.randn(n, 1, generator=gen, dtype=torch.float64)
    xt = torch.rand(n_test, 2, generator=gen, dtype=torch.float64) * 2 - 1
    return x, y, xt, target_function(xt)


def run_fgd(family, x, y, xt, yt, steps: int, seed: int, **kwargs) -> dict:
    """Run FGD step by step; record time, size, errors, loss (test MSE outside the timing)."""
    fgd = AdaptiveFGD(family, delta=DELTA, on_cap="record", seed=seed, **kwargs)
    fgd.fit(x, y, steps=0)
    rows, cpu = [], 0.0
    for _ in range(steps):
        t0 = time.process_time()
        rec = fgd.step()
        cpu += time.process_time() - t0
        mse = float(((fgd.predict(xt) - yt) ** 2).mean())
        rows.append({**vars(rec), "wall_seconds": rec.seconds, "seconds": cpu, "test_mse": mse})
    return {"rows": rows}


def run_mlp(x, y, xt, yt, budget: float, seed: int) -> dict:
    """Full-batch Adam on the same loss for ``budget`` seconds of its own steps."""
    torch.manual_seed(seed)
    net = torch.nn.Sequential(
        torch.nn.Linear(2, 64),
        torch.nn.Tanh(),
        torch.nn.Linear(64, 64),
        torch.nn.Tanh(),
        torch.nn.Linear(64, 1),
    ).double()
    opt = torch.optim.Adam(net.parameters(), lr=3e-3)
    rows, elapsed, it = [], 0.0, 0
    while elapsed < budget:
        t0 = time.process_time()
        for _ in range(25):
            opt.zero_grad()
            loss = 0.5 * ((net(x) - y) ** 2).mean()
            loss.backward()
            opt.step()
        elapsed += time.process_time() - t0
        it += 25
        with torch.no_grad():
            mse = float(((net(xt) - yt) ** 2).mean())
        rows.append({"step": it, "seconds": elapsed, "test_mse": mse, "loss": loss.item()})
    return {"rows": rows}


def run_krr(x, y, xt, yt) -> dict:
    """Closed-form kernel ridge (scikit-learn), same kernel."""
    from sklearn.kernel_ridge import KernelRidge

    t0 = time.process_time()
    krr = KernelRidge(alpha=1e-4 * x.shape[0], kernel="rbf", gamma=1 / (2 * BANDWIDTH**2))
    krr.fit(x.numpy(), y.numpy())
    seconds = time.process_time() - t0
    mse = float(((torch.as_tensor(krr.predict(xt.numpy())) - yt) ** 2).mean())
    return {"seconds": seconds, "test_mse": mse}


def time_to(rows: list[dict], level: float) -> float:
    """First wall time at which the test MSE is at most ``level`` (inf if never)."""
    for r in rows:
        if r["test_mse"] <= level:
            return r["seconds"]
    return math.inf


def fitted_rate(rows: list[dict], initial_loss: float) -> tuple[float, bool, int]:
    """Geometric-mean loss ratio and monotonicity over the steps where the condition was met."""
    prev, logs, mono, used = initial_loss, [], True, 0
    for r in rows:
        if r["met"]:
            mono &= r["loss"] < prev
            logs.append(math.log(r["loss"] / prev))
            used += 1
        prev = r["loss"]
    rate = math.exp(sum(logs) / len(logs)) if logs else math.nan
    return rate, mono, used


def run(ctx: RunContext) -> ExperimentResult:
    torch.set_num_threads(1)
    n = 2000 if ctx.quick else 3000
    steps = 25 if ctx.quick else 30
    budget = 4.0 if ctx.quick else 10.0
    seeds = [ctx.seed] if ctx.quick else [ctx.seed + i for i in range(3)]
    methods = ["adaptive", "adaptive-rff", *[f"fixed-{m}" for m in FIXED_SIZES], "mlp-adam"]
    runs: dict[str, list[dict]] = {k: [] for k in methods}
    krr_runs = []
    jobs = [(s, k) for s in seeds for k in methods]
    bar = progress(jobs, desc="regression")
    data = {}
    for s, k in bar:
        if s not in data:
            data[s] = make_data(n, 1000, s)
            krr_runs.append(run_krr(*data[s]))
        x, y, xt, yt = data[s]
        bar.set_postfix_str(f"seed {s} {k}")
        if k == "adaptive":
            out = run_fgd(
                KernelCentres(2, BANDWIDTH, cap=CAP), x, y, xt, yt, steps, s, start_size=8
            )
        elif k == "adaptive-rff":
            fam = RandomFourierFeatures(2, BANDWIDTH, cap=CAP, seed=s)
            out = run_fgd(fam, x, y, xt, yt, steps, s, start_size=8)
        elif k.startswith("fixed-"):
            m = int(k.split("-")[1])
            out = run_fgd(
                KernelCentres(2, BANDWIDTH, cap=m),
                x,
                y,
                xt,
                yt,
                steps,
                s,
                start_size=m,
                adaptive=False,
            )
        else:
            out = run_mlp(x, y, xt, yt, budget, s)
        out["var_y"] = float(yt.var())
        out["initial_loss"] = float(0.5 * (y**2).mean())
        runs[k].append(out)

    # ---- verdict
    med = statistics.median
    table, times = [], {}
    for k in methods:
        row = {"method": k}
        for tau in TARGETS:
            t = med([time_to(o["rows"], tau * o["var_y"]) for o in runs[k]])
            times[(k, tau)] = t
            row[f"t(tau={tau:g}) [s]"] = t
        row["final test MSE"] = med([o["rows"][-1]["test_mse"] for o in runs[k]])
        row["final size"] = (
            med([o["rows"][-1]["size"] for o in runs[k]])
            if k != "mlp-adam"
            else 64 * 64 + 4 * 64 + 1
        )
        row["total s"] = med([o["rows"][-1]["seconds"] for o in runs[k]])
        table.append(row)
    krr_row = {
        "method": "kernel-ridge (ref.)",
        **{f"t(tau={tau:g}) [s]": med([r["seconds"] for r in krr_runs]) for tau in TARGETS},
        "final test MSE": med([r["test_mse"] for r in krr_runs]),
        "final size": n,
        "total s": med([r["seconds"] for r in krr_runs]),
    }
    table.append(krr_row)
    others = [k for k in methods if k not in ("adaptive", "adaptive-rff")]
    wins = {tau: all(times[("adaptive", tau)] < times[(k, tau)] for k in others) for tau in TARGETS}
    speedup = {
        tau: min(times[(k, tau)] for k in others) / times[("adaptive", tau)] for tau in TARGETS
    }
    rates = [fitted_rate(o["rows"], o["initial_loss"]) for o in runs["adaptive"]]
    bound = pl_rate(1.0, 1.0, DELTA)
    mono = all(r[1] for r in rates)
    rate_ok = all(r[0] <= bound for r in rates)
    holds = all(wins.values()) and mono and rate_ok
    met_frac = med([sum(r["met"] for r in o["rows"]) / len(o["rows"]) for o in runs["adaptive"]])

    # ---- plots (first seed)
    first = {k: runs[k][0]["rows"] for k in methods}
    line_plot(
        ctx.path("mse_vs_time.png"),
        {
            k: ([r["seconds"] for r in rows], [r["test_mse"] for r in rows])
            for k, rows in first.items()
        },
        title=f"test MSE vs CPU time (seed {seeds[0]})",
        xlabel="CPU seconds (own steps, 1 thread)",
        ylabel="test MSE",
        logx=True,
        logy=True,
        hlines={f"tau={tau:g}": tau * runs["adaptive"][0]["var_y"] for tau in TARGETS},
    )
    line_plot(
        ctx.path("mse_vs_size.png"),
        {
            "adaptive (trajectory)": (
                [r["size"] for r in first["adaptive"]],
                [r["test_mse"] for r in first["adaptive"]],
            ),
            "fixed (final)": (
                list(FIXED_SIZES),
                [first[f"fixed-{m}"][-1]["test_mse"] for m in FIXED_SIZES],
            ),
        },
        title="test MSE vs representation size",
        xlabel="representation size",
        ylabel="test MSE",
        logx=True,
        logy=True,
    )
    line_plot(
        ctx.path("relative_error.png"),
        {
            "held-out estimate": (
                [r["step"] for r in first["adaptive"]],
                [r["rel_error"] for r in first["adaptive"]],
            ),
            "whole sample": (
                [r["step"] for r in first["adaptive"]],
                [r["rel_error_full"] for r in first["adaptive"]],
            ),
        },
        title="achieved relative gradient error (adaptive, kernel centres)",
        xlabel="step",
        ylabel="||g_hat - g|| / ||g||",
        hlines={"delta": DELTA},
    )

    def fmt(t):
        return "never" if math.isinf(t) else f"{t:.2f}s"

    measured = (
        "; ".join(
            f"tau={tau:g}: adaptive {fmt(times[('adaptive', tau)])} vs best other "
            f"{fmt(min(times[(k, tau)] for k in others))}"
            for tau in TARGETS
        )
        + f"; rate {med([r[0] for r in rates]):.3f} (bound {bound:.3f}), monotone={mono}"
    )
    summary = (
        f"n={n}, {steps} FGD steps, {len(seeds)} seed(s), delta={DELTA}. Time to test MSE "
        f"<= tau Var(y) (median over seeds): {measured}. Adaptive met the held-out condition "
        f"on {met_frac:.0%} of its "
        f"steps (the rest: cap {CAP} reached at the noise floor, marked unmet). Kernel ridge: "
        f"{krr_row['final test MSE']:.2e} test MSE in {krr_row['total s']:.2f}s."
    )
    return ExperimentResult(
        title="adaptive FGD vs fixed FGD, MLP+Adam and kernel ridge on 2-D regression",
        claim=(
            "Adaptive FGD reaches each target test error in less wall time than every "
            "fixed-size FGD and the MLP, and its loss decreases monotonically at a linear "
            "(PL) rate."
        ),
        summary=summary,
        metrics={
            **{f"time_adaptive_tau_{tau:g}": times[("adaptive", tau)] for tau in TARGETS},
            **{f"speedup_vs_best_other_tau_{tau:g}": speedup[tau] for tau in TARGETS},
            **{f"adaptive_fastest_tau_{tau:g}": wins[tau] for tau in TARGETS},
            "fitted_rate": med([r[0] for r in rates]),
            "pl_bound": bound,
            "monotone": mono,
            "met_fraction": met_frac,
            "krr_test_mse": krr_row["final test MSE"],
        },
        holds=holds,
        plots=["mse_vs_time.png", "mse_vs_size.png", "relative_error.png"],
        table=table,
        paper="P18",
        measured=measured,
    )


def main(argv=None):
    return run_experiment(run, name="adaptive-fgd.regression", description=__doc__, argv=argv)


if __name__ == "__main__":
    raise SystemExit(main())
