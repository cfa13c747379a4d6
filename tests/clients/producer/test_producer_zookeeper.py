"""The producer with ``zk.connect``: brokers and partitions found through a real ZooKeeper
server, with real brokers that register themselves (``enable.zookeeper=true``); no mocks.

A topic no broker has registered yet goes to partition 0 of every live broker; once the
brokers registered it, keyed messages land on ``xxhash(key) % n`` of all the sorted
(broker, partition) pairs. Brokers that join are used and brokers that leave drop out
without restarting the producer, and the last known lists stay in use while ZooKeeper
is away.
"""

import os
import subprocess
import sys
import threading
import time

import pytest
from kazoo.exceptions import KazooException

from mpbroker.clients import BrokerUnavailableError, Producer
from mpbroker.clients.core.brokers import Broker
from mpbroker.clients.core.zk_registry import read_brokers, read_topic_partitions
from mpbroker.clients.producer.partitioner import default_partitioner
from mpbroker.clients.producer.topic_spread import TopicSpreadTimeout
from mpbroker.clients.producer.zk_brokers import ZkBrokerPartitions
from mpbroker.registry import layout
from mpbroker.registry.zk_client import ZooKeeperUnavailable, close_client, start_client
from tests.clients.helpers import PARTITIONS, broker_list, free_port, read_partition, wait_for

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
REGISTERED_S = 20.0  # a broker registers itself at start, and a new topic within ~1 s (slack for busy machines)


def start_client_patiently(connect: str, patience_s: float):
    """A fresh ZooKeeper server answers ``ruok`` a while before it answers sessions;
    on a busy machine a first attempt can hang: try again, a few seconds at a time."""
    deadline = time.monotonic() + patience_s
    while True:
        try:
            return start_client(connect, 6000, 5000)
        except ZooKeeperUnavailable:
            if time.monotonic() > deadline:
                raise


@pytest.fixture
def zk(zk_connect):
    """A client of our own, to see what the brokers registered (the first test may meet
    the session's ZooKeeper just started)."""
    client = start_client_patiently(zk_connect, 30.0)
    yield client
    close_client(client)


@pytest.fixture
def zk_brokers(broker_factory, zk_connect, zk):
    """``start(id)``: a broker (4 partitions a topic) registered in ZooKeeper under ``id``."""

    def start(broker_id: int):
        broker = broker_factory(f"b{broker_id}", enable_zookeeper="true", zk_connect=zk_connect, brokerid=broker_id)
        wait_for(lambda: broker_id in read_brokers(zk), REGISTERED_S, what=f"broker {broker_id} registered")
        return broker

    return start


def all_pairs(*broker_ids) -> list:
    return [(b, p) for b in sorted(broker_ids) for p in range(PARTITIONS)]


def pairs_now(producer, topic: str) -> list:
    try:
        return producer.partitions_for(topic)
    except BrokerUnavailableError:  # no broker known (yet)
        return []


def wait_for_pairs(producer, topic: str, expected: list) -> None:
    wait_for(lambda: pairs_now(producer, topic) == expected, REGISTERED_S,
             what=f"{topic}'s pairs to become {expected} (now {pairs_now(producer, topic)})")


def send_keyed(producer, brokers: dict, topic: str, keys, tag: bytes, pairs: list) -> dict:
    """Send one message per key, acknowledged once flushed, in one batch (one look at the
    topic's pairs, which the brokers' registrations may widen at any moment); check that
    each broker stored each key's message on ``pairs[xxhash(key) % len(pairs)]``, in order.
    Returns {key: pair}."""
    assert producer.partitions_for(topic) == pairs
    results = producer.deliver([(topic, key, tag + b"-" + key) for key in keys])
    assert sum(r.messages for r in results) == len(keys) and all(r.offset is not None for r in results)
    landed = {key: pairs[default_partitioner(key, len(pairs))] for key in keys}
    assert {(r.broker_id, r.partition) for r in results} == set(landed.values())
    for pair in set(landed.values()):
        on_pair = [m for m in stored(brokers, topic, pair) if m.startswith(tag + b"-")]
        assert on_pair == [tag + b"-" + k for k in keys if landed[k] == pair], f"{tag!r} on {pair}"
    return landed


def stored(brokers: dict, topic: str, pair) -> list:
    broker_id, partition = pair
    return read_partition(brokers[broker_id].port, topic, partition)


KEYS = [b"user-%d" % i for i in range(24)]


def test_new_topic_bootstraps_on_partition_0_then_spreads_over_every_pair(zk_brokers, zk_connect, zk):
    brokers = {1: zk_brokers(1), 2: zk_brokers(2)}
    with Producer(zk_connect=zk_connect, acks="flush") as producer:
        landed = send_keyed(producer, brokers, "fresh", KEYS, b"first", [(1, 0), (2, 0)])
        assert set(landed.values()) == {(1, 0), (2, 0)}, "the keys reach both brokers"

        # the brokers register the topic (4 partitions each): the watch widens the list
        wait_for(lambda: {p.broker_id for p in read_topic_partitions(zk, "fresh")} == {1, 2}, REGISTERED_S,
                 what="both brokers registered the topic")
        pairs = all_pairs(1, 2)
        wait_for_pairs(producer, "fresh", pairs)
        landed = send_keyed(producer, brokers, "fresh", KEYS, b"second", pairs)
        assert len(set(landed.values())) > 4, "the keys spread over the pairs"


def test_a_broker_that_joins_is_used_without_restarting_the_producer(zk_brokers, zk_connect):
    brokers = {1: zk_brokers(1), 2: zk_brokers(2)}
    with Producer(zk_connect=zk_connect, acks="flush") as producer:
        send_keyed(producer, brokers, "grow", KEYS, b"before", [(1, 0), (2, 0)])
        wait_for_pairs(producer, "grow", all_pairs(1, 2))

        brokers[3] = zk_brokers(3)
        wait_for(lambda: 3 in producer._metadata.brokers, REGISTERED_S, what="the producer to see broker 3")
        landed = send_keyed(producer, brokers, "new-after-join", KEYS, b"boot", [(1, 0), (2, 0), (3, 0)])
        assert (3, 0) in landed.values()

        # broker 3 gets "grow" (here from a producer of its own); the list widens to it
        with Producer(broker_list=broker_list(brokers[3]), acks="flush") as direct:
            direct.send("grow", b"direct", key=b"x")
        pairs = all_pairs(1, 2, 3)
        wait_for_pairs(producer, "grow", pairs)
        landed = send_keyed(producer, brokers, "grow", KEYS, b"after", pairs)
        assert any(pair[0] == 3 for pair in landed.values()), "some keys go to the new broker"


def test_a_stopped_broker_drops_out_and_sends_go_on_to_the_others(zk_brokers, zk_connect):
    brokers = {1: zk_brokers(1), 2: zk_brokers(2)}
    with Producer(zk_connect=zk_connect, acks="flush") as producer:
        send_keyed(producer, brokers, "shrink", KEYS, b"before", [(1, 0), (2, 0)])
        wait_for_pairs(producer, "shrink", all_pairs(1, 2))

        assert brokers[2].stop() == 0  # graceful: it deletes its registrations
        wait_for_pairs(producer, "shrink", all_pairs(1))
        assert 2 not in producer._metadata.brokers
        assert producer.partitions_for("new-after-leave") == [(1, 0)]
        send_keyed(producer, brokers, "shrink", KEYS, b"after", all_pairs(1))


def test_a_producer_started_before_its_broker_waits_for_it_to_register(zk_brokers, zk_connect):
    """Issue 16: a broker answers on its port a moment before it is registered; a producer
    started then failed at once with "no broker is registered"."""
    with Producer(zk_connect=zk_connect, acks="flush", zk_connectiontimeout_ms=60000) as producer:
        outcome = {}

        def send():
            try:
                outcome["results"] = producer.send("waited", b"sent before the broker registered")
            except Exception as exc:  # noqa: BLE001 (shown by the assertion below)
                outcome["error"] = exc
        sender = threading.Thread(target=send)
        sender.start()
        time.sleep(0.5)
        assert sender.is_alive(), f"the send did not wait for a broker: {outcome}"
        broker = zk_brokers(3)
        sender.join(60)
        assert not sender.is_alive() and "error" not in outcome, outcome
        (result,) = outcome["results"]
        assert (result.broker_id, result.partition) == (3, 0)
        assert read_partition(broker.port, "waited", 0) == [b"sent before the broker registered"]


def test_before_any_broker_sends_fail_clearly_after_the_wait_then_the_first_broker_is_used(zk_brokers, zk_connect):
    with Producer(zk_connect=zk_connect, acks="flush", zk_connectiontimeout_ms=1500) as producer:
        chroot = zk_connect[zk_connect.index("/"):]
        started = time.monotonic()
        with pytest.raises(BrokerUnavailableError) as raised:
            producer.send("early", b"nowhere")
        waited = time.monotonic() - started
        assert str(raised.value) == (f"no broker is registered under {chroot}/brokers/ids in ZooKeeper at "
                                     f"{zk_connect}, after waiting 1500 ms (zk.connectiontimeout.ms)")
        assert 1.4 < waited < 15, waited
        broker = zk_brokers(5)
        wait_for_pairs(producer, "early", [(5, 0)])  # (the topic is not on broker 5 yet)
        (result,) = producer.send("early", b"somewhere")
        assert (result.broker_id, result.partition) == (5, 0)
        assert read_partition(broker.port, "early", 0) == [b"somewhere"]


def registered_by(zk, topic: str) -> set:
    return {p.broker_id for p in read_topic_partitions(zk, topic)}


def test_a_new_topic_lands_on_the_brokers_of_its_first_batch_unless_it_is_spread(zk_brokers, zk_connect, zk):
    brokers = {1: zk_brokers(1), 2: zk_brokers(2)}
    with Producer(zk_connect=zk_connect, acks="flush") as producer:  # 0.7: where the first message went
        (first,) = producer.send("narrow", b"first")
        wait_for_pairs(producer, "narrow", all_pairs(first.broker_id))
        assert registered_by(zk, "narrow") == {first.broker_id}
        landed = send_keyed(producer, brokers, "narrow", KEYS, b"then", all_pairs(first.broker_id))
        assert {pair[0] for pair in landed.values()} == {first.broker_id}, "the other broker never gets it"

    with Producer(zk_connect=zk_connect, acks="flush", spread_topics="true") as producer:
        (first,) = producer.send("spread", b"first", key=b"k")
        assert registered_by(zk, "spread") == {1, 2}  # before the first message went out
        pairs = all_pairs(1, 2)
        assert producer.partitions_for("spread") == pairs and (first.broker_id, first.partition) in pairs
        landed = send_keyed(producer, brokers, "spread", KEYS, b"keyed", pairs)
        assert {pair[0] for pair in landed.values()} == {1, 2}
    # creating the topic (an empty set to partition 0 of each broker) stored nothing
    assert sorted(m for pair in pairs for m in stored(brokers, "spread", pair)) == \
        sorted([b"first"] + [b"keyed-" + key for key in KEYS])


def test_spreading_waits_for_every_live_broker_and_names_those_that_did_not_register(
        broker_factory, zk_brokers, zk_connect, zk):
    zk_brokers(1)
    plain = broker_factory("plain")  # without ZooKeeper: it never registers a topic ...
    zk.create(layout.broker_path(9), b"c:127.0.0.1:%d" % plain.port, ephemeral=True)  # ... but is listed live
    with Producer(zk_connect=zk_connect, acks="flush") as producer:
        wait_for(lambda: 9 in producer._metadata.brokers, REGISTERED_S, what="the producer to see broker 9")
        with pytest.raises(TopicSpreadTimeout, match=r"broker\(s\) 9 did not register topic half within 2s") as raised:
            producer.spread_topic("half", timeout_s=2)
        assert raised.value.missing == [9]
        assert registered_by(zk, "half") == {1}
        assert producer.partitions_for("half") == all_pairs(1)
    assert "half" in {p["topic"] for p in plain.status()["partitions"]}  # the empty produce created it there


def registered(client, broker_id: int) -> bool:
    try:
        return broker_id in read_brokers(client)
    except KazooException:  # the session expired while ZooKeeper was away: kazoo makes a new one
        return False


def test_while_zookeeper_is_away_the_last_known_brokers_serve_and_changes_are_seen_after(zookeeper_factory,
                                                                                        broker_factory):
    server = zookeeper_factory("own-zk")
    connect = server.connect_string("/away")
    patience_s = 30.0  # a JVM just (re)started, on a busy machine
    client = start_client_patiently(connect, patience_s)

    def start(broker_id: int):
        broker = broker_factory(f"b{broker_id}", enable_zookeeper="true", zk_connect=connect, brokerid=broker_id)
        wait_for(lambda: registered(client, broker_id), patience_s, what=f"broker {broker_id} registered")
        return broker

    try:
        brokers = {7: start(7)}
        producer = Producer(zk_connect=connect, producer_type="async", acks="flush", batch_size=10, queue_time=50,
                            zk_connectiontimeout_ms=int(patience_s * 1000))
        try:
            assert producer.partitions_for("known") == [(7, 0)]
            server.stop()
            wait_for(lambda: not producer._metadata._client.connected, 10, what="the producer to lose ZooKeeper")
            for i in range(30):
                producer.send("known", b"m%d" % i)
            producer.send("unknown-yet", b"bootstrapped")  # a new topic: the last known brokers' partition 0
            assert producer.flush(10)
            assert producer.stats.messages_sent == 31 and producer.stats.messages_failed == 0
            assert read_partition(brokers[7].port, "known", 0) == [b"m%d" % i for i in range(30)]
            assert read_partition(brokers[7].port, "unknown-yet", 0) == [b"bootstrapped"]

            # ZooKeeper returns: broker 7 registers the topics made meanwhile, broker 8 joins
            server.start()
            brokers[8] = start(8)
            for topic in ("known", "unknown-yet"):  # the latter's watch was set while ZooKeeper was away
                wait_for(lambda: pairs_now(producer, topic) == all_pairs(7), patience_s,
                         what=f"{topic} registered by broker 7, seen by the producer")
            wait_for(lambda: 8 in producer._metadata.brokers, patience_s, what="the producer to see broker 8")
            assert producer.partitions_for("after-return") == [(7, 0), (8, 0)]
        finally:
            producer.close()
    finally:
        close_client(client)


def test_discovery_follows_the_nodes_as_they_come_go_and_come_back(zk_connect, zk):
    """ZkBrokerPartitions against registrations written by hand: every way a node can
    change, including a topic node deleted and created again (a new ChildrenWatch)."""
    discovery = ZkBrokerPartitions(zk_connect, 6000, 6000, broker_wait_ms=200)

    def pairs(topic):
        try:
            return discovery.partitions(topic)
        except BrokerUnavailableError:
            return []

    try:
        with pytest.raises(BrokerUnavailableError, match="no broker is registered"):
            discovery.partitions("t")
        for broker_id, port in ((1, 9001), (2, 9002)):
            zk.create(layout.broker_path(broker_id), b"c:127.0.0.1:%d" % port, ephemeral=True, makepath=True)
        wait_for(lambda: pairs("t") == [(1, 0), (2, 0)], what="bootstrap on both brokers")
        assert discovery.brokers[2] == Broker(2, "127.0.0.1", 9002)

        zk.create(layout.topic_broker_path("t", 1), b"3", ephemeral=True, makepath=True)
        zk.create(layout.topic_broker_path("t", 3), b"5", ephemeral=True)  # broker 3 is not live
        wait_for(lambda: pairs("t") == [(1, 0), (1, 1), (1, 2)], what="broker 1's 3 partitions")

        zk.delete(layout.topic_path("t"), recursive=True)  # the topic node goes ...
        wait_for(lambda: pairs("t") == [(1, 0), (2, 0)], what="bootstrap again")
        zk.create(layout.topic_broker_path("t", 2), b"2", ephemeral=True, makepath=True)  # ... and comes back
        wait_for(lambda: pairs("t") == [(2, 0), (2, 1)], what="the new topic node followed")
        zk.create(layout.topic_broker_path("t", 1), b"1", ephemeral=True)
        wait_for(lambda: pairs("t") == [(1, 0), (2, 0), (2, 1)], what="broker 1 again")

        zk.delete(layout.broker_path(2))  # broker 2 leaves: its registration no longer counts
        wait_for(lambda: pairs("t") == [(1, 0)], what="broker 2 gone")
        zk.delete(layout.broker_path(1))
        zk.create(layout.broker_path(1), b"c2:127.0.0.1:9011", ephemeral=True)  # back at another port
        wait_for(lambda: discovery.brokers.get(1) == Broker(1, "127.0.0.1", 9011), what="broker 1's new port")
        zk.delete(layout.broker_path(1))
        wait_for(lambda: not discovery.brokers, what="no broker left")
        with pytest.raises(BrokerUnavailableError, match="no broker is registered"):
            discovery.partitions("t")
    finally:
        discovery.close()


def test_settings_for_zookeeper():
    with pytest.raises(ValueError, match="only one of broker.list and zk.connect"):
        Producer(broker_list="127.0.0.1:9092", zk_connect="127.0.0.1:2181")
    with pytest.raises(ValueError, match="zk.sessiontimeout.ms"):
        Producer(zk_connect="127.0.0.1:2181", zk_sessiontimeout_ms=0)
    started = time.monotonic()
    with pytest.raises(BrokerUnavailableError, match="ZooKeeper"):
        Producer(zk_connect=f"127.0.0.1:{free_port()}", zk_connectiontimeout_ms=300)
    assert time.monotonic() - started < 5


# --- the console producer ----------------------------------------------------------------


def console_producer(args, lines: bytes, timeout=30):
    return subprocess.run([sys.executable, "-m", "mpbroker.cli.console_producer", *args], input=lines,
                          capture_output=True, timeout=timeout, cwd=REPO)


def test_console_producer_with_zookeeper(zk_brokers, zk_connect):
    brokers = {1: zk_brokers(1), 2: zk_brokers(2)}
    with Producer(zk_connect=zk_connect, acks="flush") as producer:  # the topic on both brokers first
        send_keyed(producer, brokers, "console", KEYS, b"first", [(1, 0), (2, 0)])
        pairs = all_pairs(1, 2)
        wait_for_pairs(producer, "console", pairs)
    lines = [b"k%d:line-%d" % (i % 6, i) for i in range(30)]
    produced = console_producer(["--zookeeper", zk_connect, "--topic", "console", "--key-separator", ":",
                                 "--acks", "flush", "--batch-size", "7"], b"\n".join(lines) + b"\n")
    assert produced.returncode == 0, produced.stderr
    assert produced.stderr == b""
    expected = {}
    for line in lines:
        key, _, payload = line.partition(b":")
        expected.setdefault(pairs[default_partitioner(key, len(pairs))], []).append(payload)
    for pair, payloads in expected.items():
        assert [m for m in stored(brokers, "console", pair) if m.startswith(b"line-")] == payloads
    assert {pair[0] for pair in expected} == {1, 2}


def test_console_producer_spreads_a_new_topic_when_asked(zk_brokers, zk_connect, zk):
    brokers = {1: zk_brokers(1), 2: zk_brokers(2)}
    produced = console_producer(["--zookeeper", zk_connect, "--topic", "spread-console", "--acks", "flush",
                                 "--spread-topic"], b"the only line\n")
    assert produced.returncode == 0, produced.stderr
    assert registered_by(zk, "spread-console") == {1, 2}
    assert [m for pair in all_pairs(1, 2) for m in stored(brokers, "spread-console", pair)] == [b"the only line"]


def test_console_producer_discovery_arguments():
    both = console_producer(["--zookeeper", "127.0.0.1:1", "--broker-list", "127.0.0.1:9092", "--topic", "t"], b"")
    assert both.returncode == 2 and b"not allowed with" in both.stderr
    neither = console_producer(["--topic", "t"], b"")
    assert neither.returncode == 2 and b"--broker-list" in neither.stderr
