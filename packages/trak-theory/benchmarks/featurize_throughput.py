"""Featurisation throughput: trak-theory vs traker 0.3.2 (and dattri 0.3) on the CPU.

Same model (the 4,810-parameter digits MLP), same examples, same k and batch size; traker
with its CPU defaults (BasicProjector); each side starts from a fresh store every call
(per-example margin gradients, projection to k dims, reweighting terms). Ours also starts
without its sketch: the process-wide cache of the materialised sketch is cleared before every
call, so each call pays for generating it, as a fresh process would (traker regenerates its
matrix per batch anyway). Candidate and
baseline are interleaved by ``shared_core.bench.compare``; the ratio is t_ours / t_baseline
(< 1: ours faster; 1/ratio is the speed-up).

    python packages/trak-theory/benchmarks/featurize_throughput.py --quick \
        --out packages/trak-theory/benchmarks/results/featurize_cpu_quick.json
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile

import numpy as np
import torch
from torch import nn

from shared_core.bench import compare, write_json
from trak_theory import TRAK
from trak_theory.projector import _cached_matrix


def _model(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))


def ours(net, x, y, k, bs):
    def fn():
        _cached_matrix.cache_clear()  # cold: the sketch is generated inside the timed call
        TRAK(net, x, y, k=k, batch_size=bs).featurize(net.state_dict())

    return fn


def traker_fn(net, x, y, k, bs):
    from trak import TRAKer
    from trak.projectors import BasicProjector, ProjectionType

    p = sum(q.numel() for q in net.parameters())
    proj = BasicProjector(
        grad_dim=p, proj_dim=k, seed=0, proj_type=ProjectionType.rademacher, device="cpu"
    )

    def fn():
        tr = TRAKer(
            model=net,
            task="image_classification",
            train_set_size=len(x),
            save_dir=tempfile.mkdtemp(prefix="trakbench_"),
            device="cpu",
            proj_dim=k,
            projector=proj,
            use_half_precision=False,
            logging_level=logging.ERROR,
        )
        tr.load_checkpoint(net.state_dict(), model_id=0)
        for s in range(0, len(x), bs):
            tr.featurize(
                batch=(x[s : s + bs], y[s : s + bs]), inds=np.arange(s, min(len(x), s + bs))
            )

    return fn


def dattri_fn(net, x, y, k, bs):
    from dattri.algorithm.trak import TRAKAttributor
    from dattri.task import AttributionTask

    loss = nn.CrossEntropyLoss()

    def f(params, data):
        image, label = data
        yhat = torch.func.functional_call(net, params, image.unsqueeze(0))
        logp = -loss(yhat, label.unsqueeze(0))
        return logp - torch.log(1 - torch.exp(logp))

    def prob(params, data):
        image, label = data
        yhat = torch.func.functional_call(net, params, image.unsqueeze(0))
        return torch.exp(-loss(yhat, label.unsqueeze(0)))

    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=bs)

    import dattri.algorithm.trak as dattri_trak

    dattri_trak.tqdm = lambda it, *a, **kw: it  # no progress bar per batch inside the timing

    def fn():
        task = AttributionTask(loss_func=f, model=net, checkpoints=net.state_dict())
        att = TRAKAttributor(
            task=task,
            correct_probability_func=prob,
            device="cpu",
            projector_kwargs={"device": "cpu", "proj_dim": k},
        )
        att.cache(loader)

    return fn


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--device", default="cpu", choices=["cpu"])
    ap.add_argument("--out", default="featurize_throughput.json")
    ap.add_argument("--n", type=int, default=None)
    ap.add_argument("--k", type=int, default=512)
    ap.add_argument("--batch", type=int, default=100)
    ap.add_argument("--baselines", default="traker,dattri", help="comma-separated")
    args = ap.parse_args(argv)
    n = args.n or (500 if args.quick else 2000)
    repeats = 3 if args.quick else 5
    net = _model()
    g = torch.Generator().manual_seed(0)
    x, y = torch.rand(n, 64, generator=g), torch.randint(0, 10, (n,), generator=g)
    params = {"n": n, "k": args.k, "batch": args.batch, "p": 4810}
    results, notes = [], {}
    makers = {"traker": traker_fn, "dattri": dattri_fn}
    for name in args.baselines.split(","):
        make = makers[name]
        try:
            base = make(net, x, y, args.k, args.batch)
        except ImportError as exc:
            notes[name] = f"not installed: {exc}"
            continue
        try:
            r = compare(
                ours(net, x, y, args.k, args.batch),
                base,
                name=f"featurize vs {name}",
                warmup=1,
                repeats=repeats,
                params=params,
            )
        except Exception as exc:  # a baseline that does not run is recorded, not fatal
            notes[name] = f"failed: {type(exc).__name__}: {exc}"
            continue
        results.append(r)
        print(
            f"{r.name}: ratio median {r.ratio_median:.4f} [{r.ratio_min:.4f}, "
            f"{r.ratio_max:.4f}] -> speed-up {1 / r.ratio_median:.1f}x"
        )
    write_json(args.out, results, command=" ".join([sys.executable, *sys.argv]), notes=notes)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
