"""How much of the exact-settings gap to traker is float32 round-off? (lds-digits, model 0.)

lds-digits compares traker's scores (float32) with our pipeline fed traker's projection
matrices (float64). This script takes lds-digits' model 0 (1,000 train digits, 200 targets,
seed 0), projects our per-example gradients with traker's BasicProjector matrix at each k,
and evaluates the same one-model traker formula once in float64
(:func:`trak_theory.scores.traker_scores`) and once in float32, reporting the condition
number of the projected Gram matrix and max |s32 - s64| / max |s64|. If this float32-vs-float64
gap is as large as the traker-vs-ours gap, the latter is round-off, not a different formula.

    python packages/trak-theory/benchmarks/exact_settings_f32.py --ks 128 512
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch

from trak_theory.experiments import _traker
from trak_theory.experiments._digits import load_split, make_mlp, train_mlps
from trak_theory.gradients import out_to_loss, per_example_grads
from trak_theory.projector import MatrixProjector
from trak_theory.scores import traker_scores


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ks", type=int, nargs="+", default=[128, 512])
    ap.add_argument("--quick", action="store_true", help="same as the default (seconds)")
    ap.add_argument("--full", action="store_true", help="same as the default")
    ap.add_argument("--device", default="cpu", choices=["cpu"], help="CPU only")
    ap.add_argument("--out", type=Path, default=None, help="JSON with the numbers printed")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    n = 1000
    x, y, xt, yt = load_split(n, 200, seed=0)
    state = train_mlps(x, y, torch.ones(1, n), [0], steps=150, lr=2e-2)[0]
    net = make_mlp()
    net.load_state_dict(state)
    p = sum(q.numel() for q in net.parameters())
    g_train, g_tgt = per_example_grads(net, x, y), per_example_grads(net, xt, yt)
    q = out_to_loss(net, x, y)
    rows = []
    for k in args.ks:
        proj = MatrixProjector(_traker.traker_matrix(p, k, 0), scale=1 / p**0.5)
        ph, pt = proj.project(g_train), proj.project(g_tgt)
        s64 = traker_scores([ph], [pt], [q]).numpy()
        ph32, pt32 = ph.float(), pt.float()
        inv = torch.linalg.inv(ph32.T @ ph32)
        inv = inv / inv.abs().mean()
        s32 = ((pt32 @ inv @ ph32.T) * q.float()[None]).numpy()
        cond = np.linalg.cond((ph.double().T @ ph.double()).numpy())
        rel = np.abs(s32 - s64).max() / np.abs(s64).max()
        print(f"k={k}: cond(Phi^T Phi) = {cond:.3g}, float32 vs float64 rel. max diff = {rel:.2g}")
        rows.append({"k": k, "cond_gram": float(cond), "f32_vs_f64_rel_max_diff": float(rel)})
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
