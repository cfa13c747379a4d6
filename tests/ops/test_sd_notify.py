"""The broker speaks systemd's notification protocol to a real AF_UNIX datagram socket
given as ``$NOTIFY_SOCKET`` (a path, or ``@name`` in the abstract namespace): READY=1
once it serves, RELOADING=1 with MONOTONIC_USEC= in the same datagram then READY=1 on
SIGHUP (the Type=notify-reload protocol), STOPPING=1 on TERM, and WATCHDOG=1 at half of
``$WATCHDOG_USEC``, as systemd sets them."""

import itertools
import signal
import time

import pytest

from mpbroker.codec.message import encode_message_set
from mpbroker.systemd import monotonic_usec
from tests.broker.harness import BrokerProcess
from tests.broker.wire import WireClient
from tests.ops.notify_socket import NotifySocket, launch, ready_port


@pytest.fixture
def notify_socket():
    sockets = []

    def make(abstract: bool = False) -> NotifySocket:
        sockets.append(NotifySocket(abstract))
        return sockets[-1]

    yield make
    for sock in sockets:
        sock.close()


@pytest.fixture
def broker_process(tmp_path):
    brokers = []

    def make(**properties) -> BrokerProcess:
        brokers.append(BrokerProcess(tmp_path / f"b{len(brokers)}", **properties))
        return brokers[-1]

    yield make
    for broker in brokers:
        broker.close()


@pytest.mark.parametrize("abstract", [False, True], ids=["path", "abstract-namespace"])
def test_ready_reloading_and_stopping_are_notified(notify_socket, broker_process, abstract):
    notify = notify_socket(abstract)
    broker = broker_process()
    launch(broker, {"NOTIFY_SOCKET": notify.address})

    ready = notify.wait_for("READY", detail=broker.output)
    assert notify.received == [ready]  # nothing before it (no watchdog asked for)
    assert ready.fields["MAINPID"] == str(broker.process.pid)
    port = ready_port(ready)
    status = broker.status()
    assert status["ready"] is True and status["port"] == port and status["acceptor"]["state"] == "up"
    with WireClient(port) as client:  # READY=1 means a client is served now
        message_set = encode_message_set([b"right after READY=1"])
        assert client.produce_acked("notified", 0, message_set).error == 0
        assert client.fetch("notified", 0, 0) == (0, message_set)

    before = monotonic_usec()
    broker.send_signal(signal.SIGHUP)
    reloading = notify.wait_for("RELOADING", detail=broker.output)
    assert before <= int(reloading.fields["MONOTONIC_USEC"]) <= monotonic_usec()  # one datagram, systemd's clock
    after_reload = notify.receive(10)
    assert after_reload is not None and after_reload.fields.get("READY") == "1", notify.received

    broker.send_signal(signal.SIGTERM)
    notify.wait_for("STOPPING", detail=broker.output)
    assert broker.process.wait(60) == 0
    assert notify.receive(0.2) is None, notify.received  # nothing after STOPPING=1


def test_watchdog_is_pinged_at_half_its_timeout(notify_socket, broker_process):
    """With WatchdogSec=0.8s systemd kills a service that is silent for 0.8 s: the idle
    supervisor loop (which used to sleep a whole second) must wake up for each ping."""
    notify = notify_socket()
    broker = broker_process()
    watchdog_usec = 800_000
    launch(broker, {"NOTIFY_SOCKET": notify.address, "WATCHDOG_USEC": str(watchdog_usec)}, watchdog_pid=True)
    ready = notify.wait_for("READY", detail=broker.output)
    assert ready.fields["MAINPID"] == str(broker.process.pid)  # the pid WATCHDOG_PID names
    pings = []
    end = time.monotonic() + 4.0
    while (left := end - time.monotonic()) > 0:
        notification = notify.receive(left)
        if notification is not None and notification.fields.get("WATCHDOG") == "1":
            pings.append(notification.at)
    gaps = [later - earlier for earlier, later in itertools.pairwise(pings)]
    assert len(pings) >= 5, pings
    assert max(gaps) < watchdog_usec / 1e6, f"a ping came too late for systemd: gaps {gaps}"
    broker.send_signal(signal.SIGTERM)
    assert broker.process.wait(60) == 0


def test_a_watchdog_meant_for_another_process_is_not_pinged(notify_socket, broker_process):
    """systemd sets WATCHDOG_PID; a broker started by a process that was given the
    watchdog (and that did not hand it on) must not answer for it."""
    notify = notify_socket()
    broker = broker_process()
    launch(broker, {"NOTIFY_SOCKET": notify.address, "WATCHDOG_USEC": "400000", "WATCHDOG_PID": "1"})
    notify.wait_for("READY", detail=broker.output)
    assert notify.receive(1.0) is None, notify.received
    broker.send_signal(signal.SIGTERM)
    assert broker.process.wait(60) == 0
