"""``python -m bench.kafka_compare`` runs end to end (a real mpbroker and a real Apache
Kafka 4.4, one after the other, and librdkafka's rdkafka_performance against both) and
writes its JSON: every row (librdkafka's and Kafka's own perf tools, and the end-to-end
latency rows: half a second at each rate) at the smallest sizes, one run each, into a scratch directory
(``--results-dir``), so ``bench/results/kafka_compare.*`` stay as the last full run left
them. Two cases: the one-node rows (``--no-cluster``, with half a second of the latency
rows at each rate: about 30 s) and the three-node RF 3
rows alone (``--no-one-node``: a ZooKeeper and three mpbroker brokers, then three Kafka
JVMs; about 45 s). They check that the bench works, not what it measures. Skipped, saying
why, where Kafka cannot run (no Java 17 or Maven), rdkafka_performance cannot be built,
or (the cluster case) ZooKeeper is not installed."""

import json
import os
import subprocess
import sys

import pytest

from bench import rdkafka_perf
from mpbroker.testing import apache_kafka
from mpbroker.testing.local_zookeeper import ZOOKEEPER_JAR
from tests.kafka.conftest import require_apache_kafka

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CLUSTER_ROWS = ["rf3_produce_acksall", "rf3_consume", "cpu_rf3_produce_acksall", "rf3_startup_s"]
ROWS = ["produce_acks0", "produce_acks1", "produce_acksall", "consume", "tools_produce_acks0", "tools_produce_acks1",
        "tools_produce_acksall", "tools_produce_p99_ms", "tools_consume", "latency_p50_1k", "latency_p99_1k", "latency_p999_1k", "latency_p50_10k", "latency_p99_10k",
        "latency_p999_10k", "cpu_produce_acks1", "cpu_produce_acksall", "cpu_consume", "rss_rest_mib", "pss_rest_mib",
        "rss_load_mib", "pss_load_mib", "startup_s", "disk_bytes_per_message"]


def quick_run(tmp_path, *options) -> tuple:
    """``kafka_compare --quick`` with ``options`` into ``tmp_path``: (the process, its JSON)."""
    run = subprocess.run(
        [sys.executable, "-m", "bench.kafka_compare", "--quick", "--messages", "2000", "--warmup", "200", *options,
         "--dir", str(tmp_path), "--results-dir", str(tmp_path / "results")],
        cwd=REPO, capture_output=True, text=True, timeout=240)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    with open(tmp_path / "results" / "kafka_compare.json") as f:
        return run, json.load(f)


def require_rdkafka_performance() -> None:
    try:
        rdkafka_perf.program()
    except rdkafka_perf.Unavailable as error:
        pytest.skip(f"rdkafka_performance cannot be built here: {str(error)[:500]}")


def assert_ratios(rows: list) -> None:
    for row in rows:
        if row["row"].startswith(("cpu_", "tools_produce_p99")) and min(row["mpbroker"], row["kafka"]) == 0:
            continue  # a latency may round to 0 ms, a small run's CPU to 0 ticks; then no ratio
        assert row["mpbroker"] > 0 and row["kafka"] > 0, row
        expected = row["mpbroker"] / row["kafka"] if row["higher_is_better"] else row["kafka"] / row["mpbroker"]
        assert abs(row["ratio"] - expected) < 1e-9, row


def test_quick_run_writes_every_row_for_both_brokers(tmp_path):
    require_apache_kafka()
    try:
        apache_kafka.fetch_tools()
    except apache_kafka.MavenCentralUnreachable as error:
        pytest.skip(f"Maven Central does not answer (kafka-tools): {str(error)[:500]}")
    require_rdkafka_performance()
    run, record = quick_run(tmp_path, "--no-cluster", "--latency-seconds", "0.5")
    assert (tmp_path / "results" / "kafka_compare.md").exists()
    assert record["benchmark"] == "kafka_compare" and record["settings"]["runs"] == 1
    assert record["settings"]["replication_factor"] == 1 and "no fsync" in record["settings"]["flush"]
    assert [row["row"] for row in record["rows"]] == ROWS
    assert record["cluster_left_out"] == "--no-cluster" and record["cluster_runs"] == {}
    assert_ratios(record["rows"])
    rows = {row["row"]: row for row in record["rows"]}
    # a 200-byte value takes at least 200 bytes on disk in either; a JVM is not smaller than 64 MiB
    assert rows["disk_bytes_per_message"]["mpbroker"] >= 200 and rows["disk_bytes_per_message"]["kafka"] >= 200
    assert rows["rss_rest_mib"]["kafka"] > 64
    # shared pages counted once: never more than summed RSS (a process tree's forks share much)
    assert 0 < rows["pss_rest_mib"]["mpbroker"] <= rows["rss_rest_mib"]["mpbroker"]
    for broker in ("mpbroker", "kafka"):  # every message sent arrived (else the run fails), in order of size
        for rate in ("1k", "10k"):
            assert rows[f"latency_p50_{rate}"][broker] <= rows[f"latency_p99_{rate}"][broker] \
                <= rows[f"latency_p999_{rate}"][broker], (broker, rate)
            measured = record["runs"][broker][0]["latency"][rate]
            assert measured["received"] >= measured["sent"] > 0 and measured["count"] > 0, measured
    assert record["settings"]["latency_seconds"] == 0.5
    assert not any(run["process_left"] for broker in record["runs"].values() for run in broker)
    assert "| produce, rdkafka_performance, acks=all" in run.stdout and "Settings on both" in run.stdout
    assert os.listdir(tmp_path) == ["results"]  # both brokers' files are gone


def test_quick_cluster_run_writes_the_rf3_rows_for_both_clusters(tmp_path):
    require_apache_kafka()
    require_rdkafka_performance()
    if not os.path.exists(ZOOKEEPER_JAR):
        pytest.skip(f"{ZOOKEEPER_JAR} is missing: mpbroker's cluster needs ZooKeeper")
    run, record = quick_run(tmp_path, "--no-one-node", "--no-kafka-tools")
    assert [row["row"] for row in record["rows"]] == CLUSTER_ROWS
    assert_ratios(record["rows"])
    assert record["cluster_settings"]["replication_factor"] == 3
    assert record["cluster_settings"]["min_insync_replicas"] == 2
    assert record["runs"] == {"mpbroker": [], "kafka": []} and record["cluster_left_out"] is None
    for broker, runs in record["cluster_runs"].items():
        (only,) = runs
        assert not only["process_left"] and only["leader"] in (1, 2, 3), only
        # every process of the cluster counted (mpbroker: three brokers' and ZooKeeper's), and by role
        processes, roles = only["cluster_cpu_s"]["by_process"], only["cluster_cpu_s"]["by_role"]
        expected = ({"node 1", "node 2", "node 3"} if broker == "kafka" else
                    {"zookeeper", *(f"b{node} {role}" for node in (1, 2, 3)
                                    for role in ("supervisor", "acceptor", "registrar", "worker 0"))})
        assert expected <= set(processes), processes
        assert set(roles) == ({"leader JVM", "followers JVM"} if broker == "kafka" else
                              {"zookeeper", *(f"{part} {role}" for part in ("leader", "followers")
                                              for role in ("supervisor", "acceptor", "registrar", "worker"))}), roles
        assert abs(sum(roles.values()) - sum(processes.values())) < 0.01, (roles, processes)
    assert "| 3 nodes, RF 3: produce, rdkafka_performance, acks=all" in run.stdout
    assert "mpbroker's cluster is three brokers and a ZooKeeper" in run.stdout
    assert os.listdir(tmp_path) == ["results"]  # both clusters' files are gone
