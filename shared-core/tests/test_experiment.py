"""Seeding, run folders, JSON results, plots, progress bars and the experiment CLI."""

import json
import math
import random

import numpy as np
import pytest
import torch

from shared_core.experiment import (
    ExperimentResult,
    line_plot,
    load_json,
    make_run_dir,
    progress,
    run_experiment,
    save_json,
    seed_everything,
    to_jsonable,
)


def _draw():
    # The legacy global NumPy state is what seed_everything promises to seed.
    return random.random(), float(np.random.rand()), float(torch.rand(()))  # noqa: NPY002


def test_seed_everything_reproduces_every_generator():
    seed_everything(7)
    a = _draw()
    seed_everything(7)
    b = _draw()
    seed_everything(8)
    c = _draw()
    assert a == b
    assert all(x != y for x, y in zip(a, c, strict=True))


@pytest.mark.parametrize("seed", [-1, 2**32, 1.5, "3", True])
def test_seed_rejects_nonsense(seed):
    with pytest.raises(ValueError, match="seed"):
        seed_everything(seed)


def test_run_dirs_are_fresh(tmp_path):
    a = make_run_dir(tmp_path, "exp")
    b = make_run_dir(tmp_path, "exp")
    assert a != b and a.is_dir() and b.is_dir() and a.parent == b.parent == tmp_path / "exp"


@pytest.mark.parametrize("name", ["", "a/b", ".."])
def test_run_dir_rejects_bad_names(tmp_path, name):
    with pytest.raises(ValueError, match="run name"):
        make_run_dir(tmp_path, name)


def test_json_round_trip_of_experiment_values(tmp_path):
    obj = {
        "t": torch.tensor([1.5, 2.5]),
        "a": np.arange(3),
        "s": np.float32(0.25),
        "nan": math.nan,
        "inf": -math.inf,
        "nested": [{"x": (1, 2)}],
    }
    back = load_json(save_json(tmp_path / "r" / "x.json", obj))
    assert back == {
        "t": [1.5, 2.5],
        "a": [0, 1, 2],
        "s": 0.25,
        "nan": "nan",
        "inf": "-inf",
        "nested": [{"x": [1, 2]}],
    }
    json.loads((tmp_path / "r" / "x.json").read_text())  # strict JSON, no bare NaN


def test_json_rejects_unknown_objects():
    with pytest.raises(ValueError, match="cannot store"):
        to_jsonable(object())


def test_load_json_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="no JSON"):
        load_json(tmp_path / "nope.json")


def test_line_plot_writes_a_png(tmp_path):
    path = line_plot(
        tmp_path / "p.png",
        {"a": ([1, 2, 3], [3.0, 2.0, 1.0]), "b": ([1, 2, 3], [1.0, 1.5, 1.7])},
        bands={"a": ([2.5, 1.5, 0.5], [3.5, 2.5, 1.5])},
        hlines={"target": 1.2},
        logy=True,
        title="t",
    )
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 1000


def test_line_plot_keeps_more_series_than_colours_apart(tmp_path, monkeypatch):
    plt = pytest.importorskip("matplotlib.pyplot")
    figs = []
    monkeypatch.setattr(plt, "close", figs.append)  # keep the figure to inspect it
    line_plot(tmp_path / "p.png", {f"s{i}": ([0, 1], [i, i + 1]) for i in range(23)})
    lines = figs[0].axes[0].get_lines()
    assert len(lines) == 23
    assert len({(ln.get_color(), ln.get_linestyle()) for ln in lines}) == 23


def test_coinciding_lines_keep_distinct_markers(tmp_path, monkeypatch):
    # two methods with the same curve (one hidden under the other) must still both be visible
    plt = pytest.importorskip("matplotlib.pyplot")
    figs = []
    monkeypatch.setattr(plt, "close", figs.append)
    xs = list(range(40))
    ys = [1.0 / (1 + x) for x in xs]
    line_plot(tmp_path / "p.png", {"a": (xs, ys), "b": (xs, ys)})
    a, b = figs[0].axes[0].get_lines()
    assert a.get_marker() != b.get_marker()
    assert a.get_markevery() != b.get_markevery()  # markers at shifted points


def test_line_plot_rejects_bad_series(tmp_path):
    with pytest.raises(ValueError, match="at least one"):
        line_plot(tmp_path / "p.png", {})
    with pytest.raises(ValueError, match="3 x values but 2"):
        line_plot(tmp_path / "p.png", {"a": ([1, 2, 3], [1, 2])})


def test_progress_counts_and_validates():
    assert list(progress(range(5), disable=True)) == [0, 1, 2, 3, 4]
    with pytest.raises(ValueError, match="total"):
        progress(range(3), total=-2)


def _toy_run(ctx):
    line_plot(ctx.path("curve.png"), {"x": ([0, 1], [ctx.seed, 2.0])})
    return ExperimentResult(
        title="toy",
        claim="two is bigger than one",
        summary=f"quick={ctx.quick}",
        metrics={"value": float(torch.rand(()))},
        holds=True,
        plots=["curve.png"],
    )


def test_run_experiment_writes_result_json(tmp_path, capsys):
    assert run_experiment(_toy_run, name="toy", argv=["--quick", "--out", str(tmp_path)]) == 0
    doc = load_json(tmp_path / "result.json")
    assert doc["name"] == "toy" and doc["mode"] == "quick" and doc["holds"] is True
    assert doc["plots"] == ["curve.png"] and doc["seconds"] >= 0
    assert "toy" in capsys.readouterr().out
    # The same seed gives the same numbers.
    run_experiment(_toy_run, name="toy", argv=["--quick", "--out", str(tmp_path / "again")])
    assert load_json(tmp_path / "again" / "result.json")["metrics"] == doc["metrics"]


def test_run_experiment_refuses_missing_plots_and_bad_returns(tmp_path):
    def no_plot(ctx):
        return ExperimentResult("t", "c", "s", {}, None, plots=["missing.png"])

    with pytest.raises(FileNotFoundError, match=r"missing\.png"):
        run_experiment(no_plot, name="x", argv=["--out", str(tmp_path)])
    with pytest.raises(TypeError, match="ExperimentResult"):
        run_experiment(lambda ctx: {"a": 1}, name="x", argv=["--out", str(tmp_path)])


def test_run_experiment_quick_and_full_are_exclusive(tmp_path):
    with pytest.raises(SystemExit):
        run_experiment(_toy_run, name="x", argv=["--quick", "--full"])


@pytest.fixture
def fake_metadata(monkeypatch):
    """Two packages' extras as importlib.metadata reports them (no install needed)."""
    import importlib.metadata as md

    reqs = {
        "imuon": [
            "geoopt>=0.5 ; extra == 'bench'",
            "shared-core[plot]>=0.1 ; extra == 'experiments'",
            "shared-core[plot]>=0.1 ; extra == 'plot'",
        ],
        "heavytail-sgd": ["scikit-learn ; extra == 'data'", 'matplotlib ; extra == "plot"'],
    }

    def requires(dist):
        if dist not in reqs:
            raise md.PackageNotFoundError(dist)
        return reqs[dist]

    monkeypatch.setattr(md, "packages_distributions", lambda: {})
    monkeypatch.setattr(md, "requires", requires)


def test_a_missing_matplotlib_stops_the_run_before_it_computes(
    tmp_path, monkeypatch, fake_metadata
):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda n, *a: None if n == "matplotlib" else real(n, *a)
    )
    calls = []

    def run(ctx):
        calls.append(ctx)
        return ExperimentResult("t", "c", "s", {}, None)

    with pytest.raises(ImportError, match=r"imuon\[experiments\]"):
        run_experiment(run, name="imuon.image", argv=["--out", str(tmp_path / "a")])
    with pytest.raises(ImportError, match=r"heavytail-sgd\[plot\]"):
        run_experiment(run, name="heavytail_sgd.rates", argv=["--out", str(tmp_path / "b")])
    assert calls == [] and not (tmp_path / "a").exists()
    # an experiment that draws nothing runs without matplotlib
    assert run_experiment(run, name="x", argv=["--out", str(tmp_path / "c")], plots=False) == 0
    assert len(calls) == 1


def test_plot_extra_names_the_package_own_extra(fake_metadata):
    from shared_core.experiment.run import plot_extra

    assert plot_extra("imuon.image") == "imuon[experiments]"
    assert plot_extra("heavytail_sgd.rates") == "heavytail-sgd[plot]"
    assert plot_extra("not_a_package.x") == "matplotlib"


def test_inconclusive_is_a_verdict_and_other_values_are_refused(tmp_path, capsys):
    def with_holds(value):
        return lambda ctx: ExperimentResult("t", "c", "s", {}, value)

    out = tmp_path / "a"
    assert run_experiment(with_holds("inconclusive"), name="x", argv=["--out", str(out)]) == 0
    assert load_json(out / "result.json")["holds"] == "inconclusive"
    assert "[inconclusive]" in capsys.readouterr().out
    assert run_experiment(with_holds(np.bool_(True)), name="x", argv=["--out", str(out)]) == 0
    assert load_json(out / "result.json")["holds"] is True
    for bad in ("maybe", 1, 0.5):
        with pytest.raises(ValueError, match="holds must be"):
            run_experiment(with_holds(bad), name="x", argv=["--out", str(out)])
