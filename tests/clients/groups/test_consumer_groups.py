"""The ZooKeeper consumer connector against a real ZooKeeper and real brokers:
splitting a group's partitions, rebalancing when members or brokers come and go,
filters, offsets across restarts, session expiry, ZooKeeper restarts, and no duplicate
without a fault (the pure range assignment and layout codecs: ``test_group_pieces.py``)."""

import json
import logging
import signal
import subprocess
import sys
import threading
import time

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from mpbroker.clients.core.zk_registry import read_topic_partitions
from mpbroker.clients.groups.connector import ConsumerConnector
from mpbroker.clients.groups.message_stream import ConsumerTimeoutError
from mpbroker.clients.groups.rebalance import assign_range
from mpbroker.clients.groups.report import describe_group
from mpbroker.clients.groups.topic_filter import Whitelist
from mpbroker.clients.producer.producer import Producer
from mpbroker.registry import layout
from mpbroker.registry.zk_client import ensure_chroot
from tests.broker.harness import BrokerProcess
from tests.clients.helpers import HOST, wait_for

FAST = {"rebalance_backoff_ms": 200, "rebalance_retries_max": 20, "autocommit_interval_ms": 200,
        "zk_sessiontimeout_ms": 4000}


# --- against ZooKeeper and brokers ------------------------------------------------------

@pytest.fixture(scope="module")
def shared_brokers(zookeeper, tmp_path_factory):
    """Brokers 1 and 2 registered in a ZooKeeper chroot of this module, shared by its tests
    (each uses topics and groups of its own); 4 partitions per topic each."""
    zk_connect = zookeeper.connect_string("/consumer-groups")
    ensure_chroot(zk_connect, 10)
    brokers = {}
    try:
        for broker_id in (1, 2):
            brokers[broker_id] = BrokerProcess(tmp_path_factory.mktemp(f"b{broker_id}"), enable_zookeeper="true",
                                               zk_connect=zk_connect, brokerid=broker_id).start()
        yield zk_connect, brokers
    finally:
        for broker in brokers.values():
            broker.close()


@pytest.fixture
def cluster(shared_brokers, broker_factory):
    """The module's two brokers; a test's own connectors (shut down at its end) and brokers
    it adds (``add_broker``: closed at its end)."""
    zk_connect, shared = shared_brokers
    assert all(broker.process.poll() is None for broker in shared.values()), "a shared broker died"

    class Cluster:
        def __init__(self):
            self.zk_connect = zk_connect
            self.brokers = dict(shared)
            self.connectors = []
            self.zk = KazooClient(zk_connect)
            self.zk.start(10)

        def add_broker(self, broker_id: int, **properties):
            broker = broker_factory(f"b{broker_id}", enable_zookeeper="true", zk_connect=zk_connect,
                                    brokerid=broker_id, **properties)
            self.brokers[broker_id] = broker
            return broker

        def producer(self) -> Producer:
            brokers = ",".join(f"{i}:{HOST}:{b.port}" for i, b in sorted(self.brokers.items()) if b.process.poll() is None)
            return Producer(broker_list=brokers, acks="append")

        def produce(self, topic: str, payloads) -> list:
            producer = self.producer()
            try:
                for index, payload in enumerate(payloads):
                    producer.send(topic, [payload], key=str(index).encode())
            finally:
                producer.close()
            return list(payloads)

        def wait_registered(self, topic: str, partitions: int = 4):
            """Until at least ``partitions`` of ``topic`` are registered (a broker that got
            none of its messages has not created the topic)."""
            wait_for(lambda: len(self.partitions(topic)) >= partitions, 15, what=f"{topic} registered")

        def partitions(self, topic: str) -> list:
            return read_topic_partitions(self.zk, topic)

        def owners(self, group: str, topic: str) -> dict:
            path = f"/consumers/{group}/owners/{topic}"
            owners = {}
            try:
                for node in self.zk.get_children(path):
                    owners[node] = self.zk.get(f"{path}/{node}")[0].decode()
            except NoNodeError:  # released while we read: read again
                return self.owners(group, topic) if self.zk.exists(path) else {}
            return owners

        def connector(self, group: str, **settings) -> ConsumerConnector:
            connector = ConsumerConnector(zk_connect=zk_connect, groupid=group, **{**FAST, **settings})
            self.connectors.append(connector)
            return connector

        def close(self):
            for connector in self.connectors:
                connector.shutdown()
            self.zk.stop()
            self.zk.close()

    made = Cluster()
    yield made
    made.close()


def drain(stream, into: list, stop_after: float = 2.0) -> threading.Thread:
    """Iterate ``stream`` in a thread into ``into`` until ``stop_after`` s pass without a message
    (the stream's connector needs consumer.timeout.ms set)."""
    def run():
        idle_since = time.monotonic()
        while time.monotonic() - idle_since < stop_after:
            try:
                for message in stream:
                    into.append(message)
                    idle_since = time.monotonic()
                return
            except ConsumerTimeoutError:
                continue
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def payloads_of(messages) -> list:
    return [m.payload for m in messages]


def test_a_group_splits_the_partitions_disjoint_and_complete(cluster):
    sent = cluster.produce("clicks", [f"m{i}".encode() for i in range(3000)])
    cluster.wait_registered("clicks", 8)
    connectors = [cluster.connector("split", consumer_timeout_ms=300) for _ in range(3)]
    streams = [c.create_message_streams({"clicks": 1})["clicks"][0] for c in connectors]
    all_partitions = sorted(layout.PartitionId(b, p) for b in (1, 2) for p in range(4))

    def settled():
        owned = [c.owned_partitions().get("clicks", []) for c in connectors]
        return sorted(p for parts in owned for p in parts) == all_partitions and all(owned) and owned
    owned = wait_for(settled, 20, 0.05, "the group to split the partitions")
    assert sorted(len(parts) for parts in owned) == [2, 3, 3]
    owners = cluster.owners("split", "clicks")
    assert sorted(owners) == sorted(p.node() for p in all_partitions)
    for connector, parts in zip(connectors, owned):
        assert {owners[p.node()] for p in parts} == {f"{connector.consumer_id}-0"}
    received = [[] for _ in streams]
    threads = [drain(stream, into) for stream, into in zip(streams, received)]
    for thread in threads:
        thread.join(30)
    everything = [p for messages in received for p in payloads_of(messages)]
    assert sorted(everything) == sorted(sent)  # nothing lost, nothing twice
    for messages, parts in zip(received, owned):  # each took only its own partitions, in offset order
        assert {layout.PartitionId(m.broker_id, m.partition) for m in messages} <= set(parts)
        for part in parts:
            offsets = [m.next_offset for m in messages if (m.broker_id, m.partition) == part]
            assert offsets == sorted(offsets)


def test_offsets_survive_a_consumer_restart(cluster):
    sent = cluster.produce("orders", [f"o{i}".encode() for i in range(500)])
    cluster.wait_registered("orders", 8)
    first = cluster.connector("restart", consumer_timeout_ms=5000, autocommit_enable="false")
    stream = first.create_message_streams({"orders": 1})["orders"][0]
    taken = [next(stream) for _ in range(200)]
    first.commit_offsets()
    first.shutdown()
    committed = {}
    for node in cluster.zk.get_children("/consumers/restart/offsets/orders"):
        committed[node] = int(cluster.zk.get(f"/consumers/restart/offsets/orders/{node}")[0])
    for message in taken:
        assert committed[f"{message.broker_id}-{message.partition}"] >= message.next_offset
    second = cluster.connector("restart", consumer_timeout_ms=500)
    rest = []
    drain(second.create_message_streams({"orders": 1})["orders"][0], rest).join(30)
    assert sorted(payloads_of(taken) + payloads_of(rest)) == sorted(sent)  # no gap, no repeat


def test_autocommit_stores_only_finished_messages(cluster):
    cluster.produce("auto", [b"a", b"b"])
    cluster.wait_registered("auto")
    connector = cluster.connector("auto", consumer_timeout_ms=5000)
    stream = connector.create_message_streams({"auto": 1})["auto"][0]
    first = next(stream)
    path = f"/consumers/auto/offsets/auto/{first.broker_id}-{first.partition}"

    def committed():
        return cluster.zk.exists(path) and int(cluster.zk.get(path)[0])
    time.sleep(0.6)  # three auto-commit rounds: the message being processed is not committed
    assert (committed() or 0) < first.next_offset
    second = next(stream)  # asking for the next one finishes the first
    wait_for(lambda: committed() and committed() >= first.next_offset, 5, what="the auto-commit")
    assert second.payload != first.payload


def test_largest_reset_starts_at_the_end_and_the_start_is_committed(cluster):
    cluster.produce("late", [b"old"] * 50)
    cluster.wait_registered("late", 8)
    connector = cluster.connector("late", consumer_timeout_ms=300, autooffset_reset="largest")
    stream = connector.create_message_streams({"late": 1})["late"][0]
    wait_for(lambda: len(connector.owned_partitions().get("late", [])) == 8, 10, what="ownership")
    wait_for(lambda: cluster.zk.exists("/consumers/late/offsets/late") and
             len(cluster.zk.get_children("/consumers/late/offsets/late")) == 8, 10, what="start offsets committed")
    new = cluster.produce("late", [f"new{i}".encode() for i in range(40)])
    received = []
    drain(stream, received).join(30)
    assert sorted(payloads_of(received)) == sorted(new)


def test_an_offset_out_of_range_restarts_from_the_smallest(cluster):
    sent = cluster.produce("gone", [f"g{i}".encode() for i in range(100)])
    cluster.wait_registered("gone", 8)
    for node in ("1-0", "1-1", "2-0", "2-3"):
        cluster.zk.create(f"/consumers/oor/offsets/gone/{node}", b"999999999", makepath=True)
    connector = cluster.connector("oor", consumer_timeout_ms=300)
    received = []
    drain(connector.create_message_streams({"gone": 1})["gone"][0], received).join(30)
    assert sorted(payloads_of(received)) == sorted(sent)


def test_a_member_that_joins_or_leaves_moves_partitions_without_loss(cluster):
    sent = cluster.produce("flow", [f"f{i}".encode() for i in range(2000)])
    cluster.wait_registered("flow", 8)
    first = cluster.connector("moves", consumer_timeout_ms=300)
    received_first = []
    threads_first = [drain(stream, received_first, stop_after=6)
                     for stream in first.create_message_streams({"flow": 2})["flow"]]
    wait_for(lambda: len(first.owned_partitions().get("flow", [])) == 8, 10, what="first owns all")
    second = cluster.connector("moves", consumer_timeout_ms=300)
    second_streams = second.create_message_streams({"flow": 2})["flow"]
    wait_for(lambda: len(first.owned_partitions().get("flow", [])) == 4 and
             len(second.owned_partitions().get("flow", [])) == 4, 15, what="the split into 4 + 4")
    later = cluster.produce("flow", [f"late{i}".encode() for i in range(500)])
    second.shutdown()  # leaves: first takes everything back
    wait_for(lambda: len(first.owned_partitions().get("flow", [])) == 8, 15, what="first owns all again")
    for thread in threads_first:
        thread.join(30)
    received_second = []
    for stream in second_streams:  # what second took before it left (its streams have ended)
        drain(stream, received_second, stop_after=0.5).join(5)
    got = payloads_of(received_first) + payloads_of(received_second)
    assert set(got) == set(sent + later)  # at least once: nothing skipped


def test_a_broker_that_joins_or_leaves_rebalances_the_group(cluster):
    cluster.produce("grow", [b"x"] * 20)
    cluster.wait_registered("grow", 8)
    connector = cluster.connector("brokers", consumer_timeout_ms=300)
    connector.create_message_streams({"grow": 1})
    wait_for(lambda: len(connector.owned_partitions().get("grow", [])) == 8, 10, what="8 partitions owned")
    third = cluster.add_broker(3)
    cluster.produce("grow", [b"y"] * 20)  # key spread: broker 3 gets the topic too
    wait_for(lambda: {p.broker_id for p in connector.owned_partitions().get("grow", [])} == {1, 2, 3}, 15,
             what="broker 3's partitions owned")
    third.stop()
    wait_for(lambda: {p.broker_id for p in connector.owned_partitions().get("grow", [])} == {1, 2}, 15,
             what="broker 3's partitions dropped")
    assert not any(node.startswith("3-") for node in cluster.owners("brokers", "grow"))


def test_a_whitelist_picks_up_topics_created_later(cluster):
    cluster.produce("logs-a", [b"a1", b"a2"])
    cluster.produce("other", [b"no"])
    cluster.wait_registered("logs-a")
    connector = cluster.connector("filtered", consumer_timeout_ms=300)
    (stream,) = connector.create_message_streams_by_filter(Whitelist("logs-.*"), 1)
    received = []
    thread = drain(stream, received, stop_after=8)
    wait_for(lambda: "logs-a" in connector.owned_partitions(), 10, what="logs-a owned")
    cluster.produce("logs-b", [b"b1", b"b2", b"b3"])
    wait_for(lambda: "logs-b" in connector.owned_partitions(), 15, what="logs-b picked up")
    thread.join(30)
    assert sorted(payloads_of(received)) == [b"a1", b"a2", b"b1", b"b2", b"b3"]
    assert sorted(connector.owned_partitions()) == ["logs-a", "logs-b"]
    assert {m.topic for m in received} == {"logs-a", "logs-b"}


ALL_PARTITIONS = sorted(layout.PartitionId(b, p) for b in (1, 2) for p in range(4))


def share_of(connector, streams: int, others: dict) -> list:
    """The partitions the range assignment gives ``connector``'s ``streams`` streams when the
    group also has the members ``others`` ({consumer id: streams})."""
    ours = [layout.stream_id(connector.consumer_id, i) for i in range(streams)]
    theirs = [layout.stream_id(member, i) for member, count in others.items() for i in range(count)]
    assignment = assign_range(ALL_PARTITIONS, ours + theirs)
    return sorted(p for stream in ours for p in assignment[stream])


def test_members_registered_in_kafka_0_7_forms_count_in_the_range_assignment(cluster):
    """A Kafka 0.7 member's raw filter text, and mpbroker's earlier JSON-wrapped filter,
    are read as subscriptions: their streams take their share of the partitions
    (these members are nodes written here, so nobody claims that share)."""
    cluster.produce("mix", [b"m"] * 40)
    cluster.wait_registered("mix", 8)
    cluster.zk.create("/consumers/mixed/ids/java-0.7-a", b"*2*mi.*", ephemeral=True, makepath=True)
    connector = cluster.connector("mixed", consumer_timeout_ms=300)
    connector.create_message_streams({"mix": 2})
    assert json.loads(cluster.zk.get(f"/consumers/mixed/ids/{connector.consumer_id}")[0]) == {"mix": 2}

    def owns(expected):
        wait_for(lambda: connector.owned_partitions().get("mix", []) == expected, 15, 0.05,
                 what=f"{connector.consumer_id} to own {[p.node() for p in expected]}")
    expected = share_of(connector, 2, {"java-0.7-a": 2})
    assert 0 < len(expected) < 8
    owns(expected)
    cluster.zk.create("/consumers/mixed/ids/mpbroker-old-b", b'{"!3!other": 3}', ephemeral=True)  # takes "mix"
    expected = share_of(connector, 2, {"java-0.7-a": 2, "mpbroker-old-b": 3})
    owns(expected)
    assert len(expected) == 2  # 8 partitions over 7 streams
    cluster.zk.delete("/consumers/mixed/ids/java-0.7-a")
    cluster.zk.delete("/consumers/mixed/ids/mpbroker-old-b")
    owns(ALL_PARTITIONS)


def test_an_unreadable_member_is_warned_about_once_and_the_others_take_every_partition(cluster, caplog):
    sent = cluster.produce("odd", [f"o{i}".encode() for i in range(300)])
    cluster.wait_registered("odd", 8)
    cluster.zk.create("/consumers/oddgroup/ids/odd-one", b"{not a subscription", ephemeral=True, makepath=True)
    caplog.set_level(logging.WARNING, logger="mpbroker.clients.groups.connector")
    connector = cluster.connector("oddgroup", consumer_timeout_ms=300)
    (stream,) = connector.create_message_streams_by_filter(Whitelist("odd"), 1)
    assert cluster.zk.get(f"/consumers/oddgroup/ids/{connector.consumer_id}")[0] == b"*1*odd"  # 0.7's form
    wait_for(lambda: connector.owned_partitions().get("odd", []) == ALL_PARTITIONS, 15, what="all 8 owned")
    # Two more rebalances (a readable member comes and goes): the warning is not repeated.
    cluster.zk.create("/consumers/oddgroup/ids/zz-readable", b"*1*odd", ephemeral=True)
    wait_for(lambda: len(connector.owned_partitions().get("odd", [])) == 4, 15, what="the split with zz-readable")
    cluster.zk.delete("/consumers/oddgroup/ids/zz-readable")
    wait_for(lambda: connector.owned_partitions().get("odd", []) == ALL_PARTITIONS, 15, what="all 8 again")
    received = []
    drain(stream, received).join(30)
    assert sorted(payloads_of(received)) == sorted(sent)

    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and "odd-one" in r.getMessage()]
    assert len(warnings) == 1, warnings
    assert "group oddgroup: member odd-one registered b'{not a subscription'" in warnings[0]
    report = describe_group(cluster.zk_connect, "oddgroup")
    members = {m["consumer_id"]: m for m in report["members"]}
    assert members["odd-one"]["subscription"] == {"kind": "invalid", "value": "{not a subscription"}
    assert members["odd-one"]["owned"] == [] and len(members[connector.consumer_id]["owned"]) == 8
    assert any(note.startswith("member odd-one: ") for note in report["notes"])


def spawn_members(cluster, group: str, topic: str, outputs) -> list:
    """One group member process per output file (tests/clients/groups/group_member.py), session 1 s."""
    members = []
    for path in outputs:
        with open(f"{path}.log", "w") as log:
            members.append(subprocess.Popen([sys.executable, "-m", "tests.clients.groups.group_member", cluster.zk_connect,
                                             group, topic, str(path), "1000"], stdout=log, stderr=subprocess.STDOUT))
    return members


def processed(outputs) -> set:
    """The payloads the members wrote: what they processed."""
    lines = [line for path in outputs if path.exists() for line in path.read_text().splitlines()]
    return {line.split(" ", 2)[2].encode() for line in lines}


def test_a_killed_member_hands_its_partitions_over_after_its_session_times_out(cluster, tmp_path):
    sent = cluster.produce("kill", [f"warm{i}".encode() for i in range(100)])
    cluster.wait_registered("kill", 8)
    outputs = [tmp_path / "a.out", tmp_path / "b.out"]
    members = spawn_members(cluster, "killgroup", "kill", outputs)
    try:
        wait_for(lambda: len(cluster.owners("killgroup", "kill")) == 8 and
                 len({v.rsplit("-", 1)[0] for v in cluster.owners("killgroup", "kill").values()}) == 2, 30,
                 what="two members owning 4 partitions each")
        # Produced once both own partitions: member a has work of its own when it is killed.
        sent += cluster.produce("kill", [f"k{i}".encode() for i in range(3000)])
        wait_for(lambda: outputs[0].exists() and outputs[0].stat().st_size > 0, 30, what="member a consuming")
        members[0].send_signal(signal.SIGKILL)
        members[0].wait(10)
        wait_for(lambda: len(cluster.owners("killgroup", "kill")) == 8 and
                 len({v.rsplit("-", 1)[0] for v in cluster.owners("killgroup", "kill").values()}) == 1, 20,
                 what="the survivor owning all 8")
        more = cluster.produce("kill", [f"after{i}".encode() for i in range(500)])

        wait_for(lambda: processed(outputs) >= set(sent + more), 30, 0.1, what="every message processed by someone")
    finally:
        for member in members:
            if member.poll() is None:
                member.send_signal(signal.SIGKILL)
                member.wait(10)


@pytest.mark.faults
def test_a_member_paused_past_its_session_rejoins_and_nothing_is_skipped(cluster, tmp_path):
    """SIGSTOP of a member for three session timeouts: its session expires, the other
    member takes every partition; on SIGCONT it finds its session gone, joins again and
    the group splits again. Every message is processed by someone."""
    sent = cluster.produce("pause", [f"warm{i}".encode() for i in range(100)])
    cluster.wait_registered("pause", 8)
    outputs = [tmp_path / "a.out", tmp_path / "b.out"]
    members = spawn_members(cluster, "pausegroup", "pause", outputs)

    def owner_count() -> int:
        return len({v.rsplit("-", 1)[0] for v in cluster.owners("pausegroup", "pause").values()})
    try:
        wait_for(lambda: len(cluster.owners("pausegroup", "pause")) == 8 and owner_count() == 2, 30,
                 what="two members owning 4 partitions each")
        sent += cluster.produce("pause", [f"p{i}".encode() for i in range(2000)])
        wait_for(lambda: outputs[0].exists() and outputs[0].stat().st_size > 0, 30, what="member a consuming")
        members[0].send_signal(signal.SIGSTOP)
        wait_for(lambda: len(cluster.owners("pausegroup", "pause")) == 8 and owner_count() == 1, 20,
                 what="the other member owning all 8 while a is paused")
        sent += cluster.produce("pause", [f"during{i}".encode() for i in range(300)])
        time.sleep(2)  # a stays paused well past its 1 s session: ZooKeeper expired it
        members[0].send_signal(signal.SIGCONT)
        wait_for(lambda: len(cluster.owners("pausegroup", "pause")) == 8 and owner_count() == 2, 30,
                 what="a back in the group, every partition owned")
        sent += cluster.produce("pause", [f"after{i}".encode() for i in range(300)])

        wait_for(lambda: processed(outputs) >= set(sent), 30, 0.1, what="every message processed by someone")
        assert all(member.poll() is None for member in members), "a member died"
    finally:
        for member in members:
            if member.poll() is None:
                member.send_signal(signal.SIGCONT)
                member.send_signal(signal.SIGKILL)
                member.wait(10)


def test_the_group_recovers_from_a_session_expiry(cluster):
    cluster.produce("expire", [b"e"] * 10)
    cluster.wait_registered("expire", 8)
    connector = cluster.connector("expiry", consumer_timeout_ms=300)
    stream = connector.create_message_streams({"expire": 1})["expire"][0]
    wait_for(lambda: len(cluster.owners("expiry", "expire")) == 8, 10, what="owners")
    session_id, password = connector._client.client_id
    # Expire the session the standard way: a second client joins it and closes it.
    intruder = KazooClient(cluster.zk_connect.split("/")[0], client_id=(session_id, password))
    intruder.start(10)
    intruder.stop()
    intruder.close()
    wait_for(lambda: (connector._client.client_id or (session_id,))[0] != session_id, 15, what="a new session")
    wait_for(lambda: len(cluster.owners("expiry", "expire")) == 8, 15, what="owners again")
    ids = cluster.zk.get_children("/consumers/expiry/ids")
    assert ids == [connector.consumer_id]
    later = cluster.produce("expire", [f"after{i}".encode() for i in range(30)])
    received = []
    drain(stream, received).join(30)
    assert set(later) <= set(payloads_of(received))


def test_zookeeper_restarted_under_load_loses_nothing(broker_factory, zookeeper_factory):
    server = zookeeper_factory("zk-restart")
    zk_connect = server.connect_string("/restart")
    brokers = {i: broker_factory(f"r{i}", enable_zookeeper="true", zk_connect=zk_connect, brokerid=i,
                                 zk_sessiontimeout_ms=8000) for i in (1, 2)}
    producer = Producer(broker_list=",".join(f"{i}:{HOST}:{b.port}" for i, b in brokers.items()), acks="append")
    sent = []
    stop = threading.Event()

    def produce():
        index = 0
        while not stop.is_set():
            payload = f"z{index}".encode()
            producer.send("steady", [payload], key=payload)
            sent.append(payload)
            index += 1
            time.sleep(0.002)
    for index in range(100):  # every partition of both brokers gets the topic
        payload = f"first{index}".encode()
        producer.send("steady", [payload], key=payload)
        sent.append(payload)
    connector = ConsumerConnector(zk_connect=zk_connect, groupid="steady", consumer_timeout_ms=300,
                                  **{**FAST, "zk_sessiontimeout_ms": 8000})
    try:
        stream = connector.create_message_streams({"steady": 1})["steady"][0]
        received = []
        thread = drain(stream, received, stop_after=6)
        wait_for(lambda: len(connector.owned_partitions().get("steady", [])) == 8, 20, what="ownership")
        writer = threading.Thread(target=produce, daemon=True)
        writer.start()
        time.sleep(0.5)
        server.stop()
        time.sleep(2.0)  # less than the session timeout: sessions survive
        server.start()
        time.sleep(1.0)
        stop.set()
        writer.join(10)
        thread.join(40)
        assert set(payloads_of(received)) == set(sent)
        assert len(connector.owned_partitions()["steady"]) == 8
    finally:
        stop.set()
        producer.close()
        connector.shutdown()


# --- no fault, no duplicate (issue 35, item 6) ------------------------------------------------

def test_a_lone_members_start_settles_in_one_rebalance(cluster, caplog):
    """Started as the brokers register a new topic (each within a second of its first
    message, on its own): the member owned nothing, then one broker's partitions, then
    all eight, and what was in flight at each step was delivered again. It waits for the
    registry to settle and claims once."""
    caplog.set_level(logging.INFO, logger="mpbroker.clients.groups.connector")
    sent = cluster.produce("fresh", [f"n{i}".encode() for i in range(400)])
    connector = cluster.connector("lone", consumer_timeout_ms=300)
    stream = connector.create_message_streams({"fresh": 1})["fresh"][0]
    wait_for(lambda: len(connector.owned_partitions().get("fresh", [])) == 8, 15, 0.02, what="8 partitions owned")
    received = []
    drain(stream, received).join(30)
    assert sorted(payloads_of(received)) == sorted(sent)  # each once
    owns = [r.getMessage() for r in caplog.records if " owns " in r.getMessage()]
    assert len(owns) == 1, owns
    assert connector.rebalances == 1


def test_a_rebalance_lets_the_message_being_processed_finish_before_it_releases(cluster):
    """A member joins while the consumer processes a message: the rebalance committed
    what was finished before it and the message was delivered again. It waits (up to
    ``rebalance.finish.ms``) for the message to finish, commits it, then releases."""
    sent = cluster.produce("work", [f"w{i}".encode() for i in range(200)])
    cluster.wait_registered("work", 8)
    connector = cluster.connector("handover", consumer_timeout_ms=300)
    stream = connector.create_message_streams({"work": 1})["work"][0]
    wait_for(lambda: len(connector.owned_partitions().get("work", [])) == 8, 15, 0.02, what="8 partitions owned")
    received = [next(stream)]  # being processed
    other = layout.consumer_path("handover", "other")
    cluster.zk.create(other, layout.Subscription({"work": 1}).value(), makepath=True)  # a member that claims nothing
    time.sleep(0.5)
    assert len(connector.owned_partitions()["work"]) == 8  # the rebalance waits for the message
    thread = drain(stream, received, stop_after=3)  # asking for the next one finishes it
    wait_for(lambda: len(connector.owned_partitions().get("work", [])) == 4, 15, 0.02, what="half released")
    cluster.zk.delete(other)
    wait_for(lambda: len(connector.owned_partitions().get("work", [])) == 8, 15, 0.02, what="all owned again")
    thread.join(30)
    assert sorted(payloads_of(received)) == sorted(sent)  # each once
