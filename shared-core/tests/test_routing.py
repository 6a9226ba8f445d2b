"""The suite's matrix/AdamW split (shared_core.routing) on models whose answer is known."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

from shared_core.routing import (
    AUX_ADAMW,
    find_head,
    locate_head,
    resolve_head,
    route_module,
    takes_matrix_update,
)


class TinyLM(nn.Module):
    """Embedding, two blocks (LayerNorm, Linear, Conv1d), a head tied to the embedding."""

    def __init__(self, vocab: int = 13, d: int = 6) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.blocks = nn.ModuleList(
            nn.ModuleDict({"norm": nn.LayerNorm(d), "mlp": nn.Linear(d, d)}) for _ in range(2)
        )
        self.conv = nn.Conv1d(d, d, 3, padding=1)
        self.out = nn.Linear(d, vocab, bias=False)
        self.out.weight = self.tok.weight  # tied

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        h = self.tok(ids)
        for b in self.blocks:
            h = h + torch.relu(b["mlp"](b["norm"](h)))
        h = self.conv(h.transpose(1, 2)).transpose(1, 2)
        return self.out(h)


def _sides(model: nn.Module, **kw) -> dict[str, bool]:
    return {r.name: r.matrix for r in route_module(model, **kw)}


def test_rule_on_a_tied_language_model() -> None:
    model = TinyLM()
    sides = _sides(model)
    # every trainable tensor once; the tied head shares the embedding's tensor
    assert len(sides) == len({id(p) for p in model.parameters()})
    matrices = {n for n, m in sides.items() if m}
    assert matrices == {"blocks.0.mlp.weight", "blocks.1.mlp.weight", "conv.weight"}
    assert locate_head(model) is model.out


def test_untied_head_by_name_and_by_forward_pass() -> None:
    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lm_head = nn.Linear(5, 7)  # registered first, runs last
            self.body = nn.Linear(3, 5)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.lm_head(torch.tanh(self.body(x)))

    net = Net()
    assert locate_head(net) is net.lm_head
    assert find_head(net, torch.randn(4, 3)) == "lm_head"
    assert {n for n, m in _sides(net).items() if m} == {"body.weight"}
    assert {n for n, m in _sides(net, head=None).items() if m} == {"body.weight", "lm_head.weight"}


def test_guessed_head_warns_and_names_the_owner() -> None:
    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = nn.Linear(3, 3)
            self.b = nn.Linear(3, 3)

    with pytest.warns(UserWarning, match="SomeOpt: guessing the output head as 'b'"):
        route_module(Net(), owner="SomeOpt")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        route_module(Net(), head="a")  # an explicit head: no guess, no warning
        route_module(nn.Sequential(nn.Linear(3, 3), nn.Linear(3, 2)))  # order is known


def test_override_and_errors() -> None:
    model = TinyLM()
    sides = _sides(model, route=lambda n, p, m: True if n == "tok.weight" else None)
    assert sides["tok.weight"] is True
    with pytest.raises(ValueError, match=r"blocks\.0\.norm\.weight"):
        route_module(model, route=lambda n, p, m: True)
    with pytest.raises(ValueError, match="not a module"):
        resolve_head(model, "nope")
    with pytest.raises(ValueError, match="head must be"):
        resolve_head(model, 3)


def test_frozen_parameters_are_skipped_and_rule_is_per_tensor() -> None:
    model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 2))
    model[0].weight.requires_grad_(False)
    assert "0.weight" not in _sides(model)
    w = torch.randn(4, 4)
    assert takes_matrix_update(w, nn.Linear(4, 4), None, set())
    assert not takes_matrix_update(w, None, None, {id(w)})
    assert not takes_matrix_update(torch.randn(4), None, None, set())


def test_adamw_defaults_are_the_muon_recipe() -> None:
    assert (AUX_ADAMW.lr, AUX_ADAMW.betas, AUX_ADAMW.eps, AUX_ADAMW.weight_decay) == (
        3e-4,
        (0.9, 0.95),
        1e-8,
        0.0,
    )
