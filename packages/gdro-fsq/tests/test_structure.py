"""The shape the optimizers promise: option combinations refused at construction, a base class
that reads only what it defines, one kappa per round, frozen round weights, the public names."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import re

import pytest
import torch

import gdro_fsq
from gdro_fsq import game as game_module
from gdro_fsq.fsq import GDROFSQ, resolve_options
from gdro_fsq.game import GroupGame, RoundWeights
from gdro_fsq.optim import SMDFullInfo
from gdro_fsq.oracle import make_grouped_logistic


def _w():
    return [torch.zeros(3, dtype=torch.float64, requires_grad=True)]


def _loss(params, batch):  # never called: construction only
    raise AssertionError


# ---- option combinations (each was accepted before and silently overridden or ignored)

BAD_FSQ = [
    # (options, the words the message must name)
    ({"estimator": "ix", "q_step": "adaptive"}, ["q_step='adaptive'", "estimator='ix'"]),
    ({"estimator": "ix", "explore": True}, ["explore=True", "estimator='ix'"]),
    ({"estimator": "ix", "step_cap": "min"}, ["step_cap='min'", "estimator='ix'"]),
    ({"estimator": "ix", "step_cap": "mean"}, ["step_cap='mean'", "estimator='ix'"]),
    ({"explore": False, "step_cap": "mean"}, ["step_cap='mean'", "explore=False"]),
    ({"explore": False, "q_bonus": 0.5}, ["q_bonus", "explore=True"]),
    ({"estimator": "ix", "q_bonus": 0.5}, ["q_bonus", "estimator='iw'"]),
    ({"theta_step": "observed"}, ["theta_step", "grad_bound"]),
]


@pytest.mark.parametrize(("options", "words"), BAD_FSQ)
def test_gdrofsq_refuses_undefined_combinations_at_construction(options, words):
    with pytest.raises(ValueError, match=re.escape(words[0])) as err:
        GDROFSQ(_w(), _loss, 4, lr_theta=0.5, **options)
    for word in words:
        assert word in str(err.value), (word, str(err.value))


@pytest.mark.parametrize(
    ("options", "want"),
    [
        ({}, ("iw", True, "adaptive", "mean")),
        ({"estimator": "ix"}, ("ix", False, "bound", "none")),
        ({"estimator": "ix", "q_step": "bound", "explore": False}, ("ix", False, "bound", "none")),
        ({"estimator": "ix", "step_cap": "none"}, ("ix", False, "bound", "none")),
        ({"explore": False}, ("iw", False, "adaptive", "none")),
        ({"explore": False, "step_cap": "none"}, ("iw", False, "adaptive", "none")),
        ({"step_cap": "min", "q_step": "bound"}, ("iw", True, "bound", "min")),
    ],
)
def test_defined_combinations_resolve_to_the_documented_defaults(options, want):
    opt = GDROFSQ(_w(), _loss, 4, lr_theta=0.5, **options)
    assert (opt.estimator, opt.explore, opt.q_step, opt.step_cap) == want
    assert resolve_options(**options)[:4] == want


@pytest.mark.parametrize(
    "bad",
    [{"estimator": "IW"}, {"q_step": "fast"}, {"step_cap": 2}, {"explore": 1}, {"q_bonus": -1.0}],
)
def test_bad_single_options_name_the_value(bad):
    ((name, value),) = bad.items()
    with pytest.raises(ValueError, match=name) as err:
        resolve_options(**bad)
    assert repr(value) in str(err.value)


@pytest.mark.parametrize(
    ("options", "words"),
    [
        ({"q_step": "adaptive"}, ["q_step='adaptive'", "q_update='md'"]),
        ({"q_step": "adaptive", "q_update": "ftrl", "horizon": 10}, ["horizon=10"]),
        ({"q_step": "worst"}, ["q_step", "'worst'"]),
    ],
)
def test_smd_refuses_undefined_combinations_at_construction(options, words):
    with pytest.raises(ValueError, match=re.escape(words[0])) as err:
        SMDFullInfo(_w(), _loss, 4, lr_theta=0.5, **options)
    for word in words:
        assert word in str(err.value)


# ---- the base class reads only what it defines


def _self_attributes(node: ast.AST, *, stored: bool) -> set[str]:
    ctx = ast.Store if stored else ast.Load
    return {
        n.attr
        for n in ast.walk(node)
        if isinstance(n, ast.Attribute)
        and isinstance(n.value, ast.Name)
        and n.value.id == "self"
        and isinstance(n.ctx, ctx)
    }


def test_group_game_reads_no_attribute_only_a_subclass_defines():
    """Every ``self.x`` that GroupGame's code reads is set in its ``__init__``, is one of its
    own members, or comes from torch's Optimizer. (Before the split its step read
    ``self.grad_bound``, which only GDROFSQ defines.)"""
    tree = ast.parse(inspect.getsource(game_module))
    (cls,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "GroupGame"]
    init = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__init__")
    defined = _self_attributes(init, stored=True)
    # what torch's Optimizer defines on the class and sets on an instance (state, param_groups)
    base = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)
    defined |= set(vars(GroupGame)) | set(dir(torch.optim.Optimizer)) | set(vars(base))
    read = _self_attributes(cls, stored=False)
    assert read - defined == set()


class _Uniform(GroupGame):
    """A minimal game: uniform q, uniform queries, no update of q."""

    def _inclusion(self, r, t):
        return torch.full((self.n_groups,), r / self.n_groups, dtype=torch.float64), RoundWeights()

    def _theta_weights(self, query):
        return torch.full((query.r,), 1.0 / query.r, dtype=torch.float64)

    def _update_q(self, scaled, query, t):
        return None


def test_a_minimal_subclass_plays_with_the_base_defaults_only():
    prob = make_grouped_logistic(4, 3, 10, seed=0)
    gen = torch.Generator().manual_seed(0)
    w = torch.zeros(3, dtype=torch.float64, requires_grad=True)
    opt = _Uniform([w], prob.loss_fn, 4, 0.5, radius=1.0, generator=gen)
    sampler = prob.sampler(gen)
    for t in range(1, 6):
        opt.round(sampler, 1 + t % 4)
    # K_t = t (kappa = 1), C_t = t (c = 1), the average is the plain mean
    assert opt.game["theta_sq_sum"] == opt.game["kappa_sq_sum"] == 5.0
    assert opt.weight_sum == 5.0


# ---- kappa once per round, frozen round weights


@pytest.mark.parametrize("estimator", ["iw", "ix"])
def test_kappa_is_computed_once_per_round(monkeypatch, estimator):
    import gdro_fsq.fsq as fsq_module

    calls = []
    real = fsq_module.max_weight_sum

    def counting(q, pi, r):
        calls.append(r)
        return real(q, pi, r)

    monkeypatch.setattr(fsq_module, "max_weight_sum", counting)
    prob = make_grouped_logistic(5, 3, 10, seed=1)
    gen = torch.Generator().manual_seed(1)
    w = torch.zeros(3, dtype=torch.float64, requires_grad=True)
    opt = GDROFSQ(
        [w], prob.loss_fn, 5, radius=1.0, grad_bound=prob.grad_bound, estimator=estimator,
        generator=gen,
    )  # fmt: skip
    sampler = prob.sampler(gen)
    for t in range(1, 8):
        opt.round(sampler, 1 + t % 5)
        assert len(calls) == t


def test_round_weights_are_frozen_and_survive_a_state_dict_round_trip():
    prob = make_grouped_logistic(4, 3, 10, seed=2)
    gen = torch.Generator().manual_seed(2)
    w = torch.zeros(3, dtype=torch.float64, requires_grad=True)
    opt = GDROFSQ([w], prob.loss_fn, 4, radius=1.0, grad_bound=prob.grad_bound, generator=gen)
    sampler = prob.sampler(gen)
    for r in (4, 4, 1, 3):  # the r = 1 round after two full rounds is down-weighted
        query = opt.plan(r)
        assert query.weights is opt.round_weights
        with pytest.raises(dataclasses.FrozenInstanceError):
            query.weights.c = 1.0  # type: ignore[misc]
        batch = sampler.sample(query.groups)
        opt.step(lambda b=batch: prob.loss_fn([w], b))
    assert "round_weight" not in opt.game and "eta_q" not in opt.game
    sd = opt.state_dict()
    w2 = torch.zeros(3, dtype=torch.float64, requires_grad=True)
    other = GDROFSQ([w2], prob.loss_fn, 4, radius=1.0, grad_bound=prob.grad_bound)
    other.load_state_dict(sd)
    assert other.round_weights == opt.round_weights
    assert other.bound_hp(0.1) == opt.bound_hp(0.1)  # it reads the last round's eta


# ---- the public names


def test_public_names_import_from_the_old_places():
    """Experiments, probes and integration tests import these from ``gdro_fsq`` and
    ``gdro_fsq.optim``; the split keeps them there, as the same objects."""
    optim = importlib.import_module("gdro_fsq.optim")
    for name in optim.__all__:
        assert getattr(optim, name) is not None
    for name in ("ERM", "GDROFSQ", "GroupGame", "OneSampleBandit", "Query", "SMDFullInfo"):
        assert getattr(gdro_fsq, name) is getattr(optim, name)
    for name in ("fsq_bound", "fsq_bound_hp", "fsq_bound_hp_ix", "ix_grid", "ix_cost_estimates"):
        assert callable(getattr(optim, name))
    assert optim.ADAPTIVE_V0 == 1.0 and optim.q_step_size(1.0, 4, 1.0) > 0


def test_a_state_saved_before_the_split_loads():
    """Before issue #19 the round's c, eta, gamma, bonus sat in ``game``; loading such a state
    puts them into ``round_weights`` (the high-probability bound reads the last eta)."""
    prob = make_grouped_logistic(4, 3, 10, seed=3)
    gen = torch.Generator().manual_seed(3)
    w = torch.zeros(3, dtype=torch.float64, requires_grad=True)
    opt = GDROFSQ([w], prob.loss_fn, 4, radius=1.0, grad_bound=prob.grad_bound, generator=gen)
    sampler = prob.sampler(gen)
    for r in (2, 3, 1):
        opt.round(sampler, r)
    sd = opt.state_dict()
    rw = sd["game"].pop("round_weights")
    sd["game"].update(round_weight=rw["c"], eta_q=rw["eta"], gamma=rw["gamma"], bonus=rw["bonus"])
    other = GDROFSQ([w.detach().clone().requires_grad_(True)], prob.loss_fn, 4, radius=1.0,
                    grad_bound=prob.grad_bound)  # fmt: skip
    other.load_state_dict(sd)
    assert other.round_weights == opt.round_weights
    assert "eta_q" not in other.game
    assert other.bound_hp(0.1) == opt.bound_hp(0.1)
