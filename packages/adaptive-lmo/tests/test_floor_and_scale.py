"""``direction_floor`` (vanishing directions) and ``scale="spectral"``: float64 references."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from adaptive_lmo import AdaptiveLMO, fractional_update


def _rand(shape, seed, dtype=torch.float64):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def _svd_member(G: torch.Tensor, a: float) -> torch.Tensor:
    """U diag(s^a / max s^a) V^T from numpy's float64 SVD (independent of torch.linalg)."""
    import numpy as np

    U, s, Vh = np.linalg.svd(G.numpy(), full_matrices=False)
    w = s**a
    return torch.from_numpy((U * (w / w.max())) @ Vh)


# ---- scale="spectral" ------------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(13, 7), (7, 13)])
@pytest.mark.parametrize("a", [0.0, 0.3, 0.77, 1.0])
def test_spectral_scale_matches_float64_svd_reference(shape, a):
    G = _rand(shape, 3) * 5.7
    out = fractional_update(G, a, scale="spectral")
    torch.testing.assert_close(out, _svd_member(G, a), rtol=1e-9, atol=1e-11)
    # top singular value 1, none above the polar factor's
    s = torch.linalg.svdvals(out)
    assert abs(float(s.max()) - 1.0) < 1e-12 and bool((s <= 1 + 1e-12).all())


def test_spectral_scale_batched_and_iterative_route():
    G = _rand((3, 9, 6), 4)
    out = fractional_update(G, 0.45, scale="spectral")
    for k in range(3):
        torch.testing.assert_close(out[k], _svd_member(G[k], 0.45), rtol=1e-9, atol=1e-11)
    # the iterative route in float32 on a moderately conditioned matrix
    U, _ = torch.linalg.qr(_rand((9, 6), 5))
    V, _ = torch.linalg.qr(_rand((6, 6), 6))
    s = torch.linspace(1.0, 0.05, 6, dtype=torch.float64)
    H = (U * s) @ V.T
    it = fractional_update(H.float(), 0.45, scale="spectral", method="iterative").double()
    ref = _svd_member(H, 0.45)
    assert float((it - ref).norm() / ref.norm()) < 1e-3


def test_spectral_scale_never_exceeds_the_polar_scale_step():
    """Every member's singular values are <= 1 under "spectral"; under "polar" a spiky
    direction's a = 1 member reaches sqrt(k) along its top direction."""
    U, _ = torch.linalg.qr(_rand((12, 8), 7))
    V, _ = torch.linalg.qr(_rand((8, 8), 8))
    s = torch.tensor([1.0] + [1e-4] * 7, dtype=torch.float64)  # nearly rank one
    G = (U * s) @ V.T
    top_polar = float(torch.linalg.matrix_norm(fractional_update(G, 1.0, scale="polar"), 2))
    top_spec = float(torch.linalg.matrix_norm(fractional_update(G, 1.0, scale="spectral"), 2))
    assert abs(top_polar - 8**0.5) < 1e-3 and abs(top_spec - 1.0) < 1e-12


# ---- direction_floor -------------------------------------------------------------------------


def _net(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(5, 11), nn.Tanh(), nn.Linear(11, 7), nn.Tanh(), nn.Linear(7, 2))


def _one_step(floor, scale_grad, a=0.0, momentum=0.0, seed=0):
    """One AdaptiveLMO step on a float64 net whose loss is scaled by ``scale_grad``; returns
    the change of the hidden matrix and its gradient."""
    m = _net(seed).double()
    opt = AdaptiveLMO(
        m,
        lr=0.1,
        momentum=momentum,
        exponent=a,
        direction_floor=floor,
        adamw_lr=0.0,
        adjust_lr_fn="unit",
    )
    x = _rand((19, 5), seed + 1)
    y = _rand((19, 2), seed + 2)
    W0 = m[2].weight.detach().clone()
    opt.zero_grad()
    (scale_grad * F.mse_loss(m(x), y)).backward()
    g = m[2].weight.grad.detach().clone()
    opt.step()
    return m[2].weight.detach() - W0, g


@pytest.mark.parametrize("a", [0.0, 0.6])
def test_floor_shrinks_a_vanishing_direction_linearly(a):
    floor = 1e-7
    # with momentum 0 the direction is the gradient; find its norm at scale 1
    _, g1 = _one_step(0.0, 1.0, a)
    tiny = 0.01 * floor / float(g1.norm())  # direction norm = 1% of the floor
    dW, g = _one_step(floor, tiny, a)
    ref = -0.1 * _svd_member(g, a) * (float(g.norm()) / floor)
    # the default scale is "polar": rescale the reference to the polar factor's Frobenius norm
    k = min(g.shape)
    ref = ref / float(_svd_member(g, a).norm()) * k**0.5
    torch.testing.assert_close(dW, ref, rtol=1e-6, atol=0.0)
    assert abs(float(dW.norm()) / (0.1 * k**0.5) - 0.01) < 1e-6
    # without the floor the step keeps the polar factor's full size
    dW0, _ = _one_step(0.0, tiny, a)
    assert abs(float(dW0.norm()) - 0.1 * k**0.5) < 1e-9


def test_floor_leaves_directions_above_it_exact():
    for scale in (1.0, 1e-5):  # direction norms well above 1e-7
        dW_floor, g = _one_step(1e-7, scale)
        dW_none, _ = _one_step(0.0, scale)
        assert torch.equal(dW_floor, dW_none)
        U, _, Vh = torch.linalg.svd(g, full_matrices=False)
        torch.testing.assert_close(dW_none, -0.1 * U @ Vh, rtol=1e-9, atol=1e-12)


def test_auto_keeps_its_exponent_when_the_scored_direction_is_below_the_floor():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(6, 9), nn.Tanh(), nn.Linear(9, 8), nn.Tanh(), nn.Linear(8, 2))
    m = m.double()
    opt = AdaptiveLMO(m, lr=0.02, momentum=0.0, update_every=2, direction_floor=1e-7)
    g = torch.Generator().manual_seed(3)
    x, y = torch.randn(33, 6, generator=g, dtype=torch.float64), None
    y = torch.randn(33, 2, generator=g, dtype=torch.float64)

    def step(scale):
        opt.zero_grad()
        (scale * F.mse_loss(m(x), y)).backward()
        opt.step()

    for _ in range(4):
        step(1.0)
    before = {k: v["exponent"] for k, v in opt.geometry().items()}
    assert all(v["source"].startswith("criterion") for v in opt.geometry().values())
    for _ in range(4):  # directions of norm ~1e-12: scored on steps 5 -> 6 and 7 -> 8
        step(1e-12)
    geo = opt.geometry()
    assert {k: v["exponent"] for k, v in geo.items()} == before
    assert all("below direction_floor" in v["source"] for v in geo.values())
    # without a floor the same run re-chooses from the tiny directions
    torch.manual_seed(0)
    m2 = nn.Sequential(nn.Linear(6, 9), nn.Tanh(), nn.Linear(9, 8), nn.Tanh(), nn.Linear(8, 2))
    m2.load_state_dict(m.state_dict())  # any state: only the source is checked
    opt2 = AdaptiveLMO(m2.double(), lr=0.02, momentum=0.0, update_every=2, direction_floor=0.0)
    for _ in range(4):
        opt2.zero_grad()
        (1e-12 * F.mse_loss(m2(x), y)).backward()
        opt2.step()
    assert all(v["source"].startswith("criterion") for v in opt2.geometry().values())


@pytest.mark.parametrize("bad", [-1e-7, float("nan"), float("inf")])
def test_bad_floor_raises(bad):
    with pytest.raises(ValueError, match="direction_floor"):
        AdaptiveLMO(_net(), direction_floor=bad)
