"""Compression with error feedback (dreamddp/algorithms/compress.py and its use in outer.py),
exact against references written here: the codecs' round trips, top-k's kept entries, the
residuals summing to what was not sent, ratio 1 / 8 bits near the uncompressed algorithm, and
the bytes the plan charges."""

from __future__ import annotations

import math

import pytest
import torch

from dreamddp.algorithms.compress import BlockQuant, TopK, compressed_mean
from dreamddp.comm.fake import FakeCommunicator
from test_outer import train


def test_topk_keeps_the_largest_magnitudes_as_fp16_and_zeros_the_rest():
    x = torch.tensor([0.1, -5.0, 0.3, 2.0, -0.05, 7.0, 0.0, -1.0])
    codec = TopK(0.3)  # ceil(0.3 * 8) = 3 entries
    payload = codec.encode(x)
    assert payload.dtype == torch.uint8 and payload.numel() == codec.nbytes(8) == 18
    want = torch.zeros(8)
    want[[1, 3, 5]] = x[[1, 3, 5]].half().float()
    assert torch.equal(codec.decode(payload, 8), want)


@pytest.mark.parametrize("bits", [2, 4, 8])
def test_block_quant_rounds_each_value_to_its_blocks_nearest_level(bits):
    g = torch.Generator().manual_seed(bits)
    x = torch.randn(1000, generator=g)
    codec = BlockQuant(bits, 64)
    payload = codec.encode(x)
    assert payload.numel() == codec.nbytes(1000) == math.ceil(16 * 64 * bits / 8) + 4 * 16
    levels = 2 ** (bits - 1) - 1
    blocks = torch.cat([x, x.new_zeros(24)]).view(16, 64)
    scale = blocks.abs().amax(dim=1, keepdim=True)
    want = (torch.round(blocks / scale * levels) * (scale / levels)).reshape(-1)[:1000]
    torch.testing.assert_close(codec.decode(payload, 1000), want, rtol=0, atol=1e-6)
    assert (codec.decode(payload, 1000) - x).abs().max() <= scale.max() / levels / 2 + 1e-6


def test_the_residual_is_what_the_payload_did_not_carry():
    x = torch.tensor([1.0, -4.0, 0.5, 3.0])
    residual = torch.tensor([0.25, 0.0, 0.0, 0.0])
    comm = FakeCommunicator(2, 0)
    handle, finish = compressed_mean(comm, x, TopK(0.5), residual)
    handle.wait()
    sent = torch.tensor([0.0, -4.0, 0.0, 3.0])  # the two largest of x + residual
    assert torch.equal(finish(), sent)  # both ranks sent the same here
    assert torch.equal(residual, torch.tensor([1.25, 0.0, 0.5, 0.0]))  # x + e - sent


@pytest.mark.parametrize("name", ["flsgd", "plsgd_enp"])
def test_nothing_dropped_is_the_uncompressed_average(name):
    """top-k of every element (ratio 1) sends the change in fp16: the run stays near the plain
    one; 8-bit blocks likewise, within their rounding."""
    plain, _ = train(name, 6, comm=FakeCommunicator(2, 0), H=2)
    for options in ({"compress": "topk", "compress_ratio": 1.0}, {"compress": "quant", "compress_bits": 8}):
        ours, _ = train(name, 6, comm=FakeCommunicator(2, 0), H=2, **options)
        torch.testing.assert_close(ours, plain, rtol=0, atol=2e-2)


def test_the_plan_charges_the_gathered_payloads():
    _, engine = train("flsgd", 2, comm=FakeCommunicator(2, 0), H=2, compress="topk", compress_ratio=0.1)
    (op,) = engine.algorithm.plan(1)
    numel = engine.layout.op_bytes(op) // 4
    assert op.collective == "all_gather" and op.payload.value == "outer"
    assert op.scale == pytest.approx(2 * 6 * math.ceil(0.1 * numel) / (4 * numel))
    # a checkpoint carries the residuals
    state = engine.algorithm.state_dict()["outer"]
    assert state["residual"] is not None and state["residual"].abs().sum() > 0
