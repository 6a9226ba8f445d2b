r"""digits: a multiclass classification head in function space, adaptive FGD vs fixed, MLP, kernels.

Task (fixed before any run). scikit-learn's bundled ``load_digits`` (1797 8x8 images, 10
classes, no download), pixels scaled to [0, 1] (divided by 16), a random split of 1347
training and 450 test images per seed (``torch.randperm`` with the run's seed). The head is a
function :math:`f: [0,1]^{64} \to R^{10}` (the logits), trained on the softmax cross-entropy
:math:`R(f) = \frac1n\sum_i -\log\mathrm{softmax}(f(x_i))_{y_i}` in :math:`L^2(\mu_n)`; its
functional gradient at the sample is :math:`\mathrm{softmax}(f(x_i)) - e_{y_i}`
(:mod:`adaptive_fgd.losses`, tested against finite differences), :math:`R` is
:math:`\tfrac12`-smooth, so the step is :math:`(1-\delta)/(\tfrac12(1+\delta)^2)`.

Methods, all from :math:`f = 0`, CPU time of their own steps at one thread (test evaluation
excluded):

* **adaptive FGD**: :class:`~adaptive_fgd.AdaptiveFGD`, ``loss="softmax"``,
  :class:`~adaptive_fgd.KernelCentres` with the bandwidth of scikit-learn's ``gamma="scale"``
  rule (:math:`\gamma = 1/(64\,\mathrm{Var}(x))` on the training pixels,
  :math:`\ell = (2\gamma)^{-1/2}`), cap 1024, :math:`\delta = 0.3`, start size 8, 30 steps,
  ``on_cap="record"``;
* **fixed FGD** at 64, 256 and 1024 centres (same family, fit and step);
* **MLP + Adam**: 64 -> 128 -> 10, tanh, full batch, lr 3e-3, same loss, for 10 s of CPU (quick
  4 s);
* kernel references (one solve each, reported, not ranked): kernel ridge on one-hot targets
  (``KernelRidge``, same kernel, ``alpha = 1e-3``) and multinomial ``LogisticRegression``
  (lbfgs, ``C = 10``) on a 512-column ``Nystroem`` map of the same kernel.

Quick and default differ in the seeds (1 and 3) and the MLP budget.

Rule (written before the recorded runs; one pilot on seed 11 preceded it and measured the
training loss, the held-out relative error and the test accuracy of adaptive and fixed FGD at
:math:`\delta \in \{0.3, 0.5\}`: every method was above 97 % test accuracy within a few steps
and the held-out condition held on the first step only at :math:`\delta = 0.3`). In the median
over seeds, the claim **holds** iff (a) adaptive FGD reaches 97 % test accuracy in strictly less
CPU time than every fixed-size FGD and the MLP (never = infinitely slow), (b) its final test
accuracy is at least every fixed size's final test accuracy minus 0.5 points and at least the
MLP's test accuracy at the same CPU time (the MLP's last evaluation at or before adaptive FGD's
total), and (c) its training loss decreased at every step where the held-out condition was met.
"""

from __future__ import annotations

import math
import statistics
import time

import torch

from shared_core.experiment import ExperimentResult, RunContext, line_plot, progress, run_experiment

from ..fgd import AdaptiveFGD
from ..losses import loss_value
from ..representations import KernelCentres

#: Quick-mode wall seconds on a 2-core CPU (measured: 33 s wall, 23 s of CPU, at load ~1-2).
QUICK_SECONDS = 35

DELTA = 0.3
STEPS = 30
CAP = 1024
FIXED_SIZES = (64, 256, 1024)
TARGET_ACC = 0.97
N_TRAIN = 1347
CLASSES = 10


def load_split(seed: int):
    """``(x_train, labels_train, x_test, labels_test)``: pixels in [0, 1], float64; int labels."""
    from sklearn.datasets import load_digits

    x, t = load_digits(return_X_y=True)
    x = torch.as_tensor(x, dtype=torch.float64) / 16
    t = torch.as_tensor(t, dtype=torch.long)
    perm = torch.randperm(x.shape[0], generator=torch.Generator().manual_seed(seed))
    tr, te = perm[:N_TRAIN], perm[N_TRAIN:]
    return x[tr], t[tr], x[te], t[te]


def scale_bandwidth(x: torch.Tensor) -> float:
    r"""Gaussian length scale of scikit-learn's ``gamma="scale"``: :math:`(2\gamma)^{-1/2}`,
    :math:`\gamma = 1/(d\,\mathrm{Var}(x))` (variance over all entries)."""
    gamma = 1.0 / (x.shape[1] * float(x.var(unbiased=False)))
    return math.sqrt(1.0 / (2.0 * gamma))


def accuracy(logits: torch.Tensor, labels: torch.Tensor) -> float:
    """Fraction of rows whose largest logit is the label."""
    return float((logits.argmax(1) == labels).double().mean())


def cross_entropy(logits: torch.Tensor, labels: torch.Tensor) -> float:
    """Mean :math:`-\\log\\mathrm{softmax}(f)_y` (by :func:`adaptive_fgd.losses.loss_value`)."""
    onehot = torch.nn.functional.one_hot(labels, logits.shape[1]).to(logits.dtype)
    return float(loss_value("softmax", logits, onehot).sum(1).mean())


def run_fgd(x, t, xt, tt, *, adaptive: bool, size: int, bw: float, seed: int) -> list[dict]:
    fam = KernelCentres(x.shape[1], bw, cap=CAP if adaptive else size)
    y = torch.nn.functional.one_hot(t, CLASSES).double()
    fgd = AdaptiveFGD(
        fam,
        loss="softmax",
        delta=DELTA,
        start_size=size,
        adaptive=adaptive,
        on_cap="record",
        seed=seed,
    ).fit(x, y, steps=0)
    rows, cpu = [], 0.0
    for _ in range(STEPS):
        t0 = time.process_time()
        rec = fgd.step()
        cpu += time.process_time() - t0
        logits = fgd.predict(xt)
        rows.append(
            {
                "seconds": cpu,
                "acc": accuracy(logits, tt),
                "nll": cross_entropy(logits, tt),
                "loss": rec.loss,
                "rel_error": rec.rel_error,
                "size": rec.size,
                "met": rec.met,
            }
        )
    return rows


def run_mlp(x, t, xt, tt, *, budget: float, seed: int) -> list[dict]:
    torch.manual_seed(seed)
    net = torch.nn.Sequential(
        torch.nn.Linear(x.shape[1], 128), torch.nn.Tanh(), torch.nn.Linear(128, CLASSES)
    ).double()
    opt = torch.optim.Adam(net.parameters(), lr=3e-3)
    rows, cpu, it = [], 0.0, 0
    while cpu < budget:
        t0 = time.process_time()
        for _ in range(10):
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(net(x), t)
            loss.backward()
            opt.step()
        cpu += time.process_time() - t0
        it += 10
        with torch.no_grad():
            logits = net(xt)
        rows.append(
            {
                "seconds": cpu,
                "acc": accuracy(logits, tt),
                "nll": cross_entropy(logits, tt),
                "loss": loss.item(),
                "step": it,
            }
        )
    return rows


def run_kernels(x, t, xt, tt, *, bw: float, seed: int) -> dict[str, dict]:
    """The two kernel references (one solve each): accuracy, cross-entropy where defined, CPU s."""
    from sklearn.kernel_approximation import Nystroem
    from sklearn.kernel_ridge import KernelRidge
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline

    gamma = 1.0 / (2.0 * bw**2)
    out = {}
    t0 = time.process_time()
    krr = KernelRidge(alpha=1e-3, kernel="rbf", gamma=gamma)
    krr.fit(x.numpy(), torch.nn.functional.one_hot(t, CLASSES).double().numpy())
    sec = time.process_time() - t0
    out["kernel ridge (one-hot)"] = {
        "acc": accuracy(torch.as_tensor(krr.predict(xt.numpy())), tt),
        "nll": math.nan,
        "seconds": sec,
    }
    t0 = time.process_time()
    clf = make_pipeline(
        Nystroem(gamma=gamma, n_components=512, random_state=seed),
        LogisticRegression(C=10.0, max_iter=500),
    )
    clf.fit(x.numpy(), t.numpy())
    sec = time.process_time() - t0
    logp = torch.as_tensor(clf.predict_log_proba(xt.numpy()))
    out["logistic regression (Nystroem 512)"] = {
        "acc": accuracy(logp, tt),
        "nll": cross_entropy(logp, tt),
        "seconds": sec,
    }
    return out


def time_to_acc(rows: list[dict], level: float) -> float:
    """First CPU time at which the test accuracy is at least ``level`` (inf if never)."""
    return next((r["seconds"] for r in rows if r["acc"] >= level), math.inf)


def at_time(rows: list[dict], seconds: float, key: str) -> float:
    """``key`` of the last row at or before ``seconds`` (-inf if none)."""
    vals = [r[key] for r in rows if r["seconds"] <= seconds]
    return vals[-1] if vals else -math.inf


def monotone_on_met(rows: list[dict], initial: float) -> bool:
    """The training loss decreased at every step whose held-out condition was met."""
    prev, ok = initial, True
    for r in rows:
        if r["met"]:
            ok &= r["loss"] < prev
        prev = r["loss"]
    return ok


def run(ctx: RunContext) -> ExperimentResult:
    torch.set_num_threads(1)
    seeds = [ctx.seed] if ctx.quick else [ctx.seed + i for i in range(3)]
    budget = 4.0 if ctx.quick else 10.0
    methods = ["adaptive", *[f"fixed-{m}" for m in FIXED_SIZES], "mlp-adam"]
    runs: dict[str, list[list[dict]]] = {k: [] for k in methods}
    kernel_runs: list[dict[str, dict]] = []
    for s in progress(seeds, desc="digits"):
        x, t, xt, tt = load_split(s)
        bw = scale_bandwidth(x)
        for k in methods:
            if k == "mlp-adam":
                runs[k].append(run_mlp(x, t, xt, tt, budget=budget, seed=s))
            else:
                adaptive = k == "adaptive"
                size = 8 if adaptive else int(k.split("-")[1])
                runs[k].append(run_fgd(x, t, xt, tt, adaptive=adaptive, size=size, bw=bw, seed=s))
        kernel_runs.append(run_kernels(x, t, xt, tt, bw=bw, seed=s))

    med = statistics.median
    t_target = {k: med([time_to_acc(r, TARGET_ACC) for r in runs[k]]) for k in methods}
    final_acc = {k: med([r[-1]["acc"] for r in runs[k]]) for k in methods}
    t_ad = [r[-1]["seconds"] for r in runs["adaptive"]]
    mlp_same = med([at_time(m, ta, "acc") for m, ta in zip(runs["mlp-adam"], t_ad, strict=True)])
    others = [k for k in methods if k != "adaptive"]
    fixed = [k for k in methods if k.startswith("fixed")]
    a_ok = all(t_target["adaptive"] < t_target[k] for k in others)
    b_ok = all(final_acc["adaptive"] >= final_acc[k] - 0.005 for k in fixed) and (
        final_acc["adaptive"] >= mlp_same
    )
    c_ok = all(monotone_on_met(r, math.log(CLASSES)) for r in runs["adaptive"])
    holds = a_ok and b_ok and c_ok

    table = []
    for k in methods:
        table.append(
            {
                "method": k,
                "t(acc >= 97%) [s]": t_target[k],
                "final test acc": final_acc[k],
                "final test NLL": med([r[-1]["nll"] for r in runs[k]]),
                "CPU s": med([r[-1]["seconds"] for r in runs[k]]),
                "final size": med([r[-1]["size"] for r in runs[k]])
                if k != "mlp-adam"
                else 64 * 128 + 128 + 128 * CLASSES + CLASSES,
            }
        )
    for name in kernel_runs[0]:
        table.append(
            {
                "method": name + " (ref.)",
                "t(acc >= 97%) [s]": med([kr[name]["seconds"] for kr in kernel_runs]),
                "final test acc": med([kr[name]["acc"] for kr in kernel_runs]),
                "final test NLL": med([kr[name]["nll"] for kr in kernel_runs]),
                "CPU s": med([kr[name]["seconds"] for kr in kernel_runs]),
                "final size": N_TRAIN if "ridge" in name else 512,
            }
        )
    first = {k: runs[k][0] for k in methods}
    line_plot(
        ctx.path("accuracy_vs_time.png"),
        {k: ([r["seconds"] for r in rows], [r["acc"] for r in rows]) for k, rows in first.items()},
        title=f"digits: test accuracy vs CPU time (seed {seeds[0]})",
        xlabel="CPU seconds (own steps, 1 thread)",
        ylabel="test accuracy",
        logx=True,
        hlines={"target 97%": TARGET_ACC},
    )
    ad = first["adaptive"]
    line_plot(
        ctx.path("relative_error.png"),
        {"held-out estimate": (list(range(len(ad))), [r["rel_error"] for r in ad])},
        title="digits: achieved relative gradient error (adaptive FGD)",
        xlabel="step",
        ylabel="||g_hat - g|| / ||g||",
        hlines={"delta": DELTA},
    )
    met = med([sum(r["met"] for r in rows) for rows in runs["adaptive"]])

    def fmt(v):
        return "never" if math.isinf(v) else f"{v:.3f}s"

    measured = (
        f"time to 97%: adaptive {fmt(t_target['adaptive'])} vs best other "
        f"{fmt(min(t_target[k] for k in others))}; final acc adaptive "
        f"{final_acc['adaptive']:.4f}, best fixed {max(final_acc[k] for k in fixed):.4f}, MLP at "
        f"the same time {mlp_same:.4f} (after {budget:g}s: {final_acc['mlp-adam']:.4f})"
    )
    return ExperimentResult(
        title="digits classification head: adaptive FGD vs fixed FGD, an MLP and kernel solvers",
        claim=(
            "Adaptive FGD trains a classification head in function space to a given accuracy "
            "faster than fixed representations and a neural network, at no loss of accuracy."
        ),
        summary=(
            f"load_digits, {N_TRAIN} train / {1797 - N_TRAIN} test, {len(seeds)} seed(s), "
            f"softmax cross-entropy, delta={DELTA}, {STEPS} FGD steps. {measured}. The held-out "
            f"condition held on {met:g}/{STEPS} steps (median; the rest recorded as unmet). "
            f"Verdict parts: (a) fastest to 97% {a_ok}, (b) accuracy {b_ok}, (c) monotone {c_ok}."
        ),
        metrics={
            "adaptive_time_to_97": t_target["adaptive"],
            "best_other_time_to_97": min(t_target[k] for k in others),
            "adaptive_final_acc": final_acc["adaptive"],
            "best_fixed_final_acc": max(final_acc[k] for k in fixed),
            "mlp_acc_same_time": mlp_same,
            "mlp_final_acc": final_acc["mlp-adam"],
            "met_steps": met,
            "fastest": a_ok,
            "accuracy_ok": b_ok,
            "monotone": c_ok,
        },
        holds=holds,
        plots=["accuracy_vs_time.png", "relative_error.png"],
        table=table,
        paper="P18",
        measured=measured,
    )


def main(argv=None):
    return run_experiment(run, name="adaptive-fgd.digits", description=__doc__, argv=argv)


if __name__ == "__main__":
    raise SystemExit(main())
