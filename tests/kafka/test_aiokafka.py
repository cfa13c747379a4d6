"""aiokafka against the modern listener: AIOKafkaProducer and AIOKafkaConsumer (assign,
no group), a round trip of keys, headers and timestamps with each codec; an idempotent
producer."""

import asyncio

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

BASE_TS = 1_700_000_000_000


async def round_trip(bootstrap, topic, messages, **config):
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, **config)
    await producer.start()
    try:
        sent = [await producer.send_and_wait(topic, key=key, value=value, headers=headers, timestamp_ms=timestamp,
                                             partition=0)
                for key, value, headers, timestamp in messages]
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap)
    await consumer.start()
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        got = []
        for _ in range(30):
            batch = await consumer.getmany(tp, timeout_ms=500)
            got += batch.get(tp, [])
            if len(got) >= len(messages):
                break
        end = (await consumer.end_offsets([tp]))[tp]
    finally:
        await consumer.stop()
    return sent, got, end


@pytest.mark.parametrize("codec", [None, "gzip", "snappy", "lz4", "zstd"])
def test_round_trip(kafka_broker, topic, codec):
    messages = [(b"k%d" % i, b"v%d" % i * 50, [("h", b"%d" % i)], BASE_TS + i) for i in range(4)]
    # aiokafka's default producer is not idempotent (enable_idempotence=False)
    sent, got, end = asyncio.run(round_trip(kafka_broker.bootstrap, topic, messages, compression_type=codec))
    assert [(r.key, r.value, list(r.headers), r.timestamp) for r in got] == [
        (key, value, headers, timestamp) for key, value, headers, timestamp in messages]
    assert [r.offset for r in got] == [m.offset for m in sent]
    assert [m.offset for m in sent] == sorted({m.offset for m in sent})
    assert end == sent[-1].offset + 1


def test_idempotent_producer(kafka_broker, topic):
    """``enable_idempotence=True``: InitProducerId (aiokafka asks v0), then every message once."""
    messages = [(b"k%d" % i, b"v%d" % i, [], BASE_TS + i) for i in range(4)]
    sent, got, _ = asyncio.run(round_trip(kafka_broker.bootstrap, topic, messages, enable_idempotence=True))
    assert [(r.value, r.offset) for r in got] == [(value, m.offset) for (_, value, _, _), m in zip(messages, sent)]
