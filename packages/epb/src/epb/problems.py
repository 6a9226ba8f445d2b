r"""Routing problems as batched, step-by-step construction environments (TSP and CVRP).

A *construction* policy builds a solution one node at a time. Every policy in this package (the
neural teacher, the program portfolio, the classic step rules) sees the same
:class:`RolloutState` and returns a distribution over the ``n`` nodes; infeasible nodes get
probability zero through :meth:`RolloutState.feasible`.

* TSP: ``coords`` is ``(B, n, 2)`` in the unit square; the tour starts at a chosen node and
  closes back to it. Length :math:`\sum_t \|x_{\pi_t} - x_{\pi_{t+1}}\|` (cyclic).
* CVRP: node 0 is the depot, nodes ``1..n-1`` are customers with demands given as fractions of the
  vehicle capacity; a route returns to the depot to reload (remaining capacity back to 1).
  Capacities follow the usual convention (30 for 20 customers, 40 for 50, 50 for 100) with
  integer demands in ``1..9``.

Example:
    >>> inst = random_tsp(4, 10, generator=torch.Generator().manual_seed(0))
    >>> st = RolloutState.start(inst, torch.zeros(4, dtype=torch.long))
    >>> while not st.done():
    ...     st = st.step(st.feasible().float().argmax(-1))
    >>> bool((st.total_length() > 0).all())
    True
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
from torch import Tensor

CVRP_CAPACITY = {10: 20.0, 20: 30.0, 50: 40.0, 100: 50.0}


@dataclass(frozen=True)
class Instances:
    """A batch of routing instances.

    Args:
        coords: ``(B, n, 2)`` node coordinates (CVRP: node 0 is the depot).
        demand: ``None`` for TSP; for CVRP ``(B, n)`` demands as fractions of capacity, 0 at the
            depot.
    """

    coords: Tensor
    demand: Tensor | None = None

    @property
    def kind(self) -> str:
        return "tsp" if self.demand is None else "cvrp"

    @property
    def size(self) -> int:
        return self.coords.shape[0]

    @property
    def n(self) -> int:
        return self.coords.shape[1]

    def dist(self) -> Tensor:
        """``(B, n, n)`` Euclidean distance matrix."""
        return torch.cdist(self.coords, self.coords)

    def index(self, idx: Tensor | slice) -> Instances:
        return Instances(self.coords[idx], None if self.demand is None else self.demand[idx])

    def repeat(self, p: int) -> Instances:
        """Each instance repeated ``p`` times consecutively (row ``r`` is instance ``r // p``)."""
        d = None if self.demand is None else self.demand.repeat_interleave(p, 0)
        out = Instances(self.coords.repeat_interleave(p, 0), d)
        # per-instance caches (e.g. epb.localsearch.savings_structure) are derived from the parent
        object.__setattr__(out, "_repeat_of", (self, p))
        return out


def random_tsp(batch: int, n: int, generator: torch.Generator | None = None) -> Instances:
    """``batch`` TSP instances with ``n`` nodes uniform in the unit square."""
    return Instances(torch.rand(batch, n, 2, generator=generator))


def cvrp_capacity(customers: int) -> float:
    """Vehicle capacity (in demand units) used by :func:`random_cvrp` for ``customers`` nodes."""
    return CVRP_CAPACITY.get(customers, 30.0 + 10.0 * (customers // 50))


def random_cvrp(batch: int, customers: int, generator: torch.Generator | None = None) -> Instances:
    """``batch`` CVRP instances: depot + ``customers`` nodes uniform in the unit square, integer
    demands uniform in ``1..9`` divided by the capacity of :data:`CVRP_CAPACITY`."""
    cap = cvrp_capacity(customers)
    coords = torch.rand(batch, customers + 1, 2, generator=generator)
    dem = torch.randint(1, 10, (batch, customers + 1), generator=generator).float() / cap
    dem[:, 0] = 0.0
    return Instances(coords, dem)


def random_instances(
    kind: str, batch: int, n: int, generator: torch.Generator | None = None
) -> Instances:
    """TSP with ``n`` nodes or CVRP with ``n`` customers."""
    if kind == "tsp":
        return random_tsp(batch, n, generator)
    if kind == "cvrp":
        return random_cvrp(batch, n, generator)
    raise ValueError(f"unknown problem kind {kind!r} (expected 'tsp' or 'cvrp')")


@dataclass(frozen=True)
class RolloutState:
    """The state of ``R`` partial solutions (one row each), immutable; :meth:`step` returns a new
    state.

    Attributes:
        inst: the row instances. dist: ``(R, n, n)``. visited: ``(R, n)`` bool (CVRP: customers
        served; the depot is never marked). current / first: ``(R,)`` node indices (CVRP:
        ``first`` is the depot 0). remaining: ``(R,)`` remaining capacity fraction (TSP: ones).
        t: number of actions taken. length: ``(R,)`` distance travelled so far.
    """

    inst: Instances
    dist: Tensor
    visited: Tensor
    current: Tensor
    first: Tensor
    remaining: Tensor
    t: int
    length: Tensor

    @staticmethod
    def start(inst: Instances, first: Tensor | None = None, dist: Tensor | None = None):
        """Initial state. TSP: the tour starts at ``first`` (default node 0), already visited.
        CVRP: the vehicle is at the depot with full capacity (``first`` is ignored; use
        :meth:`step` to force a first customer)."""
        r, n = inst.size, inst.n
        dev = inst.coords.device
        d = inst.dist() if dist is None else dist
        visited = torch.zeros(r, n, dtype=torch.bool, device=dev)
        if inst.kind == "tsp":
            f = torch.zeros(r, dtype=torch.long, device=dev) if first is None else first.long()
            visited[torch.arange(r, device=dev), f] = True
        else:
            f = torch.zeros(r, dtype=torch.long, device=dev)
        zeros = torch.zeros(r, device=dev, dtype=inst.coords.dtype)
        return RolloutState(inst, d, visited, f.clone(), f, zeros + 1.0, 0, zeros)

    @property
    def n(self) -> int:
        return self.inst.n

    def all_served(self) -> Tensor:
        """``(R,)`` whether every customer (TSP: node) has been visited."""
        if self.inst.kind == "tsp":
            return self.visited.all(-1)
        return self.visited[:, 1:].all(-1)

    def done(self) -> bool:
        if self.inst.kind == "tsp":
            return bool(self.all_served().all())
        return bool((self.all_served() & (self.current == 0)).all())

    def feasible(self) -> Tensor:
        """``(R, n)`` bool mask of allowed next nodes (never empty)."""
        if self.inst.kind == "tsp":
            m = ~self.visited
            fin = self.all_served()
            if fin.any():  # finished rows: a dummy "stay" action keeps shapes regular
                m = m.clone()
                m[fin, :] = False
                m[fin, self.current[fin]] = True
            return m
        fits = self.inst.demand <= self.remaining[:, None] + 1e-6
        m = ~self.visited & fits
        m[:, 0] = self.current != 0
        fin = self.all_served()
        m[fin, :] = False
        m[fin, 0] = True
        return m

    def step(self, action: Tensor) -> RolloutState:
        """Move every row to ``action`` (assumed feasible)."""
        rows = torch.arange(action.shape[0], device=action.device)
        step_len = self.dist[rows, self.current, action]
        visited = self.visited.clone()
        visited[rows, action] = True
        remaining = self.remaining
        if self.inst.kind == "cvrp":
            visited[:, 0] = False
            dem = self.inst.demand[rows, action]
            remaining = torch.where(action == 0, torch.ones_like(remaining), remaining - dem)
        return replace(
            self,
            visited=visited,
            current=action,
            remaining=remaining,
            t=self.t + 1,
            length=self.length + step_len,
        )

    def total_length(self) -> Tensor:
        """Distance so far plus the closing edge back to ``first`` (TSP) / the depot (CVRP)."""
        rows = torch.arange(self.current.shape[0], device=self.current.device)
        return self.length + self.dist[rows, self.current, self.first]

    def expected_steps(self) -> int:
        """Actions in a full TSP tour after the start node (CVRP: an upper bound)."""
        return self.n - 1 if self.inst.kind == "tsp" else 2 * self.n


def tour_length(coords: Tensor, tour: Tensor) -> Tensor:
    """Length of the closed tours ``tour`` (``(B, L)`` node indices) on ``coords`` ``(B, n, 2)``;
    for CVRP pass the node sequence including depot visits."""
    pts = coords.gather(1, tour[..., None].expand(-1, -1, 2))
    return (pts - pts.roll(-1, dims=1)).norm(dim=-1).sum(-1)
