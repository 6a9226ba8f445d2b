r"""real: completion of a real image matrix (scikit-learn's bundled digits), test RMSE.

Data. ``sklearn.datasets.load_digits``: 1797 hand-written digits, 8 x 8 grey levels 0-16,
shipped inside scikit-learn (no download). Each image is one row, so the matrix is
images x 64 pixels, scaled to [0, 1]. It is not exactly low rank (its top 6 singular values
hold most, not all, of the energy), so every method fits noise as well as signal: this is
the noisy, real case the synthetic experiments do not cover. Needs
``pip install "eps-completion[data]"`` (scikit-learn).

Protocol. Each mask observes every entry independently with probability ``p`` (every row
and column holding at least ``RANK`` entries); the **test set is every unobserved entry**,
never seen by any method. Every method completes the matrix **centred by each pixel's
observed mean** (the mean is added back), so a zero prediction is the column-mean baseline.
Test RMSE = root mean square of :math:`\hat X_{ij} - M_{ij}` over the test set, in [0, 1]
grey-level units. Every method uses rank ``RANK`` = 4 and its package defaults (no
per-method tuning; the same random start seed for the factored ones):

* ``eps``: Burer–Monteiro GD on the ε-surrogate, ε = ``EPS`` = 0.1, k = ``RANK``, small
  random start, ``max_iter`` iterations (the surrogate's solution, not polished: on noisy
  data polishing is plain BM);
* ``bm``: the same GD on the plain completion loss; ``als``: alternating least squares
  (annealed ridge), random start; ``soft-impute``: λ path down to 1e-4 σ_1, SVDs capped at
  rank ``RANK``; ``svp``: singular value projection;
* ``column-mean``: each pixel's observed mean (rank 0), a floor every method should beat.

History: a pilot run (300 images, p = 0.3, rank 6, no centring) had every method, eps
included, worse than ``column-mean`` (they fit noise: about 19 entries per row for 6
unknowns); the protocol above (centring, rank 4, p ≥ 0.3) and this rule were then fixed
before the recorded runs.

Rule (fixed before the run). The claim tested is that the surrogate's solutions are as good
as those of plain completion pipelines on real data. **holds** iff the median (over masks)
test RMSE of ``eps`` is at most ``1 + SLACK`` (SLACK = 0.05) times the best median among
``bm``, ``als``, ``soft-impute`` and ``svp``, at every sampling rate, and below
``column-mean``'s at every rate.

Sizes (``SIZES``). ``--quick``: 300 random images, p = 0.5, 3 masks, 600 iterations per
factored solve (BM) and 200 sweeps (ALS, SVP). Default: 400 random images, p ∈ {0.3, 0.5},
3 masks, 800 iterations / 250 sweeps, chosen to finish in about 20 minutes of wall clock
on the shared, loaded 2-core box. ``--full`` (the size first planned as the default): all
1797 images, p ∈ {0.3, 0.5}, 5 masks, 3000 iterations / 500 sweeps: with the fused BM loop
(:mod:`eps_completion.fused_bm`) it ran in 161 s wall at load ~5 (README). The rule is the
same at every size.
"""

from __future__ import annotations

import statistics
import time

import torch

from shared_core.experiment import ExperimentResult, RunContext, line_plot, progress, run_experiment

from ..baselines import als, soft_impute, svp
from ..problem import Observations, observe, random_mask
from ..solvers import bm_gd

#: Quick-mode wall seconds on a 2-core CPU (helper: measured at load average ~10).
QUICK_SECONDS = 45

RANK = 4
EPS = 0.1
SLACK = 0.05
BASELINES = ("bm", "als", "soft-impute", "svp")
#: mode -> (images, sampling rates, masks, BM iterations, ALS/SVP sweeps); tests shrink it.
SIZES = {
    "quick": (300, (0.5,), 3, 600, 200),
    "default": (400, (0.3, 0.5), 3, 800, 250),
    "full": (None, (0.3, 0.5), 5, 3000, 500),
}


def load_digits_matrix() -> torch.Tensor:
    """The digits images as a float64 (images x 64) matrix in [0, 1]; needs scikit-learn."""
    try:
        from sklearn.datasets import load_digits
    except ImportError as err:
        raise ImportError(
            "the `real` experiment needs scikit-learn's bundled digits data: "
            'pip install "eps-completion[data]"'
        ) from err
    return torch.as_tensor(load_digits().data, dtype=torch.float64) / 16.0


def _column_mean(obs: Observations) -> torch.Tensor:
    """Each column's mean over its observed entries (a length-n vector)."""
    n = obs.shape[1]
    sums = torch.zeros(n, dtype=obs.values.dtype).index_add_(0, obs.cols, obs.values)
    return sums / torch.bincount(obs.cols, minlength=n).to(obs.values.dtype)


def _methods(max_iter: int, sweeps: int) -> dict:
    return {
        "eps": lambda o, g: bm_gd(o, RANK, EPS, max_iter=max_iter, generator=g).matrix(),
        "bm": lambda o, g: bm_gd(o, RANK, None, max_iter=max_iter, generator=g).matrix(),
        "als": lambda o, g: als(o, RANK, max_iter=sweeps, generator=g).matrix(),
        "soft-impute": lambda o, g: soft_impute(o, max_rank=RANK).matrix(),
        "svp": lambda o, g: svp(o, RANK, max_iter=sweeps).matrix(),
        "column-mean": lambda o, g: torch.zeros(o.shape, dtype=o.values.dtype),
    }


def test_rmse(
    mat: torch.Tensor, p: float, n_masks: int, max_iter: int, sweeps: int, gen: torch.Generator
) -> dict[str, list[float]]:
    """Each method's test RMSE (over the unobserved entries) on ``n_masks`` random masks."""
    methods = _methods(max_iter, sweeps)
    out: dict[str, list[float]] = {name: [] for name in methods}
    for _ in range(n_masks):
        mask = random_mask(tuple(mat.shape), p, gen, min_per_line=RANK)
        mu = _column_mean(observe(mat, mask))
        obs = observe(mat - mu, mask)  # centred: methods complete the residual
        seed = int(torch.randint(0, 2**31 - 1, (1,), generator=gen))
        for name, fn in methods.items():
            x = fn(obs, torch.Generator().manual_seed(seed)) + mu
            out[name].append(float((x - mat)[~mask].pow(2).mean().sqrt()))
    return out


def verdict(medians: list[dict[str, float]]) -> tuple[bool, list[float]]:
    """The rule: per rate, eps / best baseline <= 1 + SLACK and eps < column-mean."""
    ratios = [row["eps"] / min(row[b] for b in BASELINES) for row in medians]
    ok = all(
        q <= 1 + SLACK and row["eps"] < row["column-mean"]
        for q, row in zip(ratios, medians, strict=True)
    )
    return ok, ratios


def run(ctx: RunContext) -> ExperimentResult:
    t0 = time.perf_counter()
    data = load_digits_matrix()  # fail fast, before any work, if scikit-learn is missing
    n_img, rates, n_masks, max_iter, sweeps = SIZES[
        "quick" if ctx.quick else "full" if ctx.full else "default"
    ]
    gen = torch.Generator().manual_seed(ctx.seed)
    if n_img is not None and n_img < data.shape[0]:
        data = data[torch.randperm(data.shape[0], generator=gen)[:n_img]]
    medians: list[dict[str, float]] = []
    table = []
    bar = progress(total=len(rates), desc="real")
    for p in rates:
        rmse = test_rmse(data, p, n_masks, max_iter, sweeps, gen)
        med = {name: statistics.median(v) for name, v in rmse.items()}
        medians.append(med)
        table.append({"p": p, **{f"{k} RMSE (median)": round(v, 5) for k, v in med.items()}})
        bar.update(1)
    bar.close()
    holds, ratios = verdict(medians)
    names = list(medians[0])
    line_plot(
        ctx.path("real.png"),
        {name: (list(rates), [m[name] for m in medians]) for name in names},
        title=f"digits ({data.shape[0]} x {data.shape[1]}): test RMSE, rank {RANK}",
        xlabel="sampling rate p",
        ylabel="median test RMSE ([0, 1] grey levels)",
    )
    per_rate = "; ".join(
        f"p = {p}: " + ", ".join(f"{k} {v:.4f}" for k, v in m.items())
        for p, m in zip(rates, medians, strict=True)
    )
    ratio_txt = ", ".join(f"{q:.3f}" for q in ratios)
    summary = (
        f"Digits matrix {data.shape[0]} x {data.shape[1]} in [0, 1], rank {RANK}, {n_masks} "
        f"random masks per rate, test set = every unobserved entry; BM {max_iter} iterations, "
        f"ALS/SVP {sweeps} sweeps. Median test RMSE: {per_rate}. eps / best of "
        f"{', '.join(BASELINES)}: {ratio_txt} (rule <= {1 + SLACK})."
    )
    return ExperimentResult(
        title="Real matrix (digits images): test RMSE of the eps-surrogate vs baselines",
        claim=(
            "Solutions of the eps-perturbed surrogate are as accurate as plain completion "
            "pipelines on real incomplete data."
        ),
        summary=summary,
        metrics={
            "rates": list(rates),
            "eps_over_best_baseline": ratios,
            **{f"median_rmse[{k}]": [m[k] for m in medians] for k in names},
            "seconds": time.perf_counter() - t0,
        },
        holds=holds,
        plots=["real.png"],
        table=table,
        paper="P05",
        measured=f"eps / best baseline test RMSE {ratio_txt} at p = {list(rates)}",
    )


def main(argv=None):
    return run_experiment(run, name="eps-completion.real", description=__doc__, argv=argv)


if __name__ == "__main__":
    raise SystemExit(main())
