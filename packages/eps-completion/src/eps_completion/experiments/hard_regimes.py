r"""hard-regimes: success rates near the information limit and on coherent matrices.

Setting. Square :math:`n\times n` rank-r matrices; the number of observed entries is set by
the oversampling ratio :math:`\rho = |\Omega| / (r(2n - r))` (:math:`\rho = 1` is the number
of degrees of freedom: below it recovery is impossible), entries observed independently with
:math:`p = \rho\, r(2n-r)/n^2` (lines conditioned non-empty). Points: incoherent matrices at
several ρ, and **coherent** matrices (rows/columns scaled by log-normal weights, σ = 1.5,
:func:`eps_completion.problem.low_rank_matrix`) at a moderate ρ. Each point has
``N_INST`` ≥ 20 instances; every method sees the same instances and uses the true rank.

Methods (all from random starts; none uses a spectral start):

* ``eps`` (the package's pipeline): Burer–Monteiro GD on the ε-surrogate, ε = ``EPS`` = 0.1,
  k = r, small random start, then ``polish`` (the same GD on the plain loss from there);
* ``eps-k2r`` (``--full`` size only): the same with over-parameterised factors, k = 2r;
* ``bm``: Burer–Monteiro GD on the plain loss, k = r, the same small random start;
* ``als``: alternating least squares, random start; ``svp``: singular value projection;
* ``nuclear``: nuclear-norm minimisation (cvxpy, SCS), a convex reference.

Success: relative error :math:`\|\hat X - M^\star\|_F/\|M^\star\|_F \le` ``TOL`` = 1e-3.

Rule, fixed before the run. The abstract claims recovery "without explicit requirements on
sampling rate or incoherence" and that the perturbation makes the landscape more benign.
**holds** iff at every point the ``eps`` pipeline's success rate is at least that of plain
``bm`` and of ``als`` minus ``SLACK`` = 0.1 (never clearly worse), **and** at some point it
beats the better of the two by at least ``MARGIN`` = 0.2 (it does rescue a regime where
plain factored methods fail). Reported: every method's success rate at every point.

Sizes (``SIZES``). ``--quick``: n = 20, r = 2, ρ = 1.5 incoherent and ρ = 3 coherent,
20 instances, iterations capped at 400 per solve. Default: n = 30, r = 2, ρ = 1.7
incoherent and ρ = 3 coherent, 20 instances, 1000 iterations, without ``eps-k2r`` (the
``overparam`` experiment covers k > r); chosen so that it finishes in about 20 minutes of
wall clock on the shared, loaded 2-core box (~3 s CPU per instance, the cvxpy solve the
largest part). ``--full`` (the size
first planned as the default): n = 30, r = 2, ρ ∈ {1.3, 1.7, 2.2, 3} incoherent, coherent
at ρ ∈ {3, 4}, 30 instances, 3000 iterations, with ``eps-k2r``: with the fused BM loop
(:mod:`eps_completion.fused_bm`) ~2 s CPU per instance, measured 585 s wall for the whole
run at load ~5.5 (it fits the 25-minute cap, so it was run; README). The rule is the same
at every size.
"""

from __future__ import annotations

import time

import torch

from shared_core.experiment import ExperimentResult, RunContext, line_plot, progress, run_experiment

from ..baselines import als, nuclear_norm_completion, svp
from ..problem import low_rank_matrix, observe, random_mask
from ..solvers import bm_gd

EPS = 0.1
TOL = 1e-3
SLACK = 0.1
MARGIN = 0.2


def _rel(x: torch.Tensor, m: torch.Tensor) -> float:
    return float((x - m).norm() / m.norm())


def _eps_pipeline(obs, k, max_iter, gen):
    first = bm_gd(obs, k, EPS, max_iter=max_iter, generator=gen)
    return bm_gd(obs, k, None, init=(first.L, first.R), max_iter=max_iter).matrix()


#: mode -> (n, r, instances per point, iterations per solve, [(ρ, coherent)], with eps-k2r).
SIZES = {
    "quick": (20, 2, 20, 400, [(1.5, False), (3.0, True)], False),
    "default": (30, 2, 20, 1000, [(1.7, False), (3.0, True)], False),
    "full": (
        30,
        2,
        30,
        3000,
        [(1.3, False), (1.7, False), (2.2, False), (3.0, False), (3.0, True), (4.0, True)],
        True,
    ),
}


def verdict(rates: dict[str, list[float]]) -> tuple[bool, bool, float]:
    """The rule on per-point success rates: (holds, never worse, largest gain over bm/als)."""
    triples = list(zip(rates["eps"], rates["bm"], rates["als"], strict=True))
    never_worse = all(e >= max(b, a) - SLACK for e, b, a in triples)
    gain = max(e - max(b, a) for e, b, a in triples)
    return never_worse and gain >= MARGIN, never_worse, gain


def run(ctx: RunContext) -> ExperimentResult:
    t0 = time.perf_counter()
    mode = "quick" if ctx.quick else "full" if ctx.full else "default"
    n, r, n_inst, max_iter, points, with_k2r = SIZES[mode]
    dof = r * (2 * n - r)
    methods = {
        "eps": lambda obs, g: _eps_pipeline(obs, r, max_iter, g),
        "bm": lambda obs, g: bm_gd(obs, r, None, max_iter=max_iter, generator=g).matrix(),
        "als": lambda obs, g: als(obs, r, max_iter=max_iter, generator=g).matrix(),
        "svp": lambda obs, g: svp(obs, r, max_iter=max_iter).matrix(),
        "nuclear": lambda obs, g: nuclear_norm_completion(obs, solver="SCS"),
    }
    if with_k2r:
        methods["eps-k2r"] = lambda obs, g: _eps_pipeline(obs, 2 * r, max_iter, g)
    gen = torch.Generator().manual_seed(ctx.seed)
    table = []
    rates: dict[str, list[float]] = {name: [] for name in methods}
    bar = progress(total=len(points) * n_inst, desc="hard-regimes")
    for rho, coherent in points:
        p = min(1.0, rho * dof / n**2)
        wins = dict.fromkeys(methods, 0)
        for _ in range(n_inst):
            mat = low_rank_matrix(n, n, r, gen, coherent=coherent)
            obs = observe(mat, random_mask((n, n), p, gen))
            seed = int(torch.randint(0, 2**31 - 1, (1,), generator=gen))
            for name, fn in methods.items():
                g = torch.Generator().manual_seed(seed)  # same start for every factored method
                wins[name] += _rel(fn(obs, g), mat) <= TOL
            bar.update(1)
        row = {"rho": rho, "p": round(p, 4), "coherent": coherent}
        for name in methods:
            rates[name].append(wins[name] / n_inst)
            row[name] = wins[name] / n_inst
        table.append(row)
    bar.close()
    holds, never_worse, gain = verdict(rates)
    labels = [f"rho={row['rho']}{' coh' if row['coherent'] else ''}" for row in table]
    xs = list(range(len(points)))
    line_plot(
        ctx.path("hard_regimes.png"),
        {name: (xs, rates[name]) for name in methods},
        title="success rate (rel. error <= 1e-3); x: " + ", ".join(labels),
        xlabel="point index",
        ylabel="success rate",
    )

    def fmt(name):
        return "/".join(f"{v:.2f}" for v in rates[name])

    measured = (
        f"success eps {fmt('eps')}, bm {fmt('bm')}, als {fmt('als')}, "
        f"nuclear {fmt('nuclear')} at {', '.join(labels)}"
    )
    summary = (
        f"{n_inst} instances per point, n = {n}, r = {r}, success = rel. error <= {TOL}. "
        f"Success rates per point ({', '.join(labels)}): "
        + "; ".join(f"{name} {fmt(name)}" for name in methods)
        + f". eps never worse than max(bm, als) - {SLACK}: {never_worse}; largest gain over "
        f"max(bm, als): {gain:+.2f} (rule: >= {MARGIN})."
    )
    return ExperimentResult(
        title="Success rates in hard regimes: eps-surrogate vs plain factored methods",
        claim=(
            "Perturbing the nullspace of the mask gives a more benign landscape: recovery "
            "without explicit sampling-rate or incoherence requirements, where plain "
            "non-convex pipelines are brittle."
        ),
        summary=summary,
        metrics={
            "never_worse": never_worse,
            "max_gain_over_bm_als": gain,
            "seconds": time.perf_counter() - t0,
            **{f"success[{name}]": rates[name] for name in methods},
        },
        holds=holds,
        plots=["hard_regimes.png"],
        table=table,
        paper="P05",
        measured=measured,
    )


def main(argv=None):
    return run_experiment(run, name="eps-completion.hard-regimes", description=__doc__, argv=argv)


if __name__ == "__main__":
    raise SystemExit(main())
