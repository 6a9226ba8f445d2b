"""AdaptiveLMO on a CUDA device: the same steps as on the CPU, and bf16 training.

Run by ``nox -s gpu`` (skipped without CUDA). The "auto" path builds grids and reductions
inside the criterion and the switch test; a tensor created on the CPU there fails only on a
GPU, which is what these tests are for.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from adaptive_lmo import AdaptiveLMO

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]


def _model(dtype: torch.dtype, device: str) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Linear(23, 41), nn.Tanh(), nn.Linear(41, 19), nn.Tanh(), nn.Linear(19, 5)
    ).to(device=device, dtype=dtype)


def _run(device: str, dtype: torch.dtype, steps: int, **kw):
    model = _model(dtype, device)
    opt = AdaptiveLMO(model, lr=0.02, update_every=2, **kw)
    g = torch.Generator().manual_seed(1)
    teacher = torch.randn(23, 5, generator=g, dtype=torch.float64) / 23**0.5
    losses, exps = [], []
    for _ in range(steps):
        x64 = torch.randn(37, 23, generator=g, dtype=torch.float64)
        y64 = torch.tanh(x64 @ teacher) + 0.1 * torch.randn(37, 5, generator=g, dtype=torch.float64)
        x, y = x64.to(device=device, dtype=dtype), y64.to(device=device, dtype=dtype)
        opt.zero_grad()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
        exps.append({k: v["exponent"] for k, v in opt.geometry().items()})
    return model, losses, exps


@pytest.mark.parametrize(
    "kw",
    [{}, {"stats": "same_batch"}, {"precondition": "adam"}, {"curvature": "input"}],
    ids=["default", "same_batch", "adam", "input"],
)
def test_auto_on_cuda_takes_the_cpu_steps_in_float64(kw):
    m_cpu, l_cpu, e_cpu = _run("cpu", torch.float64, 12, **kw)
    m_gpu, l_gpu, e_gpu = _run("cuda", torch.float64, 12, **kw)
    assert l_gpu == pytest.approx(l_cpu, rel=1e-9)
    for a, b in zip(e_cpu, e_gpu, strict=True):
        assert a.keys() == b.keys()
        assert all(b[k] == pytest.approx(a[k], abs=1e-6) for k in a)
    for p, q in zip(m_cpu.parameters(), m_gpu.parameters(), strict=True):
        torch.testing.assert_close(q.detach().cpu(), p.detach(), rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_auto_trains_on_cuda(dtype):
    model, losses, exps = _run("cuda", dtype, 40)
    assert all(p.dtype == dtype and bool(torch.isfinite(p).all()) for p in model.parameters())
    assert sum(losses[-5:]) < sum(losses[:5])
    assert all(0.0 <= a <= 1.0 for e in exps for a in e.values() if a is not None)


def _teacher_student(device: str, steps: int = 30):
    from adaptive_lmo.experiments import teacher_student as ts

    cfg = {**ts.config(True), "na": 23, "nb": 13, "m": 11, "n": 600}
    X, Y = (t.double().to(device) for t in ts.make_problem(cfg, 0)["train"])
    student = ts._make_student(cfg, 0).double().to(device)
    opt = AdaptiveLMO(student, lr=0.01, update_every=2)
    g = torch.Generator().manual_seed(0)
    exps = []
    for _ in range(steps):
        idx = torch.randint(0, X.shape[0], (64,), generator=g).to(device)
        opt.zero_grad()
        F.mse_loss(student(X[idx]), Y[idx]).backward()
        opt.step()
        exps.append({k: v["exponent"] for k, v in opt.geometry().items()})
    return student, exps


def test_interior_exponents_on_cuda_match_the_cpu():
    # here the criterion moves off a = 0 (0.06-0.1 on some steps): the refined grid search
    s_cpu, e_cpu = _teacher_student("cpu")
    s_gpu, e_gpu = _teacher_student("cuda")
    assert any(0.0 < a < 1.0 for e in e_cpu for a in e.values())
    for a, b in zip(e_cpu, e_gpu, strict=True):
        assert all(b[k] == pytest.approx(a[k], abs=1e-6) for k in a)
    for p, q in zip(s_cpu.parameters(), s_gpu.parameters(), strict=True):
        torch.testing.assert_close(q.detach().cpu(), p.detach(), rtol=1e-8, atol=1e-10)
