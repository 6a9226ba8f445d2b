"""MoE layer forward+backward throughput: batched dispatch vs a per-expert loop vs a dense MLP.

Three callables on the same tokens (float32, CPU unless --device cuda), each one forward and
one backward of ``sum(out**2)``:

* ``moe``: :class:`mssp.MoELayer` (sort + padded ``bmm`` dispatch, one ``index_add`` combine);
* ``loop``: the same layer's weights run the textbook way, a Python loop over experts with a
  boolean mask per expert (no loop over tokens);
* ``dense``: a two-layer MLP of hidden width ``K * N_e``, i.e. the same active parameters per
  token (what each token's forward pass multiplies through).

Ratios come from :func:`shared_core.bench.compare` (interleaved pairs, median [min, max]);
``moe/loop < 1`` means the batched dispatch is faster than the loop, ``moe/dense`` is the price
of routing over a dense layer with the same per-token compute.

    python packages/mssp/benchmarks/moe_speed.py [--quick] [--out results/moe_speed.json]
"""

from __future__ import annotations

import argparse

import torch

from mssp import MoELayer
from mssp.routing import topk_route
from shared_core.bench import compare, markdown_table, write_json


def loop_moe(layer: MoELayer, h: torch.Tensor) -> torch.Tensor:
    """Per-expert loop with masks (the naive baseline), same math as ``layer(h)``."""
    x = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6) if layer.norm else h
    logits = layer.mult_router * (x @ layer.router.T)
    index, gate = topk_route(logits, layer.k, renormalize=layer.renormalize)
    out = torch.zeros_like(h)
    for e in range(layer.m):
        hit = index == e  # (T, K)
        rows = hit.any(1)
        if not bool(rows.any()):
            continue
        g = (gate * hit).sum(1)[rows].unsqueeze(-1)
        u = layer.mult1 * (x[rows] @ layer.w1[e].T)
        y = layer.mult2 * (torch.relu(u) @ layer.w2[e].T)
        out = out.index_add(0, rows.nonzero().squeeze(1), g * y)
    return layer.mult_agg * out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", default=None)
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args(argv)
    shapes = (
        [(256, 64, 16, 2, 512)]
        if args.quick
        else [(256, 64, 16, 2, 2048), (512, 128, 32, 4, 2048), (256, 256, 8, 1, 2048)]
    )
    results = []
    for n, ne, m, k, t in shapes:
        torch.manual_seed(0)
        layer = MoELayer(n, ne, m, k).to(args.device)
        dense = torch.nn.Sequential(
            torch.nn.Linear(n, k * ne, bias=False),
            torch.nn.ReLU(),
            torch.nn.Linear(k * ne, n, bias=False),
        ).to(args.device)
        h = torch.randn(t, n, device=args.device, requires_grad=True)

        def fb(f, h=h):
            def call():
                out = f(h)
                out.pow(2).sum().backward()

            return call

        torch.testing.assert_close(layer(h), loop_moe(layer, h), rtol=1e-4, atol=1e-5)
        params = {"N": n, "N_e": ne, "M": m, "K": k, "tokens": t}
        reps = 5 if args.quick else 15
        results.append(
            compare(
                fb(layer),
                fb(lambda x, layer=layer: loop_moe(layer, x)),
                name=f"moe/loop {params}",
                repeats=reps,
                device=args.device,
                threads=1,
                params=params,
            )
        )
        results.append(
            compare(
                fb(layer),
                fb(dense),
                name=f"moe/dense {params}",
                repeats=reps,
                device=args.device,
                threads=1,
                params=params,
            )
        )
    print(markdown_table(results))
    for r in results:
        tok_s = r.params["tokens"] / r.candidate.median_s
        print(f"{r.name}: MoE fwd+bwd {tok_s:,.0f} tokens/s")
    if args.out:
        write_json(args.out, results, device=args.device)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
