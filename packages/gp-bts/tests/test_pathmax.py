"""Continuous maximisation of pathwise samples: the returned points are local maxima of the
sample paths (checked by finite differences and local search, not by the optimiser's own
gradients) and never worse than the candidate-set maximum."""

import math
import warnings

import pytest
import torch
from botorch.sampling.pathwise import draw_matheron_paths

import gp_bts
from gp_bts.models import build_model
from gp_bts.objectives import branin, hartmann6
from gp_bts.pathmax import maximize_paths
from gp_bts.policy import thompson_batch_continuous

warnings.filterwarnings("ignore", message=".*not p.d.*")
EPS = torch.finfo(torch.float64).eps


def _paths(obj, n_train, n_paths, seed):
    """A fitted BoTorch GP on random points of the objective's box and Q sample paths."""
    g = torch.Generator().manual_seed(seed)
    b = obj.bounds
    d = b.shape[1]
    x = b[0] + (b[1] - b[0]) * torch.rand(n_train, d, generator=g, dtype=torch.float64)
    model = build_model(x, obj(x).unsqueeze(-1), bounds=b, noise_var=0.0, kernel=None)
    torch.manual_seed(seed)
    with torch.no_grad():
        paths = draw_matheron_paths(model, sample_shape=torch.Size([n_paths]))
    cands = b[0] + (b[1] - b[0]) * torch.rand(97, d, generator=g, dtype=torch.float64)
    return model, paths, cands, b


def _on_path(paths, q, pts):
    """Values of path ``q`` at ``pts (m, d)``, by the paths' own broadcasting (no optimiser)."""
    n = paths(pts[:1]).shape[0]
    with torch.no_grad():
        return paths(pts.unsqueeze(0).expand(n, -1, -1))[q]


def _fd_gradient(f, x, lo, hi, h):
    """One-sided-at-the-bounds / central finite differences, and an error estimate.

    The error model: truncation estimated by the change between steps h and h/2 (Richardson),
    plus round-off eps |f| / h per difference.
    """
    d = x.shape[0]
    grads, errs = torch.zeros(d, dtype=torch.float64), torch.zeros(d, dtype=torch.float64)
    fx = float(f(x.unsqueeze(0))[0])
    for j in range(d):

        def diff(step, j=j):
            e = torch.zeros(d, dtype=torch.float64)
            e[j] = step
            if x[j] - step < lo[j]:  # at the lower face: forward difference
                return float(f((x + e).unsqueeze(0))[0] - fx) / step
            if x[j] + step > hi[j]:  # at the upper face: backward difference
                return float(fx - f((x - e).unsqueeze(0))[0]) / step
            return float(f((x + e).unsqueeze(0))[0] - f((x - e).unsqueeze(0))[0]) / (2 * step)

        g1, g2 = diff(h[j]), diff(h[j] / 2)
        grads[j] = g2
        errs[j] = abs(g1 - g2) + 8 * EPS * max(abs(fx), 1.0) / float(h[j])
    return grads, errs, fx


def _projected(g, x, lo, hi):
    """The gradient's part that points into the box (a local max needs it to vanish)."""
    at_lo, at_hi = x <= lo + 1e-12 * (hi - lo), x >= hi - 1e-12 * (hi - lo)
    pg = g.clone()
    pg[at_lo] = g[at_lo].clamp_min(0)  # at the lower face only an increasing slope matters
    pg[at_hi] = g[at_hi].clamp_max(0)
    return pg


@pytest.mark.parametrize(("task", "seed"), [("branin", 0), ("branin", 3), ("hartmann6", 1)])
def test_returned_points_are_local_maxima_of_their_paths(task, seed):
    obj = {"branin": branin, "hartmann6": hartmann6}[task]()
    d = obj.bounds.shape[1]
    _, paths, cands, b = _paths(obj, n_train=3 * d + 1, n_paths=3, seed=seed)
    with torch.no_grad():
        cand_vals = paths(cands)
    scale = float(cand_vals.abs().max())
    # stop on the projected gradient only (factr = 0): a tolerance the test can name
    pgtol = 1e-7 * scale
    x, v = maximize_paths(
        paths, cands, b, n_starts=3, options={"maxiter": 2000, "pgtol": pgtol, "factr": 0.0}
    )
    lo, hi = b[0], b[1]
    assert x.shape == (3, d) and ((x >= lo) & (x <= hi)).all()
    for q in range(3):
        f = lambda pts, q=q: _on_path(paths, q, pts)  # noqa: E731
        # the same value from a different batch layout: equal up to the rounding of a sum of
        # ~1e3 random-feature and data terms of size <= scale
        assert float(v[q]) == pytest.approx(float(f(x[q : q + 1])[0]), abs=1e3 * EPS * scale)
        # never worse than the best candidate (on this path)
        assert float(v[q]) >= float(cand_vals[q].max())
        # first order: the projected gradient, by finite differences, is within the
        # optimiser's stopping tolerance plus the finite-difference error
        g, err, fx = _fd_gradient(f, x[q], lo, hi, h=1e-4 * (hi - lo))
        pg = _projected(g, x[q], lo, hi)
        assert (pg.abs() <= pgtol + 4 * err).all(), (pg, err, pgtol)
        # second order: no point of a small neighbourhood (random directions, kept in the
        # box) is higher, beyond the first-order slack |pg| r and round-off
        gen = torch.Generator().manual_seed(100 + q)
        dirs = torch.randn(256, d, generator=gen, dtype=torch.float64)
        dirs = dirs / dirs.norm(dim=-1, keepdim=True)
        for r in (1e-3, 1e-2):
            pts = (x[q] + r * (hi - lo) * dirs).clamp(lo, hi)
            step = ((pts - x[q]) / (hi - lo)).norm(dim=-1).max()
            slack = (pgtol + 4 * err.max()) * float(step * (hi - lo).max()) * math.sqrt(d)
            slack += 16 * EPS * max(abs(fx), 1.0)
            assert float(f(pts).max()) <= fx + slack


def test_refinement_improves_on_the_candidates_in_6d():
    # in 6-d a 97-point set is sparse: the local maximum is strictly higher on every path
    obj = hartmann6()
    _, paths, cands, b = _paths(obj, n_train=12, n_paths=4, seed=2)
    _, v = maximize_paths(paths, cands, b)
    with torch.no_grad():
        best = paths(cands).max(-1).values
    assert (v > best).all()


def test_thompson_batch_continuous_and_run_on_a_box():
    obj = branin()
    model, _, cands, b = _paths(obj, n_train=6, n_paths=1, seed=4)
    torch.manual_seed(0)
    x, s = thompson_batch_continuous(model, cands, b, 3)
    ref = model.posterior(x).variance.squeeze(-1).sqrt()
    assert x.shape == (3, 2) and torch.allclose(s, ref.detach())
    tr = gp_bts.run(obj, batch_size=2, rounds=2, maximizer="lbfgs", n_candidates=64, seed=0)
    assert tr.X.shape == (3 + 4, 2) and (tr.simple_regret >= 0).all()
    inside = (tr.X - b[0]).min() >= 0 and (b[1] - tr.X).min() >= 0
    assert inside


def test_bad_inputs_are_refused():
    obj = branin()
    _, paths, cands, b = _paths(obj, n_train=5, n_paths=2, seed=0)
    with pytest.raises(ValueError, match="n_starts"):
        maximize_paths(paths, cands, b, n_starts=0)
    with pytest.raises(ValueError, match="low < high"):
        maximize_paths(paths, cands, b.flip(0))
    with pytest.raises(ValueError, match="inside the bounds"):
        maximize_paths(paths, cands + 100.0, b)
    with pytest.raises(ValueError, match="box domain"):
        gp_bts.run(gp_bts.tabular_svc(), batch_size=2, rounds=1, maximizer="lbfgs")
    with pytest.raises(ValueError, match="maximizer"):
        gp_bts.run(obj, batch_size=2, rounds=1, maximizer="newton")
