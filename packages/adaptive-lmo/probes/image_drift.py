"""Probe: why does AdaptiveLMO fall behind Muon in the default `image` run?

Trains the default `image` model (MLP 64->128->128->10 on digits, batch 128) with a few
(optimizer, lr) pairs and seeds and logs, every ``every`` steps: the training-batch loss, the
full training-set loss, the fraction of training examples with a zero cross-entropy gradient
in float32, each layer's exponent (AdaptiveLMO) and the Frobenius norm of each matrix's
gradient; at the end validation and test accuracy. Cited in the README (`image`, default).

    python packages/adaptive-lmo/probes/image_drift.py OUT.json SPEC [SPEC ...]

SPEC = ``name:lr:seeds[:steps]`` with name one of Muon, auto, a0 (AdaptiveLMO fixed at 0),
or any AdaptiveLMO keyword given as ``auto+key=value`` (e.g. ``auto+curvature=input``).
The README's rows: ``Muon:0.01:5``; without the floor ``auto+exponent=0+direction_floor=0:0.01:5``
and ``auto+direction_floor=0:0.0197:5`` (made before the option existed, with ``a0`` and
``auto``; the same runs); with it ``a0:0.01:5``, ``auto:0.01:5``,
``auto+scale=spectral:0.01:5`` (and the same at lr 0.0197). With the switch test
(``results/image_switch_probe.json``): ``auto:0.01:5``, ``auto:0.00507:5``, ``a0:0.00507:5``,
``Muon:0.00507:5``, ``auto+shrinkage=ledoit_wolf+switch_confidence=0:0.01:5`` and
``auto+shrinkage=none+switch_confidence=0:0.01:5`` (the previous default).
"""

from __future__ import annotations

import json
import sys
import time

import torch
import torch.nn.functional as F
from torch import nn

from adaptive_lmo.experiments._common import batch_indices, build_optimizer
from adaptive_lmo.experiments.image import config, load
from adaptive_lmo.optim import AdaptiveLMO
from shared_core.experiment import seed_everything

torch.set_num_threads(1)


def parse(spec: str):
    parts = spec.split(":")
    name, lr, seeds = parts[0], float(parts[1]), int(parts[2])
    steps = int(parts[3]) if len(parts) > 3 else None
    kw = {}
    if "+" in name:
        name, *extra = name.split("+")
        for e in extra:
            k, v = e.split("=")
            try:
                kw[k] = float(v)
            except ValueError:
                kw[k] = v
    return name, lr, seeds, steps, kw


def train(name, lr, seed, steps, kw, every=50):
    cfg = config(False)
    data = load(0)
    seed_everything(seed)
    torch.manual_seed(1000 + seed)
    h = cfg["h"]
    model = nn.Sequential(nn.Linear(64, h), nn.ReLU(), nn.Linear(h, h), nn.ReLU(), nn.Linear(h, 10))
    if name == "Muon":
        opt = build_optimizer("Muon", model, lr)
    elif name == "a0":
        opt = build_optimizer("AdaptiveLMO", model, lr, exponent=0.0)
    else:
        opt = AdaptiveLMO(
            model,
            lr=lr,
            momentum=0.95,
            update_every=10,
            adjust_lr_fn="original",
            adamw_lr=3e-3,
            **kw,
        )
    X, Y = data["train"]
    log = []
    for t, idx in enumerate(batch_indices(X.shape[0], cfg["batch"], steps, seed)):
        opt.zero_grad()
        loss = F.cross_entropy(model(X[idx]), Y[idx])
        loss.backward()
        if t % every == 0 or t == steps - 1:
            gn = {
                k: float(p.grad.norm()) for k, p in model.named_parameters() if k.endswith("weight")
            }
        opt.step()
        if t % every == 0 or t == steps - 1:
            with torch.no_grad():
                logits = model(X)
                full = float(F.cross_entropy(logits, Y))
                p = logits.softmax(-1)
                resid = p - F.one_hot(Y, 10).float()
                zero = float((resid.abs().amax(-1) == 0).float().mean())
            rec = {"step": t, "batch_loss": float(loss), "train_loss": full, "zero_grad": zero}
            rec["grad_norm"] = gn
            if isinstance(opt, AdaptiveLMO):
                rec["exp"] = {k: g["exponent"] for k, g in opt.geometry().items()}
                rec["src"] = {k: g["source"][:40] for k, g in opt.geometry().items()}
            log.append(rec)
    model.eval()
    with torch.no_grad():
        acc = {
            s: float((model(data[s][0]).argmax(-1) == data[s][1]).float().mean())
            for s in ("val", "test")
        }
    return {"log": log, **acc}


def main() -> None:
    out, specs = sys.argv[1], sys.argv[2:]
    res = {}
    for spec in specs:
        name, lr, seeds, steps, kw = parse(spec)
        steps = steps or config(False)["steps"]
        runs = []
        for s in range(seeds):
            t0 = time.time()
            r = train(name, lr, s, steps, kw)
            runs.append(r)
            last = r["log"][-1]
            print(
                f"{spec} seed {s}: val {r['val']:.4f} test {r['test']:.4f} "
                f"train {last['train_loss']:.2e} exp {last.get('exp')} ({time.time() - t0:.0f}s)",
                flush=True,
            )
        res[spec] = runs
        va = sum(r["val"] for r in runs) / len(runs)
        te = sum(r["test"] for r in runs) / len(runs)
        print(f"== {spec}: mean val {va:.4f} test {te:.4f}", flush=True)
        with open(out, "w") as f:
            json.dump(res, f)


if __name__ == "__main__":
    main()
