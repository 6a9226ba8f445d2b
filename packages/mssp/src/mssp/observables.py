r"""Observables the scaling theory is about, measured on a fixed probe batch as a callback.

For an :class:`~mssp.layers.MoEModel` and probe inputs ``x`` (fixed for the run),
:func:`probe` returns, per block: the router logits, the aggregated (combine) output, and every
expert's pre-activations :math:`u_{e} = \alpha_1 W_{1,e} \bar h` on *all* probe tokens (so that
their change is measured on fixed (token, expert) pairs even when the routing moves); plus the
residual stream and the network output. :class:`Observables` records, at each call:

* ``logits_rms``: :math:`\mathrm{rms}(r)`, the router logits' scale;
* ``combine_rms``: :math:`\mathrm{rms}(\mathrm{MoE}(h))`, the aggregation output's scale;
* ``dlogits``, ``dcombine``, ``du``, ``dz``: rms change since the first call of the router
  logits, the aggregation output, the expert pre-activations and the network output;
* ``du_own``, ``dlogits_own``: the part of those changes due to the layer's own weights,
  :math:`\mathrm{rms}(\alpha_1 (W_{1,t} - W_{1,0}) \bar h_t)` and
  :math:`\mathrm{rms}(\alpha_r (W_{r,t} - W_{r,0}) \bar h_t)` (what the learning-rate
  exponents of ``w1``/``router`` control directly);
* ``expert_update``: :math:`\|W_t - W_{t-1}\|_F / \|W_{t-1}\|_F` of the expert weights
  (mean over experts, blocks and ``w1``/``w2``) since the previous call;
* ``feature_learning``: :math:`\mathrm{rms}(h_L(t) - h_L(0)) / \mathrm{rms}(h_L(0))`.

All rms values are root-mean-square per coordinate (so :math:`\Theta(1)` means "does not grow
or shrink with the sizes").
"""

from __future__ import annotations

import math

import torch

from .layers import MoEModel, _rms_norm

__all__ = ["Observables", "probe", "rms"]


def rms(t: torch.Tensor) -> float:
    """Root-mean-square of the entries of ``t`` (0 for an empty tensor)."""
    return float(t.pow(2).mean().sqrt()) if t.numel() else 0.0


@torch.no_grad()
def probe(model: MoEModel, x: torch.Tensor) -> dict[str, list[torch.Tensor] | torch.Tensor]:
    """Router logits, combine outputs and all-expert pre-activations of every block on ``x``.

    Returns:
        ``{"logits": [(T, M)], "combine": [(T, N)], "u": [(M, T, N_e)], "h": [(T, N)] * (L+1),
        "z": (T, d_out)}``.
    """
    if not isinstance(model, MoEModel):
        raise TypeError(f"probe needs an MoEModel, got {type(model).__name__}")
    hs = model.features(x)
    z = model.mult_readout * (hs[-1] @ model.readout.T)
    logits, comb, us = [], [], []
    for b, h in zip(model.blocks, hs[:-1], strict=True):
        logits.append(b.last["logits"])
        comb.append(b.last["combine"])
        xb = _rms_norm(h) if b.norm else h
        us.append(b.mult1 * torch.einsum("men,tn->mte", b.w1, xb))
    xs = [_rms_norm(h) if b.norm else h for b, h in zip(model.blocks, hs[:-1], strict=True)]
    return {"logits": logits, "combine": comb, "u": us, "h": hs, "z": z, "x": xs}


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs)


class Observables:
    """A per-step callback: ``obs(model)`` appends one record to ``obs.history``.

    Args:
        x: the probe inputs, ``(T, d_in)``, kept fixed.

    Example:
        >>> model = MoEModel(3, 1, n=8, ne=8, m=4, k=2)
        >>> obs = Observables(torch.randn(16, 3))
        >>> rec = obs(model)
        >>> sorted(rec)[:3], rec["du"]
        (['combine_rms', 'dcombine', 'dlogits'], 0.0)
    """

    def __init__(self, x: torch.Tensor):
        if x.ndim != 2 or x.shape[0] < 1:
            raise ValueError(
                f"probe inputs must have shape (T, d_in), T >= 1, got {tuple(x.shape)}"
            )
        self.x = x
        self.first: dict | None = None
        self.prev_w: list[torch.Tensor] | None = None
        self.w0: list[tuple[torch.Tensor, torch.Tensor]] = []
        self.history: list[dict[str, float]] = []

    def __call__(self, model: MoEModel) -> dict[str, float]:
        p = probe(model, self.x)
        ws = [w.detach().clone() for b in model.blocks for w in (b.w1, b.w2)]
        if self.first is None:
            self.first = p
            self.w0 = [(b.w1.detach().clone(), b.router.detach().clone()) for b in model.blocks]
        f = self.first
        du_own, dr_own = [], []
        for b, (w1_0, r_0), xb in zip(model.blocks, self.w0, p["x"], strict=True):
            du_own.append(rms(b.mult1 * torch.einsum("men,tn->mte", b.w1.detach() - w1_0, xb)))
            dr_own.append(rms(b.mult_router * (xb @ (b.router.detach() - r_0).T)))
        if self.prev_w is None:
            upd = 0.0
        else:
            upd = _mean(
                [
                    float(((w - v).flatten(1).norm(dim=1) / v.flatten(1).norm(dim=1)).mean())
                    for w, v in zip(ws, self.prev_w, strict=True)
                ]
            )
        self.prev_w = ws
        rec = {
            "logits_rms": _mean([rms(t) for t in p["logits"]]),
            "combine_rms": _mean([rms(t) for t in p["combine"]]),
            "dlogits": _mean([rms(a - b) for a, b in zip(p["logits"], f["logits"], strict=True)]),
            "dcombine": _mean(
                [rms(a - b) for a, b in zip(p["combine"], f["combine"], strict=True)]
            ),
            "du": _mean([rms(a - b) for a, b in zip(p["u"], f["u"], strict=True)]),
            "dz": rms(p["z"] - f["z"]),
            "du_own": _mean(du_own),
            "dlogits_own": _mean(dr_own),
            "h_rms": rms(p["h"][-1]),
            "expert_update": upd,
            "feature_learning": rms(p["h"][-1] - f["h"][-1]) / max(rms(f["h"][-1]), 1e-30),
        }
        self.history.append(rec)
        return rec


def scaled_shape(base: dict[str, int], regime: str, s: int) -> dict[str, int]:
    """``base`` with every dimension the regime co-scales multiplied by ``s``.

    Example:
        >>> scaled_shape({"N": 16, "Ne": 8, "M": 4, "K": 1, "L": 1}, "II", 2)
        {'N': 32, 'Ne': 8, 'M': 8, 'K': 2, 'L': 1}
    """
    from .tables import REGIMES

    if regime not in REGIMES:
        raise ValueError(f"unknown regime {regime!r}; choose one of {tuple(REGIMES)}")
    if isinstance(s, bool) or not isinstance(s, int) or s < 1:
        raise ValueError(f"scale s must be a positive int, got {s!r}")
    return {d: v * s if d in REGIMES[regime] else v for d, v in base.items()}


def log_slope(xs: list[float], ys: list[float]) -> float:
    """Least-squares slope of ``log y`` against ``log x``."""
    lx = [math.log(x) for x in xs]
    ly = [math.log(max(y, 1e-300)) for y in ys]
    mx, my = sum(lx) / len(lx), sum(ly) / len(ly)
    num = sum((a - mx) * (b - my) for a, b in zip(lx, ly, strict=True))
    return num / sum((a - mx) ** 2 for a in lx)


def _after(warmup: int, obs: Observables):
    """``obs`` as a callback that skips its first ``warmup`` calls.

    :func:`~mssp.train.train` calls back before the first step and after every step, so the
    first call that reaches ``obs`` sees the model after ``warmup`` steps.
    """
    if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0:
        raise ValueError(f"warmup must be a non-negative int, got {warmup!r}")
    calls = [0]

    def cb(model):
        calls[0] += 1
        if calls[0] > warmup:
            obs(model)

    return cb


def coord_check(
    scheme: str,
    optimizer: str,
    regime: str,
    *,
    base: dict[str, int],
    scales: list[int],
    lr: float,
    steps: int = 3,
    batch: int = 128,
    seeds: int = 2,
    d_in: int = 8,
    d_out: int = 1,
    clusters: int = 1,
    depth: bool = False,
    warmup: int = 0,
) -> dict[str, dict]:
    """The observables after ``steps`` steps for models grown along the regime's axis.

    Every model of size ``scaled_shape(base, regime, s)`` is parameterised with
    :func:`mssp.parameterize` (base shapes = ``base``), trained ``steps`` steps on the
    :class:`~mssp.train.ClusterTeacher` task, and probed; values are averaged over ``seeds``.
    Also records ``combine0`` (the aggregation output's rms where observation starts: at
    initialisation unless ``warmup``). With
    ``depth=True`` the depth ``L`` is multiplied by ``s`` instead (widths stay at the base).
    With ``warmup > 0`` the model first trains ``warmup`` unobserved steps (same optimizer,
    same data stream) and the changes are measured from there over the next ``steps``: the
    dynamics after the expert outputs have aligned with the backward signal, which SGD's
    router exponent needs (at initialisation that alignment is random, an extra ``N^{-1/2}``).

    Returns:
        ``{"values": {observable: [value per scale]}, "slopes": {observable: slope of log value
        on log s}}``.
    """
    from .parameterize import parameterize
    from .train import ClusterTeacher, train

    _after(warmup, Observables(torch.zeros(1, 1)))  # validate warmup before any training

    teacher = ClusterTeacher(d_in, d_out, clusters=clusters, seed=0)
    keys = (
        "combine0",
        "du",
        "du_own",
        "dlogits",
        "dlogits_own",
        "dz",
        "h",
        "dcombine",
        "feature_learning",
    )
    values: dict[str, list[float]] = {k: [] for k in keys}
    for s in scales:
        acc = dict.fromkeys(keys, 0.0)
        for seed in range(seeds):
            torch.manual_seed(1000 * seed + s)
            sh = {**base, "L": base["L"] * s} if depth else scaled_shape(base, regime, s)
            model = MoEModel(
                d_in, d_out, n=sh["N"], ne=sh["Ne"], m=sh["M"], k=sh["K"], depth=sh["L"]
            )
            groups = parameterize(model, scheme, optimizer, regime=regime, base_shapes=base, lr=lr)
            x_probe, _ = teacher.sample(256, torch.Generator().manual_seed(99))
            obs = Observables(x_probe)
            train(
                model,
                groups,
                optimizer,
                teacher,
                steps=warmup + steps,
                batch=batch,
                seed=seed,
                callback=_after(warmup, obs),
            )
            first, last = obs.history[0], obs.history[-1]
            acc["combine0"] += first["combine_rms"] / seeds
            acc["h"] += last["h_rms"] / seeds
            for k in keys[1:]:
                if k == "h":
                    continue
                acc[k] += last[k] / seeds
        for k in keys:
            values[k].append(acc[k])
    slopes = {k: log_slope([float(s) for s in scales], v) for k, v in values.items()}
    return {"values": values, "slopes": slopes}
