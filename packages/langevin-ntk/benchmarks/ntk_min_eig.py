"""lambda_min of the empirical NTK: ``torch.func`` vs a per-sample autograd loop vs Lanczos.

Five routes to the same number on a depth-3 tanh MLP (standard parameterisation), float32:

- ``func``: ``langevin_ntk.jacobian`` (vmap of jacrev) -> ``K = J J^T`` -> ``eigvalsh``;
- ``loop``: ``langevin_ntk.ntk.jacobian_loop`` (one ``autograd.grad`` per sample) -> same;
- ``layerwise``: ``langevin_ntk.layerwise.layerwise_ntk``: ``torch.func.vjp`` with respect to
  probes on the pre-activations gives every sample's ``delta`` in one reverse pass, then
  ``K = sum_l (delta delta^T) * (h h^T)``: J never formed (works for any stack of
  ``nn.Linear``s too);
- ``structured``: ``langevin_ntk.ntk.mlp_ntk``: per-layer ``(delta delta^T) * (h h^T)`` Gram
  products, exact, J never formed (``O(n^2 width)`` work instead of ``O(n^2 P)``);
- ``lanczos``: ``ntk_min_eigenvalue(method="lanczos")``: implicit ``J (J^T v)`` products, J is
  never formed (memory: the Krylov basis, ``iters x n`` numbers, instead of ``n x P``).

Ratios are measured side by side with ``shared_core.bench.compare`` (1 thread). Memory: each
route also runs alone in a fresh interpreter (``--route``), which reports its peak RSS minus the
RSS after building the model and batch (the process high-water mark cannot separate routes
that share one process); the bytes of J and of the Lanczos basis are stated beside it.
Quick: n=128, width 256; full (the issue's size): n=512, width 1024 (J is 2.2 GB).

    python packages/langevin-ntk/benchmarks/ntk_min_eig.py --quick \
        --out reports/bench/langevin-ntk/ntk_min_eig.json
"""

from __future__ import annotations

import argparse
import json

import torch

from langevin_ntk import MLP, jacobian, ntk_min_eigenvalue
from langevin_ntk.layerwise import layerwise_ntk
from langevin_ntk.ntk import jacobian_loop, mlp_ntk
from shared_core.bench import compare, write_json


def _lam_min(j: torch.Tensor) -> float:
    return float(torch.linalg.eigvalsh((j @ j.T).double())[0])


#: case name -> (candidate route, baseline route); the ratio is candidate time / baseline time
CASES = {
    "func_vs_loop": ("func", "loop"),
    "layerwise_vs_loop": ("layerwise", "loop"),
    "structured_vs_loop": ("structured", "loop"),
    "lanczos_vs_func": ("lanczos", "func"),
}


def _eig_min(k: torch.Tensor) -> float:
    return float(torch.linalg.eigvalsh(k.double())[0])


def _sizes(full: bool) -> tuple[int, int, int]:
    return (512, 1024, 16) if full else (128, 256, 16)


def _one_route(route: str, full: bool) -> None:
    """Run one route in this (fresh) process and print its extra peak RSS in bytes.

    Linux: the peak (``VmHWM``) is reset through ``/proc/self/clear_refs`` after the setup, so
    the import's own transient peak does not hide the route's.
    """
    n, width, d_in = _sizes(full)

    def lam_min(net: MLP, x: torch.Tensor) -> float:
        if route == "func":
            return _lam_min(jacobian(net, x))
        if route == "structured":
            return float(torch.linalg.eigvalsh(mlp_ntk(net, x).double())[0])
        if route == "layerwise":
            return _eig_min(layerwise_ntk(net, x))
        return ntk_min_eigenvalue(net, x, method="lanczos", tol=1e-6)

    lam_min(MLP(d_in, 4, 3, "tanh"), torch.randn(3, d_in))  # load the route's code first
    net = MLP(d_in, width, 3, "tanh", generator=torch.Generator().manual_seed(0))
    x = torch.randn(n, d_in, generator=torch.Generator().manual_seed(1))
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    base = _status_bytes("VmRSS")
    lam = lam_min(net, x)
    peak = _status_bytes("VmHWM")
    print(json.dumps({"route": route, "extra_peak_rss_bytes": peak - base, "lambda_min": lam}))


def _status_bytes(key: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"{key} not in /proc/self/status")


def _memory(full: bool) -> list[dict]:
    import subprocess
    import sys

    out = []
    for route in ("func", "layerwise", "structured", "lanczos"):
        cmd = [sys.executable, __file__, "--route", route] + (["--full"] if full else [])
        res = subprocess.run(cmd, capture_output=True, text=True, check=True)
        out.append(json.loads(res.stdout.strip().splitlines()[-1]))
    return out


def main(argv: list[str] | None = None) -> int:
    import sys

    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(description=__doc__)
    size = p.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true")
    size.add_argument("--full", action="store_true")
    p.add_argument("--out", default="ntk_min_eig.json")
    p.add_argument("--cases", default=",".join(CASES), help="comma-separated subset of cases")
    p.add_argument("--skip-memory", action="store_true", help="no fresh-process memory runs")
    p.add_argument(
        "--route", choices=["func", "layerwise", "structured", "lanczos"], help=argparse.SUPPRESS
    )
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    if args.route:
        _one_route(args.route, args.full)
        return 0
    n, width, d_in = _sizes(args.full)
    repeats = 3
    torch.manual_seed(0)
    net = MLP(d_in, width, 3, "tanh", generator=torch.Generator().manual_seed(0))
    x = torch.randn(n, d_in)
    n_params = sum(q.numel() for q in net.parameters())
    params = {"n": n, "width": width, "depth": 3, "d_in": d_in, "P": n_params, "dtype": "float32"}
    routes = {
        "func": lambda: _lam_min(jacobian(net, x)),
        "loop": lambda: _lam_min(jacobian_loop(net, x)),
        "layerwise": lambda: _eig_min(layerwise_ntk(net, x)),
        "structured": lambda: _eig_min(mlp_ntk(net, x)),
        "lanczos": lambda: ntk_min_eigenvalue(net, x, method="lanczos", tol=1e-6),
    }
    cases = [c for c in CASES if c in args.cases.split(",")]
    if not cases:
        raise SystemExit(f"--cases must name some of {CASES}, got {args.cases!r}")
    results, extra = [], {"bytes_J": 4 * n * n_params, "bytes_lanczos_basis": 8 * n * n}
    used = {r for c in cases for r in CASES[c]}
    extra["lambda_min"] = {r: routes[r]() for r in sorted(used)}  # all routes agree on it
    for case in cases:
        cand, base = CASES[case]
        res = compare(
            routes[cand], routes[base], name=case, warmup=1, repeats=repeats, threads=1,
            params=params,
        )  # fmt: skip
        results.append(res)
        extra[f"speedup_{cand}_over_{base}"] = res.speedup
    if not args.skip_memory:
        extra["memory_by_route"] = _memory(args.full)
    write_json(args.out, results, command=" ".join(["python", __file__, *(argv or [])]), **extra)
    print(json.dumps({r.name: r.ratio_median for r in results} | extra, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
