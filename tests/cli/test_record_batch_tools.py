"""mpbroker's own 0.7 tools on topics written by modern producers (record batches,
produced here with confluent-kafka): ``mpbroker-console-consumer`` in both modes
(values; keys, headers and timestamps with --print-key, --print-headers,
--print-timestamp), and ``mpbroker-groups`` (lag in bytes and messages) with a group
that committed offsets inside a batch and resumes there."""

import json
import os
import subprocess
import sys

import pytest
from kazoo.client import KazooClient

from mpbroker.clients.groups.report import describe_group
from mpbroker.registry import layout
from tests.clients.helpers import wait_for
from tests.clients.modern import produce_modern, records, wait_readable

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GROUPS_SCRIPT = os.path.join(os.path.dirname(sys.executable), "mpbroker-groups")


def console_consumer(*args, timeout=30):
    return subprocess.run([sys.executable, "-m", "mpbroker.cli.console_consumer", *args], capture_output=True,
                          timeout=timeout, cwd=REPO)


@pytest.mark.parametrize("compression", ["none", "gzip", "zstd"])
def test_console_consumer_prints_what_a_modern_producer_wrote(broker, compression):
    topic = f"modern-{compression}"
    sent = records(topic, 500)
    produce_modern(broker, topic, sent, compression=compression)
    wait_readable(broker.port, topic, len(sent))
    brokers = f"1:127.0.0.1:{broker.port}"
    plain = console_consumer("--broker-list", brokers, "--topic", topic, "--partition", "0", "--from-beginning",
                             "--timeout-ms", "500")
    assert plain.returncode == 0, plain.stderr
    assert plain.stdout.splitlines() == [v for _, v, _ in sent]

    full = console_consumer("--broker-list", brokers, "--topic", topic, "--partition", "0", "--from-beginning",
                            "--timeout-ms", "500", "--print-offset", "--print-timestamp", "--print-headers",
                            "--print-key")
    assert full.returncode == 0, full.stderr
    lines = [line.split(b"\t") for line in full.stdout.splitlines()]
    assert [fields[-1] for fields in lines] == [v for _, v, _ in sent]
    assert [fields[-2] for fields in lines] == [b"null" if k is None else k for k, _, _ in sent]
    assert [fields[-3] for fields in lines] == [
        b",".join(b"%s:%s" % (hk.encode(), b"null" if hv is None else hv) for hk, hv in h) if h else b"NO_HEADERS"
        for _, _, h in sent]
    assert all(fields[1].startswith(b"timestamp=") and int(fields[1][10:]) > 0 for fields in lines)
    offsets = [tuple(int(part.split(b"=")[1]) for part in fields[0].split()) for fields in lines]
    assert all(next_offset == offset + 1 for offset, next_offset in offsets)

    # --offset with a printed offset (inside a batch) reads from that record on.
    middle = offsets[len(offsets) // 2][0]
    again = console_consumer("--broker-list", brokers, "--topic", topic, "--partition", "0", "--offset", str(middle),
                             "--timeout-ms", "500")
    assert again.returncode == 0, again.stderr
    assert again.stdout.splitlines() == [v for _, v, _ in sent][len(offsets) // 2:]


def test_console_consumer_group_and_groups_tool_lag_on_a_modern_topic(broker_factory, zk_connect):
    broker = broker_factory("zk", enable_zookeeper="true", zk_connect=zk_connect, brokerid=1, num_partitions=1)
    topic, group = "modern-grouped", "modern-readers"
    sent = records(topic, 120)
    produce_modern(broker, topic, sent, compression="zstd", linger_ms=50)
    wait_readable(broker.port, topic, len(sent))
    zk = KazooClient(zk_connect)
    zk.start(10)
    try:
        # With ZooKeeper a topic a modern client makes is the controller's (a replicated
        # topic, here of one replica): its assignment names its partitions.
        wait_for(lambda: zk.exists(layout.topic_path(topic)) and zk.get(layout.topic_path(topic))[0], 15, 0.05,
                 f"{topic} registered")
    finally:
        zk.stop()
        zk.close()
    first = console_consumer("--zookeeper", zk_connect, "--group", group, "--topic", topic, "--from-beginning",
                             "--max-messages", "45", "--print-key", "--print-offset")
    assert first.returncode == 0, first.stderr
    lines = [line.split(b"\t") for line in first.stdout.splitlines()]
    assert [fields[-1] for fields in lines] == [v for _, v, _ in sent[:45]]
    assert [fields[-2] for fields in lines] == [b"null" if k is None else k for k, _, _ in sent[:45]]
    committed = int(lines[-1][0].split(b"next_offset=")[1])

    report = describe_group(zk_connect, group)
    (row,) = report["topics"][0]["partitions"]
    assert row["committed_offset"] == committed  # the offset of the 46th record, inside its batch
    assert row["lag"] == row["log_end_offset"] - committed
    assert row["lag_messages_estimate"] == 120 - 45 and row["lag_messages_exact"]
    cli = subprocess.run([GROUPS_SCRIPT, "--zookeeper", zk_connect, "--group", group, "--json"],
                         capture_output=True, timeout=30, cwd=REPO)
    assert cli.returncode == 0, cli.stderr
    assert json.loads(cli.stdout)["lag_messages_estimate"] == 75

    rest = console_consumer("--zookeeper", zk_connect, "--group", group, "--topic", topic, "--timeout-ms", "1500")
    assert rest.returncode == 0, rest.stderr
    assert rest.stdout.splitlines() == [v for _, v, _ in sent[45:]]  # resumed inside the batch: nothing twice
    (row,) = describe_group(zk_connect, group)["topics"][0]["partitions"]
    assert row["lag"] == 0 and row["lag_messages_estimate"] == 0
