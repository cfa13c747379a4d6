"""The producer: ``send(topic, messages, key=None)`` and ``close()``.

Messages are grouped per (broker, partition); each group becomes one message set
(one compressed wrapper message when the topic is compressed) and one request. In
fire-and-forget mode (``acks=none``, 0.7's PRODUCE) a sync send queues a broker's
requests on the connection's write-behind queue and returns: a thread writes them in
order, the requests issued while a write is under way sharing the next write
(``write_behind``: one system call per message was most of a batch-1 send's time).
``flush()`` waits until they were written; what could not be written is raised by the
next ``send`` or ``flush`` (BrokerUnavailableError). A connection that is down is
written inline, so a broker that cannot be reached fails the send at once. In
acknowledged mode (``acks=append`` or ``flush``, PRODUCE_ACKED)
they are pipelined on the connection and their answers read in order, and ``send``
returns where each set was written.

A request whose partition's worker is restarting (error 7), or whose connection
broke, is sent again after ``retry.backoff.ms``, up to ``num.retries`` times; other
errors raise at once. In sync mode ``send`` delivers before it returns; in async mode
(``producer.type=async``) it queues, and a background thread sends batches when
``batch.size`` messages are queued or the oldest has waited ``queue.time`` ms (see
``async_sender``). ``close`` delivers what is queued, then closes the connections.

``acks`` (``none``, ``append``, ``flush``, ``replicated``) or Kafka's
``request.required.acks`` (0 = none, 1 = append, -1 = replicated) says when a set
counts as delivered; ``replicated`` (durability 2) waits until every in-sync replica
of the partition has it.

A replicated topic (``zk.connect`` only: ``mpbroker.clients.core.leaders``) is
partitioned over its partitions 0..N-1 (the key picks the partition whatever leads
it) and each partition's sets go to its current leader. NOT_LEADER, NOT_ENOUGH_REPLICAS,
a broken connection or no leader at all: the request is routed again after up to
``retry.backoff.ms`` (a leader change seen by the watches ends the wait early) and a
fresh read of the leaders, up to ``num.retries`` times; then it fails
(LeaderNotAvailableError, NotLeaderError, NotEnoughReplicasError, BrokerUnavailableError).

The brokers and a topic's (broker, partition) pairs come from a static ``broker.list``
(``brokers.StaticBrokerPartitions``: partitions found by probing) or, with
``zk.connect``, from ZooKeeper (``zk_brokers.ZkBrokerPartitions``: kept current by
watches, so brokers that join are used and brokers that leave drop out; with no
broker registered a send waits up to ``zk.connectiontimeout.ms`` for one). A broker's
connection is made when it is first used. With ``zk.connect`` a new topic lands, as
in 0.7, on the brokers its first batch reached; ``spread.topics=true`` (or
``spread_topic``) first creates it on every live broker (``topic_spread``).

With ``audit.envelope=true`` every message is stamped with its creation time, host and
producer, and the delivered messages are counted per window and published to the
audit topic (``producer_audit``); without it nothing of that runs.
"""

import logging
import os
import threading
import time
import weakref
from random import random
from typing import NamedTuple

from mpbroker.clients.core.brokers import StaticBrokerPartitions, parse_broker_list
from mpbroker.clients.core.connection import BrokerConnection
from mpbroker.clients.core.errors import (
    LEADER_RETRY_CODES,
    RETRIABLE_CODES,
    BrokerUnavailableError,
    ClientError,
    LeaderNotAvailableError,
    ProducerClosedError,
    error_for,
)
from mpbroker.clients.core.settings import ProducerSettings
from mpbroker.clients.core.write_behind import WriteBehind
from mpbroker.clients.producer.async_sender import AsyncSender
from mpbroker.clients.producer.auditor import ProducerAuditor
from mpbroker.clients.producer.callbacks import NoCallbacks, load_callbacks
from mpbroker.clients.producer.partitioner import default_partitioner, load_partitioner
from mpbroker.clients.producer.topic_spread import DEFAULT_WAIT_S, TopicSpreadTimeout, spread_topic
from mpbroker.clients.producer.zk_brokers import ZkBrokerPartitions
from mpbroker.codec import requests as rq
from mpbroker.codec import responses as rs
from mpbroker.codec.compression import compress
from mpbroker.codec.errors import ErrorCode, MessageSizeTooLargeError, MPBrokerError
from mpbroker.codec.message import V1_OVERHEAD, encode_message, encode_message_set
from mpbroker.codec.requests import Durability
from mpbroker.codec.topic_names import check_topic

log = logging.getLogger(__name__)

_DURABILITY = {"append": Durability.APPEND, "flush": Durability.FLUSH, "replicated": Durability.REPLICATED}
_LEADER_RETRY = RETRIABLE_CODES | LEADER_RETRY_CODES
_BYTES_ONLY = frozenset({bytes})

_producers = weakref.WeakSet()  # every live Producer: after a fork, the child's start afresh


def _after_fork_in_child() -> None:
    for producer in list(_producers):
        producer._after_fork_in_child()


os.register_at_fork(after_in_child=_after_fork_in_child)


_new_tuple = tuple.__new__


class SendResult(NamedTuple):
    topic: str
    broker_id: int
    partition: int
    messages: int
    offset: int | None  # where the set was written (acknowledged modes), else None
    next_offset: int | None  # the log end after it (acknowledged modes), else None


class ProducerStats:
    """Counters of a producer. Each has one writer at a time (the thread holding the
    send lock, or the async sender thread; callers only add drops), so no lock.
    Fire-and-forget messages count as sent once handed to their connection (a sync
    producer's write-behind queue); one that then could not be written counts as failed
    as well."""

    def __init__(self):
        self.messages_sent = 0
        self.bytes_sent = 0
        self.requests_sent = 0
        self.retries = 0
        self.messages_failed = 0
        self.messages_dropped = 0  # async queue full

    def as_dict(self) -> dict:
        return dict(vars(self))


class _Request:
    """One produce request: a message set for one (broker, topic, partition). A
    replicated topic's request goes to whichever broker leads its partition when it is
    sent (``broker_id``: the leader when it was made)."""

    __slots__ = ("topic", "broker_id", "partition", "payloads", "message_set", "replicated", "error")

    def __init__(self, topic, broker_id, partition, payloads, message_set, replicated=False):
        self.topic = topic
        self.broker_id = broker_id
        self.partition = partition
        self.payloads = payloads
        self.message_set = message_set
        self.replicated = replicated
        self.error = 0  # the retriable error code of its last answer


def _to_bytes(message) -> bytes:
    if isinstance(message, (bytes, bytearray, memoryview)):
        return bytes(message)
    if isinstance(message, str):
        return message.encode("utf-8")
    raise TypeError(f"a message is bytes or str, not {type(message).__name__}")


class Producer:
    def __init__(self, properties=None, **overrides):
        self.settings = settings = ProducerSettings.from_properties(properties, **overrides)
        self._partition_for = load_partitioner(settings.partitioner_class)
        self.callbacks = load_callbacks(settings.callback_handler)
        self.auditor = None  # audit.envelope: stamps, counts and publishes (mpbroker.clients.producer.auditor)
        self._connections = {}  # broker id -> (lock, BrokerConnection), made on first use
        self._writers = {}  # broker id -> WriteBehind: sync fire-and-forget requests (write_behind)
        self._connections_lock = threading.Lock()
        self._leaders = None  # zk.connect: the leaders of replicated topics (mpbroker.clients.core.leaders)
        if settings.zk_connect:  # after the checks that can refuse a setting: no session left open
            self._metadata = ZkBrokerPartitions(settings.zk_connect, settings.zk_sessiontimeout_ms,
                                                settings.zk_connectiontimeout_ms)
            self._leaders = self._metadata.leaders
        else:
            brokers = parse_broker_list(settings.broker_list)
            self._metadata = StaticBrokerPartitions(brokers, self._connection_for,
                                                    settings.topic_metadata_refresh_ms)
            for broker in brokers:
                self._connection_for(broker.id)
        self.stats = ProducerStats()
        self._send_lock = threading.Lock()
        self._checked_topics = {}  # as given -> checked str
        self._spread = set()  # spread.topics: topics spread over the live brokers (or tried for long enough)
        self._closed = False
        self._sender = AsyncSender(self) if settings.producer_type == "async" else None
        if settings.audit_envelope:
            self.auditor = self.callbacks = ProducerAuditor(settings, self.callbacks, Producer)
        # Sync fire-and-forget without hooks: the write-behind queues (``_write_behind``; with
        # hooks, ``after_send`` would run before the write) and send()'s short way for one
        # message (``_send_plain``).
        self._plain_fire_and_forget = (self._sender is None and settings.acks == "none"
                                       and type(self.callbacks) is NoCallbacks)
        self._compressed = {}  # topic -> whether it is compressed (the settings say once)
        self._plain_topics = set()  # topics that take the short way for good (``_plain``)
        _producers.add(self)

    # --- public -----------------------------------------------------------------

    def send(self, topic: str, messages, key=None):
        """Send one message (bytes or str) or a list of them, all with ``key``.

        Sync: delivered when this returns (``acks=none``: queued for its connection's
        writer, in order; ``flush()`` waits until it was written); the result is a list
        of SendResult (offsets filled in for acknowledged modes). Async: queued; returns
        None (QueueFullError if the queue stayed full for ``queue.enqueueTimeout.ms``)."""
        if self._closed:
            raise ProducerClosedError("send() after close()")
        checked = self._checked_topics.get(topic)
        if checked is None:
            checked = self._checked_topics[topic] = check_topic(topic)  # str, also for a bytes name
        topic = checked
        if type(messages) is bytes and (topic in self._plain_topics or self._plain_fire_and_forget and self._plain(topic)):
            with self._send_lock:
                return self._send_plain(topic, key, messages)
        if isinstance(messages, (list, tuple)):
            if set(map(type, messages)) <= _BYTES_ONLY:  # the usual case, checked in C
                payloads = list(messages)
            else:
                payloads = [_to_bytes(message) for message in messages]
        else:
            payloads = [messages if type(messages) is bytes else _to_bytes(messages)]
        if type(self.callbacks) is NoCallbacks:
            items = [(topic, key, payload) for payload in payloads]
        else:
            before_enqueue = self.callbacks.before_enqueue
            items = []
            for payload in payloads:
                payload = before_enqueue(topic, key, payload)
                if payload is not None:
                    items.append((topic, key, _to_bytes(payload)))
            payloads = [payload for _, _, payload in items]
        limit = self.settings.max_message_size
        longest = max(map(len, payloads), default=0)
        if longest > limit:
            raise MessageSizeTooLargeError(
                f"a {longest}-byte message exceeds max.message.size ({limit}); nothing was sent")
        if self._sender is not None:
            for item in items:
                self._sender.enqueue(item)
            return None
        with self._send_lock:
            return self.deliver(items)

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until everything queued so far was delivered (or failed); False if
        ``timeout`` seconds passed first. Async: the send queue; sync ``acks=none``: the
        write-behind queues, raising BrokerUnavailableError for messages that could not
        be written."""
        if self._closed:
            raise ProducerClosedError("flush() after close()")
        if self._sender is not None:
            return self._sender.flush(timeout)
        deadline = None if timeout is None else time.monotonic() + timeout
        done = True
        writers = list(self._writers.items())
        for _, writer in writers:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            done = writer.flush(left) and done
        for broker_id, writer in writers:  # once every queue was waited for
            self._raise_write_failure(broker_id, writer, "")
        return done

    def close(self, timeout: float | None = None) -> bool:
        """Deliver what is queued, then close every connection. False if the queue could
        not be delivered within ``timeout`` seconds (the sender thread goes on with it)."""
        if self._closed:
            return True
        self._closed = True
        if self._sender is not None and not self._sender.close(timeout):
            return False
        written = self._close_writers(timeout)
        if self.auditor is not None:
            self.auditor.close()  # after the queue was delivered: publishes every count
        for lock, connection in list(self._connections.values()):
            with lock:
                connection.close()
        close_metadata = getattr(self._metadata, "close", None)
        if close_metadata is not None:
            close_metadata()  # zk.connect: ends the ZooKeeper session
        return written

    def _close_writers(self, timeout: float | None) -> bool:
        """Write what the write-behind queues hold (sync fire-and-forget) and end their
        threads; False if some of it was not written (logged and counted as failed)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        written = True
        for broker_id, writer in list(self._writers.items()):
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not writer.close(left):
                written = False
            failed, failure = writer.take_failure()
            if failed:
                self.stats.messages_failed += failed
                log.error("%d fire-and-forget message(s) to broker %d could not be written: %s",
                          failed, broker_id, failure)
        self._writers.clear()
        return written

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def partitions_for(self, topic: str) -> list:
        """The (broker id, partition) pairs ``topic`` is spread over (a replicated topic:
        (leader id, partition), -1 for a partition without a leader now)."""
        return self._metadata.partitions(topic)

    def spread_topic(self, topic: str, timeout_s: float = DEFAULT_WAIT_S) -> list:
        """Make ``topic`` exist on every live broker and wait (up to ``timeout_s``) until
        each registered it, so that it is spread over all their partitions (``zk.connect``;
        with a static broker list every broker's partitions are used anyway). Returns the
        topic's (broker id, partition) pairs; raises BrokerUnavailableError without a live
        broker, TopicSpreadTimeout if some broker did not register it in time."""
        topic = check_topic(topic)
        if not isinstance(self._metadata, ZkBrokerPartitions):
            return self._metadata.partitions(topic)
        return spread_topic(self._metadata, self._connection_for, topic, timeout_s)

    # --- delivery (sync callers and the async sender) ----------------------------

    def _connection_for(self, broker_id: int, broker=None) -> tuple:
        """(lock, BrokerConnection) of a broker (``broker``: its address, else the one
        discovery knows), made on first use; a broker that is registered again at another
        address (zk.connect) gets a new connection."""
        broker = broker or self._metadata.brokers.get(broker_id)
        entry = self._connections.get(broker_id)
        if entry is not None and (broker is None or (entry[1].host == broker.host and entry[1].port == broker.port)):
            return entry
        if broker is None:
            raise BrokerUnavailableError(f"broker {broker_id} is not registered any more")
        with self._connections_lock:
            old = self._connections.get(broker_id)
            if old is not None and (old[1].host, old[1].port) == (broker.host, broker.port):
                return old
            settings = self.settings
            entry = self._connections[broker_id] = (threading.Lock(), BrokerConnection(
                broker.host, broker.port, connect_timeout_ms=settings.connect_timeout_ms,
                socket_timeout_ms=settings.socket_timeout_ms, backoff_ms=settings.retry_backoff_ms))
        if old is not None:
            with old[0]:
                old[1].close()
        return entry

    def _forget_connection(self, broker_id: int) -> None:
        """Drop a broker's connection (made again on its next use), and its write-behind
        queue once that is written."""
        self._retire_writer(broker_id)
        with self._connections_lock:
            entry = self._connections.pop(broker_id, None)
        if entry is not None:
            with entry[0]:
                entry[1].close()

    def _retire_writer(self, broker_id: int) -> None:
        """Close the broker's write-behind queue (its requests written first, up to
        ``socket.timeout.ms``); what it could not write is counted as failed and logged."""
        writer = self._writers.pop(broker_id, None)
        if writer is None:
            return
        writer.close(self.settings.socket_timeout_ms / 1000)
        failed, failure = writer.take_failure()
        if failed:
            self.stats.messages_failed += failed
            log.error("%d fire-and-forget message(s) to broker %d could not be written: %s",
                      failed, broker_id, failure)

    def _after_fork_in_child(self) -> None:
        """In a child process after ``fork``: the connections are the parent's (two
        processes writing one socket would mix their requests), the writer threads and
        their queues too, and any lock may have been held at the fork. Start afresh:
        new locks, every connection closed here (made again on first use), the
        write-behind queues empty."""
        self._send_lock = threading.Lock()
        self._connections_lock = threading.Lock()
        for broker_id, (_, connection) in list(self._connections.items()):
            connection.close()  # this process's descriptor only: the parent's socket stays open
            lock = threading.Lock()
            self._connections[broker_id] = (lock, connection)
            writer = self._writers.get(broker_id)
            if writer is not None:
                writer.reset_after_fork(lock)

    def deliver(self, items) -> list:
        """Send ``[(topic, key, payload), ...]``; return SendResults, grouped by broker.

        If some requests fail, the others are still delivered; the first error is raised
        with ``results`` (what was delivered) and ``failed_messages`` set on it."""
        if not items:
            return []
        items = self.callbacks.before_send(items)
        try:
            results = self._deliver(items)
        except Exception as exc:
            self.stats.messages_failed += getattr(exc, "failed_messages", len(items))
            self.callbacks.on_error(items, exc)
            raise
        self.callbacks.after_send(items, results)
        return results

    def _deliver(self, items) -> list:
        groups = {}
        pairs_by_topic = {}
        keyless = {}  # topic -> the pair this batch's keyless messages go to (default partitioner)
        replicated = set()  # the batch's replicated topics: sent to their partitions' leaders
        sticky = self._partition_for is default_partitioner
        last_topic = last_key = bucket = None
        for topic, key, payload in items:
            # The default partitioner sends a (topic, key) to one pair per batch: a run of
            # items with the same topic and key (a list given to send()) joins the last group.
            if sticky and bucket is not None and topic is last_topic and key is last_key:
                bucket.append(payload)
                continue
            pairs = pairs_by_topic.get(topic)
            if pairs is None:
                if self._leaders is not None and self._leaders.is_replicated(topic):
                    replicated.add(topic)
                elif self.settings.spread_topics and topic not in self._spread:
                    self._spread_first(topic)
                pairs = pairs_by_topic[topic] = self._metadata.partitions(topic)
                if not pairs:
                    raise BrokerUnavailableError(f"no broker has a partition of topic {topic!r}")
            if key is None and sticky:
                pair = keyless.get(topic)
                if pair is None:
                    pair = keyless[topic] = self._pair_for(topic, key, pairs)
            else:
                pair = self._pair_for(topic, key, pairs)
            bucket = groups.setdefault((pair[0], topic, pair[1]), [])
            bucket.append(payload)
            last_topic, last_key = topic, key
        by_broker = {}
        to_leaders = []
        for (broker_id, topic, partition), payloads in groups.items():
            requests = self._requests(topic, broker_id, partition, payloads)
            if topic in replicated:
                for request in requests:
                    request.replicated = True
                to_leaders.extend(requests)
            else:
                by_broker.setdefault(broker_id, []).extend(requests)
        results = []
        first_error = None
        failed = 0
        if to_leaders:
            delivered_before = len(results)
            try:
                self._send_to_leaders(to_leaders, results)
            except Exception as exc:
                delivered = sum(result.messages for result in results[delivered_before:])
                failed += sum(len(request.payloads) for request in to_leaders) - delivered
                first_error = exc
        for broker_id, broker_requests in by_broker.items():
            delivered_before = len(results)
            try:
                self._send_to_broker(broker_id, broker_requests, results)
            except Exception as exc:
                delivered = sum(result.messages for result in results[delivered_before:])
                failed += sum(len(request.payloads) for request in broker_requests) - delivered
                first_error = first_error or exc
                if isinstance(exc, BrokerUnavailableError):
                    self._metadata.invalidate_all()  # re-probe: a dead broker's partitions drop out
        if first_error is not None:
            first_error.results = results
            first_error.failed_messages = failed
            raise first_error
        return results

    def _pair_for(self, topic: str, key, pairs: list):
        """The (broker id, partition) of ``pairs`` a message with ``key`` goes to: the
        partitioner's choice, or a random one for no key with the default partitioner."""
        count = len(pairs)
        if key is None and self._partition_for is default_partitioner:
            return pairs[int(random() * count)]
        index = self._partition_for(key, count)
        if not 0 <= index < count:
            raise ValueError(f"the partitioner chose partition {index!r} of topic {topic!r}, "
                             f"which has {count} (valid: 0 to {count - 1})")
        return pairs[index]

    def _spread_first(self, topic: str) -> None:
        """spread.topics: before this producer's first send of ``topic``."""
        try:
            self.spread_topic(topic)
        except TopicSpreadTimeout as exc:  # send anyway: to the brokers that have it
            log.warning("spreading topic %s: %s", topic, exc)
        self._spread.add(topic)

    def _requests(self, topic: str, broker_id: int, partition: int, payloads: list) -> list:
        """The request(s) for one group: compressed as one wrapper message when the topic
        is compressed, split in halves while a wrapper would exceed max.message.size."""
        codec = self.settings.compresses(topic)
        if not codec:
            message_set = encode_message(payloads[0]) if len(payloads) == 1 else encode_message_set(payloads)
            return [_Request(topic, broker_id, partition, payloads, message_set)]
        compressed = compress(codec, encode_message_set(payloads))
        if len(compressed) <= self.settings.max_message_size:
            return [_Request(topic, broker_id, partition, payloads, encode_message(compressed, codec))]
        if len(payloads) == 1:  # incompressible and near the limit: send it as it is
            return [_Request(topic, broker_id, partition, payloads, encode_message_set(payloads))]
        half = len(payloads) // 2
        return (self._requests(topic, broker_id, partition, payloads[:half])
                + self._requests(topic, broker_id, partition, payloads[half:]))

    def _plain(self, topic: str) -> bool:
        """Whether ``topic`` may take the short way: not compressed, not replicated (it may
        become so: asked each time, from the watched leaders), spread if it is to be. With
        no leaders to watch (no zk.connect) a yes is for good (``_plain_topics``)."""
        compressed = self._compressed.get(topic)
        if compressed is None:
            compressed = self._compressed[topic] = bool(self.settings.compresses(topic))
        if compressed or (self._leaders is not None and self._leaders.is_replicated(topic)):
            return False
        plain = not self.settings.spread_topics or topic in self._spread
        if plain and self._leaders is None:  # and it cannot stop being plain: asked no more
            self._plain_topics.add(topic)
        return plain

    def _send_plain(self, topic: str, key, payload: bytes) -> list:
        """``send`` of one message on the short way: what ``deliver`` does for it, with
        nothing to group, once its connection's write-behind queue runs (``_write_behind``);
        anything else (no queue yet, a connection down, a failure to raise) goes the general
        way."""
        try:
            if len(payload) > self.settings.max_message_size:
                raise MessageSizeTooLargeError(f"a {len(payload)}-byte message exceeds max.message.size "
                                               f"({self.settings.max_message_size}); nothing was sent")
            pairs = self._metadata.partitions(topic)
            if not pairs:
                raise BrokerUnavailableError(f"no broker has a partition of topic {topic!r}")
            if key is None and self._partition_for is default_partitioner:  # _pair_for's usual case, inline
                broker_id, partition = pairs[int(random() * len(pairs))]
            else:
                broker_id, partition = self._pair_for(topic, key, pairs)
            lock, connection = self._connection_for(broker_id)
            writer = self._writers.get(broker_id)
            short = not (writer is None or writer.connection is not connection or writer.failed
                         or not connection.connected)
            if short:
                parts = rq.one_message_produce_parts(topic, partition, payload)
                writer.submit(parts, 1, len(parts[0]) + len(payload))
        except MessageSizeTooLargeError:
            raise
        except Exception:
            self.stats.messages_failed += 1
            raise
        if not short:
            return self.deliver([(topic, key, payload)])  # counts its own failures
        stats = self.stats
        stats.requests_sent += 1
        stats.messages_sent += 1
        stats.bytes_sent += len(payload) + V1_OVERHEAD  # the message set's bytes
        return [_new_tuple(SendResult, (topic, broker_id, partition, 1, None, None))]  # SendResult(...), one call less

    def _send_to_broker(self, broker_id: int, requests: list, results: list) -> None:
        """Deliver ``requests`` to one broker, retrying what failed retriably; the
        SendResults of what got through are appended to ``results`` as it goes."""
        lock, connection = self._connection_for(broker_id)
        if self._plain_fire_and_forget and self._write_behind(broker_id, lock, connection, requests, results):
            return
        last_error = None
        for attempt in range(self.settings.num_retries + 1):
            if attempt:
                self.stats.retries += len(requests)
                time.sleep(self.settings.retry_backoff_ms / 1000)
            try:
                with lock:
                    requests = self._send_once(connection, broker_id, requests, results)
            except BrokerUnavailableError as exc:
                last_error = exc  # resend them all (a fire-and-forget resend may duplicate)
                continue
            if not requests:
                return
            last_error = BrokerUnavailableError(
                f"{len(requests)} request(s) to broker {broker_id}: partition unavailable (its worker is restarting)")
        raise last_error

    def _write_behind(self, broker_id: int, lock, connection, requests: list, results: list) -> bool:
        """Sync fire-and-forget: queue ``requests`` on the broker's write-behind queue
        (``write_behind``: requests issued while a write is under way share the next
        one); True if queued. False while the connection is down and nothing is queued:
        the caller then writes them itself, so that a broker it cannot reach fails this
        send at once. Raises, first, the failure of earlier queued requests."""
        writer = self._writers.get(broker_id)
        if writer is not None and writer.connection is not connection:  # the broker moved
            self._retire_writer(broker_id)
            writer = None
        if writer is not None and writer.failed:
            self._raise_write_failure(broker_id, writer, "; the messages of this call were not sent")
        if not connection.connected and (writer is None or not writer.busy):
            return False
        if writer is None:
            writer = self._writers[broker_id] = WriteBehind(lock, connection, self.settings.num_retries,
                                                            self.settings.retry_backoff_ms / 1000)
        buffers = []
        messages = 0
        for request in requests:
            buffers += rq.produce_parts(request.topic, request.partition, request.message_set)
            count = len(request.payloads)
            messages += count
            results.append(SendResult(request.topic, broker_id, request.partition, count, None, None))
        writer.submit(buffers, messages)
        self._count(requests)
        return True

    def _raise_write_failure(self, broker_id: int, writer, what_else: str) -> None:
        """Raise BrokerUnavailableError for the messages ``writer`` could not write, if
        any (counted as failed here; the broker's partitions are probed again)."""
        failed, failure = writer.take_failure()
        if not failed:
            return
        self.stats.messages_failed += failed
        self._metadata.invalidate_all()
        raise BrokerUnavailableError(f"{failed} fire-and-forget message(s) sent earlier to broker {broker_id} "
                                     f"could not be written ({failure}){what_else}") from failure

    def _send_to_leaders(self, requests: list, results: list) -> None:
        """Deliver a replicated topic's ``requests``, each to its partition's current leader
        (see the module docstring); the SendResults of what got through are appended to
        ``results`` as it goes. Raises the last reason a request could not be delivered
        after the retries, or the first error no retry can cure."""
        leaders = self._leaders
        pending = requests
        last_error = refused = None
        for attempt in range(self.settings.num_retries + 1):
            if attempt:
                self.stats.retries += len(pending)
                leaders.wait_for_change(self.settings.retry_backoff_ms / 1000)
                for topic in {request.topic for request in pending}:
                    leaders.refresh(topic)
            by_leader = {}
            retry = []
            for request in pending:
                try:
                    broker = leaders.require_leader(request.topic, request.partition)
                except LeaderNotAvailableError as exc:
                    last_error = exc
                    retry.append(request)
                    continue
                by_leader.setdefault(broker, []).append(request)
            for broker, broker_requests in by_leader.items():
                try:
                    lock, connection = self._connection_for(broker.id, broker)
                    writer = self._writers.get(broker.id)
                    if writer is not None:  # a topic that became replicated: what was queued goes first
                        writer.flush()
                    with lock:
                        again = self._send_once(connection, broker.id, broker_requests, results, _LEADER_RETRY)
                except BrokerUnavailableError as exc:
                    last_error = exc  # the leader died or moved: resend them all once it is known again
                    retry.extend(broker_requests)
                    self._forget_connection(broker.id)  # the next try connects afresh, without a back-off
                    continue
                except (MPBrokerError, ClientError) as exc:  # refused for good (too large, invalid, ...)
                    refused = refused or exc
                    continue
                if again:
                    last_error = error_for(again[-1].error, f"produce to {again[-1].topic}-{again[-1].partition} "
                                                            f"(broker {broker.id})")
                retry.extend(again)
            pending = retry
            if not pending:
                break
        if pending:
            raise last_error
        if refused is not None:
            raise refused

    def _send_once(self, connection, broker_id: int, requests: list, results: list,
                   retry_codes=RETRIABLE_CODES) -> list:
        """One attempt; appends SendResults of what got through; returns what to retry
        (the requests answered with an error in ``retry_codes``)."""
        acks = self.settings.acks
        buffers = []
        if acks == "none":
            for request in requests:
                buffers.extend(rq.produce_parts(request.topic, request.partition, request.message_set))
            connection.send(*buffers)
            self._count(requests)
            results.extend(SendResult(r.topic, broker_id, r.partition, len(r.payloads), None, None)
                           for r in requests)
            return []
        durability = _DURABILITY[acks]
        for request in requests:
            buffers.extend(rq.produce_acked_parts(durability, request.topic, request.partition, request.message_set))
        connection.send(*buffers)  # pipelined: answers come back in request order
        acknowledged, retry, failure = [], [], None
        for index, request in enumerate(requests):
            try:
                ack = rs.decode_produce_ack(connection.receive())
            except BrokerUnavailableError:
                retry.extend(requests[index:])  # their answers went with the connection
                break
            if ack.error == ErrorCode.NO_ERROR:
                acknowledged.append(request)
                results.append(SendResult(request.topic, broker_id, ack.partition, len(request.payloads),
                                          ack.offset, ack.next_offset))
            elif ack.error in retry_codes:
                request.error = ack.error
                retry.append(request)
            elif failure is None:
                failure = error_for(ack.error, f"produce to {request.topic}-{request.partition}")
        self._count(acknowledged)
        if failure is not None:
            raise failure
        return retry

    def _count(self, requests) -> None:
        stats = self.stats
        stats.requests_sent += len(requests)
        for request in requests:
            stats.messages_sent += len(request.payloads)
            stats.bytes_sent += len(request.message_set)
