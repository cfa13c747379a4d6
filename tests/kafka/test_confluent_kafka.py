"""confluent-kafka (librdkafka) against the modern listener, default settings plus the
bootstrap address: Producer and Consumer (assign, no group) with keys, headers and
timestamps, every codec, acks 0/1/all, idempotence; AdminClient.list_topics; auto-creation by a
produce; offsets_for_times (ListOffsets by time)."""

import time

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from tests.kafka.conftest import TIMEOUT_S

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
BASE_TS = 1_700_000_000_000


def produce(broker, topic, messages, partition=0, **config):
    """Produce ``(key, value, headers, timestamp)`` and return the delivery reports."""
    producer = Producer({"bootstrap.servers": broker.bootstrap, **config})
    reports = []
    for key, value, headers, timestamp in messages:
        producer.produce(topic, value=value, key=key, headers=headers, timestamp=timestamp, partition=partition,
                         on_delivery=lambda err, msg: reports.append((err, msg.offset())))
    assert producer.flush(TIMEOUT_S) == 0
    return reports


def consume(broker, topic, count, partition=0, offset=OFFSET_BEGINNING):
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "unused",
                         "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, partition, offset)])
        got = []
        deadline = time.monotonic() + TIMEOUT_S
        while len(got) < count and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                continue
            assert message.error() is None, message.error()
            got.append(message)
        assert len(got) == count, f"consumed {len(got)} of {count}"
        return got
    finally:
        consumer.close()


def sample(n=5):
    return [(b"key-%d" % i, b"value-%d " % i * (i + 1), [("h", b"x%d" % i), ("empty", None)], BASE_TS + i)
            for i in range(n)]


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("acks", ["0", "1", "all"])
def test_round_trip_every_codec(kafka_broker, topic, codec, acks):
    messages = sample()
    reports = produce(kafka_broker, topic, messages, **{"compression.type": codec, "acks": acks})
    assert [err for err, _ in reports] == [None] * len(messages)
    got = consume(kafka_broker, topic, len(messages))
    assert [(m.key(), m.value(), m.headers(), m.timestamp()) for m in got] == [
        (key, value, headers, (1, timestamp)) for key, value, headers, timestamp in messages]
    offsets = [m.offset() for m in got]
    assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)
    if acks != "0":  # acks=0: no answer, no offsets in the delivery reports
        assert [offset for _, offset in reports] == offsets


def test_acks_zero(kafka_broker, topic):
    messages = sample(3)
    reports = produce(kafka_broker, topic, messages, acks="0")
    assert [err for err, _ in reports] == [None] * 3
    got = consume(kafka_broker, topic, 3)
    assert [m.value() for m in got] == [value for _, value, _, _ in messages]


def test_both_partitions_and_null_key_and_value(kafka_broker, topic):
    produce(kafka_broker, topic, [(None, None, None, BASE_TS)], partition=1)
    produce(kafka_broker, topic, [(b"k", b"", None, BASE_TS)], partition=0)
    [one] = consume(kafka_broker, topic, 1, partition=1)
    assert (one.key(), one.value(), one.headers()) == (None, None, None)
    [zero] = consume(kafka_broker, topic, 1, partition=0)
    assert (zero.key(), zero.value()) == (b"k", b"")


def test_admin_list_topics(kafka_broker, topic):
    produce(kafka_broker, topic, sample(1))
    admin = AdminClient({"bootstrap.servers": kafka_broker.bootstrap})
    metadata = admin.list_topics(timeout=TIMEOUT_S)
    assert topic in metadata.topics
    assert sorted(metadata.topics[topic].partitions) == [0, 1]
    assert metadata.topics[topic].error is None
    [broker] = metadata.brokers.values()
    assert (broker.host, broker.port) == (kafka_broker.host, kafka_broker.kafka_port)
    partition = metadata.topics[topic].partitions[0]
    assert partition.leader == broker.id and partition.error is None


def test_produce_auto_creates_topic(kafka_broker, topic):
    admin = AdminClient({"bootstrap.servers": kafka_broker.bootstrap})
    assert topic not in admin.list_topics(topic=None, timeout=TIMEOUT_S).topics
    reports = produce(kafka_broker, topic, sample(1))
    assert reports[0][0] is None
    assert topic in admin.list_topics(timeout=TIMEOUT_S).topics


def test_watermarks(kafka_broker, topic):
    reports = produce(kafka_broker, topic, sample(3))
    consumer = Consumer({"bootstrap.servers": kafka_broker.bootstrap, "group.id": "unused"})
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=TIMEOUT_S)
    finally:
        consumer.close()
    assert low <= reports[0][1] and high == reports[-1][1] + 1


def offsets_for_time(broker, topic, timestamp):
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "unused"})
    try:
        [answer] = consumer.offsets_for_times([TopicPartition(topic, 0, timestamp)], TIMEOUT_S)
    finally:
        consumer.close()
    assert answer.error is None
    return answer.offset


def test_offsets_for_times(kafka_broker, topic):
    first = produce(kafka_broker, topic, [(None, b"old", None, BASE_TS)])[0][1]
    second = produce(kafka_broker, topic, [(None, b"newer", None, BASE_TS + 60_000)])[0][1]
    assert offsets_for_time(kafka_broker, topic, BASE_TS - 1) == first
    assert offsets_for_time(kafka_broker, topic, BASE_TS) == first
    assert offsets_for_time(kafka_broker, topic, BASE_TS + 1) == second
    assert offsets_for_time(kafka_broker, topic, BASE_TS + 60_000) == second
    assert offsets_for_time(kafka_broker, topic, BASE_TS + 60_001) == -1


def test_offsets_for_times_record_time_ahead_of_broker_clock(kafka_broker, topic):
    ahead = int(time.time() * 1000) + 3_600_000
    [(err, offset)] = produce(kafka_broker, topic, [(None, b"from the future", None, ahead)])
    assert err is None
    assert offsets_for_time(kafka_broker, topic, ahead) == offset


def test_idempotent_producer(kafka_broker, topic):
    """``enable.idempotence``: librdkafka asks InitProducerId in its highest version
    advertised (4, flexible), then sends every message once, in order."""
    messages = sample()
    reports = produce(kafka_broker, topic, messages, **{"enable.idempotence": True})
    assert [err for err, _ in reports] == [None] * len(messages)
    got = consume(kafka_broker, topic, len(messages))
    assert [(m.value(), m.offset()) for m in got] == [(value, offset) for (_, value, _, _), (_, offset) in
                                                       zip(messages, reports)]
