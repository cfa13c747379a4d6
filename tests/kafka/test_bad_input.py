"""Bad input on ``kafka.port``, over raw sockets: malformed frames, an unknown API,
versions not served, damaged and refused batches, a hostile topic name, a null where the
spec allows none; each is answered with Kafka's error or its connection closed, nothing
of it reaches a log, and the broker goes on serving. And a 0.7 topic (written by
mpbroker's own 0.7 producer) read by a modern client (confluent-kafka)."""

import os
import struct
import time

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from mpbroker.clients import Producer as LegacyProducer
from mpbroker.records.batch import pack_batch
from mpbroker.records.crc import crc32c
from mpbroker.records.records import encode_varint
from tests.kafka.conftest import assert_healthy
from tests.kafka.wire import BASE_TS, Wire, good_batch, produce_body, request_frame

CORRUPT_MESSAGE = 2
UNKNOWN_TOPIC_OR_PARTITION = 3
MESSAGE_TOO_LARGE = 10
INVALID_TOPIC_EXCEPTION = 17
UNSUPPORTED_VERSION = 35
INVALID_RECORD = 87


def assert_still_serving(broker):
    with Wire(broker) as wire:
        answer = wire.api_versions(0)
        assert answer.error_code == 0 and any(k.api_key == 0 for k in answer.api_keys)


@pytest.mark.parametrize("frame", [
    pytest.param(struct.pack(">i", 4) + b"\x00\x03\x00\x01", id="size-under-header"),
    pytest.param(struct.pack(">i", 0), id="size-zero"),
    pytest.param(struct.pack(">i", -5) + b"\x00" * 8, id="size-negative"),
    pytest.param(struct.pack(">ihhih", 11, 3, 1, 7, 20) + b"a", id="truncated-header"),  # client id runs past
    pytest.param(struct.pack(">ihhi", 8, 3, 1, 7), id="header-without-client-id"),
    pytest.param(request_frame(3, 1, 9, b"\x00\x00\x00\x05\x00"), id="truncated-body"),
])
def test_malformed_frame_closes_connection(kafka_broker, frame):
    with Wire(kafka_broker) as wire:
        wire.send(frame)
        assert wire.closed_by_broker()
    assert_still_serving(kafka_broker)


@pytest.mark.parametrize("api_key", [9999, -1, 22])  # unknown keys; InitProducerId with no body (malformed)
def test_unknown_api_key_closes_connection(kafka_broker, api_key):
    with Wire(kafka_broker) as wire:
        wire.send(request_frame(api_key, 0, 1, b""))
        assert wire.closed_by_broker()
    assert_still_serving(kafka_broker)


@pytest.mark.parametrize("api_key, version", [(47, 0), (25, 0), (26, 1), (48, 0), (17, 1), (36, 0)])
def test_an_api_not_served_gets_its_own_answer_with_unsupported_version(kafka_broker, api_key, version):
    """OffsetDelete, the transactions' AddOffsetsToTxn and EndTxn, DescribeClientQuotas, SASL's
    handshake and authentication (none served here; the group APIs were, until they
    were served): answered in their own form with UNSUPPORTED_VERSION, the connection
    kept (a client may send them)."""
    from mpbroker.kafka_protocol.messages import unserved_answer

    with Wire(kafka_broker) as wire:
        request_class, _ = unserved_answer(api_key, version)
        body = wire.call(api_key, version, b"")
        answer = unserved_answer(api_key, version)[1].decode(body, version=version)
        assert answer.error_code == UNSUPPORTED_VERSION, (request_class, answer)
        assert wire.api_versions(0).error_code == 0  # the same connection goes on
    assert_still_serving(kafka_broker)


def test_api_versions_unknown_version_answered_in_v0(kafka_broker):
    with Wire(kafka_broker) as wire:
        answer = wire.api_versions(99)
        assert answer.error_code == UNSUPPORTED_VERSION
        versions = {k.api_key: (k.min_version, k.max_version) for k in answer.api_keys}
        assert versions[18] == (0, 3) and versions[0][1] >= 3 and {1, 2, 3} <= set(versions)
        assert wire.api_versions(0).error_code == 0  # the connection stays open


def test_produce_v2_unsupported_version_per_partition(kafka_broker, topic):
    with Wire(kafka_broker) as wire:
        assert wire.produce(topic, 0, good_batch(), version=2) == (UNSUPPORTED_VERSION, -1)
        error, offset = wire.produce(topic, 0, good_batch(), version=3)
        assert error == 0 and offset >= 0


def test_fetch_below_served_versions_closes(kafka_broker):
    with Wire(kafka_broker) as wire:
        wire.send(request_frame(1, 3, 1, b"\x00" * 20))  # Fetch v3: not advertised
        assert wire.closed_by_broker()


def produce_after_refusal(broker, topic, bad_records, expected_error):
    """Good, bad, good on one partition: the bad one is refused with ``expected_error``
    and does not move the log end (offsets are byte positions: the next good batch's
    base offset is the end before the bad one plus its size minus its record count)."""
    with Wire(broker) as wire:
        first = good_batch(3)
        assert wire.produce(topic, 0, first)[0] == 0
        end = wire.latest_offset(topic, 0)
        assert wire.produce(topic, 0, bad_records) == (expected_error, -1)
        assert wire.latest_offset(topic, 0) == end
        second = good_batch(2)
        error, offset = wire.produce(topic, 0, second)
        assert error == 0
        assert offset == end + len(second) - 2
        assert wire.latest_offset(topic, 0) == offset + 2


def test_bad_crc(kafka_broker, topic):
    batch = bytearray(good_batch(3))
    batch[-3] ^= 0xFF  # a value byte: covered by the CRC
    produce_after_refusal(kafka_broker, topic, bytes(batch), CORRUPT_MESSAGE)


def test_bad_crc_field(kafka_broker, topic):
    batch = bytearray(good_batch(3))
    batch[17] ^= 0x01  # the CRC itself
    produce_after_refusal(kafka_broker, topic, bytes(batch), CORRUPT_MESSAGE)


def test_good_then_bad_batch_in_one_partition(kafka_broker, topic):
    """Two batches in one partition's records, the second damaged: all refused."""
    bad = bytearray(good_batch(2))
    bad[-1] ^= 0x55
    produce_after_refusal(kafka_broker, topic, good_batch(2) + bytes(bad), CORRUPT_MESSAGE)


def test_truncated_batch(kafka_broker, topic):
    produce_after_refusal(kafka_broker, topic, good_batch(3)[:-4], CORRUPT_MESSAGE)


def test_oversized_batch(kafka_broker, topic):
    big = good_batch(1, size=1_000_100)  # max.message.size is 1000000
    produce_after_refusal(kafka_broker, topic, big, MESSAGE_TOO_LARGE)


def record(offset_delta: int, value: bytes) -> bytes:
    body = b"\x00" + encode_varint(0) + encode_varint(offset_delta) + encode_varint(-1) + \
        encode_varint(len(value)) + value + encode_varint(0)
    return encode_varint(len(body)) + body


@pytest.mark.parametrize("deltas", [(0, 2), (1, 2), (0, 0), (1, 0)])
def test_wrong_offset_deltas(kafka_broker, topic, deltas):
    region = b"".join(record(delta, b"value") for delta in deltas)
    batch = pack_batch(region, len(deltas), base_timestamp=BASE_TS, max_timestamp=BASE_TS)
    produce_after_refusal(kafka_broker, topic, batch, INVALID_RECORD)


def test_count_disagrees_with_last_offset_delta(kafka_broker, topic):
    batch = bytearray(good_batch(2))
    struct.pack_into(">i", batch, 57, 3)  # records count 3, lastOffsetDelta 1; the CRC made right again
    struct.pack_into(">I", batch, 17, crc32c(bytes(batch[21:])))
    produce_after_refusal(kafka_broker, topic, bytes(batch), INVALID_RECORD)


@pytest.mark.parametrize("name", ["../x", "..", ".", "a/b", "x" * 300, "", "sp ace"])
def test_hostile_topic_name(kafka_broker, name):
    with Wire(kafka_broker) as wire:
        assert wire.produce(name, 0, good_batch()) == (INVALID_TOPIC_EXCEPTION, -1)
    root = os.path.dirname(kafka_broker.log_dir)
    for directory, dirs, _ in os.walk(os.path.dirname(root)):
        assert not any(d.startswith("x-") for d in dirs), (directory, dirs)
    assert_still_serving(kafka_broker)


@pytest.mark.parametrize("partition", [2, 5, 2**31 - 1, -1, -2])
def test_unknown_partition(kafka_broker, topic, partition):
    with Wire(kafka_broker) as wire:
        assert wire.produce(topic, 0, good_batch())[0] == 0
        ends = [wire.latest_offset(topic, p) for p in (0, 1)]
        assert wire.produce(topic, partition, good_batch()) == (UNKNOWN_TOPIC_OR_PARTITION, -1)
        assert [wire.latest_offset(topic, p) for p in (0, 1)] == ends


def test_acks_zero_refused_closes(kafka_broker):
    with Wire(kafka_broker) as wire:
        wire.send(request_frame(0, 3, 1, produce_body("../x", 0, good_batch(), acks=0)))
        assert wire.closed_by_broker()
    assert_still_serving(kafka_broker)


def test_legacy_topic_read_by_confluent_kafka(kafka_broker, topic):
    payloads = [b"0.7 message %d" % i + b"!" * i for i in range(20)]
    with LegacyProducer(broker_list=f"0:{kafka_broker.host}:{kafka_broker.port}", acks="flush") as producer:
        partitions = {result.partition for start in range(0, 20, 5)
                      for result in producer.send(topic, payloads[start:start + 5], key=b"one key")}
    [partition] = partitions
    consumer = Consumer({"bootstrap.servers": kafka_broker.bootstrap, "group.id": "unused",
                         "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, partition, OFFSET_BEGINNING)])
        got = []
        deadline = time.monotonic() + 15
        while len(got) < len(payloads) and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None:
                assert message.error() is None, message.error()
                got.append(message)
    finally:
        consumer.close()
    assert [m.value() for m in got] == payloads
    offsets = [m.offset() for m in got]
    assert offsets == sorted(set(offsets))
    assert all(m.key() is None for m in got)


@pytest.mark.parametrize("records", [None, b""])
def test_a_produce_without_batches_is_refused_and_creates_nothing(kafka_broker, topic, records):
    from kafka.protocol.producer import ProduceRequest, ProduceResponse

    request = ProduceRequest(transactional_id=None, acks=1, timeout_ms=5000, topic_data=[
        ProduceRequest.TopicProduceData(name=topic, partition_data=[
            ProduceRequest.TopicProduceData.PartitionProduceData(index=0, records=records)])])
    with Wire(kafka_broker) as wire:
        answer = wire.call(0, 3, bytes(request.encode(version=3)), ProduceResponse)
    [partition] = answer.responses[0].partition_responses
    assert partition.error_code == 87  # INVALID_RECORD
    assert not any(name.startswith(f"{topic}-") for name in os.listdir(kafka_broker.log_dir))
    assert_still_serving(kafka_broker)


NULL_ARRAY, NULL_STRING = struct.pack(">i", -1), struct.pack(">h", -1)
FETCH_HEAD = struct.pack(">iiiib", -1, 0, 1, 1 << 20, 0)  # replica, max wait 0, min bytes, max bytes, isolation
FETCH_PARTITION = struct.pack(">iqi", 0, 0, 1 << 16)  # partition, fetch offset, partition max bytes (v4)


@pytest.mark.parametrize("api_key, version, body", [
    pytest.param(1, 4, FETCH_HEAD + NULL_ARRAY, id="fetch-v4-topics"),
    pytest.param(1, 11, FETCH_HEAD + struct.pack(">ii", 0, -1) + NULL_ARRAY + struct.pack(">ih", 0, 0),
                 id="fetch-v11-topics"),
    pytest.param(1, 7, FETCH_HEAD + struct.pack(">ii", 5, 1) + NULL_ARRAY + struct.pack(">i", 0),
                 id="fetch-v7-topics-in-a-session"),
    pytest.param(1, 4, FETCH_HEAD + struct.pack(">i", 1) + NULL_STRING + struct.pack(">i", 1) + FETCH_PARTITION,
                 id="fetch-topic-name"),
    pytest.param(1, 4, FETCH_HEAD + struct.pack(">ihs", 1, 1, b"t") + NULL_ARRAY, id="fetch-partitions"),
    pytest.param(0, 3, NULL_STRING + struct.pack(">hi", 1, 5000) + NULL_ARRAY, id="produce-topic-data"),
    pytest.param(0, 3, NULL_STRING + struct.pack(">hiihs", 1, 5000, 1, 1, b"t") + NULL_ARRAY,
                 id="produce-partitions"),
    pytest.param(2, 1, struct.pack(">i", -1) + NULL_ARRAY, id="list-offsets-topics"),
    pytest.param(3, 0, NULL_ARRAY, id="metadata-v0-topics"),
])
def test_a_null_where_the_spec_allows_none_closes_with_a_clear_error(kafka_broker, api_key, version, body):
    """A length of -1 for an array or string that is not nullable in that version: Kafka
    refuses the request ("non-nullable field ... was serialized as null"). Here too: the
    connection is closed and the log says which field, with no traceback."""
    with Wire(kafka_broker) as wire:
        wire.send(request_frame(api_key, version, 1, body))
        assert wire.closed_by_broker()
    assert_healthy(kafka_broker)
    output = kafka_broker.output()
    assert any("is null" in line for line in output.splitlines()[-5:]), output[-3000:]
    assert_still_serving(kafka_broker)


def test_nulls_the_spec_allows_are_answered(kafka_broker, topic):
    """Metadata v1's null topics (every topic) and Produce's null records (refused with
    INVALID_RECORD, as Kafka refuses a partition without a batch; the log unmoved) are
    answered on the same connection."""
    from kafka.protocol.metadata import MetadataResponse
    from kafka.protocol.producer import ProduceResponse

    with Wire(kafka_broker) as wire:
        assert wire.produce(topic, 0, good_batch())[0] == 0
        end = wire.latest_offset(topic, 0)
        answer = wire.call(3, 1, NULL_ARRAY, MetadataResponse)
        assert topic in {t.name for t in answer.topics}
        name = topic.encode()
        body = NULL_STRING + struct.pack(">hiih", 1, 5000, 1, len(name)) + name + struct.pack(">ii", 1, 0) + NULL_ARRAY
        answer = wire.call(0, 3, body, ProduceResponse)
        [partition] = answer.responses[0].partition_responses
        assert partition.error_code == INVALID_RECORD and partition.base_offset == -1
        assert wire.latest_offset(topic, 0) == end
    assert_healthy(kafka_broker)
