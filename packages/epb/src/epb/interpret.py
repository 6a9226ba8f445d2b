r"""Reading a distilled portfolio: code with roles, router weights per stage, and which classic
heuristic each program resembles.

* :func:`stage_weights` — mean router weight of each program over the early / middle / late
  thirds of an episode (by step index).
* :func:`resemblance` — for each program, the fraction of states where its greedy choice equals
  that of each classic step rule of :data:`epb.heuristics.STEP_RULES` (for CVRP also
  :data:`epb.heuristics.CVRP_STEP_RULES`; agreement with reference implementations, on the same
  states and feasibility mask).
* :func:`describe` — the portfolio printed as code, each program headed by its role.
"""

from __future__ import annotations

import torch

from .heuristics import CVRP_STEP_RULES, STEP_RULES
from .portfolio import NEG, Portfolio, StateBank

STAGES = ("early", "middle", "late")


def stage_of(bank: StateBank) -> torch.Tensor:
    """``(S,)`` stage index 0/1/2 (early/middle/late thirds of the episode)."""
    return (bank.stage * 3).floor().clamp(0, 2).long()


@torch.no_grad()
def stage_weights(port: Portfolio, bank: StateBank) -> dict[str, list[float]]:
    """``{stage: [mean router weight of each program]}``."""
    w = port.weights(bank).exp()
    st = stage_of(bank)
    return {
        name: w[st == i].mean(0).tolist() if (st == i).any() else [float("nan")] * port.k
        for i, name in enumerate(STAGES)
    }


def rule_choices(bank: StateBank, rules=None) -> dict[str, torch.Tensor]:
    """Greedy choice ``(S,)`` of each classic step rule on the bank's states."""
    if rules is None:
        cvrp = bool((bank.feats["demand"] != 0).any())
        rules = {**STEP_RULES, **CVRP_STEP_RULES} if cvrp else STEP_RULES
    return {
        name: f(bank.feats).expand_as(bank.mask).masked_fill(~bank.mask, NEG).argmax(-1)
        for name, f in rules.items()
    }


@torch.no_grad()
def resemblance(port: Portfolio, bank: StateBank, rules=None) -> list[dict[str, float]]:
    """Per program: agreement with each classic step rule."""
    ref = rule_choices(bank, rules)
    ch = port.program_log_probs(bank).argmax(-1)  # (S, K)
    return [
        {name: float((ch[:, k] == c).float().mean()) for name, c in ref.items()}
        for k in range(port.k)
    ]


@torch.no_grad()
def teacher_agreement_by_stage(choice: torch.Tensor, bank: StateBank) -> dict[str, float]:
    """Top-1 agreement of ``choice`` ``(S,)`` with the teacher, per stage."""
    t = bank.teacher_logp.argmax(-1)
    st = stage_of(bank)
    return {
        name: float((choice[st == i] == t[st == i]).float().mean())
        for i, name in enumerate(STAGES)
        if (st == i).any()
    }


def describe(port: Portfolio, bank: StateBank) -> str:
    """The portfolio as code, each program headed by a comment with its role."""
    sw = stage_weights(port, bank)
    res = resemblance(port, bank)
    beta = port.log_beta.exp().tolist()
    blocks = []
    for k, p in enumerate(port.programs):
        ws = ", ".join(f"{s} {sw[s][k]:.2f}" for s in STAGES)
        main = max(STAGES, key=lambda s: sw[s][k] if sw[s][k] == sw[s][k] else -1)
        best = max(res[k], key=res[k].get)
        head = (
            f"# [{k}] {p.name} ({p.origin}): router weight {ws}; used most {main}; "
            f"resembles {best} ({100 * res[k][best]:.0f}% same choice); "
            f"temperature 1/{beta[k]:.3g}"
        )
        blocks.append(head + "\n" + p.source.rstrip())
    return "\n\n".join(blocks)
