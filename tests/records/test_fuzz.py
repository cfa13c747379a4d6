"""Hostile record batches: random byte flips, truncations and lying fields of valid
batches (with the CRC recomputed half the time, so the damage reaches the record walk
and the inflaters) never make ``validate_batches``, ``iter_records``,
``reencode_uncompressed`` or ``legacy_to_batches`` raise anything but
``RecordBatchError`` (or, for the conversion, anything at all); and what validates
also iterates. The 0.7 counterpart is tests/faults/test_protocol_fuzz.py."""

import os
import struct

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mpbroker.codec.compression import compress as legacy_compress
from mpbroker.codec.message import CODEC_GZIP, CODEC_SNAPPY, encode_message, encode_message_set, encode_message_v0
from mpbroker.records import (
    RecordBatchError,
    encode_batch,
    iter_records,
    legacy_to_batches,
    reencode_uncompressed,
    validate_batches,
)
from mpbroker.records.batch import ATTRIBUTES_OFFSET, CRC_OFFSET, HEADER_SIZE
from mpbroker.records.crc import crc32c

records = st.lists(
    st.tuples(
        st.none() | st.binary(max_size=20),
        st.none() | st.binary(max_size=150),
        st.lists(st.tuples(st.text(max_size=5), st.none() | st.binary(max_size=5)), max_size=3),
        st.integers(-(1 << 40), 1 << 41),
    ),
    min_size=1,
    max_size=12,
)
flips = st.lists(st.tuples(st.integers(0, 1 << 16), st.integers(1, 255)), max_size=4)


def mutate(batch: bytes, edits, cut, fix) -> bytes:
    out = bytearray(batch)
    for index, xor in edits:
        out[index % len(out)] ^= xor
    if cut is not None:
        del out[cut % (len(out) + 1):]
    if fix and len(out) >= HEADER_SIZE:
        struct.pack_into(">I", out, CRC_OFFSET, crc32c(memoryview(out)[ATTRIBUTES_OFFSET:]))
    return bytes(out)


def exercise(buf):
    try:
        infos = validate_batches(buf, max_batch_bytes=1 << 20, inflate_limit=1 << 20)
    except RecordBatchError as exc:
        assert exc.code in (2, 10, 76, 87)
        infos = None
    try:
        read = list(iter_records(buf, inflate_limit=1 << 20))
    except RecordBatchError:
        assert infos is None  # what validates also reads
    else:
        if infos is not None:
            assert len(read) == sum(i.records for i in infos)
    for info in infos or ():
        plain = reencode_uncompressed(buf[info.start:info.end])
        assert list(iter_records(plain)) == list(iter_records(buf[info.start:info.end]))
    if infos is None and len(buf) >= HEADER_SIZE:
        try:
            reencode_uncompressed(buf)
        except RecordBatchError:
            pass


@settings(max_examples=int(os.environ.get("MPBROKER_FUZZ_EXAMPLES", 600)), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    batches=st.lists(st.tuples(records, st.integers(0, 4)), min_size=1, max_size=3),
    target=st.integers(0, 2),
    edits=flips,
    cut=st.none() | st.integers(0, 1 << 16),
    fix=st.booleans(),
)
def test_damaged_batches_raise_only_record_batch_errors(batches, target, edits, cut, fix):
    encoded = [encode_batch(rs, codec=codec) for rs, codec in batches]
    target %= len(encoded)
    encoded[target] = mutate(encoded[target], edits, cut, fix)
    exercise(b"".join(encoded))


@settings(max_examples=300, deadline=None)
@given(
    region=st.binary(max_size=200),
    count=st.integers(-2, 40),
    last=st.integers(-2, 40),
    attributes=st.integers(0, 0x7F),
    producer=st.tuples(st.integers(-2, 3), st.integers(-2, 3)),
)
def test_arbitrary_records_regions_raise_only_record_batch_errors(region, count, last, attributes, producer):
    from mpbroker.records.batch import HEADER

    header = bytearray(HEADER.pack(0, HEADER_SIZE - 12 + len(region), 0, 2, 0, attributes, last, 0, 0, producer[0],
                                   0, producer[1], count))
    struct.pack_into(">I", header, CRC_OFFSET, crc32c(bytes(header[ATTRIBUTES_OFFSET:]) + region))
    exercise(bytes(header) + region)


legacy_messages = st.lists(
    st.one_of(
        st.binary(max_size=60).map(encode_message),
        st.binary(max_size=60).map(encode_message_v0),
        st.tuples(st.lists(st.binary(max_size=30), max_size=6), st.sampled_from([CODEC_GZIP, CODEC_SNAPPY])).map(
            lambda args: encode_message(legacy_compress(args[1], encode_message_set(args[0])), args[1])
        ),
    ),
    max_size=6,
)


@settings(max_examples=400, deadline=None)
@given(messages=legacy_messages, edits=flips, cut=st.none() | st.integers(0, 1 << 12),
       position=st.integers(0, 1 << 40))
def test_damaged_legacy_message_sets_convert_without_raising(messages, edits, cut, position):
    data = bytearray(b"".join(messages))
    if data:
        for index, xor in edits:
            data[index % len(data)] ^= xor
    if cut is not None:
        del data[cut % (len(data) + 1):]
    converted = legacy_to_batches(bytes(data), position)
    assert 0 <= converted.consumed <= len(data)
    infos = validate_batches(converted.data, max_batch_bytes=1 << 30)  # what it makes is always valid
    offsets = [r.offset for r in iter_records(converted.data)]
    assert offsets == sorted(set(offsets))
    assert all(position <= o < position + converted.consumed for o in offsets)
    assert all(i.offsets_fit for i in infos)
