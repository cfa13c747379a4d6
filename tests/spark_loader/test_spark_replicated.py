"""The Spark loader and replicated topics, with three real brokers and their controller:
the plan lists a replicated topic's partitions 0..N-1 (keys ``<topic>/<partition>``) at
their leaders, a task whose planned leader is gone reads on at the leader ZooKeeper
names, and a load through Spark copies every message once (``broker`` -1)."""

import pyarrow.dataset as ds
import pytest

from mpbroker.cli.spark_load import spark_session
from mpbroker.clients import Producer
from mpbroker.clients.core.leaders import REPLICATED
from mpbroker.spark_loader.job import LoadOptions, run_load
from mpbroker.spark_loader.plan import discover, make_plan
from mpbroker.spark_loader.reader import read_batches
from tests.clients.helpers import free_port
from tests.clients.replicated import Cluster


@pytest.fixture
def cluster(broker_factory, zk_connect):
    cluster = Cluster(broker_factory, zk_connect)
    yield cluster
    cluster.close()


def produce(cluster, topic: str, count: int) -> dict:
    """{partition: [payload, ...]} sent, keyed over the partitions, flushed."""
    sent = {}
    with Producer(zk_connect=cluster.zk_connect, acks="replicated") as producer:
        for n in range(count):
            (result,) = producer.send(topic, [b"%s-%d" % (topic.encode(), n)], key=b"%d" % n)
            sent.setdefault(result.partition, []).append(b"%s-%d" % (topic.encode(), n))
    return sent


def test_the_plan_reads_the_leaders_and_a_task_follows_a_moved_leader(cluster):
    cluster.create("r", 2, 2)
    sent = produce(cluster, "r", 10)
    source = discover(zookeeper=cluster.zk_connect, topics=["r"])
    assert source.partitions == [("r", REPLICATED, 0), ("r", REPLICATED, 1)]
    ranges = make_plan(source, {})
    assert [part.key for part in ranges] == ["r/0", "r/1"]
    for part in ranges:
        assert part.port == cluster.brokers[cluster.leader("r", part.partition)].port
        assert part.start == 0 and part.end > 0 and part.zookeeper == cluster.zk_connect
    # The broker the plan named is gone by the time the task runs: read on at the leader.
    moved = ranges[0]._replace(port=free_port())
    rows = [row for batch in read_batches(moved) for row in batch.to_pylist()]
    assert [row["payload"] for row in rows] == sent[0]
    assert {row["broker"] for row in rows} == {REPLICATED} and {row["partition"] for row in rows} == {0}


def test_a_load_copies_a_replicated_topic(cluster, tmp_path):
    cluster.create("r", 2, 2)
    sent = produce(cluster, "r", 20)
    spark = spark_session("local[2]")
    try:
        spark.sparkContext.setLogLevel("ERROR")
        summary = run_load(spark, LoadOptions(output=str(tmp_path / "out"), topics=["r"], zookeeper=cluster.zk_connect))
    finally:
        spark.stop()
    assert summary["messages"] == 20
    assert sorted(p["partition"] for p in summary["partitions"]) == [0, 1]
    table = ds.dataset(str(tmp_path / "out"), format="parquet", partitioning="hive").to_table().to_pylist()
    loaded = {}
    for row in sorted(table, key=lambda row: row["offset"]):
        assert row["broker"] == REPLICATED
        loaded.setdefault(row["partition"], []).append(row["payload"])
    assert loaded == sent
