"""What the mirror shows of itself: Prometheus metrics and a periodic log line.

Metrics (one registry per mirror, served by ``serve`` at ``/metrics``):

    mpbroker_mirror_messages_total{source, topic}    messages the target acknowledged
    mpbroker_mirror_bytes_total{source, topic}       their payload bytes
    mpbroker_mirror_dropped_messages_total{source, topic}  refused by the target for good
    mpbroker_mirror_errors_total{kind}               failed deliveries (retried), commits, lag reads
    mpbroker_mirror_lag_bytes{source, topic, partition}    source log end - mirrored offset
    mpbroker_mirror_owned_partitions{source}         source partitions this mirror holds

``source`` is the source cluster's zk.connect and ``partition`` is
``<broker>-<partition>``. The lag is read every report interval (one OFFSETS request
per owned partition to its source broker; offsets are bytes, so is the lag): the
distance between the source's log end and the offset the mirror would resume from.

The log line, every report interval: messages and bytes mirrored since the last
line and their rates, partitions owned, total lag, errors and drops so far.
"""

import logging
import threading
import time

from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server

log = logging.getLogger("mpbroker.clients.mirror.mirror_maker")


class MirrorMetrics:
    def __init__(self):
        self.registry = CollectorRegistry(auto_describe=True)
        self.messages = Counter("mpbroker_mirror_messages", "messages mirrored (acknowledged by the target)",
                                ["source", "topic"], registry=self.registry)
        self.bytes = Counter("mpbroker_mirror_bytes", "payload bytes mirrored", ["source", "topic"],
                             registry=self.registry)
        self.dropped = Counter("mpbroker_mirror_dropped_messages",
                               "messages the target refused for good (too large, invalid)", ["source", "topic"],
                               registry=self.registry)
        self.errors = Counter("mpbroker_mirror_errors", "failures (deliveries are retried)", ["kind"],
                              registry=self.registry)
        self.lag = Gauge("mpbroker_mirror_lag_bytes", "source log end minus the mirrored offset",
                         ["source", "topic", "partition"], registry=self.registry)
        self.owned = Gauge("mpbroker_mirror_owned_partitions", "source partitions this mirror holds", ["source"],
                           registry=self.registry)
        self._lock = threading.Lock()
        self.total_messages = 0
        self.total_bytes = 0
        self.total_errors = 0
        self.total_dropped = 0
        self._lag_labels = set()
        self._server = None

    def delivered(self, source: str, items) -> None:
        """``items``: the (topic, key, payload) the target acknowledged."""
        per_topic = {}
        nbytes = 0
        count = 0
        for topic, _, payload in items:
            size = len(payload)
            nbytes += size
            count += 1
            counts = per_topic.get(topic)
            if counts is None:
                per_topic[topic] = [1, size]
            else:
                counts[0] += 1
                counts[1] += size
        for topic, (messages, size) in per_topic.items():
            self.messages.labels(source, topic).inc(messages)
            self.bytes.labels(source, topic).inc(size)
        with self._lock:
            self.total_messages += count
            self.total_bytes += nbytes

    def dropped_message(self, source: str, topic: str) -> None:
        self.dropped.labels(source, topic).inc()
        with self._lock:
            self.total_dropped += 1

    def error(self, kind: str) -> None:
        self.errors.labels(kind).inc()
        with self._lock:
            self.total_errors += 1

    def set_lag(self, lags: dict, owned: dict) -> None:
        """``lags``: {(source, topic, "<b>-<p>"): bytes}; ``owned``: {source: partitions}."""
        for labels in self._lag_labels - set(lags):
            self.lag.remove(*labels)  # a partition this mirror no longer holds
        for labels, value in lags.items():
            self.lag.labels(*labels).set(value)
        self._lag_labels = set(lags)
        for source, count in owned.items():
            self.owned.labels(source).set(count)

    def serve(self, port: int, host: str = "0.0.0.0") -> int:
        """Serve ``/metrics`` over HTTP; returns the port (``port`` 0 picks a free one)."""
        self._server, _ = start_http_server(port, addr=host, registry=self.registry)
        return self._server.server_address[1]

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


class MirrorReporter(threading.Thread):
    """Every ``interval_s``: reads the lag (``read_lag() -> (lags, owned)``, see
    ``MirrorMetrics.set_lag``), updates the gauges and logs one line."""

    def __init__(self, metrics: MirrorMetrics, read_lag, interval_s: float):
        super().__init__(name="mpbroker-mirror-reporter", daemon=True)
        self.metrics = metrics
        self.read_lag = read_lag
        self.interval_s = interval_s
        self._stop_event = threading.Event()

    def stop(self) -> None:
        self._stop_event.set()

    def run(self) -> None:
        metrics = self.metrics
        last_time, last_messages, last_bytes = time.monotonic(), metrics.total_messages, metrics.total_bytes
        while not self._stop_event.wait(self.interval_s):
            try:
                lags, owned = self.read_lag()
                metrics.set_lag(lags, owned)
            except Exception as exc:  # the report goes on without the lag
                metrics.error("lag")
                log.warning("reading the mirror's lag failed: %r", exc)
                lags, owned = None, None
            now = time.monotonic()
            messages, nbytes = metrics.total_messages, metrics.total_bytes
            elapsed = max(now - last_time, 1e-9)
            lag_text = "unknown" if lags is None else f"{sum(lags.values())} bytes"
            owned_text = "?" if owned is None else str(sum(owned.values()))
            log.info("mirrored %d messages (%.2f MB) in %.1fs: %.0f msg/s, %.2f MB/s; %s partitions owned; "
                     "lag %s; %d errors, %d dropped so far", messages - last_messages, (nbytes - last_bytes) / 1e6,
                     elapsed, (messages - last_messages) / elapsed, (nbytes - last_bytes) / 1e6 / elapsed,
                     owned_text, lag_text, metrics.total_errors, metrics.total_dropped)
            last_time, last_messages, last_bytes = now, messages, nbytes
