"""The error-feedback identity, and EF-SGD as a torch.optim optimizer."""

import copy

import pytest
import torch

from diloco_ef import (
    EFSGD,
    QSGD,
    AbsmaxQuant,
    ApproxTopK,
    ErrorFeedback,
    Identity,
    Int8Absmax,
    RandomK,
    ScaledSign,
    TopK,
)


@pytest.mark.parametrize(
    "comp",
    [Identity(), TopK(k=7), RandomK(k=5), ApproxTopK(k=9, sample_size=16)],
    ids=["identity", "topk", "randomk", "approx-topk"],
)
def test_ef_identity_is_exact_for_sparsifiers(gen, comp):
    ef = ErrorFeedback(comp)
    for t in range(6):
        u = torch.randn(4, 13, generator=gen, dtype=torch.float64)
        old = ef.errors.get("w", torch.zeros_like(u)).clone()
        sent = ef.send("w", u, torch.Generator().manual_seed(t))
        # sent + new_error == old_error + input, bit for bit in float64.
        assert torch.equal(sent.tensor + ef.errors["w"], old + u)


@pytest.mark.parametrize(
    "comp",
    [QSGD(bits=2), Int8Absmax(), AbsmaxQuant(bits=3), ScaledSign()],
    ids=["qsgd", "int8", "absmax-3b", "sign"],
)
def test_ef_identity_for_quantizers_within_one_rounding(gen, comp):
    ef = ErrorFeedback(comp)
    eps = torch.finfo(torch.float64).eps / 2  # unit roundoff
    for t in range(6):
        u = torch.randn(50, generator=gen, dtype=torch.float64)
        v = ef.errors.get("w", torch.zeros_like(u)) + u
        sent = ef.send("w", u, torch.Generator().manual_seed(t))
        e = ef.errors["w"]
        # The buffer is exactly fl(v - sent); fl(v - sent) differs from v - sent by <= u|e|.
        assert torch.equal(e, v - sent.tensor)
        residual = (sent.tensor + e - v).abs()
        assert torch.all(residual <= 2 * eps * (e.abs() + v.abs()))


def test_ef_accumulates_what_was_dropped():
    ef = ErrorFeedback(TopK(k=1))
    total_sent = torch.zeros(3, dtype=torch.float64)
    total_in = torch.zeros(3, dtype=torch.float64)
    for u in ([1.0, 0.2, 0.1], [0.0, 0.9, 0.0], [0.1, 0.1, 0.5]):
        u = torch.tensor(u, dtype=torch.float64)
        total_sent += ef.send(0, u).tensor
        total_in += u
    # Telescoping: sum of sent = sum of inputs - final error.
    assert torch.equal(total_sent, total_in - ef.errors[0])


def test_ef_disabled_keeps_no_buffer(gen):
    ef = ErrorFeedback(TopK(k=1), enabled=False)
    ef.send(0, torch.randn(5, generator=gen))
    assert ef.errors == {}


def test_ef_rejects_shape_change_and_bad_compressor(gen):
    ef = ErrorFeedback(TopK(k=1))
    ef.send(0, torch.randn(5, generator=gen))
    with pytest.raises(ValueError, match="shape"):
        ef.send(0, torch.randn(6, generator=gen))
    with pytest.raises(ValueError, match="Compressor"):
        ErrorFeedback(lambda x: x)


def _problem(gen, d=12, n=40):
    A = torch.randn(n, d, generator=gen, dtype=torch.float64)
    b = torch.randn(n, generator=gen, dtype=torch.float64)
    return A, b


def _manual_efsgd(x0, A, b, lr, k, steps):
    # Independent reference: flat numpy-style loop over the EF-SGD recursion with TopK.
    x, e = x0.clone(), torch.zeros_like(x0)
    for _ in range(steps):
        g = A.T @ (A @ x - b) / A.shape[0]
        v = e + lr * g
        idx = torch.argsort(v.abs(), descending=True)[:k]
        s = torch.zeros_like(v)
        s[idx] = v[idx]
        x, e = x - s, v - s
    return x, e


def test_efsgd_matches_manual_recursion(gen):
    A, b = _problem(gen)
    x0 = torch.randn(12, generator=gen, dtype=torch.float64)
    w = torch.nn.Parameter(x0.clone())
    opt = EFSGD([w], lr=0.1, compressor=TopK(k=3))

    def closure():
        opt.zero_grad()
        loss = 0.5 * ((A @ w - b) ** 2).mean()
        loss.backward()
        return loss

    for _ in range(25):
        opt.step(closure)
    x_ref, e_ref = _manual_efsgd(x0, A, b, 0.1, 3, 25)
    torch.testing.assert_close(w.detach(), x_ref, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(opt.state[w]["error"], e_ref, rtol=1e-12, atol=1e-12)
    assert opt.last_bits == 3 * (64 + 4)
    assert 0 < opt.last_alpha <= 1


def test_efsgd_converges_on_least_squares(gen):
    A, b = _problem(gen, d=8, n=64)
    x_star = torch.linalg.lstsq(A, b).solution
    w = torch.nn.Parameter(torch.zeros(8, dtype=torch.float64))
    opt = EFSGD([w], lr=0.3, compressor=RandomK(k=2), seed=3)
    for _ in range(1500):
        opt.zero_grad()
        (0.5 * ((A @ w - b) ** 2).mean()).backward()
        opt.step()
    assert float((w.detach() - x_star).norm()) < 1e-6


def test_efsgd_state_dict_round_trip(gen):
    A, b = _problem(gen)
    x0 = torch.randn(12, generator=gen, dtype=torch.float64)

    def run(w, opt, n):
        for _ in range(n):
            opt.zero_grad()
            (0.5 * ((A @ w - b) ** 2).mean()).backward()
            opt.step()

    w1 = torch.nn.Parameter(x0.clone())
    o1 = EFSGD([w1], lr=0.1, compressor=QSGD(bits=2, contractive=True), seed=1)
    run(w1, o1, 10)
    saved_w, saved = w1.detach().clone(), copy.deepcopy(o1.state_dict())
    run(w1, o1, 10)
    w2 = torch.nn.Parameter(saved_w)
    o2 = EFSGD([w2], lr=0.1, compressor=QSGD(bits=2, contractive=True), seed=1)
    o2.load_state_dict(saved)
    run(w2, o2, 10)
    assert torch.equal(w1.detach(), w2.detach())


def test_efsgd_param_groups_and_lazy_state():
    a = torch.nn.Parameter(torch.ones(3))
    b = torch.nn.Parameter(torch.ones(2))
    opt = EFSGD([{"params": [a]}, {"params": [b], "lr": 0.5}], lr=0.1, compressor=Identity())
    assert [g["lr"] for g in opt.param_groups] == [0.1, 0.5]
    assert len(opt.state) == 0
    a.grad = torch.ones(3)
    opt.step()
    assert a in opt.state and b not in opt.state  # b had no gradient
    torch.testing.assert_close(a.detach(), torch.full((3,), 0.9))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"lr": 0.0}, "lr"),
        ({"lr": -1.0}, "lr"),
        ({"lr": 0.1, "weight_decay": -1.0}, "weight_decay"),
        ({"lr": 0.1, "compressor": 3}, "compressor"),
    ],
)
def test_efsgd_bad_arguments(kwargs, match):
    kwargs = {"compressor": TopK(k=1), **kwargs}
    with pytest.raises(ValueError, match=match):
        EFSGD([torch.nn.Parameter(torch.ones(2))], **kwargs)
