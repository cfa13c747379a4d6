"""0.7 messages as record batches: offsets from byte positions (a message at [p, q) is
offset q - 1, a wrapper of k messages q - k .. q - 1), the same whatever position the
read started at; torn tails, corrupt messages and wrappers with more messages than
bytes as error values; kafka-python reads the result."""

import pytest
from kafka.record.memory_records import MemoryRecords

from mpbroker.codec.compression import compress
from mpbroker.codec.message import CODEC_GZIP, CODEC_SNAPPY, encode_message, encode_message_set, encode_message_v0
from mpbroker.records import iter_records, legacy_to_batches, validate_batches
from mpbroker.records.errors import CORRUPT_MESSAGE

BASE = 1_000_000  # the log position of the message set's first byte


def wrapper(payloads, codec=CODEC_GZIP) -> bytes:
    return encode_message(compress(codec, encode_message_set(payloads)), codec)


def offsets_and_values(data):
    return [(r.offset, r.value) for r in iter_records(data)]


def test_plain_messages_take_the_offset_of_their_last_byte():
    payloads = [b"a", b"", b"x" * 200, b"y" * 70_000]
    messages = [encode_message(p) for p in payloads]
    converted = legacy_to_batches(b"".join(messages), BASE)
    assert (converted.consumed, converted.error, converted.dropped) == (sum(map(len, messages)), None, ())
    ends, end = [], BASE
    for message in messages:
        end += len(message)
        ends.append(end)
    assert offsets_and_values(converted.data) == [(q - 1, p) for q, p in zip(ends, payloads)]
    infos = validate_batches(converted.data, max_batch_bytes=1 << 20)
    assert [i.records for i in infos] == [1] * 4 and {(i.base_timestamp, i.producer_id) for i in infos} == {(-1, -1)}
    assert [(r.key, r.timestamp, r.timestamp_type) for r in iter_records(converted.data)] == [(None, -1, 0)] * 4


def test_magic_0_and_compressed_wrappers():
    parts = [
        encode_message_v0(b"zero"),
        wrapper([b"g1", b"g2", b"g3"]),
        wrapper([b"s1", b"s2"], CODEC_SNAPPY),
        encode_message(compress(CODEC_GZIP, wrapper([b"n1", b"n2"], CODEC_SNAPPY) + encode_message(b"n3")), CODEC_GZIP),
        encode_message(b"last"),
    ]
    converted = legacy_to_batches(b"".join(parts), BASE)
    assert converted.error is None and converted.consumed == sum(map(len, parts))
    ends = [BASE + sum(map(len, parts[:i + 1])) for i in range(len(parts))]
    assert offsets_and_values(converted.data) == [
        (ends[0] - 1, b"zero"),
        (ends[1] - 3, b"g1"), (ends[1] - 2, b"g2"), (ends[1] - 1, b"g3"),
        (ends[2] - 2, b"s1"), (ends[2] - 1, b"s2"),
        (ends[3] - 3, b"n1"), (ends[3] - 2, b"n2"), (ends[3] - 1, b"n3"),
        (ends[4] - 1, b"last"),
    ]
    assert [i.records for i in validate_batches(converted.data)] == [1, 3, 2, 3, 1]
    memory = MemoryRecords(converted.data)  # kafka-python reads them
    seen = []
    while memory.has_next():
        batch = memory.next_batch()
        assert batch.validate_crc()
        seen += [(r.offset, r.value) for r in batch]
    assert seen == offsets_and_values(converted.data)


def test_offsets_do_not_depend_on_where_the_read_starts():
    parts = [encode_message(b"m%d" % i) if i % 3 else wrapper([b"w%d" % i] * 4) for i in range(12)]
    whole = offsets_and_values(legacy_to_batches(b"".join(parts), BASE).data)
    start = BASE
    for i in range(len(parts)):
        later = offsets_and_values(legacy_to_batches(b"".join(parts[i:]), start).data)
        assert later == whole[len(whole) - len(later):]
        assert later[0][0] >= start
        start += len(parts[i])


def test_a_torn_tail_stops_the_conversion_quietly():
    parts = [encode_message(b"one"), wrapper([b"a", b"b"]), encode_message(b"three")]
    data = b"".join(parts)
    for cut in range(len(parts[0]), len(parts[0]) + len(parts[1])):
        converted = legacy_to_batches(data[:cut], BASE)
        assert (converted.consumed, converted.error) == (len(parts[0]), None), cut
        assert [v for _, v in offsets_and_values(converted.data)] == [b"one"]
    assert legacy_to_batches(b"", BASE) == (b"", 0, None, ())
    assert legacy_to_batches(b"\x00\x00", BASE) == (b"", 0, None, ())


@pytest.mark.parametrize("damage", ["crc", "magic", "length", "codec", "inner"])
def test_corrupt_messages_are_an_error_value_after_the_good_ones(damage):
    good = encode_message(b"good") + wrapper([b"a", b"b"])
    bad = bytearray(encode_message(b"payload!"))
    if damage == "crc":
        bad[-1] ^= 1
    elif damage == "magic":
        bad[4] = 7
    elif damage == "length":
        bad[:4] = b"\x00\x00\x00\x02"
    elif damage == "codec":
        bad[5] = 3
    else:
        bad = bytearray(encode_message(compress(CODEC_GZIP, encode_message_set([b"x", b"y"])[:-1]), CODEC_GZIP))
    converted = legacy_to_batches(good + bytes(bad) + encode_message(b"after"), BASE)
    assert converted.consumed == len(good)
    assert converted.error is not None and converted.error.code == CORRUPT_MESSAGE
    assert str(BASE + len(good)) in converted.error.message
    assert [v for _, v in offsets_and_values(converted.data)] == [b"good", b"a", b"b"]


def test_a_wrapper_with_more_messages_than_bytes_drops_the_first_ones_and_says_so():
    many = wrapper([b""] * 5000)
    room = len(many)
    assert room < 5000
    data = encode_message(b"before") + many + encode_message(b"after")
    converted = legacy_to_batches(data, BASE)
    assert converted.error is None and converted.consumed == len(data)
    start = BASE + len(encode_message(b"before"))
    assert converted.dropped == ((start, 5000 - room),)
    offsets = [o for o, _ in offsets_and_values(converted.data)]
    assert offsets[1:-1] == list(range(start, start + room))
    assert len(offsets) == room + 2 and offsets == sorted(set(offsets))


def test_memoryview_input():
    data = encode_message(b"a") + wrapper([b"b", b"c"])
    assert legacy_to_batches(memoryview(data), 5) == legacy_to_batches(data, 5)
