"""Shared-scale quantisation: exact integer sums in packed words, against brute force."""

from __future__ import annotations

import copy
import importlib.util
import math
import pathlib

import pytest
import torch

from diloco_ef import AbsmaxQuant, DiLoCo, SharedScaleQuant
from diloco_ef.shared_scale import pack_words, unpack_words

_spec = importlib.util.spec_from_file_location(
    "_problems", pathlib.Path(__file__).parent / "_problems.py"
)
P = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(P)


@pytest.mark.parametrize(("bits", "workers"), [(2, 2), (3, 5), (4, 4), (4, 8), (8, 13)])
def test_packed_words_add_fieldwise(gen, bits, workers):
    c = SharedScaleQuant(bits)
    s, w = c.levels, c.sum_width(workers)
    assert 2 * s * workers < 2**w <= 2 * (2 * s * workers + 1)  # wide enough, not wider
    n = 101
    levels = torch.randint(0, 2 * s + 1, (workers, n), generator=gen)
    levels[:, :3] = 2 * s  # the extreme: every worker at the top level
    words = sum(pack_words(levels[m], w) for m in range(workers))
    assert words.numel() == math.ceil(n / (63 // w)) and int(words.min()) >= 0
    assert torch.equal(unpack_words(words, w, n), levels.sum(0))


def test_alone_equals_absmax_quant(gen):
    x = torch.randn(333, generator=gen)
    for b in (2, 4, 8):
        assert torch.equal(SharedScaleQuant(b)(x), AbsmaxQuant(b)(x))


def test_below_own_absmax_is_refused():
    with pytest.raises(ValueError, match="below"):
        SharedScaleQuant(4).compress(torch.tensor([2.0]), shared_absmax=torch.tensor(1.0))


@pytest.mark.parametrize("workers", [2, 3, 4])
def test_one_round_equals_an_independent_computation(workers):
    # Outer SGD with step 1 and no EF history: x1 = x0 - sigma * sum_m q_m / M per tensor, with
    # sigma = max_m |delta_m|_inf / s and q = round-half-even(delta / sigma).
    bits = 3
    s = 2 ** (bits - 1) - 1
    algo = DiLoCo(
        P.make_model(),
        lambda p: torch.optim.SGD(p, lr=0.1),
        lambda p: torch.optim.SGD(p, lr=1.0),
        inner_steps=3,
        num_workers=workers,
        compressor=SharedScaleQuant(bits),
    )
    x0 = [p.detach().clone() for p in algo.model.parameters()]
    ref = [copy.deepcopy(algo.model) for _ in range(workers)]
    deltas = []
    for w, m in enumerate(ref):
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        for h in range(3):
            opt.zero_grad()
            P.loss_fn(m, w, 0, h).backward()
            opt.step()
        deltas.append([a - b.detach() for a, b in zip(x0, m.parameters(), strict=True)])
    rec = algo.round(P.loss_fn)
    for i, x in enumerate(algo.model.parameters()):
        d = torch.stack([dw[i] for dw in deltas])
        sigma = d.abs().max() / s
        q = torch.round(d / sigma)
        torch.testing.assert_close(
            x.detach(), x0[i] - sigma * q.sum(0) / workers, rtol=0, atol=1e-15
        )
    # Traffic: one MAX all-reduce of one float64 per tensor, one int64 all-reduce of the
    # packed level sums, one flag byte.
    numels = [t.numel() for t in x0]
    words = math.ceil(sum(numels) / (63 // SharedScaleQuant(bits).sum_width(workers)))
    assert rec["bytes_handed"] == 8 * len(numels) + 8 * words + 1
    ring = 2 * (workers - 1) / workers
    assert rec["bytes_sent"] == pytest.approx(ring * (8 * len(numels) + 8 * words) + workers - 1)
