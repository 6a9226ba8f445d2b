"""LA, SLA, DiLoCo and DiLoCo-EF on one process: equivalences, checkpoints, bad input."""

import copy
import importlib.util
import pathlib

import pytest
import torch

from diloco_ef import (
    LA,
    QSGD,
    AbsmaxQuant,
    DiLoCo,
    Identity,
    Int8Absmax,
    RandomK,
    ScaledSign,
    TopK,
    local_step_size,
    local_step_size_schedule,
    sla,
)

_spec = importlib.util.spec_from_file_location(
    "_problems", pathlib.Path(__file__).with_name("_problems.py")
)
P = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(P)


def sgd(lr, **kw):
    return lambda p: torch.optim.SGD(p, lr=lr, **kw)


def nesterov(lr=0.7, m=0.9):
    return sgd(lr, momentum=m, nesterov=True)


def params(model):
    return [p.detach().clone() for p in model.parameters()]


def same(a, b):
    return all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


def run_diloco(rounds, **kw):
    algo = DiLoCo(P.make_model(), **kw)
    for _ in range(rounds):
        algo.round(P.loss_fn)
    return algo


@pytest.mark.parametrize(
    "inner", [sgd(0.05), sgd(0.05, momentum=0.9), lambda p: torch.optim.Adam(p, lr=1e-2)]
)
def test_m1_diloco_equals_la_bitwise(inner):
    H, R = 4, 5
    algo = run_diloco(R, inner=inner, outer=nesterov(), inner_steps=H, num_workers=1)
    model = P.make_model()
    opt = LA(model.parameters(), inner, nesterov(), inner_steps=H)
    for r in range(R):
        for h in range(H):
            opt.zero_grad()
            P.loss_fn(model, 0, r, h).backward()
            opt.step()
    assert same(params(algo.model), params(model))


def test_la_is_interpolation_with_outer_sgd():
    # LA with outer SGD lr a lands at x + a (x_H - x): check one round against that formula.
    model = P.make_model()
    x0 = params(model)
    inner_model = copy.deepcopy(model)
    inner_opt = torch.optim.SGD(inner_model.parameters(), lr=0.1)
    for h in range(3):
        inner_opt.zero_grad()
        P.loss_fn(inner_model, 0, 0, h).backward()
        inner_opt.step()
    xh = params(inner_model)
    opt = LA(model.parameters(), sgd(0.1), sgd(0.4), inner_steps=3)
    for h in range(3):
        opt.zero_grad()
        P.loss_fn(model, 0, 0, h).backward()
        opt.step()
    for got, a, b in zip(params(model), x0, xh, strict=True):
        torch.testing.assert_close(got, a + 0.4 * (b - a), rtol=1e-13, atol=1e-14)


@pytest.mark.parametrize("M", [1, 3])
def test_identity_compressor_reproduces_plain_diloco_bitwise(M):
    kw = {"inner": sgd(0.05, momentum=0.5), "outer": nesterov(), "inner_steps": 3, "num_workers": M}
    plain = run_diloco(4, **kw)
    ident = run_diloco(4, compressor=Identity(), **kw)
    assert same(params(plain.model), params(ident.model))
    assert [h["bits"] for h in plain.history] == [h["bits"] for h in ident.history]
    assert all(h["alpha"] == 1.0 for h in ident.history)


def test_h1_outer_sgd_lr1_is_synchronous_data_parallel():
    M, T, lr = 4, 6, 0.05
    algo = run_diloco(T, inner=sgd(lr), outer=sgd(1.0), inner_steps=1, num_workers=M)
    model = P.make_model()
    for t in range(T):
        grads = []
        for m in range(M):
            model.zero_grad()
            P.loss_fn(model, m, t, 0).backward()
            grads.append([p.grad.clone() for p in model.parameters()])
        with torch.no_grad():
            for i, p in enumerate(model.parameters()):
                p -= lr * sum(g[i] for g in grads) / M
    for a, b in zip(params(algo.model), params(model), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-14)


def test_diloco_average_of_workers_by_hand():
    # One round, outer SGD lr 1: the outer iterate is the mean of the workers' inner iterates.
    M, H = 3, 2
    algo = run_diloco(1, inner=sgd(0.1), outer=sgd(1.0), inner_steps=H, num_workers=M)
    ends = []
    for m in range(M):
        model = P.make_model()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for h in range(H):
            opt.zero_grad()
            P.loss_fn(model, m, 0, h).backward()
            opt.step()
        ends.append(params(model))
    for i, got in enumerate(params(algo.model)):
        torch.testing.assert_close(got, sum(e[i] for e in ends) / M, rtol=1e-12, atol=1e-14)
    assert all(same(params(r), params(algo.model)) for r in algo.replicas)


def test_diloco_ef_by_hand_with_topk():
    # Two rounds of DiLoCo-EF with M=2, TopK, checked against an explicit recursion.
    M, H, k = 2, 2, 3  # the smallest tensor (last bias) has 3 entries
    comp = TopK(k=k)
    algo = run_diloco(
        2, inner=sgd(0.1), outer=sgd(0.8), inner_steps=H, num_workers=M, compressor=comp
    )
    x = params(P.make_model())
    errs = [[torch.zeros_like(p) for p in x] for _ in range(M)]
    for r in range(2):
        sent = []
        for m in range(M):
            model = P.make_model()
            with torch.no_grad():
                for p, v in zip(model.parameters(), x, strict=True):
                    p.copy_(v)
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            for h in range(H):
                opt.zero_grad()
                P.loss_fn(model, m, r, h).backward()
                opt.step()
            s_m = []
            for i, p in enumerate(model.parameters()):
                v = errs[m][i] + (x[i] - p.detach())
                flat = v.reshape(-1)
                keep = torch.argsort(flat.abs(), descending=True)[:k]
                s = torch.zeros_like(flat)
                s[keep] = flat[keep]
                s = s.reshape(v.shape)
                errs[m][i] = v - s
                s_m.append(s)
            sent.append(s_m)
        x = [x[i] - 0.8 * (sent[0][i] + sent[1][i]) / M for i in range(len(x))]
    for a, b in zip(params(algo.model), x, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-14)
    for m in range(M):
        for i, e in enumerate(errs[m]):
            torch.testing.assert_close(algo.ef[m].errors[i], e, rtol=1e-12, atol=1e-14)


def test_randomk_shares_coordinates_across_workers():
    algo = run_diloco(
        1,
        inner=sgd(0.1),
        outer=sgd(1.0),
        inner_steps=2,
        num_workers=3,
        compressor=RandomK(ratio=0.3),
    )
    n_params = sum(p.numel() for p in algo.model.parameters())
    k_total = sum(max(1, round(0.3 * p.numel())) for p in algo.model.parameters())
    assert algo.history[0]["bits"] == 3 * 64 * k_total
    # Each worker's buffer is zero exactly on the shared coordinates of each tensor.
    for i in range(len(algo.outer_params)):
        zero_sets = [
            set(torch.nonzero(e.errors[i].reshape(-1) == 0).squeeze(1).tolist()) for e in algo.ef
        ]
        assert zero_sets[0] == zero_sets[1] == zero_sets[2]
    assert n_params > k_total


@pytest.mark.parametrize(
    "comp",
    [
        None,
        TopK(ratio=0.2),
        RandomK(ratio=0.2),
        QSGD(bits=2, contractive=True),
        Int8Absmax(),
        AbsmaxQuant(bits=3),
        ScaledSign(),
    ],
    ids=["plain", "topk", "randomk", "qsgd", "int8", "absmax-3b", "sign"],
)
def test_checkpoint_round_trip_mid_run(comp):
    kw = {
        "inner": lambda p: torch.optim.Adam(p, lr=1e-2),
        "outer": nesterov(),
        "inner_steps": 3,
        "num_workers": 2,
        "compressor": comp,
    }
    a = DiLoCo(P.make_model(), **kw)
    for _ in range(3):
        a.round(P.loss_fn)
    ckpt = copy.deepcopy(a.state_dict())
    for _ in range(3):
        a.round(P.loss_fn)
    b = DiLoCo(P.make_model(seed=123), **kw)  # different init: everything must come from ckpt
    b.load_state_dict(ckpt)
    for _ in range(3):
        b.round(P.loss_fn)
    assert same(params(a.model), params(b.model))
    assert a.history == b.history
    if comp is not None:
        assert 0 < a.history[-1]["alpha"] < 1


def test_checkpoint_world_size_change_is_refused():
    kw = {"inner": sgd(0.1), "outer": sgd(1.0), "inner_steps": 2}
    a = run_diloco(1, num_workers=2, **kw)
    b = DiLoCo(P.make_model(), num_workers=3, **kw)
    with pytest.raises(ValueError, match=r"world_size=2.*world_size=3"):
        b.load_state_dict(a.state_dict())
    c = DiLoCo(P.make_model(), num_workers=2, compressor=TopK(k=1), **kw)
    with pytest.raises(ValueError, match=r"compressor=None.*compressor=TopK\(k=1"):
        c.load_state_dict(a.state_dict())


def test_mismatched_replica_shapes_are_refused():
    models = [P.make_model(), torch.nn.Linear(6, 3).double()]
    with pytest.raises(ValueError, match="replica 1 has parameter shapes"):
        DiLoCo(models, sgd(0.1), sgd(1.0), inner_steps=2, num_workers=2)
    with pytest.raises(ValueError, match="3 model replicas for 2"):
        DiLoCo([P.make_model()] * 3, sgd(0.1), sgd(1.0), inner_steps=2, num_workers=2)


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"inner_steps": 0}, "inner_steps"),
        ({"inner_steps": 1.5}, "inner_steps"),
        ({"num_workers": 0}, "num_workers"),
        ({"compressor": "topk"}, "compressor"),
    ],
)
def test_diloco_bad_arguments(kw, match):
    base = {"inner_steps": 2, "num_workers": 1, **kw}
    with pytest.raises(ValueError, match=match):
        DiLoCo(P.make_model(), sgd(0.1), sgd(1.0), **base)


def test_local_step_size_rule_and_schedule():
    assert local_step_size(2.0, 4, 25) == pytest.approx(2.0 / (4 * 5))
    sched = local_step_size_schedule(2.0, 4, 25)
    algo = run_diloco(
        2, inner=sgd(123.0), outer=sgd(1.0), inner_steps=4, num_workers=2, inner_lr=sched
    )
    assert all(g["lr"] == pytest.approx(0.1) for o in algo.inner_opts for g in o.param_groups)
    with pytest.raises(ValueError, match="horizon"):
        sched(25)
    for bad, name in [((0.0, 4, 25), "c"), ((1.0, 0, 25), "inner_steps"), ((1.0, 4, 0), "total")]:
        with pytest.raises(ValueError, match=name):
            local_step_size(*bad)


def test_sla_matches_la_with_momentum_optimizers():
    model_a, model_b = P.make_model(), P.make_model()
    a = sla(
        model_a.parameters(), lr=0.05, momentum=0.9, outer_lr=0.7, outer_momentum=0.5, inner_steps=3
    )
    b = LA(model_b.parameters(), sgd(0.05, momentum=0.9), nesterov(0.7, 0.5), inner_steps=3)
    for t in range(9):
        for m, o in ((model_a, a), (model_b, b)):
            o.zero_grad()
            P.loss_fn(m, 0, t // 3, t % 3).backward()
            o.step()
    assert same(params(model_a), params(model_b))
    assert not same(params(model_a), params(P.make_model()))


def test_la_state_dict_round_trip():
    def make():
        m = P.make_model()
        return m, LA(m.parameters(), sgd(0.05, momentum=0.9), nesterov(), inner_steps=3)

    def run(m, o, t0, n):
        for t in range(t0, t0 + n):
            o.zero_grad()
            P.loss_fn(m, 0, t // 3, t % 3).backward()
            o.step()

    m1, o1 = make()
    run(m1, o1, 0, 4)  # mid-phase: the counter matters
    saved_m, saved_o = copy.deepcopy(m1.state_dict()), copy.deepcopy(o1.state_dict())
    run(m1, o1, 4, 8)
    m2, o2 = make()
    m2.load_state_dict(saved_m)
    o2.load_state_dict(saved_o)
    run(m2, o2, 4, 8)
    assert same(params(m1), params(m2))


def test_diloco_ef_reduces_loss_with_far_fewer_bits():
    kw = {"inner": sgd(0.05), "outer": nesterov(), "inner_steps": 5, "num_workers": 2}
    plain = run_diloco(15, **kw)
    ef = run_diloco(15, compressor=TopK(ratio=0.1), **kw)
    assert ef.history[-1]["loss"] < 0.8 * ef.history[0]["loss"]
    assert sum(h["bits"] for h in ef.history) < 0.2 * sum(h["bits"] for h in plain.history)
