"""GZIP and Snappy bodies of compressed wrapper messages, with bounded inflation.

GZIP is a standard gzip stream (several members are accepted, as Java's
GZIPInputStream does). Snappy uses the framing of the Java snappy library that
Kafka 0.7 used: a 16-byte header (``0x82 SNAPPY 0x00``, int32 version, int32
compatible version) and then ``[int32 compressed_length][raw snappy block]`` repeated.
A body without that header is read as one raw snappy block, as that library did.

Decompression never produces more than the caller's ``limit`` bytes: a
decompression bomb fails with ``InflateLimitError`` after bounded work and memory.
"""

import struct
import zlib

import snappy

from mpbroker.codec.errors import InvalidMessageError
from mpbroker.codec.message import CODEC_GZIP, CODEC_NONE, CODEC_SNAPPY

XERIAL_MAGIC = b"\x82SNAPPY\x00"
XERIAL_HEADER = XERIAL_MAGIC + struct.pack(">ii", 1, 1)
XERIAL_BLOCK_SIZE = 32 * 1024  # the Java library's default block size
_INT32 = struct.Struct(">i")

GZIP_LEVEL = 6  # Java's GZIPOutputStream default


class InflateLimitError(InvalidMessageError):
    """A compressed message would inflate past the allowed size."""


def compress(codec: int, data: bytes) -> bytes:
    if codec == CODEC_GZIP:
        compressor = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, 31)
        return compressor.compress(data) + compressor.flush()
    if codec == CODEC_SNAPPY:
        return _xerial_compress(data)
    raise ValueError(f"cannot compress with codec {codec}")


def decompress(codec: int, data, limit: int) -> bytes:
    """Inflate ``data``; raise InvalidMessageError if corrupt, InflateLimitError past ``limit``.

    The error leaves without the traceback of the inflating functions: their frames
    hold what was inflated so far (up to ``limit`` bytes), and a caller that keeps the
    error (validation returns it) would keep all of that alive with it."""
    try:
        if codec == CODEC_GZIP:
            return _gunzip(data, limit)
        if codec == CODEC_SNAPPY:
            return _xerial_decompress(data, limit)
    except InvalidMessageError as exc:
        raise exc.with_traceback(None) from None
    if codec == CODEC_NONE:
        raise ValueError("codec none has nothing to decompress")
    raise InvalidMessageError(f"unknown compression codec {codec}")


def _gunzip(data, limit: int) -> bytes:
    out = []
    produced = 0
    remaining = data
    while True:
        inflater = zlib.decompressobj(31)
        try:
            chunk = inflater.decompress(remaining, limit - produced + 1)
        except zlib.error as exc:
            raise InvalidMessageError(f"corrupt gzip data: {exc}") from None
        produced += len(chunk)
        if produced > limit:
            raise InflateLimitError(f"gzip message inflates past {limit} bytes")
        out.append(chunk)
        if not inflater.eof:
            raise InvalidMessageError("truncated gzip data")
        remaining = inflater.unused_data
        if not remaining:
            return b"".join(out)


def _xerial_compress(data: bytes) -> bytes:
    parts = [XERIAL_HEADER]
    view = memoryview(data)
    pack = _INT32.pack
    for start in range(0, len(data), XERIAL_BLOCK_SIZE):
        block = snappy.compress(view[start:start + XERIAL_BLOCK_SIZE])
        parts.append(pack(len(block)))
        parts.append(block)
    return b"".join(parts)


def _snappy_block_length(block) -> int:
    """The uncompressed length a raw snappy block declares (its varint preamble)."""
    result = 0
    shift = 0
    for index in range(min(len(block), 5)):
        byte = block[index]
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result
        shift += 7
    raise InvalidMessageError("corrupt snappy block: bad length preamble")


def _snappy_block(block, budget: int) -> bytes:
    if _snappy_block_length(block) > budget:
        raise InflateLimitError("snappy message inflates past the allowed size")
    try:
        return snappy.uncompress(bytes(block))
    except Exception as exc:  # python-snappy raises its own UncompressError and others
        raise InvalidMessageError(f"corrupt snappy data: {exc}") from None


def _xerial_decompress(data, limit: int) -> bytes:
    view = memoryview(data)
    if bytes(view[:8]) != XERIAL_MAGIC:
        return _snappy_block(view, limit)
    if len(view) < len(XERIAL_HEADER):
        raise InvalidMessageError("truncated snappy stream header")
    out = []
    produced = 0
    pos = len(XERIAL_HEADER)
    end = len(view)
    while pos < end:
        if pos + 4 > end:
            raise InvalidMessageError("truncated snappy block length")
        (size,) = _INT32.unpack_from(view, pos)
        pos += 4
        if size < 0 or pos + size > end:
            raise InvalidMessageError("snappy block runs past the end of the message")
        block = _snappy_block(view[pos:pos + size], limit - produced)
        produced += len(block)
        out.append(block)
        pos += size
    return b"".join(out)
