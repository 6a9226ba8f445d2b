"""On a CUDA device: the autograd function through the compiled Triton kernel (gpu marker)."""

import math

import pytest
import torch
import torch.nn.functional as F

from nfi.loss import stable_cross_entropy

pytestmark = pytest.mark.gpu
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
U = {torch.float32: 2.0**-24, torch.bfloat16: 2.0**-8, torch.float16: 2.0**-11}


@needs_cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_auto_backend_on_cuda_is_the_kernel_and_agrees_with_the_torch_path(dtype):
    g = torch.Generator().manual_seed(11)
    N, C = 67, 5003  # no multiple of any block size
    z = torch.randn(N, C, generator=g) * 3
    y = torch.randint(0, C, (N,), generator=g)
    z[torch.arange(N), y] += torch.linspace(-2, 40, N)  # uncertain rows to absorbed ones
    y[5] = -100
    grads, losses = {}, {}
    for backend in ("auto", "torch"):
        x = z.to("cuda", dtype).requires_grad_(True)
        losses[backend] = stable_cross_entropy(x, y.cuda(), backend=backend)
        losses[backend].backward()
        grads[backend] = x.grad.double().cpu()
    assert torch.equal(losses["auto"], losses["torch"])  # the forward is torch's on both
    # the torch route rounds each entry twice, the kernel once; the target entry adds a
    # float32 sum of C terms: a few u per entry plus C u32 relative
    a, b = grads["torch"], grads["auto"]
    tol = (4 * U[dtype] + C * 2.0**-24) * a.abs() + (C + 4) * torch.finfo(dtype).tiny
    assert ((a - b).abs() <= tol).all()
    assert (b[5] == 0).all()
    lp = torch.log_softmax(z.to(dtype).float(), 1)
    conf = lp.gather(1, y.clamp_min(0)[:, None]).squeeze(1) > -math.log(2)
    conf[5] = False
    rows = b.sum(1)[conf].abs()
    assert (rows <= (U[dtype] + C * 2.0**-24) * b.abs().sum(1)[conf]).all()


@needs_cuda
def test_float64_on_cuda_keeps_the_torch_path_and_bad_targets_raise():
    # small logits: no row is confident, so the two gradients are the same computation
    z = (0.1 * torch.randn(4, 7, device="cuda", dtype=torch.float64)).requires_grad_(True)
    y = torch.tensor([0, 1, 2, 3], device="cuda")
    stable_cross_entropy(z, y).backward()  # "auto" must not hand float64 to the kernel
    ref = z.detach().clone().requires_grad_(True)
    F.cross_entropy(ref, y).backward()
    torch.testing.assert_close(z.grad, ref.grad, rtol=1e-14, atol=1e-300)
    with pytest.raises(ValueError, match="out of range"):
        stable_cross_entropy(z, torch.tensor([0, 1, 7, 3], device="cuda"))
