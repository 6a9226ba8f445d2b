"""The suite's members import together and agree with their metadata."""

import importlib
import sys
import tomllib
from importlib.metadata import version
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
from workspace import library_members  # noqa: E402

LIBS = library_members(ROOT)


@pytest.mark.parametrize("member", LIBS, ids=[m.dist for m in LIBS])
def test_member_imports_with_its_declared_version(member):
    mod = importlib.import_module(member.module)
    declared = tomllib.loads((ROOT / member.path / "pyproject.toml").read_text())["project"]
    assert version(member.dist) == declared["version"]
    assert mod.__name__ == member.module


@pytest.mark.parametrize("member", LIBS, ids=[m.dist for m in LIBS])
def test_member_has_the_standard_parts(member):
    folder = ROOT / member.path
    for part in ("README.md", "CHANGELOG.md", "pyproject.toml", "tests"):
        assert (folder / part).exists(), f"{member.path} lacks {part}"
    groups = tomllib.loads((folder / "pyproject.toml").read_text()).get("dependency-groups", {})
    assert "test" in groups, f"{member.path} has no `test` dependency group"


def test_integration_env_sees_every_member():
    # integration-tests must depend on every library member, or its tests miss some.
    deps = tomllib.loads((ROOT / "integration-tests" / "pyproject.toml").read_text())["project"][
        "dependencies"
    ]
    names = {d.split(";")[0].split("[")[0].split(">")[0].split("=")[0].strip() for d in deps}
    assert {m.dist for m in LIBS} <= names


def test_sign_descent_with_the_shared_kernel_op():
    # A first cross-layer use: l-inf steepest descent on a quadratic through the dispatching
    # op, compared with the same loop written in plain torch.
    from shared_core.kernels import sign_lmo

    g = torch.Generator().manual_seed(0)
    target = torch.randn(37, generator=g)
    x_op = torch.zeros(37)
    x_ref = torch.zeros(37)
    for t in range(200):
        lr = 0.5 / (t + 1) ** 0.5
        x_op = x_op + sign_lmo(x_op - target, lr)
        x_ref = x_ref - lr * torch.sign(x_ref - target)
    torch.testing.assert_close(x_op, x_ref)
    assert (x_op - target).abs().max() < 0.1
