"""The valid prefix of stored record batches (``mpbroker.records.scan``): recovery's
``valid_batches_prefix`` and the follower's ``scan_batches``, which also says why the
walk stopped (bytes that end inside a batch, or bad bytes) and counts the records."""

import struct

import pytest

from mpbroker.records import encode_batch
from mpbroker.records.compression import CODEC_GZIP
from mpbroker.records.scan import BatchScan, scan_batches, valid_batches_prefix


def batch(count: int, codec: int = 0) -> bytes:
    return encode_batch([(None, f"value {i}".encode() * 5, (), 1000 + i) for i in range(count)], codec=codec)


FIRST, SECOND, THIRD = batch(3), batch(1), batch(20, CODEC_GZIP)
DATA = FIRST + SECOND + THIRD


def test_whole_batches_are_counted_in_records():
    assert scan_batches(DATA) == BatchScan(len(DATA), 3, 24, False, None)
    assert scan_batches(b"") == BatchScan(0, 0, 0, False, None)
    assert valid_batches_prefix(DATA) == len(DATA)


@pytest.mark.parametrize("cut", [1, 11, 12, 60, 61, len(THIRD) - 1])
def test_bytes_that_end_inside_a_batch_are_truncated(cut):
    data = FIRST + SECOND + THIRD[:cut]
    assert scan_batches(data) == BatchScan(len(FIRST + SECOND), 2, 4, True, None)
    assert valid_batches_prefix(data) == len(FIRST + SECOND)
    assert scan_batches(THIRD[:cut]) == BatchScan(0, 0, 0, True, None)  # a batch larger than the fetch


def bad(position: int, value: bytes) -> bytes:
    data = bytearray(SECOND)
    data[position:position + len(value)] = value
    return bytes(data)


@pytest.mark.parametrize("broken, reason", [
    (bad(8, struct.pack(">i", 10)), "length 10"),  # shorter than a header
    (bad(16, b"\x01"), "magic 1"),
    (SECOND[:16] + b"\x01", "magic 1"),  # seen before the length runs past the end
    (bad(70, b"\xff"), "CRC-32C"),  # a record's byte
    (bad(17, b"\x00\x00\x00\x00"), "CRC-32C"),
])
def test_bad_bytes_end_the_prefix_with_the_reason(broken, reason):
    scanned = scan_batches(FIRST + broken + THIRD)
    assert (scanned.valid_bytes, scanned.batches, scanned.records, scanned.truncated) == (len(FIRST), 1, 3, False)
    assert reason in scanned.error
    assert valid_batches_prefix(FIRST + broken + THIRD) == len(FIRST)
