"""The sandbox against hostile programs: a corpus of attacks, the operating-system limits, and
the promise that honest programs compute exactly what they computed in process.

Every corpus entry must end in a ProgramError (at validation or when it runs) within its
allowance, leave the state bank bit-identical, and leave the pool alive and answering.
"""

import time

import pytest
import torch

from epb.features import FEATURES
from epb.policy import FunctionTeacher
from epb.portfolio import collect_states
from epb.problems import random_tsp
from epb.programs import ProgramError, compile_program, evaluate, isolation, try_compile
from epb.proposers import OPS, Expr, Term
from epb.sandbox import Sandbox

DEEP_MINUS = "def score(s):\n    return " + "-" * 9000 + "s.d_cur\n"
LONG_SUM = "def score(s):\n    return " + "+".join(["1"] * 6000) + "\n"
DEEP_PARENS = "def score(s):\n    return " + "(" * 5000 + "s.d_cur" + ")" * 5000 + "\n"
DEEP_CALLS = "def score(s):\n    return " + "abs(" * 3000 + "s.d_cur" + ")" * 3000 + "\n"
DEEP_IFS = (
    "def score(s):\n"
    + "".join("    " * (k + 1) + f"if s.progress > {k}:\n" for k in range(120))
    + "    " * 121
    + "return 1\n    return 0\n"
)
HUGE_SOURCE = "def score(s):\n" + "    x = 1\n" * 3000 + "    return x\n"
NESTED_LOOPS = (
    "def score(s):\n    a = 0\n    for i in range(1000):\n        for j in range(1000):\n"
    "            for k in range(1000):\n                a = a + 1\n    return a"
)

CORPUS = [
    # imports and builtins
    ("import", "import os\ndef score(s):\n    return 1"),
    ("import", "from os import system\ndef score(s):\n    return 1"),
    ("import", "def score(s):\n    import os\n    return 1"),
    ("import", "def score(s):\n    return __import__('os').system('true')"),
    ("builtin", "def score(s):\n    return open('/etc/passwd')"),
    ("builtin", "def score(s):\n    return eval('1+1')"),
    ("builtin", "def score(s):\n    exec('x=1')\n    return 1"),
    ("builtin", "def score(s):\n    return compile('1', 'f', 'eval')"),
    ("builtin", "def score(s):\n    return getattr(s, 'd_cur')"),
    ("builtin", "def score(s):\n    return globals()"),
    ("builtin", "def score(s):\n    return vars(s)"),
    ("builtin", "def score(s):\n    breakpoint()\n    return 1"),
    ("builtin", "def score(s):\n    return type(s)"),
    # dunder and attribute walks
    ("dunder", "def score(s):\n    return s.__class__"),
    ("dunder", "def score(s):\n    return s._f"),
    ("dunder", "def score(s):\n    return s.d_cur.__class__.__mro__"),
    ("dunder", "def score(s):\n    return ().__class__.__bases__[0].__subclasses__()"),
    ("dunder", "def score(s):\n    return (1.0).__class__.__subclasses__()"),
    ("attribute walk", "def score(s):\n    return s.d_cur.data_ptr()"),
    ("attribute walk", "def score(s):\n    return s.d_cur.numpy().ctypes"),
    ("attribute walk", "def score(s):\n    x = s.d_cur\n    return x.storage()"),
    # closures and the parent's memory
    ("closure", "def score(s):\n    return exp.__globals__"),
    ("closure", "def score(s):\n    return log.__closure__"),
    ("closure", "def score(s):\n    return score.__code__"),
    ("closure", "def score(s):\n    return where.__code__.co_consts"),
    ("closure", "def score(s):\n    _num = 0.0\n    return s.d_cur"),
    ("closure", "def score(s):\n    return _num(s.d_cur)"),
    # format strings and strings
    ("format string", "def score(s):\n    return '{0.__class__}'.format(s)"),
    ("format string", "def score(s):\n    return f'{s.__class__}'"),
    ("format string", "def score(s):\n    return '%s' % s"),
    ("string bomb", "def score(s):\n    return 'x' * (2**34)"),
    ("string bomb", "def score(s):\n    return b'x' * (2**34)"),
    ("list bomb", "def score(s):\n    return [0.0] * (10**10)"),
    ("list bomb", "def score(s):\n    return (s.d_cur,) * (10**9)"),
    ("comprehension", "def score(s):\n    return sum([i for i in range(10**9)])"),
    ("comprehension", "def score(s):\n    return max(i for i in range(10**9))"),
    ("comprehension", "def score(s):\n    return {i: i for i in range(10**9)}"),
    # integer towers and big ints
    ("int tower", "def score(s):\n    return 9 ** 9 ** 9"),
    ("int tower", "def score(s):\n    t = True + True\n    return t ** t ** t ** t ** t ** t"),
    (
        "int tower",
        "def score(s):\n    for i in range(10):\n        pass\n    x = i ** (i ** i)\n    return x",
    ),
    (
        "int tower",
        "def score(s):\n    x = (1 < 2) + (1 < 2)\n    for i in range(30):\n"
        "        x = x ** x\n    return x",
    ),
    ("int tower", "def score(s):\n    return 10.0 ** 400 * s.d_cur"),
    # loops and time
    ("loop", "def score(s):\n    while True:\n        pass\n    return 1"),
    ("loop", "def score(s):\n    for i in range(10**9):\n        pass\n    return 1"),
    ("loop", NESTED_LOOPS),
    (
        "loop",
        "def score(s):\n    range = exp\n    for i in range(10**9):\n        pass\n    return 1",
    ),
    (
        "loop",
        "def score(s):\n    n = 10.0 ** 9\n    for i in range(n):\n        pass\n    return 1",
    ),
    (
        "loop",
        "def score(s):\n    for i in range(1000):\n        for i in range(1000):\n"
        "            for i in range(1000):\n                x = s.d_cur * s.d_cur\n    return x",
    ),
    # recursion and nested functions
    ("recursion", "def score(s):\n    return score(s)"),
    ("recursion", "def score(s):\n    def f(x):\n        return f(x)\n    return f(s)"),
    ("recursion", "def score(s):\n    f = lambda x: x\n    return f(s.d_cur)"),
    ("generator", "def score(s):\n    yield s.d_cur"),
    ("generator", "async def score(s):\n    return s.d_cur"),
    # deep nesting and size
    ("deep nesting", DEEP_MINUS),
    ("deep nesting", LONG_SUM),
    ("deep nesting", DEEP_PARENS),
    ("deep nesting", DEEP_CALLS),
    ("deep nesting", DEEP_IFS),
    ("deep nesting", HUGE_SOURCE),
    ("deep nesting", "def score(s):\n    return 1\x00"),
    # printing
    ("print", "def score(s):\n    print('x' * 10**7)\n    return s.d_cur"),
    ("print", "def score(s):\n    print(s.d_cur)\n    return s.d_cur"),
    # corrupting shared inputs
    ("in-place", "def score(s):\n    s.d_cur += 1\n    return s.d_cur"),
    ("in-place", "def score(s):\n    s.d_cur = 0\n    return 1"),
    ("in-place", "def score(s):\n    s = 1\n    return s"),
    ("in-place", "def score(s):\n    x = s.d_cur\n    x -= 2 * s.detour\n    return 1 / (x * 0)"),
    ("in-place", "def score(s):\n    x = s.d_cur\n    x *= 0\n    return x / x"),
    # control-flow escapes
    (
        "control flow",
        "def score(s):\n    try:\n        pass\n    except BaseException:\n"
        "        pass\n    return 1",
    ),
    ("control flow", "def score(s):\n    with s:\n        pass\n    return 1"),
    ("control flow", "def score(s):\n    raise SystemExit\n    return 1"),
    ("control flow", "def score(s):\n    global x\n    return 1"),
    ("control flow", "def score(s):\n    assert False\n    return 1"),
    ("control flow", "def score(s):\n    del s\n    return 1"),
    ("control flow", "def score(s):\n    return (x := s.d_cur)"),
    ("control flow", "class A:\n    pass\ndef score(s):\n    return 1"),
    ("control flow", "@exp\ndef score(s):\n    return 1"),
    ("control flow", "def score(s: __import__('os')):\n    return 1"),
    ("control flow", "def score(s, t=open('x')):\n    return 1"),
    ("control flow", "def score(*s):\n    return 1"),
    ("control flow", "def score(s):\n    return exp(x=1)"),
    # bad outputs
    ("output", "def score(s):\n    return 1 / (s.d_cur * 0)"),
    ("output", "def score(s):\n    return s.d_cur * 0 / 0"),
    ("output", "def score(s):\n    return (-1.0) ** 0.5 * s.d_cur"),
    ("output", "def score(s):\n    return s.d_cur * 1e38 * 1e38"),
    ("output", "def score(s):\n    x = s.d_cur\n    return"),
    ("output", "def score(s):\n    return 'a'"),
]


@pytest.fixture(scope="module")
def bank():
    g = torch.Generator().manual_seed(5)
    teach = FunctionTeacher(lambda st: torch.zeros(st.dist.shape[:2]), 1.0)
    return collect_states(teach, random_tsp(7, 11, g), starts=2)


def _snapshot(feats):
    return {k: v.clone() for k, v in feats.items()}


def test_corpus_covers_the_listed_attack_families():
    families = {f for f, _ in CORPUS}
    assert len(CORPUS) >= 31
    for f in (
        "int tower",
        "string bomb",
        "list bomb",
        "deep nesting",
        "recursion",
        "comprehension",
        "attribute walk",
        "format string",
        "closure",
        "print",
        "in-place",
    ):
        assert f in families, f


def test_every_hostile_program_is_rejected_within_its_limit(bank, sandbox):
    before = _snapshot(bank.feats)
    pids = sandbox.worker_pids()
    restarts = sandbox.stats["restarts"]
    accepted = []
    for family, src in CORPUS:
        t0 = time.perf_counter()
        prog, why = try_compile(src)
        if prog is None:
            assert why and time.perf_counter() - t0 < 1.0, (family, src[:60])
        else:
            accepted.append((family, src, prog))
    # what passed validation must fail when run; one batch over the pool
    t0 = time.perf_counter()
    out = evaluate([p for _, _, p in accepted], bank.feats)
    took = time.perf_counter() - t0
    for (family, src, _), r in zip(accepted, out, strict=True):
        assert isinstance(r, ProgramError), (family, src)
    # each program's allowance is 2 x 1 s + grace; two workers share the batch
    assert took < sum(2 * p.time_limit + sandbox.grace for _, _, p in accepted)
    assert {f for f, _, _ in accepted} >= {"int tower", "loop", "output"}
    for k, v in bank.feats.items():
        assert torch.equal(v, before[k]) and v.dtype == before[k].dtype, k
    assert sandbox.alive and sandbox.worker_pids() == pids
    assert sandbox.stats["restarts"] == restarts  # no worker had to be killed
    honest = compile_program("def score(s):\n    return -s.d_cur")
    (g,) = evaluate([honest], bank.feats)
    assert torch.equal(g, -bank.feats["d_cur"])


@pytest.mark.parametrize(
    ("src", "reason"),
    [
        (
            "def score(s):\n    for i in range(10):\n        pass\n    return i ** (i ** i)",
            "Overflow",
        ),
        ("def score(s):\n    t = True + True\n    return t ** t ** t ** t ** t ** t", "Overflow"),
        ("def score(s):\n    return 1 / (s.d_cur * 0)", "non-finite"),
        ("def score(s):\n    return s.d_cur * 0 / 0", "NaN"),
        ("def score(s):\n    return (-1.0) ** 0.5 * s.d_cur", "complex"),
        (NESTED_LOOPS, "time limit"),
    ],
)
def test_runtime_rejections_carry_their_reason(bank, src, reason):
    (r,) = evaluate([compile_program(src)], bank.feats)
    assert isinstance(r, ProgramError) and reason in str(r)
    with isolation("none"):  # the same reason in process
        (r,) = evaluate([compile_program(src)], bank.feats)
        assert isinstance(r, ProgramError) and reason in str(r)


@pytest.mark.parametrize(
    ("src", "reason"),
    [
        (DEEP_MINUS, "nested"),
        (LONG_SUM, "nested"),
        (
            "def score(s):\n    def f(x):\n        return x\n    return f(s.d_cur)",
            "nested function",
        ),
        ("def score(s):\n    range = exp\n    return 1", "cannot assign"),
        ("def score(s):\n    s.d_cur += 1\n    return 1", "read-only"),
        ("def score(s):\n    _num = 1\n    return 1", "'_'"),
    ],
)
def test_validation_rejections_carry_their_reason(src, reason):
    with pytest.raises(ProgramError, match=reason):
        compile_program(src)


def test_in_place_update_makes_a_new_value(bank):
    """`x -= ...` on a feature used to edit the cached bank in place (issue 21)."""
    before = _snapshot(bank.feats)
    prog = compile_program("def score(s):\n    x = s.d_cur\n    x -= 2 * s.detour\n    return x")
    ref = (bank.feats["d_cur"].double() - 2 * bank.feats["detour"].double()).float()
    for mode in ("process", "none"):
        with isolation(mode):
            (g,) = evaluate([prog], bank.feats)
        assert torch.equal(g, ref), mode
        for k, v in bank.feats.items():
            assert torch.equal(v, before[k]), (mode, k)


def _random_expr(gen: torch.Generator) -> Expr:
    feats = [f for f in FEATURES if f not in ("x", "y")]
    terms = []
    for _ in range(int(torch.randint(1, 6, (1,), generator=gen))):
        pick = lambda seq: seq[int(torch.randint(len(seq), (1,), generator=gen))]  # noqa: E731
        coef = float(torch.randn((), generator=gen))
        terms.append(Term(coef, pick(OPS), pick(feats), pick([None, "progress", "d_cur"])))
    return Expr(terms)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_isolated_scores_are_bit_identical_to_in_process(seed):
    """Honest programs: the process boundary changes no bit (random awkward sizes)."""
    gen = torch.Generator().manual_seed(seed)
    n = int(torch.randint(5, 23, (1,), generator=gen))
    inst = random_tsp(int(torch.randint(2, 9, (1,), generator=gen)), n, gen)
    teach = FunctionTeacher(lambda st: torch.zeros(st.dist.shape[:2]), 1.0)
    feats = collect_states(teach, inst).feats
    if seed == 2:
        feats = {k: v.double() for k, v in feats.items()}
    progs = [compile_program(_random_expr(gen).render()) for _ in range(12)]
    iso = evaluate(progs, feats)
    with isolation("none"):
        local = evaluate(progs, feats)
    for p, a, b in zip(progs, iso, local, strict=True):
        assert isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor), p.source
        assert a.dtype == feats["d_cur"].dtype and torch.equal(a, b), p.source


def test_worker_holds_no_files(sandbox):
    """Descriptors left in a worker: /dev/null and its socket to the parent, nothing else."""
    for info in sandbox.worker_info():
        kinds = set(info["fds"].values())
        assert all(k == "/dev/null" or k.startswith(("socket:", "pipe:")) for k in kinds), kinds
        assert sum(k.startswith("socket:") for k in kinds) == 1


def _big_feats(rows: int, cols: int) -> dict:
    g = torch.Generator().manual_seed(0)
    return {"d_cur": torch.rand(rows, cols, generator=g) + 0.5}


def test_memory_limit_is_a_program_error_and_the_worker_survives(sandbox):
    assert sandbox.memory_mb == 1024
    feats = _big_feats(4000, 2000)  # 32 MB per live copy: 40 copies exceed the 1 GiB cap
    lines = "".join(f"    a{k} = s.d_cur * {k + 1}\n" for k in range(40))
    src = "def score(s):\n" + lines + "    return a0 + a39\n"
    pid = sandbox.worker_pids()
    # a generous time limit: fresh pages are slow to fault in on a loaded machine
    (r,) = sandbox.evaluate([compile_program(src, time_limit=30)], feats)
    assert isinstance(r, ProgramError) and "memory limit" in str(r), r
    (ok,) = sandbox.evaluate([compile_program("def score(s):\n    return s.d_cur * 2")], feats)
    assert torch.equal(ok, feats["d_cur"] * 2) and sandbox.worker_pids() == pid


def _long_line(repeats: int) -> str:
    """One source line of ``400 x repeats`` products: all in C, no trace event in between."""
    chain = " * ".join(["x"] * 400)
    return "def score(s):\n    x = s.d_cur\n    " + "; ".join([f"x = {chain}"] * repeats) + "\n"


def test_a_single_long_operation_is_killed_by_the_wall_clock(sandbox):
    """2,000 products of a 4M-entry tensor on one line (tens of seconds in process): the line
    tracer never sees it; the parent kills the worker at 2 x time_limit + grace and starts a
    new one."""
    feats = _big_feats(2000, 2000)
    prog = compile_program(_long_line(5) + "    return x * 0\n", time_limit=1.0)
    restarts, kills = sandbox.stats["restarts"], len(sandbox.kills)
    (r,) = sandbox.evaluate([prog], feats)
    assert isinstance(r, ProgramError), r
    if "wall-clock" in str(r):  # (on a quiet machine SIGXCPU may come first: also a pass)
        assert len(sandbox.kills) == kills + 1
        silent, allowed = sandbox.kills[-1]
        # the parent wakes at the deadline; late only by its scheduling delay (loaded machine)
        assert allowed == 2 * 1.0 + 0.05 + sandbox.grace and allowed <= silent < allowed + 1.0
    else:
        assert "CPU time limit" in str(r), r
    assert sandbox.stats["restarts"] == restarts + 1 and sandbox.alive
    honest = compile_program("def score(s):\n    return -s.d_cur")
    (g,) = sandbox.evaluate([honest], feats)
    assert torch.equal(g, -feats["d_cur"])


@pytest.mark.slow
def test_cpu_limit_kills_with_sigxcpu():
    """With a long wall-clock grace, the worker's own RLIMIT_CPU ends the program."""
    box = Sandbox(workers=1, grace=60.0).start()
    try:
        feats = _big_feats(4000, 2000)
        prog = compile_program(_long_line(5) + "    return x\n", time_limit=1.0)
        (r,) = box.evaluate([prog], feats)
        assert isinstance(r, ProgramError) and "CPU time limit" in str(r), r
        assert box.stats["restarts"] == 1 and box.alive
    finally:
        box.close()


def test_a_worker_that_died_between_batches_is_replaced(sandbox, bank):
    """A worker killed from outside (the OOM killer, an operator) costs no program its result."""
    import os
    import signal

    victim = sandbox.worker_pids()[0]
    os.kill(victim, signal.SIGKILL)
    restarts = sandbox.stats["restarts"]
    progs = [compile_program(f"def score(s):\n    return -s.d_cur * {k + 1}") for k in range(4)]
    out = evaluate(progs, bank.feats)
    for k, g in enumerate(out):
        assert torch.equal(g, -bank.feats["d_cur"] * (k + 1))
    assert sandbox.stats["restarts"] == restarts + 1 and sandbox.alive
    assert victim not in sandbox.worker_pids()
