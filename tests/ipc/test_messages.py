"""Ring record codecs of mpbroker.ipc.messages: produce batches and fragments, ack/close/done, also carried through a real Ring."""

import os
import random
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mpbroker.ipc.messages import (
    FRAGMENT_HEADER,
    KIND_ACK,
    KIND_CLOSE,
    KIND_DONE,
    KIND_PRODUCE,
    KIND_PRODUCE_BATCH,
    KIND_REPLICA_POSITIONS,
    KIND_WAKE,
    Mode,
    decode_ack,
    decode_close,
    decode_done,
    decode_fragment,
    decode_produce_batch,
    decode_replica_positions,
    decode_wake,
    encode_ack,
    encode_close,
    encode_done,
    encode_replica_positions,
    encode_wake,
    entry_bytes,
    entry_parts,
    produce_fragments,
)
from mpbroker.ipc.ring import KIND_PAD, Ring

MAX_BODY = 16 * 1024 - 8  # a 64 KiB ring's record limit


def joined(parts) -> memoryview:
    """A record body as the reader gets it: the parts, concatenated."""
    return memoryview(b"".join(bytes(part) for part in parts))


def reassemble(fragments) -> bytes:
    total = fragments[0].total_size
    buffer = bytearray(total)
    for fragment in fragments:
        buffer[fragment.fragment_offset:fragment.fragment_offset + len(fragment.data)] = fragment.data
    return bytes(buffer)


def test_record_kinds_are_distinct_and_never_the_ring_padding_kind():
    kinds = [KIND_PRODUCE, KIND_ACK, KIND_CLOSE, KIND_DONE, KIND_PRODUCE_BATCH, KIND_REPLICA_POSITIONS, KIND_WAKE]
    assert len(set(kinds)) == len(kinds)
    assert KIND_PAD not in kinds
    assert [int(mode) for mode in Mode] == [0, 1, 2, 3]


def test_replica_positions_and_wakes_round_trip():
    positions = [(b"clicks", 3, 7, 12345), (b"t", 0, -1, 0)]
    (body,) = encode_replica_positions(9, positions)
    assert decode_replica_positions(memoryview(body)) == (9, [("clicks", 3, 7, 12345), ("t", 0, -1, 0)])
    (body,) = encode_wake([("a.b", 2), ("c", 0)])
    assert decode_wake(memoryview(body)) == [("a.b", 2), ("c", 0)]


# --- fragments ----------------------------------------------------------------------


def test_large_set_is_split_into_fragments_that_reassemble_to_it():
    message_set = random.Random(5).randbytes(100_000)
    topic = b"orders"
    fragments = list(produce_fragments(77, topic, 3, Mode.ACK_FLUSH, message_set, MAX_BODY))
    room = MAX_BODY - FRAGMENT_HEADER.size - len(topic)
    assert len(fragments) == -(-len(message_set) // room)
    decoded = []
    for parts in fragments:
        size = sum(len(part) for part in parts)
        assert size <= MAX_BODY  # every fragment fits one ring record
        decoded.append(decode_fragment(joined(parts)))
    assert all(sum(len(p) for p in parts) == MAX_BODY for parts in fragments[:-1])  # all but the last are full
    assert [f.fragment_offset for f in decoded] == [i * room for i in range(len(decoded))]
    assert {(f.request_id, f.partition, f.mode, f.total_size, f.topic) for f in decoded} == {
        (77, 3, Mode.ACK_FLUSH, 100_000, "orders")}
    assert reassemble(decoded) == message_set
    assert b"".join(bytes(f.data) for f in decoded) == message_set


def test_set_that_fits_is_one_fragment():
    message_set = b"m" * 500
    fragments = list(produce_fragments(1, b"t", 0, Mode.FIRE_AND_FORGET, message_set, MAX_BODY))
    assert len(fragments) == 1
    fragment = decode_fragment(joined(fragments[0]))
    assert fragment == (1, 0, Mode.FIRE_AND_FORGET, 500, 0, "t", fragment.data)
    assert bytes(fragment.data) == message_set


@pytest.mark.parametrize("total,lengths", [
    (lambda room: room - 1, lambda room: [room - 1]),
    (lambda room: room, lambda room: [room]),
    (lambda room: room + 1, lambda room: [room, 1]),
    (lambda room: 3 * room, lambda room: [room, room, room]),
], ids=["room-1", "room", "room+1", "3*room"])
def test_fragment_boundaries(total, lengths):
    topic = b"abc"
    room = 1000 - FRAGMENT_HEADER.size - len(topic)  # set bytes per 1000-byte record
    message_set = bytes(i % 251 for i in range(total(room)))
    fragments = [decode_fragment(joined(parts))
                 for parts in produce_fragments(9, topic, 1, Mode.ACK_APPEND, message_set, 1000)]
    assert [len(f.data) for f in fragments] == lengths(room)
    assert reassemble(fragments) == message_set


def test_empty_set_is_one_empty_fragment():
    fragments = list(produce_fragments(4, b"t", 2, Mode.ACK_APPEND, b"", MAX_BODY))
    assert len(fragments) == 1
    fragment = decode_fragment(joined(fragments[0]))
    assert (fragment.total_size, fragment.fragment_offset, bytes(fragment.data)) == (0, 0, b"")


def test_fragments_refuse_records_too_small_for_the_header():
    with pytest.raises(ValueError):
        list(produce_fragments(1, b"x" * 100, 0, Mode.ACK_APPEND, b"data", FRAGMENT_HEADER.size + 100))


def test_fragment_data_is_a_view_of_the_set_not_a_copy():
    message_set = bytearray(b"a" * 3000)
    fragments = list(produce_fragments(1, b"t", 0, Mode.ACK_APPEND, message_set, 1000))
    message_set[0:1] = b"Z"
    assert bytes(fragments[0][2][:1]) == b"Z"


def test_fragment_header_layout():
    body = struct.pack("<QiHBxQQ", 2**64 - 1, -1, 5, 2, 123_456, 98_304) + b"topic" + b"payload"
    fragment = decode_fragment(memoryview(body))
    assert fragment[:6] == (2**64 - 1, -1, 2, 123_456, 98_304, "topic")
    assert bytes(fragment.data) == b"payload"
    parts = next(produce_fragments(2**64 - 1, b"topic", -1, 2, b"payload", 1000))
    assert bytes(joined(parts)) == struct.pack("<QiHBxQQ", 2**64 - 1, -1, 5, 2, 7, 0) + b"topic" + b"payload"


@given(request_id=st.integers(0, 2**64 - 1), partition=st.integers(-(2**31), 2**31 - 1),
       mode=st.sampled_from(list(Mode)), topic=st.text(alphabet="abcXYZ09._-", min_size=1, max_size=60),
       message_set=st.binary(max_size=5000), max_body=st.sampled_from([200, 1016, MAX_BODY]))
def test_fragments_round_trip(request_id, partition, mode, topic, message_set, max_body):
    topic_bytes = topic.encode("ascii")
    decoded = [decode_fragment(joined(parts))
               for parts in produce_fragments(request_id, topic_bytes, partition, mode, message_set, max_body)]
    assert all(f[:5] == (request_id, partition, mode, len(message_set), f.fragment_offset) for f in decoded)
    assert all(f.topic == topic for f in decoded)
    assert reassemble(decoded) == message_set
    offsets = [f.fragment_offset for f in decoded]
    assert offsets == sorted(set(offsets))


# --- batch entries ----------------------------------------------------------------

entries = st.lists(st.tuples(st.integers(0, 2**64 - 1), st.integers(-(2**31), 2**31 - 1),
                             st.sampled_from(list(Mode)), st.binary(min_size=1, max_size=30),
                             st.binary(max_size=300)), max_size=10)


@given(batch=entries)
def test_batch_entries_round_trip(batch):
    parts = []
    for request_id, partition, mode, topic, message_set in batch:
        entry = entry_parts(request_id, topic, partition, mode, message_set)
        assert sum(len(part) for part in entry) == entry_bytes(topic, message_set)
        parts.extend(entry)
    decoded = decode_produce_batch(joined(parts))
    assert [(r, p, m, t, bytes(s)) for r, p, m, t, s in decoded] == [
        (r, p, m, t, s) for r, p, m, t, s in batch]


def test_batch_entry_layout():
    header, topic, message_set = entry_parts(5, b"tp", 1, Mode.ACK_APPEND, b"set!")
    assert header == struct.pack("<IQiHB", 6, 5, 1, 2, 1)
    assert (topic, message_set) == (b"tp", b"set!")
    assert entry_bytes(b"tp", b"set!") == 19 + 2 + 4


def test_batch_with_an_empty_set_entry_in_the_middle():
    parts = [*entry_parts(1, b"a", 0, 0, b"first"), *entry_parts(2, b"b", 1, 1, b""),
             *entry_parts(3, b"c", 2, 2, b"third")]
    decoded = decode_produce_batch(joined(parts))
    assert [(r, p, m, t, bytes(s)) for r, p, m, t, s in decoded] == [
        (1, 0, 0, b"a", b"first"), (2, 1, 1, b"b", b""), (3, 2, 2, b"c", b"third")]
    assert decode_produce_batch(memoryview(b"")) == []


# --- worker -> acceptor answers -------------------------------------------------------


@given(request_id=st.integers(0, 2**64 - 1), error=st.integers(-(2**15), 2**15 - 1),
       partition=st.integers(-(2**31), 2**31 - 1), offset=st.integers(-(2**63), 2**63 - 1),
       next_offset=st.integers(-(2**63), 2**63 - 1), reason=st.text(max_size=100))
def test_ack_round_trip(request_id, error, partition, offset, next_offset, reason):
    body = joined(encode_ack(request_id, error, partition, offset, next_offset, reason))
    assert decode_ack(body) == (request_id, error, partition, offset, next_offset, reason)


def test_ack_layout_and_default_reason():
    parts = encode_ack(3, -1, 2, 100, 250)
    assert parts[0] == struct.pack("<Qhxxiqq", 3, -1, 2, 100, 250)
    assert parts[1] == b""
    assert decode_ack(joined(parts)) == (3, -1, 2, 100, 250, "")


def test_long_reasons_are_cut_to_512_bytes_without_breaking_decoding():
    header, reason = encode_ack(1, 2, 0, 0, 0, "x" * 2000)
    assert reason == b"x" * 512
    _, reason = encode_close(1, "é" * 400)  # 800 bytes of UTF-8, cut inside a character
    assert len(reason) == 512
    request_id, text = decode_close(joined(encode_close(9, "é" * 400)))
    assert request_id == 9
    assert text == "é" * 256
    *_, text = decode_ack(joined(encode_ack(1, 0, 0, 0, 0, "ab" + "€" * 300)))
    assert text.startswith("ab€€") and len(text.encode("utf-8", "replace")) <= 515


@given(request_id=st.integers(0, 2**64 - 1), reason=st.text(max_size=100))
def test_close_round_trip(request_id, reason):
    assert decode_close(joined(encode_close(request_id, reason))) == (request_id, reason)


@given(request_id=st.integers(0, 2**64 - 1))
def test_done_round_trip(request_id):
    parts = encode_done(request_id)
    assert parts == (struct.pack("<Q", request_id),)
    assert decode_done(joined(parts)) == request_id


# --- through a real ring ------------------------------------------------------------


def test_produces_and_answers_travel_through_a_ring():
    ring = Ring(64 * 1024)
    ring.attach_writer()
    ring.attach_reader()
    try:
        assert ring.max_record_body == MAX_BODY
        big = random.Random(9).randbytes(50_000)
        small = [(10 + i, b"topic", i, Mode.FIRE_AND_FORGET, bytes([i]) * (i * 10)) for i in range(5)]
        batch = [part for r, t, p, m, s in small for part in entry_parts(r, t, p, m, s)]
        assert ring.try_write(KIND_PRODUCE_BATCH, *batch)
        for parts in produce_fragments(99, b"big", 7, Mode.ACK_FLUSH, big, ring.max_record_body):
            assert ring.try_write(KIND_PRODUCE, *parts)
        assert ring.try_write(KIND_ACK, *encode_ack(99, 0, 7, 1000, 51_000, "ok"))
        assert ring.try_write(KIND_CLOSE, *encode_close(11, "bad crc"))
        assert ring.try_write(KIND_DONE, *encode_done(14))
        ring.publish()
        records = ring.read()
        kinds = [kind for kind, _ in records]
        assert kinds == [KIND_PRODUCE_BATCH] + [KIND_PRODUCE] * 4 + [KIND_ACK, KIND_CLOSE, KIND_DONE]
        decoded = decode_produce_batch(records[0][1])
        assert [(r, t, p, m, bytes(s)) for r, p, m, t, s in decoded] == small
        fragments = [decode_fragment(body) for _, body in records[1:5]]
        assert reassemble(fragments) == big
        assert {f.request_id for f in fragments} == {99}
        assert decode_ack(records[5][1]) == (99, 0, 7, 1000, 51_000, "ok")
        assert decode_close(records[6][1]) == (11, "bad crc")
        assert decode_done(records[7][1]) == 14
        ring.release()
    finally:
        os.close(ring.data_fd)
        os.close(ring.space_fd)

