"""Newton-Schulz coefficient tables: the Polar Express derivation, the registry, the tuned table."""

import math

import pytest
import torch

from shared_core.polar import (
    DEFAULT_STEPS,
    DEFAULT_TABLE,
    NS_TABLES,
    coefficients_for,
    get_table,
    minimax_odd_quintic,
    polar_express_coefficients,
    table_info,
)

# Polar Express, arXiv:2505.16932, Algorithm 1: the published polynomials before the 1.01
# safety factor (data for comparison; the library derives its own).
PUBLISHED_PE = [
    (8.28721201814563, -23.595886519098837, 17.300387312530933),
    (4.107059111542203, -2.9478499167379106, 0.5448431082926601),
    (3.9486908534822946, -2.908902115962949, 0.5518191394370137),
    (3.3184196573706015, -2.488488024314874, 0.51004894012372),
    (2.300652019954817, -1.6689039845747493, 0.4188073119525673),
    (1.891301407787398, -1.2679958271945868, 0.37680408948524835),
    (1.8750014808534479, -1.2500016453999487, 0.3750001645474248),
    (1.875, -1.25, 0.375),
]


def _poly(abc, x):
    a, b, c = abc
    return a * x + b * x**3 + c * x**5


def test_derivation_reproduces_the_stored_table():
    # Equal up to the rounding of the derivation: each Remez step solves a 4x4 system in
    # (x, x^3, x^5) on [l, u] with l down to 1e-3, whose conditioning turns float64 rounding
    # (it depends on the LAPACK build and its summation order) into ~1e-10 relative
    # differences, measured 6e-11 between two runs here. What the table is for, the composed
    # polynomial's deviation from sign(x), must then agree far more tightly than it matters.
    derived = polar_express_coefficients(1e-3, 8)
    assert len(derived) == len(NS_TABLES["polar_express"])
    for got, want in zip(derived, NS_TABLES["polar_express"], strict=True):
        assert got == pytest.approx(want, rel=1e-9, abs=0)
    x = torch.linspace(1e-3, 1.0, 20_001, dtype=torch.float64)
    y_derived, y_stored = x.clone(), x.clone()
    for (a, b, c), (a2, b2, c2) in zip(derived, NS_TABLES["polar_express"], strict=True):
        y_derived = a * y_derived + b * y_derived**3 + c * y_derived**5
        y_stored = a2 * y_stored + b2 * y_stored**3 + c2 * y_stored**5
    assert float((y_derived - y_stored).abs().max()) < 1e-8


def test_derivation_matches_the_published_polynomials():
    derived = polar_express_coefficients(1e-3, 8, safety=1.0)
    for got, want in zip(derived, PUBLISHED_PE, strict=True):
        for g, w in zip(got, want, strict=True):
            assert math.isclose(g, w, rel_tol=1e-8), (got, want)


def test_safety_factor_is_p_of_x_over_s():
    raw = polar_express_coefficients(1e-3, 3, safety=1.0)
    safe = polar_express_coefficients(1e-3, 3, safety=1.05)
    x = torch.linspace(0, 1, 101, dtype=torch.float64)
    for r, s in zip(raw[:-1], safe[:-1], strict=True):
        torch.testing.assert_close(_poly(s, x), _poly(r, x / 1.05))
    assert safe[-1] == raw[-1]  # the last polynomial keeps no safety factor


@pytest.mark.parametrize(("l", "u"), [(1e-3, 1.0), (0.05, 1.0), (0.3, 1.7), (0.9, 1.1)])
def test_minimax_quintic_equioscillates_and_is_optimal(l, u, gen):
    abc = minimax_odd_quintic(l, u)
    x = torch.linspace(l, u, 20001, dtype=torch.float64)
    err = 1 - _poly(abc, x)
    E = float(err.abs().max())
    # Equioscillation: error +E at l, -E, +E, -E at u (four alternation points).
    assert math.isclose(float(err[0]), E, rel_tol=1e-6)
    assert math.isclose(float(err[-1]), -E, rel_tol=1e-6)
    assert float(err.min()) == pytest.approx(-E, rel=1e-6)
    # No nearby odd quintic does better in the sup norm.
    base = torch.tensor(abc, dtype=torch.float64)
    others = base + torch.randn(64, 3, generator=gen, dtype=torch.float64) * 1e-3 * base.abs()
    sup = (1 - _poly(others.T.unsqueeze(-1), x)).abs().amax(dim=-1)
    assert float(sup.min()) >= E * (1 - 1e-9)


def test_minimax_quintic_degenerates_to_newton_schulz():
    assert minimax_odd_quintic(1.0, 1.0) == (1.875, -1.25, 0.375)


@pytest.mark.parametrize(("l", "u"), [(0.0, 1.0), (2.0, 1.0), (float("nan"), 1.0)])
def test_minimax_quintic_rejects_bad_interval(l, u):
    with pytest.raises(ValueError, match="0 < l <= u"):
        minimax_odd_quintic(l, u)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"l0": 0.0}, "l0"),
        ({"steps": 0}, "steps"),
        ({"cushion": 1.0}, "cushion"),
        ({"safety": 0.9}, "safety"),
    ],
)
def test_polar_express_rejects_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        polar_express_coefficients(**kwargs)


def test_registry_lookup_and_errors():
    assert set(NS_TABLES) == {"muon", "polar_express", "rms5"}
    assert get_table("muon") == [(3.4445, -4.7750, 2.0315)]
    t = get_table("rms5")
    t.clear()  # a copy: the registry is untouched
    assert len(get_table("rms5")) == 6
    with pytest.raises(ValueError, match="'muon', 'polar_express', 'rms5'"):
        get_table("jordan")
    with pytest.raises(ValueError, match="unknown Newton-Schulz table"):
        table_info(None)
    assert table_info(DEFAULT_TABLE).default_steps == DEFAULT_STEPS == 6


def test_coefficients_for_truncates_and_pads():
    pe = get_table("polar_express")
    assert coefficients_for("polar_express", 3) == pe[:3]
    assert coefficients_for("polar_express", 10) == pe + [pe[-1]] * 2
    assert coefficients_for("muon") == [get_table("muon")[0]] * 5
    assert coefficients_for("muon", 0) == []
    for bad in (-1, 2.5, True):
        with pytest.raises(ValueError, match="steps"):
            coefficients_for("muon", bad)


def _composition(table, margin, x):
    hist = []
    z = x / margin
    for abc in table:
        ratio = _poly(abc, z) / z
        z = _poly(abc, z)
        hist.append((ratio, z))
    return z, hist


def test_rms5_has_the_stated_properties():
    # The tuning's constraints and objective (module docstring of shared_core.polar.coefficients).
    info = table_info("rms5")
    tuned = coefficients_for("rms5", 5)
    z = torch.linspace(1e-7, 1.0, 20001, dtype=torch.float64)
    reach = 1.0
    for t, abc in enumerate(tuned):
        cap = 1.13 if t == 4 else 2.0
        extended = torch.linspace(0, 1.01 * reach, 20001, dtype=torch.float64)
        p_ext = _poly(abc, extended)
        assert float(p_ext.min()) >= 0 and float(p_ext.max()) <= cap + 1e-4
        assert float((_poly(abc, z) / z).min()) >= 0.11 - 1e-4
        z = _poly(abc, z)
        reach = float(z.max())
    prior = torch.logspace(math.log10(3e-4), 0, 3000, dtype=torch.float64)
    f_rms, _ = _composition(tuned, info.margin, prior)
    f_pe, _ = _composition(coefficients_for("polar_express", 5), 1.01, prior)
    mse_rms, mse_pe = float(((f_rms - 1) ** 2).mean()), float(((f_pe - 1) ** 2).mean())
    assert mse_rms == pytest.approx(0.0417, abs=1e-4)
    assert mse_pe == pytest.approx(0.0437, abs=1e-4)


@pytest.mark.parametrize("name", sorted(NS_TABLES))
def test_every_table_keeps_the_spectrum_bounded(name):
    # Scalar check of the iteration: the normalised spectrum [0, 1] stays in [0, 2] at every
    # step (below the quintics' blow-up) and ends in [0, 1.25] after 12 steps, so extra steps
    # cannot diverge.
    info = table_info(name)
    x = torch.linspace(0, 1, 20001, dtype=torch.float64) / info.margin
    for abc in coefficients_for(name, 12):
        x = _poly(abc, x)
        assert float(x.min()) >= 0 and float(x.max()) <= 2.0
    assert float(x.max()) <= 1.25
