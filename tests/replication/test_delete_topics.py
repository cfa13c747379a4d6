"""Deleting topics from a ZooKeeper cluster of three real brokers: DeleteTopics sent
to a broker that is not the controller deletes a replicated record-batch topic
everywhere (every broker's log.dir, /brokers/topics, Metadata of every broker, the
mark under /admin/delete_topics), a topic made again under the name starts empty;
``mpbroker-topics --zookeeper ... delete`` deletes a topic the 0.7 way registered by
every broker; an unknown topic is UNKNOWN_TOPIC_OR_PARTITION."""

import io
import json
import os

import pytest
from kafka import KafkaAdminClient
from kafka.protocol.metadata import MetadataRequest, MetadataResponse

from mpbroker.cli import topics as topics_cli
from mpbroker.records import encode_batch
from mpbroker.registry import layout, topic_admin, topic_deletion
from tests.clients.helpers import wait_for
from tests.replication.cluster import produce as produce_07
from tests.replication.cluster import read_all, start_cluster, state
from tests.replication.test_record_batch_topic import fetch_all, produce_acked, request

pytestmark = pytest.mark.slow

TOPIC = "modern"  # test_record_batch_topic's helpers read and write this topic
NONE, UNKNOWN_TOPIC_OR_PARTITION = 0, 3


def partition_dirs(broker, topic: str) -> list:
    return sorted(name for name in os.listdir(broker.log_dir) if name.startswith(f"{topic}-"))


def metadata_topics(broker) -> set:
    answer = request(broker.kafka_port, MetadataRequest[8](
        topics=None, allow_auto_topic_creation=False, include_cluster_authorized_operations=False,
        include_topic_authorized_operations=False), 8, MetadataResponse)
    return {topic.name for topic in answer.topics if topic.error_code == NONE}


def delete(broker, *topics, timeout_ms: int = 30_000) -> dict:
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=timeout_ms + 10_000)
    try:
        answer = admin.delete_topics(list(topics), timeout_ms=timeout_ms, raise_errors=False)
    finally:
        admin.close()
    return {entry["name"]: entry["error_code"] for entry in answer["topics"]}


def test_delete_topics_on_a_cluster(broker_factory, zk_connect, zk_client):
    brokers = start_cluster(broker_factory, zk_connect, min_insync_replicas=2)
    wait_for(lambda: topic_admin.live_brokers(zk_client) == [1, 2, 3], 20, what="three brokers registered")
    topic_admin.create_topic(zk_client, TOPIC, 2, 3, record_batches=True)
    wait_for(lambda: all(state(zk_client, TOPIC, p) is not None for p in (0, 1)), 20, what="leaders elected")
    for index in range(20):
        produce_acked(brokers, zk_client, encode_batch([(None, b"old-%d" % index, (), 1_700_000_000_000)]))
    wait_for(lambda: all(partition_dirs(broker, TOPIC) == [f"{TOPIC}-0", f"{TOPIC}-1"]
                         for broker in brokers.values()), 20, what="every replica's log")
    other = "kept"  # a topic of every broker that stays
    for broker_id, broker in brokers.items():
        assert produce_07(broker.port, other, 0, [f"kept-{broker_id}".encode()], durability=1).error == 0
    controller = json.loads(zk_client.get("/controller")[0])["brokerid"]
    asked = next(broker for broker_id, broker in brokers.items() if broker_id != controller)

    assert delete(asked, TOPIC, "no-such-topic") == {TOPIC: NONE, "no-such-topic": UNKNOWN_TOPIC_OR_PARTITION}
    # Gone from ZooKeeper's listing when answered, its mark too; every replica's data is gone.
    assert TOPIC not in topic_admin.topic_names(zk_client)
    assert topic_deletion.marked(zk_client) == []
    for broker in brokers.values():
        assert partition_dirs(broker, TOPIC) == [], broker.log_dir
        assert not [name for name in os.listdir(broker.log_dir) if name.endswith("-delete")]
        wait_for(lambda broker=broker: TOPIC not in metadata_topics(broker), 10, what="Metadata without it")
    for broker in brokers.values():  # the other topic is intact everywhere
        assert len(read_all(broker.port, other, 0)) == 1

    # Made again under the same name: empty, then only what is produced now.
    topic_admin.create_topic(zk_client, TOPIC, 1, 3, record_batches=True)
    wait_for(lambda: state(zk_client, TOPIC, 0) is not None, 20, what="a leader for the new topic")
    leader, _ = produce_acked(brokers, zk_client, encode_batch([(None, b"new", (), 1_700_000_000_000)]))
    assert [record.value for record in fetch_all(brokers[leader].kafka_port)] == [b"new"]

    # mpbroker-topics through ZooKeeper: the 0.7 topic every broker registered.
    wait_for(lambda: sorted(zk_client.get_children(layout.topic_path(other))) == ["1", "2", "3"], 20,
             what="the 0.7 topic registered by every broker")
    out = io.StringIO()
    assert topics_cli.main(["--zookeeper", zk_connect, "delete", "--topic", other], stdout=out) == 0
    assert f"deleted topic {other!r}" in out.getvalue()
    for broker in brokers.values():
        assert partition_dirs(broker, other) == []
        assert "Traceback" not in broker.output(), broker.output()[-3000:]
    assert topics_cli.main(["--zookeeper", zk_connect, "delete", "--topic", other]) == topics_cli.EXIT_USAGE
