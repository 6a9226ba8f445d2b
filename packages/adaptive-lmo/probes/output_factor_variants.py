"""Probe: which output-side curvature model predicts the real one-step best exponent in `lm`?

Trains the quick `lm` model with the input-only criterion (``curvature="input"``, the default
when this probe was written) to steps 20, 60 and 110, and at each checkpoint compares six ways
of forming the output factor (full K-FAC ``M``, its diagonal, a token-paired form without the
Kronecker assumption; each with empirical gradients or labels sampled from the model) against
the real one-step decrease on an exponent grid. Cited in the README ("Output-side curvature").

    python packages/adaptive-lmo/probes/output_factor_variants.py [n_seeds] [out.pt]
"""

import math
import sys

import torch
import torch.nn.functional as F

from adaptive_lmo.experiments.lm import (
    ONE_STEP_CFG,
    _real_decrease,
    checkpoint_directions,
    lm_loss,
    make_corpus,
)
from adaptive_lmo.fractional import fractional_update, svd_factors

torch.set_num_threads(1)

cfg = ONE_STEP_CFG
data = make_corpus(cfg["V"], cfg["T"], cfg["n"], 0)
val = tuple(t.clone() for t in data["val"])
X, Y = data["train"]
A_GRID = torch.linspace(0, 1, 101, dtype=torch.float64)
a_grid = [i / 10 for i in range(11)]
eta_grid = [1e-3 * 3e3 ** (k / 24) for k in range(25)]


def best_a(s, d, M):
    w = s / s.max()
    P = w.log().unsqueeze(0) * A_GRID.unsqueeze(1)
    E = P.exp()
    num = (E * d).sum(1) ** 2
    den = ((E @ M) * E).sum(1)
    return float(A_GRID[int(torch.argmax(num / den))])


def collect(model, xb, yb, names, sample=False, gen=None):
    """inputs and per-token output grads (float64) of every named Linear."""
    mods = dict(model.named_modules())
    ins, outs, hs = {}, {}, []
    for n in names:
        m = mods[n.rsplit(".", 1)[0]]
        hs.append(m.register_forward_hook(lambda mod, i, o, n=n: ins.__setitem__(n, i[0].detach())))
        hs.append(
            m.register_full_backward_hook(
                lambda mod, gi, go, n=n: outs.__setitem__(n, go[0].detach())
            )
        )
    logits = model(xb)
    if sample:
        with torch.no_grad():
            pr = F.softmax(logits.reshape(-1, logits.shape[-1]), -1)
            yb = torch.multinomial(pr, 1, generator=gen).reshape(yb.shape)
    model.zero_grad()
    lm_loss(logits, yb).backward()
    for h in hs:
        h.remove()
    return {
        n: (ins[n].reshape(-1, ins[n].shape[-1]), outs[n].reshape(-1, outs[n].shape[-1]))
        for n in names
    }


rows = []
for seed in range(int(sys.argv[1]) if len(sys.argv) > 1 else 1):
    for t_stop in (20, 60, 110):
        # the probe was written when the input-only criterion was the default
        model, opt, batches, ref, ref_p, Ps = checkpoint_directions(
            cfg, X, Y, seed, t_stop, 0.0548, curvature="input"
        )
        lnames = list(Ps)
        nb = batches[t_stop + 1]
        emp = collect(ref, X[nb], Y[nb], lnames)
        fis = collect(ref, X[nb], Y[nb], lnames, sample=True, gen=torch.Generator().manual_seed(5))
        # validation gradient for the quadratic check
        ref.zero_grad()
        lm_loss(ref(val[0]), val[1]).backward()
        Gval = {n: ref_p[n].grad.clone() for n in lnames}
        for name in lnames:
            P = Ps[name]
            f = svd_factors(P)
            U, s, Vh = f.U, f.s, f.Vh
            res = {}
            for tag, st in (("emp", emp), ("fis", fis)):
                Xi, Go = st[name]
                XV = Xi @ Vh.T  # N x r
                GU = Go @ U  # N x r
                N = XV.shape[0]
                A = XV.T @ XV / N
                Bm = GU.T @ GU / N
                pp = GU * XV
                Mpair = pp.T @ pp / N
                if tag == "emp":
                    res["input"] = best_a(s, s, torch.diag(torch.diag(A)))
                    res["input_full"] = best_a(s, s, A * torch.eye(len(s), dtype=s.dtype))
                res[f"kfac_{tag}"] = best_a(s, s, A * Bm)
                res[f"kdiag_{tag}"] = best_a(s, s, torch.diag(torch.diag(A) * torch.diag(Bm)))
                res[f"pair_{tag}"] = best_a(s, s, Mpair)
            # real decrease
            dec = {
                a: _real_decrease(
                    ref,
                    ref_p[name],
                    fractional_update(P, a, scale="polar", factors=f),
                    val,
                    eta_grid,
                )[0]
                for a in a_grid
            }
            a_best = max(a_grid, key=dec.get)
            top = dec[a_best]

            def real_at(a, P=P, f=f, ref=ref, p=ref_p[name], top=top):
                D = fractional_update(P, a, scale="polar", factors=f)
                return _real_decrease(ref, p, D, val, eta_grid)[0] / top if top > 0 else math.nan

            out = {k: (round(v, 2), round(real_at(v), 3)) for k, v in res.items()}
            print(seed, t_stop, name.replace("blocks.0.", ""), "best", a_best, out, flush=True)
            rows.append((seed, t_stop, name, a_best, out))
if len(sys.argv) > 2:
    torch.save(rows, sys.argv[2])
