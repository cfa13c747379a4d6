"""Replicas of a record-batch topic in the worker, on real Logs in real directories:
the roles create the log in the topic's format (leader and follower alike; a log found
in the other format takes no role) and mark it replicated on disk before any byte
comes; a follower checks the batches its leader sent
(``scan_batches``), appends whole ones byte for byte and counts their records, grows
its fetch for a batch larger than it asked for and appends nothing of bad bytes; a
leader stamps the leader epoch into each batch it appends."""

import logging
import os

from mpbroker.codec.errors import ErrorCode
from mpbroker.codec.message import encode_message
from mpbroker.codec.responses import ReplicaFetchPartAnswer
from mpbroker.ipc.partition_table import PartitionTable, Role
from mpbroker.records import encode_batch, read_header
from mpbroker.records.batch import validate_batches
from mpbroker.segments import LogConfig
from mpbroker.segments.leader_epochs import LeaderEpochs
from mpbroker.segments.log import Log
from mpbroker.segments.log_manager import LogManager
from mpbroker.segments.naming import LEADER_EPOCH_FILE, RECORD_BATCHES_FILE, partition_dir_name
from mpbroker.workers import record_batches
from mpbroker.workers.publisher import Publisher
from mpbroker.workers.replica_fetcher import ReplicaFetcher
from mpbroker.workers.replication import Replica, ReplicaManager
from tests.workers.fetcher_parts import Config, Loop

EPOCH = 4


class ManagerConfig:
    min_insync_replicas = 1
    replica_lag_time_max_ms = 10_000


def entry(topic: str, role: str, **fields) -> dict:
    found = {"topic": topic, "partition": 0, "role": role, "leader": 1 if role == "leader" else 2,
             "host": "127.0.0.1", "port": 1, "leader_epoch": EPOCH, "isr": [1, 2], "replicas": [1, 2], "version": 0}
    found.update(fields)
    return found


def manager_on(tmp_path):
    logs = LogManager(str(tmp_path))
    manager = ReplicaManager(1, logs, Publisher(PartitionTable(8)), ManagerConfig(), lambda kind, parts: None,
                             request_isr=lambda **fields: None, lease=lambda: 1 << 62)
    return logs, manager


def test_a_role_marks_the_log_replicated_on_disk_before_any_byte(tmp_path):
    """A follower that never received a byte has no epoch to record, yet a restart must
    know its topic was replicated before the roles come again (the acceptor refuses a
    produce to it until then, ``roles_unknown_for``, keyed on the leader-epoch file): a
    broker restarted then took a produce the 0.7 way for such a topic."""
    logs, manager = manager_on(tmp_path)
    manager.apply_roles([entry("followed", "follower"), entry("unassigned", "none")])
    logs.close()
    directory = os.path.join(str(tmp_path), partition_dir_name("followed", 0))
    assert os.path.exists(os.path.join(directory, LEADER_EPOCH_FILE))
    assert LeaderEpochs.load(directory).entries == []
    assert logs.get("unassigned", 0) is None


def holds_batches(tmp_path, topic: str) -> bool:
    return os.path.exists(os.path.join(str(tmp_path), partition_dir_name(topic, 0), RECORD_BATCHES_FILE))


def test_the_roles_create_the_log_in_the_topics_format(tmp_path):
    logs, manager = manager_on(tmp_path)
    manager.apply_roles([entry("led", "leader", record_batches=True), entry("followed", "follower",
                                                                            record_batches=True),
                         entry("old", "leader", record_batches=False), entry("older", "follower")])
    assert logs.get("led", 0).record_batches and holds_batches(tmp_path, "led")
    assert logs.get("followed", 0).record_batches and holds_batches(tmp_path, "followed")
    assert not logs.get("old", 0).record_batches and not holds_batches(tmp_path, "old")
    assert not logs.get("older", 0).record_batches  # an entry without the field: 0.7 messages
    assert manager.get("led", 0).role == Role.LEADER and manager.get("followed", 0).role == Role.FOLLOWER


def test_a_log_in_the_other_format_takes_no_role(tmp_path, caplog):
    logs, manager = manager_on(tmp_path)
    logs.get_or_create("t", 0)  # made by a 0.7 produce before the assignment came
    with caplog.at_level(logging.ERROR):
        manager.apply_roles([entry("t", "leader", record_batches=True)])
    assert manager.get("t", 0) is None
    assert "holds 0.7 messages, the topic's assignment says record batches" in caplog.text


class Warnings:
    def __init__(self):
        self.lines = []

    def event(self, _key, _level, message: str) -> None:
        self.lines.append(message)


def follower(tmp_path):
    never = LogConfig(flush_interval_messages=1 << 40, flush_interval_ms=1 << 40)
    log = Log.open(str(tmp_path), "t", 0, never, recover=False, record_batches=True)
    publisher = Publisher(PartitionTable(4))
    publisher.add(log)
    warnings = Warnings()
    fetcher = ReplicaFetcher(Loop(), 2, Config(), None, publisher, None, warnings, lambda: None)
    replica = Replica(log)
    replica.role, replica.leader_epoch = Role.FOLLOWER, EPOCH
    return log, fetcher, replica, warnings


def part(data: bytes, high_watermark: int = 0) -> ReplicaFetchPartAnswer:
    return ReplicaFetchPartAnswer(ErrorCode.NO_ERROR, high_watermark, 0, 1 << 30, EPOCH, memoryview(data))


def batches(*counts) -> bytes:
    return b"".join(encode_batch([(None, b"v%d" % i, (), 5) for i in range(count)], partition_leader_epoch=EPOCH)
                    for count in counts)


def test_a_follower_appends_whole_batches_and_counts_their_records(tmp_path):
    log, fetcher, replica, warnings = follower(tmp_path)
    whole = batches(3, 1, 7)
    tail = batches(2)
    assert fetcher._append(replica, 0, part(whole + tail[:40], high_watermark=len(whole)))
    assert log.log_end == len(whole) and log.unflushed_messages == 11  # records, as the leader counts them
    assert replica.high_watermark == len(whole) and log.leader_epochs.latest.epoch == EPOCH
    # The torn tail comes again, whole, from the new end.
    assert fetcher._append(replica, len(whole), part(tail))
    assert log.log_end == len(whole + tail) and log.unflushed_messages == 13
    log.flush()
    with open(os.path.join(str(tmp_path), partition_dir_name("t", 0), "00000000000000000000.kafka"), "rb") as file:
        assert file.read() == whole + tail  # byte for byte
    assert not warnings.lines


def test_a_batch_larger_than_the_fetch_grows_it(tmp_path):
    log, fetcher, replica, warnings = follower(tmp_path)
    size = fetcher.fetch_size(replica)
    assert fetcher._append(replica, 0, part(batches(5)[:30]))
    assert log.log_end == 0 and fetcher.fetch_size(replica) == 2 * size and not warnings.lines


def test_bad_bytes_are_not_appended(tmp_path):
    log, fetcher, replica, warnings = follower(tmp_path)
    broken = bytearray(batches(2))
    broken[-1] ^= 0xFF
    assert not fetcher._append(replica, 0, part(bytes(broken)))  # wait, then fetch again
    assert log.log_end == 0 and "fails its CRC-32C check" in warnings.lines[0]
    # 0.7 messages in a record-batch log: refused as well
    assert not fetcher._append(replica, 0, part(encode_message(b"x" * 80)))
    assert log.log_end == 0 and len(warnings.lines) == 2


def test_the_leader_stamps_its_epoch(tmp_path):
    data = batches(2, 3)
    checked = validate_batches(data)
    stamped, first = record_batches.stamped(data, checked, 1000, None, leader_epoch=7)
    headers = [read_header(stamped, batch.start) for batch in checked]
    assert [header.partition_leader_epoch for header in headers] == [7, 7]
    assert first == 1000 + checked[0].end - 2
    validate_batches(bytes(stamped))  # the CRC does not cover it
    unstamped, _ = record_batches.stamped(data, checked, 1000, None)
    assert [read_header(unstamped, batch.start).partition_leader_epoch for batch in checked] == [EPOCH, EPOCH]
