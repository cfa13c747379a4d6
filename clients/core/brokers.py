"""Which brokers there are and which partitions a topic has on each.

A static ``broker.list`` names brokers as ``id:host:port`` (or ``host:port``, numbered
in order). The partitions of a topic on a broker are found with the 0.7 protocol
alone: one MULTIFETCH of ``max_size`` 0 for partitions 0..63 (then further, if all
exist) answers WrongPartition (3) for those the broker does not have. 0.7's own
producer, given a static list, only ever used partition 0 of each broker; this
makes keyed partitioning work without ZooKeeper. The list of ``(broker id,
partition)`` pairs is cached per topic for ``topic_metadata_refresh_ms``.
"""

import threading
import time
from time import monotonic
from typing import NamedTuple

from mpbroker.codec import requests as rq
from mpbroker.codec import responses as rs
from mpbroker.codec.errors import ErrorCode

PROBE_BATCH = 64
MAX_PARTITIONS_PER_BROKER = 1 << 16


class Broker(NamedTuple):
    id: int
    host: str
    port: int


class BrokerPartition(NamedTuple):
    broker_id: int
    partition: int


def parse_broker_list(text: str) -> list:
    """``id:host:port,...`` or ``host:port,...`` (ids 0, 1, ... in order)."""
    brokers = []
    for index, item in enumerate(part.strip() for part in text.split(",")):
        if not item:
            continue
        fields = item.rsplit(":", 2)
        try:
            if len(fields) == 3:
                broker = Broker(int(fields[0]), fields[1], int(fields[2]))
            elif len(fields) == 2:
                broker = Broker(index, fields[0], int(fields[1]))
            else:
                raise ValueError
        except ValueError:
            raise ValueError(f"bad broker {item!r} in broker list: expected id:host:port or host:port") from None
        if not 0 < broker.port < 65536 or not broker.host:
            raise ValueError(f"bad broker {item!r} in broker list: host and port 1-65535 are required")
        brokers.append(broker)
    if not brokers:
        raise ValueError("the broker list is empty")
    ids = [broker.id for broker in brokers]
    if len(set(ids)) != len(ids):
        raise ValueError(f"broker ids repeat in broker list {text!r}")
    return brokers


def probe_partition_count(request, topic: str) -> int:
    """How many partitions ``topic`` has on a broker; ``request`` sends one request to it
    and returns the answer (e.g. ``BrokerConnection.request``)."""
    count = 0
    while count < MAX_PARTITIONS_PER_BROKER:
        probes = [(topic, partition, 0, 0) for partition in range(count, count + PROBE_BATCH)]
        answers = rs.decode_multifetch(request(rq.encode_multifetch(probes)))
        for error, _ in answers:
            if error == ErrorCode.WRONG_PARTITION:
                return count
            count += 1
    return count


class StaticBrokerPartitions:
    """The (broker, partition) pairs of topics, from a static broker list."""

    def __init__(self, brokers, connection_for, refresh_ms: int = 60000):
        self.brokers = {broker.id: broker for broker in brokers}
        self._connection_for = connection_for  # callable(broker id) -> (lock, BrokerConnection)
        self._refresh_s = refresh_ms / 1000
        self._cache = {}  # topic -> (expires at, [BrokerPartition])
        self._lock = threading.Lock()

    def partitions(self, topic: str) -> list:
        """Sorted (broker id, partition) pairs of ``topic`` across the live brokers.
        A broker that cannot be reached is left out (until the next refresh)."""
        cached = self._cache.get(topic)  # read without the lock: entries are replaced whole, never changed
        if cached is not None and cached[0] > monotonic():
            return cached[1]
        pairs = []
        failures = []
        for broker_id in sorted(self.brokers):
            lock, connection = self._connection_for(broker_id)
            try:
                with lock:
                    count = probe_partition_count(connection.request, topic)
            except Exception as exc:  # a dead broker: the others still take the topic
                failures.append(exc)
                continue
            pairs.extend(BrokerPartition(broker_id, partition) for partition in range(count))
        if not pairs and failures:
            raise failures[0]
        with self._lock:
            self._cache[topic] = (time.monotonic() + self._refresh_s, pairs)
        return pairs

    def invalidate_all(self) -> None:
        """Forget every topic's pairs: the next send probes the brokers again."""
        with self._lock:
            self._cache.clear()
