"""The RKHS-norm check: its exact error against direct kernel algebra; AdaptiveFGD(norm="rkhs")."""

import itertools
import math

import pytest
import torch

from adaptive_fgd import AdaptiveFGD, KernelCentres, RandomFourierFeatures
from adaptive_fgd.functional import guaranteed_decrease
from adaptive_fgd.representations import gaussian_kernel
from adaptive_fgd.rkhs import operator_bound, project, refine_rkhs


def _data(n, seed, freq=6.0):
    gen = torch.Generator().manual_seed(seed)
    x = torch.rand(n, 2, generator=gen) * 2 - 1
    y = torch.sin(freq * x[:, :1]) * torch.cos(3 * x[:, 1:]) + 0.3 * x[:, :1]
    return x, y, gen


@pytest.mark.parametrize(("n", "m", "k", "inside"), [(97, 13, 1, True), (150, 41, 3, False)])
def test_projection_error_equals_the_direct_kernel_quadratic_form(n, m, k, inside):
    # route 2: ||sum_i a_i k(x_i,.) - sum_j b_j k(c_j,.)||^2 = w^T K_ZZ w over Z = [x; c],
    # w = [a; -b], from one Gram matrix of all points (no three-term expansion, no solve)
    x, _, gen = _data(n, seed=n)
    c = x[torch.randperm(n, generator=gen)[:m]] if inside else torch.randn(m, 2, generator=gen)
    alpha = torch.randn(n, k, generator=gen) / n
    bw = 0.37
    values = gaussian_kernel(x, x, bw) @ alpha
    beta, err, norm_sq = project(c, bw, gaussian_kernel(x, c, bw), alpha, values)
    z = torch.cat([x, c])
    w = torch.cat([alpha, -beta])
    kzz = gaussian_kernel(z, z, bw)
    direct_err_sq = float((w * (kzz @ w)).sum())
    direct_norm_sq = float((alpha * (kzz[:n, :n] @ alpha)).sum())
    # the three-term form cancels to err^2 from terms of size ||g||^2: rounding ~ 1e-16 * cond
    # of the sums (n + m terms of size ||g||^2) -> absolute 1e-12 ||g||^2 is generous
    assert math.isclose(norm_sq, direct_norm_sq, rel_tol=1e-12)
    assert abs(err**2 - direct_err_sq / direct_norm_sq) <= 1e-10
    # the projection is H-orthogonal: the error vanishes at every centre (<e, k(c_j,.)> = e(c_j)),
    # up to the 1e-10 ridge times |beta|
    resid_at_c = gaussian_kernel(c, x, bw) @ alpha - gaussian_kernel(c, c, bw) @ beta
    assert float(resid_at_c.abs().max()) <= 1e-8 * (1 + float(beta.abs().max()))
    # so Pythagoras holds: ||g - g_hat||^2 = ||g||^2 - ||g_hat||^2
    ghat_sq = float((beta * (gaussian_kernel(c, c, bw) @ beta)).sum())
    assert abs(err**2 - (1 - ghat_sq / norm_sq)) <= 1e-7


def test_value_check_accepts_an_approximation_the_rkhs_check_rejects():
    # the same target g (an RKHS gradient) and the same projections on prefixes of one centre
    # order: at some size the values on the sample are within delta while the RKHS error is not
    # (the RKHS norm also weighs the error's roughness)
    n, bw, delta = 600, 0.3, 0.1
    x, y, gen = _data(n, seed=0)
    alpha = -y / n  # the squared loss's RKHS gradient at f = 0
    values = gaussian_kernel(x, x, bw) @ alpha
    order = torch.randperm(n, generator=gen)
    found = False
    for m in (8, 16, 32, 64, 128):
        c = x[order[:m]]
        phi = gaussian_kernel(x, c, bw)
        beta, err_h, _ = project(c, bw, phi, alpha, values)
        err_values = float((phi @ beta - values).norm() / values.norm())
        found |= err_values <= delta < err_h
    assert found


def test_refine_rkhs_meets_delta_exactly_and_grows():
    n = 400
    x, y, gen = _data(n, seed=2)
    bw = 0.25
    fam = KernelCentres(2, bw, cap=400)
    alpha = -y / n
    values = gaussian_kernel(x, x, bw) @ alpha
    res = refine_rkhs(
        fam, x, lambda m: gaussian_kernel(x, fam.centres[:m], bw), alpha, values, 0.05, 4,
        generator=gen,
    )  # fmt: skip
    assert res.met and res.rel_error <= 0.05 and res.tries > 1 and res.size > 4
    with pytest.raises(ValueError, match="KernelCentres"):
        refine_rkhs(RandomFourierFeatures(2, 0.3, 16), x, None, alpha, values, 0.3, 4)


@pytest.mark.parametrize("loss", ["squared", "logistic"])
def test_rkhs_fgd_meets_delta_and_the_descent_guarantee(loss):
    # every step: the exact RKHS error <= delta, and the decrease is at least the descent
    # lemma's for the smoothness L * lambda_max(K/n) (bounded by the row sums) in H
    x, y, _ = _data(500, seed=3)
    if loss == "logistic":
        y = torch.tanh(y)
    d = 0.3
    fgd = AdaptiveFGD(KernelCentres(2, 0.3, cap=300), loss=loss, delta=d, norm="rkhs")
    fgd.fit(x, y, steps=12)
    assert fgd._op_bound >= float(torch.linalg.eigvalsh(fgd._gram / 500).max()) * (1 - 1e-12)
    lsmooth = 1.0 if loss == "squared" else 0.25
    prev = math.log(2) if loss == "logistic" else 0.5 * float((y**2).mean())
    for r in fgd.history:
        assert r.met and r.rel_error <= d and r.rel_error == r.rel_error_full
        bound = guaranteed_decrease(lsmooth * fgd._op_bound, d, fgd.lr, r.grad_norm_sq)
        assert prev - r.loss >= bound * (1 - 1e-9)
        prev = r.loss
    assert len({r.size for r in fgd.history}) > 1 or fgd.history[0].tries > 1
    # the merged coefficients reproduce the values updated step by step
    torch.testing.assert_close(fgd.predict(x), fgd.sample_values, rtol=0, atol=1e-9)
    losses = [r.loss for r in fgd.history]
    assert all(b < a for a, b in itertools.pairwise(losses))


def test_operator_bound_and_bad_arguments():
    x, _, _ = _data(90, seed=4)
    k = gaussian_kernel(x, x, 0.5)
    top = float(torch.linalg.eigvalsh(k / 90).max())
    assert top <= operator_bound(k) <= 1.0
    with pytest.raises(ValueError, match="non-negative"):
        operator_bound(k - 0.5)
    with pytest.raises(ValueError, match="square"):
        operator_bound(k[:3])
    with pytest.raises(ValueError, match="norm"):
        AdaptiveFGD(KernelCentres(2, 0.3, cap=8), norm="h1")
    with pytest.raises(ValueError, match="KernelCentres"):
        AdaptiveFGD(RandomFourierFeatures(2, 0.3, cap=8), norm="rkhs")
    with pytest.raises(ValueError, match="vanishes"):
        project(x[:3], 0.5, gaussian_kernel(x, x[:3], 0.5), torch.zeros(90, 1), torch.zeros(90, 1))
