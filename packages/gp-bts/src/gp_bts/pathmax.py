r"""Maximising posterior sample paths over a box: multi-start L-BFGS-B from the best candidates.

On a continuous domain BTS should query :math:`\arg\max_{x \in B} g_q(x)` of each sample
path :math:`g_q`, not only the best of a finite candidate set. A pathwise (Matheron) sample
(``draw_matheron_paths``) is a deterministic, differentiable function of :math:`x`, so it can
be maximised like an acquisition function, the way BoTorch's ``optimize_acqf`` does:

1. evaluate every path on the candidate set (cheap: the cost is linear in the set's size);
2. take each path's ``n_starts`` best candidates as starting points;
3. run L-BFGS-B inside the box from each start (BoTorch's ``gen_candidates_scipy``, whose
   batched mode treats every start as its own problem, so each run's line search can only
   increase its own path's value);
4. keep, per path, the best end point.

Every start is tagged with the index of its path in an extra input column that is held fixed
(``fixed_features``), so each point is evaluated on its own path even when the batched
optimiser drops starts that have converged. Because the best start is the candidate-set
maximiser and each run never decreases its path's value, the returned value is at least the
candidate-set maximum; the guard below enforces it even if an optimiser run misbehaves.
"""

from __future__ import annotations

import torch
from botorch.generation.gen import gen_candidates_scipy

__all__ = ["DEFAULT_OPTIONS", "PGTOL_REL", "maximize_paths"]

#: L-BFGS-B settings (``factr`` in units of the float64 eps: a relative decrease below about
#: 2e-11 stops). The projected-gradient tolerance ``pgtol`` is set per call from the paths'
#: scale (:data:`PGTOL_REL` times the largest candidate value over the narrowest box side): an
#: absolute value would be too loose for a GP-prior path and, for Branin's (values ~ 100), below
#: the rounding floor, where the line search ends "abnormally".
DEFAULT_OPTIONS = {"maxiter": 200, "factr": 1e5}
PGTOL_REL = 1e-6


def _on_own_path(paths, n_paths: int, d: int):
    """``X (b, 1, d+1)`` -> ``(b,)``: point ``X[i, 0, :d]`` on path ``int(X[i, 0, d])``."""

    def value(x: torch.Tensor) -> torch.Tensor:
        pts = x[:, 0, :d]
        which = x[:, 0, d].round().long()
        # the paths broadcast over their leading sample axis: lay the points out as
        # (n_paths, m, d), path q's points in row q (padded with zeros, whose values are
        # discarded), so each point is evaluated on its own path only.
        counts = torch.bincount(which, minlength=n_paths)
        first = torch.cumsum(counts, 0) - counts
        order = torch.argsort(which, stable=True)
        slot = torch.empty_like(which)
        slot[order] = torch.arange(len(which)) - first[which[order]]
        m = int(counts.max())
        grid = pts.new_zeros(n_paths, m, d).index_put((which, slot), pts)
        return paths(grid)[which, slot]

    return value


def _options(options: dict | None, cand_vals: torch.Tensor, b: torch.Tensor) -> dict:
    if options is not None:
        return dict(options)
    scale = float(cand_vals.abs().max()) / float((b[1] - b[0]).min())
    return {**DEFAULT_OPTIONS, "pgtol": PGTOL_REL * max(scale, 1e-12)}


def maximize_paths(
    paths,
    candidates: torch.Tensor,
    bounds: torch.Tensor,
    *,
    n_starts: int = 4,
    options: dict | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Maximise each of ``Q`` sample paths over the box ``bounds``.

    Args:
        paths: a batch of sample paths, ``paths(X (Q, m, d)) -> (Q, m)`` with path ``q`` on
            ``X[q]`` (what ``draw_matheron_paths(model, sample_shape=(Q,))`` returns). Draw
            them under ``torch.no_grad()``: otherwise every evaluation also back-propagates
            into the model's hyperparameters (measured: 9-19x slower).
        candidates: ``(n, d)`` points in the box; each path starts from its best ones.
        bounds: ``(2, d)`` box, low < high.
        n_starts: starts per path (at most ``n``).
        options: L-BFGS-B options for ``gen_candidates_scipy`` (default
            :data:`DEFAULT_OPTIONS` with the scaled ``pgtol``).

    Returns:
        ``(x, value)``: ``x`` ``(Q, d)`` the maximisers found, ``value`` ``(Q,)`` the paths'
        values there; ``value[q] >= max_i paths(candidates)[q, i]``.
    """
    if isinstance(n_starts, bool) or not isinstance(n_starts, int) or n_starts < 1:
        raise ValueError(f"n_starts must be an int >= 1, got {n_starts!r}")
    cands = torch.as_tensor(candidates, dtype=torch.float64)
    b = torch.as_tensor(bounds, dtype=torch.float64)
    if cands.ndim != 2 or cands.shape[0] == 0 or b.shape != (2, cands.shape[1]):
        raise ValueError(
            f"candidates (n, d) and bounds (2, d) mismatch: {tuple(cands.shape)}, {tuple(b.shape)}"
        )
    if not (b[0] < b[1]).all():
        raise ValueError("bounds need low < high in every dimension")
    if ((cands < b[0]) | (cands > b[1])).any():
        raise ValueError("candidates must lie inside the bounds")
    d = cands.shape[1]
    with torch.no_grad():
        cand_vals = paths(cands)  # (Q, n)
    n_paths = cand_vals.shape[0]
    k = min(n_starts, cands.shape[0])
    top_vals, top_idx = cand_vals.topk(k, dim=-1)  # (Q, k), best first
    tag = torch.arange(n_paths, dtype=torch.float64).repeat_interleave(k)  # (Q k,)
    init = torch.cat([cands[top_idx.reshape(-1)], tag.unsqueeze(-1)], -1).unsqueeze(1)
    lower = torch.cat([b[0], torch.zeros(1, dtype=torch.float64)])
    upper = torch.cat([b[1], torch.full((1,), float(n_paths - 1), dtype=torch.float64)])
    x_opt, _ = gen_candidates_scipy(
        init,
        _on_own_path(paths, n_paths, d),
        lower_bounds=lower,
        upper_bounds=upper,
        options=_options(options, cand_vals, b),
        fixed_features={d: tag},
    )
    x_opt = x_opt[:, 0, :d].clamp(b[0], b[1]).reshape(n_paths, k, d)
    with torch.no_grad():
        v_opt = paths(x_opt)  # (Q, k): path q on its own starts
    best_v, best_j = v_opt.max(-1)
    x_best = x_opt[torch.arange(n_paths), best_j]
    # guard: never return less than the best candidate (the optimiser's contract, enforced)
    worse = best_v < top_vals[:, 0]
    x_best[worse] = cands[top_idx[worse, 0]]
    best_v = torch.where(worse, top_vals[:, 0], best_v)
    return x_best.detach(), best_v.detach()
