"""Committed offsets: who may commit to a group (Kafka's validateOffsetCommit), the
cache of what was committed (applied only once the commit is durable), and the cache
rebuilt from the offsets log (``records``) when this broker takes a partition of it.

The offsets live on their group (``Group.offsets``), so that deleting or unloading a
group takes them along."""

from mpbroker.group_coordinator.group import COMPLETING_REBALANCE, EMPTY, PREPARING_REBALANCE, STABLE, Group
from mpbroker.group_coordinator.membership import validate_current_member
from mpbroker.group_coordinator.records import (
    GroupKey,
    OffsetKey,
    decode_group_value_version,
    decode_key,
    decode_offset_value,
)
from mpbroker.group_coordinator.results import OffsetAndMetadata
from mpbroker.kafka_protocol.errors import KafkaError


def validate_commit(rb, now_ms, group_id, generation_id, member_id, group_instance_id) -> int:
    """Whether an OffsetCommit may go ahead. A member's commit needs its id and the
    current generation (and counts as its heartbeat); a commit with generation -1, no
    member id and no instance id (a consumer using assign()) only while the group has
    no members, and creates the group, Empty, if there is none. An empty group id is
    accepted, as Kafka accepts it for commits."""
    group = rb.groups.get(group_id)
    managed = generation_id >= 0 or member_id != "" or group_instance_id is not None
    if group is None:
        if generation_id >= 0:
            return KafkaError.ILLEGAL_GENERATION  # a member of a generation this coordinator never had
        if managed:
            return KafkaError.UNKNOWN_MEMBER_ID
        rb.groups[group_id] = Group(group_id)
        return KafkaError.NONE
    if not managed:
        return KafkaError.NONE if group.state == EMPTY else KafkaError.UNKNOWN_MEMBER_ID
    error = validate_current_member(group, member_id, group_instance_id)
    if error is not None:
        return error
    if generation_id != group.generation_id:
        return KafkaError.ILLEGAL_GENERATION
    if group.state == COMPLETING_REBALANCE:
        # It has its JoinGroup answer but not its assignment yet: let it finish.
        return KafkaError.REBALANCE_IN_PROGRESS
    if group.state in (STABLE, PREPARING_REBALANCE):
        member = group.members[member_id]
        rb.schedule_session(group, member, now_ms, member.session_timeout_ms)
    return KafkaError.NONE


def check_offset_metadata(metadata, max_bytes: int) -> int:
    """OFFSET_METADATA_TOO_LARGE past the limit (Kafka counts the string's UTF-16
    units: Java's String.length)."""
    if metadata is not None and len(metadata.encode("utf-16-le")) // 2 > max_bytes:
        return KafkaError.OFFSET_METADATA_TOO_LARGE
    return KafkaError.NONE


def commit_done(groups: dict, group_id: str, offsets: dict) -> None:
    """Durable commits into the cache. A group gone meanwhile (deleted, unloaded) keeps
    nothing: its tombstone or its new coordinator has the last word."""
    group = groups.get(group_id)
    if group is None:
        return
    for partition, (offset, leader_epoch, metadata, timestamp) in offsets.items():
        group.offsets[partition] = OffsetAndMetadata(offset, leader_epoch, metadata or "", timestamp)


def committed(groups: dict, group_id: str, partitions) -> dict:
    group = groups.get(group_id)
    if group is None:
        return {}
    if partitions is None:
        return dict(group.offsets)
    return {tp: group.offsets[tp] for tp in partitions if tp in group.offsets}


def load(groups: dict, key: bytes, value) -> str | None:
    """Replays one offsets log record; later records win. Returns the id of a group
    the record deleted (its tombstone) so the caller can answer its waiting members,
    else None. Raises ValueError for a malformed record."""
    decoded = decode_key(key)
    if isinstance(decoded, OffsetKey):
        partition = (decoded.topic, decoded.partition)
        group = groups.get(decoded.group)
        if value is None:
            if group is not None:
                group.offsets.pop(partition, None)
            return None
        offset = decode_offset_value(value)
        if group is None:
            group = groups[decoded.group] = Group(decoded.group)
        group.offsets[partition] = offset
    elif isinstance(decoded, GroupKey):
        if value is None:
            return decoded.group if decoded.group in groups else None
        decode_group_value_version(value)
        if decoded.group not in groups:
            groups[decoded.group] = Group(decoded.group)
    return None
