r"""CVRP building blocks beyond one-step scoring: the Clarke--Wright savings construction as a
primitive (its routes, and the per-node links that programs may read) and a local search that
improves any finished solution.

**Savings construction.** :func:`savings_routes` is the parallel Clarke--Wright algorithm: start
with one route per customer and merge two routes end to end, in decreasing order of the saving
:math:`s_{ij} = d_{0i} + d_{0j} - d_{ij}`, whenever ``i`` and ``j`` are ends of different routes
and the merged load fits. :func:`savings_structure` turns the result into what a program can use
at a construction step (features ``cw_link`` and ``cw_route`` of :mod:`epb.features`): which
edges the savings solution uses and which customers it puts on the same route. It is computed
once per instance and cached on the :class:`~epb.problems.Instances` object (repeated rows reuse
the unique instances' result).

**Local search** (:func:`improve`), best improvement over three neighbourhoods until no move
shortens the solution (each accepted move shortens it by more than ``1e-9``, so it terminates):

* *2-opt within a route*: reverse a segment of the route (depot at both ends), gain
  :math:`d_{p_i p_{i+1}} + d_{p_j p_{j+1}} - d_{p_i p_j} - d_{p_{i+1} p_{j+1}}`;
* *relocate*: move a customer to another position of any route or to a new route, if the target
  route's load allows;
* *exchange*: swap two customers of different routes, if both loads allow.

The same :func:`improve` is applied to every method's solution in the CVRP experiment (the
teacher's, the portfolio's, nearest neighbour's and Clarke--Wright's), one call per instance, so
the comparison after local search is like for like.

Example:
    >>> import torch
    >>> from epb.problems import random_cvrp
    >>> inst = random_cvrp(2, 12, torch.Generator().manual_seed(0))
    >>> d, dem = inst.dist()[0].double().numpy(), inst.demand[0].double().numpy()
    >>> routes = savings_routes(inst)[0]
    >>> better = improve(routes, d, dem)
    >>> solution_length(better, d) <= solution_length(routes, d) + 1e-12
    True
"""

from __future__ import annotations

import itertools

import numpy as np
import torch
from torch import Tensor

from .problems import Instances

EPS = 1e-9
CAP_EPS = 1e-6

Routes = list[list[int]]


def solution_length(routes: Routes, d: np.ndarray) -> float:
    """Total length of ``routes`` (each leaves and returns to the depot 0)."""
    total = 0.0
    for r in routes:
        if r:
            path = [0, *r, 0]
            total += float(sum(d[a, b] for a, b in itertools.pairwise(path)))
    return total


def routes_from_actions(actions) -> Routes:
    """Split a CVRP node sequence (depot visits as 0, trailing zeros allowed) into routes."""
    routes, cur = [], []
    for a in list(actions):
        a = int(a)
        if a == 0:
            if cur:
                routes.append(cur)
            cur = []
        else:
            cur.append(a)
    if cur:
        routes.append(cur)
    return routes


def savings_routes_one(d: np.ndarray, dem: np.ndarray) -> Routes:
    """Clarke--Wright parallel savings for one instance (``d`` ``(n, n)``, ``dem`` ``(n,)``)."""
    n = d.shape[0]
    route_of = list(range(n))
    routes: dict[int, list[int]] = {i: [i] for i in range(1, n)}
    load = {i: float(dem[i]) for i in range(1, n)}
    iu, ju = np.triu_indices(n - 1, 1)
    iu, ju = iu + 1, ju + 1
    s = d[0, iu] + d[0, ju] - d[iu, ju]
    for k in np.argsort(-s, kind="stable"):
        i, j = int(iu[k]), int(ju[k])
        ri, rj = route_of[i], route_of[j]
        if ri == rj or load[ri] + load[rj] > 1.0 + CAP_EPS:
            continue
        a, c = routes[ri], routes[rj]
        if a[-1] == i and c[0] == j:
            new = a + c
        elif a[0] == i and c[-1] == j:
            new = c + a
        elif a[0] == i and c[0] == j:
            new = a[::-1] + c
        elif a[-1] == i and c[-1] == j:
            new = a + c[::-1]
        else:
            continue
        routes[ri] = new
        load[ri] += load[rj]
        del routes[rj], load[rj]
        for v in new:
            route_of[v] = ri
    return list(routes.values())


def _np(inst: Instances, b: int) -> tuple[np.ndarray, np.ndarray]:
    c = inst.coords[b].double()
    return torch.cdist(c, c).numpy(), inst.demand[b].double().numpy()


def savings_routes(inst: Instances) -> list[Routes]:
    """Clarke--Wright routes of every instance of a CVRP batch."""
    return [savings_routes_one(*_np(inst, b)) for b in range(inst.size)]


def savings_structure(inst: Instances) -> tuple[Tensor, Tensor]:
    """``(link, route)`` of the Clarke--Wright solution of each row: ``link`` ``(B, n, n)`` bool,
    true for the edges it uses (depot edges included, symmetric); ``route`` ``(B, n)`` long, the
    index of the route serving each customer (``-1`` for the depot). Cached on ``inst``."""
    cached = inst.__dict__.get("_cw")
    if cached is not None:
        return cached
    parent = inst.__dict__.get("_repeat_of")
    if parent is not None:
        link, rid = savings_structure(parent[0])
        out = (link.repeat_interleave(parent[1], 0), rid.repeat_interleave(parent[1], 0))
    else:
        n = inst.n
        link = torch.zeros(inst.size, n, n, dtype=torch.bool)
        rid = torch.full((inst.size, n), -1, dtype=torch.long)
        for b, routes in enumerate(savings_routes(inst)):
            for k, r in enumerate(routes):
                path = [0, *r, 0]
                for u, v in itertools.pairwise(path):
                    link[b, u, v] = link[b, v, u] = True
                rid[b, r] = k
        out = (link, rid)
    object.__setattr__(inst, "_cw", out)
    return out


# ---------------------------------------------------------------- local search


def _two_opt(routes: Routes, d: np.ndarray):
    best = (-EPS, None)
    for ri, r in enumerate(routes):
        if len(r) < 3:
            continue
        p = np.array([0, *r, 0])
        sub = d[np.ix_(p, p)]
        e = sub[np.arange(len(p) - 1), np.arange(1, len(p))]
        delta = sub[:-1, :-1] + sub[1:, 1:] - e[:, None] - e[None, :]
        m = len(p) - 1
        ok = np.arange(m)[None, :] >= np.arange(m)[:, None] + 2
        delta = np.where(ok, delta, np.inf)
        k = int(delta.argmin())
        if delta.flat[k] < best[0]:
            best = (float(delta.flat[k]), ("2opt", ri, k // m, k % m))
    return best


def _layout(routes: Routes):
    cust, prv, nxt, rof = [], [], [], []
    ea, eb, er = [], [], []
    for ri, r in enumerate(routes):
        path = [0, *r, 0]
        for k in range(1, len(path) - 1):
            cust.append(path[k])
            prv.append(path[k - 1])
            nxt.append(path[k + 1])
            rof.append(ri)
        for u, v in itertools.pairwise(path):
            ea.append(u)
            eb.append(v)
            er.append(ri)
    return (np.array(x) for x in (cust, prv, nxt, rof, ea, eb, er))


def _relocate_exchange(routes: Routes, d: np.ndarray, dem: np.ndarray, ops):
    cust, prv, nxt, rof, ea, eb, er = _layout(routes)
    load = np.array([dem[r].sum() for r in routes] + [0.0])
    best = (-EPS, None)
    if "relocate" in ops:
        ea2, eb2, er2 = np.append(ea, 0), np.append(eb, 0), np.append(er, len(routes))  # new route
        rem = d[prv, cust] + d[cust, nxt] - d[prv, nxt]
        ins = d[ea2[None, :], cust[:, None]] + d[cust[:, None], eb2[None, :]] - d[ea2, eb2][None]
        delta = ins - rem[:, None]
        adjacent = (ea2[None, :] == cust[:, None]) | (eb2[None, :] == cust[:, None])
        other = er2[None, :] != rof[:, None]
        over = load[er2][None, :] + dem[cust][:, None] > 1.0 + CAP_EPS
        delta = np.where(adjacent | (other & over), np.inf, delta)
        k = int(delta.argmin())
        if delta.flat[k] < best[0]:
            u, e = divmod(k, len(ea2))
            best = (float(delta.flat[k]), ("relocate", int(cust[u]), int(ea2[e]), int(er2[e])))
    if "exchange" in ops:
        c, p, q = cust[:, None], prv[:, None], nxt[:, None]
        ct, pt, qt = cust[None, :], prv[None, :], nxt[None, :]
        delta = (
            d[p, ct] + d[ct, q] - d[p, c] - d[c, q] + d[pt, c] + d[c, qt] - d[pt, ct] - d[ct, qt]
        )
        du = dem[cust]
        ok = (rof[:, None] < rof[None, :]) & (
            (load[rof][:, None] - du[:, None] + du[None, :] <= 1.0 + CAP_EPS)
            & (load[rof][None, :] - du[None, :] + du[:, None] <= 1.0 + CAP_EPS)
        )
        delta = np.where(ok, delta, np.inf)
        k = int(delta.argmin())
        if delta.flat[k] < best[0]:
            i, j = divmod(k, len(cust))
            best = (float(delta.flat[k]), ("exchange", int(cust[i]), int(cust[j])))
    return best


def _apply(routes: Routes, move) -> Routes:
    routes = [list(r) for r in routes]
    kind = move[0]
    if kind == "2opt":
        _, ri, i, j = move
        p = [0, *routes[ri], 0]
        p[i + 1 : j + 1] = p[i + 1 : j + 1][::-1]
        routes[ri] = p[1:-1]
    elif kind == "relocate":
        _, u, a, target = move
        src = next(k for k, r in enumerate(routes) if u in r)
        routes[src].remove(u)
        if target == len(routes):
            routes.append([u])
        else:
            r = routes[target]
            r.insert(0 if a == 0 else r.index(a) + 1, u)
    else:
        _, u, v = move
        for r in routes:
            for k, x in enumerate(r):
                if x == u:
                    r[k] = v
                elif x == v:
                    r[k] = u
    return [r for r in routes if r]


OPS = ("two_opt", "relocate", "exchange")


def improve(
    routes: Routes,
    d: np.ndarray,
    dem: np.ndarray,
    ops: tuple[str, ...] = OPS,
    max_moves: int = 10_000,
) -> Routes:
    """Best-improvement local search over ``ops`` (subset of :data:`OPS`); returns a local
    optimum (or the solution after ``max_moves`` moves). Feasibility is preserved."""
    bad = set(ops) - set(OPS)
    if bad:
        raise ValueError(f"unknown local-search operators {sorted(bad)} (known: {OPS})")
    routes = [list(r) for r in routes if r]
    for _ in range(max_moves):
        cands = []
        if "two_opt" in ops:
            cands.append(_two_opt(routes, d))
        if "relocate" in ops or "exchange" in ops:
            cands.append(_relocate_exchange(routes, d, dem, ops))
        _gain, move = min(cands, key=lambda x: x[0])
        if move is None:
            break
        routes = _apply(routes, move)
    return routes


def improve_batch(inst: Instances, solutions: list[Routes], ops=OPS) -> Tensor:
    """Lengths ``(B,)`` after :func:`improve` on each instance's solution."""
    out = []
    for b, routes in enumerate(solutions):
        d, dem = _np(inst, b)
        out.append(solution_length(improve(routes, d, dem, ops), d))
    return torch.tensor(out, dtype=inst.coords.dtype)
