"""Socket activation: ops/mpbroker.socket verifies with the service, and a broker started
by ``systemd-socket-activate`` (the same LISTEN_FDS protocol systemd uses) serves on the
socket it was given, including the connection that started it."""

import os
import shutil
import subprocess
import sys
import time

import pytest

from mpbroker.codec.message import encode_message_set
from mpbroker.testing.local_zookeeper import free_port
from tests.broker.harness import BrokerProcess
from tests.broker.wire import WireClient
from tests.ops.conftest import UNIT

SOCKET_UNIT = os.path.join(os.path.dirname(UNIT), "mpbroker.socket")


def test_the_socket_unit_verifies_with_the_service(local_unit, tmp_path):
    (tmp_path / "mpbroker.service").write_text(local_unit)
    shutil.copy(SOCKET_UNIT, tmp_path / "mpbroker.socket")
    result = subprocess.run(["systemd-analyze", "verify", str(tmp_path / "mpbroker.socket"),
                             str(tmp_path / "mpbroker.service")], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and "mpbroker." not in result.stdout + result.stderr, result.stdout + result.stderr
    with open(SOCKET_UNIT) as f:
        assert "ListenStream=9092" in f.read()  # the default `port`


@pytest.fixture
def activated(tmp_path):
    launcher = shutil.which("systemd-socket-activate")
    assert launcher, "systemd-socket-activate is missing (tests/run.sh installs systemd)"
    broker = BrokerProcess(tmp_path / "b", port=0)  # `port` is not used: the socket comes from the launcher
    port = free_port()
    with open(broker.output_path, "a") as output:
        broker.process = subprocess.Popen(
            [launcher, "-l", f"127.0.0.1:{port}", sys.executable, "-m", "mpbroker", "serve", broker.config_path],
            stdout=output, stderr=subprocess.STDOUT, start_new_session=True)
    yield broker, port
    broker.close()


def test_a_broker_serves_on_the_socket_it_was_passed(activated):
    broker, port = activated
    message_set = encode_message_set([b"first", b"second"])
    # The launcher listens; the first connection starts the broker and waits in the backlog.
    deadline = time.monotonic() + 15
    while True:
        try:
            client = WireClient(port, timeout=30)
            break
        except ConnectionRefusedError:
            assert time.monotonic() < deadline, "systemd-socket-activate did not listen"
            time.sleep(0.05)
    with client:
        ack = client.produce_acked("activated", 0, message_set)
        assert ack.next_offset == len(message_set)
        assert client.fetch("activated", 0, 0) == (0, message_set)
    status = broker.status()
    assert status["port"] == port and status["pid"] == broker.process.pid  # the launcher exec'd the broker
    assert "using the listening socket passed by systemd" in broker.output()
    assert broker.stop() == 0
