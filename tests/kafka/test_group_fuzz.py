"""A fuzzer for the group APIs of the modern listener (``test_protocol_fuzz.py`` does the
others), against one live broker: hypothesis sends requests of every group API in every
version served (FindCoordinator 0-2, JoinGroup 0-5, SyncGroup, Heartbeat and LeaveGroup
0-3, OffsetCommit 2-7, OffsetFetch 1-5, DescribeGroups 0-4, ListGroups 0-2, DeleteGroups
0-1), their fields drawn from small pools (groups that exist, members that exist, stale
generations, timeouts in and out of bounds, metadata of any size up to 64 KiB), then
damages some (flipped, inserted and cut bytes, random bodies). Each example is one
connection; it is answered with the request's correlation id or closed, and a request
kept waiting (a JoinGroup in a rebalance) is closed once the client half-closes.

Checked at the end: no process restarted, no traceback logged, a commit made before the
fuzzing (into a group the fuzzer does not name) reads back the same, and a new group
still forms. ``MPBROKER_KAFKA_FUZZ_EXAMPLES`` (default 150) sets the number of examples."""

import os
import socket
import struct
import time

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from kafka.protocol.admin import DeleteGroupsRequest, DescribeGroupsRequest, ListGroupsRequest
from kafka.protocol.consumer import (
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    OffsetCommitRequest,
    OffsetFetchRequest,
    SyncGroupRequest,
)
from kafka.protocol.metadata import FindCoordinatorRequest

from mpbroker.testing.local_broker import LocalBroker
from tests.kafka.conftest import assert_healthy
from tests.kafka.group_wire import GroupWire, subscription, wait_for_coordinator
from tests.kafka.test_protocol_fuzz import header, read_or_eof
from tests.kafka.wire import good_batch

EXAMPLES = int(os.environ.get("MPBROKER_KAFKA_FUZZ_EXAMPLES", "150"))
ANSWER_WAIT_S = 1.0
CLOSE_WAIT_S = 5.0
TOPIC = "fuzz-groups"
GROUPS = ["fz-stable", "fz-other", "", "fz-new"]
KEPT_GROUP = "fz-kept"  # committed to before the fuzzing; no example names it
known = {}  # the stable group's member id and generation, filled by the fixture


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with LocalBroker(tmp_path_factory.mktemp("group-fuzz"), num_workers=2, num_partitions=2,
                     group_initial_rebalance_delay_ms=0, offsets_topic_num_partitions=4) as broker:
        wait_for_coordinator(broker)
        with GroupWire(broker) as w:
            assert w.produce(TOPIC, 0, good_batch())[0] == 0  # (the topic is made on first use)
            joined = w.stable_group("fz-stable", session_timeout_ms=1_800_000)
            known.update(member=joined.member_id, generation=joined.generation_id)
            assert w.commit(KEPT_GROUP, {(TOPIC, 0): (1234, "kept")}) == {(TOPIC, 0): 0}
        yield broker
        assert_healthy(broker)


members = st.sampled_from(["", "nobody", "m"]) | st.builds(lambda: known.get("member", ""))
generations = st.sampled_from([-1, 0, 1, 2, 2**31 - 1]) | st.builds(lambda: known.get("generation", 1))
instance_ids = st.none() | st.sampled_from(["", "static-1", "static-2"])
metadata = st.binary(max_size=64) | st.builds(lambda n: b"m" * n, st.integers(0, 1 << 16))
timeouts = st.sampled_from([0, 1, 999, 6000, 10_000, 1_800_000, 1_800_001, 2**31 - 1, -1])


@st.composite
def requests(draw):
    """``(api_key, version, body)`` of a well-formed group request."""
    group = draw(st.sampled_from(GROUPS))
    kind = draw(st.sampled_from(["find", "join", "sync", "heartbeat", "leave", "commit", "fetch", "describe",
                                 "list", "delete"]))
    if kind == "find":
        version = draw(st.integers(0, 2))
        request = FindCoordinatorRequest(key=group, key_type=draw(st.integers(-1, 2)), coordinator_keys=[])
        return 10, version, request.encode(version=version)
    if kind == "join":
        version = draw(st.integers(0, 5))
        protocols = draw(st.lists(st.tuples(st.sampled_from(["range", "roundrobin", "cooperative-sticky", ""]),
                                            st.just(subscription(TOPIC)) | metadata), max_size=3))
        request = JoinGroupRequest(
            group_id=group, session_timeout_ms=draw(timeouts), rebalance_timeout_ms=draw(st.integers(0, 1500)),
            member_id=draw(members), group_instance_id=draw(instance_ids),
            protocol_type=draw(st.sampled_from(["consumer", "connect", ""])),
            protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name=n, metadata=m) for n, m in protocols])
        return 11, version, request.encode(version=version)
    if kind == "sync":
        version = draw(st.integers(0, 3))
        request = SyncGroupRequest(
            group_id=group, generation_id=draw(generations), member_id=draw(members),
            group_instance_id=draw(instance_ids), protocol_type="consumer", protocol_name="range",
            assignments=[SyncGroupRequest.SyncGroupRequestAssignment(member_id=draw(members), assignment=draw(metadata))
                         for _ in range(draw(st.integers(0, 2)))])
        return 14, version, request.encode(version=version)
    if kind == "heartbeat":
        version = draw(st.integers(0, 3))
        request = HeartbeatRequest(group_id=group, generation_id=draw(generations), member_id=draw(members),
                                   group_instance_id=draw(instance_ids))
        return 12, version, request.encode(version=version)
    if kind == "leave":
        version = draw(st.integers(0, 3))
        request = LeaveGroupRequest(group_id=group, member_id=draw(members), members=[
            LeaveGroupRequest.MemberIdentity(member_id=draw(members), group_instance_id=draw(instance_ids))
            for _ in range(draw(st.integers(0, 3)))])
        return 13, version, request.encode(version=version)
    if kind == "commit":
        version = draw(st.integers(2, 7))
        partitions = [OffsetCommitRequest.OffsetCommitRequestTopic.OffsetCommitRequestPartition(
            partition_index=draw(st.integers(-1, 3)), committed_offset=draw(st.integers(-2, 1 << 40)),
            committed_leader_epoch=-1, commit_timestamp=-1,
            committed_metadata=draw(st.none() | st.text(max_size=20) | st.just("x" * 4097)))
            for _ in range(draw(st.integers(0, 3)))]
        request = OffsetCommitRequest(
            group_id=group, generation_id_or_member_epoch=draw(generations), member_id=draw(members),
            group_instance_id=draw(instance_ids), retention_time_ms=draw(st.sampled_from([-1, 0, 1000])),
            topics=[OffsetCommitRequest.OffsetCommitRequestTopic(
                name=draw(st.sampled_from([TOPIC, "no-such", "bad/name", ""])), partitions=partitions)])
        return 8, version, request.encode(version=version)
    if kind == "fetch":
        version = draw(st.integers(1, 5))
        topics = None if version >= 2 and draw(st.booleans()) else [OffsetFetchRequest.OffsetFetchRequestTopic(
            name=draw(st.sampled_from([TOPIC, "no-such", ""])), partition_indexes=draw(st.lists(st.integers(-1, 3),
                                                                                           max_size=3)))]
        request = OffsetFetchRequest(group_id=group, topics=topics, require_stable=False, groups=[])
        return 9, version, request.encode(version=version)
    if kind == "describe":
        version = draw(st.integers(0, 4))
        request = DescribeGroupsRequest(groups=draw(st.lists(st.sampled_from(GROUPS), max_size=3)),
                                        include_authorized_operations=draw(st.booleans()))
        return 15, version, request.encode(version=version)
    if kind == "list":
        version = draw(st.integers(0, 2))
        return 16, version, ListGroupsRequest(states_filter=[], types_filter=[]).encode(version=version)
    version = draw(st.integers(0, 1))
    # DeleteGroups never names the stable group (its member would be gone for the rest).
    request = DeleteGroupsRequest(groups_names=draw(st.lists(st.sampled_from(["fz-other", "", "fz-new"]), max_size=3)))
    return 42, version, request.encode(version=version)


@st.composite
def examples(draw):
    """A frame (the size field always true: ``test_protocol_fuzz`` covers lying ones)."""
    how = draw(st.sampled_from(["intact", "intact", "intact", "flip", "truncate", "insert", "random"]))
    api_key, version, body = draw(requests())
    if how == "random":
        body = draw(st.binary(max_size=200))
    payload = bytearray(header(api_key, version, 7, False) + bytes(body))
    if how == "flip":
        for _ in range(draw(st.integers(1, 4))):
            at = draw(st.integers(0, len(payload) - 1))
            payload[at] ^= draw(st.integers(1, 255))
    elif how == "truncate":
        payload = payload[:draw(st.integers(0, len(payload) - 1))]
    elif how == "insert":
        at = draw(st.integers(0, len(payload)))
        payload[at:at] = draw(st.binary(min_size=1, max_size=16))
    return struct.pack(">i", len(payload)) + bytes(payload)


@settings(max_examples=EXAMPLES, deadline=None, derandomize=False,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                 HealthCheck.data_too_large])
@given(frame=examples())
def test_group_requests_are_answered_or_closed(broker, frame):
    with socket.create_connection((broker.host, broker.kafka_port), timeout=CLOSE_WAIT_S) as sock:
        sock.sendall(frame)
        outcome, data = read_or_eof(sock, time.monotonic() + ANSWER_WAIT_S)
        if len(frame) >= 6:  # (--hypothesis-show-statistics: what was asked and answered)
            event(f"api {struct.unpack_from('>h', frame, 4)[0]}: {outcome}"
                  + (f", error {struct.unpack_from('>h', data, 4)[0]}" if outcome == "answer" and len(data) >= 6 else ""))
        if outcome == "answer":
            assert data[:4] == frame[8:12]  # the request's correlation id (as damaged)
            return
        if outcome == "closed":
            return
        sock.shutdown(socket.SHUT_WR)  # a JoinGroup or SyncGroup kept waiting: EOF must close it
        outcome, data = read_or_eof(sock, time.monotonic() + CLOSE_WAIT_S)
        while outcome == "answer":
            data = data[4 + struct.unpack_from(">i", data)[0]:]
            outcome, data = read_or_eof(sock, time.monotonic() + CLOSE_WAIT_S)
        assert outcome == "closed", "the broker neither answered nor closed the connection"


def test_still_coordinating_after_fuzzing(broker):
    status = broker.status()
    assert all(p["restarts"] == 0 and p["state"] == "up" for p in [*status["workers"], status["acceptor"]])
    with GroupWire(broker) as w:
        assert w.committed(KEPT_GROUP, [(TOPIC, 0)]) == (0, {(TOPIC, 0): (1234, "kept", 0)})
        joined = w.stable_group(f"after-fuzzing-{time.time_ns()}")
        assert joined.generation_id == 1
