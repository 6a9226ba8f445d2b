"""The transformer: valid predictive, input format, masking, checkpoints, bad input."""

import math

import pytest
import torch

from ficbo.model import (
    FICBOModel,
    ModelConfig,
    encode_tokens,
    feedback_sensitivity,
    gaussian_nll,
    load,
    pretrain,
    save,
)

CFG = ModelConfig(max_dim=3, n_sources=2, d_model=16, n_heads=2, n_layers=1, d_ff=32)


def _inputs(b=2, h=5, c=7, d=2, s=2, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (
        torch.rand(b, h, d, generator=g),
        torch.randn(b, h, generator=g),
        torch.randn(b, s, h, generator=g),
        torch.rand(b, c, d, generator=g),
        torch.randn(b, s, c, generator=g),
    )


def test_output_is_a_valid_gaussian_per_candidate():
    torch.manual_seed(0)
    mean, std = FICBOModel(CFG)(*_inputs())
    assert mean.shape == (2, 7) and std.shape == (2, 7)
    assert torch.isfinite(mean).all() and (std > 0).all()


def test_gaussian_nll_matches_torch_distribution():
    g = torch.Generator().manual_seed(1)
    mu, y = torch.randn(4, 6, generator=g), torch.randn(4, 6, generator=g)
    sd = torch.rand(4, 6, generator=g) + 0.1
    ref = -torch.distributions.Normal(mu, sd).log_prob(y).mean()
    assert torch.allclose(gaussian_nll(mu, sd, y), ref, atol=1e-6)


def test_candidates_do_not_see_each_other():
    # PFN attention: a candidate's prediction depends on history and itself only.
    torch.manual_seed(0)
    model = FICBOModel(CFG).eval()
    xh, yh, fh, xc, fc = _inputs()
    m1, _ = model(xh, yh, fh, xc, fc)
    xc2, fc2 = xc.clone(), fc.clone()
    xc2[:, 1:] = torch.rand_like(xc2[:, 1:])
    fc2[:, :, 1:] = 5.0
    m2, _ = model(xh, yh, fh, xc2, fc2)
    assert torch.allclose(m1[:, 0], m2[:, 0], atol=1e-5)
    # ... but the history matters
    m3, _ = model(xh, yh + 1.0, fh, xc, fc)
    assert not torch.allclose(m1[:, 0], m3[:, 0], atol=1e-5)


def test_zero_sources_reduce_to_history_only_format():
    x = torch.rand(2, 4, 2)
    y = torch.randn(2, 4)
    none = encode_tokens(x, y, torch.zeros(2, 0, 4), max_dim=3, n_sources=0)
    masked = encode_tokens(x, y, torch.full((2, 2, 4), math.nan), max_dim=3, n_sources=2)
    absent = encode_tokens(x, y, torch.zeros(2, 0, 4), max_dim=3, n_sources=2)
    assert none.shape[-1] == 3 + 2
    assert torch.equal(masked[..., :5], none) and (masked[..., 5:] == 0).all()
    assert torch.equal(masked, absent)


def test_nan_feedback_is_masked_not_silently_zero():
    x = torch.rand(1, 3, 1)
    fb = torch.tensor([[[0.0, math.nan, 1.5]]])
    t = encode_tokens(x, None, fb, max_dim=1, n_sources=1)
    # columns: x, y, is_hist, value, available
    assert t[0, :, 3].tolist() == [0.0, 0.0, 1.5]
    assert t[0, :, 4].tolist() == [1.0, 0.0, 1.0]  # a real 0.0 and a NaN differ in the bit


def test_bad_inputs_raise_clear_errors():
    model = FICBOModel(CFG)
    xh, yh, fh, xc, fc = _inputs()
    with pytest.raises(ValueError, match=r"beyond the pretrained range 1\.\.3"):
        model(torch.rand(2, 5, 4), yh, fh, torch.rand(2, 7, 4), fc)
    with pytest.raises(ValueError, match="feedback must be"):
        model(xh, yh, fh, xc, fc[..., :6])  # feedback for 6 of 7 candidates
    with pytest.raises(ValueError, match="at most 2"):
        model(xh, yh, torch.randn(2, 3, 5), xc, torch.randn(2, 3, 7))
    with pytest.raises(ValueError, match="at least one point"):
        model(xh[:, :0], yh[:, :0], fh[..., :0], xc, fc)
    with pytest.raises(ValueError, match="NaN"):
        model(xh, yh.masked_fill(torch.ones_like(yh, dtype=torch.bool), math.nan), fh, xc, fc)
    with pytest.raises(ValueError, match="divisible"):
        ModelConfig(d_model=10, n_heads=4)


def test_checkpoint_round_trip_is_deterministic(tmp_path):
    model, stats = pretrain(CFG, steps=3, batch_size=4, n_points=8, seed=3)
    assert stats["tasks_per_second"] > 0 and math.isfinite(stats["final_loss"])
    path = tmp_path / "m.pt"
    save(model, path)
    loaded = load(path)
    assert loaded.config == CFG
    inp = _inputs(d=3)
    a, b = model(*inp), loaded(*inp)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


def test_pretraining_is_seeded_and_reduces_loss():
    cfg = ModelConfig(max_dim=1, n_sources=1, d_model=16, n_heads=2, n_layers=1, d_ff=32)
    m1, _ = pretrain(cfg, steps=2, batch_size=4, n_points=8, seed=5)
    m2, _ = pretrain(cfg, steps=2, batch_size=4, n_points=8, seed=5)
    for p, q in zip(m1.parameters(), m2.parameters(), strict=True):
        assert torch.equal(p, q)
    # Learning: 60 steps beat the untrained model's NLL on the same held-out prior batch.
    from ficbo.prior import sample_training_batch

    batch = sample_training_batch(
        64, 16, 8, dim=1, max_dim=1, n_sources=1, generator=torch.Generator().manual_seed(99)
    )
    args = [batch[k] for k in ("x_hist", "y_hist", "fb_hist", "x_cand", "fb_cand")]
    torch.manual_seed(0)
    fresh = FICBOModel(cfg).eval()
    trained, _ = pretrain(cfg, steps=60, batch_size=16, n_points=16, lr=3e-3, seed=0)
    with torch.no_grad():
        before = gaussian_nll(*fresh(*args), batch["y_cand"])
        after = gaussian_nll(*trained(*args), batch["y_cand"])
    assert after < before - 0.1


def test_feedback_sensitivity_matches_finite_differences():
    torch.manual_seed(1)
    model = FICBOModel(CFG).eval()
    xh, yh, fh, xc, fc = _inputs(b=2, c=4)
    fc[1, 1, 2] = math.nan  # left out of the average
    sens = feedback_sensitivity(model, xh, yh, fh, xc, fc)
    assert sens.shape == (2, 2)
    eps = 1e-2
    for b in range(2):
        for s in range(2):
            ds = []
            for c in range(4):
                if math.isnan(float(fc[b, s, c])):
                    continue
                up, dn = fc.clone(), fc.clone()
                up[b, s, c] += eps
                dn[b, s, c] -= eps
                with torch.no_grad():
                    d = (model(xh, yh, fh, xc, up)[0] - model(xh, yh, fh, xc, dn)[0])[b, c]
                ds.append(float(d) / (2 * eps))
            # central differences in float32: error ~ eps^2 * curvature + 1e-7 / eps
            assert float(sens[b, s]) == pytest.approx(sum(ds) / len(ds), abs=2e-3)


def test_shipped_checkpoints_load_and_are_deterministic():
    from ficbo.model import pretrained

    fic, hist = pretrained("quick-ficbo"), pretrained("quick-history-only")
    assert fic.config.n_sources == 1 and hist.config.n_sources == 0
    assert fic.config.max_dim == 2 and not fic.training
    inp = _inputs(s=1)
    a, b = fic(*inp), pretrained("quick-ficbo")(*inp)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    two = pretrained("quick-ficbo-2src")
    assert two.config.n_sources == 2 and two.config.max_dim == 2 and not two.training
    inp2 = _inputs(s=2)
    assert torch.equal(two(*inp2)[0], pretrained("quick-ficbo-2src")(*inp2)[0])
    with pytest.raises(ValueError, match="unknown checkpoint"):
        pretrained("default")


@pytest.mark.parametrize(
    ("name", "n_sources"),
    [
        ("default-ficbo", 1),
        ("default-history-only", 0),
        ("default-ficbo-2src", 2),
        ("long-history-only", 0),
    ],
)
def test_larger_checkpoints_load_and_are_deterministic(name, n_sources):
    from ficbo.model import SHIPPED, pretrained

    model = pretrained(name, device="cpu")
    assert name in SHIPPED and not model.training
    assert model.config.n_sources == n_sources and model.config.max_dim == 2
    assert model.config.d_model == 64 and model.config.head == "gaussian"
    inp = _inputs(s=n_sources)
    a, b = model(*inp), pretrained(name)(*inp)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert torch.isfinite(a[0]).all() and (a[1] > 0).all()
