"""Recovery after an unclean shutdown: torn tails and garbage are cut at the first bad
message of the last segment; gaps between segments are refused with a clear message."""

import os
import struct

import pytest

from mpbroker.codec.errors import LogCorruptError
from mpbroker.codec.message import encode_message
from mpbroker.codec.message_set import validate_message_set
from mpbroker.segments.flushing import sync_pending

from .conftest import message_set


def segment_path(tmp_path, base=0, name="clicks-0"):
    return tmp_path / name / f"{base:020d}.kafka"


def fill(open_log, sets=5, **config):
    log = open_log(**config)
    for i in range(sets):
        log.append(message_set(4, tag=b"s%d" % i), 4)
    log.close()
    return log.log_end


@pytest.mark.parametrize("cut", [1, 3, 4, 9, 15, 29])
def test_torn_tail_is_truncated_to_the_last_whole_message(tmp_path, open_log, cut):
    end = fill(open_log)
    path = segment_path(tmp_path)
    with open(path, "r+b") as f:
        f.truncate(end - cut)
    log = open_log(recover=True)
    message_size = len(message_set(1))
    assert log.log_end == end - message_size  # the torn message is gone, the rest stays
    assert os.path.getsize(path) == log.log_end
    assert validate_message_set(log.read_bytes(0, 1 << 20)).complete


@pytest.mark.parametrize(
    "garbage",
    [b"\x00", b"\x00\x00\x00\x00", b"\xff" * 50, struct.pack(">i", 2) + b"ab", b"\x00" * 4096],
)
def test_garbage_tail_is_truncated(tmp_path, open_log, garbage):
    end = fill(open_log)
    with open(segment_path(tmp_path), "ab") as f:
        f.write(garbage)
    log = open_log(recover=True)
    assert log.log_end == end


def test_corrupt_byte_in_the_middle_truncates_there(tmp_path, open_log):
    fill(open_log)
    one_set = len(message_set(4))
    corrupt_at = one_set * 2 + 25  # inside the first message of the third set
    with open(segment_path(tmp_path), "r+b") as f:
        f.seek(corrupt_at)
        byte = f.read(1)
        f.seek(corrupt_at)
        f.write(bytes([byte[0] ^ 0x55]))
    log = open_log(recover=True)
    assert log.log_end == one_set * 2
    assert validate_message_set(log.read_bytes(0, 1 << 20)).messages == 8


def test_clean_open_trusts_the_files(tmp_path, open_log):
    end = fill(open_log)
    with open(segment_path(tmp_path), "ab") as f:
        f.write(b"\x00\x00")
    assert open_log(recover=False).log_end == end + 2


def test_only_the_last_segment_is_scanned(tmp_path, open_log):
    chunk = message_set(4)
    log = open_log(segment_bytes=len(chunk))
    for _ in range(3):
        log.append(chunk, 4)
    log.close()
    with open(segment_path(tmp_path, len(chunk) * 2), "ab") as f:
        f.write(b"\x01\x02\x03")
    reopened = open_log(recover=True)
    assert reopened.segment_bases == [0, len(chunk), len(chunk) * 2]
    assert reopened.log_end == len(chunk) * 3


def test_missing_middle_segment_is_refused(tmp_path, open_log):
    chunk = message_set(4)
    log = open_log(segment_bytes=len(chunk))
    for _ in range(3):
        log.append(chunk, 4)
    log.close()
    os.unlink(segment_path(tmp_path, len(chunk)))
    with pytest.raises(LogCorruptError, match="missing, extra or damaged"):
        open_log(recover=True)


def test_extra_segment_file_is_refused(tmp_path, open_log):
    fill(open_log)
    segment_path(tmp_path, 999_999).write_bytes(encode_message(b"stray"))
    with pytest.raises(LogCorruptError, match="next segment starts at 999999"):
        open_log(recover=True)


def test_zero_length_middle_segment_is_refused(tmp_path, open_log):
    chunk = message_set(4)
    log = open_log(segment_bytes=len(chunk))
    for _ in range(2):
        log.append(chunk, 4)
    log.close()
    with open(segment_path(tmp_path, 0), "r+b") as f:
        f.truncate(0)
    with pytest.raises(LogCorruptError):
        open_log(recover=True)


def test_zero_length_last_segment_is_fine(tmp_path, open_log):
    end = fill(open_log)
    with open(segment_path(tmp_path), "r+b") as f:
        f.truncate(0)
    log = open_log(recover=True)
    assert log.log_end == 0 and log.append(message_set(1), 1) == 0
    assert end > 0


def test_torn_last_segment_after_a_roll(tmp_path, open_log):
    chunk = message_set(4)
    log = open_log(segment_bytes=len(chunk))
    for _ in range(3):
        log.append(chunk, 4)
    log.close()
    last = segment_path(tmp_path, len(chunk) * 2)
    with open(last, "r+b") as f:
        f.truncate(len(chunk) - 3)
    reopened = open_log(recover=True)
    assert reopened.log_end == len(chunk) * 2 + len(chunk) - len(message_set(1))
    assert reopened.append(chunk, 4) == reopened.log_end - len(chunk)


# --- recovery from a recovery point (what a completed flush made durable) ------------


def rolled_log(open_log, segments=3, sets_per_segment=2):
    """A log of ``segments`` full segments of 4-message sets, everything flushed and
    closed; returns (set size, log end)."""
    chunk = message_set(4)
    log = open_log(segment_bytes=len(chunk) * sets_per_segment)
    for _ in range(segments * sets_per_segment):
        log.append(chunk, 4)
    log.close()
    return len(chunk), log.log_end


def test_a_gap_past_the_recovery_point_ends_the_log_there(tmp_path, open_log):
    """A power cut after a roll: the old segment lost its unflushed tail, the new
    segment file survived. Nothing past the recovery point was flushed, so the log
    ends at the gap and the later segment goes; the broker starts."""
    size, end = rolled_log(open_log)
    flushed = size * 3  # the recovery point: inside the second segment
    with open(segment_path(tmp_path, size * 2), "r+b") as f:
        f.truncate(size + 7)  # its unflushed tail lost, torn inside a message
    log = open_log(recover=True, recovery_point=flushed)
    assert log.log_end == size * 3 and log.segment_bases == [0, size * 2]
    assert not segment_path(tmp_path, size * 4).exists()
    assert validate_message_set(log.read_bytes(0, 1 << 20)).messages == 8
    assert log.append(message_set(1), 1) == size * 3  # produces go on right behind it


def test_the_same_gap_without_a_recovery_point_is_refused(tmp_path, open_log):
    size, _ = rolled_log(open_log)
    with open(segment_path(tmp_path, size * 2), "r+b") as f:
        f.truncate(size + 7)
    with pytest.raises(LogCorruptError, match="missing, extra or damaged"):
        open_log(recover=True)
    assert segment_path(tmp_path, size * 4).exists()  # nothing was changed


def test_recovery_reads_only_from_the_recovery_point(tmp_path, open_log):
    """Bytes before the recovery point are durable and not read again: damage there is
    the consumers' CRC check's to find (and verify's), never a reason to cut the log."""
    size, end = rolled_log(open_log, segments=1, sets_per_segment=4)
    with open(segment_path(tmp_path), "r+b") as f:
        f.seek(size + 30)
        f.write(b"\xff")  # rot inside the second set, below the recovery point
        f.seek(end)
        f.write(b"\x00\x00\x00\x09torn")  # a torn message after it
    log = open_log(recover=True, recovery_point=size * 3)
    assert log.log_end == end


def test_a_torn_message_at_the_recovery_point_is_cut(tmp_path, open_log):
    size, end = rolled_log(open_log, segments=1, sets_per_segment=4)
    with open(segment_path(tmp_path), "r+b") as f:
        f.truncate(end - 5)
    assert open_log(recover=True, recovery_point=size * 3).log_end == size * 3 + 3 * len(message_set(1))


def test_every_segment_past_the_recovery_point_is_checked(tmp_path, open_log):
    """Several rolls between two flushes: damage in any segment after the recovery
    point ends the log there, and the segments after it go."""
    size, end = rolled_log(open_log, segments=4)
    with open(segment_path(tmp_path, size * 4), "r+b") as f:
        f.seek(size + 30)
        f.write(b"\xff")
    log = open_log(recover=True, recovery_point=size * 2)
    assert log.log_end == size * 5 + len(message_set(1))  # cut at the damaged message
    assert log.segment_bases == [0, size * 2, size * 4]
    assert not segment_path(tmp_path, size * 6).exists()


def test_an_empty_segment_with_a_later_one_past_the_recovery_point(tmp_path, open_log):
    size, end = rolled_log(open_log)
    with open(segment_path(tmp_path, size * 2), "r+b") as f:
        f.truncate(0)
    log = open_log(recover=True, recovery_point=size * 2)
    assert log.log_end == size * 2 and log.segment_bases == [0, size * 2]


def test_a_gap_below_the_recovery_point_is_refused(tmp_path, open_log):
    size, end = rolled_log(open_log)
    with open(segment_path(tmp_path, 0), "r+b") as f:
        f.truncate(size)
    with pytest.raises(LogCorruptError, match="missing, extra or damaged"):
        open_log(recover=True, recovery_point=size * 5)


def test_a_segment_cut_short_below_the_recovery_point_is_refused(tmp_path, open_log):
    size, end = rolled_log(open_log)
    with open(segment_path(tmp_path, size * 2), "r+b") as f:
        f.truncate(size)
    with pytest.raises(LogCorruptError, match="data was lost below the recovery point"):
        open_log(recover=True, recovery_point=size * 3 + 40)
    assert os.path.getsize(segment_path(tmp_path, size * 4)) == size * 2  # nothing was changed


def test_a_recovery_point_past_the_end_is_not_trusted(tmp_path, open_log, caplog):
    size, end = rolled_log(open_log)
    with open(segment_path(tmp_path, size * 4), "ab") as f:
        f.write(b"\x01\x02")
    log = open_log(recover=True, recovery_point=end + 1000)
    assert log.log_end == end and log.recovery_point is None
    assert "before its recovery point" in caplog.text


def test_recovered_segments_count_as_unflushed_until_a_flush_covers_them(tmp_path, open_log):
    """A crashed process's page cache may still hold what it wrote: the first flush
    after recovery syncs every segment past the recovery point, then moves it."""
    size, end = rolled_log(open_log)
    log = open_log(recover=True, recovery_point=size * 3)
    assert log.flushed_end == end and log.recovery_point == size * 3 and log.needs_flush
    pending = log.begin_flush()
    assert [segment.base for segment in pending.segments] == [size * 2, size * 4]
    assert pending.directories == (log.directory,)
    sync_pending(pending)
    log.finish_flush(pending)
    assert log.recovery_point == end and not log.needs_flush


def test_without_a_recovery_point_the_first_flush_syncs_every_segment(tmp_path, open_log):
    size, end = rolled_log(open_log)
    log = open_log(recover=True)
    assert log.recovery_point is None and log.needs_flush
    pending = log.begin_flush()
    assert len(pending.segments) == 3
    sync_pending(pending)
    log.finish_flush(pending)
    assert log.recovery_point == end
