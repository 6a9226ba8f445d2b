"""Behaviour of shared_core.mirror: factory, validation, NaN, dtypes, and the docstring examples."""

from __future__ import annotations

import doctest
import importlib
import io
import math
import pkgutil
import re

import pytest
import torch

import shared_core.mirror as mirror
from shared_core.mirror import MIRRORS, Ball, Box, Euclidean, NegEntropy, PNorm, get_mirror

MAPS = [Euclidean(), Euclidean(Ball(2.0)), Euclidean(Box(-1.0, 1.0)), NegEntropy(), PNorm(1.5)]
every_map = pytest.mark.parametrize("m", MAPS, ids=repr)


def _point(m, gen, *shape, dtype=torch.float64):
    x = torch.randn(*shape, generator=gen, dtype=torch.float64)
    if isinstance(m, NegEntropy):
        x = torch.softmax(x, -1)
    return x.to(dtype)


# --- factory ------------------------------------------------------------------------------


def test_get_mirror_builds_each_map():
    assert isinstance(get_mirror("euclidean"), Euclidean)
    ball = Ball(1.0)
    assert get_mirror("Euclidean", domain=ball).domain is ball
    for name in ("entropy", "negentropy", "simplex", " NegEntropy "):
        assert isinstance(get_mirror(name), NegEntropy)
    m = get_mirror("pnorm", p=1.25, radius=3.0)
    assert isinstance(m, PNorm) and (m.p, m.q, m.radius) == (1.25, 5.0, 3.0)
    inst = NegEntropy()
    assert get_mirror(inst) is inst
    assert set(MIRRORS) == {"euclidean", "entropy", "pnorm"}


@pytest.mark.parametrize(
    ("name", "kwargs", "match"),
    [
        ("kl", {}, "'kl'"),
        (None, {}, "None"),
        ("pnorm", {}, "pnorm"),
        ("euclidean", {"radius": 1.0}, "radius"),
        ("euclidean", {"domain": "ball"}, "'ball'"),
        (NegEntropy(), {"tol": 1.0}, "tol"),
    ],
)
def test_get_mirror_rejects_bad_requests(name, kwargs, match):
    with pytest.raises(ValueError, match=match):
        get_mirror(name, **kwargs)


# --- constructor validation ---------------------------------------------------------------


@pytest.mark.parametrize("p", [1.0, 0.5, 2.5, math.inf, float("nan"), "two"])
def test_pnorm_p_outside_the_open_closed_interval_raises(p):
    with pytest.raises(ValueError, match=re.escape(f"got {p!r}")):
        PNorm(p)


@pytest.mark.parametrize("radius", [0.0, -1.0, float("nan"), math.inf])
def test_pnorm_bad_radius_raises(radius):
    with pytest.raises(ValueError, match="radius"):
        PNorm(1.5, radius=radius)


def test_domain_validation():
    with pytest.raises(ValueError, match="radius"):
        Ball(-1.0)
    with pytest.raises(ValueError, match="radius"):
        Ball(float("nan"))
    with pytest.raises(ValueError, match="center"):
        Ball(1.0, center=torch.tensor([0.0, float("nan")]))
    with pytest.raises(ValueError, match="lo <= hi"):
        Box(1.0, 0.0)
    with pytest.raises(ValueError, match="lo <= hi"):
        Box(torch.tensor([0.0, 2.0]), torch.tensor([1.0, 1.0]))
    with pytest.raises(ValueError, match="NaN"):
        Box(float("nan"), 1.0)
    with pytest.raises(ValueError, match="tol"):
        NegEntropy(tol=-1.0)


# --- step validation ----------------------------------------------------------------------


@every_map
@pytest.mark.parametrize("lr", [0.0, -0.1, float("nan"), math.inf, "fast", None])
def test_bad_lr_raises_naming_it(m, lr, gen):
    x = _point(m, gen, 5)
    with pytest.raises(ValueError, match=re.escape(f"got {lr!r}")):
        m.step(x, torch.ones(5, dtype=torch.float64), lr)


@every_map
def test_shape_mismatch_and_bad_types_raise(m, gen):
    x = _point(m, gen, 5)
    with pytest.raises(ValueError, match=r"\(4,\) differs .* \(5,\)"):
        m.step(x, torch.ones(4, dtype=torch.float64), 0.1)
    with pytest.raises(TypeError, match="gradient"):
        m.step(x, [1.0] * 5, 0.1)
    with pytest.raises(ValueError, match="0-D"):
        m.psi(torch.tensor(1.0))
    with pytest.raises(ValueError, match="floating-point"):
        m.grad_psi(torch.ones(3, dtype=torch.int32))


@pytest.mark.parametrize(
    ("x", "match"),
    [
        ([0.5, 0.6, -0.1], "x >= 0"),
        ([0.5, 0.6, 0.1], "simplex"),
        ([0.2, 0.2, 0.2], "simplex"),
        ([0.5, float("nan"), 0.5], "x >= 0"),
    ],
)
def test_entropy_refuses_points_off_the_simplex(x, match):
    m = NegEntropy()
    x = torch.tensor(x, dtype=torch.float64)
    with pytest.raises(ValueError, match=match):
        m.check(x)
    with pytest.raises(ValueError, match=match):
        m.step(x, torch.zeros(3, dtype=torch.float64), 0.1)


def test_entropy_check_tolerance_follows_the_dtype(gen):
    m = NegEntropy()
    for dtype in (torch.float64, torch.float32, torch.bfloat16):
        # Points normalised in their own dtype pass, including long vectors.
        for d in (3, 1000):
            m.check(_point(m, gen, 4, d, dtype=dtype))
    off = torch.tensor([0.5, 0.5 + 1e-9], dtype=torch.float64)
    with pytest.raises(ValueError, match="simplex"):
        m.check(off)
    NegEntropy(tol=1e-6).check(off)
    NegEntropy(validate=False).step(off, torch.zeros(2, dtype=torch.float64), 0.1)


def test_entropy_refuses_negative_inputs_to_its_formulas():
    m = NegEntropy()
    neg = torch.tensor([0.5, -0.5, 1.0])
    for call in (m.psi, m.grad_psi, m.project):
        with pytest.raises(ValueError, match="x >= 0"):
            call(neg)
    with pytest.raises(ValueError, match="nonzero sum"):
        m.project(torch.zeros(3))


def test_check_of_constrained_domains():
    Euclidean(Ball(1.0)).check(torch.tensor([0.6, 0.8]))
    with pytest.raises(ValueError, match="outside Ball"):
        Euclidean(Ball(1.0)).check(torch.tensor([0.6, 0.9]))
    with pytest.raises(ValueError, match="outside Box"):
        Euclidean(Box(0.0, 1.0)).check(torch.tensor([[0.5, 0.5], [0.5, 1.5]]))
    PNorm(1.5, radius=1.0).check(torch.tensor([1.0, 0.0]))
    with pytest.raises(ValueError, match="radius"):
        PNorm(1.5, radius=1.0).check(torch.tensor([1.0, 0.1]))


# --- NaN is never hidden ------------------------------------------------------------------


@every_map
def test_nan_gradient_is_not_hidden(m, gen):
    x = _point(m, gen, 2, 5)
    g = torch.randn(2, 5, generator=gen, dtype=torch.float64)
    g[0, 3] = float("nan")
    out = m.step(x, g, 0.1)
    assert torch.isnan(out[0]).any()
    assert not torch.isnan(out[1]).any()  # the other vector of the batch is unaffected


@pytest.mark.parametrize(
    "domain", [Ball(1.0), Ball(0.0), Box(-1.0, 1.0), None], ids=["ball", "point", "box", "none"]
)
def test_projections_keep_nan(domain):
    y = torch.tensor([float("nan"), 3.0, 0.0])
    assert torch.isnan(Euclidean(domain).project(y)).any()
    assert torch.isnan(PNorm(1.5, radius=1.0).project(y)).any()


# --- degenerate points --------------------------------------------------------------------


def test_zero_vector_maps_to_zero_for_pnorm():
    for p in (1.2, 1.5, 2.0):
        m = PNorm(p)
        z = torch.zeros(2, 4, dtype=torch.float64)
        assert torch.equal(m.grad_psi(z), z) and torch.equal(m.grad_psi_star(z), z)
        assert torch.equal(m.bregman(z, z), torch.zeros(2, dtype=torch.float64))


def test_pnorm_maps_stay_finite_for_extreme_exponents():
    m = PNorm(1.01)  # q = 101: |theta|^100 overflows float32 without rescaling
    theta = torch.tensor([30.0, -5.0, 1.0], dtype=torch.float64)
    out32 = m.grad_psi_star(theta.float())
    assert torch.isfinite(out32).all()
    out64 = m.grad_psi_star(theta)
    torch.testing.assert_close(out32.double(), out64, rtol=1e-6, atol=1e-30)
    # Entries like 30 * 6**-100 exist only in float64, where the round trip is exact.
    torch.testing.assert_close(m.grad_psi(out64), theta, rtol=1e-10, atol=0)


def test_ball_projection_to_a_single_point_and_about_a_center():
    torch.testing.assert_close(
        Ball(0.0, center=2.0).project(torch.tensor([5.0, -1.0])), torch.tensor([2.0, 2.0])
    )
    c = torch.tensor([1.0, 1.0])
    torch.testing.assert_close(
        Ball(1.0, center=c).project(torch.tensor([4.0, 5.0])), torch.tensor([1.6, 1.8])
    )


# --- dtypes -------------------------------------------------------------------------------


@every_map
@pytest.mark.parametrize(
    ("dtype", "atol"), [(torch.float32, 1e-6), (torch.bfloat16, 2e-2), (torch.float16, 2e-3)]
)
def test_low_precision_in_low_precision_out(m, dtype, atol, gen):
    x = _point(m, gen, 3, 6, dtype=dtype)
    g = torch.randn(3, 6, generator=gen).to(dtype)
    out = m.step(x, g, 0.2)
    assert out.dtype == dtype and out.shape == x.shape
    # A low-precision simplex point is off the simplex at float64's tolerance; the float64
    # reference renormalises it anyway (softmax), so it skips the check.
    ref_map = NegEntropy(validate=False) if isinstance(m, NegEntropy) else m
    ref = ref_map.step(x.double(), g.double(), 0.2)
    torch.testing.assert_close(out.double(), ref, rtol=0, atol=atol * (1 + ref.abs().max()))
    for value in (m.psi(x), m.bregman(x, x), m.grad_psi(x), m.project(x)):
        assert value.dtype == dtype
    if isinstance(m, NegEntropy):
        m.check(out)  # the step of a low-precision point is still a valid point


# --- docstring examples -------------------------------------------------------------------


def _modules():
    yield mirror
    for info in pkgutil.iter_modules(mirror.__path__):
        yield importlib.import_module(f"{mirror.__name__}.{info.name}")


@pytest.mark.parametrize("module", list(_modules()), ids=lambda m: m.__name__)
def test_docstring_examples_run(module):
    result = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0
    if not module.__name__.endswith(("._common", ".base")):
        assert result.attempted > 0, f"{module.__name__} has no runnable example"


@every_map
def test_maps_load_from_a_checkpoint_with_weights_only(m):
    # Optimizers keep their map in param_groups; torch.load's default weights_only=True must
    # bring it back equal in behaviour.
    buf = io.BytesIO()
    torch.save({"param_groups": [{"mirror": m, "lr": 0.1}]}, buf)
    buf.seek(0)
    back = torch.load(buf, weights_only=True)["param_groups"][0]["mirror"]
    assert type(back) is type(m) and back is not m
    gen = torch.Generator().manual_seed(7)
    x, g = _point(m, gen, 5, 9), torch.randn(5, 9, generator=gen, dtype=torch.float64)
    assert torch.equal(back.step(x, g, 0.3), m.step(x, g, 0.3))
