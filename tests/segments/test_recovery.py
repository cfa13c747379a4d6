"""Recovery after an unclean shutdown: torn tails and garbage are cut at the first bad
message of the last segment; gaps between segments are refused with a clear message."""

import os
import struct

import pytest

from mpbroker.errors import LogCorruptError
from mpbroker.segments.message import encode_message
from mpbroker.segments.message_set import validate_message_set

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
