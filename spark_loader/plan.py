"""What a load reads: one PartitionRange per (broker, topic, partition), from where the
last committed load stopped to the log end the broker reports when the load starts.

Partitions come from ZooKeeper (``/brokers/topics``) or, with a static broker list,
from one MULTIFETCH probe per broker and topic. A stored offset outside the log
(retention removed data the loader never read, or the log was recreated) starts the
range at the earliest offset and records the gap, which the summary reports loudly.
Without a stored offset a partition is read from its earliest offset.

A replicated topic (``mpbroker.registry.replication``, with ZooKeeper) has one range per
partition 0..N-1, keyed ``<topic>/<partition>`` (``broker_id`` -1: ``leaders.REPLICATED``),
read from the partition's leader: the plan asks the leader of the moment for the log's
ends and names it, and a task that finds it no longer leads (NOT_LEADER, or gone) looks
the new one up in ZooKeeper (``zookeeper``) and reads on from there.

A named topic that does not exist is refused (``UnknownTopicError``, with the closest
known names), so that a typo is not a load of nothing that exits 0: with ZooKeeper, a
topic no broker registered; with a broker list, one of which no broker holds a single
message (the 0.7 protocol cannot tell a topic that does not exist from an empty one).
``allow_missing_topics`` makes such a topic a warning instead (it is loaded once it
exists). A whitelist that matches nothing is not an error: it is logged.
"""

import logging
from typing import NamedTuple

from mpbroker.clients.consumer.leader_consumer import LeaderConsumer
from mpbroker.clients.consumer.simple_consumer import SimpleConsumer
from mpbroker.clients.core.brokers import parse_broker_list
from mpbroker.clients.core.errors import BrokerUnavailableError
from mpbroker.clients.core.leaders import REPLICATED, read_topic_leaders
from mpbroker.clients.core.unknown_topics import UnknownTopicError
from mpbroker.clients.core.zk_registry import read_brokers, read_topic_partitions, read_topics
from mpbroker.codec.topic_names import check_topic
from mpbroker.registry import layout
from mpbroker.registry.zk_client import close_client, start_client

log = logging.getLogger(__name__)


class PartitionRange(NamedTuple):
    topic: str
    broker_id: int
    host: str
    port: int
    partition: int
    start: int  # first offset to read
    end: int  # log end when the load started: nothing at or past it is read
    gap_from: int  # -1, or the stored offset that was outside the log (data lost to retention)
    gap_to: int  # -1, or where reading restarted (the earliest offset)
    zookeeper: str = ""  # a replicated topic's partition (broker_id -1): where to find its new leader

    @property
    def key(self) -> str:
        return partition_key(self.topic, self.broker_id, self.partition)

    @property
    def node(self) -> str:
        return partition_node(self.broker_id, self.partition)


def partition_node(broker_id: int, partition: int) -> str:
    """``<broker>-<partition>``, or a replicated topic's ``<partition>``."""
    return str(partition) if broker_id == REPLICATED else f"{broker_id}-{partition}"


def partition_key(topic: str, broker_id: int, partition: int) -> str:
    return f"{topic}/{partition_node(broker_id, partition)}"


class LoadSource(NamedTuple):
    brokers: dict  # broker id -> (host, port)
    partitions: list  # [(topic, broker id, partition)]; broker id -1: a replicated topic's partition
    zookeeper: str = ""  # with replicated topics: where their leaders are found


def discover(*, broker_list: str = "", zookeeper: str = "", topics=(), whitelist: str = "",
             zk_timeout_ms: int = 6000, allow_missing_topics: bool = False, loaded_topics=(),
             skip_unreachable: bool = False) -> LoadSource:
    """The brokers and the partitions of the topics to load. A named topic that does
    not exist raises UnknownTopicError (suggesting close names among the registered
    topics and ``loaded_topics``, those this output holds) unless
    ``allow_missing_topics``; ZooKeeperUnavailable or BrokerUnavailableError when the
    source cannot be reached. ``skip_unreachable``: a listed broker that cannot be
    reached is logged and its partitions left out (unless no broker can be reached)."""
    topics = list(dict.fromkeys(check_topic(topic) for topic in topics))  # a topic named twice is read once
    if zookeeper:
        client = start_client(zookeeper, 6000, zk_timeout_ms, create_chroot=False)  # a reader creates nothing
        try:
            brokers = {info.id: (info.host, info.port) for info in read_brokers(client).values()}
            registered = read_topics(client)
            missing = [topic for topic in topics if topic not in registered]
            if missing:
                where = f"no broker registered it at {zookeeper}"
                if not registered:
                    where += " (no topic is registered there at all: is the chroot right?)"
                _missing_topics(missing, where, [*registered, *loaded_topics], allow_missing_topics)
            topics = [topic for topic in topics if topic not in missing]
            if whitelist:
                matched = [topic for topic in registered if layout.topic_matches(whitelist, True, topic)]
                if not matched:
                    log.warning("--whitelist %r matches none of the %d topics registered at %s (yet): "
                                "nothing of it to load", whitelist, len(registered), zookeeper)
                topics = sorted(set(topics) | set(matched))
            partitions = []
            for topic in topics:
                replicated = read_topic_leaders(client, topic)
                if replicated is not None:
                    partitions += [(topic, REPLICATED, p) for p in range(replicated.partitions)]
                    continue
                found = read_topic_partitions(client, topic)
                partitions += [(topic, p.broker_id, p.partition) for p in found if p.broker_id in brokers]
                absent = sorted({p.broker_id for p in found if p.broker_id not in brokers})
                if absent:
                    log.warning("%s: not loading its partitions on broker(s) %s: not registered at %s (down?); "
                                "the next load reads them", topic, ", ".join(map(str, absent)), zookeeper)
        finally:
            close_client(client)
        return LoadSource(brokers, partitions, zookeeper)
    if whitelist:
        raise ValueError("--whitelist needs --zookeeper: the 0.7 protocol cannot list a broker's topics")
    brokers = {broker.id: (broker.host, broker.port) for broker in parse_broker_list(broker_list)}
    partitions = []
    holds_messages = dict.fromkeys(topics, False)
    unreachable = []
    for broker_id, (host, port) in sorted(brokers.items()):
        try:
            with SimpleConsumer(host, port, connect_timeout_ms=zk_timeout_ms) as consumer:
                for topic in topics:
                    count = consumer.partition_count(topic)
                    partitions.extend((topic, broker_id, p) for p in range(count))
                    if not holds_messages[topic]:
                        holds_messages[topic] = any(consumer.latest_offset(topic, p) > 0 for p in range(count))
        except BrokerUnavailableError as exc:
            if not skip_unreachable or len(unreachable) + 1 == len(brokers):
                raise
            unreachable.append(broker_id)
            partitions = [p for p in partitions if p[1] != broker_id]
            log.warning("broker %d (%s:%d) cannot be reached (%s): its partitions are left out for now",
                        broker_id, host, port, exc)
    missing = [topic for topic, held in holds_messages.items() if not held]
    if missing:
        _missing_topics(missing, f"no broker of --broker-list {broker_list} holds a message of it (the 0.7 "
                                 f"protocol cannot tell a topic that does not exist from an empty one)",
                        loaded_topics, allow_missing_topics or bool(unreachable))  # a broker down may hold it
    return LoadSource(brokers, partitions)


def _missing_topics(missing: list, where: str, known, allowed: bool) -> None:
    if not allowed:
        raise UnknownTopicError(missing, where, known,
                                "--allow-missing-topics loads it once it exists, if waiting for it is intended")
    log.warning("%s: %s; nothing of it to load yet (--allow-missing-topics)",
                ", ".join(map(repr, missing)), where)


def topics_of(offsets: dict) -> set:
    """The topics of a state's offsets (keys made by ``partition_key``)."""
    return {key.rpartition("/")[0] for key in offsets}


def make_plan(source: LoadSource, stored: dict, max_bytes_per_partition: int = 0) -> list:
    """A PartitionRange per partition (empty ones included: start == end)."""
    ranges = []
    for broker_id in sorted({b for _, b, _ in source.partitions} - {REPLICATED}):
        host, port = source.brokers[broker_id]
        with SimpleConsumer(host, port) as consumer:
            for topic, _, partition in sorted(p for p in source.partitions if p[1] == broker_id):
                ranges.append(_range(consumer, host, port, topic, broker_id, partition, stored,
                                     max_bytes_per_partition))
    replicated = sorted(p for p in source.partitions if p[1] == REPLICATED)
    if replicated:
        with LeaderConsumer(source.zookeeper) as leaders:
            for topic, _, partition in replicated:
                ranges.append(leaders.call(topic, partition, lambda consumer: _range(
                    consumer, consumer.host, consumer.port, topic, REPLICATED, partition, stored,
                    max_bytes_per_partition, source.zookeeper)))
    return ranges


def _range(consumer, host: str, port: int, topic: str, broker_id: int, partition: int, stored: dict,
           max_bytes_per_partition: int, zookeeper: str = "") -> PartitionRange:
    earliest = consumer.earliest_offset(topic, partition)
    latest = consumer.latest_offset(topic, partition)
    key = partition_key(topic, broker_id, partition)
    start = stored.get(key, earliest)
    gap_from = gap_to = -1
    if not earliest <= start <= latest:
        gap_from, gap_to = start, earliest
        log.warning("GAP: %s: the last load stopped at offset %d, but the log holds %d..%d; "
                    "data before %d was deleted before it was loaded; restarting at %d",
                    key, start, earliest, latest, earliest, earliest)
        start = earliest
    end = latest if max_bytes_per_partition <= 0 else min(latest, start + max_bytes_per_partition)
    return PartitionRange(topic, broker_id, host, port, partition, start, end, gap_from, gap_to, zookeeper)
