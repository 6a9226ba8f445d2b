"""The root tooling: member discovery, the import contract, workflow validation."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
import declared_imports  # noqa: E402
import import_contracts  # noqa: E402
import readme_example  # noqa: E402
from workspace import members  # noqa: E402


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


@pytest.fixture
def toy_workspace(tmp_path):
    """shared-core plus two packages that follow the rule."""
    _write(tmp_path / "pyproject.toml", '[tool.uv.workspace]\nmembers = ["core", "packages/*"]\n')
    for folder, dist, mod in [
        ("core", "shared-core", "shared_core"),
        ("packages/alpha", "alpha", "alpha"),
        ("packages/beta-x", "beta-x", "beta_x"),
    ]:
        _write(
            tmp_path / folder / "pyproject.toml", f'[project]\nname = "{dist}"\nversion = "0.1.0"\n'
        )
        body = "" if mod == "shared_core" else "import shared_core\n"
        _write(tmp_path / folder / "src" / mod / "__init__.py", body)
    return tmp_path


def test_members_are_discovered_from_folders(toy_workspace):
    found = {(m.dist, m.path, m.module) for m in members(toy_workspace)}
    assert found == {
        ("shared-core", "core", "shared_core"),
        ("alpha", "packages/alpha", "alpha"),
        ("beta-x", "packages/beta-x", "beta_x"),
    }
    # A new folder is a new member, with no edit anywhere else.
    _write(toy_workspace / "packages/gamma/pyproject.toml", '[project]\nname = "gamma"\n')
    _write(toy_workspace / "packages/gamma/src/gamma/__init__.py", "")
    assert "gamma" in {m.dist for m in members(toy_workspace)}


def _contracts(root: Path) -> int:
    if shutil.which("lint-imports") is None:
        pytest.skip("import-linter is not installed in this environment")
    return import_contracts.main(["--root", str(root)])


def test_contract_passes_on_a_clean_tree(toy_workspace):
    assert _contracts(toy_workspace) == 0


def test_contract_fails_when_a_package_imports_a_sibling(toy_workspace):
    _write(toy_workspace / "packages/beta-x/src/beta_x/uses_alpha.py", "import alpha\n")
    assert _contracts(toy_workspace) != 0


def test_contract_fails_when_shared_core_imports_a_package(toy_workspace):
    _write(toy_workspace / "core/src/shared_core/bad.py", "from alpha import something\n")
    assert _contracts(toy_workspace) != 0


def test_contract_passes_on_this_repository():
    assert _contracts(ROOT) == 0


def test_workflow_schema_rejects_a_broken_workflow(tmp_path):
    exe = shutil.which("check-jsonschema")
    if exe is None:
        pytest.skip("check-jsonschema is not installed in this environment")
    cmd = [exe, "--builtin-schema", "vendor.github-workflows"]
    ok = subprocess.run([*cmd, *map(str, (ROOT / ".github/workflows").glob("*.yml"))], check=False)
    assert ok.returncode == 0
    broken = tmp_path / "broken.yml"
    broken.write_text("on: push\njobs:\n  a:\n    steps: 3\n")
    assert subprocess.run([*cmd, str(broken)], check=False).returncode != 0


def test_new_package_scaffold_is_a_member(toy_workspace):
    import new_package

    target = new_package.scaffold("my-method", "Does things.", root=toy_workspace)
    assert (target / "src" / "my_method" / "__init__.py").is_file()
    assert (target / "tests" / "test_metadata.py").is_file()
    text = (target / "pyproject.toml").read_text()
    assert 'name = "my-method"' in text and "{{" not in text
    found = {m.dist: m for m in members(toy_workspace)}
    assert found["my-method"].module == "my_method"
    with pytest.raises(ValueError, match="already exists"):
        new_package.scaffold("my-method", "again", root=toy_workspace)
    with pytest.raises(ValueError, match="lowercase"):
        new_package.scaffold("My_Method", "bad", root=toy_workspace)


def test_new_package_wraps_a_long_description_in_python_files(toy_workspace):
    import new_package

    words = "a long one-line description of a method that needs many words to say " * 3
    target = new_package.scaffold("long-desc", words.strip(), root=toy_workspace)
    for path in target.rglob("*.py"):
        longest = max(len(line) for line in path.read_text().splitlines())
        assert longest <= 100, (path, longest)
    init = (target / "src" / "long_desc" / "__init__.py").read_text()
    assert " ".join(init.split('"""')[1].split()) == words.strip()


def _declare(root: Path, folder: str, dist: str, deps: str, extras: str = "") -> None:
    _write(
        root / folder / "pyproject.toml",
        f'[project]\nname = "{dist}"\nversion = "0.1.0"\ndependencies = [{deps}]\n'
        f"[project.optional-dependencies]\n{extras}\n",
    )


def test_declared_imports_pass_when_every_import_is_declared(toy_workspace):
    _declare(
        toy_workspace,
        "packages/alpha",
        "alpha",
        '"shared-core", "scikit-learn"',
        'peft = ["peft>=0.13"]',
    )
    _write(
        toy_workspace / "packages/alpha/src/alpha/fit.py",
        "import os\nimport sklearn.linear_model\nimport alpha.fit\n\n"
        "def lora():\n    import peft\n    return peft\n",
    )
    _write(toy_workspace / "packages/alpha/src/alpha/experiments/run.py", "import peft\n")
    _declare(toy_workspace, "packages/beta-x", "beta-x", '"shared-core"')
    assert declared_imports.check(toy_workspace) == []


def test_declared_imports_flag_an_undeclared_import(toy_workspace):
    _declare(toy_workspace, "packages/alpha", "alpha", '"shared-core"')
    _declare(toy_workspace, "packages/beta-x", "beta-x", '"shared-core"')
    _write(toy_workspace / "packages/alpha/src/alpha/uses.py", "import os\nimport numpy as np\n")
    (v,) = declared_imports.check(toy_workspace)
    assert (v.module, v.line, v.member) == ("numpy", 2, "alpha")
    assert "not declared" in v.why
    assert declared_imports.main(["--root", str(toy_workspace)]) == 1


def test_declared_imports_flag_a_module_level_import_of_an_extra(toy_workspace):
    _declare(toy_workspace, "packages/alpha", "alpha", '"shared-core"', 'peft = ["peft"]')
    _declare(toy_workspace, "packages/beta-x", "beta-x", '"shared-core"')
    _write(toy_workspace / "packages/alpha/src/alpha/lora.py", "import peft\n")
    (v,) = declared_imports.check(toy_workspace)
    assert v.module == "peft" and "module level" in v.why
    # The same import guarded by try/except ImportError is the documented pattern.
    _write(
        toy_workspace / "packages/alpha/src/alpha/lora.py",
        "try:\n    import peft\nexcept ImportError:\n    peft = None\n",
    )
    assert declared_imports.check(toy_workspace) == []


def test_declared_imports_pass_on_this_repository():
    assert declared_imports.check(ROOT) == []


def test_readme_example_takes_the_usage_block_only():
    readme = (
        "# pkg\n\n## Install\n\n```python\nraise SystemExit(1)\n```\n\n## Usage\n\n"
        "Some words.\n\n```bash\npip install pkg\n```\n\n```python\nx = 1\n```\n\n"
        "```python\ny = 2\n```\n\n## Math\n"
    )
    assert readme_example.usage_code(readme) == "x = 1\n"
    with pytest.raises(ValueError, match="no '## Usage'"):
        readme_example.usage_code("# pkg\n\n```python\nx = 1\n```\n")
    with pytest.raises(ValueError, match="no ```python block"):
        readme_example.usage_code("## Usage\n\ntext\n\n## Math\n```python\nx = 1\n```\n")


def test_readme_example_runs_in_a_scratch_folder_and_reports_failure(tmp_path):
    good = tmp_path / "good"
    _write(good / "README.md", "## Usage\n\n```python\nopen('out.txt', 'w').write('x')\n```\n")
    assert readme_example.main([str(good)]) == 0
    assert not (good / "out.txt").exists()
    bad = tmp_path / "bad"
    _write(bad / "README.md", "## Usage\n\n```python\nassert 1 == 2\n```\n")
    with pytest.raises(AssertionError):
        readme_example.main([str(bad)])


def test_gpu_check_finds_every_package_kernel_and_each_example_runs_on_cpu():
    # The GPU check compiles what all_kernels() returns: a package's registry must reach it
    # through the entry point, and each example must match its reference where it can run here
    # (the launcher under the Triton interpreter, float32, as the CPU kernel tests do).
    import torch

    import gpu_check
    from shared_core.kernels import HAS_TRITON

    kernels = gpu_check.all_kernels()
    expected = {
        "sign_lmo",
        "syrk",
        "ns_step",
        "diloco-ef/stochastic_quantize",
        "trak-theory/sketch_project",
    }
    assert expected <= set(kernels)
    for name, spec in kernels.items():
        gen = torch.Generator().manual_seed(11)
        args = spec.example(torch.device("cpu"), torch.float32, gen)
        ref = spec.reference(*args)
        assert torch.isfinite(ref).all() and ref.abs().sum() > 0, name
        if HAS_TRITON:
            out = spec.launcher(*args)
            err = gpu_check._rel_err(out, ref)
            assert err <= spec.rtol[torch.float32], (name, err)


def test_readme_example_reads_the_extras_the_example_names():
    code = '# pip install "imuon[peft,lm]"\nimport imuon\n# pip install other[x]\n'
    assert readme_example.usage_extras(code, "imuon") == ["lm", "peft"]
    assert readme_example.usage_extras("import imuon\n", "imuon") == []
    shared = readme_example.usage_code((ROOT / "shared-core" / "README.md").read_text())
    assert readme_example.usage_extras(shared, "shared-core") == ["plot"]


def test_the_main_job_fits_its_budget():
    # Every headline experiment states its measured quick-mode time (QUICK_SECONDS), each is
    # within the per-experiment budget, the sum within the main job's, and every package
    # that registers experiments has at least one headline (each paper is in the main job).
    from shared_core.experiment import repro

    head = repro.discover()
    assert head, "no headline experiment is registered"
    estimates = {e.name: repro.quick_estimate(e.module) for e in head}
    missing = sorted(n for n, s in estimates.items() if s is None)
    assert not missing, f"headline experiments without QUICK_SECONDS: {missing}"
    over = {n: s for n, s in estimates.items() if s > repro.QUICK_BUDGET_S}
    assert not over, f"quick runs over {repro.QUICK_BUDGET_S:.0f} s (move to extra): {over}"
    total = sum(estimates.values())
    assert total <= repro.MAIN_JOB_BUDGET_S, f"main job ~{total:.0f} s"
    with_headline = {e.dist for e in head}
    without = sorted({e.dist for e in repro.discover_all()} - with_headline)
    assert not without, f"packages with experiments but no headline: {without}"


def test_gpu_offline_reads_the_kernel_registries_and_gpu_tests_without_installed_metadata():
    # On a bare GPU machine nothing is installed, so entry points are read from the pyprojects;
    # they must name exactly what the installed entry points name here.
    from importlib.metadata import entry_points

    import gpu_offline

    from_pyprojects = gpu_offline.kernel_registries()
    installed = {ep.name: ep.value for ep in entry_points(group=gpu_offline.ENTRY_GROUP)}
    assert from_pyprojects.pop("shared-core") == "shared_core.kernels:KERNELS"
    assert from_pyprojects == installed
    files = gpu_offline.gpu_test_files()
    assert "shared-core/tests/test_polar_msign.py" in files["shared-core"]
    for dist, paths in files.items():
        for path in paths:
            assert "mark.gpu" in (ROOT / path).read_text(), (dist, path)
    scripts = {f"{b.member}/{b.script}" for b in gpu_offline.BENCHMARKS}
    where = {m.dist: m.path for m in members()}
    for s in scripts:
        member, _, script = s.partition("/")
        assert (ROOT / where[member] / script).is_file(), s


def _bare_rehearsal(tmp_path, *extra):
    """The offline GPU pass on this CPU under ``python -S``: torch from site-packages through
    PYTHONPATH, the members only through the driver's own src/ paths (no .pth, no uv)."""
    import json
    import os
    import sysconfig

    py = f"{sys.executable} -S"
    env = {**os.environ, "PYTHONPATH": sysconfig.get_paths()["purelib"]}
    env.pop("TRITON_INTERPRET", None)
    out = tmp_path / "gpu"
    cmd = [sys.executable, "-S", str(ROOT / "tools" / "gpu_offline.py"), str(out)]
    cmd += ["--rehearse", "--python", py, "--wheels", str(tmp_path / "no-wheels"), *extra]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    doc = json.loads((out / "gpu_offline.json").read_text())
    return proc, doc, sorted(p.name for p in out.iterdir())


def test_gpu_offline_rehearsal_runs_on_a_bare_interpreter(tmp_path):
    proc, doc, files = _bare_rehearsal(
        tmp_path, "--only-tests", "shared-core,trak-theory", "--only-bench", "speed_polar"
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert files == ["gpu_offline.json", "gpu_offline.log"]  # a device returns few files
    assert doc["ok"] and doc["mode"] == "rehearse" and doc["env"]["cuda_available"] is False
    assert {r["kernel"] for r in doc["kernels"]} >= {"syrk", "trak-theory/sketch_project"}
    assert [t["member"] for t in doc["tests"]] == ["shared-core", "trak-theory"]
    (bench,) = doc["bench"]
    assert bench["result"]["results"][0]["ratio_median"] > 0


@pytest.mark.slow
def test_gpu_offline_full_rehearsal(tmp_path):
    proc, doc, _ = _bare_rehearsal(tmp_path, "--budget", "1200")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert len(doc["bench"]) == len(__import__("gpu_offline").BENCHMARKS)


def test_bench_dashboard_judges_ratios_against_goals_and_finds_nested_cases():
    import bench_dashboard as bd

    assert bd.meets(0.94, "<= 0.77") is False and bd.meets(0.7, "<= 0.77") is True
    assert bd.meets(1.2, ">= 1.1") is True and bd.meets(1.1, "> 1.1") is False
    for bad in ("1.1", "<= fast", "== 1"):
        with pytest.raises(ValueError, match="goal"):
            bd.parse_goal(bad)
    gpu_pass = {
        "env": {},
        "bench": [
            {"result": {"environment": {"gpu": "H200"}, "results": [{"name": "a", "x": 1}]}},
            {"result": {"environment": {"gpu": "H200"}, "results": [
                {"name": "ns", "ratio_median": 0.9, "ratio_min": 0.8, "ratio_max": 1.0}
            ]}},
        ],
    }  # fmt: skip
    result, env = bd.find_case(gpu_pass, "ns")
    assert result["ratio_median"] == 0.9 and bd.machine(env) == "H200"
    assert bd.find_case(gpu_pass, "a") is None  # a name without a ratio is not a comparison
    cpu_env = {"cpu": {"model": "EPYC"}, "torch_threads": 2, "blas": {"blas": "mkl"}}
    assert bd.machine(cpu_env) == "EPYC, 2 threads, mkl"


def test_every_registered_performance_claim_has_its_evidence_committed():
    import json

    import bench_dashboard as bd

    claims = bd.load_claims()
    assert claims, "no benchmarks/claims.toml registers a claim"
    for c in claims:
        assert c.evidence.is_file(), f"{c.member}: {c.what}: evidence {c.evidence} missing"
        assert bd.find_case(json.loads(c.evidence.read_text()), c.case), (c.member, c.case)


def test_the_readme_dashboard_is_regenerated_from_the_claims():
    import bench_dashboard as bd

    body = (ROOT / "README.md").read_text()
    block = body.split(bd.START, 1)[1].split(bd.END, 1)[0].strip()
    fresh = bd.table([bd.row(c, None) for c in bd.load_claims()])
    assert block == fresh, "run `python tools/bench_dashboard.py --write-readme`"


def test_every_headline_experiment_states_its_rule():
    # The report's claims table quotes each rule; a headline verdict without one is a defect.
    from shared_core.experiment.repro import discover_all, stated_rule

    missing = [e.name for e in discover_all() if e.headline and not stated_rule(e.module)]
    assert not missing, f"headline experiments without a stated rule: {missing}"
