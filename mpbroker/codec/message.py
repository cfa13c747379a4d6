"""One Kafka 0.7 message: header layout, codec bits, and encoding.

Sans-IO and stateless. Layouts (PROTOCOL.md, "Messages"):

    magic 0: [int32 length][magic=0][crc32:4][payload]
    magic 1: [int32 length][magic=1][attributes:1][crc32:4][payload]

``length`` counts everything after itself; the CRC32 (zlib polynomial, unsigned)
covers the payload only; ``attributes & 3`` is the compression codec.

``crc32`` is what the encoders checksum with: ``_fastscan``'s carry-less-multiply CRC
where the extension is built and the CPU has it (twice as fast as zlib's on a 200-byte
payload; the same values), else ``zlib.crc32``.
"""

import os
import struct
import zlib

try:
    from mpbroker.codec._fastscan import CRC as _CRC
    from mpbroker.codec._fastscan import crc32 as _folding_crc32
except ImportError:  # built without a compiler
    _CRC = None
# MPBROKER_PURE_PYTHON=1: none of the C extension (here and in message_set), as if built without it
PURE_PYTHON = os.environ.get("MPBROKER_PURE_PYTHON", "") not in ("", "0")
crc32 = _folding_crc32 if _CRC == "pclmul" and not PURE_PYTHON else zlib.crc32

MAGIC_V0 = 0
MAGIC_V1 = 1

CODEC_NONE = 0
CODEC_GZIP = 1
CODEC_SNAPPY = 2
CODEC_MASK = 0x03
CODEC_BY_NAME = {"none": CODEC_NONE, "gzip": CODEC_GZIP, "snappy": CODEC_SNAPPY}
CODEC_NAMES = {code: name for name, code in CODEC_BY_NAME.items()}

LENGTH_SIZE = 4
V0_HEADER_SIZE = 5  # magic, crc
V1_HEADER_SIZE = 6  # magic, attributes, crc
V0_OVERHEAD = LENGTH_SIZE + V0_HEADER_SIZE  # bytes before a magic-0 payload
V1_OVERHEAD = LENGTH_SIZE + V1_HEADER_SIZE  # bytes before a magic-1 payload

V1_PREFIX = struct.Struct(">iBBI")  # length, magic, attributes, crc
V0_PREFIX = struct.Struct(">iBI")  # length, magic, crc


def codec_from_name(name: str) -> int:
    """Map ``none``/``gzip``/``snappy`` (or ``0``/``1``/``2``) to a codec number."""
    key = str(name).strip().lower()
    if key in CODEC_BY_NAME:
        return CODEC_BY_NAME[key]
    if key in ("0", "1", "2"):
        return int(key)
    raise ValueError(f"unknown compression codec {name!r}; expected none, gzip or snappy")


def encode_message(payload: bytes, codec: int = CODEC_NONE) -> bytes:
    """Encode one magic-1 message (with its length prefix)."""
    return V1_PREFIX.pack(len(payload) + V1_HEADER_SIZE, MAGIC_V1, codec, crc32(payload)) + payload


def encode_message_v0(payload: bytes) -> bytes:
    """Encode one magic-0 message, as pre-0.7 producers wrote them (read for compatibility)."""
    return V0_PREFIX.pack(len(payload) + V0_HEADER_SIZE, MAGIC_V0, crc32(payload)) + payload


def encode_message_set(payloads) -> bytes:
    """Concatenate uncompressed magic-1 messages for ``payloads`` into one message set.

    Headers and payloads are interleaved in one list and joined once, so each payload
    is copied exactly one time.
    """
    pack = V1_PREFIX.pack
    checksum = crc32
    parts = []
    append = parts.append
    for payload in payloads:
        append(pack(len(payload) + V1_HEADER_SIZE, MAGIC_V1, CODEC_NONE, checksum(payload)))
        append(payload)
    return b"".join(parts)
