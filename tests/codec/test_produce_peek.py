"""peek_produce, the acceptor's fast reading of a 0.7 PRODUCE: whatever it reads,
decode_request decodes the same way; whatever it declines (None) is left to
decode_request, and the only well-formed PRODUCE it declines asks for partition < 0."""

import struct

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from mpbroker.codec.framing import MalformedRequestError
from mpbroker.codec.requests import (
    ProduceRequest,
    decode_request,
    encode_fetch,
    encode_multiproduce,
    encode_offsets,
    encode_produce,
    encode_produce_acked,
    peek_produce,
)

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
SET = b"\x00\x00\x00\x0a\x00\x01\x02\x03\x04\x05abcd"  # bytes the codec does not look into here


def body(topic, partition: int, message_set: bytes = SET) -> bytes:
    """A PRODUCE frame body (what FrameReader hands on: no size prefix)."""
    return encode_produce(topic, partition, message_set)[4:]


def raw_body(topic_length: int, topic: bytes, partition: int, set_size: int, message_set: bytes) -> bytes:
    return struct.pack(">hh", 0, topic_length) + topic + struct.pack(">ii", partition, set_size) + message_set


def decoded(frame: bytes):
    try:
        return decode_request(frame)
    except MalformedRequestError:
        return None


def assert_agrees_with_the_decoder(frame: bytes):
    """The property: a value from peek_produce is exactly the decoder's reading of the frame;
    None only for frames the general path must take."""
    peeked = peek_produce(frame)
    request = decoded(frame)
    if peeked is not None:
        topic, partition, set_start = peeked
        assert type(request) is ProduceRequest
        assert (topic.decode("latin-1"), partition) == (request.topic, request.partition)
        assert frame[set_start:] == bytes(request.message_set)
        assert set_start + len(request.message_set) == len(frame)
    elif type(request) is ProduceRequest:
        assert request.partition < 0  # -1: the broker picks one; other negatives: refused by the broker
    return peeked


@pytest.mark.parametrize("topic,partition,message_set", [
    ("t", 0, SET),
    ("clicks", 7, SET),
    ("a" * 249, INT32_MAX, SET),
    ("events.v2_x-y", 3, b""),  # an empty set
    ("t", 0, b"\xff" * 70_000),
    ("", 0, SET),  # the empty topic is the broker's to refuse, not the codec's
])
def test_valid_frames_are_read_in_place(topic, partition, message_set):
    frame = body(topic, partition, message_set)
    topic_bytes = topic.encode("ascii")
    assert peek_produce(frame) == (topic_bytes, partition, 12 + len(topic_bytes))
    assert assert_agrees_with_the_decoder(frame) is not None


@pytest.mark.parametrize("partition", [-1, -2, INT32_MIN])
def test_a_negative_partition_is_left_to_the_decoder(partition):
    frame = body("t", partition)
    assert peek_produce(frame) is None
    assert decode_request(frame) == ProduceRequest("t", partition, memoryview(SET))


@pytest.mark.parametrize("topic_length", [-1, -2, -(2**15)])
def test_a_negative_topic_length_is_declined(topic_length):
    frame = raw_body(topic_length, b"t", 0, len(SET), SET)
    assert peek_produce(frame) is None
    with pytest.raises(MalformedRequestError):
        decode_request(frame)


def test_a_negative_topic_length_is_declined_in_a_frame_long_enough_for_its_unsigned_reading():
    unsigned = 2**16 - 1  # what -1 would be, read without its sign
    frame = struct.pack(">hh", 0, -1) + b"t" * unsigned + struct.pack(">ii", 0, len(SET)) + SET
    assert peek_produce(frame) is None
    with pytest.raises(MalformedRequestError):
        decode_request(frame)


@pytest.mark.parametrize("delta", [-len(SET), -1, 1, 1000])
def test_a_set_size_that_does_not_end_the_frame_is_declined(delta):
    frame = raw_body(1, b"t", 0, len(SET) + delta, SET)
    assert peek_produce(frame) is None
    with pytest.raises(MalformedRequestError):  # trailing bytes, or a set past the end
        decode_request(frame)


@pytest.mark.parametrize("set_size", [-1, -len(SET), INT32_MIN])
def test_a_negative_set_size_is_declined(set_size):
    frame = raw_body(1, b"t", 0, set_size, SET)
    assert peek_produce(frame) is None
    with pytest.raises(MalformedRequestError):
        decode_request(frame)


def test_a_topic_running_past_the_end_is_declined():
    for topic_length in (2, 5, 9, 100, 2**15 - 1):
        frame = raw_body(topic_length, b"t", 0, 0, b"")
        assert peek_produce(frame) is None
        with pytest.raises(MalformedRequestError):
            decode_request(frame)


def test_every_truncation_is_declined():
    frame = body("topic", 1)
    for end in range(len(frame)):  # including frames shorter than the 12 fixed bytes
        assert peek_produce(frame[:end]) is None
        with pytest.raises(MalformedRequestError):
            decode_request(frame[:end])


@pytest.mark.parametrize("frame", [
    encode_fetch("t", 0, 0, 100)[4:],
    encode_offsets("t", 0, -1, 1)[4:],
    encode_multiproduce([("t", 0, SET)])[4:],
    encode_produce_acked(0, "t", 0, SET)[4:],
    b"\x01\x00" + body("t", 0)[2:],  # type 256: only the low byte is 0
    b"\x00\x01" + body("t", 0)[2:],  # type 1 (FETCH) with a PRODUCE's layout
    b"\x00\x64" + body("t", 0)[2:],  # type 100 (PRODUCE_ACKED) with a PRODUCE's layout
    b"\x00\x00",
])
def test_other_requests_are_declined(frame):
    assert peek_produce(frame) is None
    assert_agrees_with_the_decoder(frame)


topics = st.binary(max_size=300)
partitions = st.one_of(st.sampled_from([-1, 0, 1, INT32_MAX, INT32_MIN]), st.integers(INT32_MIN, INT32_MAX))


@given(topic=topics, partition=partitions, message_set=st.binary(max_size=500))
def test_encoded_produces_agree_with_the_decoder(topic, partition, message_set):
    frame = raw_body(len(topic), topic, partition, len(message_set), message_set)
    peeked = assert_agrees_with_the_decoder(frame)
    assert (peeked is None) == (partition < 0)


@settings(max_examples=500)
@given(topic_length=st.one_of(st.integers(-3, 40), st.integers(-(2**15), 2**15 - 1)), topic=st.binary(max_size=30),
       partition=partitions, set_size=st.one_of(st.integers(-3, 60), st.integers(INT32_MIN, INT32_MAX)),
       message_set=st.binary(max_size=50), cut=st.integers(0, 8))
@example(topic_length=1, topic=b"t", partition=0, set_size=1, message_set=b"x", cut=0)
@example(topic_length=-1, topic=b"", partition=0, set_size=0, message_set=b"", cut=0)
def test_mangled_produces_agree_with_the_decoder(topic_length, topic, partition, set_size, message_set, cut):
    frame = raw_body(topic_length, topic, partition, set_size, message_set)
    assert_agrees_with_the_decoder(frame[:len(frame) - cut])


@settings(max_examples=500)
@given(frame=st.binary(max_size=80))
def test_arbitrary_bytes_agree_with_the_decoder(frame):
    assert_agrees_with_the_decoder(b"\x00\x00" + frame)
    assert_agrees_with_the_decoder(frame)
