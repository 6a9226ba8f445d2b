r"""Classic construction heuristics: full tour builders (for optimality gaps) and their
step rules (for reading which heuristic a program resembles).

Full builders (batched, torch):

* :func:`nearest_neighbour` — always go to the closest unvisited node.
* :func:`insertion` with ``rule`` in ``{"nearest", "farthest", "cheapest"}`` — grow a closed
  tour; pick the node nearest to / farthest from the tour, or the one with the cheapest
  insertion, and insert it where the tour grows least,
  :math:`\min_{(a,b)} d_{aj} + d_{jb} - d_{ab}`.
* :func:`cvrp_nearest_neighbour` and :func:`savings` (Clarke--Wright, parallel version) for CVRP.

Step rules score the next node of a *path* construction from the same state the programs see
(features of :mod:`epb.features`); an insertion heuristic's selection criterion becomes a rule
"append the node it would insert next". :data:`STEP_RULES` maps names to these scoring functions.

Example:
    >>> import torch
    >>> from epb.problems import random_tsp
    >>> inst = random_tsp(3, 12, torch.Generator().manual_seed(0))
    >>> bool((insertion(inst, "farthest") <= nearest_neighbour(inst) * 1.5).all())
    True
"""

from __future__ import annotations

import torch
from torch import Tensor

from .problems import Instances, RolloutState


def nearest_neighbour_step(st: RolloutState) -> Tensor:
    """Step function: scores ``-d(current, j)``."""
    return -st.dist[torch.arange(st.current.shape[0]), st.current]


def nearest_neighbour(inst: Instances, start: int = 0) -> Tensor:
    """Nearest-neighbour tour lengths ``(B,)`` from node ``start``."""
    from .rollout import rollout

    first = torch.full((inst.size,), start, dtype=torch.long)
    return rollout(nearest_neighbour_step, inst, first if inst.kind == "tsp" else None).lengths


def insertion(inst: Instances, rule: str = "farthest") -> Tensor:
    """Insertion-heuristic tour lengths ``(B,)`` (TSP); ``rule`` selects the next node."""
    if rule not in ("nearest", "farthest", "cheapest"):
        raise ValueError(f"rule must be nearest/farthest/cheapest, got {rule!r}")
    d = inst.dist()
    b, n = inst.size, inst.n
    rows = torch.arange(b)
    in_tour = torch.zeros(b, n, dtype=torch.bool)
    succ = torch.zeros(b, n, dtype=torch.long)
    in_tour[:, 0] = True
    mind = d[:, 0].clone()
    for _ in range(n - 1):
        # insertion cost of j after a: d[a, j] + d[j, succ a] - d[a, succ a]
        ds = d.gather(1, succ[:, :, None].expand(-1, -1, n))  # d[succ a, j] == d[j, succ a]
        dab = d[rows[:, None], torch.arange(n)[None], succ]
        cost = d + ds - dab[:, :, None]
        cost = cost.masked_fill(~in_tour[:, :, None], float("inf"))
        best_cost, best_a = cost.min(1)  # over a: (B, n)
        if rule == "nearest":
            crit = mind.masked_fill(in_tour, float("inf"))
            j = crit.argmin(1)
        elif rule == "farthest":
            crit = mind.masked_fill(in_tour, -float("inf"))
            j = crit.argmax(1)
        else:
            j = best_cost.masked_fill(in_tour, float("inf")).argmin(1)
        a = best_a[rows, j]
        if in_tour.sum(1)[0] == 1:
            a = torch.zeros_like(a)
        succ[rows, j] = succ[rows, a]
        succ[rows, a] = j
        in_tour[rows, j] = True
        mind = torch.minimum(mind, d[rows, j])
    return d[rows[:, None], torch.arange(n)[None], succ].sum(1)


def cvrp_nearest_neighbour(inst: Instances, return_actions: bool = False):
    """CVRP nearest neighbour: the closest customer that fits, else back to the depot (lengths
    ``(B,)``; with ``return_actions`` also the node sequences ``(B, T)``)."""
    from .rollout import rollout

    def step(st):
        s = nearest_neighbour_step(st)
        cust = st.feasible().clone()
        cust[:, 0] = False
        # only return to the depot when no customer fits
        s = s.clone()
        s[:, 0] = torch.where(cust.any(1), torch.full_like(s[:, 0], -1e9), s[:, 0])
        return s

    res = rollout(step, inst)
    return (res.lengths, res.actions) if return_actions else res.lengths


def savings(inst: Instances) -> Tensor:
    """Clarke--Wright parallel savings route lengths ``(B,)`` for CVRP (merge routes end to end
    in decreasing order of :math:`s_{ij} = d_{0i} + d_{0j} - d_{ij}` while capacity allows; the
    construction itself is :func:`epb.localsearch.savings_routes`)."""
    from .localsearch import savings_routes, solution_length

    out = []
    for b, routes in enumerate(savings_routes(inst)):
        c = inst.coords[b].double()
        out.append(solution_length(routes, torch.cdist(c, c).numpy()))
    return torch.tensor(out, dtype=inst.coords.dtype)


# step rules on the feature dictionary of epb.features (higher score = preferred)
STEP_RULES = {
    "nearest neighbour": lambda f: -f["d_cur"],
    "nearest insertion": lambda f: -f["min_to_visited"],
    "farthest insertion": lambda f: f["min_to_visited"],
    "cheapest insertion (at the open end)": lambda f: -f["detour"],
    "farthest from depot/first": lambda f: f["d_first"],
    "savings": lambda f: f["d_cur_first"] + f["d_depot"] - f["d_cur"],
}

# CVRP-only step rules (used for reading CVRP portfolios)
CVRP_STEP_RULES = {
    "Clarke-Wright routes (follow a savings link, nearest first)": lambda f: (
        10.0 * f["cw_link"] - f["d_cur"]
    ),
}
