r"""lora: LoRA finetuning of a small pretrained transformer, and the factor gauge.

Data (generated in the run, nothing downloaded): sequences of a first-order Markov chain over
``VOCAB`` = 16 tokens. The pretraining chain has transition logits ``TAU * Z`` (``Z`` a seeded
Gaussian ``VOCAB x VOCAB`` matrix, ``TAU = 2``); the finetuning chain adds a rank-4
perturbation ``SHIFT * U W^T / 2`` (``SHIFT = 2``, ``U, W`` Gaussian ``VOCAB x 4``) to those
logits (a distribution shift that low-rank adapters can express). Because the chains are
known, the eval set's Bayes-optimal loss ("oracle": ``-log P(x_t | x_{t-1})`` under the true
finetuning chain, averaged over the eval targets) is computed exactly.

Model: a small GPT-style transformer (own code, config below, no downloaded weights) is
pretrained with AdamW on the first chain. Every linear layer of its blocks is then wrapped in
:class:`imuon.lora.LoRALinear` (rank r, two random full-rank factors, their product folded into
the frozen weight so the function is unchanged) and *only the LoRA factors* are trained on the
shifted chain (embeddings, head, biases frozen: a trainable head alone could fit a bigram
shift and would hide the adapters). Before training, each pair ``(A, B)`` is put in the gauge
``(A M, B M^{-T})`` with a random ``M`` of condition number ``kappa`` (singular values
log-spaced from ``kappa^{1/2}`` to ``kappa^{-1/2}``): the same network function, the same
point of the rank-r manifold, differently conditioned factors.

Sizes: ``--quick`` TinyGPT d=32, 1 block, LoRA r=4, 300 pretraining and 100 finetuning steps,
seeds {0, 1}, kappa in {1, 1e4, 1e6}; default d=32, 2 blocks, r=8, 600 / 200 steps, seeds
{0, 1, 2}, kappa in {1, 1e6} (kappa = 1e4 left to the quick mode to keep the default near ten
CPU minutes). Pretraining runs in float32, finetuning in float64 (factors,
gauge and model): at the larger learning rates the finetuning trajectories are chaotic, and in
float32 two *orthogonal* gauges (cond(M) = 1, exactly equivalent) already end up 2e-3 (lr 0.1)
to 4e-2 (lr 0.3) apart in eval loss (measured, default size), which would swamp the gauge
comparison; and kappa = 1e6 is only meaningful in float64 (rounding the gauged factors of a
96 x 32 rank-8 pair perturbs their product by up to 6e-3 relative in float32, 2e-11 in float64;
measured, 5 draws). Float64 keeps the drift at ~1e-12 at stable rates; at a rate where
training is itself unstable (default size, lr 0.3) even float64 round-off grows to ~1e-2
between two orthogonal gauges. Check 2
therefore measures that floating-point chaos directly: at every rate of iMuon's grid it runs
``CONTROLS`` = 2 further *orthogonal* gauges (independent random orthogonal ``M``, same
factors, data order and seeds as the kappa = 1 run), which iMuon must treat exactly alike.

Methods, each with a learning-rate grid and a cosine decay of the rate to 0 over the finetuning
steps (the best mean-over-seeds final eval loss is reported per method and ``kappa``; the grid
is re-tuned at every ``kappa``):

- iMuon: each pair one fixed-rank point (spectral intrinsic LMO, Nesterov momentum 0.95);
- per-factor Muon: Muon on A and B separately (IMuon's Euclidean route, momentum 0.95);
- AdamW on the factors (no weight decay);
- ScaledGD: the Riemannian-preconditioned LoRA baseline (damping 1e-6, momentum 0.9); shown
  for reference, not part of the verdict (undamped it is gauge-covariant too; at kappa = 1e6
  its damping is presumably of the order of the smallest Gram eigenvalues, ~1e-7 estimated).

The grids of the factor-wise methods reach down to 1e-3 (Muon) and 3e-4 (AdamW): their stable
range shrinks with kappa, and their best kappa = 1e6 rates sit at these lower ends (a finer
one-off grid around them, reported in the README, did not change the verdict).

Any Hugging Face causal LM: ``python -m imuon.experiments.lora --model NAME [--quick]
[--allow-download] [--device cuda]`` (needs the ``lm`` extra: transformers, peft) runs the same
comparison on that model: no pretraining stage (it is pretrained already), peft LoRA on every
linear layer but the head, the shifted chain written with ``VOCAB`` of its token ids and the
loss restricted to them, ScaledGD left out (it was written for the ``(A, B)`` layout when this
path was added; it now takes peft's too, but the path's runs are kept as they were). Weights are
read from the local Hugging Face cache unless ``--allow-download`` is given.

Verdict. With ``start`` the eval loss before finetuning, ``oracle`` as above, ``L(m, k)`` the
best-of-grid mean final eval loss of method ``m`` at gauge ``k`` and ``E(m, k) = L(m, k) -
oracle`` its excess over the Bayes-optimal loss; ``holds`` when all of:

1. informative: the best method at ``kappa = 1`` closes at least half the gap,
   ``min_m E(m, 1) <= 0.5 (start - oracle)``;
2. iMuon is gauge-invariant, measured against floating-point chaos. With ``tol = 0.01 (start
   - L(iMuon, 1))`` and, per rate ``lr`` of iMuon's grid, ``c(lr)`` the largest sup-distance
   between the mean eval curves of the three orthogonal gauges (the kappa = 1 run and the two
   controls): (a) at every ``kappa`` and ``lr`` iMuon's mean eval curve stays within
   ``max(tol, 2 c(lr))`` of its kappa = 1 curve, and (b) iMuon's best rate at every ``kappa``
   is *stable*, ``2 c(lr) <= tol`` (so the reported result is held to the strict tolerance and
   chaos cannot hide a gauge effect on it). At a stable rate (a) is the strict check; at a
   chaotic one the kappa gauge may move the curve no more than twice as far as exactly
   equivalent gauges move it. (Rule fixed before the run that first used it; known then: one
   seed at lr 0.3, default size, orthogonal vs orthogonal 1.9e-2, kappa = 1e4 vs 1 6.0e-2.)
3. the factor-wise methods degrade: for per-factor Muon and AdamW, ``E(m, kappa_max) >=
   1.25 E(m, 1)``, the loss increase exceeds twice the larger seed standard deviation of the
   two finals, and ``L(iMuon, kappa_max) < L(m, kappa_max)`` (the same test at the other
   kappas is recorded, ``degrades_at``, but not part of the verdict);
4. iMuon is competitive at ``kappa = 1``: ``E(iMuon, 1) <= min_m E(m, 1) + 0.05 (start -
   oracle)``.
"""

from __future__ import annotations

import math
import statistics

import torch
from torch import nn

from shared_core.experiment import ExperimentResult, RunContext, line_plot, progress, run_experiment

from ..baselines import ScaledGD
from ..lora import LoRALinear
from ..optim import IMuon

VOCAB = 16
TAU = 2.0  # sharpness of the pretraining chain's transition logits
SHIFT = 2.0  # size of the low-rank logit shift of the finetuning chain
SHIFT_RANK = 4
TARGETS = ("qkv", "proj", "fc1", "fc2")
GRIDS = {
    "iMuon": [0.03, 0.1, 0.3],
    "per-factor Muon": [0.001, 0.003, 0.01, 0.03, 0.1],
    "AdamW (factors)": [3e-4, 1e-3, 3e-3, 1e-2, 3e-2],
    "ScaledGD": [0.3, 1.0],
}
QUICK_GRIDS = {
    "iMuon": [0.03, 0.1, 0.3],
    "per-factor Muon": [0.001, 0.003, 0.01, 0.03],
    "AdamW (factors)": [3e-4, 1e-3, 3e-3, 1e-2, 3e-2],
    "ScaledGD": [0.3, 1.0],
}
CONTROLS = 2  # further orthogonal gauges per iMuon rate (the chaos control of check 2)
FACTOR_WISE = ("per-factor Muon", "AdamW (factors)")


def markov_tables(
    seed: int, shift: float | None = None, rank: int | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Pretraining and shifted finetuning transition tables (``VOCAB x VOCAB``, rows sum to 1)."""
    shift = SHIFT if shift is None else shift
    k = SHIFT_RANK if rank is None else rank
    g = torch.Generator().manual_seed(seed)
    logits = TAU * torch.randn(VOCAB, VOCAB, generator=g)
    u, w = torch.randn(VOCAB, k, generator=g), torch.randn(VOCAB, k, generator=g)
    return torch.softmax(logits, -1), torch.softmax(logits + shift * u @ w.T / math.sqrt(k), -1)


def sample(table: torch.Tensor, n_seq: int, length: int, seed: int) -> torch.Tensor:
    """``n_seq`` sequences of the chain (uniform first token)."""
    g = torch.Generator().manual_seed(seed)
    out = torch.zeros(n_seq, length, dtype=torch.long)
    out[:, 0] = torch.randint(VOCAB, (n_seq,), generator=g)
    for t in range(1, length):
        out[:, t] = torch.multinomial(table[out[:, t - 1]], 1, generator=g).squeeze(1)
    return out


def oracle_loss(table: torch.Tensor, batch: torch.Tensor) -> float:
    """Mean ``-log P(x_t | x_{t-1})`` over the batch's targets under the true chain."""
    return float(-torch.log(table[batch[:, :-1], batch[:, 1:]]).double().mean())


class Block(nn.Module):
    def __init__(self, d: int, heads: int):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        a = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
        return x + self.fc2(nn.functional.gelu(self.fc1(self.ln2(x))))


class TinyGPT(nn.Module):
    """Config: ``d`` width, ``layers`` blocks, ``heads`` heads, context ``ctx``."""

    def __init__(self, d: int = 64, layers: int = 2, heads: int = 4, ctx: int = 64):
        super().__init__()
        self.tok, self.pos = nn.Embedding(VOCAB, d), nn.Embedding(ctx, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln, self.head = nn.LayerNorm(d), nn.Linear(d, VOCAB)

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1]))
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln(x))


def lm_loss(model, batch):
    logits = model(batch[:, :-1])
    return nn.functional.cross_entropy(logits.reshape(-1, VOCAB), batch[:, 1:].reshape(-1))


def conditioned(r: int, kappa: float, gen: torch.Generator) -> torch.Tensor:
    """Random ``r x r`` matrix, singular values log-spaced in ``[kappa^-1/2, kappa^1/2]``."""
    u = torch.linalg.qr(torch.randn(r, r, generator=gen, dtype=torch.float64))[0]
    v = torch.linalg.qr(torch.randn(r, r, generator=gen, dtype=torch.float64))[0]
    h = 0.5 * math.log10(kappa)
    s = torch.logspace(h, -h, r, dtype=torch.float64)
    return u @ torch.diag(s) @ v.mT


def gauge_seed(seed: int, gauge: int = 0) -> int:
    """Seed of the gauge matrices ``M`` of run ``seed``; ``gauge`` > 0 draws an independent
    set (the orthogonal-gauge controls), ``gauge = 0`` the one used for every ``kappa``."""
    return 10_000 + seed + 1_000_000 * gauge


def add_lora(
    model: TinyGPT, rank: int, kappa: float = 1.0, seed: int = 0, gauge: int = 0
) -> list[LoRALinear]:
    """Freeze the model, wrap the block linears in LoRA (rank ``rank``) and put each pair in
    a random gauge of condition number ``kappa`` (drawn from :func:`gauge_seed`; the factors
    themselves depend on ``seed`` only); only the LoRA factors stay trainable."""
    for p in model.parameters():
        p.requires_grad_(False)
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(gauge_seed(seed, gauge))
    layers = []
    for blk in model.blocks:
        for name in TARGETS:
            layer = LoRALinear.from_linear(getattr(blk, name), rank, init_std=0.05)
            layer.bias.requires_grad_(False)
            M = conditioned(rank, kappa, gen)
            with torch.no_grad():
                # (B, A) -> (B M, M^-1 A): the same product B A, factors conditioned like M
                b, a = layer.lora_B.double(), layer.lora_A.double()
                layer.lora_B.copy_(b @ M)
                layer.lora_A.copy_(torch.linalg.solve(M, a))
            setattr(blk, name, layer)
            layers.append(layer)
    return layers


def make_opt(method: str, pairs, lr: float, layout: str = "peft") -> torch.optim.Optimizer:
    """The optimizer of ``method`` over LoRA ``pairs`` (tuples of two factor tensors):
    ``layout="peft"``: ``(lora_B (out, r), lora_A (r, in))`` as in :class:`LoRALinear` and as
    found by :func:`imuon.lora.find_lora_pairs`; ``"AB"``: ``(A (m, r), B (n, r))``."""
    flat = [t for pair in pairs for t in pair]
    if method == "iMuon":
        group = {"params": flat, "manifold": "fixed_rank"}
        if layout == "peft":
            group["factor_layout"] = "peft"
        return IMuon([group], lr=lr)
    if method == "per-factor Muon":
        # Muon on the factors A (m, r), B (n, r) of X = A B^T, with torch's rate rule
        # lr sqrt(max(1, rows / cols)) read in that orientation (the polar factor is
        # transpose-equivariant, so only the rate depends on it). peft stores B as lora_A
        # (r, in), where the rule would give 1 instead of sqrt(in / r): those factors get a
        # group of their own at the (in, r) orientation's rate, so both layouts take the same
        # steps (and the published runs, made in the (A, B) layout, stay reproducible).
        rates: dict[float, list] = {}
        for first, second in pairs:
            rates.setdefault(1.0, []).append(first)
            rows, cols = second.shape
            scale = math.sqrt(max(1.0, cols / rows)) if layout == "peft" else 1.0
            rates.setdefault(scale, []).append(second)
        groups = [{"params": ps, "lr": lr * s} for s, ps in rates.items()]
        return IMuon(groups, lr=lr, manifold="euclidean")
    if method == "AdamW (factors)":
        return torch.optim.AdamW(flat, lr=lr, weight_decay=0.0)
    if method == "ScaledGD":
        return ScaledGD(flat, lr=lr, momentum=0.9, damping=1e-6, factor_layout=layout)
    raise ValueError(f"unknown method {method!r}")


def train_curve(model, opt, loss_fn, seed, ft, ev, steps, every, batch=32):
    """Finetune with ``opt`` (cosine learning-rate decay to 0 over ``steps``); the eval loss
    every ``every`` steps and at the end."""
    gen = torch.Generator().manual_seed(seed)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda t: 0.5 * (1 + math.cos(math.pi * t / steps))
    )
    hist = []
    for t in range(steps):
        opt.zero_grad()
        idx = torch.randint(len(ft), (batch,), generator=gen).to(ft.device)
        loss_fn(model, ft[idx]).backward()
        opt.step()
        sched.step()
        if (t + 1) % every == 0 or t + 1 == steps:
            with torch.no_grad():
                loss = float(loss_fn(model, ev))
            hist.append(loss if math.isfinite(loss) else math.inf)
    return hist


def finetune(
    state,
    cfg,
    rank,
    kappa,
    method,
    lr,
    seed,
    ft,
    ev,
    steps,
    every,
    batch=32,
    dtype=torch.float64,
    gauge=0,
):
    """Eval-loss curve of one LoRA finetuning run of the TinyGPT with weights ``state``."""
    model = TinyGPT(**cfg).to(dtype)
    model.load_state_dict(state)
    layers = add_lora(model, rank, kappa, seed, gauge)
    opt = make_opt(method, [(la.lora_B, la.lora_A) for la in layers], lr)
    return train_curve(model, opt, lm_loss, seed, ft, ev, steps, every, batch)


def pretrain(cfg, data, steps, seed, lr=3e-3, batch=32) -> dict:
    torch.manual_seed(seed)
    base = TinyGPT(**cfg)
    opt = torch.optim.AdamW(base.parameters(), lr=lr)
    g = torch.Generator().manual_seed(seed)
    for _ in progress(range(steps), desc="pretrain"):
        opt.zero_grad()
        lm_loss(base, data[torch.randint(len(data), (batch,), generator=g)]).backward()
        opt.step()
    return {k: v.clone() for k, v in base.state_dict().items()}


def sup_distance(a, b) -> float:
    """Largest pointwise gap between two eval curves."""
    return max(abs(x - y) for x, y in zip(a, b, strict=True))


def verdict(start, oracle, finals, spreads, curves_by_lr, kappas, controls=None):
    """The docstring's rule on measured numbers. ``finals[m][k]``: best-of-grid mean final
    loss; ``spreads[m][k]``: its seed std; ``curves_by_lr[k][lr]``: iMuon's mean curves;
    ``controls[lr]``: iMuon's mean curves in the further orthogonal gauges at ``lr`` (none:
    no chaos allowance, the strict tolerance everywhere). Returns ``(holds, checks, drift,
    info)``: ``drift`` the largest gauge drift of iMuon's curves, ``info`` the per-rate
    control drifts and allowances and the degradation test of check 3 at every ``kappa``."""
    k0, kmax = kappas[0], kappas[-1]
    gap = start - oracle
    excess = {m: {k: v - oracle for k, v in fk.items()} for m, fk in finals.items()}
    best = min(e[k0] for e in excess.values())
    informative = best <= 0.5 * gap
    tol = 0.01 * (start - finals["iMuon"][k0])
    lrs = list(curves_by_lr[k0])
    control = {}
    for lr in lrs:
        gauges = [curves_by_lr[k0][lr], *((controls or {}).get(lr, []))]
        control[lr] = max(
            (sup_distance(a, b) for i, a in enumerate(gauges) for b in gauges[i + 1 :]),
            default=0.0,
        )
    allowed = {lr: max(tol, 2 * control[lr]) for lr in lrs}
    stable = {lr: 2 * control[lr] <= tol for lr in lrs}
    drifts = {
        (k, lr): sup_distance(curves_by_lr[k][lr], curves_by_lr[k0][lr])
        for k in kappas
        for lr in lrs
    }
    drift = max(drifts.values())
    best_lr = {k: min(lrs, key=lambda lr, k=k: curves_by_lr[k][lr][-1]) for k in kappas}
    invariant = all(d <= allowed[lr] for (_, lr), d in drifts.items()) and all(
        stable[lr] for lr in best_lr.values()
    )

    def degrades(m, k):
        return (
            excess[m][k] >= 1.25 * excess[m][k0]
            and finals[m][k] - finals[m][k0] > 2 * max(spreads[m][k0], spreads[m][k])
            and finals["iMuon"][k] < finals[m][k]
        )

    competitive = excess["iMuon"][k0] <= best + 0.05 * gap
    checks = {
        "informative": informative,
        "imuon_gauge_invariant": invariant,
        **{f"{m} degrades": degrades(m, kmax) for m in FACTOR_WISE},
        "imuon_competitive_at_kappa_1": competitive,
    }
    info = {
        "drift_tolerance": tol,
        "control_drift": {f"{lr:g}": control[lr] for lr in lrs},
        "allowed_drift": {f"{lr:g}": allowed[lr] for lr in lrs},
        "stable_rate": {f"{lr:g}": stable[lr] for lr in lrs},
        "drift": {f"κ={k:g} | lr={lr:g}": d for (k, lr), d in drifts.items() if k != k0},
        "imuon_best_lr": {f"{k:g}": lr for k, lr in best_lr.items()},
        "degrades_at": {m: {f"{k:g}": degrades(m, k) for k in kappas[1:]} for m in FACTOR_WISE},
    }
    return all(checks.values()), checks, drift, info


def compare_methods(finetune_fn, grids, kappas, seeds, start, oracle, controls=0):
    """Run every (method, kappa, lr) over ``seeds``; pick the best lr per (method, kappa).

    ``finetune_fn(method, kappa, lr, seed, gauge=0)`` returns an eval curve; iMuon is run
    again at ``kappa = 1`` in ``controls`` further orthogonal gauges (``gauge = 1, 2, ...``)
    at every rate of its grid, the chaos control of check 2."""
    if controls and kappas[0] != 1.0:
        raise ValueError("the orthogonal-gauge controls need kappas[0] == 1")
    jobs = [(m, k, lr, 0) for m, lrs in grids.items() for k in kappas for lr in lrs]
    jobs += [("iMuon", 1.0, lr, g) for lr in grids["iMuon"] for g in range(1, controls + 1)]
    curves, finals_by_lr, std_by_lr, control_curves = {}, {}, {}, {}
    for m, k, lr, g in progress(jobs, desc="finetune"):
        runs = [finetune_fn(m, k, lr, s, gauge=g) for s in seeds]
        mean = [statistics.fmean(v) for v in zip(*runs, strict=True)]
        if g:
            control_curves.setdefault(lr, []).append(mean)
            continue
        curves[m, k, lr] = mean
        finals_by_lr[m, k, lr] = mean[-1]
        std_by_lr[m, k, lr] = statistics.pstdev(r[-1] for r in runs)
    finals, spreads, best_lr = {}, {}, {}
    for m, lrs in grids.items():
        finals[m], spreads[m], best_lr[m] = {}, {}, {}
        for k in kappas:
            lr = min(lrs, key=lambda lr, m=m, k=k: finals_by_lr[m, k, lr])
            finals[m][k], spreads[m][k] = finals_by_lr[m, k, lr], std_by_lr[m, k, lr]
            best_lr[m][k] = lr
    imuon_curves = {k: {lr: curves["iMuon", k, lr] for lr in grids["iMuon"]} for k in kappas}
    holds, checks, drift, info = verdict(
        start, oracle, finals, spreads, imuon_curves, kappas, control_curves
    )
    return dict(
        curves=curves,
        finals_by_lr=finals_by_lr,
        finals=finals,
        spreads=spreads,
        best_lr=best_lr,
        holds=holds,
        checks=checks,
        drift=drift,
        drift_info=info,
        control_curves=control_curves,
    )


def report(ctx, res, grids, kappas, steps, start, oracle, setup: str) -> ExperimentResult:
    """Plots and the :class:`ExperimentResult` of a :func:`compare_methods` outcome."""
    finals, best_lr, curves = res["finals"], res["best_lr"], res["curves"]
    every_x = [
        min((i + 1) * max(1, steps // 10), steps) for i in range(len(next(iter(curves.values()))))
    ]
    line_plot(
        ctx.path("lora_eval_loss.png"),
        {
            f"{m}, κ={k:g}": (every_x, curves[m, k, best_lr[m][k]])
            for m in grids
            for k in (kappas[0], kappas[-1])
        },
        xlabel="finetuning step",
        ylabel="eval loss (shifted chain)",
        title="LoRA finetuning, initial factor gauge (A M, B M^-T), cond(M) = κ",
        hlines={"before finetuning": start, "oracle (true chain)": oracle},
    )
    line_plot(
        ctx.path("lora_final_vs_kappa.png"),
        {m: (kappas, [finals[m][k] for k in kappas]) for m in grids},
        xlabel="condition number κ of the initial factor gauge M",
        ylabel="final eval loss (best lr per κ)",
        title="LoRA finetuning vs factor gauge",
        logx=True,
        hlines={"before finetuning": start, "oracle (true chain)": oracle},
    )
    k0, kmax = kappas[0], kappas[-1]

    def fmt(m):
        return ", ".join(f"κ={k:g}: {finals[m][k]:.4f} (lr {best_lr[m][k]:g})" for k in kappas)

    def keyed(d):
        return {m: {f"{k:g}": v for k, v in fk.items()} for m, fk in d.items()}

    moves = ", ".join(f"{m} {finals[m][k0]:.4f} → {finals[m][kmax]:.4f}" for m in grids)
    return ExperimentResult(
        title="iMuon's LoRA finetuning is unchanged by the factor gauge; factor-wise "
        "Muon/AdamW degrade",
        claim="On the fixed-rank manifold iMuon's behaviour depends only on the product ABᵀ "
        "(rank), not on the conditioning of the factors; it is effective for LoRA finetuning.",
        summary=(
            f"{setup} Eval loss on the shifted chain: before {start:.4f}, oracle {oracle:.4f}, "
            f"uniform {math.log(VOCAB):.4f}. Final (mean over seeds, best lr per κ): "
            + "; ".join(f"{m}: {fmt(m)}" for m in grids)
            + f". iMuon curve drift across gauges {res['drift']:.2e} (per rate, orthogonal-gauge "
            f"control {res['drift_info']['control_drift']}, allowed "
            f"{res['drift_info']['allowed_drift']}). Checks: {res['checks']}"
        ),
        metrics={
            "final_eval_loss": keyed(finals),
            "seed_std": keyed(res["spreads"]),
            "best_lr": keyed(best_lr),
            "all_final_eval_loss": {
                f"{m} | κ={k:g} | lr={lr:g}": v for (m, k, lr), v in res["finals_by_lr"].items()
            },
            "start_eval": start,
            "oracle_eval": oracle,
            "uniform_loss": math.log(VOCAB),
            "imuon_curve_drift": res["drift"],
            "imuon_drift_check": res["drift_info"],
            "checks": res["checks"],
        },
        holds=res["holds"],
        paper="P01",
        measured=f"final eval loss κ={k0:g} → κ={kmax:g}: {moves} "
        f"(start {start:.4f}, oracle {oracle:.4f})",
        plots=["lora_eval_loss.png", "lora_final_vs_kappa.png"],
        table=[
            {
                "method": m,
                **{f"κ={k:g}": round(finals[m][k], 4) for k in kappas},
                **{f"lr κ={k:g}": best_lr[m][k] for k in kappas},
            }
            for m in grids
        ],
    )


def run(ctx: RunContext) -> ExperimentResult:
    torch.set_num_threads(1)
    if ctx.quick:
        cfg = dict(d=32, layers=1, heads=2, ctx=32)
        pre_steps, ft_steps, rank, seeds, kappas = 300, 100, 4, [0, 1], [1.0, 1e4, 1e6]
        grids = QUICK_GRIDS
    else:
        cfg = dict(d=32, layers=2, heads=2, ctx=32)
        pre_steps, ft_steps, rank, seeds, kappas = 600, 200, 8, [0, 1, 2], [1.0, 1e6]
        grids = GRIDS
    table_a, table_b = markov_tables(ctx.seed)
    pre = sample(table_a, 1024, cfg["ctx"] + 1, ctx.seed + 1)
    ft = sample(table_b, 512, cfg["ctx"] + 1, ctx.seed + 2)
    ev = sample(table_b, 256, cfg["ctx"] + 1, ctx.seed + 3)
    pre_ev = sample(table_a, 256, cfg["ctx"] + 1, ctx.seed + 4)
    oracle = oracle_loss(table_b, ev)
    state = pretrain(cfg, pre, pre_steps, ctx.seed)
    model = TinyGPT(**cfg)
    model.load_state_dict(state)
    with torch.no_grad():
        start, pre_fit = float(lm_loss(model, ev)), float(lm_loss(model, pre_ev))
    every = max(1, ft_steps // 10)

    def one(m, k, lr, s, gauge=0):
        return finetune(state, cfg, rank, k, m, lr, s, ft, ev, ft_steps, every, gauge=gauge)

    res = compare_methods(one, grids, kappas, seeds, start, oracle, CONTROLS)
    setup = (
        f"TinyGPT {cfg} pretrained {pre_steps} AdamW steps (eval {pre_fit:.4f}, oracle "
        f"{oracle_loss(table_a, pre_ev):.4f} on the pretraining chain); LoRA r={rank} on "
        f"{list(TARGETS)}, only the factors trained, {ft_steps} steps, seeds {seeds}, "
        f"gauges κ={kappas}."
    )
    out = report(ctx, res, grids, kappas, ft_steps, start, oracle, setup)
    out.metrics.update(pretrain_eval=pre_fit, pretrain_oracle=oracle_loss(table_a, pre_ev))
    return out


# ---------------------------------------------------------------- any Hugging Face causal LM
def token_ids(vocab_size: int) -> torch.Tensor:
    """The ``VOCAB`` model token ids the chain's symbols are written with (spread out)."""
    if vocab_size < VOCAB:
        raise ValueError(f"the model's vocabulary ({vocab_size}) is smaller than {VOCAB}")
    return torch.arange(VOCAB) * (vocab_size // VOCAB)


def hf_loss(ids: torch.Tensor):
    """Cross-entropy of an HF causal LM restricted to the ``VOCAB`` chain tokens."""

    def loss(model, batch):
        logits = model(input_ids=ids[batch[:, :-1]]).logits[..., ids]
        return nn.functional.cross_entropy(logits.reshape(-1, VOCAB), batch[:, 1:].reshape(-1))

    return loss


def hf_lora(model: nn.Module, rank: int, kappa: float = 1.0, seed: int = 0, gauge: int = 0):
    """peft LoRA (rank ``rank``, every linear layer but the head) on ``model``, both factors
    random (function unchanged, :func:`imuon.lora.prepare_peft_for_imuon`) and each pair in a
    random gauge of condition number ``kappa``. Returns ``(peft_model, pairs)``."""
    from peft import LoraConfig, get_peft_model

    from ..lora import find_lora_pairs, prepare_peft_for_imuon

    config = LoraConfig(r=rank, lora_alpha=rank, target_modules="all-linear", lora_dropout=0.0)
    torch.manual_seed(seed)  # peft draws lora_A from the global generator
    peft_model = get_peft_model(model, config)
    prepare_peft_for_imuon(peft_model, init_std=0.05, seed=seed)
    gen = torch.Generator().manual_seed(gauge_seed(seed, gauge))
    pairs = [(b, a) for _, b, a in find_lora_pairs(peft_model)]
    with torch.no_grad():
        for b, a in pairs:  # delta W = s * b @ a, b (out, r), a (r, in)
            M = conditioned(rank, kappa, gen).to(b.device)
            b.copy_((b.double() @ M).to(b.dtype))
            a.copy_(torch.linalg.solve(M, a.double()).to(a.dtype))
    return peft_model, pairs


def load_hf(name: str, allow_download: bool = False) -> nn.Module:
    """``AutoModelForCausalLM.from_pretrained(name)`` in float32 (local files only unless
    ``allow_download``); needs the ``lm`` extra (transformers, peft)."""
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(
        name, local_files_only=not allow_download, dtype=torch.float32
    )


def run_hf(
    ctx: RunContext,
    model_or_name,
    allow_download: bool = False,
    device: str | None = None,
    ctx_len: int = 64,
    rank: int = 8,
    steps: int | None = None,
    dtype: torch.dtype = torch.float64,
) -> ExperimentResult:
    """The comparison on a Hugging Face causal LM (already pretrained: no pretraining stage);
    the finetuning task is the shifted chain written with :func:`token_ids` of its vocabulary.
    ScaledGD is left out (as when this path was first run).

    The model is finetuned in ``dtype``, float64 by default, as the in-run experiment is: the
    gauge of condition ``kappa`` is applied by rounding ``B M`` and ``M^{-1} A`` to ``dtype``,
    which moves the product ``B A`` by about ``kappa * eps(dtype)`` relative, and that
    perturbation, not a loss of invariance, is what iMuon's curves then drift by. In float32
    at ``kappa = 1e4`` that is ~1e-3 relative and the drift lands between 6e-5 and 4e-4
    depending on the CPU's BLAS code path (``MKL_CBWR``), so check 2 of the verdict would test
    the machine's rounding. In float64 the same floor is ~2e-12 (drift ~1e-13 measured), far
    below the check's tolerance. A lower ``dtype`` is allowed (large models on a GPU), but then
    check 2 carries that rounding floor and says nothing below ``kappa_max * eps(dtype)``."""
    if not dtype.is_floating_point:
        raise ValueError(f"dtype must be a floating-point dtype, got {dtype}")
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    base = (
        load_hf(model_or_name, allow_download) if isinstance(model_or_name, str) else model_or_name
    )
    base = base.to(device=device, dtype=dtype)
    state = {k: v.detach().to("cpu", copy=True) for k, v in base.state_dict().items()}
    ids = token_ids(base.config.vocab_size).to(device)
    loss_fn = hf_loss(ids)
    _, table_b = markov_tables(ctx.seed)
    ft = sample(table_b, 512, ctx_len + 1, ctx.seed + 2).to(device)
    ev = sample(table_b, 128 if ctx.quick else 256, ctx_len + 1, ctx.seed + 3).to(device)
    oracle = oracle_loss(table_b, ev.cpu())
    with torch.no_grad():
        start = float(loss_fn(base.eval(), ev))
    if ctx.quick:
        seeds, kappas = [0], [1.0, 1e4]
        grids = {m: v for m, v in QUICK_GRIDS.items() if m != "ScaledGD"}
    else:
        seeds, kappas = [0, 1, 2], [1.0, 1e2, 1e4]
        grids = {m: v for m, v in GRIDS.items() if m != "ScaledGD"}
    steps = steps or (30 if ctx.quick else 300)
    every = max(1, steps // 10)

    def one(m, k, lr, s, gauge=0):
        base.load_state_dict(state)
        base.eval()  # no dropout: the runs differ only by the optimizer and the gauge
        peft_model, pairs = hf_lora(base, rank, k, s, gauge)
        try:
            opt = make_opt(m, pairs, lr, layout="peft")
            return train_curve(peft_model, opt, loss_fn, s, ft, ev, steps, every)
        finally:
            peft_model.unload()  # drop the adapters, keep the (restored below) base

    name = model_or_name if isinstance(model_or_name, str) else type(model_or_name).__name__
    res = compare_methods(one, grids, kappas, seeds, start, oracle, CONTROLS)
    setup = (
        f"Hugging Face model {name} on {device} in {dtype}; peft LoRA r={rank} on all linear "
        f"layers, only the factors trained, {steps} steps, seeds {seeds}, gauges κ={kappas}; chain "
        f"tokens written with ids {ids.tolist()}."
    )
    return report(ctx, res, grids, kappas, steps, start, oracle, setup)


def main(argv: list[str] | None = None) -> int:
    """``python -m imuon.experiments.lora [--quick|--full] [--seed S] [--out DIR]
    [--model NAME [--allow-download] [--device DEV] [--dtype float64]]``; ``--model`` runs the
    comparison on a Hugging Face causal LM (``pip install "imuon[lm]"``) instead of the in-run
    TinyGPT, finetuned in ``--dtype`` (float64 by default: see :func:`run_hf`)."""
    import argparse

    extra = argparse.ArgumentParser(add_help=False)
    extra.add_argument("--model", default=None)
    extra.add_argument("--allow-download", action="store_true")
    extra.add_argument("--device", default=None)
    extra.add_argument("--dtype", default="float64", choices=["float64", "float32", "bfloat16"])
    opts, rest = extra.parse_known_args(argv)
    if opts.model is None:
        return run_experiment(run, name="imuon.lora", description=__doc__, argv=rest)

    def hf(ctx):
        dtype = getattr(torch, opts.dtype)
        return run_hf(ctx, opts.model, opts.allow_download, opts.device, dtype=dtype)

    return run_experiment(hf, name="imuon.lora", description=__doc__, argv=rest)


if __name__ == "__main__":
    raise SystemExit(main())
