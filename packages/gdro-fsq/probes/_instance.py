"""The probes' command-line instances: ``synthetic M ...`` or ``real ...``.

``synthetic M`` is the grouped logistic problem of the ``synthetic`` experiment (d = 5, 40
rows per group, seed 0) started at ``-D θ*/‖θ*‖``; ``real`` is the digits-parity problem of
the ``real`` experiment started at 0. Both come with their exact GDRO value.
"""

from __future__ import annotations

import torch

from gdro_fsq.oracle import gdro_optimum, make_grouped_logistic


def instance(argv: list[str]) -> tuple[object, float, torch.Tensor, int, int]:
    """``(problem, optimal value, start, m, index of the next argument)`` from ``argv``."""
    if argv[1] == "synthetic":
        m = int(argv[2])
        prob = make_grouped_logistic(m, 5, 40, radius=3.0, noise=0.1, seed=0)
        theta_star, value = gdro_optimum(prob)
        return prob, value, -theta_star / theta_star.norm() * prob.radius, m, 3
    from gdro_fsq.experiments.real import load_digits_parity

    prob, _ = load_digits_parity(0)
    _, value = gdro_optimum(prob)
    return prob, value, torch.zeros(prob.dim, dtype=torch.float64), prob.n_groups, 2
