"""Where messages start in a partition whose offsets are byte positions: the valid
messages at the head of a fetch answer with a damaged message in it, and the walk
over message lengths that finds the last message starting at or before an offset.

A consumer needs both to tell its two failures apart: an offset inside a message (a
user's mistake: name the nearest message start) and a damaged message at a message
start (damage in the log: deliver what comes before it, name its offset). The walk
starts at a segment base (a message start by construction), reads only the 4-byte
length of each message and jumps over the bodies of messages larger than a fetch,
through ``request`` (one request in, one answer out, as in ``mpbroker.clients.core.brokers``).
"""

import struct

from mpbroker.clients.core.errors import BrokerError, ClientError, CorruptMessageError, error_for
from mpbroker.codec import requests as rq
from mpbroker.codec import responses as rs
from mpbroker.codec.errors import InvalidMessageError, OffsetOutOfRangeError
from mpbroker.codec.message import LENGTH_SIZE, V0_HEADER_SIZE
from mpbroker.codec.message_set import TruncatedMessageError, decode_messages, validate_message_set

_LENGTH = struct.Struct(">i")
_NO_SIZE_LIMIT = 1 << 62


def valid_prefix(data: bytes, topic: str, partition: int, offset: int, cause: InvalidMessageError):
    """``((payloads, next_offsets, valid_bytes), CorruptMessageError)`` for a fetch answer
    at ``offset`` that ``decode_messages`` refused with ``cause``: the messages before
    the damaged one, and an error naming the damaged one's log offset."""
    validation = validate_message_set(data, _NO_SIZE_LIMIT)
    valid = validation.valid_bytes
    if validation.error is not None and not isinstance(validation.error, TruncatedMessageError):
        cause = validation.error  # its text names the position in ``data``: valid
    else:
        valid = 0  # the two checks disagree: hand out nothing, name the answer's start
    try:
        decoded = decode_messages(data[:valid], offset)
    except InvalidMessageError:
        decoded, valid = ([], [], 0), 0
    position = offset + valid
    text = str(cause)
    relative = f"at offset {valid} "
    if relative in text:
        text = text.replace(relative, f"at offset {position} of {topic}-{partition} ", 1)
    else:
        text = f"the message at offset {position} of {topic}-{partition} is damaged: {text}"
    return decoded, CorruptMessageError(text, topic, partition, position)


WALK_LIMIT_BYTES = 256 << 20  # about half a second of fetches here; a 1 GiB segment would take 2 s


class WalkTooLongError(ClientError):
    """The message start nearest an offset lies more than ``WALK_LIMIT_BYTES`` after the
    segment's base: not looked for (the caller reports what it knew without it)."""


def walk_to(request, topic: str, partition: int, start: int, offset: int, chunk: int,
            limit: int = WALK_LIMIT_BYTES) -> int:
    """The start of the last message that begins at or before ``offset``, walking the
    message lengths from ``start`` (a message start at or before ``offset``) with
    fetches of ``chunk`` bytes. CorruptMessageError when a length on the way cannot be
    one (too small, or pointing past the log end); WalkTooLongError past ``limit`` bytes
    of walking (it runs on error paths, some on a fetcher thread: bounded)."""
    position = start
    while position < offset:
        if position - start > limit:
            raise WalkTooLongError(f"{topic}-{partition}: the message start nearest offset {offset} was not looked "
                                   f"for beyond {limit} bytes from the segment's base {start}")
        error, data = rs.split_error(request(rq.encode_fetch(topic, partition, position, chunk)))
        if error:
            exc = error_for(error, f"fetch {topic}-{partition} at offset {position}", BrokerError)
            if isinstance(exc, OffsetOutOfRangeError):
                raise CorruptMessageError(f"walking {topic}-{partition} towards offset {offset}: a message "
                                          f"length points past the log end, to {position}", topic, partition, position)
            raise exc
        if len(data) < LENGTH_SIZE:
            return position  # the log ends here, at or before ``offset``
        end = len(data)
        index = 0
        while index + LENGTH_SIZE <= end:
            (length,) = _LENGTH.unpack_from(data, index)
            if length < V0_HEADER_SIZE:
                raise CorruptMessageError(f"the message at offset {position} of {topic}-{partition} has "
                                          f"length {length}, below the minimum", topic, partition, position)
            following = position + LENGTH_SIZE + length
            if following > offset:
                return position
            position = following
            index += LENGTH_SIZE + length  # past ``end``: the next fetch starts after this message
    return position
