"""The group games on a CUDA model: the same rounds as on the CPU (run by ``nox -s gpu``).

The game's state (q, sums, sampling) stays float64 on the CPU; the parameters and the data live
on the GPU. The two meet at the step's weighted objective and at the q update, which these
tests cross on every round.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from gdro_fsq import ERM, GDROFSQ, OneSampleBandit, SagawaGDRO, SMDFullInfo
from gdro_fsq.oracle import make_grouped_logistic

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]

MAKERS = {
    "fsq_iw": lambda p, f, m, g: GDROFSQ(p, f, m, lr_theta=0.5, generator=g),
    "fsq_ix": lambda p, f, m, g: GDROFSQ(p, f, m, lr_theta=0.5, generator=g, estimator="ix"),
    "fsq_sgd": lambda p, f, m, g: GDROFSQ(p, f, m, lr_theta=0.5, generator=g, theta_update="sgd"),
    "sagawa": lambda p, f, m, g: SagawaGDRO(p, f, m, lr_theta=0.1, lr_q=0.5, generator=g),
    "erm": lambda p, f, m, g: ERM(p, f, m, lr_theta=0.5, generator=g),
    "smd": lambda p, f, m, g: SMDFullInfo(p, f, m, lr_theta=0.5, lr_q=1.0, generator=g),
    "one": lambda p, f, m, g: OneSampleBandit(p, f, m, lr_theta=0.5, generator=g),
}


def _play(name: str, device: str, rounds: int = 25):
    prob = make_grouped_logistic(5, 3, 20, seed=0)
    prob = dataclasses.replace(
        prob, X=prob.X.to(device), y=prob.y.to(device), groups=prob.groups.to(device)
    )
    gen = torch.Generator().manual_seed(2)
    w = torch.zeros(3, dtype=prob.X.dtype, device=device, requires_grad=True)
    opt = MAKERS[name]([w], prob.loss_fn, 5, gen)
    sampler = prob.sampler(gen)
    sizes = {"smd": 5, "one": 1}
    for t in range(rounds):
        opt.round(sampler, sizes.get(name, 1 + t % 5))
    return w.detach().cpu(), opt.q.detach().cpu(), prob.max_risk(w.detach())


@pytest.mark.parametrize("name", list(MAKERS))
def test_rounds_on_cuda_match_the_cpu(name):
    w_cpu, q_cpu, risk_cpu = _play(name, "cpu")
    w_gpu, q_gpu, risk_gpu = _play(name, "cuda")
    torch.testing.assert_close(w_gpu, w_cpu, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(q_gpu, q_cpu, rtol=1e-5, atol=1e-6)
    assert risk_gpu == pytest.approx(risk_cpu, rel=1e-5)
