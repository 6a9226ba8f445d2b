"""Probe: how many examples carry the output-gradient statistics when the `image` criterion
jumps?

Replays the default `image` AdaptiveLMO run (one seed, one lr) and, on every criterion step
(the step whose forward/backward supplies the next-batch statistics), records per hidden
layer the exponent chosen, the training-batch loss, the norm of the scored direction (the
momentum of the previous step) and the effective number of rows of the output-gradient
second moment, n_eff = (sum_t |g_t|^2)^2 / sum_t |g_t|^4 over the batch's rows g_t (= B for
equal rows; 1 when one example carries all of it). Cited in the README (`image`, default).

    python packages/adaptive-lmo/probes/image_neff.py [seed] [lr] [OUT.json]
"""

from __future__ import annotations

import json
import sys

import torch
import torch.nn.functional as F
from torch import nn

from adaptive_lmo.experiments._common import build_optimizer
from adaptive_lmo.experiments.image import config, load
from shared_core.experiment import seed_everything

torch.set_num_threads(1)


def main() -> None:
    seed = int(sys.argv[1]) if len(sys.argv) > 1 else 0
    lr = float(sys.argv[2]) if len(sys.argv) > 2 else 0.01
    out = sys.argv[3] if len(sys.argv) > 3 else None
    cfg, data = config(False), load(0)
    seed_everything(seed)
    torch.manual_seed(1000 + seed)
    h = cfg["h"]
    model = nn.Sequential(nn.Linear(64, h), nn.ReLU(), nn.Linear(h, h), nn.ReLU(), nn.Linear(h, 10))
    opt = build_optimizer("AdaptiveLMO", model, lr)
    grads: dict[str, torch.Tensor] = {}

    def hook(name):
        def fwd(mod, inp, outp):
            if outp.requires_grad:
                outp.register_hook(lambda g: grads.__setitem__(name, g.detach().clone()))

        return fwd

    for name in ("0", "2"):
        model[int(name)].register_forward_hook(hook(name))
    X, Y = data["train"]
    gen = torch.Generator().manual_seed(10_000 + seed)
    n, batch = X.shape[0], cfg["batch"]
    perm, pos = torch.randperm(n, generator=gen), 0
    rows = []
    for t in range(cfg["steps"]):
        if pos + batch > n:
            perm, pos = torch.randperm(n, generator=gen), 0
        idx = perm[pos : pos + batch]
        pos += batch
        mom = {
            k: float(opt.state[model[int(k)].weight].get("momentum_buffer", torch.zeros(1)).norm())
            for k in ("0", "2")
        }
        opt.zero_grad()
        loss = F.cross_entropy(model(X[idx]), Y[idx])
        loss.backward()
        opt.step()
        if t % 10 == 1:  # the step that chooses (next-batch statistics)
            rec = {"step": t + 1, "loss": float(loss.detach())}
            for k in ("0", "2"):
                q = grads[k].pow(2).sum(-1)
                neff = float(q.sum() ** 2 / q.pow(2).sum()) if float(q.sum()) > 0 else 0.0
                geo = opt.geometry()[f"{k}.weight"]
                rec[k] = {
                    "a": geo["exponent"],
                    "n_eff": neff,
                    "dir_norm": mom[k],
                    "src": geo["source"][:24],
                }
            rows.append(rec)
    for r in rows:
        if r["step"] % 50 == 2 or r["2"]["a"] > 0.05 or r["0"]["a"] > 0.05:
            print(
                r["step"],
                f"loss {r['loss']:.1e}",
                *(
                    f"L{k}: a {r[k]['a']:.2f} n_eff {r[k]['n_eff']:.1f} |P| {r[k]['dir_norm']:.1e}"
                    for k in ("0", "2")
                ),
            )
    if out:
        with open(out, "w") as f:
            json.dump(rows, f)


if __name__ == "__main__":
    main()
