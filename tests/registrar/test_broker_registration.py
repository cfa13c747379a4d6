"""The broker in ZooKeeper, against a real ZooKeeper server and real broker process
trees: ``/brokers/ids/<id>`` and ``/brokers/topics/<topic>/<id>`` (ephemeral) while
it runs, the broker-id check at start-up, SIGKILL and graceful stops, session expiry
(the registrar paused with SIGSTOP), ZooKeeper down at start-up or restarted under a
running broker, the registrar's respawn, and what ``mpbroker-ctl status`` shows.

Each test inspects ZooKeeper with its own kazoo client, under a chroot of its own.
"""

import os
import re
import signal
import socket
import subprocess
import sys
import time

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError
from kazoo.handlers.threading import KazooTimeoutError

from mpbroker.cli.ctl import format_status
from mpbroker.clients.consumer.simple_consumer import SimpleConsumer
from mpbroker.clients.producer.producer import Producer
from mpbroker.segments.clean_shutdown import MARKER_NAME
from tests.broker.harness import BrokerProcess
from tests.polling import wait_for

SESSION_MS = 2000  # the brokers' zk.sessiontimeout.ms unless a test says otherwise (server tick: 200 ms)


# --- helpers ------------------------------------------------------------------------

def node(zk, path):
    """``(value, stat)`` of ``path``, or None."""
    stat = zk.exists(path)
    if stat is None:
        return None
    try:
        return zk.get(path)
    except NoNodeError:  # deleted between the two calls
        return None


def owner(zk, path):
    found = node(zk, path)
    return found[1].ephemeralOwner if found else None


def produce(port: int, topic: str, payload: bytes):
    """One acknowledged message; returns its SendResult (partition, offset)."""
    with Producer(broker_list=f"0:127.0.0.1:{port}", acks="append") as producer:
        (result,) = producer.send(topic, [payload])
    return result


def produce_and_fetch(port: int, topic: str, payload: bytes) -> None:
    """The broker takes a message and serves it back (once flushed)."""
    result = produce(port, topic, payload)
    with SimpleConsumer("127.0.0.1", port) as consumer:
        wait_for(lambda: payload in consumer.fetch(topic, result.partition, result.offset).payloads,
                 timeout=10, what=f"{payload!r} to be fetchable from {topic}-{result.partition}")


def value_pattern(port: int) -> str:
    """``/brokers/ids/<id>``'s value: ``<hostname>-<ms>:<host>:<port>``."""
    return rf"{re.escape(socket.gethostname())}-(\d{{13}}):127\.0\.0\.1:{port}"


def registered(status: dict) -> bool:
    """A status (``LocalBroker.status()``) saying the broker is registered."""
    return bool(status.get("zookeeper") and status["zookeeper"]["registered"])


# --- fixtures -----------------------------------------------------------------------

@pytest.fixture
def zk_broker(tmp_path):
    """``make(name, zk_connect, brokerid, start=True, **properties)``: a BrokerProcess
    with ZooKeeper enabled; every one made is SIGKILLed (whole tree) at the end."""
    brokers = []

    def make(name, zk_connect, brokerid, start=True, **properties):
        directory = tmp_path / name
        directory.mkdir(exist_ok=True)
        properties = {"enable_zookeeper": "true", "zk_connect": zk_connect, "brokerid": brokerid,
                      "zk_sessiontimeout_ms": SESSION_MS, **properties}
        broker = BrokerProcess(directory, **properties)
        brokers.append(broker)
        return broker.start() if start else broker

    yield make
    for broker in brokers:
        if broker.process is not None and broker.process.poll() is None:
            try:
                os.killpg(broker.process.pid, signal.SIGCONT)  # a test may have left the registrar stopped
            except ProcessLookupError:
                pass
        broker.close()


@pytest.fixture
def kazoo():
    """``connect(hosts)``: a started KazooClient (the chroot in ``hosts``); stopped at the end.
    Patient: a ZooKeeper just (re)started on a busy machine may take a while to take sessions."""
    clients = []

    def connect(hosts: str, patience_s: float = 30.0) -> KazooClient:
        deadline = time.monotonic() + patience_s
        while True:
            client = KazooClient(hosts=hosts, timeout=10)
            try:
                client.start(5)
            except KazooTimeoutError:
                client.close()
                if time.monotonic() >= deadline:
                    raise
                continue
            clients.append(client)
            return client

    yield connect
    for client in clients:
        client.stop()
        client.close()


# --- 1. what a running broker registers -----------------------------------------------

def test_broker_registers_its_id_as_an_ephemeral_node(zk_broker, zk_connect, kazoo):
    before_ms = int(time.time() * 1000)
    broker = zk_broker("b", zk_connect, brokerid=3)
    zk = kazoo(zk_connect)
    value, stat = wait_for(lambda: node(zk, "/brokers/ids/3"), 5, "/brokers/ids/3", broker.output)
    match = re.fullmatch(value_pattern(broker.port), value.decode())
    assert match, value
    assert before_ms - 1000 <= int(match.group(1)) <= int(time.time() * 1000)  # creator: <host>-<start ms>
    assert stat.ephemeralOwner != 0
    assert zk.get_children("/brokers/ids") == ["3"]
    status = broker.wait_until(registered, 5, "status to say registered")
    assert status["zookeeper"]["connected"] and status["zookeeper"]["state"] == "connected"
    assert status["zookeeper"]["zk_connect"] == zk_connect
    assert status["registrar"]["pid"] and status["registrar"]["state"] == "up"


def test_topics_are_registered_with_their_partition_counts(zk_broker, zk_connect, kazoo):
    broker = zk_broker("b", zk_connect, brokerid=1, num_partitions=4, topic_partition_count_map="wide:7")
    zk = kazoo(zk_connect)
    wait_for(lambda: zk.exists("/brokers/ids/1"), 5, "/brokers/ids/1", broker.output)
    id_owner = owner(zk, "/brokers/ids/1")
    assert not zk.exists("/brokers/topics/plain")
    produce(broker.port, "plain", b"p")
    produce(broker.port, "wide", b"w")
    for topic, count in (("plain", b"4"), ("wide", b"7")):
        value, stat = wait_for(lambda: node(zk, f"/brokers/topics/{topic}/1"), 5, f"topic {topic}", broker.output)
        assert value == count
        assert stat.ephemeralOwner == id_owner  # the broker's one session
        assert zk.get_children(f"/brokers/topics/{topic}") == ["1"]
    # a topic created while running: registered within a few seconds (scanned every second)
    produce(broker.port, "later", b"l")
    created = time.monotonic()
    value, _ = wait_for(lambda: node(zk, "/brokers/topics/later/1"), 5, "topic later", broker.output)
    assert value == b"4" and time.monotonic() - created < 5
    assert sorted(zk.get_children("/brokers/topics")) == ["later", "plain", "wide"]
    broker.wait_until(lambda s: s["zookeeper"]["topics"] == 3, 5, "status to count 3 topics")


def test_topics_on_disk_at_startup_are_registered(zk_broker, zookeeper, zk_connect, kazoo):
    # the first life without ZooKeeper: the topics exist only as logs on disk
    broker = zk_broker("b", zk_connect, brokerid=2, enable_zookeeper="false", num_partitions=2,
                       topic_partition_count_map="eight:8")
    produce(broker.port, "old", b"o")
    produce(broker.port, "eight", b"e")
    assert broker.stop() == 0
    assert not kazoo(zookeeper.hosts).exists(zk_connect[len(zookeeper.hosts):])  # nothing written so far
    broker.properties["enable.zookeeper"] = "true"
    broker.write_config()
    broker.start()
    zk = kazoo(zk_connect)
    for topic, count in (("old", b"2"), ("eight", b"8")):
        value, stat = wait_for(lambda: node(zk, f"/brokers/topics/{topic}/2"), 5, f"topic {topic}", broker.output)
        assert value == count and stat.ephemeralOwner != 0
    assert re.fullmatch(value_pattern(broker.port), zk.get("/brokers/ids/2")[0].decode())


def test_a_chroot_that_does_not_exist_is_created(zk_broker, zookeeper, zk_connect, kazoo):
    chroot_connect = zk_connect + "/deeper/still"
    chroot = chroot_connect[len(zookeeper.hosts):]
    root = kazoo(zookeeper.hosts)
    assert not root.exists(zk_connect[len(zookeeper.hosts):])
    broker = zk_broker("b", chroot_connect, brokerid=4)
    wait_for(lambda: root.exists(f"{chroot}/brokers/ids/4"), 5, "the registration under the chroot", broker.output)
    assert not root.exists("/brokers/ids/4")  # nothing outside the chroot
    assert kazoo(chroot_connect).get_children("/brokers/ids") == ["4"]


# --- 2. several brokers, and one id twice --------------------------------------------

def test_two_brokers_with_different_ids_both_register(zk_broker, zk_connect, kazoo):
    first = zk_broker("one", zk_connect, brokerid=1, num_partitions=2)
    second = zk_broker("two", zk_connect, brokerid=2, num_partitions=3)
    zk = kazoo(zk_connect)
    wait_for(lambda: sorted(zk.get_children("/brokers/ids")) == ["1", "2"], 5, "both ids",
             lambda: first.output() + second.output())
    for broker_id, broker in ((1, first), (2, second)):
        assert re.fullmatch(value_pattern(broker.port), zk.get(f"/brokers/ids/{broker_id}")[0].decode())
        produce(broker.port, "shared", b"s")
    wait_for(lambda: zk.exists("/brokers/topics/shared") and
             sorted(zk.get_children("/brokers/topics/shared")) == ["1", "2"], 5, "both brokers under the topic")
    assert zk.get("/brokers/topics/shared/1")[0] == b"2"
    assert zk.get("/brokers/topics/shared/2")[0] == b"3"
    assert owner(zk, "/brokers/ids/1") != owner(zk, "/brokers/ids/2")


def test_a_second_broker_with_a_live_brokers_id_refuses_to_start(zk_broker, zk_connect, kazoo):
    # the refused broker ran before (id 5 was free then) and stopped cleanly: its marker is on disk
    late = zk_broker("late", zk_connect, brokerid=5)
    zk = kazoo(zk_connect)
    wait_for(lambda: zk.exists("/brokers/ids/5"), 5, "the first registration of id 5", late.output)
    assert late.stop() == 0
    assert not zk.exists("/brokers/ids/5")
    assert os.path.exists(os.path.join(late.log_dir, MARKER_NAME))

    live = zk_broker("live", zk_connect, brokerid=5)
    produce(live.port, "kept", b"k")
    wait_for(lambda: zk.exists("/brokers/topics/kept/5"), 5, "the live broker's topic", live.output)
    id_before = zk.get("/brokers/ids/5")
    topic_before = zk.get("/brokers/topics/kept/5")

    started = time.monotonic()
    with pytest.raises(RuntimeError, match="exited with 1"):
        late.start()
    waited = time.monotonic() - started
    assert late.process.returncode == 1
    output = late.output()
    assert "broker id 5 is registered in ZooKeeper by another broker" in output
    assert id_before[0].decode() in output  # names the holder
    assert waited >= SESSION_MS * 1.5 / 1000 + 1 - 0.2  # it gave a dead holder the time to expire
    assert waited < 20
    refused_life = output.rsplit("starting:", 1)[1]
    assert "started worker" not in refused_life  # stopped before opening any log
    assert os.path.exists(os.path.join(late.log_dir, MARKER_NAME))  # put back: the logs were not touched

    # the live broker's registration is untouched, and it still serves
    assert zk.get("/brokers/ids/5") == id_before
    assert zk.get("/brokers/topics/kept/5") == topic_before
    assert registered(live.status())
    produce_and_fetch(live.port, "kept", b"still here")


# --- 3./4. a killed broker restarts with its id; a stopped one leaves at once -----------

def test_a_broker_killed_with_its_tree_restarts_with_the_same_id(zk_broker, zk_connect, kazoo):
    broker = zk_broker("b", zk_connect, brokerid=7)
    zk = kazoo(zk_connect)
    produce(broker.port, "survivor", b"s")
    wait_for(lambda: zk.exists("/brokers/topics/survivor/7"), 5, "topic survivor", broker.output)
    old_value, old_stat = zk.get("/brokers/ids/7")
    broker.kill_tree()
    # the dead broker's node stays until its session expires
    assert zk.get("/brokers/ids/7") == (old_value, old_stat)

    broker.start()  # waits for the stale registration to expire instead of refusing
    value, stat = wait_for(lambda: (found := node(zk, "/brokers/ids/7")) and
                           found[1].ephemeralOwner != old_stat.ephemeralOwner and found, 5,
                           "the new registration", broker.output)
    assert re.fullmatch(value_pattern(broker.port), value.decode())
    assert value != old_value  # another creator (and port)
    topic = wait_for(lambda: node(zk, "/brokers/topics/survivor/7"), 5, "topic survivor again", broker.output)
    assert topic[1].ephemeralOwner == stat.ephemeralOwner
    assert broker.wait_until(registered, 5, "status to say registered")
    assert "is registered in ZooKeeper by another broker" not in broker.output()


def test_graceful_stop_removes_the_nodes_at_once(zk_broker, zk_connect, kazoo):
    # a long session: nodes that went only with the session would stay for 20 s
    broker = zk_broker("b", zk_connect, brokerid=8, zk_sessiontimeout_ms=20000)
    zk = kazoo(zk_connect)
    produce(broker.port, "gone", b"g")
    wait_for(lambda: zk.exists("/brokers/topics/gone/8"), 5, "topic gone", broker.output)
    assert zk.exists("/brokers/ids/8")
    stopped = time.monotonic()
    assert broker.stop(signal.SIGTERM) == 0
    wait_for(lambda: not zk.exists("/brokers/ids/8") and not zk.exists("/brokers/topics/gone/8"), 2,
             "the nodes to go", broker.output)
    assert time.monotonic() - stopped < 5
    assert "deregistered broker 8" in broker.output()


# --- 5. session expiry ----------------------------------------------------------------

def test_the_broker_registers_again_after_its_session_expired(zk_broker, zk_connect, kazoo):
    broker = zk_broker("b", zk_connect, brokerid=9, zk_sessiontimeout_ms=1500)
    zk = kazoo(zk_connect)
    produce(broker.port, "expiring", b"e")
    wait_for(lambda: zk.exists("/brokers/topics/expiring/9"), 5, "topic expiring", broker.output)
    old_owner = owner(zk, "/brokers/ids/9")
    registrar = broker.status()["registrar"]
    os.kill(registrar["pid"], signal.SIGSTOP)
    try:
        wait_for(lambda: not zk.exists("/brokers/ids/9") and not zk.exists("/brokers/topics/expiring/9"), 10,
                 "the session to expire")
        produce_and_fetch(broker.port, "expiring", b"while paused")  # the broker serves on
        produce_and_fetch(broker.port, "other", b"new topic while paused")
    finally:
        os.kill(registrar["pid"], signal.SIGCONT)
    new_owner = wait_for(lambda: owner(zk, "/brokers/ids/9"), 10, "the registration to come back", broker.output)
    assert new_owner != old_owner
    for topic in ("expiring", "other"):
        wait_for(lambda: owner(zk, f"/brokers/topics/{topic}/9") == new_owner, 5, f"topic {topic} again",
                 broker.output)
    status = broker.wait_until(registered, 5, "status to say registered")
    assert status["registrar"]["pid"] == registrar["pid"] and status["registrar"]["restarts"] == 0
    assert "session expired" in broker.output()
    produce_and_fetch(broker.port, "expiring", b"after")


# --- 6. ZooKeeper away ----------------------------------------------------------------

def test_broker_starts_without_zookeeper_and_registers_when_it_comes(zk_broker, zookeeper_factory, kazoo):
    server = zookeeper_factory()
    server.stop()
    started = time.monotonic()
    broker = zk_broker("b", server.connect_string("/late"), brokerid=11, zk_connectiontimeout_ms=1000,
                       num_partitions=2)
    assert time.monotonic() - started < 10
    produce_and_fetch(broker.port, "nozk", b"served without ZooKeeper")
    status = broker.status()
    assert status["zookeeper"]["connected"] is False and status["zookeeper"]["state"] == "connecting"
    assert not registered(status)
    assert "not registered" in format_status(status)
    assert "did not answer within 1000 ms" in broker.output()

    server.start()  # the same port; the chroot does not exist yet
    came = time.monotonic()
    root = kazoo(server.hosts)
    wait_for(lambda: root.exists("/late/brokers/ids/11"), 20, "the registration", broker.output)
    zk = kazoo(server.connect_string("/late"))
    value, _ = node(zk, "/brokers/ids/11")
    assert re.fullmatch(value_pattern(broker.port), value.decode())
    assert wait_for(lambda: node(zk, "/brokers/topics/nozk/11"), 5, "topic nozk", broker.output)[0] == b"2"
    assert time.monotonic() - came < 15
    broker.wait_until(registered, 5, "status to say registered")
    produce_and_fetch(broker.port, "nozk", b"and with it")


def test_registrations_are_back_after_zookeeper_restarts(zk_broker, zookeeper_factory, kazoo):
    server = zookeeper_factory()
    broker = zk_broker("b", server.connect_string("/mpb"), brokerid=12, num_partitions=3)
    produce(broker.port, "steady", b"s")

    def check_registered():
        zk = kazoo(server.connect_string("/mpb"))
        value, _ = wait_for(lambda: node(zk, "/brokers/ids/12"), 20, "the registration", broker.output)
        assert re.fullmatch(value_pattern(broker.port), value.decode())
        topic = wait_for(lambda: node(zk, "/brokers/topics/steady/12"), 5, "topic steady", broker.output)
        assert topic[0] == b"3"
        broker.wait_until(registered, 10, "status to say registered")

    check_registered()
    # down for less, then for longer than the session timeout: the broker serves on and notices
    for outage_s, payload in ((SESSION_MS * 0.5 / 1000, b"short outage"), (SESSION_MS * 2 / 1000, b"long outage")):
        server.stop()
        gone = time.monotonic()
        broker.wait_until(lambda s: not s["zookeeper"]["connected"] and not s["zookeeper"]["registered"], 5,
                          "status to say disconnected")
        produce_and_fetch(broker.port, "steady", payload)
        time.sleep(max(0.0, outage_s - (time.monotonic() - gone)))
        server.start()
        check_registered()
    assert broker.status()["registrar"]["restarts"] == 0
    produce_and_fetch(broker.port, "steady", b"after the restarts")


# --- 7. the registrar is respawned ----------------------------------------------------

def test_a_killed_registrar_is_respawned_and_registers_again(zk_broker, zk_connect, kazoo):
    broker = zk_broker("b", zk_connect, brokerid=13)
    zk = kazoo(zk_connect)
    produce(broker.port, "respawn", b"r")
    wait_for(lambda: zk.exists("/brokers/topics/respawn/13"), 5, "topic respawn", broker.output)
    old_value, old_stat = zk.get("/brokers/ids/13")
    old_pid = broker.status()["registrar"]["pid"]
    seen = []

    def respawned(status):
        seen.append(status)
        registrar = status["registrar"]
        return registrar["restarts"] >= 1 and registrar["pid"] not in (None, old_pid) and registered(status)

    os.kill(old_pid, signal.SIGKILL)
    status = broker.wait_until(respawned, 10, "a new registrar, registered")
    assert status["registrar"]["state"] == "up"
    # no status claimed a registration while no registrar was up (a dead one's last report is void)
    assert [s["registrar"] for s in seen if s["registrar"]["state"] != "up" and registered(s)] == []
    assert any(s["registrar"]["last_exit"] == -signal.SIGKILL for s in seen)
    # the same broker (same value); under the new registrar's session, also once the old one expired
    new_owner = wait_for(lambda: (o := owner(zk, "/brokers/ids/13")) not in (None, old_stat.ephemeralOwner) and o,
                         5, "a new owner of /brokers/ids/13")
    assert zk.get("/brokers/ids/13")[0] == old_value
    wait_for(lambda: owner(zk, "/brokers/topics/respawn/13") == new_owner, 5, "topic respawn under the new session")
    time.sleep(SESSION_MS * 1.5 / 1000)
    assert owner(zk, "/brokers/ids/13") == new_owner
    assert owner(zk, "/brokers/topics/respawn/13") == new_owner
    assert registered(broker.status())


# --- 8. mpbroker-ctl status -----------------------------------------------------------

def test_status_shows_zookeeper_and_the_registrar(zk_broker, zk_connect):
    broker = zk_broker("b", zk_connect, brokerid=14)
    produce(broker.port, "shown", b"s")
    status = broker.wait_until(lambda s: registered(s) and s["zookeeper"]["topics"] == 1, 5,
                               "registered with one topic")
    text = format_status(status)
    assert f"zookeeper {zk_connect}: connected, registered, 1 topics" in text
    row = next(line for line in text.splitlines() if line.startswith("registrar"))
    assert row.split()[1:4] == [str(status["registrar"]["pid"]), "up", "0"]
    result = subprocess.run([sys.executable, "-m", "mpbroker.cli.ctl", "-c", broker.config_path, "status"],
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stderr
    assert f"zookeeper {zk_connect}: connected, registered, 1 topics" in result.stdout
    assert any(line.startswith("registrar") for line in result.stdout.splitlines())
