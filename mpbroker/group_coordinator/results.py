"""The values the group coordinator takes and gives: one request (JoinGroup's, the one
with many fields) and the answers. Plain tuples, so the wiring above copies them into
its own response messages field by field; the names follow Kafka's fields."""

from typing import NamedTuple


class JoinRequest(NamedTuple):
    group_id: str
    member_id: str  # "" for a new member
    group_instance_id: str | None  # set for a static member (KIP-345)
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int  # JoinGroup v0 has none: pass the session timeout, as Kafka does
    protocol_type: str
    protocols: tuple  # ((name, metadata bytes), ...), in the member's order of preference
    require_known_member_id: bool  # JoinGroup v4+
    reason: str | None = None


class JoinMember(NamedTuple):
    member_id: str
    group_instance_id: str | None
    metadata: bytes


class JoinResult(NamedTuple):
    error: int
    generation_id: int  # -1 with an error
    protocol_type: str | None
    protocol_name: str | None  # None with an error (JoinGroup v0-6 write "")
    leader: str  # "" with an error
    member_id: str
    members: list  # [JoinMember], only in the leader's answer


class SyncResult(NamedTuple):
    error: int
    protocol_type: str | None
    protocol_name: str | None
    assignment: bytes


class OffsetAndMetadata(NamedTuple):
    """One committed offset. ``metadata`` is the client's string ("" when it sent
    none, as Kafka stores it); ``leader_epoch`` -1 when unknown."""
    offset: int
    leader_epoch: int
    metadata: str | None
    commit_timestamp_ms: int


class MemberDescription(NamedTuple):
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes  # b"" unless the group is Stable (as Kafka describes it)
    assignment: bytes  # b"" unless the group is Stable


class GroupDescription(NamedTuple):
    error: int
    group_id: str
    state: str  # "Empty", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead"
    protocol_type: str
    protocol_name: str  # "" unless the group is Stable
    members: list  # [MemberDescription]


class GroupListing(NamedTuple):
    group_id: str
    protocol_type: str
    state: str
