"""Message sets: validation of every message, and iteration with consumer offsets.

A message set is the plain concatenation of messages. Validation walks it once,
checking each message's length, magic, codec bits and CRC, and inflating compressed
wrappers to check the messages inside (``deep``), without re-encoding anything. It
reports how many leading bytes are valid, which is all the producer path (accept or
refuse) and recovery (truncate there) need. Sans-IO.

The common case (an uncompressed magic-1 message that fits) is checked inline in
one tight loop; anything else drops to an exact, slower check of that one message.

That loop is the floor of the Python version: ~350 ns per 200-byte message, half of
it the interpreter's (a header unpack, a slice, a ``crc32`` call, the compares)
whatever the size. So it also exists in C, ``_fastscan`` (_fastscan.c,
built when the install finds a compiler): ``scan`` walks the plain messages from a
position and says where it stopped, ``decode`` also collects their payloads. It
never says why it stopped and looks at nothing else: the message there goes through
the same exact Python check (``_check_message``: magic 0, compressed wrappers,
torn tails, bad CRCs, every error text), then the scan resumes after it. The answers
are the pure-Python ones by construction (tests/codec/test_fastscan.py compares
them). Without the extension, or with ``MPBROKER_PURE_PYTHON=1`` in the
environment, the Python loop runs.
"""

import struct
import zlib
from typing import NamedTuple

from mpbroker.codec.compression import decompress
from mpbroker.codec.errors import InvalidMessageError, MessageSizeTooLargeError, MPBrokerError
from mpbroker.codec.message import (
    CODEC_MASK,
    CODEC_NONE,
    LENGTH_SIZE,
    MAGIC_V0,
    MAGIC_V1,
    PURE_PYTHON,
    V0_HEADER_SIZE,
    V0_OVERHEAD,
    V1_HEADER_SIZE,
    V1_OVERHEAD,
)

DEFAULT_MAX_MESSAGE_SIZE = 1_000_000  # max.message.size
DEFAULT_INFLATE_LIMIT = 104_857_600  # bytes a request's compressed messages may inflate to
MAX_NESTING = 8  # compressed wrappers inside compressed wrappers

# length, (magic << 8 | attributes), crc: the 10 bytes before a magic-1 payload.
_FAST_HEADER = struct.Struct(">iHI")
_FAST_MAGIC_ATTRIBUTES = MAGIC_V1 << 8 | CODEC_NONE
_INT32 = struct.Struct(">i")
_UINT32 = struct.Struct(">I")
_UNLIMITED = 1 << 62
_INT32_MAX = 0x7FFFFFFF

try:
    from mpbroker.codec import _fastscan
except ImportError:  # built without a compiler: the Python loop
    _fastscan = None
if PURE_PYTHON:
    _fastscan = None
# The C loops, or None for the Python ones; tests set these to None to compare.
_scan = _fastscan.scan if _fastscan is not None else None
_decode = _fastscan.decode if _fastscan is not None else None


class TruncatedMessageError(InvalidMessageError):
    """The set ends inside a message: a torn write, or the tail of a fetch answer."""


class Validation(NamedTuple):
    valid_bytes: int  # length of the leading run of valid messages
    messages: int  # top-level messages in that run
    error: MPBrokerError | None  # why the walk stopped short of the end, if it did

    @property
    def complete(self) -> bool:
        return self.error is None


def validate_message_set(
    buf,
    max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
    *,
    deep: bool = True,
    inflate_limit: int = DEFAULT_INFLATE_LIMIT,
    max_depth: int = MAX_NESTING,
) -> Validation:
    """Check every message of ``buf``; see the module docstring.

    ``max_message_size`` bounds each top-level payload (PROTOCOL.md); ``inflate_limit``
    bounds the bytes all compressed wrappers of ``buf`` may inflate to, together.
    """
    return _validate(buf, max_message_size, deep, [inflate_limit], max_depth)


def count_plain_messages(buf, max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE) -> int | None:
    """How many messages ``buf`` holds, if every one is a plain message (uncompressed,
    magic 1) that ``validate_message_set`` passes; else None, and that says what else
    is there. One C call: the short way for a produce of plain messages (None without
    the C loop)."""
    if _scan is None:
        return None
    pos, count = _scan(buf, 0, min(max(max_message_size + V1_HEADER_SIZE, 0), _INT32_MAX))
    return count if pos == len(buf) else None


def _validate(buf, max_payload: int, deep: bool, budget: list, depth: int) -> Validation:
    scan = _scan
    if scan is not None:
        return _validate_scanned(scan, buf, max_payload, deep, budget, depth)
    unpack = _FAST_HEADER.unpack_from
    crc32 = zlib.crc32
    end = len(buf)
    max_length = max_payload + V1_HEADER_SIZE
    pos = 0
    count = 0
    while pos < end:
        try:
            length, magic_attributes, crc = unpack(buf, pos)
        except struct.error:
            length = -1  # fewer than 10 bytes left: the exact check says why
            magic_attributes = crc = None
        following = pos + LENGTH_SIZE + length
        if (
            magic_attributes == _FAST_MAGIC_ATTRIBUTES
            and V1_HEADER_SIZE <= length <= max_length
            and following <= end
            and crc32(buf[pos + V1_OVERHEAD:following]) == crc
        ):
            pos = following
            count += 1
            continue
        following, error = _check_message(buf, pos, end, max_payload, deep, budget, depth)
        if error is not None:
            return Validation(pos, count, error)
        pos = following
        count += 1
    return Validation(pos, count, None)


def _validate_scanned(scan, buf, max_payload, deep, budget, depth) -> Validation:
    """``_validate`` with the plain messages walked in C, and each other one checked here."""
    end = len(buf)
    # Lengths are int32: any bound past that is no bound, one below 6 passes nothing.
    max_length = min(max(max_payload + V1_HEADER_SIZE, 0), _INT32_MAX)
    pos, count = scan(buf, 0, max_length)
    while pos < end:
        following, error = _check_message(buf, pos, end, max_payload, deep, budget, depth)
        if error is not None:
            return Validation(pos, count, error)
        pos, passed = scan(buf, following, max_length)
        count += passed + 1
    return Validation(pos, count, None)


def _check_message(buf, pos, end, max_payload, deep, budget, depth):
    """Exact check of the message at ``pos``: (position after it, None) or (pos, error)."""
    if end - pos < LENGTH_SIZE:
        return pos, TruncatedMessageError(f"{end - pos} bytes at offset {pos} are too few for a length")
    (length,) = _INT32.unpack_from(buf, pos)
    if length < V0_HEADER_SIZE:
        return pos, InvalidMessageError(f"message at offset {pos} has length {length}, below the minimum")
    following = pos + LENGTH_SIZE + length
    if following > end:
        return pos, TruncatedMessageError(
            f"message at offset {pos} (length {length}) runs past the end of the set ({end} bytes)"
        )
    magic = buf[pos + LENGTH_SIZE]
    if magic == MAGIC_V1:
        if length < V1_HEADER_SIZE:
            return pos, InvalidMessageError(f"magic-1 message at offset {pos} has length {length}")
        attributes = buf[pos + LENGTH_SIZE + 1]
        (crc,) = _UINT32.unpack_from(buf, pos + LENGTH_SIZE + 2)
        payload_start = pos + V1_OVERHEAD
    elif magic == MAGIC_V0:
        attributes = 0
        (crc,) = _UINT32.unpack_from(buf, pos + LENGTH_SIZE + 1)
        payload_start = pos + V0_OVERHEAD
    else:
        return pos, InvalidMessageError(f"message at offset {pos} has unknown magic {magic}")
    payload = buf[payload_start:following]
    if len(payload) > max_payload:
        return pos, MessageSizeTooLargeError(
            f"message at offset {pos} has a {len(payload)}-byte payload; max.message.size is {max_payload}"
        )
    if zlib.crc32(payload) != crc:
        return pos, InvalidMessageError(f"message at offset {pos} fails its CRC check")
    codec = attributes & CODEC_MASK
    if codec == CODEC_NONE or not deep:
        if codec == CODEC_MASK:
            return pos, InvalidMessageError(f"message at offset {pos} names unknown codec {codec}")
        return following, None
    if depth <= 0:
        return pos, InvalidMessageError(f"compressed message at offset {pos} is nested too deeply")
    try:
        inner = decompress(codec, payload, budget[0])
    except InvalidMessageError as exc:
        exc.args = (f"compressed message at offset {pos}: {exc}",)
        return pos, exc.with_traceback(None)  # its frames hold the request: let them go now
    budget[0] -= len(inner)
    result = _validate(inner, _UNLIMITED, deep, budget, depth - 1)
    if result.error is not None:
        cause = result.error
        error = type(cause)(f"compressed message at offset {pos} holds a bad message set: {cause}")
        if isinstance(cause, TruncatedMessageError):
            error = InvalidMessageError(error.args[0])  # inside a wrapper, a torn tail is corruption
        return pos, error
    if result.messages == 0:
        return pos, InvalidMessageError(f"compressed message at offset {pos} holds no messages")
    return following, None


def decode_messages(buf, base_offset: int = 0, *, inflate_limit: int = DEFAULT_INFLATE_LIMIT):
    """Every whole message of ``buf``, CRC-checked, in two parallel lists:
    ``(payloads, next_offsets, consumed_bytes)``.

    ``base_offset`` is the log offset of ``buf[0]``; ``next_offsets`` are the offsets a
    consumer reports after each message (PROTOCOL.md): inside a compressed wrapper all
    but the last report the wrapper's start and the last its end, so a commit never
    lands inside a wrapper. A partial message at the end is left out (``consumed_bytes``
    stops before it); a corrupt message raises InvalidMessageError. Payloads are
    ``bytes`` (for a ``bytes`` buffer). Uncompressed magic-1 messages take an inline
    path: the C ``decode`` of ``_fastscan`` (``bytes`` buffers), or one header unpack,
    one slice and one ``crc32`` each.
    """
    unpack = _FAST_HEADER.unpack_from
    crc32 = zlib.crc32
    payloads = []
    next_offsets = []
    add_payload = payloads.append
    add_offset = next_offsets.append
    budget = [inflate_limit]
    end = len(buf)
    pos = 0
    # The C loop makes bytes payloads: it takes bytes only (slices of a memoryview or a
    # bytearray stay what the Python loop makes of them) and offsets that fit int64.
    decode = _decode if type(buf) is bytes and -_UNLIMITED <= base_offset <= _UNLIMITED else None
    while pos < end:
        if decode is not None:
            pos = decode(buf, pos, base_offset, payloads, next_offsets)  # the plain messages from pos on
            if pos == end:
                break
        try:
            length, magic_attributes, crc = unpack(buf, pos)
        except struct.error:
            length = -1
            magic_attributes = None
        following = pos + LENGTH_SIZE + length
        if magic_attributes == _FAST_MAGIC_ATTRIBUTES and length >= V1_HEADER_SIZE and following <= end:
            payload = buf[pos + V1_OVERHEAD:following]
            if crc32(payload) != crc:
                raise InvalidMessageError(f"message at offset {base_offset + pos} fails its CRC check")
            add_payload(payload)
            add_offset(base_offset + following)
            pos = following
            continue
        following, inner = _decode_one(buf, pos, end, budget, MAX_NESTING)
        if following is None:
            break
        start = base_offset + pos
        for payload in inner:
            add_payload(payload)
            add_offset(start)
        if inner:
            next_offsets[-1] = base_offset + following
        pos = following
    return payloads, next_offsets, pos


def iter_messages(buf, base_offset: int = 0, *, inflate_limit: int = DEFAULT_INFLATE_LIMIT):
    """Yield ``(next_offset, payload)`` for each whole message of ``buf``; see
    ``decode_messages`` for the offsets, the partial tail and corrupt messages."""
    payloads, next_offsets, _ = decode_messages(bytes(buf), base_offset, inflate_limit=inflate_limit)
    return zip(next_offsets, payloads)


def _decode_one(buf, pos, end, budget, depth):
    """(position after the message, its payloads flattened) or (None, None) at a partial tail."""
    following, error = _check_message(buf, pos, end, _UNLIMITED, False, budget, depth)
    if error is not None:
        if isinstance(error, TruncatedMessageError):
            return None, None
        raise error
    magic = buf[pos + LENGTH_SIZE]
    if magic == MAGIC_V0:
        return following, [bytes(buf[pos + V0_OVERHEAD:following])]
    payload = buf[pos + V1_OVERHEAD:following]
    codec = buf[pos + LENGTH_SIZE + 1] & CODEC_MASK
    if codec == CODEC_NONE:
        return following, [bytes(payload)]
    if depth <= 0:
        raise InvalidMessageError(f"compressed message at offset {pos} is nested too deeply")
    inner = decompress(codec, payload, budget[0])
    budget[0] -= len(inner)
    payloads = []
    inner_pos = 0
    inner_end = len(inner)
    while inner_pos < inner_end:
        inner_following, inner_payloads = _decode_one(inner, inner_pos, inner_end, budget, depth - 1)
        if inner_following is None:
            raise InvalidMessageError(f"compressed message at offset {pos} ends inside a message")
        payloads.extend(inner_payloads)
        inner_pos = inner_following
    return following, payloads
