"""A leader that may not act for the moment holds its acknowledged produces (the
worker's ``ProduceHandler`` with a real ``ReplicaManager``, real Logs and a real
flusher): a roles message announced and not applied yet, or a lapsed ZooKeeper lease,
used to refuse each produce at once (NOT_LEADER) while the next one, a moment later,
was taken. A pipelining idempotent client then saw its later request with a sequence
gap (OUT_OF_ORDER_SEQUENCE_NUMBER) and librdkafka bumped its epoch and sent again what
may have been stored: the fault schedules' "resent after an epoch bump". Every ISR
change of any partition is a roles message, so those moments were many (seed
613522061's brokers logged dozens of refused group commits)."""

import pytest

from mpbroker.codec.errors import ErrorCode
from mpbroker.codec.message import encode_message
from mpbroker.config.broker_config import config_from_properties
from mpbroker.ipc import messages
from mpbroker.ipc.messages import Mode
from mpbroker.ipc.partition_table import PartitionTable
from mpbroker.segments.log_manager import LogManager
from mpbroker.workers import produce_handler
from mpbroker.workers.flusher import Flusher
from mpbroker.workers.produce_handler import ProduceHandler
from mpbroker.workers.publisher import Publisher
from mpbroker.workers.replication import ReplicaManager

FOREVER_MS = 1 << 62


class Leader:
    """Broker 1 leading t-0 (ISR 1 alone, ``min.insync.replicas`` 1); ``answers`` are
    what its worker queued for the acceptor."""

    def __init__(self, tmp_path):
        self.config, _ = config_from_properties({"log.dir": str(tmp_path), "brokerid": "1"})
        self.logs = LogManager(str(tmp_path))
        publisher = Publisher(PartitionTable(8))
        self.flusher = Flusher([0] * 64, threads=1)
        self.answers = []
        self.roles_seq = 0
        self.lease_ms = FOREVER_MS
        self.replication = ReplicaManager(1, self.logs, publisher, self.config, self._answer,
                                          request_isr=lambda **fields: None, lease=lambda: self.lease_ms,
                                          roles_seq=lambda: self.roles_seq)
        self.replication.apply_roles([{"topic": "t", "partition": 0, "role": "leader", "leader_epoch": 0,
                                       "isr": [1], "replicas": [1], "version": 0}])
        self.handler = ProduceHandler(self.logs, publisher, self.flusher, self.config, self._answer,
                                      self.replication)
        self.next_id = 0

    def _answer(self, kind, parts):
        self.answers.append((kind, b"".join(parts)))

    def produce(self, payload: bytes, mode=Mode.ACK_APPEND, topic="t") -> int:
        """One produce request through the ring, as the acceptor routes it; its id."""
        self.next_id += 1
        body = b"".join(messages.entry_parts(self.next_id, topic.encode(), 0, mode, encode_message(payload)))
        self.handler.handle([(messages.KIND_PRODUCE_BATCH, memoryview(body))])
        return self.next_id

    def acks(self) -> dict:
        """request id -> (error, offset) of the ACKs queued so far."""
        found = {}
        for kind, body in self.answers:
            if kind == messages.KIND_ACK:
                request_id, error, _partition, offset, _next, _reason = messages.decode_ack(memoryview(body))
                found[request_id] = (error, offset)
        return found

    def closes(self) -> list:
        return [messages.decode_close(memoryview(body))[0] for kind, body in self.answers
                if kind == messages.KIND_CLOSE]

    def roles_applied(self) -> None:
        """The announced roles message arrives (the worker's ``_on_roles``)."""
        self.replication.applied_seq = self.roles_seq
        self.handler.release_held()


@pytest.fixture
def leader(tmp_path):
    made = Leader(tmp_path)
    yield made
    made.flusher.stop()
    made.logs.close()


def test_produces_wait_for_an_announced_roles_message_and_are_taken_in_order(leader):
    first = leader.produce(b"before")
    leader.roles_seq = 7  # announced, not applied: this leader may have lost the lead
    second = leader.produce(b"pipelined 1")
    third = leader.produce(b"pipelined 2")
    assert set(leader.acks()) == {first}, "a produce was answered before the roles came"
    leader.roles_applied()
    acks = leader.acks()
    assert [acks[request][0] for request in (first, second, third)] == [ErrorCode.NO_ERROR] * 3
    assert acks[first][1] < acks[second][1] < acks[third][1]


def test_a_lapsed_lease_holds_produces_until_a_tick_finds_it_renewed(leader):
    leader.lease_ms = 0
    held = leader.produce(b"during the lapse")
    leader.handler.release_held(now=leader.handler._held_since_ms + 50)
    assert leader.acks() == {}
    leader.lease_ms = FOREVER_MS
    leader.handler.release_held(now=leader.handler._held_since_ms + 150)
    assert leader.acks()[held][0] == ErrorCode.NO_ERROR


def test_held_produces_are_refused_when_the_leader_still_may_not_act_after_the_limit(leader):
    leader.roles_seq = 7
    first = leader.produce(b"one")
    second = leader.produce(b"two")
    since = leader.handler._held_since_ms
    leader.handler.release_held(now=since + produce_handler.HOLD_MAX_MS - 1)
    assert leader.acks() == {}
    leader.handler.release_held(now=since + produce_handler.HOLD_MAX_MS)
    assert leader.acks() == {first: (ErrorCode.NOT_LEADER, -1), second: (ErrorCode.NOT_LEADER, -1)}
    assert leader.logs.get("t", 0).log_end == 0


def test_fire_and_forget_is_refused_at_once_and_a_deleted_topics_held_produces_are_judged_first(leader):
    leader.roles_seq = 7
    held = leader.produce(b"acknowledged")
    closed = leader.produce(b"fire and forget", mode=Mode.FIRE_AND_FORGET)
    assert leader.closes() == [closed] and leader.acks() == {}
    leader.handler.release_held(topic="t")  # the topic's deletion comes next in the ring
    assert leader.acks() == {held: (ErrorCode.NOT_LEADER, -1)}
