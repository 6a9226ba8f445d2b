r"""finetune: fine-tuning a pretrained MLP on a narrow few-shot downstream task.

Where adaptivity is expected to pay (issue 33): layers whose gradients are low-rank. A
network pretrained on one task and fine-tuned on a narrow one with few examples sees
output-gradient rows confined to the few downstream classes, so each hidden layer's gradient
(and momentum) has a handful of significant singular values over a tail of sampling noise; an
orthogonalised step (a = 0) gives every direction of that tail full size and so rewrites the
pretrained features, a step nearer the gradient (a > 0) does not.

Data: scikit-learn's bundled 8x8 digits (offline), pixels scaled to [0, 1]. Per seed a seeded
permutation. **Pretraining** (the same for every optimizer of a seed): ``64 -> h -> h -> 5``
(ReLU) on all train images of the digits 0-4, AdamW (lr 3e-3, betas (0.9, 0.999)),
``pre_steps`` steps of batch 64. **Downstream**: the digits 5-9 with ``shots`` training images
per class; the pretrained body is kept and a fresh head ``h -> 5`` (seeded) replaces the old
one; validation: 30 images per class, test: all the remaining images of 5-9. Every optimizer
fine-tunes the whole network (the head on AdamW under Muon and AdaptiveLMO, the suite's
routing convention; everything on AdamW for AdamW) for ``steps`` steps, cross-entropy.

Protocol and the rule: :mod:`adaptive_lmo.experiments._pays` (fixed before the first run):
``holds`` means adaptivity pays, i.e. AdaptiveLMO's test cross-entropy is below torch Muon's
and below AdamW's, each by a paired per-seed 95% interval entirely below 0. Needs
scikit-learn (the ``data`` extra).
"""

from __future__ import annotations

import copy
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from shared_core.experiment import ExperimentResult, RunContext, run_experiment

from ._common import RunOutput, default_workers, plot_exponents, sweep, table_rows, train_loop
from ._pays import grids, judge, measured, variant

#: Quick-mode wall seconds on a 2-core CPU: measured 130 s at load 5-6 (other jobs running,
#: within the 2x allowance for load); an extra experiment, outside the main job's budget.
QUICK_SECONDS = 130

UPSTREAM, DOWNSTREAM = (0, 1, 2, 3, 4), (5, 6, 7, 8, 9)


def load(seed: int, shots: int) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """Upstream train set (digits 0-4) and the few-shot downstream splits (digits 5-9,
    relabelled 0-4)."""
    from sklearn.datasets import load_digits  # lazy: the optional "data" extra

    ds = load_digits()
    X = torch.tensor(ds.data, dtype=torch.float32) / 16.0
    y = torch.tensor(ds.target, dtype=torch.long)
    gen = torch.Generator().manual_seed(seed)
    up = torch.nonzero(torch.isin(y, torch.tensor(UPSTREAM))).flatten()
    out = {"upstream": (X[up], y[up])}
    parts: dict[str, list[torch.Tensor]] = {"train": [], "val": [], "test": []}
    for c in DOWNSTREAM:
        idx = torch.nonzero(y == c).flatten()
        idx = idx[torch.randperm(len(idx), generator=gen)]
        parts["train"].append(idx[:shots])
        parts["val"].append(idx[shots : shots + 30])
        parts["test"].append(idx[shots + 30 :])
    for k, v in parts.items():
        i = torch.cat(v)
        out[k] = (X[i], y[i] - DOWNSTREAM[0])
    return out


def pretrain(data: dict[str, Any], h: int, steps: int, seed: int) -> nn.Sequential:
    """The upstream network of one seed (trained once, copied for every optimizer)."""
    torch.manual_seed(2000 + seed)
    net = nn.Sequential(nn.Linear(64, h), nn.ReLU(), nn.Linear(h, h), nn.ReLU(), nn.Linear(h, 5))
    opt = torch.optim.AdamW(net.parameters(), lr=3e-3, betas=(0.9, 0.999), weight_decay=0.0)
    X, y = data["upstream"]
    gen = torch.Generator().manual_seed(3000 + seed)
    for _ in range(steps):
        idx = torch.randint(0, len(y), (64,), generator=gen)
        opt.zero_grad()
        F.cross_entropy(net(X[idx]), y[idx]).backward()
        opt.step()
    return net


def config(quick: bool) -> dict[str, Any]:
    if quick:
        return {"h": 64, "shots": 10, "pre_steps": 300, "steps": 60, "batch": 25, "seeds": 3,
                "grid": 3, "extend": 2}  # fmt: skip
    return {"h": 128, "shots": 10, "pre_steps": 600, "steps": 150, "batch": 25, "seeds": 6,
            "grid": 5, "extend": 3}  # fmt: skip


def run(ctx: RunContext, cfg: dict[str, Any] | None = None) -> ExperimentResult:
    cfg = cfg or config(ctx.quick)
    datas = [load(7919 * ctx.seed + s, cfg["shots"]) for s in range(cfg["seeds"])]
    bodies = [pretrain(d, cfg["h"], cfg["pre_steps"], s) for s, d in enumerate(datas)]

    def train_one(opt: str, lr: float, seed: int) -> RunOutput:
        data = datas[seed]
        model = copy.deepcopy(bodies[seed])
        torch.manual_seed(1000 + seed)
        model[-1] = nn.Linear(cfg["h"], 5)  # the fresh downstream head

        def evaluate(m: nn.Module) -> tuple[float, float]:
            return tuple(float(F.cross_entropy(m(data[s][0]), data[s][1])) for s in ("val", "test"))

        name, kw = variant(opt, "cross_entropy")
        return train_loop(
            model, name, lr, seed, data["train"], F.cross_entropy, evaluate,
            steps=cfg["steps"], batch=cfg["batch"], record_every=5, **kw,
        )  # fmt: skip

    res = sweep(
        train_one,
        grids(cfg["grid"], scale=0.3),  # fine-tuning: 0.3x the from-scratch ranges
        cfg["seeds"],
        higher_is_better=False,
        desc="finetune",
        workers=cfg.get("workers") or default_workers(),
        extend=cfg.get("extend", 0),
    )
    pays, metrics, lines = judge(res, "ce")
    plot_exponents(
        ctx.path("exponents.png"),
        res.runs["AdaptiveLMO"][res.best_lr["AdaptiveLMO"]][0],
        cfg["steps"],
        "AdaptiveLMO per-layer exponent, fine-tuning on digits 5-9, seed 0",
        record_every=5,
    )
    metrics["config"] = cfg
    summary = [
        f"MLP 64->{cfg['h']}->{cfg['h']} pretrained on digits 0-4 ({cfg['pre_steps']} AdamW "
        f"steps), fine-tuned with a fresh head on digits 5-9, {cfg['shots']} images per class, "
        f"{cfg['steps']} steps of batch {cfg['batch']}; {cfg['seeds']} seeds, lr grids of "
        f"{cfg['grid']} points (+ up to {cfg.get('extend', 0)} at an edge), selected on val "
        "cross-entropy.",
        "",
        *lines,
    ]
    return ExperimentResult(
        title="Where adaptivity pays (2): few-shot fine-tuning of a pretrained MLP",
        claim="A per-layer exponent chosen from data beats torch Muon and AdamW when "
        "fine-tuning on a narrow task (low-rank gradients).",
        summary="\n".join(summary),
        metrics=metrics,
        holds=pays,
        paper="P19",
        measured=measured(res, metrics, "CE"),
        plots=["exponents.png"],
        table=table_rows(res, "ce"),
    )


def main(argv: list[str] | None = None) -> int:
    """``python -m adaptive_lmo.experiments.finetune [--quick]``."""
    return run_experiment(run, name="adaptive-lmo.finetune", description=__doc__, argv=argv)


if __name__ == "__main__":
    raise SystemExit(main())
