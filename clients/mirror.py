"""The mirror: copies the topics a filter takes from one or more source clusters into
a target cluster (0.7's MirrorMaker; ``mpbroker-mirror`` runs it).

    mirror = Mirror(MirrorConfig(sources=["zk-a:2181/kafka"], target="zk-b:2181/kafka",
                                 topic_filter=Whitelist("logs-.*"))).start()
    ...
    mirror.stop()

Per source cluster, a ConsumerConnector of the consumer group ``group`` subscribes
with the filter (``num_streams`` streams; topics created later that match are picked
up by its rebalance, new partitions start at the smallest offset) and one thread per
stream takes messages into batches (``batch_size`` messages, or what arrived within
``linger_ms``). One Producer on the target (its ``zk.connect``, acknowledged produces:
``acks=append``, or ``flush`` to count a message only once it is on the target's disk)
delivers each batch; the messages are passed through as they are (audit envelopes
included), placed by ``clients.mirror_placement``.

At least once, no gaps: the connector runs with ``autofinish.enable=false``; a batch
is marked finished (``mark_finished``) only after the target acknowledged all of it,
and every commit -- every ``autocommit.interval.ms`` (1 s here), on a rebalance, on
stop -- stores finished offsets only. A mirror killed at any moment therefore
restarts from offsets whose messages are all on the target; what it had sent since
the last commit is sent again (duplicates, never gaps). A delivery that fails (the
target away, a partition restarting) is retried with a growing back-off, for as long
as it takes; the stream waits meanwhile (back-pressure to the source fetchers). A
message the target refuses for good (larger than its ``max.message.size``, invalid)
is found by resending the batch message by message (so the rest of that batch may
reach the target twice), logged, counted in ``mpbroker_mirror_dropped_messages_total``
and skipped: one bad message must not stop the pipeline, and the audit shows the loss.

A topic the target has not registered yet goes, in 0.7, to partition 0 of each target
broker until a broker registers it. So that placement holds from the first message,
the mirror sends one message of such a topic alone first (one from source position 0
if the batch has one: it belongs on the target's first partition anyway), waits up to
``bootstrap_wait_s`` for the target to register the topic, then sends the rest.
"""

import logging
import threading
import time
from dataclasses import dataclass, field
from operator import itemgetter

from clients.consumer import SimpleConsumer
from clients.errors import ClientError
from clients.message_stream import ConsumerTimeoutError
from clients.mirror_metrics import MirrorMetrics, MirrorReporter
from clients.mirror_placement import SourcePositions, position_partitioner
from clients.producer import Producer
from clients.topic_filter import TopicFilter
from clients.zk_brokers import ZkBrokerPartitions
from clients.zk_consumer import ConsumerConnector
from mpbroker.errors import InvalidMessageError, InvalidTopicError, MessageSizeTooLargeError, MPBrokerError
from mpbroker.registry import layout

log = logging.getLogger(__name__)

DEFAULT_GROUP = "mpbroker-mirror"
REFUSED = (MessageSizeTooLargeError, InvalidMessageError, InvalidTopicError)  # retrying cannot help
RETRIABLE = (ClientError, MPBrokerError, OSError)
MAX_BACKOFF_S = 5.0
WARN_EVERY_S = 10.0
REGISTRATION_POLL_S = 0.05


class _Abandoned(Exception):
    """The stop's time ran out while a batch was still undelivered (it is not marked
    finished, so it is mirrored again by the next run)."""


@dataclass
class MirrorConfig:
    sources: list  # zk.connect of each source cluster
    target: str  # zk.connect of the target cluster
    topic_filter: TopicFilter
    num_streams: int = 1  # streams (threads) per source cluster
    group: str = DEFAULT_GROUP  # the consumer group on every source cluster
    acks: str = "append"  # append | flush: when the target's acknowledgement comes
    batch_size: int = 500  # messages per delivery
    linger_ms: int = 100  # the longest a message waits for its batch to fill
    report_interval_s: float = 10.0  # log line and lag read
    stop_timeout_s: float = 30.0  # stop(): the longest to wait for batches in flight
    bootstrap_wait_s: float = 10.0  # the longest to wait for the target to register a new topic
    consumer_properties: dict = field(default_factory=dict)  # more ConsumerConnector settings
    producer_properties: dict = field(default_factory=dict)  # more Producer settings

    def check(self) -> None:
        if not self.sources:
            raise ValueError("at least one source cluster is needed")
        targets = {layout.split_zk_connect(self.target)}
        for source in self.sources:
            if layout.split_zk_connect(source) in targets:
                raise ValueError(f"source {source!r} is the target cluster (or another source) itself")
            targets.add(layout.split_zk_connect(source))
        layout.check_group(self.group)
        if not isinstance(self.topic_filter, TopicFilter):
            raise ValueError("topic_filter must be a Whitelist or a Blacklist")
        if self.acks not in ("append", "flush"):
            raise ValueError(f"acks: {self.acks!r} is neither append nor flush (the mirror needs acknowledgements)")
        if self.num_streams < 1 or self.batch_size < 1 or self.linger_ms < 0:
            raise ValueError("num_streams and batch_size must be at least 1, linger_ms at least 0")


class _Source:
    """One source cluster: its connector, its partitions (positions and lag) and streams."""

    def __init__(self, zk_connect: str):
        self.zk_connect = zk_connect
        self.connector = None
        self.partitions = None  # ZkBrokerPartitions
        self.positions = None  # SourcePositions
        self.lag_readers = {}  # broker id -> SimpleConsumer (the reporter thread's)

    def close(self) -> None:
        if self.connector is not None:
            self.connector.shutdown()  # commits the finished offsets, leaves the group
        if self.partitions is not None:
            self.partitions.close()
        for reader in self.lag_readers.values():
            reader.close()


class Mirror:
    def __init__(self, config: MirrorConfig, metrics: MirrorMetrics | None = None):
        config.check()
        self.config = config
        self.metrics = metrics or MirrorMetrics()
        self.failure = None  # the exception that stopped a stream thread
        self.failed = threading.Event()
        self._sources = [_Source(zk_connect) for zk_connect in config.sources]
        self._producer = None
        self._threads = []
        self._reporter = None
        self._stopping = threading.Event()
        self._abandon = threading.Event()
        self._registered_topics = set()  # topics the target has registered (placement holds)
        self._bootstrap_lock = threading.Lock()
        self._last_warning = 0.0

    # --- life cycle -------------------------------------------------------------------

    def start(self) -> "Mirror":
        config = self.config
        try:
            # The settings the guarantees rest on come last: properties cannot change them.
            self._producer = Producer({
                "partitioner.class": position_partitioner, **config.producer_properties,
                "zk.connect": config.target, "producer.type": "sync", "acks": config.acks,
                "audit.envelope": "false"})  # messages pass through as they are
            for number, source in enumerate(self._sources):
                source.partitions = ZkBrokerPartitions(source.zk_connect)
                source.positions = SourcePositions(source.partitions.partitions)
                source.connector = ConsumerConnector({
                    "autocommit.interval.ms": 1000, "autooffset.reset": "smallest", **config.consumer_properties,
                    "zk.connect": source.zk_connect, "groupid": config.group, "autofinish.enable": "false",
                    "autocommit.enable": "true", "audit.envelope": "false",
                    "consumer.timeout.ms": max(10, config.linger_ms)})
                streams = source.connector.create_message_streams_by_filter(config.topic_filter, config.num_streams)
                for index, stream in enumerate(streams):
                    thread = threading.Thread(target=self._run_stream, args=(source, stream),
                                              name=f"mpbroker-mirror-{number}-{index}", daemon=True)
                    self._threads.append(thread)
            for thread in self._threads:
                thread.start()
        except BaseException:
            self._close_clients()
            raise
        self._reporter = MirrorReporter(self.metrics, self.read_lag, config.report_interval_s)
        self._reporter.start()
        log.info("mirroring %s from %s into %s (group %s, %d stream(s) per source)", config.topic_filter,
                 ", ".join(config.sources), config.target, config.group, config.num_streams)
        return self

    def stop(self) -> bool:
        """Deliver the batches in flight, commit, leave the groups, close; False if some
        batch could not be delivered within ``stop_timeout_s`` (it is mirrored again by
        the next run: its offsets were not committed)."""
        self._stopping.set()
        deadline = time.monotonic() + self.config.stop_timeout_s
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        delivered = not any(thread.is_alive() for thread in self._threads)
        if not delivered:
            self._abandon.set()
            for thread in self._threads:
                thread.join(5.0)
        if self._reporter is not None:
            self._reporter.stop()
            self._reporter.join(5.0)
        self._close_clients()
        log.info("mirror stopped")
        return delivered

    def __enter__(self) -> "Mirror":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def _close_clients(self) -> None:
        for source in self._sources:
            try:
                source.close()
            except Exception:  # the others still close
                log.exception("closing the clients of source %s", source.zk_connect)
        if self._producer is not None:
            self._producer.close()

    # --- one stream --------------------------------------------------------------------

    def _run_stream(self, source: _Source, stream) -> None:
        batch_size = self.config.batch_size
        linger_s = self.config.linger_ms / 1000
        stopping = self._stopping
        batch = []
        started = 0.0
        try:
            while not stopping.is_set():
                try:
                    message = next(stream)
                except ConsumerTimeoutError:
                    if batch:
                        self._deliver(source, batch)
                        batch = []
                    continue
                except StopIteration:
                    break
                batch.append(message)
                if len(batch) == 1:
                    started = time.monotonic()
                    if batch_size > 1:
                        continue
                if len(batch) >= batch_size or time.monotonic() - started >= linger_s:
                    self._deliver(source, batch)
                    batch = []
            if batch:
                self._deliver(source, batch)
        except _Abandoned:
            log.warning("stopping with %d undelivered message(s) of %s: they are mirrored again next time",
                        len(batch), source.zk_connect)
        except Exception as exc:
            log.exception("a mirror stream of %s failed", source.zk_connect)
            self.failure = exc
            self.failed.set()

    def _deliver(self, source: _Source, batch: list) -> None:
        """Deliver ``batch`` to the target (retrying until it is acknowledged), then mark
        it finished on the source."""
        position = source.positions.lookup()
        items = [(m.topic, position(m.topic, m.broker_id, m.partition), m.payload) for m in batch]
        dropped = []
        rest = items
        if not self._registered_topics.issuperset(map(itemgetter(0), items)):
            rest = self._bootstrap(source, items, dropped)
        dropped += self._send(source, rest)
        source.connector.mark_finished(batch)
        if dropped:
            lost = {id(item) for item in dropped}
            items = [item for item in items if id(item) not in lost]
        self.metrics.delivered(source.zk_connect, items)

    def _send(self, source: _Source, items: list) -> list:
        """Deliver ``items``, retrying what can succeed later; returns the items the
        target refused for good (dropped)."""
        backoff = 0.1
        while True:
            try:
                self._producer.deliver(items)
                return []
            except REFUSED as exc:
                if len(items) == 1:
                    topic = items[0][0]
                    log.error("the target refused a %d-byte message of %s from %s for good (%s); dropping it",
                              len(items[0][2]), topic, source.zk_connect, exc)
                    self.metrics.dropped_message(source.zk_connect, topic)
                    return list(items)
                dropped = []
                for item in items:  # find the message(s) refused: the others go through
                    dropped += self._send(source, [item])
                return dropped
            except RETRIABLE as exc:
                self.metrics.error("delivery")
                now = time.monotonic()
                if now - self._last_warning >= WARN_EVERY_S:
                    self._last_warning = now
                    log.warning("delivering %d message(s) to the target failed (%s); retrying", len(items), exc)
                if self._abandon.wait(backoff):
                    raise _Abandoned() from exc
                backoff = min(MAX_BACKOFF_S, backoff * 2)

    def _bootstrap(self, source: _Source, items: list, dropped: list) -> list:
        """For each topic of ``items`` the target has not registered: send one message
        alone, wait for the registration; returns the items still to send."""
        for topic in dict.fromkeys(item[0] for item in items):
            if topic in self._registered_topics:
                continue
            with self._bootstrap_lock:
                if topic in self._registered_topics:
                    continue
                try:
                    bootstrapping = self._producer.is_bootstrapping(topic)
                except RETRIABLE:
                    continue  # no target broker now: the delivery below retries
                if bootstrapping:
                    of_topic = [item for item in items if item[0] == topic]
                    first = next((item for item in of_topic if item[1] == 0), of_topic[0])
                    dropped += self._send(source, [first])
                    items = [item for item in items if item is not first]
                    self._wait_registered(topic)
                self._registered_topics.add(topic)
        return items

    def _wait_registered(self, topic: str) -> None:
        deadline = time.monotonic() + self.config.bootstrap_wait_s
        while time.monotonic() < deadline and not self._abandon.is_set():
            try:
                if not self._producer.is_bootstrapping(topic):
                    log.info("the target registered topic %s", topic)
                    return
            except RETRIABLE:
                pass
            time.sleep(REGISTRATION_POLL_S)
        log.warning("the target did not register topic %s within %.0fs; its placement may differ until it does",
                    topic, self.config.bootstrap_wait_s)

    # --- lag (the reporter thread) ----------------------------------------------------------

    def read_lag(self) -> tuple:
        """``({(source, topic, "<b>-<p>"): lag bytes}, {source: partitions owned})`` for
        the source partitions this mirror owns: log end (OFFSETS latest) minus the
        offset it would resume from."""
        lags, owned = {}, {}
        for source in self._sources:
            offsets = source.connector.finished_offsets()
            owned[source.zk_connect] = len(offsets)
            brokers = source.partitions.brokers
            for (topic, partition), offset in sorted(offsets.items()):
                broker = brokers.get(partition.broker_id)
                if broker is None or offset < 0:
                    continue
                reader = source.lag_readers.get(partition.broker_id)
                if reader is None or (reader.host, reader.port) != (broker.host, broker.port):
                    if reader is not None:
                        reader.close()
                    reader = source.lag_readers[partition.broker_id] = SimpleConsumer(
                        broker.host, broker.port, connect_timeout_ms=2000, socket_timeout_ms=5000)
                try:
                    log_end = reader.latest_offset(topic, partition.partition)
                except RETRIABLE as exc:
                    self.metrics.error("lag")
                    log.debug("log end of %s %s: %r", topic, partition.node(), exc)
                    continue
                lags[(source.zk_connect, topic, partition.node())] = max(0, log_end - offset)
        return lags, owned
