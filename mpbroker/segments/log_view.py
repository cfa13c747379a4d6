"""Where an offset lives: the read-side arithmetic of a partition log.

A reader needs only the sorted segment base offsets and the flushed end: segments
are contiguous, so a segment ends where the next one starts, and the last one ends
at the flushed end for readers. The Log uses this, and so does any process that
serves fetches from segment files it did not write (the acceptor). Pure functions.
"""

from bisect import bisect_right
from typing import NamedTuple

from mpbroker.codec.errors import OffsetOutOfRangeError


class Extent(NamedTuple):
    """A byte range of one segment file: what a fetch sends with sendfile."""

    index: int  # which segment, counted from the oldest
    segment_base: int  # that segment's base offset (its file name)
    position: int  # byte position inside that file
    length: int  # bytes to send (0: nothing yet at this offset)


def locate(bases, flushed_end: int, offset: int, max_bytes: int) -> Extent:
    """The extent a fetch of ``max_bytes`` at ``offset`` answers with.

    Valid offsets run from the first base to ``flushed_end``; a fetch at exactly
    ``flushed_end`` is empty, anything outside raises OffsetOutOfRangeError. The
    extent never crosses the end of a segment.
    """
    if not bases or offset < bases[0] or offset > flushed_end:
        start = bases[0] if bases else 0
        raise OffsetOutOfRangeError(
            f"offset {offset} is outside the log's range [{start}, {flushed_end}]"
        )
    index = bisect_right(bases, offset) - 1
    segment_base = bases[index]
    segment_end = bases[index + 1] if index + 1 < len(bases) else flushed_end
    length = max(0, min(max_bytes, min(segment_end, flushed_end) - offset))
    return Extent(index, segment_base, offset - segment_base, length)
