"""Where an offset lives: the one read path of a partition log, from an offset to the
bytes of one segment file.

A reader needs only the sorted segment base offsets, the flushed end and a way to
get each segment's open file: segments are contiguous, so a segment ends where the
next one starts, and the last one ends at the flushed end for readers. ``locate``
turns a fetch into a ``FileRange``; the Log reads through it (``Log.read``), and so
does the acceptor, which serves fetches from segment files it did not write
(``mpbroker.acceptor.segment_files``), and so does the connection that sends the
range with ``os.sendfile``. No I/O here beyond what ``file_at`` does.
"""

from bisect import bisect_right
from typing import Any, NamedTuple

from mpbroker.codec.errors import OffsetOutOfRangeError


class FileRange(NamedTuple):
    """Bytes of one segment file: what a fetch answers with, sent with ``os.sendfile``."""

    file: Any  # the open segment file, anything with an ``fd``: the Log's Segment, the acceptor's SegmentFile
    position: int  # byte position inside that file
    length: int  # bytes to send (0: nothing yet at this offset)


EMPTY = FileRange(None, 0, 0)  # a valid offset with nothing to read yet (or a fetch of 0 bytes)


def locate(bases, flushed_end: int, offset: int, max_bytes: int, file_at) -> FileRange:
    """The range a fetch of ``max_bytes`` at ``offset`` answers with.

    ``bases`` are the segments' base offsets in order; ``file_at(index)`` returns the
    open file of segment ``index`` (asked only when there is something to read).
    Valid offsets run from the first base to ``flushed_end``; a fetch at exactly
    ``flushed_end`` is EMPTY, anything outside raises OffsetOutOfRangeError. The range
    never crosses the end of a segment.
    """
    if not bases or offset < bases[0] or offset > flushed_end:
        start = bases[0] if bases else 0
        raise OffsetOutOfRangeError(
            f"offset {offset} is outside the log's range [{start}, {flushed_end}]"
        )
    index = bisect_right(bases, offset) - 1
    segment_end = bases[index + 1] if index + 1 < len(bases) else flushed_end
    length = min(max_bytes, min(segment_end, flushed_end) - offset)
    if length <= 0:
        return EMPTY
    return FileRange(file_at(index), offset - bases[index], length)
