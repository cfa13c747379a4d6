"""``python -m bench.group_bench`` runs end to end (two real brokers, and Apache Kafka's two
where Kafka can run; confluent-kafka members in processes of their own) and writes its JSON
and table: every row once, commits for half a second, into a scratch directory
(``--results-dir``), so ``bench/results/group_bench.*`` stay as the last full run left them.
About 40 s a broker kind (a new group's first join waits the brokers' 3 s
``group.initial.rebalance.delay.ms``, a crash the 6 s session); one run, with Kafka where it
can run, since a ``--kafka`` run is mpbroker's round and Kafka's. It checks that the bench
works, not what it measures."""

import json
import os
import subprocess
import sys

import pytest

from mpbroker.testing import apache_kafka

pytest.importorskip("confluent_kafka")

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
REBALANCE_ROWS = ["first_join", "first_join_protocol", "second_join", "second_join_told", "second_join_rebalance",
                  "leave", "leave_told", "leave_rebalance", "crash", "first_join_delay0", "second_join_fast",
                  "leave_fast"]
COMMIT_ROWS = ["commit_sync", "commit_async", "commit_sync_x4"]


def run_bench(tmp_path, *options, timeout=300) -> tuple:
    run = subprocess.run(
        [sys.executable, "-m", "bench.group_bench", "--repeats", "1", "--commit-seconds", "0.5", *options,
         "--dir", str(tmp_path), "--results-dir", str(tmp_path / "results")],
        cwd=REPO, capture_output=True, text=True, timeout=timeout)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    with open(tmp_path / "results" / "group_bench.json") as f:
        record = json.load(f)
    with open(tmp_path / "results" / "group_bench.md") as f:
        table = f.read()
    return run, record, table


def check_rows(record: dict, brokers: list) -> dict:
    rows = {row["row"]: row for row in record["rows"]}
    assert list(rows) == REBALANCE_ROWS + COMMIT_ROWS
    for name, row in rows.items():
        for broker in brokers:
            assert len(row[broker]["runs"]) == 1, row
            if row["kind"] == "rate":
                assert row[broker]["median"] > 0 and row[broker]["best"] == row[broker]["median"], row
            elif name != "first_join_protocol":
                assert 0 <= row[broker]["median"] < 60, row
    for broker in brokers:
        rebalance = record["runs"][broker]["rebalance"][0]
        # the parts add up; a first join waits the 3 s initial delay; a crash is not noticed before the session ends
        assert abs(rebalance["second_join_told"] + rebalance["second_join_rebalance"] - rebalance["second_join"]) < 1e-6
        assert abs(rebalance["leave_told"] + rebalance["leave_rebalance"] - rebalance["leave"]) < 1e-6
        assert rebalance["first_join"] >= 2.9 and rebalance["crash"] > 2.9, rebalance
        assert sorted(p for part in rebalance["second_join_assignments"] for p in part) == list(range(6))
        assert rows["first_join_delay0"][broker]["median"] < 2.9
        commits = record["runs"][broker]["commits"][0]
        assert commits["commit_sync"]["p50_ms"] <= commits["commit_sync"]["p99_ms"]
        assert len(commits["commit_sync_x4"]["per_consumer_per_s"]) == 4
    return rows


@pytest.mark.slow
def test_one_round_writes_every_row(tmp_path):
    """One round of every row; with ``--kafka`` where Apache Kafka can run (its round
    includes mpbroker's whole round: a second, mpbroker-only run would repeat it), and
    mpbroker's median over Kafka's; ``--no-kafka`` elsewhere, without Kafka's columns."""
    kafka = apache_kafka.available()
    run, record, table = run_bench(tmp_path, "--kafka" if kafka else "--no-kafka", timeout=900 if kafka else 300)
    assert record["benchmark"] == "group_bench" and record["machine"]["cores"] >= 1
    assert record["command"].startswith("python -m bench.group_bench")
    assert record["settings"]["repeats"] == 1 and record["settings"]["kafka"] is kafka
    rows = check_rows(record, ["mpbroker", "kafka"] if kafka else ["mpbroker"])
    assert rows["commit_async"]["mpbroker"]["acceptor_cpu_us_per_commit"] > 0
    targets = record["targets"]
    assert isinstance(targets["settle_met"], bool) and isinstance(targets["commits_met"], bool)
    assert targets["commits_best"] == max(rows[row]["mpbroker"]["best"] for row in COMMIT_ROWS)
    for text in (run.stdout, table):
        assert "| first join of a lone member" in text and "| sync commits, one consumer" in text
        assert "10,000 commits/s on one coordinator" in text
    if kafka:
        for row in rows.values():
            assert abs(row["vs_kafka_median"] - row["mpbroker"]["median"] / row["kafka"]["median"]) < 1e-9, row
        assert record["versions"]["apache_kafka"] == apache_kafka.DEFAULT_VERSION
        assert "mpbroker/Kafka" in run.stdout
    else:
        assert "kafka" not in rows["commit_sync"] and "vs_kafka_median" not in rows["commit_sync"]
    assert os.listdir(tmp_path) == ["results"]  # the brokers' and members' files are gone
