"""The producer's view of the cluster through ZooKeeper (``zk.connect``): which brokers
are live and which (broker, partition) pairs a topic has, kept current by watches.

``ZkBrokerPartitions`` owns one kazoo client (its session, its threads) and gives the
producer what ``StaticBrokerPartitions`` gives it: ``brokers`` (id -> Broker),
``partitions(topic)`` and ``invalidate_all()``, plus ``close()``.

- ``/brokers/ids`` is followed from the start; each broker's ``host:port`` is read
  from its node (``zk_registry.read_brokers``).
- ``/brokers/topics/<topic>`` is followed from the first time the topic is asked
  about (``zk_registry.read_topic_partitions``).

A path is followed with a kazoo ``DataWatch`` for its existence (it sees a node that
does not exist yet appear, and a deleted one go) and, while the node exists, a
``ChildrenWatch`` for its children (kazoo's ChildrenWatch stops for good when its
node is missing or deleted, so a new one is made for each incarnation of the node,
told apart by its creation zxid). Each change re-reads the whole path; the reads of
one path are serialized, so a later read is always applied after an earlier one.

``partitions(topic)``: the sorted pairs of the brokers registered under the topic
that are also live; when no live broker has the topic yet, partition 0 of every
live broker (0.7's bootstrap: the first produce creates the topic there, the brokers
register it, and the watch then widens the list to every partition -- of the
brokers that got a message of the first batch only; ``mpbroker.clients.producer.topic_spread``
creates a topic on every live broker first). While ZooKeeper is unreachable the
last known lists are served (a topic first asked about then bootstraps on the last
known brokers).

A replicated topic (one with an assignment, ``mpbroker.registry.replication``) has its
partitions 0..N-1 instead, each paired with the broker the controller elected to lead
it (``mpbroker.clients.core.leaders``, on the same session; ``leaders``): the producer
sends each partition's sets to its leader and asks ``leaders`` again when that fails.

With no live broker at all, ``partitions`` waits up to ``broker_wait_ms`` (the
producer passes ``zk.connectiontimeout.ms``) for one to register, then raises
BrokerUnavailableError naming the ZooKeeper path it watched and how long it waited:
a broker answers on its port a moment before it is registered, so a producer
started together with it would otherwise fail at its first send.
"""

import logging
import threading

from kazoo.protocol.states import KazooState
from kazoo.recipe.watchers import ChildrenWatch, DataWatch
from kazoo.retry import KazooRetry

from mpbroker.clients.core.brokers import Broker, BrokerPartition
from mpbroker.clients.core.errors import BrokerUnavailableError
from mpbroker.clients.core.leaders import PartitionLeaders
from mpbroker.clients.core.zk_registry import read_brokers, read_topic_partitions
from mpbroker.registry import layout
from mpbroker.registry.zk_client import ZooKeeperUnavailable, close_client, start_client

log = logging.getLogger(__name__)


class _FollowedPath:
    """Calls ``reload()`` (a read of the whole path, applied by the caller) once when
    following starts and whenever ``path``'s children change, the node appears or goes,
    or the client reconnects. Runs on kazoo's threads; ``ready`` is set after the
    first reload."""

    def __init__(self, client, path: str, reload):
        self.client = client
        self.path = path
        self._reload = reload
        self.ready = threading.Event()
        self.closed = False
        self._lock = threading.Lock()  # the current incarnation of the node
        self._reload_lock = threading.Lock()  # one read-and-apply at a time, in order
        self._czxid = None  # creation zxid of the node the current ChildrenWatch follows
        self._generation = 0
        self._watch_failed = False
        # a read cut by a dropped connection is tried again a few times (not for ever:
        # a reconnection reloads everything anyway)
        self._retry = KazooRetry(max_tries=3, delay=0.1, max_delay=1.0, sleep_func=client.handler.sleep_func)

    def start(self) -> None:
        """Set the watches (blocks while ZooKeeper is away: run it on its own thread)."""
        try:
            DataWatch(self.client, self.path, self._on_node)
        except Exception:  # kazoo's session listener of the DataWatch retries on reconnecting
            log.exception("watching %s", self.path)

    def _on_node(self, data, stat):
        if self.closed:
            return False
        czxid = stat.czxid if stat is not None else None
        with self._lock:
            if czxid is not None and czxid == self._czxid:
                return None  # the node's data changed, not the node
            self._czxid = czxid
            self._generation += 1
            generation = self._generation
        if czxid is None:
            self.reload()  # gone, or not there yet: whatever the read finds (nothing)
            return None
        try:
            ChildrenWatch(self.client, self.path, lambda children: self._on_children(generation))
        except Exception as exc:  # the session went meanwhile: ``resume`` watches again
            log.warning("watching the children of %s failed (%r); again after reconnecting", self.path, exc)
            with self._lock:
                self._czxid = None
                self._watch_failed = True
        return None

    def _on_children(self, generation: int):
        if self.closed or generation != self._generation:
            return False  # a watch of an earlier incarnation of the node: stop it
        self.reload()
        return None

    def resume(self) -> None:
        """After a reconnection: watch the children again if that failed, and re-read."""
        if self._watch_failed and not self.closed:
            self._watch_failed = False
            try:
                self._on_node(None, self.client.exists(self.path))
            except Exception as exc:
                self._watch_failed = True
                log.warning("watching %s failed (%r); again after reconnecting", self.path, exc)
        self.reload()

    def reload(self) -> None:
        if self.closed:
            return
        with self._reload_lock:
            try:
                self._retry.copy()(self._reload)
            except Exception as exc:  # ZooKeeper away: the reconnection reloads again
                log.warning("reading %s from ZooKeeper failed (%r); keeping the last known state", self.path, exc)
                return
            self.ready.set()


class ZkBrokerPartitions:
    """The (broker, partition) pairs of topics, from ZooKeeper (see the module doc)."""

    def __init__(self, zk_connect: str, session_timeout_ms: int = 6000, connection_timeout_ms: int = 6000,
                 broker_wait_ms: int | None = None):
        self.zk_connect = zk_connect
        self._first_read_s = connection_timeout_ms / 1000
        self.broker_wait_ms = connection_timeout_ms if broker_wait_ms is None else broker_wait_ms
        try:
            self._client = start_client(zk_connect, session_timeout_ms, connection_timeout_ms)
        except ZooKeeperUnavailable as exc:
            raise BrokerUnavailableError(f"cannot discover brokers: {exc}") from exc
        self._lock = threading.Lock()  # guards the state below
        self._changed = threading.Condition(self._lock)  # notified when brokers or registrations change
        self._brokers = {}  # broker id -> Broker; replaced, never changed in place
        self._registered = {}  # topic -> sorted PartitionIds registered under /brokers/topics/<topic>
        self._topics = {}  # topic -> _FollowedPath
        self._pairs = {}  # topic -> computed pairs; cleared on every change
        self._closed = False
        self._client.add_listener(self._on_state)
        self.leaders = PartitionLeaders(self._client)  # replicated topics: who leads each partition
        self._ids = _FollowedPath(self._client, layout.BROKER_IDS, self._reload_brokers)
        self._client.handler.spawn(self._ids.start)
        if not self._ids.ready.wait(self._first_read_s):
            log.warning("no broker list from ZooKeeper at %s within %d ms", zk_connect, connection_timeout_ms)

    # --- what the producer asks -------------------------------------------------------

    @property
    def brokers(self) -> dict:
        """{broker id: Broker} of the brokers registered now (a snapshot)."""
        return self._brokers

    def partitions(self, topic: str) -> list:
        """Sorted BrokerPartition pairs of ``topic`` across the live brokers (partition 0
        of each live broker while none has registered the topic). A replicated topic:
        (leader id, p) for p in 0..N-1, the leader id -1 while a partition has none."""
        replicated = self.leaders.topic(topic)
        if replicated is not None:
            return [BrokerPartition(replicated.leader_id(p), p) for p in range(replicated.partitions)]
        with self._lock:
            pairs = self._pairs.get(topic)
            if pairs is not None:
                return pairs
            followed = self._topics.get(topic)
            first = followed is None and not self._closed
            if first:
                followed = self._topics[topic] = _FollowedPath(
                    self._client, layout.topic_path(topic), lambda: self._reload_topic(topic))
                self._client.handler.spawn(followed.start)
        if first and self._client.connected:
            followed.ready.wait(self._first_read_s)  # the first read of a new topic: milliseconds
        with self._lock:
            if not self._brokers and not self._closed:  # none yet: one may be registering right now
                self._changed.wait_for(lambda: self._brokers or self._closed, self.broker_wait_ms / 1000)
            brokers = self._brokers
            pairs = [BrokerPartition(*p) for p in self._registered.get(topic, ()) if p.broker_id in brokers]
            if not pairs:
                pairs = [BrokerPartition(broker_id, 0) for broker_id in sorted(brokers)]
            if pairs and followed is not None and followed.ready.is_set():
                self._pairs[topic] = pairs
        if not pairs:
            if self._closed:
                raise BrokerUnavailableError("the producer's ZooKeeper discovery is closed")
            waited = f"after waiting {self.broker_wait_ms} ms (zk.connectiontimeout.ms)"
            if not self._client.connected:
                raise BrokerUnavailableError(f"ZooKeeper at {self.zk_connect} is unreachable and no broker is known, "
                                             f"{waited}")
            raise BrokerUnavailableError(f"no broker is registered under {self.ids_path} in ZooKeeper at "
                                         f"{self.zk_connect}, {waited}")
        return pairs

    @property
    def ids_path(self) -> str:
        """Where the brokers register, with the chroot (for messages)."""
        return layout.split_zk_connect(self.zk_connect)[1] + layout.BROKER_IDS

    def registered_brokers(self, topic: str) -> set:
        """The ids of the live brokers that have registered ``topic``."""
        self.partitions(topic)  # follows the topic from now on
        with self._lock:
            brokers = self._brokers
            return {p.broker_id for p in self._registered.get(topic, ()) if p.broker_id in brokers}

    def wait_for_change(self, timeout_s: float) -> None:
        """Block until the live brokers or some topic's registrations change (or
        ``timeout_s`` passed, or discovery closed)."""
        with self._lock:
            if not self._closed:
                self._changed.wait(timeout_s)

    def invalidate_all(self) -> None:
        """After a broker failed: nothing to forget, the watches keep the lists current
        (a broker that died stays listed until its ZooKeeper session expires)."""

    def close(self) -> None:
        """Stop following and end the ZooKeeper session."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._changed.notify_all()
            followed = [self._ids, *self._topics.values()]
        for path in followed:
            path.closed = True
        self.leaders.close()
        self._client.remove_listener(self._on_state)
        try:
            close_client(self._client)
        except Exception as exc:  # closing must not fail the producer's close
            log.warning("closing the ZooKeeper client: %r", exc)

    # --- kazoo's threads ----------------------------------------------------------------

    def _reload_brokers(self) -> None:
        brokers = {info.id: Broker(info.id, info.host, info.port) for info in read_brokers(self._client).values()}
        with self._lock:
            if brokers != self._brokers:
                log.info("live brokers: %s", ", ".join(f"{b.id}={b.host}:{b.port}" for b in brokers.values())
                         or "none")
                self._brokers = brokers
                self._pairs.clear()
                self._changed.notify_all()

    def _reload_topic(self, topic: str) -> None:
        registered = read_topic_partitions(self._client, topic)
        with self._lock:
            if registered != self._registered.get(topic):
                self._registered[topic] = registered
                self._pairs.clear()
                self._changed.notify_all()

    def _on_state(self, state) -> None:
        """kazoo's connection thread (must not block): after a reconnection, read
        everything again, as changes made while away (a broker restarted on another
        port under the same id) may not have changed any children list."""
        if state == KazooState.CONNECTED and not self._closed:
            self._client.handler.spawn(self._reload_all)

    def _reload_all(self) -> None:
        with self._lock:
            followed = [self._ids, *self._topics.values()]
        for path in followed:
            path.resume()
