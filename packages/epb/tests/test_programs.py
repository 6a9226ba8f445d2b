"""Program validation and sandbox: rejections come with clear reasons, never crashes."""

import pytest
import torch

from epb.features import FEATURES, node_features
from epb.problems import RolloutState, random_tsp
from epb.programs import ProgramError, compile_program, try_compile


@pytest.fixture
def feats():
    st = RolloutState.start(random_tsp(3, 9, torch.Generator().manual_seed(0)))
    return node_features(st)


@pytest.mark.parametrize(
    ("src", "reason"),
    [
        ("import os\ndef score(s):\n    return 1", "imports are not allowed"),
        ("from os import path\ndef score(s):\n    return 1", "imports are not allowed"),
        ("def score(s):\n    while True:\n        pass\n    return 1", "while loops"),
        ("def score(s):\n    return s.__class__", "unknown feature"),
        ("def score(s):\n    return s.d_cur.__class__", "attribute access is only allowed"),
        ("def score(s):\n    return open('x')", "only calls to"),
        ("def score(s):\n    return eval('1')", "only calls to"),
        ("def score(s):\n    return __import__", "not allowed"),
        ("def score(s):\n    return 'abc'", "only numeric literals"),
        ("def score(s):\n    return [s.d_cur][0]", "not allowed"),
        ("def score(s):\n    for i in range(10**9):\n        pass\n    return 1", "range()"),
        ("def score(s):\n    return", "never returns a score"),
        ("def other(s):\n    return 1", "must be named"),
        ("def score(s, t):\n    return 1", "exactly one argument"),
        ("def score(s):\n    return s.d_cur +", "syntax error"),
    ],
)
def test_validation_rejects_with_reason(src, reason):
    prog, why = try_compile(src)
    assert prog is None and reason in why
    with pytest.raises(ProgramError, match=reason.split("(")[0][:20].replace("(", r"\(")):
        compile_program(src)


def test_infinite_style_loop_hits_the_time_limit(feats):
    src = (
        "def score(s):\n    a = 0\n    for i in range(1000):\n        for j in range(1000):\n"
        "            for k in range(1000):\n                a = a + 1\n    return a"
    )
    prog = compile_program(src, time_limit=0.2)
    with pytest.raises(ProgramError, match="time limit"):
        prog.scores(feats)


def test_runtime_failures_are_rejections(feats):
    for src, reason in [
        ("def score(s):\n    return 9 ** 9 ** 9", "runtime error"),
        ("def score(s):\n    return s.d_cur * 0 / 0", "NaN"),
        ("def score(s):\n    return s.d_cur > 1 if 1 else 2", None),
    ]:
        prog, why = try_compile(src, feats=feats)
        if reason is None:
            assert prog is not None, why
        else:
            assert prog is None and reason in why


def test_builtins_are_unreachable():
    prog = compile_program("def score(s):\n    return -s.d_cur")
    assert prog._fn.__globals__["__builtins__"] == {}


def test_valid_program_scores_every_feature(feats):
    for f in FEATURES:
        prog = compile_program(f"def score(s):\n    '''doc'''\n    x = s.{f}\n    return -x")
        out = prog.scores(feats)
        assert out.shape == feats["d_cur"].shape
        assert torch.equal(out, torch.broadcast_to(-feats[f], out.shape))
