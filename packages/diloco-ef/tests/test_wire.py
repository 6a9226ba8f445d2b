"""Wire format (bit packing, bitmap indices) and the byte meter, against independent counts."""

from __future__ import annotations

import importlib.util
import math
import pathlib

import pytest
import torch

from diloco_ef import (
    QSGD,
    AbsmaxQuant,
    ApproxTopK,
    ByteMeter,
    DiLoCo,
    Identity,
    Int8Absmax,
    LowRank,
    RandomK,
    ScaledSign,
    TopK,
)
from diloco_ef.wire import decode, encode, encoded_nbytes, pack_bits, unpack_bits

_spec = importlib.util.spec_from_file_location(
    "_problems", pathlib.Path(__file__).parent / "_problems.py"
)
P = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(P)


def reference_pack(values, bits):
    """Bit string built one character at a time, least significant bit first."""
    stream = "".join(format(int(v), f"0{bits}b")[::-1] for v in values)
    stream += "0" * (-len(stream) % 8)
    return [int(stream[i : i + 8][::-1], 2) for i in range(0, len(stream), 8)]


@pytest.mark.parametrize("bits", [1, 2, 3, 4, 5, 7, 8, 11, 24, 33])
@pytest.mark.parametrize("n", [1, 7, 13, 64])
def test_pack_bits_matches_a_bit_string_and_round_trips(gen, bits, n):
    v = torch.randint(0, 2**bits, (n,), generator=gen, dtype=torch.int64)
    packed = pack_bits(v, bits)
    assert packed.dtype == torch.uint8 and packed.numel() == math.ceil(n * bits / 8)
    assert packed.tolist() == reference_pack(v.tolist(), bits)
    assert torch.equal(unpack_bits(packed, bits, n), v)


def test_pack_bits_refuses_out_of_range():
    with pytest.raises(ValueError, match=r"\[0, 2\*\*3\)"):
        pack_bits(torch.tensor([8]), 3)


COMPRESSORS = [
    Identity(),
    TopK(k=3),
    TopK(ratio=0.4),  # bitmap cheaper than 10-bit indices
    ApproxTopK(ratio=0.05, sample_size=64),
    RandomK(ratio=0.2),
    QSGD(bits=2),
    QSGD(bits=5, contractive=True),
    Int8Absmax(),
    AbsmaxQuant(bits=3),
    AbsmaxQuant(bits=4),
    ScaledSign(),
    LowRank(rank=2, fallback=ScaledSign()),
    LowRank(rank=1, fallback=AbsmaxQuant(bits=3), factor_dtype=torch.bfloat16),
]


@pytest.mark.parametrize("comp", COMPRESSORS, ids=lambda c: c.config())
@pytest.mark.parametrize("shape", [(37,), (11, 29), (3,)])
def test_encode_decode_is_lossless_and_sized_by_bits_sent(gen, comp, shape):
    x = torch.randn(shape, generator=gen)
    k = getattr(comp, "k", None)
    if k is not None and k > x.numel():
        pytest.skip("k larger than the tensor")
    p = comp.compress(x, torch.Generator().manual_seed(5))
    buf = encode(comp, p)
    assert buf.dtype == torch.uint8 and buf.numel() == encoded_nbytes(comp, p)
    back = decode(comp, buf, p)
    assert torch.equal(comp.decompress(back), comp.decompress(p))
    # The buffer is the accounted bits, padded to whole bytes per field (< 8 bits each).
    n_fields = len(p.sent)
    assert 0 <= 8 * buf.numel() - comp.bits_sent(p) < 8 * n_fields


def test_topk_switches_to_a_bitmap_when_shorter():
    d = 1000  # 10-bit indices: the bitmap (1000 bits) wins above k = 100
    for k, bitmap in [(99, False), (100, False), (101, True), (400, True)]:
        x = torch.arange(d, dtype=torch.float32)
        p = TopK(k=k).compress(x)
        index_part = encoded_nbytes(TopK(k=k), p) - 4 * k
        assert index_part == (125 if bitmap else math.ceil(10 * k / 8)), k


def test_meter_formulas():
    m = ByteMeter(5)
    m.record("all_gather", 10)
    m.record("all_reduce", 10)
    m.record("broadcast", 10, root=True)
    m.record("broadcast", 10)
    t = m.totals()
    assert t["calls"] == 4 and t["handed"] == 40
    assert t["sent"] == 4 * 10 + 2 * 4 / 5 * 10 + 4 * 10
    assert t["received"] == 4 * 10 + 2 * 4 / 5 * 10 + 10
    with pytest.raises(ValueError, match="unknown collective"):
        m.record("scatter", 1)


@pytest.mark.parametrize("workers", [1, 3, 4])
@pytest.mark.parametrize("bits", [None, 3, 4])
def test_round_traffic_counted_from_the_shapes(workers, bits):
    # Independent count from the parameter shapes: per round one 1-byte all-gather of the
    # finiteness flags, then either one float64 all-reduce of every parameter (dense) or one
    # all-gather of b-bit levels packed per tensor plus one float64 scale per tensor.
    algo = DiLoCo(
        P.make_model(),
        lambda p: torch.optim.SGD(p, lr=0.05),
        lambda p: torch.optim.SGD(p, lr=1.0),
        inner_steps=2,
        num_workers=workers,
        compressor=None if bits is None else AbsmaxQuant(bits=bits),
    )
    rec = algo.round(P.loss_fn)
    numels = [p.numel() for p in algo.model.parameters()]
    m = workers
    if bits is None:
        payload = 8 * sum(numels)
        sent = 2 * (m - 1) / m * payload
    else:
        payload = sum(math.ceil(n * bits / 8) + 8 for n in numels)
        sent = (m - 1) * payload
    assert rec["bytes_handed"] == payload + 1
    assert rec["bytes_sent"] == pytest.approx(sent + (m - 1) * 1, rel=1e-12)
    assert rec["bytes_received"] == rec["bytes_sent"]
    assert rec["bits"] == workers * (
        64 * sum(numels) if bits is None else sum(n * bits + 64 for n in numels)
    )
