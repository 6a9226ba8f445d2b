"""Step-time overhead of AdaptiveLMO vs a Muon step with the same polar routine; criterion cost;
memory of the statistics.

Candidate: ``AdaptiveLMO(exponent="auto", update_every=K)``; baseline: the same optimizer with
``exponent=0.0`` (Muon with the same polar routine, ``method``). Each timed call is K full
training steps (forward with hooks, backward, optimizer step), so the criterion's cost is
amortised as in training; candidate and baseline are interleaved by
``shared_core.bench.compare``. The criterion's own cost (the curvature from the sketch plus
the exponent choice, per layer, given the SVD) is timed separately, and the sketch's bytes
are read from ``AdaptiveLMO.stats_nbytes()`` after a forward and backward on a criterion step
(with ``--curvature kfac``, the default, the sketch holds input rows and output-gradient rows,
and the criterion builds the two ``r x r`` factors of the K-FAC curvature).

    python packages/adaptive-lmo/benchmarks/bench_overhead.py --quick --device cpu \
        --out packages/adaptive-lmo/benchmarks/results/overhead_cpu_quick.json
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time

import torch
import torch.nn.functional as F
from torch import nn

from adaptive_lmo import (
    AdaptiveLMO,
    choose_exponent,
    curvature_along,
    kfac_curvature,
    svd_factors,
)
from shared_core.bench import compare, time_fn, write_json


def mlp(width: int, depth: int, device: str) -> nn.Module:
    torch.manual_seed(0)
    layers: list[nn.Module] = []
    for _ in range(depth):
        layers += [nn.Linear(width, width), nn.GELU()]
    return nn.Sequential(*layers, nn.Linear(width, 10)).to(device)


class Batches:
    """Fresh random batches (Gaussian inputs, uniform labels of 10 classes) from a seeded stream.

    Not one fixed batch: a fixed batch is memorised within about 50 steps, after which the
    gradients underflow, the criterion is skipped and float32 denormals slow every kernel, a
    regime real training never times. Random labels keep the loss near log 10 for good.
    """

    def __init__(self, width: int, device: str, seed: int = 0, batch: int = 256) -> None:
        self.gen = torch.Generator(device=device).manual_seed(seed)
        self.width, self.device, self.batch = width, device, batch

    def __call__(self) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.randn(self.batch, self.width, generator=self.gen, device=self.device)
        y = torch.randint(0, 10, (self.batch,), generator=self.gen, device=self.device)
        return x, y


def steps_fn(model: nn.Module, opt: AdaptiveLMO, batches: Batches, k: int):
    def run() -> None:
        for _ in range(k):
            x, y = batches()
            opt.zero_grad()
            F.cross_entropy(model(x), y).backward()
            opt.step()

    return run


def cpu_time_ratios(cand, base, repeats: int) -> dict[str, float]:
    """Interleaved pairs timed by process CPU time (robust to other jobs on a shared machine)."""
    ratios, tc, tb = [], [], []
    for i in range(repeats):
        pair = ((cand, tc), (base, tb)) if i % 2 == 0 else ((base, tb), (cand, tc))
        for fn, acc in pair:
            t = time.process_time()
            fn()
            acc.append(time.process_time() - t)
        ratios.append(tc[-1] / tb[-1])
    return {
        "cpu_time_ratio_median": statistics.median(ratios),
        "cpu_time_ratio_min": min(ratios),
        "cpu_time_ratio_max": max(ratios),
        "candidate_cpu_s_median": statistics.median(tc),
        "baseline_cpu_s_median": statistics.median(tb),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--out", default="packages/adaptive-lmo/benchmarks/results/overhead.json")
    ap.add_argument("--method", default="svd", choices=["svd", "iterative"])
    ap.add_argument("--update-every", type=int, default=10)
    ap.add_argument("--stats", default="next_batch", choices=["next_batch", "same_batch"])
    ap.add_argument("--curvature", default="kfac", choices=["kfac", "input"])
    ap.add_argument("--switch-confidence", type=float, default=0.975, help="0 turns the test off")
    ap.add_argument("--repeats", type=int, default=None, help="default 5 (--quick) or 10")
    args = ap.parse_args(argv)
    widths = [256] if args.quick else [512, 1024]
    repeats = args.repeats or (5 if args.quick else 10)
    k = args.update_every
    results = []
    extra = []
    for width in widths:
        base_model = mlp(width, 3, args.device)
        # one stream per arm, same seed: both see the same batches
        b_c, b_b = Batches(width, args.device), Batches(width, args.device)
        m_c, m_b = copy.deepcopy(base_model), copy.deepcopy(base_model)
        kw = {"lr": 0.02, "method": args.method, "update_every": k, "stats": args.stats}
        o_c = AdaptiveLMO(
            m_c,
            exponent="auto",
            curvature=args.curvature,
            switch_confidence=args.switch_confidence,
            **kw,
        )
        o_b = AdaptiveLMO(m_b, exponent=0.0, **kw)
        r = compare(
            steps_fn(m_c, o_c, b_c, k),
            steps_fn(m_b, o_b, b_b, k),
            name=f"adaptive_vs_muon_w{width}_k{k}_{args.method}",
            repeats=repeats,
            warmup=1,
            device=args.device,
            params={
                "width": width,
                "depth": 3,
                "batch": 256,
                "update_every": k,
                "method": args.method,
                "steps_per_call": k,
            },
        )
        results.append(r)
        if args.device == "cpu":
            cpu = cpu_time_ratios(steps_fn(m_c, o_c, b_c, k), steps_fn(m_b, o_b, b_b, k), repeats)
            extra.append({"name": f"cpu_time_adaptive_vs_muon_w{width}_k{k}", **cpu})
            print(
                f"w={width}: CPU-time ratio {cpu['cpu_time_ratio_median']:.3f} "
                f"[{cpu['cpu_time_ratio_min']:.3f}, {cpu['cpu_time_ratio_max']:.3f}]"
            )
        # criterion's own cost for one layer, given the SVD (what a criterion step adds)
        W = m_c[2].weight
        G = torch.randn_like(W)
        f = svd_factors(G)
        X = torch.randn(256, width, device=args.device)
        Go = torch.randn(256, W.shape[0], device=args.device)

        def criterion(f=f, X=X, Go=Go):
            if args.curvature == "kfac":
                return choose_exponent(f.s, kfac_curvature(f.U, f.Vh, X, Go))
            return choose_exponent(f.s, curvature_along(f.Vh, X))

        crit = time_fn(criterion, repeats=repeats, device=args.device)
        step = time_fn(steps_fn(m_b, o_b, b_b, 1), repeats=repeats, device=args.device)
        t0 = time.process_time()
        for _ in range(repeats):
            criterion()
        crit_cpu = (time.process_time() - t0) / repeats
        t0 = time.process_time()
        steps_fn(m_b, o_b, b_b, repeats)()
        step_cpu = (time.process_time() - t0) / repeats
        # sketch memory on a criterion step (forward and backward done, step not yet taken)
        while o_c._collector.due == set():  # advance to a criterion step
            steps_fn(m_c, o_c, b_c, 1)()
        x, y = b_c()
        o_c.zero_grad()
        F.cross_entropy(m_c(x), y).backward()
        sketch = o_c.stats_nbytes()
        matrices = sum(p.numel() * p.element_size() for p in m_c.parameters() if p.ndim == 2)
        extra.append(
            {
                "name": f"criterion_cost_w{width}",
                "curvature": args.curvature,
                "criterion_per_layer_median_s": crit.median_s,
                "muon_train_step_median_s": step.median_s,
                "criterion_per_layer_over_step": crit.median_s / step.median_s,
                "criterion_per_layer_cpu_s": crit_cpu,
                "muon_train_step_cpu_s": step_cpu,
                "criterion_per_layer_over_step_cpu": crit_cpu / step_cpu,
                "sketch_bytes_on_criterion_steps": sketch,
                "matrix_param_bytes": matrices,
                "sketch_over_matrix_params": sketch / matrices,
                "persistent_state_extra": "one float exponent per layer (same momentum as Muon)",
            }
        )
        print(
            f"w={width}: ratio {r.ratio_median:.3f} [{r.ratio_min:.3f}, {r.ratio_max:.3f}]; "
            f"criterion/layer {crit.median_s * 1e3:.2f} ms vs step {step.median_s * 1e3:.1f} ms;"
            f" sketch {sketch} B ({sketch / matrices:.3f} of matrix params)"
        )
    cmd = "python packages/adaptive-lmo/benchmarks/bench_overhead.py " + " ".join(
        argv if argv is not None else __import__("sys").argv[1:]
    )
    write_json(args.out, [*results, *extra], device=args.device, command=cmd)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
