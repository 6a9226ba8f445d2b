"""Block I / II: boosting targets faults, pruning keeps fidelity, runs are deterministic."""

import torch

from epb.evolve import History, block_one, boost, evolve, fault_cluster, prune
from epb.features import node_features
from epb.policy import FunctionTeacher
from epb.portfolio import Portfolio, collect_states, kl_per_state
from epb.problems import random_tsp
from epb.programs import compile_program
from epb.proposers import Expr, ExpressionProposer, Term, fit_constants


def stage_teacher():
    """Nearest neighbour in the first half of the tour, farthest-insertion rule afterwards."""

    def logits(st):
        f = node_features(st)
        late = f["progress"] >= 0.5
        return torch.where(late, f["min_to_visited"], -f["d_cur"]) / 0.05

    return FunctionTeacher(logits)


def banks(seed=0, n=10):
    g = torch.Generator().manual_seed(seed)
    t = stage_teacher()
    return (
        collect_states(t, random_tsp(8, n, g), starts=2),
        collect_states(t, random_tsp(4, n, g), starts=2),
    )


def expr_prog(e, name):
    return compile_program(e.render(), name, expr=e)


def test_fit_constants_finds_the_teachers_rule():
    train, _ = banks()
    early = train.index((train.stage < 0.4).nonzero().squeeze(-1))

    def objective(g):
        from epb.portfolio import masked_log_softmax

        return kl_per_state(
            early.teacher_logp, masked_log_softmax(g, early.mask), early.mask
        ).mean()

    e, loss = fit_constants(Expr([Term(0.1, "id", "d_cur")]), early.feats, objective, 200, 0.2)
    assert e.terms[0].coef < -5  # -d_cur / 0.05 = -20 d_cur is the teacher
    assert loss < 0.05


def test_boosting_adds_a_program_that_reduces_the_fault_loss():
    train, val = banks()
    port = Portfolio([expr_prog(Expr([Term(-1.0, "id", "d_cur")]), "nearest")])
    port.fit(train, steps=100)
    idx = fault_cluster(port, train)
    focus = train.index(idx)
    before = float(
        kl_per_state(focus.teacher_logp, port.log_probs(focus).detach(), focus.mask).mean()
    )
    hist = History()
    new = boost(port, train, val, ExpressionProposer(seed=0, candidates=2), hist, force=True)
    assert new.k == 2
    focus = train.index(idx)  # fresh cache
    after = float(
        kl_per_state(focus.teacher_logp, new.log_probs(focus).detach(), focus.mask).mean()
    )
    assert after < 0.7 * before, (before, after, hist.log)


def test_pruning_drops_a_duplicate_and_keeps_fidelity():
    train, val = banks(1)
    e = Expr([Term(-1.0, "id", "d_cur")])
    progs = [
        expr_prog(e, "nearest"),
        expr_prog(Expr([Term(1.0, "id", "min_to_visited")]), "far"),
        compile_program("def score(s):\n    return -2.0 * s.d_cur", "nearest_again"),
    ]
    port = Portfolio(progs)
    port.fit(train, steps=150)
    base = port.fidelity(val)
    tol = 0.01
    new = prune(port, train, val, History(), tol=tol)
    fid = new.fidelity(val)
    assert new.k < port.k
    assert fid["agreement"] >= base["agreement"] - tol and fid["kl"] <= base["kl"] + tol


def test_block_one_never_worsens_validation_kl():
    train, val = banks(2)
    port = Portfolio([expr_prog(Expr([Term(-1.0, "id", "x")]), "bad")])
    port.fit(train, steps=100)
    before = port.fidelity(val)["kl"]
    new = block_one(port, train, val, ExpressionProposer(seed=1, candidates=2), History())
    assert new.fidelity(val)["kl"] <= before


def test_deterministic_under_a_seed():
    outs = []
    for _ in range(2):
        torch.manual_seed(0)
        train, val = banks(3, n=8)
        port = Portfolio([expr_prog(Expr([Term(-1.0, "id", "d_cur")]), "nearest")])
        port, hist = evolve(
            port, train, val, ExpressionProposer(seed=5, candidates=2), iterations=1, max_programs=3
        )
        outs.append(([p.source for p in port.programs], hist.records[-1]["val_kl"]))
    assert outs[0] == outs[1]


def test_pursuit_grows_to_the_planted_rule_and_lowers_the_loss():
    """A teacher scoring ``-d_cur + 0.1 log(later_cost)`` (sharp softmax): starting from
    ``-d_cur``, forward selection must add that term with the planted coefficient ratio."""
    from epb.features import TSP_NODE_FEATURES
    from epb.portfolio import masked_log_softmax

    def logits(st):
        f = node_features(st)
        return (-f["d_cur"] + 0.1 * f["later_cost"].clamp_min(1e-9).log()) / 0.05

    g = torch.Generator().manual_seed(11)
    bank = collect_states(FunctionTeacher(logits), random_tsp(9, 13, g), starts=3)

    def objective(s):
        return kl_per_state(bank.teacher_logp, masked_log_softmax(s, bank.mask), bank.mask).mean()

    prop = ExpressionProposer(features=TSP_NODE_FEATURES, max_terms=3, steps=300, pursuit=True)
    base, base_loss = fit_constants(Expr([Term(-1.0, "id", "d_cur")]), bank.feats, objective, 300)
    grown = prop.pursue(base, bank.feats, objective)
    assert [len(e.terms) for _, e in grown] == [2, 3]
    losses = [base_loss] + [loss for loss, _ in grown]
    assert losses[1] < 0.5 * losses[0] and losses[2] <= losses[1] + 1e-6
    assert losses[1] < 0.05
    e = grown[0][1]
    assert (e.terms[1].feature, e.terms[1].op, e.terms[1].factor) == ("later_cost", "log", None)
    c_cur, c_later = e.terms[0].coef, e.terms[1].coef
    assert c_cur < 0 and abs(c_later / -c_cur - 0.1) < 0.02


class _Hostile:
    """Wraps a proposer: every request also gets programs that validate but fail when run
    (infinite output, a loop past the time limit)."""

    def __init__(self, inner):
        self.inner = inner

    def propose(self, req):
        bad = [
            compile_program("def score(s):\n    return 1 / (s.d_cur * 0)", "inf"),
            compile_program(
                "def score(s):\n    a = 0\n    for i in range(1000):\n        for j in range(1000):"
                "\n            a = a + s.d_cur\n    return a",
                "slow",
                time_limit=0.05,
            ),
        ]
        return bad + self.inner.propose(req)


class _Raising:
    def propose(self, req):
        from epb.programs import ProgramError

        raise ProgramError("a proposer that raises")


def _run(prop, seed=4):
    torch.manual_seed(0)
    train, val = banks(seed, n=8)
    port = Portfolio([expr_prog(Expr([Term(-1.0, "id", "d_cur")]), "nearest")])
    return evolve(port, train, val, prop, iterations=1, max_programs=3)


def test_evolve_counts_rejections_and_carries_on():
    """Hostile candidates are rejected, counted and logged; the run is otherwise the run without
    them (every honest decision identical)."""
    p0, h0 = _run(ExpressionProposer(seed=2, candidates=2))
    p1, h1 = _run(_Hostile(ExpressionProposer(seed=2, candidates=2)))
    assert h0.rejected == 0 and h1.rejected >= 4  # two per request: Block I and boosting
    assert sum("rejected a candidate" in line for line in h1.log) == h1.rejected
    assert any("infinite" in line for line in h1.log)
    assert any("time limit" in line for line in h1.log)
    assert [p.source for p in p1.programs] == [p.source for p in p0.programs]
    assert h1.records == h0.records


def test_a_raising_proposer_costs_its_requests_only():
    port, hist = _run(_Raising())
    assert hist.rejected == 2  # one Block I request, one boosting request
    assert [p.name for p in port.programs] == ["nearest"]
