"""The README's "With ZooKeeper" lines on the configuration Debian 12's zookeeper package
ships (/etc/zookeeper/conf, and /var/lib/zookeeper/myid, a link to /etc/zookeeper/conf/myid),
copied into a scratch root. The lines are run as written with the paths moved there and
``sudo`` dropped; ``systemctl restart zookeeper`` starts the server the way zookeeperd's
init script does (QuorumPeerMain on /etc/zookeeper/conf/zoo.cfg; the test gives it a free
client port instead of 2181), and ``zkServer.sh status`` is asked about that configuration.
Then the broker line, run as written against that server (plus a scratch log.dir and a free
port), creates the /mpbroker chroot and registers under it.

The myid line is what lets the server start at all once dataDir is /var/lib/zookeeper: the
first test shows the package's placeholder text stopping it."""

import os
import re
import shlex
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from mpbroker.testing.local_zookeeper import ZOOKEEPER_JAR, free_port
from tests.readme.readme_blocks import REPO, block, commands, under

PACKAGE_CONF = Path("/etc/zookeeper/conf")  # Debian's alternative, /etc/zookeeper/conf_example


class Debian:
    """A scratch copy of the zookeeper package's configuration and data directory."""

    def __init__(self, tmp_path: Path):
        assert (PACKAGE_CONF / "zoo.cfg").exists() and os.path.exists(ZOOKEEPER_JAR), \
            "Debian's zookeeper package is missing (tests/run.sh installs it)"
        self.root = tmp_path / "root"
        self.conf = Path(under(self.root, "/etc/zookeeper/conf"))
        shutil.copytree(PACKAGE_CONF.resolve(), self.conf)
        data = Path(under(self.root, "/var/lib/zookeeper"))
        data.mkdir(parents=True)
        (data / "myid").symlink_to(self.conf / "myid")  # as the package ships it (dpkg -c zookeeper_*.deb)
        self.port = free_port()
        self.server = None

    def run(self, line: str) -> subprocess.CompletedProcess:
        command = re.sub(r"\bsudo ", "", under(self.root, line))
        return subprocess.run(["bash", "-o", "pipefail", "-c", command], cwd=REPO, capture_output=True,
                              text=True, timeout=60)

    def recipe(self, skip: str = "", wait: float = 3.0):
        """The recipe's lines up to ``systemctl restart``, which starts the server; returns
        (exit code, output) when the server stopped within ``wait`` seconds, else None."""
        for line in commands(block("zookeeper-service")):
            if "apt-get install" in line:
                assert "zookeeperd" in line.split()  # the package with the service, not just the jars
            elif "systemctl restart zookeeper" in line:
                return self.start_server(wait)
            elif skip and skip in line:
                continue
            elif "zkServer.sh status" not in line:
                result = self.run(line)
                assert result.returncode == 0, f"{line}\n{result.stdout}{result.stderr}"
        raise AssertionError("the recipe never starts the server")

    def start_server(self, wait: float):
        cfg = self.conf / "zoo.cfg"
        cfg.write_text(re.sub(r"(?m)^clientPort=.*$", f"clientPort={self.port}", cfg.read_text()))
        data_dir = re.search(r"(?m)^dataDir=(.*)$", cfg.read_text()).group(1)
        assert data_dir == under(self.root, "/var/lib/zookeeper"), f"dataDir={data_dir}"  # never the real /tmp
        out = self.root / "zookeeper.out"
        with open(out, "w") as output:
            self.server = subprocess.Popen(  # zookeeperd's /etc/init.d/zookeeper, in the foreground
                ["java", "-cp", f"{self.conf}:{ZOOKEEPER_JAR}", "-Dzookeeper.admin.enableServer=false",
                 f"-Dzookeeper.log.dir={self.root}", "org.apache.zookeeper.server.quorum.QuorumPeerMain", str(cfg)],
                stdout=output, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            return self.server.wait(wait), out.read_text()
        except subprocess.TimeoutExpired:
            return None

    def status(self) -> subprocess.CompletedProcess:
        (line,) = [line for line in commands(block("zookeeper-service")) if "zkServer.sh status" in line]
        command = shlex.split(line, comments=True) + [str(self.conf / "zoo.cfg")]  # the scratch configuration
        deadline = time.monotonic() + 30
        while True:
            result = subprocess.run(command, capture_output=True, text=True, timeout=60)
            if result.returncode == 0 or time.monotonic() > deadline:
                return result
            time.sleep(0.5)

    def stop(self) -> None:
        if self.server is not None and self.server.poll() is None:
            os.killpg(self.server.pid, signal.SIGKILL)
            self.server.wait(10)


@pytest.fixture
def debian(tmp_path):
    scratch = Debian(tmp_path)
    yield scratch
    scratch.stop()


def test_without_a_myid_the_package_placeholder_stops_the_server(debian):
    stopped = debian.recipe(skip="/etc/zookeeper/conf/myid", wait=60)
    assert stopped is not None, "the server started with the placeholder myid"
    code, output = stopped
    assert code != 0 and "Invalid config" in output, output


def test_the_zookeeper_recipe_serves_and_the_broker_creates_its_chroot(debian, tmp_path):
    assert debian.recipe() is None, "the server stopped"  # dataDir checked before it starts
    status = debian.status()
    assert status.returncode == 0 and "Mode: standalone" in status.stdout, status.stdout + status.stderr
    assert os.listdir(under(debian.root, "/var/lib/zookeeper/version-2"))  # the data is kept there

    zk = KazooClient(hosts=f"127.0.0.1:{debian.port}")
    zk.start(timeout=15)
    (line,) = commands(block("zookeeper-broker"))
    command = line.replace("localhost:2181", f"127.0.0.1:{debian.port}")
    command += f" --override log.dir={tmp_path / 'logs'} --override port=0 --override kafka.port=0"  # not 9092
    with open(tmp_path / "broker.log", "w") as output:
        broker = subprocess.Popen(["bash", "-c", f"exec {command}"], cwd=REPO, stdout=output,
                                  stderr=subprocess.STDOUT, start_new_session=True)
    try:
        assert zk.exists("/mpbroker") is None
        deadline = time.monotonic() + 30
        while zk.exists("/mpbroker/brokers/ids/1") is None:
            assert broker.poll() is None and time.monotonic() < deadline, (tmp_path / "broker.log").read_text()
            time.sleep(0.1)
        broker.send_signal(signal.SIGTERM)
        assert broker.wait(60) == 0, (tmp_path / "broker.log").read_text()
    finally:
        if broker.poll() is None:
            os.killpg(broker.pid, signal.SIGKILL)
            broker.wait(10)
        zk.stop()
        zk.close()
