"""The acceptor's read side on real files: logs written by the worker-side code
(LogManager, Log), published by the worker's Publisher into real partition tables, read
back through SegmentFiles. Every answer must be the one the Log itself gives
(``Log.read``, ``Log.offsets_before``): one read path."""

import os
import struct

import pytest

from mpbroker.acceptor import segment_files
from mpbroker.acceptor.segment_files import SegmentFile, SegmentFiles
from mpbroker.codec.errors import ErrorCode, OffsetOutOfRangeError
from mpbroker.ipc.partition_table import PartitionTable
from mpbroker.ownership import owner_slot
from mpbroker.segments import FileRange, LogConfig, LogManager
from mpbroker.segments.naming import list_segment_bases
from mpbroker.workers.publisher import Publisher
from tests.ipc.test_tables import entry_offset
from tests.segments.conftest import FakeClock, message_set

HOUR = 3600 * 1000
WORKERS = 2
MAX_SIZES = (0, 1, 7, 61, 1000, 1 << 20)


class Broker:
    """The two sides of one log.dir: each worker slot's logs and publisher, and the
    acceptor's SegmentFiles over the same partition tables."""

    def __init__(self, log_dir: str, clock: FakeClock, **config):
        self.clock = clock
        self.tables = [PartitionTable(16) for _ in range(WORKERS)]
        self.publishers = [Publisher(table) for table in self.tables]
        self.logs = LogManager(log_dir, lambda topic: LogConfig(**config), clock_ms=clock, timer_ms=clock)
        self.files = SegmentFiles(self.tables, log_dir, WORKERS, clock_ms=clock)

    def log(self, topic: str, partition: int):
        found = self.logs.get(topic, partition)
        if found is None:
            found = self.logs.get_or_create(topic, partition)
            self.publisher(found).add(found)
        return found

    def publisher(self, partition_log) -> Publisher:
        return self.publishers[owner_slot(partition_log.topic, partition_log.partition, WORKERS)]

    def append(self, partition_log, count: int, size: int = 20, flush: bool = True) -> None:
        partition_log.append(message_set(count, size), count)
        if flush:
            partition_log.flush()
        self.publisher(partition_log).publish(partition_log)

    def close(self) -> None:
        self.files.close()
        self.logs.close()


@pytest.fixture
def broker(tmp_path):
    opened = Broker(str(tmp_path), FakeClock(), segment_bytes=300)
    yield opened
    opened.close()


def answer_of_the_log(partition_log, offset: int, max_size: int):
    """What a fetch must answer, from ``Log.read``: ``(error, (position, bytes) or None)``."""
    try:
        found = partition_log.read(offset, max_size)
    except OffsetOutOfRangeError:
        return ErrorCode.OFFSET_OUT_OF_RANGE, None
    if found.length == 0:
        return ErrorCode.NO_ERROR, None
    return ErrorCode.NO_ERROR, (found.position, partition_log.read_bytes(offset, max_size))


def answer_of_the_acceptor(files, partition_log, offset: int, max_size: int):
    error, found = files.fetch(partition_log.topic, partition_log.partition, offset, max_size)
    if found is None:
        return error, None
    assert type(found) is FileRange and type(found.file) is SegmentFile and found.length > 0
    return error, (found.position, os.pread(found.file.fd, found.length, found.position))


def assert_every_fetch_is_the_logs(files, partition_log) -> int:
    checked = 0
    for offset in range(partition_log.log_start - 2, partition_log.log_end + 3):
        for max_size in MAX_SIZES:
            expected = answer_of_the_log(partition_log, offset, max_size)
            assert answer_of_the_acceptor(files, partition_log, offset, max_size) == expected, (offset, max_size)
            checked += expected[1] is not None
    return checked


def test_every_fetch_answers_as_log_read(broker):
    logs = [broker.log("clicks", 0), broker.log("clicks", 1), broker.log("views", 3)]
    assert {broker.publisher(each) for each in logs} == set(broker.publishers)  # both workers' tables
    for round_number in range(12):
        for number, partition_log in enumerate(logs):
            broker.append(partition_log, 1 + (round_number + number) % 4, size=20 + 7 * number)
    for partition_log in logs:
        assert partition_log.segment_count >= 3
        assert assert_every_fetch_is_the_logs(broker.files, partition_log) > 0


def test_a_range_never_crosses_a_segment_and_reads_the_right_file(broker):
    partition_log = broker.log("clicks", 0)
    for _ in range(10):
        broker.append(partition_log, 3)
    bases = partition_log.segment_bases
    for offset in range(partition_log.log_end):
        error, found = broker.files.fetch("clicks", 0, offset, 1 << 20)
        base = max(b for b in bases if b <= offset)
        end = min([b for b in bases if b > offset], default=partition_log.log_end)
        assert error == ErrorCode.NO_ERROR and (found.position, found.length) == (offset - base, end - offset)
        segment = partition_log._segments[bases.index(base)]
        assert os.fstat(found.file.fd).st_ino == os.fstat(segment.fd).st_ino


def test_only_flushed_and_published_bytes_are_served(broker):
    partition_log = broker.log("clicks", 0)
    broker.append(partition_log, 2)
    end = partition_log.flushed_end
    broker.append(partition_log, 2, flush=False)  # appended and published, not flushed
    assert partition_log.log_end > end
    assert broker.files.fetch("clicks", 0, end, 1000) == (ErrorCode.NO_ERROR, None)
    assert broker.files.fetch("clicks", 0, end + 1, 1000) == (ErrorCode.OFFSET_OUT_OF_RANGE, None)
    partition_log.flush()  # flushed, not yet published: the acceptor does not know yet
    assert broker.files.fetch("clicks", 0, end, 1000) == (ErrorCode.NO_ERROR, None)
    broker.publisher(partition_log).publish(partition_log)
    assert assert_every_fetch_is_the_logs(broker.files, partition_log) > 0


def test_rolled_segments_are_found_after_the_version_moves(broker):
    partition_log = broker.log("clicks", 0)
    broker.append(partition_log, 2)
    assert assert_every_fetch_is_the_logs(broker.files, partition_log) > 0
    for _ in range(8):
        broker.append(partition_log, 3)
    assert partition_log.segment_count > 2
    assert assert_every_fetch_is_the_logs(broker.files, partition_log) > 0


def test_retention_while_a_range_is_being_sent(broker):
    partition_log = broker.log("clicks", 0)
    for _ in range(10):
        broker.append(partition_log, 3)
    first = partition_log.segment_bases[1]
    error, held = broker.files.fetch("clicks", 0, 0, 1 << 20)
    assert error == ErrorCode.NO_ERROR
    held.file.acquire()  # what an answer does until the connection sent it
    expected = partition_log.read_bytes(0, 1 << 20)
    for segment in partition_log._segments[:2]:
        os.utime(segment.path, ns=(0, 0))  # older than log.retention.hours
    assert partition_log.apply_retention() == [0, first]
    broker.publisher(partition_log).publish(partition_log)

    assert broker.files.fetch("clicks", 0, 0, 100) == (ErrorCode.OFFSET_OUT_OF_RANGE, None)
    assert broker.files.fetch("clicks", 0, first, 100) == (ErrorCode.OFFSET_OUT_OF_RANGE, None)
    assert assert_every_fetch_is_the_logs(broker.files, partition_log) > 0
    assert held.file.retired and held.file.fd >= 0  # unlinked, still readable
    assert os.pread(held.file.fd, held.length, held.position) == expected
    held.file.release()
    assert held.file.fd == -1  # closed by the last release

    stray = partition_log._segments[0].path.replace(f"{partition_log.log_start:020d}", f"{0:020d}")
    with open(stray, "wb") as left_behind:  # a file below the published log start is not the log's
        left_behind.write(expected)
    partition_log.roll()  # the segment list changes: the acceptor lists the directory again
    broker.append(partition_log, 1)
    assert broker.files.offsets("clicks", 0, -2, 1) == (ErrorCode.NO_ERROR, [partition_log.log_start])
    assert broker.files.fetch("clicks", 0, 0, 100) == (ErrorCode.OFFSET_OUT_OF_RANGE, None)


def test_a_segment_deleted_before_it_was_opened_is_out_of_range(broker, monkeypatch):
    partition_log = broker.log("clicks", 0)
    for _ in range(6):
        broker.append(partition_log, 3)
    assert broker.files.fetch("clicks", 0, partition_log.log_end, 10) == (ErrorCode.NO_ERROR, None)  # listed
    os.unlink(partition_log._segments[0].path)  # gone behind the listing's back
    listings = []
    monkeypatch.setattr(segment_files, "list_segment_bases",
                        lambda directory: listings.append(directory) or list_segment_bases(directory))
    assert broker.files.fetch("clicks", 0, 0, 10) == (ErrorCode.OFFSET_OUT_OF_RANGE, None)
    assert listings == []
    second = partition_log.segment_bases[1]
    assert broker.files.fetch("clicks", 0, second, 10)[1].length == 10
    assert len(listings) == 1  # listed again at once, without waiting for the version to move
    assert broker.files.fetch("clicks", 0, 0, 10) == (ErrorCode.OFFSET_OUT_OF_RANGE, None)


def test_fetch_errors_and_unknown_partitions(broker):
    partition_log = broker.log("clicks", 0)
    broker.append(partition_log, 2)
    assert broker.files.fetch("clicks", 0, 0, -1) == (ErrorCode.INVALID_FETCH_SIZE, None)
    assert broker.files.fetch("clicks", 5, 0, 100) == (ErrorCode.NO_ERROR, None)  # nothing produced there yet
    assert broker.files.fetch("nowhere", 0, 7, 100) == (ErrorCode.NO_ERROR, None)
    assert broker.files.offsets("nowhere", 0, -1, 5) == (ErrorCode.NO_ERROR, [0])
    assert broker.files.offsets("nowhere", 0, -2, 5) == (ErrorCode.NO_ERROR, [0])
    assert broker.files.offsets("nowhere", 0, broker.clock(), 5) == (ErrorCode.NO_ERROR, [])
    broker.log("later", 0)  # a partition added after the first look is found
    assert broker.files.offsets("later", 0, -1, 5) == (ErrorCode.NO_ERROR, [0])


def test_offsets_answer_as_the_log_does(broker):
    logs = [broker.log("clicks", 0), broker.log("views", 1)]
    for partition_log in logs:
        for _ in range(9):
            broker.append(partition_log, 3)
        broker.append(partition_log, 1, flush=False)  # a tail not yet visible
        for index, segment in enumerate(partition_log._segments):
            modified = broker.clock() - HOUR * (len(partition_log._segments) - index)
            os.utime(segment.path, ns=(modified * 1_000_000, modified * 1_000_000))
    times = [-1, -2, 0, broker.clock()] + [broker.clock() - HOUR * hours + nudge
                                           for hours in range(8) for nudge in (-60_000, -1, 0, 1)]
    for partition_log in logs:
        for time_ms in times:
            for max_offsets in (0, 1, 2, 5, 100):
                expected = partition_log.offsets_before(time_ms, max_offsets)
                answer = broker.files.offsets(partition_log.topic, partition_log.partition, time_ms, max_offsets)
                assert answer == (ErrorCode.NO_ERROR, expected), (time_ms, max_offsets)


def test_a_torn_entry_is_read_from_the_last_consistent_state(broker):
    partition_log = broker.log("clicks", 0)
    broker.append(partition_log, 3)
    before = broker.files.fetch("clicks", 0, 0, 1 << 20)
    assert before[1].length == partition_log.flushed_end
    table = broker.tables[owner_slot("clicks", 0, WORKERS)]
    at = entry_offset(table.find_or_add("clicks", 0))
    (seq,) = struct.unpack_from("<Q", table._mm, at)
    struct.pack_into("<Q", table._mm, at, seq | 1)  # its writer died mid-update
    assert broker.files.fetch("clicks", 0, 0, 1 << 20) == before
    assert broker.files.offsets("clicks", 0, -1, 1) == (ErrorCode.NO_ERROR, [partition_log.flushed_end])


def test_a_partition_added_while_the_acceptor_lists_the_table_is_not_skipped(broker):
    """A worker adds its partitions one by one while the acceptor indexes its table (a
    topic auto-created by a modern client's Metadata, its partitions looked up as they
    come). An entry added between the acceptor's listing of the names and its reading of
    the table's length was skipped for good: that partition read empty, with a high
    watermark of 0, for the broker's whole life (consumers got nothing from it, ~1 CI run
    in 20)."""
    first = broker.log("clicks", 0)
    slot = owner_slot("clicks", 0, WORKERS)
    later = next(number for number in range(1, 50) if owner_slot("clicks", number, WORKERS) == slot)
    table = broker.tables[slot]
    listed = table.names

    def names_then_a_worker_adds_one(start=0):
        found = listed(start)
        table.names = listed  # once
        broker.log("clicks", later)  # the owning worker publishes another partition in between
        return found

    table.names = names_then_a_worker_adds_one
    broker.append(first, 2)
    assert broker.files.fetch("clicks", 0, 0, 1 << 20)[1].length == first.flushed_end  # indexes the table
    added = broker.logs.get("clicks", later)
    broker.append(added, 3)
    error, found = broker.files.fetch("clicks", later, 0, 1 << 20)
    assert error == ErrorCode.NO_ERROR and found is not None and found.length == added.flushed_end
