"""Consumer groups on replicated topics, with three real brokers and their controller: the
partitions 0..N-1 shared by the members, owners and offsets under
``/consumers/<g>/owners|offsets/<topic>/<partition>``, every message read from the
leaders; and a group that keeps consuming after SIGKILL of its partition's leader."""

import time

import pytest

from mpbroker.clients import Producer
from mpbroker.clients.core.leaders import REPLICATED
from mpbroker.clients.core.zk_registry import children
from mpbroker.clients.groups.admin import execute_reset, parse_topic_selection, plan_reset
from mpbroker.clients.groups.connector import ConsumerConnector
from mpbroker.clients.groups.message_stream import ConsumerTimeoutError
from mpbroker.clients.groups.offset_targets import EARLIEST
from mpbroker.clients.groups.report import read_group
from mpbroker.registry import layout
from tests.clients.helpers import wait_for
from tests.clients.replicated import Cluster

FAST = {"rebalance_backoff_ms": 200, "rebalance_retries_max": 20, "autocommit_interval_ms": 200,
        "zk_sessiontimeout_ms": 4000, "autooffset_reset": "smallest", "consumer_timeout_ms": 100,
        "backoff_increment_ms": 50}


@pytest.fixture
def cluster(broker_factory, zk_connect):
    cluster = Cluster(broker_factory, zk_connect)
    yield cluster
    cluster.close()


def take(stream, count: int, timeout: float = 20.0) -> list:
    """``count`` messages from ``stream`` (fail after ``timeout``)."""
    messages = []
    deadline = time.monotonic() + timeout
    while len(messages) < count:
        assert time.monotonic() < deadline, f"got {len(messages)} of {count} messages"
        try:
            messages.append(next(stream))
        except ConsumerTimeoutError:
            continue
    return messages


def test_members_share_the_partitions_of_a_replicated_topic(cluster):
    cluster.create("r", 4, 2)
    sent = set()
    with Producer(zk_connect=cluster.zk_connect, acks="replicated") as producer:
        for key in range(12):
            producer.send("r", [b"m%d" % key], key=b"%d" % key)
            sent.add(b"m%d" % key)
    client = cluster.client
    first = ConsumerConnector({"zk.connect": cluster.zk_connect, "groupid": "g"}, **FAST)
    second = ConsumerConnector({"zk.connect": cluster.zk_connect, "groupid": "g"}, **FAST)
    try:
        streams = [first.create_message_streams({"r": 1})["r"][0], second.create_message_streams({"r": 1})["r"][0]]
        wait_for(lambda: children(client, layout.owners_path("g", "r")) == ["0", "1", "2", "3"], 20,
                 what="the four partitions owned")
        wait_for(lambda: len(first.owned_partitions().get("r", [])) == len(second.owned_partitions().get("r", []))
                 == 2, 20, what="two partitions each")
        owners = {name: client.get(f"{layout.owners_path('g', 'r')}/{name}")[0].decode() for name in "0123"}
        assert {owner.rsplit("-", 1)[0] for owner in owners.values()} == {first.consumer_id, second.consumer_id}
        got = []
        deadline = time.monotonic() + 20
        while len(got) < len(sent) and time.monotonic() < deadline:
            for stream in streams:
                try:
                    got.append(next(stream))
                except ConsumerTimeoutError:
                    pass
        assert {m.payload for m in got} == sent and len(got) == len(sent)
        assert {m.broker_id for m in got} == {REPLICATED} and {m.partition for m in got} <= {0, 1, 2, 3}
        first.commit_offsets()
        second.commit_offsets()
        offsets = sorted(client.get_children(layout.offsets_path("g", "r")))
        assert offsets == sorted({str(m.partition) for m in got})
        for name in offsets:
            assert int(client.get(f"{layout.offsets_path('g', 'r')}/{name}")[0]) > 0
    finally:
        first.shutdown()
        second.shutdown()
    # The group tools read the <partition> nodes, and the log ends from the leaders.
    report = read_group(client, "g")
    (topic,) = report["topics"]
    assert [row["node"] for row in topic["partitions"]] == ["0", "1", "2", "3"]
    assert all(row["log_end_offset"] is not None for row in topic["partitions"]) and not report["notes"]
    assert [row["lag"] for row in topic["partitions"] if row["committed_offset"] is not None] == [0] * len(offsets)
    plan = plan_reset(client, "g", EARLIEST, [parse_topic_selection("r:1")])
    assert [(row["node"], row["new_offset"]) for row in plan.rows] == [("1", 0)]
    assert execute_reset(client, plan) == 1
    assert client.get(f"{layout.offsets_path('g', 'r')}/1")[0] == b"0"


def test_a_group_follows_a_new_leader(cluster):
    cluster.create("r", 1, 2)
    with Producer(zk_connect=cluster.zk_connect, acks="replicated", num_retries=60, retry_backoff_ms=200) as producer:
        producer.send("r", [b"before"])
        connector = ConsumerConnector({"zk.connect": cluster.zk_connect, "groupid": "g"}, **FAST)
        try:
            stream = connector.create_message_streams({"r": 1})["r"][0]
            assert [m.payload for m in take(stream, 1)] == [b"before"]
            cluster.kill_leader("r", 0)
            producer.send("r", [b"after"])  # to the new leader
            # The fetcher follows the leadership: "before" reached both replicas (acks=replicated),
            # so the group goes on after it, at the new leader.
            assert [m.payload for m in take(stream, 1)] == [b"after"]
            assert connector.owned_partitions() == {"r": [(0,)]}
        finally:
            connector.shutdown()
