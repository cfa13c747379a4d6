"""The valid prefix of a run of stored record batches: what recovery keeps of a
record-batch log after a crash (``segments.record_format``), and what a follower
appends of the bytes its leader sent (``workers.replica_fetcher``).

Shallow, as for 0.7 messages: each batch's length must fit, its magic be 2 and its
CRC-32C match; the records inside are not walked (the CRC covers them, compressed or
not, and they were walked when the batch was produced). The first batch that fails
ends the valid prefix: a torn tail after a power cut, or the end of a fetch answer.

``scan_batches`` says why it ended, as ``validate_message_set`` does for 0.7 messages:
``truncated`` when the bytes end inside a batch whose start is plausible (fewer than
the 12 bytes that hold the length, or a length past the end with magic 2, or with the
magic not there yet: a torn write, or a batch larger than the fetch asked for), else
``error`` names the bad bytes (a length below a header's, another magic, a CRC that
does not match). It also counts the records of the
valid prefix from the batch headers (the records count, an int32 at byte 57)."""

import struct
from typing import NamedTuple

from mpbroker.records.batch import (
    ATTRIBUTES_OFFSET,
    CRC_OFFSET,
    HEADER_SIZE,
    MAGIC,
    MAGIC_OFFSET,
    MIN_BATCH_LENGTH,
    PREFIX_SIZE,
)
from mpbroker.records.crc import crc32c

_LENGTH = struct.Struct(">i")
_CRC = struct.Struct(">I")
RECORDS_COUNT_OFFSET = HEADER_SIZE - 4  # 57: the header's last field


class BatchScan(NamedTuple):
    valid_bytes: int  # length of the leading run of whole, CRC-valid batches
    batches: int  # batches in that run
    records: int  # records in that run, as their headers count them
    truncated: bool  # the walk stopped at bytes that end inside a batch
    error: str | None  # why the walk stopped before the end at bad bytes (None: at the end, or truncated)


def scan_batches(buffer) -> BatchScan:
    """The leading whole, CRC-valid batches of ``buffer`` and why the walk stopped."""
    view = memoryview(buffer)
    end = len(view)
    position = 0
    batches = records = 0
    while position < end:
        if end - position < PREFIX_SIZE:
            return BatchScan(position, batches, records, True, None)
        (length,) = _LENGTH.unpack_from(view, position + 8)
        if length < MIN_BATCH_LENGTH:
            return BatchScan(position, batches, records, False,
                             f"record batch at {position} has length {length}, below a header's")
        if end - position > MAGIC_OFFSET and view[position + MAGIC_OFFSET] != MAGIC:  # before the length: a
            return BatchScan(position, batches, records, False,  # 0.7 message's payload is no length
                             f"record batch at {position} has magic {view[position + MAGIC_OFFSET]}, not 2")
        following = position + PREFIX_SIZE + length
        if following > end:
            return BatchScan(position, batches, records, True, None)
        if crc32c(view[position + ATTRIBUTES_OFFSET:following]) != _CRC.unpack_from(view, position + CRC_OFFSET)[0]:
            return BatchScan(position, batches, records, False, f"record batch at {position} fails its CRC-32C check")
        records += _LENGTH.unpack_from(view, position + RECORDS_COUNT_OFFSET)[0]
        batches += 1
        position = following
    return BatchScan(position, batches, records, False, None)


def valid_batches_prefix(buffer) -> int:
    """How many leading bytes of ``buffer`` are whole, CRC-valid record batches."""
    return scan_batches(buffer).valid_bytes
