"""No tensor of the optimizer's step is created on the default device (CPU) by accident.

On a GPU, a factory call without ``device=`` (``torch.arange``, ``torch.zeros``,
``torch.tensor``, ...) makes a CPU tensor that then meets CUDA statistics and fails, or
forces a copy. That bug class is caught here on the CPU with
``shared_core.testing.DefaultDeviceFactories``: it records every such call made from this
package's code during the hooked forward, backward and ``step``. (Checked to catch
the three such calls the criterion had before this test existed: its exponent grid and two of
the switch test's counts.)
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from adaptive_lmo import AdaptiveLMO, controller
from adaptive_lmo.criterion import switch_gain
from shared_core.testing import DefaultDeviceFactories


def _mode() -> DefaultDeviceFactories:
    return DefaultDeviceFactories("/adaptive_lmo/")


@pytest.mark.parametrize(
    "kw",
    [
        {},
        {"stats": "same_batch"},
        {"precondition": "adam"},
        {"curvature": "input"},
        {"criterion": "loglog"},
        {"shrinkage": "ledoit_wolf"},
    ],
    ids=["default", "same_batch", "adam", "input", "loglog", "ledoit_wolf"],
)
def test_step_makes_no_tensor_on_the_default_device(kw, monkeypatch):
    calls = []
    real = controller.switch_gain
    monkeypatch.setattr(controller, "switch_gain", lambda *a, **k: calls.append(1) or real(*a, **k))
    from adaptive_lmo.experiments import teacher_student as ts

    # the teacher-student student: its exponent moves off 0, so the switch test runs
    cfg = {**ts.config(True), "na": 23, "nb": 13, "m": 11, "n": 600}
    X, Y = (t.double() for t in ts.make_problem(cfg, 0)["train"])
    model = ts._make_student(cfg, 0).double()
    # subsampled sketches; backoff=0: a criterion step every 2 steps, so the switch test runs
    opt = AdaptiveLMO(model, lr=0.01, update_every=2, max_rows=16, backoff=0, **kw)
    g = torch.Generator().manual_seed(0)
    mode = _mode()
    for _ in range(30):
        idx = torch.randint(0, X.shape[0], (64,), generator=g)
        opt.zero_grad()
        with mode:  # the hooks' sketches (forward and backward) and the step
            F.mse_loss(model(X[idx]), Y[idx]).backward()
            opt.step()
    assert mode.sites == set()
    if kw in ({}, {"stats": "same_batch"}):  # the K-FAC runs reach the switch test
        assert calls


def test_switch_gain_without_rows_makes_no_tensor_on_the_default_device():
    # a rank that recorded no rows still contributes zeros to the all-reduce
    s = torch.tensor([2.0, 1.0, 0.5], dtype=torch.float64)
    C = torch.eye(3, dtype=torch.float64)
    mode = _mode()
    with mode:
        gain, se, n_eff = switch_gain(0.5, 0.0, s, None, C)
    assert mode.sites == set()
    assert n_eff == 0.0 and gain != gain and se != se  # one rank alone resolves nothing (NaN)
