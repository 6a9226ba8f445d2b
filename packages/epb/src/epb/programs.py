r"""Programs: small, human-readable Python scoring functions, validated and run in a sandbox.

A program is the source of one function ``def score(s): ...`` returning a score per candidate
node (higher = preferred); ``s`` exposes the features of :mod:`epb.features` as attributes
(``s.d_cur``, ``s.min_to_visited``, ...). Its per-step action distribution is

.. math:: p_k(a \mid s) = \frac{\exp(\beta_k\, g_k(s)_a)}{\sum_{b\ \mathrm{feasible}}
    \exp(\beta_k\, g_k(s)_b)}

with a temperature :math:`1/\beta_k` learned with the router (:mod:`epb.portfolio`).

**Validation** (before anything runs): the source must parse, define exactly one function
``score(s)``, and use only allow-listed syntax: assignments, arithmetic (``+ - * / **``),
comparisons, ``x if c else y``, ``if`` blocks, ``for i in range(K)`` with a literal ``K <= 1000``
and calls to the functions of :data:`SAFE_FUNCTIONS`. Attribute access is allowed only as
``s.<feature>``; no imports, strings, subscripts, lambdas, ``while`` loops or other names.
Integer literals become floats (so ``9 ** 9 ** 9`` cannot stall the interpreter).

**Sandbox** (when it runs): no builtins, only the safe functions in scope, a wall-clock limit
checked on every executed line (``sys.settrace``), and a check that the result is a finite
tensor broadcastable to ``(R, n)``. Every failure raises :class:`ProgramError` with the reason;
:func:`try_compile` returns the reason instead of raising.

Example:
    >>> prog = compile_program("def score(s):\n    return -s.d_cur")
    >>> bad, why = try_compile("import os\ndef score(s):\n    return 0")
    >>> bad is None and "import" in why
    True
"""

from __future__ import annotations

import ast
import math
import sys
import time
from dataclasses import dataclass, field

import torch
from torch import Tensor

from .features import FEATURES

MAX_RANGE = 1000
DEFAULT_TIME_LIMIT = 1.0


class ProgramError(Exception):
    """A program was rejected (validation) or failed (sandboxed run); ``str()`` is the reason."""


def _t(x) -> Tensor:
    return x if isinstance(x, Tensor) else torch.as_tensor(float(x))


def _per_state(op):
    def f(x):
        x = _t(x)
        return op(x) if x.dim() == 0 else op(x.reshape(x.shape[0], -1) if x.dim() > 1 else x)

    return f


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
    "range": range,
}
SAFE_CONSTANTS = {"pi": math.pi}

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
    ast.With: "with blocks are not allowed",
    ast.Try: "try blocks are not allowed",
    ast.Raise: "raise is not allowed",
}


class _IntToFloat(ast.NodeTransformer):
    def visit_Constant(self, node):
        if isinstance(node.value, int) and not isinstance(node.value, bool):
            return ast.copy_location(ast.Constant(float(node.value)), node)
        return node


def validate(source: str, name: str = "score") -> ast.Module:
    """Parse and check ``source`` against the allow-list; returns the (int->float) tree.

    Raises:
        ProgramError: with the reason (syntax error, forbidden construct, unknown feature...).
    """
    if not isinstance(source, str) or len(source) > 20_000:
        raise ProgramError("source must be a string of at most 20000 characters")
    try:
        tree = ast.parse(source)
    except SyntaxError as e:
        raise ProgramError(f"syntax error: {e.msg} (line {e.lineno})") from None
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
    if fn.decorator_list or fn.returns:
        raise ProgramError("decorators and annotations are not allowed")
    state = a.args[0].arg
    assigned = {state}
    for node in ast.walk(fn):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            assigned.add(node.id)
    doc = ast.get_docstring(fn, clean=False)
    for node in ast.walk(tree):
        typ = type(node)
        if typ in _FRIENDLY:
            raise ProgramError(f"line {getattr(node, 'lineno', '?')}: {_FRIENDLY[typ]}")
        if not isinstance(node, _ALLOWED_NODES):
            raise ProgramError(
                f"line {getattr(node, 'lineno', '?')}: {typ.__name__} is not allowed"
            )
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
        if (
            isinstance(node, ast.Name)
            and isinstance(node.ctx, ast.Load)
            and (
                node.id not in assigned
                and node.id not in SAFE_FUNCTIONS
                and (node.id not in SAFE_CONSTANTS)
            )
        ):
            raise ProgramError(f"line {node.lineno}: name {node.id!r} is not allowed")
        if isinstance(node, ast.Call):
            if not (isinstance(node.func, ast.Name) and node.func.id in SAFE_FUNCTIONS):
                raise ProgramError(
                    f"line {node.lineno}: only calls to {', '.join(SAFE_FUNCTIONS)} are allowed"
                )
            if node.keywords:
                raise ProgramError(f"line {node.lineno}: keyword arguments are not allowed")
            if node.func.id == "range" and node.func.id not in assigned:
                bad = len(node.args) != 1 or not (
                    isinstance(node.args[0], ast.Constant)
                    and isinstance(node.args[0].value, int)
                    and 0 <= node.args[0].value <= MAX_RANGE
                )
                if bad:
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
        if isinstance(node, ast.Name) and node.id.startswith("__"):
            raise ProgramError(f"line {node.lineno}: dunder names are not allowed")
    if not any(isinstance(n, ast.Return) and n.value is not None for n in ast.walk(fn)):
        raise ProgramError(f"`{name}` never returns a score")
    # range() bounds were checked on the int literal; every other int becomes a float
    tree = _KeepRangeInts().visit(tree)
    return ast.fix_missing_locations(tree)


class _KeepRangeInts(_IntToFloat):
    def visit_Call(self, node):
        if getattr(node.func, "id", None) == "range":
            return node
        self.generic_visit(node)
        return node


class _Features:
    """Read-only attribute view on a feature dictionary."""

    __slots__ = ("_f",)

    def __init__(self, feats: dict[str, Tensor]):
        object.__setattr__(self, "_f", feats)

    def __getattr__(self, name):
        try:
            return self._f[name]
        except KeyError:
            raise AttributeError(name) from None


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

    def __post_init__(self):
        tree = validate(self.source)
        code = compile(tree, f"<program {self.name}>", "exec")
        env = {"__builtins__": {}, **SAFE_FUNCTIONS, **SAFE_CONSTANTS}
        exec(code, env)  # defines score() only: the tree was allow-listed above
        self._fn = env["score"]

    def scores(self, feats: dict[str, Tensor]) -> Tensor:
        """Run the program in the sandbox; ``(R, n)`` finite scores.

        Raises:
            ProgramError: time limit exceeded, runtime error, wrong shape or non-finite output.
        """
        ref = feats["d_cur"]
        deadline = time.perf_counter() + self.time_limit

        def tracer(frame, event, arg):
            if time.perf_counter() > deadline:
                raise _Timeout()
            return tracer

        old = sys.gettrace()
        sys.settrace(tracer)
        try:
            out = self._fn(_Features(feats))
        except _Timeout:
            raise ProgramError(f"time limit of {self.time_limit:g}s exceeded") from None
        except ProgramError:
            raise
        except Exception as e:  # any runtime failure is a rejection, never a crash
            raise ProgramError(f"runtime error: {type(e).__name__}: {e}") from None
        finally:
            sys.settrace(old)
        if isinstance(out, bool) or not isinstance(out, (Tensor, int, float)):
            raise ProgramError(f"score must return a number or tensor, got {type(out).__name__}")
        out = _t(out).to(ref.dtype)
        try:
            out = torch.broadcast_to(out, ref.shape)
        except RuntimeError:
            raise ProgramError(
                f"score returned shape {tuple(out.shape)}, not broadcastable to {tuple(ref.shape)}"
            ) from None
        if torch.isnan(out).any():
            raise ProgramError("score returned NaN")
        return out.clamp(-1e4, 1e4)


class _Timeout(BaseException):
    """Raised inside the tracer; a BaseException so program code cannot swallow it."""


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
