"""Packages used together: each one's output is another's input."""

import torch

from diloco_ef import EFSGD
from diloco_ef.compressors import RandomK, TopK
from heavytail_sgd.noise import SymmetricAlphaStable
from heavytail_sgd.oracle import HeavyTailedOracle
from heavytail_sgd.schedules import convex_smd_horizon


def _least_squares(d=23, seed=0):
    g = torch.Generator().manual_seed(seed)
    A = torch.randn(61, d, generator=g, dtype=torch.float64) / 61**0.5
    x_star = torch.randn(d, generator=g, dtype=torch.float64)
    b = A @ x_star

    def f(x):
        return 0.5 * ((A @ x - b) ** 2).sum()

    L = float(torch.linalg.eigvalsh(A.T @ A).max())  # the smoothness constant of f
    return f, x_star, L


def _run_ef_sgd(compressor, steps, seed):
    f, x_star, L = _least_squares()
    oracle = HeavyTailedOracle(f, SymmetricAlphaStable(1.6), scale=0.05, seed=seed)
    schedule = convex_smd_horizon(T=steps, p=1.5, sigma=0.05 * 23**0.5, D=float(x_star.norm()), L=L)
    x = torch.nn.Parameter(torch.zeros(23, dtype=torch.float64))
    opt = EFSGD([x], lr=schedule(1), compressor=compressor, seed=seed)
    for _ in range(steps):
        _, x.grad = oracle(x.detach())
        opt.step()
    return float(f(x.detach())), float(f(torch.zeros(23, dtype=torch.float64)))


def test_heavy_tailed_oracle_drives_error_feedback_sgd():
    # heavytail-sgd's oracle and step size feeding diloco-ef's EF-SGD: with Top-k and Random-k
    # at a quarter of the coordinates, heavy-tailed (infinite-variance) noise and no clipping,
    # the loss must still fall a hundredfold from its start, on several seeds.
    for compressor in (TopK(k=6), RandomK(k=6, scaled=False)):
        finals = []
        for seed in range(3):
            final, start = _run_ef_sgd(compressor, steps=1500, seed=seed)
            finals.append(final)
        assert max(finals) < 0.01 * start, (type(compressor).__name__, finals, start)
        assert all(torch.isfinite(torch.tensor(finals)))


# --- diloco-ef's two-phase wrappers around imuon and adaptive-lmo --------------------------


def _matrix_least_squares(seed=0):
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(41, 13, generator=g, dtype=torch.float64) / 41**0.5
    w_star = torch.randn(13, 9, generator=g, dtype=torch.float64)
    b = a @ w_star
    start = torch.randn(13, 9, generator=g, dtype=torch.float64)

    def f(w):
        return 0.5 * (a @ w - b).pow(2).sum()

    return f, start


def _inner_factories():
    from adaptive_lmo import AdaptiveLMO
    from imuon import IMuon

    return {
        "imuon": lambda p: IMuon(p, lr=0.3, momentum=0.9, polar="svd"),
        "adaptive-lmo": lambda p: AdaptiveLMO(p, lr=0.3, momentum=0.9, exponent=0.5),
    }


def _train(opt, w, f, steps):
    for _ in range(steps):
        opt.zero_grad()
        f(w).backward()
        opt.step()


def test_la_with_one_inner_step_and_unit_outer_sgd_is_the_inner_optimizer():
    # Outer SGD with lr 1 after every inner step sets slow <- slow - (slow - fast) = fast:
    # LA must then be exactly the inner optimizer, whichever package supplies it.
    from diloco_ef import LA

    f, start = _matrix_least_squares()
    for name, make in _inner_factories().items():
        w_la = start.clone().requires_grad_(True)
        w_plain = start.clone().requires_grad_(True)
        la = LA([w_la], make, lambda p: torch.optim.SGD(p, lr=1.0), inner_steps=1)
        _train(la, w_la, f, 12)
        _train(make([w_plain]), w_plain, f, 12)
        torch.testing.assert_close(w_la, w_plain, rtol=1e-12, atol=1e-12, msg=name)
        assert float(f(w_plain)) < 0.5 * float(f(start)), name


def test_la_and_sla_outer_steps_over_imuon_and_adaptive_lmo_inner_steps_reduce_the_loss():
    from diloco_ef import LA

    f, start = _matrix_least_squares(seed=1)
    for name, make in _inner_factories().items():
        w = start.clone().requires_grad_(True)
        outer = lambda p: torch.optim.SGD(p, lr=0.7, momentum=0.5, nesterov=True)  # noqa: E731
        la = LA([w], make, outer, inner_steps=4)
        _train(la, w, f, 60)
        assert la.steps == 60 and float(f(w)) < 0.1 * float(f(start)), name


# --- trak-theory attributing a model trained by gdro-fsq -----------------------------------


def _auc(labels: torch.Tensor, scores: torch.Tensor) -> float:
    """P(score of a positive > score of a negative), ties counted half (Mann-Whitney)."""
    pos, neg = scores[labels], scores[~labels]
    greater = (pos[:, None] > neg[None, :]).double().mean()
    ties = (pos[:, None] == neg[None, :]).double().mean()
    return float(greater + 0.5 * ties)


ROUNDS, QUERIES = 3000, 4


def _minority_problem(seed: int):
    """Four subpopulations, each with its own feature centre; three share one labelling
    direction, a smaller fourth one's is rotated 80 degrees away. ERM would fit the majority;
    GDRO has to serve the minority."""
    import math

    from gdro_fsq.oracle import GroupedProblem

    g = torch.Generator().manual_seed(seed)
    d, sizes = 6, (160, 160, 160, 60)
    w = torch.nn.functional.normalize(torch.randn(d, generator=g, dtype=torch.float64), dim=0)
    v = torch.randn(d, generator=g, dtype=torch.float64)
    v = torch.nn.functional.normalize(v - (v @ w) * w, dim=0)
    angle = math.radians(80)
    w_minor = math.cos(angle) * w + math.sin(angle) * v
    xs, ys, gs = [], [], []
    for k, n in enumerate(sizes):
        centre = torch.nn.functional.normalize(
            torch.randn(d, generator=g, dtype=torch.float64), dim=0
        )
        x = centre + 0.5 * torch.randn(n, d, generator=g, dtype=torch.float64) / d**0.5
        x = torch.nn.functional.normalize(x, dim=1)
        direction = w_minor if k == 3 else w
        ys.append(
            torch.sign(x @ direction + 0.05 * torch.randn(n, generator=g, dtype=torch.float64))
        )
        xs.append(x)
        gs.append(torch.full((n,), k))
    radius = 3.0
    return GroupedProblem(
        X=torch.cat(xs),
        y=torch.cat(ys),
        groups=torch.cat(gs),
        n_groups=4,
        radius=radius,
        loss_bound=math.log1p(math.exp(radius)),
    )


def _worst_group_attribution(seed: int):
    """gdro-fsq trains; trak-theory attributes. Per target: the AUC with which |TRAK score|
    picks out training points of the worst group, for worst-group targets and for the rest."""
    from gdro_fsq import GDROFSQ, GroupSampler
    from trak_theory.loo import logistic_trak

    prob = _minority_problem(seed)
    g = torch.Generator().manual_seed(seed)
    held = torch.rand(len(prob.y), generator=g) < 0.25
    x_tr, y_tr, grp_tr = prob.X[~held], prob.y[~held], prob.groups[~held]
    x_te, y_te, grp_te = prob.X[held], prob.y[held], prob.groups[held]
    theta = torch.zeros(prob.dim, dtype=torch.float64, requires_grad=True)
    opt = GDROFSQ(
        [theta],
        prob.loss_fn,
        n_groups=4,
        radius=prob.radius,
        grad_bound=prob.grad_bound,
        theta_update="sgd",
        generator=g,
    )
    sampler = GroupSampler(x_tr, y_tr, grp_tr, generator=g)
    for _ in range(ROUNDS):
        opt.round(sampler, QUERIES)
    theta_bar = opt.averaged_params()[0].detach()
    risks = prob.group_risks(theta_bar)
    # The robust model is better than predicting nothing on every group.
    assert float(risks.max()) < float(prob.group_risks(torch.zeros(prob.dim)).max()), risks
    worst = int(risks.argmax())
    in_worst = grp_tr == worst
    scores = logistic_trak(x_tr, y_tr, theta_bar, x_te, y_te, ridge=1e-3).abs()
    aucs = torch.tensor([_auc(in_worst, s) for s in scores], dtype=torch.float64)
    targets = grp_te == worst
    return aucs[targets], aucs[~targets]


def test_trak_ranks_worst_group_points_as_influential_for_worst_group_targets():
    # On every seed, worst-group targets single out worst-group training points (by
    # |attribution|) better than the other targets do, and over all seeds clearly better than
    # chance (3 standard errors).
    pooled = []
    for seed in range(4):
        own, others = _worst_group_attribution(seed)
        assert float(own.mean()) > float(others.mean()), (seed, own.mean(), others.mean())
        pooled.append(own)
    aucs = torch.cat(pooled)
    se = float(aucs.std() / len(aucs) ** 0.5)
    assert float(aucs.mean()) > 0.5 + 3 * se, (float(aucs.mean()), se)


# --- adaptive-lmo vs imuon on a LoRA layer -------------------------------------------------


def _lora_problem(seed=0):
    from imuon.lora import LoRALinear

    g = torch.Generator().manual_seed(seed)
    with torch.random.fork_rng():  # nn.Linear and LoRALinear draw from the global RNG
        torch.manual_seed(seed)
        base = torch.nn.Linear(17, 13, bias=False).double()
        layer = LoRALinear.from_linear(base, rank=3)
    shift = (
        0.1
        * torch.randn(13, 3, generator=g, dtype=torch.float64)
        @ torch.randn(3, 17, generator=g, dtype=torch.float64)
    )
    x = torch.randn(200, 17, generator=g, dtype=torch.float64)
    y = x @ (base.weight.detach() + shift).T  # the finetuning target is a rank-3 shift
    return layer, x, y


def _gauge(layer, cond: float, seed: int = 1) -> None:
    """(B, A) -> (B M, M^-1 A): the same product B A, factors conditioned like M."""
    g = torch.Generator().manual_seed(seed)
    q1, _ = torch.linalg.qr(torch.randn(3, 3, generator=g, dtype=torch.float64))
    q2, _ = torch.linalg.qr(torch.randn(3, 3, generator=g, dtype=torch.float64))
    m = q1 @ torch.diag(torch.logspace(0, float(torch.log10(torch.tensor(cond))), 3).double()) @ q2
    with torch.no_grad():
        layer.lora_B.copy_(layer.lora_B @ m)
        layer.lora_A.copy_(torch.linalg.inv(m) @ layer.lora_A)


def _lora_optimizers():
    from adaptive_lmo import AdaptiveLMO
    from imuon import IMuon

    return {
        "imuon": lambda layer: IMuon(
            [
                {
                    "params": [layer.lora_B, layer.lora_A],
                    "manifold": "fixed_rank",
                    "factor_layout": "peft",
                }
            ],
            lr=0.05,
            momentum=0.9,
            polar="svd",
        ),
        "adaptive-lmo": lambda layer: AdaptiveLMO(
            [layer.lora_B, layer.lora_A], lr=0.05, momentum=0.9, exponent=0.5
        ),
    }


def _finetune(layer, make, x, y, steps):
    opt = make(layer)
    for _ in range(steps):
        opt.zero_grad()
        torch.nn.functional.mse_loss(layer(x), y).backward()
        opt.step()
    with torch.no_grad():
        return float(torch.nn.functional.mse_loss(layer(x), y)), layer.delta().clone()


def test_imuon_and_adaptive_lmo_both_finetune_a_lora_layer_but_only_imuon_ignores_the_gauge():
    # Both packages' optimizers fit a rank-3 shift through the LoRA pair. iMuon steps on the
    # fixed-rank manifold, so refactoring the same A B^T as (A M, B M^-T) changes nothing;
    # AdaptiveLMO steps on the factors, so its trajectory depends on M (P01's point vs P19).
    for name, make in _lora_optimizers().items():
        layer, x, y = _lora_problem()
        with torch.no_grad():
            start = float(torch.nn.functional.mse_loss(layer(x), y))
        loss, delta = _finetune(layer, make, x, y, 40)
        assert loss < 0.5 * start, (name, start, loss)

        layer2, _, _ = _lora_problem()
        _gauge(layer2, cond=1e3)
        torch.testing.assert_close(layer2.delta(), _lora_problem()[0].delta(), rtol=1e-9, atol=0)
        _, delta2 = _finetune(layer2, make, x, y, 40)
        rel = float((delta2 - delta).norm() / delta.norm())
        if name == "imuon":
            assert rel < 1e-8, rel
        else:
            assert rel > 1e-2, rel


def test_imuon_and_adaptive_lmo_split_a_model_the_same_way_with_the_same_adamw_side():
    # issue 20 part 7: one routing convention (shared_core.routing) and one set of AdamW
    # defaults. A tied language model: the same tensors on AdamW in both optimizers, and the
    # AdamW-side trajectories of the two optimizers equal torch's AdamW with those defaults.
    from adaptive_lmo import AdaptiveLMO
    from imuon import IMuon

    class LM(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.tok = torch.nn.Embedding(17, 6, dtype=torch.float64)
            self.norm = torch.nn.LayerNorm(6, dtype=torch.float64)
            self.mlp = torch.nn.Linear(6, 6, dtype=torch.float64)
            self.lm_head = torch.nn.Linear(6, 17, bias=False, dtype=torch.float64)
            self.lm_head.weight = self.tok.weight

        def forward(self, ids):
            return self.lm_head(torch.relu(self.mlp(self.norm(self.tok(ids)))))

    torch.manual_seed(5)
    models = [LM() for _ in range(3)]
    for m in models[1:]:
        m.load_state_dict(models[0].state_dict())
    im = IMuon(models[0], lr=0.02)
    al = AdaptiveLMO(models[1], lr=0.02, exponent=0.0)
    aux = lambda opt, key, val: {  # noqa: E731
        id(p) for g in opt.param_groups if g.get(key) == val for p in g["params"]
    }
    names = lambda m, ids_: {n for n, p in m.named_parameters() if id(p) in ids_}  # noqa: E731
    im_aux = names(models[0], aux(im, "manifold", "adamw"))
    al_aux = names(models[1], aux(al, "algorithm", "adamw"))
    assert im_aux == al_aux == {"tok.weight", "norm.weight", "norm.bias", "mlp.bias"}
    ref = torch.optim.AdamW(
        [p for n, p in models[2].named_parameters() if n in im_aux],
        lr=3e-4,
        betas=(0.9, 0.95),
        eps=1e-8,
        weight_decay=0.0,
    )
    # the same gradient stream for all three, so the AdamW side's trajectory depends on its
    # hyper-parameters only (a backward pass would couple it to the matrix side's steps)
    gen = torch.Generator().manual_seed(7)
    for _ in range(4):
        grads = {
            n: torch.randn(p.shape, generator=gen, dtype=p.dtype)
            for n, p in models[0].named_parameters()
        }
        for m, opt in zip(models, (im, al, ref), strict=True):
            for n, p in m.named_parameters():
                p.grad = grads[n].clone()
            opt.step()
    for n in im_aux:
        want = dict(models[2].named_parameters())[n].detach()
        for m in models[:2]:
            torch.testing.assert_close(
                dict(m.named_parameters())[n].detach(), want, rtol=1e-12, atol=1e-14
            )
