"""Static membership (KIP-345): a known group.instance.id coming back under a new member
id replaces the old one, without a rebalance when nothing else changed."""

from mpbroker.kafka_protocol.errors import KafkaError
from tests.group_coordinator.helpers import coordinator, join, sync

E = KafkaError


def stable_static_group(coord):
    a, b = join(coord, -2, client="a", instance="ia"), join(coord, -2, client="b", instance="ib")
    coord.tick(0)
    ra, rb = a.result, b.result
    assert ra.member_id.startswith("ia-")  # a static member's id starts with its instance id
    sync(coord, 1, "g", 1, rb.member_id, instance="ib")
    sync(coord, 1, "g", 1, ra.member_id, {ra.member_id: b"A", rb.member_id: b"B"}, instance="ia")
    assert coord.describe("g").state == "Stable"
    return ra, rb


def test_a_restarted_static_member_takes_its_place_without_a_rebalance():
    coord = coordinator()
    ra, rb = stable_static_group(coord)
    back = join(coord, 100, instance="ib", client="b")
    result = back.result
    assert result.error == E.NONE and result.member_id != rb.member_id and result.member_id.startswith("ib-")
    assert (result.generation_id, result.protocol_name, result.leader, result.members) == (1, "range", ra.member_id, [])
    assert coord.describe("g").state == "Stable"
    assert sync(coord, 110, "g", 1, result.member_id, instance="ib").result.assignment == b"B"
    # the old member id is fenced; without its instance id it is simply unknown
    assert coord.heartbeat(120, "g", 1, rb.member_id, "ib") == E.FENCED_INSTANCE_ID
    assert coord.heartbeat(120, "g", 1, rb.member_id, None) == E.UNKNOWN_MEMBER_ID
    assert join(coord, 120, member_id=rb.member_id, instance="ib").result.error == E.FENCED_INSTANCE_ID
    assert coord.validate_commit(120, "g", 1, rb.member_id, "ib") == E.FENCED_INSTANCE_ID
    assert coord.heartbeat(120, "g", 1, result.member_id, "ib") == E.NONE


def test_a_restarted_static_leader_is_not_told_it_leads():
    coord = coordinator()
    ra, rb = stable_static_group(coord)
    back = join(coord, 100, instance="ia", client="a").result
    # the leader named is the old member id, so the returning member runs no assignment
    assert back.leader == ra.member_id and back.member_id != ra.member_id and back.members == []
    assert sync(coord, 110, "g", 1, back.member_id, instance="ia").result.assignment == b"A"
    # it does lead the next generation
    again = join(coord, 200, member_id=back.member_id, instance="ia")
    join(coord, 200, member_id=rb.member_id, instance="ib")
    assert again.result.leader == back.member_id and again.result.generation_id == 2


def test_a_static_member_back_with_new_metadata_but_the_same_vote_does_not_rebalance():
    coord = coordinator()
    ra, rb = stable_static_group(coord)
    back = join(coord, 100, instance="ib", protocols=(("roundrobin", b""), ("range", b"new")))
    # Kafka rebalances only when the protocol the group would pick changes
    assert back.result.error == E.NONE and coord.describe("g").state == "Stable"


def test_a_static_member_back_with_a_vote_that_changes_the_protocol_makes_the_group_rebalance():
    coord = coordinator()
    a = join(coord, -2, instance="ia")
    coord.tick(0)
    sync(coord, 1, "g", 1, a.result.member_id, {a.result.member_id: b"A"}, instance="ia")
    back = join(coord, 100, instance="ia", protocols=(("roundrobin", b"rr"), ("range", b"")))
    # alone in the group, its new first choice wins the vote: a new generation at once
    assert back.result.generation_id == 2 and back.result.protocol_name == "roundrobin"
    assert back.result.leader == back.result.member_id


def test_static_replacement_during_completing_rebalance_fences_the_old_sync_and_restarts():
    coord = coordinator()
    a, b = join(coord, -2, client="a", instance="ia"), join(coord, -2, client="b", instance="ib")
    coord.tick(0)
    waiting = sync(coord, 10, "g", 1, b.result.member_id, instance="ib")
    back = join(coord, 20, instance="ib")
    assert waiting.result.error == E.FENCED_INSTANCE_ID
    assert coord.describe("g").state == "PreparingRebalance" and not back.done
    a2 = join(coord, 30, member_id=a.result.member_id, instance="ia")
    assert a2.result.generation_id == back.result.generation_id == 2


def test_static_replacement_during_the_join_phase_fences_the_old_join():
    coord = coordinator()
    ra, rb = stable_static_group(coord)
    b2 = join(coord, 100, member_id=rb.member_id, instance="ib", protocols=(("range", b"x"),))
    back = join(coord, 110, instance="ib", protocols=(("range", b"y"),))
    assert b2.result.error == E.FENCED_INSTANCE_ID
    a2 = join(coord, 120, member_id=ra.member_id, instance="ia")
    assert a2.result.generation_id == back.result.generation_id == 2
    assert [m.metadata for m in a2.result.members] == [b"meta", b"y"]


def test_a_static_member_that_does_not_rejoin_stays_through_the_join_phase():
    coord = coordinator()
    ra, rb = stable_static_group(coord)
    a2 = join(coord, 100, member_id=ra.member_id, instance="ia")
    for now in range(3000, 30_000, 3000):
        assert coord.heartbeat(now, "g", 1, rb.member_id, "ib") == E.REBALANCE_IN_PROGRESS
        coord.tick(now)
    coord.tick(100 + 30_000)
    # the join phase ended on its timeout; the static member b, absent, is kept
    assert a2.result.generation_id == 2
    assert [m.member_id for m in a2.result.members] == [ra.member_id, rb.member_id]


def test_static_member_join_with_an_unknown_instance_and_a_member_id_is_unknown():
    coord = coordinator()
    ra, _ = stable_static_group(coord)
    assert join(coord, 100, member_id=ra.member_id, instance="other").result.error == E.UNKNOWN_MEMBER_ID
