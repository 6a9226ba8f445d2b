"""TRAK end to end: scores vs the formula on brute-force features, ensembling, save/resume."""

import json

import numpy as np
import pytest
import torch
from torch import nn

from trak_theory import TRAK
from trak_theory.gradients import margin, out_to_loss, per_example_grads
from trak_theory.projector import IdentityProjector, MatrixProjector, SketchProjector
from trak_theory.scores import trak_scores


def _setup(gen, n=37):
    torch.manual_seed(int(torch.randint(0, 10**6, (1,), generator=gen)))
    net = nn.Sequential(nn.Linear(6, 5), nn.Tanh(), nn.Linear(5, 3))
    x = torch.randn(n, 6, generator=gen)
    y = torch.randint(0, 3, (n,), generator=gen)
    return net, x, y


def _ck(net):
    return {k: v.detach().clone() for k, v in net.state_dict().items()}


def _brute_scores(net, x, y, xt, yt, proj, ridge):
    phi = proj.project(torch.stack([_g(net, x[i], y[i]) for i in range(len(x))]))
    tgt = proj.project(torch.stack([_g(net, xt[i], yt[i]) for i in range(len(xt))]))
    return trak_scores(phi, tgt, out_to_loss(net, x, y), ridge)


def _g(net, xi, yi):
    net.zero_grad()
    margin(net(xi[None])[0], yi).backward()
    return torch.cat([p.grad.flatten() for p in net.parameters()])


@pytest.mark.parametrize("k", [None, 11])
def test_scores_match_formula_on_autograd_features(gen, k):
    net, x, y = _setup(gen)
    trak = TRAK(net, x, y, k=k, ridge=0.05, batch_size=8, seed=3)
    ck = _ck(net)
    trak.featurize(ck, model_id=0)
    got = trak.score(x[:5], y[:5], {0: ck})
    proj = IdentityProjector(trak.p) if k is None else SketchProjector(trak.p, k, seed=3)
    want = _brute_scores(net, x, y, x[:5], y[:5], proj, 0.05)
    torch.testing.assert_close(got, want, rtol=2e-4, atol=1e-6)


def test_ensemble_averages_kernel_scores_and_weights_separately(gen):
    net, x, y = _setup(gen)
    cks = {}
    for j in range(2):
        with torch.no_grad():
            for p in net.parameters():
                p.add_(0.3 * torch.randn(p.shape, generator=gen))
        cks[j] = _ck(net)
    trak = TRAK(net, x, y, k=9, ridge=0.1, batch_size=10)
    for j, ck in cks.items():
        trak.featurize(ck, model_id=j)
    ens = trak.score(x[:4], y[:4], cks)
    per, qs = [], []
    for j, ck in cks.items():
        net.load_state_dict(ck)
        proj = SketchProjector(trak.p, 9, seed=j)
        per.append(_brute_scores(net, x, y, x[:4], y[:4], proj, 0.1) / out_to_loss(net, x, y))
        qs.append(out_to_loss(net, x, y))
    want = (per[0] + per[1]) / 2 * ((qs[0] + qs[1]) / 2)[None, :]
    torch.testing.assert_close(ens, want, rtol=2e-4, atol=1e-6)
    assert not torch.allclose(per[0], per[1])


def test_auto_ridge_is_zero_when_k_small_and_positive_near_n(gen):
    net, x, y = _setup(gen, n=40)
    for k, positive in ((5, False), (38, True)):
        trak = TRAK(net, x, y, k=k, batch_size=16)
        trak.featurize(_ck(net))
        trak.score(x[:2], y[:2])
        assert (trak.ridges[0] > 0) == positive


def test_interrupted_featurisation_resumes_without_recomputing(gen, tmp_path):
    net, x, y = _setup(gen, n=45)  # 6 blocks of 8, the last one partial
    ck = _ck(net)
    ref = TRAK(net, x, y, k=7, batch_size=8, ridge=0.0)
    ref.featurize(ck)
    want = np.array(ref.store.arrays(0)[0])

    class Stop(Exception):
        pass

    def stop_after_two(b):
        if b == 2:
            raise Stop

    folder = tmp_path / "fresh" / "store"  # does not exist yet
    first = TRAK(net, x, y, k=7, batch_size=8, ridge=0.0, save_dir=folder)
    with pytest.raises(Stop):
        first.featurize(ck, on_block=stop_after_two)
    del first
    seen = []
    second = TRAK(net, x, y, k=7, batch_size=8, ridge=0.0, save_dir=folder)
    second.featurize(ck, on_block=seen.append)
    assert seen == [3, 4, 5]  # blocks 0-2 were flushed before the interruption
    np.testing.assert_array_equal(np.array(second.store.arrays(0)[0]), want)
    # a third object reads everything from disk and scores identically
    third = TRAK(net, x, y, k=7, batch_size=8, ridge=0.0, save_dir=folder)
    calls = []
    third.featurize(ck, on_block=calls.append)
    assert calls == []
    torch.testing.assert_close(third.score(x[:3], y[:3]), ref.score(x[:3], y[:3]))
    meta = json.loads((folder / "meta.json").read_text())
    assert meta["k"] == 7 and meta["n"] == 45


def test_folder_of_another_configuration_is_refused(gen, tmp_path):
    net, x, y = _setup(gen)
    TRAK(net, x, y, k=7, save_dir=tmp_path)
    with pytest.raises(ValueError, match="another configuration"):
        TRAK(net, x, y, k=8, save_dir=tmp_path)


def test_bad_inputs(gen):
    net, x, y = _setup(gen)
    with pytest.raises(ValueError, match="exceeds the number of parameters"):
        TRAK(net, x, y, k=10_000)
    with pytest.raises(ValueError, match="empty"):
        TRAK(net, x[:0], y[:0], k=4)
    with pytest.raises(ValueError, match="not differentiable"):
        TRAK(net, x, y, k=4, output_fn=lambda out, lab: out.argmax())
    trak = TRAK(net, x, y, k=4)
    other = nn.Sequential(nn.Linear(6, 4), nn.Tanh(), nn.Linear(4, 3))
    with pytest.raises(ValueError, match="checkpoint does not match"):
        trak.featurize(other.state_dict())
    with pytest.raises(ValueError, match=r"not .*featurised"):
        trak.score(x[:2], y[:2])
    bad = _ck(net)
    bad["0.weight"][0, 0] = float("nan")
    with pytest.raises(ValueError, match="non-finite"):
        trak.featurize(bad)
    with pytest.raises(ValueError, match="ridge"):
        TRAK(net, x, y, k=4, ridge=-1.0)


def test_matrix_projector_and_grads_agree(gen):
    net, x, y = _setup(gen, n=6)
    g = per_example_grads(net, x, y)
    m = torch.randn(g.shape[1], 3, generator=gen)
    torch.testing.assert_close(MatrixProjector(m, 0.5).project(g), 0.5 * g @ m)


def test_features_of_another_checkpoint_are_recomputed_not_reused(gen, tmp_path):
    # featurising a different checkpoint into the same folder used to skip every block and
    # score with the old features (error 1.02 against a largest score of 0.36)
    net, x, y = _setup(gen)
    ck_a = _ck(net)
    ck_b = {k: v + 0.3 * torch.randn(v.shape, generator=gen) for k, v in ck_a.items()}
    TRAK(net, x, y, k=7, batch_size=8, ridge=0.0, save_dir=tmp_path).featurize(ck_a)
    again = TRAK(net, x, y, k=7, batch_size=8, ridge=0.0, save_dir=tmp_path)
    with pytest.warns(RuntimeWarning, match="another checkpoint"):
        again.featurize(ck_b)
    fresh = TRAK(net, x, y, k=7, batch_size=8, ridge=0.0)
    fresh.featurize(ck_b)
    np.testing.assert_array_equal(
        np.array(again.store.arrays(0)[0]), np.array(fresh.store.arrays(0)[0])
    )
    torch.testing.assert_close(
        again.score(x[:3], y[:3], {0: ck_b}), fresh.score(x[:3], y[:3], {0: ck_b})
    )
    # scoring with a checkpoint other than the featurised one is refused
    with pytest.raises(ValueError, match="another checkpoint"):
        again.score(x[:3], y[:3], {0: ck_a})


def test_a_folder_of_another_training_set_is_refused(gen, tmp_path):
    net, x, y = _setup(gen)
    TRAK(net, x, y, k=7, save_dir=tmp_path).featurize(_ck(net))
    y2 = y.clone()
    y2[0] = (y2[0] + 1) % 3  # same size, one label changed
    with pytest.raises(ValueError, match="train_data"):
        TRAK(net, x, y2, k=7, save_dir=tmp_path)


def test_labels_and_targets_are_validated(gen):
    net, x, y = _setup(gen)
    with pytest.raises(ValueError, match=r"outside \[0, 3\)"):
        TRAK(net, x, torch.where(y == 0, 3, y), k=4)
    with pytest.raises(ValueError, match="integer class labels"):
        TRAK(net, x, y.float(), k=4)
    x_nan = x.clone()
    x_nan[1, 2] = float("nan")
    with pytest.raises(ValueError, match="NaN"):
        TRAK(net, x_nan, y, k=4)
    trak = TRAK(net, x, y, k=4)
    trak.featurize(_ck(net))
    with pytest.raises(ValueError, match=r"outside \[0, 3\)"):
        trak.score(x[:2], torch.tensor([0, -1]))
    with pytest.raises(ValueError, match="example shape"):
        trak.score(torch.randn(2, 5), y[:2])
    with pytest.raises(ValueError, match="NaN"):
        trak.score(x_nan[:2], y[:2])
    with pytest.raises(ValueError, match="labels"):
        trak.score(x[:3], y[:2])
