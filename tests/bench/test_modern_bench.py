"""``python -m bench.modern_bench`` runs end to end (a real broker, confluent-kafka and the
0.7 clients) and writes its JSON: every row at the smallest sizes, one run each, into a
scratch directory (``--results-dir``), so ``bench/results/modern_bench.*`` stay as the last
full run left them. A few seconds; it checks that the bench works, not what it measures."""

import json
import os
import subprocess
import sys

import pytest

from mpbroker.testing import apache_kafka

pytest.importorskip("confluent_kafka")

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ROWS = ["modern_produce_acks1", "legacy_produce_b50_acked", "legacy_produce_b50_ff",
        "modern_fetch", "legacy_fetch", "modern_fetch_of_legacy", "modern_fetch_default_backoff"]


def test_quick_rows_write_every_figure(tmp_path):
    run = subprocess.run(
        [sys.executable, "-m", "bench.modern_bench", "--quick", "--messages", "2000", "--repeats", "1", "--no-kafka",
         "--dir", str(tmp_path), "--results-dir", str(tmp_path / "results")],
        cwd=REPO, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    with open(tmp_path / "results" / "modern_bench.json") as f:
        record = json.load(f)
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
    assert os.listdir(tmp_path) == ["results"]  # the broker's files are gone


@pytest.mark.slow
@pytest.mark.skipif(not apache_kafka.available(), reason=f"Apache Kafka cannot run here: {apache_kafka.missing()}")
def test_quick_rows_with_apache_kafka(tmp_path):
    """``--kafka``: rows 1 and 4 against Apache Kafka too, and the mpbroker/Kafka ratios."""
    run = subprocess.run(
        [sys.executable, "-m", "bench.modern_bench", "--quick", "--messages", "2000", "--repeats", "1", "--kafka",
         "--dir", str(tmp_path), "--results-dir", str(tmp_path / "results")],
        cwd=REPO, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    with open(tmp_path / "results" / "modern_bench.json") as f:
        record = json.load(f)
    rows = {row["row"]: row for row in record["rows"]}
    assert list(rows) == ROWS[:3] + ["kafka_produce_acks1"] + ROWS[3:] + ["kafka_fetch"]
    for mine, kafka in (("modern_produce_acks1", "kafka_produce_acks1"), ("modern_fetch", "kafka_fetch")):
        assert rows[kafka]["best"] > 0 and rows[kafka]["runs"][0]["messages"] == 2000
        assert abs(rows[mine]["vs_kafka"] - rows[mine]["best"] / rows[kafka]["best"]) < 1e-9
    assert record["versions"]["apache_kafka"] == apache_kafka.DEFAULT_VERSION
    assert "mpbroker/Kafka" in run.stdout
    assert os.listdir(tmp_path) == ["results"]  # both brokers' files are gone
