"""Request bodies of the Kafka 0.7 protocol (and mpbroker's own, >= 100): typed
values, a decoder and encoders, and ``peek_produce``, the reading of a PRODUCE that the
acceptor's fast path routes without decoding it. Sans-IO.

A frame body is ``[int16 request_type][fields]``; strings are ``[int16 length][bytes]``.
Decoding is strict: a truncated body, a negative length or count, an unknown type or
trailing bytes raise MalformedRequestError. Topic names come back as ``str``
(decoded byte for byte, latin-1) and are *not* checked here: whether a name is
acceptable is the broker's rule (``mpbroker.codec.topic_names.check_topic``).
"""

import functools
import struct
from enum import IntEnum
from typing import NamedTuple

from mpbroker.codec.framing import SIZE, MalformedRequestError
from mpbroker.codec.message import CODEC_NONE, MAGIC_V1, V1_HEADER_SIZE, V1_OVERHEAD, crc32


class RequestType(IntEnum):
    PRODUCE = 0
    FETCH = 1
    MULTIFETCH = 2
    MULTIPRODUCE = 3
    OFFSETS = 4
    PRODUCE_ACKED = 100  # mpbroker: answered after the append (or the flush, or the replication)
    REPLICA_FETCH = 101  # mpbroker, between brokers: a follower fetches from its leader
    LEADER_EPOCH_END = 102  # mpbroker, between brokers: where did this leader epoch end in your log?


class Durability(IntEnum):
    APPEND = 0  # acknowledge once appended (in the page cache)
    FLUSH = 1  # acknowledge once flushed to disk
    REPLICATED = 2  # acknowledge once every in-sync replica has it (Kafka's acks=-1)


RANDOM_PARTITION = -1


class ProduceRequest(NamedTuple):
    topic: str
    partition: int
    message_set: memoryview


class FetchRequest(NamedTuple):
    topic: str
    partition: int
    offset: int
    max_size: int


class MultiFetchRequest(NamedTuple):
    fetches: list


class MultiProduceRequest(NamedTuple):
    produces: list


class OffsetsRequest(NamedTuple):
    topic: str
    partition: int
    time: int
    max_offsets: int


class ProduceAckedRequest(NamedTuple):
    durability: int
    topic: str
    partition: int
    message_set: memoryview


class ReplicaFetchPart(NamedTuple):
    topic: str
    partition: int
    leader_epoch: int  # the epoch the follower believes the leader has
    offset: int  # the follower's log end: where to read from, and its position for the leader
    max_size: int


class ReplicaFetchRequest(NamedTuple):
    """A follower's fetch: ``replica_id`` is its broker id; the leader may hold the
    answer up to ``max_wait_ms`` while no part has anything new."""

    replica_id: int
    max_wait_ms: int
    parts: list


class LeaderEpochEndRequest(NamedTuple):
    """A follower asks the leader (whose epoch it believes is ``leader_epoch``) where
    ``epoch`` ended in the leader's log: its truncation point (KIP-101/279)."""

    replica_id: int
    topic: str
    partition: int
    leader_epoch: int
    epoch: int


_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_FETCH_TAIL = struct.Struct(">iqi")  # partition, offset, max_size
_OFFSETS_TAIL = struct.Struct(">iqi")  # partition, time, max_offsets
_PRODUCE_TAIL = struct.Struct(">ii")  # partition, set_size
_REPLICA_FETCH_HEAD = struct.Struct(">ii")  # replica id, max wait ms
_REPLICA_FETCH_TAIL = struct.Struct(">iiqi")  # partition, leader epoch, offset, max size
_EPOCH_END_HEAD = struct.Struct(">i")  # replica id
_EPOCH_END_TAIL = struct.Struct(">iii")  # partition, leader epoch, asked epoch


class _Cursor:
    __slots__ = ("view", "pos")

    def __init__(self, view: memoryview, pos: int):
        self.view = view
        self.pos = pos

    def take(self, layout: struct.Struct) -> tuple:
        end = self.pos + layout.size
        if end > len(self.view):
            raise MalformedRequestError(f"request body ends after {len(self.view)} bytes, inside a field")
        values = layout.unpack_from(self.view, self.pos)
        self.pos = end
        return values

    def string(self) -> str:
        (length,) = self.take(_INT16)
        if length < 0:
            raise MalformedRequestError(f"string length {length} is negative (a null topic)")
        end = self.pos + length
        if end > len(self.view):
            raise MalformedRequestError(f"string of {length} bytes runs past the end of the request")
        text = bytes(self.view[self.pos:end]).decode("latin-1")
        self.pos = end
        return text

    def blob(self, length: int) -> memoryview:
        if length < 0:
            raise MalformedRequestError(f"message set size {length} is negative")
        end = self.pos + length
        if end > len(self.view):
            raise MalformedRequestError(
                f"message set of {length} bytes runs past the end of the request ({len(self.view)} bytes)"
            )
        blob = self.view[self.pos:end]
        self.pos = end
        return blob

    def count(self) -> int:
        (count,) = self.take(_INT16)
        if count < 0:
            raise MalformedRequestError(f"request count {count} is negative")
        return count

    def finish(self) -> None:
        if self.pos != len(self.view):
            raise MalformedRequestError(f"{len(self.view) - self.pos} unexpected bytes after the request")


def _produce(cursor: _Cursor) -> ProduceRequest:
    topic = cursor.string()
    partition, set_size = cursor.take(_PRODUCE_TAIL)
    return ProduceRequest(topic, partition, cursor.blob(set_size))


def _fetch(cursor: _Cursor) -> FetchRequest:
    topic = cursor.string()
    return FetchRequest(topic, *cursor.take(_FETCH_TAIL))


def peek_produce(frame: bytes):
    """A 0.7 PRODUCE frame body read in place, for a fast path: ``(topic bytes,
    partition, message-set start)``, the set running from there to the end of the frame.
    None for anything else, which ``decode_request`` then takes (and names what is
    wrong): another request type, a frame too short, a negative topic length, a set
    size that does not end exactly at the frame's end, a partition below 0 (-1 asks for
    one at random). Whenever this returns a value, ``decode_request`` returns the same
    ProduceRequest (the topic as ``str``)."""
    size = len(frame)
    if size < 12 or frame[0] or frame[1] or frame[2] & 0x80:  # not PRODUCE, too short, topic length < 0
        return None
    set_start = 12 + (frame[2] << 8 | frame[3])  # after the type, the topic, the partition and the set size
    if set_start > size:
        return None
    partition, set_size = _PRODUCE_TAIL.unpack_from(frame, set_start - 8)
    if partition < 0 or set_start + set_size != size:  # (a negative size cannot end the frame)
        return None
    return frame[4:set_start - 8], partition, set_start


def decode_request(frame):
    """Decode one frame body (starting with the int16 request type)."""
    view = memoryview(frame)
    cursor = _Cursor(view, 0)
    (request_type,) = cursor.take(_INT16)
    if request_type == RequestType.PRODUCE:
        request = _produce(cursor)
    elif request_type == RequestType.FETCH:
        request = _fetch(cursor)
    elif request_type == RequestType.MULTIFETCH:
        request = MultiFetchRequest([_fetch(cursor) for _ in range(cursor.count())])
    elif request_type == RequestType.MULTIPRODUCE:
        request = MultiProduceRequest([_produce(cursor) for _ in range(cursor.count())])
    elif request_type == RequestType.OFFSETS:
        topic = cursor.string()
        request = OffsetsRequest(topic, *cursor.take(_OFFSETS_TAIL))
    elif request_type == RequestType.PRODUCE_ACKED:
        (durability,) = cursor.take(_INT16)
        if durability not in (Durability.APPEND, Durability.FLUSH, Durability.REPLICATED):
            raise MalformedRequestError(f"durability {durability} is none of 0 (append), 1 (flush), "
                                        f"2 (replicated)")
        produce = _produce(cursor)
        request = ProduceAckedRequest(durability, produce.topic, produce.partition, produce.message_set)
    elif request_type == RequestType.REPLICA_FETCH:
        replica_id, max_wait_ms = cursor.take(_REPLICA_FETCH_HEAD)
        parts = [ReplicaFetchPart(cursor.string(), *cursor.take(_REPLICA_FETCH_TAIL)) for _ in range(cursor.count())]
        request = ReplicaFetchRequest(replica_id, max_wait_ms, parts)
    elif request_type == RequestType.LEADER_EPOCH_END:
        (replica_id,) = cursor.take(_EPOCH_END_HEAD)
        topic = cursor.string()
        request = LeaderEpochEndRequest(replica_id, topic, *cursor.take(_EPOCH_END_TAIL))
    else:
        raise MalformedRequestError(f"unknown request type {request_type}")
    cursor.finish()
    return request


# --- encoders (clients, tests) --------------------------------------------------


def _string(text: str) -> bytes:
    raw = text.encode("latin-1") if isinstance(text, str) else bytes(text)
    return _INT16.pack(len(raw)) + raw


def _frame(body: bytes) -> bytes:
    return SIZE.pack(len(body)) + body


@functools.lru_cache(maxsize=1024)
def _produce_head(topic: str, partition: int) -> tuple:
    """A PRODUCE frame's bytes from the request type to the partition, and their
    count plus the set size's four: the same for every set a producer sends there."""
    head = _INT16.pack(RequestType.PRODUCE) + _string(topic) + _INT32.pack(partition)
    return head, len(head) + 4


def produce_parts(topic: str, partition: int, message_set) -> tuple:
    """``(header, message_set)`` of a PRODUCE frame: send both (vectored) without a copy."""
    head, head_size = _produce_head(topic if isinstance(topic, (str, bytes)) else bytes(topic), partition)
    size = len(message_set)
    return SIZE.pack(head_size + size) + head + _INT32.pack(size), message_set


@functools.lru_cache(maxsize=1024)
def _one_message_head(topic, partition: int) -> tuple:
    """``(pack, head, frame bytes besides the payload)`` for ``one_message_produce_parts``:
    one Struct for the frame's size, its head, the set's size and the message's header."""
    head, head_size = _produce_head(topic, partition)
    pack = struct.Struct(f">i{len(head)}siiBBI").pack
    return pack, head, head_size + V1_OVERHEAD


def one_message_produce_parts(topic, partition: int, payload: bytes) -> tuple:
    """``(header, payload)`` of a PRODUCE frame whose set is one uncompressed magic-1
    message: every header of the frame, set and message packed in one call, and the
    payload sent as it is (vectored, no copy). The same bytes as ``produce_parts`` of
    ``encode_message(payload)``; the sync producer's one-message send is this."""
    pack, head, fixed = _one_message_head(topic, partition)
    size = len(payload)
    return pack(fixed + size, head, V1_OVERHEAD + size, V1_HEADER_SIZE + size, MAGIC_V1, CODEC_NONE,
                crc32(payload)), payload


def encode_produce(topic: str, partition: int, message_set) -> bytes:
    return b"".join(produce_parts(topic, partition, message_set))


def produce_acked_parts(durability: int, topic: str, partition: int, message_set) -> tuple:
    head = (
        _INT16.pack(RequestType.PRODUCE_ACKED) + _INT16.pack(durability) + _string(topic)
        + _PRODUCE_TAIL.pack(partition, len(message_set))
    )
    return SIZE.pack(len(head) + len(message_set)) + head, message_set


def encode_produce_acked(durability: int, topic: str, partition: int, message_set) -> bytes:
    return b"".join(produce_acked_parts(durability, topic, partition, message_set))


def encode_multiproduce(produces) -> bytes:
    """``produces``: iterable of ``(topic, partition, message_set)``."""
    parts = [_INT16.pack(RequestType.MULTIPRODUCE)]
    produces = list(produces)
    parts.append(_INT16.pack(len(produces)))
    for topic, partition, message_set in produces:
        parts.append(_string(topic) + _PRODUCE_TAIL.pack(partition, len(message_set)))
        parts.append(bytes(message_set))
    return _frame(b"".join(parts))


def _fetch_body(topic: str, partition: int, offset: int, max_size: int) -> bytes:
    return _string(topic) + _FETCH_TAIL.pack(partition, offset, max_size)


def encode_fetch(topic: str, partition: int, offset: int, max_size: int) -> bytes:
    return _frame(_INT16.pack(RequestType.FETCH) + _fetch_body(topic, partition, offset, max_size))


def encode_multifetch(fetches) -> bytes:
    """``fetches``: iterable of ``(topic, partition, offset, max_size)``."""
    fetches = list(fetches)
    body = _INT16.pack(RequestType.MULTIFETCH) + _INT16.pack(len(fetches))
    return _frame(body + b"".join(_fetch_body(*fetch) for fetch in fetches))


def encode_offsets(topic: str, partition: int, time: int, max_offsets: int) -> bytes:
    return _frame(_INT16.pack(RequestType.OFFSETS) + _string(topic) + _OFFSETS_TAIL.pack(partition, time, max_offsets))


def encode_replica_fetch(replica_id: int, max_wait_ms: int, parts) -> bytes:
    """``parts``: iterable of ``(topic, partition, leader_epoch, offset, max_size)``."""
    parts = list(parts)
    body = [_INT16.pack(RequestType.REPLICA_FETCH), _REPLICA_FETCH_HEAD.pack(replica_id, max_wait_ms),
            _INT16.pack(len(parts))]
    for topic, partition, leader_epoch, offset, max_size in parts:
        body.append(_string(topic) + _REPLICA_FETCH_TAIL.pack(partition, leader_epoch, offset, max_size))
    return _frame(b"".join(body))


def encode_leader_epoch_end(replica_id: int, topic: str, partition: int, leader_epoch: int, epoch: int) -> bytes:
    return _frame(_INT16.pack(RequestType.LEADER_EPOCH_END) + _EPOCH_END_HEAD.pack(replica_id) + _string(topic)
                  + _EPOCH_END_TAIL.pack(partition, leader_epoch, epoch))
