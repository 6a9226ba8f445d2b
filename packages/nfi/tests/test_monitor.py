"""Monitor: hand-computed small cases, recording cadence, alarm, errors."""

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from nfi.loss import stable_cross_entropy
from nfi.monitor import KEYS, Monitor


class Net(nn.Module):
    def __init__(self, d=3, C=4):
        super().__init__()
        self.body = nn.Identity()
        self.fc = nn.Linear(d, C, bias=False)

    def forward(self, x):
        return self.fc(self.body(x))


def test_hand_computed_case():
    net = Net(d=2, C=2)
    with torch.no_grad():
        net.fc.weight.copy_(torch.tensor([[30.0, 0.0], [0.0, 0.0]]))
    # row 0: logits (30, 0), target 0: absorbed in fp32, gradient (0, fl(e^-30));
    # row 1: logits (0, 0), target 1: gradient (1/2, -1/2) exactly, row sum exactly 0
    x = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    y = torch.tensor([0, 1])
    mon = Monitor(net, head="fc")
    F.cross_entropy(net(x), y, reduction="sum").backward()
    rec = mon.latest()
    e = math.exp(-30.0)
    assert rec["absorbed_frac"] == 0.5
    assert rec["zero_sum"] == pytest.approx(e, rel=4 * 2.0**-24)
    assert rec["zero_sum_rel"] == pytest.approx(e / (1 + e), rel=4 * 2.0**-24)
    assert rec["w_mean_norm"] == 15.0
    assert rec["h_mean_norm"] == pytest.approx(math.sqrt(0.5), rel=1e-15)
    # drift = (1/C) sum_i sigma_i h_i = (e / 2, 0)
    assert rec["drift_norm"] == pytest.approx(e / 2, rel=4 * 2.0**-24)
    assert rec["alarm"] == 0.0 and rec["step"] == 0


def test_stable_loss_shows_no_absorption_signal():
    net = Net(d=2, C=3)
    with torch.no_grad():
        net.fc.weight.copy_(torch.tensor([[30.0, 0.0], [0.0, 1.0], [0.0, -1.0]]))
    mon = Monitor(net, head=net.fc)
    stable_cross_entropy(net(torch.eye(2)), torch.tensor([0, 1]), reduction="sum").backward()
    assert mon.latest()["absorbed_frac"] == 0.0
    assert abs(mon.latest()["zero_sum"]) < 1e-7


def test_every_and_no_grad():
    net = Net()
    mon = Monitor(net, every=3)  # head=None: the last nn.Linear
    assert mon.head_name == "fc"
    x, y = torch.randn(5, 3), torch.randint(0, 4, (5,))
    for _ in range(7):
        F.cross_entropy(net(x), y).backward()
    with torch.no_grad():
        net(x)
    assert mon.history["step"] == [0, 3, 6]
    assert all(len(mon.history[k]) == 3 for k in KEYS)


def test_language_model_shapes():
    net = Net(d=6, C=11)
    mon = Monitor(net, head="fc")
    x = torch.randn(2, 5, 6)
    logits = net(x)
    F.cross_entropy(logits.reshape(-1, 11), torch.randint(0, 11, (10,))).backward()
    rec = mon.latest()
    assert rec["h_mean_norm"] == pytest.approx(x.reshape(-1, 6).double().mean(0).norm().item())
    assert math.isfinite(rec["drift_norm"])


def test_alarm_fires_when_both_means_grow_without_zero_sum():
    net = Net(d=3, C=4)
    mon = Monitor(net, head="fc", window=5, growth=1.5)
    x = torch.ones(4, 3)
    for k in range(12):
        with torch.no_grad():
            net.fc.weight.fill_(1.2**k)
        out = net(x * 1.2**k)
        out.sum().backward()  # rows sum to C, not 0: zero-sum broken
    assert mon.first_alarm is not None and mon.first_alarm >= 4
    assert mon.history["alarm"][-1] == 1.0
    text = mon.summary()
    assert "NFI alarm at step" in text and "absorbed_frac" in text


def test_no_alarm_with_zero_sum_gradients_even_if_growing():
    net = Net(d=3, C=4)
    mon = Monitor(net, head="fc", window=5, growth=1.5)
    x = torch.randn(4, 3)
    y = torch.tensor([0, 1, 2, 3])
    for k in range(12):
        with torch.no_grad():
            net.fc.weight.normal_().mul_(1.2**k)
        stable_cross_entropy(net(x * 1.2**k), y).backward()
    assert mon.first_alarm is None


def test_log_to_writer_and_remove():
    class Writer:
        def __init__(self):
            self.calls = []

        def add_scalar(self, tag, value, step):
            self.calls.append((tag, value, step))

    net = Net()
    w = Writer()
    with Monitor(net) as mon:
        F.cross_entropy(net(torch.randn(3, 3)), torch.tensor([0, 1, 2])).backward()
        mon.log_to(w)
    assert {t for t, _, _ in w.calls} == {f"nfi/{k}" for k in KEYS}
    F.cross_entropy(net(torch.randn(3, 3)), torch.tensor([0, 1, 2])).backward()
    assert len(mon.history["step"]) == 1  # removed on exit
    assert set(mon.scalars()) == {f"nfi/{k}" for k in KEYS}


def test_empty_summary():
    assert "no records" in Monitor(Net()).summary()


def test_bad_inputs():
    net = Net()
    with pytest.raises(ValueError, match="not found"):
        Monitor(net, head="classifier")
    with pytest.raises(ValueError, match="2-D weight"):
        Monitor(net, head="body")
    with pytest.raises(ValueError, match="not a submodule"):
        Monitor(net, head=nn.Linear(3, 4))
    with pytest.raises(ValueError, match="has none"):
        Monitor(nn.Sequential(nn.ReLU()))
    with pytest.raises(TypeError, match=r"nn\.Module"):
        Monitor("net")
    with pytest.raises(TypeError, match="head"):
        Monitor(net, head=3)
    with pytest.raises(ValueError, match="every"):
        Monitor(net, every=0)
    with pytest.raises(ValueError, match="window"):
        Monitor(net, window=1)
    with pytest.raises(ValueError, match="growth"):
        Monitor(net, growth=1.0)


def test_record_agrees_with_the_reference_functions():
    # The Monitor computes its quantities in fused form; the library functions are the
    # references. Random awkward sizes, a third of the rows made absorbed (target entry 0,
    # others >= 0), one all-zero row (not absorbed: nothing positive).
    from nfi.dynamics import classifier_mean_drift, zero_sum_violation
    from nfi.thresholds import absorbed_rows

    gen = torch.Generator().manual_seed(5)
    N, d, C = 37, 13, 11
    net = Net(d=d, C=C)
    mon = Monitor(net, head="fc")
    x = torch.randn(N, d, generator=gen, dtype=torch.float32)
    G = torch.randn(N, C, generator=gen) * torch.logspace(-6, 2, N)[:, None]
    G[::3] = G[::3].abs()
    G[::3, 0] = 0.0
    G[4] = 0.0
    out = net(x)
    out.backward(G)
    rec = mon.latest()
    Gd, xd = G.double(), x.double()
    assert rec["absorbed_frac"] == absorbed_rows(G).double().mean().item()
    assert 0 < rec["absorbed_frac"] < 1
    sig = zero_sum_violation(G)
    assert rec["zero_sum"] == pytest.approx(sig.sum().item(), rel=1e-13)
    assert rec["zero_sum_rel"] == pytest.approx((sig.sum() / Gd.abs().sum()).item(), rel=1e-13)
    w = net.fc.weight.detach().double()
    assert rec["w_mean_norm"] == pytest.approx(w.mean(0).norm().item(), rel=1e-13)
    assert rec["h_mean_norm"] == pytest.approx(xd.mean(0).norm().item(), rel=1e-13)
    drift = classifier_mean_drift(G, x).norm().item()
    assert rec["drift_norm"] == pytest.approx(drift, rel=1e-13)


def test_steps_are_counted_by_backward_passes_and_eval_forwards_do_not_count():
    net = Net()
    mon = Monitor(net, head="fc", every=2)
    x, y = torch.randn(5, 3), torch.randint(0, 4, (5,))
    for _ in range(5):
        with torch.no_grad():
            net(x)  # an evaluation forward: neither a step nor a record
        F.cross_entropy(net(x), y).backward()
    assert mon.calls == 5 and mon.history["step"] == [0, 2, 4]
    # between recording steps the head carries no forward hook (the cheap path)
    assert len(net.fc._forward_hooks) == 0
    mon.remove()
    assert len(net.fc._forward_hooks) == 0 and not net.fc.weight._backward_hooks


def test_frozen_head_counts_training_forwards():
    net = Net()
    net.fc.weight.requires_grad_(False)
    mon = Monitor(net, head="fc", every=2)
    x = torch.randn(5, 3, requires_grad=True)  # the head's output still needs a gradient
    y = torch.randint(0, 4, (5,))
    for _ in range(5):
        F.cross_entropy(net(x), y).backward()
    assert mon.history["step"] == [0, 2, 4]
    assert mon.latest()["w_mean_norm"] > 0


def test_batched_records_of_varying_shapes_match_per_step_references():
    # 40 steps (more than one batch of records) with batch sizes that change in runs, so the
    # deferred reduction groups records by shape; each record must equal the reference
    # quantities of its own step's gradient, features and weight.
    from nfi.dynamics import classifier_mean_drift, zero_sum_violation
    from nfi.thresholds import absorbed_rows

    gen = torch.Generator().manual_seed(9)
    net = Net(d=5, C=7)
    mon = Monitor(net, head="fc", every=1)
    opt = torch.optim.SGD(net.parameters(), lr=0.5)
    ref = []
    for k in range(40):
        n = (3, 3, 8, 1)[k // 10] if k % 7 else 2
        x = torch.randn(n, 5, generator=gen) * 3
        y = torch.randint(0, 7, (n,), generator=gen)
        w = net.fc.weight.detach().double().clone()
        logits = net(x)
        logits.retain_grad()
        F.cross_entropy(logits, y).backward()
        g = logits.grad
        ref.append(
            (
                absorbed_rows(g).double().mean().item(),
                zero_sum_violation(g).sum().item(),
                w.mean(0).norm().item(),
                x.double().mean(0).norm().item(),
                classifier_mean_drift(g, x).norm().item(),
            )
        )
        opt.step()
        opt.zero_grad()
    h = mon.history
    assert h["step"] == list(range(40))
    for k, (ab, zs, wn, hn, dn) in enumerate(ref):
        assert h["absorbed_frac"][k] == ab
        assert h["zero_sum"][k] == pytest.approx(zs, rel=1e-12, abs=1e-300)
        assert h["w_mean_norm"][k] == pytest.approx(wn, rel=1e-13)
        assert h["h_mean_norm"][k] == pytest.approx(hn, rel=1e-13)
        assert h["drift_norm"][k] == pytest.approx(dn, rel=1e-9, abs=1e-300)
