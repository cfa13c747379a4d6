"""Topic-level settings on a ZooKeeper cluster, with three real brokers and a real
ZooKeeper: CreateTopics (confluent-kafka's AdminClient) with ``retention.ms``,
``segment.bytes``, ``min.insync.replicas`` and ``max.message.bytes`` on one broker puts
them in ``/config/topics/<topic>``, every broker's ``topic-configs/<topic>.json`` and
every broker's DescribeConfigs (source TOPIC_CONFIG), and ``mpbroker-topics describe``
shows them; the logs roll at ``segment.bytes`` on every replica; the leader holds a
batch to the topic's ``max.message.bytes`` and ``acks=all`` to its
``min.insync.replicas`` (NOT_ENOUGH_REPLICAS, 19, with a follower stopped, while
``acks=1`` is taken); a bad value is refused with INVALID_CONFIG and the same message
as on a standalone broker, and nothing is written; ``mpbroker-topics create --config``
and DescribeConfigs agree. A broker that was down when a topic was made (named in its
assignment) has the settings, and makes its logs with them, when it is back; a change
of the node by hand reaches the open logs of every replica without a restart."""

import os
import time

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic
from kafka import KafkaProducer
from kafka.errors import NotEnoughReplicasError
from kafka.protocol.admin import (
    CreateTopicsRequest,
    CreateTopicsResponse,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
)
from kafka.protocol.producer import ProduceRequest, ProduceResponse

from mpbroker.cli import topics as topics_cli
from mpbroker.records import encode_batch
from mpbroker.registry import layout, topic_admin, topic_config_nodes
from mpbroker.segments import topic_configs
from mpbroker.segments.naming import list_segment_bases, partition_dir_name, segment_file_name
from tests.clients.helpers import wait_for
from tests.replication.cluster import start_cluster, state, wait_identical
from tests.replication.test_record_batch_topic import request

TOPIC = "configured"
SETTINGS = {"retention.ms": "86400000", "segment.bytes": "2048", "min.insync.replicas": "3",
            "max.message.bytes": "1000"}
NONE, UNKNOWN_TOPIC, MESSAGE_TOO_LARGE, NOT_ENOUGH_REPLICAS, INVALID_CONFIG = 0, 3, 10, 19, 40
TOPIC_CONFIG_SOURCE = 1


def describe(port: int, topic: str):
    """DescribeConfigs v1 of ``topic`` on one broker: ``{key: (value, source)}``, None while
    the broker does not know the topic yet."""
    resource = DescribeConfigsRequest.DescribeConfigsResource(resource_type=2, resource_name=topic,
                                                              configuration_keys=None)
    answer = request(port, DescribeConfigsRequest[1](resources=[resource], include_synonyms=False), 1,
                     DescribeConfigsResponse)
    (result,) = answer.results
    if result.error_code == UNKNOWN_TOPIC:
        return None
    assert result.error_code == NONE, result
    return {entry.name: (entry.value, entry.config_source) for entry in result.configs}


def own_settings(port: int, topic: str) -> dict:
    """The settings a broker's DescribeConfigs says are the topic's own (TOPIC_CONFIG)."""
    described = describe(port, topic)
    return None if described is None else \
        {key: value for key, (value, source) in described.items() if source == TOPIC_CONFIG_SOURCE}


def create_raw(port: int, topic: str, configs: dict, factor: int = 3) -> tuple:
    """CreateTopics v4 of one topic: ``(error code, error message)``."""
    creatable = CreateTopicsRequest.CreatableTopic(
        name=topic, num_partitions=1, replication_factor=factor, assignments=[],
        configs=[CreateTopicsRequest.CreatableTopic.CreatableTopicConfig(name=key, value=value)
                 for key, value in configs.items()])
    answer = request(port, CreateTopicsRequest[4](topics=[creatable], timeout_ms=10_000, validate_only=False), 4,
                     CreateTopicsResponse)
    (result,) = answer.topics
    return result.error_code, result.error_message


def produce(port: int, topic: str, acks: int, value: bytes) -> int:
    """Produce v7 of one batch to partition 0: the error code."""
    partition_data = ProduceRequest.TopicProduceData.PartitionProduceData(
        index=0, records=encode_batch([(None, value, (), int(time.time() * 1000))]))
    answer = request(port, ProduceRequest[7](
        transactional_id=None, acks=acks, timeout_ms=10_000,
        topic_data=[ProduceRequest.TopicProduceData(name=topic, partition_data=[partition_data])]), 7, ProduceResponse)
    return answer.responses[0].partition_responses[0].error_code


def produce_until(brokers, zk_client, topic: str, acks: int, value: bytes, wanted: int, timeout: float = 30.0):
    """Produce to whoever leads until the answer is ``wanted``: the leader's id."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        found = state(zk_client, topic, 0)
        broker = brokers.get(found.leader) if found is not None else None
        if broker is not None and broker.process.poll() is None:
            try:
                last = produce(broker.kafka_port, topic, acks, value)
            except OSError as exc:
                last = repr(exc)
            if last == wanted:
                return found.leader
        time.sleep(0.1)
    raise AssertionError(f"no answer {wanted} within {timeout}s; last: {last}")


def segment_sizes(broker, topic: str) -> list:
    directory = os.path.join(broker.log_dir, partition_dir_name(topic, 0))
    return [os.path.getsize(os.path.join(directory, segment_file_name(base)))
            for base in list_segment_bases(directory)]


def mirrored(broker, topic: str):
    found = topic_configs.read(broker.log_dir, topic)
    return found and found["configs"]


def topics_tool(capsys, zk_connect, *args) -> tuple:
    capsys.readouterr()
    code = topics_cli.main(["--zookeeper", zk_connect, *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_settings_of_create_topics_reach_every_broker_and_are_honoured(broker_factory, zk_connect, zk_client, capsys):
    brokers = start_cluster(broker_factory, zk_connect)  # min.insync.replicas 1: the topic's 3 must win
    wait_for(lambda: topic_admin.live_brokers(zk_client) == [1, 2, 3], 20, what="three brokers registered")

    # A bad value: INVALID_CONFIG with the standalone broker's message, nothing written.
    standalone = broker_factory("standalone")
    bad = {"retention.ms": "soon"}
    assert create_raw(brokers[1].kafka_port, "bad", bad) == create_raw(standalone.kafka_port, "bad", bad, 1)
    assert create_raw(brokers[1].kafka_port, "bad", bad)[0] == INVALID_CONFIG
    code, _, err = topics_tool(capsys, zk_connect, "create", "--topic", "bad", "--partitions", "1",
                               "--replication-factor", "3", "--config", "retention.ms=soon")
    assert code == 2 and create_raw(standalone.kafka_port, "bad", bad, 1)[1] in err
    assert not zk_client.exists(layout.topic_path("bad")) and not zk_client.exists("/config/topics/bad")

    admin = AdminClient({"bootstrap.servers": brokers[1].bootstrap, "broker.address.family": "v4"})
    admin.create_topics([NewTopic(TOPIC, 1, 3, config=SETTINGS)])[TOPIC].result(15)
    # Answered once asked (as the controller's creation always was): the registrar writes it.
    wait_for(lambda: zk_client.exists(layout.topic_path(TOPIC)), 15, what="the topic in ZooKeeper")
    assert topic_admin.topic_config(zk_client, TOPIC) == SETTINGS
    for broker in brokers.values():
        wait_for(lambda broker=broker: mirrored(broker, TOPIC) == SETTINGS, 15, what=f"{broker.log_dir} mirrored")
    for broker in brokers.values():  # every broker's DescribeConfigs says they are the topic's own
        wait_for(lambda broker=broker: own_settings(broker.kafka_port, TOPIC) == SETTINGS, 15,
                 what="the topic's own settings described")
    [future] = admin.describe_configs([ConfigResource("TOPIC", TOPIC)]).values()
    entries = future.result(15)
    assert {key: (entries[key].value, int(entries[key].source)) for key in SETTINGS} == \
        {key: (value, TOPIC_CONFIG_SOURCE) for key, value in SETTINGS.items()}
    assert entries["flush.messages"].source != TOPIC_CONFIG_SOURCE  # the rest is the broker's
    code, out, _ = topics_tool(capsys, zk_connect, "describe", "--topic", TOPIC)
    assert code == 0 and out.splitlines()[0] == \
        f"topic: {TOPIC}\tconfigs: max.message.bytes=1000,min.insync.replicas=3,retention.ms=86400000," \
        f"segment.bytes=2048"

    # segment.bytes: every replica's log rolls at 2048 bytes.
    wait_for(lambda: state(zk_client, TOPIC, 0) is not None and len(state(zk_client, TOPIC, 0).isr) == 3, 20,
             what="a leader and a full ISR")
    for index in range(24):
        produce_until(brokers, zk_client, TOPIC, -1, b"%d-" % index + b"x" * 300, NONE)
    produce_until(brokers, zk_client, TOPIC, -1, b"x" * 1200, MESSAGE_TOO_LARGE)  # max.message.bytes 1000
    wait_identical(list(brokers.values()), TOPIC)
    for broker in brokers.values():
        sizes = segment_sizes(broker, TOPIC)
        assert len(sizes) >= 4 and max(sizes) <= 2048, (broker.log_dir, sizes)

    # mpbroker-topics create --config: DescribeConfigs says the same.
    code, out, _ = topics_tool(capsys, zk_connect, "create", "--topic", "by-tool", "--partitions", "2",
                               "--replication-factor", "2", "--config", "retention.bytes=1048576",
                               "--config", "flush.messages=7", "--record-batches")
    assert code == 0 and "configs: flush.messages=7,retention.bytes=1048576" in out
    for broker in brokers.values():
        wait_for(lambda broker=broker: own_settings(broker.kafka_port, "by-tool") ==
                 {"retention.bytes": "1048576", "flush.messages": "7"}, 15, what="by-tool's settings described")

    # min.insync.replicas 3 with a follower stopped: acks=all refused, acks=1 taken.
    leader = state(zk_client, TOPIC, 0).leader
    follower = next(broker_id for broker_id in brokers if broker_id != leader)
    brokers[follower].stop()
    wait_for(lambda: follower not in state(zk_client, TOPIC, 0).isr, 30, what="the ISR shrunk")
    produce_until(brokers, zk_client, TOPIC, -1, b"refused", NOT_ENOUGH_REPLICAS)
    produce_until(brokers, zk_client, TOPIC, 1, b"taken", NONE)
    leader_broker = brokers[state(zk_client, TOPIC, 0).leader]
    producer = KafkaProducer(bootstrap_servers=leader_broker.bootstrap, acks="all", retries=0,
                             enable_idempotence=False)
    try:
        with pytest.raises(NotEnoughReplicasError):
            producer.send(TOPIC, b"kafka-python").get(timeout=15)
    finally:
        producer.close(5)


def test_a_broker_that_was_down_gets_the_settings_and_changes_reach_open_logs(broker_factory, zk_connect,
                                                                             zk_client):
    brokers = start_cluster(broker_factory, zk_connect)
    wait_for(lambda: topic_admin.live_brokers(zk_client) == [1, 2, 3], 20, what="three brokers registered")
    brokers[3].stop()
    wait_for(lambda: topic_admin.live_brokers(zk_client) == [1, 2], 20, what="broker 3 gone")
    # Broker 3 is named in the assignment, as Kafka allowed, while it is down.
    topic_admin.write_topic(zk_client, TOPIC, {0: [1, 2, 3]}, record_batches=True,
                            configs={"segment.bytes": "2048", "retention.ms": "3600000"})
    for broker_id in (1, 2):
        wait_for(lambda b=brokers[broker_id]: mirrored(b, TOPIC) == {"segment.bytes": "2048",
                                                                     "retention.ms": "3600000"},
                 15, what="the live brokers mirrored")
    assert topic_configs.read(brokers[3].log_dir, TOPIC) is None

    brokers[3].start()
    wait_for(lambda: mirrored(brokers[3], TOPIC) == {"segment.bytes": "2048", "retention.ms": "3600000"}, 20,
             what="broker 3 mirrored on its return")
    wait_for(lambda: own_settings(brokers[3].kafka_port, TOPIC) == {"segment.bytes": "2048",
                                                                    "retention.ms": "3600000"},
             15, what="broker 3 describes them")
    wait_for(lambda: state(zk_client, TOPIC, 0) is not None and len(state(zk_client, TOPIC, 0).isr) == 3, 30,
             what="broker 3 in the ISR")
    for index in range(16):
        produce_until(brokers, zk_client, TOPIC, -1, b"%d-" % index + b"y" * 300, NONE)
    wait_identical(list(brokers.values()), TOPIC)
    for broker in brokers.values():
        sizes = segment_sizes(broker, TOPIC)
        assert len(sizes) >= 3 and max(sizes) <= 2048, (broker.log_dir, sizes)

    # The node changed by hand (no AlterConfigs yet): every replica's open log takes it.
    zk_client.set(topic_config_nodes.config_path(TOPIC), topic_config_nodes.config_value({"segment.bytes": "1024"}))
    for broker in brokers.values():
        wait_for(lambda b=broker: own_settings(b.kafka_port, TOPIC) == {"segment.bytes": "1024"}, 15,
                 what="the change mirrored")
    for broker in brokers.values():  # applied by the worker that owns the log, which stays up
        wait_for(lambda b=broker: f"topic {TOPIC}: 1 logs now roll at 1024 bytes" in b.output(), 15,
                 what="the owning worker applied it")
        assert all(worker["restarts"] == 0 for worker in broker.status()["workers"])
    before = {broker_id: len(segment_sizes(broker, TOPIC)) for broker_id, broker in brokers.items()}
    for index in range(12):
        produce_until(brokers, zk_client, TOPIC, -1, b"%d-" % index + b"z" * 300, NONE)
    wait_identical(list(brokers.values()), TOPIC)
    for broker_id, broker in brokers.items():
        new_segments = segment_sizes(broker, TOPIC)[before[broker_id]:]
        assert len(new_segments) >= 3 and max(new_segments) <= 1024, (broker.log_dir, new_segments)
