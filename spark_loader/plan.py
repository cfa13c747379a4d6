"""What a load reads: one PartitionRange per (broker, topic, partition), from where the
last committed load stopped to the log end the broker reports when the load starts.

Partitions come from ZooKeeper (``/brokers/topics``) or, with a static broker list,
from one MULTIFETCH probe per broker and topic. A stored offset outside the log
(retention removed data the loader never read, or the log was recreated) starts the
range at the earliest offset and records the gap, which the summary reports loudly.
Without a stored offset a partition is read from its earliest offset.
"""

import logging
from typing import NamedTuple

from clients.brokers import parse_broker_list
from clients.consumer import SimpleConsumer
from clients.zk_registry import read_brokers, read_topic_partitions, read_topics
from mpbroker.registry import layout
from mpbroker.registry.zk_client import close_client, start_client
from mpbroker.segments.naming import check_topic

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

    @property
    def key(self) -> str:
        return partition_key(self.topic, self.broker_id, self.partition)


def partition_key(topic: str, broker_id: int, partition: int) -> str:
    return f"{topic}/{broker_id}-{partition}"


class LoadSource(NamedTuple):
    brokers: dict  # broker id -> (host, port)
    partitions: list  # [(topic, broker id, partition)]


def discover(*, broker_list: str = "", zookeeper: str = "", topics=(), whitelist: str = "",
             zk_timeout_ms: int = 6000) -> LoadSource:
    """The brokers and the partitions of the topics to load."""
    topics = list(dict.fromkeys(check_topic(topic) for topic in topics))  # a topic named twice is read once
    if zookeeper:
        client = start_client(zookeeper, 6000, zk_timeout_ms)
        try:
            brokers = {info.id: (info.host, info.port) for info in read_brokers(client).values()}
            if whitelist:
                topics = sorted(set(topics) | {t for t in read_topics(client) if layout.topic_matches(whitelist, True, t)})
            partitions = [(topic, p.broker_id, p.partition) for topic in topics
                          for p in read_topic_partitions(client, topic) if p.broker_id in brokers]
        finally:
            close_client(client)
        return LoadSource(brokers, partitions)
    if whitelist:
        raise ValueError("--whitelist needs --zookeeper: the 0.7 protocol cannot list a broker's topics")
    brokers = {broker.id: (broker.host, broker.port) for broker in parse_broker_list(broker_list)}
    partitions = []
    for broker_id, (host, port) in sorted(brokers.items()):
        with SimpleConsumer(host, port, connect_timeout_ms=zk_timeout_ms) as consumer:
            for topic in topics:
                partitions.extend((topic, broker_id, p) for p in range(consumer.partition_count(topic)))
    return LoadSource(brokers, partitions)


def make_plan(source: LoadSource, stored: dict, max_bytes_per_partition: int = 0) -> list:
    """A PartitionRange per partition (empty ones included: start == end)."""
    ranges = []
    for broker_id in sorted({b for _, b, _ in source.partitions}):
        host, port = source.brokers[broker_id]
        with SimpleConsumer(host, port) as consumer:
            for topic, _, partition in sorted(p for p in source.partitions if p[1] == broker_id):
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
                ranges.append(PartitionRange(topic, broker_id, host, port, partition, start, end, gap_from, gap_to))
    return ranges
