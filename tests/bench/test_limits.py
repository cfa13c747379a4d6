"""``python -m bench.limits`` runs end to end (a real broker, the baseline servers, real
sockets) and writes its JSON: two of its rows at the smallest sizes, into a scratch
directory (``--results-dir``), so ``bench/results/limits.*`` stay as the last full run
left them. A few seconds; it checks that the bench works, not what it measures."""

import json
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ROWS = ("acked_round_trip", "fetch_1mib")


def test_quick_rows_write_every_figure(tmp_path):
    run = subprocess.run(
        [sys.executable, "-m", "bench.limits", "--quick", "--only", *ROWS, "--repeats", "1", "--round-trips", "300",
         "--fetch-mb", "4", "--dir", str(tmp_path), "--results-dir", str(tmp_path / "results")],
        cwd=REPO, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    with open(tmp_path / "results" / "limits.json") as f:
        record = json.load(f)
    assert (tmp_path / "results" / "limits.md").exists()
    assert record["benchmark"] == "limits" and record["machine"]["cores"] >= 1
    assert record["settings"]["quick"] is True and record["settings"]["only"] == list(ROWS)
    assert [row["path"] for row in record["rows"]] == list(ROWS)
    for row in record["rows"]:
        assert row["measured"] > 0 and row["baseline"] > 0, row
        assert abs(row["ratio"] - row["measured"] / row["baseline"]) < 1e-9, row
        assert row["target"] == record["targets"][row["path"]] and isinstance(row["met"], bool), row
        assert len(row["runs"]) == len(row["baseline_runs"]) == 1, row
    round_trip = record["rows"][0]
    assert len(round_trip["broker_cpu_us_runs"]) == 1 and round_trip["broker_cpu_us_per_round_trip"] >= 0, round_trip
    assert "CPU per round trip" in run.stdout
    assert "| acked_round_trip" in run.stdout and "| fetch_1mib" in run.stdout
    assert os.listdir(tmp_path) == ["results"]  # the brokers' and baselines' files are gone
