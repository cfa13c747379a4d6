"""A 0.7 fetch answer of modern record batches (error code RECORD_BATCHES, 13): the
records in it, as a consumer hands them out.

A partition that modern producers wrote holds record batches (magic 2), and its offsets
are byte positions too: a batch stored at bytes [p, q) with n records holds offsets
q-n .. q-1 (its baseOffset is q-n, its lastOffsetDelta n-1), and a reader goes on at
q. The broker answers a fetch at an offset inside a batch from that batch's start, so
the answer says itself where it starts: ``baseOffset + lastOffsetDelta + 1`` of its
first batch is that batch's end q, and q minus the batch's size is p. The records
below the fetch offset are skipped (they were handed out before). Each record's next
offset is its own offset + 1; after a batch's last record that is q.

Each whole batch is checked (its header against its position, CRC-32C, the records
inside, through ``mpbroker.records.iter_records``); a batch cut off at the end of the
answer (its size limit fell inside it) is left for the next fetch, as a 0.7 answer's
cut-off message is. Sans-IO.
"""

import struct
from typing import NamedTuple

from mpbroker.records import RecordBatchError, iter_records, read_header
from mpbroker.records.errors import CORRUPT_MESSAGE

PREFIX_SIZE = 12  # baseOffset + batchLength: the bytes batchLength does not count
HEADER_SIZE = 61
_LENGTH = struct.Struct(">i")


class DecodedBatches(NamedTuple):
    start: int  # the log offset of the answer's first byte
    offsets: list  # each record's offset
    next_offsets: list  # where a reader goes on after each record
    values: list  # bytes (b"" for a null value)
    keys: list  # bytes or None
    headers: list  # ((str, bytes | None), ...) per record
    timestamps: list  # ms, -1 for none
    valid_bytes: int  # bytes of whole, checked batches from ``start``
    error: str | None  # what is wrong with the batch at ``start + valid_bytes``, if anything
    first_size: int | None  # no whole batch: the size of the first one (None if not even its prefix came)


def first_batch_start(data, offset: int) -> int | None:
    """Where the batch at the head of ``data`` (an answer to a fetch at ``offset``)
    starts in the log, or None if its header does not describe a batch holding
    ``offset`` (or is not all there)."""
    if len(data) < HEADER_SIZE:
        return None
    header = read_header(data, 0)
    if header.magic != 2 or header.batch_length < HEADER_SIZE - PREFIX_SIZE or header.last_offset_delta < 0:
        return None
    end = header.base_offset + header.last_offset_delta + 1
    start = end - PREFIX_SIZE - header.batch_length
    return start if start <= offset < end else None


def decode_batches(data: bytes, offset: int) -> DecodedBatches:
    """The records of ``data``, the answer to a 0.7 fetch at ``offset`` that came with
    RECORD_BATCHES (see the module docstring)."""
    offsets, next_offsets, values, keys, headers, timestamps = [], [], [], [], [], []
    size = len(data)
    first_size = None
    if size >= PREFIX_SIZE:
        first_size = PREFIX_SIZE + _LENGTH.unpack_from(data, 8)[0]
    if size >= PREFIX_SIZE and first_size <= size:
        start = first_batch_start(data, offset)
        if start is None:
            return DecodedBatches(offset, offsets, next_offsets, values, keys, headers, timestamps, 0,
                                  f"the bytes at offset {offset} are not the start of a record batch holding it",
                                  first_size)
    else:
        start = offset  # not one whole batch: nothing to check yet
    position = 0
    error = None
    while size - position >= PREFIX_SIZE:
        (length,) = _LENGTH.unpack_from(data, position + 8)
        following = position + PREFIX_SIZE + length
        if length >= HEADER_SIZE - PREFIX_SIZE and following > size:
            break  # cut off by the answer's size: the next fetch starts here
        try:
            if length < HEADER_SIZE - PREFIX_SIZE:
                raise RecordBatchError(CORRUPT_MESSAGE, f"batchLength {length}")
            header = read_header(data, position)
            if header.magic != 2:
                raise RecordBatchError(CORRUPT_MESSAGE, f"magic {header.magic}, not 2")
            last = header.base_offset + header.last_offset_delta
            if last + 1 != start + following:
                raise RecordBatchError(CORRUPT_MESSAGE, f"its offsets {header.base_offset}..{last} do not end where "
                                                        f"it ends ({start + following})")
            records = list(iter_records(data[position:following]))
        except RecordBatchError as exc:
            error = f"the record batch at offset {start + position} is damaged: {exc}"
            break
        kept = len(offsets)
        for record in records:
            if record.offset < offset:
                continue  # before the fetch offset: handed out before
            offsets.append(record.offset)
            next_offsets.append(record.offset + 1)
            values.append(b"" if record.value is None else record.value)
            keys.append(record.key)
            headers.append(record.headers)
            timestamps.append(record.timestamp)
        if len(offsets) > kept:
            next_offsets[-1] = start + following  # after a batch's last record: q (its offset + 1 by construction)
        position = following
    return DecodedBatches(start, offsets, next_offsets, values, keys, headers, timestamps, position, error,
                          first_size if position == 0 else None)
