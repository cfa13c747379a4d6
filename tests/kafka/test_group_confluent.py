"""confluent-kafka (librdkafka) groups beyond ``test_groups.py``'s: the cooperative-sticky
assignor's incremental rebalances (three members join one by one and leave one by one;
a member keeps what it keeps, without a revoke, and every message is read once) and
static membership (``group.instance.id``: a member closed without leaving and back
within its session timeout gets its partitions again without a rebalance of the others;
a second client with the same instance id fences the first, which gets
FENCED_INSTANCE_ID as a fatal error)."""

import time

import pytest
from confluent_kafka import Consumer, KafkaError

from mpbroker.testing.local_broker import LocalBroker
from tests.kafka.conftest import assert_healthy
from tests.kafka.group_wire import GroupWire
from tests.kafka.test_groups import PARTITIONS, TIMEOUT_S, produce
from tests.polling import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with LocalBroker(tmp_path_factory.mktemp("group-confluent"), num_workers=2, num_partitions=PARTITIONS,
                     group_initial_rebalance_delay_ms=0, offsets_topic_num_partitions=4) as broker:
        yield broker
        assert_healthy(broker)


@pytest.fixture
def topic(request):
    return f"{request.node.name[:40]}-{time.time_ns() % 10**6}".replace("_", "-")


@pytest.fixture
def made():
    """Every Member a test made, closed at its end whatever happened (a librdkafka
    consumer left open spins on reconnecting once the broker is gone)."""
    members = []
    yield members
    for member in members:
        member.close()


class Member:
    """One consumer and what its rebalance callbacks said, in order."""

    def __init__(self, made, broker, group, topic, **config):
        made.append(self)
        self.events = []  # ("assign" | "revoke" | "lost", frozenset of partitions)
        self.errors = []
        self.read = []
        self.closed = False
        self.consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                                  "auto.offset.reset": "earliest", "error_cb": self.errors.append, **config})
        self.consumer.subscribe([topic], on_assign=lambda c, ps: self._event("assign", ps),
                                on_revoke=lambda c, ps: self._event("revoke", ps),
                                on_lost=lambda c, ps: self._event("lost", ps))

    def _event(self, kind, partitions):
        self.events.append((kind, frozenset(p.partition for p in partitions)))

    def poll(self, timeout=0.05):
        """What is there now (up to 500 messages), waiting at most ``timeout`` for the first."""
        for message in self.consumer.consume(500, timeout):
            if message.error():
                self.errors.append(message.error())
            else:
                self.read.append(message.value())

    def held(self) -> frozenset:
        return frozenset(p.partition for p in self.consumer.assignment())

    def close(self):
        if not self.closed:
            self.closed = True
            self.consumer.close()


def poll_all(members, until, what, timeout=TIMEOUT_S):
    def step():
        for member in members:
            member.poll()
        return until()
    wait_for(step, timeout=timeout, what=what,
             detail=lambda: [(m.held(), len(m.read), m.events[-3:], m.errors[-2:]) for m in members])


def settled(members) -> bool:
    """Every partition held by exactly one member, none idle."""
    held = [m.held() for m in members]
    return all(held) and sum(map(len, held)) == PARTITIONS and frozenset().union(*held) == frozenset(range(PARTITIONS))


def read_all(members, sent_so_far: int):
    poll_all(members, lambda: sum(len(m.read) for m in members) >= sent_so_far, f"{sent_so_far} messages read")


def test_cooperative_sticky_members_join_and_leave_one_by_one(broker, topic, made):
    group = f"{topic}-g"
    config = {"partition.assignment.strategy": "cooperative-sticky", "session.timeout.ms": 10000}
    sent = produce(broker, topic, 80, prefix="phase-0")
    members = []
    for n in range(3):  # joins: each newcomer takes partitions only from those that have more than their share
        before = {id(m): m.held() for m in members}
        marks = [len(m.events) for m in members]
        members.append(Member(made, broker, group, topic, **config))
        poll_all(members, lambda: settled(members), f"{len(members)} members settled")
        for member, mark in zip(members[:-1], marks):
            revoked = frozenset().union(*(ps for kind, ps in member.events[mark:] if kind in ("revoke", "lost")))
            assert revoked == before[id(member)] - member.held(), "only what moved away is revoked"
            assert member.held() <= before[id(member)], "a member that stays gets nothing new when one joins"
        sent |= produce(broker, topic, 80, prefix=f"phase-{n + 1}")
        read_all(members, len(sent))
    retired = []  # what the members that left had read
    while len(members) > 1:  # leaves: the ones that stay are given the leaver's partitions, and lose none
        leaving = members.pop()
        before = {id(m): m.held() for m in members}
        marks = [len(m.events) for m in members]
        leaving.close()
        retired += leaving.read
        assert_no_errors(leaving)
        poll_all(members, lambda: settled(members), f"{len(members)} members settled after a leave")
        for member, mark in zip(members, marks):
            assert {kind for kind, _ in member.events[mark:]} <= {"assign"}, \
                f"nothing revoked when a member leaves: {member.events[mark:]}, all: {member.events}"
            assert member.held() >= before[id(member)]
        sent |= produce(broker, topic, 80, prefix=f"after-leave-{len(members)}")
        read_all(members, len(sent) - len(retired))
    [last] = members
    last.close()
    assert_no_errors(last)
    assert sorted(retired + last.read) == sorted(sent), "every message read once across the members"


def assert_no_errors(member):
    assert not [e for e in member.errors if e.code() != KafkaError._PARTITION_EOF], member.errors


def group_members(broker, group):
    with GroupWire(broker) as wire:
        described = wire.describe(group)
    return described.group_state, sorted(m.group_instance_id for m in described.members)


def test_static_member_back_within_its_session_gets_its_partitions_without_a_rebalance(broker, topic, made):
    group = f"{topic}-g"
    config = {"session.timeout.ms": 30000}
    sent = produce(broker, topic, 40, prefix="before")
    a = Member(made, broker, group, topic, **config, **{"group.instance.id": "a"})
    b = Member(made, broker, group, topic, **config, **{"group.instance.id": "b"})
    poll_all([a, b], lambda: settled([a, b]) and len(a.read) + len(b.read) == len(sent), "a and b settled, all read")
    held_a, held_b, mark = a.held(), b.held(), len(b.events)

    a.close()  # a static member's close sends no LeaveGroup: the group keeps its place
    assert group_members(broker, group) == ("Stable", ["a", "b"])
    sent |= produce(broker, topic, 40, prefix="while-a-was-away")
    back = Member(made, broker, group, topic, **config, **{"group.instance.id": "a"})
    poll_all([back, b], lambda: back.held(), "a back, assigned")
    assert back.held() == held_a, "the same partitions again"
    poll_all([back, b], lambda: len(a.read) + len(back.read) + len(b.read) == len(sent), "everything read")
    assert b.events[mark:] == [] and b.held() == held_b, "b saw no rebalance"
    assert sorted(a.read + back.read + b.read) == sorted(sent), "read once: a's commits on close carried over"

    # A second client with the same instance id takes the place; the first is fenced.
    fencing = Member(made, broker, group, topic, **config, **{"group.instance.id": "a"})
    poll_all([back, fencing, b], lambda: back.errors and fencing.held() == held_a,
             "the first client fenced, the second holding a's partitions")
    # librdkafka raises FENCED_INSTANCE_ID as its fatal error (_FATAL, with that error's text)
    [fatal] = back.errors
    assert fatal.code() == KafkaError._FATAL and "Static consumer fenced" in fatal.str(), fatal
    assert b.events[mark:] == [] and b.held() == held_b, "b saw no rebalance"
    assert group_members(broker, group) == ("Stable", ["a", "b"])
    assert_no_errors(b)
    assert_no_errors(fencing)
