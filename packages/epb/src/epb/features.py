r"""The documented state a program sees: per-node features of a construction state.

Every feature is a tensor broadcastable to ``(R, n)`` (``R`` states, ``n`` nodes); per-state
quantities have shape ``(R, 1)``. A program reads them as attributes of its argument ``s``,
e.g. ``s.d_cur``. Scores of infeasible nodes are ignored (masked after scoring).

========================  ===================================================================
name                      meaning
========================  ===================================================================
``d_cur``                 distance from the current node to each node
``d_first``               distance to the tour's first node (TSP) / to the depot (CVRP)
``d_depot``               distance to the depot (CVRP); equals ``d_first`` for TSP
``d_cur_first``           ``(R, 1)`` distance from the current node back to first node / depot
``detour``                ``d_cur + d_first - d_cur_first``: cost of visiting the node before
                          closing the tour / returning to the depot
``min_to_visited``        distance from each node to its nearest visited node (CVRP: or depot)
``min_to_unvisited``      distance from each node to its nearest *other* unvisited node
``mean_to_unvisited``     mean distance from each node to the other unvisited nodes
``d_centroid``            distance to the centroid of the unvisited nodes
``rank_cur``              rank of ``d_cur`` among feasible nodes (0 = nearest)
``x``, ``y``              coordinates
``demand``                demand as a fraction of capacity (TSP: zeros)
``remaining``             ``(R, 1)`` remaining capacity fraction (TSP: ones)
``progress``              ``(R, 1)`` step index divided by the number of nodes
``left``                  ``(R, 1)`` fraction of nodes (customers) still unvisited
``saving``                ``d_cur_first + d_first - d_cur``: the Clarke--Wright saving of
                          linking the current node to each node (0 at the depot / start)
``cw_link``               CVRP: 1 where the edge (current node, node) is used by the
                          Clarke--Wright savings solution of the instance (from the depot: the
                          ends of its routes), else 0; TSP: zeros
``cw_route``              CVRP: 1 where the node is on the same savings route as the current
                          customer (0 everywhere at the depot); TSP: zeros
``second_to_unvisited``   distance to the second-nearest other unvisited node (only one left:
                          the nearest; none: 0)
``knn_unvisited``         local density: mean distance to the (up to) 3 nearest other unvisited
                          nodes (none: 0)
``cur_rank_at``           how many other unvisited nodes are strictly closer to the node than the
                          current node is (0: the current node is the node's nearest neighbour
                          among what is left)
``cos_centroid``          cosine of the angle at the current node between the step to the node
                          and the direction of the centroid of the unvisited nodes (0 when
                          either vector is zero)
``sweep_angle``           angle in ``[0, pi]`` at the centroid of all nodes between the current
                          node and the node (how far round the instance the step jumps)
``later_cost``            cost of leaving the node for later: ``d(a,j) + d(j,b) - d(a,b)`` for
                          ``a, b`` its two nearest among the other unvisited nodes and the tour
                          start / depot (only one such node: ``2 d(a,j)``)
========================  ===================================================================

``saving``, ``cw_link`` and ``cw_route`` make the savings construction a primitive a program
can call (see :mod:`epb.localsearch`); the offline search offers them for CVRP only
(:data:`CVRP_NODE_FEATURES`). The last six (:data:`LOOKAHEAD_FEATURES`) describe the
neighbourhood a node leaves behind or the geometry of the step; the TSP search vocabulary
:data:`TSP_NODE_FEATURES` adds them to :data:`NODE_FEATURES`.

Example:
    >>> import torch
    >>> from epb.problems import random_tsp, RolloutState
    >>> st = RolloutState.start(random_tsp(2, 7, torch.Generator().manual_seed(0)))
    >>> f = node_features(st)
    >>> tuple(f["d_cur"].shape), tuple(f["progress"].shape)
    ((2, 7), (2, 1))
"""

from __future__ import annotations

import torch
from torch import Tensor

from .problems import RolloutState

FEATURES = (
    "d_cur",
    "d_first",
    "d_depot",
    "d_cur_first",
    "detour",
    "min_to_visited",
    "min_to_unvisited",
    "mean_to_unvisited",
    "d_centroid",
    "rank_cur",
    "x",
    "y",
    "demand",
    "remaining",
    "progress",
    "left",
    "saving",
    "cw_link",
    "cw_route",
    "second_to_unvisited",
    "knn_unvisited",
    "cur_rank_at",
    "cos_centroid",
    "sweep_angle",
    "later_cost",
)

#: Neighbourhood and geometry features (the last six of :data:`FEATURES`).
LOOKAHEAD_FEATURES = (
    "second_to_unvisited",
    "knn_unvisited",
    "cur_rank_at",
    "cos_centroid",
    "sweep_angle",
    "later_cost",
)

#: Savings-construction features (meaningful for CVRP only).
SAVINGS_FEATURES = ("saving", "cw_link", "cw_route")

#: Features that vary across nodes (the rest are per-state constants); the TSP search vocabulary.
NODE_FEATURES = tuple(
    f
    for f in FEATURES
    if f
    not in ("d_cur_first", "remaining", "progress", "left", *SAVINGS_FEATURES, *LOOKAHEAD_FEATURES)
)

#: The CVRP search vocabulary: the node features plus the savings-construction primitives.
CVRP_NODE_FEATURES = NODE_FEATURES + SAVINGS_FEATURES

#: The TSP search vocabulary: the node features plus the neighbourhood / geometry features.
TSP_NODE_FEATURES = NODE_FEATURES + LOOKAHEAD_FEATURES

ROUTER_FEATURES = (
    "progress",
    "left",
    "remaining",
    "d_cur_first",
    "min_d_cur",
    "mean_d_cur",
    "second_gap",
    "at_depot",
    "spread",
)


def node_features(st: RolloutState) -> dict[str, Tensor]:
    """The feature dictionary of :data:`FEATURES` for every row of ``st``."""
    r, n = st.current.shape[0], st.n
    rows = torch.arange(r)
    dist = st.dist
    feas = st.feasible()
    d_cur = dist[rows, st.current]
    d_first = dist[rows, st.first]
    d_depot = dist[:, 0] if st.inst.kind == "cvrp" else d_first
    d_cf = d_cur.gather(1, st.first[:, None])
    unv = ~st.visited
    vis = st.visited.clone()
    if st.inst.kind == "cvrp":
        unv = unv.clone()
        unv[:, 0] = False
        vis[:, 0] = True
    big = dist.max() + 1.0
    eye = torch.eye(n, dtype=torch.bool)[None]
    min_vis = dist.masked_fill(~vis[:, None, :], big).min(-1).values
    du = dist.masked_fill(~unv[:, None, :] | eye, big)
    min_unv = du.min(-1).values
    min_unv = torch.where(min_unv >= big, torch.zeros_like(min_unv), min_unv)
    cnt = (unv[:, None, :] & ~eye).sum(-1).clamp_min(1)
    mean_unv = (dist * (unv[:, None, :] & ~eye)).sum(-1) / cnt
    w = unv.float()
    cen = (st.inst.coords * w[..., None]).sum(1) / w.sum(1, keepdim=True).clamp_min(1)
    d_cen = (st.inst.coords - cen[:, None]).norm(dim=-1)
    masked = d_cur.masked_fill(~feas, big)
    rank = masked.argsort(-1).argsort(-1).to(d_cur.dtype)
    demand = st.inst.demand if st.inst.demand is not None else torch.zeros_like(d_cur)
    left = unv.sum(-1, keepdim=True).to(d_cur.dtype) / (n - 1 if st.inst.kind == "cvrp" else n)
    if st.inst.kind == "cvrp":
        from .localsearch import savings_structure

        link, rid = savings_structure(st.inst)
        cw_link = link[rows, st.current].to(d_cur.dtype)
        cur_r = rid.gather(1, st.current[:, None])
        cw_route = ((rid == cur_r) & (cur_r >= 0)).to(d_cur.dtype)
    else:
        cw_link = cw_route = torch.zeros_like(d_cur)
    look = lookahead_features(st, dist, unv, d_cur, du, big, eye)
    return {
        "d_cur": d_cur,
        "d_first": d_first,
        "d_depot": d_depot,
        "d_cur_first": d_cf,
        "detour": d_cur + d_first - d_cf,
        "min_to_visited": min_vis,
        "min_to_unvisited": min_unv,
        "mean_to_unvisited": mean_unv,
        "d_centroid": d_cen,
        "rank_cur": rank,
        "x": st.inst.coords[..., 0],
        "y": st.inst.coords[..., 1],
        "demand": demand,
        "remaining": st.remaining[:, None].to(d_cur.dtype),
        "progress": torch.full((r, 1), st.t / n, dtype=d_cur.dtype),
        "left": left,
        "saving": d_cf + d_first - d_cur,
        "cw_link": cw_link,
        "cw_route": cw_route,
        **look,
    }


def lookahead_features(st, dist, unv, d_cur, du, big, eye) -> dict[str, Tensor]:
    """:data:`LOOKAHEAD_FEATURES`; ``du`` is ``dist`` with entries to visited nodes and the
    diagonal replaced by ``big``."""
    r, n = d_cur.shape
    rows = torch.arange(r)
    zero = torch.zeros_like(d_cur)
    cnt = (du < big).sum(-1)  # other unvisited nodes per node
    k = min(3, n)
    near = du.topk(k, -1, largest=False).values  # (R, n, k)
    avail = near < big
    second = near[..., 1] if k > 1 else near[..., 0]
    second = torch.where(cnt >= 2, second, torch.where(cnt >= 1, near[..., 0], zero))
    knn = (near * avail).sum(-1) / avail.sum(-1).clamp_min(1)
    # other unvisited nodes strictly closer to j than the current node is
    closer = (du < d_cur[:, :, None]).sum(-1).to(d_cur.dtype)
    xy = st.inst.coords
    cur_xy = xy[rows, st.current]  # (R, 2)
    w = unv.to(xy.dtype)
    cen = (xy * w[..., None]).sum(1) / w.sum(1, keepdim=True).clamp_min(1)
    v = xy - cur_xy[:, None]  # (R, n, 2)
    u = cen - cur_xy  # (R, 2)
    den = v.norm(dim=-1) * u.norm(dim=-1, keepdim=True)
    cos = torch.where(den > 1e-12, (v * u[:, None]).sum(-1) / den.clamp_min(1e-30), zero)
    g = xy.mean(1, keepdim=True)  # (R, 1, 2) centroid of all nodes
    a = xy - g
    b = cur_xy[:, None] - g
    ang = torch.atan2(a[..., 0] * b[..., 1] - a[..., 1] * b[..., 0], (a * b).sum(-1)).abs()
    # leaving j for later: two nearest among the other unvisited nodes and the start / depot
    ends = du.clone()
    ends[rows, :, st.first] = dist[rows, :, st.first]
    ends = ends.masked_fill(eye, big)
    m = min(2, n)
    e = ends.topk(m, -1, largest=False)
    ne = (ends < big).sum(-1)
    ia = e.indices[..., 0]
    ib = e.indices[..., m - 1]
    d_ab = dist[rows[:, None], ia, ib]
    two = e.values[..., 0] + e.values[..., m - 1] - d_ab
    later = torch.where(ne >= 2, two, torch.where(ne >= 1, 2 * e.values[..., 0], zero))
    return {
        "second_to_unvisited": second,
        "knn_unvisited": knn,
        "cur_rank_at": closer,
        "cos_centroid": cos,
        "sweep_angle": ang,
        "later_cost": later,
    }


def router_features(feats: dict[str, Tensor], feasible: Tensor) -> Tensor:
    """``(R, G)`` per-state summary the router sees (:data:`ROUTER_FEATURES`)."""
    d = feats["d_cur"]
    big = d.max() + 1.0
    dm = d.masked_fill(~feasible, big)
    srt = dm.sort(-1).values
    nfeas = feasible.sum(-1, keepdim=True).clamp_min(1)
    mean = (d * feasible).sum(-1, keepdim=True) / nfeas
    second = torch.where(srt[:, 1:2] >= big, srt[:, :1], srt[:, 1:2])
    at_depot = ((feats["d_cur"] - feats["d_depot"]).abs().amax(-1, keepdim=True) < 1e-9).to(d.dtype)
    spread = (feats["d_centroid"] * feasible).sum(-1, keepdim=True) / nfeas
    return torch.cat(
        [
            feats["progress"],
            feats["left"],
            feats["remaining"],
            feats["d_cur_first"],
            srt[:, :1],
            mean,
            second - srt[:, :1],
            at_depot,
            spread,
        ],
        -1,
    )
