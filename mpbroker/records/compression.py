"""The five codecs of a record batch (attributes bits 0-2), with bounded inflation.

0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd; 5-7 are unknown (UNSUPPORTED_COMPRESSION_TYPE).
A compressed batch holds all its records as one compressed stream after the records
count. gzip and snappy are the 0.7 codec's own (``mpbroker.codec.compression``): gzip
members, and snappy both xerial-framed (what Java's snappy-java and librdkafka write)
and raw. LZ4 is the LZ4 frame format (Kafka's, with independent blocks), zstd a zstd
frame (several of either are read one after the other).

``decompress`` never produces more than ``limit`` bytes: corrupt data and a
decompression bomb both raise ``RecordBatchError(CORRUPT_MESSAGE)`` after bounded work
and memory. Sans-IO.
"""

import lz4.frame
import zstandard

from mpbroker.codec import compression as legacy
from mpbroker.codec.errors import InvalidMessageError
from mpbroker.records.errors import CORRUPT_MESSAGE, UNSUPPORTED_COMPRESSION_TYPE, RecordBatchError

CODEC_NONE = 0
CODEC_GZIP = 1
CODEC_SNAPPY = 2
CODEC_LZ4 = 3
CODEC_ZSTD = 4
CODEC_MASK = 0x07
CODEC_NAMES = {CODEC_NONE: "none", CODEC_GZIP: "gzip", CODEC_SNAPPY: "snappy", CODEC_LZ4: "lz4", CODEC_ZSTD: "zstd"}

ZSTD_LEVEL = 3  # zstd's (and Kafka's) default
_ZSTD_CHUNK = 1 << 20


def compress(codec: int, data) -> bytes:
    """The records region ``data`` compressed as a Kafka producer would."""
    if codec == CODEC_GZIP or codec == CODEC_SNAPPY:
        return legacy.compress(codec, bytes(data))  # the codec numbers agree with 0.7's
    if codec == CODEC_LZ4:
        return lz4.frame.compress(data, block_size=lz4.frame.BLOCKSIZE_MAX64KB, block_linked=False,
                                  content_checksum=False, store_size=False)
    if codec == CODEC_ZSTD:
        return zstandard.ZstdCompressor(level=ZSTD_LEVEL).compress(data)
    raise ValueError(f"cannot compress with codec {codec}")


def decompress(codec: int, data, limit: int) -> bytes:
    """Inflate ``data`` to at most ``limit`` bytes; RecordBatchError otherwise."""
    if codec == CODEC_GZIP or codec == CODEC_SNAPPY:
        try:
            return legacy.decompress(codec, data, limit)
        except InvalidMessageError as exc:  # InflateLimitError included
            raise RecordBatchError(CORRUPT_MESSAGE, str(exc)) from None
    if codec == CODEC_LZ4:
        return _unlz4(data, limit)
    if codec == CODEC_ZSTD:
        return _unzstd(data, limit)
    if codec == CODEC_NONE:
        raise ValueError("codec none has nothing to decompress")
    raise RecordBatchError(UNSUPPORTED_COMPRESSION_TYPE, f"unknown compression codec {codec}")


def _unlz4(data, limit: int) -> bytes:
    out = []
    produced = 0
    remaining = data
    while True:
        inflater = lz4.frame.LZ4FrameDecompressor()
        try:
            chunk = inflater.decompress(remaining, max_length=limit - produced + 1)
        except RuntimeError as exc:  # lz4.frame reports corrupt frames as RuntimeError
            raise RecordBatchError(CORRUPT_MESSAGE, f"corrupt lz4 data: {exc}") from None
        produced += len(chunk)
        if produced > limit:
            raise RecordBatchError(CORRUPT_MESSAGE, f"lz4 records inflate past {limit} bytes")
        out.append(chunk)
        if not inflater.eof:
            raise RecordBatchError(CORRUPT_MESSAGE, "truncated lz4 data")
        remaining = inflater.unused_data
        if not remaining:
            return b"".join(out)


def _unzstd(data, limit: int) -> bytes:
    out = []
    produced = 0
    try:
        reader = zstandard.ZstdDecompressor().stream_reader(data, read_across_frames=True)
        while True:
            chunk = reader.read(min(_ZSTD_CHUNK, limit - produced + 1))
            if not chunk:
                break
            produced += len(chunk)
            if produced > limit:
                raise RecordBatchError(CORRUPT_MESSAGE, f"zstd records inflate past {limit} bytes")
            out.append(chunk)
    except zstandard.ZstdError as exc:
        raise RecordBatchError(CORRUPT_MESSAGE, f"corrupt zstd data: {exc}") from None
    if not produced and len(data):
        raise RecordBatchError(CORRUPT_MESSAGE, "zstd data inflates to nothing (truncated?)")
    return b"".join(out)
