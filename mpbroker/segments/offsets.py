"""Answers to OFFSETS requests: which offsets lie before a given time.

Pure function over a partition's segment bases, their modification times and the
flushed end (PROTOCOL.md, "OFFSETS"): time -1 is the latest offset, -2 the earliest;
any other time lists up to ``max_offsets`` segment bases whose file was last modified
at or before it, newest first, led by the log end when the last segment holds data.
"""

LATEST_TIME = -1
EARLIEST_TIME = -2


def offsets_before(segments, flushed_end: int, time_ms: int, max_offsets: int, now_ms: int) -> list:
    """``segments`` is a base-ordered sequence of ``(base_offset, mtime_ms)``."""
    if max_offsets <= 0:
        return []
    # A segment rolled but not yet flushed starts past what readers may fetch.
    candidates = [(base, mtime) for base, mtime in segments if base <= flushed_end]
    if not candidates:
        return [0] if time_ms in (LATEST_TIME, EARLIEST_TIME) else []
    if flushed_end > candidates[-1][0]:
        candidates.append((flushed_end, now_ms))
    if time_ms == LATEST_TIME:
        start = len(candidates) - 1
    elif time_ms == EARLIEST_TIME:
        start = 0
    else:
        start = len(candidates) - 1
        while start >= 0 and candidates[start][1] > time_ms:
            start -= 1
    count = min(max_offsets, start + 1)
    return [candidates[index][0] for index in range(start, start - count, -1)]
