"""GZIP and xerial-framed Snappy bodies, byte-level, and bounded inflation."""

import gzip
import struct

import pytest
import snappy

from mpbroker.codec import compression
from mpbroker.codec.compression import InflateLimitError
from mpbroker.codec.errors import InvalidMessageError
from mpbroker.codec.message import CODEC_GZIP, CODEC_SNAPPY


def test_gzip_is_a_standard_gzip_stream():
    data = b"page view " * 1000
    body = compression.compress(CODEC_GZIP, data)
    assert body[:2] == b"\x1f\x8b"
    assert gzip.decompress(body) == data
    assert compression.decompress(CODEC_GZIP, gzip.compress(data), 1 << 20) == data


def test_gzip_concatenated_members_are_read_like_java_does():
    body = gzip.compress(b"first ") + gzip.compress(b"second")
    assert compression.decompress(CODEC_GZIP, body, 100) == b"first second"


def test_gzip_truncated_stream():
    body = compression.compress(CODEC_GZIP, b"x" * 1000)
    with pytest.raises(InvalidMessageError, match="truncated gzip"):
        compression.decompress(CODEC_GZIP, body[:-10], 1 << 20)


def test_snappy_uses_the_java_library_framing():
    data = bytes(range(256)) * 300  # 76,800 bytes: three 32 KiB blocks
    body = compression.compress(CODEC_SNAPPY, data)
    assert body[:16] == b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
    position, blocks = 16, []
    while position < len(body):
        (size,) = struct.unpack_from(">i", body, position)
        blocks.append(snappy.uncompress(body[position + 4:position + 4 + size]))
        position += 4 + size
    assert [len(block) for block in blocks] == [32768, 32768, 11264]
    assert b"".join(blocks) == data
    assert compression.decompress(CODEC_SNAPPY, body, 1 << 20) == data


def test_snappy_without_header_is_one_raw_block():
    data = b"raw snappy " * 50
    assert compression.decompress(CODEC_SNAPPY, snappy.compress(data), 1 << 20) == data


def test_snappy_block_running_past_the_end():
    body = compression.compress(CODEC_SNAPPY, b"abc" * 100)
    with pytest.raises(InvalidMessageError, match="past the end"):
        compression.decompress(CODEC_SNAPPY, body[:-3], 1 << 20)


@pytest.mark.parametrize("codec", [CODEC_GZIP, CODEC_SNAPPY])
def test_limit_is_exact(codec):
    data = b"q" * 10_000
    body = compression.compress(codec, data)
    assert compression.decompress(codec, body, 10_000) == data
    with pytest.raises(InflateLimitError):
        compression.decompress(codec, body, 9_999)


def test_empty_input_round_trips():
    for codec in (CODEC_GZIP, CODEC_SNAPPY):
        assert compression.decompress(codec, compression.compress(codec, b""), 10) == b""
