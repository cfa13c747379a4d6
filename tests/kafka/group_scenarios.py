"""Wire-level scripts of bad input to the group APIs, each ``script(broker, group, topic)``
returning the answers' error codes by name; ``topic`` is an existing topic of
``PARTITIONS`` partitions (commits name it), ``group`` a prefix of this run's own.

They run against mpbroker with the answers expected (``test_group_bad_input.py``) and
against Apache Kafka 4.4 with both answers compared (``test_groups_against_apache_kafka.py``);
the answers are in ``group_expected``. Each script uses groups of its own (named from
``group``), so they run in any order on one broker."""

import time

from kafka.protocol.admin import DeleteGroupsRequest, DeleteGroupsResponse, ListGroupsRequest, ListGroupsResponse
from kafka.protocol.consumer import (
    JoinGroupRequest,
    JoinGroupResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)

from tests.kafka.group_wire import (
    NONE,
    GroupWire,
    assignment,
    subscription,
)
from tests.kafka.wire import request_frame

PARTITIONS = 2
TOPIC = "group-topic"  # the topic every script is given (its name is in the answers)
METADATA_MAX = 4096  # offset.metadata.max.bytes, both brokers' default
MIN_SESSION_MS, MAX_SESSION_MS = 6000, 1_800_000  # group.{min,max}.session.timeout.ms, both defaults


def unknown_member(broker, group, topic):
    with GroupWire(broker) as w:
        joined = w.stable_group(group)
        gen = joined.generation_id
        return {
            "heartbeat": w.heartbeat(group, gen, "nobody"),
            "sync": w.sync(group, gen, "nobody").error_code,
            "commit": w.commit(group, {(topic, 0): (1, "")}, generation_id=gen, member_id="nobody")[(topic, 0)],
            "leave v3": w.leave(group, "nobody"),
            "leave v1": w.leave(group, "nobody", version=1),
            "rejoin with an unknown id": w.join(group, "nobody").error_code,
            "heartbeat of a group never seen": w.heartbeat(f"{group}-never", 1, "nobody"),
            "sync of a group never seen": w.sync(f"{group}-never", 1, "nobody").error_code,
            "join of a group never seen, with an id": w.join(f"{group}-never", "nobody").error_code,
            "the member still heartbeats": w.heartbeat(group, gen, joined.member_id),
        }


def stale_generation(broker, group, topic):
    with GroupWire(broker) as w:
        joined = w.stable_group(group)
        gen, member = joined.generation_id, joined.member_id
        return {
            "heartbeat older": w.heartbeat(group, gen - 1, member),
            "heartbeat newer": w.heartbeat(group, gen + 1, member),
            "sync older": w.sync(group, gen - 1, member).error_code,
            "commit older": w.commit(group, {(topic, 0): (1, "")}, generation_id=gen - 1,
                                     member_id=member)[(topic, 0)],
            "commit newer": w.commit(group, {(topic, 0): (1, "")}, generation_id=gen + 1,
                                     member_id=member)[(topic, 0)],
            "commit current": w.commit(group, {(topic, 0): (1, "")}, generation_id=gen, member_id=member)[(topic, 0)],
        }


def commits_from_non_members(broker, group, topic):
    with GroupWire(broker) as w:
        joined = w.stable_group(group)
        key = (topic, 0)
        answers = {
            "no member id, generation -1, into a group with members":
                w.commit(group, {key: (5, "")})[key],
            "a made-up member id, the current generation":
                w.commit(group, {key: (5, "")}, generation_id=joined.generation_id, member_id="made-up")[key],
            "a made-up member id, generation -1":
                w.commit(group, {key: (5, "")}, member_id="made-up")[key],
            "the member's own": w.commit(group, {key: (7, "mine")}, generation_id=joined.generation_id,
                                        member_id=joined.member_id)[key],
        }
        error, found = w.committed(group, [key])
        answers["what stays committed"] = (error, found[key][:2])
        answers["an empty group's commit (assign())"] = w.commit(f"{group}-standalone", {key: (3, "")})[key]
        answers["its fetch"] = w.committed(f"{group}-standalone", [key])[1][key][:2]
        return answers


def offset_metadata_too_large(broker, group, topic):
    with GroupWire(broker) as w:
        at_limit, over = "m" * METADATA_MAX, "m" * (METADATA_MAX + 1)
        answers = {
            "at the limit": w.commit(group, {(topic, 0): (10, at_limit)})[(topic, 0)],
            "one past it": w.commit(group, {(topic, 0): (20, over)})[(topic, 0)],
            "one past it, beside a good one": w.commit(group, {(topic, 0): (30, over), (topic, 1): (31, "ok")}),
        }
        error, found = w.committed(group, [(topic, 0), (topic, 1)])
        answers["what was kept"] = (error, {tp: (offset, len(metadata)) for tp, (offset, metadata, _) in found.items()})
        return answers


def session_timeouts(broker, group, topic):
    with GroupWire(broker) as w:
        return {
            "below the minimum": w.join(group, session_timeout_ms=MIN_SESSION_MS - 1).error_code,
            "above the maximum": w.join(group, session_timeout_ms=MAX_SESSION_MS + 1).error_code,
            "zero": w.join(group, session_timeout_ms=0).error_code,
            "the minimum (v4: member id required)": w.join(group, session_timeout_ms=MIN_SESSION_MS).error_code,
        }


def protocol_mismatch(broker, group, topic):
    with GroupWire(broker) as w:
        w.stable_group(group)
        return {
            "another protocol type": w.join(group, protocol_type="connect").error_code,
            "no protocol in common": w.join(group, protocols=[("roundrobin", subscription("t"))]).error_code,
            "an empty protocol list into a new group": w.join(f"{group}-new", protocols=[]).error_code,
            "an empty protocol type into a new group": w.join(f"{group}-new2", protocol_type="").error_code,
            "one in common among others": w.join(group, protocols=[("roundrobin", b""),
                                                                  ("range", subscription("t"))]).error_code,
        }


def member_id_required(broker, group, topic):
    with GroupWire(broker) as w:
        first = w.join(group)
        handed_out = first.member_id
        second = w.join(group, handed_out)
        v3 = w.join(f"{group}-v3", version=3)
        return {
            "v4+ without an id": (first.error_code, first.generation_id, bool(handed_out)),
            "with the id handed out": (second.error_code, second.member_id == handed_out,
                                       second.leader == handed_out, len(second.members)),
            "v3 without an id": (v3.error_code, v3.generation_id, bool(v3.member_id)),
        }


def empty_group_id(broker, group, topic):
    with GroupWire(broker) as w:
        return {
            "join v5": w.join("").error_code,
            "join v3": w.join("", version=3).error_code,
            "sync": w.sync("", 1, "m").error_code,
            "heartbeat": w.heartbeat("", 1, "m"),
            "leave v1": w.leave("", "m", version=1),
            "describe": (w.describe("").error_code, w.describe("").group_state),
            "delete": w.delete(""),
        }


def unknown_groups(broker, group, topic):
    with GroupWire(broker) as w:
        described = w.describe(f"{group}-unknown")
        error, found = w.committed(f"{group}-unknown", [(topic, 0)])
        return {
            "describe": (described.error_code, described.group_state, described.protocol_type, described.members),
            "delete": w.delete(f"{group}-unknown"),
            "offset fetch": (error, found),
            "listed": f"{group}-unknown" in w.list_groups()[1],
        }


def delete_groups(broker, group, topic):
    with GroupWire(broker) as w:
        joined = w.stable_group(group)
        w.commit(group, {(topic, 0): (9, "")}, generation_id=joined.generation_id, member_id=joined.member_id)
        non_empty = w.delete(group)
        left = w.leave(group, joined.member_id)
        deleted = w.delete(group)
        again = w.delete(group)
        return {
            "non-empty": non_empty, "leave": left, "empty": deleted, "again": again,
            "commits gone": w.committed(group, [(topic, 0)])[1][(topic, 0)][:2],
            "described": w.describe(group).group_state,
        }


def oversized_protocol_metadata(broker, group, topic):
    """1 MiB of subscription user data (far under both brokers' socket.request.max.bytes,
    100 MiB), a join and a sync: answered, whatever the answer."""
    big = subscription("t", user_data=b"u" * (1 << 20))
    with GroupWire(broker, timeout=30) as w:
        first = w.join(group, protocols=[("range", big)])
        second = w.join(group, first.member_id, protocols=[("range", big)])
        answers = {"join": (first.error_code, second.error_code)}
        if second.error_code == NONE:
            answers["leader sees the metadata whole"] = [len(m.metadata) for m in second.members] == [len(big)]
            synced = w.sync(group, second.generation_id, second.member_id,
                            {second.member_id: assignment("t", [0]) + b"a" * (1 << 20)})
            answers["sync"] = (synced.error_code, len(synced.assignment))
            answers["heartbeat"] = w.heartbeat(group, second.generation_id, second.member_id)
    with GroupWire(broker) as w:
        answers["the broker answers on"] = w.describe(group).error_code
    return answers


def silent_member_expires(broker, group, topic):
    """A member that joins, syncs and never heartbeats again is out after its session
    timeout (the minimum, 6 s): the group is Empty, its heartbeat UNKNOWN_MEMBER_ID."""
    with GroupWire(broker) as w:
        joined = w.stable_group(group, session_timeout_ms=MIN_SESSION_MS)
        before = w.describe(group)
        time.sleep(MIN_SESSION_MS / 1000 * 0.5)
        halfway = w.describe(group)
        time.sleep(MIN_SESSION_MS / 1000 * 0.5 + 2.5)
        after = w.describe(group)
        return {
            "before": (before.group_state, len(before.members)),
            "halfway": (halfway.group_state, len(halfway.members)),
            "after": (after.group_state, len(after.members)),
            "its heartbeat": w.heartbeat(group, joined.generation_id, joined.member_id),
            "its commit": w.commit(group, {(topic, 0): (1, "")}, generation_id=joined.generation_id,
                                   member_id=joined.member_id)[(topic, 0)],
        }


def static_members(broker, group, topic):
    with GroupWire(broker) as w:
        first = w.stable_group(group, instance_id="static-1")
        # the same instance id again without a member id: the new id replaces the old
        again = w.join(group, instance_id="static-1")
        old = first.member_id
        return {
            "replacement joins": (again.error_code, again.member_id != old, again.generation_id == first.generation_id),
            "the old id's heartbeat": w.heartbeat(group, first.generation_id, old, instance_id="static-1"),
            "the old id's commit": w.commit(group, {(topic, 0): (1, "")}, generation_id=first.generation_id,
                                            member_id=old, instance_id="static-1")[(topic, 0)],
            "the old id's sync": w.sync(group, first.generation_id, old, instance_id="static-1").error_code,
            "the new id's sync": w.sync(group, again.generation_id, again.member_id, instance_id="static-1").error_code,
            "the new id's heartbeat": w.heartbeat(group, again.generation_id, again.member_id, instance_id="static-1"),
            "another instance id with the new member id": w.heartbeat(group, again.generation_id, again.member_id,
                                                                      instance_id="static-2"),
            "the old id leaves": w.leave(group, old, instance_id="static-1"),
        }


SCRIPTS = [unknown_member, stale_generation, commits_from_non_members, offset_metadata_too_large, session_timeouts,
           protocol_mismatch, member_id_required, empty_group_id, unknown_groups, delete_groups,
           oversized_protocol_metadata, silent_member_expires, static_members]

def old_versions(broker, group, topic):
    """The oldest versions both serve, one member through a whole generation."""
    with GroupWire(broker) as w:
        answers = {}
        for version in (0, 1, 2, 3):
            g = f"{group}-v{version}"
            joined = w.join(g, version=version)
            answers[f"join v{version}"] = (joined.error_code, joined.generation_id, joined.leader == joined.member_id)
            synced = w.sync(g, joined.generation_id, joined.member_id, {joined.member_id: b"x"},
                            version=min(version, 3))
            answers[f"sync v{min(version, 3)}"] = (synced.error_code, synced.assignment)
            answers[f"heartbeat v{version}"] = w.heartbeat(g, joined.generation_id, joined.member_id, version=version)
            answers[f"commit v{version + 2}"] = w.commit(g, {(topic, 0): (5, "m")}, generation_id=joined.generation_id,
                                                         member_id=joined.member_id, version=version + 2)
            answers[f"fetch v{version + 1}"] = w.committed(g, [(topic, 0)], version=version + 1)
            answers[f"describe v{version}"] = w.describe(g, version=version).group_state
            answers[f"leave v{version}"] = w.leave(g, joined.member_id, version=version)
        return answers


def odd_commits(broker, group, topic):
    with GroupWire(broker) as w:
        def one(key, **kwargs):
            return w.commit(group, {key: (5, "")}, **kwargs)[key]
        answers = {
            "a topic that does not exist": one(("no-such-topic-here", 0)),
            "a partition past the count": one((topic, PARTITIONS)),
            "a negative partition": one((topic, -1)),
            "an invalid topic name": one(("bad/name", 0)),
            "a negative offset": w.commit(group, {(topic, 1): (-5, "")})[(topic, 1)],
            "metadata None": w.commit(group, {(topic, 0): (6, None)})[(topic, 0)],
            "the empty group id": w.commit("", {(topic, 0): (6, "")})[(topic, 0)],
        }
        answers["fetch of the empty group id"] = w.committed("", [(topic, 0)])
        answers["fetch"] = w.committed(group, [(topic, 0), (topic, 1), ("no-such-topic-here", 0),
                                               (topic, PARTITIONS)])
        answers["listed"] = w.list_groups()[1].get(group)
        answers["described"] = (w.describe(group).group_state, w.describe(group).protocol_type)
        return answers


def find_coordinator_keys(broker, group, topic):
    with GroupWire(broker) as w:
        return {
            "a group": w.find_coordinator(group),
            "the empty key v0": w.find_coordinator("", version=0),
            "the empty key v2": w.find_coordinator("", version=2),
        }


def rebalance_phases(broker, group, topic):
    """Two members by hand: the leader's JoinGroup answer waits for the second; what
    each is told in CompletingRebalance; the follower's SyncGroup waits for the leader's."""
    with GroupWire(broker) as a, GroupWire(broker) as b:
        first = a.stable_group(group, rebalance_timeout_ms=5000)
        handed = b.join(group, rebalance_timeout_ms=5000).member_id
        b.send(request_frame(11, 5, 900, bytes(_join_request(group, handed).encode(version=5))))
        time.sleep(0.3)
        answers = {"heartbeat while preparing": a.heartbeat(group, first.generation_id, first.member_id),
                   "describe while preparing": a.describe(group).group_state}
        rejoined = a.join(group, first.member_id, rebalance_timeout_ms=5000)
        _, body = b.read_frame()
        second = JoinGroupResponse.decode(body, version=5)
        gen = rejoined.generation_id
        answers["joins"] = (rejoined.error_code, second.error_code, gen == second.generation_id == first.generation_id + 1,
                            rejoined.leader == first.member_id, len(rejoined.members), len(second.members))
        answers["describe while completing"] = (a.describe(group).group_state, a.describe(group).protocol_data)
        answers["heartbeat while completing"] = a.heartbeat(group, gen, first.member_id)
        answers["commit while completing"] = a.commit(group, {(topic, 0): (1, "")}, generation_id=gen,
                                                      member_id=first.member_id)[(topic, 0)]
        sync = SyncGroupRequest(group_id=group, generation_id=gen, member_id=handed, group_instance_id=None,
                                protocol_type="consumer", protocol_name="range", assignments=[])
        b.send(request_frame(14, 3, 901, bytes(sync.encode(version=3))))
        time.sleep(0.3)
        led = a.sync(group, gen, first.member_id, {first.member_id: b"first", handed: b"second", "ghost": b"x"})
        _, body = b.read_frame()
        followed = SyncGroupResponse.decode(body, version=3)
        answers["syncs"] = (led.error_code, led.assignment, followed.error_code, followed.assignment)
        described = a.describe(group)
        answers["describe when stable"] = (described.group_state, described.protocol_data,
                                           sorted(bytes(m.member_assignment) for m in described.members))
        answers["leave of both, batched"] = a.leave_many(group, [first.member_id, handed, "ghost"])
        answers["described after"] = (a.describe(group).group_state, a.describe(group).protocol_type)
        return answers


def _join_request(group, member_id, session_timeout_ms=10_000, rebalance_timeout_ms=5000):
    """A JoinGroup v5 to send with ``request_frame`` and read later (it waits)."""
    return JoinGroupRequest(group_id=group, session_timeout_ms=session_timeout_ms,
                            rebalance_timeout_ms=rebalance_timeout_ms,
                            member_id=member_id, group_instance_id=None, protocol_type="consumer",
                            protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range",
                                                                                 metadata=subscription("t"))])


def pending_members(broker, group, topic):
    """A member id handed out with MEMBER_ID_REQUIRED, not yet used."""
    with GroupWire(broker) as w:
        first = w.stable_group(group)
        handed = w.join(group).member_id
        return {
            "its heartbeat": w.heartbeat(group, first.generation_id, handed),
            "its commit": w.commit(group, {(topic, 0): (1, "")}, generation_id=first.generation_id,
                                   member_id=handed)[(topic, 0)],
            "its leave": w.leave(group, handed),
            "its join after the leave": w.join(group, handed).error_code,
            "the member's heartbeat": w.heartbeat(group, first.generation_id, first.member_id),
            "described": w.describe(group).group_state,
        }


def misc_requests(broker, group, topic):
    with GroupWire(broker) as w:
        answers = {"a static member with the empty instance id": w.join(f"{group}-e", instance_id="").error_code}
        w.commit(f"{group}-c", {(topic, 0): (1, "")})
        request = DeleteGroupsRequest(groups_names=[f"{group}-c", f"{group}-c", f"{group}-nope"])
        answer = w.call(42, 1, bytes(request.encode(version=1)), DeleteGroupsResponse)
        answers["delete, one named twice"] = sorted((r.group_id[len(group):], r.error_code) for r in answer.results)
        w.commit(f"{group}-f", {(topic, 0): (1, "a"), (topic, 1): (2, "b")})
        request = OffsetFetchRequest(group_id=f"{group}-f", topics=None, require_stable=False, groups=[])
        answer = w.call(9, 2, bytes(request.encode(version=2)), OffsetFetchResponse)
        answers["offset fetch of every topic (v2)"] = (answer.error_code, sorted(
            (t.name, p.partition_index, p.committed_offset, p.metadata) for t in answer.topics for p in t.partitions))
        request = ListGroupsRequest(states_filter=[], types_filter=[])
        answer = w.call(16, 0, bytes(request.encode(version=0)), ListGroupsResponse)
        answers["list v0"] = sorted((g.group_id[len(group):], g.protocol_type) for g in answer.groups
                                    if g.group_id.startswith(group))
        answers["commit of no topics"] = w.commit(f"{group}-n", {})
        stable = w.stable_group(f"{group}-s")
        answers["heartbeat of generation -1"] = w.heartbeat(f"{group}-s", -1, stable.member_id)
        answers["leave, then heartbeat"] = (w.leave(f"{group}-s", stable.member_id),
                                            w.heartbeat(f"{group}-s", stable.generation_id, stable.member_id))
        answers["rejoin with the id after leaving"] = w.join(f"{group}-s", stable.member_id).error_code
        answers["commit of generation -1 into the group emptied"] = w.commit(f"{group}-s", {(topic, 0): (3, "")})
        return answers


def rebalance_timeouts(broker, group, topic):
    """Session timeouts of 30 s, rebalance timeouts of 1.5 s: a member that does not
    rejoin is out when the join phase ends, one that never sends SyncGroup when the
    sync phase does."""
    timeouts = {"session_timeout_ms": 30_000, "rebalance_timeout_ms": 1500}
    with GroupWire(broker) as w, GroupWire(broker) as b:
        first = w.stable_group(group, **timeouts)
        handed = b.join(group, **timeouts).member_id
        b.send(request_frame(11, 5, 77, bytes(_join_request(group, handed, **timeouts).encode(version=5))))
        began = time.monotonic()
        _, body = b.read_frame()
        joined = JoinGroupResponse.decode(body, version=5)
        answers = {
            "the joiner alone in the next generation": (joined.error_code, joined.generation_id, joined.leader == handed,
                                                        len(joined.members)),
            "after the rebalance timeout": 1.0 <= time.monotonic() - began < 4.5,
            "the member that did not rejoin": w.heartbeat(group, first.generation_id, first.member_id),
        }
        time.sleep(4)  # the joiner never sends SyncGroup
        described = w.describe(group)
        answers["the joiner, never synced"] = (described.group_state, len(described.members),
                                               b.heartbeat(group, joined.generation_id, handed))
        return answers


def describe_authorized_operations(broker, group, topic):
    with GroupWire(broker) as w:
        w.stable_group(group)
        return {"asked": w.describe(group, authorized_operations=True).authorized_operations,
                "not asked": w.describe(group).authorized_operations}


def null_fields(broker, group, topic):
    """Nulls (a length of -1) in fields the spec says are never null: the request is
    refused (the connection closed) and the broker goes on."""
    protocol = JoinGroupRequest.JoinGroupRequestProtocol
    bodies = {
        "JoinGroup, null metadata": (11, 3, JoinGroupRequest(
            group_id=group, session_timeout_ms=10_000, rebalance_timeout_ms=10_000, member_id="",
            protocol_type="consumer", protocols=[protocol(name="range", metadata=None)])),
        "JoinGroup, null group id": (11, 3, JoinGroupRequest(
            group_id=None, session_timeout_ms=10_000, rebalance_timeout_ms=10_000, member_id="",
            protocol_type="consumer", protocols=[protocol(name="range", metadata=b"")])),
        "JoinGroup, null protocol name": (11, 3, JoinGroupRequest(
            group_id=group, session_timeout_ms=10_000, rebalance_timeout_ms=10_000, member_id="",
            protocol_type="consumer", protocols=[protocol(name=None, metadata=b"")])),
        "SyncGroup, null assignment": (14, 3, SyncGroupRequest(
            group_id=group, generation_id=1, member_id="m", group_instance_id=None,
            assignments=[SyncGroupRequest.SyncGroupRequestAssignment(member_id="m", assignment=None)])),
        "OffsetFetch v1, null topics": (9, 1, OffsetFetchRequest(group_id=group, topics=None, require_stable=False,
                                                                 groups=[])),
    }
    answers = {}
    for name, (api_key, version, request) in bodies.items():
        with GroupWire(broker) as w:
            w.send(request_frame(api_key, version, 5, bytes(request.encode(version=version))))
            answers[name] = "answered" if w.read_frame() is not None else "closed"
    with GroupWire(broker) as w:
        answers["then"] = w.join_as_new(group).generation_id
    return answers


SCRIPTS += [null_fields, old_versions, odd_commits, find_coordinator_keys, rebalance_phases, pending_members, misc_requests,
            rebalance_timeouts, describe_authorized_operations]
