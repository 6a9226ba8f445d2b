"""Device placement: explicit CPU is the default bit for bit, a missing GPU is a clear error."""

import pytest
import torch

from ficbo.devices import model_device, resolve_device
from ficbo.experiments import reliability, synthetic
from ficbo.model import FICBOModel, ModelConfig, feedback_sensitivity, load, pretrain, save
from ficbo.optimize import model_policy, run
from ficbo.prior import evaluate, sample_tasks

CUDA = torch.cuda.is_available()
CFG = ModelConfig(max_dim=2, n_sources=1, d_model=16, n_heads=2, n_layers=1, d_ff=32)
BAR = ModelConfig(
    max_dim=2, n_sources=1, d_model=16, n_heads=2, n_layers=1, d_ff=32, head="bar", n_bars=12
)


def _tasks(b=5, n=13, seed=3):
    g = torch.Generator().manual_seed(seed)
    tasks = sample_tasks(b, 2, 1, generator=g, rho=0.7)
    x = torch.rand(b, n, 2, generator=g, dtype=torch.float64)
    f, fb = evaluate(tasks, x, generator=g)
    return x, f, fb


def test_resolve_device_defaults_to_cpu_and_rejects_nonsense():
    assert resolve_device(None) == torch.device("cpu")
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device(torch.device("cpu")) == torch.device("cpu")
    with pytest.raises(ValueError, match="unknown device 'gpu0'"):
        resolve_device("gpu0")
    with pytest.raises(ValueError, match="unsupported device 'meta'"):
        resolve_device("meta")


@pytest.mark.skipif(CUDA, reason="this machine has CUDA")
def test_cuda_request_without_cuda_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="'cuda' requested but CUDA is not available"):
        resolve_device("cuda")
    with pytest.raises(ValueError, match="'cuda:1' requested but CUDA is not available"):
        pretrain(CFG, steps=1, batch_size=2, n_points=6, device="cuda:1")
    with pytest.raises(ValueError, match="CUDA is not available"):
        load(tmp_path / "never-read.pt", device="cuda")
    # the experiment refuses before it computes or writes anything
    out = tmp_path / "run"
    with pytest.raises(ValueError, match="CUDA is not available"):
        reliability.main(["--quick", "--out", str(out), "--device", "cuda"])
    assert not out.exists()


@pytest.mark.parametrize("cfg", [CFG, BAR], ids=["gaussian", "bar"])
def test_explicit_cpu_is_the_default_bit_for_bit(cfg, tmp_path):
    kw = {"steps": 4, "batch_size": 3, "n_points": 9, "seed": 5}
    m_default, _ = pretrain(cfg, **kw)
    m_cpu, _ = pretrain(cfg, device="cpu", **kw)
    assert model_device(m_cpu) == torch.device("cpu")
    for (k, a), (_, b) in zip(
        m_default.state_dict().items(), m_cpu.state_dict().items(), strict=True
    ):
        assert torch.equal(a, b), k
    save(m_cpu, tmp_path / "m.pt")
    m_loaded = load(tmp_path / "m.pt", device="cpu")
    x, f, fb = _tasks()
    r1 = run(x, f, fb, model_policy(m_default), n_iter=4, seed=1)
    r2 = run(x, f, fb, model_policy(m_loaded), n_iter=4, seed=1)
    assert torch.equal(r1.queries, r2.queries)


def test_experiment_accepts_an_explicit_cpu_device(tmp_path, monkeypatch):
    tiny = {"steps": 2, "batch": 3, "points": 10, "d_model": 16, "tasks": 4, "iters": 2}
    monkeypatch.setattr(synthetic, "sizes", lambda quick: tiny)
    out = tmp_path / "run"
    assert synthetic.main(["--quick", "--out", str(out), "--device", "cpu"]) == 0
    assert (out / "result.json").is_file()
    assert '"device": "cpu"' in (out / "result.json").read_text()


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs CUDA")
@pytest.mark.parametrize("cfg", [CFG, BAR], ids=["gaussian", "bar"])
def test_cuda_model_matches_cpu_model(cfg):
    # Same weights on both devices; CPU and CUDA differ only in float32 rounding. Error model:
    # each of the n_layers blocks sums at most d_ff products of O(1) terms, so a difference of
    # a few d_ff * eps32 per block, amplified by the layer norms (x10), bounds the outputs.
    torch.manual_seed(0)
    cpu = FICBOModel(cfg).eval()
    gpu = FICBOModel(cfg).to("cuda").eval()
    gpu.load_state_dict(cpu.state_dict())
    x, f, fb = _tasks(b=4, n=11)
    xh, yh, fh = x[:, :5], f[:, :5], fb[:, :, :5]
    p_cpu = cpu.predict(xh, yh, fh, x, fb)  # CPU inputs to a CUDA model: moved inside
    p_gpu = gpu.predict(xh, yh, fh, x, fb)
    tol = 10 * cfg.n_layers * cfg.d_ff * torch.finfo(torch.float32).eps
    assert p_gpu.mean.device.type == "cuda"
    assert torch.allclose(p_gpu.mean.cpu(), p_cpu.mean, atol=tol, rtol=0)
    assert torch.allclose(p_gpu.std.cpu(), p_cpu.std, atol=tol, rtol=0)
    s_cpu = feedback_sensitivity(cpu, xh, yh, fh, x, fb)
    s_gpu = feedback_sensitivity(gpu, xh, yh, fh, x, fb)
    assert s_gpu.device.type == "cpu"
    assert torch.allclose(s_gpu, s_cpu, atol=10 * tol, rtol=0)


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs CUDA")
def test_cuda_pretraining_runs_and_saves_a_cpu_checkpoint(tmp_path):
    model, stats = pretrain(CFG, steps=3, batch_size=4, n_points=8, device="cuda")
    assert model_device(model).type == "cuda" and stats["final_loss"] == stats["final_loss"]
    save(model, tmp_path / "m.pt")
    back = load(tmp_path / "m.pt")
    assert model_device(back).type == "cpu"
    x, f, fb = _tasks()
    res = run(x, f, fb, model_policy(model, acquisition="ts"), n_iter=3, seed=0)
    assert res.queries.device.type == "cpu" and res.queries.shape == (5, 4)
