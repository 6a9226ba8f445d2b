"""IMuon: routing, references, staying on the manifold, convergence, state, bad input."""

from __future__ import annotations

import copy
import warnings

import numpy as np
import pytest
import torch

from imuon import IMuon, tag
from shared_core.manifolds import SPD, Grassmann, Stiefel

D = torch.float64


def _gen(seed=0):
    return torch.Generator().manual_seed(seed)


def _sym_matrix(n, gen, dtype=D):
    c = torch.randn(n, n, generator=gen, dtype=dtype)
    return c + c.mT


# ---------------------------------------------------------------- references
def test_euclidean_route_is_muon_against_a_float64_svd_reference():
    gen = _gen()
    W = torch.nn.Parameter(torch.randn(9, 4, generator=gen, dtype=D))
    W0 = W.detach().clone()
    opt = IMuon([W], lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.2)
    buf = torch.zeros_like(W0)
    x = W0.clone()
    for _ in range(3):
        g = torch.randn(9, 4, generator=gen, dtype=D)
        W.grad = g.clone()
        opt.step()
        buf = 0.9 * buf + 0.1 * g
        d = 0.1 * g + 0.9 * buf
        u, _, vh = np.linalg.svd(d.numpy(), full_matrices=False)
        x = x * (1 - 0.1 * 0.2) - 0.1 * np.sqrt(9 / 4) * torch.from_numpy(u @ vh)
    torch.testing.assert_close(W.detach(), x, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("nesterov", [False, True])
@pytest.mark.parametrize("lift", ["horizontal", "total"])
@pytest.mark.parametrize("norm", ["spectral", "nuclear"])
def test_fixed_rank_momentum_step_against_a_gram_matrix_reference(nesterov, lift, norm):
    # Reference: the Riemannian gradient and the projection transport of shared-core's
    # FixedRankFactored (Gram-matrix solves, no QR frames), the public fixed_rank_lmo, and the
    # momentum recursion written out: the optimizer's L-coordinate path must agree.
    from imuon import fixed_rank_lmo
    from shared_core.manifolds import Factors, FixedRankFactored

    gen = _gen(21)
    m, n, r, beta, lr, wd = 11, 7, 3, 0.85, 0.05, 0.3
    F = FixedRankFactored(m, n, r)
    x = F.random_point(generator=gen, dtype=D)
    a, b = torch.nn.Parameter(x.A.clone()), torch.nn.Parameter(x.B.clone())
    opt = IMuon(
        [{"params": [a, b], "manifold": "fixed_rank"}],
        lr=lr,
        momentum=beta,
        nesterov=nesterov,
        weight_decay=wd,
        norm=norm,
        fixed_rank_lift=lift,
    )
    buf = F.zero_tangent(x)
    for _ in range(4):
        G = torch.randn(m, n, generator=gen, dtype=D)
        a.grad, b.grad = G @ x.B, G.mT @ x.A
        opt.step()
        rg = F.egrad2rgrad(x, (G @ x.B, G.mT @ x.A))
        moved = F.proju(x, buf)
        buf = Factors(*(beta * u + (1 - beta) * g for u, g in zip(moved, rg, strict=True)))
        d = Factors(*(beta * u + (1 - beta) * g for u, g in zip(buf, rg, strict=True)))
        xi = fixed_rank_lmo(x, d if nesterov else buf, norm, lift)
        s = (1 - lr * wd) ** 0.5
        x = Factors((x.A + lr * xi.A) * s, (x.B + lr * xi.B) * s)
        torch.testing.assert_close(a.detach(), x.A, rtol=1e-9, atol=1e-11)
        torch.testing.assert_close(b.detach(), x.B, rtol=1e-9, atol=1e-11)


def test_bf16_newton_schulz_route_approximates_the_exact_polar_step():
    gen = _gen(14)
    W = torch.nn.Parameter(torch.randn(40, 24, generator=gen))
    W0 = W.detach().clone()
    G = torch.randn(40, 24, generator=gen)
    opt = IMuon(
        [W], lr=1.0, momentum=0.0, lr_scale="none", polar="muon", polar_dtype=torch.bfloat16
    )
    W.grad = G.clone()
    opt.step()
    u, _, vh = torch.linalg.svd(G.double(), full_matrices=False)
    step = (W.detach() - W0).double()
    # Muon's quintic leaves singular values in roughly [0.6, 1.2]: same direction, not exact.
    cos = float((step * -(u @ vh)).sum() / (step.norm() * (u @ vh).norm()))
    assert cos > 0.95
    assert float(torch.linalg.matrix_norm(step, 2)) < 1.3


def test_vector_route_is_adamw():
    gen = _gen(1)
    b1 = torch.nn.Parameter(torch.randn(7, generator=gen, dtype=D))
    b2 = torch.nn.Parameter(b1.detach().clone())
    ours = IMuon([b1], adamw_lr=0.01, adamw_betas=(0.8, 0.9), adamw_weight_decay=0.1)
    ref = torch.optim.AdamW([b2], lr=0.01, betas=(0.8, 0.9), eps=1e-8, weight_decay=0.1)
    for _ in range(4):
        g = torch.randn(7, generator=gen, dtype=D)
        b1.grad, b2.grad = g.clone(), g.clone()
        ours.step()
        ref.step()
    torch.testing.assert_close(b1, b2, rtol=1e-12, atol=1e-14)


def test_tagged_parameter_goes_to_its_manifold():
    gen = _gen(2)
    X = tag(torch.nn.Parameter(Stiefel(6, 2).random_point(generator=gen, dtype=D)), "stiefel")
    opt = IMuon([X], lr=0.3)
    X.grad = torch.randn(6, 2, generator=gen, dtype=D)
    opt.step()
    Stiefel(6, 2).check_point(X.detach())
    with pytest.raises(ValueError, match="cannot tag"):
        tag(torch.nn.Parameter(torch.ones(2, 2)), "fixed_rank")


def test_a_module_is_split_by_the_suite_convention():
    """Embedding (and the head tied to it), norms and biases on AdamW; hidden matrices on the
    Muon step, a tagged matrix on its manifold; the AdamW side equals torch's AdamW."""
    gen = _gen(3)
    torch.manual_seed(3)
    emb = torch.nn.Embedding(11, 5, dtype=D)
    body = torch.nn.Linear(5, 5, dtype=D)
    frame = torch.nn.Linear(5, 3, bias=False, dtype=D)
    with torch.no_grad():
        frame.weight.copy_(Stiefel(5, 3).random_point(generator=gen, dtype=D).T)  # wide: rows
    tag(frame.weight, "stiefel")
    head = torch.nn.Linear(5, 11, bias=False, dtype=D)
    head.weight = emb.weight
    model = torch.nn.ModuleDict({"emb": emb, "body": body, "frame": frame, "head": head})
    opt = IMuon(model, lr=0.05)
    kinds = {id(p): opt._kind(g, p) for g in opt.param_groups for p in g["params"]}
    assert kinds[id(emb.weight)] == "adamw" and kinds[id(body.bias)] == "adamw"
    assert kinds[id(body.weight)] == "euclidean" and kinds[id(frame.weight)] == "stiefel"
    twin = emb.weight.detach().clone().requires_grad_()
    ref = torch.optim.AdamW([twin], lr=3e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.0)
    for _ in range(3):
        for p in model.parameters():
            p.grad = torch.randn(p.shape, generator=gen, dtype=D)
        twin.grad = emb.weight.grad.clone()
        opt.step()
        ref.step()
    torch.testing.assert_close(emb.weight.detach(), twin.detach(), rtol=1e-12, atol=1e-14)
    Stiefel(5, 3).check_point(frame.weight.detach().T)
    with pytest.raises(ValueError, match=r"needs an nn\.Module"):
        IMuon([body.weight], head="head")


# ---------------------------------------------------------------- manifold behaviour
def _train(params_groups, loss_fn, steps, **kw):
    opt = IMuon(params_groups, **kw)
    for _ in range(steps):
        opt.zero_grad()
        loss_fn().backward()
        opt.step()
    return opt


@pytest.mark.parametrize("steps", [1000, pytest.param(10_000, marks=pytest.mark.slow)])
def test_stiefel_stays_orthonormal_in_float32(steps):
    gen = _gen(3)
    C = _sym_matrix(20, gen, torch.float32)
    X = torch.nn.Parameter(Stiefel(20, 5).random_point(generator=gen, dtype=torch.float32))
    _train(
        [{"params": [X], "manifold": "stiefel"}], lambda: torch.trace(X.T @ C @ X), steps, lr=0.01
    )
    err = float((X.T @ X - torch.eye(5)).norm())
    assert err < 1e-5


def test_spd_stays_positive_definite_when_pushed_to_the_boundary():
    gen = _gen(4)
    S = torch.nn.Parameter(SPD(5).random_point(generator=gen, dtype=D))
    T = _sym_matrix(5, gen) * 10  # indefinite: the minimiser lies on the cone's boundary
    _train(
        [{"params": [S], "manifold": "spd"}], lambda: ((S - T) ** 2).sum(), 100, lr=0.2, momentum=0
    )
    w = torch.linalg.eigvalsh(S.detach())
    assert float(w.min()) > 0
    assert float(w.min()) < 1e-3 * float(w.max())  # it did get close to the boundary


@pytest.mark.parametrize("manifold", ["stiefel", "grassmann"])
@pytest.mark.parametrize("norm", ["spectral", "frobenius"])
def test_rayleigh_quotient_converges_to_the_smallest_eigenvalues(manifold, norm):
    gen = _gen(5)
    C = _sym_matrix(12, gen)
    X = torch.nn.Parameter(Stiefel(12, 3).random_point(generator=gen, dtype=D))
    opt = IMuon(
        [{"params": [X], "manifold": manifold}], lr=0.02, norm=norm, momentum=0, scaling="dual"
    )
    for _ in range(300):
        opt.zero_grad()
        torch.trace(X.T @ C @ X).backward()
        opt.step()
    target = float(torch.linalg.eigvalsh(C)[:3].sum())
    assert float(torch.trace(X.T @ C @ X)) == pytest.approx(target, rel=1e-7)


@pytest.mark.parametrize("norm", ["spectral", "frobenius"])
def test_karcher_mean_on_spd(norm):
    gen = _gen(6)
    M = SPD(4)
    pts = M.random_point(5, generator=gen, dtype=D)
    S = torch.nn.Parameter(torch.eye(4, dtype=D))

    def loss():
        return 0.5 * sum(M.dist(S, p) ** 2 for p in pts) / len(pts)

    _train(
        [{"params": [S], "manifold": "spd"}],
        loss,
        100,
        lr=0.3,
        momentum=0.0,
        norm=norm,
        scaling="dual",
    )
    # The Karcher mean is the zero of sum_i log_S(P_i) (independent check: logmap).
    resid = sum(M.logmap(S.detach(), p) for p in pts)
    assert float(M.norm(S.detach(), resid)) < 1e-8


@pytest.mark.parametrize(("norm", "lr"), [("spectral", 0.1), ("frobenius", 0.3)])
def test_low_rank_matrix_sensing_converges(norm, lr):
    gen = _gen(7)
    m, n, r = 12, 10, 2
    T = torch.randn(m, r, generator=gen, dtype=D) @ torch.randn(r, n, generator=gen, dtype=D)
    ops = torch.randn(80, m, n, generator=gen, dtype=D) / 80**0.5
    y = torch.einsum("kmn,mn->k", ops, T)
    A = torch.nn.Parameter(torch.randn(m, r, generator=gen, dtype=D))
    B = torch.nn.Parameter(torch.randn(n, r, generator=gen, dtype=D))
    _train(
        [{"params": [A, B], "manifold": "fixed_rank"}],
        lambda: 0.5 * (torch.einsum("kmn,mn->k", ops, A @ B.T) - y).pow(2).sum(),
        400,
        lr=lr,
        norm=norm,
        momentum=0.0,
        scaling="dual",
    )
    assert float((A @ B.T - T).norm() / T.norm()) < 1e-6


def test_unit_lmo_steps_with_momentum_decrease_the_loss():
    gen = _gen(13)
    C = _sym_matrix(10, gen)
    X = torch.nn.Parameter(Stiefel(10, 3).random_point(generator=gen, dtype=D))
    start = float(torch.trace(X.T @ C @ X))
    _train(
        [{"params": [X], "manifold": "stiefel"}],
        lambda: torch.trace(X.T @ C @ X),
        100,
        lr=0.02,
        nesterov=False,
    )
    target = float(torch.linalg.eigvalsh(C)[:3].sum())
    # Unit steps of length 0.02 reach an O(lr) neighbourhood of the optimum.
    assert float(torch.trace(X.T @ C @ X)) - target < 0.05 * (start - target)


# ---------------------------------------------------------------- state, closures, dtypes
def _mixed_model(dtype, gen):
    st = torch.nn.Parameter(Stiefel(7, 3).random_point(generator=gen, dtype=torch.float32))
    spd = torch.nn.Parameter(SPD(3).random_point(generator=gen, dtype=torch.float32))
    a = torch.nn.Parameter(torch.randn(6, 2, generator=gen))
    b = torch.nn.Parameter(torch.randn(5, 2, generator=gen))
    w = torch.nn.Parameter(torch.randn(4, 3, generator=gen))
    v = torch.nn.Parameter(torch.randn(4, generator=gen))
    ps = [st, spd, a, b, w, v]
    with torch.no_grad():
        ps = [torch.nn.Parameter(p.to(dtype)) for p in ps]
    groups = [
        {"params": [ps[0]], "manifold": "stiefel"},
        {"params": [ps[1]], "manifold": "spd", "weight_decay": 0.1},
        {"params": ps[2:4], "manifold": "fixed_rank", "weight_decay": 0.1},
        {"params": ps[4:]},
    ]
    return ps, groups


def _loss(ps, k):
    st, spd, a, b, w, v = [p.float() for p in ps]
    t = float(k + 1)
    return (
        (st * t).sin().sum()
        + (spd * spd).sum() * 0.1
        + ((a @ b.T) - t).pow(2).mean()
        + (w.cos() * t).sum()
        + (v - t).pow(2).sum()
    )


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_state_dict_round_trip_continues_exactly(dtype):
    ps, groups = _mixed_model(dtype, _gen(8))
    opt = IMuon(groups, lr=0.05)

    def step(o, params, k):
        o.zero_grad()
        _loss(params, k).backward()
        o.step()

    for k in range(3):
        step(opt, ps, k)
    saved = copy.deepcopy(opt.state_dict())
    ps2 = [torch.nn.Parameter(p.detach().clone()) for p in ps]
    _, groups2 = _mixed_model(dtype, _gen(8))
    for g2, g in zip(groups2, groups, strict=True):
        idx = [next(i for i, p in enumerate(ps) if p is q) for q in g["params"]]
        g2["params"] = [ps2[i] for i in idx]
    opt2 = IMuon(groups2, lr=0.05)
    opt2.load_state_dict(saved)
    for k in range(3, 6):
        step(opt, ps, k)
        step(opt2, ps2, k)
    for p, q in zip(ps, ps2, strict=True):
        assert torch.equal(p, q)
    if dtype == torch.bfloat16:
        master = opt2.state[ps2[0]]["master"]
        assert master.dtype == torch.float32
        assert float((master.T @ master - torch.eye(3)).norm()) < 1e-5


def test_closure_is_called_with_grad_enabled_and_its_loss_returned():
    gen = _gen(9)
    X = torch.nn.Parameter(Grassmann(6, 2).random_point(generator=gen, dtype=D))
    C = _sym_matrix(6, gen)
    opt = IMuon([{"params": [X], "manifold": "grassmann"}], lr=0.1)

    def closure():
        opt.zero_grad()
        loss = torch.trace(X.T @ C @ X)
        loss.backward()
        return loss

    first = opt.step(closure)
    assert torch.is_tensor(first)
    assert float(opt.step(closure)) < float(first)


def test_wide_stiefel_weight_is_read_as_orthonormal_rows():
    gen = _gen(10)
    W = torch.nn.Parameter(Stiefel(9, 4).random_point(generator=gen, dtype=D).T.contiguous())
    opt = IMuon([{"params": [W], "manifold": "stiefel"}], lr=0.2)
    W.grad = torch.randn(4, 9, generator=gen, dtype=D)
    opt.step()
    torch.testing.assert_close(W @ W.T, torch.eye(4, dtype=D))


# ---------------------------------------------------------------- bad input
@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"lr": -1.0}, "invalid lr"),
        ({"lr": float("nan")}, "invalid lr"),
        ({"momentum": 1.0}, "invalid momentum"),
        ({"nesterov": 1}, "invalid nesterov"),
        ({"norm": "operator"}, "unknown norm"),
        ({"norm": ("schatten", 0.3)}, "p must be"),
        ({"weight_decay": -0.1}, "invalid weight_decay"),
        ({"manifold": "torus"}, "invalid manifold"),
        ({"polar": "magic"}, "invalid polar"),
        ({"lr_scale": "big"}, "invalid lr_scale"),
        ({"adamw_betas": (0.9, 1.0)}, "invalid adamw_betas"),
        ({"adamw_eps": 0.0}, "invalid adamw_eps"),
        ({"nonfinite": "ignore"}, "invalid nonfinite"),
        ({"polar_dtype": torch.float16}, "invalid polar_dtype"),
        ({"scaling": "adaptive"}, "invalid scaling"),
    ],
)
def test_constructor_rejects_bad_options(kwargs, match):
    with pytest.raises(ValueError, match=match):
        IMuon([torch.nn.Parameter(torch.randn(3, 2))], **kwargs)


def test_bad_manifold_points_and_shapes_are_refused():
    off = torch.nn.Parameter(torch.randn(5, 2))
    with pytest.raises(ValueError, match=r"not a point"):
        IMuon([{"params": [off], "manifold": "stiefel"}])
    not_pd = torch.nn.Parameter(torch.diag(torch.tensor([1.0, -1.0])))
    with pytest.raises(ValueError, match="not a point"):
        IMuon([{"params": [not_pd], "manifold": "spd"}])
    with pytest.raises(ValueError, match="square"):
        IMuon([{"params": [torch.nn.Parameter(torch.eye(3, 2))], "manifold": "spd"}])
    with pytest.raises(ValueError, match="weight_decay"):
        IMuon(
            [{"params": [torch.nn.Parameter(torch.eye(3, 2))], "manifold": "stiefel"}],
            lr=0.1,
            weight_decay=0.1,
        )
    with pytest.raises(ValueError, match="pairs"):
        IMuon([{"params": [torch.nn.Parameter(torch.randn(4, 2))], "manifold": "fixed_rank"}])
    a, b = torch.nn.Parameter(torch.randn(4, 2)), torch.nn.Parameter(torch.randn(3, 3))
    with pytest.raises(ValueError, match="do not fit"):
        IMuon([{"params": [a, b], "manifold": "fixed_rank"}])
    a, b = torch.nn.Parameter(torch.randn(2, 3)), torch.nn.Parameter(torch.randn(5, 3))
    with pytest.raises(ValueError, match="exceeds"):
        IMuon([{"params": [a, b], "manifold": "fixed_rank"}])
    a = torch.nn.Parameter(torch.ones(4, 2))  # rank 1
    b = torch.nn.Parameter(torch.randn(5, 2))
    with pytest.raises(ValueError, match="rank"):
        IMuon([{"params": [a, b], "manifold": "fixed_rank"}])
    with pytest.raises(ValueError, match="2-D"):
        IMuon([{"params": [torch.nn.Parameter(torch.randn(2, 3, 3))], "manifold": "stiefel"}])


def test_nonfinite_gradient_skips_with_warning_or_raises():
    gen = _gen(11)
    X = torch.nn.Parameter(Stiefel(5, 2).random_point(generator=gen, dtype=D))
    v = torch.nn.Parameter(torch.randn(3, dtype=D))
    before = X.detach().clone()
    opt = IMuon([{"params": [X], "manifold": "stiefel"}, {"params": [v]}], lr=0.1)
    X.grad = torch.randn(5, 2, generator=gen, dtype=D)
    v.grad = torch.tensor([1.0, float("nan"), 0.0], dtype=D)
    with pytest.warns(RuntimeWarning, match="NaN or inf"):
        opt.step()
    assert torch.equal(X.detach(), before) and len(opt.state) == 0
    strict = IMuon([{"params": [X], "manifold": "stiefel"}], lr=0.1, nonfinite="raise")
    X.grad[0, 0] = float("inf")
    with pytest.raises(FloatingPointError):
        strict.step()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        X.grad = torch.randn(5, 2, generator=gen, dtype=D)
        strict.step()


def test_finite_gradients_whose_sum_overflows_still_step():
    # The non-finite check first sums each gradient (a finite sum proves every entry finite);
    # finite entries that overflow the sum must fall back to the entrywise check, not skip.
    gen = _gen(21)
    a = torch.nn.Parameter(torch.randn(13, 3, generator=gen))
    b = torch.nn.Parameter(torch.randn(9, 3, generator=gen))
    w = torch.nn.Parameter(torch.randn(6, 4, generator=gen))
    before = [t.detach().clone() for t in (a, b, w)]
    opt = IMuon(
        [{"params": [a, b], "manifold": "fixed_rank"}, {"params": [w]}], lr=0.1, nonfinite="raise"
    )
    big = torch.finfo(torch.float32).max / 4
    for t in (a, b, w):
        t.grad = torch.full_like(t, big) * torch.sign(torch.randn(t.shape, generator=gen))
        t.grad[0, 0] = big  # at least one entry of each sign-pattern is huge
    assert not torch.isfinite(torch.stack([t.grad.abs().sum() for t in (a, b, w)]).sum())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        opt.step()
    assert all(not torch.equal(t.detach(), t0) for t, t0 in zip((a, b, w), before, strict=True))
    assert all(bool(torch.isfinite(t).all()) for t in (a, b, w))
    # +inf and -inf in one gradient sum to NaN; the step is refused.
    a.grad[1, 1], a.grad[2, 2] = float("inf"), float("-inf")
    with pytest.raises(FloatingPointError):
        opt.step()


@pytest.mark.parametrize(("m", "n", "r"), [(611, 523, 7), (700, 700, 40)])
@pytest.mark.parametrize("nesterov", [False, True])
@pytest.mark.parametrize("spread", [0.0, 2.0])
def test_fixed_rank_float32_steps_match_the_float64_steps(m, n, r, nesterov, spread):
    # float32 CPU factors take the float64-Gram polar route and row-major solves; float64
    # takes the masked SVD. They must agree to float32 accuracy over a few momentum steps,
    # for well-conditioned factors (spread 0) and for B with condition number ~100.
    gen = _gen(22)
    a0 = torch.randn(m, r, generator=gen, dtype=D)
    b0 = torch.randn(n, r, generator=gen, dtype=D) @ torch.diag(
        torch.logspace(0, spread, r, dtype=D)
    )
    grads = [
        (torch.randn(m, r, generator=gen, dtype=D), torch.randn(n, r, generator=gen, dtype=D))
        for _ in range(4)
    ]
    out = {}
    for dt in (torch.float32, D):
        a, b = torch.nn.Parameter(a0.to(dt)), torch.nn.Parameter(b0.to(dt))
        opt = IMuon([{"params": [a, b], "manifold": "fixed_rank"}], lr=0.05, nesterov=nesterov)
        for ga, gb in grads:
            a.grad, b.grad = ga.to(dt), gb.to(dt)
            opt.step()
        out[dt] = (a.detach().double() @ b.detach().double().mT, opt.state[a]["momentum_buffer"])
    x32, x64 = out[torch.float32][0], out[D][0]
    # 7.9e-8 (611x523, r=7) and 1.3e-5 (700x700, r=40; the same with the code before the
    # float32 fast paths: the float32 polar factor of the r x r block amplifies round-off).
    assert float((x32 - x64).norm() / x64.norm()) < 1e-4
    m32, m64 = out[torch.float32][1].double(), out[D][1]
    assert float((m32 - m64).norm() / m64.norm()) < 1e-4


# ---------------------------------------------------------------- groups added later
def test_add_param_group_is_validated_like_the_constructor():
    gen = _gen(11)
    W = torch.nn.Parameter(torch.randn(7, 5, generator=gen, dtype=D))
    opt = IMuon([W], lr=0.02)
    V = torch.nn.Parameter(torch.randn(5, 3, generator=gen, dtype=D))
    with pytest.raises(ValueError, match="invalid lr"):
        opt.add_param_group({"params": [V], "lr": -1.0})
    with pytest.raises(ValueError, match="invalid manifold"):
        opt.add_param_group({"params": [V], "manifold": "hyperbolic"})
    # a non-orthonormal Stiefel point would jump onto the manifold at the first step
    with pytest.raises(ValueError, match="not a point"):
        opt.add_param_group({"params": [V], "manifold": "stiefel"})
    assert len(opt.param_groups) == 1  # refused groups are not kept
    X = torch.nn.Parameter(Stiefel(5, 3).random_point(generator=gen, dtype=D))
    opt.add_param_group({"params": [X], "manifold": "stiefel"})
    assert len(opt.param_groups) == 2


def test_decay_that_would_zero_the_parameters_is_refused():
    W = torch.nn.Parameter(torch.randn(6, 4, dtype=D))
    with pytest.raises(ValueError, match="weight_decay"):
        IMuon([W], lr=0.5, weight_decay=2.0)
    with pytest.raises(ValueError, match="adamw_weight_decay"):
        IMuon([torch.nn.Parameter(torch.randn(4, dtype=D))], adamw_lr=0.5, adamw_weight_decay=3.0)
    # a scheduler that raises lr later is caught at the step, before anything moves
    opt = IMuon([W], lr=0.05, weight_decay=2.0)
    opt.param_groups[0]["lr"] = 0.6
    W.grad = torch.randn_like(W)
    before = W.detach().clone()
    with pytest.raises(ValueError, match=r"1 - lr \* wd"):
        opt.step()
    assert torch.equal(W.detach(), before)


def test_a_fixed_rank_pair_with_one_gradient_warns():
    gen = _gen(12)
    A = torch.nn.Parameter(torch.randn(7, 2, generator=gen, dtype=D))
    B = torch.nn.Parameter(torch.randn(5, 2, generator=gen, dtype=D))
    opt = IMuon([{"params": [A, B], "manifold": "fixed_rank"}], lr=0.02)
    A.grad = torch.randn_like(A)
    with pytest.warns(RuntimeWarning, match="one factor only"):
        opt.step()


def test_sparse_gradients_get_a_clear_error():
    emb = torch.nn.Embedding(11, 4, sparse=True).double()
    opt = IMuon(emb.parameters(), lr=0.02)
    emb(torch.tensor([1, 3, 3])).sum().backward()
    assert emb.weight.grad.is_sparse
    with pytest.raises(RuntimeError, match="sparse gradients"):
        opt.step()


# ---------------------------------------------------------------- schedules reach the AdamW route
def test_adamw_route_follows_the_schedule_like_torch_adamw():
    # Reference: torch.optim.AdamW (same betas, eps, decay) under the same scheduler, on the
    # same 1-D parameter and gradients; IMuon's AdamW route must match it step for step.
    gen = _gen(21)
    b0 = torch.randn(7, generator=gen, dtype=D)
    grads = [torch.randn(7, generator=gen, dtype=D) for _ in range(6)]
    ours, ref = torch.nn.Parameter(b0.clone()), torch.nn.Parameter(b0.clone())
    opt = IMuon([ours], lr=0.02, adamw_lr=1e-2, adamw_betas=(0.9, 0.95), adamw_weight_decay=0.1)
    torch_opt = torch.optim.AdamW([ref], lr=1e-2, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=6)
    torch_sched = torch.optim.lr_scheduler.CosineAnnealingLR(torch_opt, T_max=6)
    for g in grads:
        ours.grad, ref.grad = g.clone(), g.clone()
        opt.step()
        torch_opt.step()
        sched.step()
        torch_sched.step()
        # error model: the same float64 operations up to ordering, over 6 steps
        torch.testing.assert_close(ours.detach(), ref.detach(), rtol=0, atol=1e-14)


def test_a_zero_schedule_freezes_the_adamw_route_too():
    gen = _gen(22)
    W = torch.nn.Parameter(torch.randn(6, 4, generator=gen, dtype=D))
    b = torch.nn.Parameter(torch.randn(4, generator=gen, dtype=D))
    opt = IMuon([W, b], lr=0.02)
    torch.optim.lr_scheduler.LambdaLR(opt, lambda t: 0.0)
    before = [W.detach().clone(), b.detach().clone()]
    W.grad, b.grad = torch.randn_like(W), torch.randn_like(b)
    opt.step()
    assert torch.equal(W.detach(), before[0]) and torch.equal(b.detach(), before[1])
    # no scheduler, lr 0 on an adamw group: nothing moves either
    c = torch.nn.Parameter(torch.randn(3, dtype=D))
    opt2 = IMuon([{"params": [c], "manifold": "adamw", "lr": 0.0}])
    c.grad = torch.ones_like(c)
    c0 = c.detach().clone()
    opt2.step()
    assert torch.equal(c.detach(), c0)


def test_a_misspelt_group_option_is_refused_with_a_suggestion():
    W = torch.nn.Parameter(torch.randn(5, 3, dtype=D))
    with pytest.raises(ValueError, match="did you mean 'manifold'"):
        IMuon([{"params": [W], "manfold": "stiefel"}])
    opt = IMuon([W])
    with pytest.raises(ValueError, match="unknown param group option 'zzz'"):
        opt.add_param_group({"params": [torch.nn.Parameter(torch.randn(2, 2))], "zzz": 1})


def test_positional_order_is_torch_muons_and_later_options_are_keyword_only():
    # IMuon(p, 0.02, 0.1) must mean weight_decay 0.1 as in torch.optim.Muon, not momentum 0.1
    import inspect

    def positional(cls):
        sig = inspect.signature(cls)
        kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
        return [n for n, q in sig.parameters.items() if q.kind in kinds]

    ours, torchs = positional(IMuon), positional(torch.optim.Muon)
    assert ours == torchs[: len(ours)] == ["params", "lr", "weight_decay", "momentum", "nesterov"]
    W = torch.nn.Parameter(torch.randn(4, 3))
    group = IMuon([W], 0.02, 0.1, 0.5, False).param_groups[0]
    assert (group["lr"], group["weight_decay"], group["momentum"], group["nesterov"]) == (
        0.02,
        0.1,
        0.5,
        False,
    )
    # torch's sixth positional argument (ns_coefficients) has no counterpart: refused loudly
    with pytest.raises(TypeError):
        IMuon([W], 0.02, 0.1, 0.95, True, (3.4445, -4.775, 2.0315))


def test_import_imuon_loads_neither_torch_distributed_tensor_nor_sympy():
    # torch.distributed.tensor pulls in sympy: ~3 s of CPU on import, more than imuon's own
    import subprocess
    import sys

    code = (
        "import sys, imuon, imuon.lora, imuon.peft_io, imuon.geoopt_compat; "
        "print(sorted(m for m in ('sympy', 'torch.distributed.tensor') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
