"""A step updates everything or nothing; a = 0 is torch.optim.Muon's step; routing by the graph.

Checks: NaN/inf gradients raise or skip before any mutation (parameters, moments, the sketch
RNG and the exponents bitwise unchanged, and the run continues as if the bad step had never
been offered); options written into ``param_groups`` after construction are validated at
``step``; the iterative route falls back to the SVD; a step outside criterion steps reads
the host at most once; the default ``a = 0`` step equals ``torch.optim.Muon`` bit for bit
(including its ``adjust_lr_fn=None`` meaning "original"); rank-deficient directions keep
their rank; the output head is found from the graph, and a guess is announced.
"""

from __future__ import annotations

import copy
import math
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from adaptive_lmo import AdaptiveLMO, fractional_update
from adaptive_lmo.options import adjust_lr_factor
from adaptive_lmo.routing import find_head, locate_head


def _mlp(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(
        nn.Linear(7, 13), nn.Tanh(), nn.Linear(13, 9), nn.Tanh(), nn.Linear(9, 3)
    ).double()


def _batch(seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(17, 7, generator=g, dtype=torch.float64), torch.randn(
        17, 3, generator=g, dtype=torch.float64
    )


def _snapshot(model, opt):
    params = [p.detach().clone() for p in model.parameters()]
    state = copy.deepcopy(opt.state_dict())
    return params, state


def _same(a, b):
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and torch.equal(a, b)
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return a == b


def _train_step(model, opt, seed, poison=None):
    x, y = _batch(seed)
    opt.zero_grad()
    F.mse_loss(model(x), y).backward()
    if poison is not None:
        model[poison].weight.grad[1, 2] = poison_value(seed)
    return opt.step()


def poison_value(seed):
    return math.nan if seed % 2 else math.inf


@pytest.mark.parametrize("mode", ["raise", "skip"])
@pytest.mark.parametrize("bad_layer", [2, 4])  # a matrix layer, the AdamW head
def test_non_finite_gradient_changes_nothing(mode, bad_layer):
    ref, m = _mlp(), _mlp()
    kw = {"lr": 0.02, "update_every": 2, "nonfinite": mode}
    o_ref, o = AdaptiveLMO(ref, **kw), AdaptiveLMO(m, **kw)
    for t in range(3):
        _train_step(ref, o_ref, t)
        _train_step(m, o, t)
    before = _snapshot(m, o)
    if mode == "raise":
        with pytest.raises(ValueError, match=rf"non-finite gradient .* in {bad_layer}\.weight"):
            _train_step(m, o, 99, poison=bad_layer)
    else:
        with pytest.warns(UserWarning, match="step skipped"):
            _train_step(m, o, 99, poison=bad_layer)
        assert o.skipped_steps == 1
    after = _snapshot(m, o)
    assert _same(before[0], after[0])
    before[1].pop("skipped_steps"), after[1].pop("skipped_steps")
    assert _same(before[1], after[1])
    # the run goes on exactly as one that never saw the bad step
    for t in range(3, 7):
        _train_step(ref, o_ref, t)
        _train_step(m, o, t)
    for p, q in zip(ref.parameters(), m.parameters(), strict=True):
        assert torch.equal(p, q)
    assert o.geometry() == o_ref.geometry()


def test_skipped_steps_survive_state_dict_and_off_mode_does_not_check():
    m = _mlp()
    o = AdaptiveLMO(m, nonfinite="skip")
    with pytest.warns(UserWarning, match="step skipped"):
        _train_step(m, o, 1, poison=2)
    o2 = AdaptiveLMO(m, nonfinite="skip")
    o2.load_state_dict(o.state_dict())
    assert o2.skipped_steps == 1
    off = AdaptiveLMO(m, exponent=0.0, method="svd", nonfinite="off")
    with pytest.raises(torch.linalg.LinAlgError):  # torch's own failure: nothing was checked
        _train_step(m, off, 1, poison=2)
    with pytest.raises(ValueError, match="nonfinite"):
        AdaptiveLMO(m, nonfinite="ignore")


@pytest.mark.parametrize(
    ("key", "value"),
    [("exponent", 1.5), ("criterion", "newton"), ("lr", -1.0), ("method", "qr")],
)
def test_group_options_are_validated_at_step_before_mutating(key, value):
    m = _mlp()
    o = AdaptiveLMO(m, update_every=1)
    _train_step(m, o, 0)
    o.param_groups[0][key] = value
    before = _snapshot(m, o)
    with pytest.raises(ValueError, match=key):
        _train_step(m, o, 1)
    after = _snapshot(m, o)
    assert _same(before, after)


def test_auto_set_on_bare_parameters_after_construction_raises_at_step():
    m = _mlp()
    o = AdaptiveLMO(m.parameters(), exponent=0.5)
    o.param_groups[0]["exponent"] = "auto"
    with pytest.raises(ValueError, match="hooks"):
        _train_step(m, o, 0)


def test_iterative_route_falls_back_to_the_svd_on_a_rank_deficient_direction():
    g = torch.Generator().manual_seed(4)
    W = nn.Parameter(torch.randn(23, 17, generator=g, dtype=torch.float64))
    o = AdaptiveLMO([W], lr=0.1, momentum=0.0, exponent=0.5, method="iterative")
    G = torch.randn(23, 3, generator=g, dtype=torch.float64) @ torch.randn(
        3, 17, generator=g, dtype=torch.float64
    )  # rank 3: the square-root iteration cannot converge
    W0 = W.detach().clone()
    W.grad = G.clone()
    with pytest.warns(UserWarning, match="did not converge"):
        o.step()
    want = W0 - 0.1 * adjust_lr_factor(None, (23, 17)) * fractional_update(G, 0.5)
    torch.testing.assert_close(W.detach(), want, rtol=1e-12, atol=1e-14)


def test_default_a0_step_is_torch_muon_bit_for_bit():
    """mu = 0.5: torch's lerp-form momentum is exactly half of the SGD-form one (a power of two
    survives every bf16 rounding), so the two Newton-Schulz inputs normalise to the same bits;
    a tall layer (40 x 24) checks adjust_lr_fn=None = "original"."""
    torch.manual_seed(0)
    net = nn.Sequential(
        nn.Linear(24, 40, bias=False),
        nn.Tanh(),
        nn.Linear(40, 17, bias=False),
        nn.Tanh(),
        nn.Linear(17, 3, bias=False),
    )
    for nesterov in (True, False):
        a, b = copy.deepcopy(net), copy.deepcopy(net)
        oa = AdaptiveLMO(a, lr=0.02, momentum=0.5, nesterov=nesterov, exponent=0.0, head=None)
        ob = torch.optim.Muon(
            b.parameters(), lr=0.02, momentum=0.5, nesterov=nesterov, weight_decay=0.0
        )
        g = torch.Generator().manual_seed(1)
        for _ in range(4):
            x, y = torch.randn(32, 24, generator=g), torch.randn(32, 3, generator=g)
            for mdl, opt in ((a, oa), (b, ob)):
                opt.zero_grad()
                F.mse_loss(mdl(x), y).backward()
                opt.step()
        for p, q in zip(a.parameters(), b.parameters(), strict=True):
            assert torch.equal(p, q)


def test_adjust_lr_fn_has_torch_meaning():
    for shape in [(40, 24), (24, 40), (5, 5)]:
        assert adjust_lr_factor(None, shape) == adjust_lr_factor("original", shape)
        assert adjust_lr_factor("original", shape) == math.sqrt(max(1, shape[0] / shape[1]))
        assert adjust_lr_factor("unit", shape) == 1.0


def test_no_host_read_per_matrix_outside_criterion_steps(monkeypatch):
    """Count Python-level reads of tensor values (bool/float/int/item) during a step, on the
    accelerator's code path (``host_reads_are_free`` says no, as it does for CUDA)."""
    import adaptive_lmo.optim as optim_module

    monkeypatch.setattr(optim_module, "host_reads_are_free", lambda device: False)
    m = _mlp()
    o = AdaptiveLMO(m, update_every=50)
    _train_step(m, o, 0)
    _train_step(m, o, 1)  # next_batch: steps 1 and 2 are the criterion's
    reads = []
    for name in ("__bool__", "__float__", "__int__", "item"):
        orig = getattr(torch.Tensor, name)

        def counted(self, *args, _orig=orig, _name=name):
            reads.append(_name)
            return _orig(self, *args)

        monkeypatch.setattr(torch.Tensor, name, counted)
    _train_step(m, o, 2)
    monkeypatch.undo()
    monkeypatch.setattr(optim_module, "host_reads_are_free", lambda device: False)
    assert len(reads) == 1  # the one all-gradient finiteness check
    o.nonfinite = "off"
    reads.clear()
    for name in ("__bool__", "__float__", "__int__", "item"):
        orig = getattr(torch.Tensor, name)
        monkeypatch.setattr(
            torch.Tensor,
            name,
            lambda self, *a, _o=orig, _n=name: (reads.append(_n), _o(self, *a))[1],
        )
    _train_step(m, o, 3)
    monkeypatch.undo()
    assert reads == []


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_cpu_floor_branch_reads_once_per_matrix_and_changes_no_update(monkeypatch, dtype):
    """On the CPU the direction floor's factor is read and the rescale skipped where it is 1
    (one read per matrix); the accelerator's unconditional rescale gives the same step.
    float64 runs the same ops both ways (bit for bit); the float32 default route adds the
    bfloat16 factor directly instead of its float32 product with 1.0, so the two may differ
    by the rounding of one addition: at most 2 u32 (|p| + |dp|) per entry. A direction
    below the floor is rescaled on both paths by the same ops (bit for bit)."""
    import adaptive_lmo.optim as optim_module

    def run(free, scale):
        monkeypatch.setattr(optim_module, "host_reads_are_free", lambda device: free)
        torch.manual_seed(3)
        m = nn.Sequential(nn.Linear(11, 19), nn.Tanh(), nn.Linear(19, 13), nn.Linear(13, 3))
        m = m.to(dtype)
        o = AdaptiveLMO(m, exponent=0.0, head="3", direction_floor=1e-3)
        before = [p.detach().clone() for p in m.parameters()]
        reads = []
        orig = torch.Tensor.__bool__

        def counted(self):
            reads.append(1)
            return orig(self)

        x = torch.randn(23, 11, generator=torch.Generator().manual_seed(5), dtype=dtype)
        o.zero_grad()
        (scale * m(x).square().mean()).backward()
        monkeypatch.setattr(torch.Tensor, "__bool__", counted)
        o.step()
        monkeypatch.setattr(torch.Tensor, "__bool__", orig)
        return before, [p.detach().clone() for p in m.parameters()], len(reads)

    for scale in (1.0, 1e-9):  # above the floor, and far below it (factor < 1)
        p0, cpu, n_cpu = run(True, scale)
        _, acc, n_acc = run(False, scale)
        assert (n_cpu, n_acc) == (2, 0)  # two hidden matrices; the head is on AdamW
        for a, b, z in zip(cpu, acc, p0, strict=True):
            if dtype == torch.float64 or scale < 1:
                assert torch.equal(a, b)
            else:
                u = torch.finfo(torch.float32).eps / 2
                assert bool(((a - b).abs() <= 2 * u * (z.abs() + (a - z).abs())).all())


@pytest.mark.parametrize("method", ["auto", "svd"])
def test_rank_deficient_direction_keeps_its_rank(method):
    """A rank-16 float32 gradient of a 128 x 128 layer. Exact route: 16 unit singular values,
    the rest cut at msign's rule (``max(m, n) * eps * s_max``), not 128 unit directions.
    Default route: torch.optim.Muon's own bf16 Newton-Schulz output, bit for bit (its tail
    is the bf16 rounding of the zero directions, amplified by the quintic)."""
    g = torch.Generator().manual_seed(0)
    G = torch.randn(128, 16, generator=g) @ torch.randn(16, 128, generator=g)
    W = nn.Parameter(torch.zeros(128, 128))
    o = AdaptiveLMO([W], lr=1.0, momentum=0.0, exponent=0.0, method=method, direction_floor=0)
    W.grad = G
    o.step()
    s = torch.linalg.svdvals(W.detach().double())
    if method == "svd":
        torch.testing.assert_close(s[:16], torch.ones(16, dtype=torch.float64), rtol=0, atol=1e-5)
        assert float(s[16:].max()) < 1e-5
    else:
        from torch.optim import _muon

        want = _muon._zeropower_via_newtonschulz(G, (3.4445, -4.7750, 2.0315), 5, 1e-7)
        assert torch.equal(-W.detach(), want.float())
        # most of the step's energy is in the 16 real directions, unlike 128 unit values
        assert float(s[:16].pow(2).sum() / s.pow(2).sum()) > 0.75


def test_named_parameters_are_accepted_and_named():
    m = _mlp()
    o = AdaptiveLMO(m.named_parameters(), exponent=0.3)
    assert o.routing() == {
        "0.weight": "lmo",
        "0.bias": "adamw",
        "2.weight": "lmo",
        "2.bias": "adamw",
        "4.weight": "lmo",
        "4.bias": "adamw",
    }
    assert set(o.geometry()) == {"0.weight", "2.weight", "4.weight"}
    _train_step(m, o, 0)
    (nw, w), (nb, b) = list(m.named_parameters())[:2]
    grouped = AdaptiveLMO([{"params": [(nw, w)], "exponent": 0.3}, {"params": [(nb, b)]}])
    assert grouped.routing() == {"0.weight": "lmo", "0.bias": "adamw"}


class HeadFirst(nn.Module):
    """Registers its output layer before the body: the last registered Linear is hidden."""

    def __init__(self):
        super().__init__()
        self.proj_out = nn.Linear(16, 3)
        self.inp = nn.Linear(5, 16)
        self.mid = nn.Linear(16, 16)

    def forward(self, x):
        return self.proj_out(torch.tanh(self.mid(torch.tanh(self.inp(x)))))


class Named(HeadFirst):
    def __init__(self):
        super().__init__()
        self.head = self.proj_out
        del self.proj_out

    def forward(self, x):
        return self.head(torch.tanh(self.mid(torch.tanh(self.inp(x))))).reshape(-1)


def test_head_from_the_graph_and_a_guess_is_announced():
    model = HeadFirst()
    with pytest.warns(UserWarning, match="guessing the output head as 'mid'"):
        r = AdaptiveLMO(model, exponent=0.0).routing()
    assert r["mid.weight"] == "adamw"  # the guess is wrong here, hence the warning
    name = find_head(model, torch.randn(4, 5))
    assert name == "proj_out"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        r = AdaptiveLMO(model, exponent=0.0, head=name).routing()
        assert r["proj_out.weight"] == "adamw" and r["mid.weight"] == "lmo"
        # a conventional name, an all-Sequential model, a tied embedding: no guess
        assert locate_head(Named()) is Named().head or isinstance(locate_head(Named()), nn.Linear)
        named = Named()
        assert locate_head(named, warn=True) is named.head
        assert find_head(named, torch.randn(4, 5)) == "head"  # output reshaped: last Linear run
        seq = _mlp()
        assert locate_head(seq, warn=True) is seq[4]
        lm = nn.ModuleDict({"emb": nn.Embedding(11, 6), "body": nn.Linear(6, 6)})
        lm["out"] = nn.Linear(6, 11, bias=False)
        lm["out"].weight = lm["emb"].weight
        assert locate_head(lm, warn=True) is lm["out"]


def test_fast_finiteness_check_has_no_false_verdicts():
    """The 2-norm fast path of ``any_nonfinite`` against the entrywise reference
    ``torch.isfinite``: a norm that overflows a finite float16/float32 gradient is not a
    NaN, and one NaN/inf entry anywhere, in any dtype of a mixed list, is found."""
    from adaptive_lmo.moments import any_nonfinite

    g = torch.Generator().manual_seed(0)
    big16 = torch.full((33, 17), 6.0e4, dtype=torch.float16)  # norm 1.4e6 > float16 max
    big32 = torch.full((9, 5), 1.0e30)  # norm 6.7e30 ... squares overflow float32
    assert bool(torch.isfinite(big16).all()) and not any_nonfinite([big16, big32])
    for dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
        for bad in (float("nan"), float("inf"), -float("inf")):
            ts = [torch.randn(7, 3, generator=g).to(dt) for dt in (torch.float32, dtype)]
            ts.append(torch.randn(11, generator=g).to(dtype))
            ts[-1][int(torch.randint(0, 11, (1,), generator=g))] = bad
            want = any(not bool(torch.isfinite(t).all()) for t in ts)
            assert want and any_nonfinite(ts)
            assert not any_nonfinite(ts[:-1])
