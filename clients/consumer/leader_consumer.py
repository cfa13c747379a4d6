"""LeaderConsumer: SimpleConsumer's reads for the partitions of replicated topics, each
sent to the partition's current leader.

A SimpleConsumer talks to one broker, as Kafka's does; a replicated partition is served
by whichever broker leads it now (``mpbroker.clients.core.leaders``, from ZooKeeper,
kept current by watches). This class keeps one SimpleConsumer per leader and routes
every call by ``(topic, partition)``: ``fetch``, ``get_offsets_before`` (``earliest_offset``,
``latest_offset``), ``check_offset``, ``nearest_message_start``, ``grow_fetch_size``,
``messages`` and ``message_sets``, with SimpleConsumer's arguments and answers. When the
broker asked answers NOT_LEADER, cannot be reached, or the partition has no leader, the
leaders are read again and the call is retried every ``retry_backoff_ms`` (sooner when
a watch brings a change), for up to ``leader_wait_ms``; then the last error is raised
(NotLeaderError, BrokerUnavailableError, LeaderNotAvailableError). An iteration
(``messages``, ``message_sets``) that loses its leader resumes at the next offset on
the new one: nothing is skipped or handed out twice. ``partition_count`` is the
topic's number of partitions (0..N-1). A topic that is not replicated raises
LeaderNotAvailableError: read it with a SimpleConsumer of each broker, as in 0.7.
"""

import contextlib
import time

from mpbroker.clients.consumer.simple_consumer import SimpleConsumer
from mpbroker.clients.core.errors import BrokerUnavailableError, LeaderNotAvailableError
from mpbroker.clients.core.leaders import PartitionLeaders
from mpbroker.codec.errors import NotLeaderError

LEADER_ERRORS = (NotLeaderError, BrokerUnavailableError)  # LeaderNotAvailableError is a BrokerUnavailableError


class LeaderConsumer:
    def __init__(self, zk_connect: str | None = None, *, leaders: PartitionLeaders | None = None,
                 leader_wait_ms: int = 30000, retry_backoff_ms: int = 200, zk_connectiontimeout_ms: int = 6000,
                 **consumer_options):
        """``zk_connect`` (a ZooKeeper session of its own, closed by ``close``) or
        ``leaders`` (shared, left open); ``consumer_options`` are SimpleConsumer's
        (``fetch_size``, ``max_fetch_size``, timeouts, ``audit_envelope``)."""
        if (zk_connect is None) == (leaders is None):
            raise ValueError("give zk_connect or leaders")
        self._own_leaders = leaders is None
        self.leaders = leaders or PartitionLeaders.connect(zk_connect, connection_timeout_ms=zk_connectiontimeout_ms)
        self.leader_wait_s = leader_wait_ms / 1000
        self.retry_backoff_s = retry_backoff_ms / 1000
        self._options = consumer_options
        SimpleConsumer("-", 1, **consumer_options).close()  # the options are checked now
        self._consumers = {}  # broker id -> SimpleConsumer of its current address

    # --- routing ---------------------------------------------------------------------

    def consumer_for(self, topic: str, partition: int) -> SimpleConsumer:
        """The SimpleConsumer of the partition's leader now (LeaderNotAvailableError)."""
        broker = self.leaders.require_leader(topic, partition)
        consumer = self._consumers.get(broker.id)
        if consumer is None or (consumer.host, consumer.port) != (broker.host, broker.port):
            if consumer is not None:
                consumer.close()
            consumer = self._consumers[broker.id] = SimpleConsumer(broker.host, broker.port, **self._options)
        return consumer

    def forget(self, consumer) -> None:
        """Close ``consumer`` and make the next call to its broker start afresh (a new
        connection, without the back-off its failures built up: the wait for a new
        leader is ``retry_backoff_ms``, woken by the watches)."""
        consumer.close()
        for broker_id, known in list(self._consumers.items()):
            if known is consumer:
                del self._consumers[broker_id]

    def call(self, topic: str, partition: int, action):
        """``action(consumer)`` on the partition's leader, retried as the module docstring says."""
        deadline = time.monotonic() + self.leader_wait_s
        while True:
            consumer = None
            try:
                consumer = self.consumer_for(topic, partition)
                return action(consumer)
            except LEADER_ERRORS as exc:
                if consumer is not None and isinstance(exc, BrokerUnavailableError):
                    self.forget(consumer)
                self.after_leader_error(topic, exc, deadline)

    def after_leader_error(self, topic: str, exc: Exception, deadline: float) -> None:
        """Past ``deadline``: raise ``exc``; else wait for a change (up to the back-off)
        and read ``topic``'s leaders again."""
        if time.monotonic() >= deadline:
            raise exc
        self.leaders.wait_for_change(min(self.retry_backoff_s, max(0.0, deadline - time.monotonic())))
        self.leaders.refresh(topic)

    # --- SimpleConsumer's reads ----------------------------------------------------------

    def partition_count(self, topic: str) -> int:
        leaders = self.leaders.topic(topic)
        if leaders is None:
            raise LeaderNotAvailableError(f"topic {topic!r} is not a replicated topic", topic)
        return leaders.partitions

    def fetch(self, topic: str, partition: int, offset: int, max_size: int | None = None):
        return self.call(topic, partition, lambda c: c.fetch(topic, partition, offset, max_size))

    def get_offsets_before(self, topic: str, partition: int, time_ms: int, max_offsets: int) -> list:
        return self.call(topic, partition, lambda c: c.get_offsets_before(topic, partition, time_ms, max_offsets))

    def earliest_offset(self, topic: str, partition: int) -> int:
        return self.call(topic, partition, lambda c: c.earliest_offset(topic, partition))

    def latest_offset(self, topic: str, partition: int) -> int:
        return self.call(topic, partition, lambda c: c.latest_offset(topic, partition))

    def has_log(self, topic: str, partition: int) -> bool:
        return self.call(topic, partition, lambda c: c.has_log(topic, partition))

    def topic_has_log(self, topic: str) -> bool:
        return any(self.has_log(topic, partition) for partition in range(self.partition_count(topic)))

    def check_offset(self, topic: str, partition: int, offset: int) -> None:
        self.call(topic, partition, lambda c: c.check_offset(topic, partition, offset))

    def out_of_range_error(self, topic: str, partition: int, offset: int):
        return self.call(topic, partition, lambda c: c.out_of_range_error(topic, partition, offset))

    def nearest_message_start(self, topic: str, partition: int, offset: int) -> int:
        return self.call(topic, partition, lambda c: c.nearest_message_start(topic, partition, offset))

    def grow_fetch_size(self, message_set, fetch_size: int) -> int:
        return self.call(message_set.topic, message_set.partition, lambda c: c.grow_fetch_size(message_set, fetch_size))

    def messages(self, topic: str, partition: int, offset: int, **options):
        """SimpleConsumer.messages from the leader, resumed on a new leader."""
        with contextlib.closing(self.message_sets(topic, partition, offset, **options)) as message_sets:
            for message_set in message_sets:
                yield from message_set

    def message_sets(self, topic: str, partition: int, offset: int, **options):
        """SimpleConsumer.message_sets from the leader, resumed on a new leader at the
        offset after the last set handed out."""
        deadline = time.monotonic() + self.leader_wait_s
        while True:
            consumer = None
            try:
                consumer = self.consumer_for(topic, partition)
                with contextlib.closing(consumer.message_sets(topic, partition, offset, **options)) as sets:
                    for message_set in sets:
                        offset = message_set.next_offset
                        deadline = time.monotonic() + self.leader_wait_s  # progress: a new wait on a failure
                        yield message_set
                return
            except LEADER_ERRORS as exc:
                if consumer is not None and isinstance(exc, BrokerUnavailableError):
                    self.forget(consumer)
                self.after_leader_error(topic, exc, deadline)

    def close(self) -> None:
        for consumer in self._consumers.values():
            consumer.close()
        self._consumers.clear()
        if self._own_leaders:
            self.leaders.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
