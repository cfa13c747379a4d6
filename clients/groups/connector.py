"""The ZooKeeper consumer connector: consumer groups over the 0.7 registry.

    connector = ConsumerConnector({"zk.connect": "zk:2181", "groupid": "loaders"})
    streams = connector.create_message_streams({"clicks": 2})   # or _by_filter(Whitelist("logs-.*"), 2)
    for message in streams["clicks"][0]: ...                    # blocks for new messages
    connector.shutdown()

What it does, in PROTOCOL.md's layout and algorithm:
- registers the consumer (``/consumers/<group>/ids/<id>``, ephemeral, its subscription);
- rebalances in its own thread whenever the group's members, the brokers registered
  for a subscribed topic, or (with a filter) the set of topics change, and after a
  session expiry: read the group (``mpbroker.clients.groups.members``) and the partitions,
  compute the range assignment (``mpbroker.clients.groups.rebalance``), and if this consumer's
  share changed: stop the fetchers, drop queued chunks, wait (without the lock, up to
  ``rebalance.finish.ms``) for the messages handed out to be finished, commit, release
  its owner nodes, claim the new ones (``mpbroker.clients.groups.group_nodes``; a claim
  that finds another owner releases what it claimed, backs off and retries, up to
  ``rebalance.retries.max`` times, then tries again later; the back-off lasts
  ``rebalance.backoff.ms`` at most: a watch on the owner node in the way ends it when
  that owner lets go, so a group settles as fast as its slowest member releases);
- at its start, reads that view until it was unchanged for ``rebalance.settle.ms``
  before the first rebalance, so a member started while brokers register a topic
  claims once (``mpbroker.clients.groups.handover``);
- starts each claimed partition at its committed offset, or without one at the
  smallest or largest offset (``autooffset.reset``), and fetches with one thread per
  broker (``mpbroker.clients.groups.fetcher``);
- commits offsets to ``/consumers/<group>/offsets`` every ``autocommit.interval.ms``
  and on every rebalance (what the user finished with: at least once, see
  ``mpbroker.clients.groups.message_stream``), on ``commit_offsets()`` and on ``shutdown()``
  (everything handed out). With ``autofinish.enable=false`` the application marks
  what it finished (``mark_finished``) and every commit stores only that: a mirror
  marks a batch once the target cluster acknowledged it.

A replicated topic (``mpbroker.registry.replication``) is assigned by its partitions
0..N-1, named ``<partition>`` under the group's owners and offsets
(``/consumers/<g>/owners/<topic>/<partition>``; ``leaders.ReplicatedPartition``), and
fetched from each partition's current leader by one ``LeaderFetcher`` that follows
leadership changes; a 0.7 topic keeps ``<broker>-<partition>`` and one fetcher per
broker. A change of a replicated topic's assignment rebalances; a change of a leader
does not (the fetcher follows it). Messages of a replicated topic carry
``broker_id`` -1 (``leaders.REPLICATED``).

ZooKeeper calls are made only while connected; while ZooKeeper is away the fetchers
go on with the partitions already owned and commits wait.
"""

import logging
import threading
import time

from kazoo.exceptions import NoNodeError
from kazoo.protocol.states import KazooState

from mpbroker.clients.core.leaders import REPLICATED, PartitionLeaders, ReplicatedPartition, partition_id
from mpbroker.clients.core.zk_registry import read_brokers, read_topic_partitions, read_topics
from mpbroker.clients.groups.fetcher import BrokerFetcher, LeaderFetcher
from mpbroker.clients.groups.group_nodes import claim, commit, read_offset, release
from mpbroker.clients.groups.handover import unfinished, wait_finished, wait_settled
from mpbroker.clients.groups.members import read_members
from mpbroker.clients.groups.message_stream import EnvelopeStrippingStream, MessageStream, PartitionTopicInfo
from mpbroker.clients.groups.rebalance import assign_range
from mpbroker.clients.groups.settings import ConsumerSettings
from mpbroker.clients.groups.topic_filter import TopicFilter
from mpbroker.codec.topic_names import check_topic
from mpbroker.registry import layout
from mpbroker.registry.zk_client import ZK_ERRORS, close_client, start_client

log = logging.getLogger(__name__)

FETCHER_JOIN_S = 2.0
MIN_BACKOFF_S = 0.02


class ConsumerConnector:
    def __init__(self, settings=None, **overrides):
        if not isinstance(settings, ConsumerSettings):
            settings = ConsumerSettings.from_properties(settings, **overrides)
        self.settings = settings
        self.group = settings.group_id
        self.consumer_id = settings.consumer_id or layout.new_consumer_id(self.group)
        self._client = start_client(settings.zk_connect, settings.zk_sessiontimeout_ms,
                                    settings.zk_connectiontimeout_ms)
        self._client.add_listener(self._on_zk_state)
        self._leaders = PartitionLeaders(self._client)  # replicated topics: their partitions' leaders
        self._lock = threading.RLock()  # rebalance, commit and shutdown take turns
        self._subscription = None
        self._filter = None
        self._topic_streams = {}  # topic -> [MessageStream] (static subscriptions)
        self._filter_streams = []
        self._owned = {}  # (topic, PartitionId) -> PartitionTopicInfo
        self._assignment = None  # (topic, PartitionId) -> our stream index, as claimed
        self._owner_session = None  # the session the owner nodes were created in
        self._owner_paths = []
        self._fetchers = []
        self._trigger = threading.Event()
        self._closed = threading.Event()
        self._threads = []
        self.rebalances = 0  # rebalances that completed (changed or confirmed the share)
        self.rebalance_failures = 0  # times every retry conflicted
        self._unreadable_members = {}  # consumer id -> the registration already warned about

    # --- streams ----------------------------------------------------------------

    def create_message_streams(self, topic_count: dict) -> dict:
        """``{topic: streams}`` -> ``{topic: [MessageStream, ...]}`` (once per connector)."""
        counts = {}
        for topic, streams in dict(topic_count).items():
            streams = int(streams)
            if streams < 1:
                raise ValueError(f"{topic}: at least one stream is needed")
            counts[check_topic(topic)] = streams
        if not counts:
            raise ValueError("no topic to consume")
        with self._lock:
            self._check_fresh()
            self._topic_streams = {topic: [self._new_stream() for _ in range(n)] for topic, n in counts.items()}
            self._subscription = layout.Subscription(counts)
        self._start()
        return {topic: list(streams) for topic, streams in self._topic_streams.items()}

    def create_message_streams_by_filter(self, topic_filter: TopicFilter, num_streams: int = 1) -> list:
        """``num_streams`` streams over every topic ``topic_filter`` takes, now and later."""
        if not isinstance(topic_filter, TopicFilter):
            raise TypeError("topic_filter must be a Whitelist or a Blacklist")
        if int(num_streams) < 1:
            raise ValueError("at least one stream is needed")
        with self._lock:
            self._check_fresh()
            self._filter = topic_filter
            self._filter_streams = [self._new_stream() for _ in range(int(num_streams))]
            self._subscription = topic_filter.subscription(int(num_streams))
        self._start()
        return list(self._filter_streams)

    def _new_stream(self) -> MessageStream:
        settings = self.settings
        stream_class = EnvelopeStrippingStream if settings.audit_envelope else MessageStream
        return stream_class(settings.queuedchunks_max, settings.consumer_timeout_ms, settings.autofinish_enable)

    def _streams(self) -> list:
        return [*self._filter_streams, *(s for streams in self._topic_streams.values() for s in streams)]

    def _check_fresh(self) -> None:
        if self._closed.is_set():
            raise RuntimeError("the connector was shut down")
        if self._subscription is not None:
            raise RuntimeError("streams were already created for this connector")

    def _start(self) -> None:
        with self._lock:
            self._ensure_registered()
        self._trigger.set()
        self._spawn(self._rebalance_loop, "rebalancer")
        if self.settings.autocommit_enable:
            self._spawn(self._autocommit_loop, "autocommit")

    def _spawn(self, target, name: str) -> None:
        thread = threading.Thread(target=target, name=f"mpbroker-{name}-{self.consumer_id}", daemon=True)
        thread.start()
        self._threads.append(thread)

    # --- what the user sees -----------------------------------------------------

    def owned_partitions(self) -> dict:
        """``{topic: [PartitionId, ...]}`` this consumer owns now."""
        with self._lock:
            owned = {}
            for topic, partition in sorted(self._owned):
                owned.setdefault(topic, []).append(partition)
            return owned

    def finished_offsets(self) -> dict:
        """``{(topic, PartitionId): offset}``: for each owned partition, the offset after
        the last finished message (what the next commit stores)."""
        return {key: info.done_offset for key, info in list(self._owned.items())}

    def mark_finished(self, messages) -> None:
        """``autofinish.enable=false``: the application is done with ``messages`` (and,
        per partition, with every message before them it was handed). Each owned
        partition's finished offset moves to the last of its messages; a message of a
        partition this consumer no longer owns is ignored (its new owner starts at the
        committed offset, so it is delivered again rather than lost)."""
        latest = {}
        for message in messages:
            key = (message.topic, message.broker_id, message.partition)
            if message.next_offset > latest.get(key, -1):
                latest[key] = message.next_offset
        owned = self._owned
        for (topic, broker_id, partition), offset in latest.items():
            info = owned.get((topic, partition_id(broker_id, partition)))
            if info is not None and offset > info.done_offset:
                info.done_offset = offset

    def commit_offsets(self) -> None:
        """Store the offset after the last message handed out, for every owned partition
        (with ``autofinish.enable=false``: after the last finished one)."""
        with self._lock:
            self._commit(returned=True)

    def shutdown(self) -> None:
        """Stop fetching, commit what was handed out (``autofinish.enable=false``: what
        was finished), release the partitions, leave the group; the streams end
        (StopIteration)."""
        if self._closed.is_set():
            return
        self._closed.set()
        self._trigger.set()
        for thread in self._threads:
            thread.join(self.settings.zk_sessiontimeout_ms / 1000 + 5)
        with self._lock:
            self._stop_fetchers()
            if self._client.connected:
                try:
                    self._commit(returned=True)
                    self._release()
                    self._delete_registration()
                except ZK_ERRORS as exc:
                    log.warning("shutdown could not finish in ZooKeeper (%s); the session's end releases the "
                                "partitions", exc)
            else:
                log.warning("ZooKeeper is away at shutdown: offsets since the last commit are not stored")
            self._leaders.close()
            close_client(self._client)
            for stream in self._streams():
                stream.end()
        log.info("consumer %s shut down", self.consumer_id)

    def __enter__(self) -> "ConsumerConnector":
        return self

    def __exit__(self, *exc) -> None:
        self.shutdown()

    # --- ZooKeeper events -------------------------------------------------------

    def _on_watch(self, event=None) -> None:  # kazoo's thread
        self._trigger.set()

    def _on_zk_state(self, state) -> None:  # kazoo's thread
        if self._closed.is_set():
            return
        if state == KazooState.LOST:
            log.warning("consumer %s: ZooKeeper session expired; rejoining the group once reconnected",
                        self.consumer_id)
        elif state == KazooState.CONNECTED:
            self._trigger.set()  # a new session re-registers and rebalances; the same one finds nothing new

    # --- rebalance --------------------------------------------------------------

    def _rebalance_loop(self) -> None:
        self._settle()
        retry_at = None
        while not self._closed.is_set():
            timeout = None if retry_at is None else max(0.0, retry_at - time.monotonic())
            self._trigger.wait(timeout)
            if self._closed.is_set():
                return
            self._trigger.clear()
            if self._rebalance():
                retry_at = None
            else:
                retry_at = time.monotonic() + self.settings.rebalance_backoff_ms / 1000

    def _settle(self) -> None:
        """The start: wait for the view to settle before the first rebalance
        (``mpbroker.clients.groups.handover.wait_settled``)."""
        def read_view():
            try:
                with self._lock:
                    if self._client.connected and not self._closed.is_set():
                        self._read_view()
            except ZK_ERRORS as exc:
                log.info("consumer %s: reading the group before its first rebalance failed: %r", self.consumer_id, exc)
        wait_settled(read_view, self._trigger, self._closed, self.settings.rebalance_settle_ms / 1000)

    def _rebalance(self) -> bool:
        backoff = self.settings.rebalance_backoff_ms / 1000
        attempts = self.settings.rebalance_retries_max + 1
        for attempt in range(1, attempts + 1):
            done = False
            try:
                with self._lock:
                    if self._closed.is_set():
                        return True
                    if not self._client.connected:
                        return False
                    plan = self._plan()
                    done = plan is None
                if not done:
                    self._await_finished()  # without the lock: commits and reads go on meanwhile
                    with self._lock:
                        if self._closed.is_set():
                            return True
                        if not self._client.connected:
                            return False
                        done = self._apply(*plan)
            except ZK_ERRORS as exc:
                log.warning("consumer %s: rebalance attempt %d failed: %r", self.consumer_id, attempt, exc)
            if done:
                self.rebalances += 1
                return True
            if attempt < attempts:
                log.info("consumer %s: rebalance attempt %d of %d did not complete; retrying within %.1fs",
                         self.consumer_id, attempt, attempts, backoff)
                # Back off for rebalance.backoff.ms, or less: until the owner node that was in
                # the way goes, or the group changes (the watches set the trigger).
                self._closed.wait(MIN_BACKOFF_S)
                self._trigger.wait(backoff)
                if self._closed.is_set():
                    return True
                self._trigger.clear()  # the next attempt reads everything afresh
        self.rebalance_failures += 1
        log.error("consumer %s: could not rebalance in %d attempts (rebalance.retries.max); trying again in %.1fs",
                  self.consumer_id, attempts, backoff)
        return False

    def _plan(self):
        """Read the view; None if this consumer's share is what it owns in this session,
        else stop the fetchers (nothing more is handed out) and return what ``_apply``
        needs."""
        session = self._client.client_id[0]
        wanted, brokers = self._read_view()
        if session == self._owner_session and wanted == self._assignment:
            return None  # nothing changed for this consumer
        self._stop_fetchers()
        return wanted, brokers, session

    def _await_finished(self) -> None:
        """Before the commit: the messages handed out are finished, or
        ``rebalance.finish.ms`` passed (``mpbroker.clients.groups.handover``)."""
        timeout = self.settings.rebalance_finish_ms / 1000
        waiting = unfinished(self._owned.values())
        if not waiting or timeout <= 0:
            return
        started = time.monotonic()
        left = wait_finished(waiting, timeout, self._closed)
        if left and not self._closed.is_set():
            log.warning("consumer %s: %d partition(s) still had messages being processed after %.1fs "
                        "(rebalance.finish.ms); they will be delivered again: %s", self.consumer_id, len(left),
                        timeout, ", ".join(f"{info.topic}:{info.partition.node()}" for info in left))
        else:
            log.info("consumer %s: the messages in flight finished in %.2fs; committing them before the "
                     "rebalance", self.consumer_id, time.monotonic() - started)

    def _apply(self, wanted: dict, brokers: dict, session: int) -> bool:
        """Commit what was finished, release the owner nodes, claim ``wanted``, fetch."""
        self._stop_fetchers()  # (none: stopped by _plan; the queues emptied again)
        self._commit(returned=False)
        self._release()
        if not self._claim(wanted, session):
            return False
        self._start_fetchers(wanted, brokers)
        return True

    def _read_view(self) -> tuple:
        """``({(topic, PartitionId): our stream index}, brokers)``: this consumer's share
        under the range assignment of the group, topics and brokers read now, with
        watches (each change sets the trigger)."""
        client = self._client
        self._ensure_registered()
        subscriptions = self._read_group()
        brokers = read_brokers(client)
        wanted = {}
        for topic in self._topics():
            partitions = self._partitions_of(topic, brokers)
            stream_ids = [layout.stream_id(consumer, index) for consumer, subscription in subscriptions.items()
                          for index in range(subscription.streams_for(topic))]
            prefix = self.consumer_id + "-"
            for stream, partitions_of_stream in assign_range(partitions, stream_ids).items():
                if stream.startswith(prefix) and stream[len(prefix):].isdigit():
                    for partition in partitions_of_stream:
                        wanted[(topic, partition)] = int(stream[len(prefix):])
        return wanted, brokers

    def _partitions_of(self, topic: str, brokers: dict) -> list:
        """The partitions of ``topic`` to assign: a replicated topic's 0..N-1 (whether or
        not each has a leader now), else the partitions of the live brokers that
        registered it. Watched: the topic node's value (an assignment written or
        changed) and, for a 0.7 topic, its brokers' registrations."""
        replicated = self._leaders.refresh(topic)
        if replicated is not None:
            self._client.exists(layout.topic_path(topic), watch=self._on_watch)
            return [ReplicatedPartition(p) for p in range(replicated.partitions)]
        partitions = read_topic_partitions(self._client, topic, watch=self._on_watch)
        self._client.exists(layout.topic_path(topic), watch=self._on_watch)  # a topic made replicated later
        return [p for p in partitions if p.broker_id in brokers]

    def _read_group(self) -> dict:
        """``{consumer id: Subscription}`` of the group's members, this one included
        (``mpbroker.clients.groups.members.read_members``)."""
        return read_members(self._client, self.group, self._on_watch, self._unreadable_members,
                            {self.consumer_id: self._subscription})

    def _topics(self) -> list:
        if self._filter is None:
            return sorted(self._subscription.topics)
        return [topic for topic in read_topics(self._client, watch=self._on_watch) if self._filter.matches(topic)]

    def _claim(self, wanted: dict, session: int) -> bool:
        claimed, gone = claim(self._client, self.group, self.consumer_id, wanted, session, self._on_watch)
        self._owner_paths = claimed
        self._owner_session = session
        if gone is not None:
            if gone:
                self._trigger.set()  # the node in the way went meanwhile: no back-off
            self._release()
            return False
        self._assignment = dict(wanted)
        return True

    def _release(self) -> None:
        """Delete the owner nodes this consumer created (in its current session)."""
        release(self._client, self._owner_paths)
        self._owner_paths = []
        self._assignment = None
        self._owner_session = None

    def unreadable_partitions(self) -> list:
        """``[(topic, "broker-partition", offset, why), ...]``: the owned partitions whose
        next message cannot be read (damaged, larger than ``max.fetch.size``), which the
        fetchers stopped at (until the next rebalance) instead of skipping it."""
        return [(topic, partition.node(), info.fetch_offset, info.stuck)
                for (topic, partition), info in sorted(list(self._owned.items())) if info.stuck]

    def _start_fetchers(self, wanted: dict, brokers: dict) -> None:
        client = self._client
        self._owned = {}
        by_broker = {}
        for (topic, partition), index in sorted(wanted.items()):
            stream = self._filter_streams[index] if self._filter is not None else self._topic_streams[topic][index]
            offset = read_offset(client, self.group, topic, partition)  # -1: the fetcher asks the broker
            info = PartitionTopicInfo(topic, partition, stream.queue, offset, self.settings.fetch_size)
            self._owned[(topic, partition)] = info
            by_broker.setdefault(partition.broker_id, []).append(info)
        self._fetchers = [BrokerFetcher(brokers[broker_id], infos, self.settings)
                          for broker_id, infos in sorted(by_broker.items()) if broker_id != REPLICATED]
        if REPLICATED in by_broker:
            self._fetchers.append(LeaderFetcher(self._leaders, by_broker[REPLICATED], self.settings))
        for fetcher in self._fetchers:
            fetcher.start()
        log.info("consumer %s owns %s", self.consumer_id,
                 ", ".join(f"{topic}:{partition.node()}" for topic, partition in sorted(wanted)) or "nothing")

    def _stop_fetchers(self) -> None:
        for fetcher in self._fetchers:
            fetcher.stop()
        for info in self._owned.values():
            info.released = True
        for stream in self._streams():
            stream.clear()
        for fetcher in self._fetchers:
            fetcher.join(FETCHER_JOIN_S)
        self._fetchers = []

    # --- registration and offsets -------------------------------------------------

    def _ensure_registered(self) -> None:
        client = self._client
        path = layout.consumer_path(self.group, self.consumer_id)
        value = self._subscription.value()
        session = client.client_id[0]
        try:
            data, stat = client.get(path)
            if data == value and stat.ephemeralOwner == session:
                return
            client.delete(path, version=stat.version)  # left by an expired session of ours
        except NoNodeError:
            pass
        client.create(path, value, ephemeral=True, makepath=True)
        log.info("consumer %s joined group %s (%s)", self.consumer_id, self.group, value.decode())

    def _delete_registration(self) -> None:
        try:
            self._client.delete(layout.consumer_path(self.group, self.consumer_id))
        except NoNodeError:
            pass

    def _commit(self, returned: bool) -> None:
        commit(self._client, self.group, self._owned, returned and self.settings.autofinish_enable)

    def _autocommit_loop(self) -> None:
        interval = self.settings.autocommit_interval_ms / 1000
        while not self._closed.wait(interval):
            try:
                with self._lock:
                    if self._client.connected and not self._closed.is_set():
                        self._commit(returned=False)
            except ZK_ERRORS as exc:
                log.warning("consumer %s: committing offsets failed (%r); trying again in %.0fs",
                            self.consumer_id, exc, interval)
