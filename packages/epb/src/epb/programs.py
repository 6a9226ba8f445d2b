r"""Programs: small, human-readable Python scoring functions, validated and run in a sandbox.

A program is the source of one function ``def score(s): ...`` returning a score per candidate
node (higher = preferred); ``s`` exposes the features of :mod:`epb.features` as attributes
(``s.d_cur``, ``s.min_to_visited``, ...). Its per-step action distribution is

.. math:: p_k(a \mid s) = \frac{\exp(\beta_k\, g_k(s)_a)}{\sum_{b\ \mathrm{feasible}}
    \exp(\beta_k\, g_k(s)_b)}

with a temperature :math:`1/\beta_k` learned with the router (:mod:`epb.portfolio`).

**Validation** (the first, cheap filter, in the calling process): the source must parse, define
exactly one function ``score(s)``, and use only allow-listed syntax: assignments, arithmetic
(``+ - * / **``), comparisons, ``x if c else y``, ``if`` blocks, ``for i in range(K)`` with a
literal ``K <= 1000`` and calls to the functions of :data:`SAFE_FUNCTIONS`. Attribute access is
allowed only as a read of ``s.<feature>``; no imports, strings, subscripts, lambdas, nested
functions, ``while`` loops, names starting with ``_`` or assignments to ``s`` or to a safe
function's name. The accepted tree is then rewritten so that no Python ``int`` can appear at run
time (integer and bool literals, loop variables and scalar comparisons become floats: a power
tower overflows instead of stalling the interpreter) and ``x op= y`` becomes ``x = x op y`` (a new
value: a program cannot edit a feature tensor in place).

**Execution** (:func:`evaluate`): by default in the worker processes of :mod:`epb.sandbox`
(operating-system limits on CPU seconds, address space and file descriptors, a wall-clock kill
from the parent, fresh copies of the features); :func:`set_isolation` ``("none")`` runs them in
this process instead (trusted programs, benchmarks). Either way a line tracer enforces the
program's time limit and the output must be a finite real tensor broadcastable to ``(R, n)``.
Every failure is a :class:`ProgramError` with the reason; :func:`try_compile` returns the reason
instead of raising.

Example:
    >>> prog = compile_program("def score(s):\n    return -s.d_cur")
    >>> bad, why = try_compile("import os\ndef score(s):\n    return 0")
    >>> bad is None and "import" in why
    True
"""

from __future__ import annotations

import ast
import contextlib
import math
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from torch import Tensor

from .features import FEATURES

MAX_RANGE = 1000
MAX_SOURCE = 20_000
DEFAULT_TIME_LIMIT = 1.0
#: Finite scores are clamped to this magnitude (a softmax only sees differences).
SCORE_CLAMP = 1e4


class ProgramError(Exception):
    """A program was rejected (validation) or failed (sandboxed run); ``str()`` is the reason."""


def _t(x) -> Tensor:
    return x if isinstance(x, Tensor) else torch.as_tensor(float(x))


def _float_range(k):
    # loop variables are floats: `i ** (i ** i)` overflows instead of building a huge int
    return map(float, range(int(k)))


SAFE_FUNCTIONS = {
    "exp": lambda x: torch.exp(_t(x).clamp(max=60.0)),
    "log": lambda x: torch.log(_t(x).clamp_min(1e-9)),
    "sqrt": lambda x: torch.sqrt(_t(x).clamp_min(0.0)),
    "abs": lambda x: torch.abs(_t(x)),
    "tanh": lambda x: torch.tanh(_t(x)),
    "square": lambda x: _t(x) ** 2,
    "minimum": lambda a, b: torch.minimum(_t(a), _t(b)),
    "maximum": lambda a, b: torch.maximum(_t(a), _t(b)),
    "clip": lambda x, lo, hi: torch.clamp(_t(x), float(lo), float(hi)),
    "where": lambda c, a, b: torch.where(_t(c).bool(), _t(a), _t(b)),
    "mean": lambda x: _t(x).mean(-1, keepdim=True) if _t(x).dim() else _t(x),
    "rowmin": lambda x: _t(x).amin(-1, keepdim=True) if _t(x).dim() else _t(x),
    "rowmax": lambda x: _t(x).amax(-1, keepdim=True) if _t(x).dim() else _t(x),
    "range": _float_range,
}
SAFE_CONSTANTS = {"pi": math.pi}


def _num(x):
    """A scalar comparison gives a float, not a bool (bools are ints: `True + True` is 2)."""
    return float(x) if isinstance(x, bool) else x


#: What a compiled program's globals hold: no builtins, the safe functions, the float helper.
def _program_globals() -> dict:
    return {"__builtins__": {}, **SAFE_FUNCTIONS, **SAFE_CONSTANTS, "_num": _num}


_ALLOWED_NODES = (
    ast.Module,
    ast.FunctionDef,
    ast.arguments,
    ast.arg,
    ast.Return,
    ast.Assign,
    ast.AugAssign,
    ast.Name,
    ast.Load,
    ast.Store,
    ast.Attribute,
    ast.BinOp,
    ast.UnaryOp,
    ast.Compare,
    ast.Call,
    ast.Constant,
    ast.IfExp,
    ast.If,
    ast.For,
    ast.Expr,
    ast.Add,
    ast.Sub,
    ast.Mult,
    ast.Div,
    ast.Pow,
    ast.USub,
    ast.UAdd,
    ast.Lt,
    ast.LtE,
    ast.Gt,
    ast.GtE,
    ast.Eq,
    ast.NotEq,
    ast.Pass,
)
_FRIENDLY = {
    ast.Import: "imports are not allowed",
    ast.ImportFrom: "imports are not allowed",
    ast.While: "while loops are not allowed (programs must terminate; use for i in range(K))",
    ast.Lambda: "lambdas are not allowed",
    ast.Subscript: "subscripts are not allowed",
    ast.ClassDef: "class definitions are not allowed",
    ast.Global: "global statements are not allowed",
    ast.Nonlocal: "nonlocal statements are not allowed",
    ast.With: "with blocks are not allowed",
    ast.Try: "try blocks are not allowed",
    ast.Raise: "raise is not allowed",
    ast.JoinedStr: "strings are not allowed",
    ast.AsyncFunctionDef: "async functions are not allowed",
}


class _Harden(ast.NodeTransformer):
    """Rewrites an accepted tree so that it computes the same values without Python ints and
    without in-place updates (see the module docstring)."""

    def visit_Constant(self, node):
        if isinstance(node.value, (int, bool)):  # bool is an int subclass
            return ast.copy_location(ast.Constant(float(node.value)), node)
        return node

    def visit_Call(self, node):
        if getattr(node.func, "id", None) == "range":
            return node  # its literal bound was checked as an int; the loop variable is a float
        self.generic_visit(node)
        return node

    def visit_Compare(self, node):
        self.generic_visit(node)
        return ast.copy_location(ast.Call(ast.Name("_num", ast.Load()), [node], []), node)

    def visit_AugAssign(self, node):
        self.generic_visit(node)
        load = ast.Name(node.target.id, ast.Load())
        value = ast.BinOp(load, node.op, node.value)
        target = ast.Name(node.target.id, ast.Store())
        return ast.copy_location(ast.Assign([target], value), node)


def _parse(source: str) -> ast.Module:
    try:
        return ast.parse(source)
    except SyntaxError as e:
        raise ProgramError(f"syntax error: {e.msg} (line {e.lineno})") from None
    except (RecursionError, MemoryError) as e:
        # a 9,000-deep expression exhausts the parser's stack before any check can run
        raise ProgramError(f"source too deeply nested ({type(e).__name__})") from None
    except Exception as e:  # ValueError (null bytes) and whatever else the parser raises
        raise ProgramError(f"cannot parse the source: {type(e).__name__}: {e}") from None


def validate(source: str, name: str = "score") -> ast.Module:
    """Parse and check ``source`` against the allow-list; returns the hardened tree.

    Raises:
        ProgramError: with the reason (syntax error, forbidden construct, unknown feature,
            nesting too deep...).
    """
    if not isinstance(source, str) or len(source) > MAX_SOURCE:
        raise ProgramError(f"source must be a string of at most {MAX_SOURCE} characters")
    tree = _parse(source)
    try:
        _check(tree, name)
        tree = _Harden().visit(tree)
        return ast.fix_missing_locations(tree)
    except ProgramError:
        raise
    except (RecursionError, MemoryError) as e:  # the recursive visitors on deep trees
        raise ProgramError(f"source too deeply nested ({type(e).__name__})") from None


def _check(tree: ast.Module, name: str) -> None:
    for node in ast.walk(tree):
        if type(node) in _FRIENDLY:
            raise ProgramError(f"line {getattr(node, 'lineno', '?')}: {_FRIENDLY[type(node)]}")
    funcs = [n for n in tree.body if isinstance(n, ast.FunctionDef)]
    if len(tree.body) != 1 or len(funcs) != 1:
        raise ProgramError(f"the source must be exactly one function definition `def {name}(s)`")
    fn = funcs[0]
    if fn.name != name:
        raise ProgramError(f"the function must be named {name!r}, got {fn.name!r}")
    a = fn.args
    if len(a.args) != 1 or a.vararg or a.kwarg or a.kwonlyargs or a.posonlyargs or a.defaults:
        raise ProgramError(f"`{name}` must take exactly one argument (the state)")
    if fn.decorator_list or fn.returns or a.args[0].annotation:
        raise ProgramError("decorators and annotations are not allowed")
    state = a.args[0].arg
    if state.startswith("_"):
        raise ProgramError(f"names starting with '_' are not allowed ({state!r})")
    reserved = {state, *SAFE_FUNCTIONS, *SAFE_CONSTANTS}
    assigned = {state}
    for node in ast.walk(fn):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            if node.id in reserved:
                raise ProgramError(f"line {node.lineno}: cannot assign to {node.id!r}")
            assigned.add(node.id)
    doc = ast.get_docstring(fn, clean=False)
    for node in ast.walk(tree):
        typ = type(node)
        if not isinstance(node, _ALLOWED_NODES):
            raise ProgramError(
                f"line {getattr(node, 'lineno', '?')}: {typ.__name__} is not allowed"
            )
        if isinstance(node, ast.FunctionDef) and node is not fn:
            raise ProgramError(f"line {node.lineno}: nested function definitions are not allowed")
        if isinstance(node, ast.Constant):
            ok = isinstance(node.value, (int, float, bool)) or (
                isinstance(node.value, str) and node.value == doc
            )
            if not ok:
                raise ProgramError(f"line {node.lineno}: only numeric literals are allowed")
        if isinstance(node, ast.Attribute):
            if not (isinstance(node.value, ast.Name) and node.value.id == state):
                raise ProgramError(
                    f"line {node.lineno}: attribute access is only allowed as {state}.<feature>"
                )
            if node.attr not in FEATURES:
                raise ProgramError(
                    f"line {node.lineno}: unknown feature {state}.{node.attr} "
                    f"(known: {', '.join(FEATURES)})"
                )
            if not isinstance(node.ctx, ast.Load):
                raise ProgramError(f"line {node.lineno}: features are read-only")
        if isinstance(node, ast.Name) and node.id.startswith("_"):
            raise ProgramError(f"line {node.lineno}: names starting with '_' are not allowed")
        if (
            isinstance(node, ast.Name)
            and isinstance(node.ctx, ast.Load)
            and node.id not in assigned
            and node.id not in SAFE_FUNCTIONS
            and node.id not in SAFE_CONSTANTS
        ):
            raise ProgramError(f"line {node.lineno}: name {node.id!r} is not allowed")
        if isinstance(node, ast.Call):
            if not (isinstance(node.func, ast.Name) and node.func.id in SAFE_FUNCTIONS):
                raise ProgramError(
                    f"line {node.lineno}: only calls to {', '.join(SAFE_FUNCTIONS)} are allowed"
                )
            if node.keywords:
                raise ProgramError(f"line {node.lineno}: keyword arguments are not allowed")
            if node.func.id == "range":
                arg = node.args[0] if len(node.args) == 1 else None
                ok = (
                    isinstance(arg, ast.Constant)
                    and type(arg.value) is int
                    and 0 <= arg.value <= MAX_RANGE
                )
                if not ok:
                    raise ProgramError(
                        f"line {node.lineno}: range() needs one integer literal <= {MAX_RANGE}"
                    )
        if isinstance(node, ast.For):
            it = node.iter
            if not (
                isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "range"
            ) or not isinstance(node.target, ast.Name):
                raise ProgramError(f"line {node.lineno}: loops must be `for i in range(K)`")
            if node.orelse:
                raise ProgramError(f"line {node.lineno}: for-else is not allowed")
        if isinstance(node, ast.AugAssign) and not isinstance(node.target, ast.Name):
            raise ProgramError(
                f"line {node.lineno}: only plain names can be updated (features are read-only)"
            )
        if isinstance(node, ast.Assign) and not all(isinstance(t, ast.Name) for t in node.targets):
            raise ProgramError(
                f"line {node.lineno}: only plain names can be assigned (features are read-only)"
            )
    if not any(isinstance(n, ast.Return) and n.value is not None for n in ast.walk(fn)):
        raise ProgramError(f"`{name}` never returns a score")


def features_used(tree: ast.Module) -> tuple[str, ...]:
    """The features a validated tree reads (what the sandbox has to ship to a worker)."""
    names = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    return tuple(f for f in FEATURES if f in names)


def compile_source(source: str, name: str = "program"):
    """Validate and compile; returns ``(score_function, features_used)``.

    Raises:
        ProgramError: the validation's reason, or the compiler's (deep trees).
    """
    tree = validate(source)
    try:
        code = compile(tree, f"<program {name}>", "exec")
    except Exception as e:  # RecursionError / MemoryError / ValueError from the compiler
        raise ProgramError(f"cannot compile: {type(e).__name__}: {e}") from None
    env = _program_globals()
    exec(code, env)  # defines score() only: the tree was allow-listed above
    return env["score"], features_used(tree)


class _Features:
    """Attribute view on a feature dictionary; attributes cannot be set."""

    __slots__ = ("_f",)

    def __init__(self, feats: dict[str, Tensor]):
        object.__setattr__(self, "_f", feats)

    def __getattr__(self, name):
        try:
            return self._f[name]
        except KeyError:
            raise AttributeError(name) from None

    def __setattr__(self, name, value):
        raise AttributeError("features are read-only")


class _Timeout(BaseException):
    """Raised inside the tracer; a BaseException so program code cannot swallow it."""


def _is_oom(e: BaseException) -> bool:
    return isinstance(e, MemoryError) or (
        isinstance(e, RuntimeError) and "can't allocate memory" in str(e)
    )


def run_compiled(fn, feats, ref: Tensor, time_limit: float) -> Tensor:
    """Run a compiled program on ``feats`` (a dict or any attribute-style view) under a line
    tracer with a wall-clock limit; returns the checked ``ref``-shaped scores.

    Raises:
        ProgramError: time limit, memory, runtime error (with its type), bad output.
    """
    deadline = time.perf_counter() + time_limit

    def tracer(frame, event, arg):
        if time.perf_counter() > deadline:
            raise _Timeout()
        return tracer

    view = _Features(feats) if isinstance(feats, dict) else feats
    old = sys.gettrace()
    sys.settrace(tracer)
    try:
        out = fn(view)
    except _Timeout:
        raise ProgramError(f"time limit of {time_limit:g}s exceeded") from None
    except Exception as e:  # any runtime failure is a rejection, never a crash
        if _is_oom(e):
            raise ProgramError(f"memory limit exceeded ({type(e).__name__})") from None
        msg = str(e)[:300]
        raise ProgramError(f"runtime error: {type(e).__name__}: {msg}") from None
    finally:
        sys.settrace(old)
    return check_output(out, ref)


def check_output(out, ref: Tensor) -> Tensor:
    """``out`` as a finite real tensor of ``ref``'s shape and dtype, clamped to
    ``+-SCORE_CLAMP``.

    Raises:
        ProgramError: not a number / tensor, complex, wrong shape, NaN or infinite values.
    """
    if isinstance(out, Tensor):
        if out.is_complex():
            raise ProgramError("score returned complex values")
    elif isinstance(out, bool) or not isinstance(out, (int, float)):
        raise ProgramError(f"score must return a number or tensor, got {type(out).__name__}")
    out = _t(out).to(ref.dtype)
    try:
        out = torch.broadcast_to(out, ref.shape)
    except RuntimeError:
        raise ProgramError(
            f"score returned shape {tuple(out.shape)}, not broadcastable to {tuple(ref.shape)}"
        ) from None
    if torch.isnan(out).any():
        raise ProgramError("score returned NaN (non-finite output)")
    if torch.isinf(out).any():
        raise ProgramError("score returned infinite values (non-finite output)")
    return out.clamp(-SCORE_CLAMP, SCORE_CLAMP)


@dataclass
class Program:
    """A validated program. ``expr`` is set when it came from the offline expression search
    (:class:`epb.proposers.Expr`), so it can be mutated further; ``origin`` says who wrote it."""

    source: str
    name: str = "program"
    expr: object | None = None
    origin: str = "seed"
    time_limit: float = DEFAULT_TIME_LIMIT
    _fn: object = field(default=None, repr=False, compare=False)
    features: tuple[str, ...] = field(default=(), repr=False, compare=False)

    def __post_init__(self):
        if not (isinstance(self.time_limit, (int, float)) and 0 < self.time_limit <= 60):
            raise ValueError(f"time_limit must be in (0, 60] seconds, got {self.time_limit!r}")
        self._fn, self.features = compile_source(self.source, self.name)

    def scores(self, feats: dict[str, Tensor]) -> Tensor:
        """Run the program in the sandbox; ``(R, n)`` finite scores.

        Raises:
            ProgramError: time, memory or CPU limit, runtime error, wrong shape or non-finite
                output.
        """
        (out,) = evaluate([self], feats)
        if isinstance(out, ProgramError):
            raise out
        return out

    def scores_in_process(self, feats: dict[str, Tensor]) -> Tensor:
        """Run in this process (AST and tracer only; for trusted programs and benchmarks)."""
        return run_compiled(self._fn, feats, feats["d_cur"], self.time_limit)


_ISOLATION = {"mode": os.environ.get("EPB_ISOLATION", "process")}
ISOLATION_MODES = ("process", "none")


def set_isolation(mode: str) -> str:
    """Where :func:`evaluate` runs programs: ``"process"`` (the :mod:`epb.sandbox` worker pool,
    the default) or ``"none"`` (this process). Returns the previous mode."""
    if mode not in ISOLATION_MODES:
        raise ValueError(f"isolation must be one of {ISOLATION_MODES}, got {mode!r}")
    old, _ISOLATION["mode"] = _ISOLATION["mode"], mode
    return old


def get_isolation() -> str:
    return _ISOLATION["mode"]


@contextlib.contextmanager
def isolation(mode: str):
    """``with isolation("none"): ...`` runs programs in this process inside the block."""
    old = set_isolation(mode)
    try:
        yield
    finally:
        set_isolation(old)


def evaluate(programs: Sequence[Program], feats: dict[str, Tensor]) -> list[Tensor | ProgramError]:
    """Scores of each program on the same states (one batch: one round trip to the workers).

    Returns:
        per program, a ``feats["d_cur"]``-shaped tensor or the :class:`ProgramError` it raised
        (one failing program does not stop the others).
    """
    if _ISOLATION["mode"] == "process":
        from .sandbox import default_sandbox

        return default_sandbox().evaluate(programs, feats)
    out: list[Tensor | ProgramError] = []
    for p in programs:
        try:
            out.append(p.scores_in_process(feats))
        except ProgramError as e:
            out.append(e)
    return out


def compile_program(source: str, name: str = "program", **kw) -> Program:
    """Validate and compile; raises :class:`ProgramError` with the reason."""
    return Program(source, name, **kw)


def try_compile(source: str, name: str = "program", feats: dict | None = None, **kw):
    """``(program, None)`` or ``(None, reason)``; with ``feats`` also trial-runs the program."""
    try:
        prog = Program(source, name, **kw)
        if feats is not None:
            prog.scores(feats)
        return prog, None
    except ProgramError as e:
        return None, str(e)
