"""What the Spark loader's tests share: the ``spark`` fixture (one ``local[2]`` session per
test module that imports it), producing acknowledged messages with their offsets, reading
the Parquet output and the loader's state back, and running ``mpbroker-spark-load`` as a
process (with its process group killed at the end, whatever it started)."""

import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import NamedTuple

import pyarrow.dataset as ds
import pytest

from mpbroker.cli.spark_load import spark_session
from mpbroker.clients import Producer, SimpleConsumer
from mpbroker.clients.core.zk_registry import read_topic_partitions
from mpbroker.codec.message import V1_OVERHEAD
from mpbroker.registry.zk_client import ZooKeeperUnavailable, close_client, start_client
from mpbroker.spark_loader.job import CRASH_ENV, LoadOptions, run_load
from tests.polling import wait_for

REPO = Path(__file__).resolve().parents[2]
HOST = "127.0.0.1"
CLI_TIMEOUT_S = 240
CLI_DURATIONS = []  # wall time of the complete CLI loads run so far (JVM start included)


@pytest.fixture(scope="module")
def spark():
    session = spark_session("local[2]")
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


class Sent(NamedTuple):
    topic: str
    broker: int
    partition: int
    offset: int  # where the message starts in the log (a compressed wrapper's start for its messages)
    payload: bytes


def broker_list(*brokers) -> str:
    return ",".join(f"{b.properties['brokerid']}:{HOST}:{b.port}" for b in brokers)


def produce(brokers: str, topic: str, count: int, *, first: int = 0, batch: int = 10, codec: str = "") -> list:
    """``count`` messages of varying sizes to ``topic``, ``batch`` per key (one message set,
    one partition each; keys spread the sets over the partitions); acknowledged after the
    flush. Returns what was sent, with the offsets the broker acknowledged."""
    rng = random.Random(f"{topic}/{first}")
    options = {"compression_codec": codec} if codec else {}
    sent = []
    with Producer(broker_list=brokers, acks="flush", **options) as producer:
        for start in range(first, first + count, batch):
            payloads = [f"{topic}#{n}#".encode() + rng.randbytes(rng.randrange(0, 40))
                        for n in range(start, min(start + batch, first + count))]
            (result,) = producer.send(topic, payloads, key=f"key-{start}".encode())
            assert result.messages == len(payloads)
            offset = result.offset
            for payload in payloads:
                sent.append(Sent(topic, result.broker_id, result.partition, offset, payload))
                if not codec:
                    offset += V1_OVERHEAD + len(payload)
            if not codec:
                assert offset == result.next_offset, "the offsets computed for the set end where the broker said"
    return sent


def log_ends(port: int, topic: str, partitions: int) -> list:
    with SimpleConsumer(HOST, port) as consumer:
        return [consumer.latest_offset(topic, p) for p in range(partitions)]


def earliest_offsets(port: int, topic: str, partitions: int) -> list:
    with SimpleConsumer(HOST, port) as consumer:
        return [consumer.earliest_offset(topic, p) for p in range(partitions)]


def read_output(output) -> list:
    """Every row visible in the output, as (Sent, load_id); [] when there is no file yet."""
    output = Path(output)
    files = [p for p in output.rglob("*.parquet")
             if not any(part.startswith(("_", ".")) for part in p.relative_to(output).parts)]
    if not files:
        return []
    table = ds.dataset(str(output), format="parquet", partitioning="hive").to_table()
    return [(Sent(row["topic"], row["broker"], row["partition"], row["offset"], row["payload"]), row["load_id"])
            for row in table.to_pylist()]


def assert_exactly_once(output, expected) -> list:
    """The output holds each message of ``expected`` once and nothing else; returns the rows."""
    rows = read_output(output)
    counts = Counter(sent for sent, _ in rows)
    repeated = {sent: n for sent, n in counts.items() if n > 1}
    assert not repeated, f"{len(repeated)} messages loaded more than once, e.g. {next(iter(repeated.items()))}"
    missing = set(expected) - set(counts)
    extra = set(counts) - set(expected)
    assert not missing, f"{len(missing)} of {len(set(expected))} messages not loaded, e.g. {min(missing)}"
    assert not extra, f"{len(extra)} rows that were never produced, e.g. {min(extra)}"
    assert len(rows) == len(set(expected))
    return rows


def load_dirs(output) -> set:
    """(topic, load_id) of every load directory in the output."""
    return {(path.parent.parent.name.removeprefix("topic="), path.name.removeprefix("load_id="))
            for path in Path(output).glob("topic=*/load_date=*/load_id=*")}


def read_state(output) -> dict:
    path = Path(output, "_mpbroker", "state.json")
    return json.loads(path.read_text()) if path.exists() else {}


def staged(output) -> list:
    """The files still in the staging area."""
    return [p for p in Path(output, "_mpbroker", "staging").rglob("*") if p.is_file()]


def staging_dirs(output) -> set:
    staging = Path(output, "_mpbroker", "staging")
    return {path.name for path in staging.iterdir()} if staging.is_dir() else set()


def phase_reached(output, log_text: str, earlier: set, summaries: set) -> str:
    """How far a killed load got, judged from what it left (for the failure message)."""
    if set(saved_summaries(output)) - summaries:
        return "finished" if " msg/s" in log_text else "load done, Spark stopping"
    if read_state(output).get("moving"):
        return "committed, files not moved"
    if staging_dirs(output) - earlier:
        return "writing files, not committed"
    if "with new data" in log_text:
        return "planned"
    return "starting"


def saved_summaries(output) -> dict:
    return {p.stem: json.loads(p.read_text()) for p in Path(output, "_mpbroker", "loads").glob("*.json")}


def load(spark, output, brokers: str = "", topics=(), **options) -> dict:
    return run_load(spark, LoadOptions(output=str(output), topics=list(topics), broker_list=brokers, **options))


def cli_command(*args) -> list:
    return [sys.executable, "-m", "mpbroker.cli.spark_load", *map(str, args)]


def cli_env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYSPARK_GATEWAY") and k != CRASH_ENV}
    env.update(extra)
    return env


class CliResult(NamedTuple):
    returncode: int
    stdout: str
    stderr: str
    seconds: float


def run_cli(*args, env=None, timeout=CLI_TIMEOUT_S) -> CliResult:
    started = time.monotonic()
    done = subprocess.run(cli_command(*args), capture_output=True, text=True, cwd=REPO, env=env or cli_env(),
                          timeout=timeout)
    seconds = time.monotonic() - started
    if done.returncode in (0, 17):  # a whole load (17: crashed at its end)
        CLI_DURATIONS.append(seconds)
    return CliResult(done.returncode, done.stdout, done.stderr, seconds)


def start_cli(*args, log_path, env=None) -> subprocess.Popen:
    """The CLI in a process group of its own (its Spark JVM included), output to a file."""
    with open(log_path, "w") as log:
        return subprocess.Popen(cli_command(*args), stdout=log, stderr=subprocess.STDOUT, cwd=REPO,
                                env=env or cli_env(), start_new_session=True)


def _process_groups_below(pid: int) -> set:
    """The process groups of ``pid``'s descendants (PySpark's daemon makes a group of its own)."""
    children = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = Path("/proc", entry, "stat").read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            children.setdefault(int(fields[1]), []).append((int(entry), int(fields[2])))  # ppid -> (pid, pgid)
    groups, todo = set(), [pid]
    while todo:
        for child, group in children.get(todo.pop(), []):
            groups.add(group)
            todo.append(child)
    return groups


def _group_alive(group: int) -> bool:
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        return False
    return True


def kill_group(process: subprocess.Popen) -> None:
    """SIGKILL the CLI and its process group (the Spark JVM with it). The Python workers
    are in a group of their own (PySpark's daemon): they see the JVM go and end by
    themselves, perhaps after finishing a file; wait for that (SIGKILL them after 30 s),
    so that nothing of the killed load is still running when the next one starts."""
    groups = _process_groups_below(process.pid) | {process.pid}
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait(30)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and any(map(_group_alive, groups)):
        time.sleep(0.05)
    for group in filter(_group_alive, groups):
        os.killpg(group, signal.SIGKILL)


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]


def check_partition_offsets(rows) -> None:
    """Per (topic, broker, partition): the first message at offset 0, offsets strictly increasing."""
    by_partition = {}
    for sent, _ in rows:
        by_partition.setdefault((sent.topic, sent.broker, sent.partition), []).append(sent.offset)
    for key, offsets in by_partition.items():
        offsets.sort()
        assert offsets[0] == 0, f"{key}: the first message is at {offsets[0]}"
        assert all(a < b for a, b in zip(offsets, offsets[1:])), f"{key}: offsets repeat"


def first_end(summary, partition):
    (part,) = [p for p in summary["partitions"] if p["partition"] == partition]
    return part["end"]


def wait_registered(zk_connect: str, topics, broker_ids: set) -> None:
    client = wait_for(lambda: try_start_client(zk_connect), 30, "a ZooKeeper session")
    try:
        for topic in topics:
            wait_for(lambda topic=topic: {p.broker_id for p in read_topic_partitions(client, topic)} == broker_ids,
                     20, f"{topic} registered by brokers {broker_ids}")
    finally:
        close_client(client)


def try_start_client(zk_connect):
    try:
        return start_client(zk_connect, 6000, 5000)
    except ZooKeeperUnavailable:
        return None
