"""mpbroker.clients.core.leaders on three real brokers in a real ZooKeeper: the leaders the
controller elected, a leader change arriving by the watch (SIGKILL of the leader's
broker), a topic created the 0.7 way or not at all, and a topic created replicated
while followed."""

import pytest

from mpbroker.clients import Producer
from mpbroker.clients.core.errors import LeaderNotAvailableError
from mpbroker.clients.core.leaders import REPLICATED, PartitionLeaders, ReplicatedPartition, partition_id
from mpbroker.registry import layout, topic_admin
from tests.clients.helpers import broker_list, wait_for
from tests.clients.replicated import Cluster


@pytest.fixture
def cluster(broker_factory, zk_connect):
    cluster = Cluster(broker_factory, zk_connect)
    yield cluster
    cluster.close()


def test_leaders_follow_the_controller(cluster):
    assignment = cluster.create("t", 3, 2)
    leaders = PartitionLeaders.connect(cluster.zk_connect)
    try:
        topic = leaders.topic("t")
        assert topic.partitions == 3 and topic.assignment == assignment
        for partition in range(3):
            broker = leaders.leader("t", partition)
            assert broker.id == assignment[partition][0]  # the preferred replica
            assert broker.port == cluster.brokers[broker.id].port
        old = assignment[0][0]
        cluster.brokers[old].kill_tree()
        # The watch brings the controller's new state: no refresh needed.
        new = leaders.wait_for_leader("t", 0, 30, other_than=old)
        assert new is not None and new.id == assignment[0][1]
        assert leaders.topic("t").epoch(0) == 1
        assert leaders.require_leader("t", 0) == new
        with pytest.raises(LeaderNotAvailableError, match="partitions 0-2, not 7"):
            leaders.require_leader("t", 7)
    finally:
        leaders.close()


def test_0_7_topics_and_topics_created_later(cluster):
    with Producer(broker_list=broker_list(cluster.brokers[1])) as producer:
        producer.send("old", [b"x"])
    wait_for(lambda: cluster.client.exists(layout.topic_broker_path("old", 1)), 20, what="old registered")
    leaders = PartitionLeaders.connect(cluster.zk_connect)
    try:
        assert leaders.topic("old") is None and leaders.leader("old", 0) is None
        assert leaders.topic("later") is None
        with pytest.raises(LeaderNotAvailableError, match="not a replicated topic"):
            leaders.require_leader("later", 0)
        topic_admin.create_topic(cluster.client, "later", 2, 1)
        wait_for(lambda: leaders.leader("later", 1) is not None, 20, what="later's leaders by the watches")
    finally:
        leaders.close()


def test_partition_names():
    assert ReplicatedPartition(3).node() == "3" and ReplicatedPartition(3).broker_id == REPLICATED
    assert partition_id(REPLICATED, 2) == ReplicatedPartition(2)
    assert partition_id(1, 2) == layout.PartitionId(1, 2) and partition_id(1, 2).node() == "1-2"
