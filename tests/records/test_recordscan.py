"""The C record walk (``mpbroker.records._recordscan``) against the Python one
(``batch._walk``): for every input the same verdict (valid or not, and which record is
bad), and ``validate_batches`` / ``reencode_uncompressed`` give the same answer (the
same BatchInfo list, or a RecordBatchError with the same code and text) with the C walk
on and off.

Both paths run in this one process: ``batch._c_walk`` is switched between the C
function and None. Without the built extension these tests skip, except under CI
(``CI`` set), where they fail.
"""

import contextlib
import os
import random
import re
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mpbroker.records import batch, encode_batch, reencode_uncompressed, validate_batches
from mpbroker.records.batch import HEADER_SIZE, pack_batch
from mpbroker.records.compression import CODEC_GZIP, CODEC_LZ4, CODEC_NONE, CODEC_SNAPPY, CODEC_ZSTD
from mpbroker.records.errors import RecordBatchError
from tests.records.helpers import kafka_python_batch, raw_record

try:
    from mpbroker.records import _recordscan
except ImportError:
    _recordscan = None


@pytest.fixture(autouse=True, scope="module")
def extension_built():
    if _recordscan is None:  # as tests/codec/test_fastscan.py: fail under CI, else skip loudly
        reason = ("C EXTENSION NOT BUILT: mpbroker.records._recordscan is missing (no C compiler or Python "
                  "headers when the package was installed?); reinstall with pip install -e .")
        if os.environ.get("CI"):
            pytest.fail(reason + " (CI is set: failing instead of skipping)", pytrace=False)
        pytest.skip(reason)


@contextlib.contextmanager
def c_walk(on: bool):
    saved = batch._c_walk
    batch._c_walk = _recordscan.walk if on else None
    try:
        yield
    finally:
        batch._c_walk = saved


def python_error(b, pos, end, count):
    """The Python walk's error for b[pos:end] (None when valid)."""
    try:
        batch._walk(b, pos, end, count, 0)
    except RecordBatchError as exc:
        return exc
    return None


def expected_index(error, count):
    """What the C walk must answer for the Python walk's ``error``."""
    if error is None:
        return None
    if " claims " in error.message:
        return -1
    if " bytes after its " in error.message:
        return max(count, 0)
    return int(re.search(r", record (\d+)", error.message).group(1))


def same_walk(b, pos=0, end=None, count=1):
    """Both walks over b[pos:end], checked to agree; True when valid."""
    end = len(b) if end is None else end
    error = python_error(b, pos, end, count)
    assert _recordscan.walk(b, pos, end, count) == expected_index(error, count), (bytes(b[pos:end]), count, error)
    return error is None


def answer(buf, reencode=False, **kwargs):
    try:
        return reencode_uncompressed(buf) if reencode else validate_batches(buf, **kwargs)
    except RecordBatchError as exc:
        return ("error", exc.code, exc.message)


def same_validation(buf, **kwargs):
    """validate_batches (and reencode_uncompressed, for one batch) with the C walk on and
    off, checked equal; the C answer is returned."""
    answers = []
    for on in (False, True):
        with c_walk(on):
            answers.append((answer(buf, **kwargs), answer(buf, reencode=True)))
    assert answers[1] == answers[0]
    return answers[1][0]


def records_region(batch_bytes):
    return batch_bytes[HEADER_SIZE:]


def rebatch(region, count, codec=CODEC_NONE):
    """A batch (good CRC, lastOffsetDelta count - 1) around an uncompressed ``region``."""
    return pack_batch(region, count, attributes=codec)


def record_set(n, seed=0):
    rng = random.Random(seed)
    out = []
    for i in range(n):
        key = None if i % 3 == 0 else bytes(rng.randrange(256) for _ in range(rng.randrange(20)))
        value = None if i % 7 == 5 else bytes(rng.randrange(256) for _ in range(rng.choice((0, 1, 60, 200, 300))))
        headers = [(f"h{j}", None if j == 1 else b"x" * (j * 40)) for j in range(i % 4)]
        out.append((key, value, headers, 1_700_000_000_000 + rng.randrange(-10**6, 10**9)))
    return out


SMALL = [
    encode_batch([(None, b"v", (), 1)]),
    encode_batch([(b"k", None, [("a", b"b"), ("n", None)], -1), (b"", b"", (), 5)]),
    kafka_python_batch([(b"key", b"value" * 3, [("h", b"1")], 1_700_000_000_000), (None, b"x", [], 2)]),
    pack_batch(raw_record(0, value=None) + raw_record(1, key=b"k" * 130, value=b"v" * 70, timestamp_delta=-(1 << 40)),
               2),
]


# -- valid batches ---------------------------------------------------------------------------

@pytest.mark.parametrize("n", [1, 2, 3, 17, 128, 1000])
def test_valid_batches_of_both_encoders(n):
    records = record_set(n, seed=n)
    for built in (encode_batch(records), kafka_python_batch([(k, v, [(hk, hv) for hk, hv in h], t)
                                                              for k, v, h, t in records])):
        assert same_walk(built, HEADER_SIZE, len(built), n)
        infos = same_validation(built)
        assert infos[0].records == n
    many = encode_batch([(None, bytes(200), (), i) for i in range(n)])
    assert same_walk(many, HEADER_SIZE, len(many), n)


@pytest.mark.parametrize("codec", [CODEC_GZIP, CODEC_SNAPPY, CODEC_LZ4, CODEC_ZSTD])
def test_compressed_batches_are_walked_inflated(codec):
    records = record_set(40, seed=codec)
    good = encode_batch(records, codec=codec)
    assert same_validation(good)[0].records == 40
    assert same_validation(with_count(good, 39))[0] == "error"


def with_count(batch_bytes, count):
    from tests.records.helpers import with_header

    return with_header(batch_bytes, records=count, last_offset_delta=count - 1)


def test_several_batches_in_one_buffer():
    buf = b"".join(SMALL)
    assert len(same_validation(buf)) == len(SMALL)
    pos = 0
    for one in SMALL:  # each walked inside the whole buffer (reads may look past its end)
        count = int.from_bytes(one[57:61], "big")
        assert same_walk(buf, pos + HEADER_SIZE, pos + len(one), count)
        pos += len(one)


# -- damage ----------------------------------------------------------------------------------

@pytest.mark.parametrize("index", range(len(SMALL)))
def test_every_byte_flip(index):
    good = SMALL[index]
    count = int.from_bytes(good[57:61], "big")
    region = bytearray(records_region(good))
    for at in range(len(region)):
        for value in {0x00, 0x01, 0x02, 0x7F, 0x80, 0x81, 0xFF, region[at] ^ 0x01, region[at] ^ 0x80}:
            damaged = bytearray(region)
            damaged[at] = value
            same_walk(damaged, 0, len(damaged), count)
            same_walk(bytes(damaged) + b"\x00" * 8, 0, len(damaged), count)  # bytes past the end
            if value in (0x00, 0x80, region[at] ^ 0x01):  # through validate_batches too (a good CRC)
                same_validation(rebatch(bytes(damaged), count))


@pytest.mark.parametrize("index", range(len(SMALL)))
def test_every_truncation_and_every_count(index):
    good = SMALL[index]
    count = int.from_bytes(good[57:61], "big")
    region = records_region(good)
    for cut in range(len(region) + 1):
        same_walk(region[:cut], 0, cut, count)
        same_walk(region, 0, cut, count)  # the rest still in the buffer, past end
        same_validation(rebatch(region[:cut], count))
    for wrong in range(-2, count + 4):
        same_walk(region, 0, len(region), wrong)
        same_walk(region + b"\x00" * 7, 0, len(region) + 7, wrong)


def test_errors_are_identical_with_and_without_c():
    bad = [  # (records region, count, what the error says)
        (raw_record(0) + raw_record(2), 2, "record 1 has offset delta 2, not 1"),
        (raw_record(0, key=b"k") + b"\x00", 1, "has 1 bytes after its 1 records"),
        (raw_record(0, headers=[(b"a", b"b")])[:-1], 1, "record 0: runs past the end of the batch"),
        (b"\x0c\x00\x00\x00\x00\x00\x03", 1, "record 0: header count -2"),
        (raw_record(0) * 3, 9, "claims 9 records in 24 bytes"),
    ]
    for region, count, what in bad:
        code, text = same_validation(rebatch(region, count))[1:]
        assert what in text, text


# -- random input (hypothesis) ----------------------------------------------------------------

@settings(max_examples=int(os.environ.get("MPBROKER_FUZZ_EXAMPLES", 600)), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=300), st.integers(-2, 50), st.integers(0, 40))
def test_random_bytes(data, count, tail):
    same_walk(data, 0, max(len(data) - tail, 0), count)


FIELD = st.one_of(st.none(), st.binary(max_size=140))
RECORD = st.tuples(st.integers(-3, 5), FIELD, FIELD, st.lists(st.tuples(st.binary(max_size=5), FIELD), max_size=3),
                   st.integers(-(1 << 63), (1 << 63) - 1), st.integers(0, 255))
EDIT = st.tuples(st.integers(0, 1 << 16), st.sampled_from(["flip", "set", "insert", "delete"]), st.integers(0, 255))


@settings(max_examples=int(os.environ.get("MPBROKER_FUZZ_EXAMPLES", 600)), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(RECORD, min_size=1, max_size=6), st.booleans(), st.lists(EDIT, max_size=3), st.integers(-1, 1))
def test_random_records_with_random_damage(records, in_order, edits, count_change):
    region = bytearray()
    for i, (delta, key, value, headers, timestamp, attributes) in enumerate(records):
        region += raw_record(i if in_order else i + delta, key=key, value=value, headers=headers,
                             timestamp_delta=timestamp, attributes=attributes)
    for at, kind, byte in edits:
        at %= len(region) + 1
        if kind == "insert":
            region[at:at] = bytes([byte])
        elif at < len(region):
            if kind == "flip":
                region[at] ^= 1 << (byte % 8)
            elif kind == "set":
                region[at] = byte
            else:
                del region[at]
    count = len(records) + count_change
    same_walk(bytes(region), 0, len(region), count)
    if count > 0:
        same_validation(rebatch(bytes(region), count))


# -- the C walk's own edges --------------------------------------------------------------------

def varint(v, width):
    """The unsigned (already zigzagged) ``v`` in exactly ``width`` bytes (non-minimal allowed)."""
    out = bytearray()
    for k in range(width):
        out.append((v >> (7 * k)) & 0x7F | (0x80 if k < width - 1 else 0))
    return bytes(out)


def record(body):
    return varint(2 * len(body), 1 if len(body) < 64 else 2) + body


def test_varint_widths_and_limits():
    body = b"\x00\x00\x00\x01\x00\x00"  # attributes, ts 0, delta 0, null key, empty value, no headers
    assert same_walk(record(body), count=1)
    for width in range(1, 6):  # every width of the length, the 5-byte one at its limit
        assert same_walk(varint(12, width) + body, count=1)
    assert same_walk(b"\x8c\x80\x80\x80\x00" + body, count=1)
    for last in (0x0F, 0x10, 0x7F):
        assert not same_walk(b"\x8c\x80\x80\x80" + bytes([last]) + body, count=1)
    assert not same_walk(b"\x8c\x80\x80\x80\x80\x00" + body, count=1)  # 6 bytes
    for last in (0, 1, 2, 0x7F):  # timestampDelta: 10 bytes, the last at most 1
        ts = b"\xff" * 9 + bytes([last])
        assert same_walk(record(b"\x00" + ts + b"\x00\x01\x00\x00"), count=1) == (last <= 1)
    assert not same_walk(record(b"\x00" + b"\x80" * 10 + b"\x00\x00\x01\x00\x00"), count=1)  # 11 bytes
    for ts_width in range(1, 11):
        assert same_walk(record(b"\x00" + varint(77, ts_width) + b"\x00\x01\x00\x00"), count=1)
    for width in range(1, 6):  # offsetDelta 1 (zigzag 2) in any width, for record 1
        second = record(b"\x00\x00" + varint(2, width) + b"\x01\x00\x00")
        assert same_walk(record(body) + second, count=2)
    assert not same_walk(record(b"\x00\x00\x80\x80\x80\x80\x10\x01\x00\x00"), count=1)


def test_null_key_only_as_one_byte_null_value_in_any_width():
    assert same_walk(record(b"\x00\x00\x00\x01\x00\x00"), count=1)
    assert not same_walk(record(b"\x00\x00\x00\x81\x00\x00\x00"), count=1)  # key -1 in two bytes
    assert same_walk(record(b"\x00\x00\x00\x01\x81\x00\x00"), count=1)  # value -1 in two bytes
    assert same_walk(record(b"\x00\x00\x00\x01\x81\x80\x80\x80\x00\x00"), count=1)
    assert not same_walk(record(b"\x00\x00\x00\x01\x03\x00"), count=1)  # value -2
    assert same_walk(record(b"\x00\x00\x00\x80\x00\x00\x00"), count=1)  # empty key in two bytes


def test_headers():
    head = b"\x00\x00\x00\x01\x00"
    assert same_walk(record(head + b"\x80\x00"), count=1)  # zero headers in two bytes
    assert not same_walk(record(head + b"\x01"), count=1)  # -1 headers
    assert same_walk(record(head + b"\x02\x02a\x01"), count=1)  # key "a", null value
    assert same_walk(record(head + b"\x02\x80\x00\x81\x00"), count=1)  # empty key, value -1 in two bytes
    assert not same_walk(record(head + b"\x02\x01\x00"), count=1)  # null header key
    assert not same_walk(record(head + b"\x02\x02a\x03"), count=1)  # value -2
    assert not same_walk(record(head + b"\x04\x02a\x00"), count=1)  # a second header missing
    assert not same_walk(record(head + b"\xfe\xff\xff\xff\x0f"), count=1)  # 2**31 - 1 headers
    assert not same_walk(record(head + b"\x02\xfe\xff\xff\xff\x0f\x00"), count=1)  # a huge key length
    assert not same_walk(record(head[:-1] + b"\xfe\xff\xff\xff\x0f\x00"), count=1)  # a huge value length


def test_lengths_past_the_record_and_the_batch():
    body = b"\x00\x00\x00\x01\x00\x00"
    assert not same_walk(record(body)[:-1], count=1)
    assert not same_walk(b"\xfe\xff\xff\xff\x0f" + body, count=1)  # length 2**31 - 1
    assert not same_walk(b"\x0a" + body, count=1)  # length 5, below the minimum
    assert not same_walk(b"\x0d" + body, count=1)  # negative
    # the record's end inside the buffer but past ``end``: refused, whatever follows
    buf = record(body) + record(body)
    assert not same_walk(buf, 0, len(buf) - 1, 2)
    # fields that would run past the record's end into the next record
    short = b"\x0c\x00\x00\x00\x02kk"
    assert not same_walk(short + record(body), 0, len(short) + 7, 2)


def test_counts():
    one = record(b"\x00\x00\x00\x01\x00\x00")
    assert _recordscan.walk(one, 0, 7, 1) is None
    assert _recordscan.walk(one, 0, 7, 2) == -1
    assert _recordscan.walk(one, 0, 7, 0) == 0 and _recordscan.walk(one, 0, 7, -5) == 0
    assert _recordscan.walk(b"", 0, 0, 0) is None and _recordscan.walk(b"", 0, 0, -1) is None
    three = one + record(b"\x00\x00\x02\x01\x00\x00") + record(b"\x00\x00\x04\x01\x00\x00")
    assert _recordscan.walk(three, 0, 21, 3) is None
    assert _recordscan.walk(three, 0, 21, 2) == 2  # bytes after the records
    assert _recordscan.walk(one * 3, 0, 21, 3) == 1  # record 1's offset delta
    assert _recordscan.walk(one, 0, 7, (1 << 62)) == -1


def test_arguments():
    buf = record(b"\x00\x00\x00\x01\x00\x00")
    assert _recordscan.walk(bytearray(buf), 0, 7, 1) is None
    assert _recordscan.walk(memoryview(b"xx" + buf)[2:], 0, 7, 1) is None
    assert _recordscan.walk(b"xx" + buf + b"yy", 2, 9, 1) is None
    for pos, end in ((-1, 7), (0, 8), (5, 4), (0, -1)):
        with pytest.raises(ValueError):
            _recordscan.walk(buf, pos, end, 1)
    with pytest.raises(TypeError):
        _recordscan.walk(buf, 0, 7)
    with pytest.raises(TypeError):
        _recordscan.walk("text", 0, 4, 1)
    with pytest.raises(OverflowError):
        _recordscan.walk(buf, 0, 7, 1 << 70)


def test_a_large_batch_that_releases_the_gil():
    big = encode_batch([(None, bytes(1000), (), i) for i in range(200)])  # past 64 KiB
    assert same_walk(big, HEADER_SIZE, len(big), 200)
    region = bytearray(records_region(big))
    region[-1] = 0x02  # one header claimed, none there
    assert _recordscan.walk(bytes(region), 0, len(region), 200) == 199
    assert same_validation(rebatch(bytes(region), 200))[0] == "error"


def test_pure_python_switch():
    probe = "from mpbroker.records import batch; print(batch._c_walk is None)"
    for value, expected in (("1", "True"), ("0", "False"), ("", "False")):
        run = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60,
                             env={**os.environ, "MPBROKER_PURE_PYTHON": value})
        assert run.returncode == 0, run.stderr
        assert run.stdout.strip() == expected


def test_valid_batches_never_reach_the_python_walk(monkeypatch):
    def refuse(*args):
        raise AssertionError("the C walk handed valid records to _walk")

    monkeypatch.setattr(batch, "_walk", refuse)
    with c_walk(True):
        assert validate_batches(b"".join(SMALL + [encode_batch(record_set(50), codec=CODEC_GZIP)]))
        reencode_uncompressed(encode_batch(record_set(20), codec=CODEC_ZSTD))
