"""traker-compatibility mode: float32 in traker's order, against float64 references and traker."""

import math

import numpy as np
import pytest
import torch

from trak_theory.scores import traker_scores
from trak_theory.traker_compat import (
    traker_f32_features,
    traker_f32_project,
    traker_f32_scores,
)


@pytest.mark.parametrize("k", [7, 100, 233])
def test_project_is_the_scaled_product(gen, k):
    # column blocks of 100 (one, exactly one, and a ragged last block) change no value
    p = 257
    g = torch.randn(13, p, generator=gen)
    mat = torch.randn(p, k, generator=gen)
    got = traker_f32_project(g, mat)
    assert got.dtype == torch.float32 and got.shape == (13, k)
    ref = g.double() @ mat.double() / math.sqrt(p)
    np.testing.assert_allclose(
        got.double().numpy(), ref.numpy(), rtol=0, atol=2e-5 * ref.abs().max()
    )
    with pytest.raises(ValueError, match="matrix"):
        traker_f32_project(g, mat[:-1])


def test_scores_match_the_float64_formula(gen):
    # well conditioned: float32 in traker's order agrees with the float64 formula to round-off
    n, m, k, ridge = 91, 17, 23, 0.37
    phis = [torch.randn(n, k, generator=gen) for _ in range(3)]
    tgts = [torch.randn(m, k, generator=gen) for _ in range(3)]
    qs = [torch.rand(n, generator=gen) for _ in range(3)]
    got = traker_f32_scores(phis, tgts, qs, ridge=ridge)
    assert got.dtype == torch.float32 and got.shape == (m, n)
    ref = traker_scores(phis, tgts, qs, ridge=ridge)
    err = float((got.double() - ref).abs().max() / ref.abs().max())
    assert err < 1e-5
    # row blocks of the Gram and feature products change no value either
    blocked = traker_f32_scores(phis, tgts, qs, ridge=ridge, row_block=10)
    assert float((blocked.double() - ref).abs().max() / ref.abs().max()) < 1e-5
    with pytest.raises(ValueError, match="no models"):
        traker_f32_scores([], [], [])
    with pytest.raises(ValueError, match="shapes differ"):
        traker_f32_scores([phis[0], phis[1][:-1]], tgts[:2], qs[:2])


def test_float32_order_shows_the_round_off_of_an_ill_conditioned_gram(gen):
    # the reason the mode exists: at a large condition number float32 and float64 differ by
    # far more than float32 resolution, so comparing traker with float64 mixes in round-off
    n, k = 300, 40
    base = torch.randn(n, k, dtype=torch.float64, generator=gen)
    # condition number ~1e6, and rotated: a column scaling alone would not hurt float32
    scale = torch.logspace(0, -3, k, dtype=torch.float64)
    rot = torch.linalg.qr(torch.randn(k, k, dtype=torch.float64, generator=gen))[0]
    phi = (base * scale) @ rot
    tgt = (torch.randn(9, k, dtype=torch.float64, generator=gen) * scale) @ rot
    q = torch.rand(n, dtype=torch.float64, generator=gen)
    ref = traker_scores([phi], [tgt], [q])
    got = traker_f32_scores([phi.float()], [tgt.float()], [q.float()])
    err = float((got.double() - ref).abs().max() / ref.abs().max())
    assert 1e-5 < err < 0.5


def test_bit_for_bit_with_traker(gen):
    pytest.importorskip("trak")
    from trak_theory.experiments import _traker

    n, m, k, bs = 37, 11, 105, 10  # k > 100: two projection blocks, the last one ragged
    x, xt = torch.randn(n, 7, generator=gen), torch.randn(m, 7, generator=gen)
    y = torch.randint(0, 4, (n,), generator=gen)
    yt = torch.randint(0, 4, (m,), generator=gen)
    states = []
    for s in range(2):
        torch.manual_seed(100 + s)
        states.append(
            torch.nn.Sequential(
                torch.nn.Linear(7, 9), torch.nn.ReLU(), torch.nn.Linear(9, 4)
            ).state_dict()
        )
    net = torch.nn.Sequential(torch.nn.Linear(7, 9), torch.nn.ReLU(), torch.nn.Linear(9, 4))
    p = sum(t.numel() for t in net.parameters())
    trk = _traker.traker_scores_for(net, states, x, y, xt, yt, k, [1, 2], batch_size=bs)
    phis, tgts, qs = [], [], []
    for j, st in enumerate(states):
        net.load_state_dict(st)
        mat = _traker.traker_matrix(p, k, j)
        phi, q = traker_f32_features(net, x, y, mat, batch_size=bs)
        phis.append(phi)
        qs.append(q)
        tgts.append(traker_f32_features(net, xt, yt, mat, batch_size=bs)[0])
    for jj in (1, 2):
        ours = traker_f32_scores(phis[:jj], tgts[:jj], qs[:jj]).numpy().astype(np.float64)
        # bit for bit, even here where k > n makes the Gram matrix singular (round-off)
        assert np.array_equal(ours, trk[jj])


def test_one_model_with_a_one_block_projector_matches_our_float32_route(gen):
    # traker 0.3.2 alone raises AttributeError 'proj_matrix' here (k <= 100, one model); the
    # wrapper works around it, and its scores are still traker's, bit for bit
    pytest.importorskip("trak")
    from trak_theory.experiments import _traker

    n, m, k, bs = 23, 5, 16, 10
    x, xt = torch.randn(n, 7, generator=gen), torch.randn(m, 7, generator=gen)
    y = torch.randint(0, 4, (n,), generator=gen)
    yt = torch.randint(0, 4, (m,), generator=gen)
    torch.manual_seed(7)
    net = torch.nn.Sequential(torch.nn.Linear(7, 9), torch.nn.ReLU(), torch.nn.Linear(9, 4))
    state = {key: v.clone() for key, v in net.state_dict().items()}
    trk = _traker.traker_scores_for(net, [state], x, y, xt, yt, k, [1], batch_size=bs)
    net.load_state_dict(state)
    p = sum(t.numel() for t in net.parameters())
    mat = _traker.traker_matrix(p, k, 0)
    phi, q = traker_f32_features(net, x, y, mat, batch_size=bs)
    tgt = traker_f32_features(net, xt, yt, mat, batch_size=bs)[0]
    ours = traker_f32_scores([phi], [tgt], [q]).numpy().astype(np.float64)
    assert np.array_equal(ours, trk[1])
