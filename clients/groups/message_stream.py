"""A consumer connector's stream: a blocking iterator over the chunks its fetchers
queue, and the per-partition bookkeeping it shares with them.

A PartitionTopicInfo is one claimed partition for one rebalance generation: where its
fetcher reads next (``fetch_offset``), the offset after the last message handed to
the user (``returned_offset``) and after the last one the user finished with
(``done_offset``: a message counts as finished when the user asks for the next one).
Automatic commits, rebalances and crashes only ever commit ``done_offset``, so a
message being processed is delivered again rather than lost: at least once.
``commit_offsets()`` and ``shutdown()`` commit ``returned_offset``: everything
handed out. A released PartitionTopicInfo stops handing out what is left of its
chunks (the partition's new owner starts from the committed offset).

With ``auto_finish=False`` (``autofinish.enable=false``) asking for the next message
finishes nothing: the application says which messages are finished
(``ConsumerConnector.mark_finished``), e.g. once another system acknowledged them.

``EnvelopeStrippingStream`` (``audit.envelope=true``) hands out payloads without their
audit envelope, with the envelope's fields in ``ConsumedMessage.envelope``.
"""

import queue
import threading
from typing import NamedTuple

from mpbroker.clients.core import envelope as envelopes


class ConsumerTimeoutError(Exception):
    """No message arrived within ``consumer.timeout.ms``; iterating again goes on waiting."""


class ConsumedMessage(NamedTuple):
    topic: str
    broker_id: int
    partition: int
    next_offset: int  # the offset after this message: where a restart resumes
    payload: bytes
    envelope: object = None  # audit.envelope: the stripped mpbroker.clients.core.envelope.Envelope (None: there was none)
    offset: int = -1  # where this message starts (a compressed wrapper's messages: the wrapper's start; a record: its offset)
    # A record of a record-batch partition (modern producers); a 0.7 message has no key, headers or timestamp.
    key: bytes | None = None
    headers: tuple = ()
    timestamp: int | None = None  # ms (-1: the record has none)


class PartitionTopicInfo:
    __slots__ = ("topic", "partition", "queue", "fetch_offset", "returned_offset", "done_offset",
                 "committed_offset", "fetch_size", "released", "last_error", "stuck")

    def __init__(self, topic: str, partition, chunk_queue, offset: int, fetch_size: int):
        self.topic = topic
        self.partition = partition  # layout.PartitionId
        self.queue = chunk_queue
        self.fetch_offset = offset
        self.returned_offset = offset
        self.done_offset = offset
        self.committed_offset = offset
        self.fetch_size = fetch_size
        self.released = False
        self.last_error = None  # the fetcher logs each kind of error once
        self.stuck = None  # why the message at fetch_offset cannot be read (damaged, too large): not fetched again

    def __repr__(self) -> str:
        return (f"PartitionTopicInfo({self.topic}:{self.partition.node()} fetch {self.fetch_offset} "
                f"returned {self.returned_offset} done {self.done_offset})")


_SHUTDOWN = object()


class MessageStream:
    """Iterate ConsumedMessage; blocks for new messages (up to ``consumer.timeout.ms``);
    ends (StopIteration) once the connector shut down."""

    def __init__(self, chunk_queue_size: int, timeout_ms: int = -1, auto_finish: bool = True):
        self.queue = queue.Queue(chunk_queue_size)
        self._auto_finish = auto_finish
        self._timeout = None if timeout_ms < 0 else timeout_ms / 1000
        self._info = None
        self._payloads = ()
        self._offsets = ()
        self._first_offset = 0  # where the chunk's first message starts
        self._records = None  # a chunk of records (record batches): the MessageSet, for offsets, keys, headers
        self._position = 0
        self._finished = None  # (info, next offset) of the message handed out last
        self._ended = False
        self._lock = threading.Lock()  # one iterating thread at a time

    def __iter__(self):
        return self

    def __next__(self) -> ConsumedMessage:
        with self._lock:
            finished = self._finished
            if finished is not None:  # asked for the next one: the last one is done
                finished[0].done_offset = finished[1]
                self._finished = None
            while True:
                info = self._info
                if info is not None and self._position < len(self._payloads) and not info.released:
                    position = self._position
                    self._position = position + 1
                    next_offset = self._offsets[position]
                    info.returned_offset = next_offset
                    if self._auto_finish:
                        self._finished = (info, next_offset)
                    records = self._records
                    if records is not None:
                        return ConsumedMessage(info.topic, info.partition.broker_id, info.partition.partition,
                                               next_offset, self._payloads[position], None,
                                               records.record_offsets[position], records.keys[position],
                                               records.headers[position], records.timestamps[position])
                    return ConsumedMessage(info.topic, info.partition.broker_id, info.partition.partition,
                                           next_offset, self._payloads[position], None,
                                           self._offsets[position - 1] if position else self._first_offset)
                if self._ended:
                    raise StopIteration
                try:
                    item = self.queue.get(timeout=self._timeout)
                except queue.Empty:
                    raise ConsumerTimeoutError(f"no message within {self._timeout * 1000:.0f} ms") from None
                if item is _SHUTDOWN:
                    self._ended = True
                    self._info = None
                    continue
                self._info, message_set = item
                self._payloads, self._offsets, self._position = message_set.payloads, message_set.next_offsets, 0
                self._first_offset = message_set.offset
                self._records = message_set if message_set.record_batches else None

    def clear(self) -> None:
        """Drop every queued chunk (a rebalance: their partitions may move)."""
        while True:
            try:
                self.queue.get_nowait()
            except queue.Empty:
                return

    def end(self) -> None:
        """Wake the iterating thread and end the iteration."""
        self.clear()
        self.queue.put(_SHUTDOWN)


class EnvelopeStrippingStream(MessageStream):
    """A MessageStream whose messages come without their audit envelope (a payload
    without one passes through, ``envelope`` None); a damaged envelope raises
    ``mpbroker.clients.core.envelope.EnvelopeError`` (the message counts as handed out)."""

    def __next__(self) -> ConsumedMessage:
        message = super().__next__()
        opened = envelopes.open_envelope(message.payload)
        if opened is None:
            return message
        return message._replace(payload=opened.payload, envelope=opened)
