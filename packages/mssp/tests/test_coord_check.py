"""Coordinate checks: every exponent of the tables against measured slopes versus size.

Models of sizes s = 1, 2, 4, 8 times the base along each regime's axis are trained 3 steps; the
slope of log(observable) on log(s) must match the exponent :data:`mssp.EXPECTED` predicts.

Tolerance: 0.2 on a slope fitted over log(8) = 2.08. Each observable is an rms over >= 256 x
16 coordinates averaged over 3 seeds; the leftover error is finite-size (widths 16-128), which
the first runs put at <= 0.12 for the own-weight observables below (0.56 vs 0.5, 0.08 vs 0) and
at <= 0.35 for the init aggregation output (the effective number of experts is below K at
K <= 8), which is why that one gets 0.35. SP's blow-up is checked as a slope above 0.5 (theory:
+1 for Adam with a width-independent learning rate).
"""

from __future__ import annotations

import functools

import pytest

from mssp import EXPECTED
from mssp.observables import coord_check

BASE = {"N": 16, "Ne": 16, "M": 4, "K": 1, "L": 1}
SCALES = [1, 2, 4, 8]
TOL = 0.2


def _run(scheme, optimizer, regime, lr):
    return coord_check(
        scheme, optimizer, regime, base=BASE, scales=SCALES, lr=lr, steps=3, seeds=3, clusters=8
    )["slopes"]


@pytest.mark.parametrize("regime", ["I", "II", "III"])
@pytest.mark.parametrize("scheme", ["mup", "mssp"])
def test_adam_exponents(scheme, regime):
    slopes = _run(scheme, "adam", regime, 1e-2)
    exp = EXPECTED[(scheme, regime)]
    assert abs(slopes["du_own"] - exp["du"]) < TOL, slopes
    assert abs(slopes["dlogits_own"] - exp["dlogits"]) < TOL, slopes
    assert abs(slopes["dz"] - exp["dz"]) < TOL, slopes
    assert abs(slopes["h"] - exp["h"]) < TOL, slopes
    assert abs(slopes["combine0"] - exp["combine0"]) < 0.35, slopes


@pytest.mark.parametrize("regime", ["II", pytest.param("I", marks=pytest.mark.slow)])
def test_adam_sp_blows_up(regime):
    slopes = _run("sp", "adam", regime, 1e-2)
    assert slopes["du_own"] > 0.5, slopes
    assert slopes["dlogits_own"] > 0.5, slopes


@pytest.mark.slow
def test_sgd_regime_one():
    # SGD's router logits move through y.delta, random (n^-1/2) before alignment, so only the
    # expert and output observables are checked at 3 steps.
    slopes = _run("mup", "sgd", "I", 0.1)
    assert abs(slopes["du_own"]) < TOL, slopes
    assert abs(slopes["dz"]) < TOL, slopes
    assert abs(slopes["h"]) < TOL, slopes
    sp = _run("sp", "sgd", "I", 0.1)
    assert sp["du_own"] > 1.0, sp


@pytest.mark.slow
def test_depth_mup_branches():
    """Depth-muP (beta = l^-1/2, Adam lr of block weights x l^-1/2), L = 1..8 at fixed width:
    the residual stream and its relative change are depth-independent (slope 0), each block's
    own expert update shrinks as l^-1/2 (slope -1/2); SP's feature change grows with depth."""
    base = {"N": 16, "Ne": 16, "M": 4, "K": 1, "L": 1}

    def slopes(scheme):
        return coord_check(
            scheme,
            "adam",
            "I",
            base=base,
            scales=SCALES,
            lr=1e-2,
            steps=3,
            seeds=2,
            clusters=8,
            depth=True,
        )["slopes"]

    mu, sp = slopes("mup"), slopes("sp")
    assert abs(mu["h"]) < TOL, mu
    assert abs(mu["feature_learning"]) < TOL, mu
    assert abs(mu["du_own"] + 0.5) < TOL, mu
    assert sp["feature_learning"] > mu["feature_learning"] + 0.25, (sp, mu)


# Long SGD check of the router exponent (regimes II/III). Rule fixed before the first run
# (2026-12-04): 20 unobserved warm-up steps (the expert outputs align with the backward
# signal), then the change over the next 20 steps; SGD lr 0.1, batch 128, sizes s = 1, 2, 4, 8
# from N = N_e = 16, M = 4, K = 1, 3 seeds. The table's router and expert exponents are
# confirmed iff the slopes of dlogits_own and du_own are within 0.2 of EXPECTED (muP -1/2,
# MSSP 0) for muP and MSSP in both regimes; any slope off by more than 0.2 refutes them.
# dz and h are checked with the same 0.2 as in the Adam check.
# Measured (README, "SGD coordinate check"): every slope within 0.2 except muP's router,
# -0.79 (II) and -0.87 (III): the table's muP-SGD router exponent is refuted; that check is a
# strict xfail, so that a change which makes it pass shows up.
SGD_WARMUP, SGD_STEPS, SGD_LR = 20, 20, 0.1


@functools.cache
def _sgd_slopes(scheme, regime):
    return coord_check(
        scheme,
        "sgd",
        regime,
        base=BASE,
        scales=SCALES,
        lr=SGD_LR,
        steps=SGD_STEPS,
        warmup=SGD_WARMUP,
        seeds=3,
        clusters=8,
    )["slopes"]


@pytest.mark.slow
@pytest.mark.parametrize("regime", ["II", "III"])
@pytest.mark.parametrize("scheme", ["mup", "mssp"])
def test_sgd_exponents_after_alignment(scheme, regime):
    slopes = _sgd_slopes(scheme, regime)
    exp = EXPECTED[(scheme, regime)]
    assert abs(slopes["du_own"] - exp["du"]) < TOL, slopes
    assert abs(slopes["dz"] - exp["dz"]) < TOL, slopes
    assert abs(slopes["h"] - exp["h"]) < TOL, slopes


@pytest.mark.slow
@pytest.mark.parametrize("regime", ["II", "III"])
@pytest.mark.parametrize(
    "scheme",
    [
        pytest.param(
            "mup",
            marks=pytest.mark.xfail(
                strict=True,
                reason="measured -0.79 (II) / -0.87 (III) vs the table's -1/2: refuted",
            ),
        ),
        "mssp",
    ],
)
def test_sgd_router_exponent_after_alignment(scheme, regime):
    slopes = _sgd_slopes(scheme, regime)
    assert abs(slopes["dlogits_own"] - EXPECTED[(scheme, regime)]["dlogits"]) < TOL, slopes


def test_warmup_trains_the_same_stream_and_observes_from_there():
    # warmup=2, steps=1 must end at the same weights as 3 observed steps (same data stream),
    # and measure changes over the last step only (smaller than over all three).
    kw = dict(base=BASE, scales=[1, 2], lr=0.05, batch=32, seeds=1, clusters=8)
    full = coord_check("mssp", "sgd", "II", steps=3, **kw)["values"]
    late = coord_check("mssp", "sgd", "II", steps=1, warmup=2, **kw)["values"]
    assert late["h"] == full["h"]
    assert all(a < b for a, b in zip(late["du_own"], full["du_own"], strict=True))
    with pytest.raises(ValueError, match="warmup"):
        coord_check("mssp", "sgd", "II", steps=1, warmup=-1, **kw)
