"""The ``mpbroker`` Spark source bootstrapped from ZooKeeper, with three real brokers and
their controller: ``subscribePattern`` finds a replicated topic (read at its leaders,
``broker`` -1) and a 0.7 topic (each broker's partitions); the leader of a partition is
SIGKILLed between two runs of a streaming query and the next run reads on at the new
leader, every message exactly once."""

import pytest

from mpbroker.clients import Producer
from mpbroker.clients.core.leaders import REPLICATED
from tests.spark_loader.loads import spark
from tests.spark_loader.test_source import registered, stream_to_parquet
from tests.spark_loader.test_spark_replicated import cluster

__all__ = ["spark", "registered", "cluster"]


def produce(zk_connect: str, topic: str, first: int, count: int, acks: str) -> set:
    sent = set()
    with Producer(zk_connect=zk_connect, acks=acks) as producer:
        for n in range(first, first + count):
            payload = b"%s-%d" % (topic.encode(), n)
            (result,) = producer.send(topic, [payload], key=b"%d" % n)
            sent.add((topic, result.broker_id if topic != "r" else REPLICATED, result.partition, payload))
    return sent


def read_back(spark, output) -> list:
    return [(r.topic, r.broker, r.partition, bytes(r.value)) for r in spark.read.parquet(str(output)).collect()]


@pytest.mark.timeout(600)
def test_zookeeper_discovery_and_a_killed_leader_between_runs(spark, cluster, tmp_path):
    cluster.create("r", 2, 2)
    sent = produce(cluster.zk_connect, "r", 0, 150, "replicated") | produce(cluster.zk_connect, "plain", 0, 60, "flush")
    output, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    options = {"zookeeper": cluster.zk_connect, "subscribePattern": "r|plain", "maxBytesPerTrigger": 3000}
    stream_to_parquet(spark, output, checkpoint, **options)
    rows = read_back(spark, output)
    assert len(rows) == len(sent) and set(rows) == sent
    assert {broker for topic, broker, _, _ in rows if topic == "r"} == {REPLICATED}
    assert {broker for topic, broker, _, _ in rows if topic == "plain"} <= {1, 2, 3}

    cluster.kill_leader("r", 0)
    more = produce(cluster.zk_connect, "r", 150, 100, "replicated")
    stream_to_parquet(spark, output, checkpoint, **options)
    rows = read_back(spark, output)
    assert len(rows) == len(sent | more) and set(rows) == sent | more
