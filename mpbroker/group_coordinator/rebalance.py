"""A group's rebalances and timeouts (Kafka's GroupCoordinator between requests): going
to PreparingRebalance, completing the join phase into a new generation, handing out
the leader's assignment, and what each deadline does when it comes up: a session that
ran out, a MEMBER_ID_REQUIRED id never used, the join phase's (or the initial delay's)
end, and the members that never sent SyncGroup.

Answers are not sent from here: they are queued on ``outbox`` as ``(reply, result)``
and the coordinator calls them once its own call is done, so a reply that calls the
coordinator again finds it consistent."""

import itertools
from typing import NamedTuple

from mpbroker.group_coordinator.deadlines import Deadlines
from mpbroker.group_coordinator.group import COMPLETING_REBALANCE, EMPTY, PREPARING_REBALANCE, STABLE
from mpbroker.group_coordinator.results import JoinMember, JoinResult, SyncResult
from mpbroker.kafka_protocol.errors import KafkaError

SESSION = "session"
PENDING = "pending"
JOIN = "join"
SYNC = "sync"


class Settings(NamedTuple):
    min_session_timeout_ms: int = 6000
    max_session_timeout_ms: int = 1_800_000
    initial_rebalance_delay_ms: int = 3000
    max_group_size: int = 2**31 - 1
    max_metadata_bytes: int = 4096
    new_member_join_timeout_ms: int = 300_000


def join_error(member_id: str, error: int) -> JoinResult:
    """Kafka's answer to a JoinGroup that failed: no generation (-1), no leader."""
    return JoinResult(error, -1, None, None, "", member_id, [])


def sync_error(error: int) -> SyncResult:
    return SyncResult(error, None, None, b"")


class Rebalancer:
    __slots__ = ("groups", "settings", "outbox", "deadlines", "_tokens")

    def __init__(self, groups: dict, settings: Settings, outbox):
        self.groups = groups
        self.settings = settings
        self.outbox = outbox
        self.deadlines = Deadlines(self._due_at)
        self._tokens = itertools.count(1)

    def answer(self, reply, result) -> None:
        self.outbox.append((reply, result))

    # --- deadlines

    def schedule_session(self, group, member, now_ms: int, timeout_ms: int) -> None:
        """Kafka's completeAndScheduleNextExpiration: the member is alive now and must be
        heard from again within ``timeout_ms``."""
        member.expires_at = now_ms + timeout_ms
        if member.heap_at is None or member.expires_at < member.heap_at:
            member.heap_at = member.expires_at
            self.deadlines.push(member.expires_at, SESSION, group, member)

    def schedule_pending(self, group, member_id: str, now_ms: int, timeout_ms: int) -> None:
        token = next(self._tokens)
        group.pending[member_id] = token
        self.deadlines.push(now_ms + timeout_ms, PENDING, group, member_id, token)

    def _schedule_join(self, group, at: float, initial) -> None:
        group.join_timer = next(self._tokens)
        group.initial_delay = initial
        self.deadlines.push(at, JOIN, group, None, group.join_timer)

    def _schedule_sync(self, group, at: float) -> None:
        group.sync_timer = next(self._tokens)
        self.deadlines.push(at, SYNC, group, None, group.sync_timer)

    def _due_at(self, entry):
        """When an entry's deadline now stands: None if it no longer does; a later time
        if it moved (a session renewed since the entry was pushed)."""
        at, _, kind, group, ref, token = entry
        if self.groups.get(group.group_id) is not group:
            return None
        if kind == SESSION:
            if group.members.get(ref.member_id) is not ref or ref.heap_at != at:
                return None
            ref.heap_at = max(at, ref.expires_at)
            return ref.heap_at
        if kind == PENDING:
            return at if group.pending.get(ref) == token else None
        if kind == JOIN:
            return at if group.join_timer == token else None
        return at if group.sync_timer == token else None

    def fire(self, entry, now_ms: int) -> None:
        """A live deadline has come: do what it stands for."""
        at, _, kind, group, ref, _ = entry
        if kind == SESSION:
            self._session_expired(group, ref, now_ms)
        elif kind == PENDING:
            del group.pending[ref]
            if group.state == PREPARING_REBALANCE:
                self.try_complete_join(group, now_ms)
        elif kind == JOIN:
            self._join_deadline(group, at, now_ms)
        else:
            self._sync_deadline(group, now_ms)

    def _session_expired(self, group, member, now_ms: int) -> None:
        member.heap_at = None
        # A member whose JoinGroup or SyncGroup waits has nothing to heartbeat with: its
        # session is not held against it then (a new member's is: its JoinGroup may come
        # from a client long gone); the answer to that wait schedules the next session.
        if member.awaiting() and not member.is_new:
            return
        self.remove_member_and_update(group, member, now_ms)

    def _join_deadline(self, group, at: float, now_ms: int) -> None:
        initial, group.join_timer = group.initial_delay, None
        if initial is not None:
            delay, remaining = initial
            if group.new_member_added and remaining:
                # Another member joined the new group during the delay: wait once more,
                # within what is left of the rebalance timeout (Kafka's InitialDelayedJoin),
                # counted from when the last delay ended.
                group.new_member_added = False
                delay = min(self.settings.initial_rebalance_delay_ms, remaining)
                self._schedule_join(group, at + delay, (delay, max(remaining - delay, 0)))
                return
        self.complete_join(group, now_ms)

    def _sync_deadline(self, group, now_ms: int) -> None:
        group.sync_timer = None
        if group.state not in (COMPLETING_REBALANCE, STABLE) or not group.pending_sync:
            return
        for member_id in sorted(group.pending_sync):
            member = group.members.get(member_id)
            if member is not None:
                self._answer_removed(group, member)
                group.remove(member_id)
        self.prepare_rebalance(group, now_ms)

    # --- transitions

    def maybe_prepare_rebalance(self, group, now_ms: int) -> None:
        if group.state in (STABLE, COMPLETING_REBALANCE, EMPTY):
            self.prepare_rebalance(group, now_ms)

    def prepare_rebalance(self, group, now_ms: int) -> None:
        if group.state == COMPLETING_REBALANCE:
            self.reset_and_propagate_error(group, KafkaError.REBALANCE_IN_PROGRESS, now_ms)
        group.sync_timer = None
        if group.state == EMPTY:
            delay = self.settings.initial_rebalance_delay_ms
            remaining = max(group.rebalance_timeout_ms() - delay, 0)
            self._schedule_join(group, now_ms + delay, (delay, remaining))
            group.state = PREPARING_REBALANCE
        else:
            self._schedule_join(group, now_ms + group.rebalance_timeout_ms(), None)
            group.state = PREPARING_REBALANCE
            self.try_complete_join(group, now_ms)

    def try_complete_join(self, group, now_ms: int) -> None:
        """The join phase ends early once every member has rejoined and no handed-out
        member id is still expected (never during the initial delay)."""
        if (group.state == PREPARING_REBALANCE and group.initial_delay is None
                and group.has_all_members_joined()):
            self.complete_join(group, now_ms)

    def complete_join(self, group, now_ms: int) -> None:
        group.join_timer = None
        group.initial_delay = None
        # Dynamic members that did not rejoin are out; static ones keep their place.
        for member in [m for m in group.members.values() if m.join_reply is None and m.group_instance_id is None]:
            self._answer_removed(group, member)
            group.remove(member.member_id)
        if not group.maybe_elect_joined_leader() and group.members:
            # Only static members that did not rejoin are left: wait again for them.
            self._schedule_join(group, now_ms + group.rebalance_timeout_ms(), None)
            return
        group.init_next_generation()
        if group.state == EMPTY:
            return
        leader_members = [JoinMember(m.member_id, m.group_instance_id, m.metadata(group.protocol_name))
                          for m in group.members.values()]
        for member in group.members.values():
            reply = group.take_join_reply(member)
            if reply is not None:
                is_leader = member.member_id == group.leader_id
                self.answer(reply, JoinResult(KafkaError.NONE, group.generation_id, group.protocol_type,
                                              group.protocol_name, group.leader_id, member.member_id,
                                              leader_members if is_leader else []))
            self.schedule_session(group, member, now_ms, member.session_timeout_ms)
            member.is_new = False
            group.pending_sync.add(member.member_id)
        self._schedule_sync(group, now_ms + group.rebalance_timeout_ms())

    def set_and_propagate(self, group, assignments: dict, now_ms: int) -> None:
        """The leader's assignment to every member (b"" for those it left out)."""
        for member_id, member in group.members.items():
            member.assignment = bytes(assignments.get(member_id, b""))
        self._propagate(group, KafkaError.NONE, now_ms)

    def reset_and_propagate_error(self, group, error: int, now_ms: int) -> None:
        for member in group.members.values():
            member.assignment = b""
        self._propagate(group, error, now_ms)

    def _propagate(self, group, error: int, now_ms: int) -> None:
        ok = error == KafkaError.NONE
        for member in group.members.values():
            reply = group.take_sync_reply(member)
            if reply is not None:
                self.answer(reply, SyncResult(error, group.protocol_type if ok else None,
                                              group.protocol_name if ok else None, member.assignment))
                self.schedule_session(group, member, now_ms, member.session_timeout_ms)

    def remove_member_and_update(self, group, member, now_ms: int) -> None:
        """A member out (session over, LeaveGroup): the others rebalance."""
        self._answer_removed(group, member)
        group.remove(member.member_id)
        if group.state in (STABLE, COMPLETING_REBALANCE):
            self.maybe_prepare_rebalance(group, now_ms)
        elif group.state == PREPARING_REBALANCE:
            self.try_complete_join(group, now_ms)

    def _answer_removed(self, group, member) -> None:
        """A member about to be removed: its waiting JoinGroup (as Kafka) or SyncGroup
        (Kafka would leave it unanswered) gets UNKNOWN_MEMBER_ID."""
        reply = group.take_join_reply(member)
        if reply is not None:
            self.answer(reply, join_error("", KafkaError.UNKNOWN_MEMBER_ID))
        reply = group.take_sync_reply(member)
        if reply is not None:
            self.answer(reply, sync_error(KafkaError.UNKNOWN_MEMBER_ID))

    def fence_replies(self, group, member, error: int) -> None:
        """Answer whatever the member waits for with ``error`` (static replacement,
        NOT_COORDINATOR on unload)."""
        reply = group.take_join_reply(member)
        if reply is not None:
            self.answer(reply, join_error(member.member_id, error))
        reply = group.take_sync_reply(member)
        if reply is not None:
            self.answer(reply, sync_error(error))
