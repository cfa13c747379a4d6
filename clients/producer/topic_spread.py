"""Spreading a topic over every live broker of a ZooKeeper-discovered cluster.

In Kafka 0.7 (and with ``zk.connect`` here) a topic no broker has registered yet goes
to partition 0 of every live broker, and each broker registers it once a message
created its log there. A first batch that reaches one broker only (one message, or
all keys hashing to it) leaves the topic on that broker: the producer's list narrows
to its partitions, and the others never get a message of it.

``spread_topic`` creates the topic on every live broker that has not registered it,
with an empty acknowledged produce (PRODUCE_ACKED of an empty message set to
partition 0: the broker creates the log, as 0.7's did for any produce, and stores
nothing), then waits until every live broker registered it (the broker's registrar
writes ``/brokers/topics/<topic>/<id>`` within about a second). From then on the
topic's (broker, partition) list is every partition of every live broker. A broker
that joins while it waits is created on too; one that leaves stops counting.
Used by the producer (``spread.topics=true``, ``Producer.spread_topic``) and by the
mirror before it mirrors a topic. A replicated topic is not spread: its partitions
were placed when it was created.
"""

import time

from mpbroker.clients.core.errors import RETRIABLE_CODES, BrokerUnavailableError, ClientError, error_for
from mpbroker.codec import requests as rq
from mpbroker.codec import responses as rs
from mpbroker.codec.errors import ErrorCode
from mpbroker.codec.requests import Durability

DEFAULT_WAIT_S = 10.0
RETRY_AFTER_S = 1.0  # a broker still missing after this is asked again (its create failed, or was not enough)


class TopicSpreadTimeout(ClientError):
    """Some live brokers did not register the topic within the wait (``missing``: their ids)."""

    def __init__(self, message: str, missing):
        super().__init__(message)
        self.missing = sorted(missing)


def create_on_broker(connection_for, broker_id: int, topic: str) -> None:
    """Create ``topic`` on one broker: an empty PRODUCE_ACKED to its partition 0.
    ``connection_for(broker id)`` gives ``(lock, BrokerConnection)``."""
    lock, connection = connection_for(broker_id)
    with lock:
        connection.send(*rq.produce_acked_parts(Durability.APPEND, topic, 0, b""))
        ack = rs.decode_produce_ack(connection.receive())
    if ack.error in RETRIABLE_CODES:
        raise BrokerUnavailableError(f"creating {topic} on broker {broker_id}: its partition 0 is unavailable")
    if ack.error != ErrorCode.NO_ERROR:
        raise error_for(ack.error, f"creating {topic} on broker {broker_id}")


def spread_topic(discovery, connection_for, topic: str, timeout_s: float = DEFAULT_WAIT_S) -> list:
    """Make every live broker of ``discovery`` (a ``ZkBrokerPartitions``) have ``topic``
    and wait until each registered it; returns the topic's (broker, partition) pairs.

    Raises BrokerUnavailableError if no broker is live (after discovery's own wait),
    the error of a broker that refuses the create for good, or TopicSpreadTimeout if
    some live broker has not registered it within ``timeout_s``."""
    if discovery.leaders.is_replicated(topic):  # its partitions are placed already, on its replicas
        return discovery.partitions(topic)
    deadline = time.monotonic() + timeout_s
    asked = {}  # broker id -> when it was last asked to create the topic
    failures = {}  # broker id -> why its last create failed (it may be leaving, or restarting)
    while True:
        registered = discovery.registered_brokers(topic)  # (waits for a first live broker, or raises)
        missing = set(discovery.brokers) - registered
        if not missing:
            return discovery.partitions(topic)
        now = time.monotonic()
        if now >= deadline:
            why = "".join(f"; broker {b}: {failures[b]}" for b in sorted(missing) if b in failures)
            raise TopicSpreadTimeout(f"broker(s) {', '.join(map(str, sorted(missing)))} did not register topic "
                                     f"{topic} within {timeout_s:g}s{why}", missing)
        for broker_id in sorted(missing):
            if now - asked.get(broker_id, now - RETRY_AFTER_S) >= RETRY_AFTER_S:
                asked[broker_id] = now
                try:
                    create_on_broker(connection_for, broker_id, topic)
                except BrokerUnavailableError as exc:
                    failures[broker_id] = exc  # asked again after RETRY_AFTER_S while it stays live
        discovery.wait_for_change(min(deadline - time.monotonic(), RETRY_AFTER_S))
