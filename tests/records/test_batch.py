"""Record batches (magic 2): encode and iterate round trips, batches of kafka-python (an
independent implementation) in both directions for every codec, every refusal of
``validate_batches`` with its Kafka error code, ``stamp_batch`` and
``reencode_uncompressed``."""

import gzip
import struct

import lz4.frame
import pytest
import snappy
import zstandard
from kafka.record.default_records import DefaultRecordBatch
from kafka.record.memory_records import MemoryRecords

from mpbroker.codec.compression import compress as legacy_compress
from mpbroker.records import (
    BatchInfo,
    Record,
    RecordBatchError,
    encode_batch,
    iter_records,
    read_header,
    reencode_uncompressed,
    stamp_batch,
    validate_batches,
)
from mpbroker.records.batch import HEADER_SIZE, pack_batch
from mpbroker.records.compression import compress
from mpbroker.records.errors import (
    CORRUPT_MESSAGE,
    INVALID_RECORD,
    MESSAGE_TOO_LARGE,
    UNSUPPORTED_COMPRESSION_TYPE,
)
from tests.records.helpers import kafka_python_batch, raw_record, with_header

CODECS = [0, 1, 2, 3, 4]
T0 = 1_700_000_000_000
RECORDS = [
    (b"key-0", b"value " * 40, [("trace", b"abc"), ("empty", b""), ("none", None)], T0),
    (None, b"x" * 200, [], T0 + 5),
    (b"", None, [], T0 - 3),  # timestamps need not grow
    (b"k" * 300, b"\x00\xff" * 5000, [("\u65e5\u672c", b"v" * 130)], T0 + 70_000),  # multi-byte varints
] + [(None, b"page view %d " % i * 10, [], T0 + i) for i in range(200)]


def expected_records(records, base_offset=0):
    return [Record(base_offset + i, ts, 0, key, value, tuple(headers))
            for i, (key, value, headers, ts) in enumerate(records)]


def code_of(buf, **kwargs) -> int:
    with pytest.raises(RecordBatchError) as info:
        validate_batches(buf, **kwargs)
    return info.value.code


@pytest.mark.parametrize("codec", CODECS)
def test_encode_then_validate_and_iterate(codec):
    batch = encode_batch(RECORDS, codec=codec, base_offset=1000, producer_id=7, producer_epoch=2, base_sequence=40)
    [info] = validate_batches(batch)
    assert info == BatchInfo(0, len(batch), len(RECORDS), codec, codec, len(RECORDS) - 1, T0, T0 + 70_000, 7, 2, 40,
                             -1, False, False)
    assert list(iter_records(batch)) == expected_records(RECORDS, 1000)
    assert list(iter_records(memoryview(batch))) == expected_records(RECORDS, 1000)
    header = read_header(batch)
    assert (header.magic, header.base_offset, header.batch_length) == (2, 1000, len(batch) - 12)


@pytest.mark.parametrize("codec", CODECS)
def test_kafka_python_batches_validate_and_iterate_to_the_same_records(codec):
    batch = kafka_python_batch(RECORDS, codec, producer_id=3, producer_epoch=1, base_sequence=0)
    [info] = validate_batches(batch)
    assert info.codec == codec and info.records == len(RECORDS) and info.producer_id == 3
    assert list(iter_records(batch)) == expected_records(RECORDS)


@pytest.mark.parametrize("codec", CODECS)
def test_kafka_python_reads_our_batches(codec):
    batch = encode_batch(RECORDS, codec=codec, base_offset=50, transactional=True, producer_id=9, producer_epoch=0,
                         base_sequence=0)
    theirs = DefaultRecordBatch(batch)
    assert theirs.validate_crc()
    assert (theirs.compression_type, theirs.is_transactional, theirs.producer_id) == (codec, True, 9)
    got = [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in theirs]
    assert got == [(o, ts, k, v, list(h)) for o, (k, v, h, ts) in enumerate(RECORDS, 50)]
    two = batch + encode_batch([(None, b"next", [], T0)], codec=codec, base_offset=50 + len(RECORDS))
    memory = MemoryRecords(two)
    offsets = []
    while memory.has_next():
        offsets += [r.offset for r in memory.next_batch()]
    assert offsets == list(range(50, 51 + len(RECORDS)))


def test_snappy_raw_blocks_and_xerial_framing_are_both_read():
    region = encode_batch(RECORDS)[HEADER_SIZE:]
    for body in (snappy.compress(region), legacy_compress(2, region)):
        batch = pack_batch(body, len(RECORDS), attributes=2, base_timestamp=T0, max_timestamp=T0)
        assert validate_batches(batch)[0].codec == 2
        assert [r.value for r in iter_records(batch)] == [r[1] for r in RECORDS]


def test_several_batches_and_their_positions():
    batches = [encode_batch(RECORDS[:n], codec=n % 5) for n in (1, 2, 3, 50)]
    buf = b"".join(batches)
    infos = validate_batches(buf)
    starts = [0, len(batches[0]), len(batches[0]) + len(batches[1]), sum(map(len, batches[:3]))]
    assert [(i.start, i.length, i.records, i.end) for i in infos] == [
        (s, len(b), n, s + len(b)) for s, b, n in zip(starts, batches, (1, 2, 3, 50))
    ]
    assert validate_batches(b"") == []
    assert validate_batches(bytearray(buf), deep=False) == infos


def test_offsets_fit_only_when_records_do_not_outnumber_bytes():
    many = [(None, b"", [], 0)] * 5000
    compressed = encode_batch(many, codec=4)
    [info] = validate_batches(compressed)
    assert info.records == 5000 and info.length < 5000 and not info.offsets_fit
    plain = reencode_uncompressed(compressed)
    [info] = validate_batches(plain)
    assert info.codec == 0 and info.offsets_fit


# --------------------------------------------------------------------------------------
# Refusals
# --------------------------------------------------------------------------------------


def test_bad_crc():
    batch = bytearray(encode_batch(RECORDS[:3]))
    batch[-1] ^= 1
    assert code_of(bytes(batch)) == CORRUPT_MESSAGE
    assert code_of(with_header(encode_batch(RECORDS[:3]), crc=12345)) == CORRUPT_MESSAGE


def test_truncated_batches_and_short_data():
    batch = encode_batch(RECORDS[:3])
    for cut in (1, 11, 12, 60, 61, len(batch) - 1):
        assert code_of(batch[:cut]) == CORRUPT_MESSAGE, cut
        assert code_of(batch + batch[:cut]) == CORRUPT_MESSAGE, cut


def test_bad_batch_length_and_wrong_magic():
    batch = encode_batch(RECORDS[:3])
    assert code_of(with_header(batch, batch_length=48)) == CORRUPT_MESSAGE
    assert code_of(with_header(batch, batch_length=-5)) == CORRUPT_MESSAGE
    for magic in (0, 1, 3, -1):
        assert code_of(with_header(batch, magic=magic)) == CORRUPT_MESSAGE


def test_oversized_batch():
    batch = encode_batch(RECORDS)
    assert validate_batches(batch, max_batch_bytes=len(batch))
    assert code_of(batch, max_batch_bytes=len(batch) - 1) == MESSAGE_TOO_LARGE


@pytest.mark.parametrize("codec", [5, 6, 7])
def test_unknown_codec(codec):
    assert code_of(with_header(encode_batch(RECORDS[:3], codec=1), attributes=codec)) == UNSUPPORTED_COMPRESSION_TYPE


def test_records_that_disagree_with_the_count_are_corrupt():
    batch = encode_batch(RECORDS[:3])
    # Header says 4 records (lastOffsetDelta 3, consistent): the region holds 3.
    assert code_of(with_header(batch, records=4, last_offset_delta=3)) == CORRUPT_MESSAGE
    # Header says 2: a record's bytes are left over.
    assert code_of(with_header(batch, records=2, last_offset_delta=1)) == CORRUPT_MESSAGE
    # A huge count is refused before walking.
    assert code_of(with_header(batch, records=2**31 - 1, last_offset_delta=2**31 - 2)) == CORRUPT_MESSAGE
    for codec in (1, 2, 3, 4):
        compressed = encode_batch(RECORDS[:3], codec=codec)
        assert code_of(with_header(compressed, records=4, last_offset_delta=3)) == CORRUPT_MESSAGE


def test_count_and_last_offset_delta_must_agree():
    batch = encode_batch(RECORDS[:3])
    assert code_of(with_header(batch, last_offset_delta=3)) == INVALID_RECORD
    assert code_of(with_header(batch, last_offset_delta=1)) == INVALID_RECORD
    assert code_of(with_header(batch, records=0, last_offset_delta=-1)) == INVALID_RECORD
    assert code_of(with_header(batch, records=-1, last_offset_delta=-2)) == INVALID_RECORD


@pytest.mark.parametrize("codec", CODECS)
def test_offset_deltas_must_be_0_to_n_minus_1(codec):
    for deltas in ([0, 2, 3], [1, 2, 3], [0, 0, 1], [0, 1, -1], [0, 1, 200]):
        region = b"".join(raw_record(d) for d in deltas)
        if codec:
            region = compress(codec, region)
        batch = pack_batch(region, 3, attributes=codec)
        assert code_of(batch) == INVALID_RECORD, (codec, deltas)
    region = b"".join(raw_record(d) for d in range(200))  # two-byte deltas from 64 on
    assert validate_batches(pack_batch(region, 200))[0].records == 200


def test_malformed_records_are_corrupt():
    bad = [
        b"\x80" * 6 + b"\x01" + raw_record()[1:],  # a varint too long
        raw_record(key=b"k")[:-1].replace(b"\x02k", b"\x03k") + b"\x00",  # key length -2
        raw_record(value=b"vv").replace(b"\x04vv", b"\x05vv"),  # value length -3
        raw_record()[:1] + raw_record()[1:-1] + b"\x01",  # header count -1
        raw_record(headers=[(b"h", b"x")]).replace(b"\x02h", b"\x01h"),  # null header key
        b"\x02" + b"\x00",  # length 1
        b"\x02" + b"\x00" * 6,  # length 1, padded past the quick count check
        b"\x01",  # length -1
        bytes([len(raw_record()) * 2]) + raw_record()[1:] + b"\x00",  # length one more than the fields
        bytes([len(raw_record()) * 2 - 4]) + raw_record()[1:],  # length one less
        raw_record(value=b"x" * 100)[:-50],  # runs past the batch
    ]
    for index, record in enumerate(bad):
        for codec in (0, 1, 3):
            region = record if not codec else compress(codec, record)
            assert code_of(pack_batch(region, 1, attributes=codec)) == CORRUPT_MESSAGE, (index, codec)
            with pytest.raises(RecordBatchError):
                list(iter_records(pack_batch(region, 1, attributes=codec)))


def test_what_kafka_refuses_from_a_client():
    batch = encode_batch(RECORDS[:3])
    assert code_of(with_header(batch, attributes=0x20)) == INVALID_RECORD  # a control batch
    assert code_of(with_header(batch, producer_id=5, producer_epoch=0, base_sequence=-1)) == INVALID_RECORD
    assert validate_batches(with_header(batch, attributes=0x10 | 0x08 | 0x40))  # transactional, LogAppendTime, unused


@pytest.mark.parametrize("codec", [1, 2, 3, 4])
def test_corrupt_compressed_data(codec):
    good = compress(codec, raw_record())
    for body in (good[: len(good) // 2], b"\x00" * 40, b"\xff" * 40, b""):
        assert code_of(pack_batch(body, 1, attributes=codec)) == CORRUPT_MESSAGE, body


BOMB = b"\x00" * 20_000_000


@pytest.mark.parametrize("codec,body", [
    (1, gzip.compress(BOMB)),
    (1, gzip.compress(BOMB[:1000]) * 30_000),  # gzip members
    (2, legacy_compress(2, BOMB)),
    (2, snappy.compress(BOMB[:4_000_000])),
    (3, lz4.frame.compress(BOMB)),
    (4, zstandard.ZstdCompressor().compress(BOMB)),
    (4, zstandard.ZstdCompressor(write_content_size=False).compress(BOMB)),
])
def test_decompression_bombs_stop_at_the_inflate_limit(codec, body):
    batch = pack_batch(body, 1, attributes=codec)
    assert len(batch) < 1_500_000
    assert code_of(batch, inflate_limit=1_000_000, max_batch_bytes=1 << 30) == CORRUPT_MESSAGE
    with pytest.raises(RecordBatchError, match="inflate"):
        validate_batches(batch, inflate_limit=1_000_000, max_batch_bytes=1 << 30)


def test_the_inflate_limit_is_for_all_batches_together():
    batch = encode_batch([(None, b"a" * 100_000, [], 0)], codec=1)
    assert validate_batches(batch * 3, inflate_limit=400_000)
    assert code_of(batch * 5, inflate_limit=400_000) == CORRUPT_MESSAGE


def test_errors_say_where():
    good = encode_batch(RECORDS[:2])
    bad = bytearray(good)
    bad[-2] ^= 0x40
    with pytest.raises(RecordBatchError, match=f"record batch at {len(good)} fails its CRC"):
        validate_batches(good + bytes(bad))


# --------------------------------------------------------------------------------------
# The broker's stamp, and re-encoding
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("codec", CODECS)
def test_stamp_batch_sets_the_offset_and_epoch_and_keeps_the_crc(codec):
    first = kafka_python_batch(RECORDS[:3], codec)
    second = kafka_python_batch(RECORDS[3:9], codec)
    buf = bytearray(first + second)
    stamp_batch(buf, 0, 1_000, leader_epoch=4)
    stamp_batch(buf, len(first), 5_000)
    assert [(i.start, i.partition_leader_epoch) for i in validate_batches(buf)] == [(0, 4), (len(first), 0)]
    theirs = DefaultRecordBatch(bytes(buf[len(first):]))
    assert theirs.validate_crc() and theirs.base_offset == 5_000
    assert [r.offset for r in iter_records(buf)] == [1000, 1001, 1002] + list(range(5000, 5006))


@pytest.mark.parametrize("codec", CODECS)
def test_stamp_batch_with_log_append_time(codec):
    batch = kafka_python_batch(RECORDS[:5], codec)
    buf = bytearray(b"\x00" * 7 + batch)
    stamp_batch(memoryview(buf), 7, 42, log_append_time_ms=T0 + 999_999)
    stamped = bytes(buf[7:])
    [info] = validate_batches(stamped)
    assert (info.attributes & 0x08, info.max_timestamp, info.base_timestamp) == (0x08, T0 + 999_999, T0)
    theirs = DefaultRecordBatch(stamped)
    assert theirs.validate_crc() and theirs.timestamp_type == 1
    assert {(r.timestamp, r.timestamp_type) for r in theirs} == {(T0 + 999_999, 1)}
    assert {(r.timestamp, r.timestamp_type) for r in iter_records(stamped)} == {(T0 + 999_999, 1)}
    assert [r.offset for r in iter_records(stamped)] == [42, 43, 44, 45, 46]


def test_stamp_batch_refuses_what_is_not_a_batch():
    with pytest.raises(RecordBatchError):
        stamp_batch(bytearray(100), 0, 5)


@pytest.mark.parametrize("codec", CODECS)
def test_reencode_uncompressed_keeps_everything_but_the_codec(codec):
    batch = kafka_python_batch(RECORDS, codec, producer_id=11, producer_epoch=3, base_sequence=77, transactional=True)
    stamped = bytearray(batch)
    stamp_batch(stamped, 0, 300, leader_epoch=2)
    plain = reencode_uncompressed(stamped)
    [before], [after] = validate_batches(stamped), validate_batches(plain)
    assert after.codec == 0 and after.attributes == before.attributes & ~7
    assert after._replace(start=0, length=0, codec=0, attributes=0) == before._replace(length=0, codec=0, attributes=0)
    assert list(iter_records(plain)) == list(iter_records(stamped))
    theirs = DefaultRecordBatch(plain)
    assert theirs.validate_crc() and theirs.base_offset == 300 and theirs.leader_epoch == 2
    assert [r.value for r in theirs] == [r[1] for r in RECORDS]


def test_reencode_uncompressed_refuses_bad_input():
    batch = encode_batch(RECORDS[:3], codec=1)
    for bad in (batch[:-1], batch + b"x", with_header(batch, crc=1), with_header(batch, attributes=6),
                with_header(batch, magic=1)):
        with pytest.raises(RecordBatchError):
            reencode_uncompressed(bad)


# --------------------------------------------------------------------------------------
# Reading
# --------------------------------------------------------------------------------------


def test_iter_records_stops_quietly_at_a_torn_tail():
    batches = [encode_batch(RECORDS[:2], base_offset=0), encode_batch(RECORDS[2:5], codec=3, base_offset=2)]
    buf = b"".join(batches)
    for cut in range(len(batches[0]), len(buf)):
        assert [r.offset for r in iter_records(buf[:cut])] == [0, 1], cut
    assert [r.offset for r in iter_records(buf)] == [0, 1, 2, 3, 4]
    assert list(iter_records(buf[:5])) == []


def test_iter_records_skips_control_batches():
    marker = pack_batch(raw_record(key=b"\x00\x00\x00\x01", value=b"\x00\x00\x00\x00\x00\x00"), 1,
                        base_offset=2, attributes=0x30, producer_id=1, producer_epoch=0)
    buf = encode_batch(RECORDS[:2], transactional=True, producer_id=1, producer_epoch=0, base_sequence=0) + marker \
        + encode_batch(RECORDS[:1], base_offset=3)
    assert [r.offset for r in iter_records(buf)] == [0, 1, 3]


def test_iter_records_raises_on_corruption():
    batch = bytearray(encode_batch(RECORDS[:3]))
    batch[-3] ^= 1
    with pytest.raises(RecordBatchError):
        list(iter_records(bytes(batch)))
    with pytest.raises(RecordBatchError):
        list(iter_records(with_header(encode_batch(RECORDS[:3]), batch_length=10)))


def test_encode_batch_arguments():
    with pytest.raises(ValueError):
        encode_batch([])
    with pytest.raises(ValueError):
        encode_batch(RECORDS[:1], codec=5)
    batch = encode_batch([(None, b"v", None, None)], timestamp_type=1)
    [info] = validate_batches(batch)
    assert (info.base_timestamp, info.max_timestamp, info.attributes) == (-1, -1, 8)
    assert struct.unpack_from(">q", batch)[0] == 0
