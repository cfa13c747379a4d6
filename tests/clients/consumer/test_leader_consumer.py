"""LeaderConsumer: reads of replicated topics from each partition's leader (three real
brokers and their controller), a leader killed with SIGKILL and the reads following the
new leader, and an iteration told NOT_LEADER resuming on the new leader (a real TCP
server standing in for the broker that lost the leadership)."""

import pytest

from mpbroker.clients import LeaderConsumer, Producer
from mpbroker.clients.core.errors import LeaderNotAvailableError
from mpbroker.codec import requests as rq
from mpbroker.codec import responses as rs
from mpbroker.codec.errors import ErrorCode
from mpbroker.codec.message import encode_message_set
from mpbroker.registry.zk_client import close_client, start_client
from tests.clients.fake_leader import FakeBroker, not_leader, replicated_topic, set_leader, wait_registered
from tests.clients.replicated import Cluster


@pytest.fixture
def cluster(broker_factory, zk_connect):
    cluster = Cluster(broker_factory, zk_connect)
    yield cluster
    cluster.close()


def test_reads_come_from_the_leaders_and_follow_a_new_one(cluster):
    cluster.create("r", 2, 2)
    sent = {0: [], 1: []}
    with Producer(zk_connect=cluster.zk_connect, acks="replicated") as producer:
        for key in range(8):
            (result,) = producer.send("r", [b"m%d" % key], key=b"%d" % key)
            sent[result.partition].append(b"m%d" % key)
    assert sent[0] and sent[1]
    with LeaderConsumer(cluster.zk_connect, leader_wait_ms=30000) as consumer:
        assert consumer.partition_count("r") == 2
        for partition in (0, 1):
            assert consumer.consumer_for("r", partition).port == cluster.brokers[cluster.leader("r", partition)].port
            assert [m.payload for m in consumer.messages("r", partition, 0)] == sent[partition]
            assert consumer.latest_offset("r", partition) > 0
        old = cluster.leader("r", 0)
        cluster.brokers[old].kill_tree()
        # Asked while the dead leader is still registered: refused connections, then the
        # controller's new leader, which has every acknowledged message (acks=replicated).
        assert consumer.earliest_offset("r", 0) == 0
        new = cluster.leader("r", 0)
        assert new != old and consumer.consumer_for("r", 0).port == cluster.brokers[new].port
        assert [m.payload for m in consumer.messages("r", 0, 0)] == sent[0]
        with pytest.raises(LeaderNotAvailableError, match="not a replicated topic"):
            consumer.partition_count("nothing")


def test_an_iteration_resumes_on_the_new_leader(zk_connect):
    zk = start_client(zk_connect, 6000, 30_000)
    data = encode_message_set([b"a", b"b"])

    def fetch(request):
        if isinstance(request, rq.FetchRequest) and request.offset == 0:
            return rs.response_header(ErrorCode.NO_ERROR, len(data)) + data
        if isinstance(request, rq.FetchRequest):
            return rs.response_header(ErrorCode.NO_ERROR, 0)  # the log end
        return rs.offsets_response(ErrorCode.NO_ERROR, [len(data)])

    def moved(request):
        set_leader(zk, "r", 0, 2, epoch=1)
        return not_leader(request)

    old, new = FakeBroker(1, moved), FakeBroker(2, fetch)
    try:
        old.register(zk)
        new.register(zk)
        wait_registered(zk, 1, 2)
        replicated_topic(zk, "r", {0: 1})
        with LeaderConsumer(zk_connect, retry_backoff_ms=50) as consumer:
            assert [m.payload for m in consumer.messages("r", 0, 0)] == [b"a", b"b"]
            assert consumer.latest_offset("r", 0) == len(data)
        assert isinstance(old.requests[0], rq.FetchRequest) and new.requests[0].offset == 0
    finally:
        old.close()
        new.close()
        close_client(zk)
