"""The Fetch answer (versions 4-11), encoded by hand around the records it sends.

The records of a partition are not copied into the answer: they are a part of their
own (a ``FileRange`` sent with ``os.sendfile``, or bytes converted from 0.7
messages), and this module writes the bytes around them. Layout per version:
``throttle_time_ms``; from v7 ``error_code`` and ``session_id``; per topic its name
and per partition ``partition_index``, ``error_code``, ``high_watermark``,
``last_stable_offset`` (= the high watermark: no transactions), from v5
``log_start_offset``, an empty ``aborted_transactions``, from v11
``preferred_read_replica`` (-1), then ``records`` as nullable bytes."""

import struct
from typing import Any, NamedTuple

_INT32 = struct.Struct(">i")
_HEAD_V7 = struct.Struct(">ihi")  # throttle time, error, session id
_PARTITION_V4 = struct.Struct(">ihqqi")  # index, error, high watermark, last stable offset, aborted count (0)
_PARTITION_V5 = struct.Struct(">ihqqqi")  # ... log start offset before the aborted count
_NO_PREFERRED_REPLICA = struct.Struct(">i").pack(-1)
_STRING_LENGTH = struct.Struct(">h")


class PartitionData(NamedTuple):
    partition: int
    error: int
    high_watermark: int
    log_start: int
    records: Any  # None, bytes, or a FileRange-like part with ``length``
    records_bytes: int


def encode_fetch_response(version: int, topics, *, throttle_ms: int = 0, error: int = 0,
                          session_id: int = 0) -> tuple:
    """``(parts, size)``: the answer's body as parts to send in order (bytes, and the
    records parts as they were given) and its size in bytes. ``topics`` is a list of
    ``(name, [PartitionData])``."""
    head = bytearray(_HEAD_V7.pack(throttle_ms, error, session_id) if version >= 7 else _INT32.pack(throttle_ms))
    head += _INT32.pack(len(topics))
    parts = []
    size = 0
    current = head
    for name, partitions in topics:
        encoded = name.encode("utf-8")
        current += _STRING_LENGTH.pack(len(encoded))
        current += encoded
        current += _INT32.pack(len(partitions))
        for data in partitions:
            if version >= 5:
                current += _PARTITION_V5.pack(data.partition, data.error, data.high_watermark, data.high_watermark,
                                              data.log_start, 0)
            else:
                current += _PARTITION_V4.pack(data.partition, data.error, data.high_watermark, data.high_watermark, 0)
            if version >= 11:
                current += _NO_PREFERRED_REPLICA
            if data.records is None:
                current += _INT32.pack(0)
                continue
            current += _INT32.pack(data.records_bytes)
            parts.append(bytes(current))
            size += len(current)
            parts.append(data.records)
            size += data.records_bytes
            current = bytearray()
    if current:
        parts.append(bytes(current))
        size += len(current)
    return parts, size
