"""Record batches (magic 2): the header, validation of a produce's batches, and the
broker's in-place stamp.

Layout (61-byte header, big-endian; ``batchLength`` counts the bytes after itself)::

    baseOffset int64 | batchLength int32 | partitionLeaderEpoch int32 | magic int8 = 2
    | crc uint32 (CRC-32C from attributes to the end) | attributes int16 | lastOffsetDelta int32
    | baseTimestamp int64 | maxTimestamp int64 | producerId int64 | producerEpoch int16
    | baseSequence int32 | records int32 | records (one compressed stream when compressed)

and each record ``varint length | int8 attributes | varlong timestampDelta | varint
offsetDelta | varint keyLength (-1 null) + key | varint valueLength + value | varint
headers | (varint keyLength + key, varint valueLength (-1 null) + value) ...`` (zigzag
varints).

``validate_batches`` checks a produce's records field (whole batches only) the way
Kafka's LogValidator does for a client, and raises ``RecordBatchError`` with the code to
answer: CORRUPT_MESSAGE for what cannot be parsed (short or torn data, lengths, CRC,
varints, records that disagree with the count or overrun their batch, a bomb past
``inflate_limit``) and for a magic other than 2 (Kafka 4 answers some old magics with
UNSUPPORTED_VERSION; an old-magic batch inside a modern produce is corrupt data here),
MESSAGE_TOO_LARGE for a batch over ``max_batch_bytes`` (its whole size, the 12-byte
prefix included, as Kafka's ``max.message.bytes``), UNSUPPORTED_COMPRESSION_TYPE for
codec bits 5-7, INVALID_RECORD for what parses but Kafka refuses from a client: record
offset deltas other than 0..n-1, a records count that is not ``lastOffsetDelta + 1`` (or
not positive: LogValidator's "Inconsistent batch offset range" is an
InvalidRecordException), a control batch, a producer id with a negative base sequence.

The walk over the records of an uncompressed batch is the hot path (a compressed batch
is inflated, then walked the same way): ``_walk``, one loop over a ``bytes`` object with
the one- and two-byte varints decoded inline and every field skipped, not copied. It
also exists in C, ``_recordscan.walk`` (mpbroker/records/_recordscan.c, built when the
install finds a compiler), which makes the same checks but only says valid or not: on
"not", ``_walk`` runs over the same records for the exact error, so the answers are the
Python ones by construction (tests/records/test_recordscan.py compares them). Without
the extension, or with ``MPBROKER_PURE_PYTHON=1``, ``_walk`` runs alone. Measured
(``python -m bench.recordscan_bench``: ``validate_batches`` of one uncompressed batch of
1000 records with 200-byte values, no key or headers, best of 7, on this project's
2-core AMD EPYC VM): ~600 ns per record with the Python walk, ~14.6 ns with the C one
(~6 ns of it the walk, the rest mostly the batch's CRC-32C, ~9 us for its 211 KB); a
one-record batch ~1.5 us all in (2.1 us with the Python walk). ``deep=False`` is the
per-batch part only. The storage layer needs ``records <= length`` of every batch it stores (offsets
from byte positions: ``BatchInfo.offsets_fit``); an uncompressed batch always has it.

``stamp_batch`` writes what the broker assigns (the base offset, the leader epoch, and
LogAppendTime) into a validated batch in place, recomputing the CRC only when the
attributes or maxTimestamp change (the base offset and leader epoch are outside it).
Sans-IO.
"""

import struct
from typing import NamedTuple

from mpbroker.codec.message import PURE_PYTHON
from mpbroker.records.compression import CODEC_MASK, CODEC_NONE, CODEC_ZSTD, decompress
from mpbroker.records.crc import crc32c
from mpbroker.records.errors import (
    CORRUPT_MESSAGE,
    INVALID_RECORD,
    MESSAGE_TOO_LARGE,
    UNSUPPORTED_COMPRESSION_TYPE,
    RecordBatchError,
)

MAGIC = 2
HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE = HEADER.size  # 61
PREFIX_SIZE = 12  # baseOffset + batchLength: the bytes batchLength does not count
MIN_BATCH_LENGTH = HEADER_SIZE - PREFIX_SIZE  # a batchLength below this cannot hold a header
LEADER_EPOCH_OFFSET = 12
MAGIC_OFFSET = 16
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21  # the CRC covers from here to the end
MAX_TIMESTAMP_OFFSET = 35
MIN_RECORD_SIZE = 7  # varint length (1) + a 6-byte body: attributes, deltas, null key, empty value, no headers

TIMESTAMP_TYPE_BIT = 0x08  # 1 = LogAppendTime
TRANSACTIONAL_BIT = 0x10
CONTROL_BIT = 0x20
CREATE_TIME = 0
LOG_APPEND_TIME = 1
NO_TIMESTAMP = -1

DEFAULT_MAX_BATCH_BYTES = 1_048_588  # Kafka's message.max.bytes default
DEFAULT_INFLATE_LIMIT = 104_857_600  # bytes all compressed batches of a request may inflate to

_INT64 = struct.Struct(">q")
_INT32 = struct.Struct(">i")
_UINT32 = struct.Struct(">I")
_INT16 = struct.Struct(">h")

try:
    from mpbroker.records._recordscan import walk as _recordscan_walk
except ImportError:  # built without a compiler
    _recordscan_walk = None
# The C walk (None: the Python one alone). Says only valid or not; on "not", _walk is
# run for the exact error. MPBROKER_PURE_PYTHON=1 turns it off, as the codec's _fastscan.
_c_walk = None if PURE_PYTHON else _recordscan_walk


class BatchHeader(NamedTuple):
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records: int


class BatchInfo(NamedTuple):
    """One validated batch of a produce's records field."""

    start: int  # position of its baseOffset in the buffer
    length: int  # its bytes, the 12-byte prefix included
    records: int
    codec: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    partition_leader_epoch: int
    transactional: bool
    control: bool

    @property
    def end(self) -> int:
        return self.start + self.length

    @property
    def offsets_fit(self) -> bool:
        """Whether its records can take offsets from its byte positions (records <= bytes);
        if not, the broker stores ``reencode_uncompressed`` of it instead."""
        return self.records <= self.length


def read_header(buf, pos: int = 0) -> BatchHeader:
    """The 61-byte header at ``pos`` (not checked); CORRUPT_MESSAGE if fewer bytes are left."""
    try:
        return BatchHeader(*HEADER.unpack_from(buf, pos))
    except struct.error:
        raise RecordBatchError(
            CORRUPT_MESSAGE, f"{len(buf) - pos} bytes at {pos} are too few for a record batch header"
        ) from None


def validate_batches(
    buf,
    *,
    max_batch_bytes: int = DEFAULT_MAX_BATCH_BYTES,
    inflate_limit: int = DEFAULT_INFLATE_LIMIT,
    deep: bool = True,
) -> list[BatchInfo]:
    """Check every batch of ``buf`` (one or more whole batches; none gives ``[]``).

    Raises RecordBatchError for the first bad batch (see the module docstring for the
    codes). ``inflate_limit`` bounds what all compressed batches of ``buf`` inflate to,
    together. ``deep=False`` skips the walk over the records (header, lengths and CRC
    only)."""
    if type(buf) is not bytes:
        buf = bytes(buf)  # indexing bytes is the fastest; one copy, negligible beside the walk
    end = len(buf)
    pos = 0
    budget = inflate_limit
    batches = []
    append = batches.append
    unpack = HEADER.unpack_from
    view = memoryview(buf)
    while pos < end:
        if end - pos < HEADER_SIZE:
            raise _short(buf, pos, end, max_batch_bytes)
        (_, length, epoch, magic, crc, attributes, last_delta, base_ts, max_ts, producer_id, producer_epoch,
         base_sequence, count) = unpack(buf, pos)
        if length < MIN_BATCH_LENGTH:
            raise RecordBatchError(CORRUPT_MESSAGE, f"record batch at {pos} has batchLength {length}")
        size = PREFIX_SIZE + length
        if size > max_batch_bytes:
            raise RecordBatchError(
                MESSAGE_TOO_LARGE, f"record batch at {pos} is {size} bytes; the limit is {max_batch_bytes}"
            )
        following = pos + size
        if following > end:
            raise RecordBatchError(
                CORRUPT_MESSAGE, f"record batch at {pos} ({size} bytes) runs past the end of the data ({end} bytes)"
            )
        if magic != MAGIC:
            raise RecordBatchError(CORRUPT_MESSAGE, f"record batch at {pos} has magic {magic}, not 2")
        if crc32c(view[pos + ATTRIBUTES_OFFSET:following]) != crc:
            raise RecordBatchError(CORRUPT_MESSAGE, f"record batch at {pos} fails its CRC check")
        codec = attributes & CODEC_MASK
        if codec > CODEC_ZSTD:
            raise RecordBatchError(UNSUPPORTED_COMPRESSION_TYPE, f"record batch at {pos} names codec {codec}")
        if count <= 0 or last_delta != count - 1:
            raise RecordBatchError(
                INVALID_RECORD,
                f"record batch at {pos} has {count} records and lastOffsetDelta {last_delta}",
            )
        if attributes & CONTROL_BIT:  # (never set below: BatchInfo.control is False for a client's batch)
            raise RecordBatchError(INVALID_RECORD, f"record batch at {pos} is a control batch; clients may not write one")
        if producer_id >= 0 and base_sequence < 0:
            raise RecordBatchError(
                INVALID_RECORD, f"record batch at {pos} has producer id {producer_id} and base sequence {base_sequence}"
            )
        if deep:
            c_walk = _c_walk
            if codec == CODEC_NONE:
                if c_walk is None or c_walk(buf, pos + HEADER_SIZE, following, count) is not None:
                    _walk(buf, pos + HEADER_SIZE, following, count, pos)
            else:
                inner = decompress_records(buf, pos, following, codec, budget)
                budget -= len(inner)
                if c_walk is None or c_walk(inner, 0, len(inner), count) is not None:
                    _walk(inner, 0, len(inner), count, pos)
        append(BatchInfo(
            pos, size, count, codec, attributes, last_delta, base_ts, max_ts, producer_id, producer_epoch,
            base_sequence, epoch, bool(attributes & TRANSACTIONAL_BIT), False,
        ))
        pos = following
    return batches


def _short(buf, pos: int, end: int, max_batch_bytes: int) -> RecordBatchError:
    """Why the fewer than 61 bytes at ``pos`` are not a batch (the checks above, in their order)."""
    if end - pos < PREFIX_SIZE:
        return RecordBatchError(CORRUPT_MESSAGE, f"{end - pos} bytes at {pos} are too few for a record batch")
    (length,) = _INT32.unpack_from(buf, pos + 8)
    if length < MIN_BATCH_LENGTH:
        return RecordBatchError(CORRUPT_MESSAGE, f"record batch at {pos} has batchLength {length}")
    if PREFIX_SIZE + length > max_batch_bytes:
        return RecordBatchError(
            MESSAGE_TOO_LARGE, f"record batch at {pos} is {PREFIX_SIZE + length} bytes; the limit is {max_batch_bytes}"
        )
    return RecordBatchError(CORRUPT_MESSAGE, f"record batch at {pos} runs past the end of the data ({end} bytes)")


def decompress_records(buf, pos: int, following: int, codec: int, limit: int) -> bytes:
    """The records region of the compressed batch at ``buf[pos:following]``, inflated."""
    try:
        return decompress(codec, memoryview(buf)[pos + HEADER_SIZE:following], limit)
    except RecordBatchError as exc:
        raise RecordBatchError(exc.code, f"record batch at {pos}: {exc.message}") from None


def _corrupt(batch: int, index: int, what: str) -> RecordBatchError:
    return RecordBatchError(CORRUPT_MESSAGE, f"record batch at {batch}, record {index}: {what}")


def _uvarint(b, pos: int, max_bytes: int, batch: int, index: int):
    """An unsigned (still zigzagged) varint of at most ``max_bytes`` bytes: (value, position after it)."""
    value = 0
    shift = 0
    for i in range(pos, pos + max_bytes):
        byte = b[i]
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            if value >> (64 if max_bytes == 10 else 32):
                break  # wider than int64 / int32
            return value, i + 1
        shift += 7
    raise _corrupt(batch, index, "a varint is too long")


def _walk(b, pos: int, end: int, count: int, batch: int) -> None:
    """Check that ``b[pos:end]`` is exactly ``count`` well-formed records with offset
    deltas 0..count-1, copying nothing. Varints are kept zigzagged: ``v & 1`` is the
    sign, ``v >> 1`` the size of a non-negative one, and -1 (null) is 1."""
    if count > (end - pos) // MIN_RECORD_SIZE:
        raise RecordBatchError(
            CORRUPT_MESSAGE, f"record batch at {batch} claims {count} records in {end - pos} bytes"
        )
    uvarint = _uvarint
    i = 0
    expected = 0  # the zigzagged offset delta of record i: 2 * i
    try:
        while i < count:
            v = b[pos]  # length
            if v < 0x80:
                pos += 1
            else:
                w = b[pos + 1]
                if w < 0x80:
                    v = (v & 0x7F) | w << 7
                    pos += 2
                else:
                    v, pos = uvarint(b, pos, 5, batch, i)
            if v & 1 or v < 12:  # negative, or below the 6-byte minimum body
                raise _corrupt(batch, i, f"length {(v >> 1) ^ -(v & 1)}")
            stop = pos + (v >> 1)
            if stop > end:
                raise _corrupt(batch, i, "runs past the end of the batch")
            # attributes (unused by Kafka), then timestampDelta: any varlong
            if b[pos + 1] < 0x80:
                pos += 2
            elif b[pos + 2] < 0x80:
                pos += 3
            else:
                pos = uvarint(b, pos + 1, 10, batch, i)[1]
            v = b[pos]  # offsetDelta
            if v < 0x80:
                pos += 1
            else:
                w = b[pos + 1]
                if w < 0x80:
                    v = (v & 0x7F) | w << 7
                    pos += 2
                else:
                    v, pos = uvarint(b, pos, 5, batch, i)
            if v != expected:
                raise RecordBatchError(
                    INVALID_RECORD,
                    f"record batch at {batch}, record {i} has offset delta {(v >> 1) ^ -(v & 1)}, not {i}",
                )
            v = b[pos]  # keyLength
            if v == 1:  # null
                pos += 1
            else:
                if v < 0x80:
                    pos += 1
                else:
                    v, pos = uvarint(b, pos, 5, batch, i)
                if v & 1:
                    raise _corrupt(batch, i, f"key length {(v >> 1) ^ -1}")
                pos += v >> 1
            v = b[pos]  # valueLength
            if v < 0x80:
                pos += 1
            else:
                w = b[pos + 1]
                if w < 0x80:
                    v = (v & 0x7F) | w << 7
                    pos += 2
                else:
                    v, pos = uvarint(b, pos, 5, batch, i)
            if v & 1:
                if v != 1:
                    raise _corrupt(batch, i, f"value length {(v >> 1) ^ -1}")
            else:
                pos += v >> 1
            if b[pos]:  # headers
                pos = _walk_headers(b, pos, stop, batch, i)
            else:
                pos += 1
            if pos != stop:
                raise _corrupt(batch, i, f"fields end {pos - stop:+d} bytes from its length")
            i += 1
            expected += 2
    except IndexError:
        raise _corrupt(batch, i, "runs past the end of the batch") from None
    if pos != end:
        raise RecordBatchError(
            CORRUPT_MESSAGE, f"record batch at {batch} has {end - pos} bytes after its {count} records"
        )


def _walk_headers(b, pos: int, stop: int, batch: int, index: int) -> int:
    count, pos = _uvarint(b, pos, 5, batch, index)
    if count & 1:
        raise _corrupt(batch, index, f"header count {(count >> 1) ^ -1}")
    for _ in range(count >> 1):
        if pos >= stop:
            raise _corrupt(batch, index, "headers run past the record")
        v, pos = _uvarint(b, pos, 5, batch, index)  # key: a string, never null
        if v & 1:
            raise _corrupt(batch, index, f"header key length {(v >> 1) ^ -1}")
        pos += v >> 1
        v, pos = _uvarint(b, pos, 5, batch, index)
        if v & 1:
            if v != 1:
                raise _corrupt(batch, index, f"header value length {(v >> 1) ^ -1}")
        else:
            pos += v >> 1
    return pos


def stamp_batch(
    buf: bytearray,
    start: int,
    base_offset: int,
    *,
    log_append_time_ms: int | None = None,
    leader_epoch: int | None = None,
) -> None:
    """Write the broker's fields into the (validated) batch at ``buf[start:]``, in place.

    ``base_offset`` and ``leader_epoch`` (partitionLeaderEpoch) are outside the CRC. With
    ``log_append_time_ms`` the batch becomes LogAppendTime: the timestamp-type bit set,
    maxTimestamp the append time (baseTimestamp left as the producer wrote it, as Kafka
    does), and the CRC recomputed. ``buf`` is any writable buffer (a bytearray, a
    memoryview of one)."""
    if buf[start + MAGIC_OFFSET] != MAGIC:
        raise RecordBatchError(CORRUPT_MESSAGE, f"record batch at {start} has magic {buf[start + MAGIC_OFFSET]}, not 2")
    _INT64.pack_into(buf, start, base_offset)
    if leader_epoch is not None:
        _INT32.pack_into(buf, start + LEADER_EPOCH_OFFSET, leader_epoch)
    if log_append_time_ms is not None:
        (length,) = _INT32.unpack_from(buf, start + 8)
        (attributes,) = _INT16.unpack_from(buf, start + ATTRIBUTES_OFFSET)
        _INT16.pack_into(buf, start + ATTRIBUTES_OFFSET, attributes | TIMESTAMP_TYPE_BIT)
        _INT64.pack_into(buf, start + MAX_TIMESTAMP_OFFSET, log_append_time_ms)
        crc = crc32c(memoryview(buf)[start + ATTRIBUTES_OFFSET:start + PREFIX_SIZE + length])
        _UINT32.pack_into(buf, start + CRC_OFFSET, crc)


def pack_batch(
    records_region,
    count: int,
    *,
    base_offset: int = 0,
    partition_leader_epoch: int = -1,
    attributes: int = 0,
    base_timestamp: int = NO_TIMESTAMP,
    max_timestamp: int = NO_TIMESTAMP,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
) -> bytes:
    """A whole batch: the header (lastOffsetDelta ``count - 1``, the CRC) before
    ``records_region`` (already compressed when ``attributes`` names a codec)."""
    header = bytearray(HEADER.pack(
        base_offset, MIN_BATCH_LENGTH + len(records_region), partition_leader_epoch, MAGIC, 0, attributes,
        count - 1, base_timestamp, max_timestamp, producer_id, producer_epoch, base_sequence, count,
    ))
    crc = crc32c(records_region, crc32c(memoryview(header)[ATTRIBUTES_OFFSET:]))
    _UINT32.pack_into(header, CRC_OFFSET, crc)
    return bytes(header) + records_region if type(records_region) is bytes else bytes(header + records_region)


def reencode_uncompressed(batch_bytes, *, inflate_limit: int = DEFAULT_INFLATE_LIMIT) -> bytes:
    """The batch ``batch_bytes`` (exactly one) with its records uncompressed: the same
    base offset, leader epoch, timestamps, producer fields and flags, the records byte
    for byte as they were inside the compressed stream (their offset deltas checked to be
    0..n-1). What the broker stores for a compressed batch with more records than bytes."""
    buf = bytes(batch_bytes)
    header = read_header(buf, 0)
    size = PREFIX_SIZE + header.batch_length
    if header.batch_length < MIN_BATCH_LENGTH or size != len(buf):
        raise RecordBatchError(CORRUPT_MESSAGE, f"{len(buf)} bytes are not one record batch of {size} bytes")
    if header.magic != MAGIC:
        raise RecordBatchError(CORRUPT_MESSAGE, f"record batch has magic {header.magic}, not 2")
    if crc32c(memoryview(buf)[ATTRIBUTES_OFFSET:]) != header.crc:
        raise RecordBatchError(CORRUPT_MESSAGE, "record batch fails its CRC check")
    codec = header.attributes & CODEC_MASK
    if codec > CODEC_ZSTD:
        raise RecordBatchError(UNSUPPORTED_COMPRESSION_TYPE, f"record batch names codec {codec}")
    count = header.records
    if codec == CODEC_NONE:
        inner = buf[HEADER_SIZE:]
    else:
        inner = decompress_records(buf, 0, size, codec, inflate_limit)
    if _c_walk is None or _c_walk(inner, 0, len(inner), count) is not None:
        _walk(inner, 0, len(inner), count, 0)
    return pack_batch(
        inner, count, base_offset=header.base_offset, partition_leader_epoch=header.partition_leader_epoch,
        attributes=header.attributes & ~CODEC_MASK, base_timestamp=header.base_timestamp,
        max_timestamp=header.max_timestamp, producer_id=header.producer_id, producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence,
    )
