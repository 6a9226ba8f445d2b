r"""The feedback-aware in-context transformer and its pretraining loop.

Tokens. A history point :math:`(x, y, s_{1..S})` and a candidate :math:`(x, s_{1..S})` become

.. math:: t = [\,x \text{ (zero-padded to } D),\ y \text{ (0 for candidates)},\ 1_{\text{hist}},\
          \tilde s_1, m_1, \dots, \tilde s_S, m_S\,]

with :math:`\tilde s` the standardized feedback (``NaN`` replaced by 0) and :math:`m \in \{0,1\}`
its availability bit; a missing source is never a silent zero, its bit says "absent". With
``S = 0`` the token is exactly the first ``D + 2`` entries (the history-only format).

Attention (PFN-style): every token attends to the history tokens only, so the history tokens
can compare :math:`y` with each source's feedback (the in-context reliability estimate) and the
candidates read that summary. A linear head gives a Gaussian :math:`N(\mu, \sigma^2)` per
candidate (or, with ``head="bar"``, a bar/Riemann distribution on fixed borders, as in PFNs;
:mod:`ficbo.heads`); pretraining minimises its negative log-likelihood on prior draws.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import asdict, dataclass
from importlib import resources

import torch
from torch import nn

from .devices import model_device, resolve_device
from .heads import BarPredictive, GaussianPredictive, bar_borders
from .prior import sample_training_batch

#: shipped checkpoint names -> files under ``ficbo/checkpoints``.
SHIPPED = {
    "quick-ficbo": "quick_ficbo.pt",
    "quick-history-only": "quick_history_only.pt",
    "quick-ficbo-2src": "quick_ficbo_2src.pt",
    "default-ficbo": "default_ficbo.pt",
    "default-history-only": "default_history_only.pt",
    "default-ficbo-2src": "default_ficbo_2src.pt",
    "long-history-only": "long_history_only.pt",
}

__all__ = [
    "FICBOModel",
    "ModelConfig",
    "encode_tokens",
    "feedback_sensitivity",
    "gaussian_nll",
    "load",
    "pretrain",
    "pretrained",
    "save",
]


@dataclass(frozen=True)
class ModelConfig:
    """Sizes of the model and the range it is pretrained on."""

    max_dim: int = 2
    n_sources: int = 1
    d_model: int = 64
    n_heads: int = 4
    n_layers: int = 2
    d_ff: int = 128
    #: output head: ``"gaussian"`` (mean, std) or ``"bar"`` (Riemann, ``n_bars`` bars)
    head: str = "gaussian"
    n_bars: int = 64

    def __post_init__(self) -> None:
        if self.head not in ("gaussian", "bar"):
            raise ValueError(f"head must be 'gaussian' or 'bar', got {self.head!r}")
        if isinstance(self.n_bars, bool) or not isinstance(self.n_bars, int) or self.n_bars < 2:
            raise ValueError(f"n_bars must be an int >= 2, got {self.n_bars!r}")
        for name in ("max_dim", "d_model", "n_heads", "n_layers", "d_ff"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be an int >= 1, got {v!r}")
        if not isinstance(self.n_sources, int) or self.n_sources < 0:
            raise ValueError(f"n_sources must be an int >= 0, got {self.n_sources!r}")
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model {self.d_model} not divisible by n_heads {self.n_heads}")

    @property
    def token_dim(self) -> int:
        return self.max_dim + 2 + 2 * self.n_sources


def encode_tokens(
    x: torch.Tensor, y: torch.Tensor | None, fb: torch.Tensor, *, max_dim: int, n_sources: int
) -> torch.Tensor:
    """Token features ``(B, N, max_dim + 2 + 2 n_sources)`` (see the module docstring).

    Args:
        x: ``(B, N, d)`` with ``d <= max_dim``.
        y: ``(B, N)`` objective values for history tokens, ``None`` for candidates.
        fb: ``(B, S, N)`` standardized feedback with ``NaN`` where unscored; ``S <= n_sources``
            (the missing slots are marked absent).

    Raises:
        ValueError: on mismatched lengths, a dimension beyond ``max_dim``, or too many sources.
    """
    if x.dim() != 3:
        raise ValueError(f"x must be (B, N, d), got shape {tuple(x.shape)}")
    b, n, d = x.shape
    if d > max_dim:
        raise ValueError(f"input dimension {d} is beyond the pretrained range 1..{max_dim}")
    if fb.dim() != 3 or fb.shape[0] != b or fb.shape[2] != n:
        raise ValueError(f"feedback must be (B={b}, S, N={n}), got shape {tuple(fb.shape)}")
    if fb.shape[1] > n_sources:
        raise ValueError(f"{fb.shape[1]} feedback sources given, model takes at most {n_sources}")
    if y is not None and tuple(y.shape) != (b, n):
        raise ValueError(f"y must be (B={b}, N={n}), got shape {tuple(y.shape)}")
    dt, dev = torch.float32, x.device
    parts = [torch.nn.functional.pad(x.to(dt), (0, max_dim - d))]
    if y is None:
        parts += [torch.zeros(b, n, 2, dtype=dt, device=dev)]
    else:
        if torch.isnan(y).any():
            raise ValueError("history objective values contain NaN")
        parts += [y.to(dt)[..., None], torch.ones(b, n, 1, dtype=dt)]
    for s in range(n_sources):
        if s < fb.shape[1]:
            v = fb[:, s].to(dt)
            ok = ~torch.isnan(v)
            parts += [torch.where(ok, v, torch.zeros_like(v))[..., None], ok.to(dt)[..., None]]
        else:
            parts += [torch.zeros(b, n, 2, dtype=dt, device=dev)]
    return torch.cat(parts, -1)


class FICBOModel(nn.Module):
    """Transformer predictive :math:`p(y_c \\mid x_c, s_c, \\text{history})` per candidate."""

    def __init__(self, config: ModelConfig | None = None):
        super().__init__()
        self.config = config or ModelConfig()
        c = self.config
        self.embed = nn.Linear(c.token_dim, c.d_model)
        layer = nn.TransformerEncoderLayer(
            c.d_model, c.n_heads, c.d_ff, dropout=0.0, batch_first=True, norm_first=True
        )
        self.encoder = nn.TransformerEncoder(layer, c.n_layers, enable_nested_tensor=False)
        n_out = 2 if c.head == "gaussian" else c.n_bars
        self.head = nn.Sequential(nn.LayerNorm(c.d_model), nn.Linear(c.d_model, n_out))
        # fixed by n_bars: a buffer so that ``.to(device)`` moves it, but not in the state_dict
        borders = bar_borders(c.n_bars).float() if c.head == "bar" else None
        self.register_buffer("borders", borders, persistent=False)

    def forward(
        self,
        x_hist: torch.Tensor,
        y_hist: torch.Tensor,
        fb_hist: torch.Tensor,
        x_cand: torch.Tensor,
        fb_cand: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Predictive mean and standard deviation, each ``(B, C)`` (either head).

        Args:
            x_hist: ``(B, H, d)``, ``H >= 1``; y_hist: ``(B, H)``; fb_hist: ``(B, S, H)``.
            x_cand: ``(B, C, d)``; fb_cand: ``(B, S, C)`` (standardized, ``NaN`` = unscored).
        """
        pred = self.predict(x_hist, y_hist, fb_hist, x_cand, fb_cand)
        return pred.mean, pred.std

    def predict(
        self,
        x_hist: torch.Tensor,
        y_hist: torch.Tensor,
        fb_hist: torch.Tensor,
        x_cand: torch.Tensor,
        fb_cand: torch.Tensor,
    ) -> GaussianPredictive | BarPredictive:
        """The predictive distribution per candidate (:mod:`ficbo.heads`); same inputs.

        The inputs may live on any device: the tokens are built where they are and moved to
        the model's device, and the distribution comes back on the model's device.
        """
        c = self.config
        if x_hist.shape[1] < 1:
            raise ValueError("the history must hold at least one point")
        if x_hist.shape[-1] != x_cand.shape[-1] or fb_hist.shape[1] != fb_cand.shape[1]:
            raise ValueError(
                f"history/candidate mismatch: x dims {x_hist.shape[-1]} vs {x_cand.shape[-1]}, "
                f"sources {fb_hist.shape[1]} vs {fb_cand.shape[1]}"
            )
        th = encode_tokens(x_hist, y_hist, fb_hist, max_dim=c.max_dim, n_sources=c.n_sources)
        tc = encode_tokens(x_cand, None, fb_cand, max_dim=c.max_dim, n_sources=c.n_sources)
        dev = model_device(self)
        th, tc = th.to(dev), tc.to(dev)
        h, n = th.shape[1], th.shape[1] + tc.shape[1]
        mask = torch.ones(n, n, dtype=torch.bool, device=th.device)  # True = may NOT attend
        mask[:, :h] = False
        z = self.encoder(self.embed(torch.cat([th, tc], 1)), mask=mask)
        out = self.head(z[:, h:])
        if c.head == "bar":
            return BarPredictive(out, self.borders)
        mean = out[..., 0]
        std = torch.nn.functional.softplus(out[..., 1]) + 1e-3
        return GaussianPredictive(mean, std)


def feedback_sensitivity(
    model: FICBOModel,
    x_hist: torch.Tensor,
    y_hist: torch.Tensor,
    fb_hist: torch.Tensor,
    x_cand: torch.Tensor,
    fb_cand: torch.Tensor,
) -> torch.Tensor:
    r"""In-context trust read-out: :math:`\partial\mu_c / \partial\tilde s_{j,c}`, mean over ``c``.

    Because a candidate attends only to the history (and itself), :math:`\mu_c` depends on the
    candidates' feedback only through its own, so one backward pass of :math:`\sum_c \mu_c`
    gives every per-candidate derivative. Positive: the model follows source ``j``; near 0:
    ignores it; negative: reads it with a flipped sign. Unscored (``NaN``) candidates are left
    out of the average; a source with no scored candidate gives ``NaN``.

    Returns:
        ``(B, S)``, on the device of ``fb_cand`` (the model may sit elsewhere).
    """
    fb = fb_cand.detach().clone().float().requires_grad_(True)
    mean, _ = model(x_hist, y_hist, fb_hist, x_cand, fb)
    (grad,) = torch.autograd.grad(mean.sum(), fb)  # flows back through the move to the model
    ok = ~torch.isnan(fb_cand)
    n = ok.sum(-1)
    total = torch.where(ok, grad, torch.zeros_like(grad)).sum(-1)
    return torch.where(n > 0, total / n.clamp_min(1), torch.full_like(total, math.nan))


def gaussian_nll(mean: torch.Tensor, std: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    r"""Mean of :math:`\log\sigma + (y-\mu)^2/(2\sigma^2) + \tfrac12\log 2\pi`."""
    return GaussianPredictive(mean, std).nll(y)


def pretrain(
    config: ModelConfig,
    *,
    steps: int,
    batch_size: int = 32,
    n_points: int = 40,
    lr: float = 1e-3,
    seed: int = 0,
    source_dropout: float = 0.2,
    n_features: int = 64,
    callback=None,
    device: str | torch.device | None = None,
) -> tuple[FICBOModel, dict[str, float]]:
    """Pretrain a model on fresh prior draws (Adam, cosine learning rate).

    Each step draws a dimension ``d`` in ``1..max_dim``, a history length ``H`` in
    ``1..n_points-1`` and a batch of tasks with ``config.n_sources`` sources. With probability
    ``source_dropout`` every source of the batch is removed, so the model also sees tasks
    without feedback; with two or more sources, each source of each task is in addition
    removed (all ``NaN``) with that probability. ``n_features`` random features per latent
    function. A model with ``n_sources = 0`` is the history-only (PFN-style) optimiser.

    ``device`` (default CPU; :func:`ficbo.devices.resolve_device`) holds the model, the
    optimiser state and each batch. The weights are initialised on the CPU and the prior is
    sampled on the CPU by the seeded generator, so the initial weights and every batch are the
    same on every device; only the arithmetic's rounding differs.

    Returns:
        The model (eval mode) and ``{"seconds", "tasks_per_second", "final_loss"}``
        (``final_loss``: mean NLL over the last 10% of steps).
    """
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps!r}")
    dev = resolve_device(device)
    g = torch.Generator().manual_seed(seed)
    with torch.random.fork_rng(devices=[]):  # seeded initialisation, global RNG untouched
        torch.manual_seed(seed)
        model = FICBOModel(config)
    model.to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, steps)
    losses: list[float] = []
    t0 = time.perf_counter()
    model.train()
    for step in range(steps):
        dim = int(torch.randint(1, config.max_dim + 1, (1,), generator=g))
        hist = int(torch.randint(1, n_points, (1,), generator=g))
        n_src = config.n_sources
        if n_src and float(torch.rand(1, generator=g)) < source_dropout:
            n_src = 0
        batch = sample_training_batch(
            batch_size,
            n_points,
            hist,
            dim=dim,
            max_dim=config.max_dim,
            n_sources=n_src,
            generator=g,
            n_features=n_features,
        )
        if n_src >= 2:  # several sources: each is also absent per task with that probability
            keep = torch.rand(batch_size, n_src, 1, generator=g) >= source_dropout
            for key in ("fb_hist", "fb_cand"):
                batch[key] = torch.where(keep, batch[key], torch.full_like(batch[key], math.nan))
        batch = {key: v.to(dev, non_blocking=True) for key, v in batch.items()}
        pred = model.predict(
            batch["x_hist"], batch["y_hist"], batch["fb_hist"], batch["x_cand"], batch["fb_cand"]
        )
        loss = pred.nll(batch["y_cand"])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        losses.append(loss.item())
        if callback is not None:
            callback(step, losses[-1])
    seconds = time.perf_counter() - t0
    model.eval()
    tail = losses[-max(1, steps // 10) :]
    stats = {
        "seconds": seconds,
        "tasks_per_second": steps * batch_size / seconds,
        "final_loss": sum(tail) / len(tail),
    }
    return model, stats


def save(model: FICBOModel, path: str | os.PathLike[str]) -> None:
    """Write ``{"config", "state_dict"}`` with :func:`torch.save`; CPU tensors, so a model
    trained on a GPU loads on a machine without one."""
    state = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    torch.save({"config": asdict(model.config), "state_dict": state}, path)


def pretrained(
    name: str = "quick-ficbo", *, device: str | torch.device | None = None
) -> FICBOModel:
    """A checkpoint shipped with the package (eval mode).

    ``"quick-ficbo"`` and ``"quick-history-only"`` are the two models of
    ``python -m ficbo.experiments.synthetic --quick --seed 0`` (d <= 2, at most one source);
    ``"quick-ficbo-2src"`` is the two-source model of
    ``python -m ficbo.experiments.multisource --quick --seed 0`` (d <= 2). The ``"default-*"``
    models are the same three at the default size (1500 steps x 64 tasks, d_model 64; from
    the runs without ``--quick``). ``"long-history-only"``: the history-only model pretrained
    for 4000 steps x 64 tasks (``scripts/history_only_budget.py``), level with GP-EI in d = 2.
    ``device``: where to put it (:func:`load`).
    """
    if name not in SHIPPED:
        raise ValueError(f"unknown checkpoint {name!r}; shipped: {sorted(SHIPPED)}")
    ref = resources.files("ficbo") / "checkpoints" / SHIPPED[name]
    with resources.as_file(ref) as path:
        return load(path, device=device)


def load(path: str | os.PathLike[str], *, device: str | torch.device | None = None) -> FICBOModel:
    """Read a checkpoint written by :func:`save` (weights only; eval mode) onto ``device``
    (default CPU; :func:`ficbo.devices.resolve_device`)."""
    dev = resolve_device(device)
    blob = torch.load(path, map_location=dev, weights_only=True)
    model = FICBOModel(ModelConfig(**blob["config"])).to(dev)
    model.load_state_dict(blob["state_dict"])
    return model.eval()
