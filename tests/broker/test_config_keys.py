"""Configuration keys as ``mpbroker serve`` takes them (issue 16): a configuration
written with the later Kafka names runs as the 0.7 keys say (broker id, log.dir,
ZooKeeper), and an unknown key refuses to start, with exit code 2 and one line naming
the file or override and the closest known key, unless ``--allow-unknown-keys``. A
reload meets the same refusal and keeps the running configuration."""

import os
import subprocess
import sys
import time

from kazoo.client import KazooClient

from mpbroker.control_client import NotRunning, call


def serve(config_path: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mpbroker", "serve", config_path, *args],
                          capture_output=True, text=True, timeout=60)


def refusal_line(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    lines = [line for line in result.stderr.splitlines() if "unknown configuration key" in line]
    assert len(lines) == 1, result.stderr
    return lines[0]


def test_a_typo_in_the_file_refuses_to_start_naming_the_file_and_the_key_meant(broker_factory):
    broker = broker_factory(start=False, **{"log.retention.hour": "24"})
    line = refusal_line(serve(broker.config_path))
    assert f"'log.retention.hour' in {broker.config_path} (did you mean 'log.retention.hours'?)" in line
    assert "--allow-unknown-keys" in line
    assert not os.path.exists(broker.log_dir)  # refused before anything was created


def test_an_unknown_override_refuses_to_start_too(broker_factory):
    broker = broker_factory(start=False)
    line = refusal_line(serve(broker.config_path, "--override", "zookeeper.conect=127.0.0.1:2181"))
    assert "'zookeeper.conect' in the --override options (did you mean 'zookeeper.connect'?)" in line


def test_allow_unknown_keys_starts_and_warns(broker_factory):
    broker = broker_factory(start=False, **{"log.retention.hour": "24"})
    with open(broker.output_path, "w") as output:
        process = subprocess.Popen([sys.executable, "-m", "mpbroker", "serve", broker.config_path,
                                    "--allow-unknown-keys"], stdout=output, stderr=subprocess.STDOUT,
                                   start_new_session=True)
    broker.process = process  # the fixture kills it if the test fails
    deadline = time.monotonic() + 30
    while True:
        assert process.poll() is None, broker.output()
        try:
            status = call(broker.socket_path, "status", timeout=2)
            if status["acceptor"]["state"] == "up":
                break
        except (NotRunning, OSError, ValueError):
            pass
        assert time.monotonic() < deadline, broker.output()
        time.sleep(0.05)
    assert (f"unknown configuration key 'log.retention.hour' in {broker.config_path} ignored "
            "(allow.unknown.keys is true)") in broker.output()
    # The flag is an override: a reload keeps it, so the same file reloads.
    reloaded = subprocess.run([sys.executable, "-m", "mpbroker.cli.ctl", "--log-dir", broker.log_dir, "reload"],
                              capture_output=True, text=True, timeout=60)
    assert reloaded.returncode == 0, reloaded.stderr
    assert broker.stop() == 0


def test_a_reload_with_an_unknown_key_keeps_the_running_configuration(broker):
    with open(broker.config_path, "a") as f:
        f.write("log.flush.intervall=5\n")
    result = subprocess.run([sys.executable, "-m", "mpbroker.cli.ctl", "-c", broker.config_path, "reload"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert "unknown configuration key 'log.flush.intervall'" in result.stderr
    assert "did you mean 'log.flush.interval'?" in result.stderr
    assert broker.status()["phase"] == "running"


def test_allowing_unknown_keys_in_the_file_takes_effect_on_reload_without_a_restart(broker):
    """allow.unknown.keys applies while the file is read: a reload that sets it (with an
    unknown key beside it) is applied, not reported as needing a restart."""
    with open(broker.config_path, "a") as f:
        f.write("allow.unknown.keys=true\nlog.flush.intervall=5\n")
    result = subprocess.run([sys.executable, "-m", "mpbroker.cli.ctl", "-c", broker.config_path, "reload"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "needs a restart" not in result.stdout, result.stdout


def test_a_later_kafka_configuration_runs_as_its_broker_id_in_its_log_dirs_with_zookeeper(broker_factory,
                                                                                          zk_connect):
    """The issue's case: broker.id, log.dirs and zookeeper.connect were warned about, and
    the broker ran as broker 0 in /tmp/kafka-logs without ZooKeeper."""
    broker = broker_factory(start=False)
    broker.properties.pop("log.dir")
    broker.properties.pop("log.flush.interval")
    broker.properties.update({"broker.id": "5", "log.dirs": broker.log_dir, "zookeeper.connect": zk_connect,
                              "zookeeper.session.timeout.ms": "4000", "enable.zookeeper": "true",
                              "log.flush.interval.messages": "10000"})
    broker.write_config()
    broker.start()
    status = broker.wait_until(lambda s: (s.get("zookeeper") or {}).get("registered"), what="the registration")
    assert (status["brokerid"], status["log_dir"]) == (5, broker.log_dir)
    hosts, _, chroot = zk_connect.partition("/")
    client = KazooClient(hosts=hosts)
    client.start(timeout=15)
    try:
        assert client.get_children(f"/{chroot}/brokers/ids") == ["5"]
    finally:
        client.stop()
        client.close()
    assert "ignored" not in broker.output()
