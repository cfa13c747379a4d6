"""Joining, syncing, heartbeats, timeouts and leaving: scenarios of Kafka's classic
group protocol against the coordinator, time passed in by hand."""

import math

from mpbroker.group_coordinator import JoinMember
from mpbroker.kafka_protocol.errors import KafkaError
from tests.group_coordinator.helpers import REBALANCE, SESSION, Reply, coordinator, join, settle, sync

E = KafkaError


def state(coord, group="g"):
    return coord.describe(group).state


def test_two_members_join_elect_a_leader_and_get_their_assignments():
    coord = coordinator(initial_rebalance_delay_ms=3000)
    a = join(coord, 0, client="a", protocols=(("range", b"ma"), ("roundrobin", b"ra")))
    assert not a.done and state(coord) == "PreparingRebalance"
    b = join(coord, 1000, client="b", protocols=(("roundrobin", b"rb"), ("range", b"mb")))
    coord.tick(2999)
    assert not a.done and not b.done
    coord.tick(3000)  # a second member joined during the delay: it is waited again
    assert not a.done
    assert coord.next_deadline_ms() == 6000
    coord.tick(6000)
    ra, rb = a.result, b.result
    assert ra.error == rb.error == E.NONE
    assert ra.generation_id == rb.generation_id == 1
    assert ra.member_id.startswith("a-") and rb.member_id.startswith("b-")
    assert ra.leader == rb.leader == ra.member_id  # the first to join leads
    assert ra.protocol_name == "range"  # a tie in the vote: the first vote wins
    assert [m.member_id for m in ra.members] == [ra.member_id, rb.member_id]
    assert [m.metadata for m in ra.members] == [b"ma", b"mb"]
    assert rb.members == []
    assert state(coord) == "CompletingRebalance"

    follower = sync(coord, 6100, "g", 1, rb.member_id)
    assert not follower.done
    assert coord.heartbeat(6100, "g", 1, rb.member_id, None) == E.NONE
    leader = sync(coord, 6200, "g", 1, ra.member_id, {ra.member_id: b"A", rb.member_id: b"B", "ghost": b"X"})
    assert leader.result == (E.NONE, "consumer", "range", b"A")
    assert follower.result == (E.NONE, "consumer", "range", b"B")
    assert state(coord) == "Stable"
    description = coord.describe("g")
    assert (description.protocol_type, description.protocol_name) == ("consumer", "range")
    assert [(m.member_id, m.client_id, m.metadata, m.assignment) for m in description.members] == [
        (ra.member_id, "a", b"ma", b"A"), (rb.member_id, "b", b"mb", b"B")]
    # Stable: a SyncGroup again gets the same assignment
    assert sync(coord, 6300, "g", 1, rb.member_id).result.assignment == b"B"


def test_a_third_member_makes_the_others_rejoin_in_a_new_generation():
    coord = coordinator()
    ra, rb = settle(coord, 0)
    c = join(coord, 1000, client="c")
    assert state(coord) == "PreparingRebalance"
    assert coord.heartbeat(1100, "g", 1, ra.member_id, None) == E.REBALANCE_IN_PROGRESS
    assert coord.heartbeat(1100, "g", 1, rb.member_id, None) == E.REBALANCE_IN_PROGRESS
    assert sync(coord, 1100, "g", 1, rb.member_id).result.error == E.REBALANCE_IN_PROGRESS
    a2 = join(coord, 1200, member_id=ra.member_id)
    assert not a2.done
    b2 = join(coord, 1300, member_id=rb.member_id)  # the last: the join phase ends at once
    assert a2.result.generation_id == b2.result.generation_id == c.result.generation_id == 2
    assert a2.result.leader == ra.member_id  # the leader rejoined: it stays
    assert len(a2.result.members) == 3 and c.result.members == []
    assert coord.heartbeat(1400, "g", 1, ra.member_id, None) == E.ILLEGAL_GENERATION
    assert coord.heartbeat(1400, "g", 2, ra.member_id, None) == E.NONE


def test_a_follower_rejoining_a_stable_group_with_the_same_protocols_gets_the_generation_back():
    coord = coordinator()
    ra, rb = settle(coord, 0)
    again = join(coord, 100, member_id=rb.member_id)
    assert again.result == (E.NONE, 1, "consumer", "range", ra.member_id, rb.member_id, [])
    assert state(coord) == "Stable"
    # the leader rejoining does start a rebalance
    join(coord, 200, member_id=ra.member_id)
    assert state(coord) == "PreparingRebalance"


def test_a_member_whose_session_runs_out_is_removed_and_the_group_rebalances():
    coord = coordinator()
    ra, rb = settle(coord, 0)
    for now in range(3000, SESSION, 3000):
        assert coord.heartbeat(now, "g", 1, ra.member_id, None) == E.NONE
    assert coord.next_deadline_ms() == SESSION  # b's session, never renewed
    coord.tick(SESSION - 1)
    assert state(coord) == "Stable"
    coord.tick(SESSION)
    assert [m.member_id for m in coord.describe("g").members] == [ra.member_id]
    assert state(coord) == "PreparingRebalance"
    assert coord.heartbeat(SESSION, "g", 1, rb.member_id, None) == E.UNKNOWN_MEMBER_ID
    assert coord.heartbeat(SESSION, "g", 1, ra.member_id, None) == E.REBALANCE_IN_PROGRESS
    again = join(coord, SESSION + 1, member_id=ra.member_id)
    assert again.result.generation_id == 2 and len(again.result.members) == 1


def test_members_that_do_not_rejoin_within_the_rebalance_timeout_are_removed():
    coord = coordinator()
    ra, rb = settle(coord, 0)
    a2 = join(coord, 1000, member_id=ra.member_id)
    # b keeps heartbeating (REBALANCE_IN_PROGRESS) but never rejoins; a, awaiting its
    # JoinGroup, sends no heartbeat and is not expired for it.
    now = 1000
    while now < 1000 + REBALANCE:
        assert coord.heartbeat(now, "g", 1, rb.member_id, None) == E.REBALANCE_IN_PROGRESS
        coord.tick(now)
        assert not a2.done
        now += 3000
    coord.tick(1000 + REBALANCE)
    assert a2.result.error == E.NONE and a2.result.generation_id == 2
    assert [m.member_id for m in a2.result.members] == [ra.member_id]
    assert coord.heartbeat(now, "g", 1, rb.member_id, None) == E.UNKNOWN_MEMBER_ID


def test_the_leader_not_rejoining_hands_leadership_to_one_that_did():
    coord = coordinator()
    ra, rb = settle(coord, 0)
    b2 = join(coord, 1000, member_id=rb.member_id, protocols=(("range", b"changed"),))
    coord.heartbeat(5000, "g", 1, ra.member_id, None)
    coord.tick(1000 + REBALANCE)
    assert b2.result.leader == rb.member_id and b2.result.members[0].metadata == b"changed"


def test_a_new_member_awaiting_its_join_expires_after_the_new_member_timeout():
    coord = coordinator(new_member_join_timeout_ms=5000)
    (ra,) = settle(coord, 0, members=("a",))
    c = join(coord, 1000, client="c", rebalance=60_000)
    for now in (3000, 6000):  # a heartbeats but does not rejoin
        assert coord.heartbeat(now, "g", 1, ra.member_id, None) == E.REBALANCE_IN_PROGRESS
        coord.tick(now)
    assert c.result.error == E.UNKNOWN_MEMBER_ID and c.result.member_id == ""
    assert [m.member_id for m in coord.describe("g").members] == [ra.member_id]


def test_member_id_required_then_the_rejoin_with_it():
    coord = coordinator()
    first = join(coord, 0, client="cli", require_known=True)
    assert first.result.error == E.MEMBER_ID_REQUIRED
    assert first.result.member_id.startswith("cli-") and first.result.generation_id == -1
    assert coord.groups() == ["g"] and state(coord) == "Empty"
    second = join(coord, 100, member_id=first.result.member_id, client="cli", require_known=True)
    coord.tick(101)
    assert second.result.error == E.NONE and second.result.member_id == first.result.member_id
    assert second.result.leader == first.result.member_id


def test_an_unused_member_id_holds_the_join_phase_until_it_expires():
    coord = coordinator()
    (ra,) = settle(coord, 0, members=("a",))
    pending = join(coord, 1000, client="n", require_known=True, session=7000)
    assert pending.result.error == E.MEMBER_ID_REQUIRED
    assert state(coord) == "Stable"  # a member id handed out changes nothing yet
    a2 = join(coord, 2000, member_id=ra.member_id)
    assert not a2.done  # the pending member may still come
    coord.tick(7999)
    assert not a2.done
    coord.tick(8000)
    assert a2.result.generation_id == 2 and len(a2.result.members) == 1
    late = join(coord, 9000, member_id=pending.result.member_id, client="n")
    assert late.result.error == E.UNKNOWN_MEMBER_ID


def test_join_errors():
    coord = coordinator(min_session_timeout_ms=6000, max_session_timeout_ms=60_000)
    assert join(coord, 0, group="").result.error == E.INVALID_GROUP_ID
    assert join(coord, 0, session=5999).result.error == E.INVALID_SESSION_TIMEOUT
    assert join(coord, 0, session=60_001).result.error == E.INVALID_SESSION_TIMEOUT
    assert join(coord, 0, member_id="nobody").result.error == E.UNKNOWN_MEMBER_ID
    assert join(coord, 0, protocol_type="").result.error == E.INCONSISTENT_GROUP_PROTOCOL
    assert join(coord, 0, protocols=()).result.error == E.INCONSISTENT_GROUP_PROTOCOL
    assert coord.groups() == []  # refused joins leave no group behind
    ra, rb = settle(coord, 0)
    assert join(coord, 10, protocol_type="connect").result.error == E.INCONSISTENT_GROUP_PROTOCOL
    assert join(coord, 10, protocols=(("sticky", b""),)).result.error == E.INCONSISTENT_GROUP_PROTOCOL
    assert join(coord, 10, member_id="nobody").result.error == E.UNKNOWN_MEMBER_ID
    assert state(coord) == "Stable"


def test_the_group_max_size():
    coord = coordinator(max_group_size=2)
    settle(coord, 0)
    refused = join(coord, 10, client="c")
    assert refused.result.error == E.GROUP_MAX_SIZE_REACHED and refused.result.member_id == ""
    assert len(coord.describe("g").members) == 2


def test_the_initial_delay_is_extended_by_joins_up_to_the_rebalance_timeout():
    coord = coordinator(initial_rebalance_delay_ms=3000)
    replies = [join(coord, 0, client="m0", rebalance=10_000)]
    now = 0
    while not replies[0].done:
        now += 1000
        replies.append(join(coord, now, client=f"m{now}", rebalance=10_000))
        coord.tick(now)
    assert now <= 10_000  # not one delay after another forever
    assert all(r.result.generation_id == 1 for r in replies[:-1])


def test_the_initial_delay_does_not_apply_to_a_group_that_is_not_empty():
    coord = coordinator(initial_rebalance_delay_ms=3000)
    a = join(coord, 0, client="a")
    coord.tick(3000)
    assert a.result.generation_id == 1
    c = join(coord, 3100, client="c")
    a2 = join(coord, 3200, member_id=a.result.member_id)
    assert c.result.generation_id == a2.result.generation_id == 2


def test_a_member_that_never_syncs_is_removed_after_the_rebalance_timeout():
    coord = coordinator()
    a, b = join(coord, -2, client="a"), join(coord, -2, client="b")
    coord.tick(0)
    ra, rb = a.result, b.result
    leader = sync(coord, 100, "g", 1, ra.member_id, {ra.member_id: b"A", rb.member_id: b"B"})
    assert leader.result.assignment == b"A" and state(coord) == "Stable"
    for now in range(3000, REBALANCE, 3000):  # b heartbeats but never syncs
        assert coord.heartbeat(now, "g", 1, ra.member_id, None) == E.NONE
        assert coord.heartbeat(now, "g", 1, rb.member_id, None) == E.NONE
        coord.tick(now)
    assert len(coord.describe("g").members) == 2
    coord.tick(REBALANCE)
    assert [m.member_id for m in coord.describe("g").members] == [ra.member_id]
    assert coord.heartbeat(REBALANCE, "g", 1, ra.member_id, None) == E.REBALANCE_IN_PROGRESS


def test_the_leader_never_syncing_fails_the_waiting_followers_with_rebalance_in_progress():
    coord = coordinator()
    join(coord, -2, client="a")
    b = join(coord, -2, client="b")
    coord.tick(0)
    follower = sync(coord, 100, "g", 1, b.result.member_id)
    coord.tick(REBALANCE)
    assert follower.result == (E.REBALANCE_IN_PROGRESS, None, None, b"")
    assert [m.member_id for m in coord.describe("g").members] == [b.result.member_id]


def test_sync_errors():
    coord = coordinator()
    ra, rb = settle(coord, 0)
    assert sync(coord, 1, "", 1, ra.member_id).result.error == E.INVALID_GROUP_ID
    assert sync(coord, 1, "other", 1, ra.member_id).result.error == E.UNKNOWN_MEMBER_ID
    assert sync(coord, 1, "g", 1, "nobody").result.error == E.UNKNOWN_MEMBER_ID
    assert sync(coord, 1, "g", 7, ra.member_id).result.error == E.ILLEGAL_GENERATION
    reply = Reply()
    coord.sync(1, "g", 1, ra.member_id, None, "consumer", "roundrobin", {}, reply)
    assert reply.result.error == E.INCONSISTENT_GROUP_PROTOCOL


def test_heartbeat_errors():
    coord = coordinator()
    ra, _ = settle(coord, 0)
    assert coord.heartbeat(1, "", 1, ra.member_id, None) == E.INVALID_GROUP_ID
    assert coord.heartbeat(1, "other", 1, ra.member_id, None) == E.UNKNOWN_MEMBER_ID
    assert coord.heartbeat(1, "g", 1, "nobody", None) == E.UNKNOWN_MEMBER_ID
    assert coord.heartbeat(1, "g", 0, ra.member_id, None) == E.ILLEGAL_GENERATION
    assert coord.heartbeat(1, "g", 1, ra.member_id, "not-static") == E.UNKNOWN_MEMBER_ID


def test_leave_group_batch_removes_members_and_rebalances_at_once():
    coord = coordinator()
    joins = [join(coord, -2, client=name, instance=instance) for name, instance in
             (("a", None), ("b", "ib"), ("c", "ic"), ("d", None))]
    coord.tick(0)
    ids = [r.result.member_id for r in joins]
    error, answers = coord.leave(10, "g", [(ids[0], None), ("", "ib"), (ids[3], "ic"), ("nobody", None),
                                           ("", "unknown-instance")])
    assert error == E.NONE
    assert [e for _, _, e in answers] == [E.NONE, E.NONE, E.FENCED_INSTANCE_ID, E.UNKNOWN_MEMBER_ID,
                                          E.UNKNOWN_MEMBER_ID]
    assert [m.member_id for m in coord.describe("g").members] == [ids[2], ids[3]]
    assert state(coord) == "PreparingRebalance"
    assert coord.leave(10, "other", [(ids[2], None)]) == (E.NONE, [(ids[2], None, E.UNKNOWN_MEMBER_ID)])
    assert coord.leave(10, "", [(ids[2], None)]) == (E.INVALID_GROUP_ID, [])
    # the last members leaving: the join phase ends with nobody, Empty, a generation on
    c3 = join(coord, 20, member_id=ids[2], instance="ic")
    coord.leave(30, "g", [(ids[3], None)])
    assert c3.result.generation_id == 2
    coord.leave(40, "g", [(ids[2], "ic")])
    assert state(coord) == "Empty"
    assert coord.describe("g").members == []


def test_a_member_leaving_during_the_join_phase_answers_its_join():
    coord = coordinator()
    ra, rb = settle(coord, 0)
    a2 = join(coord, 10, member_id=ra.member_id)
    coord.leave(20, "g", [(ra.member_id, None)])
    assert a2.result.error == E.UNKNOWN_MEMBER_ID


def test_a_pending_member_may_leave():
    coord = coordinator()
    pending = join(coord, 0, require_known=True).result.member_id
    assert coord.leave(1, "g", [(pending, None)])[1] == [(pending, None, E.NONE)]
    assert join(coord, 2, member_id=pending).result.error == E.UNKNOWN_MEMBER_ID


def test_next_deadline_is_infinite_with_nothing_waiting_and_moves_with_heartbeats():
    coord = coordinator()
    assert coord.next_deadline_ms() == math.inf
    ra, rb = settle(coord, 0)
    coord.heartbeat(4000, "g", 1, ra.member_id, None)
    coord.heartbeat(4000, "g", 1, rb.member_id, None)
    assert coord.next_deadline_ms() in (SESSION, 4000 + SESSION)  # a sync deadline may remain
    coord.tick(SESSION)
    assert coord.next_deadline_ms() == 4000 + SESSION
    assert state(coord) == "Stable"
    coord.leave(5000, "g", [(ra.member_id, None), (rb.member_id, None)])
    coord.tick(5000)
    assert state(coord) == "Empty" and coord.next_deadline_ms() == math.inf


def test_a_reply_may_call_the_coordinator_again():
    coord = coordinator()
    seen = []

    def reply(result):
        seen.append(result)
        seen.append(coord.heartbeat(1, "g", result.generation_id, result.member_id, None))

    from mpbroker.group_coordinator import JoinRequest
    coord.join(-1, JoinRequest("g", "", None, "c", "h", SESSION, REBALANCE, "consumer", (("r", b""),), False), reply)
    coord.tick(0)
    assert seen[0].error == E.NONE and seen[1] == E.NONE


def test_join_member_tuple_shape():
    assert JoinMember("m", None, b"x")._fields == ("member_id", "group_instance_id", "metadata")
