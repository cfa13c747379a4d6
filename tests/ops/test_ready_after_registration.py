"""With ZooKeeper, READY=1 (and ``"ready"`` in the status) waits for the broker's
registration, so a producer that finds brokers through ZooKeeper can use this one as soon
as ``systemctl start`` returns; but ZooKeeper never keeps the broker from serving: when it
is down at start-up READY=1 comes with the acceptor, and when it answers but the
registration does not happen, zk.connectiontimeout.ms after the acceptor came up.
Real ZooKeeper servers, real brokers, a real notification socket."""

import re
import signal
import socket
import time

import pytest
from kazoo.client import KazooClient
from kazoo.security import make_acl

from mpbroker.clients.producer.producer import Producer
from mpbroker.codec.message import encode_message_set
from mpbroker.registry.layout import split_zk_connect
from tests.broker.harness import BrokerProcess
from tests.broker.wire import WireClient
from tests.ops.notify_socket import NotifySocket, launch, ready_port
from tests.polling import wait_for


@pytest.fixture
def setup(tmp_path):
    """``make(zk_connect, brokerid, **properties)``: a not yet started ZooKeeper-enabled
    BrokerProcess and a NotifySocket for it; all killed and closed at the end."""
    made = []

    def make(zk_connect, brokerid, **properties):
        broker = BrokerProcess(tmp_path / f"b{len(made)}", enable_zookeeper="true", zk_connect=zk_connect,
                               brokerid=brokerid, zk_sessiontimeout_ms=2000, **properties)
        notify = NotifySocket()
        made.append((broker, notify))
        return broker, notify

    yield make
    for broker, notify in made:
        broker.close()
        notify.close()


@pytest.fixture
def root_zk(zookeeper):
    """A kazoo client on the session's ZooKeeper, without a chroot."""
    client = KazooClient(hosts=zookeeper.hosts, timeout=10)
    client.start(20)
    yield client
    client.stop()
    client.close()


def test_ready_comes_when_the_broker_is_registered(setup, zk_connect, root_zk):
    broker, notify = setup(zk_connect, brokerid=21)
    chroot = split_zk_connect(zk_connect)[1]
    launch(broker, {"NOTIFY_SOCKET": notify.address})
    ready = notify.wait_for("READY", detail=broker.output)
    registration = root_zk.exists(f"{chroot}/brokers/ids/21")  # at once: no waiting here
    assert registration is not None, f"READY=1 before the registration\n{broker.output()}"
    port = ready_port(ready)
    value, _ = root_zk.get(f"{chroot}/brokers/ids/21")
    assert re.fullmatch(rf"{re.escape(socket.gethostname())}-\d{{13}}:127\.0\.0\.1:{port}", value.decode())
    assert "registered in ZooKeeper" in ready.fields["STATUS"]
    status = broker.status()
    assert status["ready"] is True and status["zookeeper"]["registered"] is True
    # what issue 16 saw fail: a producer discovering brokers through ZooKeeper right after READY=1
    with Producer({"zk.connect": zk_connect, "acks": "append"}) as producer:
        (result,) = producer.send("after-ready", [b"found the broker"])
    assert result.offset == 0
    broker.send_signal(signal.SIGTERM)
    assert broker.process.wait(60) == 0


def test_zookeeper_down_at_start_does_not_hold_ready_back(setup, zookeeper_factory):
    server = zookeeper_factory()
    server.stop()
    broker, notify = setup(server.connect_string("/down"), brokerid=22, zk_connectiontimeout_ms=1000)
    launch(broker, {"NOTIFY_SOCKET": notify.address})
    ready = notify.wait_for("READY", timeout=30, detail=broker.output)
    assert "did not answer at start-up" in ready.fields["STATUS"]
    with WireClient(ready_port(ready)) as client:  # served at once
        assert client.produce_acked("nozk", 0, encode_message_set([b"served"])).error == 0
    status = broker.status()
    assert status["ready"] is True and status["zookeeper"]["registered"] is False


def test_a_registration_that_fails_holds_ready_back_for_the_connection_timeout_only(setup, zk_connect, root_zk):
    """ZooKeeper answers, but refuses the registration (a read-only /brokers/ids): READY=1
    comes zk.connectiontimeout.ms after the acceptor came up; the broker registers as
    soon as ZooKeeper lets it."""
    chroot = split_zk_connect(zk_connect)[1]
    read_only = [make_acl("world", "anyone", read=True, admin=True)]  # admin: the test lifts it later
    root_zk.ensure_path(f"{chroot}/brokers")
    root_zk.create(f"{chroot}/brokers/ids", acl=read_only)
    timeout_ms = 1500
    broker, notify = setup(zk_connect, brokerid=23, zk_connectiontimeout_ms=timeout_ms)
    launched = time.monotonic()
    launch(broker, {"NOTIFY_SOCKET": notify.address})
    ready = notify.wait_for("READY", timeout=30, detail=broker.output)
    assert ready.at - launched >= timeout_ms / 1000
    assert f"not registered in ZooKeeper yet (none within {timeout_ms} ms)" in ready.fields["STATUS"]
    assert f"not registered in ZooKeeper within {timeout_ms} ms" in broker.output()
    with WireClient(ready_port(ready)) as client:
        assert client.produce_acked("refused", 0, encode_message_set([b"served"])).error == 0
    root_zk.set_acls(f"{chroot}/brokers/ids", [make_acl("world", "anyone", all=True)])
    wait_for(lambda: root_zk.exists(f"{chroot}/brokers/ids/23"), 10, "the registration once allowed", broker.output)
    broker.wait_until(lambda status: status["zookeeper"]["registered"], 10, "the status to say registered")
