"""The producer: ``send(topic, messages, key=None)`` and ``close()``; which partition
each message goes to.

Messages are grouped per (broker, partition); each group becomes one message set
(one compressed wrapper message when the topic is compressed: ``produce_requests``)
and one request, delivered by ``delivery``: in fire-and-forget mode (``acks=none``,
0.7's PRODUCE) a sync send queues a broker's requests on the connection's write-behind
queue and returns, ``flush()`` waiting until they were written; in acknowledged mode
(``acks=append`` or ``flush``, PRODUCE_ACKED) they are pipelined and ``send`` returns
where each set was written. Retriable failures are sent again after
``retry.backoff.ms``, up to ``num.retries`` times (see ``delivery``). In sync mode
``send`` delivers before it returns; in async mode (``producer.type=async``) it queues,
and a background thread sends batches when ``batch.size`` messages are queued or the
oldest has waited ``queue.time`` ms (see ``async_sender``). ``close`` delivers what is
queued, then closes the connections (``broker_connections``).

``acks`` (``none``, ``append``, ``flush``, ``replicated``) or Kafka's
``request.required.acks`` (0 = none, 1 = append, -1 = replicated) says when a set
counts as delivered; ``replicated`` (durability 2) waits until every in-sync replica
of the partition has it.

A replicated topic (``zk.connect`` only: ``mpbroker.clients.core.leaders``) is
partitioned over its partitions 0..N-1 (the key picks the partition whatever leads
it) and each partition's sets go to its current leader, routed again when it changes
(``delivery``).

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
import weakref
from random import random

from mpbroker.clients.core.brokers import StaticBrokerPartitions, parse_broker_list
from mpbroker.clients.core.errors import BrokerUnavailableError, ProducerClosedError
from mpbroker.clients.core.settings import ProducerSettings
from mpbroker.clients.producer.async_sender import AsyncSender
from mpbroker.clients.producer.auditor import ProducerAuditor
from mpbroker.clients.producer.broker_connections import BrokerConnections
from mpbroker.clients.producer.callbacks import NoCallbacks, load_callbacks
from mpbroker.clients.producer.delivery import Delivery
from mpbroker.clients.producer.partitioner import default_partitioner, load_partitioner
from mpbroker.clients.producer.produce_requests import SendResult, build_requests, to_bytes
from mpbroker.clients.producer.stats import ProducerStats
from mpbroker.clients.producer.topic_spread import DEFAULT_WAIT_S, TopicSpreadTimeout, spread_topic
from mpbroker.clients.producer.zk_brokers import ZkBrokerPartitions
from mpbroker.codec import requests as rq
from mpbroker.codec.errors import MessageSizeTooLargeError
from mpbroker.codec.message import V1_OVERHEAD
from mpbroker.codec.topic_names import check_topic

log = logging.getLogger(__name__)

_BYTES_ONLY = frozenset({bytes})

_producers = weakref.WeakSet()  # every live Producer: after a fork, the child's start afresh


def _after_fork_in_child() -> None:
    for producer in list(_producers):
        producer._after_fork_in_child()


os.register_at_fork(after_in_child=_after_fork_in_child)


_new_tuple = tuple.__new__


class Producer:
    def __init__(self, properties=None, **overrides):
        self.settings = settings = ProducerSettings.from_properties(properties, **overrides)
        self._partition_for = load_partitioner(settings.partitioner_class)
        self.callbacks = load_callbacks(settings.callback_handler)
        self.auditor = None  # audit.envelope: stamps, counts and publishes (mpbroker.clients.producer.auditor)
        self.stats = ProducerStats()
        # The connection and write-behind queue of each broker; the short way's two
        # look-ups (``_send_plain``) bound here once.
        self._brokers = brokers = BrokerConnections(settings, self.stats)
        self._connection_for = brokers.connection_for
        self._writers = brokers.writers
        self._leaders = None  # zk.connect: the leaders of replicated topics (mpbroker.clients.core.leaders)
        if settings.zk_connect:  # after the checks that can refuse a setting: no session left open
            self._metadata = ZkBrokerPartitions(settings.zk_connect, settings.zk_sessiontimeout_ms,
                                                settings.zk_connectiontimeout_ms)
            self._leaders = self._metadata.leaders
            brokers.metadata = self._metadata
        else:
            broker_list = parse_broker_list(settings.broker_list)
            self._metadata = brokers.metadata = StaticBrokerPartitions(broker_list, self._connection_for,
                                                                       settings.topic_metadata_refresh_ms)
            for broker in broker_list:
                self._connection_for(broker.id)
        self._send_lock = threading.Lock()
        self._checked_topics = {}  # as given -> checked str
        self._spread = set()  # spread.topics: topics spread over the live brokers (or tried for long enough)
        self._closed = False
        self._sender = AsyncSender(self) if settings.producer_type == "async" else None
        if settings.audit_envelope:
            self.auditor = self.callbacks = ProducerAuditor(settings, self.callbacks, Producer)
        # Sync fire-and-forget without hooks: the write-behind queues (``delivery``; with
        # hooks, ``after_send`` would run before the write) and send()'s short way for one
        # message (``_send_plain``).
        self._plain_fire_and_forget = (self._sender is None and settings.acks == "none"
                                       and type(self.callbacks) is NoCallbacks)
        self._delivery = Delivery(settings, self.stats, brokers, self._leaders, self._plain_fire_and_forget)
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
                payloads = [to_bytes(message) for message in messages]
        else:
            payloads = [messages if type(messages) is bytes else to_bytes(messages)]
        if type(self.callbacks) is NoCallbacks:
            items = [(topic, key, payload) for payload in payloads]
        else:
            before_enqueue = self.callbacks.before_enqueue
            items = []
            for payload in payloads:
                payload = before_enqueue(topic, key, payload)
                if payload is not None:
                    items.append((topic, key, to_bytes(payload)))
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
        return self._brokers.flush_writers(timeout)

    def close(self, timeout: float | None = None) -> bool:
        """Deliver what is queued, then close every connection. False if the queue could
        not be delivered within ``timeout`` seconds (the sender thread goes on with it)."""
        if self._closed:
            return True
        self._closed = True
        if self._sender is not None and not self._sender.close(timeout):
            return False
        written = self._brokers.close_writers(timeout)
        if self.auditor is not None:
            self.auditor.close()  # after the queue was delivered: publishes every count
        self._brokers.close()
        close_metadata = getattr(self._metadata, "close", None)
        if close_metadata is not None:
            close_metadata()  # zk.connect: ends the ZooKeeper session
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

    def _after_fork_in_child(self) -> None:
        """In a child process after ``fork``: any lock may have been held at the fork, and
        the connections and write-behind queues are the parent's. Start afresh: a new send
        lock, the connections' own reset (``BrokerConnections.after_fork_in_child``)."""
        self._send_lock = threading.Lock()
        self._brokers.after_fork_in_child()

    # --- where messages go (sync callers and the async sender) ----------------------

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
        """Group ``items`` per (broker, topic, partition) as the partitioner says, make
        each group's requests and hand them to ``delivery``."""
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
            requests = build_requests(topic, broker_id, partition, payloads, self.settings.compresses(topic),
                                      self.settings.max_message_size)
            if topic in replicated:
                for request in requests:
                    request.replicated = True
                to_leaders.extend(requests)
            else:
                by_broker.setdefault(broker_id, []).extend(requests)
        return self._delivery.send_all(by_broker, to_leaders)

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
        nothing to group, once its connection's write-behind queue runs (``delivery``);
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
