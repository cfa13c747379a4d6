"""Produced versus received, per window, for one topic: the arithmetic of
``mpbroker-audit``, free of I/O.

The ledger is fed the audit events of the producers (``add_event``: what they say
they delivered, by creation window) and the envelopes of the messages read from the
topic (``add_message``: what arrived). Received messages are counted once per
(host, client, sequence), so the duplicates an at-least-once pipeline makes (a mirror
restarted after a kill) are reported as duplicates, not as extra messages; events
are counted once per (host, client, event).

``report(now_ms, grace_ms)`` judges a window only once it is complete: its end plus
the grace period lies in the past (late events and late messages have had time to
arrive). Each producer's count is compared with what arrived from that producer: a
complete window is ``ok`` when they are equal for every producer, ``missing`` when
fewer arrived than some producer delivered (messages lost), else ``extra`` when more
distinct messages arrived than some producer counted (its event was lost, or a batch
was reported failed although part of it arrived). Newer windows are ``open``.

Memory: one set entry per distinct message read (its sequence number), so an audit of
a large topic is bounded by what the topic still holds (``--since`` limits the report,
not the read).
"""

from typing import NamedTuple

from mpbroker.clients.core.audit_events import AuditEvent, enclosing_window, window_start

OK, MISSING, EXTRA, OPEN = "ok", "missing", "extra", "open"


class ProducerCounts(NamedTuple):
    host: str
    client: str
    produced: int
    received: int
    duplicates: int


class WindowReport(NamedTuple):
    start_ms: int
    end_ms: int
    produced: int
    received: int  # distinct messages
    duplicates: int  # copies beyond the first
    status: str
    producers: list  # [ProducerCounts], sorted by producer

    @property
    def discrepancy(self) -> bool:
        return self.status in (MISSING, EXTRA)

    def as_dict(self) -> dict:
        return {"start_ms": self.start_ms, "end_ms": self.end_ms, "produced": self.produced,
                "received": self.received, "duplicates": self.duplicates, "status": self.status,
                "producers": [p._asdict() for p in self.producers]}


class AuditLedger:
    def __init__(self, topic: str, window_ms: int):
        if window_ms <= 0:
            raise ValueError("the audit window must be positive")
        self.topic = topic
        self.window_ms = window_ms
        self._produced = {}  # window start -> {(host, client): messages}
        self._sequences = {}  # window start -> {(host, client): set of sequences}
        self._copies = {}  # window start -> {(host, client): messages read, duplicates included}
        self._events_seen = set()  # (host, client, event)
        self.events = 0  # distinct events that counted this topic
        self.duplicate_events = 0
        self.misaligned_events = []  # events whose window does not fit in ours: cannot be compared
        self.unstamped = 0  # messages without an envelope: not audited
        self.malformed = 0  # messages with a damaged envelope

    def add_event(self, event: AuditEvent) -> None:
        count = event.counts.get(self.topic)
        if count is None:
            return
        key = (event.host, event.client, event.event)
        if key in self._events_seen:
            self.duplicate_events += 1
            return
        self._events_seen.add(key)
        start = enclosing_window(event.window_start_ms, event.window_ms, self.window_ms)
        if start is None:
            self.misaligned_events.append(event)
            return
        self.events += 1
        by_producer = self._produced.setdefault(start, {})
        by_producer[event.producer] = by_producer.get(event.producer, 0) + count

    def unfit_producers(self) -> dict:
        """``{(host, client): audit.window.ms}`` of the producers whose windows do not fit
        in ours (ours is no multiple of theirs): their counts cannot be compared, and a
        tool refuses such a window rather than report what arrived as extra."""
        return {event.producer: event.window_ms for event in self.misaligned_events
                if self.window_ms % event.window_ms}

    def add_message(self, created_ms: int, host: str, client: str, sequence: int) -> None:
        start = window_start(created_ms, self.window_ms)
        producer = (host, client)
        self._sequences.setdefault(start, {}).setdefault(producer, set()).add(sequence)
        copies = self._copies.setdefault(start, {})
        copies[producer] = copies.get(producer, 0) + 1

    def report(self, now_ms: int, grace_ms: int, since_ms: int | None = None) -> list:
        """A WindowReport per window that has counts, oldest first (from ``since_ms`` on)."""
        reports = []
        for start in sorted(set(self._produced) | set(self._sequences)):
            if since_ms is not None and start + self.window_ms <= since_ms:
                continue
            produced = self._produced.get(start, {})
            sequences = self._sequences.get(start, {})
            copies = self._copies.get(start, {})
            producers = []
            for host, client in sorted(set(produced) | set(sequences)):
                distinct = len(sequences.get((host, client), ()))
                producers.append(ProducerCounts(host, client, produced.get((host, client), 0), distinct,
                                                copies.get((host, client), 0) - distinct))
            total_produced = sum(p.produced for p in producers)
            received = sum(p.received for p in producers)
            end = start + self.window_ms
            if end + grace_ms > now_ms:
                status = OPEN
            elif any(p.produced > p.received for p in producers):
                status = MISSING
            elif any(p.produced < p.received for p in producers):
                status = EXTRA
            else:
                status = OK
            reports.append(WindowReport(start, end, total_produced, received, sum(p.duplicates for p in producers),
                                        status, producers))
        return reports
