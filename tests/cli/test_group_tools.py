"""The consumer-group tools against a real ZooKeeper and two real brokers (ids 1 and 2,
4 partitions each): ``mpbroker-console-consumer --zookeeper`` (from the beginning,
resuming from committed offsets after --max-messages, SIGTERM and --timeout-ms,
whitelist and blacklist, a generated group), ``mpbroker.clients.groups.report`` and
``mpbroker-groups`` (members, owners, committed offsets, log ends, lag; unknown
groups, unreachable brokers and an unreachable ZooKeeper), and the usage errors.

The brokers are shared by the module's tests (one ZooKeeper chroot for them); each
test uses topics and groups of its own.
"""

import itertools
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from datetime import UTC, datetime

import pytest
from kazoo.client import KazooClient

from mpbroker.clients.consumer.simple_consumer import SimpleConsumer
from mpbroker.clients.groups import admin as group_admin
from mpbroker.clients.groups.connector import ConsumerConnector
from mpbroker.clients.groups.offset_targets import LATEST
from mpbroker.clients.groups.report import describe_group, list_groups
from mpbroker.clients.producer.producer import Producer
from mpbroker.registry.zk_client import start_client
from tests.broker.harness import BrokerProcess
from tests.clients.helpers import HOST, PARTITIONS, free_port, set_bytes, wait_for

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GROUPS_SCRIPT = os.path.join(os.path.dirname(sys.executable), "mpbroker-groups")
BROKER_IDS = (1, 2)
_chroots = itertools.count()


class Cluster:
    def __init__(self, zk_connect, brokers, zk):
        self.zk_connect = zk_connect
        self.brokers = brokers  # {broker id: BrokerProcess}
        self.zk = zk  # a kazoo client under the chroot

    @property
    def broker_list(self) -> str:
        return ",".join(f"{bid}:{HOST}:{broker.port}" for bid, broker in self.brokers.items())

    def produce(self, topic: str, payloads) -> list:
        """Acknowledged sends, message ``i`` to the ``i % 8``-th (broker, partition) pair; returns
        ``[(broker id, partition, payload), ...]``. Waits until the messages are fetchable
        (flushed) and the topic is registered in ZooKeeper by both brokers."""
        sent, ends = [], {}
        with Producer(broker_list=self.broker_list, acks="append",
                      partitioner_class=lambda key, n: int(key) % n) as producer:
            assert len(producer.partitions_for(topic)) == len(BROKER_IDS) * PARTITIONS
            for index, payload in enumerate(payloads):
                (result,) = producer.send(topic, payload, key=str(index))
                sent.append((result.broker_id, result.partition, payload))
                ends[(result.broker_id, result.partition)] = result.next_offset
        assert len(ends) == min(len(payloads), len(BROKER_IDS) * PARTITIONS)
        wait_for(lambda: all(self.log_end(topic, b, p) >= end for (b, p), end in ends.items()),
                 what=f"{topic} flushed")
        wait_for(lambda: self.children(f"/brokers/topics/{topic}") == [str(b) for b in BROKER_IDS],
                 what=f"{topic} registered in ZooKeeper by both brokers")
        return sent

    def children(self, path: str) -> list:
        return sorted(self.zk.get_children(path)) if self.zk.exists(path) else []

    def log_end(self, topic: str, broker_id: int, partition: int) -> int:
        with SimpleConsumer(HOST, self.brokers[broker_id].port) as consumer:
            return consumer.latest_offset(topic, partition)

    def committed(self, group: str, topic: str) -> dict:
        """``{(broker id, partition): offset}`` stored in ZooKeeper."""
        path = f"/consumers/{group}/offsets/{topic}"
        if not self.zk.exists(path):
            return {}
        offsets = {}
        for name in self.zk.get_children(path):
            broker_id, partition = name.split("-")
            offsets[(int(broker_id), int(partition))] = int(self.zk.get(f"{path}/{name}")[0])
        return offsets

    def log_ends(self, topic: str) -> dict:
        return {(b, p): self.log_end(topic, b, p) for b in BROKER_IDS for p in range(PARTITIONS)}


@pytest.fixture(scope="module")
def cluster(zookeeper, tmp_path_factory):
    zk_connect = zookeeper.connect_string(f"/group-tools-{next(_chroots)}")
    zk = start_client(zk_connect, 10000, 10000)  # creates the chroot
    brokers = {}
    try:
        for broker_id in BROKER_IDS:
            directory = tmp_path_factory.mktemp(f"broker{broker_id}")
            brokers[broker_id] = BrokerProcess(directory, enable_zookeeper="true", zk_connect=zk_connect,
                                               brokerid=broker_id).start()
        cluster = Cluster(zk_connect, brokers, zk)
        wait_for(lambda: cluster.children("/brokers/ids") == [str(b) for b in BROKER_IDS],
                 what="both brokers registered")
        yield cluster
    finally:
        for broker in brokers.values():
            broker.close()
        zk.stop()
        zk.close()


def payloads(prefix: str, count: int) -> list:
    return [b"%s-%04d" % (prefix.encode(), i) for i in range(count)]  # all of one size


# --- the console consumer ---------------------------------------------------------------

def consumer_command(zk_connect, *args):
    return [sys.executable, "-m", "mpbroker.cli.console_consumer", "--zookeeper", zk_connect, *args]


def console_consumer(zk_connect, *args, timeout=30):
    return subprocess.run(consumer_command(zk_connect, *args), capture_output=True, timeout=timeout, cwd=REPO)


class Lines:
    """A running console consumer whose stdout lines are collected by a thread."""

    def __init__(self, zk_connect, *args):
        self.process = subprocess.Popen(consumer_command(zk_connect, *args), stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, cwd=REPO)
        self.lines = []
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self):
        for line in self.process.stdout:
            self.lines.append(line.rstrip(b"\n"))

    def wait_lines(self, count, timeout=15.0):
        wait_for(lambda: len(self.lines) >= count, timeout, what=f"{count} lines (have {len(self.lines)})")
        return list(self.lines)

    def stop(self, sig=signal.SIGTERM, timeout=15.0):
        self.process.send_signal(sig)
        code = self.process.wait(timeout)
        self._thread.join(5)
        return code, self.process.stderr.read()

    def kill(self):
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        self.process.stdout.close()
        self.process.stderr.close()


def labelled(output: bytes) -> list:
    """``<broker>-<partition>\\toffset=<o> next_offset=<next offset>\\t<payload>`` lines
    -> [(broker, partition, next offset, payload)]."""
    parsed = []
    for line in output.splitlines():
        label, offsets, payload = line.split(b"\t")
        broker_id, partition = label.split(b"-")
        offset = offsets.split(b" next_offset=")[1]
        parsed.append((int(broker_id), int(partition), int(offset), payload))
    return parsed


def test_group_reads_everything_then_resumes_after_max_messages_sigterm_and_timeout(cluster):
    first = cluster.produce("resume", payloads("first", 40))
    run = console_consumer(cluster.zk_connect, "--group", "resumers", "--topic", "resume", "--from-beginning",
                           "--max-messages", "40", "--print-partition", "--print-offset")
    assert run.returncode == 0, run.stderr
    got = labelled(run.stdout)
    assert Counter((b, p, payload) for b, p, _, payload in got) == Counter(first)
    for key in {(b, p) for b, p, _, _ in got}:  # per partition: in order, offsets growing to the log end
        offsets = [o for b, p, o, _ in got if (b, p) == key]
        assert offsets == sorted(offsets) and offsets[-1] == cluster.log_end("resume", *key)
    assert cluster.committed("resumers", "resume") == cluster.log_ends("resume"), "--max-messages committed"

    # The same group goes on where it stopped (no --from-beginning needed); SIGTERM commits.
    follower = Lines(cluster.zk_connect, "--group", "resumers", "--topic", "resume")
    try:
        wait_for(lambda: len(cluster.children("/consumers/resumers/owners/resume")) == 8,
                 what="the follower to own the partitions")
        second = cluster.produce("resume", payloads("second", 24))
        assert sorted(follower.wait_lines(24)) == sorted(p for _, _, p in second)
        code, err = follower.stop(signal.SIGTERM)
        assert code == 0, err
        assert len(follower.lines) == 24
    finally:
        follower.kill()
    assert cluster.committed("resumers", "resume") == cluster.log_ends("resume"), "SIGTERM committed"
    assert not cluster.zk.get_children("/consumers/resumers/ids"), "left the group"

    third = cluster.produce("resume", payloads("third", 16))
    started = time.monotonic()
    run = console_consumer(cluster.zk_connect, "--group", "resumers", "--topic", "resume", "--from-beginning",
                           "--timeout-ms", "2500")
    assert run.returncode == 0, run.stderr
    assert sorted(run.stdout.splitlines()) == sorted(p for _, _, p in third), "only what came after"
    assert time.monotonic() - started < 15
    assert cluster.committed("resumers", "resume") == cluster.log_ends("resume")


def test_whitelist_and_blacklist_take_the_matching_topics(cluster):
    produced = {topic: cluster.produce(topic, payloads(topic, 12)) for topic in ("wl-a", "wl-b", "wl-c")}
    wanted = sorted(p for topic in ("wl-a", "wl-b") for _, _, p in produced[topic])
    for group, args in (("whitelisters", ["--whitelist", "wl-[ab]"]),
                        ("blacklisters", ["--blacklist", "(?!wl-).*|wl-c"])):
        run = console_consumer(cluster.zk_connect, "--group", group, *args, "--from-beginning",
                               "--timeout-ms", "2500", "--print-partition")
        assert run.returncode == 0, run.stderr
        assert sorted(line.split(b"\t")[1] for line in run.stdout.splitlines()) == wanted, group
        topics = sorted(cluster.zk.get_children(f"/consumers/{group}/offsets"))
        assert topics == ["wl-a", "wl-b"], group


def test_without_group_a_generated_group_is_used_and_removed_on_sigint(cluster):
    produced = cluster.produce("anon", payloads("anon", 8))
    reader = Lines(cluster.zk_connect, "--topic", "anon", "--from-beginning")
    try:
        assert sorted(reader.wait_lines(8)) == sorted(p for _, _, p in produced)
        (group,) = [g for g in list_groups(cluster.zk_connect) if g.startswith("console-consumer-")]
        assert len(cluster.children(f"/consumers/{group}/ids")) == 1
        code, err = reader.stop(signal.SIGINT)
        assert code == 0, err
    finally:
        reader.kill()
    assert not [g for g in list_groups(cluster.zk_connect) if g.startswith("console-consumer-")]


# --- the group report ---------------------------------------------------------------------

def groups_tool(*args, timeout=30):
    assert os.path.exists(GROUPS_SCRIPT), "pip install -e . makes the mpbroker-groups script"
    return subprocess.run([GROUPS_SCRIPT, *args], capture_output=True, timeout=timeout, cwd=REPO)


def test_describe_group_members_owners_offsets_and_lag(cluster):
    total, taken = 80, 30
    produced = cluster.produce("lag", payloads("lag", total))
    size = set_bytes([produced[0][2]])
    connector = ConsumerConnector({"zk.connect": cluster.zk_connect, "groupid": "laggers",
                                   "autocommit.enable": "false", "consumer.timeout.ms": 10000})
    try:
        (stream,) = connector.create_message_streams({"lag": 1})["lag"]
        consumed = [next(stream) for _ in range(taken)]
        # Every partition's fetcher starts (and commits offset 0 for the ones not read yet).
        def committed_everywhere():
            connector.commit_offsets()
            report = describe_group(cluster.zk_connect, "laggers")
            return report if all(p["committed_offset"] is not None for t in report["topics"]
                                 for p in t["partitions"]) else None
        report = wait_for(committed_everywhere, interval=0.2, what="a committed offset for every partition")

        expected_committed = {(b, p): 0 for b in BROKER_IDS for p in range(PARTITIONS)}
        for message in consumed:
            expected_committed[(message.broker_id, message.partition)] = message.next_offset
        log_ends = cluster.log_ends("lag")
        stream_id = f"{connector.consumer_id}-0"

        assert report["group"] == "laggers"
        (member,) = report["members"]
        assert member["consumer_id"] == connector.consumer_id
        assert member["subscription"] == {"kind": "static", "topics": {"lag": 1}}
        assert member["streams"] == [stream_id] and len(member["owned"]) == 8
        (topic,) = report["topics"]
        assert topic["topic"] == "lag"
        rows = {(p["broker_id"], p["partition"]): p for p in topic["partitions"]}
        assert set(rows) == set(expected_committed)
        for key, row in rows.items():
            assert row["owner"] == stream_id
            assert row["committed_offset"] == expected_committed[key]
            assert row["log_end_offset"] == log_ends[key]
            assert row["lag"] == log_ends[key] - expected_committed[key]
            assert row["lag_messages_estimate"] == row["lag"] // size and row["lag_messages_exact"]
        assert topic["lag"] == report["lag"] == (total - taken) * size, "lag in bytes: N-K messages"
        assert topic["lag_messages_estimate"] == report["lag_messages_estimate"] == total - taken
        assert report["lag_complete"] and report["notes"] == []

        cli = groups_tool("--zookeeper", cluster.zk_connect, "--group", "laggers", "--json")
        assert cli.returncode == 0, cli.stderr
        assert json.loads(cli.stdout) == report
        table = groups_tool("--zookeeper", cluster.zk_connect, "--group", "laggers")
        assert table.returncode == 0, table.stderr
        text = table.stdout.decode()
        assert f"lag {(total - taken) * size} bytes" in text
        assert connector.consumer_id in text and "lag:1" in text
        header = next(line for line in text.splitlines() if line.startswith("topic"))
        assert header.split() == ["topic", "partition", "owner", "committed", "log_end", "lag", "lag_msgs"]
        row = next(line for line in text.splitlines() if line.startswith("lag  ") and " 1-0 " in line)
        lag_1_0 = log_ends[(1, 0)] - expected_committed[(1, 0)]
        assert row.split() == ["lag", "1-0", stream_id, str(expected_committed[(1, 0)]),
                               str(log_ends[(1, 0)]), str(lag_1_0), str(lag_1_0 // size)]
        assert f"lag {(total - taken) * size} bytes, {total - taken} messages" in text, "counted: all within a fetch"
        listing = groups_tool("--zookeeper", cluster.zk_connect, "--json")
        assert listing.returncode == 0, listing.stderr
        groups = {g["group"]: g for g in json.loads(listing.stdout)["groups"]}
        assert groups["laggers"] == {"group": "laggers", "members": 1, "topics": ["lag"]}

        # mpbroker-ctl groups: the same report, with ZooKeeper taken from a broker's configuration.
        config = cluster.brokers[BROKER_IDS[0]].config_path
        from_ctl = ctl_groups(config, "--group", "laggers", "--json")
        assert from_ctl.returncode == 0, from_ctl.stderr
        assert json.loads(from_ctl.stdout) == report
        assert f"lag {(total - taken) * size} bytes" in ctl_groups(config, "--group", "laggers").stdout.decode()
        assert "laggers" in ctl_groups(config).stdout.decode()
        assert ctl_groups(config, "--group", "nobody").returncode == 1
    finally:
        connector.shutdown()

    after = describe_group(cluster.zk_connect, "laggers")
    assert after["members"] == []
    (topic,) = after["topics"]
    assert all(p["owner"] is None for p in topic["partitions"])
    assert topic["lag"] == (total - taken) * size, "shutdown committed what was handed out, no more"
    assert "laggers" in groups_tool("--zookeeper", cluster.zk_connect).stdout.decode()


def test_unreachable_and_unregistered_brokers_give_no_log_end(zk_connect):
    """A group with offsets on a broker registered at a closed port and on a broker that
    is not registered at all: committed offsets shown, log end and lag unknown, notes say why."""
    closed = free_port()
    zk = KazooClient(hosts=zk_connect.split("/")[0], timeout=10)
    zk.start(10)
    try:
        chroot = "/" + zk_connect.split("/", 1)[1]
        zk.create(f"{chroot}/brokers/ids/7", f"gone-1:{HOST}:{closed}".encode(), makepath=True)
        zk.create(f"{chroot}/brokers/topics/ghost/7", b"1", makepath=True)
        zk.create(f"{chroot}/consumers/ghosts/offsets/ghost/7-0", b"120", makepath=True)
        zk.create(f"{chroot}/consumers/ghosts/offsets/ghost/8-3", b"40", makepath=True)
        zk.create(f"{chroot}/consumers/ghosts/ids", makepath=True)
    finally:
        zk.stop()
        zk.close()
    started = time.monotonic()
    report = describe_group(zk_connect, "ghosts", broker_timeout_ms=1000)
    assert time.monotonic() - started < 10
    (topic,) = report["topics"]
    rows = {p["node"]: p for p in topic["partitions"]}
    assert set(rows) == {"7-0", "8-3"}
    assert rows["7-0"]["committed_offset"] == 120 and rows["8-3"]["committed_offset"] == 40
    assert all(row["log_end_offset"] is None and row["lag"] is None for row in rows.values())
    assert not report["lag_complete"]
    notes = "\n".join(report["notes"])
    assert f"broker 7 ({HOST}:{closed}) could not be reached" in notes
    assert "broker 8 is not registered" in notes
    table = groups_tool("--zookeeper", zk_connect, "--group", "ghosts", "--broker-timeout-ms", "1000")
    assert table.returncode == 0, table.stderr
    assert "lag 0 bytes (not known for 2 partitions)" in table.stdout.decode()
    assert "note: broker 7" in table.stdout.decode()


# --- errors and exit codes ---------------------------------------------------------------

def ctl_groups(config_path, *args):
    return subprocess.run([sys.executable, "-m", "mpbroker.cli.ctl", "-c", str(config_path), "groups", *args],
                          capture_output=True, timeout=60)


def test_ctl_groups_without_zookeeper_says_so(tmp_path):
    config = tmp_path / "server.properties"
    config.write_text("log.dir=/nonexistent\n")
    result = ctl_groups(config)
    assert result.returncode == 2
    assert b"zk.connect is empty" in result.stderr


def test_unknown_group_exits_1(cluster):
    result = groups_tool("--zookeeper", cluster.zk_connect, "--group", "nobody-here")
    assert result.returncode == 1
    assert b"no consumer group 'nobody-here'" in result.stderr
    assert result.stdout == b""


def test_unreachable_zookeeper_exits_3_quickly():
    target = f"{HOST}:{free_port()}"
    for command, run in (("groups", lambda: groups_tool("--zookeeper", target, "--zk-timeout-ms", "1000")),
                         ("groups --group", lambda: groups_tool("--zookeeper", target, "--group", "g",
                                                                "--zk-timeout-ms", "1000")),
                         ("console consumer", lambda: console_consumer(target, "--topic", "t", "--group", "g",
                                                                       "--zk-timeout-ms", "1000"))):
        started = time.monotonic()
        result = run()
        assert result.returncode == 3, (command, result.stderr)
        assert f"ZooKeeper unreachable: no ZooKeeper answered at {target}".encode() in result.stderr, command
        assert len(result.stderr.splitlines()) == 1, (command, result.stderr)
        assert time.monotonic() - started < 8, command


@pytest.mark.parametrize("args", [
    ["--broker-list", f"{HOST}:1", "--zookeeper", f"{HOST}:1", "--topic", "t"],
    ["--broker-list", f"{HOST}:1", "--topic", "t", "--group", "g"],
    ["--broker-list", f"{HOST}:1", "--whitelist", "t.*"],
    ["--zookeeper", f"{HOST}:1", "--group", "g"],
    ["--zookeeper", f"{HOST}:1", "--topic", "t", "--whitelist", "t.*"],
    ["--zookeeper", f"{HOST}:1", "--topic", "t", "--partition", "0"],
    ["--zookeeper", f"{HOST}:1", "--topic", "t", "--group", "bad/group"],
    ["--zookeeper", f"{HOST}:1", "--whitelist", "(unclosed"],
    ["--zookeeper", f"{HOST}:1", "--topic", "../x"],
], ids=["both-sources", "group-without-zookeeper", "whitelist-without-zookeeper", "no-topic",
        "topic-and-whitelist", "partition-with-zookeeper", "bad-group", "bad-regex", "bad-topic"])
def test_console_consumer_usage_errors_exit_2(args):
    result = subprocess.run([sys.executable, "-m", "mpbroker.cli.console_consumer", *args], capture_output=True,
                            timeout=30, cwd=REPO)
    assert result.returncode == 2, result.stderr
    assert result.stdout == b""


ZK = ["--zookeeper", f"{HOST}:1"]  # never contacted: the arguments are refused first


@pytest.mark.parametrize("args", [
    [], [*ZK, "--group", "a b"], [*ZK, "--zk-timeout-ms", "x"],
    [*ZK, "--describe"], [*ZK, "--list", "--group", "g"], [*ZK, "--delete"], [*ZK, "--list", "--describe"],
    [*ZK, "--group", "g", "--reset-offsets"], [*ZK, "--reset-offsets", "--to-earliest"],
    [*ZK, "--group", "g", "--to-earliest"], [*ZK, "--group", "g", "--execute"],
    [*ZK, "--group", "g", "--reset-offsets", "--to-earliest", "--to-latest"],
    [*ZK, "--group", "g", "--reset-offsets", "--to-datetime", "yesterday"],
    [*ZK, "--group", "g", "--reset-offsets", "--to-offset", "-1"],
    [*ZK, "--group", "g", "--reset-offsets", "--to-offset", "x"],
    [*ZK, "--group", "g", "--reset-offsets", "--to-earliest", "--topic", "../t"],
    [*ZK, "--group", "g", "--reset-offsets", "--to-earliest", "--topic", "t:1-x"],
], ids=["no-zookeeper", "bad-group", "bad-timeout", "describe-without-group", "list-with-group",
        "delete-without-group", "two-actions", "reset-without-target", "reset-without-group", "target-without-reset",
        "execute-without-reset", "two-targets", "bad-datetime", "negative-offset", "offset-not-a-number",
        "bad-topic", "bad-partition"])
def test_groups_tool_usage_errors_exit_2(args):
    result = groups_tool(*args)
    assert result.returncode == 2, result.stderr
    assert result.stdout == b""
    assert result.stderr.startswith(b"usage:") or result.stderr.startswith(b"mpbroker-groups: "), result.stderr


# --- --list and --describe ---------------------------------------------------------------

def test_list_and_describe_as_kafka_consumer_groups_spells_them(cluster):
    produced = cluster.produce("listed", payloads("listed", 8))
    run = console_consumer(cluster.zk_connect, "--group", "listers", "--topic", "listed", "--from-beginning",
                           "--max-messages", str(len(produced)))
    assert run.returncode == 0, run.stderr
    listing = groups_tool("--zookeeper", cluster.zk_connect, "--list")
    assert listing.returncode == 0, listing.stderr
    names = listing.stdout.decode().splitlines()
    assert "listers" in names and names == sorted(names) and all(" " not in name for name in names)
    as_json = json.loads(groups_tool("--zookeeper", cluster.zk_connect, "--list", "--json").stdout)
    assert as_json == {"groups": names}
    described = groups_tool("--zookeeper", cluster.zk_connect, "--describe", "--group", "listers", "--json")
    assert described.returncode == 0, described.stderr
    assert json.loads(described.stdout) == describe_group(cluster.zk_connect, "listers")
    assert groups_tool("--zookeeper", cluster.zk_connect, "--describe", "--group", "nobody").returncode == 1


# --- resetting offsets ---------------------------------------------------------------------

def reset(cluster, group, *args):
    return groups_tool("--zookeeper", cluster.zk_connect, "--group", group, "--reset-offsets", *args)


def plan_rows(stdout: bytes) -> dict:
    """The plan's table: ``{(topic, node): (current, new)}``."""
    lines = stdout.decode().splitlines()
    header = lines.index(next(line for line in lines if line.split()[:4] == ["topic", "partition", "current", "new"]))
    rows = {}
    for line in lines[header + 1:]:
        cells = line.split()
        if len(cells) != 4 or line.startswith(("problem:", "note:")):
            break
        rows[(cells[0], cells[1])] = (cells[2], cells[3])
    return rows


def test_reset_offsets_dry_run_then_execute_and_the_group_reads_from_there(cluster):
    topic, group = "rewind", "rewinders"
    produced = cluster.produce(topic, payloads("rewind", 40))  # 5 messages in each of the 8 partitions
    size = set_bytes([produced[0][2]])
    run = console_consumer(cluster.zk_connect, "--group", group, "--topic", topic, "--from-beginning",
                           "--max-messages", "40")
    assert run.returncode == 0, run.stderr
    ends = cluster.log_ends(topic)
    assert cluster.committed(group, topic) == ends

    dry = reset(cluster, group, "--to-earliest")
    assert dry.returncode == 0, dry.stderr
    assert "dry run, nothing written" in dry.stdout.decode()
    assert plan_rows(dry.stdout) == {(topic, f"{b}-{p}"): (str(ends[(b, p)]), "0") for b, p in ends}
    assert cluster.committed(group, topic) == ends, "a dry run writes nothing"

    done = reset(cluster, group, "--to-earliest", "--execute")
    assert done.returncode == 0, done.stderr
    assert "wrote 8 offsets" in done.stdout.decode()
    assert cluster.committed(group, topic) == {key: 0 for key in ends}
    again = console_consumer(cluster.zk_connect, "--group", group, "--topic", topic, "--max-messages", "40")
    assert again.returncode == 0, again.stderr
    assert sorted(again.stdout.splitlines()) == sorted(p for _, _, p in produced), "everything again"

    # One partition to its end, another to its third message, by JSON.
    latest = reset(cluster, group, "--to-latest", "--topic", f"{topic}:1-0", "--execute", "--json")
    assert latest.returncode == 0, latest.stderr
    plan = json.loads(latest.stdout)
    assert plan["executed"] and plan["group"] == group and plan["target"] == "latest"
    assert [(p["node"], p["current_offset"], p["new_offset"]) for p in plan["partitions"]] == \
        [("1-0", ends[(1, 0)], ends[(1, 0)])]
    reset(cluster, group, "--to-earliest", "--execute")
    third = reset(cluster, group, "--to-offset", str(2 * size), "--topic", f"{topic}:2-1", "--execute")
    assert third.returncode == 0, third.stderr
    expected = {key: 0 for key in ends}
    expected[(2, 1)] = 2 * size
    assert cluster.committed(group, topic) == expected
    # "T:0" is partition 0 of every broker.
    zero = reset(cluster, group, "--to-latest", "--topic", f"{topic}:0")
    assert set(plan_rows(zero.stdout)) == {(topic, "1-0"), (topic, "2-0")}


@pytest.mark.parametrize("offset, why", [
    ("mid", b"is not the start of a message"),
    ("past", b"is outside the log"),
])
def test_reset_to_an_offset_that_is_no_message_start_is_refused(cluster, offset, why):
    topic, group = f"badoffset-{offset}", f"badoffsets-{offset}"
    produced = cluster.produce(topic, payloads(topic, 24))
    size = set_bytes([produced[0][2]])
    end = cluster.log_end(topic, 1, 0)
    reset(cluster, group, "--to-earliest", "--topic", topic, "--execute")
    before = cluster.committed(group, topic)
    target = size + size // 2 if offset == "mid" else end + size
    result = reset(cluster, group, "--to-offset", str(target), "--topic", f"{topic}:1-0", "--execute")
    assert result.returncode == 2, result.stderr
    assert why in result.stdout and b"nothing written: 1 partition without a new offset" in result.stdout
    assert plan_rows(result.stdout) == {(topic, "1-0"): ("0", "-")}
    assert cluster.committed(group, topic) == before


def test_reset_and_delete_are_refused_while_the_group_has_live_members(cluster):
    topic, group = "busy", "busybodies"
    cluster.produce(topic, payloads("busy", 16))
    connector = ConsumerConnector({"zk.connect": cluster.zk_connect, "groupid": group, "autocommit.enable": "false"})
    try:
        connector.create_message_streams({topic: 1})
        wait_for(lambda: len(cluster.children(f"/consumers/{group}/owners/{topic}")) == 8, what="owners")

        def committed_everywhere():  # each fetcher commits its start once it has one
            connector.commit_offsets()
            return len(cluster.committed(group, topic)) == 8
        wait_for(committed_everywhere, interval=0.2, what="offsets committed")
        before = cluster.committed(group, topic)

        refused = reset(cluster, group, "--to-latest", "--execute")
        assert refused.returncode == 1, refused.stderr
        stderr = refused.stderr.decode()
        assert f"group '{group}' has 1 live member: {connector.consumer_id}" in stderr
        assert "would commit its own offsets over the new ones" in stderr
        assert refused.stdout == b""
        dry = reset(cluster, group, "--to-latest")
        assert dry.returncode == 0, dry.stderr
        assert "--execute refuses until they have stopped" in dry.stdout.decode()
        deleted = groups_tool("--zookeeper", cluster.zk_connect, "--group", group, "--delete")
        assert deleted.returncode == 1 and b"would recreate the group" in deleted.stderr
        assert cluster.committed(group, topic) == before
    finally:
        connector.shutdown()

    deleted = groups_tool("--zookeeper", cluster.zk_connect, "--group", group, "--delete")
    assert deleted.returncode == 0, deleted.stderr
    assert deleted.stdout.decode().strip() == \
        f"deleted consumer group {group} (committed offsets of 8 partitions in 1 topic)"
    assert not cluster.zk.exists(f"/consumers/{group}")
    assert group not in groups_tool("--zookeeper", cluster.zk_connect, "--list").stdout.decode().splitlines()
    assert groups_tool("--zookeeper", cluster.zk_connect, "--group", group, "--delete").returncode == 1


def test_lag_in_messages_is_estimated_beyond_one_fetch(cluster):
    topic, group = "bulky", "bulk-readers"
    big = [b"%04d" % i + b"x" * 996 for i in range(200)]  # 200 KB in partition 1-0: more than one sample
    with Producer(broker_list=cluster.broker_list, acks="append", partitioner_class=lambda key, n: 0) as producer:
        for payload in big:
            producer.send(topic, payload)
    end = set_bytes(big)
    wait_for(lambda: cluster.log_end(topic, 1, 0) == end, what=f"{topic} flushed")
    wait_for(lambda: cluster.children(f"/brokers/topics/{topic}") == ["1"], what=f"{topic} registered")
    seeded = reset(cluster, group, "--to-earliest", "--topic", topic, "--execute")  # a group that did not exist
    assert seeded.returncode == 0, seeded.stderr
    assert cluster.committed(group, topic) == {(1, p): 0 for p in range(PARTITIONS)}

    report = describe_group(cluster.zk_connect, group)
    rows = {p["node"]: p for p in report["topics"][0]["partitions"]}
    assert rows["1-0"]["lag"] == end
    assert rows["1-0"]["lag_messages_estimate"] == 200 and not rows["1-0"]["lag_messages_exact"]
    assert all(rows[f"1-{p}"]["lag_messages_estimate"] == 0 and rows[f"1-{p}"]["lag_messages_exact"]
               for p in range(1, PARTITIONS))
    assert report["lag_messages_estimate"] == 200
    text = groups_tool("--zookeeper", cluster.zk_connect, "--group", group).stdout.decode()
    assert f"lag {end} bytes, ~200 messages" in text
    row = next(line for line in text.splitlines() if line.startswith(f"{topic} ") and " 1-0 " in line)
    assert row.split()[-2:] == [str(end), "~200"]
    assert "estimated from the first bytes after the committed offset" in text


def test_reset_to_a_datetime_takes_the_segment_written_before_it(broker_factory, zk_connect):
    """Segments of ~1 KB: the offset for a time is the base of the newest segment file
    last modified at or before it (read here from the files themselves); a time before
    every segment gives the log's start, one after the last write the log end."""
    broker = broker_factory("dt", enable_zookeeper="true", zk_connect=zk_connect, brokerid=1, log_file_size=1000)
    topic = "dated"

    def produce(prefix, count):
        with Producer(broker_list=f"1:{HOST}:{broker.port}", acks="append",
                      partitioner_class=lambda key, n: 0) as producer:
            for i in range(count):
                (result,) = producer.send(topic, b"%s-%03d" % (prefix, i) + b"." * 80)
        with SimpleConsumer(HOST, broker.port) as consumer:
            wait_for(lambda: consumer.latest_offset(topic, 0) == result.next_offset, what=f"{prefix} flushed")
        return result.next_offset

    first_end = produce(b"old", 40)
    time.sleep(1.2)
    moment = time.time()
    time.sleep(1.2)
    second_end = produce(b"new", 40)
    assert second_end > first_end
    directory = os.path.join(broker.log_dir, f"{topic}-0")
    segments = sorted((int(name[:20]), os.stat(os.path.join(directory, name)).st_mtime)
                      for name in os.listdir(directory) if name.endswith(".kafka"))
    assert len(segments) > 4
    expected = max(base for base, mtime in segments if mtime <= moment)
    assert expected <= first_end < second_end
    assert first_end - expected <= 1000 + 200, "re-read at most a segment of what came before"

    iso = datetime.fromtimestamp(moment, UTC).isoformat()
    result = groups_tool("--zookeeper", zk_connect, "--group", "dated", "--reset-offsets", "--to-datetime", iso,
                         "--topic", f"{topic}:1-0", "--execute", "--json")
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    assert [(p["current_offset"], p["new_offset"]) for p in plan["partitions"]] == [(None, expected)]
    assert not plan["group_exists"] and plan["executed"]
    with SimpleConsumer(HOST, broker.port) as consumer:
        after = [m.payload for m in consumer.messages(topic, 0, expected)]
    assert all(p.startswith(b"new-") for p in after[-40:]) and len([p for p in after if p.startswith(b"new-")]) == 40

    for when, offset in (("2001-01-01T00:00:00+00:00", 0), ("2999-01-01T00:00:00", second_end)):
        edge = groups_tool("--zookeeper", zk_connect, "--group", "dated", "--reset-offsets", "--to-datetime", when,
                           "--topic", f"{topic}:1-0", "--json")
        assert edge.returncode == 0, edge.stderr
        assert [p["new_offset"] for p in json.loads(edge.stdout)["partitions"]] == [offset], when


def test_a_reset_with_unreachable_brokers_writes_nothing_and_exits_3(zk_connect):
    closed = free_port()
    zk = start_client(zk_connect, 10000, 10000)
    try:
        zk.create("/brokers/ids/7", f"gone-1:{HOST}:{closed}".encode(), makepath=True)
        zk.create("/brokers/topics/ghost/7", b"1", makepath=True)
        zk.create("/consumers/ghosts/offsets/ghost/7-0", b"120", makepath=True)
        zk.create("/consumers/ghosts/offsets/ghost/8-3", b"40", makepath=True)
        for extra in ([], ["--execute"]):
            result = groups_tool("--zookeeper", zk_connect, "--group", "ghosts", "--reset-offsets", "--to-latest",
                                 "--broker-timeout-ms", "1000", *extra)
            assert result.returncode == 3, result.stderr
            assert plan_rows(result.stdout) == {("ghost", "7-0"): ("120", "-"), ("ghost", "8-3"): ("40", "-")}
            out = result.stdout.decode()
            assert f"problem: ghost 7-0: broker 7 ({HOST}:{closed}) could not be reached" in out
            assert "problem: ghost 8-3: broker 8 is not registered" in out
            assert out.startswith("reset of group ghosts to latest: " +
                                  ("nothing written: 2 partitions without a new offset" if extra else
                                   "dry run, nothing written (--execute writes)"))
            assert zk.get("/consumers/ghosts/offsets/ghost/7-0")[0] == b"120"
        unknown = groups_tool("--zookeeper", zk_connect, "--group", "ghosts", "--reset-offsets", "--to-latest",
                              "--topic", "ghost:7-5")
        assert unknown.returncode == 2 and b"topic 'ghost' has no 7-5 (known: 7-0, 8-3)" in unknown.stderr
    finally:
        zk.stop()
        zk.close()


def test_a_reset_whose_offsets_changed_after_the_plan_writes_nothing(cluster):
    """All or nothing: a commit between the plan and the write (a member that came and
    went) fails the whole transaction; a member registered by then is refused."""
    topic, group = "raced", "racers"
    cluster.produce(topic, payloads(topic, 16))
    assert reset(cluster, group, "--to-earliest", "--topic", topic, "--execute").returncode == 0
    client = start_client(cluster.zk_connect, 10000, 10000)
    try:
        plan = group_admin.plan_reset(client, group, LATEST, [group_admin.parse_topic_selection(topic)])
        assert not plan.problems() and len(plan.rows) == 8
        client.set(f"/consumers/{group}/offsets/{topic}/2-1", b"0")  # same value, new version
        with pytest.raises(group_admin.ResetConflict, match="nothing was written"):
            group_admin.execute_reset(client, plan)
        assert cluster.committed(group, topic) == {key: 0 for key in cluster.log_ends(topic)}

        plan = group_admin.plan_reset(client, group, LATEST, [group_admin.parse_topic_selection(topic)])
        client.create(f"/consumers/{group}/ids/late-member", b'{"raced": 1}', ephemeral=True, makepath=True)
        with pytest.raises(group_admin.GroupHasMembers, match="late-member"):
            group_admin.execute_reset(client, plan)
        client.delete(f"/consumers/{group}/ids/late-member")
        assert group_admin.execute_reset(client, plan) == 8
        assert cluster.committed(group, topic) == cluster.log_ends(topic)
    finally:
        client.stop()
        client.close()
