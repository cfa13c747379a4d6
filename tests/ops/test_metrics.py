"""The Prometheus endpoint (metrics.enable) against a real broker: the numbers it
serves are the broker's own (requests sent, bytes, partition sizes, flushes, restarts),
its counters survive respawns, it is off by default, a taken port is refused, it
listens on the broker's hostname unless told otherwise, and thousands of silent
connections cost it no threads while a scraper is answered."""

import gzip
import os
import resource
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families as openmetrics_families
from prometheus_client.parser import text_string_to_metric_families

from mpbroker.codec import requests as rq
from mpbroker.codec.message import encode_message_set
from tests.broker.harness import BrokerProcess
from tests.broker.wire import WireClient


@pytest.fixture
def metered(tmp_path):
    broker = BrokerProcess(tmp_path / "b", metrics_enable="true", metrics_port=0, metrics_host="127.0.0.1")
    broker.start()  # returns once the acceptor is up: the exporter may still be starting
    broker.wait_until(lambda status: status["metrics"]["state"] == "up", what="the metrics exporter")
    yield broker
    broker.close()


def metrics_port(broker) -> int:
    return broker.status()["metrics"]["port"]


def scrape(port: int) -> dict:
    """``{(sample name, sorted labels): value}`` of one scrape."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        assert answer.status == 200
        assert answer.headers["Content-Type"].startswith("text/plain")
        text = answer.read().decode()
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}


def value(samples: dict, name: str, **labels) -> float:
    return samples[(name, tuple(sorted(labels.items())))]


def test_the_endpoint_serves_the_brokers_own_numbers(metered):
    sets = {partition: encode_message_set([b"payload %d" % partition] * (partition + 2)) for partition in range(4)}
    frames_sent = 0
    with WireClient(metered.port) as client:
        for partition, message_set in sets.items():
            for _ in range(3):
                frame = rq.encode_produce_acked(1, "metered", partition, message_set)
                frames_sent += len(frame)
                client.send(frame)
                client.receive()
        fetched = client.fetch("metered", 0, 0)[1]
        client.offsets("metered", 1, -1)
        client.multifetch([("metered", 2, 0, 1 << 16), ("metered", 3, 0, 1 << 16)])
        client.produce("metered", 0, [b"fire and forget"])
    status = metered.wait_until(lambda s: next(p for p in s["partitions"] if p["partition"] == 0)["messages_in"] == 7,
                                what="the fire-and-forget produce")
    samples = scrape(metrics_port(metered))

    assert value(samples, "mpbroker_requests_total", type="produce_acked") == 12
    assert value(samples, "mpbroker_requests_total", type="fetch") == 1
    assert value(samples, "mpbroker_requests_total", type="offsets") == 1
    assert value(samples, "mpbroker_requests_total", type="multifetch") == 1
    assert value(samples, "mpbroker_requests_total", type="produce") == 1
    assert value(samples, "mpbroker_malformed_requests_total") == 0
    assert value(samples, "mpbroker_received_bytes_total") > frames_sent  # and the other requests
    assert value(samples, "mpbroker_sent_bytes_total") >= len(fetched) + sum(len(s) for s in sets.values())
    assert value(samples, "mpbroker_connections_accepted_total") == 1
    assert value(samples, "mpbroker_connections_open") == 0  # the client closed
    assert value(samples, "mpbroker_info", brokerid="0", version="0.1.0") == 1
    assert value(samples, "mpbroker_log_dir_free_bytes") > 0

    for row in status["partitions"]:
        key = {"topic": "metered", "partition": str(row["partition"])}
        assert value(samples, "mpbroker_partition_size_bytes", **key) == row["bytes"] > 0
        assert value(samples, "mpbroker_partition_log_end_offset", **key) == row["log_end"]
        assert value(samples, "mpbroker_partition_segments", **key) == row["segments"] == 1
        assert value(samples, "mpbroker_partition_messages_in_total", **key) == row["messages_in"]
        assert value(samples, "mpbroker_partition_last_flush_time_seconds", **key) > time.time() - 60
    assert value(samples, "mpbroker_partition_bytes_in_total", topic="metered", partition="3") == 3 * len(sets[3])

    # Every acknowledged produce asked for a flush: both workers flushed, and their
    # histograms are consistent (cumulative buckets, +Inf = count, a positive sum).
    for worker in ("0", "1"):
        count = value(samples, "mpbroker_flush_duration_seconds_count", worker=worker)
        assert count >= 1
        assert value(samples, "mpbroker_flush_duration_seconds_bucket", worker=worker, le="+Inf") == count
        assert value(samples, "mpbroker_flush_duration_seconds_sum", worker=worker) > 0
        assert value(samples, "mpbroker_flush_duration_seconds_bucket", worker=worker, le="0.0005") <= count
        assert value(samples, "mpbroker_flush_failures_total", worker=worker) == 0
    for process in ("worker 0", "worker 1", "acceptor", "metrics"):
        assert value(samples, "mpbroker_process_up", process=process) == 1
        assert value(samples, "mpbroker_process_restarts_total", process=process) == 0


def test_counters_survive_respawns_and_restarts_are_counted(metered):
    with WireClient(metered.port) as client:
        for _ in range(5):
            client.produce_acked("r", 0, encode_message_set([b"m"]))
    port = metrics_port(metered)
    before = scrape(port)
    status = metered.status()
    os.kill(status["workers"][0]["pid"], signal.SIGKILL)
    os.kill(status["acceptor"]["pid"], signal.SIGKILL)
    metered.wait_until(lambda s: s["workers"][0]["restarts"] == 1 and s["workers"][0]["state"] == "up"
                       and s["acceptor"]["restarts"] == 1 and s["acceptor"]["state"] == "up", what="respawns")
    os.kill(status["metrics"]["pid"], signal.SIGKILL)  # the exporter itself: back on the same port
    metered.wait_until(lambda s: s["metrics"]["restarts"] == 1 and s["metrics"]["state"] == "up",
                       what="the exporter's respawn")
    assert metrics_port(metered) == port
    after = scrape(port)
    for process in ("worker 0", "acceptor", "metrics"):
        assert value(after, "mpbroker_process_restarts_total", process=process) == 1
    assert value(after, "mpbroker_process_restarts_total", process="worker 1") == 0
    for name, labels in (("mpbroker_requests_total", {"type": "produce_acked"}),
                         ("mpbroker_received_bytes_total", {}), ("mpbroker_sent_bytes_total", {}),
                         ("mpbroker_flush_duration_seconds_count", {"worker": "0"})):
        assert value(after, name, **labels) >= value(before, name, **labels) > 0, name


def test_a_silent_scraper_does_not_block_the_others(metered):
    port = metrics_port(metered)
    idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(20)]
    try:
        started = time.monotonic()
        assert value(scrape(port), "mpbroker_process_up", process="acceptor") == 1
        assert time.monotonic() - started < 5
    finally:
        for sock in idle:
            sock.close()


def test_metrics_are_off_by_default(tmp_path):
    with BrokerProcess(tmp_path / "b") as broker:
        assert broker.status()["metrics"] is None
        result = subprocess.run([sys.executable, "-m", "mpbroker.cli.ctl", "-c", broker.config_path, "status"],
                                capture_output=True, text=True, timeout=30)
    assert result.returncode == 0 and "metrics:" not in result.stdout
    assert not any(line.startswith("metrics ") for line in result.stdout.splitlines())


def test_ctl_status_shows_the_endpoint(metered):  # the fixture waited for the exporter to be up
    result = subprocess.run([sys.executable, "-m", "mpbroker.cli.ctl", "-c", metered.config_path, "status"],
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stderr
    assert f"metrics: http://127.0.0.1:{metrics_port(metered)}/metrics" in result.stdout
    assert any(line.split()[:1] == ["metrics"] and " up " in line for line in result.stdout.splitlines())


def test_a_taken_metrics_port_refuses_to_start(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        broker = BrokerProcess(tmp_path / "b", metrics_enable="true", metrics_host="127.0.0.1", metrics_port=port)
        try:
            with pytest.raises(RuntimeError, match="exited with 1"):
                broker.start()
        finally:
            broker.close()
    assert f"cannot listen on 127.0.0.1:{port} (metrics.port)" in broker.output()


def test_the_endpoint_listens_on_the_brokers_hostname_by_default(tmp_path):
    with BrokerProcess(tmp_path / "b", metrics_enable="true", metrics_port=0) as broker:  # hostname=127.0.0.1
        status = broker.wait_until(lambda s: s["metrics"]["state"] == "up", what="the metrics exporter")
        port = status["metrics"]["port"]
        assert value(scrape(port), "mpbroker_process_up", process="metrics") == 1
        with pytest.raises(ConnectionRefusedError):  # another loopback address: not listened on
            socket.create_connection(("127.0.0.2", port), timeout=5).close()
        assert status["metrics"]["host"] == "127.0.0.1"
        result = subprocess.run([sys.executable, "-m", "mpbroker.cli.ctl", "-c", broker.config_path, "status"],
                                capture_output=True, text=True, timeout=30)
    assert f"metrics: http://127.0.0.1:{port}/metrics" in result.stdout


PROMETHEUS_HEADERS = {  # what Prometheus 2.x sends with each scrape
    "Accept": "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,"
              "text/plain;version=0.0.4;q=0.5,*/*;q=0.1",
    "Accept-Encoding": "gzip",
    "User-Agent": "Prometheus/2.45.0",
    "X-Prometheus-Scrape-Timeout-Seconds": "10",
}


def prometheus_scrape(port: int) -> dict:
    """A scrape as Prometheus makes it (OpenMetrics, gzip); ``{sample name: value}`` of unlabelled samples."""
    request = urllib.request.Request(f"http://127.0.0.1:{port}/metrics", headers=PROMETHEUS_HEADERS)
    with urllib.request.urlopen(request, timeout=10) as answer:
        assert answer.status == 200
        assert answer.headers["Content-Type"].startswith("application/openmetrics-text")
        assert answer.headers["Content-Encoding"] == "gzip"
        text = gzip.decompress(answer.read()).decode()
    return {sample.name: sample.value for family in openmetrics_families(text) for sample in family.samples
            if not sample.labels}


def thread_count(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("Threads:"))


SILENT_CONNECTIONS = 2000


def test_thousands_of_silent_connections_cost_no_threads(metered):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard < SILENT_CONNECTIONS + 200:
        pytest.skip(f"RLIMIT_NOFILE hard limit {hard} is too low")
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    status = metered.status()
    port, exporter = status["metrics"]["port"], status["metrics"]["pid"]
    threads_before = thread_count(exporter)
    silent = []
    try:
        for _ in range(SILENT_CONNECTIONS):
            silent.append(socket.create_connection(("127.0.0.1", port)))
        time.sleep(0.5)  # let the exporter accept them all
        started = time.monotonic()
        samples = prometheus_scrape(port)
        assert time.monotonic() - started < 5
        assert samples["mpbroker_log_dir_free_bytes"] > 0
        assert thread_count(exporter) <= threads_before <= 10, \
            f"{thread_count(exporter)} threads with {SILENT_CONNECTIONS} silent connections open"
        assert prometheus_scrape(port)["mpbroker_log_dir_free_bytes"] > 0  # and again
    finally:
        for sock in silent:
            sock.close()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert value(scrape(port), "mpbroker_process_restarts_total", process="metrics") == 0
