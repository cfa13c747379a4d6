"""Modern consumer groups against a real broker, with the clients people use
(kafka-python, confluent-kafka, aiokafka, kcat), default client settings plus the
bootstrap address (and a shorter session timeout where a test waits for one):
every message read once across a group's members, a clean leave or a killed member
handing its partitions over, committed offsets surviving a broker SIGKILL, the admin
calls on groups (list, describe, delete)."""

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from kafka import KafkaConsumer
from kafka import TopicPartition as KafkaPythonTopicPartition

from mpbroker.testing.local_broker import LocalBroker
from tests.kafka.conftest import assert_healthy
from tests.polling import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

PARTITIONS = 4
TIMEOUT_S = 60.0


# A killed member's session, and how soon the survivor's heartbeat hears of the rebalance: short,
# so that the test waits seconds, not Kafka's 6 s minimum session (lowered on this broker).
MIN_SESSION_MS = 1000
KILLED_SESSION = {"session.timeout.ms": 2000, "heartbeat.interval.ms": 300}


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with LocalBroker(tmp_path_factory.mktemp("groups"), num_workers=2, num_partitions=PARTITIONS,
                     group_initial_rebalance_delay_ms=0, offsets_topic_num_partitions=4,
                     group_min_session_timeout_ms=MIN_SESSION_MS) as broker:
        yield broker
        assert_healthy(broker)


@pytest.fixture
def topic(request):
    return "".join(c if c.isalnum() else "-" for c in request.node.name)[:50].strip("-") + f"-{time.time_ns() % 10**6}"


def produce(broker, topic, count, prefix="m"):
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(count):
        producer.produce(topic, value=f"{prefix}-{i}".encode(), partition=i % PARTITIONS)
    assert producer.flush(TIMEOUT_S) == 0
    return {f"{prefix}-{i}".encode() for i in range(count)}


def confluent_consumer(broker, group, **config):
    return Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                     **config})


def poll_until(consumers, want: int, timeout=TIMEOUT_S) -> list:
    """Values read by the confluent-kafka ``consumers`` (polled in turn) until ``want``."""
    got = []
    deadline = time.monotonic() + timeout
    while len(got) < want and time.monotonic() < deadline:
        for consumer in consumers:
            message = consumer.poll(0.2)
            if message is None:
                continue
            if message.error():
                assert message.error().code() == KafkaError._PARTITION_EOF, message.error()
                continue
            got.append(message.value())
    return got


def test_confluent_two_members_read_everything_once(broker, topic):
    sent = produce(broker, topic, 400)
    first = confluent_consumer(broker, f"{topic}-g")
    second = confluent_consumer(broker, f"{topic}-g")
    try:
        first.subscribe([topic])
        second.subscribe([topic])
        got = poll_until([first, second], len(sent))
        assert sorted(got) == sorted(sent)
        wait_for(lambda: len(first.assignment()) + len(second.assignment()) == PARTITIONS and
                 first.assignment() and second.assignment(), timeout=TIMEOUT_S,
                 what="both members hold partitions")
        assert not set(first.assignment()) & set(second.assignment())
    finally:
        first.close()
        second.close()


def test_confluent_commits_carry_over_to_the_next_member(broker, topic):
    sent = produce(broker, topic, 100)
    group = f"{topic}-g"
    consumer = confluent_consumer(broker, group, **{"enable.auto.commit": False})
    consumer.subscribe([topic])
    got = poll_until([consumer], len(sent))
    assert sorted(got) == sorted(sent)
    consumer.commit(asynchronous=False)
    committed = consumer.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=10)
    assert all(tp.offset > 0 for tp in committed), committed
    consumer.close()
    more = produce(broker, topic, 40, prefix="more")
    consumer = confluent_consumer(broker, group)
    consumer.subscribe([topic])
    try:
        got = poll_until([consumer], len(more))
        assert sorted(got) == sorted(more), "the second member continued at the commits"
    finally:
        consumer.close()


def test_clean_leave_hands_partitions_over_at_once(broker, topic):
    sent = produce(broker, topic, 40)
    group = f"{topic}-g"
    staying = confluent_consumer(broker, group, **{"session.timeout.ms": 45000})
    leaving = confluent_consumer(broker, group, **{"session.timeout.ms": 45000})
    staying.subscribe([topic])
    leaving.subscribe([topic])
    poll_until([staying, leaving], len(sent))
    wait_for(lambda: (staying.poll(0.1), len(staying.assignment()) + len(leaving.assignment()) == PARTITIONS)[1]
             and bool(leaving.assignment()), timeout=TIMEOUT_S, what="both members assigned")
    leaving.close()
    began = time.monotonic()
    wait_for(lambda: (staying.poll(0.1), len(staying.assignment()) == PARTITIONS)[1], timeout=TIMEOUT_S,
             what="the member that stayed holds every partition")
    assert time.monotonic() - began < 15, "a clean leave does not wait for the 45 s session timeout"
    staying.close()


KILLED_MEMBER = f"SESSION = {KILLED_SESSION!r}\n" + textwrap.dedent("""
    import sys, time
    from confluent_kafka import Consumer
    consumer = Consumer({"bootstrap.servers": sys.argv[1], "group.id": sys.argv[2], **SESSION,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([sys.argv[3]])
    while True:
        consumer.poll(0.2)
        if consumer.assignment():
            print("assigned", flush=True)
            break
    while True:
        consumer.poll(0.2)
""")


def test_killed_member_partitions_move_within_the_session_timeout(broker, topic, tmp_path):
    sent = produce(broker, topic, 200)
    group = f"{topic}-g"
    survivor = confluent_consumer(broker, group, **KILLED_SESSION)
    survivor.subscribe([topic])
    read = set()

    def poll_once():  # what has arrived (not one message per poll: 200 of them, each after a pause)
        for message in survivor.consume(500, 0.1):
            if not message.error():
                read.add(message.value())
        return survivor.assignment()
    script = tmp_path / "member.py"
    script.write_text(KILLED_MEMBER)
    member = subprocess.Popen([sys.executable, str(script), broker.bootstrap, group, topic],
                              stdout=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: 0 < len(poll_once()) < PARTITIONS, timeout=TIMEOUT_S, what="the group split")
        assert member.stdout.readline().strip() == "assigned"
        os.kill(member.pid, signal.SIGKILL)
        member.wait()
        killed_at = time.monotonic()
        wait_for(lambda: len(poll_once()) == PARTITIONS, timeout=30,
                 what="the survivor took the killed member's partitions")
        assert time.monotonic() - killed_at < KILLED_SESSION["session.timeout.ms"] / 1000 + 10, \
            "within the session timeout and a rebalance"
        wait_for(lambda: (poll_once(), read == sent)[1], timeout=30, what="every message read",
                 detail=lambda: f"{len(read)} of {len(sent)}")
    finally:
        member.kill()
        survivor.close()


def test_kafka_python_group_commits_and_a_broker_kill_keeps_them(broker, topic, tmp_path_factory):
    sent = produce(broker, topic, 100)
    group = f"{topic}-g"
    consumer = KafkaConsumer(topic, bootstrap_servers=broker.bootstrap, group_id=group,
                             auto_offset_reset="earliest", enable_auto_commit=False, consumer_timeout_ms=20000)
    got = []
    for message in consumer:
        got.append(message.value)
        if len(got) == len(sent):
            break
    assert sorted(got) == sorted(sent)
    consumer.commit()
    partitions = [KafkaPythonTopicPartition(topic, p) for p in range(PARTITIONS)]
    before = {tp.partition: consumer.committed(tp) for tp in partitions}
    consumer.close()
    assert sum(before.values()) > 0
    broker.stop(signal.SIGKILL)
    broker.start()
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=group, enable_auto_commit=False)
    try:
        after = {tp.partition: consumer.committed(tp) for tp in partitions}
    finally:
        consumer.close()
    assert after == before


def test_aiokafka_group_reads_everything(broker, topic):
    from aiokafka import AIOKafkaConsumer

    sent = produce(broker, topic, 60)

    async def run():
        consumer = AIOKafkaConsumer(topic, bootstrap_servers=broker.bootstrap, group_id=f"{topic}-g",
                                    auto_offset_reset="earliest")
        await consumer.start()
        got = []
        try:
            async with asyncio.timeout(TIMEOUT_S):
                async for message in consumer:
                    got.append(message.value)
                    if len(got) == len(sent):
                        break
            await consumer.commit()
        finally:
            await consumer.stop()
        return got
    assert sorted(asyncio.run(run())) == sorted(sent)


def test_kcat_group_consumes(broker, topic):
    sent = produce(broker, topic, 30)
    run = subprocess.run(["kcat", "-b", broker.bootstrap, "-G", f"{topic}-g", "-o", "beginning", "-c",
                          str(len(sent)), "-e", "-q", topic], capture_output=True, text=True, timeout=TIMEOUT_S)
    assert run.returncode == 0, run.stderr
    assert {line.encode() for line in run.stdout.split()} == sent


def test_admin_lists_describes_and_deletes_groups(broker, topic):
    produce(broker, topic, 10)
    group = f"{topic}-g"
    consumer = confluent_consumer(broker, group)
    consumer.subscribe([topic])
    poll_until([consumer], 10)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    listed = admin.list_consumer_groups().result(timeout=10)
    assert group in {g.group_id for g in listed.valid}
    described = admin.describe_consumer_groups([group])[group].result(timeout=10)
    assert str(described.state).endswith("STABLE")
    assert len(described.members) == 1
    assert {tp.partition for tp in described.members[0].assignment.topic_partitions} == set(range(PARTITIONS))
    refused = admin.delete_consumer_groups([group])[group]
    with pytest.raises(Exception, match="NON_EMPTY_GROUP"):
        refused.result(timeout=10)
    consumer.commit(asynchronous=False)
    consumer.close()
    admin.delete_consumer_groups([group])[group].result(timeout=10)
    assert group not in {g.group_id for g in admin.list_consumer_groups().result(timeout=10).valid}
    fresh = confluent_consumer(broker, group)
    try:
        committed = fresh.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=10)
        assert all(tp.offset < 0 for tp in committed), "a deleted group's commits are gone"
    finally:
        fresh.close()


def test_the_offsets_topic_cannot_be_deleted(broker, topic):
    """``__consumer_offsets`` holds every group's commits: DeleteTopics refuses it."""
    produce(broker, topic, 5)
    consumer = confluent_consumer(broker, f"{topic}-g", **{"enable.auto.commit": False})
    consumer.subscribe([topic])
    poll_until([consumer], 5)
    consumer.commit(asynchronous=False)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    with pytest.raises(Exception, match="INVALID_REQUEST"):
        admin.delete_topics(["__consumer_offsets"], operation_timeout=10)["__consumer_offsets"].result(timeout=20)
    committed = consumer.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=10)
    assert sum(tp.offset > 0 for tp in committed) >= 1
    consumer.close()
