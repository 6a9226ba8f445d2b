"""Sketch-seed spread of the LDS at k = 128 in lds-digits' default mode (is the 0.003 miss noise?).

lds-digits compares one sketch draw of ours (seed 0) with one draw of traker's (seed 0). This
script rebuilds the same default-mode setting (same split, models, half subsets and retrains as
``python -m trak_theory.experiments.lds_digits`` with seed 0) and recomputes the LDS at the
k < n cells for S independent sketch draws on each side:

- ours: ``TRAK(k, ridge="auto", seed=100 * s)`` (model j uses seed + j, so base seeds 100
  apart never share a draw);
- traker: our gradients projected with the matrix traker's BasicProjector generates for
  ``seed = s`` and each model id, traker's ensemble rule, ridge 0 (the "exact settings" path of
  lds-digits, which matches traker's own scores to ~1e-5 relative; running traker itself S
  times would take S times its ~3 min per k).

Reported per cell: mean and standard deviation over seeds of each side's LDS, the seed-0
difference (the number lds-digits quotes), the standard deviation of a one-draw-each
difference sqrt(sd_ours^2 + sd_traker^2), and the seed-averaged difference with its standard
error sqrt(sd_ours^2 / S + sd_traker^2 / S). Rule (computed, not written by hand): a
difference is significant when it lies more than 2 of its standard errors from 0.

    python packages/trak-theory/benchmarks/lds_seed_spread.py --seeds 10 \
        --out packages/trak-theory/benchmarks/results/lds_seed_spread_k128.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

from trak_theory import TRAK
from trak_theory.diagnostics import lds_per_target
from trak_theory.experiments import _traker
from trak_theory.experiments._digits import load_split, make_mlp, margins_of, train_mlps
from trak_theory.experiments.lds_digits import config
from trak_theory.gradients import out_to_loss, per_example_grads
from trak_theory.projector import MatrixProjector
from trak_theory.scores import traker_scores

SIGMAS = 2.0


def setting(seed: int = 0):
    """The default-mode data, models, subsets and retrained target margins of lds-digits."""
    cfg = config(quick=False)
    n, m = cfg["n"], cfg["m"]
    x, y, xt, yt = load_split(n, m, seed=seed)
    jmax = max(cfg["models"])
    states = train_mlps(
        x, y, torch.ones(jmax, n), [1000 * seed + j for j in range(jmax)], cfg["steps"], lr=2e-2
    )
    g = torch.Generator().manual_seed(seed + 7)
    masks = (torch.rand(cfg["subsets"], n, generator=g) < 0.5).float()
    sub = train_mlps(
        x, y, masks, [10_000 + i for i in range(cfg["subsets"])], steps=cfg["steps"], lr=2e-2
    )
    outputs = margins_of(sub, xt, yt).numpy()
    return cfg, states, x, y, xt, yt, masks, outputs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=None, help="sketch draws per side (10)")
    ap.add_argument("--quick", action="store_true", help="3 sketch draws per side")
    ap.add_argument("--full", action="store_true", help="same as the default")
    ap.add_argument("--device", default="cpu", choices=["cpu"], help="CPU only")
    ap.add_argument("--k", type=int, default=128)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    if args.seeds is None:
        args.seeds = 3 if args.quick else 10
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    cfg, states, x, y, xt, yt, masks, outputs = setting()
    counts, k = cfg["models"], args.k
    jmax = max(counts)
    net = make_mlp()
    p = sum(q.numel() for q in net.parameters())
    grads, qs = [], []
    for st in states[:jmax]:
        net.load_state_dict(st)
        grads.append((per_example_grads(net, x, y), per_example_grads(net, xt, yt)))
        qs.append(out_to_loss(net, x, y))
    ours = {jj: [] for jj in counts}
    trk = {jj: [] for jj in counts}
    for s in range(args.seeds):
        trak = TRAK(net, x, y, k=k, ridge="auto", batch_size=100, seed=100 * s)
        for j, st in enumerate(states[:jmax]):
            trak.featurize(st, model_id=j)
        phis, tgts = [], []
        for j in range(jmax):
            proj = MatrixProjector(_traker.traker_matrix(p, k, j, seed=s), scale=1 / p**0.5)
            phis.append(proj.project(grads[j][0]))
            tgts.append(proj.project(grads[j][1]))
        for jj in counts:
            sc = trak.score(xt, yt, {j: states[j] for j in range(jj)}).numpy()
            ours[jj].append(float(np.nanmean(lds_per_target(sc, masks, outputs))))
            tk = traker_scores(phis[:jj], tgts[:jj], qs[:jj], ridge=0.0).numpy()
            trk[jj].append(float(np.nanmean(lds_per_target(tk, masks, outputs))))
        done = [f"J={jj} ours {ours[jj][-1]:.4f} traker {trk[jj][-1]:.4f}" for jj in counts]
        print(f"seed {s}: " + "; ".join(done), flush=True)
    rows = []
    for jj in counts:
        o, t = np.array(ours[jj]), np.array(trk[jj])
        sd_o, sd_t = float(o.std(ddof=1)), float(t.std(ddof=1))
        sd_one = float(np.hypot(sd_o, sd_t))
        se_mean = sd_one / np.sqrt(len(o))
        d0, dm = float(o[0] - t[0]), float(o.mean() - t.mean())
        rows.append(
            {
                "k": k,
                "models": jj,
                "seeds": len(o),
                "ours_lds": o.tolist(),
                "traker_lds": t.tolist(),
                "ours_mean": float(o.mean()),
                "ours_sd": sd_o,
                "traker_mean": float(t.mean()),
                "traker_sd": sd_t,
                "diff_seed0": d0,
                "sd_one_draw_diff": sd_one,
                "seed0_diff_significant": bool(abs(d0) > SIGMAS * sd_one),
                "diff_seed_mean": dm,
                "se_seed_mean_diff": float(se_mean),
                "seed_mean_diff_significant": bool(abs(dm) > SIGMAS * se_mean),
            }
        )
        r = rows[-1]
        print(
            f"k={k} J={jj}: ours {r['ours_mean']:.4f} (sd {sd_o:.4f}), traker "
            f"{r['traker_mean']:.4f} (sd {sd_t:.4f}); seed-0 diff {d0:+.4f} vs one-draw sd "
            f"{sd_one:.4f}; seed-mean diff {dm:+.4f} (SE {se_mean:.4f})"
        )
    res = {
        "config": cfg,
        "k": k,
        "seeds": args.seeds,
        "rows": rows,
        "seconds": time.perf_counter() - t0,
    }
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(res, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
