"""The partition log: append, read at every boundary, roll, flush visibility and policy."""

import os
import shutil
import threading

import pytest

from mpbroker.codec.errors import OffsetOutOfRangeError, StorageError
from mpbroker.codec.message_set import iter_messages, validate_message_set
from mpbroker.segments.flushing import LogRemovedError, sync_pending
from mpbroker.segments.log_view import EMPTY, locate

from .conftest import message_set


def test_offsets_are_byte_positions(open_log):
    log = open_log()
    first, second = message_set(3), message_set(5)
    assert log.append(first, 3) == 0
    assert log.append(second, 5) == len(first)
    assert log.log_end == len(first) + len(second)
    log.flush()
    assert log.read_bytes(0, 1 << 20) == first + second
    assert log.read_bytes(len(first), 1 << 20) == second


def test_only_flushed_bytes_are_visible(open_log):
    log = open_log()
    log.append(message_set(4), 4)
    assert log.flushed_end == 0
    assert log.read(0, 1000).length == 0  # at the flushed end: empty, no error
    with pytest.raises(OffsetOutOfRangeError):
        log.read(10, 1000)
    log.flush()
    assert log.read(0, 1000).length == log.log_end


def test_read_below_start_and_past_end(open_log):
    log = open_log()
    log.append(message_set(2), 2)
    log.flush()
    with pytest.raises(OffsetOutOfRangeError):
        log.read(-1, 100)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(log.log_end + 1, 100)
    region = log.read(log.log_end, 100)
    assert region.length == 0


def test_roll_by_size_keeps_segments_within_the_limit(open_log, tmp_path):
    chunk = message_set(5)
    log = open_log(segment_bytes=len(chunk) * 3)
    offsets = [log.append(chunk, 5) for _ in range(10)]
    assert log.segment_bases == [0, len(chunk) * 3, len(chunk) * 6, len(chunk) * 9]
    names = sorted(os.listdir(tmp_path / "clicks-0"))
    assert names == [f"{base:020d}.kafka" for base in log.segment_bases]
    assert all(os.path.getsize(tmp_path / "clicks-0" / n) <= len(chunk) * 3 for n in names)
    assert offsets == [i * len(chunk) for i in range(10)]


def test_one_append_of_many_sets_rolls_between_them(open_log, tmp_path):
    """A worker appends a whole batch of pipelined produces at once: the log still
    rolls between sets, so no segment grows past log.file.size by more than a set."""
    chunk = message_set(5)
    log = open_log(segment_bytes=len(chunk) * 3 + 1)
    assert log.append_many([chunk] * 10, 50) == 0
    assert log.append_many([chunk] * 4, 20) == 10 * len(chunk)
    assert log.segment_bases == [0, len(chunk) * 3, len(chunk) * 6, len(chunk) * 9, len(chunk) * 12]
    sizes = [os.path.getsize(tmp_path / "clicks-0" / f"{base:020d}.kafka") for base in log.segment_bases]
    assert sizes == [len(chunk) * 3] * 4 + [len(chunk) * 2]
    assert log.log_end == 14 * len(chunk) and log.unflushed_messages == 70
    log.flush()
    assert validate_message_set(b"".join(log.read_bytes(base, 1 << 20) for base in log.segment_bases)).messages == 70


def test_sets_larger_than_a_segment_in_one_append_each_get_their_own(open_log):
    log = open_log(segment_bytes=100)
    small, big = message_set(1), message_set(20)
    log.append_many([small, big, big, small, small], 43)
    assert log.segment_bases == [0, len(small), len(small) + len(big), len(small) + 2 * len(big)]


def test_an_append_that_fails_at_a_roll_takes_back_what_it_wrote(open_log, tmp_path):
    """The roll's new segment cannot be created (a file is in the way): the sets written
    before it are taken back and the log is as it was, so the produce can be refused."""
    chunk = message_set(5)
    log = open_log(segment_bytes=len(chunk) * 2)
    log.append(chunk, 5)
    in_the_way = tmp_path / "clicks-0" / f"{len(chunk) * 2:020d}.kafka"
    in_the_way.write_bytes(b"")
    with pytest.raises(StorageError, match="cannot create segment"):
        log.append_many([chunk, chunk, chunk], 15)
    assert (log.log_end, log.segment_bases, log.unflushed_messages) == (len(chunk), [0], 5)
    assert os.path.getsize(tmp_path / "clicks-0" / f"{0:020d}.kafka") == len(chunk)
    in_the_way.unlink()
    assert log.append_many([chunk, chunk, chunk], 15) == len(chunk)
    assert log.segment_bases == [0, len(chunk) * 2]


def test_a_set_larger_than_a_segment_gets_its_own(open_log):
    log = open_log(segment_bytes=100)
    small, big = message_set(1), message_set(20)
    log.append(small, 1)
    assert log.append(big, 20) == len(small)
    assert log.segment_bases == [0, len(small)]
    log.append(small, 1)
    assert log.segment_bases == [0, len(small), len(small) + len(big)]


def test_roll_by_age(open_log, clock):
    log = open_log(roll_ms=60_000)
    log.append(message_set(1), 1)
    clock.advance(59_000)
    log.append(message_set(1), 1)
    assert log.segment_count == 1
    clock.advance(2_000)
    offset = log.append(message_set(1), 1)
    assert log.segment_bases == [0, offset]


def test_empty_segment_age_counts_from_its_first_append(open_log, clock):
    log = open_log(roll_ms=60_000)
    clock.advance(10 * 60_000)  # an idle, empty active segment does not roll
    log.append(message_set(1), 1)
    log.append(message_set(1), 1)
    assert log.segment_count == 1


def test_fetch_at_every_boundary_never_crosses_a_segment(open_log):
    chunk = message_set(2, size=30)
    log = open_log(segment_bytes=len(chunk) * 2)
    for _ in range(7):
        log.append(chunk, 2)
    log.flush()
    everything = b"".join(
        os.pread(s.fd, s.size, 0) for s in log._segments
    )
    bases = log.segment_bases
    for offset in range(0, log.log_end + 1):
        region = log.read(offset, 1 << 20)
        segment_end = min([b for b in bases if b > offset], default=log.log_end)
        assert region.length == segment_end - offset
        assert log.read_bytes(offset, 1 << 20) == everything[offset:segment_end]
        if region.length:
            base = max(b for b in bases if b <= offset)
            assert region.file.base == base and region.position == offset - base
        small = log.read(offset, 7)
        assert small.length == min(7, segment_end - offset)


def test_locate_is_arithmetic_and_asks_only_for_the_file_it_reads():
    bases = [0, 100, 250]
    asked = []

    def file_at(index):
        asked.append(index)
        return f"segment {index}"

    assert locate(bases, 300, 0, 1000, file_at) == ("segment 0", 0, 100)
    assert locate(bases, 300, 99, 1000, file_at) == ("segment 0", 99, 1)
    assert locate(bases, 300, 100, 1000, file_at) == ("segment 1", 0, 150)
    assert locate(bases, 300, 260, 5, file_at) == ("segment 2", 10, 5)
    assert locate(bases, 200, 150, 1000, file_at) == ("segment 1", 50, 50)  # capped at the flushed end
    assert asked == [0, 0, 1, 2, 1]
    assert locate(bases, 300, 300, 5, file_at) is EMPTY  # at the flushed end: nothing yet
    assert locate(bases, 300, 120, 0, file_at) is EMPTY  # a fetch of 0 bytes
    assert locate(bases, 250, 250, 5, file_at) is EMPTY  # a rolled, still unflushed segment
    assert locate(bases, 300, 10, -1, file_at) is EMPTY
    with pytest.raises(OffsetOutOfRangeError):
        locate(bases, 300, 301, 5, file_at)
    with pytest.raises(OffsetOutOfRangeError):
        locate(bases, 300, -1, 5, file_at)
    with pytest.raises(OffsetOutOfRangeError):
        locate([], 0, 0, 5, file_at)
    assert asked == [0, 0, 1, 2, 1]  # no file for an empty answer or an error


def test_fetched_bytes_iterate_back_to_the_messages(open_log):
    log = open_log(segment_bytes=500)
    payloads = [b"event-%d" % i for i in range(200)]
    from mpbroker.codec.message import encode_message_set

    for start in range(0, 200, 10):
        log.append(encode_message_set(payloads[start:start + 10]), 10)
    log.flush()
    seen, offset = [], 0
    while offset < log.flushed_end:
        chunk = log.read_bytes(offset, 333)
        messages = list(iter_messages(chunk, offset))
        if not messages:  # the segment's rest is shorter than one message: next segment
            offset = min(b for b in log.segment_bases if b > offset)
            continue
        seen.extend(payload for _, payload in messages)
        offset = messages[-1][0]
    assert seen == payloads


def test_flush_policy_by_count_and_age(open_log, clock):
    log = open_log(flush_interval_messages=10, flush_interval_ms=1000)
    assert not log.flush_due()
    log.append(message_set(4), 4)
    assert not log.flush_due()
    log.append(message_set(6), 6)
    assert log.flush_due()
    log.flush()
    assert not log.flush_due() and log.unflushed_messages == 0
    log.append(message_set(1), 1)
    clock.advance(999)
    assert not log.flush_due()
    clock.advance(1)
    assert log.flush_due()


def test_what_a_flush_in_flight_covers_does_not_make_the_next_one_due(open_log, clock):
    # Once 10 messages made a flush due, the 3 appended while it runs are not due by
    # count (they were counted with the 10 before), nor by age until they are old.
    log = open_log(flush_interval_messages=10, flush_interval_ms=1000)
    log.append(message_set(10), 10)
    clock.advance(900)
    assert log.flush_due()
    pending = log.begin_flush()
    log.append(message_set(3), 3)
    clock.advance(200)  # the 10 covered are 1100 ms old, the 3 only 200 ms
    assert not log.flush_due()
    log.append(message_set(6), 6)
    assert not log.flush_due()  # 9 not covered
    log.append(message_set(1), 1)
    assert log.flush_due()  # 10 not covered
    log.finish_flush(pending)
    assert log.flush_due() and log.unflushed_messages == 10
    log.flush()
    assert not log.flush_due()
    log.append(message_set(1), 1)
    second = log.begin_flush()
    log.append(message_set(1), 1)
    clock.advance(999)
    assert not log.flush_due()
    clock.advance(1)
    assert log.flush_due()  # the one appended during the flush is 1000 ms old
    log.finish_flush(second)
    assert log.flush_due()


def test_a_failed_flush_makes_what_it_covered_due_again(open_log, clock):
    log = open_log(flush_interval_messages=10, flush_interval_ms=1000)
    log.append(message_set(10), 10)
    pending = log.begin_flush()
    assert not log.flush_due()
    with pytest.raises(StorageError, match="flush .* failed"):
        log.finish_flush(pending, OSError(5, "Input/output error"))
    assert log.flush_due() and log.unflushed_messages == 10  # by count
    log.flush()
    log.append(message_set(1), 1)
    clock.advance(600)
    failed = log.begin_flush()
    log.append(message_set(1), 1)  # younger than the one the failed flush covered
    with pytest.raises(StorageError, match="flush .* failed"):
        log.finish_flush(failed, OSError(5, "Input/output error"))
    clock.advance(399)
    assert not log.flush_due()
    clock.advance(1)
    assert log.flush_due()  # by age: the first message waits again, 1000 ms old


def test_two_failed_flushes_leave_the_oldest_message_due_by_its_age(open_log, clock):
    log = open_log(flush_interval_messages=100, flush_interval_ms=1000)
    log.append(message_set(1), 1)
    first = log.begin_flush()
    clock.advance(600)
    log.append(message_set(1), 1)
    second = log.begin_flush()
    for pending in (first, second):  # the older fails first; the younger's failure must not hide it
        with pytest.raises(StorageError):
            log.finish_flush(pending, OSError(5, "Input/output error"))
    clock.advance(399)
    assert not log.flush_due()
    clock.advance(1)
    assert log.flush_due()


def test_split_flush_lets_appends_continue(open_log):
    log = open_log()
    log.append(message_set(3), 3)
    pending = log.begin_flush()
    covered = log.log_end
    log.append(message_set(2), 2)  # arrives while the sync runs elsewhere
    worker = threading.Thread(target=sync_pending, args=(pending,))
    worker.start()
    worker.join()
    log.finish_flush(pending)
    assert log.flushed_end == covered < log.log_end
    assert log.unflushed_messages == 2 and log.needs_flush
    log.flush()
    assert log.flushed_end == log.log_end


def test_flush_covers_a_rolled_segment(open_log):
    chunk = message_set(2)
    log = open_log(segment_bytes=len(chunk))
    log.append(chunk, 2)
    log.append(chunk, 2)
    pending = log.begin_flush()
    assert [s.base for s in pending.segments] == [0, len(chunk)]
    assert pending.directories[0] == log.directory  # the new segment's directory entry is synced too
    sync_pending(pending)
    log.finish_flush(pending)
    assert log.flushed_end == 2 * len(chunk)


def test_failed_flush_keeps_data_pending(open_log):
    log = open_log()
    log.append(message_set(1), 1)
    pending = log.begin_flush()
    with pytest.raises(Exception, match="flush .* failed"):
        log.finish_flush(pending, OSError(5, "Input/output error"))
    assert log.flushed_end == 0 and log.needs_flush
    log.flush()
    assert log.flushed_end == log.log_end


def test_reopen_sees_everything(tmp_path, open_log):
    log = open_log(segment_bytes=300)
    for i in range(20):
        log.append(message_set(3, tag=b"%d" % i), 3)
    log.close()
    reopened = open_log(segment_bytes=300)
    assert reopened.segment_bases == log.segment_bases
    assert reopened.log_end == reopened.flushed_end == log.log_end
    assert reopened.append(message_set(1), 1) == log.log_end
    whole = b"".join(os.pread(s.fd, s.size, 0) for s in reopened._segments)
    assert validate_message_set(whole).messages == 61


def test_a_removed_partition_directory_is_noticed_at_the_next_flush(open_log, tmp_path):
    """Someone deletes the partition directory under a running broker: the data the
    next flush would make durable is already gone, so the flush fails loudly and the
    log takes no more appends (they would vanish at the next start)."""
    chunk = message_set(3)
    log = open_log(segment_bytes=len(chunk) * 2)
    log.append_many([chunk, chunk, chunk], 9)
    log.flush()
    shutil.rmtree(tmp_path / "clicks-0")
    log.append(chunk, 3)
    with pytest.raises(LogRemovedError, match="was removed while the broker ran"):
        log.flush()
    assert log.flushed_end == 3 * len(chunk)  # what the failed flush covered is not made visible
    with pytest.raises(StorageError, match="appends are refused"):
        log.append(chunk, 3)


def test_a_segment_replaced_behind_the_broker_is_noticed(open_log, tmp_path):
    log = open_log()
    log.append(message_set(2), 2)
    path = tmp_path / "clicks-0" / f"{0:020d}.kafka"
    os.rename(path, tmp_path / "moved.kafka")
    path.write_bytes(b"")
    with pytest.raises(LogRemovedError):
        log.flush()
