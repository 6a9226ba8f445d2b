r"""Diagnostic: how low-rank are lm-bits' pseudo-gradients?

Runs dense DiLoCo (no compression) on the lm-bits task and, every round, records for each
weight matrix of one worker's pseudo-gradient :math:`\Delta_0` and of the workers' average
:math:`\bar\Delta` the share of the energy in the best rank-q approximation,
:math:`\sum_{i\le q}\sigma_i^2/\sum_i\sigma_i^2` (float64 SVD, Eckart-Young), and scaled sign's
:math:`\alpha = \|\Delta_0\|_1^2/(d\|\Delta_0\|_2^2)` for comparison. Low-rank compression with a
converged warm start reaches the first number at best (before error feedback).

``python -m diloco_ef.experiments.lm_bits_spectra [--seed 0] [--inner-steps 32] [--out f.json]``
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import torch
from torch import Tensor, nn

from .._rng import derive_seed
from ..algorithms import DiLoCo, local_step_size_schedule
from .lm_bits import QUICK, Config, TinyLM, make_data

RANKS = (1, 2, 4)


def energy_shares(mat: Tensor, ranks: tuple[int, ...] = RANKS) -> dict[int, float]:
    """``{q: top-q singular energy / total}`` of a matrix (float64 SVD)."""
    sv2 = torch.linalg.svdvals(mat.detach().double()).pow(2)
    total = float(sv2.sum())
    return {q: float(sv2[:q].sum()) / total if total > 0 else 1.0 for q in ranks}


def spectra(
    cfg: Config = QUICK,
    seed: int = 0,
    inner_steps: int = 32,
    outer: tuple[float, float] = (0.9, 0.8),
) -> list[dict[str, Any]]:
    """One record per round: per matrix, energy shares of worker 0's and the mean pseudo-grad."""
    torch.set_num_threads(1)
    data = make_data(cfg, seed)
    torch.manual_seed(derive_seed(seed, 32))
    model = TinyLM(cfg.vocab, cfg.embed, cfg.hidden)
    h, rounds = inner_steps, cfg.steps // inner_steps
    ilr = local_step_size_schedule(cfg.c, h, rounds)(0)
    algo = DiLoCo(
        model,
        lambda p: torch.optim.SGD(p, lr=ilr),
        lambda p: torch.optim.SGD(p, lr=outer[0], momentum=outer[1], nesterov=True),
        inner_steps=h,
        num_workers=cfg.workers,
    )
    idx = data["batches"]

    def loss_fn(mod: nn.Module, w: int, r: int, step: int) -> Tensor:
        b = idx[w, r * h + step]
        return nn.functional.cross_entropy(mod(data["ctx"][w][b]), data["nxt"][w][b])

    names = [n for n, _ in model.named_parameters()]
    out = []
    for r in range(rounds):
        start = [x.detach().clone() for x in algo.outer_params]
        rec: dict[str, Any] = {"round": r}
        # The inner phases of the round, then the same outer step DiLoCo.round takes.
        lr = algo._scheduled_lr()
        for w in range(len(algo.replicas)):
            algo._inner_phase(w, loss_fn, lr)
        for i, name in enumerate(names):
            if start[i].dim() < 2:
                continue
            deltas = [start[i] - list(m.parameters())[i].detach() for m in algo.replicas]
            d0, mean = deltas[0], sum(deltas) / len(deltas)
            rec[name] = {
                "worker0": energy_shares(d0),
                "mean": energy_shares(mean),
                "sign_alpha": float(d0.abs().sum() ** 2 / (d0.numel() * d0.pow(2).sum())),
            }
        out.append(rec)
        with torch.no_grad():
            inner = [list(m.parameters()) for m in algo.replicas]
            for i, x in enumerate(algo.outer_params):
                x.grad = sum(x.detach() - ps[i].detach() for ps in inner) / len(inner)
            algo.outer_opt.step()
            algo.outer_opt.zero_grad(set_to_none=True)
            for m in algo.replicas:
                for p, x in zip(m.parameters(), algo.outer_params, strict=True):
                    p.copy_(x)
        algo.rounds_done += 1
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--inner-steps", type=int, default=32)
    p.add_argument("--out", default=None)
    a = p.parse_args(argv)
    recs = spectra(seed=a.seed, inner_steps=a.inner_steps)
    for key in [k for k in recs[0] if k != "round"]:
        w0 = [r[key]["worker0"] for r in recs]
        mean = [r[key]["mean"] for r in recs]
        sa = [r[key]["sign_alpha"] for r in recs]
        parts = [
            f"rank {q}: worker {min(x[q] for x in w0):.2f}-{max(x[q] for x in w0):.2f}, "
            f"mean {min(x[q] for x in mean):.2f}-{max(x[q] for x in mean):.2f}"
            for q in RANKS
        ]
        print(f"{key}: " + "; ".join(parts) + f"; sign alpha {min(sa):.2f}-{max(sa):.2f}")
    if a.out:
        with open(a.out, "w") as f:
            json.dump(recs, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
