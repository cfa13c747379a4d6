"""``python -m bench.spark_source_bench`` runs end to end (a real broker, Spark on
local[2], every row of its table: the source streaming and batch, the segment files read
by Spark, the loader, the noop sinks) on a few thousand messages, into a scratch results
directory, so ``bench/results/spark_source.*`` stay as the last full run left them. It
checks that the bench works and that each row read every message, not what it measures."""

import json
import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.timeout(600)
def test_one_small_round_writes_every_row(tmp_path):
    run = subprocess.run(
        [sys.executable, "-m", "bench.spark_source_bench", "--messages", "20000", "--rounds", "1", "--warmup", "0",
         "--dir", str(tmp_path), "--results-dir", str(tmp_path / "results")],
        cwd=REPO, capture_output=True, text=True, timeout=540)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    with open(tmp_path / "results" / "spark_source.json") as f:
        record = json.load(f)
    assert record["messages"] == 20000 and record["rounds"] == 1
    assert len(record["rows_per_s"]) == 6 and all(rate > 0 for rate in record["rows_per_s"].values())
    assert "| source, streaming availableNow -> Parquet" in run.stdout and "vs limit" in run.stdout
