"""Opening a partition's segments after a restart, and repairing a torn tail.

After a clean shutdown the segments are trusted as they are. Otherwise the last
segment is scanned from its start and truncated at the first message that is torn
or corrupt (a short length, a length below 5, a message running past the end of
the file, a CRC mismatch): a crash can only lose bytes that were not yet flushed,
and those lie at the end of the log. Earlier segments are not scanned (that would
make every restart read the whole log); damage to them is caught by the consumers'
CRC check, and ``verify`` finds it offline.

What truncation cannot repair is refused, before anything is changed, with a
message naming the partition directory and the file: segments that are not
contiguous (a missing, extra, empty or cut-short file before the last one), a file
named ``*.kafka`` that is not ``<20-digit base offset>.kafka``, a segment that
cannot be opened or is not a regular file. Other files in the directory are left
alone, with a warning.
"""

import logging
import mmap
import os

from mpbroker.errors import LogCorruptError, StorageError
from mpbroker.segments.message_set import validate_message_set
from mpbroker.segments.naming import SEGMENT_SUFFIX, parse_segment_file_name, segment_file_name
from mpbroker.segments.segment import Segment

log = logging.getLogger(__name__)

_UNLIMITED = 1 << 62
_REMEDY = "Nothing was changed; restore the missing file or move the odd one out of the directory, then start again."


def open_segments(directory: str, recover: bool) -> list:
    """Open every segment of ``directory`` in base order, repairing the last if ``recover``."""
    segments = []
    try:
        for base in segment_bases(directory):
            segments.append(_open_segment(directory, base))
        _check_contiguous(directory, segments)
        if recover and segments:
            truncate_torn_tail(segments[-1])
    except BaseException:
        for segment in segments:
            segment.close()
        raise
    return segments


def segment_bases(directory: str) -> list:
    """Sorted base offsets of the segment files of a partition directory; refuses a
    ``*.kafka`` name that is not a base offset, warns about (and skips) other files."""
    bases = []
    for name in sorted(os.listdir(directory)):
        base = parse_segment_file_name(name)
        if base is not None:
            bases.append(base)
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


def valid_prefix_length(segment: Segment) -> int:
    """How many leading bytes of ``segment`` are whole, CRC-valid messages."""
    if segment.size == 0:
        return 0
    with mmap.mmap(segment.fd, segment.size, access=mmap.ACCESS_READ) as view:
        # Shallow: a wrapper's CRC covers its compressed bytes, which is what can tear.
        return validate_message_set(view, _UNLIMITED, deep=False).valid_bytes


def truncate_torn_tail(segment: Segment) -> int:
    """Truncate ``segment`` after its last valid message; return the bytes cut off."""
    valid = valid_prefix_length(segment)
    cut = segment.size - valid
    if cut:
        log.warning(
            "recovery: truncating %s from %d to %d bytes (torn or corrupt tail of %d bytes)",
            segment.path, segment.size, valid, cut,
        )
        segment.truncate(valid)
    return cut
