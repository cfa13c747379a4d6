"""How the side-by-side comparison (test_against_apache_kafka.py) drives one broker,
Apache Kafka or mpbroker: a topic created and led, ListOffsets and Produce on a wire of
its own, flexible request frames, each client's produce and consume, the bad batches
both are sent, and InitProducerId. Each returns what the broker answered, for the
tests to compare."""

import struct
import time

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KafkaPythonTopicPartition
from kafka.protocol.consumer import ListOffsetsRequest, ListOffsetsResponse
from kafka.protocol.producer import InitProducerIdRequest, InitProducerIdResponse

from mpbroker.records.batch import pack_batch
from mpbroker.records.crc import crc32c
from tests.kafka.conftest import TIMEOUT_S
from tests.kafka.test_bad_input import record
from tests.kafka.wire import BASE_TS, Wire, good_batch
from tests.polling import wait_for

PARTITIONS = 2


def on_both(both, script, *args, **kwargs):
    """``{"kafka": answer, "mpbroker": answer}`` of one script run against each."""
    return {name: script(broker, *args, **kwargs) for name, broker in both.items()}


def create_topic(broker, topic, partitions=PARTITIONS, config=None):
    """CreateTopics, then wait until every partition has a leader and answers ListOffsets
    (Kafka's leaders take a moment after CreateTopics answers)."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1, config=config or {})])[topic].result(TIMEOUT_S)

    def led():
        metadata = admin.list_topics(topic, timeout=TIMEOUT_S).topics.get(topic)
        return metadata is not None and metadata.error is None and len(metadata.partitions) == partitions and all(
            p.leader >= 0 and p.error is None for p in metadata.partitions.values())
    wait_for(led, TIMEOUT_S, f"leaders of {topic}")
    with Wire(broker) as wire:
        wait_for(lambda: all(list_offset(wire, topic, p, -1)[0] == 0 for p in range(partitions)), TIMEOUT_S,
                 "ListOffsets")


def list_offset(wire, topic, partition, timestamp, version=1):
    """``(error, offset, timestamp)`` of ListOffsets for one partition."""
    request = ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=[
        ListOffsetsRequest.ListOffsetsTopic(name=topic, partitions=[
            ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition(
                partition_index=partition, current_leader_epoch=-1, timestamp=timestamp, max_num_offsets=1)])])
    answer = wire.call(2, version, bytes(request.encode(version=version)), ListOffsetsResponse)
    [p] = answer.topics[0].partitions
    return p.error_code, p.offset, p.timestamp


def try_produce(broker, topic, partition, records, version=3):
    """``(error, base offset)`` on a connection of its own, or "closed" if the broker
    closed it instead of answering."""
    with Wire(broker) as wire:
        try:
            return wire.produce(topic, partition, records, version=version)
        except AssertionError:
            return "closed"


def flexible_frame(api_key, version, correlation, body, client_id=b"wire"):
    """Request header v2 (the tagged fields after the client id), as clients send
    ApiVersions 3 and up."""
    payload = struct.pack(">hhih", api_key, version, correlation, len(client_id)) + client_id + b"\x00" + body
    return struct.pack(">i", len(payload)) + payload


def sample(n, start=0):
    return [(b"key-%d" % i, b"value-%d " % i * (i + 1), [("h", b"x%d" % i), ("second", b"")], BASE_TS + 7 * i)
            for i in range(start, start + n)]


def confluent_produce(broker, topic, messages, codec):
    producer = Producer({"bootstrap.servers": broker.bootstrap, "compression.type": codec, "linger.ms": 50})
    reports = []
    for key, value, headers, timestamp in messages:
        producer.produce(topic, value=value, key=key, headers=headers, timestamp=timestamp, partition=0,
                         on_delivery=lambda err, msg: reports.append((err, msg.offset())))
    assert producer.flush(TIMEOUT_S) == 0
    assert [err for err, _ in reports] == [None] * len(messages)
    return [offset for _, offset in reports]


def confluent_consume(broker, topic, count, offset):
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "unused", "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, 0, offset)])
        got = []
        deadline = time.monotonic() + TIMEOUT_S
        while len(got) < count and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None:
                assert message.error() is None, message.error()
                got.append(message)
        extra = consumer.poll(0.5)  # nothing more than what was produced
        assert extra is None or extra.error() is not None, extra.value()
    finally:
        consumer.close()
    return [(m.key(), m.value(), [(k, v or b"") for k, v in m.headers() or []], m.timestamp()[1], m.offset())
            for m in got]


def kafka_python_produce(broker, topic, messages, codec):
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, compression_type=None if codec == "none" else codec,
                             linger_ms=50)
    try:
        futures = [producer.send(topic, key=key, value=value, headers=headers, timestamp_ms=timestamp, partition=0)
                   for key, value, headers, timestamp in messages]
        producer.flush(TIMEOUT_S)
        return [future.get(TIMEOUT_S).offset for future in futures]
    finally:
        producer.close(5)


def kafka_python_consume(broker, topic, count, offset):
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False)
    try:
        tp = KafkaPythonTopicPartition(topic, 0)
        consumer.assign([tp])
        if offset == OFFSET_BEGINNING:
            consumer.seek_to_beginning(tp)
        else:
            consumer.seek(tp, offset)
        got = []
        deadline = time.monotonic() + TIMEOUT_S
        while len(got) < count and time.monotonic() < deadline:
            got += consumer.poll(500).get(tp, [])
        got += consumer.poll(300).get(tp, [])
    finally:
        consumer.close()
    return [(r.key, r.value, [(k, v or b"") for k, v in r.headers], r.timestamp, r.offset) for r in got]


CLIENTS = {"confluent-kafka": (confluent_produce, confluent_consume),
           "kafka-python": (kafka_python_produce, kafka_python_consume)}


def round_trip(broker, topic, client, codec):
    """Three records, read from the beginning; two more, read from last + 1."""
    produce, consume = CLIENTS[client]
    first = produce(broker, topic, sample(3), codec)
    read = consume(broker, topic, 3, OFFSET_BEGINNING)
    second = produce(broker, topic, sample(2, start=3), codec)
    read_on = consume(broker, topic, 2, read[-1][-1] + 1)
    return {"produced offsets": first + second, "read": read, "read on": read_on}


def bad_crc():
    batch = bytearray(good_batch(3))
    batch[-3] ^= 0xFF
    return bytes(batch)


def bad_crc_field():
    batch = bytearray(good_batch(3))
    batch[17] ^= 0x01
    return bytes(batch)


def bad_deltas(deltas):
    region = b"".join(record(delta, b"value") for delta in deltas)
    return pack_batch(region, len(deltas), base_timestamp=BASE_TS, max_timestamp=BASE_TS)


def count_disagrees():
    batch = bytearray(good_batch(2))
    struct.pack_into(">i", batch, 57, 3)
    struct.pack_into(">I", batch, 17, crc32c(bytes(batch[21:])))
    return bytes(batch)


BAD_BATCHES = {
    "bad-crc": bad_crc,
    "bad-crc-field": bad_crc_field,
    "truncated": lambda: good_batch(3)[:-4],
    "oversized": lambda: good_batch(1, size=1_100_000),  # past both limits (1,000,000 and 1,048,588)
    "deltas-0-2": lambda: bad_deltas((0, 2)),
    "deltas-1-2": lambda: bad_deltas((1, 2)),
    "deltas-0-0": lambda: bad_deltas((0, 0)),
    "deltas-1-0": lambda: bad_deltas((1, 0)),
    "count-disagrees": count_disagrees,
}


def bad_then_good(broker, topic, records):
    """The bad batch's answer, and whether the log end stayed where it was."""
    create_topic(broker, topic)
    with Wire(broker) as wire:
        assert wire.produce(topic, 0, good_batch(3))[0] == 0
        end = list_offset(wire, topic, 0, -1)[1]
    answer = try_produce(broker, topic, 0, records)
    with Wire(broker) as wire:
        unmoved = list_offset(wire, topic, 0, -1)[1] == end
        assert wire.produce(topic, 0, good_batch(2))[0] == 0
    return answer, unmoved


def init_producer_id(wire):
    request = InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60000)
    answer = wire.call(22, 0, bytes(request.encode(version=0)), InitProducerIdResponse)
    assert answer.error_code == 0
    return answer.producer_id, answer.producer_epoch
