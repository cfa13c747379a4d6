"""The same client scripts against Apache Kafka 4.4 (one KRaft node, the reference:
``mpbroker.testing.apache_kafka``) and against mpbroker's modern listener, their answers
compared. Every difference found is either an assertion of what both answer or an
``xfail(strict=True)`` that names the intended difference (so a change on either side
shows). Kafka's jars come from Maven Central through ``mvn`` the first time (cached
under ~/.cache/mpbroker-apache-kafka); the module is skipped, with the reason, only when
Maven or Java is missing or Maven Central does not answer.

Offsets differ by design: Kafka's are 0, 1, 2, ...; mpbroker's are byte positions with
gaps. So offsets are compared by order and count, and by what a client does with them
(it continues at last + 1 and gets exactly what came next)."""

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic
from kafka.protocol.admin import DescribeAclsRequest, DescribeAclsResponse
from kafka.protocol.metadata import ApiVersionsResponse, MetadataRequest, MetadataResponse
from kafka.protocol.producer import InitProducerIdRequest, InitProducerIdResponse

from mpbroker.kafka_protocol.api import SUPPORTED
from mpbroker.records import encode_batch
from mpbroker.testing import apache_kafka
from mpbroker.testing.local_broker import LocalBroker
from tests.kafka.conftest import TIMEOUT_S, assert_healthy, require_apache_kafka
from tests.kafka.side_by_side import (
    BAD_BATCHES,
    CLIENTS,
    PARTITIONS,
    bad_then_good,
    create_topic,
    flexible_frame,
    init_producer_id,
    list_offset,
    on_both,
    round_trip,
    sample,
    try_produce,
)
from tests.kafka.wire import BASE_TS, Wire, good_batch
from tests.polling import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
_serial = iter(range(10**6))


@pytest.fixture(scope="module")
def apache(tmp_path_factory):
    require_apache_kafka()
    with apache_kafka.ApacheKafka(tmp_path_factory.mktemp("apache-kafka"), num_partitions=PARTITIONS) as kafka:
        yield kafka


@pytest.fixture(scope="module")
def mp(tmp_path_factory):
    with LocalBroker(tmp_path_factory.mktemp("mpbroker"), num_workers=2, num_partitions=PARTITIONS) as broker:
        yield broker
        assert_healthy(broker)


@pytest.fixture
def both(apache, mp):
    return {"kafka": apache, "mpbroker": mp}


@pytest.fixture
def topic(request):
    name = "".join(c if c.isalnum() else "-" for c in request.node.name)[:60].strip("-")
    return f"{name}-{next(_serial)}"










# ApiVersions


def api_versions(broker):
    with Wire(broker) as wire:
        answer = wire.api_versions(2)
    assert answer.error_code == 0
    return {k.api_key: (k.min_version, k.max_version) for k in answer.api_keys}


def test_api_versions_mpbrokers_ranges_lie_inside_kafkas(both):
    answers = on_both(both, api_versions)
    kafka, mp = answers["kafka"], answers["mpbroker"]
    assert set(mp) == {int(key) for key in SUPPORTED}
    outside = {key: (mp[key], kafka.get(key)) for key in mp
               if key not in kafka or not (kafka[key][0] <= mp[key][0] and mp[key][1] <= kafka[key][1])}
    assert not outside, f"mpbroker's range, Kafka's: {outside}"




def api_versions_unknown_version(broker):
    with Wire(broker) as wire:
        wire.send(flexible_frame(18, 99, 7, b"\x05wire\x021\x00"))
        correlation, body = wire.read_frame()
        answer = ApiVersionsResponse.decode(body, version=0)
        still_open = wire.api_versions(0).error_code
    return correlation, answer.error_code, 18 in {k.api_key for k in answer.api_keys}, still_open


def test_api_versions_unknown_version(both):
    answers = on_both(both, api_versions_unknown_version)
    assert answers["kafka"] == answers["mpbroker"] == (7, 35, True, 0)


def test_api_versions_v3_flexible(both):
    def script(broker):
        with Wire(broker) as wire:
            wire.send(flexible_frame(18, 3, 8, b"\x05wire\x021\x00"))
            correlation, body = wire.read_frame()
        answer = ApiVersionsResponse.decode(body, version=3)
        return correlation, answer.error_code, 0 in {k.api_key for k in answer.api_keys}
    answers = on_both(both, script)
    assert answers["kafka"] == answers["mpbroker"] == (8, 0, True)


# Metadata


def metadata_after_produce(broker, topic):
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    reports = []
    producer.produce(topic, value=b"v", on_delivery=lambda err, msg: reports.append(err))
    assert producer.flush(TIMEOUT_S) == 0 and reports == [None]
    metadata = AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=TIMEOUT_S)
    [node] = metadata.brokers.values()
    described = metadata.topics[topic]
    return {
        "brokers": len(metadata.brokers),
        "address": (node.host, node.port) == (broker.host, broker.kafka_port),
        "controller is the broker": metadata.controller_id == node.id,
        "topic error": described.error,
        "partitions": sorted(described.partitions),
        "leaders": {p.leader == node.id for p in described.partitions.values()},
        "replicas": {tuple(p.replicas) == (node.id,) and tuple(p.isrs) == (node.id,)
                     for p in described.partitions.values()},
    }


def test_metadata_one_broker_topic_auto_created_on_produce(both, topic):
    answers = on_both(both, metadata_after_produce, topic)
    assert answers["kafka"] == answers["mpbroker"], answers
    assert answers["kafka"]["partitions"] == list(range(PARTITIONS))


# Produce and consume round trips
















@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("client", CLIENTS)
def test_round_trip(both, topic, client, codec):
    answers = on_both(both, round_trip, topic, client, codec)
    expected = [(key, value, headers, timestamp) for key, value, headers, timestamp in sample(5)]
    for name, answer in answers.items():
        records = [r[:4] for r in answer["read"] + answer["read on"]]
        assert records == expected, name
        read_offsets = [r[4] for r in answer["read"] + answer["read on"]]
        assert read_offsets == answer["produced offsets"], name
        assert read_offsets == sorted(set(read_offsets)), name
    assert answers["kafka"]["produced offsets"] == list(range(5))


# Bad input: the error codes of test_bad_input.py that both can be sent














REFUSED_ALIKE = ["bad-crc", "bad-crc-field", "oversized", "count-disagrees"]


@pytest.mark.parametrize("bad", REFUSED_ALIKE)
def test_bad_batch(both, topic, bad):
    answers = on_both(both, bad_then_good, topic, BAD_BATCHES[bad]())
    assert answers["kafka"] == answers["mpbroker"], answers
    assert answers["kafka"][1], "the log end moved"


@pytest.mark.xfail(strict=True, reason="intended difference: a batch cut short is CORRUPT_MESSAGE (2) in mpbroker "
                   "(its length runs past the data), INVALID_RECORD (87) in Kafka ('must have at least one "
                   "record batch'); both refuse it")
def test_truncated_batch(both, topic):
    answers = on_both(both, bad_then_good, topic, BAD_BATCHES["truncated"]())
    assert answers == {"kafka": ((87, -1), True), "mpbroker": ((2, -1), True)}
    assert answers["kafka"] == answers["mpbroker"]


@pytest.mark.parametrize("bad", ["deltas-0-2", "deltas-1-2", "deltas-0-0", "deltas-1-0"])
@pytest.mark.xfail(strict=True, reason="intended difference: Kafka appends an uncompressed batch whose records' "
                   "offset deltas are not 0..n-1 (it assigns the base offset and never reads them); mpbroker "
                   "refuses it with INVALID_RECORD (87): its offsets (q-n .. q-1) rest on them")
def test_wrong_offset_deltas(both, topic, bad):
    answers = on_both(both, bad_then_good, topic, BAD_BATCHES[bad]())
    assert answers["kafka"][0][0] == 0 and answers["kafka"][1] is False  # appended
    assert answers["mpbroker"] == ((87, -1), True)
    assert answers["kafka"] == answers["mpbroker"]


def two_batches(broker, topic):
    create_topic(broker, topic)
    return try_produce(broker, topic, 0, good_batch(2) + good_batch(3))


@pytest.mark.xfail(strict=True, reason="intended difference (leniency): Kafka refuses a Produce (v3+) whose "
                   "partition holds more than one batch with INVALID_RECORD (87); mpbroker appends both")
def test_two_batches_in_one_partition(both, topic):
    answers = on_both(both, two_batches, topic)
    assert answers["kafka"] == (87, -1) and answers["mpbroker"][0] == 0
    assert answers["kafka"] == answers["mpbroker"]


@pytest.mark.parametrize("partition", [2, 5, 2**31 - 1, -1, -2])
def test_unknown_partition(both, topic, partition):
    def script(broker):
        create_topic(broker, topic)
        return try_produce(broker, topic, partition, good_batch())
    answers = on_both(both, script)
    assert answers["kafka"] == answers["mpbroker"], answers


INVALID_NAMES = ["../x", "..", ".", "a/b", "x" * 300, "", "sp ace"]


@pytest.mark.parametrize("name", INVALID_NAMES)
@pytest.mark.xfail(strict=True, reason="intended difference: a Produce for an invalid topic name is "
                   "INVALID_TOPIC_EXCEPTION (17) in mpbroker, which creates topics on Produce and so judges the "
                   "name; UNKNOWN_TOPIC_OR_PARTITION (3) in Kafka, which creates topics on Metadata only")
def test_invalid_topic_name_produce(both, name):
    answers = on_both(both, try_produce, name, 0, good_batch())
    assert answers == {"kafka": (3, -1), "mpbroker": (17, -1)}
    assert answers["kafka"] == answers["mpbroker"]


def metadata_auto_create(broker, name, version=4):
    request = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=name)],
                              allow_auto_topic_creation=True)
    with Wire(broker) as wire:
        answer = wire.call(3, version, bytes(request.encode(version=version)), MetadataResponse)
    [described] = answer.topics
    return described.error_code


@pytest.mark.parametrize("name", INVALID_NAMES)
def test_invalid_topic_name_metadata(both, name):
    answers = on_both(both, metadata_auto_create, name)
    assert answers["kafka"] == answers["mpbroker"] == 17, answers


def produce_unknown_topic(broker, topic):
    answer = try_produce(broker, topic, 0, good_batch())
    listed = topic in AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=TIMEOUT_S).topics
    return answer[0], listed


@pytest.mark.xfail(strict=True, reason="intended difference (README: created on first use): a Produce for an "
                   "unknown topic creates it in mpbroker and is appended; Kafka answers UNKNOWN_TOPIC_OR_PARTITION "
                   "(3) and creates nothing (clients ask Metadata first, which creates it in both)")
def test_produce_to_unknown_topic(both, topic):
    answers = on_both(both, produce_unknown_topic, topic)
    assert answers == {"kafka": (3, False), "mpbroker": (0, True)}
    assert answers["kafka"] == answers["mpbroker"]


def test_produce_v2(both, topic):
    def script(broker):
        create_topic(broker, topic)
        return try_produce(broker, topic, 0, good_batch(), version=2)
    answers = on_both(both, script)
    assert answers == {"kafka": "closed", "mpbroker": (35, -1)}


# ListOffsets


def list_offsets_script(broker, topic, version):
    """Three batches (times T, T+60 s, T+120 s) and one of three records (T+200 s, +10 ms,
    +20 ms); the answers as indices of the records produced (None: -1)."""
    create_topic(broker, topic)
    times = [BASE_TS, BASE_TS + 60_000, BASE_TS + 120_000]
    offsets = []
    with Wire(broker) as wire:
        for t in times:
            error, base = wire.produce(topic, 0, encode_batch([(None, b"v", [], t)]))
            assert error == 0
            offsets.append(base)
        batch = [(None, b"w", [], BASE_TS + 200_000 + 10 * i) for i in range(3)]
        error, base = wire.produce(topic, 0, encode_batch(batch))
        assert error == 0
        end = list_offset(wire, topic, 0, -1)[1]
        offsets += [end - 3, end - 2, end - 1]  # either broker: a batch's records are its last offsets
        index = {offset: i for i, offset in enumerate(offsets)}
        index[end] = "end"
        index[-1] = None

        def ask(timestamp):
            error, offset, found = list_offset(wire, topic, 0, timestamp, version=version)
            assert error == 0
            return index.get(offset, f"offset {offset}"), found
        answers = {what: ask(t) for what, t in {
            "earliest": -2, "latest": -1, "before all": BASE_TS - 1, "first": BASE_TS, "between": BASE_TS + 1,
            "second": BASE_TS + 60_000, "third": BASE_TS + 120_000, "batch start": BASE_TS + 200_000,
            "after all": BASE_TS + 300_000}.items()}
        answers["inside a batch"] = ask(BASE_TS + 200_010)
    return answers


LIST_OFFSETS_DIFFERENT = ("earliest",)


@pytest.mark.parametrize("version", [1, 4])
def test_list_offsets(both, topic, version):
    answers = on_both(both, list_offsets_script, topic, version)
    for key in LIST_OFFSETS_DIFFERENT:
        for answer in answers.values():
            answer.pop(key)
    assert answers["kafka"] == answers["mpbroker"], answers


@pytest.mark.xfail(strict=True, reason="intended difference (byte offsets): earliest is the log start, byte 0, "
                   "not the first record's offset (its batch's end minus its count); a consumer reading from it "
                   "gets that first record, as from Kafka's 0")
def test_list_offsets_earliest(both, topic):
    answers = on_both(both, list_offsets_script, topic, 1)
    assert answers["kafka"]["earliest"] == (0, -1) and answers["mpbroker"]["earliest"] == ("offset 0", -1)
    assert answers["kafka"]["earliest"] == answers["mpbroker"]["earliest"]


def test_list_offsets_by_time_finds_the_record(both, topic):
    """By time, the first record at or after it with its own timestamp, inside a batch
    too (mpbroker answered its batch's first offset and newest time before; the record's
    index among the records is compared, the offsets being byte positions here)."""
    answers = on_both(both, list_offsets_script, topic, 1)
    kafka, mp = answers["kafka"], answers["mpbroker"]
    assert kafka["batch start"] == (3, BASE_TS + 200_000) and kafka["inside a batch"] == (4, BASE_TS + 200_010)
    assert (kafka["batch start"], kafka["inside a batch"]) == (mp["batch start"], mp["inside a batch"])


# CreateTopics and DescribeConfigs

TOPIC_CONFIG = {"retention.ms": "86400000", "retention.bytes": "1073741824", "segment.bytes": "2097152",
                "segment.ms": "3600000", "max.message.bytes": "2000000", "flush.messages": "1000",
                "flush.ms": "5000", "min.insync.replicas": "1", "message.timestamp.type": "LogAppendTime"}


def create_and_describe(broker, topic):
    create_topic(broker, topic, partitions=3, config=TOPIC_CONFIG)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    [future] = admin.describe_configs([ConfigResource("TOPIC", topic)]).values()
    entries = future.result(TIMEOUT_S)
    metadata = admin.list_topics(topic, timeout=TIMEOUT_S).topics[topic]
    return {"partitions": len(metadata.partitions),
            "set": {key: (entries[key].value, entries[key].source, entries[key].is_default, entries[key].is_read_only)
                    for key in TOPIC_CONFIG if key in entries}}


def test_create_topics_with_configs_and_describe_them(both, topic):
    answers = on_both(both, create_and_describe, topic)
    assert answers["kafka"] == answers["mpbroker"], answers


def describe_defaults(broker, topic):
    """DescribeConfigs of a topic created without configs: ``{key: (value, source, is_default)}``
    for the keys mpbroker answers."""
    create_topic(broker, topic, partitions=1)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    [future] = admin.describe_configs([ConfigResource("TOPIC", topic)]).values()
    return {key: (entry.value, entry.source, entry.is_default, entry.is_read_only)
            for key, entry in future.result(TIMEOUT_S).items()}


# mpbroker's own broker defaults (0.7's log.flush.interval, log.default.flush.interval.ms,
# max.message.size) where Kafka's are "never" and 1 MiB + 12.
OWN_DEFAULTS = {"flush.messages": ("9223372036854775807", "500"), "flush.ms": ("9223372036854775807", "3000"),
                "max.message.bytes": ("1048588", "1000000")}


def test_describe_configs_default_values(both, topic):
    answers = on_both(both, describe_defaults, topic)
    kafka, mp = answers["kafka"], answers["mpbroker"]
    assert set(mp) <= set(kafka) and set(TOPIC_CONFIG) <= set(mp)
    assert {key: (kafka[key][0], mp[key][0]) for key in mp if kafka[key][0] != mp[key][0]} == OWN_DEFAULTS


def test_describe_configs_default_sources(both, topic):
    """A topic key set nowhere (neither the topic nor server.properties): DEFAULT_CONFIG
    (5), is_default, not read-only, as Kafka says (mpbroker said STATIC_BROKER_CONFIG,
    read-only before). min.insync.replicas differs on purpose: Kafka's comes from the
    cluster-level dynamic default that kafka-storage format writes (source 3)."""
    answers = on_both(both, describe_defaults, topic)
    kafka, mp = answers["kafka"], answers["mpbroker"]
    assert {mp[key][1:] for key in mp} == {(5, True, False)}
    assert kafka["min.insync.replicas"][1] == 3
    assert {key: kafka[key][1:] for key in mp if key != "min.insync.replicas"} == \
        {key: mp[key][1:] for key in mp if key != "min.insync.replicas"}


def create_errors(broker, topic):
    create_topic(broker, topic)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})

    def code(new_topic):
        try:
            admin.create_topics([new_topic])[new_topic.topic].result(TIMEOUT_S)
            return 0
        except Exception as e:  # KafkaException around a KafkaError
            return e.args[0].code()
    return {"exists": code(NewTopic(topic, 1, 1)),
            "bad config value": code(NewTopic(topic + "-c", 1, 1, config={"retention.ms": "soon"})),
            "zero partitions": code(NewTopic(topic + "-p", 0, 1)),
            "replication 3": code(NewTopic(topic + "-r", 1, 3))}


def test_create_topics_errors(both, topic):
    answers = on_both(both, create_errors, topic)
    assert answers["kafka"] == answers["mpbroker"], answers


# Idempotent producer: a retried batch




def idempotent_script(broker, topic):
    create_topic(broker, topic)
    with Wire(broker) as wire:
        producer_id, epoch = init_producer_id(wire)

        def batch(sequence, n=2):
            return encode_batch([(b"k", b"v%d" % (sequence + i), [], BASE_TS) for i in range(n)],
                                producer_id=producer_id, producer_epoch=epoch, base_sequence=sequence)
        first = wire.produce(topic, 0, batch(0))
        end = list_offset(wire, topic, 0, -1)[1]
        again = wire.produce(topic, 0, batch(0))
        unmoved = list_offset(wire, topic, 0, -1)[1] == end
        second = wire.produce(topic, 0, batch(2))
        gap = wire.produce(topic, 0, batch(10))
    return {"first": first[0], "retry answered with the first offset": again == first, "log end unmoved": unmoved,
            "second": second[0], "gap": gap}


def test_idempotent_producer_retry(both, topic):
    answers = on_both(both, idempotent_script, topic)
    assert answers["kafka"] == answers["mpbroker"], answers


# KIP-360's InitProducerId and the DescribeAcls that tells kafka-python it is there (both flexible)


def init_producer_id_again_and_describe_acls(broker):
    """InitProducerId v4 twice, the second naming the first's id and epoch (a producer
    without transactional.id asking again, as kafka-python does after
    OUT_OF_ORDER_SEQUENCE_NUMBER); DescribeAcls v2 of everything."""
    def init(producer_id, epoch):
        """The answer, once it is not COORDINATOR_LOAD_IN_PROGRESS (a fresh Kafka's first ones)."""
        request = InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60000, producer_id=producer_id,
                                        producer_epoch=epoch)

        def answered():
            answer = wire.call(22, 4, bytes(request.encode(version=4)), InitProducerIdResponse, flexible=True)
            return answer if answer.error_code != 14 else None
        return wait_for(answered, TIMEOUT_S, "InitProducerId past COORDINATOR_LOAD_IN_PROGRESS")

    acls = DescribeAclsRequest(resource_type_filter=1, resource_name_filter=None, pattern_type_filter=1,
                               principal_filter=None, host_filter=None, operation=1, permission_type=1)
    with Wire(broker) as wire:
        first = init(-1, -1)
        again = init(first.producer_id, first.producer_epoch)
        described = wire.call(29, 2, bytes(acls.encode(version=2)), DescribeAclsResponse, flexible=True)
    return {"errors": (first.error_code, again.error_code), "epochs": (first.producer_epoch, again.producer_epoch),
            "a new id": again.producer_id != first.producer_id,
            "describe acls": (described.error_code, bool(described.error_message), described.resources)}


def test_init_producer_id_naming_its_id_gets_a_new_one_and_describe_acls_has_no_authorizer(both):
    answers = on_both(both, init_producer_id_again_and_describe_acls)
    assert answers["kafka"] == answers["mpbroker"], answers
    assert answers["mpbroker"]["a new id"] and answers["mpbroker"]["describe acls"] == (54, True, [])
