r"""Rolling a step policy out on a batch of instances: greedy, sampled and multi-start (POMO).

Multi-start: every instance is rolled out from ``P`` different first nodes (TSP: every node;
CVRP: every customer as the first destination) and the shortest of the ``P`` solutions is kept.

Example:
    >>> import torch
    >>> from epb.problems import random_tsp
    >>> from epb.heuristics import nearest_neighbour_step
    >>> inst = random_tsp(2, 6, torch.Generator().manual_seed(1))
    >>> res = multistart(lambda i, r: nearest_neighbour_step, inst)
    >>> tuple(res.shape)
    (2,)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from .problems import Instances, RolloutState

StepFn = Callable[[RolloutState], Tensor]


@dataclass
class Rollout:
    """lengths ``(R,)``; actions ``(R, T)``; log_prob ``(R,)`` (sum of chosen log-probs);
    states: the visited states (only when ``record=True``)."""

    lengths: Tensor
    actions: Tensor
    log_prob: Tensor
    states: list[RolloutState]


def start_nodes(inst: Instances, p: int | None = None) -> Tensor:
    """The ``P`` first nodes of a multi-start rollout: ``(P,)`` (TSP: ``0..P-1``; CVRP:
    customers ``1..P``); ``P`` defaults to all of them."""
    if inst.kind == "tsp":
        p = inst.n if p is None else min(p, inst.n)
        return torch.arange(p)
    p = inst.n - 1 if p is None else min(p, inst.n - 1)
    return torch.arange(1, p + 1)


def rollout(
    step_fn: StepFn,
    inst: Instances,
    first: Tensor | None = None,
    greedy: bool = True,
    generator: torch.Generator | None = None,
    record: bool = False,
) -> Rollout:
    """Roll ``step_fn`` (``state -> (R, n)`` log-probs or scores, argmax/sampled over feasible
    nodes) out on ``inst`` (one row per instance).

    Args:
        first: ``(R,)`` first node (TSP: the start; CVRP: the forced first customer), or None
            (TSP: node 0; CVRP: chosen by the policy).
        greedy: argmax if True, else sample from ``softmax(step_fn(state))``.
        record: keep every decision state in the result.
    """
    st = RolloutState.start(inst, first if inst.kind == "tsp" else None)
    acts, logp, states = [], torch.zeros(inst.size), []
    if inst.kind == "cvrp" and first is not None:
        st = st.step(first.long())
        acts.append(first.long())
    limit = 3 * inst.n + 2
    while not st.done():
        if len(acts) > limit:
            raise RuntimeError("rollout did not terminate (policy chose infeasible nodes?)")
        if record:
            states.append(st)
        scores = step_fn(st)
        mask = st.feasible()
        scores = scores.masked_fill(~mask, -torch.inf)
        if greedy:
            a = scores.argmax(-1)
        else:
            probs = scores.softmax(-1)
            a = torch.multinomial(probs, 1, generator=generator).squeeze(-1)
        lp = scores.log_softmax(-1).gather(1, a[:, None]).squeeze(-1)
        logp = logp + torch.where(torch.isfinite(lp), lp, torch.zeros_like(lp))
        acts.append(a)
        st = st.step(a)
    actions = torch.stack(acts, 1) if acts else torch.zeros(inst.size, 0, dtype=torch.long)
    return Rollout(st.total_length(), actions, logp, states)


def multistart(
    bind: Callable[[Instances, int], StepFn],
    inst: Instances,
    p: int | None = None,
    chunk: int = 256,
    return_actions: bool = False,
):
    """Best-of-``P`` greedy tour lengths ``(B,)``; ``bind(instances, repeats)`` builds the step
    function (e.g. ``policy.bind``). With ``return_actions`` also the best rollout's actions of
    each instance (a list of ``B`` 1-d tensors; CVRP: the node sequence, depot visits as 0)."""
    starts = start_nodes(inst, p)
    pp = len(starts)
    best, acts = [], []
    for lo in range(0, inst.size, chunk):
        part = inst.index(slice(lo, lo + chunk))
        rows = part.repeat(pp)
        with torch.no_grad():
            res = rollout(bind(part, pp), rows, starts.repeat(part.size))
        lv, li = res.lengths.view(part.size, pp).min(1)
        best.append(lv)
        if return_actions:
            a = res.actions.view(part.size, pp, -1)
            acts += [a[b, int(li[b])] for b in range(part.size)]
    lengths = torch.cat(best)
    return (lengths, acts) if return_actions else lengths


def greedy(
    bind: Callable[[Instances, int], StepFn],
    inst: Instances,
    chunk: int = 512,
    return_actions: bool = False,
):
    """Single-start greedy lengths ``(B,)`` (TSP from node 0; CVRP: policy picks every node);
    with ``return_actions`` also each instance's actions (as in :func:`multistart`)."""
    out, acts = [], []
    for lo in range(0, inst.size, chunk):
        part = inst.index(slice(lo, lo + chunk))
        with torch.no_grad():
            res = rollout(bind(part, 1), part)
        out.append(res.lengths)
        acts += list(res.actions)
    lengths = torch.cat(out)
    return (lengths, acts) if return_actions else lengths
