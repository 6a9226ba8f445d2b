r"""POMO-style REINFORCE training of the attention teacher on CPU.

For each instance, :math:`P` rollouts are sampled from different first nodes; the shared baseline
is their mean cost, so the loss is

.. math:: \mathcal L(\theta) = \frac1{BP}\sum_{b,p} (L_{bp} - \bar L_b)\,
    \log p_\theta(\pi_{bp} \mid s_b, a^{(p)}_0),

with :math:`L` the tour (route) length and :math:`\bar L_b = \frac1P\sum_p L_{bp}`.

Command line (checkpoints the best validation model to ``--out`` after every epoch)::

    python -m epb.train --problem tsp --n 20 --epochs 30 --epoch-size 6400 --out teacher.pt
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch

from .policy import DATA, AttentionPolicy
from .problems import random_instances
from .rollout import greedy, multistart, rollout, start_nodes


def pomo_loss(policy: AttentionPolicy, inst, generator=None) -> tuple[torch.Tensor, float]:
    """POMO loss on one batch; returns ``(loss, mean sampled length)``."""
    starts = start_nodes(inst)
    p = len(starts)
    rows = inst.repeat(p)
    res = rollout(
        policy.bind(inst, p), rows, starts.repeat(inst.size), greedy=False, generator=generator
    )
    cost = res.lengths.view(inst.size, p)
    adv = (cost - cost.mean(1, keepdim=True)).detach()
    loss = (adv * res.log_prob.view(inst.size, p)).mean()
    return loss, float(cost.mean())


def train(
    kind: str = "tsp",
    n: int = 20,
    epochs: int = 30,
    epoch_size: int = 6400,
    batch: int = 64,
    lr: float = 1e-4 * 3,
    dim: int = 64,
    layers: int = 3,
    seed: int = 0,
    out: str | Path | None = None,
    init: str | Path | None = None,
    log=print,
) -> AttentionPolicy:
    """Train a teacher; returns the best model on a fixed validation set (multi-start)."""
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    pol = AttentionPolicy.load(init).train() if init else AttentionPolicy(kind, dim, layers)
    opt = torch.optim.Adam(pol.parameters(), lr=lr, weight_decay=1e-6)
    val = random_instances(kind, 256, n, torch.Generator().manual_seed(12345))
    best, t0 = float("inf"), time.time()
    for ep in range(epochs):
        pol.train()
        tot = 0.0
        for _ in range(epoch_size // batch):
            loss, mean_len = pomo_loss(pol, random_instances(kind, batch, n, gen), gen)
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(pol.parameters(), 1.0)
            opt.step()
            tot += mean_len
        pol.eval()
        ms = float(multistart(pol.bind, val).mean())
        g1 = float(greedy(pol.bind, val).mean())
        elapsed = time.time() - t0
        log(
            f"epoch {ep + 1}/{epochs} train_len {tot / (epoch_size // batch):.4f} "
            f"val_greedy {g1:.4f} val_multistart {ms:.4f} elapsed_s {elapsed:.0f}"
        )
        if ms < best and out is not None:
            best = ms
            pol.save(
                out,
                epochs=ep + 1,
                epoch_size=epoch_size,
                train_seconds=elapsed,
                val_multistart=ms,
                val_greedy=g1,
            )
    return pol


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--problem", default="tsp", choices=["tsp", "cvrp"])
    ap.add_argument("--n", type=int, default=20)
    ap.add_argument("--epochs", type=int, default=30)
    ap.add_argument("--epoch-size", type=int, default=6400)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--layers", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--init", default=None, help="checkpoint to continue from")
    ap.add_argument("--out", default=None)
    a = ap.parse_args(argv)
    out = a.out or DATA / f"teacher_{a.problem}{a.n}.pt"
    torch.set_num_threads(1)
    train(
        a.problem,
        a.n,
        a.epochs,
        a.epoch_size,
        a.batch,
        a.lr,
        a.dim,
        a.layers,
        a.seed,
        out,
        a.init,
        log=lambda s: print(s, flush=True),
    )


if __name__ == "__main__":
    main()
