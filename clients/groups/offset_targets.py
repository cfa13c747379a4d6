"""Where an offset reset puts a partition, asked of the broker that holds it.

    target = Target.parse_datetime("2024-05-01T12:00:00+02:00")   # or EARLIEST, LATEST, Target.at(N)
    new_offset = resolve(consumer, "clicks", 0, target)            # a SimpleConsumer of that broker

- earliest, latest: OFFSETS with time -2 / -1 (the log's start; its flushed end).
- a date and time: OFFSETS with that time in ms. As in Kafka 0.7 the broker answers with
  segment bases: the base of the newest segment file last modified at or before the
  time (or the log end, if the time is now or later). The granularity is a segment: the
  group may read again up to a segment's worth of messages from before the time, but
  skips none written after it, as far as the files' modification times tell. A time
  before every segment's last modification gets no base: the log's start is used.
- an offset: taken as given if it is the log's start or end; otherwise it must lie
  inside the log (else a 0.7 consumer gets OffsetOutOfRange and restarts at
  ``autooffset.reset``) and a whole message must start there: its length, magic and
  CRC check out (offsets are byte positions; a consumer started inside a message gets
  garbage or stops). One fetch at the offset decides; when no message can be read there,
  ``SimpleConsumer`` may walk the segment to name the nearest earlier message start, which
  the error then gives. A readable message at the offset is not proved to lie on the
  chain of boundaries from the segment's base (that could mean reading a whole segment):
  a payload that is itself a whole encoded message could pass.

Errors: TargetError (``kind`` "input" for an offset that cannot be used, "broker" for a
broker's error answer); BrokerUnavailableError/OSError when the broker does not answer.
"""

from typing import NamedTuple

from mpbroker.clients.consumer.offset_times import describe_reset_time, parse_reset_time, start_offset_for_time
from mpbroker.clients.consumer.simple_consumer import EARLIEST_TIME, LATEST_TIME
from mpbroker.clients.core.errors import BrokerError, NotAMessageBoundaryError
from mpbroker.codec.errors import InvalidMessageError, MPBrokerError

FIRST_CHECK_BYTES = 64 * 1024  # the first fetch at a given offset
MAX_CHECK_BYTES = 64 * 1024 * 1024  # the largest message whose start is checked


class TargetError(Exception):
    """The target of one partition cannot be had: ``kind`` is "input" (the offset given
    cannot be used) or "broker" (the broker answered with an error)."""

    def __init__(self, message: str, kind: str):
        super().__init__(message)
        self.kind = kind


class Target(NamedTuple):
    kind: str  # "earliest" | "latest" | "datetime" | "offset"
    value: int = 0  # ms since the epoch (datetime) or the offset

    @classmethod
    def at(cls, offset: int) -> "Target":
        if not isinstance(offset, int) or offset < 0:
            raise ValueError(f"offset {offset!r} is not a non-negative integer")
        return cls("offset", offset)

    @classmethod
    def parse_datetime(cls, text: str) -> "Target":
        """``offset_times.parse_reset_time``: ISO 8601, local time without a zone."""
        return cls("datetime", parse_reset_time(text))

    def describe(self) -> str:
        if self.kind == "datetime":
            return describe_reset_time(self.value)
        if self.kind == "offset":
            return f"offset {self.value}"
        return self.kind


EARLIEST = Target("earliest")
LATEST = Target("latest")


def resolve(consumer, topic: str, partition: int, target: Target) -> int:
    """The offset ``target`` means for ``topic``-``partition`` on ``consumer``'s broker."""
    try:
        if target.kind in ("earliest", "latest", "datetime"):
            time_ms = {"earliest": EARLIEST_TIME, "latest": LATEST_TIME}.get(target.kind, target.value)
            return start_offset_for_time(consumer, topic, partition, time_ms)
        if target.kind == "offset":
            return checked_offset(consumer, topic, partition, target.value)
    except (BrokerError, MPBrokerError) as exc:  # an error answer (checked_offset's are TargetErrors)
        raise TargetError(f"the broker answered {exc}", "broker") from None
    raise ValueError(f"unknown target {target!r}")


def checked_offset(consumer, topic: str, partition: int, offset: int) -> int:
    """``offset`` if a consumer can start there (see the module docstring), else TargetError."""
    earliest = consumer.get_offsets_before(topic, partition, EARLIEST_TIME, 1)[0]
    latest = consumer.get_offsets_before(topic, partition, LATEST_TIME, 1)[0]
    if offset in (earliest, latest):
        return offset
    if not earliest < offset < latest:
        raise TargetError(f"offset {offset} is outside the log [{earliest}, {latest}]", "input")
    size = FIRST_CHECK_BYTES
    while True:
        try:
            answer = consumer.fetch(topic, partition, offset, size)
        except (InvalidMessageError, NotAMessageBoundaryError) as exc:  # a broker's error answer is not the input's
            nearest = getattr(exc, "nearest", None)  # the consumer may have walked the segment to tell
            if nearest is not None and nearest != offset:
                raise TargetError(f"offset {offset} is not the start of a message (the nearest earlier one starts "
                                  f"at {nearest})", "input") from None
            raise TargetError(f"offset {offset} is not the start of a message that can be read: {exc}",
                              "input") from None
        if answer.payloads:
            return offset
        if answer.size < size:  # the bytes from there to the end of the segment hold no whole message
            raise TargetError(f"offset {offset} is not the start of a message (no whole message starts there)",
                              "input")
        if size >= MAX_CHECK_BYTES:
            raise TargetError(f"offset {offset}: no whole message in the {MAX_CHECK_BYTES} bytes from there; not "
                              "taken as a message start", "input")
        size = min(size * 16, MAX_CHECK_BYTES)
