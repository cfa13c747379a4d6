"""Records carried by the rings between the acceptor and a worker. Sans-IO.

Acceptor -> worker:
- ``KIND_PRODUCE_BATCH``: many produce requests in one record (one ring write, one
  wake-up): a run of entries ``[entry header][topic][message-set bytes]``, the header
  holding the entry's length, request id, partition, topic length and mode
  (fire-and-forget, or acknowledged after append or after flush);
- ``KIND_PRODUCE``: one fragment of a produce whose set is larger than a ring record:
  ``[fragment header][topic][bytes]``, where the header also gives the set's total size
  and this fragment's offset in it; all fragments share the request id;
- ``KIND_REPLICA_POSITIONS``: a follower's fetch reached the leader: its broker id and,
  per partition, the leader epoch it fetched under and its log end (the fetch offset);
- ``KIND_DELETE_TOPIC``: delete every log of this topic the worker has (the body is the
  topic's name); it comes after every produce the acceptor routed before it.

Worker -> acceptor:
- ``KIND_ACK``: the answer to an acknowledged produce (error, offsets);
- ``KIND_CLOSE``: a fire-and-forget produce failed: close its connection (0.7 style);
- ``KIND_DONE``: every fire-and-forget produce up to this request id is handled;
- ``KIND_WAKE``: the log end or high watermark of these replicated partitions moved:
  answer the followers' fetches that wait for them;
- ``KIND_TOPIC_DELETED``: the worker has no log of this topic left (the body is its name).
ACK and CLOSE may carry a short reason text for the acceptor's log.
"""

import struct
from enum import IntEnum
from typing import NamedTuple

KIND_PRODUCE = 1
KIND_ACK = 2
KIND_CLOSE = 3
KIND_DONE = 4
KIND_PRODUCE_BATCH = 5
KIND_REPLICA_POSITIONS = 6
KIND_WAKE = 7
KIND_DELETE_TOPIC = 8
KIND_TOPIC_DELETED = 9


class Mode(IntEnum):
    FIRE_AND_FORGET = 0
    ACK_APPEND = 1
    ACK_FLUSH = 2
    ACK_REPLICATED = 3  # durability 2: once every in-sync replica has the set


# A flag beside the mode in an entry's mode byte: the bytes are modern record batches
# (magic 2) for a partition log in the record-batch format, not a 0.7 message set.
RECORD_BATCHES = 0x10
MODE_MASK = 0x0F
# An ACK's error is a 0.7 code (``codec.errors.ErrorCode``), or, for a refused record
# batch, the modern protocol's code plus this (the two numberings overlap).
KAFKA_ERROR_BASE = 1000


# bytes after this header (topic + set), request id, partition, topic length, mode
ENTRY_HEADER = struct.Struct("<IQiHB")
# request id, partition, topic length, mode, total set size, fragment offset
FRAGMENT_HEADER = struct.Struct("<QiHBxQQ")
# request id, error, partition, offset, next offset
ACK = struct.Struct("<Qhxxiqq")
REQUEST_ID = struct.Struct("<Q")
_POSITIONS_HEAD = struct.Struct("<iH")  # follower id, count
_POSITION = struct.Struct("<iiqH")  # partition, leader epoch, offset, topic length
_WAKE_HEAD = struct.Struct("<H")  # count
_WAKE = struct.Struct("<iH")  # partition, topic length
POSITIONS_HEAD_BYTES = _POSITIONS_HEAD.size
WAKE_HEAD_BYTES = _WAKE_HEAD.size
MAX_POSITIONS = MAX_WAKES = 65535  # per record (the count is a u16)


def position_bytes(topic_bytes: bytes) -> int:
    """What one position adds to a KIND_REPLICA_POSITIONS record."""
    return _POSITION.size + len(topic_bytes)


def wake_bytes(topic: str) -> int:
    """What one partition adds to a KIND_WAKE record."""
    return _WAKE.size + len(topic)


class ProduceFragment(NamedTuple):
    request_id: int
    partition: int
    mode: int
    total_size: int
    fragment_offset: int
    topic: str
    data: memoryview


def entry_parts(request_id: int, topic_bytes: bytes, partition: int, mode: int, message_set) -> tuple:
    """The parts of one batch entry (to be concatenated into a KIND_PRODUCE_BATCH body)."""
    header = ENTRY_HEADER.pack(len(topic_bytes) + len(message_set), request_id, partition, len(topic_bytes), mode)
    return header, topic_bytes, message_set


def entry_bytes(topic_bytes: bytes, message_set) -> int:
    return ENTRY_HEADER.size + len(topic_bytes) + len(message_set)


def decode_produce_batch(body: memoryview) -> list:
    """``[(request_id, partition, mode, topic_bytes, message-set view), ...]``."""
    entries = []
    unpack = ENTRY_HEADER.unpack_from
    header_size = ENTRY_HEADER.size
    position = 0
    end = len(body)
    while position < end:
        length, request_id, partition, topic_length, mode = unpack(body, position)
        start = position + header_size
        topic_end = start + topic_length
        position = start + length
        entries.append((request_id, partition, mode, bytes(body[start:topic_end]), body[topic_end:position]))
    return entries


def produce_fragments(request_id: int, topic_bytes: bytes, partition: int, mode: int, message_set,
                      max_body: int):
    """The record bodies (as part tuples for ``Ring.try_write``) of one large produce."""
    view = memoryview(message_set)
    total = len(view)
    room = max_body - FRAGMENT_HEADER.size - len(topic_bytes)
    if room <= 0:
        raise ValueError("ring records are too small for a produce header")
    offset = 0
    while True:
        chunk = view[offset:offset + room]
        header = FRAGMENT_HEADER.pack(request_id, partition, len(topic_bytes), mode, total, offset)
        yield header, topic_bytes, chunk
        offset += len(chunk)
        if offset >= total:
            return


def decode_fragment(body: memoryview) -> ProduceFragment:
    request_id, partition, topic_length, mode, total, offset = FRAGMENT_HEADER.unpack_from(body, 0)
    start = FRAGMENT_HEADER.size
    topic = bytes(body[start:start + topic_length]).decode("ascii")
    return ProduceFragment(request_id, partition, mode, total, offset, topic, body[start + topic_length:])


def encode_ack(request_id: int, error: int, partition: int, offset: int, next_offset: int,
               reason: str = "") -> tuple:
    return ACK.pack(request_id, error, partition, offset, next_offset), reason.encode("utf-8", "replace")[:512]


def decode_ack(body: memoryview) -> tuple:
    """``(request_id, error, partition, offset, next_offset, reason)``."""
    fields = ACK.unpack_from(body, 0)
    return (*fields, bytes(body[ACK.size:]).decode("utf-8", "replace"))


def encode_close(request_id: int, reason: str) -> tuple:
    return REQUEST_ID.pack(request_id), reason.encode("utf-8", "replace")[:512]


def decode_close(body: memoryview) -> tuple:
    return REQUEST_ID.unpack_from(body, 0)[0], bytes(body[REQUEST_ID.size:]).decode("utf-8", "replace")


def encode_done(request_id: int) -> tuple:
    return (REQUEST_ID.pack(request_id),)


def decode_done(body: memoryview) -> int:
    return REQUEST_ID.unpack_from(body, 0)[0]


def encode_replica_positions(follower: int, positions) -> tuple:
    """``positions``: ``(topic bytes, partition, leader epoch, offset)`` each (at most 65535)."""
    parts = [_POSITIONS_HEAD.pack(follower, len(positions))]
    for topic_bytes, partition, leader_epoch, offset in positions:
        parts.append(_POSITION.pack(partition, leader_epoch, offset, len(topic_bytes)))
        parts.append(topic_bytes)
    return (b"".join(parts),)


def decode_replica_positions(body: memoryview) -> tuple:
    """``(follower, [(topic, partition, leader epoch, offset), ...])``."""
    follower, count = _POSITIONS_HEAD.unpack_from(body, 0)
    at = _POSITIONS_HEAD.size
    positions = []
    for _ in range(count):
        partition, leader_epoch, offset, length = _POSITION.unpack_from(body, at)
        at += _POSITION.size
        positions.append((bytes(body[at:at + length]).decode("ascii"), partition, leader_epoch, offset))
        at += length
    return follower, positions


def encode_wake(partitions) -> tuple:
    """``partitions``: ``(topic, partition)`` each (at most 65535)."""
    parts = [_WAKE_HEAD.pack(len(partitions))]
    for topic, partition in partitions:
        raw = topic.encode("ascii")
        parts.append(_WAKE.pack(partition, len(raw)))
        parts.append(raw)
    return (b"".join(parts),)


def decode_wake(body: memoryview) -> list:
    (count,) = _WAKE_HEAD.unpack_from(body, 0)
    at = _WAKE_HEAD.size
    partitions = []
    for _ in range(count):
        partition, length = _WAKE.unpack_from(body, at)
        at += _WAKE.size
        partitions.append((bytes(body[at:at + length]).decode("ascii"), partition))
        at += length
    return partitions


def encode_topic(topic: str) -> tuple:
    """The body of KIND_DELETE_TOPIC and KIND_TOPIC_DELETED."""
    return (topic.encode("ascii"),)


def decode_topic(body: memoryview) -> str:
    return bytes(body).decode("ascii")
