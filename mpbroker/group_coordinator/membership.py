"""The membership requests (JoinGroup, SyncGroup, Heartbeat, LeaveGroup) checked and
applied to a group, as Kafka's GroupCoordinator answers them: which member is who
(new, pending, dynamic, static and replaced), what each group state allows, and when a
request starts a rebalance. The rebalance itself is ``rebalance``'s."""

import uuid

from mpbroker.group_coordinator.group import COMPLETING_REBALANCE, PREPARING_REBALANCE, STABLE, Group, Member
from mpbroker.group_coordinator.rebalance import join_error, sync_error
from mpbroker.group_coordinator.results import JoinMember, JoinResult, SyncResult
from mpbroker.kafka_protocol.errors import KafkaError


def validate_current_member(group, member_id: str, instance_id):
    """None, or why ``member_id`` (with its instance id, if static) is not a current
    member: FENCED_INSTANCE_ID when the instance id is now another member's."""
    if instance_id is not None:
        current = group.static_members.get(instance_id)
        if current is None:
            return KafkaError.UNKNOWN_MEMBER_ID
        return KafkaError.FENCED_INSTANCE_ID if current != member_id else None
    return None if member_id in group.members else KafkaError.UNKNOWN_MEMBER_ID


def join(rb, now_ms: int, request, reply) -> None:
    settings = rb.settings
    if not request.group_id:
        rb.answer(reply, join_error(request.member_id, KafkaError.INVALID_GROUP_ID))
        return
    if not settings.min_session_timeout_ms <= request.session_timeout_ms <= settings.max_session_timeout_ms:
        rb.answer(reply, join_error(request.member_id, KafkaError.INVALID_SESSION_TIMEOUT))
        return
    new_member = request.member_id == ""
    group = rb.groups.get(request.group_id)
    created = group is None
    if created:
        if not new_member:
            rb.answer(reply, join_error(request.member_id, KafkaError.UNKNOWN_MEMBER_ID))
            return
        group = rb.groups[request.group_id] = Group(request.group_id)
    if not _accepts(group, request.member_id, settings.max_group_size):
        member = group.members.get(request.member_id)
        if member is not None:
            rb.fence_replies(group, member, KafkaError.GROUP_MAX_SIZE_REACHED)
            group.remove(member.member_id)
        rb.answer(reply, join_error("", KafkaError.GROUP_MAX_SIZE_REACHED))
    elif not group.supports_protocols(request.protocol_type, [name for name, _ in request.protocols]):
        rb.answer(reply, join_error("" if new_member else request.member_id, KafkaError.INCONSISTENT_GROUP_PROTOCOL))
    elif new_member:
        _new_member_join(rb, now_ms, group, request, reply)
    else:
        _current_member_join(rb, now_ms, group, request, reply)
    if group.state == PREPARING_REBALANCE:
        rb.try_complete_join(group, now_ms)
    if created and not group.members and not group.pending and not group.offsets:
        del rb.groups[group.group_id]  # refused before anything was kept


def _accepts(group, member_id: str, max_size: int) -> bool:
    """Kafka's acceptJoiningMember: a rejoining member always; a new one while the group
    (those rejoined, during PreparingRebalance) is under its maximum size."""
    member = group.members.get(member_id)
    if group.state == PREPARING_REBALANCE:
        return (member is not None and member.join_reply is not None) or group.awaiting_join < max_size
    if group.state in (COMPLETING_REBALANCE, STABLE):
        return member is not None or len(group.members) < max_size
    return True


def _new_member_join(rb, now_ms, group, request, reply) -> None:
    instance_id = request.group_instance_id
    prefix = request.client_id if instance_id is None else instance_id
    new_id = f"{prefix}-{uuid.uuid4()}"
    if instance_id is not None:
        old_id = group.static_members.get(instance_id)
        if old_id is not None:
            _replace_static_member(rb, now_ms, group, old_id, new_id, request, reply)
        else:
            _add_member(rb, now_ms, group, new_id, request, reply)
    elif request.require_known_member_id:
        # Remembered until it comes back with the id (or its session timeout passes).
        rb.schedule_pending(group, new_id, now_ms, request.session_timeout_ms)
        rb.answer(reply, join_error(new_id, KafkaError.MEMBER_ID_REQUIRED))
    else:
        _add_member(rb, now_ms, group, new_id, request, reply)


def _add_member(rb, now_ms, group, member_id, request, reply) -> None:
    member = Member(member_id, request.group_instance_id, request.client_id, request.client_host,
                    request.session_timeout_ms, request.rebalance_timeout_ms, request.protocol_type,
                    request.protocols)
    member.is_new = True
    if group.state == PREPARING_REBALANCE and group.generation_id == 0:
        group.new_member_added = True
    group.add(member, reply)
    # A new member cannot heartbeat before its JoinGroup is answered: it has longer.
    rb.schedule_session(group, member, now_ms, rb.settings.new_member_join_timeout_ms)
    rb.maybe_prepare_rebalance(group, now_ms)


def _replace_static_member(rb, now_ms, group, old_id, new_id, request, reply) -> None:
    """A known instance id with no member id: the new id replaces the old (whose
    waiting requests, and later calls, get FENCED_INSTANCE_ID)."""
    old_leader = group.leader_id
    member = group.members[old_id]
    rb.fence_replies(group, member, KafkaError.FENCED_INSTANCE_ID)
    group.replace_static(request.group_instance_id, old_id, new_id)
    rb.schedule_session(group, member, now_ms, member.session_timeout_ms)
    group.update_protocols(member, request.protocols, request.rebalance_timeout_ms, request.session_timeout_ms)
    if group.state == STABLE:
        if group.protocol_name == group.select_protocol():
            # No rebalance: the member gets the current generation and, with SyncGroup,
            # its old assignment. The leader named is the old one, so that a returning
            # leader does not compute an assignment a Stable group would not hand out.
            rb.answer(reply, JoinResult(KafkaError.NONE, group.generation_id, group.protocol_type,
                                        group.protocol_name, old_leader, new_id, []))
            return
        group.set_join_reply(member, reply)
        rb.maybe_prepare_rebalance(group, now_ms)
    else:
        group.set_join_reply(member, reply)
        if group.state == COMPLETING_REBALANCE:
            # The leader may be assigning to the old id: start over.
            rb.prepare_rebalance(group, now_ms)


def _current_member_join(rb, now_ms, group, request, reply) -> None:
    member_id = request.member_id
    if member_id in group.pending:
        if request.group_instance_id is not None:
            # Kafka fails this (a pending member is never static) with an internal error.
            rb.answer(reply, join_error(member_id, KafkaError.UNKNOWN_SERVER_ERROR))
        else:
            _add_member(rb, now_ms, group, member_id, request, reply)
        return
    instance_id = request.group_instance_id
    if instance_id is not None and group.static_member_fenced(instance_id, member_id):
        rb.answer(reply, join_error(member_id, KafkaError.FENCED_INSTANCE_ID))
        return
    member = group.members.get(member_id)
    if member is None or (instance_id is not None and instance_id not in group.static_members):
        rb.answer(reply, join_error(member_id, KafkaError.UNKNOWN_MEMBER_ID))
        return
    state = group.state
    if state == PREPARING_REBALANCE:
        _update_member(rb, now_ms, group, member, request, reply)
    elif state == COMPLETING_REBALANCE:
        if member.matches(request.protocols):
            # Its JoinGroup answer was lost: the same answer again.
            rb.answer(reply, _current_generation(group, member, with_members=member_id == group.leader_id))
        else:
            _update_member(rb, now_ms, group, member, request, reply)
    elif state == STABLE:
        if member_id == group.leader_id or not member.matches(request.protocols):
            # The leader rejoining asks for a rebalance (e.g. the topics changed).
            _update_member(rb, now_ms, group, member, request, reply)
        else:
            rb.answer(reply, _current_generation(group, member, with_members=False))
    else:
        rb.answer(reply, join_error(member_id, KafkaError.UNKNOWN_MEMBER_ID))


def _current_generation(group, member, with_members: bool) -> JoinResult:
    members = ([JoinMember(m.member_id, m.group_instance_id, m.metadata(group.protocol_name))
                for m in group.members.values()] if with_members else [])
    return JoinResult(KafkaError.NONE, group.generation_id, group.protocol_type, group.protocol_name,
                      group.leader_id, member.member_id, members)


def _update_member(rb, now_ms, group, member, request, reply) -> None:
    superseded = group.take_join_reply(member)
    if superseded is not None:
        # The same member's earlier JoinGroup (from a connection it gave up): Kafka
        # forgets it; it is answered here, with an error a client retries on.
        rb.answer(superseded, join_error(member.member_id, KafkaError.REBALANCE_IN_PROGRESS))
    group.update_protocols(member, request.protocols, request.rebalance_timeout_ms, request.session_timeout_ms)
    group.set_join_reply(member, reply)
    rb.maybe_prepare_rebalance(group, now_ms)


def sync(rb, now_ms, group_id, generation_id, member_id, group_instance_id, protocol_type, protocol_name,
         assignments, reply) -> None:
    if not group_id:
        rb.answer(reply, sync_error(KafkaError.INVALID_GROUP_ID))
        return
    group = rb.groups.get(group_id)
    if group is None:
        rb.answer(reply, sync_error(KafkaError.UNKNOWN_MEMBER_ID))
        return
    error = validate_current_member(group, member_id, group_instance_id)
    if error is None and generation_id != group.generation_id:
        error = KafkaError.ILLEGAL_GENERATION
    if error is None and ((protocol_type is not None and protocol_type != group.protocol_type)
                          or (protocol_name is not None and protocol_name != group.protocol_name)):
        error = KafkaError.INCONSISTENT_GROUP_PROTOCOL
    if error is not None:
        rb.answer(reply, sync_error(error))
    elif group.state == PREPARING_REBALANCE:
        rb.answer(reply, sync_error(KafkaError.REBALANCE_IN_PROGRESS))
    elif group.state == COMPLETING_REBALANCE:
        member = group.members[member_id]
        superseded = group.take_sync_reply(member)
        if superseded is not None:
            rb.answer(superseded, sync_error(KafkaError.REBALANCE_IN_PROGRESS))
        member.sync_reply = reply
        _synced(group, member_id)
        if member_id == group.leader_id:
            rb.set_and_propagate(group, assignments or {}, now_ms)
            group.state = STABLE
    elif group.state == STABLE:
        member = group.members[member_id]
        _synced(group, member_id)
        rb.answer(reply, SyncResult(KafkaError.NONE, group.protocol_type, group.protocol_name, member.assignment))
        rb.schedule_session(group, member, now_ms, member.session_timeout_ms)
    else:
        rb.answer(reply, sync_error(KafkaError.UNKNOWN_MEMBER_ID))


def _synced(group, member_id: str) -> None:
    group.pending_sync.discard(member_id)
    if not group.pending_sync:
        group.sync_timer = None  # everyone synced: nobody to remove


def heartbeat(rb, now_ms, group_id, generation_id, member_id, group_instance_id) -> int:
    if not group_id:
        return KafkaError.INVALID_GROUP_ID
    group = rb.groups.get(group_id)
    if group is None:
        return KafkaError.UNKNOWN_MEMBER_ID
    error = validate_current_member(group, member_id, group_instance_id)
    if error is not None:
        return error
    if generation_id != group.generation_id:
        return KafkaError.ILLEGAL_GENERATION
    if group.state not in (PREPARING_REBALANCE, COMPLETING_REBALANCE, STABLE):
        return KafkaError.UNKNOWN_MEMBER_ID
    member = group.members[member_id]
    rb.schedule_session(group, member, now_ms, member.session_timeout_ms)
    return KafkaError.REBALANCE_IN_PROGRESS if group.state == PREPARING_REBALANCE else KafkaError.NONE


def leave(rb, now_ms, group_id, members) -> tuple:
    """LeaveGroup (v3+: a batch; an empty member id with an instance id removes that
    static member, as an administrator does)."""
    if not group_id:
        return KafkaError.INVALID_GROUP_ID, []
    group = rb.groups.get(group_id)
    if group is None:
        return KafkaError.NONE, [(m, i, KafkaError.UNKNOWN_MEMBER_ID) for m, i in members]
    answers = []
    for member_id, instance_id in members:
        if member_id == "":
            current = group.static_members.get(instance_id) if instance_id is not None else None
            if current is None:
                error = KafkaError.UNKNOWN_MEMBER_ID
            else:
                rb.remove_member_and_update(group, group.members[current], now_ms)
                error = KafkaError.NONE
        elif member_id in group.pending:
            del group.pending[member_id]
            if group.state == PREPARING_REBALANCE:
                rb.try_complete_join(group, now_ms)
            error = KafkaError.NONE
        else:
            error = validate_current_member(group, member_id, instance_id)
            if error is None:
                rb.remove_member_and_update(group, group.members[member_id], now_ms)
                error = KafkaError.NONE
        answers.append((member_id, instance_id, error))
    return KafkaError.NONE, answers
