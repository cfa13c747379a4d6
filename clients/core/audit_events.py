"""Audit windows and the audit topic's events, free of I/O.

Time is cut into windows of ``window_ms`` aligned on the epoch: a message belongs to
the window ``[start, start + window_ms)`` holding its creation time (the envelope's
``created_ms``), whenever it was sent or received. Because every window size starts
at multiples of itself, a window of ``w`` ms lies inside exactly one window of any
multiple of ``w``: counts made with small windows add up into larger ones.

An audit event is one JSON object (UTF-8), published by an audited producer to the
audit topic (``audit.topic``, default ``_audit``):

    {"type": "mpbroker.audit", "version": 1,
     "host": "web-7", "client": "4711-a1b2c3",   # the producer (as in its envelopes)
     "event": 12,                                # the producer's event counter
     "window_start_ms": 1700000040000, "window_ms": 60000,
     "counts": {"page-views": 1200, "clicks": 31},   # messages delivered, by creation window
     "published_ms": 1700000105000}

Events are increments: a producer may publish several for one window (messages of
the window delivered late go out with the next event), and a reader adds them up.
(host, client, event) names one event, so a reader counts an event seen twice once.
"""

import json
import math
import re
from typing import NamedTuple

EVENT_TYPE = "mpbroker.audit"
EVENT_VERSION = 1
_UNITS_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_DURATION_RE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*\Z")


class AuditEventError(ValueError):
    """A message of the audit topic that is not an audit event."""


class AuditEvent(NamedTuple):
    host: str
    client: str
    event: int
    window_start_ms: int
    window_ms: int
    counts: dict  # topic -> messages
    published_ms: int

    @property
    def producer(self) -> tuple:
        return (self.host, self.client)


def window_start(time_ms: int, window_ms: int) -> int:
    """The start of the window of ``window_ms`` holding ``time_ms``."""
    return time_ms - time_ms % window_ms


def enclosing_window(start_ms: int, window_ms: int, wider_ms: int) -> int | None:
    """The start of the ``wider_ms`` window that holds the ``window_ms`` window starting
    at ``start_ms``; None when ``wider_ms`` is not a multiple of ``window_ms`` (the
    small window may then straddle two wide ones)."""
    if window_ms <= 0 or wider_ms % window_ms or start_ms % window_ms:
        return None
    return window_start(start_ms, wider_ms)


def parse_duration_ms(text: str) -> int:
    """``500ms``, ``10s``, ``1m``, ``2h``, ``1d`` (a bare number is milliseconds) -> ms."""
    match = _DURATION_RE.match(str(text))
    if not match:
        raise ValueError(f"{text!r} is not a duration: a number with ms, s, m, h or d")
    milliseconds = float(match.group(1)) * _UNITS_MS[match.group(2) or "ms"]
    if milliseconds != int(milliseconds):
        raise ValueError(f"{text!r} is not a whole number of milliseconds")
    return int(milliseconds)


def format_duration_ms(milliseconds: int) -> str:
    """The shortest form ``parse_duration_ms`` reads back: ``10s``, ``1m``, ``1500ms``."""
    for unit in ("d", "h", "m", "s"):
        if milliseconds and milliseconds % _UNITS_MS[unit] == 0:
            return f"{milliseconds // _UNITS_MS[unit]}{unit}"
    return f"{milliseconds}ms"


def smallest_fitting_window(window_ms: int, producer_windows) -> int:
    """The smallest window of at least ``window_ms`` that is a multiple of every one of
    ``producer_windows`` (so every producer's window lies inside one of it)."""
    common = math.lcm(*producer_windows)
    return -(-window_ms // common) * common


def encode_event(event: AuditEvent) -> bytes:
    return json.dumps({
        "type": EVENT_TYPE, "version": EVENT_VERSION, "host": event.host, "client": event.client,
        "event": event.event, "window_start_ms": event.window_start_ms, "window_ms": event.window_ms,
        "counts": dict(sorted(event.counts.items())), "published_ms": event.published_ms,
    }, separators=(",", ":")).encode()


def decode_event(data: bytes) -> AuditEvent:
    try:
        value = json.loads(bytes(data).decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise AuditEventError(f"not a JSON audit event: {bytes(data[:80])!r}") from None
    if not isinstance(value, dict) or value.get("type") != EVENT_TYPE:
        raise AuditEventError(f"not an audit event: {bytes(data[:80])!r}")
    if value.get("version") != EVENT_VERSION:
        raise AuditEventError(f"audit event version {value.get('version')!r} is not supported")
    try:
        event = AuditEvent(str(value["host"]), str(value["client"]), _integer(value["event"]),
                           _integer(value["window_start_ms"]), _integer(value["window_ms"]),
                           {str(topic): _integer(count) for topic, count in value["counts"].items()},
                           _integer(value["published_ms"]))
    except (KeyError, TypeError, AttributeError, ValueError) as exc:
        raise AuditEventError(f"malformed audit event ({exc!r}): {bytes(data[:120])!r}") from None
    if event.window_ms <= 0 or any(count < 0 for count in event.counts.values()):
        raise AuditEventError(f"audit event with a bad window or count: {bytes(data[:120])!r}")
    return event


def _integer(value) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{value!r} is not an integer")
    return value
