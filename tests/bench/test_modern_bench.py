"""``python -m bench.modern_bench`` runs end to end (a real broker, confluent-kafka and the
0.7 clients) and writes its JSON: every row at the smallest sizes, one run each, into a
scratch directory (``--results-dir``), so ``bench/results/modern_bench.*`` stay as the last
full run left them. A few seconds; it checks that the bench works, not what it measures.
The rdkafka_performance rows run where ``bench.rdkafka_perf`` can build the program (the
first time: up to a minute or two, then cached), and are skipped, saying why, elsewhere;
in the same run as Apache Kafka's rows where Kafka can run (a run with both holds every row
of a run with one of them, so one run checks both)."""

import json
import os
import subprocess
import sys

import pytest

from bench import rdkafka_perf
from mpbroker.testing import apache_kafka

pytest.importorskip("confluent_kafka")

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ROWS = ["modern_produce_acks1", "legacy_produce_b50_acked", "legacy_produce_b50_ff",
        "modern_fetch", "legacy_fetch", "modern_fetch_of_legacy", "modern_fetch_default_backoff"]
RDKAFKA_ROWS = ["modern_produce_acks1", "legacy_produce_b50_acked", "legacy_produce_b50_ff", "rdkafka_perf_produce",
                "modern_fetch", "legacy_fetch", "modern_fetch_of_legacy", "modern_fetch_default_backoff",
                "rdkafka_perf_fetch"]
BUILD_TIMEOUT_S = 900


def rdkafka_program() -> str | None:
    """rdkafka_performance's path (built now if need be), or None: the reason is then in ``why``."""
    try:
        return rdkafka_perf.program()
    except rdkafka_perf.Unavailable as error:
        rdkafka_program.why = str(error)
        return None


def quick_run(tmp_path, *flags, timeout=120) -> tuple[subprocess.CompletedProcess, dict]:
    run = subprocess.run(
        [sys.executable, "-m", "bench.modern_bench", "--quick", "--messages", "2000", "--repeats", "1", *flags,
         "--dir", str(tmp_path), "--results-dir", str(tmp_path / "results")],
        cwd=REPO, capture_output=True, text=True, timeout=timeout)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    with open(tmp_path / "results" / "modern_bench.json") as f:
        return run, json.load(f)


def test_quick_rows_write_every_figure(tmp_path):
    run, record = quick_run(tmp_path, "--no-kafka", "--no-rdkafka")
    assert (tmp_path / "results" / "modern_bench.md").exists()
    assert record["benchmark"] == "modern_bench" and record["machine"]["cores"] >= 1
    assert record["settings"]["quick"] is True and record["settings"]["messages"] == 2000
    assert [row["row"] for row in record["rows"]] == ROWS
    rows = {row["row"]: row for row in record["rows"]}
    for row in rows.values():
        assert len(row["runs"]) == 1 and row["best"] > 0 and row["median"] > 0, row
        assert row["runs"][0]["messages"] == 2000, row
        assert row["broker_cpu_s_per_million"] >= 0 and row["client_cpu_s_per_million"] >= 0, row
        if row["baseline"]:
            baseline = rows[row["baseline"]]
            assert abs(row["ratio"] - row["best"] / baseline["best"]) < 1e-9, row
    for name, target in record["targets"].items():
        assert rows[name]["target"] == target and isinstance(rows[name]["met"], bool)
    assert "| modern produce" in run.stdout and "| 0.7 fetch" in run.stdout
    assert record["rdkafka_performance"]["left_out"] == "--no-rdkafka"
    assert "rdkafka_performance rows, on which the modern fetch's target is judged, are left out" in run.stdout
    assert os.listdir(tmp_path) == ["results"]  # the broker's files are gone


@pytest.mark.slow
@pytest.mark.timeout(BUILD_TIMEOUT_S + 600)
def test_quick_rdkafka_performance_rows_and_apache_kafka(tmp_path):
    """The rows of librdkafka's rdkafka_performance (where it can be built): its produce
    beside confluent-kafka's, its fetch of the same modern-written topic, which the fetch
    target is judged on; and ``--kafka`` (where Apache Kafka can run): rows 1 and 4, and
    rdkafka_performance's, against Kafka too, and the mpbroker/Kafka ratios. One run for
    both: a ``--kafka --rdkafka`` run holds every row of a ``--no-kafka --rdkafka`` one."""
    rdkafka = rdkafka_program() is not None
    kafka = apache_kafka.available()
    if not rdkafka and not kafka:
        pytest.skip(f"rdkafka_performance cannot be built here ({rdkafka_program.why}) "
                    f"and Apache Kafka cannot run here ({apache_kafka.missing()})")
    run, record = quick_run(tmp_path, "--kafka" if kafka else "--no-kafka", "--rdkafka" if rdkafka else "--no-rdkafka",
                            timeout=600 if kafka else 120)
    rows = {row["row"]: row for row in record["rows"]}
    if rdkafka and kafka:
        assert list(rows) == RDKAFKA_ROWS[:4] + ["kafka_produce_acks1", "kafka_rdkafka_perf_produce"] + \
            RDKAFKA_ROWS[4:] + ["kafka_fetch", "kafka_rdkafka_perf_fetch"]
    elif rdkafka:
        assert list(rows) == RDKAFKA_ROWS
    else:
        assert list(rows) == ROWS[:3] + ["kafka_produce_acks1"] + ROWS[3:] + ["kafka_fetch"]
    if rdkafka:
        assert record["targets"] == {"modern_produce_acks1": 0.8, "rdkafka_perf_fetch": 0.8}
        for name, baseline in (("rdkafka_perf_produce", "legacy_produce_b50_acked"),
                               ("rdkafka_perf_fetch", "legacy_fetch")):
            row = rows[name]
            assert row["baseline"] == baseline and len(row["runs"]) == 1, row
            assert row["runs"][0]["messages"] == 2000 and row["best"] > 0 and row["client_cpu_s_per_million"] > 0, row
            assert row["runs"][0]["process_seconds"] >= row["runs"][0]["seconds"] > 0, row
            assert abs(row["ratio"] - row["best"] / rows[baseline]["best"]) < 1e-9, row
        assert isinstance(rows["rdkafka_perf_fetch"]["met"], bool)
        assert rows["modern_fetch"]["target"] is None and "met" not in rows["modern_fetch"]  # judged on rdkafka's row
        assert record["rdkafka_performance"]["librdkafka"] and record["rdkafka_performance"]["left_out"] is None
        assert record["versions"]["rdkafka_performance"]["librdkafka"] == record["rdkafka_performance"]["librdkafka"]
        assert "| modern fetch, rdkafka_performance -C" in run.stdout
        assert "judged on the rdkafka_performance row" in run.stdout
    if kafka:
        pairs = [("modern_produce_acks1", "kafka_produce_acks1"), ("modern_fetch", "kafka_fetch")]
        if rdkafka:
            pairs += [("rdkafka_perf_produce", "kafka_rdkafka_perf_produce"),
                      ("rdkafka_perf_fetch", "kafka_rdkafka_perf_fetch")]
        for mine, theirs in pairs:
            assert rows[theirs]["best"] > 0 and rows[theirs]["runs"][0]["messages"] == 2000
            assert abs(rows[mine]["vs_kafka"] - rows[mine]["best"] / rows[theirs]["best"]) < 1e-9
        assert record["versions"]["apache_kafka"] == apache_kafka.DEFAULT_VERSION
        assert "mpbroker/Kafka" in run.stdout
    assert os.listdir(tmp_path) == ["results"]  # the brokers' files are gone


def test_rdkafka_performance_summary_lines():
    """What ``bench.rdkafka_perf`` reads of the program's output: its last summary line,
    the seconds from its msg/s (microseconds behind it), not its whole milliseconds."""
    consumed = ("% 0 messages (0 bytes) consumed in 0ms: 0 msgs/s (0.00 MB/s)\n"
                "% 1000000 messages (200000000 bytes) consumed in 250ms: 4000000 msgs/s (800.00 MB/s)\n")
    assert rdkafka_perf.parse_consumed(consumed) == {"messages": 1000000, "bytes": 200000000, "seconds": 0.25}
    produced = ("% 1000 messages produced (200000 bytes), 1000 delivered (offset 209790, 0 failed) in 2ms: "
                "500000 msgs/s and 100.00 MB/s, 0 produce failures, 0 in queue, no compression\n")
    assert rdkafka_perf.parse_produced(produced) == {"messages": 1000, "produced": 1000, "bytes": 200000,
                                                     "delivered": 1000, "failed": 0, "seconds": 0.002}
    with pytest.raises(ValueError):
        rdkafka_perf.parse_consumed("% Sending 1000 messages of size 200 bytes\n")
