"""The replication requests and answers between brokers (types 101 and 102): byte
layouts written out by hand here, round trips, and the refusals of malformed frames."""

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mpbroker.codec.errors import ErrorCode
from mpbroker.codec.framing import MalformedRequestError
from mpbroker.codec.requests import (
    Durability,
    LeaderEpochEndRequest,
    ReplicaFetchPart,
    ReplicaFetchRequest,
    decode_request,
    encode_leader_epoch_end,
    encode_produce_acked,
    encode_replica_fetch,
)
from mpbroker.codec.responses import (
    MalformedResponseError,
    decode_leader_epoch_end,
    decode_replica_fetch,
    leader_epoch_end_response,
    replica_fetch_header,
    replica_part_header,
)


def test_replica_fetch_layout_is_byte_exact():
    frame = encode_replica_fetch(2, 500, [("clicks", 1, 7, 4096, 1 << 20)])
    body = struct.pack(">hiih", 101, 2, 500, 1) + struct.pack(">h", 6) + b"clicks" + struct.pack(">iiqi", 1, 7, 4096,
                                                                                                   1 << 20)
    assert frame == struct.pack(">i", len(body)) + body
    assert decode_request(frame[4:]) == ReplicaFetchRequest(2, 500, [ReplicaFetchPart("clicks", 1, 7, 4096, 1 << 20)])


def test_leader_epoch_end_layout_is_byte_exact():
    frame = encode_leader_epoch_end(3, "t", 0, 9, 8)
    body = struct.pack(">hi", 102, 3) + struct.pack(">h", 1) + b"t" + struct.pack(">iii", 0, 9, 8)
    assert frame == struct.pack(">i", len(body)) + body
    assert decode_request(frame[4:]) == LeaderEpochEndRequest(3, "t", 0, 9, 8)


topics = st.text(alphabet="abcXYZ09._-", min_size=1, max_size=20)
parts = st.lists(st.tuples(topics, st.integers(0, 2**31 - 1), st.integers(-1, 2**31 - 1), st.integers(0, 2**63 - 1),
                           st.integers(0, 2**31 - 1)), max_size=5)


@given(replica_id=st.integers(0, 2**31 - 1), max_wait_ms=st.integers(0, 2**31 - 1), fetches=parts)
def test_replica_fetch_round_trip(replica_id, max_wait_ms, fetches):
    request = decode_request(encode_replica_fetch(replica_id, max_wait_ms, fetches)[4:])
    assert request == ReplicaFetchRequest(replica_id, max_wait_ms, [ReplicaFetchPart(*fetch) for fetch in fetches])


@pytest.mark.parametrize("cut", [1, 5, 11])
def test_a_truncated_replica_fetch_is_refused(cut):
    frame = encode_replica_fetch(1, 0, [("topic", 0, 1, 0, 100)])
    with pytest.raises(MalformedRequestError):
        decode_request(frame[4:-cut])


def test_trailing_bytes_after_a_leader_epoch_end_are_refused():
    with pytest.raises(MalformedRequestError, match="unexpected bytes"):
        decode_request(encode_leader_epoch_end(1, "t", 0, 1, 1)[4:] + b"\0")


def test_durability_2_is_accepted_and_3_refused():
    assert decode_request(encode_produce_acked(2, "t", 0, b"")[4:]).durability == Durability.REPLICATED
    with pytest.raises(MalformedRequestError, match="2 \\(replicated\\)"):
        decode_request(encode_produce_acked(3, "t", 0, b"")[4:])


@given(answers=st.lists(st.tuples(st.sampled_from([0, 1, 9, 11]), st.integers(-1, 2**40), st.integers(0, 2**40),
                                  st.integers(0, 2**40), st.integers(-1, 2**20), st.binary(max_size=64)),
                        max_size=4))
def test_replica_fetch_answer_round_trip(answers):
    frame = replica_fetch_header([len(answer[-1]) for answer in answers]) + b"".join(
        replica_part_header(*answer[:-1], len(answer[-1])) + answer[-1] for answer in answers)
    (size,) = struct.unpack_from(">i", frame)
    assert size == len(frame) - 4
    decoded = decode_replica_fetch(frame[4:])
    assert [(*part[:-1], bytes(part.data)) for part in decoded] == answers


def test_a_replica_fetch_part_running_past_the_end_is_refused():
    frame = replica_fetch_header([10]) + replica_part_header(0, 0, 0, 10, 1, 10) + b"short"
    with pytest.raises(MalformedResponseError, match="runs past the end"):
        decode_replica_fetch(frame[4:])


def test_leader_epoch_end_answer_round_trip():
    assert decode_leader_epoch_end(leader_epoch_end_response(0, 4, 123456)[4:]) == (0, 4, 123456)
    assert decode_leader_epoch_end(struct.pack(">h", ErrorCode.NOT_LEADER)) == (ErrorCode.NOT_LEADER, -1, -1)
