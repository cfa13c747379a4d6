"""kafka-python against the modern listener: KafkaProducer (``enable_idempotence=False``
for the codec round trips, and its idempotent default) and KafkaConsumer (assign,
seek_to_beginning), every codec; keys, headers and timestamps come back exactly."""

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

CODECS = [None, "gzip", "snappy", "lz4", "zstd"]
BASE_TS = 1_700_000_000_000


def produce(broker, topic, messages, partition=0, **config):
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, enable_idempotence=False, **config)
    try:
        futures = [producer.send(topic, key=key, value=value, headers=headers, timestamp_ms=timestamp,
                                 partition=partition)
                   for key, value, headers, timestamp in messages]
        producer.flush(15)
        return [future.get(15) for future in futures]
    finally:
        producer.close(5)


def consume(broker, topic, count, partition=0):
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap)
    try:
        tp = TopicPartition(topic, partition)
        consumer.assign([tp])
        consumer.seek_to_beginning()
        got = []
        for _ in range(30):
            got += consumer.poll(500).get(tp, [])
            if len(got) >= count:
                break
        assert len(got) == count, f"consumed {len(got)} of {count}; {_state(consumer, tp)}"
        return got
    finally:
        consumer.close()


def _state(consumer, tp) -> str:
    """What a failed read looked like from the client's side (a flake seen once in CI:
    0 of 5 read in 15 s), to tell a stuck client from a broker that served nothing."""
    try:
        return (f"position {consumer.position(tp, timeout_ms=5000)}, "
                f"beginning {consumer.beginning_offsets([tp], 5000)[tp]}, end {consumer.end_offsets([tp], 5000)[tp]}, "
                f"highwater {consumer.highwater(tp)}")
    except Exception as e:  # noqa: BLE001 - a diagnosis must not hide the failure it explains
        return f"state unknown: {e!r}"


def sample(n=5):
    return [(b"key-%d" % i, b"value-%d " % i * (i + 1), [("h", b"x%d" % i), ("second", b"")], BASE_TS + 7 * i)
            for i in range(n)]


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("acks", [1, "all"])
def test_round_trip_every_codec(kafka_broker, topic, codec, acks):
    messages = sample()
    metadata = produce(kafka_broker, topic, messages, compression_type=codec, acks=acks)
    offsets = [m.offset for m in metadata]
    assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)
    got = consume(kafka_broker, topic, len(messages))
    assert [(r.key, r.value, r.headers, r.timestamp, r.timestamp_type) for r in got] == [
        (key, value, headers, timestamp, 0) for key, value, headers, timestamp in messages]
    assert [r.offset for r in got] == offsets


def test_acks_zero_then_partition_one(kafka_broker, topic):
    produce(kafka_broker, topic, sample(2), partition=1, acks=0)
    got = consume(kafka_broker, topic, 2, partition=1)
    assert [r.value for r in got] == [value for _, value, _, _ in sample(2)]


def test_null_key_and_null_value(kafka_broker, topic):
    produce(kafka_broker, topic, [(None, b"v", [], BASE_TS), (b"tombstone", None, [], BASE_TS)])
    got = consume(kafka_broker, topic, 2)
    assert [(r.key, r.value, r.headers) for r in got] == [(None, b"v", []), (b"tombstone", None, [])]


def test_end_offsets(kafka_broker, topic):
    metadata = produce(kafka_broker, topic, sample(2))
    consumer = KafkaConsumer(bootstrap_servers=kafka_broker.bootstrap)
    try:
        tp = TopicPartition(topic, 0)
        assert consumer.end_offsets([tp])[tp] == metadata[-1].offset + 1
        assert consumer.beginning_offsets([tp])[tp] <= metadata[0].offset
        found = consumer.offsets_for_times({tp: BASE_TS + 7})[tp]
        # by batch (list_offsets.py): the first offset of the first batch whose newest record is at
        # or after the time, and that batch's maxTimestamp (Kafka answers the record itself)
        assert metadata[0].offset <= found.offset <= metadata[1].offset and found.timestamp == BASE_TS + 7
    finally:
        consumer.close()


def test_default_idempotent_producer(kafka_broker, topic):
    producer = KafkaProducer(bootstrap_servers=kafka_broker.bootstrap, max_block_ms=5000)
    try:
        metadata = producer.send(topic, key=b"k", value=b"v", partition=0).get(15)
    finally:
        producer.close(5)
    [record] = consume(kafka_broker, topic, 1)
    assert (record.offset, record.key, record.value) == (metadata.offset, b"k", b"v")
