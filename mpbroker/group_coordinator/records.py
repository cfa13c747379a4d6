"""The records of the offsets log (Kafka's ``__consumer_offsets``): their bytes, both
ways, and which partition of that log a group lives on.

The layouts are Kafka's (its OffsetCommitKey/OffsetCommitValue/GroupMetadataKey
schemas), so a log written here reads as Kafka's would: a key starts with an int16
record type (0 or 1: an offset commit, 2: a group's metadata); strings are an int16
length and UTF-8 bytes; integers are big-endian. Written: offset keys of type 1, offset
values of version 3, group keys of type 2 with a null value (the tombstone of a deleted
group). Read: offset values of versions 0-4; a group's metadata value is only
recognised (its content, the members of a generation, is not kept across a move of the
coordinator); other record types (Kafka 3.x/4.x's newer group kinds) are ignored.
"""

import struct
from typing import NamedTuple

from mpbroker.group_coordinator.results import OffsetAndMetadata

OFFSET_COMMIT_KEY_VERSION = 1
GROUP_METADATA_KEY_VERSION = 2
OFFSET_COMMIT_VALUE_VERSION = 3

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")
_UINT16 = struct.Struct(">H")


class OffsetKey(NamedTuple):
    group: str
    topic: str
    partition: int


class GroupKey(NamedTuple):
    group: str


class UnknownRecord(NamedTuple):
    """A record type this coordinator does not keep (its int16 type)."""
    record_type: int


def _string(text: str) -> bytes:
    data = text.encode("utf-8")
    if len(data) > 0x7FFF:
        raise ValueError(f"string of {len(data)} bytes does not fit an int16 length")
    return _INT16.pack(len(data)) + data


class _Reader:
    """Reads big-endian fields from a bytes value; a short value raises ValueError."""

    __slots__ = ("data", "at")

    def __init__(self, data: bytes):
        self.data = memoryview(data)
        self.at = 0

    def take(self, size: int) -> memoryview:
        if size < 0 or self.at + size > len(self.data):
            raise ValueError("record truncated")
        piece = self.data[self.at:self.at + size]
        self.at += size
        return piece

    def unpack(self, layout: struct.Struct) -> int:
        return layout.unpack(self.take(layout.size))[0]

    def string(self) -> str | None:
        size = self.unpack(_INT16)
        if size == -1:
            return None
        return str(self.take(size), "utf-8")

    def unsigned_varint(self) -> int:
        value = shift = 0
        while True:
            byte = self.take(1)[0]
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7
            if shift > 28:
                raise ValueError("varint too long")

    def compact_string(self) -> str | None:
        size = self.unsigned_varint() - 1
        return None if size < 0 else str(self.take(size), "utf-8")


def offset_commit_record(group: str, topic: str, partition: int, offset: OffsetAndMetadata) -> tuple:
    """``(key, value)`` of one committed offset. A null metadata is written as "" (the
    value's metadata is not nullable in Kafka's schema; Kafka stores "" for it too)."""
    key = _INT16.pack(OFFSET_COMMIT_KEY_VERSION) + _string(group) + _string(topic) + _INT32.pack(partition)
    value = (_INT16.pack(OFFSET_COMMIT_VALUE_VERSION) + _INT64.pack(offset.offset) + _INT32.pack(offset.leader_epoch)
             + _string(offset.metadata or "") + _INT64.pack(offset.commit_timestamp_ms))
    return key, value


def offset_tombstone(group: str, topic: str, partition: int) -> tuple:
    """``(key, None)``: the committed offset of one partition removed."""
    return offset_commit_record(group, topic, partition, OffsetAndMetadata(0, -1, "", 0))[0], None


def group_tombstone(group: str) -> tuple:
    """``(key, None)``: the group deleted (with its offsets, for ``load``)."""
    return _INT16.pack(GROUP_METADATA_KEY_VERSION) + _string(group), None


def decode_key(key: bytes):
    """An ``OffsetKey``, a ``GroupKey`` or an ``UnknownRecord``; ValueError if malformed."""
    reader = _Reader(key)
    record_type = reader.unpack(_INT16)
    if record_type in (0, 1):
        group, topic = reader.string(), reader.string()
        partition = reader.unpack(_INT32)
        if group is None or topic is None:
            raise ValueError("null group or topic in an offset commit key")
        return OffsetKey(group, topic, partition)
    if record_type == GROUP_METADATA_KEY_VERSION:
        group = reader.string()
        if group is None:
            raise ValueError("null group in a group metadata key")
        return GroupKey(group)
    return UnknownRecord(record_type)


def decode_offset_value(value: bytes) -> OffsetAndMetadata:
    """An offset commit value of version 0-4 (v1's expire timestamp is dropped)."""
    reader = _Reader(value)
    version = reader.unpack(_INT16)
    if version < 0 or version > 4:
        raise ValueError(f"offset commit value version {version} unknown")
    offset = reader.unpack(_INT64)
    leader_epoch = reader.unpack(_INT32) if version >= 3 else -1
    metadata = reader.compact_string() if version >= 4 else reader.string()
    commit_timestamp = reader.unpack(_INT64)
    return OffsetAndMetadata(offset, leader_epoch, "" if metadata is None else metadata, commit_timestamp)


def decode_group_value_version(value: bytes) -> int:
    """The version of a group metadata value (its content is skipped)."""
    return _Reader(value).unpack(_INT16)


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode``: over UTF-16 code units, s[0]*31^(n-1) + ... as int32."""
    units = text.encode("utf-16-be")
    h = 0
    for (unit,) in _UINT16.iter_unpack(units):
        h = (31 * h + unit) & 0xFFFFFFFF
    return h - 0x100000000 if h & 0x80000000 else h


def partition_for(group_id: str, num_partitions: int) -> int:
    """The offsets log partition of a group, as Kafka picks it:
    ``Utils.abs(groupId.hashCode()) % n``, where Kafka's ``Utils.abs`` maps
    Integer.MIN_VALUE to 0 and is ``Math.abs`` otherwise."""
    h = java_string_hash(group_id)
    return (0 if h == -0x80000000 else abs(h)) % num_partitions
