"""E3M0 4-bit codec: exact round trips, the stated error bound, the byte layout, FP32 gather-sum."""

from __future__ import annotations

import pytest
import torch

from dreamddp.algorithms.quantize import Codec, e3m0_decode, e3m0_encode, e3m0_payload_bytes, gather_mean
from dreamddp.comm.fake import FakeCommunicator


def test_powers_of_two_of_the_scale_and_zero_round_trip_exactly():
    s = 3.0
    vals = torch.tensor([0.0] + [s * 2.0**-j for j in range(7)] + [-s * 2.0**-j for j in range(7)])
    for block in (0, 5, 1024):
        assert torch.equal(e3m0_decode(e3m0_encode(vals, block), vals.numel(), block), vals)


def test_rounding_to_nearest_hand_values():
    # Scale 1: 0.74 -> 0.5, 0.76 -> 1, 0.0078 (< 2**-7) -> 0, 0.008 (> 2**-7) -> 2**-6, -0.3 -> -0.25.
    x = torch.tensor([1.0, 0.74, 0.76, 0.0078, 0.008, -0.3])
    assert e3m0_decode(e3m0_encode(x, 0), 6, 0).tolist() == [1.0, 0.5, 1.0, 0.0, 2**-6, -0.25]


def test_byte_layout_two_codes_per_byte_then_fp32_scales():
    x = torch.tensor([1.0, -0.5, 2**-6, 0.0, -1.0])  # codes 7, 8|6, 1, 0, 8|7
    payload = e3m0_encode(x, 0)
    assert payload.dtype == torch.uint8 and payload.numel() == e3m0_payload_bytes(5, 0) == 3 + 4
    assert payload[:3].tolist() == [7 | (14 << 4), 1 | (0 << 4), 15]
    assert payload[3:].clone().view(torch.float32).tolist() == [1.0]


@pytest.mark.parametrize("block", [0, 64, 1024])
def test_error_bound_on_random_tensors(block):
    g = torch.Generator().manual_seed(block)
    x = torch.randn(10_001, generator=g) * torch.exp(torch.randn(10_001, generator=g))  # wide dynamic range
    y = e3m0_decode(e3m0_encode(x, block), x.numel(), block)
    size = x.numel() if block == 0 else block
    pad = torch.nn.functional.pad(x.abs(), (0, -x.numel() % size))
    scale = pad.view(-1, size).amax(1).repeat_interleave(size)[: x.numel()]
    bound = torch.maximum(x.abs() / 3, scale * 2.0**-7)  # the module docstring's bound
    assert bool(((y - x).abs() <= bound * (1 + 1e-6)).all())
    assert bool((torch.sign(y) * torch.sign(x) >= 0).all())  # never flips a sign
    big = x.abs() >= scale * 2.0**-6
    assert bool(((y - x).abs()[big] <= x.abs()[big] / 3 * (1 + 1e-6)).all())


def test_gather_mean_sums_every_rank_dequantised_in_fp32():
    rng = torch.Generator().manual_seed(1)
    others = [torch.randn(300, generator=rng) for _ in range(3)]
    codec = Codec("e3m0", 64)
    comm = FakeCommunicator(4, 0, lambda kind, tag, t: [t] + [codec.encode(o) for o in others])
    mine = torch.randn(300, generator=rng)
    handle, finish = gather_mean(comm, mine, codec, tag="outer:0")
    handle.wait()
    expected = sum(codec.decode(codec.encode(v), 300).double() for v in [mine] + others) / 4
    torch.testing.assert_close(finish().double(), expected, rtol=0, atol=1e-6)
    assert comm.calls[0].kind == "all_gather" and comm.calls[0].values.dtype == torch.uint8
    assert comm.calls[0].nbytes == e3m0_payload_bytes(300, 64)  # what this rank contributes
    (record,) = comm.drain()
    assert record.nbytes == 4 * e3m0_payload_bytes(300, 64) and record.wire_bytes == 3 * 180  # (n-1)/n of it


def test_fp16_codec_and_refusals():
    x = torch.tensor([1.0, 1 / 3, -2.5])
    c = Codec("fp16")
    assert torch.equal(c.decode(c.encode(x), 3), x.half().float()) and c.nbytes(3) == 6
    with pytest.raises(ValueError, match="algo.quantize=int8"):
        Codec("int8")
    with pytest.raises(ValueError, match="algo.quant_block=-1"):
        Codec("e3m0", -1)
