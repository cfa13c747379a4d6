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
included), placed by ``mpbroker.clients.mirror.placement``.

At least once, no gaps: the connector runs with ``autofinish.enable=false``; a batch
is marked finished (``mark_finished``) only after the target acknowledged all of it,
and every commit -- every ``autocommit.interval.ms`` (1 s here), on a rebalance, on
stop -- stores finished offsets only. A mirror killed at any moment therefore
restarts from offsets whose messages are all on the target; what it had sent since
the last commit is sent again (duplicates, never gaps). Without a fault each message
is sent once: the consumer's start waits for the source's registry to settle
(``rebalance.settle.ms``), and a rebalance stops handing out messages, then waits for
the batches in flight to be acknowledged and marked -- the stream threads deliver a
partial batch when no message comes within ``linger_ms`` -- for up to
``stop_timeout_s`` (``rebalance.finish.ms``), before it commits and releases. A delivery that fails (the
target away, a partition restarting) is retried with a growing back-off, for as long
as it takes; the stream waits meanwhile (back-pressure to the source fetchers). A
message the target refuses for good (larger than its ``max.message.size``, invalid)
is found by resending the batch message by message (so the rest of that batch may
reach the target twice), logged, counted in ``mpbroker_mirror_dropped_messages_total``
and skipped: one bad message must not stop the pipeline, and the audit shows the loss.

Placement needs the topic on every live target broker. In 0.7 a topic the target
has not registered goes to partition 0 of each target broker, and only the brokers
that got a message of it register it: had the first message created it on one
broker, the producer's list would narrow to that broker's partitions and every
message would land there. So before the first batch of a topic, the mirror has the
target producer spread it (``mpbroker.clients.producer.topic_spread``: an empty acknowledged produce
creates the topic on each live target broker that lacks it, then the mirror waits,
up to ``bootstrap_wait_s``, until every live target broker registered it). The
topic's target list is then every partition of every live target broker, from the
first message on. A target that cannot be reached meanwhile is retried like a
delivery; a broker that does not register the topic in time is logged, and the
topic is mirrored onto the brokers that did.

The positions count the source brokers that registered the topic. A topic created on
a source while the mirror runs is registered by its brokers about a second apart,
and the group starts on the first one's partitions at once; so the first time a
source's topic is met, the mirror waits (up to ``source_wait_s``) until every live
source broker registered it. A source broker that never got the topic (0.7's
bootstrap) costs that wait once per run and is not counted.

Replicated topics (``mpbroker.registry.replication``): a source's are read from each
partition's current leader by the connector (following leadership changes), keep
their partition number as the position and need no settling; a target's is not
spread (its partitions were placed when it was created) and gets each position on
partition position mod N, sent to that partition's leader. ``acks="replicated"``
counts a message once every in-sync replica of its target partition has it.
"""

import logging
import threading
import time
from dataclasses import dataclass, field
from operator import itemgetter

from mpbroker.clients.consumer.simple_consumer import SimpleConsumer
from mpbroker.clients.core.errors import ClientError
from mpbroker.clients.core.leaders import REPLICATED
from mpbroker.clients.groups.connector import ConsumerConnector
from mpbroker.clients.groups.message_stream import ConsumerTimeoutError
from mpbroker.clients.groups.topic_filter import TopicFilter
from mpbroker.clients.mirror.metrics import MirrorMetrics, MirrorReporter
from mpbroker.clients.mirror.placement import SourcePositions, position_partitioner
from mpbroker.clients.producer.producer import Producer
from mpbroker.clients.producer.topic_spread import TopicSpreadTimeout
from mpbroker.clients.producer.zk_brokers import ZkBrokerPartitions
from mpbroker.codec.errors import InvalidMessageError, InvalidTopicError, MessageSizeTooLargeError, MPBrokerError
from mpbroker.registry import layout

log = logging.getLogger(__name__)

DEFAULT_GROUP = "mpbroker-mirror"
REFUSED = (MessageSizeTooLargeError, InvalidMessageError, InvalidTopicError)  # retrying cannot help
RETRIABLE = (ClientError, MPBrokerError, OSError)
MAX_BACKOFF_S = 5.0
WARN_EVERY_S = 10.0


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
    acks: str = "append"  # append | flush | replicated: when the target's acknowledgement comes
    batch_size: int = 500  # messages per delivery
    linger_ms: int = 100  # the longest a message waits for its batch to fill
    report_interval_s: float = 10.0  # log line and lag read
    stop_timeout_s: float = 30.0  # stop(): the longest to wait for batches in flight
    bootstrap_wait_s: float = 10.0  # the longest to wait for every live target broker to register a new topic
    source_wait_s: float = 3.0  # the longest to wait for every live source broker to register a topic first met
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
        if self.acks not in ("append", "flush", "replicated"):
            raise ValueError(f"acks: {self.acks!r} is none of append, flush, replicated (the mirror needs "
                             "acknowledgements)")
        if self.num_streams < 1 or self.batch_size < 1 or self.linger_ms < 0:
            raise ValueError("num_streams and batch_size must be at least 1, linger_ms at least 0")


class _Source:
    """One source cluster: its connector, its partitions (positions and lag) and streams."""

    def __init__(self, zk_connect: str):
        self.zk_connect = zk_connect
        self.connector = None
        self.partitions = None  # ZkBrokerPartitions
        self.positions = None  # SourcePositions
        self.settled = set()  # topics whose positions can be taken (see Mirror._settle)
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
        self._spread_topics = set()  # topics spread over the live target brokers (placement holds)
        self._spread_lock = threading.Lock()
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
                    "autocommit.interval.ms": 1000, "autooffset.reset": "smallest",
                    "rebalance.finish.ms": int(config.stop_timeout_s * 1000), **config.consumer_properties,
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
        if not source.settled.issuperset(m.topic for m in batch):
            self._settle(source, {m.topic for m in batch})
        position = source.positions.lookup()
        items = [(m.topic, position(m.topic, m.broker_id, m.partition), m.payload) for m in batch]
        if not self._spread_topics.issuperset(map(itemgetter(0), items)):
            for topic in dict.fromkeys(map(itemgetter(0), items)):
                self._spread(topic)
        dropped = self._send(source, items)
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
                self._warn(f"delivering {len(items)} message(s) to the target failed ({exc}); retrying")
                if self._abandon.wait(backoff):
                    raise _Abandoned() from exc
                backoff = min(MAX_BACKOFF_S, backoff * 2)

    def _settle(self, source: _Source, topics: set) -> None:
        """The first time a topic is met on a source: wait (up to ``source_wait_s`` for all
        of them) until every live source broker has registered it. A topic new on the
        source is registered by its brokers within about a second of each other, and the
        group takes the first broker's partitions at once: positions taken before the
        others registered would count that broker's partitions only."""
        discovery = source.partitions
        deadline = time.monotonic() + self.config.source_wait_s
        for topic in [topic for topic in topics if topic not in source.settled]:
            if discovery.leaders.is_replicated(topic):  # its partitions are all known from its creation
                source.settled.add(topic)
                continue
            while True:
                try:
                    registered = discovery.registered_brokers(topic)
                except RETRIABLE:
                    break  # no source broker now: the positions are what can be known
                missing = set(discovery.brokers) - registered
                remaining = deadline - time.monotonic()
                if not missing or remaining <= 0 or self._abandon.is_set():
                    if missing:
                        log.info("topic %s of %s is not on source broker(s) %s: its positions count brokers %s",
                                 topic, source.zk_connect, ", ".join(map(str, sorted(missing))),
                                 ", ".join(map(str, sorted(registered))))
                    break
                discovery.wait_for_change(min(remaining, 0.5))
            source.settled.add(topic)

    def _spread(self, topic: str) -> None:
        """Before the first batch of ``topic``: have it on every live target broker, each
        having registered it (retried while the target cannot be reached)."""
        if topic in self._spread_topics:
            return
        with self._spread_lock:
            backoff = 0.1
            while topic not in self._spread_topics:
                try:
                    pairs = self._producer.spread_topic(topic, self.config.bootstrap_wait_s)
                    log.info("topic %s is on every live target broker: %d partitions", topic, len(pairs))
                except TopicSpreadTimeout as exc:
                    log.warning("the target did not spread topic %s (%s); mirroring it onto the brokers that have it",
                                topic, exc)
                except REFUSED:
                    pass  # (an invalid name): the delivery finds it and drops its messages
                except RETRIABLE as exc:
                    self.metrics.error("delivery")
                    self._warn(f"creating topic {topic} on the target failed ({exc}); retrying")
                    if self._abandon.wait(backoff):
                        raise _Abandoned() from exc
                    backoff = min(MAX_BACKOFF_S, backoff * 2)
                    continue
                self._spread_topics.add(topic)

    def _warn(self, message: str) -> None:
        now = time.monotonic()
        if now - self._last_warning >= WARN_EVERY_S:
            self._last_warning = now
            log.warning("%s", message)

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
                if partition.broker_id == REPLICATED:  # read from its leader now
                    broker = source.partitions.leaders.leader(topic, partition.partition)
                else:
                    broker = brokers.get(partition.broker_id)
                if broker is None or offset < 0:
                    continue
                reader = source.lag_readers.get(broker.id)
                if reader is None or (reader.host, reader.port) != (broker.host, broker.port):
                    if reader is not None:
                        reader.close()
                    reader = source.lag_readers[broker.id] = SimpleConsumer(
                        broker.host, broker.port, connect_timeout_ms=2000, socket_timeout_ms=5000)
                try:
                    log_end = reader.latest_offset(topic, partition.partition)
                except RETRIABLE as exc:
                    self.metrics.error("lag")
                    log.debug("log end of %s %s: %r", topic, partition.node(), exc)
                    continue
                lags[(source.zk_connect, topic, partition.node())] = max(0, log_end - offset)
        return lags, owned
