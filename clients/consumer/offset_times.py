"""Offsets by time, as the command-line tools take them: parsing a time (-1 latest,
-2 earliest, milliseconds since the epoch, or ISO-8601) and the start offset the
OFFSETS request gives for it.

A 0.7 broker answers OFFSETS with segment base offsets, not message offsets: the bases
of the segments whose file was last written at or before the time, newest first, led
by the log end when the time is now or later. So "the offset for a time" is the start
of the newest segment written completely before it: reading from there gives every
message written after the time, plus the older messages of that segment (up to a
segment, ``log.file.size``) and of the next one. A time before the oldest segment's
last write has no answer; the earliest offset is the safe start then.
"""

import datetime

from mpbroker.clients.consumer.simple_consumer import EARLIEST_TIME, LATEST_TIME

_NAMES = {"latest": LATEST_TIME, "earliest": EARLIEST_TIME}


def parse_time(text: str) -> int:
    """``-1``/``latest``, ``-2``/``earliest``, milliseconds since the epoch, or an
    ISO-8601 date or date and time (``2024-05-01``, ``2024-05-01T12:00:00Z``,
    ``2024-05-01 12:00+02:00``; without a zone: this machine's local time). ValueError
    otherwise."""
    text = text.strip()
    if text.lower() in _NAMES:
        return _NAMES[text.lower()]
    try:
        value = int(text)
    except ValueError:
        pass
    else:
        if value < 0 and value not in (LATEST_TIME, EARLIEST_TIME):
            raise ValueError(f"time {text!r}: a negative time must be -1 (latest) or -2 (earliest)")
        return value
    try:
        return parse_iso8601(text)
    except ValueError:
        raise ValueError(f"time {text!r} is neither -1, -2, milliseconds since the epoch nor ISO-8601 "
                         f"(e.g. 2024-05-01T12:00:00Z)") from None


def parse_iso8601(text: str) -> int:
    """Milliseconds since the epoch of an ISO-8601 date or date and time; without a
    zone, this machine's local time. ValueError when it is not one."""
    moment = datetime.datetime.fromisoformat(text.strip())
    if moment.tzinfo is None:
        moment = moment.astimezone()  # local time
    return int(moment.timestamp() * 1000)


def parse_reset_time(text: str) -> int:
    """The time an offset reset goes to (``--to-datetime``): ISO 8601 (``2024-05-01T12:00:00``,
    ``...Z``, ``...+02:00``, a date alone; without a zone, this machine's local time), in
    milliseconds since the epoch; ValueError for anything else or a time before 1970."""
    try:
        millis = parse_iso8601(text)
    except ValueError:
        raise ValueError(f"{text!r} is not an ISO 8601 date and time (e.g. 2024-05-01T12:00:00+00:00)") from None
    if millis < 0:
        raise ValueError(f"{text!r} is before 1970")
    return millis


def describe_reset_time(millis: int) -> str:
    """How a reset's time is shown: local ISO 8601 and the milliseconds."""
    return f"datetime {datetime.datetime.fromtimestamp(millis / 1000).astimezone().isoformat()} ({millis} ms)"


def start_offset_for_time(consumer, topic: str, partition: int, time_ms: int) -> int:
    """Where to start reading ``topic``-``partition`` for messages written at or after
    ``time_ms`` (see the module docstring): the newest segment base OFFSETS gives, or
    the earliest offset when it gives none. -1 and -2 are the latest and earliest."""
    if time_ms == LATEST_TIME:
        return consumer.latest_offset(topic, partition)
    if time_ms == EARLIEST_TIME:
        return consumer.earliest_offset(topic, partition)
    offsets = consumer.get_offsets_before(topic, partition, time_ms, 1)
    return offsets[0] if offsets else consumer.earliest_offset(topic, partition)
