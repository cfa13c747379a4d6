"""0.7 messages as record batches, for modern consumers reading a log written by 0.7
producers.

Offsets come from byte positions (ARCHITECTURE.md): a 0.7 message stored at bytes
[p, q) of the log becomes one record with offset q - 1, in a batch of its own; a
compressed wrapper at [p, q) holding k messages (nested wrappers flattened) becomes one
uncompressed batch of k records with offsets q - k .. q - 1. So a consumer that has
read offset o continues at position o + 1, the next message's start, and the offsets are
the same whatever position a fetch started at. A wrapper can hold more messages than it
has bytes (k > q - p: tiny, very compressible messages); its first k - (q - p) records
cannot have an offset, so they are left out and reported in ``dropped`` (an error value:
the broker decides whether to log it; nothing raises).

Each record has a null key, the payload as its value, no headers, and CreateTime -1
(0.7 messages have no timestamp); each batch has no producer id and leader epoch -1.
Messages are read with the 0.7 codec: plain magic-1 messages inline (header, CRC),
everything else (magic 0, compressed wrappers at any depth) through
``mpbroker.codec.message_set.decode_messages``, which checks every CRC; the batches are
joined once. ~1 us per plain 200-byte message (measured like ``batch``'s walk). Sans-IO.
"""

import struct
from typing import NamedTuple

from mpbroker.codec.errors import InvalidMessageError
from mpbroker.codec.message import LENGTH_SIZE, MAGIC_V1, V0_HEADER_SIZE, V1_HEADER_SIZE, V1_OVERHEAD, crc32
from mpbroker.codec.message_set import DEFAULT_INFLATE_LIMIT, decode_messages
from mpbroker.records.batch import ATTRIBUTES_OFFSET, HEADER, MAGIC, MIN_BATCH_LENGTH, NO_TIMESTAMP, pack_batch
from mpbroker.records.crc import crc32c
from mpbroker.records.errors import CORRUPT_MESSAGE, RecordBatchError
from mpbroker.records.records import encode_varint

_V1_HEAD = struct.Struct(">iHI")  # length, magic << 8 | attributes, crc
_PLAIN_V1 = MAGIC_V1 << 8  # magic 1, codec none
# The header of a one-record batch from its attributes on (none of it depends on the
# message), and its CRC-32C: each message's CRC continues from there.
_ONE_RECORD_TAIL = HEADER.pack(0, 0, -1, MAGIC, 0, 0, 0, NO_TIMESTAMP, NO_TIMESTAMP, -1, -1, -1, 1)[ATTRIBUTES_OFFSET:]
_ONE_RECORD_TAIL_CRC = crc32c(_ONE_RECORD_TAIL)
_ONE_RECORD_LENGTH = MIN_BATCH_LENGTH
_HEAD = struct.Struct(">qiibI")  # baseOffset, batchLength, partitionLeaderEpoch, magic, crc
_RECORD_HEAD = b"\x00\x00\x00\x01"  # attributes, timestampDelta 0, offsetDelta 0, key null
_PREFIXES = {}  # payload size -> the record's bytes before the payload
_PREFIX_CACHE_SIZES = 1 << 14


def _record_prefix(size: int) -> bytes:
    value_length = encode_varint(size)
    return encode_varint(5 + len(value_length) + size) + _RECORD_HEAD + value_length  # + payload + headers (1)


class LegacyConversion(NamedTuple):
    data: bytes  # the record batches
    consumed: int  # bytes of the message set they stand for: whole messages, from its start
    # Why the conversion stopped before the end of the message set: the message at
    # ``consumed`` cannot be converted (corrupt). None when it reached the end or a torn
    # tail (a partial message, as a read of the log may end).
    error: RecordBatchError | None
    dropped: tuple  # ((log position of a wrapper, its leading records left without an offset), ...)


def legacy_to_batches(message_set, position: int, *, inflate_limit: int = DEFAULT_INFLATE_LIMIT) -> LegacyConversion:
    """Convert the 0.7 messages of ``message_set``, which starts at log position
    ``position``, to record batches; see the module docstring. ``inflate_limit`` bounds
    what its compressed wrappers inflate to, together."""
    buf = message_set if type(message_set) is bytes else bytes(message_set)
    end = len(buf)
    pos = 0
    parts = []
    append = parts.append
    dropped = []
    error = None
    budget = inflate_limit
    unpack = _V1_HEAD.unpack_from
    pack_head = _HEAD.pack
    prefixes = _PREFIXES
    while end - pos >= LENGTH_SIZE:
        try:
            length, magic_attributes, crc = unpack(buf, pos)
        except struct.error:  # under 10 bytes left: a torn tail, or magic 0 (the slow path says)
            (length,) = struct.unpack_from(">i", buf, pos)
            magic_attributes = crc = None
        following = pos + LENGTH_SIZE + length
        if length < V0_HEADER_SIZE:
            error = RecordBatchError(CORRUPT_MESSAGE, f"0.7 message at {position + pos} has length {length}")
            break
        if following > end:
            break  # a torn tail
        if magic_attributes == _PLAIN_V1 and length >= V1_HEADER_SIZE:
            payload = buf[pos + V1_OVERHEAD:following]
            if crc32(payload) != crc:
                error = RecordBatchError(CORRUPT_MESSAGE, f"0.7 message at {position + pos} fails its CRC check")
                break
            # One record of offset q - 1 in a batch of its own: the part of the header
            # before the attributes, the constant rest, the record.
            size = len(payload)
            prefix = prefixes.get(size)
            if prefix is None:
                prefix = _record_prefix(size)
                if size < _PREFIX_CACHE_SIZES:
                    prefixes[size] = prefix
            record = prefix + payload + b"\x00"  # headers: none
            append(pack_head(position + following - 1, _ONE_RECORD_LENGTH + len(record), -1, MAGIC,
                             crc32c(record, _ONE_RECORD_TAIL_CRC)))
            append(_ONE_RECORD_TAIL)
            append(record)
            pos = following
            continue
        try:
            payloads, _, consumed = decode_messages(buf[pos:following], 0, inflate_limit=max(budget, 0))
        except InvalidMessageError as exc:
            error = RecordBatchError(CORRUPT_MESSAGE, f"0.7 message at {position + pos}: {exc}")
            break
        if consumed != following - pos:  # cannot happen for a whole message; never loop on it
            error = RecordBatchError(CORRUPT_MESSAGE, f"0.7 message at {position + pos} cannot be read")
            break
        count = len(payloads)
        if count > 1:
            budget -= sum(map(len, payloads))
        room = following - pos
        if count > room:
            dropped.append((position + pos, count - room))
            payloads = payloads[count - room:]
            count = room
        if count:
            append(_batch_of(payloads, position + following - count))
        pos = following
    return LegacyConversion(b"".join(parts), pos, error, tuple(dropped))


def _batch_of(payloads, base_offset: int) -> bytes:
    """One uncompressed batch of ``payloads`` as records with offsets base_offset, base_offset + 1, ..."""
    varint = encode_varint
    parts = []
    append = parts.append
    for index, payload in enumerate(payloads):
        value_length = varint(len(payload))
        offset_delta = varint(index)
        append(varint(4 + len(offset_delta) + len(value_length) + len(payload)))
        append(b"\x00\x00")  # attributes, timestampDelta
        append(offset_delta)
        append(b"\x01")  # key null
        append(value_length)
        append(payload)
        append(b"\x00")  # headers
    return pack_batch(b"".join(parts), len(payloads), base_offset=base_offset)
