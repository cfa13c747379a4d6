"""Offset commits (who may, and when they count), the offsets cache and its replay
from the offsets log, and the group admin calls (list, describe, delete, unload)."""

import pytest

from mpbroker.group_coordinator import OffsetAndMetadata, group_tombstone, offset_commit_record, offset_tombstone
from mpbroker.kafka_protocol.errors import KafkaError
from tests.group_coordinator.helpers import SESSION, coordinator, join, settle, sync

E = KafkaError
O1 = OffsetAndMetadata(10, 3, "m", 1000)
O2 = OffsetAndMetadata(20, 4, "", 2000)


def test_a_simple_consumer_commits_into_a_group_it_creates_empty():
    coord = coordinator()
    assert coord.validate_commit(0, "simple", -1, "", None) == E.NONE
    assert coord.committed("simple", None) == {}  # nothing until the commit is durable
    coord.commit_done("simple", {("t", 0): O1, ("t", 1): O2._replace(metadata=None)})
    assert coord.committed("simple", None) == {("t", 0): O1, ("t", 1): O2}  # null metadata reads ""
    assert coord.committed("simple", [("t", 1), ("t", 9)]) == {("t", 1): O2}
    assert coord.committed("nobody", None) == {}
    assert coord.list_groups() == [("simple", "", "Empty")]
    # it may still commit; a member id it does not have, or a generation, it may not
    assert coord.validate_commit(1, "simple", -1, "", None) == E.NONE
    assert coord.validate_commit(1, "simple", -1, "someone", None) == E.UNKNOWN_MEMBER_ID
    assert coord.validate_commit(1, "simple", 1, "", None) == E.UNKNOWN_MEMBER_ID
    assert coord.validate_commit(1, "absent", 3, "m", None) == E.ILLEGAL_GENERATION
    assert coord.validate_commit(1, "absent", -1, "m", None) == E.UNKNOWN_MEMBER_ID
    assert "absent" not in coord.groups()


def test_member_commits_are_checked_against_the_generation():
    coord = coordinator()
    ra, rb = settle(coord, 0)
    assert coord.validate_commit(1, "g", -1, "", None) == E.UNKNOWN_MEMBER_ID  # members: no simple commits
    assert coord.validate_commit(1, "g", 1, ra.member_id, None) == E.NONE
    assert coord.validate_commit(1, "g", 2, ra.member_id, None) == E.ILLEGAL_GENERATION
    assert coord.validate_commit(1, "g", 1, "nobody", None) == E.UNKNOWN_MEMBER_ID
    join(coord, 2, client="c")  # PreparingRebalance: commits still allowed
    assert coord.validate_commit(3, "g", 1, ra.member_id, None) == E.NONE
    join(coord, 4, member_id=ra.member_id)
    join(coord, 4, member_id=rb.member_id)
    assert coord.describe("g").state == "CompletingRebalance"
    assert coord.validate_commit(5, "g", 2, ra.member_id, None) == E.REBALANCE_IN_PROGRESS


def test_a_commit_counts_as_a_heartbeat():
    coord = coordinator()
    ra, rb = settle(coord, 0)
    for now in range(4000, 3 * SESSION, 4000):
        assert coord.validate_commit(now, "g", 1, ra.member_id, None) == E.NONE
        assert coord.heartbeat(now, "g", 1, rb.member_id, None) == E.NONE
        coord.tick(now)
    assert coord.describe("g").state == "Stable"


def test_an_empty_group_id_may_commit_as_kafka_allows():
    coord = coordinator()
    assert coord.validate_commit(0, "", -1, "", None) == E.NONE


def test_offset_metadata_limit():
    coord = coordinator(max_metadata_bytes=4)
    assert coord.check_offset_metadata(None) == E.NONE
    assert coord.check_offset_metadata("abcd") == E.NONE
    assert coord.check_offset_metadata("abcde") == E.OFFSET_METADATA_TOO_LARGE
    assert coord.check_offset_metadata("\U0001F600\U0001F600\U0001F600") == E.OFFSET_METADATA_TOO_LARGE  # 6 units


def test_a_commit_made_durable_after_the_group_was_deleted_is_dropped():
    coord = coordinator()
    coord.validate_commit(0, "s", -1, "", None)
    assert coord.delete("s") == E.NONE
    coord.commit_done("s", {("t", 0): O1})
    assert coord.groups() == [] and coord.committed("s", None) == {}


def test_delete():
    coord = coordinator()
    assert coord.delete("nobody") == E.GROUP_ID_NOT_FOUND
    ra, rb = settle(coord, 0)
    coord.validate_commit(1, "g", 1, ra.member_id, None)
    coord.commit_done("g", {("t", 0): O1})
    assert coord.delete("g") == E.NON_EMPTY_GROUP
    coord.leave(2, "g", [(ra.member_id, None), (rb.member_id, None)])
    assert coord.describe("g").state == "Empty"
    assert coord.committed("g", None) == {("t", 0): O1}  # an Empty group keeps its offsets
    assert coord.delete("g") == E.NONE
    assert coord.committed("g", None) == {} and coord.groups() == []
    assert coord.describe("g") == (E.NONE, "g", "Dead", "", "", [])


def test_describe_and_list():
    coord = coordinator()
    assert coord.describe("nobody") == (E.NONE, "nobody", "Dead", "", "", [])
    settle(coord, 0, group="stable")
    join(coord, 0, group="joining", client="j")
    coord.validate_commit(0, "simple", -1, "", None)
    listed = {g.group_id: g for g in coord.list_groups()}
    assert listed["stable"] == ("stable", "consumer", "Stable")
    assert listed["joining"] == ("joining", "consumer", "PreparingRebalance")
    assert listed["simple"] == ("simple", "", "Empty")
    assert [g.group_id for g in coord.list_groups(["stable", "Empty"])] == ["stable", "simple"]
    joining = coord.describe("joining")
    assert (joining.state, joining.protocol_type, joining.protocol_name) == ("PreparingRebalance", "consumer", "")
    assert [(m.client_id, m.client_host, m.metadata, m.assignment) for m in joining.members] == [
        ("j", "/10.0.0.1", b"", b"")]  # only a Stable group shows metadata and assignments


def test_load_replays_the_log_later_records_winning():
    coord = coordinator()
    records = [
        offset_commit_record("g", "t", 0, O1),
        offset_commit_record("g", "t", 1, O1),
        offset_commit_record("g", "t", 0, O2),  # later wins
        offset_tombstone("g", "t", 1),
        offset_commit_record("h", "t", 0, O1),
        group_tombstone("h"),  # the group deleted: its offsets go
        offset_commit_record("i", "t", 0, O1),
        group_tombstone("i"),
        offset_commit_record("i", "t", 5, O2),  # ... and a later commit brings it back
        (b"\x00\x07whatever", b"ignored"),  # a record type of Kafka's newer groups
        (group_tombstone("j")[0], b"\x00\x03rest-of-a-group-metadata-value"),
    ]
    for key, value in records:
        coord.load(key, value)
    assert coord.committed("g", None) == {("t", 0): O2}
    assert coord.committed("h", None) == {} and "h" not in coord.groups()
    assert coord.committed("i", None) == {("t", 5): O2}
    assert sorted(coord.groups()) == ["g", "i", "j"]
    assert coord.describe("j").state == "Empty"
    with pytest.raises(ValueError):
        coord.load(b"\x00\x01\x00", b"")


def test_loaded_groups_take_new_members():
    coord = coordinator()
    coord.load(*offset_commit_record("g", "t", 0, O1))
    ra, rb = settle(coord, 0)
    assert ra.generation_id == 1 and coord.committed("g", None) == {("t", 0): O1}


def test_unload_answers_every_waiting_request_with_not_coordinator():
    coord = coordinator()
    ra, rb = settle(coord, 0)
    a2 = join(coord, 10, member_id=ra.member_id)  # waits for b
    settle(coord, 0, group="other")
    join(coord, 18, group="third", client="x")
    y = join(coord, 18, group="third", client="y")
    coord.tick(20)
    waiting_sync = sync(coord, 30, "third", 1, y.result.member_id)
    coord.unload(["g", "third", "unknown"])
    assert a2.result.error == E.NOT_COORDINATOR
    assert waiting_sync.result.error == E.NOT_COORDINATOR
    assert coord.groups() == ["other"]
    assert coord.heartbeat(40, "g", 1, rb.member_id, None) == E.UNKNOWN_MEMBER_ID
    coord.tick(10 ** 9)  # their deadlines are gone with them; "other" expires on its own
    assert coord.describe("other").members == []
