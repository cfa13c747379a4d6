"""``mpbroker-ctl`` finding a broker started with overrides (issue 16): a real
``mpbroker serve CONFIG --override log.dir=...`` process tree, and the ctl console
script / ``python -m mpbroker.cli.ctl`` run as the README runs them: -c with the same
--override (before or after the command), --log-dir, --socket, no options at all, and
``groups`` with the broker's own zk.connect, its messages labelled ``mpbroker-ctl groups:``."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from kazoo.client import KazooClient

from mpbroker.control_client import NotRunning, call

BIN = os.path.dirname(sys.executable)


def ctl(*args, module: bool = False) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "mpbroker.cli.ctl"] if module else [os.path.join(BIN, "mpbroker-ctl")]
    return subprocess.run([*command, *map(str, args)], capture_output=True, text=True, timeout=60)


class ServedBroker:
    """``mpbroker serve CONFIG --override log.dir=LOGS ...``: the configuration file points
    at another log.dir, so only the override says where the control socket is."""

    def __init__(self, directory, *overrides: str):
        self.directory = str(directory)
        os.makedirs(self.directory, exist_ok=True)
        self.file_log_dir = os.path.join(self.directory, "file-logs")
        self.log_dir = os.path.join(self.directory, "logs")
        self.socket = os.path.join(self.log_dir, "mpbroker.sock")
        self.config = os.path.join(self.directory, "server.properties")
        with open(self.config, "w") as f:
            f.write(f"hostname=127.0.0.1\nport=0\nkafka.port=0\nnum.workers=1\nlog.dir={self.file_log_dir}\n")
        self.output_path = os.path.join(self.directory, "broker.log")
        with open(self.output_path, "w") as output:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "mpbroker", "serve", self.config, "--override", f"log.dir={self.log_dir}",
                 *(part for override in overrides for part in ("--override", override))],
                stdout=output, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 30
        while True:
            assert self.process.poll() is None, self.output()
            try:
                if call(self.socket, "status", timeout=2)["acceptor"]["state"] == "up":
                    break
            except (NotRunning, OSError, ValueError):
                pass
            assert time.monotonic() < deadline, f"the broker did not come up:\n{self.output()}"
            time.sleep(0.05)

    def output(self) -> str:
        with open(self.output_path) as f:
            return f.read()

    def close(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(10)


@pytest.fixture
def served(tmp_path):
    brokers = []

    def make(name: str = "broker", *overrides: str) -> ServedBroker:
        broker = ServedBroker(tmp_path / name, *overrides)
        brokers.append(broker)
        return broker

    yield make
    for broker in brokers:
        broker.close()


def test_the_configuration_alone_misses_the_overridden_socket_and_says_how_to_point_ctl(served):
    broker = served()
    result = ctl("-c", broker.config, "status")
    assert result.returncode == 3, result.stderr
    lines = result.stderr.splitlines()
    assert lines[0] == f"mpbroker-ctl: no broker is running: {broker.file_log_dir}/mpbroker.sock does not exist"
    assert f"the socket in log.dir {broker.file_log_dir} from {broker.config}" in lines[1]
    assert any(line.startswith("mpbroker-ctl: running on this machine: ") and broker.socket in line
               for line in lines), result.stderr
    assert "--log-dir DIR" in lines[-1] and "--socket PATH" in lines[-1] and "--override KEY=VALUE" in lines[-1]


def test_every_way_of_naming_the_broker_reaches_it_and_shutdown_waits(served):
    broker = served()
    forms = [
        ("-c", broker.config, "--override", f"log.dir={broker.log_dir}", "status", "--json"),
        ("-c", broker.config, "status", "--json", "--override", f"log.dir={broker.log_dir}"),
        ("status", "--json", "-c", broker.config, "-o", f"log.dir={broker.log_dir}"),
        ("-c", broker.config, "-o", "port=0", "status", "--json", "-o", f"log.dir={broker.log_dir}"),
        ("--log-dir", broker.log_dir, "status", "--json"),
        ("status", "--json", "--log-dir", broker.log_dir),
        ("-c", broker.config, "--log-dir", broker.log_dir, "status", "--json"),
        ("--socket", broker.socket, "status", "--json"),
        ("status", "--json", "--socket", broker.socket),
        ("--override", f"log.dirs={broker.log_dir}", "status", "--json"),  # Kafka 0.8's name
    ]
    for number, form in enumerate(forms):
        result = ctl(*form, module=number % 2 == 1)
        assert result.returncode == 0, (form, result.stderr)
        status = json.loads(result.stdout)
        assert (status["pid"], status["log_dir"]) == (broker.process.pid, broker.log_dir), form
    reloaded = ctl("reload", "-c", broker.config, "--override", f"log.dir={broker.log_dir}")
    assert reloaded.returncode == 0 and reloaded.stdout.startswith("applied: "), reloaded.stderr
    stopped = ctl("shutdown", "--log-dir", broker.log_dir)
    assert stopped.returncode == 0 and "stopped" in stopped.stdout, stopped.stderr
    assert broker.process.wait(10) == 0


def test_without_options_several_running_brokers_are_listed_not_guessed(served):
    """With one broker running, ctl uses it (tests/ops/test_readme_ctl.py runs that in a
    network namespace of its own); with several it names them and exits 2."""
    first, second = served("first"), served("second")
    result = ctl("status")
    assert result.returncode == 2, result.stdout
    assert result.stderr.startswith("mpbroker-ctl: ") and "brokers are running on this machine" in result.stderr
    assert first.socket in result.stderr and second.socket in result.stderr
    assert "--socket PATH" in result.stderr


def test_a_broker_that_was_killed_is_reported_with_the_same_help(served):
    broker = served()
    broker.close()  # SIGKILL: the socket file stays behind
    result = ctl("--log-dir", broker.log_dir, "status")
    assert result.returncode == 3
    assert f"nothing answers on {broker.socket} (stale socket)" in result.stderr
    assert f"the socket in log.dir {broker.log_dir} from --log-dir" in result.stderr
    listed = [line for line in result.stderr.splitlines() if "running on this machine:" in line]
    assert all(broker.socket not in line for line in listed), result.stderr  # (other brokers may be listed)


def test_bad_options_exit_2(served, tmp_path):
    assert ctl("-o", "no-equals-sign", "status").returncode == 2
    missing = ctl("-c", tmp_path / "absent.properties", "status")
    assert missing.returncode == 2 and "cannot read configuration file" in missing.stderr
    several = ctl("--override", "log.dirs=/a,/b", "status")
    assert several.returncode == 2 and "log.dirs: '/a,/b' names 2 directories" in several.stderr


# --- groups ------------------------------------------------------------------------

def test_groups_asks_the_running_broker_for_its_zookeeper(served, zk_connect):
    """The issue's case: the broker had --override zk.connect=... (here without
    enable.zookeeper, so no registrar: the status carries the broker's zk.connect)."""
    hosts, _, chroot = zk_connect.partition("/")
    client = KazooClient(hosts=hosts)
    client.start(timeout=15)
    try:
        client.ensure_path(f"/{chroot}/consumers/loaders/ids")
    finally:
        client.stop()
        client.close()
    broker = served("broker", f"zk.connect={zk_connect}")
    from_broker = ctl("--log-dir", broker.log_dir, "groups", "--json")
    assert from_broker.returncode == 0, from_broker.stderr
    assert [group["group"] for group in json.loads(from_broker.stdout)["groups"]] == ["loaders"]
    from_options = ctl("groups", "--json", "-c", broker.config, "--override", f"zk.connect={zk_connect}")
    assert from_options.returncode == 0 and json.loads(from_options.stdout) == json.loads(from_broker.stdout)
    described = ctl("groups", "--group", "loaders", "--socket", broker.socket, module=True)
    assert described.returncode == 0 and described.stdout.startswith("group loaders: 0 members"), described.stderr

    unknown = ctl("--log-dir", broker.log_dir, "groups", "--group", "nobody")
    assert unknown.returncode == 1
    assert unknown.stderr.startswith("mpbroker-ctl groups: no consumer group 'nobody'"), unknown.stderr
    illegal = ctl("--log-dir", broker.log_dir, "groups", "--group", "a/b")
    assert illegal.returncode == 2
    assert illegal.stderr.startswith("mpbroker-ctl groups: illegal consumer group 'a/b'"), illegal.stderr
    assert "mpbroker-groups" not in unknown.stderr + illegal.stderr


def test_groups_without_a_zookeeper_anywhere_says_so(served):
    broker = served()
    result = ctl("-c", broker.config, "groups")  # no zk.connect, and no broker in the file's log.dir
    assert result.returncode == 2
    assert result.stderr.startswith(f"mpbroker-ctl groups: zk.connect is empty in {broker.config}, and no broker "
                                    f"to ask for its own: no broker is running: {broker.file_log_dir}/mpbroker.sock")
    assert "--override zk.connect=HOST:PORT" in result.stderr
    asked = ctl("groups", "--log-dir", broker.log_dir)  # the broker answers: it has no zk.connect either
    assert asked.returncode == 2
    assert f"the broker at {broker.socket} does not use ZooKeeper" in asked.stderr


def test_waiting_for_the_exit_waits_for_the_process_not_only_its_socket(tmp_path):
    """The control socket is removed a moment before the supervisor exits: a shutdown
    that judged by the socket alone said "stopped" while the broker still ran (seen as a
    flaky test_ctl_shutdown_waits_for_the_exit)."""
    from mpbroker.cli.ctl import _wait_for_exit

    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.5)"])
    try:
        assert _wait_for_exit(process.pid, str(tmp_path / "no-such-socket"), timeout=10)
        # the child exited (a zombie until reaped here): nothing left running
        assert process.wait(timeout=0.2) == 0
    finally:
        process.kill()
        process.wait()
