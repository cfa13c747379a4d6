"""The producer and replicated topics: partitions 0..N-1 of the assignment, each set sent
to its partition's leader (three real brokers, their controller's leaders, the data on
the partition's replicas only); a leader killed with SIGKILL and the producer following the
controller's new leader; NOT_LEADER answered once (a real TCP server standing in for a
broker that lost the leadership); request.required.acks and its mapping to the wire."""

import pytest

from mpbroker.clients import Producer, SimpleConsumer
from mpbroker.clients.core.errors import LeaderNotAvailableError
from mpbroker.clients.core.settings import ProducerSettings
from mpbroker.codec import requests as rq
from mpbroker.codec.errors import NotLeaderError
from mpbroker.codec.requests import Durability
from mpbroker.registry.zk_client import close_client, start_client
from tests.clients.fake_leader import FakeBroker, ack, not_leader, replicated_topic, set_leader, wait_registered
from tests.clients.helpers import HOST, broker_list, wait_for
from tests.clients.replicated import Cluster


@pytest.fixture
def cluster(broker_factory, zk_connect):
    cluster = Cluster(broker_factory, zk_connect)
    yield cluster
    cluster.close()


@pytest.fixture
def zk(zk_connect):
    client = start_client(zk_connect, 6000, 30_000)
    yield client
    close_client(client)


def test_each_partition_goes_to_its_leader(cluster):
    assignment = cluster.create("r", 3, 2)
    with Producer(zk_connect=cluster.zk_connect, request_required_acks=-1) as producer:
        assert producer.settings.acks == "replicated"
        assert [p.partition for p in producer.partitions_for("r")] == [0, 1, 2]  # not per broker
        results = []
        for key in range(30):  # the keys hash over the three partitions
            results += producer.send("r", [b"m%d" % key], key=b"%d" % key)
    partitions = {result.partition for result in results}
    assert partitions == {0, 1, 2}
    for result in results:
        assert result.broker_id == cluster.leader("r", result.partition) and result.offset is not None
    for partition in range(3):  # on its leader (and, once the brokers replicate, its follower): not elsewhere
        assert cluster.has_log(cluster.leader("r", partition), "r", partition)
        assert not any(cluster.has_log(other, "r", partition) for other in cluster.brokers
                       if other not in assignment[partition])


def test_the_producer_follows_a_new_leader(cluster):
    cluster.create("r", 1, 2)
    with Producer(zk_connect=cluster.zk_connect, acks="append", num_retries=60, retry_backoff_ms=200) as producer:
        first = producer.send("r", [b"before"])[0]
        old = cluster.leader("r", 0)
        assert first.broker_id == old
        cluster.brokers[old].kill_tree()
        # Sent while the old leader is dead and still registered (its session has not
        # ended yet): the connection fails, the producer waits for the controller.
        second = producer.send("r", [b"after"])[0]
    new = cluster.leader("r", 0)
    assert second.broker_id == new != old and producer.stats.retries >= 1
    assert cluster.has_log(new, "r", 0)


def test_a_replica_that_does_not_lead_answers_not_leader(cluster):
    """What the client-side routing avoids, asked of a real follower directly: error 9,
    raised as NotLeaderError by the producer and the SimpleConsumer."""
    assignment = cluster.create("r", 1, 2)
    follower = cluster.brokers[assignment[0][1]]
    with Producer(broker_list=broker_list(follower), acks="append", partitioner_class=lambda key, n: 0,
                  num_retries=0) as producer:
        with pytest.raises(NotLeaderError, match="produce to r-0"):
            producer.send("r", [b"x"])
    with SimpleConsumer(HOST, follower.port) as consumer:
        with pytest.raises(NotLeaderError):
            consumer.fetch("r", 0, 0)


def test_no_leader_after_the_retries(zk, zk_connect):
    replicated_topic(zk, "r", {0: 7})  # broker 7 never registered
    with Producer(zk_connect=zk_connect, acks="append", num_retries=2, retry_backoff_ms=50) as producer:
        with pytest.raises(LeaderNotAvailableError, match="its leader, broker 7, is not registered"):
            producer.send("r", [b"x"])
        assert producer.stats.retries == 2 and producer.stats.messages_failed == 1


def test_not_leader_moves_the_partition(zk, zk_connect):
    new = FakeBroker(2, ack)

    def moved(request):  # the controller moved the leadership away just before this request
        set_leader(zk, "r", 0, 2, epoch=1)
        return not_leader(request)

    old = FakeBroker(1, moved)
    try:
        old.register(zk)
        new.register(zk)
        wait_registered(zk, 1, 2)
        replicated_topic(zk, "r", {0: 1})
        with Producer(zk_connect=zk_connect, request_required_acks=-1, retry_backoff_ms=50) as producer:
            (result,) = producer.send("r", [b"x"])
            assert result.broker_id == 2 and producer.stats.retries == 1
        assert [type(r) for r in old.requests] == [rq.ProduceAckedRequest]
        assert old.requests[0].durability == new.requests[0].durability == Durability.REPLICATED
    finally:
        old.close()
        new.close()


def test_not_leader_for_good_is_an_error(zk, zk_connect):
    old = FakeBroker(1, not_leader)
    try:
        old.register(zk)
        wait_registered(zk, 1)
        replicated_topic(zk, "r", {0: 1})
        with Producer(zk_connect=zk_connect, acks="append", num_retries=1, retry_backoff_ms=20) as producer:
            with pytest.raises(NotLeaderError, match="produce to r-0"):
                producer.send("r", [b"x"])
    finally:
        old.close()


@pytest.mark.parametrize("required, acks, durability", [
    (0, "none", None), (1, "append", Durability.APPEND), (-1, "replicated", Durability.REPLICATED)])
def test_request_required_acks_on_the_wire(zk, zk_connect, required, acks, durability):
    fake = FakeBroker(1, lambda request: ack(request) if isinstance(request, rq.ProduceAckedRequest) else None)
    try:
        fake.register(zk)
        wait_registered(zk, 1)
        replicated_topic(zk, "r", {0: 1})
        with Producer(zk_connect=zk_connect, request_required_acks=required) as producer:
            assert producer.settings.acks == acks
            producer.send("r", [b"x"])
        # fire-and-forget is sent once written: the fake broker's thread reads it a moment later
        wait_for(lambda: fake.requests, 10, what="the request at the fake broker")
        sent = fake.requests[0]
        if durability is None:
            assert isinstance(sent, rq.ProduceRequest)
        else:
            assert isinstance(sent, rq.ProduceAckedRequest) and sent.durability == durability
    finally:
        fake.close()


def test_request_required_acks_settings():
    settings = ProducerSettings.from_properties({"broker.list": "h:1", "request.required.acks": "-1"})
    assert settings.acks == "replicated" and settings.request_required_acks == -1
    assert ProducerSettings.from_properties(broker_list="h:1").acks == "none"
    assert ProducerSettings.from_properties(broker_list="h:1", acks="append", request_required_acks=1).acks == "append"
    with pytest.raises(ValueError, match=r"acks=flush and request.required.acks=1 conflict .*acks=append"):
        ProducerSettings.from_properties(broker_list="h:1", acks="flush", request_required_acks=1)
    with pytest.raises(ValueError, match="request.required.acks: 2 is not one of 0, 1, -1"):
        ProducerSettings.from_properties(broker_list="h:1", request_required_acks=2)

