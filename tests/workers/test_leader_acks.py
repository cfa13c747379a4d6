"""A leader's durability-2 acknowledgements (``ReplicaManager``), on a real Log and a
real partition table: a produce is answered once the high watermark (the smallest log
end of the ISR) covers its set, in log order, never before; an ISR that shrank below
``min.insync.replicas`` refuses what it covers; without the ZooKeeper lease nothing is
answered until ``tick`` finds it again."""

import pytest

from mpbroker.codec.errors import ErrorCode
from mpbroker.codec.message import encode_message
from mpbroker.ipc import messages
from mpbroker.ipc.partition_table import PartitionTable
from mpbroker.segments import LogConfig
from mpbroker.segments.log import Log
from mpbroker.workers.publisher import Publisher
from mpbroker.workers.replication import ReplicaManager

FOREVER_MS = 1 << 62


class Config:
    min_insync_replicas = 2
    replica_lag_time_max_ms = 10_000


class Logs:
    """The worker's logs, as the manager asks for them: here the one partition's."""

    def __init__(self, partition_log):
        self.partition_log = partition_log

    def get(self, topic, partition):
        return self.partition_log

    get_or_create = get


class Leader:
    """Broker 1 leading t-0 with followers 2 and 3; ``acks`` are the answers it sent."""

    def __init__(self, tmp_path):
        self.log = Log.open(str(tmp_path), "t", 0, LogConfig(min_insync_replicas=Config.min_insync_replicas), recover=False)
        self.acks = []
        self.lease_ms = FOREVER_MS
        publisher = Publisher(PartitionTable(4))
        publisher.add(self.log)
        self.isr_requests = []  # the ISRs asked of the supervisor
        self.flush_requests = 0
        self.manager = ReplicaManager(1, Logs(self.log), publisher, Config(), self._answer,
                                      request_isr=lambda **fields: self.isr_requests.append(fields["isr"]),
                                      lease=lambda: self.lease_ms, request_flush=self._request_flush)
        self.manager.apply_roles([{"topic": "t", "partition": 0, "role": "leader", "leader_epoch": 1,
                                   "isr": [1, 2, 3], "replicas": [1, 2, 3], "version": 0}])
        self.replica = self.manager.get("t", 0)
        self.next_id = 0

    def _request_flush(self, partition_log):
        assert partition_log is self.log
        self.flush_requests += 1

    def flush(self) -> None:
        """The flush the manager asked for completes."""
        self.log.flush()
        self.manager.flushed(self.log)

    def _answer(self, kind, parts):
        assert kind == messages.KIND_ACK
        request_id, error, _partition, offset, next_offset, _reason = messages.decode_ack(
            memoryview(b"".join(parts)))
        self.acks.append((request_id, error, offset, next_offset))

    def produce(self) -> tuple:
        """Append one set and wait for the replicas; ``(request id, offset, next offset)``."""
        data = encode_message(b"m%d" % self.next_id)
        offset = self.log.log_end
        self.log.append_many([data], 1)
        self.next_id += 1
        self.manager.wait_for_replicas(self.replica, self.next_id, 0, offset, self.log.log_end)
        self.manager.appended(self.replica)
        return self.next_id, offset, self.log.log_end

    def report(self, follower: int, offset: int) -> None:
        self.manager.positions(follower, [("t", 0, 1, offset)])


@pytest.fixture
def leader(tmp_path):
    made = Leader(tmp_path)
    yield made
    made.log.close()


def test_each_produce_is_answered_once_every_isr_member_has_it_in_log_order(leader):
    sets = [leader.produce() for _ in range(5)]
    assert leader.acks == []
    leader.report(2, sets[2][2])  # follower 2 has the first three sets, 3 has none yet
    assert leader.acks == []
    leader.report(3, sets[0][2])
    assert leader.acks == [(sets[0][0], ErrorCode.NO_ERROR, sets[0][1], sets[0][2])]
    leader.report(3, sets[3][2])  # 2 still holds the watermark at the third set
    assert [ack[0] for ack in leader.acks] == [sets[0][0], sets[1][0], sets[2][0]]
    leader.report(2, sets[4][2])
    assert leader.acks == [(request_id, ErrorCode.NO_ERROR, offset, next_offset)
                           for request_id, offset, next_offset in sets[:4]]
    leader.report(3, sets[4][2])
    assert [ack[0] for ack in leader.acks] == [request_id for request_id, _, _ in sets]
    assert leader.replica.high_watermark == leader.log.log_end and not leader.replica.waiters


def test_what_an_isr_below_min_insync_covers_is_refused_not_acknowledged(leader):
    first, second = leader.produce(), leader.produce()
    leader.manager.apply_roles([{"topic": "t", "partition": 0, "role": "leader", "leader_epoch": 1,
                                 "isr": [1], "replicas": [1, 2, 3], "version": 1}])
    # The ISR is the leader alone now: what it holds is refused at once (no flush awaited).
    assert [(ack[0], ack[1], ack[2]) for ack in leader.acks] == [
        (first[0], ErrorCode.NOT_ENOUGH_REPLICAS, -1), (second[0], ErrorCode.NOT_ENOUGH_REPLICAS, -1)]


def test_a_leader_alone_in_its_isr_shows_readers_only_what_it_flushed(leader):
    """No other copy: a power cut here would take the unflushed tail, and the leader
    comes back with what its disk kept, so readers (the high watermark) stop at the
    flushed end until a flush covers more (a consumer read a message the log then wrote
    again at the same offset: a divergent read in the fault schedules)."""
    leader.manager.apply_roles([{"topic": "t", "partition": 0, "role": "leader", "leader_epoch": 1,
                                 "isr": [1], "replicas": [1, 2, 3], "version": 1}])
    leader.log.flush()
    leader.manager.flushed(leader.log)
    flushed = leader.log.flushed_end
    assert leader.replica.high_watermark == flushed
    leader.produce()
    leader.produce()
    assert leader.log.log_end > flushed and leader.replica.high_watermark == flushed
    leader.log.flush()
    leader.manager.flushed(leader.log)
    assert leader.replica.high_watermark == leader.log.log_end == leader.log.flushed_end
    # A follower back in the ISR: its copy counts again, flushed or not.
    leader.manager.apply_roles([{"topic": "t", "partition": 0, "role": "leader", "leader_epoch": 1,
                                 "isr": [1, 2], "replicas": [1, 2, 3], "version": 2}])
    leader.report(2, leader.log.log_end)
    _, _, next_offset = leader.produce()
    leader.report(2, next_offset)
    assert leader.log.flushed_end < next_offset == leader.replica.high_watermark


def test_a_follower_rejoining_a_lone_leader_counts_only_once_zookeeper_lists_it(leader):
    """While the ISR ZooKeeper holds is the leader alone, a power cut here elects it again
    with what its disk kept: a follower's copy must not lift the high watermark past the
    flushed end until the ISR that names the follower is applied (fault schedule
    161042648 read a message the restarted leader then wrote again, after a heal)."""
    leader.manager.apply_roles([{"topic": "t", "partition": 0, "role": "leader", "leader_epoch": 1,
                                 "isr": [1], "replicas": [1, 2, 3], "version": 1}])
    leader.flush()
    flushed = leader.log.flushed_end
    leader.produce()
    leader.report(2, leader.log.log_end)  # caught up: the leader asks for ISR [1, 2]
    assert leader.isr_requests == [[1, 2]]
    assert leader.log.log_end > flushed == leader.replica.high_watermark
    leader.manager.apply_roles([{"topic": "t", "partition": 0, "role": "leader", "leader_epoch": 1,
                                 "isr": [1, 2], "replicas": [1, 2, 3], "version": 2}])
    assert leader.replica.high_watermark == leader.log.log_end > leader.log.flushed_end


def test_a_leader_flushes_what_readers_saw_before_it_asks_to_lead_alone(leader):
    """Shrinking the ISR to the leader alone leaves the only copy of what is below the
    high watermark on its disk: it is flushed first, and the shrink is asked for after."""
    _, _, next_offset = leader.produce()
    leader.report(2, next_offset)
    leader.report(3, next_offset)
    assert leader.replica.high_watermark == next_offset > leader.log.flushed_end
    lagging = 10**15  # both followers' last catch-up is far behind this clock
    leader.manager.tick(lagging)
    assert leader.isr_requests == [] and leader.flush_requests == 1
    leader.flush()
    leader.manager.tick(lagging)
    assert leader.isr_requests == [[1]]


def test_a_leader_the_controller_leaves_alone_flushes_at_once(leader):
    """The controller drops followers whose sessions ended: the leader flushes what its
    readers saw as soon as the ISR it applies is itself alone."""
    _, _, next_offset = leader.produce()
    leader.report(2, next_offset)
    leader.report(3, next_offset)
    assert leader.flush_requests == 0
    leader.manager.apply_roles([{"topic": "t", "partition": 0, "role": "leader", "leader_epoch": 1,
                                 "isr": [1], "replicas": [1, 2, 3], "version": 1}])
    assert leader.flush_requests == 1


def test_without_the_lease_nothing_is_answered_until_tick_finds_it_again(leader):
    request_id, offset, next_offset = leader.produce()
    leader.lease_ms = 0  # the registrar's ZooKeeper session may have expired
    leader.report(2, next_offset)
    leader.report(3, next_offset)
    assert leader.acks == [] and leader.replica.high_watermark == next_offset
    leader.manager.tick(0)
    assert leader.acks == []
    leader.lease_ms = FOREVER_MS
    leader.manager.tick(0)
    assert leader.acks == [(request_id, ErrorCode.NO_ERROR, offset, next_offset)]


def test_leaving_the_lead_answers_every_waiting_produce_not_leader_once(leader):
    sets = [leader.produce() for _ in range(3)]
    leader.report(2, sets[0][2])
    leader.report(3, sets[0][2])
    leader.manager.apply_roles([{"topic": "t", "partition": 0, "role": "follower", "leader": 2, "leader_epoch": 2,
                                 "host": "127.0.0.1", "port": 1, "isr": [2, 3], "replicas": [1, 2, 3],
                                 "version": 1}])
    assert leader.acks == [(sets[0][0], ErrorCode.NO_ERROR, sets[0][1], sets[0][2]),
                           (sets[1][0], ErrorCode.NOT_LEADER, -1, -1), (sets[2][0], ErrorCode.NOT_LEADER, -1, -1)]
    assert not leader.replica.waiters
    leader.manager.tick(0)
    assert len(leader.acks) == 3
