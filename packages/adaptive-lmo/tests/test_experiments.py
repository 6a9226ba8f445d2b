"""Each experiment's quick path on a tiny config, and the registration."""

from __future__ import annotations

import math
import tomllib
from pathlib import Path

import pytest
import torch

from adaptive_lmo.experiments import _common
from adaptive_lmo.experiments import teacher_student as ts
from shared_core.experiment import RunContext

TINY_GRIDS = {
    "AdamW": [3e-3],
    "Muon": [0.05],
    "SGD": [0.05],
    "AdaptiveLMO": [0.05],
    _common.SAME_BATCH: [0.05],
    _common.INPUT_CURV: [0.05],
}
# a 1-block LM on the Markov corpus, a few steps: the lm scenario's whole path in seconds
TINY_LM = {
    "V": 6,
    "T": 5,
    "n": 64,
    "d": 8,
    "layers": 1,
    "steps": 6,
    "batch": 8,
    "seeds": 2,
    "grid": 1,
}


def test_teacher_student_tiny(tmp_path, monkeypatch):
    grid = {k: [0.05] for k in ts.grids(2)}
    grid["SGD"], grid["Adam"] = [0.3], [0.01]
    monkeypatch.setattr(ts, "grids", lambda k: grid)
    monkeypatch.setattr(ts, "alone_grid", lambda k: [0.05])
    cfg = {
        **ts.config(True),
        **{"na": 7, "nb": 5, "m": 6, "n": 96, "steps": 12, "batch": 16, "seeds": 2, "grid": 1},
        "alone_exponents": [0.0, 1.0],
        "alone_seeds": 2,
    }
    res = ts.run(RunContext(tmp_path, True, False, 0), cfg)
    m = res.metrics
    assert isinstance(res.holds, bool)
    assert (tmp_path / "exponents.png").is_file() and (tmp_path / "loss.png").is_file()
    assert [r["optimizer"] for r in res.table] == list(grid)
    assert all(math.isfinite(m[f"test_mse_mean[{o}]"]) for o in grid)
    assert m["alone_best_a[A]"] in (0.0, 1.0) and m["alone_best_a[B]"] in (0.0, 1.0)
    assert m["alone_best_a_gap"] == abs(m["alone_best_a[A]"] - m["alone_best_a[B]"])
    # the precondition is the stated paired rule applied to the reported corner intervals
    ca, cb = m["alone_corner_log_ratio[A: a=0 vs a=1]"], m["alone_corner_log_ratio[B: a=1 vs a=0]"]
    assert ca[1] <= ca[0] <= ca[2] and cb[1] <= cb[0] <= cb[2]
    assert m["meaningful"] == (ca[1] > 0 and cb[1] > 0)
    # the verdict is the stated rule applied to the reported intervals
    his = [m[f"paired_log_ratio[{b}]"][2] for b in ts.BASELINES]
    assert res.holds == (m["meaningful"] and all(h < 0 for h in his))
    for k, v in m.items():
        if k.startswith(("final_exponent", "alone_auto_exponent")):
            assert 0.0 <= v <= 1.0


def test_teacher_student_needs_both_corners(tmp_path):
    cfg = {
        **ts.config(True),
        **{"na": 4, "nb": 3, "m": 2, "n": 32, "steps": 2, "batch": 8, "seeds": 2, "grid": 1},
        "alone_exponents": [0.0, 0.5],
        "alone_seeds": 2,
    }
    with pytest.raises(ValueError, match="must contain 0 and 1"):
        ts.run(RunContext(tmp_path, True, False, 0), cfg)


def _one_step_best_a(X, R, W, grid):
    """Grid-best exponent of the exact best-step decrease of 0.5 mean||X W^T - R||^2."""
    from adaptive_lmo.fractional import fractional_update

    def loss(W_):
        return float(0.5 * ((X @ W_.T - R) ** 2).sum() / X.shape[0])

    G = (X @ W.T - R).T @ X / X.shape[0]
    dec = []
    for a in grid:
        D = fractional_update(G, float(a), scale="none")
        l0, l1, l2 = loss(W), loss(W - D), loss(W - 2 * D)
        c = (l2 - 2 * l1 + l0) / 2
        b = l1 - l0 - c
        dec.append(b * b / (4 * c))
    return float(grid[max(range(len(grid)), key=dec.__getitem__)]), G


@pytest.mark.parametrize("seed", [0, 3])
def test_teacher_student_layers_want_different_geometries_at_the_start(seed):
    """The scenario's premise, checked on the data with the exact one-step decrease (float64):
    layer A (whitened inputs) is best served by a near 1 and layer B (power-law inputs,
    equal-share teacher) by a near 0, and the criterion, fed the same statistics, agrees."""
    from adaptive_lmo.criterion import choose_exponent, curvature_along

    cfg = {**ts.config(True), "na": 23, "nb": 13, "m": 11, "n": 3000}
    pb = ts.make_problem(cfg, seed)
    X, Y = (t.double() for t in pb["train"])
    XA, XB = X[:, : cfg["na"]], X[:, cfg["na"] :]
    student = ts._make_student(cfg, seed).double()
    grid = torch.linspace(0, 1, 41, dtype=torch.float64)
    picks = {}
    for name, Xl, Xo, To, W in (
        ("A", XA, XB, pb["TB"], student.A.weight.detach()),
        ("B", XB, XA, pb["TA"], student.B.weight.detach()),
    ):
        R = Y - Xo @ To.double().T  # the other layer sits at the teacher
        best, G = _one_step_best_a(Xl, R, W, grid)
        _, S, Vh = torch.linalg.svd(G, full_matrices=False)
        crit = choose_exponent(S, curvature_along(Vh, Xl))
        picks[name] = (best, crit)
        assert abs(crit - best) <= 0.05, (name, best, crit)
    assert picks["A"][0] >= 0.75 and picks["B"][0] <= 0.25, picks


def test_teacher_student_problem_is_seeded_and_shaped():
    cfg = {**ts.config(True), "na": 5, "nb": 4, "m": 3, "n": 40}
    a, b = ts.make_problem(cfg, 1), ts.make_problem(cfg, 1)
    assert torch.equal(a["test"][0], b["test"][0]) and torch.equal(a["TB"], b["TB"])
    assert a["train"][0].shape == (40, 9) and a["train"][1].shape == (40, 3)
    assert torch.linalg.matrix_rank(a["TA"]) == 1
    model = ts.TwoTower(5, 4, 3)
    with torch.no_grad():
        model.A.weight.copy_(a["TA"])
        model.B.weight.copy_(a["TB"])
        x, y = a["val"]
        # at the teacher only the label noise is left
        resid = float(((model(x) - y) ** 2).mean())
    assert abs(resid - cfg["noise"] ** 2) < 0.5 * cfg["noise"] ** 2


def test_image_tiny(tmp_path, monkeypatch):
    pytest.importorskip("sklearn")
    from adaptive_lmo.experiments import image

    monkeypatch.setattr(image, "grids", lambda k: TINY_GRIDS)
    cfg = {"h": 8, "steps": 10, "batch": 32, "seeds": 2, "grid": 1}
    res = image.run(RunContext(tmp_path, True, False, 0), cfg)
    assert 0.0 <= res.metrics["test_acc_mean[AdaptiveLMO]"] <= 1.0
    assert isinstance(res.holds, bool)


def test_image_tiny_with_a0_and_spectral_rows(tmp_path, monkeypatch):
    pytest.importorskip("sklearn")
    from adaptive_lmo.experiments import image

    grids = {**TINY_GRIDS, image.A0: [0.05], _common.SPECTRAL: [0.05]}
    monkeypatch.setattr(image, "grids", lambda k: grids)
    cfg = {"h": 8, "steps": 12, "batch": 32, "seeds": 2, "grid": 1}
    res = image.run(RunContext(tmp_path, True, False, 0), cfg)
    m = res.metrics
    assert [r["optimizer"] for r in res.table] == list(grids)
    # the a = 0 row really ran at the fixed exponent 0; the paired entries are reported
    assert m["a0_final_exponent[0.weight]"] == 0.0 and m["a0_final_exponent[2.weight]"] == 0.0
    for key in ("auto_vs_a0", "polar_vs_spectral"):
        lo, hi = m[f"{key}_log_ratio_ci"]
        assert lo <= m[f"{key}_log_ratio_mean"] <= hi
    assert "fixed a = 0" in res.summary and 'scale="spectral"' in res.summary


def test_sweep_in_worker_processes_gives_the_same_runs(tmp_path, monkeypatch):
    """Two forked workers and one process give the same numbers (each job seeds itself), with
    an edge extension in the second phase; both sides single-threaded, so equal to the bit."""
    from adaptive_lmo.experiments import lm

    grids = {**TINY_GRIDS, "AdamW": [1e-3, 3e-3], "AdaptiveLMO": [0.02, 0.05], lm.A0: [0.05]}
    monkeypatch.setattr(lm, "grids", lambda k: grids)
    cfg = {**TINY_LM, "grid": 2, "extend": 1}
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        out = {}
        for w in (1, 2):
            res = lm.run(RunContext(tmp_path / str(w), True, False, 0), {**cfg, "workers": w})
            out[w] = {k: v for k, v in res.metrics.items() if k != "config"}
    finally:
        torch.set_num_threads(threads)
    assert any(len(g) == 3 for g in out[1]["lr_grids"].values())  # an edge point was added
    assert out[2] == out[1]


def test_default_workers_reads_the_environment(monkeypatch):
    monkeypatch.setenv("FRONTIER_OPT_WORKERS", "3")
    assert _common.default_workers() == 3
    for bad in ("0", "-1", "two"):
        monkeypatch.setenv("FRONTIER_OPT_WORKERS", bad)
        with pytest.raises(ValueError, match="FRONTIER_OPT_WORKERS"):
            _common.default_workers()
    monkeypatch.delenv("FRONTIER_OPT_WORKERS")
    assert 1 <= _common.default_workers() <= 8


def test_lm_tiny(tmp_path, monkeypatch):
    from adaptive_lmo.experiments import lm

    monkeypatch.setattr(lm, "grids", lambda k: {**TINY_GRIDS, lm.A0: [0.05]})
    res = lm.run(RunContext(tmp_path, True, False, 0), TINY_LM)
    assert all(math.isfinite(res.metrics[f"test_loss_mean[{o}]"]) for o in _common.OPTIMIZERS)
    assert isinstance(res.holds, bool) and (tmp_path / "exponents.png").is_file()
    # every matrix of the block, attention included, is on the criterion
    assert {k for k in res.metrics if k.startswith("final_exponent[")} == {
        f"final_exponent[blocks.0.{m}.weight]"
        for m in ("attn.q", "attn.k", "attn.v", "attn.out", "mlp_in", "mlp_out")
    }
    for key in ("auto_vs_a0_log_ratio_per_seed", "kfac_vs_input_log_ratio_per_seed"):
        per_seed = res.metrics[key]
        assert len(per_seed) == 2 and all(math.isfinite(v) for v in per_seed)


def test_lm_corpus_is_markov_and_offline():
    from adaptive_lmo.experiments import lm

    d = lm.make_corpus(5, 7, 20, 0)
    x, y = d["train"]
    assert x.shape == y.shape == (20, 7)
    assert torch.equal(x[:, 1:], y[:, :-1])  # targets are the inputs shifted by one
    assert torch.equal(lm.make_corpus(5, 7, 20, 0)["test"][0], d["test"][0])


def test_lm_text_corpus_decodes_to_the_bundled_text():
    from pydoc_data.topics import topics

    from adaptive_lmo.experiments import lm

    text = "\n".join(topics[k] for k in sorted(topics))
    vocab = sorted(set(text))
    d, V = lm.make_text_corpus(11, 37, 3)
    assert len(vocab) == V
    n = len(text)
    for name, m, (lo, hi) in (
        ("train", 37, (0, int(0.8 * n))),
        ("val", 9, (int(0.8 * n), int(0.9 * n))),
        ("test", 9, (int(0.9 * n), n)),
    ):
        x, y = d[name]
        assert x.shape == y.shape == (m, 11)
        assert torch.equal(x[:, 1:], y[:, :-1])
        for row_x, row_y in zip(x.tolist(), y.tolist(), strict=True):
            window = "".join(vocab[i] for i in row_x + row_y[-1:])
            # each window lies inside its own split of the text (splits hold different topics)
            assert window in text[lo:hi]
    again, _ = lm.make_text_corpus(11, 37, 3)
    assert torch.equal(again["test"][0], d["test"][0])


def test_verdict_is_computed_from_the_numbers():
    def fake(means, higher):
        return _common.SweepResult({o: {} for o in means}, {}, means, {}, higher)

    ok, best, _ = _common.verdict(fake({"Muon": 1.0, "AdamW": 2.0, "AdaptiveLMO": 1.01}, False))
    assert ok and best == "Muon"
    ok, _, _ = _common.verdict(fake({"Muon": 1.0, "AdamW": 2.0, "AdaptiveLMO": 1.05}, False))
    assert not ok
    ok, best, _ = _common.verdict(fake({"Muon": 0.9, "AdamW": 0.95, "AdaptiveLMO": 0.94}, True))
    assert not ok and best == "AdamW"


def test_registered_as_headline_and_extra_experiments():
    py = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())
    eps = py["project"]["entry-points"]["frontier_opt.experiments"]
    assert eps["adaptive-lmo.teacher-student"] == "adaptive_lmo.experiments.teacher_student"
    assert eps["adaptive-lmo.image"] == "adaptive_lmo.experiments.image"
    # lm's quick run (~97 s) is over the main job's 90 s per experiment: extra group
    extra = py["project"]["entry-points"]["frontier_opt.experiments.extra"]
    assert extra["adaptive-lmo.lm"] == "adaptive_lmo.experiments.lm"


def test_t_quantile_against_closed_forms():
    from statistics import NormalDist

    for q in (0.6, 0.9, 0.975, 0.995):
        # df = 1 is the Cauchy law, df = 2 has a closed form, large df tends to the normal
        assert _common.t_quantile(q, 1) == pytest.approx(math.tan(math.pi * (q - 0.5)), rel=1e-6)
        assert _common.t_quantile(q, 2) == pytest.approx(
            (2 * q - 1) / math.sqrt(2 * q * (1 - q)), rel=1e-6
        )
        assert _common.t_quantile(q, 4000) == pytest.approx(NormalDist().inv_cdf(q), rel=2e-3)
    with pytest.raises(ValueError, match=r"need 0\.5 < q < 1"):
        _common.t_quantile(0.4, 3)


def test_t_quantile_df4_closed_form():
    # df = 4: t = 2 sqrt(c - 1), c = cos(arccos(sqrt(a)) / 3) / sqrt(a), a = 4 q (1 - q)
    for q in (0.55, 0.8, 0.975, 0.999):
        a = 4 * q * (1 - q)
        c = math.cos(math.acos(math.sqrt(a)) / 3) / math.sqrt(a)
        assert _common.t_quantile(q, 4) == pytest.approx(2 * math.sqrt(c - 1), rel=1e-9)


def _fake_sweep(tests_by_opt):
    runs = {
        o: {0.1: [_common.RunOutput(v, v, []) for v in vals]} for o, vals in tests_by_opt.items()
    }
    best = {o: 0.1 for o in tests_by_opt}
    return _common.SweepResult(runs, best, {}, {}, False)


def test_paired_log_ratio_is_the_paired_t_interval():
    g = torch.Generator().manual_seed(5)
    base = (1.0 + torch.rand(3, generator=g, dtype=torch.float64)).tolist()
    noise = torch.randn(3, generator=g).tolist()
    cand = [b * math.exp(-0.02 + 0.01 * e) for b, e in zip(base, noise, strict=True)]
    res = _fake_sweep({"X": cand, "Y": base})
    c = _common.paired_log_ratio(res, "X", "Y")
    d = [math.log(x / y) for x, y in zip(cand, base, strict=True)]
    mean = sum(d) / 3
    sd = math.sqrt(sum((v - mean) ** 2 for v in d) / 2)
    half = 4.302652729749464 * sd / math.sqrt(3)  # t_{0.975, 2} = 0.95 / sqrt(2 * 0.975 * 0.025)
    assert c.per_seed == pytest.approx(d, rel=1e-12)
    assert (c.mean, c.lo, c.hi) == pytest.approx((mean, mean - half, mean + half), rel=1e-6)
    assert c.significantly_lower == (mean + half < 0)


def test_paired_log_ratio_divergence_and_mismatch():
    res = _fake_sweep({"X": [1.0, math.nan], "Y": [1.1, 1.2], "Z": [1.0]})
    assert not _common.paired_log_ratio(res, "X", "Y").significantly_lower
    # the baseline diverged on one seed, but the candidate is higher on the other: not lower
    c = _common.paired_log_ratio(res, "Y", "X")
    assert c.per_seed[1] == -math.inf and c.hi == pytest.approx(math.log(1.1))
    assert not c.significantly_lower
    flipped = _fake_sweep({"X": [1.0, 1.0], "Y": [1.2, math.inf]})
    assert _common.paired_log_ratio(flipped, "X", "Y").significantly_lower
    with pytest.raises(ValueError, match="same number"):
        _common.paired_log_ratio(res, "X", "Z")


def test_grid_edges():
    res = _fake_sweep({"X": [1.0], "Y": [1.0], "Z": [1.0]})
    grids = {"X": [0.1, 0.3], "Y": [0.01, 0.1, 1.0], "Z": [0.1]}
    res.best_lr["Y"] = 0.1
    assert _common.grid_edges(res, grids) == ["X (bottom of its grid)"]


def _two_tower_pair(seed):
    torch.manual_seed(seed)
    m1 = ts.TwoTower(7, 5, 6).double()
    m2 = ts.TwoTower(7, 5, 6).double()
    m2.load_state_dict(m1.state_dict())
    g = torch.Generator().manual_seed(seed + 1)
    x = torch.randn(4, 19, 12, generator=g, dtype=torch.float64)
    y = torch.randn(4, 19, 6, generator=g, dtype=torch.float64)
    return m1, m2, x, y


def test_build_optimizer_per_layer_exponents_match_separate_fixed_optimizers():
    from adaptive_lmo import AdaptiveLMO

    m1, m2, x, y = _two_tower_pair(2)
    opt = _common.build_optimizer(
        "AdaptiveLMO", m1, 0.07, head=None, exponents={"A.weight": 1.0, "B.weight": 0.0}
    )
    refs = [
        AdaptiveLMO([m2.A.weight], lr=0.07, momentum=0.95, exponent=1.0, adjust_lr_fn="original"),
        AdaptiveLMO([m2.B.weight], lr=0.07, momentum=0.95, exponent=0.0, adjust_lr_fn="original"),
    ]
    for t in range(4):
        for model, opts in ((m1, [opt]), (m2, refs)):
            for o in opts:
                o.zero_grad()
            torch.nn.functional.mse_loss(model(x[t]), y[t]).backward()
            for o in opts:
                o.step()
    for p, q in zip(m1.parameters(), m2.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError, match="unknown matrix parameters"):
        _common.build_optimizer("AdaptiveLMO", m1, 0.1, head=None, exponents={"C.weight": 1.0})


def test_build_optimizer_muadam_is_the_polar_factor_of_adams_direction():
    m1, m2, x, y = _two_tower_pair(4)
    lr, b1, b2, eps = 0.05, 0.9, 0.999, 1e-8
    opt = _common.build_optimizer("MuAdam", m1, lr, head=None)
    state = {n: (torch.zeros_like(p), torch.zeros_like(p)) for n, p in m2.named_parameters()}
    for t in range(1, 4):
        opt.zero_grad()
        torch.nn.functional.mse_loss(m1(x[t]), y[t]).backward()
        opt.step()
        m2.zero_grad()
        torch.nn.functional.mse_loss(m2(x[t]), y[t]).backward()
        with torch.no_grad():
            for n, p in m2.named_parameters():
                m, v = state[n]
                m.mul_(b1).add_(p.grad, alpha=1 - b1)
                v.mul_(b2).add_(p.grad**2, alpha=1 - b2)
                P = (m / (1 - b1**t)) / ((v / (1 - b2**t)).sqrt() + eps)
                U, _, Vh = torch.linalg.svd(P, full_matrices=False)
                shape_factor = math.sqrt(max(1.0, p.shape[0] / p.shape[1]))
                p.sub_(lr * shape_factor * (U @ Vh))
    for p, q in zip(m1.parameters(), m2.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=1e-6, atol=1e-9)
    with pytest.raises(ValueError, match="unknown optimizer"):
        _common.build_optimizer("Lion", m1, 0.1)


def test_sketch_bias_replays_the_optimizer_and_population_gives_one():
    cfg = {**ts.config(True), "na": 9, "nb": 5, "m": 7, "n": 200, "steps": 41, "batch": 23}
    out = ts.sketch_bias(cfg, lr=0.1, seeds=2, start=10, every=10, stats="same_batch")
    assert len(out["same"]) == 2 * 4
    # criterion steps are 0, 10, 20, ...: the replay must give the optimizer's own choice (the
    # optimizer's SVD and sketch are float32, the replay's float64: float32 round-off only)
    assert out["same"] == pytest.approx(out["optimizer"], abs=1e-5)
    assert out["same"] != pytest.approx(out["independent"], abs=1e-3)
    # flat curvature (population covariance = I) puts the optimum exactly at a = 1
    assert out["population"] == pytest.approx([1.0] * 8)
    assert all(0.0 <= v <= 1.0 for k in out for v in out[k])


def test_sketch_bias_next_batch_replays_the_optimizer():
    cfg = {**ts.config(True), "na": 9, "nb": 5, "m": 7, "n": 200, "steps": 42, "batch": 23}
    out = ts.sketch_bias(cfg, lr=0.1, seeds=2, start=10, every=10, stats="next_batch")
    # the replay pairs step t's direction with step t + 1's minibatch, as the optimizer does
    assert len(out["next"]) == len(out["optimizer"]) == 2 * 4
    assert out["next"] == pytest.approx(out["optimizer"], abs=1e-5)
    assert out["next"] != pytest.approx(out["same"], abs=1e-3)
