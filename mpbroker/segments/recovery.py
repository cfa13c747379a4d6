"""Opening a partition's segments after a restart, and repairing a torn tail.

After a clean shutdown the segments are trusted as they are. Otherwise the last
segment is scanned from its start and truncated at the first message that is torn
or corrupt (a short length, a length below 5, a message running past the end of
the file, a CRC mismatch). Earlier segments must be contiguous: a gap means a
missing or damaged file that truncation cannot repair, and opening is refused.
"""

import logging
import mmap
import os

from mpbroker.errors import LogCorruptError
from mpbroker.segments.message_set import validate_message_set
from mpbroker.segments.naming import list_segment_bases
from mpbroker.segments.segment import Segment

log = logging.getLogger(__name__)

_UNLIMITED = 1 << 62


def open_segments(directory: str, recover: bool) -> list:
    """Open every segment of ``directory`` in base order, repairing the last if ``recover``."""
    segments = []
    try:
        for base in list_segment_bases(directory):
            segments.append(Segment.open(directory, base))
        _check_contiguous(directory, segments)
        if recover and segments:
            truncate_torn_tail(segments[-1])
    except BaseException:
        for segment in segments:
            segment.close()
        raise
    return segments


def _check_contiguous(directory: str, segments: list) -> None:
    for previous, following in zip(segments, segments[1:]):
        if previous.end != following.base:
            raise LogCorruptError(
                f"{directory}: segment {os.path.basename(previous.path)} ends at offset "
                f"{previous.end} but the next segment starts at {following.base}; a segment "
                "file is missing, extra or damaged. Move the odd file away and restart."
            )


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
