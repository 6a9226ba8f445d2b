"""Step time of IMuon vs torch.optim.Muon (and Stiefel baselines), measured side by side.

Cases (full sizes; ``--quick`` shrinks them):

- Euclidean IMuon vs torch.optim.Muon on 1024x1024 and 4096x1024, twice: with the same 5
  bf16 Newton-Schulz steps as Muon (``polar="muon", polar_dtype=torch.bfloat16``, not
  IMuon's default) and with IMuon's defaults (exact float32 polar factor on a CPU);
- fixed-rank IMuon on a LoRA pair (A, B) of a 4096x4096 layer, rank 8 and 64, vs Muon on the
  two factors (IMuon's defaults, and with Muon's Newton-Schulz);
- SPD (512), Stiefel (1024x256) and Grassmann (1024x256) IMuon vs Muon on the same matrix;
- Stiefel IMuon vs manifold Muon by dual ascent (100 polar factors per step), 1024x256, with
  the objective <G, xi> and the tangency error of each;
- Stiefel IMuon vs geoopt RiemannianAdam (1024x256);
- optimizer-state memory (bytes of state tensors) vs Muon.

Ratios are candidate time / baseline time (shared_core.bench.compare, interleaved pairs). The
IMuon-vs-Muon cases also store process-CPU-time ratios of the same pairs (``cpu_ratio_*`` in
the JSON params; less sensitive than the wall clock to other jobs on a shared machine) and the
1-minute load average after each case. The JSON is rewritten after every case, so a run cut
short by a time cap keeps the cases it finished (Euclidean first, then fixed rank, then the
rest). ``--only-fixed`` runs just the fixed-rank cases,
``--only-euclidean`` just the Euclidean ones. The baseline is torch.optim.Muon as a user runs
it (bf16 Newton-Schulz), with ``weight_decay=0`` like IMuon's default (torch's default 0.1
would add a pass over the weights to the baseline only). The JSON records the machine
(``shared_core.bench``: CPU model and flags, BLAS, threads, measured GEMM rates).

    python packages/imuon/benchmarks/step_time.py --quick \
        --out packages/imuon/benchmarks/results/step_time_cpu_quick.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import torch

from imuon import IMuon, stiefel_lmo
from imuon.baselines import manifold_muon_dual_ascent
from shared_core.bench import compare, environment
from shared_core.manifolds import SPD, Stiefel

# One CPU thread for both sides: on the shared 2-core machine OpenMP regions of small LAPACK
# calls (orgqr in linalg.qr) spin under load and would dominate the fixed-rank step.
THREADS = 1
WARMUP = 3


def _param(t):
    p = torch.nn.Parameter(t.clone())
    p.grad = torch.randn_like(t) * 0.01
    return p


def _state_bytes(opt) -> int:
    return sum(
        v.numel() * v.element_size()
        for st in opt.state.values()
        for v in st.values()
        if torch.is_tensor(v)
    )


# Same 5 Newton-Schulz steps in bf16 as torch.optim.Muon (its coefficients and dtype).
SAME_NS = {"polar": "muon", "polar_dtype": torch.bfloat16}


def _cpu_timed(fn, sink):
    """``fn`` that also appends its process CPU time to ``sink``."""

    def run():
        t0 = time.process_time()
        fn()
        sink.append(time.process_time() - t0)

    return run


def _add_cpu_ratios(res, cpu_c, cpu_b, warmup):
    # compare() runs `warmup` calls of each side, then `repeats` pairs; pair k is
    # (cpu_c[warmup + k], cpu_b[warmup + k]). On a shared machine the wall clock counts time
    # spent waiting for a core; process CPU time does not (it still sees cache contention).
    ratios = sorted(c / b for c, b in zip(cpu_c[warmup:], cpu_b[warmup:], strict=True) if b > 0)
    if ratios:
        res.params["cpu_ratio_median"] = statistics.median(ratios)
        res.params["cpu_ratio_min"], res.params["cpu_ratio_max"] = ratios[0], ratios[-1]
        res.params["cpu_s_median_candidate"] = statistics.median(cpu_c[warmup:])
        res.params["cpu_s_median_baseline"] = statistics.median(cpu_b[warmup:])


def _pair_case(name, cand_params, cand_groups, base_params, repeats, device, extra=None, cand=None):
    cand = IMuon(cand_groups, lr=0.01, **(SAME_NS if cand is None else cand))
    base = torch.optim.Muon(base_params, lr=0.01, weight_decay=0.0)
    cpu_c, cpu_b = [], []
    res = compare(
        _cpu_timed(cand.step, cpu_c),
        _cpu_timed(base.step, cpu_b),
        name=name,
        warmup=WARMUP,
        repeats=repeats,
        device=device,
        threads=THREADS,
        params=extra or {},
    )
    _add_cpu_ratios(res, cpu_c, cpu_b, WARMUP)
    res.params["state_bytes_candidate"] = _state_bytes(cand)
    res.params["state_bytes_muon"] = _state_bytes(base)
    return res


class _Saved(list):
    """Results written to ``out`` after every case (and printed), so a run cut short by a time
    cap (the GPU pass runs this script under one) keeps what it measured. The environment,
    with shared_core.bench's machine record (CPU model and flags, BLAS, threads, a one-second
    GEMM probe per dtype), is taken once, before the first case."""

    def __init__(self, out: str, device: str, command: str):
        super().__init__()
        self.out, self.command = out, command
        self.env = environment(device, probe=True)

    def append(self, r) -> None:
        super().append(r)
        r.params["load_avg_1min_after_case"] = (
            os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
        )
        cpu = r.params.get("cpu_ratio_median")
        extra = "" if cpu is None else f"  cpu-time ratio {cpu:.3f}"
        print(
            f"{r.name:70s} ratio {r.ratio_median:.3f} [{r.ratio_min:.3f}, {r.ratio_max:.3f}]"
            f"{extra}",
            flush=True,
        )
        doc = {
            "environment": self.env,
            "results": [x.to_dict() for x in self],
            "command": self.command,
        }
        os.makedirs(os.path.dirname(os.path.abspath(self.out)), exist_ok=True)
        tmp = self.out + ".tmp"
        with open(tmp, "w") as f:
            json.dump(doc, f, indent=2)
        os.replace(tmp, self.out)  # never a half-written file


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--out", default="step_time.json")
    ap.add_argument("--only-fixed", action="store_true", help="only the fixed-rank LoRA cases")
    ap.add_argument("--only-euclidean", action="store_true", help="only the Euclidean cases")
    ap.add_argument("--repeats", type=int, default=None, help="timed pairs per case")
    args = ap.parse_args(argv)
    dev = args.device
    q = args.quick
    reps = args.repeats or (5 if q else 10)
    torch.manual_seed(0)
    results = _Saved(args.out, dev, "python " + " ".join(sys.argv))
    rest = not (args.only_fixed or args.only_euclidean)

    if not args.only_fixed:
        sizes = [(256, 256), (1024, 256)] if q else [(1024, 1024), (4096, 1024)]
        for m, n in sizes:
            w = torch.randn(m, n, device=dev)
            for label, kw in (("same NS as Muon", None), ("IMuon defaults", {})):
                results.append(
                    _pair_case(
                        f"euclidean {m}x{n} ({label})",
                        None,
                        [_param(w)],
                        [_param(w)],
                        reps,
                        dev,
                        cand=kw,
                    )
                )

    big, ranks = (1024, [8, 32]) if q else (4096, [8, 64])
    for r in ranks if not args.only_euclidean else []:
        a, b = torch.randn(big, r, device=dev), torch.randn(big, r, device=dev)
        # Two candidates: IMuon with Muon's own Newton-Schulz, and IMuon's defaults (exact
        # polar factors: SVD up to r = 32, the Gram route for the elongated blocks above).
        for label, kw in (("same NS as Muon", None), ("IMuon defaults", {})):
            results.append(
                _pair_case(
                    f"fixed-rank LoRA {big}x{big} r={r} ({label})",
                    None,
                    [{"params": [_param(a), _param(b)], "manifold": "fixed_rank"}],
                    [_param(a), _param(b)],
                    reps,
                    dev,
                    cand=kw,
                )
            )

    if rest:
        n_spd = 128 if q else 512
        s = SPD(n_spd).random_point(device=dev)
        results.append(
            _pair_case(
                f"SPD {n_spd}",
                None,
                [{"params": [_param(s)], "manifold": "spd"}],
                [_param(s)],
                reps,
                dev,
            )
        )
        n_st, p_st = (256, 64) if q else (1024, 256)
        x = Stiefel(n_st, p_st).random_point(device=dev)
        for kind in ("stiefel", "grassmann"):
            results.append(
                _pair_case(
                    f"{kind} {n_st}x{p_st}",
                    None,
                    [{"params": [_param(x)], "manifold": kind}],
                    [_param(x)],
                    reps,
                    dev,
                )
            )

        # Stiefel: closed form vs manifold Muon by dual ascent (one LMO call each).
        St = Stiefel(n_st, p_st)
        G = torch.randn(n_st, p_st, device=dev)
        rg = St.egrad2rgrad(x, G)
        iters = 100
        xi = stiefel_lmo(x, rg, polar="svd")
        xi_da, err_da = manifold_muon_dual_ascent(x, G, iters=iters)
        res = compare(
            lambda: stiefel_lmo(x, rg, polar="svd"),
            lambda: manifold_muon_dual_ascent(x, G, iters=iters),
            name=f"stiefel LMO closed form vs dual ascent ({iters} polars) {n_st}x{p_st}",
            repeats=max(3, reps // 2),
            warmup=1,
            device=dev,
            threads=THREADS,
        )
        res.params.update(
            objective_closed_form=float((G * xi).sum()),
            objective_dual_ascent=float((G * xi_da).sum()),
            tangency_closed_form=float((x.T @ xi + xi.T @ x).norm()),
            tangency_dual_ascent_before_projection=float(err_da),
            spectral_norm_closed_form=float(torch.linalg.matrix_norm(xi, 2)),
            spectral_norm_dual_ascent=float(torch.linalg.matrix_norm(xi_da, 2)),
        )
        # The two solve different problems (intrinsic ball vs ambient spectral ball); rescaled
        # into the ambient ball both are feasible for manifold Muon's problem.
        res.params["objective_closed_form_in_ambient_ball"] = (
            res.params["objective_closed_form"] / res.params["spectral_norm_closed_form"]
        )
        res.params["objective_dual_ascent_in_ambient_ball"] = res.params[
            "objective_dual_ascent"
        ] / max(1.0, res.params["spectral_norm_dual_ascent"])
        results.append(res)

        try:
            import geoopt

            gp = geoopt.ManifoldParameter(x.clone(), manifold=geoopt.Stiefel())
            gp.grad = torch.randn_like(x) * 0.01
            radam = geoopt.optim.RiemannianAdam([gp], lr=0.01)
            ours = IMuon([{"params": [_param(x)], "manifold": "stiefel"}], lr=0.01)
            results.append(
                compare(
                    ours.step,
                    radam.step,
                    name=f"stiefel iMuon vs geoopt RiemannianAdam {n_st}x{p_st}",
                    repeats=reps,
                    device=dev,
                    threads=THREADS,
                )
            )
        except ImportError:
            print("geoopt not installed: RiemannianAdam case skipped", file=sys.stderr)

    return 0


if __name__ == "__main__":
    raise SystemExit(main())
