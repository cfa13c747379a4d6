"""The broker's life: start, status, graceful and fast stops (with and without the
clean-shutdown marker), reload on HUP, and mpbroker-ctl against a real broker."""

import json
import os
import signal
import stat
import subprocess
import sys
import time

from mpbroker.codec.message import encode_message_set
from mpbroker.segments.clean_shutdown import MARKER_NAME

from .wire import WireClient


def ctl(broker, *args):
    return subprocess.run([sys.executable, "-m", "mpbroker.cli.ctl", "-c", broker.config_path, *args],
                          capture_output=True, text=True, timeout=60)


def test_status_reports_processes_and_partitions(broker):
    with WireClient(broker.port) as client:
        for partition in range(4):
            client.produce_acked("st", partition, encode_message_set([b"m"] * (partition + 1)))
    result = ctl(broker, "status", "--json")
    assert result.returncode == 0, result.stderr
    status = json.loads(result.stdout)
    assert status["pid"] == broker.process.pid and status["uptime_s"] >= 0
    assert [w["slot"] for w in status["workers"]] == [0, 1]
    assert all(w["pid"] and w["restarts"] == 0 for w in status["workers"])
    rows = {(p["topic"], p["partition"]): p for p in status["partitions"]}
    assert set(rows) == {("st", n) for n in range(4)}
    for partition in range(4):
        row = rows[("st", partition)]
        size = len(encode_message_set([b"m"] * (partition + 1)))
        assert (row["log_end"], row["flushed_end"], row["segments"], row["bytes"]) == (size, size, 1, size)
        assert row["worker"] in (0, 1)
    assert sum(w["partitions"] for w in status["workers"]) == 4
    table = ctl(broker, "status")
    assert table.returncode == 0 and "worker 0" in table.stdout and "flushed_end" in table.stdout


def test_control_socket_is_private(broker):
    mode = stat.S_IMODE(os.stat(broker.socket_path).st_mode)
    assert mode == 0o600


def test_graceful_stop_leaves_the_marker_and_the_next_start_skips_recovery(broker):
    with WireClient(broker.port) as client:
        client.produce_acked("g", 0, encode_message_set([b"kept"]), durability=0)
    assert broker.stop(signal.SIGTERM) == 0
    assert os.path.exists(os.path.join(broker.log_dir, MARKER_NAME))
    assert not os.path.exists(broker.socket_path)
    broker.start()
    assert "clean shutdown, no recovery" in broker.output()
    assert not os.path.exists(os.path.join(broker.log_dir, MARKER_NAME))
    with WireClient(broker.port) as client:
        assert client.fetch("g", 0, 0) == (0, encode_message_set([b"kept"]))


def test_ctl_shutdown_waits_for_the_exit(broker):
    result = ctl(broker, "shutdown")
    assert result.returncode == 0, result.stderr
    assert "stopped" in result.stdout
    assert broker.process.poll() == 0
    assert os.path.exists(os.path.join(broker.log_dir, MARKER_NAME))
    again = ctl(broker, "status")
    assert again.returncode == 3 and "no broker is running" in again.stderr


def test_fast_stop_skips_the_flush_and_the_marker(broker):
    with WireClient(broker.port) as client:
        client.produce_acked("f", 0, encode_message_set([b"appended"]), durability=0)
    started = time.monotonic()
    assert broker.stop(signal.SIGINT) == 0
    assert time.monotonic() - started < 5
    assert not os.path.exists(os.path.join(broker.log_dir, MARKER_NAME))
    broker.start()
    assert "(recovered: " in broker.output()
    with WireClient(broker.port) as client:  # appended data was in the page cache: still there
        assert client.fetch("f", 0, 0) == (0, encode_message_set([b"appended"]))


def test_reload_changes_the_flush_interval_at_run_time(broker_factory):
    broker = broker_factory(log_default_flush_interval_ms=3_600_000, log_default_flush_scheduler_interval_ms=50)
    with WireClient(broker.port) as client:
        ack = client.produce_acked("r", 0, encode_message_set([b"waits"]), durability=0)
        time.sleep(0.3)
        assert client.fetch("r", 0, 0) == (0, b"")  # an hour-long flush interval: not visible
        broker.properties["log.default.flush.interval.ms"] = "20"
        broker.properties["port"] = "1"  # cannot change at run time: reported, not applied
        broker.write_config()
        broker.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 5
        while client.fetch("r", 0, 0) == (0, b""):
            assert time.monotonic() < deadline, "reload did not shorten the flush interval"
            time.sleep(0.05)
        assert client.fetch("r", 0, 0)[1] == encode_message_set([b"waits"])
        assert ack.next_offset == len(encode_message_set([b"waits"]))
    output = broker.output()
    assert "reloaded: log.default.flush.interval.ms" in output
    assert "port can only change with a restart" in output
    result = ctl(broker, "reload")
    assert result.returncode == 0 and "needs a restart: port" in result.stdout


def test_bad_reload_keeps_the_running_configuration(broker):
    with open(broker.config_path, "a") as f:
        f.write("log.flush.interval=lots\n")
    result = ctl(broker, "reload")
    assert result.returncode == 1 and "log.flush.interval" in result.stderr
    with WireClient(broker.port) as client:
        assert client.produce_acked("ok", 0, encode_message_set([b"still serving"])).error == 0


def test_bad_configuration_refuses_to_start(tmp_path):
    config = tmp_path / "bad.properties"
    config.write_text(f"log.dir={tmp_path}/logs\nnum.partitions=0\n")
    result = subprocess.run([sys.executable, "-m", "mpbroker", "serve", str(config)],
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 2
    assert "num.partitions: 0 is below the minimum 1" in result.stderr


def test_second_broker_on_the_same_log_dir_is_refused(broker, broker_factory):
    twin = broker_factory("twin", start=False)
    twin.properties["log.dir"] = broker.log_dir
    twin.write_config()
    result = subprocess.run([sys.executable, "-m", "mpbroker", "serve", twin.config_path],
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 1
    assert "another broker is using log.dir" in result.stderr


def test_worker_that_cannot_open_its_logs_stops_the_broker(broker_factory, tmp_path):
    broker = broker_factory(start=False)
    partition_dir = os.path.join(broker.log_dir, "t-0")
    os.makedirs(partition_dir)
    for base in (0, 5000):  # a gap between segments: refuse, do not guess
        with open(os.path.join(partition_dir, f"{base:020d}.kafka"), "wb") as f:
            f.write(encode_message_set([b"x"]))
    broker_process = subprocess.run([sys.executable, "-m", "mpbroker", "serve", broker.config_path],
                                    capture_output=True, text=True, timeout=60)
    assert broker_process.returncode == 1
    assert "missing, extra or damaged" in broker_process.stderr
    assert "could not open its logs; stopping the broker" in broker_process.stderr
