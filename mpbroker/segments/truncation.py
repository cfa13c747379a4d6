"""How a replica's log is cut back, durably: the file steps of ``Log.truncate_to`` and
``Log.truncate_fully_and_start_at``, which keep the Log's segment list and ends.

Every step leaves on disk a log that recovery opens as it is, a prefix of the old one
or the new empty one (a replica whose truncation was interrupted cuts again when it
follows its leader): the segments past the cut are unlinked, the last one first, and
the directory is fsync'ed; then the segment holding the cut is truncated and
fsync'ed; to start afresh at another offset, the one segment left, emptied, is
renamed to it and the directory fsync'ed again. Without these syncs a power cut after new bytes were appended over
the cut could bring back the old, divergent bytes, or a deleted segment file. After
each step the Log matches the disk, so a step that fails (OSError) leaves it
consistent, and its next flush syncs the segments and the directory. The leader
epochs are cut after the bytes (as Kafka does; ``Log.open`` fits the epochs a crash
left past the log end).
"""

import logging
from bisect import bisect_right

from mpbroker.codec.errors import StorageError
from mpbroker.segments.durability import sync_directory

_log = logging.getLogger(__name__)


def truncate_to(log, offset: int) -> None:
    """Cut ``log``'s bytes at ``offset`` (at most its end); its epochs are the Log's."""
    _check_truncatable(log)
    if offset < log.log_start:
        raise ValueError(f"cannot truncate {log.directory} to {offset}, below its log start {log.log_start}")
    if offset == log.log_end:
        return
    try:
        _truncate(log, offset)
    except OSError as exc:
        log._dirty_directories.add(log.directory)  # the next flush syncs what this did not
        raise StorageError(f"truncating {log.directory} to {offset} failed: {exc.strerror or exc}; "
                           f"it now ends at {log.log_end}") from exc
    _log.info("truncated %s to %d", log.directory, offset)


def restart_at(log, offset: int) -> None:
    """Empty ``log`` and start it at ``offset``: one empty segment, based there."""
    _check_truncatable(log)
    if offset < 0:
        raise ValueError(f"an offset is >= 0, not {offset}")
    try:
        _restart_at(log, offset)
    except OSError as exc:
        log._dirty_directories.add(log.directory)
        raise StorageError(f"starting {log.directory} afresh at {offset} failed: {exc.strerror or exc}; "
                           f"it now holds [{log.log_start}, {log.log_end}]") from exc
    _log.info("truncated %s fully; it starts at %d", log.directory, offset)


def _check_truncatable(log) -> None:
    if log.failure is not None:
        raise StorageError(log.failure)
    if log.flush_in_flight:
        raise RuntimeError(f"{log.directory}: a flush is in flight; truncate after it finishes")


def _truncate(log, offset: int) -> None:
    index = bisect_right(log._bases, offset) - 1
    drop_segments_after(log, index)
    segment = log._segments[index]
    try:
        segment.truncate_durably(offset - segment.base)
    finally:
        ended_at(log, segment.end)


def _restart_at(log, offset: int) -> None:
    drop_segments_after(log, 0)
    first = log._segments[0]
    try:
        first.truncate_durably(0)
    finally:
        ended_at(log, first.end)
    if first.base != offset:
        log._dirty_directories.add(log.directory)  # synced here, or by the next flush if that fails
        first.rename(offset)
        log._bases[0] = offset
        log.segments_version += 1
        ended_at(log, offset)
        sync_directory(log.directory)
        log._dirty_directories.discard(log.directory)
    log.recovery_point = offset  # nothing lies before it


def drop_segments_after(log, index: int) -> None:
    """Unlink every segment after segment ``index``, the last first; fsync the directory."""
    segments, bases = log._segments, log._bases
    if index + 1 >= len(segments):
        return
    log._dirty_directories.add(log.directory)  # synced here, or by the next flush if that fails
    count = len(segments)
    try:
        while len(segments) > index + 1:
            segments[-1].unlink()
            segments.pop()
            bases.pop()
    finally:
        if len(segments) < count:
            log.segments_version += 1
            ended_at(log, segments[-1].end)
    sync_directory(log.directory)
    log._dirty_directories.discard(log.directory)


def ended_at(log, end: int) -> None:
    """The segments now end at ``end``: bring the log's ends down to it."""
    log.log_end = end
    log.flushed_end = max(log.log_start, min(log.flushed_end, end))
    if log.recovery_point is not None:
        log.recovery_point = max(log.log_start, min(log.recovery_point, end))
    if log.flushed_end == end:
        log._unflushed_messages = 0  # every byte left was flushed
