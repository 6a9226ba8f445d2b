"""Every task of the monorepo. `nox -l` lists them; CI builds its matrix from `nox -l --json`.

Sessions:
    lint                 pre-commit on all files (ruff, format, uv lock --check, import
                         contracts, workflow schemas)
    tests(<member>)      one member's tests in an environment holding only that member and its
                         declared dependencies (+ its `test` group): proof that a package
                         installs and works alone. Triton kernels run under TRITON_INTERPRET=1.
    integration          the cross-package tests, with every member installed
    numerics             (not default) the `numerics`-marked tests under every MKL code path
                         (MKL_CBWR=AVX2|COMPATIBLE|AUTO) with 1 and 2 threads
    gpu                  (not default) gpu-marked tests and compiled Triton kernels on a CUDA
                         machine, in the ambient interpreter
    bench                every member's benchmarks/*.py, JSON into reports/bench/, then the
                         performance dashboard (tools/bench_dashboard.py) of every claim
    repro                the main job: every headline experiment, quick mode, report in
                         reports/repro/index.md (`-- --all` adds the extra experiments,
                         `-- --full` for paper scale)
    repro_member(<m>)    every experiment of one member, report in reports/repro-<m>/
    docs                 the documentation site (every member's README, docs/ and API
                         reference) built with mkdocs --strict into build/docs_site/site
    build(<member>)      `uv build --package X --no-sources`, then check the wheel's metadata,
                         install it alone in a fresh environment and run its README's usage
                         example there

Members are discovered from the root pyproject (tools/workspace.py): adding a package folder
adds its sessions.
"""

from __future__ import annotations

import os
import sys
import zipfile
from email.parser import Parser
from pathlib import Path

import nox

sys.path.insert(0, str(Path(__file__).parent / "tools"))
from workspace import library_members, members

nox.options.default_venv_backend = "uv"
nox.options.sessions = ["lint", "tests", "integration", "build"]
nox.options.reuse_venv = "yes"

ROOT = Path(__file__).parent
LIBRARIES = library_members(ROOT)
INTEGRATION = next(m for m in members(ROOT) if not m.is_package)
CPU_ENV = {"TRITON_INTERPRET": "1", "FRONTIER_OPT_NO_PROGRESS": "1"}


def _sync(session: nox.Session, *args: str) -> None:
    """`uv sync` into this session's virtualenv, exactly (extraneous packages are removed)."""
    session.run_install(
        "uv",
        "sync",
        "--locked",
        *args,
        env={"UV_PROJECT_ENVIRONMENT": session.virtualenv.location},
        external=True,
    )


@nox.session(venv_backend="none")
def lint(session: nox.Session) -> None:
    """pre-commit on every file (hooks run through the locked workspace environment)."""
    session.run(
        "uv", "run", "--locked", "pre-commit", "run", "--all-files", "--show-diff-on-failure"
    )


@nox.session
@nox.parametrize("member", [nox.param(m.path, id=m.dist) for m in LIBRARIES])
def tests(session: nox.Session, member: str) -> None:
    """One member's tests, in an environment with only that member and its dependencies."""
    dist = next(m.dist for m in LIBRARIES if m.path == member)
    _sync(session, "--package", dist, "--group", "test", "--no-default-groups")
    session.run("pytest", f"{member}/tests", *session.posargs, env=CPU_ENV)


@nox.session
def integration(session: nox.Session) -> None:
    """Cross-package tests with every member installed."""
    _sync(session, "--package", INTEGRATION.dist, "--group", "test", "--no-default-groups")
    session.run("pytest", f"{INTEGRATION.path}/tests", *session.posargs, env=CPU_ENV)


@nox.session(venv_backend="none", default=False)
def gpu(session: nox.Session) -> None:
    """On a CUDA machine: gpu-marked tests and the compiled Triton kernels (no interpreter).

    Runs in the ambient interpreter, which must hold the workspace (`uv sync --all-packages
    --all-groups`, then `uv run nox -s gpu`).
    """
    try:
        import torch
    except ImportError:
        session.error(
            "nox -s gpu runs in the ambient interpreter, and torch is not importable there: "
            "run `uv sync --locked --all-packages --all-groups`, then `uv run nox -s gpu`."
        )
    if not torch.cuda.is_available():
        session.error(
            "nox -s gpu needs a CUDA device, and torch sees none "
            f"(torch {torch.__version__}, CUDA build {torch.version.cuda}). "
            "Run it on a GPU machine; CPU machines run `nox -s tests`."
        )
    env = {"TRITON_INTERPRET": "0", "FRONTIER_OPT_NO_PROGRESS": "1"}
    paths = [f"{m.path}/tests" for m in LIBRARIES]
    # Every test, gpu-marked ones included: the kernel tests then compile for the real device.
    session.run("python", "-m", "pytest", *paths, "-m", "not slow", *session.posargs, env=env)
    session.run("python", "tools/gpu_check.py", env=env)


# The BLAS code paths a user's CPU may take (MKL's conditional numerical reproducibility
# modes) and the thread counts CI and users run with: a tolerance that holds on one of them
# only was tuned to one machine's rounding.
NUMERICS_PATHS = ("AVX2", "COMPATIBLE", "AUTO")
NUMERICS_THREADS = ("1", "2")


@nox.session(default=False)
def numerics(session: nox.Session) -> None:
    """The `numerics`-marked tests (tolerances set by an error model) under every MKL code
    path in NUMERICS_PATHS and 1 and 2 threads; run it before landing a numeric change.

    `nox -s numerics -- -k polar` narrows the selection as usual.
    """
    _sync(session, "--all-packages", "--all-groups", "--no-default-groups")
    for cbwr in NUMERICS_PATHS:
        for threads in NUMERICS_THREADS:
            env = {
                **CPU_ENV,
                "MKL_CBWR": cbwr,
                "OMP_NUM_THREADS": threads,
                "MKL_NUM_THREADS": threads,
            }
            session.log(f"MKL_CBWR={cbwr}, {threads} thread(s)")
            # one pytest per member, as in tests(<member>): no test state crosses members
            for m in LIBRARIES:
                session.run(
                    "pytest",
                    f"{m.path}/tests",
                    "-m",
                    "numerics and not slow and not gpu",
                    "-q",
                    *session.posargs,
                    env=env,
                    success_codes=[0, 5],  # 5: the member has no numerics-marked test
                )


@nox.session(default=False)
def bench(session: nox.Session) -> None:
    """Run every member's benchmarks/*.py (quick sizes unless `-- --full`), JSON to reports/."""
    _sync(session, "--all-packages", "--all-extras", "--group", "dev")
    mode = "--full" if "--full" in session.posargs else "--quick"
    for m in LIBRARIES:
        for script in sorted((ROOT / m.path / "benchmarks").glob("[!_]*.py")):
            out = ROOT / "reports" / "bench" / m.dist / f"{script.stem}.json"
            args = [] if mode == "--full" else ["--quick"]
            session.run("python", str(script), *args, "--out", str(out), env=CPU_ENV)
    # The dashboard: every registered claim judged on these fresh numbers where a benchmark
    # wrote them, else on the committed evidence (`--write-readme` updates the root table).
    dash = ["python", "tools/bench_dashboard.py", "--fresh", "reports/bench"]
    session.run(*dash, "--out", "reports/bench/dashboard.md")


@nox.session(default=False)
def docs(session: nox.Session) -> None:
    """The documentation site, warnings as errors (`-- --serve` to browse it locally)."""
    _sync(session, "--all-packages", "--group", "docs", "--no-default-groups")
    session.run("python", "tools/docs_site.py", *session.posargs)


@nox.session(default=False)
def repro(session: nox.Session) -> None:
    """The main job: every headline experiment in quick mode (under 20 minutes on 2 cores);
    the report lands in reports/repro/index.md. `-- --all` adds the extra experiments,
    `-- --full` runs paper scale."""
    _sync(session, "--all-packages", "--all-extras", "--group", "dev")
    args = list(session.posargs)
    if not {"--quick", "--full"} & set(args):
        args.append("--quick")
    session.run("python", "-m", "shared_core.experiment.repro", *args, "--out", "reports/repro")


# nox keeps one session per name, so one member's run is `repro_member(<member>)`
@nox.session(default=False)
@nox.parametrize("member", [nox.param(m.dist, id=m.dist) for m in LIBRARIES])
def repro_member(session: nox.Session, member: str) -> None:
    """Every experiment (headline and extra) of one member; report in reports/repro-<member>."""
    _sync(session, "--all-packages", "--all-extras", "--group", "dev")
    args = list(session.posargs)
    if not {"--quick", "--full"} & set(args):
        args.append("--quick")
    out = f"reports/repro-{member}"
    session.run(
        "python", "-m", "shared_core.experiment.repro", "--member", member, *args, "--out", out
    )


@nox.session(reuse_venv=False)  # "installs alone" means a fresh environment
@nox.parametrize("member", [nox.param(m.path, id=m.dist) for m in LIBRARIES])
def build(session: nox.Session, member: str) -> None:
    """Build one member's wheel as it would be published, check it, install it alone."""
    m = next(x for x in LIBRARIES if x.path == member)
    dist_dir = ROOT / "dist"
    session.run(
        "uv",
        "build",
        "--package",
        m.dist,
        "--no-sources",
        "--out-dir",
        str(dist_dir / m.dist),
        external=True,
    )
    wheel = _newest_wheel(dist_dir / m.dist, m)
    _check_wheel_metadata(session, wheel)
    # Install alone: the member's wheel plus shared-core's (not yet on an index), nothing else
    # of the workspace.
    # uv caches a wheel by name and version, so an unreleased member that changed without a
    # version bump could come back stale from the cache (it once did, in CI): name the freshly
    # built wheels by path and have uv re-read them.
    shared_core = []
    if m.dist != "shared-core":
        session.run(
            "uv",
            "build",
            "--package",
            "shared-core",
            "--no-sources",
            "--wheel",
            "--out-dir",
            str(dist_dir / "shared-core"),
            external=True,
        )
        core = next(x for x in LIBRARIES if x.dist == "shared-core")
        shared_core = [
            str(_newest_wheel(dist_dir / "shared-core", core)),
            "--refresh-package",
            "shared-core",
            "--reinstall-package",
            "shared-core",
        ]
    # With exactly the extras the README's usage example names (`# pip install "x[plot]"`).
    sys.path.insert(0, str(ROOT / "tools"))
    from readme_example import usage_code, usage_extras

    extras = usage_extras(usage_code((ROOT / m.path / "README.md").read_text()), m.dist)
    target = f"{wheel}[{','.join(extras)}]" if extras else str(wheel)
    fresh = ["--refresh-package", m.dist, "--reinstall-package", m.dist]
    session.run("uv", "pip", "install", target, *shared_core, *fresh, external=True)
    session.run("python", "-c", f"import {m.module}; print({m.module}.__name__, 'imports')")
    # The README's usage example, against the wheel alone (FRONTIER_OPT_NO_PROGRESS keeps the
    # log short; TRITON_INTERPRET lets a CPU machine run any Triton path it reaches).
    session.run(
        "python", str(ROOT / "tools" / "readme_example.py"), str(ROOT / m.path), env=CPU_ENV
    )


def _newest_wheel(folder: Path, m) -> Path:
    stem = m.dist.replace("-", "_")
    wheels = sorted(folder.glob(f"{stem}-{m.version}-*.whl"), key=os.path.getmtime)
    if not wheels:
        raise RuntimeError(f"no wheel for {m.dist} {m.version} in {folder}")
    return wheels[-1]


def _check_wheel_metadata(session: nox.Session, wheel: Path) -> None:
    """The published metadata must name no workspace path and pin shared-core to a range."""
    with zipfile.ZipFile(wheel) as zf:
        name = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        meta = Parser().parsestr(zf.read(name).decode())
    requires = meta.get_all("Requires-Dist") or []
    bad = [r for r in requires if "file:" in r or "@" in r or str(ROOT) in r]
    if bad:
        session.error(f"{wheel.name}: dependencies name local paths: {bad}")
    for r in requires:
        if r.replace("_", "-").lower().startswith("shared-core"):
            spec = r[len("shared-core") :].split(";")[0].strip()
            if not any(op in spec for op in (">=", "<", "~=", "==")):
                session.error(f"{wheel.name}: shared-core needs a version range, got {r!r}")
    session.log(f"{wheel.name}: metadata ok ({len(requires)} requirements)")
