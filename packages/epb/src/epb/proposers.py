r"""Proposers: who rewrites a program from feedback (the "textual gradient" of EPB).

Both proposers implement ``propose(request) -> list[Program]``; the loop keeps a candidate only
if validation fidelity improves, so a proposer may return anything (or nothing).

* :class:`ExpressionProposer` (offline default, no network): programs are typed expressions
  :math:`g(s) = \sum_m c_m\, \phi_m(f_m(s)) [\cdot h_m(s)]` over the feature vocabulary
  (:mod:`epb.features`), :math:`\phi \in \{x, x^2, \sqrt x, \log x\}` and an optional per-state or
  per-node factor :math:`h`. Search moves: feature swap, operator change, add a term, drop a term;
  the constants :math:`c` of each candidate are fitted by Adam on the request's differentiable
  objective (the KL to the teacher, see :class:`ProposalRequest`), and the best candidates are
  rendered as Python with :func:`ast.unparse`.
* :class:`LLMProposer`: an OpenAI-compatible chat endpoint (``/chat/completions``) prompted with
  the program and the feedback (templates in ``epb/prompts``); replies are parsed for a
  ```` ```python ```` block, validated and trial-run in the sandbox (one batch for all the
  samples). HTTP errors, timeouts, malformed JSON, missing code and refused or failing programs
  are recorded in :attr:`LLMProposer.errors` (refused programs also counted in
  :attr:`LLMProposer.rejected`) and yield no candidate; nothing a reply holds can raise.

Example:
    >>> e = Expr([Term(-1.0, "id", "d_cur")])
    >>> print(e.render())
    def score(s):
        return -1.0 * s.d_cur
"""

from __future__ import annotations

import ast
import json
import math
import os
import random
import re
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch
from torch import Tensor

from .features import FEATURES, NODE_FEATURES
from .portfolio import adam_minimise
from .programs import SAFE_FUNCTIONS, Program, ProgramError, compile_program, evaluate

OPS = ("id", "sq", "sqrt", "log")
FACTORS = ("progress", "left", "remaining", "d_cur_first", "d_cur", "min_to_visited")


@dataclass(frozen=True)
class Term:
    """``coef * op(feature) [* factor]``."""

    coef: float
    op: str
    feature: str
    factor: str | None = None


def _op(op: str, x: Tensor) -> Tensor:
    if op == "id":
        return x
    if op == "sq":
        return x * x
    if op == "sqrt":
        return torch.sqrt(x.clamp_min(0.0))
    if op == "log":
        return torch.log(x.clamp_min(1e-9))
    raise ValueError(f"unknown op {op!r}")


def _op_ast(op: str, x: ast.expr) -> ast.expr:
    if op == "id":
        return x
    name = {"sq": "square", "sqrt": "sqrt", "log": "log"}[op]
    return ast.Call(ast.Name(name, ast.Load()), [x], [])


@dataclass(frozen=True)
class Expr:
    """A sum of :class:`Term`; renders to a ``score`` program."""

    terms: list[Term]

    def term_values(self, feats: dict[str, Tensor]) -> Tensor:
        """``(S, M, n)`` unscaled term values (coefficient 1)."""
        ref = feats["d_cur"]
        vals = []
        for t in self.terms:
            v = _op(t.op, feats[t.feature])
            if t.factor is not None:
                v = v * feats[t.factor]
            vals.append(torch.broadcast_to(v, ref.shape))
        return torch.stack(vals, 1)

    def render(self, name: str = "score", digits: int = 4) -> str:
        expr = None
        for t in self.terms:
            x = ast.Attribute(ast.Name("s", ast.Load()), t.feature, ast.Load())
            x = _op_ast(t.op, x)
            if t.factor is not None:
                fac = ast.Attribute(ast.Name("s", ast.Load()), t.factor, ast.Load())
                x = ast.BinOp(x, ast.Mult(), fac)
            c = float(f"{t.coef:.{digits}g}")
            term = ast.BinOp(ast.Constant(c), ast.Mult(), x)
            expr = term if expr is None else ast.BinOp(expr, ast.Add(), term)
        body = [ast.Return(expr if expr is not None else ast.Constant(0.0))]
        args = ast.arguments(
            posonlyargs=[], args=[ast.arg("s")], kwonlyargs=[], kw_defaults=[], defaults=[]
        )
        fn = ast.FunctionDef(name=name, args=args, body=body, decorator_list=[])
        mod = ast.fix_missing_locations(ast.Module([fn], []))
        return ast.unparse(mod).replace("+ -", "- ")

    def with_coefs(self, coefs) -> Expr:
        return Expr([replace(t, coef=float(c)) for t, c in zip(self.terms, coefs, strict=True)])


@dataclass
class FeedbackItem:
    """One disagreement: the teacher's choice vs the program's, with the attributed loss."""

    state: int
    stage: float
    teacher_choice: int
    program_choice: int
    loss: float
    teacher_feats: dict[str, float]
    program_feats: dict[str, float]

    def text(self) -> str:
        keys = [
            k
            for k in ("d_cur", "min_to_visited", "detour", "d_first", "min_to_unvisited", "demand")
            if k in self.teacher_feats
        ]
        tf = ", ".join(f"{k}={self.teacher_feats[k]:.3f}" for k in keys)
        pf = ", ".join(f"{k}={self.program_feats[k]:.3f}" for k in keys)
        return (
            f"- stage {self.stage:.2f}: teacher picks node {self.teacher_choice} ({tf}); "
            f"program picks node {self.program_choice} ({pf}); loss {self.loss:.3f}"
        )


@dataclass
class ProposalRequest:
    """What a proposer gets.

    Attributes:
        program: the program to rewrite (``None``: propose a new one, Block II boosting).
        feats: features of the focus states (``(S, n)`` tensors).
        objective: differentiable ``scores (S, n) -> loss``, the KL to the teacher on the focus
            states with this program's scores plugged into the portfolio (or alone).
        feedback: the worst disagreements, for text-based proposers.
        context: template fields (``name``, ``stage``, ``weight``, ``portfolio``, ``summary``).
    """

    program: Program | None
    feats: dict[str, Tensor]
    objective: Callable[[Tensor], Tensor]
    feedback: list[FeedbackItem] = field(default_factory=list)
    context: dict = field(default_factory=dict)


def fit_constants(
    expr: Expr, feats: dict[str, Tensor], objective, steps: int = 60, lr: float = 0.1
) -> tuple[Expr, float]:
    """Fit the coefficients of ``expr`` by Adam on ``objective``; terms are standardised while
    fitting (scale folded back into the coefficients)."""
    vals = expr.term_values(feats).detach()
    scale = vals.flatten(2).std(-1).mean(0).clamp_min(1e-6)  # (M,)
    z = vals / scale[None, :, None]
    c = torch.tensor([t.coef for t in expr.terms], dtype=z.dtype) * scale
    c = c.clone().requires_grad_(True)
    best_c, best = c.detach().clone(), float("inf")

    def loss_fn():
        nonlocal best, best_c
        loss = objective((c[None, :, None] * z).sum(1))
        lv = float(loss.detach())
        if math.isfinite(lv) and lv < best:  # keep the best iterate (Adam may overshoot)
            best, best_c = lv, c.detach().clone()
        return loss

    adam_minimise([c], loss_fn, steps, lr)
    with torch.no_grad():
        loss_fn()
    return expr.with_coefs((best_c / scale).tolist()), best


class ExpressionProposer:
    """Offline proposer: local search over typed expressions with fitted constants.

    Args:
        seed: seeds its own RNG (runs are deterministic under a seed).
        candidates: mutations tried per request. keep: how many best candidates are returned.
        max_terms: expression size limit. steps: Adam steps per constant fit.
        features: the node features the search may use (default: all of them).
        pursuit: also return the program grown term by term to ``max_terms`` (forward
            selection: :meth:`grow` adds the best pool term, :func:`fit_constants` refits all
            constants, repeated), the move that reaches multi-term rules in one request.
    """

    name = "offline"

    def __init__(
        self,
        seed: int = 0,
        candidates: int = 4,
        keep: int = 2,
        max_terms: int = 6,
        steps: int = 60,
        features: tuple[str, ...] | None = None,
        pursuit: bool = False,
    ):
        self.rng = random.Random(seed)
        self.rejected = 0  # rendered programs the validator refused (should stay 0)
        self.pursuit = pursuit
        self.candidates, self.keep, self.max_terms, self.steps = candidates, keep, max_terms, steps
        self.features = features or NODE_FEATURES

    def _random_term(self) -> Term:
        f = self.rng.choice(self.features)
        fac = self.rng.choice((None, None, *FACTORS))
        return Term(self.rng.choice((-1.0, 1.0)) * 0.1, self.rng.choice(OPS), f, fac)

    def mutate(self, e: Expr) -> Expr:
        """One random typed edit of ``e``."""
        terms = list(e.terms)
        move = self.rng.choice(("swap", "op", "add", "drop", "factor"))
        i = self.rng.randrange(len(terms))
        if move == "swap":
            terms[i] = replace(terms[i], feature=self.rng.choice(self.features))
        elif move == "op":
            terms[i] = replace(terms[i], op=self.rng.choice(OPS))
        elif move == "factor":
            terms[i] = replace(terms[i], factor=self.rng.choice((None, *FACTORS)))
        elif move == "drop" and len(terms) > 1:
            terms.pop(i)
        elif len(terms) < self.max_terms:
            terms.append(replace(self._random_term(), coef=0.0))
        else:
            terms[i] = replace(terms[i], feature=self.rng.choice(self.features))
        return Expr(terms)

    def term_pool(self) -> list[Term]:
        """Every single term the search may add: node feature x op x optional stage factor."""
        return [
            Term(0.0, op, f, fac)
            for f in self.features
            for op in ("id", "log")
            for fac in (None, "progress")
        ]

    def grow(self, e: Expr | None, feats, objective, top: int) -> list[Expr]:
        """Matching pursuit: add the ``top`` pool terms whose coefficient has the largest
        objective gradient at zero (:math:`|\\langle \\nabla_g L, \\phi\\rangle|` on
        standardised values)."""
        if e is not None and len(e.terms) >= self.max_terms:
            return []
        ref = feats["d_cur"]
        g = (
            torch.zeros_like(ref)
            if e is None
            else (
                e.term_values(feats)
                * torch.tensor([t.coef for t in e.terms], dtype=ref.dtype)[None, :, None]
            ).sum(1)
        )
        g = g.detach().requires_grad_(True)
        (grad,) = torch.autograd.grad(objective(g), g)
        have = set() if e is None else {(t.op, t.feature, t.factor) for t in e.terms}
        scored = []
        for t in self.term_pool():
            if (t.op, t.feature, t.factor) in have:
                continue
            v = Expr([t]).term_values(feats)[:, 0]
            v = v - v.mean()
            sd = float(v.std())
            if not sd > 1e-8:
                continue
            gdot = float((grad * v).sum()) / sd
            scored.append(
                (abs(gdot), Term(-0.01 * math.copysign(1.0, gdot) / sd, t.op, t.feature, t.factor))
            )
        scored.sort(key=lambda x: -x[0])
        base = [] if e is None else list(e.terms)
        return [Expr([*base, t]) for _, t in scored[:top]]

    def pursue(self, e: Expr, feats, objective) -> list[tuple[float, Expr]]:
        """Forward selection from ``e``: add the best pool term, refit every constant, repeat
        up to ``max_terms``; returns each grown ``(loss, expr)``."""
        out = []
        while len(e.terms) < self.max_terms:
            grown = self.grow(e, feats, objective, 1)
            if not grown:
                break
            e, loss = fit_constants(grown[0], feats, objective, self.steps)
            if not math.isfinite(loss):
                break
            out.append((loss, e))
        return out

    def propose(self, req: ProposalRequest) -> list[Program]:
        base = req.program.expr if req.program is not None else None
        pool: list[tuple[float, Expr]] = []
        if base is None:
            firsts = [
                fit_constants(e, req.feats, req.objective, self.steps)
                for e in self.grow(None, req.feats, req.objective, 3)
            ]
            firsts.sort(key=lambda x: x[1])
            pool.extend((loss, e) for e, loss in firsts)
            parents = [e for e, _ in firsts[:1]]
        else:
            e, loss = fit_constants(base, req.feats, req.objective, self.steps)
            pool.append((loss, e))
            parents = [e]
        for cand in self.grow(parents[0], req.feats, req.objective, 2) if parents else []:
            e, loss = fit_constants(cand, req.feats, req.objective, self.steps)
            if math.isfinite(loss):
                pool.append((loss, e))
        if self.pursuit and parents:
            pool.extend(self.pursue(parents[0], req.feats, req.objective))
        for _ in range(self.candidates):
            cand = self.mutate(self.rng.choice(parents))
            e, loss = fit_constants(cand, req.feats, req.objective, self.steps)
            if math.isfinite(loss):
                pool.append((loss, e))
        pool.sort(key=lambda x: x[0])
        out, seen = [], set()
        name = req.program.name if req.program is not None else req.context.get("name", "new")
        for _, e in pool:
            src = e.render()
            if src in seen:
                continue
            seen.add(src)
            try:
                out.append(compile_program(src, name, expr=e, origin="offline"))
            except ProgramError:
                self.rejected += 1
                continue
            if len(out) >= self.keep:
                break
        return out


PROMPTS = Path(__file__).parent / "prompts"
_CODE = re.compile(r"```(?:python|py)?\s*\n(.*?)```", re.S)


class LLMProposer:
    """Proposer backed by an OpenAI-compatible chat endpoint.

    Args:
        base_url: e.g. ``http://127.0.0.1:8000/v1`` (default ``$EPB_LLM_BASE_URL`` or
            ``$OPENAI_BASE_URL``). model: ``$EPB_LLM_MODEL``. api_key: ``$EPB_LLM_API_KEY`` or
            ``$OPENAI_API_KEY`` (sent as a Bearer token when set).
        timeout: seconds per request. samples: completions requested per proposal.
        prompt_dir: folder with ``system.txt``, ``rewrite.txt``, ``boost.txt``.
    """

    name = "llm"

    def __init__(
        self,
        base_url: str | None = None,
        model: str | None = None,
        api_key: str | None = None,
        timeout: float = 60.0,
        samples: int = 1,
        temperature: float = 0.7,
        prompt_dir: str | Path | None = None,
    ):
        self.base_url = (
            base_url
            or os.environ.get("EPB_LLM_BASE_URL")
            or os.environ.get("OPENAI_BASE_URL")
            or ""
        )
        if not self.base_url:
            raise ValueError("LLMProposer needs base_url (or EPB_LLM_BASE_URL)")
        self.model = model or os.environ.get("EPB_LLM_MODEL", "gpt-4o-mini")
        self.api_key = (
            api_key or os.environ.get("EPB_LLM_API_KEY") or os.environ.get("OPENAI_API_KEY")
        )
        if not timeout > 0:
            raise ValueError(f"timeout must be positive, got {timeout}")
        self.timeout, self.samples, self.temperature = timeout, samples, temperature
        self.prompt_dir = Path(prompt_dir) if prompt_dir else PROMPTS
        self.errors: list[str] = []
        self.rejected = 0  # replies whose program was refused or failed its trial run

    def build_messages(self, req: ProposalRequest) -> list[dict]:
        system = (
            (self.prompt_dir / "system.txt")
            .read_text()
            .format(features=", ".join(FEATURES), functions=", ".join(SAFE_FUNCTIONS))
        )
        fb = "\n".join(item.text() for item in req.feedback) or "(none)"
        if req.program is not None:
            ctx = {"name": req.program.name, "stage": "whole", "weight": 0.0, **req.context}
            user = (
                (self.prompt_dir / "rewrite.txt")
                .read_text()
                .format(source=req.program.source, feedback=fb, **ctx)
            )
        else:
            ctx = {"portfolio": "", "summary": "", **req.context}
            user = (self.prompt_dir / "boost.txt").read_text().format(feedback=fb, **ctx)
        return [{"role": "system", "content": system}, {"role": "user", "content": user}]

    def _post(self, messages: list[dict]) -> dict:
        body = json.dumps(
            {
                "model": self.model,
                "messages": messages,
                "n": self.samples,
                "temperature": self.temperature,
            }
        ).encode()
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        url = self.base_url.rstrip("/") + "/chat/completions"
        req = urllib.request.Request(url, data=body, headers=headers, method="POST")
        with urllib.request.urlopen(req, timeout=self.timeout) as resp:
            return json.loads(resp.read().decode("utf-8"))

    @staticmethod
    def extract_code(text: str) -> str:
        """The first fenced code block of a reply (or the reply itself if it starts with def)."""
        m = _CODE.search(text)
        if m:
            return m.group(1).strip() + "\n"
        if text.lstrip().startswith("def "):
            return text.strip() + "\n"
        raise ProgramError("the reply holds no ```python code block")

    def propose(self, req: ProposalRequest) -> list[Program]:
        try:
            reply = self._post(self.build_messages(req))
        except TimeoutError:
            self.errors.append(f"timeout after {self.timeout:g}s")
            return []
        except urllib.error.HTTPError as e:
            self.errors.append(f"HTTP {e.code}: {e.reason}")
            return []
        except urllib.error.URLError as e:
            reason = e.reason
            kind = "timeout" if isinstance(reason, TimeoutError) else "connection error"
            self.errors.append(f"{kind}: {reason}")
            return []
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            self.errors.append(f"malformed JSON reply: {e}")
            return []
        except OSError as e:
            self.errors.append(f"connection error: {e}")
            return []
        try:
            choices = reply["choices"]
            texts = [c["message"]["content"] for c in choices]
            if not texts or not all(isinstance(t, str) for t in texts):
                raise TypeError("no message text")
        except (KeyError, TypeError, IndexError) as e:
            self.errors.append(f"malformed reply (no choices[].message.content): {e!r}")
            return []
        name = req.program.name if req.program is not None else req.context.get("name", "new")
        progs = []
        for text in texts:
            try:
                progs.append(compile_program(self.extract_code(text), name, origin="llm"))
            except ProgramError as e:
                self._reject(e)
            except Exception as e:
                self._reject(ProgramError(f"{type(e).__name__}: {e}"))
        out = []
        for prog, trial in zip(progs, evaluate(progs, req.feats), strict=True):  # one batch
            if isinstance(trial, ProgramError):
                self._reject(trial)
            else:
                out.append(prog)
        return out

    def _reject(self, err: ProgramError) -> None:
        self.rejected += 1
        self.errors.append(f"rejected program: {err}")
