"""The mirror with replicated topics on both sides: two real brokers per cluster (each
cluster a chroot of its own in the real ZooKeeper, with its own controller), the source
topic read from its leaders and every source partition landing on the same partition
of the replicated target topic, delivered to its leaders with acks=replicated."""

import pytest

from mpbroker.clients import LeaderConsumer, Producer
from mpbroker.clients.groups.topic_filter import Whitelist
from mpbroker.clients.mirror.mirror_maker import Mirror, MirrorConfig
from tests.clients.helpers import wait_for
from tests.clients.replicated import Cluster

FAST_GROUP = {"rebalance.backoff.ms": 200, "rebalance.retries.max": 20, "zk.sessiontimeout.ms": 4000}


@pytest.fixture
def two_clusters(broker_factory, zk_connect):
    source = Cluster(broker_factory, zk_connect, ids=(1, 2))
    target = Cluster(lambda name, **p: broker_factory(f"target-{name}", **p), zk_connect + "-target", ids=(1, 2))
    yield source, target
    source.close()
    target.close()


def read(cluster, topic: str, partitions: int) -> dict:
    with LeaderConsumer(cluster.zk_connect) as consumer:
        return {p: [m.payload for m in consumer.messages(topic, p, 0)] for p in range(partitions)}


def test_a_replicated_topic_is_mirrored_partition_by_partition(two_clusters):
    source, target = two_clusters
    source.create("r", 2, 2)
    target.create("r", 2, 1)
    with Producer(zk_connect=source.zk_connect, acks="replicated") as producer:
        for key in range(10):
            producer.send("r", [b"m%d" % key], key=b"%d" % key)
    sent = read(source, "r", 2)
    assert sent[0] and sent[1]
    config = MirrorConfig(sources=[source.zk_connect], target=target.zk_connect, topic_filter=Whitelist("r"),
                          acks="replicated", batch_size=100, linger_ms=20, report_interval_s=0.2,
                          consumer_properties=dict(FAST_GROUP))
    with Mirror(config) as mirror:
        wait_for(lambda: read(target, "r", 2) == sent, 20, what="the target's partitions equal the source's")
        assert mirror.failure is None
        lags, owned = mirror.read_lag()
        assert owned == {source.zk_connect: 2}
        assert sorted(node for (_, _, node) in lags) == ["0", "1"]
