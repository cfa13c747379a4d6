"""Response frames: ``[int32 size][int16 error][payload]``, where ``size`` counts the
error code. Encoders for the broker, decoders for the clients. Sans-IO.

- FETCH: payload = message-set bytes (sent from the segment file; only the 6-byte
  header is built here).
- MULTIFETCH: ``[size][0]`` then, per fetch in request order, ``[size][error][bytes]``.
- OFFSETS: ``[int32 n][n x int64]``.
- PRODUCE_ACKED (mpbroker): ``[int32 partition][int64 offset][int64 next_offset]``.
- REPLICA_FETCH (mpbroker): ``[size][0]`` then, per part in request order,
  ``[int32 size][int16 error][int64 high watermark][int64 log start][int64 log end]
  [int32 epoch][bytes]``: ``epoch`` is the leader epoch the bytes were written under
  (-1: before any), and the bytes never run past that epoch's end.
- LEADER_EPOCH_END (mpbroker): ``[int32 epoch][int64 end offset]`` (-1, -1: the leader
  has no epoch that old).
"""

import struct
from typing import NamedTuple

from mpbroker.codec.framing import SIZE, MalformedRequestError

ERROR_HEADER = struct.Struct(">ih")  # size, error: the first 6 bytes of every response
ERROR_HEADER_BYTES = ERROR_HEADER.size
_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_ACK = struct.Struct(">iqq")
REPLICA_PART_HEADER = struct.Struct(">ihqqqi")  # size, error, high watermark, log start, log end, epoch
_REPLICA_PART_FIELDS = REPLICA_PART_HEADER.size - 4  # what a part's size counts besides its bytes
_EPOCH_END = struct.Struct(">iq")


class MalformedResponseError(MalformedRequestError):
    """Bytes from a broker that are not a well-formed response."""


class ReplicaFetchPartAnswer(NamedTuple):
    error: int
    high_watermark: int
    log_start: int
    log_end: int
    epoch: int
    data: memoryview


class ProduceAck(NamedTuple):
    error: int
    partition: int
    offset: int  # where the set was written
    next_offset: int  # the log end just after it


# --- encoders (broker) ----------------------------------------------------------


def response_header(error: int, payload_bytes: int) -> bytes:
    """The 6 bytes before a payload of ``payload_bytes`` (e.g. a fetched file range)."""
    return ERROR_HEADER.pack(2 + payload_bytes, error)


def error_response(error: int) -> bytes:
    return ERROR_HEADER.pack(2, error)


def offsets_response(error: int, offsets) -> bytes:
    offsets = list(offsets)
    body = _INT32.pack(len(offsets)) + struct.pack(f">{len(offsets)}q", *offsets)
    return ERROR_HEADER.pack(2 + len(body), error) + body


def produce_ack_response(error: int, partition: int, offset: int, next_offset: int) -> bytes:
    return ERROR_HEADER.pack(2 + _ACK.size, error) + _ACK.pack(partition, offset, next_offset)


def multifetch_header(part_lengths) -> bytes:
    """The outer header of a MULTIFETCH answer whose parts carry ``part_lengths`` bytes
    of message sets; each part then starts with ``response_header(error, length)``."""
    total = sum(ERROR_HEADER_BYTES + length for length in part_lengths)
    return ERROR_HEADER.pack(2 + total, 0)


def replica_part_header(error: int, high_watermark: int, log_start: int, log_end: int, epoch: int,
                        payload_bytes: int) -> bytes:
    """The header of one REPLICA_FETCH part carrying ``payload_bytes`` of log."""
    return REPLICA_PART_HEADER.pack(_REPLICA_PART_FIELDS + payload_bytes, error, high_watermark, log_start,
                                    log_end, epoch)


def replica_fetch_header(part_lengths) -> bytes:
    """The outer header of a REPLICA_FETCH answer whose parts carry ``part_lengths`` bytes."""
    total = sum(REPLICA_PART_HEADER.size + length for length in part_lengths)
    return ERROR_HEADER.pack(2 + total, 0)


def leader_epoch_end_response(error: int, epoch: int, end_offset: int) -> bytes:
    return ERROR_HEADER.pack(2 + _EPOCH_END.size, error) + _EPOCH_END.pack(epoch, end_offset)


# --- decoders (clients) ---------------------------------------------------------


def split_error(frame) -> tuple:
    """``(error, payload view)`` of a response frame body (after its size)."""
    view = memoryview(frame)
    if len(view) < 2:
        raise MalformedResponseError(f"response of {len(view)} bytes has no error code")
    (error,) = _INT16.unpack_from(view, 0)
    return error, view[2:]


def decode_multifetch(frame) -> list:
    """``[(error, message-set view), ...]`` in request order."""
    error, view = split_error(frame)
    if error:
        raise MalformedResponseError(f"multifetch answer carries top-level error {error}")
    parts = []
    pos = 0
    while pos < len(view):
        if pos + ERROR_HEADER_BYTES > len(view):
            raise MalformedResponseError("multifetch part header runs past the end")
        size, part_error = ERROR_HEADER.unpack_from(view, pos)
        end = pos + SIZE.size + size
        if size < 2 or end > len(view):
            raise MalformedResponseError(f"multifetch part of size {size} runs past the end")
        parts.append((part_error, view[pos + ERROR_HEADER_BYTES:end]))
        pos = end
    return parts


def decode_offsets(frame) -> tuple:
    """``(error, [offsets...])``."""
    error, view = split_error(frame)
    if error:
        return error, []
    if len(view) < 4:
        raise MalformedResponseError("offsets answer without a count")
    (count,) = _INT32.unpack_from(view, 0)
    if count < 0 or len(view) != 4 + 8 * count:
        raise MalformedResponseError(f"offsets answer of {len(view)} bytes does not hold {count} offsets")
    return error, list(struct.unpack_from(f">{count}q", view, 4))


def decode_produce_ack(frame) -> ProduceAck:
    error, view = split_error(frame)
    if len(view) != _ACK.size:
        if error and not len(view):
            return ProduceAck(error, -1, -1, -1)
        raise MalformedResponseError(f"produce ack of {len(view)} bytes; expected {_ACK.size}")
    return ProduceAck(error, *_ACK.unpack_from(view, 0))


def decode_replica_fetch(frame) -> list:
    """``[ReplicaFetchPartAnswer, ...]`` in request order."""
    error, view = split_error(frame)
    if error:
        raise MalformedResponseError(f"replica fetch answer carries top-level error {error}")
    parts = []
    pos = 0
    while pos < len(view):
        if pos + REPLICA_PART_HEADER.size > len(view):
            raise MalformedResponseError("replica fetch part header runs past the end")
        size, part_error, high_watermark, log_start, log_end, epoch = REPLICA_PART_HEADER.unpack_from(view, pos)
        end = pos + SIZE.size + size
        if size < _REPLICA_PART_FIELDS or end > len(view):
            raise MalformedResponseError(f"replica fetch part of size {size} runs past the end")
        parts.append(ReplicaFetchPartAnswer(part_error, high_watermark, log_start, log_end, epoch,
                                            view[pos + REPLICA_PART_HEADER.size:end]))
        pos = end
    return parts


def decode_leader_epoch_end(frame) -> tuple:
    """``(error, epoch, end offset)``."""
    error, view = split_error(frame)
    if len(view) != _EPOCH_END.size:
        if error and not len(view):
            return error, -1, -1
        raise MalformedResponseError(f"leader epoch end answer of {len(view)} bytes; expected {_EPOCH_END.size}")
    return (error, *_EPOCH_END.unpack_from(view, 0))
