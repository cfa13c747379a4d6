"""SimpleConsumer: fetch, multifetch and OFFSETS against one broker, and iteration.

A fetch answer is decoded in bulk (``decode_messages``: one header unpack, one slice
and one CRC check per uncompressed message, nested compressed sets inflated), into a
MessageSet of payloads and the offsets a consumer reports after each of them.

``messages()`` iterates a partition from an offset (``message_sets()`` in bulk, a
decoded answer at a time): when an answer holds bytes but no whole message (a message
larger than the fetch size), the fetch is repeated with a fetch size that holds the
message (at least double, at most ``max_fetch_size``; a larger message raises
MessageSizeTooLargeError): a message is never skipped. At the end of the log it stops,
or with ``follow=True`` polls for new data. An offset outside the log raises
OffsetOutOfRangeError (with ``topic``, ``partition``, ``offset``, ``log_start``,
``log_end``), unless ``auto_offset_reset`` says to restart from the smallest or
largest offset.

Offsets are byte positions, so an offset can point inside a message. The answer there
is garbage: a length no message has or a failed CRC. When the first message of an
answer cannot be read, the consumer walks the message lengths from the start of the
segment (OFFSETS lists the segment bases) to tell the two cases apart:
NotAMessageBoundaryError (``offset``, ``nearest``: where the last message before it
starts) for an offset inside a message, CorruptMessageError (``offset``) for a damaged
message at a real boundary. The valid messages of an answer before a damaged one are
handed out first.

A partition that modern producers wrote holds record batches: the broker answers its
fetches with error code RECORD_BATCHES (13) and the batches as they are stored, and
the set is decoded by ``record_batches.decode_batches``: each record's value is a
payload, with its key, headers and timestamp beside it (``keys``, ``headers``,
``timestamps``; None for a set of 0.7 messages), its own offset in ``offsets`` and its
offset + 1 as its next offset (after a batch's last record: the batch's end). An
answer may start at the batch holding the fetch offset, before it (``start``): the
records below the offset are left out. A damaged batch is a CorruptMessageError like a
damaged message, after the records before it.

With ``audit_envelope=True`` the payloads handed out are stripped of producers' audit
envelopes (``mpbroker.clients.core.envelope``; other payloads pass through untouched).
"""

import contextlib
import itertools
import struct
import time
from typing import NamedTuple

from mpbroker.clients.consumer.message_boundaries import WalkTooLongError, valid_prefix, walk_to
from mpbroker.clients.consumer.record_batches import decode_batches
from mpbroker.clients.core.brokers import probe_partition_count
from mpbroker.clients.core.connection import BrokerConnection
from mpbroker.clients.core.envelope import EnvelopeError, open_envelope
from mpbroker.clients.core.errors import (
    BrokerError,
    BrokerUnavailableError,
    ClientError,
    CorruptMessageError,
    NotAMessageBoundaryError,
    error_for,
)
from mpbroker.codec import requests as rq
from mpbroker.codec import responses as rs
from mpbroker.codec.errors import (
    ErrorCode,
    InvalidMessageError,
    MessageSizeTooLargeError,
    MPBrokerError,
    OffsetOutOfRangeError,
)
from mpbroker.codec.message import LENGTH_SIZE
from mpbroker.codec.message_set import decode_messages

LATEST_TIME = -1
EARLIEST_TIME = -2
FAR_FUTURE_TIME = 1 << 62  # OFFSETS at this time: every segment of a log that exists, [] without a log
MAX_SEGMENT_OFFSETS = 1 << 20  # OFFSETS asked for every segment base
MAX_FETCH_SIZE_LIMIT = (1 << 31) - 1  # the fetch request's int32 max_size
WALK_CHUNK_BYTES = 1 << 20  # at least this much per fetch while walking message lengths
_LENGTH = struct.Struct(">i")


class MessageAndOffset(NamedTuple):
    payload: bytes
    next_offset: int  # the offset after this message: where to resume, what to commit
    envelope: object = None  # audit_envelope=True: the stripped mpbroker.clients.core.envelope.Envelope, if there was one
    offset: int = -1  # where this message starts (a compressed wrapper's messages: the wrapper's start; a record: its offset)
    # A record of a record-batch partition (modern producers) has these; a 0.7 message has no key,
    # headers or timestamp.
    key: bytes | None = None
    headers: tuple = ()  # ((str, bytes | None), ...)
    timestamp: int | None = None  # ms (-1: the record has none)


class MessageSet:
    """The whole messages of one fetch answer."""

    __slots__ = ("topic", "partition", "offset", "error", "payloads", "next_offsets", "valid_bytes", "size",
                 "envelopes", "corrupt", "first_length", "start", "record_batches", "keys", "headers", "timestamps",
                 "record_offsets")

    def __init__(self, topic: str, partition: int, offset: int, error: int, data):
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.error = error
        self.size = len(data)
        self.envelopes = None  # strip_envelopes(): an Envelope or None per message
        self.corrupt = None  # a CorruptMessageError for the message at next_offset, which failed its checks
        self.first_length = None  # no whole message: the length field of the message at ``offset``
        self.start = offset  # where the answer's bytes start (a record-batch answer: maybe before ``offset``)
        self.record_batches = error == ErrorCode.RECORD_BATCHES
        self.keys = self.headers = self.timestamps = self.record_offsets = None  # record batches only
        if self.record_batches:
            self.error = ErrorCode.NO_ERROR
            self._decode_batches(bytes(data))
            return
        if error:
            self.payloads, self.next_offsets, self.valid_bytes = [], [], 0
            return
        data = bytes(data)  # so that every payload is bytes (one copy of the answer)
        try:
            self.payloads, self.next_offsets, self.valid_bytes = decode_messages(data, offset)
        except InvalidMessageError as exc:
            (self.payloads, self.next_offsets, self.valid_bytes), self.corrupt = valid_prefix(
                data, topic, partition, offset, exc)
        if not self.payloads and self.corrupt is None and len(data) >= LENGTH_SIZE:
            (self.first_length,) = _LENGTH.unpack_from(data, 0)

    def _decode_batches(self, data: bytes) -> None:
        decoded = decode_batches(data, self.offset)
        self.start = decoded.start
        self.payloads, self.next_offsets, self.valid_bytes = decoded.values, decoded.next_offsets, decoded.valid_bytes
        self.keys, self.headers, self.timestamps = decoded.keys, decoded.headers, decoded.timestamps
        self.record_offsets = decoded.offsets
        if decoded.error is not None:
            position = decoded.start + decoded.valid_bytes
            self.corrupt = CorruptMessageError(f"{decoded.error} ({self.topic}-{self.partition})", self.topic,
                                               self.partition, position)
        elif decoded.first_size is not None:
            self.first_length = decoded.first_size - LENGTH_SIZE  # so that LENGTH_SIZE + first_length is its size

    def check(self) -> "MessageSet":
        """Raise the error the broker answered with, if any (OffsetOutOfRangeError, ...),
        or the CorruptMessageError of a set whose first message is damaged. (A set with
        valid messages before a damaged one passes: they are its ``payloads``, and the
        damaged one is at ``next_offset``.)"""
        if self.error:
            exc = error_for(self.error, f"fetch {self.topic}-{self.partition} at offset {self.offset}", BrokerError)
            exc.topic, exc.partition, exc.offset = self.topic, self.partition, self.offset
            raise exc
        if self.corrupt is not None and not self.payloads:
            raise self.corrupt
        return self

    @property
    def offsets(self) -> list:
        """Where each message starts: the offset to fetch from to get it again (the
        messages of a compressed wrapper share the wrapper's start; a record: its own offset)."""
        if self.record_offsets is not None:
            return self.record_offsets
        return [self.offset, *self.next_offsets[:-1]] if self.next_offsets else []

    @property
    def next_offset(self) -> int:
        """Where the next fetch of this partition starts."""
        return self.start + self.valid_bytes

    @property
    def truncated(self) -> bool:
        """True if the answer ended inside a message or batch (the client drops that part)."""
        return self.valid_bytes < self.size

    def __len__(self) -> int:
        return len(self.payloads)

    def strip_envelopes(self) -> "MessageSet":
        """Replace each payload by the application's payload inside its audit envelope
        (``mpbroker.clients.core.envelope``; a payload without one stays as it is) and list the
        envelopes in ``envelopes``. A damaged envelope raises EnvelopeError with
        ``topic``, ``partition`` and ``next_offset`` (where to resume after that message)."""
        if self.envelopes is None:
            opened = []
            for payload, next_offset in zip(self.payloads, self.next_offsets):
                try:
                    opened.append(open_envelope(payload))
                except EnvelopeError as exc:
                    exc.topic, exc.partition, exc.next_offset = self.topic, self.partition, next_offset
                    raise
            self.payloads = [payload if env is None else env.payload for payload, env in zip(self.payloads, opened)]
            self.envelopes = opened
        return self

    def __iter__(self):
        """MessageAndOffset for each message; a damaged message after them raises its
        CorruptMessageError once they are handed out."""
        self.check()
        envelopes = self.envelopes if self.envelopes is not None else itertools.repeat(None)
        if self.record_batches:
            messages = map(MessageAndOffset, self.payloads, self.next_offsets, envelopes, self.offsets, self.keys,
                           self.headers, self.timestamps)
        else:
            messages = map(MessageAndOffset, self.payloads, self.next_offsets, envelopes, self.offsets)
        if self.corrupt is None:
            return messages
        return self._then_raise(messages)

    def _then_raise(self, messages):
        yield from messages
        raise self.corrupt


class SimpleConsumer:
    def __init__(self, host: str, port: int, *, fetch_size: int = 1024 * 1024,
                 max_fetch_size: int = 64 * 1024 * 1024, socket_timeout_ms: int = 30000,
                 connect_timeout_ms: int = 5000, backoff_increment_ms: int = 1000, audit_envelope: bool = False):
        if fetch_size <= 0 or max_fetch_size < fetch_size or max_fetch_size > MAX_FETCH_SIZE_LIMIT:
            raise ValueError(f"need 0 < fetch_size <= max_fetch_size <= {MAX_FETCH_SIZE_LIMIT}")
        self.audit_envelope = audit_envelope  # strip producers' audit envelopes from what it hands out
        self.host = host
        self.port = port
        self.fetch_size = fetch_size
        self.max_fetch_size = max_fetch_size
        self.backoff_increment_ms = backoff_increment_ms
        self._connection = BrokerConnection(host, port, connect_timeout_ms=connect_timeout_ms,
                                            socket_timeout_ms=socket_timeout_ms)

    def _request(self, data: bytes) -> bytes:
        """A request, sent again once on a fresh connection if the first one broke
        (every consumer request is idempotent)."""
        try:
            return self._connection.request(data)
        except BrokerUnavailableError:
            return self._connection.request(data)

    def fetch(self, topic: str, partition: int, offset: int, max_size: int | None = None) -> MessageSet:
        """One FETCH. An answer of ``max_size`` bytes that ends inside a message is
        returned as it is (its whole messages, ``truncated``; ``grow_fetch_size`` says
        how much a message needs). Raises OffsetOutOfRangeError, and when no message
        can be read at ``offset`` NotAMessageBoundaryError or CorruptMessageError."""
        max_size = max_size or self.fetch_size
        frame = self._request(rq.encode_fetch(topic, partition, offset, max_size))
        error, data = rs.split_error(frame)
        message_set = MessageSet(topic, partition, offset, error, data)
        try:
            message_set.check()
        except OffsetOutOfRangeError:
            raise self.out_of_range_error(topic, partition, offset) from None
        except CorruptMessageError as exc:
            self._raise_for_bad_start(message_set, exc)
        if not message_set.payloads and 0 < message_set.size < max_size:  # short, yet no whole message
            self.grow_fetch_size(message_set, max_size)  # raises
        return message_set.strip_envelopes() if self.audit_envelope else message_set

    def multifetch(self, fetches) -> list:
        """``fetches``: ``[(topic, partition, offset, max_size), ...]``; returns a MessageSet
        per fetch, in order; a set the broker answered with an error raises when
        iterated or ``check()``-ed."""
        fetches = list(fetches)
        answers = rs.decode_multifetch(self._request(rq.encode_multifetch(fetches)))
        if len(answers) != len(fetches):
            raise BrokerUnavailableError(f"multifetch of {len(fetches)} got {len(answers)} answers")
        sets = [MessageSet(topic, partition, offset, error, data)
                for (topic, partition, offset, _), (error, data) in zip(fetches, answers)]
        if self.audit_envelope:
            for message_set in sets:
                message_set.strip_envelopes()
        return sets

    def get_offsets_before(self, topic: str, partition: int, time_ms: int, max_offsets: int) -> list:
        """Offsets before ``time_ms`` (-1 latest, -2 earliest), newest first: the 0.7
        answer is segment bases (of the segments last written at or before the time),
        led by the log end when the time is now or later."""
        error, offsets = rs.decode_offsets(self._request(rq.encode_offsets(topic, partition, time_ms, max_offsets)))
        if error:
            raise error_for(error, f"offsets of {topic}-{partition}", BrokerError)
        return offsets

    def has_log(self, topic: str, partition: int) -> bool:
        """Whether the broker has a log for this partition: a 0.7 broker answers every
        OFFSETS for latest or earliest with [0] when it has none, but a time later
        than every segment with no offsets at all."""
        return bool(self.get_offsets_before(topic, partition, FAR_FUTURE_TIME, 1))

    def topic_has_log(self, topic: str, partitions: int | None = None) -> bool:
        """Whether any of the topic's ``partitions`` (default: as many as the broker has)
        has a log here: an unknown topic and a topic without messages look alike otherwise."""
        count = self.partition_count(topic) if partitions is None else partitions
        return any(self.has_log(topic, partition) for partition in range(count))

    def out_of_range_error(self, topic: str, partition: int, offset: int) -> OffsetOutOfRangeError:
        """An OffsetOutOfRangeError for ``offset`` saying where the log starts and ends
        (``log_start``, ``log_end``; None if the broker could not say)."""
        try:
            start, end = self.earliest_offset(topic, partition), self.latest_offset(topic, partition)
        except (ClientError, MPBrokerError):
            start = end = None
        where = f"{topic}-{partition}"
        if end is not None and offset > end:
            text = f"offset {offset} is past the log end {end} of {where}"
        elif start is not None and offset < start:
            text = f"offset {offset} is before the log start {start} of {where}"
            if start > 0:
                text += " (older segments were deleted)"
        elif start is not None:
            text = f"offset {offset} is out of range of {where} (log from {start} to {end})"
        else:
            text = f"offset {offset} is out of range of {where}"
        exc = OffsetOutOfRangeError(text)
        exc.topic, exc.partition, exc.offset, exc.log_start, exc.log_end = topic, partition, offset, start, end
        return exc

    def check_offset(self, topic: str, partition: int, offset: int) -> None:
        """Raise ``out_of_range_error`` unless the log's start <= ``offset`` <= its end
        (the first fetch tells whether a message starts there)."""
        if not self.earliest_offset(topic, partition) <= offset <= self.latest_offset(topic, partition):
            raise self.out_of_range_error(topic, partition, offset)

    def nearest_message_start(self, topic: str, partition: int, offset: int) -> int:
        """The offset where the last message starting at or before ``offset`` starts
        (``offset`` itself at a message boundary). Walks the message lengths from the
        base of the segment holding ``offset`` (OFFSETS lists the bases), fetching in
        chunks and skipping the bodies of large messages. Raises OffsetOutOfRangeError
        outside the log, CorruptMessageError when a length on the way is damaged, and
        WalkTooLongError when the start lies more than 256 MiB into its segment."""
        bases = [base for base in self.get_offsets_before(topic, partition, LATEST_TIME, MAX_SEGMENT_OFFSETS)
                 if base <= offset]
        if not bases:
            raise self.out_of_range_error(topic, partition, offset)
        return walk_to(self._request, topic, partition, max(bases), offset, max(self.fetch_size, WALK_CHUNK_BYTES))

    def grow_fetch_size(self, message_set: MessageSet, fetch_size: int) -> int:
        """For an answer of ``fetch_size`` bytes that holds no whole message: the fetch
        size to ask for next, one that holds the message at ``message_set.offset``
        (at least double, at most ``max_fetch_size``). Raises NotAMessageBoundaryError
        when the offset is inside a message, CorruptMessageError when the message there
        is damaged (or claims more bytes than the log holds), MessageSizeTooLargeError
        when it is larger than ``max_fetch_size``."""
        if message_set.corrupt is not None:
            self._raise_for_bad_start(message_set, message_set.corrupt)
        topic, partition, offset = message_set.topic, message_set.partition, message_set.offset
        length = message_set.first_length
        if message_set.size < fetch_size and not self._whole_alone(message_set, fetch_size):
            # all there is up to the segment's end, and no whole message
            claimed = "cut-off length" if length is None else f"length {length}"
            self._raise_for_bad_start(message_set, CorruptMessageError(
                f"the message at offset {offset} of {topic}-{partition} has {claimed}, more than the log holds "
                f"after it ({message_set.size} bytes)", topic, partition, offset))
        if length is None:  # a fetch size below 4 bytes
            return min(self.max_fetch_size, fetch_size * 2)
        needed = LENGTH_SIZE + length
        if needed > self.max_fetch_size:
            self._raise_for_bad_start(message_set, MessageSizeTooLargeError(
                f"the message at {topic}-{partition}@{offset} is {needed} bytes, larger than max_fetch_size "
                f"({self.max_fetch_size} bytes)"))
        return min(self.max_fetch_size, max(needed, fetch_size * 2))

    def _whole_alone(self, message_set: MessageSet, fetch_size: int) -> bool:
        """Whether a FETCH of this partition alone, of the size the short answer asked for
        (or its first message needs), returns a whole message: a MULTIFETCH answer may be
        shortened by the broker (every part together under its limit), so a short part is
        not yet proof that the log ends inside the message. Only on this error path."""
        length = message_set.first_length
        size = min(self.max_fetch_size, max(fetch_size, 0 if length is None else LENGTH_SIZE + length))
        frame = self._request(rq.encode_fetch(message_set.topic, message_set.partition, message_set.offset, size))
        error, data = rs.split_error(frame)
        alone = MessageSet(message_set.topic, message_set.partition, message_set.offset, error, data)
        return alone.error == 0 and alone.corrupt is None and bool(alone.payloads)

    def _raise_for_bad_start(self, message_set: MessageSet, error: Exception):
        """The first message of ``message_set`` cannot be read: raise
        NotAMessageBoundaryError if its offset is inside a message, else ``error``."""
        topic, partition, offset = message_set.topic, message_set.partition, message_set.offset
        if message_set.record_batches:  # the broker answers from the batch holding the offset: no walk
            raise error
        try:
            nearest = self.nearest_message_start(topic, partition, offset)
        except (MPBrokerError, BrokerError, WalkTooLongError):  # the walk cannot tell (damage on the way, log
            # changed, too far from the segment's base)
            nearest = offset
        if nearest != offset:
            raise NotAMessageBoundaryError(topic, partition, offset, nearest) from None
        raise error

    def partition_count(self, topic: str) -> int:
        """How many partitions ``topic`` has on this broker (one MULTIFETCH probe)."""
        return probe_partition_count(self._request, topic)

    def earliest_offset(self, topic: str, partition: int) -> int:
        return self.get_offsets_before(topic, partition, EARLIEST_TIME, 1)[0]

    def latest_offset(self, topic: str, partition: int) -> int:
        return self.get_offsets_before(topic, partition, LATEST_TIME, 1)[0]

    def messages(self, topic: str, partition: int, offset: int, *, follow: bool = False,
                 auto_offset_reset: str | None = None, max_wait_ms: int | None = None):
        """Iterate MessageAndOffset from ``offset`` on (see the module docstring and
        ``message_sets`` for the arguments)."""
        with contextlib.closing(self.message_sets(topic, partition, offset, follow=follow,
                                                  auto_offset_reset=auto_offset_reset,
                                                  max_wait_ms=max_wait_ms)) as message_sets:
            for message_set in message_sets:
                yield from message_set

    def message_sets(self, topic: str, partition: int, offset: int, *, follow: bool = False,
                     auto_offset_reset: str | None = None, max_wait_ms: int | None = None):
        """Iterate the non-empty MessageSets from ``offset`` on: the bulk form of
        ``messages`` (``payloads`` and ``next_offsets`` are plain lists).

        ``auto_offset_reset``: None raises OffsetOutOfRangeError; "smallest" or
        "largest" restarts there. With ``follow``, waits for new data (backing off up
        to ``backoff_increment_ms``), for ever or until ``max_wait_ms`` pass without any.
        The next fetch is on its way while the current answer is handled (one request
        ahead); stopping the iteration early closes the connection to drop its answer."""
        connection = self._connection
        fetch_size = self.fetch_size
        idle_since = None
        backoff = 0.0
        prefetched = False  # a fetch at ``offset`` with ``fetch_size`` is already sent
        try:
            while True:
                try:
                    if not prefetched:
                        connection.send(rq.encode_fetch(topic, partition, offset, fetch_size))
                    prefetched = False
                    error, data = rs.split_error(connection.receive())
                except BrokerUnavailableError:  # once more on a fresh connection
                    error, data = rs.split_error(self._request(rq.encode_fetch(topic, partition, offset, fetch_size)))
                message_set = MessageSet(topic, partition, offset, error, data)
                if message_set.error:
                    try:
                        message_set.check()
                    except OffsetOutOfRangeError:
                        if auto_offset_reset not in ("smallest", "largest"):
                            raise self.out_of_range_error(topic, partition, offset) from None
                        offset = (self.earliest_offset if auto_offset_reset == "smallest" else self.latest_offset)(
                            topic, partition)
                        continue
                if message_set.payloads:
                    offset = message_set.next_offset
                    fetch_size = self.fetch_size
                    if message_set.corrupt is None:
                        try:
                            connection.send(rq.encode_fetch(topic, partition, offset, fetch_size))
                            prefetched = True
                        except BrokerUnavailableError:
                            prefetched = False  # sent again at the top of the loop
                    yield message_set.strip_envelopes() if self.audit_envelope else message_set
                    if message_set.corrupt is not None:  # the valid messages before it are out
                        raise message_set.corrupt
                    idle_since = None
                    backoff = 0.0
                    continue
                if message_set.size:  # bytes but not one whole message: a bigger one, or a bad offset
                    fetch_size = self.grow_fetch_size(message_set, fetch_size)
                    continue
                if not follow:
                    return
                now = time.monotonic()
                idle_since = idle_since or now
                if max_wait_ms is not None and (now - idle_since) * 1000 >= max_wait_ms:
                    return
                backoff = min(self.backoff_increment_ms / 1000, backoff + 0.01)
                time.sleep(backoff)
        finally:
            if prefetched:  # an answer is on its way that nobody will read
                connection.close()

    def close(self) -> None:
        self._connection.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

