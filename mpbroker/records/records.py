"""Records as values: reading every record of a run of batches (what a consumer does
with a fetch answer) and encoding a batch from records (what a producer does).

``iter_records`` walks the batches of a buffer, checks each batch's CRC, inflates
compressed ones, skips control batches (transaction markers) and yields a ``Record``
per record; a batch cut off at the end of the buffer (a fetch answer ends wherever its
size limit fell) ends the iteration quietly, anything corrupt raises
``RecordBatchError``. ``encode_batch`` builds one batch, compressed with any of the
five codecs as Kafka's producers write them. Sans-IO; not the broker's hot path (that is
``batch.validate_batches``).
"""

import struct
from typing import NamedTuple

from mpbroker.records.batch import (
    ATTRIBUTES_OFFSET,
    CONTROL_BIT,
    CREATE_TIME,
    DEFAULT_INFLATE_LIMIT,
    HEADER,
    HEADER_SIZE,
    LOG_APPEND_TIME,
    MAGIC,
    MIN_BATCH_LENGTH,
    NO_TIMESTAMP,
    PREFIX_SIZE,
    TIMESTAMP_TYPE_BIT,
    TRANSACTIONAL_BIT,
    decompress_records,
    pack_batch,
)
from mpbroker.records.compression import CODEC_MASK, CODEC_NONE, CODEC_ZSTD, compress
from mpbroker.records.crc import crc32c
from mpbroker.records.errors import CORRUPT_MESSAGE, UNSUPPORTED_COMPRESSION_TYPE, RecordBatchError

_INT32 = struct.Struct(">i")


class Record(NamedTuple):
    offset: int
    timestamp: int  # ms; LogAppendTime batches: the batch's maxTimestamp
    timestamp_type: int  # 0 CreateTime, 1 LogAppendTime
    key: bytes | None
    value: bytes | None
    headers: tuple  # ((key: str, value: bytes | None), ...)


def iter_records(buf, *, inflate_limit: int = DEFAULT_INFLATE_LIMIT):
    """Yield every ``Record`` of the whole batches in ``buf``; see the module docstring."""
    b = buf if type(buf) is bytes else bytes(buf)
    end = len(b)
    pos = 0
    budget = inflate_limit
    while end - pos >= PREFIX_SIZE:
        (length,) = _INT32.unpack_from(b, pos + 8)
        if length < MIN_BATCH_LENGTH:
            raise RecordBatchError(CORRUPT_MESSAGE, f"record batch at {pos} has batchLength {length}")
        following = pos + PREFIX_SIZE + length
        if following > end:
            return  # a torn tail
        (base_offset, _, _, magic, crc, attributes, _, base_ts, max_ts, _, _, _, count) = HEADER.unpack_from(b, pos)
        if magic != MAGIC:
            raise RecordBatchError(CORRUPT_MESSAGE, f"record batch at {pos} has magic {magic}, not 2")
        if crc32c(memoryview(b)[pos + ATTRIBUTES_OFFSET:following]) != crc:
            raise RecordBatchError(CORRUPT_MESSAGE, f"record batch at {pos} fails its CRC check")
        codec = attributes & CODEC_MASK
        if codec > CODEC_ZSTD:
            raise RecordBatchError(UNSUPPORTED_COMPRESSION_TYPE, f"record batch at {pos} names codec {codec}")
        if not attributes & CONTROL_BIT:
            if codec == CODEC_NONE:
                inner, start, stop = b, pos + HEADER_SIZE, following
            else:
                inner = decompress_records(b, pos, following, codec, budget)
                budget -= len(inner)
                start, stop = 0, len(inner)
            log_append = attributes & TIMESTAMP_TYPE_BIT
            yield from _decode(inner, start, stop, count, base_offset, max_ts if log_append else None, base_ts, pos)
        pos = following


def _decode(b, pos, end, count, base_offset, append_time, base_ts, batch):
    timestamp_type = LOG_APPEND_TIME if append_time is not None else CREATE_TIME
    records = []
    try:
        for index in range(count):
            size, pos = _varint(b, pos)
            stop = pos + size
            if size < 6 or stop > end:
                raise RecordBatchError(CORRUPT_MESSAGE, f"record batch at {batch}, record {index}: bad length {size}")
            pos += 1  # attributes
            ts_delta, pos = _varint(b, pos)
            offset_delta, pos = _varint(b, pos)
            key, pos = _nullable_bytes(b, pos, stop)
            value, pos = _nullable_bytes(b, pos, stop)
            header_count, pos = _varint(b, pos)
            if header_count < 0:
                raise RecordBatchError(CORRUPT_MESSAGE, f"record batch at {batch}, record {index}: header count")
            headers = []
            for _ in range(header_count):
                header_key, pos = _nullable_bytes(b, pos, stop)
                if header_key is None:
                    raise RecordBatchError(CORRUPT_MESSAGE, f"record batch at {batch}, record {index}: null header key")
                header_value, pos = _nullable_bytes(b, pos, stop)
                headers.append((header_key.decode("utf-8", "replace"), header_value))
            if pos != stop:
                raise RecordBatchError(
                    CORRUPT_MESSAGE, f"record batch at {batch}, record {index}: fields disagree with its length"
                )
            records.append(Record(
                base_offset + offset_delta, append_time if append_time is not None else base_ts + ts_delta,
                timestamp_type, key, value, tuple(headers),
            ))
    except IndexError:
        raise RecordBatchError(CORRUPT_MESSAGE, f"record batch at {batch}: records run past its end") from None
    if pos != end:
        raise RecordBatchError(CORRUPT_MESSAGE, f"record batch at {batch} has {end - pos} bytes after its records")
    return records


def _varint(b, pos):
    """A zigzag varint (up to 10 bytes, as varlongs): (value, position after it)."""
    byte = b[pos]
    if byte < 0x80:
        return (byte >> 1) ^ -(byte & 1), pos + 1
    value = byte & 0x7F
    shift = 7
    for i in range(pos + 1, pos + 10):
        byte = b[i]
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return (value >> 1) ^ -(value & 1), i + 1
        shift += 7
    raise RecordBatchError(CORRUPT_MESSAGE, f"varint at {pos} is too long")


def _nullable_bytes(b, pos, stop):
    size, pos = _varint(b, pos)
    if size < 0:
        if size != -1:
            raise RecordBatchError(CORRUPT_MESSAGE, f"length {size} at {pos}")
        return None, pos
    following = pos + size
    if following > stop:
        raise RecordBatchError(CORRUPT_MESSAGE, f"{size} bytes at {pos} run past their record")
    return bytes(b[pos:following]), following


_SMALL = [bytes([v]) for v in range(128)]


def encode_varint(n: int) -> bytes:
    """``n`` (int32 or int64) as a zigzag varint."""
    v = (n << 1) ^ (n >> 63)
    if v < 0x80:
        return _SMALL[v]
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def encode_records(records) -> tuple[bytes, int, int, int]:
    """The uncompressed records region for ``(key, value, headers, timestamp_ms)`` tuples,
    with offset deltas 0..n-1: (region, count, base timestamp, max timestamp)."""
    varint = encode_varint
    parts = []
    append = parts.append
    base_ts = max_ts = None
    count = 0
    for key, value, headers, timestamp in records:
        if timestamp is None:
            timestamp = NO_TIMESTAMP
        if base_ts is None:
            base_ts = max_ts = timestamp
        elif timestamp > max_ts:
            max_ts = timestamp
        fields = [b"\x00", varint(timestamp - base_ts), varint(count)]
        if key is None:
            fields.append(b"\x01")
        else:
            fields += (varint(len(key)), bytes(key))
        if value is None:
            fields.append(b"\x01")
        else:
            fields += (varint(len(value)), bytes(value))
        headers = headers or ()
        fields.append(varint(len(headers)))
        for header_key, header_value in headers:
            raw = header_key.encode("utf-8") if isinstance(header_key, str) else bytes(header_key)
            fields += (varint(len(raw)), raw)
            if header_value is None:
                fields.append(b"\x01")
            else:
                fields += (varint(len(header_value)), bytes(header_value))
        body = b"".join(fields)
        append(varint(len(body)))
        append(body)
        count += 1
    if not count:
        raise ValueError("a record batch holds at least one record")
    return b"".join(parts), count, base_ts, max_ts


def encode_batch(
    records,
    *,
    base_offset: int = 0,
    codec: int = CODEC_NONE,
    timestamp_type: int = CREATE_TIME,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    transactional: bool = False,
    partition_leader_epoch: int = -1,
) -> bytes:
    """One batch of ``records``, ``(key, value, headers, timestamp_ms)`` tuples (headers a
    sequence of ``(str, bytes | None)``; a timestamp of None is -1, no timestamp).
    baseTimestamp is the first record's, maxTimestamp the largest; the records are
    compressed with ``codec`` whatever that saves (Kafka's producers do the same)."""
    if not 0 <= codec <= CODEC_ZSTD:
        raise ValueError(f"unknown codec {codec}")
    region, count, base_ts, max_ts = encode_records(records)
    if codec != CODEC_NONE:
        region = compress(codec, region)
    attributes = codec | (TIMESTAMP_TYPE_BIT if timestamp_type == LOG_APPEND_TIME else 0)
    if transactional:
        attributes |= TRANSACTIONAL_BIT
    return pack_batch(
        region, count, base_offset=base_offset, partition_leader_epoch=partition_leader_epoch,
        attributes=attributes, base_timestamp=base_ts, max_timestamp=max_ts, producer_id=producer_id,
        producer_epoch=producer_epoch, base_sequence=base_sequence,
    )
