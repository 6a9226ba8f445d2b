"""Options are validated at ``step`` though the trimmed wiring skips unchanged groups (issue 33).

Options are re-checked only when a group's options changed (a fingerprint of the values and
their types); a change written into ``param_groups`` between steps, including one equal in value
but not in type (``nesterov=0``), must still be caught at the next step, before anything moves.

That the trim changed no result was checked when it was made, old and new code side by side on
one machine (``probes/trim_ab.py``); stored bits are not a test here because they differ between
BLAS code paths (``MKL_CBWR``), and the default a = 0 route is checked against
``torch.optim.Muon`` itself, bit for bit, in ``test_atomic.py``.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from adaptive_lmo import AdaptiveLMO


def _model() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(7, 9), nn.Tanh(), nn.Linear(9, 5), nn.Tanh(), nn.Linear(5, 2))


def _step(model: nn.Module, opt: AdaptiveLMO, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    x, y = torch.randn(16, 7, generator=g), torch.randn(16, 2, generator=g)
    opt.zero_grad()
    F.mse_loss(model(x), y).backward()
    opt.step()


@pytest.mark.parametrize(
    ("group", "key", "value"),
    [
        (0, "lr", -0.1),
        (0, "exponent", 2.0),
        (0, "nesterov", 0),  # == False in value, not a bool: the fingerprint holds the type
        (0, "method", "qr"),
        (1, "betas", (0.9, 1.5)),
        (1, "eps", float("nan")),
    ],
)
def test_changed_options_are_caught_at_the_next_step(group, key, value):
    m = _model()
    o = AdaptiveLMO(m, exponent=0.0)
    for s in range(3):  # validated once, then cached
        _step(m, o, s)
    o.param_groups[group][key] = value
    before = [p.detach().clone() for p in m.parameters()]
    with pytest.raises(ValueError, match=key.rstrip("s") if key == "betas" else key):
        _step(m, o, 3)
    assert all(torch.equal(p, q) for p, q in zip(m.parameters(), before, strict=True))


def test_list_option_mutated_in_place_is_caught():
    """A mutable option (AdamW's betas as a list) changed in place, not replaced."""
    m = _model()
    o = AdaptiveLMO(m, exponent=0.0)
    o.param_groups[1]["betas"] = [0.9, 0.95]
    _step(m, o, 0)
    o.param_groups[1]["betas"][1] = 1.0
    with pytest.raises(ValueError, match="beta2"):
        _step(m, o, 1)


def test_normalised_exponent_and_switch_to_auto_after_caching():
    """Validation still normalises (int 0 -> 0.0) and a group switched to "auto" after its
    options were cached gets its hooks and chooses exponents."""
    m = _model()
    o = AdaptiveLMO(m, exponent=0.0, update_every=1)
    _step(m, o, 0)
    o.param_groups[0]["exponent"] = 0
    _step(m, o, 1)
    assert type(o.param_groups[0]["exponent"]) is float
    o.param_groups[0]["exponent"] = "auto"
    for s in range(2, 5):
        _step(m, o, s)
    assert len(o._collector.hooked) == 2  # both matrix layers hooked after the switch
    assert all(g["source"].startswith("criterion") for g in o.geometry().values())


def test_unchanged_options_are_not_revalidated(monkeypatch):
    """The hoist itself: with unchanged options a step runs no option check; one changed
    option re-checks that group only."""
    import adaptive_lmo.optim as optim_mod

    calls: list[str] = []
    for fn in ("validate_lmo", "validate_adamw"):
        orig = getattr(optim_mod, fn)
        monkeypatch.setattr(optim_mod, fn, lambda g, _o=orig, _n=fn: (calls.append(_n), _o(g))[1])
    m = _model()
    o = AdaptiveLMO(m, exponent=0.0)
    calls.clear()  # construction checks each group too (add_param_group)
    _step(m, o, 0)
    assert sorted(calls) == ["validate_adamw", "validate_lmo"]  # first step: both groups
    calls.clear()
    for s in range(1, 4):
        _step(m, o, s)
    assert calls == []
    o.param_groups[0]["lr"] = 0.01
    _step(m, o, 4)
    assert calls == ["validate_lmo"]
