"""The README's "Install as a service" lines, run as written into a scratch root: the
paths under /opt, /etc and /var moved there, ``sudo`` dropped, the mpbroker user replaced by
the one running the test, ``localhost:2181`` by a real ZooKeeper of the test's own. What a
scratch root cannot do is done the way systemd and cron would: ``useradd`` and ``apt-get``
are skipped (their package names are checked), ``systemd-analyze verify`` checks the copied
unit with its paths moved too, and ``systemctl enable --now`` starts the unit's ExecStart
(read from the copied unit) in the background with systemd's environment and working
directory; the one line the test adds to the installed configuration is ``port=`` (a free
port instead of 9092).

Checked: the venv has mpbroker, pyspark and pyarrow, installed from a clean copy (no
``.venv``, nothing imported from the checkout); the configuration has log.dir, brokerid and
zk.connect set; the directories exist, owned by the service's user; the broker started from
ExecStart keeps its data in /var/lib/mpbroker and registers under the /mpbroker chroot it
creates; the status line answers; the cron line of ops/mpbroker-spark-load.cron, run as cron
runs it (``/bin/sh -c``, its PATH and SHELL, the user's HOME as working directory), loads
what was produced into Parquet and logs the JSON summary. Then the upgrade: the same lines
again keep the operator's configuration (whose own log.dir the broker then uses) and cron file.

The pip step is quick when pip's cache holds pyspark (it does on a machine that ran
tests/run.sh); on an empty cache it downloads and builds pyspark, hence the long timeout.
The installed code is the checkout's HEAD (``git archive``), as an operator's would be."""

import configparser
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.dataset as ds
import pytest
from kazoo.client import KazooClient

from mpbroker.clients import Producer
from mpbroker.config.properties import parse_properties
from mpbroker.control_client import NotRunning, call
from mpbroker.testing.local_zookeeper import free_port
from tests.readme.readme_blocks import REPO, block, commands, under

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"  # a root shell's, and systemd's
CRON = REPO / "ops" / "mpbroker-spark-load.cron"
TOPIC = "installed"
MESSAGES = [f"message {n} from the installed broker".encode() for n in range(40)]


class Install:
    """The install lines run into ``root``; the broker ``systemctl`` would have started."""

    def __init__(self, root: Path, zk_hosts: str):
        self.root = root
        self.zk_hosts = zk_hosts
        self.port = free_port()
        self.broker = None
        self.packages = set()
        self.timings = {}
        self.status_output = ""
        self.env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")}
        self.env["PATH"] = SYSTEM_PATH  # python3 is the system's, not this test's venv

    def path(self, system_path: str) -> Path:
        return Path(under(self.root, system_path))

    def rewrite(self, command: str) -> str:
        command = under(self.root, command).replace("localhost:2181", self.zk_hosts)
        command = command.replace("-o mpbroker -g mpbroker", f"-o {os.getuid()} -g {os.getgid()}")
        return re.sub(r"\bsudo (-u mpbroker )?", "", command)

    def run_block(self) -> None:
        for line in commands(block("install-as-a-service")):
            if "apt-get install" in line:
                self.packages.update(w for w in line.split("apt-get install", 1)[1].split("#")[0].split()
                                     if not w.startswith("-"))
                continue
            if "useradd" in line:
                continue
            command = self.rewrite(line)
            started = time.monotonic()
            if command.startswith("systemd-analyze verify"):
                self.verify(shlex.split(command, comments=True)[-1])
            elif "systemctl" in command:
                assert "systemctl enable --now mpbroker" in command, command
                self.start_broker()
            elif "mpbroker-ctl" in command:
                result = self.sh(command, timeout=60)
                self.status_output = result.stdout
            else:
                self.sh(command, timeout=600)
            key = Path(command.split()[0]).name
            self.timings[key] = self.timings.get(key, 0) + time.monotonic() - started

    def sh(self, command: str, timeout: float) -> subprocess.CompletedProcess:
        result = subprocess.run(["bash", "-o", "pipefail", "-c", command], cwd=REPO, env=self.env,
                                capture_output=True, text=True, timeout=timeout)
        assert result.returncode == 0, f"{command}\nexit {result.returncode}\n{result.stdout}\n{result.stderr}"
        return result

    def verify(self, unit: str) -> None:
        """``systemd-analyze verify`` on the installed unit, its paths moved into the root too."""
        copy = self.root / "verify" / Path(unit).name
        copy.parent.mkdir(exist_ok=True)
        copy.write_text(under(self.root, Path(unit).read_text()))
        result = subprocess.run(["systemd-analyze", "verify", str(copy)], capture_output=True, text=True, timeout=60)
        assert result.returncode == 0 and "mpbroker" not in result.stdout + result.stderr, \
            result.stdout + result.stderr

    def config(self) -> dict:
        return parse_properties(self.path("/etc/mpbroker/server.properties").read_text())

    def exec_start(self) -> list:
        parser = configparser.ConfigParser(strict=False, interpolation=None)
        parser.optionxform = str
        parser.read_string(self.path("/etc/systemd/system/mpbroker.service").read_text())
        return shlex.split(under(self.root, parser["Service"]["ExecStart"]))

    def start_broker(self) -> None:
        config = self.path("/etc/mpbroker/server.properties")
        if "port" not in self.config():  # what the test adds: free ports, not 9092 and 9093
            with open(config, "a") as f:
                f.write(f"port={self.port}\nkafka.port=0\n")
        log_dir = Path(self.config().get("log.dir", "/tmp/kafka-logs"))
        assert log_dir.is_relative_to(self.root), f"log.dir={log_dir}: not set by the install lines"
        with open(self.root / "broker.log", "a") as output:
            self.broker = subprocess.Popen(
                self.exec_start(), stdout=output, stderr=subprocess.STDOUT, cwd="/", start_new_session=True,
                env={"PATH": SYSTEM_PATH, "LANG": "C.UTF-8", "HOME": str(self.path("/var/lib/mpbroker"))})
        deadline = time.monotonic() + 60
        while True:
            assert self.broker.poll() is None, f"the broker exited with {self.broker.returncode}: {self.broker_log()}"
            try:  # READY=1, what `systemctl start` waits for ("ready" in the status; before it, the acceptor up)
                status = call(str(log_dir / "mpbroker.sock"), "status", timeout=2)
                if status.get("ready") or status.get("acceptor", {}).get("state") == "up":
                    return
            except (NotRunning, OSError, ValueError):
                pass
            assert time.monotonic() < deadline, f"the broker was not ready in 60 s: {self.broker_log()}"
            time.sleep(0.1)

    def stop_broker(self) -> int:
        self.broker.send_signal(signal.SIGTERM)
        code = self.broker.wait(90)
        self.broker = None
        return code

    def broker_log(self) -> str:
        return (self.root / "broker.log").read_text()

    def kill(self) -> None:
        if self.broker is not None and self.broker.poll() is None:
            os.killpg(self.broker.pid, signal.SIGKILL)
            self.broker.wait(10)


@pytest.fixture
def install(tmp_path, zookeeper_factory):
    zk = zookeeper_factory("zk")
    root = tmp_path / "root"
    for directory in ("etc/systemd/system", "etc/cron.d"):  # what systemd and cron (apt-get) make
        (root / directory).mkdir(parents=True)
    installed = Install(root, zk.hosts)
    yield installed
    installed.kill()
    shutil.rmtree(root / "opt", ignore_errors=True)  # the venv: hundreds of MB


def cron_job(root: Path, rewrite) -> tuple:
    """The cron file's environment lines and the command of its one job, rewritten."""
    env, jobs = {}, []
    for line in CRON.read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        name, sep, value = line.partition("=")
        if sep and re.fullmatch(r"[A-Z_]+", name.strip()):
            env[name.strip()] = value.strip()
            continue
        fields = line.split(None, 6)  # minute hour day month weekday user command
        assert len(fields) == 7 and fields[5] == "mpbroker", line
        jobs.append(rewrite(fields[6]))
    assert len(jobs) == 1, jobs
    return env, jobs[0]


def summary_in(log: str) -> dict:
    """The last JSON object of the log (the loader prints its summary last)."""
    starts = [m.start() for m in re.finditer(r"^\{$", log, re.MULTILINE)]
    assert starts, log[-3000:]
    return json.JSONDecoder().raw_decode(log[starts[-1]:])[0]


def test_the_install_lines_work_as_written(install):
    root = install.root
    zk = KazooClient(hosts=install.zk_hosts)
    zk.start(timeout=15)
    try:
        assert zk.exists("/mpbroker") is None
        started = time.monotonic()
        install.run_block()
        first_install_s = time.monotonic() - started
        first_timings = dict(install.timings)

        # apt-get: the Java the Spark load needs, venv support, cron.
        assert {"python3-venv", "openjdk-17-jre-headless", "cron"} <= install.packages

        # The venv: mpbroker, pyspark and pyarrow installed in it, nothing from the checkout.
        venv = install.path("/opt/mpbroker/venv")
        assert not install.path("/opt/mpbroker/.venv").exists()
        assert not (install.path("/opt/mpbroker/src") / ".venv").exists()
        probe = subprocess.run(
            [str(venv / "bin/python"), "-c",
             ("import json, mpbroker, mpbroker.clients as clients, mpbroker.spark_loader as spark_loader, pyspark, "
              "pyarrow; print(json.dumps([m.__file__ for m in (mpbroker, clients, spark_loader, pyspark, pyarrow)]))")],
            cwd=root, env=install.env, capture_output=True, text=True, timeout=120)
        assert probe.returncode == 0, probe.stderr
        for module_file in json.loads(probe.stdout):
            assert module_file.startswith(str(venv / "lib")), module_file
        site = next((venv / "lib").glob("python3*/site-packages"))
        for pth in site.glob("*.pth"):
            assert str(REPO) not in pth.read_text(), f"{pth} points into the checkout"
        (dist_info,) = site.glob("mpbroker-*.dist-info")
        direct_url = dist_info / "direct_url.json"
        assert not direct_url.exists() or not json.loads(direct_url.read_text()).get("dir_info", {}).get("editable")

        # The configuration and the directories.
        config = install.config()
        data = install.path("/var/lib/mpbroker")
        assert config["log.dir"] == str(data)
        assert config["brokerid"] == "1" and config["enable.zookeeper"] == "true"
        assert config["zk.connect"] == install.zk_hosts + "/mpbroker"
        for directory in ("/var/lib/mpbroker", "/var/lib/mpbroker-parquet", "/var/log/mpbroker"):
            stat = install.path(directory).stat()
            assert (stat.st_uid, stat.st_gid, stat.st_mode & 0o777) == (os.getuid(), os.getgid(), 0o750), directory

        # The broker systemctl started: data in /var/lib/mpbroker, registered under the chroot it made.
        assert (data / ".lock").exists() and (data / "mpbroker.sock").exists()
        deadline = time.monotonic() + 30
        while zk.exists("/mpbroker/brokers/ids/1") is None:
            assert time.monotonic() < deadline, f"not registered in ZooKeeper: {install.broker_log()}"
            time.sleep(0.1)
        assert str(install.port) in install.status_output, install.status_output
        with Producer(broker_list=f"127.0.0.1:{install.port}", acks="flush") as producer:
            producer.send(TOPIC, MESSAGES)
        deadline = time.monotonic() + 30
        while zk.exists(f"/mpbroker/brokers/topics/{TOPIC}/1") is None:
            assert time.monotonic() < deadline, "the topic was not registered in ZooKeeper"
            time.sleep(0.1)

        # The cron job, as cron runs it: /bin/sh -c, the file's SHELL and PATH, HOME as working directory.
        cron_env, job = cron_job(root, install.rewrite)
        home = data  # the mpbroker user's home (useradd --home-dir)
        home_before = sorted(os.listdir(home))
        started = time.monotonic()
        load = subprocess.run([cron_env.get("SHELL", "/bin/sh"), "-c", job], cwd=home, capture_output=True,
                              text=True, timeout=400,
                              env={**cron_env, "HOME": str(home), "LOGNAME": "mpbroker", "LANG": "C.UTF-8"})
        cron_s = time.monotonic() - started
        log = install.path("/var/log/mpbroker/spark-load.log").read_text()
        assert load.returncode == 0, f"exit {load.returncode}\n{load.stdout}{load.stderr}\n{log[-5000:]}"
        summary = summary_in(log)
        assert summary["messages"] == len(MESSAGES) and summary["gaps"] == [], summary
        assert "[Stage " not in log, log[-3000:]  # no console progress bar in a log file
        output = install.path("/var/lib/mpbroker-parquet")
        assert list(output.rglob("*.parquet"))
        table = ds.dataset(str(output), format="parquet", partitioning="hive").to_table()
        assert sorted(table.column("payload").to_pylist()) == sorted(MESSAGES)
        assert sorted(os.listdir(home)) == home_before  # nothing of Spark's (spark-warehouse...) in log.dir
        assert install.stop_broker() == 0, install.broker_log()

        # The upgrade: the same lines again keep the operator's configuration and cron file.
        own_log_dir = root / "srv" / "mpbroker"
        config_file = install.path("/etc/mpbroker/server.properties")
        cron_file = install.path("/etc/cron.d/mpbroker-spark-load")
        with open(config_file, "a") as f:
            f.write(f"log.dir={own_log_dir}\n")
        with open(cron_file, "a") as f:
            f.write("# the operator's topics\n")
        before = config_file.read_text(), cron_file.read_text()
        started = time.monotonic()
        install.run_block()
        upgrade_s = time.monotonic() - started
        assert (config_file.read_text(), cron_file.read_text()) == before
        assert (own_log_dir / ".lock").exists(), install.broker_log()  # the file's log.dir, no unit default
        assert install.stop_broker() == 0, install.broker_log()
    finally:
        zk.stop()
        zk.close()
    print(f"\ninstall {first_install_s:.1f}s (steps: "
          + ", ".join(f"{k} {v:.1f}s" for k, v in first_timings.items())
          + f"), cron load {cron_s:.1f}s, upgrade re-run {upgrade_s:.1f}s", file=sys.stderr)
