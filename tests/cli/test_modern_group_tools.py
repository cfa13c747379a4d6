"""``mpbroker-groups --bootstrap-server`` against a real broker (``LocalBroker``, two
workers, four partitions a topic) and real confluent-kafka consumers in groups: the
list, a group described (state, members and the partitions each was assigned,
committed offsets, log ends, lag going to 0 once read and committed), resets refused
while a member is active, every target as a dry run and then executed (a consumer of
the group starting where the reset put it), deleting, and the usage errors. Each test
uses topics and groups of its own."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient

from mpbroker.testing.local_broker import LocalBroker
from tests.kafka.conftest import assert_healthy
from tests.polling import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GROUPS_SCRIPT = os.path.join(os.path.dirname(sys.executable), "mpbroker-groups")
PARTITIONS = 4
TIMEOUT_S = 60.0


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with LocalBroker(tmp_path_factory.mktemp("modern-groups"), num_workers=2, num_partitions=PARTITIONS,
                     group_initial_rebalance_delay_ms=0) as broker:
        yield broker
        assert_healthy(broker)


@pytest.fixture
def topic(request):
    return "".join(c if c.isalnum() else "-" for c in request.node.name)[:50].strip("-") + f"-{time.time_ns() % 10**6}"


def groups_tool(broker, *args, timeout=60):
    assert os.path.exists(GROUPS_SCRIPT), "pip install -e . makes the mpbroker-groups script"
    return subprocess.run([GROUPS_SCRIPT, "--bootstrap-server", broker.bootstrap, *args], capture_output=True,
                          text=True, timeout=timeout, cwd=REPO)


def tool_json(broker, *args) -> dict:
    run = groups_tool(broker, *args, "--json")
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)


def produce(broker, topic, count, prefix="m") -> dict:
    """``{value: (partition, offset)}`` of ``count`` messages, spread over the partitions."""
    stored = {}

    def delivered(error, message):
        assert error is None, error
        stored[message.value()] = (message.partition(), message.offset())
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
    for i in range(count):
        producer.produce(topic, value=f"{prefix}-{i}".encode(), partition=i % PARTITIONS, on_delivery=delivered)
    assert producer.flush(TIMEOUT_S) == 0
    assert len(stored) == count
    return stored


def member(broker, group, **config) -> Consumer:
    return Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                     "enable.auto.commit": False, **config})


def read(consumers, want: int, timeout: float = TIMEOUT_S) -> dict:
    """``{value: (partition, offset)}`` read by ``consumers`` (polled in turn) until
    ``want``, or ``timeout``."""
    got = {}
    deadline = time.monotonic() + timeout
    while len(got) < want and time.monotonic() < deadline:
        for consumer in consumers:
            message = consumer.poll(0.2)
            if message is None:
                continue
            if message.error():
                assert message.error().code() == KafkaError._PARTITION_EOF, message.error()
                continue
            got[message.value()] = (message.partition(), message.offset())
    return got


def drain(consumers, quiet_s: float = 1.5) -> dict:
    """What ``consumers`` read until nothing came for ``quiet_s``."""
    got = {}
    while True:
        more = read(consumers, 1 << 30, timeout=quiet_s)
        if not more:
            return got
        got.update(more)


def commit(consumer) -> None:
    try:
        consumer.commit(asynchronous=False)
    except KafkaException as exc:  # nothing read since the last commit
        assert exc.args[0].code() == KafkaError._NO_OFFSET, exc


def consume_and_commit(broker, group, topic, want: int) -> dict:
    """A member that reads ``want`` messages, commits and leaves (the group is Empty after)."""
    consumer = member(broker, group)
    consumer.subscribe([topic])
    try:
        got = read([consumer], want)
        assert len(got) == want, f"read {len(got)} of {want}"
        commit(consumer)
    finally:
        consumer.close()
    return got


def committed(broker, group) -> dict:
    """``{(topic, partition): committed offset}`` of ``group`` as the broker's OffsetFetch
    answers confluent-kafka's admin client: read in this process (a reset is checked a
    dozen times; the tool's own ``--describe`` of them is checked in the tests above)."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})  # kept until the answer: it runs the request
    answer = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(TIMEOUT_S)
    return {(tp.topic, tp.partition): tp.offset for tp in answer.topic_partitions}


# --- --list and --describe ----------------------------------------------------------------

def test_list_and_describe_show_members_partitions_offsets_and_lag(broker, topic):
    sent = produce(broker, topic, 40)
    group = f"{topic}-g"
    first, second = member(broker, group), member(broker, group)
    try:
        first.subscribe([topic])
        second.subscribe([topic])
        seen = {}

        def both_assigned():
            seen.update(read([first, second], 1 << 30, timeout=0.3))
            return first.assignment() and second.assignment() and \
                len(first.assignment()) + len(second.assignment()) == PARTITIONS
        wait_for(both_assigned, timeout=TIMEOUT_S, what="both members assigned")
        seen.update(drain([first, second]))  # (a partition moved in the rebalance is read again by its new owner)
        assert set(seen) == set(sent)
        commit(first)
        commit(second)

        listing = groups_tool(broker, "--list")
        assert listing.returncode == 0, listing.stderr
        assert group in listing.stdout.split()
        assert group in tool_json(broker, "--list")["groups"]
        assert {"group": group, "state": "Stable", "members": 2} in tool_json(broker)["groups"]

        ends = {partition: max(offset for p, offset in sent.values() if p == partition) + 1
                for partition in range(PARTITIONS)}  # (the last record's offset + 1: a batch's end)
        described = tool_json(broker, "--describe", "--group", group)
        assert described["state"] == "Stable" and described["protocol_type"] == "consumer"
        members = {m["member_id"]: m for m in described["members"]}
        assert len(members) == 2
        assert all(m["client_id"] == "rdkafka" and m["host"] == "/127.0.0.1" for m in members.values())
        owned = [(topic, p) for m in members.values() for p in m["partitions"][topic]]
        assert sorted(owned) == [(topic, p) for p in range(PARTITIONS)], "each partition assigned once"
        rows = {row["partition"]: row for row in described["partitions"]}
        assert set(rows) == set(range(PARTITIONS))
        for partition, row in rows.items():
            assert row["committed_offset"] == row["log_end_offset"] == ends[partition], row
            assert row["lag"] == 0
            assert partition in members[row["member_id"]]["partitions"][topic], "the owner holds it"
        assert described["lag"] == 0

        more = produce(broker, topic, 8, prefix="more")  # not read yet: lag
        behind = tool_json(broker, "--describe", "--group", group)
        for row in behind["partitions"]:
            assert row["log_end_offset"] > row["committed_offset"] and row["lag"] > 0, row
            assert row["lag"] == row["log_end_offset"] - row["committed_offset"]
        assert behind["lag"] == sum(row["lag"] for row in behind["partitions"])

        table = groups_tool(broker, "--describe", "--group", group)
        assert table.returncode == 0, table.stderr
        assert f"group {group}: Stable" in table.stdout and "2 members" in table.stdout
        assert all(member_id in table.stdout for member_id in members)
        assert "committed  log_end  lag" in table.stdout

        assert set(drain([first, second])) == set(more)
        commit(first)
        commit(second)
        caught_up = tool_json(broker, "--describe", "--group", group)
        assert caught_up["lag"] == 0 and all(row["lag"] == 0 for row in caught_up["partitions"])
    finally:
        first.close()
        second.close()
    empty = tool_json(broker, "--describe", "--group", group)
    assert empty["state"] == "Empty" and empty["members"] == []
    assert "has no active members" in groups_tool(broker, "--describe", "--group", group).stdout


def test_describe_of_an_unknown_group_exits_1(broker):
    run = groups_tool(broker, "--describe", "--group", "nobody-here")
    assert run.returncode == 1 and run.stdout == ""
    assert "no consumer group 'nobody-here'" in run.stderr


# --- resetting offsets ------------------------------------------------------------------

def test_reset_and_delete_are_refused_while_a_member_is_active(broker, topic):
    sent = produce(broker, topic, 12)
    group = f"{topic}-g"
    consumer = member(broker, group)
    consumer.subscribe([topic])
    try:
        assert len(read([consumer], len(sent))) == len(sent)
        commit(consumer)
        before = committed(broker, group)
        for execute in ((), ("--execute",)):
            run = groups_tool(broker, "--reset-offsets", "--group", group, "--to-earliest", *execute)
            assert run.returncode == 1, run.stderr
            assert "is Stable with 1 active member" in run.stderr and "inactive group" in run.stderr
            assert run.stdout == ""
        deleted = groups_tool(broker, "--delete", "--group", group)
        assert deleted.returncode == 1 and "NON_EMPTY_GROUP" in deleted.stderr
        assert committed(broker, group) == before, "nothing written"
    finally:
        consumer.close()


def reset(broker, group, *args):
    return groups_tool(broker, "--reset-offsets", "--group", group, *args)


def plan_of(broker, group, *args) -> dict:
    """The dry run's plan: ``{(topic, partition): new offset}`` (nothing written)."""
    before = committed(broker, group)
    run = reset(broker, group, *args, "--json")
    assert run.returncode == 0, run.stderr
    plan = json.loads(run.stdout)
    assert plan["executed"] is False and plan["state"] == "Empty"
    assert committed(broker, group) == before, "a dry run writes nothing"
    return {(row["topic"], row["partition"]): row["new_offset"] for row in plan["partitions"]}


def execute(broker, group, *args) -> dict:
    run = reset(broker, group, *args, "--execute")
    assert run.returncode == 0, run.stderr
    assert "wrote" in run.stdout
    return committed(broker, group)


def starts_at(broker, group, topic, stored: dict, new_offsets: dict, **config) -> None:
    """A member of ``group`` reads from ``new_offsets``: exactly the messages of
    ``stored`` at or after them (of the partitions named)."""
    expected = {value for value, (partition, offset) in stored.items()
                if (topic, partition) in new_offsets and offset >= new_offsets[(topic, partition)]}
    consumer = member(broker, group, **config)
    consumer.subscribe([topic])
    try:
        got = read([consumer], len(expected))
        got.update(read([consumer], 1, timeout=1.0))  # and nothing more comes
    finally:
        consumer.close()
    assert set(got) == expected, (sorted(set(got) - expected)[:5], sorted(expected - set(got))[:5])


def test_every_target_dry_run_then_executed_and_a_member_starts_there(broker, topic):
    early = produce(broker, topic, 40, prefix="early")
    time.sleep(0.05)
    middle_ms = int(time.time() * 1000)
    time.sleep(0.05)
    late = produce(broker, topic, 40, prefix="late")
    stored = {**early, **late}
    group = f"{topic}-g"
    consume_and_commit(broker, group, topic, len(stored))
    keys = [(topic, p) for p in range(PARTITIONS)]
    ends = committed(broker, group)
    assert set(ends) == set(keys)

    # earliest: every partition's log start (byte 0 here)
    assert plan_of(broker, group, "--to-earliest") == {key: 0 for key in keys}
    assert execute(broker, group, "--to-earliest") == {key: 0 for key in keys}
    starts_at(broker, group, topic, stored, {key: 0 for key in keys})

    # latest: the log ends
    assert plan_of(broker, group, "--to-latest") == ends
    assert execute(broker, group, "--to-latest") == ends

    # a date and time: the first record written at or after it
    first_late = {(topic, p): min(offset for q, offset in late.values() if q == p) for p in range(PARTITIONS)}
    moment = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(middle_ms / 1000)) + f".{middle_ms % 1000:03d}+00:00"
    assert plan_of(broker, group, "--to-datetime", moment) == first_late
    assert execute(broker, group, "--to-datetime", moment) == first_late
    starts_at(broker, group, topic, stored, first_late)

    # an offset: a record's own, and one between records (inside the header of the batch that
    # holds the first late record: a consumer starts at that record)
    record = sorted(offset for p, offset in stored.values() if p == 1)[5]
    new = execute(broker, group, "--to-offset", str(record), "--topic", f"{topic}:1")
    assert new[(topic, 1)] == record
    assert new == {**first_late, (topic, 1): record}  # the other partitions untouched
    starts_at(broker, group, topic, stored, new)
    between = first_late[(topic, 1)] - 1
    assert between not in {offset for p, offset in stored.values() if p == 1}
    assert execute(broker, group, "--to-offset", str(between), "--topic", f"{topic}:1")[(topic, 1)] == between
    starts_at(broker, group, topic, stored, first_late)

    # a shift: from the committed offsets, clamped into the log
    execute(broker, group, "--to-latest")
    back = 300
    shifted = plan_of(broker, group, "--shift-by", str(-back))
    assert shifted == {key: max(0, end - back) for key, end in ends.items()}
    assert execute(broker, group, "--shift-by", str(-back)) == shifted
    starts_at(broker, group, topic, stored, shifted)
    assert execute(broker, group, "--shift-by", "-1000000000") == {key: 0 for key in keys}  # clamped
    assert execute(broker, group, "--shift-by", "1000000000") == ends

    # outside the log: refused, nothing written
    outside = reset(broker, group, "--to-offset", str(10**9), "--execute")
    assert outside.returncode == 2 and "outside the log" in outside.stdout
    assert "nothing written" in outside.stdout
    assert committed(broker, group) == ends


def test_a_new_group_gets_offsets_for_the_topics_named(broker, topic):
    stored = produce(broker, topic, 20)
    group = f"{topic}-new"
    run = reset(broker, group, "--to-latest", "--topic", f"{topic}:0,2")
    assert run.returncode == 0, run.stderr
    assert "(Dead)" in run.stdout and "does not exist yet" in run.stdout
    assert groups_tool(broker, "--describe", "--group", group).returncode == 1, "a dry run made nothing"
    new = execute(broker, group, "--to-earliest", "--topic", f"{topic}:0,2")
    assert new == {(topic, 0): 0, (topic, 2): 0}
    only = {value: place for value, place in stored.items() if place[0] in (0, 2)}
    starts_at(broker, group, topic, only, {(topic, 0): 0, (topic, 2): 0}, **{"auto.offset.reset": "latest"})
    assert reset(broker, f"{topic}-none", "--to-earliest").returncode == 2, "no commits, no topic named"
    assert reset(broker, group, "--to-earliest", "--topic", f"{topic}:9").returncode == 2
    assert reset(broker, group, "--to-earliest", "--topic", "no-such-topic-here").returncode == 2


# --- deleting -------------------------------------------------------------------------

def test_delete_an_inactive_group(broker, topic):
    stored = produce(broker, topic, 8)
    group = f"{topic}-g"
    consume_and_commit(broker, group, topic, len(stored))
    assert group in tool_json(broker, "--list")["groups"]
    run = groups_tool(broker, "--delete", "--group", group)
    assert run.returncode == 0, run.stderr
    assert f"deleted consumer group {group}" in run.stdout
    assert group not in tool_json(broker, "--list")["groups"]
    assert groups_tool(broker, "--describe", "--group", group).returncode == 1
    again = groups_tool(broker, "--delete", "--group", group, "--json")
    assert again.returncode == 1 and "GROUP_ID_NOT_FOUND" in again.stderr
    consumer = member(broker, group)  # its commits went with it: a new member starts from the beginning
    consumer.subscribe([topic])
    try:
        assert set(read([consumer], len(stored))) == set(stored)
    finally:
        consumer.close()


def test_describe_right_after_a_restart_waits_for_the_commits_to_load(tmp_path):
    """The coordinator answers COORDINATOR_LOAD_IN_PROGRESS while it reads
    ``__consumer_offsets`` after a start: the tool asks again."""
    with LocalBroker(tmp_path / "restarted", num_workers=2, num_partitions=PARTITIONS,
                     group_initial_rebalance_delay_ms=0) as restarted:
        stored = produce(restarted, "restarts", 20)
        consume_and_commit(restarted, "survivors", "restarts", len(stored))
        before = committed(restarted, "survivors")
        restarted.stop(signal.SIGKILL)
        restarted.start()
        run = groups_tool(restarted, "--describe", "--group", "survivors", "--json")
        assert run.returncode == 0, run.stderr
        assert {(row["topic"], row["partition"]): row["committed_offset"]
                for row in json.loads(run.stdout)["partitions"]} == before


# --- errors -----------------------------------------------------------------------------

BS = ["--bootstrap-server", "127.0.0.1:1"]  # never contacted: the arguments are refused first


@pytest.mark.parametrize("args", [
    [*BS, "--zookeeper", "127.0.0.1:1"], ["--bootstrap-server", "nohost"], ["--bootstrap-server", "h:99999"],
    [*BS, "--zk-timeout-ms", "100"], [*BS, "--group", "g", "--reset-offsets", "--shift-by", "x"],
    [*BS, "--group", "g", "--reset-offsets", "--to-earliest", "--topic", "t:x"],
    [*BS, "--group", "g", "--reset-offsets", "--to-earliest", "--shift-by", "1"],
    [*BS, "--group", "g", "--shift-by", "1"], [*BS, "--describe"], [*BS, "--group", ""],
    ["--zookeeper", "127.0.0.1:1", "--group", "g", "--reset-offsets", "--shift-by", "5"],
], ids=["both-ways-in", "no-port", "bad-port", "zk-timeout", "shift-not-a-number", "bad-partition", "two-targets",
        "shift-without-reset", "describe-without-group", "empty-group", "zookeeper-shift"])
def test_usage_errors_exit_2(args):
    run = subprocess.run([GROUPS_SCRIPT, *args], capture_output=True, text=True, timeout=30, cwd=REPO)
    assert run.returncode == 2, run.stderr
    assert run.stdout == ""
    assert run.stderr.startswith("usage:") or run.stderr.startswith("mpbroker-groups: "), run.stderr


def test_no_broker_answering_exits_3():
    run = subprocess.run([GROUPS_SCRIPT, *BS, "--list", "--broker-timeout-ms", "500"], capture_output=True, text=True,
                         timeout=30, cwd=REPO)
    assert run.returncode == 3, run.stderr
    assert "no broker at 127.0.0.1:1 answered" in run.stderr


# --- the README's recipe -------------------------------------------------------------------

def test_the_readme_modern_groups_block_runs(broker):
    """The README's ``modern-groups`` block, as written but for the broker's address."""
    from tests.readme.readme_blocks import block, commands

    produce(broker, "visits", 2, prefix="visit")
    scripts = os.path.dirname(sys.executable)
    for command in commands(block("modern-groups")):
        command = command.replace("localhost:9093", broker.bootstrap)
        command = command.replace("mpbroker-groups ", f"{scripts}/mpbroker-groups ")
        run = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=60, cwd=REPO)
        assert run.returncode == 0, (command, run.stdout, run.stderr)
        if "--describe" in command:
            assert "group readers: Empty" in run.stdout and "visits" in run.stdout, run.stdout
    assert "readers" not in tool_json(broker, "--list")["groups"], "the block ends by deleting the group"
