"""The classic consumer-group coordinator, sans-IO (no sockets, files, threads or
clocks of its own): Kafka's JoinGroup/SyncGroup/Heartbeat/LeaveGroup protocol, the
committed offsets, and the records of the offsets log they are kept in. The listener
above feeds it requests and the time, and writes the records it is handed."""

from mpbroker.group_coordinator.coordinator import GroupCoordinator
from mpbroker.group_coordinator.records import group_tombstone, offset_commit_record, offset_tombstone, partition_for
from mpbroker.group_coordinator.results import (
    GroupDescription,
    GroupListing,
    JoinMember,
    JoinRequest,
    JoinResult,
    MemberDescription,
    OffsetAndMetadata,
    SyncResult,
)

__all__ = [
    "GroupCoordinator", "GroupDescription", "GroupListing", "JoinMember", "JoinRequest", "JoinResult",
    "MemberDescription", "OffsetAndMetadata", "SyncResult", "group_tombstone", "offset_commit_record",
    "offset_tombstone", "partition_for",
]
