"""The consumer connector's fetchers: one thread per broker, one MULTIFETCH per round
for every partition the connector owns on that broker, each answer queued as a chunk
on the stream the partition is assigned to.

A fetch that brings nothing waits ``backoff.increment.ms``; an answer holding only
part of one message grows that partition's fetch size to hold it (up to
``max.fetch.size``) so a large message is never skipped. A message that cannot be read
-- damaged, or larger than ``max.fetch.size`` -- is logged once (after the valid
messages before it were queued) and its partition is not fetched again until the next
rebalance: nothing after it is skipped over, and the other partitions go on.
OffsetOutOfRange restarts the partition from the
smallest or largest offset (``autooffset.reset``) with a warning; a broker that cannot
be reached is retried with a growing back-off. A full stream queue blocks the fetcher
(back-pressure), but never past ``stop()``.

The partitions of replicated topics have no fixed broker: one ``LeaderFetcher`` thread
fetches all of them, each round one MULTIFETCH per current leader (from
``mpbroker.clients.core.leaders``, kept current by watches). A part answered NOT_LEADER,
a leader that cannot be reached or a partition without a leader has its topic's leaders
read again and is fetched in a later round from whoever leads it then; the other
leaders' partitions go on meanwhile.
"""

import logging
import queue
import threading
import time

from mpbroker.clients.consumer.leader_consumer import LeaderConsumer
from mpbroker.clients.consumer.simple_consumer import SimpleConsumer
from mpbroker.clients.core.errors import BrokerUnavailableError, ClientError
from mpbroker.codec.errors import ErrorCode, MessageSizeTooLargeError, MPBrokerError, NotLeaderError

log = logging.getLogger(__name__)

MAX_UNREACHABLE_BACKOFF_S = 5.0
PUT_SLICE_S = 0.1
REFRESH_S = 0.5  # the LeaderFetcher reads a topic's leaders again at most this often


class BrokerFetcher(threading.Thread):
    def __init__(self, broker, infos, settings):
        super().__init__(name=f"mpbroker-fetcher-{broker.id}", daemon=True)
        self.broker = broker
        self.infos = list(infos)
        self.settings = settings
        self._stop_event = threading.Event()
        self._consumer = SimpleConsumer(broker.host, broker.port, fetch_size=settings.fetch_size,
                                        max_fetch_size=settings.max_fetch_size,
                                        socket_timeout_ms=settings.socket_timeout_ms)

    def stop(self) -> None:
        self._stop_event.set()

    def run(self) -> None:
        backoff = self.settings.backoff_increment_ms / 1000
        unreachable_backoff = 0.1
        try:
            while not self._stop_event.is_set():
                try:
                    queued = self._round()
                    unreachable_backoff = 0.1
                except (BrokerUnavailableError, OSError, ClientError, MPBrokerError) as exc:
                    log.warning("fetching from %s failed: %s; retrying in %.1fs", self._source(), exc,
                                unreachable_backoff)
                    self._close_consumers()
                    self._stop_event.wait(unreachable_backoff)
                    unreachable_backoff = min(MAX_UNREACHABLE_BACKOFF_S, unreachable_backoff * 2)
                    continue
                if not queued:
                    self._stop_event.wait(backoff)
        finally:
            self._close_consumers()

    def _source(self) -> str:
        return f"broker {self.broker.id} ({self.broker.host}:{self.broker.port})"

    def _close_consumers(self) -> None:
        self._consumer.close()

    def _round(self) -> int:
        return self._fetch(self._consumer, [info for info in self.infos if not info.released and not info.stuck])

    def _fetch(self, consumer, infos) -> int:
        """One MULTIFETCH of ``infos`` from ``consumer``'s broker; the chunks queued."""
        for info in infos:
            if info.fetch_offset < 0:  # no committed offset: autooffset.reset
                self._reset(consumer, info, "has no committed offset")
        fetches = [(info.topic, info.partition.partition, info.fetch_offset, info.fetch_size) for info in infos]
        if not fetches:
            return 0
        queued = 0
        for info, message_set in zip(infos, consumer.multifetch(fetches)):
            if self._stop_event.is_set() or info.released:
                break
            if message_set.error:
                self._on_error(consumer, info, message_set.error)
                continue
            if not message_set.payloads:
                if message_set.size:  # a message larger than the fetch size, or one that cannot be read
                    self._grow(consumer, info, message_set)
                continue
            info.fetch_size = self.settings.fetch_size
            info.last_error = None
            if not self._put(info, message_set):
                break
            info.fetch_offset = message_set.next_offset
            queued += 1
            if message_set.corrupt is not None:  # the messages before it are queued
                self._give_up(info, message_set.corrupt)
        return queued

    def _put(self, info, message_set) -> bool:
        while not self._stop_event.is_set():
            try:
                info.queue.put((info, message_set), timeout=PUT_SLICE_S)
                return True
            except queue.Full:
                if info.released:
                    return False
        return False

    def _grow(self, consumer, info, message_set) -> None:
        try:
            info.fetch_size = consumer.grow_fetch_size(message_set, info.fetch_size)
        except (BrokerUnavailableError, NotLeaderError):
            raise
        except (ClientError, MPBrokerError) as exc:  # damaged, too large, not a message start
            self._give_up(info, exc)

    def _give_up(self, info, exc) -> None:
        """The message at ``info.fetch_offset`` cannot be read: say so, stop fetching
        the partition (its offset stays there: nothing is skipped)."""
        remedy = " (a larger max.fetch.size reads it)" if isinstance(exc, MessageSizeTooLargeError) else ""
        info.stuck = f"{exc}{remedy}"
        log.error("%s-%s: %s; not consuming this partition any further", info.topic, info.partition.node(),
                  info.stuck)

    def _reset(self, consumer, info, why: str) -> None:
        """Start ``info`` at the smallest or largest offset (``autooffset.reset``); the
        new offset is committed with the next commit, so a restart does not reset again."""
        smallest = self.settings.autooffset_reset == "smallest"
        offset = (consumer.earliest_offset if smallest else consumer.latest_offset)(info.topic, info.partition.partition)
        level = logging.INFO if info.fetch_offset < 0 else logging.WARNING
        log.log(level, "%s-%s %s; starting at the %s offset %d (autooffset.reset)", info.topic,
                info.partition.node(), why, self.settings.autooffset_reset, offset)
        info.fetch_offset = info.returned_offset = info.done_offset = offset
        info.committed_offset = -1

    def _on_error(self, consumer, info, code: int) -> None:
        if code == ErrorCode.OFFSET_OUT_OF_RANGE:
            self._reset(consumer, info, f"offset {info.fetch_offset} is out of range")
            return
        if code != info.last_error:  # once per kind of error, not every round
            info.last_error = code
            name = ErrorCode(code).name if code in ErrorCode._value2member_map_ else code
            log.error("fetching %s-%s at offset %d: broker error %s; retrying", info.topic, info.partition.node(),
                      info.fetch_offset, name)


class LeaderFetcher(BrokerFetcher):
    """The partitions of replicated topics, each fetched from its current leader (see the
    module docstring)."""

    def __init__(self, leaders, infos, settings):
        threading.Thread.__init__(self, name="mpbroker-fetcher-leaders", daemon=True)
        self.broker = None
        self.infos = list(infos)
        self.settings = settings
        self._stop_event = threading.Event()
        self._leaders = leaders
        self._consumers = LeaderConsumer(leaders=leaders, fetch_size=settings.fetch_size,
                                         max_fetch_size=settings.max_fetch_size,
                                         socket_timeout_ms=settings.socket_timeout_ms)
        self._failing = {}  # broker id -> the last error logged for it (logged once until it answers)
        self._refreshed = {}  # topic -> when its leaders were last read again

    def _source(self) -> str:
        return "the leaders of replicated partitions"

    def _close_consumers(self) -> None:
        self._consumers.close()

    def _round(self) -> int:
        by_leader = {}
        stale = set()  # topics whose leaders must be read again
        for info in self.infos:
            if info.released or info.stuck:
                continue
            broker = self._leaders.leader(info.topic, info.partition.partition)
            if broker is None:
                stale.add(info.topic)
                continue
            by_leader.setdefault(broker, []).append(info)
        queued = 0
        for broker, infos in by_leader.items():
            if self._stop_event.is_set():
                break
            consumer = None
            try:
                consumer = self._consumers.consumer_for(infos[0].topic, infos[0].partition.partition)
                queued += self._fetch(consumer, infos)
                self._failing.pop(broker.id, None)
            except (BrokerUnavailableError, NotLeaderError, OSError) as exc:
                if consumer is not None and not isinstance(exc, NotLeaderError):
                    self._consumers.forget(consumer)  # the next round connects afresh, without a back-off
                if self._failing.get(broker.id) != str(exc):
                    self._failing[broker.id] = str(exc)
                    log.warning("fetching from leader %d (%s:%d) failed: %s; following the leaders", broker.id,
                                broker.host, broker.port, exc)
                stale.update(info.topic for info in infos)
        now = time.monotonic()
        for topic in stale:  # the watches bring changes too: read again at most every REFRESH_S
            if now - self._refreshed.get(topic, 0.0) >= REFRESH_S:
                self._refreshed[topic] = now
                self._leaders.refresh(topic)
        return queued

    def _on_error(self, consumer, info, code: int) -> None:
        if code == ErrorCode.NOT_LEADER:  # the leadership moved: fetched from the new leader next round
            log.info("%s-%s: broker %s:%d does not lead it now; following the leaders", info.topic,
                     info.partition.node(), consumer.host, consumer.port)
            self._leaders.refresh(info.topic)
            return
        super()._on_error(consumer, info, code)
