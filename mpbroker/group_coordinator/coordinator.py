"""The classic consumer-group coordinator (Kafka's GroupCoordinator), sans-IO: the
groups of the offsets partitions this broker leads, driven by calls that carry the time
(``now_ms``) and answered through return values or reply callbacks.

This module is the facade: it owns the groups and the queue of answers, and hands each
call to ``membership`` (JoinGroup, SyncGroup, Heartbeat, LeaveGroup), ``offsets``
(OffsetCommit, OffsetFetch, the log replay) or ``rebalance`` (deadlines). Every call
ends by calling the replies it made due, each exactly once."""

import collections

from mpbroker.group_coordinator import membership
from mpbroker.group_coordinator import offsets as offset_cache
from mpbroker.group_coordinator.group import DEAD, EMPTY, STABLE
from mpbroker.group_coordinator.rebalance import Rebalancer, Settings
from mpbroker.group_coordinator.results import GroupDescription, GroupListing, MemberDescription
from mpbroker.kafka_protocol.errors import KafkaError

_COMPACT_FLOOR = 1024


class GroupCoordinator:
    def __init__(self, *, min_session_timeout_ms=6000, max_session_timeout_ms=1_800_000,
                 initial_rebalance_delay_ms=3000, max_group_size=2**31 - 1, max_metadata_bytes=4096,
                 new_member_join_timeout_ms=300_000):
        self.settings = Settings(min_session_timeout_ms, max_session_timeout_ms, initial_rebalance_delay_ms,
                                 max_group_size, max_metadata_bytes, new_member_join_timeout_ms)
        self._groups = {}
        self._outbox = collections.deque()
        self._rebalancer = Rebalancer(self._groups, self.settings, self._outbox)
        self._compact_at = _COMPACT_FLOOR

    def _flush(self) -> None:
        """Call the replies due. A reply may call the coordinator again: the nested call
        flushes too, and each queued reply is taken off before it is called."""
        outbox = self._outbox
        while outbox:
            reply, result = outbox.popleft()
            reply(result)

    # --- the membership requests

    def join(self, now_ms: int, request, reply) -> None:
        """JoinGroup v0-5: ``reply(JoinResult)`` exactly once, now or from a later call."""
        try:
            self._run_due(now_ms)
            membership.join(self._rebalancer, now_ms, request, reply)
            self._run_due(now_ms)
        finally:
            self._flush()

    def sync(self, now_ms, group_id, generation_id, member_id, group_instance_id, protocol_type, protocol_name,
             assignments: dict, reply) -> None:
        """SyncGroup v0-3 (protocol type and name None before v5): ``reply(SyncResult)``
        exactly once; ``assignments`` {member_id: bytes} counts from the leader only."""
        try:
            self._run_due(now_ms)
            membership.sync(self._rebalancer, now_ms, group_id, generation_id, member_id, group_instance_id,
                            protocol_type, protocol_name, assignments, reply)
            self._run_due(now_ms)
        finally:
            self._flush()

    def heartbeat(self, now_ms, group_id, generation_id, member_id, group_instance_id) -> int:
        try:
            self._run_due(now_ms)
            return membership.heartbeat(self._rebalancer, now_ms, group_id, generation_id, member_id,
                                        group_instance_id)
        finally:
            self._flush()

    def leave(self, now_ms, group_id, members) -> tuple:
        """``members`` [(member_id, group_instance_id)] -> (error, [(member_id,
        group_instance_id, error)]). LeaveGroup v0-2 answer one error: the top one if
        not NONE, else the member's."""
        try:
            self._run_due(now_ms)
            answer = membership.leave(self._rebalancer, now_ms, group_id, members)
            self._run_due(now_ms)
            return answer
        finally:
            self._flush()

    # --- offsets

    def validate_commit(self, now_ms, group_id, generation_id, member_id, group_instance_id) -> int:
        try:
            self._run_due(now_ms)
            return offset_cache.validate_commit(self._rebalancer, now_ms, group_id, generation_id, member_id,
                                                group_instance_id)
        finally:
            self._flush()

    def check_offset_metadata(self, metadata) -> int:
        return offset_cache.check_offset_metadata(metadata, self.settings.max_metadata_bytes)

    def commit_done(self, group_id, offsets: dict) -> None:
        """{(topic, partition): OffsetAndMetadata}, written durably: now in the cache."""
        offset_cache.commit_done(self._groups, group_id, offsets)

    def committed(self, group_id, partitions) -> dict:
        """``partitions`` [(topic, p)], or None for all -> {(topic, p): OffsetAndMetadata}
        (a partition never committed is absent)."""
        return offset_cache.committed(self._groups, group_id, partitions)

    # --- the groups

    def list_groups(self, states=None) -> list:
        wanted = None if not states else {state.lower() for state in states}
        return [GroupListing(group.group_id, group.protocol_type or "", group.state)
                for group in self._groups.values() if wanted is None or group.state.lower() in wanted]

    def describe(self, group_id) -> GroupDescription:
        group = self._groups.get(group_id)
        if group is None:
            return GroupDescription(KafkaError.NONE, group_id, DEAD, "", "", [])
        stable = group.state == STABLE
        members = [MemberDescription(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                                     m.metadata(group.protocol_name) if stable else b"",
                                     m.assignment if stable else b"")
                   for m in group.members.values()]
        return GroupDescription(KafkaError.NONE, group_id, group.state, group.protocol_type or "",
                                group.protocol_name if stable else "", members)

    def delete(self, group_id) -> int:
        """DeleteGroups: the group and its offsets go (the caller writes its tombstone,
        ``records.group_tombstone``)."""
        group = self._groups.get(group_id)
        if group is None:
            return KafkaError.GROUP_ID_NOT_FOUND
        if group.state != EMPTY:
            return KafkaError.NON_EMPTY_GROUP
        del self._groups[group_id]
        return KafkaError.NONE

    def groups(self) -> list:
        return list(self._groups)

    def load(self, key: bytes, value) -> None:
        """Replay one record of the offsets log (ValueError if malformed)."""
        try:
            deleted = offset_cache.load(self._groups, key, value)
            if deleted is not None:
                self._forget(deleted, KafkaError.NOT_COORDINATOR)
        finally:
            self._flush()

    def unload(self, group_ids) -> None:
        """This broker no longer leads their offsets partition: pending JoinGroup and
        SyncGroup get NOT_COORDINATOR (the client finds the new coordinator)."""
        try:
            for group_id in group_ids:
                self._forget(group_id, KafkaError.NOT_COORDINATOR)
        finally:
            self._flush()

    def _forget(self, group_id, error: int) -> None:
        group = self._groups.pop(group_id, None)
        if group is not None:
            for member in group.members.values():
                self._rebalancer.fence_replies(group, member, error)

    # --- time

    def tick(self, now_ms) -> None:
        """Run every deadline due at ``now_ms``; then ``next_deadline_ms`` says when next."""
        deadlines = self._rebalancer.deadlines
        try:
            self._run_due(now_ms)
            if len(deadlines) > self._compact_at:
                deadlines.compact()
                self._compact_at = max(_COMPACT_FLOOR, 2 * len(deadlines))
        finally:
            self._flush()

    def _run_due(self, now_ms) -> None:
        """Every deadline due at ``now_ms``: run by ``tick`` and around each call that
        carries the time, so a call never acts on a session already over, nor leaves
        behind a deadline already due (a join phase of timeout 0, say)."""
        rebalancer = self._rebalancer
        while (entry := rebalancer.deadlines.pop_due(now_ms)) is not None:
            rebalancer.fire(entry, now_ms)

    def next_deadline_ms(self) -> float:
        """When ``tick`` must run next (math.inf if nothing waits), always after the
        ``now_ms`` of the last call. Any call may move it earlier: ask again after each."""
        return self._rebalancer.deadlines.next_at()
