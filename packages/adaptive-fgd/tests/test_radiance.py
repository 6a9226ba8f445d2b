"""Volume rendering and its functional gradient: loops, autograd, finite differences (float64)."""

import itertools
import math

import pytest
import torch

from adaptive_fgd import KernelCentres
from adaptive_fgd.experiments import radiance as rad_exp
from adaptive_fgd.functional import l2_inner
from adaptive_fgd.radiance import RadianceFGD, ray_points, render, render_gradient


def _field(r, s, seed):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(r, s, 4, generator=gen), gen


@pytest.mark.parametrize(("r", "s"), [(1, 1), (3, 7), (5, 16)])
def test_render_equals_the_product_form_written_as_a_loop(r, s):
    # route 2: T_j as the running product of (1 - alpha_i), alpha = 1 - exp(-softplus(s) delta)
    f, _ = _field(r, s, seed=r * 10 + s)
    delta = 0.37
    out = torch.zeros(r, 3)
    for i in range(r):
        trans = 1.0
        for j in range(s):
            sigma = math.log1p(math.exp(float(f[i, j, 0])))
            alpha = 1 - math.exp(-sigma * delta)
            out[i] += trans * alpha * f[i, j, 1:]
            trans *= 1 - alpha
    torch.testing.assert_close(render(f, delta), out, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize(("r", "s"), [(2, 1), (4, 9), (7, 24)])
def test_render_gradient_matches_autograd(r, s):
    f, gen = _field(r, s, seed=r + s)
    f = 2 * f  # densities from ~0 to ~5: both regimes of the chain rule
    target = torch.rand(r, 3, generator=gen)
    delta = 0.21
    value, grad = render_gradient(f, delta, target)
    fa = f.clone().requires_grad_()
    loss = 0.5 * ((render(fa, delta) - target) ** 2).sum(1).mean()
    (ref,) = torch.autograd.grad(loss, fa)
    assert math.isclose(value, loss.item(), rel_tol=1e-13)
    torch.testing.assert_close(grad, ref, rtol=1e-10, atol=1e-14)


def test_functional_gradient_is_the_riesz_representer_fd():
    # g = N dR/df at the N ray samples; <g, h>_mu = DR(f)[h] by central differences along a
    # random direction h (truncation eps^2 |R'''| ~ 1e-10, rounding 1e-16 / eps ~ 1e-11)
    _, delta = ray_points(torch.tensor([0.3, 1.9]), n_rays=5, n_samples=11)
    f, gen = _field(10, 11, seed=4)
    h = torch.randn(10, 11, 4, generator=gen)
    target = torch.rand(10, 3, generator=gen)
    _, grad = render_gradient(f, delta, target)
    n = 10 * 11
    g = n * grad.reshape(n, 4)
    eps = 1e-5
    fd = (
        render_gradient(f + eps * h, delta, target)[0]
        - render_gradient(f - eps * h, delta, target)[0]
    ) / (2 * eps)
    assert abs(fd - float(l2_inner(g, h.reshape(n, 4)))) <= 1e-8 * (1 + abs(fd))


def test_ray_points_geometry():
    pts, delta = ray_points(torch.tensor([0.0, math.pi / 2]), n_rays=4, n_samples=6, radius=1.5)
    assert pts.shape == (8, 6, 2) and math.isclose(delta, 0.5)
    # view 0 looks along +x: y constant on each ray, x at midpoints -1.5 + (j + 1/2) delta
    torch.testing.assert_close(pts[0, :, 0], -1.5 + (torch.arange(6) + 0.5) * 0.5)
    assert float(pts[:4, :, 1].std(1).max()) == 0.0
    torch.testing.assert_close(pts[:4, 0, 1], torch.tensor([-0.75, -0.25, 0.25, 0.75]))
    # view 1 looks along +y: x constant on each ray
    assert float(pts[4:, :, 0].std(1).max()) < 1e-15
    with pytest.raises(ValueError, match="empty"):
        ray_points(torch.tensor([]), 2, 2)
    with pytest.raises(ValueError, match=">= 1"):
        ray_points(torch.tensor([0.0]), 0, 2)


def test_radiance_fgd_descends_and_its_merged_field_renders_the_sample_values():
    pts, tgt, _, _, delta = rad_exp.views(quick=True)
    pts, tgt = pts[::3], tgt[::3]  # 64 rays: small and fast
    fgd = RadianceFGD(KernelCentres(2, 0.2, cap=128), pts, delta, tgt, rel_tol=0.3)
    losses = [fgd.loss] + [fgd.step().loss for _ in range(8)]
    assert all(b < a for a, b in itertools.pairwise(losses))  # Armijo: strict decrease
    assert losses[-1] < 0.2 * losses[0]
    vals = fgd.field(pts.reshape(-1, 2)).reshape(fgd.sample_values.shape)
    torch.testing.assert_close(vals, fgd.sample_values, rtol=0, atol=1e-9)
    torch.testing.assert_close(
        fgd.render_rays(pts, delta), render(fgd.sample_values, delta), rtol=0, atol=1e-9
    )
    assert all(r.size <= 128 for r in fgd.history) and fgd.history[-1].lr > 0


def test_radiance_bad_input():
    pts, delta = ray_points(torch.tensor([0.0]), 3, 4)
    tgt = torch.zeros(3, 3)
    fam = KernelCentres(2, 0.2, cap=8)
    with pytest.raises(ValueError, match="delta"):
        RadianceFGD(fam, pts, delta, tgt, rel_tol=1.0)
    with pytest.raises(ValueError, match="spacing"):
        RadianceFGD(fam, pts, -1.0, tgt)
    with pytest.raises(ValueError, match="finite"):
        RadianceFGD(fam, pts, delta, torch.full((3, 3), math.nan))
    with pytest.raises(ValueError, match="target"):
        render_gradient(torch.zeros(3, 4, 4), delta, torch.zeros(2, 3))
    with pytest.raises(ValueError, match="field values"):
        render(torch.zeros(3, 4), delta)
