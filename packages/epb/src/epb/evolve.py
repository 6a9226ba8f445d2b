r"""The EPB loop: Block I (textual + numerical gradients at fixed capacity) and Block II
(fault-targeted boosting and redundancy pruning).

**Block I.** For each program :math:`k`, the mixture KL is differentiated with respect to that
program's scores only (router and other programs fixed):
:math:`\mathcal L_k(g) = \mathrm{KL}\bigl(t \,\|\, \sum_{j \ne k} w_j p_j + w_k\,
\mathrm{softmax}(g)\bigr)`. The states where the program, weighted by the router, carries the
largest share of the loss, :math:`w_k(s)\,\mathrm{KL}(t(s) \| p_k(s))`, become the textual
feedback (teacher's choice, program's choice, attributed loss). The proposer returns rewritten
programs; each is swapped in, the router and temperatures are refitted, and the rewrite is kept
only if the validation KL drops (fidelity improves).

**Block II.** *Boosting*: the states with the largest student KL (the fault set, a top fraction)
are clustered by k-means on the router features; for the cluster with the largest total loss
a new program is proposed whose objective is its own KL to the teacher on that cluster; it is
added if the validation KL drops. *Pruning*: programs are tried for removal in order of mean
router weight (and duplicates, whose greedy choices agree with another program's on almost all
states); a removal is kept when validation agreement drops by at most ``tol`` and the KL rises
by at most ``tol``.

**Rejections.** Every candidate is scored on the training and validation banks (in the
sandbox, :mod:`epb.sandbox`) before anything is built around it; one that fails there, or later,
or a proposer that raises, costs only itself: the :class:`~epb.programs.ProgramError` is
counted in :attr:`History.rejected`, logged in :attr:`History.log`, and the loop carries on.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import Tensor

from .features import FEATURES
from .portfolio import NEG, Portfolio, StateBank, kl_per_state, masked_log_softmax
from .programs import Program, ProgramError, evaluate
from .proposers import FeedbackItem, ProposalRequest

FIT_STEPS = 150


def refit(port: Portfolio, train: StateBank, steps: int = FIT_STEPS) -> Portfolio:
    port.fit(train, steps=steps)
    return port


def _stage_name(x: float) -> str:
    return "early" if x < 1 / 3 else ("middle" if x < 2 / 3 else "late")


def feedback_items(bank: StateBank, attributed: Tensor, prog_logp: Tensor, top: int = 8):
    """The ``top`` states with the largest attributed loss, as :class:`FeedbackItem`."""
    idx = attributed.argsort(descending=True)[:top]
    items = []
    for s in idx.tolist():
        tc = int(bank.teacher_logp[s].argmax())
        pc = int(prog_logp[s].argmax())
        f = {k: v[s] for k, v in bank.feats.items()}

        def at(node, f=f):
            return {
                k: float(v[node] if v.numel() > 1 else v[0]) for k, v in f.items() if k in FEATURES
            }

        items.append(
            FeedbackItem(s, float(bank.stage[s]), tc, pc, float(attributed[s]), at(tc), at(pc))
        )
    return items


def program_request(port: Portfolio, k: int, train: StateBank) -> ProposalRequest:
    """Block I request for program ``k`` (objective: the mixture KL through program ``k``)."""
    with torch.no_grad():
        scores = port.program_scores(train)
        lp = port.program_log_probs(train, scores)
        lw = port.weights(train)
    others = torch.cat([lp[:, :k], lp[:, k + 1 :]], 1)
    lw_o = torch.cat([lw[:, :k], lw[:, k + 1 :]], 1)
    mask = train.mask

    def objective(g: Tensor) -> Tensor:
        lpk = masked_log_softmax(g, mask)
        parts = [lw[:, k : k + 1, None] + lpk[:, None]]
        if others.shape[1]:
            parts.append(lw_o[:, :, None] + others)
        q = torch.logsumexp(torch.cat(parts, 1), 1).masked_fill(~mask, NEG)
        return kl_per_state(train.teacher_logp, q, mask).mean()

    attributed = lw[:, k].exp() * kl_per_state(train.teacher_logp, lp[:, k], mask)
    w = lw[:, k].exp()
    stage = float((w * train.stage).sum() / w.sum().clamp_min(1e-9))
    ctx = {"name": port.programs[k].name, "stage": _stage_name(stage), "weight": float(w.mean())}
    return ProposalRequest(
        port.programs[k], train.feats, objective, feedback_items(train, attributed, lp[:, k]), ctx
    )


def replace_program(port: Portfolio, k: int, prog: Program, train: StateBank) -> Portfolio:
    progs = list(port.programs)
    progs[k] = prog
    new = port.clone_with(progs)
    with torch.no_grad():
        new.log_beta[k] = 0.0 if prog.expr is not None else port.log_beta[k]
        new.router.load_state_dict(port.router.state_dict())
    new.fit(train, steps=FIT_STEPS, reset=False)
    return new


@dataclass
class History:
    """Fidelity after each stage of the loop, and a log of accepted / rejected edits."""

    records: list[dict] = field(default_factory=list)
    log: list[str] = field(default_factory=list)
    #: candidates that raised :class:`~epb.programs.ProgramError` (logged, then skipped)
    rejected: int = 0

    def reject(self, where: str, err: ProgramError) -> None:
        self.rejected += 1
        self.log.append(f"{where}: rejected a candidate: {err}")

    def record(self, stage: str, port: Portfolio, val: StateBank, train: StateBank | None = None):
        fid = port.fidelity(val)
        row = {
            "stage": stage,
            "programs": port.k,
            "val_agreement": fid["agreement"],
            "val_kl": fid["kl"],
        }
        if train is not None:
            row["train_kl"] = port.fidelity(train)["kl"]
        self.records.append(row)
        return row


def _propose(proposer, req: ProposalRequest, hist: History, where: str) -> list[Program]:
    try:
        return list(proposer.propose(req))
    except ProgramError as e:  # proposers should not raise; one that does costs one request
        hist.reject(where, e)
        return []


def _admit(cand: Program, banks, hist: History, where: str) -> bool:
    """Score ``cand`` on every bank (filling their caches) before anything is built around it,
    so a rejected candidate leaves no trace, not even a draw from the random stream."""
    for bank in banks:
        if cand.source in bank.cache:
            continue
        (g,) = evaluate([cand], bank.feats)
        if isinstance(g, ProgramError):
            hist.reject(where, g)
            return False
        bank.cache[cand.source] = g.detach()
    return True


def block_one(
    port: Portfolio, train: StateBank, val: StateBank, proposer, hist: History, tol: float = 1e-4
) -> Portfolio:
    """One pass of Block I over every program."""
    for k in range(port.k):
        req = program_request(port, k, train)
        base = port.fidelity(val)["kl"]
        best, best_kl = None, base - tol
        for cand in _propose(proposer, req, hist, "block I"):
            if cand.source == port.programs[k].source or not _admit(
                cand, (train, val), hist, "block I"
            ):
                continue
            try:  # a program may pass the proposer's trial run and still fail on the banks
                new = replace_program(port, k, cand, train)
                kl = new.fidelity(val)["kl"]
            except ProgramError as e:
                hist.reject("block I", e)
                continue
            if kl < best_kl:
                best, best_kl = new, kl
        name = port.programs[k].name
        if best is not None:
            hist.log.append(f"block I: rewrote {name}: val KL {base:.4f} -> {best_kl:.4f}")
            port = best
        else:
            hist.log.append(f"block I: kept {name} (no rewrite improved val KL {base:.4f})")
    return port


def kmeans(x: Tensor, k: int, generator: torch.Generator, iters: int = 25) -> Tensor:
    """Cluster labels ``(N,)`` of standardised ``x`` (Lloyd's algorithm, k-means++ seeding)."""
    x = (x - x.mean(0)) / x.std(0).clamp_min(1e-6)
    k = min(k, len(x))
    c = x[torch.randint(len(x), (1,), generator=generator)]
    for _ in range(k - 1):
        d = torch.cdist(x, c).min(1).values ** 2
        c = torch.cat([c, x[torch.multinomial(d / d.sum() + 1e-12, 1, generator=generator)]])
    for _ in range(iters):
        lab = torch.cdist(x, c).argmin(1)
        c = torch.stack([x[lab == j].mean(0) if (lab == j).any() else c[j] for j in range(k)])
    return torch.cdist(x, c).argmin(1)


def fault_cluster(
    port: Portfolio, train: StateBank, frac: float = 0.15, clusters: int = 3, seed: int = 0
) -> Tensor:
    """Indices of the worst cluster of the fault set (largest summed KL)."""
    with torch.no_grad():
        kl = kl_per_state(train.teacher_logp, port.log_probs(train), train.mask)
    m = max(clusters, int(frac * len(train)))
    fault = kl.argsort(descending=True)[:m]
    lab = kmeans(train.router_in[fault], clusters, torch.Generator().manual_seed(seed))
    tot = torch.stack([kl[fault][lab == j].sum() for j in range(int(lab.max()) + 1)])
    return fault[lab == tot.argmax()]


def boost(
    port: Portfolio,
    train: StateBank,
    val: StateBank,
    proposer,
    hist: History,
    name: str | None = None,
    seed: int = 0,
    force: bool = False,
) -> Portfolio:
    """Block II boosting: propose a program for the worst fault cluster; keep it if the
    validation KL drops (or always with ``force``)."""
    idx = fault_cluster(port, train, seed=seed)
    focus = train.index(idx)
    mask = focus.mask
    with torch.no_grad():
        q = port.log_probs(focus)

    def objective(g: Tensor) -> Tensor:
        return kl_per_state(focus.teacher_logp, masked_log_softmax(g, mask), mask).mean()

    name = name or f"p{len(port.programs)}"
    summary = (
        f"{len(idx)} states, mean stage {float(focus.stage.mean()):.2f}, portfolio KL "
        f"{float(kl_per_state(focus.teacher_logp, q, mask).mean()):.3f}"
    )
    portfolio_text = "\n\n".join(p.source for p in port.programs)
    req = ProposalRequest(
        None,
        focus.feats,
        objective,
        feedback_items(focus, kl_per_state(focus.teacher_logp, q, mask), q),
        {"name": name, "summary": summary, "portfolio": portfolio_text},
    )
    base = port.fidelity(val)["kl"]
    best, best_kl = None, base
    for cand in _propose(proposer, req, hist, "block II"):
        cand.name = name
        if not _admit(cand, (train, val), hist, "block II"):
            continue
        new = port.clone_with([*list(port.programs), cand])
        with torch.no_grad():
            new.log_beta[-1] = 0.0 if cand.expr is not None else new.log_beta[-1]
        try:
            new.fit(train, steps=FIT_STEPS)
            kl = new.fidelity(val)["kl"]
        except ProgramError as e:
            hist.reject("block II", e)
            continue
        if kl < best_kl or (force and best is None):
            best, best_kl = new, kl
    if best is None:
        hist.log.append(f"block II: boosting proposed nothing better (val KL {base:.4f})")
        return port
    hist.log.append(f"block II: boosted {name} for {summary}: val KL {base:.4f} -> {best_kl:.4f}")
    return best


def duplicates(port: Portfolio, bank: StateBank, thresh: float = 0.98) -> set[int]:
    """Programs whose greedy choices agree with an earlier program's on ``thresh`` of states."""
    with torch.no_grad():
        ch = port.program_log_probs(bank).argmax(-1)  # (S, K)
    dup = set()
    for i in range(port.k):
        for j in range(i):
            if j not in dup and float((ch[:, i] == ch[:, j]).float().mean()) >= thresh:
                dup.add(i)
    return dup


def prune(
    port: Portfolio,
    train: StateBank,
    val: StateBank,
    hist: History,
    tol: float = 0.005,
    min_weight: float = 0.05,
) -> Portfolio:
    """Block II pruning: drop duplicates / low-weight programs when fidelity holds."""
    changed = True
    while changed and port.k > 1:
        changed = False
        with torch.no_grad():
            w = port.weights(train).exp().mean(0)
        cands = sorted(
            duplicates(port, train) | {i for i in range(port.k) if w[i] < min_weight},
            key=lambda i: float(w[i]),
        )
        base = port.fidelity(val)
        for i in cands:
            progs = [p for j, p in enumerate(port.programs) if j != i]
            new = port.clone_with(progs)
            new.fit(train, steps=FIT_STEPS)
            fid = new.fidelity(val)
            if fid["agreement"] >= base["agreement"] - tol and fid["kl"] <= base["kl"] + tol:
                hist.log.append(
                    f"block II: pruned {port.programs[i].name} (weight "
                    f"{float(w[i]):.3f}); val agreement {base['agreement']:.3f} -> "
                    f"{fid['agreement']:.3f}"
                )
                port, changed = new, True
                break
    return port


def evolve(
    port: Portfolio,
    train: StateBank,
    val: StateBank,
    proposer,
    iterations: int = 2,
    max_programs: int = 6,
    seed: int = 0,
    on_iter: Callable[[int, Portfolio, History], None] | None = None,
):
    """Run ``iterations`` rounds of Block I then Block II; returns ``(portfolio, history)``."""
    hist = History()
    port = copy.deepcopy(port) if port.k else port
    port.fit(train, steps=FIT_STEPS)
    hist.record("init", port, val, train)
    for it in range(iterations):
        port = block_one(port, train, val, proposer, hist)
        hist.record(f"iter {it + 1}: block I", port, val, train)
        if port.k < max_programs:
            port = boost(port, train, val, proposer, hist, seed=seed + it)
        port = prune(port, train, val, hist)
        hist.record(f"iter {it + 1}: block II", port, val, train)
        if on_iter is not None:
            on_iter(it, port, hist)
    return port, hist
