"""What the metrics endpoint reports: a prometheus_client collector over the broker's
shared memory, read afresh at every scrape.

Sources, all written by other processes and only read here:
- the slot table: each process's state, restarts and start time;
- the workers' partition tables: per partition its size, offsets, segments, unflushed
  bytes and what was appended;
- the counter table: the acceptor's requests, bytes and connections, the workers'
  flushes and their latency and ISR changes, the registrar's controller flag
  (``mpbroker/ipc/counters.py``);
- ``statvfs`` of log.dir: the free space;
- the acceptor's snapshot of the modern consumer groups it coordinates: their states,
  members, commits and lag (``group_families``).

Every name starts with ``mpbroker_``. Counters keep counting across respawns (their
rows belong to the supervisor), so ``rate()`` over them is sound.
"""

import os

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

from mpbroker import __version__
from mpbroker.ipc import counters as c
from mpbroker.ipc.partition_table import Role, published_partitions
from mpbroker.ipc.slot_table import SlotState
from mpbroker.kafka_protocol.api import ApiKey
from mpbroker.metrics.group_families import group_families

_MODERN_API_NAMES = {int(key): key.name.lower() for key in ApiKey}


class BrokerCollector:
    def __init__(self, config, tables, slots, counters, processes, group_snapshot=None):
        """``processes``: ``[(slot, name, role)]`` of every supervisor child;
        ``group_snapshot``: the acceptor's modern consumer groups (None: kafka.port off)."""
        self.config = config
        self.tables = tables
        self.slots = slots
        self.counters = counters
        self.processes = processes
        self.group_snapshot = group_snapshot

    def collect(self):
        yield from self._broker()
        yield from self._processes()
        yield from self._requests()
        yield from self._flushes()
        yield from self._replication()
        yield from self._partitions()
        yield from group_families(self.group_snapshot)

    def _broker(self):
        info = GaugeMetricFamily("mpbroker_info", "the broker's id and version (always 1)",
                                 labels=["brokerid", "version"])
        info.add_metric([str(self.config.brokerid), __version__], 1)
        yield info
        try:
            disk = os.statvfs(self.config.log_dir)
        except OSError:
            return
        yield GaugeMetricFamily("mpbroker_log_dir_free_bytes", "space left for log.dir's filesystem (unprivileged)",
                                value=disk.f_bavail * disk.f_frsize)
        yield GaugeMetricFamily("mpbroker_log_dir_size_bytes", "size of log.dir's filesystem",
                                value=disk.f_blocks * disk.f_frsize)

    def _processes(self):
        up = GaugeMetricFamily("mpbroker_process_up", "1 if the process in the slot serves, else 0",
                               labels=["process"])
        restarts = CounterMetricFamily("mpbroker_process_restarts", "times the supervisor restarted the process",
                                       labels=["process"])
        started = GaugeMetricFamily("mpbroker_process_start_time_seconds", "when the process was last started",
                                    labels=["process"])
        for slot, name, _ in self.processes:
            state = self.slots.read(slot)
            up.add_metric([name], 1 if state.state == SlotState.UP else 0)
            restarts.add_metric([name], state.restarts)
            if state.started_ms:
                started.add_metric([name], state.started_ms / 1000)
        yield from (up, restarts, started)

    def _acceptor_row(self):
        return next((self.counters.read(slot) for slot, _, role in self.processes if role == "acceptor"), None)

    def _requests(self):
        row = self._acceptor_row()
        if row is None:
            return
        requests = CounterMetricFamily("mpbroker_requests", "requests received, by type", labels=["type"])
        for index, kind in enumerate(c.REQUEST_KINDS):
            requests.add_metric([kind], row[c.REQUESTS + index])
        yield requests
        modern = CounterMetricFamily("mpbroker_kafka_requests", "modern Kafka protocol requests received (kafka.port), "
                                     "by API", labels=["api"])
        for index, key in enumerate(c.MODERN_API_KEYS):
            modern.add_metric([_MODERN_API_NAMES[key]], row[c.KAFKA_REQUESTS + index])
        yield modern
        yield CounterMetricFamily("mpbroker_kafka_connections_accepted",
                                  "client connections accepted on kafka.port (counted in the totals too)",
                                  value=row[c.KAFKA_CONNECTIONS_ACCEPTED])
        yield GaugeMetricFamily("mpbroker_kafka_connections_open", "client connections open now on kafka.port",
                                value=row[c.KAFKA_CONNECTIONS_OPEN])
        for name, index, documentation in (
                ("mpbroker_malformed_requests", c.MALFORMED_REQUESTS, "requests refused as malformed"),
                ("mpbroker_received_bytes", c.BYTES_RECEIVED, "bytes received from clients"),
                ("mpbroker_sent_bytes", c.BYTES_SENT, "bytes sent to clients, sendfile included"),
                ("mpbroker_connections_accepted", c.CONNECTIONS_ACCEPTED, "client connections accepted"),
                ("mpbroker_connections_refused", c.CONNECTIONS_REFUSED,
                 "client connections refused (max.connections, max.connections.per.ip, no file descriptors)")):
            yield CounterMetricFamily(name, documentation, value=row[index])
        yield GaugeMetricFamily("mpbroker_connections_open", "client connections open now",
                                value=row[c.CONNECTIONS_OPEN])

    def _flushes(self):
        latency = HistogramMetricFamily("mpbroker_flush_duration_seconds", "time of each log flush (fdatasync)",
                                        labels=["worker"])
        failures = CounterMetricFamily("mpbroker_flush_failures", "log flushes that failed", labels=["worker"])
        for slot, _, role in self.processes:
            if role != "worker":
                continue
            row = self.counters.read(slot)
            buckets, total = [], 0
            for bound, count in zip((*c.FLUSH_BOUNDS_S, float("inf")), row[c.FLUSH_BUCKETS:]):
                total += count
                buckets.append(("+Inf" if bound == float("inf") else repr(bound), total))
            latency.add_metric([str(slot)], buckets, row[c.FLUSH_MICROSECONDS] / 1_000_000)
            failures.add_metric([str(slot)], row[c.FLUSH_FAILURES])
        yield latency
        yield failures

    def _replication(self):
        shrinks = CounterMetricFamily("mpbroker_isr_shrinks", "ISRs of partitions led here that lost members",
                                      labels=["worker"])
        expands = CounterMetricFamily("mpbroker_isr_expands", "ISRs of partitions led here that gained members",
                                      labels=["worker"])
        for slot, _, role in self.processes:
            if role == "worker":
                row = self.counters.read(slot)
                shrinks.add_metric([str(slot)], row[c.ISR_SHRINKS])
                expands.add_metric([str(slot)], row[c.ISR_EXPANDS])
            elif role == "registrar":
                row = self.counters.read(slot)
                yield GaugeMetricFamily("mpbroker_controller", "1 while this broker is the cluster's controller",
                                        value=row[c.CONTROLLER])
                yield GaugeMetricFamily("mpbroker_controller_epoch", "the controller epoch while it is, else 0",
                                        value=row[c.CONTROLLER_EPOCH])
        yield shrinks
        yield expands
        rows = published_partitions(self.tables)
        yield GaugeMetricFamily("mpbroker_under_replicated_partitions",
                                "partitions led here whose ISR is smaller than their replicas",
                                value=sum(1 for *_, state in rows if state.under_replicated))

    def _partitions(self):
        labels = ["topic", "partition"]
        families = {
            "size": GaugeMetricFamily("mpbroker_partition_size_bytes", "bytes in the partition's log", labels=labels),
            "end": GaugeMetricFamily("mpbroker_partition_log_end_offset", "the offset the next message gets",
                                     labels=labels),
            "start": GaugeMetricFamily("mpbroker_partition_log_start_offset", "the oldest offset still kept",
                                       labels=labels),
            "unflushed": GaugeMetricFamily("mpbroker_partition_unflushed_bytes",
                                           "bytes appended but not yet flushed to disk", labels=labels),
            "segments": GaugeMetricFamily("mpbroker_partition_segments", "segment files of the partition",
                                          labels=labels),
            "flushed_at": GaugeMetricFamily("mpbroker_partition_last_flush_time_seconds",
                                            "when the partition was last flushed", labels=labels),
            "messages": CounterMetricFamily("mpbroker_partition_messages_in", "messages appended since the start",
                                            labels=labels),
            "bytes": CounterMetricFamily("mpbroker_partition_bytes_in", "bytes appended since the start",
                                         labels=labels),
            "leader": GaugeMetricFamily("mpbroker_partition_leader",
                                        "replicated partitions: 1 where this broker leads, 0 elsewhere", labels=labels),
            "high_watermark": GaugeMetricFamily("mpbroker_partition_high_watermark",
                                                "replicated partitions: what every in-sync replica has",
                                                labels=labels),
            "isr": GaugeMetricFamily("mpbroker_partition_in_sync_replicas",
                                     "replicated partitions: the ISR's size as this broker knows it", labels=labels),
        }
        for topic, partition, _, state in sorted(published_partitions(self.tables), key=lambda row: row[:2]):
            key = [topic, str(partition)]
            families["size"].add_metric(key, state.log_end - state.log_start)
            families["end"].add_metric(key, state.log_end)
            families["start"].add_metric(key, state.log_start)
            families["unflushed"].add_metric(key, state.log_end - state.flushed_end)
            families["segments"].add_metric(key, state.segment_count)
            if state.last_flush_ms:
                families["flushed_at"].add_metric(key, state.last_flush_ms / 1000)
            families["messages"].add_metric(key, state.messages_in)
            families["bytes"].add_metric(key, state.bytes_in)
            if state.role != Role.UNREPLICATED:
                families["leader"].add_metric(key, 1 if state.role == Role.LEADER else 0)
                families["high_watermark"].add_metric(key, state.high_watermark)
                families["isr"].add_metric(key, len(state.isr))
        yield from families.values()
