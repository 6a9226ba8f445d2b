"""The breast-cancer experiment: data, exact optimum, oracle, runners, paired statistic."""

import json
import math

import pytest
import torch

from heavytail_sgd.experiments import breast_cancer as bc
from heavytail_sgd.experiments import convex_rates as cr
from heavytail_sgd.noise import StudentT
from heavytail_sgd.optim import clip_by_norm, normalize


@pytest.fixture(scope="module")
def prob():
    return bc.make_problem(*bc.load_data())


def test_data_are_standardised_with_pm1_labels():
    a, y = bc.load_data(whiten=False)
    assert a.shape == (569, 30) and a.dtype == torch.float64
    torch.testing.assert_close(a.mean(0), torch.zeros(30, dtype=torch.float64), atol=1e-12, rtol=0)
    torch.testing.assert_close(
        (a * a).mean(0), torch.ones(30, dtype=torch.float64), atol=1e-12, rtol=0
    )
    assert set(y.tolist()) == {-1.0, 1.0}


def test_whitening_is_a_change_of_variables_with_identity_covariance():
    a, y = bc.load_data()
    s, y2 = bc.load_data(whiten=False)
    assert torch.equal(y, y2)
    eye = torch.eye(30, dtype=torch.float64)
    torch.testing.assert_close(a.T @ a / len(a), eye, atol=1e-10, rtol=0)
    # a = s M for a symmetric M (ZCA), recovered by least squares: same column space, same model
    m = torch.linalg.lstsq(s, a).solution
    torch.testing.assert_close(s @ m, a, atol=1e-9, rtol=0)
    torch.testing.assert_close(m, m.T, atol=1e-8, rtol=1e-8)
    # the same optimum value on both tables (predictions are invariant)
    f_white = float(bc.make_problem(a, y)["f_star"])
    f_std = float(bc.make_problem(s, y)["f_star"])
    assert f_white == pytest.approx(f_std, abs=1e-11)


def test_optimum_is_exact_and_beats_scipy_lbfgs(prob):
    from scipy.optimize import minimize

    # certified by strong convexity at x*: F(x*) - F* <= ||g||^2 / (2 lambda_min(H))
    gnorm = float(cr.logistic_grad(prob, prob["x_star"]).norm())
    assert gnorm**2 / (2 * float(prob["hess_eig"][0])) < 1e-12
    res = minimize(
        lambda z: float(cr.logistic_loss(prob, torch.from_numpy(z))),
        x0=prob["x_star"].numpy() + 0.1,
        jac=lambda z: cr.logistic_grad(prob, torch.from_numpy(z)).numpy(),
        method="L-BFGS-B",
        options={"gtol": 1e-12, "ftol": 0.0, "maxiter": 50_000},
    )
    assert float(prob["f_star"]) <= res.fun + 1e-14
    # the start is at distance 1; the gap there is positive
    assert float((prob["x1"] - prob["x_star"]).norm()) == pytest.approx(1.0, abs=1e-12)
    assert float(cr.logistic_loss(prob, prob["x1"]) - prob["f_star"]) > 0


def test_smoothness_constant_bounds_the_hessian_everywhere(prob):
    g = torch.Generator().manual_seed(7)
    a, y = prob["A"], prob["y"]
    for _ in range(5):
        x = 3.0 * torch.randn(30, generator=g, dtype=torch.float64)
        top = float(torch.linalg.eigvalsh(cr._logistic_hessian(a, y, x))[-1])
        assert top <= float(prob["L"]) * (1 + 1e-12)
    # attained in the limit x -> 0 (sigmoid' = 1/4 there); whitened, exactly 1/4
    top0 = float(torch.linalg.eigvalsh(cr._logistic_hessian(a, y, torch.zeros(30).double()))[-1])
    assert top0 == pytest.approx(float(prob["L"]), rel=1e-12)
    assert float(prob["L"]) == pytest.approx(0.25, rel=1e-9)


def test_separable_data_are_rejected():
    a, y = bc.load_data()
    with_intercept = torch.cat([a, torch.ones(len(a), 1, dtype=a.dtype)], 1)
    with pytest.raises(ValueError, match="separable"):
        bc.make_problem(with_intercept, y)


def test_oracle_adds_the_scaled_noise_to_each_rows_exact_gradient(prob):
    noise = StudentT(2.5)
    x = prob["x1"] + 0.1 * torch.randn(5, 30, generator=torch.Generator().manual_seed(1)).double()
    oracle = bc.make_oracle(prob, noise, 0.3, seed=11)
    got = oracle.grad(x)
    xi = noise.sample((5, 30), generator=torch.Generator().manual_seed(11), dtype=torch.float64)
    xr = x.clone().requires_grad_(True)
    (exact,) = torch.autograd.grad(cr.logistic_loss(prob, xr).sum(), xr)
    torch.testing.assert_close(got, exact + 0.3 * xi)


def _reference(prob, seed, T, runs, eta, direction):
    """Plain loops with a hand-kept average (float64)."""
    noise = cr.noise_for(1.5)
    g = torch.Generator().manual_seed(seed)
    x = prob["x1"].expand(runs, -1).clone()
    total = torch.zeros_like(x)
    for _ in range(T):
        total += x
        grad = cr.logistic_grad(prob, x)
        grad = grad + 0.05 * noise.sample(grad.shape, generator=g, dtype=grad.dtype)
        x = x - eta * direction(grad)
    return cr.logistic_loss(prob, total / T) - prob["f_star"]


@pytest.mark.parametrize("method", ["sgd", "clipped", "normalized"])
def test_runners_match_plain_loops(prob, method):
    T, runs, eta, level = 37, 3, 0.11, 0.7
    oracle = bc.make_oracle(prob, cr.noise_for(1.5), 0.05, seed=5)
    got = bc.run_method(prob, oracle, T, runs, eta, method, level)
    direction = {
        "sgd": lambda g: g,
        "clipped": lambda g: clip_by_norm(g, level, dim=-1),
        "normalized": lambda g: normalize(g, dim=-1),
    }[method]
    torch.testing.assert_close(got, _reference(prob, 5, T, runs, eta, direction))
    with pytest.raises(ValueError, match="unknown method"):
        bc.run_method(prob, oracle, T, runs, eta, "adam")


def test_common_random_numbers_make_inactive_clipping_equal_sgd(prob):
    noise = cr.noise_for(1.8)
    a = bc.run_method(prob, bc.make_oracle(prob, noise, 0.01, 3), 29, 4, 0.1)
    b = bc.run_method(prob, bc.make_oracle(prob, noise, 0.01, 3), 29, 4, 0.1, "clipped", 1e300)
    torch.testing.assert_close(a, b)


def test_paired_log_ratio_recovers_a_known_factor():
    g = torch.Generator().manual_seed(2)
    b = torch.exp(torch.randn(400, generator=g, dtype=torch.float64))
    a = b * math.exp(-0.3) * torch.exp(0.1 * torch.randn(400, generator=g, dtype=torch.float64))
    m, lo, hi = bc.paired_log_ratio(a, b, 500, g)
    assert lo < -0.3 < hi and lo < m < hi and hi - lo < 0.05


def test_horizon_rule_takes_the_first_candidate_whose_control_passes(prob):
    """Brute force: rerun the noise-free control at every candidate up to the chosen one."""
    p, cands, n, tol = 1.5, (11, 23, 47, 89), 3, 0.02
    t_min, gaps, slope, ok = bc.choose_t_min(prob, p, cands, n, tol)
    pred, L = (1 - p) / p, float(prob["L"])

    def control(t):
        hs = [round(t * 10 ** (j / 2)) for j in range(n)]
        sigma = 2 * L / t ** (1 / p)  # the cap 1/(2L) binds exactly at the smallest horizon
        etas = [min(1 / (2 * L), 1 / (sigma * T ** (1 / p))) for T in hs]
        assert etas[0] == pytest.approx(1 / (2 * L))
        runs = [bc.run_method(prob, None, T, 1, e)[0] for T, e in zip(hs, etas, strict=True)]
        g = torch.stack(runs)
        return g, float(cr.fit_slope(torch.tensor(hs, dtype=torch.float64), g))

    for t in cands[: cands.index(t_min)]:
        assert abs(control(t)[1] - pred) > tol
    g, s = control(t_min)
    torch.testing.assert_close(gaps, g)
    assert s == pytest.approx(slope) and ok == (abs(s - pred) <= tol)
    # no candidate passes an impossible tolerance: the last one comes back, flagged
    t_last, _, _, ok_last = bc.choose_t_min(prob, p, cands[:2], n, 1e-9)
    assert t_last == cands[1] and not ok_last
    with pytest.raises(ValueError, match="at least one candidate"):
        bc.choose_t_min(prob, p, ())
    assert bc.horizons_from(100) == [100, 316, 1000, 3162, 10000]


def test_quick_path_runs_end_to_end_at_a_tiny_size(tmp_path, monkeypatch):
    monkeypatch.setattr(bc, "_sizes", lambda ctx: ((5, 9), 8, 20))
    monkeypatch.setattr(bc, "N_HORIZONS", 3)
    assert bc.main(["--quick", "--out", str(tmp_path)]) == 0
    res = json.loads((tmp_path / "result.json").read_text())
    assert len(res["table"]) == len(bc.P_VALUES) * 4
    inside = [r["prediction_in_verdict_ci"] for r in res["table"] if "verdict_ci" in r]
    controls = [r["control_within_tol"] for r in res["table"] if "control_within_tol" in r]
    assert len(inside) == len(controls) == len(bc.P_VALUES)
    assert res["holds"] == (all(inside) and all(controls))
    assert sum("log_ratio_sgd_vs_this" in r for r in res["table"]) == 2 * len(bc.P_VALUES)
    assert all((tmp_path / png).is_file() for png in res["plots"])
