"""TRAK with the model and data on a CUDA device: the CPU's scores (run by ``nox -s gpu``).

Features are stored and the kernel solved in float64 on the CPU; the gradients of the targets
come from the GPU model and must be brought to the CPU before they meet that kernel.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from trak_theory import TRAK
from trak_theory.scores import alo_scores, kernel_solve, traker_scores

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]


def _trak_scores(device: str, k):
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(6, 5), nn.Tanh(), nn.Linear(5, 3)).double().to(device)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(37, 6, generator=g, dtype=torch.float64).to(device)
    y = torch.randint(0, 3, (37,), generator=g).to(device)
    trak = TRAK(net, x, y, k=k, ridge=0.05, batch_size=8, seed=3)
    state = {n: v.detach().clone() for n, v in net.state_dict().items()}
    trak.featurize(state, model_id=0)
    return trak, trak.score(x[:5], y[:5], {0: state}).cpu()


def test_exact_scores_on_cuda_match_the_cpu():
    # k = None: float64 features and kernel on both devices; only summation order differs.
    torch.testing.assert_close(_trak_scores("cuda", None)[1], _trak_scores("cpu", None)[1])


def test_sketched_scores_on_cuda_match_the_cpu_within_float32_rounding():
    # The sketch runs in float32 on both devices (Triton on CUDA, the blockwise reference on
    # the CPU), so the features differ by summation order: |d phi| <= p eps32 |G||S| / sqrt(k)
    # entrywise. The float64 kernel solve then amplifies a relative feature error by at most
    # about 2 cond(Phi^T Phi + ridge I) (a perturbed linear system), and a score is a bilinear
    # form in the features, which adds one more relative error of the same size.
    trak, cpu = _trak_scores("cpu", 11)
    _, gpu = _trak_scores("cuda", 11)
    gram = trak.gram(0)
    eig = torch.linalg.eigvalsh(gram + trak.ridges[0] * torch.eye(gram.shape[0], dtype=gram.dtype))
    cond = float(eig[-1] / eig[0])
    eps32 = torch.finfo(torch.float32).eps
    bound = 4 * trak.p * eps32 * cond
    rel = float(torch.linalg.vector_norm(gpu - cpu) / torch.linalg.vector_norm(cpu))
    assert bound < 0.05, f"the error model is uninformative here (bound {bound:.2g})"
    assert rel <= bound, (rel, bound, cond)


def test_score_helpers_accept_cuda_inputs():
    g = torch.Generator().manual_seed(2)
    phi = torch.randn(13, 4, generator=g, dtype=torch.float64)
    tgt = torch.randn(3, 4, generator=g, dtype=torch.float64)
    q, w = (torch.rand(13, generator=g, dtype=torch.float64) for _ in range(2))
    c = {name: t.cuda() for name, t in {"phi": phi, "tgt": tgt, "q": q, "w": w}.items()}
    pairs = [
        (kernel_solve(c["phi"].T @ c["phi"], 0.1), kernel_solve(phi.T @ phi, 0.1)),
        (alo_scores(c["phi"], c["tgt"], c["q"], c["w"], 0.1), alo_scores(phi, tgt, q, w, 0.1)),
        (
            traker_scores([c["phi"]], [c["tgt"]], [c["q"]], 0.1),
            traker_scores([phi], [tgt], [q], 0.1),
        ),
    ]
    for got, want in pairs:
        torch.testing.assert_close(got.cpu(), want)
