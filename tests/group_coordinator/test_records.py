"""The offsets log's records (Kafka's __consumer_offsets layouts) and the partition a
group lives on."""

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mpbroker.group_coordinator import OffsetAndMetadata, group_tombstone, offset_commit_record, offset_tombstone
from mpbroker.group_coordinator.records import (
    GroupKey,
    OffsetKey,
    UnknownRecord,
    decode_key,
    decode_offset_value,
    java_string_hash,
    partition_for,
)


def test_offset_commit_record_bytes_follow_kafkas_layout():
    key, value = offset_commit_record("g", "t", 0, OffsetAndMetadata(5, -1, "", 1000))
    # key: int16 type 1, int16-prefixed "g", int16-prefixed "t", int32 partition
    assert key.hex() == "0001" "0001" "67" "0001" "74" "00000000"
    # value v3: int16 version, int64 offset, int32 leader epoch, string metadata, int64 timestamp
    assert value.hex() == "0003" "0000000000000005" "ffffffff" "0000" "00000000000003e8"


def test_group_tombstone_is_a_type_2_key_with_no_value():
    key, value = group_tombstone("my-group")
    assert key == bytes.fromhex("0002" "0008") + b"my-group"
    assert value is None
    assert decode_key(key) == GroupKey("my-group")


def test_offset_tombstone_has_the_offset_key():
    key, value = offset_tombstone("g", "t", 3)
    assert value is None and decode_key(key) == OffsetKey("g", "t", 3)


@given(group=st.text(max_size=40), topic=st.text(min_size=1, max_size=40), partition=st.integers(0, 2**31 - 1),
       offset=st.integers(-1, 2**63 - 1), epoch=st.integers(-1, 2**31 - 1), metadata=st.text(max_size=60),
       timestamp=st.integers(0, 2**63 - 1))
def test_round_trip(group, topic, partition, offset, epoch, metadata, timestamp):
    committed = OffsetAndMetadata(offset, epoch, metadata, timestamp)
    key, value = offset_commit_record(group, topic, partition, committed)
    assert decode_key(key) == OffsetKey(group, topic, partition)
    assert decode_offset_value(value) == committed


def test_null_metadata_is_written_as_empty_string():
    _, value = offset_commit_record("g", "t", 0, OffsetAndMetadata(1, 2, None, 3))
    assert decode_offset_value(value) == OffsetAndMetadata(1, 2, "", 3)


def test_older_value_versions_decode():
    v0 = struct.pack(">hq", 0, 42) + struct.pack(">h", 2) + b"md" + struct.pack(">q", 7)
    v1 = struct.pack(">hq", 1, 42) + struct.pack(">h", 2) + b"md" + struct.pack(">qq", 7, 99)
    v2 = struct.pack(">hq", 2, 42) + struct.pack(">h", 2) + b"md" + struct.pack(">q", 7)
    v3 = struct.pack(">hqi", 3, 42, 4) + struct.pack(">h", 2) + b"md" + struct.pack(">q", 7)
    v4 = struct.pack(">hqi", 4, 42, 4) + bytes([3]) + b"md" + struct.pack(">q", 7) + bytes([0])
    assert [decode_offset_value(v) for v in (v0, v1, v2)] == [OffsetAndMetadata(42, -1, "md", 7)] * 3
    assert decode_offset_value(v3) == decode_offset_value(v4) == OffsetAndMetadata(42, 4, "md", 7)


def test_version_0_offset_keys_and_other_record_types():
    key0 = struct.pack(">hh", 0, 1) + b"g" + struct.pack(">h", 1) + b"t" + struct.pack(">i", 9)
    assert decode_key(key0) == OffsetKey("g", "t", 9)
    assert decode_key(struct.pack(">h", 3) + b"anything") == UnknownRecord(3)


def test_malformed_records_raise_value_error():
    key, value = offset_commit_record("g", "t", 0, OffsetAndMetadata(5, -1, "", 1000))
    with pytest.raises(ValueError):
        decode_key(key[:-1])
    with pytest.raises(ValueError):
        decode_offset_value(value[:-2])
    with pytest.raises(ValueError):
        decode_offset_value(struct.pack(">h", 9) + value[2:])


def test_java_string_hash():
    assert java_string_hash("") == 0
    assert java_string_hash("a") == 97
    # "group": ((((103*31 + 114)*31 + 111)*31 + 117)*31 + 112)
    assert java_string_hash("group") == 98629247
    assert java_string_hash("polygenelubricants") == -2**31  # the classic Integer.MIN_VALUE
    # Java hashes UTF-16 units: a character outside the BMP is its two surrogates.
    assert java_string_hash("\U0001F600") == 0xD83D * 31 + 0xDE00


def test_partition_for_matches_kafka():
    assert partition_for("", 50) == 0
    assert partition_for("a", 50) == 97 % 50
    assert partition_for("group", 50) == 98629247 % 50 == 47
    assert partition_for("polygenelubricants", 50) == 0  # Utils.abs(MIN_VALUE) is 0
    # A negative hash: Kafka's Utils.abs is Math.abs, not a mask of the sign bit (the mask
    # would give 36). Checked against Java: "my-group".hashCode() == -1906497762.
    assert java_string_hash("my-group") == -1906497762
    assert partition_for("my-group", 50) == 12
