"""GP-EI from BoTorch as a policy (the ``baselines`` extra)."""

import pytest
import torch

from ficbo.baselines import gp_ei_policy
from ficbo.optimize import run
from ficbo.prior import evaluate, sample_tasks


@pytest.mark.slow
def test_gp_ei_finds_the_max_of_a_smooth_1d_task_and_never_repeats():
    g = torch.Generator().manual_seed(0)
    tasks = sample_tasks(2, 1, 1, generator=g, lengthscale=0.3)
    x = torch.linspace(0, 1, 15, dtype=torch.float64)[None, :, None].expand(2, -1, -1).clone()
    f, fb = evaluate(tasks, x, generator=g)
    res = run(x, f, fb, gp_ei_policy(), n_iter=8, n_init=2, seed=0)
    assert all(len(set(q.tolist())) == 10 for q in res.queries)
    # 10 of 15 grid points chosen by GP-EI on a smooth function: the max is among them
    # (random choice would miss it with probability 1/3 per task).
    assert torch.allclose(res.simple_regret[:, -1], torch.zeros(2, dtype=torch.float64))
