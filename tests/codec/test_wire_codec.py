"""Wire codec against PROTOCOL.md: request encoders/decoder, FrameReader framing and response encoders/decoders."""

import random
import socket
import struct
import threading

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from mpbroker.codec.framing import FrameReader, MalformedRequestError
from mpbroker.codec.message import encode_message
from mpbroker.codec.requests import (
    Durability,
    FetchRequest,
    MultiFetchRequest,
    MultiProduceRequest,
    OffsetsRequest,
    ProduceAckedRequest,
    ProduceRequest,
    RequestType,
    decode_request,
    encode_fetch,
    encode_multifetch,
    encode_multiproduce,
    encode_offsets,
    encode_produce,
    encode_produce_acked,
    one_message_produce_parts,
    produce_acked_parts,
    produce_parts,
)
from mpbroker.codec.responses import (
    MalformedResponseError,
    ProduceAck,
    decode_multifetch,
    decode_offsets,
    decode_produce_ack,
    error_response,
    multifetch_header,
    offsets_response,
    produce_ack_response,
    response_header,
    split_error,
)

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

# --- hand-built reference encodings (PROTOCOL.md, all big-endian) -----------------


def ref_string(topic: str) -> bytes:
    raw = topic.encode("latin-1")
    return struct.pack(">h", len(raw)) + raw


def ref_frame(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body


def ref_produce_body(topic, partition, message_set) -> bytes:
    return ref_string(topic) + struct.pack(">ii", partition, len(message_set)) + message_set


def ref_fetch_body(topic, partition, offset, max_size) -> bytes:
    return ref_string(topic) + struct.pack(">iqi", partition, offset, max_size)


def ref_produce(topic, partition, message_set) -> bytes:
    return ref_frame(struct.pack(">h", 0) + ref_produce_body(topic, partition, message_set))


def ref_fetch(topic, partition, offset, max_size) -> bytes:
    return ref_frame(struct.pack(">h", 1) + ref_fetch_body(topic, partition, offset, max_size))


def ref_multifetch(fetches) -> bytes:
    return ref_frame(struct.pack(">hh", 2, len(fetches)) + b"".join(ref_fetch_body(*f) for f in fetches))


def ref_multiproduce(produces) -> bytes:
    return ref_frame(struct.pack(">hh", 3, len(produces)) + b"".join(ref_produce_body(*p) for p in produces))


def ref_offsets(topic, partition, time, max_offsets) -> bytes:
    return ref_frame(struct.pack(">h", 4) + ref_string(topic) + struct.pack(">iqi", partition, time, max_offsets))


def ref_produce_acked(durability, topic, partition, message_set) -> bytes:
    return ref_frame(struct.pack(">hh", 100, durability) + ref_produce_body(topic, partition, message_set))


def body_of(frame: bytes) -> bytes:
    """The frame body (what FrameReader hands to decode_request), checking the size prefix."""
    (size,) = struct.unpack_from(">i", frame, 0)
    assert size == len(frame) - 4
    return frame[4:]


# --- strategies -------------------------------------------------------------------

topics = st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=255), max_size=40)
partitions = st.one_of(st.just(-1), st.integers(INT32_MIN, INT32_MAX))
int32s = st.integers(INT32_MIN, INT32_MAX)
int64s = st.one_of(st.sampled_from([0, -1, -2, INT64_MAX, INT64_MIN, 2**40 + 12345]), st.integers(INT64_MIN, INT64_MAX))
message_sets = st.binary(max_size=2000)
fetch_args = st.tuples(topics, partitions, int64s, int32s)
produce_args = st.tuples(topics, partitions, message_sets)


# --- request encoders: byte-exact ---------------------------------------------------


def test_fetch_encoding_matches_literal_bytes():
    expected = bytes.fromhex(
        "00000016"  # size = 22
        "0001"  # FETCH
        "0002" "6162"  # topic "ab"
        "00000001"  # partition 1
        "0000000000000002"  # offset 2
        "00000003"  # max_size 3
    )
    assert encode_fetch("ab", 1, 2, 3) == expected


def test_produce_encoding_matches_literal_bytes():
    expected = bytes.fromhex(
        "00000010"  # size = 16
        "0000"  # PRODUCE
        "0001" "74"  # topic "t"
        "ffffffff"  # partition -1 (broker picks)
        "00000003"  # set size 3
        "78797a"  # the set
    )
    assert encode_produce("t", -1, b"xyz") == expected


@pytest.mark.parametrize("topic,partition,message_set", [
    ("events", 0, b""),
    ("events", -1, b"\x00\x01\x02" * 100),
    ("a" * 255, INT32_MAX, bytes(range(256))),
    ("caf\xe9", INT32_MIN, b"x"),
])
def test_produce_encoding_is_byte_exact(topic, partition, message_set):
    expected = ref_produce(topic, partition, message_set)
    assert encode_produce(topic, partition, message_set) == expected
    header, payload = produce_parts(topic, partition, message_set)
    assert payload is message_set  # sent as is, no copy
    assert header + payload == expected
    assert len(header) == 4 + 2 + 2 + len(topic) + 8


@pytest.mark.parametrize("topic,partition,payload", [
    ("t", 0, b""),
    ("events", -1, b"\x00\x01\x02" * 100),
    ("a" * 255, INT32_MAX, bytes(range(256))),
    ("caf\xe9", INT32_MIN, b"x"),
    (b"bytes.topic", 3, b"y" * 200),
])
def test_a_one_message_produce_is_the_frame_of_its_encoded_message(topic, partition, payload):
    expected = ref_produce(topic if isinstance(topic, str) else topic.decode(), partition, encode_message(payload))
    header, sent_payload = one_message_produce_parts(topic, partition, payload)
    assert sent_payload is payload  # sent as is, no copy
    assert header + sent_payload == expected


@pytest.mark.parametrize("durability", [Durability.APPEND, Durability.FLUSH])
@pytest.mark.parametrize("partition,message_set", [(0, b""), (-1, b"abc"), (7, b"\xff" * 1000)])
def test_produce_acked_encoding_is_byte_exact(durability, partition, message_set):
    expected = ref_produce_acked(int(durability), "acked.topic", partition, message_set)
    assert expected[4:8] == b"\x00\x64" + struct.pack(">h", int(durability))  # type 100, then durability
    assert encode_produce_acked(durability, "acked.topic", partition, message_set) == expected
    header, payload = produce_acked_parts(durability, "acked.topic", partition, message_set)
    assert payload is message_set
    assert header + payload == expected


@pytest.mark.parametrize("topic,partition,offset,max_size", [
    ("t", 0, 0, 1024 * 1024),
    ("topic-1", 3, INT64_MAX, INT32_MAX),
    ("x", -1, 2**40 + 7, 0),
    ("", INT32_MIN, INT64_MIN, -1),
])
def test_fetch_encoding_is_byte_exact(topic, partition, offset, max_size):
    assert encode_fetch(topic, partition, offset, max_size) == ref_fetch(topic, partition, offset, max_size)


@pytest.mark.parametrize("fetches", [
    [],
    [("a", 0, 0, 100)],
    [("a", 0, 0, 100), ("bb", 1, 2**33, 300), ("a", 2, 17, 1)],
])
def test_multifetch_encoding_is_byte_exact(fetches):
    encoded = encode_multifetch(fetches)
    assert encoded == ref_multifetch(fetches)
    assert struct.unpack_from(">hh", encoded, 4) == (2, len(fetches))


@pytest.mark.parametrize("produces", [
    [],
    [("a", 0, b"set-a")],
    [("a", 0, b"set-a"), ("b", -1, b""), ("c", 5, bytes(300))],
])
def test_multiproduce_encoding_is_byte_exact(produces):
    encoded = encode_multiproduce(produces)
    assert encoded == ref_multiproduce(produces)
    assert struct.unpack_from(">hh", encoded, 4) == (3, len(produces))


def test_multiproduce_accepts_memoryview_sets():
    produces = [("a", 0, memoryview(b"hello")), ("b", 1, bytearray(b"world!"))]
    assert encode_multiproduce(produces) == ref_multiproduce([("a", 0, b"hello"), ("b", 1, b"world!")])


@pytest.mark.parametrize("topic,partition,time,max_offsets", [
    ("t", 0, -1, 1),
    ("t", 3, -2, 10),
    ("logs", 1, 1_700_000_000_000, INT32_MAX),
])
def test_offsets_encoding_is_byte_exact(topic, partition, time, max_offsets):
    assert encode_offsets(topic, partition, time, max_offsets) == ref_offsets(topic, partition, time, max_offsets)


# --- decode_request round trips -----------------------------------------------------


@given(topic=topics, partition=partitions, message_set=message_sets)
def test_produce_round_trip(topic, partition, message_set):
    request = decode_request(body_of(encode_produce(topic, partition, message_set)))
    assert type(request) is ProduceRequest
    assert (request.topic, request.partition, bytes(request.message_set)) == (topic, partition, message_set)


@given(topic=topics, partition=partitions, offset=int64s, max_size=int32s)
def test_fetch_round_trip(topic, partition, offset, max_size):
    request = decode_request(body_of(encode_fetch(topic, partition, offset, max_size)))
    assert request == FetchRequest(topic, partition, offset, max_size)


@given(fetches=st.lists(fetch_args, max_size=8))
def test_multifetch_round_trip(fetches):
    request = decode_request(body_of(encode_multifetch(fetches)))
    assert type(request) is MultiFetchRequest
    assert request.fetches == [FetchRequest(*fetch) for fetch in fetches]


@given(produces=st.lists(produce_args, max_size=8))
def test_multiproduce_round_trip(produces):
    request = decode_request(body_of(encode_multiproduce(produces)))
    assert type(request) is MultiProduceRequest
    decoded = [(p.topic, p.partition, bytes(p.message_set)) for p in request.produces]
    assert decoded == [tuple(p) for p in produces]
    assert all(type(p) is ProduceRequest for p in request.produces)


@given(topic=topics, partition=partitions, time=int64s, max_offsets=int32s)
@example(topic="t", partition=0, time=-1, max_offsets=1)
@example(topic="t", partition=0, time=-2, max_offsets=1)
def test_offsets_round_trip(topic, partition, time, max_offsets):
    request = decode_request(body_of(encode_offsets(topic, partition, time, max_offsets)))
    assert request == OffsetsRequest(topic, partition, time, max_offsets)


@given(durability=st.sampled_from([0, 1]), topic=topics, partition=partitions, message_set=message_sets)
def test_produce_acked_round_trip(durability, topic, partition, message_set):
    request = decode_request(body_of(encode_produce_acked(durability, topic, partition, message_set)))
    assert type(request) is ProduceAckedRequest
    assert request.durability == durability
    assert (request.topic, request.partition, bytes(request.message_set)) == (topic, partition, message_set)


def test_decoded_message_set_is_a_view_of_the_frame():
    body = bytearray(body_of(encode_produce("t", 0, b"payload")))
    request = decode_request(body)
    assert isinstance(request.message_set, memoryview)
    body[-1:] = b"!"
    assert bytes(request.message_set) == b"payloa!"  # no copy was made


def test_decode_request_on_hand_built_bytes():
    # decode must not depend on the encoders: feed reference bytes
    assert decode_request(body_of(ref_fetch("q", 9, 2**50, 77))) == FetchRequest("q", 9, 2**50, 77)
    request = decode_request(body_of(ref_multiproduce([("a", 1, b"11"), ("b", 2, b"222")])))
    assert [(p.topic, p.partition, bytes(p.message_set)) for p in request.produces] == [("a", 1, b"11"), ("b", 2, b"222")]


# --- decode_request refusals --------------------------------------------------------

VALID_FRAMES = {
    "produce": encode_produce("topic", 1, b"0123456789"),
    "produce-empty-set": encode_produce("t", -1, b""),
    "fetch": encode_fetch("topic", 2, 2**40, 4096),
    "multifetch": encode_multifetch([("a", 0, 10, 100), ("bc", 1, 20, 200)]),
    "multifetch-empty": encode_multifetch([]),
    "multiproduce": encode_multiproduce([("a", 0, b"xy"), ("bc", 1, b"zzz")]),
    "multiproduce-empty": encode_multiproduce([]),
    "offsets": encode_offsets("topic", 0, -1, 5),
    "produce-acked": encode_produce_acked(1, "topic", 3, b"abcdef"),
}


@pytest.mark.parametrize("name", sorted(VALID_FRAMES))
def test_every_truncation_of_a_valid_request_is_refused(name):
    body = body_of(VALID_FRAMES[name])
    decode_request(body)  # the whole body is fine
    for cut in range(len(body)):
        with pytest.raises(MalformedRequestError):
            decode_request(body[:cut])


@pytest.mark.parametrize("name", sorted(VALID_FRAMES))
def test_trailing_bytes_are_refused(name):
    body = body_of(VALID_FRAMES[name])
    for extra in (b"\x00", b"\x00\x00\x00\x00", b"garbage"):
        with pytest.raises(MalformedRequestError, match="unexpected bytes"):
            decode_request(body + extra)


@pytest.mark.parametrize("request_type", [5, 6, 99, 103, 200, -1, INT32_MAX >> 16, -(2**15)])
def test_unknown_request_type_is_refused(request_type):
    body = struct.pack(">h", request_type) + ref_fetch_body("t", 0, 0, 100)
    with pytest.raises(MalformedRequestError, match="unknown request type"):
        decode_request(body)


@pytest.mark.parametrize("length", [-1, -2, -(2**15)])
@pytest.mark.parametrize("request_type,tail", [
    (0, struct.pack(">ii", 0, 0)),
    (1, struct.pack(">iqi", 0, 0, 10)),
    (4, struct.pack(">iqi", 0, -1, 1)),
])
def test_negative_topic_length_is_refused(length, request_type, tail):
    body = struct.pack(">hh", request_type, length) + tail
    with pytest.raises(MalformedRequestError, match="negative"):
        decode_request(body)


def test_topic_running_past_the_end_is_refused():
    body = struct.pack(">hh", 1, 50) + b"short"
    with pytest.raises(MalformedRequestError, match="past the end"):
        decode_request(body)


@pytest.mark.parametrize("set_size", [-1, -100, INT32_MIN])
def test_negative_set_size_is_refused(set_size):
    tail = ref_string("t") + struct.pack(">ii", 0, set_size) + b"abc"
    for body in (
        struct.pack(">h", 0) + tail,
        struct.pack(">hh", 3, 1) + tail,
        struct.pack(">hh", 100, 0) + tail,
    ):
        with pytest.raises(MalformedRequestError, match="negative"):
            decode_request(body)


@pytest.mark.parametrize("set_size", [4, 100, INT32_MAX])
def test_set_running_past_the_end_is_refused(set_size):
    tail = ref_string("t") + struct.pack(">ii", 0, set_size) + b"abc"
    for body in (
        struct.pack(">h", 0) + tail,
        struct.pack(">hh", 3, 1) + tail,
        struct.pack(">hh", 100, 1) + tail,
    ):
        with pytest.raises(MalformedRequestError, match="runs past the end"):
            decode_request(body)


def test_set_size_smaller_than_the_bytes_leaves_trailing_bytes():
    body = struct.pack(">h", 0) + ref_string("t") + struct.pack(">ii", 0, 2) + b"abc"
    with pytest.raises(MalformedRequestError, match="unexpected bytes"):
        decode_request(body)


@pytest.mark.parametrize("count", [-1, -(2**15)])
def test_negative_multi_counts_are_refused(count):
    with pytest.raises(MalformedRequestError, match="negative"):
        decode_request(struct.pack(">hh", 2, count) + ref_fetch_body("t", 0, 0, 10))
    with pytest.raises(MalformedRequestError, match="negative"):
        decode_request(struct.pack(">hh", 3, count) + ref_produce_body("t", 0, b"x"))


def test_multi_count_larger_than_the_parts_is_refused():
    with pytest.raises(MalformedRequestError):
        decode_request(struct.pack(">hh", 2, 3) + ref_fetch_body("t", 0, 0, 10) * 2)
    with pytest.raises(MalformedRequestError):
        decode_request(struct.pack(">hh", 3, 2) + ref_produce_body("t", 0, b"x"))


@pytest.mark.parametrize("durability", [-1, 3, 100, 2**15 - 1])
def test_bad_durability_is_refused(durability):
    body = body_of(ref_produce_acked(durability, "t", 0, b"abc"))
    with pytest.raises(MalformedRequestError, match="durability"):
        decode_request(body)


@settings(max_examples=300)
@given(request_type=st.sampled_from([0, 1, 2, 3, 4, 100, 7]), rest=st.binary(max_size=80))
def test_arbitrary_bytes_either_decode_or_raise_malformed(request_type, rest):
    body = struct.pack(">h", request_type) + rest
    try:
        request = decode_request(body)
    except MalformedRequestError:
        return
    # whatever decoded must re-encode to exactly these bytes
    if type(request) is ProduceRequest:
        again = encode_produce(request.topic, request.partition, bytes(request.message_set))
    elif type(request) is FetchRequest:
        again = encode_fetch(*request)
    elif type(request) is MultiFetchRequest:
        again = encode_multifetch(request.fetches)
    elif type(request) is MultiProduceRequest:
        again = encode_multiproduce([(p.topic, p.partition, bytes(p.message_set)) for p in request.produces])
    elif type(request) is OffsetsRequest:
        again = encode_offsets(*request)
    else:
        assert type(request) is ProduceAckedRequest
        again = encode_produce_acked(request.durability, request.topic, request.partition,
                                     bytes(request.message_set))
    assert body_of(again) == body


def test_request_type_numbers():
    assert [int(t) for t in RequestType] == [0, 1, 2, 3, 4, 100, 101, 102]
    assert [int(d) for d in Durability] == [0, 1, 2]


# --- FrameReader ------------------------------------------------------------------


def framed(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body


def drain(reader: FrameReader) -> list:
    frames = []
    while (frame := reader.next_frame()) is not None:
        frames.append(frame)
    return frames


frame_lists = st.lists(st.binary(min_size=1, max_size=3000), max_size=12)
chunk_sizes = st.sampled_from([8, 64, 1000, 256 * 1024])


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(frames=frame_lists, chunk=chunk_sizes, data=st.data())
def test_frames_split_across_arbitrary_feed_chunks(frames, chunk, data):
    stream = b"".join(framed(f) for f in frames)
    reader = FrameReader(max_frame_bytes=5000, chunk_bytes=chunk)
    received = []
    pos = 0
    while pos < len(stream):
        n = data.draw(st.integers(1, 4000))
        reader.feed(stream[pos:pos + n])
        pos += n
        received.extend(drain(reader))
        assert reader.buffered == min(pos, len(stream)) - sum(4 + len(f) for f in received)
    assert received == frames
    assert reader.buffered == 0
    assert reader.next_frame() is None


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(frames=frame_lists, chunk=chunk_sizes, data=st.data())
def test_frames_split_across_arbitrary_receive_buffer_commits(frames, chunk, data):
    stream = b"".join(framed(f) for f in frames)
    reader = FrameReader(max_frame_bytes=5000, chunk_bytes=chunk)
    received = []
    pos = 0
    while pos < len(stream):
        view = reader.receive_buffer()  # the previous view stays alive meanwhile, as in a real loop
        assert len(view) > 0
        n = min(data.draw(st.integers(1, 4000)), len(view), len(stream) - pos)
        view[:n] = stream[pos:pos + n]
        reader.commit(n)
        pos += n
        received.extend(drain(reader))
    assert received == frames
    assert reader.buffered == 0


def test_feed_many_frames_at_once_then_one_byte_at_a_time():
    frames = [bytes([i]) * (i + 1) for i in range(50)]
    stream = b"".join(framed(f) for f in frames)
    reader = FrameReader(max_frame_bytes=100, chunk_bytes=16)
    reader.feed(stream)
    assert drain(reader) == frames
    for i in range(len(stream)):
        reader.feed(stream[i:i + 1])
        got = drain(reader)
        if got:
            assert len(got) == 1
    reader.feed(stream)
    assert drain(reader) == frames


def test_partial_frame_is_not_returned():
    reader = FrameReader(max_frame_bytes=100)
    reader.feed(framed(b"abcdef")[:-1])
    assert reader.next_frame() is None
    assert reader.buffered == 9
    reader.feed(b"f")
    assert reader.next_frame() == b"abcdef"
    assert reader.next_frame() is None
    reader.feed(b"\x00\x00")  # half a size
    assert reader.next_frame() is None
    assert reader.buffered == 2


@pytest.mark.parametrize("size", [0, -1, -1000, INT32_MIN])
def test_non_positive_frame_size_is_refused(size):
    reader = FrameReader(max_frame_bytes=100)
    reader.feed(struct.pack(">i", size))
    with pytest.raises(MalformedRequestError, match="outside"):
        reader.next_frame()


def test_frame_size_limit_is_inclusive():
    reader = FrameReader(max_frame_bytes=100)
    reader.feed(framed(b"m" * 100))
    assert reader.next_frame() == b"m" * 100
    reader.feed(struct.pack(">i", 101))
    with pytest.raises(MalformedRequestError, match="outside"):
        reader.next_frame()


def test_oversized_frame_is_refused_before_its_body_arrives():
    reader = FrameReader(max_frame_bytes=1000, chunk_bytes=4096)
    reader.feed(framed(b"ok") + struct.pack(">i", INT32_MAX))
    assert reader.next_frame() == b"ok"
    # no body buffered and no giant receive buffer offered for the refused size
    assert len(reader.receive_buffer()) <= 4096
    with pytest.raises(MalformedRequestError):
        reader.next_frame()


def test_large_frame_received_into_receive_buffer_in_pieces():
    size = 6 * 1024 * 1024 + 123
    body = random.Random(7).randbytes(size)
    stream = framed(body) + framed(b"after")
    reader = FrameReader(max_frame_bytes=100 * 1024 * 1024)
    pos = 0
    receives = 0
    frames = []
    while pos < len(stream):
        view = reader.receive_buffer()
        if reader.buffered >= 4 and not frames:
            # the header of the big frame is in: a receive has at least a quarter chunk of
            # room (or the rest of the frame)
            assert len(view) >= min(4 + size - reader.buffered, 64 * 1024)
        n = min(len(view), 65536 if pos < 100 else 1024 * 1024, len(stream) - pos)  # socket-like pieces
        view[:n] = stream[pos:pos + n]
        reader.commit(n)
        pos += n
        receives += 1
        frames.extend(drain(reader))
    assert len(frames) == 2
    assert frames[0] == body
    assert frames[1] == b"after"
    assert receives < 20


def test_a_bare_claim_of_a_huge_frame_gets_no_huge_buffer():
    reader = FrameReader(max_frame_bytes=100 * 1024 * 1024)
    reader.feed(struct.pack(">i", 90 * 1024 * 1024) + b"\x00" * 10)
    view = reader.receive_buffer()
    assert len(view) <= 1024 * 1024  # memory follows the bytes received, not the bytes promised
    del view
    assert reader.next_frame() is None


def test_large_frame_through_a_real_socket_with_recv_into():
    body = random.Random(11).randbytes(3 * 1024 * 1024)
    small = [b"x" * n for n in (1, 10, 1000)]
    stream = framed(small[0]) + framed(body) + framed(small[1]) + framed(small[2])
    left, right = socket.socketpair()
    try:
        sender = threading.Thread(target=left.sendall, args=(stream,))
        sender.start()
        reader = FrameReader(max_frame_bytes=100 * 1024 * 1024)
        frames = []
        right.settimeout(10)
        while len(frames) < 4:
            n = right.recv_into(reader.receive_buffer())
            assert n > 0
            reader.commit(n)
            frames.extend(drain(reader))
        sender.join(10)
        assert frames == [small[0], body, small[1], small[2]]
    finally:
        left.close()
        right.close()


def test_a_large_frame_in_small_receives_is_moved_to_a_new_buffer_a_few_times():
    """The room made for a large frame doubles with what arrived, and a receive needs only
    a chunk of it: 1 MiB in 64 KiB receives is not copied into a new buffer every time
    (it was, 7 times: a fresh buffer of every size from 384 KiB up, each a copy of the
    frame so far)."""
    size = 1024 * 1024
    stream = framed(random.Random(3).randbytes(size))
    reader = FrameReader(max_frame_bytes=100 * 1024 * 1024, chunk_bytes=256 * 1024)
    buffers, pos = [], 0  # every buffer received into (held: no id of a freed one reused)
    while pos < len(stream):
        view = reader.receive_buffer()
        if not buffers or view.obj is not buffers[-1]:
            buffers.append(view.obj)
        n = min(len(view), 65536, len(stream) - pos)
        view[:n] = stream[pos:pos + n]
        del view
        reader.commit(n)
        pos += n
    assert reader.next_frame() == stream[4:]
    assert len(buffers) <= 4, f"{len(buffers)} buffers for one 1 MiB frame"


def test_buffer_is_reused_after_big_frames():
    chunk = 4096
    reader = FrameReader(max_frame_bytes=50 * 1024 * 1024, chunk_bytes=chunk)
    first = random.Random(1).randbytes(1024 * 1024)
    reader.feed(framed(first))
    frame1 = reader.next_frame()
    assert frame1 == first
    # the large buffer was given back: the next receive buffer is chunk-sized again
    assert len(reader.receive_buffer()) == chunk
    reader.feed(framed(b"small"))
    assert reader.next_frame() == b"small"
    second = random.Random(2).randbytes(2 * 1024 * 1024)
    reader.feed(framed(second) + framed(b"tail"))
    assert reader.next_frame() == second
    assert reader.next_frame() == b"tail"
    assert frame1 == first  # frames handed out are independent of the reused buffer
    assert len(reader.receive_buffer()) == chunk


def test_big_frame_followed_by_part_of_the_next():
    reader = FrameReader(max_frame_bytes=10 * 1024 * 1024, chunk_bytes=1024)
    big = bytes(range(256)) * 8192
    nxt = framed(b"next-frame")
    reader.feed(framed(big) + nxt[:5])
    assert reader.next_frame() == big
    assert reader.next_frame() is None
    assert reader.buffered == 5
    reader.feed(nxt[5:])
    assert reader.next_frame() == b"next-frame"
    assert reader.buffered == 0


# --- responses --------------------------------------------------------------------


@pytest.mark.parametrize("error,payload_bytes", [(0, 0), (0, 1000), (1, 0), (-1, 5), (3, 2**30)])
def test_response_header_is_byte_exact(error, payload_bytes):
    assert response_header(error, payload_bytes) == struct.pack(">ih", 2 + payload_bytes, error)


@pytest.mark.parametrize("error", [-1, 0, 1, 2, 3, 4, 7])
def test_error_response_is_byte_exact(error):
    assert error_response(error) == struct.pack(">ih", 2, error)
    assert split_error(error_response(error)[4:])[0] == error


def test_error_response_literal():
    assert error_response(3) == bytes.fromhex("00000002" "0003")
    assert error_response(-1) == bytes.fromhex("00000002" "ffff")


@pytest.mark.parametrize("offsets", [[], [0], [300, 200, 0], [INT64_MAX, 2**40, INT64_MIN]])
def test_offsets_response_is_byte_exact(offsets):
    expected = struct.pack(">ihi", 2 + 4 + 8 * len(offsets), 0, len(offsets)) + b"".join(
        struct.pack(">q", o) for o in offsets)
    encoded = offsets_response(0, offsets)
    assert encoded == expected
    assert decode_offsets(encoded[4:]) == (0, offsets)


def test_offsets_response_accepts_an_iterator():
    assert offsets_response(0, iter([5, 4])) == offsets_response(0, [5, 4])


def test_produce_ack_response_is_byte_exact():
    encoded = produce_ack_response(0, 2, 100, 250)
    assert encoded == struct.pack(">ihiqq", 22, 0, 2, 100, 250)
    assert decode_produce_ack(encoded[4:]) == ProduceAck(0, 2, 100, 250)
    encoded = produce_ack_response(7, -1, 0, INT64_MAX)
    assert encoded == struct.pack(">ihiqq", 22, 7, -1, 0, INT64_MAX)
    assert decode_produce_ack(encoded[4:]) == ProduceAck(7, -1, 0, INT64_MAX)


def multifetch_bytes(parts) -> bytes:
    """A whole MULTIFETCH answer built with the module's encoders."""
    out = multifetch_header([len(data) for _, data in parts])
    for error, data in parts:
        out += response_header(error, len(data)) + data
    return out


def test_multifetch_answer_is_byte_exact():
    parts = [(0, b"abc"), (1, b""), (3, b"xy")]
    expected = (
        struct.pack(">ih", 2 + (6 + 3) + (6 + 0) + (6 + 2), 0)
        + struct.pack(">ih", 5, 0) + b"abc"
        + struct.pack(">ih", 2, 1)
        + struct.pack(">ih", 4, 3) + b"xy"
    )
    whole = multifetch_bytes(parts)
    assert whole == expected
    assert struct.unpack_from(">i", whole)[0] == len(whole) - 4
    assert multifetch_header([]) == struct.pack(">ih", 2, 0)


@given(parts=st.lists(st.tuples(st.sampled_from([-1, 0, 1, 2, 3, 4]), st.binary(max_size=500)), max_size=10))
def test_multifetch_response_round_trip(parts):
    whole = multifetch_bytes(parts)
    (size,) = struct.unpack_from(">i", whole)
    assert size == len(whole) - 4
    decoded = decode_multifetch(whole[4:])
    assert [(error, bytes(data)) for error, data in decoded] == parts


def test_responses_pass_through_a_frame_reader():
    stream = (response_header(0, 5) + b"hello" + offsets_response(0, [9, 3])
              + multifetch_bytes([(0, b"m1"), (1, b"")]) + produce_ack_response(0, 1, 10, 20))
    reader = FrameReader(max_frame_bytes=1000, chunk_bytes=8)
    for i in range(0, len(stream), 3):
        reader.feed(stream[i:i + 3])
    frames = drain(reader)
    assert len(frames) == 4
    error, payload = split_error(frames[0])
    assert (error, bytes(payload)) == (0, b"hello")
    assert decode_offsets(frames[1]) == (0, [9, 3])
    assert [(e, bytes(d)) for e, d in decode_multifetch(frames[2])] == [(0, b"m1"), (1, b"")]
    assert decode_produce_ack(frames[3]) == ProduceAck(0, 1, 10, 20)


@pytest.mark.parametrize("frame", [b"", b"\x00"])
def test_split_error_refuses_a_frame_without_error_code(frame):
    with pytest.raises(MalformedResponseError):
        split_error(frame)


def test_split_error_returns_the_payload():
    error, payload = split_error(b"\x00\x04rest")
    assert error == 4 and bytes(payload) == b"rest"


def test_malformed_response_error_is_a_malformed_request_error():
    assert issubclass(MalformedResponseError, MalformedRequestError)


def test_decode_multifetch_refusals():
    good = multifetch_bytes([(0, b"abc"), (0, b"de")])[4:]
    assert len(decode_multifetch(good)) == 2
    with pytest.raises(MalformedResponseError, match="top-level error"):
        decode_multifetch(struct.pack(">h", 1) + good[2:])
    boundary = 2 + 6 + 3  # after the first whole part the bytes are a valid one-part answer
    assert [bytes(d) for _, d in decode_multifetch(good[:boundary])] == [b"abc"]
    for cut in range(3, len(good)):  # every truncation inside a part
        if cut == boundary:
            continue
        with pytest.raises(MalformedResponseError):
            decode_multifetch(good[:cut])
    with pytest.raises(MalformedResponseError):  # part size smaller than its error code
        decode_multifetch(struct.pack(">hih", 0, 1, 0))
    with pytest.raises(MalformedResponseError):  # negative part size
        decode_multifetch(struct.pack(">hih", 0, -4, 0))
    with pytest.raises(MalformedResponseError):  # part running past the end
        decode_multifetch(struct.pack(">hih", 0, 10, 0) + b"abc")
    with pytest.raises(MalformedResponseError):
        decode_multifetch(b"")


def test_decode_multifetch_of_no_parts():
    assert decode_multifetch(b"\x00\x00") == []


def test_decode_offsets_refusals():
    with pytest.raises(MalformedResponseError, match="without a count"):
        decode_offsets(struct.pack(">h", 0) + b"\x00\x00")
    with pytest.raises(MalformedResponseError):
        decode_offsets(struct.pack(">hi", 0, -1))
    with pytest.raises(MalformedResponseError):  # count says 2, one offset present
        decode_offsets(struct.pack(">hiq", 0, 2, 5))
    with pytest.raises(MalformedResponseError):  # count says 1, trailing bytes
        decode_offsets(struct.pack(">hiqq", 0, 1, 5, 6))
    with pytest.raises(MalformedResponseError):
        decode_offsets(b"\x00")


def test_decode_offsets_with_an_error_returns_no_offsets():
    assert decode_offsets(error_response(3)[4:]) == (3, [])
    assert decode_offsets(offsets_response(1, [7])[4:]) == (1, [])


def test_decode_produce_ack_refusals_and_bare_errors():
    assert decode_produce_ack(error_response(5)[4:]) == ProduceAck(5, -1, -1, -1)
    with pytest.raises(MalformedResponseError):  # no error and no ack
        decode_produce_ack(error_response(0)[4:])
    good = produce_ack_response(0, 1, 2, 3)[4:]
    for cut in range(2, len(good)):
        with pytest.raises(MalformedResponseError):
            decode_produce_ack(good[:cut])
    with pytest.raises(MalformedResponseError):
        decode_produce_ack(good + b"\x00")
    with pytest.raises(MalformedResponseError):
        decode_produce_ack(b"")
