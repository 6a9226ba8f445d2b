"""Shared machinery of the TSP and CVRP experiments: distil a teacher, measure gaps, read."""

from __future__ import annotations

import time

import torch

from shared_core.experiment import line_plot, progress

from ..evolve import evolve
from ..features import CVRP_NODE_FEATURES, TSP_NODE_FEATURES
from ..interpret import STAGES, describe, resemblance, stage_weights, teacher_agreement_by_stage
from ..portfolio import NEG, Portfolio, collect_states, program_rollout
from ..problems import random_instances
from ..programs import compile_program
from ..proposers import Expr, ExpressionProposer, Term
from ..rollout import greedy, multistart

TSP_SEEDS = {
    "nearest": Expr([Term(-1.0, "id", "d_cur")]),
    "open_end_insertion": Expr([Term(-1.0, "id", "detour")]),
    "farthest": Expr([Term(1.0, "id", "min_to_visited")]),
}
CVRP_SEEDS = {
    "nearest": Expr([Term(-1.0, "id", "d_cur")]),
    "savings": Expr([Term(1.0, "id", "saving")]),
    "big_demand": Expr([Term(1.0, "id", "demand"), Term(-0.2, "id", "d_cur")]),
    # the Clarke-Wright construction as a step rule: follow its routes, nearest first
    "clarke_wright": Expr([Term(1.0, "id", "cw_link"), Term(-1.0, "id", "d_cur")]),
}


def seed_portfolio(kind: str) -> Portfolio:
    seeds = TSP_SEEDS if kind == "tsp" else CVRP_SEEDS
    return Portfolio([compile_program(e.render(), name, expr=e) for name, e in seeds.items()])


def vocabulary(kind: str) -> tuple[str, ...]:
    """Node features the offline search may use (TSP adds the neighbourhood / geometry
    features, CVRP the savings primitives)."""
    return TSP_NODE_FEATURES if kind == "tsp" else CVRP_NODE_FEATURES


def gap(lengths: torch.Tensor, ref: torch.Tensor) -> float:
    """Mean optimality gap in percent."""
    return float(100 * (lengths / ref - 1).mean())


def distil(
    kind: str,
    n: int,
    teacher,
    *,
    train_inst: int,
    train_starts: int,
    val_inst: int,
    iterations: int,
    seed: int,
    candidates: int = 8,
    pursuit: bool = False,
    max_terms: int = 6,
    on_iter=None,
):
    """Collect teacher states, run the EPB loop from the seed portfolio; returns
    ``(portfolio, history, val_bank, seconds)``. ``pursuit`` / ``max_terms`` configure the
    offline proposer (:class:`epb.proposers.ExpressionProposer`)."""
    g = torch.Generator().manual_seed(seed)
    t0 = time.perf_counter()
    train = collect_states(teacher, random_instances(kind, train_inst, n, g), starts=train_starts)
    val = collect_states(teacher, random_instances(kind, val_inst, n, g), starts=train_starts)
    proposer = ExpressionProposer(
        seed=seed,
        candidates=candidates,
        features=vocabulary(kind),
        pursuit=pursuit,
        max_terms=max_terms,
    )
    port, hist = evolve(
        seed_portfolio(kind),
        train,
        val,
        proposer,
        iterations=iterations,
        seed=seed,
        on_iter=on_iter,
    )
    return port, hist, val, time.perf_counter() - t0


def evaluate(
    kind,
    teacher,
    port,
    inst,
    ref,
    classics: dict,
    chunk: int,
    desc: str,
    ls_classics: dict | None = None,
):
    """Gaps (percent) of teacher, portfolio, every single program and the classics.

    With ``ls_classics`` (CVRP; ``{name: inst -> list of routes}``) every solution of the
    teacher, the portfolio (greedy and the best of the multi-start rollouts) and those
    classics is also improved by the same :func:`epb.localsearch.improve`, one call per
    instance, giving the ``"... + LS"`` rows."""
    from ..localsearch import improve_batch, routes_from_actions

    rows = {}
    ls = ls_classics is not None
    bar = progress(total=5 + port.k + len(classics) + (len(ls_classics) if ls else 0), desc=desc)

    def tick(name, val):
        rows[name] = val
        bar.update(1)

    def run(name, fn, bind):
        out = fn(bind, inst, chunk=chunk, return_actions=ls) if ls else fn(bind, inst, chunk=chunk)
        if ls:
            lengths, acts = out
            sols = [routes_from_actions(a) for a in acts]
            rows[f"{name} + LS"] = gap(improve_batch(inst, sols), ref)
            out = lengths
        tick(name, gap(out, ref))

    run("teacher greedy", greedy, teacher.bind)
    run("teacher multi-start", multistart, teacher.bind)
    run("portfolio greedy", greedy, port.bind)
    run("portfolio multi-start", multistart, port.bind)
    singles = {}
    for p in port.programs:  # every program greedy; the best one also multi-start
        step = program_rollout(p)
        singles[p.name] = gap(greedy(lambda i, r, s=step: s, inst), ref)
        bar.update(1)
    best = min(singles, key=singles.get)
    step = program_rollout(port.programs[[p.name for p in port.programs].index(best)])
    rows[f"best single program ({best}) greedy"] = singles[best]
    tick(
        f"best single program ({best}) multi-start",
        gap(multistart(lambda i, r: step, inst, chunk=chunk), ref),
    )
    for name, fn in classics.items():
        tick(name, gap(fn(inst), ref))
    for name, fn in (ls_classics or {}).items():
        tick(f"{name} + LS", gap(improve_batch(inst, fn(inst)), ref))
    bar.close()
    return rows, singles, best


def read_out(port, val):
    """Stage weights, resemblance, per-stage agreement (portfolio and nearest neighbour)."""
    with torch.no_grad():
        q = port.log_probs(val).argmax(-1)
    nn_choice = (-val.feats["d_cur"]).masked_fill(~val.mask, NEG).argmax(-1)
    return {
        "stage_weights": stage_weights(port, val),
        "resemblance": resemblance(port, val),
        "agreement_by_stage_portfolio": teacher_agreement_by_stage(q, val),
        "agreement_by_stage_nearest_neighbour": teacher_agreement_by_stage(nn_choice, val),
        "nn_agreement": float((nn_choice == val.teacher_logp.argmax(-1)).float().mean()),
        "code": describe(port, val),
    }


def plots(ctx, tag: str, hist, reading, port) -> list[str]:
    names = []
    xs = list(range(len(hist.records)))
    f1 = f"fidelity_{tag}.png"
    line_plot(
        ctx.path(f1),
        {
            "top-1 agreement (val)": (xs, [r["val_agreement"] for r in hist.records]),
            "KL(teacher||portfolio) (val)": (xs, [r["val_kl"] for r in hist.records]),
        },
        title=f"{tag}: fidelity over EPB stages",
        xlabel="EPB stage (init, I, II, I, II, ...)",
        ylabel="value",
        hlines={"nearest-neighbour agreement": reading["nn_agreement"]},
    )
    names.append(f1)
    f2 = f"router_{tag}.png"
    sw = reading["stage_weights"]
    line_plot(
        ctx.path(f2),
        {p.name: ([0, 1, 2], [sw[s][k] for s in STAGES]) for k, p in enumerate(port.programs)},
        title=f"{tag}: mean router weight per stage (0 early, 1 middle, 2 late)",
        xlabel="stage",
        ylabel="router weight",
    )
    names.append(f2)
    return names
