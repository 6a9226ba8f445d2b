"""The zero-sum CE gradient kernel against its reference and against StableCrossEntropy."""

import math

import pytest
import torch
import torch.nn.functional as F

from nfi.kernels import KERNELS, ce_grad, ce_grad_reference, ce_grad_triton
from nfi.loss import stable_cross_entropy
from shared_core import kernels as K

needs_triton = pytest.mark.skipif(
    not (K.HAS_TRITON and (K.interpreting() or torch.cuda.is_available())),
    reason="needs Triton with a GPU or TRITON_INTERPRET=1",
)
DEV = "cuda" if torch.cuda.is_available() else "cpu"


def test_reference_equals_the_autograd_function():
    g = torch.Generator().manual_seed(0)
    z = torch.randn(29, 13, generator=g) * 8
    y = torch.randint(0, 13, (29,), generator=g)
    z[torch.arange(29), y] += torch.linspace(0, 30, 29)
    x = z.clone().requires_grad_(True)
    stable_cross_entropy(x, y).backward()
    w = torch.full((29,), 1 / 29)
    ref = ce_grad_reference(torch.log_softmax(z, 1), y, w)
    # the same rows are recomputed; the two routes sum the others in different orders
    torch.testing.assert_close(ref, x.grad, rtol=4 * 2.0**-24, atol=0)
    conf = torch.log_softmax(z, 1).gather(1, y[:, None]).squeeze(1) > -math.log(2)
    rowsum = ref.double().sum(1).abs()
    assert (rowsum[conf] <= 2.0**-24 * ref.double().abs().sum(1)[conf]).all()


@needs_triton
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_triton_matches_reference(dtype):
    gen = torch.Generator().manual_seed(1)
    logp, t, w = KERNELS["stable_ce_grad"].example(torch.device(DEV), dtype, gen)
    out = ce_grad_triton(logp, t, w)
    ref = ce_grad_reference(logp, t, w)
    # The reference rounds exp and the product by w separately (2 roundings per entry, one
    # more for g_y), the kernel once: <= 4 u relative per entry; the target entry adds the
    # float32 sum of C terms (C u32); subnormal outputs (fp16 below 6e-5) carry an absolute
    # error of about one subnormal spacing per rounding.
    u = {torch.float32: 2.0**-24, torch.bfloat16: 2.0**-8, torch.float16: 2.0**-11}[dtype]
    sub = torch.finfo(dtype).tiny * torch.finfo(dtype).eps
    C = logp.shape[1]
    err = (out.double() - ref.double()).abs()
    scale = ref.double().abs()
    assert (err <= (4 * u + C * 2.0**-24) * scale + (C + 4) * sub).all()
    # zero-sum in the confident rows, to the rounding of the sum
    conf = logp.gather(1, t[:, None]).squeeze(1).float() > -math.log(2)
    rows = out.double().sum(1)[conf].abs()
    assert (rows <= (u + C * 2.0**-24) * out.double().abs().sum(1)[conf] + (C + 4) * sub).all()


@needs_triton
def test_triton_odd_sizes_and_ignored_rows():
    gen = torch.Generator().manual_seed(2)
    for N, C in [(1, 2), (5, 1), (3, 4097)]:
        if C < 2:
            continue
        z = torch.randn(N, C, generator=gen)
        t = torch.randint(0, C, (N,), generator=gen)
        w = torch.full((N,), 0.5)
        w[0] = 0.0  # an ignored row: zero gradient
        lp = torch.log_softmax(z, 1).to(DEV)
        out = ce_grad_triton(lp, t.to(DEV), w.to(DEV)).cpu()
        ref = ce_grad_reference(lp.cpu(), t, w)
        torch.testing.assert_close(out, ref, rtol=C * 2.0**-24 + 4 * 2.0**-24, atol=1e-12)
        assert (out[0] == 0).all()


def test_op_dispatches_to_reference_on_cpu():
    lp = torch.log_softmax(torch.tensor([[25.0, 0.0, 1.0]]), 1)
    t, w = torch.tensor([0]), torch.tensor([1.0])
    assert torch.equal(ce_grad(lp, t, w), ce_grad_reference(lp, t, w))
    # torch's CE absorbs this row; the op does not
    z = torch.tensor([[25.0, 0.0, 1.0]], requires_grad=True)
    F.cross_entropy(z, t).backward()
    assert z.grad[0, 0] == 0 and ce_grad(lp, t, w)[0, 0] < 0


def test_bad_inputs():
    lp = torch.log_softmax(torch.randn(3, 4), 1)
    with pytest.raises(ValueError, match="out of range"):
        ce_grad_reference(lp, torch.tensor([0, 4, 1]), torch.ones(3))
    with pytest.raises(ValueError, match="shape"):
        ce_grad_reference(lp, torch.tensor([0, 1]), torch.ones(3))
    with pytest.raises(ValueError, match="floating"):
        ce_grad_reference(lp.long(), torch.tensor([0, 1, 2]), torch.ones(3))


@needs_triton
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_autograd_with_triton_backend_matches_torch_backend(reduction):
    g = torch.Generator().manual_seed(3)
    N, C = 19, 263
    z = torch.randn(N, C, generator=g) * 3
    y = torch.randint(0, C, (N,), generator=g)
    z[torch.arange(N), y] += torch.linspace(0, 30, N)
    y[2] = -100
    grads = {}
    for backend in ("torch", "triton"):
        x = z.clone().to(DEV).requires_grad_(True)
        loss = stable_cross_entropy(x, y.to(DEV), reduction=reduction, backend=backend)
        loss.backward(torch.ones_like(loss))
        grads[backend] = x.grad.cpu()
    a, b = grads["torch"].double(), grads["triton"].double()
    assert ((a - b).abs() <= (4 + C) * 2.0**-24 * a.abs() + 1e-30).all()
    assert (b[2] == 0).all()


def test_backend_errors():
    z, y = torch.randn(3, 4), torch.tensor([0, 1, 2])
    with pytest.raises(ValueError, match="backend"):
        stable_cross_entropy(z, y, backend="cuda")
    with pytest.raises(ValueError, match="confident"):
        stable_cross_entropy(z, y, backend="triton", mode="absorbed")
