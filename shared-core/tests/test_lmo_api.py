"""Behaviour of shared_core.lmo: factory, validation, zero and NaN inputs, dtypes, the power
method, the pluggable polar factor, and the docstring examples."""

from __future__ import annotations

import doctest
import importlib
import math
import pkgutil
import re

import pytest
import torch

import shared_core.lmo as lmo
from shared_core.lmo import (
    L1,
    L2,
    NORMS,
    ColNorm,
    ColNormDual,
    Frobenius,
    LInf,
    Nuclear,
    RowNorm,
    RowNormDual,
    Schatten,
    Spectral,
    get_norm,
    l1_lmo,
    nuclear_lmo,
    spectral_lmo,
    top_singular_pair,
)
from shared_core.lmo.spectral import polar_svd

MATRIX = [
    Spectral(),
    Nuclear(),
    Nuclear(method="power"),
    Frobenius(),
    Schatten(1.5),
    Schatten(4),
    ColNorm(),
    ColNormDual(),
    RowNorm(),
    RowNormDual(),
]
VECTOR = [LInf(), L1(), L2(), LInf(-1), L1(-1), L2(-1)]
ALL = MATRIX + VECTOR
every_norm = pytest.mark.parametrize("norm", ALL, ids=repr)


def _rand(gen, *shape, dtype=torch.float64):
    return torch.randn(*shape, generator=gen, dtype=torch.float64).to(dtype)


# --- factory ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("spectral", Spectral()),
        ("Frobenius", Frobenius()),
        ("nuclear", Nuclear()),
        (" LINF ", LInf()),
        ("l1", L1()),
        ("l2", L2()),
        ("colnorm", ColNorm()),
        ("rownorm", RowNorm()),
        ("colnorm_dual", ColNormDual()),
        ("rownorm_dual", RowNormDual()),
        (("schatten", 3), Schatten(3.0)),
        (("schatten", math.inf), Schatten(math.inf)),
    ],
)
def test_get_norm_builds_each_norm(spec, expected):
    got = get_norm(spec)
    assert got == expected and type(got) is type(expected)


def test_get_norm_options_and_passthrough():
    n = get_norm("nuclear", method="power", power_iters=3, seed=7)
    assert (n.method, n.power_iters, n.seed) == ("power", 3, 7)
    assert get_norm("l1", dim=(0, 2)) == L1((0, 2)) == L1([0, 2])
    assert L1(0) != L1(1)
    inst = Schatten(1.5)
    assert get_norm(inst) is inst
    assert set(NORMS) == {
        "spectral",
        "nuclear",
        "frobenius",
        "linf",
        "l1",
        "l2",
        "colnorm",
        "colnorm_dual",
        "rownorm",
        "rownorm_dual",
    }


@pytest.mark.parametrize(
    ("spec", "match"),
    [
        ("operator", "'operator'"),
        ("schatten", "exponent"),
        (("schatten", 0.5), "0.5"),
        (("schatten", float("nan")), "nan"),
        (("schatten", "big"), "'big'"),
        (("schatten",), r"\('schatten',\)"),
        (("l1", 2), "'l1'"),
        (3, "3"),
    ],
)
def test_get_norm_rejects_bad_specs(spec, match):
    with pytest.raises(ValueError, match=match):
        get_norm(spec)


def test_get_norm_rejects_options_on_an_instance():
    with pytest.raises(ValueError, match="seed"):
        get_norm(Spectral(), seed=1)


def test_dual_pairs():
    assert Spectral().dual() == Nuclear() and Nuclear().dual() == Spectral()
    assert LInf(-1).dual() == L1(-1) and L1(-1).dual() == LInf(-1)
    assert Schatten(3).dual() == Schatten(1.5)
    assert Schatten(1).dual() == Schatten(math.inf)
    assert ColNorm().dual() == ColNormDual() and RowNormDual().dual() == RowNorm()
    # Options that only change how the LMO is computed do not make a different norm.
    assert Spectral(polar_fn=polar_svd).dual().dual() == Spectral(polar_fn=polar_svd)
    assert Nuclear(method="power").dual().dual() == Nuclear(method="power")


# --- bad inputs ---------------------------------------------------------------------------


@every_norm
@pytest.mark.parametrize("radius", [-0.1, float("nan"), float("inf"), "one"])
def test_bad_radius_raises_naming_it(norm, radius, gen):
    with pytest.raises(ValueError, match=re.escape(repr(radius))):
        norm.lmo(_rand(gen, 4, 3), radius)


@pytest.mark.parametrize("norm", MATRIX, ids=repr)
def test_matrix_norms_refuse_vectors(norm, gen):
    v = _rand(gen, 5)
    for call in (norm.norm, norm.dual_norm, norm.lmo):
        with pytest.raises(ValueError, match=r"matrix norm .*1-D tensor of shape \(5,\)"):
            call(v)


@every_norm
def test_integer_and_non_tensor_inputs_are_refused(norm):
    with pytest.raises(ValueError, match="floating-point"):
        norm.lmo(torch.ones(3, 4, dtype=torch.int64))
    with pytest.raises(TypeError, match=r"torch\.Tensor"):
        norm.norm([[1.0, 2.0], [3.0, 4.0]])


@pytest.mark.parametrize("p", [0.5, 0.0, -2, float("nan"), None])
def test_schatten_refuses_bad_p(p):
    with pytest.raises(ValueError, match=f"got {p!r}"):
        Schatten(p)


def test_bad_options_and_axes_raise():
    with pytest.raises(ValueError, match="'qr'"):
        Nuclear(method="qr")
    with pytest.raises(ValueError, match="power_iters"):
        Nuclear(method="power", power_iters=0)
    with pytest.raises(ValueError, match="distinct"):
        L1((1, 1))
    with pytest.raises(ValueError, match="distinct"):
        L2(1.5)
    with pytest.raises(ValueError, match="out of range"):
        L1(3).norm(torch.ones(2, 2))
    with pytest.raises(ValueError, match="twice"):
        l1_lmo(torch.ones(2, 2), 1.0, dim=(0, -2))
    with pytest.raises(ValueError, match="v0 must have shape"):
        top_singular_pair(torch.ones(3, 4), method="power", v0=torch.ones(3))


def test_polar_fn_of_the_wrong_shape_is_refused(gen):
    with pytest.raises(ValueError, match=r"polar_fn must return .*\(4, 3\)"):
        spectral_lmo(_rand(gen, 4, 3), polar_fn=lambda G: G.mT)


# --- zero, NaN, empty ---------------------------------------------------------------------


@every_norm
def test_zero_gradient_gives_zero_step(norm):
    for shape in [(4, 3), (2, 5, 6)]:
        Z = torch.zeros(shape, dtype=torch.float64)
        D = norm.lmo(Z, 2.0)
        assert torch.equal(D, torch.zeros_like(Z))
        assert torch.all(norm.norm(Z) == 0) and torch.all(norm.dual_norm(Z) == 0)


@pytest.mark.parametrize("norm", MATRIX, ids=repr)
def test_zero_matrix_inside_a_batch_gets_zero_and_the_others_are_untouched(norm, gen):
    G = _rand(gen, 3, 5, 4)
    G[1] = 0
    D = norm.lmo(G, 1.0)
    assert torch.equal(D[1], torch.zeros(5, 4, dtype=torch.float64))
    torch.testing.assert_close(D[[0, 2]], norm.lmo(G[[0, 2]], 1.0))


def test_zero_columns_and_rank_deficiency(gen):
    G = _rand(gen, 6, 4)
    G[:, 2] = 0
    assert torch.equal(ColNorm().lmo(G)[:, 2], torch.zeros(6, dtype=torch.float64))
    # Rank 2: the polar factor covers the range only (sign(0) = 0), and is still the minimiser.
    R = _rand(gen, 6, 2) @ _rand(gen, 2, 4)
    D = spectral_lmo(R)
    torch.testing.assert_close(torch.linalg.svdvals(D), torch.tensor([1.0, 1, 0, 0]).double())
    torch.testing.assert_close((R * D).sum(), -torch.linalg.svdvals(R).sum())


@pytest.mark.parametrize("norm", [Frobenius(), ColNorm(), RowNorm(), RowNormDual()], ids=repr)
def test_nan_gradient_is_not_hidden(norm, gen):
    G = _rand(gen, 4, 3)
    G[1, 1] = float("nan")
    assert torch.isnan(norm.lmo(G)).any()
    assert torch.isnan(norm.norm(G))


@pytest.mark.parametrize("norm", [LInf(), L1(), L2(), L1(-1)], ids=repr)
def test_nan_gradient_is_not_hidden_by_vector_lmos(norm, gen):
    G = _rand(gen, 4, 3)
    G[1, 1] = float("nan")
    assert torch.isnan(norm.lmo(G)).any()


def test_svd_norms_refuse_nan_rather_than_hide_it(gen):
    G = _rand(gen, 4, 3)
    G[0, 0] = float("nan")
    for norm in (Spectral(), Nuclear(), Schatten(3)):
        with pytest.raises(torch.linalg.LinAlgError):
            norm.lmo(G)


@pytest.mark.parametrize("norm", MATRIX, ids=repr)
def test_empty_matrices(norm):
    E = torch.zeros(2, 0, 3)
    assert norm.lmo(E).shape == E.shape
    assert torch.equal(norm.norm(E), torch.zeros(2))


# --- dtypes -------------------------------------------------------------------------------


@every_norm
@pytest.mark.parametrize(
    ("dtype", "rtol"), [(torch.float32, 1e-5), (torch.bfloat16, 3e-2), (torch.float16, 3e-3)]
)
def test_low_precision_in_low_precision_out(norm, dtype, rtol, gen):
    G64 = _rand(gen, 3, 9, 7)
    G = G64.to(dtype)
    D, n, dn = norm.lmo(G, 0.5), norm.norm(G), norm.dual_norm(G)
    assert D.dtype == n.dtype == dn.dtype == dtype and D.shape == G.shape
    # Against float64 on the same (rounded) input; the step's size is what must be right.
    ref = norm.lmo(G.double(), 0.5)
    err = torch.linalg.vector_norm(D.double() - ref) / torch.linalg.vector_norm(ref)
    assert err <= rtol * 10
    torch.testing.assert_close(n.double(), norm.norm(G.double()), rtol=rtol, atol=0)


# --- power method -------------------------------------------------------------------------


def _with_spectrum(gen, m, n, s, batch=()):
    k = len(s)
    U, _ = torch.linalg.qr(_rand(gen, *batch, m, k))
    V, _ = torch.linalg.qr(_rand(gen, *batch, n, k))
    return (U * torch.tensor(s, dtype=torch.float64)) @ V.mT


@pytest.mark.parametrize(("m", "n", "batch"), [(7, 5, ()), (13, 31, ()), (9, 6, (3,))])
def test_power_method_agrees_with_svd_given_a_gap(m, n, batch, gen):
    G = _with_spectrum(gen, m, n, [5.0, 2.0, 1.5, 0.5, 0.1], batch)
    exact = nuclear_lmo(G, 1.0)
    # (s2/s1)^(2k) = 0.4^20 ~ 1e-8 after the default 10 steps.
    torch.testing.assert_close(nuclear_lmo(G, 1.0, method="power"), exact, rtol=0, atol=1e-6)
    torch.testing.assert_close(
        nuclear_lmo(G, 1.0, method="power", power_iters=40), exact, rtol=0, atol=1e-12
    )
    _, sigma, _ = top_singular_pair(G, method="power")
    torch.testing.assert_close(sigma, torch.full(batch, 5.0, dtype=torch.float64))


def test_power_method_is_deterministic_and_warm_startable(gen):
    G = _with_spectrum(gen, 13, 31, [3.0, 2.9, 1.0])  # a small gap: few steps do not converge
    a = nuclear_lmo(G, method="power", power_iters=2, seed=3)
    assert torch.equal(a, nuclear_lmo(G, method="power", power_iters=2, seed=3))
    assert not torch.equal(a, nuclear_lmo(G, method="power", power_iters=2, seed=4))
    _, _, v = top_singular_pair(G)
    u1, s1, v1 = top_singular_pair(G, method="power", power_iters=1, v0=v)
    torch.testing.assert_close(s1, torch.tensor(3.0, dtype=torch.float64))
    torch.testing.assert_close(G @ v1, s1 * u1)


def test_power_method_on_zero_matrix():
    u, s, v = top_singular_pair(torch.zeros(4, 3), method="power")
    assert torch.equal(u, torch.zeros(4)) and s == 0 and torch.equal(v, torch.zeros(3))


# --- pluggable polar factor ---------------------------------------------------------------


def test_polar_fn_is_used_and_its_result_cast(gen):
    calls = []

    def polar(G):
        calls.append(G.dtype)
        U, _, Vh = torch.linalg.svd(G.double(), full_matrices=False)
        return U @ Vh  # float64, whatever the input: the LMO must cast it back

    G = _rand(gen, 2, 7, 5)
    torch.testing.assert_close(Spectral(polar_fn=polar).lmo(G, 0.3), spectral_lmo(G, 0.3))
    Gb = G.to(torch.bfloat16)
    D = spectral_lmo(Gb, 0.3, polar_fn=polar)
    assert D.dtype == torch.bfloat16
    assert calls == [torch.float64, torch.bfloat16]  # polar_fn sees the caller's dtype


def test_polar_fn_cannot_leak_noise_into_a_zero_matrix(gen):
    G = _rand(gen, 3, 4, 4)
    G[2] = 0
    D = spectral_lmo(G, 1.0, polar_fn=lambda X: torch.ones_like(X))
    assert torch.equal(D[2], torch.zeros(4, 4, dtype=torch.float64))
    assert torch.equal(D[0], -torch.ones(4, 4, dtype=torch.float64))


# --- entrywise details --------------------------------------------------------------------


def test_l1_lmo_picks_one_entry_per_vector_over_any_axes(gen):
    G = _rand(gen, 3, 6, 9)
    for dim in (None, -1, 0, (0, 2), (1, 2)):
        D = l1_lmo(G, 2.0, dim=dim)
        n = L1(dim)
        assert torch.all((D != 0).sum(dim=n.dims(G)) == 1)
        torch.testing.assert_close(n.inner(G, D), -2.0 * LInf(dim).norm(G))
    g = torch.tensor([1.0, -3.0, 3.0])  # a tie: the first largest entry wins
    assert torch.equal(l1_lmo(g), torch.tensor([0.0, 1.0, 0.0]))


def test_linf_lmo_goes_through_the_sign_kernel(gen, monkeypatch):
    import shared_core.lmo.entrywise as entrywise

    seen = []

    def spy(g, r):
        seen.append(r)
        return -r * torch.sign(g)

    monkeypatch.setattr(entrywise, "sign_lmo", spy)
    LInf().lmo(_rand(gen, 5), 0.25)
    assert seen == [0.25]


# --- docstring examples -------------------------------------------------------------------


def _modules():
    yield lmo
    for info in pkgutil.iter_modules(lmo.__path__):
        yield importlib.import_module(f"{lmo.__name__}.{info.name}")


@pytest.mark.parametrize("module", list(_modules()), ids=lambda m: m.__name__)
def test_docstring_examples_run(module):
    result = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0
    if not module.__name__.endswith("._common"):
        assert result.attempted > 0, f"{module.__name__} has no runnable example"
