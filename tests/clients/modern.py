"""Topics written by modern producers (record batches), for the tests of mpbroker's own
0.7 tools reading them: confluent-kafka against the broker's modern listener, and a
wait until the 0.7 side sees it all (0.7 reads stop at the flushed end)."""

from confluent_kafka import Producer as ModernProducer

from mpbroker.clients import SimpleConsumer
from tests.clients.helpers import HOST, wait_for


def records(prefix: str, count: int, *, keys: bool = True, headers: bool = True) -> list:
    """``(key, value, headers)`` triples, some with a null key or no headers."""
    made = []
    for i in range(count):
        key = None if not keys or i % 7 == 3 else b"key-%d" % i
        header = [("n", b"%d" % i), ("empty", None)] if headers and i % 5 else []
        made.append((key, b"%s-%06d-" % (prefix.encode(), i) + b"v" * (i % 50), header))
    return made


def produce_modern(broker, topic: str, triples, *, compression: str = "none", partition: int | None = 0,
                   linger_ms: int = 5) -> None:
    """Produce ``triples`` with confluent-kafka (acks=all), to ``partition`` (None: by key)."""
    producer = ModernProducer({"bootstrap.servers": broker.bootstrap, "compression.type": compression,
                               "linger.ms": linger_ms, "acks": "all", "enable.idempotence": False})
    failures = []

    def delivered(error, _message):
        if error is not None:
            failures.append(error)

    for key, value, headers in triples:
        options = {} if partition is None else {"partition": partition}
        producer.produce(topic, value=value, key=key, headers=headers or None, on_delivery=delivered, **options)
        producer.poll(0)
    assert producer.flush(30) == 0, "confluent-kafka could not deliver everything"
    assert not failures, failures


def read_records(port: int, topic: str, partitions=(0,)) -> dict:
    """{partition: [MessageAndOffset, ...]} of everything a 0.7 read sees now."""
    with SimpleConsumer(HOST, port) as consumer:
        return {p: list(consumer.messages(topic, p, consumer.earliest_offset(topic, p))) for p in partitions}


def wait_readable(port: int, topic: str, count: int, partitions=(0,)) -> dict:
    """``read_records`` once it holds ``count`` records (the broker flushed them)."""
    return wait_for(lambda: (found := read_records(port, topic, partitions))
                    and sum(map(len, found.values())) >= count and found, 20, 0.05, f"{count} records of {topic}")
