"""Learning-rate grid probe for the default sizes of the `subspace` and `image` experiments.

Runs the experiments' own training functions (`imuon.experiments.subspace.run_one`,
`imuon.experiments.image.train`) at the rates given, on the default problem sizes, and writes
every rate's result per seed: what the experiments' best-of-grid selection hides (how close the
grid points are, whether the best one sits at an edge). One process thread.

    python packages/imuon/probes/lr_grid_probe.py subspace --seeds 0,1,2 \
        --grids '{"iMuon": [0.003, 0.01]}' --out probe.json

subspace: ||sin Theta||_F after 1000, 2000 and 3000 steps of each stream (n=100, p=5, batch 16;
stream seed = seed). image: final test accuracy (h=48, 30 epochs) for the data split of
``--split`` and model seeds ``split + s``, s in ``--seeds``, as the experiment does.
"""

from __future__ import annotations

import argparse
import json
import time

import torch


def probe_subspace(seeds: list[int], grids: dict[str, list[float]]) -> dict:
    from imuon.experiments.subspace import eigensolver, make_stream, run_one, sin_theta

    record, out = [1000, 2000, 3000], {}
    for seed in seeds:
        u, xs, x0 = make_stream(100, 5, 3000, 16, seed)
        row = {"start": sin_theta(x0, u), "exact eigensolver": eigensolver(u, xs, record)}
        for m, lrs in grids.items():
            for lr in lrs:
                row[f"{m} lr={lr:g}"] = run_one(m, lr, u, xs, x0, record)
                print(seed, m, lr, [round(v, 4) for v in row[f"{m} lr={lr:g}"]], flush=True)
        out[f"seed{seed}"] = row
    out["record"] = record
    return out


def probe_image(split: int, seeds: list[int], grids: dict[str, list[float]]) -> dict:
    from imuon.experiments.image import load_digits_split, train

    data, out = load_digits_split(split), {}
    for m, lrs in grids.items():
        for lr in lrs:
            runs = [train(m, lr, data, 48, 30, split + s) for s in seeds]
            accs = [r[0][-1] for r in runs]
            out[f"{m} lr={lr:g}"] = {
                "mean_final_acc": sum(accs) / len(accs),
                "per_seed": accs,
                "max_orth_error": max(r[1] for r in runs),
            }
            print(m, lr, round(sum(accs) / len(accs), 4), flush=True)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("experiment", choices=["subspace", "image"])
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--split", type=int, default=0, help="image: data split seed")
    p.add_argument("--grids", required=True, help='JSON: {"method": [lr, ...]}')
    p.add_argument("--out", required=True)
    a = p.parse_args()
    torch.set_num_threads(1)
    seeds, grids = [int(s) for s in a.seeds.split(",")], json.loads(a.grids)
    t0 = time.process_time()
    if a.experiment == "subspace":
        res = probe_subspace(seeds, grids)
    else:
        res = probe_image(a.split, seeds, grids)
    res["args"] = vars(a)
    res["cpu_s"] = time.process_time() - t0
    with open(a.out, "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
