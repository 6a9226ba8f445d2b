"""Per-step time of `SMD` against `torch.optim.SGD` on a small model, interleaved A/B.

The model is a small causal-LM-shaped stack (embedding, two transformer encoder layers with
LayerNorms and biases, a head: 30 parameter tensors, 0.2 M numbers), the shape of model on
which the per-step overhead of a per-parameter Python loop shows. Gradients are drawn once and
kept, so only ``opt.step()`` is timed; each SMD configuration is timed against its own
``torch.optim.SGD(lr)`` (torch's default implementation choice) with
:func:`shared_core.bench.compare`, which alternates the two calls and takes the ratio pair by
pair (so load drift on a shared machine cancels).

Cases: the Euclidean map with the multi-tensor path (``foreach=True``, the default) and with
the per-parameter reference path (``foreach=False``, the algorithm of the first version), with
uniform averaging, and the p-norm map (``PNorm(1.5)``) both ways.

Usage: ``uv run --locked python packages/heavytail-sgd/benchmarks/smd_step.py [--quick]
--out OUT.json``.
"""

from __future__ import annotations

import argparse
import sys

import torch

from heavytail_sgd.optim import SMD
from shared_core.bench import compare, markdown_table, write_json
from shared_core.mirror import PNorm


def small_model(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    d = 64
    layer = dict(d_model=d, nhead=4, dim_feedforward=128, dropout=0.0, batch_first=True)
    return torch.nn.Sequential(
        torch.nn.Embedding(256, d),
        torch.nn.TransformerEncoderLayer(**layer),
        torch.nn.TransformerEncoderLayer(**layer),
        torch.nn.LayerNorm(d),
        torch.nn.Linear(d, 256),
    )


def _with_grads(model: torch.nn.Module, seed: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    params = list(model.parameters())
    for p in params:
        p.grad = torch.randn(p.shape, generator=g) * 1e-3
    return params


SCRIPT = "packages/heavytail-sgd/benchmarks/smd_step.py"

CASES = {
    "euclidean foreach": dict(foreach=True),
    "euclidean per-parameter": dict(foreach=False),
    "euclidean foreach, uniform average": dict(foreach=True, average="uniform"),
    "pnorm(1.5) foreach": dict(foreach=True, mirror="pnorm"),
    "pnorm(1.5) per-parameter": dict(foreach=False, mirror="pnorm"),
}


def run(smd_cls=SMD, *, quick: bool, cases=CASES) -> list:
    warmup, repeats = (5, 40) if quick else (20, 200)
    results = []
    for name, kw in cases.items():
        kw = dict(kw)
        if kw.get("mirror") == "pnorm":
            kw["mirror"] = PNorm(1.5)
        a, b = small_model(), small_model()
        pa, pb = _with_grads(a, 1), _with_grads(b, 1)
        smd = smd_cls(pa, lr=1e-3, **kw)
        sgd = torch.optim.SGD(pb, lr=1e-3)
        r = compare(
            smd.step,
            sgd.step,
            name=f"SMD {name} / torch.optim.SGD",
            warmup=warmup,
            repeats=repeats,
            threads=1,
            params={
                "tensors": len(pa),
                "numbers": sum(p.numel() for p in pa),
                **{k: repr(v) if k == "mirror" else v for k, v in kw.items()},
            },
        )
        results.append(r)
        print(f"{r.name}: {r.ratio_median:.2f}x [{r.ratio_min:.2f}, {r.ratio_max:.2f}]", flush=True)
    return results


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer repeats")
    ap.add_argument("--out", required=True, help="JSON file to write")
    args = ap.parse_args(argv)
    results = run(quick=args.quick)
    print(markdown_table(results))
    write_json(
        args.out,
        [r.to_dict() for r in results],
        command=" ".join(["python", SCRIPT, *sys.argv[1:]]),
        note="measured on a shared, loaded 2-core CPU; ratios are interleaved pair by pair",
    )


if __name__ == "__main__":
    main()
