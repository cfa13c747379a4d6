"""Who leads each partition of the replicated topics, from ZooKeeper, for every client
that sends to or reads from one (producer, consumers, groups, mirror, Spark loader).

A replicated topic (``mpbroker.registry.replication``: ``/brokers/topics/<t>`` holds
the assignment, ``.../partitions/<p>/state`` the leader the controller elected) is
served per partition by its current leader, which changes when a broker dies. This
module owns that knowledge on one started kazoo client: the assignment, the partition
states and the registered brokers' addresses (``/brokers/ids``), each read with a
watch, so a change arrives by itself; ``refresh(topic)`` re-reads a topic at once, for
the client that was just told NOT_LEADER or lost its connection to the leader (it
reads nothing while the session is disconnected: a kazoo call would wait for the
reconnection, which reads everything followed again). A
topic is followed from the first time it is asked about; a topic whose node has no
assignment (created the 0.7 way, or not at all yet) is not replicated (``topic``
answers None) and stays followed, so one created later is seen. While ZooKeeper is
away the last known leaders are served. ``ReplicatedPartition`` is how the consumer
groups and the loader name such a partition: its number alone, with no broker.
"""

import logging
import threading
import time
from typing import NamedTuple

from kazoo.exceptions import NoNodeError
from kazoo.protocol.states import KazooState

from mpbroker.clients.core.brokers import Broker
from mpbroker.clients.core.errors import LeaderNotAvailableError
from mpbroker.clients.core.zk_registry import read_brokers, read_topic_partitions
from mpbroker.registry import layout
from mpbroker.registry.layout import LayoutError
from mpbroker.registry.replication import (
    NO_LEADER,
    PartitionState,
    parse_assignment,
    parse_partition_state,
    partition_state_path,
)
from mpbroker.registry.zk_client import ZK_ERRORS, close_client, start_client

log = logging.getLogger(__name__)

REPLICATED = -1  # the broker id a replicated partition is given where 0.7 names one (messages, the loader's rows)


class ReplicatedPartition(NamedTuple):
    """A partition of a replicated topic: numbered per topic, served by whichever broker
    leads it. ``node()`` is its ZooKeeper node name under a group's owners and offsets
    (``<partition>``, where a 0.7 topic's ``layout.PartitionId`` has ``<broker>-<partition>``)."""
    partition: int

    @property
    def broker_id(self) -> int:
        return REPLICATED

    def node(self) -> str:
        return str(self.partition)


def partition_id(broker_id: int, partition: int):
    """The partition a message's ``(broker_id, partition)`` names: a ReplicatedPartition
    for ``broker_id == REPLICATED``, else a 0.7 ``layout.PartitionId``."""
    return ReplicatedPartition(partition) if broker_id == REPLICATED else layout.PartitionId(broker_id, partition)


def parse_partition_node(name: str, replicated: bool):
    """A group's owner or offset node name: ``<partition>`` (a ReplicatedPartition) for a
    replicated topic, else 0.7's ``<broker>-<partition>``; LayoutError for anything else."""
    if not replicated:
        return layout.parse_partition_node(name)
    if not (name.isdigit() and len(name) <= 10):
        raise LayoutError(f"{name!r} is not <partition> (a replicated topic's partition)")
    return ReplicatedPartition(int(name))


def registered_partitions(client, topic: str) -> tuple:
    """``(partitions, leaders)`` of ``topic`` read now: a replicated topic's
    ReplicatedPartitions 0..N-1 and ``{partition: Broker or None}`` (its leaders), else
    the PartitionIds the brokers registered and ``None``."""
    replicated = read_topic_leaders(client, topic)
    if replicated is None:
        return read_topic_partitions(client, topic), None
    brokers = read_brokers(client)
    leaders = {}
    for partition in range(replicated.partitions):
        info = brokers.get(replicated.leader_id(partition))
        leaders[partition] = None if info is None else Broker(info.id, info.host, info.port)
    return [ReplicatedPartition(p) for p in range(replicated.partitions)], leaders


class TopicLeaders(NamedTuple):
    """What is known of one replicated topic (a snapshot)."""
    topic: str
    assignment: dict  # partition -> [replica broker ids], the preferred leader first
    states: dict  # partition -> PartitionState, or None until the controller wrote one

    @property
    def partitions(self) -> int:
        return len(self.assignment)

    def leader_id(self, partition: int) -> int:
        """The elected leader's id, NO_LEADER when none is (yet)."""
        state = self.states.get(partition)
        return NO_LEADER if state is None else state.leader

    def epoch(self, partition: int) -> int:
        state = self.states.get(partition)
        return -1 if state is None else state.leader_epoch


def read_topic_leaders(client, topic: str, watch=None):
    """TopicLeaders of ``topic`` read now, or None if it is not replicated (its node has
    no assignment, or does not exist). With ``watch``, every node read (or missing) is
    watched: the topic node's value and existence, each partition's state."""
    path = layout.topic_path(topic)
    try:
        value, _ = client.get(path, watch=watch)
    except NoNodeError:
        if watch is not None:
            client.exists(path, watch=watch)  # its creation is seen
        return None
    try:
        assignment = parse_assignment(topic, value)
    except LayoutError as exc:
        log.warning("topic %s: %s; not treated as replicated", topic, exc)
        return None
    if assignment is None:
        return None
    return TopicLeaders(topic, assignment, {p: _read_state(client, topic, p, watch) for p in assignment})


def _read_state(client, topic: str, partition: int, watch):
    path = partition_state_path(topic, partition)
    try:
        value, _ = client.get(path, watch=watch)
    except NoNodeError:
        if watch is not None:
            client.exists(path, watch=watch)
        return None
    try:
        return parse_partition_state(topic, partition, value)
    except LayoutError as exc:
        log.warning("%s; no leader known for %s-%d", exc, topic, partition)
        return PartitionState(NO_LEADER, -1, (), -1)


class PartitionLeaders:
    """The leaders of replicated topics on a started kazoo ``client`` (see the module
    docstring). ``connect`` makes one with a client of its own, which ``close`` ends."""

    def __init__(self, client, *, owns_client: bool = False):
        self._client = client
        self._owns_client = owns_client
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)  # notified whenever anything read changes
        self._reload_lock = threading.Lock()  # one read of ZooKeeper at a time, applied in order
        self._topics = {}  # followed topic -> TopicLeaders, or None: not replicated (0.7 or none)
        self._brokers = {}  # broker id -> Broker; replaced, never changed in place
        self._closed = False
        client.add_listener(self._on_state)
        try:
            if client.connected:
                self._reload_brokers()
        except ZK_ERRORS as exc:
            log.warning("reading the brokers from ZooKeeper failed (%r); again once it answers", exc)

    @classmethod
    def connect(cls, zk_connect: str, session_timeout_ms: int = 6000,
                connection_timeout_ms: int = 6000) -> "PartitionLeaders":
        """With a kazoo client of its own (ZooKeeperUnavailable if none answers in time)."""
        client = start_client(zk_connect, session_timeout_ms, connection_timeout_ms, create_chroot=False)
        return cls(client, owns_client=True)

    # --- what the clients ask -------------------------------------------------------

    @property
    def client(self):
        """The kazoo client it reads with (for a caller's other reads on the same session)."""
        return self._client

    @property
    def brokers(self) -> dict:
        """{broker id: Broker} of the registered brokers (a snapshot)."""
        return self._brokers

    def topic(self, topic: str):
        """TopicLeaders of ``topic`` if it is replicated, else None; the first call for a
        topic reads it from ZooKeeper (and follows it from then on)."""
        with self._lock:
            if topic in self._topics:
                return self._topics[topic]
        return self.refresh(topic)

    def is_replicated(self, topic: str) -> bool:
        return self.topic(topic) is not None

    def leader(self, topic: str, partition: int):
        """The Broker leading ``topic``'s ``partition``, or None: not replicated, no
        leader elected (yet, or offline), or the leader is not registered."""
        leaders = self.topic(topic)
        if leaders is None:
            return None
        return self._brokers.get(leaders.leader_id(partition))

    def require_leader(self, topic: str, partition: int) -> Broker:
        """``leader`` or LeaderNotAvailableError saying why there is none."""
        leaders = self.topic(topic)
        if leaders is None:
            raise LeaderNotAvailableError(f"topic {topic!r} is not a replicated topic", topic, partition)
        if not 0 <= partition < leaders.partitions:
            raise LeaderNotAvailableError(f"topic {topic!r} has partitions 0-{leaders.partitions - 1}, "
                                          f"not {partition}", topic, partition)
        leader_id = leaders.leader_id(partition)
        broker = self._brokers.get(leader_id)
        if broker is not None:
            return broker
        if leaders.states.get(partition) is None:
            why = "no leader elected yet (no controller state)"
        elif leader_id == NO_LEADER:
            why = f"no leader: no in-sync replica is alive (isr {list(leaders.states[partition].isr)})"
        else:
            why = f"its leader, broker {leader_id}, is not registered"
        raise LeaderNotAvailableError(f"{topic}-{partition}: {why}", topic, partition)

    def refresh(self, topic: str):
        """Read ``topic`` (its assignment, its partitions' states) and the brokers from
        ZooKeeper now; returns what ``topic`` returns. While ZooKeeper cannot be read,
        the last known state (ZooKeeper errors are logged, not raised)."""
        if not self._client.connected:  # a read would wait for the reconnection, which reads it anyway
            with self._lock:
                self._topics.setdefault(topic, None)
                return self._topics[topic]
        try:
            self._reload_brokers()
            self._reload_topic(topic)
        except ZK_ERRORS as exc:
            log.warning("reading topic %s from ZooKeeper failed (%r); keeping what was known", topic, exc)
            with self._lock:
                self._topics.setdefault(topic, None)
        with self._lock:
            return self._topics.get(topic)

    def wait_for_change(self, timeout_s: float) -> None:
        """Block until something followed changes (a state, an assignment, the brokers),
        or ``timeout_s`` passed."""
        with self._lock:
            if not self._closed and timeout_s > 0:
                self._changed.wait(timeout_s)

    def wait_for_leader(self, topic: str, partition: int, timeout_s: float, *, other_than: int | None = None):
        """The leader of ``topic``'s ``partition`` once one is known (and, with
        ``other_than``, is not that broker id), waiting up to ``timeout_s``; None if none
        came. Wakes on the watches; re-reads ZooKeeper once at the end."""
        deadline = time.monotonic() + timeout_s

        def found():
            broker = self.leader(topic, partition)
            return broker if broker is not None and broker.id != other_than else None

        with self._lock:
            while not self._closed:
                leaders = self._topics.get(topic)
                broker = None if leaders is None else self._brokers.get(leaders.leader_id(partition))
                if broker is not None and broker.id != other_than:
                    return broker
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._changed.wait(remaining)
        self.refresh(topic)
        return found()

    def close(self) -> None:
        """Stop following (the watches fire into nothing); ends the client if it is ours."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._changed.notify_all()
        self._client.remove_listener(self._on_state)
        if self._owns_client:
            try:
                close_client(self._client)
            except Exception as exc:  # closing must not fail the caller's close
                log.warning("closing the ZooKeeper client: %r", exc)

    # --- reads (the caller's thread, or a kazoo worker after a watch) ---------------

    def _reload_brokers(self) -> None:
        with self._reload_lock:
            infos = read_brokers(self._client, watch=self._on_brokers_event)
        brokers = {info.id: Broker(info.id, info.host, info.port) for info in infos.values()}
        with self._lock:
            if brokers != self._brokers:
                self._brokers = brokers
                self._changed.notify_all()

    def _reload_topic(self, topic: str) -> None:
        with self._reload_lock:
            leaders = read_topic_leaders(self._client, topic, watch=self._on_topic_event)
        with self._lock:
            if self._closed:
                return
            if topic not in self._topics or self._topics[topic] != leaders:
                self._topics[topic] = leaders
                self._changed.notify_all()

    # --- kazoo's threads ----------------------------------------------------------------

    def _on_brokers_event(self, event) -> None:
        if not self._closed:
            self._client.handler.spawn(self._reload_quietly, None)

    def _on_topic_event(self, event) -> None:
        """A watch on a topic node or a partition state fired: re-read that topic."""
        if self._closed:
            return
        rest = event.path[len(layout.BROKER_TOPICS) + 1:]
        topic = rest.split("/", 1)[0]
        if topic:
            self._client.handler.spawn(self._reload_quietly, topic)

    def _on_state(self, state) -> None:
        """kazoo's connection thread (must not block): after a reconnection read everything
        again (a new session has none of the watches; changes may have been missed)."""
        if state == KazooState.CONNECTED and not self._closed:
            self._client.handler.spawn(self._reload_all)

    def _reload_all(self) -> None:
        self._reload_quietly(None)
        with self._lock:
            topics = list(self._topics)
        for topic in topics:
            self._reload_quietly(topic)

    def _reload_quietly(self, topic) -> None:
        if self._closed:
            return
        try:
            if topic is None:
                self._reload_brokers()
            else:
                self._reload_topic(topic)
        except ZK_ERRORS as exc:  # ZooKeeper away: the reconnection reads again
            log.warning("reading %s from ZooKeeper failed (%r); keeping the last known state",
                        "the brokers" if topic is None else f"topic {topic}", exc)
