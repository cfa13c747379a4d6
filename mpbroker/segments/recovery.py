"""Opening a partition's segments after a restart, and repairing what a crash left.

After a clean shutdown the segments are trusted as they are. Otherwise recovery
starts at the log's recovery point: the end of what a completed flush made durable
(``fdatasync`` of every segment before it, ``fsync`` of the directory), as the
worker's partition table or the checkpoint file in ``log.dir`` remembers it. Bytes
before it are trusted and not read (a restart does not read the whole log); from it
on, every message is checked (a short length, a length below 5, a message running
past the end of the file, a CRC mismatch) across every later segment, and the log
ends at the first bad byte: that segment is truncated there and any later segment
file is deleted. A crash or a power cut never damages what a sync covered, so that
byte always lies past everything flushed (a checkpointed recovery point may lag the
flushes, but what lies between is intact); what it can leave torn is the unflushed
data after it, anywhere: the tail of a segment cut short while the next segment,
created by a roll, survived (a gap), a garbage tail, an empty segment with a later
one behind it. None of that was acknowledged as flushed.

Without a recovery point (a broker directory from before checkpoints, or a new
``num.workers``) the last segment alone is scanned, and a gap between segments is
refused, since it could lie below what was flushed.

What truncation cannot repair is refused, before anything is changed, with a
message naming the partition directory and the file: segments that are not
contiguous below the recovery point (a missing, extra, empty or cut-short file), a
file named ``*.kafka`` that is not ``<20-digit base offset>.kafka``, a segment that
cannot be opened or is not a regular file. Other files in the directory are left
alone, with a warning.
"""

import logging
import mmap
import os

from mpbroker.codec.errors import LogCorruptError, StorageError
from mpbroker.segments.naming import (
    LEADER_EPOCH_FILE,
    RECORD_BATCHES_FILE,
    SEGMENT_SUFFIX,
    parse_segment_file_name,
    segment_file_name,
)
from mpbroker.segments.record_format import valid_prefix
from mpbroker.segments.segment import Segment

log = logging.getLogger(__name__)

_REMEDY = "Nothing was changed; restore the missing file or move the odd one out of the directory, then start again."


def open_segments(directory: str, recover: bool, recovery_point: int | None = None,
                  record_batches: bool = False) -> tuple:
    """Open every segment of ``directory`` in base order; with ``recover``, repair what
    lies past ``recovery_point`` (None: not known, scan the last segment only). Returns
    ``(segments, bytes scanned)``."""
    segments = []
    scanned = 0
    try:
        for base in segment_bases(directory):
            segments.append(_open_segment(directory, base))
        if not recover or not segments:
            _check_contiguous(directory, segments)
        else:
            if recovery_point is None or not _plausible(directory, segments, recovery_point):
                recovery_point = segments[-1].base  # not known: everything before the last segment is trusted
            scanned = segments[-1].end - max(recovery_point, segments[0].base)
            segments = recover_from(directory, segments, recovery_point, record_batches)
    except BaseException:
        for segment in segments:
            segment.close()
        raise
    return segments, scanned


def _plausible(directory: str, segments: list, recovery_point: int) -> bool:
    """A recovery point past the end of the files cannot be right (data flushed before
    it is gone, or the checkpoint is not this log's): warn and recover without it."""
    if recovery_point <= segments[-1].end:
        return True
    log.warning("recovery: %s ends at %d, before its recovery point %d; recovering without it "
                "(the last segment is scanned)", directory, segments[-1].end, recovery_point)
    return False


def recover_from(directory: str, segments: list, recovery_point: int, record_batches: bool = False) -> list:
    """Check everything from ``recovery_point`` on and end the log at the first bad
    byte; return the segments that remain. Below the recovery point a gap is damage
    and refused; above it, only unflushed data was lost."""
    point = max(recovery_point, segments[0].base)
    first = max(index for index, segment in enumerate(segments) if segment.base <= point)
    _check_contiguous(directory, segments[:first + 1])
    if segments[first].end < point:
        raise LogCorruptError(
            f"partition directory {directory}: segment file {os.path.basename(segments[first].path)} ends at "
            f"offset {segments[first].end}, but everything up to {point} was flushed; data was lost below "
            f"the recovery point. {_REMEDY}")
    kept = first + 1
    expected = segments[first].base
    for index in range(first, len(segments)):
        segment = segments[index]
        if segment.base != expected:
            break  # a gap: the rest was written after the last flush and partly lost
        start = point - segment.base if index == first else 0
        valid = start + valid_prefix_length(segment, start, record_batches)
        kept = index + 1
        if valid < segment.size:
            _truncate(segment, valid)
            break
        expected = segment.end
    for segment in segments[kept:]:
        log.warning("recovery: deleting %s (%d bytes past the end of the recovered log at %d; "
                    "none of it was flushed)", segment.path, segment.size, segments[kept - 1].end)
        segment.delete()
    return segments[:kept]


def segment_bases(directory: str) -> list:
    """Sorted base offsets of the segment files of a partition directory; refuses a
    ``*.kafka`` name that is not a base offset, warns about (and skips) other files."""
    bases = []
    try:
        names = sorted(os.listdir(directory))
    except OSError as exc:
        raise StorageError(f"cannot list partition directory {directory}: {exc.strerror}") from exc
    for name in names:
        base = parse_segment_file_name(name)
        if base is not None:
            bases.append(base)
        elif name in (LEADER_EPOCH_FILE, LEADER_EPOCH_FILE + ".tmp", RECORD_BATCHES_FILE):
            continue  # the leader epochs of a replicated partition (leader_epochs)
        elif name.endswith(SEGMENT_SUFFIX):
            raise LogCorruptError(
                f"partition directory {directory}: {name} is named like a segment file but not "
                f"<20-digit base offset>{SEGMENT_SUFFIX}, so where its bytes belong in the log is unknown. "
                "Nothing was changed; rename it or move it out of the directory, then start again."
            )
        else:
            log.warning("%s: ignoring %s, which is not a segment file", directory, name)
    return bases


def _open_segment(directory: str, base: int) -> Segment:
    try:
        return Segment.open(directory, base)
    except OSError as exc:
        raise StorageError(
            f"partition directory {directory}: cannot open segment file {segment_file_name(base)}: "
            f"{exc.strerror}. Nothing was changed."
        ) from exc


def _check_contiguous(directory: str, segments: list) -> None:
    for previous, following in zip(segments, segments[1:]):
        if previous.end != following.base:
            raise LogCorruptError(f"partition directory {directory}: {_describe_gap(previous, following)}; "
                                  f"a segment file is missing, extra or damaged. {_REMEDY}")


def _describe_gap(previous: Segment, following: Segment) -> str:
    before, after = os.path.basename(previous.path), os.path.basename(following.path)
    if previous.size == 0:
        return (f"segment file {before} is empty but the next segment starts at {following.base} ({after}); "
                "only the last segment may be empty")
    described = f"segment file {before} ends at offset {previous.end} but the next segment starts at {following.base}"
    if previous.end > following.base:
        return f"{described} ({after}), inside it"
    return (f"{described} ({after}); no file holds offsets {previous.end} to {following.base} "
            f"({segment_file_name(previous.end)} would)")


def valid_prefix_length(segment: Segment, start: int = 0, record_batches: bool = False) -> int:
    """How many bytes of ``segment`` from position ``start`` (a message or batch
    boundary) on are whole, CRC-valid messages (or record batches)."""
    if segment.size <= start:
        return 0
    with mmap.mmap(segment.fd, segment.size, access=mmap.ACCESS_READ) as mapped:
        view = memoryview(mapped)[start:]
        try:
            return valid_prefix(view, record_batches)
        finally:
            view.release()


def _truncate(segment: Segment, valid: int) -> None:
    log.warning("recovery: truncating %s from %d to %d bytes (torn or corrupt tail of %d bytes)",
                segment.path, segment.size, valid, segment.size - valid)
    segment.truncate(valid)
