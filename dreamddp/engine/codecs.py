"""The wire codecs of the sync pipeline: a flat fp32 tensor <-> the uint8 payload one rank all-gathers.

Every codec has ``kind`` (its ``algo.compress`` name), ``sparse``, ``nbytes(numel)`` (the exact
length of ``encode`` of ``numel`` elements), ``encode(x) -> uint8`` and ``decode(payload, numel)
-> fp32``; the sparse ones also ``support(payload, numel) -> bool``, True where the payload
carried a value (for a mean over the ranks that sent each index).  Every rank decodes every
rank's payload with the same ops, so sums in rank order are identical everywhere.  Below, n is
``numel``, ``ceil`` is Python's ``math.ceil`` of the float product.

- ``fp16`` / ``bf16`` (LowPrecision): the values cast, after clamping to the type's finite range
  (fp16 +-65504), so nothing decodes to inf (a top-k fp16 of 7e4 once did and poisoned the error
  feedback).  2 n bytes.
- ``topk`` (TopK, ``ratio``, ``chunk``, ``value_bits``): rows of width W: ``chunk=0`` one row,
  W = n; ``chunk>0`` the tensor zero-padded to R = ceil(n / chunk) rows of W = chunk.  Each
  row keeps its k = max(1, min(W, ceil(ratio W))) largest magnitudes (padding loses to every
  real element, so it is kept only when a row has fewer than k real ones; it is never decoded
  nor reported by ``support``).  Indices within the row: int16 when 0 < chunk <= 32768, else
  int32; then the values: ``value_bits=16`` fp16 (clamped as above); 2, 4 or 8: one fp32 scale
  per row, s = absmax of its kept values, each value on the quant grid below.  With m = R k:
  idx (2 m or 4 m) + values (2 m | ceil(m b / 8) codes then 4 R scale bytes).
- ``quant`` (BlockQuant, ``bits`` b in 2, 4, 8, ``block``): the tensor zero-padded to
  B = ceil(n / block) blocks, per block s = absmax (fp32), L = 2**b levels:
  q = clamp(round(((x / s) (L - 1) + (L - 1)) / 2), 0, L - 1), decoded s (2q + 1 - L) / (L - 1):
  exactly L symmetric levels with +-s among them (2-bit {-s, -s/3, s/3, s}; the old code's
  "2-bit" was ternary), nearest level (ties to even q), error <= s / (L - 1); s = 0 decodes 0.
  The n codes packed 8 / b per byte (element i in bits b (i mod 8/b) of byte i b / 8; the
  padding is not sent), then the B scales: ceil(n b / 8) + 4 B bytes.
- ``e3m0`` (E3M0, ``block``): the 4-bit sign + 3-bit exponent code of Streaming DiLoCo's FP4,
  moved here with its numerics unchanged (``block=0``: one scale for the whole payload): with
  S = n (block 0, min 1) or block and B = ceil(n / S) blocks, (B S + (B S mod 2)) / 2 + 4 B bytes.
- ``dct`` (DCTTopK, ``ratio``, ``chunk``): DeMo's fast components (Peng et al. 2024,
  arXiv 2411.19870) on 1-D chunks: the tensor zero-padded to R = ceil(n / chunk) rows, each
  row's orthonormal DCT-II (one cached chunk x chunk matrix), then TopK's per-row rule on the
  coefficients (int16 indices, fp16 values): 4 R k bytes.  Decoding scatters them and applies
  the inverse (the transpose).  A coefficient spreads over its whole chunk, so ``support`` is
  True for every element of a chunk that sent anything, and every chunk sends k >= 1
  coefficients: the "senders" reduction treats dct as dense, a plain mean.

``make_codec`` builds one from the config fields, ``check_codec`` refuses bad ones in one line.
"""

from __future__ import annotations

import math
from numbers import Integral

from dreamddp.checks import ConfigError, at_least, between, choice
from dreamddp.lazy import lazy

torch = lazy("torch")

KINDS = ("none", "fp16", "bf16", "topk", "quant", "e3m0", "dct")
BITS = (2, 4, 8)
VALUE_BITS = (2, 4, 8, 16)  # top-k values: 16 = fp16, else the quant grid with one scale per row
INT16_CHUNK = 32768  # largest chunk whose in-chunk indices (0 .. chunk - 1) fit int16


def _view(payload: torch.Tensor, dtype) -> torch.Tensor:
    """``payload`` (uint8) read as ``dtype``; cloned first when its offset is not aligned for it
    (a rank's slice of a gathered buffer, or a field behind an odd number of bytes)."""
    if payload.storage_offset() % dtype.itemsize or not payload.is_contiguous():
        payload = payload.clone()
    return payload.view(dtype)


def _finite(x: torch.Tensor, dtype) -> torch.Tensor:
    """``x`` cast to the 16-bit ``dtype``, clamped first: an out-of-range value becomes the largest
    finite one, never inf (which error feedback would carry forever)."""
    big = torch.finfo(dtype).max
    return x.clamp(-big, big).to(dtype)


def _packed_bytes(count: int, bits: int) -> int:
    return -(-count * bits // 8)


def _pack(codes: torch.Tensor, bits: int) -> torch.Tensor:
    """Flat codes in [0, 2**bits) -> uint8, 8 / bits per byte, element i at bits bits * (i mod 8/bits)."""
    per = 8 // bits
    if per == 1:
        return codes.to(torch.uint8)
    codes = torch.nn.functional.pad(codes.to(torch.int32), (0, -codes.numel() % per))
    shifts = torch.arange(per, dtype=torch.int32, device=codes.device) * bits
    return (codes.view(-1, per) << shifts).sum(dim=1).to(torch.uint8)  # disjoint bits: sum = or


def _unpack(packed: torch.Tensor, bits: int, count: int) -> torch.Tensor:
    """The first ``count`` codes of ``_pack``'s bytes, as int32."""
    per = 8 // bits
    if per == 1:
        return packed[:count].to(torch.int32)
    shifts = torch.arange(per, dtype=torch.int32, device=packed.device) * bits
    codes = (packed.to(torch.int32).unsqueeze(1) >> shifts) & ((1 << bits) - 1)
    return codes.reshape(-1)[:count]


def _grid_encode(x: torch.Tensor, scale: torch.Tensor, levels: int) -> torch.Tensor:
    """Codes 0 .. levels - 1 of x on the symmetric grid of ``levels`` points over [-scale, scale]."""
    top = levels - 1
    safe = torch.where(scale > 0, scale, torch.ones_like(scale))  # s = 0: x = 0 too, decodes to 0
    return torch.round(((x / safe) * top + top) / 2).clamp_(0, top).to(torch.int32)


def _grid_decode(codes: torch.Tensor, scale: torch.Tensor, levels: int) -> torch.Tensor:
    # the level in [-1, 1] first, then times s: the end codes give exactly +-s
    return (2 * codes + 1 - levels).float() / (levels - 1) * scale


class LowPrecision:
    """The values cast to fp16 or bf16, clamped to the type's finite range: 2 bytes each."""

    sparse = False

    def __init__(self, dtype_name: str):
        self.kind = dtype_name
        self.dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[dtype_name]

    def nbytes(self, numel: int) -> int:
        return 2 * numel

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        return _finite(x.reshape(-1).float(), self.dtype).view(torch.uint8)

    def decode(self, payload: torch.Tensor, numel: int) -> torch.Tensor:
        return _view(payload[: 2 * numel], self.dtype).float()


class TopK:
    """The k largest magnitudes of the tensor (``chunk=0``) or of each ``chunk``: indices, then
    fp16 values (``value_bits=16``) or ``value_bits``-bit grid codes and one fp32 scale per row."""

    kind = "topk"
    sparse = True

    def __init__(self, ratio: float, chunk: int = 0, value_bits: int = 16):
        self.ratio, self.chunk, self.value_bits = ratio, chunk, value_bits
        self.index_dtype = torch.int16 if 0 < chunk <= INT16_CHUNK else torch.int32

    def _rows(self, numel: int) -> tuple[int, int, int]:
        """(rows, width, k): the padded tensor viewed (rows, width), k kept per row."""
        if self.chunk > 0:
            rows, width = max(1, -(-numel // self.chunk)), self.chunk
        else:
            rows, width = 1, max(1, numel)
        return rows, width, max(1, min(width, math.ceil(self.ratio * width)))

    def nbytes(self, numel: int) -> int:
        rows, _, k = self._rows(numel)
        m = rows * k
        values = 2 * m if self.value_bits == 16 else _packed_bytes(m, self.value_bits) + 4 * rows
        return m * self.index_dtype.itemsize + values

    def select(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(indices within the row (rows, k) int64, their values (rows, k) fp32)."""
        x = x.reshape(-1).float()
        rows, width, k = self._rows(x.numel())
        pad = rows * width - x.numel()
        score = x.abs()
        if pad:
            # padding scores -1 so every real element (even a zero) wins over it
            x = torch.nn.functional.pad(x, (0, pad))
            score = torch.nn.functional.pad(score, (0, pad), value=-1.0)
        idx = score.view(rows, width).topk(k, dim=1, sorted=False).indices
        return idx, x.view(rows, width).gather(1, idx)

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        idx, vals = self.select(x)
        parts = [idx.to(self.index_dtype).reshape(-1).view(torch.uint8)]
        if self.value_bits == 16:
            parts.append(_finite(vals.reshape(-1), torch.float16).view(torch.uint8))
        else:
            scale = vals.abs().amax(dim=1)
            codes = _grid_encode(vals, scale.unsqueeze(1), 2**self.value_bits)
            parts += [_pack(codes.reshape(-1), self.value_bits), scale.contiguous().view(torch.uint8)]
        return torch.cat(parts)

    def _indices(self, payload: torch.Tensor, numel: int) -> torch.Tensor:
        rows, _, k = self._rows(numel)
        ib = rows * k * self.index_dtype.itemsize
        return _view(payload[:ib], self.index_dtype).long().view(rows, k)

    def decode(self, payload: torch.Tensor, numel: int) -> torch.Tensor:
        rows, width, k = self._rows(numel)
        m, ib = rows * k, rows * k * self.index_dtype.itemsize
        if self.value_bits == 16:
            vals = _view(payload[ib: ib + 2 * m], torch.float16).float()
        else:
            pb = _packed_bytes(m, self.value_bits)
            codes = _unpack(payload[ib: ib + pb], self.value_bits, m).view(rows, k)
            scale = _view(payload[ib + pb: ib + pb + 4 * rows], torch.float32)
            vals = _grid_decode(codes, scale.unsqueeze(1), 2**self.value_bits)
        out = torch.zeros(rows, width, dtype=torch.float32, device=payload.device)
        out.scatter_(1, self._indices(payload, numel), vals.view(rows, k))  # unique per row: deterministic
        return out.view(-1)[:numel]

    def support(self, payload: torch.Tensor, numel: int) -> torch.Tensor:
        rows, width, _ = self._rows(numel)
        mask = torch.zeros(rows, width, dtype=torch.bool, device=payload.device)
        return mask.scatter_(1, self._indices(payload, numel), True).view(-1)[:numel]  # padding cut off


class BlockQuant:
    """``bits``-bit codes on a symmetric grid of 2**bits levels, one fp32 absmax scale per ``block``."""

    kind = "quant"
    sparse = False

    def __init__(self, bits: int, block: int):
        self.bits, self.block, self.levels = bits, block, 2**bits

    def _nblocks(self, numel: int) -> int:
        return max(1, -(-numel // self.block))

    def nbytes(self, numel: int) -> int:
        return _packed_bytes(numel, self.bits) + 4 * self._nblocks(numel)

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        x = x.reshape(-1).float()
        n, nb = x.numel(), self._nblocks(x.numel())
        blocks = torch.nn.functional.pad(x, (0, nb * self.block - n)).view(nb, self.block)
        scale = blocks.abs().amax(dim=1)
        codes = _grid_encode(blocks, scale.unsqueeze(1), self.levels).view(-1)[:n]  # padding not sent
        return torch.cat([_pack(codes, self.bits), scale.contiguous().view(torch.uint8)])

    def decode(self, payload: torch.Tensor, numel: int) -> torch.Tensor:
        nb, pb = self._nblocks(numel), _packed_bytes(numel, self.bits)
        codes = _unpack(payload[:pb], self.bits, numel)
        codes = torch.nn.functional.pad(codes, (0, nb * self.block - numel)).view(nb, self.block)
        scale = _view(payload[pb: pb + 4 * nb], torch.float32)
        return _grid_decode(codes, scale.unsqueeze(1), self.levels).view(-1)[:numel]


def _e3m0_blocks(numel: int, block: int) -> tuple[int, int]:
    """(block size, number of blocks) covering ``numel`` elements."""
    size = numel if block <= 0 else block
    return max(size, 1), max(1, -(-numel // max(size, 1)))


class E3M0:
    """4-bit sign + 3-bit exponent codes (m = 1..7: s 2**(m - 7), m = 0: 0), nearest magnitude,
    two per byte (element 2i low nibble), then fp32 block scales: the code streaming_diloco has sent since it was added, unchanged."""

    kind = "e3m0"
    sparse = False

    def __init__(self, block: int = 1024):
        self.block = block

    def nbytes(self, numel: int) -> int:
        size, nb = _e3m0_blocks(numel, self.block)
        return (nb * size + (nb * size) % 2) // 2 + 4 * nb

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        x = x.reshape(-1).float()
        n = x.numel()
        size, nb = _e3m0_blocks(n, self.block)
        padded = x.new_zeros(nb * size + (nb * size) % 2)  # even length: two codes per byte
        padded[:n] = x
        blocks = padded[: nb * size].view(nb, size)
        scale = blocks.abs().amax(dim=1)
        a = (blocks.abs() / torch.where(scale > 0, scale, 1.0).unsqueeze(1)).clamp_(max=1.0)
        mant, exp = torch.frexp(a)  # a = mant * 2**exp, mant in [0.5, 1)
        k = exp - 1 + (mant >= 0.75).to(exp.dtype)  # nearest power of two: 2**k
        m = torch.where(a >= 2.0**-7, (k + 7).clamp(min=1, max=7), torch.zeros_like(k))
        codes = torch.zeros(padded.numel(), dtype=torch.uint8, device=x.device)
        codes[: nb * size] = (m | ((blocks < 0) & (m > 0)).to(m.dtype) << 3).reshape(-1).to(torch.uint8)
        packed = codes[0::2] | (codes[1::2] << 4)
        return torch.cat([packed, scale.contiguous().view(torch.uint8)])

    def decode(self, payload: torch.Tensor, numel: int) -> torch.Tensor:
        size, nb = _e3m0_blocks(numel, self.block)
        ncodes = (nb * size + (nb * size) % 2) // 2
        packed, scale = payload[:ncodes], _view(payload[ncodes: ncodes + 4 * nb], torch.float32)
        codes = torch.stack([packed & 0xF, packed >> 4], dim=1).reshape(-1)[: nb * size].to(torch.int32)
        m, neg = codes & 7, (codes >> 3).bool()
        mag = torch.where(m > 0, torch.exp2((m - 7).float()), 0.0)  # exact powers of two
        vals = torch.where(neg, -mag, mag).view(nb, size) * scale.unsqueeze(1)
        return vals.reshape(-1)[:numel]


_DCT: dict[tuple[int, str], torch.Tensor] = {}


def dct_matrix(chunk: int, device) -> torch.Tensor:
    """The orthonormal DCT-II matrix C (chunk x chunk, fp32; coefficients = C x, inverse C^T),
    C[k, j] = sqrt((1 if k == 0 else 2) / chunk) cos(pi k (2 j + 1) / (2 chunk)); built once per
    (chunk, device), in fp64 on the CPU (not every device has fp64)."""
    key = (chunk, str(torch.device(device)))
    if key not in _DCT:
        j = torch.arange(chunk, dtype=torch.float64)
        c = torch.cos(math.pi * j.unsqueeze(1) * (2 * j + 1) / (2 * chunk)) * math.sqrt(2 / chunk)
        c[0] /= math.sqrt(2)
        _DCT[key] = c.to(device=device, dtype=torch.float32)
    return _DCT[key]


class DCTTopK:
    """TopK's per-chunk rule (int16 indices, fp16 values) on each chunk's orthonormal DCT-II."""

    kind = "dct"
    sparse = True

    def __init__(self, ratio: float, chunk: int):
        self.ratio, self.chunk = ratio, chunk
        self.topk = TopK(ratio, chunk, 16)  # applied to the R * chunk coefficients: no padding there

    def _rows(self, numel: int) -> int:
        return max(1, -(-numel // self.chunk))

    def nbytes(self, numel: int) -> int:
        return self.topk.nbytes(self._rows(numel) * self.chunk)

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        x = x.reshape(-1).float()
        rows = self._rows(x.numel())
        blocks = torch.nn.functional.pad(x, (0, rows * self.chunk - x.numel())).view(rows, self.chunk)
        coef = blocks @ dct_matrix(self.chunk, x.device).T  # each row's C x
        return self.topk.encode(coef.reshape(-1))

    def decode(self, payload: torch.Tensor, numel: int) -> torch.Tensor:
        rows = self._rows(numel)
        coef = self.topk.decode(payload, rows * self.chunk).view(rows, self.chunk)
        return (coef @ dct_matrix(self.chunk, payload.device)).view(-1)[:numel]  # C^T X per row

    def support(self, payload: torch.Tensor, numel: int) -> torch.Tensor:
        # every chunk sends k >= 1 coefficients and each spreads over its chunk: dense
        return torch.ones(numel, dtype=torch.bool, device=payload.device)


def _whole(key: str, value, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise ConfigError(f"{key}={value}: must be an integer >= {low}")
    at_least(key, value, low)


def _one_of(key: str, value, allowed: tuple[int, ...]) -> None:
    if isinstance(value, bool) or value not in allowed:
        raise ConfigError(f"{key}={value}: choose from {', '.join(map(str, allowed))}")


def check_codec(kind: str, ratio: float = 0.01, chunk: int = 0, bits: int = 4, block: int = 1024,
                prefix: str = "algo.compress") -> None:
    """Refuse a bad codec config in one line naming the field; only the fields ``kind`` uses are
    checked (fp16 with compress_bits=16 left over from a topk run is fine)."""
    choice(prefix, kind, KINDS)
    if kind in ("topk", "dct"):
        between(f"{prefix}_ratio", ratio, 0, 1, open_low=True)
    if kind == "topk":
        _whole(f"{prefix}_chunk", chunk, 0)
        _one_of(f"{prefix}_bits", bits, VALUE_BITS)
    elif kind == "dct":
        _whole(f"{prefix}_chunk", chunk, 1)  # a DCT needs a chunk (its matrix is chunk**2 fp32) ...
        between(f"{prefix}_chunk", chunk, 1, INT16_CHUNK)  # ... whose indices fit int16
    elif kind == "quant":
        _one_of(f"{prefix}_bits", bits, BITS)
        _whole(f"{prefix}_block", block, 1)
    elif kind == "e3m0":
        _whole(f"{prefix}_block", block, 0)  # 0: one scale for the whole payload


def make_codec(kind: str, ratio: float = 0.01, chunk: int = 0, bits: int = 4, block: int = 1024):
    """The codec the fields ask for (checked first); None for ``none`` (fp32, no codec).
    ``bits`` is topk's value_bits: 16 for fp16 values."""
    check_codec(kind, ratio, chunk, bits, block)
    if kind in ("fp16", "bf16"):
        return LowPrecision(kind)
    if kind == "topk":
        return TopK(ratio, chunk, bits)
    if kind == "quant":
        return BlockQuant(bits, block)
    if kind == "e3m0":
        return E3M0(block)
    if kind == "dct":
        return DCTTopK(ratio, chunk)
    return None
