"""The C loop of message-set validation (``mpbroker.codec._fastscan``) against the
pure-Python one: for every input, the same ``Validation`` (valid bytes, messages, the
error's type and text) and the same ``decode_messages`` answer (or the same error).

Both paths run in this one process: ``message_set._scan`` and ``message_set._decode``
are switched between the C functions and None (the Python loops). Without the built
extension these tests skip, except under CI (``CI`` set), where they fail: the CI
machine has a compiler, so the extension must be there and be exercised.
"""

import contextlib
import mmap
import os
import random
import struct
import subprocess
import sys
import zlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mpbroker.codec import compression, message_set
from mpbroker.codec.message import (
    CODEC_GZIP,
    CODEC_NONE,
    CODEC_SNAPPY,
    MAGIC_V1,
    encode_message,
    encode_message_set,
    encode_message_v0,
)
from mpbroker.codec.message_set import count_plain_messages, decode_messages, validate_message_set

try:
    from mpbroker.codec import _fastscan
except ImportError:
    _fastscan = None

INT32_MAX = 0x7FFFFFFF
UNLIMITED = 1 << 62


@pytest.fixture(autouse=True, scope="module")
def extension_built():
    if _fastscan is None:  # as tests/faults/netcluster/availability.py: fail under CI, else skip loudly
        reason = ("C EXTENSION NOT BUILT: mpbroker.codec._fastscan is missing (no C compiler, Python or zlib "
                  "headers when the package was installed?); reinstall with pip install -e .")
        if os.environ.get("CI"):
            pytest.fail(reason + " (CI is set: failing instead of skipping)", pytrace=False)
        pytest.skip(reason)


@contextlib.contextmanager
def loops(c: bool):
    """Run ``message_set`` with the C loops (``c``) or the Python ones."""
    saved = message_set._scan, message_set._decode
    message_set._scan, message_set._decode = (_fastscan.scan, _fastscan.decode) if c else (None, None)
    try:
        yield
    finally:
        message_set._scan, message_set._decode = saved


def answer(validation):
    return validation.valid_bytes, validation.messages, type(validation.error), str(validation.error)


def decoded(buf, base_offset):
    try:
        return decode_messages(buf, base_offset, inflate_limit=1 << 20)
    except Exception as exc:  # noqa: BLE001 - the error is the answer to compare
        return type(exc), str(exc)


def same(buf, max_message_size=1000, *, deep=True, inflate_limit=1 << 20, max_depth=8, base_offset=7):
    """Both loops' answers to ``buf``, checked equal; the C one is returned."""
    answers = []
    for c in (False, True):
        with loops(c):
            validation = validate_message_set(buf, max_message_size, deep=deep, inflate_limit=inflate_limit,
                                              max_depth=max_depth)
            answers.append((answer(validation), decoded(bytes(buf), base_offset)))
    assert answers[1] == answers[0]
    with loops(True):  # the produce path's short way: a count only where the full check passes all
        count = count_plain_messages(buf, max_message_size)
    if count is not None:
        assert answers[1][0] == (len(buf), count, type(None), "None")
    return answers[1][0]


def wrap(inner: bytes, codec: int) -> bytes:
    return encode_message(compression.compress(codec, inner), codec)


def plain_set(count: int, size: int) -> bytes:
    return encode_message_set([bytes([i % 251]) * size for i in range(count)])


MIXED = (encode_message(b"first") + encode_message_v0(b"old") + wrap(plain_set(3, 5), CODEC_GZIP)
         + encode_message(b"", CODEC_NONE) + wrap(plain_set(2, 4), CODEC_SNAPPY) + encode_message(b"last" * 5))


# -- explicit cases ------------------------------------------------------------------------

@pytest.mark.parametrize("count", [0, 1, 2, 3, 50, 1000])
@pytest.mark.parametrize("size", [0, 1, 200, 1024])
def test_valid_sets(count, size):
    buf = plain_set(count, size)
    assert same(buf, 1 << 20)[:3] == (len(buf), count, type(None))


def test_a_large_set_that_releases_the_gil():
    buf = plain_set(2000, 1024)  # past the 64 KiB threshold
    assert same(buf, 1 << 20)[:2] == (len(buf), 2000)
    broken = bytearray(buf)
    broken[-1] ^= 1
    assert same(bytes(broken), 1 << 20)[:2] == (len(buf) - 1034, 1999)


def test_plain_sets_never_reach_the_python_check(monkeypatch):
    def refuse(*args):
        raise AssertionError("the C scan handed a plain message to _check_message")

    monkeypatch.setattr(message_set, "_check_message", refuse)
    with loops(True):
        assert validate_message_set(plain_set(100, 30)).messages == 100
        assert len(decode_messages(plain_set(100, 30))[0]) == 100


def test_mixed_set():
    assert same(MIXED)[:3] == (len(MIXED), 6, type(None))
    assert same(MIXED, deep=False)[:3] == (len(MIXED), 6, type(None))


def test_every_cut_of_a_mixed_set():
    for cut in range(len(MIXED) + 1):
        same(MIXED[:cut])


def test_every_flipped_bit_of_a_mixed_set():
    for index in range(len(MIXED)):
        for bit in range(8):
            broken = bytearray(MIXED)
            broken[index] ^= 1 << bit
            same(bytes(broken))
            same(bytes(broken), deep=False)


def test_every_flipped_bit_of_a_plain_set():
    buf = plain_set(4, 6)
    for index in range(len(buf)):
        for bit in range(8):
            broken = bytearray(buf)
            broken[index] ^= 1 << bit
            same(bytes(broken), 10)


@pytest.mark.parametrize("max_message_size", [-(1 << 70), -7, -6, 0, 5, 99, 100, 101, 1 << 31, 1 << 62, 1 << 70])
def test_size_bounds(max_message_size):
    buf = encode_message(b"x" * 5) + encode_message(b"y" * 100) + encode_message(b"") + encode_message_v0(b"z" * 100)
    same(buf, max_message_size)
    same(buf, max_message_size, deep=False)


@pytest.mark.parametrize("codec", [CODEC_GZIP, CODEC_SNAPPY])
def test_nested_wrappers_bombs_and_depth(codec):
    innermost = wrap(plain_set(2, 3), CODEC_SNAPPY)
    nested = wrap(encode_message(b"c") + innermost + encode_message_v0(b"v0"), CODEC_GZIP)
    outer = encode_message(b"a") + wrap(nested + encode_message(b"d"), codec) + encode_message(b"e")
    assert same(outer)[:3] == (len(outer), 3, type(None))
    for max_depth in range(4):
        same(outer, max_depth=max_depth)
    deep = plain_set(1, 4)
    for _ in range(10):
        deep = wrap(deep, codec)
    assert "nested too deeply" in same(deep)[3]
    bomb = wrap(encode_message(b"\x00" * (2 << 20)), codec)
    assert "inflates past" in same(encode_message(b"ok") + bomb, 1 << 20)[3]
    for limit in (0, 100, 1 << 20, 3 << 20, 5 << 20):
        same(encode_message(b"ok") + bomb + bomb, 1 << 20, inflate_limit=limit)


@pytest.mark.parametrize("bad", [
    struct.pack(">i", 3) + b"abc",
    struct.pack(">i", -7) + b"\x01" * 20,
    struct.pack(">i", -(1 << 31)) + b"\x01\x00" + b"\x00" * 20,
    struct.pack(">i", INT32_MAX) + b"\x01\x00" + b"\x00" * 20,
    struct.pack(">i", INT32_MAX - 3) + b"\x01\x00" + b"\x00" * 20,
    struct.pack(">iBBI", 7, 9, 0, 0) + b"x",
    struct.pack(">iBBI", 7, 1, 0, 12345) + b"x",
    struct.pack(">iBBI", 7, 1, 3, zlib.crc32(b"x")) + b"x",
    struct.pack(">iBBI", 7, 1, 4, zlib.crc32(b"x")) + b"x",  # a stray attribute bit: valid, not plain
    struct.pack(">iBBI", 7, 1, 0x80, zlib.crc32(b"x")) + b"x",
    struct.pack(">iBB", 5, 1, 0) + b"\x00" * 3,
    struct.pack(">iBI", 5, 0, 0),
    b"\x00\x00\x00",
    b"\x00" * 9,
    encode_message(b"\x00not compressed\xff" * 3, CODEC_GZIP),
    encode_message(b"\x00not compressed\xff" * 3, CODEC_SNAPPY),
    wrap(b"", CODEC_GZIP),
    wrap(plain_set(2, 5)[:-2], CODEC_SNAPPY),
])
def test_invalid_messages(bad):
    for buf in (bad, encode_message(b"ok") + bad, encode_message(b"ok") + bad + encode_message(b"after")):
        same(buf)
        same(buf, deep=False)


def test_memoryview_bytearray_and_mmap():
    for buf in (memoryview(MIXED), bytearray(MIXED), memoryview(b"xx" + MIXED)[2:]):
        with loops(True):
            assert answer(validate_message_set(buf)) == answer(validate_message_set(MIXED))
    with mmap.mmap(-1, len(MIXED)) as mapped:
        mapped[:] = MIXED
        for buf in (mapped, memoryview(mapped)):
            with loops(True):
                assert answer(validate_message_set(buf, UNLIMITED, deep=False)) == (len(MIXED), 6, type(None), "None")
            if isinstance(buf, memoryview):
                buf.release()


def test_decode_keeps_the_python_types_for_other_buffers():
    buf = plain_set(3, 4)
    with loops(True):
        assert all(type(p) is bytes for p in decode_messages(buf)[0])
        assert all(type(p) is bytearray for p in decode_messages(bytearray(buf))[0])
        assert decode_messages(buf, 1 << 63)[1][0] == (1 << 63) + 14  # past int64: the Python loop
    with loops(False):
        assert decode_messages(buf, 1 << 63)[1][0] == (1 << 63) + 14


# -- random sets, random damage ------------------------------------------------------------

def message_strategy(depth: int = 2):
    payload = st.binary(max_size=120)
    leaf = st.one_of(
        payload.map(encode_message),
        payload.map(encode_message_v0),
        st.tuples(payload, st.sampled_from([4, 8, 0x40, 0xFC])).map(
            lambda pa: struct.pack(">iBBI", len(pa[0]) + 6, MAGIC_V1, pa[1], zlib.crc32(pa[0])) + pa[0]),
    )
    if depth == 0:
        return leaf
    wrapped = st.tuples(st.lists(message_strategy(depth - 1), max_size=4), st.sampled_from([CODEC_GZIP, CODEC_SNAPPY]))
    return st.one_of(leaf, leaf, wrapped.map(lambda lc: wrap(b"".join(lc[0]), lc[1])))


@st.composite
def damaged_sets(draw):
    buf = bytearray(b"".join(draw(st.lists(message_strategy(), max_size=12))))
    for _ in range(draw(st.integers(0, 3))):
        action = draw(st.sampled_from(["flip", "cut", "garbage", "length"]))
        if action == "flip" and buf:
            buf[draw(st.integers(0, len(buf) - 1))] ^= draw(st.integers(1, 255))
        elif action == "cut":
            del buf[draw(st.integers(0, len(buf))):]
        elif action == "garbage":
            buf += draw(st.binary(max_size=20))
        elif action == "length" and len(buf) >= 4:
            at = draw(st.integers(0, len(buf) - 4))
            buf[at:at + 4] = struct.pack(">i", draw(st.sampled_from([-1, 0, 5, 6, INT32_MAX, -(1 << 31),
                                                                       len(buf) - at - 4, len(buf) - at - 3])))
    return bytes(buf)


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(damaged_sets(), st.sampled_from([0, 10, 100, 1000, UNLIMITED]), st.booleans(),
       st.sampled_from([0, 50, 1000, 1 << 20]), st.integers(0, 3))
def test_random_sets_with_random_damage(buf, max_message_size, deep, inflate_limit, max_depth):
    same(buf, max_message_size, deep=deep, inflate_limit=inflate_limit, max_depth=max_depth)


@settings(max_examples=200)
@given(st.lists(st.binary(max_size=300), max_size=40), st.data())
def test_random_plain_sets_cut_anywhere(payloads, data):
    buf = encode_message_set(payloads)
    cut = data.draw(st.integers(0, len(buf)))
    same(buf[:cut], 300)
    same(buf[:cut], 299)


# -- the C functions themselves ------------------------------------------------------------

def test_scan_edges():
    scan = _fastscan.scan
    buf = plain_set(3, 4)  # 14-byte messages
    assert scan(b"", 0, 100) == (0, 0)
    assert scan(buf, len(buf), 100) == (len(buf), 0)
    assert scan(buf, 0, 100) == (42, 3)
    assert scan(buf, 14, 100) == (42, 2)
    assert scan(buf, 0, 10) == (42, 3) and scan(buf, 0, 9) == (0, 0)  # length 10 vs max_length
    assert scan(buf, 0, -(1 << 63)) == (0, 0)
    assert scan(buf[:41], 0, 100) == (28, 2)
    assert scan(buf, 1, 100) == (1, 0)  # not at a boundary: stops, no harm
    # A message one byte short, whose missing byte is the NUL after every bytes object's
    # data (the CRC would match if the scan read one byte too far).
    zeros = encode_message(b"\x00" * 4)
    assert scan(zeros[:-1], 0, 100) == (0, 0)
    assert scan(zeros + zeros[:-1], 0, 100) == (14, 1)
    assert _fastscan.decode(zeros[:-1], 0, 0, [], []) == 0
    for start in (-1, len(buf) + 1):
        with pytest.raises(ValueError, match="outside the buffer"):
            scan(buf, start, 100)
    with pytest.raises(OverflowError):
        scan(buf, 0, 1 << 64)
    with pytest.raises(TypeError):
        scan("text", 0, 100)
    with pytest.raises(TypeError):
        scan(buf, 0)
    with pytest.raises(BufferError):
        scan(memoryview(buf)[::2], 0, 100)


@pytest.mark.parametrize("length", [-(1 << 31), -1, 0, 5, INT32_MAX, INT32_MAX - 4, INT32_MAX - 9, 1 << 30])
def test_scan_lengths_near_the_int32_limits(length):
    crc = zlib.crc32(b"")
    buf = encode_message(b"ok") + struct.pack(">iBBI", length, 1, 0, crc) + b"\x00" * 64
    assert _fastscan.scan(buf, 0, INT32_MAX) == (12, 1)
    assert _fastscan.scan(buf, 0, 1 << 62) == (12, 1)
    assert _fastscan.decode(buf, 0, 0, [], []) == 12
    same(buf, UNLIMITED)


def test_scan_reads_an_mmap_in_place():
    buf = plain_set(5000, 100)
    with mmap.mmap(-1, len(buf)) as mapped:
        mapped[:] = buf
        view = memoryview(mapped)
        assert _fastscan.scan(view, 0, 1000) == (len(buf), 5000)
        assert _fastscan.scan(view[110:], 0, 1000) == (len(buf) - 110, 4999)
        assert _fastscan.scan(mapped, 550, 1000) == (len(buf), 4995)
        view.release()
    # Every buffer was released: the mmap closed without "exported pointers exist".


def test_buffers_are_released_on_every_path():
    buf = bytearray(plain_set(3, 4))
    _fastscan.scan(buf, 0, 100)
    _fastscan.decode(buf, 0, 0, [], [])
    with pytest.raises(ValueError):
        _fastscan.scan(buf, 99, 100)
    with pytest.raises(ValueError):
        _fastscan.decode(buf, -1, 0, [], [])
    with pytest.raises(OverflowError):
        _fastscan.decode(buf, 0, (1 << 63) - 20, [], [])
    with pytest.raises(TypeError):
        _fastscan.decode(buf, 0, 0, (), [])
    buf.extend(b"x")  # would raise BufferError if an export were still held


def test_decode_edges():
    buf = plain_set(3, 4) + encode_message_v0(b"v0")
    payloads, offsets = [], []
    assert _fastscan.decode(buf, 0, 100, payloads, offsets) == 42
    assert payloads == [bytes([i]) * 4 for i in range(3)] and offsets == [114, 128, 142]
    assert _fastscan.decode(b"", 0, 0, payloads, offsets) == 0 and len(payloads) == 3
    broken = bytearray(buf)
    broken[20] ^= 1
    assert _fastscan.decode(bytes(broken), 0, 0, [], []) == 14
    with pytest.raises(TypeError):
        _fastscan.decode(buf, 0, 0, [])


def test_the_environment_forces_the_python_loops_and_zlibs_crc():
    probe = ("import zlib; from mpbroker.codec import message, message_set as m; "
             "print(m._scan is None, m._decode is None, message.crc32 is zlib.crc32)")
    zlib_crc = str(_fastscan.CRC != "pclmul")  # the encoders' CRC without the switch
    for value, expected in (("1", "True True True"), ("", f"False False {zlib_crc}"),
                            ("0", f"False False {zlib_crc}")):
        run = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60,
                             env={**os.environ, "MPBROKER_PURE_PYTHON": value})
        assert run.stdout.split() == expected.split(), run.stderr


# -- the CRC (crc32_ieee: PCLMULQDQ folding where the CPU has it, else zlib's) ---------------

def cpu_flags() -> set:
    try:
        with open("/proc/cpuinfo") as f:
            return {flag for line in f if line.startswith("flags") for flag in line.split(":", 1)[1].split()}
    except OSError:
        return set()


def test_the_crc_in_use_is_the_one_the_cpu_allows():
    # (A build with CFLAGS=-DMPBROKER_NO_PCLMUL, zlib's CRC only, fails here on such a CPU.)
    flags = cpu_flags()
    has_pclmul = os.uname().machine == "x86_64" and {"pclmulqdq", "sse4_1"} <= flags
    assert _fastscan.CRC == ("pclmul" if has_pclmul else "zlib")


def test_the_encoders_checksum_with_the_folding_crc_where_it_runs_and_match_zlib():
    from mpbroker.codec import message

    assert message.crc32 is (_fastscan.crc32 if _fastscan.CRC == "pclmul" else zlib.crc32)
    for payload in (b"", b"x" * 63, os.urandom(64), os.urandom(200), os.urandom(5000)):
        assert encode_message(payload)[6:10] == struct.pack(">I", zlib.crc32(payload))
        assert encode_message_v0(payload)[5:9] == struct.pack(">I", zlib.crc32(payload))
        assert encode_message_set([payload, payload])[6:10] == struct.pack(">I", zlib.crc32(payload))


RANDOM = random.Random(20240607).randbytes(1100 + 16)


def test_crc32_is_zlibs_at_every_length_and_alignment():
    crc32 = _fastscan.crc32
    view = memoryview(RANDOM)
    for start in range(16):
        for length in range(1101):
            piece = view[start:start + length]
            assert crc32(piece) == zlib.crc32(piece), (start, length)
    for length in range(1101):  # a nonzero starting value
        assert crc32(view[:length], 0x9E3779B9) == zlib.crc32(view[:length], 0x9E3779B9), length


def test_crc32_chains_like_zlib():
    crc32 = _fastscan.crc32
    for cut in range(0, 1101, 7):
        head, tail = RANDOM[:cut], RANDOM[cut:1100]
        assert crc32(tail, crc32(head)) == zlib.crc32(RANDOM[:1100]), cut
    for value in (1, 0xFFFFFFFF, 1 << 32, -1, (1 << 70) + 5):  # any int, modulo 2**32 as in zlib
        assert crc32(RANDOM[:300], value) == zlib.crc32(RANDOM[:300], value), value


@pytest.mark.parametrize("length", [1 << 20, (1 << 20) + 13])
def test_crc32_of_long_buffers(length):
    buf = random.Random(length).randbytes(length)
    assert _fastscan.crc32(buf) == zlib.crc32(buf)
    assert _fastscan.crc32(memoryview(buf)[5:]) == zlib.crc32(memoryview(buf)[5:])  # unaligned, the GIL let go
    for fill in (b"\x00", b"\xff"):
        assert _fastscan.crc32(fill * length) == zlib.crc32(fill * length)


@pytest.mark.parametrize("fill", [b"\x00", b"\xff"])
def test_crc32_of_constant_bytes(fill):
    for length in range(300):
        for value in (0, 0xFFFFFFFF):
            assert _fastscan.crc32(fill * length, value) == zlib.crc32(fill * length, value), (length, value)


def test_crc32_takes_any_buffer():
    crc = zlib.crc32(RANDOM)
    assert _fastscan.crc32(bytearray(RANDOM)) == crc
    assert _fastscan.crc32(memoryview(RANDOM)) == crc
    with mmap.mmap(-1, len(RANDOM)) as mapped:
        mapped[:] = RANDOM
        assert _fastscan.crc32(mapped) == crc
    assert _fastscan.crc32(b"") == 0 and _fastscan.crc32(b"", 1234) == 1234
    with pytest.raises(TypeError):
        _fastscan.crc32("text")
    with pytest.raises(TypeError):
        _fastscan.crc32()
    with pytest.raises(TypeError):
        _fastscan.crc32(b"x", 0, 0)
    with pytest.raises(TypeError):
        _fastscan.crc32(b"x", 1.5)
    with pytest.raises(BufferError):
        _fastscan.crc32(memoryview(RANDOM)[::2])


def test_scan_checks_long_payloads_with_that_crc():
    # 64 bytes and up go through the folding: every length around the 16- and 64-byte
    # steps, then one flipped bit anywhere in a 1 KB payload stops the scan there.
    payloads = [RANDOM[:n] for n in range(40, 300)]
    buf = encode_message_set(payloads)
    assert _fastscan.scan(buf, 0, 1 << 20) == (len(buf), len(payloads))
    good = encode_message(RANDOM[:1024])
    for index in range(10, len(good), 37):
        for bit in (0, 7):
            broken = bytearray(good)
            broken[index] ^= 1 << bit
            assert _fastscan.scan(good + bytes(broken), 0, 1 << 20) == (len(good), 1), (index, bit)
