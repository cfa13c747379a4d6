"""Where an offset reset of a modern group puts each partition, from the partitions'
leaders (ListOffsets).

    Target("earliest"), Target("latest"), Target.parse_datetime("2024-05-01T12:00Z"),
    Target.at(4096), Target.shift(-1000)
    resolve(admin, target, partitions, current)   # {(topic, p): Resolved}

- earliest, latest: the log's start, and its end as consumers see it (a consumer there
  waits for the next record);
- a date and time: ListOffsets by timestamp, the first record written at or after it
  (a time after the last record: the log end, as Kafka does);
- an offset N: taken as given if it lies in [log start, log end], refused otherwise.
  Offsets are byte positions with gaps (a batch of n records at bytes [p, q) holds
  offsets q-n .. q-1), so N may fall between records: that is still an offset a
  consumer can start from (the broker answers a fetch inside a batch from the batch's
  start, and clients skip the records below their offset), and the consumer's first
  record is the first one at or after N;
- a shift by N: the committed offset plus N (offsets, so roughly bytes here, not
  records), clamped into [log start, log end] as Kafka clamps; a partition without a
  committed offset cannot be shifted.

A partition's problem has a ``kind``: "input" (an offset the log cannot take, an unknown
partition) or "broker" (an error answer).
"""

from typing import NamedTuple

from kafka.protocol.consumer import OffsetSpec, OffsetTimestamp

from mpbroker.clients.consumer.offset_times import describe_reset_time, parse_reset_time
from mpbroker.clients.modern_groups.report import log_offsets

_INPUT_ERRORS = ("UNKNOWN_TOPIC_OR_PARTITION", "INVALID_TOPIC_EXCEPTION")


class Target(NamedTuple):
    kind: str  # "earliest" | "latest" | "datetime" | "offset" | "shift"
    value: int = 0  # ms since the epoch (datetime), the offset, or the shift

    @classmethod
    def at(cls, offset: int) -> "Target":
        if offset < 0:
            raise ValueError(f"offset {offset} is negative")
        return cls("offset", offset)

    @classmethod
    def shift(cls, by: int) -> "Target":
        return cls("shift", by)

    @classmethod
    def parse_datetime(cls, text: str) -> "Target":
        """``offset_times.parse_reset_time``: ISO 8601, local time without a zone."""
        return cls("datetime", parse_reset_time(text))

    def describe(self) -> str:
        if self.kind == "datetime":
            return describe_reset_time(self.value)
        if self.kind == "offset":
            return f"offset {self.value}"
        if self.kind == "shift":
            return f"shift by {self.value:+d}"
        return self.kind


class Resolved(NamedTuple):
    new_offset: int | None
    log_start: int | None
    log_end: int | None
    problem: str | None = None
    problem_kind: str | None = None  # "input" | "broker"


def _problem(message: str, error_name: str, start=None, end=None) -> Resolved:
    return Resolved(None, start, end, message, "input" if error_name in _INPUT_ERRORS else "broker")


def resolve(admin, target: Target, partitions, current: dict) -> dict:
    """``{(topic, partition): Resolved}`` for ``partitions``; ``current``: the committed
    offsets ``{(topic, partition): offset}``."""
    partitions = sorted(set(partitions))
    starts, start_errors = log_offsets(admin, partitions, OffsetSpec.EARLIEST)
    ends, end_errors = log_offsets(admin, partitions, OffsetSpec.LATEST)
    timed, time_errors = ({}, {})
    if target.kind == "datetime":
        timed, time_errors = log_offsets(admin, partitions, OffsetTimestamp(target.value))
    resolved = {}
    for key in partitions:
        error = start_errors.get(key) or end_errors.get(key) or time_errors.get(key)
        start, end = starts.get(key), ends.get(key)
        if error:
            resolved[key] = _problem(f"the leader answered {error}", error, start, end)
        else:
            resolved[key] = _one(target, start, end, timed.get(key), current.get(key))
    return resolved


def _one(target: Target, start: int, end: int, timed, committed) -> Resolved:
    if target.kind == "earliest":
        return Resolved(start, start, end)
    if target.kind == "latest":
        return Resolved(end, start, end)
    if target.kind == "datetime":
        return Resolved(end if timed is None or timed < 0 else timed, start, end)
    if target.kind == "offset":
        if not start <= target.value <= end:
            return Resolved(None, start, end, f"offset {target.value} is outside the log [{start}, {end}]", "input")
        return Resolved(target.value, start, end)
    if target.kind == "shift":
        if committed is None:
            return Resolved(None, start, end, "no committed offset to shift", "input")
        return Resolved(min(max(committed + target.value, start), end), start, end)
    raise ValueError(f"unknown target {target!r}")
