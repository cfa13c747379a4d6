"""The message and message-set codec against PROTOCOL.md: layouts, CRCs, validation
(including deep validation of nested compressed sets) and consumer offsets."""

import struct
import sys
import zlib

import crcmod
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mpbroker.codec import compression
from mpbroker.codec.errors import InvalidMessageError, MessageSizeTooLargeError
from mpbroker.codec.message import (
    CODEC_GZIP,
    CODEC_NONE,
    CODEC_SNAPPY,
    codec_from_name,
    encode_message,
    encode_message_set,
    encode_message_v0,
)
from mpbroker.codec.message_set import (
    TruncatedMessageError,
    iter_messages,
    validate_message_set,
)

payloads_strategy = st.lists(st.binary(max_size=300), min_size=1, max_size=30)


def wrap(payloads_or_set, codec):
    inner = payloads_or_set if isinstance(payloads_or_set, bytes) else encode_message_set(payloads_or_set)
    return encode_message(compression.compress(codec, inner), codec)


def test_magic_1_layout_is_byte_exact():
    payload = b"hello"
    encoded = encode_message(payload)
    crc = zlib.crc32(payload)
    assert encoded == struct.pack(">iBBI", 1 + 1 + 4 + 5, 1, 0, crc) + payload


def test_magic_0_layout_is_byte_exact():
    encoded = encode_message_v0(b"abc")
    assert encoded == struct.pack(">iBI", 1 + 4 + 3, 0, zlib.crc32(b"abc")) + b"abc"


def test_crc_matches_crcmod_reference_and_its_c_extension_is_used():
    crcmod_module = sys.modules["crcmod.crcmod"]
    assert crcmod_module._usingExtension, "crcmod runs without its C extension"
    reference = crcmod.predefined.mkCrcFun("crc-32")
    for payload in (b"", b"a", b"x" * 1000, bytes(range(256))):
        assert struct.unpack(">I", encode_message(payload)[6:10])[0] == reference(payload)


def test_codec_names():
    assert codec_from_name("gzip") == CODEC_GZIP
    assert codec_from_name("SNAPPY") == CODEC_SNAPPY
    assert codec_from_name("0") == CODEC_NONE
    with pytest.raises(ValueError, match="unknown compression codec"):
        codec_from_name("lz4")


@given(payloads_strategy)
def test_round_trip_uncompressed(payloads):
    message_set = encode_message_set(payloads)
    result = validate_message_set(message_set)
    assert result.complete and result.valid_bytes == len(message_set)
    assert result.messages == len(payloads)
    decoded = list(iter_messages(message_set, 1000))
    assert [payload for _, payload in decoded] == payloads
    # Each message reports the offset just after itself.
    expected, position = [], 1000
    for payload in payloads:
        position += 10 + len(payload)
        expected.append(position)
    assert [offset for offset, _ in decoded] == expected


@given(payloads_strategy, st.sampled_from([CODEC_GZIP, CODEC_SNAPPY]))
def test_round_trip_compressed_offsets_never_land_inside_a_wrapper(payloads, codec):
    plain = encode_message(b"before")
    wrapper = wrap(payloads, codec)
    message_set = plain + wrapper
    result = validate_message_set(message_set)
    assert result.complete and result.messages == 2
    decoded = list(iter_messages(message_set, 0))
    assert decoded[0] == (len(plain), b"before")
    inner = decoded[1:]
    assert [payload for _, payload in inner] == payloads
    assert [offset for offset, _ in inner[:-1]] == [len(plain)] * (len(payloads) - 1)
    assert inner[-1][0] == len(message_set)


def test_nested_compression_round_trip():
    innermost = wrap([b"a", b"b"], CODEC_SNAPPY)
    middle = wrap(encode_message(b"c") + innermost, CODEC_GZIP)
    outer = wrap(middle + encode_message(b"d"), CODEC_SNAPPY)
    assert validate_message_set(outer).complete
    assert [payload for _, payload in iter_messages(outer)] == [b"c", b"a", b"b", b"d"]


def test_magic_0_messages_are_read():
    message_set = encode_message_v0(b"old") + encode_message(b"new")
    result = validate_message_set(message_set)
    assert result.complete and result.messages == 2
    assert [payload for _, payload in iter_messages(message_set)] == [b"old", b"new"]


@settings(max_examples=200)
@given(payloads_strategy, st.data())
def test_any_flipped_byte_is_caught_at_or_before_its_message(payloads, data):
    message_set = bytearray(encode_message_set(payloads))
    index = data.draw(st.integers(0, len(message_set) - 1))
    message_set[index] ^= data.draw(st.integers(1, 255))
    boundaries = [0]
    for payload in payloads:
        boundaries.append(boundaries[-1] + 10 + len(payload))
    damaged = max(b for b in boundaries if b <= index)
    result = validate_message_set(bytes(message_set))
    if index == damaged + 5 and message_set[index] & 3 == 0:
        # Attribute bits above the codec bits are reserved, not covered by the CRC and
        # ignored (as in 0.7): the message still reads as the same payload.
        assert result.complete
        assert [p for _, p in iter_messages(bytes(message_set))] == payloads
        return
    # Everything before the damaged message is kept; the damaged one never passes.
    assert result.valid_bytes <= damaged
    assert not result.complete
    assert result.valid_bytes in boundaries


@given(payloads_strategy, st.data())
def test_truncated_set_keeps_whole_messages(payloads, data):
    message_set = encode_message_set(payloads)
    cut = data.draw(st.integers(0, len(message_set) - 1))
    result = validate_message_set(message_set[:cut])
    boundaries = [0]
    for payload in payloads:
        boundaries.append(boundaries[-1] + 10 + len(payload))
    assert result.valid_bytes == max(b for b in boundaries if b <= cut)
    if cut not in boundaries:
        assert isinstance(result.error, TruncatedMessageError)
    # A consumer drops the partial tail silently.
    assert len(list(iter_messages(message_set[:cut]))) == boundaries.index(result.valid_bytes)


def test_garbage_after_valid_messages():
    good = encode_message_set([b"one", b"two"])
    result = validate_message_set(good + b"\xff\xff\xff\xff garbage")
    assert result.valid_bytes == len(good) and result.messages == 2
    assert isinstance(result.error, InvalidMessageError)


@pytest.mark.parametrize(
    "bad, reason",
    [
        (struct.pack(">i", 3) + b"abc", "below the minimum"),
        (struct.pack(">i", -7) + b"\x01" * 20, "below the minimum"),
        (struct.pack(">iBBI", 7, 9, 0, 0) + b"x", "unknown magic"),
        (struct.pack(">iBBI", 7, 1, 0, 12345) + b"x", "CRC"),
        (struct.pack(">iBBI", 7, 1, 3, zlib.crc32(b"x")) + b"x", "codec"),
        (struct.pack(">iBB", 5, 1, 0) + b"\x00" * 3, "magic-1 message"),
    ],
)
def test_invalid_messages_are_named(bad, reason):
    result = validate_message_set(encode_message(b"ok") + bad)
    assert result.valid_bytes == len(encode_message(b"ok"))
    assert reason in str(result.error)
    assert isinstance(result.error, InvalidMessageError)


def test_oversized_message_is_refused_with_its_own_error():
    big = encode_message(b"x" * 101)
    result = validate_message_set(encode_message(b"small") + big, max_message_size=100)
    assert isinstance(result.error, MessageSizeTooLargeError)
    assert result.messages == 1
    assert validate_message_set(encode_message(b"x" * 100), max_message_size=100).complete


def test_max_message_size_applies_to_top_level_payload_only():
    inner_big = [b"y" * 5000] * 4  # compresses far below 1000 bytes
    wrapper = wrap(inner_big, CODEC_GZIP)
    assert validate_message_set(wrapper, max_message_size=1000).complete


@pytest.mark.parametrize("codec", [CODEC_GZIP, CODEC_SNAPPY])
def test_corrupt_inner_set_fails_deep_validation_only(codec):
    inner = bytearray(encode_message_set([b"alpha", b"beta"]))
    inner[-1] ^= 0xFF  # breaks the CRC of the second inner message
    wrapper = wrap(bytes(inner), codec)
    deep = validate_message_set(wrapper)
    assert not deep.complete and "holds a bad message set" in str(deep.error)
    assert validate_message_set(wrapper, deep=False).complete
    with pytest.raises(InvalidMessageError):
        list(iter_messages(wrapper))


@pytest.mark.parametrize("codec", [CODEC_GZIP, CODEC_SNAPPY])
def test_truncated_inner_set_is_corruption(codec):
    inner = encode_message_set([b"alpha", b"beta"])[:-2]
    result = validate_message_set(wrap(inner, codec))
    assert type(result.error) is InvalidMessageError


@pytest.mark.parametrize("codec", [CODEC_GZIP, CODEC_SNAPPY])
def test_undecodable_compressed_payload(codec):
    garbage = b"\x00not compressed at all\xff" * 3
    result = validate_message_set(encode_message(garbage, codec))
    assert isinstance(result.error, InvalidMessageError)


def test_empty_compressed_set_is_refused():
    result = validate_message_set(wrap(b"", CODEC_GZIP))
    assert "holds no messages" in str(result.error)


@pytest.mark.parametrize("codec", [CODEC_GZIP, CODEC_SNAPPY])
def test_decompression_bomb_is_bounded(codec):
    bomb = wrap([b"\x00" * (4 << 20)] * 4, codec)  # 16 MiB of zeros in a small message
    assert len(bomb) < 1_000_000
    result = validate_message_set(bomb, inflate_limit=1 << 20)
    assert not result.complete and "inflates past" in str(result.error)
    assert validate_message_set(bomb, inflate_limit=32 << 20).complete


def test_inflate_budget_is_shared_by_all_wrappers_of_a_request():
    one = wrap([b"z" * 600_000], CODEC_GZIP)
    assert validate_message_set(one, inflate_limit=1_000_000).complete
    result = validate_message_set(one + one, inflate_limit=1_000_000)
    assert result.messages == 1 and "inflates past" in str(result.error)


def test_nesting_depth_is_bounded():
    message_set = encode_message_set([b"core"])
    for _ in range(10):
        message_set = wrap(message_set, CODEC_GZIP)
    assert "nested too deeply" in str(validate_message_set(message_set).error)
    assert validate_message_set(message_set, max_depth=10).complete


def test_validation_accepts_memoryview_and_bytearray():
    message_set = encode_message_set([b"a", b"bb", b"ccc"])
    for buffer in (memoryview(message_set), bytearray(message_set)):
        assert validate_message_set(buffer).valid_bytes == len(message_set)
