"""The classic group protocol spoken by hand over one ``Wire`` connection (kafka-python's
``kafka.protocol`` classes for the bodies), for the bad-input tests and their run against
Apache Kafka: every call returns the answer's error codes and what a test needs of it,
nothing is retried. A single broker is every group's coordinator, so one connection is
enough (``find_coordinator`` is still there to be asked)."""

import struct
import time
from typing import NamedTuple

from kafka.protocol.admin import (
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    ListGroupsRequest,
    ListGroupsResponse,
)
from kafka.protocol.consumer import (
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)
from kafka.protocol.metadata import FindCoordinatorRequest, FindCoordinatorResponse

from tests.kafka.wire import Wire

_Protocol = JoinGroupRequest.JoinGroupRequestProtocol
_Assignment = SyncGroupRequest.SyncGroupRequestAssignment
_CommitTopic = OffsetCommitRequest.OffsetCommitRequestTopic
_CommitPartition = OffsetCommitRequest.OffsetCommitRequestTopic.OffsetCommitRequestPartition
_FetchTopic = OffsetFetchRequest.OffsetFetchRequestTopic
_Leaving = LeaveGroupRequest.MemberIdentity

# Kafka's error codes these tests name.
NONE = 0
OFFSET_METADATA_TOO_LARGE = 12
COORDINATOR_NOT_AVAILABLE = 15
NOT_COORDINATOR = 16
ILLEGAL_GENERATION = 22
INCONSISTENT_GROUP_PROTOCOL = 23
INVALID_GROUP_ID = 24
UNKNOWN_MEMBER_ID = 25
INVALID_SESSION_TIMEOUT = 26
REBALANCE_IN_PROGRESS = 27
GROUP_ID_NOT_FOUND = 69
NON_EMPTY_GROUP = 68
MEMBER_ID_REQUIRED = 79
FENCED_INSTANCE_ID = 82

SESSION_MS = 10_000


def subscription(*topics: str, user_data: bytes = b"") -> bytes:
    """A consumer's protocol metadata (ConsumerProtocolSubscription v0)."""
    out = struct.pack(">hi", 0, len(topics))
    for topic in topics:
        out += struct.pack(">h", len(topic)) + topic.encode()
    return out + struct.pack(">i", len(user_data)) + user_data


def assignment(topic: str, partitions) -> bytes:
    """A consumer's assignment (ConsumerProtocolAssignment v0)."""
    return (struct.pack(">hih", 0, 1, len(topic)) + topic.encode() + struct.pack(">i", len(partitions))
            + b"".join(struct.pack(">i", p) for p in partitions) + struct.pack(">i", -1))


class Joined(NamedTuple):
    member_id: str
    generation_id: int
    leader: str


class GroupWire(Wire):
    """``Wire`` plus a method per group API (the versions both brokers serve)."""

    def find_coordinator(self, key: str, version: int = 2) -> int:
        request = FindCoordinatorRequest(key=key, key_type=0, coordinator_keys=[])
        return self.call(10, version, bytes(request.encode(version=version)), FindCoordinatorResponse).error_code

    def join(self, group: str, member_id: str = "", *, session_timeout_ms: int = SESSION_MS,
             rebalance_timeout_ms: int = SESSION_MS, protocol_type: str = "consumer", protocols=None,
             instance_id=None, version: int = 5):
        """The JoinGroupResponse, as it came."""
        protocols = protocols if protocols is not None else [("range", subscription("t"))]
        request = JoinGroupRequest(
            group_id=group, session_timeout_ms=session_timeout_ms, rebalance_timeout_ms=rebalance_timeout_ms,
            member_id=member_id, group_instance_id=instance_id, protocol_type=protocol_type,
            protocols=[_Protocol(name=name, metadata=metadata) for name, metadata in protocols])
        return self.call(11, version, bytes(request.encode(version=version)), JoinGroupResponse)

    def join_as_new(self, group: str, **kwargs) -> Joined:
        """A new member in: JoinGroup v4+'s MEMBER_ID_REQUIRED, then the join with that id."""
        first = self.join(group, **kwargs)
        if first.error_code == MEMBER_ID_REQUIRED:
            first = self.join(group, first.member_id, **kwargs)
        assert first.error_code == NONE, first
        return Joined(first.member_id, first.generation_id, first.leader)

    def sync(self, group: str, generation_id: int, member_id: str, assignments=None, *, instance_id=None,
             version: int = 3):
        """The SyncGroupResponse; ``assignments`` {member id: bytes} (the leader's)."""
        request = SyncGroupRequest(
            group_id=group, generation_id=generation_id, member_id=member_id, group_instance_id=instance_id,
            protocol_type="consumer", protocol_name="range",
            assignments=[_Assignment(member_id=m, assignment=a) for m, a in (assignments or {}).items()])
        return self.call(14, version, bytes(request.encode(version=version)), SyncGroupResponse)

    def heartbeat(self, group: str, generation_id: int, member_id: str, *, instance_id=None,
                  version: int = 3) -> int:
        request = HeartbeatRequest(group_id=group, generation_id=generation_id, member_id=member_id,
                                   group_instance_id=instance_id)
        return self.call(12, version, bytes(request.encode(version=version)), HeartbeatResponse).error_code

    def leave(self, group: str, member_id: str, *, instance_id=None, version: int = 3):
        """``(top error, [member errors])`` (v0-2: one error, no members)."""
        request = LeaveGroupRequest(group_id=group, member_id=member_id, members=[
            _Leaving(member_id=member_id, group_instance_id=instance_id)])
        answer = self.call(13, version, bytes(request.encode(version=version)), LeaveGroupResponse)
        return answer.error_code, [m.error_code for m in (answer.members or [])] if version >= 3 else []

    def leave_many(self, group: str, member_ids) -> tuple:
        """LeaveGroup v3 of several members: ``(top error, [member errors])``."""
        request = LeaveGroupRequest(group_id=group, member_id="", members=[
            _Leaving(member_id=m, group_instance_id=None) for m in member_ids])
        answer = self.call(13, 3, bytes(request.encode(version=3)), LeaveGroupResponse)
        return answer.error_code, [m.error_code for m in answer.members]

    def commit(self, group: str, offsets: dict, *, generation_id: int = -1, member_id: str = "",
               instance_id=None, version: int = 7) -> dict:
        """``offsets`` {(topic, partition): (offset, metadata)} -> {(topic, partition): error}."""
        by_topic = {}
        for (topic, partition), (offset, metadata) in offsets.items():
            by_topic.setdefault(topic, []).append(_CommitPartition(
                partition_index=partition, committed_offset=offset, committed_leader_epoch=-1,
                commit_timestamp=-1, committed_metadata=metadata))
        request = OffsetCommitRequest(
            group_id=group, generation_id_or_member_epoch=generation_id, member_id=member_id,
            group_instance_id=instance_id, retention_time_ms=-1,
            topics=[_CommitTopic(name=topic, partitions=partitions) for topic, partitions in by_topic.items()])
        answer = self.call(8, version, bytes(request.encode(version=version)), OffsetCommitResponse)
        return {(t.name, p.partition_index): p.error_code for t in answer.topics for p in t.partitions}

    def committed(self, group: str, partitions, version: int = 5):
        """``(top error, {(topic, partition): (offset, metadata, error)})``."""
        by_topic = {}
        for topic, partition in partitions:
            by_topic.setdefault(topic, []).append(partition)
        request = OffsetFetchRequest(group_id=group, require_stable=False, groups=[], topics=[
            _FetchTopic(name=topic, partition_indexes=indexes) for topic, indexes in by_topic.items()])
        answer = self.call(9, version, bytes(request.encode(version=version)), OffsetFetchResponse)
        return answer.error_code, {(t.name, p.partition_index): (p.committed_offset, p.metadata, p.error_code)
                                   for t in answer.topics for p in t.partitions}

    def describe(self, group: str, version: int = 4, authorized_operations: bool = False):
        """The one DescribedGroup."""
        request = DescribeGroupsRequest(groups=[group], include_authorized_operations=authorized_operations)
        [described] = self.call(15, version, bytes(request.encode(version=version)), DescribeGroupsResponse).groups
        return described

    def list_groups(self, version: int = 2) -> dict:
        """``(error, {group id: state})`` (the state is "" before v4)."""
        request = ListGroupsRequest(states_filter=[], types_filter=[])
        answer = self.call(16, version, bytes(request.encode(version=version)), ListGroupsResponse)
        return answer.error_code, {g.group_id: getattr(g, "group_state", "") or "" for g in answer.groups}

    def delete(self, group: str, version: int = 1) -> int:
        request = DeleteGroupsRequest(groups_names=[group])
        [result] = self.call(42, version, bytes(request.encode(version=version)), DeleteGroupsResponse).results
        return result.error_code

    def stable_group(self, group: str, **kwargs) -> Joined:
        """A one-member group, Stable: joined, synced with an assignment of its own."""
        joined = self.join_as_new(group, **kwargs)
        answer = self.sync(group, joined.generation_id, joined.member_id,
                           {joined.member_id: assignment("t", [0])}, instance_id=kwargs.get("instance_id"))
        assert answer.error_code == NONE, answer
        return joined


def wait_for_coordinator(broker, timeout: float = 60.0) -> None:
    """Until the broker coordinates groups (Kafka makes ``__consumer_offsets`` on the
    first FindCoordinator and answers NOT_COORDINATOR or COORDINATOR_NOT_AVAILABLE
    until its partitions are loaded)."""
    deadline = time.monotonic() + timeout
    with GroupWire(broker) as w:
        while True:
            found = w.find_coordinator("probe")
            joined = w.join("probe", version=3) if found == NONE else None
            if joined is not None and joined.error_code == NONE:
                w.leave("probe", joined.member_id)
                return
            assert time.monotonic() < deadline, f"no coordinator: {found}, {joined}"
            time.sleep(0.2)
