"""What a criterion step's :class:`~adaptive_lmo.layer_step.LayerStep` holds, against references.

One float64 step with ``stats="same_batch"`` and every row kept (``max_rows`` above the batch),
on an ``nn.Linear`` (rows from its hooks) and a batched ``(E, m, n)`` parameter (rows fed by
``record_activations``). The item each layer's choice receives is checked field by field
against quantities formed here without the package: the direction from the gradient (the
first step's Nesterov momentum, or Adam's ratio), the factors by their defining identities
(``P^T P V = V diag(s^2)``, ``U = P V / s``: no reference SVD, so no sign or gap issue), the
statistics from the recorded rows and the loss's output gradient in closed form
(``(z - t) / N`` for the half mean-squared error). The ``*_shape`` fields are what every rank
packs for the all-reduce, so they must equal the statistics' shapes.

Error model: every compared quantity is a few float64 matmuls of O(1) entries of ``P``, ``X``
and the output gradients, except ``U = P V / s``, whose rounding grows with ``s_max / s_min``;
tolerance ``64 * eps * size * cond``.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from adaptive_lmo import AdaptiveLMO
from adaptive_lmo.layer_step import CriterionInputs, LayerStep

EPS = torch.finfo(torch.float64).eps
MU, N = 0.95, 37
E, ME, NE = 3, 4, 6  # the batched parameter: E matrices of ME x NE


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(9, 5, bias=False)
        self.experts = nn.Parameter(torch.randn(E, ME, NE) / NE**0.5)

    def forward(self, x: torch.Tensor, xe: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.lin(x), torch.einsum("emn,ekn->ekm", self.experts, xe)


def _close(actual, expected, cond=1.0):
    scale = float(expected.abs().max()) if expected.numel() else 1.0
    tol = 64 * EPS * max(expected.shape[-1], N) * cond * max(scale, 1.0)
    torch.testing.assert_close(actual, expected, rtol=0.0, atol=tol)


@pytest.mark.parametrize("precondition", [None, "adam"])
def test_criterion_step_items_hold_the_documented_statistics(precondition):
    torch.manual_seed(3)
    net = Net().double()
    opt = AdaptiveLMO(
        net,
        lr=0.01,
        momentum=MU,
        precondition=precondition,
        update_every=1,
        stats="same_batch",
        max_rows=10_000,
        head=None,
    )
    assert opt.routing() == {"lin.weight": "lmo", "experts": "lmo"}
    seen: dict[str, LayerStep] = {}
    choose = opt._choose

    def spy(it):
        choose(it)
        seen[opt._names[id(it.p)]] = it

    opt._choose = spy  # the instance attribute shadows the method for this optimizer only
    x = torch.randn(N, 9, dtype=torch.float64)
    xe = torch.randn(E, N, NE, dtype=torch.float64)
    t, te = torch.randn(N, 5, dtype=torch.float64), torch.randn(E, N, ME, dtype=torch.float64)
    z, ze = net(x, xe)
    # closed-form output gradients of the loss below: (z - t) / N
    g_lin, g_exp = (z - t).detach() / N, (ze - te).detach() / N
    opt.record_activations(net.experts, xe, output_gradients=g_exp)
    (0.5 * ((z - t) ** 2).sum() / N + 0.5 * ((ze - te) ** 2).sum() / N).backward()
    grads = {"lin.weight": net.lin.weight.grad.clone(), "experts": net.experts.grad.clone()}
    opt.step()

    assert set(seen) == {"lin.weight", "experts"}
    rows = {"lin.weight": (x, g_lin), "experts": (xe, g_exp)}
    for name, it in seen.items():
        G, (X, Gout) = grads[name], rows[name]
        assert isinstance(it, LayerStep) and isinstance(it.crit, CriterionInputs)
        assert it.due and not it.snap and it.shape == tuple(G.shape)
        crit = it.crit
        # the direction and the gradient estimate of the first step
        if precondition is None:
            _close(it.P, (1 + MU) * G)  # Nesterov: g + mu * (mu * 0 + g)
            assert it.ghat is it.P
        else:
            _close(it.P, G / (G.abs() + opt.param_groups[0]["eps"]))  # bias-corrected m / sqrt(v)
            _close(it.ghat, G)
        # the factors, by their defining identities
        s, Vh = crit.s, crit.Vh
        r = min(it.shape[-2:])
        assert s.shape == (*it.shape[:-2], r) and Vh.shape == (*it.shape[:-2], r, it.shape[-1])
        assert it.factors is not None and torch.equal(it.factors.s, s)
        cond = float((s[..., 0] / s[..., -1]).max())
        eye = torch.eye(r, dtype=torch.float64).expand(*it.shape[:-2], r, r)
        _close(Vh @ Vh.mT, eye)
        PtP = it.P.mT @ it.P
        _close(PtP @ Vh.mT, Vh.mT * s.unsqueeze(-2) ** 2, cond)
        U = it.P @ Vh.mT / s.unsqueeze(-2)
        if precondition is None:
            assert crit.d is None  # d = s
        else:
            _close(crit.d, torch.diagonal(U.mT @ G @ Vh.mT, dim1=-2, dim2=-1), cond)
        # the statistics, from the rows and the closed-form output gradients
        assert torch.equal(crit.x, X)
        _close(crit.c, Vh @ (X.mT @ X / N) @ Vh.mT)
        bz = Gout @ U
        _close(crit.bz, bz, cond)
        _close(crit.b, bz.mT @ bz / N, cond)
        q = bz.pow(2).sum(-1).pow(2).mean(-1)
        _close(crit.bq, torch.stack([q, torch.full_like(q, N)], dim=-1), cond)
        _close(crit.curv, crit.b * crit.c)  # shrinkage="none"
        assert not crit.fisher
        for k in ("c", "b", "bq"):  # what every rank packs for the all-reduce
            assert getattr(crit, f"{k}_shape") == tuple(getattr(crit, k).shape)
