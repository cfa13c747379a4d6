"""Reading a whole topic of a cluster, once, for tools (``mpbroker-audit``): every
partition the brokers registered in ZooKeeper, from its earliest offset up to the log
end it had when the read of that partition started.

    with ClusterReader("zk:2181/chroot") as reader:
        for payloads in reader.read_topic("page-views"):   # a decoded fetch answer at a time
            ...
        reader.notes   # partitions that could not be read, and why
        reader.topics()   # every topic some broker registered (a topic not among them reads as empty)

Fetches are pipelined and decoded in bulk (``SimpleConsumer.message_sets``). A broker
that cannot be reached, or a partition that fails, is skipped with a note rather than
ending the read: a tool reporting on the topic says what it could not see.
"""

from mpbroker.clients.consumer.simple_consumer import SimpleConsumer
from mpbroker.clients.core.errors import BrokerError, BrokerUnavailableError
from mpbroker.clients.core.zk_registry import read_brokers, read_topic_partitions, read_topics
from mpbroker.clients.groups.report import connect
from mpbroker.codec.errors import MPBrokerError
from mpbroker.registry.zk_client import close_client

ZK_TIMEOUT_MS = 6000
BROKER_TIMEOUT_MS = 5000


class ClusterReader:
    def __init__(self, zk_connect: str, *, zk_timeout_ms: int = ZK_TIMEOUT_MS,
                 broker_timeout_ms: int = BROKER_TIMEOUT_MS):
        self.zk_connect = zk_connect
        self.broker_timeout_ms = broker_timeout_ms
        self.notes = []
        self._client = connect(zk_connect, zk_timeout_ms)  # ZooKeeperUnavailable after the timeout

    def topics(self) -> list:
        """Every topic some broker registered, sorted."""
        return read_topics(self._client)

    def read_topic(self, topic: str):
        """Yield the payload lists of ``topic``'s fetch answers, partition by partition."""
        brokers = read_brokers(self._client)
        partitions = read_topic_partitions(self._client, topic)
        for broker_id in sorted({p.broker_id for p in partitions}):
            broker = brokers.get(broker_id)
            if broker is None:
                self.notes.append(f"{self.zk_connect} {topic}: broker {broker_id} is not registered; "
                                  f"its partitions were not read")
                continue
            consumer = SimpleConsumer(broker.host, broker.port, connect_timeout_ms=self.broker_timeout_ms,
                                      socket_timeout_ms=self.broker_timeout_ms)
            try:
                for partition in (p.partition for p in partitions if p.broker_id == broker_id):
                    try:
                        yield from self._read_partition(consumer, topic, partition)
                    except BrokerUnavailableError as exc:
                        self.notes.append(f"{self.zk_connect} {topic}: broker {broker_id} "
                                          f"({broker.host}:{broker.port}) could not be reached: {exc}")
                        break
                    except (BrokerError, MPBrokerError) as exc:
                        self.notes.append(f"{self.zk_connect} {topic} {broker_id}-{partition}: {exc}")
            finally:
                consumer.close()

    @staticmethod
    def _read_partition(consumer, topic: str, partition: int):
        end = consumer.latest_offset(topic, partition)
        start = consumer.earliest_offset(topic, partition)
        if start >= end:
            return
        message_sets = consumer.message_sets(topic, partition, start, auto_offset_reset="smallest")
        try:
            for message_set in message_sets:
                yield message_set.payloads
                if message_set.next_offset >= end:
                    return
        finally:
            message_sets.close()

    def close(self) -> None:
        close_client(self._client)

    def __enter__(self) -> "ClusterReader":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
