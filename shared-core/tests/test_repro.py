"""The repro runner: discovery through entry points, running, and the markdown report."""

import textwrap
from importlib.metadata import EntryPoint

import pytest

from shared_core.experiment import repro
from shared_core.experiment.repro import Entry, discover, render_index, run_all

GOOD = """
from shared_core.experiment import ExperimentResult, line_plot, run_experiment

def run(ctx):
    line_plot(ctx.path("p.png"), {"loss": ([0, 1, 2], [3.0, 2.0, 1.0])})
    return ExperimentResult(
        title="loss goes down", claim="training reduces the loss",
        summary="measured 3 -> 1", metrics={"final": 1.0, "mode_quick": ctx.quick},
        holds=True, plots=["p.png"], table=[{"step": 0, "loss": 3.0}, {"step": 2, "loss": 1.0}],
    )

def main(argv=None):
    return run_experiment(run, name="toy.good", argv=argv)

if __name__ == "__main__":
    raise SystemExit(main())
"""

BAD = """
raise SystemExit("this experiment is broken")
"""


@pytest.fixture
def toy_modules(tmp_path, monkeypatch):
    pkg = tmp_path / "src" / "toyexp"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "good.py").write_text(textwrap.dedent(GOOD))
    (pkg / "bad.py").write_text(BAD)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "src"))
    return [Entry("toy.bad", "toyexp.bad", "toy"), Entry("toy.good", "toyexp.good", "toy")]


def test_run_all_and_report(toy_modules, tmp_path):
    out = tmp_path / "report"
    runs = run_all(toy_modules, out, mode="quick", timeout=120)
    by_name = {r["name"]: r for r in runs}
    assert by_name["toy.good"]["status"] == "ok"
    assert by_name["toy.good"]["result"]["metrics"] == {"final": 1.0, "mode_quick": True}
    assert by_name["toy.bad"]["status"].startswith("failed")
    text = render_index(runs, mode="quick")
    assert "## toy.good" in text and "![toy.good: p.png](toy.good/p.png)" in text
    assert "training reduces the loss" in text and "| step | loss |" in text
    assert "## toy.bad" in text and "failed" in text
    assert (out / "toy.good" / "p.png").is_file()


def test_main_writes_index_and_fails_on_failures(toy_modules, tmp_path, monkeypatch):
    monkeypatch.setattr(repro, "discover", lambda: toy_modules)
    out = tmp_path / "r"
    assert repro.main(["--quick", "--out", str(out), "-k", "good"]) == 0
    assert "toy.good" in (out / "index.md").read_text()
    assert repro.main(["--quick", "--out", str(out)]) == 1
    assert (out / "index.json").is_file()


def test_discover_reads_the_entry_point_group(monkeypatch):
    eps = [
        EntryPoint("b.two", "b.experiments.two", repro.GROUP),
        EntryPoint("a.one", "a.experiments.one", repro.GROUP),
    ]
    monkeypatch.setattr(repro, "entry_points", lambda group: eps if group == repro.GROUP else [])
    assert [e.name for e in discover()] == ["a.one", "b.two"]


def test_discover_rejects_conflicts_and_attributes(monkeypatch):
    clash = [
        EntryPoint("a.one", "a.experiments.one", repro.GROUP),
        EntryPoint("a.one", "other.module", repro.GROUP),
    ]
    monkeypatch.setattr(repro, "entry_points", lambda group: clash)
    with pytest.raises(ValueError, match="registered twice"):
        discover()
    attr = [EntryPoint("a.one", "a.experiments:main", repro.GROUP)]
    monkeypatch.setattr(repro, "entry_points", lambda group: attr)
    with pytest.raises(ValueError, match="must name a module"):
        discover()


def test_headline_and_extra_groups(monkeypatch, capsys):
    groups = {
        repro.GROUP: [EntryPoint("a.one", "a.experiments.one", repro.GROUP)],
        repro.EXTRA_GROUP: [EntryPoint("a.two", "a.experiments.two", repro.EXTRA_GROUP)],
    }
    monkeypatch.setattr(repro, "entry_points", lambda group: groups.get(group, []))
    assert [(e.name, e.headline) for e in repro.discover()] == [("a.one", True)]
    assert [(e.name, e.headline) for e in repro.discover_all()] == [
        ("a.one", True),
        ("a.two", False),
    ]
    assert repro.main(["--list", "--all"]) == 0
    out = capsys.readouterr().out
    assert "a.one\ta.experiments.one" in out and "a.two" in out and "extra" in out
    assert repro.main(["--list"]) == 0
    assert "a.two" not in capsys.readouterr().out
    assert repro.main(["--list", "--member", "nobody"]) == 2
    groups[repro.EXTRA_GROUP].append(EntryPoint("a.one", "a.experiments.one", repro.EXTRA_GROUP))
    with pytest.raises(ValueError, match="headline and extra"):
        repro.discover_all()


def test_quick_estimate_reads_the_literal_without_importing(tmp_path, monkeypatch):
    pkg = tmp_path / "estpkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "timed.py").write_text("raise SystemExit('never imported')\nQUICK_SECONDS = 42.5\n")
    (pkg / "untimed.py").write_text("X = 1\n")
    (pkg / "computed.py").write_text("QUICK_SECONDS = 6 * 7\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert repro.quick_estimate("estpkg.timed") == 42.5
    assert repro.quick_estimate("estpkg.untimed") is None
    assert repro.quick_estimate("no_such_package.module") is None
    with pytest.raises(ValueError, match="number literal"):
        repro.quick_estimate("estpkg.computed")


def test_run_all_validates(tmp_path):
    with pytest.raises(ValueError, match="mode"):
        run_all([], tmp_path, mode="medium")
    with pytest.raises(ValueError, match="timeout"):
        run_all([], tmp_path, timeout=0)


def test_empty_registry_report():
    assert "No experiments are registered" in render_index([], mode="quick")


def test_list_prints_entries(monkeypatch, capsys):
    monkeypatch.setattr(repro, "discover", lambda: [Entry("x.y", "x.experiments.y", "x")])
    assert repro.main(["--list"]) == 0
    assert "x.y\tx.experiments.y" in capsys.readouterr().out


def _run(name, dist, paper=None, measured=None, holds=True, summary="Ran it. More words."):
    result = {
        "title": f"{name} title",
        "claim": f"{name} claim",
        "summary": summary,
        "metrics": {"x": 1.0},
        "holds": holds,
        "plots": [],
        "table": None,
        "paper": paper,
        "measured": measured,
    }
    return {
        "name": name,
        "module": f"{dist}.m",
        "dist": dist,
        "status": "ok",
        "seconds": 2.0,
        "result": result,
    }


def test_report_has_a_table_per_paper_with_claim_measured_and_verdict():
    runs = [
        _run("b.one", "b", paper="P10", measured="risk ratio 0.98"),
        _run("a.one", "a", paper="P03", measured="slope -0.33", holds=False),
        _run("b.two", "b", paper="P10", summary="First sentence here. Second one."),
        _run("c.one", "c"),
        {
            "name": "d.one",
            "module": "d.m",
            "dist": "d",
            "status": "failed (exit 1)",
            "seconds": 1.0,
            "result": None,
        },
    ]
    text = render_index(runs, mode="quick")
    claims = text[text.index("## Claims by paper") : text.index("## Runs")]
    # Papers in order, each experiment under its own paper, packages without one by name.
    assert claims.index("### P03") < claims.index("### P10") < claims.index("### package c")
    p10 = claims[claims.index("### P10") : claims.index("### package c")]
    assert "b.one" in p10 and "b.two" in p10 and "a.one" not in p10
    assert "| b.one claim | **not stated** | risk ratio 0.98 | yes |" in p10
    # Without a measured line, the summary's first sentence stands in.
    assert "| b.two claim | **not stated** | First sentence here. | yes |" in p10
    assert "| a.one claim | **not stated** | slope -0.33 | **no** |" in claims
    assert "### package d" in claims and "failed (exit 1)" in claims
    assert "Total: 9 s for 5 experiments." in text


def test_the_claims_table_quotes_each_rule():
    run = _run("b.one", "b", paper="P10", measured="gap 0.4")
    run["rule"] = "holds if |gap| <= 0.5 (non-inferiority)"
    text = render_index([run], mode="quick")
    assert "| b.one claim | holds if \\|gap\\| <= 0.5 (non-inferiority) | gap 0.4 | yes |" in text
    assert "*Rule (fixed before the run):* holds if |gap| <= 0.5" in text


def test_stated_rule_reads_the_rule_paragraph_without_importing(tmp_path, monkeypatch):
    pkg = tmp_path / "rulepkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text(
        '"""Title.\n\nMethod text.\n\nRule (fixed before the run): holds iff\n'
        'the slope is within 0.1.\n\nMore."""\nraise SystemExit("never imported")\n'
    )
    (pkg / "b.py").write_text('"""Title.\n\n``holds``:\n\n1. first;\n2. second.\n"""\n')
    (pkg / "c.py").write_text('"""Title only."""\n')
    (pkg / "d.py").write_text('"""T.\n\nRules, fixed before the run: ' + "x" * 600 + '"""\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    rule = repro.stated_rule
    assert rule("rulepkg.a") == "Rule (fixed before the run): holds iff the slope is within 0.1."
    assert rule("rulepkg.b") == "`holds`: 1. first; 2. second."  # heading joined to its list
    assert rule("rulepkg.c") is None and rule("no_such_pkg.x") is None
    long = rule("rulepkg.d")
    assert len(long) == 400 and long.endswith("…")


def test_an_inconclusive_verdict_is_shown_as_such():
    run = _run("b.one", "b", paper="P10", measured="ratio 1.05 [0.9, 1.2]", holds="inconclusive")
    run["rule"] = "holds if the upper bound <= 1.1; refuted if the lower bound > 1.1"
    text = render_index([run], mode="quick")
    assert "| ratio 1.05 [0.9, 1.2] | inconclusive |" in text
    assert "*Holds:* inconclusive" in text
