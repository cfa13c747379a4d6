"""The modern reads of a partition log: where a fetch at a modern offset starts, and
what it sends.

Offsets come from byte positions (ARCHITECTURE.md, "Modern offsets"): a record batch
stored at bytes [p, q) with n records holds offsets q-n .. q-1, so a consumer goes on
at q, the next batch's position, and a 0.7 message at [p, q) is the record q-1.

A log of record batches is sent as it is on disk, a ``FileRange`` for ``os.sendfile``.
A fetch offset is usually where a batch starts: the header there proves it (its
baseOffset plus its lastOffsetDelta + 1 is the batch's end, a coincidence no bytes
inside a batch make by chance). Otherwise (a consumer that committed inside a batch)
the batch holding it is found by walking the headers from the nearest start known
before it (the segment's base, or a start an earlier walk remembered), and the
answer starts there: clients skip the records below their offset, as with Kafka.

A 0.7 log is converted: the messages from the fetch position are read and made into
record batches (``records.legacy``), so a modern consumer reads 0.7 data with the
payload as the value and no key. Whole first batch: when the first batch of an
answer is larger than the limits, it is sent whole (KIP-74), so a consumer never
stalls on a batch larger than its fetch size.
"""

import bisect
import logging
import os
import struct
from typing import Any, NamedTuple

from mpbroker.codec.errors import MPBrokerError
from mpbroker.ipc.partition_table import Role, TornEntryError
from mpbroker.kafka_protocol.errors import KafkaError
from mpbroker.records.batch import RecordBatchError
from mpbroker.records.legacy import legacy_to_batches
from mpbroker.records.records import iter_records
from mpbroker.segments.log_view import FileRange

log = logging.getLogger(__name__)

_BATCH_PREFIX = struct.Struct(">qi")  # baseOffset, batchLength
_LAST_OFFSET_DELTA = struct.Struct(">i")
BATCH_HEADER_BYTES = 61
_LAST_OFFSET_DELTA_AT = 23
_MAGIC_AT = 16
_LEGACY_LENGTH = struct.Struct(">i")
WALK_CHUNK = 1 << 20
REMEMBER_EVERY = 64  # a walk remembers every 64th start it passes
MAX_REMEMBERED = 4096  # starts remembered per segment


class Read(NamedTuple):
    error: int
    records: Any  # None, bytes, or a FileRange
    length: int
    high_watermark: int
    log_start: int


def _nothing(error: int, high_watermark: int = -1, log_start: int = -1) -> Read:
    return Read(error, None, 0, high_watermark, log_start)


class ModernReads:
    def __init__(self, segment_files, config):
        self._files = segment_files
        self.config = config

    def topic_known(self, topic: str) -> bool:
        return self._files.knows_topic(topic)

    def record_batches(self, view) -> bool:
        return self._files.record_batches(view)

    def bounds(self, topic: str, partition: int):
        """``(error, view, state, visible end)``: what readers of the partition may see."""
        view = self._files.partition_view(topic, partition)
        if view is None:
            return KafkaError.NONE, None, None, 0
        try:
            state = self._files.partition_state(view)
        except TornEntryError:
            return KafkaError.UNKNOWN_SERVER_ERROR, None, None, 0
        if state.role == Role.DELETED:  # as a partition no worker has
            return KafkaError.NONE, None, None, 0
        if state.role == Role.UNREPLICATED:
            end = state.log_end if self.record_batches(view) else state.flushed_end
        elif state.role == Role.LEADER:
            end = state.high_watermark
        else:
            return KafkaError.NOT_LEADER_OR_FOLLOWER, None, None, 0
        return KafkaError.NONE, view, state, end

    def read(self, topic: str, partition: int, offset: int, max_bytes: int, whole_first: bool) -> Read:
        error, view, state, end = self.bounds(topic, partition)
        if error or view is None:
            return _nothing(error, 0 if view is None and not error else -1, 0 if view is None and not error else -1)
        log_start = state.log_start
        if offset < log_start or offset > state.log_end or (offset > end and state.role == Role.UNREPLICATED):
            return _nothing(KafkaError.OFFSET_OUT_OF_RANGE, end, log_start)
        if offset >= end or not view.bases:
            return Read(KafkaError.NONE, None, 0, end, log_start)
        index = bisect.bisect_right(view.bases, offset) - 1
        base = view.bases[index]
        segment_end = min(view.bases[index + 1], end) if index + 1 < len(view.bases) else end
        try:
            segment_file = view.file(index)
            if self.record_batches(view):
                return self._batches(view, segment_file, base, segment_end, offset, max_bytes, whole_first, end,
                                     log_start)
            return self._messages(view, segment_file, base, segment_end, offset, max_bytes, whole_first, end,
                                  log_start)
        except FileNotFoundError:  # retention removed the segment since it was listed
            view.version = -1
            return _nothing(KafkaError.OFFSET_OUT_OF_RANGE, end, log_start)

    # --- record batches ----------------------------------------------------------

    def _batches(self, view, segment_file, base, segment_end, offset, max_bytes, whole_first, end, log_start):
        fd = segment_file.fd
        start = offset
        head = os.pread(fd, BATCH_HEADER_BYTES, offset - base) if segment_end - offset >= BATCH_HEADER_BYTES else b""
        if not _batch_starts_at(head, offset):
            start = self._walk(view, fd, base, segment_end, offset, _batch_length)
            head = os.pread(fd, BATCH_HEADER_BYTES, start - base)
        first = _batch_length(head, 0)
        length = min(max_bytes, segment_end - start)
        if length < first and whole_first:
            length = min(first, segment_end - start)
        if length <= 0:
            return Read(KafkaError.NONE, None, 0, end, log_start)
        return Read(KafkaError.NONE, FileRange(segment_file, start - base, length), length, end, log_start)

    # --- 0.7 messages, converted ----------------------------------------------------

    def _messages(self, view, segment_file, base, segment_end, offset, max_bytes, whole_first, end, log_start):
        fd = segment_file.fd
        start = offset
        converted = self._convert(fd, base, segment_end, start, max_bytes, whole_first)
        if converted is None:  # not where a message starts: a consumer inside a compressed wrapper
            start = self._walk(view, fd, base, segment_end, offset, _message_length)
            converted = self._convert(fd, base, segment_end, start, max_bytes, whole_first)
        if not converted:
            return Read(KafkaError.NONE, None, 0, end, log_start)
        return Read(KafkaError.NONE, converted, len(converted), end, log_start)

    @staticmethod
    def _convert(fd, base, segment_end, start, max_bytes, whole_first):
        """The 0.7 messages from ``start`` within ``max_bytes`` as record batches (the
        first one whole when ``whole_first``), or None if no message starts there."""
        data = os.pread(fd, max(0, min(max_bytes, segment_end - start)), start - base)
        converted, consumed = _converted(data, start)
        if consumed:
            return converted
        size = _message_length(os.pread(fd, 4, start - base), 0)
        if not 4 < size <= segment_end - start:
            return None
        converted, consumed = _converted(os.pread(fd, size, start - base), start)
        if not consumed:
            return None
        return converted if whole_first else b""

    # --- finding where a batch or message starts ------------------------------------

    def _walk(self, view, fd, base, segment_end, offset, length_at) -> int:
        return walk_to_frame(view, fd, base, segment_end, offset, length_at)


def batch_start(view, segment_file, base: int, segment_end: int, offset: int) -> int:
    """The start of the record batch holding ``offset`` (``offset`` itself when a batch
    starts there) in the segment at ``base`` of a record-batch log: what a 0.7 fetch
    of such a log answers from (``SegmentFiles.fetch``)."""
    fd = segment_file.fd
    head = os.pread(fd, BATCH_HEADER_BYTES, offset - base) if segment_end - offset >= BATCH_HEADER_BYTES else b""
    if _batch_starts_at(head, offset):
        return offset
    return walk_to_frame(view, fd, base, segment_end, offset, _batch_length)


def walk_to_frame(view, fd, base, segment_end, offset, length_at) -> int:
    """The start of the batch (or 0.7 message) holding ``offset``, walking the
    frames from the nearest known start before it. Remembers some starts."""
    known = view.boundaries.setdefault(base, [base])
    position = known[bisect.bisect_right(known, offset) - 1]
    passed = 0
    while True:
        chunk = os.pread(fd, WALK_CHUNK, position - base)
        at = 0
        while True:
            size = length_at(chunk, at)
            if size <= 0:  # the chunk ends inside a frame's length: read on from there
                break
            if position + at + size > offset:
                return position + at
            at += size
            passed += 1
            if passed % REMEMBER_EVERY == 0 and len(known) < MAX_REMEMBERED:
                bisect.insort(known, position + at)
        if at == 0:
            raise OSError(f"the frame at {position} in segment {base} of {view.directory} runs past its end")
        position += at
        if position >= segment_end:
            return segment_end


def _converted(data, start: int) -> tuple:
    """``legacy_to_batches`` of ``data``, or nothing converted for bytes that are not
    0.7 messages starting there."""
    if not data:
        return b"", 0
    try:
        converted = legacy_to_batches(data, start)
    except (MPBrokerError, RecordBatchError):
        return b"", 0
    if converted.dropped:
        log.warning("0.7 wrappers at %s hold more messages than bytes: modern consumers cannot be given offsets "
                    "for %d of their messages", [where for where, _ in converted.dropped],
                    sum(count for _, count in converted.dropped))
    return converted.data, converted.consumed


def _batch_starts_at(head, offset: int) -> bool:
    """Whether the header bytes ``head`` read at ``offset`` are a batch stored there."""
    if len(head) < BATCH_HEADER_BYTES or head[_MAGIC_AT] != 2:
        return False
    base_offset, batch_length = _BATCH_PREFIX.unpack_from(head, 0)
    last_delta = _LAST_OFFSET_DELTA.unpack_from(head, _LAST_OFFSET_DELTA_AT)[0]
    return base_offset + last_delta + 1 == offset + 12 + batch_length


def _batch_length(buffer, at: int) -> int:
    if len(buffer) - at < 12:
        return 0
    return 12 + _BATCH_PREFIX.unpack_from(buffer, at)[1]


def _message_length(buffer, at: int) -> int:
    if len(buffer) - at < 4:
        return 0
    return 4 + _LEGACY_LENGTH.unpack_from(buffer, at)[0]


_MAX_TIMESTAMP = struct.Struct(">q")
_MAX_TIMESTAMP_AT = 35


def offset_for_time(reads: ModernReads, topic: str, partition: int, time_ms: int) -> tuple:
    """``(error, timestamp, offset)`` of the first batch whose newest record is at or
    after ``time_ms`` (its first offset); ``(0, -1, -1)`` when none is.

    A log of record batches is searched by its batches' maxTimestamp: a segment whose
    newest record is older is skipped by what an earlier search learned of it (the
    newest time in it and how far it was read: a segment only grows), else its headers
    are walked. A 0.7 log has no record times: its segments' modification times stand
    in (as 0.7's OFFSETS does), and the answer is the first segment written to at or
    after ``time_ms``."""
    error, view, state, end = reads.bounds(topic, partition)
    if error or view is None:
        return error, -1, -1
    bases = [base for base in view.bases if base < end]
    batches = reads.record_batches(view)
    for index, base in enumerate(bases):
        segment_end = min(bases[index + 1], end) if index + 1 < len(bases) else end
        start = max(base, state.log_start)
        if not batches:
            try:
                modified_ms = os.stat(os.path.join(view.directory, f"{base:020d}.kafka")).st_mtime_ns // 1_000_000
            except FileNotFoundError:
                continue
            if modified_ms >= time_ms:
                return KafkaError.NONE, modified_ms, start
            continue
        read_to, newest = view.newest_times.get(base, (start, -1))
        if newest >= time_ms or read_to < segment_end:
            found, read_to, newest = _first_batch_at_or_after(view.file(index).fd, base, start, segment_end, time_ms)
            view.newest_times[base] = (read_to, newest)
            if found is not None:
                return (KafkaError.NONE, *found)
    return KafkaError.NONE, -1, -1


def _first_batch_at_or_after(fd, base: int, start: int, segment_end: int, time_ms: int) -> tuple:
    """``((timestamp, first offset) or None, where the walk stopped, the newest time seen)``."""
    position = start
    newest = -1
    while position < segment_end:
        head = os.pread(fd, BATCH_HEADER_BYTES, position - base)
        if len(head) < BATCH_HEADER_BYTES:
            break
        length = _batch_length(head, 0)
        max_timestamp = _MAX_TIMESTAMP.unpack_from(head, _MAX_TIMESTAMP_AT)[0]
        newest = max(newest, max_timestamp)
        if max_timestamp >= time_ms:
            return _first_record_at_or_after(fd, base, position, length, time_ms, max_timestamp), position, newest
        position += length
    return None, position, newest


def _first_record_at_or_after(fd, base: int, position: int, length: int, time_ms: int, max_timestamp: int) -> tuple:
    """``(timestamp, offset)`` of the first record at or after ``time_ms`` in the batch at
    ``position`` (whose newest record is): read and walked, decompressed if need be, as
    Kafka answers with the record itself. A batch that does not read back whole answers
    with its newest time and its first offset."""
    data = os.pread(fd, length, position - base)
    try:
        for record in iter_records(data):
            if record.timestamp >= time_ms:
                return record.timestamp, record.offset
    except RecordBatchError:
        pass
    head = data[:BATCH_HEADER_BYTES]
    return max_timestamp, position + length - 1 - _LAST_OFFSET_DELTA.unpack_from(head, _LAST_OFFSET_DELTA_AT)[0]
