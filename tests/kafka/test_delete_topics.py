"""DeleteTopics on a broker alone (no ZooKeeper), with real clients: confluent-kafka's
and kafka-python's admin clients, kcat, raw requests for what needs exact timing.

A deleted topic leaves Metadata and the disk (partition directories, topic settings);
made again it starts empty, also after a restart; 0.7-format topics are deleted too
and 0.7 clients see an unknown partition; errors per topic (unknown, hostile name);
a long-polling fetch of it is answered at once; produces routed before the deletion
are deleted with it; a SIGKILL after the answer, or in the middle of the deletion
(one worker stopped, so half of the partitions are gone), loses the topic and
nothing else; ``mpbroker-topics --bootstrap-server ... delete``."""

import io
import os
import signal
import threading
import time

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaAdminClient
from kafka.protocol.admin import DeleteTopicsRequest, DeleteTopicsResponse
from kafka.protocol.consumer import FetchRequest, FetchResponse
from kafka.protocol.metadata import MetadataRequest, MetadataResponse
from kafka.protocol.producer import ProduceResponse

from mpbroker.cli import topics as topics_cli
from mpbroker.codec import requests as rq
from mpbroker.codec import responses
from mpbroker.codec.message import encode_message_set
from mpbroker.segments import topic_configs, topic_deletion
from mpbroker.segments.naming import partition_dir_name
from tests.broker.wire import WireClient
from tests.kafka import test_kcat
from tests.kafka.test_kcat import kcat
from tests.kafka.wire import Wire, good_batch, produce_body, request_frame

NONE, UNKNOWN_TOPIC_OR_PARTITION, REQUEST_TIMED_OUT, INVALID_TOPIC_EXCEPTION = 0, 3, 7, 17


def consume(broker, topic: str, partition: int) -> list:
    return test_kcat.consume(broker, topic, partition, *test_kcat.QUICK_END)


def partition_dirs(broker, topic: str) -> list:
    return sorted(name for name in os.listdir(broker.log_dir) if name.rsplit("-", 1)[0] == topic)


def leftovers(broker) -> list:
    """Directories renamed for deletion, and deletion marks, still in log.dir."""
    found = [name for name in os.listdir(broker.log_dir) if name.endswith("-delete")]
    return found + topic_deletion.marked(broker.log_dir)


def metadata(broker, topics=None, create: bool = False) -> dict:
    """topic -> (error, partition count) from Metadata v8."""
    wanted = None if topics is None else [MetadataRequest.MetadataRequestTopic(name=name) for name in topics]
    with Wire(broker) as wire:
        answer = wire.call(3, 8, bytes(MetadataRequest[8](
            topics=wanted, allow_auto_topic_creation=create, include_cluster_authorized_operations=False,
            include_topic_authorized_operations=False).encode(version=8)), MetadataResponse)
    return {topic.name: (topic.error_code, len(topic.partitions)) for topic in answer.topics}


def delete_raw(wire, topics, timeout_ms: int = 10_000, version: int = 3) -> dict:
    body = bytes(DeleteTopicsRequest[version](topic_names=list(topics), timeout_ms=timeout_ms).encode(version=version))
    answer = wire.call(20, version, body, DeleteTopicsResponse)
    return {entry.name: entry.error_code for entry in answer.responses}


def confluent_delete(broker, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap, "broker.address.family": "v4"})
    admin.delete_topics([topic], operation_timeout=10)[topic].result(timeout=30)


def test_deleted_topic_is_gone_and_comes_back_empty(broker_factory):
    broker = broker_factory("alone", num_partitions=2)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap, "broker.address.family": "v4"})
    admin.create_topics([NewTopic("doomed", 3, 1, config={"retention.ms": "3600000"})])["doomed"].result(30)
    kcat(broker, "-P", "-t", "doomed", "-K:", input_text="".join(f"k{i}:old-{i}\n" for i in range(30)))
    kcat(broker, "-P", "-t", "kept", "-K:", input_text="a:kept-1\nb:kept-2\n")
    assert partition_dirs(broker, "doomed") == ["doomed-0", "doomed-1", "doomed-2"]
    assert os.path.exists(topic_configs.path(broker.log_dir, "doomed"))
    kept_before = sorted(row[1] for p in (0, 1) for row in consume(broker, "kept", p))

    confluent_delete(broker, "doomed")
    assert "doomed" not in metadata(broker)
    assert metadata(broker, ["doomed"])["doomed"][0] == UNKNOWN_TOPIC_OR_PARTITION
    assert partition_dirs(broker, "doomed") == [] and leftovers(broker) == []
    assert not os.path.exists(topic_configs.path(broker.log_dir, "doomed"))
    with Wire(broker) as wire:  # fetching it: unknown
        assert fetch(wire, "doomed", 0, 0).error_code == UNKNOWN_TOPIC_OR_PARTITION

    # Made again by a producer (auto-creation): the broker's partition count, no old data.
    kcat(broker, "-P", "-t", "doomed", "-K:", input_text="n:new-1\nm:new-2\n")
    assert metadata(broker, ["doomed"])["doomed"] == (NONE, 2)
    assert sorted(row[1] for p in (0, 1) for row in consume(broker, "doomed", p)) == ["new-1", "new-2"]
    broker.stop()
    broker.start()
    assert sorted(row[1] for p in (0, 1) for row in consume(broker, "doomed", p)) == ["new-1", "new-2"]
    assert sorted(row[1] for p in (0, 1) for row in consume(broker, "kept", p)) == kept_before
    assert "Traceback" not in broker.output()


def test_errors_per_topic(kafka_broker, topic):
    kcat(kafka_broker, "-P", "-t", topic, input_text="x\n")
    admin = KafkaAdminClient(bootstrap_servers=kafka_broker.bootstrap)
    try:
        answer = admin.delete_topics([topic, "never-made", "bad/name", "a" * 250], timeout_ms=10_000,
                                     raise_errors=False)
    finally:
        admin.close()
    assert {entry["name"]: entry["error_code"] for entry in answer["topics"]} == {
        topic: NONE, "never-made": UNKNOWN_TOPIC_OR_PARTITION, "bad/name": INVALID_TOPIC_EXCEPTION,
        "a" * 250: INVALID_TOPIC_EXCEPTION}
    with Wire(kafka_broker) as wire:
        for version in (1, 2, 3):
            assert delete_raw(wire, [topic, "..", ""], version=version) == {
                topic: UNKNOWN_TOPIC_OR_PARTITION, "..": INVALID_TOPIC_EXCEPTION, "": INVALID_TOPIC_EXCEPTION}
        versions = {key.api_key: (key.min_version, key.max_version) for key in wire.api_versions(3).api_keys}
    assert versions[20] == (1, 3)


def test_a_07_topic_is_deleted_and_07_clients_see_an_unknown_partition(kafka_broker, topic):
    with WireClient(kafka_broker.port) as client:
        for partition in (0, 1):
            ack = responses.decode_produce_ack(client.request(rq.encode_produce_acked(
                1, topic, partition, encode_message_set([b"old-07"] * 5))))
            assert ack.error == 0
        assert fetch_07(client, topic, 0)[1]
    assert partition_dirs(kafka_broker, topic) == [f"{topic}-0", f"{topic}-1"]
    confluent_delete(kafka_broker, topic)
    assert partition_dirs(kafka_broker, topic) == []
    with WireClient(kafka_broker.port) as client:
        assert fetch_07(client, topic, 0) == (0, b"")  # as a partition that does not exist: empty
        offsets = responses.decode_offsets(client.request(rq.encode_offsets(topic, 0, -1, 10)))
        assert offsets == (0, [0])
        ack = responses.decode_produce_ack(client.request(rq.encode_produce_acked(  # it makes the topic anew
            1, topic, 0, encode_message_set([b"new-07"]))))
        assert ack.error == 0 and ack.offset == 0
        error, data = fetch_07(client, topic, 0)
        assert error == 0 and data.count(b"new-07") == 1 and b"old-07" not in data


def fetch_07(client, topic: str, partition: int) -> tuple:
    error, data = responses.split_error(client.request(rq.encode_fetch(topic, partition, 0, 1 << 20)))
    return error, bytes(data)


def fetch(wire, topic: str, partition: int, offset: int, max_wait_ms: int = 0):
    part = FetchRequest.FetchTopic.FetchPartition(partition=partition, current_leader_epoch=-1, fetch_offset=offset,
                                                  log_start_offset=-1, partition_max_bytes=1 << 20)
    body = bytes(FetchRequest[11](
        replica_id=-1, max_wait_ms=max_wait_ms, min_bytes=1, max_bytes=1 << 20, isolation_level=0, session_id=0,
        session_epoch=-1, topics=[FetchRequest.FetchTopic(topic=topic, partitions=[part])], forgotten_topics_data=[],
        rack_id="").encode(version=11))
    return wire.call(1, 11, body, FetchResponse).responses[0].partitions[0]


def test_a_long_polling_fetch_is_answered_when_its_topic_goes(kafka_broker, topic):
    with Wire(kafka_broker) as wire:
        assert wire.produce(topic, 0, good_batch())[0] == NONE
        end = wire.latest_offset(topic, 0)
    answered = {}

    def poll():
        with Wire(kafka_broker, timeout=30) as wire:
            started = time.monotonic()
            answered["partition"] = fetch(wire, topic, 0, end, max_wait_ms=25_000)
            answered["seconds"] = time.monotonic() - started

    thread = threading.Thread(target=poll)
    thread.start()
    time.sleep(0.5)  # it waits for data
    assert "partition" not in answered
    confluent_delete(kafka_broker, topic)
    thread.join(10)
    assert answered["partition"].error_code == UNKNOWN_TOPIC_OR_PARTITION
    assert answered["seconds"] < 5


def test_produces_in_flight_are_deleted_with_the_topic(kafka_broker, topic):
    """Produces pipelined before the DeleteTopics on one connection are routed before
    it: appended, answered, then deleted; one pipelined after it is refused or makes
    a new, empty topic. No old byte is ever read again."""
    with Wire(kafka_broker) as wire:
        assert wire.produce(topic, 0, good_batch(3, 100))[0] == NONE  # the topic exists
        frames = [request_frame(0, 3, n, produce_body(topic, n % 2, good_batch(3, 100))) for n in range(1, 41)]
        delete = bytes(DeleteTopicsRequest[3](topic_names=[topic], timeout_ms=10_000).encode(version=3))
        after = produce_body(topic, 0, good_batch(1, 7))
        wire.send(b"".join(frames) + request_frame(20, 3, 41, delete) + request_frame(0, 3, 42, after))
        for n in range(1, 41):
            correlation, body = wire.read_frame()
            assert correlation == n
            assert ProduceResponse.decode(body, version=3).responses[0].partition_responses[0].error_code == NONE
        correlation, body = wire.read_frame()
        assert correlation == 41
        assert DeleteTopicsResponse.decode(body, version=3).responses[0].error_code == NONE
        correlation, body = wire.read_frame()
        late = ProduceResponse.decode(body, version=3).responses[0].partition_responses[0]
        assert late.error_code in (NONE, UNKNOWN_TOPIC_OR_PARTITION)
        records = fetch(wire, topic, 0, 0).records
    if late.error_code == NONE:  # it made the topic anew: only its own batch is there
        assert records is not None and len(bytes(records)) == len(good_batch(1, 7))
    else:
        assert metadata(kafka_broker, [topic])[topic][0] == UNKNOWN_TOPIC_OR_PARTITION
    assert b"v" * 100 not in bytes(records or b"")


@pytest.mark.slow
def test_sigkill_after_the_answer_keeps_the_topic_deleted(broker_factory):
    broker = broker_factory("killed", num_partitions=4)
    kcat(broker, "-P", "-t", "doomed", input_text="".join(f"old-{i}\n" for i in range(200)))
    kcat(broker, "-P", "-t", "kept", input_text="".join(f"kept-{i}\n" for i in range(50)))
    kept = sorted(row[1] for p in range(4) for row in consume(broker, "kept", p))
    with Wire(broker) as wire:
        assert delete_raw(wire, ["doomed"]) == {"doomed": NONE}
    broker.kill_tree()
    broker.start()
    assert partition_dirs(broker, "doomed") == [] and leftovers(broker) == []
    assert "doomed" not in metadata(broker)
    assert sorted(row[1] for p in range(4) for row in consume(broker, "kept", p)) == kept
    kcat(broker, "-P", "-t", "doomed", input_text="new\n")
    assert [row[1] for p in range(4) for row in consume(broker, "doomed", p)] == ["new"]


@pytest.mark.slow
def test_sigkill_in_the_middle_of_a_deletion_is_finished_at_the_next_start(broker_factory):
    """One worker stopped (SIGSTOP): the other deletes its partitions, the answer says
    REQUEST_TIMED_OUT, the mark stays; a SIGKILL of the broker now, and the next start
    finishes the deletion before any log is opened."""
    broker = broker_factory("interrupted", num_partitions=8)
    kcat(broker, "-P", "-t", "doomed", input_text="".join(f"old-{i}\n" for i in range(400)))
    kcat(broker, "-P", "-t", "kept", input_text="".join(f"kept-{i}\n" for i in range(50)))
    kept = sorted(row[1] for p in range(8) for row in consume(broker, "kept", p))
    stopped = broker.worker_pid(1)
    os.kill(stopped, signal.SIGSTOP)
    try:
        with Wire(broker) as wire:
            assert delete_raw(wire, ["doomed"], timeout_ms=1000) == {"doomed": REQUEST_TIMED_OUT}
        remaining = partition_dirs(broker, "doomed")
        assert 0 < len(remaining) < 8  # worker 0's are gone, worker 1's wait
        assert topic_deletion.marked(broker.log_dir) == ["doomed"]
    finally:
        broker.kill_tree()  # (a stopped process dies of SIGKILL too)
    broker.start()
    assert partition_dirs(broker, "doomed") == [] and leftovers(broker) == []
    assert "doomed" not in metadata(broker)
    assert sorted(row[1] for p in range(8) for row in consume(broker, "kept", p)) == kept
    assert "finished the deletion of topic doomed" in broker.output()


def test_the_next_start_finishes_a_deletion_renamed_halfway(broker_factory):
    """The disk as a crash between a rename and its removal leaves it: the mark, one
    partition renamed for deletion (half emptied), one not renamed yet."""
    broker = broker_factory("halfway", num_partitions=2)
    kcat(broker, "-P", "-t", "doomed", input_text="".join(f"old-{i}\n" for i in range(40)))
    kcat(broker, "-P", "-t", "kept", input_text="kept\n")
    broker.stop()
    topic_deletion.mark(broker.log_dir, "doomed")
    renamed = os.path.join(broker.log_dir, partition_dir_name("doomed", 0) + "." + "ab" * 16 + "-delete")
    os.rename(os.path.join(broker.log_dir, partition_dir_name("doomed", 0)), renamed)
    os.unlink(os.path.join(renamed, sorted(os.listdir(renamed))[0]))
    broker.start()
    assert partition_dirs(broker, "doomed") == [] and leftovers(broker) == []
    assert [row[1] for p in (0, 1) for row in consume(broker, "kept", p)] == ["kept"]
    assert "doomed" not in metadata(broker)


def test_mpbroker_topics_delete_through_the_modern_port(kafka_broker, topic):
    kcat(kafka_broker, "-P", "-t", topic, input_text="x\n")
    out = io.StringIO()
    assert topics_cli.main(["--bootstrap-server", kafka_broker.bootstrap, "delete", "--topic", topic],
                           stdout=out) == topics_cli.EXIT_OK
    assert out.getvalue() == f"deleted topic {topic!r}\n"
    assert partition_dirs(kafka_broker, topic) == []
    assert topics_cli.main(["--bootstrap-server", kafka_broker.bootstrap, "delete", "--topic", topic]) == \
        topics_cli.EXIT_USAGE
    assert topics_cli.main(["--bootstrap-server", kafka_broker.bootstrap, "delete", "--topic", "bad/name"]) == \
        topics_cli.EXIT_USAGE
