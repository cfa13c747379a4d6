"""Small helpers shared by the client tests (no mocks: they talk to real brokers)."""

import contextlib
import os
import signal

from mpbroker.clients import SimpleConsumer
from mpbroker.codec.message import V1_OVERHEAD
from mpbroker.testing.local_zookeeper import free_port  # noqa: F401  (the tests take it from here)
from tests import polling

HOST = "127.0.0.1"
PARTITIONS = 4  # tests/broker/harness.py DEFAULTS: num.partitions=4


def broker_list(*brokers) -> str:
    return ",".join(f"{HOST}:{b.port}" for b in brokers)


def wait_for(predicate, timeout: float = 10.0, interval: float = 0.02, what: str = "condition"):
    """``tests.polling.wait_for`` with the interval third, as the client tests pass it."""
    return polling.wait_for(predicate, timeout, what, interval=interval)


def set_bytes(payloads) -> int:
    """Bytes an uncompressed magic-1 message set of ``payloads`` takes in the log."""
    return sum(V1_OVERHEAD + len(p) for p in payloads)


def read_partition(port: int, topic: str, partition: int, offset: int = 0) -> list:
    with SimpleConsumer(HOST, port) as consumer:
        return [m.payload for m in consumer.messages(topic, partition, offset)]


def read_topic(port: int, topic: str, partitions: int = PARTITIONS) -> dict:
    """{partition: [payload, ...]} of everything fetchable now."""
    return {p: read_partition(port, topic, p) for p in range(partitions)}


def log_ends(port: int, topic: str, partitions: int = PARTITIONS) -> list:
    with SimpleConsumer(HOST, port) as consumer:
        return [consumer.latest_offset(topic, p) for p in range(partitions)]


def wait_until_fetchable(port: int, topic: str, total_bytes: int, partitions: int = PARTITIONS, timeout=10.0):
    """Fire-and-forget data is visible once flushed: poll the log ends until they add up."""
    wait_for(lambda: sum(log_ends(port, topic, partitions)) >= total_bytes, timeout,
             what=f"{total_bytes} bytes of {topic} flushed")
    assert sum(log_ends(port, topic, partitions)) == total_bytes, "more bytes than were sent"


@contextlib.contextmanager
def paused(broker):
    """SIGSTOP the whole broker process tree (a broker that is alive but does not answer)."""
    os.killpg(broker.process.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.killpg(broker.process.pid, signal.SIGCONT)


def resume(broker) -> None:
    os.killpg(broker.process.pid, signal.SIGCONT)
