"""Time single cells of the experiments' ``--full`` sizes, to estimate what a full run costs.

The ``--full`` runs (widths to 8192, 16-24 seeds) take hours; this times the cells that
dominate them, one temperature each, on 1 thread, and prints wall and CPU seconds:
two-layer training at widths 512 and 2048 (16 seeds, ``t_max = 1``), two depth-3 inits at
width 8192, and depth-3 training at width 1024 (2 seeds, ``t_max = 0.25``). The README
extrapolates from these (cost per cell grows about 3.9x per doubling of the width between 512
and 2048).

    OMP_NUM_THREADS=1 python packages/langevin-ntk/benchmarks/_full_cost.py
"""

import time

import torch

from langevin_ntk.experiments._common import make_data, train_ensemble
from langevin_ntk.experiments._deep import init_lambda_min, train_deep


def _clock(label: str, fn) -> None:
    t0, c0 = time.time(), time.process_time()
    info = fn()
    print(
        f"{label}{info} wall={time.time() - t0:.1f}s cpu={time.process_time() - c0:.1f}s",
        flush=True,
    )


def main() -> None:
    torch.set_num_threads(1)
    x, y = make_data(8, 32, 0)
    for m in (512, 2048):
        _clock(
            f"2-layer m={m} S=16 T=0.05 ",
            lambda m=m: f"steps={train_ensemble(x, y, m, 0.05, list(range(16)), t_max=1.0).steps}",
        )
    _clock("depth-3 init m=8192 x2 ", lambda: init_lambda_min(x, 8192, 3, [1, 2]) and "")
    _clock(
        "depth-3 train m=1024 S=2 T=0.05 ",
        lambda: f"steps={train_deep(x, y, 1024, 3, 0.05, [0, 1], t_max=0.25).steps}",
    )


if __name__ == "__main__":
    main()
