"""A producer's audit trail (``audit.envelope=true``): stamping, counting, publishing.

``ProducerAuditor`` takes the place of the producer's callbacks (the user's
``callback.handler`` still runs, inside it), so a producer without audit runs exactly
the code it ran before:

- ``before_enqueue`` wraps each payload in an envelope (``mpbroker.clients.core.envelope``): the
  creation time (when ``send`` was called), this producer's host and client id, and
  a per-producer sequence number;
- ``after_send`` counts the delivered messages per topic and per creation window of
  ``audit.window.ms`` (delivered: acknowledged with ``acks=append|flush``, written to
  the socket with ``acks=none``; a batch whose delivery failed is not counted -- its
  caller was told, or the async sender logged it);
- a thread publishes, once per window (at each window's end plus the async queue's
  ``queue.time`` and 250 ms, at most half a window later, so that the window's last
  messages were delivered), one event per ended window to ``audit.topic``
  (``mpbroker.clients.core.audit_events``); messages of a window delivered after its event went
  out are published with the next one (events add up). ``close`` publishes
  everything counted, the current window included.

Events go through a producer of their own (sync, ``acks=append``, the same brokers or
ZooKeeper: ``event_producer_properties``; the Producer hands in how to make one, so this
module does not import the producer), so that they are acknowledged even when the audited producer fires and
forgets, and never wait in its queue. An event that could not be delivered is kept
and sent again, with the same event number, at the next window.
"""

import itertools
import logging
import os
import secrets
import socket
import threading
import time

from mpbroker.clients.core import envelope
from mpbroker.clients.core.audit_events import AuditEvent, encode_event, window_start

log = logging.getLogger(__name__)

MIN_PUBLISH_DELAY_MS = 250


def default_client_id() -> str:
    """``<pid>-<6 hex>``: unique per producer, also across restarts that reuse a pid."""
    return f"{os.getpid()}-{secrets.token_hex(3)}"


def host_name() -> str:
    name = socket.gethostname() or "localhost"
    return name.encode("utf-8")[:envelope.MAX_NAME_BYTES].decode("utf-8", "ignore")


def event_producer_properties(settings) -> dict:
    """The properties of the producer that publishes an audited producer's events."""
    discovery = {"zk.connect": settings.zk_connect} if settings.zk_connect else {"broker.list": settings.broker_list}
    return {
        **discovery, "acks": "append", "producer.type": "sync",
        "zk.sessiontimeout.ms": settings.zk_sessiontimeout_ms,
        "zk.connectiontimeout.ms": settings.zk_connectiontimeout_ms,
        "connect.timeout.ms": settings.connect_timeout_ms, "socket.timeout.ms": settings.socket_timeout_ms,
        "num.retries": settings.num_retries, "retry.backoff.ms": settings.retry_backoff_ms,
    }


class ProducerAuditor:
    """``make_producer(properties)`` makes the events' producer (the Producer class)."""

    def __init__(self, settings, callbacks, make_producer, *, host: str | None = None, client: str | None = None):
        self.settings = settings
        self._make_producer = make_producer
        self.host = host or host_name()
        self.client = client or default_client_id()
        self.topic = settings.audit_topic
        self.window_ms = settings.audit_window_ms
        queue_time = settings.queue_time if settings.producer_type == "async" else 0
        self.publish_delay_ms = min(max(self.window_ms // 2, 1), queue_time + MIN_PUBLISH_DELAY_MS)
        self._inner = callbacks
        self._stamp = envelope.stamper(self.host, self.client)
        self._sequence = itertools.count()  # next() is atomic: send() may run on several threads
        self._event_numbers = itertools.count()
        self._lock = threading.Lock()  # the counts; the publisher swaps them out
        self._counts = {}  # window start -> {topic: messages delivered}
        self._unsent = []  # AuditEvents not acknowledged yet, oldest first
        self._publish_lock = threading.Lock()  # one publication at a time
        self._event_producer = None
        self._closed = threading.Event()
        self.events_published = 0
        self._thread = threading.Thread(target=self._run, name="mpbroker-producer-audit", daemon=True)
        self._thread.start()

    # --- the producer's callbacks ---------------------------------------------------

    def before_enqueue(self, topic, key, payload):
        payload = self._inner.before_enqueue(topic, key, payload)
        if payload is None:
            return None
        if isinstance(payload, str):
            payload = payload.encode("utf-8")
        return self._stamp(bytes(payload), int(time.time() * 1000), next(self._sequence))

    def before_send(self, batch):
        return self._inner.before_send(batch)

    def after_send(self, batch, results):
        window_ms = self.window_ms
        magic = envelope.MAGIC
        created_ms = envelope.created_ms
        with self._lock:
            counts = self._counts
            for topic, _, payload in batch:
                if payload[:4] == magic:
                    start = window_start(created_ms(payload), window_ms)
                    by_topic = counts.get(start)
                    if by_topic is None:
                        by_topic = counts[start] = {}
                    by_topic[topic] = by_topic.get(topic, 0) + 1
        self._inner.after_send(batch, results)

    def on_error(self, batch, error):
        self._inner.on_error(batch, error)

    # --- publishing -----------------------------------------------------------------

    def pending_counts(self) -> dict:
        """``{window start: {topic: messages}}`` counted and not published yet (a copy)."""
        with self._lock:
            return {start: dict(by_topic) for start, by_topic in self._counts.items()}

    def publish(self, ended_by_ms: int | None = None) -> bool:
        """Publish the counts of every window that ended by ``ended_by_ms`` (None: every
        window, the current one too) and the events still unsent; True if nothing is
        left unsent."""
        with self._publish_lock:
            with self._lock:
                starts = sorted(start for start in self._counts
                                if ended_by_ms is None or start + self.window_ms <= ended_by_ms)
                taken = [(start, self._counts.pop(start)) for start in starts]
            now_ms = int(time.time() * 1000)
            for start, by_topic in taken:
                self._unsent.append(AuditEvent(self.host, self.client, next(self._event_numbers), start,
                                               self.window_ms, by_topic, now_ms))
            while self._unsent:
                event = self._unsent[0]
                try:
                    self._producer().send(self.topic, encode_event(event))
                except Exception as exc:  # kept; sent again at the next window
                    log.warning("could not publish %d audit event(s) to %s: %s; trying again later",
                                len(self._unsent), self.topic, exc)
                    return False
                self._unsent.pop(0)
                self.events_published += 1
            return True

    def _producer(self):
        if self._event_producer is None:
            self._event_producer = self._make_producer(event_producer_properties(self.settings))
        return self._event_producer

    def _run(self) -> None:
        window_ms, delay_ms = self.window_ms, self.publish_delay_ms
        while True:
            now_ms = time.time() * 1000
            tick_ms = window_start(int(now_ms) - delay_ms, window_ms) + window_ms + delay_ms  # the next one
            if self._closed.wait(max(0.0, tick_ms - now_ms) / 1000):
                return
            try:
                self.publish(int(time.time() * 1000) - self.publish_delay_ms)
            except Exception:  # the thread must go on: the next window tries again
                log.exception("publishing audit events")

    def close(self) -> bool:
        """Publish everything counted (the current window too) and stop; False if some
        events could not be delivered (they are logged)."""
        if self._closed.is_set():
            return not self._unsent
        self._closed.set()
        self._thread.join()
        try:
            published = self.publish(None)
        finally:
            if self._event_producer is not None:
                self._event_producer.close()
        if not published:
            log.error("audit events lost at close: %s", self._unsent)
        return published
