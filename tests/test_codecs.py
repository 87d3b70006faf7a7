"""Wire codecs (dreamddp/engine/codecs.py): exact byte counts, no inf, exact top-k selection, the
true 2**bits quant grid, E3M0 bit for bit against the old code, DCT against an FFT reference."""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest
import torch

from dreamddp.checks import ConfigError
from dreamddp.engine.codecs import (
    KINDS,
    BlockQuant,
    DCTTopK,
    E3M0,
    LowPrecision,
    TopK,
    check_codec,
    make_codec,
)

CODECS = [
    LowPrecision("fp16"),
    LowPrecision("bf16"),
    TopK(0.1),
    TopK(0.1, chunk=64),
    TopK(0.3, chunk=64, value_bits=2),
    TopK(0.3, chunk=0, value_bits=4),
    TopK(0.5, chunk=40000, value_bits=8),  # int32 in-chunk indices
    BlockQuant(2, 64),
    BlockQuant(4, 7),
    BlockQuant(8, 1024),
    E3M0(0),
    E3M0(64),
    DCTTopK(0.1, 64),
    DCTTopK(1.0, 8),
]
SIZES = [1, 7, 63, 64, 65, 128, 1000]


def _ids(codec):
    return f"{codec.kind}-{vars(codec)}"


def _distinct_magnitudes(n: int, seed: int = 0) -> torch.Tensor:
    """n values with distinct magnitudes 1/8 .. n/8 (exact in fp16 up to n = 2048), random signs."""
    g = torch.Generator().manual_seed(seed)
    mags = (torch.randperm(n, generator=g) + 1).float() / 8
    return torch.where(torch.rand(n, generator=g) < 0.5, -mags, mags)


@pytest.mark.parametrize("codec", CODECS, ids=_ids)
def test_nbytes_is_the_exact_payload_length_and_decode_has_numel_fp32_values(codec):
    for n in SIZES:
        x = torch.randn(n, generator=torch.Generator().manual_seed(n))
        payload = codec.encode(x)
        assert payload.dtype == torch.uint8 and payload.dim() == 1
        assert payload.numel() == codec.nbytes(n), n
        y = codec.decode(payload, n)
        assert y.dtype == torch.float32 and y.shape == (n,)
        assert bool(torch.isfinite(y).all())
        if codec.sparse:
            s = codec.support(payload, n)
            assert s.dtype == torch.bool and s.shape == (n,)


def test_wire_byte_formulas_by_hand():
    assert LowPrecision("fp16").nbytes(1000) == 2000
    assert TopK(0.01).nbytes(1000) == 10 * (4 + 2)  # int32 index + fp16 value
    assert TopK(0.25, chunk=64).nbytes(130) == 3 * 16 * (2 + 2)  # 3 chunks, int16 indices
    assert TopK(0.25, chunk=64, value_bits=2).nbytes(130) == 3 * 16 * 2 + 12 + 3 * 4  # 48 codes in 12 bytes
    assert TopK(0.25, chunk=40000).nbytes(100000) == 3 * 10000 * (4 + 2)
    assert BlockQuant(4, 1024).nbytes(1000) == 500 + 4
    assert BlockQuant(2, 64).nbytes(130) == 33 + 3 * 4  # ceil(130 / 4) bytes, padding not sent
    assert E3M0(0).nbytes(7) == 4 + 4
    assert DCTTopK(0.1, 64).nbytes(130) == 3 * 7 * 4  # k = ceil(6.4) per chunk


def test_payload_slices_at_odd_offsets_decode_the_same():
    # A rank's payload inside a gathered buffer may sit at an offset unaligned for int32 / fp32.
    x = torch.randn(129, generator=torch.Generator().manual_seed(3))
    for codec in CODECS:
        payload = codec.encode(x)
        shifted = torch.cat([torch.zeros(1, dtype=torch.uint8), payload])[1:]
        assert torch.equal(codec.decode(shifted, 129), codec.decode(payload, 129)), codec.kind


@pytest.mark.parametrize(
    "codec",
    [LowPrecision("fp16"), LowPrecision("bf16"), TopK(1.0), TopK(1.0, chunk=2), TopK(1.0, value_bits=2), DCTTopK(1.0, 2)],
    ids=_ids,
)
def test_large_values_never_decode_to_inf(codec):
    x = torch.tensor([7e4, -1e9, 1.0, 0.0])
    y = codec.decode(codec.encode(x), 4)
    assert bool(torch.isfinite(y).all())


def test_fp16_clamps_to_the_largest_finite_value():
    x = torch.tensor([7e4, -1e9, 65504.0, 1.5])
    for codec in (LowPrecision("fp16"), TopK(1.0), TopK(1.0, chunk=4)):
        assert codec.decode(codec.encode(x), 4).tolist() == [65504.0, -65504.0, 65504.0, 1.5]
    assert LowPrecision("bf16").decode(LowPrecision("bf16").encode(torch.tensor([1.5, -3.0])), 2).tolist() == [1.5, -3.0]


def test_topk_per_tensor_keeps_exactly_the_largest_magnitudes():
    x = _distinct_magnitudes(1000)
    codec = TopK(0.05)
    payload = codec.encode(x)
    expected = set(torch.argsort(x.abs(), descending=True)[:50].tolist())
    y = codec.decode(payload, 1000)
    assert set(torch.nonzero(y).reshape(-1).tolist()) == expected
    assert torch.equal(y[list(expected)], x[list(expected)])  # exact: values representable in fp16
    assert set(torch.nonzero(codec.support(payload, 1000)).reshape(-1).tolist()) == expected


def test_topk_per_chunk_keeps_the_largest_magnitudes_of_each_chunk():
    n, chunk, ratio = 1000, 64, 0.1  # k = 7 per chunk; the last chunk has 40 real elements
    x = _distinct_magnitudes(n, seed=1)
    codec = TopK(ratio, chunk=chunk)
    y = codec.decode(codec.encode(x), n)
    expected = set()
    for start in range(0, n, chunk):  # the reference: sort each chunk
        part = x[start: start + chunk]
        expected |= {start + i for i in torch.argsort(part.abs(), descending=True)[:7].tolist()}
    assert len(expected) == 16 * 7
    assert set(torch.nonzero(y).reshape(-1).tolist()) == expected
    idx = sorted(expected)
    assert torch.equal(y[idx], x[idx])


def test_support_marks_exactly_the_kept_indices_and_never_the_padding():
    # 70 elements, chunk 64, k = 32: the second chunk has 6 real elements, so 26 slots hold padding.
    x = torch.arange(1, 71).float()
    codec = TopK(0.5, chunk=64)
    payload = codec.encode(x)
    support = codec.support(payload, 70)
    kept = set(range(32, 64)) | set(range(64, 70))  # largest 32 of the first chunk, all 6 of the second
    assert set(torch.nonzero(support).reshape(-1).tolist()) == kept
    y = codec.decode(payload, 70)
    assert y.shape == (70,) and torch.equal(support, y != 0)
    # a sent zero is still a sent value
    z = torch.zeros(10)
    assert int(TopK(0.3).support(TopK(0.3).encode(z), 10).sum()) == 3


def test_topk_prefers_real_zeros_to_padding():
    x = torch.zeros(66)
    x[64] = 5.0
    codec = TopK(0.05, chunk=64)  # k = 4: the last chunk's 2 real elements, then 2 padding slots
    payload = codec.encode(x)
    assert torch.nonzero(codec.support(payload, 66)[64:]).reshape(-1).tolist() == [0, 1]


@pytest.mark.parametrize("bits", [2, 4, 8])
def test_topk_quantised_values_keep_the_indices_and_sit_on_the_grid(bits):
    x = torch.randn(256, generator=torch.Generator().manual_seed(bits))  # no ties with the grid's midpoints
    fp16 = TopK(0.25, chunk=64)
    quant = TopK(0.25, chunk=64, value_bits=bits)
    pq = quant.encode(x)
    assert torch.equal(quant.support(pq, 256), fp16.support(fp16.encode(x), 256))
    y = quant.decode(pq, 256)
    L = 2**bits
    for start in range(0, 256, 64):
        kept = quant.support(pq, 256)[start: start + 64]
        vals, orig = y[start: start + 64][kept], x[start: start + 64][kept]
        s = orig.abs().max()
        grid = s * (2 * torch.arange(L).float() + 1 - L) / (L - 1)
        nearest = grid[(orig.unsqueeze(1) - grid).abs().argmin(dim=1)]
        torch.testing.assert_close(vals, nearest, rtol=1e-6, atol=0)
        if bits == 2:
            assert len(set(vals.tolist())) <= 4 and float(vals.abs().max()) == float(s)  # +-s exactly


def test_two_bit_quant_has_four_levels_including_plus_minus_scale():
    s = 3.0
    x = torch.tensor([s, -s, 0.9, 1.1, 2.1, 1.9, -1.1, -2.2])
    y = BlockQuant(2, 8).decode(BlockQuant(2, 8).encode(x), 8)
    # levels {-3, -1, 1, 3}: each value to its nearest one
    assert y.tolist() == [3.0, -3.0, 1.0, 1.0, 3.0, 1.0, -1.0, -3.0]
    g = torch.Generator().manual_seed(0)
    r = torch.randn(4096, generator=g)
    r[0] = 5.0  # the scale
    levels = set(BlockQuant(2, 4096).decode(BlockQuant(2, 4096).encode(r), 4096).tolist())
    assert len(levels) == 4 and {5.0, -5.0} <= levels
    assert sorted(levels) == pytest.approx([-5.0, -5 / 3, 5 / 3, 5.0], rel=1e-6)


@pytest.mark.parametrize("bits", [2, 4, 8])
def test_quant_rounds_to_the_nearest_level_of_the_true_grid(bits):
    L = 2**bits
    x = torch.randn(3000, generator=torch.Generator().manual_seed(bits))
    codec = BlockQuant(bits, 100)
    y = codec.decode(codec.encode(x), 3000)
    scales = x.view(30, 100).abs().amax(1)
    grids = scales.unsqueeze(1) * ((2 * torch.arange(L).float() + 1 - L) / (L - 1))  # (30, L)
    nearest = torch.gather(grids, 1, (x.view(30, 100, 1) - grids.unsqueeze(1)).abs().argmin(2))
    torch.testing.assert_close(y, nearest.reshape(-1), rtol=1e-6, atol=1e-7)
    # the stated bound: half a step, s / (L - 1)
    bound = (scales / (L - 1)).repeat_interleave(100)
    assert bool(((y - x).abs() <= bound * (1 + 1e-6)).all())
    assert len(set(y[:100].tolist())) <= L


def test_quant_zero_block_decodes_to_zero_and_padding_is_cut():
    x = torch.cat([torch.zeros(8), torch.tensor([1.0, -1.0, 0.5])])
    for bits in (2, 4, 8):
        y = BlockQuant(bits, 8).decode(BlockQuant(bits, 8).encode(x), 11)
        assert y.shape == (11,) and y[:8].tolist() == [0.0] * 8 and y[8:10].tolist() == [1.0, -1.0]


def test_e3m0_powers_of_two_of_the_scale_and_zero_round_trip_exactly():
    s = 3.0
    vals = torch.tensor([0.0] + [s * 2.0**-j for j in range(7)] + [-s * 2.0**-j for j in range(7)])
    for block in (0, 5, 1024):
        codec = E3M0(block)
        assert torch.equal(codec.decode(codec.encode(vals), vals.numel()), vals)


def test_e3m0_rounds_to_the_nearest_power_of_two_by_hand():
    # Scale 1: 0.74 -> 0.5, 0.76 -> 1, 0.0078 (< 2**-7) -> 0, 0.008 (> 2**-7) -> 2**-6, -0.3 -> -0.25.
    x = torch.tensor([1.0, 0.74, 0.76, 0.0078, 0.008, -0.3])
    assert E3M0(0).decode(E3M0(0).encode(x), 6).tolist() == [1.0, 0.5, 1.0, 0.0, 2**-6, -0.25]


def test_e3m0_byte_layout_two_codes_per_byte_then_fp32_scales():
    x = torch.tensor([1.0, -0.5, 2**-6, 0.0, -1.0])  # codes 7, 8|6, 1, 0, 8|7
    payload = E3M0(0).encode(x)
    assert payload.dtype == torch.uint8 and payload.numel() == E3M0(0).nbytes(5) == 3 + 4
    assert payload[:3].tolist() == [7 | (14 << 4), 1 | (0 << 4), 15]
    assert payload[3:].clone().view(torch.float32).tolist() == [1.0]


@pytest.mark.parametrize("block", [0, 64, 1024])
def test_e3m0_error_is_within_a_third_of_the_value_or_the_scales_floor(block):
    g = torch.Generator().manual_seed(block)
    x = torch.randn(10_001, generator=g) * torch.exp(torch.randn(10_001, generator=g))  # wide dynamic range
    y = E3M0(block).decode(E3M0(block).encode(x), x.numel())
    size = x.numel() if block == 0 else block
    pad = torch.nn.functional.pad(x.abs(), (0, -x.numel() % size))
    scale = pad.view(-1, size).amax(1).repeat_interleave(size)[: x.numel()]
    bound = torch.maximum(x.abs() / 3, scale * 2.0**-7)
    assert bool(((y - x).abs() <= bound * (1 + 1e-6)).all())
    assert bool((torch.sign(y) * torch.sign(x) >= 0).all())  # never flips a sign


def _dct_reference(rows: np.ndarray) -> np.ndarray:
    """Orthonormal DCT-II of each row by numpy's FFT of the even extension (Makhoul):
    X_k = Re(exp(-i pi k / 2N) FFT([x, reversed x])_k) / 2, scaled sqrt(1/N) (k = 0) or sqrt(2/N)."""
    n = rows.shape[1]
    ext = np.concatenate([rows, rows[:, ::-1]], axis=1)
    k = np.arange(n)
    raw = 0.5 * np.real(np.exp(-1j * np.pi * k / (2 * n)) * np.fft.fft(ext, axis=1)[:, :n])
    return raw * np.where(k == 0, np.sqrt(1 / n), np.sqrt(2 / n))


def _dct_payload(codec: DCTTopK, payload: torch.Tensor, rows: int) -> tuple[torch.Tensor, torch.Tensor]:
    k = codec.nbytes(1) // 4
    idx = payload[: 2 * rows * k].clone().view(torch.int16).long().view(rows, k)
    vals = payload[2 * rows * k:].clone().view(torch.float16).double().view(rows, k)
    return idx, vals


def test_dct_coefficients_match_an_fft_reference():
    chunk, n = 16, 40  # 3 chunks, the last one padded with 8 zeros
    x = torch.randn(n, generator=torch.Generator().manual_seed(5))
    codec = DCTTopK(1.0, chunk)
    idx, vals = _dct_payload(codec, codec.encode(x), 3)
    padded = np.zeros(48)
    padded[:n] = x.double().numpy()
    ref = _dct_reference(padded.reshape(3, chunk))
    got = np.zeros((3, chunk))
    np.put_along_axis(got, idx.numpy(), vals.numpy(), axis=1)
    np.testing.assert_allclose(got, ref, rtol=2**-10, atol=1e-6)  # fp16 values


def test_dct_of_a_cosine_basis_vector_is_one_coefficient():
    chunk = 32
    j = torch.arange(chunk, dtype=torch.float64)
    x = torch.cos(math.pi * 3 * (2 * j + 1) / (2 * chunk)).float()  # basis 3, norm sqrt(chunk / 2) = 4
    codec = DCTTopK(1 / chunk, chunk)  # k = 1
    idx, vals = _dct_payload(codec, codec.encode(x), 1)
    assert idx.tolist() == [[3]] and vals.tolist() == [[4.0]]
    torch.testing.assert_close(codec.decode(codec.encode(x), chunk), x, rtol=0, atol=1e-5)


@pytest.mark.parametrize("n", [1, 64, 100])
def test_dct_at_ratio_one_round_trips_to_fp16_precision(n):
    x = torch.randn(n, generator=torch.Generator().manual_seed(n))
    codec = DCTTopK(1.0, 64)
    y = codec.decode(codec.encode(x), n)
    assert float((y - x).norm()) <= 2**-11 * float(x.norm()) * 1.5  # orthonormal: fp16 rounding of the coefficients
    payload = codec.encode(x)
    assert bool(codec.support(payload, n).all())


def test_make_codec_builds_each_kind_and_none_for_none():
    assert make_codec("none") is None
    assert isinstance(make_codec("fp16"), LowPrecision) and make_codec("bf16").kind == "bf16"
    topk = make_codec("topk", ratio=0.2, chunk=64, bits=16)
    assert (topk.kind, topk.sparse, topk.ratio, topk.chunk, topk.value_bits) == ("topk", True, 0.2, 64, 16)
    quant = make_codec("quant", bits=2, block=32)
    assert (quant.kind, quant.sparse, quant.bits, quant.block) == ("quant", False, 2, 32)
    assert make_codec("e3m0", block=0).block == 0
    assert isinstance(make_codec("dct", ratio=0.1, chunk=64), DCTTopK)
    assert KINDS == ("none", "fp16", "bf16", "topk", "quant", "e3m0", "dct")


@pytest.mark.parametrize(
    "args, field",
    [
        (dict(kind="zip"), "algo.compress="),
        (dict(kind="topk", ratio=0.0), "algo.compress_ratio=0.0"),
        (dict(kind="topk", ratio=1.5), "algo.compress_ratio=1.5"),
        (dict(kind="dct", ratio=-1, chunk=64), "algo.compress_ratio=-1"),
        (dict(kind="topk", chunk=-1), "algo.compress_chunk=-1"),
        (dict(kind="dct", chunk=0), "algo.compress_chunk=0"),
        (dict(kind="dct", chunk=40000), "algo.compress_chunk=40000"),
        (dict(kind="topk", bits=3), "algo.compress_bits=3"),
        (dict(kind="quant", bits=16), "algo.compress_bits=16"),
        (dict(kind="quant", block=0), "algo.compress_block=0"),
        (dict(kind="e3m0", block=-1), "algo.compress_block=-1"),
    ],
)
def test_check_codec_refuses_bad_fields_in_one_line_naming_the_field(args, field):
    with pytest.raises(ConfigError) as err:
        make_codec(**args)
    assert str(err.value).startswith(field) and "\n" not in str(err.value)


def test_check_codec_accepts_the_edges_and_ignores_fields_the_kind_does_not_use():
    check_codec("topk", 1.0, 0, 16, 1024)
    check_codec("e3m0", block=0)
    check_codec("quant", bits=8, block=1)
    check_codec("dct", chunk=32768)
    check_codec("fp16", ratio=5, chunk=-1, bits=3, block=-1)
    with pytest.raises(ConfigError, match=r"^outer\.compress_bits=3"):
        check_codec("quant", bits=3, prefix="outer.compress")


def test_module_imports_without_torch():
    code = "import sys, dreamddp.engine.codecs; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)
