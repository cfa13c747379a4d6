"""A follower's truncation after a leadership change (KIP-101/279), on a real Log in a
real directory, through the worker's own ReplicaFetcher: the follower asks where its
latest epoch ended in the leader's log and cuts there; when it lacks the epoch the
leader answers with, it cuts at the end of its own largest epoch below that and asks
again, until the logs agree (never at its own high watermark)."""

from mpbroker.codec.message import encode_message
from mpbroker.ipc.partition_table import PartitionTable, Role
from mpbroker.segments import LogConfig
from mpbroker.segments.leader_epochs import UNDEFINED
from mpbroker.segments.log import Log
from mpbroker.workers.publisher import Publisher
from mpbroker.workers.replica_fetcher import ReplicaFetcher
from mpbroker.workers.replication import Replica
from tests.workers.fetcher_parts import Config, Loop


def follower_with(tmp_path, epochs) -> tuple:
    """A follower's log holding ``epochs`` ``[(epoch, bytes written in it)]``."""
    log = Log.open(str(tmp_path), "t", 0, LogConfig(), recover=False)
    for epoch, count in epochs:
        log.assign_epoch(epoch)
        log.append_many([b"".join(encode_message(b"e%d-%d" % (epoch, i)) for i in range(count))], count)
    log.flush()
    publisher = Publisher(PartitionTable(4))
    publisher.add(log)
    checkpoints = []
    fetcher = ReplicaFetcher(Loop(), 2, Config(), None, publisher, None, None, lambda: checkpoints.append(1))
    replica = Replica(log)
    replica.role, replica.leader_epoch, replica.needs_truncation = Role.FOLLOWER, 9, True
    return log, fetcher, replica, checkpoints


def starts(log) -> list:
    return [(entry.epoch, entry.start_offset) for entry in log.leader_epochs.entries]


def test_the_follower_cuts_where_its_latest_epoch_ended_in_the_leaders_log(tmp_path):
    log, fetcher, replica, checkpoints = follower_with(tmp_path, [(1, 3), (2, 3)])
    second = starts(log)[1][1]
    leader_end_of_2 = second + 20  # the leader kept less of epoch 2 than we have
    assert fetcher._truncate_after_epoch_answer(replica, 2, leader_end_of_2)
    assert log.log_end == leader_end_of_2 and not replica.needs_truncation and checkpoints


def test_lacking_the_leaders_epoch_it_cuts_at_its_own_and_asks_again(tmp_path):
    # Follower epochs 1, 2, 4; the leader's 1, 3, 5 (two quick leader changes apart).
    log, fetcher, replica, _ = follower_with(tmp_path, [(1, 2), (2, 2), (4, 2)])
    (_, start_1), (_, start_2), (_, start_4) = starts(log)
    # We ask for 4; the leader's largest epoch at or below it is 3, ending past our end.
    assert fetcher._truncate_after_epoch_answer(replica, 3, log.log_end + 100)
    assert log.log_end == start_4  # the end of our epoch 2, the largest we have below 3
    assert replica.needs_truncation and log.leader_epochs.latest.epoch == 2  # and we ask again, for 2
    # The leader's epoch 1 ended inside our epoch 2: the logs part there.
    assert fetcher._truncate_after_epoch_answer(replica, 1, start_2 + 5)
    assert log.log_end == start_2 and not replica.needs_truncation  # our end of 1 is the smaller
    assert starts(log) == [(1, start_1)]


def test_with_no_epoch_as_old_as_the_leaders_answer_nothing_is_kept(tmp_path):
    log, fetcher, replica, _ = follower_with(tmp_path, [(2, 3)])
    assert fetcher._truncate_after_epoch_answer(replica, 1, 5)
    assert log.log_end == log.log_start == 0 and starts(log) == []
    (tmp_path / "other").mkdir()
    log2, fetcher2, replica2, _ = follower_with(tmp_path / "other", [(2, 3)])
    assert fetcher2._truncate_after_epoch_answer(replica2, UNDEFINED, UNDEFINED)
    assert log2.log_end == 0
