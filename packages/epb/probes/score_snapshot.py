"""Scores of the shipped portfolios' programs and of the seed programs on fixed states, saved
to a file: run it on two versions of the code and compare the files bit for bit (issue 21: the
sandbox must not change what an honest program computes).

Usage: ``python packages/epb/probes/score_snapshot.py OUT.pt`` (then
``torch.equal`` every entry of two such files). States: 17 random TSP20 and 17 random CVRP20
instances (seed 3), six construction steps of random feasible moves each.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import torch

from epb.experiments.distill import CVRP_SEEDS, TSP_SEEDS
from epb.features import node_features
from epb.problems import RolloutState, random_instances
from epb.programs import compile_program

RESULTS = Path(__file__).resolve().parents[1] / "results"
FILES = {
    "tsp": ["tsp_full/portfolio_tsp20.py.txt", "tsp_full/portfolio_tsp50.py.txt"],
    "cvrp": ["cvrp_full/portfolio_cvrp20.py.txt"],
}


def sources(path: Path) -> list[str]:
    """The ``def score`` blocks of a rendered portfolio file."""
    blocks = re.split(r"^# \[.*$", path.read_text(), flags=re.M)
    return [b.strip() + "\n" for b in blocks if b.strip().startswith("def")]


def snapshot() -> dict:
    out = {}
    for kind, seeds in (("tsp", TSP_SEEDS), ("cvrp", CVRP_SEEDS)):
        g = torch.Generator().manual_seed(3)
        st = RolloutState.start(random_instances(kind, 17, 20, g))
        srcs = [s for f in FILES[kind] for s in sources(RESULTS / f)]
        srcs += [e.render() for e in seeds.values()]
        for t in range(6):
            feats = node_features(st)
            for i, s in enumerate(srcs):
                out[(kind, t, i)] = compile_program(s).scores(feats).clone()
            mask = st.feasible()
            u = torch.rand(mask.shape, generator=g)
            st = st.step(torch.where(mask, u, torch.full(mask.shape, -1.0)).argmax(-1))
    return out


if __name__ == "__main__":
    torch.save(snapshot(), sys.argv[1])
