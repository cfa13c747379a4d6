"""SimpleConsumer: fetch, multifetch and OFFSETS against one broker, and iteration.

A fetch answer is decoded in bulk (``decode_messages``: one header unpack, one slice
and one CRC check per uncompressed message, nested compressed sets inflated), into a
MessageSet of payloads and the offsets a consumer reports after each of them.

``messages()`` iterates a partition from an offset (``message_sets()`` in bulk, a
decoded answer at a time): when an answer holds bytes but no
whole message (a message larger than the fetch size), the fetch size doubles, up to
``max_fetch_size``, and the fetch is repeated: a message is never skipped. At the end
of the log it stops, or with ``follow=True`` polls for new data. An offset outside
the log raises OffsetOutOfRangeError (with ``topic``, ``partition``, ``offset``),
unless ``auto_offset_reset`` says to restart from the smallest or largest offset.
With ``audit_envelope=True`` the payloads handed out are stripped of producers' audit
envelopes (``clients.envelope``; other payloads pass through untouched).
"""

import contextlib
import time
from typing import NamedTuple

from clients.brokers import probe_partition_count
from clients.connection import BrokerConnection
from clients.envelope import EnvelopeError, open_envelope
from clients.errors import BrokerError, BrokerUnavailableError, error_for
from mpbroker.errors import MessageSizeTooLargeError, OffsetOutOfRangeError
from mpbroker.protocol import requests as rq
from mpbroker.protocol import responses as rs
from mpbroker.segments.message_set import decode_messages

LATEST_TIME = -1
EARLIEST_TIME = -2


class MessageAndOffset(NamedTuple):
    payload: bytes
    next_offset: int  # the offset after this message: where to resume, what to commit
    envelope: object = None  # audit_envelope=True: the stripped clients.envelope.Envelope, if there was one


class MessageSet:
    """The whole messages of one fetch answer."""

    __slots__ = ("topic", "partition", "offset", "error", "payloads", "next_offsets", "valid_bytes", "size",
                 "envelopes")

    def __init__(self, topic: str, partition: int, offset: int, error: int, data):
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.error = error
        self.size = len(data)
        self.envelopes = None  # strip_envelopes(): an Envelope or None per message
        if error:
            self.payloads, self.next_offsets, self.valid_bytes = [], [], 0
        else:  # from bytes, so that every payload is bytes (one copy of the answer)
            self.payloads, self.next_offsets, self.valid_bytes = decode_messages(bytes(data), offset)

    def check(self) -> "MessageSet":
        """Raise the error the broker answered with, if any (OffsetOutOfRangeError, ...)."""
        if self.error:
            exc = error_for(self.error, f"fetch {self.topic}-{self.partition} at offset {self.offset}", BrokerError)
            exc.topic, exc.partition, exc.offset = self.topic, self.partition, self.offset
            raise exc
        return self

    @property
    def next_offset(self) -> int:
        """Where the next fetch of this partition starts."""
        return self.offset + self.valid_bytes

    @property
    def truncated(self) -> bool:
        """True if the answer ended inside a message (the client drops that part)."""
        return self.valid_bytes < self.size

    def __len__(self) -> int:
        return len(self.payloads)

    def strip_envelopes(self) -> "MessageSet":
        """Replace each payload by the application's payload inside its audit envelope
        (``clients.envelope``; a payload without one stays as it is) and list the
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
        self.check()
        if self.envelopes is not None:
            return map(MessageAndOffset, self.payloads, self.next_offsets, self.envelopes)
        return map(MessageAndOffset, self.payloads, self.next_offsets)


class SimpleConsumer:
    def __init__(self, host: str, port: int, *, fetch_size: int = 1024 * 1024,
                 max_fetch_size: int = 64 * 1024 * 1024, socket_timeout_ms: int = 30000,
                 connect_timeout_ms: int = 5000, backoff_increment_ms: int = 1000, audit_envelope: bool = False):
        if fetch_size <= 0 or max_fetch_size < fetch_size:
            raise ValueError("need 0 < fetch_size <= max_fetch_size")
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
        frame = self._request(rq.encode_fetch(topic, partition, offset, max_size or self.fetch_size))
        error, data = rs.split_error(frame)
        message_set = MessageSet(topic, partition, offset, error, data).check()
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
        """Offsets before ``time_ms`` (-1 latest, -2 earliest), newest first."""
        error, offsets = rs.decode_offsets(self._request(rq.encode_offsets(topic, partition, time_ms, max_offsets)))
        if error:
            raise error_for(error, f"offsets of {topic}-{partition}", BrokerError)
        return offsets

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
                try:
                    message_set.check()
                except OffsetOutOfRangeError:
                    if auto_offset_reset not in ("smallest", "largest"):
                        raise
                    offset = (self.earliest_offset if auto_offset_reset == "smallest" else self.latest_offset)(
                        topic, partition)
                    continue
                if message_set.payloads:
                    offset = message_set.next_offset
                    fetch_size = self.fetch_size
                    try:
                        connection.send(rq.encode_fetch(topic, partition, offset, fetch_size))
                        prefetched = True
                    except BrokerUnavailableError:
                        prefetched = False  # sent again at the top of the loop
                    yield message_set.strip_envelopes() if self.audit_envelope else message_set
                    idle_since = None
                    backoff = 0.0
                    continue
                if message_set.size:  # bytes but not one whole message: the next one is bigger
                    if fetch_size >= self.max_fetch_size:
                        raise MessageSizeTooLargeError(
                            f"the message at {topic}-{partition}@{offset} is larger than max_fetch_size "
                            f"({self.max_fetch_size} bytes)")
                    fetch_size = min(fetch_size * 2, self.max_fetch_size)
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

