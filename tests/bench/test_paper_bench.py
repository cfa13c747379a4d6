"""``python -m bench.paper_bench`` runs end to end with Apache Kafka 4.4 as a column
beside mpbroker (a real mpbroker, a real Kafka node driven by confluent-kafka) at the
smallest sizes, into a scratch directory (``--dir``, ``--results-dir``), so
``bench/results/paper.*`` stay as the last full run left them: every Kafka run is in the
JSON, the comparison table has a Kafka column, the plot is drawn with Kafka's lines, and
nothing of either broker is left behind. Where Kafka cannot run (here: no java on the
PATH the benchmark sees) its column is left out, with the reason, and the run still
succeeds. About 30 s (Kafka's start: 10 s of it); it checks that the bench works, not what it measures. RabbitMQ
and ActiveMQ (Debian packages installed on demand, an hour at full size) are not run."""

import json
import os
import subprocess
import sys

import pytest

from bench.paper.kafka_runs import MODES as KAFKA_MODES
from tests.kafka.conftest import require_apache_kafka

matplotlib_image = pytest.importorskip("matplotlib.image")

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KAFKA_RED = (0xD6 / 255, 0x27 / 255, 0x28 / 255)  # matplotlib's tab:red, Kafka's colour in the plot
MESSAGES, ACKED_1_MESSAGES = 2000, 100


def run_bench(tmp_path, systems: str, *more, env=None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "bench.paper_bench", "--systems", systems, "--messages", str(MESSAGES),
         "--acked-1-messages", str(ACKED_1_MESSAGES), "--dir", str(tmp_path), "--results-dir",
         str(tmp_path / "results"), *more],
        cwd=REPO, capture_output=True, text=True, timeout=180, env=env)


def kafka_line_pixels(png) -> int:
    image = matplotlib_image.imread(str(png))[:, :, :3]
    close = (abs(image[:, :, 0] - KAFKA_RED[0]) < 0.02) & (abs(image[:, :, 1] - KAFKA_RED[1]) < 0.02) & \
        (abs(image[:, :, 2] - KAFKA_RED[2]) < 0.02)
    return int(close.sum())


def test_small_run_has_a_kafka_column_and_plot(tmp_path):
    require_apache_kafka()
    run = run_bench(tmp_path, "mpbroker,kafka")
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    with open(tmp_path / "results" / "paper.json") as f:
        record = json.load(f)
    runs = {(r["system"], r["mode"]): r for r in record["runs"]}
    for mode in [*KAFKA_MODES, "consume"]:
        kafka = runs[("kafka", mode)]
        expected = ACKED_1_MESSAGES if mode == "b1-ack" else MESSAGES
        assert kafka["messages"] == expected and kafka["messages_per_s"] > 0, kafka
        assert kafka["samples"][-1][0] == expected and len(kafka["samples"]) > 2, kafka
        assert ("mpbroker", mode) in runs
    # a 200-byte value in a batch of 50 takes at least its 200 bytes, and not twice that
    assert 200 <= runs[("kafka", "b50-ff")]["disk_bytes_per_message"] < 400
    assert record["versions"]["apache-kafka"] == "4.4.0" and record["settings"]["kafka"]["client"] == "confluent-kafka"
    assert record["failures"] == [] and record["left_out"] == []
    with open(tmp_path / "results" / "paper.md") as f:
        table = f.read()
    assert "| experiment" in table and "| kafka " in table.split("\n\n")[1], table[:2000]
    assert "| consume everything, one consumer" in table
    lines = table.splitlines()
    header = [cell.strip() for cell in next(line for line in lines if line.startswith("| experiment")).split("|")]
    disk = [cell.strip() for cell in next(line for line in lines if line.startswith("| disk bytes")).split("|")]
    assert float(disk[header.index("mpbroker")]) >= 200, disk
    assert float(disk[header.index("kafka")]) == runs[("kafka", "b50-ff")]["disk_bytes_per_message"], disk
    assert kafka_line_pixels(tmp_path / "results" / "paper.png") > 500
    assert sorted(os.listdir(tmp_path)) == ["results"]  # both brokers' directories are gone
    leftovers = [pid for pid in os.listdir("/proc") if pid.isdigit() and _cmdline_mentions(pid, str(tmp_path))]
    assert not leftovers, leftovers


def test_kafka_that_cannot_run_is_left_out_with_the_reason(tmp_path):
    env = {**os.environ, "PATH": os.path.dirname(sys.executable)}  # no java, no mvn
    run = run_bench(tmp_path, "mpbroker,kafka", "--modes", "b50-ff", env=env)  # mpbroker: one run and its read
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    assert "kafka left out: Apache Kafka cannot run here: no java on PATH" in run.stdout
    with open(tmp_path / "results" / "paper.json") as f:
        record = json.load(f)
    assert [(r["system"], r["mode"]) for r in record["runs"]] == [("mpbroker", "b50-ff"), ("mpbroker", "consume")]
    assert record["left_out"] == [{"system": "kafka", "reason": record["left_out"][0]["reason"]}]
    assert "no java on PATH" in record["left_out"][0]["reason"]
    with open(tmp_path / "results" / "paper.md") as f:
        table = f.read()
    assert "kafka" not in table.split("\n\n")[1] and "Left out: kafka: Apache Kafka cannot run here" in table
    assert kafka_line_pixels(tmp_path / "results" / "paper.png") == 0


def _cmdline_mentions(pid: str, text: str) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return text.encode() in f.read()
    except OSError:
        return False
