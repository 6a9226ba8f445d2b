r"""Selection-set harness: measure a distillation setting on instances the test set never sees.

Not a headline experiment (no verdict): the measurement behind the ``tsp`` configuration. The
selection set is ``random_tsp(300, 20)`` from seed 4242 with LKH-3 reference tours (cached in
``--cache``). Two commands, each printing one JSON line:

* ``distil``: run the EPB loop exactly as ``tsp --quick`` does (``--train-inst`` x
  ``--train-starts`` teacher rollouts, ``--val-inst`` validation rollouts, 2 iterations, the
  offline proposer with pursuit up to ``--max-terms``; torch seeded with ``--seed`` like
  ``run_experiment``), then report the portfolio's greedy gap on all selection instances, its
  best-of-20-starts gap on the first 100, and its validation agreement / KL.
* ``probe``: a dense score over the TSP vocabulary (each feature ``f`` as ``f``, ``log f``
  (``f^2`` for coordinates and cosines) and both times ``progress``, standardised), linear or
  with a ``--hidden``-unit tanh layer added, fitted by Adam on the KL to the teacher
  (L2 ``1e-4``); reports validation KL / agreement (validation rollouts from 2 start nodes)
  and the greedy gap of its argmax.

Example: ``python -m epb.experiments.selection distil --seed 0``.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from ..features import TSP_NODE_FEATURES, node_features
from ..policy import load_teacher
from ..portfolio import adam_minimise, collect_states, kl_per_state, masked_log_softmax
from ..problems import Instances, random_tsp
from ..rollout import greedy, multistart
from .distill import distil, gap

SELECTION_SEED = 4242
NOT_POSITIVE = ("x", "y", "cos_centroid")  # squared instead of logged


def selection_set(size: int, cache: Path | None) -> tuple[Instances, torch.Tensor]:
    """``size`` TSP20 instances from :data:`SELECTION_SEED` and their LKH-3 tour lengths."""
    if cache is not None and cache.exists():
        coords, ref = torch.load(cache)
        if len(ref) >= size:
            return Instances(coords[:size]), ref[:size]
    from ..reference import lkh_lengths

    inst = random_tsp(size, 20, torch.Generator().manual_seed(SELECTION_SEED))
    _, ref = lkh_lengths(inst)
    if cache is not None:
        torch.save((inst.coords, ref), cache)
    return inst, ref


def probe_columns(feats: dict, names=TSP_NODE_FEATURES) -> torch.Tensor:
    """``(S, n, 4 |names|)`` columns of the dense probe."""
    ref, prog = feats["d_cur"], feats["progress"]
    out = []
    for f in names:
        x = torch.broadcast_to(feats[f], ref.shape)
        lx = x * x if f in NOT_POSITIVE else torch.log(x.clamp_min(1e-9))
        out += [x, lx, x * prog, lx * prog]
    return torch.stack(out, -1)


def run_probe(teacher, inst, ref, a) -> dict:
    g = torch.Generator().manual_seed(a.seed)
    train = collect_states(teacher, random_tsp(a.train_inst, 20, g), starts=a.train_starts)
    val = collect_states(teacher, random_tsp(a.val_inst, 20, g), starts=2)
    x = probe_columns(train.feats)
    m = train.mask[..., None].to(x.dtype)
    mu = (x * m).sum((0, 1)) / m.sum()
    sd = (((x - mu) ** 2) * m).sum((0, 1)).div(m.sum()).sqrt().clamp_min(1e-6)
    z = (x - mu) / sd
    c, h = z.shape[-1], max(a.hidden, 1)
    gen = torch.Generator().manual_seed(a.seed)
    w = torch.zeros(c, requires_grad=True)
    w1 = (torch.randn(c, h, generator=gen) / c**0.5).requires_grad_(True)
    b1 = torch.zeros(h, requires_grad=True)
    w2 = torch.zeros(h, requires_grad=True)

    def score(z):
        out = z @ w
        return out + torch.tanh(z @ w1 + b1) @ w2 if a.hidden else out

    def loss():
        kl = kl_per_state(train.teacher_logp, masked_log_softmax(score(z), train.mask), train.mask)
        reg = (w * w).sum() + ((w1 * w1).sum() + (w2 * w2).sum() if a.hidden else 0.0)
        return kl.mean() + 1e-4 * reg

    params = [w, w1, b1, w2] if a.hidden else [w]
    adam_minimise(params, loss, 400, 0.03 if a.hidden else 0.05)
    with torch.no_grad():
        lp = masked_log_softmax(score((probe_columns(val.feats) - mu) / sd), val.mask)
        kl = float(kl_per_state(val.teacher_logp, lp, val.mask).mean())
        agree = float((lp.argmax(-1) == val.teacher_logp.argmax(-1)).float().mean())

        def step(st):
            return score((probe_columns(node_features(st)) - mu) / sd)

        g_gap = gap(greedy(lambda i, r: step, inst, chunk=100), ref)
    return {"greedy": g_gap, "val_agreement": agree, "val_kl": kl}


def run_distil(teacher, inst, ref, a) -> dict:
    port, _, val, _ = distil(
        "tsp",
        20,
        teacher,
        train_inst=a.train_inst,
        train_starts=a.train_starts,
        val_inst=a.val_inst,
        iterations=2,
        seed=a.seed,
        candidates=4,
        pursuit=True,
        max_terms=a.max_terms,
    )
    fid = port.fidelity(val)
    ms = min(100, len(ref))
    return {
        "greedy": gap(greedy(port.bind, inst, chunk=64), ref),
        "multistart": gap(multistart(port.bind, inst.index(slice(0, ms)), chunk=64), ref[:ms]),
        "val_agreement": fid["agreement"],
        "val_kl": fid["kl"],
        "programs": port.k,
        "code": [p.source for p in port.programs],
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("command", choices=("distil", "probe"))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--instances", type=int, default=300)
    p.add_argument("--train-inst", type=int, default=None, help="default 40 (probe: 200)")
    p.add_argument("--train-starts", type=int, default=None, help="default 2 (probe: 4)")
    p.add_argument("--val-inst", type=int, default=None, help="default 20 (probe: 100)")
    p.add_argument("--max-terms", type=int, default=8)
    p.add_argument("--hidden", type=int, default=0, help="probe: tanh units (0: linear)")
    p.add_argument("--cache", type=Path, default=None, help="cache file for the LKH-3 tours")
    a = p.parse_args(argv)
    probe = a.command == "probe"
    a.train_inst = a.train_inst or (200 if probe else 40)
    a.train_starts = a.train_starts or (4 if probe else 2)
    a.val_inst = a.val_inst or (100 if probe else 20)
    torch.set_num_threads(1)
    torch.manual_seed(a.seed)
    inst, ref = selection_set(a.instances, a.cache)
    teacher = load_teacher("tsp", 20)
    t0 = time.process_time()
    row = (run_probe if probe else run_distil)(teacher, inst, ref, a)
    row = {**{k: v for k, v in vars(a).items() if k != "cache"}, **row}
    row["cpu_seconds"] = round(time.process_time() - t0, 1)
    print(json.dumps(row))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
